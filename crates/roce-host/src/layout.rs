//! The device file: what the members of one shared device know of each
//! other. One file per (user, network namespace, address, port), mapped by
//! every member; changed only under the file's `flock`, read without it.
//!
//! ```text
//!  word                                                  (64-bit words)
//!     0  +---------------------------------------------------------+
//!        | magic "softroce" (0x736f6674726f6365)                    |
//!     1  | layout version                                           |
//!   2-3  | secret: 16 random bytes every envelope carries           |
//!     4  | generation: +1 at every change of seats or blocks        |
//!     5  | seat count: sockets in the kernel's SO_REUSEPORT group   |
//!     6  | next block to try (allocation is cyclic)                 |
//!     7  | next incarnation (a member's number, never reused)       |
//!     8  +---------------------------------------------------------+
//!        | seats[256]: slot + 1 of the member whose socket is at    |
//!        |   that index of the group (0: not known)                 |
//!   264  +---------------------------------------------------------+
//!        | members[256] x 8 words:                                  |
//!        |   0 incarnation (0: free)   1 pid   2 seat (or NO_SEAT)  |
//!        |   3 probe generation answered   4 seat that probe named  |
//!        |   5 1 when the member has a CM on QP 1                   |
//!  2312  +---------------------------------------------------------+
//!        | blocks[4096] x 2 words: QPNs block<<12 .. +4095          |
//!        |   0 owner: incarnation << 16 | slot + 1 (0: free)        |
//!        |   1 when it was freed (CLOCK_MONOTONIC ms; 0: never)     |
//! 10504  +---------------------------------------------------------+
//!        | services[256] x 2 words: the CM's listeners              |
//!        |   0 service ID   1 owner as for blocks (0: free entry)   |
//! 11016  +---------------------------------------------------------+
//!        | what each member holds, for `softroce rdma resource`    |
//!        |   (`crate::resources`: a region with its own version)   |
//! ```
//!
//! A member is alive while it holds the OFD lock on byte
//! [`LIVENESS_BASE`] + slot of the file: the kernel drops it when the
//! process dies, whatever state the words were left in.

use std::net::SocketAddr;
use std::os::unix::fs::MetadataExt;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};

/// The device file of `addr` for this user and network namespace. The
/// namespace is named by its cookie where the kernel has one: a deleted
/// namespace's inode number is given to the next one made, which would
/// open the dead namespace's file of the same address (two tests' hosts
/// at 10.234.0.1 one after the other shared one, and their packets went
/// to each other's QPNs).
pub fn device_file(addr: SocketAddr) -> PathBuf {
    let uid = rustix::process::getuid().as_raw();
    let netns = match roce_udp::netns_cookie() {
        Some(c) => format!("c{c}"),
        None => std::fs::metadata("/proc/self/ns/net").map(|m| m.ino()).unwrap_or(0).to_string(),
    };
    let shm = PathBuf::from("/dev/shm");
    let dir = if shm.is_dir() { shm } else { std::env::temp_dir() };
    let a = addr.ip().to_string().replace(':', "_");
    dir.join(format!("softroce-u{uid}-n{netns}-{a}-{}", addr.port()))
}

/// `b"softroce"` as a big-endian word.
pub const MAGIC: u64 = u64::from_be_bytes(*b"softroce");
/// Bumped whenever the meaning of a word changes.
pub const VERSION: u64 = 2;
/// Most members (open contexts) of one device at once.
pub const MAX_MEMBERS: usize = 256;
/// QPNs per block: a member owns whole blocks, the steering program
/// matches `dest QPN >> BLOCK_BITS`.
pub const BLOCK_BITS: u32 = 12;
/// Blocks in the 24-bit QPN space.
pub const BLOCKS: usize = 1 << (24 - BLOCK_BITS);
/// Block 0 holds QP0 and QP1 (host-wide, the CM's), the last block the
/// multicast QPN 0xFFFFFF: neither is ever given to a member.
pub const FIRST_BLOCK: u32 = 1;
/// The last block a member may own.
pub const LAST_BLOCK: u32 = BLOCKS as u32 - 2;
/// A member's seat is not known (see `Member::reconcile`).
pub const NO_SEAT: u64 = u64::MAX;
/// Byte offset of the liveness locks (far past the end of the file: a
/// lock needs no bytes behind it).
pub const LIVENESS_BASE: u64 = 1 << 40;

