//! Debian's pyverbs (python3-pyverbs, rdma-core 44) over the built
//! `libibverbs.so.1`, with the scripts in `tests/py/`:
//!
//! - `devices.py`: every pyverbs module imports (with `LD_BIND_NOW=1`, so a
//!   missing function fails at import; glibc prints no "no version
//!   information" warning), the library mapped in is ours, and
//!   `get_device_list()` names our device with the node GUID `ibv_devices`
//!   prints (when ibverbs-utils is installed);
//! - `send_write.py`: two RC QPs of one process, connected through the
//!   device's IPv4 GID, complete a SEND and an RDMA WRITE;
//! - `fork.py`: with a context, PD, CQ and connected QPs open, children
//!   forked from the process list devices and exit (one through Python's
//!   teardown of the inherited objects), one opens the device itself (a
//!   process of its own on the shared device: QPNs unlike the parent's, a
//!   SEND of its own), and the parent's QPs go on working.
//! - `mw.py`: memory windows bound as rdma-core's tests/test_mr.py binds
//!   them (type 1 with `QP.bind_mw`, type 2 with an IBV_WR_BIND_MW
//!   `SendWR`, window access LOCAL_WRITE | REMOTE_WRITE), WRITEs through
//!   them by the peer, invalidation, and each bind rule's MW_BIND_ERR;
//! - `verbs_change.py`: CQ creation bounds, `CQ.resize` with completions
//!   in the CQ, `SRQ.modify` (max_wr), `MR.rereg` with each
//!   `IBV_REREG_MR_CHANGE_*` flag and its errors, `PD.advise_mr` and
//!   `odp_caps` (pyverbs 44 has no `CQ.modify`: tests/c/resize.c);
//! - `qp_ex.py`: `QPEx` on RC, UC and UD, `wr_atomic_write`, and the
//!   `send_ops_flags` each type refuses;
//!
//! Each run takes a loopback address of its own (`LoopbackLease`) and is
//! killed after 60 s. Without /usr/bin/python3 or pyverbs the tests print
//! "skipped" and pass, unless `CI` is set.

mod common;

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use softroce::config::LoopbackLease;

const PYTHON: &str = "/usr/bin/python3";
const DEVICE: &str = "softroce_lo";
const TIMEOUT: Duration = Duration::from_secs(60);

fn under_ci() -> bool {
    std::env::var_os("CI").is_some()
}

/// Whether Debian's python3 and pyverbs are there; skips (false) when not,
/// unless under CI.
fn pyverbs_available() -> bool {
    let ok = Path::new(PYTHON).is_file()
        && Command::new(PYTHON)
            .args(["-c", "import pyverbs"])
            .env_remove("PYTHONPATH")
            .env_remove("PYTHONHOME")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
    if !ok {
        assert!(!under_ci(), "{PYTHON} with pyverbs (python3-pyverbs) is required under CI");
        eprintln!("skipped: {PYTHON} or pyverbs (python3-pyverbs) is not available");
    }
    ok
}

/// A directory holding `libibverbs.so.1` → the cdylib, and a loopback
/// address: what `softroce run --loopback` gives a program. Both go when
/// it drops.
struct Env {
    dir: PathBuf,
    lease: LoopbackLease,
}

