//! Protection domains and memory regions (`ibv_alloc_pd`, `ibv_reg_mr`
//! and the iova variants, `ibv_rereg_mr`, `ibv_dereg_mr`).
//!
//! A PD counts the objects made in it, so `ibv_dealloc_pd` fails with
//! EBUSY while any remain, as the kernel's reference counts make it do.

use std::ffi::{c_int, c_uint, c_void};
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};

use softroce::{AccessFlags, Mr, Pd};

use crate::abi::rdma_core_45::{IBV_ACCESS_FLUSH_GLOBAL, IBV_ACCESS_FLUSH_PERSISTENT};
use crate::abi::*;
use crate::context;
use crate::errno::errno;
use crate::export::{ibv_export, set_errno};

/// An `ibv_pd` and the softroce PD behind it.
#[repr(C)]
pub(crate) struct PdObj {
    pub(crate) c: IbvPd,
    pub(crate) pd: Pd,
    /// MRs, MWs, QPs, SRQs and AHs made in this PD and not yet destroyed.
    pub(crate) children: AtomicUsize,
}

/// The object behind a PD pointer.
///
/// # Safety
/// `pd` is NULL or a PD from `ibv_alloc_pd`, not deallocated.
pub(crate) unsafe fn pd_obj<'a>(pd: *mut IbvPd) -> Option<&'a PdObj> {
    // SAFETY: per the contract; `c` is the first field of a repr(C) PdObj.
    (!pd.is_null()).then(|| unsafe { &*(pd as *const PdObj) })
}

impl PdObj {
    pub(crate) fn adopt(&self) {
        self.children.fetch_add(1, Ordering::AcqRel);
    }
    pub(crate) fn release(&self) {
        self.children.fetch_sub(1, Ordering::AcqRel);
    }
}

ibv_export! { "IBVERBS_1.1";
    /// Allocates a protection domain.
    fn ibv_alloc_pd(context: *mut IbvContext) -> *mut IbvPd {
        // SAFETY: a context from ibv_open_device (checked for NULL).
        let Some(b) = (unsafe { context::block(context) }) else {
            set_errno(libc::EINVAL);
            return std::ptr::null_mut();
        };
        match b.ctx.alloc_pd() {
            Ok(pd) => {
                let c = IbvPd { context, handle: pd.handle().get() };
                Box::into_raw(Box::new(PdObj { c, pd, children: AtomicUsize::new(0) })) as *mut IbvPd
            }
            Err(e) => {
                set_errno(errno(&e));
                std::ptr::null_mut()
            }
        }
    }
}

ibv_export! { "IBVERBS_1.1";
    /// Deallocates a PD; EBUSY while objects remain in it.
    fn ibv_dealloc_pd(pd: *mut IbvPd) -> c_int {
        // SAFETY: a PD from ibv_alloc_pd (checked for NULL).
        let Some(p) = (unsafe { pd_obj(pd) }) else { return libc::EINVAL };
        if p.children.load(Ordering::Acquire) != 0 {
            return libc::EBUSY;
        }
        // SAFETY: made by Box::into_raw in ibv_alloc_pd; the caller gives it up.
        drop(unsafe { Box::from_raw(pd as *mut PdObj) });
        0
    }
}

/// An `ibv_mr` and the softroce region behind it.
#[repr(C)]
pub(crate) struct MrObj {
    pub(crate) c: IbvMr,
    /// Replaced by `ibv_rereg_mr` (same keys, new handle).
    pub(crate) mr: Mutex<Mr>,
}

/// Access bits the engine takes: the classic six, `ON_DEMAND` (every
/// region is on demand: softroce never pins memory) and the FLUSH placement
/// types of rdma-core 45 (the engine refuses `FLUSH_PERSISTENT` with
/// EINVAL, as rxe does for memory that is not pmem).
const ACCESS_KNOWN: u32 = 0x3f | IBV_ACCESS_ON_DEMAND | IBV_ACCESS_FLUSH_GLOBAL | IBV_ACCESS_FLUSH_PERSISTENT;
/// The optional hints (relaxed ordering, optional range) are accepted and
/// ignored, as rxe ignores them.
const ACCESS_HINTS: u32 = IBV_ACCESS_RELAXED_ORDERING | IBV_ACCESS_OPTIONAL_RANGE;
/// Access bits of features softroce does not have: huge-page backing
/// (meant for explicit ODP on NICs with huge-page translation; rxe has
/// none): EOPNOTSUPP, as the kernel answers for a device without it.
const ACCESS_UNSUPPORTED: u32 = IBV_ACCESS_HUGETLB;

