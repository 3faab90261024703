//! Batched send: packets queued in a reusable batch, flushed with
//! `sendmmsg`, runs of equal-size packets to one peer coalesced into UDP GSO
//! messages.

use std::io;
use std::net::SocketAddr;
use std::os::fd::AsFd;

use crate::socket::Socket;
use crate::sys::{self, OutMsg};

/// Most packets in one GSO message (the kernel's `UDP_MAX_SEGMENTS`).
pub const MAX_GSO_SEGMENTS: usize = 64;

/// Most bytes in one GSO message: the largest IPv4 UDP payload
/// (65,535 - 20 - 8), which also fits IPv6.
pub const MAX_GSO_BYTES: usize = 65_507;

/// Packets waiting to be sent, and the buffers that hold them.
///
/// Fill it with [`push`](SendBatch::push) (copies a packet),
/// [`push_parts`](SendBatch::push_parts) (copies a header, borrows the
/// payload: sent as two iovecs, no copy) or
/// [`spare`](SendBatch::spare) + [`commit`](SendBatch::commit) (the caller,
/// e.g. `Device::poll_transmit`, writes the packet in place), then
/// [`flush`](SendBatch::flush) it. All buffers are allocated when the batch
/// is made; queueing and sending allocate nothing.
///
/// **Coalescing.** While queued, consecutive packets to the same
/// destination form one GSO message when they have the run's first packet's
/// length, except that the last may be shorter (which ends the run), up to
/// [`MAX_GSO_SEGMENTS`] packets and [`MAX_GSO_BYTES`] bytes. The kernel (or
/// the NIC) cuts it back into the same datagrams, so the receiver sees
/// exactly the packets queued, in order. Empty packets are never coalesced.
///
/// **IPv4 identification.** The kernel gives packet `k` of a GSO message
/// the IPv4 identification `k` (a packet alone gets 0); [`Queued::gso_index`]
/// tells `k` when the packet is queued, so the sender can compute the ICRC
/// (which covers the identification) for the header the packet will really
/// have. Limit runs to one packet with
/// [`set_max_segments(1)`](SendBatch::set_max_segments) to have every
/// packet sent with identification 0.
///
/// **Nothing is lost silently.** After a flush every packet is either sent,
/// still queued ([`Flushed::pending`]: the kernel had no room, `EAGAIN` or
/// `ENOBUFS`; flush again later), or listed in
/// [`failures`](SendBatch::failures) with its error (e.g. `EMSGSIZE`: larger
/// than the path MTU). A GSO message the kernel refuses is split and its
/// packets sent one by one; on `EIO` (the route cannot checksum GSO, e.g.
/// IPsec) the batch also stops coalescing. Split packets go out with
/// identification 0 instead of their `gso_index` (counted in
/// [`SendStats::gso_splits`]).
///
/// `'a` is how long borrowed payloads ([`push_parts`](SendBatch::push_parts))
/// must live; a batch that only copies can be `SendBatch<'static>`, and
/// [`recycle`](SendBatch::recycle) reuses an empty batch's buffers for
/// another lifetime.
pub struct SendBatch<'a> {
    /// Everything but the borrowed pieces, boxed: a batch changes lifetime
    /// ([`SendBatch::recycle`]) every pass, and moves stay two words.
    b: Box<Buffers>,
    /// Borrowed payload pieces of all queued packets, in order.
    pieces: Vec<&'a [u8]>,
}

/// The owned part of a [`SendBatch`].
struct Buffers {
    arena: Vec<u8>,
    used: usize,
    packets: Vec<Pkt>,
    msgs: Vec<OutMsg>,
    next_msg: usize,
    max_packets: usize,
    max_segments: usize,
    gso_off: bool,
    /// The source of packets queued from now on.
    source: u16,
    failures: Vec<Failure>,
    stats: SendStats,
    scratch: sys::SendScratch,
}

