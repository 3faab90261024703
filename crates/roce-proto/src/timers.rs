//! The QPs' retransmit and RNR timers in deadline order, so that the device
//! finds the earliest and the due ones in O(log n) rather than by scanning
//! every QP (a process with thousands of QPs, as MPI jobs have, would
//! otherwise scan them all after every packet that moved a timer).
//!
//! Every assignment of `Completer::timer` and `Requester::rnr_until` goes
//! through [`crate::qp::Qp::set_retransmit_timer`] /
//! [`crate::qp::Qp::set_rnr_until`], which keep this index in step; debug
//! builds compare it with a full scan at every [`crate::Device::poll_timeout`].

use std::collections::BTreeSet;
use std::time::Instant;

/// Which timer of a QP.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) enum TimerKind {
    /// The local ACK timeout (`Completer::timer`).
    Retransmit,
    /// The end of an RNR wait (`Requester::rnr_until`).
    Rnr,
    /// A CQ's moderated completion event is due (`Cq::moderation_deadline`);
    /// the number is the CQ's handle, not a QPN.
    CqModeration,
}

/// Armed timers, earliest first.
#[derive(Debug, Default, Clone)]
pub(crate) struct Timers {
    set: BTreeSet<(Instant, u32, TimerKind)>,
}

impl Timers {
    /// QP `qpn`'s `kind` timer moves from `old` to `new` (either may be none).
    pub(crate) fn update(&mut self, qpn: u32, kind: TimerKind, old: Option<Instant>, new: Option<Instant>) {
        if old == new {
            return;
        }
        if let Some(t) = old {
            self.set.remove(&(t, qpn, kind));
        }
        if let Some(t) = new {
            self.set.insert((t, qpn, kind));
        }
    }

    /// The earliest armed timer.
    pub(crate) fn earliest(&self) -> Option<Instant> {
        self.set.first().map(|e| e.0)
    }

    /// Takes out the earliest timer if it is due at `now`.
    pub(crate) fn pop_due(&mut self, now: Instant) -> Option<(Instant, u32, TimerKind)> {
        if self.set.first()?.0 <= now { self.set.pop_first() } else { None }
    }

    /// How many timers are armed.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.set.len()
    }

    /// Whether none is armed.
    #[cfg(test)]
    pub(crate) fn is_empty(&self) -> bool {
        self.set.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn timers_come_out_in_deadline_order_and_moves_replace_them() {
        let t0 = Instant::now();
        let at = |ms| t0 + Duration::from_millis(ms);
        let mut t = Timers::default();
        t.update(7, TimerKind::Retransmit, None, Some(at(30)));
        t.update(8, TimerKind::Retransmit, None, Some(at(10)));
        t.update(7, TimerKind::Rnr, None, Some(at(20)));
        assert_eq!((t.earliest(), t.len()), (Some(at(10)), 3));
        // QP 8's timer restarts later: its old deadline is gone.
        t.update(8, TimerKind::Retransmit, Some(at(10)), Some(at(40)));
        assert_eq!((t.earliest(), t.len()), (Some(at(20)), 3));
        assert_eq!(t.pop_due(at(19)), None);
        assert_eq!(t.pop_due(at(35)), Some((at(20), 7, TimerKind::Rnr)));
        assert_eq!(t.pop_due(at(35)), Some((at(30), 7, TimerKind::Retransmit)));
        assert_eq!(t.pop_due(at(35)), None);
        t.update(8, TimerKind::Retransmit, Some(at(40)), None);
        assert!(t.is_empty() && t.earliest().is_none());
    }
}
