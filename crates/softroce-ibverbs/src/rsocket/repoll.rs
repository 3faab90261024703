//! The C entry points of rdma-core 65's epoll for rsockets (`RDMACM_1.5`):
//! `repoll_create`, `repoll_ctl`, `repoll_wait`, which `librspreload.so`
//! 65 serves `epoll_*` with. Here are the conversions from C (the caller's
//! `epoll_event`s, packed); the repolls themselves are
//! `softroce_rsocket::repoll`'s, and `rclose` ends them (`api`).

use std::ffi::c_int;

use softroce_rsocket::{Errno, repoll};

use super::api::call;
use crate::export::ibv_export;

ibv_export! { "RDMACM_1.5";
    /// A new repoll (epoll for rsockets); `flags` may hold EPOLL_CLOEXEC
    /// and O_NONBLOCK. Its number is a descriptor of the process; `rclose`
    /// ends it.
    fn repoll_create(flags: c_int) -> c_int {
        call("repoll_create", || repoll::create(flags))
    }
}

ibv_export! { "RDMACM_1.5";
    /// EPOLL_CTL_ADD, _MOD or _DEL of an rsocket or ordinary descriptor
    /// (`event` unused for DEL); -1 with errno: EBADF, EINVAL (not a
    /// repoll, `fd` is the repoll, unknown op), EEXIST, ENOENT, EFAULT.
    fn repoll_ctl(epfd: c_int, op: c_int, fd: c_int, event: *mut libc::epoll_event) -> c_int {
        call("repoll_ctl", || {
            // SAFETY: NULL or the caller's epoll_event (packed: any address will do).
            let ev = (!event.is_null()).then(|| unsafe { std::ptr::read_unaligned(event) });
            repoll::ctl(epfd, op, fd, ev).map(|()| 0)
        })
    }
}

ibv_export! { "RDMACM_1.5";
    /// Waits up to `timeout` ms (negative: for ever, 0: not at all) for
    /// entries to be ready, as `rpoll` finds them; writes up to `maxevents`
    /// of them to `events` with their data and returns how many (0 on
    /// timeout, or when the repoll is closed meanwhile).
    fn repoll_wait(epfd: c_int, events: *mut libc::epoll_event, maxevents: c_int, timeout: c_int) -> c_int {
        call("repoll_wait", || {
            if maxevents < 1 || events.is_null() {
                return Err(Errno::INVAL);
            }
            let mut out = vec![libc::epoll_event { events: 0, u64: 0 }; maxevents.min(1 << 16) as usize];
            let n = repoll::wait(epfd, &mut out, timeout)?;
            for (i, e) in out[..n].iter().enumerate() {
                // SAFETY: the caller's array of `maxevents` (> n) entries; packed, so unaligned writes.
                unsafe { std::ptr::write_unaligned(events.add(i), *e) };
            }
            Ok(n as c_int)
        })
    }
}
