//! What the integration tests and the engine fuzzer reach inside the
//! engine, compiled only for tests and with the `testing` feature (the
//! crate's own dev-dependency and the fuzz crate turn it on): the fuzzer's
//! harness, which lives here because its oracle reads the QPs' role state;
//! engine constants the scripted tests check; and [`QpProbe`], a read-only
//! look at a QP's roles. None of it is the engine's API.

pub mod engine_harness;

use std::time::{Duration, Instant};

use crate::mr::MrTable;
use crate::qp::Qp;
use crate::verbs::AccessFlags;

/// rxe's `RXE_MAX_UNACKED_PSNS`: how far the requester runs ahead of the
/// oldest unacknowledged PSN.
pub const MAX_UNACKED_PSNS: u32 = crate::qp::MAX_UNACKED_PSNS;
/// The congestion window after a timeout.
pub const MIN_CWND: u32 = crate::cc::MIN_CWND;
/// The least time between two CNPs of one QP.
pub const CNP_INTERVAL: Duration = crate::cc::CNP_INTERVAL;
/// Packets a QP may send in a row before the next QP's turn.
pub const TX_BURST: u32 = crate::device::TX_BURST;
/// The port's one P_Key, the default full member.
pub const PORT_PKEY: u16 = crate::device::PORT_PKEY;
/// How long a requester waits for a credit update before it probes.
pub const CREDIT_UPDATE_WAIT: Duration = crate::requester::CREDIT_UPDATE_WAIT;
/// The network header type a UD completion reports in `sl` for IPv4.
pub const ROCE_L3_IPV4: u8 = crate::responder::ROCE_L3_IPV4;

/// The local ACK timeout for a QP's `timeout` exponent, `None` for 0.
pub fn ack_timeout(timeout: u8) -> Option<Duration> {
    crate::qp::ack_timeout(timeout)
}

/// Whether a packet's P_Key meets the port's (`pkey_match`).
pub fn pkey_matches(packet: u16, ours: u16) -> bool {
    crate::device::pkey_matches(packet, ours)
}

/// Whether `key` grants a remote access of `len` bytes at `va` to QP `qpn`
/// of PD `pd` (the responder's check; the error says why not).
pub fn check_remote(
    mrs: &MrTable,
    key: u32,
    pd: crate::PdHandle,
    qpn: u32,
    va: u64,
    len: u64,
    needed: AccessFlags,
) -> Result<(), String> {
    mrs.check_remote(key, pd.get(), qpn, va, len, needed).map(|_| ()).map_err(|e| format!("{e:?}"))
}

/// What the responder's end-to-end credits allow the requester (a copy of
/// the engine's own state).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Credits {
    /// No ACK yet.
    Unknown,
    /// The limit sequence number.
    Limit(u32),
    /// The responder sends "credits invalid".
    Unlimited,
}

/// A read-only look at a QP's roles, for the scripted tests' assertions.
pub trait QpProbe {
    /// The requester's credits.
    fn credits(&self) -> Credits;
    /// Whether the responder announces credits (`None`: not known yet).
    fn credit_updates(&self) -> Option<bool>;
    /// Outstanding READ/atomic WQEs of the requester.
    fn rd_atomic(&self) -> u32;
    /// READ/atomic resources the responder holds.
    fn resources_held(&self) -> usize;
    /// Whether both work queues are empty.
    fn queues_empty(&self) -> bool;
    /// Whether the peer's responder keeps requests ahead of a gap.
    fn peer_keeps(&self) -> bool;
    /// The congestion window, in PSNs.
    fn cwnd(&self) -> u32;
    /// The smoothed round trip, once one was measured.
    fn srtt(&self) -> Option<Duration>;
    /// The retransmission timeout now, for a local ACK timeout of `qp_timeout`.
    fn rto(&self, qp_timeout: Duration, now: Instant) -> Duration;
}

impl QpProbe for Qp {
    fn credits(&self) -> Credits {
        match self.req.credits {
            crate::qp::Credits::Unknown => Credits::Unknown,
            crate::qp::Credits::Limit(n) => Credits::Limit(n),
            crate::qp::Credits::Unlimited => Credits::Unlimited,
        }
    }

    fn credit_updates(&self) -> Option<bool> {
        self.req.credit_updates
    }

    fn rd_atomic(&self) -> u32 {
        self.req.rd_atomic
    }

    fn resources_held(&self) -> usize {
        self.resp.resources.len()
    }

    fn queues_empty(&self) -> bool {
        self.sq.is_empty() && self.rq.is_empty()
    }

    fn peer_keeps(&self) -> bool {
        self.comp.peer_keeps
    }

    fn cwnd(&self) -> u32 {
        self.comp.cc.window()
    }

    fn srtt(&self) -> Option<Duration> {
        self.comp.cc.srtt()
    }

    fn rto(&self, qp_timeout: Duration, now: Instant) -> Duration {
        self.comp.cc.rto(qp_timeout, now)
    }
}
