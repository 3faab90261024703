//! The local link: packets between two devices of this process, or to
//! another process's member of a shared device, go through memory instead
//! of the kernel's UDP stack, as kernel rxe hands a packet for a local
//! destination straight to its own receive path (`rxe_loopback`) instead
//! of through IP. [`LocalLink`] is the sending side a transmit asks first;
//! between processes the packets go through the member's inbox
//! (`roce_host::inbox`), within this process as below.
//!
//! A sender copies each packet the engine built (headers, payload from
//! registered memory, pad and ICRC) into a chunk of its own, without a
//! lock, and hands the chunk to the destination device's [`LocalEnd`] at
//! the end of its transmit (or every [`CHUNK_BYTES`]); the destination's
//! next progress pass takes every chunk waiting at once and hands the
//! packets to its engine. PSNs, ACKs, retries, captures, counters and
//! fault injection are those of the socket path; only the ICRC is left out
//! unless a capture or a fault injector at either end needs it (nothing
//! between two engines in one address space can alter a packet). What a
//! device holds is bounded ([`INBOX_BYTES`]): past it the packet goes by
//! the socket, and the receiver's engine sees a reordering, never a loss.
//!
//! The sender wakes the receiver only when one of its threads sleeps
//! where a datagram would have woken it (see `Shared::wake_for_local`).
//!
//! ```text
//!  sender's transmit ─copy─▶ [chunk] ─hand_over─▶ LocalEnd.queue ─take─▶ receiver's pass
//!                              ▲                  (≤ INBOX_BYTES)             │
//!                              └──── LocalEnd.spare ◀── recycle ──────────────┘
//! ```

use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::Instant;

use roce_host::Member;
use roce_host::inbox::{Addressing, Outboxes};
use roce_udp::Socket;

use crate::driver_stats::DriverStats;

/// Bytes a device holds before senders fall back to the socket: far above
/// what the QPs of a device keep in flight (a 512-packet window of 4 KiB
/// packets is 2 MiB), so only a receiver that stopped taking fills it.
pub(crate) const INBOX_BYTES: usize = 16 << 20;

/// Which link carries packets between devices of this process.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Link {
    /// Memory, when the destination is a device of this process (default).
    #[default]
    Local,
    /// The UDP socket for every packet (`SOFTROCE_LINK=udp`): for captures
    /// with tcpdump and conformance tests.
    Udp,
}

/// Packets one sender wrote for one device, in the order it sent them:
/// filled without any lock, then handed over whole. The packets lie end to
/// end in `bytes`; each costs 4 bytes beside them (where it ends), and
/// their addressing is kept once per run of packets that share it (a
/// stream's packets all do). A chunk's memory goes back and forth between
/// the sender's CPU and the receiver's, so each byte it holds per packet is
/// moved twice (a packet's record of 56 bytes was longer than an 8-byte
/// WRITE's headers and payload).
#[derive(Debug, Default)]
pub(crate) struct Chunk {
    bytes: Vec<u8>,
    /// Where each packet ends in `bytes` (a chunk holds at most
    /// [`INBOX_BYTES`], far below 4 GiB).
    ends: Vec<u32>,
    /// (first packet, its addressing) of each run of packets that share it.
    runs: Vec<(u32, Addressing)>,
}

impl Chunk {
    /// The packets, oldest first.
    pub(crate) fn packets(&self) -> impl Iterator<Item = (Addressing, &[u8])> {
        let (mut run, mut start) = (0, 0);
        self.ends.iter().enumerate().map(move |(i, &end)| {
            while self.runs.get(run + 1).is_some_and(|r| r.0 as usize <= i) {
                run += 1;
            }
            let p = &self.bytes[start..end as usize];
            start = end as usize;
            (self.runs[run].1, p)
        })
    }

    /// Bytes it holds.
    pub(crate) fn len(&self) -> usize {
        self.bytes.len()
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.ends.is_empty()
    }

    /// Packets it holds.
    fn packets_held(&self) -> usize {
        self.ends.len()
    }

