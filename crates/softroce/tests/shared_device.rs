//! Many processes on one device, as with the kernel's Soft-RoCE: every
//! process here opens `softroce_lo` on 127.0.0.1 (no address of its own).
//! This test binary re-runs itself for each process (`member_process`,
//! which does nothing unless `SOFTROCE_TEST_MEMBER` is set); the parent is
//! a broker that swaps the processes' QP details over TCP, in the order
//! they joined the device, and collects what each one saw.

mod common;

use std::io::{BufRead, BufReader, Write};
use std::net::{IpAddr, Ipv4Addr, TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::pattern;
use softroce::config::DeviceInfo;
use softroce::testing::{End, EndSpec, try_wait_one as wait_one};
use softroce::{
    AhAttr, ConnectOptions, Context, Link, Options, Payload, Pd, QpEndpoint, QpType, RecvWr, SendFlags, SendWr, UdDest,
    Wc, WcOpcode, WcStatus, WrOpcode,
};

/// Bytes each RC iteration writes, then reads back.
const LEN: usize = 96 * 1024;
const STOP: u32 = u32::MAX;
const QKEY: u32 = 0x1111_1111;

/// `softroce_lo`, or the device the parent named (`SOFTROCE_TEST_DEVICE`).
fn device() -> DeviceInfo {
    match std::env::var("SOFTROCE_TEST_DEVICE") {
        Ok(name) => {
            softroce::config::devices().unwrap().into_iter().find(|d| d.name == name).expect("the device named")
        }
        Err(_) => DeviceInfo::on_address("softroce_lo", IpAddr::V4(Ipv4Addr::LOCALHOST)).unwrap(),
    }
}

/// The address handle by which the UD processes reach each other: to
/// 127.0.0.1, or from and to the GID the parent named (`SOFTROCE_TEST_TO`,
/// another GID of the device, as libfabric addresses GID 0).
fn ud_ah(pd: &Pd) -> softroce::Ah {
    match std::env::var("SOFTROCE_TEST_TO") {
        Err(_) => pd.create_ah(IpAddr::V4(Ipv4Addr::LOCALHOST)).unwrap(),
        Ok(gid) => {
            let dest: IpAddr = gid.parse().unwrap();
            let sgid_index = device().gids.iter().position(|g| *g == dest).expect("a GID of the device") as u8;
            let attr = AhAttr { dest, sgid_index, hop_limit: 64, traffic_class: 0, sl: 0, flow_label: 0 };
            pd.create_ah_with(attr).unwrap()
        }
    }
}

/// CLOCK_MONOTONIC in ms: one clock for every process of the host.
fn monotonic_ms() -> u64 {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::Monotonic);
    t.tv_sec as u64 * 1000 + t.tv_nsec as u64 / 1_000_000
}

fn open(qp_type: QpType, link: Link) -> End {
    let spec = EndSpec { cq_entries: 1024, mr_len: 4 * LEN, qp_depth: 256, ..EndSpec::default() };
    End::open_with(&device(), Options { link, ..Options::default() }, spec, |i| i.qp_type = qp_type)
}

/// `qpn psn gid rkey addr`.
fn hello(e: &End) -> String {
    let ep = e.qp.endpoint(e.qp.qpn().get() & 0xff_ffff);
    format!("{} {} {} {} {}", ep.qpn, ep.psn, ep.gid, e.mr.rkey(), e.mr.addr())
}

fn parse_hello(line: &str) -> (QpEndpoint, u32, u64) {
    let f: Vec<&str> = line.split_whitespace().collect();
    assert_eq!(f.len(), 5, "hello line {line:?}");
    let ep = QpEndpoint { qpn: f[0].parse().unwrap(), psn: f[1].parse().unwrap(), gid: f[2].parse().unwrap() };
    (ep, f[3].parse().unwrap(), f[4].parse().unwrap())
}

