//! `softroce perf-middleware`: what UCX gets out of softroce, against
//! softroce's own perftest between the same two processes' kind (a server
//! and a client on the host's shared loopback device, as users start
//! them). UCT `put_bw` 64 KiB zero-copy over `rc_verbs` (as ucx_perftest
//! runs it, one put outstanding, and with 128) against
//! `softroce perf write-bw` 64 KiB (128 WRITEs outstanding, and one),
//! and UCP `tag_lat` 8 B against `softroce perf send-lat` 8 B, taking
//! turns in rounds so both meet the same machine. Prints the medians, the
//! ratios and issue 18's targets.
//!
//! With one put outstanding each put is a 64 KiB WRITE's whole round trip
//! (send, the peer's receive, its ACK), while write-bw's rate is the
//! sender's cost alone: `docs/data-path.md` has the time line, and why
//! that row's ratio is bound well below 0.9x.

use std::io::Write as _;
use std::path::Path;
use std::process::{Child, Command, ExitCode, Output, Stdio};
use std::time::{Duration, Instant};

use clap::Args;

use super::sharing::{free_tcp_port, median};
use super::{
    PerfError,
    report::{RULE, judged_ratio, verdict},
};

/// `softroce perf-middleware` options.
#[derive(Debug, Args)]
pub struct MiddlewareArgs {
    /// Rounds; each runs every pair once, UCX and softroce perf in turn.
    #[arg(long, default_value_t = 3)]
    rounds: usize,
    /// A tenth of the iterations (a quick check).
    #[arg(long)]
    quick: bool,
}

/// The device both ends open (every host has it; UCX names it with its port).
const DEVICE: &str = "softroce_lo";

/// One comparison: a UCX test against a softroce perf test.
struct Case {
    label: &'static str,
    /// `ucx_perftest` options after the server's address.
    ucx: &'static [&'static str],
    /// Environment of both UCX processes.
    ucx_env: &'static [(&'static str, &'static str)],
    /// `softroce perf` test and size.
    perf: (&'static str, usize),
    /// More `softroce perf` options (both ends).
    perf_args: &'static [&'static str],
    iters: usize,
    /// Latency (lower is better, at most `target`) or bandwidth.
    latency: bool,
    /// Issue 18's bound on the ratio; `None` for a row that explains another.
    target: Option<f64>,
}

/// Runs `softroce perf-middleware`.
pub fn run(args: &MiddlewareArgs) -> ExitCode {
    match run_inner(args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("softroce perf-middleware: {e}");
            ExitCode::FAILURE
        }
    }
}

