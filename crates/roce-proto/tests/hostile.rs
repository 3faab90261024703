//! Packets a hostile or broken peer might send: each is refused with the
//! right NAK or a counted drop, and never touches memory outside a grant.

mod common;

use common::{A, B, Pair, Setup};
use roce_proto::verbs::{QpState, WcStatus, WrOpcode};
use roce_wire::{BthRepr, ExtRepr, Opcode, PacketRepr, Psn, RethRepr, Syndrome};

/// Builds a request from A's QP to B's QP at B's expected PSN.
fn forge(p: &Pair, opcode: Opcode, psn: Psn, reth: Option<RethRepr>, payload: &[u8], dest_qpn: u32) -> Vec<u8> {
    let repr = PacketRepr {
        bth: BthRepr { ack_req: true, ..BthRepr::new(opcode, dest_qpn, psn) },
        ext: ExtRepr { reth, ..Default::default() },
    };
    p.emit_from_a(&repr, payload)
}

fn inject(p: &mut Pair, bytes: &[u8]) {
    let src_port = p.dev[A].qp(p.qpn[A].into()).unwrap().src_port;
    p.dev[B].handle_datagram(p.now, p.addr[A], src_port, p.addr[B], None, bytes);
}

fn expected_psn(p: &Pair) -> Psn {
    p.dev[B].qp(p.qpn[B].into()).unwrap().expected_psn()
}

fn naks(p: &mut Pair) -> Vec<Syndrome> {
    p.transmit().iter().filter(|k| k.from == B).filter_map(|k| k.packet().aeth().map(|a| a.syndrome())).collect()
}

#[test]
fn write_outside_the_region_is_nakked_and_memory_untouched() {
    let mut p = Pair::new(Setup::default());
    let psn = expected_psn(&p);
    // 64 bytes starting 32 bytes before the end of B's region.
    let reth = RethRepr { va: p.va(B, common::MEM - 32), rkey: p.key[B], dma_len: 64 };
    let pkt = forge(&p, Opcode::RC_RDMA_WRITE_ONLY, psn, Some(reth), &[0xee; 64], p.qpn[B]);
    let before = p.mem[B].get(common::MEM - 32, 32);
    inject(&mut p, &pkt);
    assert_eq!(naks(&mut p), [Syndrome::Nak(roce_wire::NakCode::RemoteAccessError)]);
    assert_eq!(p.mem[B].get(common::MEM - 32, 32), before);
    assert_eq!(
        p.dev[B].qp(p.qpn[B].into()).unwrap().state(),
        QpState::Err,
        "class C error: the responder QP fails too"
    );
}

#[test]
fn dma_length_overflow_and_address_wrap_are_refused() {
    let mut p = Pair::new(Setup::default());
    let psn = expected_psn(&p);
    let reth = RethRepr { va: u64::MAX - 8, rkey: p.key[B], dma_len: 64 };
    let pkt = forge(&p, Opcode::RC_RDMA_WRITE_ONLY, psn, Some(reth), &[1; 64], p.qpn[B]);
    inject(&mut p, &pkt);
    assert_eq!(naks(&mut p), [Syndrome::Nak(roce_wire::NakCode::RemoteAccessError)]);
    // A WRITE whose payload is longer than its DMA length.
    let mut q = Pair::new(Setup::default());
    let psn = expected_psn(&q);
    let reth = RethRepr { va: q.va(B, 0), rkey: q.key[B], dma_len: 8 };
    let pkt = forge(&q, Opcode::RC_RDMA_WRITE_ONLY, psn, Some(reth), &[2; 64], q.qpn[B]);
    inject(&mut q, &pkt);
    assert_eq!(naks(&mut q), [Syndrome::Nak(roce_wire::NakCode::InvalidRequest)]);
    assert_eq!(q.mem[B].get(0, 64), vec![0u8; 64]);
}

