//! Fuzz target for the RoCEv2 packet parser of `roce-wire`.
//!
//! The input is a UDP payload (BTH through ICRC), so the seed corpus is made
//! of real packets. The IP/UDP context used for the ICRC is derived from the
//! last bytes of the input (the ICRC field, which the re-emit comparison
//! ignores), and `IcrcHasher::from_raw_headers` gets slices chosen by the
//! first two bytes. Every property is an `assert!`, so libFuzzer reports a
//! violation as a crash.

#![no_main]

use std::net::{Ipv4Addr, Ipv6Addr};

use libfuzzer_sys::fuzz_target;
use roce_wire::icrc::{self, IcrcHasher};
use roce_wire::opcode::{ExtHeader, OpcodeInfo, PayloadRule};
use roce_wire::{
    Aeth, AtomicAckEth, AtomicEth, Bth, BthRepr, Deth, Feth, ICRC_LEN, IcrcCheck, IcrcContext, IcrcPolicy, Ieth, ImmDt,
    IpContext, NakCode, Opcode, Packet, PacketRepr, Reth, Syndrome, WireError,
};

const BTH_LEN: usize = roce_wire::bth::LEN;
const UDP_LEN: usize = 8;

fuzz_target!(|data: &[u8]| {
    syndromes(data);
    raw_header_slices(data);
    header_views(data);

    let ctx = context(data);
    let expect_ok = reference_accepts(data);
    match Packet::new_checked(data) {
        Ok(p) => {
            assert!(expect_ok, "accepted a packet the reference rejects: {data:02x?}");
            packet(data, &p, &ctx);
        }
        Err(e) => {
            assert!(!expect_ok, "rejected a packet the reference accepts ({e}): {data:02x?}");
            if data.len() < BTH_LEN + ICRC_LEN {
                assert!(matches!(e, WireError::Truncated { .. }), "{e:?}");
            }
            let _ = e.to_string();
        }
    }

    // The ICRC check never panics, whatever the buffer.
    let full = IcrcPolicy::Full.check(&ctx, false, data);
    if data.len() < BTH_LEN + ICRC_LEN {
        assert!(matches!(full, Err(WireError::Truncated { .. })), "{full:?}");
    } else {
        let computed = IcrcHasher::new(&ctx, data.len()).finish_over(&data[..data.len() - ICRC_LEN]).unwrap();
        let found = icrc::stored_icrc(data).unwrap();
        if found == computed {
            assert_eq!(full, Ok(IcrcCheck::Verified));
        } else {
            assert_eq!(full, Err(WireError::BadIcrc { found, computed }));
        }
    }
    assert_eq!(IcrcPolicy::Off.check(&ctx, true, data), Ok(IcrcCheck::Skipped));
    let known = IcrcPolicy::Ipv6OrKnownId.check(&ctx, false, data);
    match (ctx.ip, known) {
        // An unseen IPv4 identification is solved for: the answer must verify.
        (IpContext::V4 { src, dst, .. }, Ok(IcrcCheck::IdSolved { identification, dont_fragment })) => {
            let solved = IcrcContext { ip: IpContext::V4 { src, dst, identification, dont_fragment }, ..ctx };
            assert_eq!(IcrcPolicy::Full.check(&solved, true, data), Ok(IcrcCheck::Verified));
        }
        (IpContext::V4 { .. }, Err(e)) => {
            assert!(matches!(e, WireError::BadIcrc { .. } | WireError::Truncated { .. }), "{e:?}")
        }
        (IpContext::V4 { .. }, other) => panic!("IPv4 with an unseen ID gave {other:?}"),
        (IpContext::V6 { .. }, known) => assert_eq!(known, full),
    }
});

/// `Syndrome::from_byte(b).to_byte() == b` for every input byte.
fn syndromes(data: &[u8]) {
    for &b in data {
        let s = Syndrome::from_byte(b);
        assert_eq!(s.to_byte(), b, "{s:?}");
        match s {
            Syndrome::Ack { credits } => assert!(credits <= 0x1f),
            Syndrome::RnrNak { timer } => {
                let _ = timer.duration();
            }
            Syndrome::Nak(code) => assert_eq!(NakCode::from_code(code.code()), code),
            Syndrome::Reserved(r) => assert!(r & 0x80 != 0 || (r >> 5) & 3 == 2, "{r:#x}"),
        }
        let c = b & 0x1f;
        assert_eq!(NakCode::from_code(c).code(), c);
    }
}

