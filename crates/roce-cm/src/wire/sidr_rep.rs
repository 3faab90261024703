//! SIDR_REP, service ID resolution reply (IBTA vol. 1 ch. 12, Table 120,
//! attribute 0x0018): the server's QPN and Q_Key for a SIDR_REQ, or why not.
//! Offsets are into the CM data (MAD offset = data offset + 24).
//!
//! ```text
//!         0               1               2               3
//!         0 1 2 3 4 5 6 7 0 1 2 3 4 5 6 7 0 1 2 3 4 5 6 7 0 1 2 3 4 5 6 7
//!        +---------------------------------------------------------------+
//!      0 |                           Request ID                          |
//!        +---------------+---------------+-------------------------------+
//!      4 |     Status    |   InfoLength  |          Vendor ID H          |
//!        +---------------+---------------+---------------+---------------+
//!      8 |                      QPN                      |   VendorID L  |
//!        +-----------------------------------------------+---------------+
//!     12 |                           Service ID                          |
//!        +                                                               +
//!     16 |                                                               |
//!        +---------------------------------------------------------------+
//!     20 |                             Q_Key                             |
//!        +---------------------------------------------------------------+
//!     24 |               Additional Information (72 bytes)               |
//!        +                                                               +
//!        |                                                               |
//!        +                                                               +
//!     92 |                                                               |
//!        +---------------------------------------------------------------+
//!     96 |                    Private Data (136 bytes)                   |
//!        +                                                               +
//!        |                                                               |
//!        +                                                               +
//!    228 |                                                               |
//!        +---------------------------------------------------------------+
//! InfoLength = meaningful bytes of Additional Information (a ClassPortInfo
//! for a redirect). Vendor ID H (16 bits) and L (8 bits) are the 24-bit ECE
//! vendor ID.
//! ```
//!
//! No field is refused: the status is a number (unknown ones are kept) and
//! an additional-information length above 72 is kept as received
//! ([`SidrRepRepr::info_bytes`] clamps it).

use core::fmt;

use super::field::{array_at, set_bytes, set_u24, set_u32, set_u64, u24_at, u32_at, u64_at};
use super::mad::CM_DATA_LEN;

/// Bytes of private data a SIDR_REP carries.
pub const PRIVATE_DATA_LEN: usize = 136;
/// Offset of the private data in the CM data.
pub const PRIVATE_DATA_OFFSET: usize = 96;
/// Bytes of the additional information field.
pub const INFO_LEN: usize = 72;
const INFO_OFFSET: usize = 24;

/// A SIDR_REP status (8 bits). The IBTA's codes are the constants below;
/// any other value is carried as is.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct SidrStatus(pub u8);

impl SidrStatus {
    /// 0: the QPN and Q_Key are valid.
    pub const SUCCESS: SidrStatus = SidrStatus(0);
    /// 1: no listener for the service ID.
    pub const UNSUPPORTED: SidrStatus = SidrStatus(1);
    /// 2: the listener rejected the request (rdma_reject on a UD id).
    pub const REJECT: SidrStatus = SidrStatus(2);
    /// 3: no QP.
    pub const NO_QP: SidrStatus = SidrStatus(3);
    /// 4: redirect (Additional Information holds a ClassPortInfo).
    pub const REDIRECT: SidrStatus = SidrStatus(4);
    /// 5: unsupported version.
    pub const UNSUPPORTED_VERSION: SidrStatus = SidrStatus(5);

    /// The status's name, or `None` for a code the IBTA does not define.
    pub const fn description(self) -> Option<&'static str> {
        match self.0 {
            0 => Some("success"),
            1 => Some("service ID not supported"),
            2 => Some("rejected"),
            3 => Some("no QP"),
            4 => Some("redirect"),
            5 => Some("unsupported version"),
            _ => None,
        }
    }
}

impl fmt::Debug for SidrStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "SidrStatus({} {})", self.0, self.description().unwrap_or("unknown"))
    }
}

/// The meaning of a SIDR_REP.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct SidrRepRepr {
    /// The SIDR_REQ's request ID.
    pub request_id: u32,
    /// Status.
    pub status: SidrStatus,
    /// Meaningful bytes of `info` (as received; see [`Self::info_bytes`]).
    pub info_length: u8,
    /// Vendor ID (24 bits: Vendor ID H, then L; ECE).
    pub vendor_id: u32,
    /// The server's UD QPN (24 bits).
    pub qpn: u32,
    /// The service ID resolved (echoed from the SIDR_REQ).
    pub service_id: u64,
    /// The Q_Key to send with (rdma_cm: 0x01234567 unless the id set another).
    pub qkey: u32,
    /// Additional information.
    pub info: [u8; INFO_LEN],
    /// Private data.
    pub private_data: [u8; PRIVATE_DATA_LEN],
}

