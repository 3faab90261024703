//! The queue pair ([`Qp`], `ibv_qp`) and what it is made and moved with:
//! [`QpInit`], [`QpEndpoint`], [`ConnectOptions`], [`ToInit`], [`ToRtr`],
//! [`ToRts`]. Made in a PD ([`Pd::create_qp`], QP 1 by `create_gsi_qp`);
//! modified, attached to multicast groups, connected, posted to. Touch
//! here what an application does with a QP.

use std::net::IpAddr;
use std::sync::Arc;

use roce_proto::qp_state::required_mask;
use roce_proto::verbs::{AccessFlags, QpAttrMask as M, QpState, QpType};
use roce_proto::{AhAttr, Mtu, Psn, QpAttr, QpCap, QpInitAttr, Qpn, RecvWr, SendWr, WideMtu};

use super::{Cq, Pd, Srq};
use crate::context::Context;
use crate::error::Error;

/// What a QP is made of.
#[derive(Debug, Clone, Copy)]
pub struct QpInit<'a> {
    /// RC, UC or UD.
    pub qp_type: QpType,
    /// Where send completions go.
    pub send_cq: &'a Cq,
    /// Where receive completions go.
    pub recv_cq: &'a Cq,
    /// Receive from this SRQ instead of the QP's own queue.
    pub srq: Option<&'a Srq>,
    /// Queue sizes.
    pub cap: QpCap,
    /// Every send WR completes (as if SIGNALED).
    pub sq_sig_all: bool,
    /// The QP does not receive the multicast packets it sent itself
    /// (`IBV_QP_CREATE_BLOCK_SELF_MCAST_LB`).
    pub block_self_mcast_lb: bool,
}

impl<'a> QpInit<'a> {
    /// An RC QP with `depth` send and receive WRs of up to 4 SGEs and 256
    /// inline bytes.
    pub fn rc(send_cq: &'a Cq, recv_cq: &'a Cq, depth: u32) -> QpInit<'a> {
        QpInit {
            qp_type: QpType::Rc,
            send_cq,
            recv_cq,
            srq: None,
            cap: QpCap {
                max_send_wr: depth,
                max_recv_wr: depth,
                max_send_sge: 4,
                max_recv_sge: 4,
                max_inline_data: 256,
            },
            sq_sig_all: false,
            block_self_mcast_lb: false,
        }
    }

    /// The same with another transport.
    pub fn with_type(mut self, qp_type: QpType) -> QpInit<'a> {
        self.qp_type = qp_type;
        self
    }
}

/// What the peer needs to connect to a QP: exchanged out of band, as
/// rdma-core's examples do (`LID:QPN:PSN:GID`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QpEndpoint {
    /// QP number.
    pub qpn: Qpn,
    /// First PSN it will send.
    pub psn: u32,
    /// Its address (GID).
    pub gid: IpAddr,
}

/// Transport settings of [`Qp::connect_with`], with rdma-core's usual values
/// as defaults.
#[derive(Debug, Clone, Copy)]
pub struct ConnectOptions {
    /// Path MTU (default: the port's active MTU).
    pub mtu: Option<Mtu>,
    /// softroce's wide MTU ([`WideMtu`]): only toward a peer that is
    /// softroce and set the same (default: none, IBTA's path MTU).
    pub wide_mtu: Option<WideMtu>,
    /// Remote access the QP grants (default: READ, WRITE and atomics).
    pub access: AccessFlags,
    /// Retransmit timeout exponent (4.096 us x 2^timeout; 14 = 67 ms).
    pub timeout: u8,
    /// Retries after timeouts or sequence NAKs.
    pub retry_cnt: u8,
    /// RNR retries (7 = forever).
    pub rnr_retry: u8,
    /// RNR timer code the responder sends (12 = 0.64 ms).
    pub min_rnr_timer: u8,
    /// Outstanding READ/atomics issued and accepted.
    pub max_rd_atomic: u8,
    /// Q_Key (UD).
    pub qkey: u32,
}

impl Default for ConnectOptions {
    fn default() -> ConnectOptions {
        ConnectOptions {
            mtu: None,
            wide_mtu: None,
            access: AccessFlags::REMOTE_READ | AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_ATOMIC,
            timeout: 14,
            retry_cnt: 7,
            rnr_retry: 7,
            min_rnr_timer: 12,
            max_rd_atomic: 16,
            qkey: 0x1111_1111,
        }
    }
}

/// The RESET -> INIT transition's attributes ([`Qp::to_init`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ToInit {
    /// Remote access the QP allows (RC, UC).
    pub access: AccessFlags,
    /// Q_Key (UD).
    pub qkey: u32,
}

