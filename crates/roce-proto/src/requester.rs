//! The requester (rxe `rxe_req.c`): turns send WQEs into request packets —
//! opcode choice, MTU segmentation, PSNs, AckReq — within the limits of the
//! unacknowledged-PSN window, `max_rd_atomic` and fences.

use std::net::IpAddr;

use roce_wire::{
    AtomicEthRepr, BthRepr, DethRepr, ExtRepr, FethRepr, IethRepr, ImmDtRepr, Opcode, PacketRepr, RethRepr,
    packet::pad_for,
};

use crate::ctx::Ctx;
use crate::qp::{Credits, MAX_PKT_PER_ACK, Qp};
use crate::queue::{SendWqe, WqeState};
use crate::verbs::{AccessFlags, QpState, QpType, SendFlags, WcStatus, WrOpcode};

/// How long a SEND with no credits and nothing in flight waits for the
/// responder's credit update before it goes as a probe (which an empty
/// receive queue answers with an RNR NAK). Long enough for a receiver
/// descheduled on a loaded machine; paid once per QP toward a responder
/// that never announces (a NIC), which from then on is probed at once.
pub const CREDIT_UPDATE_WAIT: std::time::Duration = std::time::Duration::from_millis(50);

/// Payloads up to this size are copied behind the headers even for a
/// scatter-gather send: an extra iovec costs more than the copy.
pub const SMALL_PAYLOAD: usize = 256;

/// A packet a role wrote into the caller's buffer: `len` bytes of BTH
/// through pad (the device appends the ICRC), for `dst`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Outgoing {
    /// Packet length without the ICRC.
    pub len: usize,
    /// Bytes of it written into the buffer: all of them, or with a gather
    /// sink only the headers (the payload is in the sink's pieces, the pad
    /// is the sender's to add).
    pub head_len: usize,
    /// Destination address.
    pub dst: IpAddr,
    /// Index of the source GID.
    pub sgid_index: u8,
}

