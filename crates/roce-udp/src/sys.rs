//! The crate's only `unsafe` code: socket options, `recvmmsg`/`sendmmsg`
//! with their control messages, `poll` and `eventfd`.
//!
//! Everything the kernel fills in (socket addresses, control messages) is
//! read back from plain byte buffers with safe code; `unsafe` is limited to
//! the system calls themselves and the few writes that lay C structures out.
#![allow(unsafe_code)]

use std::io;
use std::mem::size_of;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, SocketAddrV6};
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::ptr;

use libc::{c_int, c_uint, c_void};

/// `SO_SNDBUFFORCE` (asm-generic): like `SO_SNDBUF`, beyond `wmem_max`, needs CAP_NET_ADMIN.
pub(crate) const SO_SNDBUFFORCE: c_int = 32;
/// `SO_RCVBUFFORCE` (asm-generic): like `SO_RCVBUF`, beyond `rmem_max`, needs CAP_NET_ADMIN.
pub(crate) const SO_RCVBUFFORCE: c_int = 33;
/// `SOL_UDP`, the level of `UDP_GRO` and `UDP_SEGMENT`.
pub(crate) const SOL_UDP: c_int = libc::IPPROTO_UDP;
/// `UDP_SEGMENT` (since Linux 4.18): the GSO segment size of a send.
pub(crate) const UDP_SEGMENT: c_int = 103;
/// `UDP_GRO` (since Linux 5.0): deliver coalesced datagrams with their segment size.
pub(crate) const UDP_GRO: c_int = 104;

/// Most messages one `recvmmsg`/`sendmmsg` call takes (the kernel's `UIO_MAXIOV`).
const MAX_MMSG: usize = 1024;
/// Control-message space per message: room for IPv6 packet info (20 bytes)
/// and a GRO segment size (4 bytes) with their headers, with spare.
const CTRL_LEN: usize = 128;
/// Bytes of a `sockaddr_storage`.
const NAME_LEN: usize = size_of::<libc::sockaddr_storage>();
/// `CMSG_ALIGN`: Linux aligns control messages to `sizeof(long)`.
const CMSG_ALIGN: usize = size_of::<usize>();
/// `sizeof(struct cmsghdr)`: `size_t cmsg_len; int cmsg_level; int cmsg_type`, aligned.
const CMSG_HDR: usize = (size_of::<usize>() + 8).next_multiple_of(CMSG_ALIGN);

/// A control-message buffer, aligned like `struct cmsghdr`.
#[derive(Clone, Copy)]
#[repr(C, align(8))]
struct Ctrl([u8; CTRL_LEN]);

/// A socket-address buffer, aligned like `struct sockaddr_storage`.
#[derive(Clone, Copy)]
#[repr(C, align(8))]
struct Name([u8; NAME_LEN]);

fn cvt(rc: c_int) -> io::Result<c_int> {
    if rc < 0 { Err(io::Error::last_os_error()) } else { Ok(rc) }
}

/// One classic BPF instruction (`struct sock_filter`).
pub type SockFilter = libc::sock_filter;

/// `SO_ATTACH_REUSEPORT_CBPF` (asm-generic): a classic BPF program picks the member of a reuseport group.
const SO_ATTACH_REUSEPORT_CBPF: c_int = 51;

/// `setsockopt(fd, SOL_SOCKET, SO_ATTACH_REUSEPORT_CBPF, &prog, sizeof prog)`.
pub(crate) fn attach_reuseport_cbpf(fd: BorrowedFd<'_>, program: &[SockFilter]) -> io::Result<()> {
    let len = u16::try_from(program.len()).map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))?;
    let prog = libc::sock_fprog { len, filter: program.as_ptr().cast_mut() };
    // SAFETY: `prog` points at `len` initialized instructions that live
    // across the call; the kernel copies (and verifies) them and keeps no
    // pointer into them.
    cvt(unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            libc::SOL_SOCKET,
            SO_ATTACH_REUSEPORT_CBPF,
            ptr::from_ref(&prog).cast::<c_void>(),
            size_of::<libc::sock_fprog>() as libc::socklen_t,
        )
    })
    .map(|_| ())
}

