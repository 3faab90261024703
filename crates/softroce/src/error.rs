//! Errors of the softroce API, each with what the user can do about it.

use std::path::PathBuf;

/// An error of the softroce API.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The device list could not be made.
    #[error(transparent)]
    Config(#[from] crate::config::ConfigError),
    /// No device has this name.
    #[error("no softroce device {name:?} (devices: {known:?}); name one with SOFTROCE_DEVICES=NAME=ADDR")]
    NoSuchDevice {
        /// The name asked for.
        name: String,
        /// The devices there are.
        known: Vec<String>,
    },
    /// The device's address and port cannot be bound.
    #[error(transparent)]
    Bind(#[from] roce_udp::BindError),
    /// The host's shared device could not be joined.
    #[error(transparent)]
    Host(#[from] roce_host::HostError),
    /// The CM refused a call (no such connection, wrong state, taken service).
    #[error(transparent)]
    Cm(#[from] roce_cm::cm::CmError),
    /// A verb was refused (the C API's errno).
    #[error(transparent)]
    Verb(#[from] roce_proto::VerbError),
    /// An environment variable is malformed.
    #[error("{var}: {msg}")]
    Env {
        /// The variable.
        var: &'static str,
        /// What is wrong.
        msg: String,
    },
    /// `SOFTROCE_FAULTS` is malformed.
    #[error(transparent)]
    Faults(#[from] crate::faults::FaultSpecError),
    /// The pcap file cannot be written.
    #[error("SOFTROCE_PCAP: cannot write {path}: {source}")]
    Pcap {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// A range outside a memory region.
    #[error("{len} bytes at offset {offset} are outside the {size}-byte memory region")]
    OutOfBounds {
        /// Offset asked for.
        offset: usize,
        /// Length asked for.
        len: usize,
        /// The region's size.
        size: usize,
    },
    /// The device stopped working (a panic in its driver thread or while a
    /// thread held it): every verb that would start work fails from then
    /// on, as after rdma-core's `IBV_EVENT_DEVICE_FATAL`.
    #[error("the softroce device failed ({why}): destroy its objects and open it again")]
    DeviceFailed {
        /// What happened.
        why: String,
    },
    /// The host could not join a multicast group (`ibv_attach_mcast`).
    #[error("cannot join multicast group {group} on {iface}: {source}")]
    McastJoin {
        /// The IP group.
        group: std::net::IpAddr,
        /// The device's address.
        iface: std::net::IpAddr,
        /// Why.
        source: std::io::Error,
    },
    /// `ibv_advise_mr` refused its scatter list.
    #[error(transparent)]
    Advise(#[from] crate::odp::AdviseError),
    /// A system call failed.
    #[error(transparent)]
    Io(#[from] std::io::Error),
}

impl Error {
    /// The errno this error stands for, as rdma-core's C libraries report
    /// it (rxe's choices where it has one): softroce-ibverbs' verbs and
    /// softroce-rsocket's sockets both fail with it.
    pub fn errno(&self) -> i32 {
        use Error as E;
        use roce_proto::device::VerbError as V;
        match self {
            E::Verb(v) => match v {
                V::UnknownHandle(_) | V::Invalid(_) | V::Modify(_) => libc::EINVAL,
                V::Cqe { .. } | V::CompVector { .. } | V::Cq(_) => libc::EINVAL,
                V::Exhausted(_) => libc::ENOMEM,
                V::Busy => libc::EBUSY,
                V::Mr(m) => match m {
                    roce_proto::mr::MrError::Exhausted => libc::ENOMEM,
                    roce_proto::mr::MrError::HasWindows(_) => libc::EBUSY,
                    _ => libc::EINVAL,
                },
                V::Post(p) => match p {
                    roce_proto::queue::PostError::QueueFull(_) => libc::ENOMEM,
                    _ => libc::EINVAL,
                },
            },
            E::Io(io) => io.raw_os_error().unwrap_or(libc::EIO),
            E::McastJoin { source, .. } => source.raw_os_error().unwrap_or(libc::EIO),
            E::Bind(_) => libc::EADDRINUSE,
            E::Host(h) => {
                use roce_host::HostError as H;
                match h {
                    H::Bind(_) | H::OtherUser { .. } | H::ServiceTaken { .. } => libc::EADDRINUSE,
                    H::File { source, .. } | H::Io { source, .. } => source.raw_os_error().unwrap_or(libc::EIO),
                    H::Unsafe { .. } => libc::EACCES,
                    H::Locked { .. } | H::Incompatible { .. } => libc::EBUSY,
                    H::Full { .. } | H::NoQpn { .. } | H::ServicesFull { .. } => libc::ENOMEM,
                    _ => libc::EINVAL,
                }
            }
            E::OutOfBounds { .. } => libc::EINVAL,
            E::DeviceFailed { .. } => libc::EIO,
            E::NoSuchDevice { .. } | E::Config(_) => libc::ENODEV,
            _ => libc::EINVAL,
        }
    }
}
