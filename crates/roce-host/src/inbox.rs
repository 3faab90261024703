//! Inboxes: the packets the other members of a shared device (processes
//! of this user in this network namespace) hand a member through shared
//! memory instead of the kernel's UDP stack (`softroce`'s local link).
//!
//! Each member keeps one file beside the device file, `<device>.in<slot>`,
//! with one lane per possible sender: a single-producer, single-consumer
//! ring of records. A sender writes records past the lane's `head` and then
//! publishes them by storing `head`; the member reads what lies between its
//! `tail` and `head` and frees it by storing `tail`. Nothing written past
//! `head` is ever read, so a sender killed in the middle of a record leaves
//! nothing half-written behind, and the process that takes its slot next
//! goes on from `head`. A member that dies leaves its file until its slot
//! is taken again (the file is made anew) or it is reaped; its senders see
//! the slot's incarnation change, or a lane that stays full, and use the
//! socket: its peers see what a dead host causes.
//!
//! A member's threads about to sleep count themselves in `sleepers`, then
//! look at the lanes; a sender stores `head`, then reads `sleepers` (both
//! SeqCst), so one of the two sees the other, and the sender wakes the
//! member (with an envelope to its seat) once per sleep (`wake sent`).
//!
//! ```text
//!  file    | header (4 KiB) | lane 0 (4 KiB + LANE_BYTES) | lane 1 | ... | lane 255 |
//!  header  byte 0 magic, 8 owner's incarnation, 16 owner wants the ICRC,
//!          64 sleepers, 128 wake sent, 192..224 lanes in use (a bit per sender slot)
//!  lane    byte 0 head, 64 tail (bytes written / read since the lane began),
//!          128 rewound (where the sender went back to the start of an
//!          emptied ring, + 1), 4096.. data (LANE_BYTES, a ring)
//!  record  (8-byte aligned, never across the end of the data)
//!   0         4          6       7    8                    24                   40
//!   +---------+----------+-------+----+--------------------+--------------------+--------+-----+
//!   | len LE  | port LE  | flags | 0  | source (IPv6 or    | destination        | packet | pad |
//!   | u32     | u16      | bit 0:|    |  IPv4-mapped)      |                    | (len)  |     |
//!   |         |          | ICRC  |    |                    |                    |        |     |
//!   +---------+----------+-------+----+--------------------+--------------------+--------+-----+
//!   len u32::MAX: nothing more before the end of the data; go on at its start.
//! ```
//!
//! Memory is bounded: a lane is [`LANE_BYTES`] and is given its pages
//! (`fallocate`, so a full `/dev/shm` is an error at open, never a SIGBUS
//! later) only when a sender first uses it.

use std::fs::File;
use std::io;
use std::net::{IpAddr, Ipv6Addr};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use crate::layout::{MAX_MEMBERS, same_incarnation};
use crate::shm::ByteMap;

/// Bytes of one lane's ring: far above what one sender's QPs keep in
/// flight towards one member in practice (a 64-packet burst of 4 KiB
/// packets is 256 KiB), so only a member that stopped reading fills it.
pub const LANE_BYTES: usize = 4 << 20;
/// The longest packet a lane takes (a 4 KiB MTU's packet and its headers fit).
pub const MAX_PACKET: usize = 16 << 10;
/// A sender that finds its lane empty goes back to the start of the data
/// once past this offset: light traffic (a CM's peers, ping-pongs) keeps
/// reusing the same few pages instead of mapping every page of the ring
/// (a server with a thousand short-lived clients would otherwise grow its
/// resident memory by the ring, lane after lane). The lane's `rewound`
/// word tells the reader where (not a record in the data, which the sender
/// could then not write over before the reader saw it): the whole ring is
/// free again at once.
const REWIND_AFTER: usize = 16 << 10;

const PAGE: usize = 4096;
const LANE_STRIDE: usize = PAGE + LANE_BYTES;
const FILE_BYTES: usize = PAGE + MAX_MEMBERS * LANE_STRIDE;
const MAGIC: u64 = u64::from_be_bytes(*b"sr-inbox");

const MAGIC_AT: usize = 0;
const OWNER_AT: usize = 8;
const ICRC_AT: usize = 16;
const SLEEPERS_AT: usize = 64;
const WAKE_AT: usize = 128;
const ACTIVE_AT: usize = 192;
const HEAD_AT: usize = 0;
const TAIL_AT: usize = 64;
const REWOUND_AT: usize = 128;

