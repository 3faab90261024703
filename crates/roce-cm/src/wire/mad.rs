//! The common MAD header (IBTA vol. 1 ch. 13.4) and the 256-byte MAD framing
//! of CM messages. A CM MAD travels as the payload of a UD SEND_ONLY from QP
//! 1 to QP 1 (DETH Q_Key [`GSI_QKEY`]); offsets are into the MAD.
//!
//! ```text
//!         0               1               2               3
//!         0 1 2 3 4 5 6 7 0 1 2 3 4 5 6 7 0 1 2 3 4 5 6 7 0 1 2 3 4 5 6 7
//!        +---------------+---------------+---------------+-+-------------+
//!      0 |  BaseVersion  |   MgmtClass   |  ClassVersion |R|    Method   |
//!        +---------------+---------------+---------------+-+-------------+
//!      4 |             Status            |         ClassSpecific         |
//!        +-------------------------------+-------------------------------+
//!      8 |                         TransactionID                         |
//!        +                                                               +
//!     12 |                                                               |
//!        +-------------------------------+-------------------------------+
//!     16 |          AttributeID          |            reserved           |
//!        +-------------------------------+-------------------------------+
//!     20 |                       AttributeModifier                       |
//!        +---------------------------------------------------------------+
//!     24 |         CM message: 232 bytes, laid out by AttributeID        |
//!        +                              ...                              +
//!    252 |                                                               |
//!        +---------------------------------------------------------------+
//! R = response bit (0 for Send). Every CM message Linux sends has base
//! version 1, class 0x07, class version 2, method 0x03 Send, status 0 and
//! class specific 0; the attribute modifier carries ECE options (0 on rxe).
//! ```

use core::fmt;

use super::CmWireError;
use super::field::{set_u16, set_u32, set_u64, u16_at, u32_at, u64_at};

/// Length of a MAD.
pub const MAD_LEN: usize = 256;
/// Length of the common MAD header.
pub const HEADER_LEN: usize = 24;
/// Length of the CM message after the header.
pub const CM_DATA_LEN: usize = MAD_LEN - HEADER_LEN;

/// MAD BaseVersion of every IB MAD.
pub const BASE_VERSION: u8 = 1;
/// Management class of the Communication Manager.
pub const MGMT_CLASS_CM: u8 = 0x07;
/// CM class version (IBTA 1.2 and later; Linux `IB_CM_CLASS_VERSION`).
pub const CM_CLASS_VERSION: u8 = 2;
/// Method Send: the CM's only method (its messages are not request/response pairs).
pub const METHOD_SEND: u8 = 0x03;

/// QP number of the General Services Interface, where CM MADs go.
pub const GSI_QPN: u32 = 1;
/// The well-known Q_Key of QP 1 (rxe drops QP 1 packets with another).
pub const GSI_QKEY: u32 = 0x8001_0000;

/// A MAD attribute ID. The CM defines the constants below; any other value
/// is carried as is (a MAD header parses whatever its attribute).
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct AttributeId(pub u16);

impl AttributeId {
    /// ClassPortInfo (not supported: Linux ib_cm drops it).
    pub const CLASS_PORT_INFO: AttributeId = AttributeId(0x0001);
    /// Connection request.
    pub const REQ: AttributeId = AttributeId(0x0010);
    /// Message receipt acknowledgement.
    pub const MRA: AttributeId = AttributeId(0x0011);
    /// Reject.
    pub const REJ: AttributeId = AttributeId(0x0012);
    /// Reply to a REQ.
    pub const REP: AttributeId = AttributeId(0x0013);
    /// Ready to use.
    pub const RTU: AttributeId = AttributeId(0x0014);
    /// Disconnect request.
    pub const DREQ: AttributeId = AttributeId(0x0015);
    /// Disconnect reply.
    pub const DREP: AttributeId = AttributeId(0x0016);
    /// Service ID resolution request (UD).
    pub const SIDR_REQ: AttributeId = AttributeId(0x0017);
    /// Service ID resolution reply (UD).
    pub const SIDR_REP: AttributeId = AttributeId(0x0018);
    /// Load alternate path (not supported over RoCE).
    pub const LAP: AttributeId = AttributeId(0x0019);
    /// Alternate path response (not supported over RoCE).
    pub const APR: AttributeId = AttributeId(0x001a);

