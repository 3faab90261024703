//! REJ, the reject (IBTA vol. 1 ch. 12, Table 108, attribute 0x0012): ends
//! a connection attempt in answer to a REQ or a REP (or unprompted), with a
//! reason, up to 72 bytes of additional rejection information (ARI) and 148
//! bytes of private data. Offsets are into the CM data (MAD offset = data
//! offset + 24); bit fields are MSB-first.
//!
//! ```text
//!         0               1               2               3
//!         0 1 2 3 4 5 6 7 0 1 2 3 4 5 6 7 0 1 2 3 4 5 6 7 0 1 2 3 4 5 6 7
//!        +---------------------------------------------------------------+
//!      0 |                     Local Communication ID                    |
//!        +---------------------------------------------------------------+
//!      4 |                    Remote Communication ID                    |
//!        +---+-----------+-------------+-+-------------------------------+
//!      8 |Msg|  reserved |  InfoLength |r|             Reason            |
//!        +---+-----------+-------------+-+-------------------------------+
//!     12 |          Additional Rejection Information (72 bytes)          |
//!        +                                                               +
//!        |                                                               |
//!        +                                                               +
//!     80 |                                                               |
//!        +---------------------------------------------------------------+
//!     84 |                    Private Data (148 bytes)                   |
//!        +                                                               +
//!        |                                                               |
//!        +                                                               +
//!    228 |                                                               |
//!        +---------------------------------------------------------------+
//! Msg = message rejected (0 REQ, 1 REP, 2 other), InfoLength = ARI bytes
//! that are meaningful (7 bits), r = reserved.
//! ```
//!
//! The local comm ID is 0 when rejecting a REQ not yet answered. No field is
//! refused: Linux passes the reason and the ARI length up as they are, so
//! an ARI length above 72 is kept as received ([`RejRepr::ari_bytes`]
//! clamps it), a reserved message-rejected value decodes as
//! [`MsgResponse::Reserved`] and an unknown reason is just a number.
//! Reserved bits are ignored on parse and written as zero.

use core::fmt;

use super::field::{array_at, put, set_bytes, set_u16, set_u32, top, u16_at, u32_at};
use super::mad::CM_DATA_LEN;

/// Bytes of private data a REJ carries.
pub const PRIVATE_DATA_LEN: usize = 148;
/// Offset of the private data in the CM data.
pub const PRIVATE_DATA_OFFSET: usize = 84;
/// Bytes of the additional rejection information field.
pub const ARI_LEN: usize = 72;
const ARI_OFFSET: usize = 12;

/// Which message a REJ rejects or an MRA acknowledges (2 bits; Linux
/// `cm_msg_response`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum MsgResponse {
    /// 0: a REQ.
    #[default]
    Req,
    /// 1: a REP.
    Rep,
    /// 2: another message (REJ: a timeout or an unprompted reject; MRA: a LAP).
    Other,
    /// 3: reserved (Linux treats it like `Other`).
    Reserved,
}

impl MsgResponse {
    /// Decodes the 2-bit field (upper bits are ignored).
    pub const fn from_bits(b: u8) -> MsgResponse {
        match b & 3 {
            0 => MsgResponse::Req,
            1 => MsgResponse::Rep,
            2 => MsgResponse::Other,
            _ => MsgResponse::Reserved,
        }
    }

    /// The 2-bit field.
    pub const fn bits(self) -> u8 {
        match self {
            MsgResponse::Req => 0,
            MsgResponse::Rep => 1,
            MsgResponse::Other => 2,
            MsgResponse::Reserved => 3,
        }
    }
}

/// A REJ reason code (16 bits). The IBTA's codes are the constants below;
/// any other value is carried as is.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct RejReason(pub u16);

macro_rules! reasons {
    ($($name:ident = $v:expr, $text:literal;)*) => {
        impl RejReason {
            $(
                #[doc = concat!($v, ": ", $text, ".")]
                pub const $name: RejReason = RejReason($v);
            )*

            /// The reason's name as Linux `ibcm_reject_msg` words it, or `None`.
            pub const fn description(self) -> Option<&'static str> {
                match self.0 {
                    $($v => Some($text),)*
                    _ => None,
                }
            }
        }
    };
}

