//! The simulation: endpoints, the in-flight queue, virtual time and the event loop.

use std::cmp::{Ordering, Reverse};
use std::collections::{BinaryHeap, HashMap};
use std::fmt;
use std::net::IpAddr;
use std::time::{Duration, Instant};

use roce_faults::{ConfigError, FaultConfig, Injector};

use crate::stats::{EndpointStats, Stats};
use crate::trace::{Fate, TraceEvent};
use crate::{Endpoint, Transmit};

/// Size of the buffer handed to [`Endpoint::poll_transmit`]: room for the largest UDP payload.
pub const TRANSMIT_BUF_LEN: usize = 65_536;

/// At most this many datagrams are taken from one endpoint in one [`Sim::step`];
/// an endpoint with more queued keeps virtual time from advancing until it is
/// drained, over several steps (so an endpoint that never stops emitting is a
/// livelock caught by [`Bound::max_steps`] rather than a hang).
pub const MAX_TRANSMITS_PER_STEP: usize = 4096;

/// Handle of an endpoint attached to a [`Sim`]; endpoints are numbered from 0 in the order they were added.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct EndpointId(usize);

impl EndpointId {
    /// The endpoint's number: its index in [`Stats::per_endpoint`].
    pub fn index(self) -> usize {
        self.0
    }
}

impl fmt::Display for EndpointId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "endpoint {}", self.0)
    }
}

/// Limits on one [`Sim::run_until`]: exceeding either is a [`SimError::Livelock`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Bound {
    /// Most [`Sim::step`]s that may be taken.
    pub max_steps: u64,
    /// Most virtual time that may pass; the simulation never advances past it.
    pub max_virtual_time: Duration,
}

impl Bound {
    /// A bound of `max_steps` steps and `max_virtual_time` of virtual time.
    pub fn new(max_steps: u64, max_virtual_time: Duration) -> Self {
        Self { max_steps, max_virtual_time }
    }
}

impl Default for Bound {
    /// Ten million steps or one hour of virtual time.
    fn default() -> Self {
        Self { max_steps: 10_000_000, max_virtual_time: Duration::from_secs(3600) }
    }
}

/// Which limit of a [`Bound`] a run hit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Limit {
    /// [`Bound::max_steps`].
    Steps(u64),
    /// [`Bound::max_virtual_time`].
    VirtualTime(Duration),
}

impl fmt::Display for Limit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Limit::Steps(n) => write!(f, "step limit {n}"),
            Limit::VirtualTime(d) => write!(f, "virtual time limit {d:?}"),
        }
    }
}

/// What a successful run did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RunStats {
    /// Steps taken.
    pub steps: u64,
    /// Virtual time that passed.
    pub virtual_elapsed: Duration,
}

/// Why a run failed. The messages name the seed, to replay the run.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SimError {
    /// The run hit a limit of its [`Bound`] before its condition held.
    #[error(
        "livelock: {limit} reached after {steps} steps and {virtual_elapsed:?} of virtual time without the \
         condition holding; replay with seed {seed}"
    )]
    Livelock {
        /// Seed of the simulation.
        seed: u64,
        /// Steps taken by the run.
        steps: u64,
        /// Virtual time that passed in the run.
        virtual_elapsed: Duration,
        /// The limit hit.
        limit: Limit,
    },
    /// Nothing was left to do (nothing in flight, no timeout, nothing to send) before the condition held.
    #[error(
        "stalled: nothing left to do after {steps} steps and {virtual_elapsed:?} of virtual time, but the \
         condition does not hold; replay with seed {seed}"
    )]
    Stalled {
        /// Seed of the simulation.
        seed: u64,
        /// Steps taken by the run.
        steps: u64,
        /// Virtual time that passed in the run.
        virtual_elapsed: Duration,
    },
}

/// [`Sim::try_add_endpoint`] was given an address that another endpoint already has.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("an endpoint is already attached at {0}")]
pub struct DuplicateAddress(pub IpAddr);

struct Node<E> {
    addr: IpAddr,
    endpoint: E,
    down: bool,
}

/// A datagram copy in flight, ordered by (arrival, seq).
struct InFlight {
    arrival: Instant,
    seq: u64,
    id: u64,
    src: usize,
    dst: usize,
    src_port: u16,
    dst_port: u16,
    data: Vec<u8>,
}

impl InFlight {
    fn key(&self) -> (Instant, u64) {
        (self.arrival, self.seq)
    }
}

impl PartialEq for InFlight {
    fn eq(&self, other: &Self) -> bool {
        self.key() == other.key()
    }
}

impl Eq for InFlight {}

