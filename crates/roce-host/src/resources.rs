//! What each member holds (PDs, CQs, QPs, MRs, ...), published in the
//! device file so that any process of the user can count a shared
//! device's objects across processes, as the kernel's resource tracker
//! answers iproute2's `rdma resource show` for kernel rxe.
//!
//! The region follows the layout-2 table in the same file and has a
//! version of its own, so members of a softroce without it still share
//! the device (they show as unpublished):
//!
//! ```text
//!  word (from layout::WORDS)
//!     0  magic "srrsrc\0\x01"                                    
//!     1  region version                                          
//!     2  the table's secret word 0 when the region was cleared:
//!        entries of an earlier life of the file do not count     
//!     3  reserved
//!  4..68 counters of the members that left or died, summed
//!    68  slots[256] x 172 words, one per member slot:
//!          0 incarnation of the member that wrote it (0: none)
//!          1 sequence: odd while its member writes
//!          2..=9 counts: pd cq qp cm_id mr srq ah mw
//!          10 QPs listed (at most 32)   11 reserved
//!          12..76 counters: 32 of the engine (`roce_proto`'s
//!             `Counters` in order), 32 of the member ([`HostStats`])
//!          76.. 32 x 3 words: the QPs listed ([`QpEntry`])
//! ```
//!
//! A member that leaves adds its counters to the departed ones, and so
//! does the member that reaps a dead one (its last publication): the
//! device's counters run from the file's creation, as rxe's from the
//! device's.
//!
//! [`HostStats`]: crate::HostStats
//!
//! A member writes only its own slot (a sequence lock: readers keep what
//! two reads agree on). Readers trust nothing: a slot whose member is not
//! alive (its OFD lock), whose tag is not the member's incarnation, whose
//! sequence is odd or whose values are out of range is skipped and counted.

use std::fs::File;
use std::net::SocketAddr;
use std::os::unix::fs::{FileExt, MetadataExt, OpenOptionsExt};
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::error::HostError;
use crate::layout::{self, LIVENESS_BASE, MAX_MEMBERS, Table};
use crate::shm;

/// `b"srrsrc\0\x01"` as a big-endian word.
pub const MAGIC: u64 = u64::from_be_bytes(*b"srrsrc\0\x01");
/// Bumped whenever the meaning of a word of the region changes.
pub const VERSION: u64 = 1;
/// QPs a member lists (its count covers all of them).
pub const MAX_LISTED: usize = 32;
/// Counters a slot holds: [`ENGINE_COUNTERS`] of the engine, then the
/// member's own.
pub const COUNTERS: usize = 64;
/// Where the member's own counters ([`crate::HostStats`]) start.
pub const ENGINE_COUNTERS: usize = 32;
const DEPARTED: usize = 4;
const HEADER: usize = DEPARTED + COUNTERS;
const COUNTS: usize = 2;
const LISTED: usize = 10;
const COUNTER_AT: usize = 12;
const QPS: usize = COUNTER_AT + COUNTERS;
const QP_WORDS: usize = 3;
const SLOT_WORDS: usize = QPS + MAX_LISTED * QP_WORDS;
/// Words of the region.
pub const WORDS: usize = HEADER + MAX_MEMBERS * SLOT_WORDS;
/// A count above this is not believed (a garbled slot).
const MAX_COUNT: u64 = u32::MAX as u64;

/// How many objects of each kind a member holds.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counts {
    /// Protection domains.
    pub pd: u64,
    /// Completion queues.
    pub cq: u64,
    /// Queue pairs (QP 1 of a CM included, as the kernel counts its GSI QP).
    pub qp: u64,
    /// rdma_cm ids (softroce's contexts publish 0 for now: its rdma_cm ids
    /// are not a context's state).
    pub cm_id: u64,
    /// Memory regions.
    pub mr: u64,
    /// Shared receive queues.
    pub srq: u64,
    /// Address handles.
    pub ah: u64,
    /// Memory windows.
    pub mw: u64,
}

impl Counts {
    fn words(&self) -> [u64; 8] {
        [self.pd, self.cq, self.qp, self.cm_id, self.mr, self.srq, self.ah, self.mw]
    }

    fn from_words(w: &[u64]) -> Option<Counts> {
        if w.len() < 8 || w[..8].iter().any(|&c| c > MAX_COUNT) {
            return None;
        }
        Some(Counts { pd: w[0], cq: w[1], qp: w[2], cm_id: w[3], mr: w[4], srq: w[5], ah: w[6], mw: w[7] })
    }

