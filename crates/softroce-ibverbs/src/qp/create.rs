//! Making and destroying QPs: `ibv_create_qp`, `verbs_context.create_qp_ex`
//! (with `send_ops_flags`, the `ibv_wr_*` builder's operations, and the
//! creation flags softroce has), `ibv_qp_to_qp_ex` and `ibv_destroy_qp`.
//! What a QP holds on to (its PD, CQs, SRQ, its context's object table) is
//! taken here and given back in `ibv_destroy_qp`; touch both together.

use std::cell::UnsafeCell;
use std::ffi::c_int;
use std::sync::atomic::Ordering;

use softroce::{QpCap, QpInit, QpType, WrOpcode};

use crate::abi::rdma_core_45::IBV_QP_EX_WITH_FLUSH;
use crate::abi::*;
use crate::context;
use crate::cq::cq_obj;
use crate::errno::errno;
use crate::export::{guard, ibv_export, ptr_or_errno, set_errno};
use crate::pd::pd_obj;
use crate::srq::{SrqObj, srq_obj};

use super::wr;
use super::{QpObj, qp_obj};

fn qp_type_of(t: u32) -> Option<QpType> {
    QpType::from_raw(t)
}

/// What `ibv_create_qp` and `create_qp_ex` ask for.
struct Made {
    attr: IbvQpInitAttr,
    send_ops: Option<u64>,
    /// `IBV_QP_CREATE_BLOCK_SELF_MCAST_LB`.
    block_self_mcast_lb: bool,
}

fn make_qp(pd: *mut IbvPd, m: &Made) -> Result<*mut QpObj, c_int> {
    // SAFETY: a PD from ibv_alloc_pd (checked for NULL).
    let p = unsafe { pd_obj(pd) }.ok_or(libc::EINVAL)?;
    // SAFETY: CQs from ibv_create_cq (checked for NULL).
    let scq = unsafe { cq_obj(m.attr.send_cq) }.ok_or(libc::EINVAL)?;
    // SAFETY: as above.
    let rcq = unsafe { cq_obj(m.attr.recv_cq) }.ok_or(libc::EINVAL)?;
    // SAFETY: an SRQ from ibv_create_srq, or NULL.
    let srq: Option<&SrqObj> = unsafe { srq_obj(m.attr.srq) };
    let qp_type = qp_type_of(m.attr.qp_type).ok_or(libc::EOPNOTSUPP)?;
    let cap = QpCap {
        max_send_wr: m.attr.cap.max_send_wr,
        max_recv_wr: m.attr.cap.max_recv_wr,
        max_send_sge: m.attr.cap.max_send_sge,
        max_recv_sge: m.attr.cap.max_recv_sge,
        max_inline_data: m.attr.cap.max_inline_data,
    };
    let init = QpInit {
        qp_type,
        send_cq: &scq.cq,
        recv_cq: &rcq.cq,
        srq: srq.map(|s| &s.srq),
        cap,
        sq_sig_all: m.attr.sq_sig_all != 0,
        block_self_mcast_lb: m.block_self_mcast_lb,
    };
    let qp = p.pd.create_qp(init).map_err(|e| errno(&e))?;
    p.adopt();
    scq.users.fetch_add(1, Ordering::AcqRel);
    rcq.users.fetch_add(1, Ordering::AcqRel);
    if let Some(s) = srq {
        s.users.fetch_add(1, Ordering::AcqRel);
    }
    let mut c = IbvQpEx::default();
    let b = &mut c.qp_base;
    b.context = p.c.context;
    b.qp_context = m.attr.qp_context;
    b.pd = pd;
    b.send_cq = m.attr.send_cq;
    b.recv_cq = m.attr.recv_cq;
    b.srq = m.attr.srq;
    b.handle = qp.qpn().get();
    b.qp_num = qp.qpn().get();
    b.state = IBV_QPS_RESET as _;
    b.qp_type = m.attr.qp_type as _;
    if let Some(ops) = m.send_ops {
        c.comp_mask = ops;
        wr::install(&mut c);
    }
    let qpn = qp.qpn();
    let ctx = p.c.context;
    let o = Box::into_raw(Box::new(QpObj {
        c,
        wr_flush: m.send_ops.map(|_| wr::wr_flush as WrFlushFn),
        qp,
        pd: p.pd.clone(),
        extended: m.send_ops.is_some(),
        cap,
        builder: UnsafeCell::new(wr::Builder::default()),
    }));
    // SAFETY: the PD's context is live.
    if let Some(b) = unsafe { context::block(ctx) } {
        b.objects.lock().unwrap_or_else(|p| p.into_inner()).qps.insert(qpn.get(), o as usize);
        b.events.claim(softroce::EventSource::Qp(qpn));
    }
    Ok(o)
}

