//! RC connections made by the Communication Manager over real sockets: two
//! devices on leased loopback addresses, each with its `CmService` (QP 1
//! and a `roce_cm` agent), connect the way rdma_cm does. The REQ and REP
//! come from `roce_cm::cma` (rping's values), each side moves its QP with
//! what the other's message says, data flows, and the disconnect ends in
//! timewait. The capture shows every MAD as Linux frames it: a UD
//! SEND_ONLY from QP 1 to QP 1, Q_Key 0x80010000, P_Key 0xffff, AckReq set.

mod common;

use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use roce_cm::cm::{CmEvent, ConnectParams};
use roce_cm::cma::{self, LocalEnd, WireConnParam};
use roce_cm::wire::mad::{GSI_QKEY, GSI_QPN};
use roce_cm::wire::{AttributeId, CmMad, IpServiceId, PortSpace, RejReason};
use roce_wire::{Opcode, Packet, Psn};
use softroce::cm::CmService;
use softroce::config::LoopbackLease;
use softroce::testing::{End, EndSpec};
use softroce::{
    AccessFlags, ConnectOptions, Cq, Options, Payload, QpEndpoint, RecvWr, SendFlags, SendWr, Wc, WcOpcode, WcStatus,
    WrOpcode,
};

const PORT: u16 = 7174;
const WAIT: Duration = Duration::from_secs(10);

/// A device on a leased address with its CM service, and a test's end on it.
struct Side {
    _lease: LoopbackLease,
    cm: CmService,
    end: End,
}

impl std::ops::Deref for Side {
    type Target = End;

    fn deref(&self) -> &End {
        &self.end
    }
}

fn end(pcap: Option<std::path::PathBuf>, seed: u64) -> Side {
    let lease = LoopbackLease::take().unwrap();
    let access = AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_READ;
    let spec = EndSpec { cq_entries: 64, mr_len: 1 << 16, access, qp_depth: 32 };
    let end = End::open(&lease.device().unwrap(), Options { pcap, ..Options::default() }, spec);
    let cm = CmService::open(&end.ctx, seed).unwrap();
    Side { _lease: lease, cm, end }
}

fn local(e: &End, psn: u32) -> LocalEnd {
    common::local_end(&e.ctx, &e.qp, psn)
}

fn wait_wc(cq: &Cq) -> Wc {
    softroce::testing::wait_one(cq, WAIT)
}

/// The QP moves rdma_cm derives from the CM exchange (rdma_init_qp_attr):
/// the peer's QPN and starting PSN, this side's own PSN, MTU 1024, the
/// ACK timeout the REQ names.
fn connect_qp(e: &End, my_psn: u32, peer: IpAddr, peer_qpn: u32, peer_psn: u32) {
    let o = ConnectOptions {
        mtu: Some(softroce::Mtu::Mtu1024),
        timeout: 19,
        retry_cnt: 7,
        rnr_retry: 7,
        max_rd_atomic: 1,
        ..ConnectOptions::default()
    };
    e.qp.connect_with(my_psn, &QpEndpoint { qpn: peer_qpn.into(), psn: peer_psn, gid: peer }, &o).unwrap();
}

