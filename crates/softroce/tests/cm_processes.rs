//! The CM on one device shared by several processes, as with the kernel's
//! QP 1: two servers in two processes listen on two ports of 127.0.0.1, a
//! third process has a CM and listens on nothing, and this process (the
//! client) connects to both servers by CM MADs. Every MAD reaches the
//! kernel's one UDP 4-tuple (127.0.0.1:4791 to itself), so the kernel hands
//! them all to one process, which hands each on to its owner: REQs by
//! service ID, the rest by the comm ID's slot bits. This test binary re-runs
//! itself for each process (`cm_member_process`, idle unless
//! `SOFTROCE_TEST_CM` is set).

mod common;

use std::io::{BufRead, BufReader, Write};
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use roce_cm::cm::{CmEvent, CommId, ConnectParams};
use roce_cm::cma::{self, LocalEnd, WireConnParam};
use roce_cm::wire::{IpServiceId, PortSpace};
use roce_wire::Psn;
use softroce::cm::CmService;
use softroce::config::DeviceInfo;
use softroce::testing::{End, EndSpec};
use softroce::{
    AccessFlags, ConnectOptions, Context, Cq, Options, Payload, QpEndpoint, RecvWr, SendFlags, SendWr, Wc, WcOpcode,
    WcStatus, WrOpcode,
};

const WAIT: Duration = Duration::from_secs(20);
/// The tests of this binary run one at a time: each counts the MADs its
/// own processes forwarded and received on the shared device, which
/// another test's processes beside them would take part in.
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());
/// How long a late server's listen takes between its two steps: well
/// within the time a REQ waits for its listener (`roce_host::LISTEN_GRACE`).
const LISTEN_GAP: Duration = Duration::from_millis(150);

fn device() -> DeviceInfo {
    DeviceInfo::on_address("softroce_lo", IpAddr::V4(Ipv4Addr::LOCALHOST)).unwrap()
}

fn end(ctx: &Context) -> End {
    let access = AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_READ;
    End::on(ctx, EndSpec { cq_entries: 64, mr_len: 1 << 16, access, qp_depth: 32 }, |_| {})
}

fn local(e: &End, psn: u32) -> LocalEnd {
    common::local_end(&e.ctx, &e.qp, psn)
}

fn connect_qp(e: &End, my_psn: u32, peer_qpn: u32, peer_psn: u32) {
    let o = ConnectOptions {
        mtu: Some(softroce::Mtu::Mtu1024),
        timeout: 19,
        max_rd_atomic: 1,
        ..ConnectOptions::default()
    };
    let peer = QpEndpoint { qpn: peer_qpn.into(), psn: peer_psn, gid: IpAddr::V4(Ipv4Addr::LOCALHOST) };
    e.qp.connect_with(my_psn, &peer, &o).unwrap();
}

fn wait_wc(cq: &Cq) -> Wc {
    softroce::testing::wait_one(cq, WAIT)
}

fn rdma_cm_values() -> WireConnParam<'static> {
    WireConnParam { responder_resources: 1, initiator_depth: 1, ..WireConnParam::default() }
}

/// One process: `server:PORT` (accept one connection, echo one SEND
/// upper-cased, take the disconnect) or `bystander` (a CM, no listener).
#[test]
fn cm_member_process() {
    let Ok(role) = std::env::var("SOFTROCE_TEST_CM") else { return };
    let ctx = Context::open_with(&device(), Options::default()).unwrap();
    let cm = CmService::open(&ctx, std::process::id().into()).unwrap();
    let e = end(&ctx);
    let mut out = std::io::stdout();
    if role == "bystander" {
        writeln!(out, "\nREADY").unwrap();
        let mut line = String::new();
        std::io::stdin().read_line(&mut line).unwrap();
        let host: Vec<String> = ctx.host_stats().iter().map(|(k, v)| format!("{k}={v}")).collect();
        writeln!(out, "DONE {}", host.join(" ")).unwrap();
        return;
    }
    // A late server says READY first, then listens, taking LISTEN_GAP
    // between its CM's listener and the device's route to it.
    let (port, late) = match role.strip_prefix("late-server:") {
        Some(p) => (p, true),
        None => (role.strip_prefix("server:").unwrap(), false),
    };
    let port: u16 = port.parse().unwrap();
    if late {
        softroce::testing::set_listen_gap(LISTEN_GAP);
        writeln!(out, "\nREADY").unwrap();
        out.flush().unwrap();
    }
    cm.listen(IpServiceId::new(PortSpace::Tcp, port).service_id()).unwrap();
    if !late {
        writeln!(out, "\nREADY").unwrap();
        out.flush().unwrap();
    }
    let Some(CmEvent::ReqReceived { id, req, .. }) = cm.wait_event(WAIT) else { panic!("{role}: no REQ") };
    assert_eq!(req.service_id, IpServiceId::new(PortSpace::Tcp, port).service_id(), "the REQ for this port came here");
    let psn = 0x1000 + u32::from(port);
    connect_qp(&e, psn, req.local_qpn, req.starting_psn.value());
    e.qp.post_recv(&RecvWr { wr_id: 1, sg_list: &[e.mr.sge(0, 256)] }).unwrap();
    cm.accept(id, cma::rc_rep(&local(&e, psn), &rdma_cm_values()).unwrap()).unwrap();
    assert_eq!(cm.wait_event(WAIT), Some(CmEvent::Established { id }));
    let w = wait_wc(&e.cq);
    assert_eq!(w.status, WcStatus::Success);
    let reply = e.mr.to_vec(0, w.byte_len as usize).unwrap().to_ascii_uppercase();
    e.mr.write(1024, &reply).unwrap();
    let sge = [e.mr.sge(1024, reply.len() as u32)];
    e.qp.post_send(&SendWr::new(2, WrOpcode::Send, SendFlags::SIGNALED, Payload::Sges(&sge))).unwrap();
    assert_eq!(wait_wc(&e.cq).status, WcStatus::Success);
    assert_eq!(cm.wait_event(WAIT), Some(CmEvent::DreqReceived { id }));
    cm.disconnect(id).unwrap();
    let host: Vec<String> = ctx.host_stats().iter().map(|(k, v)| format!("{k}={v}")).collect();
    writeln!(out, "DONE {}", host.join(" ")).unwrap();
}

