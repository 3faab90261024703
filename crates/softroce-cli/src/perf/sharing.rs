//! `softroce perf-sharing`: what sharing one device costs. The same two
//! `softroce perf` processes (server and client, as a user starts them)
//! run on one shared device and on two addresses of their own, taking
//! turns in rounds so both meet the same machine; then four pairs (eight
//! processes) on the one device against one pair alone. Prints each
//! figure, the ratio and the target docs/host-sharing.md sets for it.

use std::io::Write as _;
use std::net::TcpListener;
use std::process::{Child, Command, ExitCode, Stdio};

use clap::Args;
use softroce::config::LoopbackLease;

use super::{
    PerfError,
    report::{RULE, judged_ratio, verdict},
};

/// `softroce perf-sharing` options.
#[derive(Debug, Args)]
pub struct SharingArgs {
    /// Rounds; each runs every test once per mode, the modes in turn.
    #[arg(long, default_value_t = 3)]
    rounds: usize,
    /// Seconds each pair runs in the four-pairs test.
    #[arg(short = 'D', long, default_value_t = 3)]
    duration: u64,
    /// A tenth of the iterations and one-second pair runs (a quick check).
    #[arg(long)]
    quick: bool,
}

/// Where the two processes of a pair open their device.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    /// Each on a loopback address of its own (alone on its device).
    Split,
    /// Both on one address: members of one shared device.
    Shared,
}

/// One measurement: which perf test, its options, and what to read off.
struct Case {
    label: &'static str,
    test: &'static str,
    size: usize,
    iters: usize,
    figure: Figure,
    /// The target: at most (latency) or at least (rates) this ratio.
    target: f64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Figure {
    /// t_typical, microseconds (lower is better).
    Typical,
    /// BW average, MiB/s.
    Bandwidth,
    /// Message rate, Mpps.
    MsgRate,
}

impl Figure {
    /// The column of a perftest row holding it.
    fn column(self) -> usize {
        match self {
            Figure::Typical => 4,
            Figure::Bandwidth => 3,
            Figure::MsgRate => 4,
        }
    }

    fn unit(self) -> &'static str {
        match self {
            Figure::Typical => "usec",
            Figure::Bandwidth => "MiB/sec",
            Figure::MsgRate => "Mpps",
        }
    }
}

/// The loopback devices' active MTU (a 65,536-byte interface MTU), which
/// the raw UDP baseline's datagrams follow.
const LOOPBACK_MTU: usize = 4096;

/// Runs `softroce perf-sharing`.
pub fn run(args: &SharingArgs) -> ExitCode {
    match run_inner(args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("softroce perf-sharing: {e}");
            ExitCode::FAILURE
        }
    }
}

