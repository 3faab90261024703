//! `#[repr(C)]` mirrors of the rdma-core 44 `<infiniband/verbs.h>` structures
//! (x86_64 Linux, glibc), as applications compiled against that header see them.
//!
//! Naming: C `struct ibv_foo_bar` is `IbvFooBar`, `verbs_context` is
//! `VerbsContext`; fields keep their C names, except the few that are Rust
//! keywords or not snake case (`type` → `type_`, `priv` → `priv_`,
//! `ABI_placeholder1` → `abi_placeholder1`). C's anonymous members and unions
//! get a Rust name of their own (`IbvSendWr::bind_mw_tso`, `IbvGid::global`,
//! `IbvAsyncEvent::element`, ...), documented where they are declared; the
//! `imm_data` / `invalidate(d)_rkey` unions of `ibv_send_wr` and `ibv_wc`,
//! whose members are the same `u32`, are a single `imm_data: u32` field.
//! The constants are in [`consts`], re-exported here.
//!
//! Enum-typed C fields are `c_uint` (gcc's representation of an enum with no
//! negative value) or `c_int` (`ibv_node_type`, `ibv_transport_type`);
//! `__be16/32/64` fields are plain integers holding network byte order.
//!
//! Every field's offset and size, and every struct's size, is asserted at
//! compile time against the numbers measured on the real header, and recorded
//! in [`LAYOUT`] so that `tests/layout.rs` can check them against `cc` too.
//! Every struct implements [`Zero`] (a `const ZERO` with NULL pointers, `None`
//! callbacks, zero integers and unlocked pthread objects) and `Default`.

use core::ffi::{c_char, c_int, c_uint, c_void};
use core::mem::offset_of;

pub use consts::*;

/// A `void (*)(void)` callback slot: a verb this library never provides
/// (flows, counters, device memory, work queues, ...). Always `None`.
pub type NotProvided = Option<unsafe extern "C" fn()>;

/// A `void *(*)(void)` slot of `ibv_context_ops`: the pre-`verbs_context`
/// entry points that rdma-core no longer calls through the ops table.
pub type CompatOp = Option<unsafe extern "C" fn() -> *mut c_void>;

/// The all-zero value of an ABI mirror: NULL pointers, `None` callbacks, zero
/// integers, and unlocked `pthread_mutex_t` / `pthread_cond_t` (whose static
/// initialisers are all zero bytes on glibc).
pub trait Zero: Sized {
    /// The all-zero value.
    const ZERO: Self;
}

macro_rules! zero_int {
    ($($t:ty),*) => { $(impl Zero for $t { const ZERO: Self = 0; })* };
}
zero_int!(u8, u16, u32, u64, usize, i8, i16, i32, i64, isize);

impl<T> Zero for *mut T {
    const ZERO: Self = core::ptr::null_mut();
}
impl<T> Zero for *const T {
    const ZERO: Self = core::ptr::null();
}
impl<T> Zero for Option<T> {
    const ZERO: Self = None;
}
impl<T: Zero + Copy, const N: usize> Zero for [T; N] {
    const ZERO: Self = [T::ZERO; N];
}
impl Zero for libc::pthread_mutex_t {
    const ZERO: Self = libc::PTHREAD_MUTEX_INITIALIZER;
}
impl Zero for libc::pthread_cond_t {
    const ZERO: Self = libc::PTHREAD_COND_INITIALIZER;
}
impl Zero for libc::timespec {
    const ZERO: Self = libc::timespec { tv_sec: 0, tv_nsec: 0 };
}

/// Implements [`Zero`] and `Default` for a struct that has no C name of its
/// own (an anonymous C member); the field list must be complete.
macro_rules! zero_struct {
    ($rs:ident { $($f:ident),* $(,)? }) => {
        impl Zero for $rs {
            const ZERO: Self = Self { $($f: Zero::ZERO),* };
        }
        impl Default for $rs {
            fn default() -> Self {
                Self::ZERO
            }
        }
    };
}

/// Implements [`Zero`] and `Default` for a union by zeroing its given
/// variant, which must be the largest one.
macro_rules! zero_union {
    ($rs:ident . $f:ident) => {
        impl Zero for $rs {
            const ZERO: Self = Self { $f: Zero::ZERO };
        }
        impl Default for $rs {
            fn default() -> Self {
                Self::ZERO
            }
        }
    };
}

// ---------------------------------------------------------------------------
// Device and context
// ---------------------------------------------------------------------------

/// `struct _ibv_device_ops`: obsolete, never called; kept for layout.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
#[allow(missing_docs)]
pub struct IbvDeviceOps {
    pub _dummy1: Option<unsafe extern "C" fn(*mut IbvDevice, c_int) -> *mut IbvContext>,
    pub _dummy2: Option<unsafe extern "C" fn(*mut IbvContext)>,
}
zero_struct!(IbvDeviceOps { _dummy1, _dummy2 });

/// `struct ibv_device`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
#[allow(missing_docs)]
pub struct IbvDevice {
    pub _ops: IbvDeviceOps,
    /// `enum ibv_node_type`.
    pub node_type: c_int,
    /// `enum ibv_transport_type`.
    pub transport_type: c_int,
    pub name: [c_char; 64],
    pub dev_name: [c_char; 64],
    pub dev_path: [c_char; 256],
    pub ibdev_path: [c_char; 256],
}

/// `struct ibv_context_ops`: the legacy ops table embedded in `ibv_context`;
/// the inline data-path verbs (`ibv_post_send`, `ibv_poll_cq`, ...) call
/// through it.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
#[allow(missing_docs)]
pub struct IbvContextOps {
    pub _compat_query_device: Option<unsafe extern "C" fn(*mut IbvContext, *mut IbvDeviceAttr) -> c_int>,
    /// The last argument is a `struct _compat_ibv_port_attr *`.
    pub _compat_query_port: Option<unsafe extern "C" fn(*mut IbvContext, u8, *mut c_void) -> c_int>,
    pub _compat_alloc_pd: CompatOp,
    pub _compat_dealloc_pd: CompatOp,
    pub _compat_reg_mr: CompatOp,
    pub _compat_rereg_mr: CompatOp,
    pub _compat_dereg_mr: CompatOp,
    /// The second argument is an `enum ibv_mw_type`.
    pub alloc_mw: Option<unsafe extern "C" fn(*mut IbvPd, c_uint) -> *mut IbvMw>,
    pub bind_mw: Option<unsafe extern "C" fn(*mut IbvQp, *mut IbvMw, *mut IbvMwBind) -> c_int>,
    pub dealloc_mw: Option<unsafe extern "C" fn(*mut IbvMw) -> c_int>,
    pub _compat_create_cq: CompatOp,
    pub poll_cq: Option<unsafe extern "C" fn(*mut IbvCq, c_int, *mut IbvWc) -> c_int>,
    pub req_notify_cq: Option<unsafe extern "C" fn(*mut IbvCq, c_int) -> c_int>,
    pub _compat_cq_event: CompatOp,
    pub _compat_resize_cq: CompatOp,
    pub _compat_destroy_cq: CompatOp,
    pub _compat_create_srq: CompatOp,
    pub _compat_modify_srq: CompatOp,
    pub _compat_query_srq: CompatOp,
    pub _compat_destroy_srq: CompatOp,
    pub post_srq_recv: Option<unsafe extern "C" fn(*mut IbvSrq, *mut IbvRecvWr, *mut *mut IbvRecvWr) -> c_int>,
    pub _compat_create_qp: CompatOp,
    pub _compat_query_qp: CompatOp,
    pub _compat_modify_qp: CompatOp,
    pub _compat_destroy_qp: CompatOp,
    pub post_send: Option<unsafe extern "C" fn(*mut IbvQp, *mut IbvSendWr, *mut *mut IbvSendWr) -> c_int>,
    pub post_recv: Option<unsafe extern "C" fn(*mut IbvQp, *mut IbvRecvWr, *mut *mut IbvRecvWr) -> c_int>,
    pub _compat_create_ah: CompatOp,
    pub _compat_destroy_ah: CompatOp,
    pub _compat_attach_mcast: CompatOp,
    pub _compat_detach_mcast: CompatOp,
    pub _compat_async_event: CompatOp,
}

/// `struct ibv_context`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
#[allow(missing_docs)]
pub struct IbvContext {
    pub device: *mut IbvDevice,
    pub ops: IbvContextOps,
    pub cmd_fd: c_int,
    pub async_fd: c_int,
    pub num_comp_vectors: c_int,
    pub mutex: libc::pthread_mutex_t,
    /// `__VERBS_ABI_IS_EXTENDED` when the context is the tail of a
    /// [`VerbsContext`] (see [`consts::__VERBS_ABI_IS_EXTENDED`]).
    pub abi_compat: *mut c_void,
}

/// `struct verbs_context`: the extended context; applications find it at
/// `(ibv_context *) - 320` when `abi_compat == __VERBS_ABI_IS_EXTENDED`, and
/// check `sz` before calling an op (`verbs_get_ctx_op`). Slots typed
/// [`NotProvided`] are verbs this library does not provide.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
#[allow(missing_docs)]
pub struct VerbsContext {
    pub query_port: Option<unsafe extern "C" fn(*mut IbvContext, u8, *mut IbvPortAttr, usize) -> c_int>,
    /// `(pd, enum ibv_advise_mr_advice, flags, sg_list, num_sges)`.
    pub advise_mr: Option<unsafe extern "C" fn(*mut IbvPd, c_uint, u32, *mut IbvSge, u32) -> c_int>,
    pub alloc_null_mr: Option<unsafe extern "C" fn(*mut IbvPd) -> *mut IbvMr>,
    pub read_counters: NotProvided,
    pub attach_counters_point_flow: NotProvided,
    pub create_counters: NotProvided,
    pub destroy_counters: NotProvided,
    pub reg_dm_mr: NotProvided,
    pub alloc_dm: NotProvided,
    pub free_dm: NotProvided,
    pub modify_flow_action_esp: NotProvided,
    pub destroy_flow_action: NotProvided,
    pub create_flow_action_esp: NotProvided,
    pub modify_qp_rate_limit: NotProvided,
    pub alloc_parent_domain: NotProvided,
    pub dealloc_td: NotProvided,
    pub alloc_td: NotProvided,
    pub modify_cq: Option<unsafe extern "C" fn(*mut IbvCq, *mut IbvModifyCqAttr) -> c_int>,
    pub post_srq_ops: NotProvided,
    pub destroy_rwq_ind_table: NotProvided,
    pub create_rwq_ind_table: NotProvided,
    pub destroy_wq: Option<unsafe extern "C" fn(*mut IbvWq) -> c_int>,
    pub modify_wq: NotProvided,
    pub create_wq: NotProvided,
    pub query_rt_values: Option<unsafe extern "C" fn(*mut IbvContext, *mut IbvValuesEx) -> c_int>,
    pub create_cq_ex: Option<unsafe extern "C" fn(*mut IbvContext, *mut IbvCqInitAttrEx) -> *mut IbvCqEx>,
    /// C `priv` (`struct verbs_ex_private *`), private to libibverbs.
    pub priv_: *mut c_void,
    pub query_device_ex: Option<
        unsafe extern "C" fn(*mut IbvContext, *const IbvQueryDeviceExInput, *mut IbvDeviceAttrEx, usize) -> c_int,
    >,
    pub ibv_destroy_flow: NotProvided,
    /// C `ABI_placeholder2`.
    pub abi_placeholder2: NotProvided,
    pub ibv_create_flow: NotProvided,
    /// C `ABI_placeholder1`.
    pub abi_placeholder1: NotProvided,
    pub open_qp: NotProvided,
    pub create_qp_ex: Option<unsafe extern "C" fn(*mut IbvContext, *mut IbvQpInitAttrEx) -> *mut IbvQp>,
    pub get_srq_num: Option<unsafe extern "C" fn(*mut IbvSrq, *mut u32) -> c_int>,
    pub create_srq_ex: Option<unsafe extern "C" fn(*mut IbvContext, *mut IbvSrqInitAttrEx) -> *mut IbvSrq>,
    pub open_xrcd: NotProvided,
    pub close_xrcd: Option<unsafe extern "C" fn(*mut IbvXrcd) -> c_int>,
    /// C `_ABI_placeholder3`.
    pub _abi_placeholder3: u64,
    /// Bytes of this struct that precede `context` and are valid, counted
    /// back from `context` (`sizeof(verbs_context) - offsetof(op)` must be
    /// `<= sz` for `op` to be used).
    pub sz: usize,
    pub context: IbvContext,
}

// ---------------------------------------------------------------------------
// Protection domains, memory, address handles, channels
// ---------------------------------------------------------------------------

/// `struct ibv_pd`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
#[allow(missing_docs)]
pub struct IbvPd {
    pub context: *mut IbvContext,
    pub handle: u32,
}

/// `struct ibv_xrcd`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
#[allow(missing_docs)]
pub struct IbvXrcd {
    pub context: *mut IbvContext,
}

/// `struct ibv_mr`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
#[allow(missing_docs)]
pub struct IbvMr {
    pub context: *mut IbvContext,
    pub pd: *mut IbvPd,
    pub addr: *mut c_void,
    pub length: usize,
    pub handle: u32,
    pub lkey: u32,
    pub rkey: u32,
}

/// `struct ibv_mw`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
#[allow(missing_docs)]
pub struct IbvMw {
    pub context: *mut IbvContext,
    pub pd: *mut IbvPd,
    pub rkey: u32,
    pub handle: u32,
    /// C `type` (`enum ibv_mw_type`).
    pub type_: c_uint,
}

/// `struct ibv_mw_bind_info`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
#[allow(missing_docs)]
pub struct IbvMwBindInfo {
    pub mr: *mut IbvMr,
    pub addr: u64,
    pub length: u64,
    /// `enum ibv_access_flags` bits.
    pub mw_access_flags: c_uint,
}

/// `struct ibv_mw_bind`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
#[allow(missing_docs)]
pub struct IbvMwBind {
    pub wr_id: u64,
    /// `enum ibv_send_flags` bits.
    pub send_flags: c_uint,
    pub bind_info: IbvMwBindInfo,
}

/// `struct ibv_ah`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
#[allow(missing_docs)]
pub struct IbvAh {
    pub context: *mut IbvContext,
    pub pd: *mut IbvPd,
    pub handle: u32,
}

/// `struct ibv_comp_channel`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
#[allow(missing_docs)]
pub struct IbvCompChannel {
    pub context: *mut IbvContext,
    pub fd: c_int,
    pub refcnt: c_int,
}

