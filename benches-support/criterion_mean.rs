//! Shared by the workspace's benches (included with `#[path]`): reads back
//! criterion's estimate of a benchmark of this run, so a bench can print a
//! ratio to a baseline it measured in the same run.

/// Criterion's mean estimate (ns) of benchmark `id` in `group`, from
/// `target/criterion` (or `$CARGO_TARGET_DIR/criterion`).
pub fn mean_ns(group: &str, id: &str) -> Option<f64> {
    let dir = std::env::var_os("CARGO_TARGET_DIR").map_or_else(
        || std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target"),
        std::path::PathBuf::from,
    );
    let json = std::fs::read_to_string(dir.join("criterion").join(group).join(id).join("new/estimates.json")).ok()?;
    let mean = &json[json.find("\"mean\"")?..];
    let v = &mean[mean.find("\"point_estimate\":")? + 17..];
    v[..v.find([',', '}'])?].trim().parse().ok()
}