/// Whether a registration asks for an implicit on-demand region: `addr`
/// NULL and `length` `SIZE_MAX` with `ON_DEMAND`. Refused with EINVAL, as
/// rxe does (it has no `IBV_ODP_SUPPORT_IMPLICIT`): a region over the whole
/// address space would let a peer holding its R_Key fault any address of
/// the process, mapped or not.
fn implicit_odp(addr: *mut c_void, length: usize, access: u32) -> bool {
    addr.is_null() && length == usize::MAX && access & IBV_ACCESS_ON_DEMAND != 0
}

pub(crate) fn reg(pd: *mut IbvPd, addr: *mut c_void, length: usize, iova: u64, access: c_int) -> *mut IbvMr {
    // SAFETY: a PD from ibv_alloc_pd (checked for NULL).
    let Some(p) = (unsafe { pd_obj(pd) }) else {
        set_errno(libc::EINVAL);
        return std::ptr::null_mut();
    };
    let access = access as u32;
    if access & !(ACCESS_KNOWN | ACCESS_HINTS | ACCESS_UNSUPPORTED) != 0 || implicit_odp(addr, length, access) {
        // Bits no kernel knows (ib_check_mr_access says EINVAL), or an
        // implicit ODP region (see `implicit_odp`).
        set_errno(libc::EINVAL);
        return std::ptr::null_mut();
    }
    if access & ACCESS_UNSUPPORTED != 0 || iova != addr as u64 {
        // Known features softroce lacks, or an I/O virtual address other
        // than the buffer's (softroce's regions are addressed by their VA).
        set_errno(libc::EOPNOTSUPP);
        return std::ptr::null_mut();
    }
    // SAFETY: ibv_reg_mr's contract: the caller keeps [addr, addr+length)
    // mapped until ibv_dereg_mr, and accepts that the device and remote
    // peers (per `access`) read and write it meanwhile.
    match unsafe { p.pd.reg_mr_raw(addr as *mut u8, length, AccessFlags(access & ACCESS_KNOWN)) } {
        Ok(mr) => {
            p.adopt();
            let c =
                IbvMr { context: p.c.context, pd, addr, length, handle: mr.lkey(), lkey: mr.lkey(), rkey: mr.rkey() };
            Box::into_raw(Box::new(MrObj { c, mr: Mutex::new(mr) })) as *mut IbvMr
        }
        Err(e) => {
            set_errno(errno(&e));
            std::ptr::null_mut()
        }
    }
}

ibv_export! { "IBVERBS_1.1";
    /// Registers `[addr, addr+length)` with `access`.
    fn ibv_reg_mr(pd: *mut IbvPd, addr: *mut c_void, length: usize, access: c_int) -> *mut IbvMr {
        reg(pd, addr, length, addr as u64, access)
    }
}

ibv_export! { "IBVERBS_1.7";
    /// `ibv_reg_mr` with an I/O virtual address (only `iova == addr`).
    fn ibv_reg_mr_iova(pd: *mut IbvPd, addr: *mut c_void, length: usize, iova: u64, access: c_int) -> *mut IbvMr {
        reg(pd, addr, length, iova, access)
    }
}

ibv_export! { "IBVERBS_1.8";
    /// What the `ibv_reg_mr` macro calls when `access` is not a constant.
    fn ibv_reg_mr_iova2(pd: *mut IbvPd, addr: *mut c_void, length: usize, iova: u64, access: u32) -> *mut IbvMr {
        reg(pd, addr, length, iova, access as c_int)
    }
}

ibv_export! { "IBVERBS_1.1";
    /// Deregisters a region; EBUSY while memory windows are bound to it.
    fn ibv_dereg_mr(mr: *mut IbvMr) -> c_int {
        if mr.is_null() {
            return libc::EINVAL;
        }
        // SAFETY: an MR from ibv_reg_mr; `c` is the first field of MrObj.
        let o = unsafe { &*(mr as *const MrObj) };
        if let Err(e) = o.mr.lock().unwrap_or_else(|p| p.into_inner()).deregister() {
            return errno(&e);
        }
        // SAFETY: a PD outlives its MRs (dealloc_pd refuses otherwise).
        if let Some(p) = unsafe { pd_obj(o.c.pd) } {
            p.release();
        }
        // SAFETY: made by Box::into_raw in reg; the caller gives it up.
        drop(unsafe { Box::from_raw(mr as *mut MrObj) });
        0
    }
}

