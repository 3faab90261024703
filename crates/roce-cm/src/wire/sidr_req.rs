//! SIDR_REQ, service ID resolution request (IBTA vol. 1 ch. 12, Table 119,
//! attribute 0x0017): how a UD client (rdma_cm `RDMA_PS_UDP` / `RDMA_PS_IB`)
//! asks a server for the QPN and Q_Key behind a service ID. rdma_cm starts
//! the 216 bytes of private data with its [`cma_hdr`](super::cma_hdr), which
//! leaves 180 for the user. Offsets are into the CM data (MAD offset = data
//! offset + 24).
//!
//! ```text
//!         0               1               2               3
//!         0 1 2 3 4 5 6 7 0 1 2 3 4 5 6 7 0 1 2 3 4 5 6 7 0 1 2 3 4 5 6 7
//!        +---------------------------------------------------------------+
//!      0 |                           Request ID                          |
//!        +-------------------------------+-------------------------------+
//!      4 |         Partition Key         |            reserved           |
//!        +-------------------------------+-------------------------------+
//!      8 |                           Service ID                          |
//!        +                                                               +
//!     12 |                                                               |
//!        +---------------------------------------------------------------+
//!     16 |                    Private Data (216 bytes)                   |
//!        +                                                               +
//!        |                                                               |
//!        +                                                               +
//!    228 |                                                               |
//!        +---------------------------------------------------------------+
//! ```
//!
//! The request ID plays the comm ID's part (Linux: the sender's local ID).
//! The reserved bytes are ignored on parse and written as zero.

use super::field::{array_at, set_bytes, set_u16, set_u32, set_u64, u16_at, u32_at, u64_at};
use super::mad::CM_DATA_LEN;

/// Bytes of private data a SIDR_REQ carries.
pub const PRIVATE_DATA_LEN: usize = 216;
/// Offset of the private data in the CM data.
pub const PRIVATE_DATA_OFFSET: usize = 16;

/// The meaning of a SIDR_REQ.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct SidrReqRepr {
    /// Request ID (the sender's local ID; the SIDR_REP echoes it).
    pub request_id: u32,
    /// Partition key.
    pub pkey: u16,
    /// The service ID to resolve.
    pub service_id: u64,
    /// Private data (rdma_cm: a 36-byte cma_hdr, then the user's 180 bytes).
    pub private_data: [u8; PRIVATE_DATA_LEN],
}

impl SidrReqRepr {
    /// A SIDR_REQ without private data.
    pub const fn new(request_id: u32, pkey: u16, service_id: u64) -> SidrReqRepr {
        SidrReqRepr { request_id, pkey, service_id, private_data: [0; PRIVATE_DATA_LEN] }
    }

    /// Reads a SIDR_REQ from the CM data of a MAD.
    pub fn parse(d: &[u8; CM_DATA_LEN]) -> SidrReqRepr {
        SidrReqRepr {
            request_id: u32_at(d, 0),
            pkey: u16_at(d, 4),
            service_id: u64_at(d, 8),
            private_data: array_at(d, PRIVATE_DATA_OFFSET),
        }
    }

    /// Writes all 232 bytes of CM data.
    pub fn emit(&self, d: &mut [u8; CM_DATA_LEN]) {
        set_u32(d, 0, self.request_id);
        set_u16(d, 4, self.pkey);
        set_u16(d, 6, 0);
        set_u64(d, 8, self.service_id);
        set_bytes(d, PRIVATE_DATA_OFFSET, &self.private_data);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_field_has_its_offset() {
        let mut r = SidrReqRepr::new(0x0102_0304, 0xffff, 0x0000_0000_0111_1c06);
        r.private_data[0] = 0x11;
        r.private_data[PRIVATE_DATA_LEN - 1] = 0x22;
        let mut d = [0xa5u8; CM_DATA_LEN];
        r.emit(&mut d);
        assert_eq!(d[..17], [1, 2, 3, 4, 0xff, 0xff, 0, 0, 0, 0, 0, 0, 0x01, 0x11, 0x1c, 0x06, 0x11]);
        assert!(d[17..231].iter().all(|&b| b == 0));
        assert_eq!(d[231], 0x22);
        assert_eq!(SidrReqRepr::parse(&d), r);
        d[6] = 0xff;
        d[7] = 0x01;
        assert_eq!(SidrReqRepr::parse(&d), r);
    }
}