fn run_inner(args: &MiddlewareArgs) -> Result<(), PerfError> {
    if args.rounds == 0 || args.rounds > 100 {
        return Err(PerfError::Usage("--rounds must be 1..=100".into()));
    }
    if Command::new("ucx_perftest").arg("-h").output().is_err() {
        return Err(PerfError::Usage("ucx_perftest is not installed (Debian: ucx-utils)".into()));
    }
    let div = if args.quick { 10 } else { 1 };
    // UCT put_bw 64 KiB zero-copy over rc_verbs against write-bw 64 KiB.
    let put_bw = |label, ucx, perf_args, target| Case {
        label,
        ucx,
        ucx_env: &[],
        perf: ("write-bw", 65536),
        perf_args,
        iters: 20_000 / div,
        latency: false,
        target,
    };
    const PUT_BW: &[&str] = &["-x", "rc_verbs", "-d", "softroce_lo:1", "-t", "put_bw", "-D", "zcopy", "-s", "65536"];
    let cases = [
        // As ucx_perftest runs it: one zero-copy put outstanding (`-O`
        // unset), each a 64 KiB WRITE's round trip.
        put_bw("UCT put_bw zcopy 64 KiB / write-bw", PUT_BW, &[], Some(0.9)),
        // The same depth on both sides: one WRITE outstanding, its round
        // trip each time, both clients polling for it.
        put_bw("UCT put_bw zcopy 64 KiB / write-bw -t 1", PUT_BW, &["-t", "1"], None),
        // As many puts in flight as write-bw keeps WRITEs (perftest's tx depth).
        put_bw(
            "UCT put_bw zcopy 64 KiB -O 128 / write-bw",
            &["-x", "rc_verbs", "-d", "softroce_lo:1", "-t", "put_bw", "-D", "zcopy", "-s", "65536", "-O", "128"],
            &[],
            Some(0.9),
        ),
        Case {
            label: "UCP tag_lat 8 B / send-lat",
            ucx: &["-t", "tag_lat", "-s", "8"],
            ucx_env: &[("UCX_TLS", "rc_verbs,ud_verbs,self"), ("UCX_NET_DEVICES", "softroce_lo:1")],
            perf: ("send-lat", 8),
            perf_args: &[],
            iters: 20_000 / div,
            latency: true,
            target: Some(1.3),
        },
    ];
    let exe = std::env::current_exe()?;
    println!("{RULE}");
    println!("        UCX over softroce against softroce perf ({} rounds, in turn)", args.rounds);
    println!(" both: a server and a client process on {DEVICE} (127.0.0.1), shared");
    println!("{RULE}");
    let mut got: Vec<[Vec<f64>; 2]> = cases.iter().map(|_| [Vec::new(), Vec::new()]).collect();
    for r in 0..args.rounds {
        for (c, case) in cases.iter().enumerate() {
            // Alternate which goes first, so a drift within a round favours neither.
            for k in if (r + c) % 2 == 0 { [0, 1] } else { [1, 0] } {
                let v = if k == 0 { ucx(&exe, case)? } else { perf(&exe, case)? };
                got[c][k].push(v);
            }
        }
        eprint!("\r round {} of {} done   ", r + 1, args.rounds);
        let _ = std::io::stderr().flush();
    }
    eprintln!();
    println!(" {:<52} {:>12} {:>14} {:>8}   target", "figure (median of the rounds)", "UCX", "softroce perf", "ratio");
    for (case, [u, p]) in cases.iter().zip(&got) {
        let (u, p) = (median(u), median(p));
        let ratio = judged_ratio(u, p, case.latency);
        let unit = if case.latency { "usec, typical" } else { "MiB/sec" };
        let target = case.target.map_or_else(|| "(same depth)".to_string(), |t| verdict(ratio, t, case.latency));
        println!(" {:<52} {u:>12.2} {p:>14.2} {ratio:>7.3}x   {target}", format!("{} [{unit}]", case.label));
    }
    println!("{RULE}");
    Ok(())
}

/// `softroce run -- PROGRAM ARGS` with `env`, output captured.
fn under_softroce(exe: &Path, program: &[&str], env: &[(&str, &str)]) -> Result<Child, PerfError> {
    let mut cmd = Command::new(exe);
    cmd.arg("run").arg("--").args(program).stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped());
    cmd.envs(env.iter().copied());
    Ok(cmd.spawn()?)
}

/// Starts `server`, then `client` until it connects (the server may still be
/// starting: up to 5 s); both must succeed. Returns the client's output.
fn server_client(exe: &Path, server: &[&str], client: &[&str], env: &[(&str, &str)]) -> Result<Output, PerfError> {
    let mut s = under_softroce(exe, server, env)?;
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        std::thread::sleep(Duration::from_millis(200));
        let c = under_softroce(exe, client, env)?.wait_with_output()?;
        if c.status.success() {
            let so = s.wait_with_output()?;
            if !so.status.success() {
                return Err(PerfError::Usage(format!(
                    "{}: server {} ({})",
                    server.join(" "),
                    so.status,
                    String::from_utf8_lossy(&so.stderr).trim()
                )));
            }
            return Ok(c);
        }
        if Instant::now() >= deadline || s.try_wait()?.is_some() {
            let _ = s.kill();
            let so = s.wait_with_output()?;
            return Err(PerfError::Usage(format!(
                "{}: client {} ({}), server {} ({})",
                client.join(" "),
                c.status,
                String::from_utf8_lossy(&c.stderr).trim(),
                so.status,
                String::from_utf8_lossy(&so.stderr).trim()
            )));
        }
    }
}