// ---------------------------------------------------------------------------
// GIDs and address vectors
// ---------------------------------------------------------------------------

/// `union ibv_gid`.
#[repr(C)]
#[derive(Clone, Copy)]
#[allow(missing_docs)]
pub union IbvGid {
    pub raw: [u8; 16],
    pub global: IbvGidGlobal,
}
zero_union!(IbvGid.raw);

/// The anonymous `global` member of `union ibv_gid` (both big-endian).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
#[allow(missing_docs)]
pub struct IbvGidGlobal {
    pub subnet_prefix: u64,
    pub interface_id: u64,
}
zero_struct!(IbvGidGlobal { subnet_prefix, interface_id });

/// `struct ibv_gid_entry`.
#[repr(C)]
#[derive(Clone, Copy)]
#[allow(missing_docs)]
pub struct IbvGidEntry {
    pub gid: IbvGid,
    pub gid_index: u32,
    pub port_num: u32,
    /// `enum ibv_gid_type`.
    pub gid_type: u32,
    pub ndev_ifindex: u32,
}

/// `struct ibv_global_route`.
#[repr(C)]
#[derive(Clone, Copy)]
#[allow(missing_docs)]
pub struct IbvGlobalRoute {
    pub dgid: IbvGid,
    pub flow_label: u32,
    pub sgid_index: u8,
    pub hop_limit: u8,
    pub traffic_class: u8,
}

/// `struct ibv_grh`: the 40 bytes a UD receive buffer starts with.
#[repr(C)]
#[derive(Clone, Copy)]
#[allow(missing_docs)]
pub struct IbvGrh {
    pub version_tclass_flow: u32,
    pub paylen: u16,
    pub next_hdr: u8,
    pub hop_limit: u8,
    pub sgid: IbvGid,
    pub dgid: IbvGid,
}

/// `struct ibv_ah_attr`.
#[repr(C)]
#[derive(Clone, Copy)]
#[allow(missing_docs)]
pub struct IbvAhAttr {
    pub grh: IbvGlobalRoute,
    pub dlid: u16,
    pub sl: u8,
    pub src_path_bits: u8,
    /// `enum ibv_rate`.
    pub static_rate: u8,
    pub is_global: u8,
    pub port_num: u8,
}

// ---------------------------------------------------------------------------
// Device and port attributes
// ---------------------------------------------------------------------------

/// `struct ibv_device_attr`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
#[allow(missing_docs)]
pub struct IbvDeviceAttr {
    pub fw_ver: [c_char; 64],
    pub node_guid: u64,
    pub sys_image_guid: u64,
    pub max_mr_size: u64,
    pub page_size_cap: u64,
    pub vendor_id: u32,
    pub vendor_part_id: u32,
    pub hw_ver: u32,
    pub max_qp: c_int,
    pub max_qp_wr: c_int,
    /// `enum ibv_device_cap_flags` bits.
    pub device_cap_flags: c_uint,
    pub max_sge: c_int,
    pub max_sge_rd: c_int,
    pub max_cq: c_int,
    pub max_cqe: c_int,
    pub max_mr: c_int,
    pub max_pd: c_int,
    pub max_qp_rd_atom: c_int,
    pub max_ee_rd_atom: c_int,
    pub max_res_rd_atom: c_int,
    pub max_qp_init_rd_atom: c_int,
    pub max_ee_init_rd_atom: c_int,
    /// `enum ibv_atomic_cap`.
    pub atomic_cap: c_uint,
    pub max_ee: c_int,
    pub max_rdd: c_int,
    pub max_mw: c_int,
    pub max_raw_ipv6_qp: c_int,
    pub max_raw_ethy_qp: c_int,
    pub max_mcast_grp: c_int,
    pub max_mcast_qp_attach: c_int,
    pub max_total_mcast_qp_attach: c_int,
    pub max_ah: c_int,
    pub max_fmr: c_int,
    pub max_map_per_fmr: c_int,
    pub max_srq: c_int,
    pub max_srq_wr: c_int,
    pub max_srq_sge: c_int,
    pub max_pkeys: u16,
    pub local_ca_ack_delay: u8,
    pub phys_port_cnt: u8,
}

/// `struct ibv_query_device_ex_input`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
#[allow(missing_docs)]
pub struct IbvQueryDeviceExInput {
    pub comp_mask: u32,
}

/// `struct ibv_odp_caps`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
#[allow(missing_docs)]
pub struct IbvOdpCaps {
    pub general_caps: u64,
    pub per_transport_caps: IbvOdpPerTransportCaps,
}

/// The anonymous `per_transport_caps` member of `struct ibv_odp_caps`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
#[allow(missing_docs)]
pub struct IbvOdpPerTransportCaps {
    pub rc_odp_caps: u32,
    pub uc_odp_caps: u32,
    pub ud_odp_caps: u32,
}
zero_struct!(IbvOdpPerTransportCaps { rc_odp_caps, uc_odp_caps, ud_odp_caps });

/// `struct ibv_tso_caps`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
#[allow(missing_docs)]
pub struct IbvTsoCaps {
    pub max_tso: u32,
    pub supported_qpts: u32,
}

/// `struct ibv_rss_caps`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
#[allow(missing_docs)]
pub struct IbvRssCaps {
    pub supported_qpts: u32,
    pub max_rwq_indirection_tables: u32,
    pub max_rwq_indirection_table_size: u32,
    pub rx_hash_fields_mask: u64,
    pub rx_hash_function: u8,
}

/// `struct ibv_packet_pacing_caps`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
#[allow(missing_docs)]
pub struct IbvPacketPacingCaps {
    pub qp_rate_limit_min: u32,
    pub qp_rate_limit_max: u32,
    pub supported_qpts: u32,
}

/// `struct ibv_tm_caps`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
#[allow(missing_docs)]
pub struct IbvTmCaps {
    pub max_rndv_hdr_size: u32,
    pub max_num_tags: u32,
    pub flags: u32,
    pub max_ops: u32,
    pub max_sge: u32,
}

/// `struct ibv_cq_moderation_caps`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
#[allow(missing_docs)]
pub struct IbvCqModerationCaps {
    pub max_cq_count: u16,
    pub max_cq_period: u16,
}

/// `struct ibv_pci_atomic_caps`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
#[allow(missing_docs)]
pub struct IbvPciAtomicCaps {
    pub fetch_add: u16,
    pub swap: u16,
    pub compare_swap: u16,
}

/// `struct ibv_device_attr_ex`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
#[allow(missing_docs)]
pub struct IbvDeviceAttrEx {
    pub orig_attr: IbvDeviceAttr,
    pub comp_mask: u32,
    pub odp_caps: IbvOdpCaps,
    pub completion_timestamp_mask: u64,
    pub hca_core_clock: u64,
    pub device_cap_flags_ex: u64,
    pub tso_caps: IbvTsoCaps,
    pub rss_caps: IbvRssCaps,
    pub max_wq_type_rq: u32,
    pub packet_pacing_caps: IbvPacketPacingCaps,
    pub raw_packet_caps: u32,
    pub tm_caps: IbvTmCaps,
    pub cq_mod_caps: IbvCqModerationCaps,
    pub max_dm_size: u64,
    pub pci_atomic_caps: IbvPciAtomicCaps,
    pub xrc_odp_caps: u32,
    pub phys_port_cnt_ex: u32,
}

/// `struct ibv_port_attr`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
#[allow(missing_docs)]
pub struct IbvPortAttr {
    /// `enum ibv_port_state`.
    pub state: c_uint,
    /// `enum ibv_mtu`.
    pub max_mtu: c_uint,
    /// `enum ibv_mtu`.
    pub active_mtu: c_uint,
    pub gid_tbl_len: c_int,
    pub port_cap_flags: u32,
    pub max_msg_sz: u32,
    pub bad_pkey_cntr: u32,
    pub qkey_viol_cntr: u32,
    pub pkey_tbl_len: u16,
    pub lid: u16,
    pub sm_lid: u16,
    pub lmc: u8,
    pub max_vl_num: u8,
    pub sm_sl: u8,
    pub subnet_timeout: u8,
    pub init_type_reply: u8,
    pub active_width: u8,
    pub active_speed: u8,
    pub phys_state: u8,
    pub link_layer: u8,
    pub flags: u8,
    pub port_cap_flags2: u16,
}

/// `struct ibv_values_ex`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
#[allow(missing_docs)]
pub struct IbvValuesEx {
    pub comp_mask: u32,
    pub raw_clock: libc::timespec,
}

// ---------------------------------------------------------------------------
// Completion queues
// ---------------------------------------------------------------------------

/// `struct ibv_cq`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
#[allow(missing_docs)]
pub struct IbvCq {
    pub context: *mut IbvContext,
    pub channel: *mut IbvCompChannel,
    pub cq_context: *mut c_void,
    pub handle: u32,
    pub cqe: c_int,
    pub mutex: libc::pthread_mutex_t,
    pub cond: libc::pthread_cond_t,
    pub comp_events_completed: u32,
    pub async_events_completed: u32,
}

/// `struct ibv_wc`.
#[repr(C)]
#[derive(Clone, Copy)]
#[allow(missing_docs)]
pub struct IbvWc {
    pub wr_id: u64,
    /// `enum ibv_wc_status`.
    pub status: c_uint,
    /// `enum ibv_wc_opcode`.
    pub opcode: c_uint,
    pub vendor_err: u32,
    pub byte_len: u32,
    /// C's anonymous union `{ __be32 imm_data; uint32_t invalidated_rkey; }`,
    /// whose two members are the same `u32`: big-endian immediate data when
    /// `wc_flags & IBV_WC_WITH_IMM`, the invalidated rkey (host order) when
    /// `wc_flags & IBV_WC_WITH_INV`.
    pub imm_data: u32,
    pub qp_num: u32,
    pub src_qp: u32,
    /// `enum ibv_wc_flags` bits.
    pub wc_flags: c_uint,
    pub pkey_index: u16,
    pub slid: u16,
    pub sl: u8,
    pub dlid_path_bits: u8,
}

/// `struct ibv_poll_cq_attr`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
#[allow(missing_docs)]
pub struct IbvPollCqAttr {
    pub comp_mask: u32,
}

/// `struct ibv_moderate_cq`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
#[allow(missing_docs)]
pub struct IbvModerateCq {
    pub cq_count: u16,
    /// Microseconds.
    pub cq_period: u16,
}

/// `struct ibv_modify_cq_attr` (`ibv_modify_cq`).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
#[allow(missing_docs)]
pub struct IbvModifyCqAttr {
    /// `enum ibv_cq_attr_mask` bits.
    pub attr_mask: u32,
    pub moderate: IbvModerateCq,
}

/// `struct ibv_cq_init_attr_ex`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
#[allow(missing_docs)]
pub struct IbvCqInitAttrEx {
    pub cqe: u32,
    pub cq_context: *mut c_void,
    pub channel: *mut IbvCompChannel,
    pub comp_vector: u32,
    /// `enum ibv_create_cq_wc_flags` bits.
    pub wc_flags: u64,
    /// `enum ibv_cq_init_attr_mask` bits.
    pub comp_mask: u32,
    /// `enum ibv_create_cq_attr_flags` bits.
    pub flags: u32,
    pub parent_domain: *mut IbvPd,
}

/// `struct ibv_cq_ex`: an `ibv_cq` followed by the polling callbacks of the
/// `ibv_start_poll` / `ibv_wc_read_*` inline API.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
#[allow(missing_docs)]
pub struct IbvCqEx {
    pub context: *mut IbvContext,
    pub channel: *mut IbvCompChannel,
    pub cq_context: *mut c_void,
    pub handle: u32,
    pub cqe: c_int,
    pub mutex: libc::pthread_mutex_t,
    pub cond: libc::pthread_cond_t,
    pub comp_events_completed: u32,
    pub async_events_completed: u32,
    pub comp_mask: u32,
    /// `enum ibv_wc_status` of the current completion.
    pub status: c_uint,
    pub wr_id: u64,
    pub start_poll: Option<unsafe extern "C" fn(*mut IbvCqEx, *mut IbvPollCqAttr) -> c_int>,
    pub next_poll: Option<unsafe extern "C" fn(*mut IbvCqEx) -> c_int>,
    pub end_poll: Option<unsafe extern "C" fn(*mut IbvCqEx)>,
    /// Returns an `enum ibv_wc_opcode`.
    pub read_opcode: Option<unsafe extern "C" fn(*mut IbvCqEx) -> c_uint>,
    pub read_vendor_err: Option<unsafe extern "C" fn(*mut IbvCqEx) -> u32>,
    pub read_byte_len: Option<unsafe extern "C" fn(*mut IbvCqEx) -> u32>,
    /// Returns `__be32`.
    pub read_imm_data: Option<unsafe extern "C" fn(*mut IbvCqEx) -> u32>,
    pub read_qp_num: Option<unsafe extern "C" fn(*mut IbvCqEx) -> u32>,
    pub read_src_qp: Option<unsafe extern "C" fn(*mut IbvCqEx) -> u32>,
    pub read_wc_flags: Option<unsafe extern "C" fn(*mut IbvCqEx) -> c_uint>,
    pub read_slid: Option<unsafe extern "C" fn(*mut IbvCqEx) -> u32>,
    pub read_sl: Option<unsafe extern "C" fn(*mut IbvCqEx) -> u8>,
    pub read_dlid_path_bits: Option<unsafe extern "C" fn(*mut IbvCqEx) -> u8>,
    pub read_completion_ts: Option<unsafe extern "C" fn(*mut IbvCqEx) -> u64>,
    pub read_cvlan: Option<unsafe extern "C" fn(*mut IbvCqEx) -> u16>,
    pub read_flow_tag: Option<unsafe extern "C" fn(*mut IbvCqEx) -> u32>,
    /// The second argument is a `struct ibv_wc_tm_info *` (unused here).
    pub read_tm_info: Option<unsafe extern "C" fn(*mut IbvCqEx, *mut c_void)>,
    pub read_completion_wallclock_ns: Option<unsafe extern "C" fn(*mut IbvCqEx) -> u64>,
}

// ---------------------------------------------------------------------------
// Shared receive queues and work queues
// ---------------------------------------------------------------------------

/// `struct ibv_srq`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
#[allow(missing_docs)]
pub struct IbvSrq {
    pub context: *mut IbvContext,
    pub srq_context: *mut c_void,
    pub pd: *mut IbvPd,
    pub handle: u32,
    pub mutex: libc::pthread_mutex_t,
    pub cond: libc::pthread_cond_t,
    pub events_completed: u32,
}

