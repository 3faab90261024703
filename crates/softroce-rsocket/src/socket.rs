//! The I/O part of an rsocket: its rdma_cm id, QP, CQ and registered
//! buffers, and the calls that drive [`Stream`] and [`State`] with them
//! (connect, send, receive, shutdown, riomap, riowrite), waiting where a
//! blocking call must.
//!
//! Each rsocket is one [`Socket`]: a mutex over its state and a condition
//! variable. A call that must wait polls the CQ, then arms it and sleeps in
//! `poll(2)` on the completion channel and the event channel with the lock
//! released; a second thread that must wait meanwhile sleeps on the
//! condition variable, woken when the first has looked at the CQ again
//! (rsockets' `cq_lock` / `cq_wait_lock` pair, as one lock).

use std::os::fd::AsRawFd;
use std::sync::{Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use softroce::rdma_cm::{CmId, ConnParam, EventChannel, EventType};
use softroce::{
    AccessFlags, CompChannel, Cq, Mr, Payload, Pd, Qp, QpCap, QpInit, QpType, RecvWr, SendFlags, SendWr, Wc, WcFlags,
    WcOpcode, WcStatus, WrOpcode,
};

use super::config::defaults;
use super::state::{Input, State, shutdown_plan};
use super::stream::{self, OLAP_START, ProtoError, Received, Sent, Sizes, Source, Stream, Write};
use super::wire::{ConnData, Ctrl, IOMAP_LEN, IomapEntry, Msg, Order, RsSge, SGE_LEN};
use super::{Errno, pollfd, sys_poll};

/// Receive work requests carry this bit (`RS_WR_ID_FLAG_RECV`); send ones
/// carry the message they send.
const RECV_TAG: u64 = 1 << 63;

/// A socket's options (what `rsetsockopt` and `rfcntl` set).
#[derive(Debug, Clone, Copy)]
pub struct Options {
    /// The sizes a connection will take (rsockets' `sq_size` ... before
    /// the device's limits apply).
    pub sizes: Sizes,
    /// `rfcntl(F_SETFL)`'s flags (O_NONBLOCK is the one that counts).
    pub fs_flags: i32,
    /// `rfcntl(F_SETFD)`'s flags.
    pub fd_flags: i32,
    /// SOL_SOCKET, IPPROTO_TCP and IPPROTO_IPV6 on/off options, one bit per option number.
    pub so_opts: u64,
    /// See `so_opts`.
    pub tcp_opts: u64,
    /// See `so_opts`.
    pub ipv6_opts: u64,
    /// `IP_TOS`.
    pub tos: i32,
    /// `SO_KEEPALIVE` (kept; no probes are sent).
    pub keepalive: bool,
    /// `TCP_KEEPIDLE` (seconds; `/proc/sys/net/ipv4/tcp_keepalive_time` by default).
    pub keepalive_time: u32,
}

impl Default for Options {
    /// [`Options::new`].
    fn default() -> Options {
        Options::new()
    }
}

impl Options {
    /// A new socket's options: the process's defaults.
    pub fn new() -> Options {
        let d = defaults();
        Options {
            sizes: Sizes { sq: d.sq, rq: d.rq, inline: d.inline, sbuf: d.wmem, rbuf: d.mem, iomap: d.iomap },
            fs_flags: 0,
            fd_flags: 0,
            so_opts: 0,
            tcp_opts: 0,
            ipv6_opts: 0,
            tos: 0,
            keepalive: false,
            keepalive_time: 0,
        }
    }

    /// What an accepted socket takes from its listener (rsockets' `rs_alloc`
    /// with an inherited socket): sizes and file flags (and the keepalive
    /// time, which rsockets reads again from /proc).
    pub fn inherited(&self) -> Options {
        Options {
            sizes: self.sizes,
            fs_flags: self.fs_flags,
            fd_flags: self.fd_flags,
            keepalive_time: self.keepalive_time,
            ..Options::new()
        }
    }

    /// Whether calls do not block (O_NONBLOCK).
    pub fn nonblocking(&self) -> bool {
        self.fs_flags & libc::O_NONBLOCK != 0
    }
}

/// A riomap'd buffer.
struct IoMap {
    /// Its entry in the peer's table (`None`: a local-only mapping).
    index: Option<u16>,
    /// The riowrite offset it starts at.
    offset: u64,
    mr: Mr,
    /// Whether the peer has been told (written into its table).
    sent: bool,
}

/// What a connected rsocket has.
struct Conn {
    pd: Pd,
    comp: CompChannel,
    cq: Cq,
    qp: Qp,
    /// The send ring, then 4 control slots when the inline size is below 16.
    smr: Mr,
    /// The receive ring.
    rmr: Mr,
    /// The target SGL (2 entries) and this side's iomap table.
    tmr: Mr,
    stream: Stream,
    cq_armed: bool,
    maps: Vec<IoMap>,
    /// The path MTU (TCP_MAXSEG).
    mtu: u32,
}

/// A completion to poll into.
const NO_WC: Wc = Wc {
    wr_id: 0,
    status: WcStatus::Success,
    opcode: WcOpcode::Send,
    vendor_err: 0,
    byte_len: 0,
    imm_data: 0,
    qp_num: softroce::Qpn::new(0),
    src_qp: softroce::Qpn::new(0),
    wc_flags: WcFlags(0),
    pkey_index: 0,
    slid: 0,
    sl: 0,
    dlid_path_bits: 0,
};

impl Conn {
    /// The id's QP (RC, signaled, 2 send SGEs, 1 receive SGE), its CQ
    /// (one for both queues, `sq + rq` entries, armed), the three regions
    /// and `rq` receives posted (`rs_create_ep`).
    fn new(id: &CmId, want: Sizes) -> Result<Conn, Errno> {
        let ctx = id.context().ok_or(Errno(libc::ENODEV))?;
        let attr = ctx.query_device();
        let sizes = want.clamped(attr.max_qp_wr);
        let pd = ctx.alloc_pd()?;
        let comp = ctx.create_comp_channel()?;
        let cq = ctx.create_cq(u32::from(sizes.sq) + u32::from(sizes.rq), Some(&comp))?;
        cq.req_notify(false)?;
        let cap = QpCap {
            max_send_wr: u32::from(sizes.sq),
            max_recv_wr: u32::from(sizes.rq),
            max_send_sge: 2,
            max_recv_sge: 1,
            max_inline_data: u32::from(sizes.inline),
        };
        let init = QpInit {
            qp_type: QpType::Rc,
            send_cq: &cq,
            recv_cq: &cq,
            srq: None,
            cap,
            sq_sig_all: true,
            block_self_mcast_lb: false,
        };
        let qp = id.create_qp(&pd, init)?;
        let ctrl = if usize::from(sizes.inline) < SGE_LEN { SGE_LEN * stream::CTRL_SLOTS as usize } else { 0 };
        let smr = pd.reg_mr(sizes.sbuf as usize + ctrl, AccessFlags::LOCAL_WRITE)?;
        let remote = AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE;
        let tmr = pd.reg_mr(SGE_LEN * stream::SGL_SIZE + IOMAP_LEN * usize::from(sizes.iomap), remote)?;
        let rmr = pd.reg_mr(sizes.rbuf as usize, remote)?;
        let stream = Stream::new(sizes, rmr.addr(), rmr.rkey());
        for _ in 0..sizes.rq {
            qp.post_recv(&RecvWr { wr_id: RECV_TAG, sg_list: &[] })?;
        }
        let mtu = ctx.device().active_mtu().bytes() as u32;
        Ok(Conn { pd, comp, cq, qp, smr, rmr, tmr, stream, cq_armed: true, maps: Vec::new(), mtu })
    }

    /// This side's `rs_conn_data`.
    fn conn_data(&self) -> [u8; 40] {
        self.stream.conn_data(self.tmr.addr(), self.tmr.rkey()).emit()
    }

    /// Takes the peer's connection data and stores its first grant.
    fn take_peer(&mut self, c: &ConnData) -> Result<(), ProtoError> {
        let first = self.stream.on_peer_conn_data(c)?;
        let _ = self.tmr.write(0, &first.to_bytes(Order::HOST));
        Ok(())
    }

    /// The target SGL as the peer last wrote it.
    fn load_targets(&mut self) {
        let mut b = [0u8; SGE_LEN * stream::SGL_SIZE];
        if self.tmr.read(0, &mut b).is_ok() {
            let e =
                |i: usize| RsSge::from_bytes(b[i * SGE_LEN..(i + 1) * SGE_LEN].try_into().expect("16"), Order::HOST);
            self.stream.set_targets([e(0), e(1)]);
        }
    }

    /// The entry of this side's iomap table (written by the peer) that maps `offset`.
    fn iomap_for(&self, offset: u64) -> Option<IomapEntry> {
        (0..usize::from(self.stream.sizes().iomap)).find_map(|i| {
            let mut b = [0u8; IOMAP_LEN];
            self.tmr.read(SGE_LEN * stream::SGL_SIZE + i * IOMAP_LEN, &mut b).ok()?;
            Some(IomapEntry::from_bytes(&b, Order::HOST)).filter(|e| e.covers(offset))
        })
    }

    /// Posts `w` with `chunk` as its bytes (copied into the send ring
    /// unless inline), storing its target-entry update first.
    fn post(&mut self, w: &Write, chunk: &[u8]) -> Result<(), Errno> {
        if let Some((i, e)) = w.target_update {
            self.tmr.write(i * SGE_LEN, &e.to_bytes(Order::HOST))?;
        }
        let sges;
        let (payload, inline) = match w.source {
            Source::Inline => (Payload::Inline(chunk), true),
            Source::Sbuf { off, len, wrap } => {
                let (a, b) = chunk.split_at(len as usize);
                self.smr.write(off as usize, a)?;
                if wrap > 0 {
                    self.smr.write(0, b)?;
                }
                sges = [self.smr.sge(off as usize, len), self.smr.sge(0, wrap)];
                (Payload::Sges(&sges[..if wrap > 0 { 2 } else { 1 }]), false)
            }
        };
        let op = if w.imm.is_some() { WrOpcode::RdmaWriteWithImm } else { WrOpcode::RdmaWrite };
        let flags = if inline { SendFlags::SIGNALED | SendFlags::INLINE } else { SendFlags::SIGNALED };
        let mut wr = SendWr::new(u64::from(w.tag), op, flags, payload);
        wr.imm_data = w.imm.unwrap_or(0);
        wr.remote_addr = w.remote_addr;
        wr.rkey = w.rkey;
        self.qp.post_send(&wr)?;
        Ok(())
    }

    /// A zero-length WRITE WITH IMMEDIATE carrying `msg` (`rs_post_msg`).
    fn post_msg(&self, msg: u32) -> Result<(), Errno> {
        let mut wr = SendWr::new(u64::from(msg), WrOpcode::RdmaWriteWithImm, SendFlags::SIGNALED, Payload::Sges(&[]));
        wr.imm_data = msg;
        self.qp.post_send(&wr)?;
        Ok(())
    }

    /// Sends the due credit update (`rs_send_credits`).
    fn send_credits(&mut self) -> Result<(), Errno> {
        let u = self.stream.credit_update();
        let Some(g) = u.grant else { return self.post_msg(u.imm) };
        let sge;
        let (payload, flags) = match g.slot {
            None => (Payload::Inline(&g.entry), SendFlags::SIGNALED | SendFlags::INLINE),
            Some(off) => {
                self.smr.write(off as usize, &g.entry)?;
                sge = [self.smr.sge(off as usize, SGE_LEN as u32)];
                (Payload::Sges(&sge), SendFlags::SIGNALED)
            }
        };
        let mut wr = SendWr::new(u64::from(u.imm), WrOpcode::RdmaWriteWithImm, flags, payload);
        wr.imm_data = u.imm;
        wr.remote_addr = g.remote_addr;
        wr.rkey = g.rkey;
        self.qp.post_send(&wr)?;
        Ok(())
    }

    /// Takes a completion event of the channel if one came: the CQ is
    /// disarmed then.
    fn take_cq_event(&mut self) {
        while self.comp.try_get_event().is_some() {
            self.cq_armed = false;
        }
    }
}

/// An rsocket's state under its lock.
pub struct Inner {
    /// Where the socket is in its life.
    pub state: State,
    /// `SO_ERROR`.
    pub err: i32,
    /// AF_INET or AF_INET6.
    pub domain: i32,
    /// What `rsetsockopt` and `rfcntl` set.
    pub opts: Options,
    /// The id's event channel: its fd is the rsocket's number.
    pub ch: EventChannel,
    /// Its rdma_cm id (`RDMA_PS_TCP`).
    pub id: CmId,
    conn: Option<Conn>,
    /// A listener's accept queue and service thread.
    pub(crate) listener: Option<super::listen::Listener>,
    /// A thread sleeps on the socket's descriptors.
    fd_waiter: bool,
    /// `rdma_disconnect` was called.
    dreq: bool,
    /// `rclose` was called: waiters give up.
    closed: bool,
}

impl Inner {
    fn input(&mut self, i: Input) {
        match self.state.on(i) {
            Some(s) => self.state = s,
            None => crate::trace_err("rsocket", &format!("{i:?} ignored in {:?}", self.state)),
        }
    }

    /// Fails the socket for what the peer sent: EPROTO, and the
    /// connection ends (the peer sees the DREQ).
    fn protocol_error(&mut self, e: ProtoError) {
        crate::trace_err("rsocket: the peer broke the protocol", &e);
        self.err = libc::EPROTO;
        self.input(Input::ProtocolError);
        self.disconnect_cm();
    }

    /// `rdma_disconnect`, once: the QP to ERR and the DREQ (or DREP).
    fn disconnect_cm(&mut self) {
        if !self.dreq && self.state != State::Connecting {
            self.dreq = true;
            let _ = self.id.disconnect();
        }
    }

    /// A transport failure of the socket's own resources.
    fn fail(&mut self, e: Errno) {
        self.err = e.0;
        self.input(Input::TransportError);
    }

    /// Whether a data write may be posted now.
    pub fn can_send(&self) -> bool {
        self.conn.as_ref().is_some_and(|c| c.stream.can_send())
    }

    /// Whether data waits to be read.
    pub fn have_rdata(&self) -> bool {
        self.conn.as_ref().is_some_and(|c| c.stream.have_rdata())
    }

    fn ctrl_avail(&self) -> bool {
        self.conn.as_ref().is_some_and(|c| c.stream.ctrl_avail())
    }

    fn all_sends_done(&self) -> bool {
        self.conn.as_ref().is_none_or(|c| c.stream.all_sends_done())
    }

    /// The path MTU, 2048 before a connection (TCP_MAXSEG).
    pub fn mtu(&self) -> u32 {
        self.conn.as_ref().map_or(2048, |c| c.mtu)
    }

    /// The sizes in use (after the device's limits, once connected).
    pub fn sizes(&self) -> Sizes {
        self.conn.as_ref().map_or(self.opts.sizes, |c| c.stream.sizes())
    }

    /// Whether the socket's buffers exist (SO_RCVBUF, SO_SNDBUF apply before).
    pub fn has_buffers(&self) -> bool {
        self.conn.is_some()
    }

    /// Everything the socket can do without waiting (`rs_process_cq`'s
    /// pass): CM events, credits, completions, the peer's target SGL.
    pub fn progress(&mut self) {
        if self.state != State::Listening {
            self.cm_events();
        }
        if self.conn.is_none() || !self.state.has_connection() {
            return;
        }
        self.update_credits();
        self.poll_cq();
        self.update_credits();
        if let Some(c) = self.conn.as_mut() {
            c.load_targets();
        }
    }

    fn update_credits(&mut self) {
        let connected = self.state.connected();
        let Some(c) = self.conn.as_mut() else { return };
        if c.stream.credits_due(connected)
            && let Err(e) = c.send_credits()
        {
            self.fail(e);
        }
    }

    /// The CQ's completions (`rs_poll_cq`), then as many receives posted
    /// again as were consumed.
    fn poll_cq(&mut self) {
        let mut wcs = [NO_WC; 16];
        let mut consumed = 0u32;
        loop {
            let Some(c) = self.conn.as_mut() else { return };
            let n = match c.cq.poll(&mut wcs) {
                Ok(n) => n,
                Err(e) => {
                    self.fail(Errno::from(e));
                    return;
                }
            };
            if n == 0 {
                break;
            }
            for wc in &wcs[..n] {
                self.on_wc(wc, &mut consumed);
            }
        }
        if !self.state.connected() {
            return;
        }
        let Some(c) = self.conn.as_ref() else { return };
        let r = (0..consumed).try_for_each(|_| c.qp.post_recv(&RecvWr { wr_id: RECV_TAG, sg_list: &[] }));
        if let Err(e) = r {
            self.fail(Errno::from(e));
        }
    }

    fn on_wc(&mut self, wc: &Wc, consumed: &mut u32) {
        let Some(c) = self.conn.as_mut() else { return };
        if wc.wr_id & RECV_TAG != 0 {
            // Flushed receives (after a disconnect) carry nothing.
            if wc.status != WcStatus::Success {
                return;
            }
            *consumed += 1;
            let imm = wc.wc_flags.contains(WcFlags::WITH_IMM).then_some(wc.imm_data);
            let iomap = c.stream.sizes().iomap;
            match c.stream.on_recv(imm, wc.byte_len, iomap) {
                Ok(Received::Ctrl(Ctrl::Disconnect)) => self.input(Input::PeerDisconnect),
                Ok(Received::Ctrl(Ctrl::Shutdown)) => self.input(Input::PeerShutdown),
                Ok(_) => {}
                Err(e) => self.protocol_error(e),
            }
            return;
        }
        if c.stream.on_send_done(wc.wr_id as u32) == Sent::Disconnect {
            self.input(Input::DisconnectSent);
        }
        if wc.status != WcStatus::Success && self.state.connected() {
            crate::trace_err("rsocket: a send failed", &wc.status.as_str());
            self.fail(Errno(libc::EIO));
        }
    }

    /// The id's rdma_cm events: the outcome of a connect, the peer's DREQ.
    fn cm_events(&mut self) {
        while let Some(e) = self.ch.get_event(Some(Duration::ZERO)) {
            match (self.state, e.event) {
                (State::Connecting, EventType::Established) => self.finish_connect(&e.conn.private_data),
                (State::Connecting, EventType::Rejected) => self.connect_failed(Errno(libc::ECONNREFUSED)),
                (
                    State::Connecting,
                    EventType::Unreachable | EventType::ConnectError | EventType::AddrError | EventType::RouteError,
                ) => self.connect_failed(Errno(if e.status < 0 { -e.status } else { libc::ETIMEDOUT })),
                (_, EventType::Disconnected) if self.state.has_connection() => self.input(Input::CmDisconnected),
                _ => {}
            }
        }
    }

    fn connect_failed(&mut self, e: Errno) {
        self.err = e.0;
        self.input(Input::ConnectRefused);
    }

    /// The REP's connection data: version 1 or the connect fails (ENOTSUP).
    fn finish_connect(&mut self, private: &[u8]) {
        let Some(c) = self.conn.as_mut() else { return };
        let r = match ConnData::parse(private) {
            Ok(d) => c.take_peer(&d),
            Err(e) => {
                crate::trace_err("rsocket", &e);
                self.connect_failed(Errno(libc::ENOTSUP));
                self.dreq = true;
                let _ = self.id.disconnect();
                return;
            }
        };
        match r {
            Ok(()) => self.input(Input::Established),
            Err(e) => {
                crate::trace_err("rsocket: the peer's connection data", &e);
                self.connect_failed(Errno(libc::EPROTO));
                self.dreq = true;
                let _ = self.id.disconnect();
            }
        }
    }

    /// The descriptors a wait sleeps on, kept open by the clones.
    fn wait_fds(&self) -> (Option<CompChannel>, EventChannel) {
        (self.conn.as_ref().map(|c| c.comp.clone()), self.ch.clone())
    }

    /// Arms the CQ (once per completion event): its next completion makes
    /// the channel readable.
    fn arm(&mut self) -> bool {
        let Some(c) = self.conn.as_mut() else { return false };
        if c.cq_armed || !self.state.has_connection() {
            return false;
        }
        match c.cq.req_notify(false) {
            Ok(()) => c.cq_armed = true,
            Err(e) => self.fail(Errno::from(e)),
        }
        true
    }

    /// The descriptors `rpoll` sleeps on for this socket: the completion
    /// channel (connected) and the event channel.
    pub(crate) fn poll_fds(&mut self, out: &mut Vec<Holder>) {
        if let Some(l) = &self.listener {
            out.push(Holder::Accept(l.queue()));
            return;
        }
        if let Some(c) = &self.conn
            && self.state.has_connection()
        {
            out.push(Holder::Comp(c.comp.clone()));
        }
        out.push(Holder::Cm(self.ch.clone()));
    }

    /// Arms the CQ for `rpoll` (returns whether it did: look again first).
    pub fn poll_arm(&mut self) -> bool {
        self.arm()
    }

    /// After `rpoll`'s sleep: the completion event it woke for, if any.
    pub fn poll_woke(&mut self) {
        if let Some(c) = self.conn.as_mut() {
            c.take_cq_event();
        }
    }

    /// The sizes a connection gets, and its connection data, for the
    /// listener (which accepts in its own thread).
    fn connect_param(c: &Conn, max_rd: u8, req: &ConnParam) -> ConnParam {
        ConnParam {
            private_data: c.conn_data().to_vec(),
            responder_resources: req.responder_resources.min(max_rd),
            initiator_depth: req.initiator_depth.min(max_rd),
            flow_control: req.flow_control,
            retry_count: req.retry_count,
            rnr_retry_count: req.rnr_retry_count,
            srq: false,
            qp_num: 0,
        }
    }
}

/// One rsocket.
pub struct Socket {
    /// Its number: the event channel's descriptor.
    pub fd: i32,
    inner: Mutex<Inner>,
    cond: Condvar,
}

/// Bytes to send, in one piece or several (`iovec`s).
pub struct Gather<'a> {
    parts: &'a [&'a [u8]],
    i: usize,
    off: usize,
    left: usize,
}

