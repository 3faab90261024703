//! Wire rules where softroce and Linux rxe 6.1 were compared, each on
//! explicit virtual time with crafted packets: the P_Key check, the MSN of
//! READ responses queued back to back, an unfinished SEND followed by a new
//! message, AckReq on every packet of a message, and opcodes the responder
//! does not execute.

mod common;

use std::time::Duration;

use common::{A, B, Pair, Setup};
use roce_proto::testing::{PORT_PKEY, pkey_matches};
use roce_proto::verbs::{QpState, SendFlags, WcStatus, WrOpcode};
use roce_wire::{BthRepr, ExtRepr, IcrcContext, IpContext, NakCode, Opcode, PacketRepr, Psn, RethRepr, Syndrome};

/// A request from A's QP to B's QP.
fn forge(p: &Pair, bth: BthRepr, reth: Option<RethRepr>, payload: &[u8]) -> Vec<u8> {
    let repr = PacketRepr { bth, ext: ExtRepr { reth, ..Default::default() } };
    p.emit_from_a(&repr, payload)
}

/// A BTH to B's QP (`qpn`).
fn bth(qpn: u32, opcode: Opcode, psn: Psn, ack_req: bool) -> BthRepr {
    BthRepr { ack_req, ..BthRepr::new(opcode, qpn, psn) }
}

/// Placeholder destination QPN in [`bth`] that [`req`] replaces with B's.
const QB: u32 = 0;

/// Forges and delivers a request to B (to B's QP when `bth` names [`QB`]).
fn req(p: &mut Pair, mut bth: BthRepr, reth: Option<RethRepr>, payload: &[u8]) {
    if bth.dest_qpn == QB {
        bth.dest_qpn = p.qpn[B];
    }
    let bytes = forge(p, bth, reth, payload);
    inject(p, &bytes);
}

fn inject(p: &mut Pair, bytes: &[u8]) {
    let src_port = p.dev[A].qp(p.qpn[A].into()).unwrap().src_port;
    p.dev[B].handle_datagram(p.now, p.addr[A], src_port, p.addr[B], None, bytes);
}

fn expected_psn(p: &Pair) -> Psn {
    p.dev[B].qp(p.qpn[B].into()).unwrap().expected_psn()
}

/// One of B's answers: opcode, PSN, AETH syndrome and MSN if any.
type Answer = (Opcode, Psn, Option<(Syndrome, u32)>);

/// B's answers.
fn answers(p: &mut Pair) -> Vec<Answer> {
    p.transmit()
        .iter()
        .filter(|k| k.from == B)
        .map(|k| {
            let pk = k.packet();
            (pk.bth().opcode(), pk.bth().psn(), pk.aeth().map(|a| (a.syndrome(), a.msn())))
        })
        .collect()
}

/// Every ACK here leaves B with no receive WQE posted: 0 end-to-end credits.
const ACK: Syndrome = Syndrome::Ack { credits: 0 };

#[test]
fn pkey_matching_follows_ibta_10_9_3() {
    // Low 15 bits equal, not the invalid P_Key, at least one full member.
    assert!(pkey_matches(0xffff, PORT_PKEY));
    assert!(pkey_matches(0x7fff, PORT_PKEY), "a limited member meets our full member");
    assert!(!pkey_matches(0x7fff, 0x7fff), "two limited members do not communicate");
    assert!(!pkey_matches(0x8001, PORT_PKEY));
    assert!(!pkey_matches(0x0000, 0x0000) && !pkey_matches(0x8000, 0x8000), "the invalid P_Key matches nothing");
}

#[test]
fn a_request_outside_the_partition_is_dropped_and_counted() {
    let mut p = Pair::new(Setup::default());
    p.recv(B, 1, 0, 64);
    let psn = expected_psn(&p);
    for pkey in [0x8001, 0x1234, 0x0000, 0x8000] {
        let b = BthRepr { pkey, ..bth(p.qpn[B], Opcode::RC_SEND_ONLY, psn, true) };
        req(&mut p, b, None, &[7; 16]);
    }
    let c = *p.dev[B].counters();
    assert_eq!(c.drop_bad_pkey, 4);
    assert_eq!(c.rcvd_pkts, 0, "dropped before the QP saw them");
    assert!(answers(&mut p).is_empty(), "no NAK: a silent drop, as rxe's check_keys");
    assert!(p.completions(B).is_empty());
    assert_eq!(expected_psn(&p), psn);
    assert_eq!(p.dev[B].qp(p.qpn[B].into()).unwrap().state(), QpState::Rts);
    // The same SEND from a limited member of the default partition lands.
    let b = BthRepr { pkey: 0x7fff, ..bth(p.qpn[B], Opcode::RC_SEND_ONLY, psn, true) };
    req(&mut p, b, None, &[7; 16]);
    assert_eq!(answers(&mut p), [(Opcode::RC_ACKNOWLEDGE, psn, Some((ACK, 1)))]);
    let wcs = p.completions(B);
    assert_eq!((wcs.len(), wcs[0].status, wcs[0].byte_len), (1, WcStatus::Success, 16));
    assert_eq!(p.dev[B].counters().drop_bad_pkey, 4);
}

