//! A queue pair: its attributes, its queues, and the state of its three
//! roles. The roles live in `requester.rs`, `completer.rs` and
//! `responder.rs`; this file holds what they share and the lifecycle
//! (`modify`, flush, reset).

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use roce_wire::Psn;

use crate::Qpn;
use crate::attr::{QpAttr, QpCap, QpInitAttr};
use crate::cc::Cc;
use crate::ctx::Ctx;
use crate::qp_state::{ModifyError, check_modify};
use crate::queue::{RecvQueue, RecvWqe, SendQueue, WqeState};
use crate::reorder::ReorderBuffer;
use crate::timers::TimerKind;
use crate::verbs::{QpAttrMask as M, QpState, QpType, WcOpcode, WcStatus, WrOpcode};
use crate::wr::Wc;

/// rxe's `RXE_MAX_UNACKED_PSNS`: how far the requester runs ahead of the
/// oldest unacknowledged PSN.
pub(crate) const MAX_UNACKED_PSNS: u32 = 128;
/// The first QPN handed out (0 and 1 are the special QPs, as in rxe).
pub(crate) const FIRST_QPN: u32 = 0x11;
/// The GSI QP's number (QP 1), see [`Device::create_gsi_qp`](crate::Device::create_gsi_qp).
pub const GSI_QPN: u32 = 1;

/// rxe's `RXE_MAX_PKT_PER_ACK`: AckReq at least this often within a message.
pub(crate) const MAX_PKT_PER_ACK: u32 = 64;

/// The local ACK timeout for `timeout` (4.096 us x 2^timeout), `None` for 0.
pub(crate) fn ack_timeout(timeout: u8) -> Option<Duration> {
    (timeout != 0).then(|| Duration::from_nanos(4096u64 << timeout.min(31)))
}

/// What the responder's end-to-end credits allow (IBTA 9.7.7.2).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Credits {
    /// No ACK yet (from RESET): one SEND goes alone, then the first ACK
    /// tells (rdmavt starts at a limit of 0 to the same effect), so a
    /// connection's first burst cannot outrun a receive queue being filled.
    Unknown,
    /// The limit sequence number, the responder's MSN plus its credits: a
    /// SEND or WRITE with immediate starts only if its SSN is within it, or
    /// as a lone probe when nothing is in flight.
    Limit(u32),
    /// The responder sends "credits invalid" (rxe; a QP on an SRQ).
    Unlimited,
}

/// The requester's state (rxe `qp->req`).
#[derive(Debug, Clone)]
pub(crate) struct Requester {
    /// Next PSN to send.
    pub(crate) psn: Psn,
    /// One past the highest PSN ever sent (a rewind moves `psn` back, not this).
    pub(crate) sent_psn: Psn,
    /// Packets sent since the last AckReq.
    pub(crate) noack_pkts: u32,
    /// Outstanding READ/atomic WQEs.
    pub(crate) rd_atomic: u32,
    /// Waiting for the RNR timer until then.
    pub(crate) rnr_until: Option<Instant>,
    /// Set AckReq on the next packet: the first of a retransmission asks for
    /// an answer at once, so a lost NAK costs one round trip, not a timeout.
    pub(crate) ack_next: bool,
    /// End-to-end flow control (IBTA 9.7.7.2), learned from the responder's ACKs.
    pub(crate) credits: Credits,
    /// A message is held back by `credits` (counted once per wait).
    pub(crate) credit_wait: bool,
    /// With nothing in flight and no credits, the lone probe waits until
    /// then for the responder's credit update (an RNR wait's timer).
    pub(crate) probe_at: Option<Instant>,
    /// Whether the responder announces new credits by itself: `Some(true)`
    /// once an update came, `Some(false)` once a probe sent after waiting in
    /// vain found a receive WQE (a NIC: probes go at once from then on).
    pub(crate) credit_updates: Option<bool>,
    /// The probe in flight was sent after waiting in vain for an update.
    pub(crate) blind_probe: bool,
    /// SSN of the newest message started: an ACK reporting an MSN past it
    /// speaks of messages never sent, and its credits are ignored.
    pub(crate) sent_ssn: u32,
    /// The one packet to resend before anything else: the hole a keeping
    /// responder NAKed ([`crate::reorder`]).
    pub(crate) hole: Option<Psn>,
}

