//! rdma-core 65's buffer and registration verbs: `ibv_alloc_buf`,
//! `ibv_reg_buf_mr`, `ibv_free_buf`, `ibv_export_buf_dmabuf_fd` (1.17,
//! 1.18), `ibv_reg_mr_ex` (1.15), and the DMA-handle and device-memory
//! dma-buf verbs (1.15, 1.16).
//!
//! rxe has no allocator of its own, so rdma-core gives it the default one:
//! page-aligned heap memory with no dma-buf behind it. softroce does the
//! same, and `ibv_reg_mr_ex` checks its attributes in rdma-core's order
//! (`verbs.c` and the default `reg_mr_ex` of `dummy_ops.c`) before it
//! registers through the same path as `ibv_reg_mr`.

use std::ffi::{c_int, c_void};

use crate::abi::{IbvContext, IbvMr, IbvMrInitAttr, IbvPd};
use crate::export::{ibv_export, set_errno, trace_err};

/// `IBV_REG_MR_MASK_*` (`enum ibv_mr_init_attr_mask`).
const MASK_IOVA: u64 = 1 << 0;
const MASK_ADDR: u64 = 1 << 1;
const MASK_FD: u64 = 1 << 2;
const MASK_FD_OFFSET: u64 = 1 << 3;
// 1 << 4 is IBV_REG_MR_MASK_DMAH: refused below with the unknown bits.
const MASK_BUF: u64 = 1 << 5;

/// rdma-core's `struct ibv_buf` (`driver.h`; opaque to programs): the
/// handle `ibv_alloc_buf` gives out.
#[repr(C)]
struct Buf {
    pd: *mut IbvPd,
    addr: *mut c_void,
    size: usize,
    /// -1: no dma-buf behind it (always, here).
    dmabuf_fd: c_int,
}

fn fail<T>(verb: &str, errno: c_int, why: &str) -> *mut T {
    trace_err(verb, &why);
    set_errno(errno);
    std::ptr::null_mut()
}

ibv_export! { "IBVERBS_1.17";
    /// `size` bytes of page-aligned memory for `pd`, and its handle in
    /// `*buf`; NULL with `errno` set on failure.
    fn ibv_alloc_buf(pd: *mut IbvPd, size: usize, buf: *mut *mut c_void) -> *mut c_void {
        if pd.is_null() || buf.is_null() {
            return fail("ibv_alloc_buf", libc::EINVAL, "NULL pd or handle pointer");
        }
        // SAFETY: sysconf has no preconditions.
        let page = usize::try_from(unsafe { libc::sysconf(libc::_SC_PAGESIZE) }).unwrap_or(4096);
        let mut ptr = std::ptr::null_mut();
        // SAFETY: `ptr` is a valid out-pointer; the alignment is a power of two.
        let r = unsafe { libc::posix_memalign(&mut ptr, page, size) };
        if r != 0 {
            return fail("ibv_alloc_buf", r, "posix_memalign failed");
        }
        let handle = Box::into_raw(Box::new(Buf { pd, addr: ptr, size, dmabuf_fd: -1 }));
        // SAFETY: the caller's out-pointer (checked for NULL).
        unsafe { *buf = handle.cast() };
        ptr
    }
}

ibv_export! { "IBVERBS_1.17";
    /// Frees a buffer and its handle from `ibv_alloc_buf`.
    fn ibv_free_buf(buf: *mut c_void) {
        if buf.is_null() {
            return;
        }
        // SAFETY: a handle from ibv_alloc_buf, freed once (the caller's contract).
        let b = unsafe { Box::from_raw(buf.cast::<Buf>()) };
        // SAFETY: memory from posix_memalign.
        unsafe { libc::free(b.addr) };
    }
}

ibv_export! { "IBVERBS_1.18";
    /// A dma-buf fd for the buffer: none backs heap memory, so -1 with
    /// `errno = ENODATA`, as rdma-core answers for such a buffer.
    fn ibv_export_buf_dmabuf_fd(buf: *mut c_void) -> c_int {
        // SAFETY: a handle from ibv_alloc_buf (checked for NULL).
        let Some(b) = (unsafe { buf.cast::<Buf>().as_ref() }) else {
            set_errno(libc::EINVAL);
            return -1;
        };
        if b.dmabuf_fd < 0 {
            trace_err("ibv_export_buf_dmabuf_fd", &"the buffer is heap memory, not a dma-buf (ENODATA)");
            set_errno(libc::ENODATA);
            return -1;
        }
        // SAFETY: fcntl on an fd we own; a new descriptor for the caller.
        unsafe { libc::fcntl(b.dmabuf_fd, libc::F_DUPFD_CLOEXEC, 0) }
    }
}

