//! softroce between two hosts: two network namespaces joined by the
//! impairment relay (1% duplication, 1% reordering, 0.1% corruption with the
//! UDP checksum fixed, so only the ICRC can catch it) and nftables dropping
//! 5% of RoCE packets into each namespace. One process per namespace (this
//! test binary re-run with `ip netns exec`) moves 264 MiB by RDMA WRITE,
//! SEND and RDMA READ and checks every byte by checksum, then both print
//! their counters. A second test runs three such pairs at once: three
//! processes in each namespace share that namespace's device. Needs root,
//! `ip`, `/dev/net/tun` and `nft`; otherwise it says why it is skipped.

use std::io::{BufRead, BufReader, Write};
use std::net::{TcpListener, TcpStream};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use softroce::config::DeviceInfo;
use softroce::{
    AccessFlags, ConnectOptions, Context, Cq, Mr, Options, Payload, Qp, QpEndpoint, QpInit, RecvWr, SendFlags, SendWr,
    Wc, WcOpcode, WcStatus, WrOpcode,
};

mod common;

use common::*;

const CHUNK: usize = 1 << 20;
/// Per round: 8 MiB WRITE, 8 MiB SEND, 8 MiB READ.
const PER_OP: usize = 8 * CHUNK;
const ROUNDS: usize = 11;
const MEM: usize = 3 * PER_OP;
const OOB_PORT: u16 = 18_515;

fn device(addr: &str) -> DeviceInfo {
    // The TUN links have MTU 9000: rxe's rule gives 4096.
    DeviceInfo::on_address("netns", addr.parse().unwrap()).unwrap()
}

struct End {
    ctx: Context,
    cq: Cq,
    qp: Qp,
    mr: Mr,
}

fn open(addr: &str) -> End {
    let access = AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_READ;
    let ctx = Context::open_with(&device(addr), Options::default()).unwrap();
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx.create_cq(256, None).unwrap();
    let mr = pd.reg_mr(MEM, access).unwrap();
    let qp = pd.create_qp(QpInit::rc(&cq, &cq, 64)).unwrap();
    End { ctx, cq, qp, mr }
}

/// 16.7 ms timeout: the path drops 5% of packets each way, and go-back-N
/// recovers from most of them by sequence NAK, the rest by timeout.
fn connect(e: &End, psn: u32, peer: &QpEndpoint) {
    let o = ConnectOptions { timeout: 12, retry_cnt: 7, ..ConnectOptions::default() };
    e.qp.connect_with(psn, peer, &o).unwrap();
}

fn wait(cq: &Cq, n: usize) -> Vec<Wc> {
    let mut out = Vec::new();
    let mut wc = [Wc::new(0, WcStatus::Success, WcOpcode::Send, 0); 16];
    let deadline = Instant::now() + Duration::from_secs(120);
    while out.len() < n {
        let k = cq.wait(&mut wc, deadline.saturating_duration_since(Instant::now())).unwrap();
        assert!(k > 0, "completions stopped: {} of {n}", out.len());
        out.extend_from_slice(&wc[..k]);
    }
    out
}

fn fill(mr: &Mr, off: usize, len: usize, seed: u64) {
    let mut x = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    let mut v = vec![0u8; len];
    for w in v.chunks_mut(8) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        w.copy_from_slice(&x.to_le_bytes()[..w.len()]);
    }
    mr.write(off, &v).unwrap();
}

/// FNV-1a over the bytes: what the two sides compare.
fn checksum(mr: &Mr, off: usize, len: usize) -> u64 {
    mr.to_vec(off, len)
        .unwrap()
        .iter()
        .fold(0xcbf2_9ce4_8422_2325u64, |h, b| (h ^ u64::from(*b)).wrapping_mul(0x100_0000_01b3))
}

fn line(r: &mut impl BufRead) -> String {
    let mut s = String::new();
    r.read_line(&mut s).unwrap();
    s.trim().to_string()
}

