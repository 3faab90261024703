//! Opening a device: the socket, the engine and the driver.

use std::hash::BuildHasher;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use roce_proto::counters::Counters;
use roce_proto::devattr::{DeviceAttr, PortAttr};
use roce_proto::{AsyncEvent, Device, DeviceConfig, Limits};
use roce_udp::Waker;
use roce_wire::IcrcPolicy;

use crate::atomic_instant::AtomicInstant;
use crate::config::{self, DeviceInfo};
use crate::driver::{DriverStats, Progress, Shared, State};
use crate::env;
use crate::error::Error;
use crate::faults::{FaultSpec, FaultStats, Faults};
use crate::local_link::{Link, LocalEnd};
use crate::port::Port;
use crate::sources::{Sources, SrcPorts};
use crate::tap::Tap;

/// How to open a device. [`Options::from_env`] reads the documented
/// environment variables; [`Options::default`] reads none.
#[derive(Debug, Clone, Default)]
pub struct Options {
    /// Who makes progress (`SOFTROCE_PROGRESS=thread|inline`).
    pub progress: Progress,
    /// Write every packet to this pcap file (`SOFTROCE_PCAP`).
    pub pcap: Option<PathBuf>,
    /// Inject faults on received packets (`SOFTROCE_FAULTS`).
    pub faults: Option<FaultSpec>,
    /// UDP port instead of 4791 (peers must send there); `Some(0)` binds a
    /// free port of its own, a device no other context shares.
    pub port: Option<u16>,
    /// Seed of the R_Key generator (`None`: random).
    pub seed: Option<u64>,
    /// How long `Cq::wait` keeps polling before it sleeps
    /// (`SOFTROCE_SPIN_US`, default 0: sleep at once, best on few cores).
    pub spin: Duration,
    /// Whether each QP sends from its own UDP source port, as rxe
    /// (`SOFTROCE_SRC_PORT=qp`, the default), or every packet from 4791
    /// (`device`). A device on a port other than 4791 sends from that port.
    pub src_ports: SrcPorts,
    /// How long the driver thread of a passive side keeps polling after a
    /// pass that received packets (`SOFTROCE_DRIVER_SPIN_US`;
    /// [`Options::from_env`] defaults to [`DEFAULT_DRIVER_SPIN`], the
    /// `Default` to 0). See `docs/data-path.md` section 6.
    pub driver_spin: Duration,
    /// Which link carries packets to other devices of this process and to
    /// other processes' members of a shared device: memory (default) or the
    /// UDP socket (`SOFTROCE_LINK=udp`; see `local_link`).
    pub link: Link,
}

/// A duration in microseconds from `var` (at most a second), if set.
fn env_micros(var: &'static str) -> Result<Option<Duration>, Error> {
    let Some(v) = env::string(var) else { return Ok(None) };
    let us: u64 = v.parse().map_err(|_| Error::Env { var, msg: format!("{v:?} is not a number of microseconds") })?;
    Ok(Some(Duration::from_micros(us.min(1_000_000))))
}

/// The driver thread's spin on a passive side when the environment does
/// not say (as Linux's `net.core.busy_poll` advice, 50 us): a READ or
/// atomic target answers in about 5.5 us instead of 30 on this VM, where
/// waking a sleeping thread on an idle CPU costs 20-25 us.
pub const DEFAULT_DRIVER_SPIN: Duration = Duration::from_micros(50);

