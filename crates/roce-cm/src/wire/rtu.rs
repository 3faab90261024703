//! RTU, ready to use (IBTA vol. 1 ch. 12, Table 111, attribute 0x0014): the
//! active side's answer to a REP. Once the passive side receives it, the
//! connection is established. rdma_cm sends no private data in it. Offsets
//! are into the CM data (MAD offset = data offset + 24).
//!
//! ```text
//!         0               1               2               3
//!         0 1 2 3 4 5 6 7 0 1 2 3 4 5 6 7 0 1 2 3 4 5 6 7 0 1 2 3 4 5 6 7
//!        +---------------------------------------------------------------+
//!      0 |                     Local Communication ID                    |
//!        +---------------------------------------------------------------+
//!      4 |                    Remote Communication ID                    |
//!        +---------------------------------------------------------------+
//!      8 |                    Private Data (224 bytes)                   |
//!        +                                                               +
//!        |                                                               |
//!        +                                                               +
//!    228 |                                                               |
//!        +---------------------------------------------------------------+
//! ```

use super::field::{array_at, set_bytes, set_u32, u32_at};
use super::mad::CM_DATA_LEN;

/// Bytes of private data an RTU carries.
pub const PRIVATE_DATA_LEN: usize = 224;
/// Offset of the private data in the CM data.
pub const PRIVATE_DATA_OFFSET: usize = 8;

/// The meaning of an RTU.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct RtuRepr {
    /// The sender's (active side's) local communication ID.
    pub local_comm_id: u32,
    /// The REP's local communication ID.
    pub remote_comm_id: u32,
    /// Private data (rdma_cm sends none).
    pub private_data: [u8; PRIVATE_DATA_LEN],
}

impl RtuRepr {
    /// A RTU between two comm IDs, without private data.
    pub const fn new(local_comm_id: u32, remote_comm_id: u32) -> RtuRepr {
        RtuRepr { local_comm_id, remote_comm_id, private_data: [0; PRIVATE_DATA_LEN] }
    }

    /// Reads an RTU from the CM data of a MAD.
    pub fn parse(d: &[u8; CM_DATA_LEN]) -> RtuRepr {
        RtuRepr {
            local_comm_id: u32_at(d, 0),
            remote_comm_id: u32_at(d, 4),
            private_data: array_at(d, PRIVATE_DATA_OFFSET),
        }
    }

    /// Writes all 232 bytes of CM data.
    pub fn emit(&self, d: &mut [u8; CM_DATA_LEN]) {
        set_u32(d, 0, self.local_comm_id);
        set_u32(d, 4, self.remote_comm_id);
        set_bytes(d, PRIVATE_DATA_OFFSET, &self.private_data);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_field_has_its_offset() {
        let mut r = RtuRepr::new(0x0102_0304, 0xa1b2_c3d4);
        r.private_data[0] = 0x11;
        r.private_data[PRIVATE_DATA_LEN - 1] = 0x22;
        let mut d = [0xa5u8; CM_DATA_LEN];
        r.emit(&mut d);
        assert_eq!(d[..9], [1, 2, 3, 4, 0xa1, 0xb2, 0xc3, 0xd4, 0x11]);
        assert!(d[9..CM_DATA_LEN - 1].iter().all(|&b| b == 0));
        assert_eq!(d[CM_DATA_LEN - 1], 0x22);
        assert_eq!(RtuRepr::parse(&d), r);
    }
}
