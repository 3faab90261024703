//! Property tests of the wire layer: emit -> parse round trips for every
//! opcode, no panic on arbitrary bytes, every single-bit error caught.

use std::net::{Ipv4Addr, Ipv6Addr};

use proptest::prelude::*;
use roce_wire::opcode::{ALL, PayloadRule};
use roce_wire::*;

fn ctx() -> impl Strategy<Value = IcrcContext> {
    let v4 = (any::<u32>(), any::<u32>(), any::<u16>(), any::<bool>()).prop_map(|(s, d, id, df)| IpContext::V4 {
        src: Ipv4Addr::from(s),
        dst: Ipv4Addr::from(d),
        identification: id,
        dont_fragment: df,
    });
    let v6 = (any::<u128>(), any::<u128>())
        .prop_map(|(s, d)| IpContext::V6 { src: Ipv6Addr::from(s), dst: Ipv6Addr::from(d) });
    (prop_oneof![v4, v6], any::<u16>()).prop_map(|(ip, sport)| IcrcContext {
        ip,
        src_port: sport,
        dst_port: ROCE_V2_UDP_PORT,
    })
}

/// A packet of a random opcode with random header fields and a payload the
/// opcode allows.
fn packet() -> impl Strategy<Value = (PacketRepr, Vec<u8>)> {
    let bth = (0..ALL.len(), any::<[bool; 6]>(), any::<u16>(), 0u32..1 << 24, 0u32..1 << 24);
    let ext = (
        (any::<u32>(), 0u32..1 << 24, 0u8..4, 0u8..16),
        (any::<u64>(), any::<u32>(), any::<u32>()),
        (any::<u64>(), any::<u32>(), any::<u64>(), any::<u64>()),
        (any::<u8>(), 0u32..1 << 24, any::<u64>(), any::<u32>(), any::<u32>()),
    );
    (bth, ext, prop::collection::vec(any::<u8>(), 0..=4096)).prop_map(|(b, e, mut payload)| {
        let info = &ALL[b.0];
        let [solicited, mig_req, fecn, becn, ack_req, _] = b.1;
        let ((qkey, src_qpn, sel, plt), (va, rkey, len), (ava, arkey, swap, cmp), (syn, msn, orig, imm, inv)) = e;
        let has = |h| info.headers.contains(h);
        let ext = ExtRepr {
            deth: has(ExtHeader::Deth).then_some(DethRepr { qkey, src_qpn }),
            feth: has(ExtHeader::Feth).then_some(FethRepr { selectivity_level: sel, placement_type: plt }),
            reth: has(ExtHeader::Reth).then_some(RethRepr { va, rkey, dma_len: len }),
            atomic_eth: has(ExtHeader::AtomicEth).then_some(AtomicEthRepr {
                va: ava,
                rkey: arkey,
                swap_add: swap,
                compare: cmp,
            }),
            aeth: has(ExtHeader::Aeth).then_some(AethRepr { syndrome: Syndrome::from_byte(syn), msn }),
            atomic_ack_eth: has(ExtHeader::AtomicAckEth).then_some(AtomicAckEthRepr { orig }),
            immdt: has(ExtHeader::ImmDt).then_some(ImmDtRepr { imm }),
            ieth: has(ExtHeader::Ieth).then_some(IethRepr { rkey: inv }),
        };
        match info.payload {
            PayloadRule::None => payload.clear(),
            PayloadRule::Exactly(n) => payload.resize(n, 0xa5),
            PayloadRule::Any => {}
        }
        let repr = PacketRepr {
            bth: BthRepr {
                opcode: info.opcode,
                solicited,
                mig_req,
                pkey: b.2,
                fecn,
                becn,
                dest_qpn: b.3,
                ack_req,
                psn: Psn::new(b.4),
            },
            ext,
        };
        (repr, payload)
    })
}

fn emit(repr: &PacketRepr, payload: &[u8], ctx: &IcrcContext) -> Vec<u8> {
    let mut buf = vec![0u8; repr.packet_len(payload.len()).unwrap()];
    let n = repr.emit(&mut buf, payload, ctx).unwrap();
    assert_eq!(n, buf.len());
    buf
}

