//! Service ID resolution (IBTA 12.11, SIDR_REQ and SIDR_REP): how a UD
//! client learns the QPN and Q_Key behind a service ID (rdma_cm's
//! `RDMA_PS_UDP` ids). There is no connection and no state table: an active
//! request waits for its SIDR_REP and is resent on Linux's timer, and a
//! passive one waits for the consumer's answer. As Linux's `ib_cm` does:
//! - a SIDR_REQ for a service nobody listens on gets SIDR_REP status 1;
//! - a duplicate SIDR_REQ (same peer and request ID) is dropped while the
//!   consumer has not answered; once it has, the same request is new again;
//! - destroying a request not answered yet sends SIDR_REP status 2 (reject);
//! - an active request whose retries run out ends in `Unreachable`.

use std::net::IpAddr;
use std::time::{Duration, Instant};

use super::{Cm, CmError, CmEvent, CommId, Transmit};
use crate::wire::sidr_rep::PRIVATE_DATA_LEN as REP_PRIVATE_DATA_LEN;
use crate::wire::{CmMad, SidrRepRepr, SidrReqRepr, SidrStatus, kernel_tid};

/// What `sidr_connect` needs beyond the SIDR_REQ itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SidrParams {
    /// The local address (GID).
    pub local: IpAddr,
    /// The server's address (GID).
    pub peer: IpAddr,
    /// The SIDR_REQ to send; its request ID is filled in.
    pub req: SidrReqRepr,
    /// Time between tries (rdma_cm: `1 << (20 - 8)` ms, 4,096 ms).
    pub timeout: Duration,
    /// Resends after the first (rdma_cm: 15).
    pub max_retries: u8,
}

/// The consumer's answer to a SIDR_REQ.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SidrAnswer {
    /// Success, or why not.
    pub status: SidrStatus,
    /// The UD QP to send to.
    pub qpn: u32,
    /// The Q_Key to send with.
    pub qkey: u32,
    /// Private data of the SIDR_REP.
    pub private_data: [u8; REP_PRIVATE_DATA_LEN],
}

/// One SIDR exchange.
pub(super) enum Sidr {
    /// This side's SIDR_REQ, resent every `period` while `retries` last.
    Sent { local: IpAddr, peer: IpAddr, mad: Box<CmMad>, period: Duration, retries: u8, timer: Instant },
    /// A peer's SIDR_REQ handed to the consumer.
    Received { local: IpAddr, peer: IpAddr, request_id: u32, service_id: u64, tid: u64 },
}

impl Cm {
    /// Sends a SIDR_REQ; the answer comes as [`CmEvent::SidrRepReceived`]
    /// or, once the retries run out, [`CmEvent::Unreachable`].
    pub fn sidr_connect(&mut self, now: Instant, p: SidrParams) -> CommId {
        let id = self.new_comm_id();
        let mut req = p.req;
        req.request_id = id;
        let mad = CmMad::new(kernel_tid(self.config.tid_hi, id), req);
        self.stats.sent += 1;
        self.transmits.push_back(Transmit { from: p.local, to: p.peer, mad });
        let sent = Sidr::Sent {
            local: p.local,
            peer: p.peer,
            mad: Box::new(mad),
            period: p.timeout,
            retries: p.max_retries,
            timer: now + p.timeout,
        };
        self.sidr.insert(id, sent);
        CommId(id)
    }

    /// Answers the SIDR_REQ of [`CmEvent::SidrReqReceived`] `id`.
    pub fn sidr_reply(&mut self, id: CommId, answer: SidrAnswer) -> Result<(), CmError> {
        match self.sidr.get(&id.0) {
            Some(Sidr::Received { .. }) => {}
            _ => return Err(CmError::UnknownId(id)),
        }
        let Some(Sidr::Received { local, peer, request_id, service_id, tid }) = self.sidr.remove(&id.0) else {
            unreachable!("matched above")
        };
        let mut rep = SidrRepRepr::new(request_id, answer.status, answer.qpn, service_id, answer.qkey);
        rep.private_data = answer.private_data;
        self.stats.sent += 1;
        self.transmits.push_back(Transmit { from: local, to: peer, mad: CmMad::new(tid, rep) });
        Ok(())
    }

