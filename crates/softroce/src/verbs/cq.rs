//! The completion queue ([`Cq`], `ibv_cq`): made by
//! [`Context::create_cq`], polled ([`Cq::poll`], which makes progress when
//! empty), waited on ([`Cq::wait`]), armed, resized and moderated; and the
//! yield of a thread whose busy polls find nothing (`spun_empty`). Touch
//! here how an application gets its completions.

use std::sync::Arc;
use std::time::Duration;

use roce_proto::Wc;

use super::CompChannel;
use crate::context::Context;
use crate::error::Error;

/// A completion queue (`ibv_cq`).
#[derive(Debug, Clone)]
pub struct Cq(pub(super) Arc<CqInner>);

#[derive(Debug)]
pub(super) struct CqInner {
    ctx: Context,
    pub(super) handle: roce_proto::CqHandle,
    /// Kept open while the CQ lives.
    _channel: Option<CompChannel>,
}

impl Drop for CqInner {
    fn drop(&mut self) {
        let h = self.handle;
        self.ctx.shared().async_routes.release(crate::EventSource::Cq(h));
        let mut st = self.ctx.shared().lock();
        st.channels.remove(&h);
        let _ = st.dev.destroy_cq(h);
    }
}

impl Context {
    /// Creates a completion queue of at least `cqe` entries whose events
    /// (once armed with [`Cq::req_notify`]) go to `channel`.
    pub fn create_cq(&self, cqe: u32, channel: Option<&CompChannel>) -> Result<Cq, Error> {
        self.create_cq_on(cqe, channel, 0)
    }

    /// [`Context::create_cq`] on completion vector `comp_vector`
    /// (`ibv_create_cq`'s last argument). `cqe` outside `1..=max_cqe` is
    /// [`roce_proto::VerbError::Cqe`], a vector at or past
    /// [`roce_proto::device::NUM_COMP_VECTORS`] is
    /// [`roce_proto::VerbError::CompVector`] (EINVAL, as rxe).
    pub fn create_cq_on(&self, cqe: u32, channel: Option<&CompChannel>, comp_vector: u32) -> Result<Cq, Error> {
        let s = self.shared();
        s.live()?;
        let mut st = s.lock();
        let handle = st.dev.create_cq_on(cqe, comp_vector)?;
        if let Some(ch) = channel {
            st.channels.insert(handle, ch.queue.clone());
        }
        drop(st);
        Ok(Cq(Arc::new(CqInner { ctx: self.clone(), handle, _channel: channel.cloned() })))
    }
}

impl Cq {
    /// The handle the engine knows it by (what channel events carry).
    pub fn handle(&self) -> roce_proto::CqHandle {
        self.0.handle
    }

    /// Pops up to `out.len()` completions, oldest first (`ibv_poll_cq`).
    /// An empty CQ first makes progress (receives what has arrived), so an
    /// application that polls is served without waiting for the driver.
    pub fn poll(&self, out: &mut [Wc]) -> Result<usize, Error> {
        self.poll_as(out, false)
    }

    /// Completions already in the CQ, without receiving (the caller is
    /// about to sleep on the socket), and the device's completion count.
    fn peek(&self, out: &mut [Wc]) -> Result<(usize, u64), Error> {
        let mut st = self.0.ctx.shared().lock();
        let n = st.dev.poll_cq(self.0.handle, out)?;
        Ok((n, st.dev.counters().completions))
    }

    /// [`Cq::poll`] by a thread counted in `waiters` (`caller_waits`) or not:
    /// the CQ, and if it is empty a progress pass first.
    fn poll_as(&self, out: &mut [Wc], caller_waits: bool) -> Result<usize, Error> {
        let s = self.0.ctx.shared();
        let mut st = s.lock();
        // A poll of an armed CQ is an event loop's last look before it
        // sleeps on the channel, not a busy poll.
        let busy = !caller_waits && s.mode == crate::driver::Progress::Thread && !st.dev.cq_armed(self.0.handle);
        let n = st.dev.poll_cq(self.0.handle, out)?;
        if n > 0 {
            drop(st);
            if busy {
                s.note_app_poll(std::time::Instant::now(), true);
                spun_empty(false, None);
            }
            return Ok(n);
        }
        // Completions made before a failure are still polled; an empty CQ
        // of a failed device is an error, not a wait for what cannot come.
        s.live()?;
        // One clock read for the pass and the poller's bookkeeping (a busy
        // poll's cost is mostly such small things).
        let now = std::time::Instant::now();
        // The pass may send what an ACK opened: a call under way meanwhile.
        let call = if busy { s.app_call() } else { None };
        let next = s.progress_for_app_at(&mut st, caller_waits, now)?;
        let n = st.dev.poll_cq(self.0.handle, out)?;
        drop(st);
        if busy {
            s.note_app_poll(now, n > 0);
            drop(call);
            spun_empty(n == 0, Some(now));
        }
        s.nudge_driver(next);
        Ok(n)
    }

    /// The entries it holds (`ibv_cq.cqe`: rxe's `2^k - 1` at or above
    /// the size asked for).
    pub fn size(&self) -> Result<u32, Error> {
        let h = self.0.handle;
        Ok(self.0.ctx.shared().with_dev(false, |d| d.cq_size(h))?)
    }

    /// `ibv_resize_cq`: holds at least `cqe` entries from now on, the
    /// completions queued kept in order; returns the new size. Refused
    /// below the completions queued ([`roce_proto::cq::CqError::BelowHeld`])
    /// or outside `1..=max_cqe`.
    pub fn resize(&self, cqe: u32) -> Result<u32, Error> {
        self.resize_holding(cqe, 0)
    }