const RECORD_HEADER: usize = 40;
const SKIP: u32 = u32::MAX;
const FLAG_ICRC: u8 = 1;

/// How long a sender waits before it tries again to open an inbox it could
/// not open (the member has not made it yet, or `/dev/shm` was full).
const RETRY_OPEN: Duration = Duration::from_millis(100);

fn lane_at(slot: usize) -> usize {
    PAGE + slot * LANE_STRIDE
}

/// `tail` moved past a rewind the sender made there (`rewound`: its
/// position + 1, 0 for none): to the start of the next lap of the ring.
fn past_rewind(tail: u64, rewound: u64) -> u64 {
    if rewound != 0 && tail == rewound - 1 && !tail.is_multiple_of(LANE_BYTES as u64) {
        tail + (LANE_BYTES as u64 - tail % LANE_BYTES as u64)
    } else {
        tail
    }
}

fn record_len(packet: usize) -> usize {
    (RECORD_HEADER + packet + 7) & !7
}

fn v6(a: IpAddr) -> [u8; 16] {
    match a {
        IpAddr::V4(v) => v.to_ipv6_mapped().octets(),
        IpAddr::V6(v) => v.octets(),
    }
}

fn ip(b: [u8; 16]) -> IpAddr {
    let a = Ipv6Addr::from(b);
    a.to_ipv4_mapped().map_or(IpAddr::V6(a), IpAddr::V4)
}

/// The inbox file of the member in `slot` of the device whose file is `device`.
pub fn inbox_path(device: &Path, slot: usize) -> PathBuf {
    let mut name = device.file_name().unwrap_or_default().to_os_string();
    name.push(format!(".in{slot}"));
    device.with_file_name(name)
}

fn private_file(path: &Path, create: bool) -> io::Result<File> {
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create_new(create)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(path)?;
    let meta = file.metadata()?;
    if meta.uid() != rustix::process::getuid().as_raw() || meta.mode() & 0o077 != 0 {
        return Err(io::Error::new(io::ErrorKind::PermissionDenied, "an inbox must be the user's own and private"));
    }
    if !create && meta.len() < FILE_BYTES as u64 {
        return Err(io::Error::new(io::ErrorKind::InvalidData, "an inbox shorter than its layout"));
    }
    Ok(file)
}

/// Where a packet written to a lane (or handed over in a process, by
/// `softroce`'s local link) came from and goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Addressing {
    /// Its IP source.
    pub src: IpAddr,
    /// Its UDP source port.
    pub src_port: u16,
    /// Its IP destination.
    pub dst: IpAddr,
    /// Its trailer holds a computed ICRC (else zeros: nothing to check).
    pub icrc: bool,
}

/// What one [`Inbox::drain`] did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Drained {
    /// Packets handed on.
    pub packets: u64,
    /// Lanes whose positions or records broke the layout: what they held
    /// was dropped (counted once per lane and drain).
    pub refused: u64,
}

/// A member's own inbox: the reading end of every lane.
pub struct Inbox {
    path: PathBuf,
    ino: u64,
    pid: u32,
    map: ByteMap,
    /// Where this member has read each lane to (the shared `tail` is only
    /// written, so a sender cannot move it).
    tails: Box<[AtomicU64]>,
    /// One reader at a time; the bytes of the record being read.
    reading: Mutex<Vec<u8>>,
}

impl std::fmt::Debug for Inbox {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Inbox").field("path", &self.path).finish()
    }
}