    /// The attribute's name as the IBTA spells it, or `UNKNOWN`.
    pub const fn name(self) -> &'static str {
        match self.0 {
            0x0001 => "ClassPortInfo",
            0x0010 => "REQ",
            0x0011 => "MRA",
            0x0012 => "REJ",
            0x0013 => "REP",
            0x0014 => "RTU",
            0x0015 => "DREQ",
            0x0016 => "DREP",
            0x0017 => "SIDR_REQ",
            0x0018 => "SIDR_REP",
            0x0019 => "LAP",
            0x001a => "APR",
            _ => "UNKNOWN",
        }
    }
}

impl fmt::Debug for AttributeId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}({:#06x})", self.name(), self.0)
    }
}

/// The meaning of a common MAD header. Parsing checks only the length: the
/// CM's rules (base and class version, class, method) are checked by
/// [`MadHeaderRepr::check_cm`], which [`CmMad::parse`](super::CmMad::parse)
/// applies. The reserved 16 bits at offset 18 are ignored on parse and
/// written as zero.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct MadHeaderRepr {
    /// BaseVersion (1).
    pub base_version: u8,
    /// Management class (0x07 for the CM).
    pub mgmt_class: u8,
    /// Class version (2 for the CM).
    pub class_version: u8,
    /// The method byte, response bit included (0x03 Send for the CM).
    pub method: u8,
    /// Status (0 in every CM message).
    pub status: u16,
    /// Class-specific field (0 for the CM).
    pub class_specific: u16,
    /// Transaction ID (see [`tid`](super::tid) for the kernel's convention).
    pub tid: u64,
    /// Attribute ID: which CM message follows.
    pub attr_id: AttributeId,
    /// Attribute modifier (ECE options on kernels that support ECE; 0 from rxe).
    pub attr_mod: u32,
}

impl MadHeaderRepr {
    /// The header Linux ib_cm puts on every CM message: base version 1,
    /// class CM, class version 2, method Send, status, class-specific field
    /// and attribute modifier 0.
    pub const fn cm(attr_id: AttributeId, tid: u64) -> MadHeaderRepr {
        MadHeaderRepr {
            base_version: BASE_VERSION,
            mgmt_class: MGMT_CLASS_CM,
            class_version: CM_CLASS_VERSION,
            method: METHOD_SEND,
            status: 0,
            class_specific: 0,
            tid,
            attr_id,
            attr_mod: 0,
        }
    }

    /// Reads the header at the start of `mad`; fails only when `mad` is
    /// shorter than the header.
    pub fn parse(mad: &[u8]) -> Result<MadHeaderRepr, CmWireError> {
        let Some(h) = mad.first_chunk::<HEADER_LEN>() else {
            return Err(CmWireError::Truncated { what: "MAD header", need: HEADER_LEN, have: mad.len() });
        };
        Ok(MadHeaderRepr::read(h))
    }

    pub(crate) fn read(h: &[u8; HEADER_LEN]) -> MadHeaderRepr {
        MadHeaderRepr {
            base_version: h[0],
            mgmt_class: h[1],
            class_version: h[2],
            method: h[3],
            status: u16_at(h, 4),
            class_specific: u16_at(h, 6),
            tid: u64_at(h, 8),
            attr_id: AttributeId(u16_at(h, 16)),
            attr_mod: u32_at(h, 20),
        }
    }

    /// Whether a receiving CM takes this header: base version 1 (the MAD
    /// layer validates it), class CM, class version 2 and method Send (the
    /// Linux CM agent registers for exactly that class version and method,
    /// so the MAD layer drops anything else before ib_cm sees it). Status,
    /// class-specific field and attribute modifier are not checked (Linux
    /// ignores them); the attribute ID is checked with the message.
    pub fn check_cm(&self) -> Result<(), CmWireError> {
        if self.base_version != BASE_VERSION {
            Err(CmWireError::BadBaseVersion(self.base_version))
        } else if self.mgmt_class != MGMT_CLASS_CM {
            Err(CmWireError::NotCm(self.mgmt_class))
        } else if self.class_version != CM_CLASS_VERSION {
            Err(CmWireError::BadClassVersion(self.class_version))
        } else if self.method != METHOD_SEND {
            Err(CmWireError::BadMethod(self.method))
        } else {
            Ok(())
        }
    }

