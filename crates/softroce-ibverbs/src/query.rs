//! The device, port and GID queries (`ibv_query_device` ...
//! `_ibv_query_gid_ex`, and the context's `query_device_ex` and
//! `query_port` operations): rxe's answers, with softroce's limits.

use std::ffi::c_int;
use std::sync::OnceLock;

use crate::abi::*;
use crate::context::{self, CtxBlock};
use crate::export::{ibv_export, set_errno};

/// `SOFTROCE_VENDOR_PART_ID`: a part ID to report instead of rxe's 0.
/// perftest picks its post-send API by part ID alone and keeps the
/// `ibv_wr_*` builder for ConnectX-4..7, BlueField and EFA parts: with, for
/// example, 4119 (ConnectX-5) unmodified perftest takes that path over
/// softroce. Off by default: tools may read a ConnectX part as an mlx5 device.
fn vendor_part_id() -> Option<u32> {
    static ID: OnceLock<Option<u32>> = OnceLock::new();
    *ID.get_or_init(|| softroce::env::string(softroce::env::VENDOR_PART_ID)?.trim().parse().ok())
}

/// Fills rdma-core's `ibv_device_attr` from softroce's (rxe's) values.
pub(crate) fn device_attr(b: &CtxBlock) -> IbvDeviceAttr {
    let a = b.ctx.query_device();
    let mut o = IbvDeviceAttr::default();
    copy_str(&mut o.fw_ver, a.fw_ver);
    o.node_guid = a.node_guid.to_be();
    o.sys_image_guid = a.sys_image_guid.to_be();
    o.max_mr_size = a.max_mr_size;
    o.page_size_cap = a.page_size_cap;
    o.vendor_id = a.vendor_id;
    o.vendor_part_id = vendor_part_id().unwrap_or(a.vendor_part_id);
    o.hw_ver = a.hw_ver;
    o.max_qp = a.max_qp as _;
    o.max_qp_wr = a.max_qp_wr as _;
    o.device_cap_flags = a.device_cap_flags as _;
    o.max_sge = a.max_sge as _;
    o.max_sge_rd = a.max_sge_rd as _;
    o.max_cq = a.max_cq as _;
    o.max_cqe = a.max_cqe as _;
    o.max_mr = a.max_mr as _;
    o.max_pd = a.max_pd as _;
    o.max_qp_rd_atom = a.max_qp_rd_atom as _;
    o.max_res_rd_atom = a.max_res_rd_atom as _;
    o.max_qp_init_rd_atom = a.max_qp_init_rd_atom as _;
    o.atomic_cap = a.atomic_cap as _;
    o.max_mw = a.max_mw as _;
    o.max_mcast_grp = a.max_mcast_grp as _;
    o.max_mcast_qp_attach = a.max_mcast_qp_attach as _;
    o.max_total_mcast_qp_attach = a.max_total_mcast_qp_attach as _;
    o.max_ah = a.max_ah as _;
    o.max_srq = a.max_srq as _;
    o.max_srq_wr = a.max_srq_wr as _;
    o.max_srq_sge = a.max_srq_sge as _;
    o.max_pkeys = a.max_pkeys;
    o.local_ca_ack_delay = a.local_ca_ack_delay;
    o.phys_port_cnt = a.phys_port_cnt;
    o
}

ibv_export! { "IBVERBS_1.1";
    /// The device's attributes (rxe's limits and capability flags).
    fn ibv_query_device(context: *mut IbvContext, attr: *mut IbvDeviceAttr) -> c_int {
        // SAFETY: a context from ibv_open_device (checked for NULL).
        let Some(b) = (unsafe { context::block(context) }) else { return libc::EINVAL };
        if attr.is_null() {
            return libc::EINVAL;
        }
        // SAFETY: the caller passes a writable ibv_device_attr.
        unsafe { attr.write(device_attr(b)) };
        0
    }
}

/// Writes `src` into a caller's struct of `len` bytes, as the sized query
/// verbs do: at most our size, and zeros past it when the caller's (newer)
/// struct is bigger.
///
/// # Safety
/// `dst` is writable for `len` bytes.
unsafe fn write_sized<T: Copy>(src: &T, dst: *mut u8, len: usize) {
    let n = len.min(size_of::<T>());
    // SAFETY: per the contract; `src` is a plain C struct of size_of::<T>() bytes.
    unsafe {
        std::ptr::copy_nonoverlapping((src as *const T).cast::<u8>(), dst, n);
        std::ptr::write_bytes(dst.add(n), 0, len - n);
    }
}

