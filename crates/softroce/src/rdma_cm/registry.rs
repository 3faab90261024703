//! The process's devices for rdma_cm: one context and one [`CmService`]
//! per device (`DEVICES`, [`device_for`]), the routes from the service's
//! events to the ids (by comm ID) and from REQs to the listener of their
//! service ID (`Routes`, `Listening`, `Dev::route`), the source address
//! for a destination, and the `atexit` hook that ends open connections.
//! Touch here how ids find their device and how CM events find their id.

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex, OnceLock, Weak};

use roce_cm::cm::{CmEvent, CommId, SidrAnswer};
use roce_cm::wire::{CmaHdrRepr, IpServiceId, RejReason, ReqRepr, SidrReqRepr, SidrStatus};

use super::id::{Id, IdInner, random_u32};
use super::service::CmService;
use super::{CmId, ConnParam, Event, EventType, IdState, UdParam};
use crate::Context;
use crate::config::DeviceInfo;
use crate::error::Error;

/// One device of the process: its context and CM, and the ids using it.
pub(super) struct Dev {
    pub(super) info: DeviceInfo,
    pub(super) ctx: Context,
    pub(super) cm: CmService,
    pub(super) routes: Mutex<Routes>,
}

impl std::fmt::Debug for Dev {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Dev").field("name", &self.info.name).finish()
    }
}

#[derive(Default)]
pub(super) struct Routes {
    pub(super) by_comm: HashMap<CommId, Weak<IdInner>>,
    pub(super) listeners: HashMap<u64, Listening>,
}

/// The ids listening on one service ID of a device, by the family of the
/// requests they take: an IPv4 id takes IPv4's, an IPv6 id both unless it
/// set `RDMA_OPTION_ID_AFONLY` (the kernel's cma binds ports the same way,
/// so a server may listen on 0.0.0.0:P and, AFONLY, on [::]:P).
#[derive(Default)]
pub(super) struct Listening {
    pub(super) v4: Option<Weak<IdInner>>,
    pub(super) v6: Option<Weak<IdInner>>,
}

impl Listening {
    /// The slots an id listening from `src` takes: (IPv4, IPv6).
    pub(super) fn claims(src: IpAddr, afonly: bool) -> (bool, bool) {
        match src {
            IpAddr::V4(_) => (true, false),
            IpAddr::V6(a) if a.to_ipv4_mapped().is_some() => (true, false),
            IpAddr::V6(_) => (!afonly, true),
        }
    }

    /// Whether a live id holds one of the slots `(v4, v6)`.
    pub(super) fn taken(&self, (v4, v6): (bool, bool)) -> bool {
        let live = |w: &Option<Weak<IdInner>>| w.as_ref().is_some_and(|w| w.strong_count() > 0);
        (v4 && live(&self.v4)) || (v6 && live(&self.v6))
    }

    /// Whether no live id listens any more.
    pub(super) fn is_empty(&self) -> bool {
        !self.taken((true, true))
    }

    /// The id taking requests of the family `v6`.
    fn for_family(&self, v6: bool) -> Option<CmId> {
        (if v6 { &self.v6 } else { &self.v4 }).as_ref().and_then(Weak::upgrade).map(CmId)
    }

    /// Drops `me` from the slots it holds.
    pub(super) fn remove(&mut self, me: *const IdInner) {
        for slot in [&mut self.v4, &mut self.v6] {
            if slot.as_ref().is_some_and(|w| std::ptr::eq(w.as_ptr(), me)) {
                *slot = None;
            }
        }
    }
}

/// The process's devices, opened on first use, with the pid that opened
/// them: a `fork()` child (qperf's server forks one per client) opens its
/// own, since the parent's CM threads are not in it.
static DEVICES: Mutex<(u32, Vec<Arc<Dev>>)> = Mutex::new((0, Vec::new()));

/// How a device's context is opened for rdma_cm (see [`set_context_opener`]).
pub type ContextOpener = Box<dyn Fn(&DeviceInfo) -> Result<Context, Error> + Send + Sync>;

static OPENER: OnceLock<ContextOpener> = OnceLock::new();

/// Opens rdma_cm's device contexts with `f` instead of
/// [`Context::open_with`]: the drop-in libraries share one context per
/// device between libibverbs and librdmacm, as rdma-core's do. Only the
/// first call counts.
pub fn set_context_opener(f: ContextOpener) {
    let _ = OPENER.set(f);
}

/// Registers [`at_exit`] (once per process).
fn register_exit_hook() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        // SAFETY: an `extern "C"` function that never unwinds; libc runs it
        // in the thread calling exit(), with the process still whole.
        #[allow(unsafe_code)]
        unsafe {
            libc::atexit(at_exit);
        }
    });
}

