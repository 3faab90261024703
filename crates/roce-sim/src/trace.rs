//! A record of what happened to each datagram, for debugging failed runs.

use std::fmt;
use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

/// One thing that happened to a datagram.
///
/// Times are offsets from the simulation's start ([`Sim::start`](crate::Sim::start)),
/// so traces of two runs compare equal when the runs are the same.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TraceEvent {
    /// Virtual time of the event, since the simulation started.
    pub time: Duration,
    /// Number of the datagram (its index among all datagrams sent); a duplicate shares its original's.
    pub id: u64,
    /// Source address (the sending endpoint's).
    pub src: IpAddr,
    /// UDP source port.
    pub src_port: u16,
    /// Destination address.
    pub dst: IpAddr,
    /// UDP destination port.
    pub dst_port: u16,
    /// Payload length.
    pub len: usize,
    /// What happened.
    pub fate: Fate,
}

/// What happened to a datagram (or to one copy of it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fate {
    /// At send: a copy was put in flight, to arrive at `arrival` (since start).
    Scheduled {
        /// Arrival time since the simulation started.
        arrival: Duration,
        /// This is the extra copy made by the `duplicate` fault.
        copy: bool,
        /// The payload had bits flipped.
        corrupted: bool,
        /// The copy was held back by the `reorder` fault.
        reordered: bool,
    },
    /// At send: lost to the random `drop` fault.
    Dropped,
    /// At send: longer than the MTU.
    TooBig,
    /// At send: no endpoint has the destination address.
    Undeliverable,
    /// At send or at arrival: the source or destination was down.
    Down,
    /// At arrival: handed to the destination.
    Delivered,
}

impl fmt::Display for Fate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Fate::Scheduled { arrival, copy, corrupted, reordered } => {
                write!(f, "scheduled for {:.6}s", arrival.as_secs_f64())?;
                for (flag, name) in [(copy, "duplicate"), (corrupted, "corrupted"), (reordered, "reordered")] {
                    if flag {
                        write!(f, " {name}")?;
                    }
                }
                Ok(())
            }
            Fate::Dropped => f.write_str("dropped"),
            Fate::TooBig => f.write_str("too big"),
            Fate::Undeliverable => f.write_str("undeliverable"),
            Fate::Down => f.write_str("link down"),
            Fate::Delivered => f.write_str("delivered"),
        }
    }
}

impl fmt::Display for TraceEvent {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{:.6}s #{} {} -> {} {}B {}",
            self.time.as_secs_f64(),
            self.id,
            SocketAddr::new(self.src, self.src_port),
            SocketAddr::new(self.dst, self.dst_port),
            self.len,
            self.fate
        )
    }
}
