//! The RC responder's reorder buffer: request packets that arrive ahead of
//! the expected PSN are kept (bounded) and executed, in PSN order, once the
//! gap before them is filled, instead of being dropped after the sequence
//! NAK as rxe drops them.
//!
//! To the requester this is indistinguishable from a network that delayed
//! those packets until after the retransmission: the responder still NAKs
//! the first missing PSN once, executes nothing out of order, and its ACKs
//! stay cumulative. So a kernel rxe or NIC requester sees only what IBTA
//! allows (it resends and meets duplicates, which are ACKed again), while a
//! softroce requester that sees an ACK overtake its go-back-N rewind learns
//! that this responder keeps, and from then on resends only the holes the
//! responder names (`Completer::peer_keeps`, IRN's selective repeat
//! without its header extensions).
//!
//! ```text
//!   expected PSN e        slots[d] holds the packet with PSN e + d
//!   |
//!   v
//!   [ hole | kept | kept | hole | kept | ... ]   at most MAX_AHEAD slots
//! ```

use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use roce_wire::Psn;

/// How far ahead of the expected PSN a packet is kept: twice the window
/// of rxe's and softroce's requesters (128 unacknowledged PSNs).
pub(crate) const MAX_AHEAD: u32 = 256;

/// Bytes of kept packets a device holds at most, over all its QPs: past
/// it, packets ahead of the gap are dropped as rxe drops them.
pub(crate) const DEVICE_BUDGET: usize = 64 << 20;

/// The device-wide byte count of kept packets, shared by its QPs' buffers.
#[derive(Debug, Clone, Default)]
pub(crate) struct Budget(Arc<AtomicUsize>);

impl Budget {
    /// Bytes held now.
    #[cfg(test)]
    pub(crate) fn held(&self) -> usize {
        self.0.load(Ordering::Relaxed)
    }

    fn take(&self, n: usize) -> bool {
        self.0.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |h| (h + n <= DEVICE_BUDGET).then_some(h + n)).is_ok()
    }

    fn give(&self, n: usize) {
        self.0.fetch_sub(n, Ordering::Relaxed);
    }
}

/// What became of a packet offered to [`ReorderBuffer::keep`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[allow(clippy::enum_variant_names)] // `Kept::Kept` reads as what happened.
pub(crate) enum Kept {
    /// Kept for later.
    Kept,
    /// A copy of this PSN is kept already.
    Duplicate,
    /// Too far ahead, or the device's budget is spent: dropped.
    Full,
}

/// One QP's packets ahead of its expected PSN.
#[derive(Debug, Default)]
pub(crate) struct ReorderBuffer {
    /// `slots[d]`: the packet with PSN `base + d`.
    slots: VecDeque<Option<Box<[u8]>>>,
    /// PSN of `slots[0]`.
    base: Psn,
    /// Packets in `slots`.
    kept: usize,
    /// Bytes in `slots`.
    bytes: usize,
    budget: Budget,
}

impl ReorderBuffer {
    /// An empty buffer drawing on `budget`.
    pub(crate) fn new(budget: Budget) -> ReorderBuffer {
        ReorderBuffer { slots: VecDeque::new(), base: Psn::ZERO, kept: 0, bytes: 0, budget }
    }

    /// The budget it draws on (kept across a QP's reset).
    pub(crate) fn budget(&self) -> Budget {
        self.budget.clone()
    }

    /// Whether any packet is kept.
    pub(crate) fn is_empty(&self) -> bool {
        self.kept == 0
    }

    /// Packets kept.
    #[cfg(any(test, feature = "testing"))]
    pub(crate) fn len(&self) -> usize {
        self.kept
    }

    /// Keeps `packet` (PSN `psn`, ahead of `expected`).
    pub(crate) fn keep(&mut self, expected: Psn, psn: Psn, packet: &[u8]) -> Kept {
        self.advance(expected);
        let d = expected.distance_to(psn);
        if d <= 0 || d as u32 >= MAX_AHEAD {
            return Kept::Full;
        }
        let d = d as usize;
        if self.slots.get(d).is_some_and(Option::is_some) {
            return Kept::Duplicate;
        }
        if !self.budget.take(packet.len()) {
            return Kept::Full;
        }
        if self.slots.len() <= d {
            self.slots.resize(d + 1, None);
        }
        self.slots[d] = Some(packet.into());
        self.kept += 1;
        self.bytes += packet.len();
        Kept::Kept
    }

