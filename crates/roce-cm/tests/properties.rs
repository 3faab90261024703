//! Property tests of the CM wire layer: no panic on arbitrary bytes, the
//! exact error for every refused header, and parse -> emit giving back the
//! input with only the reserved bits (listed here from the IBTA layouts,
//! independently of the parsers) cleared.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use proptest::prelude::*;
use roce_cm::wire::mad::{self, HEADER_LEN};
use roce_cm::wire::*;

/// The attribute IDs `CmMad::parse` accepts.
const MESSAGES: [AttributeId; 9] = [
    AttributeId::REQ,
    AttributeId::MRA,
    AttributeId::REJ,
    AttributeId::REP,
    AttributeId::RTU,
    AttributeId::DREQ,
    AttributeId::DREP,
    AttributeId::SIDR_REQ,
    AttributeId::SIDR_REP,
];

/// The reserved bits of a CM MAD with attribute `attr`, as (MAD offset, mask).
fn reserved_bits(attr: AttributeId) -> Vec<(usize, u8)> {
    let mut r = vec![(18, 0xff), (19, 0xff)];
    let data: &[(usize, u8)] = match attr {
        // Byte 4, bytes 24..28, the 6 bits between flow label and packet
        // rate, and the low bits after SL and after the ACK timeout (but
        // SAP Supported, bit 5 of byte 139) of both paths.
        AttributeId::REQ => &[
            (4, 0xff),
            (24, 0xff),
            (25, 0xff),
            (26, 0xff),
            (27, 0xff),
            (90, 0x0f),
            (91, 0xc0),
            (94, 0x07),
            (95, 0x07),
            (134, 0x0f),
            (135, 0xc0),
            (138, 0x07),
            (139, 0x03),
        ],
        AttributeId::REP => &[(27, 0x0f)],
        AttributeId::DREQ => &[(11, 0xff)],
        AttributeId::REJ => &[(8, 0x3f), (9, 0x01)],
        AttributeId::MRA => &[(8, 0x3f), (9, 0x07)],
        AttributeId::SIDR_REQ => &[(6, 0xff), (7, 0xff)],
        _ => &[],
    };
    r.extend(data.iter().map(|&(at, m)| (at + HEADER_LEN, m)));
    r
}

/// A MAD with a valid CM header for one of the nine messages and random
/// bytes everywhere else.
fn cm_mad() -> impl Strategy<Value = [u8; MAD_LEN]> {
    (0..MESSAGES.len(), prop::array::uniform::<_, MAD_LEN>(any::<u8>())).prop_map(|(i, mut m)| {
        m[..4].copy_from_slice(&[mad::BASE_VERSION, mad::MGMT_CLASS_CM, mad::CM_CLASS_VERSION, mad::METHOD_SEND]);
        m[16..18].copy_from_slice(&MESSAGES[i].0.to_be_bytes());
        m
    })
}

