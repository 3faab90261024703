//! The errno of a softroce error, for every verb that fails with one.
//!
//! One mapping for the whole library (rxe's choices where it has one): a
//! verb that reports a softroce error as an errno calls [`errno`]. Change a
//! mapping here, nowhere else.

use std::ffi::c_int;

use softroce::Error;

/// The errno a softroce error stands for (rxe's choices where it has one).
pub(crate) fn errno(e: &Error) -> c_int {
    use roce_proto::device::VerbError as V;
    use softroce::Error as E;
    match e {
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
