//! The verbs objects: protection domains, memory regions and windows,
//! completion queues and channels, queue pairs, SRQs and address handles.
//! Each holds what it depends on (a QP its CQs and PD), so Rust's drop
//! order destroys them in the order verbs requires.

use std::net::IpAddr;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, RawFd};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use roce_proto::mem::{OwnedBuffer, Region};
use roce_proto::mr::{MwBindInfo, MwType};
use roce_proto::qp_state::required_mask;
use roce_proto::verbs::{AccessFlags, QpAttrMask as M, QpState, QpType, SendFlags};
use roce_proto::{AhAttr, Mtu, QpAttr, QpCap, QpInitAttr, RecvWr, SendWr, Sge, Wc};

use crate::channel::EventQueue;
use crate::context::Context;
use crate::error::Error;

/// A protection domain (`ibv_pd`).
#[derive(Debug, Clone)]
pub struct Pd(Arc<PdInner>);

#[derive(Debug)]
struct PdInner {
    ctx: Context,
    handle: u32,
}

impl Drop for PdInner {
    fn drop(&mut self) {
        let h = self.handle;
        let _ = self.ctx.shared().with_dev(false, |d| d.dealloc_pd(h));
    }
}

impl Context {
    /// Allocates a protection domain.
    pub fn alloc_pd(&self) -> Result<Pd, Error> {
        let handle = self.shared().with_live_dev(false, |d| d.alloc_pd())?;
        Ok(Pd(Arc::new(PdInner { ctx: self.clone(), handle })))
    }

    /// Creates a completion queue of at least `cqe` entries whose events
    /// (once armed with [`Cq::req_notify`]) go to `channel`.
    pub fn create_cq(&self, cqe: u32, channel: Option<&CompChannel>) -> Result<Cq, Error> {
        self.create_cq_on(cqe, channel, 0)
    }

    /// [`Context::create_cq`] on completion vector `comp_vector`
    /// (`ibv_create_cq`'s last argument). `cqe` outside `1..=max_cqe` is
    /// [`roce_proto::VerbError::Cqe`], a vector at or past
    /// [`roce_proto::device::NUM_COMP_VECTORS`] is
    /// [`roce_proto::VerbError::CompVector`] (EINVAL, as rxe).
    pub fn create_cq_on(&self, cqe: u32, channel: Option<&CompChannel>, comp_vector: u32) -> Result<Cq, Error> {
        let s = self.shared();
        s.live()?;
        let mut st = s.lock();
        let handle = st.dev.create_cq_on(cqe, comp_vector)?;
        if let Some(ch) = channel {
            st.channels.insert(handle, ch.queue.clone());
        }
        drop(st);
        Ok(Cq(Arc::new(CqInner { ctx: self.clone(), handle, _channel: channel.cloned() })))
    }

    /// Creates a completion channel (`ibv_create_comp_channel`).
    pub fn create_comp_channel(&self) -> Result<CompChannel, Error> {
        Ok(CompChannel { queue: Arc::new(EventQueue::new()?), ctx: self.clone() })
    }
}

impl Pd {
    fn ctx(&self) -> &Context {
        &self.0.ctx
    }

    /// The context it was allocated from.
    pub fn context(&self) -> &Context {
        &self.0.ctx
    }

    /// The handle the engine knows it by.
    pub fn handle(&self) -> u32 {
        self.0.handle
    }

    /// Registers `len` bytes of zeroed memory the region owns, for `access`.
    /// Its I/O virtual address is the memory's address, as with `ibv_reg_mr`.
    pub fn reg_mr(&self, len: usize, access: AccessFlags) -> Result<Mr, Error> {
        let buf = OwnedBuffer::new(len);
        // SAFETY: `buf` moves into the Mr, which deregisters it before it
        // drops, and keeps it alive past that while a responder still holds
        // a grant (see MrInner::drop).
        #[allow(unsafe_code)]
        let region = unsafe { buf.region() };
        let pd = self.0.handle;
        let key = self.ctx().shared().with_live_dev(false, |d| d.reg_mr(pd, buf.addr(), region, access))?;
        Ok(Mr(Arc::new(MrInner {
            pd: self.clone(),
            key,
            addr: buf.addr(),
            len,
            region: Some(region),
            buf: std::sync::Mutex::new(Some(buf)),
            deregistered: Default::default(),
        })))
    }

    /// Registers caller memory, as `ibv_reg_mr` does.
    ///
    /// # Safety
    /// `[addr, addr + len)` must stay valid for reads and writes, and must
    /// not be accessed in ways that race with the device (remote writes,
    /// receives, READ results land there at any time), until the returned
    /// region is dropped and no remote access can be in flight.
    #[allow(unsafe_code)]
    pub unsafe fn reg_mr_raw(&self, addr: *mut u8, len: usize, access: AccessFlags) -> Result<Mr, Error> {
        // SAFETY: the caller's promise above.
        let region = unsafe { Region::new(addr, len) }.ok_or(Error::OutOfBounds { offset: 0, len, size: 0 })?;
        let pd = self.0.handle;
        let key = self.ctx().shared().with_live_dev(false, |d| d.reg_mr(pd, addr as u64, region, access))?;
        Ok(Mr(Arc::new(MrInner {
            pd: self.clone(),
            key,
            addr: addr as u64,
            len,
            region: None,
            buf: std::sync::Mutex::new(None),
            deregistered: Default::default(),
        })))
    }

    /// `ibv_advise_mr`: checks that each SGE names a range of an
    /// `ON_DEMAND` region of this PD (and, for `PrefetchWrite`, a writable
    /// one). The prefetch itself is a no-op that succeeds: user memory in a
    /// user-space stack is naturally on demand (never pinned; the kernel
    /// faults each page in when the engine first touches it), so whether
    /// the call waits (`IBV_ADVISE_MR_FLAG_FLUSH`) changes nothing.
    pub fn advise_mr(&self, advice: crate::odp::Advice, sges: &[Sge]) -> Result<(), Error> {
        let pd = self.0.handle;
        self.ctx().shared().with_live_dev(false, |d| crate::odp::check(d.mr_table(), pd, advice, sges))
    }

