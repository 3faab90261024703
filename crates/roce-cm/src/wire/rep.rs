//! REP, the reply to a REQ (IBTA vol. 1 ch. 12, Table 110, attribute 0x0013):
//! the passive side's QPN, starting PSN, RDMA resources and 196 bytes of
//! private data (rdma_cm puts no header of its own here). Offsets are into
//! the CM data (MAD offset = data offset + 24); bit fields are MSB-first.
//!
//! ```text
//!         0               1               2               3
//!         0 1 2 3 4 5 6 7 0 1 2 3 4 5 6 7 0 1 2 3 4 5 6 7 0 1 2 3 4 5 6 7
//!        +---------------------------------------------------------------+
//!      0 |                     Local Communication ID                    |
//!        +---------------------------------------------------------------+
//!      4 |                    Remote Communication ID                    |
//!        +---------------------------------------------------------------+
//!      8 |                          Local Q_Key                          |
//!        +-----------------------------------------------+---------------+
//!     12 |                   Local QPN                   |   VendorID H  |
//!        +-----------------------------------------------+---------------+
//!     16 |            Local EE Context Number            |   VendorID M  |
//!        +-----------------------------------------------+---------------+
//!     20 |                  Starting PSN                 |   VendorID L  |
//!        +---------------+---------------+---------+---+-+-----+-+-------+
//!     24 |    RespRes    |   InitDepth   | AckDelay| FO|E| RNR |S|  res  |
//!        +---------------+---------------+---------+---+-+-----+-+-------+
//!     28 |                         Local CA GUID                         |
//!        +                                                               +
//!     32 |                                                               |
//!        +---------------------------------------------------------------+
//!     36 |                    Private Data (196 bytes)                   |
//!        +                                                               +
//!        |                                                               |
//!        +                                                               +
//!    228 |                                                               |
//!        +---------------------------------------------------------------+
//! RespRes / InitDepth = responder resources / initiator depth,
//! AckDelay = target ACK delay, FO = failover accepted,
//! E = end-to-end flow control, RNR = RNR retry count, S = SRQ.
//! VendorID H, M, L are the high, middle and low bytes of the ECE vendor ID.
//! ```
//!
//! No field is refused (Linux takes every value); the reserved bits are
//! ignored on parse and written as zero.

use roce_wire::Psn;

use super::field::{array_at, bits, put, set_bytes, set_u24, set_u32, set_u64, top, u24_at, u32_at, u64_at};
use super::mad::CM_DATA_LEN;

/// Bytes of private data a REP carries.
pub const PRIVATE_DATA_LEN: usize = 196;
/// Offset of the private data in the CM data.
pub const PRIVATE_DATA_OFFSET: usize = 36;

/// The meaning of a REP.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct RepRepr {
    /// The sender's (passive side's) local communication ID.
    pub local_comm_id: u32,
    /// The REQ's local communication ID.
    pub remote_comm_id: u32,
    /// Local Q_Key (0 for RC).
    pub local_qkey: u32,
    /// Local QPN (24 bits).
    pub local_qpn: u32,
    /// Local EE context number (24 bits).
    pub local_eecn: u32,
    /// The PSN the sender's QP starts receiving at (what the active side sends with).
    pub starting_psn: Psn,
    /// Vendor ID (24 bits, split over the VendorID H/M/L bytes; ECE).
    pub vendor_id: u32,
    /// Responder resources.
    pub responder_resources: u8,
    /// Initiator depth.
    pub initiator_depth: u8,
    /// Target ACK delay (5 bits; the device's local CA ACK delay, 15 on rxe).
    pub target_ack_delay: u8,
    /// Failover accepted (2 bits: 0 accepted, 1 not supported, 2 rejected).
    pub failover_accepted: u8,
    /// End-to-end flow control.
    pub end_to_end_flow_control: bool,
    /// RNR retry count (3 bits).
    pub rnr_retry_count: u8,
    /// The sender's QP uses an SRQ.
    pub srq: bool,
    /// The sender's CA GUID.
    pub local_ca_guid: u64,
    /// Private data.
    pub private_data: [u8; PRIVATE_DATA_LEN],
}

impl Default for RepRepr {
    /// The REP of 232 zero bytes.
    fn default() -> RepRepr {
        RepRepr::parse(&[0; CM_DATA_LEN])
    }
}