    /// Appends a packet (`parts` one after the other).
    pub(crate) fn append<'p>(&mut self, at: Addressing, parts: impl IntoIterator<Item = &'p [u8]>) {
        if self.runs.last().is_none_or(|r| r.1 != at) {
            self.runs.push((self.ends.len() as u32, at));
        }
        parts.into_iter().for_each(|s| self.bytes.extend_from_slice(s));
        self.ends.push(self.bytes.len() as u32);
    }

    fn clear(&mut self) {
        self.bytes.clear();
        self.ends.clear();
        self.runs.clear();
    }
}

/// A chunk is handed over once it holds this much (a 64 KiB WRITE), so
/// the receiver works on a long message while the sender writes the rest.
pub(crate) const CHUNK_BYTES: usize = 64 << 10;
/// ... or this many packets (the engine's burst, `TX_BURST` in roce-proto),
/// so the receiver works on a stream of small messages while the sender
/// builds the rest: a batch of 100 8-byte WRITEs (`perf write-bw -s 8`,
/// about 10 KiB) was handed over whole at the end of its transmit, and the
/// receiver idled while the sender built it, then the sender while the
/// receiver placed it (10 alternating runs, medians: 2.02 Mpps handed over
/// whole; 2.64, 2.79 and 2.38 after 16, 32 and 64 packets).
pub(crate) const CHUNK_PACKETS: usize = 16;
/// Emptied chunks a device keeps for its senders to fill again.
const SPARE_CHUNKS: usize = 64;

/// A device's end of the local link: the chunks handed to it, and the
/// emptied ones its senders reuse.
#[derive(Debug)]
pub(crate) struct LocalEnd {
    queue: Mutex<Vec<Chunk>>,
    spare: Mutex<Vec<Chunk>>,
    /// Bytes handed over and not yet taken (at most about [`INBOX_BYTES`]).
    queued: AtomicUsize,
    /// Chunks wait (set by senders after they queue one, cleared by the taker).
    pending: AtomicBool,
    /// The receiver records or impairs packets: senders compute the ICRC.
    wants_icrc: bool,
}

impl LocalEnd {
    pub(crate) fn new(wants_icrc: bool) -> LocalEnd {
        LocalEnd {
            queue: Mutex::new(Vec::new()),
            spare: Mutex::new(Vec::new()),
            queued: AtomicUsize::new(0),
            pending: AtomicBool::new(false),
            wants_icrc,
        }
    }

    /// Whether senders must compute the ICRC of what they hand over.
    pub(crate) fn wants_icrc(&self) -> bool {
        self.wants_icrc
    }

    /// An empty chunk to fill (an emptied one when there is one).
    pub(crate) fn chunk(&self) -> Chunk {
        self.spare.lock().unwrap_or_else(|e| e.into_inner()).pop().unwrap_or_default()
    }

    /// Bytes it has room for now.
    pub(crate) fn room(&self) -> usize {
        INBOX_BYTES.saturating_sub(self.queued.load(Ordering::Acquire))
    }

    /// Whether `len` more bytes fit beside the `staged` ones a sender holds
    /// for this device; if not, the sender uses the socket.
    #[cfg(test)]
    fn has_room(&self, staged: usize, len: usize) -> bool {
        staged + len <= self.room()
    }

    /// Hands `chunk` over.
    pub(crate) fn hand_over(&self, chunk: Chunk) {
        if chunk.is_empty() {
            self.recycle(std::iter::once(chunk));
            return;
        }
        self.queued.fetch_add(chunk.len(), Ordering::AcqRel);
        self.queue.lock().unwrap_or_else(|e| e.into_inner()).push(chunk);
        // SeqCst, paired with the sleepers' flags (`Shared::wake_for_local`):
        // a thread that set its flag then looks here sees the chunk, or the
        // sender sees the flag.
        self.pending.store(true, Ordering::SeqCst);
    }

