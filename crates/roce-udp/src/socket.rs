//! The port-4791 UDP socket and the errors of binding it.

use std::io::{self, IoSlice};
use std::net::{IpAddr, SocketAddr};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, RawFd};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use socket2::{Domain, Protocol, SockAddr, Type};

use crate::recv::RecvBatch;
use crate::sys;
pub use crate::sys::SockFilter;

/// The RoCEv2 UDP port: the destination port of every RoCEv2 packet, and
/// the port a [`Socket`] binds to receive.
pub const ROCE_PORT: u16 = 4791;

/// The socket buffer size asked for, each way. Deep buffers absorb bursts
/// of a whole send window (e.g. 64 x 4 KiB messages) without drops.
pub const WANTED_BUFFER: usize = 8 << 20;

/// Why [`Socket::bind`] failed, with what to do about it.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum BindError {
    /// `EADDRNOTAVAIL`: the address is not configured on this host.
    #[error(
        "cannot bind {addr}: it is not an address of this host; use one of this host's addresses \
         (for example {example} on loopback) or choose another with SOFTROCE_DEVICES=NAME=ADDR",
        example = example_local(addr)
    )]
    AddressNotLocal {
        /// The address asked for.
        addr: IpAddr,
    },
    /// `EADDRINUSE`: another socket holds this address and port.
    #[error(
        "cannot bind {addr}: address and port already in use, perhaps by another softroce or by the \
         kernel's Soft-RoCE driver (rdma_rxe holds UDP port {ROCE_PORT} on all addresses); pick another \
         address{example} or set SOFTROCE_DEVICES=NAME=ADDR",
        example = example_free(addr)
    )]
    PortInUse {
        /// The address and port asked for.
        addr: SocketAddr,
    },
    /// `EACCES` / `EPERM`: a privilege or security policy forbids the socket.
    #[error(
        "cannot bind {addr}: permission denied ({source}); ports below 1024 need CAP_NET_BIND_SERVICE, \
         and a security policy (SELinux, AppArmor, seccomp, a cgroup BPF program) may forbid UDP sockets"
    )]
    PermissionDenied {
        /// The address and port asked for.
        addr: SocketAddr,
        /// The system error.
        source: io::Error,
    },
    /// Any other failure, with what was being done.
    #[error("{context}: {source}")]
    Io {
        /// What failed, e.g. "setting IP_MTU_DISCOVER on 10.0.0.1:4791".
        context: String,
        /// The system error.
        source: io::Error,
    },
}

/// A local address to suggest instead of `addr`.
fn example_local(addr: &IpAddr) -> &'static str {
    if addr.is_ipv4() { "127.0.0.2" } else { "::1" }
}

/// Another address to suggest instead of `addr`, as a phrase.
fn example_free(addr: &SocketAddr) -> &'static str {
    match addr.ip() {
        IpAddr::V4(a) if a.octets() == [127, 0, 0, 3] => {
            " such as 127.0.0.4 (Linux loopback accepts all of 127.0.0.0/8)"
        }
        IpAddr::V4(_) => " such as 127.0.0.3 (Linux loopback accepts all of 127.0.0.0/8)",
        IpAddr::V6(_) => " of this host",
    }
}

/// Socket buffer sizes achieved, as `getsockopt` reports them (Linux
/// doubles the size asked for, to account for its bookkeeping).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BufferSizes {
    /// `SO_RCVBUF`.
    pub recv: usize,
    /// `SO_SNDBUF`.
    pub send: usize,
}

/// A non-blocking UDP socket bound to one local address and port 4791:
/// receives RoCEv2 packets with [`Socket::recv`] into a [`RecvBatch`] and
/// sends them with [`crate::SendBatch::flush`].
///
/// It is unconnected, and IPv4 sockets have `IP_MTU_DISCOVER =
/// IP_PMTUDISC_DO`: Linux then sends every datagram with DF set and IPv4
/// identification 0 (the segments of one GSO message get 0, 1, 2, ...),
/// which is what makes the RoCEv2 ICRC, which covers the identification,
/// computable before sending. IPv6 sockets are IPv6-only with
/// `IPV6_PMTUDISC_DO`. Datagrams never fragment: a packet larger than the
/// path MTU fails with `EMSGSIZE`.
///
/// Every packet leaves from [`Socket::local_port`]: the engine must
/// compute the ICRC with that source port (see the crate docs).
#[derive(Debug)]
pub struct Socket {
    inner: socket2::Socket,
    local: SocketAddr,
    buffers: BufferSizes,
    gro: bool,
    /// The `SO_RCVTIMEO` last set, in µs (0: none yet).
    recv_timeout_us: AtomicU64,
}