/// `setsockopt(fd, level, name, &value, sizeof(int))`.
pub(crate) fn set_int(fd: BorrowedFd<'_>, level: c_int, name: c_int, value: c_int) -> io::Result<()> {
    // SAFETY: `fd` is open for the borrow; the option points to a live c_int
    // whose exact size is passed, and the kernel only reads it.
    let rc = unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            level,
            name,
            (&raw const value).cast::<c_void>(),
            size_of::<c_int>() as libc::socklen_t,
        )
    };
    cvt(rc).map(drop)
}

/// `getsockopt(fd, level, name)` of an `int` option.
pub(crate) fn get_int(fd: BorrowedFd<'_>, level: c_int, name: c_int) -> io::Result<c_int> {
    let mut value: c_int = 0;
    let mut len = size_of::<c_int>() as libc::socklen_t;
    // SAFETY: `fd` is open for the borrow; `value` and `len` are live locals and
    // `len` tells the kernel it may write at most `sizeof(int)` bytes.
    let rc = unsafe { libc::getsockopt(fd.as_raw_fd(), level, name, (&raw mut value).cast::<c_void>(), &mut len) };
    cvt(rc).map(|_| value)
}

/// `SO_NETNS_COOKIE` (Linux 5.14): the network namespace's cookie.
const SO_NETNS_COOKIE: c_int = 71;

/// `getsockopt(fd, SOL_SOCKET, SO_NETNS_COOKIE)`: the 64-bit cookie of the
/// socket's network namespace.
pub(crate) fn netns_cookie(fd: BorrowedFd<'_>) -> io::Result<u64> {
    let mut value: u64 = 0;
    let mut len = size_of::<u64>() as libc::socklen_t;
    // SAFETY: `fd` is open for the borrow; `value` and `len` are live locals and
    // `len` tells the kernel it may write at most `sizeof(u64)` bytes.
    let rc = unsafe {
        libc::getsockopt(fd.as_raw_fd(), libc::SOL_SOCKET, SO_NETNS_COOKIE, (&raw mut value).cast::<c_void>(), &mut len)
    };
    cvt(rc).map(|_| value)
}

/// Writes `addr` as a C socket address into `out`; returns its length.
fn write_name(addr: &SocketAddr, out: &mut Name) -> libc::socklen_t {
    let b = &mut out.0;
    b.fill(0);
    match addr {
        SocketAddr::V4(a) => {
            b[0..2].copy_from_slice(&(libc::AF_INET as u16).to_ne_bytes());
            b[2..4].copy_from_slice(&a.port().to_be_bytes());
            b[4..8].copy_from_slice(&a.ip().octets());
            size_of::<libc::sockaddr_in>() as libc::socklen_t
        }
        SocketAddr::V6(a) => {
            b[0..2].copy_from_slice(&(libc::AF_INET6 as u16).to_ne_bytes());
            b[2..4].copy_from_slice(&a.port().to_be_bytes());
            b[4..8].copy_from_slice(&a.flowinfo().to_be_bytes());
            b[8..24].copy_from_slice(&a.ip().octets());
            b[24..28].copy_from_slice(&a.scope_id().to_ne_bytes());
            size_of::<libc::sockaddr_in6>() as libc::socklen_t
        }
    }
}

/// Reads a C socket address the kernel wrote (`sockaddr_in` or `sockaddr_in6`).
/// A name shorter than a family and a port (none at all: the kernel writes
/// none for the empty read of a socket shut down) is `None`.
fn read_name(b: &[u8]) -> Option<SocketAddr> {
    let [f0, f1, p0, p1, ..] = *b else { return None };
    let family = c_int::from(u16::from_ne_bytes([f0, f1]));
    let port = u16::from_be_bytes([p0, p1]);
    if family == libc::AF_INET && b.len() >= size_of::<libc::sockaddr_in>() {
        let ip = Ipv4Addr::new(b[4], b[5], b[6], b[7]);
        Some(SocketAddr::V4(SocketAddrV4::new(ip, port)))
    } else if family == libc::AF_INET6 && b.len() >= size_of::<libc::sockaddr_in6>() {
        let flow = u32::from_be_bytes(b[4..8].try_into().ok()?);
        let ip = Ipv6Addr::from(<[u8; 16]>::try_from(&b[8..24]).ok()?);
        let scope = u32::from_ne_bytes(b[24..28].try_into().ok()?);
        Some(SocketAddr::V6(SocketAddrV6::new(ip, port, flow, scope)))
    } else {
        None
    }
}

