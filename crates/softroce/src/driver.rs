//! The I/O driver: moves packets between the engine (`roce_proto::Device`)
//! and the UDP socket, runs the engine's timers, and routes completion and
//! async events to their file descriptors.
//!
//! Progress is made in [`Shared::progress`], under the device lock: receive
//! everything waiting (one `recvmmsg` per batch, GRO super-datagrams split),
//! hand each packet to the engine, run due timers, then pull every packet the
//! engine has to send into a batch (equal-size runs leave as one GSO send)
//! and flush it. By default a driver thread per context calls it whenever the
//! socket is readable, a timer is due or a verb posted work (it sleeps in
//! `poll(2)` otherwise); with [`Progress::Inline`] there is no thread and the
//! application's own calls (`poll_cq`, `post_send`, ...) make progress.

use std::collections::HashMap;
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::os::fd::AsFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use roce_host::inbox::{Addressing, Asleep, Inbox};
use roce_host::{Control, Route};
use roce_proto::mem::OwnedBuffer;
use roce_proto::{AsyncEvent, Device, Piece};
use roce_udp::{Interest, RecvBatch, SendBatch, Waker, wait, wait_precise};
use roce_wire::Ecn;
use roce_wire::{ICRC_LEN, Ipv4IdFixups};

use crate::channel::EventQueue;
use crate::config::DeviceInfo;
use crate::driver_policy::{DriverPolicy, Look, Passed, Rest, SocketLooks};
use crate::faults::{Faults, Received};
use crate::local_link::{Chunk, LocalEnd, LocalLink, Packet, Peer, Sent};
use crate::sources::Sources;
use crate::tap::{PORT, Tap};

/// The longest sleep in the socket: a waiter whose deadline is further
/// away looks again after this.
const MAX_SOCKET_SLEEP: Duration = Duration::from_millis(50);

/// When a waiter's pass may leave packets unsent for the application's
/// next call (see [`Shared::progress_for_app`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Defer {
    /// Send at once: the driver thread's passes and `Cq::poll`.
    Never,
    /// The pass made completions: the caller returns them.
    IfCompleted,
    /// The pass received packets: the caller looks at its memory.
    IfReceived,
}

/// How a waiter sleeps (see [`Shared::sleep_and_progress`]).
enum Sleep<'a> {
    /// Not at all: completions came meanwhile.
    No,
    /// In `recvmmsg`, with the device's receive batch (counted among the
    /// inbox's sleepers).
    InSocket(Box<RecvBatch>, Option<Asleep<'a>>),
    /// In `poll`, beside a thread that sleeps in the socket.
    BesideSocket,
}

/// What a pass does with the socket.
enum Pre {
    /// Receives what waits there.
    Socket,
    /// Leaves it (`SocketLooks`: a busy poller, the socket quiet).
    SkipSocket,
    /// First hands the engine the batch (`n` datagrams) the caller received
    /// while sleeping in the socket; the batch goes back to the state.
    Slept(Box<RecvBatch>, usize),
}

/// Who makes progress.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Progress {
    /// A driver thread per context (default): completions arrive while the
    /// application computes, and blocking waits work.
    #[default]
    Thread,
    /// No thread: progress happens inside the application's verbs calls
    /// (`poll_cq` when the CQ is empty, `post_send`, `Context::progress`).
    /// Lowest latency when the application polls; nothing moves while it
    /// does not.
    Inline,
}

/// Packets per `recvmmsg` / `sendmmsg` batch.
const BATCH: usize = 64;
/// Payload pieces of one packet kept on the stack while it is queued.
const INLINE_PIECES: usize = 8;
/// Room for one packet: 4096 bytes of payload plus headers and ICRC.
const MAX_PACKET: usize = 4096 + 128;

roce_proto::counter_struct! {
    /// Counters of the driver (besides the engine's own); `iter` is the list
    /// `perf --stats` prints.
    #[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
    pub struct DriverStats {
        /// Packets received and handed to the engine.
        pub rx_packets,
        /// Of those, requests (what a responder answers: a passive side's
        /// driver thread polls on after them, see `Options::driver_spin`).
        pub rx_requests,
        /// Packets sent.
        pub tx_packets,
        /// UDP messages sent (a GSO send counts once).
        pub tx_messages,
        /// Packets the kernel refused for good (e.g. no route); the engine's
        /// retransmission covers them, as for a loss on the wire.
        pub tx_failed,
        /// Times the socket's send buffer was full (packets stayed queued).
        pub tx_would_block,
        /// Packets dropped because the socket stayed full for 100 ms (the
        /// transport's retransmission repairs them, as a loss on the wire).
        pub tx_dropped,
        /// Datagrams received on the context's multicast group sockets.
        pub mcast_rx,
        /// Receive errors on those sockets.
        pub mcast_errors,
        /// Progress passes.
        pub passes,
        /// The passes of those made by the driver thread.
        pub driver_passes,
        /// The passes of those made by a thread waiting in `Cq::wait` (it
        /// slept in the socket, or beside a thread that did, and received
        /// for the whole device).
        pub waiter_passes,
        /// Wake-up datagrams a thread sent to end another's sleep in the socket.
        pub wake_ups,
        /// Passes of a waiting application thread that returned its
        /// completions before sending what the packets it received called for
        /// (ACKs, READ responses); the next call or pass sent it.
        pub tx_deferred,
        /// QPs that send from the device's port because theirs could not
        /// be bound (see `sources.rs`), plus one if the whole device had to.
        pub src_port_fallbacks,
        /// Source sockets open (a gauge, not a counter): per-QP ports, and
        /// the device's other addresses.
        pub src_port_sockets,
        /// Datagrams received on the device's other addresses (GID 0, the
        /// link-local one; other IPv6 addresses of the interface).
        pub other_gid_rx,
        /// Receive errors on those sockets.
        pub other_gid_errors,
        /// Packets from a source GID no socket could send from (a made-up
        /// link-local address of loopback), lost as on a wire.
        pub tx_no_source,
        /// The driver thread's grace to a busy-polling application, in us
        /// (a gauge: see `driver_policy::AppGrace`; 0 without a driver thread).
        pub app_grace_us,
        /// Turns the driver thread polled on after a pass of a passive side
        /// (`Options::driver_spin`).
        pub driver_spins,
        /// Packets sent over the local link to a device of this process, or
        /// to another process's member of this shared device through its
        /// inbox (`local_link.rs`, `roce_host::inbox`; also counted in
        /// `tx_packets`).
        pub tx_local,
        /// Packets received over it (also counted in `rx_packets`).
        pub rx_local,
        /// Packets for a local device sent by the socket instead, because
        /// its inbox was full.
        pub local_full,
        /// Packets for another process's member of this shared device sent
        /// by the socket instead, because its inbox could not be opened
        /// (not made yet, or /dev/shm full; tried again after 100 ms).
        pub local_unopened,
        /// Inbox lanes another process's member filled against the layout:
        /// what they held was dropped (`roce_host::inbox::Drained::refused`).
        pub local_refused,
        /// Wake-up calls this device's senders needed to hand it a local
        /// packet (one of its threads slept where a datagram would wake it).
        pub local_wakes,
        /// Wake envelopes this device sent to another process's member of
        /// the shared device, whose threads slept when a packet was put in
        /// its inbox.
        pub member_wakes,
    }
}

