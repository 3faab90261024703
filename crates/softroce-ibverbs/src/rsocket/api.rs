//! The C entry points of rsockets (`RDMACM_1.0`, as rdma-core 44's
//! librdmacm exports them). Each checks its arguments (socket numbers,
//! NULL pointers, lengths, families, flags) and returns rsockets'
//! convention: the result, or -1 with `errno`. The socket work is
//! `softroce_rsocket`'s; here are only the conversions from C.

use std::ffi::{c_int, c_long, c_void};
use std::mem::size_of;
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, SocketAddrV6};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;

use libc::{socklen_t, ssize_t};
use softroce::rdma_cm::{CmId, EventChannel, PortSpace};

use crate::export::{PanicValue, ibv_export, set_errno};
use softroce_rsocket::{Errno, Gather, Options, QP_MAX, SNDLOWAT, Socket, lookup, round_iomap_size};

/// `SOL_RDMA` and its options (`<rdma/rsocket.h>`).
const SOL_RDMA: c_int = 0x10000;
const RDMA_SQSIZE: c_int = 0;
const RDMA_RQSIZE: c_int = 1;
const RDMA_INLINE: c_int = 2;
const RDMA_IOMAPSIZE: c_int = 3;
const RDMA_ROUTE: c_int = 4;
/// `tcp_info.tcpi_state` values (`<netinet/tcp.h>`).
const TCP_ESTABLISHED: u8 = 1;
const TCP_CLOSE: u8 = 7;
/// The most iovecs a call takes (`IOV_MAX`).
const IOV_MAX: c_int = 1024;

/// `off_t` results (riomap) fail as -1, like the other rsocket calls;
/// `export.rs` has no impl for them.
impl PanicValue for i64 {
    fn panic_value() -> i64 {
        set_errno(libc::EIO);
        -1
    }
}

/// `size_t` results (riowrite) fail as `(size_t)-1`.
impl PanicValue for usize {
    fn panic_value() -> usize {
        set_errno(libc::EIO);
        usize::MAX
    }
}

/// A C result type's failure value (-1).
pub(super) trait Failure {
    const FAILED: Self;
}
impl Failure for c_int {
    const FAILED: c_int = -1;
}
impl Failure for isize {
    const FAILED: isize = -1;
}
impl Failure for i64 {
    const FAILED: i64 = -1;
}
impl Failure for usize {
    const FAILED: usize = usize::MAX;
}

/// Runs a call: its value, or -1 with `errno` (a panic is EIO, never an
/// unwind into C and never a value C would take for a socket number).
pub(super) fn call<T: Failure>(name: &str, f: impl FnOnce() -> Result<T, Errno>) -> T {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(Ok(v)) => v,
        Ok(Err(e)) => {
            if !matches!(e.0, libc::EAGAIN | libc::EINPROGRESS) {
                crate::export::trace_err(name, &e);
            }
            set_errno(e.0);
            T::FAILED
        }
        Err(_) => {
            eprintln!("softroce-ibverbs: internal error in {name}; the call failed with EIO");
            set_errno(libc::EIO);
            T::FAILED
        }
    }
}

/// Reads a `sockaddr` of `len` bytes.
///
/// # Safety
/// `addr` is NULL or points at `len` readable bytes.
unsafe fn read_sockaddr(addr: *const libc::sockaddr, len: socklen_t) -> Result<SocketAddr, Errno> {
    if addr.is_null() {
        return Err(Errno::FAULT);
    }
    let len = len as usize;
    if len < size_of::<libc::sa_family_t>() {
        return Err(Errno::INVAL);
    }
    // SAFETY: at least the family is readable (checked); unaligned reads.
    let family = c_int::from(unsafe { std::ptr::read_unaligned(&raw const (*addr).sa_family) });
    match family {
        libc::AF_INET if len >= size_of::<libc::sockaddr_in>() => {
            // SAFETY: `len` covers a sockaddr_in.
            let s = unsafe { std::ptr::read_unaligned(addr as *const libc::sockaddr_in) };
            Ok(SocketAddr::V4(SocketAddrV4::new(
                Ipv4Addr::from(u32::from_be(s.sin_addr.s_addr)),
                u16::from_be(s.sin_port),
            )))
        }
        libc::AF_INET6 if len >= size_of::<libc::sockaddr_in6>() => {
            // SAFETY: `len` covers a sockaddr_in6.
            let s = unsafe { std::ptr::read_unaligned(addr as *const libc::sockaddr_in6) };
            Ok(SocketAddr::V6(SocketAddrV6::new(
                Ipv6Addr::from(s.sin6_addr.s6_addr),
                u16::from_be(s.sin6_port),
                u32::from_be(s.sin6_flowinfo),
                s.sin6_scope_id,
            )))
        }
        libc::AF_INET | libc::AF_INET6 => Err(Errno::INVAL),
        _ => Err(Errno(libc::EAFNOSUPPORT)),
    }
}

