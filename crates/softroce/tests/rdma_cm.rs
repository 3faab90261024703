//! rdma_cm over softroce as rping uses it: a listener bound to a port of
//! 127.0.0.1, a client that resolves the address and the route, creates
//! its QP through the id, connects with rping's parameters and gets
//! ESTABLISHED (librdmacm moves its QP to RTS on the REP and sends the
//! RTU), data both ways (SEND and RDMA WRITE), and the disconnect seen on
//! both sides, then the timewait's end. Also: a connect to a port nobody
//! listens on is REJECTED.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::time::Duration;

use softroce::rdma_cm::{CmId, ConnParam, Event, EventChannel, EventType, IdState, PortSpace};
use softroce::{AccessFlags, Cq, Mr, Payload, QpInit, RecvWr, SendFlags, SendWr, Wc, WcOpcode, WcStatus, WrOpcode};

const WAIT: Option<Duration> = Some(Duration::from_secs(10));
const LO: IpAddr = IpAddr::V4(Ipv4Addr::LOCALHOST);

fn next(ch: &EventChannel, want: EventType) -> Event {
    let e = ch.get_event(WAIT).unwrap_or_else(|| panic!("no event (waiting for {want:?})"));
    assert_eq!((e.event, e.status), (want, 0), "{e:?}");
    e
}

fn wait_wc(cq: &Cq) -> Wc {
    let mut wc = [Wc::new(0, WcStatus::Success, WcOpcode::Send, 0); 1];
    assert_eq!(cq.wait(&mut wc, Duration::from_secs(10)).unwrap(), 1, "a completion");
    assert_eq!(wc[0].status, WcStatus::Success, "{:?}", wc[0]);
    wc[0]
}

fn rping() -> ConnParam {
    ConnParam { responder_resources: 1, initiator_depth: 1, ..ConnParam::null() }
}

/// The PD, CQ and MR an id's consumer makes on `id.context()`, and its QP.
fn resources(id: &CmId) -> (Cq, Mr) {
    let ctx = id.context().expect("the id has a device");
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx.create_cq(32, None).unwrap();
    let mr = pd.reg_mr(8192, AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_READ).unwrap();
    let qp = id.create_qp(&pd, QpInit::rc(&cq, &cq, 16)).unwrap();
    qp.post_recv(&RecvWr { wr_id: 7, sg_list: &[mr.sge(0, 1024)] }).unwrap();
    (cq, mr)
}

/// A client id on `ch` that resolved `port` of 127.0.0.1, made its QP
/// and sent its REQ with rping's parameters (its CQ and MR with it).
fn connecting(ch: &EventChannel, port: u16) -> (CmId, (Cq, Mr)) {
    let id = CmId::new(ch, PortSpace::Tcp);
    id.resolve_addr(None, SocketAddr::new(LO, port)).unwrap();
    next(ch, EventType::AddrResolved);
    id.resolve_route().unwrap();
    next(ch, EventType::RouteResolved);
    let res = resources(&id);
    id.connect(&rping()).unwrap();
    (id, res)
}

