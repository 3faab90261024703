//! `rpoll`: `poll(2)` over rsockets and ordinary descriptors together, as
//! rsockets' `rpoll` works. It first looks at every entry without waiting
//! (each rsocket makes its progress: CM events, credits, completions) for up
//! to the polling time; then it arms every rsocket's CQ, looks once more,
//! and sleeps in `poll(2)` on what stands for each rsocket (its completion
//! channel and event channel, a listener's accept queue) and on the
//! ordinary descriptors as given, at most the wake-up interval at a time,
//! until an entry has events or the timeout passes. Events an rsocket gets
//! that the caller did not ask about (credits, CM events) only start
//! another look.

use std::sync::Arc;
use std::time::{Duration, Instant};

use super::config::defaults;
use super::socket::Socket;
use super::{Errno, pollfd, sys_poll};

/// Each entry's events now, without waiting; how many have some.
fn look(fds: &mut [libc::pollfd], socks: &[Option<Arc<Socket>>]) -> Result<usize, Errno> {
    let mut plain: Vec<libc::pollfd> = Vec::new();
    for (p, s) in fds.iter_mut().zip(socks) {
        match s {
            Some(s) => p.revents = s.poll_events(p.events),
            None => plain.push(pollfd(p.fd, p.events)),
        }
    }
    if !plain.is_empty() {
        sys_poll(&mut plain, Some(Duration::ZERO))?;
        let mut it = plain.iter();
        for (p, s) in fds.iter_mut().zip(socks) {
            if s.is_none() {
                p.revents = it.next().map_or(0, |q| q.revents);
            }
        }
    }
    Ok(fds.iter().filter(|p| p.revents != 0).count())
}

/// `rpoll(fds, timeout)`: the number of entries with events (0 when
/// `timeout` ms pass; a negative timeout waits for ever).
pub fn rpoll(fds: &mut [libc::pollfd], timeout: i32) -> Result<usize, Errno> {
    let socks: Vec<Option<Arc<Socket>>> =
        fds.iter().map(|p| (p.fd >= 0).then(|| super::find(p.fd)).flatten()).collect();
    let d = defaults();
    let start = Instant::now();
    loop {
        let n = look(fds, &socks)?;
        if n > 0 || timeout == 0 {
            return Ok(n);
        }
        if start.elapsed() > d.polling_time {
            break;
        }
    }
    let limit = (timeout >= 0).then(|| Duration::from_millis(timeout as u64));
    loop {
        // Armed now: a completion that came before would make no event, so look once more.
        let mut armed = false;
        for s in socks.iter().flatten() {
            armed |= s.lock().poll_arm();
        }
        if armed {
            let n = look(fds, &socks)?;
            if n > 0 {
                return Ok(n);
            }
        }
        let mut real = Vec::new();
        let mut owner = Vec::new();
        let mut holders = Vec::new();
        for (i, (p, s)) in fds.iter().zip(&socks).enumerate() {
            match s {
                Some(s) => {
                    let at = holders.len();
                    s.lock().poll_fds(&mut holders);
                    for h in &holders[at..] {
                        real.push(pollfd(h.fd(), libc::POLLIN));
                        owner.push(i);
                    }
                }
                None => {
                    real.push(pollfd(p.fd, p.events));
                    owner.push(i);
                }
            }
        }
        let sleep = match limit {
            None => d.wake_up_interval,
            Some(l) => match l.checked_sub(start.elapsed()) {
                Some(left) if !left.is_zero() => left.min(d.wake_up_interval),
                _ => return Ok(0),
            },
        };
        sys_poll(&mut real, Some(sleep))?;
        drop(holders);
        let mut woke = vec![false; fds.len()];
        for p in fds.iter_mut() {
            p.revents = 0;
        }
        for (r, &i) in real.iter().zip(&owner) {
            if socks[i].is_some() {
                woke[i] |= r.revents != 0;
            } else {
                fds[i].revents = r.revents;
            }
        }
        for (i, s) in socks.iter().enumerate() {
            if let Some(s) = s {
                if woke[i] {
                    s.lock().poll_woke();
                }
                fds[i].revents = s.poll_events(fds[i].events);
            }
        }
        let n = fds.iter().filter(|p| p.revents != 0).count();
        if n > 0 {
            return Ok(n);
        }
    }
}
