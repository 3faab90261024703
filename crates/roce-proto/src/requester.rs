//! The requester (rxe `rxe_req.c`): turns send WQEs into request packets —
//! opcode choice, MTU segmentation, PSNs, AckReq — within the limits of the
//! unacknowledged-PSN window, `max_rd_atomic` and fences.

use std::net::IpAddr;

use roce_wire::{
    AtomicEthRepr, BthRepr, DethRepr, ExtRepr, FethRepr, IethRepr, ImmDtRepr, Opcode, Operation, PacketRepr, Position,
    Psn, RethRepr, packet::pad_for,
};

use crate::ctx::Ctx;
use crate::outgoing::{Outgoing, SMALL_PAYLOAD};
use crate::qp::{Credits, MAX_PKT_PER_ACK, Qp};
use crate::queue::{SendWqe, WqeState};
use crate::sges::{gather, walk_sges};
use crate::verbs::{AccessFlags, QpState, QpType, SendFlags, WcStatus, WrOpcode};

/// How long a SEND with no credits and nothing in flight waits for the
/// responder's credit update before it goes as a probe (which an empty
/// receive queue answers with an RNR NAK). Long enough for a receiver
/// descheduled on a loaded machine; paid once per QP toward a responder
/// that never announces (a NIC), which from then on is probed at once.
pub(crate) const CREDIT_UPDATE_WAIT: std::time::Duration = std::time::Duration::from_millis(50);

/// Where a packet starting at byte `offset` of its message sits in it,
/// with `fits` saying whether the rest fits in the packet.
fn position(offset: u64, fits: bool) -> Position {
    match (offset == 0, fits) {
        (true, true) => Position::Only,
        (true, false) => Position::First,
        (false, false) => Position::Middle,
        (false, true) => Position::Last,
    }
}

/// The opcode of a request packet of an `op` WR on a `ty` QP at `pos` in
/// its message (IBTA 9.2, table 38). READ, atomic, FLUSH and ATOMIC WRITE
/// requests are single RC packets, as are the ending packets of a SEND with
/// invalidate; SENDs and WRITEs take their transport's opcode. `None` where
/// the transport has no such opcode: UD sends only single-packet SENDs
/// (`post_send` refuses anything else).
fn opcode(ty: QpType, op: WrOpcode, pos: Position) -> Option<Opcode> {
    let (op, imm) = match op {
        WrOpcode::RdmaRead => return Some(Opcode::RC_RDMA_READ_REQUEST),
        WrOpcode::AtomicCmpAndSwp => return Some(Opcode::RC_COMPARE_SWAP),
        WrOpcode::AtomicFetchAndAdd => return Some(Opcode::RC_FETCH_ADD),
        WrOpcode::Flush => return Some(Opcode::RC_FLUSH),
        WrOpcode::AtomicWrite => return Some(Opcode::RC_ATOMIC_WRITE),
        WrOpcode::SendWithInv if pos == Position::Only => return Some(Opcode::RC_SEND_ONLY_WITH_INVALIDATE),
        WrOpcode::SendWithInv if pos == Position::Last => return Some(Opcode::RC_SEND_LAST_WITH_INVALIDATE),
        WrOpcode::Send | WrOpcode::SendWithInv => (Operation::Send, false),
        WrOpcode::SendWithImm => (Operation::Send, true),
        WrOpcode::RdmaWriteWithImm => (Operation::RdmaWrite, true),
        WrOpcode::RdmaWrite | WrOpcode::LocalInv | WrOpcode::BindMw => (Operation::RdmaWrite, false),
    };
    use Operation::Send;
    use Position::{First, Last, Middle, Only};
    // The rows with `_` for the operation are RDMA WRITE's, the only other.
    Some(match (ty, op, pos, imm) {
        (QpType::Rc, Send, First, _) => Opcode::RC_SEND_FIRST,
        (QpType::Rc, Send, Middle, _) => Opcode::RC_SEND_MIDDLE,
        (QpType::Rc, Send, Last, false) => Opcode::RC_SEND_LAST,
        (QpType::Rc, Send, Last, true) => Opcode::RC_SEND_LAST_WITH_IMMEDIATE,
        (QpType::Rc, Send, Only, false) => Opcode::RC_SEND_ONLY,
        (QpType::Rc, Send, Only, true) => Opcode::RC_SEND_ONLY_WITH_IMMEDIATE,
        (QpType::Rc, _, First, _) => Opcode::RC_RDMA_WRITE_FIRST,
        (QpType::Rc, _, Middle, _) => Opcode::RC_RDMA_WRITE_MIDDLE,
        (QpType::Rc, _, Last, false) => Opcode::RC_RDMA_WRITE_LAST,
        (QpType::Rc, _, Last, true) => Opcode::RC_RDMA_WRITE_LAST_WITH_IMMEDIATE,
        (QpType::Rc, _, Only, false) => Opcode::RC_RDMA_WRITE_ONLY,
        (QpType::Rc, _, Only, true) => Opcode::RC_RDMA_WRITE_ONLY_WITH_IMMEDIATE,
        (QpType::Uc, Send, First, _) => Opcode::UC_SEND_FIRST,
        (QpType::Uc, Send, Middle, _) => Opcode::UC_SEND_MIDDLE,
        (QpType::Uc, Send, Last, false) => Opcode::UC_SEND_LAST,
        (QpType::Uc, Send, Last, true) => Opcode::UC_SEND_LAST_WITH_IMMEDIATE,
        (QpType::Uc, Send, Only, false) => Opcode::UC_SEND_ONLY,
        (QpType::Uc, Send, Only, true) => Opcode::UC_SEND_ONLY_WITH_IMMEDIATE,
        (QpType::Uc, _, First, _) => Opcode::UC_RDMA_WRITE_FIRST,
        (QpType::Uc, _, Middle, _) => Opcode::UC_RDMA_WRITE_MIDDLE,
        (QpType::Uc, _, Last, false) => Opcode::UC_RDMA_WRITE_LAST,
        (QpType::Uc, _, Last, true) => Opcode::UC_RDMA_WRITE_LAST_WITH_IMMEDIATE,
        (QpType::Uc, _, Only, false) => Opcode::UC_RDMA_WRITE_ONLY,
        (QpType::Uc, _, Only, true) => Opcode::UC_RDMA_WRITE_ONLY_WITH_IMMEDIATE,
        (QpType::Ud, Send, Only, false) => Opcode::UD_SEND_ONLY,
        (QpType::Ud, Send, Only, true) => Opcode::UD_SEND_ONLY_WITH_IMMEDIATE,
        (QpType::Ud, ..) => return None,
    })
}

