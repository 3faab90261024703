//! rdma-core's unmodified Debian binaries (ibverbs-utils, perftest, qperf)
//! over softroce's drop-in `libibverbs.so.1`, each side a process of its own
//! started by `softroce run --loopback`: the device listing, the three
//! ping-pongs, perftest's eight RC tests, qperf's RC tests, and softroce's
//! own `rc-pingpong` against rdma-core's in both directions. Every check
//! reads the tool's result lines, not only its exit status.
//!
//! Needs `libsoftroce_ibverbs.so` beside the `softroce` binary (`cargo test
//! --workspace` builds it) and the Debian packages ibverbs-utils, perftest
//! and qperf. Without a tool a test prints a skip line, unless `CI` is set:
//! then it fails.

use std::io::Write;
use std::net::{Ipv4Addr, TcpListener};
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::OnceLock;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use rustix::process::{Pid, Signal, kill_process_group};

mod cm_golden;
mod distros;
mod release;
mod two_hosts;

use two_hosts::TwoHosts;

/// Longest any one process may run before it is killed.
const CHILD_TIMEOUT: Duration = Duration::from_secs(60);
/// How long a server may take to finish once its client is done.
const SERVER_GRACE: Duration = Duration::from_secs(20);
/// perftest's iteration count here (a few seconds in a debug build).
const PERF_ITERS: u64 = 2000;

/// The `softroce` binary, once the cdylib `softroce run` needs is known to
/// be beside it (`cargo build` puts it there, `cargo test` in `deps/`).
fn softroce() -> &'static str {
    let bin = env!("CARGO_BIN_EXE_softroce");
    let dir = Path::new(bin).parent().unwrap();
    let libs = [dir.join("libsoftroce_ibverbs.so"), dir.join("deps").join("libsoftroce_ibverbs.so")];
    assert!(
        libs.iter().any(|l| l.is_file()),
        "{} is missing: build it with `cargo build -p softroce-ibverbs` (or run `cargo test --workspace`); \
         cargo does not build the cdylib as a dependency of softroce-cli",
        libs[0].display()
    );
    bin
}

/// The Debian package that ships each tool.
fn package_of(tool: &str) -> &'static str {
    match tool {
        "qperf" => "qperf",
        "rping" | "ucmatose" | "udaddy" | "mckey" | "rdma_server" | "rdma_client" | "rstream" | "riostream" => {
            "rdmacm-utils"
        }
        t if t.starts_with("ib_") => "perftest",
        t if t.starts_with("fi_") => "libfabric-bin",
        _ => "ibverbs-utils",
    }
}

/// Whether every tool is on PATH. A missing tool fails the test under CI;
/// elsewhere the test prints a skip line and returns.
fn have(test: &str, tools: &[&str]) -> bool {
    let path = std::env::var_os("PATH").unwrap_or_default();
    let root = RELEASE.with_borrow(|r| r.clone());
    let found = |t: &str| match &root {
        Some(r) => release::has(r, t),
        None => std::env::split_paths(&path).any(|d| d.join(t).is_file()),
    };
    let missing: Vec<&str> = tools.iter().copied().filter(|t| !found(t)).collect();
    if missing.is_empty() {
        return true;
    }
    let pkgs: Vec<&str> = missing.iter().map(|t| package_of(t)).collect();
    let msg = format!("{test}: {} not found (apt-get install {})", missing.join(", "), pkgs.join(" "));
    assert!(std::env::var_os("CI").is_none(), "CI is set and {msg}");
    eprintln!("skipped: {msg}");
    false
}

/// A TCP port nobody listens on now: bound on 127.0.0.1 and released, so
/// tests running side by side (and other test binaries) each get their own.
fn free_port() -> u16 {
    TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).unwrap().local_addr().unwrap().port()
}

/// How a process ended: its status, or `None` when it was killed here (out
/// of time, or a server no longer needed).
struct Done {
    what: String,
    status: Option<ExitStatus>,
    stdout: String,
    stderr: String,
}

impl Done {
    fn ok(&self) -> bool {
        self.status.is_some_and(|s| s.success())
    }

    /// Whether the run succeeded, or is an `fi_pingpong` over `ofi_rxm` that
    /// did all its work and then crashed in libfabric 1.17's own teardown:
    /// its `rxm_close_conn` closes the connection's MSG endpoint and only then
    /// flushes the shared CQ, while the connection still names the endpoint,
    /// so a receive completion still queued (a matter of timing, on kernel
    /// rxe as here) reposts its buffer onto the freed endpoint (SIGSEGV in
    /// `rxm_post_recv`). Fixed upstream in libfabric commit 697688386
    /// ("prov/rxm: fix the msg_ep use-after-free at connection teardown").
    /// The callers still check the complete table it printed first.
    fn ok_or_rxm_teardown_crash(&self) -> bool {
        let crash = self.stderr.lines().skip_while(|l| !l.contains("terminated with signal 11")).nth(1);
        self.ok()
            || (self.what.contains("ofi_rxm")
                && self.what.contains("fi_pingpong")
                && crash.is_some_and(|frame| frame.contains("/libfabric.so.1(")))
    }

    fn report(&self) -> String {
        let how = match self.status {
            Some(s) => s.to_string(),
            None => "killed by the test".into(),
        };
        format!("--- {} ({how})\n[stdout]\n{}[stderr]\n{}", self.what, self.stdout, self.stderr)
    }
}

thread_local! {
    /// This thread's programs run under plain `softroce run`: all of them
    /// on the host's one shared device (127.0.0.1), not a leased address each.
    static SHARED: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

thread_local! {
    /// The root of another Debian release (`scripts/distro/root.sh`) whose
    /// programs this thread runs, chrooted, instead of this machine's.
    static RELEASE: std::cell::RefCell<Option<std::path::PathBuf>> = const { std::cell::RefCell::new(None) };
}

/// Runs `f` with this thread's programs taken from the release root `root`
/// (`release::softroce`).
fn in_release<R>(root: &Path, f: impl FnOnce() -> R) -> R {
    RELEASE.set(Some(root.to_path_buf()));
    let r = f();
    RELEASE.set(None);
    r
}

/// Runs `f` with this thread's programs on the shared device (tests of
/// this binary run at once: their programs share it, as users' do, while
/// others join and leave it; the UD tools too, which have no
/// retransmission: a datagram lost in a steering update would hang them).
fn shared<R>(f: impl FnOnce() -> R) -> R {
    SHARED.set(true);
    let r = f();
    SHARED.set(false);
    r
}

/// A program under `softroce run --loopback`, in a process group of its own
/// so that killing it also kills the program (`softroce run` only waits for
/// it). Its output is drained by threads so a full pipe never blocks it.
struct Proc {
    what: String,
    child: Option<Child>,
    stdout: Option<JoinHandle<String>>,
    stderr: Option<JoinHandle<String>>,
    deadline: Instant,
}

fn drain(r: impl std::io::Read + Send + 'static) -> JoinHandle<String> {
    std::thread::spawn(move || {
        let mut r = r;
        let mut buf = Vec::new();
        let _ = r.read_to_end(&mut buf);
        String::from_utf8_lossy(&buf).into_owned()
    })
}

impl Proc {
    fn start<S: AsRef<str>>(program: &[S]) -> Proc {
        Proc::start_in(None, program)
    }

    /// [`Proc::start`] in network namespace `ns` (`ip netns exec`).
    fn start_in<S: AsRef<str>>(ns: Option<&str>, program: &[S]) -> Proc {
        let program: Vec<&str> = program.iter().map(AsRef::as_ref).collect();
        let what = match ns {
            Some(ns) => format!("[netns {ns}] {}", program.join(" ")),
            None => program.join(" "),
        };
        let run: &[&str] = if SHARED.get() { &["run", "--"] } else { &["run", "--loopback", "--"] };
        let release = RELEASE.with_borrow(|r| r.clone());
        let mut cmd = match (ns, release) {
            (None, Some(root)) => release::softroce(&root, Path::new(softroce())),
            (Some(ns), _) => {
                let mut c = Command::new("ip");
                c.args(["netns", "exec", ns]).arg(softroce());
                c
            }
            (None, None) => Command::new(softroce()),
        };
        cmd.args(run).args(program);
        Proc::spawn(what, cmd, CHILD_TIMEOUT)
    }

    /// Starts `cmd` (named `what`) in a process group of its own, with no
    /// input and its output drained, to be killed past `timeout`.
    fn spawn(what: String, mut cmd: Command, timeout: Duration) -> Proc {
        let mut child = cmd
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .process_group(0)
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {what}: {e}"));
        let stdout = Some(drain(child.stdout.take().unwrap()));
        let stderr = Some(drain(child.stderr.take().unwrap()));
        Proc { what, child: Some(child), stdout, stderr, deadline: Instant::now() + timeout }
    }

    /// Whether it has exited (then `finish` returns at once).
    fn exited(&mut self) -> bool {
        self.child.as_mut().unwrap().try_wait().unwrap().is_some()
    }

    /// Kills the whole group; only while the leader is not reaped, so the
    /// group id cannot name anyone else.
    fn kill_group(&mut self) {
        if let Some(c) = self.child.as_mut()
            && matches!(c.try_wait(), Ok(None))
        {
            let _ = kill_process_group(Pid::from_child(c), Signal::KILL);
        }
    }

    /// Waits until it exits, `within` passes or its deadline comes (then
    /// kills it), and collects its output.
    fn finish(mut self, within: Duration) -> Done {
        let until = self.deadline.min(Instant::now() + within);
        let mut child = self.child.take().unwrap();
        let status = loop {
            if let Some(s) = child.try_wait().unwrap() {
                break Some(s);
            }
            if Instant::now() >= until {
                let _ = kill_process_group(Pid::from_child(&child), Signal::KILL);
                let _ = child.wait();
                break None;
            }
            std::thread::sleep(Duration::from_millis(10));
        };
        let stdout = self.stdout.take().unwrap().join().unwrap();
        let stderr = self.stderr.take().unwrap().join().unwrap();
        Done { what: std::mem::take(&mut self.what), status, stdout, stderr }
    }

    fn kill(mut self) -> Done {
        self.kill_group();
        self.finish(Duration::ZERO)
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        self.kill_group();
        if let Some(mut c) = self.child.take() {
            let _ = c.wait();
        }
    }
}

/// Whether a UDP socket is bound to `port` in the network namespace of
/// `p`'s process.
fn udp_bound_in_netns_of(p: &Proc, port: u16) -> bool {
    let pid = p.child.as_ref().unwrap().id();
    socket_on(&format!("/proc/{pid}/net"), "udp", port, None)
}

/// Whether some socket listens on TCP `port` (any address, v4 or v6).
fn listening(port: u16) -> bool {
    // 0A is LISTEN.
    socket_on("/proc/net", "tcp", port, Some("0A"))
}

/// Whether `dir`'s `proto` or `proto6` table has a socket on local `port`
/// (in `state`, when given).
fn socket_on(dir: &str, proto: &str, port: u16, state: Option<&str>) -> bool {
    let want = format!(":{port:04X}");
    [proto.to_string(), format!("{proto}6")].iter().any(|f| {
        std::fs::read_to_string(format!("{dir}/{f}")).unwrap_or_default().lines().skip(1).any(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            // local_address is field 1, the state field 3.
            f.len() > 3 && f[1].ends_with(&want) && state.is_none_or(|s| f[3] == s)
        })
    })
}

/// How a server ends once its client is done.
#[derive(Clone, Copy, PartialEq)]
enum ServerEnd {
    /// It exits by itself (ping-pongs, perftest).
    Exits,
    /// It serves forever (qperf): kill it.
    Kill,
}

/// Stands for the TCP port in `server_client`'s commands.
const PORT: &str = "<port>";

/// `cmd` with `PORT` replaced by `port`.
fn with_port(cmd: &[&str], port: u16) -> Vec<String> {
    cmd.iter().map(|a| if *a == PORT { port.to_string() } else { a.to_string() }).collect()
}

/// Attempts `server_client` makes at most.
const ATTEMPTS: u32 = 4;

