//! Every `SOFTROCE_*` variable the workspace names is in `softroce::env::VARS`,
//! the README's table lists exactly the run-time ones, and no crate reads
//! one of them around `softroce::env`.

use std::path::{Path, PathBuf};

use softroce::env::{Scope, VARS};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..").canonicalize().expect("the workspace root")
}

/// Files under `dir` (recursively) whose name ends in one of `exts`, past
/// build output and fuzz corpora.
fn files(dir: &Path, exts: &[&str], out: &mut Vec<PathBuf>) {
    let Ok(rd) = std::fs::read_dir(dir) else { return };
    for e in rd.flatten() {
        let p = e.path();
        let name = e.file_name().to_string_lossy().into_owned();
        if p.is_dir() {
            if !matches!(name.as_str(), "target" | ".git" | "corpus" | "artifacts") {
                files(&p, exts, out);
            }
        } else if exts.iter().any(|x| name.ends_with(x)) || name == "run" {
            out.push(p);
        }
    }
}

/// The `SOFTROCE_[A-Z0-9_]+` words of `text`.
fn names(text: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let mut rest = text;
    while let Some(i) = rest.find("SOFTROCE_") {
        let tail = &rest[i..];
        let n = tail.find(|c: char| !(c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_')).unwrap_or(tail.len());
        // `SOFTROCE_*` and `"SOFTROCE_` name the prefix, not a variable.
        if n > "SOFTROCE_".len() {
            out.push(&tail[..n]);
        }
        rest = &tail[n.max(1)..];
    }
    out
}

#[test]
fn every_variable_named_anywhere_is_in_the_table() {
    let root = root();
    let mut all = Vec::new();
    for d in ["crates", "scripts", ".ci", "docs"] {
        files(&root.join(d), &[".rs", ".sh", ".py", ".c", ".md"], &mut all);
    }
    all.push(root.join("README.md"));
    assert!(all.len() > 100, "the walk found {} files", all.len());
    let mut missing = Vec::new();
    for f in &all {
        let text = std::fs::read_to_string(f).unwrap_or_default();
        for n in names(&text) {
            // The C tests' header guard is no variable.
            if n != "SOFTROCE_C_API_COMMON_H" && !VARS.iter().any(|v| v.name == n) {
                missing.push(format!("{n} ({})", f.strip_prefix(&root).unwrap_or(f).display()));
            }
        }
    }
    missing.sort();
    missing.dedup();
    assert!(missing.is_empty(), "not in softroce::env::VARS: {missing:#?}");
}

#[test]
fn the_readme_table_lists_the_run_time_variables_in_order() {
    let readme = std::fs::read_to_string(root().join("README.md")).expect("README.md");
    let section = readme.split("### Environment variables").nth(1).expect("the README's section");
    let listed: Vec<&str> =
        section.lines().filter_map(|l| l.strip_prefix("| `")).filter_map(|l| names(l).first().copied()).collect();
    let run: Vec<&str> = VARS.iter().filter(|v| v.scope == Scope::Run).map(|v| v.name).collect();
    assert_eq!(listed, run, "the README's table against softroce::env::VARS");
}

#[test]
fn run_time_variables_are_read_through_softroce_env_only() {
    let root = root();
    let mut srcs = Vec::new();
    for c in std::fs::read_dir(root.join("crates")).expect("crates/").flatten() {
        files(&c.path().join("src"), &[".rs"], &mut srcs);
    }
    let mut around = Vec::new();
    for f in srcs.iter().filter(|f| !f.ends_with("softroce/src/env.rs")) {
        let text = std::fs::read_to_string(f).unwrap_or_default();
        for (i, line) in text.lines().enumerate() {
            // Test knobs (`Scope::Test`) are read where the tests are, in
            // crates below softroce too (roce-proto's `testing` harness).
            let run_var = VARS.iter().any(|v| v.scope == Scope::Run && line.contains(&format!("\"{}\"", v.name)));
            if line.contains("env::var") && run_var {
                around.push(format!("{}:{}: {}", f.strip_prefix(&root).unwrap_or(f).display(), i + 1, line.trim()));
            }
        }
    }
    assert!(around.is_empty(), "read around softroce::env: {around:#?}");
}

#[test]
fn names_are_unique_and_summarised() {
    for (i, v) in VARS.iter().enumerate() {
        assert!(v.name.starts_with("SOFTROCE_") && !v.summary.is_empty(), "{v:?}");
        assert!(VARS[..i].iter().all(|w| w.name != v.name), "{} twice", v.name);
    }
}
