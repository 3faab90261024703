//! The requester's loss recovery and congestion window (`roce_proto::cc`),
//! scripted on virtual time: tail probes, the window after a sequence NAK
//! and after a timeout, retry_cnt counted in local ACK timeouts, CNPs.

mod common;

use std::time::Duration;

use common::{A, B, Pair, Pkt, Setup};
use roce_proto::testing::{MAX_UNACKED_PSNS, QpProbe, ack_timeout};
use roce_proto::verbs::{QpState, WcStatus, WrOpcode};
use roce_wire::{BthRepr, ExtRepr, Opcode, PacketRepr, Psn, Syndrome};

const HOP: Duration = Duration::from_micros(100);

/// Delivers `pkts` after one hop of virtual time.
fn hop(p: &mut Pair, pkts: &[Pkt]) {
    p.now += HOP;
    for k in pkts {
        p.deliver(k);
    }
}

/// One WRITE each way of the round trip, every packet one hop late: A's
/// QP measures a 200 us round trip.
fn warm_up(p: &mut Pair) {
    p.send(A, 100, WrOpcode::RdmaWrite, 0, 64, 0);
    let out = p.transmit();
    hop(p, &out);
    let ack = p.transmit();
    hop(p, &ack);
    assert!(p.transmit().is_empty());
    assert_eq!(p.completions(A).iter().map(|w| (w.wr_id, w.status)).collect::<Vec<_>>(), [(100, WcStatus::Success)]);
    let srtt = p.dev[A].qp(p.qpn[A].into()).unwrap().srtt();
    assert_eq!(srtt, Some(2 * HOP));
}

fn window(p: &Pair) -> u32 {
    p.dev[A].qp(p.qpn[A].into()).unwrap().cwnd()
}

/// Exchanges packets, one hop each, until both devices are quiet.
fn settle(p: &mut Pair) {
    for _ in 0..10_000 {
        let pkts = p.transmit();
        if pkts.is_empty() {
            return;
        }
        hop(p, &pkts);
    }
    panic!("no quiescence");
}

#[test]
fn a_lost_tail_waits_for_the_timeout_on_a_clean_path_and_is_probed_on_a_lossy_one() {
    let mut p = Pair::new(Setup::default());
    warm_up(&mut p);
    // A path that lost nothing yet: a lost tail costs the QP's local ACK
    // timeout, as on rxe, then go-back-N.
    p.send(A, 0, WrOpcode::RdmaWrite, 0, 3 * 1024, 8192);
    let out = p.transmit();
    let sent_at = p.now;
    hop(&mut p, &out[..2]);
    assert!(p.transmit().is_empty());
    assert!(p.advance());
    assert_eq!(p.now - sent_at, ack_timeout(14).unwrap());
    let again = p.transmit();
    assert_eq!(again[0].psn(), out[0].psn(), "go-back-N from the oldest unacknowledged PSN");
    hop(&mut p, &again);
    settle(&mut p);
    assert_eq!(p.completions(A).iter().map(|w| (w.wr_id, w.status)).collect::<Vec<_>>(), [(0, WcStatus::Success)]);
    // Now the path has lost a packet: the next lost tail is probed.
    let before = window(&p);
    p.fill(A, 0, 3 * 1024, 4);
    p.send(A, 1, WrOpcode::RdmaWrite, 0, 3 * 1024, 8192);
    let out = p.transmit();
    assert_eq!(out.len(), 3);
    let sent_at = p.now;
    // FIRST and MIDDLE arrive, LAST (the one asking for an ACK) is lost:
    // nothing behind it makes B NAK.
    hop(&mut p, &out[..2]);
    assert!(p.transmit().is_empty(), "no AckReq yet, so no answer");
    assert!(p.advance());
    assert_eq!(p.now - sent_at, 4 * HOP, "the probe waits two round trips");
    let probe = p.transmit();
    assert_eq!(probe.len(), 1, "only the last packet goes again");
    assert_eq!(probe[0].opcode(), Opcode::RC_RDMA_WRITE_LAST);
    assert_eq!(probe[0].psn(), out[2].psn());
    assert!(probe[0].packet().bth().ack_req());
    hop(&mut p, &probe);
    let ack = p.transmit();
    hop(&mut p, &ack);
    assert_eq!(p.completions(A).iter().map(|w| (w.wr_id, w.status)).collect::<Vec<_>>(), [(1, WcStatus::Success)]);
    assert_eq!(p.mem[B].get(8192, 3 * 1024), p.mem[A].get(0, 3 * 1024));
    let c = p.dev[A].counters();
    assert_eq!((c.tail_probes, c.completer_retry_err), (1, 1), "one probe, and only the first loss's retry");
    assert!(window(&p) >= before, "a probe leaves the window alone: {before} then {}", window(&p));
}