/// One UCX run: the typical latency (usec) or average bandwidth (MiB/s).
fn ucx(exe: &Path, case: &Case) -> Result<f64, PerfError> {
    let port = free_tcp_port()?.to_string();
    let iters = case.iters.to_string();
    let server = ["ucx_perftest", "-p", &port];
    let client: Vec<&str> =
        ["ucx_perftest", "127.0.0.1", "-p", &port, "-n", &iters].into_iter().chain(case.ucx.iter().copied()).collect();
    let out = server_client(exe, &server, &client, case.ucx_env)?;
    let text = String::from_utf8_lossy(&out.stdout);
    final_figure(&text, case.latency)
        .ok_or_else(|| PerfError::Exchange(format!("no Final line from {}:\n{text}", client.join(" "))))
}

/// The `Final:` line of `ucx_perftest`: iterations, then latency (50th
/// percentile, average, overall, usec), bandwidth (average, overall, MB/s
/// of 2^20 bytes), message rate. The typical latency or average bandwidth.
fn final_figure(out: &str, latency: bool) -> Option<f64> {
    let f: Vec<f64> = out
        .lines()
        .find_map(|l| l.trim_start().strip_prefix("Final:"))?
        .split_whitespace()
        .map(|x| x.parse::<f64>())
        .collect::<Result<_, _>>()
        .ok()?;
    let v = *f.get(if latency { 1 } else { 4 })?;
    (f.len() == 8 && v.is_finite() && v > 0.0).then_some(v)
}

/// One `softroce perf` run of the case's test on the shared device.
fn perf(exe: &Path, case: &Case) -> Result<f64, PerfError> {
    let port = free_tcp_port()?.to_string();
    let (test, size) = case.perf;
    let (size, iters) = (size.to_string(), case.iters.to_string());
    let server: Vec<&str> = [exe.to_str().unwrap_or("softroce"), "perf", test, "-s", &size, "-n", &iters, "-p", &port]
        .into_iter()
        .chain(case.perf_args.iter().copied())
        .collect();
    let client: Vec<&str> = server.iter().copied().chain(["127.0.0.1"]).collect();
    let env = [("SOFTROCE_DEVICES", "softroce_lo=127.0.0.1")];
    let out = server_client(exe, &server, &client, &env)?;
    let text = String::from_utf8_lossy(&out.stdout);
    // perftest's row: bytes, iterations, then for BW peak, average (MiB/s),
    // for latency t_min, t_max, t_typical (usec).
    let row: Vec<f64> = text
        .lines()
        .skip_while(|l| !l.trim_start().starts_with("#bytes"))
        .skip(1)
        .find(|l| l.trim_start().chars().next().is_some_and(|c| c.is_ascii_digit()))
        .map(|l| l.split_whitespace().filter_map(|x| x.parse().ok()).collect())
        .unwrap_or_default();
    row.get(if case.latency { 4 } else { 3 })
        .copied()
        .filter(|v| v.is_finite() && *v > 0.0)
        .ok_or_else(|| PerfError::Exchange(format!("no table row from softroce perf {test}:\n{text}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_final_line_gives_typical_latency_or_average_bandwidth() {
        let out = "| Stage | ... |\nFinal:                 20000     46.128    47.294    47.294     1321.53    1321.53       21145       21145\n";
        assert_eq!(final_figure(out, false), Some(1321.53));
        assert_eq!(final_figure(out, true), Some(46.128));
        assert_eq!(final_figure("no final line\n", true), None);
        assert_eq!(final_figure("Final: 10 nan 1 1 1 1 1 1\n", true), None);
        assert_eq!(final_figure("Final: 10 1 2\n", true), None, "a short line");
    }
}
