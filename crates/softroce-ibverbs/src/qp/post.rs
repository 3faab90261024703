//! Posting: the inline `ibv_post_send` / `ibv_post_recv` (reached through
//! the context's ops), C work requests read into softroce's, per-thread
//! scratch for their SGEs and inline bytes, and the batched hand-over to
//! the engine that the `ibv_wr_*` builder shares. `post_recv_list` serves
//! SRQs too.

use std::cell::RefCell;
use std::ffi::c_int;
use std::sync::atomic::Ordering;

use softroce::{Payload, QpType, RecvWr, SendFlags, SendWr, Sge, UdDest, WrOpcode};

use crate::abi::*;
use crate::errno::errno;
use crate::export::guard;

use super::{QpObj, qp_obj};

/// Per-thread scratch for gathering SGEs and inline bytes of one post.
#[derive(Default)]
pub(super) struct Scratch {
    pub(super) sges: Vec<Sge>,
    pub(super) inline: Vec<u8>,
}

thread_local! {
    static SCRATCH: RefCell<Scratch> = RefCell::default();
}

/// One send WR, copied out of C: the work request without its payload,
/// whose SGEs and inline bytes are ranges into the scratch buffers.
#[derive(Clone, Copy)]
pub(super) struct Pending {
    /// Everything but the payload (an empty SGE list until [`Pending::wr`]).
    pub(super) wr: SendWr<'static>,
    /// The window a BIND_MW binds (its `MwObj`'s address; 0 for none).
    pub(super) mw: usize,
    pub(super) sges: (usize, usize),
    pub(super) inline: Option<(usize, usize)>,
}

impl Pending {
    pub(super) fn new(wr_id: u64, opcode: WrOpcode, flags: u32) -> Pending {
        let wr = SendWr::new(wr_id, opcode, SendFlags(flags & 0xf), Payload::Sges(&[]));
        Pending { wr, mw: 0, sges: (0, 0), inline: None }
    }

    /// Whether the engine takes this opcode (and addressing) on a QP of
    /// type `t`: checked for a whole `ibv_wr_*` batch before any of it is
    /// posted (the engine would refuse the WR after posting those before).
    pub(super) fn fits(&self, t: QpType) -> bool {
        use WrOpcode as O;
        match t {
            QpType::Ud => matches!(self.wr.opcode, O::Send | O::SendWithImm) && self.wr.ud.is_some(),
            QpType::Uc => matches!(
                self.wr.opcode,
                O::Send | O::SendWithImm | O::RdmaWrite | O::RdmaWriteWithImm | O::LocalInv | O::BindMw
            ),
            // The engine's rules for the IBA 1.5 operations: a FLUSH carries
            // no data, an ATOMIC WRITE exactly its 8 bytes.
            QpType::Rc => match self.wr.opcode {
                O::Flush => self.wr.flush.is_some() && self.sges.1 == 0 && self.inline.is_none(),
                O::AtomicWrite => matches!(self.inline, Some((_, 8))),
                _ => true,
            },
        }
    }

    /// Records a posted BIND_MW's new window key (see `mw::bind_posted`).
    pub(super) fn posted(&self) {
        if let Some(b) = &self.wr.bind {
            crate::mw::bind_posted(self.mw, b);
        }
    }

    /// The work request with its payload.
    pub(super) fn wr<'a>(&self, s: &'a Scratch) -> SendWr<'a> {
        let payload = match self.inline {
            Some((a, n)) => Payload::Inline(&s.inline[a..a + n]),
            None => Payload::Sges(&s.sges[self.sges.0..self.sges.0 + self.sges.1]),
        };
        SendWr { payload, ..self.wr }
    }
}

/// Copies `n` SGEs at `list` into the scratch SGEs; returns the range.
///
/// # Safety
/// `list` points to `n` readable SGEs (or `n == 0`).
pub(super) unsafe fn take_sges(s: &mut Scratch, list: *const IbvSge, n: usize) -> (usize, usize) {
    let start = s.sges.len();
    for i in 0..n {
        // SAFETY: per the contract.
        let g = unsafe { &*list.add(i) };
        s.sges.push(Sge { addr: g.addr, length: g.length, lkey: g.lkey });
    }
    (start, n)
}

