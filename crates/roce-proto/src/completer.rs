//! The completer (rxe `rxe_comp.c`): reads ACKs, NAKs, READ responses and
//! atomic ACKs, retires WQEs in order, and decides on retransmission when
//! the timer expires or the responder NAKs.

use roce_wire::{NakCode, Packet, Psn, Syndrome};

use crate::ctx::Ctx;
use crate::qp::{Credits, Qp};
use crate::queue::WqeState;
use crate::requester::msn_after;
use crate::sges::scatter;
use crate::verbs::{QpState, WcStatus, WrOpcode};

impl Qp {
    /// Handles a response packet (ACK, READ response, ATOMIC ACK) for this QP.
    pub(crate) fn completer_handle(&mut self, ctx: &mut Ctx<'_>, p: &Packet<&[u8]>) {
        if !matches!(self.state(), QpState::Rts | QpState::Sqd) {
            ctx.counters.drop_invalid += 1;
            return;
        }
        let psn = p.bth().psn();
        // Responses to PSNs never sent, or long acknowledged, are stale.
        if !psn.before(self.req.sent_psn) || psn.before(self.comp.psn.sub(1)) {
            ctx.counters.drop_invalid += 1;
            return;
        }
        let op = p.bth().opcode();
        let aeth = p.aeth().map(|a| a.syndrome());
        if let Some(a) = p.aeth()
            && let Syndrome::Ack { credits } = a.syndrome()
        {
            self.take_credits(ctx, a.msn(), credits);
        }
        match aeth {
            Some(Syndrome::Ack { .. }) | None => {}
            Some(Syndrome::RnrNak { timer }) => return self.on_rnr_nak(ctx, psn, timer),
            Some(Syndrome::Nak(code)) => return self.on_nak(ctx, psn, code),
            Some(Syndrome::Reserved(_)) => {
                ctx.counters.drop_invalid += 1;
                return;
            }
        }
        match op {
            roce_wire::Opcode::RC_ACKNOWLEDGE => self.on_ack(ctx, psn),
            roce_wire::Opcode::RC_ATOMIC_ACKNOWLEDGE => {
                let orig = p.atomic_ack_eth().map_or(0, |a| a.orig());
                self.on_atomic_ack(ctx, psn, orig);
            }
            _ => self.on_read_response(ctx, p),
        }
    }

    /// The responder's end-to-end credits (IBTA 9.7.7.2): the limit moves to
    /// its MSN plus the receive WQEs it has, never back; "invalid" (rxe, an
    /// SRQ) lifts it, as rdmavt does.
    fn take_credits(&mut self, ctx: &mut Ctx<'_>, msn: u32, code: u8) {
        if msn_after(msn, self.req.sent_ssn) {
            return;
        }
        let before = self.req.credits;
        self.req.credits = match (Syndrome::credit_count(code), self.req.credits) {
            (None, _) | (_, Credits::Unlimited) => Credits::Unlimited,
            (Some(n), Credits::Unknown) => Credits::Limit(crate::seq24::add(msn, n)),
            (Some(n), Credits::Limit(lsn)) => {
                let new = crate::seq24::add(msn, n);
                Credits::Limit(if msn_after(new, lsn) { new } else { lsn })
            }
        };
        if self.req.credits != before && self.req.probe_at.take().is_some() {
            // An update while a probe waited (nothing was in flight): the
            // responder announces credits; the SEND goes now.
            self.req.credit_updates = Some(true);
            self.set_rnr_until(ctx, None);
        }
        if std::mem::take(&mut self.req.blind_probe) && self.req.credit_updates.is_none() {
            // The probe sent after waiting in vain found a receive WQE: the
            // responder had one and said nothing.
            self.req.credit_updates = Some(false);
        }
    }