ibv_export! { "IBVERBS_1.1";
    /// Creates an RC, UC or UD QP in RESET.
    fn ibv_create_qp(pd: *mut IbvPd, qp_init_attr: *mut IbvQpInitAttr) -> *mut IbvQp {
        if qp_init_attr.is_null() {
            set_errno(libc::EINVAL);
            return std::ptr::null_mut();
        }
        // SAFETY: the caller passes a readable ibv_qp_init_attr.
        let a = unsafe { &*qp_init_attr };
        let m = Made { attr: *a, send_ops: None, block_self_mcast_lb: false };
        ptr_or_errno(make_qp(pd, &m))
    }
}

/// The `ibv_wr_*` operations softroce carries out (rxe's set, with the
/// IBA 1.5 ones of rdma-core 45's rxe).
const SEND_OPS_SUPPORTED: u64 = IBV_QP_EX_WITH_RDMA_WRITE
    | IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM
    | IBV_QP_EX_WITH_SEND
    | IBV_QP_EX_WITH_SEND_WITH_IMM
    | IBV_QP_EX_WITH_RDMA_READ
    | IBV_QP_EX_WITH_ATOMIC_CMP_AND_SWP
    | IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD
    | IBV_QP_EX_WITH_LOCAL_INV
    | IBV_QP_EX_WITH_BIND_MW
    | IBV_QP_EX_WITH_SEND_WITH_INV
    | IBV_QP_EX_WITH_ATOMIC_WRITE
    | IBV_QP_EX_WITH_FLUSH;

/// The `send_ops_flags` a UC QP takes: rxe's set (rdma-core 44
/// `RXE_SUP_UC_QP_SEND_OPS_FLAGS`) without SEND_WITH_INV, which has no UC
/// opcode on the wire (IBTA table 38: the invalidating SENDs are RC and
/// XRC only), and with LOCAL_INV, which UC's `ibv_post_send` takes too (a
/// local operation, like the window binds rxe allows there).
const SEND_OPS_UC: u64 = IBV_QP_EX_WITH_SEND
    | IBV_QP_EX_WITH_SEND_WITH_IMM
    | IBV_QP_EX_WITH_RDMA_WRITE
    | IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM
    | IBV_QP_EX_WITH_BIND_MW
    | IBV_QP_EX_WITH_LOCAL_INV;

/// The `send_ops_flags` a UD QP takes (rxe `RXE_SUP_UD_QP_SEND_OPS_FLAGS`).
const SEND_OPS_UD: u64 = IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_SEND_WITH_IMM;

/// The `send_ops_flags` QPs of type `t` take; others are EOPNOTSUPP, as
/// rxe's `check_qp_init_attr` answers (ATOMIC WRITE and FLUSH, IBA 1.5's
/// memory placement operations, are RC only).
fn send_ops_allowed(t: u32) -> u64 {
    match t {
        IBV_QPT_RC => SEND_OPS_SUPPORTED,
        IBV_QPT_UC => SEND_OPS_UC,
        IBV_QPT_UD => SEND_OPS_UD,
        _ => 0,
    }
}

/// The `send_ops_flags` bit that lets the builder start a WR of `op`.
pub(super) fn send_op_bit(op: WrOpcode) -> u64 {
    match op {
        WrOpcode::RdmaWrite => IBV_QP_EX_WITH_RDMA_WRITE,
        WrOpcode::RdmaWriteWithImm => IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM,
        WrOpcode::Send => IBV_QP_EX_WITH_SEND,
        WrOpcode::SendWithImm => IBV_QP_EX_WITH_SEND_WITH_IMM,
        WrOpcode::RdmaRead => IBV_QP_EX_WITH_RDMA_READ,
        WrOpcode::AtomicCmpAndSwp => IBV_QP_EX_WITH_ATOMIC_CMP_AND_SWP,
        WrOpcode::AtomicFetchAndAdd => IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD,
        WrOpcode::LocalInv => IBV_QP_EX_WITH_LOCAL_INV,
        WrOpcode::BindMw => IBV_QP_EX_WITH_BIND_MW,
        WrOpcode::SendWithInv => IBV_QP_EX_WITH_SEND_WITH_INV,
        WrOpcode::AtomicWrite => IBV_QP_EX_WITH_ATOMIC_WRITE,
        WrOpcode::Flush => IBV_QP_EX_WITH_FLUSH,
    }
}

