//! Scripted single-QP RC scenarios at explicit virtual times.

mod common;

use std::time::Duration;

use common::{A, B, Pair, Setup};
use roce_proto::verbs::{QpState, SendFlags, WcOpcode, WcStatus, WrOpcode};
use roce_wire::Opcode;

#[test]
fn three_mtu_send_is_first_middle_last_and_completes() {
    let mut p = Pair::new(Setup::default());
    let data = p.fill(A, 0, 3 * 1024, 1);
    p.recv(B, 77, 8192, 4096);
    p.send(A, 1, WrOpcode::Send, 0, 3 * 1024, 0);
    let pkts = p.transmit();
    let ops: Vec<Opcode> = pkts.iter().map(|k| k.opcode()).collect();
    assert_eq!(ops, [Opcode::RC_SEND_FIRST, Opcode::RC_SEND_MIDDLE, Opcode::RC_SEND_LAST]);
    let psns: Vec<u32> = pkts.iter().map(|k| k.psn().value()).collect();
    assert_eq!(psns, [0x1000, 0x1001, 0x1002]);
    let ackreq: Vec<bool> = pkts.iter().map(|k| k.packet().bth().ack_req()).collect();
    assert_eq!(ackreq, [false, false, true]);
    assert_eq!(pkts[0].src_port, roce_proto::qp::udp_src_port(p.qpn[A], p.qpn[B]));
    for k in &pkts {
        p.deliver(k);
    }
    p.run(|_| true);
    let a = p.completions(A);
    assert_eq!(a.len(), 1);
    assert_eq!((a[0].wr_id, a[0].status, a[0].opcode), (1, WcStatus::Success, WcOpcode::Send));
    let b = p.completions(B);
    assert_eq!(b.len(), 1);
    assert_eq!((b[0].wr_id, b[0].status, b[0].opcode, b[0].byte_len), (77, WcStatus::Success, WcOpcode::Recv, 3072));
    assert_eq!(p.mem[B].get(8192, 3072), data);
    // One ACK, for the LAST packet.
    let acks: Vec<_> = p.log.iter().filter(|k| k.from == B).collect();
    assert_eq!(acks.len(), 1);
    assert_eq!((acks[0].opcode(), acks[0].psn().value()), (Opcode::RC_ACKNOWLEDGE, 0x1002));
}

#[test]
fn unanswered_write_is_resent_at_each_timeout_then_fails_retry_exceeded() {
    let s = Setup { retry_cnt: 2, timeout: 10, ..Setup::default() };
    let mut p = Pair::new(s);
    p.fill(A, 0, 3 * 1024, 9);
    p.send(A, 1, WrOpcode::RdmaWrite, 0, 3 * 1024, 0);
    p.send(A, 2, WrOpcode::RdmaWrite, 0, 16, 0);
    let timeout = Duration::from_nanos(4096 << 10);
    let first = p.transmit();
    assert_eq!(
        first.iter().map(|k| k.opcode()).collect::<Vec<_>>(),
        [
            Opcode::RC_RDMA_WRITE_FIRST,
            Opcode::RC_RDMA_WRITE_MIDDLE,
            Opcode::RC_RDMA_WRITE_LAST,
            Opcode::RC_RDMA_WRITE_ONLY
        ]
    );
    // Nothing reaches B. At each timeout the same packets go out again, as
    // many as the congestion window allows after a timeout (roce_proto::cc).
    for round in 1..=2u32 {
        assert!(p.advance());
        assert_eq!(p.elapsed(), timeout * round, "retransmission {round} at t = {round} x timeout");
        let again = p.transmit();
        assert_eq!(again.len(), roce_proto::testing::MIN_CWND as usize);
        for (k, (x, y)) in first.iter().zip(&again).enumerate() {
            let (a, b) = (x.packet(), y.packet());
            assert_eq!((a.bth().opcode(), a.bth().psn(), a.payload()), (b.bth().opcode(), b.bth().psn(), b.payload()));
            // The first packet of a retransmission asks for an answer at
            // once, and so does the one that fills the window.
            assert_eq!(b.bth().ack_req(), k == 0 || k + 1 == again.len() || a.bth().ack_req(), "packet {k}");
        }
    }
    assert!(p.advance());
    assert_eq!(p.elapsed(), timeout * 3);
    assert!(p.transmit().is_empty(), "retry_cnt 2 means 2 retransmissions, then failure");
    let wcs = p.completions(A);
    assert_eq!(
        wcs.iter().map(|w| (w.wr_id, w.status)).collect::<Vec<_>>(),
        [(1, WcStatus::RetryExcErr), (2, WcStatus::WrFlushErr)]
    );
    assert_eq!(p.dev[A].qp(p.qpn[A].into()).unwrap().state(), QpState::Err);
    assert_eq!(p.dev[A].counters().retry_exceeded_err, 1);
    // Later posts are flushed at once.
    p.send(A, 3, WrOpcode::Send, 0, 16, 0);
    assert_eq!(p.completions(A).iter().map(|w| (w.wr_id, w.status)).collect::<Vec<_>>(), [(3, WcStatus::WrFlushErr)]);
}

