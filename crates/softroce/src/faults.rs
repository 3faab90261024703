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
//! | `dup` | probability it is handled twice |
//! | `reorder` | probability it is held back and handed over after the next packets (up to `reorder_ms`, default 1 ms) |
//! | `corrupt` | probability one random bit of it is flipped, outside the BTH's FECN/BECN byte that the ICRC does not cover (the ICRC check then drops it, counted as `drop_icrc`) |
//! | `ce` | probability an ECN-capable packet arrives marked CE, as a congested queue marks it instead of dropping it (the engine answers with CNPs) |
//! | `seed` | seed of the fault generator (default 1): the same traffic sees the same faults |
//!
//! Faults act where the driver hands packets to the engine; packets the
//! engine sends are untouched (the peer's faults act on them).

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

/// A parsed `SOFTROCE_FAULTS` value.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct FaultSpec {
    /// Drop probability.
    pub drop: f64,
    /// Duplication probability.
    pub dup: f64,
    /// Reordering probability.
    pub reorder: f64,
    /// How long a reordered packet is held at most.
    pub reorder_delay: Duration,
    /// Corruption probability.
    pub corrupt: f64,
    /// Probability of a CE mark on an ECN-capable packet.
    pub ce: f64,
    /// Seed.
    pub seed: u64,
}

impl Default for FaultSpec {
    fn default() -> FaultSpec {
        FaultSpec {
            drop: 0.0,
            dup: 0.0,
            reorder: 0.0,
            reorder_delay: Duration::from_millis(1),
            corrupt: 0.0,
            ce: 0.0,
            seed: 1,
        }
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
        for item in s.split(',').map(str::trim).filter(|i| !i.is_empty()) {
            let (k, v) = item.split_once('=').ok_or_else(|| FaultSpecError::Syntax(item.to_string()))?;
            let (k, v) = (k.trim(), v.trim());
            let bad = |expected| FaultSpecError::BadValue { key: k.to_string(), value: v.to_string(), expected };
            let prob =
                || v.parse::<f64>().ok().filter(|p| (0.0..=1.0).contains(p)).ok_or(bad("a probability in 0..=1"));
            match k {
                "drop" => spec.drop = prob()?,
                "dup" => spec.dup = prob()?,
                "reorder" => spec.reorder = prob()?,
                "corrupt" => spec.corrupt = prob()?,
                "ce" => spec.ce = prob()?,
                "reorder_ms" => {
                    let ms =
                        v.parse::<f64>().ok().filter(|m| (0.0..=10_000.0).contains(m)).ok_or(bad("0..=10000 ms"))?;
                    spec.reorder_delay = Duration::from_secs_f64(ms / 1000.0);
                }
                "seed" => spec.seed = v.parse().map_err(|_| bad("an unsigned integer"))?,
                _ => return Err(FaultSpecError::UnknownKey(k.to_string())),
            }
        }
        Ok(spec)
    }
}

/// What to do with one received packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Fate {
    /// Hand it over.
    Deliver,
    /// Discard it.
    Drop,
    /// Hand it over twice.
    Duplicate,
    /// Hold it back.
    Hold,
    /// Flip bit `bit` of it, then hand it over.
    Corrupt { bit: usize },
    /// Hand it over marked CE.
    Mark,
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
    /// Held back (reordered).
    pub reordered: u64,
    /// Corrupted.
    pub corrupted: u64,
    /// Marked CE.
    pub marked: u64,
}

/// A packet held back, with what the engine needs to handle it.
#[derive(Debug)]
pub(crate) struct Held {
    pub(crate) release: Instant,
    pub(crate) src: std::net::IpAddr,
    pub(crate) src_port: u16,
    pub(crate) dst: std::net::IpAddr,
    pub(crate) ecn: roce_wire::Ecn,
    pub(crate) data: Vec<u8>,
}

/// The injector: a seeded generator and the packets held back.
#[derive(Debug)]
pub(crate) struct Faults {
    pub(crate) spec: FaultSpec,
    rng: ChaCha8Rng,
    pub(crate) held: VecDeque<Held>,
    pub(crate) stats: FaultStats,
}

impl Faults {
    pub(crate) fn new(spec: FaultSpec) -> Faults {
        Faults { spec, rng: ChaCha8Rng::seed_from_u64(spec.seed), held: VecDeque::new(), stats: FaultStats::default() }
    }

