//! librdmacm.so.1 (rdma-core 44's ABI and 65's RDMACM_1.4 additions:
//! `rdma_write_cm_event`, `rdma_resolve_addrinfo`, `rdma_query_addrinfo`),
//! served by this same library:
//! `softroce run` links `librdmacm.so.1` to it beside `libibverbs.so.1`,
//! and the dynamic loader, finding the file loaded already, satisfies both
//! names (and their version nodes) with one object. So `id->verbs` is a
//! context of this libibverbs, and ids, QPs and devices share one state,
//! as rdma-core's two libraries share the kernel's.
//!
//! The calls are `softroce::rdma_cm`'s: this module only lays out the C
//! structures (`rdma_cm_id`, `rdma_cm_event`, `rdma_conn_param`,
//! `rdma_addrinfo`, checked against the installed `<rdma/rdma_cma.h>` by
//! `tests/layout.rs`), keeps the C handles of the ids, and converts.

use std::collections::HashMap;
use std::ffi::{c_char, c_int, c_uint, c_void};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, SocketAddrV6};
use std::os::fd::AsRawFd;
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use softroce::QpState;
use softroce::rdma_cm::{CmId, ConnParam, Event, EventChannel, EventType, PortSpace};

use crate::abi::*;
use crate::export::{Step, finished, ibv_export, ibv_export_blocking, kept, set_errno};
use crate::rdmacm_abi::*;

mod ep;

/// The C struct first (`#[repr(C)]`): a pointer to the block is one to it.
#[repr(C)]
struct ChannelBlock {
    c: RdmaEventChannel,
    ch: EventChannel,
}

/// The C struct first (`#[repr(C)]`): a pointer to the block is one to it.
#[repr(C)]
struct IdBlock {
    c: RdmaCmId,
    id: CmId,
    /// A synchronous id's own channel (see [`ep`]).
    sync: Option<Box<ChannelBlock>>,
    /// What `rdma_create_ep` gave a passive id for `rdma_get_request`.
    template: Option<Box<ep::Template>>,
    /// The CQs `rdma_create_qp` made for want of the caller's.
    made_cqs: bool,
    /// `rdma_resolve_addrinfo`'s answer, until `rdma_query_addrinfo`.
    addrinfo: Mutex<AddrinfoSlot>,
    /// Events `rdma_get_cm_event` handed out for this id and not yet acked.
    unacked: Arc<Unacked>,
}

/// An id's events handed out and not acknowledged: `rdma_destroy_id` waits
/// for them, as librdmacm's does (the kernel tells it how many it reported),
/// so that no thread handling one of its events reads a freed id.
#[derive(Default)]
struct Unacked {
    n: Mutex<u64>,
    acked: Condvar,
}

impl Unacked {
    /// Counts one handed out; acking the event gives it back.
    fn take(self: &Arc<Unacked>) -> Counted {
        *self.n.lock().unwrap_or_else(|e| e.into_inner()) += 1;
        Counted(self.clone())
    }

    /// Waits until every event handed out was acked.
    fn wait(&self) {
        let mut n = self.n.lock().unwrap_or_else(|e| e.into_inner());
        while *n > 0 {
            n = self.acked.wait(n).unwrap_or_else(|e| e.into_inner());
        }
    }
}

/// One event of an id handed out: given back when the event is acked.
struct Counted(Arc<Unacked>);

impl Drop for Counted {
    fn drop(&mut self) {
        let mut n = self.0.n.lock().unwrap_or_else(|e| e.into_inner());
        *n = n.saturating_sub(1);
        if *n == 0 {
            self.0.acked.notify_all();
        }
    }
}

/// What `rdma_resolve_addrinfo` leaves for `rdma_query_addrinfo` (librdmacm
/// 65's `resolving_ai` and `resolved_ai`).
#[derive(Default)]
struct AddrinfoSlot {
    /// A resolution started and not yet queried: another is EBUSY.
    resolving: bool,
    /// Its answer (freed with the id when nobody queries it).
    resolved: Option<AiList>,
}

/// A list from `rdma_getaddrinfo`, owned: freed when dropped.
struct AiList(*mut RdmaAddrinfo);

impl AiList {
    /// Gives the list up to the caller (who frees it with `rdma_freeaddrinfo`).
    fn into_raw(self) -> *mut RdmaAddrinfo {
        let p = self.0;
        std::mem::forget(self);
        p
    }
}

impl Drop for AiList {
    fn drop(&mut self) {
        // SAFETY: a list rdma_getaddrinfo made, owned here alone, freed once.
        unsafe { rdma_freeaddrinfo(self.0) };
    }
}

/// The C struct first (`#[repr(C)]`): a pointer to the block is one to it.
#[repr(C)]
struct EventBlock {
    c: RdmaCmEvent,
    private: [u8; 256],
    /// The id (the listener, for a request) this event counts on.
    _counted: Option<Counted>,
}

/// C handles of the live ids, by `CmId::key` (as addresses).
static IDS: Mutex<Option<HashMap<usize, usize>>> = Mutex::new(None);
/// Each device's context and default PD for ids (`id->verbs`, `id->pd`),
/// opened once per process as librdmacm does.
/// Keyed by the opening pid too: a `fork()` child opens its own (the
/// parent's contexts have no driver thread in it).
static VERBS: Mutex<Option<HashMap<VerbsKey, (usize, usize)>>> = Mutex::new(None);

/// (pid, device name).
type VerbsKey = (u32, String);

fn ids() -> std::sync::MutexGuard<'static, Option<HashMap<usize, usize>>> {
    IDS.lock().unwrap_or_else(|e| e.into_inner())
}

/// Shares libibverbs' contexts with rdma_cm (once).
fn init() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| softroce::rdma_cm::set_context_opener(Box::new(crate::device::open_for_info)));
}

/// `-1` with `errno` from a softroce error.
fn fail(e: &softroce::Error) -> c_int {
    crate::export::trace_err("rdma_cm", e);
    set_errno(crate::errno::errno(e));
    -1
}

fn einval() -> c_int {
    set_errno(libc::EINVAL);
    -1
}

/// Reads a `sockaddr` (IPv4 or IPv6).
///
/// # Safety
/// `sa` is NULL or points at a `sockaddr` of its family's size.
unsafe fn sockaddr_of(sa: *const libc::sockaddr) -> Option<SocketAddr> {
    if sa.is_null() {
        return None;
    }
    // SAFETY: per the contract; the family says which struct it is.
    unsafe {
        match c_int::from((*sa).sa_family) {
            libc::AF_INET => {
                let s = &*(sa as *const libc::sockaddr_in);
                Some(SocketAddr::V4(SocketAddrV4::new(
                    Ipv4Addr::from(u32::from_be(s.sin_addr.s_addr)),
                    u16::from_be(s.sin_port),
                )))
            }
            libc::AF_INET6 => {
                let s = &*(sa as *const libc::sockaddr_in6);
                Some(SocketAddr::V6(SocketAddrV6::new(
                    Ipv6Addr::from(s.sin6_addr.s6_addr),
                    u16::from_be(s.sin6_port),
                    0,
                    s.sin6_scope_id,
                )))
            }
            _ => None,
        }
    }
}