    /// Allocates a memory window (`ibv_alloc_mw`).
    pub fn alloc_mw(&self, ty: MwType) -> Result<Mw, Error> {
        let pd = self.0.handle;
        let key = self.ctx().shared().with_live_dev(false, |d| d.alloc_mw(pd, ty))?;
        Ok(Mw { pd: self.clone(), key: std::sync::atomic::AtomicU32::new(key), ty })
    }

    /// Creates a shared receive queue of `max_wr` WRs with `max_sge` SGEs each.
    pub fn create_srq(&self, max_wr: u32, max_sge: u32) -> Result<Srq, Error> {
        let pd = self.0.handle;
        let handle = self.ctx().shared().with_live_dev(false, |d| d.create_srq(pd, max_wr, max_sge))?;
        Ok(Srq(Arc::new(SrqInner { pd: self.clone(), handle })))
    }

    /// Creates an address handle for UD sends to `dest`.
    pub fn create_ah(&self, dest: IpAddr) -> Result<Ah, Error> {
        let sgid_index = self.ctx().device().addr_gid_index() as u8;
        self.create_ah_with(AhAttr { dest, sgid_index, hop_limit: 64, traffic_class: 0, sl: 0, flow_label: 0 })
    }

    /// Creates an address handle with every GRH field given (`ibv_create_ah`).
    pub fn create_ah_with(&self, attr: AhAttr) -> Result<Ah, Error> {
        let pd = self.0.handle;
        let handle = self.ctx().shared().with_live_dev(false, |d| d.create_ah(pd, attr))?;
        Ok(Ah(Arc::new(AhInner { pd: self.clone(), handle })))
    }

    /// Creates a queue pair in RESET.
    pub fn create_qp(&self, init: QpInit<'_>) -> Result<Qp, Error> {
        self.create_qp_of(init, false)
    }

    /// Creates QP 1, the GSI QP the CM's MADs travel on (a UD QP; see
    /// `roce_proto::device::Device::create_gsi_qp`).
    pub(crate) fn create_gsi_qp(&self, init: QpInit<'_>) -> Result<Qp, Error> {
        self.create_qp_of(init, true)
    }

    fn create_qp_of(&self, init: QpInit<'_>, gsi: bool) -> Result<Qp, Error> {
        let attr = QpInitAttr {
            qp_type: init.qp_type,
            pd: self.0.handle,
            send_cq: init.send_cq.0.handle,
            recv_cq: init.recv_cq.0.handle,
            srq: init.srq.map(|s| s.0.handle),
            cap: init.cap,
            sq_sig_all: init.sq_sig_all,
            block_self_mcast_lb: init.block_self_mcast_lb,
        };
        let shared = self.ctx().shared();
        let qpn = match shared.sock.member() {
            // QP 1 is every process's own (block 0 is nobody's).
            _ if gsi => shared.with_live_qp(false, |d| d.create_gsi_qp(attr).map(|q| (q, q)))?,
            // A shared device: a number of this process's blocks.
            Some(m) => shared.with_live_qp(false, |d| {
                let q = m.alloc_qpn(&shared.sock, |q| d.qp(q).is_some())?;
                d.create_qp_as(q, attr).map(|q| (q, q)).map_err(Error::from)
            })?,
            None => shared.with_live_qp(false, |d| d.create_qp(attr).map(|q| (q, q)))?,
        };
        Ok(Qp(Arc::new(QpInner {
            pd: self.clone(),
            qpn,
            qp_type: init.qp_type,
            _send_cq: init.send_cq.clone(),
            _recv_cq: init.recv_cq.clone(),
            _srq: init.srq.cloned(),
            for_app: Mutex::new(Vec::new()),
        })))
    }
}

/// A registered memory region (`ibv_mr`).
#[derive(Debug, Clone)]
pub struct Mr(Arc<MrInner>);

#[derive(Debug)]
struct MrInner {
    pd: Pd,
    key: u32,
    addr: u64,
    len: usize,
    /// The owned memory, as the engine sees it (`None` for caller memory).
    region: Option<Region>,
    /// Owns that memory (behind a mutex only to be `Sync`; it is touched
    /// once, when the region goes).
    buf: std::sync::Mutex<Option<OwnedBuffer>>,
    /// Set by [`Mr::deregister`]: the key is gone (and may be reused).
    deregistered: std::sync::atomic::AtomicBool,
}

impl Drop for MrInner {
    fn drop(&mut self) {
        let s = self.pd.ctx().shared();
        let mut st = s.lock();
        if !self.deregistered.load(std::sync::atomic::Ordering::Acquire) {
            let _ = st.dev.dereg_mr(self.key);
        }
        if let Some(b) = self.buf.get_mut().unwrap_or_else(|e| e.into_inner()).take()
            && st.dev.memory_in_use(b.addr() as usize, b.len())
        {
            // A responder still reads or writes it: free it when it is done.
            st.graveyard.push(b);
        }
    }
}

/// Returns once no responder holds a grant into `[addr, addr + len)`: the
/// grant goes when the response is sent or the QP fails, and the driver
/// (or this loop) makes that progress.
fn wait_until_released(s: &crate::driver::Shared, addr: usize, len: usize) -> Result<(), Error> {
    loop {
        let mut st = s.lock();
        if !st.dev.memory_in_use(addr, len) {
            return Ok(());
        }
        s.progress(&mut st)?;
        drop(st);
        std::thread::sleep(std::time::Duration::from_micros(50));
    }
}

impl Mr {
    /// Deregisters the region now (`ibv_dereg_mr`), reporting why it cannot
    /// be (memory windows still bound: the region stays registered). For
    /// caller memory ([`Pd::reg_mr_raw`]) it returns only once no responder
    /// holds a grant into the memory any more (a READ still being answered),
    /// so the caller may free it: rxe's MR references keep pinned pages for
    /// the same reason. Afterwards the keys are invalid.
    pub fn deregister(&self) -> Result<(), Error> {
        use std::sync::atomic::Ordering;
        let s = self.0.pd.ctx().shared();
        {
            let mut st = s.lock();
            if self.0.deregistered.load(Ordering::Acquire) {
                return Ok(());
            }
            st.dev.dereg_mr(self.0.key)?;
            self.0.deregistered.store(true, Ordering::Release);
        }
        if self.0.region.is_none() {
            wait_until_released(s, self.0.addr as usize, self.0.len)?;
        }
        Ok(())
    }