/// Whether 24-bit sequence number `a` (an SSN or MSN) is after `b`.
pub(crate) fn msn_after(a: u32, b: u32) -> bool {
    ((a.wrapping_sub(b) << 8) as i32) > 0
}

impl Qp {
    /// Whether the requester could send now (ignoring the window): used to
    /// schedule the QP.
    pub(crate) fn requester_has_work(&self) -> bool {
        matches!(self.state(), QpState::Rts | QpState::Sqd)
            && (self.sq.next < self.sq.producer || self.req.hole.is_some())
    }

    /// Runs the local operations (LOCAL_INV, BIND_MW) the requester has
    /// reached, then writes the next request packet into `buf`, if the QP may
    /// send one now.
    pub(crate) fn requester_poll(&mut self, ctx: &mut Ctx<'_>, buf: &mut [u8]) -> Option<Outgoing> {
        if self.req.hole.is_some()
            && matches!(self.state(), QpState::Rts | QpState::Sqd)
            && let Some(o) = self.resend_hole(ctx, buf)
        {
            return Some(o);
        }
        while self.sq.next < self.sq.producer && self.sq.get(self.sq.next).is_local() {
            let w = self.sq.get(self.sq.next);
            if w.state == WqeState::Done {
                // Executed before a rewind moved the requester back over it.
                self.sq.next += 1;
                continue;
            }
            // A FENCE'd one waits for earlier READs and atomics, as any WR.
            if self.state() != QpState::Rts || (w.flags.contains(SendFlags::FENCE) && self.req.rd_atomic > 0) {
                return None;
            }
            self.execute_local(ctx);
            if self.state() == QpState::Err {
                return None;
            }
        }
        self.request_packet(ctx, buf)
    }

