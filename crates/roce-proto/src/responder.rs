//! The responder (rxe `rxe_resp.c`): checks each request (state, transport,
//! PSN, opcode sequence, access, R_Key and bounds) before any memory is
//! touched, executes it into registered memory or a receive WQE, and queues
//! the ACK, NAK, READ response or atomic ACK.

use std::net::IpAddr;

use roce_wire::{
    AethRepr, AtomicAckEthRepr, BthRepr, ExtRepr, NakCode, Opcode, Operation, Packet, PacketRepr, Position, Psn, Reth,
    RnrTimer, Syndrome, Transport, packet::pad_for,
};

use crate::Qpn;
use crate::ctx::{AsyncEvent, Ctx};
use crate::mr::Grant;
use crate::outgoing::Outgoing;
use crate::qp::{InMessage, Qp, RecvSeq, Resource, ResourceKind, Response};
use crate::reorder::Kept;
use crate::sges::scatter;
use crate::verbs::{AccessFlags, QpState, QpType, WcOpcode, WcStatus};
use crate::wr::{Wc, WcFlags};

/// `wc.sl` of a UD receive carried by IPv4 (mlx5's RoCE L3 header type).
pub(crate) const ROCE_L3_IPV4: u8 = 2;

/// Length of the GRH area at the start of every UD receive buffer.
pub(crate) const GRH_LEN: usize = 40;

/// Where a request came from (UD receives report it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Origin {
    /// Source address.
    pub(crate) src: IpAddr,
    /// Destination address (ours).
    pub(crate) dst: IpAddr,
}

enum Verdict {
    /// Processed (or deliberately ignored); nothing more.
    Done,
    /// Answer with a NAK and, for errors other than sequence errors, move the QP to ERR.
    Nak(NakCode),
}

impl Qp {
    /// Handles a request packet addressed to this QP, then the requests
    /// kept ahead of a gap it filled ([`crate::reorder`]).
    pub(crate) fn responder_handle(&mut self, ctx: &mut Ctx<'_>, p: &Packet<&[u8]>, origin: Origin) {
        let start = self.resp.psn;
        self.handle_request(ctx, p, origin);
        if self.resp.reorder.is_empty() || self.resp.psn == start {
            return;
        }
        let mut replayed = false;
        let mut plain = false;
        while let Some(bytes) = self.resp.reorder.take(self.resp.psn) {
            replayed = true;
            let before = self.resp.psn;
            // Checked when it arrived; only its turn is new.
            let Ok(q) = Packet::new_checked(&bytes[..]) else { continue };
            self.handle_request(ctx, &q, origin);
            plain = matches!(q.info().operation, Operation::Send | Operation::RdmaWrite);
            if self.resp.psn == before || !matches!(self.state(), QpState::Rtr | QpState::Rts | QpState::Sqd) {
                // An RNR NAK or an error: the requester goes back to this
                // PSN and sends what follows again.
                self.resp.reorder.clear();
                return;
            }
        }
        if !self.resp.reorder.is_empty() && self.resp.seq != RecvSeq::GapNaked {
            // Another gap, with a request behind it: NAKed as that request
            // would have been had it arrived now.
            self.resp.seq = RecvSeq::GapNaked;
            let (psn, msn) = (self.resp.psn, self.resp.msn);
            self.queue_ack(ctx, psn, Syndrome::Nak(NakCode::PsnSequenceError), msn);
        } else if replayed && plain {
            // Everything kept is executed: say so at once (IBTA lets a
            // responder acknowledge unasked), so the requester stops
            // resending what it has. Not behind a READ or atomic, whose
            // response must come first.
            let (psn, msn) = (self.resp.psn.sub(1), self.resp.msn);
            self.queue_ack(ctx, psn, Syndrome::Ack { credits: Syndrome::CREDITS_INVALID }, msn);
        }
    }

    fn handle_request(&mut self, ctx: &mut Ctx<'_>, p: &Packet<&[u8]>, origin: Origin) {
        if !matches!(self.state(), QpState::Rtr | QpState::Rts | QpState::Sqd) {
            ctx.counters.drop_no_qp += 1;
            return;
        }
        let info = p.info();
        let transport_ok = matches!(
            (self.qp_type(), info.transport),
            (QpType::Rc, Transport::Rc) | (QpType::Uc, Transport::Uc) | (QpType::Ud, Transport::Ud)
        );
        if !transport_ok {
            ctx.counters.drop_invalid += 1;
            return;
        }
        if self.qp_type() == QpType::Ud {
            return self.ud_receive(ctx, p, origin);
        }
        let psn = p.bth().psn();
        if self.qp_type() == QpType::Uc && psn.before(self.resp.psn) {
            // UC: an old (duplicated or reordered) packet is dropped, so
            // messages are delivered at most once and in order. rxe accepts
            // any packet that starts a message, old or not.
            ctx.counters.duplicate_request += 1;
            return;
        }
        if self.qp_type() == QpType::Uc && psn != self.resp.psn {
            // UC: a gap loses the message in progress; a packet that starts a
            // message resynchronises.
            self.resp.current = None;
            self.resp.psn = psn;
            if !info.starts_message() {
                self.resp.seq = RecvSeq::Dropping;
                self.resp.psn = psn.next();
                ctx.counters.drop_invalid += 1;
                return;
            }
        }
        if self.qp_type() == QpType::Uc && self.resp.seq == RecvSeq::Dropping {
            if !info.starts_message() {
                self.resp.psn = psn.next();
                return;
            }
            self.resp.seq = RecvSeq::InStep;
        }
        if self.qp_type() == QpType::Rc && psn != self.resp.psn {
            if psn.before(self.resp.psn) {
                return self.duplicate(ctx, p);
            }
            ctx.counters.out_of_seq_request += 1;
            match self.resp.reorder.keep(self.resp.psn, psn, (*p).into_inner()) {
                Kept::Kept => ctx.counters.reorder_kept += 1,
                Kept::Duplicate => ctx.counters.duplicate_request += 1,
                Kept::Full => ctx.counters.reorder_full += 1,
            }
            if self.resp.seq != RecvSeq::GapNaked {
                self.resp.seq = RecvSeq::GapNaked;
                let (psn, msn) = (self.resp.psn, self.resp.msn);
                self.queue_ack(ctx, psn, Syndrome::Nak(NakCode::PsnSequenceError), msn);
            }
            return;
        }
        self.resp.seq = RecvSeq::InStep;
        match self.execute(ctx, p) {
            Verdict::Done => {}
            Verdict::Nak(code) => {
                if self.qp_type() == QpType::Rc {
                    let msn = self.resp.msn;
                    self.queue_ack(ctx, psn, Syndrome::Nak(code), msn);
                    self.responder_error(ctx);
                } else {
                    // UC has no NAKs: drop the rest of the message.
                    self.resp.current = None;
                    self.resp.seq = RecvSeq::Dropping;
                    self.resp.psn = psn.next();
                }
            }
        }
    }

