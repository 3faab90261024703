//! `softroce run`: the library path it sets, the devices it gives the
//! program, its exit status, and its errors.

use std::process::Command;

fn softroce() -> Command {
    Command::new(env!("CARGO_BIN_EXE_softroce"))
}

fn stdout(c: &mut Command) -> (i32, String, String) {
    let o = c.output().expect("softroce runs");
    (
        o.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&o.stdout).into(),
        String::from_utf8_lossy(&o.stderr).into(),
    )
}

/// The cdylib `softroce run` uses: beside the binary or, after `cargo
/// test`, in deps/ (the newer).
fn library() -> Option<std::path::PathBuf> {
    let exe = std::path::PathBuf::from(env!("CARGO_BIN_EXE_softroce"));
    let dir = exe.parent()?;
    [dir.join("libsoftroce_ibverbs.so"), dir.join("deps/libsoftroce_ibverbs.so")]
        .into_iter()
        .filter_map(|p| Some((std::fs::metadata(&p).ok()?.modified().ok()?, p)))
        .max_by_key(|(t, _)| *t)
        .map(|(_, p)| p)
}

/// The cdylib must have been built (cargo test --workspace builds it).
fn have_library() -> bool {
    let ok = library().is_some();
    if !ok {
        assert!(std::env::var_os("CI").is_none(), "libsoftroce_ibverbs.so was not built next to softroce");
        eprintln!("skipped: build softroce-ibverbs first (cargo test --workspace does)");
    }
    ok
}

#[test]
fn print_libdir_names_a_directory_whose_libibverbs_is_softroce() {
    if !have_library() {
        return;
    }
    let (code, out, err) = stdout(softroce().args(["run", "--print-libdir"]));
    assert_eq!(code, 0, "{err}");
    let dir = std::path::PathBuf::from(out.trim());
    let lib = std::fs::canonicalize(dir.join("libibverbs.so.1")).expect("libibverbs.so.1 resolves");
    let want = std::fs::canonicalize(library().unwrap()).unwrap();
    assert_eq!(lib, want);
}

#[test]
fn the_program_gets_the_library_path_and_the_devices_and_its_status_is_ours() {
    if !have_library() {
        return;
    }
    let script = "echo \"$LD_LIBRARY_PATH\"; echo \"$SOFTROCE_DEVICES\"; exit 7";
    let (code, out, err) = stdout(
        softroce()
            .args(["run", "--device", "a=127.0.0.9", "--device", "b=::1", "--", "sh", "-c", script])
            .env("LD_LIBRARY_PATH", "/opt/x"),
    );
    assert_eq!(code, 7, "{err}");
    let lines: Vec<&str> = out.lines().collect();
    let (_, dir, _) = stdout(softroce().args(["run", "--print-libdir"]));
    assert_eq!(lines[0], format!("{}:/opt/x", dir.trim()), "ours first, the old path kept after it");
    assert_eq!(lines[1], "a=127.0.0.9,b=::1");
}

#[test]
fn loopback_runs_side_by_side_get_different_addresses() {
    if !have_library() {
        return;
    }
    // Each run holds its address until its program exits: two runs that
    // overlap must not share one.
    let spawn = || {
        softroce()
            .args(["run", "--loopback", "--", "sh", "-c", "echo $SOFTROCE_DEVICES; sleep 1"])
            .stdout(std::process::Stdio::piped())
            .spawn()
            .expect("spawn")
    };
    let (a, b) = (spawn(), spawn());
    let (a, b) = (a.wait_with_output().unwrap(), b.wait_with_output().unwrap());
    let (a, b) =
        (String::from_utf8_lossy(&a.stdout).trim().to_string(), String::from_utf8_lossy(&b.stdout).trim().to_string());
    assert!(a.starts_with("softroce_lo=127.0.0."), "{a}");
    assert!(b.starts_with("softroce_lo=127.0.0."), "{b}");
    assert_ne!(a, b);
}

#[test]
fn errors_are_clear() {
    if !have_library() {
        return;
    }
    let (code, _, err) = stdout(softroce().args(["run"]));
    assert_eq!(code, 2);
    assert!(err.contains("no program given"), "{err}");
    let (code, _, err) = stdout(softroce().args(["run", "--device", "nonsense", "--", "true"]));
    assert_eq!(code, 2);
    assert!(err.contains("--device"), "{err}");
    let (code, _, err) = stdout(softroce().args(["run", "--", "/nonexistent/program"]));
    assert_eq!(code, 2);
    assert!(err.contains("cannot run /nonexistent/program"), "{err}");
}

/// A device named past 15 characters is one UCX leaves out without a
/// word: `softroce run` says so.
#[test]
fn a_device_name_too_long_for_ucx_is_pointed_out() {
    if !have_library() {
        return;
    }
    let (code, _, err) = stdout(softroce().args(["run", "--device", "softroce_sixteen=127.0.0.1", "--", "true"]));
    assert_eq!(code, 0, "{err}");
    assert!(err.contains("longer than 15 characters: softroce_sixteen"), "{err}");
    let (code, _, err) = stdout(softroce().args(["run", "--device", "softroce_fiftee=127.0.0.1", "--", "true"]));
    assert_eq!(code, 0, "{err}");
    assert!(!err.contains("longer than"), "{err}");
}