    /// Executes the local WQE at `next` at once, as rxe's `rxe_do_local_ops`
    /// does: it uses no PSN and completes in order, after the WQEs before it.
    fn execute_local(&mut self, ctx: &mut Ctx<'_>) {
        let idx = self.sq.next;
        let (pd, qpn) = (self.init.pd.get(), self.qpn);
        let w = self.sq.get(idx);
        let status = match (w.opcode, w.bind) {
            (WrOpcode::LocalInv, _) => match ctx.mrs.invalidate(w.invalidate_rkey, pd) {
                Ok(()) => WcStatus::Success,
                Err(_) => WcStatus::LocQpOpErr,
            },
            (_, Some(b)) => match ctx.mrs.bind_mw(pd, qpn, b.mw_key, b.new_key, &b.info) {
                Ok(_) => WcStatus::Success,
                Err(_) => WcStatus::MwBindErr,
            },
            (_, None) => WcStatus::MwBindErr,
        };
        let psn = self.req.psn;
        let w = self.sq.get_mut(idx);
        // An empty PSN range at the current PSN: ACKs up to the PSN before
        // retire it with the WQEs around it.
        w.first_psn = psn;
        w.last_psn = psn.sub(1);
        w.psns_assigned = true;
        if status == WcStatus::Success {
            w.state = WqeState::Done;
        }
        self.sq.next += 1;
        self.sq.high = self.sq.high.max(self.sq.next);
        if status == WcStatus::Success {
            self.complete_done(ctx);
        } else {
            self.fail_wqe(ctx, idx, status);
        }
    }

    /// Writes the next packet of the WQE at `next`, in rxe's steps: the gate
    /// says whether it may go, a message that starts fixes its PSN range, the
    /// packet is built and its payload placed ([`emit_request`]), and the
    /// requester advances past it.
    fn request_packet(&mut self, ctx: &mut Ctx<'_>, buf: &mut [u8]) -> Option<Outgoing> {
        let Go { idx, starting } = self.gate(ctx).ok()?;
        let psn = self.req.psn;
        if starting {
            self.begin_message(idx, psn);
        }
        let seg = self.segment(idx, psn);
        let ack_req = self.ack_request(psn, seg);
        let view =
            ReqView { qpn: self.qpn, ty: self.qp_type(), pd: self.init.pd.get(), mtu: self.mtu(), attr: &self.attr };
        let w = self.sq.get(idx);
        let out = match emit_request(ctx, &view, w, psn, w.offset, seg.last, ack_req, buf) {
            Emit::Sent(out) => out,
            Emit::NoRoom => return None,
            Emit::Failed(status) => return self.fail_wqe(ctx, idx, status),
        };
        self.advance(ctx, idx, psn, seg, ack_req);
        Some(out)
    }

    /// The gate (rxe `rxe_requester`'s checks before it builds a packet):
    /// the WQE at `next` may send its next packet, or the reason it cannot.
    /// A message that starts passes the fence, `max_rd_atomic` and credit
    /// checks; one under way only the state, RNR and window checks.
    pub(crate) fn gate(&mut self, ctx: &mut Ctx<'_>) -> Result<Go, Blocked> {
        let idx = self.sq.next;
        if idx >= self.sq.producer {
            return Err(Blocked::Empty);
        }
        let (state, ty) = (self.state(), self.qp_type());
        let w = self.sq.get(idx);
        // SQD finishes (and retransmits) what was started but starts nothing new.
        match state {
            QpState::Rts => {}
            QpState::Sqd if w.psns_assigned => {}
            QpState::Sqd => return Err(Blocked::Draining),
            _ => return Err(Blocked::State),
        }
        let starting = w.offset == 0 && w.state == WqeState::Posted;
        let (fence, takes_rd_atomic, recv_ssn) =
            (w.flags.contains(SendFlags::FENCE), w.takes_rd_atomic(), w.consumes_recv().then_some(w.ssn));
        if let Some(t) = self.req.rnr_until {
            if ctx.now < t {
                return Err(Blocked::RnrWait);
            }
            self.set_rnr_until(ctx, None);
        }
        // The congestion window, at most rxe's MAX_UNACKED_PSNS ([`crate::cc`]).
        if ty == QpType::Rc && self.comp.psn.distance_to(self.req.psn) >= self.comp.cc.window() as i32 {
            return Err(Blocked::Window);
        }
        if starting {
            // A FENCE waits for every earlier READ, atomic, FLUSH and ATOMIC
            // WRITE to complete.
            if fence && self.req.rd_atomic > 0 {
                return Err(Blocked::Fence);
            }
            if takes_rd_atomic && self.req.rd_atomic >= u32::from(self.attr.max_rd_atomic) {
                return Err(Blocked::RdAtomic);
            }
            if ty == QpType::Rc
                && let Some(ssn) = recv_ssn
            {
                self.credit_gate(ctx, ssn)?;
            }
            self.req.credit_wait = false;
        }
        Ok(Go { idx, starting })
    }