/// Writes `a` into the caller's `addr` / `*len` as the socket calls do:
/// at most `*len` bytes, `*len` set to the address's full size.
///
/// # Safety
/// `addr` and `len` are NULL or writable; `*len` bytes of `addr` are writable.
unsafe fn write_sockaddr(a: SocketAddr, addr: *mut libc::sockaddr, len: *mut socklen_t) -> Result<(), Errno> {
    if addr.is_null() || len.is_null() {
        return Err(Errno::FAULT);
    }
    let mut buf = [0u8; size_of::<libc::sockaddr_in6>()];
    let size = match a {
        SocketAddr::V4(v) => {
            let s = libc::sockaddr_in {
                sin_family: libc::AF_INET as libc::sa_family_t,
                sin_port: v.port().to_be(),
                sin_addr: libc::in_addr { s_addr: u32::from(*v.ip()).to_be() },
                sin_zero: [0; 8],
            };
            // SAFETY: a sockaddr_in fits the buffer (smaller than sockaddr_in6).
            unsafe { std::ptr::write_unaligned(buf.as_mut_ptr() as *mut libc::sockaddr_in, s) };
            size_of::<libc::sockaddr_in>()
        }
        SocketAddr::V6(v) => {
            let s = libc::sockaddr_in6 {
                sin6_family: libc::AF_INET6 as libc::sa_family_t,
                sin6_port: v.port().to_be(),
                sin6_flowinfo: v.flowinfo().to_be(),
                sin6_addr: libc::in6_addr { s6_addr: v.ip().octets() },
                sin6_scope_id: v.scope_id(),
            };
            // SAFETY: the buffer is a sockaddr_in6's size.
            unsafe { std::ptr::write_unaligned(buf.as_mut_ptr() as *mut libc::sockaddr_in6, s) };
            size_of::<libc::sockaddr_in6>()
        }
    };
    // SAFETY: the caller's length, readable.
    let room = unsafe { *len } as usize;
    // SAFETY: `room` bytes of `addr` are the caller's to write; `len` is writable.
    unsafe {
        std::ptr::copy_nonoverlapping(buf.as_ptr(), addr as *mut u8, room.min(size));
        *len = size as socklen_t;
    }
    Ok(())
}

/// The caller's buffer as bytes.
///
/// # Safety
/// `buf` is NULL or `len` readable bytes that stay so for the call.
unsafe fn bytes<'a>(buf: *const c_void, len: usize) -> Result<&'a [u8], Errno> {
    if len == 0 {
        return Ok(&[]);
    }
    if buf.is_null() {
        return Err(Errno::FAULT);
    }
    if len > isize::MAX as usize {
        return Err(Errno::INVAL);
    }
    // SAFETY: per the contract.
    Ok(unsafe { std::slice::from_raw_parts(buf as *const u8, len) })
}

/// The caller's buffer, writable.
///
/// # Safety
/// `buf` is NULL or `len` writable bytes, not otherwise used during the call.
unsafe fn bytes_mut<'a>(buf: *mut c_void, len: usize) -> Result<&'a mut [u8], Errno> {
    if len == 0 {
        return Ok(&mut []);
    }
    if buf.is_null() {
        return Err(Errno::FAULT);
    }
    if len > isize::MAX as usize {
        return Err(Errno::INVAL);
    }
    // SAFETY: per the contract.
    Ok(unsafe { std::slice::from_raw_parts_mut(buf as *mut u8, len) })
}

/// The `iovcnt` iovecs at `iov`, checked (count, NULL bases).
///
/// # Safety
/// `iov` is NULL or `iovcnt` readable iovecs.
unsafe fn iovecs<'a>(iov: *const libc::iovec, iovcnt: c_int) -> Result<&'a [libc::iovec], Errno> {
    if !(0..=IOV_MAX).contains(&iovcnt) {
        return Err(Errno::INVAL);
    }
    if iovcnt == 0 {
        return Ok(&[]);
    }
    if iov.is_null() {
        return Err(Errno::FAULT);
    }
    // SAFETY: per the contract.
    let v = unsafe { std::slice::from_raw_parts(iov, iovcnt as usize) };
    let total = v.iter().try_fold(0usize, |t, i| t.checked_add(i.iov_len));
    if total.is_none_or(|t| t > isize::MAX as usize) {
        return Err(Errno::INVAL);
    }
    Ok(v)
}

/// The iovecs' buffers, to read from.
///
/// # Safety
/// Each iovec's buffer is NULL or `iov_len` readable bytes.
unsafe fn gather_parts<'a>(v: &[libc::iovec]) -> Result<Vec<&'a [u8]>, Errno> {
    // SAFETY: per the contract.
    v.iter().map(|i| unsafe { bytes(i.iov_base, i.iov_len) }).collect()
}

/// The iovecs' buffers, to write into; overlapping ones are refused
/// (EINVAL: two writable views of the same bytes).
///
/// # Safety
/// Each iovec's buffer is NULL or `iov_len` writable bytes.
unsafe fn scatter_parts<'a>(v: &[libc::iovec]) -> Result<Vec<&'a mut [u8]>, Errno> {
    let mut spans: Vec<(usize, usize)> =
        v.iter().filter(|i| i.iov_len > 0).map(|i| (i.iov_base as usize, i.iov_len)).collect();
    spans.sort_unstable();
    if spans.windows(2).any(|w| w[0].0.saturating_add(w[0].1) > w[1].0) {
        return Err(Errno::INVAL);
    }
    // SAFETY: per the contract; no two overlap (checked).
    v.iter().map(|i| unsafe { bytes_mut(i.iov_base, i.iov_len) }).collect()
}

