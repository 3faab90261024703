//! The socket link's sending side: what a pass sends to other hosts (and
//! to local devices the local link does not reach) goes into one batch of
//! `sendmmsg` calls, from the device's UDP socket or its QPs' source-port
//! sockets (`sources.rs`). The rules only the kernel's UDP path needs live
//! here, beside [`LocalLink`](crate::local_link::LocalLink), the other link:
//!
//! | rule | why |
//! |---|---|
//! | equal-length packets to one peer leave as one GSO send | one `sendmmsg` entry per run, not per packet |
//! | a MIDDLE never joins its FIRST's run | a FIRST is longer (RETH, AETH): joined, a 64 KiB WRITE leaves as [FIRST, MIDDLE] and [13 MIDDLEs, LAST] |
//! | the k-th segment of an IPv4 GSO send has its ICRC fixed for IP ID k | the kernel numbers the segments; peers that check the ID need it covered |
//! | a whole request after deferred packets leaves alone, first | a ping-pong's turn reaches the peer before the ACK behind it (`Shared::transmit`) |
//! | a full socket is waited for up to 100 ms, then its packets are dropped and counted | the transport retransmits, as after a loss on the wire |
//!
//! Splitting a 64 KiB WRITE's MIDDLEs from its FIRST was measured faster
//! (`docs/data-path.md`, step 5): as many sends, and the kernel's
//! `__ip_append_data` took half the samples per WRITE.

use std::io;
use std::os::fd::AsFd;
use std::time::{Duration, Instant};

use roce_proto::TransmitGather;
use roce_udp::{Interest, SendBatch, wait};
use roce_wire::{Ipv4IdFixups, OpcodeInfo, Position};

use crate::driver_stats::DriverStats;
use crate::local_link::Packet;
use crate::port::Port;
use crate::sources::Sources;

/// Packets per `sendmmsg` batch.
pub(crate) const BATCH: usize = 64;
/// Room for one packet: the largest payload (a wide MTU's) plus headers and ICRC.
pub(crate) const MAX_PACKET: usize = roce_proto::WideMtu::MAX + 128;
/// How long a full socket is waited for before its packets are dropped.
const FULL_PATIENCE: Duration = Duration::from_millis(100);

/// The socket link's state between passes.
pub(crate) struct SocketLink {
    /// Kept empty between passes: a pass lends it registered memory.
    batch: Option<SendBatch<'static>>,
    /// The IPv4 ID fix-ups of the last few packet lengths.
    fixups: Ipv4IdFixups,
}

/// A new, empty batch: room for headers and trailers only, as payloads
/// are sent from where they are.
fn new_batch<'m>() -> SendBatch<'m> {
    SendBatch::new(BATCH, BATCH * 512)
}

impl Default for SocketLink {
    fn default() -> Self {
        SocketLink { batch: Some(new_batch()), fixups: Ipv4IdFixups::new() }
    }
}

/// What became of a packet given to [`SocketPass::send`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Queued {
    /// Queued, ending in `trailer` (its ICRC fixed for the IPv4 ID the
    /// kernel gives it, `ipv4_id`).
    Socket { trailer: [u8; 8], ipv4_id: Option<u16> },
    /// Lost as on a wire, and counted: no socket can send it, or no room.
    Lost,
}

/// One pass's batch: payloads borrowed from registered memory (`'m`)
/// until it is flushed.
pub(crate) struct SocketPass<'l, 'm> {
    link: &'l mut SocketLink,
    tx: SendBatch<'m>,
    port: &'l Port,
    /// The next whole request leaves alone (see [`SocketLink::begin`]).
    alone: bool,
    /// A QP's source port had no socket: the device sends from its own.
    unbound: bool,
}

impl SocketLink {
    /// A pass's batch on `port`. `first_alone`: a whole request (a
    /// one-packet message) queued first is flushed by itself, ahead of
    /// what follows.
    pub(crate) fn begin<'l, 'm>(&'l mut self, port: &'l Port, first_alone: bool) -> SocketPass<'l, 'm> {
        let empty = self.batch.take().unwrap_or_else(new_batch);
        let tx = match empty.recycle() {
            Ok(b) => b,
            Err(b) => {
                let mut b = *b;
                b.clear();
                b.recycle().unwrap_or_else(|_| new_batch())
            }
        };
        SocketPass { link: self, tx, port, alone: first_alone, unbound: false }
    }
}

/// Whether a packet of `info` is a MIDDLE (SEND, RDMA WRITE or READ
/// response): a message's full-MTU packets between its FIRST and LAST.
pub(crate) fn is_middle(info: &OpcodeInfo) -> bool {
    info.position == Position::Middle
}

/// Whether a packet of `info` is a request that is a whole message: a
/// ping-pong's turn.
pub(crate) fn is_whole_request(info: &OpcodeInfo) -> bool {
    info.direction() == roce_wire::Direction::Request && info.starts_message() && info.ends_message()
}