/// The completer's state (rxe `qp->comp`).
#[derive(Debug, Clone)]
pub(crate) struct Completer {
    /// Oldest PSN not yet acknowledged.
    pub(crate) psn: Psn,
    /// Transport retries left.
    pub(crate) retry_left: u8,
    /// RNR retries left (7 = infinite).
    pub(crate) rnr_left: u8,
    /// Retransmit deadline.
    pub(crate) timer: Option<Instant>,
    /// A NAK-triggered retry is under way: further NAKs before progress
    /// (e.g. duplicated NAK packets) do not start another (rxe `started_retry`).
    pub(crate) started_retry: bool,
    /// When the retry count was last restored or spent: a retry spends one
    /// only a whole local ACK timeout after it ([`crate::cc`]).
    pub(crate) retry_epoch: Option<Instant>,
    /// Congestion window and round-trip estimate.
    pub(crate) cc: Cc,
    /// Tail probes sent for the current flight (until progress): one, or
    /// [`KEEPING_PEER_PROBES`] to a responder that keeps.
    pub(crate) probes: u8,
    /// The responder keeps requests that arrive ahead of a gap: one of
    /// its ACKs overtook a go-back-N rewind. Sequence NAKs then cost only
    /// the hole they name ([`crate::reorder`]).
    pub(crate) peer_keeps: bool,
    /// The last hole resent alone: a NAK for the PSN right after it sends
    /// the requester back N (two losses in a row, or a responder that
    /// does not keep after all).
    pub(crate) last_hole: Option<Psn>,
    /// NAKs in a row for the PSN right after the last hole resent.
    pub(crate) hole_streak: u8,
}

/// A responder resource: a READ or atomic request, kept so duplicates can be
/// answered (rxe `struct resp_res`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Resource {
    /// PSN of the request.
    pub(crate) psn: Psn,
    /// What it was, and what its duplicates may ask again.
    pub(crate) kind: ResourceKind,
}

/// The request a [`Resource`] remembers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ResourceKind {
    /// An RDMA READ of `len` bytes at `va` under `rkey`, answered with PSNs
    /// `psn..=last_psn`: a repeated READ must ask for part of that range,
    /// at PSNs inside it (rxe `duplicate_request`, IBA 9.7.5.1.5).
    Read {
        /// R_Key of the request.
        rkey: u32,
        /// Virtual address of the request.
        va: u64,
        /// DMA length of the request.
        len: u64,
        /// PSN of the last response packet.
        last_psn: Psn,
    },
    /// An atomic, with the original value it returned.
    Atomic {
        /// The value before the operation.
        orig: u64,
    },
    /// A FLUSH or ATOMIC WRITE, answered by a zero-length READ response.
    Placement,
}

/// A response the responder has to send.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Response {
    /// A congestion notification to the peer QP (RoCEv2 Annex A17.9.3).
    Cnp,
    /// ACK or NAK with this syndrome for `psn`.
    Ack {
        /// The PSN acknowledged.
        psn: Psn,
        /// The syndrome.
        syndrome: roce_wire::Syndrome,
        /// MSN to report.
        msn: u32,
    },
    /// READ response packets for a request.
    Read {
        /// PSN of the next response packet.
        psn: Psn,
        /// PSN of the last response packet.
        last_psn: Psn,
        /// Region and offset of the next bytes (`None` for a zero-length READ).
        grant: Option<crate::mr::Grant>,
        /// Bytes left to send.
        remaining: u64,
        /// Whether the first packet has gone.
        started: bool,
        /// MSN its FIRST/LAST/ONLY packets report: the one after this READ
        /// executed (IBTA 9.7.5: a response carries the MSN of the last
        /// request completed before it), not the responder's current one,
        /// which later requests have advanced meanwhile.
        msn: u32,
    },
    /// ATOMIC ACKNOWLEDGE for `psn`.
    Atomic {
        /// PSN of the atomic request.
        psn: Psn,
        /// Original value.
        orig: u64,
        /// MSN to report.
        msn: u32,
    },
}

