//! The UDP source ports a context's QPs send from.
//!
//! Linux rxe sends each QP's packets from a port of its own (the engine
//! picks it as rxe does: `roce_proto::qp::rxe_init_sport`, then
//! `rdma_get_udp_sport` from the flow label or the QPN pair), so ECMP
//! spreads QPs over paths and a receiver's GRO never merges two QPs'
//! packets into one super-packet. A UDP socket sends from the one port it
//! is bound to, and the ICRC covers that port, so each port in use gets a
//! send-only socket: a member of the `SO_REUSEPORT` group of
//! `addr:port` (other processes of the user may hold the same port for
//! their own QPs). Nothing is sent to these ports; their receive buffers
//! are the smallest the kernel allows.
//!
//! A port that cannot be bound (another program or user holds it, no file
//! descriptors left) or past [`MAX_SOURCES`] ports: the QP sends from the
//! device's own port, 4791, as softroce did before, counted in
//! `DriverStats::src_port_fallbacks`. Receivers match only the destination
//! port.

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};

use roce_proto::Device;
use roce_proto::verbs::QpState;
use roce_udp::Socket;

/// Most source sockets a context opens: 128 file descriptors at most,
/// whatever the number of QPs (rxe holds a kernel socket per QP, which
/// costs a process nothing; here a descriptor each).
pub(crate) const MAX_SOURCES: usize = 128;

/// Whether QPs send from ports of their own (`SOFTROCE_SRC_PORT`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum SrcPorts {
    /// Each QP from rxe's port for it (`qp`, the default).
    #[default]
    PerQp,
    /// Every packet from the device's port, 4791 (`device`).
    Device,
}

/// The source sockets of one context.
#[derive(Debug)]
pub(crate) struct Sources {
    addr: IpAddr,
    /// The device socket's port: packets from it need no socket here.
    main: u16,
    socks: HashMap<u16, Socket>,
    /// Ports that could not be bound: not tried again.
    refused: std::collections::HashSet<u16>,
}

impl Sources {
    pub(crate) fn new(addr: IpAddr, main: u16) -> Sources {
        Sources { addr, main, socks: HashMap::new(), refused: Default::default() }
    }

    /// The socket `port`'s packets leave from (`main` for the device's).
    pub(crate) fn socket<'a>(&'a self, main: &'a Socket, port: u16) -> Option<&'a Socket> {
        if port == self.main { Some(main) } else { self.socks.get(&port) }
    }

    /// Whether `port` can be sent from, opening its socket if need be.
    pub(crate) fn open(&mut self, port: u16) -> bool {
        if port == self.main || self.socks.contains_key(&port) {
            return true;
        }
        if self.socks.len() >= MAX_SOURCES || self.refused.contains(&port) {
            return false;
        }
        match Socket::bind_source(SocketAddr::new(self.addr, port)) {
            Ok(s) => {
                self.socks.insert(port, s);
                true
            }
            Err(_) => {
                self.refused.insert(port);
                false
            }
        }
    }

    /// After QP `qpn` was made or moved: its port gets a socket, or the QP
    /// sends from the device's port (returns true then).
    pub(crate) fn prepare(&mut self, dev: &mut Device, qpn: u32) -> bool {
        if dev.config().udp_src_port.is_some() {
            return false; // One port for the whole device.
        }
        // A QP in RESET or INIT sends nothing, and RTR's address vector
        // moves an RC or UC QP's port: its socket waits for RTR.
        let Some(port) =
            dev.qp(qpn).filter(|q| !matches!(q.state(), QpState::Reset | QpState::Init)).map(|q| q.src_port)
        else {
            return false;
        };
        if self.socks.len() >= MAX_SOURCES && !self.socks.contains_key(&port) {
            // Close the ports no QP sends from any more (destroyed QPs,
            // moved ones); the send batch is empty between passes.
            let used: std::collections::HashSet<u16> = dev.qps().map(|q| q.src_port).collect();
            self.socks.retain(|p, _| used.contains(p));
        }
        !self.open(port) && dev.set_qp_src_port(qpn, self.main).is_ok()
    }

    /// Source sockets open.
    pub(crate) fn len(&self) -> usize {
        self.socks.len()
    }
}