struct Member {
    child: Child,
    lines: std::io::Lines<BufReader<std::process::ChildStdout>>,
}

fn start(role: &str) -> Member {
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "cm_member_process", "--nocapture", "--test-threads", "1"])
        .env("SOFTROCE_TEST_CM", role)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    assert!(lines.by_ref().map_while(Result::ok).any(|l| l == "READY"), "{role} did not start");
    Member { child, lines }
}

fn done(m: &mut Member) -> String {
    if let Some(stdin) = m.child.stdin.as_mut() {
        let _ = writeln!(stdin, "done");
    }
    let line = m.lines.by_ref().map_while(Result::ok).find(|l| l.starts_with("DONE")).expect("a DONE line");
    assert!(m.child.wait().unwrap().success(), "member failed: {line}");
    line
}

fn counter(line: &str, name: &str) -> u64 {
    line.split_whitespace().find_map(|w| w.strip_prefix(&format!("{name}="))).map_or(0, |v| v.parse().unwrap())
}

/// Connects to the server of `port` (the `k`th) by the CM, has a SEND
/// echoed upper-cased, and disconnects; returns the connection's id.
fn echo_through(ctx: &Context, cm: &CmService, port: u16, k: usize, ended: &[CommId]) -> CommId {
    let lo = IpAddr::V4(Ipv4Addr::LOCALHOST);
    let e = end(ctx);
    let psn = 0x2000 + k as u32;
    let src = SocketAddr::new(lo, 40000 + k as u16);
    let req = cma::rc_req(PortSpace::Tcp, src, SocketAddr::new(lo, port), &local(&e, psn), &rdma_cm_values()).unwrap();
    let id = cm.connect(ConnectParams { local: lo, peer: lo, req, packet_life_time: 18 });
    let ev = next_event(cm, ended);
    let Some(CmEvent::RepReceived { id: got, rep }) = ev else { panic!("no REP from port {port}: {ev:?}") };
    assert_eq!((got, rep.starting_psn), (id, Psn::new(0x1000 + u32::from(port))), "the server of port {port} answered");
    connect_qp(&e, psn, rep.local_qpn, rep.starting_psn.value());
    e.qp.post_recv(&RecvWr { wr_id: 1, sg_list: &[e.mr.sge(0, 256)] }).unwrap();
    cm.establish(id).unwrap();
    let text = format!("hello server {k}");
    e.mr.write(1024, text.as_bytes()).unwrap();
    let sge = [e.mr.sge(1024, text.len() as u32)];
    e.qp.post_send(&SendWr::new(2, WrOpcode::Send, SendFlags::SIGNALED, Payload::Sges(&sge))).unwrap();
    let mut got_reply = false;
    for _ in 0..2 {
        let w = wait_wc(&e.cq);
        assert_eq!(w.status, WcStatus::Success);
        if w.opcode == WcOpcode::Recv {
            assert_eq!(e.mr.to_vec(0, w.byte_len as usize).unwrap(), text.to_ascii_uppercase().as_bytes());
            got_reply = true;
        }
    }
    assert!(got_reply, "server {k} echoed");
    cm.disconnect(id).unwrap();
    assert_eq!(next_event(cm, ended), Some(CmEvent::DrepReceived { id }));
    id
}