#[test]
fn wrong_opcode_sequence_is_an_invalid_request() {
    let mut p = Pair::new(Setup::default());
    p.recv(B, 1, 0, 4096);
    let psn = expected_psn(&p);
    // A MIDDLE with no FIRST before it.
    let pkt = forge(&p, Opcode::RC_SEND_MIDDLE, psn, None, &[3; 1024], p.qpn[B]);
    inject(&mut p, &pkt);
    assert_eq!(naks(&mut p), [Syndrome::Nak(roce_wire::NakCode::InvalidRequest)]);
}

#[test]
fn wrong_psn_gets_one_sequence_nak_and_no_effect() {
    let mut p = Pair::new(Setup::default());
    p.recv(B, 1, 0, 4096);
    let psn = expected_psn(&p).add(5);
    for _ in 0..3 {
        let pkt = forge(&p, Opcode::RC_SEND_ONLY, psn, None, &[4; 16], p.qpn[B]);
        inject(&mut p, &pkt);
    }
    assert_eq!(naks(&mut p), [Syndrome::Nak(roce_wire::NakCode::PsnSequenceError)]);
    assert!(p.completions(B).is_empty());
    assert_eq!(p.dev[B].counters().out_of_seq_request, 3);
}

#[test]
fn unknown_qpn_bad_icrc_and_garbage_are_counted_drops() {
    let mut p = Pair::new(Setup::default());
    let psn = expected_psn(&p);
    let pkt = forge(&p, Opcode::RC_SEND_ONLY, psn, None, &[5; 16], 0x777);
    inject(&mut p, &pkt);
    assert_eq!(p.dev[B].counters().drop_no_qp, 1);
    let mut bad = forge(&p, Opcode::RC_SEND_ONLY, psn, None, &[5; 16], p.qpn[B]);
    bad[20] ^= 1;
    inject(&mut p, &bad);
    assert_eq!(p.dev[B].counters().drop_icrc, 1);
    inject(&mut p, &[0u8; 7]);
    inject(&mut p, &[0x15; 40]);
    assert_eq!(p.dev[B].counters().drop_malformed, 2);
    assert!(p.transmit().is_empty());
}

#[test]
fn read_without_remote_read_access_is_refused() {
    let mut p = Pair::new(Setup::default());
    // Register a read-only-for-local region on B and aim a READ at it.
    let region = unsafe_region(&p);
    let key = p.dev[B].reg_mr(p.pd[B], p.va(B, 0), region, roce_proto::verbs::AccessFlags::LOCAL_WRITE).unwrap();
    let sge = [p.sge(A, 0, 64)];
    let mut wr = roce_proto::SendWr::new(
        1,
        WrOpcode::RdmaRead,
        roce_proto::verbs::SendFlags::SIGNALED,
        roce_proto::Payload::Sges(&sge),
    );
    wr.remote_addr = p.va(B, 0);
    wr.rkey = key;
    p.dev[A].post_send(p.qpn[A].into(), &wr).unwrap();
    p.run(|_| true);
    assert_eq!(p.completions(A)[0].status, WcStatus::RemAccessErr);
}

#[allow(unsafe_code)]
fn unsafe_region(p: &Pair) -> roce_proto::Region {
    // SAFETY: the region is B's buffer, which outlives B's device in Pair.
    unsafe { p.mem[B].region() }
}

#[test]
fn a_vanished_peer_fails_the_requester_within_the_retry_bound() {
    let s = Setup { retry_cnt: 3, timeout: 12, ..Setup::default() };
    let mut p = Pair::new(s);
    for i in 0..5 {
        p.send(A, i, WrOpcode::RdmaWrite, 0, 5000, 0);
    }
    // Nothing reaches B, ever.
    p.run(|k| k.from != A);
    let wcs = p.completions(A);
    assert_eq!(wcs.len(), 5);
    assert_eq!(wcs[0].status, WcStatus::RetryExcErr);
    assert!(wcs[1..].iter().all(|w| w.status == WcStatus::WrFlushErr));
    let limit = std::time::Duration::from_nanos(4096 << 12) * 4;
    assert_eq!(p.elapsed(), limit, "the first try plus three retries, one timeout each");
}

