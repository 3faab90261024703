//! Send and receive work queues: fixed rings allocated at QP creation, so
//! posting never allocates. Indexes are absolute counters; a ring has a
//! power-of-two number of slots (at least its depth), so a slot is
//! `index & mask`: no division per access, several per packet.

use roce_wire::Psn;

use crate::verbs::{SendFlags, WcStatus, WrOpcode};
use crate::wr::{Flush, MwBind, Payload, RecvWr, SendWr, Sge, UdDest};

/// Why a post is refused (`ENOMEM`/`EINVAL` in the C API).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum PostError {
    /// The queue is full.
    #[error("work queue full ({0} entries)")]
    QueueFull(u32),
    /// More SGEs than the QP was created for.
    #[error("{got} SGEs, the QP takes at most {max}")]
    TooManySges {
        /// SGEs given.
        got: usize,
        /// The QP's limit.
        max: u32,
    },
    /// Inline data larger than `max_inline_data`.
    #[error("{got} bytes inline, the QP takes at most {max}")]
    InlineTooLong {
        /// Bytes given.
        got: usize,
        /// The QP's limit.
        max: u32,
    },
    /// The opcode is not valid on this QP type (e.g. RDMA READ on UC).
    #[error("opcode {0:?} is not supported on this QP type")]
    BadOpcode(WrOpcode),
    /// The QP's state does not accept this post (RESET, or sends before RTS).
    #[error("the QP's state does not accept this post")]
    BadState,
    /// A UD send without an address handle, or a connected send with one.
    #[error("missing or unexpected UD destination")]
    BadDestination,
    /// No such QP, SRQ or address handle.
    #[error("unknown object handle {0}")]
    UnknownHandle(u32),
    /// The message is longer than the port's `max_msg_sz`.
    #[error("message of {0} bytes exceeds max_msg_sz")]
    TooLong(u64),
    /// The WR's operands do not fit its opcode (an ATOMIC WRITE without
    /// exactly 8 inline bytes, a FLUSH with a payload or reserved values).
    #[error("{0}")]
    BadOperands(&'static str),
}

/// Progress of a send WQE.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum WqeState {
    /// Not started (or rewound for retransmission).
    Posted,
    /// Some packets sent.
    Sending,
    /// All packets sent; waiting for the responder.
    Sent,
    /// Finished with `status`; the completer reports it when it reaches it.
    Done,
}

/// A posted send.
#[derive(Debug, Clone)]
pub(crate) struct SendWqe {
    /// The caller's tag.
    pub(crate) wr_id: u64,
    /// Operation.
    pub(crate) opcode: WrOpcode,
    /// Flags.
    pub(crate) flags: SendFlags,
    /// Gather list (when not inline).
    pub(crate) sges: Vec<Sge>,
    /// Inline bytes (when inline).
    pub(crate) inline: Vec<u8>,
    /// Whether the payload is inline.
    pub(crate) is_inline: bool,
    /// Message length in bytes.
    pub(crate) length: u64,
    /// Remote address.
    pub(crate) remote_addr: u64,
    /// Remote key.
    pub(crate) rkey: u32,
    /// Immediate data.
    pub(crate) imm_data: u32,
    /// R_Key to invalidate.
    pub(crate) invalidate_rkey: u32,
    /// Compare or add operand.
    pub(crate) compare_add: u64,
    /// Swap operand.
    pub(crate) swap: u64,
    /// UD destination.
    pub(crate) ud: Option<UdDest>,
    /// BIND_MW request.
    pub(crate) bind: Option<MwBind>,
    /// FLUSH request (zero for other opcodes).
    pub(crate) flush: Flush,
    /// PSN of the first packet.
    pub(crate) first_psn: Psn,
    /// PSN of the message's last packet (for READ: of the last response),
    /// fixed when the message starts.
    pub(crate) last_psn: Psn,
    /// Bytes of the message sent so far (READ: requested so far).
    pub(crate) offset: u64,
    /// `first_psn..=last_psn` are assigned (the message started once); a
    /// rewind may reset `state` to `Posted` but the PSN range stays.
    pub(crate) psns_assigned: bool,
    /// Progress.
    pub(crate) state: WqeState,
    /// Outcome once `Done`.
    pub(crate) status: WcStatus,
    /// Send sequence number (IBTA 9.7.7.2): the message's number among the
    /// QP's messages on the wire (24 bits, from 1), compared against the
    /// responder's MSN plus its credits.
    pub(crate) ssn: u32,
}

