//! The same programs from other Debian releases: Debian 13 (trixie:
//! rdma-core 56.1, perftest 25.01, libfabric 2.1) and sid (rdma-core 65),
//! each from a root that `scripts/distro/root.sh` makes (`release`). The
//! checks are this file's parent's: each
//! program runs under `softroce run` inside the root (`in_release`) and is
//! judged by its own output.
//!
//! perftest 25.01 and UCX link the release's providers (libmlx5, libefa,
//! libhns...), which must find every private libibverbs symbol they
//! import at load: these tests fail at load time where one is missing.
//!
//! Needs root (chroot, mounts). Without a root, or not as root, the tests
//! print a skip line, unless `CI` is set: then they fail.

use std::path::PathBuf;

use super::*;

mod rdma_core_suite;

/// Runs `f` over the programs of `suite`'s root, if there is one.
fn on(suite: &str, f: impl FnOnce()) {
    if let Some(root) = super::release::root(suite) {
        in_release(&root, f);
    }
}

#[test]
fn trixie_ibv_devices_and_ibv_devinfo() {
    on("trixie", ibv_devices_and_ibv_devinfo_show_softroce_lo);
}

#[test]
fn trixie_pingpongs() {
    on("trixie", || {
        ibv_rc_pingpong();
        ibv_rc_pingpong_with_events();
        ibv_ud_pingpong();
        ibv_srq_pingpong();
    });
}

#[test]
fn trixie_perftest_bandwidth() {
    on("trixie", || {
        ib_send_bw();
        ib_write_bw();
        ib_read_bw();
        ib_atomic_bw();
    });
}

#[test]
fn trixie_perftest_latency() {
    on("trixie", || {
        ib_send_lat();
        ib_write_lat();
        ib_read_lat();
        ib_atomic_lat();
    });
}

#[test]
fn trixie_perftest_over_rdma_cm() {
    on("trixie", perftest_over_rdma_cm_send_write_bw_and_read_lat);
}

#[test]
fn trixie_rdmacm_utils() {
    on("trixie", || {
        rping_connects_by_rdma_cm_and_pings_20_times();
        ucmatose_connects_by_rdma_cm();
        udaddy_resolves_by_sidr_and_exchanges_datagrams();
        rstream_runs_over_rsockets_blocking_nonblocking_and_with_rpoll();
    });
}

#[test]
fn trixie_qperf() {
    on("trixie", qperf_rc_tests);
}

#[test]
fn trixie_libfabric_fi_pingpong() {
    on("trixie", libfabric_fi_pingpong_over_verbs_msg_rxm_dgram_and_rxd);
}

#[test]
fn sid_ibv_devices_and_ibv_devinfo() {
    on("sid", ibv_devices_and_ibv_devinfo_show_softroce_lo);
}

#[test]
fn sid_pingpongs() {
    on("sid", || {
        ibv_rc_pingpong();
        ibv_srq_pingpong();
    });
}

#[test]
fn sid_perftest() {
    on("sid", || {
        ib_write_bw();
        ib_send_lat();
    });
}

#[test]
fn sid_rdmacm_utils() {
    on("sid", || {
        rping_connects_by_rdma_cm_and_pings_20_times();
        rstream_runs_over_rsockets_blocking_nonblocking_and_with_rpoll();
    });
}

/// UCX 1.18 lists softroce's device for its verbs transports, and its
/// rdmacm connection manager, whose module (`libuct_rdmacm.so`) links
/// trixie's libmlx5 and so loads only when every provider-private symbol
/// is there.
#[test]
fn trixie_ucx_info_lists_the_verbs_transports_and_the_rdmacm_cm() {
    on("trixie", || {
        if !have("ucx_info", &["ucx_info"]) {
            return;
        }
        let d = Proc::start(&["ucx_info", "-d"]).finish(CHILD_TIMEOUT);
        assert!(d.ok(), "{}", d.report());
        let lines: Vec<&str> = d.stdout.lines().map(str::trim).collect();
        for tl in ["rc_verbs", "ud_verbs"] {
            let listed = lines.windows(2).any(|w| {
                w[0] == format!("#      Transport: {tl}").trim() && w[1] == "#         Device: softroce_lo:1".trim()
            });
            assert!(listed, "{tl} on softroce_lo:1 not listed\n{}", d.report());
        }
        assert!(lines.contains(&"# Connection manager: rdmacm"), "no rdmacm CM\n{}", d.report());
    });
}

/// `grown.c`, built by the compiler and against the headers of rdma-core
/// `major` (the machine's own when no release root is set) and run under
/// `softroce run`: every check it prints must be "ok", and as many as
/// that release's headers have.
fn grown_structs(major: u32) {
    let n = std::process::id();
    let name = format!("softroce-grown-{major}-{n}");
    let src = std::env::temp_dir().join(format!("{name}.c"));
    std::fs::write(&src, include_str!("grown.c")).unwrap();
    let script =
        format!("cc -Wall -Werror -DRDMA_CORE={major} -o /tmp/{name} /tmp/{name}.c -libverbs && exec /tmp/{name}");
    let d = Proc::start(&["sh", "-c", &script]).finish(CHILD_TIMEOUT);
    let _ = std::fs::remove_file(&src);
    let _ = std::fs::remove_file(std::env::temp_dir().join(&name));
    assert!(d.ok(), "{}", d.report());
    let lines: Vec<&str> = d.stdout.lines().collect();
    assert!(lines.iter().all(|l| l.starts_with("ok ")), "{}", d.report());
    // open, query_port, alloc_pd, dealloc_pd, close; 56: active_speed_ex;
    // 65: twelve checks of its verbs.
    let want = 5 + usize::from(major >= 56) + if major >= 65 { 12 } else { 0 };
    assert_eq!(lines.len(), want, "{}", d.report());
}

