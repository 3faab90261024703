//! Queue pairs: `ibv_create_qp`, the extended `ibv_create_qp_ex`,
//! `ibv_modify_qp` / `ibv_query_qp` / `ibv_destroy_qp`, the inline
//! `ibv_post_send` / `ibv_post_recv` (through the context's ops), and the
//! work-request builder of `ibv_qp_ex` (`ibv_wr_start` ... `ibv_wr_complete`),
//! which perftest uses by default.
//!
//! A file per role: [`QpObj`], the C object every file works on, is here;
//! `create` makes and destroys QPs (`ibv_create_qp`, `create_qp_ex`,
//! `ibv_qp_to_qp_ex`, `ibv_destroy_qp`), `attr` sets and reads their
//! attributes (`ibv_modify_qp`, `ibv_query_qp`, the address conversions
//! rdma_cm and AHs share, multicast attach / detach), `post` converts and
//! posts work requests (`post_send`, `post_recv`, SRQs' `post_recv_list`),
//! and `wr` is the `ibv_wr_*` builder of extended QPs.

use std::cell::UnsafeCell;

use softroce::{Qp, QpCap};

use crate::abi::*;

mod attr;
mod create;
mod post;
mod wr;

use wr::Builder;

pub(crate) use attr::{write_ah_attr, write_qp_attr};
pub(crate) use create::{create_qp_ex, ibv_create_qp, ibv_destroy_qp};
pub(crate) use post::{bind_mw, post_recv, post_send, post_srq_recv};

/// An `ibv_qp_ex` (whose prefix is the `ibv_qp` every QP is) and the
/// softroce QP behind it.
#[repr(C)]
pub(crate) struct QpObj {
    pub(crate) c: IbvQpEx,
    /// rdma-core 45's `ibv_qp_ex.wr_flush`, right after the rdma-core 44
    /// struct (offset 352), where programs built against 45 look for it.
    wr_flush: Option<WrFlushFn>,
    pub(crate) qp: Qp,
    /// The PD it was made in (for the device's address).
    pd: softroce::Pd,
    /// Whether it was made with `send_ops_flags` (`ibv_qp_to_qp_ex`).
    extended: bool,
    cap: QpCap,
    /// The `ibv_wr_*` batch being built; the application serialises it.
    builder: UnsafeCell<Builder>,
}

const _: () = assert!(std::mem::offset_of!(QpObj, wr_flush) == IBV_QP_EX_WR_FLUSH_OFFSET);

/// The object behind a QP pointer.
///
/// # Safety
/// `qp` is NULL or a QP from `ibv_create_qp(_ex)`, not destroyed.
pub(crate) unsafe fn qp_obj<'a>(qp: *mut IbvQp) -> Option<&'a QpObj> {
    // SAFETY: per the contract; `c` (prefix ibv_qp) is the first field.
    (!qp.is_null()).then(|| unsafe { &*(qp as *const QpObj) })
}
