//! PMDK's librpma (Debian 12's librpma 1.2), unmodified, over softroce's
//! libibverbs and librdmacm: `rpma.c` here is a server that lends a 1 MiB
//! region through the connection's private data and a client that reads
//! it, writes and flushes its own bytes into it, writes a word atomically
//! (librpma 1.2 without native ATOMIC WRITE and FLUSH: an inline fenced
//! RDMA WRITE of 8 bytes and an 8-byte RDMA READ), reads them back and
//! times 64 KiB writes and reads and 8-byte reads. Each side checks the
//! bytes it ends up with.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Output, Stdio};
use std::sync::mpsc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use super::{KillGroup, MPI_TURN, Scratch, TwoHosts, build_in, finish, free_port, have, softroce_at, text};

const HEADER: &str = "/usr/include/librpma.h";

/// What `rpma.c` moves (its REGION, CHECKED_WRITE, BLOCK, BW_OPS): the
/// server receives the client's writes, the client the server's reads.
const KIB: u64 = 1024;
const WRITTEN: u64 = 256 * KIB + 2048 * 64 * KIB;
const READ: u64 = 1024 * KIB + 256 * KIB + 2048 * 64 * KIB;
/// RoCE's largest MTU: no fewer packets than this carry those bytes.
const MAX_MTU: u64 = 4096;

/// Whether `path` exists (CI installs it: then it must).
fn have_file(path: &str) -> bool {
    let found = Path::new(path).is_file();
    if !found {
        assert!(std::env::var_os("CI").is_none(), "CI installs {path}");
        eprintln!("skipped: {path} not installed");
    }
    found
}

/// The `rcvd_pkts` of the `SOFTROCE_STATS` lines in `o`'s stderr.
fn received_packets(o: &Output) -> u64 {
    String::from_utf8_lossy(&o.stderr)
        .lines()
        .filter(|l| l.starts_with("softroce: "))
        .flat_map(|l| l.split_whitespace())
        .filter_map(|w| w.strip_prefix("rcvd_pkts=")?.parse::<u64>().ok())
        .sum()
}

/// The numbers of the client's timing line, in order: write MiB/s, read
/// MiB/s, 8-byte read latency average and median (us).
fn timings(out: &str) -> Option<[f64; 4]> {
    let line = out.lines().find(|l| l.starts_with("client: 64 KiB rpma_write"))?;
    let after = |key: &str| -> Option<f64> { line.split(key).nth(1)?.split_whitespace().next()?.parse().ok() };
    // "rpma_write x2048 (depth 8) 1093.6 MiB/s": the number before the op's "MiB/s".
    let bw = |op: &str| -> Option<f64> {
        let part = line.split(op).nth(1)?;
        let upto = &part[..part.find(" MiB/s")?];
        upto.rsplit(' ').next()?.parse().ok()
    };
    Some([bw("rpma_write")?, bw("rpma_read")?, after(" avg ")?, after(" median ")?])
}

/// The rpma server started over softroce on 127.0.0.1 and a free port,
/// once it says it listens: it, a group killer until it is reaped, the
/// thread reading its stdout (all of it, when joined) and the port. A
/// port some other rdma_cm listener of this host holds makes
/// `rpma_ep_listen` fail: the server then starts again on another.
fn listening_server(
    prog: &str,
    envs: &[(&str, &str)],
    hosts: Option<&TwoHosts>,
) -> (Child, KillGroup, JoinHandle<String>, String) {
    let addr = hosts.map_or("127.0.0.1", |h| h.addr[0]);
    for attempt in 0..5 {
        let port = free_port().to_string();
        let mut server = softroce_at(hosts, 0, envs, &[prog, "server", addr, &port])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let group = KillGroup(rustix::process::Pid::from_child(&server));
        let (tx, rx) = mpsc::channel();
        let out = server.stdout.take().unwrap();
        let reader = std::thread::spawn(move || {
            let mut all = String::new();
            for line in BufReader::new(out).lines().map_while(Result::ok) {
                let _ = tx.send(line.clone());
                all.push_str(&line);
                all.push('\n');
            }
            all
        });
        let until = Instant::now() + Duration::from_secs(30);
        loop {
            match rx.recv_timeout(Duration::from_millis(100)) {
                Ok(l) if l.starts_with("server: listening") => return (server, group, reader, port),
                Ok(_) => {}
                Err(_) if server.try_wait().unwrap().is_some() || Instant::now() > until => {
                    let s = finish(server, Duration::from_secs(5), "the rpma server");
                    std::mem::forget(group);
                    let out = format!("{}\n{}", reader.join().unwrap(), String::from_utf8_lossy(&s.stderr));
                    if out.contains("rpma_ep_listen failed") && attempt < 4 {
                        eprintln!("the rpma server could not listen on {port}, again:\n{out}");
                        break;
                    }
                    panic!("the rpma server did not listen on {port}: {:?}\n{out}", s.status);
                }
                Err(_) => {}
            }
        }
    }
    unreachable!("the loop returns or panics")
}