    /// Whether `id` is a SIDR exchange (active or passive).
    pub fn is_sidr(&self, id: CommId) -> bool {
        self.sidr.contains_key(&id.0)
    }

    /// Ends SIDR exchange `id` as Linux's `cm_destroy_id` does: a request
    /// not answered yet is rejected, one sent is given up.
    pub(super) fn destroy_sidr(&mut self, id: u32) {
        if matches!(self.sidr.get(&id), Some(Sidr::Received { .. })) {
            let answer =
                SidrAnswer { status: SidrStatus::REJECT, qpn: 0, qkey: 0, private_data: [0; REP_PRIVATE_DATA_LEN] };
            let _ = self.sidr_reply(CommId(id), answer);
        }
        self.sidr.remove(&id);
    }

    pub(super) fn on_sidr_req(&mut self, peer: IpAddr, local: IpAddr, tid: u64, req: SidrReqRepr) {
        let dup = self.sidr.values().any(
            |s| matches!(s, Sidr::Received { peer: p, request_id, .. } if *p == peer && *request_id == req.request_id),
        );
        if dup {
            self.stats.ignored += 1;
            return;
        }
        if !self.listeners.contains_key(&req.service_id) {
            self.stats.no_listener += 1;
            self.stats.sent += 1;
            let rep = SidrRepRepr::new(req.request_id, SidrStatus::UNSUPPORTED, 0, req.service_id, 0);
            self.transmits.push_back(Transmit { from: local, to: peer, mad: CmMad::new(tid, rep) });
            return;
        }
        let id = self.new_comm_id();
        let received = Sidr::Received { local, peer, request_id: req.request_id, service_id: req.service_id, tid };
        self.sidr.insert(id, received);
        self.events.push_back(CmEvent::SidrReqReceived { id: CommId(id), req: Box::new(req), peer, local });
    }

    pub(super) fn on_sidr_rep(&mut self, peer: IpAddr, rep: SidrRepRepr) {
        let ours = matches!(self.sidr.get(&rep.request_id), Some(Sidr::Sent { peer: p, .. }) if *p == peer);
        if !ours {
            self.stats.unknown += 1;
            return;
        }
        self.sidr.remove(&rep.request_id);
        self.events.push_back(CmEvent::SidrRepReceived { id: CommId(rep.request_id), rep: Box::new(rep) });
    }

    /// The earliest SIDR_REQ resend.
    pub(super) fn sidr_timeout(&self) -> Option<Instant> {
        self.sidr
            .values()
            .filter_map(|s| match s {
                Sidr::Sent { timer, .. } => Some(*timer),
                Sidr::Received { .. } => None,
            })
            .min()
    }

    /// Resends the SIDR_REQs due at `now`; ends those out of retries.
    pub(super) fn sidr_timers(&mut self, now: Instant) {
        let mut due: Vec<u32> = self
            .sidr
            .iter()
            .filter(|(_, s)| matches!(s, Sidr::Sent { timer, .. } if *timer <= now))
            .map(|(k, _)| *k)
            .collect();
        due.sort_unstable();
        for id in due {
            let Some(Sidr::Sent { local, peer, mad, period, retries, timer }) = self.sidr.get_mut(&id) else {
                continue;
            };
            if *retries == 0 {
                self.sidr.remove(&id);
                self.events.push_back(CmEvent::Unreachable { id: CommId(id) });
                continue;
            }
            *retries -= 1;
            *timer = now + *period;
            let t = Transmit { from: *local, to: *peer, mad: **mad };
            self.stats.retransmitted += 1;
            self.stats.sent += 1;
            self.transmits.push_back(t);
        }
    }
}
