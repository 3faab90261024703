//! The I/O driver: the shell around the sans-IO engine (`roce_proto::Device`).
//! It moves packets between the engine and the links, runs the engine's
//! timers, and routes completion and async events to their file
//! descriptors. Every decision about when to make progress is the progress
//! policy's (`driver_policy.rs`, tested on virtual time); how a packet
//! leaves is its link's (`local_link.rs`, `socket_link.rs`).
//!
//! | file | what happens there |
//! |---|---|
//! | `mod.rs` | the state behind the device lock ([`State`]) and what threads share ([`Shared`]) |
//! | `doorbell.rs` | a verbs call: runs on the device, sends what it posted from the caller's thread |
//! | `pass.rs` | a progress pass: receive, due timers, transmit (or defer for the next post) |
//! | `receive.rs` | the socket's and the local link's packets to the engine (capture, faults, a shared device's routing) |
//! | `transmit.rs` | the engine's packets to a link: local, a MAD to this device's GSI owner, or the socket |
//! | `wait.rs` | an application thread's sleep in `Cq::wait` and the pass after it |
//! | `thread.rs` | the driver thread's loop, and what other threads tell it without the lock |
//!
//! By default a driver thread per context makes passes whenever the socket
//! is readable, a timer is due or a verb posted work; with
//! [`Progress::Inline`] there is no thread and the application's own calls
//! (`poll_cq`, `post_send`, ...) make progress. `docs/data-path.md` walks a
//! work request through these files.

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
use roce_udp::{Interest, RecvBatch, Waker, wait, wait_precise};
use roce_wire::{Ecn, ICRC_LEN};

use crate::arrivals::Arrivals;
use crate::atomic_instant::AtomicInstant;
use crate::channel::EventQueue;
use crate::config::DeviceInfo;
use crate::driver_policy::{DriverPolicy, Look, Passed, Rest, SocketLooks};
use crate::faults::{Faults, Received};
use crate::local_link::{Chunk, LocalEnd, LocalLink, Packet, Peer, Sent};
use crate::socket_link::{BATCH, MAX_PACKET, Queued, SocketLink};
use crate::sources::Sources;
use crate::tap::{PORT, Tap};

mod doorbell;
mod pass;
mod receive;
mod thread;
mod transmit;
mod wait;

pub use crate::driver_stats::DriverStats;
pub(crate) use pass::Defer;
use pass::Pre;

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

/// Payload pieces of one packet kept on the stack while it is queued.
const INLINE_PIECES: usize = 8;

/// Device state behind the lock.
pub(crate) struct State {
    pub(crate) dev: Device,
    /// `None` while an application thread sleeps in the socket with it.
    rx: Option<Box<RecvBatch>>,
    /// The socket link's sending side (`socket_link.rs`).
    socket_link: SocketLink,
    /// Headers of the packet being built.
    head: Vec<u8>,
    /// Its payload, still in registered memory.
    pieces: Vec<Piece>,
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
            socket_link: SocketLink::default(),
            head: vec![0; MAX_PACKET],
            pieces: Vec::with_capacity(8),
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
            local_link: LocalLink::new(false, None, Vec::new()),
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
    /// [`Shared::progress_for_app`]; none: nothing owed); changed under the
    /// device lock, read by the driver thread without it.
    pub(crate) tx_owed: AtomicInstant,
    /// When the driver thread wakes next (none: never).
    pub(crate) driver_deadline: AtomicInstant,
    /// The earliest timer another thread's pass left armed since the driver
    /// thread last looked: the driver runs it when due, also while a waiter
    /// keeps it off the socket.
    pub(crate) timer_at: AtomicInstant,
    /// When a busy-polling application thread last called a verb (polled a
    /// CQ, or posted, see [`Shared::note_app_poll`]; none: never, or it
    /// armed a CQ since): such an application drives progress as a waiter
    /// does, and the driver thread stays off the socket meanwhile.
    pub(crate) app_polled: AtomicInstant,
    /// Whether that call returned completions (stored before it).
    pub(crate) app_found: AtomicBool,
    /// Busy-polling application threads inside a verbs call now (a poll's
    /// pass, a post's send: a send of a window's packets takes the kernel
    /// tens of microseconds, longer than the grace; see [`AppCall`]).
    pub(crate) app_in_call: std::sync::atomic::AtomicU32,
    /// The driver thread's current [`AppGrace`](crate::driver_policy::AppGrace), in us (for `driver_stats`).
    pub(crate) app_grace_us: std::sync::atomic::AtomicU64,
    /// Turns the driver thread spun on a passive side (for `driver_stats`).
    pub(crate) driver_spins: std::sync::atomic::AtomicU64,
    /// The driver thread's current passive spin, in us (for `driver_stats`).
    pub(crate) passive_spin_us: std::sync::atomic::AtomicU64,
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

    /// The driver's counters, with the gauges the driver thread keeps
    /// outside the lock.
    pub(crate) fn driver_stats(&self, st: &State) -> DriverStats {
        DriverStats {
            app_grace_us: self.app_grace_us.load(Ordering::Relaxed),
            driver_spins: self.driver_spins.load(Ordering::Relaxed),
            passive_spin_us: self.passive_spin_us.load(Ordering::Relaxed),
            local_wakes: self.local_wakes.load(Ordering::Relaxed),
            ..st.stats
        }
    }
}
