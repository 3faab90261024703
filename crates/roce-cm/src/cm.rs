//! The CM agent of one QP 1: connections by local communication ID,
//! listeners by service ID, MAD retransmission and timewait timers. Sans-IO
//! (as `roce-proto`'s engine): the caller feeds received MADs
//! ([`Cm::handle_mad`]), the time ([`Cm::handle_timeout`]) and the
//! consumer's calls, and takes MADs to send ([`Cm::poll_transmit`]) and
//! events ([`Cm::poll_event`]). Transitions are [`crate::cm_state`]'s table.
//!
//! Timers follow Linux `ib_cm` (rdmacm.md 1.12), with `conv(t)` =
//! `1 << max(t - 8, 0)` ms:
//! - REQ: every `2 conv(packet lifetime) + conv(remote CM response timeout)`
//!   (6,144 ms for rdma_cm's 18 and 20), `max_cm_retries` times (15);
//! - REP: every `conv(REQ local CM response timeout)` (4,096 ms), the REQ's
//!   `max_cm_retries` times;
//! - DREQ: the connection's REQ or REP period, `max_cm_retries` times;
//! - after an MRA: `conv(service timeout) + conv(packet lifetime + 1)`;
//! - timewait: `conv(local ACK timeout)` (2,048 ms for 19).
//!
//! Duplicates and strays (Linux `cm_dup_req_handler` and the per-message
//! handlers): a REQ already known by (its comm ID, its CA GUID) is a
//! duplicate; a new REQ from a QP whose earlier connection here is in
//! timewait is stale and gets REJ 10; a REQ for a service nobody listens on gets REJ 8;
//! any other message names this side's comm ID and must come from the
//! connection's peer comm ID, or it is dropped and counted, except a DREQ
//! for a connection gone, which gets a DREP (Linux `cm_issue_drep`).

mod sidr;

pub use sidr::{SidrAnswer, SidrParams};

use std::collections::{HashMap, VecDeque};
use std::net::IpAddr;
use std::time::{Duration, Instant};

use crate::cm_state::{self, Action, Input, State};
use crate::wire::{
    CmMad, CmMessage, DrepRepr, DreqRepr, MraRepr, MsgResponse, RejReason, RejRepr, RepRepr, ReqRepr, RtuRepr,
    SidrRepRepr, SidrReqRepr, kernel_tid,
};

/// A connection, by its local communication ID.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct CommId(pub u32);

/// Service timeout a passive side asks for in the MRA it sends to a
/// duplicate REQ or REP (Linux: 24, about 68.7 s).
pub const MRA_SERVICE_TIMEOUT: u8 = 24;

/// `cm_convert_to_ms`: 4.096 us x 2^t, approximated as Linux does.
pub fn conv(t: u8) -> Duration {
    Duration::from_millis(1u64 << t.saturating_sub(8).min(31))
}

/// What the agent is, on its host.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CmConfig {
    /// The CA GUID put in REQ and REP (the EUI-64 of the device).
    pub ca_guid: u64,
    /// The high word of every transaction ID this agent starts.
    pub tid_hi: u32,
    /// The CA's local ACK delay (the REP's target ACK delay; rxe: 15).
    pub ack_delay: u8,
    /// Local comm IDs are drawn at random but keep these bits of `comm_id_tag`
    /// (so that a host can tell from a comm ID which process owns it).
    pub comm_id_mask: u32,
    /// See `comm_id_mask`.
    pub comm_id_tag: u32,
}

/// A MAD to send on QP 1.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Transmit {
    /// The local address (GID) to send from.
    pub from: IpAddr,
    /// The peer's address (GID).
    pub to: IpAddr,
    /// The MAD.
    pub mad: CmMad,
}

