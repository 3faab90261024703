//! The driver thread's progress policy, sans-IO: what it observed at `now`
//! goes in, what to do comes out (make a pass or not, sleep until when,
//! watch the socket or not, spin). Every heuristic of the thread and its
//! constants live here, so they are tested on virtual time (`tests` below);
//! `driver/thread.rs`'s `Shared::run` only reads the atomics, makes the pass and
//! sleeps as told.
//!
//! | the thread finds | it |
//! |---|---|
//! | nothing | passes when the socket is readable or a timer is due, else sleeps up to [`TICK`] |
//! | an application thread waiting in `Cq::wait` (and for [`WAITER_GRACE`] after) | is blind: leaves the socket to it, passes only for due timers or packets owed for [`OWED_GRACE`], looks again every [`BLIND_TICK`] |
//! | a busy poller's call within its [`AppGrace`] | is blind until the grace ends (woken to the microsecond) |
//! | a busy poller inside a call (`Look::in_call`: a poll's pass, a post's send) | counts it as a call made now: blind, and the grace doubles |
//! | a pass that received requests while no application called a verb for [`PASSIVE_AFTER`] | spins for its passive spin ([`PassiveSpin`]: from `driver_spin`, learned from the gaps between requests), yielding at each turn that finds nothing waiting |
//!
//! An application thread's own passes (a busy poll on an empty CQ) look at
//! the socket each time while it carries traffic, and once it has been
//! silent for [`SOCKET_QUIET`], at intervals of a fiftieth of the silence
//! (from [`QUIET_LOOK_EVERY`] up to [`QUIET_LOOK_MAX`]; [`SocketLooks`]): a
//! device whose traffic goes over the local link then stops paying a
//! `recvmmsg` per poll.

use std::time::{Duration, Instant};

/// The driver thread's longest sleep.
pub(crate) const TICK: Duration = Duration::from_millis(10);
/// Its longest sleep while an application thread drives progress.
pub(crate) const BLIND_TICK: Duration = Duration::from_millis(1);
/// How long the driver thread stays off the socket after the last waiter
/// returned: an application in a wait loop is back within microseconds,
/// and a driver thread polling the socket meanwhile would wake with every
/// packet only to find the waiter had it, then fight it for the lock.
pub(crate) const WAITER_GRACE: Duration = Duration::from_millis(2);
/// The longest the driver thread stays off the socket after a busy-polling
/// application thread's last call (see [`AppGrace`]), and the first grace
/// it gives: such a loop polls again within microseconds, and an event
/// loop's last poll before it sleeps (on a CQ it has not armed) costs its
/// next packet at most this.
pub(crate) const APP_GRACE_MAX: Duration = Duration::from_millis(1);
/// The shortest: an application that spins on memory between its verbs
/// calls (`ib_write_lat`, a flag at the end of an RDMA WRITE) has its
/// packets handled this long after its last call.
pub(crate) const APP_GRACE_MIN: Duration = Duration::from_micros(5);
/// An application that has not called a verb for this long is passive: its
/// peer's requests are the driver thread's alone, which then spins a while
/// after each (`Options::driver_spin`). Far above any busy poller's pause
/// (`ib_write_lat`'s calls can be 2-4 ms apart when a thread waits for a
/// CPU), so that the driver thread never spins beside one
/// (`docs/data-path.md`, step 6).
pub(crate) const PASSIVE_AFTER: Duration = Duration::from_millis(100);
/// The longest a passive side's spin grows to ([`PassiveSpin`]).
pub(crate) const PASSIVE_SPIN_MAX: Duration = Duration::from_millis(1);
/// How many spins after a passive spin ended a request still counts as its
/// stream's ([`PassiveSpin`]).
pub(crate) const SPIN_REACH: u32 = 4;
/// How long deferred packets may wait for a post to take them along before
/// the driver thread sends them (a ping-pong replies within microseconds).
pub(crate) const OWED_GRACE: Duration = Duration::from_micros(200);

/// How long the socket stays silent before an application thread's passes
/// stop looking at it every time.
pub(crate) const SOCKET_QUIET: Duration = Duration::from_millis(1);
/// How often they look at a socket silent for [`SOCKET_QUIET`]: what a
/// remote peer's first packet after that silence may wait at most, while
/// the application polls.
pub(crate) const QUIET_LOOK_EVERY: Duration = Duration::from_micros(20);
/// The longest interval between their looks, reached after a silence of
/// 10 ms. A look is a `recvmmsg` of about a microsecond, a few percent of
/// a busy poller's time if made every 20 us (`docs/data-path.md`, step 6).
pub(crate) const QUIET_LOOK_MAX: Duration = Duration::from_micros(200);
/// The look interval is this fraction of the silence: a remote peer's
/// first packet after a silence waits at most 2% of it (in the bounds above).
const QUIET_LOOK_DIVISOR: u32 = 50;

