//! Completion queues, completion channels and polling: `ibv_create_cq`,
//! the inline `ibv_poll_cq` / `ibv_req_notify_cq` (through the context's
//! ops), `ibv_get_cq_event` / `ibv_ack_cq_events`, and the extended CQ
//! (`ibv_create_cq_ex` with `ibv_start_poll` / `ibv_next_poll` /
//! `ibv_end_poll` and the `ibv_wc_read_*` readers), `ibv_resize_cq` and
//! `ibv_modify_cq` (event moderation).

use std::cell::UnsafeCell;
use std::ffi::{c_int, c_uint, c_void};
use std::os::fd::AsRawFd;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use softroce::{CompChannel, Cq, Wc, WcFlags, WcOpcode, WcStatus};

use crate::abi::*;
use crate::context;
use crate::errno::errno;
use crate::export::{Step, finished, guard, ibv_export, ibv_export_blocking, kept, ptr_or_errno, set_errno};
use crate::fd::nonblocking;

/// Completions fetched per engine call.
const BATCH: usize = 32;

/// An `ibv_cq_ex` (whose prefix is the `ibv_cq` every CQ is) and the
/// softroce CQ behind it.
#[repr(C)]
pub(crate) struct CqObj {
    pub(crate) c: IbvCqEx,
    pub(crate) cq: Cq,
    /// QPs using this CQ (destroy is refused while any remain).
    pub(crate) users: AtomicUsize,
    /// Channel events handed out by `ibv_get_cq_event` (destroy waits for
    /// their acknowledgement).
    events: Mutex<u32>,
    /// Completions the extended poller fetched from the engine and has not
    /// handed out yet. They are the CQ's oldest: the next `start_poll` /
    /// `next_poll` and `ibv_poll_cq` take them before the engine's.
    ex_buf: Mutex<ExBuf>,
    /// Whether `ex_buf` holds any (so `ibv_poll_cq` skips its lock).
    ex_pending: AtomicBool,
    /// The completion the readers report: written by `start_poll` /
    /// `next_poll`, read until `end_poll`; the application serialises them.
    ex_cur: UnsafeCell<Wc>,
}

struct ExBuf {
    buf: [Wc; BATCH],
    next: usize,
    len: usize,
}

fn blank_wc() -> Wc {
    Wc::new(0, WcStatus::Success, WcOpcode::Send, 0)
}

/// The object behind a CQ pointer.
///
/// # Safety
/// `cq` is NULL or a CQ from `ibv_create_cq(_ex)`, not destroyed.
pub(crate) unsafe fn cq_obj<'a>(cq: *mut IbvCq) -> Option<&'a CqObj> {
    // SAFETY: per the contract; `c` (whose prefix is ibv_cq) is first.
    (!cq.is_null()).then(|| unsafe { &*(cq as *const CqObj) })
}

/// An `ibv_comp_channel` and softroce's channel.
#[repr(C)]
pub(crate) struct ChanObj {
    pub(crate) c: IbvCompChannel,
    pub(crate) ch: CompChannel,
    /// CQs attached to it (destroy is refused while any remain).
    users: AtomicUsize,
}

ibv_export! { "IBVERBS_1.0";
    /// A completion channel: `fd` becomes readable when an armed CQ fires.
    fn ibv_create_comp_channel(context: *mut IbvContext) -> *mut IbvCompChannel {
        // SAFETY: a context from ibv_open_device (checked for NULL).
        let Some(b) = (unsafe { context::block(context) }) else {
            set_errno(libc::EINVAL);
            return std::ptr::null_mut();
        };
        match b.ctx.create_comp_channel() {
            Ok(ch) => {
                let c = IbvCompChannel { context, fd: ch.as_raw_fd(), refcnt: 0 };
                Box::into_raw(Box::new(ChanObj { c, ch, users: AtomicUsize::new(0) })) as *mut IbvCompChannel
            }
            Err(e) => {
                set_errno(errno(&e));
                std::ptr::null_mut()
            }
        }
    }
}

