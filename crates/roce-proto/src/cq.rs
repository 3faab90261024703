//! Completion queues (`semantics.md` §1-2): FIFO, bounded, never silently
//! dropping a completion, and armed once per event.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use crate::wr::Wc;

/// The size rxe gives a CQ (or SRQ) asked for `n` entries: its ring has a
/// power-of-two number of slots, one kept empty (`rxe_queue_init`), so it
/// holds `2^k - 1 >= n` entries and reports that in `ibv_cq.cqe`.
pub(crate) fn rxe_queue_size(n: u32) -> u32 {
    (n.saturating_add(1)).checked_next_power_of_two().map_or(u32::MAX, |s| s - 1)
}

/// Why a completion could not be added.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum CqError {
    /// The CQ was full: it has overrun, is now in error and accepts nothing.
    /// The device raises `IBV_EVENT_CQ_ERR` and moves the QPs feeding it to ERR.
    #[error("completion queue overrun")]
    Overrun,
    /// A resize below the completions the CQ holds (rxe
    /// `rxe_cq_chk_attr`: EINVAL; the CQ is unchanged).
    #[error("cannot resize to {cqe} entries: {held} completions are queued")]
    BelowHeld {
        /// Entries asked for.
        cqe: u32,
        /// Completions queued.
        held: usize,
    },
}

/// Event moderation (`ibv_modify_cq` with `IBV_CQ_ATTR_MODERATE`): once the
/// armed CQ's trigger completion arrives, its event waits until `count`
/// completions have arrived (the trigger included) or `period` has passed
/// since the trigger, whichever comes first. `count` 0 puts no bound on
/// the count, `period` zero none on the time; both unbounded (the default)
/// is no moderation: the event fires with its trigger.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Moderation {
    /// Completions per event (`cq_count`).
    pub count: u16,
    /// Longest delay of an event (`cq_period`, microseconds in the verb).
    pub period: Duration,
}

impl Moderation {
    fn is_off(&self) -> bool {
        self.count == 1 || (self.count == 0 && self.period.is_zero())
    }
}

/// What a push did besides queueing the completion.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Notify {
    /// Nothing more.
    None,
    /// The CQ was armed and this completion fires its completion event; the
    /// arm is consumed (re-arm with [`Cq::arm`]).
    Event,
}

/// A completion queue of `capacity` entries.
#[derive(Debug)]
pub(crate) struct Cq {
    entries: VecDeque<Wc>,
    capacity: usize,
    overrun: bool,
    armed: Option<Arm>,
    moderation: Moderation,
    /// A moderated event waiting: when its trigger came, completions since.
    held: Option<(Instant, u32)>,
}

/// How a CQ is armed (`ibv_req_notify_cq`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Arm {
    /// The next completion fires.
    Next,
    /// The next completion of a solicited receive fires.
    SolicitedOnly,
}

impl Cq {
    /// A CQ for `capacity` completions, allocated now so pushes never allocate.
    pub(crate) fn new(capacity: usize) -> Cq {
        Cq {
            entries: VecDeque::with_capacity(capacity),
            capacity,
            overrun: false,
            armed: None,
            moderation: Moderation::default(),
            held: None,
        }
    }

    /// Changes the capacity to `capacity` entries (`ibv_resize_cq`), keeping
    /// the completions queued, in order; refused below their number.
    pub(crate) fn resize(&mut self, capacity: usize) -> Result<(), CqError> {
        if capacity < self.entries.len() {
            return Err(CqError::BelowHeld { cqe: capacity.try_into().unwrap_or(u32::MAX), held: self.entries.len() });
        }
        if capacity > self.entries.capacity() {
            self.entries.reserve_exact(capacity - self.entries.len());
        } else {
            self.entries.shrink_to(capacity);
        }
        self.capacity = capacity;
        Ok(())
    }

    /// Sets event moderation; an event already waiting keeps its trigger
    /// time and is measured against the new bounds.
    pub(crate) fn set_moderation(&mut self, m: Moderation) {
        self.moderation = m;
    }

