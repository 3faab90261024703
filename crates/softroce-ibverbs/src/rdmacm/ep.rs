//! Synchronous ids and endpoints, as librdmacm makes them: an id created
//! without a channel (or migrated to none) gets a channel of its own, and
//! each call that starts an event waits for it (`ucma_complete`): address
//! and route resolution, connect, accept. The event stays in `id->event`
//! until the next. `rdma_create_ep` makes such an id from `rdma_getaddrinfo`'s
//! answer, `rdma_get_request` takes a listener's next connection request,
//! and `rdma_create_qp` without CQs makes them, each with a completion
//! channel, as `rdma_verbs.h`'s helpers (`rdma_get_recv_comp`...) expect.

use std::ffi::{c_int, c_void};

use softroce::rdma_cm::{CmId, EventChannel, PortSpace};

use super::{ChannelBlock, Handles, IdBlock, block, event_block, fail, new_block};
use crate::abi::*;
use crate::export::{ibv_export, set_errno};
use crate::rdmacm_abi::*;

/// A passive endpoint's QP recipe (`rdma_create_ep`'s `qp_init_attr`, PD).
pub(super) struct Template {
    attr: Option<IbvQpInitAttr>,
    pd: *mut IbvPd,
}

fn channel_block() -> Result<Box<ChannelBlock>, softroce::Error> {
    let ch = EventChannel::new()?;
    let fd = std::os::fd::AsRawFd::as_raw_fd(&ch.fd());
    Ok(Box::new(ChannelBlock { c: RdmaEventChannel { fd }, ch }))
}

/// A new synchronous id in port space `ps`.
pub(super) fn sync_id(ps: PortSpace, context: *mut c_void) -> Result<*mut IdBlock, softroce::Error> {
    let mut chb = channel_block()?;
    let cp = &mut chb.c as *mut RdmaEventChannel;
    let b = new_block(CmId::new(&chb.ch, ps), cp, context);
    // SAFETY: the block just made.
    unsafe { (*b).sync = Some(chb) };
    Ok(b)
}

/// Gives `b` a channel of its own (`rdma_migrate_id(id, NULL)`).
pub(super) fn make_sync(b: &mut IdBlock) -> Result<(), softroce::Error> {
    let mut chb = channel_block()?;
    b.id.migrate(&chb.ch);
    b.c.channel = &mut chb.c as *mut RdmaEventChannel;
    b.sync = Some(chb);
    Ok(())
}

/// For a synchronous id: waits for the event its call started and keeps
/// it in `id->event`; -1 with librdmacm's errno when the event says the
/// call failed (ECONNREFUSED for a reject, else the status). 0 for an id
/// with a channel of the application's.
pub(super) fn complete(b: &mut IdBlock) -> c_int {
    let Some(chb) = &mut b.sync else { return 0 };
    let cp = &mut chb.c as *mut RdmaEventChannel;
    let Some(e) = chb.ch.get_event(None) else {
        set_errno(libc::EIO);
        return -1;
    };
    ack_kept(b);
    let h = Handles::of(&e);
    let eb = event_block(e, cp, h);
    b.c.event = eb as *mut RdmaCmEvent;
    // SAFETY: the event just made.
    let (ev, status) = unsafe { ((*eb).c.event, (*eb).c.status) };
    match failure_errno(ev, status) {
        0 => 0,
        errno => {
            set_errno(errno);
            -1
        }
    }
}

/// The errno librdmacm gives a synchronous call whose event has a status
/// (ECONNREFUSED for a reject, else the status), 0 for a status of 0.
fn failure_errno(event: u32, status: c_int) -> c_int {
    match status {
        0 => 0,
        _ if event == softroce::rdma_cm::EventType::Rejected as u32 => libc::ECONNREFUSED,
        s => s.abs(),
    }
}

/// Frees the event a synchronous id keeps.
fn ack_kept(b: &mut IdBlock) {
    if !b.c.event.is_null() {
        // SAFETY: an event from event_block, kept only here.
        unsafe { super::rdma_ack_cm_event(b.c.event) };
        b.c.event = std::ptr::null_mut();
    }
}