    /// Writes the header (reserved bytes zero).
    pub fn emit(&self, h: &mut [u8; HEADER_LEN]) {
        h[0] = self.base_version;
        h[1] = self.mgmt_class;
        h[2] = self.class_version;
        h[3] = self.method;
        set_u16(h, 4, self.status);
        set_u16(h, 6, self.class_specific);
        set_u64(h, 8, self.tid);
        set_u16(h, 16, self.attr_id.0);
        set_u16(h, 18, 0);
        set_u32(h, 20, self.attr_mod);
    }
}

/// The header and CM data of a MAD.
pub(crate) fn split(mad: &[u8; MAD_LEN]) -> (&[u8; HEADER_LEN], &[u8; CM_DATA_LEN]) {
    let (h, d) = mad.split_at(HEADER_LEN);
    (h.try_into().expect("24-byte header"), d.try_into().expect("232-byte CM data"))
}

/// The header and CM data of a MAD, writable.
pub(crate) fn split_mut(mad: &mut [u8; MAD_LEN]) -> (&mut [u8; HEADER_LEN], &mut [u8; CM_DATA_LEN]) {
    let (h, d) = mad.split_at_mut(HEADER_LEN);
    (h.try_into().expect("24-byte header"), d.try_into().expect("232-byte CM data"))
}

#[cfg(test)]
mod tests {
    use super::*;

    // The header of the rping REQ (golden capture rping_c3, frame 1).
    const REQ_HEADER: [u8; HEADER_LEN] = [
        0x01, 0x07, 0x02, 0x03, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x02, 0x4e, 0x40, 0x35, 0x3f, 0x00, 0x10,
        0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
    ];

    #[test]
    fn fields_and_reemit() {
        let h = MadHeaderRepr::parse(&REQ_HEADER).unwrap();
        assert_eq!(h, MadHeaderRepr::cm(AttributeId::REQ, 0x0000_0002_4e40_353f));
        assert_eq!(h.check_cm(), Ok(()));
        let mut out = [0xa5u8; HEADER_LEN];
        h.emit(&mut out);
        assert_eq!(out, REQ_HEADER);
    }

    #[test]
    fn every_field_has_its_offset() {
        let h = MadHeaderRepr {
            base_version: 0x11,
            mgmt_class: 0x22,
            class_version: 0x33,
            method: 0x81,
            status: 0x4455,
            class_specific: 0x6677,
            tid: 0x0102_0304_0506_0708,
            attr_id: AttributeId(0x99aa),
            attr_mod: 0xbbcc_ddee,
        };
        let mut out = [0u8; HEADER_LEN];
        h.emit(&mut out);
        assert_eq!(
            out,
            [
                0x11, 0x22, 0x33, 0x81, 0x44, 0x55, 0x66, 0x77, 1, 2, 3, 4, 5, 6, 7, 8, 0x99, 0xaa, 0, 0, 0xbb, 0xcc,
                0xdd, 0xee
            ]
        );
        assert_eq!(MadHeaderRepr::parse(&out), Ok(h));
        // Reserved bytes are ignored.
        out[18] = 0xff;
        out[19] = 0x01;
        assert_eq!(MadHeaderRepr::parse(&out), Ok(h));
    }

    #[test]
    fn cm_checks() {
        let ok = MadHeaderRepr::cm(AttributeId::RTU, 7);
        assert_eq!(MadHeaderRepr { base_version: 2, ..ok }.check_cm(), Err(CmWireError::BadBaseVersion(2)));
        assert_eq!(MadHeaderRepr { mgmt_class: 0x03, ..ok }.check_cm(), Err(CmWireError::NotCm(0x03)));
        assert_eq!(MadHeaderRepr { class_version: 1, ..ok }.check_cm(), Err(CmWireError::BadClassVersion(1)));
        assert_eq!(MadHeaderRepr { method: 0x83, ..ok }.check_cm(), Err(CmWireError::BadMethod(0x83)));
        assert_eq!(MadHeaderRepr { status: 0xffff, class_specific: 1, attr_mod: 9, ..ok }.check_cm(), Ok(()));
        assert_eq!(
            MadHeaderRepr::parse(&REQ_HEADER[..23]),
            Err(CmWireError::Truncated { what: "MAD header", need: 24, have: 23 })
        );
    }

    #[test]
    fn attribute_names() {
        assert_eq!(format!("{:?}", AttributeId::SIDR_REP), "SIDR_REP(0x0018)");
        assert_eq!(AttributeId::APR.name(), "APR");
        assert_eq!(AttributeId(0x0020).name(), "UNKNOWN");
    }
}
