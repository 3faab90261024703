//! The work-request builder of `ibv_qp_ex` (`ibv_wr_start`, the
//! `ibv_wr_*` operations and setters, `ibv_wr_complete` / `ibv_wr_abort`),
//! which perftest uses by default. The application serialises the calls of
//! one batch (rdma-core's rule); the batch is posted as `post` posts.

use std::ffi::{c_int, c_void};

use softroce::{Flush, QpType, SendFlags, UdDest, WrOpcode};

use crate::abi::*;
use crate::errno::errno;
use crate::export::{guard, trace_err};

use super::QpObj;
use super::create::send_op_bit;
use super::post::{Pending, Scratch, ah_handle, fetches, inline_from_sges, post_all, take_sges};

/// WRs between `ibv_wr_start` and `ibv_wr_complete`.
#[derive(Default)]
pub(super) struct Builder {
    wrs: Vec<Pending>,
    scratch: Scratch,
    /// The first error of the batch, returned by `ibv_wr_complete`.
    err: c_int,
}

/// # Safety
/// `qp` is an extended QP made here; the application serialises the
/// builder calls between `wr_start` and `wr_complete` (rdma-core's rule).
unsafe fn bld<'a>(qp: *mut IbvQpEx) -> (&'a QpObj, &'a mut Builder) {
    // SAFETY: per the contract.
    let o = unsafe { &*(qp as *const QpObj) };
    // SAFETY: per the contract.
    (o, unsafe { &mut *o.builder.get() })
}

unsafe extern "C" fn wr_start(qp: *mut IbvQpEx) {
    guard("wr_start", || {
        // SAFETY: an extended QP made here.
        let (_, b) = unsafe { bld(qp) };
        b.wrs.clear();
        b.scratch.sges.clear();
        b.scratch.inline.clear();
        b.err = 0;
    })
}

unsafe extern "C" fn wr_complete(qp: *mut IbvQpEx) -> c_int {
    guard("wr_complete", || {
        // SAFETY: an extended QP made here.
        let (o, b) = unsafe { bld(qp) };
        // A failed batch posts nothing (ibv_wr_post(3)): refuse up front
        // what the engine would refuse part-way. A send queue already
        // holding WRs can still fill up in the middle; then the WRs before
        // are posted and complete, and the error is returned.
        let ty = o.qp.qp_type();
        let e = if b.err != 0 {
            b.err
        } else if b.wrs.len() > o.cap.max_send_wr.max(1) as usize {
            libc::ENOMEM
        } else if !b.wrs.iter().all(|p| p.fits(ty)) {
            libc::EINVAL
        } else {
            0
        };
        if e != 0 {
            trace_err("ibv_wr_complete", &format_args!("batch of {} WRs refused: errno {e}", b.wrs.len()));
            b.wrs.clear();
            return e;
        }
        let r = post_all(o, b.wrs.iter().map(|p| p.wr(&b.scratch)));
        let posted = r.as_ref().err().map_or(b.wrs.len(), |(i, _)| *i);
        b.wrs[..posted].iter().for_each(Pending::posted);
        b.wrs.clear();
        match r {
            Ok(()) => 0,
            Err((_, e)) => {
                trace_err("ibv_wr_complete", &e);
                errno(&e)
            }
        }
    })
}

unsafe extern "C" fn wr_abort(qp: *mut IbvQpEx) {
    guard("wr_abort", || {
        // SAFETY: an extended QP made here.
        let (_, b) = unsafe { bld(qp) };
        b.wrs.clear();
        b.err = 0;
    })
}

/// Starts a WR of `opcode` with the QP's current `wr_id` and `wr_flags`.
/// A QP not created with the operation's `send_ops_flags` bit fails the
/// batch with EOPNOTSUPP (rxe leaves that builder NULL: a call would jump
/// to address 0).
fn begin(qp: *mut IbvQpEx, opcode: WrOpcode, f: impl FnOnce(&mut Pending)) {
    begin_checked(qp, opcode, |p, _| {
        f(p);
        Ok(())
    });
}