/// Copies the bytes the SGEs `r` point at into the scratch inline buffer
/// (`IBV_SEND_INLINE`: the data is taken at post time, the L_Keys are not
/// checked, as the verbs specification says).
///
/// # Safety
/// Each SGE's `[addr, addr+length)` is readable memory of the caller.
pub(super) unsafe fn inline_from_sges(s: &mut Scratch, r: (usize, usize), max: u32) -> Result<(usize, usize), c_int> {
    let total: u64 = s.sges[r.0..r.0 + r.1].iter().map(|g| u64::from(g.length)).sum();
    if total > u64::from(max) {
        return Err(libc::EINVAL);
    }
    let start = s.inline.len();
    for i in r.0..r.0 + r.1 {
        let g = s.sges[i];
        if g.length > 0 {
            // SAFETY: per the contract.
            let src = unsafe { std::slice::from_raw_parts(g.addr as usize as *const u8, g.length as usize) };
            s.inline.extend_from_slice(src);
        }
    }
    Ok((start, total as usize))
}

/// Whether `op` writes the local SGEs (so IBV_SEND_INLINE does not apply).
pub(super) fn fetches(op: WrOpcode) -> bool {
    matches!(op, WrOpcode::RdmaRead | WrOpcode::AtomicCmpAndSwp | WrOpcode::AtomicFetchAndAdd)
}

/// The AH handle behind an `ibv_ah` pointer.
pub(super) fn ah_handle(ah: *mut IbvAh) -> Result<u32, c_int> {
    // SAFETY: an AH from ibv_create_ah, or NULL (checked).
    unsafe { crate::ah::ah_obj(ah) }.map(|a| a.ah.handle()).ok_or(libc::EINVAL)
}

/// Reads one C send WR into `Pending` (its SGEs and inline bytes into `s`).
///
/// # Safety
/// `w` is a readable `ibv_send_wr` whose `sg_list` has `num_sge` entries.
unsafe fn read_send_wr(o: &QpObj, s: &mut Scratch, w: &IbvSendWr) -> Result<Pending, c_int> {
    let opcode = WrOpcode::from_raw(w.opcode).ok_or(libc::EINVAL)?;
    if matches!(opcode, WrOpcode::Flush | WrOpcode::AtomicWrite) {
        // `ibv_send_wr` has no FLUSH operands and rdma-core 44 no way to
        // pass an ATOMIC WRITE's value: both go through the ibv_wr_* builder.
        return Err(libc::EINVAL);
    }
    if w.num_sge < 0 || w.num_sge as u32 > o.cap.max_send_sge.max(1) && w.send_flags & IBV_SEND_INLINE == 0 {
        return Err(libc::EINVAL);
    }
    let mut p = Pending::new(w.wr_id, opcode, w.send_flags);
    // SAFETY: per the contract.
    p.sges = unsafe { take_sges(s, w.sg_list, w.num_sge as usize) };
    if p.wr.flags.contains(SendFlags::INLINE) && !fetches(opcode) {
        // SAFETY: per the contract: the SGEs name the caller's memory.
        p.inline = Some(unsafe { inline_from_sges(s, p.sges, o.cap.max_inline_data) }?);
    }
    // SAFETY: the union members are plain integers and pointers; which one
    // is meaningful follows from the opcode, as in C.
    unsafe {
        match opcode {
            WrOpcode::RdmaWriteWithImm | WrOpcode::SendWithImm => p.wr.imm_data = u32::from_be(w.imm_data),
            WrOpcode::SendWithInv | WrOpcode::LocalInv => p.wr.invalidate_rkey = w.imm_data,
            _ => {}
        }
        match opcode {
            WrOpcode::RdmaWrite | WrOpcode::RdmaWriteWithImm | WrOpcode::RdmaRead => {
                p.wr.remote_addr = w.wr.rdma.remote_addr;
                p.wr.rkey = w.wr.rdma.rkey;
            }
            WrOpcode::AtomicCmpAndSwp | WrOpcode::AtomicFetchAndAdd => {
                p.wr.remote_addr = w.wr.atomic.remote_addr;
                p.wr.compare_add = w.wr.atomic.compare_add;
                p.wr.swap = w.wr.atomic.swap;
                p.wr.rkey = w.wr.atomic.rkey;
            }
            WrOpcode::BindMw => {
                let b = &w.bind_mw_tso.bind_mw;
                p.wr.bind = Some(crate::mw::bind_of(b.mw, b.rkey, &b.bind_info)?);
                p.mw = b.mw as usize;
            }
            _ => {}
        }
        if o.qp.qp_type() == QpType::Ud {
            p.wr.ud = Some(UdDest {
                ah: ah_handle(w.wr.ud.ah)?,
                remote_qpn: w.wr.ud.remote_qpn.into(),
                remote_qkey: w.wr.ud.remote_qkey,
            });
        }
    }
    Ok(p)
}

