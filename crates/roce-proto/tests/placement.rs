//! FLUSH (0x1c) and ATOMIC WRITE (0x1d), IBA 1.5's memory placement
//! extensions as rxe 6.2+ implements them for RC, on explicit virtual time:
//! the request packets, the zero-length RDMA READ response ONLY that answers
//! both, the access rules (the QP's flags, then the R_Key, then alignment
//! and length), FLUSH after a WRITE whose packet was lost, the selectivity
//! levels, duplicates answered from the responder's resources, and the
//! requester's `max_rd_atomic` and FENCE accounting.

mod common;

use std::time::Duration;

use common::{A, B, MEM, Pair, Pkt, Setup};
use roce_proto::testing::QpProbe;
use roce_proto::verbs::{AccessFlags, QpAttrMask, QpState, QpType, SendFlags, WcOpcode, WcStatus, WrOpcode};
use roce_proto::wr::{Flush, placement, selectivity};
use roce_proto::{Payload, QpAttr, SendWr};
use roce_wire::{
    AethRepr, BthRepr, ExtRepr, FethRepr, IcrcContext, IpContext, NakCode, Opcode, PacketRepr, Psn, RethRepr, Syndrome,
};

/// B's QP has no receive WQE posted: its ACKs carry 0 end-to-end credits.
const ACK: Syndrome = Syndrome::Ack { credits: 0 };
const FLUSH_QP: AccessFlags = AccessFlags(
    AccessFlags::REMOTE_WRITE.0
        | AccessFlags::REMOTE_READ.0
        | AccessFlags::REMOTE_ATOMIC.0
        | AccessFlags::FLUSH_GLOBAL.0
        | AccessFlags::FLUSH_PERSISTENT.0,
);

/// A pair whose B grants FLUSH_GLOBAL: on its QP (both placement types:
/// the QP check passes, the R_Key decides) and on its region (global only:
/// softroce never grants the persistence placement type).
fn flush_pair(s: Setup) -> Pair {
    let mut p = Pair::new(s);
    set_qp_access(&mut p, FLUSH_QP);
    let access = AccessFlags::LOCAL_WRITE
        | AccessFlags::REMOTE_WRITE
        | AccessFlags::REMOTE_READ
        | AccessFlags::REMOTE_ATOMIC
        | AccessFlags::FLUSH_GLOBAL;
    p.dev[B].rereg_mr(p.key[B], None, None, Some(access)).unwrap();
    p
}

/// B's QP's `qp_access_flags` (RTS -> RTS).
fn set_qp_access(p: &mut Pair, access: AccessFlags) {
    let a = QpAttr { qp_state: QpState::Rts, qp_access_flags: access, ..QpAttr::default() };
    p.dev[B].modify_qp(p.qpn[B].into(), &a, QpAttrMask(QpAttrMask::STATE.0 | QpAttrMask::ACCESS_FLAGS.0)).unwrap();
}

fn expected_psn(p: &Pair) -> Psn {
    p.dev[B].qp(p.qpn[B].into()).unwrap().expected_psn()
}

fn b_state(p: &Pair) -> QpState {
    p.dev[B].qp(p.qpn[B].into()).unwrap().state()
}

/// One of B's answers: opcode, PSN, AETH syndrome and MSN, payload length.
type Answer = (Opcode, Psn, Option<(Syndrome, u32)>, usize);

fn answers(pkts: &[Pkt]) -> Vec<Answer> {
    pkts.iter()
        .filter(|k| k.from == B)
        .map(|k| {
            let pk = k.packet();
            (pk.bth().opcode(), pk.bth().psn(), pk.aeth().map(|a| (a.syndrome(), a.msn())), pk.payload().len())
        })
        .collect()
}

/// Forges a request from A's QP to B's QP and delivers it; returns B's answers.
fn forge(p: &mut Pair, op: Opcode, psn: Psn, ext: ExtRepr, payload: &[u8]) -> Vec<Answer> {
    let repr = PacketRepr { bth: BthRepr { ack_req: true, ..BthRepr::new(op, p.qpn[B], psn) }, ext };
    let bytes = p.emit_from_a(&repr, payload);
    let src_port = p.dev[A].qp(p.qpn[A].into()).unwrap().src_port;
    p.dev[B].handle_datagram(p.now, p.addr[A], src_port, p.addr[B], None, &bytes);
    answers(&p.transmit())
}