    /// A fatal responder error: the NAK queued so far is still sent, then the
    /// QP is in ERR (IBTA class B/C errors; rxe `goto_error`).
    fn responder_error(&mut self, ctx: &mut Ctx<'_>) {
        let pending = std::mem::take(&mut self.resp.responses);
        self.enter_error(ctx);
        self.resp.responses = pending;
        ctx.events.push_back(AsyncEvent::QpFatal(crate::Qpn::from(self.qpn)));
    }

    /// Executes an in-sequence request.
    fn execute(&mut self, ctx: &mut Ctx<'_>, p: &Packet<&[u8]>) -> Verdict {
        let info = p.info();
        let psn = p.bth().psn();
        // Opcode sequence: a message in progress continues with MIDDLE/LAST of
        // the same operation; otherwise only FIRST/ONLY may come.
        let continuing = matches!(info.position, Position::Middle | Position::Last);
        let same_op = match (self.resp.current, info.operation) {
            (Some(InMessage::Send { .. }), Operation::Send) => true,
            (Some(InMessage::Write { .. }), Operation::RdmaWrite) => true,
            (None, _) => !continuing,
            _ => false,
        };
        if !same_op || (self.resp.current.is_some() && !continuing) {
            // An out-of-sequence opcode (IBTA 9.7.5.1.x / 9.8.3: e.g. a
            // SEND_ONLY while a SEND_FIRST's message is unfinished) is a
            // responder class C error (IBTA 9.9.3.1): NAK invalid request,
            // QP to ERR, and the receive WQE in progress completes in error
            // with REM_INV_REQ_ERR rather than being flushed (rxe
            // RESPST_ERR_MISSING_OPCODE_LAST_C does the same). UC drops the
            // message and keeps its WQE (below, as class D1).
            if self.qp_type() == QpType::Rc {
                self.fail_message_in_progress(ctx);
            }
            return Verdict::Nak(NakCode::InvalidRequest);
        }
        let access = self.attr.qp_access_flags;
        let needed = match info.operation {
            Operation::RdmaWrite => AccessFlags::REMOTE_WRITE,
            Operation::RdmaReadRequest => AccessFlags::REMOTE_READ,
            Operation::CompareSwap | Operation::FetchAdd => AccessFlags::REMOTE_ATOMIC,
            // ATOMIC WRITE writes: the QP and the R_Key must allow remote
            // writes (rxe `check_qp_attr_access`, rdma-core's own tests
            // register such targets with REMOTE_WRITE alone).
            Operation::AtomicWrite => AccessFlags::REMOTE_WRITE,
            // FLUSH's access depends on its placement type: `exec_flush`.
            Operation::Send | Operation::Flush => AccessFlags::EMPTY,
            _ => return Verdict::Nak(NakCode::InvalidRequest),
        };
        if !access.contains(needed) {
            return Verdict::Nak(NakCode::InvalidRequest);
        }
        if self.qp_type() == QpType::Uc && needed != AccessFlags::EMPTY && needed != AccessFlags::REMOTE_WRITE {
            return Verdict::Nak(NakCode::InvalidRequest);
        }
        match info.operation {
            Operation::Send => self.exec_send(ctx, p),
            Operation::RdmaWrite => self.exec_write(ctx, p),
            Operation::RdmaReadRequest => self.exec_read(ctx, p, psn, false),
            Operation::Flush => self.exec_flush(ctx, p, psn, false),
            Operation::AtomicWrite => self.exec_atomic_write(ctx, p, psn),
            _ => self.exec_atomic(ctx, p, psn),
        }
    }

    /// Ends the message in progress after an out-of-sequence opcode: a SEND
    /// being received completes its receive WQE with REM_INV_REQ_ERR; a
    /// WRITE holds no WQE and is simply dropped.
    fn fail_message_in_progress(&mut self, ctx: &mut Ctx<'_>) {
        if let Some(InMessage::Send { .. }) = self.resp.current.take()
            && let Some((wr_id, _)) = self.recv_take(ctx)
        {
            let wc = Wc::new(wr_id, WcStatus::RemInvReqErr, WcOpcode::Recv, self.qpn);
            self.recv_advance(ctx);
            ctx.push_wc(self.init.recv_cq, wc, false);
        }
    }

