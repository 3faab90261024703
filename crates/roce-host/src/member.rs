//! A member of a shared device: one open context's seat in the host's
//! reuseport group, its QPN blocks, and the upkeep of the shared table.

use std::fs::File;
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::PathBuf;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use roce_udp::{BindError, Socket};

use crate::envelope::{self, Envelope};
pub use crate::error::HostError;
use crate::gsi::{self, MadOwner};
pub use crate::layout::device_file;
use crate::layout::{self, BLOCK_BITS, BLOCKS, FIRST_BLOCK, LAST_BLOCK, LIVENESS_BASE, MAX_MEMBERS, Table};
use crate::resources::{self, Region, Resources};
use crate::seats::{self, Plan};
use crate::shm::{self, Mapping};
use crate::stats::HostStats;

/// QP 1, the GSI QP: every member's own, routed by its MADs.
const GSI_QPN: u32 = 1;

/// How long a block stays unused after its member left or died, so that
/// peers of its QPs have given up on them (IBTA: a requester retries
/// `retry_cnt` times, 7 at most, each after the local ACK timeout; rdma-core's
/// and perftest's timeout 14 is 67 ms, rdma_cm's default 18 about 1 s).
pub const QUARANTINE: Duration = Duration::from_secs(60);
/// How long joining or leaving waits for the device file's lock.
pub const LOCK_PATIENCE: Duration = Duration::from_secs(5);
/// How long a probe round waits for the members' answers.
pub const PROBE_PATIENCE: Duration = Duration::from_millis(50);
/// Least time between two reconciliations a member starts by itself.
const RECONCILE_EVERY: Duration = Duration::from_millis(2);

/// Where a received packet belongs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Route {
    /// To this member's engine.
    Mine,
    /// To another member, at `seat` of the group.
    Member {
        /// Its seat.
        seat: u32,
        /// Its incarnation.
        incarnation: u64,
    },
    /// A QP nobody owns: counted and dropped as on a NIC.
    Nobody,
    /// Owned by a member whose seat is not known right now.
    Unseated,
    /// A REQ or SIDR_REQ for a service ID nobody on the device listens on
    /// yet: it waits up to [`LISTEN_GRACE`] for a listener, then goes to a
    /// CM that rejects it as Linux does (REJ 8).
    NoListenerYet,
}

/// What a received envelope asks of the member.
#[derive(Debug, PartialEq, Eq)]
pub enum Control<'a> {
    /// A packet for this member's engine.
    Deliver {
        /// IP source.
        src: IpAddr,
        /// UDP source port.
        src_port: u16,
        /// IP destination.
        dst: IpAddr,
        /// The packet.
        packet: &'a [u8],
    },
    /// A wake-up for this member.
    Wake,
    /// Handled here (a probe answered, a stray passed on, or dropped and counted).
    Done,
}

/// A stray whose owner's seat was not known (or was wrong): kept until
/// the seats are reconciled, then handed on again.
struct Held {
    at: Instant,
    src: IpAddr,
    src_port: u16,
    dst: IpAddr,
    packet: Vec<u8>,
}

/// Most strays held at once, and for how long.
const MAX_HELD: usize = 1024;
const HOLD_FOR: Duration = Duration::from_millis(200);
/// How long a REQ for a service ID nobody listens on waits for a listener
/// before it is answered. With Linux's CM a listen is one system call; here
/// it may join the device first (a socket, a reconciliation), and programs
/// such as qperf 0.4 tell their peer the port before they call
/// `rdma_listen`: their peer's REQ must not lose that race.
pub const LISTEN_GRACE: Duration = Duration::from_millis(250);
/// Most REQs waiting for a listener at once (more are answered at once).
const MAX_WAITING: usize = 64;

struct Alloc {
    blocks: Vec<u32>,
    next: u32,
}

/// One open context's membership of a shared device.
pub struct Member {
    path: PathBuf,
    file: File,
    map: Mapping,
    slot: usize,
    incarnation: u64,
    secret: [u8; 16],
    addr: SocketAddr,
    owned: Vec<AtomicU64>,
    alloc: Mutex<Alloc>,
    attention: AtomicBool,
    /// The seats (their [`seats_print`]) this member's last steering
    /// program was built for: other seats (a member left, see
    /// [`Member::leave`]) ask for a reconciliation.
    steered_for: AtomicU64,
    last_reconcile: Mutex<Option<Instant>>,
    /// Strays waiting for the seats, and the generation they were held at.
    held: Mutex<(std::collections::VecDeque<Held>, u64)>,
    /// REQs waiting for a listener ([`Route::NoListenerYet`]), and whether
    /// there are any (the data path's upkeep looks without the lock).
    waiting: Mutex<Vec<Held>>,
    any_waiting: AtomicBool,
    stats: HostStats,
    /// Serialises this member's writes of its resource slot.
    publishing: Mutex<()>,
}

impl std::fmt::Debug for Member {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Member").field("addr", &self.addr).field("slot", &self.slot).finish()
    }
}