impl Env {
    fn new(tag: &str) -> Env {
        let dir = std::env::temp_dir().join(format!("softroce-pyverbs-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        // Both names, as `softroce run` provides them.
        for name in ["libibverbs.so.1", "librdmacm.so.1"] {
            std::os::unix::fs::symlink(common::cdylib(), dir.join(name)).unwrap();
        }
        let lease = LoopbackLease::take().expect("a free loopback address");
        Env { dir, lease }
    }

    /// `program args`, run in the crate directory with our library and the
    /// leased device.
    fn command(&self, program: &str, args: &[&str]) -> Command {
        let mut cmd = Command::new(program);
        cmd.args(args)
            .current_dir(env!("CARGO_MANIFEST_DIR"))
            .env("LD_LIBRARY_PATH", &self.dir)
            .env("SOFTROCE_DEVICES", format!("{DEVICE}={}", self.lease.addr()))
            .env("PYTHONDONTWRITEBYTECODE", "1")
            .env_remove("PYTHONPATH")
            .env_remove("PYTHONHOME");
        cmd
    }
}

impl Drop for Env {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// What a finished run printed.
struct Output {
    code: Option<i32>,
    stdout: String,
    stderr: String,
}

impl std::fmt::Display for Output {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "exit {:?}\n--- stdout\n{}--- stderr\n{}", self.code, self.stdout, self.stderr)
    }
}

/// Runs `cmd` in a process group of its own, killing the group after
/// [`TIMEOUT`] (forked children included, so the pipes close).
fn run(mut cmd: Command) -> Output {
    use std::os::unix::process::CommandExt;
    let mut child =
        cmd.process_group(0).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().expect("spawning the script");
    let reader = |mut r: Box<dyn Read + Send>| {
        std::thread::spawn(move || {
            let mut s = Vec::new();
            let _ = r.read_to_end(&mut s);
            String::from_utf8_lossy(&s).into_owned()
        })
    };
    let out = reader(Box::new(child.stdout.take().unwrap()));
    let err = reader(Box::new(child.stderr.take().unwrap()));
    let start = Instant::now();
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break Some(s);
        }
        if start.elapsed() > TIMEOUT {
            let _ = Command::new("kill").args(["-KILL", "--", &format!("-{}", child.id())]).status();
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let o = Output { code: status.and_then(|s| s.code()), stdout: out.join().unwrap(), stderr: err.join().unwrap() };
    assert!(status.is_some(), "killed after {} s:\n{o}", TIMEOUT.as_secs());
    o
}

/// Runs `tests/py/SCRIPT DEVICE` and checks it printed exactly `want`, with
/// nothing on stderr, and exited 0.
fn script(env: &Env, script: &str, want: &[String]) -> Output {
    let o = run(env.command(PYTHON, &[&format!("tests/py/{script}"), DEVICE]));
    assert_eq!(o.code, Some(0), "{script} failed:\n{o}");
    assert!(o.stderr.is_empty(), "{script} wrote to stderr:\n{o}");
    let got: Vec<&str> = o.stdout.lines().collect();
    assert_eq!(got, want, "{script}:\n{o}");
    o
}

fn lines(v: &[&str]) -> Vec<String> {
    v.iter().map(|s| s.to_string()).collect()
}

#[test]
fn pyverbs_modules_import_and_list_our_device() {
    if !pyverbs_available() {
        return;
    }
    let env = Env::new("devices");
    let mut cmd = env.command(PYTHON, &["tests/py/devices.py"]);
    cmd.env("LD_BIND_NOW", "1");
    let o = run(cmd);
    assert!(!o.stderr.contains("no version information"), "glibc: symbol versions missing:\n{o}");
    assert!(o.stderr.is_empty(), "devices.py wrote to stderr:\n{o}");
    assert_eq!(o.code, Some(0), "{o}");
    let l: Vec<&str> = o.stdout.lines().collect();
    assert_eq!(l.len(), 4, "{o}");
    let ours = std::fs::canonicalize(common::cdylib()).unwrap();
    assert_eq!(l[0], format!("lib {}", ours.display()), "pyverbs loaded another libibverbs:\n{o}");
    let n: usize = l[1]
        .strip_prefix("ok imported ")
        .and_then(|s| s.strip_suffix(" pyverbs modules"))
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("{o}"));
    // 22 in pyverbs/ and 15 under providers/ in Debian's 44.0.
    assert!(n >= 30, "only {n} modules:\n{o}");
    let f: Vec<&str> = l[2].split_whitespace().collect();
    assert_eq!(f.len(), 10, "{o}");
    assert_eq!(
        (f[0], f[1], f[2], f[4], f[5], f[6], f[7], f[8], f[9]),
        ("device", DEVICE, "guid", "node_type", "1", "transport", "0", "index", "0"),
        "{o}"
    );
    let guid = f[3];
    assert!(guid.len() == 16 && guid != "0000000000000000", "{o}");
    assert_eq!(l[3], format!("ok {DEVICE}: opens; query_device node_guid matches; port 1 active on Ethernet"));

    // ibv_devices (rdma-core's own C tool) under the same environment.
    if !Path::new("/usr/bin/ibv_devices").is_file() {
        eprintln!("ibv_devices not installed (ibverbs-utils): GUID not compared with it");
        return;
    }
    let d = run(env.command("/usr/bin/ibv_devices", &[]));
    assert_eq!(d.code, Some(0), "{d}");
    let rows: Vec<Vec<&str>> = d
        .stdout
        .lines()
        .skip(2)
        .map(|l| l.split_whitespace().collect())
        .filter(|r: &Vec<&str>| !r.is_empty())
        .collect();
    assert_eq!(rows, vec![vec![DEVICE, guid]], "ibv_devices disagrees with pyverbs:\n{d}");
}

