//! `softroce run` in chroots and container-like conditions (docs/sysfs.md,
//! "What works where"), each made for real: a chroot whose `/` is no mount
//! point, no user namespaces, root without `CAP_SYS_ADMIN`, a read-only
//! `/sys`. In each the program runs (`ibv_devices` through the drop-in
//! lists the device), gets the view that can be made, and a degraded view
//! is named on stderr. Making the conditions takes root: as any other
//! user the tests print "skipped", unless `CI` is set (CI runs as root).
//!
//! Every mount is made inside an `unshare -m` namespace, so nothing here
//! changes the host.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

fn under_ci() -> bool {
    std::env::var_os("CI").is_some()
}

fn is_root() -> bool {
    Command::new("id").arg("-u").output().is_ok_and(|o| o.stdout.starts_with(b"0\n"))
}

fn on_path(tool: &str) -> bool {
    Command::new("sh").args(["-c", &format!("command -v {tool}")]).output().is_ok_and(|o| o.status.success())
}

fn softroce() -> &'static str {
    env!("CARGO_BIN_EXE_softroce")
}

/// The cdylib `softroce run` uses: beside the binary or, after `cargo
/// test`, in deps/.
fn have_library() -> bool {
    let dir = Path::new(softroce()).parent().unwrap();
    [dir.join("libsoftroce_ibverbs.so"), dir.join("deps/libsoftroce_ibverbs.so")].iter().any(|p| p.is_file())
}

/// Whether the test can run: root, the drop-in built, and the tools
/// (ibverbs-utils' `ibv_devices`, util-linux). Otherwise it prints
/// "skipped", or fails under CI.
fn ready(test: &str) -> bool {
    let missing = if !is_root() {
        "root (to make the conditions)"
    } else if !have_library() {
        "libsoftroce_ibverbs.so (cargo build -p softroce-ibverbs)"
    } else if let Some(t) = ["ibv_devices", "unshare", "setpriv", "chroot"].into_iter().find(|t| !on_path(t)) {
        t
    } else {
        return true;
    };
    assert!(!under_ci(), "CI is set and {test} lacks {missing}");
    eprintln!("skipped: {test} needs {missing}");
    false
}

struct Run {
    code: i32,
    out: String,
    err: String,
}

impl From<Output> for Run {
    fn from(o: Output) -> Run {
        Run {
            code: o.status.code().unwrap_or(-1),
            out: String::from_utf8_lossy(&o.stdout).into(),
            err: String::from_utf8_lossy(&o.stderr).into(),
        }
    }
}

impl Run {
    /// `softroce run`'s view line (at most one), if any.
    fn view_line(&self) -> Option<&str> {
        let mut lines = self.err.lines().filter(|l| l.starts_with("softroce run: view: "));
        let first = lines.next();
        assert!(lines.next().is_none(), "one view line only:\n{}", self.err);
        first
    }

    /// The program ran, `ibv_devices` through the drop-in listed the
    /// device, and `softroce run` said nothing about the view.
    fn assert_full(&self) {
        assert_eq!(self.code, 0, "stdout:\n{}\nstderr:\n{}", self.out, self.err);
        assert!(self.out.lines().any(|l| l.trim_start().starts_with("softroce_lo ")), "{}", self.out);
        assert_eq!(self.view_line(), None, "{}", self.err);
    }

    /// The program ran and listed the device, and the view line starts
    /// with `got` and contains each of `why`.
    fn assert_degraded(&self, got: &str, why: &[&str]) {
        assert_eq!(self.code, 0, "stdout:\n{}\nstderr:\n{}", self.out, self.err);
        assert!(self.out.lines().any(|l| l.trim_start().starts_with("softroce_lo ")), "{}", self.out);
        let line = self.view_line().unwrap_or_else(|| panic!("no view line:\n{}", self.err));
        assert!(line.starts_with(&format!("softroce run: view: {got}")), "{line}");
        for w in why {
            assert!(line.contains(w), "{line} lacks {w:?}");
        }
        assert!(line.contains("UCX"), "{line}");
    }

    fn has_line(&self, l: &str) -> bool {
        self.out.lines().any(|x| x == l)
    }
}