reasons! {
    NO_QP = 1, "no QP";
    NO_EEC = 2, "no EEC";
    NO_RESOURCES = 3, "no resources";
    TIMEOUT = 4, "timeout";
    UNSUPPORTED = 5, "unsupported";
    INVALID_COMM_ID = 6, "invalid comm ID";
    INVALID_COMM_INSTANCE = 7, "invalid comm instance";
    INVALID_SERVICE_ID = 8, "invalid service ID";
    INVALID_TRANSPORT_TYPE = 9, "invalid transport type";
    STALE_CONN = 10, "stale connection";
    RDC_NOT_EXIST = 11, "RDC not exist";
    INVALID_GID = 12, "invalid GID";
    INVALID_LID = 13, "invalid LID";
    INVALID_SL = 14, "invalid SL";
    INVALID_TRAFFIC_CLASS = 15, "invalid traffic class";
    INVALID_HOP_LIMIT = 16, "invalid hop limit";
    INVALID_PACKET_RATE = 17, "invalid packet rate";
    INVALID_ALT_GID = 18, "invalid alternate GID";
    INVALID_ALT_LID = 19, "invalid alternate LID";
    INVALID_ALT_SL = 20, "invalid alternate SL";
    INVALID_ALT_TRAFFIC_CLASS = 21, "invalid alternate traffic class";
    INVALID_ALT_HOP_LIMIT = 22, "invalid alternate hop limit";
    INVALID_ALT_PACKET_RATE = 23, "invalid alternate packet rate";
    PORT_CM_REDIRECT = 24, "port CM redirect";
    PORT_REDIRECT = 25, "port redirect";
    INVALID_MTU = 26, "invalid MTU";
    INSUFFICIENT_RESP_RESOURCES = 27, "insufficient response resources";
    CONSUMER_DEFINED = 28, "consumer defined";
    INVALID_RNR_RETRY = 29, "invalid RNR retry";
    DUPLICATE_LOCAL_COMM_ID = 30, "duplicate local comm ID";
    INVALID_CLASS_VERSION = 31, "invalid class version";
    INVALID_FLOW_LABEL = 32, "invalid flow label";
    INVALID_ALT_FLOW_LABEL = 33, "invalid alternate flow label";
    VENDOR_OPTION_NOT_SUPPORTED = 35, "vendor option is not supported";
}

impl fmt::Debug for RejReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "RejReason({} {})", self.0, self.description().unwrap_or("unknown"))
    }
}

/// The meaning of a REJ.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct RejRepr {
    /// The sender's local communication ID (0 when rejecting a REQ not yet answered).
    pub local_comm_id: u32,
    /// The receiver's local communication ID.
    pub remote_comm_id: u32,
    /// Which message is rejected.
    pub message_rejected: MsgResponse,
    /// Meaningful bytes of `ari` (7 bits, as received; see [`Self::ari_bytes`]).
    pub ari_length: u8,
    /// Why.
    pub reason: RejReason,
    /// Additional rejection information (reason-specific: a GID, a LID, a
    /// ClassPortInfo, the supported class version...).
    pub ari: [u8; ARI_LEN],
    /// Private data (rdma_reject's).
    pub private_data: [u8; PRIVATE_DATA_LEN],
}

impl RejRepr {
    /// A REJ of `message_rejected` for `reason`, without ARI or private data.
    pub const fn new(
        local_comm_id: u32,
        remote_comm_id: u32,
        message_rejected: MsgResponse,
        reason: RejReason,
    ) -> RejRepr {
        RejRepr {
            local_comm_id,
            remote_comm_id,
            message_rejected,
            ari_length: 0,
            reason,
            ari: [0; ARI_LEN],
            private_data: [0; PRIVATE_DATA_LEN],
        }
    }