#[test]
fn a_sequence_nak_halves_the_window_and_the_resend_stays_within_it() {
    let mut p = Pair::new(Setup::default());
    warm_up(&mut p);
    for i in 0..4u64 {
        p.fill(A, i as usize * 65536, 65536, i as u8 + 1);
        p.send(A, i, WrOpcode::RdmaWrite, i as usize * 65536, 65536, i as usize * 65536);
    }
    let out = p.transmit();
    assert_eq!(out.len(), MAX_UNACKED_PSNS as usize, "the full window: 128 of the 256 packets");
    let lost = out[10].psn();
    let rest: Vec<Pkt> = out.iter().filter(|k| k.psn() != lost).cloned().collect();
    hop(&mut p, &rest);
    let answers = p.transmit();
    let naks: Vec<Psn> = answers
        .iter()
        .filter(|k| matches!(k.packet().aeth().map(|a| a.syndrome()), Some(Syndrome::Nak(_))))
        .map(|k| k.psn())
        .collect();
    assert_eq!(naks, [lost], "one sequence NAK, for the lost PSN");
    hop(&mut p, &answers);
    assert_eq!(window(&p), MAX_UNACKED_PSNS / 2);
    let resend = p.transmit();
    assert_eq!(resend.len(), (MAX_UNACKED_PSNS / 2) as usize, "go-back-N within the halved window");
    assert_eq!(resend[0].psn(), lost);
    // From here on nothing is lost: everything completes, in order, intact.
    hop(&mut p, &resend);
    for _ in 0..1000 {
        let pkts = p.transmit();
        if pkts.is_empty() {
            break;
        }
        hop(&mut p, &pkts);
    }
    let wcs = p.completions(A);
    assert_eq!(
        wcs.iter().map(|w| (w.wr_id, w.status)).collect::<Vec<_>>(),
        (0..4).map(|i| (i, WcStatus::Success)).collect::<Vec<_>>()
    );
    assert_eq!(p.mem[B].get(0, 4 * 65536), p.mem[A].get(0, 4 * 65536));
    let c = p.dev[A].counters();
    assert_eq!((c.rcvd_seq_err, c.completer_retry_err, c.retry_exceeded_err), (1, 1, 0));
    assert!(window(&p) > MAX_UNACKED_PSNS / 2, "the window grew again: {}", window(&p));
}

#[test]
fn after_a_timeout_the_window_restarts_small_and_slow_starts() {
    let mut p = Pair::new(Setup::default());
    warm_up(&mut p);
    for i in 0..4u64 {
        p.send(A, i, WrOpcode::RdmaWrite, i as usize * 65536, 65536, i as usize * 65536);
    }
    let first = p.transmit();
    assert_eq!(first.len(), 128);
    // All lost: the retransmission timeout (a clean path has no probes).
    assert!(p.advance());
    let again = p.transmit();
    assert_eq!(again.len(), roce_proto::testing::MIN_CWND as usize);
    assert_eq!(again[0].psn(), first[0].psn());
    // Each round trip doubles what may be in flight.
    let mut sizes = vec![again.len()];
    let mut pkts = again;
    while sizes.len() < 5 {
        hop(&mut p, &pkts);
        let acks = p.transmit();
        hop(&mut p, &acks);
        pkts = p.transmit();
        sizes.push(pkts.len());
    }
    assert_eq!(sizes, [2, 4, 8, 16, 32]);
}

