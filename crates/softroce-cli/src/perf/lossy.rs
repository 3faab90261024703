//! `softroce perf-lossy`: goodput on a lossy network, softroce against TCP
//! on the same path in the same run, with loss, reordering and ECN marks
//! applied to single wire packets.
//!
//! Three network namespaces are two hosts and a router between them: A -
//! R - B, joined by two veth pairs, R forwarding. Every veth end has its
//! segmentation offloads and GRO off (`ethtool -K ... tso off gso off gro
//! off tx-udp-segmentation off`), so the senders' kernels cut softroce's
//! UDP GSO batches and TCP's segments into wire packets before they leave
//! and R forwards them one by one: with the offloads a veth has by
//! default, a 64 KiB GSO batch crosses whole, and a rule that drops "1%
//! of packets" drops 1% of batches (docs/engine.md). R impairs what it
//! forwards, at the kernel's speed: an nftables rule in its forward chain
//! drops a random share of the UDP and TCP packets (`numgen random`), for
//! reordering sends a random share into a slow HTB class of R's output
//! queue, where they wait while later packets overtake them (this kernel
//! has no netem), and for the ECN runs marks a share of the ECN-capable
//! packets CE (as a congested queue with ECN does). Named nftables
//! counters count what R saw, dropped, marked and held back; each row
//! prints them beside the packets the two ends sent (softroce's
//! `sent_pkts`, TCP's `OutSegs`), which shows the rule worked per packet.
//! For each MTU (1500 and 9000 by default; RoCE MTU 1024 and 4096) and
//! loss rate, with and without reordering, `softroce perf write-bw` (its
//! default QP attributes) and a TCP stream each run for the same time,
//! taking turns. TCP negotiates ECN (`net.ipv4.tcp_ecn=1` on both hosts);
//! softroce's receiver answers marks with CNPs, which the ECN table counts.
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
    /// Loss rates in percent per wire packet, each applied to both directions.
    #[arg(long, value_delimiter = ',', default_value = "0,0.1,1,2,5")]
    loss: Vec<f64>,
    /// Interface MTUs of the path (RoCE's MTU follows: 1024 at 1500, 4096 at 9000).
    #[arg(long, value_delimiter = ',', default_value = "1500,9000")]
    mtu: Vec<u32>,
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
    /// softroce's ends offer each other the wide MTU (`perf --wide-mtu`:
    /// packets as large as the link carries, 1,436 bytes at MTU 1500, not
    /// IBTA's 1,024) instead of the largest IBTA path MTU.
    #[arg(long)]
    wide_mtu: bool,
    /// One-second runs at MTU 1500 and 0, 1 and 5% loss (a quick check, as CI runs it).
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

/// The hosts' addresses, each on its own link to R.
const ADDR_A: Ipv4Addr = Ipv4Addr::new(10, 251, 1, 1);
const ADDR_B: Ipv4Addr = Ipv4Addr::new(10, 251, 2, 1);
/// R's address on each link: the hosts' gateway.
const GW_A: Ipv4Addr = Ipv4Addr::new(10, 251, 1, 254);
const GW_B: Ipv4Addr = Ipv4Addr::new(10, 251, 2, 254);
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
#[derive(Debug, Clone, Copy, PartialEq)]
struct Impairment {
    loss_pct: f64,
    reorder_pct: f64,
    mark_pct: f64,
}

/// One softroce run: the client's goodput, the RoCE packets both ends
/// sent, and the CNPs the server sent and the client handled.
struct SoftroceRun {
    mib_s: f64,
    /// The payload of a packet (the banner's `Mtu`).
    mtu: usize,
    sent_pkts: u64,
    cnps: (u64, u64),
    /// How the ends recovered: A's (requester's) and B's (responder's)
    /// counters named in [`RECOVERY_A`] and [`RECOVERY_B`].
    recovery: Vec<u64>,
}

/// The requester's loss-recovery counters a row's footnote sums.
const RECOVERY_A: [(&str, &str); 5] = [
    ("rcvd_seq_err", "seq NAKs"),
    ("completer_retry_err", "retries"),
    ("hole_resends", "holes resent"),
    ("resends_skipped", "rewinds overtaken"),
    ("tail_probes", "probes"),
];
/// The responder's.
const RECOVERY_B: [(&str, &str); 3] =
    [("reorder_kept", "kept ahead of a gap"), ("reorder_full", "dropped ahead"), ("duplicate_request", "duplicates")];