fn flush_ext(plt: u8, sel: u8, reth: RethRepr) -> ExtRepr {
    ExtRepr {
        feth: Some(FethRepr { selectivity_level: sel, placement_type: plt }),
        reth: Some(reth),
        ..Default::default()
    }
}

fn reth_ext(reth: RethRepr) -> ExtRepr {
    ExtRepr { reth: Some(reth), ..Default::default() }
}

/// An 8-byte aligned offset into B's buffer, at least `at`.
fn aligned(p: &Pair, i: usize, at: usize) -> usize {
    (p.va(i, at).next_multiple_of(8) - p.va(i, 0)) as usize
}

fn post(p: &mut Pair, wr: &SendWr<'_>) {
    p.dev[A].post_send(p.qpn[A].into(), wr).unwrap();
}

fn rdma_flush(p: &Pair, wr_id: u64, off: usize, f: Flush) -> SendWr<'static> {
    SendWr::flush(wr_id, SendFlags::SIGNALED, p.key[B], p.va(B, off), f)
}

/// A FLUSH of `len` bytes to global visibility.
fn global_range(len: u32) -> Flush {
    Flush { placement: placement::GLOBAL, selectivity: selectivity::RANGE, len }
}

#[test]
fn flush_after_write_is_one_packet_answered_by_a_zero_length_read_response() {
    let mut p = flush_pair(Setup::default());
    let data = p.fill(A, 0, 3000, 5);
    p.send(A, 1, WrOpcode::RdmaWrite, 0, 3000, 100);
    let wr = rdma_flush(&p, 2, 100, global_range(3000));
    post(&mut p, &wr);
    let reqs = p.transmit();
    let ops: Vec<Opcode> = reqs.iter().map(Pkt::opcode).collect();
    assert_eq!(
        ops,
        [Opcode::RC_RDMA_WRITE_FIRST, Opcode::RC_RDMA_WRITE_MIDDLE, Opcode::RC_RDMA_WRITE_LAST, Opcode::RC_FLUSH]
    );
    let f = reqs[3].packet();
    let r = PacketRepr::parse(&f);
    assert_eq!(r.ext.feth, Some(FethRepr { selectivity_level: 0, placement_type: 1 }));
    assert_eq!(r.ext.reth, Some(RethRepr { va: p.va(B, 100), rkey: p.key[B], dma_len: 3000 }));
    assert!(f.payload().is_empty() && f.bth().ack_req(), "no payload, AckReq set");
    assert_eq!(f.bth().psn(), reqs[2].psn().next(), "the PSN after the WRITE's last");
    let first = reqs[0].psn();
    p.now += Duration::from_micros(5);
    for k in &reqs {
        p.deliver(k);
    }
    // One ACK for the WRITE (its LAST asked), then the FLUSH's answer: RDMA
    // READ response ONLY, no payload, the FLUSH's PSN, MSN 2 (two messages).
    assert_eq!(
        answers(&p.transmit()),
        [
            (Opcode::RC_ACKNOWLEDGE, first.add(2), Some((ACK, 1)), 0),
            (Opcode::RC_RDMA_READ_RESPONSE_ONLY, first.add(3), Some((ACK, 2)), 0),
        ]
    );
    assert_eq!(p.mem[B].get(100, 3000), data);
    p.run(|_| true);
    let wcs = p.completions(A);
    assert_eq!(
        wcs.iter().map(|w| (w.wr_id, w.status, w.opcode)).collect::<Vec<_>>(),
        [(1, WcStatus::Success, WcOpcode::RdmaWrite), (2, WcStatus::Success, WcOpcode::Flush)]
    );
    assert_eq!(wcs[1].byte_len, 3000, "the length asked for, as rxe reports it");
    assert_eq!(b_state(&p), QpState::Rts);
    assert_eq!(p.dev[A].qp(p.qpn[A].into()).unwrap().rd_atomic(), 0, "the FLUSH's credit came back");
}