/// One process: `role:broker port:pair:seconds:timeout:link` (link `local`
/// or `udp`).
#[test]
fn member_process() {
    let Ok(spec) = std::env::var("SOFTROCE_TEST_MEMBER") else { return };
    let f: Vec<&str> = spec.split(':').collect();
    let (role, port, pair, secs, timeout): (&str, u16, u64, u64, u8) =
        (f[0], f[1].parse().unwrap(), f[2].parse().unwrap(), f[3].parse().unwrap(), f[4].parse().unwrap());
    let link = match f[5] {
        "udp" => Link::Udp,
        _ => Link::Local,
    };
    let me = open(if role.starts_with("ud") { QpType::Ud } else { QpType::Rc }, link);
    if role == "ud-leaf" {
        // Ready before anyone learns its QPN: a UD datagram that finds the
        // QP not yet in RTR, or no receive posted, is dropped (as on rxe).
        connect(&me, &me.qp.endpoint(0), 14);
        for k in 0..64u64 {
            let r = [me.mr.sge(k as usize * 1024, 1024)];
            me.qp.post_recv(&RecvWr { wr_id: k, sg_list: &r }).unwrap();
        }
    }
    let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    let mut r = BufReader::new(s.try_clone().unwrap());
    writeln!(s, "{}", hello(&me)).unwrap();
    let mut peers = String::new();
    r.read_line(&mut peers).unwrap();
    let result = match role {
        "rc-a" => rc_requester(&me, peers.trim(), pair, Duration::from_secs(secs), timeout),
        "rc-b" => rc_responder(&me, peers.trim(), pair, timeout),
        "ud-hub" => ud_hub(&me, peers.trim(), secs),
        "ud-leaf" => ud_leaf(&me, peers.trim(), pair),
        other => panic!("role {other}"),
    };
    writeln!(s, "{result}").unwrap();
}

fn connect(me: &End, peer: &QpEndpoint, timeout: u8) {
    let o = ConnectOptions { timeout, retry_cnt: 7, ..ConnectOptions::default() };
    me.qp.connect_with(me.qp.qpn().get() & 0xff_ffff, peer, &o).unwrap();
}

