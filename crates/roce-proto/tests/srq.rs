//! Shared receive queues: several QPs draw receives from one pool, and the
//! limit event fires once when the pool runs low.

mod common;

use common::{A, B, Pair, Setup};
use roce_proto::verbs::{WcStatus, WrOpcode};
use roce_proto::{AsyncEvent, RecvWr};

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
    assert!(p.dev[B].post_recv(p.qpn[B], &RecvWr { wr_id: 1, sg_list: &sge }).is_err());
}