/// What the agent tells its consumer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CmEvent {
    /// A REQ for a listened-on service: a new passive connection `id`.
    ReqReceived {
        /// The new connection.
        id: CommId,
        /// The REQ.
        req: Box<ReqRepr>,
        /// Where it came from.
        peer: IpAddr,
        /// The local address it was sent to.
        local: IpAddr,
    },
    /// The REP to this side's REQ.
    RepReceived {
        /// The connection.
        id: CommId,
        /// The REP.
        rep: Box<RepRepr>,
    },
    /// The connection is established (passive: RTU or the consumer's establish).
    Established {
        /// The connection.
        id: CommId,
    },
    /// The peer rejected.
    Rejected {
        /// The connection.
        id: CommId,
        /// The REJ.
        rej: Box<RejRepr>,
    },
    /// REQ or REP retries ran out.
    Unreachable {
        /// The connection.
        id: CommId,
    },
    /// The peer disconnects.
    DreqReceived {
        /// The connection.
        id: CommId,
    },
    /// The DREP arrived.
    DrepReceived {
        /// The connection.
        id: CommId,
    },
    /// The DREQ went unanswered.
    DisconnectTimedOut {
        /// The connection.
        id: CommId,
    },
    /// The timewait after a disconnect ended.
    TimewaitExit {
        /// The connection.
        id: CommId,
    },
    /// A SIDR_REQ for a listened-on service: answer it with
    /// [`Cm::sidr_reply`] (or destroy `id`, which rejects it).
    SidrReqReceived {
        /// The request.
        id: CommId,
        /// The SIDR_REQ.
        req: Box<SidrReqRepr>,
        /// Where it came from.
        peer: IpAddr,
        /// The local address it was sent to.
        local: IpAddr,
    },
    /// The SIDR_REP to this side's SIDR_REQ (whatever its status).
    SidrRepReceived {
        /// The request.
        id: CommId,
        /// The SIDR_REP.
        rep: Box<SidrRepRepr>,
    },
}

/// Why a consumer's call was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum CmError {
    /// No such connection.
    #[error("no CM connection {0:?}")]
    UnknownId(CommId),
    /// The call does not fit the connection's state.
    #[error("CM connection {id:?} is in state {state:?}: cannot {what}")]
    BadState {
        /// The connection.
        id: CommId,
        /// Its state.
        state: State,
        /// The call.
        what: &'static str,
    },
    /// Somebody listens on the service already.
    #[error("service ID {0:#018x} is listened on already")]
    AlreadyListening(u64),
}

/// Counters (monotonic).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct CmStats {
    /// MADs handed to the agent.
    pub received: u64,
    /// MADs that did not parse (counted and dropped).
    pub malformed: u64,
    /// MADs for no known connection, or from another peer comm ID.
    pub unknown: u64,
    /// MADs the connection's state ignores (duplicates, late messages).
    pub ignored: u64,
    /// MADs sent (first transmissions and answers).
    pub sent: u64,
    /// Retransmissions.
    pub retransmitted: u64,
    /// REQs rejected for want of a listener (REJ 8).
    pub no_listener: u64,
    /// REQs rejected as stale (REJ 10).
    pub stale: u64,
    /// Connections whose peer died unheard ([`Cm::handle_peer_gone`]).
    pub peers_gone: u64,
}

/// What `connect` needs beyond the REQ itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConnectParams {
    /// The local address (GID).
    pub local: IpAddr,
    /// The peer's address (GID).
    pub peer: IpAddr,
    /// The REQ to send; its local comm ID and CA GUID are filled in.
    pub req: ReqRepr,
    /// The path's packet lifetime (rdma_cm on RoCE: 18).
    pub packet_life_time: u8,
}

struct Conn {
    state: State,
    local: IpAddr,
    peer: IpAddr,
    /// The peer's comm ID and CA GUID, once known.
    remote: Option<(u32, u64)>,
    /// This side's QPN, the one a DREQ must name.
    local_qpn: u32,
    /// The peer's QPN (named in this side's DREQ).
    remote_qpn: u32,
    /// The TID of the REQ/REP/RTU exchange (the REQ's).
    tid: u64,
    /// The TID of the DREQ exchange.
    dreq_tid: u64,
    /// The message resent on `Retry` (boxed, as the reject below: most
    /// connections in the table sit in timewait without either, and the
    /// table's slots stay small).
    last: Option<Box<CmMad>>,
    /// Retransmission period and retries left.
    period: Duration,
    retries: u8,
    max_retries: u8,
    /// The period of this side's REQ/REP, reused for its DREQ.
    base_period: Duration,
    packet_life_time: u8,
    /// The QP's local ACK timeout (timewait = conv of it).
    ack_timeout: u8,
    timer: Option<Instant>,
    /// What the consumer's reject says (reason, private data).
    reject: Option<Box<(RejReason, [u8; 148])>>,
    /// The consumer destroyed the connection: no events, it only winds down.
    detached: bool,
}