impl Inbox {
    /// Makes the inbox of the member in `slot` (replacing a dead
    /// member's), for its `incarnation`. `wants_icrc`: the member records
    /// or impairs packets, so its senders compute their ICRC.
    pub fn create(device: &Path, slot: usize, incarnation: u64, wants_icrc: bool) -> io::Result<Inbox> {
        if slot >= MAX_MEMBERS {
            return Err(io::Error::new(io::ErrorKind::InvalidInput, "no such slot"));
        }
        let path = inbox_path(device, slot);
        // A dead member's: its senders still holding it see the slot's new
        // incarnation and open the new one.
        match std::fs::remove_file(&path) {
            Err(e) if e.kind() != io::ErrorKind::NotFound => return Err(e),
            _ => {}
        }
        let file = private_file(&path, true)?;
        file.set_len(FILE_BYTES as u64)?;
        let map = ByteMap::new(&file, 0, FILE_BYTES)?;
        let word = |at| map.word(at).expect("in the header");
        word(OWNER_AT).store(incarnation, Ordering::Relaxed);
        word(ICRC_AT).store(u64::from(wants_icrc), Ordering::Relaxed);
        word(MAGIC_AT).store(MAGIC, Ordering::Release);
        Ok(Inbox {
            ino: file.metadata()?.ino(),
            path,
            pid: std::process::id(),
            map,
            tails: (0..MAX_MEMBERS).map(|_| AtomicU64::new(0)).collect(),
            reading: Mutex::new(Vec::new()),
        })
    }

    fn word(&self, at: usize) -> &AtomicU64 {
        self.map.word(at).expect("inside the file's layout")
    }

    /// The sender slots whose lanes are in use: the set bits of the
    /// active words, found by their trailing zeros (every pass of the
    /// member's driver asks, mostly of words with no bit set).
    fn active(&self) -> impl Iterator<Item = usize> + '_ {
        (0..MAX_MEMBERS / 64).flat_map(move |w| {
            let mut bits = self.word(ACTIVE_AT + w * 8).load(Ordering::Acquire);
            std::iter::from_fn(move || {
                let b = bits.trailing_zeros() as usize;
                bits &= bits.wrapping_sub(1);
                (b < 64).then_some(w * 64 + b)
            })
        })
    }

    /// Whether a lane holds packets not read yet.
    pub fn pending(&self) -> bool {
        self.active()
            .any(|s| self.word(lane_at(s) + HEAD_AT).load(Ordering::SeqCst) != self.tails[s].load(Ordering::Acquire))
    }

    /// Counts the calling thread among the sleepers until the guard drops;
    /// the caller looks at [`Inbox::pending`] after this and before it sleeps.
    pub fn sleep(&self) -> Asleep<'_> {
        self.word(WAKE_AT).store(0, Ordering::SeqCst);
        self.word(SLEEPERS_AT).fetch_add(1, Ordering::SeqCst);
        Asleep(self)
    }

    /// Reads every lane to its `head`, handing each packet (from the BTH
    /// on) to `f`, oldest first per lane; returns at once if another thread
    /// is reading.
    pub fn drain(&self, mut f: impl FnMut(Addressing, &[u8])) -> Drained {
        let mut d = Drained::default();
        let Ok(mut buf) = self.reading.try_lock() else { return d };
        for s in self.active() {
            let lane = lane_at(s);
            let data = lane + PAGE;
            let head = self.word(lane + HEAD_AT).load(Ordering::SeqCst);
            let rewound = self.word(lane + REWOUND_AT).load(Ordering::Acquire);
            let mut tail = past_rewind(self.tails[s].load(Ordering::Acquire), rewound);
            let mut broken = head < tail || head - tail > LANE_BYTES as u64;
            while !broken && tail < head {
                tail = past_rewind(tail, rewound);
                if tail >= head {
                    broken = tail > head;
                    break;
                }
                let off = (tail % LANE_BYTES as u64) as usize;
                let room = LANE_BYTES - off;
                // Records and skips are 8-byte aligned: 8 bytes always fit.
                let mut h = [0u8; 8];
                if !self.map.read(data + off, &mut h) {
                    broken = true;
                    break;
                }
                let len = u32::from_le_bytes([h[0], h[1], h[2], h[3]]);
                if len == SKIP {
                    broken = tail + room as u64 > head;
                    tail += room as u64;
                    continue;
                }
                let len = len as usize;
                let rec = record_len(len);
                if len > MAX_PACKET || rec > room || tail + rec as u64 > head {
                    broken = true;
                    break;
                }
                buf.resize(RECORD_HEADER + len, 0);
                if !self.map.read(data + off, &mut buf) {
                    broken = true;
                    break;
                }
                let a16 = |at: usize| <[u8; 16]>::try_from(&buf[at..at + 16]).expect("16 bytes");
                let at = Addressing {
                    src: ip(a16(8)),
                    src_port: u16::from_le_bytes([buf[4], buf[5]]),
                    dst: ip(a16(24)),
                    icrc: buf[6] & FLAG_ICRC != 0,
                };
                f(at, &buf[RECORD_HEADER..]);
                d.packets += 1;
                tail += rec as u64;
            }
            if broken {
                d.refused += 1;
                tail = head;
            }
            self.tails[s].store(tail, Ordering::Release);
            self.word(lane + TAIL_AT).store(tail, Ordering::Release);
        }
        d
    }
}