/// A queued packet: `arena[off..off + head]`, then `pieces[first..first +
/// count]` (borrowed), then `arena[trail..trail + trail_len]`.
#[derive(Clone, Copy, Debug)]
struct Pkt {
    off: usize,
    head: usize,
    first: usize,
    count: usize,
    trail: usize,
    trail_len: usize,
    /// Total length.
    len: usize,
}

/// Where a queued packet went.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Queued {
    /// Its number in the batch (0, 1, 2, ... since the batch was last
    /// empty), as [`Failure::index`] names it.
    pub index: usize,
    /// Its position in its GSO message, which is also the IPv4
    /// identification the kernel will give it (0 when it is first or alone).
    pub gso_index: u16,
}

/// The batch has no room for the packet: flush it first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("send batch full: flush it before queueing more")]
pub struct BatchFull;

/// A packet the kernel refused for good.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Failure {
    /// The packet's [`Queued::index`].
    pub index: usize,
    /// Where it was going.
    pub dst: SocketAddr,
    /// The `errno`, e.g. `EMSGSIZE`, `ENETUNREACH`, `EPERM` (firewall).
    pub errno: i32,
}

impl Failure {
    /// The error as an [`io::Error`].
    pub fn error(&self) -> io::Error {
        io::Error::from_raw_os_error(self.errno)
    }
}

/// What one [`SendBatch::flush`] did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Flushed {
    /// Packets the kernel accepted.
    pub packets: usize,
    /// Messages they went in (GSO messages count once).
    pub messages: usize,
    /// Packets refused for good, listed in [`SendBatch::failures`].
    pub failed: usize,
    /// Packets still queued because the kernel had no room (`EAGAIN`,
    /// `ENOBUFS`): flush again when the socket is writable, or shortly.
    pub pending: usize,
}

/// Counters of a [`SendBatch`] since it was made.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SendStats {
    /// Packets the kernel accepted.
    pub packets: u64,
    /// Messages they went in.
    pub messages: u64,
    /// Of those, GSO messages (more than one packet).
    pub gso_messages: u64,
    /// `sendmmsg` calls.
    pub calls: u64,
    /// Flushes stopped by `EAGAIN` (socket send buffer full).
    pub would_block: u64,
    /// Flushes stopped by `ENOBUFS` / `ENOMEM` (no kernel memory or queue room).
    pub no_buffers: u64,
    /// Packets refused for good.
    pub failed: u64,
    /// GSO messages the kernel refused and that were split into single packets.
    pub gso_splits: u64,
}