    /// Re-registers the region (`ibv_rereg_mr` without a new translation):
    /// into `pd` and with `access`, each if given. The keys stay (rxe 6.x's
    /// `rxe_rereg_user_mr`), the memory too. Returns the region's new handle;
    /// this one is spent (its drop no longer deregisters). Refused, changing
    /// nothing, for a PD of another device, invalid access, or windows
    /// bound ([`roce_proto::mr::MrError::HasWindows`]).
    pub fn rereg(&self, pd: Option<&Pd>, access: Option<AccessFlags>) -> Result<Mr, Error> {
        self.rereg_with(pd, None, access)
    }

    /// [`Mr::rereg`] that may also move the region to caller memory
    /// `[addr, addr + len)`, at I/O virtual address `addr`
    /// (`IBV_REREG_MR_CHANGE_TRANSLATION`); the keys stay. It returns once
    /// no responder holds a grant into the old memory, so the caller may
    /// free that (as [`Mr::deregister`]). Regions owning their memory
    /// ([`Pd::reg_mr`]) keep it: a new translation for them is refused.
    ///
    /// # Safety
    /// As for [`Pd::reg_mr_raw`], for the new memory.
    #[allow(unsafe_code)]
    pub unsafe fn rereg_raw(
        &self,
        pd: Option<&Pd>,
        mem: Option<(*mut u8, usize)>,
        access: Option<AccessFlags>,
    ) -> Result<Mr, Error> {
        let translation = match mem {
            None => None,
            Some((addr, len)) => {
                // SAFETY: the caller's promise above.
                let region = unsafe { Region::new(addr, len) }.ok_or(Error::OutOfBounds { offset: 0, len, size: 0 })?;
                Some((addr as u64, region))
            }
        };
        self.rereg_with(pd, translation, access)
    }

    fn rereg_with(
        &self,
        pd: Option<&Pd>,
        translation: Option<(u64, Region)>,
        access: Option<AccessFlags>,
    ) -> Result<Mr, Error> {
        use std::sync::atomic::Ordering;
        let invalid = |why| Error::Verb(roce_proto::VerbError::Invalid(why));
        let s = self.0.pd.ctx().shared();
        if pd.is_some_and(|p| !std::ptr::eq(p.ctx().shared(), s)) {
            return Err(invalid("the PD is of another device"));
        }
        if translation.is_some() && self.0.region.is_some() {
            return Err(invalid("the region owns its memory: no new translation"));
        }
        {
            let mut st = s.lock();
            s.live()?;
            if self.0.deregistered.load(Ordering::Acquire) {
                return Err(roce_proto::VerbError::Mr(roce_proto::mr::MrError::UnknownKey(self.0.key)).into());
            }
            st.dev.rereg_mr(self.0.key, pd.map(Pd::handle), translation, access)?;
            // The key now belongs to the new handle.
            self.0.deregistered.store(true, Ordering::Release);
        }
        let (addr, len) = translation.map_or((self.0.addr, self.0.len), |(a, r)| (a, r.len()));
        if translation.is_some() {
            wait_until_released(s, self.0.addr as usize, self.0.len)?;
        }
        let buf = self.0.buf.lock().unwrap_or_else(|e| e.into_inner()).take();
        Ok(Mr(Arc::new(MrInner {
            pd: pd.unwrap_or(&self.0.pd).clone(),
            key: self.0.key,
            addr,
            len,
            region: self.0.region,
            buf: std::sync::Mutex::new(buf),
            deregistered: Default::default(),
        })))
    }

    /// L_Key.
    pub fn lkey(&self) -> u32 {
        self.0.key
    }

    /// R_Key (equal to the L_Key, as in rxe).
    pub fn rkey(&self) -> u32 {
        self.0.key
    }

    /// Start address (the I/O virtual address remote peers use).
    pub fn addr(&self) -> u64 {
        self.0.addr
    }

    /// Length in bytes.
    pub fn len(&self) -> usize {
        self.0.len
    }

    /// Whether the region is empty.
    pub fn is_empty(&self) -> bool {
        self.0.len == 0
    }

    /// An SGE for `len` bytes at `offset` of the region.
    pub fn sge(&self, offset: usize, len: u32) -> Sge {
        Sge { addr: self.0.addr + offset as u64, length: len, lkey: self.0.key }
    }

    fn check(&self, offset: usize, len: usize) -> Result<(), Error> {
        if offset.checked_add(len).is_none_or(|e| e > self.0.len) {
            return Err(Error::OutOfBounds { offset, len, size: self.0.len });
        }
        Ok(())
    }

    fn owned(&self) -> Result<Region, Error> {
        self.0.region.ok_or(Error::Verb(roce_proto::VerbError::Invalid("caller memory: access it directly")))
    }

    /// Copies `dst.len()` bytes at `offset` out of the region (owned regions).
    /// Taken under the device lock, so it never races the device.
    pub fn read(&self, offset: usize, dst: &mut [u8]) -> Result<(), Error> {
        self.check(offset, dst.len())?;
        let r = self.owned()?;
        // The lock excludes the device, which touches the memory only under it.
        let _st = self.0.pd.ctx().shared().lock();
        r.read(offset as u64, dst).map_err(|_| Error::OutOfBounds { offset, len: dst.len(), size: self.0.len })
    }

    /// Copies `src` into the region at `offset` (owned regions), under the
    /// device lock.
    pub fn write(&self, offset: usize, src: &[u8]) -> Result<(), Error> {
        self.check(offset, src.len())?;
        let r = self.owned()?;
        let _st = self.0.pd.ctx().shared().lock();
        r.write(offset as u64, src).map_err(|_| Error::OutOfBounds { offset, len: src.len(), size: self.0.len })
    }

    /// A copy of `len` bytes at `offset`.
    pub fn to_vec(&self, offset: usize, len: usize) -> Result<Vec<u8>, Error> {
        let mut v = vec![0; len];
        self.read(offset, &mut v)?;
        Ok(v)
    }
}

