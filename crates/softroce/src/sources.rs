//! The UDP source addresses and ports a context's QPs send from.
//!
//! Linux rxe sends each QP's packets from a port of its own (the engine
//! picks it as rxe does: `roce_proto::qp::rxe_init_sport`, then
//! `rdma_get_udp_sport` from the flow label or the QPN pair), so ECMP
//! spreads QPs over paths and a receiver's GRO never merges two QPs'
//! packets into one super-packet; and from the address of the GID the
//! packet's source GID index names (GID 0, the link-local address, in
//! `ibv_rc_pingpong -g 0`). A UDP socket sends from the one address and
//! port it is bound to, and the ICRC covers both, so each pair in use gets
//! a send-only socket: a member of the `SO_REUSEPORT` group of
//! `addr:port` (other processes of the user may hold the same port for
//! their own QPs). Nothing is sent to these ports; their receive buffers
//! are the smallest the kernel allows.
//!
//! A pair that cannot be bound (another program or user holds the port,
//! no file descriptors left) or past [`MAX_SOURCES`] sockets: the QP sends
//! from the device's own port, 4791, counted in
//! `DriverStats::src_port_fallbacks`. Receivers match only the destination
//! port.

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

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

/// The source sockets of one context. A packet's socket is named by a
/// tag (`SendBatch::set_source`): 0 is the device socket, others index
/// `socks` plus one.
#[derive(Debug)]
pub(crate) struct Sources {
    /// The device socket's address and port: its packets need no socket here.
    main: SocketAddr,
    /// The scope (interface index) of link-local source addresses.
    scope: u32,
    tags: HashMap<(IpAddr, u16), u16>,
    /// By tag less one; shared with a receiving thread for the device's
    /// other addresses' sockets on 4791 ([`Sources::add_listener`]).
    socks: Vec<Option<Arc<Socket>>>,
    /// Pairs that could not be bound: not tried again.
    refused: std::collections::HashSet<(IpAddr, u16)>,
    /// The last pair looked up and its tag: a bulk send asks for one pair
    /// packet after packet (a hash lookup each cost 3% of a sender's time).
    last: Option<((IpAddr, u16), u16)>,
}

impl Sources {
    pub(crate) fn new(main: SocketAddr, scope: u32) -> Sources {
        Sources { main, scope, tags: HashMap::new(), socks: Vec::new(), refused: Default::default(), last: None }
    }

    /// The socket of tag `tag` (`main` for 0).
    pub(crate) fn socket<'a>(&'a self, main: &'a Socket, tag: u16) -> Option<&'a Socket> {
        match tag {
            0 => Some(main),
            t => self.socks.get(usize::from(t) - 1)?.as_deref(),
        }
    }

    /// `sock`, which receives on another address of the device (port
    /// 4791), also sends what leaves from there: a send-only socket on
    /// that address and port would join its group and take a share of
    /// what arrives.
    pub(crate) fn add_listener(&mut self, addr: IpAddr, sock: Arc<Socket>) {
        self.socks.push(Some(sock));
        if let Ok(t) = u16::try_from(self.socks.len()) {
            self.tags.insert((addr, self.main.port()), t);
        }
    }

    /// The tag of the socket that sends from `addr:port`, opening it if
    /// need be; `None` if it cannot be had.
    pub(crate) fn tag(&mut self, addr: IpAddr, port: u16) -> Option<u16> {
        match self.last {
            Some((pair, t)) if pair == (addr, port) => return Some(t),
            _ => {}
        }
        if (addr, port) == (self.main.ip(), self.main.port()) {
            return Some(0);
        }
        if let Some(t) = self.tags.get(&(addr, port)) {
            self.last = Some(((addr, port), *t));
            return Some(*t);
        }
        if self.tags.len() >= MAX_SOURCES || self.refused.contains(&(addr, port)) {
            return None;
        }
        match Socket::bind_source(crate::config::scoped(addr, port, self.scope)) {
            Ok(s) => {
                let s = Arc::new(s);
                let slot = match self.socks.iter().position(Option::is_none) {
                    Some(i) => {
                        self.socks[i] = Some(s);
                        i
                    }
                    None => {
                        self.socks.push(Some(s));
                        self.socks.len() - 1
                    }
                };
                let t = u16::try_from(slot + 1).ok()?;
                self.tags.insert((addr, port), t);
                Some(t)
            }
            Err(_) => {
                self.refused.insert((addr, port));
                None
            }
        }
    }