/// An `int` option value.
///
/// # Safety
/// `optval` is NULL or `optlen` readable bytes.
unsafe fn int_opt(optval: *const c_void, optlen: socklen_t) -> Result<c_int, Errno> {
    if optval.is_null() {
        return Err(Errno::FAULT);
    }
    if (optlen as usize) < size_of::<c_int>() {
        return Err(Errno::INVAL);
    }
    // SAFETY: at least an int is readable (checked).
    Ok(unsafe { std::ptr::read_unaligned(optval as *const c_int) })
}

/// Writes `v` (its bytes) as an option value: at most `*optlen` bytes,
/// `*optlen` set to what was written.
///
/// # Safety
/// `optval` and `optlen` are NULL or writable, `*optlen` bytes of `optval`.
unsafe fn put_opt(optval: *mut c_void, optlen: *mut socklen_t, v: &[u8]) -> Result<(), Errno> {
    if optval.is_null() || optlen.is_null() {
        return Err(Errno::FAULT);
    }
    // SAFETY: the caller's length.
    let room = unsafe { *optlen } as usize;
    let n = room.min(v.len());
    // SAFETY: `n <= *optlen` writable bytes; `optlen` writable.
    unsafe {
        std::ptr::copy_nonoverlapping(v.as_ptr(), optval as *mut u8, n);
        *optlen = n as socklen_t;
    }
    Ok(())
}

/// One bit per option number (options above 63 are not kept).
fn bit(optname: c_int) -> u64 {
    u32::try_from(optname).ok().and_then(|n| 1u64.checked_shl(n)).unwrap_or(0)
}

fn set_bit(opts: &mut u64, optname: c_int, on: bool) {
    if on {
        *opts |= bit(optname);
    } else {
        *opts &= !bit(optname);
    }
}

/// The keepalive time Linux's TCP would use (`tcp_keepalive_time`), as rsockets takes it.
fn default_keepalive_time() -> u32 {
    std::fs::read_to_string("/proc/sys/net/ipv4/tcp_keepalive_time")
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(7200)
}

ibv_export! { "RDMACM_1.0";
    /// A new stream rsocket (AF_INET or AF_INET6; SOCK_NONBLOCK and
    /// SOCK_CLOEXEC taken); its number is its event channel's descriptor.
    /// SOCK_DGRAM is EPROTONOSUPPORT (UD rsockets are not implemented).
    fn rsocket(domain: c_int, type_: c_int, protocol: c_int) -> c_int {
        call("rsocket", || {
            if !matches!(domain, libc::AF_INET | libc::AF_INET6) {
                return Err(Errno(libc::EAFNOSUPPORT));
            }
            let kind = type_ & !(libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC);
            if kind != libc::SOCK_STREAM || (protocol != 0 && protocol != libc::IPPROTO_TCP) {
                return Err(Errno(libc::EPROTONOSUPPORT));
            }
            // The contexts librdmacm's calls share (rdmacm.rs does the same).
            softroce::rdma_cm::set_context_opener(Box::new(crate::device::open_for_info));
            if softroce::devices().map_or(true, |d| d.is_empty()) {
                return Err(Errno(libc::ENODEV));
            }
            let ch = EventChannel::new()?;
            let id = CmId::new(&ch, PortSpace::Tcp);
            let mut opts = Options::new();
            if type_ & libc::SOCK_NONBLOCK != 0 {
                opts.fs_flags |= libc::O_NONBLOCK;
            }
            if type_ & libc::SOCK_CLOEXEC != 0 {
                opts.fd_flags |= libc::FD_CLOEXEC;
            }
            opts.keepalive_time = default_keepalive_time();
            let s = Arc::new(Socket::new(domain, ch, id, opts));
            let fd = s.fd;
            softroce_rsocket::insert(s);
            Ok(fd)
        })
    }
}

/// The socket and the address of a bind or connect, the family checked
/// against the socket's.
///
/// # Safety
/// `addr` is NULL or `len` readable bytes.
unsafe fn socket_and_addr(
    socket: c_int,
    addr: *const libc::sockaddr,
    len: socklen_t,
) -> Result<(Arc<Socket>, SocketAddr), Errno> {
    let s = lookup(socket)?;
    // SAFETY: per the contract.
    let a = unsafe { read_sockaddr(addr, len) }?;
    let domain = s.lock().domain;
    if (domain == libc::AF_INET) != a.is_ipv4() {
        return Err(Errno(if domain == libc::AF_INET { libc::EAFNOSUPPORT } else { libc::EINVAL }));
    }
    Ok((s, a))
}

ibv_export! { "RDMACM_1.0";
    /// Binds the socket to a local address (port 0: an ephemeral one).
    fn rbind(socket: c_int, addr: *const libc::sockaddr, addrlen: socklen_t) -> c_int {
        call("rbind", || {
            // SAFETY: the caller's address of `addrlen` bytes.
            let (s, a) = unsafe { socket_and_addr(socket, addr, addrlen) }?;
            s.bind(a)?;
            Ok(0)
        })
    }
}