fn counters_line(who: &str, e: &End) -> String {
    let c = e.ctx.counters();
    let d = e.ctx.driver_stats();
    format!(
        "{who}: qpn {} sent_pkts {} rcvd_pkts {} completer_retry_err {} rcvd_seq_err {} out_of_seq_request {} duplicate_request {} drop_icrc {} udp tx {} rx {}",
        e.qp.qpn(),
        c.sent_pkts,
        c.rcvd_pkts,
        c.completer_retry_err,
        c.rcvd_seq_err,
        c.out_of_seq_request,
        c.duplicate_request,
        c.drop_icrc,
        d.tx_packets,
        d.rx_packets
    )
}

/// The server (namespace b): receives SENDs into the middle third of its
/// region and reports checksums; the client WRITEs and READs its first third.
fn server(port: u16) {
    let me = open(ADDR_B);
    let l = TcpListener::bind((ADDR_B, port)).unwrap();
    // On a line of its own: the test harness has printed "test netns_role ... ".
    println!("\nSERVER-READY");
    std::io::stdout().flush().unwrap();
    let (mut s, _) = l.accept().unwrap();
    let mut r = BufReader::new(s.try_clone().unwrap());
    let ep = me.qp.endpoint(5);
    writeln!(s, "{} {} {} {} {}", ep.qpn, ep.psn, ep.gid, me.mr.rkey(), me.mr.addr()).unwrap();
    let f: Vec<String> = line(&mut r).split_whitespace().map(String::from).collect();
    let peer = QpEndpoint { qpn: f[0].parse().unwrap(), psn: f[1].parse().unwrap(), gid: f[2].parse().unwrap() };
    connect(&me, 5, &peer);
    loop {
        // "round R": post the receives for the round's SENDs.
        let cmd = line(&mut r);
        if cmd.is_empty() || cmd == "done" {
            break;
        }
        for k in 0..PER_OP / CHUNK {
            let sge = [me.mr.sge(PER_OP + k * CHUNK, CHUNK as u32)];
            me.qp.post_recv(&RecvWr { wr_id: k as u64, sg_list: &sge }).unwrap();
        }
        writeln!(s, "posted").unwrap();
        for (k, w) in wait(&me.cq, PER_OP / CHUNK).iter().enumerate() {
            assert_eq!((w.wr_id, w.status, w.byte_len as usize), (k as u64, WcStatus::Success, CHUNK), "{w:?}");
        }
        // Checksums of what the WRITEs and SENDs left here.
        writeln!(s, "{} {}", checksum(&me.mr, 0, PER_OP), checksum(&me.mr, PER_OP, PER_OP)).unwrap();
    }
    println!("\n{}", counters_line("server", &me));
}

