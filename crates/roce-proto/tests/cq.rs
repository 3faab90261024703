//! Completion queue verbs on explicit virtual time: creation bounds and
//! rxe's sizes, `ibv_resize_cq` with completions queued, and event
//! moderation (`ibv_modify_cq`).

mod common;

use std::time::Duration;

use common::{A, B, Pair, Setup};
use roce_proto::cq::{CqError, Moderation};
use roce_proto::device::NUM_COMP_VECTORS;
use roce_proto::verbs::{SendFlags, WcStatus, WrOpcode};
use roce_proto::{VerbError, Wc};

#[test]
fn create_cq_bounds_and_sizes_are_rxes() {
    let mut p = Pair::new(Setup::default());
    let d = &mut p.dev[A];
    let max = d.query_device().max_cqe;
    assert_eq!(max, 4_194_303, "mlx5's, which libfabric's defaults fit (rxe has 32,767)");
    assert_eq!(d.create_cq(0), Err(VerbError::Cqe { cqe: 0, max }));
    assert_eq!(d.create_cq(max + 1), Err(VerbError::Cqe { cqe: max + 1, max }));
    assert_eq!(
        d.create_cq_on(16, NUM_COMP_VECTORS),
        Err(VerbError::CompVector { vector: NUM_COMP_VECTORS, count: NUM_COMP_VECTORS })
    );
    for (asked, got) in [(1, 1), (2, 3), (10, 15), (16, 31), (max, max)] {
        let cq = d.create_cq_on(asked, NUM_COMP_VECTORS - 1).unwrap();
        assert_eq!(d.cq_size(cq), Ok(got), "cqe {asked}");
    }
}

/// A server that makes a PD, CQ and SRQ for each connection and destroys
/// them after keeps its tables as long as its busiest moment needs: the
/// handles of destroyed ones are used again, oldest first, and a CQ's
/// completion event not yet taken goes with it rather than to the CQ that
/// gets its handle next.
#[test]
fn handles_of_destroyed_pds_cqs_and_srqs_are_used_again() {
    let mut p = Pair::new(Setup::default());
    let d = &mut p.dev[A];
    let (pd0, cq0) = (d.alloc_pd().unwrap(), d.create_cq(16).unwrap());
    let srq0 = d.create_srq(pd0, 16, 1).unwrap();
    d.destroy_srq(srq0).unwrap();
    d.destroy_cq(cq0).unwrap();
    d.dealloc_pd(pd0).unwrap();
    for _ in 0..1000 {
        let pd = d.alloc_pd().unwrap();
        let cq = d.create_cq(16).unwrap();
        let srq = d.create_srq(pd, 16, 1).unwrap();
        assert_eq!((pd, cq, srq), (pd0, cq0, srq0), "the freed handles, not new ones");
        d.destroy_srq(srq).unwrap();
        d.destroy_cq(cq).unwrap();
        d.dealloc_pd(pd).unwrap();
    }
    // Two freed CQs come back in the order they were freed.
    let (x, y) = (d.create_cq(16).unwrap(), d.create_cq(16).unwrap());
    d.destroy_cq(y).unwrap();
    d.destroy_cq(x).unwrap();
    assert_eq!((d.create_cq(16).unwrap(), d.create_cq(16).unwrap()), (y, x));
}

/// An armed CQ destroyed with its completion event untaken: the event does
/// not surface for the CQ that takes its handle.
#[test]
fn a_destroyed_cqs_pending_event_is_not_the_next_ones() {
    let mut p = Pair::new(Setup::default());
    let cq = p.cq[B];
    for wr_id in [1, 2] {
        p.dev[B].req_notify_cq(cq, false).unwrap();
        p.recv(B, wr_id, 0, 64);
        send(&mut p, wr_id);
        p.run(|_| true);
        if wr_id == 1 {
            assert_eq!(p.dev[B].poll_comp_event(), Some(cq), "a receive fires the armed CQ");
        }
    }
    // The second event is left untaken. B's QP holds the CQ: destroy the QP first, as an application would.
    let qpn = p.qpn[B];
    p.dev[B].destroy_qp(qpn.into()).unwrap();
    p.dev[B].destroy_cq(cq).unwrap();
    let again = p.dev[B].create_cq(16).unwrap();
    assert_eq!(again, cq, "the handle is used again");
    assert_eq!(p.dev[B].poll_comp_event(), None, "the old CQ's event went with it");
}

/// An unsignaled SEND from A into a receive `wr_id` on B (A's CQ, as
/// small as B's, stays empty).
fn send(p: &mut Pair, wr_id: u64) {
    p.recv(B, wr_id, 64 * (wr_id as usize % 1000), 64);
    p.send_flags(A, wr_id, WrOpcode::Send, 0, 8, 0, SendFlags::EMPTY);
}

fn sends(p: &mut Pair, n: u64) {
    for i in 0..n {
        send(p, 100 + i);
    }
    p.run(|_| true);
}