ibv_export! { "RDMACM_1.0";
    /// Listens; connections are accepted in the background until `raccept` takes them.
    fn rlisten(socket: c_int, backlog: c_int) -> c_int {
        let _ = backlog;
        call("rlisten", || {
            lookup(socket)?.listen()?;
            Ok(0)
        })
    }
}

ibv_export! { "RDMACM_1.0";
    /// The next accepted connection's socket (and its peer's address).
    fn raccept(socket: c_int, addr: *mut libc::sockaddr, addrlen: *mut socklen_t) -> c_int {
        call("raccept", || {
            let s = lookup(socket)?;
            let ns = s.accept()?;
            if !addr.is_null() && !addrlen.is_null()
                && let (_, Some(peer)) = ns.addrs()
            {
                // SAFETY: the caller's address buffer of *addrlen bytes.
                unsafe { write_sockaddr(peer, addr, addrlen) }?;
            }
            Ok(ns.fd)
        })
    }
}

ibv_export! { "RDMACM_1.0";
    /// Connects (resolves, sends the REQ with the connection data); a
    /// nonblocking socket returns EINPROGRESS and completes in `rpoll`.
    fn rconnect(socket: c_int, addr: *const libc::sockaddr, addrlen: socklen_t) -> c_int {
        call("rconnect", || {
            // SAFETY: the caller's address of `addrlen` bytes.
            let (s, a) = unsafe { socket_and_addr(socket, addr, addrlen) }?;
            s.connect(a)?;
            Ok(0)
        })
    }
}

ibv_export! { "RDMACM_1.0";
    /// Closes a direction (SHUT_RD, SHUT_WR) or both, telling the peer.
    fn rshutdown(socket: c_int, how: c_int) -> c_int {
        call("rshutdown", || {
            lookup(socket)?.shutdown(how)?;
            Ok(0)
        })
    }
}

ibv_export! { "RDMACM_1.0";
    /// Closes the socket (shut down both ways first if connected), or a
    /// repoll (EBUSY while it has entries, as librdmacm 65's).
    fn rclose(socket: c_int) -> c_int {
        call("rclose", || {
            if let Some(r) = softroce_rsocket::repoll::close(socket) {
                return r.map(|()| 0);
            }
            let s = match softroce_rsocket::remove(socket) {
                Some(s) => s,
                None => return Err(lookup(socket).err().unwrap_or(Errno::BADF)),
            };
            s.close();
            Ok(0)
        })
    }
}

/// `rrecv` and the calls built on it.
fn recv_into(socket: c_int, bufs: &mut [&mut [u8]], flags: c_int) -> Result<isize, Errno> {
    let s = lookup(socket)?;
    Ok(s.recv(bufs, flags)? as isize)
}

ibv_export! { "RDMACM_1.0";
    /// Receives up to `len` bytes (MSG_DONTWAIT, MSG_PEEK, MSG_WAITALL); 0 at the stream's end.
    fn rrecv(socket: c_int, buf: *mut c_void, len: usize, flags: c_int) -> ssize_t {
        call("rrecv", || {
            // SAFETY: the caller's buffer of `len` bytes.
            let b = unsafe { bytes_mut(buf, len) }?;
            recv_into(socket, &mut [b], flags)
        })
    }
}

ibv_export! { "RDMACM_1.0";
    /// `rrecv`, then the peer's address into `src_addr` when given.
    fn rrecvfrom(socket: c_int, buf: *mut c_void, len: usize, flags: c_int, src_addr: *mut libc::sockaddr, addrlen: *mut socklen_t) -> ssize_t {
        call("rrecvfrom", || {
            // SAFETY: the caller's buffer of `len` bytes.
            let b = unsafe { bytes_mut(buf, len) }?;
            let n = recv_into(socket, &mut [b], flags)?;
            if !src_addr.is_null()
                && let (_, Some(peer)) = lookup(socket)?.addrs()
            {
                // SAFETY: the caller's address buffer (addrlen NULL is EFAULT).
                unsafe { write_sockaddr(peer, src_addr, addrlen) }?;
            }
            Ok(n)
        })
    }
}

ibv_export! { "RDMACM_1.0";
    /// Receives into every iovec of `msg` (no control data: ENOTSUP).
    fn rrecvmsg(socket: c_int, msg: *mut libc::msghdr, flags: c_int) -> ssize_t {
        call("rrecvmsg", || {
            if msg.is_null() {
                return Err(Errno::FAULT);
            }
            // SAFETY: the caller's msghdr, readable and writable.
            let m = unsafe { &mut *msg };
            if !m.msg_control.is_null() && m.msg_controllen > 0 {
                return Err(Errno(libc::ENOTSUP));
            }
            let cnt = c_int::try_from(m.msg_iovlen).map_err(|_| Errno::INVAL)?;
            // SAFETY: the caller's iovecs and their buffers.
            let mut bufs = unsafe { scatter_parts(iovecs(m.msg_iov, cnt)?) }?;
            let n = recv_into(socket, &mut bufs, flags)?;
            m.msg_flags = 0;
            if !m.msg_name.is_null()
                && let (_, Some(peer)) = lookup(socket)?.addrs()
            {
                // SAFETY: msg_name holds msg_namelen writable bytes.
                unsafe { write_sockaddr(peer, m.msg_name as *mut libc::sockaddr, &mut m.msg_namelen) }?;
            }
            Ok(n)
        })
    }
}

