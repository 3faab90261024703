//! Shared receive queues: `ibv_create_srq` (and the basic form of
//! `ibv_create_srq_ex`), `ibv_modify_srq` (size and limit), `ibv_query_srq`,
//! and `ibv_destroy_srq` (its WRs are posted by `qp::post`).

use std::ffi::{c_int, c_void};
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};

use softroce::Srq;

use crate::abi::*;
use crate::context;
use crate::errno::errno;
use crate::export::{guard, ibv_export, ptr_or_errno, set_errno};
use crate::pd::pd_obj;

/// An `ibv_srq` and the softroce SRQ behind it.
#[repr(C)]
pub(crate) struct SrqObj {
    pub(crate) c: IbvSrq,
    pub(crate) srq: Srq,
    /// QPs receiving through it (destroy is refused while any remain).
    pub(crate) users: AtomicUsize,
    pub(crate) attr: Mutex<IbvSrqAttr>,
}

/// The object behind an SRQ pointer.
///
/// # Safety
/// `srq` is NULL or an SRQ from `ibv_create_srq`, not destroyed.
pub(crate) unsafe fn srq_obj<'a>(srq: *mut IbvSrq) -> Option<&'a SrqObj> {
    // SAFETY: per the contract; `c` is the first field.
    (!srq.is_null()).then(|| unsafe { &*(srq as *const SrqObj) })
}

fn make(pd: *mut IbvPd, srq_context: *mut c_void, attr: &IbvSrqAttr) -> Result<*mut SrqObj, c_int> {
    // SAFETY: a PD from ibv_alloc_pd (checked for NULL).
    let p = unsafe { pd_obj(pd) }.ok_or(libc::EINVAL)?;
    if attr.max_wr == 0 {
        return Err(libc::EINVAL);
    }
    let srq = p.pd.create_srq(attr.max_wr, attr.max_sge.max(1)).map_err(|e| errno(&e))?;
    if attr.srq_limit > 0 {
        srq.set_limit(attr.srq_limit).map_err(|e| errno(&e))?;
    }
    p.adopt();
    let mut c = IbvSrq::default();
    c.context = p.c.context;
    c.srq_context = srq_context;
    c.pd = pd;
    c.handle = srq.handle().get();
    let handle = srq.handle();
    let o = Box::into_raw(Box::new(SrqObj { c, srq, users: AtomicUsize::new(0), attr: Mutex::new(*attr) }));
    // SAFETY: the PD's context is live.
    if let Some(b) = unsafe { context::block(p.c.context) } {
        b.objects.lock().unwrap_or_else(|p| p.into_inner()).srqs.insert(handle.get(), o as usize);
        b.events.claim(softroce::EventSource::Srq(handle));
    }
    Ok(o)
}

ibv_export! { "IBVERBS_1.1";
    /// Creates an SRQ of `attr.max_wr` WRs.
    fn ibv_create_srq(pd: *mut IbvPd, srq_init_attr: *mut IbvSrqInitAttr) -> *mut IbvSrq {
        if srq_init_attr.is_null() {
            set_errno(libc::EINVAL);
            return std::ptr::null_mut();
        }
        // SAFETY: the caller passes a readable ibv_srq_init_attr.
        let a = unsafe { &*srq_init_attr };
        ptr_or_errno(make(pd, a.srq_context, &a.attr))
    }
}

/// `verbs_context.create_srq_ex`: basic SRQs only (no XRC, no tag
/// matching, as in rxe).
pub(crate) unsafe extern "C" fn create_srq_ex(context: *mut IbvContext, attr: *mut IbvSrqInitAttrEx) -> *mut IbvSrq {
    guard("create_srq_ex", || {
        let _ = context;
        if attr.is_null() {
            set_errno(libc::EINVAL);
            return std::ptr::null_mut();
        }
        // SAFETY: the caller passes a readable ibv_srq_init_attr_ex.
        let a = unsafe { &*attr };
        let known = IBV_SRQ_INIT_ATTR_TYPE | IBV_SRQ_INIT_ATTR_PD;
        if a.comp_mask & !known != 0
            || (a.comp_mask & IBV_SRQ_INIT_ATTR_TYPE != 0 && a.srq_type != IBV_SRQT_BASIC)
            || a.comp_mask & IBV_SRQ_INIT_ATTR_PD == 0
        {
            set_errno(libc::EOPNOTSUPP);
            return std::ptr::null_mut();
        }
        ptr_or_errno(make(a.pd, a.srq_context, &a.attr))
    })
}

