//! The responder's reorder buffer and the requester's hole resends
//! (`roce_proto::reorder`), scripted packet by packet: requests ahead of a
//! gap are kept and executed once, in order; a requester learns that its
//! peer keeps when an ACK overtakes its go-back-N rewind, and from then on
//! resends only the holes it is NAKed for.

mod common;

use common::{A, B, Pair, Pkt, Setup};
use roce_proto::testing::QpProbe;
use roce_proto::verbs::{WcOpcode, WcStatus, WrOpcode};
use roce_wire::{Psn, Syndrome};

const PKTS: usize = 20;

/// Up to `n` packets device `i` sends now.
fn poll(p: &mut Pair, i: usize, n: usize) -> Vec<Pkt> {
    let mut buf = vec![0u8; 9000];
    let mut out = Vec::new();
    while out.len() < n {
        let Some(t) = p.dev[i].poll_transmit(p.now, &mut buf) else { break };
        let k = Pkt { from: i, src_port: t.src_port, bytes: buf[..t.len].to_vec(), at: p.elapsed() };
        p.log.push(k.clone());
        out.push(k);
    }
    out
}

fn deliver_all(p: &mut Pair, pkts: &[Pkt]) {
    for k in pkts {
        p.deliver(k);
    }
}

/// PSN-sequence NAKs among `pkts`, by PSN.
fn naks(pkts: &[Pkt]) -> Vec<Psn> {
    pkts.iter()
        .filter(|k| {
            k.packet().aeth().is_some_and(|a| a.syndrome() == Syndrome::Nak(roce_wire::NakCode::PsnSequenceError))
        })
        .map(Pkt::psn)
        .collect()
}

/// Posts a 20-packet WRITE from A (wr_id `id`) and sends all of it,
/// delivering every packet but those at `lost` (indexes in the message).
/// Returns the message's first PSN.
fn write_losing(p: &mut Pair, id: u64, lost: &[usize]) -> Psn {
    p.fill(A, 0, PKTS * 1024, id as u8);
    p.send(A, id, WrOpcode::RdmaWrite, 0, (PKTS * 1024) as u32, 0);
    let out = poll(p, A, usize::MAX);
    assert_eq!(out.len(), PKTS);
    for (i, k) in out.iter().enumerate() {
        if !lost.contains(&i) {
            p.deliver(k);
        }
    }
    out[0].psn()
}

fn qp(p: &Pair, i: usize) -> &roce_proto::qp::Qp {
    p.dev[i].qp(p.qpn[i].into()).unwrap()
}

/// A's first loss: go-back-N, overtaken by B's ACK for what it kept.
fn learn(p: &mut Pair) {
    // A round trip of 200 us first, for A's probe timer.
    p.send(A, 100, WrOpcode::RdmaWrite, 0, 64, 0);
    for from in [A, B] {
        let out = poll(p, from, usize::MAX);
        p.now += std::time::Duration::from_micros(100);
        deliver_all(p, &out);
    }
    assert_eq!(p.completions(A).len(), 1);
    assert!(qp(p, A).srtt().is_some());
    let first = write_losing(p, 1, &[2]);
    assert_eq!(p.dev[B].counters().reorder_kept, (PKTS - 3) as u64, "everything after the gap is kept");
    let answer = poll(p, B, usize::MAX);
    assert_eq!(naks(&answer), [first.add(2)], "one NAK for the gap");
    deliver_all(p, &answer);
    assert!(!qp(p, A).peer_keeps());
    // A goes back N; its first packet is the hole, asking for an ACK.
    let resent = poll(p, A, 1);
    assert_eq!(resent[0].psn(), first.add(2));
    assert!(resent[0].packet().bth().ack_req());
    deliver_all(p, &resent);
    let ack = poll(p, B, usize::MAX);
    assert_eq!(ack.last().unwrap().psn(), first.add(PKTS as u32 - 1), "B executed what it kept and says so");
    deliver_all(p, &ack);
    assert!(qp(p, A).peer_keeps(), "the ACK overtook the rewind");
    assert_eq!(p.dev[A].counters().resends_skipped, 1);
    assert!(poll(p, A, usize::MAX).is_empty(), "nothing acknowledged is sent again");
    assert_eq!(p.mem[B].get(0, PKTS * 1024), p.mem[A].get(0, PKTS * 1024));
    let wc = p.completions(A);
    assert_eq!((wc.len(), wc[0].wr_id, wc[0].status), (1, 1, WcStatus::Success));
}

