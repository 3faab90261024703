//! An rdma_cm id ([`CmId`], `struct rdma_cm_id`) and its calls: bind,
//! resolve, listen, connect, accept, reject, disconnect, multicast joins,
//! the QP attributes rdma_cm derives from the CM exchange, and the CM
//! events turned into rdma_cm's. Touch here what one id does; the device
//! registry it is routed by lives in `registry.rs`.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use roce_cm::cm::{CmEvent, CommId, ConnectParams, SidrAnswer, SidrParams};
use roce_cm::cma::{self, LocalEnd};
use roce_cm::wire::{IpServiceId, PathMtu, RejReason, RepRepr, ReqRepr, SidrStatus};
use roce_wire::Psn;

use super::registry::{Dev, Listening, device_for, source_for};
use super::{ConnParam, Event, EventChannel, EventType, PortSpace, UdParam};
use crate::config::DeviceInfo;
use crate::error::Error;
use crate::verbs::{Pd, Qp, QpInit};
use crate::{AccessFlags, Context, Mtu, QpAttr, QpAttrMask, QpState};

/// Where an id is (librdmacm / kernel `enum rdma_cm_state`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IdState {
    /// Fresh.
    Idle,
    /// Bound to a local address.
    AddrBound,
    /// The peer's address resolved.
    AddrResolved,
    /// The path resolved.
    RouteResolved,
    /// Connecting (REQ sent) or connected.
    Connect,
    /// Disconnecting or disconnected.
    Disconnect,
    /// Listening.
    Listen,
}

/// An rdma_cm id (`struct rdma_cm_id`).
#[derive(Debug, Clone)]
pub struct CmId(pub(super) Arc<IdInner>);

#[derive(Debug)]
pub(super) struct IdInner {
    /// Where the id's events go (`rdma_migrate_id` moves them).
    pub(super) channel: Mutex<EventChannel>,
    pub(super) ps: PortSpace,
    pub(super) st: Mutex<Id>,
}

#[derive(Debug)]
pub(super) struct Id {
    pub(super) state: IdState,
    pub(super) dev: Option<Arc<Dev>>,
    pub(super) src: Option<SocketAddr>,
    pub(super) dst: Option<SocketAddr>,
    pub(super) qp: Option<Qp>,
    /// This side's PSN (the id's random `seq_num`).
    pub(super) psn: u32,
    pub(super) comm: Option<CommId>,
    /// The peer's REQ (passive) or REP (active).
    pub(super) req: Option<Box<ReqRepr>>,
    pub(super) rep: Option<Box<RepRepr>>,
    /// The devices and service ID the id listens on.
    pub(super) listening: Vec<(Arc<Dev>, u64)>,
    /// The devices whose contexts count this id (`Id::recount`).
    pub(super) counted: Vec<Arc<Dev>>,
    /// This side's (responder resources, initiator depth): the consumer's
    /// connect or accept values.
    pub(super) resources: (u8, u8),
    /// The transport retry count this side's REQ asked for.
    pub(super) retry: u8,
    /// The type of service (`RDMA_OPTION_ID_TOS`).
    pub(super) tos: u8,
    /// `RDMA_OPTION_ID_AFONLY`: an IPv6 id takes IPv6 requests only.
    pub(super) afonly: bool,
    /// The QP ACK timeout the consumer set (`RDMA_OPTION_ID_ACK_TIMEOUT`).
    pub(super) ack_timeout: Option<u8>,
    /// The ECE vendor ID this side's REQ or REP carries (`rdma_set_local_ece`).
    pub(super) ece_vendor_id: u32,
    /// The multicast groups joined, each with the QP attached for it.
    pub(super) mcast: Vec<Joined>,
}

/// A multicast join of an id.
#[derive(Debug)]
pub(super) struct Joined {
    group: IpAddr,
    /// The id's QP, attached to the group (none for a send-only join or an
    /// id without a QP).
    attached: Option<Qp>,
}

impl Joined {
    fn leave(self) {
        if let Some(qp) = self.attached {
            let _ = qp.detach_mcast(roce_proto::mcast::mgid_of(self.group));
        }
    }
}

impl Id {
    /// A new id's state: IDLE, nothing bound, a random PSN.
    pub(super) fn new() -> Id {
        Id {
            state: IdState::Idle,
            dev: None,
            src: None,
            dst: None,
            qp: None,
            psn: Psn::new(random_u32()).value(),
            comm: None,
            req: None,
            rep: None,
            listening: Vec::new(),
            resources: (0, 0),
            retry: 7,
            tos: 0,
            afonly: false,
            ack_timeout: None,
            ece_vendor_id: 0,
            mcast: Vec::new(),
            counted: Vec::new(),
        }
    }

    /// Brings the devices counting this id (for `softroce rdma resource
    /// show`'s `cm_id`, as the kernel's resource tracker counts a cm_id on
    /// the device it is bound to, and a wildcard listener on each) in line
    /// with the ones it is on now.
    pub(super) fn recount(&mut self) {
        let mut now: Vec<Arc<Dev>> = Vec::new();
        for d in self.dev.iter().chain(self.listening.iter().map(|(d, _)| d)) {
            if !now.iter().any(|n| Arc::ptr_eq(n, d)) {
                now.push(d.clone());
            }
        }
        for old in &self.counted {
            if !now.iter().any(|n| Arc::ptr_eq(n, old)) {
                old.ctx.count_cm_ids(-1);
            }
        }
        for new in &now {
            if !self.counted.iter().any(|o| Arc::ptr_eq(o, new)) {
                new.ctx.count_cm_ids(1);
            }
        }
        self.counted = now;
    }
}

