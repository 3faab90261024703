//! The private mount namespace `softroce run` gives its program: a tmpfs
//! on `/sys/class` that holds every real class (bind mounts) plus the
//! generated `infiniband*` classes, and a tmpfs on `/dev` that holds every
//! real entry plus `infiniband/uverbs<i>` and `infiniband/rdma_cm`
//! (`/dev/null` bound on each: a character device that opens, as UCX
//! requires).
//!
//! Each tmpfs is mounted in place and filled from the directory it covers,
//! reached as the working directory. There is no staging directory: in a
//! chroot whose `/` is no mount point, the temp dir lies on a mount of the
//! host that the chroot cannot name, so cannot make private, and a mount
//! there would appear on the host (measured: so does `mount --rbind / /`,
//! and it outlives the namespace). Every mount made here sits on a private
//! mount, so nothing is visible outside.
//!
//! Root unshares only the mount namespace. Another user first enters a
//! user namespace that maps its own uid and gid to themselves, so its
//! files, sockets and the shared device's table keep their owner; the
//! program then runs without capabilities (an execve by a non-zero uid
//! drops them).

use std::io;
use std::os::unix::fs::{FileTypeExt, symlink};
use std::path::{Path, PathBuf};

use rustix::fs::{Mode, OFlags};
use rustix::mount::{MountFlags, MountPropagationFlags, UnmountFlags};

use super::View;
use super::tree::File;

/// Why a part of the view could not be made: the step that failed, the
/// error, and what usually causes it.
#[derive(Debug, thiserror::Error)]
#[error("{step}: {source}{}", hint.map_or(String::new(), |h| format!("; {h}")))]
pub struct ViewError {
    step: String,
    source: io::Error,
    hint: Option<&'static str>,
}

impl ViewError {
    fn hint(mut self, hint: &'static str) -> ViewError {
        self.hint = Some(hint);
        self
    }
}

fn at<T>(step: impl Into<String>, r: Result<T, impl Into<io::Error>>) -> Result<T, ViewError> {
    r.map_err(|e| ViewError { step: step.into(), source: e.into(), hint: None })
}

fn failed(step: impl Into<String>, why: &str) -> ViewError {
    ViewError { step: step.into(), source: io::Error::other(why.to_string()), hint: None }
}

/// Enters a new mount namespace (and, unless root, a user namespace) for
/// this process and the program it starts. Must run while the process has
/// one thread (the kernel refuses a user namespace otherwise).
///
/// Root without `CAP_SYS_ADMIN` (a container's) gets no view rather than a
/// user namespace: that would take its capabilities over the host's
/// files and network away from the program.
fn enter_namespace() -> Result<(), ViewError> {
    let (uid, gid) = (rustix::process::getuid(), rustix::process::getgid());
    if uid.is_root() {
        return at("unshare(CLONE_NEWNS)", super::unshare::unshare_mounts(false))
            .map_err(|e| e.hint("root needs CAP_SYS_ADMIN, which containers rarely grant"));
    }
    // Without the map the program would run as the overflow uid: make
    // sure it can be written before there is no way back.
    if !Path::new("/proc/self/uid_map").exists() {
        return Err(failed("/proc/self/uid_map", "/proc is not mounted, and a user namespace needs it"));
    }
    at("unshare(CLONE_NEWUSER|CLONE_NEWNS)", super::unshare::unshare_mounts(true)).map_err(|e| {
        e.hint("chroots, container seccomp profiles and user.max_user_namespaces=0 refuse user namespaces")
    })?;
    at("writing /proc/self/setgroups", std::fs::write("/proc/self/setgroups", "deny"))?;
    at("writing /proc/self/uid_map", std::fs::write("/proc/self/uid_map", format!("{0} {0} 1", uid.as_raw())))?;
    at("writing /proc/self/gid_map", std::fs::write("/proc/self/gid_map", format!("{0} {0} 1", gid.as_raw())))?;
    Ok(())
}

/// Makes the mount holding `target` private (recursively), so that mounts
/// made on it reach no other namespace. `mount_change` wants the mount's
/// root and says EINVAL for any other directory: walk up to it. When even
/// `/` says EINVAL, `target` lies on a chroot's `/` that is a directory of
/// a mount outside the chroot, which cannot be named: no mount may go there.
fn make_private(target: &Path) -> Result<(), ViewError> {
    for p in target.ancestors() {
        match rustix::mount::mount_change(p, MountPropagationFlags::PRIVATE | MountPropagationFlags::REC) {
            Ok(()) => return Ok(()),
            Err(rustix::io::Errno::INVAL) => continue,
            Err(e) => return at(format!("making {} private", p.display()), Err(e)),
        }
    }
    Err(failed(
        format!("making the mount of {} private", target.display()),
        "neither it nor a directory above it is a mount point (a chroot's / that is no mount), \
         so a mount there would appear outside",
    ))
}

/// An empty file or directory at `dst` with `src` bound on it.
fn bind_entry(src: &Path, dst: &Path) -> Result<(), ViewError> {
    let meta = at(format!("lstat of the real {}", dst.display()), std::fs::symlink_metadata(src))?;
    let ft = meta.file_type();
    if ft.is_symlink() {
        let target = at(format!("readlink of the real {}", dst.display()), std::fs::read_link(src))?;
        return at(format!("symlink {}", dst.display()), symlink(target, dst));
    }
    if ft.is_dir() {
        at(format!("mkdir {}", dst.display()), std::fs::create_dir(dst))?;
    } else {
        at(format!("creating {}", dst.display()), std::fs::File::create(dst))?;
    }
    at(format!("binding the real {0} on {0}", dst.display()), rustix::mount::mount_bind_recursive(src, dst))
}

