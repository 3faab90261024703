//! A moment threads share without a lock: an `Instant` (or none) in one
//! atomic word, as nanoseconds since the cell's epoch. The driver thread and
//! the application threads tell each other their timers, their last verbs
//! call and their sleeps' deadlines this way (`driver/thread.rs`).

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// The word of "no moment": later than any moment, so [`fetch_min`]
/// (AtomicInstant::fetch_min) needs no special case.
const NONE: u64 = u64::MAX;

/// An `Option<Instant>` in an atomic word (moments before the epoch read
/// as the epoch; nanosecond resolution, over 580 years of range).
#[derive(Debug)]
pub(crate) struct AtomicInstant {
    epoch: Instant,
    ns: AtomicU64,
}

impl AtomicInstant {
    /// No moment yet, counted from `epoch`.
    pub(crate) fn none(epoch: Instant) -> AtomicInstant {
        AtomicInstant { epoch, ns: AtomicU64::new(NONE) }
    }

    fn encode(&self, t: Instant) -> u64 {
        u64::try_from(t.saturating_duration_since(self.epoch).as_nanos()).unwrap_or(NONE - 1).min(NONE - 1)
    }

    fn decode(&self, w: u64) -> Option<Instant> {
        (w != NONE).then(|| self.epoch + Duration::from_nanos(w))
    }

    pub(crate) fn load(&self) -> Option<Instant> {
        self.decode(self.ns.load(Ordering::Acquire))
    }

    /// Whether a moment is set.
    pub(crate) fn is_some(&self) -> bool {
        self.ns.load(Ordering::Acquire) != NONE
    }

    pub(crate) fn store(&self, t: Option<Instant>) {
        self.ns.store(t.map_or(NONE, |t| self.encode(t)), Ordering::Release);
    }

    /// Clears the cell; returns what it held.
    pub(crate) fn take(&self) -> Option<Instant> {
        self.decode(self.ns.swap(NONE, Ordering::AcqRel))
    }

    /// Keeps the earlier of the moment held and `t`.
    pub(crate) fn fetch_min(&self, t: Instant) {
        self.ns.fetch_min(self.encode(t), Ordering::AcqRel);
    }

    /// Whether `t` comes before the moment held (always, when none is).
    pub(crate) fn is_after(&self, t: Instant) -> bool {
        self.encode(t) < self.ns.load(Ordering::Acquire)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn moments_go_in_and_out_and_none_is_later_than_all() {
        let t0 = Instant::now();
        let a = AtomicInstant::none(t0);
        assert_eq!((a.load(), a.is_some()), (None, false));
        assert!(a.is_after(t0 + Duration::from_secs(1_000_000)), "no moment: any is before it");
        a.fetch_min(t0 + Duration::from_micros(30));
        a.fetch_min(t0 + Duration::from_micros(50));
        assert_eq!(a.load(), Some(t0 + Duration::from_micros(30)));
        assert!(a.is_after(t0 + Duration::from_micros(29)) && !a.is_after(t0 + Duration::from_micros(30)));
        assert_eq!(a.take(), Some(t0 + Duration::from_micros(30)));
        assert_eq!(a.take(), None);
        a.store(Some(t0));
        assert_eq!(a.load(), Some(t0), "the epoch itself is a moment, not none");
        let before = t0.checked_sub(Duration::from_millis(1));
        if let Some(b) = before {
            a.store(Some(b));
            assert_eq!(a.load(), Some(t0), "before the epoch reads as the epoch");
        }
        a.store(None);
        assert!(!a.is_some());
    }
}