/// Writes `a` as a `sockaddr_in` or `sockaddr_in6` into `out` (128 bytes).
fn write_sockaddr(out: &mut [u8; 128], a: Option<SocketAddr>) {
    *out = [0; 128];
    match a {
        Some(SocketAddr::V4(v)) => {
            out[..2].copy_from_slice(&(libc::AF_INET as u16).to_ne_bytes());
            out[2..4].copy_from_slice(&v.port().to_be_bytes());
            out[4..8].copy_from_slice(&v.ip().octets());
        }
        Some(SocketAddr::V6(v)) => {
            out[..2].copy_from_slice(&(libc::AF_INET6 as u16).to_ne_bytes());
            out[2..4].copy_from_slice(&v.port().to_be_bytes());
            out[8..24].copy_from_slice(&v.ip().octets());
            out[24..28].copy_from_slice(&v.scope_id().to_ne_bytes());
        }
        None => {}
    }
}

fn gid_of(a: Option<SocketAddr>) -> [u8; 16] {
    match a.map(|a| a.ip()) {
        Some(IpAddr::V4(v)) => v.to_ipv6_mapped().octets(),
        Some(IpAddr::V6(v)) => v.octets(),
        None => [0; 16],
    }
}

/// The device's context and default PD for ids (opened on first use).
fn verbs_of(dev: &softroce::DeviceInfo) -> Option<(*mut IbvContext, *mut IbvPd)> {
    let mut v = VERBS.lock().unwrap_or_else(|e| e.into_inner());
    let map = v.get_or_insert_with(HashMap::new);
    let key = (std::process::id(), dev.name.clone());
    if let Some(&(c, p)) = map.get(&key) {
        return Some((c as *mut IbvContext, p as *mut IbvPd));
    }
    let entry = crate::device::entry_by_name(&dev.name)?;
    let ctx = crate::device::open(entry).ok()?;
    // SAFETY: a context just opened.
    let pd = unsafe { crate::pd::ibv_alloc_pd(ctx) };
    if pd.is_null() {
        return None;
    }
    map.insert(key, (ctx as usize, pd as usize));
    Some((ctx, pd))
}

/// Refreshes the C id from the Rust one: device, addresses, GIDs.
fn fill(b: &mut IdBlock) {
    let id = &b.id;
    if let Some(dev) = id.device()
        && b.c.verbs.is_null()
        && let Some((ctx, pd)) = verbs_of(&dev)
    {
        b.c.verbs = ctx;
        b.c.pd = pd;
    }
    let (src, dst) = (id.local_addr(), id.peer_addr());
    write_sockaddr(&mut b.c.src_addr, src);
    write_sockaddr(&mut b.c.dst_addr, dst);
    b.c.sgid = gid_of(src);
    b.c.dgid = gid_of(dst);
    b.c.pkey = 0xffff_u16.to_be();
    b.c.port_num = 1;
}

fn new_block(id: CmId, channel: *mut RdmaEventChannel, context: *mut c_void) -> *mut IdBlock {
    let ps = c_uint::from(id.port_space().value());
    let key = id.key();
    let mut b = Box::new(IdBlock {
        c: RdmaCmId {
            verbs: std::ptr::null_mut(),
            channel,
            context,
            qp: std::ptr::null_mut(),
            src_addr: [0; 128],
            dst_addr: [0; 128],
            sgid: [0; 16],
            dgid: [0; 16],
            pkey: 0,
            _pad0: [0; 6],
            path_rec: std::ptr::null_mut(),
            num_paths: 0,
            _pad1: 0,
            ps,
            port_num: 0,
            _pad2: [0; 3],
            event: std::ptr::null_mut(),
            send_cq_channel: std::ptr::null_mut(),
            send_cq: std::ptr::null_mut(),
            recv_cq_channel: std::ptr::null_mut(),
            recv_cq: std::ptr::null_mut(),
            srq: std::ptr::null_mut(),
            pd: std::ptr::null_mut(),
            qp_type: IBV_QPT_RC as c_uint,
            _pad3: 0,
        },
        id,
        sync: None,
        template: None,
        made_cqs: false,
        addrinfo: Mutex::new(AddrinfoSlot::default()),
        unacked: Arc::default(),
    });
    fill(&mut b);
    let p = Box::into_raw(b);
    ids().get_or_insert_with(HashMap::new).insert(key, p as usize);
    p
}

/// The block behind an id pointer.
///
/// # Safety
/// `id` is NULL or an id from `rdma_create_id` or an event, not destroyed.
unsafe fn block<'a>(id: *mut RdmaCmId) -> Option<&'a mut IdBlock> {
    // SAFETY: per the contract; `c` is the first field of the block.
    (!id.is_null()).then(|| unsafe { &mut *(id as *mut IdBlock) })
}

/// The C handle of `id`.
fn handle_of(id: &CmId) -> *mut RdmaCmId {
    handle_in(&ids(), id).unwrap_or(std::ptr::null_mut())
}

/// The C handle of `id` in the locked map `ids`, if it has one.
fn handle_in(ids: &Option<HashMap<usize, usize>>, id: &CmId) -> Option<*mut RdmaCmId> {
    ids.as_ref().and_then(|m| m.get(&id.key()).copied()).map(|p| p as *mut RdmaCmId)
}

/// `rdma_reject` and `rdma_reject_ece`: `reject` on the id with the
/// caller's private data.
///
/// # Safety
/// `id` is NULL or a live id; `private_data` is NULL or `len` readable bytes.
unsafe fn reject_with(
    id: *mut RdmaCmId,
    private_data: *const c_void,
    len: u8,
    reject: fn(&CmId, &[u8]) -> Result<(), softroce::Error>,
) -> c_int {
    // SAFETY: per the contract.
    let Some(b) = (unsafe { block(id) }) else { return einval() };
    // SAFETY: per the contract.
    let data = unsafe { private_slice(private_data, len) };
    match reject(&b.id, data) {
        Ok(()) => 0,
        Err(e) => fail(&e),
    }
}

/// The caller's private data (NULL: none).
///
/// # Safety
/// `p` is NULL or points at `len` readable bytes that outlive the slice.
unsafe fn private_slice<'a>(p: *const c_void, len: u8) -> &'a [u8] {
    if p.is_null() {
        return &[];
    }
    // SAFETY: per the contract.
    unsafe { std::slice::from_raw_parts(p as *const u8, usize::from(len)) }
}

/// `rdma_conn_param` to softroce's, with librdmacm's defaults (NULL:
/// retry and RNR retry 7; 0xFF resources: the device's maximum).
///
/// # Safety
/// `p` is NULL or a readable `rdma_conn_param` whose private data is readable.
unsafe fn to_conn_param(p: *const RdmaConnParam, max_rd: u8) -> ConnParam {
    if p.is_null() {
        return ConnParam::null();
    }
    // SAFETY: per the contract.
    let p = unsafe { &*p };
    let data = if p.private_data.is_null() || p.private_data_len == 0 {
        Vec::new()
    } else {
        // SAFETY: the caller's private data is private_data_len bytes.
        unsafe { std::slice::from_raw_parts(p.private_data as *const u8, usize::from(p.private_data_len)) }.to_vec()
    };
    let max = |v: u8| if v == 0xff { max_rd } else { v };
    ConnParam {
        private_data: data,
        responder_resources: max(p.responder_resources),
        initiator_depth: max(p.initiator_depth),
        flow_control: p.flow_control != 0,
        retry_count: p.retry_count.min(7),
        rnr_retry_count: p.rnr_retry_count.min(7),
        srq: p.srq != 0,
        qp_num: p.qp_num,
    }
}

