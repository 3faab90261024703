//! The device as the rest of the RDMA stack sees it: `/sys/class/infiniband`,
//! `/sys/class/infiniband_verbs` and `/dev/infiniband`, shown to the
//! program `softroce run` starts (UCX keeps a device only if
//! `/dev/infiniband/uverbsN` is a readable and writable character device,
//! and reads the GID types under `/sys/class/infiniband`; Open MPI and
//! NCCL look there too).
//!
//! Why a mount namespace and not an `LD_PRELOAD` interposer: the kernel
//! then answers every way of looking (`stat`, `open`, `readlink`,
//! `realpath`, `opendir`, direct system calls, static binaries, Python),
//! where an interposer must wrap some 40 glibc entry points and still
//! misses the rest. It costs an unprivileged user namespace for users
//! other than root. Where a part of the view cannot be made (no user
//! namespaces, no `CAP_SYS_ADMIN`, a chroot's `/dev` on no mount of its
//! own), the program runs with what could be made, and [`View::warning`]
//! says what that is. See `docs/sysfs.md`, "What works where".

pub mod ns;
pub mod tree;
mod unshare;

use softroce::config::DeviceInfo;

/// `SOFTROCE_SYSFS=0` turns the view off.
pub fn wanted() -> bool {
    !softroce::env::off(softroce::env::SYSFS)
}

/// Which view the program got. The two parts are made independently: a
/// chroot may allow one and not the other.
#[derive(Debug)]
pub enum View {
    /// `/sys/class/infiniband*` and `/dev/infiniband`.
    Full,
    /// `/dev/infiniband` only; why `/sys/class` has no softroce devices.
    DevOnly(String),
    /// `/sys/class/infiniband*` only; why `/dev/infiniband` is missing.
    SysOnly(String),
    /// Neither; why.
    None(String),
}

impl View {
    /// The view from its two parts' outcomes.
    pub fn of(sys: Result<(), ns::ViewError>, dev: Result<(), ns::ViewError>) -> View {
        match (sys, dev) {
            (Ok(()), Ok(())) => View::Full,
            (Err(s), Ok(())) => View::DevOnly(s.to_string()),
            (Ok(()), Err(d)) => View::SysOnly(d.to_string()),
            (Err(s), Err(d)) => View::None(format!("{s}; {d}")),
        }
    }

    /// The line `softroce run` prints on stderr when the view is not
    /// whole: what the program got, why, and what will not work
    /// (`docs/sysfs.md`: UCX needs `/dev/infiniband/uverbsN`, and takes
    /// GIDs whose type it cannot read for RoCE v1).
    pub fn warning(&self) -> Option<String> {
        let (got, why, effect) = match self {
            View::Full => return None,
            View::DevOnly(why) => (
                "/dev/infiniband only, no /sys/class/infiniband",
                why,
                "UCX still finds softroce's devices but takes their GIDs for RoCE v1 (which RoCE v2 NICs will not \
                 reach), and programs that read /sys/class/infiniband (Open MPI's verbs components, NCCL) may not \
                 find them",
            ),
            View::SysOnly(why) => (
                "/sys/class/infiniband only, no /dev/infiniband",
                why,
                "UCX (and so Open MPI's UCX PML) will not see softroce's devices: it needs /dev/infiniband/uverbsN",
            ),
            View::None(why) => (
                "none (no /sys/class/infiniband or /dev/infiniband)",
                why,
                "UCX, Open MPI and NCCL will not see softroce's devices",
            ),
        };
        Some(format!(
            "softroce run: view: {got}: {why}. {effect}; plain verbs and rdma_cm programs are unaffected \
             (SOFTROCE_SYSFS=0 skips the view)"
        ))
    }
}

/// Gives this process (and the program it starts) as much of the view of
/// `devices` as can be made here.
pub fn enter(devices: &[DeviceInfo]) -> View {
    ns::make_view(&tree::files(devices), devices.len())
}