fn ip() -> impl Strategy<Value = IpAddr> {
    prop_oneof![
        any::<u32>().prop_map(|a| IpAddr::V4(Ipv4Addr::from(a))),
        any::<u128>().prop_map(|a| IpAddr::V6(Ipv6Addr::from(a)))
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2048))]

    /// Any bytes: no panic, and anything but 256 bytes is `WrongLength`.
    #[test]
    fn arbitrary_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..300)) {
        match CmMad::parse(&bytes) {
            Ok(m) => {
                prop_assert_eq!(bytes.len(), MAD_LEN);
                prop_assert_eq!(CmMad::parse(&m.to_bytes()), Ok(m));
            }
            Err(e) => {
                if bytes.len() != MAD_LEN {
                    prop_assert_eq!(e, CmWireError::WrongLength { have: bytes.len() });
                }
                let _ = e.to_string();
            }
        }
        let _ = MadHeaderRepr::parse(&bytes);
        let _ = CmaHdrRepr::parse(&bytes);
    }

    /// A 256-byte MAD is refused exactly by the first header check it
    /// fails, else by its attribute; accepted otherwise.
    #[test]
    fn header_checks_in_order(
        mut m in prop::array::uniform::<_, MAD_LEN>(any::<u8>()),
        fix in any::<[bool; 5]>(),
        known in 0..MESSAGES.len(),
    ) {
        let [base, class, version, method, attr] = fix;
        if base { m[0] = 1 }
        if class { m[1] = 7 }
        if version { m[2] = 2 }
        if method { m[3] = 3 }
        if attr { m[16..18].copy_from_slice(&MESSAGES[known].0.to_be_bytes()) }
        let a = AttributeId(u16::from_be_bytes([m[16], m[17]]));
        let expected = if m[0] != 1 {
            Err(CmWireError::BadBaseVersion(m[0]))
        } else if m[1] != 7 {
            Err(CmWireError::NotCm(m[1]))
        } else if m[2] != 2 {
            Err(CmWireError::BadClassVersion(m[2]))
        } else if m[3] != 3 {
            Err(CmWireError::BadMethod(m[3]))
        } else if [1, 0x19, 0x1a].contains(&a.0) {
            Err(CmWireError::UnsupportedAttribute(a))
        } else if !(0x10..=0x18).contains(&a.0) {
            Err(CmWireError::UnknownAttribute(a))
        } else {
            Ok(a)
        };
        prop_assert_eq!(CmMad::parse(&m).map(|p| p.message.attr_id()), expected);
    }

    /// parse -> emit is the input with the reserved bits cleared, and the
    /// emitted MAD parses to the same value.
    #[test]
    fn reemit_keeps_every_defined_bit(m in cm_mad()) {
        let p = CmMad::parse(&m).unwrap();
        let mut expected = m;
        for (at, mask) in reserved_bits(p.message.attr_id()) {
            expected[at] &= !mask;
        }
        let mut out = [0x5au8; MAD_LEN];
        p.emit(&mut out);
        prop_assert_eq!(out, expected);
        prop_assert_eq!(CmMad::parse(&out), Ok(p));
        // Reserved bits never change the value.
        prop_assert_eq!(CmMad::parse(&expected), Ok(p));
    }

    /// A value built by a state machine (any message a parse can give, with
    /// any header) survives emit -> parse.
    #[test]
    fn values_round_trip(m in cm_mad(), tid in any::<u64>(), attr_mod in any::<u32>()) {
        let message = CmMad::parse(&m).unwrap().message;
        let mut mad = CmMad::new(tid, message);
        mad.header.attr_mod = attr_mod;
        let bytes = mad.to_bytes();
        prop_assert_eq!(CmMad::parse(&bytes), Ok(mad));
        let mut d = [0u8; CM_DATA_LEN];
        message.emit(&mut d);
        prop_assert_eq!(&bytes[HEADER_LEN..], &d[..]);
        prop_assert_eq!(CmMessage::parse(message.attr_id(), &d), Ok(message));
    }

    #[test]
    fn cma_hdr_round_trips(
        port in any::<u16>(),
        src in ip(),
        dst in ip(),
        user in prop::collection::vec(any::<u8>(), 0..=56),
    ) {
        let h = CmaHdrRepr::new(port, src, dst);
        let pd: [u8; req::PRIVATE_DATA_LEN] = h.private_data(&user).unwrap();
        prop_assert_eq!(CmaHdrRepr::parse(&pd), Ok(h));
        prop_assert_eq!(&cma_hdr::user_private_data(&pd)[..user.len()], &user[..]);
        match (src, dst) {
            (IpAddr::V4(_), IpAddr::V4(_)) => {
                prop_assert_eq!((h.src_addr(), h.dst_addr(), pd[1]), (src, dst, 0x40));
            }
            _ => {
                prop_assert_eq!(pd[1], 0x60);
                let v6 = |a: IpAddr| match a { IpAddr::V4(a) => a.to_ipv6_mapped(), IpAddr::V6(a) => a };
                prop_assert_eq!((h.src_addr(), h.dst_addr()), (IpAddr::V6(v6(src)), IpAddr::V6(v6(dst))));
            }
        }
        // Carried in a REQ, it comes back out of the MAD.
        let req = ReqRepr { private_data: pd, ..ReqRepr::default() };
        let CmMessage::Req(back) = CmMad::parse(&CmMad::new(1, req).to_bytes()).unwrap().message else {
            panic!("not a REQ")
        };
        prop_assert_eq!(CmaHdrRepr::parse(&back.private_data), Ok(h));
    }

    #[test]
    fn service_ids_and_tids(
        sid in any::<u64>(),
        port in any::<u16>(),
        ps in 0..4usize,
        hi in any::<u32>(),
        id in any::<u32>(),
    ) {
        let space = [PortSpace::Ipoib, PortSpace::Tcp, PortSpace::Udp, PortSpace::Ib][ps];
        let ip = IpServiceId::new(space, port);
        prop_assert_eq!(IpServiceId::from_service_id(ip.service_id()), Ok(ip));
        match IpServiceId::from_service_id(sid) {
            Ok(d) => prop_assert_eq!(d.service_id(), sid),
            Err(e) => prop_assert_eq!(e, CmWireError::NotIpServiceId(sid)),
        }
        let t = kernel_tid(hi, id);
        prop_assert_eq!((tid_hi(t), tid_comm_id(t)), (hi, id));
        prop_assert_eq!((t as u32).to_le_bytes(), id.to_be_bytes());
    }
}
