//! The engine fuzzer's harness, shared by the cargo-fuzz target
//! (`crates/roce-proto/fuzz/fuzz_targets/engine.rs`) and by
//! `tests/engine_fuzz.rs`, which runs it over a fixed pseudo-random stream
//! in `cargo test`. It lives inside the crate, behind the `testing` feature,
//! because its oracle reads the QPs' role state, which the engine does not
//! export.
//!
//! Two devices, each with one RC QP in RTS connected to the other's, and
//! seven memory regions per device, every one inside a larger buffer with
//! guard bytes before and after it. The input bytes are a script (decoded
//! by hand: an exhausted input reads as zeros): forged packets to either
//! side built from valid templates with mutated fields (PSN near or far
//! from what the QP expects, RETH and AtomicETH addresses, keys and lengths
//! wild or at region edges, payload length, pad count, AckReq, AETH
//! syndromes), replays and duplicates of earlier packets, READ re-requests
//! of earlier READs' ranges, raw bytes, time steps that fire the timers,
//! WRs posted on either side, CQ polls, and the devices' own packets
//! delivered, dropped, duplicated or reordered. After every step `Harness::check`
//! asserts the oracle; the script ends with a lossless exchange that must
//! reach quiescence (see the README of the fuzz crate for the full list).

#![allow(dead_code)]

use std::collections::VecDeque;
use std::net::{IpAddr, Ipv4Addr};
use std::time::{Duration, Instant};

use crate::mem::OwnedBuffer;
use crate::qp::{InMessage, MAX_UNACKED_PSNS, Qp, Response, ack_timeout, wc_opcode};
use crate::verbs::{AccessFlags, QpState, QpType, SendFlags, WcOpcode, WcStatus, WrOpcode};
use crate::wr::{Flush, placement, selectivity};
use crate::{
    AhAttr, Device, DeviceConfig, Limits, Mtu, Payload, QpAttr, QpCap, QpInitAttr, Qpn, RecvWr, Region, SendWr, Sge, Wc,
};
use roce_wire::opcode::PayloadRule;
use roce_wire::{
    AethRepr, AtomicAckEthRepr, AtomicEthRepr, BthRepr, DethRepr, Direction, ExtHeader, ExtRepr, FethRepr, IcrcContext,
    IcrcHasher, IethRepr, ImmDtRepr, IpContext, Opcode, Packet, PacketRepr, Position, Psn, RethRepr, RnrTimer,
};

/// Steps of one script at most (libFuzzer's inputs are up to 4 KiB by default).
pub(crate) const MAX_STEPS: usize = 1500;
/// Rounds of the lossless exchange at the end (each delivers everything in
/// flight, or runs the next timer).
pub(crate) const FINAL_ROUNDS: usize = 20_000;
/// Packets remembered for replays.
const HISTORY: usize = 64;
/// Packets in flight toward one side at most (older ones are lost).
const WIRE_CAP: usize = 256;
/// Guard bytes before, between and after the regions.
const GUARD: usize = 64;
/// Entries of each CQ. Before every post the harness polls the CQ, so it
/// holds at most the WRs of both queues (below 40) and never overruns.
const CQE: u32 = 255;
/// Inline bytes a send WR may carry.
const MAX_INLINE: u32 = 64;
/// SGEs per WR.
const MAX_SGE: u32 = 4;

const ADDR: [Ipv4Addr; 2] = [Ipv4Addr::new(10, 0, 0, 1), Ipv4Addr::new(10, 0, 0, 2)];

const LW: u32 = AccessFlags::LOCAL_WRITE.0;
const RW: u32 = AccessFlags::REMOTE_WRITE.0;
const RR: u32 = AccessFlags::REMOTE_READ.0;
const RA: u32 = AccessFlags::REMOTE_ATOMIC.0;
const FG: u32 = AccessFlags::FLUSH_GLOBAL.0;
const FP: u32 = AccessFlags::FLUSH_PERSISTENT.0;

/// Where a region's I/O virtual address lies.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Iova {
    /// An address like a buffer's from `ibv_reg_mr` (fixed, not the
    /// buffer's own, so that scripts replay exactly).
    Natural,
    /// The region ends at the top of the 64-bit address space: `va + len`
    /// arithmetic is one step from overflowing.
    Top,
    /// The region starts at address 0.
    Zero,
}

#[derive(Debug, Clone, Copy)]
struct MrSpec {
    name: &'static str,
    len: usize,
    iova: Iova,
    access: u32,
}

/// The regions of each device, in buffer order. Four grant FLUSH_GLOBAL,
/// so a FLUSH's R_Key check passes or fails by region.
const MRS: [MrSpec; 7] = [
    MrSpec { name: "rw", len: 8192, iova: Iova::Natural, access: LW | RW | RR | RA | FG },
    MrSpec { name: "ro", len: 4096, iova: Iova::Natural, access: RR | FG },
    MrSpec { name: "lw", len: 4096, iova: Iova::Natural, access: LW | RR },
    MrSpec { name: "at", len: 256, iova: Iova::Natural, access: LW | RA },
    MrSpec { name: "top", len: 1024, iova: Iova::Top, access: LW | RW | RR | RA | FG },
    MrSpec { name: "zero", len: 1024, iova: Iova::Zero, access: LW | RW | RR | FG },
    MrSpec { name: "empty", len: 0, iova: Iova::Natural, access: LW | RW | RR | RA },
];
const NMR: usize = MRS.len();
/// The largest region: no granted range is longer.
const MAX_MR_LEN: u64 = 8192;
/// The largest message the harness posts (`MAX_SGE` SGEs of a region each).
const MAX_WR_LEN: u64 = MAX_SGE as u64 * MAX_MR_LEN;

/// What may change the bytes of a region.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Class {
    /// The peer may write it: the region and the QP grant REMOTE_WRITE or
    /// REMOTE_ATOMIC. Only its guards are checked.
    Remote,
    /// LOCAL_WRITE only: a byte may change only while a receive, READ or
    /// atomic WR whose SGE covers it is outstanding (posted and its
    /// completion not yet polled).
    Local,
    /// No write access at all: never changes.
    Frozen,
}

/// Reads the script. An exhausted input reads as zeros.
pub(crate) struct Bytes<'a> {
    data: &'a [u8],
    pos: usize,
}

impl<'a> Bytes<'a> {
    pub(crate) fn new(data: &'a [u8]) -> Bytes<'a> {
        Bytes { data, pos: 0 }
    }
    pub(crate) fn done(&self) -> bool {
        self.pos >= self.data.len()
    }
    pub(crate) fn u8(&mut self) -> u8 {
        let b = self.data.get(self.pos).copied().unwrap_or(0);
        self.pos += 1;
        b
    }
    pub(crate) fn u16(&mut self) -> u16 {
        u16::from_le_bytes([self.u8(), self.u8()])
    }
    pub(crate) fn u32(&mut self) -> u32 {
        u32::from_le_bytes([self.u8(), self.u8(), self.u8(), self.u8()])
    }
    pub(crate) fn u64(&mut self) -> u64 {
        u64::from(self.u32()) | (u64::from(self.u32()) << 32)
    }
    /// Up to `n` bytes of the input itself.
    pub(crate) fn take(&mut self, n: usize) -> &'a [u8] {
        let start = self.pos.min(self.data.len());
        let end = start.saturating_add(n).min(self.data.len());
        self.pos = end.max(self.pos);
        &self.data[start..end]
    }
}

/// The QPs' attributes, from the first bytes of the script.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Config {
    pub(crate) mtu: Mtu,
    pub(crate) sq_psn: [u32; 2],
    pub(crate) max_rd_atomic: [u8; 2],
    pub(crate) max_dest_rd_atomic: [u8; 2],
    pub(crate) timeout: u8,
    pub(crate) retry_cnt: u8,
    pub(crate) rnr_retry: u8,
    pub(crate) min_rnr_timer: u8,
    /// Each QP's `qp_access_flags`.
    pub(crate) access: [u32; 2],
    pub(crate) sq_depth: u32,
    pub(crate) rq_depth: u32,
}

