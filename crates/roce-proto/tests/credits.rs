//! End-to-end flow control (IBTA 9.7.7.2): the responder's ACKs carry the
//! receive WQEs it has as credits, and the requester holds back SENDs and
//! WRITEs with immediate that would meet an empty receive queue.

mod common;

use common::{A, B, Pair, Pkt, Setup};
use roce_proto::testing::{Credits, QpProbe};
use roce_proto::verbs::{WcStatus, WrOpcode};
use roce_wire::{Opcode, Syndrome};

/// The credit codes of the ACKs (and other responses with an AETH) in `pkts`.
fn credits(pkts: &[Pkt]) -> Vec<u8> {
    pkts.iter()
        .filter_map(|k| match k.packet().aeth()?.syndrome() {
            Syndrome::Ack { credits } => Some(credits),
            _ => None,
        })
        .collect()
}

/// Delivers `pkts`, then the answers to them, and returns the answers.
fn exchange(p: &mut Pair, pkts: &[Pkt]) -> Vec<Pkt> {
    for k in pkts {
        p.deliver(k);
    }
    let answers = p.transmit();
    for k in &answers {
        p.deliver(k);
    }
    answers
}

#[test]
fn acks_carry_the_posted_receive_wqes_rounded_down_to_a_credit_code() {
    let mut p = Pair::new(Setup::default());
    for i in 0..6 {
        p.recv(B, i, 1024 * i as usize, 1024);
    }
    p.send(A, 1, WrOpcode::Send, 0, 8, 0);
    // 5 left after the SEND: the code for 4 (the table has no 5).
    let out = p.transmit();
    let ack = exchange(&mut p, &out);
    assert_eq!(credits(&ack), [Syndrome::credits_for(5)]);
    assert_eq!(Syndrome::credit_count(credits(&ack)[0]), Some(4));
    // An RDMA WRITE takes no receive WQE; its ACK still reports 5 (code 4).
    p.send(A, 2, WrOpcode::RdmaWrite, 0, 8, 0);
    let out = p.transmit();
    assert_eq!(credits(&exchange(&mut p, &out)), [4]);
    // 64 posted: code 12.
    for i in 0..59 {
        p.recv(B, 100 + i, 0, 8);
    }
    p.send(A, 3, WrOpcode::RdmaWrite, 0, 8, 0);
    let out = p.transmit();
    assert_eq!(credits(&exchange(&mut p, &out)), [12]);
    assert_eq!(p.dev[A].qp(p.qpn[A].into()).unwrap().credits(), Credits::Limit(3 + 64));
}

#[test]
fn a_qp_on_an_srq_sends_credits_invalid_and_its_peer_is_not_limited() {
    let mut p = Pair::new(Setup { srq_on_b: true, ..Setup::default() });
    let srq = p.srq.unwrap();
    let sge = [p.sge(B, 0, 64)];
    p.dev[B].post_srq_recv(srq, &roce_proto::RecvWr { wr_id: 1, sg_list: &sge }).unwrap();
    p.send(A, 1, WrOpcode::Send, 0, 8, 0);
    let out = p.transmit();
    assert_eq!(credits(&exchange(&mut p, &out)), [Syndrome::CREDITS_INVALID]);
    assert_eq!(p.dev[A].qp(p.qpn[A].into()).unwrap().credits(), Credits::Unlimited);
}