#[test]
fn a_forged_response_outside_the_partition_is_dropped() {
    let mut p = Pair::new(Setup::default());
    let sge = [p.sge(A, 0, 8)];
    let mut wr = roce_proto::SendWr::new(5, WrOpcode::RdmaRead, SendFlags::SIGNALED, roce_proto::Payload::Sges(&sge));
    wr.remote_addr = p.va(B, 0);
    wr.rkey = p.key[B];
    p.dev[A].post_send(p.qpn[A].into(), &wr).unwrap();
    let req = p.transmit();
    assert_eq!(req.len(), 1);
    // B's READ response, re-keyed into another partition on the way.
    p.deliver(&req[0]);
    let mut resp = p.transmit().into_iter().find(|k| k.from == B).unwrap();
    let pk = resp.packet();
    let repr = PacketRepr {
        bth: BthRepr { pkey: 0x8002, ..BthRepr::new(pk.bth().opcode(), p.qpn[A], pk.bth().psn()) },
        ext: ExtRepr { aeth: Some(roce_wire::AethRepr { syndrome: ACK, msn: 1 }), ..Default::default() },
    };
    let (std::net::IpAddr::V4(s), std::net::IpAddr::V4(d)) = (p.addr[B], p.addr[A]) else { unreachable!() };
    let ctx = IcrcContext { ip: IpContext::v4_socket(s, d), src_port: resp.src_port, dst_port: 4791 };
    let mut bytes = vec![0u8; repr.packet_len(8).unwrap()];
    repr.emit(&mut bytes, &[9; 8], &ctx).unwrap();
    resp.bytes = bytes;
    p.deliver(&resp);
    assert_eq!(p.dev[A].counters().drop_bad_pkey, 1);
    assert!(p.completions(A).is_empty(), "the READ is not completed by the forged response");
    assert_eq!(p.mem[A].get(0, 8), vec![0; 8]);
}

#[test]
fn back_to_back_reads_each_report_their_own_msn() {
    // B's max_dest_rd_atomic is 1, yet both READ requests reach it before
    // it sends anything. Each response carries the MSN its READ left, as
    // rxe's sends 1 then 2 (it answers a READ before taking the next).
    let mut p = Pair::new(Setup { max_dest_rd_atomic: 1, ..Setup::default() });
    p.fill(B, 0, 3000, 3);
    for (i, (off, len)) in [(0usize, 64u32), (1000, 2500)].into_iter().enumerate() {
        let sge = [p.sge(A, 10_000 + off, len)];
        let mut wr =
            roce_proto::SendWr::new(i as u64, WrOpcode::RdmaRead, SendFlags::SIGNALED, roce_proto::Payload::Sges(&sge));
        wr.remote_addr = p.va(B, off);
        wr.rkey = p.key[B];
        p.dev[A].post_send(p.qpn[A].into(), &wr).unwrap();
    }
    let reqs = p.transmit();
    assert_eq!(reqs.iter().map(|k| k.opcode()).collect::<Vec<_>>(), [Opcode::RC_RDMA_READ_REQUEST; 2]);
    for k in &reqs {
        p.deliver(k);
    }
    let first = reqs[0].psn();
    let got = answers(&mut p);
    assert_eq!(
        got,
        [
            (Opcode::RC_RDMA_READ_RESPONSE_ONLY, first, Some((ACK, 1))),
            (Opcode::RC_RDMA_READ_RESPONSE_FIRST, first.add(1), Some((ACK, 2))),
            (Opcode::RC_RDMA_READ_RESPONSE_MIDDLE, first.add(2), None),
            (Opcode::RC_RDMA_READ_RESPONSE_LAST, first.add(3), Some((ACK, 2))),
        ]
    );
}

#[test]
fn send_only_inside_an_unfinished_send_fails_the_wqe_in_progress() {
    let mut p = Pair::new(Setup::default());
    p.recv(B, 1, 0, 4096);
    p.recv(B, 2, 4096, 4096);
    let psn = expected_psn(&p);
    req(&mut p, bth(QB, Opcode::RC_SEND_FIRST, psn, false), None, &[1; 1024]);
    assert!(answers(&mut p).is_empty());
    p.now += Duration::from_micros(5);
    req(&mut p, bth(QB, Opcode::RC_SEND_ONLY, psn.next(), true), None, &[2; 16]);
    // Class C: NAK invalid request for the offending PSN with the MSN of
    // the messages completed (none), the WQE being filled completes with
    // REM_INV_REQ_ERR (as rxe), the rest is flushed, the QP is in ERR.
    assert_eq!(
        answers(&mut p),
        [(Opcode::RC_ACKNOWLEDGE, psn.next(), Some((Syndrome::Nak(NakCode::InvalidRequest), 0)))]
    );
    let wcs = p.completions(B);
    assert_eq!(
        wcs.iter().map(|w| (w.wr_id, w.status)).collect::<Vec<_>>(),
        [(1, WcStatus::RemInvReqErr), (2, WcStatus::WrFlushErr)]
    );
    assert_eq!(p.dev[B].qp(p.qpn[B].into()).unwrap().state(), QpState::Err);
}