impl PartialEq for CmId {
    fn eq(&self, other: &CmId) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
}

/// A port of Linux's default `ip_local_port_range` (32768-60999).
fn ephemeral_port() -> u16 {
    32768 + (random_u32() % 28232) as u16
}

pub(super) fn random_u32() -> u32 {
    use std::hash::BuildHasher;
    std::collections::hash_map::RandomState::new().hash_one((std::process::id(), Instant::now())) as u32
}

fn mtu_of(p: PathMtu) -> Mtu {
    (1..=5).filter_map(Mtu::from_raw).find(|m| Some(m.bytes()) == p.bytes()).unwrap_or(Mtu::Mtu1024)
}

fn path_mtu(m: Mtu) -> PathMtu {
    PathMtu::from_bytes(m.bytes()).unwrap_or(PathMtu::Mtu1024)
}

fn bad(what: &'static str) -> Error {
    Error::Verb(roce_proto::VerbError::Invalid(what))
}

impl CmId {
    /// `rdma_create_id`: a new id whose events go to `channel`.
    pub fn new(channel: &EventChannel, ps: PortSpace) -> CmId {
        CmId(Arc::new(IdInner { channel: Mutex::new(channel.clone()), ps, st: Mutex::new(Id::new()) }))
    }

    fn st(&self) -> std::sync::MutexGuard<'_, Id> {
        self.0.st.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn event(&self, event: EventType, status: i32, conn: ConnParam) {
        self.event_ud(event, status, conn, None);
    }

    /// [`CmId::event`] with a UD id's `rdma_ud_param`.
    fn event_ud(&self, event: EventType, status: i32, conn: ConnParam, ud: Option<UdParam>) {
        self.push_event(Event { id: self.clone(), listen_id: None, event, status, conn, ud, context: 0, arg: 0 });
    }

    /// Queues an event the id's consumer or librdmacm writes itself, as
    /// the kernel's `RDMA_USER_CM_CMD_WRITE_CM_EVENT` does (rdma-core 65):
    /// `User` from `rdma_write_cm_event`, and the two `Addrinfo*` events
    /// `rdma_resolve_addrinfo` reports. Other types are the CM's own: EINVAL.
    pub fn write_event(&self, event: EventType, status: i32, arg: u64) -> Result<(), Error> {
        if !matches!(event, EventType::User | EventType::AddrinfoResolved | EventType::AddrinfoError) {
            return Err(bad("write_event: only USER and ADDRINFO events are written"));
        }
        let arg = if event == EventType::User { arg } else { 0 };
        self.push_event(Event {
            id: self.clone(),
            listen_id: None,
            event,
            status,
            conn: ConnParam::default(),
            ud: None,
            context: 0,
            arg,
        });
        Ok(())
    }

    /// The `rdma_ud_param` of a resolved UD id: the AH from its route
    /// (rdma_cm's: the peer's GID, hop limit 64, the ports' flow label).
    fn ud_param(&self, qp_num: u32, qkey: u32) -> UdParam {
        let st = self.st();
        let (src, dst) = (st.src.unwrap_or(SocketAddr::new(IpAddr::V4(Ipv4Addr::UNSPECIFIED), 0)), st.dst);
        let flow_label = dst.map_or(0, |d| cma::flow_label(src.port(), d.port()));
        let ah = dst.map(|d| crate::AhAttr {
            dest: d.ip(),
            sgid_index: st.dev.as_ref().map_or(0, |dev| dev.info.addr_gid_index() as u8),
            hop_limit: cma::HOP_LIMIT,
            traffic_class: st.tos,
            sl: 0,
            flow_label,
        });
        UdParam { ah, flow_label, qp_num, qkey }
    }

