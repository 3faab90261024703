//! Memory windows: the inline `ibv_alloc_mw` / `ibv_bind_mw` /
//! `ibv_dealloc_mw` (through the context's ops) and the bind description
//! that BIND_MW work requests carry.

use std::ffi::c_int;
use std::sync::atomic::{AtomicU32, Ordering};

use softroce::{AccessFlags, Mw, MwBind, MwBindInfo, MwType};

use crate::abi::*;
use crate::errno::errno;
use crate::export::{guard, set_errno};
use crate::pd::{MrObj, pd_obj};

/// An `ibv_mw` and the softroce window behind it.
#[repr(C)]
pub(crate) struct MwObj {
    pub(crate) c: IbvMw,
    pub(crate) mw: Mw,
    /// The window's R_Key once the binds posted so far have run: what the
    /// next BIND_MW names it by. A type 2 bind (`ibv_wr_bind_mw`, or a
    /// BIND_MW WR) changes the key's low byte without touching the C
    /// `rkey` (rdma-core's providers leave it too), and the engine finds a
    /// window to bind by its whole current key.
    pub(crate) key: AtomicU32,
}

/// A BIND_MW work request's bind: window `mw` (by its current key) gets key
/// `rkey` over `info`'s range of `info.mr` (NULL `mr` with length 0 unbinds).
/// Once the WR is posted, [`bind_posted`] records the window's new key.
pub(crate) fn bind_of(mw: *mut IbvMw, rkey: u32, info: &IbvMwBindInfo) -> Result<MwBind, c_int> {
    if mw.is_null() {
        return Err(libc::EINVAL);
    }
    // SAFETY: an MW from ibv_alloc_mw (checked for NULL).
    let m = unsafe { &*(mw as *const MwObj) };
    let mr_key = if info.mr.is_null() {
        0
    } else {
        // SAFETY: an MR from ibv_reg_mr.
        unsafe { &*(info.mr as *const MrObj) }.c.lkey
    };
    Ok(MwBind {
        mw_key: m.key.load(Ordering::Acquire),
        new_key: rkey,
        info: MwBindInfo { mr_key, addr: info.addr, length: info.length, access: AccessFlags(info.mw_access_flags) },
    })
}

/// Records that a BIND_MW WR made by [`bind_of`] for the window at address
/// `mw` was posted: the window's key is the bind's new key from now on.
pub(crate) fn bind_posted(mw: usize, b: &MwBind) {
    if mw == 0 {
        return;
    }
    // SAFETY: the address of a live window (bind_of checked it; the
    // application deallocates it only after its binds were posted).
    let m = unsafe { &*(mw as *const MwObj) };
    m.key.store((b.mw_key & !0xff) | (b.new_key & 0xff), Ordering::Release);
}

/// `ops.alloc_mw`.
pub(crate) unsafe extern "C" fn alloc_mw(pd: *mut IbvPd, ty: u32) -> *mut IbvMw {
    guard("alloc_mw", || {
        // SAFETY: a PD from ibv_alloc_pd (checked for NULL).
        let Some(p) = (unsafe { pd_obj(pd) }) else {
            set_errno(libc::EINVAL);
            return std::ptr::null_mut();
        };
        let t = match ty {
            1 => Some(MwType::Type1),
            2 => Some(MwType::Type2),
            _ => None,
        };
        let Some(t) = t else {
            set_errno(libc::EINVAL);
            return std::ptr::null_mut();
        };
        match p.pd.alloc_mw(t) {
            Ok(mw) => {
                p.adopt();
                let c = IbvMw { context: p.c.context, pd, rkey: mw.rkey(), handle: mw.rkey() >> 8, type_: ty as _ };
                let key = AtomicU32::new(mw.rkey());
                Box::into_raw(Box::new(MwObj { c, mw, key })) as *mut IbvMw
            }
            Err(e) => {
                set_errno(errno(&e));
                std::ptr::null_mut()
            }
        }
    })
}

/// `ops.dealloc_mw`.
pub(crate) unsafe extern "C" fn dealloc_mw(mw: *mut IbvMw) -> c_int {
    guard("dealloc_mw", || {
        if mw.is_null() {
            return libc::EINVAL;
        }
        // SAFETY: an MW from alloc_mw; the caller gives it up.
        let o = unsafe { Box::from_raw(mw as *mut MwObj) };
        // SAFETY: the window's PD outlives it.
        if let Some(p) = unsafe { pd_obj(o.c.pd) } {
            p.release();
        }
        drop(o);
        0
    })
}