fn max_rd_of(b: &IdBlock) -> u8 {
    b.id.context().map_or(16, |c| c.query_device().max_qp_rd_atom.min(255) as u8)
}

ibv_export! { "RDMACM_1.0";
    /// A new event channel; its `fd` is readable while events wait.
    fn rdma_create_event_channel() -> *mut RdmaEventChannel {
        init();
        match EventChannel::new() {
            Ok(ch) => {
                let fd = ch.fd().as_raw_fd();
                Box::into_raw(Box::new(ChannelBlock { c: RdmaEventChannel { fd }, ch })) as *mut RdmaEventChannel
            }
            Err(e) => {
                fail(&e);
                std::ptr::null_mut()
            }
        }
    }
}

ibv_export! { "RDMACM_1.0";
    /// Destroys a channel from `rdma_create_event_channel`.
    fn rdma_destroy_event_channel(channel: *mut RdmaEventChannel) {
        if !channel.is_null() {
            // SAFETY: the channel came from Box::into_raw in rdma_create_event_channel.
            drop(unsafe { Box::from_raw(channel as *mut ChannelBlock) });
        }
    }
}

ibv_export! { "RDMACM_1.0";
    /// A new id whose events go to `channel`.
    fn rdma_create_id(channel: *mut RdmaEventChannel, id: *mut *mut RdmaCmId, context: *mut c_void, ps: c_uint) -> c_int {
        init();
        let Some(ps) = u16::try_from(ps).ok().and_then(PortSpace::from_value) else { return einval() };
        if id.is_null() {
            return einval();
        }
        if channel.is_null() {
            // A synchronous id: each call waits for its own event.
            return match ep::sync_id(ps, context) {
                Ok(b) => {
                    // SAFETY: the caller passes somewhere to write the id.
                    unsafe { *id = b as *mut RdmaCmId };
                    0
                }
                Err(e) => fail(&e),
            };
        }
        // SAFETY: a channel from rdma_create_event_channel; `c` is its first field.
        let ch = unsafe { &*(channel as *const ChannelBlock) };
        let b = new_block(CmId::new(&ch.ch, ps), channel, context);
        // SAFETY: the caller passes somewhere to write the id.
        unsafe { *id = b as *mut RdmaCmId };
        0
    }
}

ibv_export! { "RDMACM_1.0";
    /// Destroys an id (its QP is the caller's to destroy first).
    fn rdma_destroy_id(id: *mut RdmaCmId) -> c_int {
        if id.is_null() {
            return einval();
        }
        // SAFETY: an id from rdma_create_id or an event; the caller gives it up.
        let mut b = unsafe { Box::from_raw(id as *mut IdBlock) };
        if let Some(m) = ids().as_mut() {
            m.remove(&b.id.key());
        }
        // No event of it is handed out from here on (the lookup and the
        // count are made under the same lock): wait for those that were.
        b.unacked.wait();
        b.id.stop_listening();
        ep::release(&mut b);
        drop(b);
        0
    }
}

ibv_export! { "RDMACM_1.0";
    /// Binds the id to a local address (port 0: any).
    fn rdma_bind_addr(id: *mut RdmaCmId, addr: *mut libc::sockaddr) -> c_int {
        // SAFETY: the caller passes a live id and a sockaddr of its family.
        let (Some(b), Some(a)) = (unsafe { block(id) }, unsafe { sockaddr_of(addr) }) else { return einval() };
        match b.id.bind_addr(a) {
            Ok(()) => {
                fill(b);
                0
            }
            Err(e) => fail(&e),
        }
    }
}

ibv_export! { "RDMACM_1.0";
    /// Resolves the destination (and the source, when NULL): ADDR_RESOLVED.
    fn rdma_resolve_addr(id: *mut RdmaCmId, src_addr: *mut libc::sockaddr, dst_addr: *mut libc::sockaddr, timeout_ms: c_int) -> c_int {
        let _ = timeout_ms;
        // SAFETY: the caller passes a live id and sockaddrs of their family (src may be NULL).
        let (Some(b), src, Some(dst)) = (unsafe { block(id) }, unsafe { sockaddr_of(src_addr) }, unsafe { sockaddr_of(dst_addr) }) else {
            return einval();
        };
        match b.id.resolve_addr(src, dst) {
            Ok(()) => {
                fill(b);
                ep::complete(b)
            }
            Err(e) => fail(&e),
        }
    }
}

ibv_export! { "RDMACM_1.0";
    /// Resolves the route (local on RoCE): ROUTE_RESOLVED.
    fn rdma_resolve_route(id: *mut RdmaCmId, timeout_ms: c_int) -> c_int {
        let _ = timeout_ms;
        // SAFETY: the caller passes a live id.
        let Some(b) = (unsafe { block(id) }) else { return einval() };
        match b.id.resolve_route() {
            Ok(()) => ep::complete(b),
            Err(e) => fail(&e),
        }
    }
}

ibv_export! { "RDMACM_1.0";
    /// Creates the id's QP on `pd` (NULL: the id's default PD), in INIT.
    fn rdma_create_qp(id: *mut RdmaCmId, pd: *mut IbvPd, qp_init_attr: *mut IbvQpInitAttr) -> c_int {
        // SAFETY: the caller passes a live id.
        let Some(b) = (unsafe { block(id) }) else { return einval() };
        if qp_init_attr.is_null() {
            return einval();
        }
        let pd = if pd.is_null() { b.c.pd } else { pd };
        // SAFETY: the caller's init attr, readable and writable (librdmacm
        // writes the CQs it makes into it).
        let a = unsafe { &mut *qp_init_attr };
        if let Err(e) = ep::cqs_for(b, a) {
            return fail(&e);
        }
        if a.srq.is_null() {
            // librdmacm: the id's SRQ (rdma_create_srq), if any.
            a.srq = b.c.srq;
        }
        // SAFETY: a PD of this library and a readable init attr, as for ibv_create_qp.
        let qp = unsafe { crate::qp::ibv_create_qp(pd, qp_init_attr) };
        let r = adopt_qp(b, qp, a.send_cq, a.recv_cq, a.srq);
        if r == 0 {
            b.c.pd = pd;
        }
        r
    }
}

ibv_export! { "RDMACM_1.0";
    /// Destroys the id's QP.
    fn rdma_destroy_qp(id: *mut RdmaCmId) {
        // SAFETY: the caller passes a live id.
        if let Some(b) = unsafe { block(id) } {
            b.id.clear_qp();
            if !b.c.qp.is_null() {
                // SAFETY: the QP rdma_create_qp made, destroyed once.
                unsafe { crate::qp::ibv_destroy_qp(b.c.qp) };
                b.c.qp = std::ptr::null_mut();
            }
        }
    }
}

ibv_export! { "RDMACM_1.0";
    /// Sends the REQ.
    fn rdma_connect(id: *mut RdmaCmId, conn_param: *mut RdmaConnParam) -> c_int {
        // SAFETY: the caller passes a live id.
        let Some(b) = (unsafe { block(id) }) else { return einval() };
        // SAFETY: NULL or a readable conn param.
        let p = unsafe { to_conn_param(conn_param, max_rd_of(b)) };
        match b.id.connect(&p) {
            Ok(()) => ep::complete(b),
            Err(e) => fail(&e),
        }
    }
}

