//! The crate's only `unsafe` code: mapping the device file and the
//! byte-range (OFD) locks that tell live members from dead ones.
#![allow(unsafe_code)]

use std::fs::File;
use std::io;
use std::os::fd::AsRawFd;
use std::ptr::NonNull;
use std::sync::atomic::AtomicU64;

/// A shared, writable mapping of a whole file, seen as 64-bit atomics.
pub(crate) struct Mapping {
    ptr: NonNull<AtomicU64>,
    words: usize,
}

// SAFETY: the mapping is only ever accessed through `&[AtomicU64]`, which
// is Sync; the pointer itself is not tied to a thread.
unsafe impl Send for Mapping {}
// SAFETY: as above.
unsafe impl Sync for Mapping {}

impl Mapping {
    /// Maps the first `words` 64-bit words of `file` (which must be at
    /// least that long) shared and writable.
    pub(crate) fn new(file: &File, words: usize) -> io::Result<Mapping> {
        Ok(Mapping { ptr: map_shared(file, 0, words * 8)?.cast::<AtomicU64>(), words })
    }

    /// The words. Other processes change them at any time: every access is
    /// atomic, and every value read is validated before it is trusted.
    pub(crate) fn words(&self) -> &[AtomicU64] {
        // SAFETY: `ptr` is page aligned (so 8-byte aligned), valid for
        // `words` words for the mapping's lifetime, and only accessed as
        // atomics, so concurrent writers in other processes are no data race.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.words) }
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: unmaps exactly the mapping made in `new`; no reference
        // from `words` outlives `self`.
        let _ = unsafe { rustix::mm::munmap(self.ptr.as_ptr().cast(), self.words * 8) };
    }
}

/// Maps `len` bytes of `file` from `offset` (page aligned) shared and
/// writable. The caller keeps the file at least `offset + len` long and
/// unmaps exactly this range.
fn map_shared(file: &File, offset: u64, len: usize) -> io::Result<NonNull<u8>> {
    // SAFETY: a fresh mapping chosen by the kernel (no address hint) of a
    // range the caller made the file cover; nothing else in this process
    // aliases it.
    let p = unsafe {
        rustix::mm::mmap(
            std::ptr::null_mut(),
            len,
            rustix::mm::ProtFlags::READ | rustix::mm::ProtFlags::WRITE,
            rustix::mm::MapFlags::SHARED,
            file,
            offset,
        )
    }?;
    NonNull::new(p.cast::<u8>()).ok_or_else(|| io::Error::other("mmap returned null"))
}

/// `fcntl(F_OFD_SETLK | F_OFD_GETLK)` on one byte at `offset`.
fn ofd(file: &File, cmd: libc::c_int, kind: libc::c_short, offset: u64) -> io::Result<libc::flock> {
    // SAFETY: `flock` is plain data; all-zero is a valid value.
    let mut fl: libc::flock = unsafe { std::mem::zeroed() };
    fl.l_type = kind;
    fl.l_whence = libc::SEEK_SET as libc::c_short;
    fl.l_start = libc::off_t::try_from(offset).map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))?;
    fl.l_len = 1;
    // SAFETY: `fl` is a valid `struct flock` the call reads (and, for
    // F_OFD_GETLK, writes); the fd is open for the call's duration.
    let rc = unsafe { libc::fcntl(file.as_raw_fd(), cmd, std::ptr::from_mut(&mut fl)) };
    if rc < 0 { Err(io::Error::last_os_error()) } else { Ok(fl) }
}

/// Takes a write lock on byte `offset` of `file` for as long as this open
/// file description lives (an OFD lock: per open, not per process, and
/// released by the kernel when the last descriptor closes, also at a crash).
pub(crate) fn hold_byte(file: &File, offset: u64) -> io::Result<bool> {
    match ofd(file, libc::F_OFD_SETLK, libc::F_WRLCK as libc::c_short, offset) {
        Ok(_) => Ok(true),
        Err(e) if matches!(e.raw_os_error(), Some(libc::EAGAIN | libc::EACCES)) => Ok(false),
        Err(e) => Err(e),
    }
}

/// Whether another open file description holds a lock on byte `offset`.
pub(crate) fn byte_held(file: &File, offset: u64) -> io::Result<bool> {
    let fl = ofd(file, libc::F_OFD_GETLK, libc::F_WRLCK as libc::c_short, offset)?;
    Ok(fl.l_type != libc::F_UNLCK as libc::c_short)
}

/// A shared, writable mapping of `len` bytes of a file from `offset` (page
/// aligned), for the inboxes' lanes ([`crate::inbox`]): 64-bit words
/// reached as atomics, bytes copied in and out with raw copies, never
/// through a Rust reference, since another process writes them at any time.
pub(crate) struct ByteMap {
    ptr: NonNull<u8>,
    len: usize,
}

// SAFETY: the bytes are only reached through atomics and raw copies, which
// any thread may make; the pointer itself is not tied to a thread.
unsafe impl Send for ByteMap {}
// SAFETY: as above.
unsafe impl Sync for ByteMap {}

impl ByteMap {
    /// Maps `len` bytes of `file` from `offset` (a multiple of the page
    /// size; the file must be at least `offset + len` long).
    pub(crate) fn new(file: &File, offset: u64, len: usize) -> io::Result<ByteMap> {
        Ok(ByteMap { ptr: map_shared(file, offset, len)?, len })
    }

    /// The 64-bit word at `offset` (8-byte aligned and inside the mapping),
    /// `None` otherwise.
    pub(crate) fn word(&self, offset: usize) -> Option<&AtomicU64> {
        if !offset.is_multiple_of(8) || offset.checked_add(8)? > self.len {
            return None;
        }
        // SAFETY: in bounds and aligned (the mapping is page aligned), valid
        // for the mapping's lifetime, which the reference cannot outlive;
        // only ever accessed as an atomic, so other processes' writes are
        // no data race.
        Some(unsafe { &*self.ptr.as_ptr().add(offset).cast::<AtomicU64>() })
    }

    /// Copies `bytes` to `offset`; false (nothing written) if they do not fit.
    pub(crate) fn write(&self, offset: usize, bytes: &[u8]) -> bool {
        if offset.checked_add(bytes.len()).is_none_or(|end| end > self.len) {
            return false;
        }
        // SAFETY: the range is inside the mapping (checked above); `bytes`
        // is this process's own memory, disjoint from the mapping. What is
        // written is not yet published to the reader (`inbox::Outbox::publish`),
        // so nobody reads it meanwhile.
        unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), self.ptr.as_ptr().add(offset), bytes.len()) };
        true
    }

    /// Copies `out.len()` bytes from `offset` into `out`; false (nothing
    /// read) if the range is outside the mapping.
    pub(crate) fn read(&self, offset: usize, out: &mut [u8]) -> bool {
        if offset.checked_add(out.len()).is_none_or(|end| end > self.len) {
            return false;
        }
        // SAFETY: the range is inside the mapping (checked above) and `out`
        // is this process's own memory. A writer that broke the protocol
        // can only make the copy hold garbage, which the caller checks as
        // it checks any packet.
        unsafe { std::ptr::copy_nonoverlapping(self.ptr.as_ptr().add(offset), out.as_mut_ptr(), out.len()) };
        true
    }
}

impl Drop for ByteMap {
    fn drop(&mut self) {
        // SAFETY: unmaps exactly the mapping made in `new`; no reference
        // from `word` outlives `self`.
        let _ = unsafe { rustix::mm::munmap(self.ptr.as_ptr().cast(), self.len) };
    }
}