/// WRITE_WITH_IMM of a fresh pattern, the peer's verdict by SEND, then a
/// READ back compared byte for byte; until `run` is over or work fails.
fn rc_requester(me: &End, peer: &str, pair: u64, run: Duration, timeout: u8) -> String {
    let (ep, rkey, raddr) = parse_hello(peer);
    connect(me, &ep, timeout);
    let start = Instant::now();
    let (mut last, mut max_gap, mut iters) = (Instant::now(), Duration::ZERO, 0u32);
    // Iterations over 1 ms: when they ended (CLOCK_MONOTONIC ms) and took (ms).
    let mut slow = Vec::new();
    let verdict = [me.mr.sge(3 * LEN, 8)];
    let fail =
        |what: &str, w: Option<Wc>, n: u32| format!("failed {what} after {n} iterations: {:?}", w.map(|w| w.status));
    while start.elapsed() < run {
        let data = pattern(LEN, pair * 1_000_000 + u64::from(iters));
        me.mr.write(0, &data).unwrap();
        me.qp.post_recv(&RecvWr { wr_id: 9, sg_list: &verdict }).unwrap();
        let sge = [me.mr.sge(0, LEN as u32)];
        let mut wr = SendWr::new(1, WrOpcode::RdmaWriteWithImm, SendFlags::SIGNALED, Payload::Sges(&sge));
        (wr.remote_addr, wr.rkey, wr.imm_data) = (raddr, rkey, iters.to_be());
        me.qp.post_send(&wr).unwrap();
        // The WRITE's completion and the verdict's, in either order. A peer
        // that dies after the WRITE's ACK leaves nothing outstanding here to
        // fail: after a second without a verdict, a zero-length WRITE asks
        // (a keepalive, as applications send), and fails if the peer is gone.
        let (mut got, mut probed, deadline) = (0, false, Instant::now() + Duration::from_secs(30));
        while got < 2 {
            match wait_one(&me.cq, Duration::from_secs(1)) {
                Some(w) if w.status == WcStatus::Success => got += u32::from(w.wr_id != 4),
                None if !probed => {
                    let mut ka = SendWr::new(4, WrOpcode::RdmaWrite, SendFlags::SIGNALED, Payload::Sges(&[]));
                    (ka.remote_addr, ka.rkey) = (raddr, rkey);
                    me.qp.post_send(&ka).unwrap();
                    probed = true;
                }
                None if Instant::now() < deadline => {}
                w => return fail("write", w, iters),
            }
        }
        let v = me.mr.to_vec(3 * LEN, 8).unwrap();
        assert_eq!(v, u64::from(iters).to_be_bytes(), "the peer saw other bytes than were written");
        let back = [me.mr.sge(LEN, LEN as u32)];
        let mut rd = SendWr::new(2, WrOpcode::RdmaRead, SendFlags::SIGNALED, Payload::Sges(&back));
        (rd.remote_addr, rd.rkey) = (raddr, rkey);
        me.qp.post_send(&rd).unwrap();
        match wait_one(&me.cq, Duration::from_secs(30)) {
            Some(w) if w.status == WcStatus::Success => {}
            w => return fail("read", w, iters),
        }
        assert!(me.mr.to_vec(LEN, LEN).unwrap() == data, "READ returned other bytes (iteration {iters})");
        iters += 1;
        let gap = last.elapsed();
        max_gap = max_gap.max(gap);
        if gap > Duration::from_millis(1) {
            slow.push(format!("{}:{}", monotonic_ms(), gap.as_millis()));
        }
        last = Instant::now();
    }
    let mut wr = SendWr::new(3, WrOpcode::RdmaWriteWithImm, SendFlags::SIGNALED, Payload::Sges(&[]));
    (wr.remote_addr, wr.rkey, wr.imm_data) = (raddr, rkey, STOP.to_be());
    me.qp.post_send(&wr).unwrap();
    match wait_one(&me.cq, Duration::from_secs(30)) {
        Some(w) if w.status == WcStatus::Success => {}
        w => return fail("stop", w, iters),
    }
    format!(
        "ok iters={iters} max_gap_us={} qpn={} slow={} {}",
        max_gap.as_micros(),
        me.qp.qpn(),
        if slow.is_empty() { "-".into() } else { slow.join(",") },
        sharing(me)
    )
}

/// The sharing counters that are not 0, and the engine's retransmissions.
fn sharing(me: &End) -> String {
    let mut v: Vec<String> =
        me.ctx.host_stats().into_iter().filter(|(_, n)| *n > 0).map(|(k, n)| format!("{k}={n}")).collect();
    let c = me.ctx.counters();
    v.push(format!("retries={} drop_no_qp={}", c.completer_retry_err, c.drop_no_qp));
    let d = me.ctx.driver_stats();
    v.push(format!(
        "tx_local={} rx_local={} local_full={} local_unopened={} other_gid_rx={}",
        d.tx_local, d.rx_local, d.local_full, d.local_unopened, d.other_gid_rx
    ));
    v.join(" ")
}

/// Checks each WRITE's bytes against the pattern and answers with the
/// iteration number, until the requester says stop.
fn rc_responder(me: &End, peer: &str, pair: u64, timeout: u8) -> String {
    let (ep, _, _) = parse_hello(peer);
    connect(me, &ep, timeout);
    let none: [softroce::Sge; 0] = [];
    let mut n = 0u32;
    loop {
        me.qp.post_recv(&RecvWr { wr_id: 5, sg_list: &none }).unwrap();
        let w = wait_one(&me.cq, Duration::from_secs(60)).expect("a WRITE within 60 s");
        assert_eq!((w.status, w.opcode), (WcStatus::Success, WcOpcode::RecvRdmaWithImm), "{w:?}");
        let imm = u32::from_be(w.imm_data);
        if imm == STOP {
            return format!("ok iters={n} qpn={} {}", me.qp.qpn(), sharing(me));
        }
        assert_eq!(imm, n, "iterations in order");
        let got = me.mr.to_vec(0, LEN).unwrap();
        assert!(got == pattern(LEN, pair * 1_000_000 + u64::from(n)), "WRITE {n} landed other bytes");
        me.mr.write(3 * LEN, &u64::from(n).to_be_bytes()).unwrap();
        let v = [me.mr.sge(3 * LEN, 8)];
        me.qp.post_send(&SendWr::new(6, WrOpcode::Send, SendFlags::SIGNALED, Payload::Sges(&v))).unwrap();
        let w = wait_one(&me.cq, Duration::from_secs(30)).expect("the verdict's completion");
        assert_eq!(w.status, WcStatus::Success);
        n += 1;
    }
}