impl Conn {
    /// A connection about to take its first step, retransmitting every
    /// `period` up to `max_retries` times.
    fn new(
        local: IpAddr,
        peer: IpAddr,
        period: Duration,
        max_retries: u8,
        packet_life_time: u8,
        ack_timeout: u8,
    ) -> Conn {
        Conn {
            state: State::Idle,
            local,
            peer,
            remote: None,
            local_qpn: 0,
            remote_qpn: 0,
            tid: 0,
            dreq_tid: 0,
            last: None,
            period,
            retries: max_retries,
            max_retries,
            base_period: period,
            packet_life_time,
            ack_timeout,
            timer: None,
            reject: None,
            detached: false,
        }
    }
}

/// The CM agent.
pub struct Cm {
    config: CmConfig,
    conns: HashMap<u32, Conn>,
    /// (peer comm ID, peer CA GUID) -> local comm ID, for duplicate REQs.
    by_remote: HashMap<(u32, u64), u32>,
    listeners: HashMap<u64, ()>,
    /// SIDR exchanges, by local request ID (drawn as comm IDs are).
    sidr: HashMap<u32, sidr::Sidr>,
    transmits: VecDeque<Transmit>,
    events: VecDeque<CmEvent>,
    rng: u64,
    stats: CmStats,
}

impl Cm {
    /// An agent; `seed` makes its comm IDs (and so every run) reproducible.
    pub fn new(config: CmConfig, seed: u64) -> Cm {
        Cm {
            config,
            conns: HashMap::new(),
            by_remote: HashMap::new(),
            listeners: HashMap::new(),
            sidr: HashMap::new(),
            transmits: VecDeque::new(),
            events: VecDeque::new(),
            rng: seed ^ 0x9e37_79b9_7f4a_7c15 | 1,
            stats: CmStats::default(),
        }
    }

    /// The counters.
    pub fn stats(&self) -> CmStats {
        self.stats
    }

    /// Connections held, in any state (timewait included): what a
    /// long-running server's CM keeps.
    pub fn connections(&self) -> usize {
        self.conns.len()
    }

    /// A connection's state (`None` once it is gone).
    pub fn state(&self, id: CommId) -> Option<State> {
        self.conns.get(&id.0).map(|c| c.state)
    }

    /// Listens on `service_id`: REQs for it make new passive connections.
    pub fn listen(&mut self, service_id: u64) -> Result<(), CmError> {
        if self.listeners.insert(service_id, ()).is_some() {
            return Err(CmError::AlreadyListening(service_id));
        }
        Ok(())
    }

    /// Stops listening on `service_id` (its connections stay).
    pub fn unlisten(&mut self, service_id: u64) {
        self.listeners.remove(&service_id);
    }

    /// Starts an active connection: sends the REQ.
    pub fn connect(&mut self, now: Instant, p: ConnectParams) -> CommId {
        let id = self.new_comm_id();
        let mut req = p.req;
        req.local_comm_id = id;
        req.local_ca_guid = self.config.ca_guid;
        let period = conv(p.packet_life_time) * 2 + conv(req.remote_cm_response_timeout);
        let conn = Conn {
            local_qpn: req.local_qpn,
            tid: kernel_tid(self.config.tid_hi, id),
            dreq_tid: kernel_tid(self.config.tid_hi, id),
            ..Conn::new(
                p.local,
                p.peer,
                period,
                req.max_cm_retries,
                p.packet_life_time,
                req.primary_path.local_ack_timeout,
            )
        };
        self.conns.insert(id, conn);
        let mad = CmMad::new(kernel_tid(self.config.tid_hi, id), req);
        self.run(now, id, Input::Connect, Some(mad));
        CommId(id)
    }

    /// Accepts a passive connection: sends `rep` (its comm IDs and CA GUID
    /// are filled in).
    pub fn accept(&mut self, now: Instant, id: CommId, mut rep: RepRepr) -> Result<(), CmError> {
        let c = self.conn(id, State::MraReqSent, "accept")?;
        rep.local_comm_id = id.0;
        rep.remote_comm_id = c.remote.map_or(0, |r| r.0);
        rep.local_ca_guid = self.config.ca_guid;
        rep.target_ack_delay = self.config.ack_delay;
        let mad = CmMad::new(c.tid, rep);
        let c = self.conns.get_mut(&id.0).expect("checked");
        c.local_qpn = rep.local_qpn;
        self.run(now, id.0, Input::Accept, Some(mad));
        Ok(())
    }

