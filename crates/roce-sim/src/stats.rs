//! Counters kept by the simulation.

use std::fmt;

/// What happened to the datagrams of a simulation so far.
///
/// Every datagram an endpoint emits counts once in `sent`; then exactly one of
/// `too_big`, `undeliverable`, `down` or `dropped` (lost before delivery), or it
/// is scheduled (once, or twice when `duplicated`). Each scheduled copy is later
/// either `delivered` or counted in `down` (its destination went down while it
/// was in flight). `corrupted` and `reordered` qualify scheduled datagrams.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Stats {
    /// Datagrams emitted by endpoints (`poll_transmit` returned `Some`).
    pub sent: u64,
    /// Datagram copies handed to a destination's `handle_datagram`.
    pub delivered: u64,
    /// Datagrams lost to the random `drop` fault.
    pub dropped: u64,
    /// Datagrams given a second copy by the `duplicate` fault.
    pub duplicated: u64,
    /// Datagram copies held back by the `reorder` fault.
    pub reordered: u64,
    /// Datagrams whose payload had bits flipped (a duplicated one counts once).
    pub corrupted: u64,
    /// Datagrams longer than the MTU (or than the transmit buffer), dropped.
    pub too_big: u64,
    /// Datagrams addressed to an IP with no endpoint attached.
    pub undeliverable: u64,
    /// Datagram copies lost because their source or destination was set down.
    pub down: u64,
    /// Payload bytes handed to destinations.
    pub bytes_delivered: u64,
    /// Calls made to `handle_timeout`.
    pub timeouts: u64,
    /// Per-endpoint counters, indexed by [`EndpointId::index`](crate::EndpointId::index).
    pub per_endpoint: Vec<EndpointStats>,
}

/// Counters of one endpoint.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct EndpointStats {
    /// Datagrams it emitted.
    pub sent: u64,
    /// Datagram copies delivered to it.
    pub received: u64,
    /// Payload bytes it emitted.
    pub bytes_sent: u64,
    /// Payload bytes delivered to it.
    pub bytes_received: u64,
    /// Calls made to its `handle_timeout`.
    pub timeouts: u64,
}

impl fmt::Display for Stats {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "sent {} delivered {} ({} bytes) dropped {} duplicated {} reordered {} corrupted {} too_big {} \
             undeliverable {} down {} timeouts {}",
            self.sent,
            self.delivered,
            self.bytes_delivered,
            self.dropped,
            self.duplicated,
            self.reordered,
            self.corrupted,
            self.too_big,
            self.undeliverable,
            self.down,
            self.timeouts
        )?;
        for (i, e) in self.per_endpoint.iter().enumerate() {
            write!(f, "\n  endpoint {i}: {e}")?;
        }
        Ok(())
    }
}

impl fmt::Display for EndpointStats {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "sent {} ({} bytes) received {} ({} bytes) timeouts {}",
            self.sent, self.bytes_sent, self.received, self.bytes_received, self.timeouts
        )
    }
}