/// What one received message carried.
#[derive(Clone, Copy, Debug)]
pub(crate) struct RecvMeta {
    /// Sender address and port.
    pub(crate) src: Option<SocketAddr>,
    /// Destination address from `IP_PKTINFO` / `IPV6_PKTINFO`.
    pub(crate) dst: Option<IpAddr>,
    /// Bytes received into the slot.
    pub(crate) len: usize,
    /// GRO segment size, when the kernel coalesced several datagrams.
    pub(crate) segment: Option<usize>,
    /// The datagram did not fit the slot (`MSG_TRUNC`).
    pub(crate) truncated: bool,
    /// The control messages did not fit (`MSG_CTRUNC`): the segment size may be missing.
    pub(crate) ctrl_truncated: bool,
    /// The TOS / traffic-class byte from `IP_TOS` / `IPV6_TCLASS` (0 when
    /// the kernel gave none).
    pub(crate) tos: u8,
}

/// Reusable `recvmmsg` headers. Holds raw pointers only while a call runs.
pub(crate) struct RecvScratch {
    hdrs: Vec<libc::mmsghdr>,
    iovs: Vec<libc::iovec>,
    names: Vec<Name>,
    ctrl: Vec<Ctrl>,
    /// (buffer address, slot, message count) the headers were last set up
    /// for: a call with the same ones only resets what the kernel wrote.
    prepared: Option<(usize, usize, usize)>,
    /// Headers the kernel wrote in the last call (its result).
    dirty: usize,
}

// SAFETY: the raw pointers in `hdrs` and `iovs` are written at the start of
// `recv_mmsg` and used only by the system call inside it, while everything
// they point to is borrowed; no other code reads them, so moving the scratch
// to another thread cannot create a data race.
unsafe impl Send for RecvScratch {}

/// An all-zero `mmsghdr`.
fn zero_mmsghdr() -> libc::mmsghdr {
    // SAFETY: `mmsghdr` is a C struct of integers and raw pointers, for which
    // all-zero bits (null pointers, zero lengths) are a valid value.
    unsafe { std::mem::zeroed() }
}

/// An empty `iovec`.
fn zero_iovec() -> libc::iovec {
    libc::iovec { iov_base: ptr::null_mut(), iov_len: 0 }
}

impl RecvScratch {
    /// Scratch for up to `n` messages per call.
    pub(crate) fn new(n: usize) -> RecvScratch {
        let n = n.clamp(1, MAX_MMSG);
        RecvScratch {
            hdrs: vec![zero_mmsghdr(); n],
            iovs: vec![zero_iovec(); n],
            names: vec![Name([0; NAME_LEN]); n],
            ctrl: vec![Ctrl([0; CTRL_LEN]); n],
            prepared: None,
            dirty: 0,
        }
    }
}

/// How [`recv_mmsg`] treats an empty socket.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum RecvMode {
    /// Return at once (`MSG_DONTWAIT`).
    NoWait,
    /// Sleep until a datagram arrives or the socket's `SO_RCVTIMEO` passes,
    /// and return that datagram alone (a signal ends the sleep early).
    /// Taking what else waits (`MSG_WAITFORONE`) would make the kernel look
    /// at the queue again at once: in a ping-pong that finds nothing, or an
    /// ACK that then delays the reply.
    WaitForOne,
}

