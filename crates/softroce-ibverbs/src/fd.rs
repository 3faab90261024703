//! What the verbs ask of a descriptor a program sleeps on (a completion
//! channel's, the async fd, an rdma_cm event channel's): whether it is
//! non-blocking, and one wait until it is readable, as rdma-core's `read()`
//! waits. Only plain descriptor calls live here.

use std::ffi::c_int;

/// Waits until `fd` is readable, once. A signal whose handler was installed
/// without SA_RESTART ends the wait with EINTR, as the `read()` of
/// rdma-core's `ibv_get_cq_event` / `ibv_get_async_event` ends (qperf stops
/// its timed tests that way).
///
/// `poll` is a cancellation point: a `pthread_cancel` of the thread unwinds
/// from it (declared `C-unwind` here for that), through this frame, which
/// holds nothing to drop.
pub(crate) fn wait_readable(fd: c_int) -> Result<(), c_int> {
    let mut p = libc::pollfd { fd, events: libc::POLLIN, revents: 0 };
    // SAFETY: one pollfd, valid for the call.
    if unsafe { cancellable::poll(&mut p, 1, -1) } < 0 {
        return Err(std::io::Error::last_os_error().raw_os_error().unwrap_or(libc::EINTR));
    }
    Ok(())
}

/// Whether `fd` is in non-blocking mode (an application may set it on a
/// channel or the async fd to poll them).
pub(crate) fn nonblocking(fd: c_int) -> bool {
    // SAFETY: F_GETFL on an fd; a bad fd returns -1.
    let fl = unsafe { libc::fcntl(fd, libc::F_GETFL) };
    fl >= 0 && fl & libc::O_NONBLOCK != 0
}

mod cancellable {
    unsafe extern "C-unwind" {
        /// libc's `poll`, which a thread cancellation may unwind from.
        pub(super) fn poll(fds: *mut libc::pollfd, nfds: libc::nfds_t, timeout: std::ffi::c_int) -> std::ffi::c_int;
    }
}