/// What R's rules counted in one run, by protocol: packets forwarded to
/// the rules, dropped, marked CE, held back.
#[derive(Debug, Default, Clone, Copy)]
struct RouterCounts {
    seen: u64,
    dropped: u64,
    marked: u64,
    held: u64,
}

/// The target ratio for a loss rate (issue: goodput under real loss).
fn target(loss_pct: f64) -> f64 {
    match loss_pct {
        l if l >= 5.0 => 0.7,
        l if l >= 1.0 => 0.9,
        _ => 1.0,
    }
}

fn run_bench(args: &LossyArgs) -> Result<(), PerfError> {
    let (losses, mtus, secs) = if args.quick {
        (vec![0.0, 1.0, 5.0], vec![1500], 1)
    } else {
        (args.loss.clone(), args.mtu.clone(), args.duration)
    };
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
    if mtus.is_empty() || mtus.iter().any(|m| !(1280..=9000).contains(m)) {
        return Err(PerfError::Usage("--mtu takes MTUs in 1280..=9000".into()));
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
        " softroce perf write-bw -s {} against a TCP stream, {secs} s each, host A to host B through router R",
        args.size
    );
    println!(" (veths without segmentation offloads or GRO: R's nftables rules drop, mark and, by a slow HTB");
    println!(" class, reorder single wire packets, both directions; R's counters beside what the ends sent)");
    if let Some(b) = &args.softroce_bin {
        println!(" softroce measured: {}", b.display());
    }
    println!("{RULE}");
    println!(
        " {:>5} {:>6} {:>7} {:>16} {:>11} {:>7}  {:>9} {:>9} {:>7}  {:>9} {:>9} {:>7}   target",
        "mtu",
        "loss",
        "reorder",
        "softroce[MiB/s]",
        "TCP[MiB/s]",
        "ratio",
        "RoCE sent",
        "R saw",
        "dropped",
        "TCP sent",
        "R saw",
        "dropped"
    );
    // Each figure's median over the rounds, and R's and the ends' counts
    // summed over them.
    type Outcome = (f64, f64, Vec<SoftroceRun>, u64, RouterCounts, RouterCounts, Option<String>);
    let run = |imp: Impairment| -> Result<Outcome, PerfError> {
        hosts.impair(imp)?;
        let (mut ours, mut tcp, mut failure) = (Vec::new(), Vec::new(), None);
        let (mut udp_counts, mut tcp_counts, mut tcp_sent) = (RouterCounts::default(), RouterCounts::default(), 0);
        for r in 0..args.rounds {
            // Alternate who goes first, so a drift in the machine's speed favours neither.
            for first in [r % 2 == 0, r % 2 != 0] {
                hosts.reset_counters()?;
                if first {
                    match hosts.softroce(&measured, args.size, secs, args.wide_mtu) {
                        Ok(v) => ours.push(v),
                        Err(e) => failure = Some(e),
                    }
                    udp_counts = udp_counts.add(hosts.counts("udp")?);
                } else {
                    let before = hosts.tcp_segments_sent()?;
                    tcp.push(hosts.tcp(&exe, args.size, secs)?);
                    tcp_sent += hosts.tcp_segments_sent()?.saturating_sub(before);
                    tcp_counts = tcp_counts.add(hosts.counts("tcp")?);
                }
            }
        }
        let goodputs: Vec<f64> = ours.iter().map(|r| r.mib_s).collect();
        Ok((median(&goodputs), median(&tcp), ours, tcp_sent, udp_counts, tcp_counts, failure))
    };
    for &mtu in &mtus {
        hosts.set_mtu(mtu)?;
        for &imp in &settings {
            let (a, b, ours, tcp_sent, udp, tcpc, failure) = run(imp)?;
            let ratio = judged_ratio(a, b, false);
            let verdict = match failure {
                Some(e) => format!("FAILED: {e}"),
                None => verdict(ratio, target(imp.loss_pct), false),
            };
            let sent: u64 = ours.iter().map(|r| r.sent_pkts).sum();
            println!(
                " {mtu:>5} {:>5}% {:>6}% {a:>16.1} {b:>11.1} {ratio:>6.3}x  {sent:>9} {:>9} {:>7}  {tcp_sent:>9} {:>9} {:>7}   {verdict}",
                imp.loss_pct, imp.reorder_pct, udp.seen, udp.dropped, tcpc.seen, tcpc.dropped
            );
            if let Some(m) = ours.first().map(|r| r.mtu).filter(|_| imp == settings[0]) {
                println!("   (softroce's packets carry up to {m} bytes of payload)");
            }
            if imp.reorder_pct > 0.0 {
                println!("   (held back: {} RoCE packets, {} TCP segments)", udp.held, tcpc.held);
            }
            if imp.loss_pct > 0.0 || imp.reorder_pct > 0.0 {
                let sum = |i: usize| ours.iter().map(|r| r.recovery.get(i).copied().unwrap_or(0)).sum::<u64>();
                let names = RECOVERY_A.iter().chain(&RECOVERY_B).map(|(_, n)| *n);
                let parts: Vec<String> = names.enumerate().map(|(i, n)| format!("{n} {}", sum(i))).collect();
                let (a, b) = (parts[..RECOVERY_A.len()].join(", "), parts[RECOVERY_A.len()..].join(", "));
                println!("   (A: {a}; B: {b})");
            }
        }
        if args.marks > 0.0 {
            println!(
                " {:>5} {:>9} {:>16} {:>11} {:>7}  {:>9} {:>9} {:>7}  {:>9} {:>9}",
                "mtu",
                "marked",
                "softroce[MiB/s]",
                "TCP[MiB/s]",
                "ratio",
                "RoCE sent",
                "R saw",
                "CE",
                "CNPs sent",
                "handled"
            );
            let (a, b, ours, _, udp, _, failure) =
                run(Impairment { loss_pct: 0.0, reorder_pct: 0.0, mark_pct: args.marks })?;
            let ratio = if b > 0.0 { a / b } else { 0.0 };
            let (sent_cnps, handled) = ours.iter().map(|r| r.cnps).fold((0, 0), |(s, h), (a, b)| (s + a, h + b));
            let sent: u64 = ours.iter().map(|r| r.sent_pkts).sum();
            let verdict = failure.map(|e| format!("   FAILED: {e}")).unwrap_or_default();
            println!(
                " {mtu:>5} {:>6}% CE {a:>16.1} {b:>11.1} {ratio:>6.2}x  {sent:>9} {:>9} {:>7}  {sent_cnps:>9} {handled:>9}{verdict}",
                args.marks, udp.seen, udp.marked
            );
        }
        println!("{RULE}");
    }
    Ok(())
}