#[test]
fn rping_s_flow_connects_moves_data_and_disconnects() {
    let port = 30000 + (std::process::id() % 20000) as u16;
    let (ch_s, ch_c) = (EventChannel::new().unwrap(), EventChannel::new().unwrap());
    let listen = CmId::new(&ch_s, PortSpace::Tcp);
    listen.bind_addr(SocketAddr::new(LO, port)).unwrap();
    listen.listen().unwrap();
    assert_eq!(listen.state(), IdState::Listen);

    let id = CmId::new(&ch_c, PortSpace::Tcp);
    id.resolve_addr(None, SocketAddr::new(LO, port)).unwrap();
    next(&ch_c, EventType::AddrResolved);
    id.resolve_route().unwrap();
    next(&ch_c, EventType::RouteResolved);
    let (cq_c, mr_c) = resources(&id);
    id.connect(&rping()).unwrap();

    let req = next(&ch_s, EventType::ConnectRequest);
    assert!(req.listen_id.as_ref() == Some(&listen));
    let child = req.id;
    assert_eq!((req.conn.responder_resources, req.conn.initiator_depth), (1, 1));
    assert_eq!(child.peer_addr(), id.local_addr(), "the child knows the client's rdma_cm address and port");
    assert_eq!(child.local_addr(), Some(SocketAddr::new(LO, port)));
    assert_eq!(req.conn.private_data, [0u8; 56], "56 bytes of user private data after the cma_hdr");
    let (cq_s, mr_s) = resources(&child);
    child.accept(&rping()).unwrap();

    next(&ch_c, EventType::Established);
    next(&ch_s, EventType::Established);
    let (qp_c, qp_s) = (id.qp().unwrap(), child.qp().unwrap());
    assert_eq!((qp_c.state(), qp_s.state()), (softroce::QpState::Rts, softroce::QpState::Rts));

    // SEND client -> server, then the server RDMA WRITEs into the client's MR.
    mr_c.write(4096, b"rdma_cm ping").unwrap();
    let sge = [mr_c.sge(4096, 12)];
    qp_c.post_send(&SendWr::new(1, WrOpcode::Send, SendFlags::SIGNALED, Payload::Sges(&sge))).unwrap();
    wait_wc(&cq_c);
    assert_eq!(wait_wc(&cq_s).byte_len, 12);
    assert_eq!(mr_s.to_vec(0, 12).unwrap(), b"rdma_cm ping");
    mr_s.write(4096, b"written by the server").unwrap();
    let sge = [mr_s.sge(4096, 21)];
    let mut w = SendWr::new(2, WrOpcode::RdmaWrite, SendFlags::SIGNALED, Payload::Sges(&sge));
    (w.remote_addr, w.rkey) = (mr_c.addr() + 2048, mr_c.rkey());
    qp_s.post_send(&w).unwrap();
    wait_wc(&cq_s);
    assert_eq!(mr_c.to_vec(2048, 21).unwrap(), b"written by the server");

    // rping's order: the client disconnects, the server answers.
    id.disconnect().unwrap();
    next(&ch_s, EventType::Disconnected);
    child.disconnect().unwrap();
    next(&ch_c, EventType::Disconnected);
    next(&ch_c, EventType::TimewaitExit);
    next(&ch_s, EventType::TimewaitExit);
    assert!(
        ch_c.get_event(Some(Duration::from_millis(100))).is_none() && ch_s.get_event(Some(Duration::ZERO)).is_none()
    );
}

#[test]
fn a_connect_to_a_port_nobody_listens_on_is_rejected() {
    let port = 50000 + (std::process::id() % 10000) as u16;
    let ch = EventChannel::new().unwrap();
    let id = CmId::new(&ch, PortSpace::Tcp);
    id.resolve_addr(None, SocketAddr::new(LO, port)).unwrap();
    next(&ch, EventType::AddrResolved);
    id.resolve_route().unwrap();
    next(&ch, EventType::RouteResolved);
    let _res = resources(&id);
    id.connect(&ConnParam::null()).unwrap();
    let e = ch.get_event(WAIT).expect("an answer");
    assert_eq!((e.event, e.status), (EventType::Rejected, 8), "REJ 8: invalid service ID");
    assert_eq!(id.qp().unwrap().state(), softroce::QpState::Err, "librdmacm moves the QP to ERR on a reject");
}

/// qperf's way to end: the client disconnects, the server takes
/// DISCONNECTED and destroys its id without `rdma_disconnect`. Linux's CM
/// sends the DREP when an id in DREQ_RCVD is destroyed (`cm_destroy_id`),
/// so the client's DISCONNECTED comes at once, not after its DREQ retries.
#[test]
fn destroying_an_id_that_got_a_dreq_answers_it() {
    let port = 40000 + (std::process::id() % 10000) as u16;
    let (ch_s, ch_c) = (EventChannel::new().unwrap(), EventChannel::new().unwrap());
    let listen = CmId::new(&ch_s, PortSpace::Tcp);
    listen.bind_addr(SocketAddr::new(LO, port)).unwrap();
    listen.listen().unwrap();
    let (id, _res_c) = connecting(&ch_c, port);
    let child = next(&ch_s, EventType::ConnectRequest).id;
    let res_s = resources(&child);
    child.accept(&rping()).unwrap();
    next(&ch_c, EventType::Established);
    next(&ch_s, EventType::Established);

    let t = std::time::Instant::now();
    id.disconnect().unwrap();
    next(&ch_s, EventType::Disconnected);
    child.clear_qp();
    drop((res_s, child));
    next(&ch_c, EventType::Disconnected);
    assert!(t.elapsed() < Duration::from_secs(1), "the DREP came after {:?}: no DREQ retry", t.elapsed());
}

