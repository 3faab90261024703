//! Sender-side congestion control and loss recovery of an RC requester.
//!
//! The responder and the wire stay exactly IBTA's and rxe's: a go-back-N
//! receiver that NAKs the first PSN it misses once and drops what follows
//! until that PSN arrives. Everything here changes only *when* the requester
//! sends, so kernel rxe and RoCE NICs see nothing new. What is taken from
//! where (docs/engine.md, "Loss recovery and congestion control"):
//!
//! - **A congestion window** in PSNs, below rxe's fixed 128 (`MAX_UNACKED_PSNS`,
//!   the most it ever allows). Go-back-N resends everything in flight behind
//!   a loss, so a loss costs about one window: a smaller window under loss
//!   is what keeps goodput up (IRN, SIGCOMM 2018, measures RoCE's collapse
//!   from exactly this). Reno's AIMD (RFC 5681): slow start to `ssthresh`,
//!   then one PSN more per window acknowledged; halved once per window of
//!   data on a loss (a sequence NAK, an implied NAK), and on a CNP (the DCQCN
//!   reaction point's cut, RoCEv2 Annex A17.9); back to the minimum on a
//!   timeout. A lossless path never shrinks it, so the bulk rate stays rxe's.
//! - **An adaptive retransmission timer** (RFC 6298 / RFC 9002's PTO): a
//!   smoothed round trip and its variation from ACKed AckReq packets (Karn's
//!   rule: never from retransmitted PSNs), backed off 2x per expiry, and
//!   never longer than the QP's `timeout`, which stays the application's
//!   upper bound. A lost retransmission or a lost tail then costs a few round
//!   trips, not 67 ms.
//! - **`retry_cnt` counted in the QP's time**: a retry spends one of
//!   `retry_cnt` only when a whole local ACK timeout has passed without
//!   progress since the last one counted (IBTA 9.7.6.1.3: the retry counter
//!   counts the local ACK timeouts of a request without forward progress).
//!   The faster retransmissions in between are free, so a dead peer still
//!   gives RETRY_EXC_ERR after `retry_cnt` x `timeout`, as on rxe.
//! - **ECN** (RFC 3168, RoCEv2 Annex A17.9): the transport sends every
//!   packet ECN-capable (ECT(0)), so a router or queue that would drop
//!   marks CE instead. The receiving QP is the notification point: a
//!   CE-marked RC packet makes it send a CNP to its peer QP, paced to one
//!   per [`CNP_INTERVAL`]; the peer, the reaction point, halves its window
//!   as for a loss, without the loss.

use std::time::{Duration, Instant};

use roce_wire::Psn;

/// The window after a timeout, and the least a loss halves it to.
pub(crate) const MIN_CWND: u32 = 2;
/// The shortest retransmission timeout: well above a loopback round trip
/// and the driver thread's timer resolution, so a slow turn is not a loss.
pub(crate) const MIN_RTO: Duration = Duration::from_millis(5);
/// The shortest wait before a tail probe: a spurious probe costs one packet.
pub(crate) const MIN_PTO: Duration = Duration::from_micros(200);
/// How long a loss makes the path count as lossy (tail probes on).
pub(crate) const LOSSY_MEMORY: Duration = Duration::from_secs(1);
/// The least time between two CNPs of one QP: DCQCN's notification point
/// sends at most one per 50 us per flow (Zhu et al., SIGCOMM 2015), so a
/// burst of marked packets costs the sender one cut, not one per packet.
pub(crate) const CNP_INTERVAL: Duration = Duration::from_micros(50);
/// Backoff doublings at most (then the QP's timeout bounds it anyway).
const MAX_BACKOFF: u32 = 16;

/// One QP's congestion and round-trip state.
#[derive(Debug, Clone)]
pub(crate) struct Cc {
    /// Congestion window in PSNs.
    cwnd: u32,
    /// Slow start ends here.
    ssthresh: u32,
    /// PSNs acknowledged since the window last grew in congestion avoidance.
    ca_acked: u32,
    /// A loss event is under way until the oldest unacknowledged PSN passes
    /// this (the highest PSN sent when it began): later losses of the same
    /// window are the same event.
    recovery_until: Option<Psn>,
    /// Smoothed round trip.
    srtt: Option<Duration>,
    /// Its mean deviation.
    rttvar: Duration,
    /// Expiries in a row.
    backoff: u32,
    /// The PSN being timed and when it left.
    sample: Option<(Psn, Instant)>,
    /// The window's ceiling.
    max: u32,
    /// When the path last lost a packet.
    last_loss: Option<Instant>,
    /// DCQCN's alpha in 1/[`ALPHA_ONE`]: a running average of how many
    /// windows of late saw a CNP, which sets how deep the next CNP cuts.
    alpha: u32,
}