/// Changes the WR being built.
fn last(qp: *mut IbvQpEx, f: impl FnOnce(&QpObj, &mut Pending, &mut Scratch) -> Result<(), c_int>) {
    guard("wr_set_*", || {
        // SAFETY: an extended QP made here.
        let (o, b) = unsafe { bld(qp) };
        let Some(p) = b.wrs.last_mut() else {
            b.err = libc::EINVAL;
            return;
        };
        if let Err(e) = f(o, p, &mut b.scratch)
            && b.err == 0
        {
            b.err = e;
        }
    })
}

unsafe extern "C" fn wr_send(qp: *mut IbvQpEx) {
    begin(qp, WrOpcode::Send, |_| {});
}
unsafe extern "C" fn wr_send_imm(qp: *mut IbvQpEx, imm_data: u32) {
    begin(qp, WrOpcode::SendWithImm, |p| p.wr.imm_data = u32::from_be(imm_data));
}
unsafe extern "C" fn wr_send_inv(qp: *mut IbvQpEx, invalidate_rkey: u32) {
    begin(qp, WrOpcode::SendWithInv, |p| p.wr.invalidate_rkey = invalidate_rkey);
}
unsafe extern "C" fn wr_rdma_write(qp: *mut IbvQpEx, rkey: u32, remote_addr: u64) {
    begin(qp, WrOpcode::RdmaWrite, |p| (p.wr.rkey, p.wr.remote_addr) = (rkey, remote_addr));
}
unsafe extern "C" fn wr_rdma_write_imm(qp: *mut IbvQpEx, rkey: u32, remote_addr: u64, imm_data: u32) {
    begin(qp, WrOpcode::RdmaWriteWithImm, |p| {
        (p.wr.rkey, p.wr.remote_addr, p.wr.imm_data) = (rkey, remote_addr, u32::from_be(imm_data));
    });
}
unsafe extern "C" fn wr_rdma_read(qp: *mut IbvQpEx, rkey: u32, remote_addr: u64) {
    begin(qp, WrOpcode::RdmaRead, |p| (p.wr.rkey, p.wr.remote_addr) = (rkey, remote_addr));
}
unsafe extern "C" fn wr_atomic_cmp_swp(qp: *mut IbvQpEx, rkey: u32, remote_addr: u64, compare: u64, swap: u64) {
    begin(qp, WrOpcode::AtomicCmpAndSwp, |p| {
        (p.wr.rkey, p.wr.remote_addr, p.wr.compare_add, p.wr.swap) = (rkey, remote_addr, compare, swap);
    });
}
unsafe extern "C" fn wr_atomic_fetch_add(qp: *mut IbvQpEx, rkey: u32, remote_addr: u64, add: u64) {
    begin(qp, WrOpcode::AtomicFetchAndAdd, |p| {
        (p.wr.rkey, p.wr.remote_addr, p.wr.compare_add) = (rkey, remote_addr, add)
    });
}
unsafe extern "C" fn wr_local_inv(qp: *mut IbvQpEx, invalidate_rkey: u32) {
    begin(qp, WrOpcode::LocalInv, |p| p.wr.invalidate_rkey = invalidate_rkey);
}
unsafe extern "C" fn wr_bind_mw(qp: *mut IbvQpEx, mw: *mut IbvMw, rkey: u32, info: *const IbvMwBindInfo) {
    // SAFETY: the caller passes a readable bind info (checked for NULL).
    let bind = if info.is_null() { Err(libc::EINVAL) } else { crate::mw::bind_of(mw, rkey, unsafe { &*info }) };
    begin(qp, WrOpcode::BindMw, |p| {
        p.wr.bind = bind.ok();
        p.mw = mw as usize;
    });
    if bind.is_err() {
        last(qp, |_, _, _| Err(libc::EINVAL));
    }
}