#[test]
fn retry_cnt_counts_local_ack_timeouts_without_progress_not_the_faster_retransmissions() {
    // timeout 12: 16.8 ms; the round trip's timeout is far shorter.
    let s = Setup { timeout: 12, retry_cnt: 3, ..Setup::default() };
    let full = ack_timeout(s.timeout).unwrap();
    let mut p = Pair::new(s);
    // A receive WQE at B, which the warm-up's ACK reports as a credit.
    p.recv(B, 7, 0, 64);
    warm_up(&mut p);
    p.send(A, 1, WrOpcode::Send, 0, 16, 0);
    let start = p.now;
    let mut rounds = Vec::new();
    assert_eq!(p.transmit().len(), 1);
    // The peer is gone: nothing arrives any more.
    while p.dev[A].qp(p.qpn[A].into()).unwrap().state() == QpState::Rts {
        assert!(p.advance(), "a timer is armed until the QP fails");
        if !p.transmit().is_empty() {
            rounds.push(p.now - start);
        }
        assert!(rounds.len() < 100);
    }
    let failed = p.now - start;
    assert_eq!(p.completions(A).iter().map(|w| (w.wr_id, w.status)).collect::<Vec<_>>(), [(1, WcStatus::RetryExcErr)]);
    // As on rxe, RETRY_EXC_ERR comes after retry_cnt + 1 local ACK timeouts
    // without progress (at most one more: the count starts with the first
    // retry a whole timeout after the send)...
    assert!(failed >= full * 4 && failed <= full * 5, "failed after {failed:?} (timeout {full:?})");
    // ...while the retransmissions came more often: the first after the
    // QP's timeout (a clean path), then a probe and the round trip's timeout
    // (the path is lossy now).
    assert_eq!(rounds[0], full, "{rounds:?}");
    assert_eq!(rounds[1], full + 4 * HOP, "{rounds:?}");
    assert!(rounds.len() > 3 + 1, "{rounds:?}");
    assert_eq!(p.dev[A].counters().tail_probes, 1, "one probe per flight");
    assert_eq!(p.dev[A].counters().retry_exceeded_err, 1);
}

#[test]
fn a_cnp_cuts_the_window_and_is_counted() {
    let mut p = Pair::new(Setup::default());
    warm_up(&mut p);
    let cnp = |p: &Pair, qpn: u32| {
        let repr = PacketRepr { bth: BthRepr::new(Opcode(0x81), qpn, Psn::ZERO), ext: ExtRepr::default() };
        let (std::net::IpAddr::V4(s), std::net::IpAddr::V4(d)) = (p.addr[B], p.addr[A]) else { unreachable!() };
        let ctx =
            roce_wire::IcrcContext { ip: roce_wire::IpContext::v4_socket(s, d), src_port: 0xc000, dst_port: 4791 };
        let mut buf = vec![0u8; repr.packet_len(16).unwrap()];
        repr.emit(&mut buf, &[0u8; 16], &ctx).unwrap();
        buf
    };
    let bytes = cnp(&p, p.qpn[A]);
    let (from, to) = (p.addr[B], p.addr[A]);
    p.dev[A].handle_datagram(p.now, from, 0xc000, to, None, &bytes);
    assert_eq!(p.dev[A].counters().rp_cnp_handled, 1);
    assert_eq!(window(&p), MAX_UNACKED_PSNS / 2);
    assert!(p.transmit().is_empty(), "a CNP is never answered");
    // For a QP that does not exist: counted as such, nothing else changes.
    let bytes = cnp(&p, 0x00ab_cdef);
    p.dev[A].handle_datagram(p.now, from, 0xc000, to, None, &bytes);
    let c = p.dev[A].counters();
    assert_eq!((c.rp_cnp_handled, c.drop_no_qp), (1, 1));
}