/// A memory window (`ibv_mw`).
#[derive(Debug)]
pub struct Mw {
    pd: Pd,
    key: std::sync::atomic::AtomicU32,
    ty: MwType,
}

impl Drop for Mw {
    fn drop(&mut self) {
        let k = self.rkey();
        let _ = self.pd.ctx().shared().with_dev(false, |d| d.dealloc_mw(k));
    }
}

impl Mw {
    /// The window's current R_Key.
    pub fn rkey(&self) -> u32 {
        self.key.load(std::sync::atomic::Ordering::Acquire)
    }

    /// Window type.
    pub fn mw_type(&self) -> MwType {
        self.ty
    }

    /// Binds a type 1 window over `len` bytes at `offset` of `mr` through
    /// `qp` (`ibv_bind_mw`): posts a BIND_MW WR and returns the new R_Key,
    /// valid once that WR completes.
    pub fn bind(
        &self,
        qp: &Qp,
        wr_id: u64,
        mr: &Mr,
        offset: usize,
        len: u64,
        access: AccessFlags,
    ) -> Result<u32, Error> {
        let info = MwBindInfo { mr_key: mr.lkey(), addr: mr.addr() + offset as u64, length: len, access };
        self.bind_with(qp, wr_id, SendFlags::SIGNALED, info)
    }

    /// [`Mw::bind`] with the bind described by keys and addresses, as
    /// `ibv_bind_mw` passes it.
    pub fn bind_with(&self, qp: &Qp, wr_id: u64, flags: SendFlags, info: MwBindInfo) -> Result<u32, Error> {
        let (qpn, key) = (qp.0.qpn, self.rkey());
        let new = qp.ctx().shared().with_live_dev(true, |d| d.bind_mw(qpn, key, wr_id, flags, info))?;
        self.key.store(new, std::sync::atomic::Ordering::Release);
        Ok(new)
    }
}

/// A completion queue (`ibv_cq`).
#[derive(Debug, Clone)]
pub struct Cq(Arc<CqInner>);

#[derive(Debug)]
struct CqInner {
    ctx: Context,
    handle: u32,
    /// Kept open while the CQ lives.
    _channel: Option<CompChannel>,
}

impl Drop for CqInner {
    fn drop(&mut self) {
        let h = self.handle;
        self.ctx.shared().async_routes.release(crate::EventSource::Cq(h));
        let mut st = self.ctx.shared().lock();
        st.channels.remove(&h);
        let _ = st.dev.destroy_cq(h);
    }
}

impl Cq {
    /// The handle the engine knows it by (what channel events carry).
    pub fn handle(&self) -> u32 {
        self.0.handle
    }

    /// Pops up to `out.len()` completions, oldest first (`ibv_poll_cq`).
    /// An empty CQ first makes progress (receives what has arrived), so an
    /// application that polls is served without waiting for the driver.
    pub fn poll(&self, out: &mut [Wc]) -> Result<usize, Error> {
        self.poll_as(out, false)
    }

    /// Completions already in the CQ, without receiving (the caller is
    /// about to sleep on the socket), and the device's completion count.
    fn peek(&self, out: &mut [Wc]) -> Result<(usize, u64), Error> {
        let mut st = self.0.ctx.shared().lock();
        let n = st.dev.poll_cq(self.0.handle, out)?;
        Ok((n, st.dev.counters().completions))
    }

    /// [`Cq::poll`] by a thread counted in `waiters` (`caller_waits`) or not:
    /// the CQ, and if it is empty a progress pass first.
    fn poll_as(&self, out: &mut [Wc], caller_waits: bool) -> Result<usize, Error> {
        let s = self.0.ctx.shared();
        let mut st = s.lock();
        // A poll of an armed CQ is an event loop's last look before it
        // sleeps on the channel, not a busy poll.
        let busy = !caller_waits && s.mode == crate::driver::Progress::Thread && !st.dev.cq_armed(self.0.handle);
        let n = st.dev.poll_cq(self.0.handle, out)?;
        if n > 0 {
            drop(st);
            if busy {
                s.note_app_poll();
                spun_empty(false);
            }
            return Ok(n);
        }
        // Completions made before a failure are still polled; an empty CQ
        // of a failed device is an error, not a wait for what cannot come.
        s.live()?;
        let next = s.progress_for_app(&mut st, caller_waits)?;
        let n = st.dev.poll_cq(self.0.handle, out)?;
        drop(st);
        if busy {
            s.note_app_poll();
            spun_empty(n == 0);
        }
        s.nudge_driver(next);
        Ok(n)
    }

    /// The entries it holds (`ibv_cq.cqe`: rxe's `2^k - 1` at or above
    /// the size asked for).
    pub fn size(&self) -> Result<u32, Error> {
        let h = self.0.handle;
        Ok(self.0.ctx.shared().with_dev(false, |d| d.cq_size(h))?)
    }

    /// `ibv_resize_cq`: holds at least `cqe` entries from now on, the
    /// completions queued kept in order; returns the new size. Refused
    /// below the completions queued ([`roce_proto::cq::CqError::BelowHeld`])
    /// or outside `1..=max_cqe`.
    pub fn resize(&self, cqe: u32) -> Result<u32, Error> {
        self.resize_holding(cqe, 0)
    }

    /// [`Cq::resize`] by a wrapper that polled `held` completions out of
    /// the CQ and still holds them for its caller (they count as queued).
    pub fn resize_holding(&self, cqe: u32, held: usize) -> Result<u32, Error> {
        let h = self.0.handle;
        self.0.ctx.shared().with_live_dev(false, |d| d.resize_cq(h, cqe, held))
    }

    /// `ibv_modify_cq` with `IBV_CQ_ATTR_MODERATE`: an armed CQ's event
    /// waits for `count` completions or `period`, whichever comes first
    /// (see [`roce_proto::cq::Moderation`]; rxe refuses the verb).
    pub fn set_moderation(&self, count: u16, period: Duration) -> Result<(), Error> {
        let h = self.0.handle;
        let m = roce_proto::cq::Moderation { count, period };
        // (A kick: the driver's sleep may now have to end sooner.)
        self.0.ctx.shared().with_live_dev(true, |d| d.modify_cq(h, m))
    }