/// Touches every accessor of a parsed packet.
fn exercise(p: &Packet<&[u8]>) {
    let b = p.bth();
    let _ = (b.opcode(), b.solicited(), b.mig_req(), b.pad_count(), b.pkey(), b.fecn(), b.becn());
    let _ = (b.dest_qpn(), b.ack_req(), b.psn());
    let _ = p.reth().map(|h| (h.va(), h.rkey(), h.dma_len()));
    let _ = p.aeth().map(|h| (h.syndrome(), h.msn()));
    let _ = p.atomic_eth().map(|h| (h.va(), h.rkey(), h.swap_add(), h.compare()));
    let _ = p.atomic_ack_eth().map(|h| h.orig());
    let _ = p.immdt().map(|h| h.imm());
    let _ = p.ieth().map(|h| h.rkey());
    let _ = p.deth().map(|h| (h.qkey(), h.src_qpn()));
    let _ = p.feth().map(|h| (h.selectivity_level(), h.placement_type()));
    let _ = (p.payload(), p.pad(), p.covered(), p.icrc());
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn emit_parse_round_trip((repr, payload) in packet(), ctx in ctx()) {
        let bytes = emit(&repr, &payload, &ctx);
        let p = Packet::new_checked(&bytes[..]).unwrap();
        prop_assert_eq!(PacketRepr::parse(&p), repr);
        prop_assert_eq!(p.payload(), &payload[..]);
        prop_assert_eq!(usize::from(p.bth().pad_count()), (4 - payload.len() % 4) % 4);
        prop_assert!(p.pad().iter().all(|b| *b == 0));
        prop_assert_eq!(p.verify_icrc(IcrcHasher::new(&ctx, bytes.len())), Ok(()));
        prop_assert_eq!(IcrcPolicy::Full.check(&ctx, true, &bytes), Ok(IcrcCheck::Verified));
        // Headers alone (for scatter-gather sends) are the packet's prefix.
        let mut hdr = [0u8; 64];
        let h = repr.emit_headers(&mut hdr, payload.len()).unwrap();
        prop_assert_eq!(&hdr[..h], &bytes[..h]);
    }

    #[test]
    fn every_single_bit_flip_is_caught((repr, payload) in packet(), ctx in ctx(), pick in any::<prop::sample::Index>()) {
        let mut bytes = emit(&repr, &payload, &ctx);
        // Bits of BTH byte 4 (FECN/BECN/resv6) are outside the ICRC by design.
        let bits: Vec<usize> = (0..bytes.len() * 8).filter(|b| b / 8 != 4).collect();
        let bit = bits[pick.index(bits.len())];
        bytes[bit / 8] ^= 1 << (bit % 8);
        if let Ok(p) = Packet::new_checked(&bytes[..]) {
            let r = p.verify_icrc(IcrcHasher::new(&ctx, bytes.len()));
            prop_assert!(matches!(r, Err(WireError::BadIcrc { .. })), "bit {} flipped unnoticed", bit);
        }
    }

    #[test]
    fn arbitrary_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..600), ctx in ctx()) {
        if let Ok(p) = Packet::new_checked(&bytes[..]) {
            exercise(&p);
            let repr = PacketRepr::parse(&p);
            let again = emit(&repr, p.payload(), &ctx);
            prop_assert_eq!(again.len(), bytes.len());
        }
        let _ = IcrcPolicy::Full.check(&ctx, false, &bytes);
        let split = bytes.len() / 3;
        let _ = IcrcHasher::from_raw_headers(&bytes[..split], &bytes[split..]);
    }

    #[test]
    fn arbitrary_bytes_behind_a_valid_opcode_never_panic(
        op in 0..ALL.len(), tail in prop::collection::vec(any::<u8>(), 0..100), pad in 0u8..4,
    ) {
        // Steer past the opcode check so the length rules get exercised.
        let mut bytes = vec![ALL[op].opcode.0, pad << 4];
        bytes.extend_from_slice(&tail);
        if let Ok(p) = Packet::new_checked(&bytes[..]) {
            exercise(&p);
            prop_assert!(p.payload().len() + usize::from(pad) + p.info().header_len() + ICRC_LEN == bytes.len());
        }
    }
}
