//! Memory windows, LOCAL_INV and SEND_WITH_INV: what a window grants, when
//! its key dies, and the completion each step produces (IBTA 10.6.7,
//! rxe `rxe_mw.c`).

mod common;

use common::{A, B, Pair, Setup};
use roce_proto::VerbError;
use roce_proto::mr::{MrError, MwBindInfo, MwType};
use roce_proto::verbs::{AccessFlags, QpState, SendFlags, WcOpcode, WcStatus, WrOpcode};
use roce_proto::wr::{MwBind, Payload, SendWr, WcFlags};

const RW: AccessFlags = AccessFlags(AccessFlags::REMOTE_READ.0 | AccessFlags::REMOTE_WRITE.0);

/// Allocates a type 2 window on B and binds it over `len` bytes at `off` of
/// B's region through B's QP; returns the window's new key.
fn bind_type2(p: &mut Pair, off: usize, len: u64, access: AccessFlags) -> u32 {
    let mw = p.dev[B].alloc_mw(p.pd[B], MwType::Type2).unwrap();
    let new_key = (mw & !0xff) | (mw.wrapping_add(1) & 0xff);
    post_bind(p, 77, mw, new_key, MwBindInfo { mr_key: p.key[B], addr: p.va(B, off), length: len, access });
    p.run(|_| true);
    let wcs = p.completions(B);
    assert_eq!(wcs.len(), 1);
    assert_eq!((wcs[0].wr_id, wcs[0].status, wcs[0].opcode), (77, WcStatus::Success, WcOpcode::BindMw));
    new_key
}

fn post_bind(p: &mut Pair, wr_id: u64, mw_key: u32, new_key: u32, info: MwBindInfo) {
    let mut wr = SendWr::new(wr_id, WrOpcode::BindMw, SendFlags::SIGNALED, Payload::Sges(&[]));
    wr.bind = Some(MwBind { mw_key, new_key, info });
    p.dev[B].post_send(p.qpn[B].into(), &wr).unwrap();
}

/// A posts a signaled `op` of `len` bytes from its offset 0 to B's `va` under `rkey`.
fn post_remote(p: &mut Pair, wr_id: u64, op: WrOpcode, len: u32, va: u64, rkey: u32) {
    let sge = [p.sge(A, 0, len)];
    let mut wr = SendWr::new(wr_id, op, SendFlags::SIGNALED, Payload::Sges(&sge));
    wr.remote_addr = va;
    wr.rkey = rkey;
    p.dev[A].post_send(p.qpn[A].into(), &wr).unwrap();
}

fn statuses(p: &mut Pair, i: usize) -> Vec<(u64, WcStatus, WcOpcode)> {
    p.completions(i).iter().map(|w| (w.wr_id, w.status, w.opcode)).collect()
}

#[test]
fn a_type2_window_grants_exactly_its_range() {
    let mut p = Pair::new(Setup::default());
    let key = bind_type2(&mut p, 0x1000, 256, RW);
    let data = p.fill(A, 0, 256, 9);
    let va = p.va(B, 0x1000);

    post_remote(&mut p, 1, WrOpcode::RdmaWrite, 256, va, key);
    p.run(|_| true);
    assert_eq!(statuses(&mut p, A), [(1, WcStatus::Success, WcOpcode::RdmaWrite)]);
    assert_eq!(p.mem[B].get(0x1000, 256), data);
    // READ back the last 16 bytes through the window.
    p.fill(A, 0, 16, 0);
    let va = p.va(B, 0x1000 + 240);

    post_remote(&mut p, 2, WrOpcode::RdmaRead, 16, va, key);
    p.run(|_| true);
    assert_eq!(statuses(&mut p, A), [(2, WcStatus::Success, WcOpcode::RdmaRead)]);
    assert_eq!(p.mem[A].get(0, 16), data[240..]);
    // One byte past the window (still inside the region) is refused.
    let before = p.mem[B].get(0x1000, 257);
    let va = p.va(B, 0x1000 + 255);

    post_remote(&mut p, 3, WrOpcode::RdmaWrite, 2, va, key);
    p.run(|_| true);
    assert_eq!(statuses(&mut p, A), [(3, WcStatus::RemAccessErr, WcOpcode::RdmaWrite)]);
    assert_eq!(p.mem[B].get(0x1000, 257), before);
}

