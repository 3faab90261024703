//! Scatter-gather transmits: `poll_transmit_gather` leaves payload in
//! registered memory and lists it as pieces; the assembled datagrams are
//! valid packets with correct ICRCs and move the same data as copies.
#![allow(unsafe_code)]

mod common;

use common::{A, B, Pair, Setup};
use roce_proto::Piece;
use roce_proto::verbs::{SendFlags, WcStatus, WrOpcode};
use roce_proto::{Payload, SendWr, Sge};
use roce_wire::{IcrcContext, IcrcHasher, IpContext, Packet};

/// Moves every packet with the gather API until quiet; returns
/// (datagrams, of which carried payload as pieces).
fn run_gathered(p: &mut Pair) -> (usize, usize) {
    let mut head = vec![0u8; 9000];
    let mut pieces: Vec<Piece> = Vec::new();
    let (mut n, mut gathered) = (0, 0);
    for _ in 0..10_000 {
        let mut any = false;
        for i in [A, B] {
            let Some(t) = p.dev[i].poll_transmit_gather(p.now, &mut head, &mut pieces) else { continue };
            any = true;
            n += 1;
            let mut bytes = head[..t.head_len].to_vec();
            // SAFETY: the test owns the memory and nothing writes it now.
            let slices: Vec<&[u8]> =
                pieces.iter().map(|pc| unsafe { pc.region.as_slice(pc.offset, pc.len) }.unwrap()).collect();
            slices.iter().for_each(|s| bytes.extend_from_slice(s));
            gathered += usize::from(!pieces.is_empty());
            bytes.extend(std::iter::repeat_n(0u8, t.pad_len));
            let icrc = t.icrc(&head[..t.head_len], slices.iter().copied());
            assert_eq!(icrc, t.icrc(&head[..t.head_len], slices.iter().copied()), "the same ICRC twice");
            bytes.extend_from_slice(&icrc.to_le_bytes());
            assert_eq!(bytes.len(), t.len);
            // An independent check: parse, and verify the ICRC from scratch.
            let pkt = Packet::new_checked(&bytes[..]).expect("a valid packet");
            let (std::net::IpAddr::V4(s), std::net::IpAddr::V4(d)) = (t.src, t.dst) else { unreachable!() };
            let ctx = IcrcContext { ip: IpContext::v4_socket(s, d), src_port: t.src_port, dst_port: 4791 };
            pkt.verify_icrc(IcrcHasher::new(&ctx, bytes.len())).expect("the ICRC of the assembled datagram");
            p.dev[1 - i].handle_datagram(p.now, p.addr[i], t.src_port, p.addr[1 - i], None, &bytes);
        }
        if !any && !p.advance() {
            return (n, gathered);
        }
    }
    panic!("no quiescence");
}

#[test]
fn gathered_writes_reads_and_sends_carry_the_same_bytes() {
    let mut p = Pair::new(Setup::default());
    let a = p.fill(A, 0, 10_000, 3);
    p.fill(B, 50_000, 5000, 9);
    // A WRITE whose payload spans two SGEs, crossing packet boundaries.
    let sges = [p.sge(A, 0, 1500), p.sge(A, 1500, 2500)];
    let mut wr = SendWr::new(1, WrOpcode::RdmaWrite, SendFlags::SIGNALED, Payload::Sges(&sges));
    (wr.remote_addr, wr.rkey) = (p.va(B, 20_000), p.key[B]);
    p.dev[A].post_send(p.qpn[A].into(), &wr).unwrap();
    // A READ: its responses are gathered at B.
    let r: [Sge; 1] = [p.sge(A, 30_000, 5000)];
    let mut wr = SendWr::new(2, WrOpcode::RdmaRead, SendFlags::SIGNALED, Payload::Sges(&r));
    (wr.remote_addr, wr.rkey) = (p.va(B, 50_000), p.key[B]);
    p.dev[A].post_send(p.qpn[A].into(), &wr).unwrap();
    // An inline SEND (copied at post time, so it stays in the head).
    p.recv(B, 7, 60_000, 64);
    let wr = SendWr::new(3, WrOpcode::Send, SendFlags::SIGNALED | SendFlags::INLINE, Payload::Inline(b"inline!"));
    p.dev[A].post_send(p.qpn[A].into(), &wr).unwrap();
    let (n, gathered) = run_gathered(&mut p);
    let wcs = p.completions(A);
    assert_eq!(
        wcs.iter().map(|w| (w.wr_id, w.status)).collect::<Vec<_>>(),
        [(1, WcStatus::Success), (2, WcStatus::Success), (3, WcStatus::Success)]
    );
    assert_eq!(p.mem[B].get(20_000, 4000), a[..4000]);
    assert_eq!(p.mem[A].get(30_000, 5000), p.mem[B].get(50_000, 5000));
    assert_eq!(p.mem[B].get(60_000, 7), b"inline!");
    // 4 WRITE packets + 5 READ responses carried pieces; the READ request,
    // the inline SEND and the ACKs did not.
    assert_eq!(gathered, 9, "of {n} datagrams");
    assert_eq!(p.dev[B].counters().drop_icrc + p.dev[A].counters().drop_icrc, 0);
}