    /// Positive ACK of every request up to `psn`: retire SENDs and WRITEs
    /// that ended at or before it. A READ or atomic still waiting for its
    /// response inside that range means the response was lost: retry it.
    fn on_ack(&mut self, ctx: &mut Ctx<'_>, psn: Psn) {
        let mut i = self.sq.consumer;
        while i < self.sq.high {
            let w = self.sq.get(i);
            if w.first_psn.after(psn) {
                break;
            }
            if w.is_read_or_atomic() {
                // Implied NAK: the responder acknowledged past a READ/atomic
                // whose response never arrived. Retire what the ACK covers
                // before it, then go back to it.
                self.advance_comp_psn(ctx, w.first_psn);
                self.complete_done(ctx);
                return self.retry(ctx, true);
            }
            if w.last_psn.after(psn) {
                break;
            }
            self.sq.get_mut(i).state = WqeState::Done;
            i += 1;
        }
        self.advance_comp_psn(ctx, psn.next());
        self.complete_done(ctx);
    }

    fn on_atomic_ack(&mut self, ctx: &mut Ctx<'_>, psn: Psn, orig: u64) {
        self.retire_before(ctx, psn);
        let i = self.sq.consumer;
        if i >= self.sq.high {
            return;
        }
        let w = self.sq.get(i);
        if !w.is_atomic() || w.first_psn != psn || w.state == WqeState::Done {
            ctx.counters.drop_invalid += 1;
            return;
        }
        let status = match scatter(ctx, self.init.pd.get(), &w.sges, 0, &orig.to_ne_bytes()) {
            Ok(()) => WcStatus::Success,
            Err(_) => WcStatus::LocProtErr,
        };
        self.finish_wqe(ctx, i, status);
        self.progress(ctx, psn.next());
        self.complete_done(ctx);
    }

    fn on_read_response(&mut self, ctx: &mut Ctx<'_>, p: &Packet<&[u8]>) {
        let psn = p.bth().psn();
        if p.aeth().is_some() {
            // FIRST, LAST and ONLY acknowledge everything before them.
            self.retire_before(ctx, psn);
        }
        let i = self.sq.consumer;
        if i >= self.sq.high {
            return;
        }
        let w = self.sq.get(i);
        if w.is_placement() {
            return self.on_placement_response(ctx, p, i);
        }
        if w.opcode != WrOpcode::RdmaRead || w.state == WqeState::Done || !psn.in_window(w.first_psn, 1 << 23) {
            ctx.counters.drop_invalid += 1;
            return;
        }
        if psn != self.comp.psn {
            if psn.after(self.comp.psn) {
                // A response packet went missing: ask again from the gap.
                return self.retry(ctx, true);
            }
            // A duplicate response: nothing to do.
            return;
        }
        let mtu = self.mtu();
        let offset = u64::from(w.first_psn.distance_to(psn) as u32) * mtu;
        let data = p.payload();
        let info = p.info();
        let end = offset + data.len() as u64;
        let last = info.ends_message();
        // FIRST and MIDDLE carry one MTU and leave bytes for a LAST; a LAST
        // or ONLY ends at the READ's length. Anything else is an opcode or
        // size this READ cannot have (IBA 9.9.2.4: BAD_RESP_ERR); a MIDDLE
        // that filled the READ would leave it waiting for a LAST at a PSN
        // the requester never sent.
        let bad_size = if last { end != w.length } else { data.len() as u64 != mtu || end >= w.length };
        if bad_size {
            return self.fail_front(ctx, WcStatus::BadRespErr);
        }
        if scatter(ctx, self.init.pd.get(), &w.sges, offset, data).is_err() {
            return self.fail_front(ctx, WcStatus::LocProtErr);
        }
        self.progress(ctx, psn.next());
        if last {
            self.finish_wqe(ctx, i, WcStatus::Success);
            self.complete_done(ctx);
        }
    }

