//! CM MADs on the wire: parse the 256 bytes after the DETH of a UD SEND to
//! QP 1 into a [`CmMad`], and emit one back.
//!
//! One module per structure, each with its byte layout: [`mad`] (the common
//! MAD header and the attribute IDs), [`req`], [`rep`], [`rtu`], [`dreq`],
//! [`drep`], [`rej`], [`mra`], [`sidr_req`], [`sidr_rep`], the rdma_cm
//! private-data header and IP service IDs in [`cma_hdr`], and the kernel's
//! transaction-ID convention in [`tid`]. Each message is a plain `*Repr`
//! value with `parse` and `emit`; its private data is a fixed-size array of
//! the message's capacity (REQ 92, REP 196, REJ 148, RTU 224, DREQ 220,
//! DREP 224, MRA 222, SIDR_REQ 216, SIDR_REP 136 bytes), zero-padded.
//!
//! # What the receiver refuses
//!
//! Parsing never panics; [`CmMad::parse`] fails with a [`CmWireError`] in
//! this order, and for the reasons given:
//!
//! | check | error | why |
//! |---|---|---|
//! | exactly 256 bytes | `WrongLength` | a MAD on QP 1 is 256 bytes; anything else is not a MAD |
//! | base version 1 | `BadBaseVersion` | the MAD layer validates it |
//! | management class 0x07 | `NotCm` | another class's MAD (SA, PerfMgt...) |
//! | class version 2 | `BadClassVersion` | Linux registers its CM agent for version 2 only; the MAD layer drops others |
//! | method 0x03 Send | `BadMethod` | the CM agent registers for Send only |
//! | attribute REQ..SIDR_REP | `UnknownAttribute` | no such CM message |
//! | not ClassPortInfo, LAP, APR | `UnsupportedAttribute` | defined, but Linux ib_cm drops ClassPortInfo, and LAP/APR (path migration) do not exist on RoCE |
//!
//! Everything else is accepted, as Linux accepts it: status, class-specific
//! field and attribute modifier of the header; every message field value
//! (transport type, MTU code, REJ reason, SIDR status, ARI and
//! additional-information lengths are kept as received, even reserved
//! values); reserved bits, which are ignored and re-emitted as zero.
//! Checks that need state (does the DREQ's QPN match, is the comm ID known)
//! belong to the CM state machine, and the rdma_cm header's checks to
//! [`CmaHdrRepr::parse`], since its bytes are the REQ's private data.

mod error;
mod field;

pub mod cma_hdr;
pub mod drep;
pub mod dreq;
pub mod mad;
pub mod mra;
pub mod rej;
pub mod rep;
pub mod req;
pub mod rtu;
pub mod sidr_rep;
pub mod sidr_req;
pub mod tid;

pub use cma_hdr::{CMA_HDR_LEN, CmaAddrs, CmaHdrRepr, IpServiceId, PortSpace};
pub use drep::DrepRepr;
pub use dreq::DreqRepr;
pub use error::CmWireError;
pub use mad::{AttributeId, CM_DATA_LEN, MAD_LEN, MadHeaderRepr};
pub use mra::MraRepr;
pub use rej::{MsgResponse, RejReason, RejRepr};
pub use rep::RepRepr;
pub use req::{PathMtu, ReqPath, ReqRepr, TransportType};
pub use rtu::RtuRepr;
pub use sidr_rep::{SidrRepRepr, SidrStatus};
pub use sidr_req::SidrReqRepr;
pub use tid::{kernel_tid, tid_comm_id, tid_hi};

/// A CM message, by attribute.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CmMessage {
    /// Connection request.
    Req(ReqRepr),
    /// Message receipt acknowledgement.
    Mra(MraRepr),
    /// Reject.
    Rej(RejRepr),
    /// Reply to a REQ.
    Rep(RepRepr),
    /// Ready to use.
    Rtu(RtuRepr),
    /// Disconnect request.
    Dreq(DreqRepr),
    /// Disconnect reply.
    Drep(DrepRepr),
    /// Service ID resolution request.
    SidrReq(SidrReqRepr),
    /// Service ID resolution reply.
    SidrRep(SidrRepRepr),
}

impl CmMessage {
    /// The attribute ID the message travels under.
    pub const fn attr_id(&self) -> AttributeId {
        match self {
            CmMessage::Req(_) => AttributeId::REQ,
            CmMessage::Mra(_) => AttributeId::MRA,
            CmMessage::Rej(_) => AttributeId::REJ,
            CmMessage::Rep(_) => AttributeId::REP,
            CmMessage::Rtu(_) => AttributeId::RTU,
            CmMessage::Dreq(_) => AttributeId::DREQ,
            CmMessage::Drep(_) => AttributeId::DREP,
            CmMessage::SidrReq(_) => AttributeId::SIDR_REQ,
            CmMessage::SidrRep(_) => AttributeId::SIDR_REP,
        }
    }