/// An incoming multi-packet message in progress.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum InMessage {
    /// A SEND being scattered into the receive WQE at the queue's front.
    Send {
        /// Bytes received so far.
        offset: u64,
    },
    /// An RDMA WRITE into a checked range.
    Write {
        /// The range.
        grant: crate::mr::Grant,
        /// Bytes left of the DMA length.
        remaining: u64,
    },
}

/// Where the responder stands against the requester's PSNs (rxe keeps it
/// as two flags, `resp.sent_psn_nak` and `resp.drop_msg`). RC and UC
/// leave step differently, so a QP only ever takes two of the states:
///
/// | from       | event                                               | to         |
/// |------------|-----------------------------------------------------|------------|
/// | `InStep`   | RC: a request past the expected PSN, NAKed          | `GapNaked` |
/// | `InStep`   | RC: requests kept past a gap replayed up to another | `GapNaked` |
/// | `GapNaked` | RC: a request past the expected PSN, not NAKed      | `GapNaked` |
/// | `GapNaked` | RC: a request at the expected PSN                   | `InStep`   |
/// | `InStep`   | UC: a gap, or a message that fails or finds no WQE  | `Dropping` |
/// | `Dropping` | UC: a packet that does not start a message          | `Dropping` |
/// | `Dropping` | UC: a packet that starts a message                  | `InStep`   |
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum RecvSeq {
    /// Requests arrive at the expected PSN.
    InStep,
    /// RC: a PSN sequence NAK was sent for the current gap; requests
    /// beyond it are kept or dropped without another until it fills, one
    /// NAK per gap as rxe sends.
    GapNaked,
    /// UC, which has no NAKs: the rest of a broken message is dropped, up
    /// to a packet that starts a new one.
    Dropping,
}

/// The responder's state (rxe `qp->resp`).
#[derive(Debug)]
pub(crate) struct Responder {
    /// Next expected request PSN.
    pub(crate) psn: Psn,
    /// Message sequence number: messages completed.
    pub(crate) msn: u32,
    /// The message being received, if between FIRST and LAST.
    pub(crate) current: Option<InMessage>,
    /// In step with the requester's PSNs, or how it is not.
    pub(crate) seq: RecvSeq,
    /// Responses to send, oldest first.
    pub(crate) responses: VecDeque<Response>,
    /// A lone ACK already let one request packet of this QP go first
    /// (see [`Qp::ack_may_follow_request`]).
    pub(crate) ack_waited: bool,
    /// READ/atomic resources, oldest first, at most `max_dest_rd_atomic`.
    pub(crate) resources: VecDeque<Resource>,
    /// DMA length of the RDMA WRITE in progress (reported by WRITE with immediate).
    pub(crate) write_len: u64,
    /// With an SRQ: the receive WQE this QP took for the message in
    /// progress (rxe `qp->resp.srq_wqe`). It leaves the SRQ at the message's
    /// first packet, so QPs sharing the SRQ never scatter into one buffer.
    pub(crate) srq_wqe: RecvWqe,
    /// `srq_wqe` holds a WQE.
    pub(crate) srq_held: bool,
    /// No CNP before this instant (the notification point's pacing).
    pub(crate) cnp_after: Option<Instant>,
    /// The last ACK or NAK sent left the requester no credits (0, or an
    /// RNR NAK): the next receive WQE posted is announced by a credit
    /// update ([`Qp::announce_credits`]).
    pub(crate) credits_exhausted: bool,
    /// The PSN of the credit update queued and not yet sent (counted in
    /// `credit_updates` when it leaves, not when a newer ACK replaced it).
    pub(crate) announced: Option<Psn>,
    /// Requests that arrived ahead of a gap ([`crate::reorder`]).
    pub(crate) reorder: ReorderBuffer,
}

