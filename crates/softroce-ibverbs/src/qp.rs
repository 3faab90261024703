//! Queue pairs: `ibv_create_qp`, the extended `ibv_create_qp_ex`,
//! `ibv_modify_qp` / `ibv_query_qp` / `ibv_destroy_qp`, the inline
//! `ibv_post_send` / `ibv_post_recv` (through the context's ops), and the
//! work-request builder of `ibv_qp_ex` (`ibv_wr_start` ... `ibv_wr_complete`),
//! which perftest uses by default.

use std::cell::{RefCell, UnsafeCell};
use std::ffi::{c_int, c_void};
use std::net::IpAddr;
use std::sync::Mutex;
use std::sync::atomic::Ordering;

use softroce::{
    AccessFlags, Flush, Payload, Qp, QpAttr, QpAttrMask, QpCap, QpInit, QpState, QpType, RecvWr, SendFlags, SendWr,
    Sge, UdDest, WrOpcode,
};

use crate::abi::rdma_core_45::IBV_QP_EX_WITH_FLUSH;
use crate::abi::*;
use crate::context;
use crate::cq::cq_obj;
use crate::errno::errno;
use crate::export::{guard, ibv_export, ptr_or_errno, set_errno, trace_err};
use crate::pd::pd_obj;
use crate::srq::{SrqObj, srq_obj};

/// An `ibv_qp_ex` (whose prefix is the `ibv_qp` every QP is) and the
/// softroce QP behind it.
#[repr(C)]
pub(crate) struct QpObj {
    pub(crate) c: IbvQpEx,
    /// rdma-core 45's `ibv_qp_ex.wr_flush`, right after the rdma-core 44
    /// struct (offset 352), where programs built against 45 look for it.
    wr_flush: Option<WrFlushFn>,
    pub(crate) qp: Qp,
    /// The PD it was made in (for the device's address).
    pd: softroce::Pd,
    /// Whether it was made with `send_ops_flags` (`ibv_qp_to_qp_ex`).
    extended: bool,
    cap: QpCap,
    /// What `ibv_query_qp` reports: the attributes last set.
    attr: Mutex<IbvQpAttr>,
    /// The `ibv_wr_*` batch being built; the application serialises it.
    builder: UnsafeCell<Builder>,
}

const _: () = assert!(std::mem::offset_of!(QpObj, wr_flush) == IBV_QP_EX_WR_FLUSH_OFFSET);

/// The object behind a QP pointer.
///
/// # Safety
/// `qp` is NULL or a QP from `ibv_create_qp(_ex)`, not destroyed.
pub(crate) unsafe fn qp_obj<'a>(qp: *mut IbvQp) -> Option<&'a QpObj> {
    // SAFETY: per the contract; `c` (prefix ibv_qp) is the first field.
    (!qp.is_null()).then(|| unsafe { &*(qp as *const QpObj) })
}

fn qp_type_of(t: u32) -> Option<QpType> {
    QpType::from_raw(t)
}

/// What `ibv_create_qp` and `create_qp_ex` ask for.
struct Made {
    attr: IbvQpInitAttr,
    send_ops: Option<u64>,
    /// `IBV_QP_CREATE_BLOCK_SELF_MCAST_LB`.
    block_self_mcast_lb: bool,
}

fn make_qp(pd: *mut IbvPd, m: &Made) -> Result<*mut QpObj, c_int> {
    // SAFETY: a PD from ibv_alloc_pd (checked for NULL).
    let p = unsafe { pd_obj(pd) }.ok_or(libc::EINVAL)?;
    // SAFETY: CQs from ibv_create_cq (checked for NULL).
    let scq = unsafe { cq_obj(m.attr.send_cq) }.ok_or(libc::EINVAL)?;
    // SAFETY: as above.
    let rcq = unsafe { cq_obj(m.attr.recv_cq) }.ok_or(libc::EINVAL)?;
    // SAFETY: an SRQ from ibv_create_srq, or NULL.
    let srq: Option<&SrqObj> = unsafe { srq_obj(m.attr.srq) };
    let qp_type = qp_type_of(m.attr.qp_type).ok_or(libc::EOPNOTSUPP)?;
    let cap = QpCap {
        max_send_wr: m.attr.cap.max_send_wr,
        max_recv_wr: m.attr.cap.max_recv_wr,
        max_send_sge: m.attr.cap.max_send_sge,
        max_recv_sge: m.attr.cap.max_recv_sge,
        max_inline_data: m.attr.cap.max_inline_data,
    };
    let init = QpInit {
        qp_type,
        send_cq: &scq.cq,
        recv_cq: &rcq.cq,
        srq: srq.map(|s| &s.srq),
        cap,
        sq_sig_all: m.attr.sq_sig_all != 0,
        block_self_mcast_lb: m.block_self_mcast_lb,
    };
    let qp = p.pd.create_qp(init).map_err(|e| errno(&e))?;
    p.adopt();
    scq.users.fetch_add(1, Ordering::AcqRel);
    rcq.users.fetch_add(1, Ordering::AcqRel);
    if let Some(s) = srq {
        s.users.fetch_add(1, Ordering::AcqRel);
    }
    let mut c = IbvQpEx::default();
    let b = &mut c.qp_base;
    b.context = p.c.context;
    b.qp_context = m.attr.qp_context;
    b.pd = pd;
    b.send_cq = m.attr.send_cq;
    b.recv_cq = m.attr.recv_cq;
    b.srq = m.attr.srq;
    b.handle = qp.qpn();
    b.qp_num = qp.qpn();
    b.state = IBV_QPS_RESET as _;
    b.qp_type = m.attr.qp_type as _;
    if let Some(ops) = m.send_ops {
        c.comp_mask = ops;
        c.wr_start = Some(wr_start);
        c.wr_complete = Some(wr_complete);
        c.wr_abort = Some(wr_abort);
        c.wr_send = Some(wr_send);
        c.wr_send_imm = Some(wr_send_imm);
        c.wr_send_inv = Some(wr_send_inv);
        c.wr_rdma_write = Some(wr_rdma_write);
        c.wr_rdma_write_imm = Some(wr_rdma_write_imm);
        c.wr_rdma_read = Some(wr_rdma_read);
        c.wr_atomic_cmp_swp = Some(wr_atomic_cmp_swp);
        c.wr_atomic_fetch_add = Some(wr_atomic_fetch_add);
        c.wr_bind_mw = Some(wr_bind_mw);
        c.wr_local_inv = Some(wr_local_inv);
        c.wr_set_sge = Some(wr_set_sge);
        c.wr_set_sge_list = Some(wr_set_sge_list);
        c.wr_set_inline_data = Some(wr_set_inline_data);
        c.wr_set_inline_data_list = Some(wr_set_inline_data_list);
        c.wr_set_ud_addr = Some(wr_set_ud_addr);
        c.wr_set_xrc_srqn = Some(wr_set_xrc_srqn);
        c.wr_atomic_write = Some(wr_atomic_write);
    }
    let mut attr = IbvQpAttr::default();
    attr.cap = m.attr.cap;
    attr.port_num = 1;
    let qpn = qp.qpn();
    let ctx = p.c.context;
    let o = Box::into_raw(Box::new(QpObj {
        c,
        wr_flush: m.send_ops.map(|_| wr_flush as WrFlushFn),
        qp,
        pd: p.pd.clone(),
        extended: m.send_ops.is_some(),
        cap,
        attr: Mutex::new(attr),
        builder: UnsafeCell::new(Builder::default()),
    }));
    // SAFETY: the PD's context is live.
    if let Some(b) = unsafe { context::block(ctx) } {
        b.objects.lock().unwrap_or_else(|p| p.into_inner()).qps.insert(qpn, o as usize);
        b.events.claim(softroce::EventSource::Qp(qpn));
    }
    Ok(o)
}