    /// The receive WQE for the message arriving: the front of the QP's own
    /// queue, or one taken from the SRQ (copied into `srq_wqe` without
    /// allocating once its SGE list has grown) and held until the message
    /// ends. Taking from the SRQ may raise the limit event.
    fn recv_take(&mut self, ctx: &mut Ctx<'_>) -> Option<(u64, u64)> {
        let Some(s) = self.init.srq else {
            return self.rq.front().map(|w| (w.wr_id, w.length));
        };
        if !self.resp.srq_held {
            let q = ctx.srqs.get_mut(s.get() as usize)?.as_mut()?;
            let w = q.rq.front()?;
            let held = &mut self.resp.srq_wqe;
            held.wr_id = w.wr_id;
            held.length = w.length;
            held.sges.clear();
            held.sges.extend_from_slice(&w.sges);
            self.resp.srq_held = true;
            if q.advance() {
                ctx.events.push_back(AsyncEvent::SrqLimitReached(s));
            }
        }
        Some((self.resp.srq_wqe.wr_id, self.resp.srq_wqe.length))
    }

    /// Scatters `data` at message byte `offset` into the receive WQE of the
    /// message (borrowed in place: nothing is copied or allocated per packet).
    fn scatter_recv(&self, ctx: &Ctx<'_>, offset: u64, data: &[u8]) -> Result<(), crate::mr::AccessError> {
        let wqe = match self.init.srq {
            Some(_) => self.resp.srq_held.then_some(&self.resp.srq_wqe),
            None => self.rq.front(),
        };
        scatter(ctx, self.init.pd.get(), wqe.map_or(&[][..], |w| &w.sges[..]), offset, data)
    }

    /// The message's receive WQE is used up.
    fn recv_advance(&mut self, _ctx: &mut Ctx<'_>) {
        match self.init.srq {
            Some(_) => self.resp.srq_held = false,
            None => self.rq.advance(),
        }
    }

    /// No receive WQE: RC answers RNR NAK (the requester retries after the
    /// timer); UC drops the message.
    fn rnr(&mut self, ctx: &mut Ctx<'_>, psn: Psn) -> Verdict {
        if self.qp_type() == QpType::Rc {
            ctx.counters.send_rnr_err += 1;
            let msn = self.resp.msn;
            let timer = RnrTimer(self.attr.min_rnr_timer);
            self.queue_ack(ctx, psn, Syndrome::RnrNak { timer }, msn);
            Verdict::Done
        } else {
            self.resp.seq = RecvSeq::Dropping;
            self.resp.psn = psn.next();
            Verdict::Done
        }
    }

    fn exec_send(&mut self, ctx: &mut Ctx<'_>, p: &Packet<&[u8]>) -> Verdict {
        let psn = p.bth().psn();
        let info = p.info();
        let Some((wr_id, room)) = self.recv_take(ctx) else {
            return self.rnr(ctx, psn);
        };
        let offset = match self.resp.current {
            Some(InMessage::Send { offset }) => offset,
            _ => 0,
        };
        let data = p.payload();
        let end = offset + data.len() as u64;
        let status = if end > room {
            WcStatus::LocLenErr
        } else if self.scatter_recv(ctx, offset, data).is_err() {
            WcStatus::LocProtErr
        } else if let Some(i) = p.ieth()
            && ctx.mrs.invalidate(i.rkey(), self.init.pd.get()).is_err()
        {
            // SEND_WITH_INV of a key that cannot be invalidated: the data
            // landed, but the message is an invalid request (rxe
            // RESPST_ERR_INVALIDATE_RKEY: REM_INV_REQ_ERR on the receive).
            WcStatus::RemInvReqErr
        } else {
            WcStatus::Success
        };
        if status != WcStatus::Success {
            let wc = Wc::new(wr_id, status, WcOpcode::Recv, self.qpn);
            self.recv_advance(ctx);
            ctx.push_wc(self.init.recv_cq, wc, false);
            self.resp.current = None;
            return Verdict::Nak(if matches!(status, WcStatus::LocLenErr | WcStatus::RemInvReqErr) {
                NakCode::InvalidRequest
            } else {
                NakCode::RemoteOperationalError
            });
        }
        self.resp.psn = psn.next();
        if !info.ends_message() {
            self.resp.current = Some(InMessage::Send { offset: end });
        } else {
            self.resp.current = None;
            self.resp.msn = crate::seq24::add(self.resp.msn, 1);
            let mut wc = Wc::new(wr_id, WcStatus::Success, WcOpcode::Recv, self.qpn);
            wc.byte_len = end as u32;
            wc.src_qp = self.attr.dest_qp_num;
            if let Some(i) = p.immdt() {
                wc.imm_data = i.imm();
                wc.wc_flags = WcFlags::WITH_IMM;
            }
            if let Some(i) = p.ieth() {
                wc.imm_data = i.rkey();
                wc.wc_flags = WcFlags::WITH_INV;
            }
            self.recv_advance(ctx);
            ctx.counters.rdma_recvs += 1;
            ctx.push_wc(self.init.recv_cq, wc, p.bth().solicited());
        }
        self.ack_if_requested(ctx, p);
        Verdict::Done
    }

