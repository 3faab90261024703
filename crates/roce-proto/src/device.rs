//! A softroce device: the object tables and the sans-IO entry points.
//!
//! Inputs are verbs (`post_send`, `modify_qp`, ...) and calls carrying `now`:
//! [`Device::handle_datagram`] and [`Device::handle_timeout`]. Outputs are
//! pulled: [`Device::poll_transmit`], [`Device::poll_timeout`],
//! [`Device::poll_cq`] and the event queues. The device does no I/O, spawns
//! no thread and reads the clock only once, at creation (a time stamp for
//! verbs called before any time is given; verbs arm no timers), so every
//! retransmission can be replayed on virtual time (quinn-proto's model).

use std::collections::{BTreeMap, VecDeque};
use std::net::IpAddr;
use std::time::Instant;

use roce_wire::{
    Direction, Ecn, IcrcCheck, IcrcContext, IcrcHasher, IcrcPolicy, IpContext, Packet, ROCE_V2_UDP_PORT, Transport,
};

use crate::attr::{AhAttr, QpAttr, QpInitAttr};
use crate::counters::Counters;
use crate::cq::{Arm, Cq, Moderation};
use crate::ctx::{AsyncEvent, Ctx};
use crate::devattr::{DeviceAttr, PortAttr};
use crate::handle::{CqHandle, PdHandle, Qpn, SrqHandle};
use crate::mcast::{self, MULTICAST_QPN, McastError, McastLimits, McastTable};
use crate::mem::Region;
use crate::mr::{MrError, MrTable, MwBindInfo, MwType};
use crate::outgoing::Outgoing;
use crate::qp::Qp;
use crate::qp_state::ModifyError;
use crate::queue::PostError;
use crate::responder::Origin;
use crate::srq::Srq;
use crate::timers::TimerKind;
use crate::verbs::{AccessFlags, QpAttrMask, QpState, QpType, SendFlags, WrOpcode};
use crate::wr::{MwBind, RecvWr, SendWr, Wc};

pub use crate::devattr::Limits;

/// How to build a device.
#[derive(Debug, Clone)]
pub struct DeviceConfig {
    /// The GID table: index -> our address.
    pub gids: Vec<IpAddr>,
    /// Seed of the key generator (deterministic simulations).
    pub seed: u64,
    /// ICRC policy for received packets.
    pub icrc_policy: IcrcPolicy,
    /// The port's active MTU: UD QPs use it (they have no path MTU attribute).
    pub active_mtu: crate::attr::Mtu,
    /// Limits.
    pub limits: Limits,
    /// The UDP source port of every packet. A UDP socket sends from the one
    /// port it is bound to, and the ICRC covers it, so a socket driver sets
    /// this to that port. `None`: each QP uses rxe's port derived from the
    /// QPN pair (ECMP entropy), for simulations and raw sockets.
    pub udp_src_port: Option<u16>,
}

/// A scatter-gather datagram to send (see [`Device::poll_transmit_gather`]):
/// the UDP payload is the head in the caller's buffer, the pieces, `pad_len`
/// zero bytes, then the ICRC ([`TransmitGather::icrc`], written
/// little-endian). `info` and `dest_qpn` say what
/// the packet is, so a sender chooses its route and batching without
/// parsing the headers the engine just wrote.
#[derive(Clone)]
pub struct TransmitGather {
    /// The packet's opcode: its message position, request or response.
    pub info: &'static roce_wire::OpcodeInfo,
    /// The destination QP (its BTH's).
    pub dest_qpn: crate::Qpn,
    /// Our address.
    pub src: IpAddr,
    /// The peer's address (port 4791).
    pub dst: IpAddr,
    /// UDP source port.
    pub src_port: u16,
    /// Bytes of the buffer that start the packet.
    pub head_len: usize,
    /// Zero bytes after the pieces.
    pub pad_len: usize,
    /// Whole UDP payload length, ICRC included.
    pub len: usize,
    /// The ICRC so far: the IP/UDP pseudo-header (see [`TransmitGather::icrc`]).
    pseudo: IcrcHasher,
}

impl TransmitGather {
    /// The packet's ICRC over its headers `head` (from the BTH on), the
    /// `payload` pieces and the pad: what the ICRC still needs, computed
    /// only by a sender that sends or records it (a link between local
    /// devices skips it). Each call starts from the pseudo-header, so a
    /// second one gives the same value.
    pub fn icrc<'p>(&self, head: &[u8], payload: impl IntoIterator<Item = &'p [u8]>) -> u32 {
        const PAD: [u8; 4] = [0; 4];
        let mut h = self.pseudo.clone();
        if let Some((bth, rest)) = head.split_first_chunk::<{ roce_wire::bth::LEN }>() {
            h.update_bth(bth);
            h.update(rest);
        }
        payload.into_iter().for_each(|p| h.update(p));
        h.update(&PAD[..self.pad_len.min(PAD.len())]);
        h.finish()
    }
}

impl std::fmt::Debug for TransmitGather {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TransmitGather")
            .field("opcode", &self.info.name)
            .field("dest_qpn", &self.dest_qpn)
            .field("dst", &self.dst)
            .field("head_len", &self.head_len)
            .field("pad_len", &self.pad_len)
            .field("len", &self.len)
            .finish()
    }
}

/// A datagram to send: UDP payload `buf[..len]` from `src:src_port` to `dst:4791`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Transmit {
    /// Our address.
    pub src: IpAddr,
    /// The peer's address.
    pub dst: IpAddr,
    /// UDP source port.
    pub src_port: u16,
    /// Bytes written.
    pub len: usize,
}