/// The IP/UDP context, from the last 8 bytes of the input.
fn context(data: &[u8]) -> IcrcContext {
    let mut k = [0u8; 8];
    for (slot, b) in k.iter_mut().zip(data.iter().rev()) {
        *slot = *b;
    }
    let sel = k[0];
    let ip = if sel & 1 == 0 {
        IpContext::V4 {
            src: Ipv4Addr::new(10, k[1], k[2], k[3]),
            dst: Ipv4Addr::new(10, k[3], k[2], k[1]),
            identification: u16::from_be_bytes([k[4], k[5]]),
            dont_fragment: sel & 2 != 0,
        }
    } else {
        let w = u16::from_be_bytes([k[1], k[2]]);
        IpContext::V6 {
            src: Ipv6Addr::new(0xfe80, 0, 0, 0, w, u16::from(k[3]), u16::from(k[4]), 1),
            dst: Ipv6Addr::new(0xfd00, u16::from(k[5]), 0, 0, 0, 0, w, 2),
        }
    };
    let dst_port = if sel & 4 == 0 { roce_wire::ROCE_V2_UDP_PORT } else { u16::from_be_bytes([k[5], k[4]]) };
    IcrcContext { ip, src_port: u16::from_be_bytes([k[6], k[7]]), dst_port }
}

/// Whether `new_checked` should accept `d`, written independently of it.
fn reference_accepts(d: &[u8]) -> bool {
    if d.len() < BTH_LEN + ICRC_LEN || d[1] & 0x0f != 0 {
        return false;
    }
    let Some(info) = Opcode(d[0]).info() else {
        return false;
    };
    assert_eq!(info.opcode, Opcode(d[0]));
    let hlen = BTH_LEN + info.headers.iter().map(ExtHeader::byte_len).sum::<usize>();
    assert_eq!(hlen, info.header_len());
    if d.len() < hlen + ICRC_LEN {
        return false;
    }
    let area = d.len() - hlen - ICRC_LEN;
    let pad = usize::from((d[1] >> 4) & 3);
    area % 4 == 0
        && match info.payload {
            PayloadRule::None => area == 0 && pad == 0,
            PayloadRule::Exactly(n) => area == n && pad == 0,
            PayloadRule::Any => pad <= area,
        }
}

/// Offsets of the extended headers, computed independently of `OpcodeInfo::offset`.
fn check_offsets(info: &OpcodeInfo) {
    let mut off = BTH_LEN;
    for h in ExtHeader::ALL {
        if info.headers.contains(h) {
            assert_eq!(info.offset(h), Some(off), "{h:?} in {}", info.name);
            off += h.byte_len();
        } else {
            assert_eq!(info.offset(h), None, "{h:?} in {}", info.name);
        }
    }
    assert_eq!(off, info.header_len());
}