/// `struct ibv_srq_attr`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
#[allow(missing_docs)]
pub struct IbvSrqAttr {
    pub max_wr: u32,
    pub max_sge: u32,
    pub srq_limit: u32,
}

/// `struct ibv_srq_init_attr`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
#[allow(missing_docs)]
pub struct IbvSrqInitAttr {
    pub srq_context: *mut c_void,
    pub attr: IbvSrqAttr,
}

/// `struct ibv_tm_cap`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
#[allow(missing_docs)]
pub struct IbvTmCap {
    pub max_num_tags: u32,
    pub max_ops: u32,
}

/// `struct ibv_srq_init_attr_ex`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
#[allow(missing_docs)]
pub struct IbvSrqInitAttrEx {
    pub srq_context: *mut c_void,
    pub attr: IbvSrqAttr,
    /// `enum ibv_srq_init_attr_mask` bits.
    pub comp_mask: u32,
    /// `enum ibv_srq_type`.
    pub srq_type: c_uint,
    pub pd: *mut IbvPd,
    pub xrcd: *mut IbvXrcd,
    pub cq: *mut IbvCq,
    pub tm_cap: IbvTmCap,
}

/// `struct ibv_wq`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
#[allow(missing_docs)]
pub struct IbvWq {
    pub context: *mut IbvContext,
    pub wq_context: *mut c_void,
    pub pd: *mut IbvPd,
    pub cq: *mut IbvCq,
    pub wq_num: u32,
    pub handle: u32,
    /// `enum ibv_wq_state`.
    pub state: c_uint,
    /// `enum ibv_wq_type`.
    pub wq_type: c_uint,
    pub post_recv: Option<unsafe extern "C" fn(*mut IbvWq, *mut IbvRecvWr, *mut *mut IbvRecvWr) -> c_int>,
    pub mutex: libc::pthread_mutex_t,
    pub cond: libc::pthread_cond_t,
    pub events_completed: u32,
    pub comp_mask: u32,
}

// ---------------------------------------------------------------------------
// Queue pairs
// ---------------------------------------------------------------------------

/// `struct ibv_qp`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
#[allow(missing_docs)]
pub struct IbvQp {
    pub context: *mut IbvContext,
    pub qp_context: *mut c_void,
    pub pd: *mut IbvPd,
    pub send_cq: *mut IbvCq,
    pub recv_cq: *mut IbvCq,
    pub srq: *mut IbvSrq,
    pub handle: u32,
    pub qp_num: u32,
    /// `enum ibv_qp_state`.
    pub state: c_uint,
    /// `enum ibv_qp_type`.
    pub qp_type: c_uint,
    pub mutex: libc::pthread_mutex_t,
    pub cond: libc::pthread_cond_t,
    pub events_completed: u32,
}

/// `struct ibv_qp_cap`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
#[allow(missing_docs)]
pub struct IbvQpCap {
    pub max_send_wr: u32,
    pub max_recv_wr: u32,
    pub max_send_sge: u32,
    pub max_recv_sge: u32,
    pub max_inline_data: u32,
}

/// `struct ibv_qp_init_attr`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
#[allow(missing_docs)]
pub struct IbvQpInitAttr {
    pub qp_context: *mut c_void,
    pub send_cq: *mut IbvCq,
    pub recv_cq: *mut IbvCq,
    pub srq: *mut IbvSrq,
    pub cap: IbvQpCap,
    /// `enum ibv_qp_type`.
    pub qp_type: c_uint,
    pub sq_sig_all: c_int,
}

/// `struct ibv_rx_hash_conf`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
#[allow(missing_docs)]
pub struct IbvRxHashConf {
    pub rx_hash_function: u8,
    pub rx_hash_key_len: u8,
    pub rx_hash_key: *mut u8,
    pub rx_hash_fields_mask: u64,
}

/// `struct ibv_qp_init_attr_ex`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
#[allow(missing_docs)]
pub struct IbvQpInitAttrEx {
    pub qp_context: *mut c_void,
    pub send_cq: *mut IbvCq,
    pub recv_cq: *mut IbvCq,
    pub srq: *mut IbvSrq,
    pub cap: IbvQpCap,
    /// `enum ibv_qp_type`.
    pub qp_type: c_uint,
    pub sq_sig_all: c_int,
    /// `enum ibv_qp_init_attr_mask` bits.
    pub comp_mask: u32,
    pub pd: *mut IbvPd,
    pub xrcd: *mut IbvXrcd,
    /// `enum ibv_qp_create_flags` bits.
    pub create_flags: u32,
    pub max_tso_header: u16,
    /// `struct ibv_rwq_ind_table *` (not mirrored).
    pub rwq_ind_tbl: *mut c_void,
    pub rx_hash_conf: IbvRxHashConf,
    pub source_qpn: u32,
    /// `enum ibv_qp_create_send_ops_flags` bits.
    pub send_ops_flags: u64,
}

impl IbvQpInitAttrEx {
    /// The fields it shares with `ibv_qp_init_attr` (its first seven; not a
    /// prefix in memory: `comp_mask` fills what is padding there).
    pub fn base(&self) -> IbvQpInitAttr {
        IbvQpInitAttr {
            qp_context: self.qp_context,
            send_cq: self.send_cq,
            recv_cq: self.recv_cq,
            srq: self.srq,
            cap: self.cap,
            qp_type: self.qp_type,
            sq_sig_all: self.sq_sig_all,
        }
    }
}

/// `struct ibv_qp_attr`.
#[repr(C)]
#[derive(Clone, Copy)]
#[allow(missing_docs)]
pub struct IbvQpAttr {
    /// `enum ibv_qp_state`.
    pub qp_state: c_uint,
    /// `enum ibv_qp_state`.
    pub cur_qp_state: c_uint,
    /// `enum ibv_mtu`.
    pub path_mtu: c_uint,
    /// `enum ibv_mig_state`.
    pub path_mig_state: c_uint,
    pub qkey: u32,
    pub rq_psn: u32,
    pub sq_psn: u32,
    pub dest_qp_num: u32,
    /// `enum ibv_access_flags` bits.
    pub qp_access_flags: c_uint,
    pub cap: IbvQpCap,
    pub ah_attr: IbvAhAttr,
    pub alt_ah_attr: IbvAhAttr,
    pub pkey_index: u16,
    pub alt_pkey_index: u16,
    pub en_sqd_async_notify: u8,
    pub sq_draining: u8,
    pub max_rd_atomic: u8,
    pub max_dest_rd_atomic: u8,
    pub min_rnr_timer: u8,
    pub port_num: u8,
    pub timeout: u8,
    pub retry_cnt: u8,
    pub rnr_retry: u8,
    pub alt_port_num: u8,
    pub alt_timeout: u8,
    pub rate_limit: u32,
}

/// `struct ibv_data_buf`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
#[allow(missing_docs)]
pub struct IbvDataBuf {
    pub addr: *mut c_void,
    pub length: usize,
}

/// `struct ibv_qp_ex`: an `ibv_qp` followed by the work-request builder
/// callbacks of the `ibv_wr_*` inline API.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
#[allow(missing_docs)]
pub struct IbvQpEx {
    pub qp_base: IbvQp,
    pub comp_mask: u64,
    pub wr_id: u64,
    /// `enum ibv_send_flags` bits.
    pub wr_flags: c_uint,
    /// `(qp, rkey, remote_addr, compare, swap)`.
    pub wr_atomic_cmp_swp: Option<unsafe extern "C" fn(*mut IbvQpEx, u32, u64, u64, u64)>,
    /// `(qp, rkey, remote_addr, add)`.
    pub wr_atomic_fetch_add: Option<unsafe extern "C" fn(*mut IbvQpEx, u32, u64, u64)>,
    /// `(qp, mw, rkey, bind_info)`.
    pub wr_bind_mw: Option<unsafe extern "C" fn(*mut IbvQpEx, *mut IbvMw, u32, *const IbvMwBindInfo)>,
    /// `(qp, invalidate_rkey)`.
    pub wr_local_inv: Option<unsafe extern "C" fn(*mut IbvQpEx, u32)>,
    /// `(qp, rkey, remote_addr)`.
    pub wr_rdma_read: Option<unsafe extern "C" fn(*mut IbvQpEx, u32, u64)>,
    /// `(qp, rkey, remote_addr)`.
    pub wr_rdma_write: Option<unsafe extern "C" fn(*mut IbvQpEx, u32, u64)>,
    /// `(qp, rkey, remote_addr, imm_data /* __be32 */)`.
    pub wr_rdma_write_imm: Option<unsafe extern "C" fn(*mut IbvQpEx, u32, u64, u32)>,
    pub wr_send: Option<unsafe extern "C" fn(*mut IbvQpEx)>,
    /// `(qp, imm_data /* __be32 */)`.
    pub wr_send_imm: Option<unsafe extern "C" fn(*mut IbvQpEx, u32)>,
    /// `(qp, invalidate_rkey)`.
    pub wr_send_inv: Option<unsafe extern "C" fn(*mut IbvQpEx, u32)>,
    /// `(qp, hdr, hdr_sz, mss)`.
    pub wr_send_tso: Option<unsafe extern "C" fn(*mut IbvQpEx, *mut c_void, u16, u16)>,
    /// `(qp, ah, remote_qpn, remote_qkey)`.
    pub wr_set_ud_addr: Option<unsafe extern "C" fn(*mut IbvQpEx, *mut IbvAh, u32, u32)>,
    /// `(qp, remote_srqn)`.
    pub wr_set_xrc_srqn: Option<unsafe extern "C" fn(*mut IbvQpEx, u32)>,
    /// `(qp, addr, length)`.
    pub wr_set_inline_data: Option<unsafe extern "C" fn(*mut IbvQpEx, *mut c_void, usize)>,
    /// `(qp, num_buf, buf_list)`.
    pub wr_set_inline_data_list: Option<unsafe extern "C" fn(*mut IbvQpEx, usize, *const IbvDataBuf)>,
    /// `(qp, lkey, addr, length)`.
    pub wr_set_sge: Option<unsafe extern "C" fn(*mut IbvQpEx, u32, u64, u32)>,
    /// `(qp, num_sge, sg_list)`.
    pub wr_set_sge_list: Option<unsafe extern "C" fn(*mut IbvQpEx, usize, *const IbvSge)>,
    pub wr_start: Option<unsafe extern "C" fn(*mut IbvQpEx)>,
    pub wr_complete: Option<unsafe extern "C" fn(*mut IbvQpEx) -> c_int>,
    pub wr_abort: Option<unsafe extern "C" fn(*mut IbvQpEx)>,
    /// `(qp, rkey, remote_addr, atomic_wr /* 8 bytes */)`.
    pub wr_atomic_write: Option<unsafe extern "C" fn(*mut IbvQpEx, u32, u64, *const c_void)>,
}

/// rdma-core 45's `ibv_wr_flush`, the slot appended to `struct ibv_qp_ex`
/// right after `wr_atomic_write` (offset 352): `(qp, rkey, remote_addr,
/// len, type /* enum ibv_placement_type */, level /* enum
/// ibv_selectivity_level */)`. Programs built against rdma-core 44 never
/// read it.
pub type WrFlushFn = unsafe extern "C" fn(*mut IbvQpEx, u32, u64, usize, u8, u8);

/// Where rdma-core 56's headers put `uint32_t active_speed_ex`, appended
/// to `struct ibv_port_attr` (which becomes 56 bytes).
pub const PORT_ATTR_ACTIVE_SPEED_EX_OFFSET: usize = 52;
const _: () = assert!(size_of::<IbvPortAttr>() == PORT_ATTR_ACTIVE_SPEED_EX_OFFSET);

/// Where rdma-core 45 puts `wr_flush` in `struct ibv_qp_ex`.
pub const IBV_QP_EX_WR_FLUSH_OFFSET: usize = 352;
const _: () = assert!(size_of::<IbvQpEx>() == IBV_QP_EX_WR_FLUSH_OFFSET);

// ---------------------------------------------------------------------------
// What later headers added (rdma-core 56 and 65)
// ---------------------------------------------------------------------------

/// rdma-core 65's `struct ibv_mr_init_attr` (`ibv_reg_mr_ex`).
#[repr(C)]
#[derive(Debug, Clone, Copy)]
#[allow(missing_docs)]
pub struct IbvMrInitAttr {
    pub length: usize,
    pub access: c_int,
    /// `enum ibv_mr_init_attr_mask` bits: which fields below are set.
    pub comp_mask: u64,
    pub iova: u64,
    pub addr: *mut c_void,
    pub fd: c_int,
    pub fd_offset: u64,
    /// `struct ibv_dmah *`.
    pub dmah: *mut c_void,
    /// `struct ibv_buf *` (from `ibv_alloc_buf`).
    pub buf: *mut c_void,
}

/// rdma-core 65's `struct ibv_comp_cntr_caps`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
#[allow(missing_docs)]
pub struct IbvCompCntrCaps {
    pub max_value: u64,
    pub max_counters: u32,
    pub supported_qp_attach_ops: u32,
}

/// A member that a later rdma-core header has and rdma-core 44's lacks:
/// where it is in that header, for `tests/layout.rs` to check against the
/// distribution's own header.
#[derive(Clone, Copy)]
pub struct GrownField {
    /// The first rdma-core release of the Debian releases tested that has it.
    pub since: u32,
    /// Where it is in that release's header.
    pub layout: FieldLayout,
}

const fn grown(since: u32, strukt: &'static str, field: &'static str, offset: usize, size: usize) -> GrownField {
    GrownField { since, layout: FieldLayout { strukt, field, offset, size } }
}