/// Whether an application thread's pass looks at the socket (a
/// `recvmmsg`, a syscall even when nothing waits there).
///
/// | the socket | a busy poller's pass looks |
/// |---|---|
/// | gave packets within [`SOCKET_QUIET`] | every time |
/// | silent for `d` longer | when `d / 50` passed since any look, within [`QUIET_LOOK_EVERY`] and [`QUIET_LOOK_MAX`] |
///
/// The silence counts from the last look that found packets, or from the
/// first look. Packets of this process's other devices come through
/// memory (the local link), so a busy poller of local traffic finds the
/// socket empty on every look: the looks cost more than the packets.
/// Passes of the driver thread and of a thread that slept in the socket
/// always look.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct SocketLooks {
    last_found: Option<Instant>,
    last_look: Option<Instant>,
    first_look: Option<Instant>,
}

impl SocketLooks {
    /// Whether a busy poller's pass at `now` looks.
    pub(crate) fn look(&self, now: Instant) -> bool {
        let (Some(last), Some(since)) = (self.last_look, self.last_found.or(self.first_look)) else { return true };
        let silence = now.saturating_duration_since(since);
        silence < SOCKET_QUIET
            || now.saturating_duration_since(last)
                >= (silence / QUIET_LOOK_DIVISOR).clamp(QUIET_LOOK_EVERY, QUIET_LOOK_MAX)
    }

    /// A look at `now` (any thread's) found packets or not.
    pub(crate) fn looked(&mut self, now: Instant, found: bool) {
        self.last_look = Some(now);
        self.first_look.get_or_insert(now);
        if found {
            self.last_found = Some(now);
        }
    }
}

/// How long the driver thread leaves the socket to a busy-polling
/// application after its last verbs call, learned from what it finds.
///
/// A loop that polls its CQ (UCX, perftest's bandwidth tests, a ping-pong)
/// calls again within microseconds: every time the driver thread looks and
/// the application has called since, the grace doubles (up to
/// [`APP_GRACE_MAX`], the driver then wakes about once a millisecond and
/// never fights the poller for packets). One that spins on memory between
/// its calls (`ib_write_lat`, NCCL-style flags) leaves the peer's packets
/// to the driver thread: each time a pass of the driver thread outside the
/// grace receives packets, the grace quarters (down to
/// [`APP_GRACE_MIN`]), so such packets are placed within microseconds of
/// arrival, as kernel rxe places them in softirq context.
///
/// A memory spinner also polls between its spins (`ib_write_lat` polls
/// its CQ for a WRITE's completion, one round trip), and the driver thread
/// looks several times during that poll, each time finding a new call.
/// What tells it from a busy poller that the scheduler took off its CPU
/// (which leaves the driver packets too) is its last call before it went:
/// a poll that returned completions, after which it went to do something
/// else. After such a departure, for [`GRACE_HOLD`], the grace doubles only
/// once until packets are left again: one doubling against one quartering
/// per turn keeps it at the floor (with a doubling per look it climbed back
/// to 1 ms whenever a round trip took more than about three graces, as in
/// a debug build on a loaded machine, and 1 in 100 WRITEs waited a
/// millisecond). A poller descheduled mid-poll is not held: its driver
/// thread, given a CPU more often than the poller's peers leave one, would
/// otherwise keep finding packets and keep its grace at the floor.
///
/// | the driver thread finds | grace |
/// |---|---|
/// | the application called since it last looked | x 2, at most 1 ms; once only within [`GRACE_HOLD`] of a departure |
/// | packets, in a pass past the grace | / 4, at least 5 us; a departure if the last call returned completions |
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct AppGrace {
    grace: Duration,
    /// When a pass last found packets the application left after a poll
    /// that returned completions, and whether the grace doubled since.
    left_at: Option<Instant>,
    doubled_since: bool,
}

/// How long after a departure the grace doubles only once: past a memory
/// spinner's turn (a round trip and its spin, tens to hundreds of
/// microseconds, more on a loaded machine).
pub(crate) const GRACE_HOLD: Duration = Duration::from_millis(10);

impl AppGrace {
    pub(crate) fn new() -> AppGrace {
        AppGrace { grace: APP_GRACE_MAX, left_at: None, doubled_since: false }
    }

    fn get(self) -> Duration {
        self.grace
    }

    /// The grace in us, as `DriverStats::app_grace_us` shows it.
    pub(crate) fn micros(self) -> u64 {
        u64::try_from(self.grace.as_micros()).unwrap_or(u64::MAX)
    }

    /// At `now`, the driver thread found the application called a verb
    /// since it last looked.
    fn app_was_active(&mut self, now: Instant) {
        let held = self.left_at.is_some_and(|t| now.saturating_duration_since(t) < GRACE_HOLD);
        if held && self.doubled_since {
            return;
        }
        self.doubled_since = true;
        self.grace = (self.grace * 2).min(APP_GRACE_MAX);
    }

    /// At `now`, a pass of the driver thread past the grace received
    /// packets the application left; `departed`: its last call returned
    /// completions.
    fn app_left_packets(&mut self, now: Instant, departed: bool) {
        self.grace = (self.grace / 4).max(APP_GRACE_MIN);
        if departed {
            self.left_at = Some(now);
            self.doubled_since = false;
        }
    }
}