impl Config {
    fn decode(b: &mut Bytes<'_>) -> Config {
        let x = b.u8();
        let mtu =
            [Mtu::Mtu256, Mtu::Mtu256, Mtu::Mtu512, Mtu::Mtu1024, Mtu::Mtu256, Mtu::Mtu2048, Mtu::Mtu256, Mtu::Mtu4096]
                [usize::from(x & 7)];
        let mut sq_psn = [0; 2];
        for p in &mut sq_psn {
            let k = b.u8();
            *p = match k & 3 {
                // Just below the 2^24 wrap: the first messages cross it.
                0 | 1 => Psn::MASK - u32::from(k >> 2),
                2 => b.u32() & Psn::MASK,
                _ => Psn::HALF - 32 + u32::from(k >> 2),
            };
        }
        let y = b.u8();
        let rd = [1, 2, 4, 16, 1, 2, 3, 0];
        let max_rd_atomic = [rd[usize::from(y & 7)], rd[usize::from((y >> 3) & 7)]];
        let z = b.u8();
        let dest = [1, 2, 4, 16, 0, 1, 2, 3];
        let max_dest_rd_atomic = [dest[usize::from(z & 7)], dest[usize::from((z >> 3) & 7)]];
        let t = b.u8();
        let timeout = [1, 2, 4, 6, 8, 3, 0, 5][usize::from(t & 7)];
        let retry_cnt = (t >> 3) & 7;
        let rnr_retry = [0, 1, 3, 7][usize::from(t >> 6)];
        let r = b.u8();
        let min_rnr_timer = r & 0x1f;
        let w = b.u8();
        let mut access = [RW | RR | RA; 2];
        for (i, a) in access.iter_mut().enumerate() {
            // One QP in four lacks one of the remote rights.
            let bits = (w >> (4 * i)) & 0xf;
            if bits & 3 == 3 {
                *a &= ![RW, RR, RA, RW][usize::from(bits >> 2)];
            }
            // Three QPs in four allow FLUSH to global visibility; one in
            // four allows persistence too (which no region grants).
            match (r & 0x80 != 0, r & (0x20 << i) != 0) {
                (true, true) => {}
                (true, false) => *a |= FG | FP,
                _ => *a |= FG,
            }
        }
        let v = b.u8();
        Config {
            mtu,
            sq_psn,
            max_rd_atomic,
            max_dest_rd_atomic,
            timeout,
            retry_cnt,
            rnr_retry,
            min_rnr_timer,
            access,
            sq_depth: 4 + u32::from(v & 15),
            rq_depth: 4 + u32::from(v >> 4),
        }
    }
}

/// A WR the harness posted whose completion it has not polled yet.
#[derive(Debug, Clone)]
struct Posted {
    wr_id: u64,
    /// Its index in the engine's queue (the queue's producer count when posted).
    index: u64,
    opcode: WrOpcode,
    signaled: bool,
    /// Total SGE length.
    len: u64,
    /// Buffer ranges the device may write for it (receive, READ and atomic
    /// SGEs): counted in `Side::refs` while it is outstanding.
    writes: Vec<(usize, usize)>,
}

/// A packet on the wire toward side `to`.
#[derive(Debug, Clone)]
pub(crate) struct Pkt {
    pub(crate) to: usize,
    pub(crate) src_port: u16,
    pub(crate) bytes: Vec<u8>,
}

/// One device, its QP, its memory and what the harness knows of them.
struct Side {
    // The device first: it drops before the memory its regions point into.
    dev: Device,
    mem: OwnedBuffer,
    qpn: u32,
    cq: crate::CqHandle,
    /// Start of each region in the buffer.
    off: [usize; NMR],
    keys: [u32; NMR],
    iova: [u64; NMR],
    regions: [Region; NMR],
    class: [Class; NMR],
    /// Guard bytes and the regions' first contents.
    initial: Vec<u8>,
    /// The buffer at the last check.
    shadow: Vec<u8>,
    /// Per byte: outstanding WRs that may write it.
    refs: Vec<u16>,
    sq: VecDeque<Posted>,
    rq: VecDeque<Posted>,
    /// Packets delivered to this device since its transmits were last
    /// polled (each may queue one response), and credit announcements.
    since_poll: usize,
}

/// Byte `k` of side `i`'s buffer before the script, inside a region.
fn initial_byte(i: usize, k: usize) -> u8 {
    (k as u8).wrapping_mul(31).wrapping_add(0x41 + i as u8 * 0x10)
}

fn guard_byte(k: usize) -> u8 {
    0xa5 ^ (k as u8).wrapping_mul(0x3b)
}

/// A region over `len` bytes at `off` of `mem`.
#[allow(unsafe_code)]
fn sub_region(mem: &OwnedBuffer, off: usize, len: usize) -> Region {
    assert!(off + len <= mem.len());
    let ptr = std::ptr::with_exposed_provenance_mut::<u8>(mem.addr() as usize + off);
    // SAFETY: `[off, off + len)` lies inside `mem`'s allocation (asserted),
    // whose address `OwnedBuffer::addr` exposed. The device holding the
    // region is declared before the buffer in `Side`, so it drops first;
    // the harness touches the buffer only between engine calls, through
    // `OwnedBuffer::get`/`set`, as the tests' `Pair` does.
    unsafe { Region::new(ptr, len) }.expect("a buffer's range does not wrap")
}

fn layout() -> ([usize; NMR], usize) {
    let mut off = [0; NMR];
    let mut at = GUARD;
    for (o, m) in off.iter_mut().zip(MRS) {
        *o = at;
        at += m.len + GUARD;
    }
    (off, at)
}

impl Side {
    fn new(i: usize, cfg: &Config) -> Side {
        let mut dev = Device::new(DeviceConfig {
            gids: vec![IpAddr::V4(ADDR[i])],
            seed: 7 + i as u64,
            icrc_policy: roce_wire::IcrcPolicy::Full,
            active_mtu: cfg.mtu,
            limits: Limits::default(),
            udp_src_port: None,
        });
        let pd = dev.alloc_pd().unwrap();
        let (off, total) = layout();
        let mut mem = OwnedBuffer::new(total);
        let mut initial: Vec<u8> = (0..total).map(guard_byte).collect();
        for (j, m) in MRS.iter().enumerate() {
            for (k, v) in initial.iter_mut().enumerate().skip(off[j]).take(m.len) {
                *v = initial_byte(i, k);
            }
        }
        mem.set(0, &initial);
        let mut keys = [0; NMR];
        let mut iova = [0; NMR];
        let mut class = [Class::Frozen; NMR];
        let regions: [Region; NMR] = std::array::from_fn(|j| sub_region(&mem, off[j], MRS[j].len));
        for (j, m) in MRS.iter().enumerate() {
            iova[j] = match m.iova {
                Iova::Natural => 0x7f3a_0000_0000 + ((i as u64) << 32) + off[j] as u64,
                Iova::Top => u64::MAX - m.len as u64,
                Iova::Zero => 0,
            };
            keys[j] = dev.reg_mr(pd, iova[j], regions[j], AccessFlags(m.access)).unwrap();
            let remote = (m.access & cfg.access[i]) & (RW | RA) != 0;
            class[j] = if remote {
                Class::Remote
            } else if m.access & LW != 0 {
                Class::Local
            } else {
                Class::Frozen
            };
        }
        let cq = dev.create_cq(CQE).unwrap();
        assert!(dev.cq_size(cq).unwrap() >= CQE);
        let qpn = dev
            .create_qp(QpInitAttr {
                qp_type: QpType::Rc,
                pd,
                send_cq: cq,
                recv_cq: cq,
                srq: None,
                cap: QpCap {
                    max_send_wr: cfg.sq_depth,
                    max_recv_wr: cfg.rq_depth,
                    max_send_sge: MAX_SGE,
                    max_recv_sge: MAX_SGE,
                    max_inline_data: MAX_INLINE,
                },
                sq_sig_all: false,
                block_self_mcast_lb: false,
            })
            .unwrap();
        Side {
            dev,
            mem,
            qpn: qpn.get(),
            cq,
            off,
            keys,
            iova,
            regions,
            class,
            shadow: initial.clone(),
            refs: vec![0; total],
            initial,
            sq: VecDeque::new(),
            rq: VecDeque::new(),
            since_poll: 0,
        }
    }

    fn qp(&self) -> &Qp {
        self.dev.qp(self.qpn.into()).expect("the harness never destroys its QP")
    }

    /// The buffer offset of `len` bytes at address `addr` of region `j`.
    fn abs(&self, j: usize, addr: u64, len: u64) -> (usize, usize) {
        let start = self.off[j] + (addr - self.iova[j]) as usize;
        (start, start + len as usize)
    }

    fn release(&mut self, p: &Posted) {
        for &(a, b) in &p.writes {
            for r in &mut self.refs[a..b] {
                *r -= 1;
            }
        }
    }
}

/// The fuzzer's world: two connected devices on virtual time.
pub(crate) struct Harness {
    sides: [Side; 2],
    cfg: Config,
    t0: Instant,
    now: Instant,
    /// Packets in flight toward each side.
    wire: [VecDeque<Pkt>; 2],
    /// Recent packets, injected or real, for replays.
    history: VecDeque<Pkt>,
    buf: Vec<u8>,
    next_wr_id: u64,
    /// The latest a timer may lie ahead of now.
    max_timer: Duration,
    stats: Stats,
    /// `SOFTROCE_FUZZ_TRACE`: print every step, packet and completion.
    trace: bool,
}