/// Why a verb failed (an errno in the C API).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum VerbError {
    /// No object with this handle.
    #[error("unknown handle {0}")]
    UnknownHandle(u32),
    /// A limit of the device is reached.
    #[error("device limit reached: {0}")]
    Exhausted(&'static str),
    /// An argument is outside what the device supports.
    #[error("invalid argument: {0}")]
    Invalid(&'static str),
    /// The object is still in use.
    #[error("object in use")]
    Busy,
    /// `modify_qp` refused.
    #[error(transparent)]
    Modify(#[from] ModifyError),
    /// Registration refused.
    #[error(transparent)]
    Mr(#[from] MrError),
    /// A post refused.
    #[error(transparent)]
    Post(#[from] PostError),
    /// A CQ size outside `1..=max_cqe` (rxe `rxe_cq_chk_attr`: EINVAL).
    #[error("cqe {cqe} is outside 1..={max}")]
    Cqe {
        /// Entries asked for.
        cqe: u32,
        /// The device's `max_cqe`.
        max: u32,
    },
    /// A completion vector the device does not have (the kernel's
    /// `create_cq`: `comp_vector >= num_comp_vectors` is EINVAL).
    #[error("completion vector {vector}: the device has {count}")]
    CompVector {
        /// The vector asked for.
        vector: u32,
        /// `num_comp_vectors`.
        count: u32,
    },
    /// A CQ refused a resize.
    #[error(transparent)]
    Cq(#[from] crate::cq::CqError),
}

/// Completion vectors a device has (`ibv_context.num_comp_vectors`): one,
/// the driver's event path (rxe has one per CPU; softroce's events all
/// leave through one thread).
pub const NUM_COMP_VECTORS: u32 = 1;

/// How many objects of each kind a device holds ([`Device::object_counts`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ObjectCounts {
    /// Protection domains.
    pub pd: usize,
    /// Completion queues.
    pub cq: usize,
    /// Queue pairs.
    pub qp: usize,
    /// Shared receive queues.
    pub srq: usize,
    /// Address handles.
    pub ah: usize,
    /// Memory regions.
    pub mr: usize,
    /// Memory windows.
    pub mw: usize,
}

/// A softroce device.
#[derive(Debug)]
pub struct Device {
    cfg: DeviceConfig,
    pds: Vec<bool>,
    mrs: MrTable,
    cqs: Vec<Option<Cq>>,
    srqs: Vec<Option<Srq>>,
    ahs: Vec<Option<AhAttr>>,
    qps: BTreeMap<u32, Qp>,
    /// Multicast groups and their attached UD QPs.
    mcast: McastTable,
    /// The QPs' armed timers in deadline order.
    timers: crate::timers::Timers,
    /// Bytes the QPs' reorder buffers hold ([`crate::reorder`]).
    reorder_budget: crate::reorder::Budget,
    /// Handles of destroyed PDs, CQs and SRQs, oldest first: reused, so a
    /// process that makes and destroys them for each connection (an rping
    /// server) keeps its tables as long as its busiest moment needs. No
    /// verb takes a destroyed one's handle while anything uses it (destroy
    /// refuses then). AH handles are not reused: UD WRs still queued name
    /// theirs and must fail, not reach another destination.
    free_pds: VecDeque<u32>,
    free_cqs: VecDeque<u32>,
    free_srqs: VecDeque<u32>,
    next_qpn: u32,
    /// QPs that may have a packet to send, in turn: every call into a QP
    /// that can give it one (a post, a packet for it, its timer, a state
    /// change) lists it, so [`Device::each_packet`] never scans the QPs.
    ready: VecDeque<u32>,
    /// The QP whose burst is under way (see [`TX_BURST`]) and the packets
    /// it may still send.
    burst: Option<(u32, u32)>,
    counters: Counters,
    events: VecDeque<AsyncEvent>,
    comp_events: VecDeque<u32>,
    overrun: Vec<u32>,
    now: Option<Instant>,
    created: Instant,
}

use crate::qp::FIRST_QPN;
pub use crate::qp::GSI_QPN;

/// Packets a QP may send in a row before it goes to the back of the
/// transmit queue (rxe's per-QP tasks run in bursts too). The QP that sent
/// last is polled directly, with one map lookup: a bulk message costs that.
pub(crate) const TX_BURST: u32 = 16;

macro_rules! ctx {
    ($d:expr, $now:expr) => {
        Ctx {
            now: $now,
            mrs: &mut $d.mrs,
            cqs: &mut $d.cqs,
            ahs: &$d.ahs,
            srqs: &mut $d.srqs,
            counters: &mut $d.counters,
            events: &mut $d.events,
            comp_events: &mut $d.comp_events,
            overrun: &mut $d.overrun,
            gather: None,
            timers: &mut $d.timers,
        }
    };
}

impl Device {
    /// A device with no objects.
    pub fn new(cfg: DeviceConfig) -> Device {
        Device {
            mrs: MrTable::new(cfg.limits.max_mr, cfg.limits.max_mw, cfg.seed),
            cfg,
            pds: Vec::new(),
            cqs: Vec::new(),
            srqs: Vec::new(),
            ahs: Vec::new(),
            qps: BTreeMap::new(),
            mcast: McastTable::default(),
            timers: crate::timers::Timers::default(),
            reorder_budget: crate::reorder::Budget::default(),
            free_pds: VecDeque::new(),
            free_cqs: VecDeque::new(),
            free_srqs: VecDeque::new(),
            next_qpn: FIRST_QPN,
            ready: VecDeque::new(),
            burst: None,
            counters: Counters::default(),
            events: VecDeque::new(),
            comp_events: VecDeque::new(),
            overrun: Vec::new(),
            now: None,
            created: Instant::now(),
        }
    }

    /// The configuration.
    pub fn config(&self) -> &DeviceConfig {
        &self.cfg
    }

    /// `ibv_query_device`.
    pub fn query_device(&self) -> DeviceAttr {
        DeviceAttr::new(&self.cfg.limits, &self.cfg.gids)
    }

    /// `ibv_query_port` of port 1, the only one.
    pub fn query_port(&self) -> PortAttr {
        PortAttr::new(&self.cfg.limits, self.cfg.active_mtu)
    }

    /// `ibv_query_gid` of port 1: the GID at `index`, if the table has one.
    pub fn query_gid(&self, index: usize) -> Option<[u8; 16]> {
        self.cfg.gids.get(index).map(|a| crate::devattr::gid_of(*a))
    }

    /// The memory regions and windows.
    pub fn mr_table(&self) -> &MrTable {
        &self.mrs
    }

    /// How many objects of each kind the device holds, as the kernel's
    /// resource tracker counts them for `rdma resource show`.
    pub fn object_counts(&self) -> ObjectCounts {
        let (mr, mw) = self.mrs.counts();
        ObjectCounts {
            pd: self.pds.iter().filter(|p| **p).count(),
            cq: self.cqs.iter().flatten().count(),
            qp: self.qps.len(),
            srq: self.srqs.iter().flatten().count(),
            ah: self.ahs.iter().flatten().count(),
            mr,
            mw,
        }
    }

    /// The counters.
    pub fn counters(&self) -> &Counters {
        &self.counters
    }

    /// The time verbs run at: the last time a `handle_*`/`poll_*` call gave,
    /// or the creation time before any. Verbs arm no timers, so it only
    /// stamps the context.
    fn verb_time(&self) -> Instant {
        self.now.unwrap_or(self.created)
    }

    /// Allocates a protection domain.
    pub fn alloc_pd(&mut self) -> Result<PdHandle, VerbError> {
        if self.pds.iter().filter(|p| **p).count() as u32 >= self.cfg.limits.max_pd {
            return Err(VerbError::Exhausted("max_pd"));
        }
        if let Some(pd) = self.free_pds.pop_front() {
            self.pds[pd as usize] = true;
            return Ok(PdHandle::from(pd));
        }
        self.pds.push(true);
        Ok(PdHandle::from(self.pds.len() as u32 - 1))
    }

    fn check_pd(&self, pd: u32) -> Result<(), VerbError> {
        if self.pds.get(pd as usize).copied().unwrap_or(false) { Ok(()) } else { Err(VerbError::UnknownHandle(pd)) }
    }

    /// Registers `region` (I/O virtual address `iova`) in `pd`; returns the key.
    pub fn reg_mr(
        &mut self,
        handle: PdHandle,
        iova: u64,
        region: Region,
        access: AccessFlags,
    ) -> Result<u32, VerbError> {
        let pd = handle.get();
        self.check_pd(pd)?;
        Ok(self.mrs.register(pd, iova, region, access)?)
    }

    /// `ibv_rereg_mr`: region `key` moves to `pd`, to `translation` (its
    /// I/O virtual address and memory) and to `access`, each if given; the
    /// key stays (see `MrTable::reregister`). Refused, changing nothing,
    /// for an unknown PD or key, invalid access, or windows bound (`Busy`
    /// in the C API: EBUSY). Grants already checked against the old memory
    /// (a READ being answered) still use it: see [`Device::memory_in_use`].
    pub fn rereg_mr(
        &mut self,
        key: u32,
        pd: Option<PdHandle>,
        translation: Option<(u64, Region)>,
        access: Option<AccessFlags>,
    ) -> Result<(), VerbError> {
        let pd = pd.map(PdHandle::get);
        if let Some(pd) = pd {
            self.check_pd(pd)?;
        }
        Ok(self.mrs.reregister(key, pd, translation, access)?)
    }

    /// Allocates a memory window in `pd` (`ibv_alloc_mw`); returns its R_Key.
    pub fn alloc_mw(&mut self, handle: PdHandle, ty: MwType) -> Result<u32, VerbError> {
        let pd = handle.get();
        self.check_pd(pd)?;
        Ok(self.mrs.alloc_mw(pd, ty)?)
    }

    /// Frees a memory window (`ibv_dealloc_mw`).
    pub fn dealloc_mw(&mut self, key: u32) -> Result<(), VerbError> {
        self.mrs.dealloc_mw(key)?;
        Ok(())
    }

    /// Binds the type 1 window `mw_key` through QP `qpn` (`ibv_bind_mw`):
    /// posts a BIND_MW WR and returns the window's next R_Key
    /// (`ibv_inc_rkey`), which is valid once the WR completes. Errors in the
    /// binding itself complete the WR with `MW_BIND_ERR`.
    pub fn bind_mw(
        &mut self,
        qpn: Qpn,
        mw_key: u32,
        wr_id: u64,
        flags: SendFlags,
        info: MwBindInfo,
    ) -> Result<u32, VerbError> {
        match self.mrs.mw(mw_key) {
            Some(mw) if mw.ty == MwType::Type1 => {}
            Some(_) => return Err(VerbError::Invalid("ibv_bind_mw takes type 1 windows")),
            None => return Err(VerbError::UnknownHandle(mw_key)),
        }
        let new_key = (mw_key & !0xff) | (mw_key.wrapping_add(1) & 0xff);
        let mut wr = SendWr::new(wr_id, WrOpcode::BindMw, flags, crate::wr::Payload::Sges(&[]));
        wr.bind = Some(MwBind { mw_key, new_key, info });
        self.post_send(qpn, &wr)?;
        Ok(new_key)
    }

    /// Deregisters a region.
    pub fn dereg_mr(&mut self, key: u32) -> Result<(), VerbError> {
        self.mrs.deregister(key)?;
        Ok(())
    }

    /// Whether a responder still holds a checked grant into the memory
    /// `[addr, addr + len)`: a READ being answered or a WRITE between its
    /// packets. Such grants outlive a deregistration (as rxe's MR references
    /// do), so the owner of deregistered memory keeps it until this is false.
    pub fn memory_in_use(&self, addr: usize, len: usize) -> bool {
        let overlaps = |g: &crate::mr::Grant| {
            let (a, l) = (g.region.addr(), g.region.len());
            a < addr.saturating_add(len) && addr < a.saturating_add(l)
        };
        self.qps.values().any(|q| {
            let reading = q.resp.responses.iter().any(|r| match r {
                crate::qp::Response::Read { grant: Some(g), .. } => overlaps(g),
                _ => false,
            });
            let writing = matches!(&q.resp.current, Some(crate::qp::InMessage::Write { grant, .. }) if overlaps(grant));
            reading || writing
        })
    }

    /// Destroys a CQ no QP uses (`ibv_destroy_cq`; `Busy` otherwise).
    pub fn destroy_cq(&mut self, handle: CqHandle) -> Result<(), VerbError> {
        let cq = handle.get();
        if self.qps.values().any(|q| q.init.send_cq == handle || q.init.recv_cq == handle) {
            return Err(VerbError::Busy);
        }
        let c = self.cqs.get_mut(cq as usize).and_then(Option::take).ok_or(VerbError::UnknownHandle(cq))?;
        self.timers.update(cq, TimerKind::CqModeration, c.moderation_deadline(), None);
        // Its events not yet taken go with it: the handle is used again.
        self.comp_events.retain(|&e| e != cq);
        self.free_cqs.push_back(cq);
        Ok(())
    }

    /// Destroys an SRQ no QP uses.
    pub fn destroy_srq(&mut self, handle: SrqHandle) -> Result<(), VerbError> {
        if self.qps.values().any(|q| q.init.srq == Some(handle)) {
            return Err(VerbError::Busy);
        }
        let srq = handle.get();
        self.srqs.get_mut(srq as usize).and_then(Option::take).ok_or(VerbError::UnknownHandle(srq))?;
        self.free_srqs.push_back(srq);
        Ok(())
    }

    /// Destroys an address handle (UD WRs still queued with it fail with `LOC_QP_OP_ERR`).
    pub fn destroy_ah(&mut self, ah: u32) -> Result<(), VerbError> {
        self.ahs.get_mut(ah as usize).and_then(Option::take).map(|_| ()).ok_or(VerbError::UnknownHandle(ah))
    }

    /// Frees a protection domain nothing uses (`ibv_dealloc_pd`; `Busy` otherwise).
    pub fn dealloc_pd(&mut self, handle: PdHandle) -> Result<(), VerbError> {
        let pd = handle.get();
        self.check_pd(pd)?;
        let srq_uses = self.srqs.iter().flatten().any(|s| s.pd == pd);
        if self.mrs.uses_pd(pd) || srq_uses || self.qps.values().any(|q| q.init.pd == handle) {
            return Err(VerbError::Busy);
        }
        self.pds[pd as usize] = false;
        self.free_pds.push_back(pd);
        Ok(())
    }

    /// Creates a CQ of at least `cqe` entries: as rxe, `2^k - 1 >= cqe`
    /// ([`Device::cq_size`] tells). `cqe` must be in `1..=max_cqe`.
    pub fn create_cq(&mut self, cqe: u32) -> Result<CqHandle, VerbError> {
        self.create_cq_on(cqe, 0)
    }

    /// [`Device::create_cq`] with its events on completion vector
    /// `comp_vector`, which must be below [`NUM_COMP_VECTORS`].
    pub fn create_cq_on(&mut self, cqe: u32, comp_vector: u32) -> Result<CqHandle, VerbError> {
        let size = self.check_cqe(cqe)?;
        if comp_vector >= NUM_COMP_VECTORS {
            return Err(VerbError::CompVector { vector: comp_vector, count: NUM_COMP_VECTORS });
        }
        let cq = Some(Cq::new(size as usize));
        if let Some(h) = self.free_cqs.pop_front() {
            self.cqs[h as usize] = cq;
            return Ok(CqHandle::from(h));
        }
        self.cqs.push(cq);
        Ok(CqHandle::from(self.cqs.len() as u32 - 1))
    }

    /// The size rxe gives a CQ asked for `cqe` entries, if it may have them.
    fn check_cqe(&self, cqe: u32) -> Result<u32, VerbError> {
        let max = self.cfg.limits.max_cqe;
        if cqe == 0 || cqe > max {
            return Err(VerbError::Cqe { cqe, max });
        }
        Ok(crate::cq::rxe_queue_size(cqe).min(max))
    }

    /// The entries CQ `cq` holds (`ibv_cq.cqe`).
    pub fn cq_size(&self, handle: CqHandle) -> Result<u32, VerbError> {
        let cq = handle.get();
        let c = self.cqs.get(cq as usize).and_then(Option::as_ref).ok_or(VerbError::UnknownHandle(cq))?;
        Ok(c.capacity() as u32)
    }

    /// `ibv_resize_cq`: CQ `cq` holds `cqe` entries, rounded as at creation;
    /// returns the new size. The completions queued stay, in order; a size
    /// below their number plus `held_elsewhere` (completions a wrapper
    /// took out and still holds) is refused (rxe `rxe_cq_chk_attr`: EINVAL),
    /// as is one outside `1..=max_cqe`. An overrun CQ stays in error.
    pub fn resize_cq(&mut self, handle: CqHandle, cqe: u32, held_elsewhere: usize) -> Result<u32, VerbError> {
        let cq = handle.get();
        let size = self.check_cqe(cqe)?;
        let c = self.cqs.get_mut(cq as usize).and_then(Option::as_mut).ok_or(VerbError::UnknownHandle(cq))?;
        let held = c.len() + held_elsewhere;
        if (cqe as usize) < held {
            return Err(crate::cq::CqError::BelowHeld { cqe, held }.into());
        }
        c.resize((size as usize).max(held))?;
        Ok(c.capacity() as u32)
    }

    /// `ibv_modify_cq` with `IBV_CQ_ATTR_MODERATE`: completion events of CQ
    /// `cq` wait for `m.count` completions or `m.period` (see [`Moderation`]).
    /// rxe does not implement it (EOPNOTSUPP); softroce does, as NICs do.
    pub fn modify_cq(&mut self, handle: CqHandle, m: Moderation) -> Result<(), VerbError> {
        let cq = handle.get();
        let c = self.cqs.get_mut(cq as usize).and_then(Option::as_mut).ok_or(VerbError::UnknownHandle(cq))?;
        let before = c.moderation_deadline();
        c.set_moderation(m);
        self.timers.update(cq, TimerKind::CqModeration, before, c.moderation_deadline());
        Ok(())
    }

    /// Creates an address handle.
    pub fn create_ah(&mut self, handle: PdHandle, attr: AhAttr) -> Result<u32, VerbError> {
        let pd = handle.get();
        self.check_pd(pd)?;
        if usize::from(attr.sgid_index) >= self.cfg.gids.len() {
            return Err(VerbError::Invalid("sgid_index"));
        }
        self.ahs.push(Some(attr));
        Ok(self.ahs.len() as u32 - 1)
    }

    /// Creates a shared receive queue.
    pub fn create_srq(&mut self, handle: PdHandle, max_wr: u32, max_sge: u32) -> Result<SrqHandle, VerbError> {
        let pd = handle.get();
        self.check_pd(pd)?;
        let l = &self.cfg.limits;
        if max_wr == 0 || max_wr > l.max_srq_wr || max_sge > l.max_srq_sge {
            return Err(VerbError::Invalid("srq size"));
        }
        let srq = Some(Srq::new(pd, max_wr, max_sge));
        if let Some(h) = self.free_srqs.pop_front() {
            self.srqs[h as usize] = srq;
            return Ok(SrqHandle::from(h));
        }
        self.srqs.push(srq);
        Ok(SrqHandle::from(self.srqs.len() as u32 - 1))
    }

    /// Arms an SRQ's limit event (`ibv_modify_srq` with `IBV_SRQ_LIMIT`).
    pub fn set_srq_limit(&mut self, handle: SrqHandle, limit: u32) -> Result<(), VerbError> {
        let srq = handle.get();
        let s = self.srqs.get_mut(srq as usize).and_then(Option::as_mut).ok_or(VerbError::UnknownHandle(srq))?;
        s.limit = limit;
        Ok(())
    }

    /// `ibv_modify_srq` with `IBV_SRQ_MAX_WR`: SRQ `srq` holds `max_wr` WRs
    /// from now on, the WRs posted staying in order. As rxe
    /// (`rxe_srq_chk_attr`, `rxe_queue_resize`), refused (EINVAL) for 0 or
    /// more than `max_srq_wr`, below an armed limit, or below the WRs it
    /// holds. (rxe rounds to `2^k - 1`; softroce holds exactly `max_wr`.)
    pub fn resize_srq(&mut self, handle: SrqHandle, max_wr: u32) -> Result<(), VerbError> {
        let srq = handle.get();
        let max = self.cfg.limits.max_srq_wr;
        let s = self.srqs.get_mut(srq as usize).and_then(Option::as_mut).ok_or(VerbError::UnknownHandle(srq))?;
        if max_wr == 0 || max_wr > max {
            return Err(VerbError::Invalid("srq max_wr outside 1..=max_srq_wr"));
        }
        if s.limit != 0 && max_wr < s.limit {
            return Err(VerbError::Invalid("srq max_wr below the armed limit"));
        }
        if u64::from(max_wr) < s.rq.len() {
            return Err(VerbError::Invalid("srq max_wr below the WRs it holds"));
        }
        s.rq.resize(max_wr);
        Ok(())
    }

    /// The WRs SRQ `srq` holds at most (`ibv_query_srq`'s `max_wr`).
    pub fn srq_size(&self, handle: SrqHandle) -> Result<u32, VerbError> {
        let srq = handle.get();
        self.srqs.get(srq as usize).and_then(Option::as_ref).map(|s| s.rq.depth()).ok_or(VerbError::UnknownHandle(srq))
    }

    /// The SRQ's armed limit: 0 when disarmed, as it is once the limit
    /// event fired (`ibv_query_srq`'s `srq_limit`).
    pub fn srq_limit(&self, handle: SrqHandle) -> Result<u32, VerbError> {
        let srq = handle.get();
        self.srqs.get(srq as usize).and_then(Option::as_ref).map(|s| s.limit).ok_or(VerbError::UnknownHandle(srq))
    }

    /// Posts a receive to an SRQ.
    pub fn post_srq_recv(&mut self, handle: SrqHandle, wr: &RecvWr<'_>) -> Result<(), VerbError> {
        let srq = handle.get();
        let s = self.srqs.get_mut(srq as usize).and_then(Option::as_mut).ok_or(VerbError::UnknownHandle(srq))?;
        Ok(s.rq.post(wr)?)
    }

    /// Creates a QP in RESET; returns its number.
    pub fn create_qp(&mut self, init: QpInitAttr) -> Result<Qpn, VerbError> {
        self.create_qp_numbered(None, init)
    }

    /// [`Device::create_qp`] with the number chosen by the caller (a device
    /// shared by several processes gives each its own QPN blocks), which
    /// must be free and neither QP0, QP1 nor the multicast QPN.
    pub fn create_qp_as(&mut self, handle: Qpn, init: QpInitAttr) -> Result<Qpn, VerbError> {
        let qpn = handle.get();
        if !(FIRST_QPN..=0xff_fffe).contains(&qpn) || self.qps.contains_key(&qpn) {
            return Err(VerbError::Invalid("qp number taken or reserved"));
        }
        self.create_qp_numbered(Some(qpn), init)
    }

    /// Creates QP 1, the General Services Interface QP that carries the CM's
    /// MADs (IBTA 13.5): a UD QP numbered 1. Its Q_Key is set as usual
    /// (rdma_cm uses 0x80010000, `GSI_QKEY`), and like rxe's GSI QP it sends
    /// every packet with AckReq set (golden capture rping_c3).
    pub fn create_gsi_qp(&mut self, init: QpInitAttr) -> Result<Qpn, VerbError> {
        if init.qp_type != QpType::Ud {
            return Err(VerbError::Invalid("the GSI QP is a UD QP"));
        }
        if self.qps.contains_key(&GSI_QPN) {
            return Err(VerbError::Invalid("qp 1 exists already"));
        }
        self.create_qp_numbered(Some(GSI_QPN), init)
    }

    fn create_qp_numbered(&mut self, chosen: Option<u32>, init: QpInitAttr) -> Result<Qpn, VerbError> {
        self.check_pd(init.pd.get())?;
        let l = self.cfg.limits;
        let c = init.cap;
        for cq in [init.send_cq, init.recv_cq] {
            if !matches!(self.cqs.get(cq.get() as usize), Some(Some(_))) {
                return Err(VerbError::UnknownHandle(cq.get()));
            }
        }
        if let Some(s) = init.srq
            && !matches!(self.srqs.get(s.get() as usize), Some(Some(_)))
        {
            return Err(VerbError::UnknownHandle(s.get()));
        }
        if c.max_send_wr > l.max_qp_wr
            || c.max_recv_wr > l.max_qp_wr
            || c.max_send_sge > l.max_sge
            || c.max_recv_sge > l.max_sge
            || c.max_inline_data > l.max_inline_data
        {
            return Err(VerbError::Invalid("qp capabilities"));
        }
        if self.qps.len() as u32 >= l.max_qp {
            return Err(VerbError::Exhausted("max_qp"));
        }
        let qpn = match chosen {
            Some(q) => q,
            None => {
                let mut qpn = self.next_qpn;
                while self.qps.contains_key(&qpn) {
                    qpn = if qpn >= 0xff_fffe { FIRST_QPN } else { qpn + 1 };
                }
                self.next_qpn = if qpn >= 0xff_fffe { FIRST_QPN } else { qpn + 1 };
                qpn
            }
        };
        let mut qp = Qp::new(qpn, init);
        qp.resp.reorder = crate::reorder::ReorderBuffer::new(self.reorder_budget.clone());
        if init.qp_type == QpType::Ud {
            qp.attr.path_mtu = self.cfg.active_mtu;
        }
        self.qps.insert(qpn, qp);
        Ok(Qpn::from(qpn))
    }

    /// Destroys a QP.
    pub fn destroy_qp(&mut self, handle: Qpn) -> Result<(), VerbError> {
        let qpn = handle.get();
        if self.burst.is_some_and(|(q, _)| q == qpn) {
            self.burst = None;
        }
        // As the kernel's `ib_destroy_qp`: not while attached to a group.
        if !self.mcast.groups_of(qpn).is_empty() {
            return Err(VerbError::Busy);
        }
        // (Its place in `ready`, if any, is skipped when reached.)
        let qp = self.qps.remove(&qpn).ok_or(VerbError::UnknownHandle(qpn))?;
        // Its timers leave the index with it.
        self.timers.update(qpn, TimerKind::Retransmit, qp.comp.timer, None);
        self.timers.update(qpn, TimerKind::Rnr, qp.req.rnr_until, None);
        Ok(())
    }

    /// Attaches UD QP `qpn` to multicast group `mgid` (`ibv_attach_mcast`).
    pub fn attach_mcast(&mut self, handle: Qpn, mgid: [u8; 16]) -> Result<(), VerbError> {
        let qpn = handle.get();
        let qp = self.qps.get(&qpn).ok_or(VerbError::UnknownHandle(qpn))?;
        if qp.qp_type() != QpType::Ud {
            return Err(VerbError::Invalid("only UD QPs join multicast groups"));
        }
        let a = self.query_device();
        let limits = McastLimits {
            groups: a.max_mcast_grp as usize,
            per_group: a.max_mcast_qp_attach as usize,
            total: a.max_total_mcast_qp_attach as usize,
        };
        self.mcast.attach(mgid, qpn, limits).map_err(|e| match e {
            McastError::Full(what) => VerbError::Exhausted(what),
            McastError::NotMulticast | McastError::NotAttached => VerbError::Invalid("not a multicast GID"),
        })
    }

    /// Detaches `qpn` from `mgid` (`ibv_detach_mcast`).
    pub fn detach_mcast(&mut self, handle: Qpn, mgid: [u8; 16]) -> Result<(), VerbError> {
        let qpn = handle.get();
        if !self.qps.contains_key(&qpn) {
            return Err(VerbError::UnknownHandle(qpn));
        }
        self.mcast.detach(mgid, qpn).map_err(|_| VerbError::Invalid("QP not attached to the group"))
    }

    /// The groups `qpn` is attached to.
    pub fn mcast_groups_of(&self, handle: Qpn) -> Vec<[u8; 16]> {
        let qpn = handle.get();
        self.mcast.groups_of(qpn)
    }

    /// Whether any QP is attached to group `mgid`.
    pub fn has_mcast_group(&self, mgid: &[u8; 16]) -> bool {
        self.mcast.has_group(mgid)
    }

    /// A QP, to inspect.
    pub fn qp(&self, handle: Qpn) -> Option<&Qp> {
        let qpn = handle.get();
        self.qps.get(&qpn)
    }

    /// Every QP, by QPN.
    pub fn qps(&self) -> impl Iterator<Item = &Qp> {
        self.qps.values()
    }

    /// Makes QP `qpn` send from UDP port `port` until an address vector
    /// moves it again: for a transport that cannot send from the port rxe
    /// picked (receivers match only the destination port; the ICRC covers
    /// the port that is sent).
    pub fn set_qp_src_port(&mut self, handle: Qpn, port: u16) -> Result<(), VerbError> {
        let qpn = handle.get();
        self.qps.get_mut(&qpn).ok_or(VerbError::UnknownHandle(qpn))?.src_port = port;
        Ok(())
    }

    /// Sends every packet from `port` (`Some`) or each QP from its own
    /// (`None`): [`DeviceConfig::udp_src_port`] from now on.
    pub fn set_udp_src_port(&mut self, port: Option<u16>) {
        self.cfg.udp_src_port = port;
    }

    /// `ibv_modify_qp`.
    pub fn modify_qp(&mut self, handle: Qpn, attr: &QpAttr, mask: QpAttrMask) -> Result<(), VerbError> {
        let qpn = handle.get();
        let l = self.cfg.limits;
        if mask.contains(QpAttrMask::AV) && usize::from(attr.ah_attr.sgid_index) >= self.cfg.gids.len() {
            return Err(VerbError::Invalid("sgid_index"));
        }
        if (mask.contains(QpAttrMask::MAX_QP_RD_ATOMIC) && attr.max_rd_atomic > l.max_qp_rd_atom)
            || (mask.contains(QpAttrMask::MAX_DEST_RD_ATOMIC) && attr.max_dest_rd_atomic > l.max_qp_rd_atom)
        {
            return Err(VerbError::Invalid("rd_atomic"));
        }
        let now = self.verb_time();
        let qp = self.qps.get_mut(&qpn).ok_or(VerbError::UnknownHandle(qpn))?;
        if let (true, Some(w)) = (mask.contains(QpAttrMask::PATH_MTU), attr.wide_mtu)
            && (qp.qp_type() == QpType::Ud || l.max_wide_mtu.is_none_or(|max| w > max))
        {
            return Err(VerbError::Invalid("wide_mtu: RC or UC, and no more than the link carries"));
        }
        let mut ctx = ctx!(self, now);
        let r = qp.modify(&mut ctx, attr, mask);
        self.after_call();
        // RTS lets it send what was posted before.
        self.mark_ready(qpn);
        Ok(r?)
    }

    /// Posts a send WR. A QP in ERR takes it and flushes it at once.
    pub fn post_send(&mut self, handle: Qpn, wr: &SendWr<'_>) -> Result<(), VerbError> {
        let qpn = handle.get();
        let now = self.verb_time();
        let qp = self.qps.get_mut(&qpn).ok_or(VerbError::UnknownHandle(qpn))?;
        let ty = qp.qp_type();
        let ok_op = match ty {
            QpType::Ud => matches!(wr.opcode, WrOpcode::Send | WrOpcode::SendWithImm),
            QpType::Uc => {
                matches!(
                    wr.opcode,
                    WrOpcode::Send
                        | WrOpcode::SendWithImm
                        | WrOpcode::RdmaWrite
                        | WrOpcode::RdmaWriteWithImm
                        | WrOpcode::LocalInv
                        | WrOpcode::BindMw
                )
            }
            QpType::Rc => true,
        };
        if (wr.opcode == WrOpcode::BindMw) != wr.bind.is_some() {
            return Err(VerbError::Invalid("bind_mw is set exactly for BIND_MW"));
        }
        if !ok_op {
            return Err(PostError::BadOpcode(wr.opcode).into());
        }
        if (ty == QpType::Ud) != wr.ud.is_some() {
            return Err(PostError::BadDestination.into());
        }
        if qp.state() == QpState::Reset {
            return Err(PostError::BadState.into());
        }
        qp.sq.post(wr)?;
        let len = qp.sq.get(qp.sq.producer - 1).length;
        if len > self.cfg.limits.max_msg_sz || (ty == QpType::Ud && len > qp.mtu()) {
            qp.sq.unpost_last();
            return Err(PostError::TooLong(len).into());
        }
        if qp.state() == QpState::Err {
            let mut ctx = ctx!(self, now);
            qp.flush(&mut ctx);
            self.after_call();
        }
        self.mark_ready(qpn);
        Ok(())
    }

    /// Posts a receive WR. `true`: the post made a packet to send, the
    /// credit update of a responder that had reported none
    /// (`Qp::announce_credits`); the caller should transmit.
    pub fn post_recv(&mut self, handle: Qpn, wr: &RecvWr<'_>) -> Result<bool, VerbError> {
        let qpn = handle.get();
        let now = self.verb_time();
        let qp = self.qps.get_mut(&qpn).ok_or(VerbError::UnknownHandle(qpn))?;
        if qp.init.srq.is_some() {
            return Err(VerbError::Invalid("QP uses an SRQ"));
        }
        if qp.state() == QpState::Reset {
            return Err(PostError::BadState.into());
        }
        qp.rq.post(wr)?;
        if qp.state() == QpState::Err {
            let mut ctx = ctx!(self, now);
            qp.flush(&mut ctx);
            self.after_call();
        } else if qp.announce_credits() {
            self.mark_ready(qpn);
            return Ok(true);
        }
        Ok(false)
    }

    /// Pops up to `out.len()` completions of CQ `cq`.
    pub fn poll_cq(&mut self, handle: CqHandle, out: &mut [Wc]) -> Result<usize, VerbError> {
        let cq = handle.get();
        let c = self.cqs.get_mut(cq as usize).and_then(Option::as_mut).ok_or(VerbError::UnknownHandle(cq))?;
        Ok(c.poll(out))
    }

    /// Whether CQ `cq` is armed for a completion event (its application
    /// means to sleep until one comes).
    pub fn cq_armed(&self, handle: CqHandle) -> bool {
        let cq = handle.get();
        self.cqs.get(cq as usize).and_then(Option::as_ref).is_some_and(|c| c.armed().is_some())
    }

    /// Arms CQ `cq` for one completion event.
    pub fn req_notify_cq(&mut self, handle: CqHandle, solicited_only: bool) -> Result<(), VerbError> {
        let cq = handle.get();
        let c = self.cqs.get_mut(cq as usize).and_then(Option::as_mut).ok_or(VerbError::UnknownHandle(cq))?;
        c.arm(if solicited_only { Arm::SolicitedOnly } else { Arm::Next });
        Ok(())
    }

    /// The next async event.
    pub fn poll_event(&mut self) -> Option<AsyncEvent> {
        self.events.pop_front()
    }

    /// The next CQ whose completion event fired.
    pub fn poll_comp_event(&mut self) -> Option<CqHandle> {
        self.comp_events.pop_front().map(CqHandle::from)
    }

    /// After a call into a QP: CQs that overran take their QPs to ERR.
    /// Runs after every packet: the common case is one branch.
    #[inline]
    fn after_call(&mut self) {
        if !self.overrun.is_empty() {
            self.fail_overrun();
        }
    }

    /// The QPs of the CQs that overran enter ERR.
    #[cold]
    fn fail_overrun(&mut self) {
        while let Some(cq) = self.overrun.pop() {
            let now = self.verb_time();
            let qpns: Vec<u32> = self
                .qps
                .values()
                .filter(|q| q.state() != QpState::Err && (q.init.send_cq.get() == cq || q.init.recv_cq.get() == cq))
                .map(|q| q.qpn)
                .collect();
            for qpn in qpns {
                if let Some(qp) = self.qps.get_mut(&qpn) {
                    let mut ctx = ctx!(self, now);
                    qp.enter_error(&mut ctx);
                    self.events.push_back(AsyncEvent::QpFatal(Qpn::from(qpn)));
                }
            }
        }
    }

    /// A UDP datagram for port 4791 arrived from `src:src_port` at our
    /// address `dst`. `ipv4_id` is the IPv4 identification and DF flag when
    /// the receiver saw them (raw sockets, captures), `None` from a UDP socket.
    pub fn handle_datagram(
        &mut self,
        now: Instant,
        src: IpAddr,
        src_port: u16,
        dst: IpAddr,
        ipv4_id: Option<(u16, bool)>,
        data: &[u8],
    ) {
        self.handle_datagram_ecn(now, src, src_port, dst, ipv4_id, Ecn::NotEct, data);
    }

    /// [`Device::handle_datagram`] with the ECN field of the datagram's IP
    /// header: a CE mark on an RC packet makes its QP send a CNP
    /// (`crate::cc`).
    #[allow(clippy::too_many_arguments)]
    pub fn handle_datagram_ecn(
        &mut self,
        now: Instant,
        src: IpAddr,
        src_port: u16,
        dst: IpAddr,
        ipv4_id: Option<(u16, bool)>,
        ecn: Ecn,
        data: &[u8],
    ) {
        let Some(p) = self.parsed(now, data) else { return };
        let ip = match (src, dst) {
            (IpAddr::V4(s), IpAddr::V4(d)) => match ipv4_id {
                Some((identification, dont_fragment)) => {
                    IpContext::V4 { src: s, dst: d, identification, dont_fragment }
                }
                None => IpContext::v4_socket(s, d),
            },
            (s, d) => IpContext::V6 { src: to_v6(s), dst: to_v6(d) },
        };
        let ctx = IcrcContext { ip, src_port, dst_port: ROCE_V2_UDP_PORT };
        match self.cfg.icrc_policy.check(&ctx, ipv4_id.is_some(), data) {
            Ok(IcrcCheck::Verified | IcrcCheck::IdSolved { .. }) => {}
            Ok(IcrcCheck::Skipped) => self.counters.icrc_unchecked += 1,
            Err(_) => {
                self.counters.drop_icrc += 1;
                return;
            }
        }
        self.handle_checked(now, &p, src, dst, ecn);
    }

    /// A packet another device of this host handed over through memory
    /// (the driver's local link), not a wire: its ICRC trailer is there
    /// but was never computed, since nothing between the two engines can
    /// alter it (IBTA's ICRC protects the wire; a fault injector that
    /// corrupts local packets asks the sender for a real one and uses
    /// [`Device::handle_datagram_ecn`]). Counted in `rcvd_local`; every
    /// other check is the same as for a datagram.
    pub fn handle_local_datagram(&mut self, now: Instant, src: IpAddr, dst: IpAddr, data: &[u8]) {
        let Some(p) = self.parsed(now, data) else { return };
        self.counters.rcvd_local += 1;
        self.handle_checked(now, &p, src, dst, Ecn::NotEct);
    }

    /// The clock set to `now` and `data`'s layout checked; a malformed
    /// packet is counted and dropped (`None`).
    fn parsed<'a>(&mut self, now: Instant, data: &'a [u8]) -> Option<Packet<&'a [u8]>> {
        self.now = Some(now);
        match Packet::new_checked(data) {
            Ok(p) => Some(p),
            Err(_) => {
                self.counters.drop_malformed += 1;
                None
            }
        }
    }

    /// A parsed packet whose ICRC passed (or needs none): to its QP.
    fn handle_checked(&mut self, now: Instant, p: &Packet<&[u8]>, src: IpAddr, dst: IpAddr, ecn: Ecn) {
        if p.info().transport == Transport::Cnp {
            // A congestion notification (RoCEv2 Annex A17.9.3) for one of our
            // requesters: its window is cut, nothing is answered.
            match self.qps.get_mut(&p.bth().dest_qpn()) {
                Some(qp) if qp.qp_type() == QpType::Rc => {
                    self.counters.rp_cnp_handled += 1;
                    qp.comp.cc.on_cnp(qp.req.sent_psn);
                }
                _ => self.counters.drop_no_qp += 1,
            }
            return;
        }
        if !pkey_matches(p.bth().pkey(), PORT_PKEY) {
            self.counters.drop_bad_pkey += 1;
            return;
        }
        let qpn = p.bth().dest_qpn();
        if qpn == MULTICAST_QPN {
            return self.handle_multicast(now, p, src, dst);
        }
        let Some(qp) = self.qps.get_mut(&qpn) else {
            self.counters.drop_no_qp += 1;
            return;
        };
        if p.check_path_mtu(Some(qp.mtu() as usize)).is_err() {
            self.counters.drop_malformed += 1;
            return;
        }
        self.counters.rcvd_pkts += 1;
        let mut ctx = ctx!(self, now);
        if ecn == Ecn::Ce {
            qp.congestion_experienced(&mut ctx);
        }
        match p.info().direction() {
            Direction::Request => qp.responder_handle(&mut ctx, p, Origin { src, dst }),
            Direction::Response => qp.completer_handle(&mut ctx, p),
        }
        self.after_call();
        // A response to send, a window opened, a rewind.
        self.mark_ready(qpn);
    }

    /// A packet for the multicast QPN: a copy to every QP attached to its
    /// destination group (IBTA 10.5.2.3), each checking its own Q_Key and
    /// taking its own receive. A packet whose destination is not a group
    /// anyone here joined is dropped as one for no QP, and one that is not a
    /// UD SEND as invalid (multicast is UD only).
    fn handle_multicast(&mut self, now: Instant, p: &Packet<&[u8]>, src: IpAddr, dst: IpAddr) {
        let mgid = mcast::mgid_of(dst);
        if p.info().transport != Transport::Ud {
            self.counters.drop_invalid += 1;
            return;
        }
        let members = self.mcast.members(&mgid).to_vec();
        if members.is_empty() {
            self.counters.drop_no_qp += 1;
            return;
        }
        self.counters.rcvd_pkts += 1;
        let src_qpn = p.deth().map(|d| d.src_qpn());
        let from_here = self.cfg.gids.contains(&src);
        for qpn in members {
            let Some(qp) = self.qps.get_mut(&qpn) else { continue };
            if qp.init.block_self_mcast_lb && from_here && src_qpn == Some(qpn) {
                continue;
            }
            if p.check_path_mtu(Some(qp.mtu() as usize)).is_err() {
                self.counters.drop_malformed += 1;
                continue;
            }
            let mut ctx = ctx!(self, now);
            qp.responder_handle(&mut ctx, p, Origin { src, dst });
            self.after_call();
        }
    }

    /// Writes the next datagram to send into `buf` (at least MTU + 64 bytes).
    pub fn poll_transmit(&mut self, now: Instant, buf: &mut [u8]) -> Option<Transmit> {
        let mut got = None;
        self.each_packet(now, buf, None, |cfg, out, src_port, buf, _| {
            got = (|| {
                let (src, dst, icrc_ctx) = addressing(cfg, &out, src_port)?;
                let total = out.len + roce_wire::ICRC_LEN;
                let icrc = IcrcHasher::new(&icrc_ctx, total).finish_over(&buf[..out.len]).ok()?;
                buf[out.len..total].copy_from_slice(&icrc.to_le_bytes());
                Some(Transmit { src, dst, src_port, len: total })
            })();
            // A packet without a source GID is lost, as on a wire: go on.
            got.is_none()
        });
        got
    }

    /// Like [`Device::poll_transmit`], but leaves payload that is in
    /// registered memory there: `buf` receives the headers (and any inline
    /// payload), `pieces` lists the payload, and the caller sends
    /// `buf[..head_len]`, the pieces, `pad_len` zero bytes and the ICRC as
    /// one datagram (scatter-gather: no copy of the payload), its ICRC from
    /// [`TransmitGather::icrc`].
    pub fn poll_transmit_gather(
        &mut self,
        now: Instant,
        buf: &mut [u8],
        pieces: &mut Vec<crate::ctx::Piece>,
    ) -> Option<TransmitGather> {
        let mut got = None;
        self.poll_transmit_burst(now, buf, pieces, |t, _, _| {
            got = Some(t.clone());
            false
        });
        got
    }

    /// [`Device::poll_transmit_gather`] for every packet due, in one call:
    /// `emit` gets each packet (its [`TransmitGather`], headers and payload
    /// pieces, valid during the call) and returns whether to go on. A QP's
    /// turn costs one lookup and one role context however many packets it
    /// sends, and equal-length packets to one peer share the ICRC's pseudo
    /// header, computed once: the per-packet cost of a bulk send.
    pub fn poll_transmit_burst(
        &mut self,
        now: Instant,
        buf: &mut [u8],
        pieces: &mut Vec<crate::ctx::Piece>,
        mut emit: impl FnMut(&TransmitGather, &[u8], &[crate::ctx::Piece]) -> bool,
    ) {
        pieces.clear();
        let mut seed: Option<Seed> = None;
        self.each_packet(now, buf, Some(pieces), |cfg, out, src_port, buf, pieces| {
            let s = match &mut seed {
                Some(s) if s.fits(&out, src_port) => s,
                _ => {
                    let Some((src, to, icrc_ctx)) = addressing(cfg, &out, src_port) else {
                        // No such source GID: the packet is lost, as on a wire.
                        return true;
                    };
                    let pseudo = IcrcHasher::new(&icrc_ctx, out.len + roce_wire::ICRC_LEN).absorbed();
                    let t = TransmitGather {
                        info: &roce_wire::opcode::ALL[0],
                        dest_qpn: crate::Qpn::from(0),
                        src,
                        dst: to,
                        src_port,
                        head_len: 0,
                        pad_len: 0,
                        len: out.len + roce_wire::ICRC_LEN,
                        pseudo,
                    };
                    seed.insert(Seed { sgid_index: out.sgid_index, dst: out.dst, src_port, len: out.len, t })
                }
            };
            let Some((bth, _)) = buf[..out.head_len].split_first_chunk::<{ roce_wire::bth::LEN }>() else {
                return true;
            };
            // The engine writes only opcodes it knows, and whole BTHs.
            let (Some(info), Some(dest_qpn)) = (roce_wire::Opcode(bth[0]).info(), roce_wire::bth::dest_qpn_of(bth))
            else {
                return true;
            };
            let in_pieces: usize = pieces.iter().map(|p| p.len).sum();
            // What differs between packets of one seed; the rest (and the
            // pseudo header's ICRC) is the seed's, never copied per packet.
            let t = &mut s.t;
            t.info = info;
            t.dest_qpn = crate::Qpn::from(dest_qpn);
            t.head_len = out.head_len;
            t.pad_len = out.len - out.head_len - in_pieces;
            emit(t, &buf[..out.head_len], pieces)
        });
    }

    /// Whether a QP has packets to send (what [`Device::poll_transmit_burst`]
    /// would hand out is not known before it runs, but nothing is when this
    /// is false): a pass with nothing to send skips its batch.
    pub fn transmit_ready(&self) -> bool {
        self.burst.is_some() || !self.ready.is_empty()
    }

    /// The packets due, QP by QP in the order of the transmit queue
    /// (`ready`), each QP in turns of up to [`TX_BURST`] packets: hands each
    /// packet, written into `buf` (only its headers when `gather` lists the
    /// payload), to `emit` until it returns false or no packet is left. One
    /// map lookup and one role context per turn; nothing is allocated.
    fn each_packet(
        &mut self,
        now: Instant,
        buf: &mut [u8],
        mut gather: Option<&mut Vec<crate::ctx::Piece>>,
        mut emit: impl FnMut(&DeviceConfig, Outgoing, u16, &mut [u8], &[crate::ctx::Piece]) -> bool,
    ) {
        self.now = Some(now);
        // The list moves into the roles' context and back, keeping its capacity.
        let mut list = gather.as_deref_mut().map(std::mem::take);
        loop {
            // The QP whose turn is under way goes on; one whose turn is spent
            // goes to the back of the line.
            let (qpn, turn, from_queue) = match self.burst.take() {
                Some((qpn, 0)) => {
                    self.mark_ready(qpn);
                    continue;
                }
                Some((qpn, left)) => (qpn, left, false),
                None => {
                    let Some(qpn) = self.ready.pop_front() else {
                        self.debug_check_none_left_out(now, buf, &mut list);
                        break;
                    };
                    (qpn, TX_BURST, true)
                }
            };
            let Some(qp) = self.qps.get_mut(&qpn) else { continue };
            if from_queue {
                // (A QP whose turn goes on may be listed again meanwhile.)
                qp.tx_queued = false;
            }
            let src_port = self.cfg.udp_src_port.unwrap_or(qp.src_port);
            let mut ctx = ctx!(self, now);
            ctx.gather = list.take();
            let mut left = turn;
            // Whether the turn ended with the QP out of packets (it waits,
            // unlisted, for the next call that gives it one).
            let mut drained = false;
            let mut stop = false;
            // A CQ that overran ends the turn: its QPs enter ERR first.
            while left > 0 && ctx.overrun.is_empty() {
                if let Some(g) = ctx.gather.as_mut() {
                    g.clear();
                }
                let Some(out) = Self::poll_role(qp, &mut ctx, buf) else {
                    drained = true;
                    break;
                };
                left -= 1;
                if !emit(&self.cfg, out, src_port, buf, ctx.gather.as_deref().unwrap_or(&[])) {
                    stop = true;
                    break;
                }
            }
            list = ctx.gather.take();
            self.after_call();
            if !drained || stop {
                self.burst = Some((qpn, left));
            }
            if stop {
                break;
            }
        }
        if let (Some(g), Some(l)) = (gather, list) {
            *g = l;
        }
    }

    /// The next packet of `qp`, from its requester or its responder: a
    /// response first, except a lone ACK, which follows one request so both
    /// can leave in one GSO send.
    fn poll_role(qp: &mut Qp, ctx: &mut Ctx<'_>, buf: &mut [u8]) -> Option<Outgoing> {
        if !qp.has_tx_work() {
            None
        } else if qp.ack_may_follow_request() {
            qp.resp.ack_waited = true;
            qp.requester_poll(ctx, buf).or_else(|| qp.responder_poll(ctx, buf))
        } else if qp.responder_has_work() {
            qp.responder_poll(ctx, buf).or_else(|| qp.requester_poll(ctx, buf))
        } else {
            // (Bulk sending: no call that finds no response.)
            qp.requester_poll(ctx, buf)
        }
    }

    /// Lists QP `qpn` as one that may have a packet to send (once).
    fn mark_ready(&mut self, qpn: u32) {
        if let Some(qp) = self.qps.get_mut(&qpn)
            && !qp.tx_queued
        {
            qp.tx_queued = true;
            self.ready.push_back(qpn);
        }
    }

    /// Debug builds: when no listed QP had a packet, no unlisted one has
    /// either (a call that gave a QP work without listing it would stall it
    /// until its timer). A QP in an RNR wait is listed by its timer when
    /// the wait ends; until `handle_timeout` ran it may send unlisted.
    fn debug_check_none_left_out(&mut self, now: Instant, buf: &mut [u8], pieces: &mut Option<Vec<crate::ctx::Piece>>) {
        if cfg!(debug_assertions) {
            let idle: Vec<u32> =
                self.qps.values().filter(|q| q.has_tx_work() && q.req.rnr_until.is_none()).map(|q| q.qpn).collect();
            for qpn in idle {
                assert!(self.poll_qp(qpn, now, buf, pieces).is_none(), "QP {qpn:#x} had a packet but was not listed");
            }
        }
    }

    /// The next packet of QP `qpn` if it has one (the debug check's way in).
    fn poll_qp(
        &mut self,
        qpn: u32,
        now: Instant,
        buf: &mut [u8],
        pieces: &mut Option<Vec<crate::ctx::Piece>>,
    ) -> Option<Outgoing> {
        let qp = self.qps.get_mut(&qpn)?;
        let mut ctx = ctx!(self, now);
        ctx.gather = pieces.take().map(|mut l| {
            l.clear();
            l
        });
        let out = Self::poll_role(qp, &mut ctx, buf);
        *pieces = ctx.gather.take();
        self.after_call();
        out
    }

    /// The earliest instant at which [`Device::handle_timeout`] has work:
    /// the first of the timer index (see `crate::timers`).
    pub fn poll_timeout(&self) -> Option<Instant> {
        debug_assert_eq!(self.timers.earliest(), self.earliest_timer(), "timer index out of step with the QPs");
        self.timers.earliest()
    }

    /// The earliest retransmit or RNR timer of any QP (a scan, to check the
    /// index in debug builds).
    fn earliest_timer(&self) -> Option<Instant> {
        let cqs = self.cqs.iter().flatten().filter_map(Cq::moderation_deadline);
        self.qps.values().flat_map(|q| [q.comp.timer, q.req.rnr_until]).flatten().chain(cqs).min()
    }

    /// Runs the timers due at `now`, earliest first.
    pub fn handle_timeout(&mut self, now: Instant) {
        self.now = Some(now);
        while let Some((t, qpn, kind)) = self.timers.pop_due(now) {
            if kind == TimerKind::CqModeration {
                // (`qpn` is the CQ's handle.)
                if let Some(Some(c)) = self.cqs.get_mut(qpn as usize) {
                    debug_assert_eq!(c.moderation_deadline(), Some(t));
                    if c.fire_due(now) {
                        self.comp_events.push_back(qpn);
                    }
                }
                continue;
            }
            let Some(qp) = self.qps.get_mut(&qpn) else { continue };
            match kind {
                // An RNR wait that ran out lets the requester send again.
                TimerKind::Rnr => {
                    debug_assert_eq!(qp.req.rnr_until, Some(t));
                    qp.req.rnr_until = None;
                }
                TimerKind::CqModeration => {}
                TimerKind::Retransmit => {
                    debug_assert_eq!(qp.comp.timer, Some(t));
                    let mut ctx = ctx!(self, now);
                    qp.completer_timeout(&mut ctx);
                    self.after_call();
                }
            }
            // It may send again (after an RNR wait) or resend (a rewind).
            self.mark_ready(qpn);
        }
    }
}

/// The port's P_Key table holds one entry, the default full-member P_Key
/// (rxe: `IB_DEFAULT_PKEY_FULL`), so every QP's `pkey_index` 0 names it.
pub(crate) const PORT_PKEY: u16 = 0xffff;

/// IBTA 10.9.3 (C10-117): a packet's P_Key matches the QP's when neither
/// is invalid (low 15 bits zero), their low 15 bits are equal, and at
/// least one of them is a full member (bit 15). A request or response that
/// does not match is dropped silently and counted (rxe `check_keys`:
/// `pkey_match`, `bad_pkey_cntr`), before anything looks at its QP.
pub(crate) fn pkey_matches(packet: u16, ours: u16) -> bool {
    let (a, b) = (packet & 0x7fff, ours & 0x7fff);
    a != 0 && a == b && (packet | ours) & 0x8000 != 0
}

/// The source and destination addresses of packet `out` and what its ICRC
/// covers besides them. Not inlined and by reference: where an `IpAddr` is
/// both matched on and moved, LLVM moves it byte by byte.
///
/// A loopback device's GID 0 is made up from its IPv4 address (loopback
/// has no link-local address; see [`crate::devattr::loopback_of_gid`]):
/// packets from it leave from that IPv4 address, and a loopback device's
/// packets to such a GID go to the IPv4 address it stands for, so GID 0
/// (libfabric's default GID index) reaches the host's other loopback
/// devices as it reaches a peer on a NIC.
#[inline(never)]
fn addressing(cfg: &DeviceConfig, out: &Outgoing, src_port: u16) -> Option<(IpAddr, IpAddr, IcrcContext)> {
    let gid = cfg.gids.get(usize::from(out.sgid_index))?;
    let src = crate::devattr::loopback_route(gid);
    let dst = if src.is_loopback() { crate::devattr::loopback_route(&out.dst) } else { out.dst };
    let ip = match (&src, &dst) {
        (IpAddr::V4(s), IpAddr::V4(d)) => IpContext::v4_socket(*s, *d),
        (s, d) => IpContext::V6 { src: to_v6(*s), dst: to_v6(*d) },
    };
    Some((src, dst, IcrcContext { ip, src_port, dst_port: ROCE_V2_UDP_PORT }))
}

/// What packets of one length from one source GID and port to one peer
/// share: the addresses and the ICRC over the pseudo header, in the
/// [`TransmitGather`] handed out for each of them.
struct Seed {
    sgid_index: u8,
    dst: IpAddr,
    src_port: u16,
    len: usize,
    t: TransmitGather,
}

impl Seed {
    fn fits(&self, out: &Outgoing, src_port: u16) -> bool {
        self.len == out.len && self.sgid_index == out.sgid_index && self.src_port == src_port && self.dst == out.dst
    }
}

fn to_v6(a: IpAddr) -> std::net::Ipv6Addr {
    match a {
        IpAddr::V4(v) => v.to_ipv6_mapped(),
        IpAddr::V6(v) => v,
    }
}