/// CLOCK_MONOTONIC in ms: one clock for every process of the host.
fn now_ms() -> u64 {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::Monotonic);
    (t.tv_sec as u64) * 1000 + (t.tv_nsec as u64) / 1_000_000
}

struct Locked<'a>(&'a File);

impl Drop for Locked<'_> {
    fn drop(&mut self) {
        let _ = rustix::fs::flock(self.0, rustix::fs::FlockOperation::Unlock);
    }
}

impl Member {
    fn table(&self) -> Table<'_> {
        Table::new(&self.map.words()[..layout::WORDS])
    }

    fn region(&self) -> Region<'_> {
        Region::new(&self.map.words()[layout::WORDS..])
    }

    fn lock(&self, patience: Duration) -> Result<Locked<'_>, HostError> {
        lock_file(&self.file, &self.path, patience)
    }

    /// Joins the shared device on `addr` (its port usually 4791): binds a
    /// socket into the group and takes a seat and a first QPN block.
    pub fn join(addr: SocketAddr) -> Result<(Member, Socket), HostError> {
        let path = device_file(addr);
        loop {
            if let Some(j) = Member::try_join(addr, &path)? {
                return Ok(j);
            }
        }
    }

    /// One attempt: `None` when the last member removed the file between
    /// our open and our lock (then a new file is the device's).
    fn try_join(addr: SocketAddr, path: &std::path::Path) -> Result<Option<(Member, Socket)>, HostError> {
        let path = path.to_path_buf();
        let file_err = |source| HostError::File { path: path.clone(), source };
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
            .open(&path)
            .map_err(file_err)?;
        let meta = file.metadata().map_err(file_err)?;
        let me = rustix::process::getuid().as_raw();
        if meta.uid() != me || meta.mode() & 0o077 != 0 {
            return Err(HostError::Unsafe { path, owner: meta.uid(), mode: meta.mode() & 0o7777 });
        }
        // The table, then the resource region (a file an older softroce
        // made is lengthened: it maps only the table).
        let words = layout::WORDS + resources::WORDS;
        let len = (words * 8) as u64;
        if meta.len() < len {
            file.set_len(len).map_err(file_err)?;
        }
        let map = Mapping::new(&file, words).map_err(file_err)?;
        let guard = lock_file(&file, &path, LOCK_PATIENCE)?;
        if std::fs::symlink_metadata(&path).map(|m| m.ino()).ok() != Some(meta.ino()) {
            return Ok(None);
        }
        let t = Table::new(&map.words()[..layout::WORDS]);
        if !t.is_valid() {
            for s in 0..MAX_MEMBERS {
                if shm::byte_held(&file, LIVENESS_BASE + s as u64).map_err(file_err)? {
                    return Err(HostError::Incompatible { path });
                }
            }
            t.init(random_secret().map_err(file_err)?);
        }
        // A free slot: no incarnation and nobody alive on it, or a dead one's.
        let mut slot = None;
        for s in 0..MAX_MEMBERS {
            if t.incarnation(s) == 0 && shm::hold_byte(&file, LIVENESS_BASE + s as u64).map_err(file_err)? {
                slot = Some(s);
                break;
            }
        }
        let Some(slot) = slot else { return Err(HostError::Full { addr }) };
        let incarnation = t.next_incarnation();
        t.set_member(slot, incarnation, std::process::id());
        let secret = t.secret();
        // A context with nothing yet: `rdma resource show` counts it at once.
        let region = Region::new(&map.words()[layout::WORDS..]);
        region.adopt(u64::from_le_bytes(secret[..8].try_into().expect("8 bytes")));
        region.publish(slot, incarnation, &Resources::default(), &[]);
        drop(guard);
        let member = Member {
            path,
            file,
            map,
            slot,
            incarnation,
            secret,
            addr,
            owned: (0..BLOCKS / 64).map(|_| AtomicU64::new(0)).collect(),
            alloc: Mutex::new(Alloc { blocks: Vec::new(), next: 0 }),
            attention: AtomicBool::new(false),
            steered_for: AtomicU64::new(0),
            last_reconcile: Mutex::new(None),
            held: Mutex::new((std::collections::VecDeque::new(), 0)),
            waiting: Mutex::new(Vec::new()),
            any_waiting: AtomicBool::new(false),
            stats: HostStats::default(),
            publishing: Mutex::new(()),
        };
        let guard = member.lock(LOCK_PATIENCE)?;
        let sock = match Socket::bind_shared(addr) {
            Ok(s) => s,
            Err(e) => {
                member.region().clear(slot);
                member.table().clear_member(slot);
                return Err(match (&e, port_owner(addr)) {
                    (BindError::PortInUse { .. }, Some(uid)) if uid != me => HostError::OtherUser { addr, uid },
                    _ => HostError::Bind(e),
                });
            }
        };
        member.reconcile_locked(&sock, true)?;
        member.claim_block(&sock)?;
        drop(guard);
        Ok(Some((member, sock)))
    }

    /// Publishes what this member holds, for `softroce rdma resource show`
    /// in any process of the user ([`resources::census`]).
    pub fn publish(&self, res: &Resources) {
        let _g = self.publishing.lock().unwrap_or_else(|e| e.into_inner());
        let host: Vec<u64> = self.stats.iter().map(|(_, v)| v).collect();
        self.region().publish(self.slot, self.incarnation, res, &host);
    }

    /// The member's counters.
    pub fn stats(&self) -> &HostStats {
        &self.stats
    }

    /// The device file.
    pub fn path(&self) -> &std::path::Path {
        &self.path
    }

    /// The member's incarnation (unique on the device for its lifetime).
    pub fn incarnation(&self) -> u64 {
        self.incarnation
    }

    /// The QPN blocks this member owns.
    pub fn blocks(&self) -> Vec<u32> {
        self.alloc.lock().unwrap_or_else(|e| e.into_inner()).blocks.clone()
    }

    fn owns(&self, block: u32) -> bool {
        let b = block as usize % BLOCKS;
        self.owned[b / 64].load(Ordering::Relaxed) & (1 << (b % 64)) != 0
    }

    fn set_owned(&self, block: u32, on: bool) {
        let b = block as usize % BLOCKS;
        if on {
            self.owned[b / 64].fetch_or(1 << (b % 64), Ordering::Relaxed);
        } else {
            self.owned[b / 64].fetch_and(!(1 << (b % 64)), Ordering::Relaxed);
        }
    }

    /// A QP number for a new QP: the next one of this member's blocks that
    /// `in_use` does not name (cyclic, so numbers are reused late), or the
    /// first of a new block.
    pub fn alloc_qpn(&self, sock: &Socket, in_use: impl Fn(u32) -> bool) -> Result<u32, HostError> {
        loop {
            {
                let mut a = self.alloc.lock().unwrap_or_else(|e| e.into_inner());
                let total = a.blocks.len() << BLOCK_BITS;
                for k in 0..total {
                    let i = (a.next as usize + k) % total;
                    let q = (a.blocks[i >> BLOCK_BITS] << BLOCK_BITS) | (i as u32 & ((1 << BLOCK_BITS) - 1));
                    if !in_use(q) {
                        a.next = ((i + 1) % total) as u32;
                        return Ok(q);
                    }
                }
            }
            let _g = self.lock(LOCK_PATIENCE)?;
            self.claim_block(sock)?;
        }
    }

    /// Claims the next free block out of quarantine (lock held).
    fn claim_block(&self, sock: &Socket) -> Result<(), HostError> {
        let t = self.table();
        // A dead member's blocks are free only once reaped (quarantine from then).
        let Some((b, cut)) = t.pick_block(now_ms(), QUARANTINE.as_millis() as u64) else {
            return Err(HostError::NoQpn { addr: self.addr });
        };
        if cut {
            self.stats.quarantine_cut.fetch_add(1, Ordering::Relaxed);
        }
        t.set_block_owner(b, self.slot, self.incarnation);
        t.set_next_block(if b == LAST_BLOCK { FIRST_BLOCK } else { b + 1 });
        self.set_owned(b, true);
        self.alloc.lock().unwrap_or_else(|e| e.into_inner()).blocks.push(b);
        t.bump();
        self.attach(sock)
    }

    /// Where a packet for `dest_qpn` belongs. Lock-free: the data path.
    pub fn route(&self, dest_qpn: u32) -> Route {
        let block = layout::block_of(dest_qpn);
        if self.owns(block) {
            return Route::Mine;
        }
        let t = self.table();
        let Some(o) = t.block_owner(block) else { return Route::Nobody };
        if !t.is_incarnation(o.slot, o.incarnation) {
            return Route::Nobody;
        }
        match t.seat_of(o.slot) {
            Some(seat) => Route::Member { seat: seat as u32, incarnation: o.incarnation },
            None => Route::Unseated,
        }
    }

    /// The slot and incarnation of the other member that owns `dest_qpn`'s
    /// block, if a live one does (not this member: its own QPs are
    /// `Route::Mine`). Lock-free: the local link asks for every packet.
    pub fn owner_of(&self, dest_qpn: u32) -> Option<(usize, u64)> {
        let block = layout::block_of(dest_qpn);
        if self.owns(block) {
            return None;
        }
        let t = self.table();
        let o = t.block_owner(block)?;
        (o.slot != self.slot && t.is_incarnation(o.slot, o.incarnation)).then_some((o.slot, o.incarnation))
    }

    /// Whether the member in `slot` is still the one of `incarnation`.
    pub fn is_member(&self, slot: usize, incarnation: u64) -> bool {
        slot < MAX_MEMBERS && self.table().is_incarnation(slot, incarnation)
    }

    /// This member's slot in the device file.
    pub fn slot(&self) -> usize {
        self.slot
    }

    /// Ends a sleep of the member in `slot` (incarnation `incarnation`): a
    /// Wake envelope to its seat. False if its seat is not known (its sleep
    /// then ends by its timeout) or the send failed.
    pub fn wake_member(&self, sock: &Socket, slot: usize, incarnation: u64) -> bool {
        let mut b = Vec::with_capacity(envelope::FORWARD_HEADER);
        self.is_member(slot, incarnation)
            && self.wake_envelope_of(slot, incarnation, &mut b)
            && sock.send_to(&b, sock.local_addr()).is_ok()
    }

    /// Where a received packet belongs: by its destination QP's block, or
    /// for QP 1 by what its MAD names ([`crate::gsi`]); `None` for a packet
    /// too short to name a QP.
    pub fn route_packet(&self, packet: &[u8]) -> Option<Route> {
        let qpn = roce_wire::bth::dest_qpn_of(packet)?;
        Some(if qpn == GSI_QPN { self.route_mad(packet) } else { self.route(qpn) })
    }

    /// Where a MAD for QP 1 belongs (see [`crate::gsi`]).
    pub fn route_mad(&self, packet: &[u8]) -> Route {
        self.route_mad_or(packet, true)
    }

    /// [`Member::route_mad`]; `wait`: a REQ nobody listens for may wait
    /// for a listener (else it goes where any unnamed MAD goes).
    fn route_mad_or(&self, packet: &[u8], wait: bool) -> Route {
        let t = self.table();
        // Alive by the kernel's word too (its OFD lock): a member that died
        // keeps its words until it is reaped, and a MAD handed to its seat
        // would be lost at every retry (they all share one 4-tuple, so the
        // kernel gives them all to the same member).
        let live = |slot: usize, inc: u64| {
            slot < MAX_MEMBERS
                && t.is_incarnation(slot, inc)
                && t.has_cm(slot)
                && (slot == self.slot || shm::byte_held(&self.file, LIVENESS_BASE + slot as u64).unwrap_or(true))
        };
        let owner = match gsi::mad_owner(packet) {
            MadOwner::Service(sid) => {
                let o = t.service_owner(sid).filter(|o| live(o.slot, o.incarnation)).map(|o| o.slot);
                if o.is_none() && wait {
                    return Route::NoListenerYet;
                }
                o
            }
            MadOwner::Slot(slot) => (slot < MAX_MEMBERS && live(slot, t.incarnation(slot))).then_some(slot),
            MadOwner::Any => None,
        };
        // Nobody named: any member with a CM answers or drops it, this one first.
        let owner = owner.or_else(|| {
            if t.has_cm(self.slot) { Some(self.slot) } else { (0..MAX_MEMBERS).find(|&s| live(s, t.incarnation(s))) }
        });
        match owner {
            None => Route::Nobody,
            Some(s) if s == self.slot => Route::Mine,
            Some(s) => match t.seat_of(s) {
                Some(seat) => Route::Member { seat: seat as u32, incarnation: t.incarnation(s) & 0xffff_ffff_ffff },
                None => Route::Unseated,
            },
        }
    }

    /// This member has (or no longer has) a CM on its QP 1: MADs nobody in
    /// particular owns may come to it.
    pub fn set_cm(&self, on: bool) {
        self.table().set_has_cm(self.slot, on);
    }

    /// The bits every comm ID this member's CM picks must carry: (mask,
    /// value), its slot in the low [`gsi::COMM_ID_TAG_BITS`] bits.
    pub fn comm_id_tag(&self) -> (u32, u32) {
        ((1 << gsi::COMM_ID_TAG_BITS) - 1, self.slot as u32)
    }

    /// Listens on `service_id` for the device: REQs for it come to this
    /// member. Fails when a live member of another process listens on it.
    pub fn listen(&self, service_id: u64) -> Result<(), HostError> {
        let _g = self.lock(LOCK_PATIENCE)?;
        let t = self.table();
        if let Some(o) = t.service_owner(service_id) {
            if o.slot == self.slot && t.is_incarnation(o.slot, self.incarnation) {
                return Ok(());
            }
            if t.is_incarnation(o.slot, o.incarnation)
                && shm::byte_held(&self.file, LIVENESS_BASE + o.slot as u64).unwrap_or(true)
            {
                return Err(HostError::ServiceTaken { addr: self.addr, service_id, pid: t.pid(o.slot) });
            }
            t.remove_services(o.slot, Some(service_id));
        }
        if t.add_service(service_id, self.slot, self.incarnation & 0xffff_ffff_ffff) {
            Ok(())
        } else {
            Err(HostError::ServicesFull { addr: self.addr })
        }
    }

    /// Stops listening on `service_id`.
    pub fn unlisten(&self, service_id: u64) {
        if let Ok(_g) = self.lock(LOCK_PATIENCE) {
            self.table().remove_services(self.slot, Some(service_id));
        }
    }

    /// Hands a packet that reached this member but is not its own on, or
    /// drops and counts it. `hops`: members it went through already.
    pub fn pass_on(&self, sock: &Socket, src: IpAddr, src_port: u16, dst: IpAddr, packet: &[u8], hops: u8) {
        let Some(route) = self.route_packet(packet) else {
            self.stats.malformed.fetch_add(1, Ordering::Relaxed);
            return;
        };
        self.hand_on(sock, route, src, src_port, dst, packet, hops);
    }

    /// Sends a MAD of this member's own QP 1 to a QP 1 of its own device:
    /// straight to the member it is for, in an envelope to its seat, as a
    /// stray is handed on. Every MAD between processes of the host has one
    /// 4-tuple, so the kernel's hash would give them all to one member, and
    /// one that is leaving (a process that sends its last DREP and exits)
    /// would take them with it.
    pub fn send_local_mad(&self, sock: &Socket, src: IpAddr, src_port: u16, dst: IpAddr, packet: &[u8]) {
        self.stats.local_mads.fetch_add(1, Ordering::Relaxed);
        let route = self.route_mad(packet);
        self.hand_on(sock, route, src, src_port, dst, packet, 0);
    }

    /// The device's address (QP 1's MADs to it are [`Member::send_local_mad`]'s).
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// [`Member::pass_on`] once the route is known.
    #[allow(clippy::too_many_arguments)]
    fn hand_on(&self, sock: &Socket, route: Route, src: IpAddr, src_port: u16, dst: IpAddr, packet: &[u8], hops: u8) {
        // A held stray can turn out to be this member's own once the seats are
        // known (QP 1's MADs go by what they name): it goes to this member's
        // own seat in an envelope, as to any other, and comes back to it.
        let route = match route {
            Route::Mine => match self.table().seat_of(self.slot) {
                Some(seat) => Route::Member { seat: seat as u32, incarnation: self.incarnation & 0xffff_ffff_ffff },
                None => Route::Unseated,
            },
            r => r,
        };
        match route {
            Route::Mine => unreachable!("mapped to this member's seat above"),
            Route::Nobody => {
                self.stats.no_owner.fetch_add(1, Ordering::Relaxed);
            }
            Route::Unseated => self.hold(src, src_port, dst, packet),
            Route::NoListenerYet => self.wait_for_listener(sock, src, src_port, dst, packet, hops),
            Route::Member { .. } if hops >= envelope::MAX_HOPS => self.hold(src, src_port, dst, packet),
            Route::Member { seat, incarnation } => {
                let mut head = Vec::with_capacity(envelope::FORWARD_HEADER);
                envelope::forward_header(&mut head, seat, &self.secret, incarnation, hops + 1, src, src_port, dst);
                let parts = [io::IoSlice::new(&head), io::IoSlice::new(packet)];
                match sock.send_to_vectored(&parts, sock.local_addr()) {
                    Ok(_) => self.stats.forwarded.fetch_add(1, Ordering::Relaxed),
                    Err(_) => self.stats.stray_dropped.fetch_add(1, Ordering::Relaxed),
                };
                if hops > 0 {
                    // A forward that missed: the seats have changed.
                    self.attention.store(true, Ordering::Release);
                }
            }
        }
    }

    /// Handles a received envelope (`data` passed `envelope::is_envelope`).
    pub fn control<'a>(&self, sock: &Socket, src: IpAddr, data: &'a [u8]) -> Control<'a> {
        // Members send from the device's own address: anything else is forged.
        if src != self.addr.ip() {
            self.stats.bad_envelopes.fetch_add(1, Ordering::Relaxed);
            return Control::Done;
        }
        let me = self.incarnation & 0xffff_ffff_ffff;
        match envelope::parse(data, &self.secret) {
            Err(_) => {
                self.stats.bad_envelopes.fetch_add(1, Ordering::Relaxed);
                Control::Done
            }
            Ok(Envelope::Probe { seat, generation }) => {
                self.table().answer_probe(self.slot, generation, seat);
                Control::Done
            }
            Ok(Envelope::Wake { member }) if member & 0xffff_ffff_ffff == me => Control::Wake,
            Ok(Envelope::Wake { .. }) => {
                self.stats.misdirected.fetch_add(1, Ordering::Relaxed);
                self.attention.store(true, Ordering::Release);
                Control::Done
            }
            Ok(Envelope::Forward { member, src, src_port, dst, packet, .. }) if member & 0xffff_ffff_ffff == me => {
                self.stats.received_forwarded.fetch_add(1, Ordering::Relaxed);
                Control::Deliver { src, src_port, dst, packet }
            }
            Ok(Envelope::Forward { hops, src, src_port, dst, packet, .. }) => {
                // The sender's seats are stale: this member moved, or the
                // one meant did. Once the seats are known again it goes on.
                self.stats.misdirected.fetch_add(1, Ordering::Relaxed);
                if hops >= envelope::MAX_HOPS {
                    self.hold(src, src_port, dst, packet);
                } else {
                    self.pass_on(sock, src, src_port, dst, packet, hops);
                }
                self.attention.store(true, Ordering::Release);
                Control::Done
            }
        }
    }

    /// A Wake envelope for this member's own seat, to send from `sock` to
    /// itself; `None` while its seat is not known.
    pub fn wake_envelope(&self, out: &mut Vec<u8>) -> bool {
        self.wake_envelope_of(self.slot, self.incarnation, out)
    }

    /// A Wake envelope for the seat of the member in `slot`, whose
    /// incarnation is `incarnation`; false while its seat is not known.
    fn wake_envelope_of(&self, slot: usize, incarnation: u64, out: &mut Vec<u8>) -> bool {
        match self.table().seat_of(slot) {
            Some(seat) => {
                envelope::wake(out, seat as u32, &self.secret, incarnation);
                true
            }
            None => false,
        }
    }

    /// Keeps a REQ nobody listens for until a listener comes or
    /// [`LISTEN_GRACE`] is over (answered at once when too many wait).
    fn wait_for_listener(&self, sock: &Socket, src: IpAddr, src_port: u16, dst: IpAddr, packet: &[u8], hops: u8) {
        let mut w = self.waiting.lock().unwrap_or_else(|e| e.into_inner());
        if w.len() < MAX_WAITING {
            self.stats.waited_for_listener.fetch_add(1, Ordering::Relaxed);
            w.push(Held { at: Instant::now(), src, src_port, dst, packet: packet.to_vec() });
            self.any_waiting.store(true, Ordering::Release);
            return;
        }
        drop(w);
        let route = self.route_mad_or(packet, false);
        self.hand_on(sock, route, src, src_port, dst, packet, hops);
    }

    /// Hands on the REQs whose listener came, and those whose grace is over
    /// (to a CM that rejects them).
    fn release_waiting(&self, sock: &Socket) {
        if !self.any_waiting.load(Ordering::Acquire) {
            return;
        }
        let ready: Vec<(Route, Held)> = {
            let mut w = self.waiting.lock().unwrap_or_else(|e| e.into_inner());
            let (keep, ready): (Vec<_>, Vec<_>) = std::mem::take(&mut *w)
                .into_iter()
                .map(|x| (self.route_mad_or(&x.packet, x.at.elapsed() < LISTEN_GRACE), x))
                .partition(|(route, _)| *route == Route::NoListenerYet);
            *w = keep.into_iter().map(|(_, x)| x).collect();
            self.any_waiting.store(!w.is_empty(), Ordering::Release);
            ready
        };
        for (route, x) in ready {
            self.hand_on(sock, route, x.src, x.src_port, x.dst, &x.packet, 0);
        }
    }

    /// Keeps a stray until the seats are reconciled (counted as dropped
    /// when there is no room or it waited too long).
    fn hold(&self, src: IpAddr, src_port: u16, dst: IpAddr, packet: &[u8]) {
        self.attention.store(true, Ordering::Release);
        let mut h = self.held.lock().unwrap_or_else(|e| e.into_inner());
        if h.0.is_empty() {
            h.1 = self.table().generation();
        }
        if h.0.len() >= MAX_HELD {
            self.stats.stray_dropped.fetch_add(1, Ordering::Relaxed);
            return;
        }
        self.stats.held.fetch_add(1, Ordering::Relaxed);
        h.0.push_back(Held { at: Instant::now(), src, src_port, dst, packet: packet.to_vec() });
    }

    /// Hands the held strays on once the seats changed; drops (and counts)
    /// those that waited [`HOLD_FOR`].
    fn release_held(&self, sock: &Socket) {
        let gen_now = self.table().generation();
        let strays = {
            let mut h = self.held.lock().unwrap_or_else(|e| e.into_inner());
            if h.0.is_empty() {
                return;
            }
            let old = h.0.iter().take_while(|x| x.at.elapsed() >= HOLD_FOR).count();
            h.0.drain(..old);
            self.stats.stray_dropped.fetch_add(old as u64, Ordering::Relaxed);
            if h.1 == gen_now {
                self.attention.store(true, Ordering::Release);
                return;
            }
            std::mem::take(&mut h.0)
        };
        for x in strays {
            self.pass_on(sock, x.src, x.src_port, x.dst, &x.packet, 0);
        }
    }

    /// Whether something seen on the data path asks for a reconciliation.
    pub fn wants_upkeep(&self) -> bool {
        self.attention.load(Ordering::Acquire)
    }

    /// Reconciles the table with the kernel if something asked for it and
    /// no other member is doing so (never waits for the lock).
    pub fn upkeep(&self, sock: &Socket) {
        self.release_waiting(sock);
        if seats_print(&self.table().seats()) != self.steered_for.load(Ordering::Acquire) {
            self.attention.store(true, Ordering::Release);
        }
        if !self.attention.load(Ordering::Acquire) {
            return;
        }
        let due = {
            let mut last = self.last_reconcile.lock().unwrap_or_else(|e| e.into_inner());
            let due = last.is_none_or(|t| t.elapsed() >= RECONCILE_EVERY);
            if due {
                *last = Some(Instant::now());
            }
            due
        };
        if due && rustix::fs::flock(&self.file, rustix::fs::FlockOperation::NonBlockingLockExclusive).is_ok() {
            let _g = Locked(&self.file);
            self.attention.store(false, Ordering::Release);
            if self.reconcile_locked(sock, false).is_err() {
                self.attention.store(true, Ordering::Release);
            }
        }
        self.release_held(sock);
    }

    /// Finds the members that died, frees their blocks, works out the
    /// seats (probing the kernel when the model cannot tell) and installs
    /// the steering program. `joining`: this member's socket was just
    /// bound (so it sits last). Lock held.
    fn reconcile_locked(&self, sock: &Socket, joining: bool) -> Result<(), HostError> {
        self.stats.reconciles.fetch_add(1, Ordering::Relaxed);
        let t = self.table();
        let now = now_ms();
        let mut gone = Vec::new();
        let mut live = Vec::new();
        for s in 0..MAX_MEMBERS {
            let inc = t.incarnation(s);
            if inc == 0 || s == self.slot {
                continue;
            }
            if shm::byte_held(&self.file, LIVENESS_BASE + s as u64).unwrap_or(true) {
                live.push(s);
            } else {
                gone.push(s);
            }
        }
        for &s in &gone {
            let inc = t.incarnation(s);
            for b in FIRST_BLOCK..=LAST_BLOCK {
                if t.block_owner(b).is_some_and(|o| o.slot == s && o.incarnation == inc & 0xffff_ffff_ffff) {
                    t.free_block(b, now);
                }
            }
        }
        let mut current = t.seats();
        if joining {
            // Not seated yet: the model must not see this member leave.
            current.retain(|x| *x != Some(self.slot));
        }
        // The group holds one socket per live member. Seats the table could
        // not resolve (a probe that went unanswered, a member that died
        // joining) must not outnumber them: probing seats nobody holds
        // leaves every seat unknown, and every later joiner unseated.
        let sockets = live.len() + usize::from(!joining);
        let plan = match seats::after_leaving(&current, &gone) {
            Plan::Probe(_) if live.is_empty() => Plan::Exact(if joining { Vec::new() } else { vec![Some(self.slot)] }),
            Plan::Probe(n) => Plan::Probe(n.min(sockets)),
            exact => exact,
        };
        for &s in &gone {
            // Its inbox (`crate::inbox`): nobody reads it any more.
            let _ = std::fs::remove_file(crate::inbox::inbox_path(&self.path, s));
            t.remove_services(s, None);
            self.region().retire(s, t.incarnation(s));
            self.region().clear(s);
            t.clear_member(s);
            self.stats.reaped.fetch_add(1, Ordering::Relaxed);
        }
        let new = match plan {
            Plan::Exact(mut s) => {
                if joining {
                    s.push(Some(self.slot));
                }
                s
            }
            Plan::Probe(n) => self.probe(sock, &live, n + usize::from(joining))?,
        };
        t.set_seats(&new);
        t.bump();
        self.attach(sock)
    }

    /// Asks the kernel who sits where: a probe to each of `count` seats,
    /// answered by whoever it reaches (lock held).
    fn probe(&self, sock: &Socket, others: &[usize], count: usize) -> Result<Vec<Option<usize>>, HostError> {
        self.stats.probes.fetch_add(1, Ordering::Relaxed);
        let t = self.table();
        // Meanwhile the old program stays; envelopes are steered by seat.
        let generation = t.bump();
        let mut buf = Vec::with_capacity(48);
        for seat in 0..count as u32 {
            envelope::probe(&mut buf, seat, &self.secret, generation);
            sock.send_to(&buf, sock.local_addr()).map_err(|source| HostError::Io {
                what: "sending a probe",
                addr: self.addr,
                source,
            })?;
        }
        let deadline = Instant::now() + PROBE_PATIENCE;
        loop {
            let answers: Vec<(usize, u32)> =
                others.iter().filter_map(|&s| t.probe_answer(s, generation).map(|seat| (s, seat))).collect();
            if answers.len() == others.len() || Instant::now() >= deadline {
                return Ok(seats::from_answers(count, &answers, self.slot));
            }
            std::thread::sleep(Duration::from_micros(200));
        }
    }

    /// Builds the steering program from the table and installs it.
    fn attach(&self, sock: &Socket) -> Result<(), HostError> {
        let t = self.table();
        self.steered_for.store(seats_print(&t.seats()), Ordering::Release);
        let mut blocks = Vec::new();
        for b in FIRST_BLOCK..=LAST_BLOCK {
            if let Some(o) = t.block_owner(b)
                && t.is_incarnation(o.slot, o.incarnation)
                && let Some(seat) = t.seat_of(o.slot)
            {
                blocks.push((b, seat as u32));
            }
        }
        let runs = crate::steer::runs(blocks);
        // Too many runs for one program: the rest are found by forwarding.
        let prog =
            (0..=runs.len()).rev().find_map(|n| crate::steer::program(&runs[..n])).expect("an empty program fits");
        sock.attach_steering(&prog).map_err(|source| HostError::Io {
            what: "attaching the steering program",
            addr: self.addr,
            source,
        })
    }

    /// Leaves the device: installs a program without this member, closes
    /// its socket and frees its blocks (into quarantine). A member that
    /// dies instead is reaped by the next member that reconciles.
    pub fn leave(self, sock: Socket) {
        let guard = self.lock(LOCK_PATIENCE);
        let t = self.table();
        let seats_now = t.seats();
        if guard.is_ok()
            && let Plan::Exact(after) = seats::after_leaving(&seats_now, &[self.slot])
        {
            // Steer nothing more here while the kernel still seats this
            // socket: a program without this member's blocks, everyone
            // else at the seat they hold until the close.
            for b in self.blocks() {
                t.free_block(b, now_ms());
            }
            let _ = self.attach(&sock);
            // What a stale program or the hash steered here is others':
            // on at the seats of now, which the kernel still has.
            self.drain(&sock);
            // The kernel moves the last socket into this one's seat, and
            // then the table says so. A program installed before the close
            // would have steered the moving member's packets (and others'
            // forwards) here in between, closed away with the socket (seen:
            // a REP, a UD datagram lost). Until the others install a new
            // program (they see the seats move, `upkeep`), the mover's
            // packets go nowhere in the old one, are hashed to some member
            // and forwarded.
            drop(sock);
            t.set_seats(&after);
            t.bump();
            t.remove_services(self.slot, None);
            self.region().retire(self.slot, self.incarnation);
            self.region().clear(self.slot);
            t.clear_member(self.slot);
            let others = (0..MAX_MEMBERS)
                .any(|s| t.incarnation(s) != 0 || shm::byte_held(&self.file, LIVENESS_BASE + s as u64).unwrap_or(true));
            if !others {
                // The last one out removes the file; a joiner that opened it
                // meanwhile sees, once it has the lock, that it is gone.
                let _ = std::fs::remove_file(&self.path);
            }
        } else {
            // The seats are not known: the others find out by themselves.
            self.drain(&sock);
            drop(sock);
        }
        drop(guard);
    }
}