impl Drop for Inbox {
    fn drop(&mut self) {
        // A fork() child's copy is not the member's; a file made anew since
        // (this slot's next member) is not this one's.
        if std::process::id() == self.pid && std::fs::symlink_metadata(&self.path).is_ok_and(|m| m.ino() == self.ino) {
            let _ = std::fs::remove_file(&self.path);
        }
    }
}

/// A thread counted among an inbox's sleepers ([`Inbox::sleep`]).
pub struct Asleep<'a>(&'a Inbox);

impl Drop for Asleep<'_> {
    fn drop(&mut self) {
        self.0.word(SLEEPERS_AT).fetch_sub(1, Ordering::SeqCst);
    }
}

/// A sender's lane in another member's inbox.
pub struct Outbox {
    incarnation: u64,
    header: ByteMap,
    lane: ByteMap,
    /// Bytes written (published or not) and published.
    head: u64,
    published: u64,
    /// Packets written since the last publish.
    unpublished_packets: usize,
    wants_icrc: bool,
}

impl std::fmt::Debug for Outbox {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Outbox").field("incarnation", &self.incarnation).field("head", &self.head).finish()
    }
}

impl Outbox {
    /// Opens the lane of the member in `from` in the inbox of the member
    /// in `to`, whose incarnation must be `incarnation`.
    pub fn open(device: &Path, to: usize, incarnation: u64, from: usize) -> io::Result<Outbox> {
        if to >= MAX_MEMBERS || from >= MAX_MEMBERS {
            return Err(io::Error::new(io::ErrorKind::InvalidInput, "no such slot"));
        }
        let file = private_file(&inbox_path(device, to), false)?;
        let header = ByteMap::new(&file, 0, PAGE)?;
        let word = |at| header.word(at).expect("in the header");
        if word(MAGIC_AT).load(Ordering::Acquire) != MAGIC
            || !same_incarnation(word(OWNER_AT).load(Ordering::Acquire), incarnation)
        {
            return Err(io::Error::new(io::ErrorKind::NotFound, "the inbox is another member's"));
        }
        let at = lane_at(from) as u64;
        // tmpfs gives up with EINTR when a signal comes meanwhile: again.
        loop {
            match rustix::fs::fallocate(&file, rustix::fs::FallocateFlags::empty(), at, LANE_STRIDE as u64) {
                Err(rustix::io::Errno::INTR) => continue,
                r => break r?,
            }
        }
        let lane = ByteMap::new(&file, at, LANE_STRIDE)?;
        // Where this slot's last sender (maybe dead) stopped.
        let head = lane.word(HEAD_AT).expect("in the lane").load(Ordering::SeqCst);
        let wants_icrc = word(ICRC_AT).load(Ordering::Relaxed) != 0;
        word(ACTIVE_AT + from / 64 * 8).fetch_or(1 << (from % 64), Ordering::SeqCst);
        Ok(Outbox { incarnation, header, lane, head, published: head, unpublished_packets: 0, wants_icrc })
    }

    /// Whether the member wants every packet's ICRC computed (it records
    /// or impairs them).
    pub fn wants_icrc(&self) -> bool {
        self.wants_icrc
    }

    /// Bytes written and not yet published.
    pub fn unpublished(&self) -> usize {
        (self.head - self.published) as usize
    }

    /// Packets written and not yet published.
    pub fn unpublished_packets(&self) -> usize {
        self.unpublished_packets
    }

