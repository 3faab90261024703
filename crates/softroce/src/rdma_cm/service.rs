//! The Communication Manager of a device: QP 1 and a `roce_cm` agent
//! behind it, so a context can make and take RC connections with CM MADs,
//! as Linux's `ib_cm` does for the kernel's devices (rdma_cm's transport).
//!
//! [`CmService::open`] creates the GSI QP (UD, QP 1, Q_Key 0x80010000)
//! with a ring of receives, and a thread that feeds the agent what QP 1
//! receives and the time, posts the MADs it sends, and queues its events
//! for [`CmService::wait_event`]. The thread sleeps on its CQ's channel, as
//! an event-driven application does, not in `Cq::wait`: a thread in
//! `Cq::wait` becomes the device's receiver, and the CM's, always waiting,
//! took every packet of the application's QPs too (its busy poller then
//! waited for the CM thread's wake-up on each one: `fi_pingpong` 55-150 us
//! a message). The consumer's calls go straight to the
//! agent. Received MADs carry their addresses in the GRH area of the
//! receive buffer (the IPv4 header in its last 20 bytes, as rxe puts it).

use std::collections::VecDeque;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use roce_cm::cm::{Cm, CmConfig, CmError, CmEvent, CmStats, CommId, ConnectParams, SidrAnswer, SidrParams, Transmit};
use roce_cm::wire::mad::{GSI_QKEY, GSI_QPN};
use roce_cm::wire::{MAD_LEN, RejReason, RepRepr};

use crate::error::Error;
use crate::verbs::{Ah, CompChannel, Cq, Mr, Pd, Qp, QpInit, ToInit};
use crate::{AccessFlags, Context, Payload, RecvWr, SendFlags, SendWr, UdDest, Wc, WcOpcode, WcStatus, WrOpcode};

/// Receives kept posted on QP 1.
const RECV_RING: usize = 64;
/// Send slots (a MAD each) in flight at once.
const SEND_RING: usize = 64;
/// The GRH area in front of each received MAD.
const GRH: usize = 40;
/// How long the thread sleeps at most between looks at its timers.
const TICK: Duration = Duration::from_millis(50);

/// What the service counts beyond the agent.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct CmServiceStats {
    /// MADs received on QP 1 and handed to the agent.
    pub received: u64,
    /// Receives on QP 1 that were not MADs (wrong length, no GRH): dropped.
    pub dropped: u64,
    /// MADs the agent sent that found no send slot (lost, as on a full
    /// QP; the agent's retransmission covers them).
    pub send_overflow: u64,
}

struct State {
    cm: Cm,
    events: VecDeque<CmEvent>,
    stats: CmServiceStats,
    /// Send slots in use (by wr_id).
    busy: Vec<bool>,
    /// AHs by peer address.
    ahs: Vec<(IpAddr, Ah)>,
    /// Service IDs listened on (given up when the service closes).
    listening: Vec<u64>,
    /// Whether the peers' QPs on this host's shared devices still have a
    /// process (see [`WATCH`]), and when to look next.
    peers: roce_host::PeerWatch,
    next_watch: Instant,
}

/// How often the connections' peers on this host are looked at: a peer
/// process that dies is noticed within this (and the thread's tick), as
/// its kernel's DREQ or REJ would be at once (roce-host's `peers`).
const WATCH: Duration = Duration::from_millis(200);

/// Where a service's events go instead of [`CmService::wait_event`]'s
/// queue: called from the service's thread or the consumer's call that made
/// them, with no lock held (it may call the service again).
pub type EventSink = Box<dyn Fn(CmEvent) + Send + Sync>;

struct Inner {
    sink: Option<EventSink>,
    ctx: Context,
    pd: Pd,
    cq: Cq,
    /// `cq`'s channel, which the thread sleeps on.
    channel: CompChannel,
    qp: Qp,
    /// RECV_RING receive buffers of GRH + MAD, then SEND_RING send slots.
    mr: Mr,
    state: Mutex<State>,
    ready: Condvar,
    stop: AtomicBool,
}