    fn exec_write(&mut self, ctx: &mut Ctx<'_>, p: &Packet<&[u8]>) -> Verdict {
        let psn = p.bth().psn();
        let info = p.info();
        // WRITE with immediate consumes a receive WQE: check first, so an RNR
        // NAK leaves nothing half done.
        if info.has_immediate() && self.recv_take(ctx).is_none() {
            return self.rnr(ctx, psn);
        }
        let (grant, remaining, total) = match (self.resp.current, p.reth()) {
            (None, Some(reth)) => {
                let len = u64::from(reth.dma_len());
                match self.remote_grant(ctx, &reth, AccessFlags::REMOTE_WRITE) {
                    Ok(g) => (g, len, len),
                    Err(v) => return v,
                }
            }
            (Some(InMessage::Write { grant, remaining }), None) => (Some(grant), remaining, 0),
            _ => return Verdict::Nak(NakCode::InvalidRequest),
        };
        let data = p.payload();
        let n = data.len() as u64;
        let mtu = self.mtu();
        let bad_len = n > remaining || (!info.ends_message() && n != mtu) || (info.ends_message() && n != remaining);
        if bad_len {
            return Verdict::Nak(NakCode::InvalidRequest);
        }
        let mut next = grant;
        if let Some(g) = grant
            && n > 0
        {
            if g.region.write(g.offset, data).is_err() {
                return Verdict::Nak(NakCode::RemoteAccessError);
            }
            next = Some(Grant { region: g.region, offset: g.offset + n });
        }
        self.resp.psn = psn.next();
        if !info.ends_message() {
            let Some(grant) = next else { return Verdict::Nak(NakCode::InvalidRequest) };
            self.resp.current = Some(InMessage::Write { grant, remaining: remaining - n });
            if total != 0 {
                self.resp.write_len = total;
            }
        } else {
            let len = if info.starts_message() { total } else { self.resp.write_len };
            self.resp.current = None;
            self.resp.msn = crate::seq24::add(self.resp.msn, 1);
            if let Some(i) = p.immdt()
                && let Some((wr_id, _)) = self.recv_take(ctx)
            {
                let mut wc = Wc::new(wr_id, WcStatus::Success, WcOpcode::RecvRdmaWithImm, self.qpn);
                wc.byte_len = len as u32;
                wc.imm_data = i.imm();
                wc.wc_flags = WcFlags::WITH_IMM;
                wc.src_qp = self.attr.dest_qp_num;
                self.recv_advance(ctx);
                ctx.push_wc(self.init.recv_cq, wc, p.bth().solicited());
            }
        }
        self.ack_if_requested(ctx, p);
        Verdict::Done
    }

    /// The memory a WRITE's or READ's RETH names, checked for `access`
    /// (key, PD, QP, bounds): `None` for a zero-length request, which
    /// names none; a refused check is a remote access error NAK.
    fn remote_grant(&self, ctx: &Ctx<'_>, reth: &Reth<&[u8]>, access: AccessFlags) -> Result<Option<Grant>, Verdict> {
        let len = u64::from(reth.dma_len());
        if len == 0 {
            return Ok(None);
        }
        match ctx.mrs.check_remote(reth.rkey(), self.init.pd.get(), self.qpn, reth.va(), len, access) {
            Ok(g) => Ok(Some(g)),
            Err(_) => Err(Verdict::Nak(NakCode::RemoteAccessError)),
        }
    }

    fn exec_read(&mut self, ctx: &mut Ctx<'_>, p: &Packet<&[u8]>, psn: Psn, duplicate: bool) -> Verdict {
        let Some(reth) = p.reth() else { return Verdict::Nak(NakCode::InvalidRequest) };
        let len = u64::from(reth.dma_len());
        // The QP must grant REMOTE_READ to every READ it serves, repeated
        // ones too (`duplicate` comes here without `execute`'s access
        // check). rxe answers a duplicate READ only from the resource of a
        // READ it executed, which passed that check; softroce executes the
        // repeated READ again, so it checks again: otherwise any PSN below
        // the expected one read memory through a QP whose
        // `qp_access_flags` refuse remote reads. (A duplicate refused here
        // is dropped, as rxe drops one it has no resource for.)
        if self.attr.max_dest_rd_atomic == 0 || !self.attr.qp_access_flags.contains(AccessFlags::REMOTE_READ) {
            return Verdict::Nak(NakCode::InvalidRequest);
        }
        let grant = match self.remote_grant(ctx, &reth, AccessFlags::REMOTE_READ) {
            Ok(g) => g,
            Err(v) => return v,
        };
        let npsn = len.div_ceil(self.mtu()).max(1) as u32;
        if duplicate && !self.repeat_read_in_range(psn, npsn, reth.rkey(), reth.va(), len) {
            ctx.counters.drop_invalid += 1;
            return Verdict::Done;
        }
        if duplicate {
            // A repeated READ supersedes the replies still queued for the
            // same request: serve the requester's current view only, or
            // every retry would add another full reply stream.
            let last = psn.add(npsn - 1);
            self.resp.responses.retain(|r| match *r {
                Response::Read { psn: p, last_psn: l, .. } => l != last && !(p.in_window(psn, npsn)),
                _ => true,
            });
        } else {
            let kind = ResourceKind::Read { rkey: reth.rkey(), va: reth.va(), len, last_psn: psn.add(npsn - 1) };
            self.accept_with_resource(Resource { psn, kind }, npsn);
        }
        // The MSN as this READ left it (a repeated READ: the current one,
        // as rxe answers duplicates); two READs queued back to back each
        // report their own (rxe sends MSN 1 then 2, never 2 twice).
        let msn = self.resp.msn;
        self.resp.responses.push_back(Response::Read {
            psn,
            last_psn: psn.add(npsn - 1),
            grant,
            remaining: len,
            started: false,
            msn,
        });
        Verdict::Done
    }

    /// Whether a repeated READ at `psn` (`npsn` response packets, `len`
    /// bytes at `va` under `rkey`) asks only for what was asked before: its
    /// responses must end before the next PSN expected (they are answers to
    /// PSNs already seen, never to ones the requester has not sent), and
    /// when the original READ's resource is kept, it must lie inside that
    /// READ, at PSNs and bytes alike (rxe checks the bytes; a re-request
    /// reaching past the READ's last PSN would give responses for PSNs of
    /// the requests after it). A READ whose resource was recycled is served
    /// again on the R_Key check alone, where rxe drops it.
    fn repeat_read_in_range(&self, psn: Psn, npsn: u32, rkey: u32, va: u64, len: u64) -> bool {
        let last = psn.add(npsn - 1);
        if !last.before(self.resp.psn) {
            return false;
        }
        let original = self.resp.resources.iter().find_map(|r| match r.kind {
            ResourceKind::Read { rkey, va, len, last_psn } if psn.in_window(r.psn, 1 << 23) && !psn.after(last_psn) => {
                Some((rkey, va, len, last_psn))
            }
            _ => None,
        });
        let Some((o_rkey, o_va, o_len, o_last)) = original else { return true };
        let inside = va >= o_va
            && va.checked_add(len).is_some_and(|end| o_va.checked_add(o_len).is_some_and(|o_end| end <= o_end));
        rkey == o_rkey && inside && !last.after(o_last)
    }