    /// The sum of two members' counts.
    pub fn add(&mut self, o: &Counts) {
        self.pd += o.pd;
        self.cq += o.cq;
        self.qp += o.qp;
        self.cm_id += o.cm_id;
        self.mr += o.mr;
        self.srq += o.srq;
        self.ah += o.ah;
        self.mw += o.mw;
    }
}

/// One QP as the kernel reports it to `rdma resource show qp`
/// (`enum ib_qp_type` and `enum ib_qp_state` values).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QpEntry {
    /// Local QP number.
    pub qpn: u32,
    /// `ib_qp_type`: 1 GSI, 2 RC, 3 UC, 4 UD.
    pub qp_type: u8,
    /// `ib_qp_state`: 0 RESET .. 6 ERR.
    pub state: u8,
    /// The port (0 before the QP has one).
    pub port: u8,
    /// Remote QP number and expected receive PSN (connected QPs).
    pub remote: Option<(u32, u32)>,
    /// Next send PSN.
    pub sq_psn: u32,
    /// `ib_mig_state` (connected QPs).
    pub path_mig_state: Option<u8>,
    /// The QP's PD handle.
    pub pdn: u32,
}

const QP_VALID: u64 = 0x80;
const QP_REMOTE: u64 = 0x01;
const QP_MIG: u64 = 0x02;

impl QpEntry {
    fn encode(&self) -> [u64; 3] {
        let flags = QP_VALID
            | if self.remote.is_some() { QP_REMOTE } else { 0 }
            | if self.path_mig_state.is_some() { QP_MIG } else { 0 };
        let (rqpn, rq_psn) = self.remote.unwrap_or((0, 0));
        [
            u64::from(self.qpn & 0x00ff_ffff)
                | u64::from(self.qp_type) << 24
                | u64::from(self.state) << 32
                | u64::from(self.port) << 40
                | flags << 48
                | u64::from(self.path_mig_state.unwrap_or(0)) << 56,
            u64::from(rqpn) | u64::from(self.pdn) << 32,
            u64::from(self.sq_psn) | u64::from(rq_psn) << 32,
        ]
    }

    fn decode(w: &[u64]) -> Option<QpEntry> {
        let [a, b, c] = *w else { return None };
        let flags = (a >> 48) & 0xff;
        let (qp_type, state, port, mig) = ((a >> 24) as u8, (a >> 32) as u8, (a >> 40) as u8, (a >> 56) as u8);
        if flags & QP_VALID == 0 || !(1..=4).contains(&qp_type) || state > 6 || port > 1 || mig > 2 {
            return None;
        }
        Some(QpEntry {
            qpn: (a & 0x00ff_ffff) as u32,
            qp_type,
            state,
            port,
            remote: (flags & QP_REMOTE != 0).then_some((b as u32, (c >> 32) as u32)),
            sq_psn: c as u32,
            path_mig_state: (flags & QP_MIG != 0).then_some(mig),
            pdn: (b >> 32) as u32,
        })
    }
}

/// What a member publishes: its counts, up to [`MAX_LISTED`] QPs and its
/// engine's counters.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Resources {
    /// The counts.
    pub counts: Counts,
    /// Its QPs (those past [`MAX_LISTED`] are counted, not listed).
    pub qps: Vec<QpEntry>,
    /// The engine's counters, in `roce_proto`'s `Counters` order (at most
    /// [`ENGINE_COUNTERS`]; the member adds its own).
    pub counters: Vec<u64>,
}

/// The region, over the words that follow the table.
pub(crate) struct Region<'a> {
    w: &'a [AtomicU64],
}