ibv_export! { "RDMACM_1.0";
    /// Listens on the bound address and port.
    fn rdma_listen(id: *mut RdmaCmId, backlog: c_int) -> c_int {
        let _ = backlog;
        // SAFETY: the caller passes a live id.
        let Some(b) = (unsafe { block(id) }) else { return einval() };
        match b.id.listen() {
            Ok(()) => 0,
            Err(e) => fail(&e),
        }
    }
}

ibv_export! { "RDMACM_1.0";
    /// Accepts a connection request (the QP goes to RTS, the REP leaves).
    /// A NULL `conn_param` takes the request's resources (librdmacm).
    fn rdma_accept(id: *mut RdmaCmId, conn_param: *mut RdmaConnParam) -> c_int {
        // SAFETY: the caller passes a live id.
        let Some(b) = (unsafe { block(id) }) else { return einval() };
        let max = max_rd_of(b);
        let p = if conn_param.is_null() {
            let (r, i) = b.id.resources();
            ConnParam { responder_resources: r.min(max), initiator_depth: i.min(max), ..ConnParam::null() }
        } else {
            // SAFETY: a readable conn param.
            unsafe { to_conn_param(conn_param, max) }
        };
        match b.id.accept(&p) {
            // A UD id's accept is its SIDR_REP: no event follows.
            Ok(()) if b.id.is_ud() => 0,
            Ok(()) => ep::complete(b),
            Err(e) => fail(&e),
        }
    }
}

ibv_export! { "RDMACM_1.0";
    /// Rejects a connection request (REJ reason 28 with `private_data`).
    fn rdma_reject(id: *mut RdmaCmId, private_data: *const c_void, private_data_len: u8) -> c_int {
        // SAFETY: the caller's live id and private data, passed on.
        unsafe { reject_with(id, private_data, private_data_len, CmId::reject) }
    }
}

ibv_export! { "RDMACM_1.3";
    /// Rejects a connection request for its ECE (REJ reason 35).
    fn rdma_reject_ece(id: *mut RdmaCmId, private_data: *const c_void, private_data_len: u8) -> c_int {
        // SAFETY: the caller's live id and private data, passed on.
        unsafe { reject_with(id, private_data, private_data_len, CmId::reject_ece) }
    }
}

ibv_export! { "RDMACM_1.3";
    /// The ECE this side's REQ or REP carries (its vendor ID).
    fn rdma_set_local_ece(id: *mut RdmaCmId, ece: *mut IbvEce) -> c_int {
        // SAFETY: the caller passes a live id and a readable ibv_ece.
        let (Some(b), false) = (unsafe { block(id) }, ece.is_null()) else { return einval() };
        // SAFETY: checked for NULL.
        b.id.set_local_ece(unsafe { (*ece).vendor_id });
        0
    }
}

ibv_export! { "RDMACM_1.3";
    /// The ECE the peer's REQ or REP carried (its vendor ID; options 0).
    fn rdma_get_remote_ece(id: *mut RdmaCmId, ece: *mut IbvEce) -> c_int {
        // SAFETY: the caller passes a live id and a writable ibv_ece.
        let (Some(b), false) = (unsafe { block(id) }, ece.is_null()) else { return einval() };
        // SAFETY: checked for NULL.
        unsafe { ece.write(IbvEce { vendor_id: b.id.remote_ece(), options: 0, comp_mask: 0 }) };
        0
    }
}

/// `IBV_EVENT_COMM_EST`.
const IBV_EVENT_COMM_EST: c_int = 4;

ibv_export! { "RDMACM_1.0";
    /// Tells the CM of a QP event: COMM_EST (traffic before the RTU)
    /// establishes a passive connection; other events change nothing.
    fn rdma_notify(id: *mut RdmaCmId, event: c_int) -> c_int {
        // SAFETY: the caller passes a live id.
        let Some(b) = (unsafe { block(id) }) else { return einval() };
        if event != IBV_EVENT_COMM_EST {
            return 0;
        }
        match b.id.notify_established() {
            Ok(()) => 0,
            Err(e) => fail(&e),
        }
    }
}

ibv_export! { "RDMACM_1.0";
    /// The contexts rdma_cm uses, one per device, NULL-terminated; the
    /// array is the caller's to free with `rdma_free_devices`.
    fn rdma_get_devices(num_devices: *mut c_int) -> *mut *mut IbvContext {
        init();
        let devs = softroce::devices().unwrap_or_default();
        let mut list: Vec<*mut IbvContext> = devs.iter().filter_map(|d| verbs_of(d).map(|(c, _)| c)).collect();
        if !num_devices.is_null() {
            // SAFETY: the caller's int.
            unsafe { *num_devices = list.len() as c_int };
        }
        list.push(std::ptr::null_mut());
        Box::into_raw(list.into_boxed_slice()) as *mut *mut IbvContext
    }
}

ibv_export! { "RDMACM_1.0";
    /// Frees a list from `rdma_get_devices` (the contexts stay rdma_cm's).
    fn rdma_free_devices(list: *mut *mut IbvContext) {
        if list.is_null() {
            return;
        }
        let mut n = 0;
        // SAFETY: a NULL-terminated array from rdma_get_devices.
        while !unsafe { *list.add(n) }.is_null() {
            n += 1;
        }
        // SAFETY: the boxed slice rdma_get_devices made: n entries and the NULL.
        drop(unsafe { Box::from_raw(std::ptr::slice_from_raw_parts_mut(list, n + 1)) });
    }
}

ibv_export! { "RDMACM_1.0";
    /// Moves the QP to ERR and sends the DREQ (or the DREP).
    fn rdma_disconnect(id: *mut RdmaCmId) -> c_int {
        // SAFETY: the caller passes a live id.
        let Some(b) = (unsafe { block(id) }) else { return einval() };
        match b.id.disconnect() {
            Ok(()) => 0,
            Err(e) => fail(&e),
        }
    }
}

thread_local! {
    /// What a thread waiting in `rdma_get_cm_event` keeps across its waits:
    /// the channel's queue and descriptor. The channel block is not
    /// touched again once waiting: a program may destroy the channel while
    /// a thread of its own waits on it (rping does as it exits, its
    /// cm_thread never joined), and the waiter waits on, as a read of the
    /// kernel's closed rdma_cm fd does, instead of reading freed memory.
    /// Dropped with the thread when it is cancelled.
    static CM_WAIT: std::cell::RefCell<Option<(EventChannel, c_int)>> = const { std::cell::RefCell::new(None) };
}

ibv_export_blocking! { "RDMACM_1.0";
    /// The next event of the channel: waits, or fails with EAGAIN when the
    /// channel's fd is O_NONBLOCK and none waits; a cancellation point.
    /// Events of destroyed ids are passed over.
    fn rdma_get_cm_event(channel: *mut RdmaEventChannel, event: *mut *mut RdmaCmEvent) -> c_int, |again| {
        let kept = kept(&CM_WAIT, again, || {
            if channel.is_null() || event.is_null() {
                return Err(libc::EINVAL);
            }
            // SAFETY: a channel from rdma_create_event_channel.
            let ch = unsafe { &*(channel as *const ChannelBlock) };
            Ok((ch.ch.clone(), ch.c.fd))
        });
        let (chan, fd) = match kept {
            Ok(k) => k,
            Err(step) => return step,
        };
        let done = |r| finished(&CM_WAIT, r);
        let (e, handles) = loop {
            let Some(e) = chan.get_event(Some(Duration::ZERO)) else {
                if crate::fd::nonblocking(fd) {
                    set_errno(libc::EAGAIN);
                    return done(-1);
                }
                return Step::Wait(fd);
            };
            // An event of an id the consumer destroyed meanwhile (a REJECTED
            // or TIMEWAIT_EXIT that raced the destroy) is dropped, as
            // librdmacm's destroy drops the kernel's: its id pointer would
            // be dangling. The handles are looked up, and the event counted
            // on its id, under the lock `rdma_destroy_id` removes them
            // under: a destroy waits for the ack of an event handed out.
            if let Some(h) = counted_handles(&e) {
                break (e, h);
            }
        };
        let eb = event_block(e, channel, handles);
        // SAFETY: the caller passes somewhere to write the event.
        unsafe { *event = eb as *mut RdmaCmEvent };
        done(0)
    }
}