    /// End-to-end credits (IBTA 9.7.7.2): a message that takes a receive
    /// WQE, SSN `ssn`, goes if its SSN is within the limit, or alone, as the
    /// probe that learns of new credits when nothing is in flight (no ACK is
    /// coming that could raise the limit, so whatever MSN the responder
    /// reports, the QP cannot stall). rdmavt probes one past the limit even
    /// with requests in flight; that probe meets an empty receive queue
    /// whenever the receiver is slower than the wire, which fails a QP with
    /// rnr_retry 0 (fio).
    fn credit_gate(&mut self, ctx: &mut Ctx<'_>, ssn: u32) -> Result<(), Blocked> {
        let limited = match self.req.credits {
            Credits::Unknown => true,
            Credits::Limit(lsn) => msn_after(ssn, lsn),
            Credits::Unlimited => false,
        };
        if !limited {
            return Ok(());
        }
        // Alone, it goes at once when an RNR NAK would only delay it
        // (`rnr_retry` > 0: IBTA's limited send), before any ACK, and to a
        // responder known not to announce credits. With `rnr_retry` 0 an RNR
        // NAK fails the QP: it waits first for the responder's credit update
        // (softroce announces a receive WQE posted after it ran out), then
        // goes anyway.
        let lone = self.comp.psn == self.req.psn;
        let waited = match self.req.probe_at {
            Some(t) => ctx.now >= t,
            None => self.req.credit_updates == Some(false),
        };
        let at_once = self.req.credits == Credits::Unknown || self.attr.rnr_retry > 0;
        if lone && (at_once || waited) {
            self.req.blind_probe = self.req.probe_at.take().is_some();
            return Ok(());
        }
        if lone && self.req.probe_at.is_none() {
            let t = ctx.now + CREDIT_UPDATE_WAIT;
            self.set_rnr_until(ctx, Some(t));
            self.req.probe_at = Some(t);
        }
        if !self.req.credit_wait {
            self.req.credit_wait = true;
            ctx.counters.credit_waits += 1;
        }
        Err(Blocked::Credits)
    }

    /// Fixes the PSN range of the message of WQE `idx`, starting at `psn`,
    /// when it starts: ACKs are judged against its end, whatever a
    /// retransmission resent.
    fn begin_message(&mut self, idx: u64, psn: Psn) {
        let (qpn, mtu) = (self.qpn, self.mtu());
        let w = self.sq.get_mut(idx);
        let npkts = if w.is_atomic() { 1 } else { w.length.div_ceil(mtu).max(1) };
        debug_assert!(
            !w.psns_assigned || w.first_psn == psn,
            "QP {qpn:#x}: WQE {idx} restarts at {psn:?}, first sent at {:?}",
            w.first_psn
        );
        w.first_psn = psn;
        w.last_psn = psn.add(npkts as u32 - 1);
        w.psns_assigned = true;
        w.state = WqeState::Sending;
        if msn_after(w.ssn, self.req.sent_ssn) {
            self.req.sent_ssn = w.ssn;
        }
    }

    /// The segment of WQE `idx`'s message the packet at `psn` carries: from
    /// its offset, at most an MTU.
    fn segment(&self, idx: u64, psn: Psn) -> Segment {
        let mtu = self.mtu();
        let w = self.sq.get(idx);
        debug_assert!(
            u64::from(w.first_psn.distance_to(psn) as u32) * mtu == w.offset,
            "QP {:#x}: PSN {psn:?} does not match offset {} of a WQE starting at {:?}",
            self.qpn,
            w.offset,
            w.first_psn
        );
        let remaining = w.length - w.offset;
        // READ and atomics carry no payload; FLUSH has none either (its
        // length is the RETH's), ATOMIC WRITE its 8 bytes.
        let rd_atomic = w.is_read_or_atomic();
        Segment {
            payload_len: if rd_atomic { 0 } else { remaining.min(mtu) },
            last: remaining <= mtu || rd_atomic,
            npsn: if w.opcode == WrOpcode::RdmaRead { remaining.div_ceil(mtu).max(1) as u32 } else { 1 },
        }
    }

