//! perftest's output: the banner, the result tables, and the ratio to the
//! baseline beside each row (`0.81x`), so scripts can read it.

use std::fmt::Write as _;

/// One bandwidth row.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct BwRow {
    /// Message size.
    pub bytes: usize,
    /// Messages.
    pub iters: usize,
    /// Peak bandwidth, bytes per second.
    pub peak: f64,
    /// Average bandwidth, bytes per second.
    pub avg: f64,
    /// Messages per second.
    pub msg_rate: f64,
    /// Seconds the messages took.
    pub secs: f64,
}

impl BwRow {
    /// The row of several runs of one size taken in turn: totals over the
    /// total time, the highest peak.
    pub fn combine(parts: &[BwRow]) -> Option<BwRow> {
        let first = parts.first()?;
        let iters: usize = parts.iter().map(|p| p.iters).sum();
        let secs: f64 = parts.iter().map(|p| p.secs).sum();
        let per_sec = |x: f64| if secs > 0.0 { x / secs } else { 0.0 };
        let avg = per_sec((iters * first.bytes) as f64);
        let peak = parts.iter().map(|p| p.peak).fold(avg, f64::max);
        Some(BwRow { bytes: first.bytes, iters, peak, avg, msg_rate: per_sec(iters as f64), secs })
    }
}

/// One latency row, in microseconds.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LatRow {
    /// Message size.
    pub bytes: usize,
    /// Iterations.
    pub iters: usize,
    /// Minimum.
    pub min: f64,
    /// Maximum.
    pub max: f64,
    /// Median.
    pub typical: f64,
    /// Mean.
    pub avg: f64,
    /// Standard deviation.
    pub stdev: f64,
    /// 99th percentile.
    pub p99: f64,
    /// 99.9th percentile.
    pub p999: f64,
}

impl LatRow {
    /// Statistics of `samples` (microseconds).
    pub fn from_samples(bytes: usize, mut samples: Vec<f64>) -> LatRow {
        samples.sort_by(f64::total_cmp);
        let n = samples.len().max(1) as f64;
        let avg = samples.iter().sum::<f64>() / n;
        let var = samples.iter().map(|s| (s - avg) * (s - avg)).sum::<f64>() / n;
        let pct = |p: f64| {
            samples.get(((samples.len() as f64 * p).ceil() as usize).saturating_sub(1)).copied().unwrap_or(0.0)
        };
        LatRow {
            bytes,
            iters: samples.len(),
            min: samples.first().copied().unwrap_or(0.0),
            max: samples.last().copied().unwrap_or(0.0),
            typical: pct(0.5),
            avg,
            stdev: var.sqrt(),
            p99: pct(0.99),
            p999: pct(0.999),
        }
    }
}

/// The dashed rule perftest prints.
pub const RULE: &str = "---------------------------------------------------------------------------------------";

/// The bandwidth table header.
pub fn bw_header(gbits: bool, baseline: bool) -> String {
    let unit = if gbits { "Gb/sec" } else { "MiB/sec" };
    let mut s = format!(" #bytes     #iterations    BW peak[{unit}]    BW average[{unit}]   MsgRate[Mpps]");
    if baseline {
        s.push_str("   baseline[".to_owned().as_str());
        s.push_str(unit);
        s.push_str("]   ratio");
    }
    s
}

fn bw_unit(bps: f64, gbits: bool) -> f64 {
    if gbits { bps * 8.0 / 1e9 } else { bps / (1024.0 * 1024.0) }
}

/// A bandwidth row, with the baseline's average and the ratio when given.
pub fn bw_line(r: &BwRow, gbits: bool, baseline: Option<f64>) -> String {
    let mut s = format!(
        " {:<10} {:<10}       {:<10.2}         {:<10.2}          {:.6}",
        r.bytes,
        r.iters,
        bw_unit(r.peak, gbits),
        bw_unit(r.avg, gbits),
        r.msg_rate / 1e6
    );
    if let Some(b) = baseline {
        let _ = write!(s, "      {:<10.2}      {:.2}x", bw_unit(b, gbits), if b > 0.0 { r.avg / b } else { 0.0 });
    }
    s
}

/// The latency table header.
pub fn lat_header(baseline: bool) -> String {
    let mut s = String::from(
        " #bytes #iterations    t_min[usec]    t_max[usec]  t_typical[usec]    t_avg[usec]    t_stdev[usec]   99% percentile[usec]   99.9% percentile[usec] ",
    );
    if baseline {
        s.push_str("  baseline t_typical[usec]   ratio");
    }
    s
}

