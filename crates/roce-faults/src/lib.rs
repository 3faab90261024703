//! The fault model: what a network does to datagrams ([`FaultConfig`]) and
//! the seeded decisions that do it ([`Injector`]).
//!
//! Two users share it: the deterministic simulator (`roce-sim`), which moves
//! datagrams between sans-IO endpoints on virtual time, and `SOFTROCE_FAULTS`
//! (`softroce`), which mistreats the packets a process receives. One model
//! means one meaning for `drop=0.01` and one order of random draws.
//!
//! A crate of its own because `softroce` must not depend on the simulator (a
//! test harness on top of the engine), and the protocol crates below both
//! (`roce-wire`, `roce-proto`) have no random generator and no business with
//! one. It needs `rand` (and `thiserror`) only.
//!
//! `roce-netem`'s relay keeps its own impairments: its module doc says why.

#![forbid(unsafe_code)]

use std::time::Duration;

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

mod config;

pub use config::{ConfigError, FaultConfig};

/// A [`FaultConfig`] at work: one ChaCha8 generator, seeded from a `u64`,
/// decides the fate of each datagram in turn.
///
/// A fault whose probability (or bound) is zero draws nothing, so a run
/// without it draws as if it did not exist (the simulator's seeds replay
/// their runs from before `ce`); the same seed and the same datagrams give
/// the same decisions.
#[derive(Debug, Clone)]
pub struct Injector {
    config: FaultConfig,
    rng: ChaCha8Rng,
    spared: Option<usize>,
}

impl Injector {
    /// Decides with `config` from the generator seeded with `seed`. The
    /// configuration is taken as given: [`FaultConfig::validate`] it first.
    pub fn new(config: FaultConfig, seed: u64) -> Self {
        Self { config, rng: ChaCha8Rng::seed_from_u64(seed), spared: None }
    }

    /// Corruption leaves byte `byte` of every datagram alone: one the
    /// receiver's integrity check does not cover, where a flip would be no
    /// corruption it can see (RoCEv2's ICRC skips BTH byte 4, FECN/BECN, which
    /// switches may change). A bit drawn there moves one byte on.
    pub fn sparing(mut self, byte: usize) -> Self {
        self.spared = Some(byte);
        self
    }

    /// The configuration in force.
    pub fn config(&self) -> &FaultConfig {
        &self.config
    }

    /// Replaces the configuration for the datagrams decided from now on; the
    /// generator goes on where it was.
    pub fn set_config(&mut self, config: FaultConfig) {
        self.config = config;
    }

    /// The fate of a datagram of `len` bytes (`ect`: it is ECN-capable, so it
    /// may be marked CE): `None` when `drop` loses it. Draws, in order: drop,
    /// corrupt (and the bits), duplicate, then per copy jitter, reorder (and
    /// its delay) and CE.
    #[must_use]
    pub fn decide(&mut self, len: usize, ect: bool) -> Option<Delivery> {
        let c = self.config;
        if chance(&mut self.rng, c.drop) {
            return None;
        }
        let mut d = Delivery { flips: [0; 3], flipped: 0, copies: [CopyFate::default(); 2], count: 1 };
        if len > 0 && chance(&mut self.rng, c.corrupt) {
            d.flipped = pick_bits(&mut self.rng, len * 8, self.spared, &mut d.flips);
        }
        if chance(&mut self.rng, c.duplicate) {
            d.count = 2;
        }
        for copy in &mut d.copies[..d.count] {
            copy.latency = c.delay + uniform_duration(&mut self.rng, c.jitter);
            copy.reordered = chance(&mut self.rng, c.reorder);
            if copy.reordered {
                let max = c.reorder_delay;
                copy.latency += max / 2 + uniform_duration(&mut self.rng, max - max / 2);
            }
            copy.marked = ect && chance(&mut self.rng, c.ce);
        }
        Some(d)
    }
}

/// What becomes of a datagram that is not dropped: its bits to flip, and one
/// copy or two.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Delivery {
    flips: [usize; 3],
    flipped: usize,
    copies: [CopyFate; 2],
    count: usize,
}

impl Delivery {
    /// Some bits are to be flipped (the same ones in every copy).
    pub fn corrupted(&self) -> bool {
        self.flipped > 0
    }

    /// Flips the chosen bits of `data`, the datagram the decision was for.
    pub fn corrupt(&self, data: &mut [u8]) {
        for &bit in &self.flips[..self.flipped] {
            data[bit / 8] ^= 1 << (bit % 8);
        }
    }

    /// The copies to hand over: the datagram, then its duplicate if any.
    pub fn copies(&self) -> &[CopyFate] {
        &self.copies[..self.count]
    }
}

/// One copy of a delivered datagram.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CopyFate {
    /// From sending to arrival: `delay`, jitter and, if reordered, the hold.
    pub latency: Duration,
    /// Held back by `reorder`, out of its link's FIFO order.
    pub reordered: bool,
    /// Marked CE.
    pub marked: bool,
}