/// Runs `server`, waits until it listens on a fresh port (`PORT` in both
/// commands), then runs `client` to its end; the server is killed when the
/// client fails. Panics with both outputs when either fails, except that it
/// starts over when the port was taken meanwhile or when the client failed
/// saying one of `retry_on` (a tool's own trouble with a loaded machine).
fn server_client(server: &[&str], client: &[&str], end: ServerEnd, retry_on: &[&str]) -> (Done, Done) {
    let says = |d: &Done, what: &[&str]| what.iter().any(|m| d.stdout.contains(m) || d.stderr.contains(m));
    for attempt in 1..=ATTEMPTS {
        let last = attempt == ATTEMPTS;
        let port = free_port();
        let mut s = Proc::start(&with_port(server, port));
        while !listening(port) && !s.exited() && Instant::now() < s.deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
        if !listening(port) {
            let d = s.kill();
            // The port was free when chosen, but a connection elsewhere (this
            // binary's other tests, other test binaries) may take it meanwhile:
            // rdma-core and perftest then say "Couldn't listen to port", qperf
            // "unable to bind to listen port", fabtests "bind(): ... Address
            // already in use". Try another.
            let taken = says(&d, &["listen to port", "bind to listen port", "Address already in use"]);
            assert!(taken && !last, "the server never listened on port {port}\n{}", d.report());
            continue;
        }
        let c = Proc::start(&with_port(client, port)).finish(CHILD_TIMEOUT);
        if !c.ok() {
            let s = s.kill();
            if says(&c, retry_on) && !last {
                eprintln!("retrying after a failure that is the tool's own:\n{}", c.report());
                continue;
            }
            panic!("the client failed\n{}\n{}", c.report(), s.report());
        }
        let s = match end {
            ServerEnd::Exits => s.finish(SERVER_GRACE),
            ServerEnd::Kill => s.kill(),
        };
        if end == ServerEnd::Exits && !s.ok_or_rxm_teardown_crash() {
            panic!("the server failed\n{}\n{}", s.report(), c.report());
        }
        return (s, c);
    }
    unreachable!("the last attempt returns or panics")
}

// ---------------------------------------------------------------------------
// Devices

/// What `ibv_devinfo -v` showed of softroce_lo.
struct DevInfo {
    /// The loopback address the run leased.
    addr: Ipv4Addr,
    /// The index of its `::ffff:ADDR, RoCE v2` GID.
    gid_index: u32,
}

/// Runs `program` with a shell line first printing the SOFTROCE_DEVICES
/// `softroce run` gave it; returns the device's address and the output.
fn with_device(program: &str) -> (Ipv4Addr, Done) {
    let script = format!("printf 'devices=%s\\n' \"$SOFTROCE_DEVICES\"; exec {program}");
    let d = Proc::start(&["sh", "-c", &script]).finish(CHILD_TIMEOUT);
    assert!(d.ok(), "{}", d.report());
    let first = d.stdout.lines().next().unwrap_or_default();
    let addr = first.strip_prefix("devices=softroce_lo=").and_then(|a| a.parse().ok());
    let addr = addr.unwrap_or_else(|| panic!("softroce run gave no softroce_lo device: {first:?}"));
    (addr, d)
}

fn devinfo() -> DevInfo {
    let (addr, d) = with_device("ibv_devinfo -v");
    let out = &d.stdout;
    for want in [
        "hca_id:\tsoftroce_lo\n",
        "\ttransport:\t\t\tInfiniBand (0)\n",
        "\tlink_layer:\t\tEthernet\n",
        "\tstate:\t\t\tPORT_ACTIVE (4)\n",
    ] {
        assert!(out.contains(want), "ibv_devinfo -v lacks {want:?}\n{}", d.report());
    }
    // qperf's LID-only addressing rests on the LID being the address's low 16 bits.
    let [.., hi, lo] = addr.octets();
    let lid = u16::from_be_bytes([hi, lo]);
    assert!(out.contains(&format!("\tport_lid:\t\t{lid}\n")), "port_lid is not {lid}\n{}", d.report());
    // "\t\t\tGID[  1]:\t\t::ffff:127.0.0.2, RoCE v2"
    let gids: Vec<(u32, &str)> = out
        .lines()
        .filter_map(|l| {
            let (idx, gid) = l.trim_start().strip_prefix("GID[")?.split_once("]:")?;
            Some((idx.trim().parse().ok()?, gid.trim()))
        })
        .collect();
    let mine = format!("::ffff:{addr}, RoCE v2");
    let found: Vec<u32> = gids.iter().filter(|(_, g)| *g == mine).map(|(i, _)| *i).collect();
    assert_eq!(found.len(), 1, "one GID {mine:?} in the table\n{}", d.report());
    DevInfo { addr, gid_index: found[0] }
}

/// The GID index of the device's IPv4 address, from `ibv_devinfo -v` (run once).
fn gid_index() -> String {
    static N: OnceLock<u32> = OnceLock::new();
    N.get_or_init(|| devinfo().gid_index).to_string()
}

#[test]
fn ibv_devices_and_ibv_devinfo_show_softroce_lo() {
    if !have("devices", &["ibv_devices", "ibv_devinfo"]) {
        return;
    }
    let (_, d) = with_device("ibv_devices");
    let row = d.stdout.lines().find(|l| l.split_whitespace().next() == Some("softroce_lo"));
    let row = row.unwrap_or_else(|| panic!("no softroce_lo row\n{}", d.report()));
    let f: Vec<&str> = row.split_whitespace().collect();
    assert!(
        f.len() == 2 && f[1].len() == 16 && f[1].chars().all(|c| c.is_ascii_hexdigit()),
        "a 16-hex-digit GUID: {row:?}"
    );
    assert!(d.stdout.lines().any(|l| l.split_whitespace().eq(["device", "node", "GUID"])), "{}", d.report());

    let info = devinfo();
    assert!(info.addr.is_loopback() && info.addr != Ipv4Addr::LOCALHOST, "{}", info.addr);
    // As with Linux rxe: GID 0 is the link-local one, 1 the IPv4 address.
    assert_eq!(info.gid_index, 1);
}

// ---------------------------------------------------------------------------
// rdma-core's ping-pongs

/// What a ping-pong printed: the GIDs of its address lines and its two
/// result lines.
#[derive(Debug)]
struct Pingpong {
    local_gids: Vec<String>,
    remote_gids: Vec<String>,
    bytes: u64,
    secs: f64,
    mbits: f64,
    iters: u64,
    iter_secs: f64,
    usec_per_iter: f64,
}

/// Parses `  local address:  LID 0x0003, QPN ..., GID ::ffff:127.0.0.3`,
/// `8192000 bytes in 0.09 seconds = 692.26 Mbit/sec` and
/// `1000 iters in 0.09 seconds = 94.67 usec/iter`.
fn parse_pingpong(d: &Done) -> Pingpong {
    let out = &d.stdout;
    let gids = |kind: &str| -> Vec<String> {
        out.lines()
            .filter(|l| l.trim_start().starts_with(kind))
            .map(|l| l.split_whitespace().last().unwrap().to_string())
            .collect()
    };
    let result = |unit: &str, per: &str| -> (u64, f64, f64) {
        let line = out
            .lines()
            .find(|l| l.split_whitespace().nth(1) == Some(unit))
            .unwrap_or_else(|| panic!("no `... {unit} in ...` line\n{}", d.report()));
        let f: Vec<&str> = line.split_whitespace().collect();
        assert!(
            f.len() == 8 && f[2] == "in" && f[4] == "seconds" && f[5] == "=" && f[7] == per,
            "{line:?}\n{}",
            d.report()
        );
        let num = |s: &str| s.parse::<f64>().unwrap_or_else(|_| panic!("{s:?} in {line:?}"));
        (f[0].parse().unwrap_or_else(|_| panic!("{line:?}")), num(f[3]), num(f[6]))
    };
    let (bytes, secs, mbits) = result("bytes", "Mbit/sec");
    let (iters, iter_secs, usec_per_iter) = result("iters", "usec/iter");
    Pingpong {
        local_gids: gids("local address:"),
        remote_gids: gids("remote address:"),
        bytes,
        secs,
        mbits,
        iters,
        iter_secs,
        usec_per_iter,
    }
}

/// The device plain `softroce run` gives a program first: its default.
fn default_device() -> softroce::config::DeviceInfo {
    softroce::devices().expect("the device list").into_iter().next().expect("a device")
}

/// `a` matches `b` to within the 2 decimals printed (and 1 %).
fn close(a: f64, b: f64) -> bool {
    (a - b).abs() <= 0.006 + 0.01 * a.abs().max(b.abs())
}

/// Checks one side: `qps` address lines of each kind with IPv4-mapped GIDs,
/// `bytes` bytes in 1000 iterations (the default), and figures that agree.
fn check_pingpong(d: &Done, qps: usize, bytes: u64) -> Pingpong {
    let p = parse_pingpong(d);
    let why = || format!("{p:?}\n{}", d.report());
    assert_eq!((p.local_gids.len(), p.remote_gids.len()), (qps, qps), "address lines: {}", why());
    // A leased loopback device, or plain `softroce run`'s default device
    // (the first listed: loopback comes last).
    let default = format!("::ffff:{}", default_device().addr);
    assert!(
        p.local_gids.iter().chain(&p.remote_gids).all(|g| g.starts_with("::ffff:127.0.0.") || *g == default),
        "{}",
        why()
    );
    assert_eq!((p.bytes, p.iters), (bytes, 1000), "{}", why());
    assert!(p.mbits > 0.0 && p.usec_per_iter > 0.0, "{}", why());
    // seconds = bytes * 8 / Mbit/s and = iters * usec/iter.
    assert!(close(p.secs, p.bytes as f64 * 8.0 / p.mbits / 1e6), "Mbit/sec vs seconds: {}", why());
    assert!(close(p.iter_secs, p.iters as f64 * p.usec_per_iter / 1e6), "usec/iter vs seconds: {}", why());
    p
}

/// Runs a ping-pong pair (`server` and `client` are the commands without
/// `-p`/host) and checks both sides; each side saw the other's GIDs.
fn pingpong(server: &[&str], client: &[&str], qps: usize, bytes: u64) {
    let s_args: Vec<&str> = server.iter().copied().chain(["-p", PORT]).collect();
    let c_args: Vec<&str> = client.iter().copied().chain(["-p", PORT, "127.0.0.1"]).collect();
    let (s, c) = server_client(&s_args, &c_args, ServerEnd::Exits, &[]);
    let (ps, pc) = (check_pingpong(&s, qps, bytes), check_pingpong(&c, qps, bytes));
    assert_eq!(ps.local_gids, pc.remote_gids, "{}\n{}", s.report(), c.report());
    assert_eq!(ps.remote_gids, pc.local_gids, "{}\n{}", s.report(), c.report());
    if SHARED.get() {
        assert_eq!(ps.local_gids[0], pc.local_gids[0], "one shared device, one address");
    } else {
        assert_ne!(ps.local_gids[0], pc.local_gids[0], "two leases, two addresses");
    }
}

#[test]
fn plain_softroce_run_shares_one_device_ibv_rc_pingpong() {
    if !have("ibv_rc_pingpong", &["ibv_devinfo", "ibv_rc_pingpong"]) {
        return;
    }
    let g = gid_index();
    let cmd = ["ibv_rc_pingpong", "-g", &g, "-s", "4096"];
    shared(|| pingpong(&cmd, &cmd, 1, 2 * 4096 * 1000));
}

#[test]
fn plain_softroce_run_shares_one_device_ibv_ud_pingpong() {
    if !have("ibv_ud_pingpong", &["ibv_devinfo", "ibv_ud_pingpong"]) {
        return;
    }
    let g = gid_index();
    // Within the default device's MTU (1024 on a 1500-byte NIC).
    let size = default_device().active_mtu().bytes().min(2048);
    let s = size.to_string();
    let cmd = ["ibv_ud_pingpong", "-g", &g, "-s", &s];
    shared(|| pingpong(&cmd, &cmd, 1, 2 * size as u64 * 1000));
}