/// librpma's order: the server accepts the child on the listener's channel
/// and only then migrates it to a channel of its own. Events queued in
/// between (ESTABLISHED, here also the client's DISCONNECTED) move with the
/// id, in order, as the kernel's ucma moves them; none stays behind.
#[test]
fn migrating_an_id_takes_its_queued_events_along() {
    let (ch_s, ch_c, ch_conn) =
        (EventChannel::new().unwrap(), EventChannel::new().unwrap(), EventChannel::new().unwrap());
    let listen = CmId::new(&ch_s, PortSpace::Tcp);
    listen.bind_addr(SocketAddr::new(LO, 0)).unwrap();
    listen.listen().unwrap();
    let port = listen.local_addr().expect("bound").port();
    let (id, _res_c) = connecting(&ch_c, port);
    let child = next(&ch_s, EventType::ConnectRequest).id;
    let _res_s = resources(&child);
    child.accept(&rping()).unwrap();
    next(&ch_c, EventType::Established);
    id.disconnect().unwrap();
    let t = std::time::Instant::now();
    while child.state() != IdState::Disconnect {
        assert!(t.elapsed() < Duration::from_secs(10), "the server's id never saw the DREQ");
        std::thread::sleep(Duration::from_millis(1));
    }

    child.migrate(&ch_conn);
    next(&ch_conn, EventType::Established);
    next(&ch_conn, EventType::Disconnected);
    assert!(ch_s.get_event(Some(Duration::from_millis(50))).is_none(), "an event stayed on the listener's channel");
    // The listener's own events stay where they were.
    let _other = connecting(&ch_c, port);
    let req = next(&ch_s, EventType::ConnectRequest);
    assert!(req.listen_id.as_ref() == Some(&listen));
}

/// A UD id's PD, CQ, MR and QP, with two receives posted (40 bytes of GRH
/// area, then the datagram).
fn ud_resources(id: &CmId) -> (softroce::Pd, Cq, Mr, softroce::Qp) {
    let ctx = id.context().expect("the id has a device");
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx.create_cq(32, None).unwrap();
    let mr = pd.reg_mr(8192, AccessFlags::LOCAL_WRITE).unwrap();
    let qp = id.create_qp(&pd, QpInit::rc(&cq, &cq, 16).with_type(softroce::QpType::Ud)).unwrap();
    for k in 0..2u64 {
        qp.post_recv(&RecvWr { wr_id: 10 + k, sg_list: &[mr.sge(k as usize * 1024, 1024)] }).unwrap();
    }
    (pd, cq, mr, qp)
}