/// Starts a WR of `opcode`, which the QP must have been created for (its
/// `send_ops_flags` bit), else the batch fails with EOPNOTSUPP; `f` fills
/// it from the builder's scratch or says why not.
fn begin_checked(qp: *mut IbvQpEx, opcode: WrOpcode, f: impl FnOnce(&mut Pending, &mut Scratch) -> Result<(), c_int>) {
    guard("wr_*", || {
        // SAFETY: an extended QP made here.
        let (o, b) = unsafe { bld(qp) };
        let mut p = Pending::new(o.c.wr_id, opcode, o.c.wr_flags);
        p.sges = (b.scratch.sges.len(), 0);
        let r =
            if o.c.comp_mask & send_op_bit(opcode) == 0 { Err(libc::EOPNOTSUPP) } else { f(&mut p, &mut b.scratch) };
        if let Err(e) = r {
            trace_err("ibv_wr_*", &format_args!("{opcode:?} refused: errno {e}"));
            if b.err == 0 {
                b.err = e;
            }
        }
        b.wrs.push(p);
    })
}

/// `ibv_wr_atomic_write`: the 8 bytes at `atomic_wr` are copied now (as
/// rdma-core does); RC QPs made with `IBV_QP_EX_WITH_ATOMIC_WRITE` only.
unsafe extern "C" fn wr_atomic_write(qp: *mut IbvQpEx, rkey: u32, remote_addr: u64, atomic_wr: *const c_void) {
    begin_checked(qp, WrOpcode::AtomicWrite, |p, s| {
        (p.wr.rkey, p.wr.remote_addr) = (rkey, remote_addr);
        if atomic_wr.is_null() {
            return Err(libc::EINVAL);
        }
        let start = s.inline.len();
        // SAFETY: the caller passes 8 readable bytes (ibv_wr_atomic_write(3)).
        s.inline.extend_from_slice(unsafe { std::slice::from_raw_parts(atomic_wr as *const u8, 8) });
        p.inline = Some((start, 8));
        Ok(())
    });
}

/// rdma-core 45's `ibv_wr_flush`: RC QPs made with `IBV_QP_EX_WITH_FLUSH`
/// only. `len` travels in the RETH's 32-bit DMA length: a longer one fails
/// the batch (EINVAL) rather than flush less than asked, and so do
/// undefined placement types or selectivity levels.
pub(super) unsafe extern "C" fn wr_flush(qp: *mut IbvQpEx, rkey: u32, remote_addr: u64, len: usize, ty: u8, level: u8) {
    begin_checked(qp, WrOpcode::Flush, |p, _| {
        let len = u32::try_from(len).map_err(|_| libc::EINVAL)?;
        let f = Flush { placement: ty, selectivity: level, len };
        (p.wr.rkey, p.wr.remote_addr, p.wr.flush) = (rkey, remote_addr, Some(f));
        if f.is_valid() { Ok(()) } else { Err(libc::EINVAL) }
    });
}

unsafe extern "C" fn wr_set_sge(qp: *mut IbvQpEx, lkey: u32, addr: u64, length: u32) {
    last(qp, |o, p, s| {
        let g = IbvSge { addr, length, lkey };
        // SAFETY: one SGE on our stack.
        p.sges = unsafe { take_sges(s, &g, 1) };
        inline_if_flagged(o, p, s)
    });
}
unsafe extern "C" fn wr_set_sge_list(qp: *mut IbvQpEx, num_sge: usize, sg_list: *const IbvSge) {
    last(qp, |o, p, s| {
        if num_sge > o.cap.max_send_sge.max(1) as usize || (num_sge > 0 && sg_list.is_null()) {
            return Err(libc::EINVAL);
        }
        // SAFETY: the caller's list has num_sge entries.
        p.sges = unsafe { take_sges(s, sg_list, num_sge) };
        inline_if_flagged(o, p, s)
    });
}

/// `IBV_SEND_INLINE` in `wr_flags` with SGEs: the bytes are taken now.
fn inline_if_flagged(o: &QpObj, p: &mut Pending, s: &mut Scratch) -> Result<(), c_int> {
    if p.wr.flags.contains(SendFlags::INLINE) && !fetches(p.wr.opcode) {
        // SAFETY: the SGEs name the caller's memory (verbs contract).
        p.inline = Some(unsafe { inline_from_sges(s, p.sges, o.cap.max_inline_data) }?);
    }
    Ok(())
}