    /// When a waiting moderated event is due by time, if one waits and the
    /// period bounds it.
    pub(crate) fn moderation_deadline(&self) -> Option<Instant> {
        let (since, _) = self.held?;
        (!self.moderation.period.is_zero()).then(|| since + self.moderation.period)
    }

    /// Fires the waiting event if its period ran out at `now`.
    pub(crate) fn fire_due(&mut self, now: Instant) -> bool {
        if self.moderation_deadline().is_some_and(|d| d <= now) {
            self.held = None;
            return true;
        }
        false
    }

    /// Capacity (`cqe`).
    pub(crate) fn capacity(&self) -> usize {
        self.capacity
    }

    /// Completions waiting.
    pub(crate) fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether the CQ has overrun.
    pub(crate) fn is_overrun(&self) -> bool {
        self.overrun
    }

    /// Appends `wc` at `now`. `solicited` marks a receive whose SEND had the
    /// SE bit: like rxe, a solicited-only arm fires only for those. With
    /// moderation the event may wait (see [`Moderation`]).
    pub(crate) fn push(&mut self, wc: Wc, solicited: bool, now: Instant) -> Result<Notify, CqError> {
        if self.overrun || self.entries.len() == self.capacity {
            self.overrun = true;
            return Err(CqError::Overrun);
        }
        self.entries.push_back(wc);
        if let Some((since, n)) = self.held {
            let n = n + 1;
            if self.moderation.count != 0 && n >= u32::from(self.moderation.count) {
                self.held = None;
                return Ok(Notify::Event);
            }
            self.held = Some((since, n));
            return Ok(Notify::None);
        }
        let fire = match self.armed {
            Some(Arm::Next) => true,
            Some(Arm::SolicitedOnly) => solicited,
            None => false,
        };
        if fire {
            self.armed = None;
            if !self.moderation.is_off() {
                self.held = Some((now, 1));
                return Ok(Notify::None);
            }
            Ok(Notify::Event)
        } else {
            Ok(Notify::None)
        }
    }

    /// Pops up to `out.len()` completions, oldest first; returns how many.
    pub(crate) fn poll(&mut self, out: &mut [Wc]) -> usize {
        let n = out.len().min(self.entries.len());
        for (slot, wc) in out.iter_mut().zip(self.entries.drain(..n)) {
            *slot = wc;
        }
        n
    }

    /// Arms the CQ for one completion event. Arming `Next` over
    /// `SolicitedOnly` widens it; the reverse keeps `Next`.
    pub(crate) fn arm(&mut self, how: Arm) {
        self.armed = match (self.armed, how) {
            (Some(Arm::Next), _) | (_, Arm::Next) => Some(Arm::Next),
            _ => Some(Arm::SolicitedOnly),
        };
    }