/// GID 0 of a loopback device (made up from its IPv4 address, loopback
/// having no link-local one) reaches another loopback device of the host:
/// `ibv_rc_pingpong -g 0` and `ibv_ud_pingpong -g 0` between two leased
/// devices exchange their `fe80::` GIDs and complete.
#[test]
fn pingpongs_over_gid_0_between_two_loopback_devices() {
    if !have("pingpong_gid0_lo", &["ibv_rc_pingpong", "ibv_ud_pingpong"]) {
        return;
    }
    for (tool, size) in [("ibv_rc_pingpong", 4096u64), ("ibv_ud_pingpong", 1024)] {
        let sz = size.to_string();
        let server = [tool, "-g", "0", "-s", &sz, "-n", "200", "-p", PORT];
        let client: Vec<&str> = server.iter().copied().chain(["127.0.0.1"]).collect();
        let (s, c) = server_client(&server, &client, ServerEnd::Exits, &[]);
        let (ps, pc) = (parse_pingpong(&s), parse_pingpong(&c));
        for (d, p) in [(&s, &ps), (&c, &pc)] {
            assert_eq!((p.bytes, p.iters), (2 * size * 200, 200), "{tool}: {p:?}\n{}", d.report());
            let made_up = |g: &String| g.starts_with("fe80::200:7fff:fe");
            assert!(p.local_gids.iter().chain(&p.remote_gids).all(made_up), "{p:?}\n{}", d.report());
        }
        assert_eq!(ps.local_gids, pc.remote_gids, "{}\n{}", s.report(), c.report());
        assert_ne!(ps.local_gids, pc.local_gids, "two leases, two devices\n{}", s.report());
        println!("{tool} -g 0 between two loopback devices: {} usec/iter", pc.usec_per_iter);
    }
}

#[test]
fn plain_softroce_run_shares_one_device_ib_write_bw() {
    if !have("ib_write_bw", &["ibv_devinfo", "ib_write_bw"]) {
        return;
    }
    let (s, c) = shared(|| perftest("ib_write_bw", Some(65536)));
    check_bw(&c, 65536, true);
    check_bw(&s, 65536, true);
}

#[test]
fn four_pingpong_pairs_at_once_on_one_shared_device() {
    if !have("ibv_rc_pingpong", &["ibv_devinfo", "ibv_rc_pingpong"]) {
        return;
    }
    let g = gid_index();
    let pairs: Vec<_> = (0..4)
        .map(|_| {
            let g = g.clone();
            std::thread::spawn(move || {
                let cmd = ["ibv_rc_pingpong", "-g", &g, "-s", "4096"];
                shared(|| pingpong(&cmd, &cmd, 1, 2 * 4096 * 1000));
            })
        })
        .collect();
    for p in pairs {
        p.join().expect("a pingpong pair failed (its output is above)");
    }
}

#[test]
fn ibv_rc_pingpong() {
    if !have("ibv_rc_pingpong", &["ibv_devinfo", "ibv_rc_pingpong"]) {
        return;
    }
    let g = gid_index();
    // 4096-byte messages, 1000 round trips: 2 x 4096 x 1000 bytes.
    let cmd = ["ibv_rc_pingpong", "-g", &g, "-s", "4096"];
    pingpong(&cmd, &cmd, 1, 2 * 4096 * 1000);
}

#[test]
fn ibv_rc_pingpong_with_events() {
    if !have("ibv_rc_pingpong -e", &["ibv_devinfo", "ibv_rc_pingpong"]) {
        return;
    }
    let g = gid_index();
    let cmd = ["ibv_rc_pingpong", "-g", &g, "-s", "4096", "-e"];
    pingpong(&cmd, &cmd, 1, 2 * 4096 * 1000);
}

#[test]
fn ibv_ud_pingpong() {
    if !have("ibv_ud_pingpong", &["ibv_devinfo", "ibv_ud_pingpong"]) {
        return;
    }
    let g = gid_index();
    // Both directions, as rc counts (its help's "default 2048" is not what
    // it uses without -s, so the size is given).
    let cmd = ["ibv_ud_pingpong", "-g", &g, "-s", "2048"];
    pingpong(&cmd, &cmd, 1, 2 * 2048 * 1000);
}

#[test]
fn ibv_srq_pingpong() {
    if !have("ibv_srq_pingpong", &["ibv_devinfo", "ibv_srq_pingpong"]) {
        return;
    }
    let g = gid_index();
    // 16 QPs on one SRQ; 1000 iterations per QP, counted as for rc.
    let cmd = ["ibv_srq_pingpong", "-g", &g, "-s", "4096", "-q", "16"];
    pingpong(&cmd, &cmd, 16, 2 * 4096 * 1000);
}

#[test]
fn softroce_rc_pingpong_serves_ibv_rc_pingpong() {
    if !have("softroce rc-pingpong server", &["ibv_devinfo", "ibv_rc_pingpong"]) {
        return;
    }
    let g = gid_index();
    let ours = [softroce(), "rc-pingpong", "-g", &g, "-s", "4096"];
    let theirs = ["ibv_rc_pingpong", "-g", &g, "-s", "4096"];
    pingpong(&ours, &theirs, 1, 2 * 4096 * 1000);
}

#[test]
fn ibv_rc_pingpong_serves_softroce_rc_pingpong() {
    if !have("softroce rc-pingpong client", &["ibv_devinfo", "ibv_rc_pingpong"]) {
        return;
    }
    let g = gid_index();
    let ours = [softroce(), "rc-pingpong", "-g", &g, "-s", "4096"];
    let theirs = ["ibv_rc_pingpong", "-g", &g, "-s", "4096"];
    pingpong(&theirs, &ours, 1, 2 * 4096 * 1000);
}

// ---------------------------------------------------------------------------
// perftest

const BW_HEADER: [&str; 7] = ["#bytes", "#iterations", "BW", "peak[MB/sec]", "BW", "average[MB/sec]", "MsgRate[Mpps]"];
const LAT_HEADER: [&str; 11] = [
    "#bytes",
    "#iterations",
    "t_min[usec]",
    "t_max[usec]",
    "t_typical[usec]",
    "t_avg[usec]",
    "t_stdev[usec]",
    "99%",
    "percentile[usec]",
    "99.9%",
    "percentile[usec]",
];

/// The numbers of the row under perftest's table `header`, if printed.
/// perftest 25.01 names the unit perftest 4.5 printed as `MB/sec` (2^20
/// bytes, as `check_bw` reads it) `MiB/sec`: both match.
fn table_row(out: &str, header: &[&str]) -> Option<Vec<f64>> {
    let mut lines = out.lines();
    lines.find(|l| l.split_whitespace().map(|w| w.replace("[MiB/sec]", "[MB/sec]")).eq(header.iter().copied()))?;
    let row = lines.next()?;
    Some(row.split_whitespace().map(|x| x.parse().unwrap_or(f64::NAN)).collect())
}

/// Checks a bandwidth row: `#bytes #iterations peak average MsgRate`.
/// The server of `ib_send_bw` measures no peak (prints 0.00).
fn check_bw(d: &Done, size: u64, peak_measured: bool) {
    let r = table_row(&d.stdout, &BW_HEADER).unwrap_or_else(|| panic!("no BW table\n{}", d.report()));
    let why = || format!("{r:?}\n{}", d.report());
    assert_eq!(r.len(), 5, "{}", why());
    assert_eq!((r[0], r[1]), (size as f64, PERF_ITERS as f64), "{}", why());
    let (peak, avg, mpps) = (r[2], r[3], r[4]);
    assert!(avg > 0.0 && mpps > 0.0 && (!peak_measured || peak > 0.0), "{}", why());
    // MsgRate is the average bandwidth over the message size (MB = 2^20 bytes).
    assert!(close(avg, mpps * 1e6 * size as f64 / 1048576.0), "MsgRate vs BW: {}", why());
}

/// Checks a latency row: `#bytes #iterations min max typical avg stdev p99 p99.9`.
fn check_lat(d: &Done, size: u64) {
    let r = table_row(&d.stdout, &LAT_HEADER).unwrap_or_else(|| panic!("no latency table\n{}", d.report()));
    let why = || format!("{r:?}\n{}", d.report());
    assert_eq!(r.len(), 9, "{}", why());
    assert_eq!((r[0], r[1]), (size as f64, PERF_ITERS as f64), "{}", why());
    let (min, max, typical, avg, stdev) = (r[2], r[3], r[4], r[5], r[6]);
    assert!(min > 0.0 && stdev >= 0.0 && r[7] > 0.0 && r[8] > 0.0, "{}", why());
    assert!(min <= typical && typical <= max && min <= avg && avg <= max, "{}", why());
}

/// Runs perftest's `tool` (RC, the default post-send path) on the GID
/// of the IPv4 address; `size` is None for the atomic tests (always 8).
fn perftest(tool: &str, size: Option<u64>) -> (Done, Done) {
    perftest_env(&[], tool, size)
}

/// [`perftest`] with environment settings for both sides (`NAME=VALUE`).
fn perftest_env(env: &[&str], tool: &str, size: Option<u64>) -> (Done, Done) {
    let g = gid_index();
    let iters = PERF_ITERS.to_string();
    let size_s = size.map(|s| s.to_string());
    let mut args: Vec<&str> = if env.is_empty() { vec![] } else { ["env"].iter().chain(env).copied().collect() };
    args.extend([tool, "-x", &g, "-n", &iters, "-p", PORT]);
    if let Some(s) = &size_s {
        args.extend(["-s", s]);
    }
    let client: Vec<&str> = args.iter().copied().chain(["127.0.0.1"]).collect();
    // perftest calibrates its cycle counter against gettimeofday after the
    // run and gives up ("Correlation coefficient r^2: 0.81 < 0.9", "Can't
    // produce a report") when it is preempted meanwhile, as on a machine
    // busy with other tests: run it again then.
    let (s, c) = server_client(&args, &client, ServerEnd::Exits, &["Correlation coefficient r^2"]);
    for d in [&s, &c] {
        assert!(d.stdout.contains(" Connection type : RC"), "{}", d.report());
        assert!(d.stdout.contains(&format!(" GID index       : {g}\n")), "{}", d.report());
    }
    (s, c)
}

fn bw_test(tool: &str, size: Option<u64>) {
    if !have(tool, &["ibv_devinfo", tool]) {
        return;
    }
    let (s, c) = perftest(tool, size);
    let bytes = size.unwrap_or(8);
    check_bw(&c, bytes, true);
    // The server prints the table too: its own figures for send_bw, the
    // client's for the others.
    check_bw(&s, bytes, tool != "ib_send_bw");
}

fn lat_test(tool: &str, size: Option<u64>, server_prints: bool) {
    if !have(tool, &["ibv_devinfo", tool]) {
        return;
    }
    let (s, c) = perftest(tool, size);
    let bytes = size.unwrap_or(8);
    check_lat(&c, bytes);
    if server_prints {
        check_lat(&s, bytes);
    } else {
        // The passive side of read/atomic prints its addresses only.
        assert!(s.stdout.contains(" remote address: LID"), "{}", s.report());
        assert!(table_row(&s.stdout, &LAT_HEADER).is_none(), "{}", s.report());
    }
}

#[test]
fn ib_send_bw() {
    bw_test("ib_send_bw", Some(65536));
}

#[test]
fn ib_write_bw() {
    bw_test("ib_write_bw", Some(65536));
}

/// perftest keeps its `ibv_wr_*` path (`ibv_create_qp_ex` with send-ops
/// flags, `ibv_wr_start` ... `ibv_wr_complete`) for ConnectX, BlueField and
/// EFA parts only, and rxe's part ID (0, softroce's too) gets the old
/// `ibv_post_send`. With `SOFTROCE_VENDOR_PART_ID` naming a ConnectX-5 the
/// same unmodified binary takes the builder path over softroce.
#[test]
fn ib_write_bw_through_the_wr_api() {
    if !have("ib_write_bw", &["ibv_devinfo", "ib_write_bw"]) {
        return;
    }
    let (s, c) = perftest_env(&["SOFTROCE_VENDOR_PART_ID=4119"], "ib_write_bw", Some(65536));
    for d in [&s, &c] {
        assert!(d.stdout.contains(" ibv_wr* API     : ON"), "{}", d.report());
    }
    check_bw(&c, 65536, true);
    let (s, _) = perftest("ib_write_bw", Some(65536));
    assert!(s.stdout.contains(" ibv_wr* API     : OFF"), "rxe's part ID keeps the old path\n{}", s.report());
}

#[test]
fn ib_read_bw() {
    bw_test("ib_read_bw", Some(65536));
}

#[test]
fn ib_atomic_bw() {
    bw_test("ib_atomic_bw", None);
}

#[test]
fn ib_send_lat() {
    lat_test("ib_send_lat", Some(64), true);
}