/// Forged opcodes: every RC request and response, and a few of other
/// transports (which the QP must drop).
const TEMPLATES: [u8; 31] = [
    0x00, 0x01, 0x02, 0x03, 0x04, 0x05, // SEND FIRST/MIDDLE/LAST(+IMM)/ONLY(+IMM)
    0x06, 0x07, 0x08, 0x09, 0x0a, 0x0b, // WRITE FIRST/MIDDLE/LAST(+IMM)/ONLY(+IMM)
    0x0c, 0x0c, 0x0c, // READ request
    0x0d, 0x0e, 0x0f, 0x10, // READ response FIRST/MIDDLE/LAST/ONLY
    0x11, 0x11, 0x11, // ACK/NAK
    0x12, // ATOMIC ACKNOWLEDGE
    0x13, 0x14, // CMP_SWAP, FETCH_ADD
    0x16, 0x17, // SEND with invalidate
    0x1c, // FLUSH
    0x1d, // ATOMIC WRITE
    0x24, // UC SEND_ONLY
    0x64, // UD SEND_ONLY
];

/// What a script did, for the test's report on how deep the stream goes.
#[derive(Debug, Clone, Copy, Default)]
pub struct Stats {
    /// Steps run.
    pub steps: usize,
    /// Steps after which both QPs were still in RTS.
    pub rts_steps: usize,
    /// Packets delivered (forged, replayed and real).
    pub delivered: usize,
    /// Successful completions polled.
    pub completed: usize,
}

/// Runs one script and checks the oracle after every step.
pub fn run(data: &[u8]) -> Stats {
    run_with(data, None, None)
}

/// [`run`], with each step's kind drawn by `op` instead of read from the
/// script (the test's weighted stream; its parameters still come from
/// `data`). With `record`, also writes the plain script that `run` would
/// follow the same way (corpus seeds for the fuzzer).
pub fn run_with(data: &[u8], mut op: Option<&mut dyn FnMut() -> u8>, mut record: Option<&mut Vec<u8>>) -> Stats {
    let mut input = Bytes::new(data);
    let mut h = Harness::new(Config::decode(&mut input));
    h.trace = std::env::var_os("SOFTROCE_FUZZ_TRACE").is_some();
    let consumed = |from: usize, to: usize| (from..to).map(|k| data.get(k).copied().unwrap_or(0));
    if let Some(r) = record.as_mut() {
        r.extend(consumed(0, input.pos));
    }
    let trace = h.trace;
    if trace {
        eprintln!("{:?}", h.cfg);
    }
    while !input.done() && h.stats.steps < MAX_STEPS {
        let kind = match op.as_mut() {
            Some(f) => f(),
            None => input.u8(),
        };
        if trace {
            let q = [h.qp(0), h.qp(1)]
                .map(|q| (q.state(), q.req.psn, q.comp.psn, q.resp.psn, q.sq.len(), q.rq.len(), q.req.rd_atomic));
            eprintln!("step {} kind {} at {:?}: {q:?}", h.stats.steps, kind % 32, h.now - h.t0);
        }
        let before = input.pos;
        h.step(kind, &mut input);
        if let Some(r) = record.as_mut() {
            r.push(kind);
            r.extend(consumed(before, input.pos));
        }
        h.check();
        h.stats.steps += 1;
        if h.sides.iter().all(|s| s.qp().state() == QpState::Rts) {
            h.stats.rts_steps += 1;
        }
    }
    h.finish();
    h.stats
}

impl Harness {
    pub(crate) fn new(cfg: Config) -> Harness {
        let mut sides = [Side::new(0, &cfg), Side::new(1, &cfg)];
        let qpn = [sides[0].qpn, sides[1].qpn];
        for (i, side) in sides.iter_mut().enumerate() {
            connect(&mut side.dev, qpn[i], qpn[1 - i], i, &cfg);
        }
        let rnr_max = (0..32).map(|c| RnrTimer(c).duration()).max().unwrap_or_default();
        let t0 = Instant::now();
        Harness {
            sides,
            cfg,
            t0,
            now: t0,
            wire: [VecDeque::new(), VecDeque::new()],
            history: VecDeque::new(),
            buf: vec![0; 9000],
            next_wr_id: 1,
            max_timer: ack_timeout(cfg.timeout).unwrap_or_default().max(rnr_max),
            stats: Stats::default(),
            trace: false,
        }
    }

    fn mtu(&self) -> u64 {
        self.cfg.mtu.bytes() as u64
    }

    fn qp(&self, s: usize) -> &Qp {
        self.sides[s].qp()
    }

    /// One step of the script, of kind `kind`.
    pub(crate) fn step(&mut self, kind: u8, b: &mut Bytes<'_>) {
        match kind % 32 {
            0..=9 => self.inject(b),
            10..=11 => self.replay(b),
            12..=13 => self.reread(b),
            14 => self.raw(b),
            15..=18 => {
                let s = usize::from(b.u8() & 1);
                let n = usize::from(b.u8() % 32) + 1;
                self.pump(s, n);
            }
            19 => {
                let s = usize::from(b.u8() & 1);
                self.drain(s);
            }
            20..=22 => self.deliver_wire(b),
            23..=25 => self.post_send(b),
            26..=27 => self.post_recv(b),
            28..=29 => self.advance(b),
            30 => {
                self.poll(0);
                self.poll(1);
            }
            _ => self.exchange(b),
        }
    }

    // ----- packets -----

    fn icrc_ctx(&self, to: usize, src_port: u16) -> IcrcContext {
        IcrcContext { ip: IpContext::v4_socket(ADDR[1 - to], ADDR[to]), src_port, dst_port: 4791 }
    }

    /// The UDP source port of the QP sending toward `to`.
    fn src_port(&self, to: usize) -> u16 {
        self.qp(1 - to).src_port
    }

    /// Rewrites the ICRC of a packet toward `to` so it passes the check.
    fn fix_icrc(&self, to: usize, src_port: u16, bytes: &mut [u8]) {
        if bytes.len() < 16 {
            return;
        }
        let n = bytes.len();
        if let Ok(icrc) = IcrcHasher::new(&self.icrc_ctx(to, src_port), n).finish_over(&bytes[..n - 4]) {
            bytes[n - 4..].copy_from_slice(&icrc.to_le_bytes());
        }
    }

    fn emit(&self, to: usize, repr: &PacketRepr, payload: &[u8]) -> Option<Vec<u8>> {
        let mut buf = vec![0u8; repr.packet_len(payload.len()).ok()?];
        repr.emit(&mut buf, payload, &self.icrc_ctx(to, self.src_port(to))).ok()?;
        Some(buf)
    }

    fn remember(&mut self, p: &Pkt) {
        if self.history.len() == HISTORY {
            self.history.pop_front();
        }
        self.history.push_back(p.clone());
    }

    /// Hands `p` to its destination.
    fn deliver(&mut self, p: &Pkt) {
        self.deliver_ecn(p, roce_wire::Ecn::Ect0);
    }

    /// Delivers `p` with `ecn` in its IP header (CE: a congested queue
    /// marked it, and the receiving QP answers with a CNP).
    fn deliver_ecn(&mut self, p: &Pkt, ecn: roce_wire::Ecn) {
        let to = p.to;
        if self.trace {
            let hex: String = p.bytes.iter().take(48).map(|b| format!("{b:02x}")).collect();
            eprintln!("  to {to} ({} bytes): {hex}", p.bytes.len());
        }
        let side = &mut self.sides[to];
        let (src, dst) = (IpAddr::V4(ADDR[1 - to]), IpAddr::V4(ADDR[to]));
        let kept = side.qp().resp.reorder.len();
        side.dev.handle_datagram_ecn(self.now, src, p.src_port, dst, None, ecn, &p.bytes);
        // Requests kept ahead of a gap this packet filled are answered now,
        // and a gap still behind kept requests is NAKed besides the packet's
        // own answer.
        let after = side.qp().resp.reorder.len();
        side.since_poll += 1 + kept.saturating_sub(after) + usize::from(after > 0);
        self.stats.delivered += 1;
        self.remember(p);
    }

    /// A PSN for a forged packet toward `to`: near what its responder
    /// expects (requests) or near its requester's window (responses), or far.
    fn pick_psn(&self, to: usize, dir: Direction, b: &mut Bytes<'_>) -> Psn {
        let q = self.qp(to);
        let m = b.u8();
        let base = match dir {
            Direction::Request => q.resp.psn,
            Direction::Response => match m >> 6 {
                0 => q.comp.psn,
                1 => q.req.psn.sub(1),
                2 => q.req.sent_psn.sub(1),
                _ if !q.sq.is_empty() => {
                    let w = q.sq.get(q.sq.consumer);
                    if m & 0x10 != 0 { w.last_psn } else { w.first_psn }
                }
                _ => q.comp.psn,
            },
        };
        let delta = match m & 15 {
            0..=5 => 0,
            6 => 1,
            7 => u32::MAX,
            8 => 2,
            9 => u32::MAX - 1,
            10 => i32::from(b.u8() as i8) as u32,
            11 => b.u32(),
            12 => Psn::HALF - 1,
            13 => Psn::HALF,
            14 => Psn::HALF + 1,
            _ => u32::from(b.u8()) * 3,
        };
        base.add(delta)
    }

