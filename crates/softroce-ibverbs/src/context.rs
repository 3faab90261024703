//! The device context (`ibv_context` inside rdma-core's extended
//! `verbs_context`): its block, closing and async events. It is opened by
//! [`crate::device`], which fills its operation tables ([`crate::ops`]);
//! the errno mapping is [`crate::errno`]'s. Object modules reach their
//! context's state through [`block`]; nothing here names an object module.
//!
//! Applications find the extended operations at `ctx - 320` once
//! `abi_compat` holds `UINTPTR_MAX` (verbs.h `verbs_get_ctx`), so the
//! context handed out is the last member of one [`CtxBlock`] laid out as
//! `verbs_context`, followed by softroce's own state.

use std::collections::HashMap;
use std::ffi::c_int;
use std::os::fd::OwnedFd;
use std::sync::Mutex;

use softroce::{AsyncEvent, Context};

use crate::abi::*;
use crate::errno::errno;
use crate::export::{Step, ibv_export, ibv_export_blocking, set_errno};
use crate::fd::nonblocking;

/// One open device: the C-visible `verbs_context` first, then softroce's.
#[repr(C)]
pub(crate) struct CtxBlock {
    pub(crate) vctx: VerbsContext,
    pub(crate) ctx: Context,
    /// This context's async events (its `async_fd`): those of the objects
    /// made on it, and device-wide ones.
    pub(crate) events: softroce::AsyncEvents,
    /// C objects by engine handle, for events that name them.
    pub(crate) objects: Mutex<Objects>,
    _cmd_fd: OwnedFd,
    /// The process that opened it: a `fork()` child has a copy of the
    /// block but not the driver thread behind `ctx` (see [`close`]).
    pid: u32,
}

/// Engine handles to the C objects made for them (as addresses).
#[derive(Default)]
pub(crate) struct Objects {
    pub(crate) cqs: HashMap<u32, usize>,
    pub(crate) qps: HashMap<u32, usize>,
    pub(crate) srqs: HashMap<u32, usize>,
}

/// The block behind a context pointer (NULL gives `None`).
///
/// # Safety
/// `ctx` is NULL or a context returned by `ibv_open_device` and not closed.
pub(crate) unsafe fn block<'a>(ctx: *mut IbvContext) -> Option<&'a CtxBlock> {
    if ctx.is_null() {
        return None;
    }
    let off = std::mem::offset_of!(CtxBlock, vctx) + std::mem::offset_of!(VerbsContext, context);
    // SAFETY: per the contract, ctx is the `context` member of a live CtxBlock.
    Some(unsafe { &*((ctx as *mut u8).sub(off) as *const CtxBlock) })
}

impl CtxBlock {
    /// A block for `ctx` with the filled `vctx`, its async events and its
    /// command fd, opened by this process.
    pub(crate) fn new(vctx: VerbsContext, ctx: Context, events: softroce::AsyncEvents, cmd_fd: OwnedFd) -> CtxBlock {
        CtxBlock {
            vctx,
            ctx,
            events,
            objects: Mutex::new(Objects::default()),
            _cmd_fd: cmd_fd,
            pid: std::process::id(),
        }
    }
}

/// `ibv_close_device`.
///
/// In a `fork()` child (a Python child exiting normally tears down what it
/// inherited) the device's driver thread does not exist: closing the last
/// context would join a thread of the parent. The child's copy of the
/// device is left open instead (one reference leaked), so neither this
/// close nor a later destroy of an inherited object ends it; the parent's
/// device is untouched either way.
///
/// # Safety
/// `ctx` is NULL or a context from `ibv_open_device`, not used afterwards.
pub(crate) unsafe fn close(ctx: *mut IbvContext) -> c_int {
    // SAFETY: per the contract.
    let Some(b) = (unsafe { block(ctx) }) else { return libc::EINVAL };
    if b.pid != std::process::id() {
        std::mem::forget(b.ctx.clone());
    }
    // SAFETY: the block was made by Box::into_raw in `open`; the caller
    // gives it up.
    drop(unsafe { Box::from_raw(b as *const CtxBlock as *mut CtxBlock) });
    0
}

ibv_export_blocking! { "IBVERBS_1.1";
    /// The next async event (QP fatal, SRQ limit, ...), blocking unless the
    /// async fd is non-blocking (then -1 with EAGAIN); a cancellation point.
    fn ibv_get_async_event(context: *mut IbvContext, event: *mut IbvAsyncEvent) -> c_int, |_again| {
        // SAFETY: a context from ibv_open_device (checked for NULL).
        let Some(b) = (unsafe { block(context) }) else {
            set_errno(libc::EINVAL);
            return Step::Done(-1);
        };
        if event.is_null() {
            set_errno(libc::EINVAL);
            return Step::Done(-1);
        }
        let fd = b.vctx.context.async_fd;
        let ev = match b.events.get(Some(std::time::Duration::ZERO)) {
            Ok(Some(ev)) => ev,
            Ok(None) if nonblocking(fd) => {
                set_errno(libc::EAGAIN);
                return Step::Done(-1);
            }
            Ok(None) => return Step::Wait(fd),
            Err(e) => {
                set_errno(errno(&e));
                return Step::Done(-1);
            }
        };
        let objs = b.objects.lock().unwrap_or_else(|p| p.into_inner());
        let (ty, elem) = match ev {
            AsyncEvent::CqErr(h) => (IBV_EVENT_CQ_ERR, objs.cqs.get(&h.get()).copied()),
            AsyncEvent::QpFatal(q) => (IBV_EVENT_QP_FATAL, objs.qps.get(&q.get()).copied()),
            AsyncEvent::QpLastWqeReached(q) => (IBV_EVENT_QP_LAST_WQE_REACHED, objs.qps.get(&q.get()).copied()),
            AsyncEvent::SrqLimitReached(s) => (IBV_EVENT_SRQ_LIMIT_REACHED, objs.srqs.get(&s.get()).copied()),
            AsyncEvent::SqDrained(q) => (IBV_EVENT_SQ_DRAINED, objs.qps.get(&q.get()).copied()),
            AsyncEvent::DeviceFatal => (IBV_EVENT_DEVICE_FATAL, None),
        };
        let mut out = IbvAsyncEvent::default();
        out.element.cq = elem.unwrap_or(0) as *mut IbvCq;
        out.event_type = ty as _;
        // SAFETY: the caller passes a writable ibv_async_event.
        unsafe { event.write(out) };
        Step::Done(0)
    }
}

ibv_export! { "IBVERBS_1.1";
    /// Acknowledges an async event (nothing waits on the count here).
    fn ibv_ack_async_event(event: *mut IbvAsyncEvent) {
        let _ = event;
    }
}