/// `ib_write_lat` spins on memory between its verbs calls: each side's
/// driver thread places the peer's WRITEs, and its grace to the busy poller
/// has come down from 1 ms (`docs/data-path.md` section 6). Both say so at
/// exit with `SOFTROCE_STATS=1`.
#[test]
fn ib_write_lat() {
    if !have("ib_write_lat", &["ibv_devinfo", "ib_write_lat"]) {
        return;
    }
    let (s, c) = perftest_env(&["SOFTROCE_STATS=1"], "ib_write_lat", Some(64));
    check_lat(&c, 64);
    check_lat(&s, 64);
    for d in [&s, &c] {
        assert!(stats_field(d, "rcvd_pkts") >= PERF_ITERS, "{}", d.report());
        assert!(stats_field(d, "driver_passes") > 0, "{}", d.report());
        let grace = stats_field(d, "app_grace_us");
        assert!(grace > 0 && grace <= 250, "the grace came down from 1000 us\n{}", d.report());
    }
}

/// The `SOFTROCE_STATS` line's `name=value` field (0 when left out): of
/// the line with traffic, written when its context closed or, still open,
/// at exit.
fn stats_field(d: &Done, name: &str) -> u64 {
    let line =
        d.stderr.lines().find(|l| (l.contains(") closed: ") || l.contains(") at exit: ")) && l.contains(" rcvd_pkts="));
    let line = line.unwrap_or_else(|| panic!("no SOFTROCE_STATS line\n{}", d.report()));
    line.split_whitespace().find_map(|w| w.strip_prefix(name)?.strip_prefix('=')?.parse().ok()).unwrap_or(0)
}

/// `ib_read_lat`'s server calls no verb while its client READs: its driver
/// thread answers each READ and polls on a while after it
/// (`SOFTROCE_DRIVER_SPIN_US`, 50 us unless set; 0 turns it off).
#[test]
fn ib_read_lat() {
    if !have("ib_read_lat", &["ibv_devinfo", "ib_read_lat"]) {
        return;
    }
    for (spin, spins) in [(None, true), (Some("SOFTROCE_DRIVER_SPIN_US=0"), false)] {
        let env: Vec<&str> = ["SOFTROCE_STATS=1"].into_iter().chain(spin).collect();
        let (s, c) = perftest_env(&env, "ib_read_lat", Some(64));
        check_lat(&c, 64);
        assert!(s.stdout.contains(" remote address: LID"), "{}", s.report());
        assert!(table_row(&s.stdout, &LAT_HEADER).is_none(), "{}", s.report());
        assert!(stats_field(&s, "rcvd_pkts") >= PERF_ITERS, "{}", s.report());
        assert_eq!(stats_field(&s, "driver_spins") > 0, spins, "{env:?}: the server's driver thread\n{}", s.report());
        assert_eq!(stats_field(&c, "driver_spins"), 0, "the client polls\n{}", c.report());
    }
}

#[test]
fn ib_atomic_lat() {
    lat_test("ib_atomic_lat", None, false);
}

// ---------------------------------------------------------------------------
// qperf

/// Runs qperf's four RC tests (1 s each) between a `qperf` server and a
/// client given `flags`, and checks each printed a positive figure.
fn qperf(flags: &[&str]) {
    qperf_to("127.0.0.1", flags);
}

/// [`qperf`] with the client connecting to `server`.
fn qperf_to(server: &str, flags: &[&str]) {
    if !have("qperf", &["qperf"]) {
        return;
    }
    // `-lp` is qperf's listen (synchronisation) port, on both sides. Its RC
    // tests address the peer by LID only (no GRH).
    let client: Vec<&str> = ["qperf", "-lp", PORT]
        .into_iter()
        .chain(flags.iter().copied())
        .chain(["-t", "1", server])
        .chain(QPERF_TESTS)
        .collect();
    let (_, c) = server_client(&["qperf", "-lp", PORT], &client, ServerEnd::Kill, &[]);
    check_qperf(&c, &QPERF_TESTS);
}

/// qperf's four RC tests.
const QPERF_TESTS: [&str; 4] = ["rc_bw", "rc_lat", "rc_rdma_write_bw", "rc_rdma_read_bw"];

/// Each of `tests` printed a positive figure in the client's output `c`.
fn check_qperf(c: &Done, tests: &[&str]) {
    // "rc_bw:" then "    bw  =  1.08 GB/sec"; "rc_lat:" then "    latency  =  61.3 us".
    let lines: Vec<&str> = c.stdout.lines().collect();
    for test in tests {
        let at = lines.iter().position(|l| *l == format!("{test}:"));
        let at = at.unwrap_or_else(|| panic!("no {test} result\n{}", c.report()));
        let f: Vec<&str> = lines.get(at + 1).copied().unwrap_or_default().split_whitespace().collect();
        let (name, units): (&str, &[&str]) = if test.ends_with("_lat") {
            ("latency", &["ns", "us", "ms", "sec"])
        } else {
            ("bw", &["bytes/sec", "KB/sec", "MB/sec", "GB/sec"])
        };
        assert!(f.len() == 4 && f[0] == name && f[1] == "=" && units.contains(&f[3]), "{test}: {f:?}\n{}", c.report());
        let v: f64 = f[2].parse().unwrap_or(f64::NAN);
        assert!(v > 0.0, "{test}: {f:?}\n{}", c.report());
    }
}

/// qperf as users run it: waiting on completion events. Its tests end on
/// SIGALRM (a handler without SA_RESTART) and rely on the blocked
/// `ibv_get_cq_event` returning EINTR then, as rdma-core's `read()` does.
#[test]
fn qperf_rc_tests() {
    qperf(&[]);
}

/// The same with polled completion queues (`-cp1`).
#[test]
fn qperf_rc_tests_polling() {
    qperf(&["-cp1"]);
}

/// qperf's RC tests connected by rdma_cm (`-cm1`), on the shared device.
/// qperf 0.4.11's server tells the client its rdma_cm port before it calls
/// `rdma_listen`, and exits without destroying its connected id: the REQ
/// waits for the listener, and the exit sends the DREP its client waits for.
///
/// qperf makes its QPs on the first device (the default, which loopback
/// is not when the host has another interface) but resolves the peer with
/// rdma_cm: the server's address must be that device's, as on a host with
/// a RoCE NIC (rdma_cm would otherwise pick another device than qperf's PD).
#[test]
fn qperf_rc_tests_over_rdma_cm() {
    let server = default_device().addr.to_string();
    shared(|| qperf_to(&server, &["-cm1"]));
}

/// The rdma_cm port of this run's test `k` (0..10): one per test, run and
/// release the test's programs come from (a listener holds its port on the
/// device while its process lives, and `distros` runs the same tests with
/// trixie's and sid's programs beside this machine's: ib_send_bw -R on the
/// host and in trixie, listening on one port at once, failed one another's
/// `rdma_listen`).
fn cm_port(k: u16) -> u16 {
    assert!(k < 10);
    let release = RELEASE.with_borrow(|r| match r.as_deref().and_then(Path::file_name) {
        None => 0,
        Some(n) if n == "trixie" => 1,
        Some(_) => 2,
    });
    20000 + (std::process::id() % 1500) as u16 * 30 + release * 10 + k
}

/// The 64-byte payload rping sends in ping `n` (its `-S` default): the
/// text `rdma-ping-N: ` then printable characters from `A + n`, cycling
/// through 65..=122, NUL-terminated where the text ends.
fn rping_line(n: usize) -> String {
    let head = format!("rdma-ping-{n}: ");
    let mut c = 65 + (n % 58) as u8;
    let mut out = head.clone();
    for _ in head.len()..63 {
        out.push(c as char);
        c = if c == 122 { 65 } else { c + 1 };
    }
    out
}

/// rdma-core's `rping` (librdmacm), unmodified, under plain `softroce run`:
/// the server listens on 127.0.0.1, the client connects by rdma_cm, and
/// 20 verbose iterations of SEND, RDMA READ and RDMA WRITE check every
/// byte (rping verifies the data itself and prints each ping).
#[test]
fn rping_connects_by_rdma_cm_and_pings_20_times() {
    if !have("rping", &["rping"]) {
        return;
    }
    shared(|| {
        let port = cm_port(0).to_string();
        // rping keeps its device open to the end (rdma_cm's devices live
        // as long as the process): SOFTROCE_STATS reports it at exit.
        let stats = ["env", "SOFTROCE_STATS=1"];
        let server: Vec<&str> =
            stats.into_iter().chain(["rping", "-s", "-a", "127.0.0.1", "-p", &port, "-v", "-C", "20"]).collect();
        let client: Vec<&str> =
            stats.into_iter().chain(["rping", "-c", "-a", "127.0.0.1", "-p", &port, "-v", "-C", "20"]).collect();
        let (s, c) = cm_server_client(&server, &client);
        let pings: Vec<&str> = c.stdout.lines().filter_map(|l| l.strip_prefix("ping data: ")).collect();
        let served: Vec<&str> = s.stdout.lines().filter_map(|l| l.strip_prefix("server ping data: ")).collect();
        let want: Vec<String> = (0..20).map(rping_line).collect();
        assert_eq!(pings, want, "the client's pings\n{}", c.report());
        assert_eq!(served, want, "what the server received\n{}", s.report());
        // Each ping: the client's SEND of its buffer's address, the server's
        // READ of it and WRITE back, the client's second SEND (rping's
        // protocol), so both ends received at least 2 packets a ping.
        for d in [&s, &c] {
            assert!(stats_field(d, "rcvd_pkts") >= 40, "{}", d.report());
            assert!(stats_field(d, "sent_pkts") >= 40, "{}", d.report());
        }
    });
}

/// What an `rping` server holds, for the churn test: its open files,
/// resident memory, and its QPs and rdma_cm ids on the shared device (its
/// context's published counts).
#[derive(Debug, Clone, Copy, PartialEq)]
struct Held {
    fds: usize,
    rss_kib: u64,
    qps: u64,
    cm_ids: u64,
}

fn held(pid: u32) -> Held {
    let fds = std::fs::read_dir(format!("/proc/{pid}/fd")).map_or(0, |d| d.count());
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let rss_kib = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap_or(0);
    // The shared device of 127.0.0.1, where the servers listen.
    let addr = std::net::SocketAddr::new(Ipv4Addr::LOCALHOST.into(), roce_wire::ROCE_V2_UDP_PORT);
    let census = roce_host::resources::census(addr).expect("the shared device's census");
    let me = census.members.iter().filter(|m| m.pid == pid);
    let (qps, cm_ids) = me.fold((0, 0), |(q, c), m| (q + m.counts.qp, c + m.counts.cm_id));
    Held { fds, rss_kib, qps, cm_ids }
}

/// The resident KiB of each mapping of `pid`, by (start, size in KiB).
fn resident_by_mapping(pid: u32) -> std::collections::BTreeMap<(u64, u64), u64> {
    let smaps = std::fs::read_to_string(format!("/proc/{pid}/smaps")).unwrap_or_default();
    let (mut out, mut cur) = (std::collections::BTreeMap::new(), None);
    for l in smaps.lines() {
        let range = l.split_whitespace().next().and_then(|r| r.split_once('-'));
        let bounds =
            range.and_then(|(a, b)| Some((u64::from_str_radix(a, 16).ok()?, u64::from_str_radix(b, 16).ok()?)));
        if let Some((start, end)) = bounds {
            cur = Some((start, (end - start) / 1024));
        } else if let (Some(key), Some(rss)) = (cur, l.strip_prefix("Rss:")) {
            out.insert(key, rss.split_whitespace().next().and_then(|v| v.parse().ok()).unwrap_or(0));
        }
    }
    out
}

/// What the server came to hold between `warm` and `end` (KiB): every
/// mapping's resident growth, but for the buffers of 1 MiB and more it
/// had at warm-up with the same place and size (a receive batch of 4 MiB,
/// made at open): the kernel fills their pages as the largest burst yet
/// reaches them (CI: one burst of relayed datagrams took a batch's from
/// 12 to 396 KiB), not per client. Returns (held, those buffers' growth).
fn grown(
    warm: &std::collections::BTreeMap<(u64, u64), u64>,
    end: &std::collections::BTreeMap<(u64, u64), u64>,
) -> (i64, i64) {
    let (mut held, mut buffers) = (0i64, 0i64);
    for (key, &rss) in end {
        let before = warm.get(key).copied();
        let delta = rss as i64 - before.unwrap_or(0) as i64;
        if before.is_some() && key.1 >= 1024 {
            buffers += delta;
        } else {
            held += delta;
        }
    }
    // A mapping gone since warm-up gave its pages back.
    held -= warm.iter().filter(|(k, _)| !end.contains_key(k)).map(|(_, &r)| r as i64).sum::<i64>();
    (held, buffers)
}