impl Options {
    /// Options from `SOFTROCE_PROGRESS`, `SOFTROCE_SPIN_US`,
    /// `SOFTROCE_DRIVER_SPIN_US`, `SOFTROCE_SRC_PORT`, `SOFTROCE_PCAP`,
    /// `SOFTROCE_FAULTS` and `SOFTROCE_LINK` (see [`crate::env`]).
    pub fn from_env() -> Result<Options, Error> {
        let mut o = Options::default();
        if let Some(p) = env::string(env::PROGRESS) {
            o.progress = match p.as_str() {
                "thread" | "" => Progress::Thread,
                "inline" => Progress::Inline,
                other => {
                    return Err(Error::Env { var: env::PROGRESS, msg: format!("{other:?} is not thread or inline") });
                }
            };
        }
        o.spin = env_micros(env::SPIN_US)?.unwrap_or(o.spin);
        o.driver_spin = env_micros(env::DRIVER_SPIN_US)?.unwrap_or(DEFAULT_DRIVER_SPIN);
        if let Some(v) = env::string(env::SRC_PORT) {
            o.src_ports = match v.as_str() {
                "qp" | "" => SrcPorts::PerQp,
                "device" => SrcPorts::Device,
                other => {
                    return Err(Error::Env { var: env::SRC_PORT, msg: format!("{other:?} is not qp or device") });
                }
            };
        }
        o.pcap = env::path(env::PCAP);
        if let Some(f) = env::string(env::FAULTS) {
            o.faults = Some(f.parse()?);
        }
        if let Some(v) = env::string(env::LINK) {
            o.link = match v.as_str() {
                "local" | "" => Link::Local,
                "udp" => Link::Udp,
                other => return Err(Error::Env { var: env::LINK, msg: format!("{other:?} is not local or udp") }),
            };
        }
        Ok(o)
    }
}

/// The driver thread's owner: stops and joins it when the last handle goes.
pub(crate) struct Owner {
    pub(crate) shared: Arc<Shared>,
    thread: Mutex<Option<JoinHandle<()>>>,
    /// The process that opened the device: in a `fork()` child the driver
    /// thread, the socket and the pcap file are the parent's (see `fork`).
    pid: u32,
    /// Whether its `SOFTROCE_STATS` line was written (at exit or close).
    reported: AtomicBool,
}

/// Whether `SOFTROCE_STATS` asks for counters.
fn stats_wanted() -> bool {
    env::on(env::STATS)
}

/// The contexts still open, for what [`report_live`] does at `exit()`:
/// MPI ranks, rdma_cm programs and libfabric's verbs provider exit with
/// their devices open (rdma_cm's stay open for the process's life).
static LIVE: Mutex<Vec<std::sync::Weak<Owner>>> = Mutex::new(Vec::new());

fn at_exit(owner: &Arc<Owner>) {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        // SAFETY: an `extern "C"` function that never unwinds; libc runs it
        // in the thread calling exit(), with the process still whole.
        #[allow(unsafe_code)]
        unsafe {
            libc::atexit(report_live);
        }
    });
    let mut live = LIVE.lock().unwrap_or_else(|e| e.into_inner());
    live.retain(|w| w.strong_count() > 0);
    live.push(Arc::downgrade(owner));
}

/// The device's lock at `exit()`, unless a thread holds it for more than
/// 100 ms (a thread that exits holding it is passed over, not waited for).
fn lock_at_exit(shared: &Shared) -> Option<std::sync::MutexGuard<'_, State>> {
    let deadline = std::time::Instant::now() + Duration::from_millis(100);
    loop {
        match shared.state.try_lock() {
            Ok(st) => return Some(st),
            Err(std::sync::TryLockError::Poisoned(p)) => return Some(p.into_inner()),
            Err(std::sync::TryLockError::WouldBlock) if std::time::Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(1))
            }
            Err(std::sync::TryLockError::WouldBlock) => return None,
        }
    }
}

/// At `exit()`, for every context of this process still open: its
/// `SOFTROCE_STATS` line (a thread holding a device's lock for long is
/// passed over), and what its other addresses' sockets hold for other
/// members, handed on.
extern "C" fn report_live() {
    let _ = std::panic::catch_unwind(|| {
        let live: Vec<Arc<Owner>> = match LIVE.try_lock() {
            Ok(l) => l.iter().filter_map(std::sync::Weak::upgrade).collect(),
            Err(_) => return,
        };
        for o in live.iter().filter(|o| o.pid == std::process::id()) {
            if stats_wanted()
                && let Some(st) = lock_at_exit(&o.shared)
            {
                o.report(&st, "at exit");
            }
            // Other members' datagrams its other addresses' sockets drew
            // go on (a pass-on is a send: no lock of the device).
            if let Ok(mut r) = o.shared.receivers.try_lock() {
                std::mem::take(&mut *r).hand_on_and_close(|rx| o.shared.pass_on_others(rx));
            }
        }
    });
}

