//! rsockets over softroce: librdmacm's socket API over RDMA (rdma-core 44's
//! `rsocket.h`, rsocket(7)) as a Rust library written against the
//! `softroce` crate's verbs and rdma_cm API, wire-compatible with rdma-core's
//! rsockets: a softroce rsocket and one of rdma-core's on a real RoCE host
//! talk to each other. The protocol reference is rdma-core's
//! `librdmacm/rsocket.c`; every number and wire format here is its.
//!
//! The C entry points (`rsocket`, `rbind`, `rconnect`, `rsend`, `rpoll`,
//! `riomap`, `repoll_wait`, ...) are not here: `softroce-ibverbs` exports
//! them from its `librdmacm.so.1` and calls this crate, converting C
//! arguments and setting `errno`.
//!
//! # The Rust API
//!
//! An rsocket is a [`Socket`] (made with [`Socket::new`] from an event
//! channel and a `RDMA_PS_TCP` id; [`Options`] says its sizes and flags)
//! with socket calls as methods: [`Socket::bind`], [`Socket::listen`],
//! [`Socket::accept`], [`Socket::connect`], [`Socket::send`] (a
//! [`Gather`]), [`Socket::recv`], [`Socket::shutdown`], [`Socket::close`],
//! [`Socket::iomap`], [`Socket::iowrite`]. Errors are [`Errno`] values.
//! The process's sockets by number are [`insert`]ed, [`lookup`]ed and
//! [`remove`]d here; [`rpoll`] polls them and ordinary descriptors
//! together, and [`repoll`] is rdma-core 65's epoll for them.
//!
//! # What is implemented
//!
//! Stream rsockets (`SOCK_STREAM`, AF_INET and AF_INET6) with rsockets'
//! protocol, every part that goes on the wire as rdma-core sends it:
//!
//! - the connection: rdma_cm (`RDMA_PS_TCP`) with `struct rs_conn_data` as
//!   the REQ's and REP's private data (version 1; `RS_CONN_FLAG_IOMAP`
//!   always, `RS_CONN_FLAG_NET` on big-endian hosts; credits, the scaled
//!   iomap size, the target SGL and the first receive buffer), flow control
//!   on, retry and RNR retry 7; the passive side accepts with the request's
//!   parameters (`wire`);
//! - the data: RDMA WRITE WITH IMMEDIATE into the peer's receive ring,
//!   immediate data `op << 29 | data` (DATA, SGL, IOMAP_SGL, CTRL with
//!   DISCONNECT and SHUTDOWN), zero-length writes for credits and control;
//!   writes of 2 KiB doubling to 64 KiB per send, inline up to the inline
//!   size, the rest from a registered send ring (`stream`);
//! - flow control: a receive WQE per message, credits as a 16-bit message
//!   sequence number, granted again after half the receives are consumed;
//!   the ring granted half at a time by writing a 16-byte SGE into the
//!   sender's two-entry target SGL, in the sender's byte order
//!   (`RS_OPT_SWAP_SGL`); 4 send entries kept for control messages;
//! - shutdown: SHUTDOWN for one direction, DISCONNECT for both, then
//!   `rdma_disconnect` (`state`);
//! - riomap / riowrite: a PROT_WRITE mapping is announced by writing a
//!   24-byte `struct rs_iomap` into the peer's iomap table (IOMAP_SGL
//!   immediate) before the next send; riowrite is a plain RDMA WRITE into
//!   the peer's mapping, ordered with the stream;
//! - rsockets' defaults (send and receive queues 384, inline 64, buffers
//!   128 KiB, iomap size 0, polling time 10 us, wake-up interval 500 ms) and
//!   the files of `/etc/rdma/rsocket` that change them (`config`);
//! - the options rstream, riostream and common servers set (`SO_RCVBUF`,
//!   `SO_SNDBUF` (doubled, as rsockets does), `SO_REUSEADDR`, `SO_LINGER`,
//!   `SO_KEEPALIVE`, `SO_OOBINLINE`, `SO_ERROR`, `TCP_NODELAY`,
//!   `TCP_KEEPIDLE`, `TCP_MAXSEG`, `TCP_INFO`, `IP_TOS`, `IPV6_V6ONLY`,
//!   `SOL_RDMA`'s `RDMA_SQSIZE`, `RDMA_RQSIZE`, `RDMA_INLINE`,
//!   `RDMA_IOMAPSIZE`), `rfcntl`'s O_NONBLOCK and FD_CLOEXEC, MSG_DONTWAIT,
//!   MSG_PEEK and MSG_WAITALL.
//!
//! As in rdma-core, an rsocket's number is the file descriptor of its
//! rdma_cm event channel, so it never collides with another descriptor of
//! the process. `rpoll` and `rselect` take rsockets and ordinary
//! descriptors together (`poll`), and so does rdma-core 65's epoll for
//! rsockets, `repoll_create`, `repoll_ctl` and `repoll_wait` ([`repoll`]).
//! A listener accepts in a thread of its own, as rsockets' listen service
//! does: a client's connect completes before the server calls `raccept`.
//! Blocking calls sleep in `poll(2)` on the socket's completion channel and
//! event channel, never spinning past the polling time. One lock per socket: a reader and a writer of one
//! socket may block in two threads at once, and one of them sleeps on the
//! descriptors while the other waits for it.
//!
//! What the peer sends is checked (`stream::ProtoError`): lengths against
//! the bytes written and the ring space granted, messages against the
//! credits, reserved ops, iomap indexes, the connection data. A violation
//! fails the socket with EPROTO and disconnects it. The peer's RDMA
//! writes can only reach the regions registered for it.
//!
//! # Left out, and why
//!
//! - Datagram rsockets (`SOCK_DGRAM`, UD QPs plus a UDP socket for address
//!   resolution): `rsocket(.., SOCK_DGRAM, ..)` fails with EPROTONOSUPPORT.
//!   They are a different protocol; no tool of this project uses them yet.
//! - AF_IB addresses (EAFNOSUPPORT): softroce has no native IB addressing.
//! - Keepalive probes: `SO_KEEPALIVE` and `TCP_KEEPIDLE` are kept and read
//!   back, and a peer's KEEPALIVE message is understood, but no probe is
//!   sent (rsockets sends one as a zero-length RDMA WRITE per idle
//!   interval, which only makes a dead peer's transport fail sooner).
//! - `RDMA_ROUTE` (ENOTSUP): RoCE paths are built locally (`RDMA_OPTION_IB_PATH`).
//! - iWARP's send-based messages (`RS_OPT_MSG_SEND`): softroce is RoCE.
//! - rsockets' preload library (`librspreload.so`: rdma-core's own runs
//!   over softroce-ibverbs' `librdmacm.so.1`, `repoll_*` included).
//!
//! # Departures from rdma-core's API behaviour (none on the wire)
//!
//! (Those of argument checking, NULL pointers and iovecs, are made by the
//! C entry points in softroce-ibverbs; the rest here.)
//!
//! Errors are those of sockets where rsockets' differ or crash: an
//! unknown socket number gives EBADF (ENOTSOCK if it is another open
//! descriptor), a call on an unconnected socket ENOTCONN, NULL buffers
//! EFAULT, `raccept` on a non-listener EINVAL, `rclose` of an unknown
//! number -1/EBADF (rsockets returns a positive EBADF). `rrecvmsg` and
//! `rreadv` fill every iovec (rsockets fills only the first; overlapping
//! iovecs are EINVAL). A riowrite past a mapping's end stops there
//! (rsockets spins). `rpoll` reports POLLHUP for a socket the peer
//! disconnected once the data sent before has been read (rsockets reports
//! it at once, which fails `rstream -T a` when the last bytes and the
//! DISCONNECT come in one pass). `rshutdown` of an unconnected socket is
//! ENOTCONN, `rconnect` while connecting EALREADY (rsockets: 0, EINPROGRESS).
//! `repoll_ctl` and `repoll_wait` fail as epoll's calls do, -1 with errno
//! (rsockets 65 returns the errno value itself).

