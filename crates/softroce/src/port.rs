//! The device's UDP port on this host: a seat in the host's shared
//! reuseport group (`roce-host`: any number of processes open one device),
//! or, for a context bound to a port of its own (tests, `Options::port`
//! 0), a plain socket nobody shares.

use std::net::{IpAddr, SocketAddr};
use std::ops::Deref;

use roce_host::Member;
use roce_udp::Socket;

use crate::error::Error;

/// The socket and, when shared, the membership that owns its seat.
pub(crate) struct Port {
    sock: Option<Socket>,
    member: Option<Member>,
    /// The process that opened it: a `fork()` child must not leave in the
    /// parent's name (its copies of the descriptors close harmlessly).
    pid: u32,
}

impl Port {
    /// Joins the shared device on `addr:port` (4791 unless `port` says
    /// otherwise); port 0 binds a free port of its own instead.
    pub(crate) fn open(addr: IpAddr, port: Option<u16>) -> Result<Port, Error> {
        let pid = std::process::id();
        match port {
            Some(0) => Ok(Port { sock: Some(Socket::bind_addr(SocketAddr::new(addr, 0))?), member: None, pid }),
            p => {
                let (member, sock) = Member::join(SocketAddr::new(addr, p.unwrap_or(roce_udp::ROCE_PORT)))?;
                Ok(Port { sock: Some(sock), member: Some(member), pid })
            }
        }
    }

    /// The membership, when the device is shared.
    pub(crate) fn member(&self) -> Option<&Member> {
        self.member.as_ref()
    }

    /// Ends a `recv_wait` sleeping on this socket in another thread: a
    /// datagram from the socket to itself (steered back to its own seat
    /// when shared).
    pub(crate) fn wake_receiver(&self) -> std::io::Result<()> {
        match &self.member {
            None => self.deref().wake_receiver(),
            Some(m) => {
                let mut b = Vec::with_capacity(40);
                if m.wake_envelope(&mut b) {
                    self.deref().send_to(&b, self.deref().local_addr()).map(|_| ())
                } else {
                    // No seat known: the sleep ends by its timeout.
                    Ok(())
                }
            }
        }
    }
}

impl Deref for Port {
    type Target = Socket;
    fn deref(&self) -> &Socket {
        self.sock.as_ref().expect("the socket lives until the port drops")
    }
}

impl Drop for Port {
    fn drop(&mut self) {
        if let (Some(m), Some(s)) = (self.member.take(), self.sock.take())
            && std::process::id() == self.pid
        {
            m.leave(s);
        }
    }
}