/// Alpha's unit: 1.0.
const ALPHA_ONE: u32 = 1 << 10;
/// Alpha's gain per window, DCQCN's g (1/16: windows here are coarser than
/// DCQCN's 55 us alpha timer, so each weighs more).
const ALPHA_SHIFT: u32 = 4;

impl Cc {
    /// A window that starts at `max` (rxe's window: a lossless path runs as
    /// fast as before) with no round trip known.
    pub(crate) fn new(max: u32) -> Cc {
        Cc {
            cwnd: max,
            ssthresh: max,
            ca_acked: 0,
            recovery_until: None,
            srtt: None,
            rttvar: Duration::ZERO,
            backoff: 0,
            sample: None,
            max,
            last_loss: None,
            alpha: ALPHA_ONE,
        }
    }

    /// PSNs the requester may have outstanding now.
    pub(crate) fn window(&self) -> u32 {
        self.cwnd
    }

    /// The smoothed round trip, once one was measured.
    #[cfg(any(test, feature = "testing"))]
    pub(crate) fn srtt(&self) -> Option<Duration> {
        self.srtt
    }

    /// A request packet with `psn` leaves at `now`; `fresh` when it was never
    /// sent before and asks for an ACK (the one kind an ACK times cleanly).
    pub(crate) fn on_send(&mut self, now: Instant, psn: Psn, fresh: bool) {
        if fresh && self.sample.is_none() {
            self.sample = Some((psn, now));
        }
    }

    /// The oldest unacknowledged PSN moved forward by `acked` PSNs to `una`.
    pub(crate) fn on_progress(&mut self, now: Instant, una: Psn, acked: u32) {
        self.backoff = 0;
        if let Some((psn, sent)) = self.sample
            && una.after(psn)
        {
            self.sample = None;
            self.add_rtt(now.saturating_duration_since(sent));
        }
        if let Some(end) = self.recovery_until {
            if una.after(end) {
                self.recovery_until = None;
            } else {
                return;
            }
        }
        if self.cwnd < self.ssthresh {
            self.cwnd = (self.cwnd + acked).min(self.ssthresh);
        } else {
            self.ca_acked += acked;
            while self.ca_acked >= self.cwnd {
                self.ca_acked -= self.cwnd;
                self.cwnd += 1;
                // A window without a CNP: alpha decays (DCQCN's alpha timer).
                self.alpha -= self.alpha >> ALPHA_SHIFT;
            }
        }
        self.cwnd = self.cwnd.min(self.max);
    }

    /// RFC 6298's update with one round-trip measurement.
    fn add_rtt(&mut self, r: Duration) {
        match self.srtt {
            None => {
                self.srtt = Some(r);
                self.rttvar = r / 2;
            }
            Some(s) => {
                let dev = s.abs_diff(r);
                self.rttvar = (self.rttvar * 3 + dev) / 4;
                self.srtt = Some((s * 7 + r) / 8);
            }
        }
    }

    /// A CNP with PSNs up to `sent_psn` (exclusive) sent: a queue on the
    /// path marked this QP's packets. As DCQCN's reaction point, alpha
    /// moves toward 1 and the window is cut by alpha / 2, once per window
    /// (so a first CNP halves it, and rare marks cut less and less deep);
    /// nothing was lost, so nothing is resent and the path does not count
    /// as lossy.
    pub(crate) fn on_cnp(&mut self, sent_psn: Psn) {
        self.alpha += (ALPHA_ONE - self.alpha) >> ALPHA_SHIFT;
        if self.recovery_until.is_some() {
            return;
        }
        let cut = (u64::from(self.cwnd) * u64::from(self.alpha) / u64::from(2 * ALPHA_ONE)) as u32;
        self.ssthresh = (self.cwnd - cut.max(1)).max(MIN_CWND);
        self.cwnd = self.ssthresh;
        self.ca_acked = 0;
        self.recovery_until = Some(sent_psn.sub(1));
    }