    /// Whether the packet at `psn` sets AckReq; counts the packets since the
    /// last one that did.
    fn ack_request(&mut self, psn: Psn, seg: Segment) -> bool {
        self.req.noack_pkts += 1;
        // The GSI QP (1) sets AckReq on every packet, as rxe's does.
        let gsi = self.qpn == crate::qp::GSI_QPN;
        // Under a congestion window, ACKs must keep coming: every half window
        // asks for one, and so does the packet that fills it (else the
        // responder, which answers only AckReq, would leave it to a timeout).
        let window = self.comp.cc.window();
        let every = MAX_PKT_PER_ACK.min((window / 2).max(1));
        let fills = self.comp.psn.distance_to(psn.add(seg.npsn)) >= window as i32;
        let ack_req = gsi
            || self.qp_type() == QpType::Rc && (seg.last || self.req.noack_pkts > every || self.req.ack_next || fills);
        if ack_req {
            self.req.noack_pkts = 0;
            self.req.ack_next = false;
        }
        ack_req
    }

    /// Advances past the packet sent at `psn` (rxe `update_wqe_state`,
    /// `update_wqe_psn`, `update_state`): the WQE's offset and the next PSN
    /// (a READ request takes a PSN per response packet), the WQE's state and
    /// `next` after its last packet (UC and UD complete once sent), then the
    /// congestion control's and retransmit timer's view of the flight.
    fn advance(&mut self, ctx: &mut Ctx<'_>, idx: u64, psn: Psn, seg: Segment, ack_req: bool) {
        let ty = self.qp_type();
        let w = self.sq.get_mut(idx);
        if w.opcode == WrOpcode::RdmaRead {
            w.last_psn = psn.add(seg.npsn - 1);
            self.req.psn = psn.add(seg.npsn);
            w.offset = w.length;
        } else {
            self.req.psn = psn.next();
            w.offset += seg.payload_len;
        }
        if seg.last {
            w.state = if ty == QpType::Rc { WqeState::Sent } else { WqeState::Done };
            if w.takes_rd_atomic() {
                self.req.rd_atomic += 1;
            }
            if matches!(w.opcode, WrOpcode::Send | WrOpcode::SendWithImm | WrOpcode::SendWithInv) {
                ctx.counters.rdma_sends += 1;
            }
            self.sq.next += 1;
            self.sq.high = self.sq.high.max(self.sq.next);
            if ty != QpType::Rc {
                self.complete_done(ctx);
            }
        }
        if ty == QpType::Rc {
            let fresh = !psn.before(self.req.sent_psn);
            if fresh && self.comp.psn == psn {
                // Nothing was outstanding: the retry count's time starts now.
                self.comp.retry_epoch = Some(ctx.now);
            }
            self.comp.cc.on_send(ctx.now, psn, fresh && ack_req);
        }
        if self.req.psn.after(self.req.sent_psn) {
            self.req.sent_psn = self.req.psn;
        }
        if ty == QpType::Rc && self.comp.timer.is_none() {
            self.restart_retransmit_timer(ctx);
        }
        ctx.counters.sent_pkts += 1;
    }

    /// Sends the hole a keeping responder NAKed, alone and asking for an
    /// ACK, as it was first sent ([`crate::reorder`]). Nothing else moves:
    /// the requester goes on from where it was.
    fn resend_hole(&mut self, ctx: &mut Ctx<'_>, buf: &mut [u8]) -> Option<Outgoing> {
        let psn = self.req.hole.take()?;
        if !self.hole_resendable(psn) {
            // Acknowledged meanwhile.
            return None;
        }
        let idx = self.wqe_at(psn)?;
        let (ty, mtu, pd) = (self.qp_type(), self.mtu(), self.init.pd.get());
        let w = self.sq.get(idx);
        let offset = u64::from(w.first_psn.distance_to(psn) as u32) * mtu;
        let last = psn == w.last_psn;
        let view = ReqView { qpn: self.qpn, ty, pd, mtu, attr: &self.attr };
        let out = match emit_request(ctx, &view, w, psn, offset, last, true, buf) {
            Emit::Sent(out) => out,
            Emit::NoRoom => {
                self.req.hole = Some(psn);
                return None;
            }
            Emit::Failed(status) => return self.fail_wqe(ctx, idx, status),
        };
        self.comp.last_hole = Some(psn);
        self.comp.cc.on_send(ctx.now, psn, false);
        if self.comp.timer.is_none() {
            self.restart_retransmit_timer(ctx);
        }
        ctx.counters.sent_pkts += 1;
        ctx.counters.hole_resends += 1;
        Some(out)
    }