/// What rdma-core 56's and 65's headers added to the structs softroce
/// reads or writes, and the structs 65 introduced, as softroce uses them.
pub const GROWN: &[GrownField] = &[
    grown(56, "ibv_port_attr", "active_speed_ex", PORT_ATTR_ACTIVE_SPEED_EX_OFFSET, 4),
    grown(56, "ibv_port_attr", "(sizeof)", 0, PORT_ATTR_ACTIVE_SPEED_EX_OFFSET + 4),
    grown(56, "ibv_qp_ex", "wr_flush", IBV_QP_EX_WR_FLUSH_OFFSET, 8),
    grown(56, "ibv_qp_ex", "(sizeof)", 0, IBV_QP_EX_WR_FLUSH_OFFSET + 8),
    grown(65, "ibv_mr_init_attr", "(sizeof)", 0, size_of::<IbvMrInitAttr>()),
    grown(65, "ibv_mr_init_attr", "length", offset_of!(IbvMrInitAttr, length), 8),
    grown(65, "ibv_mr_init_attr", "access", offset_of!(IbvMrInitAttr, access), 4),
    grown(65, "ibv_mr_init_attr", "comp_mask", offset_of!(IbvMrInitAttr, comp_mask), 8),
    grown(65, "ibv_mr_init_attr", "iova", offset_of!(IbvMrInitAttr, iova), 8),
    grown(65, "ibv_mr_init_attr", "addr", offset_of!(IbvMrInitAttr, addr), 8),
    grown(65, "ibv_mr_init_attr", "fd", offset_of!(IbvMrInitAttr, fd), 4),
    grown(65, "ibv_mr_init_attr", "fd_offset", offset_of!(IbvMrInitAttr, fd_offset), 8),
    grown(65, "ibv_mr_init_attr", "dmah", offset_of!(IbvMrInitAttr, dmah), 8),
    grown(65, "ibv_mr_init_attr", "buf", offset_of!(IbvMrInitAttr, buf), 8),
    grown(65, "ibv_comp_cntr_caps", "(sizeof)", 0, size_of::<IbvCompCntrCaps>()),
    grown(65, "ibv_comp_cntr_caps", "max_value", offset_of!(IbvCompCntrCaps, max_value), 8),
    grown(65, "ibv_comp_cntr_caps", "max_counters", offset_of!(IbvCompCntrCaps, max_counters), 4),
    grown(65, "ibv_comp_cntr_caps", "supported_qp_attach_ops", offset_of!(IbvCompCntrCaps, supported_qp_attach_ops), 4),
];

// ---------------------------------------------------------------------------
// Work requests
// ---------------------------------------------------------------------------

/// `struct ibv_sge`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
#[allow(missing_docs)]
pub struct IbvSge {
    pub addr: u64,
    pub length: u32,
    pub lkey: u32,
}

/// `struct ibv_recv_wr`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
#[allow(missing_docs)]
pub struct IbvRecvWr {
    pub wr_id: u64,
    pub next: *mut IbvRecvWr,
    pub sg_list: *mut IbvSge,
    pub num_sge: c_int,
}

/// `wr.rdma` of `struct ibv_send_wr`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
#[allow(missing_docs)]
pub struct IbvRdmaWr {
    pub remote_addr: u64,
    pub rkey: u32,
}
zero_struct!(IbvRdmaWr { remote_addr, rkey });

/// `wr.atomic` of `struct ibv_send_wr`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
#[allow(missing_docs)]
pub struct IbvAtomicWr {
    pub remote_addr: u64,
    pub compare_add: u64,
    pub swap: u64,
    pub rkey: u32,
}
zero_struct!(IbvAtomicWr { remote_addr, compare_add, swap, rkey });

/// `wr.ud` of `struct ibv_send_wr`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
#[allow(missing_docs)]
pub struct IbvUdWr {
    pub ah: *mut IbvAh,
    pub remote_qpn: u32,
    pub remote_qkey: u32,
}
zero_struct!(IbvUdWr { ah, remote_qpn, remote_qkey });

/// The `wr` union of `struct ibv_send_wr`.
#[repr(C)]
#[derive(Clone, Copy)]
#[allow(missing_docs)]
pub union IbvSendWrWr {
    pub rdma: IbvRdmaWr,
    pub atomic: IbvAtomicWr,
    pub ud: IbvUdWr,
}
zero_union!(IbvSendWrWr.atomic);

/// `qp_type.xrc` of `struct ibv_send_wr`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
#[allow(missing_docs)]
pub struct IbvXrcWr {
    pub remote_srqn: u32,
}
zero_struct!(IbvXrcWr { remote_srqn });

/// The `qp_type` union of `struct ibv_send_wr`.
#[repr(C)]
#[derive(Clone, Copy)]
#[allow(missing_docs)]
pub union IbvSendWrQpType {
    pub xrc: IbvXrcWr,
}
zero_union!(IbvSendWrQpType.xrc);

/// `bind_mw` of `struct ibv_send_wr`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
#[allow(missing_docs)]
pub struct IbvBindMwWr {
    pub mw: *mut IbvMw,
    pub rkey: u32,
    pub bind_info: IbvMwBindInfo,
}
zero_struct!(IbvBindMwWr { mw, rkey, bind_info });

/// `tso` of `struct ibv_send_wr`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
#[allow(missing_docs)]
pub struct IbvTsoWr {
    pub hdr: *mut c_void,
    pub hdr_sz: u16,
    pub mss: u16,
}
zero_struct!(IbvTsoWr { hdr, hdr_sz, mss });

/// The anonymous `bind_mw` / `tso` union of `struct ibv_send_wr`.
#[repr(C)]
#[derive(Clone, Copy)]
#[allow(missing_docs)]
pub union IbvSendWrBindMwTso {
    pub bind_mw: IbvBindMwWr,
    pub tso: IbvTsoWr,
}
zero_union!(IbvSendWrBindMwTso.bind_mw);

/// `struct ibv_send_wr`.
#[repr(C)]
#[derive(Clone, Copy)]
#[allow(missing_docs)]
pub struct IbvSendWr {
    pub wr_id: u64,
    pub next: *mut IbvSendWr,
    pub sg_list: *mut IbvSge,
    pub num_sge: c_int,
    /// `enum ibv_wr_opcode`.
    pub opcode: c_uint,
    /// `enum ibv_send_flags` bits.
    pub send_flags: c_uint,
    /// C's anonymous union `{ __be32 imm_data; uint32_t invalidate_rkey; }`,
    /// whose two members are the same `u32`: big-endian immediate data for
    /// the `*_WITH_IMM` opcodes, the rkey to invalidate (host order) for the
    /// `*_INV` ones.
    pub imm_data: u32,
    pub wr: IbvSendWrWr,
    pub qp_type: IbvSendWrQpType,
    /// C's anonymous union `{ bind_mw; tso; }`.
    pub bind_mw_tso: IbvSendWrBindMwTso,
}

// ---------------------------------------------------------------------------
// Asynchronous events
// ---------------------------------------------------------------------------

/// The `element` union of `struct ibv_async_event`.
#[repr(C)]
#[derive(Clone, Copy)]
#[allow(missing_docs)]
pub union IbvAsyncEventElement {
    pub cq: *mut IbvCq,
    pub qp: *mut IbvQp,
    pub srq: *mut IbvSrq,
    pub wq: *mut IbvWq,
    pub port_num: c_int,
}
zero_union!(IbvAsyncEventElement.cq);

/// `struct ibv_async_event`.
#[repr(C)]
#[derive(Clone, Copy)]
#[allow(missing_docs)]
pub struct IbvAsyncEvent {
    pub element: IbvAsyncEventElement,
    /// `enum ibv_event_type`.
    pub event_type: c_uint,
}

// ---------------------------------------------------------------------------
// Layout: compile-time assertions and the LAYOUT table
// ---------------------------------------------------------------------------

/// One measured member of a mirrored C struct (see [`LAYOUT`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FieldLayout {
    /// The C struct (or union) name, e.g. `"ibv_qp"`, `"verbs_context"`,
    /// `"ibv_gid"` (the one union).
    pub strukt: &'static str,
    /// The C member path as `offsetof` takes it, e.g. `"qp_num"` or
    /// `"wr.rdma.rkey"`; `"(sizeof)"` for the whole struct.
    pub field: &'static str,
    /// Byte offset in the struct (0 for `"(sizeof)"`).
    pub offset: usize,
    /// Size in bytes.
    pub size: usize,
}

/// The size of a struct field, named through a closure so that the field's
/// type need not be spelled out.
const fn field_size<T, F>(_: fn(&T) -> &F) -> usize {
    size_of::<F>()
}

/// For each mirrored C type: asserts its size and each member's offset and
/// size at compile time (against the pahole numbers written here), implements
/// [`Zero`] and `Default` for structs (the fields lists, `renamed` included,
/// must name every field: the struct literal enforces it), and adds the
/// measured values to [`LAYOUT`].
///
/// - `field @ offset / size`: a Rust field named as in C.
/// - `renamed { "c_name" = rust_field @ offset / size }`: a Rust field whose
///   C name differs (a keyword, not snake case, or an anonymous C union
///   recorded under its first member, whose offset and size it shares).
/// - `paths { "c.path": Type = rust.path @ offset / size }`: nested members
///   (through sub-structs and unions), recorded under their C path; `Type`
///   gives the member's size (callback slots are written as `usize`), as a
///   union member cannot be borrowed in safe code to infer it.
macro_rules! layout {
    (@zero struct $rs:ident { $($f:ident)* }) => {
        impl Zero for $rs {
            const ZERO: Self = Self { $($f: Zero::ZERO),* };
        }
        impl Default for $rs {
            fn default() -> Self {
                Self::ZERO
            }
        }
    };
    (@zero union $rs:ident { $($f:ident)* }) => {};
    ($(
        $kind:ident $rs:ident = $c:literal ($size:literal) {
            $($f:ident @ $fo:literal / $fs:literal),* $(,)?
        }
        $(renamed { $($rc:literal = $rf:ident @ $ro:literal / $rsz:literal),* $(,)? })?
        $(paths { $($pc:literal : $pt:ty = $($pp:ident).+ @ $po:literal / $ps:literal),* $(,)? })?
        ;
    )*) => {
        $(
            layout!(@zero $kind $rs { $($f)* $($($rf)*)? });
            const _: () = {
                assert!(size_of::<$rs>() == $size, concat!("sizeof(", $c, ")"));
                $(
                    assert!(offset_of!($rs, $f) == $fo, concat!("offsetof(", $c, ", ", stringify!($f), ")"));
                    assert!(field_size(|s: &$rs| &s.$f) == $fs, concat!("sizeof ", $c, ".", stringify!($f)));
                )*
                $($(
                    assert!(offset_of!($rs, $rf) == $ro, concat!("offsetof(", $c, ", ", $rc, ")"));
                    assert!(field_size(|s: &$rs| &s.$rf) == $rsz, concat!("sizeof ", $c, ".", $rc));
                )*)?
                $($(
                    assert!(offset_of!($rs, $($pp).+) == $po, concat!("offsetof(", $c, ", ", $pc, ")"));
                    assert!(size_of::<$pt>() == $ps, concat!("sizeof ", $c, ".", $pc));
                )*)?
            };
        )*

        /// Offset and size of every mirrored member, plus a `"(sizeof)"`
        /// entry per struct, as the Rust mirrors lay them out (asserted at
        /// compile time to equal rdma-core 44's x86_64 layout;
        /// `tests/layout.rs` checks them against the installed header).
        pub const LAYOUT: &[FieldLayout] = &[
            $(
                FieldLayout { strukt: $c, field: "(sizeof)", offset: 0, size: size_of::<$rs>() },
                $(
                    FieldLayout {
                        strukt: $c,
                        field: stringify!($f),
                        offset: offset_of!($rs, $f),
                        size: field_size(|s: &$rs| &s.$f),
                    },
                )*
                $($(
                    FieldLayout {
                        strukt: $c,
                        field: $rc,
                        offset: offset_of!($rs, $rf),
                        size: field_size(|s: &$rs| &s.$rf),
                    },
                )*)?
                $($(
                    FieldLayout { strukt: $c, field: $pc, offset: offset_of!($rs, $($pp).+), size: size_of::<$pt>() },
                )*)?
            )*
        ];
    };
}

