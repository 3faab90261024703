//! `#[repr(C)]` mirrors of librdmacm's public structures (rdma-core 44,
//! `<rdma/rdma_cma.h>`, x86_64), checked against the installed header by
//! `tests/rdmacm_layout.rs`. The calls are in the private `rdmacm` module.

use std::ffi::{c_char, c_int, c_uint, c_void};

use crate::abi::{IbvCompChannel, IbvContext, IbvCq, IbvPd, IbvQp, IbvSrq};

/// `struct rdma_event_channel`.
#[repr(C)]
#[allow(missing_docs)]
pub struct RdmaEventChannel {
    pub fd: c_int,
}

/// `struct rdma_cm_id` (416 bytes on x86_64). `route.addr` holds the two
/// `sockaddr_storage`s and the IB address; `route.path_rec` is NULL.
#[repr(C)]
#[allow(missing_docs)]
pub struct RdmaCmId {
    pub verbs: *mut IbvContext,
    pub channel: *mut RdmaEventChannel,
    pub context: *mut c_void,
    pub qp: *mut IbvQp,
    pub src_addr: [u8; 128],
    pub dst_addr: [u8; 128],
    pub sgid: [u8; 16],
    pub dgid: [u8; 16],
    pub pkey: u16,
    pub _pad0: [u8; 6],
    pub path_rec: *mut c_void,
    pub num_paths: c_int,
    pub _pad1: u32,
    /// `enum rdma_port_space`.
    pub ps: c_uint,
    pub port_num: u8,
    pub _pad2: [u8; 3],
    pub event: *mut RdmaCmEvent,
    pub send_cq_channel: *mut IbvCompChannel,
    pub send_cq: *mut IbvCq,
    pub recv_cq_channel: *mut IbvCompChannel,
    pub recv_cq: *mut IbvCq,
    pub srq: *mut IbvSrq,
    pub pd: *mut IbvPd,
    /// `enum ibv_qp_type`.
    pub qp_type: c_uint,
    pub _pad3: u32,
}

/// `struct rdma_conn_param`.
#[repr(C)]
#[derive(Clone, Copy)]
#[allow(missing_docs)]
pub struct RdmaConnParam {
    pub private_data: *const c_void,
    pub private_data_len: u8,
    pub responder_resources: u8,
    pub initiator_depth: u8,
    pub flow_control: u8,
    pub retry_count: u8,
    pub rnr_retry_count: u8,
    pub srq: u8,
    pub qp_num: u32,
}

/// `struct ibv_ece` (`<infiniband/verbs.h>`): enhanced connection establishment.
#[repr(C)]
#[derive(Clone, Copy)]
#[allow(missing_docs)]
pub struct IbvEce {
    pub vendor_id: u32,
    pub options: u32,
    pub comp_mask: u32,
}

/// `struct rdma_ud_param`: the event's parameters for a UD id (the other
/// member of the `param` union).
#[repr(C)]
#[derive(Clone, Copy)]
#[allow(missing_docs)]
pub struct RdmaUdParam {
    pub private_data: *const c_void,
    pub private_data_len: u8,
    pub ah_attr: crate::abi::IbvAhAttr,
    pub qp_num: u32,
    pub qkey: u32,
}

/// `struct rdma_cm_event`: `param` is the union of `rdma_conn_param`,
/// `rdma_ud_param` (56 bytes) and, since rdma-core 65, `uint64_t arg`
/// (RDMA_CM_EVENT_USER's argument, at the union's start).
#[repr(C)]
#[allow(missing_docs)]
pub struct RdmaCmEvent {
    pub id: *mut RdmaCmId,
    pub listen_id: *mut RdmaCmId,
    /// `enum rdma_cm_event_type`.
    pub event: c_uint,
    pub status: c_int,
    pub param: [u64; 7],
}

/// `struct rdma_addrinfo`.
#[repr(C)]
#[allow(missing_docs)]
pub struct RdmaAddrinfo {
    pub ai_flags: c_int,
    pub ai_family: c_int,
    pub ai_qp_type: c_int,
    pub ai_port_space: c_int,
    pub ai_src_len: u32,
    pub ai_dst_len: u32,
    pub ai_src_addr: *mut libc::sockaddr,
    pub ai_dst_addr: *mut libc::sockaddr,
    pub ai_src_canonname: *mut c_char,
    pub ai_dst_canonname: *mut c_char,
    pub ai_route_len: usize,
    pub ai_route: *mut c_void,
    pub ai_connect_len: usize,
    pub ai_connect: *mut c_void,
    pub ai_next: *mut RdmaAddrinfo,
}

/// `RAI_PASSIVE`.
pub const RAI_PASSIVE: c_int = 1;
/// `RAI_SA` (rdma-core 65): resolve through the InfiniBand SA.
pub const RAI_SA: c_int = 0x10;
/// `RAI_DNS` (rdma-core 65): resolve through DNS (the default).
pub const RAI_DNS: c_int = 0x20;
/// `RDMA_PS_TCP`.
pub const RDMA_PS_TCP: c_uint = 0x0106;

/// `struct rdma_cm_join_mc_attr_ex`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct RdmaCmJoinMcAttrEx {
    /// `RDMA_CM_JOIN_MC_ATTR_*` bits.
    pub comp_mask: u32,
    /// `RDMA_MC_JOIN_FLAG_*`.
    pub join_flags: u32,
    /// The group.
    pub addr: *mut libc::sockaddr,
}

/// `rdma_cm_join_mc_attr_ex.addr` is set.
pub const RDMA_CM_JOIN_MC_ATTR_ADDRESS: u32 = 1 << 0;
/// `rdma_cm_join_mc_attr_ex.join_flags` is set.
pub const RDMA_CM_JOIN_MC_ATTR_JOIN_FLAGS: u32 = 1 << 1;
/// The first mask bit librdmacm does not know.
pub const RDMA_CM_JOIN_MC_ATTR_RESERVED: u32 = 1 << 2;
/// A full member: sends and receives.
pub const RDMA_MC_JOIN_FLAG_FULLMEMBER: u32 = 0;
/// A send-only full member: its QP is not attached.
pub const RDMA_MC_JOIN_FLAG_SENDONLY_FULLMEMBER: u32 = 1;
/// The first join flag librdmacm does not know.
pub const RDMA_MC_JOIN_FLAG_RESERVED: u32 = 2;