impl<'a> Region<'a> {
    /// A view of `w`, which has [`WORDS`] words.
    pub(crate) fn new(w: &'a [AtomicU64]) -> Region<'a> {
        assert_eq!(w.len(), WORDS, "resource region of the wrong size");
        Region { w }
    }

    fn slot(slot: usize) -> usize {
        assert!(slot < MAX_MEMBERS);
        HEADER + slot * SLOT_WORDS
    }

    /// Makes the region this file life's (lock held): cleared unless its
    /// header already names `secret_word`.
    pub(crate) fn adopt(&self, secret_word: u64) {
        let ok = self.w[0].load(Ordering::Acquire) == MAGIC
            && self.w[1].load(Ordering::Acquire) == VERSION
            && self.w[2].load(Ordering::Acquire) == secret_word;
        if ok {
            return;
        }
        for w in self.w {
            w.store(0, Ordering::Relaxed);
        }
        self.w[2].store(secret_word, Ordering::Release);
        self.w[1].store(VERSION, Ordering::Release);
        self.w[0].store(MAGIC, Ordering::Release);
    }

    /// Writes `res` and the member's own counters `host` as the slot of
    /// the member `incarnation` (only that member writes it; callers
    /// serialise their own writes).
    pub(crate) fn publish(&self, slot: usize, incarnation: u64, res: &Resources, host: &[u64]) {
        let s = Region::slot(slot);
        let seq = &self.w[s + 1];
        let odd = seq.load(Ordering::Relaxed) | 1;
        seq.store(odd, Ordering::Release);
        std::sync::atomic::fence(Ordering::Release);
        self.w[s].store(incarnation, Ordering::Relaxed);
        for (k, v) in res.counts.words().into_iter().enumerate() {
            self.w[s + COUNTS + k].store(v, Ordering::Relaxed);
        }
        let engine = res.counters.iter().copied().chain(std::iter::repeat(0)).take(ENGINE_COUNTERS);
        let own = host.iter().copied().chain(std::iter::repeat(0)).take(COUNTERS - ENGINE_COUNTERS);
        for (k, v) in engine.chain(own).enumerate() {
            self.w[s + COUNTER_AT + k].store(v, Ordering::Relaxed);
        }
        let listed = res.qps.len().min(MAX_LISTED);
        self.w[s + LISTED].store(listed as u64, Ordering::Relaxed);
        for (i, q) in res.qps[..listed].iter().enumerate() {
            for (k, v) in q.encode().into_iter().enumerate() {
                self.w[s + QPS + i * QP_WORDS + k].store(v, Ordering::Relaxed);
            }
        }
        seq.store(odd.wrapping_add(1), Ordering::Release);
    }

    /// Adds the counters of the slot's last publication to the departed
    /// ones (lock held) if the slot is the member `incarnation`'s and was
    /// not left half written; whatever it holds is only ever summed.
    pub(crate) fn retire(&self, slot: usize, incarnation: u64) {
        let s = Region::slot(slot);
        let seq = self.w[s + 1].load(Ordering::Acquire);
        if self.w[s].load(Ordering::Acquire) != incarnation || seq % 2 == 1 {
            return;
        }
        for k in 0..COUNTERS {
            let v = self.w[s + COUNTER_AT + k].load(Ordering::Relaxed);
            let d = &self.w[DEPARTED + k];
            d.store(d.load(Ordering::Relaxed).wrapping_add(v), Ordering::Relaxed);
        }
    }

    /// Clears a slot (its member left or was reaped; lock held).
    pub(crate) fn clear(&self, slot: usize) {
        let s = Region::slot(slot);
        for w in &self.w[s..s + SLOT_WORDS] {
            w.store(0, Ordering::Release);
        }
    }
}

/// One live member's resources, as read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemberResources {
    /// Its slot in the table.
    pub slot: usize,
    /// The process it belongs to.
    pub pid: u32,
    /// Its counts.
    pub counts: Counts,
    /// The QPs it listed (its count may say more).
    pub qps: Vec<QpEntry>,
    /// Listed QP entries that did not decode (counted, not shown).
    pub bad_qps: usize,
    /// Its counters ([`COUNTERS`]: the engine's, then its own).
    pub counters: Vec<u64>,
}

/// Every live member of one device and what it holds.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Census {
    /// The members whose slots read consistently.
    pub members: Vec<MemberResources>,
    /// Live members that published nothing (a softroce without this
    /// region, or one still joining).
    pub unpublished: usize,
    /// Live members whose slot did not validate or kept changing.
    pub skipped: usize,
    /// The counters of members that left or died (empty without the region).
    pub departed: Vec<u64>,
}

impl Census {
    /// The device's totals.
    pub fn totals(&self) -> Counts {
        let mut c = Counts::default();
        for m in &self.members {
            c.add(&m.counts);
        }
        c
    }

    /// The device's counters ([`COUNTERS`]): the departed members' and the
    /// live ones' summed.
    pub fn counters(&self) -> Vec<u64> {
        let mut c = vec![0u64; COUNTERS];
        for m in self.members.iter().map(|m| &m.counters).chain([&self.departed]) {
            for (s, v) in c.iter_mut().zip(m) {
                *s = s.wrapping_add(*v);
            }
        }
        c
    }
}