    /// Rejects a connection not yet established (REJ with `reason` and
    /// `private_data`).
    pub fn reject(
        &mut self,
        now: Instant,
        id: CommId,
        reason: RejReason,
        private_data: [u8; 148],
    ) -> Result<(), CmError> {
        let state = self.conns.get(&id.0).ok_or(CmError::UnknownId(id))?.state;
        if !matches!(state, State::MraReqSent | State::MraRepSent) {
            return Err(CmError::BadState { id, state, what: "reject" });
        }
        self.conns.get_mut(&id.0).expect("checked").reject = Some(Box::new((reason, private_data)));
        self.run(now, id.0, Input::Reject, None);
        Ok(())
    }

    /// Active: sends the RTU after the REP. Passive: communication
    /// established before the RTU (Linux `ib_cm_notify(COMM_EST)`).
    pub fn establish(&mut self, now: Instant, id: CommId) -> Result<(), CmError> {
        let state = self.conns.get(&id.0).ok_or(CmError::UnknownId(id))?.state;
        if !matches!(state, State::MraRepSent | State::RepSent | State::MraRepRcvd) {
            return Err(CmError::BadState { id, state, what: "establish" });
        }
        self.run(now, id.0, Input::Establish, None);
        Ok(())
    }

    /// Disconnects: a DREQ from `Established`, the DREP after a DREQ received.
    pub fn disconnect(&mut self, now: Instant, id: CommId) -> Result<(), CmError> {
        let state = self.conns.get(&id.0).ok_or(CmError::UnknownId(id))?.state;
        if !matches!(state, State::Established | State::DreqRcvd) {
            return Err(CmError::BadState { id, state, what: "disconnect" });
        }
        self.run(now, id.0, Input::Disconnect, None);
        Ok(())
    }

    /// The consumer is done with `id`: it winds down as Linux `cm_destroy_id`
    /// does (a REJ for a connection being made, a DREQ or DREP for one
    /// made, then timewait) and reports nothing more.
    pub fn destroy(&mut self, now: Instant, id: CommId) {
        if self.sidr.contains_key(&id.0) {
            self.destroy_sidr(id.0);
            return;
        }
        let Some(c) = self.conns.get_mut(&id.0) else { return };
        c.detached = true;
        let timeout = RejReason::TIMEOUT;
        match c.state {
            State::ReqSent | State::MraReqRcvd => {
                c.reject = Some(Box::new((timeout, [0; 148])));
                let rej = self.rej_of(id.0, MsgResponse::Req);
                self.send(id.0, rej);
                self.remove(id.0);
            }
            State::MraReqSent | State::MraRepSent | State::RepSent | State::MraRepRcvd => {
                let what = if c.state == State::MraRepSent { MsgResponse::Rep } else { MsgResponse::Req };
                let rej = self.rej_of(id.0, what);
                self.send(id.0, rej);
                self.remove(id.0);
            }
            State::Established | State::DreqRcvd => self.run(now, id.0, Input::Disconnect, None),
            State::DreqSent | State::Timewait | State::Idle => {}
        }
    }

    /// [`Cm::destroy`] of every connection the consumer has not destroyed:
    /// what Linux does for a process that exits (closing its rdma_cm file
    /// destroys its ids), so its peers hear a DREQ, DREP or REJ instead of
    /// retrying into silence.
    pub fn destroy_all(&mut self, now: Instant) {
        let mut ids: Vec<u32> = self.conns.iter().filter(|(_, c)| !c.detached).map(|(k, _)| *k).collect();
        ids.extend(self.sidr.keys());
        ids.sort_unstable();
        for id in ids {
            self.destroy(now, CommId(id));
        }
    }

