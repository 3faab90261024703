//! `softroce rc-pingpong` server and client as two processes, as users run
//! rdma-core's `ibv_rc_pingpong`: the exchange, the printed addresses and
//! results, with and without `-g`, with events (`-e`) and data checks (`-c`).
//! Server and client devices are on two free loopback addresses (leased) and
//! the TCP exchange uses a free port.

use std::net::{Ipv4Addr, TcpListener};
use std::process::{Command, Stdio};
use std::time::Duration;

use softroce::config::LoopbackLease;

/// Two loopback addresses of the test's own (server's, client's), held until
/// dropped: keep them until both processes have ended.
fn leases() -> (LoopbackLease, LoopbackLease) {
    let take = || LoopbackLease::take().expect("a free loopback address");
    (take(), take())
}

/// `GID ::ffff:ADDR`, as rc-pingpong prints an IPv4 GID.
fn gid(addr: Ipv4Addr) -> String {
    format!("GID ::ffff:{addr}")
}

/// A TCP port free right now, for a server process that binds it itself:
/// taken by binding port 0 and let go at once, just before the server starts.
fn free_port() -> u16 {
    TcpListener::bind("0.0.0.0:0").unwrap().local_addr().unwrap().port()
}

/// Kills the server if the test fails before it ends.
struct Reap(Option<std::process::Child>);

impl Drop for Reap {
    fn drop(&mut self) {
        if let Some(mut c) = self.0.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

fn pingpong(server_addr: Ipv4Addr, client_addr: Ipv4Addr, extra: &[&str]) -> (String, String) {
    let mut args = vec!["-s", "2048", "-n", "200"];
    args.extend_from_slice(extra);
    pingpong_kind("rc-pingpong", server_addr, client_addr, &args)
}

fn check(out: &str, local: &str, remote: &str) {
    let l: Vec<&str> = out.lines().collect();
    assert!(l.len() == 4 || l.len() > 4 && l[4].trim_start().starts_with("sent_pkts"), "{out}");
    assert!(l[0].starts_with("  local address:  LID 0x0000, QPN 0x"), "{out}");
    assert!(l[0].ends_with(local), "{out}");
    assert!(l[1].starts_with("  remote address:  LID 0x0000, QPN 0x") && l[1].ends_with(remote), "{out}");
    // "819200 bytes in 0.05 seconds = 131.07 Mbit/sec": 2048 x 200 x 2.
    let f: Vec<&str> = l[2].split_whitespace().collect();
    assert_eq!((f[0], f[1], f[2], f[4], f[5], f[7]), ("819200", "bytes", "in", "seconds", "=", "Mbit/sec"), "{out}");
    assert!(f[6].parse::<f64>().unwrap() > 0.0);
    let f: Vec<&str> = l[3].split_whitespace().collect();
    assert_eq!((f[0], f[1], f[7]), ("200", "iters", "usec/iter"), "{out}");
}

#[test]
fn two_softroce_pingpongs_talk_with_a_gid() {
    let (ls, lc) = leases();
    let (s, c) = pingpong(ls.addr(), lc.addr(), &["-g", "1", "--stats"]);
    check(&s, &gid(ls.addr()), &gid(lc.addr()));
    check(&c, &gid(lc.addr()), &gid(ls.addr()));
    // --stats: rxe's counters; 200 SENDs each way.
    let counter = |out: &str, name: &str| -> u64 {
        out.lines()
            .find_map(|l| {
                l.split_whitespace()
                    .collect::<Vec<_>>()
                    .get(..2)
                    .filter(|f| f[0] == name)
                    .map(|f| f[1].parse().unwrap())
            })
            .unwrap()
    };
    assert_eq!((counter(&s, "rdma_sends"), counter(&s, "rdma_recvs")), (200, 200), "{s}");
    assert_eq!(counter(&c, "retry_exceeded_err"), 0);
}

#[test]
fn without_a_gid_the_tcp_peer_is_used_and_events_and_checks_work() {
    let (ls, lc) = leases();
    let (s, c) = pingpong(ls.addr(), lc.addr(), &["-e", "-c"]);
    check(&s, "GID ::", "GID ::");
    check(&c, "GID ::", "GID ::");
}

/// `extra`, with `-n 100` unless it sets the iterations.
fn with_iters<'a>(extra: &[&'a str]) -> Vec<&'a str> {
    let mut v = extra.to_vec();
    if !v.contains(&"-n") {
        v.extend(["-n", "100"]);
    }
    v
}

fn pingpong_kind(cmd: &str, server_addr: Ipv4Addr, client_addr: Ipv4Addr, extra: &[&str]) -> (String, String) {
    let bin = env!("CARGO_BIN_EXE_softroce");
    // The server binds the port itself: pick it right before starting it.
    let port_s = free_port().to_string();
    let server = Command::new(bin)
        .args([cmd, "-p", &port_s])
        .args(with_iters(extra))
        .env("SOFTROCE_DEVICES", format!("srv={server_addr}"))
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut server = Reap(Some(server));
    for _ in 0..100 {
        std::thread::sleep(Duration::from_millis(50));
        let out = Command::new(bin)
            .args([cmd, "-p", &port_s])
            .args(with_iters(extra))
            .arg(server_addr.to_string())
            .env("SOFTROCE_DEVICES", format!("cli={client_addr}"))
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr).to_string();
        if err.contains("Connection refused") {
            continue;
        }
        assert!(out.status.success(), "{cmd} client failed: {err}");
        let s = server.0.take().unwrap().wait_with_output().unwrap();
        assert!(s.status.success(), "{cmd} server failed: {}", String::from_utf8_lossy(&s.stderr));
        return (String::from_utf8_lossy(&s.stdout).to_string(), String::from_utf8_lossy(&out.stdout).to_string());
    }
    panic!("{cmd}: the server never accepted");
}

#[test]
fn ud_pingpong_exchanges_datagrams() {
    let (ls, lc) = leases();
    let (s, c) = pingpong_kind("ud-pingpong", ls.addr(), lc.addr(), &["-g", "1", "-c"]);
    for out in [&s, &c] {
        let l: Vec<&str> = out.lines().collect();
        assert_eq!(l.len(), 4, "{out}");
        // 2048 bytes x 100 iterations x 2 directions.
        assert!(l[2].starts_with("409600 bytes in ") && l[3].starts_with("100 iters in "), "{out}");
    }
    assert!(c.lines().next().unwrap().ends_with(&gid(lc.addr())));
}

#[test]
fn srq_pingpong_runs_many_qps_on_one_srq() {
    let (ls, lc) = leases();
    let (s, c) = pingpong_kind("srq-pingpong", ls.addr(), lc.addr(), &["-q", "4", "-s", "1000", "-g", "1"]);
    for out in [&s, &c] {
        let l: Vec<&str> = out.lines().collect();
        // A local and a remote address line per QP, then the results.
        assert_eq!(l.len(), 2 * 4 + 2, "{out}");
        assert_eq!(l.iter().filter(|x| x.starts_with("  local address:")).count(), 4);
        assert!(l[8].starts_with("200000 bytes in ") && l[9].starts_with("100 iters in "), "{out}");
    }
}