#[test]
fn a_program_built_against_rdma_core_44s_headers_works() {
    if have("cc", &["cc"]) && std::path::Path::new("/usr/include/infiniband/verbs.h").is_file() {
        grown_structs(44);
    }
}

#[test]
fn a_program_built_against_rdma_core_56s_headers_works() {
    on("trixie", || grown_structs(56));
}

#[test]
fn a_program_built_against_rdma_core_65s_headers_works() {
    on("sid", || grown_structs(65));
}

/// The README's CI recipe in its shell form (`scripts/ci/softroce-ci.sh`),
/// as a project's CI on a Debian 13 runner runs it: from the source tree,
/// with the runner's cargo, it builds softroce and runs the project's test,
/// here an `ibv_rc_pingpong` server and client in one command, over
/// softroce. It builds into a target directory of its own
/// (`SOFTROCE_TARGET_DIR`): a build in the host's `target/` links against
/// Debian 13's glibc, and cargo, which fingerprints sources and not the
/// libc, then keeps that binary for the host, where it does not run
/// (`GLIBC_2.39 not found`, seen after a test run with stale sources).
#[test]
fn trixie_the_ci_recipe_builds_softroce_and_runs_a_projects_rdma_test() {
    let Some(root) = super::release::root("trixie") else { return };
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap().parent().unwrap();
    let home = PathBuf::from(std::env::var_os("HOME").unwrap_or_else(|| "/root".into()));
    let cargo_home = std::env::var_os("CARGO_HOME").map_or_else(|| home.join(".cargo"), PathBuf::from);
    let rustup_home = std::env::var_os("RUSTUP_HOME").map_or_else(|| home.join(".rustup"), PathBuf::from);
    if !cargo_home.join("bin/cargo").is_file() {
        let msg = format!("no cargo in {} for the recipe to build with", cargo_home.display());
        assert!(std::env::var_os("CI").is_none(), "CI is set and {msg}");
        eprintln!("skipped: {msg}");
        return;
    }
    let port = free_port();
    let test = format!("ibv_rc_pingpong -g 1 -p {port} & sleep 1; ibv_rc_pingpong -g 1 -p {port} 127.0.0.1 && wait $!");
    let path = format!("{}:/usr/sbin:/usr/bin:/sbin:/bin", cargo_home.join("bin").display());
    let recipe = src.join("scripts/ci/softroce-ci.sh");
    let target = src.join("target/distro-trixie");
    let host_binary = src.join("target/release/softroce");
    let before = std::fs::metadata(&host_binary).and_then(|m| m.modified()).ok();
    let mut cmd = super::release::chrooted(
        &root,
        &[src, &cargo_home, &rustup_home],
        &[
            "env",
            &format!("PATH={path}"),
            &format!("CARGO_HOME={}", cargo_home.display()),
            &format!("RUSTUP_HOME={}", rustup_home.display()),
            "CARGO_NET_OFFLINE=true",
            &format!("SOFTROCE_TARGET_DIR={}", target.display()),
            recipe.to_str().unwrap(),
            "--",
            "sh",
            "-c",
            &test,
        ],
    );
    let out = cmd.stdin(Stdio::null()).output().unwrap();
    let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    let report = format!("[stdout]\n{stdout}[stderr]\n{stderr}");
    assert!(out.status.success(), "{}\n{report}", out.status);
    // "8192000 bytes in 0.01 seconds = ..." and "1000 iters in ...", once per side.
    let bytes = stdout.lines().filter(|l| l.starts_with("8192000 bytes in ")).count();
    let iters = stdout.lines().filter(|l| l.starts_with("1000 iters in ")).count();
    assert_eq!((bytes, iters), (2, 2), "{report}");
    assert!(target.join("release/softroce").is_file(), "the recipe built in its own target directory\n{report}");
    let after = std::fs::metadata(&host_binary).and_then(|m| m.modified()).ok();
    assert_eq!(before, after, "the host's target/release/softroce is left alone");
}

/// The release's pyverbs (`tests/py/devices.py` of softroce-ibverbs):
/// every module imports with `LD_BIND_NOW=1` (the mlx5 and efa provider
/// modules through the release's libmlx5 and libefa), the library mapped
/// in is softroce's, and its device opens.
fn pyverbs_modules_import() {
    if !have("pyverbs", &["python3"]) {
        return;
    }
    let name = format!("softroce-devices-{}.py", std::process::id());
    let script = std::env::temp_dir().join(&name);
    std::fs::write(&script, include_str!("../../../softroce-ibverbs/tests/py/devices.py")).unwrap();
    let d = Proc::start(&["env", "LD_BIND_NOW=1", "python3", script.to_str().unwrap()]).finish(CHILD_TIMEOUT);
    let _ = std::fs::remove_file(&script);
    assert!(d.ok(), "{}", d.report());
    let lib = d.stdout.lines().find_map(|l| l.strip_prefix("lib ")).unwrap_or_else(|| panic!("{}", d.report()));
    assert!(lib.ends_with("libsoftroce_ibverbs.so"), "the library mapped in is {lib}\n{}", d.report());
    let imported = d.stdout.lines().find_map(|l| l.strip_prefix("ok imported ")?.strip_suffix(" pyverbs modules"));
    assert!(imported.and_then(|n| n.parse::<u32>().ok()).is_some_and(|n| n > 20), "{}", d.report());
    assert!(d.stdout.lines().any(|l| l.starts_with("ok softroce_lo: opens")), "{}", d.report());
}

#[test]
fn trixie_pyverbs_modules_import_and_open_the_device() {
    on("trixie", pyverbs_modules_import);
}

#[test]
fn sid_pyverbs_modules_import_and_open_the_device() {
    on("sid", pyverbs_modules_import);
}