    /// An address in (or near) one of side `t`'s regions, or a wild one.
    /// Returns the region index too.
    fn pick_va(&self, t: usize, b: &mut Bytes<'_>) -> (usize, u64) {
        let s = &self.sides[t];
        let j = usize::from(b.u8()) % NMR;
        let (iova, len) = (s.iova[j], MRS[j].len as u64);
        let end = iova.wrapping_add(len);
        let m = b.u8();
        let k = u64::from(m >> 4);
        let va = match m & 15 {
            0..=4 => iova + u64::from(b.u16()) % (len + 1),
            5 => iova,
            6 => end.wrapping_sub(k),
            7 => end,
            8 => end.wrapping_add(k),
            9 => iova.wrapping_sub(k + 1),
            10 => u64::MAX - k,
            11 => b.u64(),
            12 => iova.wrapping_add(k * self.mtu()),
            13 => k,
            _ => (iova + u64::from(b.u16()) % (len + 1)) & !7,
        };
        (j, va)
    }

    /// An R_Key: mostly region `j`'s, sometimes another's or a wrong one.
    fn pick_rkey(&self, t: usize, j: usize, b: &mut Bytes<'_>) -> u32 {
        let s = &self.sides[t];
        let m = b.u8();
        match m & 7 {
            0..=4 => s.keys[j],
            5 => s.keys[usize::from(m >> 3) % NMR],
            6 => s.keys[j] ^ (1 << (m >> 3)),
            _ => b.u32(),
        }
    }

    fn pick_reth(&self, t: usize, b: &mut Bytes<'_>) -> RethRepr {
        let (j, va) = self.pick_va(t, b);
        let rkey = self.pick_rkey(t, j, b);
        let rest = self.sides[t].iova[j].wrapping_add(MRS[j].len as u64).wrapping_sub(va) as u32;
        let mtu = self.mtu() as u32;
        let m = b.u8();
        let dma_len = match m & 15 {
            0..=3 => rest,
            4 => u32::from(b.u8()),
            5 => mtu,
            6 => mtu * u32::from(m >> 4),
            7 => 0,
            8 => u32::MAX,
            9 => 1 << 31,
            10 => (1 << 31) + mtu,
            11 => b.u32(),
            12 => rest.wrapping_add(1),
            13 => rest.wrapping_sub(1),
            _ => u32::from(b.u16()),
        };
        RethRepr { va, rkey, dma_len }
    }

    fn pick_atomic(&self, t: usize, b: &mut Bytes<'_>) -> AtomicEthRepr {
        let s = &self.sides[t];
        let j = usize::from(b.u8()) % NMR;
        let (iova, len) = (s.iova[j], MRS[j].len as u64);
        let end = iova.wrapping_add(len);
        let m = b.u8();
        let inside = (u64::from(b.u16()) % len.max(1)) & !7;
        let va = match m & 7 {
            0..=3 => iova.wrapping_add(inside),
            4 => iova.wrapping_add(inside) + u64::from(m >> 3) % 7 + 1,
            5 => end.wrapping_sub([8, 4, 0, 16][usize::from(m >> 3) & 3]),
            6 => u64::MAX - 7,
            _ => b.u64(),
        };
        let rkey = self.pick_rkey(t, j, b);
        // A compare value that matches the memory half the time.
        let current = if va >= iova && va.checked_add(8).is_some_and(|e| e <= end) && len >= 8 {
            let at = s.off[j] + (va - iova) as usize;
            let v = s.mem.get(at, 8);
            u64::from_ne_bytes(v.try_into().unwrap_or([0; 8]))
        } else {
            0
        };
        let compare = if m & 0x40 != 0 { current } else { b.u64() };
        let swap_add = if m & 0x80 != 0 { u64::from(b.u8()) } else { b.u64() };
        AtomicEthRepr { va, rkey, swap_add, compare }
    }

    fn pick_aeth(&self, b: &mut Bytes<'_>) -> AethRepr {
        let m = b.u8();
        let v = m >> 3;
        let syndrome = match m & 7 {
            0..=2 => roce_wire::Syndrome::Ack { credits: v },
            3 => roce_wire::Syndrome::RnrNak { timer: RnrTimer(v) },
            4 | 5 => roce_wire::Syndrome::Nak(roce_wire::NakCode::from_code(v % 6)),
            6 => roce_wire::Syndrome::from_byte(b.u8()),
            _ => roce_wire::Syndrome::Nak(roce_wire::NakCode::PsnSequenceError),
        };
        AethRepr { syndrome, msn: b.u32() & Psn::MASK }
    }

    /// A payload length for a packet at `pos` in its message.
    fn pick_len(&self, pos: Position, b: &mut Bytes<'_>) -> usize {
        let mtu = self.mtu() as usize;
        let m = b.u8();
        let any = usize::from(b.u16()) % (mtu + 16);
        match (pos, m & 7) {
            (_, 7) => any,
            (Position::First | Position::Middle, _) => mtu,
            (Position::Last, 0..=3) => 1 + any % mtu,
            (Position::Only, 0..=3) => any % (mtu + 1),
            (Position::Only, 4) => 0,
            (_, 4 | 5) => mtu,
            _ => 8,
        }
    }

    /// Flips bytes and rewrites the pad count of a packet, then (mostly)
    /// gives it a correct ICRC again.
    fn mutate(&self, to: usize, src_port: u16, bytes: &mut [u8], flags: u8, b: &mut Bytes<'_>) {
        if bytes.len() < 16 {
            return;
        }
        if flags & 0x10 != 0 {
            bytes[1] = (bytes[1] & !0x30) | ((b.u8() & 3) << 4);
        }
        if flags & 0x20 != 0 {
            for _ in 0..1 + b.u8() % 3 {
                let at = usize::from(b.u16()) % (bytes.len() - 4);
                bytes[at] ^= b.u8() | 1;
            }
        }
        if flags & 0xc0 != 0xc0 {
            self.fix_icrc(to, src_port, bytes);
        }
    }

    /// A forged packet from a template, with mutated fields.
    fn inject(&mut self, b: &mut Bytes<'_>) {
        let sel = b.u8();
        let to = usize::from(sel & 1);
        let pick = b.u8();
        let opcode =
            if sel & 0xc0 == 0xc0 { Opcode(pick) } else { Opcode(TEMPLATES[usize::from(pick) % TEMPLATES.len()]) };
        let Some(info) = opcode.info() else { return self.raw_to(to, b) };
        let psn = self.pick_psn(to, info.direction(), b);
        let dest_qpn = if sel & 0x3e == 0x3e { b.u32() & Psn::MASK } else { self.sides[to].qpn };
        let flags = b.u8();
        let mut bth = BthRepr::new(opcode, dest_qpn, psn);
        bth.ack_req = flags & 1 != 0;
        bth.solicited = flags & 2 != 0;
        bth.becn = flags & 4 != 0;
        if flags & 0x0c == 0x0c {
            bth.pkey = b.u16();
        }
        let mut ext = ExtRepr::default();
        for h in info.headers.iter() {
            match h {
                ExtHeader::Reth => ext.reth = Some(self.pick_reth(to, b)),
                ExtHeader::AtomicEth => ext.atomic_eth = Some(self.pick_atomic(to, b)),
                ExtHeader::Aeth => ext.aeth = Some(self.pick_aeth(b)),
                ExtHeader::AtomicAckEth => ext.atomic_ack_eth = Some(AtomicAckEthRepr { orig: b.u64() }),
                ExtHeader::ImmDt => ext.immdt = Some(ImmDtRepr { imm: b.u32() }),
                ExtHeader::Ieth => {
                    let j = usize::from(b.u8()) % NMR;
                    ext.ieth = Some(IethRepr { rkey: self.pick_rkey(to, j, b) });
                }
                ExtHeader::Deth => ext.deth = Some(DethRepr { qkey: b.u32(), src_qpn: b.u32() & Psn::MASK }),
                ExtHeader::Feth => {
                    let f = b.u8();
                    ext.feth = Some(FethRepr { selectivity_level: f & 3, placement_type: (f >> 2) & 3 });
                }
            }
        }
        if opcode == Opcode::RC_ATOMIC_WRITE
            && let Some(r) = ext.reth.as_mut()
        {
            // Mostly the one valid length, and an aligned target half the time.
            let k = b.u8();
            if k & 3 != 0 {
                r.dma_len = 8;
            }
            if k & 4 != 0 {
                r.va &= !7;
            }
        }
        let plen = match info.payload {
            PayloadRule::None => 0,
            PayloadRule::Exactly(n) => n,
            PayloadRule::Any => self.pick_len(info.position, b),
        };
        let payload = vec![b.u8(); plen];
        let Some(mut bytes) = self.emit(to, &PacketRepr { bth, ext }, &payload) else { return };
        let src_port = self.src_port(to);
        self.mutate(to, src_port, &mut bytes, flags, b);
        self.deliver(&Pkt { to, src_port, bytes });
    }