/// A queue pair.
#[derive(Debug)]
pub struct Qp {
    /// QP number.
    pub qpn: u32,
    /// Creation attributes.
    pub init: QpInitAttr,
    /// Current attributes: the one store of them, which `ibv_query_qp`
    /// reads (with [`Qp::set`]).
    pub attr: QpAttr,
    /// The attributes `modify` has set since the QP was made or last
    /// reset: `ibv_query_qp` reports those, and 0 for the others (which
    /// hold the engine's defaults).
    pub set: M,
    /// Send queue.
    pub(crate) sq: SendQueue,
    /// Own receive queue (unused with an SRQ).
    pub(crate) rq: RecvQueue,
    /// Requester role.
    pub(crate) req: Requester,
    /// Completer role.
    pub(crate) comp: Completer,
    /// Responder role.
    pub(crate) resp: Responder,
    /// UDP source port, as rxe picks it: [`rxe_init_sport`] at creation,
    /// `rdma_get_udp_sport` once an address vector is set.
    pub src_port: u16,
    /// The SQ_DRAINED event for the current SQD period was raised.
    pub(crate) sqd_notified: bool,
    /// In the device's queue of QPs that may have a packet to send.
    pub(crate) tx_queued: bool,
}

/// rxe's UDP source port for a QP pair without a flow label: the flow
/// label of `lqpn * rqpn` (`rdma_calc_flow_label`) folded to 14 bits, in
/// 0xc000..=0xffff.
pub fn udp_src_port(lqpn: u32, rqpn: u32) -> u16 {
    let mut v = u64::from(lqpn) * u64::from(rqpn);
    v ^= v >> 20;
    v ^= v >> 40;
    flow_label_to_udp_sport((v & 0xf_ffff) as u32)
}

/// A flow label folded to a UDP source port in 0xc000..=0xffff
/// (`rdma_flow_label_to_udp_sport`).
pub fn flow_label_to_udp_sport(fl: u32) -> u16 {
    (((fl & 0x3fff) ^ ((fl & 0xf_c000) >> 14)) | 0xc000) as u16
}

/// The source port rxe gives a QP when it sets an address vector
/// (`rxe_modify_qp`: `rdma_get_udp_sport`): the GRH's flow label folded,
/// or the QPN pair's when the label is 0. rdma_cm connections carry the
/// REQ's label, so both ends send from one port.
pub(crate) fn rdma_get_udp_sport(flow_label: u32, lqpn: u32, rqpn: u32) -> u16 {
    match flow_label & 0xf_ffff {
        0 => udp_src_port(lqpn, rqpn),
        fl => flow_label_to_udp_sport(fl),
    }
}

/// The source port rxe gives a QP at creation (`rxe_qp_init_req`):
/// 0xc000 plus the QPN's 14-bit `hash_32`. QP 1 and UD QPs keep it (QP 1
/// sends from 55410, as the captures show).
pub fn rxe_init_sport(qpn: u32) -> u16 {
    const GOLDEN_RATIO_32: u32 = 0x61c8_8647;
    0xc000 | (qpn.wrapping_mul(GOLDEN_RATIO_32) >> 18) as u16
}

/// Tail probes per flight toward a responder that keeps requests ahead of
/// a gap: a probe there resends one packet, not a window, so a lost NAK or
/// a lost resent hole costs a few probe waits (each twice the last)
/// rather than a retransmission timeout (at least 5 ms).
pub(crate) const KEEPING_PEER_PROBES: u8 = 3;

impl Qp {
    /// A new QP in RESET.
    pub(crate) fn new(qpn: u32, init: QpInitAttr) -> Qp {
        let QpCap { max_send_wr, max_recv_wr, max_send_sge, max_recv_sge, max_inline_data } = init.cap;
        Qp {
            qpn,
            init,
            attr: QpAttr::default(),
            set: M::EMPTY,
            sq: SendQueue::new(max_send_wr, max_send_sge, max_inline_data),
            rq: RecvQueue::new(if init.srq.is_some() { 1 } else { max_recv_wr }, max_recv_sge),
            req: Requester {
                psn: Psn::ZERO,
                sent_psn: Psn::ZERO,
                noack_pkts: 0,
                rd_atomic: 0,
                rnr_until: None,
                ack_next: false,
                credits: Credits::Unknown,
                credit_wait: false,
                probe_at: None,
                credit_updates: None,
                blind_probe: false,
                sent_ssn: 0,
                hole: None,
            },
            comp: Completer {
                psn: Psn::ZERO,
                retry_left: 0,
                rnr_left: 0,
                timer: None,
                started_retry: false,
                retry_epoch: None,
                cc: Cc::new(MAX_UNACKED_PSNS),
                probes: 0,
                peer_keeps: false,
                last_hole: None,
                hole_streak: 0,
            },
            resp: Responder {
                psn: Psn::ZERO,
                msn: 0,
                current: None,
                seq: RecvSeq::InStep,
                responses: VecDeque::new(),
                ack_waited: false,
                resources: VecDeque::new(),
                write_len: 0,
                srq_wqe: RecvWqe { wr_id: 0, sges: Vec::new(), length: 0 },
                srq_held: false,
                cnp_after: None,
                credits_exhausted: false,
                announced: None,
                reorder: ReorderBuffer::default(),
            },
            src_port: rxe_init_sport(qpn),
            sqd_notified: false,
            tx_queued: false,
        }
    }