    /// Arms the CQ: the next completion (or next solicited one) makes its
    /// channel readable once (`ibv_req_notify_cq`).
    pub fn req_notify(&self, solicited_only: bool) -> Result<(), Error> {
        let h = self.0.handle;
        let s = self.0.ctx.shared();
        s.with_live_dev(false, |d| d.req_notify_cq(h, solicited_only))?;
        // The application will sleep on the channel: the driver thread
        // receives for it from now, and what its posts deferred (a credit
        // update) leaves before it sleeps.
        s.end_app_poll();
        s.flush_owed();
        Ok(())
    }

    /// Polls until `out` has at least one completion or `timeout` passes;
    /// returns how many were polled (0 on timeout). It polls for the
    /// context's spin time, then sleeps in the socket until a packet
    /// arrives or another thread made completions, and makes progress
    /// itself when it wakes: no hand-over between threads on the way to the
    /// application. Timers meanwhile are the driver thread's.
    ///
    /// While it sleeps it receives for the whole context: a thread that
    /// busy-polls another CQ of the context then gets its packets through
    /// this one's wake-ups. A thread that waits for rare completions beside
    /// a busy poller (a control queue, the CM's QP 1) sleeps on a
    /// [`CompChannel`] instead ([`Cq::req_notify`], then
    /// [`CompChannel::get_event`]), as [`crate::cm::CmService`]'s does.
    pub fn wait(&self, out: &mut [Wc], timeout: Duration) -> Result<usize, Error> {
        let s = self.0.ctx.shared();
        let deadline = std::time::Instant::now() + timeout;
        // Counted as a waiter before the first look, so a completion made by
        // another thread after it wakes this one, and the driver thread
        // stays off the socket meanwhile (also while this one spins).
        let _waiting = s.enter_wait();
        if !s.spin.is_zero() {
            let spin_until = std::time::Instant::now() + s.spin;
            loop {
                let n = self.poll_as(out, true)?;
                if n > 0 {
                    return Ok(n);
                }
                let now = std::time::Instant::now();
                if now >= deadline {
                    return Ok(0);
                }
                if now >= spin_until {
                    break;
                }
                std::hint::spin_loop();
            }
        }
        // Without spinning, the first look only checks the CQ: the socket
        // is read by the sleep that follows, not once more before it.
        let (n, mut seen) = self.peek(out)?;
        if n > 0 {
            return Ok(n);
        }
        // As `poll`: an empty CQ of a failed device is an error, also
        // for a wait that only looks.
        s.live()?;
        if timeout.is_zero() {
            return Ok(0);
        }
        // The deadline was just set: the first sleep needs no look at the clock.
        loop {
            let (mut st, _) = s.sleep_and_progress(deadline, crate::driver::Defer::IfCompleted, Some(seen))?;
            let n = st.dev.poll_cq(self.0.handle, out)?;
            seen = st.dev.counters().completions;
            let next = st.dev.poll_timeout();
            drop(st);
            s.nudge_driver(next);
            if n > 0 {
                return Ok(n);
            }
            s.live()?;
            if std::time::Instant::now() >= deadline {
                return Ok(0);
            }
        }
    }
}

/// A completion channel (`ibv_comp_channel`): a file descriptor that is
/// readable while a CQ event waits, for poll/epoll/`AsyncFd`.
#[derive(Debug, Clone)]
pub struct CompChannel {
    queue: Arc<EventQueue<u32>>,
    ctx: Context,
}

impl CompChannel {
    /// The next CQ event: the handle of the CQ that fired
    /// (`ibv_get_cq_event`), waiting up to `timeout` (`None`: forever).
    /// The CQ must be re-armed for the next event.
    pub fn get_event(&self, timeout: Option<Duration>) -> Result<Option<u32>, Error> {
        if let Some(cq) = self.queue.try_pop() {
            return Ok(Some(cq));
        }
        self.send_deferred();
        Ok(self.queue.pop_wait(timeout)?)
    }

    /// Sends what the context's posts deferred (a credit update, an ACK a
    /// waiting thread's pass held back), for a thread about to sleep on
    /// the channel's fd: fio reposts its receives, then waits there.
    pub fn send_deferred(&self) {
        self.ctx.shared().flush_owed();
    }

    /// The next CQ event if one waits, without blocking.
    pub fn try_get_event(&self) -> Option<u32> {
        self.queue.try_pop()
    }
}

impl AsFd for CompChannel {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.queue.as_fd()
    }
}

impl AsRawFd for CompChannel {
    fn as_raw_fd(&self) -> RawFd {
        self.queue.as_raw_fd()
    }
}

/// A shared receive queue (`ibv_srq`).
#[derive(Debug, Clone)]
pub struct Srq(Arc<SrqInner>);

#[derive(Debug)]
struct SrqInner {
    pd: Pd,
    handle: u32,
}

impl Drop for SrqInner {
    fn drop(&mut self) {
        let h = self.handle;
        self.pd.ctx().shared().async_routes.release(crate::EventSource::Srq(h));
        let _ = self.pd.ctx().shared().with_dev(false, |d| d.destroy_srq(h));
    }
}

impl Srq {
    /// Posts a receive.
    pub fn post_recv(&self, wr: &RecvWr<'_>) -> Result<(), Error> {
        let h = self.0.handle;
        self.0.pd.ctx().shared().with_live_dev(false, |d| d.post_srq_recv(h, wr))
    }

    /// The armed limit (0: disarmed, as after the limit event fired).
    pub fn limit(&self) -> Result<u32, Error> {
        let h = self.0.handle;
        Ok(self.0.pd.ctx().shared().with_dev(false, |d| d.srq_limit(h))?)
    }

    /// Arms the limit event: `SrqLimitReached` when fewer than `limit` WRs remain.
    pub fn set_limit(&self, limit: u32) -> Result<(), Error> {
        let h = self.0.handle;
        Ok(self.0.pd.ctx().shared().with_dev(false, |d| d.set_srq_limit(h, limit))?)
    }

    /// The WRs it holds at most (`ibv_query_srq`'s `max_wr`).
    pub fn size(&self) -> Result<u32, Error> {
        let h = self.0.handle;
        Ok(self.0.pd.ctx().shared().with_dev(false, |d| d.srq_size(h))?)
    }

