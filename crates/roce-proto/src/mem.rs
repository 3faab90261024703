//! Access to registered caller memory: the only `unsafe` of the engine.
//!
//! Verbs register memory the application owns (address and length) and the
//! HCA reads and writes it while the registration lives. A [`Region`] is that
//! promise; every access is bounds-checked against it before a byte moves.
//! Callers of [`Region::new`] (the verbs API, the C ABI) uphold the lifetime.

#![allow(unsafe_code)]

use core::ptr::NonNull;
use core::sync::atomic::{AtomicU64, Ordering};

/// An access outside a region, or a misaligned atomic.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum MemError {
    /// `offset + len` is past the end of the region (or overflows).
    #[error("access of {len} bytes at offset {offset} is outside a {region_len}-byte region")]
    OutOfBounds {
        /// Offset into the region.
        offset: u64,
        /// Bytes accessed.
        len: u64,
        /// The region's length.
        region_len: usize,
    },
    /// Atomics need an 8-byte aligned address.
    #[error("atomic at address {addr:#x} is not 8-byte aligned")]
    Misaligned {
        /// The address.
        addr: usize,
    },
}

/// A range of caller memory the engine may read and write.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Region {
    base: NonNull<u8>,
    len: usize,
}

// SAFETY: a Region is a promise by its creator that the memory stays valid
// while registered, whichever thread the engine runs on; verbs hand memory to
// the HCA (here: the driver thread) the same way.
unsafe impl Send for Region {}
// SAFETY: as above; concurrent access by the application is the race verbs
// always allow (the application must not touch memory with posted WRs), and
// the engine itself only accesses a region from the thread that owns it.
unsafe impl Sync for Region {}

impl Region {
    /// Registers `len` bytes at `addr`.
    ///
    /// # Safety
    /// `[addr, addr + len)` must be valid for reads and writes, and must stay
    /// allocated and not be moved for as long as this `Region` or a copy of it
    /// is used. The caller accepts that the engine writes it at any time while
    /// registered (as an RDMA NIC would).
    pub unsafe fn new(addr: *mut u8, len: usize) -> Option<Region> {
        let base = NonNull::new(addr)?;
        (addr as usize).checked_add(len)?;
        Some(Region { base, len })
    }

    /// A region over a buffer the caller keeps alive and does not otherwise
    /// touch while it is registered (tests and the safe API's owned buffers).
    ///
    /// # Safety
    /// As [`Region::new`]: `buf` must outlive every use of the region.
    pub unsafe fn from_slice(buf: &mut [u8]) -> Region {
        let base = NonNull::new(buf.as_mut_ptr()).unwrap_or(NonNull::dangling());
        Region { base, len: buf.len() }
    }

    /// Start address.
    pub fn addr(&self) -> usize {
        self.base.as_ptr() as usize
    }

