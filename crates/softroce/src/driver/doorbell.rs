//! What verbs calls do to the device: run under the lock, route the events
//! they raised and, for work just posted, send it at once from the caller's
//! thread, as a doorbell would (no hand-over to the driver thread on the
//! fast path).

use super::*;

impl Shared {
    /// Runs `f` on the device, routes the events it raised, and if `kick`
    /// (new work to send) sends it at once from the caller's thread, as a
    /// doorbell would: no hand-over to the driver thread on the fast path.
    /// The driver thread is woken only if its sleep would now miss a timer.
    pub(crate) fn with_dev<R>(&self, kick: bool, f: impl FnOnce(&mut Device) -> R) -> R {
        self.with_state(kick, |st| f(&mut st.dev))
    }

    /// [`Shared::with_dev`] with the whole device state.
    pub(super) fn with_state<R>(&self, kick: bool, f: impl FnOnce(&mut State) -> R) -> R {
        let mut st = self.lock();
        let r = f(&mut st);
        self.route_events(&mut st);
        if kick {
            self.kick(st);
        }
        r
    }

    /// Sends what the verb just done made ready, from the caller's thread.
    pub(super) fn kick(&self, st: MutexGuard<'_, State>) {
        // Only send: receiving is for whoever waits (or the driver).
        // Sending can complete WRs (UC, UD, local errors): wake waiters.
        let made = st.dev.counters().completions;
        let now = Instant::now();
        let first_alone = self.reply_first && self.tx_owed.is_some();
        let call = self.app_call();
        self.send_and_let_go(st, now, made, first_alone);
        self.note_app_post(now);
        drop(call);
    }

    /// The end of a call outside a pass (a verb, a relay's datagram): sends
    /// what is ready, routes the events, wakes waiters if completions were
    /// made since the count `made`, and lets the device go, telling the
    /// driver thread of its next timer.
    pub(super) fn send_and_let_go(&self, mut st: MutexGuard<'_, State>, now: Instant, made: u64, first_alone: bool) {
        let _ = self.transmit(&mut st, now, first_alone);
        self.route_events(&mut st);
        self.wake_waiters_if_made(st.dev.counters().completions, made);
        let next = st.dev.poll_timeout();
        drop(st);
        self.nudge_driver(next);
    }

    /// [`Shared::with_live_dev`] for a receive post. A post that made a
    /// packet (a credit update, docs/engine.md) defers it as a waiter's
    /// pass defers an ACK: the application's next post or poll takes it
    /// along (in a ping-pong, the reply it is about to send, which goes
    /// first), its next sleep sends it (`Cq::wait`, or arming a CQ to sleep
    /// on its channel), or the driver thread when it next looks (not woken
    /// for it: a wake-up per receive posted would cost more than the
    /// update). Without a driver thread it is sent at once.
    pub(crate) fn post_recv_with<E: Into<crate::Error>>(
        &self,
        f: impl FnOnce(&mut Device) -> Result<bool, E>,
    ) -> Result<(), crate::Error> {
        self.live()?;
        let mut st = self.lock();
        let r = f(&mut st.dev);
        self.route_events(&mut st);
        if matches!(r, Ok(true)) {
            if self.mode == Progress::Thread {
                let now = Instant::now();
                if !self.tx_owed.is_some() {
                    self.tx_owed.store(Some(now));
                    st.stats.tx_deferred += 1;
                }
            } else {
                self.kick(st);
            }
        }
        r.map(|_| ()).map_err(Into::into)
    }

    /// [`Shared::with_live_dev`] for a verb that makes or moves QP
    /// `f`'s first result: the QP's UDP source port then has its socket
    /// (or the QP sends from the device's port), before it sends anything.
    pub(crate) fn with_live_qp<R, E: Into<crate::Error>>(
        &self,
        kick: bool,
        f: impl FnOnce(&mut Device) -> Result<(roce_proto::Qpn, R), E>,
    ) -> Result<R, crate::Error> {
        self.live()?;
        self.with_state(kick, |st| {
            let (qpn, r) = f(&mut st.dev).map_err(Into::into)?;
            if st.sources.prepare(&mut st.dev, qpn) {
                st.stats.src_port_fallbacks += 1;
            }
            st.stats.src_port_sockets = st.sources.len() as u64;
            Ok(r)
        })
    }

    /// [`Shared::with_dev`] for a verb that starts work: refused once the
    /// device failed (see [`Shared::fail`]).
    pub(crate) fn with_live_dev<R, E: Into<crate::Error>>(
        &self,
        kick: bool,
        f: impl FnOnce(&mut Device) -> Result<R, E>,
    ) -> Result<R, crate::Error> {
        self.live()?;
        self.with_dev(kick, f).map_err(Into::into)
    }
}