/// At `exit()`: each device's CM ends the connections still open, as
/// Linux's does when a process's rdma_cm file closes (`ucma_close`
/// destroys its ids): qperf's server exits without destroying its
/// connected id, and its client waits for the DREP. A process killed by a
/// signal sends nothing, like a host that dies.
extern "C" fn at_exit() {
    let _ = std::panic::catch_unwind(|| {
        let devs = match DEVICES.try_lock() {
            Ok(g) => g,
            Err(std::sync::TryLockError::Poisoned(p)) => p.into_inner(),
            Err(std::sync::TryLockError::WouldBlock) => return,
        };
        if devs.0 != std::process::id() {
            return;
        }
        let devs = devs.1.clone();
        for d in devs {
            d.cm.destroy_all();
        }
    });
}

/// The process's device on `ip` (opened now if need be).
pub(super) fn device_for(ip: IpAddr) -> Result<Arc<Dev>, Error> {
    let mut all = DEVICES.lock().unwrap_or_else(|e| e.into_inner());
    let pid = std::process::id();
    if all.0 != pid {
        // The parent's devices: never used here, and never dropped (that
        // would join CM threads this process does not have).
        std::mem::forget(std::mem::take(&mut all.1));
        all.0 = pid;
    }
    let open = &mut all.1;
    if let Some(d) = open.iter().find(|d| d.info.addr == ip) {
        return Ok(d.clone());
    }
    let info = match crate::devices()?.into_iter().find(|d| d.addr == ip) {
        Some(i) => i,
        None => DeviceInfo::on_address(format!("softroce_{ip}"), ip)?,
    };
    let ctx = match OPENER.get() {
        Some(open) => open(&info)?,
        None => Context::open_with(&info, crate::Options::from_env()?)?,
    };
    // The service's events reach the device once it exists (none come before:
    // nothing listens or connects yet).
    let slot: Arc<OnceLock<Weak<Dev>>> = Arc::new(OnceLock::new());
    let s = slot.clone();
    let sink: super::service::EventSink = Box::new(move |e| {
        if let Some(d) = s.get().and_then(Weak::upgrade) {
            d.route(e);
        }
    });
    let cm = CmService::open_with(&ctx, u64::from(random_u32()), Some(sink))?;
    register_exit_hook();
    let dev = Arc::new(Dev { info, ctx, cm, routes: Mutex::new(Routes::default()) });
    let _ = slot.set(Arc::downgrade(&dev));
    open.push(dev.clone());
    Ok(dev)
}

/// The local address used to reach `dst`: itself when it is a local
/// device's, else, among the devices of `dst`'s family, the first on
/// loopback for a loopback `dst`, else the first that is not on loopback.
/// None such: no route (ENODEV, as the kernel's ADDR_ERROR
/// when no RDMA device serves the way to `dst`); an IPv4 device's packets
/// cannot reach an IPv6 address, and resolving `::1` with only
/// `softroce_lo` on 127.0.0.1 hung in connect before.
pub(super) fn source_for(dst: IpAddr) -> Result<IpAddr, Error> {
    source_among(&crate::devices()?, dst)
}

fn source_among(devs: &[DeviceInfo], dst: IpAddr) -> Result<IpAddr, Error> {
    if devs.iter().any(|d| d.addr == dst) {
        return Ok(dst);
    }
    let dst = dst.to_canonical();
    let want_lo = dst.is_loopback();
    let family: Vec<&DeviceInfo> = devs.iter().filter(|d| d.addr.is_ipv4() == dst.is_ipv4()).collect();
    // A loopback device reaches loopback addresses only, and the others
    // reach none.
    family.iter().find(|d| d.addr.is_loopback() == want_lo).map(|d| d.addr).ok_or_else(|| Error::NoSuchDevice {
        name: format!("for {dst} (no device of its address family and scope)"),
        known: devs.iter().map(|d| d.name.clone()).collect(),
    })
}