impl RepRepr {
    /// Reads a REP from the CM data of a MAD.
    pub fn parse(d: &[u8; CM_DATA_LEN]) -> RepRepr {
        RepRepr {
            local_comm_id: u32_at(d, 0),
            remote_comm_id: u32_at(d, 4),
            local_qkey: u32_at(d, 8),
            local_qpn: u24_at(d, 12),
            local_eecn: u24_at(d, 16),
            starting_psn: Psn::new(u24_at(d, 20)),
            vendor_id: u32::from_be_bytes([0, d[15], d[19], d[23]]),
            responder_resources: d[24],
            initiator_depth: d[25],
            target_ack_delay: top(d[26], 5),
            failover_accepted: bits(d[26], 5, 2),
            end_to_end_flow_control: bits(d[26], 7, 1) != 0,
            rnr_retry_count: top(d[27], 3),
            srq: bits(d[27], 3, 1) != 0,
            local_ca_guid: u64_at(d, 28),
            private_data: array_at(d, PRIVATE_DATA_OFFSET),
        }
    }

    /// Writes all 232 bytes of CM data; each value is masked to its field.
    pub fn emit(&self, d: &mut [u8; CM_DATA_LEN]) {
        d.fill(0);
        set_u32(d, 0, self.local_comm_id);
        set_u32(d, 4, self.remote_comm_id);
        set_u32(d, 8, self.local_qkey);
        let [_, vh, vm, vl] = self.vendor_id.to_be_bytes();
        set_u24(d, 12, self.local_qpn);
        d[15] = vh;
        set_u24(d, 16, self.local_eecn);
        d[19] = vm;
        set_u24(d, 20, self.starting_psn.value());
        d[23] = vl;
        d[24] = self.responder_resources;
        d[25] = self.initiator_depth;
        d[26] = put(self.target_ack_delay, 0, 5)
            | put(self.failover_accepted, 5, 2)
            | put(u8::from(self.end_to_end_flow_control), 7, 1);
        d[27] = put(self.rnr_retry_count, 0, 3) | put(u8::from(self.srq), 3, 1);
        set_u64(d, 28, self.local_ca_guid);
        set_bytes(d, PRIVATE_DATA_OFFSET, &self.private_data);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> RepRepr {
        let mut private_data = [0u8; PRIVATE_DATA_LEN];
        for (i, b) in private_data.iter_mut().enumerate() {
            *b = (i as u8).wrapping_mul(7);
        }
        RepRepr {
            local_comm_id: 0x0102_0304,
            remote_comm_id: 0x0506_0708,
            local_qkey: 0x090a_0b0c,
            local_qpn: 0x0d_0e0f,
            local_eecn: 0x10_1112,
            starting_psn: Psn::new(0x13_1415),
            vendor_id: 0xaa_bbcc,
            responder_resources: 0x16,
            initiator_depth: 0x17,
            target_ack_delay: 0x11,
            failover_accepted: 2,
            end_to_end_flow_control: true,
            rnr_retry_count: 5,
            srq: true,
            local_ca_guid: 0x1819_1a1b_1c1d_1e1f,
            private_data,
        }
    }

    #[test]
    fn every_field_has_its_offset_and_bits() {
        let r = sample();
        let mut d = [0xa5u8; CM_DATA_LEN];
        r.emit(&mut d);
        assert_eq!(
            d[..36],
            [
                1, 2, 3, 4, 5, 6, 7, 8, 9, 0xa, 0xb, 0xc, 0xd, 0xe, 0xf, 0xaa, 0x10, 0x11, 0x12, 0xbb, 0x13, 0x14,
                0x15, 0xcc, 0x16, 0x17, 0x8d, // 10001 10 1: ACK delay 0x11, failover rejected, flow control
                0xb0, // 101 1 0000: RNR retry 5, SRQ
                0x18, 0x19, 0x1a, 0x1b, 0x1c, 0x1d, 0x1e, 0x1f,
            ]
        );
        assert_eq!(d[36..], r.private_data);
        assert_eq!(RepRepr::parse(&d), r);
        // The reserved low nibble of byte 27 is ignored.
        d[27] |= 0x0f;
        assert_eq!(RepRepr::parse(&d), r);
    }

    #[test]
    fn zero_bytes_are_the_default() {
        let z = RepRepr::default();
        assert_eq!((z.local_comm_id, z.starting_psn, z.private_data), (0, Psn::ZERO, [0; PRIVATE_DATA_LEN]));
        let mut d = [1u8; CM_DATA_LEN];
        z.emit(&mut d);
        assert_eq!(d, [0; CM_DATA_LEN]);
    }
}