/// The program `softroce run` started for `p` (its only child).
fn program_pid(p: &Proc) -> u32 {
    let run = p.child.as_ref().unwrap().id();
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let kids = std::fs::read_to_string(format!("/proc/{run}/task/{run}/children")).unwrap_or_default();
        if let Some(pid) = kids.split_whitespace().next().and_then(|k| k.parse().ok()) {
            return pid;
        }
        assert!(Instant::now() < deadline, "softroce run started no program");
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Polls what `pid` holds until `done` holds of it (at most `secs`).
fn wait_held(pid: u32, what: &str, secs: u64, done: impl Fn(Held) -> bool) -> Held {
    let deadline = Instant::now() + Duration::from_secs(secs);
    loop {
        let h = held(pid);
        if done(h) {
            return h;
        }
        assert!(Instant::now() < deadline, "{what}: the server holds {h:?}");
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// Clients of the churn test, and how many warm the server up.
const CHURN_CLIENTS: usize = 1000;
const CHURN_WARM_UP: usize = 300;

/// rdma_cm churn on one server (kernel rxe is reported to fail one client
/// in a thousand): an unmodified `rping -P` server (a thread per
/// connection) serves 1,000 clients that connect, ping once and
/// disconnect, one after another, on the shared device. Every client
/// succeeds, and once each has gone the server holds what it held after
/// the first 300: the same open files, no QP but the CM's and one rdma_cm
/// id (its listener), and at most 512 KiB more resident memory over 700
/// connections (the buffers it made at open aside, see [`grown`]): the
/// CM's table of connections in timewait may double once, but what one
/// connection's QP and buffers take (20 KiB and up), or a table slot kept
/// per connection (100 bytes, as CQ handles were before they were
/// reused), would show.
#[test]
fn an_rping_server_serves_a_thousand_clients_one_after_another_without_growing() {
    if !have("rping_churn", &["rping"]) {
        return;
    }
    shared(|| {
        let port = cm_port(8).to_string();
        let server = Proc::start(&["rping", "-s", "-P", "-a", "127.0.0.1", "-p", &port]);
        let client = ["rping", "-c", "-a", "127.0.0.1", "-p", &port, "-C", "1", "-S", "64"];
        let pid = program_pid(&server);
        // Its listener, and the CM's QP 1.
        let listening = wait_held(pid, "listening", 10, |h| h.cm_ids == 1);
        // Once a client is gone, the server's thread for it tears down.
        let settled = |what: &str| wait_held(pid, what, 10, |h| h.qps == listening.qps && h.cm_ids == 1);
        // The clients under plain `softroce run`, but without the sysfs
        // view (`SOFTROCE_SYSFS=0`: rping reads none, and making its 6,000
        // files is most of a client's 150 ms here).
        let start_client = || {
            let mut cmd = Command::new(softroce());
            cmd.env("SOFTROCE_SYSFS", "0").args(["run", "--"]).args(client);
            Proc::spawn(client.join(" "), cmd, CHILD_TIMEOUT)
        };
        let t0 = Instant::now();
        let mut warm = None;
        for i in 1..=CHURN_CLIENTS {
            let c = start_client().finish(CHILD_TIMEOUT);
            assert!(c.ok(), "client {i} of {CHURN_CLIENTS} failed\n{}", c.report());
            if i == CHURN_WARM_UP {
                warm = Some((settled("after the warm-up"), resident_by_mapping(pid)));
            }
        }
        let end = settled("after the last client");
        let maps = resident_by_mapping(pid);
        let (warm, warm_maps) = warm.unwrap();
        let (held, buffers) = grown(&warm_maps, &maps);
        let server = server.kill();
        println!(
            "rping -P served {CHURN_CLIENTS} clients in {:.1?}; after {CHURN_WARM_UP}: {warm:?}; after all: {end:?}; \
             held {held} KiB more, its buffers of 1 MiB and more {buffers} KiB more",
            t0.elapsed()
        );
        assert_eq!(end.fds, warm.fds, "open files grew\n{}", server.report());
        assert!(
            held <= 512,
            "resident memory grew from {} to {} KiB, {held} KiB of it outside the buffers made at open\n{}",
            warm.rss_kib,
            end.rss_kib,
            server.report()
        );
    });
}

/// A server whose client dies mid-transfer keeps serving the others: an
/// `rping -P` server has three clients pinging at once; one is killed
/// (SIGKILL, its whole process group) while it pings. The other two finish
/// every ping, a fourth client connects afterwards and finishes, and the
/// server lets go of the dead client's QP and rdma_cm id; twice, with no
/// more open files after the second than after the first.
#[test]
fn an_rping_server_keeps_serving_others_when_a_client_is_killed_mid_transfer() {
    if !have("rping_killed", &["rping"]) {
        return;
    }
    shared(|| {
        let port = cm_port(9).to_string();
        let server = Proc::start(&["rping", "-s", "-P", "-a", "127.0.0.1", "-p", &port]);
        let pid = program_pid(&server);
        let listening = wait_held(pid, "listening", 10, |h| h.cm_ids == 1);
        let base = listening.qps;
        let pings = "2000";
        let long = ["rping", "-c", "-a", "127.0.0.1", "-p", &port, "-C", pings, "-v"];
        // Twice: what the server holds after the second dead client is
        // what it held after the first (nothing kept per dead client).
        let mut after = Vec::new();
        for round in 1..=2 {
            let victim = Proc::start(&long);
            wait_held(pid, "the victim connected", 20, |h| h.qps == base + 1);
            // One at a time: rping's server keeps the newest CONNECT_REQUEST's
            // id in one field (`child_cm_id`) that its main loop copies once
            // woken, so two requests handled before that copy give two
            // server threads the second id and leave the first client
            // without a REP (the server's CM answers its retried REQ with an
            // MRA until it gives up). The same with the kernel's rdma_cm.
            let others: Vec<Proc> = (2..=3)
                .map(|n| {
                    let c = Proc::start(&long);
                    wait_held(pid, "the next client connected", 20, |h| h.qps == base + n);
                    c
                })
                .collect();
            std::thread::sleep(Duration::from_millis(200));
            let victim = victim.kill();
            let pinged = victim.stdout.lines().filter(|l| l.starts_with("ping data: ")).count();
            assert!(
                // Reaped by `kill` itself (None) or seen dead of the SIGKILL.
                pinged < 2000
                    && victim.status.is_none_or(|s| std::os::unix::process::ExitStatusExt::signal(&s) == Some(9)),
                "round {round}: the victim was killed mid-transfer ({pinged} pings)\n{}",
                victim.report()
            );
            for c in others {
                let c = c.finish(CHILD_TIMEOUT);
                let n = c.stdout.lines().filter(|l| l.starts_with("ping data: ")).count();
                assert!(
                    c.ok() && n == 2000,
                    "round {round}: a client beside the killed one: {n} pings\n{}",
                    c.report()
                );
            }
            let late =
                Proc::start(&["rping", "-c", "-a", "127.0.0.1", "-p", &port, "-C", "10", "-v"]).finish(CHILD_TIMEOUT);
            let n = late.stdout.lines().filter(|l| l.starts_with("ping data: ")).count();
            assert!(late.ok() && n == 10, "round {round}: a client after the killed one: {n} pings\n{}", late.report());
            after.push(wait_held(pid, "the dead client's connection released", 60, |h| h.qps == base && h.cm_ids == 1));
        }
        assert_eq!(after[1].fds, after[0].fds, "open files grew with the second dead client");
        let h = after[1];
        let server = server.kill();
        println!("after a client killed mid-transfer, 3 others served; the server holds {h:?}\n{}", server.report());
    });
}

/// rping's rdma_cm exchange over softroce between two hosts (network
/// namespaces on a veth link, as in the golden capture), captured by
/// `SOFTROCE_PCAP` on both sides, against the kernel's (`rping_c3`, the
/// same `-C 3 -S 64`): the same five MADs (REQ, REP, RTU, DREQ, DREP) from
/// the same sides with the same QP 1 PSNs, each equal to the kernel's byte
/// for byte but for the fields of the run (IDs, port, GUIDs, QPNs, PSNs,
/// GIDs). Prints which fields those were.
#[test]
fn rpings_cm_exchange_matches_the_kernels_capture() {
    if !have("rping_golden", &["rping"]) {
        return;
    }
    let Some(h) = TwoHosts::new("gold") else { return };
    let dir = std::env::temp_dir().join(format!("softroce-cm-golden-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let (sp, cp) = (dir.join("server.pcap"), dir.join("client.pcap"));
    let (spcap, cpcap) = (format!("SOFTROCE_PCAP={}", sp.display()), format!("SOFTROCE_PCAP={}", cp.display()));
    let srv = h.addr[1];
    shared(|| {
        let server = ["env", &spcap, "rping", "-s", "-a", srv, "-p", "7174", "-C", "3", "-S", "64"];
        let client = ["env", &cpcap, "rping", "-c", "-a", srv, "-p", "7174", "-C", "3", "-S", "64"];
        cm_server_client_in((Some(&h.ns[1]), &server), (Some(&h.ns[0]), &client));
    });
    let golden = cm_golden::cm_mads(&cm_golden::golden("rping_c3"));
    let client: std::net::IpAddr = h.addr[0].parse().unwrap();
    let kernel_client = std::net::IpAddr::V4(Ipv4Addr::new(10, 77, 0, 3));
    // Each side's capture holds what it sent and what it received. rping's
    // client exits once it sent the DREQ: its capture may end before the DREP.
    for (side, pcap, at_least) in [("client", &cp, 4), ("server", &sp, 5)] {
        let printout = cm_golden::compare(&cm_golden::cm_mads(pcap), client, &golden, kernel_client, 5, at_least);
        println!("rping's CM exchange, {side}'s capture:\n{printout}");
        // Each datagram's UDP source port is the one rxe gives its QP.
        let ports = cm_golden::check_source_ports(pcap);
        println!("rping's source ports, {side}'s capture (as the kernel's):\n{ports}");
    }
    println!("the kernel's:\n{}", cm_golden::check_source_ports(&cm_golden::golden("rping_c3")));
    // perftest's `-R`: two connections to one service ID (the parameter
    // exchange's and the measured QP's), torn down from both ends.
    if have("ib_send_bw_golden", &["ib_send_bw"]) {
        let g = gid_index();
        shared(|| {
            let server = ["env", &spcap, "ib_send_bw", "-R", "-x", &g, "-n", "5", "-s", "64"];
            let client = ["env", &cpcap, "ib_send_bw", "-R", "-x", &g, "-n", "5", "-s", "64", srv];
            cm_server_client_in((Some(&h.ns[1]), &server), (Some(&h.ns[0]), &client));
        });
        let golden = cm_golden::cm_mads(&cm_golden::golden("ib_send_bw_rdmacm_s64_n5"));
        for (side, pcap) in [("client", &cp), ("server", &sp)] {
            let printout = cm_golden::compare(&cm_golden::cm_mads(pcap), client, &golden, kernel_client, 6, 8);
            println!("ib_send_bw -R's CM exchange, {side}'s capture:\n{printout}");
            println!("ib_send_bw -R's source ports, {side}'s capture:\n{}", cm_golden::check_source_ports(pcap));
        }
        let kernel = cm_golden::check_source_ports(&cm_golden::golden("ib_send_bw_rdmacm_s64_n5"));
        println!("the kernel's:\n{kernel}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// Starts `server` (an rdma_cm listener) and runs `client` until it gets
/// past the REJECTED (reason 8: nobody listens yet) a connect meets while
/// the server is still starting (each tool says so in its own words);
/// returns both ends, which must have succeeded.
fn cm_server_client(server: &[&str], client: &[&str]) -> (Done, Done) {
    cm_server_client_in((None, server), (None, client))
}

/// [`cm_server_client`] with each end in a network namespace of its own
/// (`None`: this one).
fn cm_server_client_in(server: (Option<&str>, &[&str]), client: (Option<&str>, &[&str])) -> (Done, Done) {
    server_then_client(server, client, |c| {
        ["REJECTED", "CM event bl blka 8", "rdma_connect"].iter().any(|m| c.stdout.contains(m) || c.stderr.contains(m))
    })
}

/// Starts `server`, then runs `client` again (up to 20 times, waiting a
/// little longer each time) while it fails `too_early` (the server was not
/// listening yet); returns both ends, which must have succeeded.
fn server_then_client(
    server: (Option<&str>, &[&str]),
    client: (Option<&str>, &[&str]),
    too_early: impl Fn(&Done) -> bool,
) -> (Done, Done) {
    let mut s = Proc::start_in(server.0, server.1);
    if server.0.is_some() {
        // In a namespace of its own nobody holds port 4791 before the
        // server binds: a REQ sent before that is lost and resent a CM
        // timeout later (on a busy machine, the golden comparison then sees
        // two REQs). Once the server's device socket is there, a REQ waits
        // for its listener (`docs/host-sharing.md`).
        let deadline = Instant::now() + Duration::from_secs(10);
        while !s.exited() && !udp_bound_in_netns_of(&s, 4791) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(10));
        }
    }
    let mut last = None;
    for attempt in 1..=20u64 {
        std::thread::sleep(Duration::from_millis(50 * attempt));
        let c = Proc::start_in(client.0, client.1).finish(CHILD_TIMEOUT);
        if c.ok() || !too_early(&c) || s.exited() {
            last = Some(c);
            break;
        }
    }
    let c = last.expect("the client ran");
    let s = s.finish(SERVER_GRACE);
    // The server's side too: a client cut off (SIGPIPE) is the server's tale.
    assert!(c.ok(), "the client failed\n{}\nthe server:\n{}", c.report(), s.report());
    assert!(s.ok_or_rxm_teardown_crash(), "the server failed\n{}\n{}", s.report(), c.report());
    (s, c)
}

/// perftest over rdma_cm (`-R`: the connection and the parameter exchange
/// by rdma_cm, no TCP), unmodified, under plain `softroce run`.
#[test]
fn perftest_over_rdma_cm_send_write_bw_and_read_lat() {
    if !have("perftest_over_rdma_cm", &["ib_send_bw", "ib_write_bw", "ib_read_lat"]) {
        return;
    }
    let g = gid_index();
    shared(|| {
        let iters = PERF_ITERS.to_string();
        for (k, (tool, size)) in
            [("ib_send_bw", "65536"), ("ib_write_bw", "65536"), ("ib_read_lat", "2")].into_iter().enumerate()
        {
            // A port of its own per run (a listener's port is the device's
            // while its process lives).
            let port = cm_port(1 + k as u16).to_string();
            let server = [tool, "-R", "-x", &g, "-n", &iters, "-s", size, "-p", &port];
            let client: Vec<&str> = server.iter().copied().chain(["127.0.0.1"]).collect();
            let (s, c) = cm_server_client(&server, &client);
            for d in [&s, &c] {
                assert!(d.stdout.contains(" Data ex. method : rdma_cm"), "{}", d.report());
                assert!(d.stdout.contains(" rdma_cm QPs\t : ON"), "{}", d.report());
            }
            if tool.ends_with("_bw") {
                check_bw(&c, 65536, true);
            } else {
                check_lat(&c, 2);
            }
        }
    });
}

/// librdmacm's `ucmatose`: rdma_cm connections with data transfers both
/// ways, disconnected by the server.
#[test]
fn ucmatose_connects_by_rdma_cm() {
    if !have("ucmatose", &["ucmatose"]) {
        return;
    }
    shared(|| {
        let port = cm_port(4).to_string();
        let (s, c) = cm_server_client(
            &["ucmatose", "-b", "127.0.0.1", "-p", &port],
            &["ucmatose", "-s", "127.0.0.1", "-p", &port],
        );
        for d in [&s, &c] {
            assert!(d.stdout.contains("data transfers complete"), "{}", d.report());
            assert!(d.stdout.contains("return status 0"), "{}", d.report());
        }
        assert!(s.stdout.contains("disconnected"), "{}", s.report());
    });
}

/// librdmacm's `udaddy`: a UD id resolves the server's service by SIDR,
/// then ten datagrams go each way (the server answers through an AH made
/// from each receive and the Q_Key `ibv_query_qp` reports). udaddy's port
/// is fixed (7174, in rdma_cm's UDP port space of the shared device), so a
/// listener left there by another run of this user is waited out.
#[test]
fn udaddy_resolves_by_sidr_and_exchanges_datagrams() {
    if !have("udaddy", &["udaddy"]) {
        return;
    }
    shared(|| {
        for attempt in 1..=10u64 {
            let mut s = Proc::start(&["udaddy", "-b", "127.0.0.1"]);
            std::thread::sleep(Duration::from_millis(300));
            if s.exited() {
                let d = s.finish(SERVER_GRACE);
                assert!(d.stderr.contains("in use") && attempt < 10, "the server failed\n{}", d.report());
                std::thread::sleep(Duration::from_secs(1));
                continue;
            }
            let c = Proc::start(&["udaddy", "-s", "127.0.0.1"]).finish(CHILD_TIMEOUT);
            let s = s.finish(SERVER_GRACE);
            for d in [&s, &c] {
                assert!(d.ok() && d.stdout.contains("data transfers complete"), "{}\n{}", s.report(), c.report());
                assert!(d.stdout.contains("return status 0"), "{}", d.report());
            }
            assert!(s.stdout.contains("sending replies"), "{}", s.report());
            return;
        }
    });
}

/// An IPv4 multicast group of this run's own (`k` tells a run's tests apart).
fn mcast_group(k: u8) -> String {
    let p = std::process::id();
    format!("239.{}.{}.{}", 64 + k, (p >> 8) as u8, p as u8)
}

/// librdmacm's `mckey`: a receiver and a sender join `group` (bound to
/// `bind[0]` and `bind[1]`, each in its namespace), and the sender's UD
/// SENDs to the multicast QPN reach every receiving id (mckey waits until
/// each of its `-c` ids has taken all of its `-C` messages). `sender_flags`:
/// e.g. `-o` (a send-only member) or `-l` (the QPs block their own loopback).
fn mckey_pair(ns: [Option<&str>; 2], bind: [&str; 2], group: &str, conns: &str, sender_flags: &[&str]) {
    let receiver = ["mckey", "-m", group, "-b", bind[0], "-c", conns, "-C", "10", "-S", "512"];
    let r = Proc::start_in(ns[0], &receiver);
    // The receiver has joined before the sender's first message: mckey
    // sleeps 3 s after joining before it sends.
    std::thread::sleep(Duration::from_millis(300));
    let mut sender = vec!["mckey", "-m", group, "-b", bind[1], "-s", "-c", conns, "-C", "10", "-S", "512"];
    sender.extend_from_slice(sender_flags);
    let s = Proc::start_in(ns[1], &sender).finish(CHILD_TIMEOUT);
    let r = r.finish(SERVER_GRACE);
    let joined = format!("mckey: joined dgid: ::ffff:{group} mlid 0x0 sl 0");
    let conns: usize = conns.parse().unwrap();
    for d in [&r, &s] {
        assert!(d.ok() && d.stdout.contains("return status 0"), "{}\n{}", r.report(), s.report());
        assert_eq!(d.stdout.lines().filter(|l| *l == joined).count(), conns, "{}", d.report());
        assert!(d.stdout.contains("data transfers complete"), "{}", d.report());
    }
    assert!(r.stdout.contains("receiving data transfers"), "{}", r.report());
    assert!(s.stdout.contains("initiating data transfers"), "{}", s.report());
}

/// librdmacm's `mckey` on the shared loopback device: rdma_join_multicast
/// (MULTICAST_JOIN with the group's AH, QPN 0xFFFFFF and RDMA_UDP_QKEY),
/// `ibv_attach_mcast`, UD SENDs to the group over IP multicast; with two
/// ids a side, as a send-only member, and with the QPs blocking their own
/// loopback (`rdma_create_qp_ex` with IBV_QP_CREATE_BLOCK_SELF_MCAST_LB).
#[test]
fn mckey_joins_a_group_and_every_member_receives() {
    if !have("mckey", &["mckey"]) {
        return;
    }
    shared(|| {
        let lo = ["127.0.0.1", "127.0.0.1"];
        mckey_pair([None, None], lo, &mcast_group(0), "1", &[]);
        mckey_pair([None, None], lo, &mcast_group(1), "2", &["-o"]);
        mckey_pair([None, None], lo, &mcast_group(2), "2", &["-l"]);
    });
}

/// librdmacm's `rdma_server` and `rdma_client`: synchronous endpoints
/// (`rdma_create_ep` from `rdma_getaddrinfo`, `rdma_get_request`), QPs made
/// with librdmacm's own CQs and channels, and `rdma_verbs.h`'s helpers for
/// one SEND each way.
#[test]
fn rdma_server_and_client_use_synchronous_endpoints() {
    if !have("rdma_server", &["rdma_server", "rdma_client"]) {
        return;
    }
    shared(|| {
        let port = cm_port(5).to_string();
        let (s, c) = cm_server_client(&["rdma_server", "-p", &port], &["rdma_client", "-s", "127.0.0.1", "-p", &port]);
        assert!(s.stdout.contains("rdma_server: end 0"), "{}", s.report());
        assert!(c.stdout.contains("rdma_client: end 0"), "{}", c.report());
    });
}

/// rdma-core's `size_str` (librdmacm/examples/common.c): a byte count as
/// rstream and riostream print it (`4k`, `2.8m`, `64`).
fn rsocket_size_str(size: u64) -> String {
    let (base, mag) = match size {
        s if s >= 1 << 30 => (1 << 30, "g"),
        s if s >= 1 << 20 => (1 << 20, "m"),
        s if s >= 1 << 10 => (1 << 10, "k"),
        _ => (1, ""),
    };
    let fraction = if size / base < 10 { (size % base) * 10 / base } else { 0 };
    if fraction > 0 { format!("{}.{fraction}{mag}", size / base) } else { format!("{}{mag}", size / base) }
}

/// rdma-core's `cnt_str`: a count as rstream prints it (`100`, `2k`).
fn rsocket_cnt_str(n: u64) -> String {
    match n {
        n if n >= 1_000_000_000 => format!("{}b", n / 1_000_000_000),
        n if n >= 1_000_000 => format!("{}m", n / 1_000_000),
        n if n >= 1_000 => format!("{}k", n / 1_000),
        n => n.to_string(),
    }
}

/// Checks the output of a custom rstream / riostream run (`-S size -C
/// xfers -I iters`): the header, then `custom SIZE XFERS ITERS TOTAL TIMEs
/// GBPS USEC` with the total both ways; returns (Gb/s, usec per transfer).
fn rsocket_result(d: &Done, size: u64, xfers: u64, iters: u64) -> (f64, f64) {
    let out = &d.stdout;
    let header = ["name", "bytes", "xfers", "iters", "total", "time", "Gb/sec", "usec/xfer"];
    assert!(out.lines().any(|l| l.split_whitespace().eq(header)), "no header\n{}", d.report());
    let line =
        out.lines().find(|l| l.starts_with("custom")).unwrap_or_else(|| panic!("no result line\n{}", d.report()));
    let f: Vec<&str> = line.split_whitespace().collect();
    let want = [
        "custom".to_owned(),
        rsocket_size_str(size),
        rsocket_cnt_str(xfers),
        rsocket_cnt_str(iters),
        rsocket_size_str(2 * size * xfers * iters),
    ];
    assert_eq!(f.len(), 8, "{line}\n{}", d.report());
    assert_eq!(&f[..5], &want, "{}", d.report());
    let secs: f64 = f[5].strip_suffix('s').and_then(|t| t.parse().ok()).unwrap_or(-1.0);
    let (gbps, usec): (f64, f64) = (f[6].parse().unwrap_or(0.0), f[7].parse().unwrap_or(0.0));
    // Gb/s reads 0.00 for small transfers; the time per transfer never does.
    assert!(secs >= 0.0 && gbps >= 0.0 && usec > 0.0, "{line}\n{}", d.report());
    assert!(!out.contains("verification failed"), "{}", d.report());
    (gbps, usec)
}

/// Starts an rsockets server (`PROG -p PORT ARGS`) and runs its client
/// (`PROG -s 127.0.0.1 -p PORT ARGS`), again while its connect is refused
/// because the server does not listen yet; both must succeed.
fn rsocket_server_client(prog: &str, port: u16, args: &[&str]) -> (Done, Done) {
    rsocket_server_client_in(prog, [None, None], "127.0.0.1", port, args)
}

/// [`rsocket_server_client`] with the server in namespace `ns[0]` at
/// `server`, the client in `ns[1]` (`None`: this one).
fn rsocket_server_client_in(prog: &str, ns: [Option<&str>; 2], server: &str, port: u16, args: &[&str]) -> (Done, Done) {
    let port = port.to_string();
    let srv: Vec<&str> = [prog, "-p", &port].into_iter().chain(args.iter().copied()).collect();
    let client: Vec<&str> = [prog, "-s", server, "-p", &port].into_iter().chain(args.iter().copied()).collect();
    // A blocking connect says `rconnect: Connection refused`; a
    // nonblocking one sees POLLERR (`rpoll: ...`) or SO_ERROR's ECONNREFUSED.
    server_then_client((ns[0], &srv), (ns[1], &client), |c| {
        c.stderr.contains("Connection refused") || c.stderr.contains("rpoll: ")
    })
}

/// librdmacm's `rstream`, unmodified, server and client over rsockets
/// (librdmacm's socket API, in softroce's library): nonblocking calls
/// (its default and `-T n`), blocking ones (`-T b`), rpoll (`-T a`, both
/// ways), data verification (`-T v`), a latency run and transfers larger
/// than the receive ring. Both ends print their result line.
#[test]
fn rstream_runs_over_rsockets_blocking_nonblocking_and_with_rpoll() {
    if !have("rstream", &["rstream"]) {
        return;
    }
    shared(|| {
        let runs: [(&[&str], u64, u64, u64); 6] = [
            (&["-S", "4096", "-C", "100", "-T", "b", "-T", "v"], 4096, 100, 1),
            (&["-S", "4096", "-C", "100", "-T", "n"], 4096, 100, 1),
            (&["-S", "4096", "-C", "100", "-T", "a", "-T", "v"], 4096, 100, 1),
            (&["-S", "65536", "-C", "50", "-T", "a", "-T", "b"], 65536, 50, 1),
            (&["-S", "64", "-C", "1", "-I", "300", "-T", "b"], 64, 1, 300),
            (&["-S", "3000000", "-C", "4", "-T", "b", "-T", "v"], 3_000_000, 4, 1),
        ];
        rsocket_runs("rstream", cm_port(6), &runs);
    });
}

/// Runs `tool`'s server and client once per `(args, size, transfers,
/// iterations)`, checking both ends' result lines.
fn rsocket_runs(tool: &str, port: u16, runs: &[(&[&str], u64, u64, u64)]) {
    for &(args, size, xfers, iters) in runs {
        let (s, c) = rsocket_server_client(tool, port, args);
        for d in [&s, &c] {
            let (gbps, usec) = rsocket_result(d, size, xfers, iters);
            println!("{tool} {}: {gbps} Gb/s, {usec} usec/xfer", args.join(" "));
        }
    }
}

/// librdmacm's `riostream`, unmodified: each side riomaps its buffer, the
/// mapping travels to the peer ahead of the next message, and the peer's
/// riowrite lands in it (the receiver polls its last byte, `-T v` checks
/// every byte), nonblocking, blocking and with rpoll.
#[test]
fn riostream_writes_into_the_peers_riomap() {
    if !have("riostream", &["riostream"]) {
        return;
    }
    shared(|| {
        let runs: [(&[&str], u64, u64, u64); 3] = [
            (&["-S", "4096", "-C", "100", "-T", "v"], 4096, 100, 1),
            (&["-S", "1000000", "-C", "10", "-T", "b", "-T", "v"], 1_000_000, 10, 1),
            (&["-S", "65536", "-C", "50", "-T", "a", "-T", "v"], 65536, 50, 1),
        ];
        rsocket_runs("riostream", cm_port(7), &runs);
    });
}

/// libfabric's verbs provider (Debian 12's libfabric 1.17), unmodified:
/// `fi_pingpong` over `FI_EP_MSG` (rdma_cm connections, `rdma_getaddrinfo`
/// with the hints' own addresses), over `FI_EP_RDM` through `ofi_rxm`, over
/// `FI_EP_DGRAM` (UD QPs, addressed by GID) and over `FI_EP_RDM` through
/// `ofi_rxd` on those, on the shared device, with libfabric's defaults: rxm
/// sizes its CQ as 1,024 entries per peer of the universe (262,144 by
/// default), which kernel rxe's `max_cqe` of 32,767 refuses and softroce's
/// (mlx5's, 4,194,303) takes; dgram and rxd address by GID index 0, which
/// on loopback is made up and routed to the device's IPv4 address.
#[test]
fn libfabric_fi_pingpong_over_verbs_msg_rxm_dgram_and_rxd() {
    if !have("fi_pingpong", &["fi_pingpong"]) {
        return;
    }
    shared(|| {
        for (prov, ep) in [("verbs", "msg"), ("verbs;ofi_rxm", "rdm"), ("verbs", "dgram"), ("verbs;ofi_rxd", "rdm")] {
            let base = ["fi_pingpong", "-p", prov, "-e", ep, "-I", "20"];
            let server: Vec<&str> = base.iter().copied().chain(["-B", PORT]).collect();
            let client: Vec<&str> = base.iter().copied().chain(["-P", PORT, "127.0.0.1"]).collect();
            let (s, c) = server_client(&server, &client, ServerEnd::Exits, &[]);
            for d in [&s, &c] {
                check_fi_pingpong(d, prov, ep);
            }
        }
    });
}

/// `fi_pingpong -I 20`'s table in `d`: "bytes #sent #ack total time MB/sec
/// usec/xfer Mxfers/sec", then a row per size with a positive rate: up to
/// 1 MiB, or for the verbs dgram endpoint up to the default device's MTU
/// (a datagram is one packet).
fn check_fi_pingpong(d: &Done, prov: &str, ep: &str) {
    let all = [("64", 64), ("256", 256), ("1k", 1024), ("4k", 4096), ("64k", 65536), ("1m", 1 << 20)];
    let max = if (prov, ep) == ("verbs", "dgram") { default_device().active_mtu().bytes() } else { 1 << 20 };
    let want: Vec<&str> = all.iter().filter(|(_, n)| *n <= max).map(|(s, _)| *s).collect();
    let rows: Vec<Vec<&str>> = d
        .stdout
        .lines()
        .map(|l| l.split_whitespace().collect::<Vec<_>>())
        .filter(|f| f.len() == 8 && f[1] == "20" && f[2] == "=20")
        .collect();
    let sizes: Vec<&str> = rows.iter().map(|f| f[0]).collect();
    assert_eq!(sizes, want, "{prov} {ep}: {}", d.report());
    assert!(rows.iter().all(|f| f[5].parse::<f64>().is_ok_and(|v| v > 0.0)), "{}", d.report());
}

/// rping, ucmatose, mckey, rdma_server/rdma_client, rstream, udaddy,
/// riostream, perftest -R, qperf -cm1 and fi_pingpong between two network
/// namespaces (two hosts on a veth link): each namespace's `softroce run`
/// finds its interface's device by itself, and the CM exchange crosses the
/// link.
#[test]
fn rping_and_ucmatose_between_two_network_namespaces() {
    if !have("rping_netns", &["rping", "ucmatose"]) {
        return;
    }
    let Some(h) = TwoHosts::new("cm") else { return };
    let (a, b) = (Some(h.ns[0].as_str()), Some(h.ns[1].as_str()));
    // perftest's GID index of the IPv4 address (as on every device: 1).
    let g = gid_index();
    shared(|| {
        let srv = h.addr[1];
        let server = ["rping", "-s", "-a", srv, "-p", "7174", "-v", "-C", "10"];
        let client = ["rping", "-c", "-a", srv, "-p", "7174", "-v", "-C", "10"];
        let (s, c) = cm_server_client_in((b, &server), (a, &client));
        let pings: Vec<&str> = c.stdout.lines().filter_map(|l| l.strip_prefix("ping data: ")).collect();
        let want: Vec<String> = (0..10).map(rping_line).collect();
        assert_eq!(pings, want, "the client's pings\n{}", c.report());
        assert_eq!(s.stdout.lines().filter(|l| l.starts_with("server ping data: ")).count(), 10, "{}", s.report());

        let (s, c) = cm_server_client_in(
            (b, &["ucmatose", "-b", srv, "-p", "7175"]),
            (a, &["ucmatose", "-s", srv, "-p", "7175"]),
        );
        for d in [&s, &c] {
            assert!(
                d.stdout.contains("data transfers complete") && d.stdout.contains("return status 0"),
                "{}",
                d.report()
            );
        }

        // Multicast across the link: the group joined on each namespace's
        // interface (IGMP), the datagrams sent to the group's address.
        if have("mckey_netns", &["mckey"]) {
            mckey_pair([b, a], [srv, h.addr[0]], &mcast_group(3), "1", &[]);
        }

        // Synchronous endpoints (rdma_getaddrinfo, rdma_create_ep) across the link.
        if have("rdma_server_netns", &["rdma_server", "rdma_client"]) {
            let (s, c) = cm_server_client_in(
                (b, &["rdma_server", "-s", srv, "-p", "7176"]),
                (a, &["rdma_client", "-s", srv, "-p", "7176"]),
            );
            assert!(s.stdout.contains("rdma_server: end 0"), "{}", s.report());
            assert!(c.stdout.contains("rdma_client: end 0"), "{}", c.report());
        }

        // rsockets across the link, data checked (`-T v`).
        if have("rstream_netns", &["rstream"]) {
            let args = ["-S", "65536", "-C", "20", "-T", "b", "-T", "v"];
            let (s, c) = rsocket_server_client_in("rstream", [b, a], srv, 7177, &args);
            for d in [&s, &c] {
                rsocket_result(d, 65536, 20, 1);
            }
        }

        // A UD id across the link: SIDR to the server's host, then datagrams both ways.
        if have("udaddy_netns", &["udaddy"]) {
            let (s, c) = cm_server_client_in((b, &["udaddy", "-b", srv]), (a, &["udaddy", "-s", srv]));
            for d in [&s, &c] {
                assert!(d.stdout.contains("data transfers complete"), "{}", d.report());
                assert!(d.stdout.contains("return status 0"), "{}", d.report());
            }
        }

        // riowrite into the peer's riomap across the link, every byte checked.
        if have("riostream_netns", &["riostream"]) {
            let args = ["-S", "65536", "-C", "20", "-T", "b", "-T", "v"];
            let (s, c) = rsocket_server_client_in("riostream", [b, a], srv, 7178, &args);
            for d in [&s, &c] {
                rsocket_result(d, 65536, 20, 1);
            }
        }

        // perftest over rdma_cm across the link: the other tests than the
        // golden comparison's ib_send_bw.
        if have("perftest_rdma_cm_netns", &["ib_write_bw", "ib_read_bw", "ib_read_lat"]) {
            for (tool, size) in [("ib_write_bw", "65536"), ("ib_read_bw", "65536"), ("ib_read_lat", "2")] {
                let iters = PERF_ITERS.to_string();
                let server = [tool, "-R", "-x", &g, "-n", &iters, "-s", size];
                let client: Vec<&str> = server.iter().copied().chain([srv]).collect();
                let (_, c) = cm_server_client_in((b, &server), (a, &client));
                assert!(c.stdout.contains(" Data ex. method : rdma_cm"), "{}", c.report());
                if tool.ends_with("_bw") {
                    check_bw(&c, 65536, true);
                } else {
                    check_lat(&c, 2);
                }
            }
        }

        // qperf's RC tests connected by rdma_cm across the link. Its server
        // serves until killed; the client retries until it listens.
        if have("qperf_netns", &["qperf"]) {
            let mut server = Proc::start_in(b, &["qperf", "-lp", "19766"]);
            let client: Vec<&str> =
                ["qperf", "-lp", "19766", "-cm1", "-t", "1", srv].into_iter().chain(QPERF_TESTS).collect();
            let mut c = None;
            for attempt in 1..=20u64 {
                std::thread::sleep(Duration::from_millis(50 * attempt));
                let d = Proc::start_in(a, &client).finish(CHILD_TIMEOUT);
                if d.ok() || server.exited() || attempt == 20 {
                    c = Some(d);
                    break;
                }
            }
            let s = server.kill();
            let c = c.expect("the client ran");
            assert!(c.ok(), "qperf -cm1 across the link failed\n{}\n{}", c.report(), s.report());
            check_qperf(&c, &QPERF_TESTS);
        }

        // libfabric's fi_pingpong over verbs MSG and verbs;ofi_rxm RDM across
        // the link, with each host's RDMA device its link's alone, as on a
        // host whose one RoCE NIC is its link: libfabric 1.17's server binds
        // "localhost" and, when no device owns 127.0.0.1, publishes its
        // interfaces' addresses; with softroce_lo there, it would publish
        // 127.0.0.1 (softroce_lo's), which the other host cannot reach.
        if have("fi_pingpong_netns", &["fi_pingpong"]) {
            let only = |i: usize| format!("SOFTROCE_DEVICES=link={}", h.addr[i]);
            let (only_a, only_b) = (only(0), only(1));
            for (prov, ep) in [("verbs", "msg"), ("verbs;ofi_rxm", "rdm")] {
                let base = ["FI_UNIVERSE_SIZE=16", "fi_pingpong", "-p", prov, "-e", ep, "-I", "20"];
                let server: Vec<&str> = ["env", &only_b].into_iter().chain(base).chain(["-B", "9228"]).collect();
                let client: Vec<&str> = ["env", &only_a].into_iter().chain(base).chain(["-P", "9228", srv]).collect();
                let (s, c) =
                    server_then_client((b, &server), (a, &client), |c| c.stderr.contains("Connection refused"));
                for d in [&s, &c] {
                    check_fi_pingpong(d, prov, ep);
                }
            }
        }
    });
}

/// Drops `pct` percent of the RoCE packets that carry data (UDP port 4791,
/// longer than an ACK) arriving in each of the hosts' namespaces (nft
/// `numgen random`), counted, one wire packet at a time: the link's
/// segmentation offloads and GRO are off, so a GSO send of several
/// packets reaches the rule as those packets (with them on, the rule saw
/// and dropped whole sends). The TCP of the tools' own set-up is spared,
/// and so are ACKs: rdma-core's ping-pongs exit without waiting for each
/// other, so the ACK of the last message, lost after its receiver exited,
/// fails the sender's last WR with RETRY_EXC_ERR (nobody is left to answer
/// its retries), on softroce as on rxe, whatever the transport does.
fn lose_roce_packets(h: &TwoHosts, pct: u32) {
    for ns in &h.ns {
        let off = ["tso", "off", "gso", "off", "gro", "off", "tx-udp-segmentation", "off"];
        let o = Command::new("ip").args(["netns", "exec", ns, "ethtool", "-K", &h.iface]).args(off).output();
        assert!(o.as_ref().is_ok_and(|o| o.status.success()), "ethtool -K in {ns} (.ci/run installs ethtool): {o:?}");
        let rules = format!(
            "table inet srloss {{\n chain input {{ type filter hook input priority 0; policy accept;\n  \
             udp dport 4791 udp length > 100 counter\n  \
             udp dport 4791 udp length > 100 numgen random mod 100 < {pct} counter drop\n }}\n}}\n"
        );
        let mut c = Command::new("ip")
            .args(["netns", "exec", ns, "nft", "-f", "-"])
            .stdin(Stdio::piped())
            .spawn()
            .expect("nft runs");
        c.stdin.take().unwrap().write_all(rules.as_bytes()).unwrap();
        assert!(c.wait().unwrap().success(), "nft in {ns}");
    }
}

/// The RoCE data packets `lose_roce_packets`' rules in namespace `ns` saw
/// and dropped so far.
fn roce_packets_seen_and_lost(ns: &str) -> (u64, u64) {
    let o = Command::new("ip").args(["netns", "exec", ns, "nft", "list", "table", "inet", "srloss"]).output().unwrap();
    let out = String::from_utf8_lossy(&o.stdout);
    let words: Vec<&str> = out.split_whitespace().collect();
    let counts: Vec<u64> = words.windows(2).filter(|w| w[0] == "packets").filter_map(|w| w[1].parse().ok()).collect();
    match counts[..] {
        [seen, lost] => (seen, lost),
        _ => panic!("no counters in\n{out}"),
    }
}

/// rdma-core's RC ping-pongs with their default QP attributes (timeout 14,
/// retry_cnt 7) across a link that loses 5% of the RoCE data packets each way:
/// every round trip completes, no WR fails with RETRY_EXC_ERR (the loss
/// recovery of docs/engine.md: a lost packet of a ping-pong is a lost tail,
/// probed after two round trips).
#[test]
fn rc_pingpongs_complete_across_a_link_losing_five_percent() {
    if !have("pingpong_lossy", &["ibv_rc_pingpong", "ibv_srq_pingpong", "nft"]) {
        return;
    }
    let Some(h) = TwoHosts::new("loss") else { return };
    lose_roce_packets(&h, 5);
    let srv = h.addr[1];
    for (tool, qps, extra) in [("ibv_rc_pingpong", 1, &[][..]), ("ibv_srq_pingpong", 4, &["-q", "4"][..])] {
        let server: Vec<&str> =
            [tool, "-g", "1", "-s", "4096", "-p", "18515"].into_iter().chain(extra.iter().copied()).collect();
        let client: Vec<&str> = server.iter().copied().chain([srv]).collect();
        let (s, c) = shared(|| {
            server_then_client((Some(&h.ns[1]), &server), (Some(&h.ns[0]), &client), |c| {
                c.stderr.contains("Couldn't connect")
            })
        });
        for (d, mine, theirs) in [(&s, h.addr[1], h.addr[0]), (&c, h.addr[0], h.addr[1])] {
            let p = parse_pingpong(d);
            assert_eq!((p.bytes, p.iters), (2 * 4096 * 1000, 1000), "{tool}: {p:?}\n{}", d.report());
            let (mine, theirs) = (format!("::ffff:{mine}"), format!("::ffff:{theirs}"));
            assert!(p.local_gids.len() == qps && p.local_gids.iter().all(|g| *g == mine), "{p:?}\n{}", d.report());
            assert!(p.remote_gids.len() == qps && p.remote_gids.iter().all(|g| *g == theirs), "{p:?}\n{}", d.report());
            assert!(!d.stderr.contains("Failed status"), "{tool}: a WR failed\n{}", d.report());
            println!("{tool} at 5% loss: {} usec/iter", p.usec_per_iter);
        }
    }
    let ((s0, l0), (s1, l1)) = (roce_packets_seen_and_lost(&h.ns[0]), roce_packets_seen_and_lost(&h.ns[1]));
    let (seen, lost) = (s0 + s1, l0 + l1);
    // Per wire packet: each of the 2 x 2,000 messages (1,000 of each tool
    // each way) is 4 packets of RoCE MTU 1024, the rule saw at least those
    // (with retransmissions), not the ~4,000 GSO sends, and dropped about 5%.
    assert!(seen >= 16_000, "the rule saw {seen} RoCE data packets: sends, not wire packets?");
    assert!((3..=7).contains(&(lost * 100 / seen)), "{lost} of {seen} RoCE data packets lost");
    println!("{lost} of {seen} RoCE data packets lost on the way");
}

/// GID 0, the interface's link-local IPv6 address, reaches the peer as
/// with kernel rxe: `ibv_rc_pingpong -g 0` and `ibv_ud_pingpong -g 0`
/// between two network namespaces (each device receives on every address
/// of its interface), and libfabric's verbs dgram endpoint with its
/// default GID index (0) across the link.
#[test]
fn pingpongs_over_gid_0_the_link_local_address_between_two_namespaces() {
    if !have("pingpong_gid0", &["ibv_rc_pingpong", "ibv_ud_pingpong"]) {
        return;
    }
    let Some(h) = TwoHosts::new("gid0") else { return };
    // The link-local addresses must be past duplicate address detection
    // (about a second after the link came up) before a device can bind them.
    let deadline = Instant::now() + Duration::from_secs(10);
    for ns in &h.ns {
        loop {
            let o = Command::new("ip").args(["-n", ns, "-6", "addr", "show", "dev", &h.iface]).output().unwrap();
            let out = String::from_utf8_lossy(&o.stdout).into_owned();
            if out.contains("fe80") && !out.contains("tentative") {
                break;
            }
            assert!(Instant::now() < deadline, "no link-local address in {ns}: {out}");
            std::thread::sleep(Duration::from_millis(100));
        }
    }
    let srv = h.addr[1];
    for (tool, size) in [("ibv_rc_pingpong", "4096"), ("ibv_ud_pingpong", "1024")] {
        let server = [tool, "-g", "0", "-s", size, "-n", "200", "-p", "18515"];
        let client: Vec<&str> = server.iter().copied().chain([srv]).collect();
        let (s, c) = shared(|| {
            server_then_client((Some(&h.ns[1]), &server), (Some(&h.ns[0]), &client), |c| {
                c.stderr.contains("Couldn't connect")
            })
        });
        let size: u64 = size.parse().unwrap();
        for d in [&s, &c] {
            let p = parse_pingpong(d);
            assert_eq!((p.bytes, p.iters), (2 * size * 200, 200), "{tool}: {p:?}\n{}", d.report());
            let link_local = |g: &String| g.starts_with("fe80:");
            assert!(p.local_gids.iter().chain(&p.remote_gids).all(link_local), "{p:?}\n{}", d.report());
            assert!(!p.local_gids.is_empty() && p.local_gids != p.remote_gids, "{p:?}\n{}", d.report());
            println!("{tool} -g 0 across the link: {} usec/iter", p.usec_per_iter);
        }
    }
    // libfabric's verbs dgram endpoint addresses by GID 0 unless told.
    if have("fi_pingpong_gid0", &["fi_pingpong"]) {
        let only = |i: usize| format!("SOFTROCE_DEVICES=link={}", h.addr[i]);
        let (only_a, only_b) = (only(0), only(1));
        let base = ["FI_UNIVERSE_SIZE=16", "fi_pingpong", "-p", "verbs", "-e", "dgram", "-I", "20"];
        let server: Vec<&str> = ["env", &only_b].into_iter().chain(base).chain(["-B", "9229"]).collect();
        let client: Vec<&str> = ["env", &only_a].into_iter().chain(base).chain(["-P", "9229", srv]).collect();
        let (s, c) = shared(|| {
            server_then_client((Some(&h.ns[1]), &server), (Some(&h.ns[0]), &client), |c| {
                c.stderr.contains("Connection refused")
            })
        });
        for d in [&s, &c] {
            check_fi_pingpong(d, "verbs", "dgram");
        }
    }
}

/// Only the rxm teardown crash of libfabric 1.17 passes for a success:
/// a crash elsewhere, or of another provider, does not.
#[test]
fn only_libfabrics_rxm_teardown_crash_is_taken_for_its_own() {
    use std::os::unix::process::ExitStatusExt;
    let crash = |frame: &str| {
        format!(
            "\nfi_pingpong:31464 terminated with signal 11 at PC=7fb059a3c882 SP=7fffcfd30a60.  Backtrace:\n{frame}\n\
             /lib/x86_64-linux-gnu/libfabric.so.1(+0xb8cae)[0x7fb059a3dcae]\nfi_pingpong(+0x57ff)[0x556a2bbc17ff]\n"
        )
    };
    let done = |what: &str, code: i32, stderr: String| Done {
        what: what.into(),
        status: Some(ExitStatus::from_raw(code << 8)),
        stdout: String::new(),
        stderr,
    };
    let rxm = "env FI_VERBS_GID_IDX=1 fi_pingpong -p verbs;ofi_rxm -e rdm -I 20 -B 40299";
    let in_libfabric = "/lib/x86_64-linux-gnu/libfabric.so.1(+0xb7882)[0x7fb059a3c882]";
    assert!(done(rxm, 1, crash(in_libfabric)).ok_or_rxm_teardown_crash());
    assert!(done(rxm, 0, String::new()).ok_or_rxm_teardown_crash());
    assert!(!done(rxm, 1, String::new()).ok_or_rxm_teardown_crash(), "a plain failure");
    assert!(!done(rxm, 1, crash("fi_pingpong(+0x57ff)[0x556a2bbc17ff]")).ok_or_rxm_teardown_crash());
    let msg = "env fi_pingpong -p verbs -e msg -I 20 -B 40299";
    assert!(!done(msg, 1, crash(in_libfabric)).ok_or_rxm_teardown_crash(), "not rxm");
}