#[test]
fn kept_requests_are_executed_once_and_an_overtaking_ack_teaches_the_requester() {
    let mut p = Pair::new(Setup::default());
    learn(&mut p);
    assert_eq!(p.dev[A].counters().sent_pkts, PKTS as u64 + 2, "the warm-up's packet and one resent");
    assert_eq!(p.dev[B].counters().duplicate_request, 0);
}

#[test]
fn a_learned_requester_resends_only_the_holes_named() {
    let mut p = Pair::new(Setup::default());
    learn(&mut p);
    let sent = p.dev[A].counters().sent_pkts;
    let first = write_losing(&mut p, 2, &[5, 12]);
    let answer = poll(&mut p, B, usize::MAX);
    assert_eq!(naks(&answer), [first.add(5)]);
    deliver_all(&mut p, &answer);
    let resent = poll(&mut p, A, usize::MAX);
    assert_eq!(resent.iter().map(Pkt::psn).collect::<Vec<_>>(), [first.add(5)], "the hole alone");
    deliver_all(&mut p, &resent);
    // B executes the hole and what it kept up to the next gap, and NAKs that.
    let answer = poll(&mut p, B, usize::MAX);
    assert_eq!(naks(&answer), [first.add(12)]);
    deliver_all(&mut p, &answer);
    let resent = poll(&mut p, A, usize::MAX);
    assert_eq!(resent.iter().map(Pkt::psn).collect::<Vec<_>>(), [first.add(12)]);
    deliver_all(&mut p, &resent);
    let ack = poll(&mut p, B, usize::MAX);
    assert_eq!(ack.last().unwrap().psn(), first.add(PKTS as u32 - 1));
    deliver_all(&mut p, &ack);
    assert!(poll(&mut p, A, usize::MAX).is_empty());
    assert_eq!(p.dev[A].counters().sent_pkts - sent, PKTS as u64 + 2, "20 packets and 2 holes");
    assert_eq!(p.dev[A].counters().hole_resends, 2);
    assert_eq!(p.mem[B].get(0, PKTS * 1024), p.mem[A].get(0, PKTS * 1024));
    let wc = p.completions(A);
    assert_eq!((wc.len(), wc[0].wr_id, wc[0].status), (1, 2, WcStatus::Success));
}

#[test]
fn three_losses_in_a_row_send_the_requester_back_n_and_it_learns_again() {
    let mut p = Pair::new(Setup::default());
    learn(&mut p);
    let first = write_losing(&mut p, 2, &[5, 6, 7]);
    let answer = poll(&mut p, B, usize::MAX);
    deliver_all(&mut p, &answer);
    // Two holes in a row are still resent alone.
    for hole in [5, 6] {
        let resent = poll(&mut p, A, usize::MAX);
        assert_eq!(resent.iter().map(Pkt::psn).collect::<Vec<_>>(), [first.add(hole)]);
        deliver_all(&mut p, &resent);
        let answer = poll(&mut p, B, usize::MAX);
        assert_eq!(naks(&answer), [first.add(hole + 1)]);
        deliver_all(&mut p, &answer);
    }
    assert!(!qp(&p, A).peer_keeps(), "the third hole in a row: a responder that keeps would have had it");
    let resent = poll(&mut p, A, 1);
    assert_eq!(resent[0].psn(), first.add(7), "back N from the new gap");
    deliver_all(&mut p, &resent);
    let ack = poll(&mut p, B, usize::MAX);
    deliver_all(&mut p, &ack);
    assert!(qp(&p, A).peer_keeps(), "learned again");
    assert!(poll(&mut p, A, usize::MAX).is_empty());
    assert_eq!(p.mem[B].get(0, PKTS * 1024), p.mem[A].get(0, PKTS * 1024));
    assert_eq!(p.completions(A)[0].status, WcStatus::Success);
}

#[test]
fn a_lost_hole_resend_is_probed_with_the_hole_not_the_tail() {
    let mut p = Pair::new(Setup::default());
    learn(&mut p);
    let sent = p.dev[A].counters().sent_pkts;
    let first = write_losing(&mut p, 2, &[7]);
    let answer = poll(&mut p, B, usize::MAX);
    deliver_all(&mut p, &answer);
    let lost = poll(&mut p, A, usize::MAX);
    assert_eq!(lost.iter().map(Pkt::psn).collect::<Vec<_>>(), [first.add(7)]);
    // The resent hole is lost as well: B, which NAKs a gap once, is silent.
    assert!(p.advance(), "A's probe timer");
    let probe = poll(&mut p, A, usize::MAX);
    assert_eq!(probe.iter().map(Pkt::psn).collect::<Vec<_>>(), [first.add(7)], "the hole again");
    assert_eq!(p.dev[A].counters().tail_probes, 1);
    deliver_all(&mut p, &probe);
    let ack = poll(&mut p, B, usize::MAX);
    deliver_all(&mut p, &ack);
    assert!(poll(&mut p, A, usize::MAX).is_empty());
    assert_eq!(p.dev[A].counters().sent_pkts - sent, PKTS as u64 + 2);
    assert_eq!(p.mem[B].get(0, PKTS * 1024), p.mem[A].get(0, PKTS * 1024));
    assert_eq!(p.completions(A)[0].status, WcStatus::Success);
}

