//! Batched receive: `recvmmsg` into preallocated buffers, GRO super-datagrams
//! split back into the datagrams that were sent.

use std::io;
use std::net::{IpAddr, SocketAddr};
use std::os::fd::BorrowedFd;

use roce_wire::Ecn;

use crate::sys;

/// Bytes per receive buffer: a whole GRO super-datagram (at most 64 KiB of
/// UDP payload) fits in one.
pub const RECV_SLOT: usize = 64 << 10;

/// Preallocated buffers for [`crate::Socket::recv`]: one buffer of
/// [`RECV_SLOT`] bytes per datagram of a `recvmmsg` call, reused by every
/// call, so receiving allocates nothing.
///
/// After a receive, [`RecvBatch::segments`] (or iterating `&batch`) yields
/// each RoCEv2 packet with its addresses, GRO super-datagrams already split.
pub struct RecvBatch {
    buf: Vec<u8>,
    slot: usize,
    meta: Vec<sys::RecvMeta>,
    scratch: sys::RecvScratch,
    local: Option<IpAddr>,
    stats: RecvStats,
}

/// Counters of a [`RecvBatch`] since it was made.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RecvStats {
    /// `recvmmsg` calls that returned datagrams.
    pub calls: u64,
    /// Datagrams received (a GRO super-datagram counts once).
    pub datagrams: u64,
    /// Packets (GRO segments) yielded.
    pub segments: u64,
    /// Payload bytes received.
    pub bytes: u64,
    /// Datagrams dropped because they did not fit a buffer (`MSG_TRUNC`).
    pub truncated: u64,
    /// Datagrams dropped because their control messages did not fit
    /// (`MSG_CTRUNC`), so their GRO segment size was unknown.
    pub ctrl_truncated: u64,
}

impl RecvBatch {
    /// Buffers for `datagrams` datagrams per call (1 to 1024), of
    /// [`RECV_SLOT`] bytes each.
    pub fn new(datagrams: usize) -> RecvBatch {
        RecvBatch::with_slot_size(datagrams, RECV_SLOT)
    }

    /// Buffers of `slot` bytes each. Smaller than [`RECV_SLOT`] only when
    /// GRO is off and datagrams are known to be short: a datagram longer
    /// than `slot` is dropped and counted in [`RecvStats::truncated`].
    pub fn with_slot_size(datagrams: usize, slot: usize) -> RecvBatch {
        let datagrams = datagrams.clamp(1, 1024);
        let slot = slot.max(1);
        RecvBatch {
            buf: vec![0; datagrams * slot],
            slot,
            meta: Vec::with_capacity(datagrams),
            scratch: sys::RecvScratch::new(datagrams),
            local: None,
            stats: RecvStats::default(),
        }
    }

    /// Receives into the batch, replacing what it held.
    pub(crate) fn receive(&mut self, fd: BorrowedFd<'_>, local: IpAddr, mode: sys::RecvMode) -> io::Result<usize> {
        self.local = Some(local);
        let n = sys::recv_mmsg(fd, &mut self.scratch, &mut self.buf, self.slot, &mut self.meta, mode)?;
        if n > 0 {
            self.stats.calls += 1;
        }
        for m in &self.meta {
            self.stats.datagrams += 1;
            if m.truncated {
                self.stats.truncated += 1;
            } else if m.ctrl_truncated {
                self.stats.ctrl_truncated += 1;
            } else {
                self.stats.bytes += m.len as u64;
                self.stats.segments += match m.segment {
                    Some(s) if m.len > 0 => m.len.div_ceil(s) as u64,
                    _ => 1,
                };
            }
        }
        Ok(n)
    }

    /// Datagrams of the last receive (GRO super-datagrams count once).
    pub fn len(&self) -> usize {
        self.meta.len()
    }

    /// Whether the last receive got nothing.
    pub fn is_empty(&self) -> bool {
        self.meta.is_empty()
    }

    /// Counters since the batch was made.
    pub fn stats(&self) -> RecvStats {
        self.stats
    }

    /// The datagrams of the last receive, as the kernel delivered them
    /// (truncated ones left out).
    pub fn datagrams(&self) -> Datagrams<'_> {
        Datagrams { batch: self, next: 0 }
    }

    /// Every packet of the last receive, in arrival order, GRO
    /// super-datagrams split at their segment size.
    pub fn segments(&self) -> Segments<'_> {
        Segments { datagrams: self.datagrams(), current: None }
    }
}

impl<'a> IntoIterator for &'a RecvBatch {
    type Item = Segment<'a>;
    type IntoIter = Segments<'a>;

    fn into_iter(self) -> Segments<'a> {
        self.segments()
    }
}

impl std::fmt::Debug for RecvBatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RecvBatch")
            .field("capacity", &(self.buf.len() / self.slot))
            .field("slot", &self.slot)
            .field("len", &self.meta.len())
            .field("stats", &self.stats)
            .finish()
    }
}