// Found by the engine fuzzer (`crates/roce-proto/fuzz`): a duplicate READ
// skipped the QP's access check (`responder.rs`, `exec_read`).
#[test]
fn a_repeated_read_needs_the_qps_remote_read_access() {
    use roce_proto::verbs::{AccessFlags, QpAttrMask};
    let mut p = Pair::new(Setup::default());
    // B's QP stops granting remote reads (RTS -> RTS with ACCESS_FLAGS);
    // its region still grants them.
    let a = roce_proto::QpAttr {
        qp_state: QpState::Rts,
        qp_access_flags: AccessFlags::REMOTE_WRITE,
        ..roce_proto::QpAttr::default()
    };
    p.dev[B].modify_qp(p.qpn[B].into(), &a, QpAttrMask::STATE | QpAttrMask::ACCESS_FLAGS).unwrap();
    p.fill(B, 0, 64, 9);
    let reth = RethRepr { va: p.va(B, 0), rkey: p.key[B], dma_len: 64 };
    // A READ with a PSN below the expected one is a duplicate: it is
    // answered only as the READ itself would be, and this QP refuses READs.
    let psn = expected_psn(&p).sub(1);
    let pkt = forge(&p, Opcode::RC_RDMA_READ_REQUEST, psn, Some(reth), &[], p.qpn[B]);
    inject(&mut p, &pkt);
    let sent = p.transmit();
    assert!(
        sent.iter().all(|k| k.opcode() != Opcode::RC_RDMA_READ_RESPONSE_ONLY),
        "B's memory left through a QP that does not grant REMOTE_READ"
    );
    assert_eq!(p.dev[B].qp(p.qpn[B].into()).unwrap().state(), QpState::Rts, "a duplicate is dropped, not an error");
}

/// Writes `repr` with `payload` as B's QP sends it to A (for forged responses).
fn emit_from_b(p: &Pair, repr: &PacketRepr, payload: &[u8]) -> Vec<u8> {
    let (std::net::IpAddr::V4(s), std::net::IpAddr::V4(d)) = (p.addr[B], p.addr[A]) else { unreachable!("IPv4 pair") };
    let src_port = p.dev[B].qp(p.qpn[B].into()).unwrap().src_port;
    let ctx = roce_wire::IcrcContext { ip: roce_wire::IpContext::v4_socket(s, d), src_port, dst_port: 4791 };
    let mut buf = vec![0u8; repr.packet_len(payload.len()).unwrap()];
    repr.emit(&mut buf, payload, &ctx).unwrap();
    buf
}

// Found by the engine fuzzer (`crates/roce-proto/fuzz`): the READ waited
// forever with no PSN outstanding and no timer armed.
#[test]
fn a_read_response_stream_longer_than_the_read_fails_the_read_instead_of_hanging_it() {
    let s = Setup { mtu: roce_proto::Mtu::Mtu256, ..Setup::default() };
    let mut p = Pair::new(s);
    // A READ of 3 MTUs: responses FIRST, MIDDLE, LAST.
    p.send(A, 1, WrOpcode::RdmaRead, 0, 768, 0);
    let req = p.transmit();
    assert_eq!(req.len(), 1);
    let first = req[0].psn();
    // A peer (here: forged; the fuzzer had B answer a forged READ of 31
    // MTUs at A's PSNs) answers with a longer stream: FIRST, MIDDLE, MIDDLE.
    // The third packet carries the READ's last PSN and its last bytes, but
    // is no LAST: the READ cannot complete from it.
    let ack = roce_wire::AethRepr { syndrome: Syndrome::Ack { credits: Syndrome::CREDITS_INVALID }, msn: 1 };
    for (k, op) in [
        Opcode::RC_RDMA_READ_RESPONSE_FIRST,
        Opcode::RC_RDMA_READ_RESPONSE_MIDDLE,
        Opcode::RC_RDMA_READ_RESPONSE_MIDDLE,
    ]
    .into_iter()
    .enumerate()
    {
        let aeth = (op != Opcode::RC_RDMA_READ_RESPONSE_MIDDLE).then_some(ack);
        let repr = PacketRepr {
            bth: BthRepr::new(op, p.qpn[A], first.add(k as u32)),
            ext: ExtRepr { aeth, ..Default::default() },
        };
        let bytes = emit_from_b(&p, &repr, &[0x5a; 256]);
        let src_port = p.dev[B].qp(p.qpn[B].into()).unwrap().src_port;
        p.dev[A].handle_datagram(p.now, p.addr[B], src_port, p.addr[A], None, &bytes);
    }
    // Whatever comes next (here: nothing more from B, timers run), the WR
    // must complete: a READ whose responses overran it is a bad response
    // (IBTA: the last PSN of a READ is answered by a LAST or ONLY; rxe
    // fails the WQE on a response opcode out of sequence), not a READ that
    // waits forever with no PSN outstanding and no timer armed.
    p.run(|k| k.from == A);
    let wcs = p.completions(A);
    assert_eq!(wcs.len(), 1, "the READ never completed (no timer, nothing outstanding)");
    assert_eq!(wcs[0].status, WcStatus::BadRespErr);
}

