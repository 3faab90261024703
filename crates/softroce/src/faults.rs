//! `SOFTROCE_FAULTS`: faults injected on the packets this process receives,
//! so an application can be tested against loss, duplication, reordering
//! corruption and congestion marks without touching the network.
//!
//! Syntax: comma-separated `key=value`, e.g.
//! `drop=0.01,dup=0.001,reorder=0.01,corrupt=0.001,seed=7`:
//!
//! | key | meaning |
//! |---|---|
//! | `drop` | probability a received packet is discarded |
//! | `dup` | probability a packet that is not discarded is handled twice |
//! | `reorder` | probability a copy is held back and handed over after the next packets (for `reorder_ms` / 2 to `reorder_ms`, default 1 ms) |
//! | `corrupt` | probability 1 to 3 random bits of a packet that is not discarded are flipped (the same in both copies of a duplicate), outside the BTH's FECN/BECN byte that the ICRC does not cover (the ICRC check then drops it, counted as `drop_icrc`) |
//! | `ce` | probability a copy of an ECN-capable packet arrives marked CE, as a congested queue marks it instead of dropping it (the engine answers with CNPs) |
//! | `seed` | seed of the fault generator (default 1): the same traffic sees the same faults |
//!
//! The faults are the simulator's ([`roce_faults`]), decided in its order
//! (drop, corrupt, dup, then per copy reorder and CE), so a rate means the
//! same in both. Faults act where the driver hands packets to the engine;
//! packets the engine sends are untouched (the peer's faults act on them).

use std::collections::VecDeque;
use std::net::IpAddr;
use std::time::{Duration, Instant};

pub use roce_faults::FaultConfig;
use roce_faults::Injector;
use roce_wire::Ecn;

/// A parsed `SOFTROCE_FAULTS` value: the faults (`drop`, `duplicate`,
/// `reorder`, `reorder_delay`, `corrupt` and `ce`; the others stay perfect)
/// and the seed.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct FaultSpec {
    /// The faults.
    pub faults: FaultConfig,
    /// Seed.
    pub seed: u64,
}

impl Default for FaultSpec {
    fn default() -> FaultSpec {
        FaultSpec { faults: FaultConfig::default(), seed: 1 }
    }
}

/// Why a `SOFTROCE_FAULTS` value is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FaultSpecError {
    /// Not `key=value`.
    #[error("SOFTROCE_FAULTS: {0:?} is not key=value (e.g. drop=0.01,dup=0.001,reorder=0.01,corrupt=0.001)")]
    Syntax(String),
    /// An unknown key.
    #[error("SOFTROCE_FAULTS: unknown key {0:?} (known: drop, dup, reorder, reorder_ms, corrupt, ce, seed)")]
    UnknownKey(String),
    /// A value out of range or not a number.
    #[error("SOFTROCE_FAULTS: {key}={value:?} is not {expected}")]
    BadValue {
        /// The key.
        key: String,
        /// The value.
        value: String,
        /// What was expected.
        expected: &'static str,
    },
}

impl std::str::FromStr for FaultSpec {
    type Err = FaultSpecError;

    fn from_str(s: &str) -> Result<FaultSpec, FaultSpecError> {
        let mut spec = FaultSpec::default();
        let f = &mut spec.faults;
        for item in s.split(',').map(str::trim).filter(|i| !i.is_empty()) {
            let (k, v) = item.split_once('=').ok_or_else(|| FaultSpecError::Syntax(item.to_string()))?;
            let (k, v) = (k.trim(), v.trim());
            let bad = |expected| FaultSpecError::BadValue { key: k.to_string(), value: v.to_string(), expected };
            let prob =
                || v.parse::<f64>().ok().filter(|p| (0.0..=1.0).contains(p)).ok_or(bad("a probability in 0..=1"));
            match k {
                "drop" => f.drop = prob()?,
                "dup" => f.duplicate = prob()?,
                "reorder" => f.reorder = prob()?,
                "corrupt" => f.corrupt = prob()?,
                "ce" => f.ce = prob()?,
                "reorder_ms" => {
                    let ms =
                        v.parse::<f64>().ok().filter(|m| (0.0..=10_000.0).contains(m)).ok_or(bad("0..=10000 ms"))?;
                    f.reorder_delay = Duration::from_secs_f64(ms / 1000.0);
                }
                "seed" => spec.seed = v.parse().map_err(|_| bad("an unsigned integer"))?,
                _ => return Err(FaultSpecError::UnknownKey(k.to_string())),
            }
        }
        Ok(spec)
    }
}