impl PartialOrd for InFlight {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for InFlight {
    fn cmp(&self, other: &Self) -> Ordering {
        self.key().cmp(&other.key())
    }
}

enum StepOutcome {
    /// Nothing was left to do.
    Idle,
    /// Some work was done.
    Worked,
    /// The next event lies past the deadline; time was not advanced.
    Blocked,
}

/// A callback given every [`TraceEvent`].
pub type TraceHook = Box<dyn FnMut(&TraceEvent)>;

/// A simulated network of sans-IO endpoints on virtual time.
///
/// See the [crate documentation](crate) for an example.
pub struct Sim<E: Endpoint> {
    seed: u64,
    /// The fault model, drawing from the generator seeded with `seed`.
    faults: Injector,
    start: Instant,
    now: Instant,
    nodes: Vec<Node<E>>,
    by_addr: HashMap<IpAddr, usize>,
    /// When each directed link (src, dst) finishes serialising what it was given.
    links: HashMap<(usize, usize), Instant>,
    /// Latest arrival scheduled on each directed link for datagrams that are
    /// not reordered: links are FIFO, so jitter never overtakes.
    fifo: HashMap<(usize, usize), Instant>,
    queue: BinaryHeap<Reverse<InFlight>>,
    next_seq: u64,
    stats: Stats,
    buf: Vec<u8>,
    hook: Option<TraceHook>,
    log: Option<Vec<TraceEvent>>,
}

impl<E: Endpoint + fmt::Debug> fmt::Debug for Sim<E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Sim")
            .field("seed", &self.seed)
            .field("elapsed", &self.elapsed())
            .field("faults", self.faults.config())
            .field("endpoints", &self.nodes.iter().map(|n| (n.addr, n.down, &n.endpoint)).collect::<Vec<_>>())
            .field("in_flight", &self.queue.len())
            .field("stats", &self.stats)
            .finish_non_exhaustive()
    }
}

impl<E: Endpoint> Sim<E> {
    /// A simulation with no endpoints whose randomness comes from `seed` and whose virtual clock starts now.
    /// An invalid configuration ([`FaultConfig::validate`]) is refused.
    pub fn new(seed: u64, faults: FaultConfig) -> Result<Self, ConfigError> {
        faults.validate()?;
        let start = Instant::now();
        Ok(Self {
            seed,
            faults: Injector::new(faults, seed),
            start,
            now: start,
            nodes: Vec::new(),
            by_addr: HashMap::new(),
            links: HashMap::new(),
            fifo: HashMap::new(),
            queue: BinaryHeap::new(),
            next_seq: 0,
            stats: Stats::default(),
            buf: vec![0; TRANSMIT_BUF_LEN],
            hook: None,
            log: None,
        })
    }

    /// The seed the simulation was created with.
    pub fn seed(&self) -> u64 {
        self.seed
    }

    /// The current virtual time.
    pub fn now(&self) -> Instant {
        self.now
    }

    /// The virtual time the simulation started at.
    pub fn start(&self) -> Instant {
        self.start
    }

    /// Virtual time elapsed since the start.
    pub fn elapsed(&self) -> Duration {
        self.now - self.start
    }

    /// The fault model in force.
    pub fn faults(&self) -> &FaultConfig {
        self.faults.config()
    }

    /// Replaces the fault model for datagrams sent from now on (those in flight keep their fate).
    /// An invalid configuration is refused and the old one stays.
    pub fn set_faults(&mut self, faults: FaultConfig) -> Result<(), ConfigError> {
        faults.validate()?;
        self.faults.set_config(faults);
        Ok(())
    }

    /// Attaches `endpoint` at `addr`.
    ///
    /// # Panics
    /// If an endpoint is already attached at `addr` (see [`Sim::try_add_endpoint`]).
    pub fn add_endpoint(&mut self, addr: IpAddr, endpoint: E) -> EndpointId {
        match self.try_add_endpoint(addr, endpoint) {
            Ok(id) => id,
            Err(e) => panic!("{e}"),
        }
    }

    /// Attaches `endpoint` at `addr`, unless an endpoint is already there.
    pub fn try_add_endpoint(&mut self, addr: IpAddr, endpoint: E) -> Result<EndpointId, DuplicateAddress> {
        if self.by_addr.contains_key(&addr) {
            return Err(DuplicateAddress(addr));
        }
        let idx = self.nodes.len();
        self.nodes.push(Node { addr, endpoint, down: false });
        self.by_addr.insert(addr, idx);
        self.stats.per_endpoint.push(EndpointStats::default());
        Ok(EndpointId(idx))
    }

    /// Number of endpoints attached.
    pub fn endpoint_count(&self) -> usize {
        self.nodes.len()
    }