/// Receives up to `buf.len() / slot` datagrams, datagram `i` into
/// `buf[i * slot..][..slot]`, and describes them in `out` (cleared first).
/// Returns how many arrived: 0 when none was waiting (or, waiting, none
/// came in time).
pub(crate) fn recv_mmsg(
    fd: BorrowedFd<'_>,
    s: &mut RecvScratch,
    buf: &mut [u8],
    slot: usize,
    out: &mut Vec<RecvMeta>,
    mode: RecvMode,
) -> io::Result<usize> {
    out.clear();
    let n = s.hdrs.len().min(buf.len() / slot.max(1));
    if n == 0 {
        return Ok(0);
    }
    let base = buf.as_mut_ptr();
    let key = (base as usize, slot, n);
    if s.prepared == Some(key) {
        // The kernel writes back only the lengths and flags of the messages
        // it filled; the pointers and iovecs are as set up before.
        for h in &mut s.hdrs[..s.dirty.min(n)] {
            h.msg_len = 0;
            h.msg_hdr.msg_namelen = NAME_LEN as libc::socklen_t;
            h.msg_hdr.msg_controllen = CTRL_LEN;
            h.msg_hdr.msg_flags = 0;
        }
    } else {
        for (i, iov) in s.iovs[..n].iter_mut().enumerate() {
            *iov = libc::iovec { iov_base: base.wrapping_add(i * slot).cast(), iov_len: slot };
        }
        let (iovs, names, ctrl) = (s.iovs.as_mut_ptr(), s.names.as_mut_ptr(), s.ctrl.as_mut_ptr());
        for (i, h) in s.hdrs[..n].iter_mut().enumerate() {
            h.msg_len = 0;
            h.msg_hdr.msg_name = names.wrapping_add(i).cast();
            h.msg_hdr.msg_namelen = NAME_LEN as libc::socklen_t;
            h.msg_hdr.msg_iov = iovs.wrapping_add(i);
            h.msg_hdr.msg_iovlen = 1;
            h.msg_hdr.msg_control = ctrl.wrapping_add(i).cast();
            h.msg_hdr.msg_controllen = CTRL_LEN;
            h.msg_hdr.msg_flags = 0;
        }
        s.prepared = Some(key);
    }
    s.dirty = 0;
    let (flags, vlen) = match mode {
        RecvMode::NoWait => (libc::MSG_DONTWAIT, n),
        RecvMode::WaitForOne => (0, 1),
    };
    let got = loop {
        // SAFETY: the first `n` headers point at `n` distinct iovecs, names and
        // control buffers of the sizes given, all owned by `s`, and each iovec
        // at its own `slot`-byte window of `buf` (n * slot <= buf.len()); all
        // stay borrowed and unmoved for the duration of the call. Pointers
        // set up by an earlier call are the same values: computed from the
        // same buffer address, slot and count (`prepared`), and from `s`'s
        // vectors, which never grow, so their storage never moves.
        let rc = unsafe { libc::recvmmsg(fd.as_raw_fd(), s.hdrs.as_mut_ptr(), vlen as c_uint, flags, ptr::null_mut()) };
        match cvt(rc) {
            Ok(k) => {
                s.dirty = k as usize;
                break k as usize;
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted && mode == RecvMode::NoWait => continue,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => return Ok(0),
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(0),
            Err(e) => return Err(e),
        }
    };
    for i in 0..got {
        let h = &s.hdrs[i].msg_hdr;
        let (namelen, ctrllen, flags) = (h.msg_namelen as usize, h.msg_controllen, h.msg_flags);
        let len = s.hdrs[i].msg_len as usize;
        let mut meta = RecvMeta {
            src: read_name(&s.names[i].0[..namelen.min(NAME_LEN)]),
            dst: None,
            len: len.min(slot),
            segment: None,
            truncated: flags & libc::MSG_TRUNC != 0,
            ctrl_truncated: flags & libc::MSG_CTRUNC != 0,
            tos: 0,
        };
        parse_cmsgs(&s.ctrl[i].0[..ctrllen.min(CTRL_LEN)], &mut meta);
        out.push(meta);
    }
    Ok(got)
}

/// Reads the packet-info and GRO control messages of one received message.
fn parse_cmsgs(mut c: &[u8], meta: &mut RecvMeta) {
    while c.len() >= CMSG_HDR {
        let len = usize::from_ne_bytes(c[..size_of::<usize>()].try_into().unwrap_or_default());
        let level = c_int::from_ne_bytes(c[size_of::<usize>()..][..4].try_into().unwrap_or_default());
        let ty = c_int::from_ne_bytes(c[size_of::<usize>() + 4..][..4].try_into().unwrap_or_default());
        if len < CMSG_HDR || len > c.len() {
            return;
        }
        let data = &c[CMSG_HDR..len];
        match (level, ty) {
            // struct in_pktinfo { int ipi_ifindex; in_addr ipi_spec_dst; in_addr ipi_addr; }
            (libc::IPPROTO_IP, libc::IP_PKTINFO) if data.len() >= 12 => {
                meta.dst = Some(IpAddr::V4(Ipv4Addr::new(data[8], data[9], data[10], data[11])));
            }
            // struct in6_pktinfo { in6_addr ipi6_addr; int ipi6_ifindex; }
            (libc::IPPROTO_IPV6, libc::IPV6_PKTINFO) if data.len() >= 16 => {
                let a: [u8; 16] = data[..16].try_into().unwrap_or_default();
                meta.dst = Some(IpAddr::V6(Ipv6Addr::from(a)));
            }
            // IP_RECVTOS: one byte; IPV6_RECVTCLASS: an int.
            (libc::IPPROTO_IP, libc::IP_TOS) if !data.is_empty() => meta.tos = data[0],
            (libc::IPPROTO_IPV6, libc::IPV6_TCLASS) if data.len() >= 4 => {
                meta.tos = c_int::from_ne_bytes(data[..4].try_into().unwrap_or_default()) as u8;
            }
            (SOL_UDP, UDP_GRO) if data.len() >= 4 => {
                let size = c_int::from_ne_bytes(data[..4].try_into().unwrap_or_default());
                meta.segment = usize::try_from(size).ok().filter(|&s| s > 0);
            }
            _ => {}
        }
        c = &c[len.next_multiple_of(CMSG_ALIGN).min(c.len())..];
    }
}

/// One message to send: `count` packets from packet `first` on, to `dst`,
/// as one GSO message of `segment`-byte segments when `count > 1`.
#[derive(Clone, Copy, Debug)]
pub(crate) struct OutMsg {
    /// Destination address and port.
    pub(crate) dst: SocketAddr,
    /// The BTH destination QP of its packets: one GSO message carries one
    /// QP's packets, since a receiver that steers by QP (a `SO_REUSEPORT`
    /// group of processes, or GRO) decides once per super-packet.
    pub(crate) flow: u32,
    /// The source it leaves from ([`crate::SendBatch::set_source`]).
    pub(crate) source: u16,
    /// Index of the first packet.
    pub(crate) first: usize,
    /// Number of packets (GSO segments).
    pub(crate) count: usize,
    /// Length of every packet but possibly the last (the GSO segment size).
    pub(crate) segment: usize,
    /// Total bytes of the message.
    pub(crate) bytes: usize,
    /// A shorter packet ended the run: nothing more may join.
    pub(crate) closed: bool,
}

/// Reusable `sendmmsg` headers. Holds raw pointers only while a call runs.
pub(crate) struct SendScratch {
    hdrs: Vec<libc::mmsghdr>,
    iovs: Vec<libc::iovec>,
    /// (first iovec, iovec count) of each message, from the first pass.
    spans: Vec<(usize, usize)>,
    names: Vec<Name>,
    name_lens: Vec<libc::socklen_t>,
    ctrl: Vec<Ctrl>,
}

// SAFETY: as for `RecvScratch`: the raw pointers are written and used only
// inside `send_mmsg`, while what they point to is borrowed, and are never
// dereferenced afterwards.
unsafe impl Send for SendScratch {}

impl SendScratch {
    /// Empty scratch; it grows to the largest batch sent and stays there.
    pub(crate) fn new() -> SendScratch {
        SendScratch {
            hdrs: Vec::new(),
            iovs: Vec::new(),
            spans: Vec::new(),
            names: Vec::new(),
            name_lens: Vec::new(),
            ctrl: Vec::new(),
        }
    }
}

/// The `UDP_SEGMENT` control message: `cmsghdr` + a `u16`, with its padding.
const SEGMENT_CMSG_SPACE: usize = CMSG_HDR + 2usize.next_multiple_of(CMSG_ALIGN);

/// Sends `msgs` (as many as one call takes) with one `sendmmsg`, packet `i`
/// being `parts(i)[0] || parts(i)[1]`. Returns how many messages the kernel
/// accepted, or the error of the first message when it accepted none.
pub(crate) fn send_mmsg<'d>(
    fd: BorrowedFd<'_>,
    s: &mut SendScratch,
    msgs: &[OutMsg],
    parts: impl Fn(usize) -> (&'d [u8], &'d [&'d [u8]], &'d [u8]),
) -> io::Result<usize> {
    let n = msgs.len().min(MAX_MMSG);
    #[cfg(test)]
    let n = match faults::next() {
        Some(faults::Fault::Errno(e)) => return Err(io::Error::from_raw_os_error(e)),
        Some(faults::Fault::Accept(k)) => n.min(k.max(1)),
        None => n,
    };
    if n == 0 {
        return Ok(0);
    }
    if s.hdrs.len() < n {
        s.hdrs.resize(n, zero_mmsghdr());
        s.names.resize(n, Name([0; NAME_LEN]));
        s.name_lens.resize(n, 0);
        s.ctrl.resize(n, Ctrl([0; CTRL_LEN]));
    }
    // First pass: iovecs, names and control messages (safe writes; `iovs`
    // may reallocate here, so no pointer into it is taken yet).
    s.iovs.clear();
    s.spans.clear();
    for (i, m) in msgs[..n].iter().enumerate() {
        let start = s.iovs.len();
        for p in m.first..m.first + m.count {
            let (head, pieces, trailer) = parts(p);
            for part in std::iter::once(head).chain(pieces.iter().copied()).chain(std::iter::once(trailer)) {
                if part.is_empty() {
                    continue;
                }
                // A part that starts where the message's last iovec ends
                // extends it (a trailer and the next header in the arena;
                // whole small packets): fewer iovecs for the kernel to walk.
                let at = part.as_ptr().cast_mut().cast::<c_void>();
                let in_message = s.iovs.len() > start;
                match s.iovs.last_mut() {
                    Some(last) if in_message && last.iov_base.wrapping_byte_add(last.iov_len) == at => {
                        last.iov_len += part.len();
                    }
                    _ => s.iovs.push(libc::iovec { iov_base: at, iov_len: part.len() }),
                }
            }
        }
        s.spans.push((start, s.iovs.len() - start));
        s.name_lens[i] = write_name(&m.dst, &mut s.names[i]);
        if m.count > 1 {
            let c = &mut s.ctrl[i].0;
            c[..SEGMENT_CMSG_SPACE].fill(0);
            c[..size_of::<usize>()].copy_from_slice(&(CMSG_HDR + 2).to_ne_bytes());
            c[size_of::<usize>()..][..4].copy_from_slice(&SOL_UDP.to_ne_bytes());
            c[size_of::<usize>() + 4..][..4].copy_from_slice(&UDP_SEGMENT.to_ne_bytes());
            c[CMSG_HDR..][..2].copy_from_slice(&(m.segment as u16).to_ne_bytes());
        }
    }
    // Second pass: the headers, pointing into the now fixed vectors.
    let (iovs, names, ctrl) = (s.iovs.as_mut_ptr(), s.names.as_mut_ptr(), s.ctrl.as_mut_ptr());
    for (i, h) in s.hdrs[..n].iter_mut().enumerate() {
        let (start, count) = s.spans[i];
        let gso = msgs[i].count > 1;
        h.msg_len = 0;
        h.msg_hdr.msg_name = names.wrapping_add(i).cast();
        h.msg_hdr.msg_namelen = s.name_lens[i];
        h.msg_hdr.msg_iov = iovs.wrapping_add(start);
        h.msg_hdr.msg_iovlen = count;
        h.msg_hdr.msg_control = if gso { ctrl.wrapping_add(i).cast() } else { ptr::null_mut() };
        h.msg_hdr.msg_controllen = if gso { SEGMENT_CMSG_SPACE } else { 0 };
        h.msg_hdr.msg_flags = 0;
    }
    // SAFETY: the first `n` headers point at names, control buffers and iovec
    // ranges owned by `s` (lengths as given, unmoved since the pointers were
    // taken), and every iovec at a slice returned by `parts`, which lives for
    // 'd, beyond this call. The kernel only reads them.
    let rc = unsafe { libc::sendmmsg(fd.as_raw_fd(), s.hdrs.as_mut_ptr(), n as c_uint, libc::MSG_DONTWAIT) };
    // Drop the borrowed pointers so nothing stale outlives the call.
    s.iovs.clear();
    cvt(rc).map(|k| k as usize)
}

/// Scripted `sendmmsg` outcomes for the flush tests (this thread only).
#[cfg(test)]
pub(crate) mod faults {
    use std::cell::RefCell;
    use std::collections::VecDeque;

    /// What the next `send_mmsg` call does instead of a plain send.
    #[derive(Clone, Copy, Debug)]
    pub(crate) enum Fault {
        /// Fail with this errno, sending nothing.
        Errno(i32),
        /// Send at most this many messages (a partial `sendmmsg`).
        Accept(usize),
    }

    thread_local! {
        static QUEUE: RefCell<VecDeque<Fault>> = const { RefCell::new(VecDeque::new()) };
    }

    /// Queues outcomes for the next calls.
    pub(crate) fn script(f: &[Fault]) {
        QUEUE.with(|q| q.borrow_mut().extend(f.iter().copied()));
    }

    /// The outcome of the next call, if scripted.
    pub(crate) fn next() -> Option<Fault> {
        QUEUE.with(|q| q.borrow_mut().pop_front())
    }

    /// How many scripted outcomes are left.
    pub(crate) fn left() -> usize {
        QUEUE.with(|q| q.borrow().len())
    }
}

/// `poll(fds, timeout_ms)`; returns how many entries have events.
pub(crate) fn poll(fds: &mut [libc::pollfd], timeout_ms: c_int) -> io::Result<usize> {
    // SAFETY: `fds` is a valid, exclusively borrowed array of `fds.len()`
    // pollfd structures, which the kernel reads and whose `revents` it writes.
    let rc = unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, timeout_ms) };
    cvt(rc).map(|k| k as usize)
}