impl<'a> SendBatch<'a> {
    /// A batch of up to `packets` packets, with `bytes` bytes for copied
    /// packets and headers (e.g. 64 packets x (4096 + 64) bytes).
    pub fn new(packets: usize, bytes: usize) -> SendBatch<'a> {
        let packets = packets.max(1);
        SendBatch {
            b: Box::new(Buffers {
                arena: vec![0; bytes],
                used: 0,
                packets: Vec::with_capacity(packets),
                msgs: Vec::with_capacity(packets),
                next_msg: 0,
                max_packets: packets,
                max_segments: MAX_GSO_SEGMENTS,
                gso_off: false,
                source: 0,
                failures: Vec::with_capacity(packets),
                stats: SendStats::default(),
                scratch: sys::SendScratch::new(),
            }),
            pieces: Vec::with_capacity(packets * 4),
        }
    }

    /// Limits GSO messages to `n` packets (1 to [`MAX_GSO_SEGMENTS`]; 1
    /// turns coalescing off). Applies to packets queued from now on.
    pub fn set_max_segments(&mut self, n: usize) {
        self.b.max_segments = n.clamp(1, MAX_GSO_SEGMENTS);
    }

    /// The GSO message size limit in packets.
    pub fn max_segments(&self) -> usize {
        self.b.max_segments
    }

    /// Whether coalescing stopped after the kernel refused GSO with `EIO`.
    pub fn gso_disabled(&self) -> bool {
        self.b.gso_off
    }

    /// Packets queued and not yet sent.
    pub fn len(&self) -> usize {
        self.b.msgs[self.b.next_msg..].iter().map(|m| m.count).sum()
    }

    /// Whether nothing is waiting to be sent.
    pub fn is_empty(&self) -> bool {
        self.b.next_msg == self.b.msgs.len()
    }

    /// Whether a packet of `bytes` copied bytes still fits.
    pub fn has_room(&self, bytes: usize) -> bool {
        self.b.packets.len() < self.b.max_packets && self.b.arena.len() - self.b.used >= bytes
    }

    /// Queues a copy of `packet` for `dst`.
    pub fn push(&mut self, dst: SocketAddr, packet: &[u8]) -> Result<Queued, BatchFull> {
        let off = self.copy_in(packet)?;
        Ok(self.enqueue(dst, off, packet.len(), &[], 0, 0))
    }

    /// Queues `header || payload` for `dst`: the header is copied, the
    /// payload is sent from where it is (scatter-gather), so it must live
    /// until the packet is flushed.
    pub fn push_parts(&mut self, dst: SocketAddr, header: &[u8], payload: &'a [u8]) -> Result<Queued, BatchFull> {
        let off = self.copy_in(header)?;
        Ok(self.enqueue(dst, off, header.len(), &[payload], 0, 0))
    }

    /// Queues `header || pieces... || trailer` for `dst`: header and trailer
    /// (e.g. a RoCE packet's pad and ICRC) are copied, the pieces are sent
    /// from where they are, so they must live until the packet is flushed.
    pub fn push_gather(
        &mut self,
        dst: SocketAddr,
        header: &[u8],
        pieces: &[&'a [u8]],
        trailer: &[u8],
    ) -> Result<Queued, BatchFull> {
        if !self.has_room(header.len() + trailer.len()) {
            return Err(BatchFull);
        }
        // One room check for both copies: header, then trailer.
        let (off, trail) = (self.b.used, self.b.used + header.len());
        let end = trail + trailer.len();
        self.b.arena[off..trail].copy_from_slice(header);
        self.b.arena[trail..end].copy_from_slice(trailer);
        self.b.used = end;
        Ok(self.enqueue(dst, off, header.len(), pieces, trail, trailer.len()))
    }

    /// The free buffer to write the next packet into, then
    /// [`commit`](SendBatch::commit); empty when no packet fits.
    pub fn spare(&mut self) -> &mut [u8] {
        if self.b.packets.len() < self.b.max_packets { &mut self.b.arena[self.b.used..] } else { &mut [] }
    }

    /// Queues the first `len` bytes of [`spare`](SendBatch::spare) for `dst`.
    ///
    /// # Panics
    /// If `len` exceeds what `spare` offered.
    pub fn commit(&mut self, dst: SocketAddr, len: usize) -> Result<Queued, BatchFull> {
        if self.b.packets.len() >= self.b.max_packets {
            return Err(BatchFull);
        }
        assert!(len <= self.b.arena.len() - self.b.used, "SendBatch::commit: {len} bytes exceed spare()");
        let off = self.b.used;
        self.b.used += len;
        Ok(self.enqueue(dst, off, len, &[], 0, 0))
    }

    /// The copied bytes of the packet queued last (its header, for
    /// [`push_parts`](SendBatch::push_parts)), to patch after queueing: e.g.
    /// an ICRC that depends on [`Queued::gso_index`].
    pub fn last_mut(&mut self) -> Option<&mut [u8]> {
        let p = *self.b.packets.last()?;
        Some(&mut self.b.arena[p.off..p.off + p.head])
    }

    /// The copied trailer of the packet queued last
    /// ([`push_gather`](SendBatch::push_gather)), to patch after queueing.
    pub fn last_trailer_mut(&mut self) -> Option<&mut [u8]> {
        let p = *self.b.packets.last()?;
        Some(&mut self.b.arena[p.trail..p.trail + p.trail_len])
    }

    /// Ends the open GSO run if its packets are longer than `len`: a packet
    /// of `len` bytes queued next starts a run of its own instead of
    /// joining that one as its shorter last packet. For a caller that knows
    /// more packets of this length follow.
    pub fn end_run_if_longer(&mut self, len: usize) {
        let unsent = self.b.msgs.len() > self.b.next_msg;
        if let Some(m) = self.b.msgs.last_mut().filter(|m| unsent && m.segment > len) {
            m.closed = true;
        }
    }

    /// Copies `bytes` into the arena; returns where.
    fn copy_in(&mut self, bytes: &[u8]) -> Result<usize, BatchFull> {
        if !self.has_room(bytes.len()) {
            return Err(BatchFull);
        }
        let off = self.b.used;
        self.b.arena[off..off + bytes.len()].copy_from_slice(bytes);
        self.b.used += bytes.len();
        Ok(off)
    }

    /// Records a packet and adds it to the open GSO run or starts a message.
    fn enqueue(
        &mut self,
        dst: SocketAddr,
        off: usize,
        head: usize,
        pieces: &[&'a [u8]],
        trail: usize,
        trail_len: usize,
    ) -> Queued {
        let len = head + pieces.iter().map(|p| p.len()).sum::<usize>() + trail_len;
        let index = self.b.packets.len();
        let first = self.pieces.len();
        self.pieces.extend_from_slice(pieces);
        self.b.packets.push(Pkt { off, head, first, count: pieces.len(), trail, trail_len, len });
        let unsent = self.b.msgs.len() > self.b.next_msg;
        let flow = roce_wire::bth::dest_qpn_of(&self.b.arena[off..off + head]).unwrap_or(u32::MAX);
        if let Some(m) = self.b.msgs.last_mut().filter(|_| unsent && !self.b.gso_off)
            && !m.closed
            && m.dst == dst
            && m.flow == flow
            && m.source == self.b.source
            && m.count < self.b.max_segments
            && len > 0
            && len <= m.segment
            && m.bytes + len <= MAX_GSO_BYTES
        {
            let k = m.count;
            m.count += 1;
            m.bytes += len;
            m.closed = len < m.segment;
            return Queued { index, gso_index: k as u16 };
        }
        let source = self.b.source;
        self.b.msgs.push(OutMsg {
            dst,
            flow,
            source,
            first: index,
            count: 1,
            segment: len,
            bytes: len,
            closed: len == 0,
        });
        Queued { index, gso_index: 0 }
    }

    /// Packets queued from now on leave from `source`, a number the caller
    /// gives its sockets (softroce: the UDP source port) and
    /// [`flush_from`](SendBatch::flush_from) maps back to one. Packets of
    /// different sources never share a GSO message. A new batch's source is 0.
    pub fn set_source(&mut self, source: u16) {
        self.b.source = source;
    }

    /// The source of the first packet still queued, e.g. to wait until its
    /// socket is writable.
    pub fn pending_source(&self) -> Option<u16> {
        self.b.msgs.get(self.b.next_msg).map(|m| m.source)
    }

    /// Sends what is queued, every packet from `socket` whatever its
    /// source: [`flush_from`](SendBatch::flush_from) with one socket.
    pub fn flush(&mut self, socket: &Socket) -> io::Result<Flushed> {
        self.flush_from(|_| Some(socket))
    }

    /// Sends what is queued with as few `sendmmsg` calls as the kernel
    /// allows, without blocking: one call per run of messages of one
    /// source, from the socket `socket_of` gives for it (a source it has
    /// no socket for fails its packets with `EADDRNOTAVAIL`). Returns what happened; packets refused for
    /// good are listed in [`failures`](SendBatch::failures) until the next
    /// flush, and packets the kernel had no room for stay queued
    /// ([`Flushed::pending`]). Once nothing is pending the batch is empty
    /// and its buffers are reused.
    ///
    /// Errors only when the socket itself is unusable (`EBADF`,
    /// `ENOTSOCK`, `EFAULT`); the packets then stay queued.
    pub fn flush_from<'s>(&mut self, socket_of: impl Fn(u16) -> Option<&'s Socket>) -> io::Result<Flushed> {
        self.b.failures.clear();
        let mut out = Flushed::default();
        while self.b.next_msg < self.b.msgs.len() {
            let source = self.b.msgs[self.b.next_msg].source;
            let run = self.b.msgs[self.b.next_msg..].iter().take_while(|m| m.source == source).count();
            let Some(socket) = socket_of(source) else {
                for m in &self.b.msgs[self.b.next_msg..self.b.next_msg + run] {
                    for index in m.first..m.first + m.count {
                        self.b.failures.push(Failure { index, dst: m.dst, errno: libc::EADDRNOTAVAIL });
                    }
                    out.failed += m.count;
                    self.b.stats.failed += m.count as u64;
                }
                self.b.next_msg += run;
                continue;
            };
            let end = self.b.next_msg + run;
            let (arena, packets, pieces) = (&self.b.arena, &self.b.packets, &self.pieces);
            let parts = |i: usize| {
                let p = &packets[i];
                (
                    &arena[p.off..p.off + p.head],
                    &pieces[p.first..p.first + p.count],
                    &arena[p.trail..p.trail + p.trail_len],
                )
            };
            let r = sys::send_mmsg(socket.as_fd(), &mut self.b.scratch, &self.b.msgs[self.b.next_msg..end], parts);
            self.b.stats.calls += 1;
            let e = match r {
                Ok(n) => {
                    for m in &self.b.msgs[self.b.next_msg..self.b.next_msg + n] {
                        out.packets += m.count;
                        out.messages += 1;
                        self.b.stats.packets += m.count as u64;
                        self.b.stats.messages += 1;
                        self.b.stats.gso_messages += u64::from(m.count > 1);
                    }
                    self.b.next_msg += n;
                    continue;
                }
                Err(e) => e,
            };
            let errno = e.raw_os_error().unwrap_or(libc::EIO);
            match errno {
                libc::EINTR => {}
                libc::EAGAIN => {
                    self.b.stats.would_block += 1;
                    break;
                }
                libc::ENOBUFS | libc::ENOMEM => {
                    self.b.stats.no_buffers += 1;
                    break;
                }
                libc::EBADF | libc::ENOTSOCK | libc::EFAULT => return Err(e),
                _ => {
                    let m = self.b.msgs[self.b.next_msg];
                    if m.count > 1 {
                        self.split(self.b.next_msg);
                        self.b.stats.gso_splits += 1;
                        self.b.gso_off |= errno == libc::EIO;
                    } else {
                        self.b.failures.push(Failure { index: m.first, dst: m.dst, errno });
                        out.failed += 1;
                        self.b.stats.failed += 1;
                        self.b.next_msg += 1;
                    }
                }
            }
        }
        out.pending = self.len();
        if self.is_empty() {
            self.reset();
        }
        Ok(out)
    }

    /// Replaces GSO message `at` by one message per packet.
    fn split(&mut self, at: usize) {
        let m = self.b.msgs[at];
        let packets = &self.b.packets;
        let singles = (m.first..m.first + m.count).map(|i| {
            let len = packets[i].len;
            OutMsg {
                dst: m.dst,
                flow: m.flow,
                source: m.source,
                first: i,
                count: 1,
                segment: len,
                bytes: len,
                closed: true,
            }
        });
        self.b.msgs.splice(at..=at, singles);
    }

    /// Forgets every packet and buffer use.
    fn reset(&mut self) {
        self.b.packets.clear();
        self.pieces.clear();
        self.b.msgs.clear();
        self.b.next_msg = 0;
        self.b.used = 0;
    }

    /// Packets the last [`flush`](SendBatch::flush) could not send, with why.
    pub fn failures(&self) -> &[Failure] {
        &self.b.failures
    }

    /// Drops every queued packet; returns how many were still unsent.
    pub fn clear(&mut self) -> usize {
        let n = self.len();
        self.reset();
        n
    }

    /// Counters since the batch was made.
    pub fn stats(&self) -> SendStats {
        self.b.stats
    }

    /// This batch's buffers, for payloads of another lifetime. Only an
    /// empty batch can change lifetime: a batch with packets still queued is
    /// handed back as `Err` (flush or [`clear`](SendBatch::clear) it first).
    pub fn recycle<'b>(self) -> Result<SendBatch<'b>, Box<SendBatch<'a>>> {
        if !self.is_empty() {
            return Err(Box::new(self));
        }
        let SendBatch { mut b, mut pieces } = self;
        pieces.clear();
        b.used = 0;
        b.next_msg = 0;
        // Maps an empty vector: no element is touched, the allocation is reused.
        let pieces = pieces.into_iter().map(|_| -> &'b [u8] { &[] }).collect();
        Ok(SendBatch { b, pieces })
    }
}

