//! The transmit schedule: QPs with work take turns, each sending a burst of
//! up to `TX_BURST` packets; a burst ends early when its QP has no packet.

mod common;

use common::{A, B, Pair, Setup};
use roce_proto::testing::TX_BURST;
use roce_proto::verbs::{SendFlags, WcStatus, WrOpcode};
use roce_proto::{Payload, SendWr};

/// The destination QPs of `qpns`, run-length encoded.
fn runs(qpns: &[u32]) -> Vec<(u32, usize)> {
    let mut out: Vec<(u32, usize)> = Vec::new();
    for &q in qpns {
        match out.last_mut() {
            Some((last, n)) if *last == q => *n += 1,
            _ => out.push((q, 1)),
        }
    }
    out
}

#[test]
fn two_bulk_qps_take_turns_in_bursts_and_a_burst_ends_with_the_work() {
    let mut p = Pair::new(Setup::default());
    let second = p.add_pair(Setup::default());
    let burst = TX_BURST as usize;
    // At MTU 1024: 2.5 bursts of packets on the first QP, 1.25 on the second.
    let (n1, n2) = (2 * burst + burst / 2, burst + burst / 4);
    let one = p.fill(A, 0, n1 * 1024, 1);
    let two = p.fill(A, 400_000, n2 * 1024, 2);
    for (qpn, off, len, remote) in [(p.qpn[A], 0, n1 * 1024, 0), (second[A], 400_000, n2 * 1024, 400_000)] {
        let sge = [p.sge(A, off, len as u32)];
        let mut wr = SendWr::new(qpn.into(), WrOpcode::RdmaWrite, SendFlags::SIGNALED, Payload::Sges(&sge));
        wr.remote_addr = p.va(B, remote);
        wr.rkey = p.key[B];
        p.dev[A].post_send(qpn.into(), &wr).unwrap();
    }
    let pkts = p.transmit();
    let order: Vec<u32> = pkts.iter().map(|k| k.packet().bth().dest_qpn()).collect();
    let (b1, b2) = (p.qpn[B], second[B]);
    assert_eq!(
        runs(&order),
        [(b1, burst), (b2, burst), (b1, burst), (b2, n2 - burst), (b1, n1 - 2 * burst)],
        "bursts alternate; the second QP's last one is short and the first QP goes on at once"
    );
    for k in &pkts {
        p.deliver(k);
    }
    p.run(|_| true);
    let mut done: Vec<_> = p.completions(A).iter().map(|w| (w.wr_id, w.status)).collect();
    done.sort_by_key(|d| d.0);
    assert_eq!(done, [(u64::from(p.qpn[A]), WcStatus::Success), (u64::from(second[A]), WcStatus::Success)]);
    assert_eq!(p.mem[B].get(0, n1 * 1024), one);
    assert_eq!(p.mem[B].get(400_000, n2 * 1024), two);
}

#[test]
fn a_qp_that_runs_dry_mid_burst_hands_over_and_a_lone_qp_keeps_sending() {
    let mut p = Pair::new(Setup::default());
    let second = p.add_pair(Setup::default());
    // Three packets on the first QP: its burst ends after them.
    p.send(A, 1, WrOpcode::RdmaWrite, 0, 3 * 1024, 0);
    let order: Vec<u32> = p.transmit().iter().map(|k| k.packet().bth().dest_qpn()).collect();
    assert_eq!(runs(&order), [(p.qpn[B], 3)]);
    // Work for the second QP only: it sends past one burst, alone.
    let n = 3 * TX_BURST as usize;
    let sge = [p.sge(A, 0, (n * 1024) as u32)];
    let mut wr = SendWr::new(2, WrOpcode::RdmaWrite, SendFlags::SIGNALED, Payload::Sges(&sge));
    wr.remote_addr = p.va(B, 0);
    wr.rkey = p.key[B];
    p.dev[A].post_send(second[A].into(), &wr).unwrap();
    let order: Vec<u32> = p.transmit().iter().map(|k| k.packet().bth().dest_qpn()).collect();
    assert_eq!(runs(&order), [(second[B], n)]);
}