    /// QP type.
    pub fn qp_type(&self) -> QpType {
        self.init.qp_type
    }

    /// Current state.
    pub fn state(&self) -> QpState {
        self.attr.qp_state
    }

    /// Payload bytes of a FIRST or MIDDLE packet: the wide MTU if the QP
    /// has one, else the path MTU.
    pub fn mtu(&self) -> u64 {
        self.attr.wide_mtu.map_or(self.attr.path_mtu.bytes(), |w| w.bytes()) as u64
    }

    /// The next PSN the requester sends.
    pub fn next_send_psn(&self) -> Psn {
        self.req.psn
    }

    /// The request PSN the responder expects next.
    pub fn expected_psn(&self) -> Psn {
        self.resp.psn
    }

    /// Arms (`Some`) or stops the retransmit timer, keeping the device's
    /// timer index in step (see [`crate::timers`]).
    pub(crate) fn set_retransmit_timer(&mut self, ctx: &mut Ctx<'_>, t: Option<Instant>) {
        ctx.timers.update(self.qpn, TimerKind::Retransmit, self.comp.timer, t);
        self.comp.timer = t;
    }

    /// Restarts the retransmit timer: the round trip's timeout from now, at
    /// most the local ACK timeout (none for `timeout` 0).
    pub(crate) fn restart_retransmit_timer(&mut self, ctx: &mut Ctx<'_>) {
        let t = ack_timeout(self.attr.timeout).map(|d| {
            let rto = self.comp.cc.rto(d, ctx.now);
            // First the tail probes' shorter waits, doubling.
            let pto = if self.comp.probes >= self.max_probes() {
                None
            } else {
                self.comp.cc.pto(ctx.now).map(|p| p * (1 << self.comp.probes))
            };
            ctx.now + pto.map_or(rto, |p| p.min(rto))
        });
        self.set_retransmit_timer(ctx, t);
    }

    /// Tail probes allowed per flight before the retransmission timeout.
    pub(crate) fn max_probes(&self) -> u8 {
        if self.comp.peer_keeps { KEEPING_PEER_PROBES } else { 1 }
    }

    /// Starts (`Some`) or ends an RNR wait, keeping the index in step.
    pub(crate) fn set_rnr_until(&mut self, ctx: &mut Ctx<'_>, t: Option<Instant>) {
        ctx.timers.update(self.qpn, TimerKind::Rnr, self.req.rnr_until, t);
        self.req.rnr_until = t;
    }

    /// Whether the responder or the requester may have a packet to send:
    /// the device schedules such QPs.
    #[inline]
    pub(crate) fn has_tx_work(&self) -> bool {
        self.responder_has_work() || self.requester_has_work()
    }