    /// Reads the CM data of a MAD whose attribute ID is `attr_id`. Fails
    /// with `UnsupportedAttribute` for ClassPortInfo, LAP and APR and with
    /// `UnknownAttribute` for IDs the CM does not define.
    pub fn parse(attr_id: AttributeId, d: &[u8; CM_DATA_LEN]) -> Result<CmMessage, CmWireError> {
        Ok(match attr_id {
            AttributeId::REQ => CmMessage::Req(ReqRepr::parse(d)),
            AttributeId::MRA => CmMessage::Mra(MraRepr::parse(d)),
            AttributeId::REJ => CmMessage::Rej(RejRepr::parse(d)),
            AttributeId::REP => CmMessage::Rep(RepRepr::parse(d)),
            AttributeId::RTU => CmMessage::Rtu(RtuRepr::parse(d)),
            AttributeId::DREQ => CmMessage::Dreq(DreqRepr::parse(d)),
            AttributeId::DREP => CmMessage::Drep(DrepRepr::parse(d)),
            AttributeId::SIDR_REQ => CmMessage::SidrReq(SidrReqRepr::parse(d)),
            AttributeId::SIDR_REP => CmMessage::SidrRep(SidrRepRepr::parse(d)),
            AttributeId::CLASS_PORT_INFO | AttributeId::LAP | AttributeId::APR => {
                return Err(CmWireError::UnsupportedAttribute(attr_id));
            }
            other => return Err(CmWireError::UnknownAttribute(other)),
        })
    }

    /// Writes all 232 bytes of CM data.
    pub fn emit(&self, d: &mut [u8; CM_DATA_LEN]) {
        match self {
            CmMessage::Req(m) => m.emit(d),
            CmMessage::Mra(m) => m.emit(d),
            CmMessage::Rej(m) => m.emit(d),
            CmMessage::Rep(m) => m.emit(d),
            CmMessage::Rtu(m) => m.emit(d),
            CmMessage::Dreq(m) => m.emit(d),
            CmMessage::Drep(m) => m.emit(d),
            CmMessage::SidrReq(m) => m.emit(d),
            CmMessage::SidrRep(m) => m.emit(d),
        }
    }

    /// The message's private-data field (its whole capacity).
    pub fn private_data(&self) -> &[u8] {
        match self {
            CmMessage::Req(m) => &m.private_data,
            CmMessage::Mra(m) => &m.private_data,
            CmMessage::Rej(m) => &m.private_data,
            CmMessage::Rep(m) => &m.private_data,
            CmMessage::Rtu(m) => &m.private_data,
            CmMessage::Dreq(m) => &m.private_data,
            CmMessage::Drep(m) => &m.private_data,
            CmMessage::SidrReq(m) => &m.private_data,
            CmMessage::SidrRep(m) => &m.private_data,
        }
    }
}

macro_rules! from_repr {
    ($($repr:ident => $variant:ident),* $(,)?) => {
        $(impl From<$repr> for CmMessage {
            fn from(m: $repr) -> CmMessage {
                CmMessage::$variant(m)
            }
        })*
    };
}

from_repr!(
    ReqRepr => Req, MraRepr => Mra, RejRepr => Rej, RepRepr => Rep, RtuRepr => Rtu,
    DreqRepr => Dreq, DrepRepr => Drep, SidrReqRepr => SidrReq, SidrRepRepr => SidrRep,
);

/// A whole CM MAD: the common header and the message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct CmMad {
    /// The common MAD header. After [`CmMad::parse`] its attribute ID is the
    /// message's; [`CmMad::emit`] always writes the message's.
    pub header: MadHeaderRepr,
    /// The CM message.
    pub message: CmMessage,
}

impl CmMad {
    /// `message` with the header Linux puts on it (see [`MadHeaderRepr::cm`])
    /// and transaction ID `tid`.
    pub fn new(tid: u64, message: impl Into<CmMessage>) -> CmMad {
        let message = message.into();
        CmMad { header: MadHeaderRepr::cm(message.attr_id(), tid), message }
    }

    /// Parses a MAD: the UD payload after BTH and DETH, exactly 256 bytes.
    /// The checks, in order, are in the [module documentation](self).
    pub fn parse(mad: &[u8]) -> Result<CmMad, CmWireError> {
        let mad: &[u8; MAD_LEN] = mad.try_into().map_err(|_| CmWireError::WrongLength { have: mad.len() })?;
        let (h, d) = mad::split(mad);
        let header = MadHeaderRepr::read(h);
        header.check_cm()?;
        let message = CmMessage::parse(header.attr_id, d)?;
        Ok(CmMad { header, message })
    }