    /// Resizes it to `max_wr` WRs (`ibv_modify_srq` with `IBV_SRQ_MAX_WR`),
    /// keeping those posted; refused for 0, past `max_srq_wr`, below the
    /// armed limit or below the WRs posted (see [`Device::resize_srq`]).
    ///
    /// [`Device::resize_srq`]: roce_proto::Device::resize_srq
    pub fn resize(&self, max_wr: u32) -> Result<(), Error> {
        let h = self.0.handle;
        self.0.pd.ctx().shared().with_live_dev(false, |d| d.resize_srq(h, max_wr))
    }
}

/// An address handle (`ibv_ah`) for UD sends.
#[derive(Debug, Clone)]
pub struct Ah(Arc<AhInner>);

#[derive(Debug)]
struct AhInner {
    pd: Pd,
    handle: u32,
}

impl Drop for AhInner {
    fn drop(&mut self) {
        let h = self.handle;
        let _ = self.pd.ctx().shared().with_dev(false, |d| d.destroy_ah(h));
    }
}

impl Srq {
    /// The handle the engine knows it by (what SRQ events carry).
    pub fn handle(&self) -> u32 {
        self.0.handle
    }
}

impl Ah {
    /// The handle to put in [`roce_proto::UdDest::ah`].
    pub fn handle(&self) -> u32 {
        self.0.handle
    }
}

/// What a QP is made of.
#[derive(Debug, Clone, Copy)]
pub struct QpInit<'a> {
    /// RC, UC or UD.
    pub qp_type: QpType,
    /// Where send completions go.
    pub send_cq: &'a Cq,
    /// Where receive completions go.
    pub recv_cq: &'a Cq,
    /// Receive from this SRQ instead of the QP's own queue.
    pub srq: Option<&'a Srq>,
    /// Queue sizes.
    pub cap: QpCap,
    /// Every send WR completes (as if SIGNALED).
    pub sq_sig_all: bool,
    /// The QP does not receive the multicast packets it sent itself
    /// (`IBV_QP_CREATE_BLOCK_SELF_MCAST_LB`).
    pub block_self_mcast_lb: bool,
}

impl<'a> QpInit<'a> {
    /// An RC QP with `depth` send and receive WRs of up to 4 SGEs and 256
    /// inline bytes.
    pub fn rc(send_cq: &'a Cq, recv_cq: &'a Cq, depth: u32) -> QpInit<'a> {
        QpInit {
            qp_type: QpType::Rc,
            send_cq,
            recv_cq,
            srq: None,
            cap: QpCap {
                max_send_wr: depth,
                max_recv_wr: depth,
                max_send_sge: 4,
                max_recv_sge: 4,
                max_inline_data: 256,
            },
            sq_sig_all: false,
            block_self_mcast_lb: false,
        }
    }

    /// The same with another transport.
    pub fn with_type(mut self, qp_type: QpType) -> QpInit<'a> {
        self.qp_type = qp_type;
        self
    }
}

/// What the peer needs to connect to a QP: exchanged out of band, as
/// rdma-core's examples do (`LID:QPN:PSN:GID`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QpEndpoint {
    /// QP number.
    pub qpn: u32,
    /// First PSN it will send.
    pub psn: u32,
    /// Its address (GID).
    pub gid: IpAddr,
}

/// Transport settings of [`Qp::connect_with`], with rdma-core's usual values
/// as defaults.
#[derive(Debug, Clone, Copy)]
pub struct ConnectOptions {
    /// Path MTU (default: the port's active MTU).
    pub mtu: Option<Mtu>,
    /// Remote access the QP grants (default: READ, WRITE and atomics).
    pub access: AccessFlags,
    /// Retransmit timeout exponent (4.096 us x 2^timeout; 14 = 67 ms).
    pub timeout: u8,
    /// Retries after timeouts or sequence NAKs.
    pub retry_cnt: u8,
    /// RNR retries (7 = forever).
    pub rnr_retry: u8,
    /// RNR timer code the responder sends (12 = 0.64 ms).
    pub min_rnr_timer: u8,
    /// Outstanding READ/atomics issued and accepted.
    pub max_rd_atomic: u8,
    /// Q_Key (UD).
    pub qkey: u32,
}

impl Default for ConnectOptions {
    fn default() -> ConnectOptions {
        ConnectOptions {
            mtu: None,
            access: AccessFlags::REMOTE_READ | AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_ATOMIC,
            timeout: 14,
            retry_cnt: 7,
            rnr_retry: 7,
            min_rnr_timer: 12,
            max_rd_atomic: 16,
            qkey: 0x1111_1111,
        }
    }
}

/// The RESET -> INIT transition's attributes ([`Qp::to_init`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ToInit {
    /// Remote access the QP allows (RC, UC).
    pub access: AccessFlags,
    /// Q_Key (UD).
    pub qkey: u32,
}

/// The INIT -> RTR transition's attributes ([`Qp::to_rtr`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ToRtr {
    /// The peer QP.
    pub remote: QpEndpoint,
    /// Our GID index to send from.
    pub sgid_index: u8,
    /// Path MTU.
    pub mtu: Mtu,
    /// READ/atomic requests this QP answers at once.
    pub max_dest_rd_atomic: u8,
    /// RNR timer code sent in RNR NAKs.
    pub min_rnr_timer: u8,
}

/// The RTR -> RTS transition's attributes ([`Qp::to_rts`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ToRts {
    /// First PSN sent.
    pub sq_psn: u32,
    /// Retransmit timeout exponent.
    pub timeout: u8,
    /// Retries after timeouts or sequence NAKs.
    pub retry_cnt: u8,
    /// RNR retries (7 = forever).
    pub rnr_retry: u8,
    /// READ/atomic requests outstanding.
    pub max_rd_atomic: u8,
}

/// A queue pair (`ibv_qp`).
#[derive(Debug, Clone)]
pub struct Qp(Arc<QpInner>);

#[derive(Debug)]
struct QpInner {
    pd: Pd,
    qpn: u32,
    qp_type: QpType,
    _send_cq: Cq,
    _recv_cq: Cq,
    _srq: Option<Srq>,
    /// Moves made on the application's behalf ([`Qp::modify_for_app`]),
    /// oldest first, one per attribute mask.
    for_app: Mutex<Vec<(QpAttr, M)>>,
}