/// What the program prints of its view, then `ibv_devices`' listing.
const LOOK: &str = "d=/sys/class/infiniband/softroce_lo; \
    if test -d $d; then echo sys: $(cat $d/ports/1/gid_attrs/types/1); else echo sys: none; fi; \
    if test -c /dev/infiniband/uverbs0; then echo dev: uverbs0; else echo dev: none; fi; \
    ibv_devices";

/// Which chroot: the host's `/sys` and `/dev` bound in, or left empty
/// directories of the chroot's `/`.
struct Chroot {
    sys: bool,
    dev: bool,
}

/// The mount-info line count outside the program, before and after it ran.
fn mounts_outside(err: &str) -> (usize, usize) {
    let l = err.lines().find_map(|l| l.strip_prefix("mounts outside: ")).unwrap_or_else(|| panic!("{err}"));
    let (a, b) = l.split_once(' ').unwrap();
    (a.parse().unwrap(), b.parse().unwrap())
}

/// Runs `softroce run --loopback -- sh -c LOOK` in a chroot whose `/` is a
/// directory of a tmpfs, not a mount point, as `user` (`uid:gid`) or root.
/// `/usr`, `/lib*`, `/bin`, `/sbin` and `/etc` are the host's (read-only),
/// and so are `/tmp` (the loopback leases) and the directory of the
/// softroce binary. The mounts outside are shared, as systemd makes them,
/// so a mount made on the chroot's `/` would appear there. The program also
/// prints the chroot's `/marker` and `shm`, a file of the host's `/dev/shm`.
fn in_chroot(c: &Chroot, user: Option<&str>, shm: &ShmFile) -> Run {
    let top = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("chroot-{}", shm.0));
    std::fs::create_dir_all(&top).unwrap();
    let bin = Path::new(softroce()).parent().unwrap();
    let script = r#"set -e
mount -t tmpfs softroce-test "$TOP"
R="$TOP/root"
mkdir "$R"
for d in usr lib lib32 lib64 libx32 bin sbin etc; do
  if [ -L "/$d" ]; then ln -s "$(readlink "/$d")" "$R/$d"
  elif [ -d "/$d" ]; then mkdir "$R/$d"; mount --rbind "/$d" "$R/$d"; mount -o remount,bind,ro "$R/$d"
  fi
done
mkdir -p "$R/proc" "$R/dev" "$R/sys" "$R/tmp" "$R$BIN"
mount -t proc proc "$R/proc"
mount --rbind "$HOST_TMP" "$R/tmp"
mount --bind "$BIN" "$R$BIN"
if [ "$SYS" = true ]; then mount --rbind /sys "$R/sys"; fi
if [ "$DEV" = true ]; then mount --rbind /dev "$R/dev"; fi
echo in-the-chroot > "$R/marker"
mountpoint -q "$R" && { echo "$R is a mount point" >&2; exit 99; }
mount --make-rshared /
before=$(wc -l < /proc/self/mountinfo)
set +e
chroot $USERSPEC "$R" env TMPDIR=/tmp "$BIN/softroce" run --loopback -- sh -c "cat /marker 2>&1; cat /dev/shm/$SHM 2>&1; $LOOK"
rc=$?
echo "mounts outside: $before $(wc -l < /proc/self/mountinfo)" >&2
exit $rc
"#;
    let o = Command::new("unshare")
        .args(["-m", "sh", "-c", script])
        .env("TOP", &top)
        .env("BIN", bin)
        .env("HOST_TMP", std::env::temp_dir())
        .env("SYS", c.sys.to_string())
        .env("DEV", c.dev.to_string())
        .env("USERSPEC", user.map(|u| format!("--userspec={u}")).unwrap_or_default())
        .env("SHM", &shm.0)
        .env("LOOK", LOOK)
        .output()
        .expect("unshare runs");
    // The tmpfs went with the namespace: the directory is empty again.
    std::fs::remove_dir(&top).unwrap();
    let r = Run::from(o);
    let (before, after) = mounts_outside(&r.err);
    assert_eq!(before, after, "mounts appeared outside the program's namespace:\n{}", r.err);
    r
}