/// The CM of one context (see the module documentation).
pub struct CmService {
    inner: Arc<Inner>,
    thread: Option<JoinHandle<()>>,
}

impl CmService {
    /// Opens the CM on `ctx`: QP 1 and the agent's thread. `seed` makes the
    /// comm IDs (random, as Linux's) reproducible.
    pub fn open(ctx: &Context, seed: u64) -> Result<CmService, Error> {
        CmService::open_with(ctx, seed, None)
    }

    /// [`CmService::open`] with its events handed to `sink` as they come.
    pub fn open_with(ctx: &Context, seed: u64, sink: Option<EventSink>) -> Result<CmService, Error> {
        let pd = ctx.alloc_pd()?;
        let channel = ctx.create_comp_channel()?;
        let cq = ctx.create_cq((RECV_RING + SEND_RING) as u32, Some(&channel))?;
        let depth = RECV_RING.max(SEND_RING) as u32;
        let qp = pd.create_gsi_qp(QpInit::rc(&cq, &cq, depth).with_type(crate::QpType::Ud))?;
        qp.to_init(&ToInit { access: AccessFlags(0), qkey: GSI_QKEY })?;
        let mr = pd.reg_mr((RECV_RING * (GRH + MAD_LEN)) + SEND_RING * MAD_LEN, AccessFlags::LOCAL_WRITE)?;
        for k in 0..RECV_RING {
            post_recv(&qp, &mr, k)?;
        }
        // INIT -> RTR -> RTS (a UD QP needs no peer).
        qp.connect_from_init(0, &qp.endpoint(0), &crate::ConnectOptions { qkey: GSI_QKEY, ..Default::default() })?;
        // On a shared device every comm ID carries this process's slot, so
        // whichever process the kernel hands a MAD finds its owner.
        let member = ctx.shared().sock.member();
        let (comm_id_mask, comm_id_tag) = member.map_or((0, 0), |m| m.comm_id_tag());
        let config = CmConfig {
            ca_guid: ctx.device().node_guid(),
            tid_hi: 1,
            ack_delay: ctx.query_device().local_ca_ack_delay,
            comm_id_mask,
            comm_id_tag,
        };
        if let Some(m) = member {
            m.set_cm(true);
        }
        let inner = Arc::new(Inner {
            sink,
            ctx: ctx.clone(),
            pd,
            cq,
            channel,
            qp,
            mr,
            state: Mutex::new(State {
                cm: Cm::new(config, seed),
                events: VecDeque::new(),
                stats: CmServiceStats::default(),
                busy: vec![false; SEND_RING],
                ahs: Vec::new(),
                listening: Vec::new(),
                peers: roce_host::PeerWatch::new(),
                next_watch: Instant::now(),
            }),
            ready: Condvar::new(),
            stop: AtomicBool::new(false),
        });
        let i = inner.clone();
        let thread = crate::thread::spawn("softroce-cm".into(), move || i.run())?;
        Ok(CmService { inner, thread: Some(thread) })
    }

    /// The device's address (what a peer connects to).
    pub fn local_addr(&self) -> IpAddr {
        self.inner.ctx.device().addr
    }

    /// Listens on `service_id`, for the whole shared device: a REQ for it
    /// reaching another process of the host is handed to this one. Fails
    /// when another process listens on it already.
    ///
    /// The CM listens before the device's table names this process: a REQ
    /// the table routes here must find the listener (one that came between
    /// the two was rejected, REJ 8, while a REQ the table routes nowhere
    /// waits for the listener, `roce_host::LISTEN_GRACE`).
    pub fn listen(&self, service_id: u64) -> Result<(), Error> {
        self.inner.with(|cm| cm.listen(service_id))?;
        #[cfg(any(test, feature = "testing"))]
        crate::testing::listen_gap();
        if let Some(m) = self.inner.ctx.shared().sock.member()
            && let Err(e) = m.listen(service_id)
        {
            self.inner.with(|cm| cm.unlisten(service_id));
            return Err(e.into());
        }
        self.inner.state.lock().unwrap_or_else(|e| e.into_inner()).listening.push(service_id);
        Ok(())
    }

