//! End to end through real network namespaces: `scripts/netns/setup.sh` builds the topology around the
//! `roce-netem relay`, `roce-netem send` runs in namespace a and `roce-netem recv` in namespace b, and
//! `scripts/netns/teardown.sh` (always run, by a guard) reports the relay's counters.
//!
//! Needs root, the `ip` command and `/dev/net/tun`; without them each test says why it is skipped and
//! passes. The nftables test also needs `nft`. The tests run one at a time (they are timing-sensitive on a
//! 2-core machine), each with its own namespace prefix.

use std::io::{BufRead, BufReader};
use std::process::{ChildStdout, Command, Stdio};

use roce_netem::probe::Tally;

mod common;

use common::*;

/// Sends `count` probe datagrams of `size` bytes from namespace `from` to `to_ip`:4791, received in
/// namespace `at`; returns the receiver's tally.
fn probe(topo: &Topology, from: char, at: char, to_ip: &str, count: u32, size: usize) -> Tally {
    let bind = if to_ip.contains(':') { format!("[{to_ip}]:4791") } else { format!("{to_ip}:4791") };
    let (count_s, size_s) = (count.to_string(), size.to_string());
    let rx = Command::new("ip")
        .args(["netns", "exec", &topo.ns(at), BIN, "recv", "--bind", &bind, "--size", &size_s, "--count", &count_s])
        .args(["--idle", "1s", "--timeout", "60s"])
        .stdout(Stdio::piped())
        .spawn()
        .expect("start the receiver");
    let mut rx = ChildGuard(Some(rx));
    let stdout: ChildStdout = rx.0.as_mut().unwrap().stdout.take().unwrap();
    let mut lines = BufReader::new(stdout).lines();
    let first = lines.next().and_then(Result::ok);
    assert_eq!(first.as_deref(), Some("ready"), "receiver did not start");
    let tx = Command::new("ip")
        .args(["netns", "exec", &topo.ns(from), BIN, "send", "--to", &bind, "--count", &count_s, "--size", &size_s])
        .output()
        .expect("run the sender");
    assert!(tx.status.success(), "sender failed:\n{}", show(&tx));
    let rest: Vec<String> = lines.map_while(Result::ok).collect();
    let status = rx.0.take().unwrap().wait().expect("wait for the receiver");
    assert!(status.success(), "receiver failed: {status}");
    let last = rest.last().cloned().unwrap_or_default();
    Tally::parse(&last).unwrap_or_else(|| panic!("bad receiver output {rest:?}"))
}

fn assert_between(name: &str, value: u64, low: u64, high: u64) {
    assert!((low..=high).contains(&value), "{name} = {value}, expected {low}..={high}");
}

#[test]
fn no_impairment_everything_arrives_intact_and_in_order() {
    let Some(_serial) = prepare("no_impairment_everything_arrives_intact_and_in_order") else { return };
    let topo = Topology::setup("n", "--seed 1", None);
    let t = probe(&topo, 'a', 'b', ADDR_B, 2000, 1000);
    assert_eq!(t, Tally { received: 2000, intact: 2000, unique: 2000, ..Tally::default() }, "a -> b");
    // The other direction works too.
    let back = probe(&topo, 'b', 'a', ADDR_A, 300, 1000);
    assert_eq!(back, Tally { received: 300, intact: 300, unique: 300, ..Tally::default() }, "b -> a");
    let r = topo.teardown();
    for (dir, s, sent) in [("a->b", r.ab, 2000), ("b->a", r.ba, 300)] {
        assert!(s.forwarded >= sent && s.forwarded <= sent + 10, "{dir}: {s}");
        assert_eq!((s.dropped, s.duplicated, s.reordered, s.corrupted), (0, 0, 0, 0), "{dir}: {s}");
    }
}

