//! rdma_cm over softroce: connections by IP address and port, as
//! librdmacm and the kernel's `rdma_cm` make them (rdmacm.md 2-3). An
//! [`EventChannel`] delivers the events of its [`CmId`]s; an id resolves
//! an address and a route (both local on RoCE: no packets), connects or
//! listens, and drives its QP through INIT, RTR and RTS with the values the
//! CM exchange gives, as librdmacm does around the kernel's events.
//!
//! Devices are opened on first use, one context and one
//! [`CmService`](crate::cm::CmService) per device for the whole process
//! (librdmacm opens every device once); the services' events are routed to
//! the ids by comm ID, and REQs to the listener of their service ID.
//!
//! The files, from the consumer down: `channel.rs` (event channels and
//! events), `id.rs` (an id and its calls), `registry.rs` (the process's
//! devices and the routes of their events to ids), `service.rs` (the
//! device's CM: QP 1 and the `roce_cm` agent, public as `softroce::cm`).
//! This file only declares and re-exports.

mod channel;
mod id;
mod registry;
pub(crate) mod service;

pub use channel::{ConnParam, Event, EventChannel, EventType, UdParam};
pub use id::{CmId, IdState};
pub use registry::{ContextOpener, set_context_opener};
pub use roce_cm::wire::PortSpace;