/// How long a passive side's driver thread spins after a pass that
/// received requests, learned from the gaps between them.
///
/// A stream of requests (a WRITE stream into a perftest server) arrives in
/// bursts, one per `sendmmsg` of the sender: tens to hundreds of
/// microseconds apart on a veth path. A spin shorter than the gap ends in a
/// sleep, and the next burst's first packet wakes the thread: the kernel
/// does that wake-up (an IPI) in the softirq that delivers the packet, on
/// the sender's CPU when both ends share a host, where it is the per-packet
/// path's bottleneck. A request that follows a spin's end within
/// [`SPIN_REACH`] spins is taken as the same stream's: the spin doubles,
/// and a few doublings cover the gaps. One that comes later halves it,
/// back to `driver_spin`. Requests sparser than that never make it grow:
/// a side with a request every millisecond spins `driver_spin` (50 us)
/// after each, as before.
///
/// | the request that ends a sleep came, after the spin ended | the spin |
/// |---|---|
/// | within [`SPIN_REACH`] spins | x 2, at most [`PASSIVE_SPIN_MAX`] |
/// | later | / 2, at least `driver_spin` |
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct PassiveSpin {
    spin: Duration,
    /// `Options::driver_spin`: the spin's floor (0: no spin at all).
    base: Duration,
}

impl PassiveSpin {
    pub(crate) fn new(base: Duration) -> PassiveSpin {
        PassiveSpin { spin: base, base }
    }

    /// The spin now.
    pub(crate) fn get(self) -> Duration {
        self.spin
    }

    /// The spin in us, as `DriverStats::passive_spin_us` shows it.
    pub(crate) fn micros(self) -> u64 {
        u64::try_from(self.spin.as_micros()).unwrap_or(u64::MAX)
    }

    /// `driver_spin` is 0: a passive side never spins.
    fn off(self) -> bool {
        self.base.is_zero()
    }

    /// A request came `late` after the last spin ended.
    fn after_sleep(&mut self, late: Duration) {
        self.spin = if late < self.spin * SPIN_REACH {
            (self.spin * 2).min(PASSIVE_SPIN_MAX.max(self.base))
        } else {
            (self.spin / 2).max(self.base)
        };
    }
}

/// What the driver thread reads at the start of a turn (the atomics other
/// threads set).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Look {
    /// The earliest timer another thread's pass armed since the last look.
    pub(crate) nudged: Option<Instant>,
    /// Whether an application thread waits in `Cq::wait`.
    pub(crate) waiting: bool,
    /// A busy-polling application thread's last verbs call (`None`: never,
    /// or it armed a CQ since).
    pub(crate) last_call: Option<Instant>,
    /// Whether that call returned completions (the caller may go to do
    /// something else with them, as a memory spinner does).
    pub(crate) last_call_found: bool,
    /// A busy poller is inside a verbs call now: it calls at this very
    /// look. A bulk sender's poll sends the window an ACK opened, which
    /// takes the kernel 10-100 us, many floor graces; counted from the
    /// call's start, its grace would run out mid-call and the thread would
    /// take the ACKs the call is about to take, and read them as left.
    pub(crate) in_call: bool,
    /// How long packets a waiter's pass deferred have waited (`None`: none).
    pub(crate) owed: Option<Duration>,
}

/// The decision of a turn's start, kept for its end.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Turn {
    /// Make a progress pass now.
    pub(crate) pass: bool,
    /// An application thread drives progress: stay off the socket.
    pub(crate) blind: bool,
    /// When the busy poller's grace ends, if it has not.
    app_until: Option<Instant>,
    /// When deferred packets would be due, if no pass is made for them now.
    recheck: Option<Instant>,
    last_call: Option<Instant>,
    last_call_found: bool,
    now: Instant,
}

/// What a pass found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Passed {
    /// The engine's next timer (the pass's answer).
    pub(crate) next: Option<Instant>,
    /// It received packets.
    pub(crate) received: bool,
    /// Some of them were requests (a responder's work).
    pub(crate) requests: bool,
}

/// How the turn ends. `until` is when the thread means to wake next
/// (`Shared::driver_deadline`, which other threads read to know whether a
/// timer they armed needs a wake-up call).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Rest {
    /// Yield the CPU and start the next turn at once (a passive side spins).
    Spin { until: Instant },
    /// Sleep until `until`, woken earlier by the waker or, when `socket`,
    /// by a readable socket; `precise`: to the microsecond (a poller's
    /// grace), else `poll(2)`'s milliseconds.
    Sleep { until: Instant, socket: bool, precise: bool },
}

impl Rest {
    /// When the thread means to wake next.
    pub(crate) fn until(self) -> Instant {
        match self {
            Rest::Spin { until } | Rest::Sleep { until, .. } => until,
        }
    }
}