impl RouterCounts {
    fn add(self, o: RouterCounts) -> RouterCounts {
        RouterCounts {
            seen: self.seen + o.seen,
            dropped: self.dropped + o.dropped,
            marked: self.marked + o.marked,
            held: self.held + o.held,
        }
    }
}

/// Host A, router R and host B (namespaces) and their two links, deleted
/// on drop.
struct Hosts {
    /// A, R, B.
    ns: [String; 3],
    /// A's end, R's end toward A, R's end toward B, B's end.
    dev: [String; 4],
}

impl Hosts {
    fn new() -> Result<Hosts, PerfError> {
        let id = std::process::id();
        let short = id % 100_000;
        let h = Hosts {
            ns: [format!("srlossy{id}a"), format!("srlossy{id}r"), format!("srlossy{id}b")],
            dev: [format!("srl{short}a"), format!("srl{short}ra"), format!("srl{short}rb"), format!("srl{short}b")],
        };
        for ns in &h.ns {
            ip(&["netns", "add", ns]).map_err(|e| PerfError::Usage(format!("{e} (perf-lossy needs root)")))?;
        }
        let [a, r, b] = &h.ns;
        ip(&["link", "add", &h.dev[0], "netns", a, "type", "veth", "peer", "name", &h.dev[1], "netns", r])?;
        ip(&["link", "add", &h.dev[3], "netns", b, "type", "veth", "peer", "name", &h.dev[2], "netns", r])?;
        let ends = [(a, &h.dev[0], ADDR_A), (r, &h.dev[1], GW_A), (r, &h.dev[2], GW_B), (b, &h.dev[3], ADDR_B)];
        for (ns, dev, addr) in ends {
            ip(&["-n", ns, "addr", "add", &format!("{addr}/24"), "dev", dev])?;
            // Wire packets leave and arrive one by one (see the module docs).
            tool(
                "ip",
                &[
                    "netns",
                    "exec",
                    ns,
                    "ethtool",
                    "-K",
                    dev,
                    "tso",
                    "off",
                    "gso",
                    "off",
                    "gro",
                    "off",
                    "tx-udp-segmentation",
                    "off",
                ],
                None,
            )
            .map_err(|e| PerfError::Usage(format!("{e} (perf-lossy needs ethtool)")))?;
            ip(&["-n", ns, "link", "set", dev, "up"])?;
        }
        for ns in &h.ns {
            ip(&["-n", ns, "link", "set", "lo", "up"])?;
        }
        ip(&["-n", a, "route", "add", "default", "via", &GW_A.to_string()])?;
        ip(&["-n", b, "route", "add", "default", "via", &GW_B.to_string()])?;
        tool("ip", &["netns", "exec", r, "sysctl", "-q", "-w", "net.ipv4.ip_forward=1"], None)?;
        for ns in [a, b] {
            // TCP negotiates ECN, so that both react to the CE marks.
            tool("ip", &["netns", "exec", ns, "sysctl", "-q", "-w", "net.ipv4.tcp_ecn=1"], None)?;
        }
        for dev in &h.dev[1..3] {
            // R's output goes through HTB: class 1 at line rate for
            // everything, class 2 slow for the packets a reordering rule picks.
            tool("tc", &["-n", r, "qdisc", "add", "dev", dev, "root", "handle", "1:", "htb", "default", "1"], None)?;
            for (class, rate) in [("1:1", "100gbit"), ("1:2", "50mbit")] {
                tool(
                    "tc",
                    &["-n", r, "class", "add", "dev", dev, "parent", "1:", "classid", class, "htb", "rate", rate],
                    None,
                )?;
            }
        }
        Ok(h)
    }