/// One UD QP sends `rounds` datagrams to each leaf (in other processes)
/// and checks each leaf's echo by its source QP and content.
fn ud_hub(me: &End, leaves: &str, rounds: u64) -> String {
    connect(me, &me.qp.endpoint(0), 14);
    let ah = ud_ah(&me.pd);
    let leaves: Vec<QpEndpoint> = leaves.split('|').map(|l| parse_hello(l).0).collect();
    for k in 0..64usize {
        let r = [me.mr.sge(LEN + k * 1024, 1024)];
        me.qp.post_recv(&RecvWr { wr_id: 100 + k as u64, sg_list: &r }).unwrap();
    }
    for round in 0..rounds {
        for (i, l) in leaves.iter().enumerate() {
            let msg = pattern(200, round * 16 + i as u64);
            me.mr.write(i * 256, &msg).unwrap();
            let s = [me.mr.sge(i * 256, 200)];
            let mut wr = SendWr::new(i as u64, WrOpcode::Send, SendFlags::SIGNALED, Payload::Sges(&s));
            wr.ud = Some(UdDest { ah: ah.handle(), remote_qpn: l.qpn, remote_qkey: QKEY });
            me.qp.post_send(&wr).unwrap();
        }
        let mut echoed = vec![false; leaves.len()];
        while echoed.iter().any(|e| !e) {
            let Some(w) = wait_one(&me.cq, Duration::from_secs(10)) else {
                panic!(
                    "no completion within 10 s in round {round} (echoed {echoed:?}): {:?} {:?}",
                    me.ctx.counters(),
                    me.ctx.host_stats()
                )
            };
            assert_eq!(w.status, WcStatus::Success, "{w:?}");
            if w.opcode != WcOpcode::Recv {
                continue;
            }
            let i = leaves.iter().position(|l| l.qpn == w.src_qp).expect("an echo from a leaf's QP");
            let slot = LEN + (w.wr_id as usize - 100) * 1024;
            let got = me.mr.to_vec(slot + 40, w.byte_len as usize - 40).unwrap();
            assert_eq!(got, pattern(200, round * 16 + i as u64), "echo of leaf {i} in round {round}");
            echoed[i] = true;
            let r = [me.mr.sge(slot, 1024)];
            me.qp.post_recv(&RecvWr { wr_id: w.wr_id, sg_list: &r }).unwrap();
        }
    }
    format!("ok rounds={rounds} qpn={} {}", me.qp.qpn(), sharing(me))
}