impl SendWqe {
    fn empty(max_sge: usize) -> SendWqe {
        SendWqe {
            wr_id: 0,
            opcode: WrOpcode::Send,
            flags: SendFlags::EMPTY,
            sges: Vec::with_capacity(max_sge),
            // Grown on a slot's first inline post and kept: most QPs never
            // send inline, and 128 slots x 256 bytes would be a third of a QP.
            inline: Vec::new(),
            is_inline: false,
            length: 0,
            remote_addr: 0,
            rkey: 0,
            imm_data: 0,
            invalidate_rkey: 0,
            compare_add: 0,
            swap: 0,
            ud: None,
            bind: None,
            flush: Flush::default(),
            first_psn: Psn::ZERO,
            last_psn: Psn::ZERO,
            offset: 0,
            psns_assigned: false,
            state: WqeState::Posted,
            status: WcStatus::Success,
            ssn: 0,
        }
    }

    /// READ or atomic: its response carries data (READ bytes, the original
    /// value), so an acknowledgement of a later PSN means that response was
    /// lost and the request must be asked again.
    pub(crate) fn is_read_or_atomic(&self) -> bool {
        matches!(self.opcode, WrOpcode::RdmaRead | WrOpcode::AtomicCmpAndSwp | WrOpcode::AtomicFetchAndAdd)
    }

    /// Holds one of the responder's READ/atomic resources while outstanding,
    /// so it counts against `max_rd_atomic` and FENCE waits for it: READs,
    /// atomics, and the IBA 1.5 operations answered like READs, FLUSH and
    /// ATOMIC WRITE (rxe's responder keeps a resource for both to answer
    /// their duplicates; rxe's requester counts only ATOMIC WRITE, so a
    /// burst of FLUSHes could recycle the resource of a READ still in flight).
    pub(crate) fn takes_rd_atomic(&self) -> bool {
        self.is_read_or_atomic() || self.is_placement()
    }

    /// FLUSH or ATOMIC WRITE (IBA 1.5 memory placement extensions): one
    /// packet, answered by an RDMA READ response of zero length.
    pub(crate) fn is_placement(&self) -> bool {
        matches!(self.opcode, WrOpcode::Flush | WrOpcode::AtomicWrite)
    }

    /// SEND or RDMA WRITE with immediate: takes a receive WQE at the
    /// responder, so the responder's end-to-end credits limit it.
    pub(crate) fn consumes_recv(&self) -> bool {
        matches!(
            self.opcode,
            WrOpcode::Send | WrOpcode::SendWithImm | WrOpcode::SendWithInv | WrOpcode::RdmaWriteWithImm
        )
    }

    /// LOCAL_INV or BIND_MW: executed by the requester, no packet.
    pub(crate) fn is_local(&self) -> bool {
        matches!(self.opcode, WrOpcode::LocalInv | WrOpcode::BindMw)
    }

    /// Atomic.
    pub(crate) fn is_atomic(&self) -> bool {
        matches!(self.opcode, WrOpcode::AtomicCmpAndSwp | WrOpcode::AtomicFetchAndAdd)
    }
}

/// A ring of send WQEs.
#[derive(Debug)]
pub(crate) struct SendQueue {
    slots: Vec<SendWqe>,
    /// `slots.len() - 1`.
    mask: u64,
    /// WQEs it holds at most (`ibv_qp_cap.max_send_wr`).
    depth: u32,
    /// Oldest WQE not yet completed (the completer's position).
    pub(crate) consumer: u64,
    /// Next WQE the requester works on.
    pub(crate) next: u64,
    /// One past the last WQE ever sent in full: a rewind moves `next` back,
    /// not this, so responses to earlier transmissions still retire WQEs.
    pub(crate) high: u64,
    /// Next free slot.
    pub(crate) producer: u64,
    /// SSN of the next message posted (24 bits; the first is 1, IBTA 9.7.7.2).
    next_ssn: u32,
    max_sge: u32,
    max_inline: u32,
}