fn read_words(file: &File, words: usize) -> std::io::Result<Vec<u64>> {
    let mut bytes = vec![0u8; words * 8];
    let mut got = 0;
    while got < bytes.len() {
        match file.read_at(&mut bytes[got..], got as u64) {
            Ok(0) => break,
            Ok(n) => got += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    bytes.truncate(got - got % 8);
    Ok(bytes.chunks_exact(8).map(|c| u64::from_ne_bytes(c.try_into().expect("8 bytes"))).collect())
}

/// Reads the resources of every live member of the shared device on
/// `addr` (no device file: nobody has it open, an empty census). Joins
/// nothing and writes nothing.
pub fn census(addr: SocketAddr) -> Result<Census, HostError> {
    census_of(&crate::layout::device_file(addr))
}

/// [`census`] of the device file at `path`.
pub fn census_of(path: &Path) -> Result<Census, HostError> {
    let file_err = |source| HostError::File { path: path.to_path_buf(), source };
    let file = match std::fs::OpenOptions::new().read(true).custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC).open(path)
    {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Census::default()),
        Err(e) => return Err(file_err(e)),
    };
    let meta = file.metadata().map_err(file_err)?;
    if meta.uid() != rustix::process::getuid().as_raw() || meta.mode() & 0o077 != 0 {
        return Err(HostError::Unsafe { path: path.to_path_buf(), owner: meta.uid(), mode: meta.mode() & 0o7777 });
    }
    let total = layout::WORDS + WORDS;
    let alive = |slot: usize| shm::byte_held(&file, LIVENESS_BASE + slot as u64).unwrap_or(false);
    let mut census = Census::default();
    let mut pending: Vec<usize> = (0..MAX_MEMBERS).collect();
    // A slot being written reads differently twice or with an odd
    // sequence: read again, a few times, then count it as skipped.
    let mut round = 0;
    // Whether a member was seen alive after a read found the header
    // invalid, and how many later reads found it invalid still.
    let (mut seen_alive, mut invalid_after_alive) = (false, 0);
    while round < 4 {
        let (a, b) = (read_words(&file, total).map_err(file_err)?, read_words(&file, total).map_err(file_err)?);
        if a.len() < layout::WORDS {
            // Made but not yet sized by its first member.
            return Ok(Census::default());
        }
        let atomics: Vec<AtomicU64> = a[..layout::WORDS].iter().map(|&w| AtomicU64::new(w)).collect();
        let t = Table::new(&atomics);
        if !t.is_valid() {
            // A first member writes the header (under the file's lock)
            // before it takes its liveness byte, so a header read mid-init
            // and a liveness byte checked just after can both be its. Only
            // a header still invalid when read after a member was seen
            // alive is another version's.
            if seen_alive {
                invalid_after_alive += 1;
                if invalid_after_alive == 3 {
                    return Err(HostError::Incompatible { path: path.to_path_buf() });
                }
            }
            if !pending.iter().any(|&s| alive(s)) {
                return Ok(Census::default());
            }
            seen_alive = true;
            std::thread::sleep(std::time::Duration::from_millis(1));
            continue;
        }
        round += 1;
        let region = (a.len() == total && b.len() == total).then(|| (&a[layout::WORDS..], &b[layout::WORDS..]));
        // Word 2 of the table is its secret's first word.
        let region = region.filter(|(r, _)| r[0] == MAGIC && r[1] == VERSION && r[2] == a[2]);
        if let Some((ra, rb)) = region
            && ra[DEPARTED..HEADER] == rb[DEPARTED..HEADER]
        {
            census.departed = ra[DEPARTED..HEADER].to_vec();
        }
        let mut again = Vec::new();
        for &slot in &pending {
            let inc = t.incarnation(slot);
            if inc == 0 || !alive(slot) {
                continue;
            }
            let Some((ra, rb)) = region else {
                census.unpublished += 1;
                continue;
            };
            let s = Region::slot(slot);
            let (sa, sb) = (&ra[s..s + SLOT_WORDS], &rb[s..s + SLOT_WORDS]);
            if sa[0] == 0 {
                census.unpublished += 1;
                continue;
            }
            if sa != sb || sa[1] % 2 == 1 {
                again.push(slot);
                continue;
            }
            match read_slot(slot, t.pid(slot), inc, sa) {
                Some(m) => census.members.push(m),
                None => census.skipped += 1,
            }
        }
        if again.is_empty() {
            break;
        }
        if round == 4 {
            census.skipped += again.len();
        }
        pending = again;
    }
    census.members.sort_by_key(|m| m.slot);
    Ok(census)
}