ibv_export! { "IBVERBS_1.1";
    /// Re-registers a region with any combination of
    /// `IBV_REREG_MR_CHANGE_TRANSLATION` / `_PD` / `_ACCESS`. The keys stay
    /// (rxe 6.x keeps them for PD and access; rxe refuses a new translation
    /// with EOPNOTSUPP, softroce moves the region, keys kept, as NICs that
    /// re-register in place do). Errors as rdma-core's `ibv_rereg_mr`:
    /// `IBV_REREG_MR_ERR_INPUT` (errno EINVAL) for unknown flags, a
    /// translation without address or length, or access without
    /// `_CHANGE_ACCESS`; `IBV_REREG_MR_ERR_CMD` for what the kernel refuses
    /// (errno, which rdma-core leaves unset, says why: EINVAL for no flag,
    /// no PD or another device's, bad access or a different iova;
    /// EOPNOTSUPP for access softroce lacks; EBUSY with windows bound). The
    /// region is unchanged after any error.
    fn ibv_rereg_mr(mr: *mut IbvMr, flags: c_int, pd: *mut IbvPd, addr: *mut c_void, length: usize, access: c_int) -> c_int {
        let input = |e| {
            set_errno(e);
            IBV_REREG_MR_ERR_INPUT as c_int
        };
        let cmd = |e| {
            set_errno(e);
            IBV_REREG_MR_ERR_CMD as c_int
        };
        if mr.is_null() {
            return input(libc::EINVAL);
        }
        let (translation, new_pd, new_access) = (
            flags & IBV_REREG_MR_CHANGE_TRANSLATION != 0,
            flags & IBV_REREG_MR_CHANGE_PD != 0,
            flags & IBV_REREG_MR_CHANGE_ACCESS != 0,
        );
        if flags & !IBV_REREG_MR_FLAGS_SUPPORTED != 0
            || (translation && (length == 0 || addr.is_null()))
            || (access != 0 && !new_access)
        {
            return input(libc::EINVAL);
        }
        if flags == 0 {
            // The kernel's ib_uverbs_rereg_mr: no flag is EINVAL.
            return cmd(libc::EINVAL);
        }
        // SAFETY: an MR from ibv_reg_mr; `c` is the first field of MrObj.
        let o = unsafe { &*(mr as *const MrObj) };
        let target = if new_pd {
            // SAFETY: a PD from ibv_alloc_pd, or NULL (refused).
            match unsafe { pd_obj(pd) } {
                Some(p) => Some(p),
                None => return cmd(libc::EINVAL),
            }
        } else {
            None
        };
        let access_flags = if new_access {
            let a = access as u32;
            if a & !(ACCESS_KNOWN | ACCESS_HINTS | ACCESS_UNSUPPORTED) != 0 {
                return cmd(libc::EINVAL);
            }
            if a & ACCESS_UNSUPPORTED != 0 {
                return cmd(libc::EOPNOTSUPP);
            }
            Some(AccessFlags(a & ACCESS_KNOWN))
        } else {
            None
        };
        let mem = translation.then_some((addr as *mut u8, length));
        let mut cur = o.mr.lock().unwrap_or_else(|p| p.into_inner());
        // SAFETY: ibv_rereg_mr's contract, as ibv_reg_mr's for the new range.
        match unsafe { cur.rereg_raw(target.map(|p| &p.pd), mem, access_flags) } {
            Ok(new) => {
                *cur = new;
                if let Some(p) = target {
                    p.adopt();
                    // SAFETY: the old PD outlives its MRs (dealloc refuses otherwise).
                    if let Some(old) = unsafe { pd_obj(o.c.pd) } {
                        old.release();
                    }
                }
                // SAFETY: `mr` is the application's ibv_mr, which it does
                // not use while re-registering it; rdma-core writes these
                // fields the same way.
                unsafe {
                    if target.is_some() {
                        (*mr).pd = pd;
                        (*mr).context = (*pd).context;
                    }
                    if translation {
                        (*mr).addr = addr;
                        (*mr).length = length;
                    }
                    (*mr).lkey = cur.lkey();
                    (*mr).rkey = cur.rkey();
                }
                0
            }
            Err(e) => cmd(errno(&e)),
        }
    }
}

/// Why [`advise_mr`] refuses its arguments before looking at the regions.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum AdviseArgs {
    /// An advice `enum ibv_advise_mr_advice` does not define: EOPNOTSUPP,
    /// as rxe's `rxe_ib_advise_mr` and the man page's ENOTSUP say.
    UnknownAdvice,
    /// Flags other than `IBV_ADVISE_MR_FLAG_FLUSH` (the kernel's uverbs
    /// refuses them with EINVAL), no SGE, or a NULL list.
    Invalid,
}