/// The INIT -> RTR transition's attributes ([`Qp::to_rtr`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ToRtr {
    /// The peer QP.
    pub remote: QpEndpoint,
    /// Our GID index to send from.
    pub sgid_index: u8,
    /// Path MTU.
    pub mtu: Mtu,
    /// softroce's wide MTU, in place of `mtu` (see [`ConnectOptions::wide_mtu`]).
    pub wide_mtu: Option<WideMtu>,
    /// READ/atomic requests this QP answers at once.
    pub max_dest_rd_atomic: u8,
    /// RNR timer code sent in RNR NAKs.
    pub min_rnr_timer: u8,
}

/// The RTR -> RTS transition's attributes ([`Qp::to_rts`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ToRts {
    /// First PSN sent.
    pub sq_psn: u32,
    /// Retransmit timeout exponent.
    pub timeout: u8,
    /// Retries after timeouts or sequence NAKs.
    pub retry_cnt: u8,
    /// RNR retries (7 = forever).
    pub rnr_retry: u8,
    /// READ/atomic requests outstanding.
    pub max_rd_atomic: u8,
}

/// A queue pair (`ibv_qp`).
#[derive(Debug, Clone)]
pub struct Qp(pub(super) Arc<QpInner>);

#[derive(Debug)]
pub(super) struct QpInner {
    pd: Pd,
    pub(super) qpn: Qpn,
    qp_type: QpType,
    _send_cq: Cq,
    _recv_cq: Cq,
    _srq: Option<Srq>,
}

impl Drop for QpInner {
    fn drop(&mut self) {
        let q = self.qpn;
        let s = self.pd.ctx().shared();
        // Dropped, a QP leaves its groups (the C API's `ibv_destroy_qp`
        // refuses while it is attached, as the kernel does).
        let groups = s.with_dev(false, |d| {
            let g = d.mcast_groups_of(q);
            for mgid in &g {
                let _ = d.detach_mcast(q, *mgid);
            }
            g
        });
        for mgid in groups {
            s.groups.remove(roce_proto::mcast::group_ip(&mgid));
        }
        let mut st = s.lock();
        // What a waiter's pass deferred (its last ACK) leaves first.
        let _ = s.flush(&mut st);
        let source = st.sources.source_of(&st.dev, q);
        let _ = st.dev.destroy_qp(q);
        if let Some(pair) = source {
            let st = &mut *st;
            st.sources.release(&st.dev, pair);
            st.stats.src_port_sockets = st.sources.len() as u64;
        }
        s.route_events(&mut st);
        drop(st);
        s.async_routes.release(crate::EventSource::Qp(q));
    }
}

impl Pd {
    /// Creates a queue pair in RESET.
    pub fn create_qp(&self, init: QpInit<'_>) -> Result<Qp, Error> {
        self.create_qp_of(init, false)
    }

    /// Creates QP 1, the GSI QP the CM's MADs travel on (a UD QP; see
    /// `roce_proto::device::Device::create_gsi_qp`).
    pub(crate) fn create_gsi_qp(&self, init: QpInit<'_>) -> Result<Qp, Error> {
        self.create_qp_of(init, true)
    }

    fn create_qp_of(&self, init: QpInit<'_>, gsi: bool) -> Result<Qp, Error> {
        let attr = QpInitAttr {
            qp_type: init.qp_type,
            pd: self.0.handle,
            send_cq: init.send_cq.0.handle,
            recv_cq: init.recv_cq.0.handle,
            srq: init.srq.map(|s| s.0.handle),
            cap: init.cap,
            sq_sig_all: init.sq_sig_all,
            block_self_mcast_lb: init.block_self_mcast_lb,
        };
        let shared = self.ctx().shared();
        let qpn = match shared.sock.member() {
            // QP 1 is every process's own (block 0 is nobody's).
            _ if gsi => shared.with_live_qp(false, |d| d.create_gsi_qp(attr).map(|q| (q, q)))?,
            // A shared device: a number of this process's blocks.
            Some(m) => shared.with_live_qp(false, |d| {
                let q = m.alloc_qpn(&shared.sock, |q| d.qp(q.into()).is_some())?;
                d.create_qp_as(q.into(), attr).map(|q| (q, q)).map_err(Error::from)
            })?,
            None => shared.with_live_qp(false, |d| d.create_qp(attr).map(|q| (q, q)))?,
        };
        Ok(Qp(Arc::new(QpInner {
            pd: self.clone(),
            qpn,
            qp_type: init.qp_type,
            _send_cq: init.send_cq.clone(),
            _recv_cq: init.recv_cq.clone(),
            _srq: init.srq.cloned(),
        })))
    }
}

impl Qp {
    pub(super) fn ctx(&self) -> &Context {
        self.0.pd.ctx()
    }

    /// QP number.
    pub fn qpn(&self) -> Qpn {
        self.0.qpn
    }

