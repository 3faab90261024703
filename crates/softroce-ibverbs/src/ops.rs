//! The operation tables of a context: the functions rdma-core's inline
//! verbs and extended verbs reach through `verbs_context` (`query_port`,
//! `create_cq_ex`, ...) and through `ibv_context.ops` (`poll_cq`,
//! `post_send`, ...). The only place that names every object module's
//! entry points; [`crate::context`] calls [`fill`] when it opens a context.
//! Add an operation here when an object module gains one.

use crate::abi::*;

/// Fills the operation pointers of a new context: the extended ones of
/// `verbs_context` and the `ibv_context_ops` ones (the rest of the context
/// is [`crate::device::open`]'s).
pub(crate) fn fill(vctx: &mut VerbsContext) {
    vctx.query_port = Some(crate::query::query_port);
    vctx.query_device_ex = Some(crate::query::query_device_ex);
    vctx.advise_mr = Some(crate::pd::advise_mr);
    vctx.create_cq_ex = Some(crate::cq::create_cq_ex);
    vctx.modify_cq = Some(crate::cq::modify_cq);
    vctx.create_qp_ex = Some(crate::qp::create_qp_ex);
    vctx.create_srq_ex = Some(crate::srq::create_srq_ex);
    let c = &mut vctx.context;
    c.ops.poll_cq = Some(crate::cq::poll_cq);
    c.ops.req_notify_cq = Some(crate::cq::req_notify_cq);
    c.ops.post_send = Some(crate::qp::post_send);
    c.ops.post_recv = Some(crate::qp::post_recv);
    c.ops.post_srq_recv = Some(crate::qp::post_srq_recv);
    c.ops.alloc_mw = Some(crate::mw::alloc_mw);
    c.ops.bind_mw = Some(crate::qp::bind_mw);
    c.ops.dealloc_mw = Some(crate::mw::dealloc_mw);
}
