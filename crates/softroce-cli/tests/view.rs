//! `softroce run`'s view of the devices (docs/sysfs.md): the program sees
//! `/sys/class/infiniband*` and `/dev/infiniband` as kernel rxe presents
//! them, and nothing changes outside.

use std::process::Command;

/// Runs `script` under `softroce run`; also returns the pid of the
/// process that made the view (its staging directory is named by it).
fn run_sh(script: &str, envs: &[(&str, &str)], as_nobody: bool) -> (i32, String, String, u32) {
    let mut c = if as_nobody {
        let mut c = Command::new("setpriv");
        c.args(["--reuid=65534", "--regid=65534", "--clear-groups", env!("CARGO_BIN_EXE_softroce")]);
        c
    } else {
        Command::new(env!("CARGO_BIN_EXE_softroce"))
    };
    c.args(["run", "--device", "softroce_t=127.0.0.1", "--", "sh", "-c", script]);
    for (k, v) in envs {
        c.env(k, v);
    }
    let child =
        c.stdout(std::process::Stdio::piped()).stderr(std::process::Stdio::piped()).spawn().expect("softroce runs");
    // setpriv execs softroce in place: the same pid.
    let pid = child.id();
    let o = child.wait_with_output().unwrap();
    let (out, err) = (String::from_utf8_lossy(&o.stdout).into(), String::from_utf8_lossy(&o.stderr).into());
    (o.status.code().unwrap_or(-1), out, err, pid)
}

fn is_root() -> bool {
    Command::new("id").arg("-u").output().is_ok_and(|o| o.stdout.starts_with(b"0\n"))
}

/// What the program reads there, one value per line.
const LOOK: &str = "d=/sys/class/infiniband/softroce_t; p=$d/ports/1; \
    cat $d/node_type $d/parent $p/state $p/link_layer $p/gids/1 $p/gid_attrs/types/1 $p/gid_attrs/ndevs/1 $p/pkeys/0; \
    cat /sys/class/infiniband_verbs/abi_version /sys/class/infiniband_verbs/uverbs0/ibdev; \
    stat -c %F /dev/infiniband/uverbs0; test -r /dev/infiniband/uverbs0 -a -w /dev/infiniband/uverbs0 && echo rw; \
    stat -c %F /dev/infiniband/rdma_cm; ls /sys/class/net >/dev/null && test -d /dev/shm -a -c /dev/null && echo kept";

const WANT: &str = "1: CA\nlo\n4: ACTIVE\nEthernet\n0000:0000:0000:0000:0000:ffff:7f00:0001\nRoCE v2\nlo\n0xffff\n\
    6\nsoftroce_t\ncharacter special file\nrw\ncharacter special file\nkept\n";

fn check(as_nobody: bool) {
    let (code, out, err, pid) = run_sh(LOOK, &[], as_nobody);
    assert_eq!((code, out.as_str()), (0, WANT), "stderr: {err}");
    assert!(!err.contains("no /sys/class/infiniband"), "{err}");
    // Outside the program nothing changed, and its staging directory is gone.
    assert!(!std::path::Path::new("/sys/class/infiniband/softroce_t").exists());
    let staging = std::env::temp_dir().join(format!("softroce-view-{pid}"));
    assert!(!staging.exists(), "{} was left", staging.display());
}

#[test]
fn the_program_sees_the_device_as_kernel_rxe_presents_it() {
    check(false);
}

/// An ordinary user gets the same view (a user namespace mapping its own
/// uid), run as `nobody` when the tests run as root.
#[test]
fn an_ordinary_user_gets_the_view_too() {
    if !is_root() {
        // The tests already run as an ordinary user.
        return check(false);
    }
    if Command::new("setpriv").arg("--version").output().is_err() {
        assert!(std::env::var_os("CI").is_none(), "CI has setpriv (util-linux)");
        return;
    }
    check(true);
}

#[test]
fn sysfs_0_turns_the_view_off() {
    let (code, out, _, _) = run_sh(
        "test -e /sys/class/infiniband/softroce_t && echo there || echo absent",
        &[("SOFTROCE_SYSFS", "0")],
        false,
    );
    assert_eq!((code, out.as_str()), (0, "absent\n"));
}