    /// Applies `ibv_modify_qp` after checking the transition table.
    pub(crate) fn modify(&mut self, ctx: &mut Ctx<'_>, attr: &QpAttr, mask: M) -> Result<(), ModifyError> {
        let cur = self.state();
        let next = if mask.contains(M::STATE) { attr.qp_state } else { cur };
        check_modify(cur, next, self.qp_type(), mask)?;
        if mask.contains(M::CUR_STATE) && attr.cur_qp_state != cur {
            return Err(ModifyError::InvalidTransition { from: cur, to: next });
        }
        let a = &mut self.attr;
        if mask.contains(M::ACCESS_FLAGS) {
            a.qp_access_flags = attr.qp_access_flags;
        }
        if mask.contains(M::PKEY_INDEX) {
            a.pkey_index = attr.pkey_index;
        }
        if mask.contains(M::PORT) {
            a.port_num = attr.port_num;
        }
        if mask.contains(M::QKEY) {
            a.qkey = attr.qkey;
        }
        if mask.contains(M::AV) {
            a.ah_attr = attr.ah_attr;
            a.ib_path = attr.ib_path;
        }
        if mask.contains(M::PATH_MTU) {
            a.path_mtu = attr.path_mtu;
            a.wide_mtu = attr.wide_mtu;
        }
        if mask.contains(M::TIMEOUT) {
            a.timeout = attr.timeout;
        }
        if mask.contains(M::RETRY_CNT) {
            a.retry_cnt = attr.retry_cnt.min(7);
            self.comp.retry_left = a.retry_cnt;
        }
        if mask.contains(M::RNR_RETRY) {
            a.rnr_retry = attr.rnr_retry.min(7);
            self.comp.rnr_left = a.rnr_retry;
        }
        if mask.contains(M::MIN_RNR_TIMER) {
            a.min_rnr_timer = attr.min_rnr_timer & 0x1f;
        }
        if mask.contains(M::MAX_QP_RD_ATOMIC) {
            a.max_rd_atomic = attr.max_rd_atomic;
        }
        if mask.contains(M::MAX_DEST_RD_ATOMIC) {
            a.max_dest_rd_atomic = attr.max_dest_rd_atomic;
        }
        if mask.contains(M::EN_SQD_ASYNC_NOTIFY) {
            a.en_sqd_async_notify = attr.en_sqd_async_notify;
        }
        if mask.contains(M::DEST_QPN) {
            a.dest_qp_num = Qpn::from(crate::seq24::low24(attr.dest_qp_num.get()));
        }
        if mask.contains(M::RQ_PSN) {
            a.rq_psn = attr.rq_psn;
            self.resp.psn = a.rq_psn;
        }
        if mask.contains(M::SQ_PSN) {
            a.sq_psn = attr.sq_psn;
            self.req.psn = a.sq_psn;
            self.req.sent_psn = self.req.psn;
            self.comp.psn = self.req.psn;
        }
        if mask.contains(M::AV) {
            // After the whole modify, as rxe: the DEST_QPN of the same call counts.
            self.src_port = rdma_get_udp_sport(a.ah_attr.flow_label, self.qpn, a.dest_qp_num.get());
        }
        self.set |= mask;
        match next {
            QpState::Reset => self.reset(ctx),
            QpState::Err if cur != QpState::Err => self.enter_error(ctx),
            _ => self.attr.qp_state = next,
        }
        self.sqd_notified = false;
        self.check_drained(ctx);
        Ok(())
    }

    /// In SQD, once every WQE the requester started has completed, raises
    /// `IBV_EVENT_SQ_DRAINED` (if asked for with `en_sqd_async_notify`), once.
    pub(crate) fn check_drained(&mut self, ctx: &mut Ctx<'_>) {
        if self.state() != QpState::Sqd || self.sqd_notified {
            return;
        }
        let started = (self.sq.consumer..self.sq.producer)
            .any(|i| self.sq.get(i).psns_assigned && self.sq.get(i).state != WqeState::Done);
        if !started {
            self.sqd_notified = true;
            if self.attr.en_sqd_async_notify {
                ctx.events.push_back(crate::ctx::AsyncEvent::SqDrained(Qpn::from(self.qpn)));
            }
        }
    }

    /// RESET: empty the queues and forget all protocol state (completions
    /// already in CQs stay there).
    fn reset(&mut self, ctx: &mut Ctx<'_>) {
        self.set_retransmit_timer(ctx, None);
        self.set_rnr_until(ctx, None);
        let (init, qpn, queued) = (self.init, self.qpn, self.tx_queued);
        let budget = self.resp.reorder.budget();
        *self = Qp::new(qpn, init);
        self.resp.reorder = ReorderBuffer::new(budget);
        // Still listed in the device's transmit queue, if it was.
        self.tx_queued = queued;
    }