/// The CQs `rdma_create_qp` makes when `a` names none: one per queue,
/// each with its completion channel (librdmacm's `ucma_create_cqs`).
pub(super) fn cqs_for(b: &mut IdBlock, a: &mut IbvQpInitAttr) -> Result<(), softroce::Error> {
    let me = b as *mut IdBlock as *mut c_void;
    for (cq, ch, want, depth) in [
        (&mut b.c.recv_cq, &mut b.c.recv_cq_channel, &mut a.recv_cq, a.cap.max_recv_wr),
        (&mut b.c.send_cq, &mut b.c.send_cq_channel, &mut a.send_cq, a.cap.max_send_wr),
    ] {
        if !want.is_null() {
            continue;
        }
        // SAFETY: the id's context, of this library.
        let c = unsafe { crate::cq::ibv_create_comp_channel(b.c.verbs) };
        // SAFETY: the same context and the channel just made (NULL fails the CQ).
        let q = unsafe { crate::cq::ibv_create_cq(b.c.verbs, depth.max(1) as c_int, me, c, 0) };
        if q.is_null() {
            if !c.is_null() {
                // SAFETY: the channel just made, unused.
                unsafe { crate::cq::ibv_destroy_comp_channel(c) };
            }
            return Err(softroce::Error::Verb(roce_proto::VerbError::Invalid("rdma_create_qp: cannot make its CQs")));
        }
        (*cq, *ch, *want) = (q, c, q);
        b.made_cqs = true;
    }
    Ok(())
}

/// What goes with the id (`rdma_destroy_id`): its kept event, the CQs
/// made for it, its own channel (dropped with the block).
pub(super) fn release(b: &mut IdBlock) {
    ack_kept(b);
    if b.made_cqs {
        for (cq, ch) in [(&mut b.c.send_cq, &mut b.c.send_cq_channel), (&mut b.c.recv_cq, &mut b.c.recv_cq_channel)] {
            if !cq.is_null() {
                // SAFETY: a CQ cqs_for made, destroyed once (its QP is gone first).
                unsafe { crate::cq::ibv_destroy_cq(*cq) };
                *cq = std::ptr::null_mut();
            }
            if !ch.is_null() {
                // SAFETY: its channel, destroyed once.
                unsafe { crate::cq::ibv_destroy_comp_channel(*ch) };
                *ch = std::ptr::null_mut();
            }
        }
    }
}

ibv_export! { "RDMACM_1.0";
    /// A synchronous endpoint from `rdma_getaddrinfo`'s answer: passive
    /// (bound, for `rdma_listen` and `rdma_get_request`) or active (address
    /// and route resolved, its QP made when `qp_init_attr` is given).
    fn rdma_create_ep(id: *mut *mut RdmaCmId, res: *mut RdmaAddrinfo, pd: *mut IbvPd, qp_init_attr: *mut IbvQpInitAttr) -> c_int {
        if id.is_null() || res.is_null() {
            set_errno(libc::EINVAL);
            return -1;
        }
        // SAFETY: an rdma_addrinfo from rdma_getaddrinfo (or the caller's own).
        let r = unsafe { &*res };
        let Some(ps) = u16::try_from(r.ai_port_space).ok().and_then(PortSpace::from_value) else {
            set_errno(libc::EINVAL);
            return -1;
        };
        let b = match sync_id(ps, std::ptr::null_mut()) {
            Ok(b) => b,
            Err(e) => return fail(&e),
        };
        let c = b as *mut RdmaCmId;
        if !qp_init_attr.is_null() {
            // librdmacm: the QP's type is the address's.
            // SAFETY: the caller's init attr, writable.
            unsafe { (*qp_init_attr).qp_type = r.ai_qp_type as _ };
        }
        let ret = if r.ai_flags & RAI_PASSIVE != 0 {
            // SAFETY: the caller's source address.
            let ret = unsafe { super::rdma_bind_addr(c, r.ai_src_addr) };
            // SAFETY: a readable init attr when not NULL.
            let attr = (!qp_init_attr.is_null()).then(|| unsafe { *qp_init_attr });
            // SAFETY: the block just made.
            unsafe { (*b).template = Some(Box::new(Template { attr, pd })) };
            ret
        } else {
            let src = if r.ai_src_len > 0 { r.ai_src_addr } else { std::ptr::null_mut() };
            // SAFETY: the caller's addresses; then the id just resolved.
            let mut ret = unsafe { super::rdma_resolve_addr(c, src, r.ai_dst_addr, 2000) };
            if ret == 0 {
                // SAFETY: the id, live.
                ret = unsafe { super::rdma_resolve_route(c, 2000) };
            }
            if ret == 0 && !qp_init_attr.is_null() {
                // SAFETY: the id, live; the caller's init attr.
                ret = unsafe { super::rdma_create_qp(c, pd, qp_init_attr) };
            }
            ret
        };
        if ret != 0 {
            let errno = std::io::Error::last_os_error().raw_os_error().unwrap_or(libc::EINVAL);
            // SAFETY: the id just made, given up.
            unsafe { rdma_destroy_ep(c) };
            set_errno(errno);
            return -1;
        }
        // SAFETY: the caller passes somewhere to write the id.
        unsafe { *id = c };
        0
    }
}