    /// Sets every link's MTU.
    fn set_mtu(&self, mtu: u32) -> Result<(), PerfError> {
        let [a, r, b] = &self.ns;
        for (ns, dev) in [(a, &self.dev[0]), (r, &self.dev[1]), (r, &self.dev[2]), (b, &self.dev[3])] {
            ip(&["-n", ns, "link", "set", dev, "mtu", &mtu.to_string()])?;
        }
        Ok(())
    }

    /// Sets R's rules (replacing the last): loss, CE marks and reordering
    /// of forwarded UDP and TCP packets, each counted by protocol.
    fn impair(&self, imp: Impairment) -> Result<(), PerfError> {
        // numgen's range: a share in units of 1/100000.
        let share = |pct: f64| (pct * 1000.0).round() as u32;
        let r = &self.ns[1];
        let _ = tool("ip", &["netns", "exec", r, "nft", "delete", "table", "inet", "srlossy"], None);
        let mut rules = String::from("table inet srlossy {\n");
        for p in ["udp", "tcp"] {
            for c in ["seen", "dropped", "marked", "held"] {
                rules.push_str(&format!("counter {p}_{c} {{}}\n"));
            }
        }
        rules.push_str("chain forward { type filter hook forward priority 0; policy accept;\n");
        for p in ["udp", "tcp"] {
            rules.push_str(&format!(
                "meta l4proto {p} counter name \"{p}_seen\"\n\
                 meta l4proto {p} numgen random mod 100000 < {loss} counter name \"{p}_dropped\" drop\n\
                 meta l4proto {p} ip ecn != not-ect numgen random mod 100000 < {mark} counter name \"{p}_marked\" ip ecn set ce\n\
                 meta l4proto {p} numgen random mod 100000 < {reorder} counter name \"{p}_held\" meta priority set 1:2\n",
                loss = share(imp.loss_pct),
                mark = share(imp.mark_pct),
                reorder = share(imp.reorder_pct),
            ));
        }
        rules.push_str("}\n}\n");
        tool("ip", &["netns", "exec", r, "nft", "-f", "-"], Some(&rules))
    }

    /// Zeroes R's counters.
    fn reset_counters(&self) -> Result<(), PerfError> {
        tool("ip", &["netns", "exec", &self.ns[1], "nft", "reset", "counters", "table", "inet", "srlossy"], None)
    }

    /// R's counts for protocol `p` ("udp" or "tcp") since the last reset.
    fn counts(&self, p: &str) -> Result<RouterCounts, PerfError> {
        let o = Command::new("ip")
            .args(["netns", "exec", &self.ns[1], "nft", "list", "counters", "table", "inet", "srlossy"])
            .output()?;
        let all = counter_packets(&String::from_utf8_lossy(&o.stdout));
        let get = |c: &str| {
            let name = format!("{p}_{c}");
            all.iter().find(|(n, _)| *n == name).map(|(_, v)| *v).ok_or_else(|| {
                PerfError::Usage(format!("no counter {name} in R's table: {}", String::from_utf8_lossy(&o.stderr)))
            })
        };
        Ok(RouterCounts { seen: get("seen")?, dropped: get("dropped")?, marked: get("marked")?, held: get("held")? })
    }