ibv_export! { "IBVERBS_1.1";
    /// Creates an RC, UC or UD QP in RESET.
    fn ibv_create_qp(pd: *mut IbvPd, qp_init_attr: *mut IbvQpInitAttr) -> *mut IbvQp {
        if qp_init_attr.is_null() {
            set_errno(libc::EINVAL);
            return std::ptr::null_mut();
        }
        // SAFETY: the caller passes a readable ibv_qp_init_attr.
        let a = unsafe { &*qp_init_attr };
        let m = Made { attr: *a, send_ops: None, block_self_mcast_lb: false };
        ptr_or_errno(make_qp(pd, &m))
    }
}

/// The `ibv_wr_*` operations softroce carries out (rxe's set, with the
/// IBA 1.5 ones of rdma-core 45's rxe).
const SEND_OPS_SUPPORTED: u64 = IBV_QP_EX_WITH_RDMA_WRITE
    | IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM
    | IBV_QP_EX_WITH_SEND
    | IBV_QP_EX_WITH_SEND_WITH_IMM
    | IBV_QP_EX_WITH_RDMA_READ
    | IBV_QP_EX_WITH_ATOMIC_CMP_AND_SWP
    | IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD
    | IBV_QP_EX_WITH_LOCAL_INV
    | IBV_QP_EX_WITH_BIND_MW
    | IBV_QP_EX_WITH_SEND_WITH_INV
    | IBV_QP_EX_WITH_ATOMIC_WRITE
    | IBV_QP_EX_WITH_FLUSH;

/// The `send_ops_flags` a UC QP takes: rxe's set (rdma-core 44
/// `RXE_SUP_UC_QP_SEND_OPS_FLAGS`) without SEND_WITH_INV, which has no UC
/// opcode on the wire (IBTA table 38: the invalidating SENDs are RC and
/// XRC only), and with LOCAL_INV, which UC's `ibv_post_send` takes too (a
/// local operation, like the window binds rxe allows there).
const SEND_OPS_UC: u64 = IBV_QP_EX_WITH_SEND
    | IBV_QP_EX_WITH_SEND_WITH_IMM
    | IBV_QP_EX_WITH_RDMA_WRITE
    | IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM
    | IBV_QP_EX_WITH_BIND_MW
    | IBV_QP_EX_WITH_LOCAL_INV;

/// The `send_ops_flags` a UD QP takes (rxe `RXE_SUP_UD_QP_SEND_OPS_FLAGS`).
const SEND_OPS_UD: u64 = IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_SEND_WITH_IMM;

/// The `send_ops_flags` QPs of type `t` take; others are EOPNOTSUPP, as
/// rxe's `check_qp_init_attr` answers (ATOMIC WRITE and FLUSH, IBA 1.5's
/// memory placement operations, are RC only).
fn send_ops_allowed(t: u32) -> u64 {
    match t {
        IBV_QPT_RC => SEND_OPS_SUPPORTED,
        IBV_QPT_UC => SEND_OPS_UC,
        IBV_QPT_UD => SEND_OPS_UD,
        _ => 0,
    }
}