impl Socket {
    /// Binds `addr:4791`.
    pub fn bind(addr: IpAddr) -> Result<Socket, BindError> {
        Socket::bind_addr(SocketAddr::new(addr, ROCE_PORT))
    }

    /// Binds `addr` with any port (0 picks a free one): for tests and for
    /// running beside another RoCE stack.
    pub fn bind_addr(addr: SocketAddr) -> Result<Socket, BindError> {
        Socket::bind_with(addr, false)
    }

    /// Binds `addr` as one member of a `SO_REUSEPORT` group: every socket
    /// of the group is bound to the same address and port, and a steering
    /// program ([`Socket::attach_steering`]) picks the member each datagram
    /// goes to. The kernel admits only sockets created by one uid to a
    /// group: another user's group on `addr` is [`BindError::PortInUse`].
    pub fn bind_shared(addr: SocketAddr) -> Result<Socket, BindError> {
        Socket::bind_with(addr, true)
    }

    /// Binds `addr` to send from its port only (a RoCE source port): a
    /// member of its `SO_REUSEPORT` group, as [`Socket::bind_shared`], with
    /// the smallest receive buffer the kernel allows, since nothing is
    /// meant to arrive there (what does is dropped by the kernel, not
    /// queued up to [`WANTED_BUFFER`]).
    pub fn bind_source(addr: SocketAddr) -> Result<Socket, BindError> {
        let mut s = Socket::bind_with(addr, true)?;
        let fd = s.inner.as_fd();
        sys::set_int(fd, libc::SOL_SOCKET, libc::SO_RCVBUF, 0)
            .map_err(|source| BindError::Io { context: format!("setting SO_RCVBUF on {addr}"), source })?;
        s.buffers.recv = sys::get_int(fd, libc::SOL_SOCKET, libc::SO_RCVBUF)
            .map_err(|source| BindError::Io { context: format!("reading SO_RCVBUF on {addr}"), source })?
            .max(0) as usize;
        Ok(s)
    }

    fn bind_with(addr: SocketAddr, reuse_port: bool) -> Result<Socket, BindError> {
        let io = |what: &str| {
            let what = what.to_owned();
            move |source| BindError::Io { context: format!("{what} on {addr}"), source }
        };
        let sock = socket2::Socket::new(Domain::for_address(addr), Type::DGRAM, Some(Protocol::UDP))
            .map_err(io("creating a UDP socket"))?;
        let fd = sock.as_fd();
        // A socket bound to one address receives only what is sent to it
        // (unicast): the destination is known without asking the kernel for
        // it in a control message with every datagram.
        let pktinfo = addr.ip().is_unspecified();
        if addr.is_ipv4() {
            sys::set_int(fd, libc::IPPROTO_IP, libc::IP_MTU_DISCOVER, libc::IP_PMTUDISC_DO)
                .map_err(io("setting IP_MTU_DISCOVER"))?;
            if pktinfo {
                sys::set_int(fd, libc::IPPROTO_IP, libc::IP_PKTINFO, 1).map_err(io("setting IP_PKTINFO"))?;
            }
        } else {
            sock.set_only_v6(true).map_err(io("setting IPV6_V6ONLY"))?;
            sys::set_int(fd, libc::IPPROTO_IPV6, libc::IPV6_MTU_DISCOVER, libc::IPV6_PMTUDISC_DO)
                .map_err(io("setting IPV6_MTU_DISCOVER"))?;
            if pktinfo {
                sys::set_int(fd, libc::IPPROTO_IPV6, libc::IPV6_RECVPKTINFO, 1)
                    .map_err(io("setting IPV6_RECVPKTINFO"))?;
            }
        }
        // ECN (RFC 3168; RoCEv2 Annex A17.9): every packet leaves ECN-capable,
        // ECT(0), so a congested queue on the way marks it CE rather than
        // dropping it, and the ECN field of each datagram received comes
        // with it, so the engine sees the marks and sends CNPs.
        let ect0 = libc::c_int::from(roce_wire::Ecn::Ect0.bits());
        if addr.is_ipv4() {
            sys::set_int(fd, libc::IPPROTO_IP, libc::IP_TOS, ect0).map_err(io("setting IP_TOS"))?;
            sys::set_int(fd, libc::IPPROTO_IP, libc::IP_RECVTOS, 1).map_err(io("setting IP_RECVTOS"))?;
        } else {
            sys::set_int(fd, libc::IPPROTO_IPV6, libc::IPV6_TCLASS, ect0).map_err(io("setting IPV6_TCLASS"))?;
            sys::set_int(fd, libc::IPPROTO_IPV6, libc::IPV6_RECVTCLASS, 1).map_err(io("setting IPV6_RECVTCLASS"))?;
        }
        let buffers = BufferSizes {
            recv: grow_buffer(fd, sys::SO_RCVBUFFORCE, libc::SO_RCVBUF).map_err(io("reading SO_RCVBUF"))?,
            send: grow_buffer(fd, sys::SO_SNDBUFFORCE, libc::SO_SNDBUF).map_err(io("reading SO_SNDBUF"))?,
        };
        // Kernels before 5.0 have no UDP_GRO: receive datagram by datagram.
        let gro = sys::set_int(fd, sys::SOL_UDP, sys::UDP_GRO, 1).is_ok();
        // Blocking, so that `recv_wait` can sleep in `recvmmsg` itself; every
        // other call passes MSG_DONTWAIT.
        sock.set_nonblocking(false).map_err(io("clearing O_NONBLOCK"))?;
        if reuse_port {
            sys::set_int(fd, libc::SOL_SOCKET, libc::SO_REUSEPORT, 1).map_err(io("setting SO_REUSEPORT"))?;
        }
        sock.bind(&SockAddr::from(addr)).map_err(|e| bind_error(addr, e))?;
        // UD multicast (a SEND to a group's address) leaves by this
        // address's interface, with the hop limit rdma_cm gives a RoCEv2
        // group (64; the kernel's rxe takes the IP TTL from the AH). Set
        // once bound: the address is then known to be this host's.
        if let Some(ifa) = crate::group::multicast_if(addr.ip()) {
            sock.set_multicast_if_v4(&ifa).map_err(io("setting IP_MULTICAST_IF"))?;
            sock.set_multicast_ttl_v4(64).map_err(io("setting IP_MULTICAST_TTL"))?;
        }
        let local = sock
            .local_addr()
            .map_err(io("reading the bound address"))?
            .as_socket()
            .ok_or_else(|| io("reading the bound address")(io::Error::other("not an IP address")))?;
        Ok(Socket { inner: sock, local, buffers, gro, recv_timeout_us: AtomicU64::new(0) })
    }