/// poll(2) with a timeout to the nanosecond (ppoll, no signal mask change).
pub(crate) fn ppoll(fds: &mut [libc::pollfd], timeout: std::time::Duration) -> io::Result<usize> {
    let ts = libc::timespec {
        tv_sec: libc::time_t::try_from(timeout.as_secs()).unwrap_or(libc::time_t::MAX),
        // Below 10^9: fits every c_long.
        tv_nsec: timeout.subsec_nanos() as libc::c_long,
    };
    // SAFETY: `fds` as in `poll`; `ts` is a valid timespec read during the
    // call; a null signal mask leaves the thread's mask unchanged.
    let rc = unsafe { libc::ppoll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, &ts, std::ptr::null()) };
    cvt(rc).map(|k| k as usize)
}

/// A new non-blocking, close-on-exec eventfd with counter 0.
pub(crate) fn eventfd() -> io::Result<OwnedFd> {
    // SAFETY: eventfd takes no pointers; it returns a new descriptor or -1.
    let fd = cvt(unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) })?;
    // SAFETY: `fd` was just returned by eventfd, is open and owned by nobody else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        let mut n = Name([0; NAME_LEN]);
        for a in ["10.1.2.3:4791", "[fd00::1]:4791", "[fe80::1%7]:9"] {
            let a: SocketAddr = a.parse().unwrap();
            let len = write_name(&a, &mut n) as usize;
            assert_eq!(read_name(&n.0[..len]), Some(a));
        }
        assert_eq!(read_name(&[0u8; 16]), None);
        assert_eq!(read_name(&[]), None, "no name: a read of a socket shut down");
        assert_eq!(read_name(&[2, 0, 0x12]), None);
    }

    #[test]
    fn cmsgs_parse() {
        // A GRO segment size followed by IPv4 packet info, as the kernel lays them out.
        let mut c = [0u8; 64];
        c[..8].copy_from_slice(&(CMSG_HDR + 4).to_ne_bytes());
        c[8..12].copy_from_slice(&SOL_UDP.to_ne_bytes());
        c[12..16].copy_from_slice(&UDP_GRO.to_ne_bytes());
        c[16..20].copy_from_slice(&1100i32.to_ne_bytes());
        let o = 24;
        c[o..o + 8].copy_from_slice(&(CMSG_HDR + 12).to_ne_bytes());
        c[o + 8..o + 12].copy_from_slice(&libc::IPPROTO_IP.to_ne_bytes());
        c[o + 12..o + 16].copy_from_slice(&libc::IP_PKTINFO.to_ne_bytes());
        c[o + 24..o + 28].copy_from_slice(&[127, 0, 0, 3]);
        let mut m =
            RecvMeta { src: None, dst: None, len: 0, segment: None, truncated: false, ctrl_truncated: false, tos: 0 };
        parse_cmsgs(&c[..o + CMSG_HDR + 12], &mut m);
        assert_eq!(m.segment, Some(1100));
        assert_eq!(m.dst, Some(IpAddr::V4(Ipv4Addr::new(127, 0, 0, 3))));
    }

    /// The contract behind `Queued::gso_index`: a device that segments a GSO
    /// message in software numbers the segments' IPv4 identification 0, 1,
    /// 2, ..., and a datagram alone gets 0. Loopback never segments, so this
    /// uses a TUN device (needs root and `ip`; skipped otherwise). The
    /// interface disappears when the test closes it.
    #[test]
    fn gso_segments_get_ipv4_ids_counting_from_zero() {
        use std::io::Read;
        use std::process::Command;

        let Ok(mut tun) = std::fs::OpenOptions::new().read(true).write(true).open("/dev/net/tun") else {
            eprintln!("skipped: cannot open /dev/net/tun (needs root)");
            return;
        };
        let pid = std::process::id();
        let name = format!("srtest{}", pid % 1_000_000);
        // struct ifreq: char ifr_name[16]; short ifr_flags; ... (40 bytes).
        let mut ifr = [0u8; 40];
        ifr[..name.len()].copy_from_slice(name.as_bytes());
        ifr[16..18].copy_from_slice(&((libc::IFF_TUN | libc::IFF_NO_PI) as i16).to_ne_bytes());
        // SAFETY: TUNSETIFF reads and writes one `struct ifreq`; `ifr` is a
        // live 40-byte buffer, the size of `struct ifreq` on Linux.
        let rc = unsafe { libc::ioctl(tun.as_raw_fd(), libc::TUNSETIFF, ifr.as_mut_ptr()) };
        if rc < 0 {
            eprintln!("skipped: TUNSETIFF: {}", io::Error::last_os_error());
            return;
        }
        // A /30 of the benchmarking range 198.18.0.0/15, per process.
        let (x, y) = (pid & 0xff, ((pid >> 8) & 0x3f) * 4);
        let (me, peer) = (format!("198.18.{x}.{}", y + 1), format!("198.18.{x}.{}", y + 2));
        let ip = |args: &[&str]| Command::new("ip").args(args).status().is_ok_and(|s| s.success());
        if !ip(&["addr", "add", &format!("{me}/30"), "dev", &name]) || !ip(&["link", "set", &name, "up"]) {
            eprintln!("skipped: cannot configure {name} with `ip`");
            return;
        }
        let sock = crate::Socket::bind_addr(SocketAddr::new(me.parse().unwrap(), 0)).unwrap();
        let dst = SocketAddr::new(peer.parse().unwrap(), 4791);
        let mut tx = crate::SendBatch::new(16, 16 * 1000);
        let pkt = crate::send::tests::pkt;
        tx.push(dst, &pkt(1, 100)).unwrap();
        for i in 0..5 {
            assert_eq!(tx.push(dst, &pkt(2, 1000)).unwrap().gso_index, i);
        }
        assert_eq!(tx.push(dst, &pkt(3, 300)).unwrap().gso_index, 5);
        let f = tx.flush(&sock).unwrap();
        assert_eq!((f.packets, f.messages, f.failed), (7, 2, 0), "{f:?}");
        // Read what the kernel wrote to the device: IPv4 UDP from our port.
        let mut seen = Vec::new();
        let mut buf = vec![0u8; 70_000];
        let mut pfd = [libc::pollfd { fd: tun.as_raw_fd(), events: libc::POLLIN, revents: 0 }];
        while seen.len() < 7 && poll(&mut pfd, 5000).unwrap() > 0 {
            let n = tun.read(&mut buf).unwrap();
            let p = &buf[..n];
            if n > 28 && p[0] >> 4 == 4 && p[9] == 17 && u16::from_be_bytes([p[20], p[21]]) == sock.local_port() {
                let id = u16::from_be_bytes([p[4], p[5]]);
                let df = p[6] & 0x40 != 0;
                seen.push((id, df, n - 28, p[28]));
            }
        }
        // (IPv4 ID, DF, UDP payload length, first byte): the lone datagram, then the six segments.
        let mut want = vec![(0, true, 100, 1)];
        want.extend((0..5).map(|id| (id, true, 1000, 2)));
        want.push((5, true, 300, 3));
        assert_eq!(seen, want);
    }
}