    /// The answer to the FLUSH or ATOMIC WRITE at the front, WQE `i`: an
    /// RDMA READ response ONLY of zero length with its PSN (IBA 1.5; rxe
    /// `send_read_response_ack`). Its AETH acknowledged everything before.
    /// A response with data, or a FIRST/MIDDLE/LAST, is not one the
    /// responder may send: BAD_RESP_ERR. One for another PSN is stale (a
    /// duplicate) or acknowledges past this WQE, which then needs no answer
    /// of its own: `retire_before` retired it already.
    fn on_placement_response(&mut self, ctx: &mut Ctx<'_>, p: &Packet<&[u8]>, i: u64) {
        let psn = p.bth().psn();
        let w = self.sq.get(i);
        if w.state == WqeState::Done || psn != w.first_psn {
            ctx.counters.drop_invalid += 1;
            return;
        }
        if p.bth().opcode() != roce_wire::Opcode::RC_RDMA_READ_RESPONSE_ONLY || !p.payload().is_empty() {
            return self.fail_front(ctx, WcStatus::BadRespErr);
        }
        self.finish_wqe(ctx, i, WcStatus::Success);
        self.progress(ctx, psn.next());
        self.complete_done(ctx);
    }

    /// Retires SEND/WRITE WQEs that ended before `psn` (an AETH on a
    /// response implicitly acknowledges them).
    fn retire_before(&mut self, ctx: &mut Ctx<'_>, psn: Psn) {
        let mut i = self.sq.consumer;
        while i < self.sq.high {
            let w = self.sq.get(i);
            if w.is_read_or_atomic() || !w.last_psn.before(psn) {
                break;
            }
            self.sq.get_mut(i).state = WqeState::Done;
            i += 1;
        }
        if i > self.sq.consumer {
            let last = self.sq.get(i - 1).last_psn;
            self.advance_comp_psn(ctx, last.next());
            self.complete_done(ctx);
        }
    }

    fn finish_wqe(&mut self, _ctx: &mut Ctx<'_>, i: u64, status: WcStatus) {
        let w = self.sq.get_mut(i);
        w.state = WqeState::Done;
        w.status = status;
    }

    /// The oldest WQE fails with `status` and the QP goes to ERR.
    fn fail_front(&mut self, ctx: &mut Ctx<'_>, status: WcStatus) {
        let i = self.sq.consumer;
        if i < self.sq.producer {
            self.finish_wqe(ctx, i, status);
            self.complete_done(ctx);
        }
        self.enter_error(ctx);
    }

    /// Progress reported by an ACK or NAK: move the oldest unacknowledged PSN
    /// forward, but never past a READ or atomic that still waits for its
    /// response (an ACK beyond it means the response was lost, and the
    /// retransmission must start there, at the same PSNs).
    fn advance_comp_psn(&mut self, ctx: &mut Ctx<'_>, psn: Psn) {
        let mut target = psn;
        let i = self.sq.consumer;
        if i < self.sq.high {
            let w = self.sq.get(i);
            if w.is_read_or_atomic() && w.state != WqeState::Done {
                let limit = if self.comp.psn.in_window(w.first_psn, 1 << 23) && !self.comp.psn.after(w.last_psn) {
                    self.comp.psn
                } else {
                    w.first_psn
                };
                if target.after(limit) {
                    target = limit;
                }
            }
        }
        self.progress(ctx, target);
    }