    /// TCP segments A and B have sent so far: `OutSegs` (which leaves out
    /// retransmissions) and `RetransSegs` of their `/proc/net/snmp`.
    fn tcp_segments_sent(&self) -> Result<u64, PerfError> {
        let mut total = 0;
        for ns in [&self.ns[0], &self.ns[2]] {
            let o = Command::new("ip").args(["netns", "exec", ns, "cat", "/proc/net/snmp"]).output()?;
            let text = String::from_utf8_lossy(&o.stdout);
            let mut tcp = text.lines().filter(|l| l.starts_with("Tcp:"));
            let (names, values) = (tcp.next().unwrap_or(""), tcp.next().unwrap_or(""));
            for field in ["OutSegs", "RetransSegs"] {
                let at = names.split_whitespace().position(|n| n == field);
                total += at
                    .and_then(|i| values.split_whitespace().nth(i)?.parse::<u64>().ok())
                    .ok_or_else(|| PerfError::Usage(format!("no Tcp {field} in {ns}'s /proc/net/snmp")))?;
            }
        }
        Ok(total)
    }

    /// `softroce perf write-bw --stats` from A to B: the client's BW
    /// average (MiB/s), the RoCE packets both sent, the CNPs B sent and A
    /// handled.
    fn softroce(&self, exe: &Path, size: usize, secs: u64, wide: bool) -> Result<SoftroceRun, String> {
        let common = |c: &mut Command| {
            c.args(["perf", "write-bw", "-s", &size.to_string(), "-D", &secs.to_string(), "-p"])
                .arg(PERF_PORT.to_string())
                .arg("--stats")
                .args(wide.then_some("--wide-mtu"))
                .stdin(Stdio::null())
                .stdout(Stdio::piped())
                .stderr(Stdio::piped());
        };
        let mut s = Command::new("ip");
        s.args(["netns", "exec", &self.ns[2]]).arg(exe);
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
        let srv_text = String::from_utf8_lossy(&srv.stdout);
        let row = text
            .lines()
            .skip_while(|l| !l.trim_start().starts_with("#bytes"))
            .skip(1)
            .find(|l| l.trim_start().chars().next().is_some_and(|c| c.is_ascii_digit()))
            .map(|l| l.split_whitespace().map(String::from).collect::<Vec<_>>());
        let counter = |text: &str, name: &str| {
            text.lines().find_map(|l| l.trim().strip_prefix(name)?.trim().parse::<u64>().ok()).unwrap_or(0)
        };
        let sent_pkts = counter(&text, "sent_pkts ") + counter(&srv_text, "sent_pkts ");
        let mtu = text.lines().find_map(|l| {
            l.trim().strip_prefix("Mtu")?.trim().strip_prefix(':')?.trim().strip_suffix("[B]")?.parse().ok()
        });
        let cnps = (counter(&srv_text, "np_cnp_sent"), counter(&text, "rp_cnp_handled"));
        let recovery = RECOVERY_A
            .iter()
            .map(|(n, _)| counter(&text, &format!("{n} ")))
            .chain(RECOVERY_B.iter().map(|(n, _)| counter(&srv_text, &format!("{n} "))))
            .collect();
        match (out.status.success(), row.and_then(|r| r.get(3).and_then(|v| v.parse::<f64>().ok()))) {
            (true, Some(mib_s)) => Ok(SoftroceRun { mib_s, mtu: mtu.unwrap_or(0), sent_pkts, cnps, recovery }),
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
            .args(["netns", "exec", &self.ns[2]])
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

/// The packets of each named counter in `nft list counters` output:
/// `counter NAME {` followed by `packets N bytes M`.
fn counter_packets(text: &str) -> Vec<(String, u64)> {
    let mut out = Vec::new();
    let mut name = None;
    for l in text.lines().map(str::trim) {
        if let Some(n) = l.strip_prefix("counter ").and_then(|r| r.strip_suffix(" {")) {
            name = Some(n.to_string());
        } else if let (Some(n), Some(v)) = (&name, l.strip_prefix("packets ")) {
            if let Some(v) = v.split_whitespace().next().and_then(|v| v.parse().ok()) {
                out.push((n.clone(), v));
            }
            name = None;
        }
    }
    out
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

#[cfg(test)]
mod tests {
    use super::counter_packets;

    #[test]
    fn reads_nfts_named_counters() {
        let text = "table inet srlossy {\n\tcounter udp_seen {\n\t\tpackets 4460001 bytes 4780000000\n\t}\n\
                    \tcounter udp_dropped {\n\t\tpackets 44744 bytes 47960000\n\t}\n}\n";
        assert_eq!(counter_packets(text), [("udp_seen".to_string(), 4460001), ("udp_dropped".to_string(), 44744)]);
    }
}
