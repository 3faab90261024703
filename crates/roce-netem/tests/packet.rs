//! Corruption of UDP payloads: exactly one bit, only in the payload, and a UDP checksum the receiving kernel
//! accepts. Packets are built and checksums re-checked with `etherparse`, independently of the crate's code.

use etherparse::{NetHeaders, PacketBuilder, PacketHeaders, TransportHeader};
use roce_netem::packet::{
    ChecksumState, IpVersion, build_ipv4_udp, build_ipv6_udp, compute_udp_checksum, corrupt_udp_payload, find_udp,
    udp_checksum_state,
};

const SRC4: [u8; 4] = [10, 233, 0, 1];
const DST4: [u8; 4] = [10, 233, 0, 2];
const SRC6: [u8; 16] = [0xfd, 0, 0x02, 0x33, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1];
const DST6: [u8; 16] = [0xfd, 0, 0x02, 0x33, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2];

fn payload(n: usize) -> Vec<u8> {
    (0..n).map(|i| (i * 37 + 11) as u8).collect()
}

fn ep_ipv4_udp(payload: &[u8]) -> Vec<u8> {
    let b = PacketBuilder::ipv4(SRC4, DST4, 64).udp(49152, 4791);
    let mut v = Vec::with_capacity(b.size(payload.len()));
    b.write(&mut v, payload).unwrap();
    v
}

fn ep_ipv6_udp(payload: &[u8]) -> Vec<u8> {
    let b = PacketBuilder::ipv6(SRC6, DST6, 64).udp(49152, 4791);
    let mut v = Vec::with_capacity(b.size(payload.len()));
    b.write(&mut v, payload).unwrap();
    v
}

/// etherparse's verdict on the UDP checksum: `Some(true)` if valid, `None` if absent (IPv4 zero).
fn ep_checksum_ok(pkt: &[u8]) -> Option<bool> {
    let h = PacketHeaders::from_ip_slice(pkt).expect("etherparse parses the packet");
    let Some(TransportHeader::Udp(udp)) = h.transport else { panic!("not UDP") };
    let data = h.payload.slice();
    match h.net {
        Some(NetHeaders::Ipv4(ip, _)) => {
            if udp.checksum == 0 {
                None
            } else {
                Some(udp.calc_checksum_ipv4(&ip, data).unwrap() == udp.checksum)
            }
        }
        Some(NetHeaders::Ipv6(ip, _)) => Some(udp.calc_checksum_ipv6(&ip, data).unwrap() == udp.checksum),
        _ => panic!("not IP"),
    }
}

fn bit_diffs(a: &[u8], b: &[u8]) -> Vec<usize> {
    assert_eq!(a.len(), b.len());
    let mut out = Vec::new();
    for (i, (x, y)) in a.iter().zip(b).enumerate() {
        for bit in 0..8 {
            if (x ^ y) & (0x80 >> bit) != 0 {
                out.push(i * 8 + bit);
            }
        }
    }
    out
}

/// Corrupts `orig` with the bit chosen by `pick`, then checks: exactly one payload bit differs, apart from
/// the UDP checksum field, and the checksum is valid (or still 0 for IPv4 without checksum).
fn check_one_corruption(orig: &[u8], pick: usize) {
    let loc = find_udp(orig).expect("UDP packet");
    let mut pkt = orig.to_vec();
    let bit = corrupt_udp_payload(&mut pkt, |bits| {
        assert_eq!(bits, loc.payload_len() * 8);
        pick
    })
    .expect("corrupted");
    assert_eq!(bit, pick % (loc.payload_len() * 8));
    // Outside the checksum field, exactly one bit differs, and it is the payload bit reported.
    let ck = loc.checksum_offset();
    let mut masked_orig = orig.to_vec();
    let mut masked_new = pkt.clone();
    for p in [&mut masked_orig, &mut masked_new] {
        p[ck] = 0;
        p[ck + 1] = 0;
    }
    assert_eq!(bit_diffs(&masked_orig, &masked_new), vec![loc.payload_offset() * 8 + bit]);
    let orig_ck = [orig[ck], orig[ck + 1]];
    if loc.version == IpVersion::V4 && orig_ck == [0, 0] {
        assert_eq!([pkt[ck], pkt[ck + 1]], [0, 0], "an IPv4 datagram without checksum keeps 0");
        assert_eq!(ep_checksum_ok(&pkt), None);
        assert_eq!(udp_checksum_state(&pkt), Some(ChecksumState::Absent));
    } else {
        assert_eq!(ep_checksum_ok(&pkt), Some(true), "etherparse accepts the fixed checksum");
        assert_eq!(udp_checksum_state(&pkt), Some(ChecksumState::Valid));
    }
}