/// Device state behind the lock.
pub(crate) struct State {
    pub(crate) dev: Device,
    /// `None` while an application thread sleeps in the socket with it.
    rx: Option<Box<RecvBatch>>,
    /// Kept empty between passes: a pass lends it registered memory.
    tx: Option<SendBatch<'static>>,
    /// Headers of the packet being built.
    head: Vec<u8>,
    /// Its payload, still in registered memory.
    pieces: Vec<Piece>,
    /// The IPv4 ID fix-ups of the last few packet lengths.
    fixups: Ipv4IdFixups,
    pub(crate) channels: HashMap<roce_proto::CqHandle, Arc<EventQueue<roce_proto::CqHandle>>>,
    pub(crate) faults: Option<Faults>,
    pub(crate) tap: Option<Tap>,
    /// Owned memory of deregistered regions that a responder may still
    /// read or write; freed once [`Device::memory_in_use`] says so.
    pub(crate) graveyard: Vec<OwnedBuffer>,
    pub(crate) stats: DriverStats,
    scratch: Vec<u8>,
    /// The sockets of the QPs' UDP source ports.
    pub(crate) sources: Sources,
    /// What was last published for `softroce rdma resource show`.
    pub(crate) published: crate::census::Published,
    /// What a pass took from this device's end of the local link (kept empty).
    local_rx: Vec<Chunk>,
    /// When the socket was looked at, and found packets.
    socket_looks: SocketLooks,
    /// The local link's sending side (`local_link.rs`).
    pub(crate) local_link: LocalLink,
}

impl State {
    pub(crate) fn new(dev: Device, faults: Option<Faults>, tap: Option<Tap>, sources: Sources) -> State {
        State {
            dev,
            rx: Some(Box::new(RecvBatch::new(BATCH))),
            // Headers and trailers only: payloads are sent from where they are.
            tx: Some(SendBatch::new(BATCH, BATCH * 512)),
            head: vec![0; MAX_PACKET],
            pieces: Vec::with_capacity(8),
            fixups: Ipv4IdFixups::new(),
            channels: HashMap::new(),
            faults,
            tap,
            graveyard: Vec::new(),
            stats: DriverStats::default(),
            scratch: Vec::with_capacity(MAX_PACKET),
            sources,
            published: Default::default(),
            local_rx: Vec::new(),
            socket_looks: SocketLooks::default(),
            local_link: LocalLink::new(false, None),
        }
    }
}

/// What the context, its objects and the driver thread share.
pub(crate) struct Shared {
    pub(crate) info: DeviceInfo,
    pub(crate) sock: crate::port::Port,
    pub(crate) state: Mutex<State>,
    pub(crate) waker: Waker,
    pub(crate) stop: AtomicBool,
    pub(crate) mode: Progress,
    pub(crate) async_routes: crate::async_events::AsyncRoutes,
    /// Wakes application threads blocked in `Cq::wait` when a pass made
    /// completions (only while some are blocked).
    pub(crate) cq_waker: Waker,
    /// Threads blocked in `Cq::wait` or `Context::progress_wait` (see [`Waiting`]).
    pub(crate) waiters: std::sync::atomic::AtomicUsize,
    /// Whether one of them sleeps in `recvmmsg` (woken by a datagram).
    pub(crate) in_socket: AtomicBool,
    /// Waiters sleeping beside it (woken by `cq_waker` or the socket).
    pub(crate) beside: std::sync::atomic::AtomicUsize,
    /// Whether the driver thread sleeps watching the socket (woken by `waker`).
    pub(crate) driver_asleep: AtomicBool,
    /// This device's end of the local link.
    pub(crate) local: LocalEnd,
    /// This member's inbox on a shared device: what other processes'
    /// members hand it over the local link.
    pub(crate) inbox: Option<Inbox>,
    /// `DriverStats::local_wakes`, counted by senders outside the lock.
    pub(crate) local_wakes: std::sync::atomic::AtomicU64,
    /// Since when a waiter's pass left packets unsent (see
    /// [`Shared::progress_for_app`]), in ns since `epoch` plus one (0:
    /// nothing owed); changed under the device lock, read by the driver
    /// thread without it.
    pub(crate) tx_owed: std::sync::atomic::AtomicU64,
    /// When the driver thread wakes next, in ns since `epoch` (`u64::MAX`: never).
    pub(crate) driver_deadline: std::sync::atomic::AtomicU64,
    /// The earliest timer another thread's pass left armed since the driver
    /// thread last looked, in ns since `epoch` (`u64::MAX`: none): the
    /// driver runs it when due, also while a waiter keeps it off the socket.
    pub(crate) timer_at: std::sync::atomic::AtomicU64,
    /// When a busy-polling application thread last called a verb (polled a
    /// CQ, or posted, see [`Shared::note_app_poll`]), in ns since `epoch`
    /// plus one (0: never, or it armed a CQ since): such an application
    /// drives progress as a waiter does, and the driver thread stays off
    /// the socket meanwhile.
    pub(crate) app_polled: std::sync::atomic::AtomicU64,
    /// The driver thread's current [`AppGrace`](crate::driver_policy::AppGrace), in us (for `driver_stats`).
    pub(crate) app_grace_us: std::sync::atomic::AtomicU64,
    /// Turns the driver thread spun on a passive side (for `driver_stats`).
    pub(crate) driver_spins: std::sync::atomic::AtomicU64,
    pub(crate) epoch: Instant,
    /// How long `Cq::wait` polls before it blocks (`SOFTROCE_SPIN_US`).
    pub(crate) spin: Duration,
    /// How long the driver thread of a passive side polls on after a pass
    /// that received packets (`Options::driver_spin`).
    pub(crate) driver_spin: Duration,
    /// The process may run on more than one CPU: a post's packet may leave
    /// ahead of the deferred ones (see [`Shared::transmit`]).
    pub(crate) reply_first: bool,
    /// Why the device failed, once it has (see [`Shared::fail`]).
    pub(crate) fatal: std::sync::OnceLock<String>,
    /// The multicast groups the context's UD QPs receive.
    pub(crate) groups: crate::mcast::Groups,
    /// The threads receiving on the device's other addresses.
    pub(crate) receivers: Mutex<crate::gids::Receivers>,
    /// Tests only: the driver thread panics, holding the device lock.
    #[cfg(test)]
    pub(crate) panic_for_test: AtomicBool,
}

/// A thread blocked in `Cq::wait` or `Context::progress_wait`: counted in
/// `Shared::waiters` while this lives, so the driver thread stays off the
/// socket (and for `driver_policy::WAITER_GRACE` after it saw the last one go).
pub(crate) struct Waiting<'a>(&'a Shared);

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        self.0.waiters.fetch_sub(1, Ordering::AcqRel);
    }
}