const SEATS: usize = 8;
const MEMBERS: usize = SEATS + MAX_MEMBERS;
const MEMBER_WORDS: usize = 8;
const BLOCK_TABLE: usize = MEMBERS + MAX_MEMBERS * MEMBER_WORDS;
const SERVICE_TABLE: usize = BLOCK_TABLE + BLOCKS * 2;
/// Service IDs the members of one device listen on, at most.
pub const MAX_SERVICES: usize = 256;
/// Words in the file.
pub const WORDS: usize = SERVICE_TABLE + MAX_SERVICES * 2;

/// The word of `BLOCK_TABLE` naming block `b`'s owner (see [`Table::block_owner`]).
pub fn block_word(b: usize) -> usize {
    BLOCK_TABLE + (b % BLOCKS) * 2
}

/// The first word of member `slot`: its incarnation (see [`Table::incarnation`]).
pub fn member_word(slot: usize) -> usize {
    MEMBERS + (slot % MAX_MEMBERS) * MEMBER_WORDS
}

/// Typed access to the mapped words. Every value read may have been
/// written by a buggy or dead process: readers validate before use.
#[derive(Clone, Copy)]
pub struct Table<'a> {
    w: &'a [AtomicU64],
}

/// Who owns a block.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Owner {
    /// The member's slot.
    pub slot: usize,
    /// The member's incarnation (low 48 bits).
    pub incarnation: u64,
}

impl Owner {
    /// The owner a block word names (`slot + 1` in its low 16 bits, the
    /// incarnation above), if any.
    pub fn from_word(o: u64) -> Option<Owner> {
        let slot = (o & 0xffff).checked_sub(1)? as usize;
        (slot < MAX_MEMBERS).then_some(Owner { slot, incarnation: o >> 16 })
    }
}

/// Whether a member word's incarnation `current` is `inc` (48 bits; 0 is
/// no incarnation).
pub fn same_incarnation(current: u64, inc: u64) -> bool {
    inc != 0 && current & 0xffff_ffff_ffff == inc & 0xffff_ffff_ffff
}

/// The QPN block of destination QP `qpn`.
pub fn block_of(qpn: u32) -> u32 {
    (qpn & 0x00ff_ffff) >> BLOCK_BITS
}