#[test]
fn sends_past_the_credits_wait_for_the_ack_that_grants_more() {
    // rnr_retry 0 (fio's): an RNR NAK would fail the QP, so nothing goes
    // past the credits, not even alone.
    let mut p = Pair::new(Setup { rnr_retry: 0, ..Setup::default() });
    p.recv(B, 1, 0, 64);
    p.recv(B, 2, 64, 64);
    // Before any ACK the limit is 0: the first SEND goes alone.
    p.send(A, 1, WrOpcode::Send, 0, 8, 0);
    let first = p.transmit();
    assert_eq!(first.len(), 1);
    let ack = exchange(&mut p, &first);
    assert_eq!(credits(&ack), [1], "one receive WQE left");
    // MSN 1 + 1 credit: SSN 2 is covered; SSN 3 waits while SSN 2 is in
    // flight (then it may go alone, as a probe). An RDMA WRITE (SSN 5)
    // behind them waits too: the send queue is in order.
    for i in 2..=4 {
        p.send(A, i, WrOpcode::Send, 0, 8, 0);
    }
    p.send(A, 5, WrOpcode::RdmaWrite, 0, 8, 0);
    let out = p.transmit();
    assert_eq!(out.iter().map(Pkt::opcode).collect::<Vec<_>>(), [Opcode::RC_SEND_ONLY]);
    assert_eq!(p.dev[A].counters().credit_waits, 1);
    // Its ACK reports 0 credits. With nothing in flight SSN 3 could go as
    // a probe, but first waits for B to announce a receive WQE.
    let ack = exchange(&mut p, &out);
    assert_eq!(credits(&ack), [0]);
    assert!(p.transmit().is_empty(), "the probe waits for a credit update");
    // B's application posts two: B repeats its last ACK with 2 credits,
    // and A sends SSN 3 and 4 at once.
    let t = p.now;
    p.recv(B, 3, 128, 64);
    p.recv(B, 4, 192, 64);
    let update = p.transmit();
    assert_eq!(
        update.iter().map(|k| (k.from, k.opcode(), k.psn())).collect::<Vec<_>>(),
        [(B, Opcode::RC_ACKNOWLEDGE, ack[0].psn())]
    );
    assert_eq!(credits(&update), [2]);
    assert_eq!(p.dev[B].counters().credit_updates, 1);
    for k in &update {
        p.deliver(k);
    }
    let out = p.transmit();
    assert_eq!(
        out.iter().filter(|k| k.from == A).map(Pkt::opcode).collect::<Vec<_>>(),
        [Opcode::RC_SEND_ONLY, Opcode::RC_SEND_ONLY, Opcode::RC_RDMA_WRITE_ONLY]
    );
    assert_eq!(p.now, t, "no time passed");
    for k in &out {
        p.deliver(k);
    }
    p.run(|_| true);
    let a = p.completions(A);
    assert_eq!(
        a.iter().map(|w| (w.wr_id, w.status)).collect::<Vec<_>>(),
        (1..=5).map(|i| (i, WcStatus::Success)).collect::<Vec<_>>()
    );
    let b = p.completions(B);
    assert_eq!(b.iter().map(|w| w.wr_id).collect::<Vec<_>>(), [1, 2, 3, 4]);
    assert_eq!(
        (p.dev[B].counters().send_rnr_err, p.dev[A].qp(p.qpn[A].into()).unwrap().credit_updates()),
        (0, Some(true))
    );
}

#[test]
fn toward_a_responder_that_never_announces_the_probe_goes_after_the_wait_then_at_once() {
    // A NIC answers with credits but sends no update of its own: B's
    // announcement is dropped here to play one. rnr_retry 0: A waits.
    let mut p = Pair::new(Setup { rnr_retry: 0, ..Setup::default() });
    p.send(A, 1, WrOpcode::RdmaWrite, 0, 8, 0);
    let out = p.transmit();
    assert_eq!(credits(&exchange(&mut p, &out)), [0]);
    p.send(A, 2, WrOpcode::Send, 0, 8, 0);
    assert!(p.transmit().is_empty());
    let t = p.now;
    p.recv(B, 1, 0, 64);
    assert_eq!(p.transmit().len(), 1, "B's update, lost");
    assert!(p.advance());
    assert_eq!(p.now - t, roce_proto::testing::CREDIT_UPDATE_WAIT);
    let probe = p.transmit();
    assert_eq!(probe.iter().map(Pkt::opcode).collect::<Vec<_>>(), [Opcode::RC_SEND_ONLY]);
    assert_eq!(credits(&exchange(&mut p, &probe)), [0]);
    assert_eq!(p.dev[A].qp(p.qpn[A].into()).unwrap().credit_updates(), Some(false));
    // From now on a SEND with no credits goes at once (were the queue
    // empty: an RNR NAK, which fails this QP; a NIC peer's choice).
    p.send(A, 3, WrOpcode::Send, 0, 8, 0);
    let t = p.now;
    assert_eq!(p.transmit().iter().map(Pkt::opcode).collect::<Vec<_>>(), [Opcode::RC_SEND_ONLY]);
    assert_eq!(p.now, t);
}

