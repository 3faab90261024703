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

/// The shell that starts `softroce` in a root: `$1` the root, `$2` the
/// directory of `softroce`, then `softroce`'s arguments. A mount namespace
/// of its own binds the host's /proc, /dev (and so /dev/shm, where shared
/// devices live), /sys and /tmp (the loopback leases, and the tests' files
/// at the same paths) into the root, and softroce's directory read-only at
/// /opt/softroce.
const IN_RELEASE: &str = r#"set -e
r=$1; b=$2; shift 2
mkdir -p "$r/opt/softroce"
mount --bind /proc "$r/proc"
mount --rbind /dev "$r/dev"
mount --rbind /sys "$r/sys"
mount --bind /tmp "$r/tmp"
mount --bind "$b" "$r/opt/softroce"
mount -o remount,bind,ro "$r/opt/softroce"
exec chroot "$r" /opt/softroce/softroce "$@""#;

/// A command running `softroce` (the binary at `softroce`) inside `root`;
/// the caller adds softroce's arguments.
pub fn softroce(root: &Path, softroce: &Path) -> Command {
    let mut c = Command::new("unshare");
    c.args(["--mount", "--propagation", "private", "--", "sh", "-c", IN_RELEASE, "sh"]);
    c.arg(root).arg(softroce.parent().expect("softroce has a directory"));
    c
}