#[test]
fn a_window_grants_only_its_access_and_the_old_key_misses() {
    let mut p = Pair::new(Setup::default());
    let key = bind_type2(&mut p, 0, 4096, AccessFlags::REMOTE_READ);
    let va = p.va(B, 0);

    post_remote(&mut p, 1, WrOpcode::RdmaWrite, 8, va, key);
    p.run(|_| true);
    assert_eq!(statuses(&mut p, A), [(1, WcStatus::RemAccessErr, WcOpcode::RdmaWrite)]);

    let mut p = Pair::new(Setup::default());
    let key = bind_type2(&mut p, 0, 4096, RW);
    let stale = (key & !0xff) | (key.wrapping_sub(1) & 0xff);
    let va = p.va(B, 0);

    post_remote(&mut p, 1, WrOpcode::RdmaRead, 8, va, stale);
    p.run(|_| true);
    assert_eq!(statuses(&mut p, A), [(1, WcStatus::RemAccessErr, WcOpcode::RdmaRead)]);
}

#[test]
fn send_with_invalidate_kills_the_window_key() {
    let mut p = Pair::new(Setup::default());
    let key = bind_type2(&mut p, 0x2000, 64, RW);
    p.recv(B, 10, 0, 64);
    let sge = [p.sge(A, 0, 32)];
    let mut wr = SendWr::new(1, WrOpcode::SendWithInv, SendFlags::SIGNALED, Payload::Sges(&sge));
    wr.invalidate_rkey = key;
    p.dev[A].post_send(p.qpn[A].into(), &wr).unwrap();
    p.run(|_| true);
    assert_eq!(statuses(&mut p, A), [(1, WcStatus::Success, WcOpcode::Send)]);
    let wcs = p.completions(B);
    assert_eq!(wcs.len(), 1);
    assert_eq!(
        (wcs[0].wr_id, wcs[0].status, wcs[0].opcode, wcs[0].byte_len),
        (10, WcStatus::Success, WcOpcode::Recv, 32)
    );
    assert!(wcs[0].wc_flags.contains(WcFlags::WITH_INV));
    assert!(!wcs[0].wc_flags.contains(WcFlags::WITH_IMM));
    assert_eq!(wcs[0].imm_data, key, "invalidated_rkey");
    assert_eq!(p.log.iter().filter(|k| k.opcode() == roce_wire::Opcode::RC_SEND_ONLY_WITH_INVALIDATE).count(), 1);
    // The key is dead: a WRITE through it fails and leaves memory alone.
    let va = p.va(B, 0x2000);

    post_remote(&mut p, 2, WrOpcode::RdmaWrite, 8, va, key);
    p.run(|_| true);
    assert_eq!(statuses(&mut p, A), [(2, WcStatus::RemAccessErr, WcOpcode::RdmaWrite)]);
    assert_eq!(p.mem[B].get(0x2000, 8), vec![0; 8]);
}

#[test]
fn a_multi_packet_send_with_invalidate_ends_with_send_last_with_invalidate() {
    let mut p = Pair::new(Setup::default());
    let key = bind_type2(&mut p, 0, 64, RW);
    p.recv(B, 10, 0, 4096);
    let data = p.fill(A, 0, 2500, 3);
    let sge = [p.sge(A, 0, 2500)];
    let mut wr = SendWr::new(1, WrOpcode::SendWithInv, SendFlags::SIGNALED, Payload::Sges(&sge));
    wr.invalidate_rkey = key;
    p.dev[A].post_send(p.qpn[A].into(), &wr).unwrap();
    p.run(|_| true);
    let ops: Vec<_> = p.log.iter().filter(|k| k.from == A).map(|k| k.opcode()).collect();
    use roce_wire::Opcode as O;
    assert_eq!(ops, [O::RC_SEND_FIRST, O::RC_SEND_MIDDLE, O::RC_SEND_LAST_WITH_INVALIDATE]);
    let wcs = p.completions(B);
    assert_eq!((wcs[0].status, wcs[0].byte_len, wcs[0].imm_data), (WcStatus::Success, 2500, key));
    assert_eq!(p.mem[B].get(0, 2500), data);
    assert!(p.dev[B].mr_table().mw(key).is_none_or(|m| m.bound.is_none()));
}