/// Everything about a packet `new_checked` accepted.
fn packet(data: &[u8], p: &Packet<&[u8]>, ctx: &IcrcContext) {
    let n = data.len();
    let info = p.info();
    check_offsets(info);
    let _ = (info.name, info.transport, info.operation, info.position, info.direction());
    let _ = (info.starts_message(), info.ends_message(), info.has_immediate(), info.has_invalidate());
    assert_eq!(info.carries_payload(), info.payload != PayloadRule::None);
    assert_eq!(info.opcode.name(), info.name);

    // BTH.
    let bth = p.bth();
    assert_eq!(bth.opcode(), info.opcode);
    assert_eq!(bth.tver(), 0);
    assert_eq!(bth.solicited(), data[1] & 0x80 != 0);
    assert_eq!(bth.mig_req(), data[1] & 0x40 != 0);
    let pad = usize::from(bth.pad_count());
    assert_eq!(bth.pkey(), u16::from_be_bytes([data[2], data[3]]));
    assert_eq!((bth.fecn(), bth.becn()), (data[4] & 0x80 != 0, data[4] & 0x40 != 0));
    assert_eq!(bth.dest_qpn(), u32::from_be_bytes([0, data[5], data[6], data[7]]));
    assert_eq!(bth.ack_req(), data[8] & 0x80 != 0);
    assert_eq!(bth.psn().value(), u32::from_be_bytes([0, data[9], data[10], data[11]]));

    // Extended headers: present exactly as the opcode says, getters in range.
    let has = |h| info.headers.contains(h);
    assert_eq!(p.reth().is_some(), has(ExtHeader::Reth));
    if let Some(r) = p.reth() {
        let _ = (r.va(), r.rkey(), r.dma_len());
    }
    assert_eq!(p.aeth().is_some(), has(ExtHeader::Aeth));
    if let Some(a) = p.aeth() {
        assert_eq!(a.syndrome().to_byte(), a.syndrome_byte());
        assert!(a.msn() <= 0x00ff_ffff);
        if let Syndrome::RnrNak { timer } = a.syndrome() {
            let _ = timer.duration();
        }
    }
    assert_eq!(p.atomic_eth().is_some(), has(ExtHeader::AtomicEth));
    if let Some(a) = p.atomic_eth() {
        let _ = (a.va(), a.rkey(), a.swap_add(), a.compare());
    }
    assert_eq!(p.atomic_ack_eth().is_some(), has(ExtHeader::AtomicAckEth));
    if let Some(a) = p.atomic_ack_eth() {
        let _ = a.orig();
    }
    assert_eq!(p.immdt().is_some(), has(ExtHeader::ImmDt));
    if let Some(i) = p.immdt() {
        let _ = i.imm();
    }
    assert_eq!(p.ieth().is_some(), has(ExtHeader::Ieth));
    if let Some(i) = p.ieth() {
        let _ = i.rkey();
    }
    assert_eq!(p.deth().is_some(), has(ExtHeader::Deth));
    if let Some(d) = p.deth() {
        let _ = d.qkey();
        assert!(d.src_qpn() <= 0x00ff_ffff);
    }
    assert_eq!(p.feth().is_some(), has(ExtHeader::Feth));
    if let Some(f) = p.feth() {
        assert!(f.selectivity_level() <= 3 && f.placement_type() <= 15);
    }

    // Payload, pad, covered bytes, ICRC.
    let hlen = info.header_len();
    let payload = p.payload();
    assert_eq!(payload, &data[hlen..n - ICRC_LEN - pad]);
    assert_eq!(p.pad(), &data[n - ICRC_LEN - pad..n - ICRC_LEN]);
    assert_eq!(p.covered(), &data[..n - ICRC_LEN]);
    assert_eq!(p.icrc(), u32::from_le_bytes(data[n - 4..].try_into().unwrap()));
    assert_eq!(icrc::stored_icrc(data), Ok(p.icrc()));

    // Repr.
    let repr = PacketRepr::parse(p);
    assert_eq!(BthRepr::parse(&bth), Ok(repr.bth));
    assert_eq!(repr.header_len(), Ok(hlen));
    assert_eq!(repr.packet_len(payload.len()), Ok(n));

    // Re-emit into a buffer full of junk, so every byte must be written.
    let mut out = vec![0xa5u8; n + 7];
    let len = repr.emit(&mut out, payload, ctx).expect("re-emit of a parsed packet");
    assert_eq!(len, n);
    let out = &out[..n];

    // The emitted bytes are the input with reserved bits and pad zeroed.
    let mut masked = data.to_vec();
    masked[1] &= 0xf0; // TVer
    masked[4] &= 0xc0; // resv6
    masked[8] &= 0x80; // resv7
    if let Some(off) = info.offset(ExtHeader::Deth) {
        masked[off + 4] = 0;
    }
    if let Some(off) = info.offset(ExtHeader::Feth) {
        masked[off..off + 3].fill(0);
        masked[off + 3] &= 0x3f;
    }
    masked[n - ICRC_LEN - pad..n - ICRC_LEN].fill(0);
    assert_eq!(&out[..n - ICRC_LEN], &masked[..n - ICRC_LEN], "re-emit differs from input {data:02x?}");

    // The emitted packet parses back to the same thing and its ICRC verifies.
    let q = Packet::new_checked(out).expect("re-parse of an emitted packet");
    assert_eq!(PacketRepr::parse(&q), repr);
    assert_eq!(q.payload(), payload);
    assert!(q.pad().iter().all(|&b| b == 0));
    assert_eq!(IcrcPolicy::Full.check(ctx, false, out), Ok(IcrcCheck::Verified));
    q.verify_icrc(IcrcHasher::new(ctx, n)).expect("verify_icrc of an emitted packet");
    assert_eq!(icrc::verify(IcrcHasher::new(ctx, n), out), Ok(()));
    // BTH byte 4 is masked out of the ICRC.
    let mut ecn = out.to_vec();
    ecn[4] ^= data[0] | 1;
    assert_eq!(IcrcPolicy::Full.check(ctx, false, &ecn), Ok(IcrcCheck::Verified));
    // Any other bit is not (CRC-32 catches every single-bit error).
    let flip = usize::from(data[n - 1]) % (n - ICRC_LEN);
    if flip != 4 {
        ecn[flip] ^= 1 << (data[n - 2] % 8);
        assert!(matches!(IcrcPolicy::Full.check(ctx, false, &ecn), Err(WireError::BadIcrc { .. })));
    }

    // The input verifies iff its ICRC is the re-emitted one, when only
    // byte 4 can differ in the covered bytes.
    let mut a = data[..n - ICRC_LEN].to_vec();
    a[4] = out[4];
    if a == out[..n - ICRC_LEN] {
        let found = p.icrc();
        let computed = u32::from_le_bytes(out[n - 4..].try_into().unwrap());
        let res = p.verify_icrc(IcrcHasher::new(ctx, n));
        if found == computed {
            assert_eq!(res, Ok(()));
        } else {
            assert_eq!(res, Err(WireError::BadIcrc { found, computed }));
        }
    }

    // The pseudo header from raw IP/UDP headers equals the one from the context.
    let noise: [u8; 6] = core::array::from_fn(|i| data[(i * 7 + 3) % n]);
    let (ip, udp) = raw_headers(ctx, n, noise);
    let raw = IcrcHasher::from_raw_headers(&ip, &udp).expect("raw headers").finish_over(&out[..n - ICRC_LEN]);
    assert_eq!(raw, IcrcHasher::new(ctx, n).finish_over(&out[..n - ICRC_LEN]));
    assert_eq!(raw, Ok(u32::from_le_bytes(out[n - 4..].try_into().unwrap())));

    // Too small buffers fail cleanly.
    let mut small = vec![0u8; n - 1];
    assert_eq!(repr.emit(&mut small, payload, ctx), Err(WireError::BufferTooSmall { need: n, have: n - 1 }));
    assert!(matches!(repr.emit_headers(&mut small[..hlen - 1], payload.len()), Err(WireError::BufferTooSmall { .. })));
    assert_eq!(repr.emit_headers(&mut small[..hlen], payload.len()), Ok(hlen));
    assert_eq!(&small[..hlen], &out[..hlen]);
}