    /// An earlier packet again: as it was, with bytes flipped, or with
    /// another PSN.
    fn replay(&mut self, b: &mut Bytes<'_>) {
        if self.history.is_empty() {
            return;
        }
        let k = usize::from(b.u8()) % self.history.len();
        let mut p = self.history[self.history.len() - 1 - k].clone();
        let m = b.u8();
        match m & 3 {
            0 | 1 => {}
            2 => self.mutate(p.to, p.src_port, &mut p.bytes, m | 0x20, b),
            _ => {
                if p.bytes.len() >= 16 {
                    let psn = Psn::new(u32::from_be_bytes([0, p.bytes[9], p.bytes[10], p.bytes[11]]));
                    let d = i32::from(b.u8() as i8) as u32;
                    p.bytes[9..12].copy_from_slice(&psn.add(d).value().to_be_bytes()[1..]);
                    self.fix_icrc(p.to, p.src_port, &mut p.bytes);
                }
            }
        }
        self.deliver(&p);
    }

    /// A READ request that repeats part of an earlier READ's range (the
    /// duplicate-READ checks): PSN inside, at the end of or past the
    /// original, address and length moved with it, or the range stretched
    /// past the original's end, wrapped, or wild.
    fn reread(&mut self, b: &mut Bytes<'_>) {
        let k = usize::from(b.u8());
        let reads: Vec<&Pkt> = self
            .history
            .iter()
            .rev()
            .filter(|p| {
                Packet::new_checked(&p.bytes[..]).is_ok_and(|q| q.bth().opcode() == Opcode::RC_RDMA_READ_REQUEST)
            })
            .collect();
        let (to, psn, reth) = match reads.get(k % reads.len().max(1)) {
            Some(p) => {
                let q = Packet::new_checked(&p.bytes[..]).expect("filtered");
                let r = q.reth().expect("a READ request has a RETH");
                (p.to, q.bth().psn(), RethRepr { va: r.va(), rkey: r.rkey(), dma_len: r.dma_len() })
            }
            None => {
                // No READ yet: invent one on a region of a side.
                let to = k & 1;
                let q = self.qp(to);
                (to, q.resp.psn.sub(1 + (k as u32 >> 1)), self.pick_reth(to, b))
            }
        };
        let mtu = self.mtu();
        let npsn = u64::from(reth.dma_len).div_ceil(mtu).max(1);
        let m = b.u8();
        let j: u64 = match m & 7 {
            0 => 0,
            1 => 1 + u64::from(b.u8()) % npsn,
            2 => npsn - 1,
            3 => npsn,
            4 => u64::from(u32::MAX),
            5 => u64::from(b.u32()),
            6 => u64::from(Psn::HALF),
            _ => u64::from(b.u8()),
        };
        let shift = j.wrapping_mul(mtu);
        let va = reth.va.wrapping_add(shift).wrapping_add(match (m >> 3) & 3 {
            0 | 1 => 0,
            2 => i64::from(b.u8() as i8) as u64,
            _ => b.u64(),
        });
        let dma_len = match (m >> 5) & 7 {
            0 | 1 => reth.dma_len.wrapping_sub(shift as u32),
            2 => reth.dma_len,
            3 => reth.dma_len.wrapping_sub(shift as u32).wrapping_add(u32::from(b.u8())),
            4 => u32::MAX,
            5 => 0u32.wrapping_sub(shift as u32),
            6 => b.u32(),
            _ => reth.dma_len.wrapping_add(mtu as u32),
        };
        let rkey = if b.u8() & 7 == 7 { self.pick_rkey(to, usize::from(m) % NMR, b) } else { reth.rkey };
        let mut bth = BthRepr::new(Opcode::RC_RDMA_READ_REQUEST, self.sides[to].qpn, psn.add(j as u32));
        bth.ack_req = m & 1 != 0;
        let ext = ExtRepr { reth: Some(RethRepr { va, rkey, dma_len }), ..Default::default() };
        let Some(bytes) = self.emit(to, &PacketRepr { bth, ext }, &[]) else { return };
        let src_port = self.src_port(to);
        self.deliver(&Pkt { to, src_port, bytes });
    }

    /// Raw bytes from the input, sometimes made to reach the QP.
    fn raw(&mut self, b: &mut Bytes<'_>) {
        let to = usize::from(b.u8() & 1);
        self.raw_to(to, b);
    }

    fn raw_to(&mut self, to: usize, b: &mut Bytes<'_>) {
        let m = b.u8();
        let n = usize::from(b.u8());
        let mut bytes = b.take(n).to_vec();
        if m & 1 != 0 && bytes.len() >= 16 {
            // A version-0 BTH for our QP with the full P_Key, and a good ICRC.
            bytes[1] &= 0xf0;
            bytes[2] = 0xff;
            bytes[3] = 0xff;
            bytes[5..8].copy_from_slice(&self.sides[to].qpn.to_be_bytes()[1..]);
            let src_port = self.src_port(to);
            self.fix_icrc(to, src_port, &mut bytes);
        }
        let src_port = self.src_port(to);
        self.deliver(&Pkt { to, src_port, bytes });
    }

    // ----- the devices' own packets -----

    /// The next packet side `s` sends, checked and remembered.
    fn poll_one(&mut self, s: usize) -> Option<Pkt> {
        let side = &mut self.sides[s];
        let t = side.dev.poll_transmit(self.now, &mut self.buf)?;
        assert_eq!(t.src, IpAddr::V4(ADDR[s]));
        assert_eq!(t.dst, IpAddr::V4(ADDR[1 - s]));
        let bytes = self.buf[..t.len].to_vec();
        let p = Packet::new_checked(&bytes[..]).expect("the device emits well-formed packets");
        assert!(p.check_path_mtu(Some(self.cfg.mtu.bytes())).is_ok(), "the device emits packets that fit the path MTU");
        assert_eq!(p.bth().dest_qpn(), self.sides[1 - s].qpn, "the device sends only to its peer QP");
        let pkt = Pkt { to: 1 - s, src_port: t.src_port, bytes };
        self.remember(&pkt);
        Some(pkt)
    }

    fn send_on_wire(&mut self, p: Pkt) {
        let w = &mut self.wire[p.to];
        if w.len() == WIRE_CAP {
            w.pop_front();
        }
        w.push_back(p);
    }

    /// Up to `n` of side `s`'s packets onto the wire.
    fn pump(&mut self, s: usize, n: usize) {
        for _ in 0..n {
            let Some(p) = self.poll_one(s) else { break };
            self.send_on_wire(p);
        }
        self.sides[s].since_poll = self.qp(s).resp.responses.len();
    }

    /// Everything side `s` has to send, onto the wire. No livelock: without
    /// a packet delivered or a timer run, a device sends at most one
    /// window of requests (`MAX_UNACKED_PSNS`) and the packets of the
    /// responses it has queued (a READ response stream counts its PSNs).
    fn drain(&mut self, s: usize) -> usize {
        let q = self.qp(s);
        let responses: u64 = q
            .resp
            .responses
            .iter()
            .map(|r| match *r {
                Response::Read { psn, last_psn, .. } => psn.distance_to(last_psn).max(0) as u64 + 1,
                _ => 1,
            })
            .sum();
        let bound = u64::from(MAX_UNACKED_PSNS) + responses;
        let mut n = 0;
        while let Some(p) = self.poll_one(s) {
            n += 1;
            assert!(n <= bound, "livelock: side {s} sent more than {bound} packets without input");
            self.send_on_wire(p);
        }
        assert!(!self.qp(s).responder_has_work(), "side {s} has responses left after sending everything");
        self.sides[s].since_poll = 0;
        n as usize
    }

    /// One packet in flight toward a side: delivered, duplicated, dropped,
    /// or delivered with a byte changed; any of them, so the wire reorders.
    fn deliver_wire(&mut self, b: &mut Bytes<'_>) {
        let to = usize::from(b.u8() & 1);
        if self.wire[to].is_empty() {
            return;
        }
        let i = usize::from(b.u8()) % self.wire[to].len();
        let m = b.u8();
        let ecn = if m & 0x80 != 0 { roce_wire::Ecn::Ce } else { roce_wire::Ecn::Ect0 };
        match m & 7 {
            0..=4 => {
                let p = self.wire[to].remove(i).expect("index in range");
                self.deliver_ecn(&p, ecn);
            }
            5 => {
                let p = self.wire[to][i].clone();
                self.deliver_ecn(&p, ecn);
            }
            6 => {
                self.wire[to].remove(i);
            }
            _ => {
                let mut p = self.wire[to].remove(i).expect("index in range");
                self.mutate(p.to, p.src_port, &mut p.bytes, 0x20, b);
                self.deliver(&p);
            }
        }
    }