    /// Stops listening on `service_id`.
    pub fn unlisten(&self, service_id: u64) {
        if let Some(m) = self.inner.ctx.shared().sock.member() {
            m.unlisten(service_id);
        }
        self.inner.with(|cm| cm.unlisten(service_id));
        self.inner.state.lock().unwrap_or_else(|e| e.into_inner()).listening.retain(|s| *s != service_id);
    }

    /// Starts an active connection (sends the REQ).
    pub fn connect(&self, p: ConnectParams) -> CommId {
        self.connect_then(p, |_| {})
    }

    /// [`CmService::connect`], calling `before_send` with the new comm ID
    /// before the REQ leaves: a sink learns where the answer's events go
    /// before the answer can come (a REJ from this host takes microseconds).
    pub fn connect_then(&self, p: ConnectParams, before_send: impl FnOnce(CommId)) -> CommId {
        self.inner.with(|cm| {
            let id = cm.connect(Instant::now(), p);
            before_send(id);
            id
        })
    }

    /// Starts a SIDR exchange (sends the SIDR_REQ), calling `before_send`
    /// with its ID first (see [`CmService::connect_then`]).
    pub fn sidr_connect_then(&self, p: SidrParams, before_send: impl FnOnce(CommId)) -> CommId {
        self.inner.with(|cm| {
            let id = cm.sidr_connect(Instant::now(), p);
            before_send(id);
            id
        })
    }

    /// Answers a SIDR_REQ (sends the SIDR_REP).
    pub fn sidr_reply(&self, id: CommId, answer: SidrAnswer) -> Result<(), CmError> {
        self.inner.with(|cm| cm.sidr_reply(id, answer))
    }

    /// Accepts a passive connection (sends the REP).
    pub fn accept(&self, id: CommId, rep: RepRepr) -> Result<(), CmError> {
        self.inner.with(|cm| cm.accept(Instant::now(), id, rep))
    }

    /// Rejects a connection being made.
    pub fn reject(&self, id: CommId, reason: RejReason, private_data: [u8; 148]) -> Result<(), CmError> {
        self.inner.with(|cm| cm.reject(Instant::now(), id, reason, private_data))
    }

    /// Sends the RTU (active) or marks the connection established (passive).
    pub fn establish(&self, id: CommId) -> Result<(), CmError> {
        self.inner.with(|cm| cm.establish(Instant::now(), id))
    }

    /// Sends the DREQ, or the DREP to a DREQ received.
    pub fn disconnect(&self, id: CommId) -> Result<(), CmError> {
        self.inner.with(|cm| cm.disconnect(Instant::now(), id))
    }

    /// Ends `id` as Linux's `ib_destroy_cm_id` does (no more events).
    pub fn destroy(&self, id: CommId) {
        self.inner.with(|cm| cm.destroy(Instant::now(), id))
    }

    /// Ends every connection as [`CmService::destroy`] does (at exit).
    pub fn destroy_all(&self) {
        self.inner.with(|cm| cm.destroy_all(Instant::now()))
    }

    /// The next event, waiting up to `timeout` for one.
    pub fn wait_event(&self, timeout: Duration) -> Option<CmEvent> {
        let deadline = Instant::now() + timeout;
        let mut st = self.inner.state.lock().unwrap_or_else(|e| e.into_inner());
        loop {
            if let Some(e) = st.events.pop_front() {
                return Some(e);
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return None;
            }
            st = self.inner.ready.wait_timeout(st, left).unwrap_or_else(|e| e.into_inner()).0;
        }
    }