    /// Writes all 256 bytes. The attribute ID written is the message's,
    /// whatever `header.attr_id` says; the rest of the header is written as it is.
    pub fn emit(&self, mad: &mut [u8; MAD_LEN]) {
        let (h, d) = mad::split_mut(mad);
        MadHeaderRepr { attr_id: self.message.attr_id(), ..self.header }.emit(h);
        self.message.emit(d);
    }

    /// The 256 bytes of the MAD.
    pub fn to_bytes(&self) -> [u8; MAD_LEN] {
        let mut mad = [0u8; MAD_LEN];
        self.emit(&mut mad);
        mad
    }
}

/// A private-data field of `N` bytes holding `bytes`, zero-padded; fails
/// when `bytes` is longer than `N`. For a REQ or SIDR_REQ from rdma_cm, use
/// [`CmaHdrRepr::private_data`], which puts the header first.
pub fn private_data<const N: usize>(bytes: &[u8]) -> Result<[u8; N], CmWireError> {
    if bytes.len() > N {
        return Err(CmWireError::PrivateDataTooLong { len: bytes.len(), capacity: N });
    }
    let mut pd = [0u8; N];
    pd[..bytes.len()].copy_from_slice(bytes);
    Ok(pd)
}

#[cfg(test)]
mod tests {
    use roce_wire::Psn;

    use super::*;

    /// One value of every message, with non-zero fields.
    fn messages() -> Vec<CmMessage> {
        let mut req = ReqRepr {
            local_comm_id: 0x3f35_404e,
            service_id: IpServiceId::new(PortSpace::Tcp, 7174).service_id(),
            local_ca_guid: 0x5054_00ff_fe77_0003,
            local_qpn: 0x11,
            responder_resources: 1,
            initiator_depth: 1,
            remote_cm_response_timeout: 20,
            starting_psn: Psn::new(0xed57a9),
            local_cm_response_timeout: 20,
            retry_count: 7,
            pkey: 0xffff,
            path_mtu: PathMtu::Mtu1024,
            rnr_retry_count: 7,
            max_cm_retries: 15,
            ..ReqRepr::default()
        };
        req.primary_path.flow_label = 0xae362;
        req.primary_path.hop_limit = 64;
        req.primary_path.local_ack_timeout = 19;
        req.private_data[0..2].copy_from_slice(&[0, 0x40]);
        let rep = RepRepr {
            local_comm_id: 0xd160_50fc,
            remote_comm_id: 0x3f35_404e,
            local_qpn: 0x11,
            starting_psn: Psn::new(0x0eeec9),
            target_ack_delay: 15,
            rnr_retry_count: 7,
            local_ca_guid: 0x5054_00ff_fe77_0002,
            private_data: private_data(b"accepted").unwrap(),
            ..RepRepr::default()
        };
        let mut rej = RejRepr::new(0, 0x3f35_404e, MsgResponse::Req, RejReason::CONSUMER_DEFINED);
        rej.private_data[147] = 0xee;
        let mut sidr_rep = SidrRepRepr::new(7, SidrStatus::SUCCESS, 0x42, 0x0111_1c06, 0x0123_4567);
        sidr_rep.private_data[0] = 1;
        vec![
            req.into(),
            MraRepr::new(1, 2, MsgResponse::Rep, 24).into(),
            rej.into(),
            rep.into(),
            RtuRepr::new(0x3f35_404e, 0xd160_50fc).into(),
            DreqRepr::new(0x3f35_404e, 0xd160_50fc, 0x11).into(),
            DrepRepr::new(0xd160_50fc, 0x3f35_404e).into(),
            SidrReqRepr::new(7, 0xffff, 0x0111_1c06).into(),
            sidr_rep.into(),
        ]
    }

    #[test]
    fn every_message_round_trips_through_a_mad() {
        for (i, m) in messages().into_iter().enumerate() {
            let mut mad = CmMad::new(kernel_tid(2, 0x1000 + i as u32), m);
            mad.header.attr_mod = 0x0102_0304;
            let bytes = mad.to_bytes();
            assert_eq!(bytes[..4], [1, 7, 2, 3]);
            assert_eq!(u16::from_be_bytes([bytes[16], bytes[17]]), m.attr_id().0);
            assert_eq!(bytes[20..24], [1, 2, 3, 4]);
            assert_eq!(CmMad::parse(&bytes), Ok(mad), "{m:?}");
            let mut again = [0xa5u8; MAD_LEN];
            CmMad::parse(&bytes).unwrap().emit(&mut again);
            assert_eq!(again, bytes);
        }
    }