/// A fingerprint of the seats (FNV-1a over each seat's slot + 1, 0 for an
/// unknown one): equal seats, equal prints.
fn seats_print(seats: &[Option<usize>]) -> u64 {
    seats.iter().fold(0xcbf2_9ce4_8422_2325, |h, s| (h ^ s.map_or(0, |s| s as u64 + 1)).wrapping_mul(0x0100_0000_01b3))
}

impl Member {
    /// Hands on the other members' packets still queued on a leaving
    /// member's socket (strays a stale program or the kernel's hash steered
    /// here): closing the socket would lose them, and UD cannot get them
    /// back. Its own (its QPs are gone) are dropped and counted.
    fn drain(&self, sock: &Socket) {
        let mut rx = roce_udp::RecvBatch::new(32);
        for _ in 0..64 {
            if !matches!(sock.recv(&mut rx), Ok(n) if n > 0) {
                return;
            }
            for seg in rx.segments() {
                if envelope::is_envelope(seg.data) {
                    // Forwards for others go on; anything for this member ends here.
                    let _ = self.control(sock, seg.src, seg.data);
                    continue;
                }
                match self.route_packet(seg.data) {
                    Some(Route::Mine) | None => {
                        self.stats.no_owner.fetch_add(1, Ordering::Relaxed);
                    }
                    Some(_) => self.pass_on(sock, seg.src, seg.src_port, seg.dst, seg.data, 0),
                }
            }
        }
    }
}