/// The `send_ops_flags` bit that lets the builder start a WR of `op`.
fn send_op_bit(op: WrOpcode) -> u64 {
    match op {
        WrOpcode::RdmaWrite => IBV_QP_EX_WITH_RDMA_WRITE,
        WrOpcode::RdmaWriteWithImm => IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM,
        WrOpcode::Send => IBV_QP_EX_WITH_SEND,
        WrOpcode::SendWithImm => IBV_QP_EX_WITH_SEND_WITH_IMM,
        WrOpcode::RdmaRead => IBV_QP_EX_WITH_RDMA_READ,
        WrOpcode::AtomicCmpAndSwp => IBV_QP_EX_WITH_ATOMIC_CMP_AND_SWP,
        WrOpcode::AtomicFetchAndAdd => IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD,
        WrOpcode::LocalInv => IBV_QP_EX_WITH_LOCAL_INV,
        WrOpcode::BindMw => IBV_QP_EX_WITH_BIND_MW,
        WrOpcode::SendWithInv => IBV_QP_EX_WITH_SEND_WITH_INV,
        WrOpcode::AtomicWrite => IBV_QP_EX_WITH_ATOMIC_WRITE,
        WrOpcode::Flush => IBV_QP_EX_WITH_FLUSH,
    }
}

/// `verbs_context.create_qp_ex`: a PD is required; `send_ops_flags` turn
/// on the `ibv_wr_*` builder.
pub(crate) unsafe extern "C" fn create_qp_ex(context: *mut IbvContext, attr: *mut IbvQpInitAttrEx) -> *mut IbvQp {
    guard("create_qp_ex", || {
        let _ = context;
        if attr.is_null() {
            set_errno(libc::EINVAL);
            return std::ptr::null_mut();
        }
        // SAFETY: the caller passes a readable ibv_qp_init_attr_ex.
        let a = unsafe { &*attr };
        let known = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS | IBV_QP_INIT_ATTR_CREATE_FLAGS;
        if a.comp_mask & IBV_QP_INIT_ATTR_PD == 0 {
            set_errno(libc::EINVAL);
            return std::ptr::null_mut();
        }
        // Creation flags count only with their mask bit; of them, softroce
        // has the multicast self-loopback block (mlx5's; rxe has none).
        let flags = if a.comp_mask & IBV_QP_INIT_ATTR_CREATE_FLAGS != 0 { a.create_flags } else { 0 };
        if a.comp_mask & !known != 0 || flags & !IBV_QP_CREATE_BLOCK_SELF_MCAST_LB != 0 {
            set_errno(libc::EOPNOTSUPP);
            return std::ptr::null_mut();
        }
        let send_ops = (a.comp_mask & IBV_QP_INIT_ATTR_SEND_OPS_FLAGS != 0).then_some(a.send_ops_flags);
        if send_ops.is_some_and(|f| f & !send_ops_allowed(a.qp_type) != 0) {
            set_errno(libc::EOPNOTSUPP);
            return std::ptr::null_mut();
        }
        let m = Made { attr: a.base(), send_ops, block_self_mcast_lb: flags & IBV_QP_CREATE_BLOCK_SELF_MCAST_LB != 0 };
        ptr_or_errno(make_qp(a.pd, &m))
    })
}

ibv_export! { "IBVERBS_1.6";
    /// The extended view of a QP made with `send_ops_flags`, else NULL.
    fn ibv_qp_to_qp_ex(qp: *mut IbvQp) -> *mut IbvQpEx {
        // SAFETY: a QP from ibv_create_qp(_ex) (checked for NULL).
        match unsafe { qp_obj(qp) } {
            Some(o) if o.extended => qp as *mut IbvQpEx,
            _ => std::ptr::null_mut(),
        }
    }
}

/// The IP address a GID stands for (IPv4-mapped GIDs are IPv4).
pub(crate) fn gid_ip(raw: [u8; 16]) -> IpAddr {
    let v6 = std::net::Ipv6Addr::from(raw);
    match v6.to_ipv4_mapped() {
        Some(v4) => IpAddr::V4(v4),
        None => IpAddr::V6(v6),
    }
}

/// Where an address vector points: its GRH's GID, or without a GRH the
/// host its destination LID names (`lid`).
pub(crate) fn dest_of(local: IpAddr, ah: &IbvAhAttr) -> Result<IpAddr, c_int> {
    if ah.is_global != 0 {
        // SAFETY: ibv_gid is 16 plain bytes.
        let raw: [u8; 16] = unsafe { std::mem::transmute(ah.grh.dgid) };
        return Ok(gid_ip(raw));
    }
    crate::lid::peer_of(local, ah.dlid).ok_or(libc::EINVAL)
}

/// `ah` as an `ibv_ah_attr`: global (RoCE), port 1.
pub(crate) fn write_ah_attr(out: &mut IbvAhAttr, ah: &roce_proto::AhAttr) {
    let dgid = match ah.dest {
        IpAddr::V4(v) => v.to_ipv6_mapped().octets(),
        IpAddr::V6(v) => v.octets(),
    };
    out.grh.dgid = IbvGid { raw: dgid };
    out.grh.sgid_index = ah.sgid_index;
    out.grh.hop_limit = ah.hop_limit;
    out.grh.traffic_class = ah.traffic_class;
    out.grh.flow_label = ah.flow_label;
    out.sl = ah.sl;
    out.is_global = 1;
    out.port_num = 1;
}

/// Writes softroce's attributes into a C `ibv_qp_attr` (what
/// `rdma_init_qp_attr` hands out); the address vector is global (RoCE).
pub(crate) fn write_qp_attr(out: &mut IbvQpAttr, a: &QpAttr) {
    out.qp_state = a.qp_state as u32;
    out.path_mtu = a.path_mtu as u32;
    out.qkey = a.qkey;
    out.rq_psn = a.rq_psn;
    out.sq_psn = a.sq_psn;
    out.dest_qp_num = a.dest_qp_num;
    out.qp_access_flags = a.qp_access_flags.0;
    write_ah_attr(&mut out.ah_attr, &a.ah_attr);
    out.pkey_index = a.pkey_index;
    out.port_num = if a.port_num == 0 { 1 } else { a.port_num };
    out.timeout = a.timeout;
    out.retry_cnt = a.retry_cnt;
    out.rnr_retry = a.rnr_retry;
    out.min_rnr_timer = a.min_rnr_timer;
    out.max_rd_atomic = a.max_rd_atomic;
    out.max_dest_rd_atomic = a.max_dest_rd_atomic;
}

