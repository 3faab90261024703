//! Cross-checks the ABI mirrors against the installed rdma-core header: a C
//! probe generated from `abi::LAYOUT` (and `abi::consts::ALL`) is compiled by
//! the system `cc` against `<infiniband/verbs.h>`, and every offset, size and
//! constant it prints must equal the Rust value.
//!
//! Without `/usr/include/infiniband/verbs.h` the header checks are skipped,
//! except under CI (env `CI` set), which installs libibverbs-dev and must fail.
//!
//! The same probe is also compiled by the compiler of each later Debian
//! release's root (`scripts/distro/root.sh`: rdma-core 56.1 in trixie, 65.0
//! in sid) against that release's header: rdma-core 44's members must keep
//! their places there, the members those headers added where
//! `abi::GROWN` says, and `verbs_context`, which grows at its start, the
//! distance of each op to its `context` (what the header's inline verbs
//! reach through). Skipped when a root is missing or not root, except
//! under CI.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

use softroce_ibverbs::abi::{FieldLayout, GROWN, LAYOUT, consts};

const HEADER: &str = "/usr/include/infiniband/verbs.h";

/// Every C type the library mirrors; each must have entries in `LAYOUT`.
const REQUIRED: &[&str] = &[
    "ibv_device",
    "ibv_context",
    "ibv_context_ops",
    "verbs_context",
    "ibv_pd",
    "ibv_mr",
    "ibv_cq",
    "ibv_qp",
    "ibv_srq",
    "ibv_ah",
    "ibv_comp_channel",
    "ibv_wc",
    "ibv_send_wr",
    "ibv_recv_wr",
    "ibv_sge",
    "ibv_qp_attr",
    "ibv_qp_cap",
    "ibv_port_attr",
    "ibv_device_attr",
    "ibv_async_event",
    "ibv_qp_init_attr",
    "ibv_ah_attr",
    "ibv_global_route",
    "ibv_gid",
    "ibv_srq_init_attr",
    "ibv_srq_attr",
    "ibv_cq_ex",
    "ibv_qp_ex",
    "ibv_device_attr_ex",
    "ibv_odp_caps",
    "ibv_tso_caps",
    "ibv_rss_caps",
    "ibv_packet_pacing_caps",
    "ibv_tm_caps",
    "ibv_cq_moderation_caps",
    "ibv_moderate_cq",
    "ibv_modify_cq_attr",
    "ibv_pci_atomic_caps",
    "ibv_query_device_ex_input",
    "ibv_gid_entry",
    "ibv_qp_init_attr_ex",
    "ibv_rx_hash_conf",
    "ibv_cq_init_attr_ex",
    "ibv_srq_init_attr_ex",
    "ibv_tm_cap",
    "ibv_poll_cq_attr",
    "ibv_mw",
    "ibv_mw_bind",
    "ibv_mw_bind_info",
    "ibv_xrcd",
    "ibv_wq",
    "ibv_values_ex",
    "ibv_data_buf",
];

/// The mirrored C types that are unions (`offsetof` needs `union X`).
const UNIONS: &[&str] = &["ibv_gid"];

/// Whether the header is there to check against; without it, skips (prints
/// why) outside CI and fails under CI.
fn header_available() -> bool {
    if Path::new(HEADER).exists() {
        return true;
    }
    assert!(
        std::env::var_os("CI").is_none(),
        "{HEADER} is missing: CI must install libibverbs-dev for the ABI layout checks"
    );
    println!("skipped: libibverbs-dev not installed");
    false
}

/// A unique directory under the system temp dir, removed on drop.
struct ScratchDir(PathBuf);

