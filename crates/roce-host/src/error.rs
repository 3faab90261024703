//! Why a shared device could not be joined or kept ([`HostError`]).

use std::io;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use roce_udp::BindError;

use crate::layout::{self, MAX_MEMBERS};

/// Why a device could not be joined or kept.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum HostError {
    /// The device file could not be made, opened or mapped.
    #[error("device file {path}: {source}")]
    File {
        /// The file.
        path: PathBuf,
        /// The system error.
        source: io::Error,
    },
    /// The device file belongs to another user or others may write it.
    #[error("device file {path} is owned by uid {owner} with mode {mode:o}: it must be yours and private (remove it)")]
    Unsafe {
        /// The file.
        path: PathBuf,
        /// Its owner.
        owner: u32,
        /// Its mode.
        mode: u32,
    },
    /// Another process holds the device file's lock and does not let go.
    #[error(
        "device file {path} stayed locked for {patience:?}: a process holding it hangs (find it with `fuser {path}`)"
    )]
    Locked {
        /// The file.
        path: PathBuf,
        /// How long was waited.
        patience: Duration,
    },
    /// The device file is in use with another layout (another softroce version).
    #[error("device file {path} is in use by a softroce of another version: stop its processes first")]
    Incompatible {
        /// The file.
        path: PathBuf,
    },
    /// The device has [`MAX_MEMBERS`] members already.
    #[error("{addr} already has {MAX_MEMBERS} open contexts")]
    Full {
        /// The device's address.
        addr: SocketAddr,
    },
    /// Another process of the device listens on the service ID.
    #[error("service ID {service_id:#018x} on {addr} is listened on by process {pid} already")]
    ServiceTaken {
        /// The device's address.
        addr: SocketAddr,
        /// The service ID.
        service_id: u64,
        /// The listener's pid.
        pid: u32,
    },
    /// The device's service table is full.
    #[error("{addr} has {max} listening service IDs already", max = layout::MAX_SERVICES)]
    ServicesFull {
        /// The device's address.
        addr: SocketAddr,
    },
    /// Every QPN block is owned.
    #[error("no QP number left on {addr}: every block is in use")]
    NoQpn {
        /// The device's address.
        addr: SocketAddr,
    },
    /// Binding the group's socket failed.
    #[error("{0}")]
    Bind(#[from] BindError),
    /// The address is another user's shared device (the kernel groups
    /// only sockets of one user).
    #[error(
        "cannot share {addr}: its UDP port is held by uid {uid} (a device is shared only among processes \
         of one user); use another address, e.g. `softroce run --loopback`"
    )]
    OtherUser {
        /// The address.
        addr: SocketAddr,
        /// The uid holding it.
        uid: u32,
    },
    /// A socket call failed.
    #[error("{what} on {addr}: {source}")]
    Io {
        /// What was done.
        what: &'static str,
        /// The device's address.
        addr: SocketAddr,
        /// The system error.
        source: io::Error,
    },
}