fn to_qp_attr(local: IpAddr, local_gid_index: u8, a: &IbvQpAttr, mask: u32) -> Result<QpAttr, c_int> {
    let mut o = QpAttr::default();
    let state = |s: u32| QpState::from_raw(s).ok_or(libc::EINVAL);
    if mask & IBV_QP_STATE as u32 != 0 {
        o.qp_state = state(a.qp_state)?;
    }
    if mask & IBV_QP_CUR_STATE as u32 != 0 {
        o.cur_qp_state = state(a.cur_qp_state)?;
    }
    if mask & IBV_QP_PATH_MTU as u32 != 0 {
        o.path_mtu = softroce::Mtu::from_raw(a.path_mtu).ok_or(libc::EINVAL)?;
    }
    o.qkey = a.qkey;
    o.rq_psn = a.rq_psn;
    o.sq_psn = a.sq_psn;
    o.dest_qp_num = a.dest_qp_num;
    o.qp_access_flags = AccessFlags(a.qp_access_flags);
    if mask & IBV_QP_AV as u32 != 0 {
        let ah = &a.ah_attr;
        o.ah_attr = roce_proto::AhAttr {
            dest: dest_of(local, ah)?,
            sgid_index: if ah.is_global != 0 { ah.grh.sgid_index } else { local_gid_index },
            hop_limit: if ah.is_global != 0 { ah.grh.hop_limit } else { 64 },
            traffic_class: if ah.is_global != 0 { ah.grh.traffic_class } else { 0 },
            sl: ah.sl,
            flow_label: if ah.is_global != 0 { ah.grh.flow_label } else { 0 },
        };
    }
    o.pkey_index = a.pkey_index;
    o.port_num = if a.port_num == 0 { 1 } else { a.port_num };
    o.timeout = a.timeout;
    o.retry_cnt = a.retry_cnt;
    o.rnr_retry = a.rnr_retry;
    o.min_rnr_timer = a.min_rnr_timer;
    o.max_rd_atomic = a.max_rd_atomic;
    o.max_dest_rd_atomic = a.max_dest_rd_atomic;
    o.en_sqd_async_notify = a.en_sqd_async_notify != 0;
    Ok(o)
}

ibv_export! { "IBVERBS_1.1";
    /// Moves a QP through its states (the IBTA transition table decides
    /// which attributes are required and allowed).
    fn ibv_modify_qp(qp: *mut IbvQp, attr: *mut IbvQpAttr, attr_mask: c_int) -> c_int {
        // SAFETY: a QP from ibv_create_qp (checked for NULL).
        let Some(o) = (unsafe { qp_obj(qp) }) else { return libc::EINVAL };
        if attr.is_null() {
            return libc::EINVAL;
        }
        // SAFETY: the caller passes a readable ibv_qp_attr.
        let a = unsafe { &*attr };
        // Capacity changes are not supported: keep the QP's own (rxe
        // accepts only what it already has, too).
        let mask = attr_mask as u32 & !(IBV_QP_CAP as u32);
        if mask & IBV_QP_PORT as u32 != 0 && a.port_num != 1 {
            // The device has one port (the kernel checks rdma_is_port_valid).
            trace_err("ibv_modify_qp", &format_args!("port {} does not exist", a.port_num));
            return libc::EINVAL;
        }
        let dev = o.pd.context().device();
        let pa = match to_qp_attr(dev.addr, dev.addr_gid_index() as u8, a, mask) {
            Ok(pa) => pa,
            Err(e) => {
                trace_err("ibv_modify_qp", &format_args!("attributes not understood (mask {mask:#x}): errno {e}"));
                return e;
            }
        };
        if let Err(e) = o.qp.modify(&pa, QpAttrMask(mask)) {
            trace_err("ibv_modify_qp", &e);
            return errno(&e);
        }
        let mut cache = o.attr.lock().unwrap_or_else(|p| p.into_inner());
        merge(&mut cache, a, mask);
        // SAFETY: the application reads `state` directly; we own the struct.
        unsafe { std::ptr::addr_of!(o.c.qp_base.state).cast_mut().write_volatile(o.qp.state() as u32 as _) };
        0
    }
}