/// A file of the host's `/dev/shm`, removed on drop.
struct ShmFile(String);

impl ShmFile {
    fn new(tag: &str) -> ShmFile {
        let name = format!("softroce-containers-{tag}-{}", std::process::id());
        std::fs::write(Path::new("/dev/shm").join(&name), "host-shm\n").unwrap();
        ShmFile(name)
    }
}

impl Drop for ShmFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(Path::new("/dev/shm").join(&self.0));
    }
}

/// `mount("/", MS_PRIVATE|MS_REC)` says EINVAL where `/` is no mount
/// point, which gave root no view at all in a chroot. Each part now
/// makes the mount it sits on private (`/sys`, `/dev`), and nothing is
/// mounted on the chroot's `/`, so the mounts outside stay as they were.
#[test]
fn in_a_chroot_whose_root_is_no_mount_point_root_gets_the_whole_view() {
    if !ready("in_a_chroot_whose_root_is_no_mount_point_root_gets_the_whole_view") {
        return;
    }
    let shm = ShmFile::new("full");
    let r = in_chroot(&Chroot { sys: true, dev: true }, None, &shm);
    r.assert_full();
    for l in ["in-the-chroot", "host-shm", "sys: RoCE v2", "dev: uverbs0"] {
        assert!(r.has_line(l), "no {l:?} in:\n{}", r.out);
    }
}

/// A chroot without `/sys`: the `/dev` part alone, named on stderr.
#[test]
fn in_a_chroot_without_sys_root_gets_dev_only_and_is_told() {
    if !ready("in_a_chroot_without_sys_root_gets_dev_only_and_is_told") {
        return;
    }
    let shm = ShmFile::new("devonly");
    let r = in_chroot(&Chroot { sys: false, dev: true }, None, &shm);
    r.assert_degraded("/dev/infiniband only", &["/sys/class: No such file"]);
    for l in ["in-the-chroot", "host-shm", "sys: none", "dev: uverbs0"] {
        assert!(r.has_line(l), "no {l:?} in:\n{}", r.out);
    }
}

/// A chroot whose `/dev` is a plain directory of its `/`: a mount there
/// would appear outside, so the `/dev` part is left out and named.
#[test]
fn in_a_chroot_whose_dev_is_no_mount_root_gets_sys_only_and_is_told() {
    if !ready("in_a_chroot_whose_dev_is_no_mount_root_gets_sys_only_and_is_told") {
        return;
    }
    let shm = ShmFile::new("sysonly");
    let r = in_chroot(&Chroot { sys: true, dev: false }, None, &shm);
    r.assert_degraded("/sys/class/infiniband only", &["a chroot's / that is no mount"]);
    for l in ["in-the-chroot", "sys: RoCE v2", "dev: none"] {
        assert!(r.has_line(l), "no {l:?} in:\n{}", r.out);
    }
}

/// The kernel refuses a user namespace to a chrooted process (EPERM):
/// a user other than root gets no view in a chroot, and is told.
#[test]
fn a_user_in_a_chroot_runs_without_the_view_and_is_told() {
    if !ready("a_user_in_a_chroot_runs_without_the_view_and_is_told") {
        return;
    }
    let shm = ShmFile::new("user");
    let r = in_chroot(&Chroot { sys: true, dev: true }, Some("65534:65534"), &shm);
    r.assert_degraded("none", &["CLONE_NEWUSER", "Operation not permitted", "chroots"]);
    for l in ["in-the-chroot", "host-shm", "sys: none", "dev: none"] {
        assert!(r.has_line(l), "no {l:?} in:\n{}", r.out);
    }
}

fn as_nobody(script: &str) -> String {
    format!("setpriv --reuid=65534 --regid=65534 --clear-groups {script}")
}

fn run_look() -> String {
    format!("{} run --loopback -- sh -c '{LOOK}'", softroce())
}