    /// The endpoint `id`.
    ///
    /// # Panics
    /// If `id` is not an endpoint of this simulation.
    pub fn endpoint(&self, id: EndpointId) -> &E {
        &self.nodes[id.0].endpoint
    }

    /// The endpoint `id`, mutably (e.g. to make it queue work).
    ///
    /// # Panics
    /// If `id` is not an endpoint of this simulation.
    pub fn endpoint_mut(&mut self, id: EndpointId) -> &mut E {
        &mut self.nodes[id.0].endpoint
    }

    /// The address of endpoint `id`.
    ///
    /// # Panics
    /// If `id` is not an endpoint of this simulation.
    pub fn addr(&self, id: EndpointId) -> IpAddr {
        self.nodes[id.0].addr
    }

    /// The endpoint attached at `addr`, if any.
    pub fn endpoint_id(&self, addr: IpAddr) -> Option<EndpointId> {
        self.by_addr.get(&addr).copied().map(EndpointId)
    }

    /// All endpoints, in the order they were added.
    pub fn endpoints(&self) -> impl Iterator<Item = (EndpointId, &E)> {
        self.nodes.iter().enumerate().map(|(i, n)| (EndpointId(i), &n.endpoint))
    }

    /// Takes endpoint `id` off the network (`down = true`) or puts it back.
    ///
    /// While down, every datagram it sends and every datagram to it (including
    /// those already in flight when they arrive) is lost and counted in
    /// [`Stats::down`]. The endpoint itself keeps running: it is still polled
    /// and its timeouts still fire.
    ///
    /// # Panics
    /// If `id` is not an endpoint of this simulation.
    pub fn set_down(&mut self, id: EndpointId, down: bool) {
        self.nodes[id.0].down = down;
    }

    /// Whether endpoint `id` is down (see [`Sim::set_down`]).
    ///
    /// # Panics
    /// If `id` is not an endpoint of this simulation.
    pub fn is_down(&self, id: EndpointId) -> bool {
        self.nodes[id.0].down
    }

    /// Counters so far.
    pub fn stats(&self) -> &Stats {
        &self.stats
    }

    /// Datagram copies in flight.
    pub fn in_flight(&self) -> usize {
        self.queue.len()
    }

    /// Calls `hook` with every trace event from now on (replacing any previous hook).
    pub fn set_trace(&mut self, hook: TraceHook) {
        self.hook = Some(hook);
    }

    /// Removes the trace hook, if any.
    pub fn clear_trace(&mut self) {
        self.hook = None;
    }

    /// Starts (`true`) or stops (`false`, discarding what was recorded) keeping trace events in memory.
    pub fn record_trace(&mut self, on: bool) {
        match (on, self.log.is_some()) {
            (true, false) => self.log = Some(Vec::new()),
            (false, _) => self.log = None,
            (true, true) => {}
        }
    }

    /// The trace events recorded so far (empty unless [`Sim::record_trace`] is on).
    pub fn trace(&self) -> &[TraceEvent] {
        self.log.as_deref().unwrap_or(&[])
    }

    /// Takes the trace events recorded so far, leaving recording on if it was.
    pub fn take_trace(&mut self) -> Vec<TraceEvent> {
        self.log.as_mut().map(std::mem::take).unwrap_or_default()
    }

    /// One unit of work.
    ///
    /// First every endpoint's `poll_transmit` is drained at the current time
    /// (at most [`MAX_TRANSMITS_PER_STEP`] each; if one had more, the step ends
    /// there) and the faults are applied. Then virtual time jumps to the
    /// earliest of the next delivery and every endpoint's `poll_timeout` (a
    /// timeout in the past fires now), the datagrams due then are delivered in
    /// the order they were scheduled, and `handle_timeout` is called, in
    /// endpoint order, on every endpoint whose timeout is then due.
    ///
    /// Returns false when nothing was left to do: nothing to send, nothing in flight, no timeout.
    pub fn step(&mut self) -> bool {
        !matches!(self.step_inner(None), StepOutcome::Idle)
    }

    /// Steps until `cond` holds (it is checked before every step, so a
    /// condition already true takes no step).
    ///
    /// Fails with [`SimError::Livelock`] when `bound` is exceeded (virtual time
    /// is never advanced past `bound.max_virtual_time`) and with
    /// [`SimError::Stalled`] when nothing is left to do first.
    pub fn run_until(&mut self, cond: impl FnMut(&mut Self) -> bool, bound: Bound) -> Result<RunStats, SimError> {
        self.run_inner(cond, bound, false)
    }

