//! The private mount namespace `softroce run` gives its program: a tmpfs
//! `/sys/class` that holds every real class (bind mounts) plus the
//! generated `infiniband*` classes, and a tmpfs `/dev` that holds every
//! real entry plus `infiniband/uverbs<i>` and `infiniband/rdma_cm`
//! (`/dev/null` bound on each: a character device that opens, as UCX
//! requires). Nothing is visible outside: the mounts are private, and the
//! staging directory is gone before the program starts.
//!
//! Root unshares only the mount namespace. Another user first enters a
//! user namespace that maps its own uid and gid to themselves, so its
//! files, sockets and the shared device's table keep their owner; the
//! program then runs without capabilities (an execve by a non-zero uid
//! drops them).

use std::io;
use std::os::unix::fs::{FileTypeExt, symlink};
use std::path::{Path, PathBuf};

use rustix::mount::{MountFlags, MountPropagationFlags, UnmountFlags};

use super::tree::File;

/// Why the view could not be made, with the step that failed.
#[derive(Debug, thiserror::Error)]
#[error("{step}: {source}")]
pub struct ViewError {
    step: String,
    source: io::Error,
}

fn at<T>(step: impl Into<String>, r: Result<T, impl Into<io::Error>>) -> Result<T, ViewError> {
    r.map_err(|e| ViewError { step: step.into(), source: e.into() })
}

/// Enters a new mount namespace (and, unless root, a user namespace) for
/// this process and the program it starts. Must run while the process has
/// one thread (the kernel refuses a user namespace otherwise).
fn enter_namespace() -> Result<(), ViewError> {
    let (uid, gid) = (rustix::process::getuid(), rustix::process::getgid());
    if uid.is_root() {
        return at("unshare(CLONE_NEWNS)", super::unshare::unshare_mounts(false));
    }
    at(
        "unshare(CLONE_NEWUSER|CLONE_NEWNS) (are unprivileged user namespaces allowed?)",
        super::unshare::unshare_mounts(true),
    )?;
    at("writing /proc/self/setgroups", std::fs::write("/proc/self/setgroups", "deny"))?;
    at("writing /proc/self/uid_map", std::fs::write("/proc/self/uid_map", format!("{0} {0} 1", uid.as_raw())))?;
    at("writing /proc/self/gid_map", std::fs::write("/proc/self/gid_map", format!("{0} {0} 1", gid.as_raw())))?;
    Ok(())
}

/// An empty file or directory at `dst` with `src` bound on it.
fn bind_entry(src: &Path, dst: &Path) -> Result<(), ViewError> {
    let meta = at(format!("lstat {}", src.display()), std::fs::symlink_metadata(src))?;
    let ft = meta.file_type();
    if ft.is_symlink() {
        let target = at(format!("readlink {}", src.display()), std::fs::read_link(src))?;
        return at(format!("symlink {}", dst.display()), symlink(target, dst));
    }
    if ft.is_dir() {
        at(format!("mkdir {}", dst.display()), std::fs::create_dir(dst))?;
    } else {
        at(format!("creating {}", dst.display()), std::fs::File::create(dst))?;
    }
    at(format!("bind {} on {}", src.display(), dst.display()), rustix::mount::mount_bind_recursive(src, dst))
}

/// `root/<name>` for every entry of `real` (bound), except `skip`.
fn mirror(real: &Path, root: &Path, skip: &[&str]) -> Result<(), ViewError> {
    at(format!("mkdir {}", root.display()), std::fs::create_dir_all(root))?;
    for e in at(format!("reading {}", real.display()), std::fs::read_dir(real))? {
        let e = at(format!("reading {}", real.display()), e)?;
        let name = e.file_name();
        if skip.iter().any(|s| name == **s) {
            continue;
        }
        let r = bind_entry(&e.path(), &root.join(&name));
        // A device or class that went away meanwhile is not an error.
        if let Err(err) = r
            && err.source.kind() != io::ErrorKind::NotFound
        {
            return Err(err);
        }
    }
    Ok(())
}

/// Writes the generated files below `root`.
fn write_files(root: &Path, files: &[File]) -> Result<(), ViewError> {
    for f in files {
        let p = root.join(&f.path);
        if let Some(dir) = p.parent() {
            at(format!("mkdir {}", dir.display()), std::fs::create_dir_all(dir))?;
        }
        at(format!("writing {}", p.display()), std::fs::write(&p, &f.content))?;
    }
    Ok(())
}

/// Makes this process's view: `/sys/class/infiniband*` from `files`, and
/// `/dev/infiniband/uverbs0..uverbs<n>` plus `rdma_cm`. Real RDMA classes
/// and devices of the host, if any, stay visible beside softroce's.
pub fn make_view(files: &[File], n_devices: usize) -> Result<(), ViewError> {
    enter_namespace()?;
    at(
        "making / private",
        rustix::mount::mount_change("/", MountPropagationFlags::PRIVATE | MountPropagationFlags::REC),
    )?;
    let staging = std::env::temp_dir().join(format!("softroce-view-{}", std::process::id()));
    at(format!("mkdir {}", staging.display()), std::fs::create_dir_all(&staging))?;
    let r = build(&staging, files, n_devices);
    // The staging mount goes (the bound subtrees keep the tmpfs), and so
    // does its directory, whether or not the build worked.
    let _ = rustix::mount::unmount(&staging, UnmountFlags::DETACH);
    let _ = std::fs::remove_dir(&staging);
    r
}

fn build(staging: &Path, files: &[File], n_devices: usize) -> Result<(), ViewError> {
    at(
        "mounting a tmpfs",
        rustix::mount::mount("softroce", staging, "tmpfs", MountFlags::NOSUID | MountFlags::NODEV, c"mode=0755"),
    )?;
    let (class, dev) = (staging.join("class"), staging.join("dev"));
    mirror(Path::new("/sys/class"), &class, &["infiniband", "infiniband_verbs"])?;
    // A host's real RDMA devices stay listed beside softroce's.
    for c in ["infiniband", "infiniband_verbs"] {
        let real = Path::new("/sys/class").join(c);
        if real.is_dir() {
            mirror(&real, &class.join(c), &[])?;
        }
    }
    write_files(&class, files)?;
    mirror(Path::new("/dev"), &dev, &["infiniband"])?;
    let ib = dev.join("infiniband");
    if Path::new("/dev/infiniband").is_dir() {
        mirror(Path::new("/dev/infiniband"), &ib, &[])?;
    }
    at(format!("mkdir {}", ib.display()), std::fs::create_dir_all(&ib))?;
    let mut nodes: Vec<PathBuf> = (0..n_devices).map(|i| ib.join(format!("uverbs{i}"))).collect();
    nodes.push(ib.join("rdma_cm"));
    for node in nodes {
        if node.exists() {
            continue;
        }
        bind_entry(Path::new("/dev/null"), &node)?;
        let ok = std::fs::metadata(&node).is_ok_and(|m| m.file_type().is_char_device());
        if !ok {
            return Err(ViewError {
                step: format!("{} is no character device", node.display()),
                source: io::Error::other("bind"),
            });
        }
    }
    at("binding the view on /sys/class", rustix::mount::mount_bind_recursive(&class, "/sys/class"))?;
    at("binding the view on /dev", rustix::mount::mount_bind_recursive(&dev, "/dev"))?;
    Ok(())
}
