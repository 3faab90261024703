//! A progress pass, whoever makes it (the driver thread, a waiter after
//! its sleep, a busy poller's empty poll): the local link and the socket to
//! the engine, due timers, then what the engine has to send, unless a
//! waiter's pass defers it for the application's next post.

use super::*;

/// When a waiter's pass may leave packets unsent for the application's
/// next call (see [`Shared::progress_for_app`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Defer {
    /// Send at once: the driver thread's passes and `Cq::poll`.
    Never,
    /// The pass made completions: the caller returns them.
    IfCompleted,
    /// The pass received packets: the caller looks at its memory.
    IfReceived,
}

/// What a pass does with the socket.
pub(super) enum Pre {
    /// Receives what waits there.
    Socket,
    /// Leaves it (`SocketLooks`: a busy poller, the socket quiet).
    SkipSocket,
    /// First hands the engine the batch (`n` datagrams) the caller received
    /// while sleeping in the socket; the batch goes back to the state.
    Slept(Box<RecvBatch>, usize),
}

impl Shared {
    /// Completion events to their channels, async events to their queue.
    pub(crate) fn route_events(&self, st: &mut State) {
        while let Some(cq) = st.dev.poll_comp_event() {
            if let Some(ch) = st.channels.get(&cq) {
                ch.push(cq);
            }
        }
        while let Some(e) = st.dev.poll_event() {
            self.async_routes.push(e);
        }
    }

    /// One progress pass; returns when the next timer is due.
    pub(crate) fn progress(&self, st: &mut State) -> io::Result<Option<Instant>> {
        self.progress_as(st, false, false, Instant::now())
    }

    /// [`Shared::progress`] in a turn of the driver thread's spin.
    pub(super) fn progress_spinning(&self, st: &mut State) -> io::Result<Option<Instant>> {
        self.progress_as(st, false, true, Instant::now())
    }

    /// [`Shared::progress`] for an application thread polling a CQ; one
    /// that is itself a waiter (`caller_waits`) sees the completions it makes
    /// without waking itself through the waker.
    ///
    /// A waiter's pass that made completions returns them before sending
    /// what the received packets call for (the ACK of a SEND, typically):
    /// the application's reply, posted next, takes it along in the same
    /// `sendmmsg` (one GSO send when sizes match), so a ping-pong pays one
    /// send per turn, not two. At most one pass in a row defers, and only
    /// with a driver thread. What is deferred leaves with the next post,
    /// before any thread of the context sleeps again (a receiver that only
    /// reposts receives), or by the driver thread once they waited
    /// `driver_policy::OWED_GRACE` (200 us). IBTA allows coalesced ACKs; the delay stays far
    /// below any local ACK timeout a requester uses in practice.
    ///
    /// The pass looks at the socket as [`SocketLooks`] says: every time
    /// while it carries traffic.
    pub(crate) fn progress_for_app(&self, st: &mut State, caller_waits: bool) -> io::Result<Option<Instant>> {
        self.progress_as(st, caller_waits, true, Instant::now())
    }

    /// [`Shared::progress_for_app`] at `now`, just read by the caller.
    pub(crate) fn progress_for_app_at(
        &self,
        st: &mut State,
        caller_waits: bool,
        now: Instant,
    ) -> io::Result<Option<Instant>> {
        self.progress_as(st, caller_waits, true, now)
    }

    /// A pass; `busy`: one of a busy poll (an application thread's, or the
    /// driver thread's spin), which looks at the socket as [`SocketLooks`] says.
    pub(super) fn progress_as(
        &self,
        st: &mut State,
        caller_waits: bool,
        busy: bool,
        now: Instant,
    ) -> io::Result<Option<Instant>> {
        st.stats.passes += 1;
        let made = st.dev.counters().completions;
        let defer = if caller_waits { Defer::IfCompleted } else { Defer::Never };
        let pre = if busy && !st.socket_looks.look(now) { Pre::SkipSocket } else { Pre::Socket };
        let r = self.progress_pass_with(st, now, defer, pre);
        self.wake_others_if_made(st.dev.counters().completions, made, caller_waits);
        r
    }

    /// A pass: what the local link and the socket hold (as `pre` says) to
    /// the engine, due timers, then what the engine has to send.
    pub(super) fn progress_pass_with(
        &self,
        st: &mut State,
        now: Instant,
        defer: Defer,
        pre: Pre,
    ) -> io::Result<Option<Instant>> {
        let (made, got) = (st.dev.counters().completions, st.stats.rx_packets);
        self.receive_local(st, now)?;
        self.release_held(st, now);
        match pre {
            // A full batch may have left more on the socket.
            Pre::Slept(rx, n) => {
                st.socket_looks.looked(now, true);
                let r = self.handle_batch(st, &rx, now);
                st.rx = Some(rx);
                r?;
                if n >= BATCH {
                    self.receive(st, now)?;
                }
            }
            Pre::Socket => self.receive(st, now)?,
            Pre::SkipSocket => {}
        }
        if st.dev.poll_timeout().is_some_and(|t| t <= now) {
            st.dev.handle_timeout(now);
        }
        let deferred = self.mode == Progress::Thread
            && !self.tx_owed.is_some()
            && match defer {
                Defer::Never => false,
                Defer::IfCompleted => st.dev.counters().completions != made,
                Defer::IfReceived => st.stats.rx_packets != got,
            };
        if deferred {
            self.tx_owed.store(Some(now));
            st.stats.tx_deferred += 1;
        } else {
            self.transmit(st, now, false)?;
        }
        self.route_events(st);
        if !st.graveyard.is_empty() {
            let dev = &st.dev;
            st.graveyard.retain(|b| dev.memory_in_use(b.addr() as usize, b.len()));
        }
        let held = st.faults.as_ref().and_then(Faults::next_release);
        let next = [st.dev.poll_timeout(), held].into_iter().flatten().min();
        Ok(next)
    }
}
