//! `softroce perf-lossy --quick`, as CI runs it: softroce's RDMA WRITE
//! goodput and a TCP stream's on one path through a router that impairs
//! single wire packets, at MTU 1500 and 0, 1 (also reordered) and 5% loss.
//! Every row must have both figures: a softroce run that fails
//! (RETRY_EXC_ERR with perf's default QP attributes, say) prints FAILED
//! and fails the test. The figures themselves are printed, not asserted:
//! they are timings. What is asserted is that the loss was per wire
//! packet: the router's rules saw as many packets as the two ends sent
//! (not the few GSO batches they would see with the veths' offloads on)
//! and dropped the share asked for. The ECN run (1% of the ECN-capable
//! packets marked CE, no loss) must show CNPs sent by softroce's receiver
//! and handled by its sender.
//!
//! Needs root (namespaces, nftables, tc, ethtool); elsewhere it prints a
//! skip line, unless `CI` is set: then it fails.

use std::process::Command;

fn can_impair() -> bool {
    let root = Command::new("id").arg("-u").output().is_ok_and(|o| o.stdout.starts_with(b"0\n"));
    let tools = ["ip", "tc", "nft", "ethtool"].iter().all(|t| {
        Command::new(t).arg(if *t == "ethtool" { "--version" } else { "-V" }).output().is_ok_and(|o| o.status.success())
    });
    if !(root && tools) {
        assert!(std::env::var_os("CI").is_none(), "CI runs as root with iproute2, nftables and ethtool");
        eprintln!("skipped: perf-lossy needs root, ip, tc, nft and ethtool");
        return false;
    }
    true
}

/// One loss row of the table.
#[derive(Debug, Clone, PartialEq)]
struct Row {
    mtu: u32,
    loss: f64,
    reorder: f64,
    ours: f64,
    tcp: f64,
    /// RoCE packets both ends sent, R saw, R dropped.
    roce: [u64; 3],
    /// TCP segments both ends sent, R saw, R dropped.
    tcp_segs: [u64; 3],
    verdict: String,
}

fn rows(out: &str) -> Vec<Row> {
    out.lines()
        .filter_map(|l| {
            let w: Vec<&str> = l.split_whitespace().collect();
            let pct = |s: &str| s.strip_suffix('%')?.parse::<f64>().ok();
            let n = |i: usize| w.get(i)?.parse::<u64>().ok();
            Some(Row {
                mtu: w.first()?.parse().ok()?,
                loss: pct(w.get(1)?)?,
                reorder: pct(w.get(2)?)?,
                ours: w.get(3)?.parse().ok()?,
                tcp: w.get(4)?.parse().ok()?,
                roce: [n(6)?, n(7)?, n(8)?],
                tcp_segs: [n(9)?, n(10)?, n(11)?],
                verdict: w.get(12..).unwrap_or_default().join(" "),
            })
        })
        .collect()
}

/// Whether R saw what the ends sent, one by one, and dropped about `loss`
/// percent of it ([sent, seen, dropped]): within 40% of the rate, or four
/// standard deviations of the share of a binomial draw over what R saw
/// (a few hundred packets when TCP backs off, thousands otherwise).
fn per_wire_packet(c: [u64; 3], loss: f64) -> bool {
    let [sent, seen, dropped] = c.map(|v| v as f64);
    let share = if seen > 0.0 { dropped / seen * 100.0 } else { -1.0 };
    let p = loss / 100.0;
    let sigma = if seen > 0.0 { (p * (1.0 - p) / seen).sqrt() * 100.0 } else { 0.0 };
    seen >= 0.95 * sent && seen <= 1.05 * sent + 50.0 && (share - loss).abs() <= (loss * 0.4 + 0.05).max(4.0 * sigma)
}

#[test]
fn perf_lossy_quick_drops_wire_packets_and_measures_softroce_and_tcp_at_every_loss_rate() {
    if !can_impair() {
        return;
    }
    let out = quick(&[]);
    assert!(out.contains("softroce's packets carry up to 1024 bytes"), "IBTA's MTU for a 1500 link:\n{out}");
}

/// The same with softroce's wide MTU, which both perf ends offer: the
/// packets carry what the 1500-byte link holds, and the loss is still per
/// wire packet (a packet over the link's MTU would not pass the veths).
#[test]
fn perf_lossy_quick_with_the_wide_mtu_sends_packets_as_large_as_the_link_carries() {
    if !can_impair() {
        return;
    }
    let out = quick(&["--wide-mtu"]);
    assert!(out.contains("softroce's packets carry up to 1436 bytes"), "the wide MTU of a 1500 link:\n{out}");
}