/// Echoes what the hub sends, until the hub's TCP line says stop.
fn ud_leaf(me: &End, hub: &str, _pair: u64) -> String {
    let (hub, _, _) = parse_hello(hub);
    let ah = ud_ah(&me.pd);
    let mut echoed = 0;
    loop {
        let Some(w) = wait_one(&me.cq, Duration::from_secs(3)) else {
            // The hub is done (it waited for every echo).
            eprintln!("leaf {:#x}: {:?} {:?}", me.qp.qpn(), me.ctx.counters(), me.ctx.host_stats());
            return format!("ok echoed={echoed} qpn={} {}", me.qp.qpn(), sharing(me));
        };
        assert_eq!(w.status, WcStatus::Success, "{w:?}");
        if w.opcode != WcOpcode::Recv {
            continue;
        }
        assert_eq!(w.src_qp, hub.qpn, "datagrams come from the hub's one QP");
        let s = [me.mr.sge(w.wr_id as usize * 1024 + 40, w.byte_len - 40)];
        let mut wr = SendWr::new(1000, WrOpcode::Send, SendFlags::SIGNALED, Payload::Sges(&s));
        wr.ud = Some(UdDest { ah: ah.handle(), remote_qpn: hub.qpn, remote_qkey: QKEY });
        me.qp.post_send(&wr).unwrap();
        // The echo's bytes leave before the buffer is posted again.
        let c = wait_one(&me.cq, Duration::from_secs(10)).expect("the echo's completion");
        assert_eq!((c.status, c.opcode), (WcStatus::Success, WcOpcode::Send), "{c:?}");
        let r = [me.mr.sge(w.wr_id as usize * 1024, 1024)];
        me.qp.post_recv(&RecvWr { wr_id: w.wr_id, sg_list: &r }).unwrap();
        echoed += 1;
    }
}

/// A process started from this binary, joined to the device once the
/// broker has its hello.
struct Member {
    child: Child,
    tcp: TcpStream,
    reader: BufReader<TcpStream>,
    hello: String,
}

/// Starts `specs` one after the other (each joins the device before the
/// next starts: seats in this order), returns them with their hellos.
fn start(listener: &TcpListener, specs: &[String]) -> Vec<Member> {
    start_with(listener, specs, &[])
}

/// [`start`] with `env` set in each process.
fn start_with(listener: &TcpListener, specs: &[String], env: &[(&str, String)]) -> Vec<Member> {
    let port = listener.local_addr().unwrap().port();
    specs
        .iter()
        .map(|spec| {
            let child = Command::new(std::env::current_exe().unwrap())
                .args(["--exact", "member_process", "--nocapture", "--test-threads", "1"])
                .env("SOFTROCE_TEST_MEMBER", spec.replace("PORT", &port.to_string()))
                .envs(env.iter().map(|(k, v)| (k, v)))
                .stdout(Stdio::null())
                .stderr(Stdio::inherit())
                .spawn()
                .unwrap();
            let (tcp, _) = listener.accept().unwrap();
            tcp.set_read_timeout(Some(Duration::from_secs(120))).unwrap();
            let mut reader = BufReader::new(tcp.try_clone().unwrap());
            let mut hello = String::new();
            reader.read_line(&mut hello).unwrap();
            Member { child, tcp, reader, hello: hello.trim().to_string() }
        })
        .collect()
}

fn tell(m: &mut Member, line: &str) {
    writeln!(m.tcp, "{line}").unwrap();
}

fn result(m: &mut Member) -> String {
    let mut line = String::new();
    m.reader.read_line(&mut line).unwrap();
    let status = m.child.wait().unwrap();
    assert!(status.success(), "member exited with {status}: {line}");
    line.trim().to_string()
}

fn qpn_of(hello: &str) -> u32 {
    hello.split_whitespace().next().unwrap().parse().unwrap()
}

/// Pairs (0,1), (2,3), ...: each gets the other's hello.
fn introduce_pairs(ms: &mut [Member]) {
    for i in (0..ms.len()).step_by(2) {
        let (a, b) = (ms[i].hello.clone(), ms[i + 1].hello.clone());
        tell(&mut ms[i], &b);
        tell(&mut ms[i + 1], &a);
    }
}

/// A result's `name=value` field.
fn field(r: &str, name: &str) -> u64 {
    let at = r.find(&format!(" {name}=")).unwrap_or_else(|| panic!("{name} in {r}")) + name.len() + 2;
    r[at..].split_whitespace().next().unwrap().parse().unwrap()
}

/// Every packet between members of one device went through their inboxes
/// (the local link), or none did (`SOFTROCE_LINK=udp`).
fn check_link(results: &[String], link: Link) {
    for (i, r) in results.iter().enumerate() {
        let (tx, rx, full) = (field(r, "tx_local"), field(r, "rx_local"), field(r, "local_full"));
        let unopened = field(r, "local_unopened");
        match link {
            Link::Local => {
                assert!(tx > 0 && rx > 0 && full == 0 && unopened == 0, "process {i} over the local link: {r}")
            }
            Link::Udp => assert_eq!((tx, rx), (0, 0), "process {i} over UDP: {r}"),
        }
    }
}