    /// The connections whose peer QP is known and that a dead peer would
    /// leave hanging: `(id, peer address, peer QPN)`, for a host that can
    /// tell whether that QP's process still lives ([`Cm::handle_peer_gone`]).
    pub fn watched(&self) -> Vec<(CommId, IpAddr, u32)> {
        let hanging = |s: State| !matches!(s, State::ReqSent | State::DreqRcvd | State::Timewait | State::Idle);
        let mut w: Vec<(CommId, IpAddr, u32)> = self
            .conns
            .iter()
            .filter(|(_, c)| !c.detached && c.remote_qpn != 0 && c.remote.is_some() && hanging(c.state))
            .map(|(k, c)| (CommId(*k), c.peer, c.remote_qpn))
            .collect();
        w.sort_unstable_by_key(|(id, _, _)| id.0);
        w
    }

    /// The peer of `id` died with no kernel outliving it to end its side
    /// (a softroce process of this host; Linux's CM, in the kernel, ends a
    /// dead process's connections in `cm_destroy_id`). `id` gets what that
    /// would have sent, as if it had arrived: a DREQ for a connection
    /// established (or whose RTU is pending), the DREP of this side's
    /// DREQ, a REJ for one being set up.
    pub fn handle_peer_gone(&mut self, now: Instant, id: CommId) {
        let Some(c) = self.conns.get(&id.0) else { return };
        let Some((theirs, _)) = c.remote else { return };
        let message: CmMessage = match c.state {
            State::Established | State::MraRepRcvd | State::RepSent => DreqRepr::new(theirs, id.0, c.local_qpn).into(),
            State::DreqSent => DrepRepr::new(theirs, id.0).into(),
            // The peer had this side's REQ (passive, not yet answered) or
            // REP (active, not yet established): `cm_destroy_id`'s REJ.
            State::MraReqRcvd => RejRepr::new(theirs, id.0, MsgResponse::Req, RejReason::CONSUMER_DEFINED).into(),
            State::MraRepSent => RejRepr::new(theirs, id.0, MsgResponse::Rep, RejReason::CONSUMER_DEFINED).into(),
            State::MraReqSent => RejRepr::new(theirs, id.0, MsgResponse::Req, RejReason::TIMEOUT).into(),
            State::ReqSent | State::DreqRcvd | State::Timewait | State::Idle => return,
        };
        let tid = if c.state == State::DreqSent { c.dreq_tid } else { c.tid };
        let (peer, local) = (c.peer, c.local);
        self.stats.peers_gone += 1;
        self.on_message(now, peer, local, tid, message);
    }

    /// When [`Cm::handle_timeout`] is next due.
    pub fn poll_timeout(&self) -> Option<Instant> {
        self.conns.values().filter_map(|c| c.timer).chain(self.sidr_timeout()).min()
    }

    /// Runs the timers due at `now`.
    pub fn handle_timeout(&mut self, now: Instant) {
        let due: Vec<u32> =
            self.conns.iter().filter(|(_, c)| c.timer.is_some_and(|t| t <= now)).map(|(k, _)| *k).collect();
        for id in due {
            let Some(c) = self.conns.get_mut(&id) else { continue };
            c.timer = None;
            let input = if c.state != State::Timewait && c.retries > 0 {
                c.retries -= 1;
                Input::Retry
            } else {
                Input::Expired
            };
            self.run(now, id, input, None);
        }
        self.sidr_timers(now);
    }

    /// The next MAD to send.
    pub fn poll_transmit(&mut self) -> Option<Transmit> {
        self.transmits.pop_front()
    }

    /// The next event for the consumer.
    pub fn poll_event(&mut self) -> Option<CmEvent> {
        self.events.pop_front()
    }

    /// A MAD received on QP 1 from `peer`, sent to `local`.
    pub fn handle_mad(&mut self, now: Instant, peer: IpAddr, local: IpAddr, bytes: &[u8]) {
        self.stats.received += 1;
        let mad = match CmMad::parse(bytes) {
            Ok(m) => m,
            Err(_) => {
                self.stats.malformed += 1;
                return;
            }
        };
        self.on_message(now, peer, local, mad.header.tid, mad.message);
    }

