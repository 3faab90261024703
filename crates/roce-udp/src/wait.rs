//! Waiting for sockets, a cross-thread wake-up, or a timeout, with poll(2).

use std::fs::File;
use std::io::{self, Read, Write};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd};
use std::time::{Duration, Instant};

use crate::sys;

/// Most descriptors one [`wait`] watches (besides the waker).
pub const MAX_WAIT_FDS: usize = 63;

/// Wakes a thread blocked in [`wait`] from any other thread (an eventfd).
/// Share it with an `Arc`. Wake-ups do not queue: many `wake` calls before
/// the wait see it return once.
#[derive(Debug)]
pub struct Waker {
    fd: File,
}

impl Waker {
    /// A new waker, not yet woken.
    pub fn new() -> io::Result<Waker> {
        Ok(Waker { fd: File::from(sys::eventfd()?) })
    }

    /// Makes the current or next [`wait`] given this waker return with
    /// [`Wakeup::woken`] set.
    pub fn wake(&self) -> io::Result<()> {
        match (&self.fd).write(&1u64.to_ne_bytes()) {
            // The counter is at its maximum: already woken.
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => Ok(()),
            r => r.map(drop),
        }
    }

    /// Clears a pending wake-up; returns whether there was one.
    pub fn reset(&self) -> bool {
        let mut b = [0u8; 8];
        (&self.fd).read(&mut b).is_ok_and(|n| n == 8)
    }
}

impl AsFd for Waker {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

/// What to wait for on one descriptor.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Interest {
    /// Data to read (`POLLIN`).
    pub readable: bool,
    /// Room to write (`POLLOUT`): after a flush left packets pending.
    pub writable: bool,
}

impl Interest {
    /// Readable only.
    pub const READABLE: Interest = Interest { readable: true, writable: false };
    /// Writable only.
    pub const WRITABLE: Interest = Interest { readable: false, writable: true };
    /// Readable or writable.
    pub const BOTH: Interest = Interest { readable: true, writable: true };
}

/// Why a [`wait`] returned.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Wakeup {
    /// The waker was woken (and has been reset).
    pub woken: bool,
    /// Nothing happened before the timeout.
    pub timed_out: bool,
    readable: u64,
    writable: u64,
}

impl Wakeup {
    /// Whether descriptor `i` of the wait is readable (or has an error or
    /// hang-up, which the next receive reports).
    pub fn readable(&self, i: usize) -> bool {
        i < 64 && self.readable & (1 << i) != 0
    }

    /// Whether descriptor `i` of the wait is writable (or has an error).
    pub fn writable(&self, i: usize) -> bool {
        i < 64 && self.writable & (1 << i) != 0
    }
}

/// Blocks until one of `fds` is ready as asked, `waker` is woken, or
/// `timeout` passes (`None`: no timeout). Interruptions by signals are
/// retried with the time left. Timeouts round up to whole milliseconds, so
/// a short timer never turns into a busy loop.
///
/// A driver loop waits with its sockets (readable; writable too while a
/// flush has pending packets), its waker, and the engine's next timer.
pub fn wait(
    fds: &[(BorrowedFd<'_>, Interest)],
    waker: Option<&Waker>,
    timeout: Option<Duration>,
) -> io::Result<Wakeup> {
    wait_with(fds, waker, timeout, false)
}

/// [`wait`] with the timeout kept to the microsecond (ppoll(2)), for a
/// deadline that is short by design and cannot recur at once, such as the
/// end of a grace the caller grows while it keeps finding it too short.
/// The thread's timer slack still applies (see `prctl(PR_SET_TIMERSLACK)`).
pub fn wait_precise(
    fds: &[(BorrowedFd<'_>, Interest)],
    waker: Option<&Waker>,
    timeout: Duration,
) -> io::Result<Wakeup> {
    wait_with(fds, waker, Some(timeout), true)
}

fn wait_with(
    fds: &[(BorrowedFd<'_>, Interest)],
    waker: Option<&Waker>,
    timeout: Option<Duration>,
    precise: bool,
) -> io::Result<Wakeup> {
    if fds.len() > MAX_WAIT_FDS {
        return Err(io::Error::new(io::ErrorKind::InvalidInput, format!("wait: more than {MAX_WAIT_FDS} descriptors")));
    }
    let mut pfds = [libc::pollfd { fd: -1, events: 0, revents: 0 }; MAX_WAIT_FDS + 1];
    for (p, (fd, want)) in pfds.iter_mut().zip(fds) {
        p.fd = fd.as_raw_fd();
        p.events = if want.readable { libc::POLLIN } else { 0 } | if want.writable { libc::POLLOUT } else { 0 };
    }
    let n = fds.len();
    if let Some(w) = waker {
        pfds[n] = libc::pollfd { fd: w.fd.as_raw_fd(), events: libc::POLLIN, revents: 0 };
    }
    let used = n + usize::from(waker.is_some());
    let deadline = timeout.and_then(|t| Instant::now().checked_add(t));
    loop {
        let left = deadline.map(|d| d.saturating_duration_since(Instant::now()));
        let r = match (timeout, left) {
            (Some(_), Some(left)) if precise => sys::ppoll(&mut pfds[..used], left),
            (None, _) => sys::poll(&mut pfds[..used], -1),
            (Some(_), None) => sys::poll(&mut pfds[..used], i32::MAX),
            (Some(_), Some(left)) => {
                sys::poll(&mut pfds[..used], i32::try_from(left.as_nanos().div_ceil(1_000_000)).unwrap_or(i32::MAX))
            }
        };
        match r {
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
            Ok(0) => return Ok(Wakeup { timed_out: true, ..Wakeup::default() }),
            Ok(_) => break,
        }
    }
    let mut out = Wakeup::default();
    let bad = libc::POLLERR | libc::POLLHUP | libc::POLLNVAL;
    for (i, p) in pfds[..n].iter().enumerate() {
        if p.revents & (libc::POLLIN | bad) != 0 && fds[i].1.readable {
            out.readable |= 1 << i;
        }
        if p.revents & (libc::POLLOUT | bad) != 0 && fds[i].1.writable {
            out.writable |= 1 << i;
        }
    }
    if let Some(w) = waker
        && pfds[n].revents != 0
    {
        out.woken = w.reset();
    }
    Ok(out)
}