#[test]
fn flush_waits_for_the_write_packet_lost_before_it() {
    // The WRITE's MIDDLE packet is lost: B NAKs the gap at the LAST and
    // drops the FLUSH behind it. The FLUSH is answered only after the
    // retransmitted WRITE landed: when B sends that answer, its memory holds
    // every byte of the WRITE.
    let mut p = flush_pair(Setup::default());
    let data = p.fill(A, 0, 3000, 9);
    p.send(A, 1, WrOpcode::RdmaWrite, 0, 3000, 0);
    let wr = rdma_flush(&p, 2, 0, global_range(3000));
    post(&mut p, &wr);
    let mut dropped = false;
    let mut flush_answered_at = None;
    for _ in 0..1000 {
        let pkts = p.transmit();
        if pkts.is_empty() {
            if !p.advance() {
                break;
            }
            continue;
        }
        for k in &pkts {
            if !dropped && k.opcode() == Opcode::RC_RDMA_WRITE_MIDDLE {
                dropped = true;
                continue;
            }
            if k.from == B && k.opcode() == Opcode::RC_RDMA_READ_RESPONSE_ONLY {
                assert_eq!(p.mem[B].get(0, 3000), data, "the FLUSH answered before the WRITE's data landed");
                flush_answered_at.get_or_insert(p.elapsed());
            }
            p.deliver(k);
        }
        p.now += Duration::from_micros(10);
    }
    assert!(dropped && flush_answered_at.is_some());
    let c = p.dev[B].counters();
    assert_eq!(c.out_of_seq_request, 2, "the WRITE's LAST and the FLUSH came past the gap");
    let wcs = p.completions(A);
    assert_eq!(
        wcs.iter().map(|w| (w.wr_id, w.status, w.opcode)).collect::<Vec<_>>(),
        [(1, WcStatus::Success, WcOpcode::RdmaWrite), (2, WcStatus::Success, WcOpcode::Flush)]
    );
}

#[test]
fn flush_of_the_whole_region_ignores_address_and_length() {
    let mut p = flush_pair(Setup::default());
    let psn = expected_psn(&p);
    // Selectivity "memory region": the R_Key alone decides.
    let far = RethRepr { va: p.va(B, 0) + (MEM as u64) * 4, rkey: p.key[B], dma_len: u32::MAX };
    let got = forge(&mut p, Opcode::RC_FLUSH, psn, flush_ext(placement::GLOBAL, selectivity::REGION, far), &[]);
    assert_eq!(got, [(Opcode::RC_RDMA_READ_RESPONSE_ONLY, psn, Some((ACK, 1)), 0)]);
    assert_eq!(b_state(&p), QpState::Rts);
    // The same range with selectivity "range" lies outside the region.
    let got = forge(&mut p, Opcode::RC_FLUSH, psn.next(), flush_ext(placement::GLOBAL, selectivity::RANGE, far), &[]);
    assert_eq!(got, [(Opcode::RC_ACKNOWLEDGE, psn.next(), Some((Syndrome::Nak(NakCode::RemoteAccessError), 1)), 0)]);
    assert_eq!(b_state(&p), QpState::Err);
}

