//! A QP's attributes: `ibv_modify_qp` (C attributes to softroce's, with the
//! address vector's destination), `ibv_query_qp` (those the engine holds,
//! its one store of them), the conversions rdma_cm and address handles
//! share (`write_ah_attr`, `write_qp_attr`; an address vector's destination is
//! `ah::dest_of`), and multicast
//! attach / detach.

use std::ffi::c_int;
use std::net::IpAddr;

use softroce::{AccessFlags, IbPath, QpAttr, QpAttrMask, QpState};

use crate::abi::*;
use crate::errno::errno;
use crate::export::{ibv_export, trace_err};

use super::qp_obj;

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

/// What a QP's address vector holds beside the RoCE path (`write_ah_attr`
/// writes that): without a GRH, no GRH fields.
fn write_ib_path(out: &mut IbvAhAttr, p: &IbPath) {
    out.is_global = p.is_global.into();
    out.dlid = p.dlid;
    out.static_rate = p.static_rate;
    out.src_path_bits = p.src_path_bits;
    out.port_num = p.port_num;
    if !p.is_global {
        out.grh = IbvQpAttr::default().ah_attr.grh;
    }
}

/// Writes softroce's attributes into a C `ibv_qp_attr` (what
/// `rdma_init_qp_attr` hands out); the address vector is global (RoCE).
pub(crate) fn write_qp_attr(out: &mut IbvQpAttr, a: &QpAttr) {
    out.qp_state = a.qp_state as u32;
    out.path_mtu = a.path_mtu as u32;
    out.qkey = a.qkey;
    out.rq_psn = a.rq_psn.value();
    out.sq_psn = a.sq_psn.value();
    out.dest_qp_num = a.dest_qp_num.get();
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
    o.rq_psn = roce_proto::Psn::new(a.rq_psn);
    o.sq_psn = roce_proto::Psn::new(a.sq_psn);
    o.dest_qp_num = a.dest_qp_num.into();
    o.qp_access_flags = AccessFlags(a.qp_access_flags);
    if mask & IBV_QP_AV as u32 != 0 {
        let ah = &a.ah_attr;
        o.ah_attr = roce_proto::AhAttr {
            dest: crate::ah::dest_of(local, ah)?,
            sgid_index: if ah.is_global != 0 { ah.grh.sgid_index } else { local_gid_index },
            hop_limit: if ah.is_global != 0 { ah.grh.hop_limit } else { 64 },
            traffic_class: if ah.is_global != 0 { ah.grh.traffic_class } else { 0 },
            sl: ah.sl,
            flow_label: if ah.is_global != 0 { ah.grh.flow_label } else { 0 },
        };
        o.ib_path = IbPath {
            is_global: ah.is_global != 0,
            dlid: ah.dlid,
            static_rate: ah.static_rate,
            src_path_bits: ah.src_path_bits,
            port_num: ah.port_num,
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
        // SAFETY: the application reads `state` directly; we own the struct.
        unsafe { std::ptr::addr_of!(o.c.qp_base.state).cast_mut().write_volatile(o.qp.state() as u32 as _) };
        0
    }
}

/// Copies the fields named by `mask` from `a` (what `ibv_query_qp`
/// reports: the fields set, the others 0).
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
        let (held, set) = o.qp.query();
        let mut all = IbvQpAttr::default();
        write_qp_attr(&mut all, &held);
        write_ib_path(&mut all.ah_attr, &held.ib_path);
        all.en_sqd_async_notify = held.en_sqd_async_notify.into();
        let mut a = IbvQpAttr::default();
        a.port_num = 1;
        merge(&mut a, &all, set.0);
        let state = held.qp_state as u32;
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

/// `verb` (attach or detach) on the QP `qp` and the multicast group `gid`
/// names: 0, the verb's errno, or EINVAL for a NULL pointer.
///
/// # Safety
/// `qp` is NULL or a QP from `ibv_create_qp`, not destroyed; `gid` is NULL
/// or points at a readable `union ibv_gid` (16 bytes).
unsafe fn on_mcast_group(
    qp: *mut IbvQp,
    gid: *const IbvGid,
    verb: fn(&softroce::Qp, [u8; 16]) -> Result<(), softroce::Error>,
) -> c_int {
    // SAFETY: per the contract; every bit pattern is a valid `raw`.
    let (Some(o), Some(g)) = (unsafe { qp_obj(qp) }, unsafe { gid.as_ref().map(|g| g.raw) }) else {
        return libc::EINVAL;
    };
    match verb(&o.qp, g) {
        Ok(()) => 0,
        Err(e) => errno(&e),
    }
}

ibv_export! { "IBVERBS_1.1";
    /// Attaches a UD QP to the multicast group `gid` (`lid` is unused on
    /// RoCE): it receives what is sent to the group's address; 0 or an errno
    /// (EINVAL: not a UD QP or not a multicast GID; ENOMEM: a device limit).
    fn ibv_attach_mcast(qp: *mut IbvQp, gid: *const IbvGid, _lid: u16) -> c_int {
        // SAFETY: a QP from ibv_create_qp or NULL, a readable GID or NULL.
        unsafe { on_mcast_group(qp, gid, softroce::Qp::attach_mcast) }
    }
}

ibv_export! { "IBVERBS_1.1";
    /// Detaches a QP from the multicast group `gid`; EINVAL if not attached.
    fn ibv_detach_mcast(qp: *mut IbvQp, gid: *const IbvGid, _lid: u16) -> c_int {
        // SAFETY: as for ibv_attach_mcast.
        unsafe { on_mcast_group(qp, gid, softroce::Qp::detach_mcast) }
    }
}
