//! Two CM agents (`roce_cm::cm::Cm`) on virtual time, joined by a scripted
//! or a lossy network: the exchange Linux makes (REQ, REP, RTU, DREQ, DREP
//! with its TIDs), every timer of rdmacm.md 1.12 to the millisecond, the
//! answers to duplicates, strays and stale REQs, and 400 random runs that
//! drop, duplicate and reorder MADs.

use std::net::{IpAddr, Ipv4Addr};
use std::time::{Duration, Instant};

use roce_cm::cm::{Cm, CmConfig, CmEvent, CommId, ConnectParams, Transmit, conv};
use roce_cm::cm_state::State;
use roce_cm::wire::{
    AttributeId, CmMad, CmMessage, IpServiceId, PathMtu, PortSpace, RejReason, RepRepr, ReqPath, ReqRepr,
    TransportType, kernel_tid,
};
use roce_wire::Psn;

mod common;
use common::{deliver, events, sends};
const A_IP: IpAddr = IpAddr::V4(Ipv4Addr::new(10, 77, 0, 3));
const B_IP: IpAddr = IpAddr::V4(Ipv4Addr::new(10, 77, 0, 2));
const A_GUID: u64 = 0x5054_00ff_fe77_0003;
const B_GUID: u64 = 0x5054_00ff_fe77_0002;
const A_QPN: u32 = 0x11;
const B_QPN: u32 = 0x12;

fn service() -> u64 {
    IpServiceId { port_space: PortSpace::Tcp, port: 7174 }.service_id()
}

fn agents(seed: u64) -> (Cm, Cm) {
    let cfg = |guid| CmConfig { ca_guid: guid, tid_hi: 2, ack_delay: 15, comm_id_mask: 0, comm_id_tag: 0 };
    let mut b = Cm::new(cfg(B_GUID), seed.wrapping_mul(3) + 1);
    b.listen(service()).unwrap();
    (Cm::new(cfg(A_GUID), seed.wrapping_mul(7) + 2), b)
}

/// rping's REQ (rdmacm.md 1.7): RC, resources 1/1, timeouts 20, retry 7,
/// RNR retry 7, 15 CM retries, MTU 1024, ACK timeout 19.
fn req() -> ConnectParams {
    let path = ReqPath {
        local_lid: 0xffff,
        remote_lid: 0xffff,
        local_gid: Ipv4Addr::new(10, 77, 0, 3).to_ipv6_mapped(),
        remote_gid: Ipv4Addr::new(10, 77, 0, 2).to_ipv6_mapped(),
        flow_label: 0xAE362,
        hop_limit: 64,
        local_ack_timeout: 19,
        ..ReqPath::default()
    };
    let req = ReqRepr {
        service_id: service(),
        local_qpn: A_QPN,
        responder_resources: 1,
        initiator_depth: 1,
        remote_cm_response_timeout: 20,
        transport: TransportType::Rc,
        starting_psn: Psn::new(0xed57a9),
        local_cm_response_timeout: 20,
        retry_count: 7,
        pkey: 0xffff,
        path_mtu: PathMtu::Mtu1024,
        rnr_retry_count: 7,
        max_cm_retries: 15,
        primary_path: path,
        ..ReqRepr::default()
    };
    ConnectParams { local: A_IP, peer: B_IP, req, packet_life_time: 18 }
}

fn rep() -> RepRepr {
    RepRepr {
        local_qpn: B_QPN,
        starting_psn: Psn::new(0x0eeec9),
        responder_resources: 1,
        initiator_depth: 1,
        rnr_retry_count: 7,
        ..RepRepr::default()
    }
}

fn attrs(t: &[Transmit]) -> Vec<AttributeId> {
    t.iter().map(|t| t.mad.message.attr_id()).collect()
}