impl Shared {
    pub(crate) fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| {
            // A thread panicked mid-update: the engine's state cannot be
            // trusted. The guard still serves teardown (destroying objects,
            // the last flush); verbs that start work now fail (`live`).
            self.fail("a thread panicked while it held the device".into());
            e.into_inner()
        })
    }

    /// Marks the device failed, as a NIC's fatal error would: raises
    /// `DeviceFatal` (once) and wakes every waiter, whose wait then returns
    /// the error instead of sleeping out its timeout (rdma-core's
    /// `IBV_EVENT_DEVICE_FATAL`).
    pub(crate) fn fail(&self, why: String) {
        if self.fatal.set(why).is_err() {
            return;
        }
        self.async_routes.push(AsyncEvent::DeviceFatal);
        let _ = self.cq_waker.wake();
        let _ = self.sock.wake_receiver();
        let _ = self.waker.wake();
    }

    /// `Err` once the device failed (see [`Shared::fail`]).
    pub(crate) fn live(&self) -> Result<(), crate::Error> {
        match self.fatal.get() {
            None => Ok(()),
            Some(why) => Err(crate::Error::DeviceFailed { why: why.clone() }),
        }
    }

    /// Runs `f` on the device, routes the events it raised, and if `kick`
    /// (new work to send) sends it at once from the caller's thread, as a
    /// doorbell would: no hand-over to the driver thread on the fast path.
    /// The driver thread is woken only if its sleep would now miss a timer.
    pub(crate) fn with_dev<R>(&self, kick: bool, f: impl FnOnce(&mut Device) -> R) -> R {
        self.with_state(kick, |st| f(&mut st.dev))
    }

    /// [`Shared::with_dev`] with the whole device state.
    fn with_state<R>(&self, kick: bool, f: impl FnOnce(&mut State) -> R) -> R {
        let mut st = self.lock();
        let r = f(&mut st);
        self.route_events(&mut st);
        if kick {
            self.kick(st);
        }
        r
    }

    /// Sends what the verb just done made ready, from the caller's thread.
    fn kick(&self, mut st: MutexGuard<'_, State>) {
        // Only send: receiving is for whoever waits (or the driver).
        // Sending can complete WRs (UC, UD, local errors): wake waiters.
        let made = st.dev.counters().completions;
        let now = Instant::now();
        let first_alone = self.reply_first && self.tx_owed.load(Ordering::Acquire) != 0;
        let _ = self.transmit(&mut st, now, first_alone);
        self.route_events(&mut st);
        self.wake_waiters_if_made(st.dev.counters().completions, made);
        let next = st.dev.poll_timeout();
        drop(st);
        self.note_app_post(now);
        self.nudge_driver(next);
    }

    /// [`Shared::with_live_dev`] for a receive post. A post that made a
    /// packet (a credit update, docs/engine.md) defers it as a waiter's
    /// pass defers an ACK: the application's next post or poll takes it
    /// along (in a ping-pong, the reply it is about to send, which goes
    /// first), its next sleep sends it (`Cq::wait`, or arming a CQ to sleep
    /// on its channel), or the driver thread when it next looks (not woken
    /// for it: a wake-up per receive posted would cost more than the
    /// update). Without a driver thread it is sent at once.
    pub(crate) fn post_recv_with<E: Into<crate::Error>>(
        &self,
        f: impl FnOnce(&mut Device) -> Result<bool, E>,
    ) -> Result<(), crate::Error> {
        self.live()?;
        let mut st = self.lock();
        let r = f(&mut st.dev);
        self.route_events(&mut st);
        if matches!(r, Ok(true)) {
            if self.mode == Progress::Thread {
                let now = Instant::now();
                if self.tx_owed.load(Ordering::Acquire) == 0 {
                    self.tx_owed.store(self.nanos(now) + 1, Ordering::Release);
                    st.stats.tx_deferred += 1;
                }
            } else {
                self.kick(st);
            }
        }
        r.map(|_| ()).map_err(Into::into)
    }

    /// [`Shared::with_live_dev`] for a verb that makes or moves QP
    /// `f`'s first result: the QP's UDP source port then has its socket
    /// (or the QP sends from the device's port), before it sends anything.
    pub(crate) fn with_live_qp<R, E: Into<crate::Error>>(
        &self,
        kick: bool,
        f: impl FnOnce(&mut Device) -> Result<(roce_proto::Qpn, R), E>,
    ) -> Result<R, crate::Error> {
        self.live()?;
        self.with_state(kick, |st| {
            let (qpn, r) = f(&mut st.dev).map_err(Into::into)?;
            if st.sources.prepare(&mut st.dev, qpn) {
                st.stats.src_port_fallbacks += 1;
            }
            st.stats.src_port_sockets = st.sources.len() as u64;
            Ok(r)
        })
    }

    /// [`Shared::with_dev`] for a verb that starts work: refused once the
    /// device failed (see [`Shared::fail`]).
    pub(crate) fn with_live_dev<R, E: Into<crate::Error>>(
        &self,
        kick: bool,
        f: impl FnOnce(&mut Device) -> Result<R, E>,
    ) -> Result<R, crate::Error> {
        self.live()?;
        self.with_dev(kick, f).map_err(Into::into)
    }

    /// Wakes threads sleeping in [`Shared::sleep_on_socket`] if completions
    /// were made (`now` differs from `before`) and someone sleeps.
    fn wake_waiters_if_made(&self, now: u64, before: u64) {
        self.wake_others_if_made(now, before, false);
    }

    /// The same, not counting the calling thread when it is itself a waiter
    /// (it sees its completions without a wake-up call).
    fn wake_others_if_made(&self, now: u64, before: u64, caller_waits: bool) {
        if now != before && self.waiters.load(Ordering::Acquire) > usize::from(caller_waits) {
            let _ = self.cq_waker.wake();
            if self.in_socket.load(Ordering::Acquire) {
                let _ = self.sock.wake_receiver();
            }
        }
    }

    /// An application thread's sleep and the pass after it (the caller is
    /// counted in `waiters`, so the driver thread stays out of the way):
    /// sleeps until a packet arrives, another thread made completions, or
    /// `until`, then hands what came to the engine and returns the device
    /// locked, e.g. to poll a CQ, with whether packets arrived.
    ///
    /// The sleep is in `recvmmsg` itself (`Socket::recv_wait`: what waits is
    /// taken at once; else the sleep returns the first datagram alone, and
    /// what came behind it, the ACK of the caller's request in a ping-pong,
    /// waits for the pass after the caller's reply); a second sleeping
    /// thread polls beside it.
    /// Timers stay with the driver thread, which runs them when due.
    ///
    /// `seen`: the device's completion count when the caller last looked at
    /// its CQ. If another thread made completions since, there is no sleep;
    /// from the moment the sleep is decided (under the lock) another
    /// thread's completions end it (`wake_others_if_made`): no wake-up is
    /// lost between the look and the sleep.
    pub(crate) fn sleep_and_progress(
        &self,
        until: Instant,
        defer: Defer,
        seen: Option<u64>,
    ) -> io::Result<(MutexGuard<'_, State>, bool)> {
        let sleep = {
            let mut st = self.lock();
            // What an earlier pass deferred leaves before this thread sleeps
            // (its application did not post a reply that took it along).
            if self.tx_owed.load(Ordering::Acquire) != 0 {
                self.flush(&mut st)?;
            }
            if seen.is_some_and(|c| c != st.dev.counters().completions) {
                Sleep::No
            } else if let Some(rx) = st.rx.take() {
                // Flag, then look (`wake_for_local`): a local packet handed
                // over meanwhile is seen here or wakes the sleep.
                self.in_socket.store(true, Ordering::SeqCst);
                let asleep = self.inbox.as_ref().map(Inbox::sleep);
                if self.local_pending() {
                    self.in_socket.store(false, Ordering::SeqCst);
                    st.rx = Some(rx);
                    Sleep::No
                } else {
                    Sleep::InSocket(rx, asleep)
                }
            } else {
                Sleep::BesideSocket
            }
        };
        let pre = match sleep {
            Sleep::No => Pre::Socket,
            // Another thread sleeps in the socket: sleep beside it.
            Sleep::BesideSocket => {
                self.beside.fetch_add(1, Ordering::SeqCst);
                let asleep = self.inbox.as_ref().map(Inbox::sleep);
                let r = if self.local_pending() { Ok(()) } else { self.sleep_on_socket(until) };
                drop(asleep);
                self.beside.fetch_sub(1, Ordering::SeqCst);
                r?;
                Pre::Socket
            }
            Sleep::InSocket(mut rx, asleep) => {
                let left = until.saturating_duration_since(Instant::now()).min(MAX_SOCKET_SLEEP);
                let r = self.sock.recv_wait(&mut rx, left);
                drop(asleep);
                self.in_socket.store(false, Ordering::Release);
                match r {
                    Ok(n) if n > 0 => Pre::Slept(rx, n),
                    r => {
                        self.lock().rx = Some(rx);
                        r?;
                        Pre::Socket
                    }
                }
            }
        };
        let mut st = self.lock();
        let before = st.stats.rx_packets;
        let made = st.dev.counters().completions;
        st.stats.passes += 1;
        st.stats.waiter_passes += 1;
        self.progress_pass_with(&mut st, Instant::now(), defer, pre)?;
        self.wake_others_if_made(st.dev.counters().completions, made, true);
        let got = st.stats.rx_packets != before;
        Ok((st, got))
    }

    /// A sleep beside a thread that sleeps in the socket: until the socket
    /// is readable, the waker fires or `until`.
    fn sleep_on_socket(&self, until: Instant) -> io::Result<()> {
        // `wait` clears the waker when it fired; one that fires later makes
        // the next sleep return at once, which costs a pass, not a wake-up lost.
        wait(
            &[(self.sock.as_fd(), Interest::READABLE)],
            Some(&self.cq_waker),
            Some(until.saturating_duration_since(Instant::now())),
        )
        .map(|_| ())
    }

    /// How long the packets a waiter's pass deferred have waited at `now`
    /// (`None`: nothing is owed).
    fn owed_for(&self, now: Instant) -> Option<Duration> {
        match self.tx_owed.load(Ordering::Acquire) {
            0 => None,
            t => Some(Duration::from_nanos(self.nanos(now).saturating_sub(t - 1))),
        }
    }

    /// Counts the calling thread in `waiters` until the guard drops.
    pub(crate) fn enter_wait(&self) -> Waiting<'_> {
        self.waiters.fetch_add(1, Ordering::AcqRel);
        Waiting(self)
    }

    fn nanos(&self, t: Instant) -> u64 {
        u64::try_from(t.saturating_duration_since(self.epoch).as_nanos()).unwrap_or(u64::MAX - 1)
    }

    /// Records that an application thread just polled a CQ that is not
    /// armed (`ibv_poll_cq` in a busy loop, as perftest and UCX poll; an
    /// empty poll made a progress pass of its own): for a grace after its
    /// last call ([`AppGrace`](crate::driver_policy::AppGrace)) the driver thread leaves the socket to it,
    /// as to a waiter. Otherwise both wake with every packet and the driver
    /// thread takes the core the peer's threads need (on two cores: a busy
    /// poller, its driver thread and the receiver's). Measured: UCX
    /// `put_bw` 64 KiB 1,983-2,233 MB/s against 1,175-1,895 before.
    pub(crate) fn note_app_poll(&self, now: Instant) {
        self.app_polled.store(self.nanos(now) + 1, Ordering::Release);
    }

    /// An application thread armed a CQ to sleep on its channel: the
    /// driver thread, if it stays off the socket for a busy poller, is
    /// woken to receive again.
    pub(crate) fn end_app_poll(&self) {
        if self.app_polled.swap(0, Ordering::AcqRel) != 0 {
            let _ = self.waker.wake();
        }
    }

    /// The driver's counters, with the gauges the driver thread keeps
    /// outside the lock.
    pub(crate) fn driver_stats(&self, st: &State) -> DriverStats {
        DriverStats {
            app_grace_us: self.app_grace_us.load(Ordering::Relaxed),
            driver_spins: self.driver_spins.load(Ordering::Relaxed),
            local_wakes: self.local_wakes.load(Ordering::Relaxed),
            ..st.stats
        }
    }

    /// A verb that posts work: if an application thread busy-polls this
    /// context, it is still at work in verbs (a post may take longer than
    /// the grace the driver thread gives it).
    fn note_app_post(&self, now: Instant) {
        if self.mode == Progress::Thread && self.app_polled.load(Ordering::Acquire) != 0 {
            self.note_app_poll(now);
        }
    }

    /// Tells the driver thread of the timer `next` (the device's earliest,
    /// after another thread's pass) and wakes it if it sleeps past it.
    pub(crate) fn nudge_driver(&self, next: Option<Instant>) {
        if self.mode != Progress::Thread {
            return;
        }
        if let Some(t) = next {
            let at = self.nanos(t);
            self.timer_at.fetch_min(at, Ordering::AcqRel);
            if at < self.driver_deadline.load(Ordering::Acquire) {
                let _ = self.waker.wake();
            }
        }
    }

    /// Completion events to their channels, async events to their queue.
    pub(crate) fn route_events(&self, st: &mut State) {
        while let Some(cq) = st.dev.poll_comp_event() {
            if let Some(ch) = st.channels.get(&cq) {
                ch.push(cq);
            }
        }
        while let Some(e) = st.dev.poll_event() {
            self.async_routes.push(e);
        }
    }

    /// One progress pass; returns when the next timer is due.
    pub(crate) fn progress(&self, st: &mut State) -> io::Result<Option<Instant>> {
        self.progress_as(st, false, false, Instant::now())
    }

    /// [`Shared::progress`] in a turn of the driver thread's spin.
    fn progress_spinning(&self, st: &mut State) -> io::Result<Option<Instant>> {
        self.progress_as(st, false, true, Instant::now())
    }

    /// [`Shared::progress`] for an application thread polling a CQ; one
    /// that is itself a waiter (`caller_waits`) sees the completions it makes
    /// without waking itself through the waker.
    ///
    /// A waiter's pass that made completions returns them before sending
    /// what the received packets call for (the ACK of a SEND, typically):
    /// the application's reply, posted next, takes it along in the same
    /// `sendmmsg` (one GSO send when sizes match), so a ping-pong pays one
    /// send per turn, not two. At most one pass in a row defers, and only
    /// with a driver thread. What is deferred leaves with the next post,
    /// before any thread of the context sleeps again (a receiver that only
    /// reposts receives), or by the driver thread once they waited
    /// `driver_policy::OWED_GRACE` (200 us). IBTA allows coalesced ACKs; the delay stays far
    /// below any local ACK timeout a requester uses in practice.
    ///
    /// The pass looks at the socket as [`SocketLooks`] says: every time
    /// while it carries traffic.
    pub(crate) fn progress_for_app(&self, st: &mut State, caller_waits: bool) -> io::Result<Option<Instant>> {
        self.progress_as(st, caller_waits, true, Instant::now())
    }

    /// [`Shared::progress_for_app`] at `now`, just read by the caller.
    pub(crate) fn progress_for_app_at(
        &self,
        st: &mut State,
        caller_waits: bool,
        now: Instant,
    ) -> io::Result<Option<Instant>> {
        self.progress_as(st, caller_waits, true, now)
    }

    /// A pass; `busy`: one of a busy poll (an application thread's, or the
    /// driver thread's spin), which looks at the socket as [`SocketLooks`] says.
    fn progress_as(&self, st: &mut State, caller_waits: bool, busy: bool, now: Instant) -> io::Result<Option<Instant>> {
        st.stats.passes += 1;
        let made = st.dev.counters().completions;
        let defer = if caller_waits { Defer::IfCompleted } else { Defer::Never };
        let pre = if busy && !st.socket_looks.look(now) { Pre::SkipSocket } else { Pre::Socket };
        let r = self.progress_pass_with(st, now, defer, pre);
        self.wake_others_if_made(st.dev.counters().completions, made, caller_waits);
        r
    }

    /// A pass: what the local link and the socket hold (as `pre` says) to
    /// the engine, due timers, then what the engine has to send.
    fn progress_pass_with(&self, st: &mut State, now: Instant, defer: Defer, pre: Pre) -> io::Result<Option<Instant>> {
        let (made, got) = (st.dev.counters().completions, st.stats.rx_packets);
        self.receive_local(st, now)?;
        self.release_held(st, now);
        match pre {
            // A full batch may have left more on the socket.
            Pre::Slept(rx, n) => {
                st.socket_looks.looked(now, true);
                let r = self.handle_batch(st, &rx, now);
                st.rx = Some(rx);
                r?;
                if n >= BATCH {
                    self.receive(st, now)?;
                }
            }
            Pre::Socket => self.receive(st, now)?,
            Pre::SkipSocket => {}
        }
        if st.dev.poll_timeout().is_some_and(|t| t <= now) {
            st.dev.handle_timeout(now);
        }
        let deferred = self.mode == Progress::Thread
            && self.tx_owed.load(Ordering::Acquire) == 0
            && match defer {
                Defer::Never => false,
                Defer::IfCompleted => st.dev.counters().completions != made,
                Defer::IfReceived => st.stats.rx_packets != got,
            };
        if deferred {
            self.tx_owed.store(self.nanos(now) + 1, Ordering::Release);
            st.stats.tx_deferred += 1;
        } else {
            self.transmit(st, now, false)?;
        }
        self.route_events(st);
        if !st.graveyard.is_empty() {
            let dev = &st.dev;
            st.graveyard.retain(|b| dev.memory_in_use(b.addr() as usize, b.len()));
        }
        let held = st.faults.as_ref().and_then(Faults::next_release);
        let next = [st.dev.poll_timeout(), held].into_iter().flatten().min();
        Ok(next)
    }

    /// Hands what waits on the socket to the engine (nothing while an
    /// application thread sleeps in the socket with the batch).
    fn receive(&self, st: &mut State, now: Instant) -> io::Result<()> {
        let Some(mut rx) = st.rx.take() else { return Ok(()) };
        let before = st.stats.rx_packets;
        let r = loop {
            match self.sock.recv(&mut rx) {
                Ok(0) => break Ok(()),
                Ok(n) => {
                    let r = self.handle_batch(st, &rx, now);
                    if r.is_err() || n < BATCH {
                        break r;
                    }
                }
                Err(e) => break Err(e),
            }
        };
        st.rx = Some(rx);
        let found = st.stats.rx_packets != before;
        st.socket_looks.looked(now, found);
        r
    }

    /// Hands what other devices of this process handed over (the local
    /// link's inbox) to the engine, as `handle_batch` does with datagrams.
    fn receive_local(&self, st: &mut State, now: Instant) -> io::Result<()> {
        let mut r = Ok(());
        let State { dev, faults, tap, stats, scratch, local_rx, .. } = st;
        // One packet over the local link, as `handle_batch` hands a datagram
        // on; the first error (a capture's) is kept, the packets all go on.
        let mut one = |at: Addressing, data: &[u8]| {
            stats.rx_packets += 1;
            stats.rx_local += 1;
            stats.rx_requests += u64::from(is_request(data));
            // Sent ECT(0), as every packet of softroce's sockets.
            let (src, src_port, dst, local) = (at.src, at.src_port, at.dst, !at.icrc);
            let ingested =
                ingest(dev, faults, tap, scratch, now, Arrival { src, src_port, dst, ecn: Ecn::Ect0, data, local });
            if r.is_ok() {
                r = ingested;
            }
        };
        let refused = self.inbox.as_ref().map_or(0, |inbox| inbox.drain(&mut one).refused);
        if self.local.take(local_rx) {
            local_rx.iter().flat_map(Chunk::packets).for_each(|(at, data)| one(at, data));
            self.local.recycle(local_rx.drain(..));
        }
        stats.local_refused += refused;
        r
    }

    /// Whether the local link holds packets for this device: chunks of this
    /// process's devices, or records of other processes' in its inbox.
    fn local_pending(&self) -> bool {
        self.local.pending() || self.inbox.as_ref().is_some_and(Inbox::pending)
    }

    /// A packet of another device of this process was handed to this one
    /// over the local link: wake the threads that sleep where a datagram
    /// would have woken them. Each sets its flag, then looks at the inbox,
    /// before it sleeps; the sender pushes, then reads the flags (both
    /// SeqCst): one of the two sees the other. A busy poller or a spinning
    /// driver thread takes the packet in its next pass, with no call made.
    fn wake_for_local(&self) {
        let mut woke = false;
        if self.driver_asleep.load(Ordering::SeqCst) {
            let _ = self.waker.wake();
            woke = true;
        }
        if self.in_socket.load(Ordering::SeqCst) {
            let _ = self.sock.wake_receiver();
            woke = true;
        }
        if self.beside.load(Ordering::SeqCst) > 0 {
            let _ = self.cq_waker.wake();
            woke = true;
        }
        if woke {
            self.local_wakes.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// A datagram that came another way than the device socket (a
    /// multicast group's socket, `multicast`, or one of the device's other
    /// addresses): to the engine, its completions to their waiters, as a
    /// pass of the driver would.
    pub(crate) fn deliver_datagram(&self, src: IpAddr, src_port: u16, dst: IpAddr, data: &[u8], multicast: bool) {
        let mut st = self.lock();
        let now = Instant::now();
        if multicast {
            st.stats.mcast_rx += 1;
        } else {
            st.stats.other_gid_rx += 1;
        }
        let made = st.dev.counters().completions;
        let State { dev, faults, tap, scratch, .. } = &mut *st;
        // A group's socket does not ask for the ECN field.
        let a = Arrival { src, src_port, dst, ecn: Ecn::NotEct, data, local: false };
        let _ = ingest(dev, faults, tap, scratch, now, a).and_then(|()| tap.as_mut().map_or(Ok(()), Tap::flush));
        let _ = self.transmit(&mut st, now, false);
        self.route_events(&mut st);
        self.wake_waiters_if_made(st.dev.counters().completions, made);
        let next = st.dev.poll_timeout();
        drop(st);
        self.nudge_driver(next);
    }

    /// Held (reordered) packets whose time came.
    fn release_held(&self, st: &mut State, now: Instant) {
        let State { dev, faults, .. } = st;
        if let Some(f) = faults.as_mut() {
            f.release_due(now, |p| dev.handle_datagram_ecn(now, p.src, p.src_port, p.dst, None, p.ecn, p.data));
        }
    }

    /// The packets of one received batch to the engine (through the fault
    /// injector and the capture when configured).
    fn handle_batch(&self, st: &mut State, rx: &RecvBatch, now: Instant) -> io::Result<()> {
        let State { dev, faults, tap, stats, scratch, published, .. } = st;
        let member = self.sock.member();
        for seg in rx.segments() {
            let (mut src, mut src_port, mut dst, mut data) = (seg.src, seg.src_port, seg.dst, seg.data);
            // A packet another member passed on lost its IP header, and its mark.
            let mut ecn = seg.ecn;
            if let Some(m) = member {
                // A shared device: only this process's QPs go to its engine.
                if roce_host::envelope::is_envelope(data) {
                    match m.control(&self.sock, src, data) {
                        Control::Deliver { src: s, src_port: p, dst: d, packet } => {
                            (src, src_port, dst, data, ecn) = (s, p, d, packet, Ecn::NotEct);
                        }
                        Control::Wake => {
                            stats.wake_ups += 1;
                            continue;
                        }
                        Control::Done => continue,
                    }
                } else if let Some(Route::Member { .. } | Route::Unseated | Route::NoListenerYet) = m.route_packet(data)
                {
                    m.pass_on(&self.sock, src, src_port, dst, data, 0);
                    continue;
                }
            } else if self.sock.is_wake_up(SocketAddr::new(src, src_port), data.len()) {
                stats.wake_ups += 1;
                continue;
            }
            stats.rx_packets += 1;
            stats.rx_requests += u64::from(is_request(data));
            ingest(dev, faults, tap, scratch, now, Arrival { src, src_port, dst, ecn, data, local: false })?;
        }
        if let Some(m) = member
            && self.mode != Progress::Thread
        {
            // Strays or misdirected envelopes: the seats changed. With a
            // driver thread, that thread does it, outside the device lock (a
            // probe round may take PROBE_PATIENCE, and posting must not wait).
            m.upkeep(&self.sock);
            if published.due(now) {
                published.publish(now, dev, m);
            }
        }
        Ok(())
    }

    /// Sends what a waiter's pass or a receive post deferred, if anything:
    /// the application is about to sleep where softroce cannot see it (on
    /// a completion channel's fd).
    pub(crate) fn flush_owed(&self) {
        if self.tx_owed.load(Ordering::Acquire) != 0 {
            let mut st = self.lock();
            let _ = self.flush(&mut st);
        }
    }

    /// Sends everything the engine has to send now (also what a waiter's
    /// pass deferred), e.g. before a QP is destroyed.
    pub(crate) fn flush(&self, st: &mut State) -> io::Result<()> {
        self.transmit(st, Instant::now(), false)
    }

    /// Pulls every packet due from the engine and sends it.
    ///
    /// `first_alone`: a post found that a waiter's pass deferred packets
    /// (the ACK of the SEND its application now answers, typically). If the
    /// post's first packet is a whole request (a one-packet message), it is
    /// what the peer waits for: it leaves alone in a `sendmmsg` of its own,
    /// and the rest in a second call while the peer wakes on another CPU.
    /// A lone packet reaches the peer sooner than a GSO send of two, and the
    /// ACK leaves the ping-pong's path (on both sides: the peer takes it
    /// after its reply). Bulk messages of many packets gain nothing from
    /// this, and on one CPU the peer cannot run meanwhile, so the second
    /// call would only delay it: the caller asks only with `reply_first`.
    fn transmit(&self, st: &mut State, now: Instant, first_alone: bool) -> io::Result<()> {
        self.tx_owed.store(0, Ordering::Release);
        if !st.dev.transmit_ready() {
            return st.tap.as_mut().map_or(Ok(()), Tap::flush);
        }
        let local = st.local_link.begin();
        let State { dev, tx: slot, head, pieces, fixups, tap, stats, scratch, sources, local_link, .. } = st;
        let Some(empty) = slot.take() else { return Ok(()) };
        // This pass's batch borrows registered memory until it is flushed.
        let mut tx: SendBatch<'_> = match empty.recycle() {
            Ok(b) => b,
            Err(b) => {
                let mut b = *b;
                b.clear();
                b.recycle().unwrap_or_else(|_| SendBatch::new(BATCH, BATCH * 512))
            }
        };
        // A packet's payload pieces: on the stack, spilling to the heap only
        // past INLINE_PIECES (a packet over many small SGEs).
        let mut inline: [&[u8]; INLINE_PIECES] = [&[]; INLINE_PIECES];
        let mut spill: Vec<&[u8]> = Vec::new();
        let mut result = Ok(());
        let mut alone = first_alone;
        let mut unbound = false;
        let member = self.sock.member();
        dev.poll_transmit_burst(now, head, pieces, |t, head, pieces| {
            let mut n = 0;
            spill.clear();
            for p in pieces {
                let Some(s) = crate::sg::piece_bytes(p) else { continue };
                if n < INLINE_PIECES {
                    inline[n] = s;
                } else {
                    if n == INLINE_PIECES {
                        spill.extend_from_slice(&inline);
                    }
                    spill.push(s);
                }
                n += 1;
            }
            let slices: &[&[u8]] = if n <= INLINE_PIECES { &inline[..n] } else { &spill };
            let gsi = roce_wire::bth::dest_qpn_of(head) == Some(roce_proto::device::GSI_QPN);
            let to = sources.dst(t.dst, PORT);
            // A device of this host (not a MAD: QP 1's are routed by their
            // payload, `roce_host::gsi`): through memory.
            if local && !gsi {
                let p = Packet {
                    src: t.src,
                    src_port: t.src_port,
                    dst: t.dst,
                    to,
                    head,
                    payload: slices,
                    trailer_len: t.pad_len + ICRC_LEN,
                };
                let via = member.map(|m| (m, &*self.sock));
                if let Sent::Local(trailer) =
                    local_link.send(&p, via, now, tap.is_some(), || icrc_trailer(t, slices), stats)
                {
                    if let Some(tp) = tap.as_mut() {
                        let whole = whole_packet(scratch, head, slices, &trailer[..p.trailer_len]);
                        if let Err(e) = tp.write(t.src, t.src_port, t.dst, PORT, None, whole) {
                            result = Err(e);
                            return false;
                        }
                    }
                    return true;
                }
            }
            let trailer = icrc_trailer(t, slices);
            let trailer = &trailer[..t.pad_len + ICRC_LEN];
            if let Some(m) = member
                && t.dst == m.addr().ip()
                && gsi
            {
                // A MAD to QP 1 of this very device: to its owner's seat.
                let whole = whole_packet(scratch, head, slices, trailer);
                m.send_local_mad(&self.sock, t.src, t.src_port, t.dst, whole);
                if let Some(tp) = tap.as_mut()
                    && let Err(e) = tp.write(t.src, t.src_port, t.dst, PORT, None, whole)
                {
                    result = Err(e);
                    return false;
                }
                return true;
            }
            let Some(tag) = sources.tag(t.src, t.src_port) else {
                // A QP the verbs did not prepare (see `Sources::prepare`)
                // and a port that cannot be bound: lost as on a wire, and
                // the device sends from its own port from now on. From
                // another address than the device's: that address cannot
                // be sent from at all.
                if t.src == self.sock.local_addr().ip() {
                    unbound = true;
                    stats.tx_dropped += 1;
                } else {
                    stats.tx_no_source += 1;
                }
                return true;
            };
            tx.set_source(tag);
            if is_middle(head) {
                // A FIRST is longer than its MIDDLEs (RETH, AETH): let the
                // MIDDLEs run together rather than end the FIRST's run.
                tx.end_run_if_longer(t.len);
            }
            if let Ok(q) = tx.push_gather(to, head, slices, trailer) {
                if q.gso_index != 0 && t.dst.is_ipv4() {
                    // The kernel gives the k-th GSO segment IPv4 ID k: fix the
                    // ICRC computed for ID 0, for peers that check the ID.
                    let f = fixups.get(t.len);
                    if let Some(tr) = tx.last_trailer_mut() {
                        let _ = f.apply(tr, q.gso_index);
                    }
                }
                if let Some(tp) = tap.as_mut() {
                    let whole = whole_packet(scratch, head, slices, tx.last_trailer_mut().map_or(trailer, |t| &*t));
                    let id = t.dst.is_ipv4().then_some(q.gso_index);
                    if let Err(e) = tp.write(t.src, t.src_port, t.dst, PORT, id, whole) {
                        result = Err(e);
                        return false;
                    }
                }
            } else {
                // Room is made after each packet; one that still does not
                // fit is lost like one on the wire, and retransmitted.
                stats.tx_dropped += 1;
            }
            // Room for the next packet.
            if (std::mem::take(&mut alone) && is_whole_request(head)) || !tx.has_room(MAX_PACKET) {
                result = self.flush_all(&mut tx, stats, sources);
            }
            result.is_ok()
        });
        if result.is_ok() {
            result = self.flush_all(&mut tx, stats, sources);
        }
        local_link.finish(member.map(|m| (m, &*self.sock)), stats);
        if unbound {
            stats.src_port_fallbacks += 1;
            dev.set_udp_src_port(Some(self.sock.local_port()));
        }
        if !tx.is_empty() {
            stats.tx_dropped += tx.clear() as u64;
        }
        *slot = Some(tx.recycle().unwrap_or_else(|_| SendBatch::new(BATCH, BATCH * 512)));
        if let Some(tp) = tap.as_mut() {
            tp.flush()?;
        }
        result
    }

    /// Sends everything queued; waits (up to 100 ms in all) while the
    /// socket has no room, then drops what is left (counted).
    fn flush_all(&self, tx: &mut SendBatch<'_>, stats: &mut DriverStats, sources: &Sources) -> io::Result<()> {
        // Read the clock only once the socket is full.
        let mut deadline = None;
        loop {
            let f = tx.flush_from(|port| sources.socket(&self.sock, port))?;
            stats.tx_packets += f.packets as u64;
            stats.tx_messages += f.messages as u64;
            stats.tx_failed += f.failed as u64;
            if f.pending == 0 {
                return Ok(());
            }
            stats.tx_would_block += 1;
            let now = Instant::now();
            let left = deadline.get_or_insert(now + Duration::from_millis(100)).saturating_duration_since(now);
            if left.is_zero() {
                stats.tx_dropped += tx.clear() as u64;
                return Ok(());
            }
            let full = tx.pending_source().and_then(|p| sources.socket(&self.sock, p)).unwrap_or(&self.sock);
            wait(&[(full.as_fd(), Interest::WRITABLE)], None, Some(left))?;
        }
    }

    /// The driver thread: progress, then sleep until the socket is readable
    /// (or writable with packets pending), a timer is due, or a verb wakes it.
    pub(crate) fn run(self: Arc<Shared>) {
        // Every decision of this loop is the policy's (`driver_policy.rs`):
        // here the thread reads what other threads set, makes the pass and
        // sleeps as told.
        let mut policy = DriverPolicy::new(self.driver_spin);
        // The last turn ended in a spin: this one is a busy poll.
        let mut spinning = false;
        // When this context's resources are next published.
        let mut publish_at = Instant::now();
        while !self.stop.load(Ordering::Acquire) {
            #[cfg(test)]
            if self.panic_for_test.load(Ordering::Acquire) {
                let _st = self.lock();
                panic!("the driver thread panics, as a test asked");
            }
            // Timers other threads' passes armed (see `nudge_driver`).
            let nudged = self.timer_at.swap(u64::MAX, Ordering::AcqRel);
            let now = Instant::now();
            let call = self.app_polled.load(Ordering::Acquire);
            let look = Look {
                nudged: (nudged != u64::MAX).then(|| self.epoch + Duration::from_nanos(nudged)),
                waiting: self.waiters.load(Ordering::Acquire) > 0,
                last_call: (call != 0).then(|| self.epoch + Duration::from_nanos(call - 1)),
                owed: self.owed_for(now),
            };
            let turn = policy.begin(now, look);
            if turn.pass {
                let mut st = self.lock();
                st.stats.driver_passes += 1;
                let (got, requests) = (st.stats.rx_packets, st.stats.rx_requests);
                let r = if spinning { self.progress_spinning(&mut st) } else { self.progress(&mut st) };
                let next = match r {
                    Ok(n) => n,
                    Err(_) => Some(Instant::now() + Duration::from_millis(1)),
                };
                let passed =
                    Passed { next, received: st.stats.rx_packets != got, requests: st.stats.rx_requests != requests };
                drop(st);
                policy.passed(&turn, Instant::now(), passed);
            }
            if let Some(m) = self.sock.member() {
                // Strays held for a seat, a reconciliation a pass asked for
                // (outside the device lock; at least every BLIND_TICK while
                // an application thread waits).
                m.upkeep(&self.sock);
                // What this context holds, for `softroce rdma resource show`
                // (never waiting for the device lock).
                if now >= publish_at {
                    publish_at = now + crate::census::PUBLISH_EVERY;
                    if let Ok(mut st) = self.state.try_lock() {
                        let st = &mut *st;
                        st.published.publish(now, &st.dev, m);
                    }
                }
            }
            self.app_grace_us.store(policy.grace().micros(), Ordering::Relaxed);
            let now = Instant::now();
            let rest = policy.rest(&turn, now);
            self.driver_deadline.store(self.nanos(rest.until()), Ordering::Release);
            spinning = matches!(rest, Rest::Spin { .. });
            let (until, socket, precise) = match rest {
                Rest::Spin { .. } => {
                    // Each turn lets any other thread runnable on this CPU go first.
                    self.driver_spins.fetch_add(1, Ordering::Relaxed);
                    std::thread::yield_now();
                    continue;
                }
                Rest::Sleep { until, socket, precise } => (until, socket, precise),
            };
            let timeout = until.saturating_duration_since(now);
            let fds: &[(std::os::fd::BorrowedFd<'_>, Interest)] =
                if socket { &[(self.sock.as_fd(), Interest::READABLE)] } else { &[] };
            // Watching the socket, the thread is woken by local packets too
            // (flag, then look: see `wake_for_local`).
            if socket {
                self.driver_asleep.store(true, Ordering::SeqCst);
            }
            let asleep = if socket { self.inbox.as_ref().map(Inbox::sleep) } else { None };
            if !(socket && self.local_pending()) {
                let _ = if precise {
                    wait_precise(fds, Some(&self.waker), timeout)
                } else {
                    wait(fds, Some(&self.waker), Some(timeout))
                };
            }
            drop(asleep);
            self.driver_asleep.store(false, Ordering::SeqCst);
            self.waker.reset();
        }
    }
}

/// The packet of `head`, `slices` and `trailer` in one piece, in `scratch`
/// (for a capture, or a MAD handed to another member).
fn whole_packet<'s>(scratch: &'s mut Vec<u8>, head: &[u8], slices: &[&[u8]], trailer: &[u8]) -> &'s [u8] {
    scratch.clear();
    scratch.extend_from_slice(head);
    slices.iter().for_each(|s| scratch.extend_from_slice(s));
    scratch.extend_from_slice(trailer);
    scratch
}

