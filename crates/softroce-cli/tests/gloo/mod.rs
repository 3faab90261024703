//! gloo (Debian 12's libgloo-dev, 2022-05) over softroce: its ring
//! allreduce over its ibverbs transport between 2 and 3 processes under
//! `softroce run` (`softroce_lo`, port 1, GID index 1: 127.0.0.1), each
//! rank checking every element (`allreduce.cc`), against the same program
//! over gloo's TCP transport on 127.0.0.1.
//!
//! The program keeps out two races of this gloo's ibverbs transport at
//! teardown, both gloo's (gloo's 2025 rework of the transport, pytorch/gloo
//! #437, warns instead of aborting for the first and locks in `~Pair`):
//!
//! - `AllreduceRing` and `BarrierAllToAll` never wait for the notification
//!   they write, and the ibverbs `Buffer` destructor enforces that no send
//!   is pending: a rank whose last notification is not yet acknowledged
//!   when `run()` returns aborts ("Destructing buffer expecting
//!   completions"), its neighbour then on its next write ("transport retry
//!   counter exceeded"). Over softroce that ACK can leave hundreds of
//!   microseconds after the peer took the write's completion (383 us in
//!   one capture; in another the aborting rank's peer had not sent it
//!   yet): gloo's device thread sleeps in poll(2) on the completion
//!   channel's fd, which softroce cannot see as a waiter, so the packets
//!   are nearly all the driver thread's (`SOFTROCE_STATS`: `driver_passes`
//!   close to `passes`, `app_grace_us=1000`, `ack_deferred` in the
//!   hundreds per rank). Kernel rxe ACKs in softirq as the packet comes,
//!   so there the ACK nearly always comes before the peer's next write;
//!   here the plain program aborted in each of 7 runs. The program waits
//!   for those sends.
//! - gloo's device thread wakes the rank waiting for a completion, then,
//!   under the pair's mutex, posts the replacing receive; `~Pair` does not
//!   take the mutex, so a rank that destroys its context right after the
//!   final barrier's wake-up freed the pair under it (SIGSEGV in
//!   `Pair::postReceive`: 4 of 40 runs with 3 ranks, 1 of 40 with 2; none
//!   in 110 with 3 since). The program takes each pair's mutex once before
//!   it destroys the context.
//!
//! Index 1 is the one to give: `softroce_lo` lists no `::1` GID (no
//! loopback device can receive it for the others, `config.rs`), where it
//! used to list one at index 2 that reached nobody.

use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Child, Command, Output, Stdio};
use std::time::Duration;

use super::{MPI_TURN, Scratch, TwoHosts, build_in, devices_in, finish, have, in_netns, softroce_at, text};

/// What the program needs of libgloo-dev.
const HEADER: &str = "/usr/include/gloo/transport/ibverbs/device.h";

/// The program's sizes (elements) and runs of each: as `kSizes` in
/// `allreduce.cc`.
const SIZES: [(u64, u64); 4] = [(1, 200), (1024, 100), (256 * 1024, 10), (4 * 1024 * 1024, 5)];

/// The path MTU gloo's pairs use (`IBV_MTU_1024`).
const MTU: u64 = 1024;

/// The ranks of one run, killed (their process groups) if dropped
/// unfinished: a panic while waiting for one leaves no other behind.
struct Ranks(Vec<Child>);

impl Drop for Ranks {
    fn drop(&mut self) {
        for c in &mut self.0 {
            let _ =
                rustix::process::kill_process_group(rustix::process::Pid::from_child(c), rustix::process::Signal::KILL);
            let _ = c.wait();
        }
    }
}

/// `np` ranks of `prog` over `device` ("tcp" for gloo's TCP transport),
/// started together with a fresh store directory under `dir`; each rank's
/// output once all finished. With `hosts`, rank r runs on host r % 2 (TCP
/// on that host's link address), else all on this one.
fn run_ranks(prog: &Path, dir: &Path, np: usize, device: &str, hosts: Option<&TwoHosts>) -> Vec<Output> {
    let store = dir.join(format!("store-{device}-{np}-{}", hosts.is_some()));
    std::fs::create_dir_all(&store).unwrap();
    let (p, s) = (prog.to_str().unwrap(), store.to_str().unwrap());
    let mut ranks = Ranks(Vec::new());
    for rank in 0..np {
        let (r, n) = (rank.to_string(), np.to_string());
        let host = rank % 2;
        let mut c = if device == "tcp" {
            let tcp = hosts.map_or("tcp".to_string(), |h| format!("tcp:{}", h.addr[host]));
            let mut c = Command::new(p);
            c.args([&r, &n, s, &tcp]).stdin(Stdio::null()).process_group(0);
            match hosts {
                Some(h) => in_netns(&h.ns[host], &c),
                None => c,
            }
        } else {
            softroce_at(hosts, host, &[("SOFTROCE_STATS", "1")], &[p, &r, &n, s, device])
        };
        ranks.0.push(c.stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap());
    }
    let mut outs = Vec::new();
    while !ranks.0.is_empty() {
        let c = ranks.0.remove(0);
        outs.push(finish(
            c,
            Duration::from_secs(180),
            &format!("gloo allreduce rank {} of {np} over {device}", outs.len()),
        ));
    }
    outs
}