fn client(port: u16, rounds: usize) {
    let me = open(ADDR_A);
    let mut s = TcpStream::connect((ADDR_B, port)).unwrap();
    let mut r = BufReader::new(s.try_clone().unwrap());
    let f: Vec<String> = line(&mut r).split_whitespace().map(String::from).collect();
    let peer = QpEndpoint { qpn: f[0].parse().unwrap(), psn: f[1].parse().unwrap(), gid: f[2].parse().unwrap() };
    let (rkey, raddr): (u32, u64) = (f[3].parse().unwrap(), f[4].parse().unwrap());
    let ep = me.qp.endpoint(9);
    writeln!(s, "{} {} {}", ep.qpn, ep.psn, ep.gid).unwrap();
    connect(&me, 9, &peer);
    let t0 = Instant::now();
    let mut moved = 0usize;
    for round in 0..rounds {
        writeln!(s, "round {round}").unwrap();
        assert_eq!(line(&mut r), "posted");
        // WRITE the first third, SEND the second, then READ the first back
        // into the third.
        fill(&me.mr, 0, PER_OP, round as u64 * 2 + 1);
        fill(&me.mr, PER_OP, PER_OP, round as u64 * 2 + 2);
        let (want_w, want_s) = (checksum(&me.mr, 0, PER_OP), checksum(&me.mr, PER_OP, PER_OP));
        for k in 0..PER_OP / CHUNK {
            let sge = [me.mr.sge(k * CHUNK, CHUNK as u32)];
            let mut wr = SendWr::new(k as u64, WrOpcode::RdmaWrite, SendFlags::SIGNALED, Payload::Sges(&sge));
            (wr.remote_addr, wr.rkey) = (raddr + (k * CHUNK) as u64, rkey);
            me.qp.post_send(&wr).unwrap();
            let sge = [me.mr.sge(PER_OP + k * CHUNK, CHUNK as u32)];
            me.qp
                .post_send(&SendWr::new(100 + k as u64, WrOpcode::Send, SendFlags::SIGNALED, Payload::Sges(&sge)))
                .unwrap();
        }
        for w in wait(&me.cq, 2 * PER_OP / CHUNK) {
            assert_eq!(w.status, WcStatus::Success, "round {round}: {w:?}");
        }
        for k in 0..PER_OP / CHUNK {
            let sge = [me.mr.sge(2 * PER_OP + k * CHUNK, CHUNK as u32)];
            let mut wr = SendWr::new(200 + k as u64, WrOpcode::RdmaRead, SendFlags::SIGNALED, Payload::Sges(&sge));
            (wr.remote_addr, wr.rkey) = (raddr + (k * CHUNK) as u64, rkey);
            me.qp.post_send(&wr).unwrap();
        }
        for w in wait(&me.cq, PER_OP / CHUNK) {
            assert_eq!((w.status, w.byte_len as usize), (WcStatus::Success, CHUNK), "round {round}: {w:?}");
        }
        let sums = line(&mut r);
        assert_eq!(sums, format!("{want_w} {want_s}"), "round {round}: the server's checksums");
        assert_eq!(checksum(&me.mr, 2 * PER_OP, PER_OP), want_w, "round {round}: READ back what was written");
        moved += 3 * PER_OP;
    }
    writeln!(s, "done").unwrap();
    let secs = t0.elapsed().as_secs_f64();
    println!("\nmoved {moved} bytes ({} MiB) in {secs:.1} s = {:.1} MB/s", moved >> 20, moved as f64 / secs / 1e6);
    println!("{}", counters_line("client", &me));
}

/// Runs the role named by `SOFTROCE_NETNS_ROLE` (inside a namespace) on
/// the out-of-band port `SOFTROCE_NETNS_PORT`, for `SOFTROCE_NETNS_ROUNDS`.
#[test]
fn netns_role() {
    let var = |name: &str, default: usize| std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default);
    let port = var("SOFTROCE_NETNS_PORT", usize::from(OOB_PORT)) as u16;
    match std::env::var("SOFTROCE_NETNS_ROLE").as_deref() {
        Ok("server") => server(port),
        Ok("client") => client(port, var("SOFTROCE_NETNS_ROUNDS", ROUNDS)),
        Ok("cm-server") => cm_server(port),
        Ok("cm-client") => cm_client(port),
        _ => {}
    }
}

fn role(ns: &str, which: &str) -> Command {
    role_on(ns, which, OOB_PORT, ROUNDS)
}

fn role_on(ns: &str, which: &str, port: u16, rounds: usize) -> Command {
    let mut c = Command::new("ip");
    c.args(["netns", "exec", ns])
        .arg(std::env::current_exe().unwrap())
        .args(["--exact", "netns_role", "--nocapture", "--test-threads", "1"])
        .env("SOFTROCE_NETNS_ROLE", which)
        .env("SOFTROCE_NETNS_PORT", port.to_string())
        .env("SOFTROCE_NETNS_ROUNDS", rounds.to_string())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit());
    c
}

/// The word after `name` in `text`, as a number.
fn counter(text: &str, name: &str) -> u64 {
    let words: Vec<&str> = text.split_whitespace().collect();
    words.iter().position(|w| *w == name).map(|i| words[i + 1].parse().unwrap()).unwrap_or(0)
}

