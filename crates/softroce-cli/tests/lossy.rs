//! `softroce perf-lossy --quick`, as CI runs it: softroce's RDMA WRITE
//! goodput and a TCP stream's on one impaired path between two network
//! namespaces, at 0, 1 (also reordered) and 5% loss. Every row must have
//! both figures: a softroce run that fails (RETRY_EXC_ERR with perf's
//! default QP attributes, say) prints FAILED and fails the test. The
//! figures themselves are printed, not asserted: they are timings. The
//! ECN run (1% of the ECN-capable packets marked CE, no loss) must show
//! CNPs sent by softroce's receiver and handled by its sender.
//!
//! Needs root (namespaces, nftables, tc); elsewhere it prints a skip line,
//! unless `CI` is set: then it fails.

use std::process::Command;

fn can_impair() -> bool {
    let root = Command::new("id").arg("-u").output().is_ok_and(|o| o.stdout.starts_with(b"0\n"));
    let tools =
        ["ip", "tc", "nft"].iter().all(|t| Command::new(t).arg("-V").output().is_ok_and(|o| o.status.success()));
    if !(root && tools) {
        assert!(std::env::var_os("CI").is_none(), "CI runs as root with iproute2 and nftables");
        eprintln!("skipped: perf-lossy needs root, ip, tc and nft");
        return false;
    }
    true
}

/// One row of the table: loss %, reorder %, softroce MiB/s, TCP MiB/s,
/// and the verdict after the ratio.
fn rows(out: &str) -> Vec<(f64, f64, f64, f64, String)> {
    out.lines()
        .filter_map(|l| {
            let w: Vec<&str> = l.split_whitespace().collect();
            let pct = |s: &str| s.strip_suffix('%')?.parse::<f64>().ok();
            let (loss, reorder) = (pct(w.first()?)?, pct(w.get(1)?)?);
            let (ours, tcp) = (w.get(2)?.parse().ok()?, w.get(3)?.parse().ok()?);
            Some((loss, reorder, ours, tcp, w.get(5..).unwrap_or_default().join(" ")))
        })
        .collect()
}

#[test]
fn perf_lossy_quick_measures_softroce_and_tcp_at_every_loss_rate_and_none_fails() {
    if !can_impair() {
        return;
    }
    let o = Command::new(env!("CARGO_BIN_EXE_softroce")).args(["perf-lossy", "--quick"]).output().unwrap();
    let out = String::from_utf8_lossy(&o.stdout);
    let err = String::from_utf8_lossy(&o.stderr);
    eprintln!("{out}");
    assert!(o.status.success(), "{out}\n{err}");
    let rows = rows(&out);
    let settings: Vec<(f64, f64)> = rows.iter().map(|r| (r.0, r.1)).collect();
    assert_eq!(settings, [(0.0, 0.0), (1.0, 0.0), (1.0, 1.0), (5.0, 0.0)], "{out}");
    for (loss, reorder, ours, tcp, verdict) in &rows {
        assert!(!verdict.contains("FAILED"), "softroce failed at {loss}% loss, {reorder}% reordered:\n{out}");
        assert!(*ours > 0.0 && *tcp > 0.0, "no goodput at {loss}% loss:\n{out}");
    }
    let marks = mark_rows(&out);
    assert_eq!(marks.len(), 1, "one ECN row:\n{out}");
    let (marked, ours, tcp, sent, handled) = marks[0];
    assert_eq!(marked, 1.0);
    assert!(ours > 0.0 && tcp > 0.0, "no goodput under CE marks:\n{out}");
    assert!(sent > 0 && handled > 0 && handled <= sent, "marks must become CNPs that reach the sender:\n{out}");
    // The namespaces are gone again.
    let ns = Command::new("ip").args(["netns", "list"]).output().unwrap();
    assert!(!String::from_utf8_lossy(&ns.stdout).contains("srlossy"), "a namespace was left behind");
}

/// The ECN table's rows: marked %, softroce MiB/s, TCP MiB/s, CNPs sent
/// and handled (a FAILED row has no CNP columns and is not read).
fn mark_rows(out: &str) -> Vec<(f64, f64, f64, u64, u64)> {
    out.lines()
        .filter_map(|l| {
            let w: Vec<&str> = l.split_whitespace().collect();
            let marked = w.first()?.strip_suffix('%')?.parse().ok()?;
            (w.get(1) == Some(&"CE")).then_some(())?;
            let f = |i: usize| w.get(i)?.parse::<f64>().ok();
            let n = |i: usize| w.get(i)?.parse::<u64>().ok();
            Some((marked, f(2)?, f(3)?, n(5)?, n(6)?))
        })
        .collect()
}

#[test]
fn the_table_parser_reads_rows_and_skips_the_rest() {
    let out = " loss reorder softroce[MiB/s] TCP[MiB/s] ratio target\n     1%       0%   410.4   313.4    1.31x   >= 0.80x met\n\
               ---\n     5%       0%   0.0   52.0   0.00x   FAILED: client exit status: 1\n";
    let r = rows(out);
    assert_eq!(r.len(), 2);
    assert_eq!((r[0].0, r[0].1, r[0].2, r[0].3), (1.0, 0.0, 410.4, 313.4));
    assert!(r[1].4.starts_with("FAILED"));
    let out = " loss reorder ...\n     1%       0%   410.4   313.4    1.31x\n    marked ...\n     1% CE   586.3   1293.1    0.45x   649   640\n";
    assert_eq!(rows(out).len(), 1, "the ECN row is not a loss row");
    assert_eq!(mark_rows(out), [(1.0, 586.3, 1293.1, 649, 640)]);
}