#[test]
fn eight_processes_on_one_device_move_checked_data_in_four_pairs() {
    four_pairs(Link::Local);
}

#[test]
fn eight_processes_on_one_device_move_checked_data_in_four_pairs_over_udp() {
    four_pairs(Link::Udp);
}

fn four_pairs(link: Link) {
    let l = if link == Link::Udp { "udp" } else { "local" };
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let specs: Vec<String> =
        (0..8).map(|i| format!("{}:PORT:{}:2:14:{l}", if i % 2 == 0 { "rc-a" } else { "rc-b" }, i / 2)).collect();
    let mut ms = start(&listener, &specs);
    let mut qpns: Vec<u32> = ms.iter().map(|m| qpn_of(&m.hello)).collect();
    introduce_pairs(&mut ms);
    let results: Vec<String> = ms.iter_mut().map(result).collect();
    for (i, r) in results.iter().enumerate() {
        assert!(r.starts_with("ok iters="), "process {i}: {r}");
        let iters: u32 = r["ok iters=".len()..].split_whitespace().next().unwrap().parse().unwrap();
        assert!(iters > 0, "process {i} moved nothing: {r}");
    }
    eprintln!("{results:#?}");
    check_link(&results, link);
    qpns.sort_unstable();
    qpns.dedup();
    assert_eq!(qpns.len(), 8, "QPNs unique across the device");
}

#[test]
fn kill_9_of_one_process_fails_only_its_peer_and_others_carry_on() {
    kill_9(Link::Local, 1);
}

#[test]
fn kill_9_of_one_process_fails_only_its_peer_and_others_carry_on_over_udp() {
    kill_9(Link::Udp, 1);
}

/// The writer killed in the middle of its writes into its peer's inbox
/// (maybe in the middle of a record): the others carry on.
#[test]
fn kill_9_of_a_writer_leaves_the_others_carrying_on() {
    kill_9(Link::Local, 0);
}

/// Kills process `victim` (0: pair 0's writer, 1: its responder) of two
/// pairs on one device while both move data.
fn kill_9(link: Link, victim: usize) {
    let l = if link == Link::Udp { "udp" } else { "local" };
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    // The victim joins first or second: when it dies the last process to
    // join moves into its seat in the kernel's group, and its traffic must
    // follow. Victim pair: 4.096 us x 2^10 timeouts, 7 retries: its peer
    // gives up within about 40 ms of retries.
    let specs =
        ["rc-a:PORT:0:60:10", "rc-b:PORT:0:60:10", "rc-a:PORT:1:3:14", "rc-b:PORT:1:3:14"].map(|s| format!("{s}:{l}"));
    let mut ms = start(&listener, &specs);
    introduce_pairs(&mut ms);
    std::thread::sleep(Duration::from_millis(700));
    let kill_ms = monotonic_ms();
    ms[victim].child.kill().unwrap();
    let killed_at = Instant::now();
    let _ = ms[victim].child.wait();
    if victim == 1 {
        let orphan = {
            let mut line = String::new();
            ms[0].reader.read_line(&mut line).unwrap();
            assert!(ms[0].child.wait().unwrap().success());
            line
        };
        let gave_up_after = killed_at.elapsed();
        assert!(orphan.starts_with("failed"), "the dead process's peer: {orphan}");
        assert!(orphan.contains("RetryExc"), "the dead process's peer fails as with a dead host: {orphan}");
        assert!(gave_up_after < Duration::from_secs(10), "gave up after {gave_up_after:?}");
        eprintln!("orphan: {orphan} after {gave_up_after:?}");
    } else {
        // A responder waits for writes that will not come, as behind a dead host.
        ms[1].child.kill().unwrap();
        let _ = ms[1].child.wait();
    }
    let survivors: Vec<String> = ms[2..].iter_mut().map(result).collect();
    eprintln!("survivors: {survivors:#?}");
    assert!(survivors.iter().all(|r| r.starts_with("ok iters=")), "{survivors:?}");
    check_link(&survivors, link);
    // The surviving pair's slow iterations: the longest that overlaps the
    // second after the kill (the steering update), and the longest before
    // it (what a blocking wait costs here anyway).
    let slow: Vec<(u64, u64)> = survivors[0]
        .split("slow=")
        .nth(1)
        .unwrap()
        .split_whitespace()
        .next()
        .unwrap()
        .split(',')
        .filter(|x| *x != "-")
        .map(|x| x.split_once(':').map(|(e, g)| (e.parse().unwrap(), g.parse().unwrap())).unwrap())
        .collect();
    let around = slow.iter().filter(|(end, gap)| *end >= kill_ms && end - gap <= kill_ms + 1000).map(|x| x.1).max();
    let before = slow.iter().filter(|(end, _)| *end < kill_ms).map(|x| x.1).max();
    eprintln!(
        "longest pause of the surviving pair: {:?} ms within the second after the kill, {:?} ms before it",
        around.unwrap_or(0),
        before.unwrap_or(0)
    );
    assert!(around.unwrap_or(0) < 2_000, "the surviving pair stalled for {around:?} ms after the kill");
}