    /// Moves to ERR and flushes every outstanding WQE with `WR_FLUSH_ERR`
    /// (a WQE already `Done` with an error keeps its status).
    pub(crate) fn enter_error(&mut self, ctx: &mut Ctx<'_>) {
        self.attr.qp_state = QpState::Err;
        self.set_retransmit_timer(ctx, None);
        self.set_rnr_until(ctx, None);
        self.resp.responses.clear();
        self.resp.current = None;
        self.resp.reorder.clear();
        self.req.hole = None;
        self.flush(ctx);
    }

    /// Completes everything queued with `WR_FLUSH_ERR` (QP in ERR).
    pub(crate) fn flush(&mut self, ctx: &mut Ctx<'_>) {
        while !self.sq.is_empty() {
            let i = self.sq.consumer;
            let w = self.sq.get_mut(i);
            if w.state != WqeState::Done || w.status == WcStatus::Success {
                w.status = WcStatus::WrFlushErr;
            }
            w.state = WqeState::Done;
            self.complete_front(ctx);
        }
        self.sq.next = self.sq.consumer;
        if self.resp.srq_held {
            // The WQE taken from the SRQ for an unfinished message.
            self.resp.srq_held = false;
            let wc = Wc::new(self.resp.srq_wqe.wr_id, WcStatus::WrFlushErr, WcOpcode::Recv, self.qpn);
            ctx.push_wc(self.init.recv_cq, wc, false);
        }
        if self.init.srq.is_none() {
            while let Some(w) = self.rq.front() {
                let wc = Wc::new(w.wr_id, WcStatus::WrFlushErr, WcOpcode::Recv, self.qpn);
                self.rq.advance();
                ctx.push_wc(self.init.recv_cq, wc, false);
            }
        }
    }

    /// Retires the WQE at the send queue's consumer, which must be `Done`,
    /// generating its completion if it is signaled or failed.
    pub(crate) fn complete_front(&mut self, ctx: &mut Ctx<'_>) {
        let i = self.sq.consumer;
        let w = self.sq.get(i);
        debug_assert_eq!(w.state, WqeState::Done);
        let signaled = self.init.sq_sig_all || w.flags.contains(crate::verbs::SendFlags::SIGNALED);
        if signaled || w.status != WcStatus::Success {
            let mut wc = Wc::new(w.wr_id, w.status, wc_opcode(w.opcode), self.qpn);
            match w.opcode {
                WrOpcode::RdmaRead
                | WrOpcode::AtomicCmpAndSwp
                | WrOpcode::AtomicFetchAndAdd
                | WrOpcode::AtomicWrite => wc.byte_len = w.length as u32,
                // The length asked for, as rxe reports it.
                WrOpcode::Flush => wc.byte_len = w.flush.len,
                _ => {}
            }
            ctx.push_wc(self.init.send_cq, wc, false);
        }
        if w.takes_rd_atomic() && i < self.sq.next {
            // A started READ/atomic/FLUSH/ATOMIC WRITE leaves the initiator's
            // outstanding count.
            self.req.rd_atomic = self.req.rd_atomic.saturating_sub(1);
        }
        self.sq.consumer += 1;
        if self.sq.next < self.sq.consumer {
            // The response overtook a rewind: the requester must not send
            // this WQE again, and resumes where the responder stands.
            self.sq.next = self.sq.consumer;
            let psn = if self.comp.psn.after(self.req.psn) { self.comp.psn } else { self.req.psn };
            self.rewind_to(psn);
            if self.comp.psn == self.req.psn {
                // Nothing is outstanding any more.
                self.set_retransmit_timer(ctx, None);
            }
        }
    }
    /// Points the requester at `psn`: go-back-N by rewinding the send queue,
    /// never by keeping packet copies. A WQE containing `psn` resumes at the
    /// matching offset; those after it restart; those sent wholly before it
    /// (a tail probe rewinds past them) stay sent.
    pub(crate) fn rewind_to(&mut self, psn: Psn) {
        let mtu = self.mtu();
        let sent_before = |w: &crate::queue::SendWqe| {
            w.state == WqeState::Sent && psn.in_window(w.first_psn, 1 << 23) && psn.after(w.last_psn)
        };
        // Every WQE whose PSNs were ever assigned: those before `next`, the one
        // part way through, and those a previous rewind already reset.
        let mut i = self.sq.consumer;
        while i < self.sq.producer && self.sq.get(i).psns_assigned {
            let started = i < self.sq.next;
            let w = self.sq.get_mut(i);
            i += 1;
            if w.state == WqeState::Done || sent_before(w) {
                continue;
            }
            if started && w.takes_rd_atomic() {
                self.req.rd_atomic = self.req.rd_atomic.saturating_sub(1);
            }
            if psn.in_window(w.first_psn, 1 << 23) && !psn.after(w.last_psn) {
                // Resume inside this WQE.
                let done_pkts = u64::from(w.first_psn.distance_to(psn) as u32);
                w.offset = if w.is_atomic() { 0 } else { (done_pkts * mtu).min(w.length) };
                w.state = if w.offset == 0 { WqeState::Posted } else { WqeState::Sending };
            } else {
                w.offset = 0;
                w.state = WqeState::Posted;
            }
        }
        // Completed WQEs at the front are the completer's to retire, never
        // the requester's to send.
        self.sq.next = self.sq.consumer;
        while self.sq.next < self.sq.producer && {
            let w = self.sq.get(self.sq.next);
            w.state == WqeState::Done || sent_before(w)
        } {
            self.sq.next += 1;
        }
        self.req.psn = psn;
        self.req.noack_pkts = 0;
        self.req.ack_next = true;
        self.req.hole = None;
    }
}