    /// Replaces the steering program of this socket's `SO_REUSEPORT`
    /// group (`SO_ATTACH_REUSEPORT_CBPF`): a classic BPF program over the
    /// UDP payload whose return value is the index of the member that gets
    /// the datagram (an index past the last member falls back to the
    /// kernel's flow hash). Any member may attach; the program outlives it.
    pub fn attach_steering(&self, program: &[SockFilter]) -> io::Result<()> {
        sys::attach_reuseport_cbpf(self.inner.as_fd(), program)
    }

    /// The bound address and port.
    pub fn local_addr(&self) -> SocketAddr {
        self.local
    }

    /// The UDP source port of everything this socket sends (4791 unless
    /// bound with [`Socket::bind_addr`]). The engine's `Transmit::src_port`
    /// and its ICRC must use this port.
    pub fn local_port(&self) -> u16 {
        self.local.port()
    }

    /// The socket buffer sizes achieved (asked: [`WANTED_BUFFER`] each).
    pub fn buffer_sizes(&self) -> BufferSizes {
        self.buffers
    }

    /// Whether `UDP_GRO` is on: received datagrams may then be coalesced
    /// runs of equal-size segments, which [`RecvBatch`] splits again.
    pub fn gro_enabled(&self) -> bool {
        self.gro
    }

    /// Receives what is waiting (up to the batch's capacity) into `batch`
    /// with one `recvmmsg`, without blocking. Returns the number of datagrams
    /// (GRO super-datagrams count once): 0 when nothing was waiting.
    pub fn recv(&self, batch: &mut RecvBatch) -> io::Result<usize> {
        batch.receive(self.inner.as_fd(), self.local.ip(), sys::RecvMode::NoWait)
    }

