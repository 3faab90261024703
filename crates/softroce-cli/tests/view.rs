//! `softroce run`'s view of the devices (docs/sysfs.md): the program sees
//! `/sys/class/infiniband*` and `/dev/infiniband` as kernel rxe presents
//! them, and nothing changes outside.

use std::process::Command;

/// Runs `script` under `softroce run`.
fn run_sh(script: &str, envs: &[(&str, &str)], as_nobody: bool) -> (i32, String, String) {
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
    let o = c.output().expect("softroce runs");
    let (out, err) = (String::from_utf8_lossy(&o.stdout).into(), String::from_utf8_lossy(&o.stderr).into());
    (o.status.code().unwrap_or(-1), out, err)
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
    let (code, out, err) = run_sh(LOOK, &[], as_nobody);
    assert_eq!((code, out.as_str()), (0, WANT), "stderr: {err}");
    assert!(!err.contains("softroce run: view:"), "{err}");
    // Outside the program nothing changed.
    assert!(!std::path::Path::new("/sys/class/infiniband/softroce_t").exists());
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
    let (code, out, _) = run_sh(
        "test -e /sys/class/infiniband/softroce_t && echo there || echo absent",
        &[("SOFTROCE_SYSFS", "0")],
        false,
    );
    assert_eq!((code, out.as_str()), (0, "absent\n"));
}

/// `--loopback`'s device is named in the view as the library names it
/// (`softroce_lo`, from SOFTROCE_DEVICES): UCX looks a device up there by
/// its verbs name.
#[test]
fn the_loopback_device_has_its_verbs_name_in_the_view() {
    let o = Command::new(env!("CARGO_BIN_EXE_softroce"))
        .args(["run", "--loopback", "--", "sh", "-c", "echo $SOFTROCE_DEVICES; ls /sys/class/infiniband"])
        .output()
        .expect("softroce runs");
    let (out, err) = (String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr));
    assert!(o.status.success(), "{err}");
    let mut lines = out.lines();
    let devices = lines.next().unwrap_or_default();
    assert!(devices.starts_with("softroce_lo=127.0.0."), "{out}");
    assert!(lines.any(|l| l == "softroce_lo"), "{out}\n{err}");
}