    /// A CM message with transaction ID `tid` from `peer` to `local`.
    fn on_message(&mut self, now: Instant, peer: IpAddr, local: IpAddr, tid: u64, message: CmMessage) {
        match message {
            CmMessage::Req(req) => self.on_req(now, peer, local, tid, req),
            CmMessage::Rep(rep) => {
                let Some(id) = self.conn_of(rep.remote_comm_id, None) else { return };
                let c = self.conns.get_mut(&id).expect("found");
                let input = match c.state {
                    State::ReqSent | State::MraReqRcvd => {
                        c.remote = Some((rep.local_comm_id, rep.local_ca_guid));
                        c.remote_qpn = rep.local_qpn;
                        self.by_remote.insert((rep.local_comm_id, rep.local_ca_guid), id);
                        self.push_event(id, CmEvent::RepReceived { id: CommId(id), rep: Box::new(rep) });
                        Input::Rep
                    }
                    _ if c.remote.map(|r| r.0) == Some(rep.local_comm_id) => Input::RepDup,
                    _ => {
                        self.stats.unknown += 1;
                        return;
                    }
                };
                self.run(now, id, input, None);
            }
            CmMessage::Rtu(m) => self.on_reply(now, m.remote_comm_id, m.local_comm_id, Input::Rtu),
            CmMessage::Drep(m) => self.on_reply(now, m.remote_comm_id, m.local_comm_id, Input::Drep),
            CmMessage::Mra(m) => {
                let input = match m.message_mraed {
                    MsgResponse::Req => Input::MraOfReq,
                    MsgResponse::Rep => Input::MraOfRep,
                    MsgResponse::Other | MsgResponse::Reserved => {
                        self.stats.ignored += 1;
                        return;
                    }
                };
                // An MRA of a REQ comes before the peer's comm ID is known here.
                let known = (input == Input::MraOfRep).then_some(m.local_comm_id);
                let Some(id) = self.conn_of(m.remote_comm_id, known) else { return };
                if self.accepts(id, input) {
                    let c = self.conns.get_mut(&id).expect("found");
                    c.period = conv(m.service_timeout) + conv(c.packet_life_time.saturating_add(1));
                }
                self.run(now, id, input, None);
            }
            CmMessage::Rej(m) => {
                // A REJ of a REQ may carry local comm ID 0 (no connection made there).
                let Some(id) = self.conn_of(m.remote_comm_id, (m.local_comm_id != 0).then_some(m.local_comm_id)) else {
                    return;
                };
                if self.accepts(id, Input::Rej) {
                    self.push_event(id, CmEvent::Rejected { id: CommId(id), rej: Box::new(m) });
                }
                self.run(now, id, Input::Rej, None);
            }
            CmMessage::Dreq(m) => {
                let Some(id) = self.conn_of(m.remote_comm_id, Some(m.local_comm_id)) else {
                    // Gone already (its timewait ended before a lost DREP's
                    // DREQ came again): answer anyway, as Linux does
                    // (`cm_issue_drep`), so the peer does not retry for 98 s.
                    let drep = DrepRepr::new(m.remote_comm_id, m.local_comm_id);
                    self.stats.sent += 1;
                    self.transmits.push_back(Transmit { from: local, to: peer, mad: CmMad::new(tid, drep) });
                    return;
                };
                let c = self.conns.get_mut(&id).expect("found");
                if c.local_qpn != m.remote_qpn {
                    // Linux ignores a DREQ that names another QP.
                    self.stats.ignored += 1;
                    return;
                }
                c.dreq_tid = tid;
                self.run(now, id, Input::Dreq, None);
            }
            CmMessage::SidrReq(req) => self.on_sidr_req(peer, local, tid, req),
            CmMessage::SidrRep(rep) => self.on_sidr_rep(peer, rep),
        }
    }

    fn on_req(&mut self, now: Instant, peer: IpAddr, local: IpAddr, tid: u64, req: ReqRepr) {
        let key = (req.local_comm_id, req.local_ca_guid);
        if let Some(&id) = self.by_remote.get(&key) {
            self.run(now, id, Input::ReqDup, None);
            return;
        }
        let reply = |reason| {
            let rej = RejRepr::new(0, req.local_comm_id, MsgResponse::Req, reason);
            Transmit { from: local, to: peer, mad: CmMad::new(tid, rej) }
        };
        let stale = self.conns.values().any(|c| {
            c.state == State::Timewait
                && c.remote_qpn == req.local_qpn
                && c.remote.is_some_and(|r| r.1 == req.local_ca_guid)
        });
        if stale {
            self.stats.stale += 1;
            self.stats.sent += 1;
            self.transmits.push_back(reply(RejReason::STALE_CONN));
            return;
        }
        if !self.listeners.contains_key(&req.service_id) {
            self.stats.no_listener += 1;
            self.stats.sent += 1;
            self.transmits.push_back(reply(RejReason::INVALID_SERVICE_ID));
            return;
        }
        let id = self.new_comm_id();
        // The passive side's REP period and retries come from the REQ.
        let period = conv(req.local_cm_response_timeout);
        self.conns.insert(
            id,
            Conn {
                remote: Some(key),
                remote_qpn: req.local_qpn,
                tid,
                dreq_tid: kernel_tid(self.config.tid_hi, id),
                ..Conn::new(
                    local,
                    peer,
                    period,
                    req.max_cm_retries,
                    req.primary_path.local_ack_timeout.saturating_sub(1),
                    req.primary_path.local_ack_timeout,
                )
            },
        );
        self.by_remote.insert(key, id);
        self.push_event(id, CmEvent::ReqReceived { id: CommId(id), req: Box::new(req), peer, local });
        self.run(now, id, Input::Req, None);
    }