    /// Like [`Socket::recv`], but when nothing waits, sleeps in `recvmmsg`
    /// until a datagram arrives, `timeout` passes (rounded up to a
    /// millisecond) or a signal comes, and returns that datagram alone.
    /// Returns 0 when nothing came. [`Socket::wake_receiver`] ends the sleep
    /// from another thread.
    ///
    /// What waits already is taken whole, without sleeping. The sleep takes
    /// one datagram: in a ping-pong that is the reply, and the caller hands
    /// it on at once; whatever came with it (the ACK of the caller's own
    /// request) is taken by the next call, after the caller answered.
    pub fn recv_wait(&self, batch: &mut RecvBatch, timeout: Duration) -> io::Result<usize> {
        let us = u64::try_from(timeout.as_micros()).unwrap_or(u64::MAX).div_ceil(1000).max(1) * 1000;
        if self.recv_timeout_us.swap(us, Ordering::Relaxed) != us {
            self.inner.set_read_timeout(Some(Duration::from_micros(us)))?;
        }
        let n = self.recv(batch)?;
        if n > 0 {
            return Ok(n);
        }
        batch.receive(self.inner.as_fd(), self.local.ip(), sys::RecvMode::WaitForOne)
    }

    /// Ends a [`Socket::recv_wait`] sleeping on this socket in another
    /// thread: sends the socket an empty datagram from itself, which
    /// [`Socket::is_wake_up`] recognizes.
    pub fn wake_receiver(&self) -> io::Result<()> {
        self.inner.send_to_with_flags(&[], &SockAddr::from(self.local), libc::MSG_DONTWAIT).map(|_| ())
    }

    /// Whether a received datagram is a [`Socket::wake_receiver`] call (an
    /// empty one from this socket): not a packet.
    pub fn is_wake_up(&self, src: SocketAddr, len: usize) -> bool {
        len == 0 && src == self.local
    }

    /// Ends receiving (`shutdown(SHUT_RD)`): a thread sleeping in
    /// [`Socket::recv_wait`] wakes with nothing, and so does every later
    /// receive once the queue is empty. The socket keeps its address until
    /// it is closed.
    pub fn shutdown_read(&self) -> io::Result<()> {
        self.inner.shutdown(std::net::Shutdown::Read)
    }

    /// Stops drawing new datagrams from its `SO_REUSEPORT` group while
    /// what is queued stays readable: connected to a peer that never sends
    /// to it (its own address's discard port), the kernel's flow-hash
    /// choice of a group member skips it. A member about to close hands
    /// its queue on after this, where closing at once would lose it.
    pub fn stop_drawing(&self) -> io::Result<()> {
        let mut discard = self.local;
        discard.set_port(9);
        self.inner.connect(&SockAddr::from(discard))
    }

    /// Sends one datagram with one `sendto`, without blocking.
    pub fn send_to(&self, data: &[u8], dst: SocketAddr) -> io::Result<usize> {
        self.inner.send_to_with_flags(data, &SockAddr::from(dst), libc::MSG_DONTWAIT)
    }

    /// Sends one datagram gathered from `parts` with one `sendmsg`, without blocking.
    pub fn send_to_vectored(&self, parts: &[IoSlice<'_>], dst: SocketAddr) -> io::Result<usize> {
        self.inner.send_to_vectored_with_flags(parts, &SockAddr::from(dst), libc::MSG_DONTWAIT)
    }
}

impl AsFd for Socket {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.inner.as_fd()
    }
}

impl AsRawFd for Socket {
    fn as_raw_fd(&self) -> RawFd {
        self.inner.as_raw_fd()
    }
}

/// Asks for [`WANTED_BUFFER`] with the privileged option (beyond
/// `net.core.[rw]mem_max`), then the plain one, which the kernel silently
/// caps; returns what the kernel granted.
fn grow_buffer(fd: BorrowedFd<'_>, force: libc::c_int, plain: libc::c_int) -> io::Result<usize> {
    let want = WANTED_BUFFER as libc::c_int;
    if sys::set_int(fd, libc::SOL_SOCKET, force, want).is_err() {
        // Without CAP_NET_ADMIN: the kernel caps at its maximum. A failure
        // here leaves the default, which still works.
        let _ = sys::set_int(fd, libc::SOL_SOCKET, plain, want);
    }
    sys::get_int(fd, libc::SOL_SOCKET, plain).map(|v| v.max(0) as usize)
}

/// Maps a `bind` failure to what the user can do about it.
fn bind_error(addr: SocketAddr, e: io::Error) -> BindError {
    match e.raw_os_error() {
        Some(libc::EADDRNOTAVAIL) => BindError::AddressNotLocal { addr: addr.ip() },
        Some(libc::EADDRINUSE) => BindError::PortInUse { addr },
        Some(libc::EACCES | libc::EPERM) => BindError::PermissionDenied { addr, source: e },
        _ => BindError::Io { context: format!("binding {addr}"), source: e },
    }
}
