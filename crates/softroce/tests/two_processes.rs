//! Two processes on loopback, as users run softroce, on two free loopback
//! addresses (leased by the parent, which tells the peer its own): this test
//! binary re-runs itself as the peer (`peer_process`, which does nothing
//! unless `SOFTROCE_TEST_PEER` is set). They swap QP details over TCP, the way
//! rdma-core's examples do, then move every opcode's data from 0 B to
//! 16 MiB and check it byte for byte; another test kills the peer in the
//! middle of a transfer and checks that nothing hangs.

mod common;

use std::io::{BufRead, BufReader, Write};
use std::net::{IpAddr, Ipv4Addr, TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::pattern;
use softroce::config::{DeviceInfo, LoopbackLease};
use softroce::testing::{End, EndSpec, wait_one};
use softroce::{ConnectOptions, Options, Payload, QpEndpoint, RecvWr, SendFlags, SendWr, WcStatus, WrOpcode};

const MEM: usize = 40 << 20;
const SIZES: [usize; 9] = [0, 1, 63, 4095, 4096, 4097, 65_536, 1 << 20, 16 << 20];

fn device(addr: Ipv4Addr) -> DeviceInfo {
    DeviceInfo::on_address(format!("p{}", addr.octets()[3]), IpAddr::V4(addr)).unwrap()
}

/// A loopback address of this test's own, held until the lease is dropped:
/// the parent holds its own and the peer's for the whole test.
fn lease() -> LoopbackLease {
    LoopbackLease::take().expect("a free loopback address")
}

fn open(addr: Ipv4Addr) -> End {
    let spec = EndSpec { cq_entries: 1024, mr_len: MEM, qp_depth: 256, ..EndSpec::default() };
    End::open(&device(addr), Options::default(), spec)
}

/// `qpn psn addr rkey vaddr` on one line.
fn send_info(s: &mut TcpStream, e: &End, psn: u32) {
    let ep = e.qp.endpoint(psn);
    writeln!(s, "{} {} {} {} {}", ep.qpn, ep.psn, ep.gid, e.mr.rkey(), e.mr.addr()).unwrap();
}

fn recv_info(r: &mut impl BufRead) -> (QpEndpoint, u32, u64) {
    let mut line = String::new();
    r.read_line(&mut line).unwrap();
    let f: Vec<&str> = line.split_whitespace().collect();
    assert_eq!(f.len(), 5, "peer info line {line:?}");
    let ep = QpEndpoint { qpn: f[0].parse().unwrap(), psn: f[1].parse().unwrap(), gid: f[2].parse().unwrap() };
    (ep, f[3].parse().unwrap(), f[4].parse().unwrap())
}

/// The peer, told the TCP port to connect to and the (leased) address its
/// device is to bind.
fn spawn_peer(test: &str, port: u16, role: &str, addr: Ipv4Addr) -> Child {
    Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "peer_process", "--nocapture", "--test-threads", "1"])
        .env("SOFTROCE_TEST_PEER", format!("{role}:{port}:{test}:{addr}"))
        .stdout(Stdio::inherit())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap()
}

/// The peer: echoes every SEND back as a SEND of the same bytes, and
/// otherwise only serves RDMA. Ends when the parent closes the TCP stream.
#[test]
fn peer_process() {
    let Ok(spec) = std::env::var("SOFTROCE_TEST_PEER") else { return };
    let mut it = spec.split(':');
    let (_role, port) = (it.next().unwrap(), it.next().unwrap().parse::<u16>().unwrap());
    let (_test, addr) = (it.next().unwrap(), it.next().unwrap().parse::<Ipv4Addr>().unwrap());
    let me = open(addr);
    let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    let mut r = BufReader::new(s.try_clone().unwrap());
    send_info(&mut s, &me, 7);
    let (peer, _, _) = recv_info(&mut r);
    me.qp.connect(7, &peer).unwrap();
    // Receives for the echoes, one at a time: the parent sends one SEND and
    // waits for its echo before the next.
    loop {
        let mut line = String::new();
        if r.read_line(&mut line).unwrap() == 0 {
            return;
        }
        let len: usize = line.trim().parse().unwrap();
        let sge = [me.mr.sge(0, len as u32)];
        me.qp.post_recv(&RecvWr { wr_id: 1, sg_list: &sge }).unwrap();
        writeln!(s, "ready").unwrap();
        let w = wait_one(&me.cq, Duration::from_secs(60));
        assert_eq!((w.status, w.byte_len as usize), (WcStatus::Success, len));
        let mut wr = SendWr::new(2, WrOpcode::Send, SendFlags::SIGNALED, Payload::Sges(&sge));
        wr.imm_data = 0;
        me.qp.post_send(&wr).unwrap();
        assert_eq!(wait_one(&me.cq, Duration::from_secs(60)).status, WcStatus::Success);
    }
}