/// A latency row; the ratio compares typical (median) latencies.
pub fn lat_line(r: &LatRow, baseline: Option<f64>) -> String {
    let mut s = format!(
        " {:<7}{:<10}     {:<7.2}        {:<7.2}      {:<7.2}            {:<7.2}         {:<7.2}         {:<7.2}                {:<7.2}",
        r.bytes, r.iters, r.min, r.max, r.typical, r.avg, r.stdev, r.p99, r.p999
    );
    if let Some(b) = baseline {
        let _ = write!(s, "          {:<7.2}                {:.2}x", b, if b > 0.0 { r.typical / b } else { 0.0 });
    }
    s
}

/// `num / den` (0 when `den` is not positive) to print beside a target
/// and judge against it: to 0.001, rounded toward missing the target (down
/// for an `at least` target, up for `at most`), so that the verdict agrees
/// with the figure shown (0.896 printed as 0.90x beside MISSED read as a
/// contradiction). Print it with `{:.3}`.
pub fn judged_ratio(num: f64, den: f64, at_most: bool) -> f64 {
    let thousandths = if den > 0.0 { num / den * 1000.0 } else { 0.0 };
    // A hair of slack: 0.9 / 1.0 must stay 0.900, not become 0.899.
    let r = if at_most { (thousandths - 1e-9).ceil() } else { (thousandths + 1e-9).floor() };
    r / 1000.0
}

/// The target column: `>= 0.90x met`, `<= 1.30x MISSED`.
pub fn verdict(ratio: f64, target: f64, at_most: bool) -> String {
    let (bound, met) = if at_most { ("<=", ratio <= target) } else { (">=", ratio >= target) };
    format!("{bound} {target:.2}x {}", if met { "met" } else { "MISSED" })
}

/// Parses the ratio (`0.81x`) at the end of a table row, as scripts do.
#[cfg(test)]
pub fn ratio_of(line: &str) -> Option<f64> {
    line.split_whitespace().last()?.strip_suffix('x')?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_line_up_with_perftest_columns_and_carry_a_readable_ratio() {
        let r = BwRow { bytes: 65536, iters: 5000, peak: 2.0e9, avg: 1.5e9, msg_rate: 22_888.0, secs: 0.218 };
        let line = bw_line(&r, false, Some(2.0e9));
        let f: Vec<&str> = line.split_whitespace().collect();
        assert_eq!(f[0], "65536");
        assert_eq!(f[1], "5000");
        assert_eq!(f[3], format!("{:.2}", 1.5e9 / 1048576.0));
        assert_eq!(ratio_of(&line), Some(0.75));
        assert!(bw_header(true, false).contains("BW peak[Gb/sec]"));
        let l = LatRow::from_samples(8, (1..=1000).map(f64::from).collect());
        assert_eq!((l.min, l.max, l.typical, l.p99, l.p999), (1.0, 1000.0, 500.0, 990.0, 999.0));
        assert_eq!(ratio_of(&lat_line(&l, Some(400.0))), Some(1.25));
        assert!(lat_header(false).contains("t_typical[usec]"));
    }

    #[test]
    fn judged_ratios_round_toward_missing_their_target() {
        assert_eq!(judged_ratio(0.8996, 1.0, false), 0.899);
        assert_eq!(judged_ratio(0.9, 1.0, false), 0.9);
        // Figures whose exact ratio is the target meet it, whatever the float error.
        assert_eq!(judged_ratio(4500.0, 5000.0, false), 0.9);
        assert_eq!(judged_ratio(6.5, 5.0, true), 1.3);
        assert_eq!(judged_ratio(1.3001, 1.0, true), 1.301);
        assert_eq!(judged_ratio(1.3, 1.0, true), 1.3);
        assert_eq!(judged_ratio(0.0, 1.0, false), 0.0);
        assert_eq!(judged_ratio(5.0, 0.0, false), 0.0, "nothing measured on the other side");
        assert_eq!(format!("{:.3}", judged_ratio(2.0, 3.0, false)), "0.666");
        assert_eq!(verdict(0.899, 0.9, false), ">= 0.90x MISSED");
        assert_eq!(verdict(0.9, 0.9, false), ">= 0.90x met");
        assert_eq!(verdict(1.301, 1.3, true), "<= 1.30x MISSED");
        assert_eq!(verdict(1.05, 1.3, true), "<= 1.30x met");
    }

    #[test]
    fn rounds_combine_into_totals_over_the_total_time() {
        let a = BwRow { bytes: 1000, iters: 10, peak: 9000.0, avg: 5000.0, msg_rate: 5.0, secs: 2.0 };
        let b = BwRow { bytes: 1000, iters: 30, peak: 12000.0, avg: 10000.0, msg_rate: 10.0, secs: 3.0 };
        let c = BwRow::combine(&[a, b]).unwrap();
        assert_eq!((c.iters, c.secs, c.avg, c.msg_rate, c.peak), (40, 5.0, 8000.0, 8.0, 12000.0));
        assert_eq!(BwRow::combine(&[]), None);
    }
}