/// A connected pair: (a, b, a's id, b's id, now).
fn connected() -> (Cm, Cm, CommId, CommId, Instant) {
    let now = Instant::now();
    let (mut a, mut b) = agents(1);
    let ia = a.connect(now, req());
    let r = sends(&mut a);
    deliver(&mut b, now, &r[0]);
    let Some(CmEvent::ReqReceived { id: ib, .. }) = b.poll_event() else { panic!("no REQ event") };
    b.accept(now, ib, rep()).unwrap();
    deliver(&mut a, now, &sends(&mut b)[0]);
    assert!(matches!(a.poll_event(), Some(CmEvent::RepReceived { .. })));
    a.establish(now, ia).unwrap();
    deliver(&mut b, now, &sends(&mut a)[0]);
    assert_eq!(events(&mut b), [CmEvent::Established { id: ib }]);
    (a, b, ia, ib, now)
}

#[test]
fn a_connection_is_made_and_torn_down_with_the_mads_and_tids_linux_sends() {
    let now = Instant::now();
    let (mut a, mut b) = agents(1);
    let ia = a.connect(now, req());
    let r = sends(&mut a);
    assert_eq!(attrs(&r), [AttributeId::REQ]);
    let CmMessage::Req(sent) = r[0].mad.message else { unreachable!() };
    assert_eq!((sent.local_comm_id, sent.local_ca_guid, sent.local_qpn), (ia.0, A_GUID, A_QPN));
    assert_eq!(r[0].mad.header.tid, kernel_tid(2, ia.0), "the REQ's TID: hi word and the comm ID");
    assert_eq!((r[0].from, r[0].to), (A_IP, B_IP));
    assert_eq!(a.state(ia), Some(State::ReqSent));

    deliver(&mut b, now, &r[0]);
    let ev = events(&mut b);
    let [CmEvent::ReqReceived { id: ib, req: got, peer, local }] = &ev[..] else { panic!("{ev:?}") };
    let ib = *ib;
    assert_eq!((**got, *peer, *local), (sent, A_IP, B_IP));
    assert_eq!(b.state(ib), Some(State::MraReqSent));
    assert!(sends(&mut b).is_empty(), "the MRA is delayed: nothing is sent before the consumer answers");

    b.accept(now, ib, rep()).unwrap();
    let p = sends(&mut b);
    assert_eq!(attrs(&p), [AttributeId::REP]);
    let CmMessage::Rep(rp) = p[0].mad.message else { unreachable!() };
    assert_eq!((rp.local_comm_id, rp.remote_comm_id, rp.local_ca_guid, rp.target_ack_delay), (ib.0, ia.0, B_GUID, 15));
    assert_eq!(p[0].mad.header.tid, r[0].mad.header.tid, "the REP carries the REQ's TID");
    assert_eq!((p[0].from, p[0].to), (B_IP, A_IP));

    deliver(&mut a, now, &p[0]);
    assert!(matches!(&events(&mut a)[..], [CmEvent::RepReceived { id, rep }] if *id == ia && rep.local_qpn == B_QPN));
    a.establish(now, ia).unwrap();
    let u = sends(&mut a);
    assert_eq!(attrs(&u), [AttributeId::RTU]);
    assert_eq!(u[0].mad.header.tid, r[0].mad.header.tid, "the RTU too");
    deliver(&mut b, now, &u[0]);
    assert_eq!(events(&mut b), [CmEvent::Established { id: ib }]);
    assert_eq!((a.state(ia), b.state(ib)), (Some(State::Established), Some(State::Established)));

    // The active side disconnects (rping's order).
    let t = now + Duration::from_millis(100);
    a.disconnect(t, ia).unwrap();
    let d = sends(&mut a);
    assert_eq!(attrs(&d), [AttributeId::DREQ]);
    let CmMessage::Dreq(dq) = d[0].mad.message else { unreachable!() };
    assert_eq!(dq.remote_qpn, B_QPN, "the DREQ names the receiver's QP");
    deliver(&mut b, t, &d[0]);
    assert_eq!(events(&mut b), [CmEvent::DreqReceived { id: ib }]);
    b.disconnect(t, ib).unwrap();
    let e = sends(&mut b);
    assert_eq!(attrs(&e), [AttributeId::DREP]);
    assert_eq!(e[0].mad.header.tid, d[0].mad.header.tid, "the DREP echoes the DREQ's TID");
    deliver(&mut a, t, &e[0]);
    assert_eq!(events(&mut a), [CmEvent::DrepReceived { id: ia }]);
    assert_eq!((a.state(ia), b.state(ib)), (Some(State::Timewait), Some(State::Timewait)));

    // Timewait: conv(19) = 2048 ms on both sides.
    assert_eq!(a.poll_timeout(), Some(t + Duration::from_millis(2048)));
    a.handle_timeout(t + Duration::from_millis(2047));
    assert!(events(&mut a).is_empty());
    a.handle_timeout(t + Duration::from_millis(2048));
    b.handle_timeout(t + Duration::from_millis(2048));
    assert_eq!(events(&mut a), [CmEvent::TimewaitExit { id: ia }]);
    assert_eq!(events(&mut b), [CmEvent::TimewaitExit { id: ib }]);
    assert_eq!((a.state(ia), b.state(ib), a.poll_timeout(), b.poll_timeout()), (None, None, None, None));
}