// The system calls with raw pointers and descriptors are `sys`'s alone.
#![deny(unsafe_code)]

use std::collections::HashMap;
use std::ffi::c_int;
use std::fmt;
use std::sync::{Arc, RwLock};

mod config;
mod listen;
mod poll;
pub mod repoll;
mod socket;
mod state;
mod stream;
mod sys;
mod wire;

pub use poll::rpoll;
pub use socket::{Gather, Inner, Options, Socket};
pub use state::State;
pub use stream::{QP_MAX, SNDLOWAT, Sizes};
pub use wire::round_iomap_size;

use sys::sys_poll;

/// An errno value, the error of every rsocket call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Errno(pub c_int);

impl Errno {
    /// EAGAIN.
    pub const AGAIN: Errno = Errno(libc::EAGAIN);
    /// EINVAL.
    pub const INVAL: Errno = Errno(libc::EINVAL);
    /// ENOTCONN.
    pub const NOTCONN: Errno = Errno(libc::ENOTCONN);
    /// EFAULT.
    pub const FAULT: Errno = Errno(libc::EFAULT);
    /// EBADF.
    pub const BADF: Errno = Errno(libc::EBADF);
}

impl From<softroce::Error> for Errno {
    fn from(e: softroce::Error) -> Errno {
        trace_err("rsocket", &e);
        Errno(e.errno())
    }
}