#[test]
fn builders_agree_with_etherparse() {
    for n in [0, 1, 2, 7, 100, 1001] {
        let p = payload(n);
        assert_eq!(build_ipv4_udp(SRC4, DST4, 49152, 4791, &p, true)[20..], ep_ipv4_udp(&p)[20..], "n={n}");
        assert_eq!(build_ipv6_udp(SRC6, DST6, 49152, 4791, &p), ep_ipv6_udp(&p), "n={n}");
        assert_eq!(ep_checksum_ok(&ep_ipv4_udp(&p)), Some(true));
        assert_eq!(udp_checksum_state(&ep_ipv4_udp(&p)), Some(ChecksumState::Valid));
        assert_eq!(udp_checksum_state(&ep_ipv6_udp(&p)), Some(ChecksumState::Valid));
    }
}

#[test]
fn ipv4_every_payload_bit_of_a_small_datagram() {
    let orig = ep_ipv4_udp(&payload(5));
    for pick in 0..5 * 8 {
        check_one_corruption(&orig, pick);
    }
}

#[test]
fn ipv6_every_payload_bit_of_a_small_datagram() {
    let orig = ep_ipv6_udp(&payload(5));
    for pick in 0..5 * 8 {
        check_one_corruption(&orig, pick);
    }
}

#[test]
fn ipv4_and_ipv6_large_datagrams() {
    for n in [1, 2, 3, 999, 1000, 4096 + 30, 8972] {
        for pick in [0, 1, 7, 8, n * 8 / 2, n * 8 - 1, 12_345_678] {
            check_one_corruption(&ep_ipv4_udp(&payload(n)), pick);
            check_one_corruption(&ep_ipv6_udp(&payload(n)), pick);
        }
    }
}

#[test]
fn ipv4_without_checksum_keeps_zero() {
    let orig = build_ipv4_udp(SRC4, DST4, 49152, 4791, &payload(300), false);
    assert_eq!(udp_checksum_state(&orig), Some(ChecksumState::Absent));
    for pick in [0, 100, 2399] {
        check_one_corruption(&orig, pick);
    }
}

#[test]
fn checksum_that_computes_to_zero_is_sent_as_ffff() {
    // Search payloads for one whose checksum folds to 0: it must be stored as 0xffff, which is valid.
    let mut found = false;
    for x in 0..=u16::MAX {
        let p = build_ipv4_udp(SRC4, DST4, 49152, 4791, &x.to_be_bytes(), true);
        let loc = find_udp(&p).unwrap();
        if compute_udp_checksum(&p, &loc) == 0xffff {
            assert_eq!(ep_checksum_ok(&p), Some(true));
            found = true;
            break;
        }
    }
    assert!(found);
}