impl SendQueue {
    /// A queue of `depth` WQEs.
    pub(crate) fn new(depth: u32, max_sge: u32, max_inline: u32) -> SendQueue {
        let depth = depth.max(1);
        let n = depth.next_power_of_two();
        let slots = (0..n).map(|_| SendWqe::empty(max_sge as usize)).collect();
        SendQueue {
            slots,
            mask: u64::from(n) - 1,
            depth,
            consumer: 0,
            next: 0,
            high: 0,
            producer: 0,
            next_ssn: 1,
            max_sge,
            max_inline,
        }
    }

    /// Depth.
    #[cfg(any(test, feature = "testing"))]
    pub(crate) fn depth(&self) -> u32 {
        self.depth
    }

    /// WQEs posted and not completed.
    pub(crate) fn len(&self) -> u64 {
        self.producer - self.consumer
    }

    /// Whether nothing is outstanding.
    pub(crate) fn is_empty(&self) -> bool {
        self.producer == self.consumer
    }

    /// The WQE at absolute index `i`.
    pub(crate) fn get(&self, i: u64) -> &SendWqe {
        &self.slots[(i & self.mask) as usize]
    }

    /// The WQE at absolute index `i`, mutably.
    pub(crate) fn get_mut(&mut self, i: u64) -> &mut SendWqe {
        &mut self.slots[(i & self.mask) as usize]
    }

    /// Appends `wr` after the checks that do not depend on memory (those
    /// surface as completions when the data is gathered).
    pub(crate) fn post(&mut self, wr: &SendWr<'_>) -> Result<(), PostError> {
        if self.len() >= u64::from(self.depth) {
            return Err(PostError::QueueFull(self.depth));
        }
        let (max_sge, max_inline) = (self.max_sge, self.max_inline);
        let is_atomic = matches!(wr.opcode, WrOpcode::AtomicCmpAndSwp | WrOpcode::AtomicFetchAndAdd);
        let flush = match (wr.opcode, wr.flush) {
            (WrOpcode::Flush, Some(f)) if !f.is_valid() => {
                return Err(PostError::BadOperands("FLUSH with a reserved placement type or selectivity level"));
            }
            (WrOpcode::Flush, Some(_)) if !matches!(wr.payload, Payload::Sges([])) => {
                return Err(PostError::BadOperands("a FLUSH carries no payload"));
            }
            (WrOpcode::Flush, Some(f)) => f,
            (WrOpcode::Flush, None) | (_, Some(_)) => {
                return Err(PostError::BadOperands("flush operands are set exactly for FLUSH"));
            }
            (_, None) => Flush::default(),
        };
        if wr.opcode == WrOpcode::AtomicWrite && !matches!(wr.payload, Payload::Inline(d) if d.len() == 8) {
            return Err(PostError::BadOperands("an ATOMIC WRITE carries exactly 8 bytes inline"));
        }
        let ssn = self.next_ssn;
        let w = self.get_mut(self.producer);
        w.sges.clear();
        w.inline.clear();
        match wr.payload {
            // The 8 bytes of an ATOMIC WRITE are taken at post time whatever
            // `max_inline_data` (rdma-core's `ibv_wr_atomic_write` copies them).
            Payload::Inline(d) if wr.opcode == WrOpcode::AtomicWrite => {
                w.inline.extend_from_slice(d);
                w.is_inline = true;
                w.length = 8;
            }
            Payload::Sges(s) => {
                if s.len() > max_sge as usize {
                    return Err(PostError::TooManySges { got: s.len(), max: max_sge });
                }
                w.sges.extend_from_slice(s);
                w.is_inline = false;
                w.length = s.iter().map(|g| u64::from(g.length)).sum();
            }
            Payload::Inline(d) => {
                if d.len() > max_inline as usize {
                    return Err(PostError::InlineTooLong { got: d.len(), max: max_inline });
                }
                w.inline.extend_from_slice(d);
                w.is_inline = true;
                w.length = d.len() as u64;
            }
        }
        if is_atomic {
            w.length = 8;
        }
        w.wr_id = wr.wr_id;
        w.opcode = wr.opcode;
        w.flags = wr.flags;
        w.remote_addr = wr.remote_addr;
        w.rkey = wr.rkey;
        w.imm_data = wr.imm_data;
        w.invalidate_rkey = wr.invalidate_rkey;
        w.compare_add = wr.compare_add;
        w.swap = wr.swap;
        w.ud = wr.ud;
        w.bind = wr.bind;
        w.flush = flush;
        w.offset = 0;
        w.psns_assigned = false;
        w.state = WqeState::Posted;
        w.status = WcStatus::Success;
        // Local operations send nothing: the responder's MSN never counts them.
        let local = w.is_local();
        w.ssn = if local { 0 } else { ssn };
        if !local {
            self.next_ssn = crate::seq24::add(ssn, 1);
        }
        self.producer += 1;
        Ok(())
    }