/// The C handles of an event's id and listener, the event counted on the
/// one it belongs to (the listener for a request). `None`: that id was
/// destroyed.
fn counted_handles(e: &Event) -> Option<Handles> {
    let ids = ids();
    let look = |id: &CmId| handle_in(&ids, id);
    let listen = e.listen_id.as_ref().and_then(look);
    let (id, owner) = match e.event {
        EventType::ConnectRequest => (std::ptr::null_mut(), listen?),
        _ => {
            let h = look(&e.id)?;
            (h, h)
        }
    };
    // SAFETY: a handle in IDS is a live block, and it stays live while the
    // lock is held (rdma_destroy_id removes it under the lock first).
    let counted = unsafe { block(owner) }.map(|b| b.unacked.take());
    Some(Handles { id, listen: listen.unwrap_or(std::ptr::null_mut()), counted })
}

/// An event's C handles (see [`counted_handles`]).
pub(super) struct Handles {
    /// The id's (NULL for a request: its new id is made with the event).
    id: *mut RdmaCmId,
    listen: *mut RdmaCmId,
    counted: Option<Counted>,
}

impl Handles {
    /// The handles of an event a synchronous id's own call waited for: the
    /// caller's id, which it does not destroy while its call runs, so the
    /// event is not counted.
    pub(super) fn of(e: &Event) -> Handles {
        Handles {
            id: if e.event == EventType::ConnectRequest { std::ptr::null_mut() } else { handle_of(&e.id) },
            listen: e.listen_id.as_ref().map_or(std::ptr::null_mut(), handle_of),
            counted: None,
        }
    }
}

/// The C event for `e`: a new C id for a connection request, the
/// parameters and private data copied into the block.
fn event_block(e: Event, channel: *mut RdmaEventChannel, handles: Handles) -> *mut EventBlock {
    let Handles { id: h, listen, counted } = handles;
    let id = match e.event {
        EventType::ConnectRequest => {
            // The new id inherits the listener's context pointer.
            // SAFETY: the listener's handle is live (it has an event).
            let (context, sync) =
                unsafe { block(listen) }.map_or((std::ptr::null_mut(), false), |l| (l.c.context, l.sync.is_some()));
            let child = new_block(e.id.clone(), channel, context);
            if sync {
                // The child of a synchronous listener is synchronous (librdmacm
                // migrates it to a channel of its own).
                // SAFETY: the block just made.
                let _ = ep::make_sync(unsafe { &mut *child });
            }
            child as *mut RdmaCmId
        }
        _ => {
            // SAFETY: a live handle of this id (its destroy waits for this
            // event's ack, or the caller's own synchronous call runs).
            if let Some(b) = unsafe { block(h) } {
                fill(b);
            }
            h
        }
    };
    let mut eb = Box::new(EventBlock {
        c: RdmaCmEvent { id, listen_id: listen, event: e.event as c_uint, status: e.status, param: [0; 7] },
        private: [0; 256],
        _counted: counted,
    });
    let n = e.conn.private_data.len().min(255);
    eb.private[..n].copy_from_slice(&e.conn.private_data[..n]);
    let cp = RdmaConnParam {
        private_data: if n > 0 { eb.private.as_ptr() as *const c_void } else { std::ptr::null() },
        private_data_len: n as u8,
        responder_resources: e.conn.responder_resources,
        initiator_depth: e.conn.initiator_depth,
        flow_control: u8::from(e.conn.flow_control),
        retry_count: e.conn.retry_count,
        rnr_retry_count: e.conn.rnr_retry_count,
        srq: u8::from(e.conn.srq),
        qp_num: e.conn.qp_num,
    };
    match e.ud {
        None => {
            // SAFETY: the 56-byte param union holds an rdma_conn_param (24 bytes) at its start.
            unsafe { std::ptr::write(eb.c.param.as_mut_ptr() as *mut RdmaConnParam, cp) };
        }
        Some(ud) => {
            // SAFETY: an all-zero ibv_ah_attr is valid (plain integers and a byte union).
            let mut ah_attr: IbvAhAttr = unsafe { std::mem::zeroed() };
            if let Some(ah) = &ud.ah {
                crate::qp::write_ah_attr(&mut ah_attr, ah);
                ah_attr.grh.flow_label = ud.flow_label;
            }
            // MULTICAST_JOIN: the private data is the join's context pointer.
            let (private_data, private_data_len) = match e.event {
                EventType::MulticastJoin => (e.context as *const c_void, 0),
                _ => (cp.private_data, cp.private_data_len),
            };
            let up = RdmaUdParam { private_data, private_data_len, ah_attr, qp_num: ud.qp_num, qkey: ud.qkey };
            // SAFETY: the param union is rdma_ud_param's 56 bytes (checked against the header).
            unsafe { std::ptr::write(eb.c.param.as_mut_ptr() as *mut RdmaUdParam, up) };
        }
    }
    if e.event == EventType::User {
        // rdma-core 65: the union's third member, `uint64_t arg`, alone.
        eb.c.param = [e.arg, 0, 0, 0, 0, 0, 0];
    }
    Box::into_raw(eb)
}

ibv_export! { "RDMACM_1.0";
    /// Frees an event from `rdma_get_cm_event`.
    fn rdma_ack_cm_event(event: *mut RdmaCmEvent) -> c_int {
        if event.is_null() {
            return einval();
        }
        // SAFETY: the event came from Box::into_raw in event_block; the caller gives it up.
        drop(unsafe { Box::from_raw(event as *mut EventBlock) });
        0
    }
}

ibv_export! { "RDMACM_1.0";
    /// The name of an event type ("UNKNOWN EVENT" for others, and for
    /// RDMA_CM_EVENT_USER, which librdmacm 65 does not name either).
    fn rdma_event_str(event: c_uint) -> *const c_char {
        EventType::from_raw(event)
            .filter(|&e| e != EventType::User)
            .map_or(c"UNKNOWN EVENT", EventType::c_name)
            .as_ptr()
    }
}

ibv_export! { "RDMACM_1.2";
    /// Sends the RTU for an id that took CONNECT_RESPONSE (no QP of its own).
    fn rdma_establish(id: *mut RdmaCmId) -> c_int {
        // SAFETY: the caller passes a live id.
        let Some(b) = (unsafe { block(id) }) else { return einval() };
        match b.id.establish() {
            Ok(()) => 0,
            Err(e) => fail(&e),
        }
    }
}

