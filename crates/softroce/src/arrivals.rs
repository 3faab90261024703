//! What a thread receiving on another socket than the device's own hands
//! its datagrams to: a multicast group's socket (`mcast.rs`) or one of the
//! device's other addresses (`gids.rs`). The driver implements it
//! (`driver/receive.rs`); the relays know only this trait, so no file of
//! theirs reaches into the driver.

use std::net::IpAddr;

use roce_udp::RecvBatch;

/// Where a relay thread's datagrams go.
pub(crate) trait Arrivals: Send + Sync {
    /// A datagram from `src:src_port` to the multicast group `group`: to
    /// the engine, its completions to their waiters, as a pass of the
    /// driver would.
    fn arrived_multicast(&self, src: IpAddr, src_port: u16, group: IpAddr, data: &[u8]);

    /// Every datagram of `rx`, received on one of the device's other
    /// addresses: on a shared device, those for another member's QP to that
    /// member, and the rest to the engine in one pass (one lock, one
    /// transmit of what they call for).
    fn arrived_batch(&self, rx: &RecvBatch);

    /// A receive error on such a socket: counted (what was lost is
    /// retransmitted, or lost as on a wire for UD).
    fn receive_failed(&self, multicast: bool);
}