    /// The meaningful ARI bytes: the first `ari_length`, at most 72.
    pub fn ari_bytes(&self) -> &[u8] {
        &self.ari[..usize::from(self.ari_length).min(ARI_LEN)]
    }

    /// Reads a REJ from the CM data of a MAD.
    pub fn parse(d: &[u8; CM_DATA_LEN]) -> RejRepr {
        RejRepr {
            local_comm_id: u32_at(d, 0),
            remote_comm_id: u32_at(d, 4),
            message_rejected: MsgResponse::from_bits(top(d[8], 2)),
            ari_length: top(d[9], 7),
            reason: RejReason(u16_at(d, 10)),
            ari: array_at(d, ARI_OFFSET),
            private_data: array_at(d, PRIVATE_DATA_OFFSET),
        }
    }

    /// Writes all 232 bytes of CM data; each value is masked to its field.
    pub fn emit(&self, d: &mut [u8; CM_DATA_LEN]) {
        set_u32(d, 0, self.local_comm_id);
        set_u32(d, 4, self.remote_comm_id);
        d[8] = put(self.message_rejected.bits(), 0, 2);
        d[9] = put(self.ari_length, 0, 7);
        set_u16(d, 10, self.reason.0);
        set_bytes(d, ARI_OFFSET, &self.ari);
        set_bytes(d, PRIVATE_DATA_OFFSET, &self.private_data);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_field_has_its_offset_and_bits() {
        let mut r = RejRepr::new(0x0102_0304, 0x0506_0708, MsgResponse::Rep, RejReason::STALE_CONN);
        r.ari_length = 16;
        r.ari[0] = 0xfe;
        r.ari[ARI_LEN - 1] = 0xef;
        r.private_data[0] = 0x11;
        r.private_data[PRIVATE_DATA_LEN - 1] = 0x22;
        let mut d = [0xa5u8; CM_DATA_LEN];
        r.emit(&mut d);
        // 01 000000: REP; 0010000 0: 16 ARI bytes; reason 10.
        assert_eq!(d[..13], [1, 2, 3, 4, 5, 6, 7, 8, 0x40, 0x20, 0x00, 0x0a, 0xfe]);
        assert_eq!(d[83], 0xef);
        assert_eq!((d[84], d[231]), (0x11, 0x22));
        assert!(d[13..83].iter().chain(&d[85..231]).all(|&b| b == 0));
        assert_eq!(RejRepr::parse(&d), r);
        assert_eq!(r.ari_bytes().len(), 16);
        // Reserved bits are ignored.
        d[8] |= 0x3f;
        d[9] |= 0x01;
        assert_eq!(RejRepr::parse(&d), r);
    }

    #[test]
    fn lenient_values_are_kept() {
        let mut d = [0u8; CM_DATA_LEN];
        d[8] = 0xc0; // message rejected 3
        d[9] = 0xfe; // ARI length 127
        d[10..12].copy_from_slice(&34u16.to_be_bytes());
        let r = RejRepr::parse(&d);
        assert_eq!(r.message_rejected, MsgResponse::Reserved);
        assert_eq!(r.ari_length, 127);
        assert_eq!(r.ari_bytes().len(), ARI_LEN);
        assert_eq!(r.reason, RejReason(34));
        assert_eq!(r.reason.description(), None);
        let mut out = [0xffu8; CM_DATA_LEN];
        r.emit(&mut out);
        assert_eq!(out, d);
    }

    #[test]
    fn reasons() {
        assert_eq!(RejReason::CONSUMER_DEFINED, RejReason(28));
        assert_eq!(RejReason::VENDOR_OPTION_NOT_SUPPORTED.description(), Some("vendor option is not supported"));
        assert_eq!(format!("{:?}", RejReason::INVALID_SERVICE_ID), "RejReason(8 invalid service ID)");
        for b in 0..4 {
            assert_eq!(MsgResponse::from_bits(b).bits(), b);
        }
    }
}