#[test]
fn send_with_invalidate_of_a_key_that_cannot_be_invalidated_is_an_invalid_request() {
    // A region's key (rxe only invalidates fast-reg regions, which user
    // space cannot create): the receive and the send both fail.
    let mut p = Pair::new(Setup::default());
    p.recv(B, 10, 0, 64);
    let sge = [p.sge(A, 0, 16)];
    let mut wr = SendWr::new(1, WrOpcode::SendWithInv, SendFlags::SIGNALED, Payload::Sges(&sge));
    wr.invalidate_rkey = p.key[B];
    p.dev[A].post_send(p.qpn[A].into(), &wr).unwrap();
    p.run(|_| true);
    assert_eq!(statuses(&mut p, A), [(1, WcStatus::RemInvReqErr, WcOpcode::Send)]);
    assert_eq!(statuses(&mut p, B), [(10, WcStatus::RemInvReqErr, WcOpcode::Recv)]);
    assert_eq!(p.dev[B].qp(p.qpn[B].into()).unwrap().state(), QpState::Err);
    // The region still works for local use: its key was not invalidated.
    assert!(p.dev[B].dereg_mr(p.key[B]).is_ok());
}

#[test]
fn local_invalidate_completes_in_order_after_the_writes_before_it() {
    let mut p = Pair::new(Setup { timeout: 10, ..Setup::default() });
    // B binds a window, then posts an (unsignaled) WRITE to A and a signaled
    // LOCAL_INV of the window: the LOCAL_INV runs at once but completes only
    // after the WRITE is acknowledged.
    let key = bind_type2(&mut p, 0, 64, RW);
    let sge = [p.sge(B, 0, 8)];
    let mut w = SendWr::new(5, WrOpcode::RdmaWrite, SendFlags::SIGNALED, Payload::Sges(&sge));
    w.remote_addr = p.va(A, 0);
    w.rkey = p.key[A];
    p.dev[B].post_send(p.qpn[B].into(), &w).unwrap();
    let mut inv = SendWr::new(6, WrOpcode::LocalInv, SendFlags::SIGNALED, Payload::Sges(&[]));
    inv.invalidate_rkey = key;
    p.dev[B].post_send(p.qpn[B].into(), &inv).unwrap();
    let first = p.transmit();
    assert_eq!(first.len(), 1, "the WRITE; LOCAL_INV sends nothing");
    assert!(p.completions(B).is_empty(), "the LOCAL_INV waits for the WRITE's ACK");
    assert!(p.dev[B].mr_table().mw(key).is_some_and(|m| m.bound.is_none()), "but ran already, as in rxe");
    p.deliver(&first[0]);
    p.run(|_| true);
    assert_eq!(
        statuses(&mut p, B),
        [(5, WcStatus::Success, WcOpcode::RdmaWrite), (6, WcStatus::Success, WcOpcode::LocalInv)]
    );
    // A second LOCAL_INV of the now free window fails the QP.
    let mut inv = SendWr::new(7, WrOpcode::LocalInv, SendFlags::EMPTY, Payload::Sges(&[]));
    inv.invalidate_rkey = key;
    p.dev[B].post_send(p.qpn[B].into(), &inv).unwrap();
    p.run(|_| true);
    assert_eq!(statuses(&mut p, B), [(7, WcStatus::LocQpOpErr, WcOpcode::LocalInv)]);
    assert_eq!(p.dev[B].qp(p.qpn[B].into()).unwrap().state(), QpState::Err);
}

#[test]
fn local_invalidate_survives_a_retransmission_of_the_write_before_it() {
    let mut p = Pair::new(Setup { timeout: 10, ..Setup::default() });
    let key = bind_type2(&mut p, 0, 64, RW);
    let sge = [p.sge(B, 0, 8)];
    let mut w = SendWr::new(5, WrOpcode::RdmaWrite, SendFlags::SIGNALED, Payload::Sges(&sge));
    w.remote_addr = p.va(A, 0);
    w.rkey = p.key[A];
    p.dev[B].post_send(p.qpn[B].into(), &w).unwrap();
    let mut inv = SendWr::new(6, WrOpcode::LocalInv, SendFlags::SIGNALED, Payload::Sges(&[]));
    inv.invalidate_rkey = key;
    p.dev[B].post_send(p.qpn[B].into(), &inv).unwrap();
    w.wr_id = 7;
    p.dev[B].post_send(p.qpn[B].into(), &w).unwrap();
    // Drop B's first two packets: both WRITEs are resent after the timeout,
    // the LOCAL_INV is not executed twice.
    let mut dropped = 0;
    p.run(|k| {
        if k.from == B && dropped < 2 {
            dropped += 1;
            return false;
        }
        true
    });
    assert_eq!(
        statuses(&mut p, B),
        [
            (5, WcStatus::Success, WcOpcode::RdmaWrite),
            (6, WcStatus::Success, WcOpcode::LocalInv),
            (7, WcStatus::Success, WcOpcode::RdmaWrite)
        ]
    );
    assert_eq!(p.log.iter().filter(|k| k.from == B).count(), 4);
    assert_eq!(p.dev[B].counters().completer_retry_err, 1);
}