    /// Length in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the region is empty.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    fn check(&self, offset: u64, len: usize) -> Result<usize, MemError> {
        let oob = MemError::OutOfBounds { offset, len: len as u64, region_len: self.len };
        let start = usize::try_from(offset).map_err(|_| oob)?;
        match start.checked_add(len) {
            Some(end) if end <= self.len => Ok(start),
            _ => Err(oob),
        }
    }

    /// Copies `dst.len()` bytes from `offset` into `dst`.
    pub fn read(&self, offset: u64, dst: &mut [u8]) -> Result<(), MemError> {
        let start = self.check(offset, dst.len())?;
        // SAFETY: `check` proved [start, start + dst.len()) lies inside the
        // registered range, which `new`'s contract keeps valid; `dst` is a
        // distinct Rust buffer, so the ranges do not overlap unless the caller
        // registered memory it also lent us as `dst`, which copy handles as
        // plain bytes (no references into the region are created).
        unsafe { core::ptr::copy(self.base.as_ptr().add(start), dst.as_mut_ptr(), dst.len()) };
        Ok(())
    }

    /// The `len` bytes at `offset` as a slice, for scatter-gather sends that
    /// hand registered memory to the kernel instead of copying it.
    ///
    /// # Safety
    /// For as long as the slice lives, the region must stay registered and
    /// valid and nothing may write those bytes (the device writes registered
    /// memory only through `&mut self` calls, so a caller that holds the
    /// device exclusively across the slice's life and whose application
    /// keeps verbs' rule not to touch buffers of WRs in flight meets this).
    pub unsafe fn as_slice<'a>(&self, offset: u64, len: usize) -> Result<&'a [u8], MemError> {
        let start = self.check(offset, len)?;
        // SAFETY: bounds checked; validity and the absence of writers are
        // the caller's promise above.
        Ok(unsafe { core::slice::from_raw_parts(self.base.as_ptr().add(start), len) })
    }

    /// Copies `src` to `offset`.
    pub fn write(&self, offset: u64, src: &[u8]) -> Result<(), MemError> {
        let start = self.check(offset, src.len())?;
        // SAFETY: bounds as in `read`; `copy` tolerates overlap.
        unsafe { core::ptr::copy(src.as_ptr(), self.base.as_ptr().add(start), src.len()) };
        Ok(())
    }

    /// Copies `len` bytes from `src` at `src_offset` to `self` at `offset`
    /// (local-to-local moves without a bounce buffer).
    pub fn copy_from(&self, offset: u64, src: &Region, src_offset: u64, len: usize) -> Result<(), MemError> {
        let d = self.check(offset, len)?;
        let s = src.check(src_offset, len)?;
        // SAFETY: both ranges are checked inside their regions; `copy` allows overlap.
        unsafe { core::ptr::copy(src.base.as_ptr().add(s), self.base.as_ptr().add(d), len) };
        Ok(())
    }

    fn atomic_at(&self, offset: u64) -> Result<&AtomicU64, MemError> {
        let start = self.check(offset, 8)?;
        let addr = self.addr() + start;
        if !addr.is_multiple_of(8) {
            return Err(MemError::Misaligned { addr });
        }
        // SAFETY: 8 in-bounds bytes at an 8-byte aligned address, valid for the
        // region's lifetime; AtomicU64 has the layout of u64. Other threads of
        // the application may race with it, as with an RDMA NIC's atomics.
        Ok(unsafe { AtomicU64::from_ptr(addr as *mut u64) })
    }

    /// Atomic compare-and-swap of the native-endian u64 at `offset` (atomics
    /// act on the responder host's 64-bit value, as rxe does). Returns the
    /// value found.
    pub fn compare_swap(&self, offset: u64, compare: u64, swap: u64) -> Result<u64, MemError> {
        let a = self.atomic_at(offset)?;
        Ok(match a.compare_exchange(compare, swap, Ordering::SeqCst, Ordering::SeqCst) {
            Ok(v) | Err(v) => v,
        })
    }

    /// Atomic fetch-and-add of the native-endian u64 at `offset`; returns the
    /// value found.
    pub fn fetch_add(&self, offset: u64, add: u64) -> Result<u64, MemError> {
        Ok(self.atomic_at(offset)?.fetch_add(add, Ordering::SeqCst))
    }

    /// ATOMIC WRITE (IBA 1.5): stores the 8 bytes `value` at the 8-byte
    /// aligned `offset` in one store, so an observer sees the old 8 bytes or
    /// the new ones, never a mix; with release ordering, after every write
    /// the engine made before it (rxe: `smp_store_release`).
    pub fn atomic_write(&self, offset: u64, value: [u8; 8]) -> Result<(), MemError> {
        self.atomic_at(offset)?.store(u64::from_ne_bytes(value), Ordering::Release);
        Ok(())
    }

    /// FLUSH (IBA 1.5) of `len` bytes at `offset` to global visibility. For
    /// host memory that is a memory fence: every store the engine made
    /// before it, into any region (RDMA WRITEs, SENDs, atomics), is visible
    /// to every thread and process sharing the memory before anything the
    /// engine does after it, such as sending the FLUSH's response. The range
    /// must lie in the region (an empty one anywhere up to its end).
    pub fn flush(&self, offset: u64, len: u64) -> Result<(), MemError> {
        let len = usize::try_from(len).map_err(|_| MemError::OutOfBounds { offset, len, region_len: self.len })?;
        self.check(offset, len)?;
        core::sync::atomic::fence(Ordering::SeqCst);
        Ok(())
    }
}

