//! Checks the built `libibverbs.so.1` (the cdylib) against rdma-core 44's
//! dynamic ABI, with binutils' `objdump`:
//!
//! - (a) its SONAME is `libibverbs.so.1` and it defines the version nodes
//!   IBVERBS_1.0, 1.1, 1.5 ... 1.14 and IBVERBS_PRIVATE_34;
//! - (b) every symbol of [`SYMBOLS`] (the real library's default-versioned
//!   set) is exported with exactly that default version;
//! - (c) when Debian's rdma-core binaries are installed, every libibverbs
//!   symbol they import (read live from them) is exported with the version
//!   they ask for;
//! - (d) nothing else is exported in a default IBVERBS node (the
//!   `__softroce_*` names the `.symver` aliases point at are allowed).
//!
//! Without `objdump` the tests print "skipped" and pass, unless `CI` is set;
//! likewise for missing Debian binaries in (c).

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

/// rdma-core 44's default-versioned exports (`objdump -T` of Debian 12's
/// `libibverbs.so.1.14.44.0`: `.text` functions in their default node, not
/// the 33 `(IBVERBS_1.0)` compat twins, plus the data symbol
/// `verbs_allow_disassociate_destroy`). 146 symbols.
const SYMBOLS: &[(&str, &str)] = &[
    // IBVERBS_1.0
    ("ibv_copy_path_rec_from_kern", "IBVERBS_1.0"),
    ("ibv_copy_path_rec_to_kern", "IBVERBS_1.0"),
    ("ibv_copy_qp_attr_from_kern", "IBVERBS_1.0"),
    ("ibv_create_comp_channel", "IBVERBS_1.0"),
    ("ibv_destroy_comp_channel", "IBVERBS_1.0"),
    ("ibv_get_sysfs_path", "IBVERBS_1.0"),
    ("ibv_rate_to_mult", "IBVERBS_1.0"),
    ("ibv_read_sysfs_file", "IBVERBS_1.0"),
    ("mult_to_ibv_rate", "IBVERBS_1.0"),
    // IBVERBS_1.1
    ("ibv_ack_async_event", "IBVERBS_1.1"),
    ("ibv_ack_cq_events", "IBVERBS_1.1"),
    ("ibv_alloc_pd", "IBVERBS_1.1"),
    ("ibv_attach_mcast", "IBVERBS_1.1"),
    ("ibv_close_device", "IBVERBS_1.1"),
    ("ibv_copy_ah_attr_from_kern", "IBVERBS_1.1"),
    ("ibv_create_ah", "IBVERBS_1.1"),
    ("ibv_create_ah_from_wc", "IBVERBS_1.1"),
    ("ibv_create_cq", "IBVERBS_1.1"),
    ("ibv_create_qp", "IBVERBS_1.1"),
    ("ibv_create_srq", "IBVERBS_1.1"),
    ("ibv_dealloc_pd", "IBVERBS_1.1"),
    ("ibv_dereg_mr", "IBVERBS_1.1"),
    ("ibv_destroy_ah", "IBVERBS_1.1"),
    ("ibv_destroy_cq", "IBVERBS_1.1"),
    ("ibv_destroy_qp", "IBVERBS_1.1"),
    ("ibv_destroy_srq", "IBVERBS_1.1"),
    ("ibv_detach_mcast", "IBVERBS_1.1"),
    ("ibv_dofork_range", "IBVERBS_1.1"),
    ("ibv_dontfork_range", "IBVERBS_1.1"),
    ("ibv_event_type_str", "IBVERBS_1.1"),
    ("ibv_fork_init", "IBVERBS_1.1"),
    ("ibv_free_device_list", "IBVERBS_1.1"),
    ("ibv_get_async_event", "IBVERBS_1.1"),
    ("ibv_get_cq_event", "IBVERBS_1.1"),
    ("ibv_get_device_guid", "IBVERBS_1.1"),
    ("ibv_get_device_list", "IBVERBS_1.1"),
    ("ibv_get_device_name", "IBVERBS_1.1"),
    ("ibv_init_ah_from_wc", "IBVERBS_1.1"),
    ("ibv_modify_qp", "IBVERBS_1.1"),
    ("ibv_modify_srq", "IBVERBS_1.1"),
    ("ibv_node_type_str", "IBVERBS_1.1"),
    ("ibv_open_device", "IBVERBS_1.1"),
    ("ibv_port_state_str", "IBVERBS_1.1"),
    ("ibv_query_device", "IBVERBS_1.1"),
    ("ibv_query_gid", "IBVERBS_1.1"),
    ("ibv_query_pkey", "IBVERBS_1.1"),
    ("ibv_query_port", "IBVERBS_1.1"),
    ("ibv_query_qp", "IBVERBS_1.1"),
    ("ibv_query_srq", "IBVERBS_1.1"),
    ("ibv_rate_to_mbps", "IBVERBS_1.1"),
    ("ibv_reg_mr", "IBVERBS_1.1"),
    ("ibv_rereg_mr", "IBVERBS_1.1"),
    ("ibv_resize_cq", "IBVERBS_1.1"),
    ("ibv_resolve_eth_l2_from_gid", "IBVERBS_1.1"),
    ("ibv_wc_status_str", "IBVERBS_1.1"),
    ("mbps_to_ibv_rate", "IBVERBS_1.1"),
    // IBVERBS_1.5
    ("ibv_get_pkey_index", "IBVERBS_1.5"),
    // IBVERBS_1.6
    ("ibv_qp_to_qp_ex", "IBVERBS_1.6"),
    // IBVERBS_1.7
    ("ibv_reg_mr_iova", "IBVERBS_1.7"),
    // IBVERBS_1.8
    ("ibv_reg_mr_iova2", "IBVERBS_1.8"),
    // IBVERBS_1.9
    ("ibv_get_device_index", "IBVERBS_1.9"),
    // IBVERBS_1.10
    ("ibv_import_device", "IBVERBS_1.10"),
    ("ibv_import_mr", "IBVERBS_1.10"),
    ("ibv_import_pd", "IBVERBS_1.10"),
    ("ibv_query_ece", "IBVERBS_1.10"),
    ("ibv_set_ece", "IBVERBS_1.10"),
    ("ibv_unimport_mr", "IBVERBS_1.10"),
    ("ibv_unimport_pd", "IBVERBS_1.10"),
    // IBVERBS_1.11
    ("_ibv_query_gid_ex", "IBVERBS_1.11"),
    ("_ibv_query_gid_table", "IBVERBS_1.11"),
    // IBVERBS_1.12
    ("ibv_reg_dmabuf_mr", "IBVERBS_1.12"),
    // IBVERBS_1.13
    ("ibv_import_dm", "IBVERBS_1.13"),
    ("ibv_is_fork_initialized", "IBVERBS_1.13"),
    ("ibv_unimport_dm", "IBVERBS_1.13"),
    // IBVERBS_1.14
    ("ibv_query_qp_data_in_order", "IBVERBS_1.14"),
    // IBVERBS_PRIVATE_34
    ("__ioctl_final_num_attrs", "IBVERBS_PRIVATE_34"),
    ("__verbs_log", "IBVERBS_PRIVATE_34"),
    ("_verbs_init_and_alloc_context", "IBVERBS_PRIVATE_34"),
    ("execute_ioctl", "IBVERBS_PRIVATE_34"),
    ("ibv_cmd_advise_mr", "IBVERBS_PRIVATE_34"),
    ("ibv_cmd_alloc_dm", "IBVERBS_PRIVATE_34"),
    ("ibv_cmd_alloc_mw", "IBVERBS_PRIVATE_34"),
    ("ibv_cmd_alloc_pd", "IBVERBS_PRIVATE_34"),
    ("ibv_cmd_attach_mcast", "IBVERBS_PRIVATE_34"),
    ("ibv_cmd_close_xrcd", "IBVERBS_PRIVATE_34"),
    ("ibv_cmd_create_ah", "IBVERBS_PRIVATE_34"),
    ("ibv_cmd_create_counters", "IBVERBS_PRIVATE_34"),
    ("ibv_cmd_create_cq", "IBVERBS_PRIVATE_34"),
    ("ibv_cmd_create_cq_ex", "IBVERBS_PRIVATE_34"),
    ("ibv_cmd_create_flow", "IBVERBS_PRIVATE_34"),
    ("ibv_cmd_create_flow_action_esp", "IBVERBS_PRIVATE_34"),
    ("ibv_cmd_create_qp", "IBVERBS_PRIVATE_34"),
    ("ibv_cmd_create_qp_ex", "IBVERBS_PRIVATE_34"),
    ("ibv_cmd_create_qp_ex2", "IBVERBS_PRIVATE_34"),
    ("ibv_cmd_create_rwq_ind_table", "IBVERBS_PRIVATE_34"),
    ("ibv_cmd_create_srq", "IBVERBS_PRIVATE_34"),
    ("ibv_cmd_create_srq_ex", "IBVERBS_PRIVATE_34"),
    ("ibv_cmd_create_wq", "IBVERBS_PRIVATE_34"),
    ("ibv_cmd_dealloc_mw", "IBVERBS_PRIVATE_34"),
    ("ibv_cmd_dealloc_pd", "IBVERBS_PRIVATE_34"),
    ("ibv_cmd_dereg_mr", "IBVERBS_PRIVATE_34"),
    ("ibv_cmd_destroy_ah", "IBVERBS_PRIVATE_34"),
    ("ibv_cmd_destroy_counters", "IBVERBS_PRIVATE_34"),
    ("ibv_cmd_destroy_cq", "IBVERBS_PRIVATE_34"),
    ("ibv_cmd_destroy_flow", "IBVERBS_PRIVATE_34"),
    ("ibv_cmd_destroy_flow_action", "IBVERBS_PRIVATE_34"),
    ("ibv_cmd_destroy_qp", "IBVERBS_PRIVATE_34"),
    ("ibv_cmd_destroy_rwq_ind_table", "IBVERBS_PRIVATE_34"),
    ("ibv_cmd_destroy_srq", "IBVERBS_PRIVATE_34"),
    ("ibv_cmd_destroy_wq", "IBVERBS_PRIVATE_34"),
    ("ibv_cmd_detach_mcast", "IBVERBS_PRIVATE_34"),
    ("ibv_cmd_free_dm", "IBVERBS_PRIVATE_34"),
    ("ibv_cmd_get_context", "IBVERBS_PRIVATE_34"),
    ("ibv_cmd_modify_cq", "IBVERBS_PRIVATE_34"),
    ("ibv_cmd_modify_flow_action_esp", "IBVERBS_PRIVATE_34"),
    ("ibv_cmd_modify_qp", "IBVERBS_PRIVATE_34"),
    ("ibv_cmd_modify_qp_ex", "IBVERBS_PRIVATE_34"),
    ("ibv_cmd_modify_srq", "IBVERBS_PRIVATE_34"),
    ("ibv_cmd_modify_wq", "IBVERBS_PRIVATE_34"),
    ("ibv_cmd_open_qp", "IBVERBS_PRIVATE_34"),
    ("ibv_cmd_open_xrcd", "IBVERBS_PRIVATE_34"),
    ("ibv_cmd_poll_cq", "IBVERBS_PRIVATE_34"),
    ("ibv_cmd_post_recv", "IBVERBS_PRIVATE_34"),
    ("ibv_cmd_post_send", "IBVERBS_PRIVATE_34"),
    ("ibv_cmd_post_srq_recv", "IBVERBS_PRIVATE_34"),
    ("ibv_cmd_query_context", "IBVERBS_PRIVATE_34"),
    ("ibv_cmd_query_device_any", "IBVERBS_PRIVATE_34"),
    ("ibv_cmd_query_mr", "IBVERBS_PRIVATE_34"),
    ("ibv_cmd_query_port", "IBVERBS_PRIVATE_34"),
    ("ibv_cmd_query_qp", "IBVERBS_PRIVATE_34"),
    ("ibv_cmd_query_srq", "IBVERBS_PRIVATE_34"),
    ("ibv_cmd_read_counters", "IBVERBS_PRIVATE_34"),
    ("ibv_cmd_reg_dm_mr", "IBVERBS_PRIVATE_34"),
    ("ibv_cmd_reg_dmabuf_mr", "IBVERBS_PRIVATE_34"),
    ("ibv_cmd_reg_mr", "IBVERBS_PRIVATE_34"),
    ("ibv_cmd_req_notify_cq", "IBVERBS_PRIVATE_34"),
    ("ibv_cmd_rereg_mr", "IBVERBS_PRIVATE_34"),
    ("ibv_cmd_resize_cq", "IBVERBS_PRIVATE_34"),
    ("ibv_query_gid_type", "IBVERBS_PRIVATE_34"),
    ("ibv_read_ibdev_sysfs_file", "IBVERBS_PRIVATE_34"),
    ("verbs_allow_disassociate_destroy", "IBVERBS_PRIVATE_34"),
    ("verbs_init_cq", "IBVERBS_PRIVATE_34"),
    ("verbs_open_device", "IBVERBS_PRIVATE_34"),
    ("verbs_register_driver_34", "IBVERBS_PRIVATE_34"),
    ("verbs_set_ops", "IBVERBS_PRIVATE_34"),
    ("verbs_uninit_context", "IBVERBS_PRIVATE_34"),
];