    /// A loss was detected from the responder's answer (sequence NAK, or an
    /// ACK past a READ whose response never came), with PSNs up to
    /// `sent_psn` (exclusive) sent.
    pub(crate) fn on_loss(&mut self, now: Instant, sent_psn: Psn) {
        self.last_loss = Some(now);
        // The retransmission's PSNs are not timed (Karn).
        self.sample = None;
        if self.recovery_until.is_some() {
            return;
        }
        self.ssthresh = (self.cwnd / 2).max(MIN_CWND);
        self.cwnd = self.ssthresh;
        self.ca_acked = 0;
        self.recovery_until = Some(sent_psn.sub(1));
    }

    /// The retransmission timer expired.
    pub(crate) fn on_timeout(&mut self, now: Instant) {
        self.last_loss = Some(now);
        self.sample = None;
        if self.recovery_until.is_none() {
            self.ssthresh = (self.cwnd / 2).max(MIN_CWND);
        }
        // Everything is resent from the minimum, in slow start at once.
        self.cwnd = MIN_CWND;
        self.ca_acked = 0;
        self.recovery_until = None;
        self.backoff = (self.backoff + 1).min(MAX_BACKOFF);
    }

    /// How long to wait for an ACK before the tail loss probe: two round
    /// trips (RFC 8985's PTO). None before a round trip was measured, and
    /// none on a path that lost nothing in the last `LOSSY_MEMORY`: there a
    /// probe would only be an early timer for every idle moment of a
    /// ping-pong (a wake-up each), and a tail is no likelier lost than any
    /// packet.
    pub(crate) fn pto(&self, now: Instant) -> Option<Duration> {
        self.srtt.filter(|_| self.lossy(now)).map(|s| (s * 2).max(MIN_PTO))
    }

    /// Whether the path lost a packet (or signalled congestion) lately.
    fn lossy(&self, now: Instant) -> bool {
        self.last_loss.is_some_and(|t| now.saturating_duration_since(t) < LOSSY_MEMORY)
    }