impl<'m> SocketPass<'_, 'm> {
    /// Queues `p` (the engine's `t`, ending in `trailer`), flushing the
    /// batch when the packet should leave at once or the next may not fit.
    pub(crate) fn send(
        &mut self,
        p: &Packet<'_, 'm>,
        t: &TransmitGather,
        trailer: [u8; 8],
        sources: &mut Sources,
        stats: &mut DriverStats,
    ) -> io::Result<Queued> {
        let Some(tag) = sources.tag(p.src, p.src_port) else {
            // A QP the verbs did not prepare (see `Sources::prepare`) and a
            // port that cannot be bound: lost as on a wire, and the device
            // sends from its own port from now on. From another address
            // than the device's: that address cannot be sent from at all.
            if p.src == self.port.local_addr().ip() {
                self.unbound = true;
                stats.tx_dropped += 1;
            } else {
                stats.tx_no_source += 1;
            }
            return Ok(Queued::Lost);
        };
        self.tx.set_source(tag);
        if is_middle(t.info) {
            // Let the MIDDLEs run together rather than end the FIRST's run.
            self.tx.end_run_if_longer(t.len);
        }
        let queued = match self.tx.push_gather(p.to, p.head, p.payload, &trailer[..p.trailer_len]) {
            Ok(q) => {
                let ipv4_id = p.dst.is_ipv4().then_some(q.gso_index);
                let mut out = trailer;
                if let Some(tr) = self.tx.last_trailer_mut() {
                    if q.gso_index != 0 && p.dst.is_ipv4() {
                        // The kernel gives the k-th GSO segment IPv4 ID k:
                        // fix the ICRC computed for ID 0.
                        let _ = self.link.fixups.get(t.len).apply(tr, q.gso_index);
                    }
                    out[..tr.len()].copy_from_slice(tr);
                }
                Queued::Socket { trailer: out, ipv4_id }
            }
            Err(_) => {
                // Room is made after each packet; one that still does not
                // fit is lost like one on the wire, and retransmitted.
                stats.tx_dropped += 1;
                Queued::Lost
            }
        };
        if (std::mem::take(&mut self.alone) && is_whole_request(t.info)) || !self.tx.has_room(MAX_PACKET) {
            self.flush(sources, stats)?;
        }
        Ok(queued)
    }

    /// Sends everything queued; waits (up to [`FULL_PATIENCE`] in all)
    /// while a socket has no room, then drops what is left (counted).
    fn flush(&mut self, sources: &Sources, stats: &mut DriverStats) -> io::Result<()> {
        // Read the clock only once the socket is full.
        let mut deadline = None;
        loop {
            let f = self.tx.flush_from(|port| sources.socket(self.port, port))?;
            stats.tx_packets += f.packets as u64;
            stats.tx_messages += f.messages as u64;
            stats.tx_failed += f.failed as u64;
            if f.pending == 0 {
                return Ok(());
            }
            stats.tx_would_block += 1;
            let now = Instant::now();
            let left = deadline.get_or_insert(now + FULL_PATIENCE).saturating_duration_since(now);
            if left.is_zero() {
                stats.tx_dropped += self.tx.clear() as u64;
                return Ok(());
            }
            let full = self.tx.pending_source().and_then(|p| sources.socket(self.port, p)).unwrap_or(self.port);
            wait(&[(full.as_fd(), Interest::WRITABLE)], None, Some(left))?;
        }
    }

    /// Ends the pass: sends what is queued unless `send` is false (a
    /// capture failed), drops (and counts) what could not be sent, and
    /// gives the batch back. Whether a QP's port had no socket, so the
    /// device should send from its own from now on, comes with the result.
    pub(crate) fn finish(mut self, send: bool, sources: &Sources, stats: &mut DriverStats) -> (io::Result<()>, bool) {
        let r = if send { self.flush(sources, stats) } else { Ok(()) };
        if !self.tx.is_empty() {
            stats.tx_dropped += self.tx.clear() as u64;
        }
        self.link.batch = Some(self.tx.recycle().unwrap_or_else(|_| new_batch()));
        (r, self.unbound)
    }
}

#[cfg(test)]
mod tests {
    use super::{is_middle, is_whole_request};
    use roce_wire::Opcode;

    fn info(op: Opcode) -> &'static roce_wire::OpcodeInfo {
        op.info().unwrap()
    }

    #[test]
    fn middles_are_told_from_the_packets_that_start_or_end_a_message() {
        for op in [Opcode::RC_SEND_MIDDLE, Opcode::RC_RDMA_WRITE_MIDDLE, Opcode::RC_RDMA_READ_RESPONSE_MIDDLE] {
            assert!(is_middle(info(op)), "{op:?}");
        }
        for op in [
            Opcode::RC_RDMA_WRITE_FIRST,
            Opcode::RC_RDMA_WRITE_LAST,
            Opcode::RC_RDMA_READ_RESPONSE_FIRST,
            Opcode::RC_SEND_ONLY,
            Opcode::RC_ACKNOWLEDGE,
        ] {
            assert!(!is_middle(info(op)), "{op:?}");
        }
    }

    #[test]
    fn only_a_one_packet_request_is_a_whole_request() {
        for op in [
            Opcode::RC_SEND_ONLY,
            Opcode::RC_RDMA_WRITE_ONLY_WITH_IMMEDIATE,
            Opcode::RC_RDMA_READ_REQUEST,
            Opcode::RC_FETCH_ADD,
            Opcode::UD_SEND_ONLY,
        ] {
            assert!(is_whole_request(info(op)), "{op:?}");
        }
        for op in [
            Opcode::RC_SEND_FIRST,
            Opcode::RC_RDMA_WRITE_LAST,
            Opcode::RC_ACKNOWLEDGE,
            Opcode::RC_RDMA_READ_RESPONSE_ONLY,
        ] {
            assert!(!is_whole_request(info(op)), "{op:?}");
        }
    }
}
