//! Command-line value parsers: durations (`250us`, `10ms`, `1.5s`) and probabilities (`0.05`, `5%`).

use std::time::Duration;

/// Parses a duration: a non-negative decimal number followed by `ns`, `us` (or `µs`), `ms`, `s` or `m`.
/// A bare `0` is accepted too.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let t = s.trim();
    if t == "0" {
        return Ok(Duration::ZERO);
    }
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .ok_or_else(|| format!("duration {s:?} needs a unit: ns, us, ms, s or m (e.g. 10ms)"))?;
    let (number, unit) = t.split_at(split);
    let value: f64 = number.parse().map_err(|_| format!("bad number in duration {s:?}"))?;
    let scale = match unit.trim() {
        "ns" => 1e-9,
        "us" | "µs" => 1e-6,
        "ms" => 1e-3,
        "s" => 1.0,
        "m" | "min" => 60.0,
        other => return Err(format!("unknown unit {other:?} in duration {s:?} (ns, us, ms, s, m)")),
    };
    Duration::try_from_secs_f64(value * scale).map_err(|e| format!("duration {s:?}: {e}"))
}

/// Parses a probability: a number in `[0, 1]`, or a percentage in `[0%, 100%]`.
pub fn parse_probability(s: &str) -> Result<f64, String> {
    let t = s.trim();
    let value = match t.strip_suffix('%') {
        Some(pct) => pct.trim().parse::<f64>().map(|v| v / 100.0),
        None => t.parse::<f64>(),
    }
    .map_err(|_| format!("bad probability {s:?} (use 0.05 or 5%)"))?;
    if (0.0..=1.0).contains(&value) { Ok(value) } else { Err(format!("probability {s:?} is outside [0, 1]")) }
}