/// The version nodes rdma-core 44's binaries and libraries may require.
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
    "IBVERBS_PRIVATE_34",
];

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
fn every_listed_symbol_has_its_version() {
    if !available(have_objdump(), "objdump (binutils)") {
        return;
    }
    let exports = exports();
    let mut wrong = Vec::new();
    for &(name, version) in SYMBOLS {
        match exports.get(name) {
            None => wrong.push(format!("{name}@@{version}: not exported")),
            Some(defs) => {
                // The default version must be the listed one; a compat twin
                // (`name@OLD`, non-default) next to it would be harmless.
                let ok = defs.iter().any(|d| d.default && d.version == version)
                    && defs.iter().all(|d| !d.default || d.version == version);
                if !ok {
                    let got: Vec<String> =
                        defs.iter().map(|d| format!("{}{}", if d.default { "@@" } else { "@" }, d.version)).collect();
                    wrong.push(format!("{name}@@{version}: exported as {got:?}"));
                }
            }
        }
    }
    assert!(wrong.is_empty(), "{} of {} symbols wrong:\n{}", wrong.len(), SYMBOLS.len(), wrong.join("\n"));
}

#[test]
fn nothing_else_in_an_ibverbs_node() {
    if !available(have_objdump(), "objdump (binutils)") {
        return;
    }
    let listed: BTreeSet<&str> = SYMBOLS.iter().map(|&(n, _)| n).collect();
    let extra: Vec<String> = exports()
        .values()
        .flatten()
        .filter(|s| s.default && s.version.starts_with("IBVERBS_"))
        .filter(|s| !listed.contains(s.name.as_str()) && !s.name.starts_with("__softroce_"))
        .map(|s| format!("{}@@{}", s.name, s.version))
        .collect();
    assert!(extra.is_empty(), "exported but not in rdma-core 44's set: {extra:?}");
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