    /// Rounds of both devices sending everything and the wire delivering
    /// it in order, each packet's fate (deliver, drop, duplicate) from the
    /// input.
    fn exchange(&mut self, b: &mut Bytes<'_>) {
        let rounds = 1 + b.u8() % 8;
        let lossy = b.u8();
        for _ in 0..rounds {
            self.drain(0);
            self.drain(1);
            let mut fates = 0u8;
            for to in 0..2 {
                let mut k = 0;
                while let Some(p) = self.wire[to].pop_front() {
                    if k % 4 == 0 {
                        fates = if lossy & 1 != 0 { b.u8() } else { 0 };
                    }
                    match (fates >> (2 * (k % 4))) & 3 {
                        0 | 1 => self.deliver(&p),
                        2 => {}
                        _ => {
                            self.deliver(&p);
                            self.deliver(&p);
                        }
                    }
                    k += 1;
                }
            }
            self.check();
        }
    }

    // ----- time -----

    fn run_timers(&mut self) {
        for s in 0..2 {
            self.sides[s].dev.handle_timeout(self.now);
            if let Some(t) = self.sides[s].dev.poll_timeout() {
                assert!(t > self.now, "side {s}: a timer due at {:?} is left after handle_timeout", t - self.t0);
            }
        }
    }

    fn advance(&mut self, b: &mut Bytes<'_>) {
        let m = b.u8();
        let k = u64::from(b.u8()) + 1;
        let dt = match m & 3 {
            0 => Duration::from_micros(k),
            1 => Duration::from_micros(100 * k),
            2 => {
                let next = self.sides.iter().filter_map(|s| s.dev.poll_timeout()).min();
                next.map_or(Duration::from_millis(1), |t| t.saturating_duration_since(self.now))
            }
            _ => Duration::from_millis(10 * k),
        };
        self.now += dt;
        self.run_timers();
    }

    /// Moves to the next timer and runs it; false if none is armed.
    fn advance_to_next_timer(&mut self) -> bool {
        let Some(t) = self.sides.iter().filter_map(|s| s.dev.poll_timeout()).min() else { return false };
        self.now = self.now.max(t);
        self.run_timers();
        true
    }

    // ----- work requests -----

    /// A local SGE inside one of side `s`'s regions (its key, sometimes
    /// another region's). Returns the region too.
    fn pick_sge(&self, s: usize, b: &mut Bytes<'_>) -> (usize, Sge) {
        let side = &self.sides[s];
        let m = b.u8();
        // Mostly the writable regions.
        let j = [0, 0, 2, 4, 5, 1, 3, 6][usize::from(m & 7)];
        let len = MRS[j].len as u64;
        let off = u64::from(b.u16()) % (len + 1);
        let room = len - off;
        let l = match (m >> 3) & 3 {
            0 => room.min(u64::from(b.u8())),
            1 => room.min(self.mtu() * u64::from(b.u8() & 7)),
            2 => room,
            _ => room.min(u64::from(b.u16())),
        };
        let lkey = if m >> 5 == 7 { side.keys[usize::from(b.u8()) % NMR] } else { side.keys[j] };
        (j, Sge { addr: side.iova[j] + off, length: l as u32, lkey })
    }

    /// A remote address for a WR of side `s`: mostly inside one of the
    /// peer's regions with its key.
    fn pick_remote(&self, s: usize, len: u64, b: &mut Bytes<'_>) -> (u64, u32) {
        let t = 1 - s;
        let m = b.u8();
        if m & 3 == 3 {
            let (j, va) = self.pick_va(t, b);
            return (va, self.pick_rkey(t, j, b));
        }
        let j = [0, 0, 4, 5, 1, 2, 3, 6][usize::from((m >> 2) & 7)];
        let rlen = MRS[j].len as u64;
        let room = rlen.saturating_sub(len.min(rlen));
        let off = (u64::from(b.u16()) % (room + 1)) & if m & 0x20 != 0 { !7 } else { !0 };
        (self.sides[t].iova[j] + off, self.sides[t].keys[j])
    }

    /// Polls side `s`'s CQ, then checks that every WR the engine retired
    /// either completed or was unsignaled and successful.
    fn poll(&mut self, s: usize) {
        let mut out = [Wc::new(0, WcStatus::Success, WcOpcode::Send, 0); 16];
        loop {
            let side = &mut self.sides[s];
            let n = side.dev.poll_cq(side.cq, &mut out).unwrap();
            for wc in &out[..n] {
                self.check_wc(s, wc);
            }
            if n < out.len() {
                break;
            }
        }
        let side = &mut self.sides[s];
        let (sq_done, rq_done) = {
            let q = side.qp();
            (q.sq.consumer, q.rq.consumer)
        };
        while side.sq.front().is_some_and(|p| p.index < sq_done) {
            let p = side.sq.pop_front().expect("front checked");
            assert!(!p.signaled, "side {s}: signaled WR {} retired without a completion", p.wr_id);
            side.release(&p);
        }
        if let Some(p) = side.rq.front() {
            assert!(p.index >= rq_done, "side {s}: receive {} retired without a completion", p.wr_id);
        }
    }

    /// A completion is for the oldest outstanding WR of its queue (skipping
    /// unsignaled ones), once, and consistent with it.
    fn check_wc(&mut self, s: usize, wc: &Wc) {
        if self.trace {
            eprintln!("  side {s}: {:?} {:?} wr {} len {}", wc.status, wc.opcode, wc.wr_id, wc.byte_len);
        }
        if wc.status == WcStatus::Success {
            self.stats.completed += 1;
        }
        let side = &mut self.sides[s];
        assert_eq!(wc.qp_num.get(), side.qpn, "side {s}: a completion for another QP");
        if wc.opcode.is_recv() {
            let p = side.rq.pop_front().unwrap_or_else(|| panic!("side {s}: receive completion {wc:?} for no receive"));
            assert_eq!(p.wr_id, wc.wr_id, "side {s}: receive completions in posting order, once each");
            if wc.status == WcStatus::Success && wc.opcode == WcOpcode::Recv {
                assert!(u64::from(wc.byte_len) <= p.len, "side {s}: {wc:?} longer than its receive of {}", p.len);
            }
            side.release(&p);
            return;
        }
        loop {
            let p = side.sq.pop_front().unwrap_or_else(|| panic!("side {s}: send completion {wc:?} for no WR"));
            if p.wr_id == wc.wr_id {
                assert_eq!(wc.opcode, wc_opcode(p.opcode), "side {s}: {wc:?} for a {:?}", p.opcode);
                // READ: the bytes read; ATOMIC WRITE: 8; FLUSH: the length asked for.
                let sized = matches!(p.opcode, WrOpcode::RdmaRead | WrOpcode::AtomicWrite | WrOpcode::Flush);
                if wc.status == WcStatus::Success && sized {
                    assert_eq!(u64::from(wc.byte_len), p.len, "side {s}: {wc:?} for a {:?}", p.opcode);
                }
                side.release(&p);
                return;
            }
            assert!(!p.signaled, "side {s}: {wc:?} completes before signaled WR {} did", p.wr_id);
            side.release(&p);
        }
    }