/// IP and UDP headers as they would be on the wire for `ctx`, with `noise`
/// in the fields the ICRC masks.
fn raw_headers(ctx: &IcrcContext, roce_len: usize, noise: [u8; 6]) -> (Vec<u8>, [u8; UDP_LEN]) {
    let udp_len = (UDP_LEN + roce_len) as u16;
    let ip = match ctx.ip {
        IpContext::V4 { src, dst, identification, dont_fragment } => {
            let mut h = vec![0u8; 20];
            h[0] = 0x45;
            h[1] = noise[0];
            h[2..4].copy_from_slice(&20u16.wrapping_add(udp_len).to_be_bytes());
            h[4..6].copy_from_slice(&identification.to_be_bytes());
            h[6] = if dont_fragment { 0x40 } else { 0 };
            h[8] = noise[1];
            h[9] = 17;
            h[10] = noise[2];
            h[11] = noise[3];
            h[12..16].copy_from_slice(&src.octets());
            h[16..20].copy_from_slice(&dst.octets());
            h
        }
        IpContext::V6 { src, dst } => {
            let mut h = vec![0u8; 40];
            h[0] = 0x60 | (noise[0] & 0x0f);
            h[1] = noise[1];
            h[2] = noise[2];
            h[3] = noise[3];
            h[4..6].copy_from_slice(&udp_len.to_be_bytes());
            h[6] = 17;
            h[7] = noise[4];
            h[8..24].copy_from_slice(&src.octets());
            h[24..40].copy_from_slice(&dst.octets());
            h
        }
    };
    let mut udp = [0u8; UDP_LEN];
    udp[0..2].copy_from_slice(&ctx.src_port.to_be_bytes());
    udp[2..4].copy_from_slice(&ctx.dst_port.to_be_bytes());
    udp[4..6].copy_from_slice(&udp_len.to_be_bytes());
    udp[6] = noise[4];
    udp[7] = noise[5];
    (ip, udp)
}

