//! Checks the built `libibverbs.so.1` (the cdylib) against rdma-core 44's
//! dynamic ABI, with binutils' `objdump`:
//!
//! - (a) its SONAME is `libibverbs.so.1` and it defines the version nodes
//!   of rdma-core 65 (IBVERBS_1.0 ... 1.18, IBVERBS_PRIVATE_34 and _65,
//!   RDMACM_1.0 ... 1.5);
//! - (b) every symbol the real libibverbs and librdmacm of Debian 12, 13
//!   and sid export (rdma-core 44, 56.1, 65.0: `abi/<suite>.exports`,
//!   derived from the packages by `scripts/abi/derive.py`) is exported at
//!   that version, and nothing else is in those nodes;
//! - (c) every libibverbs/librdmacm symbol any ELF file of those releases'
//!   RDMA packages imports (`abi/<suite>.imports`) resolves here;
//! - (d) the same, read live from the installed binaries: Debian's on this
//!   machine, and those of the release roots `scripts/distro/root.sh`
//!   makes, when they are there (CI makes them).
//!
//! Without `objdump` the tests print "skipped" and pass, unless `CI` is set;
//! likewise for missing Debian binaries in (c).

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

/// The Debian releases whose libibverbs/librdmacm ABI the library serves,
/// as `scripts/abi/derive.py` read it from each release's packages into
/// `abi/<suite>.exports` and `abi/<suite>.imports`.
const SUITES: &[&str] = &["bookworm", "trixie", "sid"];

/// The version nodes the releases' binaries and libraries may require
/// (rdma-core 65's, a superset of 44's and 56's).
const NODES: &[&str] = &[
    "IBVERBS_1.0",
    "IBVERBS_1.1",
    "IBVERBS_1.5",
    "IBVERBS_1.6",
    "IBVERBS_1.7",
    "IBVERBS_1.8",
    "IBVERBS_1.9",
    "IBVERBS_1.10",
    "IBVERBS_1.11",
    "IBVERBS_1.12",
    "IBVERBS_1.13",
    "IBVERBS_1.14",
    "IBVERBS_1.15",
    "IBVERBS_1.16",
    "IBVERBS_1.17",
    "IBVERBS_1.18",
    "IBVERBS_PRIVATE_34",
    "IBVERBS_PRIVATE_65",
    "RDMACM_1.0",
    "RDMACM_1.1",
    "RDMACM_1.2",
    "RDMACM_1.3",
    "RDMACM_1.4",
    "RDMACM_1.5",
];

/// One line of a derived list: a symbol, its node, and the third column
/// (`default`/`compat` in exports, the first importer in imports).
#[derive(Debug, Clone)]
struct Listed {
    name: String,
    node: String,
    third: String,
}

/// `abi/<suite>.<kind>`, committed beside the crate.
fn derived(suite: &str, kind: &str) -> Vec<Listed> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("abi").join(format!("{suite}.{kind}"));
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("reading {}: {e}", path.display()));
    let rows: Vec<Listed> = text
        .lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            assert!(f.len() >= 3, "{}: malformed line {l:?}", path.display());
            Listed { name: f[0].to_string(), node: f[1].to_string(), third: f[2].to_string() }
        })
        .collect();
    assert!(rows.len() > 100, "{}: only {} entries", path.display(), rows.len());
    rows
}

/// Whether `node` is one of libibverbs' private (provider) nodes, where
/// which of our two bindings is the default does not matter to the loader.
fn private(node: &str) -> bool {
    node.starts_with("IBVERBS_PRIVATE_")
}

/// Where Debian puts the shared libraries that import from libibverbs.
const LIBDIR: &str = "/usr/lib/x86_64-linux-gnu";
/// pyverbs' extension modules (searched recursively for `.so` files).
const PYVERBS: &str = "/usr/lib/python3/dist-packages/pyverbs";

fn under_ci() -> bool {
    std::env::var_os("CI").is_some()
}

/// Skips (returns false) when `what` is unavailable, unless under CI.
fn available(ok: bool, what: &str) -> bool {
    if !ok {
        assert!(!under_ci(), "{what} is required under CI");
        eprintln!("skipped: {what} is not available");
    }
    ok
}

fn have_objdump() -> bool {
    static HAVE: OnceLock<bool> = OnceLock::new();
    *HAVE.get_or_init(|| Command::new("objdump").arg("--version").output().is_ok_and(|o| o.status.success()))
}