    /// Writes a packet (`parts` one after the other) as a record, not yet
    /// published; false (nothing written) if the lane has no room or the
    /// packet is longer than [`MAX_PACKET`].
    pub fn push<'p, I>(&mut self, a: Addressing, parts: I) -> bool
    where
        I: IntoIterator<Item = &'p [u8]>,
        I::IntoIter: Clone,
    {
        let parts = parts.into_iter();
        let len: usize = parts.clone().map(<[u8]>::len).sum();
        if len > MAX_PACKET {
            return false;
        }
        let word = |at| self.lane.word(at).expect("in the lane");
        let rewound = word(REWOUND_AT).load(Ordering::Acquire);
        let mut tail = past_rewind(word(TAIL_AT).load(Ordering::Acquire), rewound);
        if tail > self.head || self.head - tail > LANE_BYTES as u64 {
            // A reader that broke the layout: use the socket.
            return false;
        }
        let rec = record_len(len);
        let mut off = (self.head % LANE_BYTES as u64) as usize;
        if tail == self.head && off > REWIND_AFTER {
            // Read to the end: back to the start, the whole ring free.
            word(REWOUND_AT).store(self.head + 1, Ordering::Release);
            self.head += (LANE_BYTES - off) as u64;
            tail = self.head;
            off = 0;
        }
        let room = LANE_BYTES - off;
        let wrap = rec > room;
        let need = if wrap { room + rec } else { rec };
        if self.head + need as u64 - tail > LANE_BYTES as u64 {
            return false;
        }
        if wrap {
            self.lane.write(PAGE + off, &SKIP.to_le_bytes());
            self.head += room as u64;
            off = 0;
        }
        let mut h = [0u8; RECORD_HEADER];
        h[..4].copy_from_slice(&(len as u32).to_le_bytes());
        h[4..6].copy_from_slice(&a.src_port.to_le_bytes());
        h[6] = if a.icrc { FLAG_ICRC } else { 0 };
        h[8..24].copy_from_slice(&v6(a.src));
        h[24..40].copy_from_slice(&v6(a.dst));
        self.lane.write(PAGE + off, &h);
        let mut at = PAGE + off + RECORD_HEADER;
        for part in parts {
            self.lane.write(at, part);
            at += part.len();
        }
        self.head += rec as u64;
        self.unpublished_packets += 1;
        true
    }

    /// [`Outbox::publish`], then `wake` the member if it must be woken;
    /// `wake` says whether the wake-up was sent (the member's seat may not
    /// be known right now): if not, the next publish asks again.
    pub fn publish_and_wake(&mut self, wake: impl FnOnce() -> bool) {
        if self.publish() && !wake() {
            self.header.word(WAKE_AT).expect("in the header").store(0, Ordering::SeqCst);
        }
    }

    /// Publishes what was written; true if the member sleeps and no other
    /// sender has woken it since it went to sleep: the caller wakes it.
    pub fn publish(&mut self) -> bool {
        if self.head == self.published {
            return false;
        }
        self.lane.word(HEAD_AT).expect("in the lane").store(self.head, Ordering::SeqCst);
        self.published = self.head;
        self.unpublished_packets = 0;
        let word = |at| self.header.word(at).expect("in the header");
        word(SLEEPERS_AT).load(Ordering::SeqCst) > 0 && word(WAKE_AT).swap(1, Ordering::SeqCst) == 0
    }
}

/// A sender's lanes towards the other members of its device, opened on
/// first use and again when a member's slot changes hands.
#[derive(Debug)]
pub struct Outboxes {
    device: PathBuf,
    me: usize,
    open: Vec<(usize, Outbox)>,
    /// Slots whose inbox could not be opened, for that incarnation, until when.
    failed: Vec<(usize, u64, Instant)>,
}

impl Outboxes {
    /// The lanes of the member in slot `me` of the device whose file is `device`.
    pub fn new(device: &Path, me: usize) -> Outboxes {
        Outboxes { device: device.to_path_buf(), me, open: Vec::new(), failed: Vec::new() }
    }

    /// The lane to the member in `slot`, whose incarnation is
    /// `incarnation`; `None` while its inbox cannot be opened. Before it
    /// opens one, it lets go of the lanes of members `live` says are gone
    /// (their pages stay allocated while a mapping holds them).
    pub fn to(
        &mut self,
        slot: usize,
        incarnation: u64,
        now: Instant,
        live: impl Fn(usize, u64) -> bool,
    ) -> Option<&mut Outbox> {
        if let Some(i) = self.open.iter().position(|(s, _)| *s == slot) {
            if same_incarnation(self.open[i].1.incarnation, incarnation) {
                return Some(&mut self.open[i].1);
            }
            self.open.swap_remove(i);
        }
        self.open.retain(|(s, o)| live(*s, o.incarnation));
        if self.failed.iter().any(|&(s, inc, until)| s == slot && inc == incarnation && now < until) {
            return None;
        }
        self.failed.retain(|&(s, _, _)| s != slot);
        match Outbox::open(&self.device, slot, incarnation, self.me) {
            Ok(o) => {
                self.open.push((slot, o));
                self.open.last_mut().map(|(_, o)| o)
            }
            Err(_) => {
                self.failed.push((slot, incarnation, now + RETRY_OPEN));
                None
            }
        }
    }