/// Counts of injected faults.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FaultStats {
    /// Packets seen.
    pub packets: u64,
    /// Dropped.
    pub dropped: u64,
    /// Duplicated.
    pub duplicated: u64,
    /// Copies held back (reordered).
    pub reordered: u64,
    /// Corrupted copies handed to the engine (both, when a corrupted packet
    /// is duplicated; a held one when released, as the engine sees it).
    pub corrupted: u64,
    /// Copies handed to the engine marked CE (a held one when released).
    pub marked: u64,
}

/// A received packet, as the engine takes it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Received<'a> {
    pub(crate) src: IpAddr,
    pub(crate) src_port: u16,
    pub(crate) dst: IpAddr,
    pub(crate) ecn: Ecn,
    pub(crate) data: &'a [u8],
}

/// A copy held back until `release`.
#[derive(Debug)]
struct Held {
    release: Instant,
    src: IpAddr,
    src_port: u16,
    dst: IpAddr,
    ecn: Ecn,
    data: Vec<u8>,
    corrupted: bool,
    marked: bool,
}

/// The injector: the fault model and the copies held back (earliest
/// release first).
#[derive(Debug)]
pub(crate) struct Faults {
    injector: Injector,
    held: VecDeque<Held>,
    pub(crate) stats: FaultStats,
}

impl Faults {
    pub(crate) fn new(spec: FaultSpec) -> Faults {
        // BTH byte 4 (FECN, BECN, reserved): switches may change it, so the
        // ICRC leaves it out and a flip there is no corruption.
        let injector = Injector::new(spec.faults, spec.seed).sparing(4);
        Faults { injector, held: VecDeque::new(), stats: FaultStats::default() }
    }

