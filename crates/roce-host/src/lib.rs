//! One softroce device shared by every process of a user on a host, as
//! the kernel's Soft-RoCE device is (see `docs/host-sharing.md`).
//!
//! Each open context is a [`Member`]: its own UDP socket bound to the
//! device's address and port 4791 in one `SO_REUSEPORT` group, so packets
//! go from the kernel straight to the process that owns their QP, steered
//! by a classic BPF program ([`steer`]) that maps the BTH destination QP's
//! block to the member's index in the group. Members own QPNs in blocks
//! of 4,096 ([`layout`]); whatever reaches the wrong member (a GRO
//! super-packet, a table that changed) is forwarded to its owner in an
//! [`envelope`]. There is no daemon: members keep the shared table in a
//! file under `/dev/shm`, change it under its `flock`, and tell the living
//! from the dead by OFD locks the kernel drops at a crash.

pub mod envelope;
mod error;
pub mod gsi;
pub mod inbox;
pub mod layout;
mod member;
mod peers;
pub mod resources;
pub mod seats;
mod shm;
mod stats;
pub mod steer;

pub use member::{
    Control, HostError, LISTEN_GRACE, LOCK_PATIENCE, Member, PROBE_PATIENCE, QUARANTINE, Route, device_file, port_owner,
};
pub use peers::PeerWatch;
pub use stats::HostStats;