/// Starts `softroce run -- sh -c SCRIPT` (the script prints "ready" once
/// its traps are set) and waits for that line.
fn started(script: &str) -> (std::process::Child, std::io::BufReader<std::process::ChildStdout>) {
    use std::io::BufRead;
    let mut c = softroce()
        .args(["run", "--device", "a=127.0.0.9", "--", "sh", "-c", script])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("spawn");
    let mut out = std::io::BufReader::new(c.stdout.take().unwrap());
    let mut line = String::new();
    out.read_line(&mut line).unwrap();
    assert_eq!(line, "ready\n");
    (c, out)
}

/// Waits at most 10 s for `c` (killing it past that: the test fails).
fn ended(c: &mut std::process::Child) -> std::process::ExitStatus {
    let until = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        if let Some(s) = c.try_wait().unwrap() {
            return s;
        }
        if std::time::Instant::now() > until {
            let _ = c.kill();
            panic!("softroce run did not end within 10 s");
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
}

/// A signal sent to `softroce run` reaches the program (as `timeout` and
/// job schedulers send SIGTERM), which is waited for: its exit status is
/// softroce run's, and nothing is left running.
#[test]
fn a_signal_sent_to_softroce_run_reaches_the_program() {
    use std::io::Read;
    use std::os::unix::process::ExitStatusExt;
    if !have_library() {
        return;
    }
    let (mut c, mut out) = started(
        "trap 'echo got TERM; exit 3' TERM; trap 'echo got USR2' USR2; echo ready; while :; do sleep 0.05; done",
    );
    let pid = rustix::process::Pid::from_child(&c);
    rustix::process::kill_process(pid, rustix::process::Signal::USR2).unwrap();
    std::thread::sleep(std::time::Duration::from_millis(300));
    rustix::process::kill_process(pid, rustix::process::Signal::TERM).unwrap();
    let status = ended(&mut c);
    let mut rest = String::new();
    out.read_to_string(&mut rest).unwrap();
    assert_eq!(rest, "got USR2\ngot TERM\n");
    assert_eq!((status.code(), status.signal()), (Some(3), None));
}

/// A signal that reaches `softroce run` the moment its program starts
/// (here the program sends it to its parent at once) is passed on too:
/// `softroce run` catches the signals before it spawns the program. It
/// caught them after, so a SIGUSR2 in between killed it by its default
/// action and left the program running, orphaned (CI, in the test above).
#[test]
fn a_signal_sent_while_the_program_starts_is_passed_on() {
    use std::os::unix::process::{CommandExt, ExitStatusExt};
    if !have_library() {
        return;
    }
    for _ in 0..20 {
        let mut c = softroce()
            .args(["run", "--device", "a=127.0.0.9", "--", "sh", "-c"])
            .arg("trap 'echo got USR2; exit 4' USR2; kill -USR2 $PPID; while :; do sleep 0.01; done")
            .stdout(std::process::Stdio::piped())
            .process_group(0)
            .spawn()
            .expect("spawn");
        let status = ended(&mut c);
        // Whatever happened, nothing of the run is left behind.
        let _ =
            rustix::process::kill_process_group(rustix::process::Pid::from_child(&c), rustix::process::Signal::KILL);
        let mut out = String::new();
        std::io::Read::read_to_string(&mut c.stdout.take().unwrap(), &mut out).unwrap();
        assert_eq!((status.code(), status.signal()), (Some(4), None), "the program's exit, not softroce run's death");
        assert_eq!(out, "got USR2\n");
    }
}

/// A program that dies of a signal makes `softroce run` die of the same
/// one: its caller sees what it would have seen of the program.
#[test]
fn a_program_killed_by_a_signal_kills_softroce_run_with_it() {
    use std::os::unix::process::ExitStatusExt;
    if !have_library() {
        return;
    }
    // SIGTERM untrapped: the program dies of the forwarded signal.
    let (mut c, _out) = started("echo ready; while :; do sleep 0.05; done");
    rustix::process::kill_process(rustix::process::Pid::from_child(&c), rustix::process::Signal::TERM).unwrap();
    let status = ended(&mut c);
    assert_eq!(status.signal(), Some(libc_sig::TERM));
    // The program kills itself.
    let (code, _, err) = stdout(softroce().args(["run", "--device", "a=127.0.0.9", "--", "sh", "-c", "kill -USR1 $$"]));
    assert_eq!(code, -1, "died of a signal, no exit code: {err}");
    let o = softroce().args(["run", "--device", "a=127.0.0.9", "--", "sh", "-c", "kill -USR1 $$"]).output().unwrap();
    assert_eq!(o.status.signal(), Some(libc_sig::USR1));
}

/// Signal numbers of x86_64 Linux.
mod libc_sig {
    pub const TERM: i32 = 15;
    pub const USR1: i32 = 10;
}