unsafe extern "C" fn wr_set_inline_data(qp: *mut IbvQpEx, addr: *mut c_void, length: usize) {
    last(qp, |o, p, s| {
        if length > o.cap.max_inline_data as usize || (length > 0 && addr.is_null()) {
            return Err(libc::EINVAL);
        }
        let start = s.inline.len();
        if length > 0 {
            // SAFETY: the caller's buffer has `length` readable bytes.
            s.inline.extend_from_slice(unsafe { std::slice::from_raw_parts(addr as *const u8, length) });
        }
        p.inline = Some((start, length));
        p.wr.flags = SendFlags(p.wr.flags.0 | SendFlags::INLINE.0);
        Ok(())
    });
}
unsafe extern "C" fn wr_set_inline_data_list(qp: *mut IbvQpEx, num_buf: usize, buf_list: *const IbvDataBuf) {
    last(qp, |o, p, s| {
        if num_buf > 0 && buf_list.is_null() {
            return Err(libc::EINVAL);
        }
        let start = s.inline.len();
        for i in 0..num_buf {
            // SAFETY: the caller's list has num_buf entries.
            let d = unsafe { &*buf_list.add(i) };
            if s.inline.len() - start + d.length > o.cap.max_inline_data as usize || (d.length > 0 && d.addr.is_null())
            {
                return Err(libc::EINVAL);
            }
            if d.length > 0 {
                // SAFETY: each buffer has `length` readable bytes.
                s.inline.extend_from_slice(unsafe { std::slice::from_raw_parts(d.addr as *const u8, d.length) });
            }
        }
        p.inline = Some((start, s.inline.len() - start));
        p.wr.flags = SendFlags(p.wr.flags.0 | SendFlags::INLINE.0);
        Ok(())
    });
}
unsafe extern "C" fn wr_set_ud_addr(qp: *mut IbvQpEx, ah: *mut IbvAh, remote_qpn: u32, remote_qkey: u32) {
    last(qp, |o, p, _| {
        // Other QP types have no use for an address (rxe ignores it too).
        if o.qp.qp_type() == QpType::Ud {
            p.wr.ud = Some(UdDest { ah: ah_handle(ah)?, remote_qpn: remote_qpn.into(), remote_qkey });
        }
        Ok(())
    });
}
unsafe extern "C" fn wr_set_xrc_srqn(qp: *mut IbvQpEx, remote_srqn: u32) {
    let _ = remote_srqn;
    // XRC is not supported (as in rxe).
    last(qp, |_, _, _| Err(libc::EOPNOTSUPP));
}

/// Points a new extended QP's `ibv_wr_*` entries at this builder (all but
/// `wr_flush`, which rdma-core 45 reads past the 44 struct: [`super::QpObj`]).
pub(super) fn install(c: &mut IbvQpEx) {
    c.wr_start = Some(wr_start);
    c.wr_complete = Some(wr_complete);
    c.wr_abort = Some(wr_abort);
    c.wr_send = Some(wr_send);
    c.wr_send_imm = Some(wr_send_imm);
    c.wr_send_inv = Some(wr_send_inv);
    c.wr_rdma_write = Some(wr_rdma_write);
    c.wr_rdma_write_imm = Some(wr_rdma_write_imm);
    c.wr_rdma_read = Some(wr_rdma_read);
    c.wr_atomic_cmp_swp = Some(wr_atomic_cmp_swp);
    c.wr_atomic_fetch_add = Some(wr_atomic_fetch_add);
    c.wr_bind_mw = Some(wr_bind_mw);
    c.wr_local_inv = Some(wr_local_inv);
    c.wr_set_sge = Some(wr_set_sge);
    c.wr_set_sge_list = Some(wr_set_sge_list);
    c.wr_set_inline_data = Some(wr_set_inline_data);
    c.wr_set_inline_data_list = Some(wr_set_inline_data_list);
    c.wr_set_ud_addr = Some(wr_set_ud_addr);
    c.wr_set_xrc_srqn = Some(wr_set_xrc_srqn);
    c.wr_atomic_write = Some(wr_atomic_write);
}