/// `verbs_context.query_device_ex`: the basic attributes plus the
/// extensions softroce has (64-bit capability flags, ODP, CQ moderation;
/// the rest zero), `attr_size` bytes of them (the caller's struct size).
pub(crate) unsafe extern "C" fn query_device_ex(
    context: *mut IbvContext,
    _input: *const IbvQueryDeviceExInput,
    attr: *mut IbvDeviceAttrEx,
    attr_size: usize,
) -> c_int {
    crate::export::guard("query_device_ex", || {
        // SAFETY: a context from ibv_open_device (checked for NULL).
        let Some(b) = (unsafe { context::block(context) }) else { return libc::EINVAL };
        if attr.is_null() || attr_size < size_of::<IbvDeviceAttr>() {
            return libc::EINVAL;
        }
        let a = b.ctx.query_device();
        let mut ex = IbvDeviceAttrEx::default();
        ex.orig_attr = device_attr(b);
        // The capability flags again, with the IBA 1.5 bits above 32 that
        // softroce has: FLUSH_GLOBAL and ATOMIC_WRITE (rxe 6.2+ sets
        // FLUSH_PERSISTENT too; softroce has no persistence domain).
        ex.device_cap_flags_ex = a.device_cap_flags_ex;
        // On-demand paging as rxe with ODP reports it (no implicit regions).
        ex.odp_caps.general_caps = a.odp_caps.general_caps;
        ex.odp_caps.per_transport_caps.rc_odp_caps = a.odp_caps.rc_odp_caps;
        ex.odp_caps.per_transport_caps.uc_odp_caps = a.odp_caps.uc_odp_caps;
        ex.odp_caps.per_transport_caps.ud_odp_caps = a.odp_caps.ud_odp_caps;
        ex.phys_port_cnt_ex = 1;
        // softroce moderates CQ events (`ibv_modify_cq`; rxe reports 0, 0).
        ex.cq_mod_caps.max_cq_count = u16::MAX;
        ex.cq_mod_caps.max_cq_period = u16::MAX;
        // SAFETY: the caller's struct has attr_size bytes.
        unsafe { write_sized(&ex, attr.cast(), attr_size) };
        0
    })
}

pub(crate) fn port_attr(b: &CtxBlock) -> IbvPortAttr {
    let p = b.ctx.query_port();
    let mut o = IbvPortAttr::default();
    o.state = p.state as _;
    o.max_mtu = p.max_mtu as _;
    o.active_mtu = p.active_mtu as _;
    o.gid_tbl_len = p.gid_tbl_len as _;
    o.port_cap_flags = p.port_cap_flags;
    o.max_msg_sz = p.max_msg_sz;
    o.pkey_tbl_len = p.pkey_tbl_len;
    // Packets dropped by the P_Key check, where rxe counts them.
    o.bad_pkey_cntr = b.ctx.counters().drop_bad_pkey.try_into().unwrap_or(u32::MAX);
    // LID-only addressing (see `lid`): rxe says 0.
    o.lid = crate::lid::lid_of(b.ctx.device().addr);
    o.sm_lid = p.sm_lid;
    o.max_vl_num = p.max_vl_num;
    o.active_width = p.active_width;
    o.active_speed = p.active_speed;
    o.phys_state = p.phys_state;
    o.link_layer = p.link_layer;
    o
}