#[test]
fn rnr_nak_timer_14_delays_the_retry_by_1_28_ms() {
    let s = Setup { min_rnr_timer: 14, ..Setup::default() };
    let mut p = Pair::new(s);
    p.send(A, 1, WrOpcode::Send, 0, 100, 0);
    let send = p.transmit();
    assert_eq!(send.len(), 1);
    p.deliver(&send[0]);
    let nak = p.transmit();
    assert_eq!(nak.len(), 1);
    let aeth = nak[0].packet().aeth().unwrap().syndrome();
    assert_eq!(aeth, roce_wire::Syndrome::RnrNak { timer: roce_wire::RnrTimer(14) });
    let t_nak = p.elapsed();
    p.deliver(&nak[0]);
    assert!(p.transmit().is_empty(), "the requester waits");
    assert!(p.advance());
    assert_eq!(p.elapsed() - t_nak, Duration::from_micros(1280));
    let retry = p.transmit();
    assert_eq!(retry.len(), 1);
    assert_eq!(retry[0].bytes, send[0].bytes);
    assert_eq!(p.dev[B].counters().send_rnr_err, 1);
    assert_eq!(p.dev[A].counters().rcvd_rnr_err, 1);
}

#[test]
fn rnr_retry_7_retries_until_a_receive_is_posted() {
    let s = Setup { min_rnr_timer: 1, rnr_retry: 7, ..Setup::default() };
    let mut p = Pair::new(s);
    p.fill(A, 0, 50, 3);
    p.send(A, 1, WrOpcode::Send, 0, 50, 0);
    for _ in 0..200 {
        for k in p.transmit() {
            p.deliver(&k);
        }
        assert!(p.advance());
    }
    assert!(p.dev[B].counters().send_rnr_err >= 100);
    assert!(p.completions(A).is_empty());
    p.recv(B, 5, 0, 64);
    p.run(|_| true);
    assert_eq!(p.completions(A)[0].status, WcStatus::Success);
    let b = p.completions(B);
    assert_eq!((b[0].wr_id, b[0].byte_len), (5, 50));
}

#[test]
fn rnr_retries_exhaust() {
    let s = Setup { min_rnr_timer: 1, rnr_retry: 3, ..Setup::default() };
    let mut p = Pair::new(s);
    p.send(A, 1, WrOpcode::Send, 0, 8, 0);
    p.run(|_| true);
    assert_eq!(p.completions(A)[0].status, WcStatus::RnrRetryExcErr);
    assert_eq!(p.dev[B].counters().send_rnr_err, 4, "one try and three retries");
}