/// librpma 1.2's server and client (`rpma.c`, built here) over softroce
/// between two processes on 127.0.0.1: the client reads the server's 1 MiB
/// pattern, writes 256 KiB of its own and flushes them, writes an 8-byte
/// word by `rpma_atomic_write` and reads both back; the server, after the
/// client's disconnect, finds the client's bytes, the word and its own
/// pattern everywhere else. Both received their data as RoCE packets
/// (`SOFTROCE_STATS`).
#[test]
fn librpma_client_and_server_over_softroce() {
    rpma_pair("rpma", None);
}

/// The same between two network namespaces over a veth (two hosts): the
/// server on the first host's link address, the client on the second.
#[test]
fn librpma_client_and_server_across_two_network_namespaces() {
    if !have(&["ip"]) {
        return;
    }
    let Some(h) = TwoHosts::new("rpma") else { return };
    rpma_pair("rpma-netns", Some(&h));
}

/// Builds `rpma.c` and runs its server and client (on `hosts`, else on
/// 127.0.0.1), checking both sides' output.
fn rpma_pair(tag: &str, hosts: Option<&TwoHosts>) {
    if !have(&["gcc"]) || !have_file(HEADER) {
        return;
    }
    let _turn = MPI_TURN.lock().unwrap_or_else(|e| e.into_inner());
    let dir = Scratch::new(tag);
    // `pkg-config --libs librpma`: librpma and the two libraries it calls.
    let prog = build_in("gcc", "tests/rpma/rpma.c", &dir.0, &["-lrpma", "-libverbs", "-lrdmacm"]);
    let prog = prog.to_str().unwrap();
    let stats = [("SOFTROCE_STATS", "1")];
    let (mut server, group, reader, port) = listening_server(prog, &stats, hosts);
    let addr = hosts.map_or("127.0.0.1", |h| h.addr[0]);

    // rdma_cm's listen is no socket's: a client that still comes too early
    // is rejected (the program exits 2) and comes again.
    let mut client = None;
    for attempt in 0..10 {
        let c = softroce_at(hosts, 1, &stats, &[prog, "client", addr, &port])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let c = finish(c, Duration::from_secs(180), "the rpma client");
        if c.status.code() == Some(2) && attempt < 9 && server.try_wait().unwrap().is_none() {
            eprintln!("the rpma client was turned away (attempt {attempt}):\n{}", text(&c));
            std::thread::sleep(Duration::from_millis(200 * (attempt + 1)));
            continue;
        }
        client = Some(c);
        break;
    }
    let c = client.unwrap();
    if !c.status.success() {
        // The server waits for a client that will not come back: ended here
        // so that the client's error is what the test reports.
        drop(group);
    } else {
        std::mem::forget(group);
    }
    let s = finish(server, Duration::from_secs(60), "the rpma server");
    let s_out = reader.join().unwrap();
    let c_out = String::from_utf8_lossy(&c.stdout).to_string();
    let both = format!("client:\n{}\nserver:\n{s_out}\n{}", text(&c), String::from_utf8_lossy(&s.stderr));
    assert!(c.status.success() && s.status.success(), "client {:?}, server {:?}\n{both}", c.status, s.status);

    let verified =
        ["client: read verified (1048576 bytes)", "write+flush verified (262144 bytes)", "atomic write verified"];
    for want in verified {
        assert!(c_out.contains(want), "the client did not print {want:?}\n{both}");
    }
    assert!(c_out.contains("client: disconnected"), "{both}");
    assert!(
        s_out.contains("server: verified 524288 bytes written, atomic word 0x52504d4173726f63, 524280 bytes untouched"),
        "the server's check\n{both}"
    );
    let [write_bw, read_bw, lat_avg, lat_median] =
        timings(&c_out).unwrap_or_else(|| panic!("no timing line from the client\n{both}"));
    assert!(write_bw > 0.0 && read_bw > 0.0 && lat_avg > 0.0 && lat_median > 0.0, "{both}");

    let (c_rcvd, s_rcvd) = (received_packets(&c), received_packets(&s));
    assert!(s_rcvd >= WRITTEN / MAX_MTU, "the server received {s_rcvd} RoCE packets for {WRITTEN} bytes\n{both}");
    assert!(c_rcvd >= READ / MAX_MTU, "the client received {c_rcvd} RoCE packets for {READ} bytes\n{both}");
    let where_ = if hosts.is_some() { "across two namespaces" } else { "on one host" };
    println!(
        "librpma 1.2 over softroce {where_}: read, write+flush and atomic write verified by both sides; \
         64 KiB rpma_write {write_bw:.0} MiB/s, rpma_read {read_bw:.0} MiB/s (depth 8); \
         8 B rpma_read {lat_avg:.1} us average, {lat_median:.1} us median; \
         RoCE packets received: client {c_rcvd}, server {s_rcvd}"
    );
}