    /// [`Cq::resize`] by a wrapper that polled `held` completions out of
    /// the CQ and still holds them for its caller (they count as queued).
    pub fn resize_holding(&self, cqe: u32, held: usize) -> Result<u32, Error> {
        let h = self.0.handle;
        self.0.ctx.shared().with_live_dev(false, |d| d.resize_cq(h, cqe, held))
    }

    /// `ibv_modify_cq` with `IBV_CQ_ATTR_MODERATE`: an armed CQ's event
    /// waits for `count` completions or `period`, whichever comes first
    /// (see [`roce_proto::cq::Moderation`]; rxe refuses the verb).
    pub fn set_moderation(&self, count: u16, period: Duration) -> Result<(), Error> {
        let h = self.0.handle;
        let m = roce_proto::cq::Moderation { count, period };
        // (A kick: the driver's sleep may now have to end sooner.)
        self.0.ctx.shared().with_live_dev(true, |d| d.modify_cq(h, m))
    }

    /// Arms the CQ: the next completion (or next solicited one) makes its
    /// channel readable once (`ibv_req_notify_cq`).
    pub fn req_notify(&self, solicited_only: bool) -> Result<(), Error> {
        let h = self.0.handle;
        let s = self.0.ctx.shared();
        s.with_live_dev(false, |d| d.req_notify_cq(h, solicited_only))?;
        // The application will sleep on the channel: the driver thread
        // receives for it from now, and what its posts deferred (a credit
        // update) leaves before it sleeps.
        s.end_app_poll();
        s.flush_owed();
        Ok(())
    }

    /// Polls until `out` has at least one completion or `timeout` passes;
    /// returns how many were polled (0 on timeout). It polls for the
    /// context's spin time, then sleeps in the socket until a packet
    /// arrives or another thread made completions, and makes progress
    /// itself when it wakes: no hand-over between threads on the way to the
    /// application. Timers meanwhile are the driver thread's.
    ///
    /// While it sleeps it receives for the whole context: a thread that
    /// busy-polls another CQ of the context then gets its packets through
    /// this one's wake-ups. A thread that waits for rare completions beside
    /// a busy poller (a control queue, the CM's QP 1) sleeps on a
    /// [`CompChannel`] instead ([`Cq::req_notify`], then
    /// [`CompChannel::get_event`]), as [`crate::cm::CmService`]'s does.
    pub fn wait(&self, out: &mut [Wc], timeout: Duration) -> Result<usize, Error> {
        let s = self.0.ctx.shared();
        let deadline = std::time::Instant::now() + timeout;
        // Counted as a waiter before the first look, so a completion made by
        // another thread after it wakes this one, and the driver thread
        // stays off the socket meanwhile (also while this one spins).
        let _waiting = s.enter_wait();
        if !s.spin.is_zero() {
            let spin_until = std::time::Instant::now() + s.spin;
            loop {
                let n = self.poll_as(out, true)?;
                if n > 0 {
                    return Ok(n);
                }
                let now = std::time::Instant::now();
                if now >= deadline {
                    return Ok(0);
                }
                if now >= spin_until {
                    break;
                }
                std::hint::spin_loop();
            }
        }
        // Without spinning, the first look only checks the CQ: the socket
        // is read by the sleep that follows, not once more before it.
        let (n, mut seen) = self.peek(out)?;
        if n > 0 {
            return Ok(n);
        }
        // As `poll`: an empty CQ of a failed device is an error, also
        // for a wait that only looks.
        s.live()?;
        if timeout.is_zero() {
            return Ok(0);
        }
        // The deadline was just set: the first sleep needs no look at the clock.
        loop {
            let (mut st, _) = s.sleep_and_progress(deadline, crate::driver::Defer::IfCompleted, Some(seen))?;
            let n = st.dev.poll_cq(self.0.handle, out)?;
            seen = st.dev.counters().completions;
            let next = st.dev.poll_timeout();
            drop(st);
            s.nudge_driver(next);
            if n > 0 {
                return Ok(n);
            }
            s.live()?;
            if std::time::Instant::now() >= deadline {
                return Ok(0);
            }
        }
    }
}

/// How long a thread's busy polls find nothing before each further empty
/// poll gives up the CPU ([`spun_empty`]).
const SPIN_BEFORE_YIELD: std::time::Duration = std::time::Duration::from_micros(50);

thread_local! {
    /// When this thread's busy polls last started finding nothing.
    static EMPTY_SINCE: std::cell::Cell<Option<std::time::Instant>> = const { std::cell::Cell::new(None) };
}

/// A busy poll of this thread found completions (`empty` false) or none.
/// After [`SPIN_BEFORE_YIELD`] of empty polls, each one yields the CPU
/// (`sched_yield`, which returns at once when nothing else is runnable
/// there). What the poller waits for may need another thread queued on its
/// CPU: a peer's driver thread that must place the poller's WRITE and send
/// its ACK while the peer's application spins on memory (`ib_write_lat`),
/// and a kernel may let a spinner run out its tick (4 ms) before a woken
/// thread gets the CPU (`docs/data-path.md`, step 6, has what it changed).
fn spun_empty(empty: bool, now: Option<std::time::Instant>) {
    EMPTY_SINCE.with(|c| {
        if !empty {
            c.set(None);
            return;
        }
        let now = now.unwrap_or_else(std::time::Instant::now);
        match c.get() {
            None => c.set(Some(now)),
            Some(t) if now.duration_since(t) > SPIN_BEFORE_YIELD => std::thread::yield_now(),
            Some(_) => {}
        }
    });
}
