//! The sans-IO RoCEv2 engine: verbs objects, the QP lifecycle, and the three
//! protocol roles of Linux rxe (requester, completer, responder), driven by
//! calls that carry `now` and pulled for transmits, timeouts and completions.

#![deny(unsafe_code)]

pub mod attr;
pub mod cc;
pub mod completer;
pub mod counters;
pub mod cq;
pub mod ctx;
pub mod devattr;
pub mod device;
pub mod mcast;
pub mod mem;
pub mod mr;
pub mod qp;
pub mod qp_state;
pub mod queue;
pub mod reorder;
pub mod requester;
pub mod responder;
pub mod srq;
pub mod timers;
pub mod verbs;
pub mod wr;

pub use attr::{AhAttr, Mtu, QpAttr, QpCap, QpInitAttr};
pub use ctx::AsyncEvent;
pub use ctx::Piece;
pub use device::{Device, DeviceConfig, Limits, Transmit, TransmitGather, VerbError};
pub use mem::Region;
pub use wr::{Payload, RecvWr, SendWr, Sge, UdDest, Wc, WcFlags};