/// One received datagram: possibly a GRO run of packets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Datagram<'a> {
    /// Sender address.
    pub src: IpAddr,
    /// Sender UDP port.
    pub src_port: u16,
    /// The address it was sent to: the socket's own, or for a socket on
    /// the wildcard address, from `IP_PKTINFO` / `IPV6_PKTINFO`.
    pub dst: IpAddr,
    /// The UDP payload: one packet, or a run of `segment_size`-byte packets
    /// of which the last may be shorter.
    pub data: &'a [u8],
    /// The GRO segment size when the kernel coalesced packets.
    pub segment_size: Option<usize>,
    /// The ECN field of its IP header (GRO coalesces only packets with
    /// equal TOS bytes, so it holds for every packet of a run).
    pub ecn: Ecn,
}

impl<'a> Datagram<'a> {
    /// The packets in this datagram (one, or the GRO run split at
    /// `segment_size`; an empty datagram is one empty packet).
    pub fn segments(&self) -> Packets<'a> {
        let size = self.segment_size.unwrap_or(self.data.len()).max(1);
        Packets { rest: self.data, size, done: false }
    }
}

/// Iterator over the packets of one [`Datagram`].
#[derive(Debug, Clone)]
pub struct Packets<'a> {
    rest: &'a [u8],
    size: usize,
    done: bool,
}

impl<'a> Iterator for Packets<'a> {
    type Item = &'a [u8];

    fn next(&mut self) -> Option<&'a [u8]> {
        if self.done {
            return None;
        }
        let (head, rest) = self.rest.split_at(self.size.min(self.rest.len()));
        self.rest = rest;
        self.done = rest.is_empty();
        Some(head)
    }
}

/// One received RoCEv2 packet (a UDP datagram as it was sent), with what
/// `Device::handle_datagram` needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Segment<'a> {
    /// Sender address.
    pub src: IpAddr,
    /// Sender UDP port.
    pub src_port: u16,
    /// The address it was sent to.
    pub dst: IpAddr,
    /// The UDP payload.
    pub data: &'a [u8],
    /// The ECN field of its IP header.
    pub ecn: Ecn,
}

impl Segment<'_> {
    /// Sender address and port together.
    pub fn src_addr(&self) -> SocketAddr {
        SocketAddr::new(self.src, self.src_port)
    }
}

/// Iterator over the datagrams of a [`RecvBatch`].
#[derive(Debug, Clone)]
pub struct Datagrams<'a> {
    batch: &'a RecvBatch,
    next: usize,
}

impl<'a> Iterator for Datagrams<'a> {
    type Item = Datagram<'a>;

    fn next(&mut self) -> Option<Datagram<'a>> {
        let b = self.batch;
        while let Some(m) = b.meta.get(self.next) {
            let i = self.next;
            self.next += 1;
            // Unusable: cut short, or its segment size may be missing.
            let Some(src) = m.src.filter(|_| !m.truncated && !m.ctrl_truncated) else { continue };
            let data = &b.buf[i * b.slot..][..m.len];
            let dst = m.dst.or(b.local).unwrap_or(src.ip());
            let ecn = Ecn::from_tos(m.tos);
            return Some(Datagram { src: src.ip(), src_port: src.port(), dst, data, segment_size: m.segment, ecn });
        }
        None
    }
}

/// Iterator over the packets of a [`RecvBatch`].
#[derive(Debug, Clone)]
pub struct Segments<'a> {
    datagrams: Datagrams<'a>,
    current: Option<(Datagram<'a>, Packets<'a>)>,
}

impl<'a> Iterator for Segments<'a> {
    type Item = Segment<'a>;

    fn next(&mut self) -> Option<Segment<'a>> {
        loop {
            if let Some((d, chunks)) = &mut self.current
                && let Some(data) = chunks.next()
            {
                return Some(Segment { src: d.src, src_port: d.src_port, dst: d.dst, data, ecn: d.ecn });
            }
            let d = self.datagrams.next()?;
            self.current = Some((d, d.segments()));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn split(data: &[u8], segment_size: Option<usize>) -> Vec<usize> {
        let ip = IpAddr::from([127, 0, 0, 1]);
        let d = Datagram { src: ip, src_port: 1, dst: ip, data, segment_size, ecn: Ecn::NotEct };
        d.segments().map(<[u8]>::len).collect()
    }

    #[test]
    fn datagrams_split_at_the_segment_size() {
        let b = [7u8; 2300];
        assert_eq!(split(&b, Some(1100)), [1100, 1100, 100]);
        assert_eq!(split(&b[..2200], Some(1100)), [1100, 1100]);
        assert_eq!(split(&b[..500], Some(1100)), [500]);
        assert_eq!(split(&b[..500], None), [500]);
        assert_eq!(split(&[], None), [0]);
        assert_eq!(split(&[], Some(1100)), [0]);
    }
}