#[test]
fn a_lost_req_is_sent_every_6144_ms_15_times_then_unreachable() {
    let now = Instant::now();
    let (mut a, _) = agents(2);
    let ia = a.connect(now, req());
    let first = sends(&mut a);
    let period = Duration::from_millis(6144);
    assert_eq!(conv(18) * 2 + conv(20), period);
    for k in 1..=15u32 {
        assert_eq!(a.poll_timeout(), Some(now + period * k));
        a.handle_timeout(now + period * k - Duration::from_millis(1));
        assert!(sends(&mut a).is_empty(), "try {k} came early");
        a.handle_timeout(now + period * k);
        assert_eq!(sends(&mut a), first, "try {k} is the same REQ");
    }
    a.handle_timeout(now + period * 16);
    assert_eq!(events(&mut a), [CmEvent::Unreachable { id: ia }]);
    assert_eq!((a.state(ia), a.poll_timeout(), a.stats().retransmitted), (None, None, 15));
}

#[test]
fn a_req_for_a_service_nobody_listens_on_gets_rej_8() {
    let now = Instant::now();
    let (mut a, mut b) = agents(3);
    b.unlisten(service());
    let ia = a.connect(now, req());
    deliver(&mut b, now, &sends(&mut a)[0]);
    assert!(events(&mut b).is_empty());
    let j = sends(&mut b);
    let CmMessage::Rej(rej) = j[0].mad.message else { panic!("{:?}", attrs(&j)) };
    assert_eq!((rej.local_comm_id, rej.remote_comm_id, rej.reason), (0, ia.0, RejReason::INVALID_SERVICE_ID));
    deliver(&mut a, now, &j[0]);
    assert!(matches!(&events(&mut a)[..], [CmEvent::Rejected { id, rej }] if *id == ia && rej.reason.0 == 8));
    assert_eq!((a.state(ia), a.poll_timeout(), b.stats().no_listener), (None, None, 1));
}

#[test]
fn a_duplicate_req_while_the_consumer_decides_gets_an_mra_and_the_req_waits_longer() {
    let now = Instant::now();
    let (mut a, mut b) = agents(4);
    let ia = a.connect(now, req());
    let r = sends(&mut a);
    deliver(&mut b, now, &r[0]);
    assert_eq!(events(&mut b).len(), 1);
    // The consumer takes longer than 6.1 s: the REQ comes again.
    let t = now + Duration::from_millis(6144);
    a.handle_timeout(t);
    deliver(&mut b, t, &sends(&mut a)[0]);
    assert!(events(&mut b).is_empty(), "a duplicate REQ makes no second connection");
    let m = sends(&mut b);
    let CmMessage::Mra(mra) = m[0].mad.message else { panic!("{:?}", attrs(&m)) };
    assert_eq!((mra.remote_comm_id, mra.service_timeout), (ia.0, 24));
    deliver(&mut a, t, &m[0]);
    assert_eq!(a.state(ia), Some(State::MraReqRcvd));
    assert_eq!(a.poll_timeout(), Some(t + conv(24) + conv(19)), "65,536 + 2,048 ms");
    assert_eq!(conv(24) + conv(19), Duration::from_millis(67_584));
}