    fn exec_atomic(&mut self, ctx: &mut Ctx<'_>, p: &Packet<&[u8]>, psn: Psn) -> Verdict {
        let Some(a) = p.atomic_eth() else { return Verdict::Nak(NakCode::InvalidRequest) };
        if self.attr.max_dest_rd_atomic == 0 {
            return Verdict::Nak(NakCode::InvalidRequest);
        }
        if a.va() % 8 != 0 {
            return Verdict::Nak(NakCode::InvalidRequest);
        }
        let g =
            match ctx.mrs.check_remote(a.rkey(), self.init.pd.get(), self.qpn, a.va(), 8, AccessFlags::REMOTE_ATOMIC) {
                Ok(g) => g,
                Err(_) => return Verdict::Nak(NakCode::RemoteAccessError),
            };
        let r = match p.info().operation {
            Operation::CompareSwap => g.region.compare_swap(g.offset, a.compare(), a.swap_add()),
            _ => g.region.fetch_add(g.offset, a.swap_add()),
        };
        let Ok(orig) = r else { return Verdict::Nak(NakCode::InvalidRequest) };
        self.accept_with_resource(Resource { psn, kind: ResourceKind::Atomic { orig } }, 1);
        let msn = self.resp.msn;
        self.resp.responses.push_back(Response::Atomic { psn, orig, msn });
        Verdict::Done
    }

    /// FLUSH (IBA 1.5, opcode 0x1c: FETH + RETH, no payload). The QP must
    /// allow each placement type asked for (`IBV_ACCESS_FLUSH_GLOBAL` /
    /// `_PERSISTENT` in `qp_access_flags`, as rxe's `check_qp_attr_access`)
    /// and keep responder resources, else NAK invalid request; a reserved
    /// placement type or selectivity level is an invalid request too. Then
    /// the R_Key must grant the same on the range (`IBV_FLUSH_RANGE`) or
    /// just exist (`IBV_FLUSH_MR`: the whole region), else NAK remote access
    /// error. Executed, it is a memory fence ([`crate::mem::Region::flush`]):
    /// the requests before it, already executed in PSN order, are visible
    /// before its response leaves. The response is an RDMA READ response
    /// ONLY of zero length with the MSN after it (rxe
    /// `send_read_response_ack`), and a resource answers its duplicates.
    ///
    /// A repeated FLUSH (`duplicate`) whose resource was recycled runs again
    /// with every check (a fence may run twice); rxe drops it, leaving its
    /// requester to retry until it gives up.
    fn exec_flush(&mut self, ctx: &mut Ctx<'_>, p: &Packet<&[u8]>, psn: Psn, duplicate: bool) -> Verdict {
        let (Some(feth), Some(reth)) = (p.feth(), p.reth()) else { return Verdict::Nak(NakCode::InvalidRequest) };
        let f = crate::wr::Flush {
            placement: feth.placement_type(),
            selectivity: feth.selectivity_level(),
            len: reth.dma_len(),
        };
        if !f.is_valid() {
            return Verdict::Nak(NakCode::InvalidRequest);
        }
        let mut needed = AccessFlags::EMPTY;
        if f.placement & crate::wr::placement::GLOBAL != 0 {
            needed |= AccessFlags::FLUSH_GLOBAL;
        }
        if f.placement & crate::wr::placement::PERSISTENT != 0 {
            needed |= AccessFlags::FLUSH_PERSISTENT;
        }
        if self.attr.max_dest_rd_atomic == 0 || !self.attr.qp_access_flags.contains(needed) {
            return Verdict::Nak(NakCode::InvalidRequest);
        }
        let (pd, qpn) = (self.init.pd.get(), self.qpn);
        let checked = if f.selectivity == crate::wr::selectivity::REGION {
            ctx.mrs.check_remote_key(reth.rkey(), pd, qpn, needed)
        } else {
            let len = u64::from(f.len);
            ctx.mrs.check_remote(reth.rkey(), pd, qpn, reth.va(), len, needed).map(|g| (g, len))
        };
        let Ok((g, len)) = checked else { return Verdict::Nak(NakCode::RemoteAccessError) };
        if g.region.flush(g.offset, len).is_err() {
            return Verdict::Nak(NakCode::RemoteAccessError);
        }
        if !duplicate {
            self.accept_with_resource(Resource { psn, kind: ResourceKind::Placement }, 1);
        }
        self.queue_read_response_ack(psn);
        Verdict::Done
    }

    /// ATOMIC WRITE (IBA 1.5, opcode 0x1d: RETH + 8 bytes). The QP must
    /// allow remote writes and keep responder resources, else NAK invalid
    /// request; the R_Key must grant REMOTE_WRITE on the RETH's range, else
    /// NAK remote access error, before anything else is looked at; then the
    /// DMA length must be 8 and the target 8-byte aligned (IBA A19.4.2; rxe
    /// `RESPST_ERR_MISALIGNED_ATOMIC`), else NAK invalid request. The 8
    /// bytes land in one release store ([`crate::mem::Region::atomic_write`]);
    /// the response is an RDMA READ response ONLY of zero length, and a
    /// resource answers duplicates without storing again (a later WRITE may
    /// have changed the bytes since).
    fn exec_atomic_write(&mut self, ctx: &mut Ctx<'_>, p: &Packet<&[u8]>, psn: Psn) -> Verdict {
        let Some(reth) = p.reth() else { return Verdict::Nak(NakCode::InvalidRequest) };
        if self.attr.max_dest_rd_atomic == 0 {
            return Verdict::Nak(NakCode::InvalidRequest);
        }
        let len = u64::from(reth.dma_len());
        let g = match ctx.mrs.check_remote(
            reth.rkey(),
            self.init.pd.get(),
            self.qpn,
            reth.va(),
            len,
            AccessFlags::REMOTE_WRITE,
        ) {
            Ok(g) => g,
            Err(_) => return Verdict::Nak(NakCode::RemoteAccessError),
        };
        let Ok(value) = <[u8; 8]>::try_from(p.payload()) else { return Verdict::Nak(NakCode::InvalidRequest) };
        if len != 8 || g.region.atomic_write(g.offset, value).is_err() {
            return Verdict::Nak(NakCode::InvalidRequest);
        }
        self.accept_with_resource(Resource { psn, kind: ResourceKind::Placement }, 1);
        self.queue_read_response_ack(psn);
        Verdict::Done
    }