ibv_export! { "RDMACM_1.0";
    /// `rrecv` without flags.
    fn rread(socket: c_int, buf: *mut c_void, count: usize) -> ssize_t {
        call("rread", || {
            // SAFETY: the caller's buffer of `count` bytes.
            let b = unsafe { bytes_mut(buf, count) }?;
            recv_into(socket, &mut [b], 0)
        })
    }
}

ibv_export! { "RDMACM_1.0";
    /// Reads into every iovec.
    fn rreadv(socket: c_int, iov: *const libc::iovec, iovcnt: c_int) -> ssize_t {
        call("rreadv", || {
            // SAFETY: the caller's iovecs and their buffers.
            let mut bufs = unsafe { scatter_parts(iovecs(iov, iovcnt)?) }?;
            recv_into(socket, &mut bufs, 0)
        })
    }
}

/// `rsend` and the calls built on it.
fn send_from(socket: c_int, parts: &[&[u8]], flags: c_int) -> Result<isize, Errno> {
    let s = lookup(socket)?;
    Ok(s.send(Gather::new(parts), flags)? as isize)
}

ibv_export! { "RDMACM_1.0";
    /// Sends `len` bytes (fewer when nonblocking: what fitted).
    fn rsend(socket: c_int, buf: *const c_void, len: usize, flags: c_int) -> ssize_t {
        call("rsend", || {
            // SAFETY: the caller's buffer of `len` bytes.
            let b = unsafe { bytes(buf, len) }?;
            send_from(socket, &[b], flags)
        })
    }
}

ibv_export! { "RDMACM_1.0";
    /// `rsend`: a stream socket's destination is ignored, as Linux's TCP
    /// ignores `sendto`'s (rdma-core's rsockets fail it with EISCONN, which
    /// stops `sockperf --tcp` under the preload).
    fn rsendto(socket: c_int, buf: *const c_void, len: usize, flags: c_int, dest_addr: *const libc::sockaddr, addrlen: socklen_t) -> ssize_t {
        let _ = (dest_addr, addrlen);
        call("rsendto", || {
            lookup(socket)?;
            // SAFETY: the caller's buffer of `len` bytes.
            let b = unsafe { bytes(buf, len) }?;
            send_from(socket, &[b], flags)
        })
    }
}

ibv_export! { "RDMACM_1.0";
    /// Sends every iovec of `msg` (no control data; `msg_name` ignored).
    fn rsendmsg(socket: c_int, msg: *const libc::msghdr, flags: c_int) -> ssize_t {
        call("rsendmsg", || {
            if msg.is_null() {
                return Err(Errno::FAULT);
            }
            // SAFETY: the caller's msghdr, readable.
            let m = unsafe { &*msg };
            if !m.msg_control.is_null() && m.msg_controllen > 0 {
                return Err(Errno(libc::ENOTSUP));
            }
            // A destination is ignored, as by Linux's TCP (see `rsendto`).
            let cnt = c_int::try_from(m.msg_iovlen).map_err(|_| Errno::INVAL)?;
            // SAFETY: the caller's iovecs and their buffers.
            let parts = unsafe { gather_parts(iovecs(m.msg_iov, cnt)?) }?;
            send_from(socket, &parts, flags)
        })
    }
}

ibv_export! { "RDMACM_1.0";
    /// `rsend` without flags.
    fn rwrite(socket: c_int, buf: *const c_void, count: usize) -> ssize_t {
        call("rwrite", || {
            // SAFETY: the caller's buffer of `count` bytes.
            let b = unsafe { bytes(buf, count) }?;
            send_from(socket, &[b], 0)
        })
    }
}

ibv_export! { "RDMACM_1.0";
    /// Sends every iovec.
    fn rwritev(socket: c_int, iov: *const libc::iovec, iovcnt: c_int) -> ssize_t {
        call("rwritev", || {
            // SAFETY: the caller's iovecs and their buffers.
            let parts = unsafe { gather_parts(iovecs(iov, iovcnt)?) }?;
            send_from(socket, &parts, 0)
        })
    }
}

ibv_export! { "RDMACM_1.0";
    /// `poll` over rsockets and ordinary descriptors together.
    fn rpoll(fds: *mut libc::pollfd, nfds: libc::nfds_t, timeout: c_int) -> c_int {
        call("rpoll", || {
            let n = usize::try_from(nfds).map_err(|_| Errno::INVAL)?;
            if n > 1 << 20 {
                return Err(Errno::INVAL);
            }
            let fds: &mut [libc::pollfd] = if n == 0 {
                &mut []
            } else if fds.is_null() {
                return Err(Errno::FAULT);
            } else {
                // SAFETY: the caller's array of `nfds` pollfds.
                unsafe { std::slice::from_raw_parts_mut(fds, n) }
            };
            Ok(softroce_rsocket::rpoll(fds, timeout)? as c_int)
        })
    }
}

