//! Shared by the namespace tests: the topology of `scripts/netns` around a
//! `roce-netem relay`, with a guard that always tears it down, and the
//! checks that decide whether this machine can run them at all.
#![allow(dead_code)]

use std::io::Write;
use std::path::PathBuf;
use std::process::{Child, Command, Output, Stdio};
use std::sync::{Mutex, MutexGuard};

use roce_netem::Stats;

pub const BIN: &str = env!("CARGO_BIN_EXE_roce-netem");
pub const ADDR_A: &str = "10.233.0.1";
pub const ADDR_B: &str = "10.233.0.2";
pub const ADDR6_B: &str = "fd00:233::2";

pub static SERIAL: Mutex<()> = Mutex::new(());

/// Writes past the test harness's output capture, so that a skip is visible in `cargo test`'s output.
pub fn say(msg: &str) {
    let _ = writeln!(std::io::stderr().lock(), "{msg}");
}

pub fn scripts() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../scripts/netns")
}

pub fn command_works(cmd: &str, args: &[&str]) -> bool {
    Command::new(cmd).args(args).stdout(Stdio::null()).stderr(Stdio::null()).status().is_ok_and(|s| s.success())
}

/// Why this machine cannot run the namespace tests, if it cannot.
pub fn skip_reason() -> Option<String> {
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
pub fn prepare(test: &str) -> Option<MutexGuard<'static, ()>> {
    if let Some(why) = skip_reason() {
        say(&format!("netns::{test}: skipped: {why}"));
        return None;
    }
    Some(SERIAL.lock().unwrap_or_else(|e| e.into_inner()))
}

pub fn show(o: &Output) -> String {
    format!(
        "status {}\n--- stdout\n{}--- stderr\n{}",
        o.status,
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// The two namespaces and the relay; torn down when dropped (also on panic).
pub struct Topology {
    pub prefix: String,
    torn_down: bool,
}

/// Relay counters per direction, from teardown's output.
pub struct RelaySummary {
    pub ab: Stats,
    pub ba: Stats,
}

impl Topology {
    pub fn script(name: &str, prefix: &str) -> Command {
        let mut c = Command::new("bash");
        c.arg(scripts().join(name)).arg(prefix);
        for var in ["NETEM_ARGS", "NFT_DROP_PERCENT", "NETNS_STATE_DIR", "NETNS_MTU", "NETNS_IPV6"] {
            c.env_remove(var);
        }
        c.env("ROCE_NETEM_BIN", BIN);
        c
    }

    /// `tag` (one letter) makes the prefix unique among the tests of this process.
    pub fn setup(tag: &str, netem_args: &str, nft_drop_percent: Option<u32>) -> Topology {
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

    pub fn ns(&self, side: char) -> String {
        format!("{}{side}", self.prefix)
    }

    pub fn teardown(mut self) -> RelaySummary {
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
pub struct ChildGuard(pub Option<Child>);

impl Drop for ChildGuard {
    fn drop(&mut self) {
        if let Some(mut c) = self.0.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}