    /// Queues the answer to a FLUSH or ATOMIC WRITE at `psn`: an RDMA READ
    /// response ONLY without payload, carrying the current MSN.
    fn queue_read_response_ack(&mut self, psn: Psn) {
        let msn = self.resp.msn;
        self.resp.responses.push_back(Response::Read {
            psn,
            last_psn: psn,
            grant: None,
            remaining: 0,
            started: false,
            msn,
        });
    }

    /// A READ, atomic, FLUSH or ATOMIC WRITE executed: keep its resource
    /// (the oldest goes when `max_dest_rd_atomic` are held), expect the PSN
    /// after its `npsn` response packets, and count the message.
    fn accept_with_resource(&mut self, r: Resource, npsn: u32) {
        while self.resp.resources.len() >= usize::from(self.attr.max_dest_rd_atomic.max(1)) {
            self.resp.resources.pop_front();
        }
        self.resp.psn = r.psn.add(npsn);
        self.resp.resources.push_back(r);
        self.resp.msn = crate::seq24::add(self.resp.msn, 1);
    }

    /// A request with a PSN already seen: re-acknowledge SENDs and WRITEs,
    /// re-execute READs, replay atomics from the resource cache.
    fn duplicate(&mut self, ctx: &mut Ctx<'_>, p: &Packet<&[u8]>) {
        ctx.counters.duplicate_request += 1;
        let psn = p.bth().psn();
        match p.info().operation {
            Operation::RdmaReadRequest => {
                // A repeat the READ itself would refuse gets no NAK (the
                // PSN is behind: rxe drops it) but is counted.
                if let Verdict::Nak(_) = self.exec_read(ctx, p, psn, true) {
                    ctx.counters.drop_invalid += 1;
                }
            }
            Operation::CompareSwap | Operation::FetchAdd => {
                if let Some(orig) = self.resp.resources.iter().find_map(|r| match r.kind {
                    ResourceKind::Atomic { orig } if r.psn == psn => Some(orig),
                    _ => None,
                }) {
                    let msn = self.resp.msn;
                    self.resp.responses.push_back(Response::Atomic { psn, orig, msn });
                }
            }
            // FLUSH and ATOMIC WRITE: answered again from their resource,
            // not executed again (IBA oA19-14/15, as rxe). A FLUSH whose
            // resource is gone runs again (a fence is idempotent); an ATOMIC
            // WRITE without one is dropped, as atomics are: storing again
            // could undo a later write.
            Operation::Flush | Operation::AtomicWrite => {
                if self.resp.resources.iter().any(|r| r.psn == psn && r.kind == ResourceKind::Placement) {
                    self.queue_read_response_ack(psn);
                } else if p.info().operation == Operation::Flush {
                    let _ = self.exec_flush(ctx, p, psn, true);
                }
            }
            _ => {
                if p.bth().ack_req() {
                    // rxe answers with the last PSN it has and the current MSN.
                    let (last, msn) = (self.resp.psn.sub(1), self.resp.msn);
                    self.queue_ack(ctx, last, Syndrome::Ack { credits: Syndrome::CREDITS_INVALID }, msn);
                }
            }
        }
    }

    fn ack_if_requested(&mut self, ctx: &mut Ctx<'_>, p: &Packet<&[u8]>) {
        if self.qp_type() == QpType::Rc && p.bth().ack_req() {
            let msn = self.resp.msn;
            self.queue_ack(ctx, p.bth().psn(), Syndrome::Ack { credits: Syndrome::CREDITS_INVALID }, msn);
        }
    }

    /// Queues an ACK/NAK, coalescing with a plain ACK not yet sent (a
    /// sequence NAK acknowledges everything before its PSN too).
    fn queue_ack(&mut self, ctx: &mut Ctx<'_>, psn: Psn, syndrome: Syndrome, msn: u32) {
        if let Some(Response::Ack { syndrome: Syndrome::Ack { .. }, .. }) = self.resp.responses.back()
            && matches!(syndrome, Syndrome::Ack { .. } | Syndrome::Nak(NakCode::PsnSequenceError))
        {
            self.resp.responses.pop_back();
            ctx.counters.ack_deferred += 1;
        }
        self.resp.responses.push_back(Response::Ack { psn, syndrome, msn });
    }