#[test]
fn impaired_counts_are_plausible_and_undamaged_datagrams_are_intact() {
    let Some(_serial) = prepare("impaired_counts_are_plausible_and_undamaged_datagrams_are_intact") else { return };
    let topo = Topology::setup("i", "--seed 7 --dup 0.05 --drop 0.05 --corrupt 0.02 --reorder 0.05", None);
    let t = probe(&topo, 'a', 'b', ADDR_B, 2000, 1000);
    let r = topo.teardown();
    let msg = format!("receiver: {t}; relay a->b: {}", r.ab);
    // Every datagram that was not corrupted arrived byte for byte; every corrupted one has exactly one bit
    // flipped (its UDP checksum was fixed, so the kernel delivered it).
    assert_eq!(t.garbled, 0, "{msg}");
    assert_eq!(t.intact + t.corrupted, t.received, "{msg}");
    assert_eq!(t.corrupted, r.ab.corrupted, "every corrupted copy reached the application: {msg}");
    // Expected: ~100 dropped, ~95 duplicated, ~100 held back, ~40 corrupted (about 5 sigma either way).
    assert_between("relay dropped", r.ab.dropped, 50, 160);
    assert_between("relay duplicated", r.ab.duplicated, 45, 150);
    assert_between("relay reordered", r.ab.reordered, 50, 160);
    assert_between("corrupted", t.corrupted, 10, 75);
    assert_between("received duplicates", t.duplicates, 40, 150);
    // Missing intact: dropped, or the only copy corrupted (~136).
    assert_between("unique intact", t.unique, 2000 - 240, 2000 - 60);
    assert!(t.late > 0, "held-back datagrams arrive late: {msg}");
    // Nothing lost between the relay and the receiver (a few non-probe packets may cross the relay too).
    assert!(t.received <= r.ab.forwarded && r.ab.forwarded <= t.received + 10, "{msg}");
}

#[test]
fn delay_and_jitter_keep_order() {
    let Some(_serial) = prepare("delay_and_jitter_keep_order") else { return };
    let topo = Topology::setup("j", "--seed 3 --delay 2ms --jitter 2ms", None);
    let t = probe(&topo, 'a', 'b', ADDR_B, 2000, 1000);
    let r = topo.teardown();
    assert_eq!(t, Tally { received: 2000, intact: 2000, unique: 2000, ..Tally::default() }, "relay: {}", r.ab);
}

#[test]
fn large_datagrams_ipv4_and_ipv6_with_corruption_delivered() {
    let Some(_serial) = prepare("large_datagrams_ipv4_and_ipv6_with_corruption_delivered") else { return };
    let topo = Topology::setup("l", "--seed 5 --corrupt 0.1", None);
    // The largest datagrams that fit the 9000-byte MTU unfragmented.
    let v4 = probe(&topo, 'a', 'b', ADDR_B, 200, 9000 - 20 - 8);
    let v6 = probe(&topo, 'a', 'b', ADDR6_B, 200, 9000 - 40 - 8);
    // Fragmented datagrams pass too, and fragments are never corrupted.
    let frag = probe(&topo, 'a', 'b', ADDR_B, 50, 20_000);
    let r = topo.teardown();
    for (name, t) in [("ipv4", &v4), ("ipv6", &v6)] {
        assert_eq!(t.garbled, 0, "{name}: {t}");
        assert_eq!(t.received, 200, "{name}: nothing lost: {t}");
        assert_eq!(t.unique + t.corrupted, 200, "{name}: {t}");
        assert_between(&format!("{name} corrupted"), t.corrupted, 5, 45);
    }
    assert_eq!(frag, Tally { received: 50, intact: 50, unique: 50, ..Tally::default() });
    assert_eq!(v4.corrupted + v6.corrupted, r.ab.corrupted, "relay: {}", r.ab);
}

#[test]
fn nftables_drop_percent() {
    let Some(_serial) = prepare("nftables_drop_percent") else { return };
    if !command_works("nft", &["--version"]) {
        say("netns::nftables_drop_percent: skipped: the nft command is missing (Debian package nftables)");
        return;
    }
    let topo = Topology::setup("f", "--seed 1", Some(10));
    let t = probe(&topo, 'a', 'b', ADDR_B, 2000, 1000);
    let r = topo.teardown();
    assert_eq!(r.ab.dropped, 0, "the relay drops nothing; nftables does");
    assert_eq!(t.received, t.unique, "{t}");
    // 10% of 2000: 200 ± 13.4 (sd).
    assert_between("received", t.unique, 2000 - 270, 2000 - 130);
}
