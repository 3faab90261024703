//! The work of `repoll_create`, `repoll_ctl`, `repoll_wait` (`RDMACM_1.5`,
//! rdma-core 65; softroce-ibverbs exports them): epoll for rsockets and
//! ordinary descriptors together, which rdma-core 65's `librspreload.so`
//! serves `epoll_*` with: [`create`], [`ctl`], [`wait`] and [`close`].
//!
//! As in librdmacm 65, a repoll is a list of (descriptor, events, data)
//! that `repoll_wait` hands to [`super::poll::rpoll`], so an entry is ready
//! exactly when `rpoll` says so: level-triggered (EPOLLET and EPOLLONESHOT
//! change nothing), only EPOLLIN, EPOLLOUT, EPOLLERR and EPOLLHUP kept, the
//! ready entries reported in the order they were added (a deleted entry's
//! place taken by the last one), at most `maxevents`. Its number is the
//! read end of a pipe of its own (O_CLOEXEC and O_NONBLOCK from the flags),
//! which never becomes readable; `rclose` ends it, EBUSY while it has
//! entries, and a `repoll_wait` sleeping on it then returns 0.
//!
//! librdmacm 65 wakes its waiters from a monitor thread; here each sleeping
//! `repoll_wait` also polls an eventfd of its own, which `repoll_ctl` and
//! `rclose` signal, so a change made while it sleeps is seen at once.
//!
//! Departures (errors only): these calls fail as `epoll_ctl(2)` and
//! `epoll_wait(2)` do, -1 with `errno`, where librdmacm 65 returns the
//! errno value itself (a `repoll_wait` result of 22 would read as 22
//! events); `librspreload`'s `epoll_*`, which return what these return, so
//! give the program epoll's convention. Adding a descriptor that is not
//! open is EBADF, a NULL `event` EFAULT, unknown `repoll_create` flags
//! EINVAL, and a NULL `events` or `maxevents` < 1 EINVAL (librdmacm takes
//! them, and crashes or writes past the array).

use std::collections::HashMap;
use std::ffi::c_int;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use super::{Errno, sys};

/// The most entries a repoll holds (librdmacm 65 counts them in 16 bits).
const MAX_ENTRIES: usize = u16::MAX as usize - 1;

/// The epoll events a repoll keeps (librdmacm's `epoll_to_poll_events`);
/// their values are poll(2)'s.
const KEPT: u32 = (libc::EPOLLIN | libc::EPOLLOUT | libc::EPOLLERR | libc::EPOLLHUP) as u32;

/// An entry: what to poll and the caller's data.
#[derive(Clone, Copy)]
struct Entry {
    fd: c_int,
    events: i16,
    data: u64,
}

/// A repoll.
struct Repoll {
    st: Mutex<State>,
}

struct State {
    /// In the order `repoll_wait` reports them.
    entries: Vec<Entry>,
    /// The eventfds of the `repoll_wait`s sleeping now, by waiter.
    waiters: HashMap<u64, RawFd>,
    next_waiter: u64,
    /// The pipe whose read end is the repoll's number (`None` once closed).
    pipe: Option<(OwnedFd, OwnedFd)>,
}

impl Repoll {
    fn st(&self) -> MutexGuard<'_, State> {
        self.st.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl State {
    /// Wakes every sleeping `repoll_wait` (after a change, or the close).
    fn wake_waiters(&self) {
        for &fd in self.waiters.values() {
            // A waiter's eventfd, open while it is listed (the waiter
            // unlists it under this lock before closing it).
            sys::eventfd_signal(fd);
        }
    }
}

/// The process's repolls by number.
static REPOLLS: Mutex<Option<HashMap<c_int, Arc<Repoll>>>> = Mutex::new(None);

fn table() -> MutexGuard<'static, Option<HashMap<c_int, Arc<Repoll>>>> {
    REPOLLS.lock().unwrap_or_else(|e| e.into_inner())
}

fn find(epfd: c_int) -> Option<Arc<Repoll>> {
    table().as_ref().and_then(|t| t.get(&epfd).cloned())
}

/// `rclose` of a repoll's number: `None` if `epfd` is none; EBUSY while it
/// has entries (librdmacm 65's `repoll_close`).
pub fn close(epfd: c_int) -> Option<Result<(), Errno>> {
    let mut t = table();
    let r = t.as_ref()?.get(&epfd)?.clone();
    let mut st = r.st();
    if !st.entries.is_empty() {
        return Some(Err(Errno(libc::EBUSY)));
    }
    t.as_mut().map(|t| t.remove(&epfd));
    st.pipe = None;
    st.wake_waiters();
    Some(Ok(()))
}