/// Checks every rank's output; returns, per size, the slowest rank's
/// microseconds per allreduce.
fn check_ranks(outs: &[Output], device: &str) -> Vec<f64> {
    let np = outs.len();
    let mut us = vec![0.0f64; SIZES.len()];
    for (rank, o) in outs.iter().enumerate() {
        let all = text(o);
        let what = format!("rank {rank} of {np} over {device}");
        assert!(o.status.success(), "{what}: {}\n{all}", o.status);
        assert!(!all.contains("MISMATCH"), "{what}\n{all}");
        for (i, (elements, iterations)) in SIZES.iter().enumerate() {
            let head = format!("rank {rank}: allreduce {elements} elements verified iterations={iterations} us=");
            let t: f64 = all
                .lines()
                .find_map(|l| l.strip_prefix(&head))
                .and_then(|v| v.trim().parse().ok())
                .unwrap_or_else(|| panic!("{what}: no \"{head}\"\n{all}"));
            assert!(t > 0.0, "{what}\n{all}");
            us[i] = us[i].max(t);
        }
        assert!(all.lines().any(|l| l == format!("rank {rank}: done")), "{what}: no final barrier\n{all}");
        if device != "tcp" {
            // Every element came through softroce: the ring writes the
            // whole vector to the right neighbour np - 1 times per run.
            let least: u64 = SIZES.iter().map(|(e, it)| it * (np as u64 - 1) * (e * 4).div_ceil(MTU)).sum();
            let rcvd: u64 = String::from_utf8_lossy(&o.stderr)
                .lines()
                .filter(|l| l.starts_with("softroce: "))
                .flat_map(|l| l.split_whitespace())
                .filter_map(|w| w.strip_prefix("rcvd_pkts=")?.parse::<u64>().ok())
                .sum();
            assert!(rcvd >= least, "{what}: {rcvd} RoCE packets received, at least {least} expected\n{all}");
        }
    }
    us
}

/// gloo's ring allreduce over its ibverbs transport on `softroce_lo`
/// (port 1, GID index 1: 127.0.0.1) between 2 and 3 processes, float
/// vectors of 1, 1 Ki, 256 Ki and 4 Mi elements, every element checked on
/// every rank, then the same over gloo's TCP transport; prints the time
/// per allreduce of each and their ratio.
#[test]
fn gloo_ibverbs_allreduce_against_tcp() {
    allreduce_against_tcp("softroce_lo", None);
}

/// The same between two network namespaces over a veth (two hosts), the
/// ranks alternating between them, over the link's device (GID index 1:
/// the host's link address) and TCP on the link addresses.
#[test]
fn gloo_ibverbs_allreduce_across_two_network_namespaces() {
    if !have(&["ip"]) {
        return;
    }
    let Some(h) = TwoHosts::new("gloo") else { return };
    let link = devices_in(Some(&h.ns[0])).swap_remove(0);
    allreduce_against_tcp(&link, Some(&h));
}

/// Builds `allreduce.cc` and runs it with 2 and 3 ranks over `device`,
/// then over TCP, on `hosts` or this one; prints both times per size.
fn allreduce_against_tcp(device: &str, hosts: Option<&TwoHosts>) {
    if !have(&["g++"]) {
        return;
    }
    if !Path::new(HEADER).is_file() {
        assert!(std::env::var_os("CI").is_none(), "CI installs libgloo-dev");
        eprintln!("skipped: {HEADER} not installed");
        return;
    }
    let _turn = MPI_TURN.lock().unwrap_or_else(|e| e.into_inner());
    let dir = Scratch::new(if hosts.is_some() { "gloo-netns" } else { "gloo" });
    let prog = build_in("g++", "tests/gloo/allreduce.cc", &dir.0, &["-lgloo"]);
    let where_ = if hosts.is_some() { "across two namespaces" } else { "on one host" };
    for np in [2, 3] {
        let rdma = check_ranks(&run_ranks(&prog, &dir.0, np, device, hosts), device);
        let tcp = check_ranks(&run_ranks(&prog, &dir.0, np, "tcp", hosts), "tcp");
        for (i, (elements, _)) in SIZES.iter().enumerate() {
            println!(
                "gloo allreduce {where_}, {np} ranks, {elements} floats: ibverbs over softroce {:.1} us, TCP {:.1} us ({:.2}x TCP's time)",
                rdma[i],
                tcp[i],
                rdma[i] / tcp[i]
            );
        }
    }
}