    /// Takes back the WQE just posted (a check after `post` refused it),
    /// with its SSN.
    pub(crate) fn unpost_last(&mut self) {
        debug_assert!(self.producer > self.next, "the last WQE already went out");
        self.producer -= 1;
        let ssn = self.get(self.producer).ssn;
        if ssn != 0 {
            self.next_ssn = ssn;
        }
    }
}

/// A posted receive.
#[derive(Debug, Clone)]
pub(crate) struct RecvWqe {
    /// The caller's tag.
    pub(crate) wr_id: u64,
    /// Scatter list.
    pub(crate) sges: Vec<Sge>,
    /// Sum of the SGE lengths.
    pub(crate) length: u64,
}

/// A ring of receive WQEs (a QP's own, or an SRQ's).
#[derive(Debug)]
pub(crate) struct RecvQueue {
    slots: Vec<RecvWqe>,
    /// `slots.len() - 1`.
    mask: u64,
    /// WQEs it holds at most.
    depth: u32,
    /// Oldest posted WQE.
    pub(crate) consumer: u64,
    /// Next free slot.
    pub(crate) producer: u64,
    max_sge: u32,
}

impl RecvQueue {
    /// A queue of `depth` WQEs of up to `max_sge` SGEs.
    pub(crate) fn new(depth: u32, max_sge: u32) -> RecvQueue {
        let depth = depth.max(1);
        let n = depth.next_power_of_two();
        let slots =
            (0..n).map(|_| RecvWqe { wr_id: 0, sges: Vec::with_capacity(max_sge as usize), length: 0 }).collect();
        RecvQueue { slots, mask: u64::from(n) - 1, depth, consumer: 0, producer: 0, max_sge }
    }

    /// WQEs waiting.
    pub(crate) fn len(&self) -> u64 {
        self.producer - self.consumer
    }

    /// Whether no WQE waits.
    pub(crate) fn is_empty(&self) -> bool {
        self.producer == self.consumer
    }

    /// WQEs it holds at most.
    pub(crate) fn depth(&self) -> u32 {
        self.depth
    }

    /// Holds `depth` WQEs from now on (an SRQ resize), keeping those posted
    /// in place of their indexes; the caller checks `depth >= len()`.
    pub(crate) fn resize(&mut self, depth: u32) {
        let depth = depth.max(1).max(self.len() as u32);
        let n = depth.next_power_of_two();
        let mask = u64::from(n) - 1;
        let max_sge = self.max_sge as usize;
        let mut slots: Vec<RecvWqe> =
            (0..n).map(|_| RecvWqe { wr_id: 0, sges: Vec::with_capacity(max_sge), length: 0 }).collect();
        for i in self.consumer..self.producer {
            std::mem::swap(&mut slots[(i & mask) as usize], &mut self.slots[(i & self.mask) as usize]);
        }
        self.slots = slots;
        self.mask = mask;
        self.depth = depth;
    }

