//! `softroce qp-memory`: resident memory per QP, measured by creating QPs
//! on a loopback device and reading the process's resident set.

use std::process::ExitCode;

use softroce::{Context, Options, QpInit};

fn rss_bytes() -> Option<u64> {
    let statm = std::fs::read_to_string("/proc/self/statm").ok()?;
    let pages: u64 = statm.split_whitespace().nth(1)?.parse().ok()?;
    Some(pages * 4096)
}

/// Creates `counts` QPs (RC, `depth` send and receive WRs, connected to
/// themselves so they reach RTS) and prints the resident memory each costs.
pub fn run(counts: &[usize], depth: u32) -> ExitCode {
    println!(" #QPs      depth   resident[KiB]   per QP[KiB]");
    for &n in counts {
        let r = (|| -> Result<(u64, u64), softroce::Error> {
            let lease = softroce::config::LoopbackLease::take()?;
            let info = lease.device()?;
            let ctx = Context::open_with(&info, Options::default())?;
            let pd = ctx.alloc_pd()?;
            let cq = ctx.create_cq(1024, None)?;
            let before = rss_bytes().unwrap_or(0);
            let mut qps = Vec::with_capacity(n);
            for _ in 0..n {
                let qp = pd.create_qp(QpInit::rc(&cq, &cq, depth))?;
                qp.connect(1, &qp.endpoint(1))?;
                qps.push(qp);
            }
            let after = rss_bytes().unwrap_or(0);
            Ok((before, after))
        })();
        match r {
            Ok((b, a)) => {
                let d = a.saturating_sub(b);
                println!(" {:<9} {:<7} {:<15} {:.1}", n, depth, d / 1024, d as f64 / 1024.0 / n as f64);
            }
            Err(e) => {
                eprintln!("softroce qp-memory: {e}");
                return ExitCode::FAILURE;
            }
        }
    }
    ExitCode::SUCCESS
}