#[test]
fn flush_access_follows_the_placement_type() {
    let range = |p: &Pair| RethRepr { va: p.va(B, 64), rkey: p.key[B], dma_len: 64 };
    let nak = |psn, code| vec![(Opcode::RC_ACKNOWLEDGE, psn, Some((Syndrome::Nak(code), 0)), 0)];
    // The region grants FLUSH_GLOBAL only: a persistent flush (alone or with
    // global) is refused by the R_Key, NAK remote access error.
    for plt in [placement::PERSISTENT, placement::GLOBAL | placement::PERSISTENT] {
        let mut p = flush_pair(Setup::default());
        let psn = expected_psn(&p);
        let r = range(&p);
        let got = forge(&mut p, Opcode::RC_FLUSH, psn, flush_ext(plt, selectivity::RANGE, r), &[]);
        assert_eq!(got, nak(psn, NakCode::RemoteAccessError), "placement {plt}");
        assert_eq!(b_state(&p), QpState::Err);
    }
    // A region without FLUSH_GLOBAL: remote access error, for either level.
    for sel in [selectivity::RANGE, selectivity::REGION] {
        let mut p = Pair::new(Setup::default());
        set_qp_access(&mut p, FLUSH_QP);
        let psn = expected_psn(&p);
        let r = range(&p);
        let got = forge(&mut p, Opcode::RC_FLUSH, psn, flush_ext(placement::GLOBAL, sel, r), &[]);
        assert_eq!(got, nak(psn, NakCode::RemoteAccessError), "selectivity {sel}");
    }
    // A bad R_Key: remote access error.
    let mut p = flush_pair(Setup::default());
    let psn = expected_psn(&p);
    let r = RethRepr { rkey: p.key[B] ^ 0x55, ..range(&p) };
    let got = forge(&mut p, Opcode::RC_FLUSH, psn, flush_ext(placement::GLOBAL, selectivity::REGION, r), &[]);
    assert_eq!(got, nak(psn, NakCode::RemoteAccessError));
    // The QP's own flags come first (rxe check_qp_attr_access): a QP
    // without FLUSH_GLOBAL answers an invalid request, whatever the region.
    let mut p = flush_pair(Setup::default());
    set_qp_access(&mut p, AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_READ);
    let psn = expected_psn(&p);
    let r = range(&p);
    let got = forge(&mut p, Opcode::RC_FLUSH, psn, flush_ext(placement::GLOBAL, selectivity::RANGE, r), &[]);
    assert_eq!(got, nak(psn, NakCode::InvalidRequest));
    // Reserved values: no placement type, a reserved PLT bit, selectivity 2.
    for (plt, sel) in [(0, 0), (4, 0), (placement::GLOBAL | 8, 0), (placement::GLOBAL, 2)] {
        let mut p = flush_pair(Setup::default());
        let psn = expected_psn(&p);
        let r = range(&p);
        let got = forge(&mut p, Opcode::RC_FLUSH, psn, flush_ext(plt, sel, r), &[]);
        assert_eq!(got, nak(psn, NakCode::InvalidRequest), "PLT {plt}, SEL {sel}");
        assert_eq!(b_state(&p), QpState::Err);
    }
    // A responder without resources (max_dest_rd_atomic 0) cannot answer.
    let mut p = flush_pair(Setup { max_dest_rd_atomic: 0, max_rd_atomic: 0, ..Setup::default() });
    let psn = expected_psn(&p);
    let r = range(&p);
    let got = forge(&mut p, Opcode::RC_FLUSH, psn, flush_ext(placement::GLOBAL, selectivity::RANGE, r), &[]);
    assert_eq!(got, nak(psn, NakCode::InvalidRequest));
}

#[test]
fn a_refused_flush_fails_its_wr_with_remote_access_error() {
    // Through the requester: the region lacks FLUSH_GLOBAL.
    let mut p = Pair::new(Setup::default());
    set_qp_access(&mut p, FLUSH_QP);
    let wr = rdma_flush(&p, 7, 0, global_range(64));
    post(&mut p, &wr);
    p.run(|_| true);
    let wcs = p.completions(A);
    assert_eq!(wcs.iter().map(|w| (w.wr_id, w.status)).collect::<Vec<_>>(), [(7, WcStatus::RemAccessErr)]);
    assert_eq!(p.dev[A].qp(p.qpn[A].into()).unwrap().state(), QpState::Err);
    assert_eq!(b_state(&p), QpState::Err);
}

#[test]
fn atomic_write_stores_its_8_bytes_and_is_answered_like_a_flush() {
    let mut p = Pair::new(Setup::default());
    // REMOTE_WRITE is what it needs: a region without REMOTE_ATOMIC takes it
    // (as rdma-core's test_qp_ex_rc_atomic_write registers its target).
    let w = AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE;
    p.dev[B].rereg_mr(p.key[B], None, None, Some(w)).unwrap();
    let off = aligned(&p, B, 200);
    p.mem[B].set(off - 8, &[0xee; 24]);
    let value = 0x0102_0304_0506_0708u64.to_ne_bytes();
    let wr = SendWr::atomic_write(3, SendFlags::SIGNALED, p.key[B], p.va(B, off), &value);
    post(&mut p, &wr);
    let reqs = p.transmit();
    assert_eq!(reqs.len(), 1);
    let k = reqs[0].packet();
    assert_eq!(k.bth().opcode(), Opcode::RC_ATOMIC_WRITE);
    assert_eq!(PacketRepr::parse(&k).ext.reth, Some(RethRepr { va: p.va(B, off), rkey: p.key[B], dma_len: 8 }));
    assert_eq!((k.payload(), k.bth().ack_req(), k.bth().pad_count()), (&value[..], true, 0));
    p.deliver(&reqs[0]);
    assert_eq!(p.mem[B].get(off, 8), value);
    assert_eq!((p.mem[B].get(off - 8, 8), p.mem[B].get(off + 8, 8)), (vec![0xee; 8], vec![0xee; 8]), "8 bytes only");
    let got = answers(&p.transmit());
    assert_eq!(got, [(Opcode::RC_RDMA_READ_RESPONSE_ONLY, reqs[0].psn(), Some((ACK, 1)), 0)]);
    p.run(|_| true);
    let wcs = p.completions(A);
    assert_eq!(
        wcs.iter().map(|w| (w.wr_id, w.status, w.opcode, w.byte_len)).collect::<Vec<_>>(),
        [(3, WcStatus::Success, WcOpcode::AtomicWrite, 8)]
    );
}