    /// RTU, DREP, MRA: to this side's `local` comm ID, from `remote` (the
    /// peer's comm ID; `u32::MAX` for one not known yet).
    fn on_reply(&mut self, now: Instant, local: u32, remote: u32, input: Input) {
        let Some(id) = self.conn_of(local, (remote != u32::MAX).then_some(remote)) else { return };
        self.run(now, id, input, None);
    }

    /// The connection a message to `local` belongs to, if the message is
    /// from its peer (`remote`, when the message names one and the
    /// connection knows it).
    fn conn_of(&mut self, local: u32, remote: Option<u32>) -> Option<u32> {
        match self.conns.get(&local) {
            Some(c) if remote.is_none() || c.remote.is_none_or(|r| Some(r.0) == remote) => Some(local),
            _ => {
                self.stats.unknown += 1;
                None
            }
        }
    }

    /// Whether connection `id` has a row for `input` in its state.
    fn accepts(&self, id: u32, input: Input) -> bool {
        self.conns.get(&id).is_some_and(|c| cm_state::step(c.state, input).is_some())
    }

    fn conn(&self, id: CommId, want: State, what: &'static str) -> Result<&Conn, CmError> {
        let c = self.conns.get(&id.0).ok_or(CmError::UnknownId(id))?;
        if c.state != want {
            return Err(CmError::BadState { id, state: c.state, what });
        }
        Ok(c)
    }

    fn new_comm_id(&mut self) -> u32 {
        loop {
            self.rng ^= self.rng << 13;
            self.rng ^= self.rng >> 7;
            self.rng ^= self.rng << 17;
            let r = (self.rng >> 16) as u32;
            let id = (r & !self.config.comm_id_mask) | (self.config.comm_id_tag & self.config.comm_id_mask);
            if id != 0 && !self.conns.contains_key(&id) && !self.sidr.contains_key(&id) {
                return id;
            }
        }
    }

    fn push_event(&mut self, id: u32, e: CmEvent) {
        if !self.conns.get(&id).is_some_and(|c| c.detached) {
            self.events.push_back(e);
        }
    }

    /// Sends `mad` for connection `id`.
    fn send(&mut self, id: u32, mad: CmMad) {
        let c = &self.conns[&id];
        self.stats.sent += 1;
        self.transmits.push_back(Transmit { from: c.local, to: c.peer, mad });
    }

    /// Sends a retransmittable message and arms its timer.
    fn send_armed(&mut self, now: Instant, id: u32, mad: CmMad) {
        self.send(id, mad);
        let c = self.conns.get_mut(&id).expect("exists");
        c.last = Some(Box::new(mad));
        c.timer = Some(now + c.period);
    }

    fn rej_of(&self, id: u32, what: MsgResponse) -> CmMad {
        let c = &self.conns[&id];
        let (reason, pd) = c.reject.as_deref().copied().unwrap_or((RejReason::CONSUMER_DEFINED, [0; 148]));
        let mut rej = RejRepr::new(id, c.remote.map_or(0, |r| r.0), what, reason);
        rej.private_data = pd;
        CmMad::new(c.tid, rej)
    }

    fn remove(&mut self, id: u32) {
        if let Some(r) = self.conns.remove(&id).and_then(|c| c.remote) {
            self.by_remote.remove(&r);
        }
    }

