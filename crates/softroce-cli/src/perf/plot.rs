//! `--plot FILE.svg`: bandwidth and latency against message size in one
//! picture (two panels, log2 sizes), softroce and the baseline.

use std::fmt::Write as _;
use std::path::Path;

use super::report::{BwRow, LatRow};

const W: f64 = 480.0;
const H: f64 = 320.0;
const PAD: f64 = 56.0;

/// A named, coloured line of (x, y) points.
type Series<'a> = (&'a str, &'a str, Vec<(f64, f64)>);

fn panel(svg: &mut String, x0: f64, title: &str, unit: &str, series: &[Series<'_>]) {
    let all: Vec<(f64, f64)> = series.iter().flat_map(|s| s.2.iter().copied()).collect();
    let (xmin, xmax) = all.iter().fold((f64::MAX, f64::MIN), |(a, b), p| (a.min(p.0), b.max(p.0)));
    let ymax = all.iter().map(|p| p.1).fold(0.0f64, f64::max).max(1e-9) * 1.1;
    let (xmin, xmax) = if xmin < xmax { (xmin, xmax) } else { (xmin - 1.0, xmin + 1.0) };
    let sx = |x: f64| x0 + PAD + (x - xmin) / (xmax - xmin) * (W - 2.0 * PAD);
    let sy = |y: f64| H - PAD - y / ymax * (H - 2.0 * PAD);
    let _ = write!(
        svg,
        r##"<rect x="{x0}" y="0" width="{W}" height="{H}" fill="white" stroke="#ccc"/><text x="{}" y="20" text-anchor="middle" font-size="14">{title}</text>"##,
        x0 + W / 2.0
    );
    let _ = write!(
        svg,
        r##"<line x1="{}" y1="{}" x2="{}" y2="{}" stroke="black"/><line x1="{}" y1="{}" x2="{}" y2="{}" stroke="black"/>"##,
        sx(xmin),
        sy(0.0),
        sx(xmax),
        sy(0.0),
        sx(xmin),
        sy(0.0),
        sx(xmin),
        sy(ymax)
    );
    let _ = write!(
        svg,
        r##"<text x="{}" y="{}" text-anchor="middle" font-size="11">message size (log2 bytes)</text><text x="{}" y="{}" font-size="11" transform="rotate(-90 {} {})">{unit}</text>"##,
        x0 + W / 2.0,
        H - 12.0,
        x0 + 16.0,
        H / 2.0,
        x0 + 16.0,
        H / 2.0
    );
    for k in 0..=4 {
        let y = ymax * f64::from(k) / 4.0;
        let _ = write!(
            svg,
            r##"<text x="{}" y="{}" text-anchor="end" font-size="10">{y:.1}</text>"##,
            x0 + PAD - 4.0,
            sy(y) + 3.0
        );
    }
    for (i, (name, color, pts)) in series.iter().enumerate() {
        let path: Vec<String> = pts.iter().map(|(x, y)| format!("{:.1},{:.1}", sx(*x), sy(*y))).collect();
        let _ =
            write!(svg, r##"<polyline fill="none" stroke="{color}" stroke-width="2" points="{}"/>"##, path.join(" "));
        let _ = write!(
            svg,
            r##"<text x="{}" y="{}" font-size="11" fill="{color}">{name}</text>"##,
            x0 + PAD + 8.0,
            36.0 + 14.0 * i as f64
        );
    }
}

/// Writes the picture of a run's rows.
pub fn write(
    path: &Path,
    title: &str,
    bw: &[(BwRow, Option<f64>)],
    lat: &[(LatRow, Option<f64>)],
) -> std::io::Result<()> {
    let mut svg = format!(
        r##"<svg xmlns="http://www.w3.org/2000/svg" width="{}" height="{H}" font-family="sans-serif">"##,
        2.0 * W
    );
    let lg = |b: usize| (b.max(1) as f64).log2();
    let mib = 1024.0 * 1024.0;
    let (mut bw_soft, mut bw_base, mut lat_soft, mut lat_base) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for (r, b) in bw {
        bw_soft.push((lg(r.bytes), r.avg / mib));
        // Time per message, from the message rate.
        lat_soft.push((lg(r.bytes), 1e6 / r.msg_rate.max(1e-9)));
        if let Some(b) = b {
            bw_base.push((lg(r.bytes), b / mib));
            lat_base.push((lg(r.bytes), r.bytes as f64 / b.max(1e-9) * 1e6));
        }
    }
    for (r, b) in lat {
        lat_soft.push((lg(r.bytes), r.typical));
        bw_soft.push((lg(r.bytes), r.bytes as f64 / (r.typical.max(1e-9) * 1e-6) / mib));
        if let Some(b) = b {
            lat_base.push((lg(r.bytes), *b));
            bw_base.push((lg(r.bytes), r.bytes as f64 / (b.max(1e-9) * 1e-6) / mib));
        }
    }
    let with_base = |soft: Vec<(f64, f64)>, base: Vec<(f64, f64)>| {
        let mut v = vec![("softroce", "#1f77b4", soft)];
        if !base.is_empty() {
            v.push(("UDP baseline", "#ff7f0e", base));
        }
        v
    };
    panel(&mut svg, 0.0, &format!("{title}: bandwidth"), "MiB/s", &with_base(bw_soft, bw_base));
    panel(&mut svg, W, &format!("{title}: latency"), "usec per message", &with_base(lat_soft, lat_base));
    svg.push_str("</svg>\n");
    std::fs::write(path, svg)
}