#[test]
fn a_lost_nak_is_found_by_probing_the_oldest_packet_not_by_a_timeout() {
    let mut p = Pair::new(Setup::default());
    learn(&mut p);
    let sent = p.dev[A].counters().sent_pkts;
    let first = write_losing(&mut p, 2, &[9]);
    // B's NAK for PSN 9 (and any ACK) is lost: B names a gap once.
    let lost = poll(&mut p, B, usize::MAX);
    assert_eq!(naks(&lost), [first.add(9)]);
    let t0 = p.now;
    assert!(p.advance());
    let probe = poll(&mut p, A, usize::MAX);
    assert_eq!(probe.iter().map(Pkt::psn).collect::<Vec<_>>(), [first], "the oldest unacknowledged packet");
    deliver_all(&mut p, &probe);
    // A duplicate: B answers where its gap is.
    let ack = poll(&mut p, B, usize::MAX);
    assert_eq!(ack.iter().map(Pkt::psn).collect::<Vec<_>>(), [first.add(8)]);
    deliver_all(&mut p, &ack);
    assert!(p.advance());
    let probe = poll(&mut p, A, usize::MAX);
    assert_eq!(probe.iter().map(Pkt::psn).collect::<Vec<_>>(), [first.add(9)], "now the hole");
    deliver_all(&mut p, &probe);
    let ack = poll(&mut p, B, usize::MAX);
    deliver_all(&mut p, &ack);
    assert!(poll(&mut p, A, usize::MAX).is_empty());
    assert_eq!(p.dev[A].counters().sent_pkts - sent, PKTS as u64 + 2);
    assert_eq!(p.dev[A].counters().completer_retry_err, 1, "the first write's NAK only: no timeout");
    let rto = p.dev[A].qp(p.qpn[A].into()).unwrap().rto(std::time::Duration::from_secs(1), p.now);
    assert!(p.now - t0 < rto, "recovered in {:?}, before one retransmission timeout ({rto:?})", p.now - t0);
    assert_eq!(p.mem[B].get(0, PKTS * 1024), p.mem[A].get(0, PKTS * 1024));
    assert_eq!(p.completions(A)[0].status, WcStatus::Success);
}

/// What an rxe requester does: everything from the gap again, at once. The
/// kept requests and their resent copies are executed once, in order.
#[test]
fn sends_kept_ahead_of_a_gap_complete_once_in_order_when_everything_is_resent() {
    let mut p = Pair::new(Setup::default());
    // One SEND first: its ACK tells A how many receives B has.
    p.recv(B, 99, 0, 64);
    p.send(A, 99, WrOpcode::Send, 0, 64, 0);
    p.run(|_| true);
    assert_eq!(p.completions(A).len(), 1);
    assert_eq!(p.completions(B).len(), 1);
    let data = p.fill(A, 0, 3 * 3072, 9);
    for i in 0..3 {
        p.recv(B, 10 + i as u64, i * 4096, 4096);
    }
    for i in 0..3 {
        p.send(A, i as u64, WrOpcode::Send, i * 3072, 3072, 0);
    }
    let mut dropped = false;
    p.run(|k| {
        // The MIDDLE of the first SEND, once.
        let lose = k.from == A && k.opcode() == roce_wire::Opcode::RC_SEND_MIDDLE && !dropped;
        dropped |= lose;
        !lose
    });
    assert_eq!(p.dev[B].counters().reorder_kept, 7);
    let wc = p.completions(B);
    assert_eq!(
        wc.iter().map(|w| (w.wr_id, w.status, w.opcode, w.byte_len)).collect::<Vec<_>>(),
        (0..3).map(|i| (10 + i, WcStatus::Success, WcOpcode::Recv, 3072)).collect::<Vec<_>>()
    );
    for i in 0..3 {
        assert_eq!(p.mem[B].get(i * 4096, 3072), data[i * 3072..(i + 1) * 3072]);
    }
    assert_eq!(p.completions(A).len(), 3);
}