impl Drop for Owner {
    fn drop(&mut self) {
        if std::process::id() != self.pid {
            // Joining a thread the child does not have panics or hangs, and
            // waking or flushing would act on the parent's fds.
            if let Some(t) = self.thread.lock().unwrap_or_else(|e| e.into_inner()).take() {
                std::mem::forget(t);
            }
            return;
        }
        self.shared.stop.store(true, Ordering::Release);
        let _ = self.shared.waker.wake();
        if let Some(t) = self.thread.lock().unwrap_or_else(|e| e.into_inner()).take() {
            let _ = t.join();
        }
        let mut st = self.shared.lock();
        // Deferred packets (a last ACK) leave before the socket closes.
        let _ = self.shared.flush(&mut st);
        drop(st);
        // What the other addresses' sockets drew goes on before they close.
        let mut receivers = std::mem::take(&mut *self.shared.receivers.lock().unwrap_or_else(|e| e.into_inner()));
        receivers.hand_on_and_close(|rx| crate::arrivals::Arrivals::arrived_batch(&*self.shared, rx));
        let mut st = self.shared.lock();
        if let Some(t) = st.tap.as_mut() {
            let _ = t.flush();
        }
        if let Some(m) = self.shared.sock.member() {
            // The last word of its counters before the member leaves.
            let st = &mut *st;
            st.published.publish(std::time::Instant::now(), &st.dev, m);
        }
        if stats_wanted() {
            self.report(&st, "closed");
        }
    }
}

impl Owner {
    /// Writes its `SOFTROCE_STATS` line, `when` it is written, unless it
    /// was written already.
    fn report(&self, st: &State, when: &str) {
        if !self.reported.swap(true, Ordering::AcqRel) {
            let driver = self.shared.driver_stats(st);
            eprint!("{}", stats_report(&self.shared.info.name, self.pid, when, st.dev.counters(), &driver));
        }
    }
}

/// `SOFTROCE_STATS=1`: what a context counted, written to stderr when it
/// closes or, still open, when the process exits (`when`; unmodified
/// programs have no `perf --stats`; kernel rxe shows its counters under
/// `hw_counters`). Counters still at zero are left out.
fn stats_report(device: &str, pid: u32, when: &str, engine: &Counters, driver: &DriverStats) -> String {
    let mut out = format!("softroce: {device} (pid {pid}) {when}:");
    for (name, v) in engine.iter().chain(driver.iter()).filter(|&(_, v)| v != 0) {
        out.push_str(&format!(" {name}={v}"));
    }
    out.push('\n');
    out
}

/// An open softroce device (`ibv_context`). Cheap to clone; every object
/// made from it keeps it open.
#[derive(Clone)]
pub struct Context {
    pub(crate) owner: Arc<Owner>,
}

impl std::fmt::Debug for Context {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Context").field("device", &self.owner.shared.info.name).finish()
    }
}

/// The devices this process can open (see [`crate::config`]).
pub fn devices() -> Result<Vec<DeviceInfo>, Error> {
    Ok(config::devices()?)
}

/// A reference to a [`Context`] that does not keep it open.
#[derive(Clone, Debug, Default)]
pub struct WeakContext(std::sync::Weak<Owner>);

impl WeakContext {
    /// The context, if something still keeps it open.
    pub fn upgrade(&self) -> Option<Context> {
        self.0.upgrade().map(|owner| Context { owner })
    }
}

impl std::fmt::Debug for Owner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Owner").field("device", &self.shared.info.name).finish()
    }
}

impl Context {
    /// A reference that does not keep the device open (it stays open while
    /// this context or any object made from it lives).
    pub fn downgrade(&self) -> WeakContext {
        WeakContext(Arc::downgrade(&self.owner))
    }

    /// Opens the device called `name` with options from the environment.
    pub fn open(name: &str) -> Result<Context, Error> {
        let all = devices()?;
        let info = all.iter().find(|d| d.name == name).ok_or_else(|| Error::NoSuchDevice {
            name: name.to_string(),
            known: all.iter().map(|d| d.name.clone()).collect(),
        })?;
        Context::open_with(info, Options::from_env()?)
    }