layout! {
    struct IbvDevice = "ibv_device" (664) {
        _ops @ 0 / 16, node_type @ 16 / 4, transport_type @ 20 / 4, name @ 24 / 64, dev_name @ 88 / 64,
        dev_path @ 152 / 256, ibdev_path @ 408 / 256,
    } paths {
        "_ops._dummy1": usize = _ops._dummy1 @ 0 / 8,
        "_ops._dummy2": usize = _ops._dummy2 @ 8 / 8,
    };

    struct IbvContextOps = "ibv_context_ops" (256) {
        _compat_query_device @ 0 / 8, _compat_query_port @ 8 / 8, _compat_alloc_pd @ 16 / 8,
        _compat_dealloc_pd @ 24 / 8, _compat_reg_mr @ 32 / 8, _compat_rereg_mr @ 40 / 8, _compat_dereg_mr @ 48 / 8,
        alloc_mw @ 56 / 8, bind_mw @ 64 / 8, dealloc_mw @ 72 / 8, _compat_create_cq @ 80 / 8, poll_cq @ 88 / 8,
        req_notify_cq @ 96 / 8, _compat_cq_event @ 104 / 8, _compat_resize_cq @ 112 / 8,
        _compat_destroy_cq @ 120 / 8, _compat_create_srq @ 128 / 8, _compat_modify_srq @ 136 / 8,
        _compat_query_srq @ 144 / 8, _compat_destroy_srq @ 152 / 8, post_srq_recv @ 160 / 8,
        _compat_create_qp @ 168 / 8, _compat_query_qp @ 176 / 8, _compat_modify_qp @ 184 / 8,
        _compat_destroy_qp @ 192 / 8, post_send @ 200 / 8, post_recv @ 208 / 8, _compat_create_ah @ 216 / 8,
        _compat_destroy_ah @ 224 / 8, _compat_attach_mcast @ 232 / 8, _compat_detach_mcast @ 240 / 8,
        _compat_async_event @ 248 / 8,
    };

    struct IbvContext = "ibv_context" (328) {
        device @ 0 / 8, ops @ 8 / 256, cmd_fd @ 264 / 4, async_fd @ 268 / 4, num_comp_vectors @ 272 / 4,
        mutex @ 280 / 40, abi_compat @ 320 / 8,
    } paths {
        "ops.alloc_mw": usize = ops.alloc_mw @ 64 / 8,
        "ops.bind_mw": usize = ops.bind_mw @ 72 / 8,
        "ops.dealloc_mw": usize = ops.dealloc_mw @ 80 / 8,
        "ops.poll_cq": usize = ops.poll_cq @ 96 / 8,
        "ops.req_notify_cq": usize = ops.req_notify_cq @ 104 / 8,
        "ops.post_srq_recv": usize = ops.post_srq_recv @ 168 / 8,
        "ops.post_send": usize = ops.post_send @ 208 / 8,
        "ops.post_recv": usize = ops.post_recv @ 216 / 8,
    };

    struct VerbsContext = "verbs_context" (648) {
        query_port @ 0 / 8, advise_mr @ 8 / 8, alloc_null_mr @ 16 / 8, read_counters @ 24 / 8,
        attach_counters_point_flow @ 32 / 8, create_counters @ 40 / 8, destroy_counters @ 48 / 8,
        reg_dm_mr @ 56 / 8, alloc_dm @ 64 / 8, free_dm @ 72 / 8, modify_flow_action_esp @ 80 / 8,
        destroy_flow_action @ 88 / 8, create_flow_action_esp @ 96 / 8, modify_qp_rate_limit @ 104 / 8,
        alloc_parent_domain @ 112 / 8, dealloc_td @ 120 / 8, alloc_td @ 128 / 8, modify_cq @ 136 / 8,
        post_srq_ops @ 144 / 8, destroy_rwq_ind_table @ 152 / 8, create_rwq_ind_table @ 160 / 8,
        destroy_wq @ 168 / 8, modify_wq @ 176 / 8, create_wq @ 184 / 8, query_rt_values @ 192 / 8,
        create_cq_ex @ 200 / 8, query_device_ex @ 216 / 8, ibv_destroy_flow @ 224 / 8,
        ibv_create_flow @ 240 / 8, open_qp @ 256 / 8, create_qp_ex @ 264 / 8, get_srq_num @ 272 / 8,
        create_srq_ex @ 280 / 8, open_xrcd @ 288 / 8, close_xrcd @ 296 / 8, sz @ 312 / 8, context @ 320 / 328,
    } renamed {
        "priv" = priv_ @ 208 / 8,
        "ABI_placeholder2" = abi_placeholder2 @ 232 / 8,
        "ABI_placeholder1" = abi_placeholder1 @ 248 / 8,
        "_ABI_placeholder3" = _abi_placeholder3 @ 304 / 8,
    } paths {
        "context.device": *mut IbvDevice = context.device @ 320 / 8,
        "context.ops": IbvContextOps = context.ops @ 328 / 256,
        "context.ops.post_send": usize = context.ops.post_send @ 528 / 8,
        "context.cmd_fd": c_int = context.cmd_fd @ 584 / 4,
        "context.abi_compat": *mut c_void = context.abi_compat @ 640 / 8,
    };

    struct IbvPd = "ibv_pd" (16) { context @ 0 / 8, handle @ 8 / 4 };

    struct IbvXrcd = "ibv_xrcd" (8) { context @ 0 / 8 };

    struct IbvMr = "ibv_mr" (48) {
        context @ 0 / 8, pd @ 8 / 8, addr @ 16 / 8, length @ 24 / 8, handle @ 32 / 4, lkey @ 36 / 4, rkey @ 40 / 4,
    };

    struct IbvMw = "ibv_mw" (32) {
        context @ 0 / 8, pd @ 8 / 8, rkey @ 16 / 4, handle @ 20 / 4,
    } renamed {
        "type" = type_ @ 24 / 4,
    };

    struct IbvMwBindInfo = "ibv_mw_bind_info" (32) {
        mr @ 0 / 8, addr @ 8 / 8, length @ 16 / 8, mw_access_flags @ 24 / 4,
    };

    struct IbvMwBind = "ibv_mw_bind" (48) {
        wr_id @ 0 / 8, send_flags @ 8 / 4, bind_info @ 16 / 32,
    } paths {
        "bind_info.mr": *mut IbvMr = bind_info.mr @ 16 / 8,
        "bind_info.addr": u64 = bind_info.addr @ 24 / 8,
        "bind_info.length": u64 = bind_info.length @ 32 / 8,
        "bind_info.mw_access_flags": c_uint = bind_info.mw_access_flags @ 40 / 4,
    };

    struct IbvAh = "ibv_ah" (24) { context @ 0 / 8, pd @ 8 / 8, handle @ 16 / 4 };

    struct IbvCompChannel = "ibv_comp_channel" (16) { context @ 0 / 8, fd @ 8 / 4, refcnt @ 12 / 4 };

    union IbvGid = "ibv_gid" (16) {} paths {
        "raw": [u8; 16] = raw @ 0 / 16,
        "global": IbvGidGlobal = global @ 0 / 16,
        "global.subnet_prefix": u64 = global.subnet_prefix @ 0 / 8,
        "global.interface_id": u64 = global.interface_id @ 8 / 8,
    };

    struct IbvGidEntry = "ibv_gid_entry" (32) {
        gid @ 0 / 16, gid_index @ 16 / 4, port_num @ 20 / 4, gid_type @ 24 / 4, ndev_ifindex @ 28 / 4,
    } paths {
        "gid.raw": [u8; 16] = gid.raw @ 0 / 16,
    };

    struct IbvGlobalRoute = "ibv_global_route" (24) {
        dgid @ 0 / 16, flow_label @ 16 / 4, sgid_index @ 20 / 1, hop_limit @ 21 / 1, traffic_class @ 22 / 1,
    } paths {
        "dgid.raw": [u8; 16] = dgid.raw @ 0 / 16,
        "dgid.global.subnet_prefix": u64 = dgid.global.subnet_prefix @ 0 / 8,
        "dgid.global.interface_id": u64 = dgid.global.interface_id @ 8 / 8,
    };

    struct IbvGrh = "ibv_grh" (40) {
        version_tclass_flow @ 0 / 4, paylen @ 4 / 2, next_hdr @ 6 / 1, hop_limit @ 7 / 1, sgid @ 8 / 16,
        dgid @ 24 / 16,
    };

    struct IbvAhAttr = "ibv_ah_attr" (32) {
        grh @ 0 / 24, dlid @ 24 / 2, sl @ 26 / 1, src_path_bits @ 27 / 1, static_rate @ 28 / 1,
        is_global @ 29 / 1, port_num @ 30 / 1,
    } paths {
        "grh.dgid": IbvGid = grh.dgid @ 0 / 16,
        "grh.dgid.raw": [u8; 16] = grh.dgid.raw @ 0 / 16,
        "grh.flow_label": u32 = grh.flow_label @ 16 / 4,
        "grh.sgid_index": u8 = grh.sgid_index @ 20 / 1,
        "grh.hop_limit": u8 = grh.hop_limit @ 21 / 1,
        "grh.traffic_class": u8 = grh.traffic_class @ 22 / 1,
    };

    struct IbvDeviceAttr = "ibv_device_attr" (232) {
        fw_ver @ 0 / 64, node_guid @ 64 / 8, sys_image_guid @ 72 / 8, max_mr_size @ 80 / 8,
        page_size_cap @ 88 / 8, vendor_id @ 96 / 4, vendor_part_id @ 100 / 4, hw_ver @ 104 / 4,
        max_qp @ 108 / 4, max_qp_wr @ 112 / 4, device_cap_flags @ 116 / 4, max_sge @ 120 / 4,
        max_sge_rd @ 124 / 4, max_cq @ 128 / 4, max_cqe @ 132 / 4, max_mr @ 136 / 4, max_pd @ 140 / 4,
        max_qp_rd_atom @ 144 / 4, max_ee_rd_atom @ 148 / 4, max_res_rd_atom @ 152 / 4,
        max_qp_init_rd_atom @ 156 / 4, max_ee_init_rd_atom @ 160 / 4, atomic_cap @ 164 / 4, max_ee @ 168 / 4,
        max_rdd @ 172 / 4, max_mw @ 176 / 4, max_raw_ipv6_qp @ 180 / 4, max_raw_ethy_qp @ 184 / 4,
        max_mcast_grp @ 188 / 4, max_mcast_qp_attach @ 192 / 4, max_total_mcast_qp_attach @ 196 / 4,
        max_ah @ 200 / 4, max_fmr @ 204 / 4, max_map_per_fmr @ 208 / 4, max_srq @ 212 / 4,
        max_srq_wr @ 216 / 4, max_srq_sge @ 220 / 4, max_pkeys @ 224 / 2, local_ca_ack_delay @ 226 / 1,
        phys_port_cnt @ 227 / 1,
    };

    struct IbvQueryDeviceExInput = "ibv_query_device_ex_input" (4) { comp_mask @ 0 / 4 };

    struct IbvOdpCaps = "ibv_odp_caps" (24) {
        general_caps @ 0 / 8, per_transport_caps @ 8 / 12,
    } paths {
        "per_transport_caps.rc_odp_caps": u32 = per_transport_caps.rc_odp_caps @ 8 / 4,
        "per_transport_caps.uc_odp_caps": u32 = per_transport_caps.uc_odp_caps @ 12 / 4,
        "per_transport_caps.ud_odp_caps": u32 = per_transport_caps.ud_odp_caps @ 16 / 4,
    };

    struct IbvTsoCaps = "ibv_tso_caps" (8) { max_tso @ 0 / 4, supported_qpts @ 4 / 4 };

    struct IbvRssCaps = "ibv_rss_caps" (32) {
        supported_qpts @ 0 / 4, max_rwq_indirection_tables @ 4 / 4, max_rwq_indirection_table_size @ 8 / 4,
        rx_hash_fields_mask @ 16 / 8, rx_hash_function @ 24 / 1,
    };

    struct IbvPacketPacingCaps = "ibv_packet_pacing_caps" (12) {
        qp_rate_limit_min @ 0 / 4, qp_rate_limit_max @ 4 / 4, supported_qpts @ 8 / 4,
    };

    struct IbvTmCaps = "ibv_tm_caps" (20) {
        max_rndv_hdr_size @ 0 / 4, max_num_tags @ 4 / 4, flags @ 8 / 4, max_ops @ 12 / 4, max_sge @ 16 / 4,
    };

    struct IbvCqModerationCaps = "ibv_cq_moderation_caps" (4) { max_cq_count @ 0 / 2, max_cq_period @ 2 / 2 };

    struct IbvPciAtomicCaps = "ibv_pci_atomic_caps" (6) { fetch_add @ 0 / 2, swap @ 2 / 2, compare_swap @ 4 / 2 };

    struct IbvDeviceAttrEx = "ibv_device_attr_ex" (400) {
        orig_attr @ 0 / 232, comp_mask @ 232 / 4, odp_caps @ 240 / 24, completion_timestamp_mask @ 264 / 8,
        hca_core_clock @ 272 / 8, device_cap_flags_ex @ 280 / 8, tso_caps @ 288 / 8, rss_caps @ 296 / 32,
        max_wq_type_rq @ 328 / 4, packet_pacing_caps @ 332 / 12, raw_packet_caps @ 344 / 4, tm_caps @ 348 / 20,
        cq_mod_caps @ 368 / 4, max_dm_size @ 376 / 8, pci_atomic_caps @ 384 / 6, xrc_odp_caps @ 392 / 4,
        phys_port_cnt_ex @ 396 / 4,
    } paths {
        "orig_attr.fw_ver": [c_char; 64] = orig_attr.fw_ver @ 0 / 64,
        "orig_attr.max_qp": c_int = orig_attr.max_qp @ 108 / 4,
        "orig_attr.device_cap_flags": c_uint = orig_attr.device_cap_flags @ 116 / 4,
        "orig_attr.phys_port_cnt": u8 = orig_attr.phys_port_cnt @ 227 / 1,
        "odp_caps.general_caps": u64 = odp_caps.general_caps @ 240 / 8,
        "odp_caps.per_transport_caps.rc_odp_caps": u32 = odp_caps.per_transport_caps.rc_odp_caps @ 248 / 4,
        "tso_caps.max_tso": u32 = tso_caps.max_tso @ 288 / 4,
        "rss_caps.rx_hash_fields_mask": u64 = rss_caps.rx_hash_fields_mask @ 312 / 8,
        "tm_caps.max_num_tags": u32 = tm_caps.max_num_tags @ 352 / 4,
        "cq_mod_caps.max_cq_period": u16 = cq_mod_caps.max_cq_period @ 370 / 2,
        "pci_atomic_caps.compare_swap": u16 = pci_atomic_caps.compare_swap @ 388 / 2,
    };

    struct IbvPortAttr = "ibv_port_attr" (52) {
        state @ 0 / 4, max_mtu @ 4 / 4, active_mtu @ 8 / 4, gid_tbl_len @ 12 / 4, port_cap_flags @ 16 / 4,
        max_msg_sz @ 20 / 4, bad_pkey_cntr @ 24 / 4, qkey_viol_cntr @ 28 / 4, pkey_tbl_len @ 32 / 2,
        lid @ 34 / 2, sm_lid @ 36 / 2, lmc @ 38 / 1, max_vl_num @ 39 / 1, sm_sl @ 40 / 1,
        subnet_timeout @ 41 / 1, init_type_reply @ 42 / 1, active_width @ 43 / 1, active_speed @ 44 / 1,
        phys_state @ 45 / 1, link_layer @ 46 / 1, flags @ 47 / 1, port_cap_flags2 @ 48 / 2,
    };

    struct IbvValuesEx = "ibv_values_ex" (24) {
        comp_mask @ 0 / 4, raw_clock @ 8 / 16,
    } paths {
        "raw_clock.tv_sec": i64 = raw_clock.tv_sec @ 8 / 8,
        "raw_clock.tv_nsec": i64 = raw_clock.tv_nsec @ 16 / 8,
    };

    struct IbvCq = "ibv_cq" (128) {
        context @ 0 / 8, channel @ 8 / 8, cq_context @ 16 / 8, handle @ 24 / 4, cqe @ 28 / 4, mutex @ 32 / 40,
        cond @ 72 / 48, comp_events_completed @ 120 / 4, async_events_completed @ 124 / 4,
    };

    struct IbvWc = "ibv_wc" (48) {
        wr_id @ 0 / 8, status @ 8 / 4, opcode @ 12 / 4, vendor_err @ 16 / 4, byte_len @ 20 / 4,
        imm_data @ 24 / 4, qp_num @ 28 / 4, src_qp @ 32 / 4, wc_flags @ 36 / 4, pkey_index @ 40 / 2, slid @ 42 / 2,
        sl @ 44 / 1, dlid_path_bits @ 45 / 1,
    } paths {
        "invalidated_rkey": u32 = imm_data @ 24 / 4,
    };

    struct IbvPollCqAttr = "ibv_poll_cq_attr" (4) { comp_mask @ 0 / 4 };

    struct IbvModerateCq = "ibv_moderate_cq" (4) { cq_count @ 0 / 2, cq_period @ 2 / 2 };

    struct IbvModifyCqAttr = "ibv_modify_cq_attr" (8) { attr_mask @ 0 / 4, moderate @ 4 / 4 };

    struct IbvCqInitAttrEx = "ibv_cq_init_attr_ex" (56) {
        cqe @ 0 / 4, cq_context @ 8 / 8, channel @ 16 / 8, comp_vector @ 24 / 4, wc_flags @ 32 / 8,
        comp_mask @ 40 / 4, flags @ 44 / 4, parent_domain @ 48 / 8,
    };

    struct IbvCqEx = "ibv_cq_ex" (288) {
        context @ 0 / 8, channel @ 8 / 8, cq_context @ 16 / 8, handle @ 24 / 4, cqe @ 28 / 4, mutex @ 32 / 40,
        cond @ 72 / 48, comp_events_completed @ 120 / 4, async_events_completed @ 124 / 4, comp_mask @ 128 / 4,
        status @ 132 / 4, wr_id @ 136 / 8, start_poll @ 144 / 8, next_poll @ 152 / 8, end_poll @ 160 / 8,
        read_opcode @ 168 / 8, read_vendor_err @ 176 / 8, read_byte_len @ 184 / 8, read_imm_data @ 192 / 8,
        read_qp_num @ 200 / 8, read_src_qp @ 208 / 8, read_wc_flags @ 216 / 8, read_slid @ 224 / 8,
        read_sl @ 232 / 8, read_dlid_path_bits @ 240 / 8, read_completion_ts @ 248 / 8, read_cvlan @ 256 / 8,
        read_flow_tag @ 264 / 8, read_tm_info @ 272 / 8, read_completion_wallclock_ns @ 280 / 8,
    };

    struct IbvSrq = "ibv_srq" (128) {
        context @ 0 / 8, srq_context @ 8 / 8, pd @ 16 / 8, handle @ 24 / 4, mutex @ 32 / 40, cond @ 72 / 48,
        events_completed @ 120 / 4,
    };

    struct IbvSrqAttr = "ibv_srq_attr" (12) { max_wr @ 0 / 4, max_sge @ 4 / 4, srq_limit @ 8 / 4 };

    struct IbvSrqInitAttr = "ibv_srq_init_attr" (24) {
        srq_context @ 0 / 8, attr @ 8 / 12,
    } paths {
        "attr.max_wr": u32 = attr.max_wr @ 8 / 4,
        "attr.max_sge": u32 = attr.max_sge @ 12 / 4,
        "attr.srq_limit": u32 = attr.srq_limit @ 16 / 4,
    };

    struct IbvTmCap = "ibv_tm_cap" (8) { max_num_tags @ 0 / 4, max_ops @ 4 / 4 };

    struct IbvSrqInitAttrEx = "ibv_srq_init_attr_ex" (64) {
        srq_context @ 0 / 8, attr @ 8 / 12, comp_mask @ 20 / 4, srq_type @ 24 / 4, pd @ 32 / 8, xrcd @ 40 / 8,
        cq @ 48 / 8, tm_cap @ 56 / 8,
    } paths {
        "attr.max_wr": u32 = attr.max_wr @ 8 / 4,
        "attr.srq_limit": u32 = attr.srq_limit @ 16 / 4,
        "tm_cap.max_num_tags": u32 = tm_cap.max_num_tags @ 56 / 4,
        "tm_cap.max_ops": u32 = tm_cap.max_ops @ 60 / 4,
    };

    struct IbvWq = "ibv_wq" (152) {
        context @ 0 / 8, wq_context @ 8 / 8, pd @ 16 / 8, cq @ 24 / 8, wq_num @ 32 / 4, handle @ 36 / 4,
        state @ 40 / 4, wq_type @ 44 / 4, post_recv @ 48 / 8, mutex @ 56 / 40, cond @ 96 / 48,
        events_completed @ 144 / 4, comp_mask @ 148 / 4,
    };

    struct IbvQp = "ibv_qp" (160) {
        context @ 0 / 8, qp_context @ 8 / 8, pd @ 16 / 8, send_cq @ 24 / 8, recv_cq @ 32 / 8, srq @ 40 / 8,
        handle @ 48 / 4, qp_num @ 52 / 4, state @ 56 / 4, qp_type @ 60 / 4, mutex @ 64 / 40, cond @ 104 / 48,
        events_completed @ 152 / 4,
    };

    struct IbvQpCap = "ibv_qp_cap" (20) {
        max_send_wr @ 0 / 4, max_recv_wr @ 4 / 4, max_send_sge @ 8 / 4, max_recv_sge @ 12 / 4,
        max_inline_data @ 16 / 4,
    };

    struct IbvQpInitAttr = "ibv_qp_init_attr" (64) {
        qp_context @ 0 / 8, send_cq @ 8 / 8, recv_cq @ 16 / 8, srq @ 24 / 8, cap @ 32 / 20, qp_type @ 52 / 4,
        sq_sig_all @ 56 / 4,
    } paths {
        "cap.max_send_wr": u32 = cap.max_send_wr @ 32 / 4,
        "cap.max_inline_data": u32 = cap.max_inline_data @ 48 / 4,
    };

    struct IbvRxHashConf = "ibv_rx_hash_conf" (24) {
        rx_hash_function @ 0 / 1, rx_hash_key_len @ 1 / 1, rx_hash_key @ 8 / 8, rx_hash_fields_mask @ 16 / 8,
    };

    struct IbvQpInitAttrEx = "ibv_qp_init_attr_ex" (136) {
        qp_context @ 0 / 8, send_cq @ 8 / 8, recv_cq @ 16 / 8, srq @ 24 / 8, cap @ 32 / 20, qp_type @ 52 / 4,
        sq_sig_all @ 56 / 4, comp_mask @ 60 / 4, pd @ 64 / 8, xrcd @ 72 / 8, create_flags @ 80 / 4,
        max_tso_header @ 84 / 2, rwq_ind_tbl @ 88 / 8, rx_hash_conf @ 96 / 24, source_qpn @ 120 / 4,
        send_ops_flags @ 128 / 8,
    } paths {
        "cap.max_send_wr": u32 = cap.max_send_wr @ 32 / 4,
        "cap.max_inline_data": u32 = cap.max_inline_data @ 48 / 4,
        "rx_hash_conf.rx_hash_key": *mut u8 = rx_hash_conf.rx_hash_key @ 104 / 8,
        "rx_hash_conf.rx_hash_fields_mask": u64 = rx_hash_conf.rx_hash_fields_mask @ 112 / 8,
    };

    struct IbvQpAttr = "ibv_qp_attr" (144) {
        qp_state @ 0 / 4, cur_qp_state @ 4 / 4, path_mtu @ 8 / 4, path_mig_state @ 12 / 4, qkey @ 16 / 4,
        rq_psn @ 20 / 4, sq_psn @ 24 / 4, dest_qp_num @ 28 / 4, qp_access_flags @ 32 / 4, cap @ 36 / 20,
        ah_attr @ 56 / 32, alt_ah_attr @ 88 / 32, pkey_index @ 120 / 2, alt_pkey_index @ 122 / 2,
        en_sqd_async_notify @ 124 / 1, sq_draining @ 125 / 1, max_rd_atomic @ 126 / 1,
        max_dest_rd_atomic @ 127 / 1, min_rnr_timer @ 128 / 1, port_num @ 129 / 1, timeout @ 130 / 1,
        retry_cnt @ 131 / 1, rnr_retry @ 132 / 1, alt_port_num @ 133 / 1, alt_timeout @ 134 / 1,
        rate_limit @ 136 / 4,
    } paths {
        "cap.max_send_wr": u32 = cap.max_send_wr @ 36 / 4,
        "cap.max_recv_wr": u32 = cap.max_recv_wr @ 40 / 4,
        "cap.max_send_sge": u32 = cap.max_send_sge @ 44 / 4,
        "cap.max_recv_sge": u32 = cap.max_recv_sge @ 48 / 4,
        "cap.max_inline_data": u32 = cap.max_inline_data @ 52 / 4,
        "ah_attr.grh": IbvGlobalRoute = ah_attr.grh @ 56 / 24,
        "ah_attr.grh.dgid": IbvGid = ah_attr.grh.dgid @ 56 / 16,
        "ah_attr.grh.flow_label": u32 = ah_attr.grh.flow_label @ 72 / 4,
        "ah_attr.grh.sgid_index": u8 = ah_attr.grh.sgid_index @ 76 / 1,
        "ah_attr.grh.hop_limit": u8 = ah_attr.grh.hop_limit @ 77 / 1,
        "ah_attr.grh.traffic_class": u8 = ah_attr.grh.traffic_class @ 78 / 1,
        "ah_attr.dlid": u16 = ah_attr.dlid @ 80 / 2,
        "ah_attr.sl": u8 = ah_attr.sl @ 82 / 1,
        "ah_attr.static_rate": u8 = ah_attr.static_rate @ 84 / 1,
        "ah_attr.is_global": u8 = ah_attr.is_global @ 85 / 1,
        "ah_attr.port_num": u8 = ah_attr.port_num @ 86 / 1,
        "alt_ah_attr.grh.dgid": IbvGid = alt_ah_attr.grh.dgid @ 88 / 16,
        "alt_ah_attr.port_num": u8 = alt_ah_attr.port_num @ 118 / 1,
    };

    struct IbvDataBuf = "ibv_data_buf" (16) { addr @ 0 / 8, length @ 8 / 8 };

    struct IbvQpEx = "ibv_qp_ex" (352) {
        qp_base @ 0 / 160, comp_mask @ 160 / 8, wr_id @ 168 / 8, wr_flags @ 176 / 4,
        wr_atomic_cmp_swp @ 184 / 8, wr_atomic_fetch_add @ 192 / 8, wr_bind_mw @ 200 / 8,
        wr_local_inv @ 208 / 8, wr_rdma_read @ 216 / 8, wr_rdma_write @ 224 / 8, wr_rdma_write_imm @ 232 / 8,
        wr_send @ 240 / 8, wr_send_imm @ 248 / 8, wr_send_inv @ 256 / 8, wr_send_tso @ 264 / 8,
        wr_set_ud_addr @ 272 / 8, wr_set_xrc_srqn @ 280 / 8, wr_set_inline_data @ 288 / 8,
        wr_set_inline_data_list @ 296 / 8, wr_set_sge @ 304 / 8, wr_set_sge_list @ 312 / 8, wr_start @ 320 / 8,
        wr_complete @ 328 / 8, wr_abort @ 336 / 8, wr_atomic_write @ 344 / 8,
    } paths {
        "qp_base.context": *mut IbvContext = qp_base.context @ 0 / 8,
        "qp_base.qp_num": u32 = qp_base.qp_num @ 52 / 4,
        "qp_base.state": c_uint = qp_base.state @ 56 / 4,
        "qp_base.qp_type": c_uint = qp_base.qp_type @ 60 / 4,
    };

    struct IbvSge = "ibv_sge" (16) { addr @ 0 / 8, length @ 8 / 4, lkey @ 12 / 4 };

    struct IbvRecvWr = "ibv_recv_wr" (32) { wr_id @ 0 / 8, next @ 8 / 8, sg_list @ 16 / 8, num_sge @ 24 / 4 };

    struct IbvSendWr = "ibv_send_wr" (128) {
        wr_id @ 0 / 8, next @ 8 / 8, sg_list @ 16 / 8, num_sge @ 24 / 4, opcode @ 28 / 4, send_flags @ 32 / 4,
        imm_data @ 36 / 4, wr @ 40 / 32, qp_type @ 72 / 4,
    } renamed {
        "bind_mw" = bind_mw_tso @ 80 / 48,
    } paths {
        "invalidate_rkey": u32 = imm_data @ 36 / 4,
        "wr.rdma": IbvRdmaWr = wr.rdma @ 40 / 16,
        "wr.rdma.remote_addr": u64 = wr.rdma.remote_addr @ 40 / 8,
        "wr.rdma.rkey": u32 = wr.rdma.rkey @ 48 / 4,
        "wr.atomic": IbvAtomicWr = wr.atomic @ 40 / 32,
        "wr.atomic.remote_addr": u64 = wr.atomic.remote_addr @ 40 / 8,
        "wr.atomic.compare_add": u64 = wr.atomic.compare_add @ 48 / 8,
        "wr.atomic.swap": u64 = wr.atomic.swap @ 56 / 8,
        "wr.atomic.rkey": u32 = wr.atomic.rkey @ 64 / 4,
        "wr.ud": IbvUdWr = wr.ud @ 40 / 16,
        "wr.ud.ah": *mut IbvAh = wr.ud.ah @ 40 / 8,
        "wr.ud.remote_qpn": u32 = wr.ud.remote_qpn @ 48 / 4,
        "wr.ud.remote_qkey": u32 = wr.ud.remote_qkey @ 52 / 4,
        "qp_type.xrc": IbvXrcWr = qp_type.xrc @ 72 / 4,
        "qp_type.xrc.remote_srqn": u32 = qp_type.xrc.remote_srqn @ 72 / 4,
        "bind_mw.mw": *mut IbvMw = bind_mw_tso.bind_mw.mw @ 80 / 8,
        "bind_mw.rkey": u32 = bind_mw_tso.bind_mw.rkey @ 88 / 4,
        "bind_mw.bind_info": IbvMwBindInfo = bind_mw_tso.bind_mw.bind_info @ 96 / 32,
        "bind_mw.bind_info.mr": *mut IbvMr = bind_mw_tso.bind_mw.bind_info.mr @ 96 / 8,
        "bind_mw.bind_info.addr": u64 = bind_mw_tso.bind_mw.bind_info.addr @ 104 / 8,
        "bind_mw.bind_info.length": u64 = bind_mw_tso.bind_mw.bind_info.length @ 112 / 8,
        "bind_mw.bind_info.mw_access_flags": c_uint = bind_mw_tso.bind_mw.bind_info.mw_access_flags @ 120 / 4,
        "tso": IbvTsoWr = bind_mw_tso.tso @ 80 / 16,
        "tso.hdr": *mut c_void = bind_mw_tso.tso.hdr @ 80 / 8,
        "tso.hdr_sz": u16 = bind_mw_tso.tso.hdr_sz @ 88 / 2,
        "tso.mss": u16 = bind_mw_tso.tso.mss @ 90 / 2,
    };

    struct IbvAsyncEvent = "ibv_async_event" (16) {
        element @ 0 / 8, event_type @ 8 / 4,
    } paths {
        "element.cq": *mut IbvCq = element.cq @ 0 / 8,
        "element.qp": *mut IbvQp = element.qp @ 0 / 8,
        "element.srq": *mut IbvSrq = element.srq @ 0 / 8,
        "element.wq": *mut IbvWq = element.wq @ 0 / 8,
        "element.port_num": c_int = element.port_num @ 0 / 4,
    };
}