/// A new repoll's number (`repoll_create`; `flags` may hold O_CLOEXEC and
/// O_NONBLOCK).
pub fn create(flags: c_int) -> Result<c_int, Errno> {
    let allowed = libc::O_CLOEXEC | libc::O_NONBLOCK;
    if flags & !allowed != 0 {
        return Err(Errno::INVAL);
    }
    let pipe = sys::pipe2(flags & allowed)?;
    let num = pipe.0.as_raw_fd();
    let st = State { entries: Vec::new(), waiters: HashMap::new(), next_waiter: 0, pipe: Some(pipe) };
    table().get_or_insert_with(HashMap::new).insert(num, Arc::new(Repoll { st: Mutex::new(st) }));
    Ok(num)
}

/// `repoll_ctl`'s work, in librdmacm 65's order of checks.
pub fn ctl(epfd: c_int, op: c_int, fd: c_int, event: Option<libc::epoll_event>) -> Result<(), Errno> {
    if fd < 0 {
        return Err(Errno::BADF);
    }
    if epfd == fd {
        return Err(Errno::INVAL);
    }
    let r = find(epfd).ok_or(Errno::INVAL)?;
    let mut st = r.st();
    let at = st.entries.iter().position(|e| e.fd == fd);
    let entry = |ev: libc::epoll_event| Entry { fd, events: (ev.events & KEPT) as i16, data: ev.u64 };
    match op {
        libc::EPOLL_CTL_ADD => {
            let ev = event.ok_or(Errno::FAULT)?;
            if at.is_some() {
                return Err(Errno(libc::EEXIST));
            }
            if !sys::is_open(fd) {
                return Err(Errno::BADF);
            }
            if st.entries.len() >= MAX_ENTRIES {
                return Err(Errno(libc::ENOSPC));
            }
            st.entries.push(entry(ev));
        }
        libc::EPOLL_CTL_MOD => {
            let ev = event.ok_or(Errno::FAULT)?;
            let i = at.ok_or(Errno(libc::ENOENT))?;
            st.entries[i] = entry(ev);
        }
        libc::EPOLL_CTL_DEL => {
            let i = at.ok_or(Errno(libc::ENOENT))?;
            st.entries.swap_remove(i);
        }
        _ => return Err(Errno::INVAL),
    }
    st.wake_waiters();
    Ok(())
}

/// The epoll events of poll(2)'s `revents` (POLLNVAL and the rest: none).
fn epoll_events(revents: i16) -> u32 {
    (revents as u16 as u32) & KEPT
}

/// A sleeping `repoll_wait`'s eventfd, listed in its repoll while it sleeps.
struct Waiter<'a> {
    r: &'a Repoll,
    key: u64,
    fd: OwnedFd,
}

impl Drop for Waiter<'_> {
    fn drop(&mut self) {
        // Unlisted before the eventfd closes: no wake-up writes to a closed number.
        self.r.st().waiters.remove(&self.key);
    }
}

/// `repoll_wait`'s work: the ready entries written to `out`, how many.
/// Like librdmacm 65's: one look without waiting, then sleeps until an
/// entry is ready, the repoll changes (look again) or the time is up.
pub fn wait(epfd: c_int, out: &mut [libc::epoll_event], timeout: c_int) -> Result<usize, Errno> {
    let r = find(epfd).ok_or(Errno::INVAL)?;
    let deadline = (timeout > 0).then(|| Instant::now() + Duration::from_millis(timeout as u64));
    let mut first = true;
    loop {
        let sleeps = !first && timeout != 0;
        let left = match deadline {
            _ if !sleeps => 0,
            None => -1,
            Some(d) => match d.checked_duration_since(Instant::now()) {
                Some(l) if !l.is_zero() => l.as_micros().div_ceil(1000).min(i32::MAX as u128) as c_int,
                _ => return Ok(0),
            },
        };
        // The entries and (when it sleeps) the waiter, under one lock: a
        // change made after this wakes the wait.
        let (entries, waiter) = {
            let mut st = r.st();
            if st.pipe.is_none() {
                return Ok(0);
            }
            let waiter = if sleeps {
                let fd = sys::eventfd()?;
                let key = st.next_waiter;
                st.next_waiter += 1;
                st.waiters.insert(key, fd.as_raw_fd());
                // The eventfd just opened, owned by the waiter alone.
                Some(Waiter { r: &r, key, fd })
            } else {
                None
            };
            (st.entries.clone(), waiter)
        };
        let mut fds: Vec<libc::pollfd> = entries.iter().map(|e| super::pollfd(e.fd, e.events)).collect();
        if let Some(w) = &waiter {
            fds.push(super::pollfd(w.fd.as_raw_fd(), libc::POLLIN));
        }
        if !fds.is_empty() {
            super::poll::rpoll(&mut fds, left)?;
        }
        drop(waiter);
        let mut n = 0;
        // As librdmacm: an entry with any revents is reported, with the
        // epoll events among them (none for POLLNVAL alone).
        for (e, p) in entries.iter().zip(&fds) {
            if p.revents != 0 && n < out.len() {
                out[n] = libc::epoll_event { events: epoll_events(p.revents), u64: e.data };
                n += 1;
            }
        }
        if n > 0 || timeout == 0 {
            return Ok(n);
        }
        first = false;
    }
}