#[test]
fn rdma_read_and_fenced_write() {
    let mut p = Pair::new(Setup::default());
    let remote = p.fill(B, 4096, 2500, 5);
    p.send(A, 1, WrOpcode::RdmaRead, 0, 2500, 4096);
    p.fill(A, 100_000, 64, 8);
    p.send_flags(A, 2, WrOpcode::RdmaWrite, 100_000, 64, 200_000, SendFlags::SIGNALED | SendFlags::FENCE);
    let first = p.transmit();
    assert_eq!(first.iter().map(|k| k.opcode()).collect::<Vec<_>>(), [Opcode::RC_RDMA_READ_REQUEST]);
    assert_eq!(first[0].packet().reth().unwrap().dma_len(), 2500);
    p.deliver(&first[0]);
    let resp = p.transmit();
    assert_eq!(
        resp.iter().map(|k| k.opcode()).collect::<Vec<_>>(),
        [Opcode::RC_RDMA_READ_RESPONSE_FIRST, Opcode::RC_RDMA_READ_RESPONSE_MIDDLE, Opcode::RC_RDMA_READ_RESPONSE_LAST]
    );
    // The fenced WRITE waits for the READ's last response.
    p.deliver(&resp[0]);
    p.deliver(&resp[1]);
    assert!(p.transmit().is_empty(), "FENCE holds the WRITE");
    p.deliver(&resp[2]);
    let w = p.transmit();
    assert_eq!(w.iter().map(|k| k.opcode()).collect::<Vec<_>>(), [Opcode::RC_RDMA_WRITE_ONLY]);
    assert_eq!(w[0].psn(), first[0].psn().add(3), "a 3-packet READ consumes 3 PSNs");
    p.run(|_| true);
    let wcs = p.completions(A);
    assert_eq!(
        wcs.iter().map(|w| (w.wr_id, w.opcode, w.byte_len)).collect::<Vec<_>>(),
        [(1, WcOpcode::RdmaRead, 2500), (2, WcOpcode::RdmaWrite, 0)]
    );
    assert_eq!(p.mem[A].get(0, 2500), remote);
    assert_eq!(p.mem[B].get(200_000, 64), p.mem[A].get(100_000, 64));
}

#[test]
fn duplicated_compare_swap_executes_once() {
    let mut p = Pair::new(Setup::default());
    p.mem[B].set(64, &5u64.to_ne_bytes());
    let sge = [p.sge(A, 0, 8)];
    let mut wr =
        roce_proto::SendWr::new(1, WrOpcode::AtomicCmpAndSwp, SendFlags::SIGNALED, roce_proto::Payload::Sges(&sge));
    wr.remote_addr = p.va(B, 64);
    wr.rkey = p.key[B];
    wr.compare_add = 5;
    wr.swap = 9;
    p.dev[A].post_send(p.qpn[A].into(), &wr).unwrap();
    let req = p.transmit();
    assert_eq!(req[0].opcode(), Opcode::RC_COMPARE_SWAP);
    p.deliver(&req[0]);
    // The responder now holds 9. The duplicate must not compare again (5 != 9
    // would leave it) nor swap again: it replays the cached original, 5.
    p.mem[B].set(64, &9u64.to_ne_bytes());
    p.deliver(&req[0]);
    let acks = p.transmit();
    assert_eq!(acks.len(), 2);
    for a in &acks {
        assert_eq!(a.opcode(), Opcode::RC_ATOMIC_ACKNOWLEDGE);
        assert_eq!(a.packet().atomic_ack_eth().unwrap().orig(), 5);
    }
    assert_eq!(p.dev[B].counters().duplicate_request, 1);
    for a in &acks {
        p.deliver(a);
    }
    p.run(|_| true);
    let wcs = p.completions(A);
    assert_eq!(
        wcs.iter().map(|w| (w.wr_id, w.status, w.opcode)).collect::<Vec<_>>(),
        [(1, WcStatus::Success, WcOpcode::CompSwap)]
    );
    assert_eq!(p.mem[A].get(0, 8), 5u64.to_ne_bytes());
    assert_eq!(p.mem[B].get(64, 8), 9u64.to_ne_bytes());
}

#[test]
fn bad_rkey_is_a_remote_access_error_and_memory_stays_untouched() {
    let mut p = Pair::new(Setup::default());
    p.fill(A, 0, 64, 1);
    let sge = [p.sge(A, 0, 64)];
    let mut wr = roce_proto::SendWr::new(1, WrOpcode::RdmaWrite, SendFlags::SIGNALED, roce_proto::Payload::Sges(&sge));
    wr.remote_addr = p.va(B, 0);
    wr.rkey = p.key[B] ^ 0x01;
    p.dev[A].post_send(p.qpn[A].into(), &wr).unwrap();
    p.send(A, 2, WrOpcode::Send, 0, 8, 0);
    p.run(|_| true);
    let wcs = p.completions(A);
    assert_eq!(
        wcs.iter().map(|w| (w.wr_id, w.status)).collect::<Vec<_>>(),
        [(1, WcStatus::RemAccessErr), (2, WcStatus::WrFlushErr)]
    );
    assert_eq!(p.mem[B].get(0, 64), vec![0u8; 64]);
    assert_eq!(p.dev[A].qp(p.qpn[A].into()).unwrap().state(), QpState::Err);
}

