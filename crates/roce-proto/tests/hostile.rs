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
    let src_port = p.dev[A].qp(p.qpn[A]).unwrap().src_port;
    p.dev[B].handle_datagram(p.now, p.addr[A], src_port, p.addr[B], None, bytes);
}

fn expected_psn(p: &Pair) -> Psn {
    p.dev[B].qp(p.qpn[B]).unwrap().resp.psn
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
    assert_eq!(p.dev[B].qp(p.qpn[B]).unwrap().state(), QpState::Err, "class C error: the responder QP fails too");
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
    p.dev[A].post_send(p.qpn[A], &wr).unwrap();
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
