//! Completion queues (`semantics.md` §1-2): FIFO, bounded, never silently
//! dropping a completion, and armed once per event.

use std::collections::VecDeque;

use crate::wr::Wc;

/// Why a completion could not be added.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum CqError {
    /// The CQ was full: it has overrun, is now in error and accepts nothing.
    /// The device raises `IBV_EVENT_CQ_ERR` and moves the QPs feeding it to ERR.
    #[error("completion queue overrun")]
    Overrun,
}

/// What a push did besides queueing the completion.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Notify {
    /// Nothing more.
    None,
    /// The CQ was armed and this completion fires its completion event; the
    /// arm is consumed (re-arm with [`Cq::arm`]).
    Event,
}

/// A completion queue of `capacity` entries.
#[derive(Debug)]
pub struct Cq {
    entries: VecDeque<Wc>,
    capacity: usize,
    overrun: bool,
    armed: Option<Arm>,
}

/// How a CQ is armed (`ibv_req_notify_cq`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Arm {
    /// The next completion fires.
    Next,
    /// The next completion of a solicited receive fires.
    SolicitedOnly,
}

impl Cq {
    /// A CQ for `capacity` completions, allocated now so pushes never allocate.
    pub fn new(capacity: usize) -> Cq {
        Cq { entries: VecDeque::with_capacity(capacity), capacity, overrun: false, armed: None }
    }

    /// Capacity (`cqe`).
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// Completions waiting.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether no completion waits.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Whether the CQ has overrun.
    pub fn is_overrun(&self) -> bool {
        self.overrun
    }

    /// Appends `wc`. `solicited` marks a receive whose SEND had the SE bit:
    /// like rxe, a solicited-only arm fires only for those.
    pub fn push(&mut self, wc: Wc, solicited: bool) -> Result<Notify, CqError> {
        if self.overrun || self.entries.len() == self.capacity {
            self.overrun = true;
            return Err(CqError::Overrun);
        }
        self.entries.push_back(wc);
        let fire = match self.armed {
            Some(Arm::Next) => true,
            Some(Arm::SolicitedOnly) => solicited,
            None => false,
        };
        if fire {
            self.armed = None;
            Ok(Notify::Event)
        } else {
            Ok(Notify::None)
        }
    }

    /// Pops up to `out.len()` completions, oldest first; returns how many.
    pub fn poll(&mut self, out: &mut [Wc]) -> usize {
        let n = out.len().min(self.entries.len());
        for (slot, wc) in out.iter_mut().zip(self.entries.drain(..n)) {
            *slot = wc;
        }
        n
    }

    /// Arms the CQ for one completion event. Arming `Next` over
    /// `SolicitedOnly` widens it; the reverse keeps `Next`.
    pub fn arm(&mut self, how: Arm) {
        self.armed = match (self.armed, how) {
            (Some(Arm::Next), _) | (_, Arm::Next) => Some(Arm::Next),
            _ => Some(Arm::SolicitedOnly),
        };
    }

    /// The current arm.
    pub fn armed(&self) -> Option<Arm> {
        self.armed
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::verbs::{WcOpcode, WcStatus};

    fn wc(id: u64) -> Wc {
        Wc::new(id, WcStatus::Success, WcOpcode::Send, 0x11)
    }

    #[test]
    fn fifo_and_partial_polls() {
        let mut cq = Cq::new(8);
        for i in 0..5 {
            cq.push(wc(i), false).unwrap();
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
        cq.push(wc(1), false).unwrap();
        cq.push(wc(2), false).unwrap();
        assert_eq!(cq.push(wc(3), false), Err(CqError::Overrun));
        assert!(cq.is_overrun());
        let mut out = [wc(0); 4];
        assert_eq!(cq.poll(&mut out), 2, "what was queued before the overrun stays readable");
        assert_eq!(cq.push(wc(4), false), Err(CqError::Overrun), "an overrun CQ accepts nothing more");
    }

    #[test]
    fn arming_fires_once() {
        let mut cq = Cq::new(8);
        assert_eq!(cq.push(wc(1), false), Ok(Notify::None));
        cq.arm(Arm::SolicitedOnly);
        assert_eq!(cq.push(wc(2), false), Ok(Notify::None));
        assert_eq!(cq.push(wc(3), true), Ok(Notify::Event));
        assert_eq!(cq.push(wc(4), true), Ok(Notify::None), "disarmed after firing");
        cq.arm(Arm::SolicitedOnly);
        cq.arm(Arm::Next);
        assert_eq!(cq.armed(), Some(Arm::Next));
        assert_eq!(cq.push(wc(5), false), Ok(Notify::Event));
    }
}