ibv_export! { "RDMACM_1.0";
    /// Destroys an endpoint: its QP and SRQ, then the id (and what was made for it).
    fn rdma_destroy_ep(id: *mut RdmaCmId) {
        // SAFETY: the caller passes a live id.
        if unsafe { block(id) }.is_some_and(|b| !b.c.qp.is_null()) {
            // SAFETY: the same id.
            unsafe { super::rdma_destroy_qp(id) };
        }
        // SAFETY: the same id.
        unsafe { rdma_destroy_srq(id) };
        // SAFETY: the same id, given up.
        unsafe { super::rdma_destroy_id(id) };
    }
}

ibv_export! { "RDMACM_1.0";
    /// The next connection request of a synchronous listener, as a new
    /// synchronous id (with its QP when the endpoint was made with a
    /// `qp_init_attr`), its CONNECT_REQUEST in `id->event`.
    fn rdma_get_request(listen: *mut RdmaCmId, id: *mut *mut RdmaCmId) -> c_int {
        // SAFETY: the caller passes a live id.
        let Some(l) = (unsafe { block(listen) }) else {
            set_errno(libc::EINVAL);
            return -1;
        };
        if l.sync.is_none() || id.is_null() {
            set_errno(libc::EINVAL);
            return -1;
        }
        ack_kept(l);
        let chb = l.sync.as_mut().expect("checked");
        let cp = &mut chb.c as *mut RdmaEventChannel;
        let Some(e) = chb.ch.get_event(None) else {
            set_errno(libc::EIO);
            return -1;
        };
        let h = Handles::of(&e);
    let eb = event_block(e, cp, h);
        // SAFETY: the event just made.
        let (ev, status, child) = unsafe { ((*eb).c.event, (*eb).c.status, (*eb).c.id) };
        // librdmacm: a reject first, then a status, then anything but a request.
        let errno = match failure_errno(ev, status) {
            _ if ev == softroce::rdma_cm::EventType::Rejected as u32 => libc::ECONNREFUSED,
            0 if ev != softroce::rdma_cm::EventType::ConnectRequest as u32 => libc::EINVAL,
            errno => errno,
        };
        if errno != 0 {
            l.c.event = eb as *mut RdmaCmEvent;
            set_errno(errno);
            return -1;
        }
        if let Some(t) = l.template.as_deref()
            && let Some(mut attr) = t.attr
        {
            let pd = if t.pd.is_null() { l.c.pd } else { t.pd };
            // SAFETY: the new id, live; a copy of the endpoint's init attr.
            if unsafe { super::rdma_create_qp(child, pd, &mut attr) } != 0 {
                l.c.event = eb as *mut RdmaCmEvent;
                return -1;
            }
        }
        // SAFETY: the new id, live.
        if let Some(cb) = unsafe { block(child) } {
            cb.c.event = eb as *mut RdmaCmEvent;
        }
        // SAFETY: the caller passes somewhere to write the id.
        unsafe { *id = child };
        0
    }
}

ibv_export! { "RDMACM_1.0";
    /// Creates the id's SRQ on `pd` (NULL: the id's PD), for the QP
    /// `rdma_create_qp` makes next.
    fn rdma_create_srq(id: *mut RdmaCmId, pd: *mut IbvPd, attr: *mut IbvSrqInitAttr) -> c_int {
        // SAFETY: the caller passes a live id.
        let Some(b) = (unsafe { block(id) }) else {
            set_errno(libc::EINVAL);
            return -1;
        };
        let pd = if pd.is_null() { b.c.pd } else { pd };
        // SAFETY: a PD of this library and the caller's readable attributes.
        let srq = unsafe { crate::srq::ibv_create_srq(pd, attr) };
        if srq.is_null() {
            return -1;
        }
        b.c.srq = srq;
        0
    }
}

ibv_export! { "RDMACM_1.0";
    /// Creates the id's SRQ from extended attributes on the id's device.
    fn rdma_create_srq_ex(id: *mut RdmaCmId, attr: *mut IbvSrqInitAttrEx) -> c_int {
        // SAFETY: the caller passes a live id.
        let Some(b) = (unsafe { block(id) }) else {
            set_errno(libc::EINVAL);
            return -1;
        };
        // SAFETY: the id's context and the caller's readable attributes.
        let srq = unsafe { crate::srq::create_srq_ex(b.c.verbs, attr) };
        if srq.is_null() {
            return -1;
        }
        b.c.srq = srq;
        0
    }
}

ibv_export! { "RDMACM_1.0";
    /// Destroys the id's SRQ.
    fn rdma_destroy_srq(id: *mut RdmaCmId) {
        // SAFETY: the caller passes a live id.
        if let Some(b) = unsafe { block(id) }
            && !b.c.srq.is_null()
        {
            // SAFETY: the SRQ rdma_create_srq made, destroyed once.
            unsafe { crate::srq::ibv_destroy_srq(b.c.srq) };
            b.c.srq = std::ptr::null_mut();
        }
    }
}