/// Copies the fields named by `mask` into the cache `ibv_query_qp` reads.
fn merge(c: &mut IbvQpAttr, a: &IbvQpAttr, mask: u32) {
    let has = |b: c_int| mask & b as u32 != 0;
    if has(IBV_QP_EN_SQD_ASYNC_NOTIFY) {
        c.en_sqd_async_notify = a.en_sqd_async_notify;
    }
    if has(IBV_QP_ACCESS_FLAGS) {
        c.qp_access_flags = a.qp_access_flags;
    }
    if has(IBV_QP_PKEY_INDEX) {
        c.pkey_index = a.pkey_index;
    }
    if has(IBV_QP_PORT) {
        c.port_num = a.port_num;
    }
    if has(IBV_QP_QKEY) {
        c.qkey = a.qkey;
    }
    if has(IBV_QP_AV) {
        c.ah_attr = a.ah_attr;
    }
    if has(IBV_QP_PATH_MTU) {
        c.path_mtu = a.path_mtu;
    }
    if has(IBV_QP_TIMEOUT) {
        c.timeout = a.timeout;
    }
    if has(IBV_QP_RETRY_CNT) {
        c.retry_cnt = a.retry_cnt;
    }
    if has(IBV_QP_RNR_RETRY) {
        c.rnr_retry = a.rnr_retry;
    }
    if has(IBV_QP_RQ_PSN) {
        c.rq_psn = a.rq_psn;
    }
    if has(IBV_QP_MAX_QP_RD_ATOMIC) {
        c.max_rd_atomic = a.max_rd_atomic;
    }
    if has(IBV_QP_MIN_RNR_TIMER) {
        c.min_rnr_timer = a.min_rnr_timer;
    }
    if has(IBV_QP_SQ_PSN) {
        c.sq_psn = a.sq_psn;
    }
    if has(IBV_QP_MAX_DEST_RD_ATOMIC) {
        c.max_dest_rd_atomic = a.max_dest_rd_atomic;
    }
    if has(IBV_QP_DEST_QPN) {
        c.dest_qp_num = a.dest_qp_num;
    }
}

ibv_export! { "IBVERBS_1.1";
    /// The QP's attributes (the last ones set, and its current state) and
    /// what it was created with.
    fn ibv_query_qp(qp: *mut IbvQp, attr: *mut IbvQpAttr, attr_mask: c_int, init_attr: *mut IbvQpInitAttr) -> c_int {
        let _ = attr_mask;
        // SAFETY: a QP from ibv_create_qp (checked for NULL).
        let Some(o) = (unsafe { qp_obj(qp) }) else { return libc::EINVAL };
        if attr.is_null() || init_attr.is_null() {
            return libc::EINVAL;
        }
        let mut a = *o.attr.lock().unwrap_or_else(|p| p.into_inner());
        // rdma_cm's moves of the QP, made for the application.
        for (ra, rm) in o.qp.modified_for_app() {
            let mut t = a;
            write_qp_attr(&mut t, &ra);
            merge(&mut a, &t, rm.0);
        }
        let state = o.qp.state() as u32;
        a.qp_state = state as _;
        a.cur_qp_state = state as _;
        a.cap = IbvQpCap {
            max_send_wr: o.cap.max_send_wr,
            max_recv_wr: o.cap.max_recv_wr,
            max_send_sge: o.cap.max_send_sge,
            max_recv_sge: o.cap.max_recv_sge,
            max_inline_data: o.cap.max_inline_data,
        };
        let b = &o.c.qp_base;
        let mut i = IbvQpInitAttr::default();
        i.qp_context = b.qp_context;
        i.send_cq = b.send_cq;
        i.recv_cq = b.recv_cq;
        i.srq = b.srq;
        i.cap = a.cap;
        i.qp_type = b.qp_type;
        // SAFETY: the caller passes writable structs (checked for NULL).
        unsafe {
            attr.write(a);
            init_attr.write(i);
        }
        0
    }
}

ibv_export! { "IBVERBS_1.1";
    /// Destroys a QP (its unpolled completions stay in the CQs); `EBUSY`
    /// while it is attached to a multicast group, as the kernel refuses.
    fn ibv_destroy_qp(qp: *mut IbvQp) -> c_int {
        // SAFETY: a QP from ibv_create_qp (checked for NULL).
        let Some(o) = (unsafe { qp_obj(qp) }) else { return libc::EINVAL };
        if !o.qp.mcast_groups().is_empty() {
            return libc::EBUSY;
        }
        let b = &o.c.qp_base;
        // SAFETY: the QP's PD, CQs, SRQ and context outlive it (their
        // destroy calls refuse while it exists).
        unsafe {
            if let Some(c) = context::block(b.context) {
                c.objects.lock().unwrap_or_else(|p| p.into_inner()).qps.remove(&b.qp_num);
            }
            if let Some(p) = pd_obj(b.pd) {
                p.release();
            }
            for cq in [b.send_cq, b.recv_cq] {
                if let Some(c) = cq_obj(cq) {
                    c.users.fetch_sub(1, Ordering::AcqRel);
                }
            }
            if let Some(s) = srq_obj(b.srq) {
                s.users.fetch_sub(1, Ordering::AcqRel);
            }
            drop(Box::from_raw(qp as *mut QpObj));
        }
        0
    }
}

// ---- posting ------------------------------------------------------------

/// Per-thread scratch for gathering SGEs and inline bytes of one post.
#[derive(Default)]
struct Scratch {
    sges: Vec<Sge>,
    inline: Vec<u8>,
}

thread_local! {
    static SCRATCH: RefCell<Scratch> = RefCell::default();
}

/// One send WR, copied out of C: the work request without its payload,
/// whose SGEs and inline bytes are ranges into the scratch buffers.
#[derive(Clone, Copy)]
struct Pending {
    /// Everything but the payload (an empty SGE list until [`Pending::wr`]).
    wr: SendWr<'static>,
    /// The window a BIND_MW binds (its `MwObj`'s address; 0 for none).
    mw: usize,
    sges: (usize, usize),
    inline: Option<(usize, usize)>,
}

impl Pending {
    fn new(wr_id: u64, opcode: WrOpcode, flags: u32) -> Pending {
        let wr = SendWr::new(wr_id, opcode, SendFlags(flags & 0xf), Payload::Sges(&[]));
        Pending { wr, mw: 0, sges: (0, 0), inline: None }
    }

