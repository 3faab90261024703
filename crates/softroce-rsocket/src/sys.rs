//! The system calls rsockets make on descriptors (poll(2), fcntl(2),
//! pipe2(2), eventfd(2)) behind safe functions: the only unsafe code of the
//! crate. Each call's `SAFETY:` comment says why its arguments are valid;
//! add a call here, not `unsafe` elsewhere.
#![allow(unsafe_code)]

use std::ffi::c_int;
use std::os::fd::{FromRawFd, OwnedFd, RawFd};

use super::Errno;

/// `poll(2)` on `fds` for up to `timeout` (`None`: no limit); a signal
/// ends it with EINTR, as it ends a blocking socket call.
pub(crate) fn sys_poll(fds: &mut [libc::pollfd], timeout: Option<std::time::Duration>) -> Result<usize, Errno> {
    let ms = timeout.map_or(-1, |t| t.as_micros().div_ceil(1000).min(i32::MAX as u128) as c_int);
    // SAFETY: `fds` is a valid, writable array of `fds.len()` pollfds for the call.
    let n = unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, ms) };
    if n < 0 {
        return Err(Errno(std::io::Error::last_os_error().raw_os_error().unwrap_or(libc::EINTR)));
    }
    Ok(n as usize)
}

/// Whether `fd` is an open descriptor of the process.
pub(crate) fn is_open(fd: c_int) -> bool {
    // SAFETY: F_GETFD only asks whether the descriptor is open.
    (unsafe { libc::fcntl(fd, libc::F_GETFD) }) >= 0
}

/// A new pipe (read end, write end) with `flags` (O_CLOEXEC, O_NONBLOCK).
pub(crate) fn pipe2(flags: c_int) -> Result<(OwnedFd, OwnedFd), Errno> {
    let mut p = [-1 as c_int; 2];
    // SAFETY: `p` has room for the two descriptors.
    if unsafe { libc::pipe2(p.as_mut_ptr(), flags) } != 0 {
        return Err(Errno(std::io::Error::last_os_error().raw_os_error().unwrap_or(libc::EMFILE)));
    }
    // SAFETY: the two descriptors pipe2 just opened, owned here alone.
    Ok(unsafe { (OwnedFd::from_raw_fd(p[0]), OwnedFd::from_raw_fd(p[1])) })
}

/// A new eventfd (close-on-exec, non-blocking).
pub(crate) fn eventfd() -> Result<OwnedFd, Errno> {
    // SAFETY: eventfd(2) with valid flags.
    let fd = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_NONBLOCK) };
    if fd < 0 {
        return Err(Errno(std::io::Error::last_os_error().raw_os_error().unwrap_or(libc::EMFILE)));
    }
    // SAFETY: the eventfd just opened, owned by the caller alone.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Adds 1 to the eventfd `fd`, which the caller keeps open for the call.
pub(crate) fn eventfd_signal(fd: RawFd) {
    // SAFETY: an eventfd the caller keeps open; 8 bytes written from a
    // local buffer of 8.
    unsafe { libc::write(fd, 1u64.to_ne_bytes().as_ptr().cast(), 8) };
}