#[test]
fn write_past_the_region_is_refused() {
    let mut p = Pair::new(Setup::default());
    p.send(A, 1, WrOpcode::RdmaWrite, 0, 128, common::MEM - 64);
    p.run(|_| true);
    assert_eq!(p.completions(A)[0].status, WcStatus::RemAccessErr);
}

#[test]
fn lost_packet_is_recovered_by_sequence_nak() {
    let mut p = Pair::new(Setup::default());
    let data = p.fill(A, 0, 5 * 1024, 4);
    p.recv(B, 9, 0, 8192);
    p.send(A, 1, WrOpcode::Send, 0, 5 * 1024, 0);
    let mut dropped = false;
    p.run(|k| {
        // Lose the second packet once.
        if k.from == A && k.opcode() == Opcode::RC_SEND_MIDDLE && !dropped {
            dropped = true;
            return false;
        }
        true
    });
    assert_eq!(p.completions(A)[0].status, WcStatus::Success);
    let b = p.completions(B);
    assert_eq!((b[0].status, b[0].byte_len), (WcStatus::Success, 5 * 1024));
    assert_eq!(p.mem[B].get(0, 5 * 1024), data);
    assert_eq!(p.dev[B].counters().out_of_seq_request, 3);
    assert_eq!(p.dev[A].counters().rcvd_seq_err, 1);
    let naks: Vec<_> =
        p.log.iter().filter(|k| k.from == B && k.packet().aeth().is_some_and(|a| a.syndrome_byte() == 0x60)).collect();
    assert_eq!(naks.len(), 1, "one PSN-sequence NAK per gap");
}

#[test]
fn write_with_immediate_consumes_a_zero_sge_receive() {
    let mut p = Pair::new(Setup::default());
    let data = p.fill(A, 0, 2000, 6);
    p.dev[B].post_recv(p.qpn[B].into(), &roce_proto::RecvWr { wr_id: 42, sg_list: &[] }).unwrap();
    p.send(A, 1, WrOpcode::RdmaWriteWithImm, 0, 2000, 300_000);
    p.run(|_| true);
    let b = p.completions(B);
    assert_eq!(b.len(), 1);
    assert_eq!(
        (b[0].wr_id, b[0].opcode, b[0].imm_data, b[0].byte_len),
        (42, WcOpcode::RecvRdmaWithImm, 0x1122_3344, 2000)
    );
    assert!(b[0].wc_flags.contains(roce_proto::WcFlags::WITH_IMM));
    assert_eq!(p.mem[B].get(300_000, 2000), data);
}

#[test]
fn a_duplicate_that_completes_the_wqe_during_an_rnr_wait_leaves_no_stale_timer() {
    let mut p = Pair::new(Setup::default());
    p.send(A, 1, WrOpcode::Send, 0, 32, 0);
    let send = p.transmit();
    p.deliver(&send[0]);
    let rnr = p.transmit();
    assert!(matches!(rnr[0].packet().aeth().unwrap().syndrome(), roce_wire::Syndrome::RnrNak { .. }));
    p.deliver(&rnr[0]);
    // A duplicate of the SEND reaches B after it posted a receive.
    p.recv(B, 7, 0, 64);
    p.deliver(&send[0]);
    for k in p.transmit() {
        p.deliver(&k);
    }
    assert_eq!(p.completions(A)[0].status, WcStatus::Success);
    // The RNR wait expires with nothing left to send: the timer must go away.
    assert!(p.advance());
    assert_eq!(p.dev[A].poll_timeout(), None);
    assert!(p.transmit().is_empty());
    assert!(!p.advance());
}

#[test]
fn armed_cq_fires_one_completion_event_per_arm() {
    let mut p = Pair::new(Setup::default());
    for i in 0..3 {
        p.recv(B, i, 0, 64);
    }
    p.dev[B].req_notify_cq(p.cq[B], true).unwrap();
    // An unsolicited SEND does not fire a solicited-only arm.
    p.send(A, 1, WrOpcode::Send, 0, 8, 0);
    p.run(|_| true);
    assert_eq!(p.dev[B].poll_comp_event(), None);
    // A solicited one does, once.
    p.send_flags(A, 2, WrOpcode::Send, 0, 8, 0, SendFlags::SIGNALED | SendFlags::SOLICITED);
    p.send_flags(A, 3, WrOpcode::Send, 0, 8, 0, SendFlags::SIGNALED | SendFlags::SOLICITED);
    p.run(|_| true);
    assert_eq!(p.dev[B].poll_comp_event(), Some(p.cq[B]));
    assert_eq!(p.dev[B].poll_comp_event(), None, "re-arm needed for the next event");
    assert_eq!(p.completions(B).len(), 3, "the event does not consume completions");
    let solicited: Vec<bool> = p.log.iter().filter(|k| k.from == A).map(|k| k.packet().bth().solicited()).collect();
    assert_eq!(solicited, [false, true, true]);
}