/// The opcode for the packet of `w` starting at byte `offset`, with
/// `fits` saying whether the rest fits in one packet.
fn opcode(ty: QpType, w: &SendWqe, offset: u64, fits: bool) -> Opcode {
    let first = offset == 0;
    let base: u8 = match ty {
        QpType::Rc => 0x00,
        QpType::Uc => 0x20,
        QpType::Ud => 0x60,
    };
    let op = match (w.opcode, first, fits) {
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
    Opcode(base | op)
}

/// Whether 24-bit sequence number `a` (an SSN or MSN) is after `b`.
pub(crate) fn msn_after(a: u32, b: u32) -> bool {
    ((a.wrapping_sub(b) << 8) as i32) > 0
}

impl Qp {
    /// Whether the requester could send now (ignoring the window): used to
    /// schedule the QP.
    pub fn requester_has_work(&self) -> bool {
        matches!(self.state(), QpState::Rts | QpState::Sqd)
            && (self.sq.next < self.sq.producer || self.req.hole.is_some())
    }

    /// Runs the local operations (LOCAL_INV, BIND_MW) the requester has
    /// reached, then writes the next request packet into `buf`, if the QP may
    /// send one now.
    pub fn requester_poll(&mut self, ctx: &mut Ctx<'_>, buf: &mut [u8]) -> Option<Outgoing> {
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
        let (pd, qpn) = (self.init.pd, self.qpn);
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

    fn request_packet(&mut self, ctx: &mut Ctx<'_>, buf: &mut [u8]) -> Option<Outgoing> {
        let idx = self.sq.next;
        if idx >= self.sq.producer {
            return None;
        }
        let (state, ty, mtu) = (self.state(), self.qp_type(), self.mtu());
        // The WQE is looked up once per packet: the fields of the QP it
        // needs besides are borrowed beside it.
        let w = self.sq.get_mut(idx);
        // SQD finishes (and retransmits) what was started but starts nothing new.
        if !(state == QpState::Rts || (state == QpState::Sqd && w.psns_assigned)) {
            return None;
        }
        if let Some(t) = self.req.rnr_until {
            if ctx.now < t {
                return None;
            }
            // `set_rnr_until`, spelled out: `w` borrows the send queue.
            ctx.timers.update(self.qpn, crate::timers::TimerKind::Rnr, Some(t), None);
            self.req.rnr_until = None;
        }
        // The congestion window, at most rxe's MAX_UNACKED_PSNS ([`crate::cc`]).
        if ty == QpType::Rc && self.comp.psn.distance_to(self.req.psn) >= self.comp.cc.window() as i32 {
            return None;
        }
        let starting = w.offset == 0 && w.state == WqeState::Posted;
        let psn = self.req.psn;
        // READ and atomics carry no payload; FLUSH has none either (its
        // length is the RETH's), ATOMIC WRITE its 8 bytes.
        let is_rd_atomic = w.is_read_or_atomic();
        let takes_rd_atomic = w.takes_rd_atomic();
        if starting {
            // A FENCE waits for every earlier READ, atomic, FLUSH and ATOMIC
            // WRITE to complete.
            if w.flags.contains(SendFlags::FENCE) && self.req.rd_atomic > 0 {
                return None;
            }
            if takes_rd_atomic && self.req.rd_atomic >= u32::from(self.attr.max_rd_atomic) {
                return None;
            }
            // End-to-end credits (IBTA 9.7.7.2): a message that takes a
            // receive WQE goes if its SSN is within the limit, or alone, as
            // the probe that learns of new credits when nothing is in flight
            // (no ACK is coming that could raise the limit, so whatever MSN
            // the responder reports, the QP cannot stall). rdmavt probes one
            // past the limit even with requests in flight; that probe meets
            // an empty receive queue whenever the receiver is slower than
            // the wire, which fails a QP with rnr_retry 0 (fio).
            let limited = match self.req.credits {
                Credits::Unknown => Some(true),
                Credits::Limit(lsn) => Some(msn_after(w.ssn, lsn)),
                Credits::Unlimited => None,
            };
            if ty == QpType::Rc && w.consumes_recv() && limited == Some(true) {
                // Alone, it goes at once when an RNR NAK would only delay
                // it (`rnr_retry` > 0: IBTA's limited send), before any
                // ACK, and to a responder known not to announce credits.
                // With `rnr_retry` 0 an RNR NAK fails the QP: it waits
                // first for the responder's credit update (softroce
                // announces a receive WQE posted after it ran out), then
                // goes anyway.
                let lone = self.comp.psn == psn;
                let waited = match self.req.probe_at {
                    Some(t) => ctx.now >= t,
                    None => self.req.credit_updates == Some(false),
                };
                let at_once = self.req.credits == Credits::Unknown || self.attr.rnr_retry > 0;
                let probe = lone && (at_once || waited);
                if !probe {
                    if lone && self.req.probe_at.is_none() {
                        let t = ctx.now + CREDIT_UPDATE_WAIT;
                        // `set_rnr_until`, spelled out: `w` borrows the send queue.
                        ctx.timers.update(self.qpn, crate::timers::TimerKind::Rnr, self.req.rnr_until, Some(t));
                        self.req.rnr_until = Some(t);
                        self.req.probe_at = Some(t);
                    }
                    if !self.req.credit_wait {
                        self.req.credit_wait = true;
                        ctx.counters.credit_waits += 1;
                    }
                    return None;
                }
                self.req.blind_probe = self.req.probe_at.take().is_some();
            }
            self.req.credit_wait = false;
        }
        let pd = self.init.pd;
        if starting {
            // The message's PSN range is fixed when it starts: ACKs are
            // judged against its end, whatever a retransmission resent.
            let npkts = if w.is_atomic() { 1 } else { w.length.div_ceil(mtu).max(1) };
            debug_assert!(
                !w.psns_assigned || w.first_psn == psn,
                "QP {:#x}: WQE {idx} restarts at {psn:?}, first sent at {:?}",
                self.qpn,
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
        debug_assert!(
            u64::from(w.first_psn.distance_to(psn) as u32) * mtu == w.offset,
            "QP {:#x}: PSN {psn:?} does not match offset {} of a WQE starting at {:?}",
            self.qpn,
            w.offset,
            w.first_psn
        );
        let remaining = w.length - w.offset;
        let payload_len = if is_rd_atomic { 0 } else { remaining.min(mtu) };
        let last = remaining <= mtu || is_rd_atomic;
        self.req.noack_pkts += 1;
        // The GSI QP (1) sets AckReq on every packet, as rxe's does.
        let gsi = self.qpn == crate::device::GSI_QPN;
        // Under a congestion window, ACKs must keep coming: every half window
        // asks for one, and so does the packet that fills it (else the
        // responder, which answers only AckReq, would leave it to a timeout).
        let window = self.comp.cc.window();
        let every = MAX_PKT_PER_ACK.min((window / 2).max(1));
        let npsn = if w.opcode == WrOpcode::RdmaRead { remaining.div_ceil(mtu).max(1) as u32 } else { 1 };
        let fills = self.comp.psn.distance_to(psn.add(npsn)) >= window as i32;
        let ack_req = gsi || ty == QpType::Rc && (last || self.req.noack_pkts > every || self.req.ack_next || fills);
        if ack_req {
            self.req.noack_pkts = 0;
            self.req.ack_next = false;
        }
        let view = ReqView { qpn: self.qpn, ty, pd, mtu, attr: &self.attr };
        let (total, head_len, dst, sgid) = match emit_request(ctx, &view, w, psn, w.offset, last, ack_req, buf) {
            Emit::Done { len, head_len, dst, sgid_index } => (len, head_len, dst, sgid_index),
            Emit::NoRoom => return None,
            Emit::Failed(status) => return self.fail_wqe(ctx, idx, status),
        };
        // Advance.
        if w.opcode == WrOpcode::RdmaRead {
            let npsn = remaining.div_ceil(mtu).max(1);
            w.last_psn = psn.add(npsn as u32 - 1);
            self.req.psn = psn.add(npsn as u32);
            w.offset = w.length;
        } else {
            self.req.psn = psn.next();
            w.offset += payload_len;
        }
        if last {
            // UC and UD complete once sent.
            w.state = if ty == QpType::Rc { WqeState::Sent } else { WqeState::Done };
            if takes_rd_atomic {
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
        Some(Outgoing { len: total, head_len, dst, sgid_index: sgid })
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
        let (ty, mtu, pd) = (self.qp_type(), self.mtu(), self.init.pd);
        let w = self.sq.get(idx);
        let offset = u64::from(w.first_psn.distance_to(psn) as u32) * mtu;
        let last = psn == w.last_psn;
        let view = ReqView { qpn: self.qpn, ty, pd, mtu, attr: &self.attr };
        let (len, head_len, dst, sgid_index) = match emit_request(ctx, &view, w, psn, offset, last, true, buf) {
            Emit::Done { len, head_len, dst, sgid_index } => (len, head_len, dst, sgid_index),
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
        Some(Outgoing { len, head_len, dst, sgid_index })
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
    pub fn complete_done(&mut self, ctx: &mut Ctx<'_>) {
        while !self.sq.is_empty() && self.sq.get(self.sq.consumer).state == WqeState::Done {
            self.complete_front(ctx);
        }
        self.check_drained(ctx);
    }
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
    Done { len: usize, head_len: usize, dst: IpAddr, sgid_index: u8 },
    /// The buffer is too small.
    NoRoom,
    /// The WQE cannot be sent: it fails with this status.
    Failed(WcStatus),
}

/// Writes the packet of WQE `w` at PSN `psn`, byte `offset` of its message,
/// into `buf` (headers, then the payload copied or listed in the gather
/// sink). Changes nothing but the buffer and the sink, so a packet sent
/// before can be built again as it was ([`Qp::resend_hole`]).
#[allow(clippy::too_many_arguments)]
fn emit_request(
    ctx: &mut Ctx<'_>,
    qp: &ReqView<'_>,
    w: &SendWqe,
    psn: roce_wire::Psn,
    offset: u64,
    last: bool,
    ack_req: bool,
    buf: &mut [u8],
) -> Emit {
    let mtu = qp.mtu;
    let remaining = w.length - offset;
    let payload_len = if w.is_read_or_atomic() { 0 } else { remaining.min(mtu) };
    let op = opcode(qp.ty, w, offset, last);
    let info = op.info().expect("requester opcodes are in the table");
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
            let Some(ah) = ctx.ah(ud.ah) else {
                return Emit::Failed(WcStatus::LocQpOpErr);
            };
            (ah.dest, ah.sgid_index, ud.remote_qpn)
        }
        _ => (qp.attr.ah_attr.dest, qp.attr.ah_attr.sgid_index, qp.attr.dest_qp_num),
    };
    let repr = PacketRepr {
        bth: BthRepr {
            solicited: last && w.flags.contains(SendFlags::SOLICITED),
            ack_req,
            ..BthRepr::new(op, dest_qpn, psn)
        },
        ext,
    };
    let plen = payload_len as usize;
    let Ok(hlen) = repr.emit_headers(buf, plen) else { return Emit::NoRoom };
    let total = hlen + plen + pad_for(plen);
    if buf.len() < total + roce_wire::ICRC_LEN {
        return Emit::NoRoom;
    }
    // The payload: copied behind the headers, or (with a gather sink and
    // registered memory) listed as pieces for a scatter-gather send.
    let mut head_len = total;
    if w.is_inline {
        let off = offset as usize;
        buf[hlen..hlen + plen].copy_from_slice(&w.inline[off..off + plen]);
        buf[hlen + plen..total].fill(0);
    } else if plen > SMALL_PAYLOAD
        && let Some(mut sink) = ctx.gather.take()
    {
        let mark = sink.len();
        let r = walk_sges(ctx, qp.pd, &w.sges, offset, plen, AccessFlags::EMPTY, |g, _, n| {
            sink.push(crate::ctx::Piece { region: g.region, offset: g.offset, len: n });
            Ok(())
        });
        if r.is_err() {
            sink.truncate(mark);
        }
        ctx.gather = Some(sink);
        if r.is_err() {
            return Emit::Failed(WcStatus::LocProtErr);
        }
        head_len = hlen;
    } else {
        if gather(ctx, qp.pd, &w.sges, offset, &mut buf[hlen..hlen + plen]).is_err() {
            return Emit::Failed(WcStatus::LocProtErr);
        }
        buf[hlen + plen..total].fill(0);
    }
    Emit::Done { len: total, head_len, dst, sgid_index }
}

/// Walks the part of a message at byte `offset`, `len` bytes long, over an
/// SGE list: calls `f(grant, at, n)` for each piece after checking the L_Key
/// for `access` in protection domain `pd`; `at` is the piece's offset in the
/// walked range. Fails if a key check fails or the SGEs end first.
fn walk_sges(
    ctx: &Ctx<'_>,
    pd: u32,
    sges: &[crate::wr::Sge],
    mut offset: u64,
    len: usize,
    access: AccessFlags,
    mut f: impl FnMut(crate::mr::Grant, usize, usize) -> Result<(), crate::mem::MemError>,
) -> Result<(), crate::mr::AccessError> {
    let mut done = 0;
    for s in sges {
        if done == len {
            break;
        }
        let sge_len = u64::from(s.length);
        if offset >= sge_len {
            offset -= sge_len;
            continue;
        }
        let n = (sge_len - offset).min((len - done) as u64) as usize;
        let g = ctx.mrs.check(s.lkey, pd, s.addr + offset, n as u64, access)?;
        f(g, done, n)?;
        done += n;
        offset = 0;
    }
    if done == len {
        Ok(())
    } else {
        Err(crate::mr::AccessError::OutOfRange { key: 0, va: offset, len: (len - done) as u64 })
    }
}

/// Copies `dst.len()` bytes of the message at byte `offset` from the SGEs,
/// checking each L_Key in protection domain `pd` (local reads need no flag).
pub(crate) fn gather(
    ctx: &Ctx<'_>,
    pd: u32,
    sges: &[crate::wr::Sge],
    offset: u64,
    dst: &mut [u8],
) -> Result<(), crate::mr::AccessError> {
    let len = dst.len();
    walk_sges(ctx, pd, sges, offset, len, AccessFlags::EMPTY, |g, at, n| g.region.read(g.offset, &mut dst[at..at + n]))
}

/// Copies `src` into the SGEs at message byte `offset`, checking each L_Key
/// for LOCAL_WRITE in `pd`. Fails if the SGEs are too short.
pub(crate) fn scatter(
    ctx: &Ctx<'_>,
    pd: u32,
    sges: &[crate::wr::Sge],
    offset: u64,
    src: &[u8],
) -> Result<(), crate::mr::AccessError> {
    walk_sges(ctx, pd, sges, offset, src.len(), AccessFlags::LOCAL_WRITE, |g, at, n| {
        g.region.write(g.offset, &src[at..at + n])
    })
}
