//! End to end through real network namespaces: `scripts/netns/setup.sh` builds the topology around the
//! `roce-netem relay`, `roce-netem send` runs in namespace a and `roce-netem recv` in namespace b, and
//! `scripts/netns/teardown.sh` (always run, by a guard) reports the relay's counters.
//!
//! Needs root, the `ip` command and `/dev/net/tun`; without them each test says why it is skipped and
//! passes. The nftables test also needs `nft`. The tests run one at a time (they are timing-sensitive on a
//! 2-core machine), each with its own namespace prefix.

use std::io::{BufRead, BufReader, Write};
use std::path::PathBuf;
use std::process::{Child, ChildStdout, Command, Output, Stdio};
use std::sync::{Mutex, MutexGuard};

use roce_netem::Stats;
use roce_netem::probe::Tally;

const BIN: &str = env!("CARGO_BIN_EXE_roce-netem");
const ADDR_A: &str = "10.233.0.1";
const ADDR_B: &str = "10.233.0.2";
const ADDR6_B: &str = "fd00:233::2";

static SERIAL: Mutex<()> = Mutex::new(());

/// Writes past the test harness's output capture, so that a skip is visible in `cargo test`'s output.
fn say(msg: &str) {
    let _ = writeln!(std::io::stderr().lock(), "{msg}");
}

fn scripts() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../scripts/netns")
}

fn command_works(cmd: &str, args: &[&str]) -> bool {
    Command::new(cmd).args(args).stdout(Stdio::null()).stderr(Stdio::null()).status().is_ok_and(|s| s.success())
}

/// Why this machine cannot run the namespace tests, if it cannot.
fn skip_reason() -> Option<String> {
    let uid = Command::new("id").arg("-u").output().ok().map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string());
    if uid.as_deref() != Some("0") {
        return Some(format!("not root (uid {})", uid.as_deref().unwrap_or("unknown")));
    }
    if !command_works("ip", &["-V"]) {
        return Some("the ip command (iproute2) is missing".into());
    }
    if !std::path::Path::new("/dev/net/tun").exists() {
        return Some("/dev/net/tun is missing".into());
    }
    None
}

/// Takes the serialising lock, or returns `None` (after saying why) if the tests cannot run here.
fn prepare(test: &str) -> Option<MutexGuard<'static, ()>> {
    if let Some(why) = skip_reason() {
        say(&format!("netns::{test}: skipped: {why}"));
        return None;
    }
    Some(SERIAL.lock().unwrap_or_else(|e| e.into_inner()))
}

fn show(o: &Output) -> String {
    format!(
        "status {}\n--- stdout\n{}--- stderr\n{}",
        o.status,
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// The two namespaces and the relay; torn down when dropped (also on panic).
struct Topology {
    prefix: String,
    torn_down: bool,
}

/// Relay counters per direction, from teardown's output.
struct RelaySummary {
    ab: Stats,
    ba: Stats,
}

impl Topology {
    fn script(name: &str, prefix: &str) -> Command {
        let mut c = Command::new("bash");
        c.arg(scripts().join(name)).arg(prefix);
        for var in ["NETEM_ARGS", "NFT_DROP_PERCENT", "NETNS_STATE_DIR", "NETNS_MTU", "NETNS_IPV6"] {
            c.env_remove(var);
        }
        c.env("ROCE_NETEM_BIN", BIN);
        c
    }

    /// `tag` (one letter) makes the prefix unique among the tests of this process.
    fn setup(tag: &str, netem_args: &str, nft_drop_percent: Option<u32>) -> Topology {
        let prefix = format!("rn{}{tag}", std::process::id() % 100_000);
        // Leftovers of an earlier, killed run with the same prefix.
        let _ = Self::script("teardown.sh", &prefix).output();
        let topo = Topology { prefix, torn_down: false };
        let mut c = Self::script("setup.sh", &topo.prefix);
        c.env("NETEM_ARGS", netem_args);
        if let Some(p) = nft_drop_percent {
            c.env("NFT_DROP_PERCENT", p.to_string());
        }
        let out = c.output().expect("run setup.sh");
        assert!(out.status.success(), "setup.sh {} failed:\n{}", topo.prefix, show(&out));
        topo
    }

    fn ns(&self, side: char) -> String {
        format!("{}{side}", self.prefix)
    }

    fn teardown(mut self) -> RelaySummary {
        self.torn_down = true;
        let out = Self::script("teardown.sh", &self.prefix).output().expect("run teardown.sh");
        assert!(out.status.success(), "teardown.sh failed:\n{}", show(&out));
        let stdout = String::from_utf8_lossy(&out.stdout);
        let line = |dir: &str| {
            stdout
                .lines()
                .find(|l| l.starts_with(dir))
                .and_then(Stats::parse)
                .unwrap_or_else(|| panic!("no {dir} summary from teardown.sh:\n{}", show(&out)))
        };
        RelaySummary { ab: line("a->b "), ba: line("b->a ") }
    }
}

impl Drop for Topology {
    fn drop(&mut self) {
        if !self.torn_down {
            match Self::script("teardown.sh", &self.prefix).output() {
                Ok(o) => say(&format!("teardown after failure:\n{}", show(&o))),
                Err(e) => say(&format!("could not run teardown.sh {}: {e}", self.prefix)),
            }
        }
    }
}

/// Kills a child process if the test fails before waiting for it.
struct ChildGuard(Option<Child>);

impl Drop for ChildGuard {
    fn drop(&mut self) {
        if let Some(mut c) = self.0.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

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
