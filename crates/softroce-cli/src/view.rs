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
//! other than root (allowed on stock kernels; some container runtimes
//! forbid it: then the program runs without the view, with a warning, and
//! plain verbs and rdma_cm programs are unaffected). See `docs/sysfs.md`.

pub mod ns;
pub mod tree;
mod unshare;

use softroce::config::DeviceInfo;

/// `SOFTROCE_SYSFS=0` turns the view off.
pub fn wanted() -> bool {
    std::env::var("SOFTROCE_SYSFS").map_or(true, |v| v != "0")
}

/// Gives this process (and the program it starts) the view of `devices`.
pub fn enter(devices: &[DeviceInfo]) -> Result<(), ns::ViewError> {
    ns::make_view(&tree::files(devices), devices.len())
}