#[test]
fn send_and_rdma_write_between_two_rc_qps() {
    if !pyverbs_available() {
        return;
    }
    let env = Env::new("send-write");
    let addr = env.lease.addr();
    let t = Instant::now();
    script(
        &env,
        "send_write.py",
        &lines(&[
            &format!("ok device {DEVICE} gid index 1 is ::ffff:{addr} (RoCE v2)"),
            "ok rc qps connected to each other, both in RTS",
            "ok send completion status success opcode IBV_WC_SEND",
            "ok send receive completion byte_len 5000 opcode IBV_WC_RECV",
            "ok send received 5000 bytes intact",
            "ok write completion status success opcode IBV_WC_RDMA_WRITE",
            "ok write target holds 5000 bytes at offset 512",
        ]),
    );
    eprintln!("send_write.py: {:.2?}", t.elapsed());
}

#[test]
fn forked_children_list_devices_and_the_parent_goes_on() {
    if !pyverbs_available() {
        return;
    }
    let env = Env::new("fork");
    let t = Instant::now();
    script(
        &env,
        "fork.py",
        &lines(&[
            "ok fork_init, is_fork_initialized IBV_FORK_UNNEEDED",
            "ok before fork: send completion status success opcode IBV_WC_SEND",
            "ok before fork: send receive completion byte_len 5000 opcode IBV_WC_RECV",
            "ok before fork: send received 5000 bytes intact",
            &format!("ok child with open qps lists {DEVICE} and leaves with os._exit(0)"),
            &format!("ok child with open qps lists {DEVICE}, tears them down and exits 0"),
            &format!("ok child opens {DEVICE} itself and gets QP numbers of its own"),
            "ok child: send completion status success opcode IBV_WC_SEND",
            "ok child: send receive completion byte_len 5000 opcode IBV_WC_RECV",
            "ok child: send received 5000 bytes intact",
            &format!("ok child with its own context on {DEVICE} exits 0"),
            "ok after fork: send completion status success opcode IBV_WC_SEND",
            "ok after fork: send receive completion byte_len 5000 opcode IBV_WC_RECV",
            "ok after fork: send received 5000 bytes intact",
            "ok write completion status success opcode IBV_WC_RDMA_WRITE",
            "ok write target holds 5000 bytes at offset 512",
        ]),
    );
    eprintln!("fork.py: {:.2?}", t.elapsed());
}

/// Children forked while a 1 MiB WRITE is in flight (so the driver thread
/// is often inside its device lock) tear down what they inherited and exit:
/// softroce's `pthread_atfork` handlers hold every device lock across
/// `fork()`, so no child inherits a lock held by a thread it does not have.
#[test]
fn children_forked_mid_transfer_tear_down_without_hanging() {
    if !pyverbs_available() {
        return;
    }
    let env = Env::new("fork-busy");
    let o = run(env.command(PYTHON, &["tests/py/fork.py", DEVICE, "--busy", "30"]));
    assert_eq!(o.code, Some(0), "fork.py --busy failed:\n{o}");
    assert!(o.stderr.is_empty(), "fork.py --busy wrote to stderr:\n{o}");
    assert_eq!(o.stdout, "ok 30 children forked mid-transfer tore down without hanging; every WRITE completed\n");
}

/// pyverbs' `CMID` on softroce's librdmacm: a forked server with a passive
/// synchronous endpoint (`get_request`, `accept`), a client that connects,
/// and a SEND each way through `rdma_verbs.h`-style helpers.
#[test]
fn pyverbs_cmid_connects_synchronous_endpoints() {
    if !pyverbs_available() {
        return;
    }
    let env = Env::new("cmid");
    script(
        &env,
        "cmid.py",
        &lines(&[
            "ok server listens on a synchronous endpoint",
            "ok client connected",
            "ok client got the server's answer",
            "ok server got the client's message",
            "ok server exited 0",
        ]),
    );
}

/// Memory windows the way pyverbs' own tests use them. Before the fix the
/// first bind completed with MW_BIND_ERR: the window's access held
/// LOCAL_WRITE, which softroce refused and rxe ignores.
#[test]
fn memory_windows_bound_as_pyverbs_binds_them() {
    if !pyverbs_available() {
        return;
    }
    let env = Env::new("mw");
    script(
        &env,
        "mw.py",
        &lines(&[
            "ok type 1 windows bound with QP.bind_mw over LOCAL_WRITE|MW_BIND regions, the rkey's low byte moved on",
            "ok each peer WRITEs 1024 bytes through the other's type 1 window",
            "ok after a zero-length rebind the peer's WRITE completes with REM_ACCESS_ERR",
            "ok type 2 windows bound with IBV_WR_BIND_MW, used by the peer, LOCAL_INV makes them refuse",
            "ok a SEND_WITH_INV from the peer invalidates a type 2 window (IBV_WC_WITH_INV, its key)",
            "ok MW_BIND_ERR for: no MW_BIND, remote write without LOCAL_WRITE, outside the region, type 2 length 0, \
             another PD, a bound type 2 window",
            "ok ibv_bind_mw: EINVAL for a zero-based type 1 window and for a type 2 window",
        ]),
    );
}

