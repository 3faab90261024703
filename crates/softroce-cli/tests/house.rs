//! The house's shape, checked: no circle of files within a crate (file
//! `a` naming `crate::b` while `b`, or a file it names, names `crate::a`),
//! except those listed below, which no type move can remove. A new circle
//! fails here with the files and the references that make it.
//!
//! A file's module is its top-level one (`driver/pass.rs` is `driver`);
//! references are `crate::name` and, in a top-level file, `super::name`;
//! comments and `#[cfg(test)] mod tests` are left out.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Circles that stay, by crate: (the files, why).
const KNOWN: &[(&str, &[&str], &str)] = &[(
    "softroce-rsocket",
    &["listen", "socket"],
    "a listening rsocket owns its listener, whose thread makes the rsockets it accepts",
)];

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

/// `src` without comments and without its unit tests.
fn code(src: &str) -> String {
    let src = src.split("#[cfg(test)]\nmod tests").next().unwrap_or("");
    src.lines().map(|l| l.split("//").next().unwrap_or("")).collect::<Vec<_>>().join("\n")
}

/// The identifiers after each `prefix` in `code`.
fn names_after<'a>(code: &'a str, prefix: &str) -> impl Iterator<Item = &'a str> {
    code.match_indices(prefix).filter_map(move |(i, _)| {
        let rest = &code[i + prefix.len()..];
        let end =
            rest.find(|c: char| !(c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')).unwrap_or(rest.len());
        (end > 0).then(|| &rest[..end])
    })
}

/// Each module of the crate at `src` and the modules it names.
fn graph(src: &Path) -> BTreeMap<String, BTreeSet<String>> {
    let mut files = Vec::new();
    rust_files(src, &mut files);
    let mut g: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for f in &files {
        let rel = f.strip_prefix(src).unwrap().with_extension("");
        let parts: Vec<String> = rel.iter().map(|p| p.to_string_lossy().into_owned()).collect();
        let top = parts[0].clone();
        if parts.len() == 1 && (top == "lib" || top == "main") {
            continue;
        }
        let text = code(&std::fs::read_to_string(f).unwrap());
        let mut refs: BTreeSet<String> = names_after(&text, "crate::").map(str::to_owned).collect();
        if parts.len() == 1 {
            refs.extend(names_after(&text, "super::").map(str::to_owned));
        }
        refs.remove(&top);
        g.entry(top).or_default().extend(refs);
    }
    let modules: BTreeSet<String> = g.keys().cloned().collect();
    for refs in g.values_mut() {
        refs.retain(|r| modules.contains(r));
    }
    g
}

/// The strongly connected components of more than one module (Tarjan).
fn circles(g: &BTreeMap<String, BTreeSet<String>>) -> Vec<BTreeSet<String>> {
    struct S<'a> {
        g: &'a BTreeMap<String, BTreeSet<String>>,
        index: BTreeMap<&'a str, usize>,
        low: BTreeMap<&'a str, usize>,
        stack: Vec<&'a str>,
        on: BTreeSet<&'a str>,
        out: Vec<BTreeSet<String>>,
    }
    fn visit<'a>(s: &mut S<'a>, v: &'a str) {
        let i = s.index.len();
        s.index.insert(v, i);
        s.low.insert(v, i);
        s.stack.push(v);
        s.on.insert(v);
        for w in &s.g[v] {
            let w = w.as_str();
            if !s.index.contains_key(w) {
                visit(s, w);
                let lw = s.low[w];
                let lv = s.low.get_mut(v).unwrap();
                *lv = (*lv).min(lw);
            } else if s.on.contains(w) {
                let iw = s.index[w];
                let lv = s.low.get_mut(v).unwrap();
                *lv = (*lv).min(iw);
            }
        }
        if s.low[v] == s.index[v] {
            let mut comp = BTreeSet::new();
            while let Some(w) = s.stack.pop() {
                s.on.remove(w);
                comp.insert(w.to_owned());
                if w == v {
                    break;
                }
            }
            if comp.len() > 1 {
                s.out.push(comp);
            }
        }
    }
    let mut s =
        S { g, index: BTreeMap::new(), low: BTreeMap::new(), stack: Vec::new(), on: BTreeSet::new(), out: Vec::new() };
    for v in g.keys() {
        if !s.index.contains_key(v.as_str()) {
            visit(&mut s, v);
        }
    }
    s.out
}

#[test]
fn no_crate_has_a_circle_of_files_but_the_known_ones() {
    let crates = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
    let mut found = Vec::new();
    let mut names: Vec<PathBuf> = std::fs::read_dir(crates).unwrap().map(|e| e.unwrap().path()).collect();
    names.sort();
    for dir in names {
        let src = dir.join("src");
        if !src.is_dir() {
            continue;
        }
        let name = dir.file_name().unwrap().to_string_lossy().into_owned();
        let g = graph(&src);
        for c in circles(&g) {
            let edges: Vec<String> = c
                .iter()
                .flat_map(|a| g[a].iter().filter(|b| c.contains(*b)).map(move |b| format!("{a} -> {b}")))
                .collect();
            found.push((name.clone(), c, edges));
        }
    }
    let known: Vec<(String, BTreeSet<String>)> =
        KNOWN.iter().map(|(k, m, _)| (k.to_string(), m.iter().map(|s| s.to_string()).collect())).collect();
    let new: Vec<_> = found.iter().filter(|(k, c, _)| !known.contains(&(k.clone(), c.clone()))).collect();
    assert!(new.is_empty(), "circles of files: {new:#?}");
    for (k, c) in &known {
        assert!(
            found.iter().any(|(fk, fc, _)| fk == k && fc == c),
            "the known circle {k} {c:?} is gone: take it off KNOWN"
        );
    }
}

#[test]
fn the_circle_finder_finds_a_circle_and_only_it() {
    let g: BTreeMap<String, BTreeSet<String>> = [("a", &["b"][..]), ("b", &["c"]), ("c", &["a"]), ("d", &["a"])]
        .iter()
        .map(|(k, v)| (k.to_string(), v.iter().map(|s| s.to_string()).collect()))
        .collect();
    let c = circles(&g);
    assert_eq!(c, vec![["a", "b", "c"].iter().map(|s| s.to_string()).collect::<BTreeSet<_>>()]);
    assert_eq!(names_after("use crate::driver::Shared; crate::x", "crate::").collect::<Vec<_>>(), ["driver", "x"]);
    assert_eq!(code("a // crate::b\nc"), "a \nc");
}
