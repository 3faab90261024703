//! Helpers shared by the loopback tests.
#![allow(dead_code)]

use std::net::{IpAddr, SocketAddr};
use std::os::fd::AsFd;
use std::time::{Duration, Instant};

use roce_udp::{BindError, Interest, RecvBatch, Socket, wait};

/// How long a test waits for loopback traffic before failing (generous: CI
/// machines can be loaded).
pub const PATIENCE: Duration = Duration::from_secs(5);

/// A received packet, copied out of the batch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Got {
    pub src: SocketAddr,
    pub dst: IpAddr,
    pub data: Vec<u8>,
}

/// Binds `ip` on a free port.
pub fn bind(ip: &str) -> Socket {
    let addr = SocketAddr::new(ip.parse().unwrap(), 0);
    Socket::bind_addr(addr).unwrap_or_else(|e| panic!("binding {addr}: {e}"))
}

/// Binds `ip` on a free port, or `None` (with the reason printed) when the
/// host has no such address or family (e.g. no IPv6 loopback).
pub fn try_bind(ip: &str) -> Option<Socket> {
    let addr = SocketAddr::new(ip.parse().unwrap(), 0);
    match Socket::bind_addr(addr) {
        Ok(s) => Some(s),
        Err(e @ (BindError::AddressNotLocal { .. } | BindError::Io { .. })) => {
            eprintln!("skipped: cannot bind {addr}: {e}");
            None
        }
        Err(e) => panic!("binding {addr}: {e}"),
    }
}

/// Receives until `want` packets have arrived; fails after [`PATIENCE`].
pub fn collect(sock: &Socket, rx: &mut RecvBatch, want: usize) -> Vec<Got> {
    let deadline = Instant::now() + PATIENCE;
    let mut got = Vec::new();
    while got.len() < want {
        if sock.recv(rx).unwrap() == 0 {
            let left = deadline.saturating_duration_since(Instant::now());
            assert!(!left.is_zero(), "timed out with {} of {want} packets: {:?}", got.len(), rx.stats());
            wait(&[(sock.as_fd(), Interest::READABLE)], None, Some(left)).unwrap();
            continue;
        }
        got.extend(rx.segments().map(|s| Got { src: s.src_addr(), dst: s.dst, data: s.data.to_vec() }));
    }
    got
}

/// Asserts nothing more arrives within a short while.
pub fn assert_quiet(sock: &Socket, rx: &mut RecvBatch) {
    wait(&[(sock.as_fd(), Interest::READABLE)], None, Some(Duration::from_millis(50))).unwrap();
    assert_eq!(sock.recv(rx).unwrap(), 0, "unexpected extra datagrams");
}

/// Packet `i` of a test stream: `len` bytes, distinct per (tag, i, offset),
/// but for bytes 4..8, where a BTH has its destination QP: the stream's
/// (`tag`), since one GSO send carries one QP's packets.
pub fn packet(tag: u8, i: usize, len: usize) -> Vec<u8> {
    let mut p: Vec<u8> =
        (0..len).map(|k| (k as u32).wrapping_mul(31).wrapping_add(i as u32 * 7 + u32::from(tag) * 101) as u8).collect();
    p.iter_mut().skip(4).take(4).zip([0, 0, 0, tag]).for_each(|(b, t)| *b = t);
    p
}