ibv_export! { "RDMACM_1.0";
    /// `select` over rsockets and ordinary descriptors (through `rpoll`).
    fn rselect(nfds: c_int, readfds: *mut libc::fd_set, writefds: *mut libc::fd_set, exceptfds: *mut libc::fd_set, timeout: *mut libc::timeval) -> c_int {
        call("rselect", || {
            if !(0..=libc::FD_SETSIZE as c_int).contains(&nfds) {
                return Err(Errno::INVAL);
            }
            let ms = if timeout.is_null() {
                -1
            } else {
                // SAFETY: the caller's timeval.
                let t = unsafe { *timeout };
                if t.tv_sec < 0 || t.tv_usec < 0 {
                    return Err(Errno::INVAL);
                }
                (t.tv_sec.saturating_mul(1000).saturating_add(t.tv_usec / 1000)).min(i64::from(c_int::MAX)) as c_int
            };
            // SAFETY: FD_ISSET on the caller's sets (NULL sets are skipped), fd < FD_SETSIZE.
            let isset = |set: *mut libc::fd_set, fd: c_int| !set.is_null() && unsafe { libc::FD_ISSET(fd, set) };
            let mut fds = Vec::new();
            let mut sets = Vec::new();
            for fd in 0..nfds {
                let (r, w, x) = (isset(readfds, fd), isset(writefds, fd), isset(exceptfds, fd));
                if r || w || x {
                    let events = if r { libc::POLLIN } else { 0 } | if w { libc::POLLOUT } else { 0 };
                    fds.push(softroce_rsocket::pollfd(fd, events));
                    sets.push((r, w, x));
                }
            }
            let n = softroce_rsocket::rpoll(&mut fds, ms)?;
            if fds.iter().any(|p| p.revents & libc::POLLNVAL != 0) {
                return Err(Errno::BADF);
            }
            for set in [readfds, writefds, exceptfds] {
                if !set.is_null() {
                    // SAFETY: the caller's set.
                    unsafe { libc::FD_ZERO(set) };
                }
            }
            let mut count = 0;
            if n > 0 {
                for (p, &(r, w, x)) in fds.iter().zip(&sets) {
                    let mark = |on: bool, set: *mut libc::fd_set, count: &mut c_int| {
                        if on {
                            // SAFETY: the caller's set (non-NULL since the fd was in it), fd < FD_SETSIZE.
                            unsafe { libc::FD_SET(p.fd, set) };
                            *count += 1;
                        }
                    };
                    mark(r && p.revents & (libc::POLLIN | libc::POLLHUP | libc::POLLERR) != 0, readfds, &mut count);
                    mark(w && p.revents & (libc::POLLOUT | libc::POLLERR) != 0, writefds, &mut count);
                    mark(x && p.revents & !(libc::POLLIN | libc::POLLOUT) != 0, exceptfds, &mut count);
                }
            }
            Ok(count)
        })
    }
}

ibv_export! { "RDMACM_1.0";
    /// The peer's address (ENOTCONN before a connection).
    fn rgetpeername(socket: c_int, addr: *mut libc::sockaddr, addrlen: *mut socklen_t) -> c_int {
        call("rgetpeername", || {
            let (_, peer) = lookup(socket)?.addrs();
            let peer = peer.ok_or(Errno::NOTCONN)?;
            // SAFETY: the caller's address buffer of *addrlen bytes.
            unsafe { write_sockaddr(peer, addr, addrlen) }?;
            Ok(0)
        })
    }
}

ibv_export! { "RDMACM_1.0";
    /// The local address (the any-address and port 0 before a bind).
    fn rgetsockname(socket: c_int, addr: *mut libc::sockaddr, addrlen: *mut socklen_t) -> c_int {
        call("rgetsockname", || {
            let s = lookup(socket)?;
            let (local, _) = s.addrs();
            let any = if s.lock().domain == libc::AF_INET6 {
                SocketAddr::new(Ipv6Addr::UNSPECIFIED.into(), 0)
            } else {
                SocketAddr::new(Ipv4Addr::UNSPECIFIED.into(), 0)
            };
            // SAFETY: the caller's address buffer of *addrlen bytes.
            unsafe { write_sockaddr(local.unwrap_or(any), addr, addrlen) }?;
            Ok(0)
        })
    }
}