/// udaddy's flow (rdmacm.md 5.1): a UD id resolves the server's port by
/// SIDR and gets ESTABLISHED with the server's QPN, rdma_cm's Q_Key and an
/// address handle; its datagram reaches the server's QP, which answers the
/// sender it saw. A SIDR_REQ for a port nobody listens on ends UNREACHABLE
/// with status 1 (the SIDR_REP's "service ID not supported").
#[test]
fn udaddy_s_flow_resolves_a_ud_service_and_datagrams_go_both_ways() {
    let port = 45000 + (std::process::id() % 10000) as u16;
    let (ch_s, ch_c) = (EventChannel::new().unwrap(), EventChannel::new().unwrap());
    let listen = CmId::new(&ch_s, PortSpace::Udp);
    listen.bind_addr(SocketAddr::new(LO, port)).unwrap();
    listen.listen().unwrap();

    let id = CmId::new(&ch_c, PortSpace::Udp);
    id.resolve_addr(None, SocketAddr::new(LO, port)).unwrap();
    next(&ch_c, EventType::AddrResolved);
    id.resolve_route().unwrap();
    next(&ch_c, EventType::RouteResolved);
    let (pd_c, cq_c, mr_c, qp_c) = ud_resources(&id);
    assert_eq!(qp_c.state(), softroce::QpState::Rts, "librdmacm moves a UD QP to RTS at once");
    id.connect(&ConnParam { private_data: b"udaddy".to_vec(), ..ConnParam::null() }).unwrap();

    let req = next(&ch_s, EventType::ConnectRequest);
    assert!(req.conn.private_data.starts_with(b"udaddy") && req.conn.private_data.len() == 180, "{:?}", req.conn);
    assert_eq!(req.ud.map(|u| u.ah), Some(None), "no address handle on the passive side");
    let child = req.id;
    let (pd_s, cq_s, mr_s, qp_s) = ud_resources(&child);
    child.accept(&ConnParam::null()).unwrap();

    let est = next(&ch_c, EventType::Established);
    let ud = est.ud.expect("ESTABLISHED of a UD id carries rdma_ud_param");
    assert_eq!((ud.qp_num, ud.qkey), (qp_s.qpn().get(), 0x0123_4567));
    let ah_attr = ud.ah.expect("an address handle to the server");
    assert_eq!((ah_attr.dest, ah_attr.hop_limit), (LO, 64));

    // Client -> server, with the client's QPN as immediate data (udaddy's way).
    let ah = pd_c.create_ah(ah_attr.dest).unwrap();
    mr_c.write(4096, b"ud over rdma_cm").unwrap();
    let sge = [mr_c.sge(4096, 15)];
    let mut w = SendWr::new(1, WrOpcode::SendWithImm, SendFlags::SIGNALED, Payload::Sges(&sge));
    w.imm_data = qp_c.qpn().get().to_be();
    w.ud = Some(softroce::UdDest { ah: ah.handle(), remote_qpn: ud.qp_num.into(), remote_qkey: ud.qkey });
    qp_c.post_send(&w).unwrap();
    wait_wc(&cq_c);
    let got = wait_wc(&cq_s);
    assert_eq!((got.byte_len, got.src_qp, u32::from_be(got.imm_data)), (40 + 15, qp_c.qpn(), qp_c.qpn().get()));
    assert_eq!(mr_s.to_vec(40, 15).unwrap(), b"ud over rdma_cm");

    // The server answers the sender it saw, with rdma_cm's Q_Key (which the
    // client's QP must have been given to accept it).
    let back = pd_s.create_ah(LO).unwrap();
    mr_s.write(4096, b"pong").unwrap();
    let sge = [mr_s.sge(4096, 4)];
    let mut w = SendWr::new(2, WrOpcode::Send, SendFlags::SIGNALED, Payload::Sges(&sge));
    w.ud = Some(softroce::UdDest { ah: back.handle(), remote_qpn: got.src_qp, remote_qkey: 0x0123_4567 });
    qp_s.post_send(&w).unwrap();
    wait_wc(&cq_s);
    assert_eq!(wait_wc(&cq_c).byte_len, 40 + 4);
    assert_eq!(mr_c.to_vec(40, 4).unwrap(), b"pong");

    // A port nobody listens on.
    let other = CmId::new(&ch_c, PortSpace::Udp);
    other.resolve_addr(None, SocketAddr::new(LO, port.wrapping_add(1))).unwrap();
    next(&ch_c, EventType::AddrResolved);
    other.resolve_route().unwrap();
    next(&ch_c, EventType::RouteResolved);
    other.connect(&ConnParam::null()).unwrap();
    let e = ch_c.get_event(WAIT).expect("an answer");
    assert_eq!((e.event, e.status), (EventType::Unreachable, 1), "SIDR_REP status 1");
}

/// ECE (`rdma_set_local_ece` / `rdma_get_remote_ece`): each side's vendor
/// ID rides in its REQ or REP and the other side reads it; a server that
/// does not take the client's ECE rejects with reason 35.
#[test]
fn ece_vendor_ids_cross_and_reject_ece_sends_reason_35() {
    let port = 35000 + (std::process::id() % 5000) as u16;
    let (ch_s, ch_c) = (EventChannel::new().unwrap(), EventChannel::new().unwrap());
    let listen = CmId::new(&ch_s, PortSpace::Tcp);
    listen.bind_addr(SocketAddr::new(LO, port)).unwrap();
    listen.listen().unwrap();
    let connect = |vendor: u32| {
        let id = CmId::new(&ch_c, PortSpace::Tcp);
        id.resolve_addr(None, SocketAddr::new(LO, port)).unwrap();
        next(&ch_c, EventType::AddrResolved);
        id.resolve_route().unwrap();
        next(&ch_c, EventType::RouteResolved);
        let res = resources(&id);
        id.set_local_ece(vendor);
        id.connect(&rping()).unwrap();
        (id, res)
    };

    let (id, _res_c) = connect(0x01_5a5a);
    let child = next(&ch_s, EventType::ConnectRequest).id;
    assert_eq!(child.remote_ece(), 0x01_5a5a, "the REQ's vendor ID");
    let _res_s = resources(&child);
    child.set_local_ece(0x02_a5a5);
    child.accept(&rping()).unwrap();
    next(&ch_c, EventType::Established);
    next(&ch_s, EventType::Established);
    assert_eq!(id.remote_ece(), 0x02_a5a5, "the REP's vendor ID");

    let (other, _res_o) = connect(0x03_0000);
    let child = next(&ch_s, EventType::ConnectRequest).id;
    child.reject_ece(b"no").unwrap();
    let e = ch_c.get_event(WAIT).expect("an answer");
    assert_eq!((e.event, e.status), (EventType::Rejected, 35), "REJ 35: vendor option not supported");
    assert!(e.conn.private_data.starts_with(b"no"));
    drop(other);
}