#[test]
fn softroce_moves_264_mib_between_namespaces_through_loss_duplication_reordering_and_corruption() {
    let Some(_serial) = prepare("softroce_between_namespaces") else { return };
    if !std::process::Command::new("nft").arg("--version").output().is_ok_and(|o| o.status.success()) {
        say("softroce_netns: skipped: nft (nftables) is missing; .ci/run installs it");
        return;
    }
    let topo = Topology::setup("r", "--seed 11 --dup 0.01 --reorder 0.01 --reorder-delay 1ms --corrupt 0.001", Some(5));
    let mut srv = ChildGuard(Some(role(&topo.ns('b'), "server").spawn().unwrap()));
    let out = srv.0.as_mut().unwrap().stdout.take().unwrap();
    let mut srv_lines = BufReader::new(out).lines().map_while(Result::ok);
    assert!(srv_lines.by_ref().any(|l| l.contains("SERVER-READY")), "the server did not start");
    let cli = role(&topo.ns('a'), "client").output().unwrap();
    if !cli.status.success() {
        // Do not wait for a server whose client is gone.
        if let Some(c) = srv.0.as_mut() {
            let _ = c.kill();
        }
    }
    let cli_out = String::from_utf8_lossy(&cli.stdout).to_string();
    let srv_out: Vec<String> = srv_lines.collect();
    let srv_status = srv.0.take().unwrap().wait().unwrap();
    let relay = topo.teardown();
    println!("{cli_out}");
    for l in &srv_out {
        println!("{l}");
    }
    println!("relay a->b: {}\nrelay b->a: {}", relay.ab, relay.ba);
    assert!(cli.status.success(), "client failed:\n{cli_out}");
    assert!(srv_status.success(), "server failed: {srv_out:?}");
    let moved_line = cli_out.lines().find(|l| l.starts_with("moved ")).expect("the client's figures");
    println!("{moved_line}");
    let moved: usize = moved_line.split_whitespace().nth(1).unwrap().parse().unwrap();
    assert!(moved >= 256 << 20, "{moved_line}");
    // The faults happened and were repaired: retransmissions, and every
    // corruption the relay made that reached softroce was an ICRC drop.
    let srv_text = srv_out.join("\n");
    assert!(counter(&cli_out, "completer_retry_err") > 0, "losses were repaired by retransmission");
    assert!(relay.ab.corrupted + relay.ba.corrupted > 0 && relay.ab.duplicated > 0);
    let icrc = counter(&cli_out, "drop_icrc") + counter(&srv_text, "drop_icrc");
    assert!(icrc > 0, "corrupted packets were caught by the ICRC");
}

/// Three pairs at once across the namespaces: three server processes share
/// namespace b's device and three clients share a's, over a path that
/// duplicates and reorders. Every pair moves and checks its bytes, and the
/// QPNs within each namespace are distinct (one device, not three).
#[test]
fn three_processes_on_each_side_share_their_namespace_device() {
    const PAIRS: u16 = 3;
    const PAIR_ROUNDS: usize = 2;
    let Some(_serial) = prepare("three_processes_on_each_side") else { return };
    let topo = Topology::setup("m", "--seed 12 --dup 0.005 --reorder 0.005 --reorder-delay 1ms", None);
    let mut servers = Vec::new();
    for k in 0..PAIRS {
        let mut g = ChildGuard(Some(role_on(&topo.ns('b'), "server", OOB_PORT + 1 + k, PAIR_ROUNDS).spawn().unwrap()));
        let out = g.0.as_mut().unwrap().stdout.take().unwrap();
        let mut lines = BufReader::new(out).lines().map_while(Result::ok);
        assert!(lines.by_ref().any(|l| l.contains("SERVER-READY")), "server {k} did not start");
        servers.push((g, lines));
    }
    let clients: Vec<ChildGuard> = (0..PAIRS)
        .map(|k| ChildGuard(Some(role_on(&topo.ns('a'), "client", OOB_PORT + 1 + k, PAIR_ROUNDS).spawn().unwrap())))
        .collect();
    let mut client_out = Vec::new();
    for mut c in clients {
        let o = c.0.take().unwrap().wait_with_output().unwrap();
        let text = String::from_utf8_lossy(&o.stdout).to_string();
        println!("{text}");
        assert!(o.status.success(), "a client failed:\n{text}");
        client_out.push(text);
    }
    let mut server_out = Vec::new();
    for (mut g, lines) in servers {
        let text: Vec<String> = lines.collect();
        let status = g.0.take().unwrap().wait().unwrap();
        assert!(status.success(), "a server failed: {text:?}");
        server_out.push(text.join("\n"));
    }
    topo.teardown();
    for text in &client_out {
        let moved: usize = text
            .lines()
            .find(|l| l.starts_with("moved "))
            .expect("figures")
            .split_whitespace()
            .nth(1)
            .unwrap()
            .parse()
            .unwrap();
        assert_eq!(moved, PAIR_ROUNDS * 3 * PER_OP, "{text}");
    }
    for (side, outs) in [("client", &client_out), ("server", &server_out)] {
        let mut qpns: Vec<u64> = outs.iter().map(|t| counter(t, "qpn")).collect();
        assert!(qpns.iter().all(|q| *q > 0), "{side} QPNs {qpns:?}");
        qpns.sort_unstable();
        qpns.dedup();
        assert_eq!(qpns.len(), usize::from(PAIRS), "each {side} process has QPNs of its own on the shared device");
    }
}