ibv_export! { "RDMACM_1.0";
    /// Sets an option (rsocket(7)'s list; unknown ones: ENOTSUP).
    fn rsetsockopt(socket: c_int, level: c_int, optname: c_int, optval: *const c_void, optlen: socklen_t) -> c_int {
        call("rsetsockopt", || {
            let s = lookup(socket)?;
            // SAFETY: the caller's option value of `optlen` bytes (SO_LINGER: a struct linger).
            let int = || unsafe { int_opt(optval, optlen) };
            let mut g = s.lock();
            match (level, optname) {
                (libc::SOL_SOCKET, libc::SO_REUSEADDR | libc::SO_OOBINLINE) => {
                    let on = int()? != 0;
                    set_bit(&mut g.opts.so_opts, optname, on);
                }
                (libc::SOL_SOCKET, libc::SO_RCVBUF | libc::SO_SNDBUF) => {
                    // rsockets doubles the value, as Linux does; once the
                    // buffers exist the value is kept but changes nothing.
                    let v = (int()?.max(0) as u32).saturating_mul(2).min(1 << 30);
                    if !g.has_buffers() {
                        if optname == libc::SO_RCVBUF {
                            g.opts.sizes.rbuf = v.max(2 * SNDLOWAT);
                        } else {
                            g.opts.sizes.sbuf = if v < SNDLOWAT { 2 * SNDLOWAT } else { v };
                        }
                    }
                }
                (libc::SOL_SOCKET, libc::SO_LINGER) => {
                    if optval.is_null() {
                        return Err(Errno::FAULT);
                    }
                    if (optlen as usize) < size_of::<libc::linger>() {
                        return Err(Errno::INVAL);
                    }
                    // SAFETY: a struct linger is readable (checked).
                    let l = unsafe { std::ptr::read_unaligned(optval as *const libc::linger) };
                    // Kept inverted, as rsockets keeps it (0: lingering, the default).
                    set_bit(&mut g.opts.so_opts, optname, l.l_onoff == 0);
                }
                (libc::SOL_SOCKET, libc::SO_KEEPALIVE) => {
                    let on = int()? != 0;
                    g.opts.keepalive = on;
                    set_bit(&mut g.opts.so_opts, optname, on);
                }
                (libc::IPPROTO_IP, libc::IP_TOS) => {
                    let v = int()?;
                    g.opts.tos = v;
                    g.id.set_tos(v as u8);
                }
                (libc::IPPROTO_TCP, libc::TCP_KEEPCNT | libc::TCP_KEEPINTVL | libc::TCP_MAXSEG | libc::TCP_CONGESTION) => {}
                (libc::IPPROTO_TCP, libc::TCP_KEEPIDLE) => {
                    let v = int()?;
                    if v <= 0 {
                        return Err(Errno::INVAL);
                    }
                    g.opts.keepalive_time = v as u32;
                }
                (libc::IPPROTO_TCP, libc::TCP_NODELAY) => {
                    let on = int()? != 0;
                    set_bit(&mut g.opts.tcp_opts, optname, on);
                }
                (libc::IPPROTO_IPV6, libc::IPV6_V6ONLY) => {
                    let on = int()? != 0;
                    set_bit(&mut g.opts.ipv6_opts, optname, on);
                }
                (SOL_RDMA, RDMA_SQSIZE | RDMA_RQSIZE | RDMA_INLINE | RDMA_IOMAPSIZE) => {
                    if !g.state.before_connect() {
                        return Err(Errno::INVAL);
                    }
                    let v = int()?.max(0) as u32;
                    let clamped = v.min(u32::from(QP_MAX)) as u16;
                    match optname {
                        RDMA_SQSIZE => g.opts.sizes.sq = clamped,
                        RDMA_RQSIZE => g.opts.sizes.rq = clamped,
                        RDMA_INLINE => g.opts.sizes.inline = clamped,
                        _ => g.opts.sizes.iomap = round_iomap_size(v),
                    }
                }
                (SOL_RDMA, RDMA_ROUTE) => return Err(Errno(libc::ENOTSUP)),
                _ => return Err(Errno(libc::ENOTSUP)),
            }
            Ok(0)
        })
    }
}