impl Dev {
    /// A CM event to its id, as librdmacm and the kernel's cma turn it
    /// into an rdma_cm event.
    fn route(self: &Arc<Dev>, e: CmEvent) {
        let comm = match &e {
            CmEvent::ReqReceived { id, .. }
            | CmEvent::RepReceived { id, .. }
            | CmEvent::Established { id }
            | CmEvent::Rejected { id, .. }
            | CmEvent::Unreachable { id }
            | CmEvent::DreqReceived { id }
            | CmEvent::DrepReceived { id }
            | CmEvent::DisconnectTimedOut { id }
            | CmEvent::TimewaitExit { id }
            | CmEvent::SidrReqReceived { id, .. }
            | CmEvent::SidrRepReceived { id, .. } => *id,
        };
        match e {
            CmEvent::ReqReceived { id, req, peer, local } => return self.on_req(id, req, peer, local),
            CmEvent::SidrReqReceived { id, req, peer, local } => return self.on_sidr_req(id, req, peer, local),
            _ => {}
        }
        let id = {
            let mut r = self.routes.lock().unwrap_or_else(|e| e.into_inner());
            let id = r.by_comm.get(&comm).and_then(Weak::upgrade);
            if matches!(
                e,
                CmEvent::TimewaitExit { .. }
                    | CmEvent::Unreachable { .. }
                    | CmEvent::Rejected { .. }
                    | CmEvent::SidrRepReceived { .. }
            ) {
                r.by_comm.remove(&comm);
            }
            id
        };
        let Some(id) = id.map(CmId) else { return };
        id.on_cm_event(e);
    }

    /// The listener of `service_id` and the cma_hdr of a request for it.
    fn listener_of(&self, service_id: u64, private_data: &[u8]) -> Option<(CmId, CmaHdrRepr)> {
        let hdr = CmaHdrRepr::parse(private_data).ok()?;
        let r = self.routes.lock().unwrap_or_else(|e| e.into_inner());
        let listener = r.listeners.get(&service_id)?.for_family(hdr.ip_version() == 6)?;
        Some((listener, hdr))
    }

    /// The new id of a request from `peer` to `local` that `listener` took
    /// (in CONNECT state, routed by `comm`).
    fn child(
        self: &Arc<Dev>,
        listener: &CmId,
        comm: CommId,
        service_id: u64,
        hdr: &CmaHdrRepr,
        (peer, local): (IpAddr, IpAddr),
        fill: impl FnOnce(&mut Id),
    ) -> CmId {
        let port = IpServiceId::from_service_id(service_id).map_or(0, |s| s.port);
        let mut st = Id {
            state: IdState::Connect,
            dev: Some(self.clone()),
            src: Some(SocketAddr::new(local, port)),
            dst: Some(SocketAddr::new(if peer.is_unspecified() { hdr.src_addr() } else { peer }, hdr.port)),
            psn: roce_wire::Psn::new(random_u32()).value(),
            comm: Some(comm),
            ..Id::new()
        };
        fill(&mut st);
        st.recount();
        let child =
            CmId(Arc::new(IdInner { channel: Mutex::new(listener.channel()), ps: listener.0.ps, st: Mutex::new(st) }));
        self.routes.lock().unwrap_or_else(|e| e.into_inner()).by_comm.insert(comm, Arc::downgrade(&child.0));
        child
    }

    /// A SIDR_REQ: CONNECT_REQUEST on a new UD id, with the user's private
    /// data and no address handle (the kernel's `cma_ib_new_udp_id`).
    fn on_sidr_req(self: &Arc<Dev>, comm: CommId, req: Box<SidrReqRepr>, peer: IpAddr, local: IpAddr) {
        let Some((listener, hdr)) = self.listener_of(req.service_id, &req.private_data) else {
            let no = SidrAnswer { status: SidrStatus::REJECT, qpn: 0, qkey: 0, private_data: [0; 136] };
            let _ = self.cm.sidr_reply(comm, no);
            return;
        };
        let child = self.child(&listener, comm, req.service_id, &hdr, (peer, local), |_| {});
        let conn = ConnParam {
            private_data: roce_cm::wire::cma_hdr::user_private_data(&req.private_data).to_vec(),
            ..ConnParam::default()
        };
        let ud = Some(UdParam { ah: None, flow_label: 0, qp_num: 0, qkey: 0 });
        let event = EventType::ConnectRequest;
        listener.push_event(Event {
            id: child,
            listen_id: Some(listener.clone()),
            event,
            status: 0,
            conn,
            ud,
            context: 0,
            arg: 0,
        });
    }