#[test]
fn a_lost_rtu_is_answered_by_the_rep_s_retransmission_and_sent_again() {
    let now = Instant::now();
    let (mut a, mut b) = agents(5);
    let ia = a.connect(now, req());
    deliver(&mut b, now, &sends(&mut a)[0]);
    let Some(CmEvent::ReqReceived { id: ib, .. }) = b.poll_event() else { panic!() };
    b.accept(now, ib, rep()).unwrap();
    deliver(&mut a, now, &sends(&mut b)[0]);
    assert_eq!(events(&mut a).len(), 1);
    a.establish(now, ia).unwrap();
    let _lost_rtu = sends(&mut a);
    // The REP again after conv(20) = 4096 ms; the active side answers with the RTU.
    assert_eq!(b.poll_timeout(), Some(now + Duration::from_millis(4096)));
    let t = now + Duration::from_millis(4096);
    b.handle_timeout(t);
    let again = sends(&mut b);
    assert_eq!(attrs(&again), [AttributeId::REP]);
    deliver(&mut a, t, &again[0]);
    assert!(events(&mut a).is_empty(), "no second REP event");
    let u = sends(&mut a);
    assert_eq!(attrs(&u), [AttributeId::RTU]);
    deliver(&mut b, t, &u[0]);
    assert!(events(&mut b).contains(&CmEvent::Established { id: ib }));
    assert_eq!(b.poll_timeout(), None);
}

#[test]
fn dreq_retries_a_dreq_for_another_qp_is_ignored_and_an_unanswered_one_times_out() {
    let (mut a, mut b, ia, ib, now) = connected();
    a.disconnect(now, ia).unwrap();
    let d = sends(&mut a);
    // A DREQ naming another QP: Linux ignores it.
    let CmMessage::Dreq(mut wrong) = d[0].mad.message else { unreachable!() };
    wrong.remote_qpn = 0x99;
    b.handle_mad(now, A_IP, B_IP, &CmMad::new(d[0].mad.header.tid, wrong).to_bytes());
    assert!(events(&mut b).is_empty());
    assert_eq!(b.state(ib), Some(State::Established));
    // Nobody answers: 15 more DREQs every 6144 ms, then DISCONNECTED with a
    // timeout and the timewait.
    let period = Duration::from_millis(6144);
    for k in 1..=15u32 {
        a.handle_timeout(now + period * k);
        assert_eq!(attrs(&sends(&mut a)), [AttributeId::DREQ], "try {k}");
    }
    a.handle_timeout(now + period * 16);
    assert_eq!(events(&mut a), [CmEvent::DisconnectTimedOut { id: ia }]);
    assert_eq!(a.state(ia), Some(State::Timewait));
    a.handle_timeout(now + period * 16 + Duration::from_millis(2048));
    assert_eq!(events(&mut a), [CmEvent::TimewaitExit { id: ia }]);
}

#[test]
fn a_new_req_from_a_qp_in_timewait_is_stale_and_a_late_dreq_gets_its_drep_again() {
    let (mut a, mut b, ia, ib, now) = connected();
    a.disconnect(now, ia).unwrap();
    let d = sends(&mut a);
    deliver(&mut b, now, &d[0]);
    b.disconnect(now, ib).unwrap();
    let drep = sends(&mut b);
    // The DREP was lost: the DREQ again, and b, in timewait, answers it again.
    let t = now + Duration::from_millis(6144);
    a.handle_timeout(t);
    deliver(&mut b, t, &sends(&mut a)[0]);
    assert_eq!(sends(&mut b), drep);
    deliver(&mut a, t, &drep[0]);
    assert_eq!(a.state(ia), Some(State::Timewait));
    // The same QP connects again at once: REJ 10 (stale connection).
    let again = a.connect(t, req());
    deliver(&mut b, t, &sends(&mut a)[0]);
    let j = sends(&mut b);
    let CmMessage::Rej(rej) = j[0].mad.message else { panic!("{:?}", attrs(&j)) };
    assert_eq!((rej.reason, rej.remote_comm_id), (RejReason::STALE_CONN, again.0));
    assert_eq!(b.stats().stale, 1);
}