/// The pad and ICRC that end the packet `t` with payload `slices`
/// (`t.pad_len + ICRC_LEN` bytes of the result).
fn icrc_trailer(t: &mut roce_proto::TransmitGather, slices: &[&[u8]]) -> [u8; 8] {
    const PAD: [u8; 4] = [0; 4];
    let icrc = &mut t.icrc;
    slices.iter().for_each(|s| icrc.update(s));
    icrc.update(&PAD[..t.pad_len]);
    let mut trailer = [0u8; 8];
    trailer[t.pad_len..t.pad_len + ICRC_LEN].copy_from_slice(&icrc.value().to_le_bytes());
    trailer
}

impl Peer for Shared {
    fn end(&self) -> &LocalEnd {
        &self.local
    }

    fn owns(&self, head: &[u8]) -> bool {
        match self.sock.member() {
            None => true,
            Some(m) => m.route_packet(head) == Some(Route::Mine),
        }
    }

    fn wake(&self) {
        self.wake_for_local();
    }
}

/// The opcode of `head` (from the BTH on), if it is a known one.
fn opcode_info(head: &[u8]) -> Option<&'static roce_wire::OpcodeInfo> {
    head.first().and_then(|&op| roce_wire::Opcode(op).info())
}

/// The opcode of `head` (from the BTH on), if it is a request's.
fn request_opcode(head: &[u8]) -> Option<&'static roce_wire::OpcodeInfo> {
    opcode_info(head).filter(|i| i.direction() == roce_wire::Direction::Request)
}

