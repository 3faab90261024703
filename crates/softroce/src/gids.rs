//! Receiving on the device's other addresses: every GID that is an address
//! of the device's interface, as Linux rxe receives whatever the interface
//! receives on UDP 4791.
//!
//! The device socket is bound to the device's address (GID 1 for IPv4), so
//! without this a peer that addresses GID 0, the interface's link-local
//! IPv6 address (`ibv_rc_pingpong -g 0`, libfabric's default GID index),
//! or another IPv6 address of the interface reached nobody. Each such
//! address gets a socket on `addr:4791` (the link-local one with the
//! interface's scope), a member of that address's `SO_REUSEPORT` group of
//! the host's processes, and a thread that hands its datagrams on: to this
//! process's engine when its QP is this process's, else, through the
//! device's member table, to the process that owns it (the kernel spreads
//! these groups' datagrams by their 4-tuple, as it has no steering program
//! for them). The same socket sends what leaves from that address and
//! port 4791 ([`crate::sources::Sources::add_listener`]). A member of the
//! shared device sending to one of these addresses for another member's QP
//! does not come here: its local link writes the packet into that
//! member's lane, as for the device's own address (`local_link.rs`).
//!
//! Loopback addresses (`::1`) are left out: a datagram there could be for
//! any loopback device (127.0.0.x) or for a `::1` device of its own, so
//! no loopback device lists `::1` among its GIDs either
//! ([`crate::config`]).

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Weak};
use std::time::Duration;

use roce_udp::{RecvBatch, Socket};

use crate::arrivals::Arrivals;
use crate::config::DeviceInfo;

/// How often a receiving thread looks whether its context is gone.
const POLL: Duration = Duration::from_millis(100);
/// How long a closing socket waits for a datagram already on its way to it.
const SETTLE: Duration = Duration::from_millis(1);

/// The addresses of `info` to receive on besides its own, each with the
/// scope it binds with: its interface's addresses among its GIDs, but
/// loopback ones, those another device of `all` binds as its own, and,
/// for a device that is not in `all` (one rdma_cm opened on an address of
/// a listed device's interface, as libfabric's probes bind every address),
/// those a listed device receives on: two devices' sockets in one
/// address's group would each take datagrams for the other's QPs.
pub(crate) fn other_addrs(info: &DeviceInfo, all: &[DeviceInfo], scope: u32) -> Vec<SocketAddr> {
    let listed = all.iter().any(|d| d.name == info.name && d.addr == info.addr);
    let received_by_listed =
        |g: &std::net::IpAddr| !listed && all.iter().any(|d| d.gids.iter().zip(&d.bindable).any(|(a, b)| *b && a == g));
    info.gids
        .iter()
        .zip(&info.bindable)
        .filter(|(g, b)| **b && **g != info.addr && !g.is_loopback())
        .filter(|(g, _)| !all.iter().any(|d| d.addr == **g) && !received_by_listed(g))
        .map(|(g, _)| crate::config::scoped(*g, roce_udp::ROCE_PORT, scope))
        .collect()
}

/// The interface index of `info`'s interface (0 if unknown): the scope of
/// its link-local addresses.
pub(crate) fn scope_of(info: &DeviceInfo) -> u32 {
    info.interface.as_deref().and_then(|i| nix::net::if_::if_nametoindex(i).ok()).unwrap_or(0)
}

/// Stops the receiving threads of a context when dropped: each is woken
/// at once and closes its socket, which leaves its address's group (the
/// kernel would go on handing it a share of the datagrams meanwhile, lost
/// with it: libfabric opens and closes a context per device while it
/// probes, just before its traffic starts). Not joined, since the last
/// reference to the context may be a thread's own.
#[derive(Debug, Default)]
pub(crate) struct Receivers(Vec<(Arc<AtomicBool>, Arc<Socket>)>);

impl Drop for Receivers {
    fn drop(&mut self) {
        for (stop, sock) in &self.0 {
            stop.store(true, Ordering::Release);
            let _ = sock.shutdown_read();
        }
    }
}

impl Receivers {
    /// Closes every socket without losing what the kernel gave it: all
    /// first stop drawing datagrams from their addresses' groups (the
    /// others of each group get them from then on), then what they hold
    /// goes to `to` (this context's engine, or at `exit()` only the other
    /// members' datagrams, passed on), again after one SETTLE for all, and
    /// they close. A sender whose own socket drew its last datagram to
    /// another process's QP, and which then exited, lost that datagram
    /// before (libfabric's UD pingpong to GID 0, over `SOFTROCE_LINK=udp`,
    /// hung).
    pub(crate) fn hand_on_and_close(&mut self, mut to: impl FnMut(&RecvBatch)) {
        // A few slots: the loop takes whatever is queued (64 made a close
        // allocate and fault in 4 MiB).
        let mut rx = RecvBatch::new(8);
        let socks = std::mem::take(&mut self.0);
        // Every socket stops drawing first, so that one wait covers them all
        // (a wait per socket made a close cost a millisecond per address).
        let stopped: Vec<&Socket> = socks
            .iter()
            .filter(|(stop, sock)| {
                stop.store(true, Ordering::Release);
                sock.stop_drawing().is_ok()
            })
            .map(|(_, sock)| &**sock)
            .collect();
        let mut drain = || {
            for sock in &stopped {
                while sock.recv(&mut rx).is_ok_and(|n| n > 0) {
                    to(&rx);
                }
            }
        };
        drain();
        if !stopped.is_empty() {
            // A datagram the kernel picked one of them for just before
            // lands within this wait.
            std::thread::sleep(SETTLE);
            drain();
        }
        for (_, sock) in &socks {
            let _ = sock.shutdown_read();
        }
    }