    fn on_req(self: &Arc<Dev>, comm: CommId, req: Box<ReqRepr>, peer: IpAddr, local: IpAddr) {
        let Some((listener, hdr)) = self.listener_of(req.service_id, &req.private_data) else {
            let _ = self.cm.reject(comm, RejReason::CONSUMER_DEFINED, [0; 148]);
            return;
        };
        let child = self.child(&listener, comm, req.service_id, &hdr, (peer, local), |st| {
            st.req = Some(req.clone());
            st.resources = (req.initiator_depth, req.responder_resources);
            st.retry = req.retry_count;
            st.tos = req.primary_path.traffic_class;
        });
        // The event's parameters are the REQ's, seen from this side.
        let conn = ConnParam {
            private_data: roce_cm::wire::cma_hdr::user_private_data(&req.private_data).to_vec(),
            responder_resources: req.initiator_depth,
            initiator_depth: req.responder_resources,
            flow_control: req.end_to_end_flow_control,
            retry_count: req.retry_count,
            rnr_retry_count: req.rnr_retry_count,
            srq: req.srq,
            qp_num: req.local_qpn,
        };
        listener.push_event(Event {
            id: child,
            listen_id: Some(listener.clone()),
            event: EventType::ConnectRequest,
            status: 0,
            conn,
            ud: None,
            context: 0,
            arg: 0,
        });
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_source_is_a_device_of_the_destinations_family_and_scope() {
        let dev = |name: &str, a: &str| crate::DeviceInfo {
            name: name.into(),
            addr: a.parse().unwrap(),
            interface: None,
            gids: vec![a.parse().unwrap()],
            bindable: vec![true],
            link_mtu: 1500,
        };
        let devs = [dev("softroce_eth0", "192.0.2.2"), dev("softroce_lo", "127.0.0.1")];
        let src = |dst: &str| super::source_among(&devs, dst.parse().unwrap()).ok().map(|a| a.to_string());
        assert_eq!(src("192.0.2.2").as_deref(), Some("192.0.2.2"), "a device's own address");
        assert_eq!(src("127.0.0.9").as_deref(), Some("127.0.0.1"));
        assert_eq!(src("10.1.1.1").as_deref(), Some("192.0.2.2"));
        assert_eq!(src("::ffff:127.0.0.1").as_deref(), Some("127.0.0.1"), "IPv4-mapped is IPv4");
        assert_eq!(src("::1"), None, "no IPv6 loopback device: no route (it hung)");
        assert_eq!(src("fd00::3"), None);
        let only_lo = [dev("softroce_lo", "127.0.0.1")];
        assert!(super::source_among(&only_lo, "10.1.1.1".parse().unwrap()).is_err(), "loopback reaches no host");
        let v6 = [dev("lo6", "::1"), dev("eth6", "fd00::2")];
        assert_eq!(super::source_among(&v6, "::1".parse().unwrap()).ok(), Some("::1".parse().unwrap()));
        assert_eq!(super::source_among(&v6, "fd00::3".parse().unwrap()).ok(), Some("fd00::2".parse().unwrap()));
    }

    use std::net::IpAddr;
    use std::sync::{Arc, Mutex};

    use super::Listening;
    use crate::rdma_cm::id::{Id, IdInner};
    use crate::rdma_cm::{EventChannel, PortSpace};

    #[test]
    fn an_afonly_ipv6_listener_shares_its_port_with_an_ipv4_one() {
        let v4: IpAddr = "0.0.0.0".parse().unwrap();
        let v6: IpAddr = "::".parse().unwrap();
        let mapped: IpAddr = "::ffff:10.0.0.1".parse().unwrap();
        assert_eq!(Listening::claims(v4, false), (true, false));
        assert_eq!(Listening::claims(mapped, true), (true, false), "a mapped IPv4 address is IPv4");
        assert_eq!(Listening::claims(v6, true), (false, true));
        assert_eq!(Listening::claims(v6, false), (true, true));

        let ch = EventChannel::new().unwrap();
        let id = |ch: &EventChannel| {
            Arc::new(IdInner { channel: Mutex::new(ch.clone()), ps: PortSpace::Tcp, st: Mutex::new(Id::new()) })
        };
        let (ia, ib) = (id(&ch), id(&ch));
        let mut l = Listening::default();
        assert!(l.is_empty() && !l.taken((true, true)));
        l.v4 = Some(Arc::downgrade(&ia));
        assert!(l.taken(Listening::claims(v6, false)), "[::] without AFONLY collides with 0.0.0.0");
        assert!(!l.taken(Listening::claims(v6, true)), "[::] with AFONLY does not");
        l.v6 = Some(Arc::downgrade(&ib));
        assert!(l.for_family(false).is_some_and(|c| Arc::ptr_eq(&c.0, &ia)), "IPv4 requests to the IPv4 id");
        assert!(l.for_family(true).is_some_and(|c| Arc::ptr_eq(&c.0, &ib)), "IPv6 requests to the IPv6 id");
        l.remove(Arc::as_ptr(&ia));
        assert!(l.for_family(false).is_none() && !l.is_empty());
        drop(ib);
        assert!(l.is_empty(), "a dropped id listens no more");
    }
}