/// `from_raw_headers` on slices of the input chosen by its first two bytes:
/// an error exactly when a header is short, never a panic.
fn raw_header_slices(data: &[u8]) {
    let [a, b, rest @ ..] = data else {
        let _ = IcrcHasher::from_raw_headers(data, data);
        return;
    };
    let ip_len = usize::from(*a).min(rest.len());
    let (ip, rest) = rest.split_at(ip_len);
    let udp_len = usize::from(*b & 0x0f).min(rest.len());
    let (udp, rest) = rest.split_at(udp_len);

    let expect_ok = udp.len() >= UDP_LEN
        && match ip.first() {
            None => false,
            Some(v) if v >> 4 == 4 => {
                let ihl = usize::from(v & 0x0f) * 4;
                ihl >= 20 && ip.len() >= ihl
            }
            Some(_) => ip.len() >= 40,
        };
    let res = IcrcHasher::from_raw_headers(ip, udp);
    assert_eq!(res.is_ok(), expect_ok, "ip {ip:02x?} udp {udp:02x?}");
    let Ok(h) = res else { return };
    let base = h.clone().finish_over(rest);
    assert_eq!(base.is_ok(), rest.len() >= BTH_LEN);
    let Ok(base) = base else { return };

    // Masked fields do not change the ICRC; any other single bit does.
    let crc = |ip: &[u8], udp: &[u8]| IcrcHasher::from_raw_headers(ip, udp).unwrap().finish_over(rest).unwrap();
    let v4 = ip[0] >> 4 == 4;
    let (masked, covered): (&[usize], usize) = if v4 { (&[1, 8, 10, 11], 12) } else { (&[1, 2, 3, 7], 8) };
    let mut ip2 = ip.to_vec();
    for &i in masked {
        ip2[i] = !ip2[i];
    }
    if !v4 {
        ip2[0] ^= 0x0f;
    }
    let mut udp2 = udp.to_vec();
    udp2[6] = !udp2[6];
    udp2[7] = !udp2[7];
    assert_eq!(crc(&ip2, &udp2), base);
    ip2[covered] ^= 1 << (b >> 5);
    assert_ne!(crc(&ip2, &udp2), base);
    ip2[covered] ^= 1 << (b >> 5);
    udp2[usize::from(b >> 4) % 6] ^= 0x80;
    assert_ne!(crc(&ip2, &udp2), base);
}

/// The length-checked header views on the raw input.
fn header_views(data: &[u8]) {
    let n = data.len();
    assert_eq!(Bth::new_checked(data).is_ok(), n >= BTH_LEN);
    if let Ok(b) = Bth::new_checked(data) {
        match BthRepr::parse(&b) {
            Ok(r) => assert_eq!(r.opcode, b.opcode()),
            Err(e) => assert_eq!(e, WireError::BadVersion(data[1] & 0x0f)),
        }
    }
    assert_eq!(Reth::new_checked(data).is_ok(), n >= 16);
    assert_eq!(Aeth::new_checked(data).is_ok(), n >= 4);
    assert_eq!(AtomicEth::new_checked(data).is_ok(), n >= 28);
    assert_eq!(AtomicAckEth::new_checked(data).is_ok(), n >= 8);
    assert_eq!(ImmDt::new_checked(data).is_ok(), n >= 4);
    assert_eq!(Ieth::new_checked(data).is_ok(), n >= 4);
    assert_eq!(Deth::new_checked(data).is_ok(), n >= 8);
    assert_eq!(Feth::new_checked(data).is_ok(), n >= 4);
}