    /// The current arm.
    pub(crate) fn armed(&self) -> Option<Arm> {
        self.armed
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::verbs::{WcOpcode, WcStatus};

    impl Cq {
        fn push_t(&mut self, wc: Wc, solicited: bool) -> Result<Notify, CqError> {
            self.push(wc, solicited, Instant::now())
        }
    }

    fn wc(id: u64) -> Wc {
        Wc::new(id, WcStatus::Success, WcOpcode::Send, 0x11)
    }

    #[test]
    fn fifo_and_partial_polls() {
        let mut cq = Cq::new(8);
        for i in 0..5 {
            cq.push_t(wc(i), false).unwrap();
        }
        let mut out = [wc(99); 3];
        assert_eq!(cq.poll(&mut out), 3);
        assert_eq!(out.map(|w| w.wr_id), [0, 1, 2]);
        assert_eq!(cq.poll(&mut out), 2);
        assert_eq!(&out[..2].iter().map(|w| w.wr_id).collect::<Vec<_>>(), &[3, 4]);
        assert_eq!(cq.poll(&mut out), 0);
        assert_eq!(cq.poll(&mut []), 0);
    }

    #[test]
    fn overrun_is_loud_and_sticky() {
        let mut cq = Cq::new(2);
        cq.push_t(wc(1), false).unwrap();
        cq.push_t(wc(2), false).unwrap();
        assert_eq!(cq.push_t(wc(3), false), Err(CqError::Overrun));
        assert!(cq.is_overrun());
        let mut out = [wc(0); 4];
        assert_eq!(cq.poll(&mut out), 2, "what was queued before the overrun stays readable");
        assert_eq!(cq.push_t(wc(4), false), Err(CqError::Overrun), "an overrun CQ accepts nothing more");
    }

    #[test]
    fn arming_fires_once() {
        let mut cq = Cq::new(8);
        assert_eq!(cq.push_t(wc(1), false), Ok(Notify::None));
        cq.arm(Arm::SolicitedOnly);
        assert_eq!(cq.push_t(wc(2), false), Ok(Notify::None));
        assert_eq!(cq.push_t(wc(3), true), Ok(Notify::Event));
        assert_eq!(cq.push_t(wc(4), true), Ok(Notify::None), "disarmed after firing");
        cq.arm(Arm::SolicitedOnly);
        cq.arm(Arm::Next);
        assert_eq!(cq.armed(), Some(Arm::Next));
        assert_eq!(cq.push_t(wc(5), false), Ok(Notify::Event));
    }

    #[test]
    fn resize_keeps_order_and_refuses_below_held() {
        let mut cq = Cq::new(4);
        for i in 0..3 {
            cq.push_t(wc(i), false).unwrap();
        }
        assert_eq!(cq.resize(2), Err(CqError::BelowHeld { cqe: 2, held: 3 }));
        assert_eq!(cq.capacity(), 4, "a refused resize changes nothing");
        cq.resize(3).unwrap();
        assert_eq!(cq.push_t(wc(3), false), Err(CqError::Overrun), "shrunk to exactly what it holds");
        let mut q = Cq::new(3);
        for i in 0..3 {
            q.push_t(wc(i), false).unwrap();
        }
        q.resize(8).unwrap();
        for i in 3..8 {
            q.push_t(wc(i), false).unwrap();
        }
        let mut out = [wc(99); 8];
        assert_eq!(q.poll(&mut out), 8);
        assert_eq!(out.map(|w| w.wr_id), [0, 1, 2, 3, 4, 5, 6, 7]);
    }

    #[test]
    fn rxe_rounds_queue_sizes_to_a_power_of_two_minus_one() {
        assert_eq!([1, 2, 3, 4, 7, 8, 100, 32_767].map(rxe_queue_size), [1, 3, 3, 7, 7, 15, 127, 32_767]);
    }

    #[test]
    fn moderation_holds_the_event_for_count_or_period() {
        let t0 = Instant::now();
        let us = |n| t0 + Duration::from_micros(n);
        let mut cq = Cq::new(16);
        cq.set_moderation(Moderation { count: 3, period: Duration::from_micros(100) });
        cq.arm(Arm::Next);
        assert_eq!(cq.push(wc(1), false, us(0)), Ok(Notify::None), "the trigger waits");
        assert_eq!(cq.moderation_deadline(), Some(us(100)));
        assert_eq!(cq.push(wc(2), false, us(10)), Ok(Notify::None));
        assert_eq!(cq.push(wc(3), false, us(20)), Ok(Notify::Event), "the third completion fires it");
        assert_eq!(cq.moderation_deadline(), None);
        assert!(!cq.fire_due(us(500)));
        // By time: one completion, then the period runs out.
        cq.arm(Arm::Next);
        assert_eq!(cq.push(wc(4), false, us(1000)), Ok(Notify::None));
        assert!(!cq.fire_due(us(1099)));
        assert!(cq.fire_due(us(1100)));
        assert_eq!(cq.push(wc(5), false, us(1101)), Ok(Notify::None), "not armed: nothing waits");
        // Count 1 is no moderation.
        cq.set_moderation(Moderation { count: 1, period: Duration::from_micros(100) });
        cq.arm(Arm::Next);
        assert_eq!(cq.push(wc(6), false, us(2000)), Ok(Notify::Event));
    }
}