    /// The channel the id's events go to.
    pub fn channel(&self) -> EventChannel {
        self.0.channel.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// `rdma_migrate_id`: the id's queued and future events go to
    /// `channel`, in order (the kernel's ucma moves the queued ones along).
    pub fn migrate(&self, channel: &EventChannel) {
        let mut ch = self.0.channel.lock().unwrap_or_else(|e| e.into_inner());
        ch.move_events(self, channel);
        *ch = channel.clone();
    }

    /// Queues `e`, which this id owns, on the id's channel; under the
    /// channel's lock, so that no event passes a migration.
    pub(super) fn push_event(&self, e: Event) {
        self.0.channel.lock().unwrap_or_else(|e| e.into_inner()).push(e);
    }

    /// `RDMA_OPTION_ID_TOS`: the IP type of service of the connection's path
    /// (the REQ's traffic class and the QP's).
    pub fn set_tos(&self, tos: u8) {
        self.st().tos = tos;
    }

    /// Stops listening now, whoever else still holds the id (an event not
    /// yet acknowledged, the CM's thread): `rdma_destroy_id` frees the port
    /// before it returns, as the kernel's does.
    pub fn stop_listening(&self) {
        let mut st = self.st();
        st.stop_listening(Arc::as_ptr(&self.0));
        st.recount();
    }

    /// `RDMA_OPTION_ID_AFONLY`: an IPv6 id listening on the any-address
    /// takes IPv6 requests only, leaving IPv4's to an IPv4 id on the same
    /// port.
    pub fn set_afonly(&self, afonly: bool) {
        self.st().afonly = afonly;
    }

    /// `RDMA_OPTION_ID_ACK_TIMEOUT`: the QP's local ACK timeout, instead of
    /// the one derived from the packet lifetime.
    pub fn set_ack_timeout(&self, timeout: u8) {
        self.st().ack_timeout = Some(timeout.min(31));
    }

    /// A number that names this id while it lives (for C handles).
    pub fn key(&self) -> usize {
        Arc::as_ptr(&self.0) as usize
    }

    /// The (responder resources, initiator depth) the id would use now: a
    /// connection request's, seen from this side, until the consumer gives
    /// its own (librdmacm uses them for a NULL `conn_param`).
    pub fn resources(&self) -> (u8, u8) {
        self.st().resources
    }

    /// The port space.
    pub fn port_space(&self) -> PortSpace {
        self.0.ps
    }

    /// The device the id uses, once bound or resolved.
    pub fn device(&self) -> Option<DeviceInfo> {
        self.st().dev.as_ref().map(|d| d.info.clone())
    }

    /// The id's state.
    pub fn state(&self) -> IdState {
        self.st().state
    }

    /// The device context (`id->verbs`), once bound or resolved.
    pub fn context(&self) -> Option<Context> {
        self.st().dev.as_ref().map(|d| d.ctx.clone())
    }

    /// The local address and port.
    pub fn local_addr(&self) -> Option<SocketAddr> {
        self.st().src
    }

    /// The peer's address and port.
    pub fn peer_addr(&self) -> Option<SocketAddr> {
        self.st().dst
    }

    /// The QP made by [`CmId::create_qp`].
    pub fn qp(&self) -> Option<Qp> {
        self.st().qp.clone()
    }

    /// `rdma_bind_addr`: the device owning `addr`'s IP (port 0: any).
    pub fn bind_addr(&self, addr: SocketAddr) -> Result<(), Error> {
        let mut st = self.st();
        if st.state != IdState::Idle {
            return Err(bad("rdma_bind_addr: the id is bound already"));
        }
        if addr.ip().is_unspecified() {
            // The any-address listens on every device: open them now, so
            // that `rdma_listen` only registers (a consumer may tell its peer
            // the port between the two calls, and the peer connect at once).
            for d in crate::devices()? {
                device_for(d.addr)?;
            }
        } else {
            st.dev = Some(device_for(addr.ip())?);
            st.recount();
        }
        // Port 0: a port of the kernel's local range, chosen now, as
        // `rdma_bind_addr` does (consumers read it with rdma_get_src_port).
        let port = if addr.port() == 0 { ephemeral_port() } else { addr.port() };
        st.src = Some(SocketAddr::new(addr.ip(), port));
        st.state = IdState::AddrBound;
        Ok(())
    }

    /// `rdma_resolve_addr`: picks the device that reaches `dst` (from `src`
    /// when given) and queues ADDR_RESOLVED. A port of 0 in the source gets
    /// a random one, as the kernel takes from its local port range.
    pub fn resolve_addr(&self, src: Option<SocketAddr>, dst: SocketAddr) -> Result<(), Error> {
        {
            let mut st = self.st();
            if !matches!(st.state, IdState::Idle | IdState::AddrBound) {
                return Err(bad("rdma_resolve_addr: not idle"));
            }
            let ip = match src.map(|s| s.ip()).or(st.src.map(|s| s.ip())).filter(|ip| !ip.is_unspecified()) {
                Some(ip) => ip,
                None => source_for(dst.ip())?,
            };
            let port = src.or(st.src).map_or(0, |s| s.port());
            let port = if port == 0 { ephemeral_port() } else { port };
            st.dev = Some(device_for(ip)?);
            st.recount();
            st.src = Some(SocketAddr::new(ip, port));
            st.dst = Some(dst);
            st.state = IdState::AddrResolved;
        }
        self.event(EventType::AddrResolved, 0, ConnParam::default());
        Ok(())
    }

    /// `rdma_resolve_route`: the path is built locally on RoCE; queues
    /// ROUTE_RESOLVED.
    pub fn resolve_route(&self) -> Result<(), Error> {
        {
            let mut st = self.st();
            if st.state != IdState::AddrResolved {
                return Err(bad("rdma_resolve_route: the address is not resolved"));
            }
            st.state = IdState::RouteResolved;
        }
        self.event(EventType::RouteResolved, 0, ConnParam::default());
        Ok(())
    }

    /// `rdma_create_qp`: an RC QP on the id's device, moved to INIT with
    /// the access rdma_cm gives it (rdmacm.md 2.5).
    pub fn create_qp(&self, pd: &Pd, init: QpInit<'_>) -> Result<Qp, Error> {
        let qp = pd.create_qp(init)?;
        self.set_qp(qp.clone())?;
        Ok(qp)
    }

    /// Takes `qp` (an RC QP in RESET, made by the caller) as the id's QP and
    /// moves it to INIT as [`CmId::create_qp`] does.
    pub fn set_qp(&self, qp: Qp) -> Result<(), Error> {
        if qp.qp_type() == crate::QpType::Ud {
            // librdmacm's `ucma_init_ud_qp`: INIT with rdma_cm's Q_Key, RTR, RTS.
            use QpAttrMask as M;
            let init = QpAttr { qp_state: QpState::Init, qkey: cma::UDP_QKEY, port_num: 1, ..QpAttr::default() };
            qp.modify(&init, M(M::STATE.0 | M::QKEY.0 | M::PKEY_INDEX.0 | M::PORT.0))?;
            qp.modify(&QpAttr { qp_state: QpState::Rtr, ..QpAttr::default() }, M::STATE)?;
            qp.modify(
                &QpAttr { qp_state: QpState::Rts, sq_psn: Psn::ZERO, ..QpAttr::default() },
                M(M::STATE.0 | M::SQ_PSN.0),
            )?;
        } else {
            let (a, m) = self.qp_attr(QpState::Init)?;
            qp.modify(&a, m)?;
        }
        self.st().qp = Some(qp);
        Ok(())
    }

    /// Whether the id is a UD one (`RDMA_PS_UDP`, `RDMA_PS_IPOIB`: SIDR, no connection).
    pub fn is_ud(&self) -> bool {
        matches!(self.0.ps, PortSpace::Udp | PortSpace::Ipoib)
    }

    /// Gives up the id's QP (`rdma_destroy_qp`): the id no longer moves it.
    pub fn clear_qp(&self) {
        self.st().qp = None;
    }

    /// The attributes that move the id's QP to `state`, as rdma_cm derives
    /// them from the CM exchange (`rdma_init_qp_attr`, rdmacm.md 2.5).
    pub fn qp_attr(&self, state: QpState) -> Result<(QpAttr, QpAttrMask), Error> {
        use QpAttrMask as M;
        let st = self.st();
        let dev = st.dev.clone().ok_or(bad("rdma_init_qp_attr: the id has no device"))?;
        let (resp, init) = st.resources;
        match state {
            QpState::Init => {
                // Before the CM id exists: no remote access; once it does,
                // REMOTE_WRITE, and READ and atomics if the peer may issue them.
                let peer_init =
                    st.req.as_ref().map(|r| r.initiator_depth).or(st.rep.as_ref().map(|r| r.initiator_depth));
                let access = match peer_init {
                    None => AccessFlags(0),
                    Some(0) => AccessFlags::REMOTE_WRITE,
                    Some(_) => AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_READ | AccessFlags::REMOTE_ATOMIC,
                };
                let a = QpAttr {
                    qp_state: QpState::Init,
                    qp_access_flags: access,
                    pkey_index: 0,
                    port_num: 1,
                    ..QpAttr::default()
                };
                Ok((a, M(M::STATE.0 | M::ACCESS_FLAGS.0 | M::PKEY_INDEX.0 | M::PORT.0)))
            }
            QpState::Rtr => {
                // The path's flow label is the REQ's (the active side's
                // ports): rxe sends both directions from the port it folds to.
                let (dest_qp_num, path_mtu, max_dest_rd_atomic, tclass, flow_label) = match (&st.req, &st.rep) {
                    (Some(req), _) => (
                        req.local_qpn,
                        mtu_of(req.path_mtu),
                        resp,
                        req.primary_path.traffic_class,
                        req.primary_path.flow_label,
                    ),
                    (None, Some(rep)) => {
                        let fl = match (st.src, st.dst) {
                            (Some(s), Some(d)) => cma::flow_label(s.port(), d.port()),
                            _ => 0,
                        };
                        (rep.local_qpn, dev.info.active_mtu(), rep.initiator_depth, st.tos, fl)
                    }
                    (None, None) => return Err(bad("rdma_init_qp_attr: no peer yet")),
                };
                let a = QpAttr {
                    qp_state: QpState::Rtr,
                    path_mtu,
                    dest_qp_num: dest_qp_num.into(),
                    rq_psn: Psn::new(st.psn),
                    max_dest_rd_atomic,
                    min_rnr_timer: 0,
                    ah_attr: crate::AhAttr {
                        dest: st.dst.map_or(IpAddr::V4(Ipv4Addr::UNSPECIFIED), |d| d.ip()),
                        sgid_index: dev.info.addr_gid_index() as u8,
                        hop_limit: cma::HOP_LIMIT,
                        traffic_class: tclass,
                        sl: 0,
                        flow_label,
                    },
                    ..QpAttr::default()
                };
                let m = M::STATE.0 | M::AV.0 | M::PATH_MTU.0 | M::DEST_QPN.0 | M::RQ_PSN.0 | M::MAX_DEST_RD_ATOMIC.0;
                Ok((a, M(m | M::MIN_RNR_TIMER.0)))
            }
            QpState::Rts => {
                let (sq_psn, timeout, retry_cnt, rnr_retry, max_rd_atomic) = match (&st.req, &st.rep) {
                    (Some(req), _) => (
                        req.starting_psn,
                        req.primary_path.local_ack_timeout,
                        req.retry_count,
                        req.rnr_retry_count,
                        init,
                    ),
                    (None, Some(rep)) => (
                        rep.starting_psn,
                        cma::ack_timeout(rep.target_ack_delay, cma::IBOE_PACKET_LIFETIME),
                        st.retry,
                        rep.rnr_retry_count,
                        rep.responder_resources,
                    ),
                    (None, None) => return Err(bad("rdma_init_qp_attr: no peer yet")),
                };
                let a = QpAttr {
                    qp_state: QpState::Rts,
                    sq_psn,
                    timeout: st.ack_timeout.unwrap_or(timeout),
                    retry_cnt: retry_cnt.min(7),
                    rnr_retry: rnr_retry.min(7),
                    max_rd_atomic,
                    ..QpAttr::default()
                };
                let m =
                    M::STATE.0 | M::SQ_PSN.0 | M::TIMEOUT.0 | M::RETRY_CNT.0 | M::RNR_RETRY.0 | M::MAX_QP_RD_ATOMIC.0;
                Ok((a, M(m)))
            }
            _ => Err(bad("rdma_init_qp_attr: INIT, RTR or RTS")),
        }
    }

    /// INIT again (only the access changes: the P_Key index and port stay),
    /// RTR and RTS for the id's QP, if it has one.
    fn move_qp_to_rts(&self) -> Result<(), Error> {
        let Some(qp) = self.qp() else { return Ok(()) };
        let (a, _) = self.qp_attr(QpState::Init)?;
        qp.modify(&a, QpAttrMask(QpAttrMask::STATE.0 | QpAttrMask::ACCESS_FLAGS.0))?;
        for s in [QpState::Rtr, QpState::Rts] {
            let (a, m) = self.qp_attr(s)?;
            qp.modify(&a, m)?;
        }
        Ok(())
    }

    /// `rdma_listen`: REQs for the id's port space and port come here.
    pub fn listen(&self) -> Result<(), Error> {
        let mut st = self.st();
        let (Some(src), IdState::AddrBound) = (st.src, st.state) else {
            return Err(bad("rdma_listen: bind the id first"));
        };
        let sid = IpServiceId::new(self.0.ps, src.port()).service_id();
        let devs: Vec<Arc<Dev>> = match &st.dev {
            Some(d) => vec![d.clone()],
            // The any-address: every device.
            None => crate::devices()?.iter().map(|d| device_for(d.addr)).collect::<Result<_, _>>()?,
        };
        let claims = Listening::claims(src.ip(), st.afonly);
        for d in &devs {
            // Routed first: a REQ may come the moment the device lists the port.
            let first = {
                let mut r = d.routes.lock().unwrap_or_else(|e| e.into_inner());
                let l = r.listeners.entry(sid).or_default();
                if l.taken(claims) {
                    return Err(roce_cm::cm::CmError::AlreadyListening(sid).into());
                }
                let first = l.is_empty();
                let me = Some(Arc::downgrade(&self.0));
                if claims.0 {
                    l.v4 = me.clone();
                }
                if claims.1 {
                    l.v6 = me;
                }
                first
            };
            // The device's CM (and the host's) know the service ID once.
            if first && let Err(e) = d.cm.listen(sid) {
                let mut r = d.routes.lock().unwrap_or_else(|e| e.into_inner());
                if let Some(l) = r.listeners.get_mut(&sid) {
                    l.remove(Arc::as_ptr(&self.0));
                }
                return Err(e);
            }
            st.listening.push((d.clone(), sid));
            st.recount();
        }
        st.state = IdState::Listen;
        Ok(())
    }

    /// `rdma_connect`: sends the REQ.
    pub fn connect(&self, p: &ConnParam) -> Result<(), Error> {
        let mut st = self.st();
        let (Some(dev), Some(src), Some(dst), IdState::RouteResolved) = (st.dev.clone(), st.src, st.dst, st.state)
        else {
            return Err(bad("rdma_connect: resolve the route first"));
        };
        if self.is_ud() {
            // A SIDR_REQ; ESTABLISHED comes with the SIDR_REP.
            let req =
                cma::ud_sidr_req(self.0.ps, src, dst, &p.private_data).map_err(|_| bad("private data too long"))?;
            let sidr = SidrParams {
                local: src.ip(),
                peer: dst.ip(),
                req,
                timeout: cma::SIDR_TIMEOUT,
                max_retries: cma::MAX_CM_RETRIES,
            };
            let comm = dev.cm.sidr_connect_then(sidr, |comm| {
                dev.routes.lock().unwrap_or_else(|e| e.into_inner()).by_comm.insert(comm, Arc::downgrade(&self.0));
            });
            st.comm = Some(comm);
            st.state = IdState::Connect;
            return Ok(());
        }
        let qpn = st.qp.as_ref().map_or(p.qp_num, |q| q.qpn().get());
        let local = LocalEnd {
            ca_guid: dev.info.node_guid(),
            ack_delay: dev.ctx.query_device().local_ca_ack_delay,
            qpn,
            psn: Psn::new(st.psn),
            mtu: path_mtu(dev.info.active_mtu()),
            tos: st.tos,
        };
        let mut req = cma::rc_req(self.0.ps, src, dst, &local, &p.wire()).map_err(|_| bad("private data too long"))?;
        req.vendor_id = st.ece_vendor_id;
        st.resources = (p.responder_resources, p.initiator_depth);
        st.retry = p.retry_count;
        // The id is found by its comm ID before the REQ leaves (a REJ from
        // this host can beat the return); its answer's events wait for `st`.
        let params =
            ConnectParams { local: src.ip(), peer: dst.ip(), req, packet_life_time: cma::IBOE_PACKET_LIFETIME };
        let comm = dev.cm.connect_then(params, |comm| {
            dev.routes.lock().unwrap_or_else(|e| e.into_inner()).by_comm.insert(comm, Arc::downgrade(&self.0));
        });
        st.comm = Some(comm);
        st.state = IdState::Connect;
        Ok(())
    }

    /// `rdma_accept`: moves the QP to RTS with the REQ's values, then sends the REP.
    pub fn accept(&self, p: &ConnParam) -> Result<(), Error> {
        if self.is_ud() {
            return self.sidr_answer(SidrStatus::SUCCESS, p);
        }
        let (dev, req, comm, qpn, psn) = {
            let mut st = self.st();
            let (Some(dev), Some(req), Some(comm)) = (st.dev.clone(), st.req.clone(), st.comm) else {
                return Err(bad("rdma_accept: not a connection request"));
            };
            st.resources = (p.responder_resources, p.initiator_depth);
            (dev, req, comm, st.qp.as_ref().map_or(p.qp_num, |q| q.qpn().get()), st.psn)
        };
        self.move_qp_to_rts()?;
        let local = LocalEnd {
            ca_guid: dev.info.node_guid(),
            ack_delay: dev.ctx.query_device().local_ca_ack_delay,
            qpn,
            psn: Psn::new(psn),
            mtu: req.path_mtu,
            tos: 0,
        };
        let mut rep = cma::rc_rep(&local, &p.wire()).map_err(|_| bad("private data too long"))?;
        rep.vendor_id = self.st().ece_vendor_id;
        dev.cm.accept(comm, rep)?;
        Ok(())
    }

    /// `rdma_reject`: REJ with reason 28 (consumer defined) and `private_data`.
    pub fn reject(&self, private_data: &[u8]) -> Result<(), Error> {
        self.reject_for(RejReason::CONSUMER_DEFINED, private_data)
    }

    /// `rdma_reject_ece`: REJ with reason 35 (vendor option not supported).
    pub fn reject_ece(&self, private_data: &[u8]) -> Result<(), Error> {
        self.reject_for(RejReason::VENDOR_OPTION_NOT_SUPPORTED, private_data)
    }

    /// `rdma_set_local_ece`: the ECE vendor ID of this side's REQ or REP
    /// (24 bits; the options word is not carried on RoCE's CM MADs here).
    pub fn set_local_ece(&self, vendor_id: u32) {
        self.st().ece_vendor_id = vendor_id & 0xff_ffff;
    }

    /// `rdma_get_remote_ece`: the ECE vendor ID of the peer's REQ or REP.
    pub fn remote_ece(&self) -> u32 {
        let st = self.st();
        st.req.as_ref().map(|r| r.vendor_id).or(st.rep.as_ref().map(|r| r.vendor_id)).unwrap_or(0)
    }

    /// `rdma_notify(IBV_EVENT_COMM_EST)`: a passive side that sees traffic
    /// before the RTU is established (Linux `ib_cm_notify`).
    pub fn notify_established(&self) -> Result<(), Error> {
        self.establish()
    }

    fn reject_for(&self, reason: RejReason, private_data: &[u8]) -> Result<(), Error> {
        if self.is_ud() {
            let p = ConnParam { private_data: private_data.to_vec(), ..ConnParam::default() };
            return self.sidr_answer(SidrStatus::REJECT, &p);
        }
        let st = self.st();
        let (Some(dev), Some(comm)) = (st.dev.clone(), st.comm) else { return Err(bad("rdma_reject: no connection")) };
        drop(st);
        let pd = roce_cm::wire::private_data::<148>(private_data).map_err(|_| bad("private data too long"))?;
        dev.cm.reject(comm, reason, pd)?;
        Ok(())
    }

    /// A UD id's answer to its SIDR_REQ (the kernel's `cma_send_sidr_rep`):
    /// its QP (or `p.qp_num`) and rdma_cm's Q_Key; no QP moves.
    fn sidr_answer(&self, status: SidrStatus, p: &ConnParam) -> Result<(), Error> {
        let (dev, comm, qpn) = {
            let st = self.st();
            let (Some(dev), Some(comm)) = (st.dev.clone(), st.comm) else {
                return Err(bad("rdma_accept: not a connection request"));
            };
            (dev, comm, st.qp.as_ref().map_or(p.qp_num, |q| q.qpn().get()))
        };
        let private_data =
            roce_cm::wire::private_data::<136>(&p.private_data).map_err(|_| bad("private data too long"))?;
        let qkey = if status == SidrStatus::SUCCESS { cma::UDP_QKEY } else { 0 };
        dev.cm.sidr_reply(comm, SidrAnswer { status, qpn, qkey, private_data })?;
        dev.routes.lock().unwrap_or_else(|e| e.into_inner()).by_comm.remove(&comm);
        Ok(())
    }

    /// `rdma_establish`: the RTU for an id that took CONNECT_RESPONSE.
    pub fn establish(&self) -> Result<(), Error> {
        let st = self.st();
        let (Some(dev), Some(comm)) = (st.dev.clone(), st.comm) else {
            return Err(bad("rdma_establish: no connection"));
        };
        drop(st);
        dev.cm.establish(comm)?;
        Ok(())
    }

    /// `rdma_join_multicast_ex`: joins IP multicast group `group` (UDP port
    /// space, an id bound or resolved to a device). As the kernel's rdma_cm
    /// on RoCEv2 there is no MAD and no SA: the MGID is `::ffff:a.b.c.d`,
    /// the id's QP is attached to it unless `send_only` (librdmacm's
    /// `ibv_attach_mcast`), and MULTICAST_JOIN comes with the AH to the group
    /// (hop limit 64), QPN 0xFFFFFF and RDMA_UDP_QKEY (rdmacm.md 5.2).
    pub fn join_multicast(&self, group: IpAddr, send_only: bool, context: usize) -> Result<(), Error> {
        if !self.is_ud() {
            return Err(bad("rdma_join_multicast: only UDP and IPoIB port space ids join groups"));
        }
        let (sgid_index, tos) = {
            let st = self.st();
            if !matches!(st.state, IdState::AddrBound | IdState::AddrResolved) {
                return Err(bad("rdma_join_multicast: the id is not bound to a device"));
            }
            let Some(dev) = st.dev.as_ref() else {
                return Err(bad("rdma_join_multicast: the id is not bound to a device"));
            };
            if !group.is_multicast() || group.is_ipv4() != dev.info.addr.is_ipv4() {
                return Err(bad("rdma_join_multicast: not a multicast group of the device's IP family"));
            }
            (dev.info.addr_gid_index() as u8, st.tos)
        };
        let qp = self.st().qp.clone();
        let attached = match qp {
            Some(qp) if !send_only => {
                qp.attach_mcast(roce_proto::mcast::mgid_of(group))?;
                Some(qp)
            }
            _ => None,
        };
        self.st().mcast.push(Joined { group, attached });
        let ah = crate::AhAttr {
            dest: group,
            sgid_index,
            hop_limit: cma::HOP_LIMIT,
            traffic_class: tos,
            sl: 0,
            flow_label: 0,
        };
        let ud = UdParam { ah: Some(ah), flow_label: 0, qp_num: roce_proto::mcast::MULTICAST_QPN, qkey: cma::UDP_QKEY };
        self.push_event(Event {
            id: self.clone(),
            listen_id: None,
            event: EventType::MulticastJoin,
            status: 0,
            conn: ConnParam::default(),
            ud: Some(ud),
            context,
            arg: 0,
        });
        Ok(())
    }

    /// `rdma_leave_multicast`: detaches the id's QP from `group`; false if
    /// the id had not joined it (librdmacm's EADDRNOTAVAIL).
    pub fn leave_multicast(&self, group: IpAddr) -> bool {
        let j = {
            let mut st = self.st();
            let Some(at) = st.mcast.iter().position(|j| j.group == group) else { return false };
            st.mcast.remove(at)
        };
        j.leave();
        true
    }

    /// `rdma_disconnect`: the QP to ERR, then the DREQ (or the DREP to one received).
    pub fn disconnect(&self) -> Result<(), Error> {
        let st = self.st();
        let (Some(dev), Some(comm)) = (st.dev.clone(), st.comm) else {
            return Err(bad("rdma_disconnect: not connected"));
        };
        if let Some(qp) = &st.qp {
            let _ = qp.to_error();
        }
        // The state moves (and DISCONNECTED is reported) when the DREP, the
        // peer's DREQ or the DREQ's timeout comes, as in the kernel's cma.
        drop(st);
        dev.cm.disconnect(comm)?;
        Ok(())
    }

    /// A CM event for this id, turned into rdma_cm's.
    pub(super) fn on_cm_event(&self, e: CmEvent) {
        match e {
            CmEvent::RepReceived { rep, .. } => {
                let conn = ConnParam {
                    private_data: rep.private_data.to_vec(),
                    responder_resources: rep.initiator_depth,
                    initiator_depth: rep.responder_resources,
                    flow_control: rep.end_to_end_flow_control,
                    retry_count: 0,
                    rnr_retry_count: rep.rnr_retry_count,
                    srq: rep.srq,
                    qp_num: rep.local_qpn,
                };
                let (has_qp, dev, comm) = {
                    let mut st = self.st();
                    st.rep = Some(rep.clone());
                    (st.qp.is_some(), st.dev.clone(), st.comm)
                };
                if !has_qp {
                    // No QP here (UCX, rping -q): the consumer establishes.
                    self.event(EventType::ConnectResponse, 0, conn);
                    return;
                }
                // librdmacm: INIT again, RTR, RTS with the REP's values, then the RTU.
                let r = self.move_qp_to_rts().and_then(|()| match (dev, comm) {
                    (Some(d), Some(c)) => d.cm.establish(c).map_err(Error::from),
                    _ => Err(bad("no connection")),
                });
                match r {
                    Ok(()) => self.event(EventType::Established, 0, conn),
                    Err(_) => self.event(EventType::ConnectError, -libc::EINVAL, conn),
                }
            }
            CmEvent::Established { .. } => self.event(EventType::Established, 0, ConnParam::default()),
            CmEvent::Rejected { rej, .. } => {
                if let Some(qp) = self.st().qp.clone() {
                    let _ = qp.to_error();
                }
                let conn = ConnParam { private_data: rej.private_data.to_vec(), ..ConnParam::default() };
                self.event(EventType::Rejected, i32::from(rej.reason.0), conn);
            }
            CmEvent::Unreachable { .. } => self.event(EventType::Unreachable, -libc::ETIMEDOUT, ConnParam::default()),
            CmEvent::DreqReceived { .. } | CmEvent::DrepReceived { .. } | CmEvent::DisconnectTimedOut { .. } => {
                let status = if matches!(e, CmEvent::DisconnectTimedOut { .. }) { -libc::ETIMEDOUT } else { 0 };
                let first = {
                    let mut st = self.st();
                    let first = st.state == IdState::Connect;
                    st.state = IdState::Disconnect;
                    first
                };
                // rdma_cm reports the disconnect once (CONNECT -> DISCONNECT).
                if first {
                    self.event(EventType::Disconnected, status, ConnParam::default());
                }
            }
            CmEvent::TimewaitExit { .. } => self.event(EventType::TimewaitExit, 0, ConnParam::default()),
            CmEvent::SidrRepReceived { rep, .. } => {
                let conn =
                    ConnParam { private_data: rep.private_data.to_vec(), qp_num: rep.qpn, ..ConnParam::default() };
                if rep.status != SidrStatus::SUCCESS {
                    self.event(EventType::Unreachable, i32::from(rep.status.0), conn);
                } else if rep.qkey != cma::UDP_QKEY {
                    // The kernel's `cma_set_qkey`: an RDMA_PS_UDP id uses RDMA_UDP_QKEY.
                    self.event(EventType::AddrError, -libc::EINVAL, conn);
                } else {
                    let ud = self.ud_param(rep.qpn, rep.qkey);
                    self.event_ud(EventType::Established, 0, conn, Some(ud));
                }
            }
            CmEvent::ReqReceived { .. } | CmEvent::SidrReqReceived { .. } => {}
        }
    }
}

impl Drop for IdInner {
    fn drop(&mut self) {
        let me = self as *const IdInner;
        let st = self.st.get_mut().unwrap_or_else(|e| e.into_inner());
        // A destroyed id leaves its groups (the kernel's cma does).
        std::mem::take(&mut st.mcast).into_iter().for_each(Joined::leave);
        if let (Some(dev), Some(comm)) = (&st.dev, st.comm) {
            dev.cm.destroy(comm);
            dev.routes.lock().unwrap_or_else(|e| e.into_inner()).by_comm.remove(&comm);
        }
        st.stop_listening(me);
        st.dev = None;
        st.recount();
    }
}

impl Id {
    /// Gives up the slots this id (`me`) holds on the service IDs it listens
    /// on, and each service ID nobody else listens on.
    fn stop_listening(&mut self, me: *const IdInner) {
        for (dev, sid) in std::mem::take(&mut self.listening) {
            let mut r = dev.routes.lock().unwrap_or_else(|e| e.into_inner());
            let Some(l) = r.listeners.get_mut(&sid) else { continue };
            l.remove(me);
            if l.is_empty() {
                r.listeners.remove(&sid);
                drop(r);
                dev.cm.unlisten(sid);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::CmId;
    use crate::rdma_cm::{EventChannel, EventType, PortSpace};

    #[test]
    fn a_written_user_event_comes_back_with_its_status_and_arg() {
        let ch = EventChannel::new().unwrap();
        let id = CmId::new(&ch, PortSpace::Tcp);
        id.write_event(EventType::User, -7, 0xdead_beef_0123).unwrap();
        id.write_event(EventType::AddrinfoResolved, 0, 99).unwrap();
        assert!(id.write_event(EventType::Established, 0, 0).is_err());
        let e = ch.get_event(Some(Duration::ZERO)).unwrap();
        assert_eq!((e.event, e.status, e.arg), (EventType::User, -7, 0xdead_beef_0123));
        assert_eq!(e.id, id);
        let e = ch.get_event(Some(Duration::ZERO)).unwrap();
        assert_eq!((e.event, e.status, e.arg), (EventType::AddrinfoResolved, 0, 0));
        assert!(ch.get_event(Some(Duration::ZERO)).is_none());
    }

    /// With O_NONBLOCK on the channel's fd (as rsocket and UCX set it), a
    /// thread taking events while another writes them leaves the fd's count
    /// equal to the events queued: the fd is not readable once all are
    /// taken (a count written after the queue's lock was let go could be
    /// read as EAGAIN by a taker that was quicker, and stay behind).
    #[test]
    fn the_fd_counts_exactly_the_events_queued_when_taken_as_they_come() {
        const N: u64 = 200_000;
        let ch = EventChannel::new().unwrap();
        let fl = rustix::fs::fcntl_getfl(ch.fd()).unwrap();
        rustix::fs::fcntl_setfl(ch.fd(), fl | rustix::fs::OFlags::NONBLOCK).unwrap();
        let id = CmId::new(&ch, PortSpace::Tcp);
        let taken = std::thread::scope(|s| {
            let taker = s.spawn(|| {
                let mut n = 0;
                while n < N {
                    if ch.get_event(Some(Duration::ZERO)).is_some() {
                        n += 1;
                    }
                }
                n
            });
            for i in 0..N {
                id.write_event(EventType::User, 0, i).unwrap();
            }
            taker.join().unwrap()
        });
        assert_eq!(taken, N);
        let fd = ch.fd();
        let mut fds = [rustix::event::PollFd::new(&fd, rustix::event::PollFlags::IN)];
        let ready = rustix::event::poll(&mut fds, Some(&rustix::event::Timespec { tv_sec: 0, tv_nsec: 0 })).unwrap();
        assert_eq!(ready, 0, "the fd is readable with no event queued");
    }
}
