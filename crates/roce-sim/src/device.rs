//! A softroce device as a simulated endpoint.

use std::net::IpAddr;
use std::time::Instant;

use roce_proto::Device;
use roce_wire::ROCE_V2_UDP_PORT;

use crate::{Endpoint, Transmit};

/// A [`Device`] attached to the simulated network at `addr`.
#[derive(Debug)]
pub struct SimDevice {
    /// The device.
    pub dev: Device,
    /// Its address (the destination of datagrams it receives).
    pub addr: IpAddr,
    /// Datagrams received for other UDP ports (ignored).
    pub foreign: u64,
}

impl SimDevice {
    /// Wraps `dev`, reachable at `addr`.
    pub fn new(dev: Device, addr: IpAddr) -> SimDevice {
        SimDevice { dev, addr, foreign: 0 }
    }
}

impl Endpoint for SimDevice {
    fn handle_datagram(&mut self, now: Instant, src: IpAddr, src_port: u16, dst_port: u16, data: &[u8]) {
        if dst_port != ROCE_V2_UDP_PORT {
            self.foreign += 1;
            return;
        }
        // Like a UDP socket, the simulated receiver does not see the IPv4
        // identification; senders in the simulation use ID 0 as softroce does.
        self.dev.handle_datagram(now, src, src_port, self.addr, None, data);
    }

    fn poll_transmit(&mut self, now: Instant, buf: &mut [u8]) -> Option<Transmit> {
        let t = self.dev.poll_transmit(now, buf)?;
        Some(Transmit { dst: t.dst, src_port: t.src_port, dst_port: ROCE_V2_UDP_PORT, len: t.len })
    }

    fn poll_timeout(&self) -> Option<Instant> {
        self.dev.poll_timeout()
    }

    fn handle_timeout(&mut self, now: Instant) {
        self.dev.handle_timeout(now);
    }
}