    /// Transport.
    pub fn qp_type(&self) -> QpType {
        self.0.qp_type
    }

    /// Current state.
    pub fn state(&self) -> QpState {
        let q = self.0.qpn;
        self.ctx().shared().with_dev(false, |d| d.qp(q).map_or(QpState::Err, |qp| qp.state()))
    }

    /// `ibv_modify_qp` with explicit attributes and mask. Packets a waiter's
    /// pass deferred (the ACK of what it just received) leave first: a move
    /// to ERR would otherwise drop them, and the peer, whose message was
    /// delivered, would retry it until RETRY_EXC_ERR.
    pub fn modify(&self, attr: &QpAttr, mask: M) -> Result<(), Error> {
        let q = self.0.qpn;
        let s = self.ctx().shared();
        {
            let mut st = s.lock();
            let _ = s.flush(&mut st);
        }
        s.with_live_qp(true, |d| d.modify_qp(q, attr, mask).map(|()| (q, ())))
    }

    /// `ibv_query_qp`: the attributes the engine holds, the one store of
    /// them (the application's moves and rdma_cm's made for it), with the
    /// mask of those set since the QP was made or last reset.
    pub fn query(&self) -> (QpAttr, M) {
        let q = self.0.qpn;
        self.ctx().shared().with_dev(false, |d| {
            d.qp(q).map_or(
                (QpAttr { qp_state: QpState::Err, cur_qp_state: QpState::Err, ..QpAttr::default() }, M::EMPTY),
                |qp| (qp.attr, qp.set),
            )
        })
    }

    /// `ibv_attach_mcast`: this UD QP receives what is sent to multicast
    /// group `mgid` (rdma_cm's `::ffff:a.b.c.d` for IPv4 group a.b.c.d):
    /// the context joins the IP group on the device's interface with its
    /// first QP there. Attaching twice is not an error.
    pub fn attach_mcast(&self, mgid: [u8; 16]) -> Result<(), Error> {
        let (q, ctx) = (self.0.qpn, self.ctx());
        let group = roce_proto::mcast::group_ip(&mgid);
        if group.is_ipv4() != ctx.device().addr.is_ipv4() {
            return Err(Error::Verb(roce_proto::VerbError::Invalid("a group of another IP family than the device")));
        }
        let s = ctx.shared();
        let fresh = s.with_live_dev(false, |d| {
            let fresh = !d.mcast_groups_of(q).contains(&mgid);
            d.attach_mcast(q, mgid).map(|()| fresh)
        })?;
        let to: std::sync::Weak<dyn crate::arrivals::Arrivals> = std::sync::Arc::downgrade(&ctx.owner.shared) as _;
        if fresh && let Err(e) = s.groups.add(to, ctx.device().addr, group) {
            s.with_dev(false, |d| d.detach_mcast(q, mgid)).ok();
            return Err(Error::McastJoin { group, iface: ctx.device().addr, source: e });
        }
        Ok(())
    }

    /// `ibv_detach_mcast`: the QP leaves `mgid` (refused if not attached).
    pub fn detach_mcast(&self, mgid: [u8; 16]) -> Result<(), Error> {
        let q = self.0.qpn;
        let s = self.ctx().shared();
        s.with_dev(false, |d| d.detach_mcast(q, mgid))?;
        s.groups.remove(roce_proto::mcast::group_ip(&mgid));
        Ok(())
    }

    /// The multicast groups (MGIDs) the QP is attached to.
    pub fn mcast_groups(&self) -> Vec<[u8; 16]> {
        let q = self.0.qpn;
        self.ctx().shared().with_dev(false, |d| d.mcast_groups_of(q))
    }

    /// What the peer needs to connect to this QP, with `psn` as the first
    /// PSN this QP will send.
    pub fn endpoint(&self, psn: u32) -> QpEndpoint {
        QpEndpoint { qpn: self.0.qpn, psn: Psn::new(psn).value(), gid: self.ctx().device().addr }
    }

    /// RESET -> INIT -> RTR -> RTS to `remote` with default settings; this
    /// QP sends from PSN `local_psn` (what [`Qp::endpoint`] told the peer).
    pub fn connect(&self, local_psn: u32, remote: &QpEndpoint) -> Result<(), Error> {
        self.connect_with(local_psn, remote, &ConnectOptions::default())
    }

    /// [`Qp::connect`] with explicit settings. A UD QP ignores `remote`.
    pub fn connect_with(&self, local_psn: u32, remote: &QpEndpoint, o: &ConnectOptions) -> Result<(), Error> {
        self.to_init(&ToInit { access: o.access, qkey: o.qkey })?;
        self.connect_from_init(local_psn, remote, o)
    }