/// A RETH built for the pair and an aligned offset.
type RethAt = fn(&Pair, usize) -> RethRepr;

#[test]
fn atomic_write_checks_the_r_key_first_then_length_and_alignment() {
    let nak = |psn, code| vec![(Opcode::RC_ACKNOWLEDGE, psn, Some((Syndrome::Nak(code), 0)), 0)];
    let v = [0x5a; 8];
    let cases: [(&str, RethAt, NakCode); 6] = [
        ("bad key", |p, o| RethRepr { va: p.va(B, o), rkey: p.key[B] ^ 1, dma_len: 8 }, NakCode::RemoteAccessError),
        (
            "past the end",
            |p, _| RethRepr { va: p.va(B, MEM - 4), rkey: p.key[B], dma_len: 8 },
            NakCode::RemoteAccessError,
        ),
        (
            "misaligned with a bad key: the key first",
            |p, o| RethRepr { va: p.va(B, o + 4), rkey: p.key[B] ^ 1, dma_len: 8 },
            NakCode::RemoteAccessError,
        ),
        ("misaligned", |p, o| RethRepr { va: p.va(B, o + 4), rkey: p.key[B], dma_len: 8 }, NakCode::InvalidRequest),
        ("DMA length 4", |p, o| RethRepr { va: p.va(B, o), rkey: p.key[B], dma_len: 4 }, NakCode::InvalidRequest),
        ("DMA length 16", |p, o| RethRepr { va: p.va(B, o), rkey: p.key[B], dma_len: 16 }, NakCode::InvalidRequest),
    ];
    for (what, reth, code) in cases {
        let mut p = Pair::new(Setup::default());
        let off = aligned(&p, B, 64);
        let psn = expected_psn(&p);
        let r = reth(&p, off);
        assert_eq!(forge(&mut p, Opcode::RC_ATOMIC_WRITE, psn, reth_ext(r), &v), nak(psn, code), "{what}");
        assert_eq!(p.mem[B].get(off, 16), vec![0; 16], "{what}: nothing written");
        assert_eq!(b_state(&p), QpState::Err, "{what}");
    }
    // A region that refuses remote writes, and a QP that does.
    let mut p = Pair::new(Setup::default());
    let ro = AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_READ | AccessFlags::REMOTE_ATOMIC;
    p.dev[B].rereg_mr(p.key[B], None, None, Some(ro)).unwrap();
    let (off, psn) = (aligned(&p, B, 64), expected_psn(&p));
    let r = RethRepr { va: p.va(B, off), rkey: p.key[B], dma_len: 8 };
    assert_eq!(forge(&mut p, Opcode::RC_ATOMIC_WRITE, psn, reth_ext(r), &v), nak(psn, NakCode::RemoteAccessError));
    let mut p = Pair::new(Setup::default());
    set_qp_access(&mut p, AccessFlags::REMOTE_READ | AccessFlags::REMOTE_ATOMIC);
    let (off, psn) = (aligned(&p, B, 64), expected_psn(&p));
    let r = RethRepr { va: p.va(B, off), rkey: p.key[B], dma_len: 8 };
    assert_eq!(forge(&mut p, Opcode::RC_ATOMIC_WRITE, psn, reth_ext(r), &v), nak(psn, NakCode::InvalidRequest));
    assert_eq!(p.mem[B].get(off, 8), vec![0; 8]);
}

#[test]
fn a_misaligned_atomic_write_fails_its_wr_with_remote_invalid_request() {
    let mut p = Pair::new(Setup::default());
    let off = aligned(&p, B, 64) + 4;
    let wr = SendWr::atomic_write(4, SendFlags::SIGNALED, p.key[B], p.va(B, off), &[1; 8]);
    post(&mut p, &wr);
    p.run(|_| true);
    let wcs = p.completions(A);
    assert_eq!(wcs.iter().map(|w| (w.wr_id, w.status)).collect::<Vec<_>>(), [(4, WcStatus::RemInvReqErr)]);
    assert_eq!(p.mem[B].get(off - 4, 16), vec![0; 16]);
}