    /// Decides the fate of a packet of `len` bytes that arrived with `ecn`
    /// (only an ECN-capable one can be marked: a queue drops the others).
    pub(crate) fn fate(&mut self, len: usize, ecn: roce_wire::Ecn) -> Fate {
        self.stats.packets += 1;
        let s = self.spec;
        let r: f64 = self.rng.random();
        let fate = if r < s.drop {
            Fate::Drop
        } else if r < s.drop + s.dup {
            Fate::Duplicate
        } else if r < s.drop + s.dup + s.reorder {
            Fate::Hold
        } else if r < s.drop + s.dup + s.reorder + s.corrupt && len > 0 {
            // Not BTH byte 4 (FECN, BECN, reserved): switches may change it,
            // so the ICRC leaves it out and a flip there is no corruption.
            let mut bit = self.rng.random_range(0..len * 8);
            if bit / 8 == 4 {
                bit = (bit + 8) % (len * 8);
            }
            Fate::Corrupt { bit }
        } else if r < s.drop + s.dup + s.reorder + s.corrupt + s.ce
            && matches!(ecn, roce_wire::Ecn::Ect0 | roce_wire::Ecn::Ect1)
        {
            Fate::Mark
        } else {
            Fate::Deliver
        };
        match fate {
            Fate::Drop => self.stats.dropped += 1,
            Fate::Duplicate => self.stats.duplicated += 1,
            Fate::Hold => self.stats.reordered += 1,
            Fate::Corrupt { .. } => self.stats.corrupted += 1,
            Fate::Mark => self.stats.marked += 1,
            Fate::Deliver => {}
        }
        fate
    }

    /// The earliest release time of a held packet.
    pub(crate) fn next_release(&self) -> Option<Instant> {
        self.held.front().map(|h| h.release)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_documented_example_and_rejects_mistakes() {
        let s: FaultSpec = "drop=0.01,dup=0.001,reorder=0.01,corrupt=0.001".parse().unwrap();
        assert_eq!((s.drop, s.dup, s.reorder, s.corrupt, s.seed), (0.01, 0.001, 0.01, 0.001, 1));
        let s: FaultSpec = "seed=42, reorder_ms=2.5".parse().unwrap();
        assert_eq!((s.seed, s.reorder_delay), (42, Duration::from_micros(2500)));
        assert!("drop=1.5".parse::<FaultSpec>().unwrap_err().to_string().contains("probability"));
        assert!(matches!("lose=0.1".parse::<FaultSpec>(), Err(FaultSpecError::UnknownKey(k)) if k == "lose"));
        assert!(matches!("drop".parse::<FaultSpec>(), Err(FaultSpecError::Syntax(_))));
        assert!(matches!("seed=-1".parse::<FaultSpec>(), Err(FaultSpecError::BadValue { .. })));
    }

    #[test]
    fn rates_follow_the_spec_and_the_seed_replays() {
        use roce_wire::Ecn;
        let spec: FaultSpec = "drop=0.1,dup=0.05,reorder=0.05,corrupt=0.02,ce=0.1,seed=9".parse().unwrap();
        let run = || {
            let mut f = Faults::new(spec);
            let fates: Vec<Fate> = (0..20_000).map(|_| f.fate(100, Ecn::Ect0)).collect();
            (fates, f.stats)
        };
        let (a, st) = run();
        let (b, _) = run();
        assert_eq!(a, b, "same seed, same faults");
        let near = |n: u64, p: f64| (n as f64 - 20_000.0 * p).abs() < 20_000.0 * p * 0.15;
        assert!(near(st.dropped, 0.1) && near(st.duplicated, 0.05), "{st:?}");
        assert!(near(st.reordered, 0.05) && near(st.corrupted, 0.02), "{st:?}");
        assert!(near(st.marked, 0.1), "{st:?}");
        // A packet that is not ECN-capable is never marked.
        let mut f = Faults::new(spec);
        assert!((0..1000).all(|_| f.fate(100, Ecn::NotEct) != Fate::Mark));
        assert_eq!(f.stats.marked, 0);
        assert!(a.iter().all(|f| !matches!(f, Fate::Corrupt { bit } if *bit >= 800)));
        let mut none = Faults::new(FaultSpec::default());
        assert!((0..1000).all(|_| none.fate(64, Ecn::Ect0) == Fate::Deliver));
    }
}