    /// INIT -> RTR -> RTS with `o`: [`Qp::connect_with`] for a QP already
    /// in INIT, which may hold receives posted before the peer was known
    /// (as rdma-core's pingpongs post them: a UD datagram that meets no
    /// receive is dropped for good).
    pub fn connect_from_init(&self, local_psn: u32, remote: &QpEndpoint, o: &ConnectOptions) -> Result<(), Error> {
        let info = self.ctx().device();
        self.to_rtr(&ToRtr {
            remote: *remote,
            sgid_index: info.addr_gid_index() as u8,
            mtu: o.mtu.unwrap_or(info.active_mtu()),
            wide_mtu: o.wide_mtu,
            max_dest_rd_atomic: o.max_rd_atomic,
            min_rnr_timer: o.min_rnr_timer,
        })?;
        self.to_rts(&ToRts {
            sq_psn: local_psn,
            timeout: o.timeout,
            retry_cnt: o.retry_cnt,
            rnr_retry: o.rnr_retry,
            max_rd_atomic: o.max_rd_atomic,
        })
    }

    /// RESET -> INIT: the attributes that transition requires for this QP
    /// type (P_Key index 0 and port 1 are implied; UD takes the Q_Key, RC
    /// and UC the remote access flags).
    pub fn to_init(&self, t: &ToInit) -> Result<(), Error> {
        let a = QpAttr {
            qp_state: QpState::Init,
            qp_access_flags: t.access,
            pkey_index: 0,
            port_num: 1,
            qkey: t.qkey,
            ..QpAttr::default()
        };
        self.step(QpState::Reset, &a)
    }

    /// INIT -> RTR: the path to the peer and what the responder accepts.
    pub fn to_rtr(&self, t: &ToRtr) -> Result<(), Error> {
        let a = QpAttr {
            qp_state: QpState::Rtr,
            path_mtu: t.mtu,
            wide_mtu: t.wide_mtu,
            dest_qp_num: t.remote.qpn,
            rq_psn: Psn::new(t.remote.psn),
            max_dest_rd_atomic: t.max_dest_rd_atomic,
            min_rnr_timer: t.min_rnr_timer,
            ah_attr: AhAttr {
                dest: t.remote.gid,
                sgid_index: t.sgid_index,
                hop_limit: 64,
                traffic_class: 0,
                sl: 0,
                flow_label: 0,
            },
            ..QpAttr::default()
        };
        self.step(QpState::Init, &a)
    }

    /// RTR -> RTS: the requester's timers and its first PSN.
    pub fn to_rts(&self, t: &ToRts) -> Result<(), Error> {
        let a = QpAttr {
            qp_state: QpState::Rts,
            sq_psn: Psn::new(t.sq_psn),
            timeout: t.timeout,
            retry_cnt: t.retry_cnt,
            rnr_retry: t.rnr_retry,
            max_rd_atomic: t.max_rd_atomic,
            ..QpAttr::default()
        };
        self.step(QpState::Rtr, &a)
    }

    /// The move from `from` to `a.qp_state` with exactly the attributes
    /// the transition table requires for this QP type.
    fn step(&self, from: QpState, a: &QpAttr) -> Result<(), Error> {
        let mask = required_mask(from, a.qp_state, self.0.qp_type).expect("RESET-INIT-RTR-RTS exists for every type");
        self.modify(a, mask)
    }

    /// Moves the QP to ERR: every outstanding WR completes with `WR_FLUSH_ERR`.
    pub fn to_error(&self) -> Result<(), Error> {
        self.modify(&QpAttr { qp_state: QpState::Err, ..QpAttr::default() }, M::STATE)
    }

    /// Posts a send WR (`ibv_post_send`).
    pub fn post_send(&self, wr: &SendWr<'_>) -> Result<(), Error> {
        let q = self.0.qpn;
        self.ctx().shared().with_live_dev(true, |d| d.post_send(q, wr))
    }

    /// Posts several send WRs under one lock and one wake-up; stops at the
    /// first refused, returning how many were posted with the error.
    pub fn post_send_batch(&self, wrs: &[SendWr<'_>]) -> Result<(), (usize, Error)> {
        let q = self.0.qpn;
        self.ctx().shared().live().map_err(|e| (0, e))?;
        self.ctx().shared().with_dev(true, |d| {
            for (i, wr) in wrs.iter().enumerate() {
                d.post_send(q, wr).map_err(|e| (i, Error::from(e)))?;
            }
            Ok(())
        })
    }

    /// Posts a receive WR (`ibv_post_recv`).
    pub fn post_recv(&self, wr: &RecvWr<'_>) -> Result<(), Error> {
        let q = self.0.qpn;
        self.ctx().shared().post_recv_with(|d| d.post_recv(q, wr))
    }
}
