//! Faults of the shared device's table, with real processes and locks: a
//! run that crashed leaves its file behind and the next run goes on; a
//! process that holds the table's lock and hangs (stopped, or spinning)
//! makes joins fail loudly while the members' data path goes on. Each
//! test uses a device on 127.0.0.1 and a UDP port of its own.

use std::io::{BufRead, BufReader};
use std::net::{Ipv4Addr, SocketAddr, UdpSocket};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use roce_host::{HostError, LOCK_PATIENCE, Member, Route, device_file};

/// A port on 127.0.0.1 nobody holds right now.
fn fresh_addr() -> SocketAddr {
    let s = UdpSocket::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
    s.local_addr().unwrap()
}

/// The child's side: joins `ROCE_HOST_TEST_JOIN`, prints its blocks and
/// waits to be killed.
#[test]
fn joined_process() {
    let Ok(addr) = std::env::var("ROCE_HOST_TEST_JOIN") else { return };
    let (m, _sock) = Member::join(addr.parse().unwrap()).unwrap();
    println!("\nJOINED {}", m.blocks().iter().map(u32::to_string).collect::<Vec<_>>().join(","));
    std::thread::sleep(Duration::from_secs(60));
}

/// A child process of this test binary joined to `addr` ([`joined_process`])
/// and its `JOINED` line.
fn spawn_joined(addr: SocketAddr) -> (std::process::Child, String) {
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "joined_process", "--nocapture", "--test-threads", "1"])
        .env("ROCE_HOST_TEST_JOIN", addr.to_string())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let out = BufReader::new(child.stdout.take().unwrap());
    let line = out.lines().map_while(Result::ok).find(|l| l.starts_with("JOINED ")).expect("the child joined");
    (child, line)
}

#[test]
fn a_crashed_runs_file_does_not_block_the_next_run() {
    let addr = fresh_addr();
    let (mut child, line) = spawn_joined(addr);
    let dead_blocks: Vec<u32> = line["JOINED ".len()..].split(',').map(|b| b.parse().unwrap()).collect();
    child.kill().unwrap();
    child.wait().unwrap();
    let path = device_file(addr);
    assert!(path.exists(), "a killed member leaves the file behind");

    // The next run joins at once, reaps the dead member, and does not get
    // its blocks (they are quarantined: its peers may still retry to them).
    let t = Instant::now();
    let (m, sock) = Member::join(addr).unwrap();
    assert!(t.elapsed() < Duration::from_secs(2), "joining over a stale file took {:?}", t.elapsed());
    assert_eq!(m.stats().reaped.load(std::sync::atomic::Ordering::Relaxed), 1, "the dead member was reaped");
    assert!(m.blocks().iter().all(|b| !dead_blocks.contains(b)), "{:?} vs the dead {dead_blocks:?}", m.blocks());
    let qpn = m.alloc_qpn(&sock, |_| false).unwrap();
    assert_eq!(m.route(qpn), Route::Mine);
    assert_eq!(m.route(dead_blocks[0] << 12 | 5), Route::Nobody, "the dead member's QPs are nobody's");
    // The last one out removes the file.
    m.leave(sock);
    assert!(!path.exists(), "the last member out removes the file");
}

#[test]
fn a_hung_lock_holder_makes_joins_fail_loudly_and_the_data_path_goes_on() {
    let addr = fresh_addr();
    let (m, sock) = Member::join(addr).unwrap();
    let qpn = m.alloc_qpn(&sock, |_| false).unwrap();
    // A process that took the table's lock and hangs: another open file
    // description holding the flock (what a stopped member holds).
    let holder = std::fs::File::open(device_file(addr)).unwrap();
    rustix::fs::flock(&holder, rustix::fs::FlockOperation::LockExclusive).unwrap();

    let t = Instant::now();
    let err = Member::join(addr).map(|_| ()).unwrap_err();
    let waited = t.elapsed();
    assert!(matches!(err, HostError::Locked { .. }), "{err}");
    assert!(err.to_string().contains("fuser"), "the error says how to find the holder: {err}");
    assert!(waited >= LOCK_PATIENCE && waited < LOCK_PATIENCE * 3, "gave up after {waited:?}");

    // Meanwhile the member routes, allocates within its block and does its
    // upkeep without waiting for the lock.
    let t = Instant::now();
    for _ in 0..100 {
        m.upkeep(&sock);
    }
    assert!(t.elapsed() < Duration::from_secs(1), "upkeep waited for the lock: {:?}", t.elapsed());
    assert_eq!(m.route(qpn), Route::Mine);
    let next = m.alloc_qpn(&sock, |q| q == qpn).unwrap();
    assert_ne!(next, qpn);
    assert_eq!(m.route(next), Route::Mine);

    // Once the holder lets go, joins work again.
    drop(holder);
    let (m2, sock2) = Member::join(addr).unwrap();
    assert!(m2.blocks().iter().all(|b| !m.blocks().contains(b)), "blocks are never shared");
    m2.leave(sock2);
    m.leave(sock);
}

/// A peer on this host learns that a QP's process died (what its CM acts
/// on in place of the dead process's kernel): alive while the child holds
/// its membership, dead the moment it is killed, before anyone reaped it
/// and with no packet sent; a member that leaves takes its QPs along; an
/// address with no shared device is none of its business.
#[test]
fn a_peer_sees_a_killed_members_qps_die() {
    let addr = fresh_addr();
    let (me, my_sock) = Member::join(addr).unwrap();
    let (mut child, line) = spawn_joined(addr);
    let theirs: u32 = line["JOINED ".len()..].split(',').next().unwrap().parse().unwrap();
    let (their_qpn, my_qpn) = (theirs << 12 | 7, me.alloc_qpn(&my_sock, |_| false).unwrap());
    let mut w = roce_host::PeerWatch::new();
    let now = Instant::now();
    assert_eq!(w.qp_alive(addr, their_qpn, now), Some(true));
    assert_eq!(w.qp_alive(addr, my_qpn, now), Some(true));
    child.kill().unwrap();
    child.wait().unwrap();
    assert_eq!(w.qp_alive(addr, their_qpn, Instant::now()), Some(false), "killed");
    assert_eq!(w.qp_alive(addr, my_qpn, Instant::now()), Some(true));
    assert_eq!(w.qp_alive(fresh_addr(), 0x1005, Instant::now()), None, "no shared device there");
    me.leave(my_sock);
    assert_eq!(w.qp_alive(addr, my_qpn, Instant::now()), Some(false), "left: its blocks are free");
}