/// `root/<name>` for every entry of `real` (bound), except `skip`.
fn mirror(real: &Path, root: &Path, skip: &[&str]) -> Result<(), ViewError> {
    at(format!("mkdir {}", root.display()), std::fs::create_dir_all(root))?;
    for e in at(format!("reading the real {}", root.display()), std::fs::read_dir(real))? {
        let e = at(format!("reading the real {}", root.display()), e)?;
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
    // Files come directory by directory (a GID table's 1,024 in one): each
    // directory is made once, not once per file (a mkdir and a stat per
    // level each time made `softroce run` spend 80 ms here).
    let mut made: Option<PathBuf> = None;
    for f in files {
        let p = root.join(&f.path);
        if let Some(dir) = p.parent()
            && made.as_deref() != Some(dir)
        {
            at(format!("mkdir {}", dir.display()), std::fs::create_dir_all(dir))?;
            made = Some(dir.to_path_buf());
        }
        at(format!("writing {}", p.display()), std::fs::write(&p, &f.content))?;
    }
    Ok(())
}

/// Mounts a tmpfs on `target` and has `fill` fill it: `fill` finds the
/// tmpfs at `target` and the directory it covers at `.` (the working
/// directory, put back afterwards). If anything fails, the tmpfs goes and
/// `target` is as it was.
fn overlay(target: &Path, fill: impl FnOnce() -> Result<(), ViewError>) -> Result<(), ViewError> {
    let dir = OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC;
    let real = at(format!("opening {}", target.display()), rustix::fs::open(target, dir, Mode::empty()))?;
    let cwd = at("opening the working directory", rustix::fs::open(".", dir, Mode::empty()))?;
    at(
        format!("mounting a tmpfs on {}", target.display()),
        rustix::mount::mount("softroce", target, "tmpfs", MountFlags::NOSUID | MountFlags::NODEV, c"mode=0755"),
    )?;
    let r = at(format!("entering the real {}", target.display()), rustix::process::fchdir(&real)).and_then(|()| fill());
    let back = at("returning to the working directory", rustix::process::fchdir(&cwd));
    let r = r.and(back);
    if r.is_err() {
        let _ = rustix::mount::unmount(target, UnmountFlags::DETACH);
    }
    r
}

/// `/sys/class`: the real classes, and softroce's `infiniband*` beside a
/// host's real RDMA devices, if any.
fn fill_sys(files: &[File]) -> Result<(), ViewError> {
    let class = Path::new("/sys/class");
    mirror(Path::new("."), class, &["infiniband", "infiniband_verbs"])?;
    for c in ["infiniband", "infiniband_verbs"] {
        let real = Path::new(".").join(c);
        if real.is_dir() {
            mirror(&real, &class.join(c), &[])?;
        }
    }
    write_files(class, files)
}

/// `/dev`: the real entries (so `/dev/shm`, where the shared devices'
/// tables live, is the host's), and `infiniband/uverbs0..<n>` and `rdma_cm`.
fn fill_dev(n_devices: usize) -> Result<(), ViewError> {
    let dev = Path::new("/dev");
    mirror(Path::new("."), dev, &["infiniband"])?;
    let ib = dev.join("infiniband");
    let real_ib = Path::new("./infiniband");
    if real_ib.is_dir() {
        mirror(real_ib, &ib, &[])?;
    }
    at(format!("mkdir {}", ib.display()), std::fs::create_dir_all(&ib))?;
    let mut nodes: Vec<PathBuf> = (0..n_devices).map(|i| ib.join(format!("uverbs{i}"))).collect();
    nodes.push(ib.join("rdma_cm"));
    for node in nodes {
        if node.exists() {
            continue;
        }
        at(format!("creating {}", node.display()), std::fs::File::create(&node))?;
        at(
            format!("binding /dev/null on {}", node.display()),
            rustix::mount::mount_bind_recursive(Path::new("./null"), &node),
        )?;
        let ok = std::fs::metadata(&node).is_ok_and(|m| m.file_type().is_char_device());
        if !ok {
            return Err(failed(format!("binding /dev/null on {}", node.display()), "no character device came out"));
        }
    }
    Ok(())
}

/// Makes this process's view, as much of it as can be made here:
/// `/sys/class/infiniband*` from `files`, and
/// `/dev/infiniband/uverbs0..uverbs<n>` plus `rdma_cm`. Real RDMA classes
/// and devices of the host, if any, stay visible beside softroce's.
pub fn make_view(files: &[File], n_devices: usize) -> View {
    if let Err(e) = enter_namespace() {
        return View::None(e.to_string());
    }
    // Where / is a mount point, all at once; a chroot's / that is not one
    // says EINVAL, and then each part makes its own mount private.
    let all_private =
        rustix::mount::mount_change("/", MountPropagationFlags::PRIVATE | MountPropagationFlags::REC).is_ok();
    let part = |target: &str, fill: &dyn Fn() -> Result<(), ViewError>| {
        let target = Path::new(target);
        at(format!("looking at {}", target.display()), std::fs::metadata(target))?;
        if !all_private {
            make_private(target)?;
        }
        overlay(target, fill)
    };
    let sys = part("/sys/class", &|| fill_sys(files));
    let dev = part("/dev", &|| fill_dev(n_devices));
    View::of(sys, dev)
}