    /// UD: check the Q_Key, take a receive WQE, write the GRH area and the payload.
    fn ud_receive(&mut self, ctx: &mut Ctx<'_>, p: &Packet<&[u8]>, origin: Origin) {
        let Some(deth) = p.deth() else { return };
        if deth.qkey() != self.attr.qkey {
            ctx.counters.drop_invalid += 1;
            return;
        }
        let Some((wr_id, room)) = self.recv_take(ctx) else {
            ctx.counters.drop_no_qp += 1;
            return;
        };
        let data = p.payload();
        let grh = grh_bytes(origin, data.len());
        let total = (GRH_LEN + data.len()) as u64;
        let status = if total > room {
            WcStatus::LocLenErr
        } else if self.scatter_recv(ctx, 0, &grh).is_err() || self.scatter_recv(ctx, GRH_LEN as u64, data).is_err() {
            WcStatus::LocProtErr
        } else {
            WcStatus::Success
        };
        let mut wc = Wc::new(wr_id, status, WcOpcode::Recv, self.qpn);
        if status == WcStatus::Success {
            wc.byte_len = total as u32;
            wc.src_qp = Qpn::from(deth.src_qpn());
            // RoCE has no SL. Like mlx5 (not rxe, which reports 0), report
            // the network header type there: 2 for IPv4. UCX 1.13's UD
            // transport finds the IPv4 header in the GRH area by it.
            wc.sl = if origin.src.is_ipv4() { ROCE_L3_IPV4 } else { 0 };
            wc.wc_flags = WcFlags::GRH;
            if let Some(i) = p.immdt() {
                wc.imm_data = i.imm();
                wc.wc_flags = wc.wc_flags | WcFlags::WITH_IMM;
            }
            ctx.counters.rdma_recvs += 1;
        }
        self.recv_advance(ctx);
        ctx.push_wc(self.init.recv_cq, wc, p.bth().solicited());
    }

    /// The end-to-end credits a positive ACK carries (IBTA 9.7.5.1.5,
    /// 9.7.7.2): the receive WQEs posted beyond the message its MSN names
    /// (the one a SEND in progress fills counts: it is that MSN's next).
    /// A QP on an SRQ has no credits of its own: "invalid", as rxe sends
    /// for every QP. Read when the ACK leaves, so it is never older than
    /// its MSN.
    fn recv_credits(&self) -> u8 {
        match self.init.srq {
            Some(_) => Syndrome::CREDITS_INVALID,
            None => Syndrome::credits_for(self.rq.len()),
        }
    }

    /// A receive WQE was posted: if the last ACK or NAK left the requester
    /// without credits, tell it, by a repeat of the ACK of the last PSN
    /// received with the credits of now (a duplicate ACK, which IBTA
    /// requesters and rxe ignore but for its credits). Without it a
    /// softroce requester would have to probe, and a probe that meets an
    /// empty queue fails a QP with `rnr_retry` 0. Returns whether one was
    /// queued.
    pub(crate) fn announce_credits(&mut self) -> bool {
        let active = matches!(self.state(), QpState::Rtr | QpState::Rts | QpState::Sqd);
        if self.qp_type() != QpType::Rc
            || !active
            || !self.resp.credits_exhausted
            || self.init.srq.is_some()
            || !self.resp.responses.is_empty()
        {
            return false;
        }
        self.resp.credits_exhausted = false;
        let (psn, msn) = (self.resp.psn.sub(1), self.resp.msn);
        self.resp.responses.push_back(Response::Ack { psn, syndrome: Syndrome::Ack { credits: 0 }, msn });
        self.resp.announced = Some(psn);
        true
    }

    /// Whether the responder has something to send.
    pub(crate) fn responder_has_work(&self) -> bool {
        !self.resp.responses.is_empty()
    }

    /// Whether the responder holds only a positive ACK that has not yet
    /// waited, while the requester has work: the device then sends one
    /// request packet first and the ACK right after it, so the ACK can leave
    /// in the same GSO send as its (shorter or equal) last segment: in a
    /// ping-pong the reply and the ACK of the request cost one datagram
    /// send. The ACK waits for one packet at most.
    pub(crate) fn ack_may_follow_request(&self) -> bool {
        !self.resp.ack_waited
            && self.requester_has_work()
            && self.resp.responses.len() == 1
            && matches!(self.resp.responses.front(), Some(Response::Ack { syndrome: Syndrome::Ack { .. }, .. }))
    }