#[test]
fn strays_and_garbage_are_counted_and_change_nothing() {
    let (mut a, mut b, ia, ib, now) = connected();
    // An RTU from another comm ID, a REP for nobody, 255 bytes, another class.
    let rtu = CmMad::new(1, roce_cm::wire::RtuRepr::new(0x1234, ib.0)).to_bytes();
    b.handle_mad(now, A_IP, B_IP, &rtu);
    let rep = CmMad::new(1, RepRepr { remote_comm_id: 0x77, ..rep() }).to_bytes();
    a.handle_mad(now, B_IP, A_IP, &rep);
    a.handle_mad(now, B_IP, A_IP, &rep[..255]);
    let mut other = rep;
    other[1] = 0x04;
    a.handle_mad(now, B_IP, A_IP, &other);
    assert!(events(&mut a).is_empty() && events(&mut b).is_empty());
    assert!(sends(&mut a).is_empty() && sends(&mut b).is_empty());
    assert_eq!((a.stats().unknown, a.stats().malformed, b.stats().unknown), (1, 2, 1));
    assert_eq!((a.state(ia), b.state(ib)), (Some(State::Established), Some(State::Established)));
    // A DREQ for a connection b no longer has is answered with a DREP
    // (the peer's lost-DREP retry after b's timewait ended).
    let dreq = CmMad::new(0x55, roce_cm::wire::DreqRepr::new(0x4321, 0x8765, B_QPN));
    b.handle_mad(now, A_IP, B_IP, &dreq.to_bytes());
    let d = sends(&mut b);
    let CmMessage::Drep(drep) = d[0].mad.message else { panic!("{:?}", attrs(&d)) };
    assert_eq!((drep.local_comm_id, drep.remote_comm_id, d[0].mad.header.tid, d[0].to), (0x8765, 0x4321, 0x55, A_IP));
}

/// A seeded network: each MAD is dropped, duplicated or delayed.
struct Lossy {
    rng: u64,
    drop: f64,
    dup: f64,
    /// (deliver at, to b?, transmit)
    wire: Vec<(Instant, bool, Transmit)>,
}

impl Lossy {
    fn roll(&mut self) -> f64 {
        self.rng ^= self.rng << 13;
        self.rng ^= self.rng >> 7;
        self.rng ^= self.rng << 17;
        (self.rng >> 11) as f64 / (1u64 << 53) as f64
    }

    fn put(&mut self, now: Instant, to_b: bool, t: Transmit) {
        if self.roll() < self.drop {
            return;
        }
        let copies = if self.roll() < self.dup { 2 } else { 1 };
        for _ in 0..copies {
            let delay = Duration::from_millis((self.roll() * 3000.0) as u64);
            self.wire.push((now + delay, to_b, t));
        }
    }
}