    fn post_send(&mut self, b: &mut Bytes<'_>) {
        let m = b.u8();
        let s = usize::from(m & 1);
        self.poll(s);
        // Mostly operations that succeed; SEND_WITH_INV and LOCAL_INV of a
        // region's key fail (only windows can be invalidated) and end the QP;
        // FLUSH and ATOMIC WRITE succeed or not by the rights, the alignment
        // and the operands drawn.
        let ops = [
            WrOpcode::Send,
            WrOpcode::Send,
            WrOpcode::Send,
            WrOpcode::SendWithImm,
            WrOpcode::RdmaWrite,
            WrOpcode::RdmaWrite,
            WrOpcode::RdmaWrite,
            WrOpcode::RdmaWriteWithImm,
            WrOpcode::RdmaRead,
            WrOpcode::RdmaRead,
            WrOpcode::RdmaRead,
            WrOpcode::AtomicCmpAndSwp,
            WrOpcode::AtomicFetchAndAdd,
            WrOpcode::AtomicFetchAndAdd,
            WrOpcode::SendWithInv,
            WrOpcode::LocalInv,
            WrOpcode::Flush,
            WrOpcode::Flush,
            WrOpcode::AtomicWrite,
            WrOpcode::AtomicWrite,
        ];
        let opcode = ops[usize::from(m >> 1) % ops.len()];
        let atomic = matches!(opcode, WrOpcode::AtomicCmpAndSwp | WrOpcode::AtomicFetchAndAdd);
        let f = b.u8();
        let mut sges = Vec::new();
        let mut inline = Vec::new();
        // FLUSH: no payload (an SGE one time in eight, refused at post).
        // ATOMIC WRITE: 8 inline bytes (SGEs or another count one time in
        // eight, refused).
        let placement_op = matches!(opcode, WrOpcode::Flush | WrOpcode::AtomicWrite);
        let g = if placement_op { b.u8() } else { 0 };
        if placement_op {
            match (opcode, g & 15) {
                (WrOpcode::Flush, 14 | 15) => sges.push(self.pick_sge(s, b).1),
                (WrOpcode::Flush, _) => {}
                (_, 15) => sges.push(self.pick_sge(s, b).1),
                (_, 14) => {
                    let n = usize::from(b.u8() % 17);
                    inline = b.take(n).to_vec();
                }
                _ => inline = b.u64().to_le_bytes().to_vec(),
            }
        } else if atomic {
            let (_, mut sge) = self.pick_sge(s, b);
            let want = if f & 0x40 != 0 { u32::from(b.u8() % 17) } else { 8 };
            sge.length = sge.length.min(want);
            sges.push(sge);
        } else if f & 0x20 != 0 && matches!(opcode, WrOpcode::Send | WrOpcode::RdmaWrite | WrOpcode::SendWithImm) {
            let n = usize::from(b.u8()) % (MAX_INLINE as usize + 1);
            inline = b.take(n).to_vec();
        } else {
            for _ in 0..b.u8() % 4 {
                sges.push(self.pick_sge(s, b).1);
            }
        }
        let len: u64 =
            if inline.is_empty() { sges.iter().map(|g| u64::from(g.length)).sum() } else { inline.len() as u64 };
        let payload = if inline.is_empty() { Payload::Sges(&sges) } else { Payload::Inline(&inline) };
        let flush = (opcode == WrOpcode::Flush).then(|| Self::pick_flush(g, b));
        let mut flags = SendFlags::EMPTY;
        if f & 3 != 0 {
            flags |= SendFlags::SIGNALED;
        }
        if f & 4 != 0 {
            flags |= SendFlags::FENCE;
        }
        if f & 8 != 0 {
            flags |= SendFlags::SOLICITED;
        }
        if !inline.is_empty() {
            flags |= SendFlags::INLINE;
        }
        let wr_id = self.next_wr_id;
        let mut wr = SendWr::new(wr_id, opcode, flags, payload);
        // The length of remote memory the WR covers.
        let remote_len = match (opcode, flush) {
            (WrOpcode::AtomicWrite, _) => 8,
            (_, Some(fl)) => u64::from(fl.len),
            _ => len,
        };
        let (mut remote_addr, rkey) = self.pick_remote(s, remote_len, b);
        if opcode == WrOpcode::AtomicWrite {
            // Aligned, or misaligned on purpose one time in four.
            remote_addr &= !7;
            if g & 0x30 == 0x10 {
                remote_addr = remote_addr.wrapping_add(u64::from(g >> 6) * 2 + 1);
            }
        }
        wr.remote_addr = remote_addr;
        wr.rkey = rkey;
        // A FLUSH without its operands, or another WR with them, is refused.
        wr.flush = if g & 0xf0 == 0xf0 { flush.map_or(Some(Flush::default()), |_| None) } else { flush };
        wr.imm_data = b.u32();
        wr.invalidate_rkey = if f & 0x80 != 0 { b.u32() } else { rkey };
        wr.compare_add = b.u64();
        wr.swap = b.u64();
        // Local bytes the device may write: READ and atomic results. ATOMIC
        // WRITE and FLUSH write none here (an ATOMIC WRITE's 8 remote bytes
        // need REMOTE_WRITE, so they land only in a `Class::Remote` region,
        // like a WRITE's; a FLUSH writes nothing anywhere).
        let writes = if matches!(opcode, WrOpcode::RdmaRead) || atomic { self.ranges(s, &sges) } else { Vec::new() };
        let side = &mut self.sides[s];
        let index = side.qp().sq.producer;
        // What a successful completion reports as byte_len.
        let len = match opcode {
            WrOpcode::AtomicWrite => 8,
            WrOpcode::Flush => wr.flush.map_or(0, |fl| u64::from(fl.len)),
            _ => len,
        };
        if side.dev.post_send(side.qpn.into(), &wr).is_ok() {
            self.next_wr_id += 1;
            let p = Posted { wr_id, index, opcode, signaled: flags.contains(SendFlags::SIGNALED), len, writes };
            for &(a, e) in &p.writes {
                for r in &mut side.refs[a..e] {
                    *r += 1;
                }
            }
            side.sq.push_back(p);
        }
    }

    /// A FLUSH's operands: mostly global visibility of a range or of the
    /// region, sometimes persistence (no region grants it), no placement
    /// type, reserved bits or a reserved selectivity level (refused at post);
    /// lengths to the region's end, small, 0 or wild.
    fn pick_flush(g: u8, b: &mut Bytes<'_>) -> Flush {
        let k = b.u8();
        let placement = match k & 15 {
            0..=11 => placement::GLOBAL,
            12 => placement::PERSISTENT,
            13 => placement::ALL,
            14 => 0,
            _ => b.u8(),
        };
        let selectivity = match (k >> 4) & 3 {
            0 | 1 => selectivity::RANGE,
            2 => selectivity::REGION,
            _ if k & 1 != 0 => b.u8(),
            _ => selectivity::REGION,
        };
        let peer = MRS[[0, 1, 5, 4][usize::from(g >> 6)]].len as u32;
        let len = match k >> 6 {
            0 => u32::from(b.u16()) % (peer + 1),
            1 => u32::from(b.u8()),
            2 => [0, 1, peer, peer + 1][usize::from(g >> 3) & 3],
            _ => b.u32(),
        };
        Flush { placement, selectivity, len }
    }

    /// The buffer ranges of those SGEs whose L_Key is the key of the
    /// region they lie in: the device may write them. (The harness's SGEs
    /// always lie inside one region; one with another region's key must be
    /// refused, so its bytes must not change.)
    fn ranges(&self, s: usize, sges: &[Sge]) -> Vec<(usize, usize)> {
        let side = &self.sides[s];
        sges.iter()
            .filter_map(|g| {
                let len = u64::from(g.length);
                let j = (0..NMR).find(|&j| {
                    g.addr >= side.iova[j] && g.addr - side.iova[j] + len <= MRS[j].len as u64 && side.keys[j] == g.lkey
                })?;
                Some(side.abs(j, g.addr, len))
            })
            .collect()
    }

    fn post_recv_sges(&mut self, s: usize, sges: &[Sge]) -> bool {
        let writes = self.ranges(s, sges);
        let wr_id = self.next_wr_id;
        let side = &mut self.sides[s];
        let index = side.qp().rq.producer;
        let queued = side.qp().resp.responses.len();
        if side.dev.post_recv(side.qpn.into(), &RecvWr { wr_id, sg_list: sges }).is_err() {
            return false;
        }
        // A receive WQE posted after the credits ran out is announced by
        // one ACK (`Qp::announce_credits`): an answer to the post.
        side.since_poll += side.qp().resp.responses.len() - queued;
        self.next_wr_id += 1;
        let len = sges.iter().map(|g| u64::from(g.length)).sum();
        let p = Posted { wr_id, index, opcode: WrOpcode::Send, signaled: true, len, writes };
        for &(a, e) in &p.writes {
            for r in &mut side.refs[a..e] {
                *r += 1;
            }
        }
        side.rq.push_back(p);
        true
    }

    fn post_recv(&mut self, b: &mut Bytes<'_>) {
        let s = usize::from(b.u8() & 1);
        self.poll(s);
        let mut sges = Vec::new();
        for _ in 0..b.u8() % 4 {
            sges.push(self.pick_sge(s, b).1);
        }
        self.post_recv_sges(s, &sges);
    }

    // ----- the oracle -----

    /// Checks memory and state of both sides (after every step).
    pub(crate) fn check(&mut self) {
        for s in 0..2 {
            self.check_memory(s);
            self.check_state(s);
        }
    }