mod cm_roles {
    use std::net::{IpAddr, SocketAddr};
    use std::time::Duration;

    use softroce::rdma_cm::{CmId, ConnParam, Event, EventChannel, EventType};
    use softroce::{AccessFlags, Cq, Mr, Payload, QpInit, RecvWr, SendFlags, SendWr, Wc, WcOpcode, WcStatus, WrOpcode};

    const WAIT: Option<Duration> = Some(Duration::from_secs(60));

    pub fn next(ch: &EventChannel, want: EventType) -> Event {
        let e = ch.get_event(WAIT).unwrap_or_else(|| panic!("no event (waiting for {want:?})"));
        assert_eq!((e.event, e.status), (want, 0), "{:?} {}", e.event, e.status);
        e
    }

    pub fn resources(id: &CmId) -> (Cq, Mr) {
        let ctx = id.context().expect("a device");
        let pd = ctx.alloc_pd().unwrap();
        let cq = ctx.create_cq(32, None).unwrap();
        let mr = pd.reg_mr(8192, AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE).unwrap();
        let qp = id.create_qp(&pd, QpInit::rc(&cq, &cq, 16)).unwrap();
        qp.post_recv(&RecvWr { wr_id: 7, sg_list: &[mr.sge(0, 1024)] }).unwrap();
        (cq, mr)
    }

    pub fn wait_wc(cq: &Cq) -> Wc {
        let mut wc = [Wc::new(0, WcStatus::Success, WcOpcode::Send, 0); 1];
        assert_eq!(cq.wait(&mut wc, Duration::from_secs(60)).unwrap(), 1);
        assert_eq!(wc[0].status, WcStatus::Success, "{:?}", wc[0]);
        wc[0]
    }

    pub fn send(id: &CmId, mr: &Mr, cq: &Cq, text: &[u8]) {
        mr.write(4096, text).unwrap();
        let sge = [mr.sge(4096, text.len() as u32)];
        id.qp().unwrap().post_send(&SendWr::new(1, WrOpcode::Send, SendFlags::SIGNALED, Payload::Sges(&sge))).unwrap();
        assert_eq!(wait_wc(cq).opcode, WcOpcode::Send);
    }

    pub fn addr(ip: &str, port: u16) -> SocketAddr {
        SocketAddr::new(ip.parse::<IpAddr>().unwrap(), port)
    }

    pub fn rping() -> ConnParam {
        ConnParam { responder_resources: 1, initiator_depth: 1, ..ConnParam::null() }
    }
}