    /// Opens `info` with `opts`.
    pub fn open_with(info: &DeviceInfo, opts: Options) -> Result<Context, Error> {
        let sock = Port::open(info.addr, opts.port)?;
        let seed = opts.seed.unwrap_or_else(|| std::collections::hash_map::RandomState::new().hash_one(info.addr));
        let dev = Device::new(DeviceConfig {
            gids: info.gids.clone(),
            seed,
            // A socket cannot see the IPv4 ID: solve it from the ICRC (docs/icrc.md).
            icrc_policy: IcrcPolicy::Ipv6OrKnownId,
            active_mtu: info.active_mtu(),
            limits: Limits { max_wide_mtu: info.wide_mtu(), ..Limits::default() },
            udp_src_port: (opts.src_ports == SrcPorts::Device || sock.local_port() != roce_udp::ROCE_PORT)
                .then(|| sock.local_port()),
        });
        let scope = crate::gids::scope_of(info);
        let sources = Sources::new(sock.local_addr(), scope);
        // The device's other addresses, on a shared device (a device on a
        // port of its own is a test's or runs beside another RoCE stack).
        let others = match sock.member() {
            Some(_) => crate::gids::other_addrs(info, &config::devices().unwrap_or_default(), scope),
            None => Vec::new(),
        };
        // A receiver that records or impairs packets checks their ICRC.
        let wants_icrc = opts.pcap.is_some() || opts.faults.is_some();
        let tap = match &opts.pcap {
            Some(p) => Some(Tap::create(p).map_err(|e| Error::Pcap { path: p.clone(), source: e })?),
            None => None,
        };
        // On a shared device, other processes' members hand this one packets
        // through its inbox (`roce_host::inbox`), and it hands them theirs.
        // Without one (a full /dev/shm), they use the socket.
        let (inbox, outboxes) = match sock.member() {
            Some(m) if opts.link == Link::Local => {
                match roce_host::inbox::Inbox::create(m.path(), m.slot(), m.incarnation(), wants_icrc) {
                    Ok(i) => (Some(i), Some(roce_host::inbox::Outboxes::new(m.path(), m.slot()))),
                    Err(_) => (None, None),
                }
            }
            _ => (None, None),
        };
        let mut state = State::new(dev, opts.faults.map(Faults::new), tap, sources);
        let other_ips = others.iter().map(std::net::SocketAddr::ip).collect();
        state.local_link = crate::local_link::LocalLink::new(opts.link == Link::Local, outboxes, other_ips);
        let epoch = std::time::Instant::now();
        let shared = Arc::new(Shared {
            info: info.clone(),
            sock,
            state: Mutex::new(state),
            waker: Waker::new()?,
            stop: AtomicBool::new(false),
            mode: opts.progress,
            async_routes: crate::async_events::AsyncRoutes::new()?,
            cq_waker: Waker::new()?,
            waiters: std::sync::atomic::AtomicUsize::new(0),
            in_socket: std::sync::atomic::AtomicBool::new(false),
            beside: std::sync::atomic::AtomicUsize::new(0),
            driver_asleep: AtomicBool::new(false),
            local: LocalEnd::new(wants_icrc),
            inbox,
            local_wakes: std::sync::atomic::AtomicU64::new(0),
            tx_owed: AtomicInstant::none(epoch),
            driver_deadline: AtomicInstant::none(epoch),
            timer_at: AtomicInstant::none(epoch),
            app_polled: AtomicInstant::none(epoch),
            app_found: AtomicBool::new(false),
            app_in_call: std::sync::atomic::AtomicU32::new(0),
            app_grace_us: std::sync::atomic::AtomicU64::new(if opts.progress == Progress::Thread {
                crate::driver_policy::AppGrace::new().micros()
            } else {
                0
            }),
            driver_spins: std::sync::atomic::AtomicU64::new(0),
            passive_spin_us: std::sync::atomic::AtomicU64::new(if opts.progress == Progress::Thread {
                crate::driver_policy::PassiveSpin::new(opts.driver_spin).micros()
            } else {
                0
            }),
            spin: opts.spin,
            driver_spin: opts.driver_spin,
            reply_first: std::thread::available_parallelism().is_ok_and(|n| n.get() > 1),
            fatal: std::sync::OnceLock::new(),
            groups: Default::default(),
            receivers: Default::default(),
            #[cfg(test)]
            panic_for_test: AtomicBool::new(false),
        });
        crate::fork::register(&shared);
        if opts.link == Link::Local {
            let peer: std::sync::Weak<dyn crate::local_link::Peer> = Arc::downgrade(&shared) as _;
            crate::local_link::register(shared.sock.local_addr(), peer);
        }
        for at in others {
            let to: std::sync::Weak<dyn crate::arrivals::Arrivals> = Arc::downgrade(&shared) as _;
            let started = shared.receivers.lock().unwrap_or_else(|e| e.into_inner()).start(to, at);
            let mut st = shared.lock();
            match started {
                Ok(sock) => st.sources.add_listener(at.ip(), sock),
                // Another user's processes hold it: that GID stays unreachable.
                Err(_) => st.stats.other_gid_errors += 1,
            }
        }
        let thread = match opts.progress {
            Progress::Thread => {
                let s = shared.clone();
                let name = format!("softroce {}", info.name);
                Some(crate::thread::spawn(name, move || {
                    // Best effort: without it, short sleeps end up to 50 us late.
                    let _ = crate::sched::set_own_timer_slack(crate::sched::DRIVER_TIMER_SLACK_NS);
                    // Dead, this thread would leave every timer unrun and
                    // waiters to their timeouts: the device fails loudly.
                    if let Err(p) = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| Arc::clone(&s).run())) {
                        s.fail(format!("its driver thread panicked: {}", panic_message(p.as_ref())));
                    }
                })?)
            }
            Progress::Inline => None,
        };
        let reported = AtomicBool::new(false);
        let owner = Arc::new(Owner { shared, thread: Mutex::new(thread), pid: std::process::id(), reported });
        // Programs that exit with the context open (rdma_cm's, libfabric's
        // verbs provider) still hand their other addresses' datagrams on.
        at_exit(&owner);
        Ok(Context { owner })
    }

    pub(crate) fn shared(&self) -> &Shared {
        &self.owner.shared
    }

    /// Counts rdma_cm ids that came to (`delta` > 0) or left this device,
    /// for its next census (`census.rs`).
    pub(crate) fn count_cm_ids(&self, delta: i64) {
        self.shared().lock().published.count_cm_ids(delta);
    }

    /// The device this context opened.
    pub fn device(&self) -> &DeviceInfo {
        &self.shared().info
    }

    /// The largest [`WideMtu`](roce_proto::WideMtu) this device gives a QP:
    /// what its link carried when it was opened (`None`: IBTA's MTUs only).
    pub fn wide_mtu(&self) -> Option<roce_proto::WideMtu> {
        self.shared().with_dev(false, |d| d.config().limits.max_wide_mtu)
    }

    /// `ibv_query_device`.
    pub fn query_device(&self) -> DeviceAttr {
        self.shared().with_dev(false, |d| d.query_device())
    }

    /// `ibv_query_port` (port 1).
    pub fn query_port(&self) -> PortAttr {
        self.shared().with_dev(false, |d| d.query_port())
    }

    /// `ibv_query_gid` (port 1): the GID at `index`.
    pub fn query_gid(&self, index: usize) -> Option<[u8; 16]> {
        self.shared().with_dev(false, |d| d.query_gid(index))
    }

    /// The engine's counters (rxe's names).
    pub fn counters(&self) -> Counters {
        self.shared().with_dev(false, |d| *d.counters())
    }

    /// What this context counted of the device's sharing with other
    /// processes (`roce_host::HostStats`; empty for a device of its own).
    pub fn host_stats(&self) -> Vec<(&'static str, u64)> {
        self.shared().sock.member().map(|m| m.stats().iter().collect()).unwrap_or_default()
    }

    /// The driver's counters.
    pub fn driver_stats(&self) -> DriverStats {
        let s = self.shared();
        s.driver_stats(&s.lock())
    }

    /// What `SOFTROCE_FAULTS` injected so far (`None` without faults).
    pub fn fault_stats(&self) -> Option<FaultStats> {
        self.shared().lock().faults.as_ref().map(|f| f.stats)
    }

    /// Makes progress now (needed only with [`Progress::Inline`]; with a
    /// driver thread, a loop of these is a busy poller, which the driver
    /// thread leaves the socket to, as to `Cq::poll`).
    pub fn progress(&self) -> Result<(), Error> {
        let s = self.shared();
        s.live()?;
        let mut st = s.lock();
        let next = s.progress_for_app(&mut st, false)?;
        drop(st);
        if s.mode == Progress::Thread {
            s.note_app_poll(std::time::Instant::now(), false);
        }
        s.nudge_driver(next);
        Ok(())
    }

    /// For applications that watch memory rather than a CQ (the target of
    /// a peer's RDMA WRITE): sleeps until a packet arrives (not at all if
    /// some wait), another thread made completions, or `timeout` passes,
    /// and processes what came in this thread. Returns whether packets were
    /// processed.
    pub fn progress_wait(&self, timeout: Duration) -> Result<bool, Error> {
        let s = self.shared();
        s.live()?;
        let _waiting = s.enter_wait();
        // The caller reads its memory next: what the packets call for (an
        // ACK) may wait for its next verb, as after a completion.
        let (st, got) =
            s.sleep_and_progress(std::time::Instant::now() + timeout, crate::driver::Defer::IfReceived, None)?;
        drop(st);
        s.live()?;
        Ok(got)
    }

    /// The next async event (`ibv_get_async_event`), waiting up to
    /// `timeout` (`None`: forever). Events need no acknowledgement here.
    pub fn get_async_event(&self, timeout: Option<Duration>) -> Result<Option<AsyncEvent>, Error> {
        Ok(self.shared().async_routes.default_queue().pop_wait(timeout)?)
    }

    /// An async event queue of its own, for the events of the objects it
    /// claims (what each `ibv_open_device` gets; see [`AsyncEvents`]).
    ///
    /// [`AsyncEvents`]: crate::AsyncEvents
    pub fn async_events(&self) -> Result<crate::AsyncEvents, Error> {
        crate::AsyncEvents::new(self)
    }

    /// The async event queue's file descriptor: readable while an event
    /// waits (for poll/epoll/`AsyncFd`).
    pub fn async_fd(&self) -> std::os::fd::BorrowedFd<'_> {
        use std::os::fd::AsFd;
        self.shared().async_routes.default_queue().as_fd()
    }
}