impl<'a> Gather<'a> {
    /// The bytes of `parts`, in order.
    pub fn new(parts: &'a [&'a [u8]]) -> Gather<'a> {
        let mut g = Gather { parts, i: 0, off: 0, left: parts.iter().map(|p| p.len()).sum() };
        g.skip_empty();
        g
    }

    fn skip_empty(&mut self) {
        while self.i < self.parts.len() && self.off == self.parts[self.i].len() {
            self.i += 1;
            self.off = 0;
        }
    }

    /// Bytes left.
    pub fn left(&self) -> usize {
        self.left
    }

    /// Bytes left in the current piece.
    fn run(&self) -> usize {
        self.parts.get(self.i).map_or(0, |p| p.len() - self.off)
    }

    /// The next `n` bytes: borrowed when they are one piece, else copied.
    fn take(&mut self, n: usize) -> std::borrow::Cow<'a, [u8]> {
        let n = n.min(self.left);
        self.left -= n;
        if n <= self.run() {
            let s = &self.parts[self.i][self.off..self.off + n];
            self.off += n;
            self.skip_empty();
            return std::borrow::Cow::Borrowed(s);
        }
        let mut v = Vec::with_capacity(n);
        while v.len() < n {
            let p = &self.parts[self.i][self.off..];
            let k = p.len().min(n - v.len());
            v.extend_from_slice(&p[..k]);
            self.off += k;
            self.skip_empty();
        }
        std::borrow::Cow::Owned(v)
    }
}