// ---------------------------------------------------------------------------
// Constants
// ---------------------------------------------------------------------------

/// Enum values and flag bits of `<infiniband/verbs.h>`, named as in C and
/// typed like the C field or argument that carries them.
pub mod consts {
    use core::ffi::{c_int, c_uint};

    /// Defines each group's constants and records them all in [`ALL`].
    macro_rules! consts {
        ($( $group:literal : $ty:ty { $($name:ident = $val:expr),* $(,)? } )*) => {
            $($(
                #[doc = concat!("`", stringify!($name), "` (", $group, ").")]
                pub const $name: $ty = $val;
            )*)*

            /// Every constant of this module that `<infiniband/verbs.h>`
            /// defines, with its value (checked against the header by
            /// `tests/layout.rs`).
            pub const ALL: &[(&str, i128)] = &[$($((stringify!($name), $name as i128)),*),*];
        };
    }

    consts! {
        "enum ibv_node_type": c_int {
            IBV_NODE_UNKNOWN = -1,
            IBV_NODE_CA = 1,
            IBV_NODE_SWITCH = 2,
            IBV_NODE_ROUTER = 3,
            IBV_NODE_RNIC = 4,
            IBV_NODE_USNIC = 5,
            IBV_NODE_USNIC_UDP = 6,
            IBV_NODE_UNSPECIFIED = 7,
        }
        "enum ibv_transport_type": c_int {
            IBV_TRANSPORT_UNKNOWN = -1,
            IBV_TRANSPORT_IB = 0,
            IBV_TRANSPORT_IWARP = 1,
            IBV_TRANSPORT_USNIC = 2,
            IBV_TRANSPORT_USNIC_UDP = 3,
            IBV_TRANSPORT_UNSPECIFIED = 4,
        }
        "IBV_SYSFS_* lengths": usize {
            IBV_SYSFS_NAME_MAX = 64,
            IBV_SYSFS_PATH_MAX = 256,
        }
        "enum ibv_device_cap_flags": c_uint {
            IBV_DEVICE_RESIZE_MAX_WR = 1,
            IBV_DEVICE_BAD_PKEY_CNTR = 1 << 1,
            IBV_DEVICE_BAD_QKEY_CNTR = 1 << 2,
            IBV_DEVICE_RAW_MULTI = 1 << 3,
            IBV_DEVICE_AUTO_PATH_MIG = 1 << 4,
            IBV_DEVICE_CHANGE_PHY_PORT = 1 << 5,
            IBV_DEVICE_UD_AV_PORT_ENFORCE = 1 << 6,
            IBV_DEVICE_CURR_QP_STATE_MOD = 1 << 7,
            IBV_DEVICE_SHUTDOWN_PORT = 1 << 8,
            IBV_DEVICE_INIT_TYPE = 1 << 9,
            IBV_DEVICE_PORT_ACTIVE_EVENT = 1 << 10,
            IBV_DEVICE_SYS_IMAGE_GUID = 1 << 11,
            IBV_DEVICE_RC_RNR_NAK_GEN = 1 << 12,
            IBV_DEVICE_SRQ_RESIZE = 1 << 13,
            IBV_DEVICE_N_NOTIFY_CQ = 1 << 14,
            IBV_DEVICE_MEM_WINDOW = 1 << 17,
            IBV_DEVICE_UD_IP_CSUM = 1 << 18,
            IBV_DEVICE_XRC = 1 << 20,
            IBV_DEVICE_MEM_MGT_EXTENSIONS = 1 << 21,
            IBV_DEVICE_MEM_WINDOW_TYPE_2A = 1 << 23,
            IBV_DEVICE_MEM_WINDOW_TYPE_2B = 1 << 24,
            IBV_DEVICE_RC_IP_CSUM = 1 << 25,
            IBV_DEVICE_RAW_IP_CSUM = 1 << 26,
            IBV_DEVICE_MANAGED_FLOW_STEERING = 1 << 29,
        }
        "ibv_device_attr_ex.device_cap_flags_ex bits": u64 {
            IBV_DEVICE_RAW_SCATTER_FCS = 1 << 34,
            IBV_DEVICE_PCI_WRITE_END_PADDING = 1 << 36,
        }
        "enum ibv_fork_status": c_uint {
            IBV_FORK_DISABLED = 0,
            IBV_FORK_ENABLED = 1,
            IBV_FORK_UNNEEDED = 2,
        }
        "enum ibv_atomic_cap": c_uint {
            IBV_ATOMIC_NONE = 0,
            IBV_ATOMIC_HCA = 1,
            IBV_ATOMIC_GLOB = 2,
        }
        "enum ibv_odp_general_caps": u64 {
            IBV_ODP_SUPPORT = 1 << 0,
            IBV_ODP_SUPPORT_IMPLICIT = 1 << 1,
        }
        "enum ibv_odp_transport_cap_bits": u32 {
            IBV_ODP_SUPPORT_SEND = 1 << 0,
            IBV_ODP_SUPPORT_RECV = 1 << 1,
            IBV_ODP_SUPPORT_WRITE = 1 << 2,
            IBV_ODP_SUPPORT_READ = 1 << 3,
            IBV_ODP_SUPPORT_ATOMIC = 1 << 4,
            IBV_ODP_SUPPORT_SRQ_RECV = 1 << 5,
        }
        "enum ibv_advise_mr_advice": u32 {
            IBV_ADVISE_MR_ADVICE_PREFETCH = 0,
            IBV_ADVISE_MR_ADVICE_PREFETCH_WRITE = 1,
            IBV_ADVISE_MR_ADVICE_PREFETCH_NO_FAULT = 2,
        }
        "ibv_advise_mr flags": u32 {
            IBV_ADVISE_MR_FLAG_FLUSH = 1 << 0,
        }
        "enum ibv_raw_packet_caps": u32 {
            IBV_RAW_PACKET_CAP_CVLAN_STRIPPING = 1 << 0,
            IBV_RAW_PACKET_CAP_SCATTER_FCS = 1 << 1,
            IBV_RAW_PACKET_CAP_IP_CSUM = 1 << 2,
            IBV_RAW_PACKET_CAP_DELAY_DROP = 1 << 3,
        }
        "enum ibv_mtu": c_uint {
            IBV_MTU_256 = 1,
            IBV_MTU_512 = 2,
            IBV_MTU_1024 = 3,
            IBV_MTU_2048 = 4,
            IBV_MTU_4096 = 5,
        }
        "enum ibv_port_state": c_uint {
            IBV_PORT_NOP = 0,
            IBV_PORT_DOWN = 1,
            IBV_PORT_INIT = 2,
            IBV_PORT_ARMED = 3,
            IBV_PORT_ACTIVE = 4,
            IBV_PORT_ACTIVE_DEFER = 5,
        }
        "ibv_port_attr.link_layer, anonymous enum": u8 {
            IBV_LINK_LAYER_UNSPECIFIED = 0,
            IBV_LINK_LAYER_INFINIBAND = 1,
            IBV_LINK_LAYER_ETHERNET = 2,
        }
        "ibv_port_attr.flags, IB_UVERBS_QPF_GRH_REQUIRED": u8 {
            IBV_QPF_GRH_REQUIRED = 1 << 0,
        }
        "enum ibv_port_cap_flags": u32 {
            IBV_PORT_SM = 1 << 1,
            IBV_PORT_NOTICE_SUP = 1 << 2,
            IBV_PORT_TRAP_SUP = 1 << 3,
            IBV_PORT_OPT_IPD_SUP = 1 << 4,
            IBV_PORT_AUTO_MIGR_SUP = 1 << 5,
            IBV_PORT_SL_MAP_SUP = 1 << 6,
            IBV_PORT_MKEY_NVRAM = 1 << 7,
            IBV_PORT_PKEY_NVRAM = 1 << 8,
            IBV_PORT_LED_INFO_SUP = 1 << 9,
            IBV_PORT_SYS_IMAGE_GUID_SUP = 1 << 11,
            IBV_PORT_PKEY_SW_EXT_PORT_TRAP_SUP = 1 << 12,
            IBV_PORT_EXTENDED_SPEEDS_SUP = 1 << 14,
            IBV_PORT_CAP_MASK2_SUP = 1 << 15,
            IBV_PORT_CM_SUP = 1 << 16,
            IBV_PORT_SNMP_TUNNEL_SUP = 1 << 17,
            IBV_PORT_REINIT_SUP = 1 << 18,
            IBV_PORT_DEVICE_MGMT_SUP = 1 << 19,
            IBV_PORT_VENDOR_CLASS_SUP = 1 << 20,
            IBV_PORT_DR_NOTICE_SUP = 1 << 21,
            IBV_PORT_CAP_MASK_NOTICE_SUP = 1 << 22,
            IBV_PORT_BOOT_MGMT_SUP = 1 << 23,
            IBV_PORT_LINK_LATENCY_SUP = 1 << 24,
            IBV_PORT_CLIENT_REG_SUP = 1 << 25,
            IBV_PORT_IP_BASED_GIDS = 1 << 26,
        }
        "enum ibv_event_type": c_uint {
            IBV_EVENT_CQ_ERR = 0,
            IBV_EVENT_QP_FATAL = 1,
            IBV_EVENT_QP_REQ_ERR = 2,
            IBV_EVENT_QP_ACCESS_ERR = 3,
            IBV_EVENT_COMM_EST = 4,
            IBV_EVENT_SQ_DRAINED = 5,
            IBV_EVENT_PATH_MIG = 6,
            IBV_EVENT_PATH_MIG_ERR = 7,
            IBV_EVENT_DEVICE_FATAL = 8,
            IBV_EVENT_PORT_ACTIVE = 9,
            IBV_EVENT_PORT_ERR = 10,
            IBV_EVENT_LID_CHANGE = 11,
            IBV_EVENT_PKEY_CHANGE = 12,
            IBV_EVENT_SM_CHANGE = 13,
            IBV_EVENT_SRQ_ERR = 14,
            IBV_EVENT_SRQ_LIMIT_REACHED = 15,
            IBV_EVENT_QP_LAST_WQE_REACHED = 16,
            IBV_EVENT_CLIENT_REREGISTER = 17,
            IBV_EVENT_GID_CHANGE = 18,
            IBV_EVENT_WQ_FATAL = 19,
        }
        "enum ibv_wc_status": c_uint {
            IBV_WC_SUCCESS = 0,
            IBV_WC_LOC_LEN_ERR = 1,
            IBV_WC_LOC_QP_OP_ERR = 2,
            IBV_WC_LOC_EEC_OP_ERR = 3,
            IBV_WC_LOC_PROT_ERR = 4,
            IBV_WC_WR_FLUSH_ERR = 5,
            IBV_WC_MW_BIND_ERR = 6,
            IBV_WC_BAD_RESP_ERR = 7,
            IBV_WC_LOC_ACCESS_ERR = 8,
            IBV_WC_REM_INV_REQ_ERR = 9,
            IBV_WC_REM_ACCESS_ERR = 10,
            IBV_WC_REM_OP_ERR = 11,
            IBV_WC_RETRY_EXC_ERR = 12,
            IBV_WC_RNR_RETRY_EXC_ERR = 13,
            IBV_WC_LOC_RDD_VIOL_ERR = 14,
            IBV_WC_REM_INV_RD_REQ_ERR = 15,
            IBV_WC_REM_ABORT_ERR = 16,
            IBV_WC_INV_EECN_ERR = 17,
            IBV_WC_INV_EEC_STATE_ERR = 18,
            IBV_WC_FATAL_ERR = 19,
            IBV_WC_RESP_TIMEOUT_ERR = 20,
            IBV_WC_GENERAL_ERR = 21,
            IBV_WC_TM_ERR = 22,
            IBV_WC_TM_RNDV_INCOMPLETE = 23,
        }
        "enum ibv_wc_opcode": c_uint {
            IBV_WC_SEND = 0,
            IBV_WC_RDMA_WRITE = 1,
            IBV_WC_RDMA_READ = 2,
            IBV_WC_COMP_SWAP = 3,
            IBV_WC_FETCH_ADD = 4,
            IBV_WC_BIND_MW = 5,
            IBV_WC_LOCAL_INV = 6,
            IBV_WC_TSO = 7,
            IBV_WC_ATOMIC_WRITE = 9,
            IBV_WC_RECV = 1 << 7,
            IBV_WC_RECV_RDMA_WITH_IMM = 129,
            IBV_WC_TM_ADD = 130,
            IBV_WC_TM_DEL = 131,
            IBV_WC_TM_SYNC = 132,
            IBV_WC_TM_RECV = 133,
            IBV_WC_TM_NO_TAG = 134,
            IBV_WC_DRIVER1 = 135,
            IBV_WC_DRIVER2 = 136,
            IBV_WC_DRIVER3 = 137,
        }
        "enum ibv_create_cq_wc_flags": u64 {
            IBV_WC_EX_WITH_BYTE_LEN = 1 << 0,
            IBV_WC_EX_WITH_IMM = 1 << 1,
            IBV_WC_EX_WITH_QP_NUM = 1 << 2,
            IBV_WC_EX_WITH_SRC_QP = 1 << 3,
            IBV_WC_EX_WITH_SLID = 1 << 4,
            IBV_WC_EX_WITH_SL = 1 << 5,
            IBV_WC_EX_WITH_DLID_PATH_BITS = 1 << 6,
            IBV_WC_EX_WITH_COMPLETION_TIMESTAMP = 1 << 7,
            IBV_WC_EX_WITH_CVLAN = 1 << 8,
            IBV_WC_EX_WITH_FLOW_TAG = 1 << 9,
            IBV_WC_EX_WITH_TM_INFO = 1 << 10,
            IBV_WC_EX_WITH_COMPLETION_TIMESTAMP_WALLCLOCK = 1 << 11,
            IBV_WC_STANDARD_FLAGS = 0x7f,
            IBV_CREATE_CQ_SUP_WC_FLAGS = 0xfff,
        }
        "ibv_wc_flags shift, anonymous enum": c_uint {
            IBV_WC_IP_CSUM_OK_SHIFT = 2,
        }
        "enum ibv_wc_flags": c_uint {
            IBV_WC_GRH = 1 << 0,
            IBV_WC_WITH_IMM = 1 << 1,
            IBV_WC_IP_CSUM_OK = 1 << 2,
            IBV_WC_WITH_INV = 1 << 3,
            IBV_WC_TM_SYNC_REQ = 1 << 4,
            IBV_WC_TM_MATCH = 1 << 5,
            IBV_WC_TM_DATA_VALID = 1 << 6,
        }
        "enum ibv_access_flags": c_uint {
            IBV_ACCESS_LOCAL_WRITE = 1,
            IBV_ACCESS_REMOTE_WRITE = 1 << 1,
            IBV_ACCESS_REMOTE_READ = 1 << 2,
            IBV_ACCESS_REMOTE_ATOMIC = 1 << 3,
            IBV_ACCESS_MW_BIND = 1 << 4,
            IBV_ACCESS_ZERO_BASED = 1 << 5,
            IBV_ACCESS_ON_DEMAND = 1 << 6,
            IBV_ACCESS_HUGETLB = 1 << 7,
            IBV_ACCESS_RELAXED_ORDERING = 1 << 20,
            IBV_ACCESS_OPTIONAL_FIRST = 1 << 20,
            IBV_ACCESS_OPTIONAL_RANGE = 0x3ff0_0000,
        }
        "enum ibv_rereg_mr_flags": c_int {
            IBV_REREG_MR_CHANGE_TRANSLATION = 1 << 0,
            IBV_REREG_MR_CHANGE_PD = 1 << 1,
            IBV_REREG_MR_CHANGE_ACCESS = 1 << 2,
            IBV_REREG_MR_FLAGS_SUPPORTED = 7,
        }
        "enum ibv_rereg_mr_err_code": c_int {
            IBV_REREG_MR_ERR_INPUT = -1,
            IBV_REREG_MR_ERR_DONT_FORK_NEW = -2,
            IBV_REREG_MR_ERR_DO_FORK_OLD = -3,
            IBV_REREG_MR_ERR_CMD = -4,
            IBV_REREG_MR_ERR_CMD_AND_DO_FORK_NEW = -5,
        }
        "enum ibv_mw_type": c_uint {
            IBV_MW_TYPE_1 = 1,
            IBV_MW_TYPE_2 = 2,
        }
        "enum ibv_rate": c_uint {
            IBV_RATE_MAX = 0,
            IBV_RATE_2_5_GBPS = 2,
            IBV_RATE_5_GBPS = 5,
            IBV_RATE_10_GBPS = 3,
            IBV_RATE_20_GBPS = 6,
            IBV_RATE_30_GBPS = 4,
            IBV_RATE_40_GBPS = 7,
            IBV_RATE_60_GBPS = 8,
            IBV_RATE_80_GBPS = 9,
            IBV_RATE_120_GBPS = 10,
            IBV_RATE_14_GBPS = 11,
            IBV_RATE_56_GBPS = 12,
            IBV_RATE_112_GBPS = 13,
            IBV_RATE_168_GBPS = 14,
            IBV_RATE_25_GBPS = 15,
            IBV_RATE_100_GBPS = 16,
            IBV_RATE_200_GBPS = 17,
            IBV_RATE_300_GBPS = 18,
            IBV_RATE_28_GBPS = 19,
            IBV_RATE_50_GBPS = 20,
            IBV_RATE_400_GBPS = 21,
            IBV_RATE_600_GBPS = 22,
            IBV_RATE_800_GBPS = 23,
            IBV_RATE_1200_GBPS = 24,
        }
        "enum ibv_srq_attr_mask": c_int {
            IBV_SRQ_MAX_WR = 1 << 0,
            IBV_SRQ_LIMIT = 1 << 1,
        }
        "enum ibv_srq_type": c_uint {
            IBV_SRQT_BASIC = 0,
            IBV_SRQT_XRC = 1,
            IBV_SRQT_TM = 2,
        }
        "enum ibv_srq_init_attr_mask": u32 {
            IBV_SRQ_INIT_ATTR_TYPE = 1 << 0,
            IBV_SRQ_INIT_ATTR_PD = 1 << 1,
            IBV_SRQ_INIT_ATTR_XRCD = 1 << 2,
            IBV_SRQ_INIT_ATTR_CQ = 1 << 3,
            IBV_SRQ_INIT_ATTR_TM = 1 << 4,
            IBV_SRQ_INIT_ATTR_RESERVED = 1 << 5,
        }
        "enum ibv_wq_type": c_uint {
            IBV_WQT_RQ = 0,
        }
        "enum ibv_wq_state": c_uint {
            IBV_WQS_RESET = 0,
            IBV_WQS_RDY = 1,
            IBV_WQS_ERR = 2,
            IBV_WQS_UNKNOWN = 3,
        }
        "enum ibv_qp_type": c_uint {
            IBV_QPT_RC = 2,
            IBV_QPT_UC = 3,
            IBV_QPT_UD = 4,
            IBV_QPT_RAW_PACKET = 8,
            IBV_QPT_XRC_SEND = 9,
            IBV_QPT_XRC_RECV = 10,
            IBV_QPT_DRIVER = 0xff,
        }
        "enum ibv_qp_init_attr_mask": u32 {
            IBV_QP_INIT_ATTR_PD = 1 << 0,
            IBV_QP_INIT_ATTR_XRCD = 1 << 1,
            IBV_QP_INIT_ATTR_CREATE_FLAGS = 1 << 2,
            IBV_QP_INIT_ATTR_MAX_TSO_HEADER = 1 << 3,
            IBV_QP_INIT_ATTR_IND_TABLE = 1 << 4,
            IBV_QP_INIT_ATTR_RX_HASH = 1 << 5,
            IBV_QP_INIT_ATTR_SEND_OPS_FLAGS = 1 << 6,
        }
        "enum ibv_qp_create_flags": u32 {
            IBV_QP_CREATE_BLOCK_SELF_MCAST_LB = 1 << 1,
            IBV_QP_CREATE_SCATTER_FCS = 1 << 8,
            IBV_QP_CREATE_CVLAN_STRIPPING = 1 << 9,
            IBV_QP_CREATE_SOURCE_QPN = 1 << 10,
            IBV_QP_CREATE_PCI_WRITE_END_PADDING = 1 << 11,
        }
        "enum ibv_qp_create_send_ops_flags": u64 {
            IBV_QP_EX_WITH_RDMA_WRITE = 1 << 0,
            IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM = 1 << 1,
            IBV_QP_EX_WITH_SEND = 1 << 2,
            IBV_QP_EX_WITH_SEND_WITH_IMM = 1 << 3,
            IBV_QP_EX_WITH_RDMA_READ = 1 << 4,
            IBV_QP_EX_WITH_ATOMIC_CMP_AND_SWP = 1 << 5,
            IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD = 1 << 6,
            IBV_QP_EX_WITH_LOCAL_INV = 1 << 7,
            IBV_QP_EX_WITH_BIND_MW = 1 << 8,
            IBV_QP_EX_WITH_SEND_WITH_INV = 1 << 9,
            IBV_QP_EX_WITH_TSO = 1 << 10,
            IBV_QP_EX_WITH_ATOMIC_WRITE = 1 << 12,
        }
        "enum ibv_qp_attr_mask": c_int {
            IBV_QP_STATE = 1 << 0,
            IBV_QP_CUR_STATE = 1 << 1,
            IBV_QP_EN_SQD_ASYNC_NOTIFY = 1 << 2,
            IBV_QP_ACCESS_FLAGS = 1 << 3,
            IBV_QP_PKEY_INDEX = 1 << 4,
            IBV_QP_PORT = 1 << 5,
            IBV_QP_QKEY = 1 << 6,
            IBV_QP_AV = 1 << 7,
            IBV_QP_PATH_MTU = 1 << 8,
            IBV_QP_TIMEOUT = 1 << 9,
            IBV_QP_RETRY_CNT = 1 << 10,
            IBV_QP_RNR_RETRY = 1 << 11,
            IBV_QP_RQ_PSN = 1 << 12,
            IBV_QP_MAX_QP_RD_ATOMIC = 1 << 13,
            IBV_QP_ALT_PATH = 1 << 14,
            IBV_QP_MIN_RNR_TIMER = 1 << 15,
            IBV_QP_SQ_PSN = 1 << 16,
            IBV_QP_MAX_DEST_RD_ATOMIC = 1 << 17,
            IBV_QP_PATH_MIG_STATE = 1 << 18,
            IBV_QP_CAP = 1 << 19,
            IBV_QP_DEST_QPN = 1 << 20,
            IBV_QP_RATE_LIMIT = 1 << 25,
        }
        "enum ibv_qp_state": c_uint {
            IBV_QPS_RESET = 0,
            IBV_QPS_INIT = 1,
            IBV_QPS_RTR = 2,
            IBV_QPS_RTS = 3,
            IBV_QPS_SQD = 4,
            IBV_QPS_SQE = 5,
            IBV_QPS_ERR = 6,
            IBV_QPS_UNKNOWN = 7,
        }
        "enum ibv_mig_state": c_uint {
            IBV_MIG_MIGRATED = 0,
            IBV_MIG_REARM = 1,
            IBV_MIG_ARMED = 2,
        }
        "enum ibv_wr_opcode": c_uint {
            IBV_WR_RDMA_WRITE = 0,
            IBV_WR_RDMA_WRITE_WITH_IMM = 1,
            IBV_WR_SEND = 2,
            IBV_WR_SEND_WITH_IMM = 3,
            IBV_WR_RDMA_READ = 4,
            IBV_WR_ATOMIC_CMP_AND_SWP = 5,
            IBV_WR_ATOMIC_FETCH_AND_ADD = 6,
            IBV_WR_LOCAL_INV = 7,
            IBV_WR_BIND_MW = 8,
            IBV_WR_SEND_WITH_INV = 9,
            IBV_WR_TSO = 10,
            IBV_WR_DRIVER1 = 11,
            IBV_WR_ATOMIC_WRITE = 15,
        }
        "enum ibv_send_flags": c_uint {
            IBV_SEND_FENCE = 1 << 0,
            IBV_SEND_SIGNALED = 1 << 1,
            IBV_SEND_SOLICITED = 1 << 2,
            IBV_SEND_INLINE = 1 << 3,
            IBV_SEND_IP_CSUM = 1 << 4,
        }
        "enum ibv_cq_init_attr_mask": u32 {
            IBV_CQ_INIT_ATTR_MASK_FLAGS = 1 << 0,
            IBV_CQ_INIT_ATTR_MASK_PD = 1 << 1,
        }
        "enum ibv_create_cq_attr_flags": u32 {
            IBV_CREATE_CQ_ATTR_SINGLE_THREADED = 1 << 0,
            IBV_CREATE_CQ_ATTR_IGNORE_OVERRUN = 1 << 1,
        }
        "enum ibv_cq_attr_mask": u32 {
            IBV_CQ_ATTR_MODERATE = 1 << 0,
            IBV_CQ_ATTR_RESERVED = 1 << 1,
        }
        "enum ibv_values_mask": u32 {
            IBV_VALUES_MASK_RAW_CLOCK = 1 << 0,
            IBV_VALUES_MASK_RESERVED = 1 << 1,
        }
        "enum ibv_gid_type": u32 {
            IBV_GID_TYPE_IB = 0,
            IBV_GID_TYPE_ROCE_V1 = 1,
            IBV_GID_TYPE_ROCE_V2 = 2,
        }
    }