    /// Writes the next response packet into `buf`.
    pub(crate) fn responder_poll(&mut self, ctx: &mut Ctx<'_>, buf: &mut [u8]) -> Option<Outgoing> {
        let mtu = self.mtu();
        let front = *self.resp.responses.front()?;
        let dest_qpn = self.attr.dest_qp_num.get();
        let bth = |opcode, psn| BthRepr::new(opcode, dest_qpn, psn);
        let ack = Syndrome::Ack { credits: self.recv_credits() };
        let (repr, payload): (PacketRepr, Option<(Grant, usize)>) = match front {
            Response::Cnp => {
                self.resp.responses.pop_front();
                return self.cnp_poll(ctx, buf);
            }
            Response::Ack { psn, syndrome, msn } => {
                self.resp.responses.pop_front();
                self.resp.ack_waited = false;
                if self.resp.announced.take() == Some(psn) {
                    ctx.counters.credit_updates += 1;
                }
                // Credits as of now, not of when the ACK was queued.
                let syndrome = if let Syndrome::Ack { .. } = syndrome { ack } else { syndrome };
                match syndrome {
                    Syndrome::Ack { credits } => self.resp.credits_exhausted = credits == 0,
                    Syndrome::RnrNak { .. } => self.resp.credits_exhausted = true,
                    _ => {}
                }
                let ext = ExtRepr { aeth: Some(AethRepr { syndrome, msn }), ..Default::default() };
                (PacketRepr { bth: bth(Opcode::RC_ACKNOWLEDGE, psn), ext }, None)
            }
            Response::Atomic { psn, orig, msn } => {
                self.resp.responses.pop_front();
                let ext = ExtRepr {
                    aeth: Some(AethRepr { syndrome: ack, msn }),
                    atomic_ack_eth: Some(AtomicAckEthRepr { orig }),
                    ..Default::default()
                };
                (PacketRepr { bth: bth(Opcode::RC_ATOMIC_ACKNOWLEDGE, psn), ext }, None)
            }
            Response::Read { psn, last_psn, grant, remaining, started, msn } => {
                let n = remaining.min(mtu);
                let last = psn == last_psn;
                let op = match (started, last) {
                    (false, true) => Opcode::RC_RDMA_READ_RESPONSE_ONLY,
                    (false, false) => Opcode::RC_RDMA_READ_RESPONSE_FIRST,
                    (true, false) => Opcode::RC_RDMA_READ_RESPONSE_MIDDLE,
                    (true, true) => Opcode::RC_RDMA_READ_RESPONSE_LAST,
                };
                let aeth = (op != Opcode::RC_RDMA_READ_RESPONSE_MIDDLE).then_some(AethRepr { syndrome: ack, msn });
                if last {
                    self.resp.responses.pop_front();
                } else if let Some(Response::Read { psn: p, remaining: r, grant: g, started: s, .. }) =
                    self.resp.responses.front_mut()
                {
                    *p = psn.next();
                    *r = remaining - n;
                    *g = grant.map(|g| Grant { region: g.region, offset: g.offset + n });
                    *s = true;
                }
                let ext = ExtRepr { aeth, ..Default::default() };
                (PacketRepr { bth: bth(op, psn), ext }, grant.filter(|_| n > 0).map(|g| (g, n as usize)))
            }
        };
        let plen = payload.map_or(0, |(_, n)| n);
        let hlen = repr.emit_headers(buf, plen).ok()?;
        let total = hlen + plen + pad_for(plen);
        if buf.len() < total + roce_wire::ICRC_LEN {
            return None;
        }
        let mut head_len = total;
        match (payload, ctx.gather.as_mut()) {
            (Some((g, n)), Some(sink)) if n > crate::outgoing::SMALL_PAYLOAD => {
                // The grant was checked when the READ arrived and its memory
                // outlives it (Device::memory_in_use).
                sink.push(crate::ctx::Piece { region: g.region, offset: g.offset, len: n });
                head_len = hlen;
            }
            (Some((g, n)), _) => {
                if g.region.read(g.offset, &mut buf[hlen..hlen + n]).is_err() {
                    self.resp.responses.clear();
                    return None;
                }
                buf[hlen + plen..total].fill(0);
            }
            (None, _) => buf[hlen + plen..total].fill(0),
        }
        ctx.counters.sent_pkts += 1;
        Some(Outgoing { len: total, head_len, dst: self.attr.ah_attr.dest, sgid_index: self.attr.ah_attr.sgid_index })
    }
}

impl Qp {
    /// An RC packet of this QP arrived with ECN CE in its IP header: the
    /// DCQCN notification point (RoCEv2 Annex A17.9.3) answers with a CNP to
    /// the peer QP, whose requester then cuts its window ([`crate::cc`]),
    /// at most one per [`crate::cc::CNP_INTERVAL`] however many marked
    /// packets arrive. rxe sends none; RoCE NICs do.
    pub(crate) fn congestion_experienced(&mut self, ctx: &mut Ctx<'_>) {
        ctx.counters.np_ecn_marked_roce_packets += 1;
        if self.qp_type() != QpType::Rc || self.resp.cnp_after.is_some_and(|t| ctx.now < t) {
            return;
        }
        self.resp.cnp_after = Some(ctx.now + crate::cc::CNP_INTERVAL);
        self.resp.responses.push_back(Response::Cnp);
    }

    /// Writes a CNP: a BTH for the peer QP with BECN set and PSN 0, then 16
    /// reserved bytes (Annex A17.9.3, as RoCE NICs send it).
    fn cnp_poll(&mut self, ctx: &mut Ctx<'_>, buf: &mut [u8]) -> Option<Outgoing> {
        let bth = BthRepr { becn: true, ..BthRepr::new(Opcode::CNP, self.attr.dest_qp_num.get(), Psn::ZERO) };
        let repr = PacketRepr { bth, ext: ExtRepr::default() };
        let hlen = repr.emit_headers(buf, CNP_RESERVED).ok()?;
        let total = hlen + CNP_RESERVED;
        if buf.len() < total + roce_wire::ICRC_LEN {
            return None;
        }
        buf[hlen..total].fill(0);
        ctx.counters.np_cnp_sent += 1;
        ctx.counters.sent_pkts += 1;
        Some(Outgoing {
            len: total,
            head_len: total,
            dst: self.attr.ah_attr.dest,
            sgid_index: self.attr.ah_attr.sgid_index,
        })
    }
}

/// The reserved bytes after a CNP's BTH.
const CNP_RESERVED: usize = 16;

/// The 40-byte GRH area of a UD receive: for IPv4 the IPv4 header sits in
/// bytes 20..40 (rdma-core's convention), for IPv6 the IPv6 header fills it.
fn grh_bytes(o: Origin, payload_len: usize) -> [u8; GRH_LEN] {
    let mut g = [0u8; GRH_LEN];
    let udp_len = 8 + 12 + 8 + payload_len + 4;
    match (o.src, o.dst) {
        (IpAddr::V4(s), IpAddr::V4(d)) => {
            let h = &mut g[20..];
            h[0] = 0x45;
            h[2..4].copy_from_slice(&((20 + udp_len) as u16).to_be_bytes());
            h[6] = 0x40;
            h[8] = 64;
            h[9] = 17;
            h[12..16].copy_from_slice(&s.octets());
            h[16..20].copy_from_slice(&d.octets());
        }
        (s, d) => {
            let to6 = |a: IpAddr| match a {
                IpAddr::V4(v) => v.to_ipv6_mapped(),
                IpAddr::V6(v) => v,
            };
            g[0] = 0x60;
            g[4..6].copy_from_slice(&(udp_len as u16).to_be_bytes());
            g[6] = 17;
            g[7] = 64;
            g[8..24].copy_from_slice(&to6(s).octets());
            g[24..40].copy_from_slice(&to6(d).octets());
        }
    }
    g
}