    /// Whether chunks wait (a thread about to sleep looks).
    pub(crate) fn pending(&self) -> bool {
        self.pending.load(Ordering::SeqCst)
    }

    /// Moves the chunks waiting into `into` (which must be empty), oldest
    /// first; false if none did.
    pub(crate) fn take(&self, into: &mut Vec<Chunk>) -> bool {
        debug_assert!(into.is_empty());
        if !self.pending.swap(false, Ordering::SeqCst) {
            return false;
        }
        std::mem::swap(&mut *self.queue.lock().unwrap_or_else(|e| e.into_inner()), into);
        let n: usize = into.iter().map(Chunk::len).sum();
        self.queued.fetch_sub(n, Ordering::AcqRel);
        !into.is_empty()
    }

    /// Chunks whose packets were handled: emptied, kept for the senders
    /// (up to [`SPARE_CHUNKS`]).
    pub(crate) fn recycle(&self, chunks: impl IntoIterator<Item = Chunk>) {
        let mut spare = self.spare.lock().unwrap_or_else(|e| e.into_inner());
        for mut c in chunks {
            if spare.len() < SPARE_CHUNKS {
                c.clear();
                spare.push(c);
            }
        }
    }
}

/// A device as the local link sees it.
pub(crate) trait Peer: Send + Sync {
    /// Its end of the link.
    fn end(&self) -> &LocalEnd;
    /// Whether the packet with these headers (from the BTH on) is for this
    /// device's engine (on a shared device, a QP of this process's member).
    fn owns(&self, head: &[u8]) -> bool;
    /// Whether it owns every packet sent to its address (it is not a
    /// member of a shared device): senders need not ask [`Peer::owns`].
    fn owns_all(&self) -> bool;
    /// A packet was handed over: wake whoever sleeps where a datagram would wake it.
    fn wake(&self);
}

/// A registered device: the address its packets are sent to.
struct Entry {
    addr: SocketAddr,
    pid: u32,
    peer: Weak<dyn Peer>,
}

/// The devices open in this process.
static DEVICES: Mutex<Vec<Entry>> = Mutex::new(Vec::new());
/// Bumped at every change of `DEVICES`: senders refresh their copy.
static GENERATION: AtomicU64 = AtomicU64::new(1);

/// Makes the device at `addr` reachable over the local link.
pub(crate) fn register(addr: SocketAddr, peer: Weak<dyn Peer>) {
    let mut d = DEVICES.lock().unwrap_or_else(|e| e.into_inner());
    d.retain(|e| e.peer.strong_count() > 0);
    d.push(Entry { addr, pid: std::process::id(), peer });
    GENERATION.fetch_add(1, Ordering::AcqRel);
}

/// A sender's copy of the registry (refreshed when it changed).
#[derive(Default)]
pub(crate) struct Peers {
    generation: u64,
    list: Vec<(SocketAddr, Weak<dyn Peer>)>,
}

impl Peers {
    /// Refreshes the copy if devices came or went; false if none but the
    /// sender itself could be reached (the caller skips lookups then).
    pub(crate) fn refresh(&mut self) -> bool {
        let g = GENERATION.load(Ordering::Acquire);
        if g != self.generation {
            let d = DEVICES.lock().unwrap_or_else(|e| e.into_inner());
            let pid = std::process::id();
            // In a fork() child, the parent's devices are copies nobody drives.
            self.list = d.iter().filter(|e| e.pid == pid).map(|e| (e.addr, e.peer.clone())).collect();
            self.generation = g;
        }
        !self.list.is_empty()
    }

    /// The device of this process the packet for `dst` with headers `head` is for.
    pub(crate) fn find(&self, dst: SocketAddr, head: &[u8]) -> Option<Arc<dyn Peer>> {
        self.list.iter().filter(|(a, _)| *a == dst).filter_map(|(_, w)| w.upgrade()).find(|p| p.owns(head))
    }
}