#[test]
fn a_type2_window_answers_only_through_its_qp() {
    // Bound through B's QP; A's QP on the same device (a loopback pair would
    // need two QPs on B) is modelled by checking the table directly.
    let mut p = Pair::new(Setup::default());
    let key = bind_type2(&mut p, 0, 64, RW);
    let pd = p.pd[B];
    let mw = p.dev[B].mr_table().mw(key).unwrap();
    assert_eq!(mw.bound.unwrap().qpn, Some(p.qpn[B]));
    assert!(
        roce_proto::testing::check_remote(
            p.dev[B].mr_table(),
            key,
            pd,
            p.qpn[B],
            p.va(B, 0),
            64,
            AccessFlags::REMOTE_READ
        )
        .is_ok()
    );
    assert!(
        roce_proto::testing::check_remote(
            p.dev[B].mr_table(),
            key,
            pd,
            p.qpn[B] + 1,
            p.va(B, 0),
            64,
            AccessFlags::REMOTE_READ
        )
        .is_err()
    );
}

#[test]
fn zero_based_windows_count_from_zero() {
    let mut p = Pair::new(Setup::default());
    let key = bind_type2(&mut p, 0x3000, 128, AccessFlags(RW.0 | AccessFlags::ZERO_BASED.0));
    let data = p.fill(A, 0, 16, 5);
    post_remote(&mut p, 1, WrOpcode::RdmaWrite, 16, 112, key);
    p.run(|_| true);
    assert_eq!(statuses(&mut p, A), [(1, WcStatus::Success, WcOpcode::RdmaWrite)]);
    assert_eq!(p.mem[B].get(0x3000 + 112, 16), data);
    post_remote(&mut p, 2, WrOpcode::RdmaWrite, 16, 120, key);
    p.run(|_| true);
    assert_eq!(statuses(&mut p, A), [(2, WcStatus::RemAccessErr, WcOpcode::RdmaWrite)]);
}

#[test]
fn type1_windows_rebind_with_a_new_key_and_cannot_be_invalidated() {
    let mut p = Pair::new(Setup::default());
    let mw = p.dev[B].alloc_mw(p.pd[B], MwType::Type1).unwrap();
    let info = MwBindInfo { mr_key: p.key[B], addr: p.va(B, 0), length: 32, access: RW };
    let k1 = p.dev[B].bind_mw(p.qpn[B].into(), mw, 1, SendFlags::SIGNALED, info).unwrap();
    assert_eq!(k1 >> 8, mw >> 8);
    assert_eq!(k1 & 0xff, (mw + 1) & 0xff, "ibv_inc_rkey");
    p.run(|_| true);
    assert_eq!(statuses(&mut p, B), [(1, WcStatus::Success, WcOpcode::BindMw)]);
    // Rebinding elsewhere retires k1.
    let k2 = p.dev[B]
        .bind_mw(p.qpn[B].into(), k1, 2, SendFlags::SIGNALED, MwBindInfo { addr: p.va(B, 64), ..info })
        .unwrap();
    p.run(|_| true);
    assert_eq!(statuses(&mut p, B), [(2, WcStatus::Success, WcOpcode::BindMw)]);
    let data = p.fill(A, 0, 32, 1);
    let va = p.va(B, 64);

    post_remote(&mut p, 3, WrOpcode::RdmaWrite, 32, va, k2);
    p.run(|_| true);
    assert_eq!(statuses(&mut p, A), [(3, WcStatus::Success, WcOpcode::RdmaWrite)]);
    assert_eq!(p.mem[B].get(64, 32), data);
    // The region cannot go while the window is bound.
    assert_eq!(p.dev[B].dereg_mr(p.key[B]), Err(VerbError::Mr(MrError::HasWindows(p.key[B]))));
    // Type 1 windows are not invalidated by SEND_WITH_INV.
    p.recv(B, 10, 256, 64);
    let sge = [p.sge(A, 0, 8)];
    let mut wr = SendWr::new(4, WrOpcode::SendWithInv, SendFlags::SIGNALED, Payload::Sges(&sge));
    wr.invalidate_rkey = k2;
    p.dev[A].post_send(p.qpn[A].into(), &wr).unwrap();
    p.run(|_| true);
    assert_eq!(statuses(&mut p, A), [(4, WcStatus::RemInvReqErr, WcOpcode::Send)]);
    assert_eq!(statuses(&mut p, B), [(10, WcStatus::RemInvReqErr, WcOpcode::Recv)]);
    // Deallocating unbinds: now the region can go.
    p.dev[B].dealloc_mw(k2).unwrap();
    p.dev[B].dereg_mr(p.key[B]).unwrap();
    // ibv_bind_mw refuses type 2 windows.
    let mut q = Pair::new(Setup::default());
    let t2 = q.dev[B].alloc_mw(q.pd[B], MwType::Type2).unwrap();
    let info = MwBindInfo { mr_key: q.key[B], addr: q.va(B, 0), length: 32, access: RW };
    assert!(matches!(q.dev[B].bind_mw(q.qpn[B].into(), t2, 1, SendFlags::SIGNALED, info), Err(VerbError::Invalid(_))));
}

