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
            let mut icrc = t.icrc.clone();
            for pc in &pieces {
                // SAFETY: the test owns the memory and nothing writes it now.
                let s = unsafe { pc.region.as_slice(pc.offset, pc.len) }.unwrap();
                icrc.update(s);
                bytes.extend_from_slice(s);
            }
            gathered += usize::from(!pieces.is_empty());
            bytes.extend(std::iter::repeat_n(0u8, t.pad_len));
            icrc.update(&vec![0u8; t.pad_len]);
            bytes.extend_from_slice(&icrc.finish().to_le_bytes());
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
    p.dev[A].post_send(p.qpn[A], &wr).unwrap();
    // A READ: its responses are gathered at B.
    let r: [Sge; 1] = [p.sge(A, 30_000, 5000)];
    let mut wr = SendWr::new(2, WrOpcode::RdmaRead, SendFlags::SIGNALED, Payload::Sges(&r));
    (wr.remote_addr, wr.rkey) = (p.va(B, 50_000), p.key[B]);
    p.dev[A].post_send(p.qpn[A], &wr).unwrap();
    // An inline SEND (copied at post time, so it stays in the head).
    p.recv(B, 7, 60_000, 64);
    let wr = SendWr::new(3, WrOpcode::Send, SendFlags::SIGNALED | SendFlags::INLINE, Payload::Inline(b"inline!"));
    p.dev[A].post_send(p.qpn[A], &wr).unwrap();
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