/// A packet the engine built, as the links take it: its headers for the
/// pass (`'a`), its payload where it lies (`'m`, registered memory, which
/// the socket link sends from).
pub(crate) struct Packet<'a, 'm> {
    pub(crate) src: IpAddr,
    pub(crate) src_port: u16,
    pub(crate) dst: IpAddr,
    /// Its destination's UDP address (the device's `dst:4791`).
    pub(crate) to: SocketAddr,
    /// Its destination QP (the engine's description, see
    /// `roce_proto::TransmitGather`).
    pub(crate) dest_qpn: roce_proto::Qpn,
    /// The headers, from the BTH on.
    pub(crate) head: &'a [u8],
    /// The payload, still in registered memory.
    pub(crate) payload: &'a [&'m [u8]],
    /// Bytes of pad and ICRC that end it.
    pub(crate) trailer_len: usize,
}

impl<'a, 'm> Packet<'a, 'm> {
    /// Its addressing; `icrc`: its trailer holds a computed ICRC.
    fn addressing(&self, icrc: bool) -> Addressing {
        Addressing { src: self.src, src_port: self.src_port, dst: self.dst, icrc }
    }

    /// Its bytes in parts, ending in `trailer` (at least `trailer_len` long).
    pub(crate) fn parts<'t>(&self, trailer: &'t [u8]) -> impl Iterator<Item = &'t [u8]> + Clone
    where
        'a: 't,
        'm: 't,
    {
        std::iter::once(self.head)
            .chain(self.payload.iter().copied())
            .chain(std::iter::once(&trailer[..self.trailer_len]))
    }
}

/// What [`LocalLink::send`] did with a packet.
pub(crate) enum Sent {
    /// Handed to a local device, ending in this trailer (its ICRC computed
    /// only if someone records or impairs it).
    Local([u8; 8]),
    /// For a local device with no room: the caller sends it by the socket
    /// (the receiver sees a reordering, never a loss).
    Full,
    /// For another process's member whose inbox cannot be opened right
    /// now: by the socket too.
    Unopened,
    /// Not for a device of this host that the link reaches.
    Elsewhere,
}

/// A chunk a transmit fills for one device of this process, with what the
/// sender needs of the device read once per transmit, not once per packet:
/// the device's `Arc` and its end are written by its own threads, and a
/// reference count taken and dropped per packet (or a flag read there)
/// moved their cache line between the CPUs at every packet
/// (`docs/data-path.md`, step 8).
struct Staged {
    /// The address its packets are sent to.
    to: SocketAddr,
    peer: Arc<dyn Peer>,
    /// [`Peer::owns_all`].
    owns_all: bool,
    /// [`LocalEnd::wants_icrc`].
    icrc: bool,
    /// [`LocalEnd::room`] when the chunk was started: other senders may
    /// hand chunks over meanwhile, so the inbox's bound holds to within a
    /// chunk per sender.
    room: usize,
    chunk: Chunk,
}

/// The sending side of the local link: this process's devices (chunks
/// handed over in memory) and, on a shared device, the other processes'
/// members of it (records in their inboxes, `roce_host::inbox`). One per
/// device, under its lock.
pub(crate) struct LocalLink {
    on: bool,
    peers: Peers,
    /// The chunks a transmit fills for this process's devices.
    staged: Vec<Staged>,
    /// Lanes to the other members of the shared device.
    outboxes: Option<Outboxes>,
    /// The shared device's other addresses (`gids::other_addrs`): a packet
    /// to one of them is for the device as much as one to its own address
    /// (the relay of that address hands it to the QP's member), so it takes
    /// the member's lane too, not the kernel and a relay thread.
    others: Vec<IpAddr>,
}

impl LocalLink {
    /// `on`: the link is [`Link::Local`]; `outboxes`: this member's lanes
    /// (a shared device whose inboxes could be made); `others`: the
    /// device's other addresses it receives on.
    pub(crate) fn new(on: bool, outboxes: Option<Outboxes>, others: Vec<IpAddr>) -> LocalLink {
        LocalLink { on, peers: Peers::default(), staged: Vec::new(), outboxes: outboxes.filter(|_| on), others }
    }