impl<'a> Table<'a> {
    /// A view of `w`, which has [`WORDS`] words.
    pub fn new(w: &'a [AtomicU64]) -> Table<'a> {
        assert_eq!(w.len(), WORDS, "device file mapping of the wrong size");
        Table { w }
    }

    fn get(&self, i: usize) -> u64 {
        self.w[i].load(Ordering::Acquire)
    }

    fn set(&self, i: usize, v: u64) {
        self.w[i].store(v, Ordering::Release);
    }

    /// Whether the header says this layout.
    pub fn is_valid(&self) -> bool {
        self.get(0) == MAGIC && self.get(1) == VERSION
    }

    /// Clears everything and writes a new header with `secret`.
    pub fn init(&self, secret: [u8; 16]) {
        for w in self.w {
            w.store(0, Ordering::Relaxed);
        }
        self.set(2, u64::from_le_bytes(secret[..8].try_into().expect("8 bytes")));
        self.set(3, u64::from_le_bytes(secret[8..].try_into().expect("8 bytes")));
        self.set(6, u64::from(FIRST_BLOCK));
        self.set(7, 1);
        self.set(1, VERSION);
        self.set(0, MAGIC);
    }

    /// The secret envelopes carry.
    pub fn secret(&self) -> [u8; 16] {
        let mut s = [0; 16];
        s[..8].copy_from_slice(&self.get(2).to_le_bytes());
        s[8..].copy_from_slice(&self.get(3).to_le_bytes());
        s
    }

    /// The generation (bumped by [`Table::bump`]).
    pub fn generation(&self) -> u64 {
        self.get(4)
    }

    /// Bumps the generation, returning the new one.
    pub fn bump(&self) -> u64 {
        self.w[4].fetch_add(1, Ordering::AcqRel) + 1
    }

    /// The seats, in group order (`None`: not known).
    pub fn seats(&self) -> Vec<Option<usize>> {
        let n = (self.get(5) as usize).min(MAX_MEMBERS);
        (0..n).map(|i| self.get(SEATS + i).checked_sub(1).map(|s| s as usize).filter(|&s| s < MAX_MEMBERS)).collect()
    }

    /// Writes the seats, and each seated member's seat word.
    pub fn set_seats(&self, seats: &[Option<usize>]) {
        let n = seats.len().min(MAX_MEMBERS);
        for slot in 0..MAX_MEMBERS {
            if self.incarnation(slot) != 0 {
                let seat = seats[..n].iter().position(|&s| s == Some(slot));
                self.set(self.member(slot) + 2, seat.map_or(NO_SEAT, |i| i as u64));
            }
        }
        for (i, s) in seats[..n].iter().enumerate() {
            self.set(SEATS + i, s.map_or(0, |s| s as u64 + 1));
        }
        self.set(5, n as u64);
    }

    fn member(&self, slot: usize) -> usize {
        assert!(slot < MAX_MEMBERS);
        MEMBERS + slot * MEMBER_WORDS
    }

    /// The incarnation of the member in `slot` (0: free).
    pub fn incarnation(&self, slot: usize) -> u64 {
        self.get(self.member(slot))
    }

    /// Takes a fresh incarnation number.
    pub fn next_incarnation(&self) -> u64 {
        let i = self.get(7).max(1) & 0xffff_ffff_ffff;
        self.set(7, i + 1);
        i
    }

    /// Claims `slot` for a member.
    pub fn set_member(&self, slot: usize, incarnation: u64, pid: u32) {
        let m = self.member(slot);
        self.set(m + 1, u64::from(pid));
        self.set(m + 2, NO_SEAT);
        self.set(m + 3, 0);
        self.set(m + 4, 0);
        self.set(m, incarnation);
    }

    /// Frees `slot`.
    pub fn clear_member(&self, slot: usize) {
        let m = self.member(slot);
        for k in 0..MEMBER_WORDS {
            self.set(m + k, 0);
        }
    }

    /// The pid a member recorded (for messages only).
    pub fn pid(&self, slot: usize) -> u32 {
        self.get(self.member(slot) + 1) as u32
    }

    /// The member's seat, if known and in range.
    pub fn seat_of(&self, slot: usize) -> Option<usize> {
        let s = self.get(self.member(slot) + 2);
        (s < self.get(5).min(MAX_MEMBERS as u64)).then_some(s as usize)
    }

    /// Records that the member in `slot` received the probe of `generation`
    /// steered to `seat` (written by the member itself, without the lock).
    pub fn answer_probe(&self, slot: usize, generation: u64, seat: u32) {
        let m = self.member(slot);
        self.set(m + 4, u64::from(seat));
        self.set(m + 3, generation);
    }

    /// The seat the member's answer to the probe of `generation` named.
    pub fn probe_answer(&self, slot: usize, generation: u64) -> Option<u32> {
        let m = self.member(slot);
        (self.get(m + 3) == generation).then(|| self.get(m + 4) as u32)
    }

    fn block(&self, b: u32) -> usize {
        block_word(b as usize)
    }

    /// The owner of block `b`, if any.
    pub fn block_owner(&self, b: u32) -> Option<Owner> {
        Owner::from_word(self.get(self.block(b)))
    }

    /// Gives block `b` to the member in `slot`.
    pub fn set_block_owner(&self, b: u32, slot: usize, incarnation: u64) {
        self.set(self.block(b), (incarnation << 16) | (slot as u64 + 1));
    }

    /// Frees block `b` at `now_ms`.
    pub fn free_block(&self, b: u32, now_ms: u64) {
        self.set(self.block(b), 0);
        self.set(self.block(b) + 1, now_ms.max(1));
    }

    /// When block `b` was last freed (0: never).
    pub fn freed_at(&self, b: u32) -> u64 {
        self.get(self.block(b) + 1)
    }

    /// The free block to claim at `now_ms`, searching from the cursor: the
    /// first out of `quarantine_ms` (never used, or freed that long ago).
    /// When every free block is still in quarantine, the one freed longest
    /// ago, with `true`: a host that starts thousands of processes a minute
    /// reuses QPNs sooner rather than failing, as rxe's cyclic QP index
    /// does (a stale packet meets a QP with a fresh random PSN). `None`:
    /// every block is owned.
    pub fn pick_block(&self, now_ms: u64, quarantine_ms: u64) -> Option<(u32, bool)> {
        let span = LAST_BLOCK - FIRST_BLOCK + 1;
        let start = self.next_block();
        let mut oldest: Option<(u32, u64)> = None;
        for b in (0..span).map(|k| FIRST_BLOCK + (start - FIRST_BLOCK + k) % span) {
            if self.block_owner(b).is_some() {
                continue;
            }
            let freed = self.freed_at(b);
            if freed == 0 || now_ms.saturating_sub(freed) >= quarantine_ms {
                return Some((b, false));
            }
            if oldest.is_none_or(|(_, f)| freed < f) {
                oldest = Some((b, freed));
            }
        }
        oldest.map(|(b, _)| (b, true))
    }

    /// The block allocator's cursor.
    pub fn next_block(&self) -> u32 {
        (self.get(6) as u32).clamp(FIRST_BLOCK, LAST_BLOCK)
    }

    /// Moves the block allocator's cursor.
    pub fn set_next_block(&self, b: u32) {
        self.set(6, u64::from(b));
    }

    /// Marks whether the member in `slot` has a CM on its QP 1.
    pub fn set_has_cm(&self, slot: usize, on: bool) {
        self.set(self.member(slot) + 5, u64::from(on));
    }

    /// Whether the member in `slot` has a CM on its QP 1.
    pub fn has_cm(&self, slot: usize) -> bool {
        self.get(self.member(slot) + 5) == 1
    }

    fn service(&self, i: usize) -> usize {
        SERVICE_TABLE + (i % MAX_SERVICES) * 2
    }

    fn service_entry(&self, i: usize) -> Option<(u64, Owner)> {
        let o = self.get(self.service(i) + 1);
        let slot = (o & 0xffff).checked_sub(1)? as usize;
        (slot < MAX_MEMBERS).then(|| (self.get(self.service(i)), Owner { slot, incarnation: o >> 16 }))
    }

    /// Who listens on `service_id`, as recorded (the caller checks liveness).
    pub fn service_owner(&self, service_id: u64) -> Option<Owner> {
        (0..MAX_SERVICES).filter_map(|i| self.service_entry(i)).find(|(sid, _)| *sid == service_id).map(|(_, o)| o)
    }

    /// Records that the member in `slot` listens on `service_id`; `false`
    /// when every entry is taken.
    pub fn add_service(&self, service_id: u64, slot: usize, incarnation: u64) -> bool {
        let Some(i) = (0..MAX_SERVICES).find(|&i| self.service_entry(i).is_none()) else { return false };
        self.set(self.service(i), service_id);
        self.set(self.service(i) + 1, (incarnation << 16) | (slot as u64 + 1));
        true
    }

    /// Removes the entries of the member in `slot`: all of them, or only
    /// `service_id`'s.
    pub fn remove_services(&self, slot: usize, service_id: Option<u64>) {
        for i in 0..MAX_SERVICES {
            if let Some((sid, o)) = self.service_entry(i)
                && o.slot == slot
                && service_id.is_none_or(|s| s == sid)
            {
                self.set(self.service(i) + 1, 0);
                self.set(self.service(i), 0);
            }
        }
    }

    /// Whether a member incarnation's low 48 bits are `inc`.
    pub fn is_incarnation(&self, slot: usize, inc: u64) -> bool {
        same_incarnation(self.incarnation(slot), inc)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words() -> Vec<AtomicU64> {
        (0..WORDS).map(|_| AtomicU64::new(0)).collect()
    }

    #[test]
    fn layout_is_as_drawn() {
        assert_eq!(MEMBERS, 264);
        assert_eq!(BLOCK_TABLE, 2312);
        assert_eq!(SERVICE_TABLE, 10504);
        assert_eq!(WORDS, 11016);
    }

    #[test]
    fn seats_blocks_and_members_round_trip() {
        let w = words();
        let t = Table::new(&w);
        assert!(!t.is_valid());
        t.init([7; 16]);
        assert!(t.is_valid());
        assert_eq!(t.secret(), [7; 16]);
        let a = t.next_incarnation();
        let b = t.next_incarnation();
        assert_ne!(a, b);
        t.set_member(3, a, 100);
        t.set_member(9, b, 200);
        t.set_seats(&[Some(9), None, Some(3)]);
        assert_eq!(t.seats(), [Some(9), None, Some(3)]);
        assert_eq!((t.seat_of(9), t.seat_of(3)), (Some(0), Some(2)));
        t.set_seats(&[Some(3)]);
        assert_eq!((t.seat_of(9), t.seat_of(3)), (None, Some(0)));
        t.set_block_owner(5, 3, a);
        assert_eq!(t.block_owner(5), Some(Owner { slot: 3, incarnation: a }));
        t.free_block(5, 1234);
        assert_eq!((t.block_owner(5), t.freed_at(5)), (None, 1234));
        t.answer_probe(9, 42, 1);
        assert_eq!((t.probe_answer(9, 42), t.probe_answer(9, 41)), (Some(1), None));
        t.clear_member(9);
        assert_eq!(t.incarnation(9), 0);
        t.set_has_cm(3, true);
        assert!(t.has_cm(3) && !t.has_cm(9));
        assert!(t.add_service(0x1061c06, 3, a) && t.add_service(0x1064853, 9, b));
        assert_eq!(t.service_owner(0x1061c06), Some(Owner { slot: 3, incarnation: a }));
        t.remove_services(3, None);
        assert_eq!((t.service_owner(0x1061c06), t.service_owner(0x1064853).map(|o| o.slot)), (None, Some(9)));
        for k in 0..MAX_SERVICES as u64 - 1 {
            assert!(t.add_service(k, 1, a), "entry {k}");
        }
        assert!(!t.add_service(u64::MAX, 1, a), "the table is full");
    }

    #[test]
    fn a_block_out_of_quarantine_goes_first_then_the_one_freed_longest_ago() {
        let w = words();
        let t = Table::new(&w);
        t.init([1; 16]);
        let a = t.next_incarnation();
        for b in FIRST_BLOCK..=LAST_BLOCK {
            t.set_block_owner(b, 0, a);
        }
        assert_eq!(t.pick_block(100_000, 60_000), None, "every block owned");
        // Three blocks freed at different times, the cursor past them all.
        t.free_block(9, 50_000);
        t.free_block(7, 30_000);
        t.free_block(8, 45_000);
        t.set_next_block(20);
        assert_eq!(t.pick_block(80_000, 60_000), Some((7, true)), "all in quarantine: the oldest");
        assert_eq!(t.pick_block(91_000, 60_000), Some((7, false)), "7 is out of quarantine");
        assert_eq!(t.pick_block(200_000, 60_000), Some((7, false)), "the first from the cursor, wrapping");
        t.set_block_owner(7, 0, a);
        assert_eq!(t.pick_block(200_000, 60_000), Some((8, false)));
        assert_eq!(t.pick_block(80_000, 60_000), Some((8, true)));
    }

    #[test]
    fn garbage_reads_as_nothing_out_of_range() {
        let w = words();
        let t = Table::new(&w);
        for x in &w {
            x.store(u64::MAX, Ordering::Relaxed);
        }
        assert!(t.seats().iter().all(|s| s.is_none()));
        assert_eq!(t.seats().len(), MAX_MEMBERS);
        assert_eq!(t.block_owner(7), None);
        assert_eq!(t.seat_of(0), None);
        assert_eq!(t.service_owner(u64::MAX), None);
        assert!((FIRST_BLOCK..=LAST_BLOCK).contains(&t.next_block()));
    }
}
