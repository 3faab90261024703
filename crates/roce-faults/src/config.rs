//! What the faults are: [`FaultConfig`] and its validation.

use std::time::Duration;

/// How the network mistreats datagrams.
///
/// [`Default`] is a perfect network: no loss, no duplication, no reordering,
/// no corruption, no CE marks, zero latency, no MTU limit and unlimited
/// bandwidth. The `with_*` helpers build a configuration fluently;
/// [`FaultConfig::validate`] rejects nonsense.
///
/// Faults are decided per datagram, in this order: too big (`mtu`), link down,
/// serialisation (`bandwidth_bytes_per_sec`), `drop`, `corrupt` (the original
/// and its duplicate carry the same bytes), `duplicate`, then per copy the
/// latency (`delay` + uniform `0..=jitter`), `reorder` and `ce`. The random
/// ones (from `drop` on) are [`Injector::decide`](crate::Injector::decide)'s;
/// `mtu`, bandwidth and links belong to the simulated path, which applies them
/// itself (`SOFTROCE_FAULTS` acts on received packets: it has no path, and no
/// keys for them, nor for `delay` and `jitter`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct FaultConfig {
    /// Probability that a datagram is lost.
    pub drop: f64,
    /// Probability that a datagram is delivered twice (the copy gets its own latency).
    pub duplicate: f64,
    /// Probability that a datagram (each copy decided separately) is held back so
    /// it arrives after datagrams sent later: it gets an extra delay drawn
    /// uniformly from `[reorder_delay / 2, reorder_delay]`.
    pub reorder: f64,
    /// Extra delay bound for held-back datagrams (see [`FaultConfig::reorder`]).
    pub reorder_delay: Duration,
    /// Probability that 1..=3 distinct random bits of the payload are flipped
    /// (empty payloads are never corrupted).
    pub corrupt: f64,
    /// Probability that a copy of an ECN-capable datagram arrives marked CE
    /// (Congestion Experienced), as a congested queue marks it instead of
    /// dropping it. The simulator's datagrams carry no ECN field: it marks none.
    pub ce: f64,
    /// Base one-way latency.
    pub delay: Duration,
    /// Uniform extra latency in `0..=jitter`, drawn per datagram. Links stay
    /// FIFO (a datagram never arrives before one sent earlier on the same
    /// link), as real paths do; only `reorder` reorders.
    pub jitter: Duration,
    /// Datagrams whose UDP payload is longer than this are dropped and counted as `too_big`.
    pub mtu: usize,
    /// Serialisation rate of each directed link (source endpoint to destination
    /// endpoint): a datagram of `len` bytes occupies the link for
    /// `len / bandwidth` seconds after the previous one. `None` is unlimited.
    pub bandwidth_bytes_per_sec: Option<u64>,
}

impl Default for FaultConfig {
    fn default() -> Self {
        Self {
            drop: 0.0,
            duplicate: 0.0,
            reorder: 0.0,
            reorder_delay: Duration::from_millis(1),
            corrupt: 0.0,
            ce: 0.0,
            delay: Duration::ZERO,
            jitter: Duration::ZERO,
            mtu: usize::MAX,
            bandwidth_bytes_per_sec: None,
        }
    }
}

/// A [`FaultConfig`] that makes no sense.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ConfigError {
    /// A probability is outside `[0, 1]` (or NaN).
    #[error("fault probability `{field}` must be within [0, 1], got {value}")]
    Probability {
        /// Name of the offending field (`drop`, `duplicate`, `reorder`, `corrupt`, `ce`).
        field: &'static str,
        /// The value given.
        value: f64,
    },
    /// `bandwidth_bytes_per_sec` is `Some(0)`.
    #[error("bandwidth_bytes_per_sec must be positive (use None for unlimited)")]
    ZeroBandwidth,
    /// `reorder > 0` but `reorder_delay` is zero, so nothing could be held back.
    #[error("reorder_delay must be positive when reorder > 0")]
    ZeroReorderDelay,
    /// `delay`, `jitter` or `reorder_delay` is longer than [`FaultConfig::MAX_LATENCY`].
    #[error("`{field}` of {value:?} is longer than the {max:?} allowed", max = FaultConfig::MAX_LATENCY)]
    LatencyTooLong {
        /// Name of the offending field (`delay`, `jitter`, `reorder_delay`).
        field: &'static str,
        /// The value given.
        value: Duration,
    },
}

impl FaultConfig {
    /// Longest `delay`, `jitter` or `reorder_delay` accepted (a year), so virtual time cannot overflow.
    pub const MAX_LATENCY: Duration = Duration::from_secs(365 * 24 * 3600);

    /// A perfect network (same as [`Default`]).
    pub fn perfect() -> Self {
        Self::default()
    }

    /// Sets the drop probability.
    pub fn with_drop(mut self, p: f64) -> Self {
        self.drop = p;
        self
    }