    /// Moves the oldest unacknowledged PSN to `psn` if that is forward,
    /// restores the retry budgets, and restarts (or stops) the retransmit timer.
    fn progress(&mut self, ctx: &mut Ctx<'_>, psn: Psn) {
        if psn.after(self.comp.psn) {
            // Acknowledged past what a rewind has sent again: the responder
            // had what followed the gap. After a sequence NAK that means it
            // keeps requests ahead of a gap (a rxe responder drops them, so
            // only what was sent again could be acknowledged).
            let overtook = psn.after(self.req.psn);
            if overtook && self.comp.started_retry {
                self.comp.peer_keeps = true;
            }
            let acked = self.comp.psn.distance_to(psn) as u32;
            self.comp.psn = psn;
            self.comp.retry_left = self.attr.retry_cnt;
            self.comp.rnr_left = self.attr.rnr_retry;
            self.comp.started_retry = false;
            self.comp.retry_epoch = Some(ctx.now);
            self.comp.probes = 0;
            self.comp.cc.on_progress(ctx.now, psn, acked);
            if overtook {
                ctx.counters.resends_skipped += 1;
                self.rewind_to(psn);
            }
        }
        if self.comp.psn == self.req.psn {
            self.set_retransmit_timer(ctx, None);
        } else {
            self.restart_retransmit_timer(ctx);
        }
    }

    fn on_rnr_nak(&mut self, ctx: &mut Ctx<'_>, psn: Psn, timer: roce_wire::RnrTimer) {
        ctx.counters.rcvd_rnr_err += 1;
        self.req.blind_probe = false;
        self.retire_before(ctx, psn);
        if self.comp.psn != psn {
            self.advance_comp_psn(ctx, psn);
        }
        if self.attr.rnr_retry != 7 {
            if self.comp.rnr_left == 0 {
                ctx.counters.retry_rnr_exceeded_err += 1;
                return self.fail_front(ctx, WcStatus::RnrRetryExcErr);
            }
            self.comp.rnr_left -= 1;
        }
        self.rewind_to(self.comp.psn);
        self.set_retransmit_timer(ctx, None);
        self.set_rnr_until(ctx, Some(ctx.now + timer.duration()));
    }

    fn on_nak(&mut self, ctx: &mut Ctx<'_>, psn: Psn, code: NakCode) {
        match code {
            NakCode::PsnSequenceError => {
                ctx.counters.rcvd_seq_err += 1;
                // Everything before the PSN the responder expects arrived.
                self.retire_before(ctx, psn);
                self.advance_comp_psn(ctx, psn);
                self.retry(ctx, true);
            }
            NakCode::InvalidRequest => {
                self.retire_before(ctx, psn);
                self.fail_front(ctx, WcStatus::RemInvReqErr)
            }
            NakCode::RemoteAccessError => {
                self.retire_before(ctx, psn);
                self.fail_front(ctx, WcStatus::RemAccessErr)
            }
            NakCode::RemoteOperationalError | NakCode::InvalidRdRequest | NakCode::Reserved(_) => {
                self.retire_before(ctx, psn);
                self.fail_front(ctx, WcStatus::RemOpErr)
            }
        }
    }

    /// Retransmit from the oldest unacknowledged PSN. It spends one retry
    /// when a whole local ACK timeout has passed without progress since the
    /// last one spent (every retry, with `timeout` 0); with none left the
    /// oldest WQE fails with `RETRY_EXC_ERR`. The congestion window reacts.
    fn retry(&mut self, ctx: &mut Ctx<'_>, from_nak: bool) {
        if from_nak && self.comp.started_retry {
            return;
        }
        let counts = match (crate::qp::ack_timeout(self.attr.timeout), self.comp.retry_epoch) {
            (Some(full), Some(epoch)) => ctx.now.saturating_duration_since(epoch) >= full,
            _ => true,
        };
        if counts {
            if self.comp.retry_left == 0 {
                ctx.counters.retry_exceeded_err += 1;
                return self.fail_front(ctx, WcStatus::RetryExcErr);
            }
            self.comp.retry_left -= 1;
            self.comp.retry_epoch = Some(ctx.now);
        }
        if from_nak {
            self.comp.cc.on_loss(ctx.now, self.req.sent_psn);
        } else {
            self.comp.cc.on_timeout(ctx.now);
        }
        self.comp.started_retry = from_nak;
        ctx.counters.completer_retry_err += 1;
        let hole = self.comp.psn;
        let next_to_last = from_nak && self.comp.last_hole == Some(hole.sub(1));
        self.comp.hole_streak = if next_to_last { self.comp.hole_streak.saturating_add(1) } else { 0 };
        if from_nak && self.comp.peer_keeps && self.comp.hole_streak < 2 && self.hole_resendable(hole) {
            // The responder keeps what follows the gap: only the hole goes again.
            self.req.hole = Some(hole);
        } else {
            if self.comp.hole_streak >= 2 {
                // Three holes in a row, each NAKed right after the last
                // resent: a responder that does not keep after all (or a
                // burst of losses). Back N, and learn again.
                self.comp.peer_keeps = false;
                self.comp.hole_streak = 0;
            }
            self.rewind_to(hole);
        }
        self.restart_retransmit_timer(ctx);
    }