impl Drop for QpInner {
    fn drop(&mut self) {
        let q = self.qpn;
        let s = self.pd.ctx().shared();
        // Dropped, a QP leaves its groups (the C API's `ibv_destroy_qp`
        // refuses while it is attached, as the kernel does).
        let groups = s.with_dev(false, |d| {
            let g = d.mcast_groups_of(q);
            for mgid in &g {
                let _ = d.detach_mcast(q, *mgid);
            }
            g
        });
        for mgid in groups {
            s.groups.remove(roce_proto::mcast::group_ip(&mgid));
        }
        let mut st = s.lock();
        // What a waiter's pass deferred (its last ACK) leaves first.
        let _ = s.flush(&mut st);
        let source = st.sources.source_of(&st.dev, q);
        let _ = st.dev.destroy_qp(q);
        if let Some(pair) = source {
            let st = &mut *st;
            st.sources.release(&st.dev, pair);
            st.stats.src_port_sockets = st.sources.len() as u64;
        }
        s.route_events(&mut st);
        drop(st);
        s.async_routes.release(crate::EventSource::Qp(q));
    }
}

impl Qp {
    fn ctx(&self) -> &Context {
        self.0.pd.ctx()
    }

    /// QP number.
    pub fn qpn(&self) -> u32 {
        self.0.qpn
    }

    /// Transport.
    pub fn qp_type(&self) -> QpType {
        self.0.qp_type
    }

    /// Current state.
    pub fn state(&self) -> QpState {
        let q = self.0.qpn;
        self.ctx().shared().with_dev(false, |d| d.qp(q).map_or(QpState::Err, |qp| qp.state()))
    }

    /// `ibv_modify_qp` with explicit attributes and mask. Packets a waiter's
    /// pass deferred (the ACK of what it just received) leave first: a move
    /// to ERR would otherwise drop them, and the peer, whose message was
    /// delivered, would retry it until RETRY_EXC_ERR.
    pub fn modify(&self, attr: &QpAttr, mask: M) -> Result<(), Error> {
        let q = self.0.qpn;
        let s = self.ctx().shared();
        {
            let mut st = s.lock();
            let _ = s.flush(&mut st);
        }
        s.with_live_qp(true, |d| d.modify_qp(q, attr, mask).map(|()| (q, ())))
    }

    /// [`Qp::modify`] on the application's behalf (rdma_cm's moves), noted
    /// for [`Qp::modified_for_app`]: `ibv_query_qp` must report them as if
    /// the application had made them.
    pub fn modify_for_app(&self, attr: &QpAttr, mask: M) -> Result<(), Error> {
        self.modify(attr, mask)?;
        let mut noted = self.0.for_app.lock().unwrap_or_else(|e| e.into_inner());
        noted.retain(|(_, m)| m.0 & !mask.0 != 0);
        noted.push((*attr, mask));
        Ok(())
    }

