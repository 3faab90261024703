//! The driver thread's timer slack.
//!
//! The driver thread ends a busy poller's grace with a sleep of a few
//! microseconds (see `AppGrace` in `driver_policy.rs`); Linux lets a normal
//! thread's timers fire up to 50 us late (its timer slack), which would
//! leave a packet for an application that spins on memory (`ib_write_lat`)
//! that much longer unplaced. A thread may lower its own slack without
//! privilege.

#![allow(unsafe_code)]

use std::io;

/// The driver thread's timer slack.
pub(crate) const DRIVER_TIMER_SLACK_NS: u64 = 1_000;

/// Sets the calling thread's timer slack (`PR_SET_TIMERSLACK`).
pub(crate) fn set_own_timer_slack(ns: u64) -> io::Result<()> {
    let ns = libc::c_ulong::try_from(ns).unwrap_or(libc::c_ulong::MAX);
    let zero: libc::c_ulong = 0;
    // SAFETY: prctl(PR_SET_TIMERSLACK, ns) takes no pointers and only
    // changes the calling thread's timer slack.
    let r = unsafe { libc::prctl(libc::PR_SET_TIMERSLACK, ns, zero, zero, zero) };
    if r != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_thread_gets_the_timer_slack_it_asks_for() {
        std::thread::spawn(|| {
            set_own_timer_slack(DRIVER_TIMER_SLACK_NS).unwrap();
            let zero: libc::c_ulong = 0;
            // SAFETY: PR_GET_TIMERSLACK takes no pointers; it returns the slack.
            let slack = unsafe { libc::prctl(libc::PR_GET_TIMERSLACK, zero, zero, zero, zero) };
            assert_eq!(u64::try_from(slack).unwrap(), DRIVER_TIMER_SLACK_NS);
        })
        .join()
        .unwrap();
    }
}