/// Decodes a slot that read the same twice; `None` if it is not the
/// member `incarnation`'s or a value is out of range.
fn read_slot(slot: usize, pid: u32, incarnation: u64, w: &[u64]) -> Option<MemberResources> {
    if w[0] != incarnation {
        return None;
    }
    let counts = Counts::from_words(&w[COUNTS..COUNTS + 8])?;
    let listed = usize::try_from(w[LISTED]).ok().filter(|&n| n <= MAX_LISTED)?;
    let mut qps = Vec::with_capacity(listed);
    let mut bad_qps = 0;
    for i in 0..listed {
        match QpEntry::decode(&w[QPS + i * QP_WORDS..QPS + (i + 1) * QP_WORDS]) {
            Some(q) => qps.push(q),
            None => bad_qps += 1,
        }
    }
    let counters = w[COUNTER_AT..COUNTER_AT + COUNTERS].to_vec();
    Some(MemberResources { slot, pid, counts, qps, bad_qps, counters })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words() -> Vec<AtomicU64> {
        (0..WORDS).map(|_| AtomicU64::new(0)).collect()
    }

    fn snapshot(w: &[AtomicU64]) -> Vec<u64> {
        w.iter().map(|x| x.load(Ordering::Relaxed)).collect()
    }

    fn rc(qpn: u32) -> QpEntry {
        QpEntry {
            qpn,
            qp_type: 2,
            state: 3,
            port: 1,
            remote: Some((0x2345, 77)),
            sq_psn: 0xabcdef,
            path_mig_state: Some(0),
            pdn: 3,
        }
    }

    #[test]
    fn a_published_slot_reads_back_and_lists_at_most_max_listed() {
        let w = words();
        let r = Region::new(&w);
        r.adopt(42);
        let ud = QpEntry { qp_type: 4, remote: None, path_mig_state: None, ..rc(0x1011) };
        let mut res = Resources {
            counts: Counts { pd: 1, cq: 2, qp: 40, mr: 5, ..Counts::default() },
            qps: vec![],
            counters: vec![10, 20],
        };
        res.qps = (0..40).map(|i| if i == 1 { ud } else { rc(0x1000 + i) }).collect();
        r.publish(7, 9, &res, &[3]);
        let snap = snapshot(&w);
        let s = Region::slot(7);
        let m = read_slot(7, 1234, 9, &snap[s..s + SLOT_WORDS]).expect("valid");
        assert_eq!((m.pid, m.counts, m.bad_qps), (1234, res.counts, 0));
        assert_eq!(m.qps.len(), MAX_LISTED);
        assert_eq!(m.qps[..2], [rc(0x1000), ud]);
        assert_eq!(snap[s + 1] % 2, 0, "the sequence is even after a write");
        assert_eq!(
            (m.counters.len(), m.counters[..3].to_vec(), m.counters[ENGINE_COUNTERS]),
            (COUNTERS, vec![10, 20, 0], 3)
        );
        // Leaving adds them to the departed ones, once per retirement.
        r.retire(7, 10);
        assert_eq!(w[DEPARTED].load(Ordering::Relaxed), 0, "another incarnation's slot is not retired");
        r.retire(7, 9);
        assert_eq!(w[DEPARTED].load(Ordering::Relaxed), 10);
        assert_eq!(w[DEPARTED + ENGINE_COUNTERS].load(Ordering::Relaxed), 3);
        // Another incarnation's slot is not this member's.
        assert_eq!(read_slot(7, 1234, 10, &snap[s..s + SLOT_WORDS]), None);
        r.clear(7);
        assert!(snapshot(&w)[s..s + SLOT_WORDS].iter().all(|&x| x == 0));
    }

    #[test]
    fn adopt_clears_an_earlier_lifes_region_only() {
        let w = words();
        let r = Region::new(&w);
        r.adopt(1);
        r.publish(0, 5, &Resources { counts: Counts { pd: 1, ..Counts::default() }, ..Resources::default() }, &[]);
        r.adopt(1);
        assert_eq!(w[Region::slot(0)].load(Ordering::Relaxed), 5, "same life: kept");
        r.adopt(2);
        assert_eq!(w[Region::slot(0)].load(Ordering::Relaxed), 0, "another life: cleared");
        assert_eq!(w[2].load(Ordering::Relaxed), 2);
    }

    #[test]
    fn garbage_is_refused_not_trusted() {
        let mut slot = vec![u64::MAX; SLOT_WORDS];
        slot[0] = 9;
        assert_eq!(read_slot(0, 1, 9, &slot), None, "counts out of range");
        slot[COUNTS..COUNTS + 8].fill(1);
        assert_eq!(read_slot(0, 1, 9, &slot), None, "too many QPs listed");
        slot[LISTED] = 2;
        let m = read_slot(0, 1, 9, &slot).expect("counts are fine");
        assert_eq!((m.qps.len(), m.bad_qps), (0, 2), "undecodable QP entries are counted");
        assert_eq!(QpEntry::decode(&[0, 0, 0]), None, "an empty entry is no QP");
        assert_eq!(QpEntry::decode(&[1, 2]), None);
    }
}