#[test]
fn one_ud_qp_talks_to_qps_of_three_other_processes() {
    ud_hub_and_three_leaves(&[]);
}

/// A device's other address (its interface's link-local GID: GID 0, as on
/// rxe, which libfabric's verbs dgram and rxd endpoints address) is the
/// device's as much as its own address: a datagram to it for another
/// process's QP goes by that member's lane of the local link, not through
/// the kernel to the address's relay thread (`gids.rs`), which cost
/// libfabric's rxd 20 MB/s instead of 200 in `fi_pingpong`.
#[test]
fn one_ud_qp_reaches_three_other_processes_by_the_link_local_gid_over_the_local_link() {
    let devices = softroce::config::devices().unwrap();
    let with_link_local = devices.iter().find_map(|d| {
        let ll = d
            .gids
            .iter()
            .zip(&d.bindable)
            .find(|(g, b)| **b && matches!(g, IpAddr::V6(v6) if v6.is_unicast_link_local()) && **g != d.addr);
        ll.map(|(g, _)| (d.name.clone(), *g))
    });
    let Some((name, gid)) = with_link_local else {
        assert!(std::env::var_os("CI").is_none(), "CI: no device with a link-local GID among {devices:?}");
        println!("skipped: no device with a link-local GID");
        return;
    };
    let results = ud_hub_and_three_leaves(&[("SOFTROCE_TEST_DEVICE", name), ("SOFTROCE_TEST_TO", gid.to_string())]);
    for (i, r) in results.iter().enumerate() {
        let (tx, rx, relayed) = (field(r, "tx_local"), field(r, "rx_local"), field(r, "other_gid_rx"));
        assert!(tx > 0 && rx > 0 && relayed == 0, "process {i}: every datagram by the local link: {r}");
    }
}

/// A UD hub and three leaves, each in a process of its own, with `env`;
/// their results.
fn ud_hub_and_three_leaves(env: &[(&str, String)]) -> Vec<String> {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let specs = [
        "ud-hub:PORT:0:50:14:local",
        "ud-leaf:PORT:0:0:14:local",
        "ud-leaf:PORT:1:0:14:local",
        "ud-leaf:PORT:2:0:14:local",
    ]
    .map(String::from);
    let mut ms = start_with(&listener, &specs, env);
    let leaves: Vec<String> = ms[1..].iter().map(|m| m.hello.clone()).collect();
    let hub = ms[0].hello.clone();
    tell(&mut ms[0], &leaves.join("|"));
    for m in &mut ms[1..] {
        tell(m, &hub);
    }
    let results: Vec<String> = ms.iter_mut().map(result).collect();
    assert_eq!(results[0].split_whitespace().nth(1), Some("rounds=50"), "{results:?}");
    for r in &results[1..] {
        assert_eq!(r.split_whitespace().nth(1), Some("echoed=50"), "{results:?}");
    }
    results
}