fn run_inner(args: &SharingArgs) -> Result<(), PerfError> {
    if args.rounds == 0 || args.rounds > 100 {
        return Err(PerfError::Usage("--rounds must be 1..=100".into()));
    }
    if args.duration == 0 || args.duration > 600 {
        return Err(PerfError::Usage("-D must be 1..=600 seconds".into()));
    }
    let div = if args.quick { 10 } else { 1 };
    let secs = if args.quick { 1 } else { args.duration };
    let cases = [
        Case {
            label: "send-lat 8 B",
            test: "send-lat",
            size: 8,
            iters: 5000 / div,
            figure: Figure::Typical,
            target: 1.1,
        },
        Case {
            label: "write-bw 64 KiB",
            test: "write-bw",
            size: 65536,
            iters: 10000 / div,
            figure: Figure::Bandwidth,
            target: 0.95,
        },
        Case {
            label: "write 8 B msg rate",
            test: "write-bw",
            size: 8,
            iters: 200_000 / div,
            figure: Figure::MsgRate,
            target: 0.9,
        },
    ];
    // Three addresses of this run's own: two for the split pair, one for the shared device.
    let leases = [LoopbackLease::take()?, LoopbackLease::take()?, LoopbackLease::take()?];
    let addr = |i: usize| leases[i].addr().to_string();
    let exe = std::env::current_exe()?;
    println!("{RULE}");
    println!("                    One shared device against two addresses ({} rounds, modes in turn)", args.rounds);
    println!(" two addresses : server on {}, client on {} (each alone on its device)", addr(0), addr(1));
    println!(" shared device : server and client both on {} (one device, two members)", addr(2));
    println!("{RULE}");
    let mut got: Vec<[Vec<f64>; 2]> = cases.iter().map(|_| [Vec::new(), Vec::new()]).collect();
    let mut pairs: [Vec<f64>; 2] = [Vec::new(), Vec::new()];
    // Raw UDP with GSO/GRO (the baseline `perf write-bw --loopback
    // --baseline` prints) moving 64 KiB messages, MiB/s.
    let mut udp: Vec<f64> = Vec::new();
    for r in 0..args.rounds {
        for (c, case) in cases.iter().enumerate() {
            // Alternate which mode goes first, so a drift in the machine's
            // speed within a round favours neither.
            let order = if (r + c) % 2 == 0 { [Mode::Split, Mode::Shared] } else { [Mode::Shared, Mode::Split] };
            for mode in order {
                let (sa, ca) = match mode {
                    Mode::Split => (addr(0), addr(1)),
                    Mode::Shared => (addr(2), addr(2)),
                };
                let extra = ["-s".to_string(), case.size.to_string(), "-n".into(), case.iters.to_string()];
                let rows = run_pairs(&exe, case.test, &extra, &[(sa, ca)])?;
                let v = figure(&rows[0], case.figure)?;
                got[c][usize::from(mode == Mode::Shared)].push(v);
            }
        }
        // Four pairs on the shared device, and one pair alone on it.
        let extra = ["-s".to_string(), "65536".into(), "-D".into(), secs.to_string()];
        let one = run_pairs(&exe, "write-bw", &extra, &[(addr(2), addr(2))])?;
        let one_bw = figure(&one[0], Figure::Bandwidth)?;
        pairs[0].push(one_bw);
        // Raw UDP moves as many messages as the pair did (both figures
        // grow with a run's length: compare like with like).
        let msgs = (one_bw * secs as f64 * 16.0).clamp(1000.0, 400_000.0) as usize;
        udp.push(super::baseline::bw(65536, LOOPBACK_MTU, msgs, 128, true)?.rate() / f64::from(1 << 20));
        let four = run_pairs(&exe, "write-bw", &extra, &vec![(addr(2), addr(2)); 4])?;
        let mut sum = 0.0;
        for row in &four {
            sum += figure(row, Figure::Bandwidth)?;
        }
        pairs[1].push(sum);
        eprint!("\r round {} of {} done   ", r + 1, args.rounds);
        let _ = std::io::stderr().flush();
    }
    eprintln!();
    println!(
        " {:<36} {:>16} {:>16} {:>8}   target",
        "figure (median of the rounds)", "two addresses", "shared device", "ratio"
    );
    for (case, [split, shared]) in cases.iter().zip(&got) {
        let (a, b) = (median(split), median(shared));
        // A latency should not grow; the other figures should not fall.
        let at_most = case.figure == Figure::Typical;
        let ratio = judged_ratio(b, a, at_most);
        println!(
            " {:<36} {:>16.3} {:>16.3} {:>7.3}x   {}",
            format!("{} [{}]", case.label, case.figure.unit()),
            a,
            b,
            ratio,
            verdict(ratio, case.target, at_most)
        );
    }
    // Two processes on one device (the pair's -D run) against the kernel's
    // best UDP path.
    let (a, b) = (median(&udp), median(&pairs[0]));
    let ratio = judged_ratio(b, a, false);
    println!("{RULE}");
    println!(
        " {:<36} {:>16} {:>16} {:>8}   target",
        "write-bw 64 KiB, shared device", "raw UDP GSO/GRO", "one pair", "ratio"
    );
    println!(" {:<36} {:>16.3} {:>16.3} {:>7.3}x   {}", "bandwidth [MiB/sec]", a, b, ratio, verdict(ratio, 2.0, false));
    let (a, b) = (median(&pairs[0]), median(&pairs[1]));
    let ratio = judged_ratio(b, a, false);
    println!("{RULE}");
    println!(" {:<36} {:>16} {:>16} {:>8}   target", "write-bw 64 KiB, shared device", "one pair", "4 pairs", "ratio");
    println!(" {:<36} {:>16.3} {:>16.3} {:>7.3}x   {}", "aggregate [MiB/sec]", a, b, ratio, verdict(ratio, 0.9, false));
    println!("{RULE}");
    Ok(())
}

/// The median of `v` (0 when empty).
pub(super) fn median(v: &[f64]) -> f64 {
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    match s.len() {
        0 => 0.0,
        n if n % 2 == 1 => s[n / 2],
        n => (s[n / 2 - 1] + s[n / 2]) / 2.0,
    }
}