fn lock_file<'a>(file: &'a File, path: &std::path::Path, patience: Duration) -> Result<Locked<'a>, HostError> {
    let deadline = Instant::now() + patience;
    loop {
        match rustix::fs::flock(file, rustix::fs::FlockOperation::NonBlockingLockExclusive) {
            Ok(()) => return Ok(Locked(file)),
            Err(rustix::io::Errno::WOULDBLOCK | rustix::io::Errno::INTR) if Instant::now() < deadline => {
                std::thread::sleep(Duration::from_micros(500));
            }
            Err(rustix::io::Errno::WOULDBLOCK) => {
                return Err(HostError::Locked { path: path.to_path_buf(), patience });
            }
            Err(e) => return Err(HostError::File { path: path.to_path_buf(), source: e.into() }),
        }
    }
}

fn random_secret() -> io::Result<[u8; 16]> {
    use std::io::Read;
    let mut s = [0u8; 16];
    File::open("/dev/urandom")?.read_exact(&mut s)?;
    Ok(s)
}

/// The uid of the socket holding UDP `addr`'s port (on that address or
/// the wildcard), from /proc/net/udp{,6}.
pub fn port_owner(addr: SocketAddr) -> Option<u32> {
    let (file, want) = match addr.ip() {
        IpAddr::V4(a) => ("/proc/net/udp", vec![format!("{:08X}", u32::from_le_bytes(a.octets())), "00000000".into()]),
        IpAddr::V6(_) => ("/proc/net/udp6", Vec::new()),
    };
    let text = std::fs::read_to_string(file).ok()?;
    text.lines().skip(1).find_map(|l| {
        let f: Vec<&str> = l.split_whitespace().collect();
        let (ip, port) = f.get(1)?.split_once(':')?;
        let port = u16::from_str_radix(port, 16).ok()?;
        (port == addr.port() && (want.is_empty() || want.iter().any(|w| w == ip))).then(|| f.get(7)?.parse().ok())?
    })
}
