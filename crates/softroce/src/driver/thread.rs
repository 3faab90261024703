//! The driver thread's loop, and what application threads tell it
//! outside the lock (their last verbs call, the timers their passes armed).
//! Every decision of the loop is the policy's (`driver_policy.rs`): here
//! the thread reads the atomics, makes the pass and sleeps as told.

use super::*;

impl Shared {
    /// The driver thread: progress, then sleep until the socket is readable
    /// (or writable with packets pending), a timer is due, or a verb wakes it.
    pub(crate) fn run(self: Arc<Shared>) {
        let mut policy = DriverPolicy::new(self.driver_spin);
        // The last turn ended in a spin: this one is a busy poll.
        let mut spinning = false;
        // When this context's resources are next published.
        let mut publish_at = Instant::now();
        while !self.stop.load(Ordering::Acquire) {
            #[cfg(test)]
            if self.panic_for_test.load(Ordering::Acquire) {
                let _st = self.lock();
                panic!("the driver thread panics, as a test asked");
            }
            // Timers other threads' passes armed (see `nudge_driver`).
            let nudged = self.timer_at.take();
            let now = Instant::now();
            let look = Look {
                nudged,
                waiting: self.waiters.load(Ordering::Acquire) > 0,
                last_call: self.app_polled.load(),
                last_call_found: self.app_found.load(Ordering::Relaxed),
                in_call: self.app_in_call.load(Ordering::Acquire) > 0,
                owed: self.owed_for(now),
            };
            let turn = policy.begin(now, look);
            if turn.pass {
                let mut st = self.lock();
                st.stats.driver_passes += 1;
                let (got, requests) = (st.stats.rx_packets, st.stats.rx_requests);
                let r = if spinning { self.progress_spinning(&mut st) } else { self.progress(&mut st) };
                let next = match r {
                    Ok(n) => n,
                    Err(_) => Some(Instant::now() + Duration::from_millis(1)),
                };
                let passed =
                    Passed { next, received: st.stats.rx_packets != got, requests: st.stats.rx_requests != requests };
                drop(st);
                policy.passed(&turn, Instant::now(), passed);
            }
            if let Some(m) = self.sock.member() {
                // Strays held for a seat, a reconciliation a pass asked for
                // (outside the device lock; at least every BLIND_TICK while
                // an application thread waits).
                m.upkeep(&self.sock);
                // What this context holds, for `softroce rdma resource show`
                // (never waiting for the device lock).
                if now >= publish_at {
                    publish_at = now + crate::census::PUBLISH_EVERY;
                    if let Ok(mut st) = self.state.try_lock() {
                        let st = &mut *st;
                        st.published.publish(now, &st.dev, m);
                    }
                }
            }
            self.app_grace_us.store(policy.grace().micros(), Ordering::Relaxed);
            self.passive_spin_us.store(policy.passive_spin().micros(), Ordering::Relaxed);
            let now = Instant::now();
            let rest = policy.rest(&turn, now);
            self.driver_deadline.store(Some(rest.until()));
            spinning = matches!(rest, Rest::Spin { .. });
            let (until, socket, precise) = match rest {
                Rest::Spin { .. } => {
                    // A turn that finds nothing waiting lets any other thread
                    // runnable on this CPU go first; one with packets of the
                    // local link waiting goes on to them (a yield, a system
                    // call, before each chunk of a stream left the receiver
                    // chunks behind its sender at the end of a batch).
                    self.driver_spins.fetch_add(1, Ordering::Relaxed);
                    if !self.local_pending() {
                        std::thread::yield_now();
                    }
                    continue;
                }
                Rest::Sleep { until, socket, precise } => (until, socket, precise),
            };
            let timeout = until.saturating_duration_since(now);
            let fds: &[(std::os::fd::BorrowedFd<'_>, Interest)] =
                if socket { &[(self.sock.as_fd(), Interest::READABLE)] } else { &[] };
            // Watching the socket, the thread is woken by local packets too
            // (flag, then look: see `wake_for_local`).
            if socket {
                self.driver_asleep.store(true, Ordering::SeqCst);
            }
            let asleep = if socket { self.inbox.as_ref().map(Inbox::sleep) } else { None };
            if !(socket && self.local_pending()) {
                let _ = if precise {
                    wait_precise(fds, Some(&self.waker), timeout)
                } else {
                    wait(fds, Some(&self.waker), Some(timeout))
                };
            }
            drop(asleep);
            self.driver_asleep.store(false, Ordering::SeqCst);
            self.waker.reset();
        }
    }

    /// How long the packets a waiter's pass deferred have waited at `now`
    /// (`None`: nothing is owed).
    pub(super) fn owed_for(&self, now: Instant) -> Option<Duration> {
        self.tx_owed.load().map(|t| now.saturating_duration_since(t))
    }

    /// Records that an application thread just polled a CQ that is not
    /// armed (`ibv_poll_cq` in a busy loop, as perftest and UCX poll; an
    /// empty poll made a progress pass of its own): for a grace after its
    /// last call ([`AppGrace`](crate::driver_policy::AppGrace)) the driver thread leaves the socket to it,
    /// as to a waiter. Otherwise both wake with every packet and the driver
    /// thread takes the core the peer's threads need (on two cores: a busy
    /// poller, its driver thread and the receiver's; `docs/data-path.md`,
    /// step 6).
    /// `found`: the call returned completions (see `Look::last_call_found`).
    pub(crate) fn note_app_poll(&self, now: Instant, found: bool) {
        self.app_found.store(found, Ordering::Relaxed);
        self.app_polled.store(Some(now));
    }

    /// An application thread armed a CQ to sleep on its channel: the
    /// driver thread, if it stays off the socket for a busy poller, is
    /// woken to receive again.
    pub(crate) fn end_app_poll(&self) {
        if self.app_polled.take().is_some() {
            let _ = self.waker.wake();
        }
    }

    /// Marks a busy poller's verbs call as under way until the guard drops
    /// (`None` if this context has no busy poller): the driver thread's
    /// looks meanwhile see it as a call made now (`Look::in_call`).
    pub(crate) fn app_call(&self) -> Option<AppCall<'_>> {
        (self.mode == Progress::Thread && self.app_polled.is_some()).then(|| {
            self.app_in_call.fetch_add(1, Ordering::AcqRel);
            AppCall(&self.app_in_call)
        })
    }

    /// A verb that posts work: if an application thread busy-polls this
    /// context, it is still at work in verbs (a post may take longer than
    /// the grace the driver thread gives it).
    pub(super) fn note_app_post(&self, now: Instant) {
        if self.mode == Progress::Thread && self.app_polled.is_some() {
            self.note_app_poll(now, false);
        }
    }

    /// Tells the driver thread of the timer `next` (the device's earliest,
    /// after another thread's pass) and wakes it if it sleeps past it.
    pub(crate) fn nudge_driver(&self, next: Option<Instant>) {
        if self.mode != Progress::Thread {
            return;
        }
        if let Some(t) = next {
            self.timer_at.fetch_min(t);
            if self.driver_deadline.is_after(t) {
                let _ = self.waker.wake();
            }
        }
    }
}

/// A busy poller's verbs call under way ([`Shared::app_call`]).
pub(crate) struct AppCall<'a>(&'a std::sync::atomic::AtomicU32);

impl Drop for AppCall<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}