impl SidrRepRepr {
    /// A SIDR_REP with `status`, without additional information or private data.
    pub const fn new(request_id: u32, status: SidrStatus, qpn: u32, service_id: u64, qkey: u32) -> SidrRepRepr {
        SidrRepRepr {
            request_id,
            status,
            info_length: 0,
            vendor_id: 0,
            qpn,
            service_id,
            qkey,
            info: [0; INFO_LEN],
            private_data: [0; PRIVATE_DATA_LEN],
        }
    }

    /// The meaningful additional information: the first `info_length` bytes, at most 72.
    pub fn info_bytes(&self) -> &[u8] {
        &self.info[..usize::from(self.info_length).min(INFO_LEN)]
    }

    /// Reads a SIDR_REP from the CM data of a MAD.
    pub fn parse(d: &[u8; CM_DATA_LEN]) -> SidrRepRepr {
        SidrRepRepr {
            request_id: u32_at(d, 0),
            status: SidrStatus(d[4]),
            info_length: d[5],
            vendor_id: u32::from_be_bytes([0, d[6], d[7], d[11]]),
            qpn: u24_at(d, 8),
            service_id: u64_at(d, 12),
            qkey: u32_at(d, 20),
            info: array_at(d, INFO_OFFSET),
            private_data: array_at(d, PRIVATE_DATA_OFFSET),
        }
    }

    /// Writes all 232 bytes of CM data; each value is masked to its field.
    pub fn emit(&self, d: &mut [u8; CM_DATA_LEN]) {
        let [_, vh, vm, vl] = self.vendor_id.to_be_bytes();
        set_u32(d, 0, self.request_id);
        d[4] = self.status.0;
        d[5] = self.info_length;
        d[6] = vh;
        d[7] = vm;
        set_u24(d, 8, self.qpn);
        d[11] = vl;
        set_u64(d, 12, self.service_id);
        set_u32(d, 20, self.qkey);
        set_bytes(d, INFO_OFFSET, &self.info);
        set_bytes(d, PRIVATE_DATA_OFFSET, &self.private_data);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_field_has_its_offset() {
        let mut r = SidrRepRepr::new(0x0102_0304, SidrStatus::REDIRECT, 0x12_3456, 0x0000_0000_0111_1c06, 0x0123_4567);
        r.info_length = 72;
        r.vendor_id = 0xab_cdef;
        r.info[0] = 0x33;
        r.info[INFO_LEN - 1] = 0x44;
        r.private_data[0] = 0x11;
        r.private_data[PRIVATE_DATA_LEN - 1] = 0x22;
        let mut d = [0xa5u8; CM_DATA_LEN];
        r.emit(&mut d);
        assert_eq!(
            d[..25],
            [
                1, 2, 3, 4, 4, 72, 0xab, 0xcd, 0x12, 0x34, 0x56, 0xef, 0, 0, 0, 0, 0x01, 0x11, 0x1c, 0x06, 0x01, 0x23,
                0x45, 0x67, 0x33
            ]
        );
        assert_eq!((d[95], d[96], d[231]), (0x44, 0x11, 0x22));
        assert!(d[25..95].iter().chain(&d[97..231]).all(|&b| b == 0));
        assert_eq!(SidrRepRepr::parse(&d), r);
        assert_eq!(r.info_bytes().len(), 72);
    }

    #[test]
    fn lenient_values_are_kept() {
        let mut d = [0u8; CM_DATA_LEN];
        d[4] = 0x99;
        d[5] = 0xff;
        let r = SidrRepRepr::parse(&d);
        assert_eq!((r.status, r.status.description()), (SidrStatus(0x99), None));
        assert_eq!((r.info_length, r.info_bytes().len()), (0xff, INFO_LEN));
        let mut out = [1u8; CM_DATA_LEN];
        r.emit(&mut out);
        assert_eq!(out, d);
        assert_eq!(format!("{:?}", SidrStatus::UNSUPPORTED), "SidrStatus(1 service ID not supported)");
    }
}