#[test]
fn resize_keeps_completions_and_refuses_to_shrink_below_them() {
    let mut p = Pair::new(Setup { cqe: 7, ..Setup::default() });
    let cq = p.cq[B];
    sends(&mut p, 5);
    // Shrinking below the 5 receives held is EINVAL, and changes nothing.
    assert_eq!(p.dev[B].resize_cq(cq, 4, 0), Err(VerbError::Cq(CqError::BelowHeld { cqe: 4, held: 5 })));
    assert_eq!(p.dev[B].resize_cq(cq, 3, 2), Err(VerbError::Cq(CqError::BelowHeld { cqe: 3, held: 7 })));
    assert_eq!(p.dev[B].resize_cq(cq, 0, 0), Err(VerbError::Cqe { cqe: 0, max: 4_194_303 }));
    assert_eq!(p.dev[B].cq_size(cq), Ok(7));
    // Shrinking to exactly what it holds (rounded as rxe does: 5 -> 7).
    assert_eq!(p.dev[B].resize_cq(cq, 5, 0), Ok(7));
    // Growing: 20 -> 31, and 20 more receives fit behind the 5.
    assert_eq!(p.dev[B].resize_cq(cq, 20, 0), Ok(31));
    for i in 5..25u64 {
        send(&mut p, 100 + i);
    }
    p.run(|_| true);
    let mut out = vec![Wc::new(0, WcStatus::Success, roce_proto::verbs::WcOpcode::Send, 0); 64];
    let n = p.dev[B].poll_cq(cq, &mut out).unwrap();
    assert_eq!(n, 25, "nothing lost, no overrun");
    assert!(out[..n].iter().all(|w| w.status == WcStatus::Success));
    assert_eq!(out[..n].iter().map(|w| w.wr_id).collect::<Vec<_>>(), (100..125).collect::<Vec<_>>());
    assert_eq!(p.dev[B].qp(p.qpn[B].into()).unwrap().state(), roce_proto::verbs::QpState::Rts);
    // Shrunk again once empty: the 8th completion of a 7-entry CQ overruns.
    assert_eq!(p.dev[B].resize_cq(cq, 7, 0), Ok(7));
    sends(&mut p, 8);
    let events: Vec<_> = std::iter::from_fn(|| p.dev[B].poll_event()).collect();
    assert!(events.contains(&roce_proto::AsyncEvent::CqErr(cq)), "{events:?}");
    assert_eq!(p.completions(B).len(), 7);
}

/// One SEND from A to B at the current virtual time, delivered and acknowledged.
fn send_at(p: &mut Pair, wr_id: u64) {
    send(p, 100 + wr_id);
    for pkt in p.transmit() {
        p.deliver(&pkt);
    }
    // B's ACK back to A.
    for pkt in p.transmit() {
        p.deliver(&pkt);
    }
}

#[test]
fn moderation_delays_the_event_until_count_or_period() {
    let mut p = Pair::new(Setup::default());
    let cq = p.cq[B];
    p.dev[B].modify_cq(cq, Moderation { count: 3, period: Duration::from_micros(50) }).unwrap();
    // By count: three completions 10 us apart, the event with the third.
    p.dev[B].req_notify_cq(cq, false).unwrap();
    let t0 = p.now;
    send_at(&mut p, 0);
    assert_eq!(p.dev[B].poll_comp_event(), None, "the trigger waits");
    assert_eq!(p.dev[B].poll_timeout(), Some(t0 + Duration::from_micros(50)));
    p.now += Duration::from_micros(10);
    send_at(&mut p, 1);
    assert_eq!(p.dev[B].poll_comp_event(), None);
    p.now += Duration::from_micros(10);
    send_at(&mut p, 2);
    assert_eq!(p.dev[B].poll_comp_event(), Some(cq), "the third completion fires it");
    assert_eq!(p.dev[B].poll_timeout(), None, "and its period timer is gone");
    // By period: one completion, then nothing until 50 us later.
    p.dev[B].req_notify_cq(cq, false).unwrap();
    p.now += Duration::from_micros(100);
    let t1 = p.now;
    send_at(&mut p, 3);
    assert_eq!(p.dev[B].poll_timeout(), Some(t1 + Duration::from_micros(50)));
    p.dev[B].handle_timeout(t1 + Duration::from_micros(49));
    assert_eq!(p.dev[B].poll_comp_event(), None);
    p.dev[B].handle_timeout(t1 + Duration::from_micros(50));
    assert_eq!(p.dev[B].poll_comp_event(), Some(cq), "at exactly t + cq_period");
    assert_eq!(p.dev[B].poll_timeout(), None);
    // Unarmed, completions raise nothing and arm no timer.
    send_at(&mut p, 4);
    assert_eq!((p.dev[B].poll_comp_event(), p.dev[B].poll_timeout()), (None, None));
    // Moderation off again: the event comes with its trigger.
    p.dev[B].modify_cq(cq, Moderation::default()).unwrap();
    p.dev[B].req_notify_cq(cq, false).unwrap();
    send_at(&mut p, 5);
    assert_eq!(p.dev[B].poll_comp_event(), Some(cq));
    assert_eq!(p.completions(B).len(), 6);
}

#[test]
fn a_destroyed_cq_takes_its_moderation_timer_with_it() {
    let mut p = Pair::new(Setup::default());
    let extra = p.dev[B].create_cq(4).unwrap();
    p.dev[B].modify_cq(extra, Moderation { count: 0, period: Duration::from_millis(1) }).unwrap();
    p.dev[B].req_notify_cq(p.cq[B], false).unwrap();
    p.dev[B].modify_cq(p.cq[B], Moderation { count: 0, period: Duration::from_millis(1) }).unwrap();
    send_at(&mut p, 0);
    assert!(p.dev[B].poll_timeout().is_some());
    // B's QP still uses its CQ: Busy, timer kept; the unused one goes.
    assert_eq!(p.dev[B].destroy_cq(p.cq[B]), Err(VerbError::Busy));
    p.dev[B].destroy_cq(extra).unwrap();
    assert!(p.dev[B].poll_timeout().is_some());
    p.dev[B].destroy_qp(p.qpn[B].into()).unwrap();
    p.dev[B].destroy_cq(p.cq[B]).unwrap();
    assert_eq!(p.dev[B].poll_timeout(), None);
}