/// 400 runs with 20% loss, 10% duplication and delays up to 3 s (so MADs
/// overtake each other and retransmissions): a consumer on each side that
/// accepts, establishes and disconnects as rping does. Every run ends with
/// both sides connected once and then disconnected, in the order the
/// protocol allows, and nothing left behind.
/// One connection from `a` to `b` over `net`, made and torn down by the
/// consumers as rping's are, run until both agents are quiet: the events
/// each side saw, the two comm IDs and when it ended.
fn connect_and_disconnect(
    a: &mut Cm,
    b: &mut Cm,
    net: &mut Lossy,
    start: Instant,
    seed: u64,
) -> (Vec<CmEvent>, Vec<CmEvent>, CommId, CommId, Instant) {
    let ia = a.connect(start, req());
    let (mut ea, mut eb) = (Vec::new(), Vec::new());
    let mut ib = None;
    let mut now = start;
    let mut disconnected = false;
    loop {
        for t in sends(a) {
            net.put(now, true, t);
        }
        for t in sends(b) {
            net.put(now, false, t);
        }
        // The consumers.
        for e in events(a) {
            if let CmEvent::RepReceived { id, .. } = e {
                a.establish(now, id).unwrap();
            }
            ea.push(e);
        }
        for e in events(b) {
            match &e {
                CmEvent::ReqReceived { id, .. } => {
                    assert!(ib.is_none(), "seed {seed}: a second connection on b");
                    ib = Some(*id);
                    b.accept(now, *id, rep()).unwrap();
                }
                CmEvent::DreqReceived { id } => b.disconnect(now, *id).unwrap(),
                _ => {}
            }
            eb.push(e);
        }
        if !disconnected && eb.contains(&CmEvent::Established { id: ib.unwrap_or(CommId(0)) }) {
            // Both connected: a disconnects a moment later.
            if a.state(ia) == Some(State::Established) {
                a.disconnect(now, ia).unwrap();
                disconnected = true;
                continue;
            }
        }
        let next = [a.poll_timeout(), b.poll_timeout(), net.wire.iter().map(|w| w.0).min()].into_iter().flatten().min();
        let Some(next) = next else { break };
        assert!(next - start < Duration::from_secs(3600), "seed {seed}: still running after an hour");
        now = next;
        a.handle_timeout(now);
        b.handle_timeout(now);
        let (due, rest): (Vec<_>, Vec<_>) = net.wire.drain(..).partition(|w| w.0 <= now);
        net.wire = rest;
        for (_, to_b, t) in due {
            if to_b { deliver(b, now, &t) } else { deliver(a, now, &t) }
        }
    }
    let ib = ib.unwrap_or_else(|| panic!("seed {seed}: b never saw the REQ: {ea:?}"));
    (ea, eb, ia, ib, now)
}

fn kinds(ev: &[CmEvent]) -> Vec<&'static str> {
    ev.iter()
        .map(|e| match e {
            CmEvent::ReqReceived { .. } => "req",
            CmEvent::RepReceived { .. } => "rep",
            CmEvent::Established { .. } => "established",
            CmEvent::Rejected { .. } => "rejected",
            CmEvent::Unreachable { .. } => "unreachable",
            CmEvent::DreqReceived { .. } => "dreq",
            CmEvent::DrepReceived { .. } => "drep",
            CmEvent::DisconnectTimedOut { .. } => "dreq-timeout",
            CmEvent::TimewaitExit { .. } => "timewait-exit",
            CmEvent::SidrReqReceived { .. } | CmEvent::SidrRepReceived { .. } => "sidr",
        })
        .collect()
}

#[test]
fn four_hundred_lossy_runs_connect_and_disconnect_cleanly() {
    let (mut retransmitted, mut ignored, mut answered) = (0, 0, 0);
    for seed in 1..=400u64 {
        let (mut a, mut b) = agents(seed);
        let mut net =
            Lossy { rng: seed.wrapping_mul(0x2545_f491_4f6c_dd1d) | 1, drop: 0.2, dup: 0.1, wire: Vec::new() };
        let (ea, eb, ia, ib, _) = connect_and_disconnect(&mut a, &mut b, &mut net, Instant::now(), seed);
        assert_eq!(kinds(&ea), ["rep", "drep", "timewait-exit"], "seed {seed}: a saw {ea:?}");
        assert_eq!(kinds(&eb), ["req", "established", "dreq", "timewait-exit"], "seed {seed}: b saw {eb:?}");
        assert!(ea.iter().all(|e| !matches!(e, CmEvent::RepReceived { id, .. } if *id != ia)));
        assert_eq!((a.state(ia), b.state(ib)), (None, None), "seed {seed}");
        assert_eq!((a.poll_timeout(), b.poll_timeout()), (None, None), "seed {seed}");
        let (sa, sb) = (a.stats(), b.stats());
        let run_retransmitted = sa.retransmitted + sb.retransmitted;
        retransmitted += run_retransmitted;
        ignored += sa.ignored + sb.ignored;
        // REQ, REP, RTU, DREQ, DREP, the retransmissions, and the rest: answers.
        answered += u64::from(sa.sent + sb.sent > 5 + run_retransmitted);
    }
    // The faults happened: retransmissions, duplicates that changed nothing,
    // answers to duplicates (MRA, RTU or DREP again).
    eprintln!(
        "{retransmitted} retransmissions, {ignored} ignored duplicates, {answered} runs with answers to duplicates"
    );
    assert!(retransmitted > 200 && ignored > 100 && answered > 50);
}