#[test]
fn with_rnr_retries_left_a_lone_send_past_the_credits_goes_at_once() {
    // A ping-pong whose receiver keeps one WQE posted: its ACK reports 0,
    // then it posts the next receive and replies. With rnr_retry 7 an RNR
    // NAK would only delay the next SEND, so it does not wait for the
    // credit update (IBTA's limited send); with requests in flight it
    // still waits.
    let mut p = Pair::new(Setup::default());
    p.recv(B, 1, 0, 64);
    p.send(A, 1, WrOpcode::Send, 0, 8, 0);
    let out = p.transmit();
    assert_eq!(credits(&exchange(&mut p, &out)), [0]);
    p.send(A, 2, WrOpcode::Send, 0, 8, 0);
    p.send(A, 3, WrOpcode::Send, 0, 8, 0);
    let t = p.now;
    let out = p.transmit();
    assert_eq!(out.iter().filter(|k| k.from == A).map(Pkt::opcode).collect::<Vec<_>>(), [Opcode::RC_SEND_ONLY]);
    assert_eq!(p.now, t, "no wait");
    // It meets an empty queue: RNR NAK; B posts during the RNR wait and
    // both SENDs land.
    exchange(&mut p, &out);
    assert_eq!(p.dev[B].counters().send_rnr_err, 1);
    p.recv(B, 2, 64, 64);
    p.recv(B, 3, 128, 64);
    p.run(|_| true);
    let a = p.completions(A);
    assert_eq!(a.iter().map(|w| (w.wr_id, w.status)).collect::<Vec<_>>(), [1, 2, 3].map(|i| (i, WcStatus::Success)));
    assert_eq!(p.completions(B).iter().map(|w| w.wr_id).collect::<Vec<_>>(), [1, 2, 3]);
}

#[test]
fn a_receiver_slower_than_the_wire_meets_no_send_it_has_no_wqe_for() {
    // fio's SEND mode: the receiver keeps 8 WQEs posted and reposts one
    // as each completes, but at most one per round (it is slower than the
    // wire); the sender keeps 16 SENDs queued and has rnr_retry 0, so one
    // SEND meeting an empty queue would fail it. Credits hold the sender
    // to the receiver's pace instead.
    let mut p = Pair::new(Setup { rnr_retry: 0, ..Setup::default() });
    for i in 0..8 {
        p.recv(B, i, 0, 64);
    }
    let (mut posted, mut owed, mut sent, mut sends_done, mut recvs_done) = (8u64, 0usize, 0u64, 0, 0);
    while sent < 16 {
        p.send(A, sent, WrOpcode::Send, 0, 32, 0);
        sent += 1;
    }
    for _ in 0..10_000 {
        let out = p.transmit();
        if out.is_empty() && !p.advance() {
            break;
        }
        for k in &out {
            p.deliver(k);
        }
        let b = p.completions(B);
        assert!(b.iter().all(|w| w.status == WcStatus::Success), "{b:?}");
        recvs_done += b.len();
        owed += b.len();
        if owed > 0 {
            p.recv(B, posted, 0, 64);
            (posted, owed) = (posted + 1, owed - 1);
        }
        let a = p.completions(A);
        assert!(a.iter().all(|w| w.status == WcStatus::Success), "{a:?}");
        sends_done += a.len();
        for _ in &a {
            if sent < 200 {
                p.send(A, sent, WrOpcode::Send, 0, 32, 0);
                sent += 1;
            }
        }
    }
    assert_eq!((sends_done, recvs_done), (200, 200));
    assert_eq!(p.dev[B].counters().send_rnr_err, 0, "no SEND met an empty receive queue");
    assert!(p.dev[A].counters().credit_waits > 0, "the sender did wait for credits");
}
