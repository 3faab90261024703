//! The sans-IO RoCEv2 engine: verbs objects, the QP lifecycle, and the three
//! protocol roles of Linux rxe (requester, completer, responder), driven by
//! calls that carry `now` and pulled for transmits, timeouts and completions.
//!
//! Only what the rest of softroce uses is `pub`: the modules that serve the
//! engine alone are private, and the lint below keeps it so.

#![deny(unsafe_code)]
#![warn(unreachable_pub)]

mod attr;
mod cc;
mod completer;
pub mod counters;
pub mod cq;
mod ctx;
pub mod devattr;
pub mod device;
mod handle;
pub mod mcast;
pub mod mem;
pub mod mr;
mod outgoing;
pub mod qp;
pub mod qp_state;
pub mod queue;
mod reorder;
mod requester;
mod responder;
mod seq24;
mod sges;
mod srq;
#[cfg(any(test, feature = "testing"))]
pub mod testing;
mod timers;
pub mod verbs;
pub mod wr;

pub use attr::{AhAttr, IbPath, Mtu, QpAttr, QpCap, QpInitAttr, WideMtu};
pub use ctx::AsyncEvent;
pub use ctx::Piece;
pub use device::{Device, DeviceConfig, Limits, Transmit, TransmitGather, VerbError};
pub use handle::{CqHandle, PdHandle, Qpn, SrqHandle};
pub use mem::Region;
/// The 24-bit PSN of the wire crate, which `QpAttr` carries.
pub use roce_wire::Psn;
pub use wr::{Payload, RecvWr, SendWr, Sge, UdDest, Wc, WcFlags};