// Found by the engine fuzzer: a repeated READ asking for more than the READ
// it repeats was answered, with response PSNs past the READ's (one past
// everything B had seen), and the requester stalled on them.
#[test]
fn a_repeated_read_is_answered_only_inside_the_read_it_repeats() {
    let s = Setup { mtu: roce_proto::Mtu::Mtu256, ..Setup::default() };
    let mut p = Pair::new(s);
    p.fill(B, 0, 1024, 3);
    // A READ of 3 MTUs (PSNs first..first+2), then a WRITE (first+3).
    p.send(A, 1, WrOpcode::RdmaRead, 0, 768, 512);
    p.send(A, 2, WrOpcode::RdmaWrite, 4096, 64, 8192);
    p.run(|_| true);
    assert!(p.completions(A).iter().all(|w| w.status == WcStatus::Success));
    let first = expected_psn(&p).sub(4);
    let (va, rkey) = (p.va(B, 0) + 512, p.key[B]);
    let answers = |p: &mut Pair, psn: Psn, va: u64, rkey: u32, len: u32| -> Vec<Psn> {
        let reth = RethRepr { va, rkey, dma_len: len };
        let pkt = forge(p, Opcode::RC_RDMA_READ_REQUEST, psn, Some(reth), &[], p.qpn[B]);
        inject(p, &pkt);
        p.transmit().iter().filter(|k| k.from == B).map(|k| k.psn()).collect()
    };
    let dropped = p.dev[B].counters().drop_invalid;
    // The rest of the READ from its second packet: answered at its PSNs.
    assert_eq!(answers(&mut p, first.add(1), va + 256, rkey, 512), vec![first.add(1), first.add(2)]);
    // Inside the READ's bytes and PSNs, as rxe allows: answered.
    assert_eq!(answers(&mut p, first.add(1), va, rkey, 256), vec![first.add(1)]);
    assert_eq!(p.dev[B].counters().drop_invalid, dropped);
    // One packet more than the READ had, ending at the WRITE's PSN: the
    // bytes are still granted by the key, but the READ never asked them.
    assert_eq!(answers(&mut p, first, va, rkey, 1024), vec![]);
    // Past every PSN B has seen.
    assert_eq!(answers(&mut p, first.add(2), va + 512, rkey, 768), vec![]);
    // Bytes before the READ's (the key grants them), or under another key.
    assert_eq!(answers(&mut p, first, va - 256, rkey, 256), vec![]);
    assert_eq!(answers(&mut p, first, va, rkey ^ 0x100, 768), vec![]);
    assert_eq!(p.dev[B].counters().drop_invalid, dropped + 4, "each refused repeat is a counted drop");
    assert_eq!(p.dev[B].qp(p.qpn[B].into()).unwrap().state(), QpState::Rts, "a duplicate is dropped, not an error");
}