/// The message of a caught panic (a `&str` or `String` payload).
fn panic_message(p: &(dyn std::any::Any + Send)) -> &str {
    p.downcast_ref::<&str>()
        .copied()
        .or_else(|| p.downcast_ref::<String>().map(String::as_str))
        .unwrap_or("(no message)")
}

#[cfg(test)]
mod tests {
    use std::net::{IpAddr, Ipv4Addr};
    use std::sync::atomic::Ordering;
    use std::time::{Duration, Instant};

    use crate::config::DeviceInfo;
    use crate::{AccessFlags, Context, Error, Options, Payload, QpInit, RecvWr, SendFlags, SendWr, Wc, WcOpcode};
    use crate::{WcStatus, WrOpcode};
    use roce_proto::AsyncEvent;

    /// `SOFTROCE_STATS`' line names the device and process and lists the
    /// counters that moved, engine's first, nothing else.
    #[test]
    fn the_stats_report_lists_the_counters_that_moved() {
        let engine = roce_proto::counters::Counters { sent_pkts: 7, ..Default::default() };
        let driver = crate::driver::DriverStats { tx_messages: 3, ..Default::default() };
        assert_eq!(
            super::stats_report("softroce_lo", 42, "closed", &engine, &driver),
            "softroce: softroce_lo (pid 42) closed: sent_pkts=7 tx_messages=3\n"
        );
    }