/// `verbs_context.query_port` (what the `ibv_query_port` macro calls):
/// fills `port_attr_len` bytes, zeroing what we do not know.
pub(crate) unsafe extern "C" fn query_port(
    context: *mut IbvContext,
    port_num: u8,
    attr: *mut IbvPortAttr,
    port_attr_len: usize,
) -> c_int {
    crate::export::guard("query_port", || {
        // SAFETY: a context from ibv_open_device (checked for NULL).
        let Some(b) = (unsafe { context::block(context) }) else { return libc::EINVAL };
        if port_num != 1 || attr.is_null() {
            return libc::EINVAL;
        }
        let p = port_attr(b);
        // SAFETY: the caller's struct has port_attr_len bytes.
        unsafe { write_sized(&p, attr.cast(), port_attr_len) };
        if port_attr_len >= PORT_ATTR_ACTIVE_SPEED_EX_OFFSET + 4 {
            // rdma-core 56's headers append `active_speed_ex`; the kernel
            // fills it with the port's `active_speed` (uverbs QUERY_PORT).
            // SAFETY: inside the caller's port_attr_len bytes (checked).
            unsafe {
                attr.cast::<u8>()
                    .add(PORT_ATTR_ACTIVE_SPEED_EX_OFFSET)
                    .cast::<u32>()
                    .write_unaligned(u32::from(p.active_speed))
            };
        }
        0
    })
}

ibv_export! { "IBVERBS_1.16";
    /// The port's effective speed: not offered, as by rxe (only mlx5 and
    /// efa implement it): `EOPNOTSUPP`, and `ibv_devinfo` leaves out its
    /// `effective_speed` line as it does over rxe.
    fn ibv_query_port_speed(context: *mut IbvContext, port_num: u32, speed: *mut u64) -> c_int {
        // SAFETY: a context from ibv_open_device (checked for NULL).
        if unsafe { context::block(context) }.is_none() || port_num != 1 || speed.is_null() {
            return libc::EINVAL;
        }
        crate::export::trace_err("ibv_query_port_speed", &"a software device has no effective speed (EOPNOTSUPP, as rxe)");
        libc::EOPNOTSUPP
    }
}

ibv_export! { "IBVERBS_1.1";
    /// The port's attributes, in the 48-byte layout of binaries built
    /// before `port_cap_flags2` (the `ibv_query_port` macro reaches
    /// `query_port` through the context instead).
    fn ibv_query_port(context: *mut IbvContext, port_num: u8, port_attr: *mut IbvPortAttr) -> c_int {
        // SAFETY: forwarded; the compat struct is the first 48 bytes.
        unsafe { query_port(context, port_num, port_attr, 48) }
    }
}

fn gid_at(b: &CtxBlock, index: c_int) -> Option<Option<[u8; 16]>> {
    let len = b.ctx.query_port().gid_tbl_len as c_int;
    if index < 0 || index >= len {
        return None;
    }
    Some(b.ctx.query_gid(index as usize))
}

ibv_export! { "IBVERBS_1.1";
    /// The GID at `index`: all zeros for an empty slot, as rdma-core
    /// reports it; EINVAL past the table.
    fn ibv_query_gid(context: *mut IbvContext, port_num: u8, index: c_int, gid: *mut IbvGid) -> c_int {
        // SAFETY: a context from ibv_open_device (checked for NULL).
        let Some(b) = (unsafe { context::block(context) }) else { return -1 };
        if port_num != 1 || gid.is_null() {
            set_errno(libc::EINVAL);
            return -1;
        }
        let Some(g) = gid_at(b, index) else {
            set_errno(libc::EINVAL);
            return -1;
        };
        // SAFETY: the caller passes a writable 16-byte GID.
        unsafe { (gid as *mut [u8; 16]).write(g.unwrap_or([0; 16])) };
        0
    }
}

ibv_export! { "IBVERBS_1.11";
    /// One GID entry (`ibv_query_gid_ex`): ENODATA for an empty slot.
    fn _ibv_query_gid_ex(context: *mut IbvContext, port_num: u32, gid_index: u32, entry: *mut IbvGidEntry, flags: u32, entry_size: usize) -> c_int {
        // SAFETY: a context from ibv_open_device (checked for NULL).
        let Some(b) = (unsafe { context::block(context) }) else { return libc::EINVAL };
        if port_num != 1 || entry.is_null() || flags != 0 || entry_size < size_of::<IbvGidEntry>() {
            return libc::EINVAL;
        }
        match gid_at(b, gid_index as c_int) {
            None => libc::EINVAL,
            Some(None) => libc::ENODATA,
            Some(Some(g)) => {
                let e = gid_entry(b, gid_index, g);
                // SAFETY: the caller's entry has at least our size (checked).
                unsafe { entry.write(e) };
                0
            }
        }
    }
}

