//! The impairment logic of one direction, on caller-supplied time (no I/O, no clock): deterministic for a
//! given seed, configuration and sequence of `(time, packet)` pushes.
//!
//! For every packet pushed, in this order:
//! 1. **drop** with probability `drop` (counted in `dropped`);
//! 2. **duplicate** with probability `dup`: a second, identical copy follows the original (`duplicated`);
//! 3. for each copy independently:
//!    - **corrupt** with probability `corrupt`: one random bit of the UDP payload flips and the UDP checksum
//!      is fixed ([`crate::packet::corrupt_udp_payload`]); packets that are not UDP, or have an empty
//!      payload, are never corrupted (`corrupted`);
//!    - **delay** by `delay` plus a uniform jitter in `[-jitter, +jitter]` (never below 0). Copies that are
//!      not reordered leave in arrival order: a copy is never released before the one pushed before it, so
//!      jitter alone does not reorder;
//!    - **reorder** with probability `reorder`: the copy is held back a further `reorder_delay`, outside the
//!      FIFO order, so that copies pushed after it overtake it (`reordered`).
//!
//! A fixed number of random draws is taken per packet and per copy whatever the probabilities, so turning
//! one impairment on or off does not change the decisions of the others for the same seed.
//!
//! Why not the `roce-faults` model that the simulator and `SOFTROCE_FAULTS` share: that one draws nothing
//! for a fault that is off (so the simulator's seeds replay its past runs), which breaks the property above;
//! its jitter is `delay + 0..=jitter`, this one netem's `delay ± jitter`; and this one also bounds its queue
//! (`limit`) and corrupts IP packets (the UDP payload, checksum fixed). One model for both would change
//! either the simulator's seeded runs or this tool's documented behaviour.

use std::cmp::Ordering;
use std::collections::BinaryHeap;
use std::fmt;
use std::time::Duration;

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use crate::packet::corrupt_udp_payload;

/// Invalid impairment configuration.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum ConfigError {
    /// A probability outside `[0, 1]` (or NaN).
    #[error("{name} must be a probability in [0, 1], got {value}")]
    Probability {
        /// Option name.
        name: &'static str,
        /// The value given.
        value: f64,
    },
    /// A zero queue limit.
    #[error("limit must be at least 1")]
    Limit,
}

/// What to do to the packets of one direction.
#[derive(Debug, Clone, PartialEq)]
pub struct Config {
    /// Probability of dropping a packet.
    pub drop: f64,
    /// Probability of sending a packet twice.
    pub dup: f64,
    /// Probability of holding a copy back by `reorder_delay` so that later ones overtake it.
    pub reorder: f64,
    /// How long a reordered copy is held back (on top of its delay).
    pub reorder_delay: Duration,
    /// Constant delay of every copy.
    pub delay: Duration,
    /// Uniform jitter around `delay` (`delay ± jitter`, at least 0); never reorders by itself.
    pub jitter: Duration,
    /// Probability of flipping one bit in the UDP payload of a copy.
    pub corrupt: f64,
    /// Most copies waiting in the delay queue; a copy arriving when it is full is dropped (counted in
    /// `dropped`).
    pub limit: usize,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            drop: 0.0,
            dup: 0.0,
            reorder: 0.0,
            reorder_delay: Duration::from_millis(5),
            delay: Duration::ZERO,
            jitter: Duration::ZERO,
            corrupt: 0.0,
            limit: 100_000,
        }
    }
}

impl Config {
    /// Checks that probabilities are in `[0, 1]` and the limit is positive.
    pub fn validate(&self) -> Result<(), ConfigError> {
        for (name, value) in
            [("drop", self.drop), ("dup", self.dup), ("reorder", self.reorder), ("corrupt", self.corrupt)]
        {
            if !(0.0..=1.0).contains(&value) {
                return Err(ConfigError::Probability { name, value });
            }
        }
        if self.limit == 0 {
            return Err(ConfigError::Limit);
        }
        Ok(())
    }
}

/// Counters of one direction.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Stats {
    /// Packets pushed in.
    pub received: u64,
    /// Copies released (handed out by [`Impairer::pop_due`]).
    pub forwarded: u64,
    /// Packets dropped (by chance or because the queue was full).
    pub dropped: u64,
    /// Extra copies made.
    pub duplicated: u64,
    /// Copies held back to be overtaken.
    pub reordered: u64,
    /// Copies with one bit of UDP payload flipped.
    pub corrupted: u64,
}

impl fmt::Display for Stats {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "forwarded {}, dropped {}, duplicated {}, reordered {}, corrupted {}",
            self.forwarded, self.dropped, self.duplicated, self.reordered, self.corrupted
        )
    }
}