/// The other user's side of `another_user_is_refused_with_the_reason_and_cannot_read_the_table`:
/// tries to join 127.0.0.1's device and to open the first user's device
/// files, and prints what happened.
#[test]
fn other_user_process() {
    if std::env::var_os("SOFTROCE_TEST_OTHER_USER").is_none() {
        return;
    }
    match Context::open_with(&device(), Options::default()) {
        Ok(_) => println!("\njoined"),
        Err(e) => println!("\nrefused: {e}"),
    }
    let prefix = format!("softroce-u{}-", std::env::var("SOFTROCE_TEST_OTHER_USER").unwrap());
    for f in std::fs::read_dir("/dev/shm").unwrap().flatten() {
        if f.file_name().to_string_lossy().starts_with(&prefix) {
            let r = std::fs::OpenOptions::new().read(true).open(f.path());
            match r {
                // Removed since it was listed (its process left): nothing to judge.
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => println!("gone {}", f.path().display()),
                r => println!(
                    "open {}: {}",
                    f.path().display(),
                    r.map_or_else(|e| format!("{:?}", e.kind()), |_| "ok".into())
                ),
            }
        }
    }
}

/// Processes of different users: the kernel puts only one user's sockets
/// in a reuseport group, so a second user cannot join the first one's
/// device; it is told so (with the uid holding the address and the way
/// out), and it cannot open the first user's device file (mode 0600).
/// Needs root (to run a process as nobody); says why it is skipped otherwise.
#[test]
fn another_user_is_refused_with_the_reason_and_cannot_read_the_table() {
    use std::os::unix::process::CommandExt;
    let me = rustix::process::getuid().as_raw();
    if me != 0 {
        eprintln!("another_user: skipped: not root (uid {me}), cannot start a process of another user");
        return;
    }
    let _held = Context::open_with(&device(), Options::default()).unwrap();
    // A copy of this binary that nobody may run (the build directory may be private).
    let dir = std::env::temp_dir().join(format!("softroce-other-user-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let exe = dir.join("shared_device");
    std::fs::copy(std::env::current_exe().unwrap(), &exe).unwrap();
    for p in [&dir, &exe] {
        std::fs::set_permissions(p, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    }
    // A child another test thread forks while the copy is open for writing
    // holds it open a moment: exec then fails with ETXTBSY, so retry.
    let mut tries = 0;
    let out = loop {
        let r = Command::new(&exe)
            .args(["--exact", "other_user_process", "--nocapture", "--test-threads", "1"])
            .env("SOFTROCE_TEST_OTHER_USER", me.to_string())
            .current_dir(&dir)
            .uid(65534)
            .gid(65534)
            .output();
        match r {
            Err(e) if e.raw_os_error() == Some(rustix::io::Errno::TXTBSY.raw_os_error()) && tries < 50 => {
                tries += 1;
                std::thread::sleep(Duration::from_millis(20));
            }
            r => break r.unwrap(),
        }
    };
    let _ = std::fs::remove_dir_all(&dir);
    let text = String::from_utf8_lossy(&out.stdout);
    eprintln!("uid 65534 saw:{text}");
    assert!(out.status.success(), "{text}\n{}", String::from_utf8_lossy(&out.stderr));
    let refused = text.lines().find(|l| l.starts_with("refused: ") || l == &"joined").expect("an outcome");
    assert!(refused.contains("held by uid 0"), "{refused}");
    assert!(refused.contains("softroce run --loopback"), "{refused}");
    let opens: Vec<&str> = text.lines().filter(|l| l.starts_with("open ")).collect();
    assert!(!opens.is_empty(), "the first user's device file is there: {text}");
    assert!(opens.iter().all(|l| l.ends_with("PermissionDenied")), "{opens:?}");
}