    /// Steps connection `id` with `input` and performs the row's actions;
    /// `first` is the message a Send action of a consumer call sends.
    fn run(&mut self, now: Instant, id: u32, input: Input, first: Option<CmMad>) {
        let Some(state) = self.conns.get(&id).map(|c| c.state) else { return };
        let Some((to, actions)) = cm_state::step(state, input) else {
            self.stats.ignored += 1;
            return;
        };
        self.conns.get_mut(&id).expect("exists").state = to;
        for a in actions {
            self.act(now, id, *a, first);
        }
        if to == State::Idle {
            self.remove(id);
        }
    }

    fn act(&mut self, now: Instant, id: u32, a: Action, first: Option<CmMad>) {
        let c = &self.conns[&id];
        let (local, remote) = (id, c.remote.map_or(0, |r| r.0));
        match a {
            Action::SendReq | Action::SendRep => {
                if let Some(m) = first {
                    self.send_armed(now, id, m);
                }
            }
            Action::SendRtu => {
                let mad = CmMad::new(c.tid, RtuRepr::new(local, remote));
                self.send(id, mad);
            }
            Action::SendMraOfReq | Action::SendMraOfRep => {
                let what = if a == Action::SendMraOfReq { MsgResponse::Req } else { MsgResponse::Rep };
                let mad = CmMad::new(c.tid, MraRepr::new(local, remote, what, MRA_SERVICE_TIMEOUT));
                self.send(id, mad);
            }
            Action::SendRejOfReq => {
                let m = self.rej_of(id, MsgResponse::Req);
                self.send(id, m);
            }
            Action::SendRejOfRep => {
                let m = self.rej_of(id, MsgResponse::Rep);
                self.send(id, m);
            }
            Action::SendDreq => {
                let mad = CmMad::new(c.dreq_tid, DreqRepr::new(local, remote, c.remote_qpn));
                let c = self.conns.get_mut(&id).expect("exists");
                c.period = c.base_period;
                c.retries = c.max_retries;
                self.send_armed(now, id, mad);
            }
            Action::SendDrep => {
                let mad = CmMad::new(c.dreq_tid, DrepRepr::new(local, remote));
                self.send(id, mad);
            }
            Action::Resend => {
                if let Some(m) = c.last.as_deref().copied() {
                    self.stats.retransmitted += 1;
                    self.stats.sent += 1;
                    self.transmits.push_back(Transmit { from: c.local, to: c.peer, mad: m });
                    let c = self.conns.get_mut(&id).expect("exists");
                    c.timer = Some(now + c.period);
                }
            }
            Action::ArmForMra => {
                let c = self.conns.get_mut(&id).expect("exists");
                c.timer = Some(now + c.period);
                c.retries = c.max_retries;
            }
            Action::Disarm => {
                let c = self.conns.get_mut(&id).expect("exists");
                c.timer = None;
                c.last = None;
            }
            Action::ArmTimewait => {
                let c = self.conns.get_mut(&id).expect("exists");
                c.timer = Some(now + conv(c.ack_timeout));
            }
            // ReqReceived, RepReceived and Rejected carry the message and are
            // pushed where it is parsed.
            Action::EventReq | Action::EventRep | Action::EventRejected => {}
            Action::EventEstablished => self.push_event(id, CmEvent::Established { id: CommId(id) }),
            Action::EventUnreachable => self.push_event(id, CmEvent::Unreachable { id: CommId(id) }),
            Action::EventDreq => self.push_event(id, CmEvent::DreqReceived { id: CommId(id) }),
            Action::EventDrep => self.push_event(id, CmEvent::DrepReceived { id: CommId(id) }),
            Action::EventDisconnectTimeout => self.push_event(id, CmEvent::DisconnectTimedOut { id: CommId(id) }),
            Action::EventTimewaitExit => self.push_event(id, CmEvent::TimewaitExit { id: CommId(id) }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::Conn;

    /// A server's table holds every connection of the last timewait
    /// (2 s at rdma_cm's ACK timeout): its slots stay small, with the
    /// retransmittable message and the reject boxed (a slot was 568 bytes
    /// with both inline; an `rping -P` server's table of 256 slots took an
    /// mmap of 148 KiB).
    #[test]
    fn a_connection_s_slot_in_the_table_is_small() {
        assert!(std::mem::size_of::<Conn>() <= 160, "{} bytes", std::mem::size_of::<Conn>());
    }
}