    /// Whether the packet at `psn` can be sent again alone: a SEND or
    /// WRITE packet sent before and not acknowledged. A READ or atomic is
    /// asked again by a rewind (its response restarts from there).
    pub(crate) fn hole_resendable(&self, psn: Psn) -> bool {
        if psn.before(self.comp.psn) || !psn.before(self.req.psn) {
            return false;
        }
        self.wqe_at(psn).is_some_and(|i| {
            let w = self.sq.get(i);
            !w.takes_rd_atomic() && !w.is_local() && w.state != WqeState::Done
        })
    }

    /// The started WQE whose PSNs include `psn`.
    pub(crate) fn wqe_at(&self, psn: Psn) -> Option<u64> {
        (self.sq.consumer..self.sq.producer).take_while(|&i| self.sq.get(i).psns_assigned).find(|&i| {
            let w = self.sq.get(i);
            psn.in_window(w.first_psn, 1 << 23) && !psn.after(w.last_psn)
        })
    }

    /// The retransmit timer expired: first the tail probe, then a retry.
    pub(crate) fn completer_timeout(&mut self, ctx: &mut Ctx<'_>) {
        self.set_retransmit_timer(ctx, None);
        if self.comp.psn == self.req.psn || self.state() != QpState::Rts {
            return;
        }
        if self.comp.probes < self.max_probes() && self.comp.cc.pto(ctx.now).is_some() {
            return self.probe(ctx);
        }
        self.retry(ctx, false);
    }

    /// The tail loss probe (RFC 8985): no answer came for a while, so the
    /// last packet sent goes again, asking for an ACK. If it was lost (the
    /// tail of a message or of the window: nothing behind it makes the
    /// responder NAK), the responder now takes it; if its ACK was lost, the
    /// duplicate draws another; if something before it is missing, the
    /// responder NAKs. A probe costs one packet, a timeout a window, so it
    /// may come early: neither the window nor the retry count changes. A
    /// READ or atomic is asked again whole (a partial READ re-request would
    /// answer from the middle).
    fn probe(&mut self, ctx: &mut Ctx<'_>) {
        self.comp.probes += 1;
        if self.comp.peer_keeps && self.hole_resendable(self.comp.psn) {
            // A responder that keeps names one gap once: if that NAK or
            // the hole resent for it went missing, it will not name it
            // again, and the last packet would draw no answer. The oldest
            // unacknowledged packet fills the gap if it is the hole, or
            // draws an ACK that shows where the gap is (the next probe's).
            ctx.counters.tail_probes += 1;
            self.req.hole = Some(self.comp.psn);
            return self.restart_retransmit_timer(ctx);
        }
        // (A response that overtook a rewind leaves nothing to probe behind
        // the oldest unacknowledged PSN.)
        let mut psn = if self.comp.psn.before(self.req.psn) { self.req.psn.sub(1) } else { self.comp.psn };
        if let Some(w) = self.wqe_at(psn).map(|i| self.sq.get(i))
            && w.is_read_or_atomic()
        {
            psn = w.first_psn;
        }
        ctx.counters.tail_probes += 1;
        self.rewind_to(psn);
        self.restart_retransmit_timer(ctx);
    }
}