    /// Steps until nothing is left to do (as [`Sim::run_until`] with a
    /// condition that never holds, except that running out of work is success).
    pub fn run_until_idle(&mut self, bound: Bound) -> Result<RunStats, SimError> {
        self.run_inner(|_| false, bound, true)
    }

    /// Lets `duration` of virtual time pass, processing every event due by then
    /// (virtual time ends exactly `duration` later even if nothing happens).
    /// Fails with [`SimError::Livelock`] after `max_steps` steps.
    pub fn run_for(&mut self, duration: Duration, max_steps: u64) -> Result<RunStats, SimError> {
        let start = self.now;
        let deadline = start.checked_add(duration);
        let mut steps = 0;
        loop {
            if steps >= max_steps {
                return Err(self.livelock(start, steps, Limit::Steps(max_steps)));
            }
            match self.step_inner(deadline) {
                StepOutcome::Worked => steps += 1,
                StepOutcome::Idle | StepOutcome::Blocked => break,
            }
        }
        if let Some(deadline) = deadline {
            self.now = self.now.max(deadline);
        }
        Ok(RunStats { steps, virtual_elapsed: self.now - start })
    }

    fn run_inner(
        &mut self,
        mut cond: impl FnMut(&mut Self) -> bool,
        bound: Bound,
        idle_ok: bool,
    ) -> Result<RunStats, SimError> {
        let start = self.now;
        let deadline = start.checked_add(bound.max_virtual_time);
        let mut steps = 0;
        loop {
            if cond(self) {
                return Ok(RunStats { steps, virtual_elapsed: self.now - start });
            }
            if steps >= bound.max_steps {
                return Err(self.livelock(start, steps, Limit::Steps(bound.max_steps)));
            }
            match self.step_inner(deadline) {
                StepOutcome::Worked => steps += 1,
                StepOutcome::Idle if idle_ok => {
                    return Ok(RunStats { steps, virtual_elapsed: self.now - start });
                }
                StepOutcome::Idle => {
                    return Err(SimError::Stalled { seed: self.seed, steps, virtual_elapsed: self.now - start });
                }
                StepOutcome::Blocked => {
                    return Err(self.livelock(start, steps, Limit::VirtualTime(bound.max_virtual_time)));
                }
            }
        }
    }

    fn livelock(&self, start: Instant, steps: u64, limit: Limit) -> SimError {
        SimError::Livelock { seed: self.seed, steps, virtual_elapsed: self.now - start, limit }
    }

    fn step_inner(&mut self, deadline: Option<Instant>) -> StepOutcome {
        let (sent, backlog) = self.drain_transmits();
        if backlog {
            return StepOutcome::Worked;
        }
        let next_delivery = self.queue.peek().map(|Reverse(d)| d.arrival);
        let next_timeout = self.nodes.iter().filter_map(|n| n.endpoint.poll_timeout()).min();
        let next = match (next_delivery, next_timeout) {
            (Some(a), Some(b)) => a.min(b),
            (Some(t), None) | (None, Some(t)) => t,
            (None, None) => return if sent { StepOutcome::Worked } else { StepOutcome::Idle },
        };
        let next = next.max(self.now);
        if deadline.is_some_and(|d| next > d) {
            return StepOutcome::Blocked;
        }
        self.now = next;
        self.deliver_due();
        self.fire_timeouts();
        StepOutcome::Worked
    }

    /// Polls every endpoint for datagrams; returns (any sent, some endpoint had more than the cap).
    fn drain_transmits(&mut self) -> (bool, bool) {
        let mut buf = std::mem::take(&mut self.buf);
        let mut sent = false;
        let mut backlog = false;
        for src in 0..self.nodes.len() {
            let mut count = 0;
            while let Some(t) = self.nodes[src].endpoint.poll_transmit(self.now, &mut buf) {
                sent = true;
                self.route(src, t, &buf);
                count += 1;
                if count == MAX_TRANSMITS_PER_STEP {
                    backlog = true;
                    break;
                }
            }
        }
        self.buf = buf;
        (sent, backlog)
    }