#[test]
fn cq_bounds_resize_srq_modify_rereg_and_advise() {
    if !pyverbs_available() {
        return;
    }
    let env = Env::new("verbs-change");
    script(
        &env,
        "verbs_change.py",
        &lines(&[
            "ok CQ and CQEX: EINVAL for cqe 0 or max_cqe + 1 (4194304) and comp_vector 1; CQ(8).cqe is 2^k - 1",
            "ok CQ.resize 8 -> 40 with 6 completions in it: cqe 15 -> 63, the 6 completions kept in order",
            "ok CQ.resize 40 -> 12 with 12 completions: cqe 15, kept; EINVAL for 11 (below those held), 0 and \
             max_cqe + 1",
            "ok SRQ.modify max_wr 8 -> 20 with 5 WRs posted: query 20, 20 WRs fit, the 21st ENOMEM",
            "ok SRQ.modify: EINVAL for max_wr 0, below the WRs posted, past max_srq_wr, and a limit past the size",
            "ok 20 SENDs consume the 20 receives in the order posted, before and after the resize",
            "ok MR.rereg CHANGE_ACCESS adds REMOTE_WRITE: keys unchanged, the peer's WRITE lands",
            "ok MR.rereg CHANGE_TRANSLATION to a new 8 KiB buffer: keys unchanged, length 8192, WRITEs land there",
            "ok MR.rereg: IBV_REREG_MR_ERR_INPUT (EINVAL) for an unknown flag, a translation without length, access \
             without CHANGE_ACCESS; IBV_REREG_MR_ERR_CMD (EINVAL) for no flag and REMOTE_WRITE alone; region unchanged",
            "ok MR.rereg CHANGE_PD: keys unchanged, QPs of the new PD WRITE, the old PD's get REM_ACCESS_ERR",
            "ok PD.advise_mr PREFETCH, PREFETCH_WRITE (FLAG_FLUSH) and PREFETCH_NO_FAULT on ON_DEMAND regions: 0",
            "ok PD.advise_mr: EINVAL for a region without ON_DEMAND, past it, an unknown key, no SGE, a flag, another \
             PD; EPERM for PREFETCH_WRITE read-only; EOPNOTSUPP for advice 9",
            "ok odp_caps: SUPPORT without IMPLICIT, RC SEND/RECV/WRITE/READ/ATOMIC/SRQ_RECV; a WRITE lands in an \
             ON_DEMAND region",
        ]),
    );
}

#[test]
fn extended_qps_of_each_type() {
    if !pyverbs_available() {
        return;
    }
    let env = Env::new("qp-ex");
    let o = run(env.command(PYTHON, &["tests/py/qp_ex.py", DEVICE]));
    assert_eq!(o.code, Some(0), "qp_ex.py failed:\n{o}");
    assert!(o.stderr.is_empty(), "qp_ex.py wrote to stderr:\n{o}");
    // Debian 12's pyverbs (rdma-core 44) has no QPEx.wr_flush; 45+ has.
    let flush = if o.stdout.contains("has QPEx.wr_flush") {
        "ok this pyverbs has QPEx.wr_flush (rdma-core 45+); tests/c/placement.c covers ibv_wr_flush"
    } else {
        "ok this pyverbs (rdma-core 44) has no QPEx.wr_flush; tests/c/placement.c covers ibv_wr_flush"
    };
    let want = [
        "ok RC QPEx: send_imm (3000 bytes), rdma_write, rdma_read, atomic_fetch_add complete with their values",
        "ok RC QPEx.wr_atomic_write: IBV_WC_ATOMIC_WRITE, byte_len 8, the 8 bytes in place",
        "ok RC QPEx: an operation not in send_ops_flags fails wr_complete with EOPNOTSUPP, nothing posted",
        flush,
        "ok UC QPEx: send (2500 bytes) and rdma_write_imm complete with their bytes; wr_rdma_read EOPNOTSUPP",
        "ok UD QPEx: send_imm with wr_set_ud_addr arrives (GRH + 512 bytes, imm, src_qp); no address: EINVAL",
        "ok QPEx: EOPNOTSUPP for UD + RDMA_WRITE or ATOMIC_WRITE, UC + READ, FETCH_ADD or SEND_WITH_INV, RC + TSO",
    ];
    assert_eq!(o.stdout.lines().collect::<Vec<_>>(), want, "{o}");
}