/// Whether `head` (from the BTH on) is a request packet.
fn is_request(head: &[u8]) -> bool {
    request_opcode(head).is_some()
}

/// Whether `head` (from the BTH on) is a MIDDLE packet (SEND, RDMA WRITE
/// or READ response): one of a message's full-MTU packets between its
/// FIRST and its LAST.
///
/// The driver sends them in a GSO run of their own, not joined to the
/// FIRST's. An RDMA WRITE's FIRST is 16 bytes longer than its MIDDLEs
/// (RETH), a READ response's 4 (AETH); joined, a 64 KiB WRITE leaves as
/// [FIRST, MIDDLE] and [13 MIDDLEs, LAST]; apart, as [FIRST] and [14
/// MIDDLEs, LAST]: as many sends, and measured faster (2026-12-04, 2 CPUs,
/// the build before and after in turn, MiB/s: `write-bw --loopback`
/// 4,173-4,889 against 4,608-5,168; UCX `put_bw -O 128` between two
/// processes 3,606-4,082 against 4,293-4,536; `read-bw` and `send-bw`
/// unchanged; the kernel's `__ip_append_data` took half the samples per
/// WRITE). A two-packet message has no MIDDLE and still leaves as one GSO
/// send.
fn is_middle(head: &[u8]) -> bool {
    opcode_info(head).is_some_and(|i| i.position == roce_wire::Position::Middle)
}