/// The completion opcode of a send WR.
pub(crate) fn wc_opcode(op: WrOpcode) -> WcOpcode {
    match op {
        WrOpcode::RdmaWrite | WrOpcode::RdmaWriteWithImm => WcOpcode::RdmaWrite,
        WrOpcode::Send | WrOpcode::SendWithImm | WrOpcode::SendWithInv => WcOpcode::Send,
        WrOpcode::RdmaRead => WcOpcode::RdmaRead,
        WrOpcode::AtomicCmpAndSwp => WcOpcode::CompSwap,
        WrOpcode::AtomicFetchAndAdd => WcOpcode::FetchAdd,
        WrOpcode::LocalInv => WcOpcode::LocalInv,
        WrOpcode::BindMw => WcOpcode::BindMw,
        WrOpcode::Flush => WcOpcode::Flush,
        WrOpcode::AtomicWrite => WcOpcode::AtomicWrite,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn udp_source_port_as_rxe() {
        // The golden captures: QPN 0x11 talking to QPN 0x11 uses port 49441.
        assert_eq!(udp_src_port(0x11, 0x11), 49441);
        for (a, b) in [(0x11, 0x12), (0xabc, 0x11), (0xff_ffff, 0xff_ffff)] {
            let p = udp_src_port(a, b);
            assert!(p >= 0xc000, "{p:#x}");
            assert_eq!(p, udp_src_port(b, a), "both ends of a pair use the same port");
        }
    }

    #[test]
    fn source_ports_of_the_captures() {
        // QP 1's MADs and UD QP 0x11 (ud_pingpong) in every golden capture.
        assert_eq!(rxe_init_sport(1), 55410);
        assert_eq!(rxe_init_sport(0x11), 57236);
        // rping_c3 and ib_send_bw -R: the REQ's flow label decides (rdmacm.md 1.2).
        assert_eq!(rdma_get_udp_sport(0xae362, 0x11, 0x11), 58185);
        assert_eq!(rdma_get_udp_sport(0xc39b2, 0x11, 0x11), 63874);
        assert_eq!(rdma_get_udp_sport(0x577fe, 0x12, 0x12), 63467);
        // No label: the QPN pair's (rc_pingpong).
        assert_eq!(rdma_get_udp_sport(0, 0x11, 0x11), 49441);
        // Only 20 bits are a label.
        assert_eq!(rdma_get_udp_sport(0xfff0_0000, 0x11, 0x11), 49441);
    }

    #[test]
    fn timeouts() {
        assert_eq!(ack_timeout(0), None);
        assert_eq!(ack_timeout(14), Some(Duration::from_nanos(4096 << 14)));
        assert_eq!(ack_timeout(14).unwrap().as_micros(), 67_108);
    }
}