/// Whether `SOFTROCE_IBV_TRACE` asks for a line on stderr for each failure
/// (the drop-in library's switch, which serves its rsockets too).
fn tracing() -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ON.get_or_init(|| softroce::env::on(softroce::env::IBV_TRACE))
}

/// Reports why `what` failed when tracing is on, in the drop-in library's
/// words (its `trace_err`).
fn trace_err(what: &str, why: &dyn fmt::Display) {
    if tracing() {
        eprintln!("softroce-ibverbs: {what}: {why}");
    }
}

impl fmt::Display for Errno {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", std::io::Error::from_raw_os_error(self.0))
    }
}

/// The process's rsockets by number.
static TABLE: RwLock<Option<HashMap<c_int, Arc<socket::Socket>>>> = RwLock::new(None);

/// Lists `s` under its number (its event channel's descriptor).
pub fn insert(s: Arc<socket::Socket>) {
    let mut t = TABLE.write().unwrap_or_else(|e| e.into_inner());
    t.get_or_insert_with(HashMap::new).insert(s.fd, s);
}

/// Unlists the rsocket numbered `fd` and returns it.
pub fn remove(fd: c_int) -> Option<Arc<socket::Socket>> {
    TABLE.write().unwrap_or_else(|e| e.into_inner()).as_mut().and_then(|t| t.remove(&fd))
}

/// The rsocket numbered `fd`, if it is one.
pub fn find(fd: c_int) -> Option<Arc<socket::Socket>> {
    TABLE.read().unwrap_or_else(|e| e.into_inner()).as_ref().and_then(|t| t.get(&fd).cloned())
}

/// The rsocket numbered `fd`: EBADF if there is none, ENOTSOCK if `fd` is
/// another open descriptor.
pub fn lookup(fd: c_int) -> Result<Arc<socket::Socket>, Errno> {
    find(fd).ok_or_else(|| {
        let open = fd >= 0 && sys::is_open(fd);
        Errno(if open { libc::ENOTSOCK } else { libc::EBADF })
    })
}

/// A `pollfd` for `fd` and `events`.
pub fn pollfd(fd: c_int, events: i16) -> libc::pollfd {
    libc::pollfd { fd, events, revents: 0 }
}