    /// Whether the engine takes this opcode (and addressing) on a QP of
    /// type `t`: checked for a whole `ibv_wr_*` batch before any of it is
    /// posted (the engine would refuse the WR after posting those before).
    fn fits(&self, t: QpType) -> bool {
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
    fn posted(&self) {
        if let Some(b) = &self.wr.bind {
            crate::mw::bind_posted(self.mw, b);
        }
    }

    /// The work request with its payload.
    fn wr<'a>(&self, s: &'a Scratch) -> SendWr<'a> {
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
unsafe fn take_sges(s: &mut Scratch, list: *const IbvSge, n: usize) -> (usize, usize) {
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
unsafe fn inline_from_sges(s: &mut Scratch, r: (usize, usize), max: u32) -> Result<(usize, usize), c_int> {
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
fn fetches(op: WrOpcode) -> bool {
    matches!(op, WrOpcode::RdmaRead | WrOpcode::AtomicCmpAndSwp | WrOpcode::AtomicFetchAndAdd)
}

/// The AH handle behind an `ibv_ah` pointer.
fn ah_handle(ah: *mut IbvAh) -> Result<u32, c_int> {
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
                remote_qpn: w.wr.ud.remote_qpn,
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
fn post_all<'s>(o: &QpObj, mut wrs: impl Iterator<Item = SendWr<'s>>) -> Result<(), (usize, softroce::Error)> {
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

// ---- the ibv_wr_* builder ------------------------------------------------

/// WRs between `ibv_wr_start` and `ibv_wr_complete`.
#[derive(Default)]
struct Builder {
    wrs: Vec<Pending>,
    scratch: Scratch,
    /// The first error of the batch, returned by `ibv_wr_complete`.
    err: c_int,
}

/// # Safety
/// `qp` is an extended QP made here; the application serialises the
/// builder calls between `wr_start` and `wr_complete` (rdma-core's rule).
unsafe fn bld<'a>(qp: *mut IbvQpEx) -> (&'a QpObj, &'a mut Builder) {
    // SAFETY: per the contract.
    let o = unsafe { &*(qp as *const QpObj) };
    // SAFETY: per the contract.
    (o, unsafe { &mut *o.builder.get() })
}

unsafe extern "C" fn wr_start(qp: *mut IbvQpEx) {
    guard("wr_start", || {
        // SAFETY: an extended QP made here.
        let (_, b) = unsafe { bld(qp) };
        b.wrs.clear();
        b.scratch.sges.clear();
        b.scratch.inline.clear();
        b.err = 0;
    })
}

unsafe extern "C" fn wr_complete(qp: *mut IbvQpEx) -> c_int {
    guard("wr_complete", || {
        // SAFETY: an extended QP made here.
        let (o, b) = unsafe { bld(qp) };
        // A failed batch posts nothing (ibv_wr_post(3)): refuse up front
        // what the engine would refuse part-way. A send queue already
        // holding WRs can still fill up in the middle; then the WRs before
        // are posted and complete, and the error is returned.
        let ty = o.qp.qp_type();
        let e = if b.err != 0 {
            b.err
        } else if b.wrs.len() > o.cap.max_send_wr.max(1) as usize {
            libc::ENOMEM
        } else if !b.wrs.iter().all(|p| p.fits(ty)) {
            libc::EINVAL
        } else {
            0
        };
        if e != 0 {
            trace_err("ibv_wr_complete", &format_args!("batch of {} WRs refused: errno {e}", b.wrs.len()));
            b.wrs.clear();
            return e;
        }
        let r = post_all(o, b.wrs.iter().map(|p| p.wr(&b.scratch)));
        let posted = r.as_ref().err().map_or(b.wrs.len(), |(i, _)| *i);
        b.wrs[..posted].iter().for_each(Pending::posted);
        b.wrs.clear();
        match r {
            Ok(()) => 0,
            Err((_, e)) => {
                trace_err("ibv_wr_complete", &e);
                errno(&e)
            }
        }
    })
}

unsafe extern "C" fn wr_abort(qp: *mut IbvQpEx) {
    guard("wr_abort", || {
        // SAFETY: an extended QP made here.
        let (_, b) = unsafe { bld(qp) };
        b.wrs.clear();
        b.err = 0;
    })
}

/// Starts a WR of `opcode` with the QP's current `wr_id` and `wr_flags`.
/// A QP not created with the operation's `send_ops_flags` bit fails the
/// batch with EOPNOTSUPP (rxe leaves that builder NULL: a call would jump
/// to address 0).
fn begin(qp: *mut IbvQpEx, opcode: WrOpcode, f: impl FnOnce(&mut Pending)) {
    begin_checked(qp, opcode, |p, _| {
        f(p);
        Ok(())
    });
}

/// Changes the WR being built.
fn last(qp: *mut IbvQpEx, f: impl FnOnce(&QpObj, &mut Pending, &mut Scratch) -> Result<(), c_int>) {
    guard("wr_set_*", || {
        // SAFETY: an extended QP made here.
        let (o, b) = unsafe { bld(qp) };
        let Some(p) = b.wrs.last_mut() else {
            b.err = libc::EINVAL;
            return;
        };
        if let Err(e) = f(o, p, &mut b.scratch)
            && b.err == 0
        {
            b.err = e;
        }
    })
}

unsafe extern "C" fn wr_send(qp: *mut IbvQpEx) {
    begin(qp, WrOpcode::Send, |_| {});
}
unsafe extern "C" fn wr_send_imm(qp: *mut IbvQpEx, imm_data: u32) {
    begin(qp, WrOpcode::SendWithImm, |p| p.wr.imm_data = u32::from_be(imm_data));
}
unsafe extern "C" fn wr_send_inv(qp: *mut IbvQpEx, invalidate_rkey: u32) {
    begin(qp, WrOpcode::SendWithInv, |p| p.wr.invalidate_rkey = invalidate_rkey);
}
unsafe extern "C" fn wr_rdma_write(qp: *mut IbvQpEx, rkey: u32, remote_addr: u64) {
    begin(qp, WrOpcode::RdmaWrite, |p| (p.wr.rkey, p.wr.remote_addr) = (rkey, remote_addr));
}
unsafe extern "C" fn wr_rdma_write_imm(qp: *mut IbvQpEx, rkey: u32, remote_addr: u64, imm_data: u32) {
    begin(qp, WrOpcode::RdmaWriteWithImm, |p| {
        (p.wr.rkey, p.wr.remote_addr, p.wr.imm_data) = (rkey, remote_addr, u32::from_be(imm_data));
    });
}
unsafe extern "C" fn wr_rdma_read(qp: *mut IbvQpEx, rkey: u32, remote_addr: u64) {
    begin(qp, WrOpcode::RdmaRead, |p| (p.wr.rkey, p.wr.remote_addr) = (rkey, remote_addr));
}
unsafe extern "C" fn wr_atomic_cmp_swp(qp: *mut IbvQpEx, rkey: u32, remote_addr: u64, compare: u64, swap: u64) {
    begin(qp, WrOpcode::AtomicCmpAndSwp, |p| {
        (p.wr.rkey, p.wr.remote_addr, p.wr.compare_add, p.wr.swap) = (rkey, remote_addr, compare, swap);
    });
}
unsafe extern "C" fn wr_atomic_fetch_add(qp: *mut IbvQpEx, rkey: u32, remote_addr: u64, add: u64) {
    begin(qp, WrOpcode::AtomicFetchAndAdd, |p| {
        (p.wr.rkey, p.wr.remote_addr, p.wr.compare_add) = (rkey, remote_addr, add)
    });
}
unsafe extern "C" fn wr_local_inv(qp: *mut IbvQpEx, invalidate_rkey: u32) {
    begin(qp, WrOpcode::LocalInv, |p| p.wr.invalidate_rkey = invalidate_rkey);
}
unsafe extern "C" fn wr_bind_mw(qp: *mut IbvQpEx, mw: *mut IbvMw, rkey: u32, info: *const IbvMwBindInfo) {
    // SAFETY: the caller passes a readable bind info (checked for NULL).
    let bind = if info.is_null() { Err(libc::EINVAL) } else { crate::mw::bind_of(mw, rkey, unsafe { &*info }) };
    begin(qp, WrOpcode::BindMw, |p| {
        p.wr.bind = bind.ok();
        p.mw = mw as usize;
    });
    if bind.is_err() {
        last(qp, |_, _, _| Err(libc::EINVAL));
    }
}

/// Starts a WR of `opcode`, which the QP must have been created for (its
/// `send_ops_flags` bit), else the batch fails with EOPNOTSUPP; `f` fills
/// it from the builder's scratch or says why not.
fn begin_checked(qp: *mut IbvQpEx, opcode: WrOpcode, f: impl FnOnce(&mut Pending, &mut Scratch) -> Result<(), c_int>) {
    guard("wr_*", || {
        // SAFETY: an extended QP made here.
        let (o, b) = unsafe { bld(qp) };
        let mut p = Pending::new(o.c.wr_id, opcode, o.c.wr_flags);
        p.sges = (b.scratch.sges.len(), 0);
        let r =
            if o.c.comp_mask & send_op_bit(opcode) == 0 { Err(libc::EOPNOTSUPP) } else { f(&mut p, &mut b.scratch) };
        if let Err(e) = r {
            trace_err("ibv_wr_*", &format_args!("{opcode:?} refused: errno {e}"));
            if b.err == 0 {
                b.err = e;
            }
        }
        b.wrs.push(p);
    })
}

/// `ibv_wr_atomic_write`: the 8 bytes at `atomic_wr` are copied now (as
/// rdma-core does); RC QPs made with `IBV_QP_EX_WITH_ATOMIC_WRITE` only.
unsafe extern "C" fn wr_atomic_write(qp: *mut IbvQpEx, rkey: u32, remote_addr: u64, atomic_wr: *const c_void) {
    begin_checked(qp, WrOpcode::AtomicWrite, |p, s| {
        (p.wr.rkey, p.wr.remote_addr) = (rkey, remote_addr);
        if atomic_wr.is_null() {
            return Err(libc::EINVAL);
        }
        let start = s.inline.len();
        // SAFETY: the caller passes 8 readable bytes (ibv_wr_atomic_write(3)).
        s.inline.extend_from_slice(unsafe { std::slice::from_raw_parts(atomic_wr as *const u8, 8) });
        p.inline = Some((start, 8));
        Ok(())
    });
}

/// rdma-core 45's `ibv_wr_flush`: RC QPs made with `IBV_QP_EX_WITH_FLUSH`
/// only. `len` travels in the RETH's 32-bit DMA length: a longer one fails
/// the batch (EINVAL) rather than flush less than asked, and so do
/// undefined placement types or selectivity levels.
unsafe extern "C" fn wr_flush(qp: *mut IbvQpEx, rkey: u32, remote_addr: u64, len: usize, ty: u8, level: u8) {
    begin_checked(qp, WrOpcode::Flush, |p, _| {
        let len = u32::try_from(len).map_err(|_| libc::EINVAL)?;
        let f = Flush { placement: ty, selectivity: level, len };
        (p.wr.rkey, p.wr.remote_addr, p.wr.flush) = (rkey, remote_addr, Some(f));
        if f.is_valid() { Ok(()) } else { Err(libc::EINVAL) }
    });
}

unsafe extern "C" fn wr_set_sge(qp: *mut IbvQpEx, lkey: u32, addr: u64, length: u32) {
    last(qp, |o, p, s| {
        let g = IbvSge { addr, length, lkey };
        // SAFETY: one SGE on our stack.
        p.sges = unsafe { take_sges(s, &g, 1) };
        inline_if_flagged(o, p, s)
    });
}
unsafe extern "C" fn wr_set_sge_list(qp: *mut IbvQpEx, num_sge: usize, sg_list: *const IbvSge) {
    last(qp, |o, p, s| {
        if num_sge > o.cap.max_send_sge.max(1) as usize || (num_sge > 0 && sg_list.is_null()) {
            return Err(libc::EINVAL);
        }
        // SAFETY: the caller's list has num_sge entries.
        p.sges = unsafe { take_sges(s, sg_list, num_sge) };
        inline_if_flagged(o, p, s)
    });
}

/// `IBV_SEND_INLINE` in `wr_flags` with SGEs: the bytes are taken now.
fn inline_if_flagged(o: &QpObj, p: &mut Pending, s: &mut Scratch) -> Result<(), c_int> {
    if p.wr.flags.contains(SendFlags::INLINE) && !fetches(p.wr.opcode) {
        // SAFETY: the SGEs name the caller's memory (verbs contract).
        p.inline = Some(unsafe { inline_from_sges(s, p.sges, o.cap.max_inline_data) }?);
    }
    Ok(())
}

unsafe extern "C" fn wr_set_inline_data(qp: *mut IbvQpEx, addr: *mut c_void, length: usize) {
    last(qp, |o, p, s| {
        if length > o.cap.max_inline_data as usize || (length > 0 && addr.is_null()) {
            return Err(libc::EINVAL);
        }
        let start = s.inline.len();
        if length > 0 {
            // SAFETY: the caller's buffer has `length` readable bytes.
            s.inline.extend_from_slice(unsafe { std::slice::from_raw_parts(addr as *const u8, length) });
        }
        p.inline = Some((start, length));
        p.wr.flags = SendFlags(p.wr.flags.0 | SendFlags::INLINE.0);
        Ok(())
    });
}
unsafe extern "C" fn wr_set_inline_data_list(qp: *mut IbvQpEx, num_buf: usize, buf_list: *const IbvDataBuf) {
    last(qp, |o, p, s| {
        if num_buf > 0 && buf_list.is_null() {
            return Err(libc::EINVAL);
        }
        let start = s.inline.len();
        for i in 0..num_buf {
            // SAFETY: the caller's list has num_buf entries.
            let d = unsafe { &*buf_list.add(i) };
            if s.inline.len() - start + d.length > o.cap.max_inline_data as usize || (d.length > 0 && d.addr.is_null())
            {
                return Err(libc::EINVAL);
            }
            if d.length > 0 {
                // SAFETY: each buffer has `length` readable bytes.
                s.inline.extend_from_slice(unsafe { std::slice::from_raw_parts(d.addr as *const u8, d.length) });
            }
        }
        p.inline = Some((start, s.inline.len() - start));
        p.wr.flags = SendFlags(p.wr.flags.0 | SendFlags::INLINE.0);
        Ok(())
    });
}
unsafe extern "C" fn wr_set_ud_addr(qp: *mut IbvQpEx, ah: *mut IbvAh, remote_qpn: u32, remote_qkey: u32) {
    last(qp, |o, p, _| {
        // Other QP types have no use for an address (rxe ignores it too).
        if o.qp.qp_type() == QpType::Ud {
            p.wr.ud = Some(UdDest { ah: ah_handle(ah)?, remote_qpn, remote_qkey });
        }
        Ok(())
    });
}
unsafe extern "C" fn wr_set_xrc_srqn(qp: *mut IbvQpEx, remote_srqn: u32) {
    let _ = remote_srqn;
    // XRC is not supported (as in rxe).
    last(qp, |_, _, _| Err(libc::EOPNOTSUPP));
}

/// The MGID `gid` points at.
///
/// # Safety
/// `gid` is NULL or points at a readable `union ibv_gid` (16 bytes).
unsafe fn mgid(gid: *const IbvGid) -> Option<[u8; 16]> {
    // SAFETY: per the contract; every bit pattern is a valid `raw`.
    unsafe { gid.as_ref().map(|g| g.raw) }
}

ibv_export! { "IBVERBS_1.1";
    /// Attaches a UD QP to the multicast group `gid` (`lid` is unused on
    /// RoCE): it receives what is sent to the group's address; 0 or an errno
    /// (EINVAL: not a UD QP or not a multicast GID; ENOMEM: a device limit).
    fn ibv_attach_mcast(qp: *mut IbvQp, gid: *const IbvGid, _lid: u16) -> c_int {
        // SAFETY: a QP from ibv_create_qp (checked for NULL), a readable GID.
        let (Some(o), Some(g)) = (unsafe { qp_obj(qp) }, unsafe { mgid(gid) }) else { return libc::EINVAL };
        match o.qp.attach_mcast(g) {
            Ok(()) => 0,
            Err(e) => errno(&e),
        }
    }
}

ibv_export! { "IBVERBS_1.1";
    /// Detaches a QP from the multicast group `gid`; EINVAL if not attached.
    fn ibv_detach_mcast(qp: *mut IbvQp, gid: *const IbvGid, _lid: u16) -> c_int {
        // SAFETY: as for ibv_attach_mcast.
        let (Some(o), Some(g)) = (unsafe { qp_obj(qp) }, unsafe { mgid(gid) }) else { return libc::EINVAL };
        match o.qp.detach_mcast(g) {
            Ok(()) => 0,
            Err(e) => errno(&e),
        }
    }
}