    /// The moves [`Qp::modify_for_app`] made, oldest first.
    pub fn modified_for_app(&self) -> Vec<(QpAttr, M)> {
        self.0.for_app.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// `ibv_attach_mcast`: this UD QP receives what is sent to multicast
    /// group `mgid` (rdma_cm's `::ffff:a.b.c.d` for IPv4 group a.b.c.d):
    /// the context joins the IP group on the device's interface with its
    /// first QP there. Attaching twice is not an error.
    pub fn attach_mcast(&self, mgid: [u8; 16]) -> Result<(), Error> {
        let (q, ctx) = (self.0.qpn, self.ctx());
        let group = roce_proto::mcast::group_ip(&mgid);
        if group.is_ipv4() != ctx.device().addr.is_ipv4() {
            return Err(Error::Verb(roce_proto::VerbError::Invalid("a group of another IP family than the device")));
        }
        let s = ctx.shared();
        let fresh = s.with_live_dev(false, |d| {
            let fresh = !d.mcast_groups_of(q).contains(&mgid);
            d.attach_mcast(q, mgid).map(|()| fresh)
        })?;
        if fresh && let Err(e) = s.groups.add(&ctx.owner.shared, group) {
            s.with_dev(false, |d| d.detach_mcast(q, mgid)).ok();
            return Err(Error::McastJoin { group, iface: ctx.device().addr, source: e });
        }
        Ok(())
    }

    /// `ibv_detach_mcast`: the QP leaves `mgid` (refused if not attached).
    pub fn detach_mcast(&self, mgid: [u8; 16]) -> Result<(), Error> {
        let q = self.0.qpn;
        let s = self.ctx().shared();
        s.with_dev(false, |d| d.detach_mcast(q, mgid))?;
        s.groups.remove(roce_proto::mcast::group_ip(&mgid));
        Ok(())
    }

    /// The multicast groups (MGIDs) the QP is attached to.
    pub fn mcast_groups(&self) -> Vec<[u8; 16]> {
        let q = self.0.qpn;
        self.ctx().shared().with_dev(false, |d| d.mcast_groups_of(q))
    }

    /// What the peer needs to connect to this QP, with `psn` as the first
    /// PSN this QP will send.
    pub fn endpoint(&self, psn: u32) -> QpEndpoint {
        QpEndpoint { qpn: self.0.qpn, psn: psn & 0xff_ffff, gid: self.ctx().device().addr }
    }

    /// RESET -> INIT -> RTR -> RTS to `remote` with default settings; this
    /// QP sends from PSN `local_psn` (what [`Qp::endpoint`] told the peer).
    pub fn connect(&self, local_psn: u32, remote: &QpEndpoint) -> Result<(), Error> {
        self.connect_with(local_psn, remote, &ConnectOptions::default())
    }

    /// [`Qp::connect`] with explicit settings. A UD QP ignores `remote`.
    pub fn connect_with(&self, local_psn: u32, remote: &QpEndpoint, o: &ConnectOptions) -> Result<(), Error> {
        self.to_init(&ToInit { access: o.access, qkey: o.qkey })?;
        self.connect_from_init(local_psn, remote, o)
    }

    /// INIT -> RTR -> RTS with `o`: [`Qp::connect_with`] for a QP already
    /// in INIT, which may hold receives posted before the peer was known
    /// (as rdma-core's pingpongs post them: a UD datagram that meets no
    /// receive is dropped for good).
    pub fn connect_from_init(&self, local_psn: u32, remote: &QpEndpoint, o: &ConnectOptions) -> Result<(), Error> {
        let info = self.ctx().device();
        self.to_rtr(&ToRtr {
            remote: *remote,
            sgid_index: info.addr_gid_index() as u8,
            mtu: o.mtu.unwrap_or(info.active_mtu),
            max_dest_rd_atomic: o.max_rd_atomic,
            min_rnr_timer: o.min_rnr_timer,
        })?;
        self.to_rts(&ToRts {
            sq_psn: local_psn,
            timeout: o.timeout,
            retry_cnt: o.retry_cnt,
            rnr_retry: o.rnr_retry,
            max_rd_atomic: o.max_rd_atomic,
        })
    }

    /// RESET -> INIT: the attributes that transition requires for this QP
    /// type (P_Key index 0 and port 1 are implied; UD takes the Q_Key, RC
    /// and UC the remote access flags).
    pub fn to_init(&self, t: &ToInit) -> Result<(), Error> {
        let a = QpAttr {
            qp_state: QpState::Init,
            qp_access_flags: t.access,
            pkey_index: 0,
            port_num: 1,
            qkey: t.qkey,
            ..QpAttr::default()
        };
        self.step(QpState::Reset, &a)
    }

    /// INIT -> RTR: the path to the peer and what the responder accepts.
    pub fn to_rtr(&self, t: &ToRtr) -> Result<(), Error> {
        let a = QpAttr {
            qp_state: QpState::Rtr,
            path_mtu: t.mtu,
            dest_qp_num: t.remote.qpn,
            rq_psn: t.remote.psn & 0xff_ffff,
            max_dest_rd_atomic: t.max_dest_rd_atomic,
            min_rnr_timer: t.min_rnr_timer,
            ah_attr: AhAttr {
                dest: t.remote.gid,
                sgid_index: t.sgid_index,
                hop_limit: 64,
                traffic_class: 0,
                sl: 0,
                flow_label: 0,
            },
            ..QpAttr::default()
        };
        self.step(QpState::Init, &a)
    }

    /// RTR -> RTS: the requester's timers and its first PSN.
    pub fn to_rts(&self, t: &ToRts) -> Result<(), Error> {
        let a = QpAttr {
            qp_state: QpState::Rts,
            sq_psn: t.sq_psn & 0xff_ffff,
            timeout: t.timeout,
            retry_cnt: t.retry_cnt,
            rnr_retry: t.rnr_retry,
            max_rd_atomic: t.max_rd_atomic,
            ..QpAttr::default()
        };
        self.step(QpState::Rtr, &a)
    }

    /// The move from `from` to `a.qp_state` with exactly the attributes
    /// the transition table requires for this QP type.
    fn step(&self, from: QpState, a: &QpAttr) -> Result<(), Error> {
        let mask = required_mask(from, a.qp_state, self.0.qp_type).expect("RESET-INIT-RTR-RTS exists for every type");
        self.modify(a, mask)
    }

    /// Moves the QP to ERR: every outstanding WR completes with `WR_FLUSH_ERR`.
    pub fn to_error(&self) -> Result<(), Error> {
        self.modify(&QpAttr { qp_state: QpState::Err, ..QpAttr::default() }, M::STATE)
    }

    /// Posts a send WR (`ibv_post_send`).
    pub fn post_send(&self, wr: &SendWr<'_>) -> Result<(), Error> {
        let q = self.0.qpn;
        self.ctx().shared().with_live_dev(true, |d| d.post_send(q, wr))
    }

    /// Posts several send WRs under one lock and one wake-up; stops at the
    /// first refused, returning how many were posted with the error.
    pub fn post_send_batch(&self, wrs: &[SendWr<'_>]) -> Result<(), (usize, Error)> {
        let q = self.0.qpn;
        self.ctx().shared().live().map_err(|e| (0, e))?;
        self.ctx().shared().with_dev(true, |d| {
            for (i, wr) in wrs.iter().enumerate() {
                d.post_send(q, wr).map_err(|e| (i, Error::from(e)))?;
            }
            Ok(())
        })
    }

    /// Posts a receive WR (`ibv_post_recv`).
    pub fn post_recv(&self, wr: &RecvWr<'_>) -> Result<(), Error> {
        let q = self.0.qpn;
        self.ctx().shared().post_recv_with(|d| d.post_recv(q, wr))
    }
}

/// How long a thread's busy polls find nothing before each further empty
/// poll gives up the CPU ([`spun_empty`]).
const SPIN_BEFORE_YIELD: std::time::Duration = std::time::Duration::from_micros(50);

thread_local! {
    /// When this thread's busy polls last started finding nothing.
    static EMPTY_SINCE: std::cell::Cell<Option<std::time::Instant>> = const { std::cell::Cell::new(None) };
}

/// A busy poll of this thread found completions (`empty` false) or none.
/// After [`SPIN_BEFORE_YIELD`] of empty polls, each one yields the CPU
/// (`sched_yield`, which returns at once when nothing else is runnable
/// there). What the poller waits for may need another thread queued on its
/// CPU: a peer's driver thread that must place the poller's WRITE and send
/// its ACK while the peer's application spins on memory (`ib_write_lat`),
/// and this VM's kernel lets a spinner run out its tick (4 ms) before a
/// woken thread gets the CPU. Measured (`ib_write_lat`, two processes on
/// two CPUs): average 280-370 us and p99 2.0-3.5 ms without, 60-72 us and
/// 1.7 ms with; bandwidth and ping-pong latency unchanged.
fn spun_empty(empty: bool) {
    EMPTY_SINCE.with(|c| {
        if !empty {
            c.set(None);
            return;
        }
        let now = std::time::Instant::now();
        match c.get() {
            None => c.set(Some(now)),
            Some(t) if now.duration_since(t) > SPIN_BEFORE_YIELD => std::thread::yield_now(),
            Some(_) => {}
        }
    });
}
