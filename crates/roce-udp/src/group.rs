//! A socket that receives one IP multicast group's RoCEv2 datagrams.
//!
//! A device's [`crate::Socket`] is bound to its unicast address, and the
//! kernel hands a socket only datagrams for the address it is bound to. A
//! UD QP attached to a multicast group (rdma_cm's `::ffff:a.b.c.d` MGID)
//! must also receive what is sent to `a.b.c.d:4791`, so each process with
//! a QP in the group binds one [`GroupSocket`] to `a.b.c.d:4791` and joins
//! the group on the device's interface (`IP_ADD_MEMBERSHIP`, which sends
//! the IGMP report, as the kernel's rdma_cm does for RoCEv2). The kernel
//! gives every such socket of the host its own copy (`SO_REUSEADDR`:
//! sockets of any user may share the group), and loops back what the host
//! itself sends (`IP_MULTICAST_LOOP`, on by default).

use std::io;
use std::net::{IpAddr, Ipv4Addr, SocketAddr, UdpSocket};
use std::time::Duration;

use socket2::{Domain, Protocol, SockAddr, Type};

/// A socket bound to `group:port`, a member of the group on one interface.
#[derive(Debug)]
pub struct GroupSocket {
    inner: UdpSocket,
    group: IpAddr,
}

impl GroupSocket {
    /// Joins `group` on the interface with address `iface` (IPv4) and binds
    /// `group:port`. Receives block for at most `poll` (a relay thread
    /// checks whether it should stop that often).
    pub fn join(group: IpAddr, iface: IpAddr, port: u16, poll: Duration) -> io::Result<GroupSocket> {
        if !group.is_multicast() {
            return Err(io::Error::new(io::ErrorKind::InvalidInput, format!("{group} is not a multicast group")));
        }
        let sock =
            socket2::Socket::new(Domain::for_address(SocketAddr::new(group, port)), Type::DGRAM, Some(Protocol::UDP))?;
        sock.set_reuse_address(true)?;
        match (group, iface) {
            (IpAddr::V4(g), IpAddr::V4(i)) => {
                sock.join_multicast_v4(&g, &i)?;
            }
            (IpAddr::V6(g), IpAddr::V6(_)) => {
                sock.set_only_v6(true)?;
                sock.join_multicast_v6(&g, 0)?;
            }
            _ => {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidInput,
                    format!("group {group} and interface address {iface} are of different families"),
                ));
            }
        }
        // Bound to the group's address: only its datagrams arrive here, not
        // those of every group the host joined.
        sock.bind(&SockAddr::from(SocketAddr::new(group, port)))?;
        let inner: UdpSocket = sock.into();
        inner.set_read_timeout(Some(poll.max(Duration::from_millis(1))))?;
        Ok(GroupSocket { inner, group })
    }

    /// The group.
    pub fn group(&self) -> IpAddr {
        self.group
    }

    /// The next datagram into `buf`: its length and sender, or `None` when
    /// nothing came within the poll interval.
    pub fn recv(&self, buf: &mut [u8]) -> io::Result<Option<(usize, SocketAddr)>> {
        match self.inner.recv_from(buf) {
            Ok(got) => Ok(Some(got)),
            Err(e) if matches!(e.kind(), io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut) => Ok(None),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => Ok(None),
            Err(e) => Err(e),
        }
    }
}

/// The interface address unicast sockets of `addr` send multicast from:
/// IPv4 only (an IPv6 device leaves the choice to the routing table).
pub fn multicast_if(addr: IpAddr) -> Option<Ipv4Addr> {
    match addr {
        IpAddr::V4(a) if !a.is_unspecified() => Some(a),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn two_members_of_a_group_each_get_a_copy_and_others_nothing() {
        let lo = IpAddr::V4(Ipv4Addr::LOCALHOST);
        let group: IpAddr = "239.255.42.7".parse().unwrap();
        // A free port for this run: bind an ordinary socket to learn one.
        let port = UdpSocket::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let poll = Duration::from_millis(500);
        let a = GroupSocket::join(group, lo, port, poll).unwrap();
        let b = GroupSocket::join(group, lo, port, poll).unwrap();
        let other = GroupSocket::join("239.255.42.8".parse().unwrap(), lo, port, Duration::from_millis(50)).unwrap();
        let tx = socket2::Socket::new(Domain::IPV4, Type::DGRAM, Some(Protocol::UDP)).unwrap();
        tx.set_multicast_if_v4(&Ipv4Addr::LOCALHOST).unwrap();
        tx.bind(&SockAddr::from(SocketAddr::new(lo, 0))).unwrap();
        let tx: UdpSocket = tx.into();
        tx.send_to(b"roce", SocketAddr::new(group, port)).unwrap();
        let mut buf = [0u8; 64];
        for s in [&a, &b] {
            let (n, from) = s.recv(&mut buf).unwrap().expect("a copy for each member");
            assert_eq!(&buf[..n], b"roce");
            assert_eq!(from.ip(), lo);
        }
        assert!(other.recv(&mut buf).unwrap().is_none(), "another group's socket gets nothing");
        assert!(GroupSocket::join("10.0.0.1".parse().unwrap(), lo, port, poll).is_err());
    }
}