ibv_export! { "IBVERBS_1.17";
    /// Registers `[addr, addr+length)`, which must lie inside `buf`.
    fn ibv_reg_buf_mr(pd: *mut IbvPd, buf: *mut c_void, addr: *mut c_void, length: usize, access: c_int) -> *mut IbvMr {
        let attr = IbvMrInitAttr {
            length,
            access,
            comp_mask: MASK_BUF | MASK_ADDR,
            iova: 0,
            addr,
            fd: -1,
            fd_offset: 0,
            dmah: std::ptr::null_mut(),
            buf,
        };
        reg_mr_ex(pd, &attr)
    }
}

ibv_export! { "IBVERBS_1.15";
    /// Registers memory described by an `ibv_mr_init_attr`: an address
    /// (with an optional iova), an `ibv_alloc_buf` buffer, or a dma-buf fd.
    fn ibv_reg_mr_ex(pd: *mut IbvPd, attr: *mut IbvMrInitAttr) -> *mut IbvMr {
        // SAFETY: the caller's attributes (checked for NULL), read only.
        let Some(attr) = (unsafe { attr.as_ref() }) else {
            return fail("ibv_reg_mr_ex", libc::EINVAL, "NULL attributes");
        };
        reg_mr_ex(pd, attr)
    }
}

/// `ibv_reg_mr_ex`'s checks, in rdma-core's order, then the registration.
fn reg_mr_ex(pd: *mut IbvPd, attr: &IbvMrInitAttr) -> *mut IbvMr {
    const VERB: &str = "ibv_reg_mr_ex";
    if pd.is_null() {
        return fail(VERB, libc::EINVAL, "NULL pd");
    }
    let mut mask = attr.comp_mask;
    if mask & MASK_BUF != 0 {
        // SAFETY: a handle from ibv_alloc_buf (checked for NULL).
        let Some(b) = (unsafe { attr.buf.cast::<Buf>().as_ref() }) else {
            return fail(VERB, libc::EINVAL, "IBV_REG_MR_MASK_BUF without a buffer");
        };
        let (base, addr) = (b.addr as usize, attr.addr as usize);
        let inside = addr >= base && addr - base <= b.size && attr.length <= b.size - (addr - base);
        if b.pd != pd || mask & MASK_ADDR == 0 || !inside || mask & (MASK_FD | MASK_FD_OFFSET) != 0 {
            return fail(VERB, libc::EINVAL, "the range is not inside the buffer, or the buffer is another PD's");
        }
        mask &= !MASK_BUF;
    }
    if mask & !(MASK_IOVA | MASK_ADDR | MASK_FD | MASK_FD_OFFSET) != 0 {
        // DMA handles (TPH steering) and unknown bits: what the default
        // reg_mr_ex of a provider without its own refuses.
        return fail(VERB, libc::EOPNOTSUPP, "a DMA handle or unknown comp_mask bits");
    }
    if mask & MASK_FD != 0 {
        if mask & MASK_ADDR != 0 || mask & MASK_FD_OFFSET == 0 || mask & MASK_IOVA == 0 {
            return fail(VERB, libc::EINVAL, "a dma-buf needs FD, FD_OFFSET and IOVA, and no ADDR");
        }
        return fail(VERB, libc::EOPNOTSUPP, "dma-buf memory cannot be registered (as ibv_reg_dmabuf_mr)");
    }
    if mask & MASK_ADDR == 0 || mask & MASK_FD_OFFSET != 0 {
        return fail(VERB, libc::EINVAL, "neither an address nor a dma-buf");
    }
    let iova = if mask & MASK_IOVA != 0 { attr.iova } else { attr.addr as u64 };
    crate::pd::reg(pd, attr.addr, attr.length, iova, attr.access)
}

ibv_export! { "IBVERBS_1.15";
    /// A DMA handle (PCIe TLP processing hints): a software device has
    /// none, as rxe (NULL, `errno = EOPNOTSUPP`).
    fn ibv_alloc_dmah(_context: *mut IbvContext, _attr: *mut c_void) -> *mut c_void {
        fail("ibv_alloc_dmah", libc::EOPNOTSUPP, "no DMA handles on a software device")
    }
}

ibv_export! { "IBVERBS_1.15";
    /// Frees a DMA handle: none can exist (returns `EOPNOTSUPP`, as rxe).
    fn ibv_dealloc_dmah(_dmah: *mut c_void) -> c_int {
        libc::EOPNOTSUPP
    }
}

ibv_export! { "IBVERBS_1.16";
    /// A dma-buf fd for device memory: softroce allocates none
    /// (`ibv_alloc_dm` fails), so -1 with `errno = EOPNOTSUPP`.
    fn ibv_dm_export_dmabuf_fd(_dm: *mut c_void) -> c_int {
        set_errno(libc::EOPNOTSUPP);
        -1
    }
}