#[test]
fn a_duplicate_atomic_write_is_answered_from_its_resource_not_stored_again() {
    // ATOMIC WRITE X, then a WRITE of Y over the same bytes, then the ATOMIC
    // WRITE again (a duplicate, as after a lost response): B answers it
    // with the same zero-length READ response and leaves Y in place.
    let mut p = Pair::new(Setup::default());
    let off = aligned(&p, B, 64);
    let psn = expected_psn(&p);
    let aw = reth_ext(RethRepr { va: p.va(B, off), rkey: p.key[B], dma_len: 8 });
    let x = [0x11; 8];
    assert_eq!(
        forge(&mut p, Opcode::RC_ATOMIC_WRITE, psn, aw, &x),
        [(Opcode::RC_RDMA_READ_RESPONSE_ONLY, psn, Some((ACK, 1)), 0)]
    );
    let wr = reth_ext(RethRepr { va: p.va(B, off), rkey: p.key[B], dma_len: 8 });
    let y = [0x22; 8];
    forge(&mut p, Opcode::RC_RDMA_WRITE_ONLY, psn.next(), wr, &y);
    assert_eq!(p.mem[B].get(off, 8), y);
    p.now += Duration::from_millis(1);
    let got = forge(&mut p, Opcode::RC_ATOMIC_WRITE, psn, aw, &x);
    assert_eq!(got, [(Opcode::RC_RDMA_READ_RESPONSE_ONLY, psn, Some((ACK, 2)), 0)], "the current MSN, as rxe");
    assert_eq!(p.mem[B].get(off, 8), y, "the duplicate did not store again");
    assert_eq!(p.dev[B].counters().duplicate_request, 1);
    assert_eq!((b_state(&p), expected_psn(&p)), (QpState::Rts, psn.add(2)));
}

#[test]
fn a_lost_flush_response_is_answered_again_and_completes_once() {
    let mut p = flush_pair(Setup::default());
    let wr = rdma_flush(&p, 5, 0, global_range(128));
    post(&mut p, &wr);
    let mut lost = 0;
    p.run(|k| {
        let first_answer = k.from == B && k.opcode() == Opcode::RC_RDMA_READ_RESPONSE_ONLY && lost == 0;
        lost += usize::from(first_answer);
        !first_answer
    });
    assert_eq!(lost, 1);
    let flushes = p.log.iter().filter(|k| k.from == A && k.opcode() == Opcode::RC_FLUSH).count();
    assert_eq!(flushes, 2, "sent again after the answer was lost");
    assert_eq!(p.dev[B].counters().duplicate_request, 1);
    let wcs = p.completions(A);
    assert_eq!(
        wcs.iter().map(|w| (w.wr_id, w.status, w.opcode)).collect::<Vec<_>>(),
        [(5, WcStatus::Success, WcOpcode::Flush)]
    );
    assert_eq!(expected_psn(&p), p.log[0].psn().next(), "executed once");
}

#[test]
fn a_repeated_flush_whose_resource_was_recycled_runs_again() {
    // B keeps one resource (max_dest_rd_atomic 1). A FLUSH, then an ATOMIC
    // WRITE that takes the resource over, then the FLUSH again: softroce
    // runs it again (a fence twice is harmless) and answers; rxe drops it.
    let mut p = flush_pair(Setup { max_dest_rd_atomic: 1, ..Setup::default() });
    let psn = expected_psn(&p);
    let f = flush_ext(placement::GLOBAL, selectivity::RANGE, RethRepr { va: p.va(B, 0), rkey: p.key[B], dma_len: 8 });
    assert_eq!(forge(&mut p, Opcode::RC_FLUSH, psn, f, &[]).len(), 1);
    let off = aligned(&p, B, 64);
    let aw = reth_ext(RethRepr { va: p.va(B, off), rkey: p.key[B], dma_len: 8 });
    assert_eq!(forge(&mut p, Opcode::RC_ATOMIC_WRITE, psn.next(), aw, &[3; 8]).len(), 1);
    assert_eq!(p.dev[B].qp(p.qpn[B].into()).unwrap().resources_held(), 1);
    let got = forge(&mut p, Opcode::RC_FLUSH, psn, f, &[]);
    assert_eq!(got, [(Opcode::RC_RDMA_READ_RESPONSE_ONLY, psn, Some((ACK, 2)), 0)]);
    // Its checks run again too: a repeated FLUSH of a range outside the
    // region is dropped, as any refused duplicate.
    let bad =
        flush_ext(placement::GLOBAL, selectivity::RANGE, RethRepr { va: p.va(B, MEM), rkey: p.key[B], dma_len: 8 });
    assert!(forge(&mut p, Opcode::RC_FLUSH, psn, bad, &[]).is_empty());
    assert_eq!(b_state(&p), QpState::Rts);
    // A repeated ATOMIC WRITE whose resource is gone is dropped, not stored.
    forge(&mut p, Opcode::RC_FLUSH, psn.add(2), f, &[]);
    p.mem[B].set(off, &[9; 8]);
    assert!(forge(&mut p, Opcode::RC_ATOMIC_WRITE, psn.next(), aw, &[3; 8]).is_empty());
    assert_eq!(p.mem[B].get(off, 8), vec![9; 8]);
}