/// Where user namespaces are not allowed (Docker's seccomp profile says
/// EPERM, `user.max_user_namespaces=0` ENOSPC), a user other than root runs
/// without the view, and is told. Made with a user namespace whose own
/// `max_user_namespaces` is 0 (the limit is per namespace, so the host's
/// stays as it is), entered as `nobody`.
#[test]
fn without_user_namespaces_a_user_runs_without_the_view_and_is_told() {
    if !ready("without_user_namespaces_a_user_runs_without_the_view_and_is_told") {
        return;
    }
    // The limit is written by a fresh process, which has its capabilities
    // in the namespace once the maps below exist (sh, waiting, has not).
    let inner = format!("echo 0 > /proc/sys/user/max_user_namespaces && exec {}", as_nobody(&run_look()));
    let mut child = Command::new("unshare")
        .args(["--user", "sh", "-c", "read go && exec sh -c \"$INNER\""])
        .env("INNER", inner)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("unshare runs");
    let ns = |pid: &str| std::fs::read_link(format!("/proc/{pid}/ns/user")).ok();
    let deadline = Instant::now() + Duration::from_secs(20);
    while ns(&child.id().to_string()) == ns("self") {
        assert!(Instant::now() < deadline, "unshare --user did not enter a user namespace");
        std::thread::sleep(Duration::from_millis(10));
    }
    // Every uid and gid as on the host (root may write any map).
    for m in ["uid_map", "gid_map"] {
        std::fs::write(format!("/proc/{}/{m}", child.id()), "0 0 4294967295").unwrap();
    }
    child.stdin.take().unwrap().write_all(b"go\n").unwrap();
    let r = Run::from(child.wait_with_output().unwrap());
    r.assert_degraded("none", &["CLONE_NEWUSER", "No space left on device", "user.max_user_namespaces=0"]);
    assert!(r.has_line("sys: none") && r.has_line("dev: none"), "{}", r.out);
    let host: u64 = std::fs::read_to_string("/proc/sys/user/max_user_namespaces").unwrap().trim().parse().unwrap();
    assert!(host > 0, "the host's limit changed");
}

/// Root without `CAP_SYS_ADMIN`, as in a container, cannot unshare the
/// mount namespace: it runs without the view (not in a user namespace,
/// which would take its capabilities over the host away), and is told.
#[test]
fn root_without_cap_sys_admin_runs_without_the_view_and_is_told() {
    if !ready("root_without_cap_sys_admin_runs_without_the_view_and_is_told") {
        return;
    }
    let o = Command::new("sh")
        .args(["-c", &format!("setpriv --bounding-set=-sys_admin {}", run_look())])
        .output()
        .expect("sh runs");
    let r = Run::from(o);
    r.assert_degraded("none", &["unshare(CLONE_NEWNS): Operation not permitted", "CAP_SYS_ADMIN"]);
    assert!(r.has_line("sys: none") && r.has_line("dev: none"), "{}", r.out);
}

/// Containers mount `/sys` read-only. A tmpfs may still be mounted on
/// `/sys/class` (a mount does not write to the directory it covers), so
/// root and users get the whole view; the remount is of the namespace's
/// own `/sys` mount (`bind`), not of the host's sysfs.
#[test]
fn with_sys_read_only_root_and_users_get_the_whole_view() {
    if !ready("with_sys_read_only_root_and_users_get_the_whole_view") {
        return;
    }
    let sys_mount = || {
        let all = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
        all.lines().find(|l| l.split(' ').nth(4) == Some("/sys")).map(str::to_string)
    };
    let before = sys_mount();
    for nobody in [false, true] {
        let look = if nobody { as_nobody(&run_look()) } else { run_look() };
        let script = format!(
            "set -e; mount -o remount,bind,ro /sys; \
             grep -q '^[^ ]* [^ ]* [^ ]* / /sys ro,' /proc/self/mountinfo || {{ echo /sys is not read-only >&2; exit 99; }}; \
             {look}"
        );
        let r = Run::from(Command::new("unshare").args(["-m", "sh", "-c", &script]).output().expect("unshare runs"));
        r.assert_full();
        assert!(r.has_line("sys: RoCE v2") && r.has_line("dev: uverbs0"), "as nobody: {nobody}\n{}", r.out);
    }
    assert_eq!(sys_mount(), before, "the host's /sys changed");
}