    /// Publishes every lane written to; calls `wake(slot, incarnation)`
    /// for each member that must be woken (see [`Outbox::publish_and_wake`]).
    pub fn publish(&mut self, mut wake: impl FnMut(usize, u64) -> bool) {
        for (s, o) in &mut self.open {
            let inc = o.incarnation;
            o.publish_and_wake(|| wake(*s, inc));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn device() -> (tempdir::Dir, PathBuf) {
        let d = tempdir::Dir::new();
        let p = d.0.join("softroce-test-device");
        (d, p)
    }

    mod tempdir {
        pub(super) struct Dir(pub(super) std::path::PathBuf);
        impl Dir {
            pub(super) fn new() -> Dir {
                use std::sync::atomic::{AtomicU32, Ordering};
                static N: AtomicU32 = AtomicU32::new(0);
                let p = std::env::temp_dir().join(format!(
                    "roce-host-inbox-{}-{}",
                    std::process::id(),
                    N.fetch_add(1, Ordering::Relaxed)
                ));
                std::fs::create_dir_all(&p).unwrap();
                Dir(p)
            }
        }
        impl Drop for Dir {
            fn drop(&mut self) {
                let _ = std::fs::remove_dir_all(&self.0);
            }
        }
    }

    fn all(inbox: &Inbox) -> (Vec<(Vec<u8>, u16, bool)>, Drained) {
        let mut got = Vec::new();
        let d = inbox.drain(|a, p| got.push((p.to_vec(), a.src_port, a.icrc)));
        (got, d)
    }

    const A: IpAddr = IpAddr::V4(std::net::Ipv4Addr::new(127, 0, 0, 2));

    fn put(out: &mut Outbox, a: Addressing, parts: &[&[u8]]) -> bool {
        out.push(a, parts.iter().copied())
    }

    fn at(src_port: u16, icrc: bool) -> Addressing {
        Addressing { src: A, src_port, dst: A, icrc }
    }

    /// Packets come out whole, in order, with their addressing, only once
    /// published; a reader sees each once.
    #[test]
    fn published_packets_come_out_whole_and_in_order() {
        let (_d, dev) = device();
        let inbox = Inbox::create(&dev, 3, 77, false).unwrap();
        let mut out = Outbox::open(&dev, 3, 77, 5).unwrap();
        assert!(put(&mut out, at(49152, false), &[b"head", b"payload"]));
        assert!(put(&mut out, at(49153, true), &[b"second"]));
        assert!(!inbox.pending(), "written, not published");
        assert_eq!(all(&inbox).0, vec![]);
        assert!(!out.publish(), "nobody sleeps");
        assert!(inbox.pending());
        let (got, d) = all(&inbox);
        assert_eq!(got, vec![(b"headpayload".to_vec(), 49152, false), (b"second".to_vec(), 49153, true)]);
        assert_eq!(d, Drained { packets: 2, refused: 0 });
        assert!(!inbox.pending());
        assert_eq!(all(&inbox).0, vec![]);
    }

    /// A lane counts the packets written since its last publish (what a
    /// sender publishes by, besides bytes), and a publish starts it again.
    #[test]
    fn a_lane_counts_its_unpublished_packets() {
        let (_d, dev) = device();
        let inbox = Inbox::create(&dev, 3, 77, false).unwrap();
        let mut out = Outbox::open(&dev, 3, 77, 5).unwrap();
        assert_eq!((out.unpublished_packets(), out.unpublished()), (0, 0));
        for n in 1..=3 {
            assert!(put(&mut out, at(49152, false), &[b"pkt"]));
            assert_eq!(out.unpublished_packets(), n);
        }
        assert!(out.unpublished() >= 3 * 3);
        out.publish();
        assert_eq!((out.unpublished_packets(), out.unpublished()), (0, 0));
        assert_eq!(all(&inbox).1.packets, 3);
        let big = vec![0u8; MAX_PACKET + 1];
        assert!(!put(&mut out, at(49152, false), &[&big]), "too long: not written");
        assert_eq!(out.unpublished_packets(), 0, "nor counted");
    }

    /// Every active lane is read, whichever word of the active bitmap its
    /// sender's slot falls in (the first and last bits of a word, the last
    /// slot), in slot order; the lanes of senders that wrote nothing are not.
    #[test]
    fn the_lanes_of_senders_in_every_word_of_the_bitmap_are_read() {
        let (_d, dev) = device();
        let inbox = Inbox::create(&dev, 3, 77, false).unwrap();
        let senders = [MAX_MEMBERS - 1, 64, 0, 63, 130];
        let mut outs: Vec<Outbox> = senders.iter().map(|&s| Outbox::open(&dev, 3, 77, s).unwrap()).collect();
        for (out, &s) in outs.iter_mut().zip(&senders) {
            assert!(put(out, at(49152 + s as u16, false), &[b"from ", &[s as u8]]));
            out.publish();
        }
        let ports: Vec<u16> = all(&inbox).0.iter().map(|(_, port, _)| *port).collect();
        let mut want: Vec<u16> = senders.iter().map(|&s| 49152 + s as u16).collect();
        want.sort_unstable();
        assert_eq!(ports, want);
        assert_eq!(inbox.active().count(), senders.len());
    }

    /// A lane holds LANE_BYTES: a sender that fills it gets false (and uses
    /// the socket) until the member has read; records wrap at the end.
    #[test]
    fn a_full_lane_refuses_until_read_and_records_wrap() {
        let (_d, dev) = device();
        let inbox = Inbox::create(&dev, 0, 1, false).unwrap();
        let mut out = Outbox::open(&dev, 0, 1, 1).unwrap();
        let p = vec![9u8; 4000];
        let per = record_len(p.len());
        let fit = LANE_BYTES / per;
        for i in 0..fit {
            assert!(put(&mut out, at(1, false), &[&p]), "packet {i}");
        }
        assert!(!put(&mut out, at(1, false), &[&p]), "full");
        out.publish();
        assert_eq!(all(&inbox).1.packets, fit as u64);
        // Past the end: a skip record, then the data's start again.
        for round in 0..3 {
            for i in 0..fit / 2 + 1 {
                let mut q = p.clone();
                q[0] = (i % 251) as u8;
                assert!(put(&mut out, at(1, false), &[&q]), "round {round} packet {i}");
            }
            out.publish();
            let (got, d) = all(&inbox);
            assert_eq!(d, Drained { packets: (fit / 2 + 1) as u64, refused: 0 });
            assert!(got.iter().enumerate().all(|(i, (b, _, _))| b[0] == (i % 251) as u8 && b.len() == 4000));
        }
    }

    /// Light traffic keeps to the first pages: a sender that finds its lane
    /// read to the end goes back to the start once past REWIND_AFTER.
    #[test]
    fn an_emptied_lane_is_written_from_its_start_again() {
        let (_d, dev) = device();
        let inbox = Inbox::create(&dev, 0, 1, false).unwrap();
        let mut out = Outbox::open(&dev, 0, 1, 1).unwrap();
        let p = vec![5u8; 1000];
        for _ in 0..1000 {
            assert!(put(&mut out, at(1, false), &[&p]));
            out.publish();
            assert_eq!(all(&inbox).1.packets, 1);
            let off = (out.head % LANE_BYTES as u64) as usize;
            assert!(off <= REWIND_AFTER + 2 * record_len(p.len()), "offset {off}");
        }
        assert!(out.head > LANE_BYTES as u64 / 8, "the positions went on: {}", out.head);
        // Rewound with the lane read: the whole ring is free at once, and
        // a burst of nearly a lane goes through whole and in order.
        while (out.head % LANE_BYTES as u64) as usize <= REWIND_AFTER {
            assert!(put(&mut out, at(1, false), &[&p]));
            out.publish();
            all(&inbox);
        }
        let fit = LANE_BYTES / record_len(p.len()) - 1;
        for i in 0..fit {
            let mut q = p.clone();
            q[0] = (i % 251) as u8;
            assert!(put(&mut out, at(1, false), &[&q]), "packet {i} of a burst after a rewind");
        }
        out.publish();
        let (got, d) = all(&inbox);
        assert_eq!(d, Drained { packets: fit as u64, refused: 0 });
        assert!(got.iter().enumerate().all(|(i, (b, _, _))| b[0] == (i % 251) as u8));
    }

    /// The member sleeping: the first publish asks for a wake-up, the next
    /// ones do not (until it sleeps again); a publish with nothing new never.
    #[test]
    fn a_sleeping_member_is_woken_once_per_sleep() {
        let (_d, dev) = device();
        let inbox = Inbox::create(&dev, 1, 9, true).unwrap();
        let mut out = Outbox::open(&dev, 1, 9, 2).unwrap();
        assert!(out.wants_icrc());
        let asleep = inbox.sleep();
        assert!(!out.publish(), "nothing to publish");
        put(&mut out, at(1, false), &[b"x"]);
        assert!(out.publish(), "asleep: wake it");
        put(&mut out, at(1, false), &[b"y"]);
        assert!(!out.publish(), "already woken");
        drop(asleep);
        all(&inbox);
        let _again = inbox.sleep();
        put(&mut out, at(1, false), &[b"z"]);
        assert!(out.publish(), "a new sleep");
    }

    /// A sender killed mid-record left bytes past `head`: unseen. The next
    /// sender of its slot goes on from `head`, and a lane whose positions
    /// break the layout is dropped and counted, not trusted.
    #[test]
    fn what_a_dead_sender_left_unpublished_is_never_read() {
        let (_d, dev) = device();
        let inbox = Inbox::create(&dev, 0, 4, false).unwrap();
        let mut dead = Outbox::open(&dev, 0, 4, 7).unwrap();
        put(&mut dead, at(1, false), &[b"sent"]);
        dead.publish();
        put(&mut dead, at(1, false), &[b"half-written"]);
        drop(dead);
        let mut next = Outbox::open(&dev, 0, 4, 7).unwrap();
        put(&mut next, at(2, false), &[b"next"]);
        next.publish();
        let (got, _) = all(&inbox);
        assert_eq!(got.iter().map(|g| g.0.clone()).collect::<Vec<_>>(), vec![b"sent".to_vec(), b"next".to_vec()]);
        // A head far past the tail: refused, counted, skipped.
        next.lane.word(HEAD_AT).unwrap().store(next.head + 2 * LANE_BYTES as u64, Ordering::SeqCst);
        let (got, d) = all(&inbox);
        assert_eq!((got.len(), d.refused), (0, 1));
        // A record whose length runs past the head: the same.
        next.head += 2 * LANE_BYTES as u64;
        next.published = next.head;
        let at = PAGE + (next.head % LANE_BYTES as u64) as usize;
        next.lane.write(at, &100u32.to_le_bytes());
        next.lane.word(HEAD_AT).unwrap().store(next.head + 48, Ordering::SeqCst);
        let (got, d) = all(&inbox);
        assert_eq!((got.len(), d.refused), (0, 1));
    }

    /// A sender only opens the inbox of the incarnation it routes to: a
    /// dead member's file, or one made by the slot's next member, is not it.
    #[test]
    fn a_sender_opens_only_the_incarnation_it_routes_to() {
        let (_d, dev) = device();
        let first = Inbox::create(&dev, 2, 10, false).unwrap();
        assert!(Outbox::open(&dev, 2, 11, 0).is_err(), "another incarnation");
        drop(first);
        assert!(Outbox::open(&dev, 2, 10, 0).is_err(), "removed with its member");
        let _second = Inbox::create(&dev, 2, 11, false).unwrap();
        let mut boxes = Outboxes::new(&dev, 0);
        let now = Instant::now();
        let live = |_, _| true;
        assert!(boxes.to(2, 11, now, live).is_some());
        assert!(boxes.to(3, 1, now, live).is_none(), "no inbox");
        assert!(boxes.to(2, 12, now, live).is_none(), "the slot changed hands");
        // A member gone: its lane is let go at the next open.
        assert!(boxes.to(2, 11, now, live).is_some());
        assert!(boxes.to(3, 1, now, |s, _| s != 2).is_none());
        assert!(boxes.open.is_empty(), "the lane of a member gone is unmapped");
    }
}
