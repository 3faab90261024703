//! UDP socket I/O for softroce (Linux): the layer between the sans-IO
//! engine (`roce-proto`'s `Device`) and the network.
//!
//! - [`Socket`]: a non-blocking UDP socket bound to `addr:4791`, unconnected,
//!   with `IP(V6)_MTU_DISCOVER = PMTUDISC_DO`, packet info on receive,
//!   `UDP_GRO`, and 8 MiB buffers where the kernel allows. Binding failures
//!   are a [`BindError`] that says what to do.
//! - [`RecvBatch`]: one `recvmmsg` receives many datagrams; GRO
//!   super-datagrams are split back into the packets that were sent;
//!   iterate [`Segment`]s (`src`, `src_port`, `dst`, `data`), the arguments
//!   of `Device::handle_datagram`.
//! - [`SendBatch`]: queue packets (copied, written in place, or header +
//!   borrowed payload as two iovecs), flush with `sendmmsg`; runs of
//!   equal-size packets to one peer become single UDP GSO messages.
//! - [`wait`] + [`Waker`]: poll(2) on sockets, an eventfd another thread
//!   can wake, and a timeout.
//!
//! # The source port
//!
//! RoCEv2 receivers only need destination port 4791; the source port is
//! free (Linux rxe picks one per QP, hashed for ECMP spreading). A socket
//! sends from the one port it is bound to, and the ICRC covers the UDP
//! header, so a packet must leave from the port its ICRC was computed
//! for: softroce receives on `addr:4791` and sends each QP's packets from
//! a send-only socket on its port ([`Socket::bind_source`]).
//! [`SendBatch::set_source`] tags the packets queued next with their
//! port, and [`SendBatch::flush_from`] sends each run of one port from
//! that port's socket.
//!
//! # The IPv4 identification
//!
//! The ICRC also covers the IPv4 identification. On these sockets Linux
//! sends ID 0 with DF (unconnected socket, `IP_PMTUDISC_DO`), and the
//! segments of a GSO message get 0, 1, 2, ...: [`Queued::gso_index`] gives
//! each packet's ID when it is queued. Receivers cannot see the ID at all
//! (see `docs/icrc.md`).
//!
//! # A driver loop
//!
//! ```no_run
//! use roce_udp::{Interest, RecvBatch, SendBatch, Socket, Waker, wait};
//! use std::os::fd::AsFd;
//! use std::time::Duration;
//!
//! let sock = Socket::bind("127.0.0.2".parse()?)?;
//! let waker = Waker::new()?;
//! let mut rx = RecvBatch::new(64);
//! let mut tx = SendBatch::new(64, 64 * 4200);
//! loop {
//!     while sock.recv(&mut rx)? > 0 {
//!         for seg in &rx {
//!             // device.handle_datagram(now, seg.src, seg.src_port, seg.dst, None, seg.data);
//!             let _ = seg;
//!         }
//!     }
//!     // while tx.has_room(4200) { match device.poll_transmit(now, tx.spare()) { ... tx.commit(dst, len) } }
//!     let sent = tx.flush(&sock)?;
//!     let interest = if sent.pending > 0 { Interest::BOTH } else { Interest::READABLE };
//!     wait(&[(sock.as_fd(), interest)], Some(&waker), Some(Duration::from_millis(10)))?;
//! #   break;
//! }
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
#![deny(unsafe_code)]

#[cfg(not(target_os = "linux"))]
compile_error!("roce-udp uses Linux socket options (UDP_GRO, UDP_SEGMENT, IP_PKTINFO) and supports Linux only");

mod group;
mod recv;
mod send;
mod socket;
mod sys;
mod wait;

/// The cookie of this process's network namespace (`SO_NETNS_COOKIE`,
/// Linux 5.14): unlike the namespace's inode number, never given to
/// another namespace while the machine runs. `None` on older kernels.
pub fn netns_cookie() -> Option<u64> {
    let s = std::net::UdpSocket::bind((std::net::Ipv4Addr::LOCALHOST, 0)).ok()?;
    sys::netns_cookie(std::os::fd::AsFd::as_fd(&s)).ok()
}

pub use group::{GroupSocket, multicast_if};
pub use recv::{Datagram, Datagrams, Packets, RECV_SLOT, RecvBatch, RecvStats, Segment, Segments};
pub use send::{BatchFull, Failure, Flushed, MAX_GSO_BYTES, MAX_GSO_SEGMENTS, Queued, SendBatch, SendStats};
pub use socket::{BindError, BufferSizes, ROCE_PORT, SockFilter, Socket, WANTED_BUFFER};
pub use wait::{Interest, MAX_WAIT_FDS, Waker, Wakeup, wait, wait_precise};

#[cfg(test)]
mod netns_tests {
    #[test]
    fn the_namespace_cookie_is_one_value_for_the_process() {
        // Kernels before 5.14 have none; this one (CI's too) has.
        let a = super::netns_cookie().expect("SO_NETNS_COOKIE");
        assert_ne!(a, 0);
        assert_eq!(super::netns_cookie(), Some(a));
    }
}