/// The figure's value in a perftest row.
fn figure(row: &[String], f: Figure) -> Result<f64, PerfError> {
    row.get(f.column())
        .and_then(|x| x.parse::<f64>().ok())
        .filter(|x| x.is_finite() && *x > 0.0)
        .ok_or_else(|| PerfError::Exchange(format!("no {f:?} in the row {row:?}")))
}

/// A TCP port nobody listens on right now, for one pair's exchange.
pub(super) fn free_tcp_port() -> Result<u16, PerfError> {
    Ok(TcpListener::bind(("0.0.0.0", 0))?.local_addr()?.port())
}

/// Runs `softroce perf TEST EXTRA` as one server and one client process
/// per pair, all at once: the server on the first address, the client on
/// the second. Returns each client's table row.
fn run_pairs(
    exe: &std::path::Path,
    test: &str,
    extra: &[String],
    pairs: &[(String, String)],
) -> Result<Vec<Vec<String>>, PerfError> {
    let spawn = |addr: &str, port: u16, client: bool| -> Result<Child, PerfError> {
        let mut cmd = Command::new(exe);
        cmd.arg("perf").arg(test).args(extra).args(["-p", &port.to_string()]);
        if client {
            cmd.arg("127.0.0.1");
        }
        cmd.env("SOFTROCE_DEVICES", format!("sr{}={addr}", u8::from(client)))
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        Ok(cmd.spawn()?)
    };
    let mut children = Vec::with_capacity(pairs.len());
    for (sa, ca) in pairs {
        let port = free_tcp_port()?;
        let server = spawn(sa, port, false)?;
        let client = spawn(ca, port, true)?;
        children.push((server, client));
    }
    let mut rows = Vec::with_capacity(pairs.len());
    let mut failure = None;
    for (server, client) in children {
        let c = client.wait_with_output()?;
        let s = server.wait_with_output()?;
        let out = String::from_utf8_lossy(&c.stdout);
        let row = table_row(&out);
        match (c.status.success() && s.status.success(), row) {
            (true, Some(row)) => rows.push(row),
            _ => {
                failure.get_or_insert_with(|| {
                    format!(
                        "perf {test} {}: client {} ({}), server {} ({})",
                        extra.join(" "),
                        c.status,
                        String::from_utf8_lossy(&c.stderr).trim(),
                        s.status,
                        String::from_utf8_lossy(&s.stderr).trim()
                    )
                });
            }
        }
    }
    match failure {
        Some(f) => Err(PerfError::Usage(f)),
        None => Ok(rows),
    }
}

/// The first data row of a perftest table in `out`.
fn table_row(out: &str) -> Option<Vec<String>> {
    let mut lines = out.lines().skip_while(|l| !l.trim_start().starts_with("#bytes"));
    lines.next()?;
    lines
        .find(|l| l.trim_start().chars().next().is_some_and(|c| c.is_ascii_digit()))
        .map(|l| l.split_whitespace().map(String::from).collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::perf::report::{BwRow, LatRow, bw_header, bw_line, lat_header, lat_line};

    #[test]
    fn figures_are_read_from_the_columns_perf_prints() {
        let r = BwRow { bytes: 8, iters: 1000, peak: 9.0e6, avg: 8.0e6, msg_rate: 1.0e6, secs: 0.001 };
        let out = format!("{RULE}\n{}\n{}\n{RULE}\n", bw_header(false, false), bw_line(&r, false, None));
        let row = table_row(&out).unwrap();
        assert_eq!(figure(&row, Figure::Bandwidth).unwrap(), (8.0e6_f64 / 1048576.0 * 100.0).round() / 100.0);
        assert_eq!(figure(&row, Figure::MsgRate).unwrap(), 1.0);
        let l = LatRow::from_samples(8, (1..=99).map(f64::from).collect());
        let out = format!("{}\n{}\n", lat_header(false), lat_line(&l, None));
        assert_eq!(figure(&table_row(&out).unwrap(), Figure::Typical).unwrap(), 50.0);
        assert!(table_row("no table here\n 12 34\n").is_none());
        assert!(figure(&["8".into(), "nan".into()], Figure::Bandwidth).is_err());
    }

    #[test]
    fn median_of_odd_even_and_empty() {
        assert_eq!(median(&[3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(&[4.0, 1.0, 2.0, 3.0]), 2.5);
        assert_eq!(median(&[]), 0.0);
    }
}