    #[test]
    fn private_data_capacities() {
        let caps: Vec<(AttributeId, usize)> =
            messages().iter().map(|m| (m.attr_id(), m.private_data().len())).collect();
        assert_eq!(
            caps,
            [
                (AttributeId::REQ, 92),
                (AttributeId::MRA, 222),
                (AttributeId::REJ, 148),
                (AttributeId::REP, 196),
                (AttributeId::RTU, 224),
                (AttributeId::DREQ, 220),
                (AttributeId::DREP, 224),
                (AttributeId::SIDR_REQ, 216),
                (AttributeId::SIDR_REP, 136),
            ]
        );
        assert_eq!(private_data::<4>(b"abc"), Ok(*b"abc\0"));
        assert_eq!(private_data::<2>(b"abc"), Err(CmWireError::PrivateDataTooLong { len: 3, capacity: 2 }));
    }

    #[test]
    fn the_message_decides_the_attribute_id() {
        let mut mad = CmMad::new(1, RtuRepr::new(1, 2));
        mad.header.attr_id = AttributeId::REQ;
        let back = CmMad::parse(&mad.to_bytes()).unwrap();
        assert_eq!(back.header.attr_id, AttributeId::RTU);
        assert_eq!(back.message, mad.message);
    }

    fn valid() -> [u8; MAD_LEN] {
        CmMad::new(kernel_tid(2, 9), DrepRepr::new(9, 10)).to_bytes()
    }

    #[test]
    fn refusals() {
        let ok = valid();
        assert!(CmMad::parse(&ok).is_ok());
        assert_eq!(CmMad::parse(&ok[..255]), Err(CmWireError::WrongLength { have: 255 }));
        assert_eq!(CmMad::parse(&[]), Err(CmWireError::WrongLength { have: 0 }));
        let mut long = ok.to_vec();
        long.push(0);
        assert_eq!(CmMad::parse(&long), Err(CmWireError::WrongLength { have: 257 }));

        let with = |at: usize, v: u8| {
            let mut m = ok;
            m[at] = v;
            CmMad::parse(&m)
        };
        assert_eq!(with(0, 0x80), Err(CmWireError::BadBaseVersion(0x80)));
        assert_eq!(with(1, 0x03), Err(CmWireError::NotCm(0x03)));
        assert_eq!(with(1, 0x81), Err(CmWireError::NotCm(0x81)));
        assert_eq!(with(2, 1), Err(CmWireError::BadClassVersion(1)));
        assert_eq!(with(3, 0x01), Err(CmWireError::BadMethod(0x01)));
        assert_eq!(with(3, 0x83), Err(CmWireError::BadMethod(0x83)));
        assert_eq!(with(17, 0x1b), Err(CmWireError::UnknownAttribute(AttributeId(0x001b))));
        assert_eq!(with(17, 0x00), Err(CmWireError::UnknownAttribute(AttributeId(0x0000))));
        assert_eq!(with(16, 0x01), Err(CmWireError::UnknownAttribute(AttributeId(0x0116))));
        for (attr, id) in [(0x01, AttributeId::CLASS_PORT_INFO), (0x19, AttributeId::LAP), (0x1a, AttributeId::APR)] {
            assert_eq!(with(17, attr), Err(CmWireError::UnsupportedAttribute(id)));
        }
        // The checks run in order: length, base version, class, class version, method, attribute.
        let mut m = ok;
        m[1] = 0x04;
        m[2] = 9;
        m[3] = 0x81;
        m[17] = 0x77;
        assert_eq!(CmMad::parse(&m), Err(CmWireError::NotCm(0x04)));
        // Not checked: status, class specific, reserved, attribute modifier.
        let mut lenient = ok;
        lenient[4..8].copy_from_slice(&[0xff; 4]);
        lenient[18..24].copy_from_slice(&[0xff; 6]);
        let p = CmMad::parse(&lenient).unwrap();
        assert_eq!((p.header.status, p.header.class_specific, p.header.attr_mod), (0xffff, 0xffff, 0xffff_ffff));
    }

    #[test]
    fn errors_display() {
        assert_eq!(CmWireError::WrongLength { have: 3 }.to_string(), "a CM MAD is 256 bytes, 3 given");
        assert_eq!(
            CmWireError::UnknownAttribute(AttributeId(0x20)).to_string(),
            "unknown CM attribute UNKNOWN(0x0020)"
        );
        assert_eq!(
            CmWireError::UnsupportedAttribute(AttributeId::LAP).to_string(),
            "CM attribute LAP(0x0019) is not supported"
        );
    }
}