/// The driver thread's state between turns.
#[derive(Debug)]
pub(crate) struct DriverPolicy {
    /// The engine's next timer, as the last pass or a nudge said.
    next: Option<Instant>,
    grace: AppGrace,
    /// The busy poller's last call this thread saw.
    seen_call: Option<Instant>,
    /// Until when a passive side polls on (in the past: when it stopped).
    spin_until: Option<Instant>,
    /// How long it polls on (from `Options::driver_spin`).
    spin: PassiveSpin,
    /// Whether a waiter was there at the last look, and when they all went.
    was_waiting: bool,
    no_waiter_since: Option<Instant>,
}

impl DriverPolicy {
    pub(crate) fn new(driver_spin: Duration) -> DriverPolicy {
        DriverPolicy {
            next: None,
            grace: AppGrace::new(),
            seen_call: None,
            spin_until: None,
            spin: PassiveSpin::new(driver_spin),
            was_waiting: false,
            no_waiter_since: None,
        }
    }

    /// The busy poller's grace now (for `DriverStats::app_grace_us`).
    pub(crate) fn grace(&self) -> AppGrace {
        self.grace
    }

    /// A passive side's spin now (for `DriverStats::passive_spin_us`).
    pub(crate) fn passive_spin(&self) -> PassiveSpin {
        self.spin
    }

    /// A turn starts at `now` with what the thread read: pass or not.
    pub(crate) fn begin(&mut self, now: Instant, look: Look) -> Turn {
        if let Some(at) = look.nudged {
            self.next = Some(self.next.map_or(at, |n| n.min(at)));
        }
        if look.waiting {
            self.was_waiting = true;
        } else if std::mem::take(&mut self.was_waiting) {
            self.no_waiter_since = Some(now);
        }
        let look = if look.in_call { Look { last_call: Some(now), last_call_found: false, ..look } } else { look };
        if let Some(call) = look.last_call
            && self.seen_call != Some(call)
        {
            if self.seen_call.is_some() {
                self.grace.app_was_active(now);
            }
            self.seen_call = Some(call);
        }
        let app_until = look.last_call.map(|t| t + self.grace.get()).filter(|&t| now < t);
        let blind = look.waiting
            || self.no_waiter_since.is_some_and(|t| now.duration_since(t) < WAITER_GRACE)
            || app_until.is_some();
        let due = self.next.is_some_and(|t| t <= now);
        let pass = !blind || due || look.owed.is_some_and(|d| d >= OWED_GRACE);
        // Not passing: look again when the deferred packets would be due.
        let recheck = look.owed.filter(|_| !pass).map(|owed| now + (OWED_GRACE - owed));
        Turn { pass, blind, app_until, recheck, last_call: look.last_call, last_call_found: look.last_call_found, now }
    }

    /// The pass of `turn` ended at `now` with `passed`.
    pub(crate) fn passed(&mut self, turn: &Turn, now: Instant, passed: Passed) {
        self.next = passed.next;
        if !turn.blind && turn.last_call.is_some() && passed.received {
            self.grace.app_left_packets(now, turn.last_call_found);
        }
        // A passive side (no busy poller for `PASSIVE_AFTER`: a READ
        // target, a perftest server) keeps polling a while, only after
        // requests: a response or ACK answers what this side posted, and
        // no request of a ping-pong follows it.
        let passive = turn.last_call.is_none_or(|t| turn.now.saturating_duration_since(t) > PASSIVE_AFTER);
        if !turn.blind && passive && passed.requests && !self.spin.off() {
            if let Some(ended) = self.spin_until.filter(|&t| t <= turn.now) {
                self.spin.after_sleep(turn.now - ended);
            }
            self.spin_until = Some(now + self.spin.get());
        }
    }