/// Churn: one pair of agents makes and tears down 1,000 connections one
/// after another (every tenth MAD lost), and holds no connection state
/// afterwards: each connection is gone once its timewait ends.
#[test]
fn a_thousand_connections_one_after_another_leave_no_state() {
    let (mut a, mut b) = agents(7);
    let mut net = Lossy { rng: 0x2545_f491_4f6c_dd1d, drop: 0.1, dup: 0.0, wire: Vec::new() };
    let mut now = Instant::now();
    for i in 0..1000u64 {
        let (ea, eb, ia, ib, end) = connect_and_disconnect(&mut a, &mut b, &mut net, now, i);
        assert_eq!(kinds(&ea), ["rep", "drep", "timewait-exit"], "connection {i}: a saw {ea:?}");
        assert_eq!(kinds(&eb), ["req", "established", "dreq", "timewait-exit"], "connection {i}: b saw {eb:?}");
        assert_eq!((a.state(ia), b.state(ib)), (None, None), "connection {i}");
        assert_eq!((a.connections(), b.connections()), (0, 0), "connection {i} left state behind");
        now = end;
    }
    assert!(a.stats().retransmitted > 0, "MADs were lost and sent again");
}

/// A peer that dies unheard is handled as if its `destroy` had sent what
/// Linux's `cm_destroy_id` sends: the survivor of an established
/// connection gets the DREQ's event (its DREP goes nowhere), one whose
/// REQ the dead side held gets the REJ's. Each outcome equals the one the
/// dead side's real destroy causes.
#[test]
fn a_dead_peer_is_handled_as_its_destroy_would_have_been() {
    // Established: the survivor sees the DREQ.
    let (mut a, b, ia, ib, now) = connected();
    assert_eq!(a.watched(), [(ia, B_IP, B_QPN)]);
    assert_eq!(b.watched(), [(ib, A_IP, A_QPN)]);
    a.handle_peer_gone(now, ia);
    assert_eq!(events(&mut a), [CmEvent::DreqReceived { id: ia }]);
    assert_eq!((a.state(ia), a.stats().peers_gone, a.stats().received), (Some(State::DreqRcvd), 1, 1));
    assert!(a.watched().is_empty(), "nothing more to watch");
    // The same as b's destroy, really delivered.
    let (mut a2, mut b2, ia2, ib2, now2) = connected();
    b2.destroy(now2, ib2);
    deliver(&mut a2, now2, &sends(&mut b2)[0]);
    assert_eq!(events(&mut a2), [CmEvent::DreqReceived { id: ia2 }]);
    assert_eq!(a2.state(ia2), a.state(ia));
    drop(b);

    // The passive side holds the REQ (its consumer deciding) and dies:
    // the active side is rejected, as by the REJ its destroy sends.
    let now = Instant::now();
    let (mut a, mut b) = agents(9);
    let ia = a.connect(now, req());
    deliver(&mut b, now, &sends(&mut a)[0]);
    let Some(CmEvent::ReqReceived { id: ib, .. }) = b.poll_event() else { panic!("no REQ event") };
    // An MRA makes the REQ's holder known to the active side.
    let t = now + Duration::from_millis(6144);
    a.handle_timeout(t);
    deliver(&mut b, t, &sends(&mut a)[0]);
    deliver(&mut a, t, &sends(&mut b)[0]);
    assert_eq!(a.state(ia), Some(State::MraReqRcvd));
    // Its QP is not known before the REP: nothing to watch yet.
    assert!(a.watched().is_empty());
    assert_eq!(b.watched(), [(ib, A_IP, A_QPN)]);
    // The active side dies while the passive consumer decides.
    b.handle_peer_gone(t, ib);
    assert!(matches!(&events(&mut b)[..], [CmEvent::Rejected { id, .. }] if *id == ib));
    assert_eq!(b.state(ib), None);
}
