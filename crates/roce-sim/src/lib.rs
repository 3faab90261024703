//! A deterministic, seeded simulated network on virtual time.
//!
//! [`Sim`] drives any number of sans-IO [`Endpoint`]s, each attached at one IP
//! address, and moves the datagrams they emit between them through a fault
//! model ([`FaultConfig`], the `roce-faults` crate's, which `SOFTROCE_FAULTS`
//! shares): drop, duplicate, reorder, corrupt, latency, jitter, MTU,
//! bandwidth, and per-endpoint link down ([`Sim::set_down`]).
//!
//! Time is virtual: it starts at an [`Instant`] captured when the simulation is
//! created and is only ever advanced by the simulation, jumping straight to the
//! next delivery or timeout, never sleeping. All randomness comes from one
//! ChaCha8 generator seeded from a `u64`, and every queue is ordered by
//! `(time, sequence number)`, so the same seed and the same endpoints give the
//! same run, event for event. Failures of [`Sim::run_until`] name the seed so a
//! failing run can be replayed.
//!
//! ```
//! use std::net::{IpAddr, Ipv4Addr};
//! use std::time::{Duration, Instant};
//! use roce_sim::{Bound, Endpoint, FaultConfig, Sim, Transmit};
//!
//! /// Sends one datagram to `peer`, counts what it receives.
//! struct Toy { peer: IpAddr, pending: bool, received: usize }
//!
//! impl Endpoint for Toy {
//!     fn handle_datagram(&mut self, _: Instant, _: IpAddr, _: u16, _: u16, _: &[u8]) {
//!         self.received += 1;
//!     }
//!     fn poll_transmit(&mut self, _: Instant, buf: &mut [u8]) -> Option<Transmit> {
//!         if !std::mem::take(&mut self.pending) {
//!             return None;
//!         }
//!         buf[..5].copy_from_slice(b"hello");
//!         Some(Transmit { dst: self.peer, src_port: 4791, dst_port: 4791, len: 5 })
//!     }
//!     fn poll_timeout(&self) -> Option<Instant> { None }
//!     fn handle_timeout(&mut self, _: Instant) {}
//! }
//!
//! let a: IpAddr = Ipv4Addr::new(10, 0, 0, 1).into();
//! let b: IpAddr = Ipv4Addr::new(10, 0, 0, 2).into();
//! let faults = FaultConfig::default().with_delay(Duration::from_millis(1));
//! let mut sim = Sim::new(42, faults).unwrap();
//! let ia = sim.add_endpoint(a, Toy { peer: b, pending: true, received: 0 });
//! let ib = sim.add_endpoint(b, Toy { peer: a, pending: true, received: 0 });
//! sim.run_until(|s| s.endpoint(ia).received == 1 && s.endpoint(ib).received == 1, Bound::default()).unwrap();
//! assert_eq!(sim.elapsed(), Duration::from_millis(1));
//! ```

#![forbid(unsafe_code)]

use std::net::IpAddr;
use std::time::Instant;

mod device;
mod sim;
mod stats;
mod trace;

pub use device::SimDevice;
pub use roce_faults::{ConfigError, FaultConfig};
pub use sim::{
    Bound, DuplicateAddress, EndpointId, Limit, MAX_TRANSMITS_PER_STEP, RunStats, Sim, SimError, TRANSMIT_BUF_LEN,
    TraceHook,
};
pub use stats::{EndpointStats, Stats};
pub use trace::{Fate, TraceEvent};

/// A datagram an endpoint wants to send: the UDP payload is `buf[..len]` of the buffer given to `poll_transmit`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Transmit {
    /// Destination IP address; the source address is the sending endpoint's own.
    pub dst: IpAddr,
    /// UDP source port.
    pub src_port: u16,
    /// UDP destination port.
    pub dst_port: u16,
    /// Length of the UDP payload written at the start of the buffer.
    pub len: usize,
}

/// A sans-IO endpoint attached to the simulated network at one address.
pub trait Endpoint {
    /// A datagram arrived (UDP payload bytes) from `src:src_port`.
    fn handle_datagram(&mut self, now: Instant, src: IpAddr, src_port: u16, dst_port: u16, data: &[u8]);
    /// The next datagram to send, written into `buf` (at least 9000 bytes); None when nothing is queued.
    fn poll_transmit(&mut self, now: Instant, buf: &mut [u8]) -> Option<Transmit>;
    /// The earliest time `handle_timeout` must be called, if any.
    fn poll_timeout(&self) -> Option<Instant>;
    /// Virtual time reached a timeout the endpoint asked for.
    fn handle_timeout(&mut self, now: Instant);
}

/// Boxed endpoints (including `Box<dyn Endpoint>`, to mix kinds in one [`Sim`]) are endpoints.
impl<E: Endpoint + ?Sized> Endpoint for Box<E> {
    fn handle_datagram(&mut self, now: Instant, src: IpAddr, src_port: u16, dst_port: u16, data: &[u8]) {
        (**self).handle_datagram(now, src, src_port, dst_port, data)
    }
    fn poll_transmit(&mut self, now: Instant, buf: &mut [u8]) -> Option<Transmit> {
        (**self).poll_transmit(now, buf)
    }
    fn poll_timeout(&self) -> Option<Instant> {
        (**self).poll_timeout()
    }
    fn handle_timeout(&mut self, now: Instant) {
        (**self).handle_timeout(now)
    }
}