fn gid_entry(b: &CtxBlock, index: u32, gid: [u8; 16]) -> IbvGidEntry {
    let mut e = IbvGidEntry::default();
    // SAFETY: IbvGid is 16 plain bytes.
    e.gid = unsafe { std::mem::transmute::<[u8; 16], IbvGid>(gid) };
    e.gid_index = index;
    e.port_num = 1;
    e.gid_type = IBV_GID_TYPE_ROCE_V2 as _;
    e.ndev_ifindex = b
        .ctx
        .device()
        .interface
        .as_deref()
        .and_then(|i| std::ffi::CString::new(i).ok())
        // SAFETY: a NUL-terminated interface name.
        .map_or(0, |c| unsafe { libc::if_nametoindex(c.as_ptr()) });
    e
}

ibv_export! { "IBVERBS_1.11";
    /// The valid GID entries, up to `max_entries`; returns how many.
    fn _ibv_query_gid_table(context: *mut IbvContext, entries: *mut IbvGidEntry, max_entries: usize, flags: u32, entry_size: usize) -> isize {
        // SAFETY: a context from ibv_open_device (checked for NULL).
        let Some(b) = (unsafe { context::block(context) }) else { return -(libc::EINVAL as isize) };
        if entries.is_null() || flags != 0 || entry_size < size_of::<IbvGidEntry>() {
            return -(libc::EINVAL as isize);
        }
        let mut n = 0usize;
        for i in 0..b.ctx.device().gids.len() {
            if let Some(g) = b.ctx.query_gid(i) {
                if n == max_entries {
                    return -(libc::EINVAL as isize);
                }
                // SAFETY: entries has max_entries slots of entry_size bytes.
                unsafe { ((entries as *mut u8).add(n * entry_size) as *mut IbvGidEntry).write_unaligned(gid_entry(b, i as u32, g)) };
                n += 1;
            }
        }
        n as isize
    }
}

ibv_export! { "IBVERBS_PRIVATE_34", "IBVERBS_PRIVATE_65";
    /// The GID's type in sysfs terms (RoCE v2 = 1), as `ibv_devinfo` asks;
    /// an empty slot reads as RoCE v1 (rdma-core keeps that answer for
    /// empty GIDs). -1 with `errno = EINVAL` for a bad port or index.
    fn ibv_query_gid_type(context: *mut IbvContext, port_num: u8, index: u32, gid_type: *mut u32) -> c_int {
        let einval = || {
            set_errno(libc::EINVAL);
            -1
        };
        // SAFETY: a context from ibv_open_device (checked for NULL).
        let Some(b) = (unsafe { context::block(context) }) else { return einval() };
        if port_num != 1 || gid_type.is_null() {
            return einval();
        }
        let Some(g) = gid_at(b, index as c_int) else { return einval() };
        let t = if g.is_some() { IBV_GID_TYPE_SYSFS_ROCE_V2 } else { IBV_GID_TYPE_SYSFS_IB_ROCE_V1 };
        // SAFETY: the caller passes a writable int.
        unsafe { *gid_type = t };
        0
    }
}

ibv_export! { "IBVERBS_1.1";
    /// P_Key table: one entry, the default 0xffff (big-endian).
    fn ibv_query_pkey(context: *mut IbvContext, port_num: u8, index: c_int, pkey: *mut u16) -> c_int {
        // SAFETY: a context from ibv_open_device (checked for NULL).
        if unsafe { context::block(context) }.is_none() || port_num != 1 || index != 0 || pkey.is_null() {
            return -1;
        }
        // SAFETY: the caller passes a writable __be16.
        unsafe { *pkey = 0xffffu16.to_be() };
        0
    }
}

ibv_export! { "IBVERBS_1.5";
    /// The index of `pkey` (big-endian) in the P_Key table, or -1.
    fn ibv_get_pkey_index(context: *mut IbvContext, port_num: u8, pkey: u16) -> c_int {
        // SAFETY: a context from ibv_open_device (checked for NULL).
        if unsafe { context::block(context) }.is_none() || port_num != 1 {
            return -1;
        }
        if u16::from_be(pkey) & 0x7fff == 0x7fff { 0 } else { -1 }
    }
}