/// The errno of a call that could not do all it was asked: its error if it
/// did nothing, else what it did (`(ret && left == len) ? ret : len - left`).
fn partial(done: usize, err: Option<Errno>) -> Result<usize, Errno> {
    match err {
        Some(e) if done == 0 => Err(e),
        _ => Ok(done),
    }
}

impl Socket {
    /// A new, unconnected rsocket of `domain` (its number is `ch`'s fd).
    pub fn new(domain: i32, ch: EventChannel, id: CmId, opts: Options) -> Socket {
        Socket::with_state(domain, ch, id, opts, State::Idle, None)
    }

    fn with_state(domain: i32, ch: EventChannel, id: CmId, opts: Options, state: State, conn: Option<Conn>) -> Socket {
        let fd = ch.fd().as_raw_fd();
        Socket {
            fd,
            inner: Mutex::new(Inner {
                state,
                err: 0,
                domain,
                opts,
                ch,
                id,
                conn,
                listener: None,
                fd_waiter: false,
                dreq: false,
                closed: false,
            }),
            cond: Condvar::new(),
        }
    }

    /// The state, locked.
    pub fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// [`Socket::wait`] until the socket may send: the guard back with
    /// the error when the wait fails or the connection stops being
    /// writable (ECONNRESET), so the caller can report what already went.
    fn wait_to_send<'a>(
        &'a self,
        g: MutexGuard<'a, Inner>,
        nonblock: bool,
    ) -> Result<MutexGuard<'a, Inner>, (MutexGuard<'a, Inner>, Errno)> {
        match self.wait(g, nonblock, |i| i.can_send() || !i.state.writable()) {
            Ok(g) if g.state.writable() => Ok(g),
            Ok(g) => Err((g, Errno(libc::ECONNRESET))),
            Err(e) => Err((self.lock(), e)),
        }
    }

    /// Waits until `test` holds, making progress meanwhile (`rs_get_comp`):
    /// EWOULDBLOCK at once when `nonblock`, else a poll of `polling_time`,
    /// then sleeps on the descriptors (EINTR when a signal ends the sleep;
    /// EBADF when the socket is closed meanwhile).
    fn wait<'a>(
        &'a self,
        mut g: MutexGuard<'a, Inner>,
        nonblock: bool,
        test: impl Fn(&Inner) -> bool,
    ) -> Result<MutexGuard<'a, Inner>, Errno> {
        let d = defaults();
        let started = Instant::now();
        loop {
            if g.closed {
                return Err(Errno::BADF);
            }
            g.progress();
            if test(&g) {
                return Ok(g);
            }
            if nonblock {
                return Err(Errno(libc::EWOULDBLOCK));
            }
            if started.elapsed() < d.polling_time {
                drop(g);
                std::hint::spin_loop();
                g = self.lock();
                continue;
            }
            if g.arm() {
                // Armed just now: a completion may have come before; look again.
                continue;
            }
            if g.fd_waiter {
                g = self.cond.wait_timeout(g, d.wake_up_interval).unwrap_or_else(|e| e.into_inner()).0;
                continue;
            }
            g.fd_waiter = true;
            let (comp, ch) = g.wait_fds();
            drop(g);
            let mut fds = vec![pollfd(ch.fd().as_raw_fd(), libc::POLLIN)];
            if let Some(c) = &comp {
                fds.push(pollfd(c.as_raw_fd(), libc::POLLIN));
            }
            let r = sys_poll(&mut fds, Some(d.wake_up_interval));
            g = self.lock();
            g.fd_waiter = false;
            if let Some(c) = g.conn.as_mut() {
                c.take_cq_event();
            }
            self.cond.notify_all();
            r?;
        }
    }

    /// Whether a call waits (O_NONBLOCK, MSG_DONTWAIT).
    fn nonblock(g: &Inner, flags: i32) -> bool {
        g.opts.nonblocking() || flags & libc::MSG_DONTWAIT != 0
    }

    /// The first steps of `rsend` and `riowrite`: connected, still
    /// writable (else ECONNRESET), and the mappings announced that must go
    /// ahead of the data; with whether the call is nonblocking.
    fn ready_to_send(&self, flags: i32) -> Result<(MutexGuard<'_, Inner>, bool), Errno> {
        let g = self.lock();
        let nonblock = Socket::nonblock(&g, flags);
        let g = self.connected_for_data(g, nonblock)?;
        if !g.state.writable() {
            return Err(Errno(libc::ECONNRESET));
        }
        Ok((self.send_iomaps(g, nonblock)?, nonblock))
    }

    /// A data call's first step: a connect in progress completes (waits
    /// unless nonblocking: EAGAIN), an unconnected socket is refused.
    fn connected_for_data<'a>(
        &'a self,
        g: MutexGuard<'a, Inner>,
        nonblock: bool,
    ) -> Result<MutexGuard<'a, Inner>, Errno> {
        let g = if g.state == State::Connecting {
            self.wait(g, nonblock, |i| i.state != State::Connecting)
                .map_err(|e| if e.0 == libc::EWOULDBLOCK { Errno::AGAIN } else { e })?
        } else {
            g
        };
        if g.state.has_connection() { Ok(g) } else { Err(Errno::NOTCONN) }
    }

    /// `rbind`: the id takes the address (its device; port 0: an ephemeral one).
    pub fn bind(&self, addr: std::net::SocketAddr) -> Result<(), Errno> {
        let mut g = self.lock();
        if g.state != State::Idle {
            return Err(Errno::INVAL);
        }
        g.id.bind_addr(addr).map_err(|e| resolve_errno(&e))?;
        g.input(Input::Bind);
        Ok(())
    }

    /// `rlisten`: listens (an unbound socket first binds the any-address
    /// and an ephemeral port, as listen(2) does) and starts the service
    /// that accepts. Listening again changes nothing.
    pub fn listen(self: &std::sync::Arc<Socket>) -> Result<(), Errno> {
        let mut g = self.lock();
        match g.state {
            State::Listening => return Ok(()),
            State::Idle => {
                let any = if g.domain == libc::AF_INET6 {
                    std::net::IpAddr::V6(std::net::Ipv6Addr::UNSPECIFIED)
                } else {
                    std::net::IpAddr::V4(std::net::Ipv4Addr::UNSPECIFIED)
                };
                g.id.bind_addr(std::net::SocketAddr::new(any, 0)).map_err(|e| resolve_errno(&e))?;
                g.input(Input::Bind);
            }
            State::Bound => {}
            _ => return Err(Errno::INVAL),
        }
        g.id.listen()?;
        g.listener = Some(super::listen::Listener::start(std::sync::Arc::downgrade(self), g.ch.clone())?);
        g.input(Input::Listen);
        Ok(())
    }

    /// `raccept`: the next connection the listener accepted, waiting unless
    /// nonblocking (EAGAIN); EINVAL if the socket does not listen.
    pub fn accept(&self) -> Result<std::sync::Arc<Socket>, Errno> {
        let (queue, nonblock) = {
            let g = self.lock();
            let Some(l) = g.listener.as_ref() else { return Err(Errno::INVAL) };
            (l.queue(), g.opts.nonblocking())
        };
        super::listen::take(&queue, nonblock)
    }

    /// The local and the peer's address (`rgetsockname`, `rgetpeername`).
    pub fn addrs(&self) -> (Option<std::net::SocketAddr>, Option<std::net::SocketAddr>) {
        let g = self.lock();
        let peer = if g.state.has_connection() || g.state == State::Connecting { g.id.peer_addr() } else { None };
        (g.id.local_addr(), peer)
    }

    /// `rconnect` for a stream socket: resolves, makes the QP and buffers,
    /// sends the REQ with this side's connection data; waits for the
    /// outcome unless nonblocking (EINPROGRESS, then `rpoll` for POLLOUT
    /// and `SO_ERROR`).
    pub fn connect(&self, dst: std::net::SocketAddr) -> Result<(), Errno> {
        let mut g = self.lock();
        match g.state {
            State::Idle | State::Bound => {}
            State::Connecting => {
                g.progress();
                return match g.state {
                    State::Connecting => Err(Errno(libc::EALREADY)),
                    State::ConnectFailed => Err(Errno(g.err)),
                    _ => Ok(()),
                };
            }
            State::Connected { .. } => return Ok(()),
            State::Listening => return Err(Errno::INVAL),
            State::ConnectFailed | State::Disconnected | State::Failed => return Err(Errno::NOTCONN),
        }
        let src = g.id.local_addr();
        g.id.resolve_addr(src, dst).map_err(|e| resolve_errno(&e))?;
        expect_event(&g.ch, EventType::AddrResolved)?;
        g.id.resolve_route()?;
        expect_event(&g.ch, EventType::RouteResolved)?;
        let conn = Conn::new(&g.id, g.opts.sizes)?;
        let param = ConnParam {
            private_data: conn.conn_data().to_vec(),
            flow_control: true,
            retry_count: 7,
            rnr_retry_count: 7,
            ..ConnParam::default()
        };
        g.conn = Some(conn);
        g.id.connect(&param)?;
        g.input(Input::ConnectStarted);
        if g.opts.nonblocking() {
            return Err(Errno(libc::EINPROGRESS));
        }
        let g = self.wait(g, false, |i| i.state != State::Connecting)?;
        if g.state == State::ConnectFailed { Err(Errno(g.err)) } else { Ok(()) }
    }

    /// An accepted connection's socket (the listener's thread made it).
    pub(super) fn accepted(
        domain: i32,
        ch: EventChannel,
        id: CmId,
        opts: Options,
        req: &softroce::rdma_cm::Event,
    ) -> Result<(Socket, ConnParam), Errno> {
        let peer = ConnData::parse(&req.conn.private_data).map_err(|e| {
            crate::trace_err("rsocket: a connection request", &e);
            Errno(libc::ENOTSUP)
        })?;
        let mut conn = Conn::new(&id, opts.sizes)?;
        conn.take_peer(&peer).map_err(|e| {
            crate::trace_err("rsocket: a connection request", &e);
            Errno(libc::EPROTO)
        })?;
        let max_rd = id.context().map_or(0, |c| c.query_device().max_qp_rd_atom.min(255) as u8);
        let param = Inner::connect_param(&conn, max_rd, &req.conn);
        let s = Socket::with_state(domain, ch, id, opts, State::Connected { rd: true, wr: true }, Some(conn));
        Ok((s, param))
    }

    /// `rsend` / `rsendv`: as many bytes as can go (all of them unless
    /// nonblocking or the connection ends: then what went, or the error if
    /// nothing did).
    pub fn send(&self, mut data: Gather<'_>, flags: i32) -> Result<usize, Errno> {
        let (mut g, nonblock) = self.ready_to_send(flags)?;
        let total = data.left();
        let mut olen = OLAP_START;
        let mut err = None;
        while data.left() > 0 {
            if !g.can_send() {
                match self.wait_to_send(g, nonblock) {
                    Ok(ng) => g = ng,
                    Err((ng, e)) => {
                        (g, err) = (ng, Some(e));
                        break;
                    }
                }
            }
            let inline = u32::from(g.sizes().inline) as usize;
            let inline_ok = data.run() >= data.left().min(inline);
            let Some(c) = g.conn.as_mut() else { break };
            let Some(w) = c.stream.next_data(data.left(), &mut olen, inline_ok) else { continue };
            let chunk = data.take(w.len as usize);
            if let Err(e) = c.post(&w, &chunk) {
                g.fail(e);
                err = Some(e);
                break;
            }
        }
        let done = total - data.left();
        drop(g);
        partial(done, err)
    }

    /// Writes the peer's iomap entries of new PROT_WRITE mappings
    /// (`rs_send_iomaps`), before the data that follows them.
    fn send_iomaps<'a>(&'a self, mut g: MutexGuard<'a, Inner>, nonblock: bool) -> Result<MutexGuard<'a, Inner>, Errno> {
        loop {
            let Some(c) = g.conn.as_mut() else { return Ok(g) };
            let Some(k) = c.maps.iter().position(|m| !m.sent) else { return Ok(g) };
            if !c.stream.can_send() {
                g = self.wait(g, nonblock, |i| i.can_send() || !i.state.writable())?;
                if !g.state.writable() {
                    return Err(Errno(libc::ECONNRESET));
                }
                continue;
            }
            let order = c.stream.peer_order();
            let m = &mut c.maps[k];
            m.sent = true;
            let Some(index) = m.index else { continue };
            let e = IomapEntry {
                offset: m.offset,
                sge: RsSge { addr: m.mr.addr(), key: m.mr.rkey(), length: m.mr.len() as u32 },
            };
            let Some(w) = c.stream.next_iomap(index) else { continue };
            if let Err(err) = c.post(&w, &e.to_bytes(order)) {
                g.fail(err);
                return Err(err);
            }
        }
    }

    /// `rrecv` (and the vectored and peeking forms): waits for data unless
    /// nonblocking; 0 at the end of the stream.
    pub fn recv(&self, bufs: &mut [&mut [u8]], flags: i32) -> Result<usize, Errno> {
        let g = self.lock();
        let nonblock = Socket::nonblock(&g, flags);
        let mut g = self.connected_for_data(g, nonblock)?;
        let total: usize = bufs.iter().map(|b| b.len()).sum();
        if total == 0 {
            return Ok(0);
        }
        let (peek, waitall) = (flags & libc::MSG_PEEK != 0, flags & libc::MSG_WAITALL != 0);
        let mut got = 0;
        let mut err = None;
        loop {
            if !g.have_rdata() {
                match self.wait(g, nonblock, |i| i.have_rdata() || !i.state.readable()) {
                    Ok(ng) => g = ng,
                    Err(e) => {
                        err = Some(e);
                        g = self.lock();
                        break;
                    }
                }
            }
            let Some(c) = g.conn.as_mut() else { break };
            let n = copy_out(c, bufs, got, peek);
            if peek {
                got = n;
                break;
            }
            got += n;
            if got == total || !waitall || !g.state.readable() {
                break;
            }
        }
        // Credits as soon as the bytes are read (rsockets sends them at its next pass).
        g.update_credits();
        drop(g);
        partial(got, err)
    }

    /// `rshutdown`: closes one direction or both, telling the peer, and
    /// waits (even when nonblocking) until what was sent has completed.
    pub fn shutdown(&self, how: i32) -> Result<(), Errno> {
        if !matches!(how, libc::SHUT_RD | libc::SHUT_WR | libc::SHUT_RDWR) {
            return Err(Errno::INVAL);
        }
        let mut g = self.lock();
        g.progress();
        if !g.state.has_connection() {
            return Err(Errno::NOTCONN);
        }
        if let Some((input, ctrl)) = shutdown_plan(g.state, how) {
            g.input(input);
            if let Some(ctrl) = ctrl {
                if !g.ctrl_avail() {
                    g = self.wait(g, false, |i| i.ctrl_avail() || !i.state.connected())?;
                }
                if g.state.connected()
                    && let Some(c) = g.conn.as_mut()
                    && c.stream.take_ctrl().is_some()
                    && let Err(e) = c.post_msg(Msg::Ctrl(ctrl).encode())
                {
                    g.fail(e);
                }
                if g.state.connected() {
                    g = self.wait(g, false, |i| i.all_sends_done() || !i.state.connected())?;
                }
            }
        }
        if g.state == State::Disconnected {
            g.disconnect_cm();
        }
        Ok(())
    }

    /// `rclose`: a connected socket is shut down both ways first; then its
    /// mappings are unregistered, its queues destroyed and its connection
    /// ended. Threads still waiting on it fail with EBADF.
    pub fn close(&self) {
        if self.lock().state.connected() {
            let _ = self.shutdown(libc::SHUT_RDWR);
        }
        let listener = {
            let mut g = self.lock();
            g.closed = true;
            g.listener.take()
        };
        // The listener's thread locks this socket: stopped without the lock.
        if let Some(l) = listener {
            for s in l.stop() {
                if let Some(s) = super::remove(s.fd) {
                    s.close();
                }
            }
        }
        let mut g = self.lock();
        if let Some(c) = g.conn.take() {
            for m in &c.maps {
                let _ = m.mr.deregister();
            }
            drop(c);
        }
        g.id.clear_qp();
        g.disconnect_cm();
        self.cond.notify_all();
    }

    /// `riomap`: registers `len` bytes with `reg` (the caller's memory, so
    /// the caller's unsafe registration) for local use or, with PROT_WRITE,
    /// for the peer's riowrite at `offset` (-1: the buffer's address),
    /// announced before the next send.
    pub fn iomap(
        &self,
        addr: usize,
        prot_write: bool,
        offset: i64,
        reg: impl FnOnce(&Pd, AccessFlags) -> Result<Mr, softroce::Error>,
    ) -> Result<i64, Errno> {
        let mut g = self.lock();
        let Some(c) = g.conn.as_mut() else { return Err(Errno::INVAL) };
        let index = if prot_write {
            let table = c.stream.remote_iomap().map_or(0, |t| t.length.min(u32::from(u16::MAX)));
            let used = |i: u16| c.maps.iter().any(|m| m.index == Some(i));
            Some((0..table as u16).find(|&i| !used(i)).ok_or(Errno(libc::ENOMEM))?)
        } else {
            None
        };
        let access =
            if prot_write { AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE } else { AccessFlags::LOCAL_WRITE };
        let mr = reg(&c.pd, access)?;
        let offset = if offset == -1 { addr as i64 } else { offset };
        c.maps.push(IoMap { index, offset: offset as u64, mr, sent: index.is_none() });
        Ok(offset)
    }

    /// `riounmap`: the mapping of exactly `addr`, `len` goes (the peer is
    /// not told, as in rsockets); EINVAL if there is none.
    pub fn iounmap(&self, addr: usize, len: usize) -> Result<(), Errno> {
        let mut g = self.lock();
        let Some(c) = g.conn.as_mut() else { return Err(Errno::INVAL) };
        let k = c.maps.iter().position(|m| m.mr.addr() == addr as u64 && m.mr.len() == len).ok_or(Errno::INVAL)?;
        let m = c.maps.remove(k);
        m.mr.deregister()?;
        Ok(())
    }

    /// `riowrite`: `data` into the peer's mapping of `offset` onward, by
    /// RDMA WRITE; stops where no mapping covers the offset.
    pub fn iowrite(&self, data: &[u8], mut offset: u64, flags: i32) -> Result<usize, Errno> {
        let (mut g, nonblock) = self.ready_to_send(flags)?;
        let parts = [data];
        let mut src = Gather::new(&parts);
        let mut olen = OLAP_START;
        let mut err = None;
        let mut map: Option<IomapEntry> = None;
        while src.left() > 0 {
            if !map.is_some_and(|m| m.covers(offset)) {
                map = g.conn.as_ref().and_then(|c| c.iomap_for(offset));
                if map.is_none() {
                    break;
                }
            }
            if !g.can_send() {
                match self.wait_to_send(g, nonblock) {
                    Ok(ng) => g = ng,
                    Err((ng, e)) => {
                        (g, err) = (ng, Some(e));
                        break;
                    }
                }
            }
            let m = map.expect("found above");
            let into = offset - m.offset;
            let target = (m.sge.addr.wrapping_add(into), m.sge.key, u64::from(m.sge.length) - into);
            let Some(c) = g.conn.as_mut() else { break };
            let Some(w) = c.stream.next_direct(src.left(), &mut olen, true, target) else { continue };
            let chunk = src.take(w.len as usize);
            if let Err(e) = c.post(&w, &chunk) {
                g.fail(e);
                err = Some(e);
                break;
            }
            offset += u64::from(w.len);
        }
        let done = data.len() - src.left();
        drop(g);
        partial(done, err)
    }

    /// `rpoll`'s look at the socket (`rs_poll_rs`): progress, then the
    /// events of `events` that hold.
    pub fn poll_events(&self, events: i16) -> i16 {
        let mut g = self.lock();
        let want = |e: i16| events & e;
        if let Some(l) = &g.listener {
            return if l.queue().ready() { want(libc::POLLIN) } else { 0 };
        }
        g.progress();
        match g.state {
            State::Idle | State::Bound | State::Listening | State::Connecting => 0,
            State::ConnectFailed => want(libc::POLLIN | libc::POLLOUT) | libc::POLLERR,
            s => {
                let mut r = 0;
                if g.have_rdata() || !s.readable() {
                    r |= want(libc::POLLIN);
                }
                if g.can_send() {
                    r |= want(libc::POLLOUT);
                }
                match s {
                    // rsockets reports the hang-up at once; like a TCP
                    // socket, this one first lets the reader drain what came
                    // before it (rstream -T a would otherwise fail on it).
                    State::Disconnected if g.have_rdata() => r,
                    State::Disconnected => r | libc::POLLHUP,
                    State::Failed => r | libc::POLLERR,
                    _ => r,
                }
            }
        }
    }
}