#[test]
fn two_processes_move_every_opcode_from_0_bytes_to_16_mib() {
    let (mine, peers) = (lease(), lease());
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let mut child = spawn_peer("all", l.local_addr().unwrap().port(), "server", peers.addr());
    let (mut s, _) = l.accept().unwrap();
    let mut r = BufReader::new(s.try_clone().unwrap());
    let me = open(mine.addr());
    let (peer, rkey, raddr) = recv_info(&mut r);
    send_info(&mut s, &me, 0x00ff_fff0);
    me.qp.connect(0x00ff_fff0, &peer).unwrap();
    let t0 = Instant::now();
    let mut moved = 0usize;
    for (i, &len) in SIZES.iter().enumerate() {
        let seed = i as u64 + 1;
        // SEND, echoed back by the peer into our second half.
        let data = pattern(len, seed);
        me.mr.write(0, &data).unwrap();
        writeln!(s, "{len}").unwrap();
        let mut line = String::new();
        r.read_line(&mut line).unwrap();
        let back = [me.mr.sge(20 << 20, len as u32)];
        me.qp.post_recv(&RecvWr { wr_id: 9, sg_list: &back }).unwrap();
        let sge = [me.mr.sge(0, len as u32)];
        // Odd sizes go as SEND with immediate.
        let op = if len % 2 == 1 { WrOpcode::SendWithImm } else { WrOpcode::Send };
        me.qp.post_send(&SendWr::new(1, op, SendFlags::SIGNALED, Payload::Sges(&sge))).unwrap();
        let mut got = [wait_one(&me.cq, Duration::from_secs(60)), wait_one(&me.cq, Duration::from_secs(60))];
        got.sort_by_key(|w| w.wr_id);
        assert_eq!((got[0].wr_id, got[0].status), (1, WcStatus::Success));
        assert_eq!((got[1].wr_id, got[1].status, got[1].byte_len as usize), (9, WcStatus::Success, len));
        assert!(me.mr.to_vec(20 << 20, len).unwrap() == data, "SEND of {len} bytes came back different");
        // WRITE to the peer at 20 MiB, READ it back at 20 MiB here. (WRITE
        // with immediate, which needs a receive at the peer, is in
        // tests/loopback.rs.)
        let data = pattern(len, seed * 31);
        me.mr.write(0, &data).unwrap();
        let mut wr = SendWr::new(2, WrOpcode::RdmaWrite, SendFlags::SIGNALED, Payload::Sges(&sge));
        wr.remote_addr = raddr + (20 << 20);
        wr.rkey = rkey;
        me.qp.post_send(&wr).unwrap();
        let mut wr = SendWr::new(3, WrOpcode::RdmaRead, SendFlags::SIGNALED, Payload::Sges(&back));
        wr.remote_addr = raddr + (20 << 20);
        wr.rkey = rkey;
        me.qp.post_send(&wr).unwrap();
        for id in [2, 3] {
            let w = wait_one(&me.cq, Duration::from_secs(60));
            assert_eq!((w.wr_id, w.status), (id, WcStatus::Success), "{w:?}");
        }
        assert!(me.mr.to_vec(20 << 20, len).unwrap() == data, "WRITE+READ of {len} bytes differ");
        moved += 4 * len;
    }
    // Atomics: 100 FETCH_ADDs then a CMP_SWP, on a cell of the peer.
    let cell = raddr + (39 << 20);
    let sge = [me.mr.sge(0, 8)];
    for k in 0..100u64 {
        let mut wr = SendWr::new(10 + k, WrOpcode::AtomicFetchAndAdd, SendFlags::SIGNALED, Payload::Sges(&sge));
        (wr.remote_addr, wr.rkey, wr.compare_add) = (cell, rkey, 3);
        me.qp.post_send(&wr).unwrap();
        assert_eq!(wait_one(&me.cq, Duration::from_secs(10)).status, WcStatus::Success);
        assert_eq!(me.mr.to_vec(0, 8).unwrap(), (3 * k).to_ne_bytes());
    }
    let mut wr = SendWr::new(200, WrOpcode::AtomicCmpAndSwp, SendFlags::SIGNALED, Payload::Sges(&sge));
    (wr.remote_addr, wr.rkey, wr.compare_add, wr.swap) = (cell, rkey, 300, 5);
    me.qp.post_send(&wr).unwrap();
    assert_eq!(wait_one(&me.cq, Duration::from_secs(10)).status, WcStatus::Success);
    assert_eq!(me.mr.to_vec(0, 8).unwrap(), 300u64.to_ne_bytes());
    let rsge = [me.mr.sge(8, 8)];
    let mut wr = SendWr::new(201, WrOpcode::RdmaRead, SendFlags::SIGNALED, Payload::Sges(&rsge));
    (wr.remote_addr, wr.rkey) = (cell, rkey);
    me.qp.post_send(&wr).unwrap();
    assert_eq!(wait_one(&me.cq, Duration::from_secs(10)).status, WcStatus::Success);
    assert_eq!(me.mr.to_vec(8, 8).unwrap(), 5u64.to_ne_bytes());
    println!("moved {moved} bytes between two processes in {:?}", t0.elapsed());
    drop(s);
    drop(r);
    assert!(child.wait().unwrap().success(), "the peer process failed");
}