    /// The address and port QP `qpn` sends from, when it has a socket of
    /// its own here.
    pub(crate) fn source_of(&self, dev: &Device, qpn: roce_proto::Qpn) -> Option<(IpAddr, u16)> {
        let q = dev.qp(qpn)?;
        let pair = (source_addr(dev, q, self.main.ip()), q.src_port);
        (q.src_port != self.main.port() && self.tags.contains_key(&pair)).then_some(pair)
    }

    /// After a QP that sent from `pair` was destroyed: its socket closes
    /// unless another QP sends from there too, as rxe's per-QP socket goes
    /// with its QP (a server that outlives a thousand clients holds no
    /// descriptor for any of them).
    pub(crate) fn release(&mut self, dev: &Device, pair: (IpAddr, u16)) {
        if dev.qps().any(|q| q.src_port == pair.1) {
            return;
        }
        if let Some(t) = self.tags.remove(&pair) {
            self.socks[usize::from(t) - 1] = None;
            self.last = None;
        }
    }

    /// After QP `qpn` was made or moved: the address and port it sends
    /// from (its address vector's source GID for RC and UC, the device's
    /// address for UD, whose AHs name theirs per WR) get a socket, or the
    /// QP sends from the device's port (returns true then).
    pub(crate) fn prepare(&mut self, dev: &mut Device, qpn: roce_proto::Qpn) -> bool {
        if dev.config().udp_src_port.is_some() {
            return false; // One port for the whole device.
        }
        // A QP in RESET or INIT sends nothing, and RTR's address vector
        // moves an RC or UC QP's port: its socket waits for RTR.
        let Some(q) = dev.qp(qpn).filter(|q| !matches!(q.state(), QpState::Reset | QpState::Init)) else {
            return false;
        };
        let addr = source_addr(dev, q, self.main.ip());
        let port = q.src_port;
        if self.tags.len() >= MAX_SOURCES && !self.tags.contains_key(&(addr, port)) {
            // Close the sockets no QP sends from any more (destroyed QPs,
            // moved ones); the send batch is empty between passes.
            let used: std::collections::HashSet<u16> = dev.qps().map(|q| q.src_port).collect();
            let socks = &mut self.socks;
            let main = self.main.port();
            self.last = None;
            self.tags.retain(|(_, p), t| {
                let keep = used.contains(p) || *p == main;
                if !keep {
                    socks[usize::from(*t) - 1] = None;
                }
                keep
            });
        }
        self.tag(addr, port).is_none() && dev.set_qp_src_port(qpn, self.main.port()).is_ok()
    }

    /// Where a packet for `ip` goes: port `port`, and a link-local address's
    /// scope.
    pub(crate) fn dst(&self, ip: IpAddr, port: u16) -> SocketAddr {
        crate::config::scoped(ip, port, self.scope)
    }

    /// Source sockets open (the other addresses' receiving sockets too).
    pub(crate) fn len(&self) -> usize {
        self.tags.len()
    }
}

/// The address QP `q` sends from: its address vector's source GID for RC
/// and UC, `main` (the device's address) for UD, whose AHs name theirs per WR.
fn source_addr(dev: &Device, q: &roce_proto::qp::Qp, main: IpAddr) -> IpAddr {
    match q.qp_type() {
        roce_proto::verbs::QpType::Ud => None,
        _ => dev.config().gids.get(usize::from(q.attr.ah_attr.sgid_index)).copied(),
    }
    .unwrap_or(main)
}