    /// rdma-core 45's IBA 1.5 names, absent from the rdma-core 44 header
    /// `tests/layout.rs` checks against (so not in [`ALL`]).
    pub mod rdma_core_45 {
        use core::ffi::c_uint;

        /// `IBV_QP_EX_WITH_FLUSH` (`enum ibv_qp_create_send_ops_flags`).
        pub const IBV_QP_EX_WITH_FLUSH: u64 = 1 << 13;
        /// `IBV_WR_FLUSH` (`enum ibv_wr_opcode`).
        pub const IBV_WR_FLUSH: c_uint = 14;
        /// `IBV_WC_FLUSH` (`enum ibv_wc_opcode`).
        pub const IBV_WC_FLUSH: c_uint = 8;
        /// `IBV_ACCESS_FLUSH_GLOBAL` (`enum ibv_access_flags`).
        pub const IBV_ACCESS_FLUSH_GLOBAL: u32 = 1 << 8;
        /// `IBV_ACCESS_FLUSH_PERSISTENT` (`enum ibv_access_flags`).
        pub const IBV_ACCESS_FLUSH_PERSISTENT: u32 = 1 << 9;
        /// `IBV_FLUSH_GLOBAL` (`enum ibv_placement_type`).
        pub const IBV_FLUSH_GLOBAL: u8 = 1;
        /// `IBV_FLUSH_PERSISTENT` (`enum ibv_placement_type`).
        pub const IBV_FLUSH_PERSISTENT: u8 = 2;
        /// `IBV_FLUSH_RANGE` (`enum ibv_selectivity_level`).
        pub const IBV_FLUSH_RANGE: u8 = 0;
        /// `IBV_FLUSH_MR` (`enum ibv_selectivity_level`).
        pub const IBV_FLUSH_MR: u8 = 1;
        /// `IB_UVERBS_DEVICE_FLUSH_GLOBAL` (`device_cap_flags_ex`).
        pub const IB_UVERBS_DEVICE_FLUSH_GLOBAL: u64 = 1 << 38;
        /// `IB_UVERBS_DEVICE_FLUSH_PERSISTENT` (`device_cap_flags_ex`).
        pub const IB_UVERBS_DEVICE_FLUSH_PERSISTENT: u64 = 1 << 39;
        /// `IB_UVERBS_DEVICE_ATOMIC_WRITE` (`device_cap_flags_ex`).
        pub const IB_UVERBS_DEVICE_ATOMIC_WRITE: u64 = 1 << 40;
    }