#[test]
fn sqd_finishes_the_message_in_progress_then_reports_drained() {
    use roce_proto::verbs::{QpAttrMask, QpState};
    let mut p = Pair::new(Setup::default());
    p.send(A, 1, WrOpcode::RdmaWrite, 0, 3 * 1024, 0);
    p.send(A, 2, WrOpcode::RdmaWrite, 0, 64, 0);
    // One packet leaves, then the application asks for SQD.
    let mut buf = vec![0u8; 9000];
    let t = p.dev[A].poll_transmit(p.now, &mut buf).unwrap();
    let first = buf[..t.len].to_vec();
    let sqd = roce_proto::QpAttr { qp_state: QpState::Sqd, en_sqd_async_notify: true, ..Default::default() };
    p.dev[A]
        .modify_qp(p.qpn[A].into(), &sqd, QpAttrMask(QpAttrMask::STATE.0 | QpAttrMask::EN_SQD_ASYNC_NOTIFY.0))
        .unwrap();
    p.dev[B].handle_datagram(p.now, p.addr[A], t.src_port, p.addr[B], None, &first);
    // The rest of the first WRITE goes; the second does not start.
    let rest = p.transmit();
    let ops: Vec<Opcode> = rest.iter().filter(|k| k.from == A).map(|k| k.opcode()).collect();
    assert_eq!(ops, [Opcode::RC_RDMA_WRITE_MIDDLE, Opcode::RC_RDMA_WRITE_LAST]);
    assert_eq!(p.dev[A].poll_event(), None, "not drained while the WRITE is unacknowledged");
    for k in &rest {
        p.deliver(k);
    }
    p.run(|_| true);
    assert_eq!(p.dev[A].poll_event(), Some(roce_proto::AsyncEvent::SqDrained(p.qpn[A].into())));
    assert_eq!(p.completions(A).iter().map(|w| w.wr_id).collect::<Vec<_>>(), [1]);
    // Back to RTS: the second WRITE goes.
    let rts = roce_proto::QpAttr { qp_state: QpState::Rts, ..Default::default() };
    p.dev[A].modify_qp(p.qpn[A].into(), &rts, QpAttrMask::STATE).unwrap();
    p.run(|_| true);
    assert_eq!(p.completions(A).iter().map(|w| (w.wr_id, w.status)).collect::<Vec<_>>(), [(2, WcStatus::Success)]);
}

#[test]
fn a_fixed_udp_source_port_is_used_and_covered_by_the_icrc() {
    // A socket driver sends from its bound port; the ICRC must cover that
    // port, or the peer drops every packet.
    let mut p = Pair::new(Setup { udp_src_port: Some(4791), ..Setup::default() });
    p.recv(B, 1, 0, 3000);
    p.fill(A, 0, 3000, 4);
    p.send(A, 7, WrOpcode::Send, 0, 3000, 0);
    p.run(|_| true);
    assert!(p.log.iter().all(|k| k.src_port == 4791));
    assert_eq!(p.log.len(), 4, "3 SEND packets and one ACK");
    assert_eq!(p.completions(A).len(), 1);
    assert_eq!(p.completions(B)[0].byte_len, 3000);
    assert_eq!(p.dev[B].counters().drop_icrc, 0);
    // rxe's rcvd_pkts: every packet that passed the checks, responses too.
    assert_eq!((p.dev[B].counters().rcvd_pkts, p.dev[A].counters().rcvd_pkts), (3, 1));
    assert_eq!((p.dev[A].counters().sent_pkts, p.dev[B].counters().sent_pkts), (3, 1));
    // Delivered with another source port, the same bytes fail the ICRC.
    let mut k = p.log[0].clone();
    k.src_port = 4792;
    p.deliver(&k);
    assert_eq!(p.dev[B].counters().drop_icrc, 1);
    assert_eq!(p.dev[B].counters().rcvd_pkts, 3, "a dropped packet is not counted as received");
}