    /// Puts packet `p`, received at `now`, through the faults: hands what
    /// is due to `deliver` (`scratch` holds a corrupted copy) and holds the
    /// rest back. Only an ECN-capable packet can be marked: a queue drops
    /// the others.
    pub(crate) fn receive(
        &mut self,
        now: Instant,
        p: Received<'_>,
        scratch: &mut Vec<u8>,
        mut deliver: impl FnMut(Received<'_>),
    ) {
        self.stats.packets += 1;
        let Some(d) = self.injector.decide(p.data.len(), matches!(p.ecn, Ecn::Ect0 | Ecn::Ect1)) else {
            self.stats.dropped += 1;
            return;
        };
        let mut data = p.data;
        if d.corrupted() {
            scratch.clear();
            scratch.extend_from_slice(data);
            d.corrupt(scratch);
            data = scratch;
        }
        if d.copies().len() > 1 {
            self.stats.duplicated += 1;
        }
        for c in d.copies() {
            let ecn = if c.marked { Ecn::Ce } else { p.ecn };
            let (corrupted, marked) = (d.corrupted(), c.marked);
            // No key sets `delay` or `jitter`: only a reordered copy waits.
            if c.reordered {
                self.stats.reordered += 1;
                let release = now + c.latency;
                let at = self.held.partition_point(|h| h.release <= release);
                let (src, src_port, dst, data) = (p.src, p.src_port, p.dst, data.to_vec());
                self.held.insert(at, Held { release, src, src_port, dst, ecn, data, corrupted, marked });
            } else {
                self.hand_over(Received { ecn, data, ..p }, corrupted, marked, &mut deliver);
            }
        }
        // A reordered packet is overtaken by this one, then released.
        if self.held.front().is_some_and(|h| h.release > now) && self.held.len() > 8 {
            let h = self.held.pop_front().expect("front checked");
            self.release(h, &mut deliver);
        }
    }

    /// Hands the held copies whose time came to `deliver`.
    pub(crate) fn release_due(&mut self, now: Instant, mut deliver: impl FnMut(Received<'_>)) {
        while self.held.front().is_some_and(|h| h.release <= now) {
            let h = self.held.pop_front().expect("front checked");
            self.release(h, &mut deliver);
        }
    }

    /// The earliest release time of a held packet.
    pub(crate) fn next_release(&self) -> Option<Instant> {
        self.held.front().map(|h| h.release)
    }

    fn release(&mut self, h: Held, deliver: &mut impl FnMut(Received<'_>)) {
        let p = Received { src: h.src, src_port: h.src_port, dst: h.dst, ecn: h.ecn, data: &h.data };
        self.hand_over(p, h.corrupted, h.marked, deliver);
    }

    /// Counts a copy's faults as the engine gets it, so the engine's own
    /// counters (`drop_icrc`, ECN marks) keep step with these.
    fn hand_over(&mut self, p: Received<'_>, corrupted: bool, marked: bool, deliver: &mut impl FnMut(Received<'_>)) {
        self.stats.corrupted += u64::from(corrupted);
        self.stats.marked += u64::from(marked);
        deliver(p);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_documented_example_and_rejects_mistakes() {
        let s: FaultSpec = "drop=0.01,dup=0.001,reorder=0.01,corrupt=0.001".parse().unwrap();
        let f = s.faults;
        assert_eq!((f.drop, f.duplicate, f.reorder, f.corrupt, s.seed), (0.01, 0.001, 0.01, 0.001, 1));
        let s: FaultSpec = "seed=42, reorder_ms=2.5".parse().unwrap();
        assert_eq!((s.seed, s.faults.reorder_delay), (42, Duration::from_micros(2500)));
        assert!("drop=1.5".parse::<FaultSpec>().unwrap_err().to_string().contains("probability"));
        assert!(matches!("lose=0.1".parse::<FaultSpec>(), Err(FaultSpecError::UnknownKey(k)) if k == "lose"));
        assert!(matches!("drop".parse::<FaultSpec>(), Err(FaultSpecError::Syntax(_))));
        assert!(matches!("seed=-1".parse::<FaultSpec>(), Err(FaultSpecError::BadValue { .. })));
    }

    /// What [`Faults::receive`] handed over for `n` packets of 100 bytes
    /// (packet `i` is 100 bytes of `i as u8`) arriving with `ecn`, and the counts.
    fn received(spec: FaultSpec, n: usize, ecn: Ecn) -> (Vec<(Ecn, Vec<u8>)>, FaultStats) {
        let mut f = Faults::new(spec);
        let (mut out, mut scratch, now) = (Vec::new(), Vec::new(), Instant::now());
        let addr = IpAddr::from([10, 0, 0, 1]);
        for i in 0..n {
            let data = [i as u8; 100];
            let p = Received { src: addr, src_port: 4791, dst: addr, ecn, data: &data };
            f.receive(now, p, &mut scratch, |r| out.push((r.ecn, r.data.to_vec())));
        }
        (out, f.stats)
    }

    /// The bits flipped in `d`, one of [`received`]'s packets, and whether one is in byte 4.
    fn flips(d: &[u8]) -> (u32, bool) {
        let mut votes = [0u8; 256];
        d.iter().for_each(|&b| votes[usize::from(b)] += 1);
        let v = (0..=255u8).max_by_key(|&b| votes[usize::from(b)]).expect("256 values");
        (d.iter().map(|&b| (b ^ v).count_ones()).sum(), d[4] != v)
    }

    #[test]
    fn rates_follow_the_spec_and_the_seed_replays() {
        let spec: FaultSpec = "drop=0.1,dup=0.05,reorder=0.05,corrupt=0.02,ce=0.1,seed=9".parse().unwrap();
        let (a, st) = received(spec, 20_000, Ecn::Ect0);
        let (b, _) = received(spec, 20_000, Ecn::Ect0);
        assert_eq!(a, b, "same seed, same faults");
        let near = |n: u64, p: f64| (n as f64 - 20_000.0 * p).abs() < 20_000.0 * p * 0.15;
        assert!(near(st.dropped, 0.1) && near(st.duplicated, 0.05), "{st:?}");
        assert!(near(st.reordered, 0.05) && near(st.corrupted, 0.02), "{st:?}");
        assert!(near(st.marked, 0.1), "{st:?}");
        // A packet that is not ECN-capable is never marked.
        let (out, st) = received(spec, 1000, Ecn::NotEct);
        assert!(out.iter().all(|(ecn, _)| *ecn == Ecn::NotEct));
        assert_eq!(st.marked, 0);
        // Corruption stays within the packet, off BTH byte 4.
        assert!(a.iter().all(|(_, d)| d.len() == 100 && flips(d).0 <= 3 && !flips(d).1));
        let (none, st) = received(FaultSpec::default(), 1000, Ecn::Ect0);
        assert_eq!((none.len(), st), (1000, FaultStats { packets: 1000, ..FaultStats::default() }));
        assert!(none.iter().enumerate().all(|(i, (ecn, d))| *ecn == Ecn::Ect0 && *d == [i as u8; 100]));
    }
}