/// `ops.post_send` (the inline `ibv_post_send`): posts the list; on error
/// `*bad_wr` is the first WR not posted.
pub(crate) unsafe extern "C" fn post_send(qp: *mut IbvQp, wr: *mut IbvSendWr, bad_wr: *mut *mut IbvSendWr) -> c_int {
    guard("post_send", || {
        // SAFETY: a QP from ibv_create_qp (checked for NULL).
        let Some(o) = (unsafe { qp_obj(qp) }) else { return libc::EINVAL };
        SCRATCH.with_borrow_mut(|s| {
            s.sges.clear();
            s.inline.clear();
            let mut pend: [Option<(Pending, *mut IbvSendWr)>; 16] = [None; 16];
            let mut cur = wr;
            let mut first_err = None;
            let mut n = 0;
            while !cur.is_null() {
                // SAFETY: each WR in the caller's list is readable.
                let w = unsafe { &*cur };
                // SAFETY: per the verbs contract on ibv_send_wr.
                match unsafe { read_send_wr(o, s, w) } {
                    Ok(p) => {
                        pend[n] = Some((p, cur));
                        n += 1;
                    }
                    Err(e) => {
                        first_err = Some((e, cur));
                        break;
                    }
                }
                cur = w.next;
                if n == pend.len() {
                    if let Err(r) = flush(o, s, &pend[..n], bad_wr) {
                        return r;
                    }
                    n = 0;
                    s.sges.clear();
                    s.inline.clear();
                }
            }
            if let Err(r) = flush(o, s, &pend[..n], bad_wr) {
                return r;
            }
            match first_err {
                Some((e, at)) => {
                    if !bad_wr.is_null() {
                        // SAFETY: the caller passes a writable out-pointer.
                        unsafe { *bad_wr = at };
                    }
                    e
                }
                None => 0,
            }
        })
    })
}

fn flush(
    o: &QpObj,
    s: &Scratch,
    pend: &[Option<(Pending, *mut IbvSendWr)>],
    bad_wr: *mut *mut IbvSendWr,
) -> Result<(), c_int> {
    let r = post_all(o, pend.iter().flatten().map(|(p, _)| p.wr(s)));
    let posted = r.as_ref().err().map_or(pend.len(), |(i, _)| *i);
    pend[..posted].iter().flatten().for_each(|(p, _)| p.posted());
    r.map_err(|(i, e)| {
        if !bad_wr.is_null()
            && let Some(Some((_, at))) = pend.get(i)
        {
            // SAFETY: the caller passes a writable out-pointer.
            unsafe { *bad_wr = *at };
        }
        errno(&e)
    })
}

/// WRs handed to the engine per call by [`post_all`].
const POST_CHUNK: usize = 16;

/// Posts `wrs` in order, up to `POST_CHUNK` per engine call from an array
/// on the stack (no allocation per post); on error, the index of the first
/// WR not posted (those before it are).
pub(super) fn post_all<'s>(
    o: &QpObj,
    mut wrs: impl Iterator<Item = SendWr<'s>>,
) -> Result<(), (usize, softroce::Error)> {
    let mut chunk = [SendWr::new(0, WrOpcode::Send, SendFlags::EMPTY, Payload::Sges(&[])); POST_CHUNK];
    let mut done = 0;
    loop {
        let mut n = 0;
        for (slot, wr) in chunk.iter_mut().zip(&mut wrs) {
            *slot = wr;
            n += 1;
        }
        match &chunk[..n] {
            [] => return Ok(()),
            [one] => o.qp.post_send(one).map_err(|e| (done, e))?,
            some => o.qp.post_send_batch(some).map_err(|(i, e)| (done + i, e))?,
        }
        done += n;
        if n < POST_CHUNK {
            return Ok(());
        }
    }
}