fn objdump(flag: &str, file: &Path) -> String {
    let out = Command::new("objdump")
        .arg(flag)
        .arg(file)
        .output()
        .unwrap_or_else(|e| panic!("running objdump {flag} {}: {e}", file.display()));
    assert!(out.status.success(), "objdump {flag} {} failed: {}", file.display(), String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).expect("objdump prints text")
}

/// One dynamic symbol: its name, its version (without parentheses), whether
/// that version is the default one (`name@@V`, printed without
/// parentheses), and whether it is undefined.
#[derive(Debug, Clone, PartialEq, Eq)]
struct DynSym {
    name: String,
    version: String,
    default: bool,
    undefined: bool,
}

/// Parses `objdump -T`: `ADDR FLAGS SECTION\tSIZE VERSION NAME`, where an
/// undefined symbol's section is `*UND*` and a non-default version is in
/// parentheses. Version-definition symbols (`*ABS*`, named as their node)
/// are left out.
fn dynamic_symbols(file: &Path) -> Vec<DynSym> {
    let text = objdump("-T", file);
    let mut syms = Vec::new();
    for line in text.lines() {
        let Some((left, right)) = line.split_once('\t') else { continue };
        if !left.starts_with(|c: char| c.is_ascii_hexdigit()) {
            continue;
        }
        let fields: Vec<&str> = right.split_whitespace().collect();
        if fields.len() < 3 {
            continue;
        }
        let (raw_version, name) = (fields[fields.len() - 2], fields[fields.len() - 1]);
        let version = raw_version.trim_start_matches('(').trim_end_matches(')');
        if left.contains("*ABS*") && name == version {
            continue;
        }
        syms.push(DynSym {
            name: name.to_string(),
            version: version.to_string(),
            default: !raw_version.starts_with('('),
            undefined: left.contains("*UND*"),
        });
    }
    syms
}

/// The cdylib's defined exports, by name (its `objdump -T`, read once).
fn exports() -> &'static BTreeMap<String, Vec<DynSym>> {
    static EXPORTS: OnceLock<BTreeMap<String, Vec<DynSym>>> = OnceLock::new();
    EXPORTS.get_or_init(|| {
        let mut map: BTreeMap<String, Vec<DynSym>> = BTreeMap::new();
        for s in dynamic_symbols(&common::cdylib()).into_iter().filter(|s| !s.undefined) {
            map.entry(s.name.clone()).or_default().push(s);
        }
        map
    })
}

#[test]
fn soname_and_version_nodes() {
    if !available(have_objdump(), "objdump (binutils)") {
        return;
    }
    let text = objdump("-p", &common::cdylib());
    let soname = text.lines().find_map(|l| l.trim().strip_prefix("SONAME")).map(str::trim);
    assert_eq!(soname, Some("libibverbs.so.1"), "SONAME");

    // "Version definitions:" lists `INDEX FLAGS HASH NAME`, then (GNU ld)
    // indented parent names, up to a blank line.
    let defs: BTreeSet<&str> = text
        .lines()
        .skip_while(|l| !l.starts_with("Version definitions:"))
        .skip(1)
        .take_while(|l| !l.trim().is_empty())
        .filter_map(|l| match l.split_whitespace().collect::<Vec<_>>().as_slice() {
            [index, _flags, _hash, name] if index.parse::<u32>().is_ok() => Some(*name),
            _ => None,
        })
        .collect();
    let missing: Vec<&&str> = NODES.iter().filter(|n| !defs.contains(**n)).collect();
    assert!(missing.is_empty(), "version nodes not defined: {missing:?} (defined: {defs:?})");
}