ibv_export! { "IBVERBS_1.1";
    /// Resizes the SRQ (`IBV_SRQ_MAX_WR`, rxe's `IBV_DEVICE_SRQ_RESIZE`)
    /// and arms the limit event (`IBV_SRQ_LIMIT`). All or nothing, with
    /// rxe's checks (`rxe_srq_chk_attr`), each EINVAL: an unknown mask bit,
    /// `max_wr` 0, past `max_srq_wr`, below the WRs posted or below the
    /// limit (the new one if both are given); a limit past the SRQ's size.
    fn ibv_modify_srq(srq: *mut IbvSrq, srq_attr: *mut IbvSrqAttr, srq_attr_mask: c_int) -> c_int {
        // SAFETY: an SRQ from ibv_create_srq (checked for NULL).
        let Some(o) = (unsafe { srq_obj(srq) }) else { return libc::EINVAL };
        if srq_attr.is_null() {
            return libc::EINVAL;
        }
        // SAFETY: the caller passes a readable ibv_srq_attr.
        let a = unsafe { &*srq_attr };
        let mask = srq_attr_mask as u32;
        let (resize, limit) = (mask & IBV_SRQ_MAX_WR as u32 != 0, mask & IBV_SRQ_LIMIT as u32 != 0);
        if mask & !(IBV_SRQ_MAX_WR as u32 | IBV_SRQ_LIMIT as u32) != 0 {
            return libc::EINVAL;
        }
        let mut kept = o.attr.lock().unwrap_or_else(|p| p.into_inner());
        let size = if resize { a.max_wr } else { kept.max_wr };
        let new_limit = if limit { a.srq_limit } else { o.srq.limit().unwrap_or(0) };
        if limit && new_limit > size {
            return libc::EINVAL;
        }
        if resize {
            if new_limit != 0 && a.max_wr < new_limit {
                return libc::EINVAL;
            }
            // Disarm first so the engine checks only the size; rearmed below.
            let armed = o.srq.limit().unwrap_or(0);
            if let Err(e) = o.srq.set_limit(0).and_then(|()| o.srq.resize(a.max_wr)) {
                let _ = o.srq.set_limit(armed);
                return errno(&e);
            }
            kept.max_wr = a.max_wr;
            if !limit && let Err(e) = o.srq.set_limit(armed) {
                return errno(&e);
            }
        }
        if limit {
            if let Err(e) = o.srq.set_limit(a.srq_limit) {
                return errno(&e);
            }
            kept.srq_limit = a.srq_limit;
        }
        0
    }
}

ibv_export! { "IBVERBS_1.1";
    /// The SRQ's size and limit.
    fn ibv_query_srq(srq: *mut IbvSrq, srq_attr: *mut IbvSrqAttr) -> c_int {
        // SAFETY: an SRQ from ibv_create_srq (checked for NULL).
        let Some(o) = (unsafe { srq_obj(srq) }) else { return libc::EINVAL };
        if srq_attr.is_null() {
            return libc::EINVAL;
        }
        let mut a = *o.attr.lock().unwrap_or_else(|p| p.into_inner());
        // The limit event disarms the limit (0), as rxe reports it.
        a.srq_limit = o.srq.limit().unwrap_or(a.srq_limit);
        // SAFETY: the caller passes a writable ibv_srq_attr.
        unsafe { srq_attr.write(a) };
        0
    }
}

ibv_export! { "IBVERBS_1.1";
    /// Destroys an SRQ; EBUSY while QPs receive through it.
    fn ibv_destroy_srq(srq: *mut IbvSrq) -> c_int {
        // SAFETY: an SRQ from ibv_create_srq (checked for NULL).
        let Some(o) = (unsafe { srq_obj(srq) }) else { return libc::EINVAL };
        if o.users.load(Ordering::Acquire) != 0 {
            return libc::EBUSY;
        }
        // SAFETY: the SRQ's PD and context outlive it.
        unsafe {
            if let Some(b) = context::block(o.c.context) {
                b.objects.lock().unwrap_or_else(|p| p.into_inner()).srqs.remove(&o.c.handle);
            }
            if let Some(p) = pd_obj(o.c.pd) {
                p.release();
            }
            drop(Box::from_raw(srq as *mut SrqObj));
        }
        0
    }
}