/// Copies what waits into `bufs` from byte `from` on (`rrecv`'s copy),
/// consuming it unless `peek`; returns the bytes copied.
fn copy_out(c: &mut Conn, bufs: &mut [&mut [u8]], from: usize, peek: bool) -> usize {
    // Where byte `from` of the caller's buffers is.
    let (mut bi, mut bo) = (0, from);
    while bi < bufs.len() && bo >= bufs[bi].len() {
        bo -= bufs[bi].len();
        bi += 1;
    }
    let room: usize = bufs[bi.min(bufs.len())..].iter().map(|b| b.len()).sum::<usize>() - bo;
    let rmr = &c.rmr;
    c.stream.read(room, peek, |off, len| {
        let (mut off, mut len) = (off as usize, len as usize);
        while len > 0 && bi < bufs.len() {
            let dst = &mut bufs[bi][bo..];
            let n = dst.len().min(len);
            let _ = rmr.read(off, &mut dst[..n]);
            (off, len, bo) = (off + n, len - n, bo + n);
            if bo == bufs[bi].len() {
                (bi, bo) = (bi + 1, 0);
            }
        }
    })
}

/// The errno of a failed `rdma_resolve_addr`: no device for the address is
/// EADDRNOTAVAIL (rdma_cm's), the rest as usual.
fn resolve_errno(e: &softroce::Error) -> Errno {
    match e {
        softroce::Error::NoSuchDevice { .. } => Errno(libc::EADDRNOTAVAIL),
        _ => Errno(e.errno()),
    }
}