/// Runs `perf-lossy --quick` with `extra` and checks every row: both
/// figures, and loss per wire packet; returns the output.
fn quick(extra: &[&str]) -> String {
    // One at a time: two would share the CPUs and halve each other's figures.
    static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let _turn = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let o = Command::new(env!("CARGO_BIN_EXE_softroce")).args(["perf-lossy", "--quick"]).args(extra).output().unwrap();
    let out = String::from_utf8_lossy(&o.stdout).into_owned();
    let err = String::from_utf8_lossy(&o.stderr);
    eprintln!("{out}");
    assert!(o.status.success(), "{out}\n{err}");
    let rows = rows(&out);
    let settings: Vec<(u32, f64, f64)> = rows.iter().map(|r| (r.mtu, r.loss, r.reorder)).collect();
    assert_eq!(settings, [(1500, 0.0, 0.0), (1500, 1.0, 0.0), (1500, 1.0, 1.0), (1500, 5.0, 0.0)], "{out}");
    for r in &rows {
        assert!(!r.verdict.contains("FAILED"), "softroce failed at {}% loss, {}% reordered:\n{out}", r.loss, r.reorder);
        assert!(r.ours > 0.0 && r.tcp > 0.0, "no goodput at {}% loss:\n{out}", r.loss);
        // Thousands of RoCE packets a second each way. TCP may back off to a
        // few hundred segments in a second at 5% loss (CI: 615, its
        // retransmission timer doubling): the share's tolerance follows the
        // count (`per_wire_packet`).
        assert!(r.roce[0] > 5000 && r.tcp_segs[0] > 100, "{r:?}\n{out}");
        assert!(per_wire_packet(r.roce, r.loss), "RoCE packets not dropped one by one: {r:?}\n{out}");
        assert!(per_wire_packet(r.tcp_segs, r.loss), "TCP segments not dropped one by one: {r:?}\n{out}");
    }
    let marks = mark_rows(&out);
    assert_eq!(marks.len(), 1, "one ECN row:\n{out}");
    let (marked, ours, tcp, [sent, seen, ce], cnps, handled) = marks[0];
    assert_eq!(marked, 1.0);
    assert!(ours > 0.0 && tcp > 0.0, "no goodput under CE marks:\n{out}");
    assert!(seen >= sent * 95 / 100 && ce > 0, "marks per wire packet:\n{out}");
    assert!(cnps > 0 && handled > 0 && handled <= cnps, "marks must become CNPs that reach the sender:\n{out}");
    // The namespaces are gone again.
    let ns = Command::new("ip").args(["netns", "list"]).output().unwrap();
    assert!(!String::from_utf8_lossy(&ns.stdout).contains("srlossy"), "a namespace was left behind");
    out
}

/// The ECN table's rows: marked %, softroce MiB/s, TCP MiB/s, RoCE packets
/// sent, seen and marked CE by R, CNPs sent and handled (a FAILED row has
/// no CNP columns and is not read).
type MarkRow = (f64, f64, f64, [u64; 3], u64, u64);

fn mark_rows(out: &str) -> Vec<MarkRow> {
    out.lines()
        .filter_map(|l| {
            let w: Vec<&str> = l.split_whitespace().collect();
            w.first()?.parse::<u32>().ok()?;
            let marked = w.get(1)?.strip_suffix('%')?.parse().ok()?;
            (w.get(2) == Some(&"CE")).then_some(())?;
            let f = |i: usize| w.get(i)?.parse::<f64>().ok();
            let n = |i: usize| w.get(i)?.parse::<u64>().ok();
            Some((marked, f(3)?, f(4)?, [n(6)?, n(7)?, n(8)?], n(9)?, n(10)?))
        })
        .collect()
}

#[test]
fn the_table_parser_reads_rows_and_skips_the_rest() {
    let out = " mtu loss reorder softroce[MiB/s] TCP[MiB/s] ratio ...\n                1500   1%      0%   410.4   313.4    1.310x   40000 40010 400   30000 30001 301   >= 0.90x met\n\
               ---\n  1500   5%      0%   0.0   52.0   0.000x   100 100 5   30000 30001 1500   FAILED: client exit status: 1\n";
    let r = rows(out);
    assert_eq!(r.len(), 2);
    assert_eq!((r[0].mtu, r[0].loss, r[0].reorder, r[0].ours, r[0].tcp), (1500, 1.0, 0.0, 410.4, 313.4));
    assert_eq!((r[0].roce, r[0].tcp_segs), ([40000, 40010, 400], [30000, 30001, 301]));
    assert!(r[1].verdict.starts_with("FAILED"));
    let out = " 1500 1% 0% 410.4 313.4 1.31x 40000 40010 400 30000 30001 301 >= 0.90x met\n mtu marked ...\n                1500 1% CE 586.3 1293.1 0.45x 90000 90004 880 649 640\n";
    assert_eq!(rows(out).len(), 1, "the ECN row is not a loss row");
    assert_eq!(mark_rows(out), [(1.0, 586.3, 1293.1, [90000, 90004, 880], 649, 640)]);
}

#[test]
fn per_wire_packet_loss_is_told_from_batches() {
    // 1% of 40,000 packets dropped one by one, against the same rule
    // seeing GSO batches of 44 packets (R saw 909).
    assert!(per_wire_packet([40000, 40010, 400], 1.0));
    assert!(!per_wire_packet([40000, 909, 9], 1.0));
    // A rule that dropped nothing at 5%, or 10% at 1%.
    assert!(!per_wire_packet([40000, 40000, 0], 5.0));
    assert!(!per_wire_packet([40000, 40000, 4000], 1.0));
    assert!(per_wire_packet([40000, 40000, 0], 0.0));
    // A TCP stream that backed off at 5% (CI): 18 of 613 is within four
    // standard deviations of 5%; none dropped of 613 is not.
    assert!(per_wire_packet([615, 613, 18], 5.0));
    assert!(!per_wire_packet([615, 613, 0], 5.0));
}
