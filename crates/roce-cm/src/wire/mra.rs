//! MRA, message receipt acknowledgement (IBTA vol. 1 ch. 12, Table 107,
//! attribute 0x0011): "your REQ / REP / LAP arrived, give me longer". The
//! receiver stretches its timeout to the service timeout. Linux sends one
//! only in answer to a duplicate REQ or REP (service timeout 24). Offsets
//! are into the CM data (MAD offset = data offset + 24); bit fields are
//! MSB-first.
//!
//! ```text
//!         0               1               2               3
//!         0 1 2 3 4 5 6 7 0 1 2 3 4 5 6 7 0 1 2 3 4 5 6 7 0 1 2 3 4 5 6 7
//!        +---------------------------------------------------------------+
//!      0 |                     Local Communication ID                    |
//!        +---------------------------------------------------------------+
//!      4 |                    Remote Communication ID                    |
//!        +---+-----------+---------+-----+-------------------------------+
//!      8 |Msg|  reserved |  SvcTO  | res |          Private Data         |
//!        +---+-----------+---------+-----+-------------------------------+
//!     12 |            Private Data (222 bytes, from offset 10)           |
//!        +                                                               +
//!        |                                                               |
//!        +                                                               +
//!    228 |                                                               |
//!        +---------------------------------------------------------------+
//! Msg = message MRAed (0 REQ, 1 REP, 2 LAP), SvcTO = service timeout
//! (5 bits, 4.096 us * 2^t).
//! ```
//!
//! No field is refused (a reserved message-MRAed value decodes as
//! [`MsgResponse::Reserved`]; Linux ignores MRAs it cannot match). Reserved
//! bits are ignored on parse and written as zero.

use super::field::{array_at, put, set_bytes, set_u32, top, u32_at};
use super::mad::CM_DATA_LEN;
use super::rej::MsgResponse;

/// Bytes of private data an MRA carries.
pub const PRIVATE_DATA_LEN: usize = 222;
/// Offset of the private data in the CM data.
pub const PRIVATE_DATA_OFFSET: usize = 10;

/// The meaning of an MRA.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct MraRepr {
    /// The sender's local communication ID.
    pub local_comm_id: u32,
    /// The receiver's local communication ID.
    pub remote_comm_id: u32,
    /// Which message is acknowledged.
    pub message_mraed: MsgResponse,
    /// Service timeout (5 bits).
    pub service_timeout: u8,
    /// Private data.
    pub private_data: [u8; PRIVATE_DATA_LEN],
}

impl MraRepr {
    /// An MRA of `message_mraed` asking for `service_timeout`, without private data.
    pub const fn new(
        local_comm_id: u32,
        remote_comm_id: u32,
        message_mraed: MsgResponse,
        service_timeout: u8,
    ) -> MraRepr {
        MraRepr { local_comm_id, remote_comm_id, message_mraed, service_timeout, private_data: [0; PRIVATE_DATA_LEN] }
    }

    /// Reads an MRA from the CM data of a MAD.
    pub fn parse(d: &[u8; CM_DATA_LEN]) -> MraRepr {
        MraRepr {
            local_comm_id: u32_at(d, 0),
            remote_comm_id: u32_at(d, 4),
            message_mraed: MsgResponse::from_bits(top(d[8], 2)),
            service_timeout: top(d[9], 5),
            private_data: array_at(d, PRIVATE_DATA_OFFSET),
        }
    }

    /// Writes all 232 bytes of CM data; each value is masked to its field.
    pub fn emit(&self, d: &mut [u8; CM_DATA_LEN]) {
        set_u32(d, 0, self.local_comm_id);
        set_u32(d, 4, self.remote_comm_id);
        d[8] = put(self.message_mraed.bits(), 0, 2);
        d[9] = put(self.service_timeout, 0, 5);
        set_bytes(d, PRIVATE_DATA_OFFSET, &self.private_data);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_field_has_its_offset_and_bits() {
        let mut r = MraRepr::new(0x0102_0304, 0x0506_0708, MsgResponse::Other, 24);
        r.private_data[0] = 0x11;
        r.private_data[PRIVATE_DATA_LEN - 1] = 0x22;
        let mut d = [0xa5u8; CM_DATA_LEN];
        r.emit(&mut d);
        // 10 000000: other (LAP); 11000 000: service timeout 24.
        assert_eq!(d[..11], [1, 2, 3, 4, 5, 6, 7, 8, 0x80, 0xc0, 0x11]);
        assert!(d[11..231].iter().all(|&b| b == 0));
        assert_eq!(d[231], 0x22);
        assert_eq!(MraRepr::parse(&d), r);
        d[8] |= 0x3f;
        d[9] |= 0x07;
        assert_eq!(MraRepr::parse(&d), r);
        r.service_timeout = 0xff;
        r.emit(&mut d);
        assert_eq!(MraRepr::parse(&d).service_timeout, 0x1f);
    }
}