ibv_export! { "IBVERBS_1.0";
    /// Destroys a channel; EBUSY while CQs use it.
    fn ibv_destroy_comp_channel(channel: *mut IbvCompChannel) -> c_int {
        if channel.is_null() {
            return libc::EINVAL;
        }
        // SAFETY: a channel from ibv_create_comp_channel; `c` is first.
        let o = unsafe { &*(channel as *const ChanObj) };
        if o.users.load(Ordering::Acquire) != 0 {
            return libc::EBUSY;
        }
        // SAFETY: made by Box::into_raw; the caller gives it up.
        drop(unsafe { Box::from_raw(channel as *mut ChanObj) });
        0
    }
}

/// A CQ of at least `cqe` entries on `comp_vector`: EINVAL for `cqe`
/// outside `1..=max_cqe` or a vector past `num_comp_vectors`, as the
/// kernel and rxe answer; `cq->cqe` is rxe's size (`2^k - 1`).
fn make_cq(
    context: *mut IbvContext,
    cqe: c_int,
    cq_context: *mut c_void,
    channel: *mut IbvCompChannel,
    comp_vector: c_int,
) -> Result<*mut CqObj, c_int> {
    // SAFETY: a context from ibv_open_device (checked for NULL).
    let b = unsafe { context::block(context) }.ok_or(libc::EINVAL)?;
    let (Ok(cqe), Ok(comp_vector)) = (u32::try_from(cqe), u32::try_from(comp_vector)) else {
        return Err(libc::EINVAL);
    };
    let ch = if channel.is_null() {
        None
    } else {
        // SAFETY: a channel from ibv_create_comp_channel.
        Some(unsafe { &*(channel as *const ChanObj) })
    };
    let cq = b.ctx.create_cq_on(cqe, ch.map(|c| &c.ch), comp_vector).map_err(|e| errno(&e))?;
    let size = cq.size().map_err(|e| errno(&e))?;
    if let Some(c) = ch {
        c.users.fetch_add(1, Ordering::AcqRel);
    }
    let mut c = IbvCqEx::default();
    c.context = context;
    c.channel = channel;
    c.cq_context = cq_context;
    c.handle = cq.handle().get();
    c.cqe = size as c_int;
    c.start_poll = Some(start_poll);
    c.next_poll = Some(next_poll);
    c.end_poll = Some(end_poll);
    c.read_opcode = Some(read_opcode);
    c.read_vendor_err = Some(read_vendor_err);
    c.read_byte_len = Some(read_byte_len);
    c.read_imm_data = Some(read_imm_data);
    c.read_qp_num = Some(read_qp_num);
    c.read_src_qp = Some(read_src_qp);
    c.read_wc_flags = Some(read_wc_flags);
    c.read_slid = Some(read_slid);
    c.read_sl = Some(read_sl);
    c.read_dlid_path_bits = Some(read_dlid_path_bits);
    let handle = cq.handle();
    let o = Box::into_raw(Box::new(CqObj {
        c,
        cq,
        users: AtomicUsize::new(0),
        events: Mutex::new(0),
        ex_buf: Mutex::new(ExBuf { buf: [blank_wc(); BATCH], next: 0, len: 0 }),
        ex_pending: AtomicBool::new(false),
        ex_cur: UnsafeCell::new(blank_wc()),
    }));
    b.objects.lock().unwrap_or_else(|p| p.into_inner()).cqs.insert(handle.get(), o as usize);
    b.events.claim(softroce::EventSource::Cq(handle));
    Ok(o)
}

ibv_export! { "IBVERBS_1.1";
    /// A CQ of at least `cqe` entries, optionally attached to `channel`.
    fn ibv_create_cq(context: *mut IbvContext, cqe: c_int, cq_context: *mut c_void, channel: *mut IbvCompChannel, comp_vector: c_int) -> *mut IbvCq {
        ptr_or_errno(make_cq(context, cqe, cq_context, channel, comp_vector))
    }
}

/// The completion fields an extended CQ can report (rxe's set).
const WC_EX_SUPPORTED: u64 = IBV_WC_EX_WITH_BYTE_LEN
    | IBV_WC_EX_WITH_IMM
    | IBV_WC_EX_WITH_QP_NUM
    | IBV_WC_EX_WITH_SRC_QP
    | IBV_WC_EX_WITH_SLID
    | IBV_WC_EX_WITH_SL
    | IBV_WC_EX_WITH_DLID_PATH_BITS;

