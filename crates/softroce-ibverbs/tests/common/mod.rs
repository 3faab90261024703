//! What the tests of the drop-in library share.

use std::path::PathBuf;

/// The cdylib cargo built for this test run: `target/<profile>/deps/TEST-HASH`
/// → `target/<profile>/libsoftroce_ibverbs.so`, or its twin in `deps/` if
/// that is newer: `cargo test` rebuilds the cdylib in `deps/` only (it is
/// copied up to the profile directory only when asked for, as by `cargo
/// build`), so the profile directory's copy may be an older build.
pub fn cdylib() -> PathBuf {
    let exe = std::env::current_exe().expect("current_exe");
    let deps = exe.parent().expect("the test binary lives in deps/");
    let profile = deps.parent().expect("deps/ lives in the profile directory");
    [profile, deps]
        .iter()
        .map(|d| d.join("libsoftroce_ibverbs.so"))
        .filter_map(|p| Some((std::fs::metadata(&p).ok()?.modified().ok()?, p)))
        .max()
        .map(|(_, p)| p)
        .unwrap_or_else(|| panic!("no libsoftroce_ibverbs.so next to {}", exe.display()))
}