/// rdma_cm's server side in namespace b: listen, accept, echo one SEND
/// upper-cased, take the disconnect.
fn cm_server(port: u16) {
    use cm_roles::*;
    use softroce::rdma_cm::{CmId, EventChannel, EventType, PortSpace};
    let ch = EventChannel::new().unwrap();
    let listen = CmId::new(&ch, PortSpace::Tcp);
    listen.bind_addr(addr(ADDR_B, port)).unwrap();
    listen.listen().unwrap();
    println!("\nSERVER-READY");
    std::io::stdout().flush().unwrap();
    let req = next(&ch, EventType::ConnectRequest);
    let child = req.id;
    let (cq, mr) = resources(&child);
    child.accept(&rping()).unwrap();
    next(&ch, EventType::Established);
    let w = wait_wc(&cq);
    let reply = mr.to_vec(0, w.byte_len as usize).unwrap().to_ascii_uppercase();
    send(&child, &mr, &cq, &reply);
    next(&ch, EventType::Disconnected);
    child.disconnect().unwrap();
    println!("cm-server peer {:?}", child.peer_addr());
}

/// rdma_cm's client side in namespace a.
fn cm_client(port: u16) {
    use cm_roles::*;
    use softroce::rdma_cm::{CmId, EventChannel, EventType, PortSpace};
    let ch = EventChannel::new().unwrap();
    let id = CmId::new(&ch, PortSpace::Tcp);
    id.resolve_addr(None, addr(ADDR_B, port)).unwrap();
    next(&ch, EventType::AddrResolved);
    id.resolve_route().unwrap();
    next(&ch, EventType::RouteResolved);
    let (cq, mr) = resources(&id);
    id.connect(&rping()).unwrap();
    next(&ch, EventType::Established);
    send(&id, &mr, &cq, b"hello across namespaces");
    let w = wait_wc(&cq);
    assert_eq!(mr.to_vec(0, w.byte_len as usize).unwrap(), b"HELLO ACROSS NAMESPACES");
    id.disconnect().unwrap();
    next(&ch, EventType::Disconnected);
    println!("\ncm-client ok from {:?}", id.local_addr());
}

/// rdma_cm between two hosts: the server listens in namespace b, the
/// client resolves b's address from namespace a (its source is a's
/// device), and the CM MADs cross a relay that duplicates and reorders,
/// so the CM's duplicate handling is exercised on real sockets.
#[test]
fn rdma_cm_connects_across_namespaces_through_duplication_and_reordering() {
    let Some(_serial) = prepare("rdma_cm_across_namespaces") else { return };
    let topo = Topology::setup("c", "--seed 13 --dup 0.2 --reorder 0.2 --reorder-delay 2ms", None);
    let port = 7174;
    let mut srv = ChildGuard(Some(role_on(&topo.ns('b'), "cm-server", port, 1).spawn().unwrap()));
    let out = srv.0.as_mut().unwrap().stdout.take().unwrap();
    let mut srv_lines = BufReader::new(out).lines().map_while(Result::ok);
    assert!(srv_lines.by_ref().any(|l| l.contains("SERVER-READY")), "the server did not start");
    let cli = role_on(&topo.ns('a'), "cm-client", port, 1).output().unwrap();
    let cli_out = String::from_utf8_lossy(&cli.stdout).to_string();
    let srv_out: Vec<String> = srv_lines.collect();
    let srv_status = srv.0.take().unwrap().wait().unwrap();
    let relay = topo.teardown();
    println!("{cli_out}\n{srv_out:?}\nrelay a->b: {}\nrelay b->a: {}", relay.ab, relay.ba);
    assert!(cli.status.success(), "client failed:\n{cli_out}");
    assert!(srv_status.success(), "server failed: {srv_out:?}");
    assert!(
        cli_out.contains(&format!("cm-client ok from Some({ADDR_A}:")),
        "the client's source is a's device: {cli_out}"
    );
    assert!(srv_out.iter().any(|l| l.contains(&format!("cm-server peer Some({ADDR_A}:"))), "{srv_out:?}");
    assert!(relay.ab.duplicated + relay.ba.duplicated > 0, "the relay duplicated packets");
}