/// `verbs_context.create_cq_ex`.
pub(crate) unsafe extern "C" fn create_cq_ex(context: *mut IbvContext, attr: *mut IbvCqInitAttrEx) -> *mut IbvCqEx {
    guard("create_cq_ex", || {
        if attr.is_null() {
            set_errno(libc::EINVAL);
            return std::ptr::null_mut();
        }
        // SAFETY: the caller passes a readable ibv_cq_init_attr_ex.
        let a = unsafe { &*attr };
        // rxe's provider refuses other wc_flags; rdma-core other comp_mask
        // bits (a parent domain, IBV_CQ_INIT_ATTR_MASK_PD, cannot exist
        // here); rxe's kernel every creation flag the CQ command carries
        // (IGNORE_OVERRUN). SINGLE_THREADED is a user-space hint; unknown
        // flags, which rdma-core drops silently, are refused.
        let flags = if a.comp_mask & IBV_CQ_INIT_ATTR_MASK_FLAGS != 0 { a.flags } else { 0 };
        if a.wc_flags & !WC_EX_SUPPORTED != 0
            || a.comp_mask & !IBV_CQ_INIT_ATTR_MASK_FLAGS != 0
            || flags & !IBV_CREATE_CQ_ATTR_SINGLE_THREADED != 0
        {
            set_errno(libc::EOPNOTSUPP);
            return std::ptr::null_mut();
        }
        let cqe = c_int::try_from(a.cqe).unwrap_or(c_int::MAX);
        match make_cq(context, cqe, a.cq_context, a.channel, c_int::try_from(a.comp_vector).unwrap_or(c_int::MAX)) {
            Ok(o) => {
                // SAFETY: just made.
                unsafe { (*o).c.comp_mask = 0 };
                o as *mut IbvCqEx
            }
            Err(e) => {
                set_errno(e);
                std::ptr::null_mut()
            }
        }
    })
}