/// `verbs_context.create_qp_ex`: a PD is required; `send_ops_flags` turn
/// on the `ibv_wr_*` builder.
pub(crate) unsafe extern "C" fn create_qp_ex(context: *mut IbvContext, attr: *mut IbvQpInitAttrEx) -> *mut IbvQp {
    guard("create_qp_ex", || {
        let _ = context;
        if attr.is_null() {
            set_errno(libc::EINVAL);
            return std::ptr::null_mut();
        }
        // SAFETY: the caller passes a readable ibv_qp_init_attr_ex.
        let a = unsafe { &*attr };
        let known = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS | IBV_QP_INIT_ATTR_CREATE_FLAGS;
        if a.comp_mask & IBV_QP_INIT_ATTR_PD == 0 {
            set_errno(libc::EINVAL);
            return std::ptr::null_mut();
        }
        // Creation flags count only with their mask bit; of them, softroce
        // has the multicast self-loopback block (mlx5's; rxe has none).
        let flags = if a.comp_mask & IBV_QP_INIT_ATTR_CREATE_FLAGS != 0 { a.create_flags } else { 0 };
        if a.comp_mask & !known != 0 || flags & !IBV_QP_CREATE_BLOCK_SELF_MCAST_LB != 0 {
            set_errno(libc::EOPNOTSUPP);
            return std::ptr::null_mut();
        }
        let send_ops = (a.comp_mask & IBV_QP_INIT_ATTR_SEND_OPS_FLAGS != 0).then_some(a.send_ops_flags);
        if send_ops.is_some_and(|f| f & !send_ops_allowed(a.qp_type) != 0) {
            set_errno(libc::EOPNOTSUPP);
            return std::ptr::null_mut();
        }
        let m = Made { attr: a.base(), send_ops, block_self_mcast_lb: flags & IBV_QP_CREATE_BLOCK_SELF_MCAST_LB != 0 };
        ptr_or_errno(make_qp(a.pd, &m))
    })
}

ibv_export! { "IBVERBS_1.6";
    /// The extended view of a QP made with `send_ops_flags`, else NULL.
    fn ibv_qp_to_qp_ex(qp: *mut IbvQp) -> *mut IbvQpEx {
        // SAFETY: a QP from ibv_create_qp(_ex) (checked for NULL).
        match unsafe { qp_obj(qp) } {
            Some(o) if o.extended => qp as *mut IbvQpEx,
            _ => std::ptr::null_mut(),
        }
    }
}

ibv_export! { "IBVERBS_1.1";
    /// Destroys a QP (its unpolled completions stay in the CQs); `EBUSY`
    /// while it is attached to a multicast group, as the kernel refuses.
    fn ibv_destroy_qp(qp: *mut IbvQp) -> c_int {
        // SAFETY: a QP from ibv_create_qp (checked for NULL).
        let Some(o) = (unsafe { qp_obj(qp) }) else { return libc::EINVAL };
        if !o.qp.mcast_groups().is_empty() {
            return libc::EBUSY;
        }
        let b = &o.c.qp_base;
        // SAFETY: the QP's PD, CQs, SRQ and context outlive it (their
        // destroy calls refuse while it exists).
        unsafe {
            if let Some(c) = context::block(b.context) {
                c.objects.lock().unwrap_or_else(|p| p.into_inner()).qps.remove(&b.qp_num);
            }
            if let Some(p) = pd_obj(b.pd) {
                p.release();
            }
            for cq in [b.send_cq, b.recv_cq] {
                if let Some(c) = cq_obj(cq) {
                    c.users.fetch_sub(1, Ordering::AcqRel);
                }
            }
            if let Some(s) = srq_obj(b.srq) {
                s.users.fetch_sub(1, Ordering::AcqRel);
            }
            drop(Box::from_raw(qp as *mut QpObj));
        }
        0
    }
}