    /// Appends a receive.
    pub(crate) fn post(&mut self, wr: &RecvWr<'_>) -> Result<(), PostError> {
        if self.len() >= u64::from(self.depth) {
            return Err(PostError::QueueFull(self.depth));
        }
        if wr.sg_list.len() > self.max_sge as usize {
            return Err(PostError::TooManySges { got: wr.sg_list.len(), max: self.max_sge });
        }
        let w = &mut self.slots[(self.producer & self.mask) as usize];
        w.wr_id = wr.wr_id;
        w.sges.clear();
        w.sges.extend_from_slice(wr.sg_list);
        w.length = wr.sg_list.iter().map(|g| u64::from(g.length)).sum();
        self.producer += 1;
        Ok(())
    }

    /// The oldest WQE.
    pub(crate) fn front(&self) -> Option<&RecvWqe> {
        (!self.is_empty()).then(|| &self.slots[(self.consumer & self.mask) as usize])
    }

    /// Retires the oldest WQE (when its message completes: until then the
    /// slot stays owned by the message being received into it).
    pub(crate) fn advance(&mut self) {
        if !self.is_empty() {
            self.consumer += 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A depth that is not a power of two: the ring has more slots than
    /// WQEs, holds exactly `depth`, and keeps every WQE in place while the
    /// counters wrap the slots many times over.
    #[test]
    fn rings_hold_their_depth_across_many_wraps() {
        let mut sq = SendQueue::new(3, 1, 0);
        let mut rq = RecvQueue::new(5, 1);
        assert_eq!(sq.depth(), 3);
        let sge = [Sge { addr: 0, length: 8, lkey: 1 }];
        for round in 0..100u64 {
            for k in 0..3 {
                let wr = SendWr::new(round * 10 + k, WrOpcode::Send, SendFlags::EMPTY, Payload::Sges(&sge));
                sq.post(&wr).unwrap();
            }
            let wr = SendWr::new(0, WrOpcode::Send, SendFlags::EMPTY, Payload::Sges(&sge));
            assert_eq!(sq.post(&wr), Err(PostError::QueueFull(3)));
            for k in 0..3 {
                assert_eq!(sq.get(sq.consumer + k).wr_id, round * 10 + k);
            }
            sq.consumer += 3;
            for k in 0..5 {
                rq.post(&RecvWr { wr_id: round * 10 + k, sg_list: &sge }).unwrap();
            }
            assert_eq!(rq.post(&RecvWr { wr_id: 0, sg_list: &sge }), Err(PostError::QueueFull(5)));
            for k in 0..5 {
                assert_eq!(rq.front().map(|w| w.wr_id), Some(round * 10 + k));
                rq.advance();
            }
            assert!(rq.front().is_none());
        }
    }

    #[test]
    fn a_resized_receive_ring_keeps_its_wqes_in_order() {
        let sge = [Sge { addr: 0, length: 8, lkey: 1 }];
        let mut rq = RecvQueue::new(4, 1);
        for k in 0..6u64 {
            rq.post(&RecvWr { wr_id: k, sg_list: &sge }).unwrap();
            if k % 2 == 1 {
                rq.advance();
            }
        }
        // 3 WQEs (3, 4, 5) straddle the ring's wrap.
        rq.resize(9);
        assert_eq!(rq.depth(), 9);
        for k in 6..12u64 {
            rq.post(&RecvWr { wr_id: k, sg_list: &sge }).unwrap();
        }
        assert_eq!(rq.post(&RecvWr { wr_id: 99, sg_list: &sge }), Err(PostError::QueueFull(9)));
        rq.resize(12);
        let mut got = Vec::new();
        while let Some(w) = rq.front() {
            got.push(w.wr_id);
            rq.advance();
        }
        assert_eq!(got, (3..12).collect::<Vec<_>>());
        rq.resize(2);
        rq.post(&RecvWr { wr_id: 1, sg_list: &sge }).unwrap();
        rq.post(&RecvWr { wr_id: 2, sg_list: &sge }).unwrap();
        assert_eq!(rq.post(&RecvWr { wr_id: 3, sg_list: &sge }), Err(PostError::QueueFull(2)));
    }
}