ibv_export! { "RDMACM_1.0";
    /// Reads an option (SO_ERROR clears the pending error).
    fn rgetsockopt(socket: c_int, level: c_int, optname: c_int, optval: *mut c_void, optlen: *mut socklen_t) -> c_int {
        call("rgetsockopt", || {
            let s = lookup(socket)?;
            let mut g = s.lock();
            let on = |opts: u64| c_int::from(opts & bit(optname) != 0);
            let int: c_int = match (level, optname) {
                (libc::SOL_SOCKET, libc::SO_REUSEADDR | libc::SO_KEEPALIVE | libc::SO_OOBINLINE) => on(g.opts.so_opts),
                (libc::SOL_SOCKET, libc::SO_RCVBUF) => g.sizes().rbuf as c_int,
                (libc::SOL_SOCKET, libc::SO_SNDBUF) => g.sizes().sbuf as c_int,
                (libc::SOL_SOCKET, libc::SO_ERROR) => std::mem::take(&mut g.err),
                (libc::SOL_SOCKET, libc::SO_BROADCAST) => 0,
                (libc::SOL_SOCKET, libc::SO_LINGER) => {
                    // struct linger: l_onoff, then l_linger (0), two ints.
                    let mut b = [0u8; size_of::<libc::linger>()];
                    b[..4].copy_from_slice(&(1 - on(g.opts.so_opts)).to_ne_bytes());
                    // SAFETY: the caller's option buffer.
                    unsafe { put_opt(optval, optlen, &b) }?;
                    return Ok(0);
                }
                (libc::IPPROTO_IP, libc::IP_TOS) => g.opts.tos,
                (libc::IPPROTO_TCP, libc::TCP_CONGESTION | libc::TCP_KEEPCNT | libc::TCP_KEEPINTVL) => 1,
                (libc::IPPROTO_TCP, libc::TCP_KEEPIDLE) => g.opts.keepalive_time as c_int,
                (libc::IPPROTO_TCP, libc::TCP_NODELAY) => on(g.opts.tcp_opts),
                (libc::IPPROTO_TCP, libc::TCP_MAXSEG) => g.mtu() as c_int,
                (libc::IPPROTO_TCP, libc::TCP_INFO) => {
                    // SAFETY: tcp_info is plain integers: all-zero is valid.
                    let mut t: libc::tcp_info = unsafe { std::mem::zeroed() };
                    t.tcpi_state = if g.state.connected() { TCP_ESTABLISHED } else { TCP_CLOSE };
                    t.tcpi_snd_cwnd = u32::from(g.sizes().sq);
                    // SAFETY: the struct's bytes (no padding is read as anything but bytes).
                    let b = unsafe {
                        std::slice::from_raw_parts(&t as *const libc::tcp_info as *const u8, size_of::<libc::tcp_info>())
                    };
                    // SAFETY: the caller's option buffer.
                    unsafe { put_opt(optval, optlen, b) }?;
                    return Ok(0);
                }
                (libc::IPPROTO_IPV6, libc::IPV6_V6ONLY) => on(g.opts.ipv6_opts),
                (SOL_RDMA, RDMA_SQSIZE) => c_int::from(g.sizes().sq),
                (SOL_RDMA, RDMA_RQSIZE) => c_int::from(g.sizes().rq),
                (SOL_RDMA, RDMA_INLINE) => c_int::from(g.sizes().inline),
                (SOL_RDMA, RDMA_IOMAPSIZE) => c_int::from(g.sizes().iomap),
                _ => return Err(Errno(libc::ENOTSUP)),
            };
            if optval.is_null() || optlen.is_null() {
                return Err(Errno::FAULT);
            }
            // SAFETY: the caller's length, readable (not NULL).
            if unsafe { *optlen } < size_of::<c_int>() as socklen_t {
                return Err(Errno::INVAL);
            }
            // SAFETY: the caller's option buffer of *optlen (>= 4) bytes.
            unsafe { put_opt(optval, optlen, &int.to_ne_bytes()) }?;
            Ok(0)
        })
    }
}

ibv_export! { "RDMACM_1.0";
    /// F_GETFL / F_SETFL (O_NONBLOCK) and F_GETFD / F_SETFD; other commands ENOTSUP.
    /// C declares it variadic; its one optional argument is an int, which
    /// the x86-64 and AArch64 Linux calling conventions pass in the third
    /// argument register, as for a fixed third parameter.
    fn rfcntl(socket: c_int, cmd: c_int, arg: c_long) -> c_int {
        call("rfcntl", || {
            let s = lookup(socket)?;
            let mut g = s.lock();
            match cmd {
                libc::F_GETFL => Ok(g.opts.fs_flags),
                libc::F_SETFL => {
                    g.opts.fs_flags = arg as c_int;
                    Ok(0)
                }
                libc::F_GETFD => Ok(g.opts.fd_flags),
                libc::F_SETFD => {
                    g.opts.fd_flags = arg as c_int;
                    Ok(0)
                }
                _ => Err(Errno(libc::ENOTSUP)),
            }
        })
    }
}

ibv_export! { "RDMACM_1.0";
    /// Registers `len` bytes at `buf` with the connection: PROT_WRITE maps
    /// them for the peer's riowrite at `offset` (-1: `buf`'s address),
    /// announced before the next send; PROT_NONE registers them locally.
    /// The buffer must stay valid until `riounmap` or `rclose`.
    fn riomap(socket: c_int, buf: *mut c_void, len: usize, prot: c_int, flags: c_int, offset: libc::off_t) -> libc::off_t {
        let _ = flags;
        call("riomap", || {
            let s = lookup(socket)?;
            if buf.is_null() || len == 0 || len > isize::MAX as usize || prot & !libc::PROT_WRITE != 0 || offset < -1 {
                return Err(Errno::INVAL);
            }
            s.iomap(buf as usize, prot & libc::PROT_WRITE != 0, offset, |pd, access| {
                // SAFETY: rsocket(7)'s contract: the caller keeps the buffer
                // valid until riounmap or rclose, which deregister it (waiting
                // for the device) before returning.
                unsafe { pd.reg_mr_raw(buf as *mut u8, len, access) }
            })
        })
    }
}

ibv_export! { "RDMACM_1.0";
    /// Removes the mapping of exactly `buf`, `len`.
    fn riounmap(socket: c_int, buf: *mut c_void, len: usize) -> c_int {
        call("riounmap", || {
            lookup(socket)?.iounmap(buf as usize, len)?;
            Ok(0)
        })
    }
}

ibv_export! { "RDMACM_1.0";
    /// Writes `count` bytes into the peer's mapping of `offset` (RDMA
    /// WRITE, ordered with the stream); stops where no mapping covers.
    fn riowrite(socket: c_int, buf: *const c_void, count: usize, offset: libc::off_t, flags: c_int) -> usize {
        call("riowrite", || {
            let s = lookup(socket)?;
            if offset < 0 {
                return Err(Errno::INVAL);
            }
            // SAFETY: the caller's buffer of `count` bytes.
            let b = unsafe { bytes(buf, count) }?;
            s.iowrite(b, offset as u64, flags)
        })
    }
}