    /// The retransmission timeout now: on a path that lost something
    /// lately, the round trip's estimate backed off, at most `qp_timeout`
    /// (the application's local ACK timeout). Elsewhere `qp_timeout` itself,
    /// as rxe: a clean path's timer is then armed far out, so a ping-pong
    /// does not wake a thread for it on every turn, and its first loss is
    /// met by a NAK or one timeout as before.
    pub(crate) fn rto(&self, qp_timeout: Duration, now: Instant) -> Duration {
        let Some(srtt) = self.srtt.filter(|_| self.lossy(now)) else { return qp_timeout };
        let base = (srtt + self.rttvar * 4).max(MIN_RTO);
        base.saturating_mul(1 << self.backoff).min(qp_timeout)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn us(n: u64) -> Duration {
        Duration::from_micros(n)
    }

    #[test]
    fn a_lossless_path_keeps_the_full_window() {
        let t0 = Instant::now();
        let mut cc = Cc::new(128);
        for i in 0..1000u32 {
            cc.on_send(t0, Psn::new(i), true);
            cc.on_progress(t0 + us(50), Psn::new(i + 1), 1);
        }
        assert_eq!(cc.window(), 128);
        assert_eq!(cc.srtt(), Some(us(50)));
    }

    #[test]
    fn cnps_cut_by_alpha_once_per_window_and_alpha_decays_between() {
        let t0 = Instant::now();
        let mut cc = Cc::new(128);
        // A first CNP halves the window (alpha starts at 1, as DCQCN's).
        cc.on_cnp(Psn::new(100));
        assert_eq!(cc.window(), 64);
        // More CNPs for the same flight cut no further.
        cc.on_cnp(Psn::new(110));
        assert_eq!(cc.window(), 64);
        // A CNP is no loss: no probes, no short timer.
        assert_eq!(cc.pto(t0), None);
        // Twenty windows without a CNP: the window grows one per window
        // and alpha decays, so the next CNP cuts far less than half.
        cc.on_progress(t0, Psn::new(100), 100);
        let mut una = 100u32;
        for _ in 0..20 {
            let w = cc.window();
            una += w;
            cc.on_progress(t0, Psn::new(una), w);
        }
        let before = cc.window();
        assert_eq!(before, 85, "64, one for the 100 PSNs past the flight, and 20");
        cc.on_cnp(Psn::new(una + before));
        let after = cc.window();
        assert!(after < before && after > before * 3 / 4, "a cut by alpha / 2 of about 0.3: {after}");
        // Marks on every window push alpha back up: the cuts deepen.
        let mut last = cc.window();
        for _ in 0..30 {
            una += cc.window() + 1;
            cc.on_progress(t0, Psn::new(una), cc.window() + 1);
            cc.on_cnp(Psn::new(una + 200));
            last = last.min(cc.window());
        }
        assert!(last < after / 2, "steady marks bring the window well below rare ones: {last} against {after}");
        assert!(cc.window() >= MIN_CWND);
    }

    #[test]
    fn a_loss_halves_once_per_window_then_grows_by_one_per_window() {
        let t0 = Instant::now();
        let mut cc = Cc::new(128);
        cc.on_loss(t0, Psn::new(100));
        assert_eq!(cc.window(), 64);
        // More losses of the same flight are the same event.
        cc.on_loss(t0, Psn::new(120));
        assert_eq!(cc.window(), 64);
        // Progress within the flight does not grow the window.
        cc.on_progress(t0, Psn::new(99), 99);
        assert_eq!(cc.window(), 64);
        // Past it: congestion avoidance, one more per 64 acknowledged.
        cc.on_progress(t0, Psn::new(100), 1);
        cc.on_progress(t0, Psn::new(164), 64);
        assert_eq!(cc.window(), 65);
        // A new loss halves again.
        cc.on_loss(t0, Psn::new(300));
        assert_eq!(cc.window(), 32);
    }

    #[test]
    fn a_timeout_restarts_from_the_minimum_and_slow_starts_to_half() {
        let t0 = Instant::now();
        let mut cc = Cc::new(128);
        cc.on_timeout(t0);
        assert_eq!(cc.window(), MIN_CWND);
        cc.on_progress(t0, Psn::new(128), 1);
        cc.on_progress(t0, Psn::new(140), 12);
        assert_eq!(cc.window(), 15, "slow start adds what was acknowledged");
        cc.on_progress(t0, Psn::new(240), 100);
        assert_eq!(cc.window(), 64, "up to ssthresh");
    }

    #[test]
    fn the_timer_follows_the_round_trip_backs_off_and_stays_under_the_qps_timeout() {
        let t0 = Instant::now();
        let qp = Duration::from_millis(67);
        let mut cc = Cc::new(128);
        assert_eq!(cc.rto(qp, t0), qp, "no round trip known yet: the QP's own");
        cc.on_send(t0, Psn::new(0), true);
        cc.on_progress(t0 + us(4000), Psn::new(1), 1);
        assert_eq!(cc.rto(qp, t0), qp, "a clean path: the QP's own");
        assert_eq!(cc.pto(t0), None, "no loss seen: no probes");
        // Karn: a retransmitted PSN is not timed.
        cc.on_send(t0, Psn::new(1), false);
        cc.on_progress(t0 + us(90_000), Psn::new(2), 1);
        // After a loss, srtt 4 ms and rttvar 2 ms: 12 ms, backed off once.
        cc.on_timeout(t0);
        assert_eq!(cc.rto(qp, t0), us(24_000));
        assert_eq!(cc.pto(t0 + us(10)), Some(us(8000)), "after a loss: two round trips");
        assert_eq!(cc.pto(t0 + LOSSY_MEMORY), None, "a second later, off again");
        assert_eq!(cc.rto(qp, t0 + LOSSY_MEMORY), qp);
        for _ in 0..10 {
            cc.on_timeout(t0);
        }
        assert_eq!(cc.rto(qp, t0), qp);
        // Progress ends the backoff.
        cc.on_progress(t0, Psn::new(3), 1);
        assert_eq!(cc.rto(qp, t0), us(12_000));
        // Never below the floor.
        let mut fast = Cc::new(128);
        fast.on_send(t0, Psn::new(0), true);
        fast.on_progress(t0 + us(10), Psn::new(1), 1);
        fast.on_loss(t0, Psn::new(1));
        assert_eq!(fast.rto(qp, t0), MIN_RTO);
        assert_eq!(fast.pto(t0), Some(MIN_PTO));
    }
}
