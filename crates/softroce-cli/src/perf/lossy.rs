//! `softroce perf-lossy`: goodput on a lossy network, softroce against TCP
//! on the same path in the same run.
//!
//! Two network namespaces joined by a veth pair are the two hosts; the
//! kernel impairs the path at its own speed (well over 1 Gbit/s, unlike a
//! user-space relay): an nftables rule on each side's input drops a random
//! share of the UDP and TCP packets (`numgen random`), and for reordering
//! an output rule sends a random share into a slow HTB class, where they
//! queue while later packets overtake them (this kernel has no netem).
//! For each loss rate, with and without reordering, `softroce perf
//! write-bw` (its default QP attributes) and a TCP stream each run for the
//! same time, taking turns; the table gives both goodputs and the ratio.
//! A second table replaces the drops with ECN marks: the same rule marks a
//! share of the ECN-capable packets CE instead (as a congested queue with
//! ECN does), TCP negotiates ECN (`net.ipv4.tcp_ecn=1` in both namespaces),
//! and softroce's receiver answers the marks with CNPs, which the table
//! counts from `perf --stats`.
//! Needs root (CAP_NET_ADMIN and CAP_SYS_ADMIN for the namespaces).

use std::io::{Read as _, Write as _};
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::path::Path;
use std::process::{Command, ExitCode, Stdio};
use std::time::{Duration, Instant};

use clap::Args;

use super::sharing::median;
use super::{
    PerfError,
    report::{RULE, judged_ratio, verdict},
};

/// `softroce perf-lossy` options.
#[derive(Debug, Args)]
pub struct LossyArgs {
    /// Loss rates in percent, each applied to both directions.
    #[arg(long, value_delimiter = ',', default_value = "0,0.1,1,2,5")]
    loss: Vec<f64>,
    /// Seconds each transfer runs.
    #[arg(short = 'D', long, default_value_t = 3)]
    duration: u64,
    /// Message size of softroce's RDMA WRITEs (and TCP's writes).
    #[arg(short = 's', long, default_value_t = 65536)]
    size: usize,
    /// Percent of packets held back (reordered) in the reordering runs.
    #[arg(long, default_value_t = 1.0)]
    reorder: f64,
    /// Percent of ECN-capable packets marked CE (no loss) in the ECN run; 0: none.
    #[arg(long, default_value_t = 1.0)]
    marks: f64,
    /// Rounds; the table gives each figure's median.
    #[arg(long, default_value_t = 1)]
    rounds: usize,
    /// One-second runs at 0, 1 and 5% loss (a quick check, as CI runs it).
    #[arg(long)]
    quick: bool,
    /// Measure this softroce binary's `perf write-bw` instead of this one's
    /// (to compare two builds on the same path).
    #[arg(long, value_name = "PATH")]
    softroce_bin: Option<std::path::PathBuf>,
    /// Internal: receive one TCP stream on this port and print its goodput.
    #[arg(long, hide = true)]
    tcp_sink: Option<u16>,
    /// Internal: send a TCP stream to this address for `-D` seconds.
    #[arg(long, hide = true)]
    tcp_source: Option<SocketAddr>,
}

/// Where the two hosts are.
const ADDR_A: Ipv4Addr = Ipv4Addr::new(10, 251, 0, 1);
const ADDR_B: Ipv4Addr = Ipv4Addr::new(10, 251, 0, 2);
/// The perf exchange and the TCP stream listen here, inside B's own
/// namespace (nothing else can hold a port there).
const PERF_PORT: u16 = 18515;
const TCP_PORT: u16 = 5201;

/// Runs `softroce perf-lossy`.
pub fn run(args: &LossyArgs) -> ExitCode {
    let r = match (args.tcp_sink, args.tcp_source) {
        (Some(port), _) => tcp_sink(port),
        (None, Some(to)) => tcp_source(to, Duration::from_secs(args.duration), args.size),
        (None, None) => run_bench(args),
    };
    match r {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("softroce perf-lossy: {e}");
            ExitCode::FAILURE
        }
    }
}

/// One path setting.
#[derive(Debug, Clone, Copy)]
struct Impairment {
    loss_pct: f64,
    reorder_pct: f64,
    mark_pct: f64,
}

/// One softroce run: the client's goodput, and with `--stats` the CNPs the
/// server sent and the client handled.
struct SoftroceRun {
    mib_s: f64,
    cnps: Option<(u64, u64)>,
}