    /// Guards never change; a frozen region never changes; a local-only
    /// region changes only under outstanding local SGEs.
    fn check_memory(&mut self, s: usize) {
        let side = &mut self.sides[s];
        let total = side.initial.len();
        let cur = side.mem.get(0, total);
        let mut guard_start = 0;
        for (j, m) in MRS.iter().enumerate() {
            let (a, e) = (side.off[j], side.off[j] + m.len);
            assert!(
                cur[guard_start..a] == side.initial[guard_start..a],
                "side {s}: the guard before region {} changed",
                m.name
            );
            guard_start = e;
            match side.class[j] {
                Class::Remote => {}
                Class::Frozen => {
                    assert!(
                        cur[a..e] == side.initial[a..e],
                        "side {s}: region {} has no write access but changed",
                        m.name
                    )
                }
                Class::Local => {
                    if cur[a..e] != side.shadow[a..e] {
                        let changed = (a..e).find(|&k| cur[k] != side.shadow[k] && side.refs[k] == 0);
                        assert!(
                            changed.is_none(),
                            "side {s}: byte {:?} of region {} (local write only) changed with no WR of ours over it",
                            changed.map(|k| k - a),
                            m.name
                        );
                    }
                }
            }
        }
        assert!(cur[guard_start..] == side.initial[guard_start..], "side {s}: the guard after the last region changed");
        side.shadow = cur;
    }

    /// The QP's state stays within what its attributes allow.
    fn check_state(&self, s: usize) {
        let side = &self.sides[s];
        let q = side.qp();
        let mtu = q.mtu();
        assert!(q.sq.consumer <= q.sq.next && q.sq.next <= q.sq.producer, "side {s}: send queue indexes out of order");
        assert!(q.sq.len() <= u64::from(q.sq.depth()));
        assert!(q.rq.len() <= u64::from(q.rq.depth()));
        assert!(
            q.req.rd_atomic <= u32::from(q.attr.max_rd_atomic),
            "side {s}: {} READ/atomic outstanding, max_rd_atomic {}",
            q.req.rd_atomic,
            q.attr.max_rd_atomic
        );
        assert!(
            q.resp.resources.len() <= usize::from(q.attr.max_dest_rd_atomic.max(1)),
            "side {s}: {} responder resources, max_dest_rd_atomic {}",
            q.resp.resources.len(),
            q.attr.max_dest_rd_atomic
        );
        assert!(q.comp.retry_left <= q.attr.retry_cnt && q.comp.rnr_left <= q.attr.rnr_retry);
        if matches!(q.state(), QpState::Rts | QpState::Sqd) {
            assert!(!q.comp.psn.after(q.req.sent_psn), "side {s}: PSNs acknowledged beyond the last one sent");
            let outstanding = q.comp.psn.distance_to(q.req.sent_psn) as u64;
            assert!(
                outstanding <= u64::from(MAX_UNACKED_PSNS) + MAX_WR_LEN.div_ceil(mtu),
                "side {s}: {outstanding} PSNs unacknowledged"
            );
        }
        // At most one answer per packet, and one CNP per (marked) packet.
        let cnps = q.resp.responses.iter().filter(|r| matches!(r, Response::Cnp)).count();
        assert!(
            q.resp.responses.len() - cnps <= side.since_poll && cnps <= side.since_poll,
            "side {s}: {} responses ({cnps} CNPs) queued after {} packets",
            q.resp.responses.len(),
            side.since_poll
        );
        let max_pkts = MAX_MR_LEN.div_ceil(mtu).max(1);
        for r in &q.resp.responses {
            if let Response::Read { psn, last_psn, grant, remaining, .. } = *r {
                let span = psn.distance_to(last_psn);
                assert!(
                    span >= 0 && (span as u64) < max_pkts,
                    "side {s}: a READ response stream of {span} PSNs from {psn:?}"
                );
                assert!(remaining <= MAX_MR_LEN, "side {s}: a READ response of {remaining} bytes");
                match grant {
                    Some(g) => self.check_grant(s, g, remaining, RR, "READ response"),
                    None => assert_eq!(remaining, 0, "side {s}: READ response bytes without a grant"),
                }
            }
        }
        if let Some(InMessage::Write { grant, remaining }) = q.resp.current {
            self.check_grant(s, grant, remaining, RW, "WRITE");
        }
        if let Some(t) = side.dev.poll_timeout() {
            assert!(t <= self.now + self.max_timer, "side {s}: a timer {:?} ahead", t - self.now);
        }
    }

    /// A grant the responder holds lies in a region that grants `right`
    /// (and the QP too), with `len` bytes left inside it.
    fn check_grant(&self, s: usize, g: crate::mr::Grant, len: u64, right: u32, what: &str) {
        let side = &self.sides[s];
        let j = (0..NMR)
            .find(|&j| side.regions[j] == g.region)
            .unwrap_or_else(|| panic!("side {s}: a {what} into memory that is no region"));
        assert!(
            MRS[j].access & right != 0 && self.cfg.access[s] & right != 0,
            "side {s}: a {what} into region {} without the right",
            MRS[j].name
        );
        assert!(
            g.offset.checked_add(len).is_some_and(|e| e <= MRS[j].len as u64),
            "side {s}: a {what} of {len} bytes at offset {} of region {} ({} bytes)",
            g.offset,
            MRS[j].name,
            MRS[j].len
        );
    }

    /// The script is over: a lossless exchange, with receives posted on
    /// both sides, must go quiet, and then every send WR of a QP that can
    /// make progress (a retransmit timer, READs allowed) has completed.
    pub(crate) fn finish(&mut self) {
        let mut quiet = false;
        for _ in 0..FINAL_ROUNDS {
            for s in 0..2 {
                self.poll(s);
                while self.sides[s].qp().state() != QpState::Err
                    && self.sides[s].qp().rq.len() < u64::from(self.cfg.rq_depth)
                {
                    let side = &self.sides[s];
                    let sges = [
                        Sge { addr: side.iova[0], length: MRS[0].len as u32, lkey: side.keys[0] },
                        Sge { addr: side.iova[4], length: MRS[4].len as u32, lkey: side.keys[4] },
                    ];
                    if !self.post_recv_sges(s, &sges) {
                        break;
                    }
                }
            }
            let mut moved = self.drain(0) + self.drain(1) > 0;
            for to in 0..2 {
                while let Some(p) = self.wire[to].pop_front() {
                    self.deliver(&p);
                    moved = true;
                }
            }
            self.check();
            if !moved && !self.advance_to_next_timer() {
                quiet = true;
                break;
            }
        }
        assert!(quiet, "no quiescence after {FINAL_ROUNDS} rounds of lossless exchange");
        for s in 0..2 {
            self.poll(s);
            let q = self.sides[s].qp();
            if self.cfg.timeout != 0 && self.cfg.max_rd_atomic[s] > 0 && q.state() == QpState::Rts {
                assert!(
                    q.sq.is_empty(),
                    "side {s}: {} send WRs never complete on a quiet, lossless connection (comp {:?} req {:?} sent {:?}; next WQE {:?} SSN {}, {:?})",
                    q.sq.len(),
                    q.comp.psn,
                    q.req.psn,
                    q.req.sent_psn,
                    q.sq.get(q.sq.next).opcode,
                    q.sq.get(q.sq.next).ssn,
                    q.req.credits
                );
            }
        }
    }
}

/// RESET -> INIT -> RTR -> RTS for QP `qpn` of side `i` toward `peer`.
fn connect(dev: &mut Device, qpn: u32, peer: u32, i: usize, cfg: &Config) {
    use crate::qp_state::required_mask;
    let mut a = QpAttr {
        qp_state: QpState::Init,
        qp_access_flags: AccessFlags(cfg.access[i]),
        pkey_index: 0,
        port_num: 1,
        ..QpAttr::default()
    };
    dev.modify_qp(qpn.into(), &a, required_mask(QpState::Reset, QpState::Init, QpType::Rc).unwrap()).unwrap();
    a.qp_state = QpState::Rtr;
    a.path_mtu = cfg.mtu;
    a.dest_qp_num = Qpn::from(peer);
    a.rq_psn = Psn::new(cfg.sq_psn[1 - i]);
    a.max_dest_rd_atomic = cfg.max_dest_rd_atomic[i];
    a.min_rnr_timer = cfg.min_rnr_timer;
    a.ah_attr =
        AhAttr { dest: IpAddr::V4(ADDR[1 - i]), sgid_index: 0, hop_limit: 64, traffic_class: 0, sl: 0, flow_label: 0 };
    dev.modify_qp(qpn.into(), &a, required_mask(QpState::Init, QpState::Rtr, QpType::Rc).unwrap()).unwrap();
    a.qp_state = QpState::Rts;
    a.sq_psn = Psn::new(cfg.sq_psn[i]);
    a.timeout = cfg.timeout;
    a.retry_cnt = cfg.retry_cnt;
    a.rnr_retry = cfg.rnr_retry;
    a.max_rd_atomic = cfg.max_rd_atomic[i];
    dev.modify_qp(qpn.into(), &a, required_mask(QpState::Rtr, QpState::Rts, QpType::Rc).unwrap()).unwrap();
}