/// Zeroed heap memory accessed only through a raw pointer, so it can be
/// lent to the engine as a [`Region`] while the owner reads and writes it
/// between engine calls (the safe API's owned buffers, tests, benchmarks).
#[derive(Debug)]
pub struct OwnedBuffer {
    ptr: NonNull<u8>,
    len: usize,
}

// SAFETY: the buffer is a plain heap allocation owned by this value.
unsafe impl Send for OwnedBuffer {}

impl OwnedBuffer {
    /// `len` zero bytes.
    pub fn new(len: usize) -> OwnedBuffer {
        let b: Box<[u8]> = vec![0u8; len].into_boxed_slice();
        let ptr = NonNull::new(Box::into_raw(b).cast::<u8>()).unwrap_or(NonNull::dangling());
        OwnedBuffer { ptr, len }
    }

    /// Start address.
    pub fn addr(&self) -> u64 {
        self.ptr.as_ptr() as u64
    }

    /// Length.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the buffer is empty.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// A copy of `len` bytes at `off` (panics if out of bounds).
    pub fn get(&self, off: usize, len: usize) -> Vec<u8> {
        let mut v = vec![0u8; len];
        self.region_view().read(off as u64, &mut v).expect("OwnedBuffer::get in bounds");
        v
    }

    /// Writes `data` at `off` (panics if out of bounds).
    pub fn set(&mut self, off: usize, data: &[u8]) {
        self.region_view().write(off as u64, data).expect("OwnedBuffer::set in bounds");
    }

    fn region_view(&self) -> Region {
        Region { base: self.ptr, len: self.len }
    }

    /// The buffer as a region to register.
    ///
    /// # Safety
    /// The region must not be used after this buffer is dropped (deregister
    /// it, or drop the device, first).
    pub unsafe fn region(&self) -> Region {
        self.region_view()
    }
}

impl Drop for OwnedBuffer {
    fn drop(&mut self) {
        if self.len > 0 {
            // SAFETY: ptr/len come from Box::into_raw of a boxed slice of len bytes.
            drop(unsafe { Box::from_raw(core::ptr::slice_from_raw_parts_mut(self.ptr.as_ptr(), self.len)) });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bounds_are_enforced() {
        let mut buf = vec![0u8; 64];
        // SAFETY: `buf` outlives `r` in this test.
        let r = unsafe { Region::from_slice(&mut buf) };
        r.write(60, &[1, 2, 3, 4]).unwrap();
        assert!(matches!(r.write(61, &[1, 2, 3, 4]), Err(MemError::OutOfBounds { offset: 61, len: 4, .. })));
        assert!(r.write(u64::MAX, &[1]).is_err());
        let mut out = [0u8; 4];
        r.read(60, &mut out).unwrap();
        assert_eq!(out, [1, 2, 3, 4]);
        assert!(r.read(64, &mut [0u8; 1]).is_err());
        assert!(r.read(64, &mut []).is_ok());
        assert_eq!(&buf[60..], &[1, 2, 3, 4]);
    }

    #[test]
    fn atomics() {
        let mut buf = vec![0u64; 4];
        // SAFETY: the Vec<u64> outlives `r`; viewing it as bytes is sound.
        let bytes = unsafe { core::slice::from_raw_parts_mut(buf.as_mut_ptr().cast::<u8>(), 32) };
        // SAFETY: as above.
        let r = unsafe { Region::from_slice(bytes) };
        assert_eq!(r.fetch_add(8, 5).unwrap(), 0);
        assert_eq!(r.fetch_add(8, 5).unwrap(), 5);
        assert_eq!(r.compare_swap(8, 10, 99).unwrap(), 10);
        assert_eq!(r.compare_swap(8, 10, 7).unwrap(), 99);
        assert!(matches!(r.fetch_add(4, 1), Err(MemError::Misaligned { .. })));
        assert!(r.fetch_add(32, 1).is_err());
        assert_eq!(buf[1], 99);
    }
}