/// True with probability `p`; draws nothing from `rng` when `p` is zero, so
/// turning one fault on does not change the draws of a run without it.
fn chance(rng: &mut ChaCha8Rng, p: f64) -> bool {
    p > 0.0 && rng.random_bool(p)
}

/// A duration uniform in `0..=max` (nothing drawn when `max` is zero).
fn uniform_duration(rng: &mut ChaCha8Rng, max: Duration) -> Duration {
    if max.is_zero() {
        return Duration::ZERO;
    }
    let max = u64::try_from(max.as_nanos()).unwrap_or(u64::MAX);
    Duration::from_nanos(rng.random_range(0..=max))
}

/// Picks 1..=3 distinct random bits of `bits` (at least one) into `out`,
/// none in byte `spared`; returns how many.
fn pick_bits(rng: &mut ChaCha8Rng, bits: usize, spared: Option<usize>, out: &mut [usize; 3]) -> usize {
    let n = rng.random_range(1..=3usize).min(bits);
    let mut k = 0;
    while k < n {
        let mut bit = rng.random_range(0..bits);
        if spared == Some(bit / 8) {
            bit = (bit + 8) % bits;
        }
        if out[..k].contains(&bit) {
            continue;
        }
        out[k] = bit;
        k += 1;
    }
    n
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn corruption_flips_one_to_three_distinct_bits() {
        let mut rng = ChaCha8Rng::seed_from_u64(1);
        let mut seen = [0usize; 4];
        for len in [1usize, 2, 64] {
            for _ in 0..2000 {
                let mut out = [0; 3];
                let n = pick_bits(&mut rng, len * 8, None, &mut out);
                let d = Delivery { flips: out, flipped: n, copies: [CopyFate::default(); 2], count: 1 };
                let mut data = vec![0u8; len];
                d.corrupt(&mut data);
                let flipped: u32 = data.iter().map(|b| b.count_ones()).sum();
                assert!((1..=3).contains(&flipped), "len {len}: {flipped} bits");
                seen[flipped as usize] += 1;
            }
        }
        assert!(seen[1] > 0 && seen[2] > 0 && seen[3] > 0, "{seen:?}");
    }

    #[test]
    fn a_spared_byte_is_never_flipped() {
        let cfg = FaultConfig::default().with_corrupt(1.0);
        let mut inj = Injector::new(cfg, 4).sparing(4);
        for len in [5usize, 6, 20, 100] {
            for _ in 0..2000 {
                let d = inj.decide(len, false).expect("nothing dropped");
                let mut data = vec![0u8; len];
                d.corrupt(&mut data);
                assert_eq!(data[4], 0, "len {len}");
                assert!((1..=3).contains(&data.iter().map(|b| b.count_ones()).sum::<u32>()));
            }
        }
    }

    #[test]
    fn uniform_duration_stays_in_range() {
        let mut rng = ChaCha8Rng::seed_from_u64(2);
        assert_eq!(uniform_duration(&mut rng, Duration::ZERO), Duration::ZERO);
        let max = Duration::from_micros(10);
        let draws: Vec<_> = (0..1000).map(|_| uniform_duration(&mut rng, max)).collect();
        assert!(draws.iter().all(|d| *d <= max));
        assert!(draws.iter().any(|d| *d < max / 4) && draws.iter().any(|d| *d > max * 3 / 4));
    }

    #[test]
    fn chance_edges() {
        let mut rng = ChaCha8Rng::seed_from_u64(3);
        assert!((0..100).all(|_| !chance(&mut rng, 0.0)));
        assert!((0..100).all(|_| chance(&mut rng, 1.0)));
    }

    #[test]
    fn the_same_seed_decides_the_same_and_marks_only_ecn_capable_copies() {
        let cfg = FaultConfig::default()
            .with_drop(0.1)
            .with_duplicate(0.2)
            .with_reorder(0.2)
            .with_corrupt(0.2)
            .with_ce(0.5)
            .with_jitter(Duration::from_micros(5));
        let run = |ect| {
            let mut inj = Injector::new(cfg, 9);
            (0..2000).map(|i| inj.decide(i % 300, ect)).collect::<Vec<_>>()
        };
        assert_eq!(run(true), run(true));
        let plain = run(false);
        assert!(plain.iter().flatten().flat_map(Delivery::copies).all(|c| !c.marked));
        let marked = run(true).iter().flatten().flat_map(Delivery::copies).filter(|c| c.marked).count();
        assert!((950..1250).contains(&marked), "{marked} marks");
        let reordered: Vec<_> = plain.iter().flatten().flat_map(Delivery::copies).filter(|c| c.reordered).collect();
        assert!(!reordered.is_empty());
        let hold = |c: &&CopyFate| c.latency >= Duration::from_micros(500) && c.latency <= Duration::from_micros(1005);
        assert!(reordered.iter().all(hold), "held reorder_delay/2..=reorder_delay on top of the jitter");
    }
}