    /// The agent's counters and the service's.
    pub fn stats(&self) -> (CmStats, CmServiceStats) {
        let st = self.inner.state.lock().unwrap_or_else(|e| e.into_inner());
        (st.cm.stats(), st.stats)
    }
}

impl Drop for CmService {
    fn drop(&mut self) {
        if let Some(m) = self.inner.ctx.shared().sock.member() {
            m.set_cm(false);
            let listening = std::mem::take(&mut self.inner.state.lock().unwrap_or_else(|e| e.into_inner()).listening);
            for sid in listening {
                m.unlisten(sid);
            }
        }
        self.inner.stop.store(true, Ordering::Release);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn post_recv(qp: &Qp, mr: &Mr, k: usize) -> Result<(), Error> {
    let sge = [mr.sge(k * (GRH + MAD_LEN), (GRH + MAD_LEN) as u32)];
    qp.post_recv(&RecvWr { wr_id: k as u64, sg_list: &sge })
}

/// The source and destination addresses in a GRH area: an IPv4 header in
/// its last 20 bytes (when the first 20 are zero), else an IPv6 GRH.
fn grh_addrs(grh: &[u8; GRH]) -> (IpAddr, IpAddr) {
    if grh[..20].iter().all(|b| *b == 0) {
        let a = |at: usize| IpAddr::V4(Ipv4Addr::new(grh[at], grh[at + 1], grh[at + 2], grh[at + 3]));
        (a(32), a(36))
    } else {
        let a = |at: usize| IpAddr::V6(Ipv6Addr::from(<[u8; 16]>::try_from(&grh[at..at + 16]).expect("16 bytes")));
        (a(8), a(24))
    }
}

impl Inner {
    /// Runs `f` on the agent, then sends what it queued and hands on its events.
    fn with<R>(&self, f: impl FnOnce(&mut Cm) -> R) -> R {
        let mut st = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let r = f(&mut st.cm);
        let events = self.flush(&mut st);
        drop(st);
        self.deliver(events);
        r
    }

    /// Sends what the agent queued; returns its events for [`Inner::deliver`].
    fn flush(&self, st: &mut State) -> Vec<CmEvent> {
        while let Some(t) = st.cm.poll_transmit() {
            self.send(st, &t);
        }
        std::iter::from_fn(|| st.cm.poll_event()).collect()
    }

    /// Hands `events` to the sink, or queues them for `wait_event` (no lock held).
    fn deliver(&self, events: Vec<CmEvent>) {
        if events.is_empty() {
            return;
        }
        match &self.sink {
            Some(sink) => events.into_iter().for_each(sink),
            None => {
                self.state.lock().unwrap_or_else(|e| e.into_inner()).events.extend(events);
                self.ready.notify_all();
            }
        }
    }

    fn send(&self, st: &mut State, t: &Transmit) {
        let Some(slot) = st.busy.iter().position(|b| !b) else {
            st.stats.send_overflow += 1;
            return;
        };
        let ah = match st.ahs.iter().find(|(a, _)| *a == t.to) {
            Some((_, ah)) => ah.clone(),
            None => match self.pd.create_ah(t.to) {
                Ok(ah) => {
                    st.ahs.push((t.to, ah.clone()));
                    ah
                }
                Err(_) => {
                    st.stats.send_overflow += 1;
                    return;
                }
            },
        };
        let off = RECV_RING * (GRH + MAD_LEN) + slot * MAD_LEN;
        if self.mr.write(off, &t.mad.to_bytes()).is_err() {
            st.stats.send_overflow += 1;
            return;
        }
        let sge = [self.mr.sge(off, MAD_LEN as u32)];
        let mut wr = SendWr::new((RECV_RING + slot) as u64, WrOpcode::Send, SendFlags::SIGNALED, Payload::Sges(&sge));
        wr.ud = Some(UdDest { ah: ah.handle(), remote_qpn: GSI_QPN.into(), remote_qkey: GSI_QKEY });
        if self.qp.post_send(&wr).is_ok() {
            st.busy[slot] = true;
        } else {
            st.stats.send_overflow += 1;
        }
    }

    /// The thread: QP 1's completions and the agent's timers.
    fn run(self: Arc<Inner>) {
        let mut wc = [Wc::new(0, WcStatus::Success, WcOpcode::Send, 0); 16];
        let mut mad = [0u8; GRH + MAD_LEN];
        // Armed before every look: a completion after it fires the channel,
        // and the polls of an armed CQ are no busy poller's.
        let _ = self.cq.req_notify(false);
        while !self.stop.load(Ordering::Acquire) {
            let n = match self.cq.poll(&mut wc) {
                Ok(0) => {
                    let wait = {
                        let st = self.state.lock().unwrap_or_else(|e| e.into_inner());
                        st.cm.poll_timeout().map_or(TICK, |t| t.saturating_duration_since(Instant::now()).min(TICK))
                    };
                    match self.channel.get_event(Some(wait)) {
                        Ok(Some(_)) => {
                            // Re-armed before the next poll takes what came.
                            let _ = self.cq.req_notify(false);
                        }
                        Ok(None) => {}
                        Err(_) => std::thread::sleep(TICK),
                    }
                    0
                }
                Ok(n) => n,
                Err(_) => {
                    std::thread::sleep(TICK);
                    0
                }
            };
            let mut st = self.state.lock().unwrap_or_else(|e| e.into_inner());
            let now = Instant::now();
            for w in &wc[..n] {
                let k = w.wr_id as usize;
                if k >= RECV_RING {
                    if let Some(b) = st.busy.get_mut(k - RECV_RING) {
                        *b = false;
                    }
                    continue;
                }
                let ok = w.status == WcStatus::Success
                    && w.byte_len as usize == GRH + MAD_LEN
                    && w.wc_flags.contains(crate::WcFlags::GRH)
                    && self.mr.read(k * (GRH + MAD_LEN), &mut mad).is_ok();
                if ok {
                    let grh: [u8; GRH] = mad[..GRH].try_into().expect("40 bytes");
                    let (from, to) = grh_addrs(&grh);
                    st.stats.received += 1;
                    st.cm.handle_mad(now, from, to, &mad[GRH..]);
                } else if w.status != WcStatus::WrFlushErr {
                    st.stats.dropped += 1;
                }
                if w.status != WcStatus::WrFlushErr {
                    let _ = post_recv(&self.qp, &self.mr, k);
                }
            }
            st.cm.handle_timeout(now);
            if now >= st.next_watch {
                st.next_watch = now + WATCH;
                for (id, peer, qpn) in st.cm.watched() {
                    let at = std::net::SocketAddr::new(peer, roce_udp::ROCE_PORT);
                    if st.peers.qp_alive(at, qpn, now) == Some(false) {
                        st.cm.handle_peer_gone(now, id);
                    }
                }
            }
            let events = self.flush(&mut st);
            drop(st);
            self.deliver(events);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grh_addresses_of_ipv4_and_ipv6() {
        let mut g = [0u8; GRH];
        g[32..36].copy_from_slice(&[10, 0, 0, 1]);
        g[36..40].copy_from_slice(&[10, 0, 0, 2]);
        assert_eq!(grh_addrs(&g), ("10.0.0.1".parse().unwrap(), "10.0.0.2".parse().unwrap()));
        let mut g = [0u8; GRH];
        g[0] = 0x60;
        g[8..24].copy_from_slice(&"fd00::1".parse::<Ipv6Addr>().unwrap().octets());
        g[24..40].copy_from_slice(&"fd00::2".parse::<Ipv6Addr>().unwrap().octets());
        assert_eq!(grh_addrs(&g), ("fd00::1".parse().unwrap(), "fd00::2".parse().unwrap()));
    }
}
