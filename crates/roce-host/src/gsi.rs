//! Which member a packet for QP 1 (the GSI QP, the CM's) belongs to. QP 1
//! is host-wide: every member with a CM has its own QP 1, and the kernel
//! hands a MAD to any of them (block 0 is steered to nobody). The member
//! that gets it reads just enough of the MAD to hand it on:
//!
//! ```text
//!  packet: | BTH (12) | DETH (8) | MAD: common header (24) | CM data (232) |
//!  MAD offset 16: attribute ID
//!  CM data offset 0: REQ local comm ID / SIDR_REQ and SIDR_REP request ID
//!  CM data offset 4: MRA, REJ, REP, RTU, DREQ, DREP remote comm ID
//!  CM data offset 8: REQ and SIDR_REQ service ID
//! ```
//!
//! - a REQ or SIDR_REQ goes to the member listening on its service ID
//!   (the device file's service table);
//! - any other message names this side's comm ID (or SIDR request ID),
//!   whose low [`COMM_ID_TAG_BITS`] bits are the owning member's slot;
//! - what names no live member goes to any member with a CM, which answers
//!   as Linux does (REJ 8 to a REQ nobody listens for, a DREP to a DREQ for
//!   a connection gone) or counts and drops it.

/// Low bits of every comm ID and SIDR request ID a member's CM picks: its
/// slot in the device file (`MAX_MEMBERS` is 256).
pub const COMM_ID_TAG_BITS: u32 = 8;

const BTH_DETH: usize = 20;
const CM_DATA: usize = BTH_DETH + 24;

/// What a MAD names its owner by.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MadOwner {
    /// A listener's service ID (REQ, SIDR_REQ).
    Service(u64),
    /// A member's slot, from the comm ID or request ID it names.
    Slot(usize),
    /// Nothing this side made or listens on (not a CM MAD, too short).
    Any,
}

/// The owner a packet for QP 1 names (`packet` from the BTH on).
pub fn mad_owner(packet: &[u8]) -> MadOwner {
    let u32_at = |at: usize| packet.get(at..at + 4).map(|b| u32::from_be_bytes([b[0], b[1], b[2], b[3]]));
    let u64_at = |at: usize| packet.get(at..at + 8).map(|b| u64::from_be_bytes(b.try_into().expect("8 bytes")));
    // Only the CM class is routed by its contents.
    if packet.get(BTH_DETH + 1) != Some(&0x07) {
        return MadOwner::Any;
    }
    let Some(attr) = packet.get(BTH_DETH + 16..BTH_DETH + 18).map(|b| u16::from_be_bytes([b[0], b[1]])) else {
        return MadOwner::Any;
    };
    let slot =
        |id: Option<u32>| id.map_or(MadOwner::Any, |id| MadOwner::Slot((id & ((1 << COMM_ID_TAG_BITS) - 1)) as usize));
    match attr {
        // REQ, SIDR_REQ
        0x0010 | 0x0017 => u64_at(CM_DATA + 8).map_or(MadOwner::Any, MadOwner::Service),
        // MRA, REJ, REP, RTU, DREQ, DREP
        0x0011..=0x0016 => slot(u32_at(CM_DATA + 4)),
        // SIDR_REP
        0x0018 => slot(u32_at(CM_DATA)),
        _ => MadOwner::Any,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mad(attr: u16, data: &[(usize, &[u8])]) -> Vec<u8> {
        let mut p = vec![0u8; BTH_DETH + 256];
        p[BTH_DETH + 1] = 0x07;
        p[BTH_DETH + 16..BTH_DETH + 18].copy_from_slice(&attr.to_be_bytes());
        for (at, b) in data {
            p[CM_DATA + at..CM_DATA + at + b.len()].copy_from_slice(b);
        }
        p
    }

    #[test]
    fn each_message_names_its_owner() {
        let sid = 0x0000_0000_0106_1c06u64.to_be_bytes();
        assert_eq!(mad_owner(&mad(0x10, &[(0, &[9, 9, 9, 9]), (8, &sid)])), MadOwner::Service(0x1061c06));
        assert_eq!(mad_owner(&mad(0x17, &[(8, &sid)])), MadOwner::Service(0x1061c06));
        for attr in 0x11..=0x16 {
            assert_eq!(mad_owner(&mad(attr, &[(0, &[0, 0, 0, 7]), (4, &[0xab, 0xcd, 0xef, 0x05])])), MadOwner::Slot(5));
        }
        assert_eq!(mad_owner(&mad(0x18, &[(0, &[1, 2, 3, 0x2a])])), MadOwner::Slot(0x2a));
        assert_eq!(mad_owner(&mad(0x01, &[])), MadOwner::Any, "ClassPortInfo");
        let mut sa = mad(0x10, &[(8, &sid)]);
        sa[BTH_DETH + 1] = 0x03;
        assert_eq!(mad_owner(&sa), MadOwner::Any, "another class");
        for n in [0, 10, BTH_DETH + 17, CM_DATA + 7, CM_DATA + 15] {
            let p = &mad(0x10, &[(8, &sid)])[..n];
            assert_eq!(mad_owner(p), MadOwner::Any, "{n} bytes");
        }
        assert_eq!(mad_owner(&mad(0x14, &[])[..CM_DATA + 7]), MadOwner::Any);
    }
}