/// Delivers `pkts` to their receivers with ECN CE in the IP header, as a
/// congested queue marks them.
fn deliver_marked(p: &mut Pair, pkts: &[common::Pkt]) {
    for k in pkts {
        let to = 1 - k.from;
        let (src, dst) = (p.addr[k.from], p.addr[to]);
        p.dev[to].handle_datagram_ecn(p.now, src, k.src_port, dst, None, roce_wire::Ecn::Ce, &k.bytes);
    }
}

#[test]
fn ce_marked_requests_get_one_cnp_per_interval_and_the_sender_halves_its_window() {
    let mut p = Pair::new(Setup::default());
    warm_up(&mut p);
    let full = window(&p);
    // Five WRITEs arrive marked, four at once and one 10 us later: B counts
    // five marks and sends one CNP (DCQCN's notification point paces them),
    // to A's QP, with BECN set and 16 reserved bytes.
    for i in 0..5 {
        p.send(A, i, WrOpcode::RdmaWrite, 0, 64, 0);
    }
    let out = p.transmit();
    assert_eq!(out.len(), 5);
    deliver_marked(&mut p, &out[..4]);
    let first_mark = p.now;
    p.now += Duration::from_micros(10);
    deliver_marked(&mut p, &out[4..]);
    assert_eq!(p.dev[B].counters().np_ecn_marked_roce_packets, 5);
    let back = p.transmit();
    let cnps: Vec<_> = back.iter().filter(|k| k.opcode() == Opcode(0x81)).collect();
    assert_eq!(cnps.len(), 1, "one CNP for a burst of marks");
    let cnp = cnps[0].packet();
    assert_eq!(cnp.bth().dest_qpn(), p.qpn[A]);
    assert!(cnp.bth().becn());
    assert_eq!(cnp.payload(), &[0u8; 16]);
    assert_eq!(p.dev[B].counters().np_cnp_sent, 1);
    // The writes were executed and acknowledged as unmarked ones are.
    hop(&mut p, &back);
    settle(&mut p);
    assert_eq!(p.completions(A).iter().filter(|w| w.status == WcStatus::Success).count(), 5);
    assert_eq!(p.dev[A].counters().rp_cnp_handled, 1);
    assert_eq!(window(&p), full / 2, "the reaction point halves its window, no packet lost");
    // Once the interval has passed (the round trips above took longer), the
    // next mark is answered again.
    assert!(p.now - first_mark >= roce_proto::testing::CNP_INTERVAL);
    p.send(A, 11, WrOpcode::RdmaWrite, 0, 64, 0);
    let out = p.transmit();
    deliver_marked(&mut p, &out);
    assert_eq!(p.transmit().iter().filter(|k| k.opcode() == Opcode(0x81)).count(), 1);
    assert_eq!((p.dev[B].counters().np_ecn_marked_roce_packets, p.dev[B].counters().np_cnp_sent), (6, 2));
}

#[test]
fn unmarked_and_ect_packets_send_no_cnp() {
    let mut p = Pair::new(Setup::default());
    warm_up(&mut p);
    p.send(A, 1, WrOpcode::RdmaWrite, 0, 64, 0);
    let out = p.transmit();
    for k in &out {
        let (src, dst) = (p.addr[A], p.addr[B]);
        p.dev[B].handle_datagram_ecn(p.now, src, k.src_port, dst, None, roce_wire::Ecn::Ect0, &k.bytes);
    }
    assert!(p.transmit().iter().all(|k| k.opcode() != Opcode(0x81)));
    assert_eq!((p.dev[B].counters().np_ecn_marked_roce_packets, p.dev[B].counters().np_cnp_sent), (0, 0));
}
