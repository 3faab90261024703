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
use roce_udp::{Socket, Waker};
use roce_wire::IcrcPolicy;

use crate::channel::EventQueue;
use crate::config::{self, DeviceInfo};
use crate::driver::{DriverStats, Progress, Shared, State};
use crate::error::Error;
use crate::faults::{FaultSpec, FaultStats, Faults};
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
    /// UDP port to bind instead of 4791 (tests; peers must send there).
    pub port: Option<u16>,
    /// Seed of the R_Key generator (`None`: random).
    pub seed: Option<u64>,
    /// How long `Cq::wait` keeps polling before it sleeps
    /// (`SOFTROCE_SPIN_US`, default 0: sleep at once, best on few cores).
    pub spin: Duration,
}

impl Options {
    /// Options from `SOFTROCE_PROGRESS`, `SOFTROCE_PCAP` and `SOFTROCE_FAULTS`.
    pub fn from_env() -> Result<Options, Error> {
        let mut o = Options::default();
        if let Ok(p) = std::env::var("SOFTROCE_PROGRESS") {
            o.progress = match p.as_str() {
                "thread" | "" => Progress::Thread,
                "inline" => Progress::Inline,
                other => {
                    return Err(Error::Env {
                        var: "SOFTROCE_PROGRESS",
                        msg: format!("{other:?} is not thread or inline"),
                    });
                }
            };
        }
        if let Ok(v) = std::env::var("SOFTROCE_SPIN_US") {
            let us: u64 = v.parse().map_err(|_| Error::Env {
                var: "SOFTROCE_SPIN_US",
                msg: format!("{v:?} is not a number of microseconds"),
            })?;
            o.spin = Duration::from_micros(us.min(1_000_000));
        }
        o.pcap = std::env::var_os("SOFTROCE_PCAP").filter(|p| !p.is_empty()).map(PathBuf::from);
        if let Ok(f) = std::env::var("SOFTROCE_FAULTS") {
            o.faults = Some(f.parse()?);
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
        if let Some(t) = st.tap.as_mut() {
            let _ = t.flush();
        }
    }
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
        let sock = match opts.port {
            Some(p) => Socket::bind_addr(std::net::SocketAddr::new(info.addr, p))?,
            None => Socket::bind(info.addr)?,
        };
        let seed = opts.seed.unwrap_or_else(|| std::collections::hash_map::RandomState::new().hash_one(info.addr));
        let dev = Device::new(DeviceConfig {
            gids: info.gids.clone(),
            seed,
            // A socket cannot see the IPv4 ID: solve it from the ICRC (docs/icrc.md).
            icrc_policy: IcrcPolicy::Ipv6OrKnownId,
            active_mtu: info.active_mtu,
            limits: Limits::default(),
            udp_src_port: Some(sock.local_port()),
        });
        let tap = match &opts.pcap {
            Some(p) => Some(Tap::create(p).map_err(|e| Error::Pcap { path: p.clone(), source: e })?),
            None => None,
        };
        let shared = Arc::new(Shared {
            info: info.clone(),
            sock,
            state: Mutex::new(State::new(dev, opts.faults.map(Faults::new), tap)),
            waker: Waker::new()?,
            stop: AtomicBool::new(false),
            mode: opts.progress,
            async_events: EventQueue::new()?,
            cq_waker: Waker::new()?,
            waiters: std::sync::atomic::AtomicUsize::new(0),
            in_socket: std::sync::atomic::AtomicBool::new(false),
            tx_owed: std::sync::atomic::AtomicU64::new(0),
            driver_deadline: std::sync::atomic::AtomicU64::new(u64::MAX),
            epoch: std::time::Instant::now(),
            spin: opts.spin,
        });
        crate::fork::register(&shared);
        let thread = match opts.progress {
            Progress::Thread => {
                let s = shared.clone();
                let name = format!("softroce {}", info.name);
                Some(std::thread::Builder::new().name(name).spawn(move || s.run())?)
            }
            Progress::Inline => None,
        };
        Ok(Context { owner: Arc::new(Owner { shared, thread: Mutex::new(thread), pid: std::process::id() }) })
    }

    pub(crate) fn shared(&self) -> &Shared {
        &self.owner.shared
    }

    /// The device this context opened.
    pub fn device(&self) -> &DeviceInfo {
        &self.shared().info
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

    /// The driver's counters.
    pub fn driver_stats(&self) -> DriverStats {
        self.shared().lock().stats
    }

    /// What `SOFTROCE_FAULTS` injected so far (`None` without faults).
    pub fn fault_stats(&self) -> Option<FaultStats> {
        self.shared().lock().faults.as_ref().map(|f| f.stats)
    }

    /// Makes progress now (needed only with [`Progress::Inline`]).
    pub fn progress(&self) -> Result<(), Error> {
        let s = self.shared();
        let mut st = s.lock();
        s.progress(&mut st)?;
        Ok(())
    }

    /// For applications that watch memory rather than a CQ (the target of
    /// a peer's RDMA WRITE): sleeps until a packet arrives (not at all if
    /// some wait), another thread made completions, or `timeout` passes,
    /// and processes what came in this thread. Returns whether packets were
    /// processed.
    pub fn progress_wait(&self, timeout: Duration) -> Result<bool, Error> {
        let s = self.shared();
        let _waiting = s.enter_wait();
        // The caller reads its memory next: what the packets call for (an
        // ACK) may wait for its next verb, as after a completion.
        s.sleep_and_progress(std::time::Instant::now() + timeout, crate::driver::Defer::IfReceived, None)
            .map(|(_, got)| got)
            .map_err(Error::from)
    }

    /// The next async event (`ibv_get_async_event`), waiting up to
    /// `timeout` (`None`: forever). Events need no acknowledgement here.
    pub fn get_async_event(&self, timeout: Option<Duration>) -> Result<Option<AsyncEvent>, Error> {
        Ok(self.shared().async_events.pop_wait(timeout)?)
    }

    /// The async event queue's file descriptor: readable while an event
    /// waits (for poll/epoll/`AsyncFd`).
    pub fn async_fd(&self) -> std::os::fd::BorrowedFd<'_> {
        use std::os::fd::AsFd;
        self.shared().async_events.as_fd()
    }
}