#[test]
fn flush_and_atomic_write_count_against_max_rd_atomic_and_fence() {
    // max_rd_atomic 1: the ATOMIC WRITE goes, the FLUSH waits for its
    // credit, and the FENCE'd SEND for both to complete.
    let mut p = flush_pair(Setup { max_rd_atomic: 1, ..Setup::default() });
    p.recv(B, 1, 0, 64);
    let off = aligned(&p, B, 1024);
    let wr = SendWr::atomic_write(1, SendFlags::SIGNALED, p.key[B], p.va(B, off), &[7; 8]);
    post(&mut p, &wr);
    let wr = rdma_flush(&p, 2, off, global_range(8));
    post(&mut p, &wr);
    let sge = [p.sge(A, 0, 16)];
    post(&mut p, &SendWr::new(3, WrOpcode::Send, SendFlags::SIGNALED | SendFlags::FENCE, Payload::Sges(&sge)));
    // Exchanges packets until A sends something; returns what A sent.
    let step = |p: &mut Pair| -> Vec<Opcode> {
        for _ in 0..10 {
            let pkts = p.transmit();
            let ops: Vec<Opcode> = pkts.iter().filter(|k| k.from == A).map(Pkt::opcode).collect();
            p.now += Duration::from_micros(10);
            for k in &pkts {
                p.deliver(k);
            }
            if !ops.is_empty() {
                return ops;
            }
        }
        Vec::new()
    };
    assert_eq!(step(&mut p), [Opcode::RC_ATOMIC_WRITE]);
    assert_eq!(p.dev[A].qp(p.qpn[A].into()).unwrap().rd_atomic(), 1);
    assert_eq!(step(&mut p), [Opcode::RC_FLUSH], "after the ATOMIC WRITE's response");
    assert_eq!(step(&mut p), [Opcode::RC_SEND_ONLY], "the FENCE waited for the FLUSH");
    p.run(|_| true);
    let wcs = p.completions(A);
    assert_eq!(
        wcs.iter().filter(|w| w.qp_num.get() == p.qpn[A]).map(|w| (w.wr_id, w.status, w.opcode)).collect::<Vec<_>>(),
        [
            (1, WcStatus::Success, WcOpcode::AtomicWrite),
            (2, WcStatus::Success, WcOpcode::Flush),
            (3, WcStatus::Success, WcOpcode::Send)
        ]
    );
}

#[test]
fn a_later_ack_completes_a_flush_whose_answer_was_lost() {
    // FLUSH then WRITE; the FLUSH's answer is lost, the WRITE's ACK comes:
    // it acknowledges the FLUSH too (the responder executes in PSN order and
    // FLUSH returns no data), as rxe's completer takes it. No retransmission.
    let mut p = flush_pair(Setup::default());
    let wr = rdma_flush(&p, 1, 0, global_range(8));
    post(&mut p, &wr);
    p.send(A, 2, WrOpcode::RdmaWrite, 0, 8, 64);
    p.run(|k| !(k.from == B && k.opcode() == Opcode::RC_RDMA_READ_RESPONSE_ONLY));
    let wcs = p.completions(A);
    assert_eq!(
        wcs.iter().map(|w| (w.wr_id, w.status, w.opcode)).collect::<Vec<_>>(),
        [(1, WcStatus::Success, WcOpcode::Flush), (2, WcStatus::Success, WcOpcode::RdmaWrite)]
    );
    assert_eq!(p.log.iter().filter(|k| k.from == A).count(), 2, "nothing sent again");
}