ibv_export! { "RDMACM_1.2";
    /// The attributes that move a QP of this connection to `qp_attr.qp_state`.
    fn rdma_init_qp_attr(id: *mut RdmaCmId, qp_attr: *mut IbvQpAttr, qp_attr_mask: *mut c_int) -> c_int {
        // SAFETY: the caller passes a live id.
        let Some(b) = (unsafe { block(id) }) else { return einval() };
        if qp_attr.is_null() || qp_attr_mask.is_null() {
            return einval();
        }
        // SAFETY: the caller's qp_attr is readable and writable.
        let out = unsafe { &mut *qp_attr };
        let Some(state) = QpState::from_raw(out.qp_state) else { return einval() };
        match b.id.qp_attr(state) {
            Ok((a, m)) => {
                crate::qp::write_qp_attr(out, &a);
                // SAFETY: the caller's mask is writable.
                unsafe { *qp_attr_mask = m.0 as c_int };
                0
            }
            Err(e) => fail(&e),
        }
    }
}

/// An `rdma_addrinfo` entry of `family` with the hints' flags, QP type and
/// port space (RC and RDMA_PS_TCP by default), and no addresses.
fn addrinfo_entry(h: Option<&RdmaAddrinfo>, family: c_int) -> RdmaAddrinfo {
    RdmaAddrinfo {
        ai_flags: h.map_or(0, |h| h.ai_flags),
        ai_family: family,
        ai_qp_type: h
            .map_or(IBV_QPT_RC as c_int, |h| if h.ai_qp_type != 0 { h.ai_qp_type } else { IBV_QPT_RC as c_int }),
        ai_port_space: h.map_or(RDMA_PS_TCP as c_int, |h| {
            if h.ai_port_space != 0 { h.ai_port_space } else { RDMA_PS_TCP as c_int }
        }),
        ai_src_len: 0,
        ai_dst_len: 0,
        ai_src_addr: std::ptr::null_mut(),
        ai_dst_addr: std::ptr::null_mut(),
        ai_src_canonname: std::ptr::null_mut(),
        ai_dst_canonname: std::ptr::null_mut(),
        ai_route_len: 0,
        ai_route: std::ptr::null_mut(),
        ai_connect_len: 0,
        ai_connect: std::ptr::null_mut(),
        ai_next: std::ptr::null_mut(),
    }
}

/// A malloc'd copy of the `len`-byte address at `a` (NULL, 0 for none),
/// freed by `rdma_freeaddrinfo`.
///
/// # Safety
/// `a` is NULL or points at `len` readable bytes.
unsafe fn copy_sockaddr(a: *const libc::sockaddr, len: u32) -> (*mut libc::sockaddr, u32) {
    if a.is_null() || len == 0 {
        return (std::ptr::null_mut(), 0);
    }
    // SAFETY: malloc of len bytes, filled from the caller's address of that length.
    unsafe {
        let p = libc::malloc(len as usize) as *mut libc::sockaddr;
        if p.is_null() {
            return (p, 0);
        }
        std::ptr::copy_nonoverlapping(a as *const u8, p as *mut u8, len as usize);
        (p, len)
    }
}

ibv_export! { "RDMACM_1.0";
    /// Addresses for rdma_cm (`getaddrinfo` plus the QP type and port space).
    fn rdma_getaddrinfo(node: *const c_char, service: *const c_char, hints: *const RdmaAddrinfo, res: *mut *mut RdmaAddrinfo) -> c_int {
        init();
        // SAFETY: NULL or the caller's readable hints.
        let h = unsafe { hints.as_ref() };
        if res.is_null() || (node.is_null() && service.is_null() && h.is_none()) {
            return einval();
        }
        let passive = h.is_some_and(|h| h.ai_flags & RAI_PASSIVE != 0);
        if node.is_null() && service.is_null() {
            // librdmacm: the hints' own addresses (libfabric passes them so).
            let h = h.expect("checked");
            let mut e = addrinfo_entry(Some(h), h.ai_family);
            // SAFETY: the hints' addresses are their lengths long.
            unsafe {
                (e.ai_src_addr, e.ai_src_len) = copy_sockaddr(h.ai_src_addr, h.ai_src_len);
                (e.ai_dst_addr, e.ai_dst_len) = copy_sockaddr(h.ai_dst_addr, h.ai_dst_len);
            }
            // SAFETY: the caller passes somewhere to write the list.
            unsafe { *res = Box::into_raw(Box::new(e)) };
            return 0;
        }
        // SAFETY: a zeroed addrinfo is a valid hints value.
        let mut ai: libc::addrinfo = unsafe { std::mem::zeroed() };
        ai.ai_family = h.map_or(libc::AF_UNSPEC, |h| h.ai_family);
        ai.ai_socktype = libc::SOCK_STREAM;
        ai.ai_flags = if passive { libc::AI_PASSIVE } else { 0 } | if h.is_some_and(|h| h.ai_flags & 2 != 0) { libc::AI_NUMERICHOST } else { 0 };
        let mut list: *mut libc::addrinfo = std::ptr::null_mut();
        // SAFETY: NULL or NUL-terminated strings from the caller; `list` receives the result.
        let r = unsafe { libc::getaddrinfo(node, service, &ai, &mut list) };
        if r != 0 {
            return r;
        }
        let mut head: *mut RdmaAddrinfo = std::ptr::null_mut();
        let mut tail: *mut *mut RdmaAddrinfo = &mut head;
        let mut cur = list;
        while !cur.is_null() {
            // SAFETY: an entry of getaddrinfo's list.
            let c = unsafe { &*cur };
            if matches!(c.ai_family, libc::AF_INET | libc::AF_INET6) {
                // SAFETY: getaddrinfo's address is ai_addrlen bytes long.
                let (addr, len) = unsafe { copy_sockaddr(c.ai_addr, c.ai_addrlen) };
                let mut e = addrinfo_entry(h, c.ai_family);
                if passive {
                    (e.ai_src_addr, e.ai_src_len) = (addr, len);
                } else {
                    (e.ai_dst_addr, e.ai_dst_len) = (addr, len);
                    // librdmacm: a source the hints name goes with it.
                    if let Some(h) = h {
                        // SAFETY: the hints' source is its length long.
                        (e.ai_src_addr, e.ai_src_len) = unsafe { copy_sockaddr(h.ai_src_addr, h.ai_src_len) };
                    }
                }
                let b = Box::into_raw(Box::new(e));
                // SAFETY: `tail` points at the last `next` field (or `head`).
                unsafe {
                    *tail = b;
                    tail = &mut (*b).ai_next;
                }
            }
            cur = c.ai_next;
        }
        // SAFETY: the list from getaddrinfo, freed once.
        unsafe { libc::freeaddrinfo(list) };
        if head.is_null() {
            return libc::EAI_NONAME;
        }
        // SAFETY: the caller passes somewhere to write the list.
        unsafe { *res = head };
        0
    }
}

ibv_export! { "RDMACM_1.0";
    /// Frees a list from `rdma_getaddrinfo`.
    fn rdma_freeaddrinfo(res: *mut RdmaAddrinfo) {
        let mut cur = res;
        while !cur.is_null() {
            // SAFETY: an entry made by Box::into_raw in rdma_getaddrinfo, freed once.
            let b = unsafe { Box::from_raw(cur) };
            // SAFETY: the addresses came from malloc (or are NULL).
            unsafe {
                libc::free(b.ai_src_addr as *mut c_void);
                libc::free(b.ai_dst_addr as *mut c_void);
            }
            cur = b.ai_next;
        }
    }
}