    fn open(last: u8) -> Context {
        let info = DeviceInfo::on_address(format!("f{last}"), IpAddr::V4(Ipv4Addr::new(127, 0, 0, last))).unwrap();
        Context::open_with(&info, Options::default()).unwrap()
    }

    /// A driver thread that panics (here while it holds the device lock)
    /// fails the device loudly, as a NIC's fatal error does: a thread
    /// blocked in `Cq::wait` returns the error at once instead of sleeping
    /// out its 20 s, verbs that start work are refused, `DeviceFatal` is
    /// raised once, completions made before stay pollable, and the context
    /// still closes.
    #[test]
    fn a_driver_thread_that_panics_fails_the_device_and_wakes_its_waiters() {
        let (x, y) = (open(30), open(31));
        let (pdx, pdy) = (x.alloc_pd().unwrap(), y.alloc_pd().unwrap());
        let (cqx, cqy) = (x.create_cq(16, None).unwrap(), y.create_cq(16, None).unwrap());
        let (mx, my) =
            (pdx.reg_mr(4096, AccessFlags::LOCAL_WRITE).unwrap(), pdy.reg_mr(4096, AccessFlags::LOCAL_WRITE).unwrap());
        let (qx, qy) =
            (pdx.create_qp(QpInit::rc(&cqx, &cqx, 8)).unwrap(), pdy.create_qp(QpInit::rc(&cqy, &cqy, 8)).unwrap());
        qx.connect(1, &qy.endpoint(2)).unwrap();
        qy.connect(2, &qx.endpoint(1)).unwrap();
        // One SEND before the failure: its completions survive it.
        let (sx, sy) = ([mx.sge(0, 64)], [my.sge(0, 64)]);
        qy.post_recv(&RecvWr { wr_id: 7, sg_list: &sy }).unwrap();
        qx.post_send(&SendWr::new(1, WrOpcode::Send, SendFlags::SIGNALED, Payload::Sges(&sx))).unwrap();
        let mut wc = [Wc::new(0, WcStatus::Success, WcOpcode::Send, 0); 1];
        assert_eq!(cqx.wait(&mut wc, Duration::from_secs(20)).unwrap(), 1);
        assert_eq!((wc[0].wr_id, wc[0].status), (1, WcStatus::Success));
        // y's completion stays in its CQ; x's CQ is empty: x waits.
        std::thread::scope(|s| {
            let waiter = s.spawn(|| {
                let t = Instant::now();
                let mut wc = [Wc::new(0, WcStatus::Success, WcOpcode::Send, 0); 1];
                (cqx.wait(&mut wc, Duration::from_secs(20)), t.elapsed())
            });
            std::thread::sleep(Duration::from_millis(100));
            x.shared().panic_for_test.store(true, Ordering::Release);
            let _ = x.shared().waker.wake();
            let (r, took) = waiter.join().unwrap();
            // Whichever saw it first names it: the driver thread's own
            // catch, or a thread that found the lock it held poisoned.
            assert!(matches!(r, Err(Error::DeviceFailed { ref why }) if why.contains("panicked")), "{r:?}");
            assert!(took < Duration::from_secs(5), "the waiter returned after {took:?}, not at once");
        });
        assert_eq!(x.get_async_event(Some(Duration::ZERO)).unwrap(), Some(AsyncEvent::DeviceFatal));
        assert_eq!(x.get_async_event(Some(Duration::ZERO)).unwrap(), None, "raised once");
        let e = qx.post_send(&SendWr::new(2, WrOpcode::Send, SendFlags::SIGNALED, Payload::Sges(&sx)));
        assert!(matches!(e, Err(Error::DeviceFailed { .. })), "{e:?}");
        assert!(matches!(qx.post_recv(&RecvWr { wr_id: 3, sg_list: &sx }), Err(Error::DeviceFailed { .. })));
        assert!(matches!(x.alloc_pd(), Err(Error::DeviceFailed { .. })));
        assert!(matches!(cqx.poll(&mut wc), Err(Error::DeviceFailed { .. })));
        assert!(matches!(cqx.wait(&mut wc, Duration::ZERO), Err(Error::DeviceFailed { .. })), "a look, as poll");
        assert!(matches!(x.progress_wait(Duration::from_secs(20)), Err(Error::DeviceFailed { .. })));
        // The other device is unaffected.
        assert_eq!(cqy.poll(&mut wc).unwrap(), 1);
        assert_eq!((wc[0].wr_id, wc[0].opcode), (7, WcOpcode::Recv));
        assert_eq!(y.get_async_event(Some(Duration::ZERO)).unwrap(), None);
        drop((qx, mx, cqx, pdx));
        drop(x);
    }
}
