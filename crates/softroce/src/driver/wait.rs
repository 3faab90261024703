//! Application threads that wait: a thread in `Cq::wait` sleeps in the
//! socket itself (`recvmmsg`), or beside the one that does, and makes the
//! pass after its sleep; the driver thread stays off the socket meanwhile
//! (`driver_policy.rs`). Completions another thread makes end the sleep.

use super::*;

/// The longest sleep in the socket: a waiter whose deadline is further
/// away looks again after this.
pub(super) const MAX_SOCKET_SLEEP: Duration = Duration::from_millis(50);

/// How a waiter sleeps (see [`Shared::sleep_and_progress`]).
pub(super) enum Sleep<'a> {
    /// Not at all: completions came meanwhile.
    No,
    /// In `recvmmsg`, with the device's receive batch (counted among the
    /// inbox's sleepers).
    InSocket(Box<RecvBatch>, Option<Asleep<'a>>),
    /// In `poll`, beside a thread that sleeps in the socket.
    BesideSocket,
}

/// A thread blocked in `Cq::wait` or `Context::progress_wait`: counted in
/// `Shared::waiters` while this lives, so the driver thread stays off the
/// socket (and for `driver_policy::WAITER_GRACE` after it saw the last one go).
pub(crate) struct Waiting<'a>(&'a Shared);

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        self.0.waiters.fetch_sub(1, Ordering::AcqRel);
    }
}

impl Shared {
    /// An application thread's sleep and the pass after it (the caller is
    /// counted in `waiters`, so the driver thread stays out of the way):
    /// sleeps until a packet arrives, another thread made completions, or
    /// `until`, then hands what came to the engine and returns the device
    /// locked, e.g. to poll a CQ, with whether packets arrived.
    ///
    /// The sleep is in `recvmmsg` itself (`Socket::recv_wait`: what waits is
    /// taken at once; else the sleep returns the first datagram alone, and
    /// what came behind it, the ACK of the caller's request in a ping-pong,
    /// waits for the pass after the caller's reply); a second sleeping
    /// thread polls beside it.
    /// Timers stay with the driver thread, which runs them when due.
    ///
    /// `seen`: the device's completion count when the caller last looked at
    /// its CQ. If another thread made completions since, there is no sleep;
    /// from the moment the sleep is decided (under the lock) another
    /// thread's completions end it (`wake_others_if_made`): no wake-up is
    /// lost between the look and the sleep.
    pub(crate) fn sleep_and_progress(
        &self,
        until: Instant,
        defer: Defer,
        seen: Option<u64>,
    ) -> io::Result<(MutexGuard<'_, State>, bool)> {
        let sleep = {
            let mut st = self.lock();
            // What an earlier pass deferred leaves before this thread sleeps
            // (its application did not post a reply that took it along).
            if self.tx_owed.is_some() {
                self.flush(&mut st)?;
            }
            if seen.is_some_and(|c| c != st.dev.counters().completions) {
                Sleep::No
            } else if let Some(rx) = st.rx.take() {
                // Flag, then look (`wake_for_local`): a local packet handed
                // over meanwhile is seen here or wakes the sleep.
                self.in_socket.store(true, Ordering::SeqCst);
                let asleep = self.inbox.as_ref().map(Inbox::sleep);
                if self.local_pending() {
                    self.in_socket.store(false, Ordering::SeqCst);
                    st.rx = Some(rx);
                    Sleep::No
                } else {
                    Sleep::InSocket(rx, asleep)
                }
            } else {
                Sleep::BesideSocket
            }
        };
        let pre = match sleep {
            Sleep::No => Pre::Socket,
            // Another thread sleeps in the socket: sleep beside it.
            Sleep::BesideSocket => {
                self.beside.fetch_add(1, Ordering::SeqCst);
                let asleep = self.inbox.as_ref().map(Inbox::sleep);
                let r = if self.local_pending() { Ok(()) } else { self.sleep_on_socket(until) };
                drop(asleep);
                self.beside.fetch_sub(1, Ordering::SeqCst);
                r?;
                Pre::Socket
            }
            Sleep::InSocket(mut rx, asleep) => {
                let left = until.saturating_duration_since(Instant::now()).min(MAX_SOCKET_SLEEP);
                let r = self.sock.recv_wait(&mut rx, left);
                drop(asleep);
                self.in_socket.store(false, Ordering::Release);
                match r {
                    Ok(n) if n > 0 => Pre::Slept(rx, n),
                    r => {
                        self.lock().rx = Some(rx);
                        r?;
                        Pre::Socket
                    }
                }
            }
        };
        let mut st = self.lock();
        let before = st.stats.rx_packets;
        let made = st.dev.counters().completions;
        st.stats.passes += 1;
        st.stats.waiter_passes += 1;
        self.progress_pass_with(&mut st, Instant::now(), defer, pre)?;
        self.wake_others_if_made(st.dev.counters().completions, made, true);
        let got = st.stats.rx_packets != before;
        Ok((st, got))
    }

    /// A sleep beside a thread that sleeps in the socket: until the socket
    /// is readable, the waker fires or `until`.
    pub(super) fn sleep_on_socket(&self, until: Instant) -> io::Result<()> {
        // `wait` clears the waker when it fired; one that fires later makes
        // the next sleep return at once, which costs a pass, not a wake-up lost.
        wait(
            &[(self.sock.as_fd(), Interest::READABLE)],
            Some(&self.cq_waker),
            Some(until.saturating_duration_since(Instant::now())),
        )
        .map(|_| ())
    }

    /// Counts the calling thread in `waiters` until the guard drops.
    pub(crate) fn enter_wait(&self) -> Waiting<'_> {
        self.waiters.fetch_add(1, Ordering::AcqRel);
        Waiting(self)
    }

    /// Wakes threads sleeping in [`Shared::sleep_on_socket`] if completions
    /// were made (`now` differs from `before`) and someone sleeps.
    pub(super) fn wake_waiters_if_made(&self, now: u64, before: u64) {
        self.wake_others_if_made(now, before, false);
    }

    /// The same, not counting the calling thread when it is itself a waiter
    /// (it sees its completions without a wake-up call).
    pub(super) fn wake_others_if_made(&self, now: u64, before: u64, caller_waits: bool) {
        if now != before && self.waiters.load(Ordering::Acquire) > usize::from(caller_waits) {
            let _ = self.cq_waker.wake();
            if self.in_socket.load(Ordering::Acquire) {
                let _ = self.sock.wake_receiver();
            }
        }
    }
}