ibv_export! { "RDMACM_1.0";
    /// Creates the id's QP from extended attributes (`attr.pd` NULL: the id's
    /// default PD), in INIT.
    fn rdma_create_qp_ex(id: *mut RdmaCmId, qp_init_attr: *mut IbvQpInitAttrEx) -> c_int {
        // SAFETY: the caller passes a live id.
        let Some(b) = (unsafe { block(id) }) else { return einval() };
        if qp_init_attr.is_null() {
            return einval();
        }
        // SAFETY: the caller's attributes, readable and writable.
        let a = unsafe { &mut *qp_init_attr };
        if a.pd.is_null() {
            a.pd = b.c.pd;
            a.comp_mask |= IBV_QP_INIT_ATTR_PD;
        }
        // SAFETY: a context of this library and readable attributes, as for ibv_create_qp_ex.
        let qp = unsafe { crate::qp::create_qp_ex(b.c.verbs, qp_init_attr) };
        adopt_qp(b, qp, a.send_cq, a.recv_cq, a.srq)
    }
}

/// Makes `qp` (just created, or NULL on failure) the id's QP.
fn adopt_qp(b: &mut IdBlock, qp: *mut IbvQp, send_cq: *mut IbvCq, recv_cq: *mut IbvCq, srq: *mut IbvSrq) -> c_int {
    if qp.is_null() {
        return -1;
    }
    // SAFETY: a QP just made by this library.
    let obj = unsafe { crate::qp::qp_obj(qp) }.expect("not NULL");
    if let Err(e) = b.id.set_qp(obj.qp.clone()) {
        // SAFETY: the QP just made, destroyed once.
        unsafe { crate::qp::ibv_destroy_qp(qp) };
        return fail(&e);
    }
    b.c.qp = qp;
    (b.c.send_cq, b.c.recv_cq, b.c.srq) = (send_cq, recv_cq, srq);
    0
}

/// `RDMA_OPTION_ID` and its options (`<rdma/rdma_cma.h>`).
const RDMA_OPTION_ID: c_int = 0;
const RDMA_OPTION_ID_TOS: c_int = 0;
const RDMA_OPTION_ID_REUSEADDR: c_int = 1;
const RDMA_OPTION_ID_AFONLY: c_int = 2;
const RDMA_OPTION_ID_ACK_TIMEOUT: c_int = 3;

ibv_export! { "RDMACM_1.0";
    /// Sets an id option: TOS (the path's traffic class), ACK_TIMEOUT (the
    /// QP's), AFONLY (an IPv6 listener takes IPv6 requests only, so an IPv4
    /// one may share its port) and REUSEADDR (accepted: softroce's port
    /// space does not hold ports in timewait).
    /// `RDMA_OPTION_IB_PATH` is refused with ENOSYS (RoCE paths are built locally).
    fn rdma_set_option(id: *mut RdmaCmId, level: c_int, optname: c_int, optval: *mut c_void, optlen: usize) -> c_int {
        // SAFETY: the caller passes a live id.
        let Some(b) = (unsafe { block(id) }) else { return einval() };
        if optval.is_null() {
            return einval();
        }
        // SAFETY: optval holds optlen readable bytes.
        let bytes = unsafe { std::slice::from_raw_parts(optval as *const u8, optlen) };
        match (level, optname) {
            (RDMA_OPTION_ID, RDMA_OPTION_ID_TOS) if optlen == 1 => b.id.set_tos(bytes[0]),
            (RDMA_OPTION_ID, RDMA_OPTION_ID_ACK_TIMEOUT) if optlen == 1 => b.id.set_ack_timeout(bytes[0]),
            (RDMA_OPTION_ID, RDMA_OPTION_ID_AFONLY) if optlen == 4 => {
                b.id.set_afonly(i32::from_ne_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]) != 0)
            }
            (RDMA_OPTION_ID, RDMA_OPTION_ID_REUSEADDR) if optlen == 4 => {}
            (RDMA_OPTION_ID, _) => return einval(),
            _ => {
                set_errno(libc::ENOSYS);
                return -1;
            }
        }
        0
    }
}

ibv_export! { "RDMACM_1.0";
    /// Moves the id's future events to `channel`.
    fn rdma_migrate_id(id: *mut RdmaCmId, channel: *mut RdmaEventChannel) -> c_int {
        // SAFETY: the caller passes a live id.
        let Some(b) = (unsafe { block(id) }) else { return einval() };
        if channel.is_null() {
            // To a channel of its own: the id becomes synchronous.
            return match ep::make_sync(b) {
                Ok(()) => 0,
                Err(e) => fail(&e),
            };
        }
        // SAFETY: a channel from rdma_create_event_channel.
        let ch = unsafe { &*(channel as *const ChannelBlock) };
        b.id.migrate(&ch.ch);
        b.c.channel = channel;
        b.sync = None;
        0
    }
}

/// The port of a stored `sockaddr` (network order), 0 for none.
fn port_be(sa: &[u8; 128]) -> u16 {
    u16::from_ne_bytes([sa[2], sa[3]])
}

ibv_export! { "RDMACM_1.0";
    /// The id's local port, in network byte order.
    fn rdma_get_src_port(id: *mut RdmaCmId) -> u16 {
        // SAFETY: the caller passes a live id.
        unsafe { block(id) }.map_or(0, |b| port_be(&b.c.src_addr))
    }
}

ibv_export! { "RDMACM_1.0";
    /// The id's peer port, in network byte order.
    fn rdma_get_dst_port(id: *mut RdmaCmId) -> u16 {
        // SAFETY: the caller passes a live id.
        unsafe { block(id) }.map_or(0, |b| port_be(&b.c.dst_addr))
    }
}

/// Joins `addr`'s group with `join_flags` (see [`CmId::join_multicast`]).
///
/// # Safety
/// `id` is NULL or a live id; `addr` is NULL or a `sockaddr` of its family's size.
unsafe fn join(id: *mut RdmaCmId, addr: *const libc::sockaddr, join_flags: u32, context: *mut c_void) -> c_int {
    // SAFETY: per the contract.
    let (Some(b), Some(group)) = (unsafe { block(id) }, unsafe { sockaddr_of(addr) }) else { return einval() };
    let send_only = join_flags == RDMA_MC_JOIN_FLAG_SENDONLY_FULLMEMBER;
    match b.id.join_multicast(group.ip(), send_only, context as usize) {
        // A synchronous id waits for MULTICAST_JOIN, as librdmacm's `ucma_complete`.
        Ok(()) => ep::complete(b),
        Err(e) => fail(&e),
    }
}

ibv_export! { "RDMACM_1.0";
    /// Joins a multicast group as a full member: MULTICAST_JOIN follows,
    /// carrying `context` in `param.ud.private_data`; the id's QP is
    /// attached to the group.
    fn rdma_join_multicast(id: *mut RdmaCmId, addr: *mut libc::sockaddr, context: *mut c_void) -> c_int {
        // SAFETY: the caller's id and sockaddr.
        unsafe { join(id, addr, RDMA_MC_JOIN_FLAG_FULLMEMBER, context) }
    }
}