fn run_bench(args: &LossyArgs) -> Result<(), PerfError> {
    let (losses, secs) = if args.quick { (vec![0.0, 1.0, 5.0], 1) } else { (args.loss.clone(), args.duration) };
    let pcts = losses.iter().chain([&args.reorder, &args.marks]);
    if pcts.into_iter().any(|l| !(0.0..=50.0).contains(l)) {
        return Err(PerfError::Usage("--loss, --reorder and --marks are percentages in 0..=50".into()));
    }
    if secs == 0 || secs > 600 || args.rounds == 0 || args.rounds > 100 {
        return Err(PerfError::Usage("-D must be 1..=600 seconds and --rounds 1..=100".into()));
    }
    if !(1..=1 << 24).contains(&args.size) {
        return Err(PerfError::Usage("-s must be 1..=16777216".into()));
    }
    let exe = std::env::current_exe()?;
    let measured = args.softroce_bin.clone().unwrap_or_else(|| exe.clone());
    let hosts = Hosts::new()?;
    let mut settings = Vec::new();
    for &l in &losses {
        settings.push(Impairment { loss_pct: l, reorder_pct: 0.0, mark_pct: 0.0 });
        if args.reorder > 0.0 && (!args.quick || l == 1.0) {
            settings.push(Impairment { loss_pct: l, reorder_pct: args.reorder, mark_pct: 0.0 });
        }
    }
    println!("{RULE}");
    println!(
        " softroce perf write-bw -s {} against a TCP stream, {secs} s each, between two network namespaces",
        args.size
    );
    println!(" (veth; loss by nftables on both directions; reordering by a slow HTB class)");
    if let Some(b) = &args.softroce_bin {
        println!(" softroce measured: {}", b.display());
    }
    println!("{RULE}");
    println!(" {:>6} {:>8} {:>18} {:>14} {:>8}   target", "loss", "reorder", "softroce[MiB/s]", "TCP[MiB/s]", "ratio");
    let run = |imp: Impairment| -> Result<(f64, f64, Vec<SoftroceRun>, Option<String>), PerfError> {
        hosts.impair(imp)?;
        let (mut ours, mut tcp, mut failure) = (Vec::new(), Vec::new(), None);
        for r in 0..args.rounds {
            // Alternate who goes first, so a drift in the machine's speed favours neither.
            for first in [r % 2 == 0, r % 2 != 0] {
                if first {
                    match hosts.softroce(&measured, args.size, secs, imp.mark_pct > 0.0) {
                        Ok(v) => ours.push(v),
                        Err(e) => failure = Some(e),
                    }
                } else {
                    tcp.push(hosts.tcp(&exe, args.size, secs)?);
                }
            }
        }
        let goodputs: Vec<f64> = ours.iter().map(|r| r.mib_s).collect();
        Ok((median(&goodputs), median(&tcp), ours, failure))
    };
    for imp in settings {
        let (a, b, _, failure) = run(imp)?;
        let ratio = judged_ratio(a, b, false);
        let target = match imp.loss_pct {
            l if l >= 5.0 => Some(0.5),
            l if (1.0..2.0).contains(&l) => Some(0.8),
            _ => None,
        };
        let verdict = match (target, &failure) {
            (_, Some(e)) => format!("FAILED: {e}"),
            (Some(t), None) => verdict(ratio, t, false),
            (None, None) => String::new(),
        };
        println!(" {:>5}% {:>7}% {:>18.1} {:>14.1} {:>7.3}x   {verdict}", imp.loss_pct, imp.reorder_pct, a, b, ratio);
    }
    if args.marks > 0.0 {
        println!("{RULE}");
        println!(" no loss; instead nftables marks ECN-capable packets CE on both sides (TCP with ECN)");
        println!(
            " {:>9} {:>18} {:>14} {:>8} {:>12} {:>12}",
            "marked", "softroce[MiB/s]", "TCP[MiB/s]", "ratio", "CNPs sent", "handled"
        );
        let (a, b, ours, failure) = run(Impairment { loss_pct: 0.0, reorder_pct: 0.0, mark_pct: args.marks })?;
        let ratio = if b > 0.0 { a / b } else { 0.0 };
        let (sent, handled) = ours.iter().filter_map(|r| r.cnps).fold((0, 0), |(s, h), (a, b)| (s + a, h + b));
        let verdict = failure.map(|e| format!("   FAILED: {e}")).unwrap_or_default();
        println!(" {:>5}% CE {a:>18.1} {b:>14.1} {ratio:>7.2}x {sent:>12} {handled:>12}{verdict}", args.marks);
    }
    println!("{RULE}");
    Ok(())
}

/// Two namespaces joined by a veth pair, deleted on drop.
struct Hosts {
    ns: [String; 2],
    dev: [String; 2],
}