/// Checks `ibv_advise_mr`'s advice, flags and list shape.
fn advise_args(advice: u32, flags: u32, has_list: bool, num_sge: u32) -> Result<softroce::Advice, AdviseArgs> {
    let a = softroce::Advice::from_raw(advice).ok_or(AdviseArgs::UnknownAdvice)?;
    if flags & !IBV_ADVISE_MR_FLAG_FLUSH != 0 || num_sge == 0 || !has_list {
        return Err(AdviseArgs::Invalid);
    }
    Ok(a)
}

/// The errno of an `ibv_advise_mr` failure.
fn advise_errno(e: &softroce::Error) -> c_int {
    use softroce::AdviseError as A;
    match e {
        softroce::Error::Advise(A::NotWritable(_)) => libc::EPERM,
        softroce::Error::Advise(_) => libc::EINVAL,
        e => errno(e),
    }
}

/// `verbs_context.advise_mr` (what the inline `ibv_advise_mr` calls):
/// prefetch advice for ranges of `ON_DEMAND` regions of `pd`. Each SGE's
/// lkey must name such a region of this PD and its range lie inside it
/// (EINVAL; rxe's `lookup_mr` refuses unknown keys the same way),
/// PREFETCH_WRITE needs a writable region (EPERM, as rxe); flags other
/// than `IBV_ADVISE_MR_FLAG_FLUSH` or an empty list are EINVAL, an unknown
/// advice EOPNOTSUPP. Past the checks nothing is done: softroce never pins
/// memory, so user memory in a user-space stack is naturally on demand and
/// a prefetch (synchronous or not) is a no-op that succeeds.
pub(crate) unsafe extern "C" fn advise_mr(
    pd: *mut IbvPd,
    advice: c_uint,
    flags: u32,
    sg_list: *mut IbvSge,
    num_sge: u32,
) -> c_int {
    crate::export::guard("advise_mr", || {
        // SAFETY: a PD from ibv_alloc_pd (checked for NULL).
        let Some(p) = (unsafe { pd_obj(pd) }) else { return libc::EINVAL };
        let a = match advise_args(advice, flags, !sg_list.is_null(), num_sge) {
            Ok(a) => a,
            Err(AdviseArgs::UnknownAdvice) => return libc::EOPNOTSUPP,
            Err(AdviseArgs::Invalid) => return libc::EINVAL,
        };
        // SAFETY: the caller's list has num_sge readable entries (checked non-NULL).
        let list = unsafe { std::slice::from_raw_parts(sg_list, num_sge as usize) };
        let sges: Vec<softroce::Sge> =
            list.iter().map(|g| softroce::Sge { addr: g.addr, length: g.length, lkey: g.lkey }).collect();
        match p.pd.advise_mr(a, &sges) {
            Ok(()) => 0,
            Err(e) => {
                crate::export::trace_err("ibv_advise_mr", &e);
                advise_errno(&e)
            }
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn advise_args_checked() {
        assert_eq!(advise_args(0, 0, true, 1), Ok(softroce::Advice::Prefetch));
        assert_eq!(advise_args(1, IBV_ADVISE_MR_FLAG_FLUSH, true, 3), Ok(softroce::Advice::PrefetchWrite));
        assert_eq!(advise_args(2, 0, true, 1), Ok(softroce::Advice::PrefetchNoFault));
        assert_eq!(advise_args(3, 0, true, 1), Err(AdviseArgs::UnknownAdvice));
        assert_eq!(advise_args(0, 2, true, 1), Err(AdviseArgs::Invalid), "unknown flag");
        assert_eq!(advise_args(0, 0, true, 0), Err(AdviseArgs::Invalid), "no SGE");
        assert_eq!(advise_args(0, 0, false, 1), Err(AdviseArgs::Invalid), "NULL list");
    }

    #[test]
    fn advise_errnos() {
        use softroce::{AdviseError as A, Error as E};
        assert_eq!(advise_errno(&E::Advise(A::NotWritable(1))), libc::EPERM);
        for a in [A::NoSge, A::BadKey(1), A::NotOnDemand(1), A::OutOfRange { lkey: 1, addr: 0, len: 1 }] {
            assert_eq!(advise_errno(&E::Advise(a)), libc::EINVAL, "{a:?}");
        }
    }

    #[test]
    fn implicit_odp_refused() {
        let odp = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_ON_DEMAND;
        assert!(implicit_odp(std::ptr::null_mut(), usize::MAX, odp));
        assert!(!implicit_odp(std::ptr::null_mut(), usize::MAX, IBV_ACCESS_LOCAL_WRITE));
        assert!(!implicit_odp(std::ptr::null_mut(), 4096, odp));
    }
}