#[test]
fn a_read_being_answered_keeps_its_memory_in_use_after_dereg() {
    let mut p = Pair::new(Setup::default());
    p.fill(B, 0, 3000, 9);
    p.send(A, 1, WrOpcode::RdmaRead, 0, 3000, 0);
    let req = p.transmit();
    assert_eq!(req.len(), 1);
    p.deliver(&req[0]);
    let (addr, len) = (p.mem[B].addr() as usize, p.mem[B].len());
    // The responder holds a grant for the reply it has not sent yet: the
    // region can be deregistered, but its memory must stay.
    assert!(p.dev[B].memory_in_use(addr, len));
    assert!(p.dev[B].memory_in_use(addr + 2999, 1));
    assert!(!p.dev[B].memory_in_use(addr + len, 16), "memory past the region is not held");
    p.dev[B].dereg_mr(p.key[B]).unwrap();
    p.run(|_| true);
    assert!(!p.dev[B].memory_in_use(addr, len));
    assert_eq!(p.completions(A)[0].status, roce_proto::verbs::WcStatus::Success);
    assert_eq!(p.mem[A].get(0, 3000), p.mem[B].get(0, 3000));
    // Objects in use cannot be destroyed; unused ones can.
    assert_eq!(p.dev[B].destroy_cq(p.cq[B]), Err(roce_proto::VerbError::Busy));
    assert_eq!(p.dev[B].dealloc_pd(p.pd[B]), Err(roce_proto::VerbError::Busy));
    p.dev[B].destroy_qp(p.qpn[B].into()).unwrap();
    p.dev[B].destroy_cq(p.cq[B]).unwrap();
    p.dev[B].dealloc_pd(p.pd[B]).unwrap();
    assert_eq!(p.dev[B].dealloc_pd(p.pd[B]), Err(roce_proto::VerbError::UnknownHandle(p.pd[B].get())));
}

#[test]
fn a_lone_ack_follows_one_request_packet_of_its_qp_and_no_more() {
    let mut p = Pair::new(Setup::default());
    p.recv(B, 7, 8192, 4096);
    p.recv(A, 8, 8192, 4096);
    p.send(A, 1, WrOpcode::Send, 0, 8, 0);
    let req = p.transmit();
    assert_eq!(req.iter().map(|k| k.opcode()).collect::<Vec<_>>(), [Opcode::RC_SEND_ONLY]);
    p.deliver(&req[0]);
    // B owes an ACK and has two requests queued: the ACK goes right after
    // the first (so both can share one GSO send), not after both. (The
    // second is a WRITE: before A's first ACK, B may start one SEND only.)
    p.send(B, 2, WrOpcode::Send, 0, 8, 0);
    p.send(B, 3, WrOpcode::RdmaWrite, 0, 16, 0);
    let out = p.transmit();
    let from_b: Vec<Opcode> = out.iter().filter(|k| k.from == B).map(|k| k.opcode()).collect();
    assert_eq!(from_b, [Opcode::RC_SEND_ONLY, Opcode::RC_ACKNOWLEDGE, Opcode::RC_RDMA_WRITE_ONLY]);
    let ack = out.iter().find(|k| k.opcode() == Opcode::RC_ACKNOWLEDGE).unwrap();
    assert_eq!(ack.psn(), req[0].psn());
    // With no request queued, an ACK leaves at once.
    for k in &out {
        p.deliver(k);
    }
    let acks = p.transmit();
    assert_eq!(acks.iter().map(|k| (k.from, k.opcode())).collect::<Vec<_>>(), [(A, Opcode::RC_ACKNOWLEDGE)]);
    p.run(|_| true);
    let mut a: Vec<_> = p.completions(A).iter().map(|w| (w.wr_id, w.status)).collect();
    a.sort_by_key(|w| w.0);
    assert_eq!(a, [(1, WcStatus::Success), (8, WcStatus::Success)]);
    let mut b: Vec<_> = p.completions(B).iter().map(|w| (w.wr_id, w.status)).collect();
    b.sort_by_key(|w| w.0);
    assert_eq!(b, [(2, WcStatus::Success), (3, WcStatus::Success), (7, WcStatus::Success)]);
}