/// The CM's next event but the end of time wait of a connection in `ended`
/// (2,048 ms after its disconnect: on a slow run it may come first).
fn next_event(cm: &CmService, ended: &[CommId]) -> Option<CmEvent> {
    std::iter::repeat_with(|| cm.wait_event(WAIT))
        .find(|e| !matches!(e, Some(CmEvent::TimewaitExit { id }) if ended.contains(id)))
        .flatten()
}

#[test]
fn two_servers_in_two_processes_and_a_bystander_share_qp1_of_one_device() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    // Ports of this run's own (the service IDs are host-wide on the device).
    let base = 20000 + (std::process::id() % 20000) as u16;
    let ports = [base, base + 1];
    let mut servers: Vec<Member> = ports.iter().map(|p| start(&format!("server:{p}"))).collect();
    let mut bystander = start("bystander");

    let ctx = Context::open_with(&device(), Options::default()).unwrap();
    let cm = CmService::open(&ctx, 99).unwrap();
    // Connections disconnected so far.
    let mut ended = Vec::new();
    for (k, &port) in ports.iter().enumerate() {
        ended.push(echo_through(&ctx, &cm, port, k, &ended));
    }
    let lines: Vec<String> = servers.iter_mut().map(done).chain([done(&mut bystander)]).collect();
    eprintln!("{lines:#?}\nclient: {:?}", ctx.host_stats());
    // All MADs share one 4-tuple: the kernel gave them to one process, and
    // every one that was another's was handed on.
    let forwarded: u64 = lines.iter().map(|l| counter(l, "forwarded")).sum::<u64>()
        + ctx.host_stats().iter().find(|(k, _)| *k == "forwarded").map_or(0, |x| x.1);
    let received: u64 = lines.iter().map(|l| counter(l, "received_forwarded")).sum::<u64>()
        + ctx.host_stats().iter().find(|(k, _)| *k == "received_forwarded").map_or(0, |x| x.1);
    assert!(forwarded > 0 && forwarded == received, "forwarded {forwarded}, received {received}");
    assert_eq!(cm.stats().0.retransmitted, 0, "no MAD was lost on the way");
}

/// A REQ that comes while a server is half-way through `listen` (its CM
/// listens, the device's table does not route the port to it yet) waits
/// for the listener and is accepted: before, the table named the server
/// first and the CM came after, and a REQ between the two was rejected
/// (REJ 8, "invalid service ID"), which broke perftest 4.5-0.17's `-R`
/// (its client's retry after a REJ uses freed memory) in CI.
#[test]
fn a_req_while_the_server_is_half_way_through_listen_is_accepted() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    assert!(LISTEN_GAP < roce_host::LISTEN_GRACE);
    let port = 20000 + ((std::process::id() + 7) % 20000) as u16;
    let ctx = Context::open_with(&device(), Options::default()).unwrap();
    let cm = CmService::open(&ctx, 98).unwrap();
    let mut server = start(&format!("late-server:{port}"));
    // Well inside the server's gap.
    std::thread::sleep(LISTEN_GAP / 5);
    let t = std::time::Instant::now();
    echo_through(&ctx, &cm, port, 0, &[]);
    let line = done(&mut server);
    eprintln!("{line}\nclient: {:?}, connected after {:?}", ctx.host_stats(), t.elapsed());
    assert_eq!(cm.stats().0.retransmitted, 0, "the REQ was answered, not resent");
    let waited: u64 = counter(&line, "waited_for_listener")
        + ctx.host_stats().iter().find(|(k, _)| *k == "waited_for_listener").map_or(0, |x| x.1);
    assert_eq!(waited, 1, "the REQ waited for the listener");
}

/// A listen refused because another process listens on the port already
/// (`ServiceTaken`, EADDRINUSE to librdmacm) leaves nothing behind: REQs
/// still go to that process, and once it is gone this one may listen.
#[test]
fn a_listen_on_a_port_another_process_holds_is_refused_and_leaves_nothing_behind() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let port = 20000 + ((std::process::id() + 11) % 20000) as u16;
    let sid = IpServiceId::new(PortSpace::Tcp, port).service_id();
    let mut server = start(&format!("server:{port}"));
    let ctx = Context::open_with(&device(), Options::default()).unwrap();
    let cm = CmService::open(&ctx, 97).unwrap();
    let refused = cm.listen(sid).expect_err("the port is another process's");
    assert!(
        matches!(&refused, softroce::Error::Host(roce_host::HostError::ServiceTaken { service_id, .. }) if *service_id == sid),
        "{refused:?}"
    );
    assert_eq!(refused.errno(), libc::EADDRINUSE);
    // The REQ reaches the process that listens (its REP's PSN says so).
    echo_through(&ctx, &cm, port, 0, &[]);
    done(&mut server);
    cm.listen(sid).expect("the port is free once its listener is gone");
}
