//! Programs of another Debian release, run over softroce: the roots that
//! `scripts/distro/root.sh` makes with debootstrap (CI makes them;
//! `SOFTROCE_DISTRO_CACHE` says where, default /var/cache/softroce/distros).
//! Needs root (chroot, mounts).

use std::path::{Path, PathBuf};
use std::process::Command;

/// The root of Debian release `suite`, if made (its stamp is written last)
/// and this process may chroot; otherwise prints a skip line, or fails
/// under CI.
pub fn root(suite: &str) -> Option<PathBuf> {
    let cache = std::env::var_os("SOFTROCE_DISTRO_CACHE")
        .map_or_else(|| PathBuf::from("/var/cache/softroce/distros"), PathBuf::from);
    let root = cache.join(suite);
    let ok = root.join(".softroce-stamp").is_file() && rustix::process::geteuid().is_root();
    if !ok {
        let msg = format!(
            "{suite}: no release root at {} or not root (make it with `scripts/distro/root.sh {suite}` as root)",
            root.display()
        );
        assert!(std::env::var_os("CI").is_none(), "CI is set and {msg}");
        eprintln!("skipped: {msg}");
        return None;
    }
    Some(root)
}

/// Whether the root has `tool` on Debian's default PATH.
pub fn has(root: &Path, tool: &str) -> bool {
    ["usr/bin", "usr/sbin", "bin", "sbin"].iter().any(|d| root.join(d).join(tool).is_file())
}

/// A command running `softroce` (the binary at `softroce`) inside `root`,
/// its directory bound at its own path, so `softroce run` finds its library
/// and makes the same `libibverbs.so.1` link as outside; the caller adds
/// softroce's arguments.
pub fn softroce(root: &Path, softroce: &Path) -> Command {
    let dir = softroce.parent().expect("softroce has a directory");
    chrooted(root, &[dir], &[softroce.to_str().expect("a UTF-8 path")])
}

/// A command running `program` inside `root` as root, in a mount namespace
/// of its own that binds the host's /proc, /dev (and so /dev/shm, where
/// shared devices live), /sys and /tmp (the loopback leases, and the tests'
/// files at the same paths), and each of `binds` at its own path, into the
/// root.
pub fn chrooted(root: &Path, binds: &[&Path], program: &[&str]) -> Command {
    const SCRIPT: &str = r#"set -e
r=$1; n=$2; shift 2
mount --bind /proc "$r/proc"
mount --rbind /dev "$r/dev"
mount --rbind /sys "$r/sys"
mount --bind /tmp "$r/tmp"
while [ "$n" -gt 0 ]; do
  mkdir -p "$r$1"
  mount --bind "$1" "$r$1"
  shift; n=$((n - 1))
done
exec chroot "$r" "$@""#;
    let mut c = Command::new("unshare");
    c.args(["--mount", "--propagation", "private", "--", "sh", "-c", SCRIPT, "sh"]);
    c.arg(root).arg(binds.len().to_string()).args(binds).args(program);
    c
}