    /// Before a transmit: whether any packet can go by the link.
    pub(crate) fn begin(&mut self) -> bool {
        self.on && (self.peers.refresh() | self.outboxes.is_some())
    }

    /// Hands `p` to a local device if it is for one: a device of this
    /// process first, then another process's member of this device
    /// (`member`, whose socket sends the wake-ups). `capture`: this device
    /// records packets (their ICRC is computed); `icrc` computes the trailer.
    pub(crate) fn send(
        &mut self,
        p: &Packet<'_, '_>,
        member: Option<(&Member, &Socket)>,
        now: Instant,
        capture: bool,
        mut icrc: impl FnMut() -> [u8; 8],
        stats: &mut DriverStats,
    ) -> Sent {
        let sent = match self.hand_to_process(p, capture, &mut icrc) {
            Sent::Elsewhere => self.write_to_member(p, member, now, capture, &mut icrc, stats),
            s => s,
        };
        match sent {
            Sent::Local(_) => {
                stats.tx_packets += 1;
                stats.tx_local += 1;
            }
            Sent::Full => stats.local_full += 1,
            Sent::Unopened => stats.local_unopened += 1,
            Sent::Elsewhere => {}
        }
        sent
    }

    fn hand_to_process(&mut self, p: &Packet<'_, '_>, capture: bool, icrc: &mut impl FnMut() -> [u8; 8]) -> Sent {
        let staged = self.staged.iter().position(|s| s.to == p.to && (s.owns_all || s.peer.owns(p.head)));
        let i = match staged {
            Some(i) => i,
            None => {
                let Some(peer) = self.peers.find(p.to, p.head) else { return Sent::Elsewhere };
                let end = peer.end();
                let (icrc, room, chunk) = (end.wants_icrc(), end.room(), end.chunk());
                self.staged.push(Staged { to: p.to, owns_all: peer.owns_all(), icrc, room, chunk, peer });
                self.staged.len() - 1
            }
        };
        let s = &mut self.staged[i];
        let with_icrc = capture || s.icrc;
        let trailer = if with_icrc { icrc() } else { [0; 8] };
        let len: usize = p.parts(&trailer).map(<[u8]>::len).sum();
        if s.chunk.len() + len > s.room {
            return Sent::Full;
        }
        s.chunk.append(p.addressing(with_icrc), p.parts(&trailer));
        if s.chunk.len() >= CHUNK_BYTES || s.chunk.packets_held() >= CHUNK_PACKETS {
            // The receiver starts on it while the rest is written.
            let end = s.peer.end();
            let full = std::mem::replace(&mut s.chunk, end.chunk());
            end.hand_over(full);
            s.room = end.room();
            s.peer.wake();
        }
        Sent::Local(trailer)
    }

    fn write_to_member(
        &mut self,
        p: &Packet<'_, '_>,
        member: Option<(&Member, &Socket)>,
        now: Instant,
        capture: bool,
        icrc: &mut impl FnMut() -> [u8; 8],
        stats: &mut DriverStats,
    ) -> Sent {
        let (Some((m, sock)), Some(boxes)) = (member, self.outboxes.as_mut()) else { return Sent::Elsewhere };
        if p.dst != m.addr().ip() && !self.others.contains(&p.dst) {
            return Sent::Elsewhere;
        }
        let Some((slot, inc)) = m.owner_of(p.dest_qpn.get()) else {
            return Sent::Elsewhere;
        };
        let Some(lane) = boxes.to(slot, inc, now, |s, i| m.is_member(s, i)) else { return Sent::Unopened };
        let with_icrc = capture || lane.wants_icrc();
        let trailer = if with_icrc { icrc() } else { [0; 8] };
        if !lane.push(p.addressing(with_icrc), p.parts(&trailer)) {
            return Sent::Full;
        }
        // The receiver starts on a long message while the rest is written.
        if lane.unpublished() >= CHUNK_BYTES || lane.unpublished_packets() >= CHUNK_PACKETS {
            lane.publish_and_wake(|| wake_member(m, sock, stats, slot, inc));
        }
        Sent::Local(trailer)
    }