    /// `__VERBS_ABI_IS_EXTENDED`: the `ibv_context.abi_compat` value that
    /// marks the context as the tail of a `verbs_context` (`(void *)UINTPTR_MAX`).
    pub const __VERBS_ABI_IS_EXTENDED: usize = usize::MAX;

    /// `IBV_GID_TYPE_SYSFS_IB_ROCE_V1` (`enum ibv_gid_type_sysfs`, the type
    /// `ibv_query_gid_type` reports; rdma-core's private `driver.h`, not
    /// `verbs.h`).
    pub const IBV_GID_TYPE_SYSFS_IB_ROCE_V1: c_uint = 0;
    /// `IBV_GID_TYPE_SYSFS_ROCE_V2` (`enum ibv_gid_type_sysfs`; see above).
    pub const IBV_GID_TYPE_SYSFS_ROCE_V2: c_uint = 1;
}

/// Writes `s` into the fixed C string `dst`, cut to fit with its NUL.
pub(crate) fn copy_str(dst: &mut [std::ffi::c_char], s: &str) {
    let n = s.len().min(dst.len().saturating_sub(1));
    for (d, b) in dst.iter_mut().zip(s.as_bytes()[..n].iter()) {
        *d = *b as std::ffi::c_char;
    }
    if let Some(end) = dst.get_mut(n) {
        *end = 0;
    }
}