#[test]
fn killing_the_peer_mid_transfer_fails_outstanding_work_within_the_retry_bound() {
    let (mine, peers) = (lease(), lease());
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let mut child = spawn_peer("kill", l.local_addr().unwrap().port(), "server", peers.addr());
    let (mut s, _) = l.accept().unwrap();
    let mut r = BufReader::new(s.try_clone().unwrap());
    let me = open(mine.addr());
    let (peer, rkey, raddr) = recv_info(&mut r);
    send_info(&mut s, &me, 1);
    // 4.096 us x 2^10 = 4.2 ms per timeout, 3 retries: a dead peer is
    // detected within 4 timeouts.
    let opts = ConnectOptions { timeout: 10, retry_cnt: 3, ..ConnectOptions::default() };
    me.qp.connect_with(1, &peer, &opts).unwrap();
    // Prove the peer is alive, then queue 64 WRITEs of 1 MiB and kill it.
    let sge = [me.mr.sge(0, 1 << 20)];
    let mut wr = SendWr::new(0, WrOpcode::RdmaWrite, SendFlags::SIGNALED, Payload::Sges(&sge));
    (wr.remote_addr, wr.rkey) = (raddr, rkey);
    me.qp.post_send(&wr).unwrap();
    assert_eq!(wait_one(&me.cq, Duration::from_secs(10)).status, WcStatus::Success);
    for k in 1..=64 {
        wr.wr_id = k;
        me.qp.post_send(&wr).unwrap();
    }
    std::thread::sleep(Duration::from_millis(2));
    child.kill().unwrap();
    let _ = child.wait();
    let t = Instant::now();
    let mut statuses = Vec::new();
    while statuses.len() < 64 {
        let w = wait_one(&me.cq, Duration::from_secs(10));
        statuses.push((w.wr_id, w.status));
    }
    let waited = t.elapsed();
    // Some WRITEs may have completed before the kill; then one fails with
    // RETRY_EXC_ERR and the rest are flushed, in order.
    let first_bad = statuses.iter().position(|(_, s)| *s != WcStatus::Success).expect("the kill is noticed");
    assert_eq!(statuses[first_bad].1, WcStatus::RetryExcErr, "{statuses:?}");
    assert!(statuses[first_bad + 1..].iter().all(|(_, s)| *s == WcStatus::WrFlushErr), "{statuses:?}");
    assert!(statuses.iter().map(|(id, _)| *id).eq(1..=64), "in order");
    assert!(waited < Duration::from_secs(5), "failed within the retry bound, took {waited:?}");
    assert_eq!(me.qp.state(), softroce::QpState::Err);
    println!("peer killed: {first_bad} WRITEs had completed, the rest failed within {waited:?}");
}