/// Posts receive WRs to `post` one by one; on error `*bad_wr` is the
/// first WR not posted.
///
/// # Safety
/// `wr` is a readable list of `ibv_recv_wr` with valid `sg_list`s.
pub(crate) unsafe fn post_recv_list(
    wr: *mut IbvRecvWr,
    bad_wr: *mut *mut IbvRecvWr,
    max_sge: u32,
    post: impl Fn(&RecvWr<'_>) -> Result<(), softroce::Error>,
) -> c_int {
    SCRATCH.with_borrow_mut(|s| {
        let mut cur = wr;
        while !cur.is_null() {
            // SAFETY: per the contract.
            let w = unsafe { &*cur };
            let r = if w.num_sge < 0 || w.num_sge as u32 > max_sge {
                Err(libc::EINVAL)
            } else {
                s.sges.clear();
                // SAFETY: per the contract.
                let (a, n) = unsafe { take_sges(s, w.sg_list, w.num_sge as usize) };
                post(&RecvWr { wr_id: w.wr_id, sg_list: &s.sges[a..a + n] }).map_err(|e| errno(&e))
            };
            if let Err(e) = r {
                if !bad_wr.is_null() {
                    // SAFETY: the caller passes a writable out-pointer.
                    unsafe { *bad_wr = cur };
                }
                return e;
            }
            cur = w.next;
        }
        0
    })
}

/// `ops.post_recv` (the inline `ibv_post_recv`).
pub(crate) unsafe extern "C" fn post_recv(qp: *mut IbvQp, wr: *mut IbvRecvWr, bad_wr: *mut *mut IbvRecvWr) -> c_int {
    guard("post_recv", || {
        // SAFETY: a QP from ibv_create_qp (checked for NULL).
        let Some(o) = (unsafe { qp_obj(qp) }) else { return libc::EINVAL };
        // SAFETY: the caller's list follows the verbs contract.
        unsafe { post_recv_list(wr, bad_wr, o.cap.max_recv_sge.max(1), |r| o.qp.post_recv(r)) }
    })
}

/// `ops.post_srq_recv` (the inline `ibv_post_srq_recv`).
pub(crate) unsafe extern "C" fn post_srq_recv(
    srq: *mut IbvSrq,
    wr: *mut IbvRecvWr,
    bad_wr: *mut *mut IbvRecvWr,
) -> c_int {
    guard("post_srq_recv", || {
        // SAFETY: an SRQ from ibv_create_srq (checked for NULL).
        let Some(o) = (unsafe { crate::srq::srq_obj(srq) }) else { return libc::EINVAL };
        let max_sge = o.attr.lock().unwrap_or_else(|p| p.into_inner()).max_sge.max(1);
        // SAFETY: the caller's list follows the verbs contract.
        unsafe { post_recv_list(wr, bad_wr, max_sge, |r| o.srq.post_recv(r)) }
    })
}

/// `ops.bind_mw` (type 1 windows): posts the bind on `qp`; the window's
/// `rkey` becomes the new key (valid once the WR completes).
pub(crate) unsafe extern "C" fn bind_mw(qp: *mut IbvQp, mw: *mut IbvMw, mw_bind: *mut IbvMwBind) -> c_int {
    guard("bind_mw", || {
        // SAFETY: a QP from ibv_create_qp (checked for NULL).
        let Some(q) = (unsafe { qp_obj(qp) }) else { return libc::EINVAL };
        if mw.is_null() || mw_bind.is_null() {
            return libc::EINVAL;
        }
        // SAFETY: an MW from alloc_mw; a readable ibv_mw_bind.
        let (o, b) = unsafe { (&mut *(mw as *mut crate::mw::MwObj), &*mw_bind) };
        // A type 1 window is never zero based (o10-36.2.2); rxe's provider
        // refuses it at the call, before posting anything.
        if b.bind_info.mw_access_flags & IBV_ACCESS_ZERO_BASED != 0 {
            return libc::EINVAL;
        }
        let bind = match crate::mw::bind_of(mw, 0, &b.bind_info) {
            Ok(x) => x,
            Err(e) => return e,
        };
        match o.mw.bind_with(&q.qp, b.wr_id, SendFlags(b.send_flags & 0xf), bind.info) {
            Ok(key) => {
                o.c.rkey = key;
                o.key.store(key, Ordering::Release);
                0
            }
            Err(e) => errno(&e),
        }
    })
}
