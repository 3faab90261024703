//! DREQ, the disconnect request (IBTA vol. 1 ch. 12, Table 112, attribute
//! 0x0015): either side ends a connection with it. It names the QP it
//! disconnects, the *receiver's* QPN; Linux silently ignores a DREQ whose
//! QPN is not the receiving connection's local QPN (a check for the state
//! machine, not the wire layer). Offsets are into the CM data (MAD offset =
//! data offset + 24).
//!
//! ```text
//!         0               1               2               3
//!         0 1 2 3 4 5 6 7 0 1 2 3 4 5 6 7 0 1 2 3 4 5 6 7 0 1 2 3 4 5 6 7
//!        +---------------------------------------------------------------+
//!      0 |                     Local Communication ID                    |
//!        +---------------------------------------------------------------+
//!      4 |                    Remote Communication ID                    |
//!        +-----------------------------------------------+---------------+
//!      8 |                Remote QPN/EECN                |    reserved   |
//!        +-----------------------------------------------+---------------+
//!     12 |                    Private Data (220 bytes)                   |
//!        +                                                               +
//!        |                                                               |
//!        +                                                               +
//!    228 |                                                               |
//!        +---------------------------------------------------------------+
//! ```
//!
//! The reserved byte is ignored on parse and written as zero.

use super::field::{array_at, set_bytes, set_u24, set_u32, u24_at, u32_at};
use super::mad::CM_DATA_LEN;

/// Bytes of private data a DREQ carries.
pub const PRIVATE_DATA_LEN: usize = 220;
/// Offset of the private data in the CM data.
pub const PRIVATE_DATA_OFFSET: usize = 12;

/// The meaning of a DREQ.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct DreqRepr {
    /// The sender's local communication ID.
    pub local_comm_id: u32,
    /// The receiver's local communication ID.
    pub remote_comm_id: u32,
    /// The receiver's QPN (or EECN for RD; 24 bits).
    pub remote_qpn: u32,
    /// Private data (rdma_cm sends none).
    pub private_data: [u8; PRIVATE_DATA_LEN],
}

impl DreqRepr {
    /// A DREQ for the connection between two comm IDs to `remote_qpn`, without private data.
    pub const fn new(local_comm_id: u32, remote_comm_id: u32, remote_qpn: u32) -> DreqRepr {
        DreqRepr { local_comm_id, remote_comm_id, remote_qpn, private_data: [0; PRIVATE_DATA_LEN] }
    }

    /// Reads a DREQ from the CM data of a MAD.
    pub fn parse(d: &[u8; CM_DATA_LEN]) -> DreqRepr {
        DreqRepr {
            local_comm_id: u32_at(d, 0),
            remote_comm_id: u32_at(d, 4),
            remote_qpn: u24_at(d, 8),
            private_data: array_at(d, PRIVATE_DATA_OFFSET),
        }
    }

    /// Writes all 232 bytes of CM data; the QPN is masked to 24 bits.
    pub fn emit(&self, d: &mut [u8; CM_DATA_LEN]) {
        set_u32(d, 0, self.local_comm_id);
        set_u32(d, 4, self.remote_comm_id);
        set_u24(d, 8, self.remote_qpn);
        d[11] = 0;
        set_bytes(d, PRIVATE_DATA_OFFSET, &self.private_data);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_field_has_its_offset() {
        let mut r = DreqRepr::new(0x0102_0304, 0xa1b2_c3d4, 0x12_3456);
        r.private_data[0] = 0x11;
        r.private_data[PRIVATE_DATA_LEN - 1] = 0x22;
        let mut d = [0xa5u8; CM_DATA_LEN];
        r.emit(&mut d);
        assert_eq!(d[..13], [1, 2, 3, 4, 0xa1, 0xb2, 0xc3, 0xd4, 0x12, 0x34, 0x56, 0, 0x11]);
        assert!(d[13..CM_DATA_LEN - 1].iter().all(|&b| b == 0));
        assert_eq!(d[CM_DATA_LEN - 1], 0x22);
        assert_eq!(DreqRepr::parse(&d), r);
        d[11] = 0xff;
        assert_eq!(DreqRepr::parse(&d), r);
        r.remote_qpn = 0xff00_0001;
        r.emit(&mut d);
        assert_eq!(DreqRepr::parse(&d).remote_qpn, 1);
    }
}
