//! Shared receive queues: one pool of receive WQEs for many QPs, with a limit
//! that raises `IBV_EVENT_SRQ_LIMIT_REACHED` once when the pool runs low.

use crate::queue::RecvQueue;

/// A shared receive queue.
#[derive(Debug)]
pub(crate) struct Srq {
    /// Protection domain.
    pub(crate) pd: u32,
    /// The WQEs.
    pub(crate) rq: RecvQueue,
    /// When armed (non-zero), the event fires as the WQE count drops below it.
    pub(crate) limit: u32,
}

impl Srq {
    /// An SRQ of `depth` WQEs with up to `max_sge` SGEs each.
    pub(crate) fn new(pd: u32, depth: u32, max_sge: u32) -> Srq {
        Srq { pd, rq: RecvQueue::new(depth, max_sge), limit: 0 }
    }

    /// Retires the front WQE; returns true if that crossed the armed limit
    /// (the limit then disarms, as `ibv_modify_srq` documents).
    pub(crate) fn advance(&mut self) -> bool {
        self.rq.advance();
        if self.limit != 0 && self.rq.len() < u64::from(self.limit) {
            self.limit = 0;
            return true;
        }
        false
    }
}