    /// Ends WQE `idx` with `status` and the QP in error (local errors).
    fn fail_wqe(&mut self, ctx: &mut Ctx<'_>, idx: u64, status: WcStatus) -> Option<Outgoing> {
        let w = self.sq.get_mut(idx);
        w.state = WqeState::Done;
        w.status = status;
        ctx.counters.send_err += 1;
        // Everything before it completes normally first if already done.
        self.complete_done(ctx);
        self.enter_error(ctx);
        None
    }

    /// Retires WQEs from the consumer on while they are `Done`.
    pub(crate) fn complete_done(&mut self, ctx: &mut Ctx<'_>) {
        while !self.sq.is_empty() && self.sq.get(self.sq.consumer).state == WqeState::Done {
            self.complete_front(ctx);
        }
        self.check_drained(ctx);
    }
}

/// Why the gate ([`Qp::gate`]) holds the WQE at `next` back: the early
/// exits of rxe's `rxe_requester`, named.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Blocked {
    /// No WQE is posted past `next`.
    Empty,
    /// The QP is neither in RTS nor in SQD: it sends no requests.
    State,
    /// SQD, draining: what was started goes on, nothing new starts.
    Draining,
    /// An RNR NAK's wait, or a credit probe's wait for an update, runs.
    RnrWait,
    /// The unacknowledged PSNs fill the congestion window ([`crate::cc`]).
    Window,
    /// A FENCE'd WQE waits for earlier READs, atomics, FLUSHes and
    /// ATOMIC WRITEs to complete.
    Fence,
    /// `max_rd_atomic` of them are outstanding already.
    RdAtomic,
    /// The responder's end-to-end credits do not cover the message, and it
    /// may not go as the lone probe (IBTA 9.7.7.2).
    Credits,
}

/// The gate's leave: WQE `idx` sends its next packet; `starting` if it is
/// its message's first (not yet given its PSNs by this pass).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Go {
    /// Index of the WQE in the send queue.
    pub(crate) idx: u64,
    /// The message starts with this packet.
    pub(crate) starting: bool,
}

/// The part of its message a request packet carries ([`Qp::segment`]).
#[derive(Debug, Clone, Copy)]
struct Segment {
    /// Payload bytes: at most an MTU, none for READs and atomics.
    payload_len: u64,
    /// The message's last packet (a READ or atomic request is its only one).
    last: bool,
    /// PSNs the packet takes: a READ request one per response packet.
    npsn: u32,
}

/// What [`emit_request`] needs of the QP besides the WQE.
struct ReqView<'a> {
    qpn: u32,
    ty: QpType,
    pd: u32,
    mtu: u64,
    attr: &'a crate::attr::QpAttr,
}

/// The outcome of [`emit_request`].
enum Emit {
    /// The packet is in the buffer (and the gather sink).
    Sent(Outgoing),
    /// The buffer is too small.
    NoRoom,
    /// The WQE cannot be sent: it fails with this status.
    Failed(WcStatus),
}

/// Writes the packet of WQE `w` at PSN `psn`, byte `offset` of its message,
/// into `buf`: the headers ([`build_request`]), then the payload
/// ([`place_payload`]). Changes nothing but the buffer and the sink, so a
/// packet sent before can be built again as it was ([`Qp::resend_hole`]).
#[allow(clippy::too_many_arguments)]
fn emit_request(
    ctx: &mut Ctx<'_>,
    qp: &ReqView<'_>,
    w: &SendWqe,
    psn: Psn,
    offset: u64,
    last: bool,
    ack_req: bool,
    buf: &mut [u8],
) -> Emit {
    let plen = if w.is_read_or_atomic() { 0 } else { (w.length - offset).min(qp.mtu) as usize };
    let (repr, dst, sgid_index) = match build_request(ctx, qp, w, psn, offset, last, ack_req) {
        Ok(built) => built,
        Err(status) => return Emit::Failed(status),
    };
    let Ok(hlen) = repr.emit_headers(buf, plen) else { return Emit::NoRoom };
    let len = hlen + plen + pad_for(plen);
    if buf.len() < len + roce_wire::ICRC_LEN {
        return Emit::NoRoom;
    }
    match place_payload(ctx, qp.pd, w, offset, &mut buf[..len], hlen, plen) {
        Ok(head_len) => Emit::Sent(Outgoing { len, head_len, dst, sgid_index }),
        Err(status) => Emit::Failed(status),
    }
}