    /// Applies the fault model to one emitted datagram.
    fn route(&mut self, src: usize, t: Transmit, buf: &[u8]) {
        let id = self.stats.sent;
        self.stats.sent += 1;
        let per = &mut self.stats.per_endpoint[src];
        per.sent += 1;
        per.bytes_sent += t.len as u64;
        let mut event = TraceEvent {
            time: self.elapsed(),
            id,
            src: self.nodes[src].addr,
            src_port: t.src_port,
            dst: t.dst,
            dst_port: t.dst_port,
            len: t.len,
            fate: Fate::Dropped,
        };
        if t.len > buf.len() || t.len > self.faults.config().mtu {
            self.stats.too_big += 1;
            event.fate = Fate::TooBig;
            return self.emit(event);
        }
        let Some(&dst) = self.by_addr.get(&t.dst) else {
            self.stats.undeliverable += 1;
            event.fate = Fate::Undeliverable;
            return self.emit(event);
        };
        if self.nodes[src].down || self.nodes[dst].down {
            self.stats.down += 1;
            event.fate = Fate::Down;
            return self.emit(event);
        }
        let departure = match self.faults.config().bandwidth_bytes_per_sec {
            Some(rate) => {
                let link = self.links.entry((src, dst)).or_insert(self.now);
                let begin = (*link).max(self.now);
                *link = begin + serialisation_time(t.len, rate);
                *link
            }
            None => self.now,
        };
        // The simulator's datagrams carry no ECN field: none is marked.
        let Some(delivery) = self.faults.decide(t.len, false) else {
            self.stats.dropped += 1;
            return self.emit(event);
        };
        let mut data = buf[..t.len].to_vec();
        let corrupted = delivery.corrupted();
        if corrupted {
            delivery.corrupt(&mut data);
            self.stats.corrupted += 1;
        }
        let copies = delivery.copies().len();
        if copies == 2 {
            self.stats.duplicated += 1;
        }
        for (copy, c) in delivery.copies().iter().enumerate() {
            let mut arrival = departure + c.latency;
            let reordered = c.reordered;
            if reordered {
                self.stats.reordered += 1;
            } else {
                let last = self.fifo.entry((src, dst)).or_insert(arrival);
                arrival = arrival.max(*last);
                *last = arrival;
            }
            let seq = self.next_seq;
            self.next_seq += 1;
            let data = if copy + 1 == copies { std::mem::take(&mut data) } else { data.clone() };
            self.queue.push(Reverse(InFlight {
                arrival,
                seq,
                id,
                src,
                dst,
                src_port: t.src_port,
                dst_port: t.dst_port,
                data,
            }));
            event.fate = Fate::Scheduled { arrival: arrival - self.start, copy: copy == 1, corrupted, reordered };
            self.emit(event.clone());
        }
    }

    fn deliver_due(&mut self) {
        while self.queue.peek().is_some_and(|Reverse(d)| d.arrival <= self.now) {
            let Some(Reverse(d)) = self.queue.pop() else { break };
            let node = &self.nodes[d.src];
            let mut event = TraceEvent {
                time: self.elapsed(),
                id: d.id,
                src: node.addr,
                src_port: d.src_port,
                dst: self.nodes[d.dst].addr,
                dst_port: d.dst_port,
                len: d.data.len(),
                fate: Fate::Delivered,
            };
            if self.nodes[d.dst].down {
                self.stats.down += 1;
                event.fate = Fate::Down;
                self.emit(event);
                continue;
            }
            self.stats.delivered += 1;
            self.stats.bytes_delivered += d.data.len() as u64;
            let per = &mut self.stats.per_endpoint[d.dst];
            per.received += 1;
            per.bytes_received += d.data.len() as u64;
            self.emit(event);
            let src_addr = self.nodes[d.src].addr;
            self.nodes[d.dst].endpoint.handle_datagram(self.now, src_addr, d.src_port, d.dst_port, &d.data);
        }
    }

    fn fire_timeouts(&mut self) {
        for (i, node) in self.nodes.iter_mut().enumerate() {
            if node.endpoint.poll_timeout().is_some_and(|t| t <= self.now) {
                node.endpoint.handle_timeout(self.now);
                self.stats.timeouts += 1;
                self.stats.per_endpoint[i].timeouts += 1;
            }
        }
    }

    fn emit(&mut self, event: TraceEvent) {
        if let Some(hook) = &mut self.hook {
            hook(&event);
        }
        if let Some(log) = &mut self.log {
            log.push(event);
        }
    }
}

/// Time to put `len` bytes on a link of `rate` bytes per second, rounded up to the nanosecond.
fn serialisation_time(len: usize, rate: u64) -> Duration {
    let nanos = (len as u128 * 1_000_000_000).div_ceil(u128::from(rate));
    Duration::from_nanos(u64::try_from(nanos).unwrap_or(u64::MAX))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn serialisation_rounds_up() {
        assert_eq!(serialisation_time(1000, 1_000_000), Duration::from_millis(1));
        assert_eq!(serialisation_time(1, 3), Duration::from_nanos(333_333_334));
        assert_eq!(serialisation_time(0, 7), Duration::ZERO);
        assert_eq!(serialisation_time(usize::MAX, 1), Duration::from_nanos(u64::MAX));
    }
}