impl Hosts {
    fn new() -> Result<Hosts, PerfError> {
        let id = std::process::id();
        let h = Hosts {
            ns: [format!("srlossy{id}a"), format!("srlossy{id}b")],
            dev: [format!("srl{}a", id % 100_000), format!("srl{}b", id % 100_000)],
        };
        for ns in &h.ns {
            ip(&["netns", "add", ns]).map_err(|e| PerfError::Usage(format!("{e} (perf-lossy needs root)")))?;
        }
        ip(&[
            "link", "add", &h.dev[0], "netns", &h.ns[0], "type", "veth", "peer", "name", &h.dev[1], "netns", &h.ns[1],
        ])?;
        for (i, addr) in [ADDR_A, ADDR_B].iter().enumerate() {
            let (ns, dev) = (&h.ns[i], &h.dev[i]);
            ip(&["-n", ns, "addr", "add", &format!("{addr}/24"), "dev", dev])?;
            ip(&["-n", ns, "link", "set", dev, "up"])?;
            ip(&["-n", ns, "link", "set", "lo", "up"])?;
            // TCP negotiates ECN, so that both react to the CE marks.
            tool("ip", &["netns", "exec", ns, "sysctl", "-q", "-w", "net.ipv4.tcp_ecn=1"], None)?;
            // Output goes through HTB: class 1 at line rate for everything,
            // class 2 slow for the packets a reordering rule picks.
            tool("tc", &["-n", ns, "qdisc", "add", "dev", dev, "root", "handle", "1:", "htb", "default", "1"], None)?;
            for (class, rate) in [("1:1", "100gbit"), ("1:2", "50mbit")] {
                tool(
                    "tc",
                    &["-n", ns, "class", "add", "dev", dev, "parent", "1:", "classid", class, "htb", "rate", rate],
                    None,
                )?;
            }
        }
        Ok(h)
    }

    /// Sets the loss and reordering rules on both sides (replacing the last).
    fn impair(&self, imp: Impairment) -> Result<(), PerfError> {
        // numgen's range: a share in units of 1/100000.
        let share = |pct: f64| (pct * 1000.0).round() as u32;
        for (i, ns) in self.ns.iter().enumerate() {
            let _ = tool("ip", &["netns", "exec", ns, "nft", "delete", "table", "inet", "srlossy"], None);
            let rules = format!(
                "table inet srlossy {{\n\
                 chain input {{ type filter hook input priority 0; policy accept;\n\
                 iifname \"{dev}\" meta l4proto {{ udp, tcp }} numgen random mod 100000 < {loss} drop\n\
                 iifname \"{dev}\" meta l4proto {{ udp, tcp }} ip ecn != not-ect numgen random mod 100000 < {mark} ip ecn set ce\n}}\n\
                 chain output {{ type filter hook output priority 0; policy accept;\n\
                 oifname \"{dev}\" meta l4proto {{ udp, tcp }} numgen random mod 100000 < {reorder} meta priority set 1:2\n}}\n}}\n",
                dev = self.dev[i],
                loss = share(imp.loss_pct),
                reorder = share(imp.reorder_pct),
                mark = share(imp.mark_pct),
            );
            tool("ip", &["netns", "exec", ns, "nft", "-f", "-"], Some(&rules))?;
        }
        Ok(())
    }

    /// `softroce perf write-bw` from A to B: the client's BW average, MiB/s,
    /// and with `stats` the CNPs B sent and A handled.
    fn softroce(&self, exe: &Path, size: usize, secs: u64, stats: bool) -> Result<SoftroceRun, String> {
        let common = |c: &mut Command| {
            c.args(["perf", "write-bw", "-s", &size.to_string(), "-D", &secs.to_string(), "-p"])
                .arg(PERF_PORT.to_string())
                .args(stats.then_some("--stats"))
                .stdin(Stdio::null())
                .stdout(Stdio::piped())
                .stderr(Stdio::piped());
        };
        let mut s = Command::new("ip");
        s.args(["netns", "exec", &self.ns[1]]).arg(exe);
        common(&mut s);
        let server = s.spawn().map_err(|e| e.to_string())?;
        let mut c = Command::new("ip");
        c.args(["netns", "exec", &self.ns[0]]).arg(exe);
        common(&mut c);
        c.arg(ADDR_B.to_string());
        let client = c.spawn().map_err(|e| e.to_string())?;
        let out = client.wait_with_output().map_err(|e| e.to_string())?;
        let srv = server.wait_with_output().map_err(|e| e.to_string())?;
        let text = String::from_utf8_lossy(&out.stdout);
        let row = text
            .lines()
            .skip_while(|l| !l.trim_start().starts_with("#bytes"))
            .skip(1)
            .find(|l| l.trim_start().chars().next().is_some_and(|c| c.is_ascii_digit()))
            .map(|l| l.split_whitespace().map(String::from).collect::<Vec<_>>());
        let counter = |text: &str, name: &str| {
            text.lines().find_map(|l| l.trim().strip_prefix(name)?.trim().parse::<u64>().ok()).unwrap_or(0)
        };
        let cnps = stats
            .then(|| (counter(&String::from_utf8_lossy(&srv.stdout), "np_cnp_sent"), counter(&text, "rp_cnp_handled")));
        match (out.status.success(), row.and_then(|r| r.get(3).and_then(|v| v.parse::<f64>().ok()))) {
            (true, Some(mib_s)) => Ok(SoftroceRun { mib_s, cnps }),
            _ => Err(format!(
                "client {}: {}; server {}: {}",
                out.status,
                String::from_utf8_lossy(&out.stderr).trim(),
                srv.status,
                String::from_utf8_lossy(&srv.stderr).trim()
            )),
        }
    }