    /// Binds `at` and starts its thread; the socket is returned for sending.
    pub(crate) fn start(&mut self, to: Weak<dyn Arrivals>, at: SocketAddr) -> std::io::Result<Arc<Socket>> {
        let sock = Arc::new(Socket::bind_shared(at).map_err(std::io::Error::other)?);
        let stop = Arc::new(AtomicBool::new(false));
        let (s, st) = (sock.clone(), stop.clone());
        crate::thread::spawn(format!("softroce {}", at.ip()), move || relay(&s, &to, &st))?;
        self.0.push((stop, sock.clone()));
        Ok(sock)
    }
}

/// Hands every datagram of `sock` on until told to stop or the context is gone.
fn relay(sock: &Socket, to: &Weak<dyn Arrivals>, stop: &AtomicBool) {
    let mut rx = RecvBatch::new(64);
    while !stop.load(Ordering::Acquire) {
        match sock.recv_wait(&mut rx, POLL) {
            Ok(0) => {
                if to.strong_count() == 0 {
                    return;
                }
            }
            Ok(_) => {
                let Some(s) = to.upgrade() else { return };
                s.arrived_batch(&rx);
            }
            Err(_) => {
                // Counted, and tried again.
                let Some(s) = to.upgrade() else { return };
                s.receive_failed(false);
                drop(s);
                std::thread::sleep(POLL);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::SocketAddrV6;

    fn dev(name: &str, addr: &str, gids: &[(&str, bool)]) -> DeviceInfo {
        DeviceInfo {
            name: name.into(),
            addr: addr.parse().unwrap(),
            interface: Some("eth1".into()),
            gids: gids.iter().map(|(g, _)| g.parse().unwrap()).collect(),
            bindable: gids.iter().map(|(_, b)| *b).collect(),
            link_mtu: 1500,
        }
    }

    /// Takes what it is given, counting the datagrams.
    struct Count(std::sync::atomic::AtomicUsize);

    impl Arrivals for Count {
        fn arrived_multicast(&self, _: std::net::IpAddr, _: u16, _: std::net::IpAddr, _: &[u8]) {}
        fn arrived_batch(&self, rx: &RecvBatch) {
            self.0.fetch_add(rx.len(), Ordering::Relaxed);
        }
        fn receive_failed(&self, _: bool) {}
    }

    /// Closing hands on what each socket holds and waits once for them all,
    /// not once each: four sockets close in about one SETTLE (before, four;
    /// the fastest of three closes is taken, against a loaded machine).
    #[test]
    fn closing_hands_on_every_sockets_datagrams_after_one_wait_for_all() {
        const SOCKETS: u32 = 4;
        let leases: Vec<_> = (0..SOCKETS).map(|_| crate::config::LoopbackLease::take().unwrap()).collect();
        let sink: Arc<dyn Arrivals> = Arc::new(Count(Default::default()));
        let fastest = (0..3)
            .map(|_| {
                let mut r = Receivers::default();
                let socks: Vec<_> = leases
                    .iter()
                    .map(|l| r.start(Arc::downgrade(&sink), SocketAddr::from((l.addr(), 0))).unwrap())
                    .collect();
                // The relay threads are blocked in their receive: stopped
                // first, they leave a datagram queued for each socket,
                // which closing must hand on.
                for (stop, _) in &r.0 {
                    stop.store(true, Ordering::Release);
                }
                std::thread::sleep(POLL + Duration::from_millis(50));
                let tx = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
                for s in &socks {
                    tx.send_to(b"x", s.local_addr()).unwrap();
                }
                std::thread::sleep(Duration::from_millis(20));
                let (mut got, t) = (0, std::time::Instant::now());
                r.hand_on_and_close(|rx| got += rx.len());
                let took = t.elapsed();
                assert_eq!(got, SOCKETS as usize, "each socket's datagram handed on");
                assert!(took >= SETTLE);
                took
            })
            .min()
            .unwrap();
        assert!(fastest < SETTLE * SOCKETS, "one wait for all {SOCKETS} sockets: {fastest:?}");
    }

    #[test]
    fn the_other_addresses_are_the_interfaces_own_but_loopback_and_other_devices() {
        let d = dev(
            "sr0",
            "10.0.0.2",
            &[("fe80::1", true), ("10.0.0.2", true), ("2001:db8::2", true), ("fd00::9", true), ("::1", true)],
        );
        let other = dev("sr1", "fd00::9", &[("fd00::9", true)]);
        let got = other_addrs(&d, &[d.clone(), other], 7);
        let want: Vec<SocketAddr> = vec![
            SocketAddr::V6(SocketAddrV6::new("fe80::1".parse().unwrap(), 4791, 0, 7)),
            "[2001:db8::2]:4791".parse().unwrap(),
        ];
        assert_eq!(got, want);
        // A device rdma_cm opened on another address of sr0's interface
        // leaves sr0's addresses to sr0.
        let adhoc = dev("softroce_2001:db8::2", "2001:db8::2", &[("fe80::1", true), ("2001:db8::2", true)]);
        assert!(other_addrs(&adhoc, std::slice::from_ref(&d), 7).is_empty());
        assert_eq!(other_addrs(&adhoc, &[], 7).len(), 1, "alone, it receives on the link-local address");
        // A made-up link-local address (loopback's) is no address to bind.
        let lo = dev("lo2", "127.0.0.2", &[("fe80::200:7fff:fe00:2", false), ("127.0.0.2", true), ("::1", true)]);
        assert!(other_addrs(&lo, &[], 1).is_empty());
    }
}