/// Assembles a gathered packet: head, pieces, pad, ICRC.
fn assemble(t: &roce_proto::TransmitGather, head: &[u8], pieces: &[Piece]) -> Vec<u8> {
    let mut bytes = head.to_vec();
    // SAFETY: the test owns the memory and nothing writes it now.
    let slices: Vec<&[u8]> =
        pieces.iter().map(|pc| unsafe { pc.region.as_slice(pc.offset, pc.len) }.unwrap()).collect();
    slices.iter().for_each(|s| bytes.extend_from_slice(s));
    bytes.extend(std::iter::repeat_n(0u8, t.pad_len));
    bytes.extend_from_slice(&t.icrc(head, slices.iter().copied()).to_le_bytes());
    assert_eq!(bytes.len(), t.len);
    bytes
}

/// Posts the same work on A of a fresh pair: on two QPs, multi-packet
/// WRITEs (so QPs take turns mid-message), small WRITEs of one length
/// (which share a pseudo-header ICRC) and a SEND of another length.
fn burst_workload() -> Pair {
    let mut p = Pair::new(Setup::default());
    p.fill(A, 0, 200_000, 5);
    let second = p.add_pair(Setup::default());
    for k in 0..6u64 {
        p.send(A, k, WrOpcode::RdmaWrite, 1000 * k as usize, 40_000 + 333 * k as u32, 1000);
        p.send(A, 100 + k, WrOpcode::RdmaWrite, 64 * k as usize, 8, 0);
    }
    let sge = [p.sge(A, 0, 20_000)];
    let mut wr = SendWr::new(200, WrOpcode::RdmaWrite, SendFlags::SIGNALED, Payload::Sges(&sge));
    (wr.remote_addr, wr.rkey) = (p.va(B, 0), p.key[B]);
    p.dev[A].post_send(second[A].into(), &wr).unwrap();
    p.recv(B, 9, 300_000, 1000);
    p.send(A, 300, WrOpcode::Send, 0, 1000, 0);
    p
}

/// A packet's headers and payload, its RETH address made relative to B's
/// buffer and its R_Key cleared (two pairs' buffers and keys differ).
fn canonical(p: &Pair, bytes: &[u8]) -> (roce_wire::PacketRepr, Vec<u8>) {
    let pkt = Packet::new_checked(bytes).expect("a valid packet");
    let mut repr = roce_wire::PacketRepr::parse(&pkt);
    if let Some(r) = repr.ext.reth.as_mut() {
        r.va -= p.va(B, 0);
        r.rkey = 0;
    }
    (repr, pkt.payload().to_vec())
}

#[test]
fn a_burst_sends_what_single_polls_send_byte_for_byte() {
    // The reference: one packet per call, payload copied, ICRC from scratch.
    let mut one = burst_workload();
    let (mut buf, mut want) = (vec![0u8; 9000], Vec::new());
    while let Some(t) = one.dev[A].poll_transmit(one.now, &mut buf) {
        want.push(canonical(&one, &buf[..t.len]));
    }
    assert!(want.len() > 100, "{} packets", want.len());
    // Bursts that run dry, and bursts stopped after every k-th packet and
    // resumed: the same packets in the same order.
    for stop_every in [usize::MAX, 1, 5, 16, 17] {
        let mut p = burst_workload();
        let (mut head, mut pieces) = (vec![0u8; 9000], Vec::new());
        let mut got = Vec::new();
        loop {
            let before = got.len();
            let mut in_call = 0;
            p.dev[A].poll_transmit_burst(p.now, &mut head, &mut pieces, |t, h, pcs| {
                let (std::net::IpAddr::V4(s), std::net::IpAddr::V4(d)) = (t.src, t.dst) else { unreachable!() };
                let ctx = IcrcContext { ip: IpContext::v4_socket(s, d), src_port: t.src_port, dst_port: 4791 };
                let bytes = assemble(t, h, pcs);
                // The ICRC from scratch, without the shared pseudo header.
                let pkt = Packet::new_checked(&bytes[..]).expect("a valid packet");
                pkt.verify_icrc(IcrcHasher::new(&ctx, bytes.len())).expect("the burst packet's ICRC");
                got.push(bytes);
                in_call += 1;
                in_call < stop_every
            });
            if got.len() == before {
                break;
            }
        }
        assert_eq!(got.len(), want.len(), "stopping every {stop_every}");
        for (i, (g, w)) in got.iter().zip(&want).enumerate() {
            assert!(canonical(&p, g) == *w, "packet {i} differs when stopping every {stop_every}");
        }
    }
}