    /// After a transmit: hands every staged chunk over and publishes every
    /// lane written to, waking the receivers that sleep.
    pub(crate) fn finish(&mut self, member: Option<(&Member, &Socket)>, stats: &mut DriverStats) {
        if let (Some((m, sock)), Some(boxes)) = (member, self.outboxes.as_mut()) {
            boxes.publish(|slot, inc| wake_member(m, sock, stats, slot, inc));
        }
        for Staged { peer, chunk, .. } in self.staged.drain(..) {
            if chunk.is_empty() {
                peer.end().recycle(std::iter::once(chunk));
            } else {
                peer.end().hand_over(chunk);
                peer.wake();
            }
        }
    }
}

/// Wakes the member in `slot` (an envelope from `sock`), counted in
/// `member_wakes`; false if it could not be sent.
fn wake_member(m: &Member, sock: &Socket, stats: &mut DriverStats, slot: usize, incarnation: u64) -> bool {
    let sent = m.wake_member(sock, slot, incarnation);
    stats.member_wakes += u64::from(sent);
    sent
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chunk_of(end: &LocalEnd, packets: &[&[&[u8]]]) -> Chunk {
        let ip: IpAddr = [127, 0, 0, 9].into();
        let at = Addressing { src: ip, src_port: 49152, dst: ip, icrc: false };
        let mut c = end.chunk();
        packets.iter().for_each(|p| c.append(at, p.iter().copied()));
        c
    }

    /// Packets come out whole and in order, chunk after chunk; a take
    /// empties the queue and clears `pending`; a second take finds nothing.
    #[test]
    fn packets_are_taken_whole_and_in_order() {
        let end = LocalEnd::new(false);
        assert!(!end.pending());
        end.hand_over(chunk_of(&end, &[&[b"head", b"pay", b"load"], &[b"second"]]));
        end.hand_over(chunk_of(&end, &[&[b"third"]]));
        assert!(end.pending());
        let mut got = Vec::new();
        assert!(end.take(&mut got));
        assert!(!end.pending());
        let seen: Vec<Vec<u8>> = got.iter().flat_map(|c| c.packets().map(|(_, b)| b.to_vec())).collect();
        assert_eq!(seen, [b"headpayload".to_vec(), b"second".to_vec(), b"third".to_vec()]);
        end.recycle(got.drain(..));
        assert!(!end.take(&mut got));
        let reused = end.chunk();
        assert!(reused.is_empty() && reused.bytes.capacity() > 0, "an emptied chunk is filled again");
    }

    /// Each packet comes out with its own addressing, though a chunk keeps
    /// it once per run of packets that share it; an emptied chunk starts
    /// its runs again.
    #[test]
    fn each_packet_keeps_its_addressing_across_runs() {
        let at = |port: u16, icrc: bool| Addressing {
            src: [127, 0, 0, 9].into(),
            src_port: port,
            dst: [127, 0, 0, 10].into(),
            icrc,
        };
        let sent = [
            (at(49152, false), b"a1".as_slice()),
            (at(49152, false), b"a2"),
            (at(49153, false), b"b1"),
            (at(49152, true), b"c1"),
            (at(49152, false), b"a3"),
            (at(49152, false), b""),
        ];
        let mut c = Chunk::default();
        for (a, p) in sent {
            c.append(a, [p]);
        }
        assert_eq!((c.packets_held(), c.runs.len()), (6, 4), "one record of addressing per run");
        let got: Vec<(Addressing, &[u8])> = c.packets().collect();
        assert_eq!(got, sent);
        c.clear();
        c.append(at(1, false), [b"x".as_slice()]);
        assert_eq!(c.packets().collect::<Vec<_>>(), [(at(1, false), b"x".as_slice())]);
    }

    /// The queue holds at most INBOX_BYTES: a sender asks before it
    /// stages a packet, counting what it staged, and the room comes back
    /// once the receiver took the chunks.
    #[test]
    fn a_full_inbox_has_no_room_until_taken() {
        let end = LocalEnd::new(false);
        let big = vec![7u8; INBOX_BYTES / 4];
        for _ in 0..3 {
            assert!(end.has_room(0, big.len()));
            end.hand_over(chunk_of(&end, &[&[&big]]));
        }
        assert!(end.has_room(0, big.len()));
        assert!(!end.has_room(big.len(), 1), "what the sender staged counts");
        end.hand_over(chunk_of(&end, &[&[&big]]));
        assert!(!end.has_room(0, 1));
        let mut got = Vec::new();
        assert!(end.take(&mut got));
        assert_eq!(got.len(), 4);
        assert!(end.has_room(0, INBOX_BYTES), "room again once taken");
    }

    /// A device of this process as the link sees it: every packet is its
    /// own, wake-ups counted.
    struct TestPeer {
        end: LocalEnd,
        wakes: std::sync::atomic::AtomicUsize,
    }

    impl Peer for TestPeer {
        fn end(&self) -> &LocalEnd {
            &self.end
        }
        fn owns(&self, _: &[u8]) -> bool {
            true
        }
        fn owns_all(&self) -> bool {
            true
        }
        fn wake(&self) {
            self.wakes.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// A transmit of many small packets hands them over every
    /// CHUNK_PACKETS, before it ends (the receiver starts on the first
    /// while the sender builds the rest), and the rest at its end; the
    /// receiver gets every packet once, in order.
    #[test]
    fn small_packets_are_handed_over_every_chunk_packets_while_the_transmit_runs() {
        // An address no other test registers (the registry is the process's).
        let to: SocketAddr = "192.0.2.77:4791".parse().unwrap();
        let peer = Arc::new(TestPeer { end: LocalEnd::new(false), wakes: Default::default() });
        let weak: Weak<dyn Peer> = Arc::downgrade(&(peer.clone() as Arc<dyn Peer>));
        register(to, weak);
        let mut link = LocalLink::new(true, None, Vec::new());
        assert!(link.begin());
        let mut stats = DriverStats::default();
        let now = Instant::now();
        let total = 2 * CHUNK_PACKETS + 5;
        let mut taken = Vec::new();
        let mut seen = Vec::new();
        for i in 0..total {
            let head = [i as u8; 28];
            let payload: [&[u8]; 1] = [&[0xab; 8]];
            let p = Packet {
                src: to.ip(),
                src_port: 49152,
                dst: to.ip(),
                to,
                dest_qpn: roce_proto::Qpn::new(0x11),
                head: &head,
                payload: &payload,
                trailer_len: 4,
            };
            assert!(matches!(link.send(&p, None, now, false, || [0; 8], &mut stats), Sent::Local(_)));
            // What the receiver can take while the transmit runs.
            let handed = (i + 1) / CHUNK_PACKETS * CHUNK_PACKETS;
            if peer.end.take(&mut taken) {
                seen.extend(taken.iter().flat_map(|c| c.packets().map(|(_, b)| b[0])));
                peer.end.recycle(taken.drain(..));
            }
            assert_eq!(seen.len(), handed, "after packet {i}");
        }
        assert_eq!(peer.wakes.load(Ordering::Relaxed), 2, "a wake-up per chunk handed over");
        link.finish(None, &mut stats);
        assert!(peer.end.take(&mut taken));
        seen.extend(taken.iter().flat_map(|c| c.packets().map(|(_, b)| b[0])));
        assert_eq!(seen, (0..total).map(|i| i as u8).collect::<Vec<_>>());
        assert!(taken.iter().flat_map(Chunk::packets).all(|(_, b)| b.len() == 28 + 8 + 4));
        assert_eq!((stats.tx_local, stats.tx_packets), (total as u64, total as u64));
    }
}
