//! Fuzz target for the CM MAD parser of `roce-cm`.
//!
//! The input is a MAD (256 bytes after the DETH of a UD SEND to QP 1), so
//! the seed corpus is made of real MADs. Besides parsing the input as it is,
//! the target parses its bytes as the body of one of the nine CM messages
//! under a valid header, so that every message layout gets exercised. Every
//! property is an `assert!`, so libFuzzer reports a violation as a crash.

#![no_main]

use libfuzzer_sys::fuzz_target;
use roce_cm::wire::{AttributeId, CmMad, CmMessage, CmWireError, CmaHdrRepr, MAD_LEN, cma_hdr, req, sidr_req};

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

fuzz_target!(|data: &[u8]| {
    let expected = reference(data);
    match CmMad::parse(data) {
        Ok(m) => {
            assert_eq!(expected, Ok(m.message.attr_id()), "{data:02x?}");
            accepted(data.try_into().unwrap(), &m);
        }
        Err(e) => {
            assert_eq!(expected, Err(e), "{data:02x?}");
            let _ = e.to_string();
        }
    }

    // The same bytes as the body of a chosen message under a valid header.
    let mut mad = [0u8; MAD_LEN];
    let n = data.len().min(MAD_LEN);
    mad[..n].copy_from_slice(&data[..n]);
    let attr = MESSAGES[usize::from(data.first().copied().unwrap_or(0)) % MESSAGES.len()];
    mad[..4].copy_from_slice(&[1, 0x07, 2, 0x03]);
    mad[16..18].copy_from_slice(&attr.0.to_be_bytes());
    let m = CmMad::parse(&mad).expect("a valid CM header with a known message always parses");
    assert_eq!(m.message.attr_id(), attr);
    accepted(&mad, &m);
});

/// What `CmMad::parse` must answer, decided from the raw bytes.
fn reference(d: &[u8]) -> Result<AttributeId, CmWireError> {
    if d.len() != MAD_LEN {
        return Err(CmWireError::WrongLength { have: d.len() });
    }
    let attr = AttributeId(u16::from_be_bytes([d[16], d[17]]));
    match (d[0], d[1], d[2], d[3]) {
        (1, 0x07, 2, 0x03) => match attr.0 {
            0x0010..=0x0018 => Ok(attr),
            0x0001 | 0x0019 | 0x001a => Err(CmWireError::UnsupportedAttribute(attr)),
            _ => Err(CmWireError::UnknownAttribute(attr)),
        },
        (1, 0x07, 2, m) => Err(CmWireError::BadMethod(m)),
        (1, 0x07, v, _) => Err(CmWireError::BadClassVersion(v)),
        (1, c, _, _) => Err(CmWireError::NotCm(c)),
        (b, _, _, _) => Err(CmWireError::BadBaseVersion(b)),
    }
}

/// Everything about a MAD `parse` accepted.
fn accepted(input: &[u8; MAD_LEN], m: &CmMad) {
    let out = m.to_bytes();
    // emit -> parse is the identity on values, and emit is idempotent.
    let again = CmMad::parse(&out).expect("re-parse of an emitted MAD");
    assert_eq!(&again, m);
    assert_eq!(again.to_bytes(), out);
    // Emit only clears (reserved) bits of the input, never sets one.
    for (i, (&o, &x)) in out.iter().zip(input.iter()).enumerate() {
        assert_eq!(o & !x, 0, "byte {i}: emitted {o:#04x} from {x:#04x}");
    }
    // Clearing those bits in the input does not change the value.
    assert_eq!(CmMad::parse(&out).as_ref(), Ok(m));

    let _ = format!("{m:?}");
    assert_eq!(m.message.private_data().len(), private_data_len(m.message.attr_id()));
    match m.message {
        CmMessage::Req(r) => cma::<{ req::PRIVATE_DATA_LEN }>(&r.private_data),
        CmMessage::SidrReq(r) => cma::<{ sidr_req::PRIVATE_DATA_LEN }>(&r.private_data),
        CmMessage::Rej(r) => assert!(r.ari_bytes().len() <= 72 && r.ari_length <= 0x7f),
        CmMessage::SidrRep(r) => assert!(r.info_bytes().len() <= 72),
        _ => {}
    }
}

fn private_data_len(a: AttributeId) -> usize {
    match a {
        AttributeId::REQ => 92,
        AttributeId::MRA => 222,
        AttributeId::REJ => 148,
        AttributeId::REP => 196,
        AttributeId::RTU | AttributeId::DREP => 224,
        AttributeId::DREQ => 220,
        AttributeId::SIDR_REQ => 216,
        AttributeId::SIDR_REP => 136,
        other => panic!("no message {other:?}"),
    }
}

/// The rdma_cm header of REQ / SIDR_REQ private data.
fn cma<const N: usize>(pd: &[u8; N]) {
    let Ok(h) = CmaHdrRepr::parse(pd) else {
        assert!(pd[0] != 0 || !matches!(pd[1] >> 4, 4 | 6), "refused a valid cma_hdr {:02x?}", &pd[..4]);
        return;
    };
    assert_eq!(pd[0], 0);
    assert_eq!(u32::from(h.ip_version()), u32::from(pd[1] >> 4));
    assert_eq!(h.port, u16::from_be_bytes([pd[2], pd[3]]));
    let user = cma_hdr::user_private_data(pd);
    let rebuilt: [u8; N] = h.private_data(user).expect("the remainder always fits");
    assert_eq!(CmaHdrRepr::parse(&rebuilt), Ok(h));
    assert_eq!(cma_hdr::user_private_data(&rebuilt), user);
}