#[test]
fn ipv6_destination_options_header_is_skipped() {
    let orig = ep_ipv6_udp(&payload(64));
    // Insert an 8-byte destination options header (PadN) between the IPv6 header and UDP.
    let mut p = orig[..40].to_vec();
    p[6] = 60;
    let plen = u16::from_be_bytes([p[4], p[5]]) + 8;
    p[4..6].copy_from_slice(&plen.to_be_bytes());
    p.extend_from_slice(&[17, 0, 1, 4, 0, 0, 0, 0]);
    p.extend_from_slice(&orig[40..]);
    let loc = find_udp(&p).unwrap();
    assert_eq!(loc.udp_offset, 48);
    check_one_corruption(&p, 77);
}

#[test]
fn trailing_bytes_beyond_ip_length_are_not_payload() {
    // Padding after the IP packet (as on short Ethernet frames) must never be corrupted.
    let mut p = ep_ipv4_udp(&payload(4));
    p.extend_from_slice(&[0xee; 10]);
    for pick in 0..32 {
        let mut q = p.clone();
        corrupt_udp_payload(&mut q, |_| pick).unwrap();
        assert_eq!(q[q.len() - 10..], [0xee; 10]);
    }
}

/// Packets that must never be touched: `corrupt_udp_payload` returns `None` and leaves them unchanged.
#[test]
fn non_udp_and_unusable_packets_are_untouched() {
    let mut cases: Vec<(&str, Vec<u8>)> = Vec::new();
    let tcp = PacketBuilder::ipv4(SRC4, DST4, 64).tcp(1, 2, 3, 4);
    let mut v = Vec::new();
    tcp.write(&mut v, &payload(100)).unwrap();
    cases.push(("ipv4 tcp", v));
    let icmp = PacketBuilder::ipv4(SRC4, DST4, 64).icmpv4_echo_request(1, 2);
    let mut v = Vec::new();
    icmp.write(&mut v, &payload(56)).unwrap();
    cases.push(("ipv4 icmp", v));
    let tcp6 = PacketBuilder::ipv6(SRC6, DST6, 64).tcp(1, 2, 3, 4);
    let mut v = Vec::new();
    tcp6.write(&mut v, &payload(100)).unwrap();
    cases.push(("ipv6 tcp", v));
    cases.push(("ipv4 udp, empty payload", ep_ipv4_udp(&[])));
    cases.push(("ipv6 udp, empty payload", ep_ipv6_udp(&[])));
    let mut frag = ep_ipv4_udp(&payload(100));
    frag[6] |= 0x20; // more fragments
    cases.push(("ipv4 first fragment", frag));
    let mut frag = ep_ipv4_udp(&payload(100));
    frag[7] = 3; // fragment offset 24 bytes
    cases.push(("ipv4 later fragment", frag));
    let orig6 = ep_ipv6_udp(&payload(64));
    let mut f6 = orig6[..40].to_vec();
    f6[6] = 44;
    let plen = u16::from_be_bytes([f6[4], f6[5]]) + 8;
    f6[4..6].copy_from_slice(&plen.to_be_bytes());
    f6.extend_from_slice(&[17, 0, 0, 1, 0, 0, 0, 9]);
    f6.extend_from_slice(&orig6[40..]);
    cases.push(("ipv6 fragment header", f6));
    let full = ep_ipv4_udp(&payload(100));
    cases.push(("ipv4 truncated", full[..full.len() - 1].to_vec()));
    let full = ep_ipv6_udp(&payload(100));
    cases.push(("ipv6 truncated", full[..full.len() - 1].to_vec()));
    let mut bad_udp_len = ep_ipv4_udp(&payload(100));
    bad_udp_len[24..26].copy_from_slice(&200u16.to_be_bytes());
    cases.push(("udp length beyond ip", bad_udp_len));
    cases.push(("empty", Vec::new()));
    cases.push(("garbage", vec![0x00, 0x11, 0x22]));
    cases.push(("version 5", vec![0x50; 60]));
    for (name, orig) in cases {
        let mut p = orig.clone();
        assert_eq!(corrupt_udp_payload(&mut p, |_| 3), None, "{name}");
        assert_eq!(p, orig, "{name}");
    }
}