#[test]
fn every_release_export_is_served_at_its_version() {
    if !available(have_objdump(), "objdump (binutils)") {
        return;
    }
    let exports = exports();
    let mut wrong = BTreeSet::new();
    let mut checked = 0;
    for suite in SUITES {
        // `compat` rows are the hidden IBVERBS_1.0 twins of the 1.1 verbs
        // (the ABI of 2006): no binary of these releases imports them, as
        // `every_release_import_resolves` shows.
        for e in derived(suite, "exports").into_iter().filter(|e| e.third == "default") {
            checked += 1;
            let defs = exports.get(&e.name);
            let ok = defs.is_some_and(|defs| {
                if private(&e.node) {
                    defs.iter().any(|d| d.version == e.node)
                } else {
                    // The default version must be the listed one; a compat
                    // twin (`name@OLD`) next to it would be harmless.
                    defs.iter().any(|d| d.default && d.version == e.node)
                        && defs.iter().all(|d| !d.default || d.version == e.node)
                }
            });
            if !ok {
                let got: Vec<String> = defs
                    .into_iter()
                    .flatten()
                    .map(|d| format!("{}{}", if d.default { "@@" } else { "@" }, d.version))
                    .collect();
                wrong.insert(format!("{}@@{} ({suite}): exported as {got:?}", e.name, e.node));
            }
        }
    }
    assert!(wrong.is_empty(), "{} of {checked} symbols wrong:\n{}", wrong.len(), Vec::from_iter(wrong).join("\n"));
}

#[test]
fn nothing_else_in_a_default_node() {
    if !available(have_objdump(), "objdump (binutils)") {
        return;
    }
    let listed: BTreeSet<(String, String)> =
        SUITES.iter().flat_map(|s| derived(s, "exports")).map(|e| (e.name, e.node)).collect();
    let extra: Vec<String> = exports()
        .values()
        .flatten()
        .filter(|s| s.version.starts_with("IBVERBS_") || s.version.starts_with("RDMACM_"))
        .filter(|s| !listed.contains(&(s.name.clone(), s.version.clone())) && !s.name.starts_with("__softroce_"))
        .map(|s| format!("{}@{}", s.name, s.version))
        .collect();
    assert!(extra.is_empty(), "exported but in no release's set: {extra:?}");
}

#[test]
fn every_release_import_resolves() {
    if !available(have_objdump(), "objdump (binutils)") {
        return;
    }
    let exports = exports();
    let mut unresolved = Vec::new();
    let mut checked = 0;
    for suite in SUITES {
        for i in derived(suite, "imports") {
            checked += 1;
            if !exports.get(&i.name).is_some_and(|defs| defs.iter().any(|d| d.version == i.node)) {
                unresolved.push(format!("{}@{} ({suite}: needed by {})", i.name, i.node, i.third));
            }
        }
    }
    assert!(unresolved.is_empty(), "{} of {checked} imports unresolved:\n{}", unresolved.len(), unresolved.join("\n"));
}

/// The ELF files whose libibverbs imports must resolve: the rdma-core
/// tools, perftest, qperf, librdmacm/libmlx5/libefa and pyverbs' modules.
/// Also returns the names of the expected ones that are missing.
fn consumers() -> (Vec<PathBuf>, Vec<String>) {
    let mut found = Vec::new();
    let mut missing = Vec::new();
    let is_elf = |p: &Path| std::fs::read(p).is_ok_and(|b| b.starts_with(b"\x7fELF"));

    let bin = Path::new("/usr/bin");
    let mut bins: Vec<PathBuf> = std::fs::read_dir(bin)
        .map(|rd| {
            rd.filter_map(|e| e.ok().map(|e| e.path()))
                .filter(|p| {
                    let n = p.file_name().and_then(|n| n.to_str()).unwrap_or("");
                    n.starts_with("ibv_")
                        || (n.starts_with("ib_") && (n.ends_with("_bw") || n.ends_with("_lat")))
                        || n == "qperf"
                })
                .collect()
        })
        .unwrap_or_default();
    bins.sort();
    // The ones each package is known to ship.
    for (pkg, name) in [
        ("ibverbs-utils", "ibv_devinfo"),
        ("ibverbs-utils", "ibv_rc_pingpong"),
        ("perftest", "ib_write_bw"),
        ("qperf", "qperf"),
    ] {
        if !bins.iter().any(|p| p.file_name().is_some_and(|n| n == name)) {
            missing.push(format!("/usr/bin/{name} ({pkg})"));
        }
    }
    found.extend(bins.into_iter().filter(|p| is_elf(p)));

    for lib in ["librdmacm.so.1", "libmlx5.so.1", "libefa.so.1"] {
        let p = Path::new(LIBDIR).join(lib);
        if p.exists() {
            found.push(p);
        } else {
            missing.push(p.display().to_string());
        }
    }

    let mut stack = vec![PathBuf::from(PYVERBS)];
    let mut modules = Vec::new();
    while let Some(dir) = stack.pop() {
        let Ok(rd) = std::fs::read_dir(&dir) else { continue };
        for e in rd.flatten() {
            let p = e.path();
            if p.is_dir() {
                stack.push(p);
            } else if p.extension().is_some_and(|x| x == "so") {
                modules.push(p);
            }
        }
    }
    if modules.is_empty() {
        missing.push(format!("{PYVERBS}/*.so (python3-pyverbs)"));
    }
    modules.sort();
    found.extend(modules.into_iter().filter(|p| is_elf(p)));
    (found, missing)
}