impl Stats {
    /// Parses the `forwarded N, dropped N, duplicated N, reordered N, corrupted N` text that [`fmt::Display`]
    /// writes, anywhere in `line` (`received` stays 0).
    pub fn parse(line: &str) -> Option<Stats> {
        let start = line.find("forwarded ")?;
        let mut s = Stats::default();
        let mut seen = 0;
        for part in line[start..].split(',') {
            let mut words = part.split_whitespace();
            let (Some(key), Some(value)) = (words.next(), words.next()) else { continue };
            let Ok(value) = value.parse::<u64>() else { continue };
            let field = match key {
                "forwarded" => &mut s.forwarded,
                "dropped" => &mut s.dropped,
                "duplicated" => &mut s.duplicated,
                "reordered" => &mut s.reordered,
                "corrupted" => &mut s.corrupted,
                _ => continue,
            };
            *field = value;
            seen += 1;
        }
        (seen == 5).then_some(s)
    }
}

/// A copy waiting for its release time.
#[derive(Debug)]
struct Queued {
    release: Duration,
    seq: u64,
    packet: Vec<u8>,
}

impl PartialEq for Queued {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}
impl Eq for Queued {}
impl PartialOrd for Queued {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Queued {
    /// Reversed, so that the `BinaryHeap` (a max-heap) pops the earliest release, then the earliest pushed.
    fn cmp(&self, other: &Self) -> Ordering {
        (other.release, other.seq).cmp(&(self.release, self.seq))
    }
}

/// Impairs the packets of one direction.
#[derive(Debug)]
pub struct Impairer {
    cfg: Config,
    rng: ChaCha8Rng,
    queue: BinaryHeap<Queued>,
    next_seq: u64,
    /// Release time of the last in-order copy: later in-order copies are not released before it.
    fifo_watermark: Duration,
    stats: Stats,
}

impl Impairer {
    /// Creates an impairer. `stream` selects an independent random stream for the same `seed` (the relay
    /// uses 0 for a→b and 1 for b→a). The configuration must be valid ([`Config::validate`]).
    pub fn new(cfg: Config, seed: u64, stream: u64) -> Impairer {
        debug_assert_eq!(cfg.validate(), Ok(()));
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        rng.set_stream(stream);
        Impairer {
            cfg,
            rng,
            queue: BinaryHeap::new(),
            next_seq: 0,
            fifo_watermark: Duration::ZERO,
            stats: Stats::default(),
        }
    }

    /// The configuration.
    pub fn config(&self) -> &Config {
        &self.cfg
    }

    /// The counters so far.
    pub fn stats(&self) -> Stats {
        self.stats
    }

    /// Copies waiting in the queue.
    pub fn pending(&self) -> usize {
        self.queue.len()
    }

    /// Release time of the next copy, if any is queued.
    pub fn next_release(&self) -> Option<Duration> {
        self.queue.peek().map(|q| q.release)
    }

    /// Takes in a packet that arrived at `now`. Its copies (none, one or two) are queued; get them with
    /// [`Impairer::pop_due`]. `now` must not go backwards between calls.
    pub fn push(&mut self, now: Duration, packet: Vec<u8>) {
        self.stats.received += 1;
        let drop_roll: f64 = self.rng.random();
        let dup_roll: f64 = self.rng.random();
        if drop_roll < self.cfg.drop {
            self.stats.dropped += 1;
            return;
        }
        if dup_roll < self.cfg.dup {
            self.stats.duplicated += 1;
            let copy = packet.clone();
            self.enqueue(now, packet);
            self.enqueue(now, copy);
        } else {
            self.enqueue(now, packet);
        }
    }

    fn enqueue(&mut self, now: Duration, mut packet: Vec<u8>) {
        let reorder_roll: f64 = self.rng.random();
        let corrupt_roll: f64 = self.rng.random();
        let jitter_roll: f64 = self.rng.random();
        let bit_roll: u64 = self.rng.random();
        if self.queue.len() >= self.cfg.limit {
            self.stats.dropped += 1;
            return;
        }
        if corrupt_roll < self.cfg.corrupt {
            // (The modulo bias of a 64-bit roll over at most 2^19 bits is negligible.)
            if corrupt_udp_payload(&mut packet, |bits| (bit_roll % bits as u64) as usize).is_some() {
                self.stats.corrupted += 1;
            }
        }
        // delay ± jitter: jitter_roll in [0, 1) maps to [-jitter, +jitter).
        let j = self.cfg.jitter.as_secs_f64() * (2.0 * jitter_roll - 1.0);
        let delay = Duration::from_secs_f64((self.cfg.delay.as_secs_f64() + j).max(0.0));
        let base = now + delay;
        let release = if reorder_roll < self.cfg.reorder {
            self.stats.reordered += 1;
            base + self.cfg.reorder_delay
        } else {
            let release = base.max(self.fifo_watermark);
            self.fifo_watermark = release;
            release
        };
        let seq = self.next_seq;
        self.next_seq += 1;
        self.queue.push(Queued { release, seq, packet });
    }

    /// Hands out the next copy whose release time is at or before `now`, if any.
    pub fn pop_due(&mut self, now: Duration) -> Option<Vec<u8>> {
        if self.queue.peek()?.release > now {
            return None;
        }
        self.stats.forwarded += 1;
        self.queue.pop().map(|q| q.packet)
    }
}