#[test]
fn binding_a_bound_type2_window_or_outside_the_region_fails_with_mw_bind_err() {
    let mut p = Pair::new(Setup::default());
    let key = bind_type2(&mut p, 0, 64, RW);
    let next = (key & !0xff) | (key.wrapping_add(1) & 0xff);
    let info = MwBindInfo { mr_key: p.key[B], addr: p.va(B, 0), length: 64, access: RW };
    post_bind(&mut p, 8, key, next, info);
    p.run(|_| true);
    assert_eq!(statuses(&mut p, B), [(8, WcStatus::MwBindErr, WcOpcode::BindMw)]);
    assert_eq!(p.dev[B].qp(p.qpn[B].into()).unwrap().state(), QpState::Err);

    let mut p = Pair::new(Setup::default());
    let mw = p.dev[B].alloc_mw(p.pd[B], MwType::Type2).unwrap();
    let past_end = MwBindInfo { mr_key: p.key[B], addr: p.va(B, common::MEM - 8), length: 16, access: RW };
    post_bind(&mut p, 9, mw, mw, past_end);
    p.run(|_| true);
    assert_eq!(statuses(&mut p, B), [(9, WcStatus::MwBindErr, WcOpcode::BindMw)]);
}

/// pyverbs' tests (rdma-core tests/test_mr.py) bind windows granting
/// LOCAL_WRITE | REMOTE_WRITE: the local bit is accepted and grants nothing
/// (a window's rights are remote ones, IBTA 10.6.7.2; rxe and mlx5 take it),
/// while a bit that means nothing for a window (MW_BIND) is MW_BIND_ERR.
#[test]
fn a_window_with_local_write_in_its_access_binds_and_grants_only_remote_rights() {
    let mut p = Pair::new(Setup::default());
    let access = AccessFlags(AccessFlags::LOCAL_WRITE.0 | AccessFlags::REMOTE_WRITE.0);
    let key = bind_type2(&mut p, 0, 64, access);
    let data = p.fill(A, 0, 64, 3);
    let va = p.va(B, 0);
    post_remote(&mut p, 1, WrOpcode::RdmaWrite, 64, va, key);
    p.run(|_| true);
    assert_eq!(statuses(&mut p, A), [(1, WcStatus::Success, WcOpcode::RdmaWrite)]);
    assert_eq!(p.mem[B].get(0, 64), data);
    // REMOTE_READ was not granted.
    post_remote(&mut p, 2, WrOpcode::RdmaRead, 64, va, key);
    p.run(|_| true);
    assert_eq!(statuses(&mut p, A), [(2, WcStatus::RemAccessErr, WcOpcode::RdmaRead)]);

    let mut p = Pair::new(Setup::default());
    let mw = p.dev[B].alloc_mw(p.pd[B], MwType::Type2).unwrap();
    let bad = MwBindInfo {
        mr_key: p.key[B],
        addr: p.va(B, 0),
        length: 64,
        access: AccessFlags(AccessFlags::MW_BIND.0 | AccessFlags::REMOTE_WRITE.0),
    };
    post_bind(&mut p, 9, mw, mw, bad);
    p.run(|_| true);
    assert_eq!(statuses(&mut p, B), [(9, WcStatus::MwBindErr, WcOpcode::BindMw)]);
}