#[test]
fn debian_binaries_imports_resolve() {
    if !available(have_objdump(), "objdump (binutils)") {
        return;
    }
    let (files, missing) = consumers();
    if !missing.is_empty() {
        assert!(!under_ci(), "rdma-core binaries missing under CI: {missing:?}");
        eprintln!("skipped for the missing rdma-core binaries: {missing:?}");
    }
    if files.is_empty() {
        return;
    }
    let exports = exports();
    let mut imports: BTreeMap<(String, String), Vec<String>> = BTreeMap::new();
    for f in &files {
        for s in dynamic_symbols(f) {
            if s.undefined && s.version.starts_with("IBVERBS_") {
                let who = f.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
                imports.entry((s.name, s.version)).or_default().push(who);
            }
        }
    }
    assert!(!imports.is_empty(), "no IBVERBS imports found in {} files", files.len());
    let unresolved: Vec<String> = imports
        .iter()
        .filter(|((name, version), _)| {
            !exports.get(name).is_some_and(|defs| defs.iter().any(|d| &d.version == version))
        })
        .map(|((name, version), who)| {
            let more = if who.len() > 3 { format!(" and {} more", who.len() - 3) } else { String::new() };
            format!("{name}@{version} (needed by {}{more})", who[..who.len().min(3)].join(", "))
        })
        .collect();
    assert!(
        unresolved.is_empty(),
        "{} of {} imports from {} files unresolved:\n{}",
        unresolved.len(),
        imports.len(),
        files.len(),
        unresolved.join("\n")
    );
}

/// (d) for the release roots `scripts/distro/root.sh` makes (CI makes
/// them): `scripts/abi/derive.py` reads, live, what every ELF file of
/// Debian 13's and sid's installed RDMA packages imports from
/// libibverbs/librdmacm, and each import must resolve here. Skipped where
/// a root is missing, except under CI.
#[test]
fn release_roots_binaries_imports_resolve() {
    if !available(have_objdump(), "objdump (binutils)") {
        return;
    }
    let cache = std::env::var_os("SOFTROCE_DISTRO_CACHE")
        .map_or_else(|| PathBuf::from("/var/cache/softroce/distros"), PathBuf::from);
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/abi/derive.py");
    let exports = exports();
    for suite in ["trixie", "sid"] {
        let root = cache.join(suite);
        if !available(root.join(".softroce-stamp").is_file(), &format!("the {suite} root ({})", root.display())) {
            continue;
        }
        let out = std::env::temp_dir().join(format!("softroce-abi-{suite}-{}", std::process::id()));
        let o = Command::new("python3").arg(&script).arg(suite).arg(&root).arg(&out).output().unwrap();
        assert!(o.status.success(), "derive.py {suite}: {}", String::from_utf8_lossy(&o.stderr));
        let text = std::fs::read_to_string(out.join(format!("{suite}.imports"))).unwrap();
        let _ = std::fs::remove_dir_all(&out);
        let imports: Vec<(&str, &str, &str)> = text
            .lines()
            .filter(|l| !l.starts_with('#'))
            .filter_map(|l| {
                let f: Vec<&str> = l.split_whitespace().collect();
                (f.len() >= 3).then(|| (f[0], f[1], f[2]))
            })
            .collect();
        assert!(imports.len() > 150, "{suite}: only {} imported symbols found", imports.len());
        let unresolved: Vec<String> = imports
            .iter()
            .filter(|(name, node, _)| !exports.get(*name).is_some_and(|d| d.iter().any(|d| d.version == *node)))
            .map(|(name, node, who)| format!("{name}@{node} (needed by {who})"))
            .collect();
        assert!(unresolved.is_empty(), "{suite}: {} imports unresolved:\n{}", unresolved.len(), unresolved.join("\n"));
        println!("{suite}: {} imported symbols, all resolved", imports.len());
    }
}