#[test]
fn a_flush_answered_with_data_is_a_bad_response() {
    let mut p = flush_pair(Setup::default());
    let wr = rdma_flush(&p, 1, 0, global_range(8));
    post(&mut p, &wr);
    let req = p.transmit();
    assert_eq!(req.len(), 1);
    // B's answer, forged with 8 bytes of payload.
    let repr = PacketRepr {
        bth: BthRepr::new(Opcode::RC_RDMA_READ_RESPONSE_ONLY, p.qpn[A], req[0].psn()),
        ext: ExtRepr { aeth: Some(AethRepr { syndrome: ACK, msn: 1 }), ..Default::default() },
    };
    let (std::net::IpAddr::V4(s), std::net::IpAddr::V4(d)) = (p.addr[B], p.addr[A]) else { unreachable!() };
    let src_port = p.dev[B].qp(p.qpn[B].into()).unwrap().src_port;
    let ctx = IcrcContext { ip: IpContext::v4_socket(s, d), src_port, dst_port: 4791 };
    let mut bytes = vec![0u8; repr.packet_len(8).unwrap()];
    repr.emit(&mut bytes, &[1; 8], &ctx).unwrap();
    p.deliver(&Pkt { from: B, src_port, bytes, at: p.elapsed() });
    let wcs = p.completions(A);
    assert_eq!(wcs.iter().map(|w| (w.wr_id, w.status)).collect::<Vec<_>>(), [(1, WcStatus::BadRespErr)]);
}

#[test]
fn posting_rules() {
    let mut p = flush_pair(Setup::default());
    let q = p.qpn[A];
    let key = p.key[B];
    let at = p.va(B, 0);
    let bad_flushes = [
        Flush { placement: 0, selectivity: selectivity::RANGE, len: 8 },
        Flush { placement: 4, selectivity: selectivity::RANGE, len: 8 },
        Flush { placement: placement::GLOBAL, selectivity: 2, len: 8 },
    ];
    for f in bad_flushes {
        assert!(p.dev[A].post_send(q.into(), &SendWr::flush(1, SendFlags::SIGNALED, key, at, f)).is_err(), "{f:?}");
    }
    // FLUSH carries no payload, ATOMIC WRITE exactly 8 inline bytes.
    let sge = [p.sge(A, 0, 8)];
    let mut wr = SendWr::flush(1, SendFlags::SIGNALED, key, at, global_range(8));
    wr.payload = Payload::Sges(&sge);
    assert!(p.dev[A].post_send(q.into(), &wr).is_err());
    let mut wr = SendWr::new(1, WrOpcode::Flush, SendFlags::SIGNALED, Payload::Sges(&[]));
    wr.rkey = key;
    assert!(p.dev[A].post_send(q.into(), &wr).is_err(), "a FLUSH without its operands");
    let mut wr = SendWr::atomic_write(1, SendFlags::SIGNALED, key, at, &[0; 8]);
    wr.payload = Payload::Sges(&sge);
    assert!(p.dev[A].post_send(q.into(), &wr).is_err());
    let short = [0u8; 4];
    wr.payload = Payload::Inline(&short);
    assert!(p.dev[A].post_send(q.into(), &wr).is_err());
    // Eight inline bytes go whatever max_inline_data (none here would do).
    assert!(p.dev[A].post_send(q.into(), &SendWr::atomic_write(1, SendFlags::EMPTY, key, at, &[0; 8])).is_ok());
    // RC only (rxe's RXE_SUP_UC_QP_SEND_OPS_FLAGS have neither).
    for ty in [QpType::Uc, QpType::Ud] {
        let mut u = Pair::new(Setup { qp_type: ty, ..Setup::default() });
        let (q, key, at) = (u.qpn[A], u.key[B], u.va(B, 0));
        assert!(u.dev[A].post_send(q.into(), &SendWr::flush(1, SendFlags::EMPTY, key, at, global_range(8))).is_err());
        assert!(u.dev[A].post_send(q.into(), &SendWr::atomic_write(1, SendFlags::EMPTY, key, at, &[0; 8])).is_err());
        u.run(|_| true);
    }
}