#[test]
fn send_only_inside_an_unfinished_send_on_an_srq_fails_the_held_wqe() {
    let mut p = Pair::new(Setup { srq_on_b: true, ..Setup::default() });
    let srq = p.srq.unwrap();
    for i in 0..2u64 {
        let sge = [p.sge(B, 4096 * i as usize, 4096)];
        p.dev[B].post_srq_recv(srq, &roce_proto::RecvWr { wr_id: 1 + i, sg_list: &sge }).unwrap();
    }
    let psn = expected_psn(&p);
    req(&mut p, bth(QB, Opcode::RC_SEND_FIRST, psn, false), None, &[1; 1024]);
    req(&mut p, bth(QB, Opcode::RC_SEND_ONLY, psn.next(), true), None, &[2; 16]);
    let wcs = p.completions(B);
    // The held WQE fails; the other stays in the SRQ for other QPs.
    assert_eq!(wcs.iter().map(|w| (w.wr_id, w.status)).collect::<Vec<_>>(), [(1, WcStatus::RemInvReqErr)]);
    assert_eq!(p.dev[B].qp(p.qpn[B].into()).unwrap().state(), QpState::Err);
}

#[test]
fn ack_req_on_every_packet_is_answered_by_a_coalesced_ack() {
    // Three packets of one SEND, each asking for an ACK, arrive together:
    // one ACK for the last PSN answers all three (IBTA 9.7.5.1.2 lets a
    // responder coalesce ACKs; rxe answers each). Counted in ack_deferred.
    let mut p = Pair::new(Setup::default());
    p.recv(B, 1, 0, 4096);
    let psn = expected_psn(&p);
    let ops = [Opcode::RC_SEND_FIRST, Opcode::RC_SEND_MIDDLE, Opcode::RC_SEND_LAST];
    for (i, op) in ops.into_iter().enumerate() {
        let len = if i == 2 { 100 } else { 1024 };
        req(&mut p, bth(QB, op, psn.add(i as u32), true), None, &vec![i as u8; len]);
    }
    assert_eq!(answers(&mut p), [(Opcode::RC_ACKNOWLEDGE, psn.add(2), Some((ACK, 1)))]);
    assert_eq!(p.dev[B].counters().ack_deferred, 2);
    assert_eq!(p.completions(B)[0].byte_len, 2148);
    // Arriving one at a time, with B sending in between, each is answered.
    p.recv(B, 2, 0, 4096);
    let psn = expected_psn(&p);
    let mut got = Vec::new();
    for (i, op) in ops.into_iter().enumerate() {
        p.now += Duration::from_micros(10);
        let len = if i == 2 { 100 } else { 1024 };
        req(&mut p, bth(QB, op, psn.add(i as u32), true), None, &vec![i as u8; len]);
        got.extend(answers(&mut p));
    }
    // While the SEND is being received, its WQE still counts as a credit
    // (it belongs to the message after MSN 1); the LAST uses it up.
    let filling = Syndrome::Ack { credits: 1 };
    assert_eq!(
        got,
        [
            (Opcode::RC_ACKNOWLEDGE, psn, Some((filling, 1))),
            (Opcode::RC_ACKNOWLEDGE, psn.add(1), Some((filling, 1))),
            (Opcode::RC_ACKNOWLEDGE, psn.add(2), Some((ACK, 2))),
        ]
    );
}

#[test]
fn a_reserved_opcode_is_a_counted_drop() {
    // A reserved opcode (0x18: none in IBA 1.5) has no header layout to
    // parse: the packet is malformed, dropped and counted; the QP stays.
    let mut p = Pair::new(Setup::default());
    p.recv(B, 1, 0, 64);
    let psn = expected_psn(&p);
    let mut pkt = forge(&p, bth(p.qpn[B], Opcode::RC_SEND_ONLY, psn, true), None, &[1; 16]);
    pkt[0] = 0x18;
    inject(&mut p, &pkt);
    assert_eq!(p.dev[B].counters().drop_malformed, 1);
    assert!(answers(&mut p).is_empty());
    assert_eq!(p.dev[B].qp(p.qpn[B].into()).unwrap().state(), QpState::Rts);
    assert_eq!(expected_psn(&p), psn);
}