/// Consumes the event a resolve step queued (both are local on RoCE: the
/// event is there at once).
fn expect_event(ch: &EventChannel, want: EventType) -> Result<(), Errno> {
    match ch.get_event(Some(Duration::from_secs(2))) {
        Some(e) if e.event == want && e.status == 0 => Ok(()),
        Some(e) => Err(Errno(if e.status < 0 { -e.status } else { libc::EHOSTUNREACH })),
        None => Err(Errno(libc::ETIMEDOUT)),
    }
}

/// A descriptor an rsocket's `rpoll` sleeps on, kept open while it does.
pub(super) enum Holder {
    /// The completion channel of a connection's CQ.
    Comp(softroce::CompChannel),
    /// The id's event channel.
    Cm(softroce::rdma_cm::EventChannel),
    /// A listener's accept queue.
    Accept(std::sync::Arc<super::listen::AcceptQueue>),
}

impl Holder {
    pub(super) fn fd(&self) -> i32 {
        match self {
            Holder::Comp(c) => c.as_raw_fd(),
            Holder::Cm(c) => c.fd().as_raw_fd(),
            Holder::Accept(q) => q.ready_fd(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gather_borrows_one_piece_and_copies_across_pieces() {
        let (a, b, c) = (b"abc".as_slice(), b"".as_slice(), b"defgh".as_slice());
        let parts = [a, b, c];
        let mut g = Gather::new(&parts);
        assert_eq!((g.left(), g.run()), (8, 3));
        assert!(matches!(g.take(2), std::borrow::Cow::Borrowed(b"ab")));
        let t = g.take(3);
        assert!(matches!(t, std::borrow::Cow::Owned(_)), "spans the empty piece and the next");
        assert_eq!(&*t, b"cde");
        assert_eq!((g.left(), g.run()), (3, 3));
        assert_eq!(&*g.take(10), b"fgh", "no more than is left");
        assert_eq!(g.left(), 0);
    }

    #[test]
    fn a_partial_call_reports_what_it_did_and_an_error_only_when_it_did_nothing() {
        assert_eq!(partial(10, Some(Errno::AGAIN)), Ok(10));
        assert_eq!(partial(0, Some(Errno::AGAIN)), Err(Errno::AGAIN));
        assert_eq!(partial(0, None), Ok(0));
    }
}