#[test]
fn two_devices_connect_by_cm_mads_move_data_and_disconnect() {
    let dir = std::env::temp_dir().join(format!("softroce-cm-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let pcap = dir.join("client.pcap");
    let (c, s) = (end(Some(pcap.clone()), 11), end(None, 12));
    let service = IpServiceId::new(PortSpace::Tcp, PORT).service_id();
    s.cm.listen(service).unwrap();
    let rping = WireConnParam { responder_resources: 1, initiator_depth: 1, ..WireConnParam::default() };
    let (c_addr, s_addr) = (c.cm.local_addr(), s.cm.local_addr());
    let req = cma::rc_req(
        PortSpace::Tcp,
        SocketAddr::new(c_addr, 40000),
        SocketAddr::new(s_addr, PORT),
        &local(&c, 0xed57a9),
        &rping,
    )
    .unwrap();
    let id_c = c.cm.connect(ConnectParams { local: c_addr, peer: s_addr, req, packet_life_time: 18 });

    // The server: the REQ names the client's QP and PSN.
    let Some(CmEvent::ReqReceived { id: id_s, req: got, peer, .. }) = s.cm.wait_event(WAIT) else {
        panic!("no REQ at the server")
    };
    assert_eq!(
        (peer, got.local_qpn, got.starting_psn, got.service_id),
        (c_addr, c.qp.qpn().get(), Psn::new(0xed57a9), service)
    );
    connect_qp(&s, 0x0eeec9, peer, got.local_qpn, got.starting_psn.value());
    s.cm.accept(id_s, cma::rc_rep(&local(&s, 0x0eeec9), &rping).unwrap()).unwrap();

    // The client: the REP names the server's QP and PSN; then the RTU.
    let Some(CmEvent::RepReceived { id, rep }) = c.cm.wait_event(WAIT) else { panic!("no REP at the client") };
    assert_eq!((id, rep.local_qpn, rep.starting_psn), (id_c, s.qp.qpn().get(), Psn::new(0x0eeec9)));
    connect_qp(&c, 0xed57a9, s_addr, rep.local_qpn, rep.starting_psn.value());
    c.cm.establish(id_c).unwrap();
    assert_eq!(s.cm.wait_event(WAIT), Some(CmEvent::Established { id: id_s }));

    // Data: a SEND each way over the connection the CM made.
    for (from, to, text) in [(&c, &s, &b"ping over a CM connection"[..]), (&s, &c, &b"pong"[..])] {
        to.qp.post_recv(&RecvWr { wr_id: 1, sg_list: &[to.mr.sge(0, 64)] }).unwrap();
        from.mr.write(1024, text).unwrap();
        let sge = [from.mr.sge(1024, text.len() as u32)];
        from.qp.post_send(&SendWr::new(2, WrOpcode::Send, SendFlags::SIGNALED, Payload::Sges(&sge))).unwrap();
        assert_eq!(wait_wc(&from.cq).status, WcStatus::Success);
        let w = wait_wc(&to.cq);
        assert_eq!((w.status, w.byte_len as usize), (WcStatus::Success, text.len()));
        assert_eq!(to.mr.to_vec(0, text.len()).unwrap(), text);
    }

    // The client disconnects (rping's order); both end in timewait.
    c.cm.disconnect(id_c).unwrap();
    assert_eq!(s.cm.wait_event(WAIT), Some(CmEvent::DreqReceived { id: id_s }));
    s.cm.disconnect(id_s).unwrap();
    assert_eq!(c.cm.wait_event(WAIT), Some(CmEvent::DrepReceived { id: id_c }));
    assert_eq!(c.cm.wait_event(WAIT), Some(CmEvent::TimewaitExit { id: id_c }), "after 2,048 ms");
    assert_eq!(s.cm.wait_event(WAIT), Some(CmEvent::TimewaitExit { id: id_s }));
    let ((cm_c, svc_c), (cm_s, _)) = (c.cm.stats(), s.cm.stats());
    assert_eq!((cm_c.sent, cm_c.retransmitted, cm_s.sent, svc_c.dropped), (3, 0, 2, 0), "REQ RTU DREQ / REP DREP");

    // The client's capture: its three MADs out and the server's two in,
    // framed as Linux frames them.
    drop(c);
    let frames = roce_capture::read_file(&pcap).unwrap();
    let mut mads = Vec::new();
    for f in &frames {
        let roce_capture::Classified::Roce(d) = roce_capture::classify(f) else { continue };
        let p = Packet::new_checked(d.payload).unwrap();
        if p.bth().dest_qpn() != GSI_QPN {
            continue;
        }
        let bth = p.bth();
        assert_eq!((bth.opcode(), bth.pkey(), bth.ack_req()), (Opcode::UD_SEND_ONLY, 0xffff, true));
        let deth = p.deth().unwrap();
        assert_eq!((deth.qkey(), deth.src_qpn()), (GSI_QKEY, GSI_QPN));
        mads.push((d.src.ip(), CmMad::parse(p.payload()).unwrap().message.attr_id()));
    }
    assert_eq!(
        mads,
        [
            (c_addr, AttributeId::REQ),
            (s_addr, AttributeId::REP),
            (c_addr, AttributeId::RTU),
            (c_addr, AttributeId::DREQ),
            (s_addr, AttributeId::DREP),
        ]
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_req_to_a_port_nobody_listens_on_is_rejected_over_the_wire() {
    let (c, s) = (end(None, 21), end(None, 22));
    let (c_addr, s_addr) = (c.cm.local_addr(), s.cm.local_addr());
    let req = cma::rc_req(
        PortSpace::Tcp,
        SocketAddr::new(c_addr, 40001),
        SocketAddr::new(s_addr, PORT + 1),
        &local(&c, 5),
        &WireConnParam::default(),
    )
    .unwrap();
    let id = c.cm.connect(ConnectParams { local: c_addr, peer: s_addr, req, packet_life_time: 18 });
    let Some(CmEvent::Rejected { id: rid, rej }) = c.cm.wait_event(WAIT) else { panic!("no REJ") };
    assert_eq!((rid, rej.reason), (id, RejReason::INVALID_SERVICE_ID));
    assert_eq!(s.cm.stats().0.no_listener, 1);
    assert!(s.cm.wait_event(Duration::from_millis(50)).is_none(), "the server's consumer hears nothing");
}

/// The CM's thread sleeps on its CQ's channel, not in `Cq::wait`: a thread
/// in `Cq::wait` receives for the whole device, and the CM's, always
/// waiting, used to take every packet of the application's QPs while the
/// application busy-polled (each packet then waited for the CM thread's
/// wake-up). In a busy-polled ping-pong beside an open CM, no thread makes
/// a waiter's pass: the pollers receive their packets themselves (before:
/// 600 on each side in 300 turns, the CM thread's, one for every packet).
#[test]
fn the_cms_thread_leaves_the_applications_packets_to_its_poller() {
    let (c, s) = (end(None, 31), end(None, 32));
    let (c_addr, s_addr) = (c.cm.local_addr(), s.cm.local_addr());
    connect_qp(&c, 100, s_addr, s.qp.qpn().get(), 200);
    connect_qp(&s, 200, c_addr, c.qp.qpn().get(), 100);
    let busy_wc = |cq: &Cq| -> Wc {
        let mut wc = [Wc::new(0, WcStatus::Success, WcOpcode::Send, 0); 1];
        let deadline = std::time::Instant::now() + WAIT;
        while cq.poll(&mut wc).unwrap() == 0 {
            assert!(std::time::Instant::now() < deadline, "no completion");
        }
        assert_eq!(wc[0].status, WcStatus::Success);
        wc[0]
    };
    const TURNS: u64 = 300;
    let before = (c.ctx.driver_stats().waiter_passes, s.ctx.driver_stats().waiter_passes);
    let (c_rx, s_rx) = (c.ctx.driver_stats().rx_packets, s.ctx.driver_stats().rx_packets);
    for i in 0..TURNS {
        for (from, to) in [(&c, &s), (&s, &c)] {
            to.qp.post_recv(&RecvWr { wr_id: 1, sg_list: &[to.mr.sge(0, 64)] }).unwrap();
            from.mr.write(1024, &i.to_le_bytes()).unwrap();
            let sge = [from.mr.sge(1024, 8)];
            from.qp.post_send(&SendWr::new(2, WrOpcode::Send, SendFlags::SIGNALED, Payload::Sges(&sge))).unwrap();
            let w = busy_wc(&to.cq);
            assert_eq!((w.opcode, w.byte_len), (WcOpcode::Recv, 8));
            assert_eq!(to.mr.to_vec(0, 8).unwrap(), i.to_le_bytes());
            assert_eq!(busy_wc(&from.cq).opcode, WcOpcode::Send);
        }
    }
    let (c_st, s_st) = (c.ctx.driver_stats(), s.ctx.driver_stats());
    // Each side received a SEND and an ACK a turn.
    assert!(c_st.rx_packets - c_rx >= 2 * TURNS && s_st.rx_packets - s_rx >= 2 * TURNS);
    assert_eq!(
        (c_st.waiter_passes - before.0, s_st.waiter_passes - before.1),
        (0, 0),
        "waiters' passes, client and server"
    );
}