/// Builds the headers of the packet of `w` at `psn`, byte `offset` of its
/// message (rxe `init_req_packet`, `finish_packet`'s header part): the
/// opcode, the extended headers it carries, the destination and source GID
/// index. A UD WR whose address handle is gone fails with LOC_QP_OP_ERR.
fn build_request(
    ctx: &Ctx<'_>,
    qp: &ReqView<'_>,
    w: &SendWqe,
    psn: Psn,
    offset: u64,
    last: bool,
    ack_req: bool,
) -> Result<(PacketRepr, IpAddr, u8), WcStatus> {
    let remaining = w.length - offset;
    let op = opcode(qp.ty, w.opcode, position(offset, last));
    let info = op.and_then(Opcode::info).expect("requester opcodes are in the table");
    let mut ext = ExtRepr::default();
    if info.headers.contains(roce_wire::ExtHeader::Reth) {
        let dma_len = match w.opcode {
            WrOpcode::RdmaRead => remaining,
            WrOpcode::Flush => u64::from(w.flush.len),
            _ => w.length,
        };
        ext.reth = Some(RethRepr { va: w.remote_addr.wrapping_add(offset), rkey: w.rkey, dma_len: dma_len as u32 });
    }
    if info.headers.contains(roce_wire::ExtHeader::Feth) {
        ext.feth = Some(FethRepr { selectivity_level: w.flush.selectivity, placement_type: w.flush.placement });
    }
    if info.has_immediate() {
        ext.immdt = Some(ImmDtRepr { imm: w.imm_data });
    }
    if info.has_invalidate() {
        ext.ieth = Some(IethRepr { rkey: w.invalidate_rkey });
    }
    if info.headers.contains(roce_wire::ExtHeader::AtomicEth) {
        let (swap_add, compare) = match w.opcode {
            WrOpcode::AtomicCmpAndSwp => (w.swap, w.compare_add),
            _ => (w.compare_add, 0),
        };
        ext.atomic_eth = Some(AtomicEthRepr { va: w.remote_addr, rkey: w.rkey, swap_add, compare });
    }
    let (dst, sgid_index, dest_qpn) = match (qp.ty, w.ud) {
        (QpType::Ud, Some(ud)) => {
            let qkey = if ud.remote_qkey & 0x8000_0000 != 0 { qp.attr.qkey } else { ud.remote_qkey };
            ext.deth = Some(DethRepr { qkey, src_qpn: qp.qpn });
            let ah = ctx.ah(ud.ah).ok_or(WcStatus::LocQpOpErr)?;
            (ah.dest, ah.sgid_index, ud.remote_qpn.get())
        }
        _ => (qp.attr.ah_attr.dest, qp.attr.ah_attr.sgid_index, qp.attr.dest_qp_num.get()),
    };
    let bth = BthRepr {
        solicited: last && w.flags.contains(SendFlags::SOLICITED),
        ack_req,
        ..BthRepr::new(info.opcode, dest_qpn, psn)
    };
    Ok((PacketRepr { bth, ext }, dst, sgid_index))
}