    /// Sets the duplication probability.
    pub fn with_duplicate(mut self, p: f64) -> Self {
        self.duplicate = p;
        self
    }

    /// Sets the reorder probability.
    pub fn with_reorder(mut self, p: f64) -> Self {
        self.reorder = p;
        self
    }

    /// Sets the extra delay bound for held-back (reordered) datagrams.
    pub fn with_reorder_delay(mut self, d: Duration) -> Self {
        self.reorder_delay = d;
        self
    }

    /// Sets the corruption probability.
    pub fn with_corrupt(mut self, p: f64) -> Self {
        self.corrupt = p;
        self
    }

    /// Sets the probability of a CE mark on an ECN-capable copy.
    pub fn with_ce(mut self, p: f64) -> Self {
        self.ce = p;
        self
    }

    /// Sets the base one-way latency.
    pub fn with_delay(mut self, d: Duration) -> Self {
        self.delay = d;
        self
    }

    /// Sets the jitter bound.
    pub fn with_jitter(mut self, d: Duration) -> Self {
        self.jitter = d;
        self
    }

    /// Sets the largest UDP payload that gets through.
    pub fn with_mtu(mut self, mtu: usize) -> Self {
        self.mtu = mtu;
        self
    }

    /// Sets the per-link serialisation rate (`None`: unlimited).
    pub fn with_bandwidth(mut self, bytes_per_sec: Option<u64>) -> Self {
        self.bandwidth_bytes_per_sec = bytes_per_sec;
        self
    }

    /// Checks that the probabilities are within `[0, 1]` and the rates make sense.
    pub fn validate(&self) -> Result<(), ConfigError> {
        for (field, value) in [
            ("drop", self.drop),
            ("duplicate", self.duplicate),
            ("reorder", self.reorder),
            ("corrupt", self.corrupt),
            ("ce", self.ce),
        ] {
            if !(0.0..=1.0).contains(&value) {
                return Err(ConfigError::Probability { field, value });
            }
        }
        for (field, value) in [("delay", self.delay), ("jitter", self.jitter), ("reorder_delay", self.reorder_delay)] {
            if value > Self::MAX_LATENCY {
                return Err(ConfigError::LatencyTooLong { field, value });
            }
        }
        if self.bandwidth_bytes_per_sec == Some(0) {
            return Err(ConfigError::ZeroBandwidth);
        }
        if self.reorder > 0.0 && self.reorder_delay.is_zero() {
            return Err(ConfigError::ZeroReorderDelay);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_is_perfect_and_valid() {
        let f = FaultConfig::default();
        assert_eq!(f, FaultConfig::perfect());
        assert_eq!((f.drop, f.duplicate, f.reorder, f.corrupt, f.ce), (0.0, 0.0, 0.0, 0.0, 0.0));
        assert_eq!(f.delay, Duration::ZERO);
        assert_eq!(f.mtu, usize::MAX);
        assert_eq!(f.validate(), Ok(()));
    }

    #[test]
    fn rejects_out_of_range_probabilities() {
        let bad = [
            FaultConfig::default().with_drop(1.5),
            FaultConfig::default().with_duplicate(-0.1),
            FaultConfig::default().with_reorder(f64::NAN),
            FaultConfig::default().with_corrupt(f64::INFINITY),
            FaultConfig::default().with_ce(-0.5),
        ];
        let fields = ["drop", "duplicate", "reorder", "corrupt", "ce"];
        for (cfg, want) in bad.iter().zip(fields) {
            match cfg.validate() {
                Err(ConfigError::Probability { field, .. }) => assert_eq!(field, want),
                other => panic!("{cfg:?} gave {other:?}"),
            }
        }
        // The edges are fine.
        assert_eq!(FaultConfig::default().with_drop(1.0).with_corrupt(0.0).validate(), Ok(()));
    }

    #[test]
    fn rejects_zero_rates() {
        assert_eq!(FaultConfig::default().with_bandwidth(Some(0)).validate(), Err(ConfigError::ZeroBandwidth));
        assert_eq!(
            FaultConfig::default().with_reorder(0.1).with_reorder_delay(Duration::ZERO).validate(),
            Err(ConfigError::ZeroReorderDelay)
        );
        // A zero reorder delay is fine when nothing is reordered.
        assert_eq!(FaultConfig::default().with_reorder_delay(Duration::ZERO).validate(), Ok(()));
        assert_eq!(
            FaultConfig::default().with_jitter(Duration::MAX).validate(),
            Err(ConfigError::LatencyTooLong { field: "jitter", value: Duration::MAX })
        );
        assert_eq!(FaultConfig::default().with_delay(FaultConfig::MAX_LATENCY).validate(), Ok(()));
        let msg = FaultConfig::default().with_drop(2.0).validate().unwrap_err().to_string();
        assert!(msg.contains("`drop`") && msg.contains('2'), "{msg}");
    }
}