ibv_export! { "IBVERBS_1.1";
    /// Destroys a CQ: EBUSY while QPs use it; waits until every channel
    /// event handed out for it was acknowledged (`ibv_ack_cq_events`), as
    /// rdma-core does.
    fn ibv_destroy_cq(cq: *mut IbvCq) -> c_int {
        // SAFETY: a CQ from ibv_create_cq (checked for NULL).
        let Some(o) = (unsafe { cq_obj(cq) }) else { return libc::EINVAL };
        if o.users.load(Ordering::Acquire) != 0 {
            return libc::EBUSY;
        }
        loop {
            let delivered = *o.events.lock().unwrap_or_else(|p| p.into_inner());
            // SAFETY: comp_events_completed is only written by
            // ibv_ack_cq_events under the same lock; read it volatile.
            let acked = unsafe { std::ptr::read_volatile(&o.c.comp_events_completed) };
            if acked >= delivered {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        // SAFETY: the CQ's context is live while the CQ is.
        if let Some(b) = unsafe { context::block(o.c.context) } {
            b.objects.lock().unwrap_or_else(|p| p.into_inner()).cqs.remove(&o.c.handle);
        }
        if !o.c.channel.is_null() {
            // SAFETY: the channel outlives its CQs (destroy refuses otherwise).
            unsafe { &*(o.c.channel as *const ChanObj) }.users.fetch_sub(1, Ordering::AcqRel);
        }
        // SAFETY: made by Box::into_raw; the caller gives it up.
        drop(unsafe { Box::from_raw(cq as *mut CqObj) });
        0
    }
}

ibv_export! { "IBVERBS_1.1";
    /// Resizes a CQ to at least `cqe` entries, keeping the completions in
    /// it; `cq->cqe` becomes rxe's size (`2^k - 1`). EINVAL (returned, as
    /// rdma-core does) for `cqe` outside `1..=max_cqe` or below the
    /// completions it holds, counting those an extended poll fetched and
    /// has not handed out.
    fn ibv_resize_cq(cq: *mut IbvCq, cqe: c_int) -> c_int {
        // SAFETY: a CQ from ibv_create_cq (checked for NULL).
        let Some(o) = (unsafe { cq_obj(cq) }) else { return libc::EINVAL };
        let Ok(cqe) = u32::try_from(cqe) else { return libc::EINVAL };
        // Under the lock no poll moves completions out meanwhile.
        let b = o.ex_buf.lock().unwrap_or_else(|p| p.into_inner());
        match o.cq.resize_holding(cqe, b.len - b.next) {
            Ok(size) => {
                // SAFETY: `cqe` is the application's field of its CQ; it
                // may not read it while it resizes (rdma-core writes it so).
                unsafe { std::ptr::addr_of_mut!((*cq).cqe).write(size as c_int) };
                0
            }
            Err(e) => errno(&e),
        }
    }
}

/// `verbs_context.modify_cq` (the inline `ibv_modify_cq`): with
/// `IBV_CQ_ATTR_MODERATE`, an armed CQ's event waits for `cq_count`
/// completions or `cq_period` microseconds, whichever first (rxe returns
/// EOPNOTSUPP; softroce moderates, as NICs do). As rdma-core's
/// `ibv_cmd_modify_cq` and the kernel: EINVAL for no mask or bits at or past
/// `IBV_CQ_ATTR_RESERVED`.
pub(crate) unsafe extern "C" fn modify_cq(cq: *mut IbvCq, attr: *mut IbvModifyCqAttr) -> c_int {
    guard("modify_cq", || {
        // SAFETY: a CQ from ibv_create_cq (checked for NULL).
        let Some(o) = (unsafe { cq_obj(cq) }) else { return libc::EINVAL };
        if attr.is_null() {
            return libc::EINVAL;
        }
        // SAFETY: the caller passes a readable ibv_modify_cq_attr.
        let a = unsafe { *attr };
        if a.attr_mask == 0 || a.attr_mask >= IBV_CQ_ATTR_RESERVED {
            return libc::EINVAL;
        }
        let m = a.moderate;
        let period = std::time::Duration::from_micros(u64::from(m.cq_period));
        match o.cq.set_moderation(m.cq_count, period) {
            Ok(()) => 0,
            Err(e) => errno(&e),
        }
    })
}

thread_local! {
    /// What a thread waiting in `ibv_get_cq_event` keeps across its waits:
    /// the channel's queue and descriptor, and the channel's context. The
    /// channel object is not touched again once waiting: a program may
    /// destroy the channel while a thread of its own waits on it (as
    /// rping's client may, its CQ thread never joined), and the waiter
    /// waits on, as a read of the kernel's closed channel fd does. Dropped
    /// with the thread when it is cancelled.
    static CQ_WAIT: std::cell::RefCell<Option<(CompChannel, c_int, usize)>> = const { std::cell::RefCell::new(None) };
}

ibv_export_blocking! { "IBVERBS_1.1";
    /// The next CQ event: blocks until an armed CQ fires (or -1/EAGAIN
    /// when the channel's fd is non-blocking); a cancellation point.
    fn ibv_get_cq_event(channel: *mut IbvCompChannel, cq: *mut *mut IbvCq, cq_context: *mut *mut c_void) -> c_int, |again| {
        let kept = kept(&CQ_WAIT, again, || {
            if channel.is_null() || cq.is_null() || cq_context.is_null() {
                return Err(libc::EINVAL);
            }
            // SAFETY: a channel from ibv_create_comp_channel.
            let o = unsafe { &*(channel as *const ChanObj) };
            Ok((o.ch.clone(), o.c.fd, o.c.context as usize))
        });
        let (chan, fd, ctx) = match kept {
            Ok(k) => k,
            Err(step) => return step,
        };
        let done = |r| finished(&CQ_WAIT, r);
        // SAFETY: the channel's context is live while the channel is.
        let Some(b) = (unsafe { context::block(ctx as *mut IbvContext) }) else {
            set_errno(libc::EINVAL);
            return done(-1);
        };
        loop {
            let Some(h) = chan.try_get_event() else {
                if nonblocking(fd) {
                    set_errno(libc::EAGAIN);
                    return done(-1);
                }
                chan.send_deferred();
                return Step::Wait(fd);
            };
            let Some(&addr) = b.objects.lock().unwrap_or_else(|p| p.into_inner()).cqs.get(&h.get()) else {
                // The CQ was destroyed after it fired: nothing to report.
                continue;
            };
            // SAFETY: registered CQs are live (destroy unregisters first).
            let q = unsafe { &*(addr as *const CqObj) };
            *q.events.lock().unwrap_or_else(|p| p.into_inner()) += 1;
            // SAFETY: the caller passes writable out-pointers (checked).
            unsafe {
                *cq = addr as *mut IbvCq;
                *cq_context = q.c.cq_context;
            }
            return done(0);
        }
    }
}

ibv_export! { "IBVERBS_1.1";
    /// Acknowledges `nevents` events of `cq` (see `ibv_destroy_cq`).
    fn ibv_ack_cq_events(cq: *mut IbvCq, nevents: c_uint) {
        // SAFETY: a CQ from ibv_create_cq (checked for NULL).
        if let Some(o) = unsafe { cq_obj(cq) } {
            let _g = o.events.lock().unwrap_or_else(|p| p.into_inner());
            // SAFETY: written only here, under the events lock.
            unsafe {
                let p = std::ptr::addr_of!(o.c.comp_events_completed) as *mut u32;
                p.write_volatile(p.read_volatile().wrapping_add(nevents));
            }
        }
    }
}

/// `ibv_wc` as rdma-core lays it out; `imm_data` travels big-endian.
pub(crate) fn to_ibv_wc(w: &Wc) -> IbvWc {
    let mut o = IbvWc::default();
    o.wr_id = w.wr_id;
    o.status = w.status as u32 as _;
    o.opcode = w.opcode as u32 as _;
    o.vendor_err = w.vendor_err;
    o.byte_len = w.byte_len;
    o.imm_data = if w.wc_flags.contains(WcFlags::WITH_INV) { w.imm_data } else { w.imm_data.to_be() };
    o.qp_num = w.qp_num.get();
    o.src_qp = w.src_qp.get();
    o.wc_flags = w.wc_flags.0 as _;
    o.pkey_index = w.pkey_index;
    o.slid = w.slid;
    o.sl = w.sl;
    o.dlid_path_bits = w.dlid_path_bits;
    o
}

/// `ops.poll_cq` (the inline `ibv_poll_cq`): up to `num_entries`
/// completions, oldest first; a negative value on error.
pub(crate) unsafe extern "C" fn poll_cq(cq: *mut IbvCq, num_entries: c_int, wc: *mut IbvWc) -> c_int {
    guard("poll_cq", || {
        // SAFETY: a CQ from ibv_create_cq (checked for NULL).
        let Some(o) = (unsafe { cq_obj(cq) }) else { return -libc::EINVAL };
        if num_entries < 0 || (num_entries > 0 && wc.is_null()) {
            return -libc::EINVAL;
        }
        let want = num_entries as usize;
        let mut done = 0usize;
        if o.ex_pending.load(Ordering::Acquire) {
            // What an extended poll fetched and left comes first.
            let mut b = o.ex_buf.lock().unwrap_or_else(|p| p.into_inner());
            while done < want && b.next < b.len {
                // SAFETY: the caller's array has num_entries slots.
                unsafe { wc.add(done).write(to_ibv_wc(&b.buf[b.next])) };
                b.next += 1;
                done += 1;
            }
            o.ex_pending.store(b.next < b.len, Ordering::Release);
        }
        let mut buf = [blank_wc(); BATCH];
        while done < want {
            let n = (want - done).min(BATCH);
            let got = match o.cq.poll(&mut buf[..n]) {
                Ok(g) => g,
                Err(e) => return if done > 0 { done as c_int } else { -errno(&e) },
            };
            for (i, w) in buf[..got].iter().enumerate() {
                // SAFETY: the caller's array has num_entries slots.
                unsafe { wc.add(done + i).write(to_ibv_wc(w)) };
            }
            done += got;
            if got < n {
                break;
            }
        }
        done as c_int
    })
}

/// `ops.req_notify_cq`: arms the CQ for its channel.
pub(crate) unsafe extern "C" fn req_notify_cq(cq: *mut IbvCq, solicited_only: c_int) -> c_int {
    guard("req_notify_cq", || {
        // SAFETY: a CQ from ibv_create_cq (checked for NULL).
        let Some(o) = (unsafe { cq_obj(cq) }) else { return libc::EINVAL };
        match o.cq.req_notify(solicited_only != 0) {
            Ok(()) => 0,
            Err(e) => errno(&e),
        }
    })
}

// The extended poller. `ibv_start_poll` fetches a batch and exposes its
// first completion through `status`/`wr_id` and the readers; `next_poll`
// steps; completions fetched but not consumed before `end_poll` stay for
// the next `start_poll` or `ibv_poll_cq`, whichever comes first (both read
// one queue, as on hardware).

/// # Safety
/// `cq` is an extended CQ made here, not destroyed.
unsafe fn ex<'a>(cq: *mut IbvCqEx) -> &'a CqObj {
    // SAFETY: per the contract.
    unsafe { &*(cq as *const CqObj) }
}

/// The CQ's next completion: the oldest fetched and not handed out, else a
/// new batch from the engine; ENOENT when there is none.
fn advance(o: &CqObj) -> Result<Wc, c_int> {
    let mut guard = o.ex_buf.lock().unwrap_or_else(|p| p.into_inner());
    let b = &mut *guard;
    if b.next == b.len {
        b.next = 0;
        b.len = 0;
        b.len = o.cq.poll(&mut b.buf).map_err(|e| errno(&e))?;
        if b.len == 0 {
            return Err(libc::ENOENT);
        }
    }
    let w = b.buf[b.next];
    b.next += 1;
    o.ex_pending.store(b.next < b.len, Ordering::Release);
    Ok(w)
}

unsafe extern "C" fn start_poll(cq: *mut IbvCqEx, attr: *mut IbvPollCqAttr) -> c_int {
    guard("start_poll", || {
        if cq.is_null() {
            return libc::EINVAL;
        }
        // SAFETY: attr, if given, is readable.
        if !attr.is_null() && unsafe { (*attr).comp_mask } != 0 {
            return libc::EINVAL;
        }
        next_common(cq)
    })
}

/// Makes the next completion current: `status` and `wr_id`, which the
/// application reads directly, and what the readers report.
fn next_common(cq: *mut IbvCqEx) -> c_int {
    // SAFETY: an extended CQ made here (callers checked for NULL).
    let o = unsafe { ex(cq) };
    match advance(o) {
        Ok(w) => {
            // SAFETY: the poll calls are serialised by the application
            // (rdma-core's contract), so nothing else touches `ex_cur` or
            // these fields now.
            unsafe {
                *o.ex_cur.get() = w;
                (*cq).status = w.status as u32 as _;
                (*cq).wr_id = w.wr_id;
            }
            0
        }
        Err(e) => e,
    }
}

unsafe extern "C" fn next_poll(cq: *mut IbvCqEx) -> c_int {
    guard("next_poll", || {
        if cq.is_null() {
            return libc::EINVAL;
        }
        next_common(cq)
    })
}

unsafe extern "C" fn end_poll(cq: *mut IbvCqEx) {
    let _ = cq;
}

macro_rules! reader {
    ($name:ident -> $t:ty, |$w:ident| $e:expr) => {
        unsafe extern "C" fn $name(cq: *mut IbvCqEx) -> $t {
            guard(stringify!($name), || {
                if cq.is_null() {
                    return Default::default();
                }
                // SAFETY: an extended CQ made here; between start_poll and
                // end_poll, which the application serialises with the
                // readers, `ex_cur` is not written.
                let $w = unsafe { &*ex(cq).ex_cur.get() };
                $e
            })
        }
    };
}

reader!(read_opcode -> c_uint, |w| w.opcode as u32);
reader!(read_vendor_err -> u32, |w| w.vendor_err);
reader!(read_byte_len -> u32, |w| w.byte_len);
reader!(read_imm_data -> u32, |w| if w.wc_flags.contains(WcFlags::WITH_INV) { w.imm_data } else { w.imm_data.to_be() });
reader!(read_qp_num -> u32, |w| w.qp_num.get());
reader!(read_src_qp -> u32, |w| w.src_qp.get());
reader!(read_wc_flags -> c_uint, |w| w.wc_flags.0);
reader!(read_slid -> u32, |w| u32::from(w.slid));
reader!(read_sl -> u8, |w| w.sl);
reader!(read_dlid_path_bits -> u8, |w| w.dlid_path_bits);