/// Places the `plen` payload bytes of the packet of `w` at byte `offset` of
/// its message behind its headers (`hlen` bytes of `buf`, which ends after
/// the pad): copied from the inline data or gathered from the SGEs, or,
/// above [`SMALL_PAYLOAD`] with a gather sink, listed as pieces of
/// registered memory for a scatter-gather send (the sender adds the pad).
/// Returns how much of `buf` was written; an L_Key check that fails makes
/// it LOC_PROT_ERR.
fn place_payload(
    ctx: &mut Ctx<'_>,
    pd: u32,
    w: &SendWqe,
    offset: u64,
    buf: &mut [u8],
    hlen: usize,
    plen: usize,
) -> Result<usize, WcStatus> {
    let total = buf.len();
    if w.is_inline {
        let off = offset as usize;
        buf[hlen..hlen + plen].copy_from_slice(&w.inline[off..off + plen]);
    } else if plen > SMALL_PAYLOAD
        && let Some(mut sink) = ctx.gather.take()
    {
        let mark = sink.len();
        let r = walk_sges(ctx, pd, &w.sges, offset, plen, AccessFlags::EMPTY, |g, _, n| {
            sink.push(crate::ctx::Piece { region: g.region, offset: g.offset, len: n });
            Ok(())
        });
        if r.is_err() {
            sink.truncate(mark);
        }
        ctx.gather = Some(sink);
        r.map_err(|_| WcStatus::LocProtErr)?;
        return Ok(hlen);
    } else if gather(ctx, pd, &w.sges, offset, &mut buf[hlen..hlen + plen]).is_err() {
        return Err(WcStatus::LocProtErr);
    }
    buf[hlen + plen..total].fill(0);
    Ok(total)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The opcode arithmetic the table replaced: the RC operation's low
    /// bits under the transport's prefix.
    fn by_prefix(ty: QpType, op: WrOpcode, first: bool, fits: bool) -> Opcode {
        let base: u8 = match ty {
            QpType::Rc => 0x00,
            QpType::Uc => 0x20,
            QpType::Ud => 0x60,
        };
        let low = match (op, first, fits) {
            (WrOpcode::RdmaRead, ..) => return Opcode::RC_RDMA_READ_REQUEST,
            (WrOpcode::AtomicCmpAndSwp, ..) => return Opcode::RC_COMPARE_SWAP,
            (WrOpcode::AtomicFetchAndAdd, ..) => return Opcode::RC_FETCH_ADD,
            (WrOpcode::Flush, ..) => return Opcode::RC_FLUSH,
            (WrOpcode::AtomicWrite, ..) => return Opcode::RC_ATOMIC_WRITE,
            (WrOpcode::SendWithInv, true, true) => return Opcode::RC_SEND_ONLY_WITH_INVALIDATE,
            (WrOpcode::SendWithInv, false, true) => return Opcode::RC_SEND_LAST_WITH_INVALIDATE,
            (WrOpcode::Send | WrOpcode::SendWithImm | WrOpcode::SendWithInv, true, false) => 0x00,
            (WrOpcode::Send | WrOpcode::SendWithImm | WrOpcode::SendWithInv, false, false) => 0x01,
            (WrOpcode::Send, false, true) => 0x02,
            (WrOpcode::SendWithImm, false, true) => 0x03,
            (WrOpcode::Send, true, true) => 0x04,
            (WrOpcode::SendWithImm, true, true) => 0x05,
            (_, true, false) => 0x06,
            (_, false, false) => 0x07,
            (WrOpcode::RdmaWriteWithImm, false, true) => 0x09,
            (WrOpcode::RdmaWriteWithImm, true, true) => 0x0b,
            (_, false, true) => 0x08,
            (_, true, true) => 0x0a,
        };
        Opcode(base | low)
    }

    #[test]
    fn opcode_table_matches_the_prefix_arithmetic() {
        let ops = [
            WrOpcode::RdmaWrite,
            WrOpcode::RdmaWriteWithImm,
            WrOpcode::Send,
            WrOpcode::SendWithImm,
            WrOpcode::RdmaRead,
            WrOpcode::AtomicCmpAndSwp,
            WrOpcode::AtomicFetchAndAdd,
            WrOpcode::LocalInv,
            WrOpcode::BindMw,
            WrOpcode::SendWithInv,
            WrOpcode::Flush,
            WrOpcode::AtomicWrite,
        ];
        for ty in [QpType::Rc, QpType::Uc, QpType::Ud] {
            for op in ops {
                for (first, fits) in [(true, true), (true, false), (false, false), (false, true)] {
                    let old = by_prefix(ty, op, first, fits);
                    let new = opcode(ty, op, position(if first { 0 } else { 1 }, fits));
                    // Where the arithmetic made an opcode the wire does not
                    // know (UD multi-packet or WRITE), the table has none.
                    let expect = old.info().map(|i| i.opcode);
                    assert_eq!(new, expect, "{ty:?} {op:?} first {first} fits {fits}");
                }
            }
        }
    }
}