/// Whether `head` (from the BTH on) starts a request that is a whole
/// message: a ping-pong's turn.
fn is_whole_request(head: &[u8]) -> bool {
    request_opcode(head).is_some_and(|i| i.starts_message() && i.ends_message())
}

/// One received packet, as it reached the driver.
struct Arrival<'a> {
    src: IpAddr,
    src_port: u16,
    dst: IpAddr,
    ecn: Ecn,
    data: &'a [u8],
    /// Over the local link with no ICRC computed: its engine skips the
    /// check. (A receiver with a fault injector asks its senders for the
    /// ICRC, so such packets never meet the injector.)
    local: bool,
}

/// A received packet to the engine: into the capture, then through the
/// fault injector when one is configured, whatever socket it came by.
fn ingest(
    dev: &mut Device,
    faults: &mut Option<Faults>,
    tap: &mut Option<Tap>,
    scratch: &mut Vec<u8>,
    now: Instant,
    a: Arrival<'_>,
) -> io::Result<()> {
    let Arrival { src, src_port, dst, ecn, data, local } = a;
    if let Some(t) = tap.as_mut() {
        t.write(src, src_port, dst, PORT, None, data)?;
    }
    if local {
        dev.handle_local_datagram(now, src, dst, data);
        return Ok(());
    }
    let Some(f) = faults.as_mut() else {
        dev.handle_datagram_ecn(now, src, src_port, dst, None, ecn, data);
        return Ok(());
    };
    let p = Received { src, src_port, dst, ecn, data };
    f.receive(now, p, scratch, |p| dev.handle_datagram_ecn(now, p.src, p.src_port, p.dst, None, p.ecn, p.data));
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::{is_middle, is_request, is_whole_request};
    use roce_wire::Opcode;

    #[test]
    fn requests_are_told_from_responses_and_acks() {
        for op in [Opcode::RC_SEND_MIDDLE, Opcode::RC_RDMA_READ_REQUEST, Opcode::RC_FETCH_ADD, Opcode::UD_SEND_ONLY] {
            assert!(is_request(&[op.0, 0, 0, 0]), "{op:?}");
        }
        for op in [Opcode::RC_ACKNOWLEDGE, Opcode::RC_RDMA_READ_RESPONSE_ONLY, Opcode::RC_ATOMIC_ACKNOWLEDGE] {
            assert!(!is_request(&[op.0, 0, 0, 0]), "{op:?}");
        }
        assert!(!is_request(&[]), "no header");
    }

    #[test]
    fn middles_are_told_from_the_packets_that_start_or_end_a_message() {
        let middle = |op: Opcode| is_middle(&[op.0, 0, 0, 0]);
        for op in [Opcode::RC_SEND_MIDDLE, Opcode::RC_RDMA_WRITE_MIDDLE, Opcode::RC_RDMA_READ_RESPONSE_MIDDLE] {
            assert!(middle(op), "{op:?}");
        }
        for op in [
            Opcode::RC_RDMA_WRITE_FIRST,
            Opcode::RC_RDMA_WRITE_LAST,
            Opcode::RC_RDMA_READ_RESPONSE_FIRST,
            Opcode::RC_SEND_ONLY,
            Opcode::RC_ACKNOWLEDGE,
        ] {
            assert!(!middle(op), "{op:?}");
        }
        assert!(!is_middle(&[]), "no header");
    }

    #[test]
    fn only_a_one_packet_request_is_a_whole_request() {
        let whole = |op: Opcode| is_whole_request(&[op.0, 0, 0, 0]);
        for op in [Opcode::RC_SEND_ONLY, Opcode::RC_RDMA_WRITE_ONLY_WITH_IMMEDIATE, Opcode::RC_RDMA_READ_REQUEST] {
            assert!(whole(op), "{op:?}");
        }
        for op in [Opcode::RC_FETCH_ADD, Opcode::UD_SEND_ONLY] {
            assert!(whole(op), "{op:?}");
        }
        for op in [
            Opcode::RC_SEND_FIRST,
            Opcode::RC_RDMA_WRITE_LAST,
            Opcode::RC_ACKNOWLEDGE,
            Opcode::RC_RDMA_READ_RESPONSE_ONLY,
        ] {
            assert!(!whole(op), "{op:?}");
        }
        assert!(!whole(Opcode(0xfe)), "an unknown opcode");
        assert!(!is_whole_request(&[]), "no header");
    }
}