    /// A TCP stream from A to B: the receiver's goodput, MiB/s.
    fn tcp(&self, exe: &Path, size: usize, secs: u64) -> Result<f64, PerfError> {
        let sink = Command::new("ip")
            .args(["netns", "exec", &self.ns[1]])
            .arg(exe)
            .args(["perf-lossy", "--tcp-sink", &TCP_PORT.to_string()])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()?;
        let source = Command::new("ip")
            .args(["netns", "exec", &self.ns[0]])
            .arg(exe)
            .args(["perf-lossy", "-D", &secs.to_string(), "-s", &size.to_string(), "--tcp-source"])
            .arg(format!("{ADDR_B}:{TCP_PORT}"))
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()?;
        let src = source.wait_with_output()?;
        let out = sink.wait_with_output()?;
        let text = String::from_utf8_lossy(&out.stdout);
        let v = text.split_whitespace().next().and_then(|v| v.parse::<f64>().ok());
        match (src.status.success() && out.status.success(), v) {
            (true, Some(v)) => Ok(v),
            _ => Err(PerfError::Usage(format!(
                "TCP stream: source {} ({}), sink {} ({})",
                src.status,
                String::from_utf8_lossy(&src.stderr).trim(),
                out.status,
                String::from_utf8_lossy(&out.stderr).trim()
            ))),
        }
    }
}

impl Drop for Hosts {
    fn drop(&mut self) {
        for ns in &self.ns {
            let _ = ip(&["netns", "del", ns]);
        }
    }
}

fn ip(args: &[&str]) -> Result<(), PerfError> {
    tool("ip", args, None)
}

/// Runs `prog args`, with `input` on its standard input; fails with its
/// error output.
fn tool(prog: &str, args: &[&str], input: Option<&str>) -> Result<(), PerfError> {
    let mut c = Command::new(prog);
    c.args(args).stdin(if input.is_some() { Stdio::piped() } else { Stdio::null() });
    c.stdout(Stdio::null()).stderr(Stdio::piped());
    let mut child = c.spawn().map_err(|e| PerfError::Usage(format!("{prog}: {e}")))?;
    if let Some(text) = input
        && let Some(mut stdin) = child.stdin.take()
    {
        stdin.write_all(text.as_bytes())?;
    }
    let out = child.wait_with_output()?;
    if out.status.success() {
        Ok(())
    } else {
        Err(PerfError::Usage(format!("{prog} {}: {}", args.join(" "), String::from_utf8_lossy(&out.stderr).trim())))
    }
}

/// Accepts one stream and prints `MiB/s bytes seconds`, timed from its
/// first byte to its end.
fn tcp_sink(port: u16) -> Result<(), PerfError> {
    let l = TcpListener::bind(("0.0.0.0", port))?;
    let (mut s, _) = l.accept()?;
    let mut buf = vec![0u8; 1 << 20];
    let mut first = None;
    let mut bytes = 0u64;
    loop {
        let n = s.read(&mut buf)?;
        if n == 0 {
            break;
        }
        first.get_or_insert_with(Instant::now);
        bytes += n as u64;
    }
    let secs = first.map_or(0.0, |t| t.elapsed().as_secs_f64());
    let mib = if secs > 0.0 { bytes as f64 / secs / 1048576.0 } else { 0.0 };
    println!("{mib:.2} {bytes} {secs:.3}");
    Ok(())
}

/// Connects to the sink (retrying while it starts) and writes `size`-byte
/// chunks for `d`.
fn tcp_source(to: SocketAddr, d: Duration, size: usize) -> Result<(), PerfError> {
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut s = loop {
        match TcpStream::connect(to) {
            Ok(s) => break s,
            Err(_) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(20)),
            Err(e) => return Err(e.into()),
        }
    };
    let buf = vec![0x5au8; size.clamp(1, 1 << 24)];
    let end = Instant::now() + d;
    while Instant::now() < end {
        s.write_all(&buf)?;
    }
    s.shutdown(std::net::Shutdown::Write)?;
    // Wait for the sink to take everything (it closes after reading EOF).
    let _ = s.read(&mut [0u8; 1]);
    Ok(())
}