ibv_export! { "RDMACM_1.1";
    /// Joins a multicast group with flags: a send-only member's QP is not
    /// attached. librdmacm's checks: unknown mask bits ENOTSUP, no address
    /// or no (valid) join flags EINVAL.
    fn rdma_join_multicast_ex(id: *mut RdmaCmId, attr: *mut RdmaCmJoinMcAttrEx, context: *mut c_void) -> c_int {
        // SAFETY: the caller's attributes (checked for NULL).
        let Some(a) = (unsafe { attr.as_ref() }) else { return einval() };
        if a.comp_mask >= RDMA_CM_JOIN_MC_ATTR_RESERVED {
            set_errno(libc::ENOTSUP);
            return -1;
        }
        if a.comp_mask & RDMA_CM_JOIN_MC_ATTR_ADDRESS == 0
            || a.comp_mask & RDMA_CM_JOIN_MC_ATTR_JOIN_FLAGS == 0
            || a.join_flags >= RDMA_MC_JOIN_FLAG_RESERVED
        {
            return einval();
        }
        // SAFETY: the caller's id and the attributes' sockaddr.
        unsafe { join(id, a.addr, a.join_flags, context) }
    }
}

ibv_export! { "RDMACM_1.0";
    /// Leaves a multicast group (the QP is detached); EADDRNOTAVAIL for a
    /// group the id did not join.
    fn rdma_leave_multicast(id: *mut RdmaCmId, addr: *mut libc::sockaddr) -> c_int {
        // SAFETY: the caller's id and sockaddr.
        let (Some(b), Some(group)) = (unsafe { block(id) }, unsafe { sockaddr_of(addr) }) else { return einval() };
        if b.id.leave_multicast(group.ip()) {
            0
        } else {
            set_errno(libc::EADDRNOTAVAIL);
            -1
        }
    }
}

ibv_export! { "RDMACM_1.4";
    /// Queues an RDMA_CM_EVENT_USER on the id's channel, which
    /// `rdma_get_cm_event` returns with `status` and with `arg` in
    /// `param.arg` (librdmacm 65: a way to wake a thread waiting for
    /// events). Any other event type is EINVAL, as in librdmacm.
    fn rdma_write_cm_event(id: *mut RdmaCmId, event: c_uint, status: c_int, arg: u64) -> c_int {
        if event != EventType::User as c_uint {
            return einval();
        }
        // SAFETY: the caller passes a live id.
        let Some(b) = (unsafe { block(id) }) else { return einval() };
        match b.id.write_event(EventType::User, status, arg) {
            Ok(()) => 0,
            Err(e) => fail(&e),
        }
    }
}

/// `rdma_resolve_addrinfo`'s work once the id is marked resolving: the
/// answer stored and RDMA_CM_EVENT_ADDRINFO_RESOLVED queued, or the errno.
///
/// # Safety
/// `node` and `service` are NULL or NUL-terminated; `hints` is NULL or a
/// readable `rdma_addrinfo` whose addresses are their lengths long.
unsafe fn resolve_addrinfo(
    b: &IdBlock,
    node: *const c_char,
    service: *const c_char,
    hints: *const RdmaAddrinfo,
) -> Result<(), c_int> {
    // SAFETY: per the contract.
    let flags = unsafe { hints.as_ref() }.map_or(0, |h| h.ai_flags);
    if flags & RAI_SA != 0 {
        // librdmacm 65's checks, then the kernel's `rdma_resolve_ib_service`:
        // EINVAL unless bound to a device, EOPNOTSUPP on a port without an
        // IB SA, which every RoCE port is. (librdmacm then overwrites that
        // errno with -1; the kernel's is the one that says why.)
        if flags & RAI_DNS != 0 || !node.is_null() {
            return Err(libc::ENOTSUP);
        }
        if service.is_null() {
            return Err(libc::EINVAL);
        }
        let bound = b.id.state() == softroce::rdma_cm::IdState::AddrBound && b.id.device().is_some();
        return Err(if bound { libc::EOPNOTSUPP } else { libc::EINVAL });
    }
    let mut res: *mut RdmaAddrinfo = std::ptr::null_mut();
    // SAFETY: per the contract; `res` receives the list.
    let r = unsafe { rdma_getaddrinfo(node, service, hints, &mut res) };
    match r {
        0 => {}
        // rdma_getaddrinfo's own failure, its errno set.
        -1 => return Err(std::io::Error::last_os_error().raw_os_error().unwrap_or(libc::EINVAL)),
        // getaddrinfo's EAI_* code: librdmacm 65 puts it in errno as it is.
        eai => return Err(eai),
    }
    let list = AiList(res);
    b.addrinfo.lock().unwrap_or_else(|e| e.into_inner()).resolved = Some(list);
    b.id.write_event(EventType::AddrinfoResolved, 0, 0).map_err(|e| {
        b.addrinfo.lock().unwrap_or_else(|e| e.into_inner()).resolved = None;
        crate::errno::errno(&e)
    })
}

ibv_export! { "RDMACM_1.4";
    /// `rdma_getaddrinfo`, reported as an event: the answer is kept for
    /// `rdma_query_addrinfo` and RDMA_CM_EVENT_ADDRINFO_RESOLVED goes to
    /// the id's channel (a synchronous id waits for it), as librdmacm 65's
    /// DNS path does. EBUSY while an answer waits to be queried. With
    /// `RAI_SA` (an IB SA service query): ENOTSUP with a node or RAI_DNS,
    /// EINVAL without a service or a bound device, else EOPNOTSUPP, the
    /// kernel's answer for a RoCE port. A name that does not resolve fails
    /// here, with getaddrinfo's EAI_* code in errno (librdmacm's), and no
    /// event follows.
    fn rdma_resolve_addrinfo(id: *mut RdmaCmId, node: *const c_char, service: *const c_char, hints: *const RdmaAddrinfo) -> c_int {
        init();
        // SAFETY: the caller passes a live id.
        let Some(b) = (unsafe { block(id) }) else { return einval() };
        {
            let mut slot = b.addrinfo.lock().unwrap_or_else(|e| e.into_inner());
            if slot.resolving {
                set_errno(libc::EBUSY);
                return -1;
            }
            slot.resolving = true;
        }
        // SAFETY: the caller's strings and hints, as for rdma_getaddrinfo.
        match unsafe { resolve_addrinfo(b, node, service, hints) } {
            Ok(()) => ep::complete(b),
            Err(errno) => {
                b.addrinfo.lock().unwrap_or_else(|e| e.into_inner()).resolving = false;
                set_errno(errno);
                -1
            }
        }
    }
}

ibv_export! { "RDMACM_1.4";
    /// Hands over what `rdma_resolve_addrinfo` resolved (the caller frees
    /// it with `rdma_freeaddrinfo`) and ends that resolution. ENOENT when
    /// there is none, or it was handed over already (librdmacm 65).
    fn rdma_query_addrinfo(id: *mut RdmaCmId, info: *mut *mut RdmaAddrinfo) -> c_int {
        // SAFETY: the caller passes a live id.
        let (Some(b), false) = (unsafe { block(id) }, info.is_null()) else { return einval() };
        let mut slot = b.addrinfo.lock().unwrap_or_else(|e| e.into_inner());
        let list = match slot.resolved.take() {
            Some(l) if slot.resolving => l,
            other => {
                slot.resolved = other;
                set_errno(libc::ENOENT);
                return -1;
            }
        };
        slot.resolving = false;
        // SAFETY: checked for NULL: the caller's pointer to write the list to.
        unsafe { *info = list.into_raw() };
        0
    }
}