    /// Takes the packet with PSN `expected`, if kept, dropping any kept
    /// before it (PSNs a READ's responses used, or never sent).
    pub(crate) fn take(&mut self, expected: Psn) -> Option<Box<[u8]>> {
        self.advance(expected);
        if !matches!(self.slots.front(), Some(Some(_))) {
            return None;
        }
        let p = self.slots.pop_front().flatten()?;
        self.base = self.base.next();
        self.release(p.len());
        Some(p)
    }

    /// Moves the window's start to `expected`, freeing what lies before it.
    fn advance(&mut self, expected: Psn) {
        if self.slots.is_empty() {
            self.base = expected;
            return;
        }
        let d = self.base.distance_to(expected);
        if d < 0 {
            // The expected PSN went back (a reset QP): nothing kept applies.
            return self.clear();
        }
        for _ in 0..d {
            match self.slots.pop_front() {
                Some(Some(p)) => self.release(p.len()),
                Some(None) => {}
                None => break,
            }
        }
        self.base = expected;
    }

    fn release(&mut self, n: usize) {
        self.kept -= 1;
        self.bytes -= n;
        self.budget.give(n);
    }

    /// Drops everything kept (the QP left RTR/RTS, or was reset).
    pub(crate) fn clear(&mut self) {
        self.slots.clear();
        self.kept = 0;
        let n = std::mem::take(&mut self.bytes);
        self.budget.give(n);
    }
}

impl Drop for ReorderBuffer {
    fn drop(&mut self) {
        self.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_ahead_and_hands_back_in_order() {
        let budget = Budget::default();
        let mut b = ReorderBuffer::new(budget.clone());
        let e = Psn::new(0xff_fffe);
        assert_eq!(b.keep(e, e.add(2), &[2; 10]), Kept::Kept);
        assert_eq!(b.keep(e, e.add(1), &[1; 10]), Kept::Kept);
        assert_eq!(b.keep(e, e.add(1), &[9; 10]), Kept::Duplicate);
        assert_eq!(b.keep(e, e, &[0; 10]), Kept::Full, "the expected PSN is executed, not kept");
        assert_eq!(budget.held(), 20);
        assert_eq!(b.take(e), None, "the hole");
        assert_eq!(b.take(e.add(1)).as_deref(), Some(&[1u8; 10][..]));
        assert_eq!(b.take(e.add(2)).as_deref(), Some(&[2u8; 10][..]), "across the PSN wrap");
        assert_eq!(b.take(e.add(3)), None);
        assert!(b.is_empty());
        assert_eq!(budget.held(), 0);
    }

    #[test]
    fn bounded_ahead_and_by_the_device_budget() {
        let budget = Budget::default();
        let mut b = ReorderBuffer::new(budget.clone());
        let e = Psn::new(5);
        assert_eq!(b.keep(e, e.add(MAX_AHEAD), &[0; 4]), Kept::Full);
        assert_eq!(b.keep(e, e.add(MAX_AHEAD - 1), &[0; 4]), Kept::Kept);
        let mut other = ReorderBuffer::new(budget.clone());
        let big = vec![0u8; DEVICE_BUDGET - 4];
        assert_eq!(other.keep(e, e.add(1), &big), Kept::Kept);
        assert_eq!(b.keep(e, e.add(2), &[0; 1]), Kept::Full, "the device's budget is spent");
        drop(other);
        assert_eq!(budget.held(), 4);
        assert_eq!(b.keep(e, e.add(2), &[0; 1]), Kept::Kept);
    }

    #[test]
    fn a_jump_frees_what_it_passes() {
        let budget = Budget::default();
        let mut b = ReorderBuffer::new(budget.clone());
        let e = Psn::new(100);
        b.keep(e, e.add(1), &[1; 8]);
        b.keep(e, e.add(3), &[3; 8]);
        // A READ at `e` used PSNs e..e+2: the packet kept at e+1 was never a request.
        assert_eq!(b.take(e.add(3)).as_deref(), Some(&[3u8; 8][..]));
        assert_eq!(budget.held(), 0);
        b.keep(e.add(4), e.add(6), &[6; 8]);
        b.clear();
        assert_eq!(budget.held(), 0);
    }
}