    /// How the turn ends at `now`. The thread wakes at least every TICK (a
    /// timer a verb armed on another thread that is due later needs no
    /// wake-up call, so posting stays free of syscalls); a busy poller that
    /// stops polling hands the socket back at once.
    pub(crate) fn rest(&self, turn: &Turn, now: Instant) -> Rest {
        let tick = now + if turn.blind { BLIND_TICK } else { TICK };
        let until = [self.next, turn.recheck, turn.app_until].into_iter().flatten().fold(tick, Instant::min);
        // Spinning, the next packet of a ping-pong (a READ, an atomic) is
        // taken without a wake-up.
        if !turn.blind && self.spin_until.is_some_and(|t| now < t) {
            return Rest::Spin { until };
        }
        // The end of a busy poller's grace is kept to the microsecond: it is
        // short by design, and grows while the poller keeps polling.
        Rest::Sleep { until, socket: !turn.blind, precise: turn.app_until == Some(until) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn us(n: u64) -> Duration {
        Duration::from_micros(n)
    }

    /// The grace table: from 1 ms, packets left to the driver thread bring
    /// it to 5 us in five passes (1 ms / 4^5 is below 5 us); a poller back
    /// at work doubles it to 1 ms again, never past either bound, but only
    /// once until packets are left again while they were left within
    /// GRACE_HOLD.
    #[test]
    fn the_grace_quarters_on_packets_left_and_doubles_while_the_application_polls() {
        let t0 = Instant::now();
        let mut g = AppGrace::new();
        assert_eq!(g.get(), APP_GRACE_MAX);
        g.app_was_active(t0);
        assert_eq!(g.get(), APP_GRACE_MAX);
        let mut seen = vec![];
        for _ in 0..6 {
            g.app_left_packets(t0, true);
            seen.push(g.get().as_micros());
        }
        assert_eq!(seen, [250, 62, 15, 5, 5, 5]);
        assert_eq!(g.get(), APP_GRACE_MIN);
        for _ in 0..3 {
            g.app_was_active(t0);
            g.app_left_packets(t0, true);
        }
        assert_eq!(g.get(), APP_GRACE_MIN, "an ib_write_lat turn: one of each");
        for _ in 0..5 {
            g.app_was_active(t0 + us(50));
        }
        assert_eq!(g.get(), us(10), "within GRACE_HOLD of a departure: one doubling");
        g.app_left_packets(t0 + us(60), false);
        assert_eq!(g.get(), APP_GRACE_MIN);
        for _ in 0..2 {
            g.app_was_active(t0 + us(70));
        }
        assert_eq!(g.get(), APP_GRACE_MIN, "packets left mid-poll do not lift the hold: its one doubling was taken");
        let mut g2 = AppGrace::new();
        for _ in 0..5 {
            g2.app_left_packets(t0, false);
        }
        for _ in 0..3 {
            g2.app_was_active(t0);
        }
        assert_eq!(g2.get(), us(40), "packets left mid-poll (a poller descheduled) hold nothing");
        let mut n = 0;
        while g.get() < APP_GRACE_MAX {
            g.app_was_active(t0 + GRACE_HOLD);
            n += 1;
        }
        assert_eq!((n, g.get()), (8, Duration::from_millis(1)), "5 us doubled 8 times passes 1 ms");
    }

    /// `ib_write_lat` on virtual time: each turn the application polls for
    /// a round trip (the driver thread wakes at each grace's end and finds
    /// a new call) then spins on memory until the peer's WRITE, which the
    /// driver thread's pass past the grace places. However long the round
    /// trip, the grace comes down from 1 ms and stays at most 10 us, so the
    /// WRITE waits no more than that past the poller's last call.
    #[test]
    fn beside_a_memory_spinner_the_grace_stays_down_however_long_the_round_trip() {
        for rtt in [us(20), us(90), us(400)] {
            let mut p = DriverPolicy::new(Duration::ZERO);
            let mut now = Instant::now();
            let mut worst_wait = Duration::ZERO;
            for turn_no in 0..200 {
                // The poll: calls every microsecond for one round trip; the
                // thread wakes at its deadlines and sees the latest call.
                let start = now;
                let mut wake = now;
                while wake < start + rtt {
                    let look = Look { last_call: Some(wake), ..Look::default() };
                    let turn = p.begin(wake, look);
                    assert!(!turn.pass, "the poller is within its grace");
                    wake = p.rest(&turn, wake).until();
                }
                // The spin: the last call was at the round trip's end; the
                // peer's WRITE is there; the thread passes at the grace's end.
                let last = start + rtt;
                let look = Look { last_call: Some(last), last_call_found: true, ..Look::default() };
                let mut t = wake.max(last);
                let mut turn = p.begin(t, look);
                while !turn.pass {
                    t = p.rest(&turn, t).until();
                    turn = p.begin(t, look);
                }
                p.passed(&turn, t, Passed { next: None, received: true, requests: true });
                if turn_no >= 10 {
                    worst_wait = worst_wait.max(t - last);
                }
                now = t + us(1);
            }
            assert!(p.grace().get() <= us(10), "rtt {rtt:?}: grace {:?}", p.grace().get());
            assert!(worst_wait <= us(10), "rtt {rtt:?}: a WRITE waited {worst_wait:?} after the last call");
        }
    }

    /// A bulk sender on virtual time: its poll takes an ACK and sends the
    /// window it opened in one call of 75 us (a veth path's forwarding runs
    /// in the send), 1 us apart, and an ACK arrives every 40 us. With its
    /// grace at the floor (a memory spinner before it), the thread must see
    /// a call under way as a call: it then stays blind, makes no pass and
    /// its grace grows back to 1 ms. Counted from the call's start (the
    /// look without `in_call`), the grace ran out mid-call at each wake, the
    /// thread passed, received the ACKs and the grace stayed at the floor.
    #[test]
    fn a_bulk_senders_long_calls_keep_the_driver_thread_off_its_acks() {
        for in_calls in [true, false] {
            let mut p = DriverPolicy::new(Duration::ZERO);
            let t0 = Instant::now();
            for _ in 0..6 {
                p.grace.app_left_packets(t0, false);
            }
            assert_eq!(p.grace().get(), APP_GRACE_MIN, "brought to the floor");
            let (call, gap) = (us(75), us(1));
            let at = |t: Instant| {
                // The call under way at `t`, and the start of the last one
                // ended before it (what `note_app_poll` stores at its end).
                let k = t.saturating_duration_since(t0).as_micros() as u32 / (call + gap).as_micros() as u32;
                let start = t0 + (call + gap) * k;
                let inside = t < start + call;
                let last = if inside { start.checked_sub(call + gap).filter(|&s| s >= t0) } else { Some(start) };
                (inside, last)
            };
            let (mut t, mut passes) = (t0 + us(10), 0);
            let end = t0 + Duration::from_millis(200);
            while t < end {
                let (inside, last) = at(t);
                let look = Look { last_call: last.or(Some(t0)), in_call: in_calls && inside, ..Look::default() };
                let turn = p.begin(t, look);
                if turn.pass {
                    passes += 1;
                    p.passed(&turn, t, Passed { next: None, received: true, requests: false });
                }
                // Asleep on the socket, the thread is woken by the next ACK.
                let rest = p.rest(&turn, t);
                let next_ack = t0 + us(40) * (t.saturating_duration_since(t0).as_micros() as u32 / 40 + 1);
                t = match rest {
                    Rest::Sleep { until, socket: true, .. } => until.min(next_ack),
                    r => r.until(),
                }
                .max(t + us(1));
            }
            if in_calls {
                assert_eq!(p.grace().get(), APP_GRACE_MAX, "back to a millisecond");
                assert_eq!(passes, 0, "no pass during the stream");
            } else {
                assert_eq!(p.grace().get(), APP_GRACE_MIN, "the grace stays at the floor");
                assert!(passes > 1000, "the thread took the ACKs: {passes} passes");
            }
        }
    }

    /// A busy poller the scheduler takes off its CPU now and then (every
    /// 4 ms, for 100 us, mid-poll) leaves its driver thread packets each
    /// time, and still gets back a grace of a millisecond between: being
    /// descheduled is not a departure.
    #[test]
    fn a_descheduled_busy_poller_gets_its_long_grace_back() {
        let mut p = DriverPolicy::new(Duration::ZERO);
        let t0 = Instant::now();
        let mut t = t0;
        // Brought to the floor first, as by a memory spinner.
        for _ in 0..6 {
            p.grace.app_left_packets(t, true);
        }
        assert_eq!(p.grace().get(), APP_GRACE_MIN);
        let mut after_tick = vec![];
        for tick in 1..=20u32 {
            let off = t0 + Duration::from_millis(4) * tick;
            // Polling without pause until the scheduler takes the CPU: the
            // thread wakes at each grace's end and finds a newer call.
            while t < off {
                let turn = p.begin(t, Look { last_call: Some(t), ..Look::default() });
                assert!(!turn.pass);
                t = p.rest(&turn, t).until().min(off);
            }
            // Away after an empty poll: at its grace's end the thread
            // passes and finds packets.
            let look = Look { last_call: Some(off), ..Look::default() };
            let mut at = off;
            let mut turn = p.begin(at, look);
            while !turn.pass {
                at = p.rest(&turn, at).until();
                turn = p.begin(at, look);
            }
            p.passed(&turn, at, Passed { next: None, received: true, requests: false });
            t = at + us(100);
            after_tick.push(p.grace().micros());
        }
        assert!(after_tick[5..].iter().all(|&g| g >= 250), "graces after each tick: {after_tick:?}");
    }

    /// Alone, the thread passes every turn and sleeps on the socket until
    /// the engine's next timer, at most a TICK.
    #[test]
    fn alone_it_watches_the_socket_until_the_next_timer_or_a_tick() {
        let t0 = Instant::now();
        let mut p = DriverPolicy::new(Duration::ZERO);
        let turn = p.begin(t0, Look::default());
        assert!(turn.pass && !turn.blind);
        p.passed(&turn, t0, Passed { next: None, received: false, requests: false });
        assert_eq!(p.rest(&turn, t0), Rest::Sleep { until: t0 + TICK, socket: true, precise: false });
        p.passed(&turn, t0, Passed { next: Some(t0 + us(700)), received: false, requests: false });
        assert_eq!(p.rest(&turn, t0), Rest::Sleep { until: t0 + us(700), socket: true, precise: false });
        // A nudge from another thread's pass brings an earlier timer in.
        let turn = p.begin(t0 + us(10), Look { nudged: Some(t0 + us(300)), ..Look::default() });
        assert_eq!(p.rest(&turn, t0 + us(10)).until(), t0 + us(300));
    }

    /// A waiter in `Cq::wait` has the socket: the thread is blind, passes
    /// only for a due timer or packets owed for OWED_GRACE, looks every
    /// BLIND_TICK, and stays blind WAITER_GRACE after the waiter went.
    #[test]
    fn beside_a_waiter_it_only_runs_timers_and_owed_packets() {
        let t0 = Instant::now();
        let mut p = DriverPolicy::new(Duration::ZERO);
        let waiting = Look { waiting: true, ..Look::default() };
        let turn = p.begin(t0, waiting);
        assert!(turn.blind && !turn.pass);
        assert_eq!(p.rest(&turn, t0), Rest::Sleep { until: t0 + BLIND_TICK, socket: false, precise: false });
        // Packets owed for 150 us: not yet, but look again when they are due.
        let turn = p.begin(t0, Look { owed: Some(us(150)), ..waiting });
        assert!(!turn.pass);
        assert_eq!(p.rest(&turn, t0), Rest::Sleep { until: t0 + us(50), socket: false, precise: false });
        let turn = p.begin(t0 + us(50), Look { owed: Some(OWED_GRACE), ..waiting });
        assert!(turn.pass, "owed for OWED_GRACE: the driver sends them");
        // A timer due: a pass, blind still.
        p.passed(&turn, t0 + us(50), Passed { next: Some(t0 + us(400)), received: true, requests: true });
        let turn = p.begin(t0 + us(400), waiting);
        assert!(turn.pass && turn.blind);
        p.passed(&turn, t0 + us(400), Passed { next: None, received: false, requests: false });
        // The waiter goes at 1 ms: blind until 3 ms, then watching.
        let gone = t0 + Duration::from_millis(1);
        assert!(p.begin(gone, Look::default()).blind);
        assert!(p.begin(gone + WAITER_GRACE - us(1), Look::default()).blind);
        let turn = p.begin(gone + WAITER_GRACE, Look::default());
        assert!(turn.pass && !turn.blind);
    }

    /// A busy poller: blind until its last call plus the grace, woken to
    /// the microsecond then; the grace doubles with each new call seen and
    /// quarters when a pass past it finds packets.
    #[test]
    fn beside_a_busy_poller_it_waits_out_the_learned_grace() {
        let t0 = Instant::now();
        let mut p = DriverPolicy::new(Duration::ZERO);
        let call = |t| Look { last_call: Some(t), ..Look::default() };
        let turn = p.begin(t0 + us(100), call(t0));
        assert!(turn.blind && !turn.pass);
        assert_eq!(
            p.rest(&turn, t0 + us(100)),
            Rest::Sleep { until: t0 + APP_GRACE_MAX, socket: false, precise: true }
        );
        // Past the grace, the poller gone quiet: a pass that finds packets
        // quarters the grace.
        let late = t0 + APP_GRACE_MAX + us(1);
        let turn = p.begin(late, call(t0));
        assert!(turn.pass && !turn.blind);
        p.passed(&turn, late, Passed { next: None, received: true, requests: false });
        assert_eq!(p.grace().micros(), 250);
        // A new call: the grace doubles, and the thread is blind until it ends.
        let c2 = late + us(10);
        let turn = p.begin(c2 + us(1), call(c2));
        assert_eq!(p.grace().micros(), 500);
        assert_eq!(p.rest(&turn, c2 + us(1)), Rest::Sleep { until: c2 + us(500), socket: false, precise: true });
        // The same call seen again does not count twice.
        p.begin(c2 + us(2), call(c2));
        assert_eq!(p.grace().micros(), 500);
    }

    /// A socket that gave packets is looked at on every pass; silent for
    /// SOCKET_QUIET, at a fiftieth of the silence, from QUIET_LOOK_EVERY up
    /// to QUIET_LOOK_MAX; another thread's look counts; a packet found
    /// makes it busy again at once.
    #[test]
    fn a_quiet_socket_is_looked_at_less_often_the_longer_it_is_silent() {
        let t0 = Instant::now();
        let mut s = SocketLooks::default();
        assert!(s.look(t0), "never looked: look");
        s.looked(t0, true);
        for t in [1, 2, 500, 999] {
            assert!(s.look(t0 + us(t)), "busy: every pass ({t} us)");
            s.looked(t0 + us(t), false);
        }
        // Silent for SOCKET_QUIET: every 20 us (a fiftieth of 1 ms).
        assert!(!s.look(t0 + SOCKET_QUIET), "1 us since the last look");
        assert!(s.look(t0 + us(999) + QUIET_LOOK_EVERY + us(1)), "silent 1.02 ms, looked 20.4 us ago");
        // Silent 1.5 ms: every 30 us.
        s.looked(t0 + us(1500), false);
        assert!(!s.look(t0 + us(1529)));
        assert!(s.look(t0 + us(1531)));
        // Silent 5 ms: every 100 us.
        s.looked(t0 + us(5000), false);
        assert!(!s.look(t0 + us(5099)));
        assert!(s.look(t0 + us(5103)));
        // Silent 10 ms and more: every QUIET_LOOK_MAX, no longer.
        for at in [us(10_000), Duration::from_secs(1), Duration::from_secs(3600)] {
            s.looked(t0 + at, false);
            assert!(!s.look(t0 + at + QUIET_LOOK_MAX - us(1)), "silent {at:?}");
            assert!(s.look(t0 + at + QUIET_LOOK_MAX), "silent {at:?}: QUIET_LOOK_MAX at most");
        }
        // Another thread's look (the driver's) counts too.
        let t1 = t0 + Duration::from_secs(3601);
        s.looked(t1, false);
        assert!(!s.look(t1 + us(1)));
        s.looked(t1 + us(10), true);
        assert!(s.look(t1 + us(11)), "packets again: every pass");
        assert!(s.look(t1 + us(10) + SOCKET_QUIET - us(1)), "every pass for SOCKET_QUIET");
    }

    /// A socket that never gave packets counts its silence from the first
    /// look: every pass for SOCKET_QUIET, then as a quiet one.
    #[test]
    fn a_socket_that_never_gave_packets_is_silent_from_the_first_look() {
        let t0 = Instant::now();
        let mut s = SocketLooks::default();
        s.looked(t0, false);
        assert!(s.look(t0 + us(1)), "not yet silent for SOCKET_QUIET");
        s.looked(t0 + us(990), false);
        assert!(!s.look(t0 + us(1000)));
        s.looked(t0 + us(20_000), false);
        assert!(!s.look(t0 + us(20_199)));
        assert!(s.look(t0 + us(20_200)));
    }

    /// A passive side's spin on virtual time: requests come at `times`; at
    /// each, the thread is still spinning (it takes them without a wake-up)
    /// or was asleep since its spin ended (woken by them). Returns the
    /// wake-ups and the spin at the end.
    fn passive_side(base: Duration, times: impl Iterator<Item = Instant>) -> (usize, Duration) {
        let mut p = DriverPolicy::new(base);
        let mut woken = 0;
        for t in times {
            let turn = p.begin(t, Look::default());
            if matches!(p.rest(&turn, t), Rest::Sleep { .. }) {
                woken += 1;
            }
            p.passed(&turn, t, Passed { next: None, received: true, requests: true });
        }
        (woken, p.passive_spin().get())
    }

    /// A stream of requests in bursts 120 us apart (a sender's sendmmsg on
    /// a veth path) soon stops waking the thread: its spin covers the gaps.
    /// Requests a millisecond or more apart keep the spin at `driver_spin`;
    /// after a stream, they bring it back down. A spin of 0 stays 0.
    #[test]
    fn a_passive_sides_spin_learns_to_cover_a_streams_gaps_only() {
        let t0 = Instant::now();
        let base = us(50);
        let stream = |from: Instant, gap: Duration, n: u32| (0..n).map(move |k| from + gap * k);
        let (woken, spin) = passive_side(base, stream(t0, us(120), 1000));
        assert!(woken <= 3, "woken {woken} times in 1000 bursts");
        assert!((us(200)..=us(400)).contains(&spin), "spin {spin:?}");
        for gap in [us(1000), us(3000)] {
            let (woken, spin) = passive_side(base, stream(t0, gap, 100));
            assert_eq!((woken, spin), (100, base), "requests {gap:?} apart: a wake-up each, the spin unchanged");
        }
        let mut after = passive_side(base, stream(t0, us(120), 1000).chain(stream(t0 + us(200_000), us(5000), 5)));
        assert_eq!(after.1, base, "back to driver_spin");
        after = passive_side(us(0), stream(t0, us(10), 100));
        assert_eq!(after, (100, us(0)), "no spin: a wake-up each");
        let (_, spin) = passive_side(base, stream(t0, us(30), 1000).chain(stream(t0 + us(30_000), us(500), 1000)));
        assert!(spin <= PASSIVE_SPIN_MAX, "at most a millisecond: {spin:?}");
    }

    /// A passive side (no verb call for PASSIVE_AFTER) spins for
    /// `driver_spin` after a pass that received requests; not after
    /// responses alone, not beside a poller, not when the spin is 0.
    #[test]
    fn a_passive_side_spins_after_requests_only() {
        let t0 = Instant::now();
        let spin = us(50);
        let mut p = DriverPolicy::new(spin);
        let turn = p.begin(t0, Look::default());
        p.passed(&turn, t0, Passed { next: None, received: true, requests: false });
        assert!(matches!(p.rest(&turn, t0), Rest::Sleep { .. }), "after responses only");
        p.passed(&turn, t0, Passed { next: None, received: true, requests: true });
        assert_eq!(p.rest(&turn, t0 + us(49)), Rest::Spin { until: t0 + us(49) + TICK });
        assert!(matches!(p.rest(&turn, t0 + spin), Rest::Sleep { .. }), "the spin ends");
        // A poller called 50 ms ago (past its grace, not passive): no spin.
        let mut p = DriverPolicy::new(spin);
        let now = t0 + Duration::from_millis(60);
        let turn = p.begin(now, Look { last_call: Some(t0 + Duration::from_millis(10)), ..Look::default() });
        assert!(turn.pass && !turn.blind);
        p.passed(&turn, now, Passed { next: None, received: true, requests: true });
        assert!(matches!(p.rest(&turn, now), Rest::Sleep { .. }), "beside a poller");
        // Its last call 100 ms back: passive again.
        let later = t0 + Duration::from_millis(111);
        let turn = p.begin(later, Look { last_call: Some(t0 + Duration::from_millis(10)), ..Look::default() });
        p.passed(&turn, later, Passed { next: None, received: true, requests: true });
        assert!(matches!(p.rest(&turn, later), Rest::Spin { .. }));
        // Spin 0: never.
        let mut p = DriverPolicy::new(Duration::ZERO);
        let turn = p.begin(t0, Look::default());
        p.passed(&turn, t0, Passed { next: None, received: true, requests: true });
        assert!(matches!(p.rest(&turn, t0), Rest::Sleep { .. }));
    }
}