impl std::fmt::Debug for SendBatch<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SendBatch")
            .field("queued", &self.len())
            .field("max_packets", &self.b.max_packets)
            .field("bytes_used", &self.b.used)
            .field("bytes", &self.b.arena.len())
            .field("max_segments", &self.b.max_segments)
            .field("stats", &self.b.stats)
            .finish()
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// `len` bytes of `fill`, but for one destination QP (0) in bytes 4..8.
    pub(crate) fn pkt(fill: u8, len: usize) -> Vec<u8> {
        let mut p = vec![fill; len];
        p.iter_mut().skip(4).take(4).for_each(|b| *b = 0);
        p
    }

    fn runs(b: &SendBatch<'_>) -> Vec<(usize, usize)> {
        b.b.msgs.iter().map(|m| (m.first, m.count)).collect()
    }

    #[test]
    fn coalesces_equal_runs_per_destination() {
        let a: SocketAddr = "127.0.0.2:4791".parse().unwrap();
        let c: SocketAddr = "127.0.0.3:4791".parse().unwrap();
        let mut b = SendBatch::new(256, 1 << 20);
        let idx: Vec<u16> = [(a, 100), (a, 100), (a, 100), (a, 40), (a, 40), (c, 100), (c, 200), (c, 0), (c, 0)]
            .into_iter()
            .map(|(d, n)| b.push(d, &vec![7; n]).unwrap().gso_index)
            .collect();
        assert_eq!(idx, [0, 1, 2, 3, 0, 0, 0, 0, 0]);
        assert_eq!(runs(&b), [(0, 4), (4, 1), (5, 1), (6, 1), (7, 1), (8, 1)]);
        assert_eq!(b.len(), 9);
    }

    #[test]
    fn a_run_ended_for_shorter_packets_leaves_them_a_run_of_their_own() {
        let a: SocketAddr = "127.0.0.2:4791".parse().unwrap();
        let mut b = SendBatch::new(256, 1 << 20);
        b.push(a, &[1; 116]).unwrap();
        // Equal or longer than the run: nothing to end.
        b.end_run_if_longer(116);
        b.push(a, &[1; 116]).unwrap();
        b.end_run_if_longer(200);
        b.push(a, &[1; 116]).unwrap();
        // Shorter: the three 100-byte packets form the next run.
        b.end_run_if_longer(100);
        let idx: Vec<u16> = (0..3).map(|_| b.push(a, &[2; 100]).unwrap().gso_index).collect();
        assert_eq!(idx, [0, 1, 2]);
        assert_eq!(runs(&b), [(0, 3), (3, 3)]);
        // Without it, the first shorter packet ends the run it joins.
        let mut c = SendBatch::new(256, 1 << 20);
        for n in [116, 100, 100, 100] {
            c.push(a, &vec![1; n]).unwrap();
        }
        assert_eq!(runs(&c), [(0, 2), (2, 2)]);
        // Sent messages are not touched: the next packet starts a run anyway.
        let mut d = SendBatch::new(256, 1 << 20);
        d.end_run_if_longer(1);
        d.push(a, &[1; 50]).unwrap();
        assert_eq!(runs(&d), [(0, 1)]);
    }

    #[test]
    fn one_gso_message_carries_one_destination_qp() {
        let a: SocketAddr = "127.0.0.2:4791".parse().unwrap();
        let mut b = SendBatch::new(256, 1 << 20);
        let packet = |qpn: u32| {
            let mut p = vec![0u8; 100];
            p[4..8].copy_from_slice(&qpn.to_be_bytes());
            p
        };
        // BTH byte 4 is not part of the QPN: 0x0100_0011 is QP 0x11 too.
        for q in [0x11, 0x11, 0x12, 0x12, 0x0100_0011, 0x11] {
            b.push(a, &packet(q)).unwrap();
        }
        assert_eq!(runs(&b), [(0, 2), (2, 2), (4, 2)]);
    }

    #[test]
    fn runs_respect_segment_and_byte_limits() {
        let a: SocketAddr = "127.0.0.2:4791".parse().unwrap();
        let mut b = SendBatch::new(256, 1 << 20);
        for _ in 0..130 {
            b.push(a, &[1; 100]).unwrap();
        }
        assert_eq!(runs(&b), [(0, 64), (64, 64), (128, 2)]);
        let mut b = SendBatch::new(256, 1 << 20);
        for _ in 0..70 {
            b.push(a, &[1; 1100]).unwrap();
        }
        // 59 x 1100 = 64,900 <= 65,507 < 60 x 1100.
        assert_eq!(runs(&b), [(0, 59), (59, 11)]);
        let mut b = SendBatch::new(256, 1 << 20);
        b.set_max_segments(1);
        for _ in 0..3 {
            assert_eq!(b.push(a, &[1; 10]).unwrap().gso_index, 0);
        }
        assert_eq!(runs(&b), [(0, 1), (1, 1), (2, 1)]);
    }

    #[test]
    fn full_batches_refuse_and_recycle_keeps_buffers() {
        let a: SocketAddr = "127.0.0.2:4791".parse().unwrap();
        let mut b = SendBatch::new(2, 100);
        assert_eq!(b.push(a, &[0; 101]), Err(BatchFull));
        b.push(a, &[0; 60]).unwrap();
        assert_eq!(b.push(a, &[0; 60]), Err(BatchFull));
        assert_eq!(b.spare().len(), 40);
        b.commit(a, 40).unwrap();
        assert!(b.spare().is_empty());
        assert_eq!(b.commit(a, 0), Err(BatchFull));
        let mut b = *b.recycle::<'_>().unwrap_err();
        assert_eq!(b.clear(), 2);
        let payload = vec![5u8; 10];
        let mut b2: SendBatch<'_> = b.recycle().unwrap();
        b2.push_parts(a, &[1, 2], &payload).unwrap();
        assert_eq!(b2.len(), 1);
        assert!(b2.b.packets.capacity() >= 2);
    }

    /// Receives `want` packets on `sock` (5 s at most) and returns them.
    fn receive(sock: &Socket, want: usize) -> Vec<Vec<u8>> {
        let mut rx = crate::RecvBatch::new(64);
        let mut got = Vec::new();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        while got.len() < want && std::time::Instant::now() < deadline {
            if sock.recv(&mut rx).unwrap() == 0 {
                let left = deadline.saturating_duration_since(std::time::Instant::now());
                crate::wait(&[(sock.as_fd(), crate::Interest::READABLE)], None, Some(left)).unwrap();
            }
            got.extend(rx.segments().map(|s| s.data.to_vec()));
        }
        got
    }

    #[test]
    fn no_room_and_partial_sends_lose_nothing() {
        use crate::sys::faults::{self, Fault};
        let bind = |ip: &str| Socket::bind_addr(SocketAddr::new(ip.parse().unwrap(), 0)).unwrap();
        let (a, b) = (bind("127.0.0.40"), bind("127.0.0.41"));
        let mut tx = SendBatch::new(64, 64 * 1000);
        // Eight messages: runs of 3 equal packets, the third shorter.
        let packets: Vec<Vec<u8>> =
            (0..24u8).map(|i| pkt(i, if i % 3 == 2 { 100 } else { 900 } + usize::from(i / 3))).collect();
        for p in &packets {
            tx.push(b.local_addr(), p).unwrap();
        }
        assert_eq!(tx.b.msgs.len(), 8);
        // The kernel takes two messages, then has no room; then takes three,
        // is out of buffers; is interrupted; then takes the rest.
        faults::script(&[Fault::Accept(2), Fault::Errno(libc::EAGAIN)]);
        let f = tx.flush(&a).unwrap();
        assert_eq!((f.packets, f.messages, f.failed, f.pending), (6, 2, 0, 18), "{f:?}");
        assert_eq!(tx.len(), 18);
        faults::script(&[Fault::Accept(3), Fault::Errno(libc::ENOBUFS)]);
        let f = tx.flush(&a).unwrap();
        assert_eq!((f.packets, f.pending), (9, 9), "{f:?}");
        // More packets may be queued while some are pending.
        let extra = vec![99u8; 900];
        let q = tx.push(b.local_addr(), &extra).unwrap();
        assert_eq!(q.index, 24);
        faults::script(&[Fault::Errno(libc::EINTR)]);
        let f = tx.flush(&a).unwrap();
        assert_eq!((f.packets, f.failed, f.pending), (10, 0, 0), "{f:?}");
        assert_eq!(faults::left(), 0);
        assert!(tx.is_empty() && tx.failures().is_empty());
        let s = tx.stats();
        assert_eq!((s.would_block, s.no_buffers, s.packets, s.failed), (1, 1, 25, 0), "{s:?}");
        let mut want = packets.clone();
        want.push(extra);
        assert_eq!(receive(&b, want.len()), want);
        // A socket-level error keeps everything queued.
        tx.push(b.local_addr(), &[1; 10]).unwrap();
        faults::script(&[Fault::Errno(libc::EBADF)]);
        assert!(tx.flush(&a).is_err());
        assert_eq!(tx.len(), 1);
        assert_eq!(tx.flush(&a).unwrap().packets, 1);
    }

    #[test]
    fn eio_on_gso_splits_and_stops_coalescing() {
        use crate::sys::faults::{self, Fault};
        let bind = |ip: &str| Socket::bind_addr(SocketAddr::new(ip.parse().unwrap(), 0)).unwrap();
        let (a, b) = (bind("127.0.0.42"), bind("127.0.0.43"));
        let mut tx = SendBatch::new(64, 64 * 1000);
        let packets: Vec<Vec<u8>> = (0..4u8).map(|i| pkt(i, 500)).collect();
        for p in &packets {
            tx.push(b.local_addr(), p).unwrap();
        }
        faults::script(&[Fault::Errno(libc::EIO)]);
        let f = tx.flush(&a).unwrap();
        assert_eq!((f.packets, f.messages, f.failed, f.pending), (4, 4, 0, 0), "{f:?}");
        assert!(tx.gso_disabled());
        assert_eq!(tx.stats().gso_splits, 1);
        assert_eq!(receive(&b, 4), packets);
        tx.push(b.local_addr(), &packets[0]).unwrap();
        assert_eq!(tx.push(b.local_addr(), &packets[1]).unwrap().gso_index, 0);
        assert_eq!(tx.flush(&a).unwrap().messages, 2);
    }
}
