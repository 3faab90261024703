//! Shared receive queues: several QPs draw receives from one pool, and the
//! limit event fires once when the pool runs low.

mod common;

use common::{A, B, Pair, Setup};
use roce_proto::verbs::{SendFlags, WcStatus, WrOpcode};
use roce_proto::{AsyncEvent, Payload, RecvWr, SendWr};

#[test]
fn srq_feeds_receives_and_raises_the_limit_event() {
    let mut p = Pair::new(Setup { srq_on_b: true, ..Setup::default() });
    let srq = p.srq.unwrap();
    for i in 0..4u64 {
        let sge = [p.sge(B, 1000 * i as usize, 100)];
        p.dev[B].post_srq_recv(srq, &RecvWr { wr_id: 100 + i, sg_list: &sge }).unwrap();
    }
    p.dev[B].set_srq_limit(srq, 2).unwrap();
    for i in 0..3 {
        p.fill(A, 10_000 + 100 * i, 50, i as u8);
        p.send(A, i as u64, WrOpcode::Send, 10_000 + 100 * i, 50, 0);
    }
    p.run(|_| true);
    let b = p.completions(B);
    assert_eq!(
        b.iter().map(|w| (w.wr_id, w.status, w.byte_len)).collect::<Vec<_>>(),
        [(100, WcStatus::Success, 50), (101, WcStatus::Success, 50), (102, WcStatus::Success, 50)]
    );
    for i in 0..3 {
        assert_eq!(p.mem[B].get(1000 * i, 50), p.mem[A].get(10_000 + 100 * i, 50));
    }
    let mut events = Vec::new();
    while let Some(e) = p.dev[B].poll_event() {
        events.push(e);
    }
    assert_eq!(events, [AsyncEvent::SrqLimitReached(srq)], "once, when the pool fell below 2");
    // Posting to the QP's own RQ is refused while it uses an SRQ.
    let sge = [p.sge(B, 0, 8)];
    assert!(p.dev[B].post_recv(p.qpn[B].into(), &RecvWr { wr_id: 1, sg_list: &sge }).is_err());
}

#[test]
fn interleaved_multi_packet_sends_on_two_qps_take_separate_srq_buffers() {
    // Two QPs of B share the SRQ. A sends a 3-packet message on each, and
    // the packets arrive interleaved: each message must land whole in the
    // buffer its QP took at its FIRST packet (rxe `qp->resp.srq_wqe`).
    let mut p = Pair::new(Setup { srq_on_b: true, ..Setup::default() });
    let second = p.add_pair(Setup { srq_on_b: true, ..Setup::default() });
    let srq = p.srq.unwrap();
    for i in 0..2u64 {
        let sge = [p.sge(B, 10_000 * i as usize, 4096)];
        p.dev[B].post_srq_recv(srq, &RecvWr { wr_id: 100 + i, sg_list: &sge }).unwrap();
    }
    let one = p.fill(A, 100_000, 2500, 1);
    let two = p.fill(A, 200_000, 2500, 2);
    for (qpn, off, id) in [(p.qpn[A], 100_000, 1), (second[A], 200_000, 2)] {
        let sge = [p.sge(A, off, 2500)];
        p.dev[A]
            .post_send(qpn.into(), &SendWr::new(id, WrOpcode::Send, SendFlags::SIGNALED, Payload::Sges(&sge)))
            .unwrap();
    }
    let pkts = p.transmit();
    assert_eq!(pkts.len(), 6, "3 packets per message at MTU 1024");
    let (x, y): (Vec<_>, Vec<_>) = pkts.iter().partition(|k| k.packet().bth().dest_qpn() == p.qpn[B]);
    for k in 0..3 {
        p.deliver(x[k]);
        p.deliver(y[k]);
    }
    p.run(|_| true);
    let mut b: Vec<_> = p.completions(B).iter().map(|w| (w.qp_num.get(), w.wr_id, w.status, w.byte_len)).collect();
    b.sort_by_key(|w| w.0);
    assert_eq!(b, [(p.qpn[B], 100, WcStatus::Success, 2500), (second[B], 101, WcStatus::Success, 2500)]);
    assert_eq!(p.mem[B].get(0, 2500), one);
    assert_eq!(p.mem[B].get(10_000, 2500), two);
}

#[test]
fn srq_resize_keeps_posted_wrs_and_follows_rxes_refusals() {
    let mut p = Pair::new(Setup { srq_on_b: true, ..Setup::default() });
    let srq = p.srq.unwrap();
    let post = |p: &mut Pair, wr_id: u64| {
        let sge = [p.sge(B, 1000 * (wr_id as usize % 100), 100)];
        p.dev[B].post_srq_recv(srq, &RecvWr { wr_id, sg_list: &sge })
    };
    assert_eq!(p.dev[B].srq_size(srq), Ok(8));
    for i in 0..6 {
        post(&mut p, i).unwrap();
    }
    use roce_proto::VerbError::Invalid;
    // Below the 6 WRs held, zero, beyond max_srq_wr: EINVAL, unchanged.
    assert!(matches!(p.dev[B].resize_srq(srq, 5), Err(Invalid(_))));
    assert!(matches!(p.dev[B].resize_srq(srq, 0), Err(Invalid(_))));
    let max = p.dev[B].query_device().max_srq_wr;
    assert!(matches!(p.dev[B].resize_srq(srq, max + 1), Err(Invalid(_))));
    // Below an armed limit: EINVAL (rxe_srq_chk_attr).
    p.dev[B].set_srq_limit(srq, 7).unwrap();
    assert!(matches!(p.dev[B].resize_srq(srq, 6), Err(Invalid(_))));
    p.dev[B].set_srq_limit(srq, 0).unwrap();
    assert_eq!(p.dev[B].srq_size(srq), Ok(8));
    // Grow to 20 with 6 inside: 14 more fit, the 21st does not.
    p.dev[B].resize_srq(srq, 20).unwrap();
    assert_eq!(p.dev[B].srq_size(srq), Ok(20));
    for i in 6..20 {
        post(&mut p, i).unwrap();
    }
    assert!(post(&mut p, 20).is_err());
    // 20 SENDs land in the WRs in posting order.
    for i in 0..20u64 {
        p.send_flags(A, i, WrOpcode::Send, 50_000, 10, 0, SendFlags::EMPTY);
    }
    p.run(|_| true);
    let b = p.completions(B);
    assert_eq!(b.iter().map(|w| w.wr_id).collect::<Vec<_>>(), (0..20).collect::<Vec<_>>());
    assert!(b.iter().all(|w| w.status == WcStatus::Success && w.byte_len == 10));
    // Shrink once empty to 1.
    p.dev[B].resize_srq(srq, 1).unwrap();
    post(&mut p, 1).unwrap();
    assert!(post(&mut p, 2).is_err());
}