impl ScratchDir {
    fn new(tag: &str) -> Self {
        static COUNTER: AtomicUsize = AtomicUsize::new(0);
        let nanos = SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_nanos()).unwrap_or(0);
        let n = COUNTER.fetch_add(1, Ordering::Relaxed);
        let dir = std::env::temp_dir().join(format!("softroce-ibverbs-{tag}-{}-{nanos}-{n}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("creating {}: {e}", dir.display()));
        Self(dir)
    }
}

impl Drop for ScratchDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Compiles `main_body` (statements) into a C program that includes
/// `<infiniband/verbs.h>`, runs it, and returns what it printed.
fn run_probe(tag: &str, main_body: &str) -> String {
    let dir = ScratchDir::new(tag);
    let src = dir.0.join("probe.c");
    let exe = dir.0.join("probe");
    let program = format!(
        "#include <stddef.h>\n#include <stdio.h>\n#include <infiniband/verbs.h>\n\nint main(void)\n{{\n{main_body}\treturn 0;\n}}\n"
    );
    std::fs::write(&src, &program).unwrap_or_else(|e| panic!("writing {}: {e}", src.display()));

    let cc = Command::new("cc")
        .arg("-o")
        .arg(&exe)
        .arg(&src)
        .output()
        .unwrap_or_else(|e| panic!("running cc (a C compiler is needed for the ABI checks): {e}"));
    assert!(
        cc.status.success(),
        "cc failed to compile the {tag} probe ({}):\n{}\n--- probe.c ---\n{program}",
        cc.status,
        String::from_utf8_lossy(&cc.stderr)
    );

    let run = Command::new(&exe).output().unwrap_or_else(|e| panic!("running {}: {e}", exe.display()));
    assert!(run.status.success(), "the {tag} probe failed: {}", run.status);
    String::from_utf8(run.stdout).expect("the probe prints ASCII")
}

fn c_type(strukt: &str) -> String {
    if UNIONS.contains(&strukt) { format!("union {strukt}") } else { format!("struct {strukt}") }
}

#[test]
fn layout_matches_the_installed_header() {
    if !header_available() {
        return;
    }
    let mut body = String::new();
    for e in LAYOUT {
        let ty = c_type(e.strukt);
        let (offset, size) = if e.field == "(sizeof)" {
            ("(size_t)0".to_owned(), format!("sizeof({ty})"))
        } else {
            (format!("offsetof({ty}, {})", e.field), format!("sizeof((({ty} *)0)->{})", e.field))
        };
        writeln!(body, "\tprintf(\"%s %s %zu %zu\\n\", \"{}\", \"{}\", {offset}, {size});", e.strukt, e.field).unwrap();
    }
    let out = run_probe("layout", &body);
    let c_lines: Vec<&str> = out.lines().collect();
    assert_eq!(c_lines.len(), LAYOUT.len(), "the probe printed {} lines for {} entries", c_lines.len(), LAYOUT.len());

    let mismatches: Vec<String> = LAYOUT
        .iter()
        .zip(&c_lines)
        .filter_map(|(e, c)| {
            let rust = format!("{} {} {} {}", e.strukt, e.field, e.offset, e.size);
            (rust != *c).then(|| format!("  Rust `{rust}` but C `{c}`"))
        })
        .collect();
    assert!(
        mismatches.is_empty(),
        "{} of {} layout entries (struct field offset size) differ from {HEADER}:\n{}",
        mismatches.len(),
        LAYOUT.len(),
        mismatches.join("\n")
    );
}

#[test]
fn consts_match_the_installed_header() {
    if !header_available() {
        return;
    }
    let mut body = String::new();
    for (name, value) in consts::ALL {
        if *value < 0 {
            writeln!(body, "\tprintf(\"%s %lld\\n\", \"{name}\", (long long)({name}));").unwrap();
        } else {
            writeln!(body, "\tprintf(\"%s %llu\\n\", \"{name}\", (unsigned long long)({name}));").unwrap();
        }
    }
    let out = run_probe("consts", &body);
    let c_lines: Vec<&str> = out.lines().collect();
    assert_eq!(c_lines.len(), consts::ALL.len(), "the probe printed {} lines", c_lines.len());

    let mismatches: Vec<String> = consts::ALL
        .iter()
        .zip(&c_lines)
        .filter_map(|((name, value), c)| {
            let rust = format!("{name} {value}");
            (rust != *c).then(|| format!("  Rust `{rust}` but C `{c}`"))
        })
        .collect();
    assert!(
        mismatches.is_empty(),
        "{} of {} constants differ from {HEADER}:\n{}",
        mismatches.len(),
        consts::ALL.len(),
        mismatches.join("\n")
    );
}

#[test]
fn layout_covers_every_mirrored_struct() {
    let present: BTreeSet<&str> = LAYOUT.iter().map(|e| e.strukt).collect();
    let missing: Vec<&str> = REQUIRED.iter().copied().filter(|s| !present.contains(s)).collect();
    assert!(missing.is_empty(), "LAYOUT has no entries for: {}", missing.join(", "));
    assert!(LAYOUT.len() > 300, "LAYOUT has only {} entries", LAYOUT.len());

    // One "(sizeof)" per struct, no duplicate member, every member inside its struct.
    let mut sizes = BTreeMap::new();
    for e in LAYOUT.iter().filter(|e| e.field == "(sizeof)") {
        assert!(sizes.insert(e.strukt, e.size).is_none(), "{} has two (sizeof) entries", e.strukt);
    }
    let mut seen = BTreeSet::new();
    let mut problems = Vec::new();
    for e in LAYOUT {
        if !seen.insert((e.strukt, e.field)) {
            problems.push(format!("  {}.{} is listed twice", e.strukt, e.field));
        }
        match sizes.get(e.strukt) {
            None => problems.push(format!("  {} has no (sizeof) entry", e.strukt)),
            Some(&size) if e.offset + e.size > size => problems
                .push(format!("  {}.{} ({}+{}) overruns the struct ({size})", e.strukt, e.field, e.offset, e.size)),
            Some(_) => {}
        }
    }
    assert!(problems.is_empty(), "LAYOUT is inconsistent:\n{}", problems.join("\n"));
}

/// Compiles and runs the probe with the compiler and headers of the
/// release root `root` (chrooted); returns what it printed.
fn run_probe_in(root: &Path, tag: &str, main_body: &str) -> String {
    let name = format!("softroce-probe-{tag}-{}", std::process::id());
    let src = root.join("tmp").join(format!("{name}.c"));
    let program = format!(
        "#include <stddef.h>\n#include <stdio.h>\n#include <infiniband/verbs.h>\n\nint main(void)\n{{\n{main_body}\treturn 0;\n}}\n"
    );
    std::fs::write(&src, &program).unwrap_or_else(|e| panic!("writing {}: {e}", src.display()));
    let inside = format!("/tmp/{name}");
    let cc = Command::new("chroot").arg(root).args(["cc", "-o", &inside, &format!("{inside}.c")]).output();
    let _ = std::fs::remove_file(&src);
    let cc = cc.unwrap_or_else(|e| panic!("running chroot {} cc: {e}", root.display()));
    assert!(
        cc.status.success(),
        "{}'s cc failed on the {tag} probe:\n{}\n--- probe.c ---\n{program}",
        root.display(),
        String::from_utf8_lossy(&cc.stderr)
    );
    let run = Command::new("chroot").arg(root).arg(&inside).output();
    let _ = std::fs::remove_file(root.join("tmp").join(&name));
    let run = run.unwrap_or_else(|e| panic!("running the probe in {}: {e}", root.display()));
    assert!(run.status.success(), "the {tag} probe failed in {}: {}", root.display(), run.status);
    String::from_utf8(run.stdout).expect("the probe prints ASCII")
}

/// The probe's line for `e`, `STRUCT FIELD OFFSET SIZE`, and the line the
/// mirror expects. For members of `verbs_context` (which grows at its
/// start) the offset is the signed distance from its `context` member at
/// `context_at`.
fn probe_line(e: &FieldLayout, context_at: usize) -> (String, String) {
    let ty = c_type(e.strukt);
    let size =
        if e.field == "(sizeof)" { format!("sizeof({ty})") } else { format!("sizeof((({ty} *)0)->{})", e.field) };
    let (offset, expect) = if e.field == "(sizeof)" {
        ("0L".to_owned(), "0".to_owned())
    } else if e.strukt == "verbs_context" {
        (
            format!("(long)offsetof({ty}, {}) - (long)offsetof({ty}, context)", e.field),
            (e.offset as i64 - context_at as i64).to_string(),
        )
    } else {
        (format!("(long)offsetof({ty}, {})", e.field), e.offset.to_string())
    };
    (
        format!("\tprintf(\"%s %s %ld %zu\\n\", \"{}\", \"{}\", {offset}, {size});\n", e.strukt, e.field),
        format!("{} {} {expect} {}", e.strukt, e.field, e.size),
    )
}

/// Releases whose headers the library must match: (Debian suite, rdma-core major).
const RELEASES: &[(&str, u32)] = &[("trixie", 56), ("sid", 65)];

#[test]
fn layout_holds_in_every_releases_header() {
    let cache = std::env::var_os("SOFTROCE_DISTRO_CACHE")
        .map_or_else(|| PathBuf::from("/var/cache/softroce/distros"), PathBuf::from);
    let context_at = LAYOUT
        .iter()
        .find(|e| e.strukt == "verbs_context" && e.field == "context")
        .expect("verbs_context.context is mirrored")
        .offset;
    for &(suite, version) in RELEASES {
        let root = cache.join(suite);
        let have = root.join("usr/include/infiniband/verbs.h").is_file() && root.join("usr/bin/cc").exists();
        // /proc/self belongs to the process's effective user.
        let root_user = std::os::unix::fs::MetadataExt::uid(&std::fs::metadata("/proc/self").unwrap()) == 0;
        if !have || !root_user {
            let msg = format!("{suite}: no release root with libibverbs-dev at {}, or not root", root.display());
            assert!(std::env::var_os("CI").is_none(), "CI is set and {msg}");
            println!("skipped: {msg}");
            continue;
        }
        // What each entry must read in this release's header.
        let grown: Vec<FieldLayout> = GROWN.iter().filter(|g| g.since <= version).map(|g| g.layout).collect();
        let mut want: Vec<FieldLayout> = LAYOUT
            .iter()
            .filter(|e| !grown.iter().any(|g| g.strukt == e.strukt && g.field == e.field))
            // verbs_context's size grows with every op added at its start.
            .filter(|e| !(e.strukt == "verbs_context" && e.field == "(sizeof)"))
            .copied()
            .collect();
        want.extend(grown);
        let lines: Vec<(String, String)> = want.iter().map(|e| probe_line(e, context_at)).collect();
        let body: String = lines.iter().map(|(p, _)| p.as_str()).collect();
        let out = run_probe_in(&root, suite, &body);
        let c_lines: Vec<&str> = out.lines().collect();
        assert_eq!(c_lines.len(), want.len(), "{suite}: the probe printed {} lines", c_lines.len());
        let mismatches: Vec<String> = lines
            .iter()
            .zip(&c_lines)
            .filter(|((_, rust), c)| rust != *c)
            .map(|((_, rust), c)| format!("  Rust `{rust}` but C `{c}`"))
            .collect();
        assert!(
            mismatches.is_empty(),
            "{} of {} entries differ from rdma-core {version}'s header ({suite}):\n{}",
            mismatches.len(),
            want.len(),
            mismatches.join("\n")
        );
    }
}
