//! Small endpoints the tests drive through the simulated network.

use std::collections::VecDeque;
use std::net::{IpAddr, Ipv4Addr};
use std::time::{Duration, Instant};

use roce_sim::{Endpoint, Transmit};

pub const PORT: u16 = 4791;

pub fn ip(last: u8) -> IpAddr {
    Ipv4Addr::new(10, 0, 0, last).into()
}

/// Sends what is queued (all at once), records everything it receives.
#[derive(Debug, Default)]
pub struct Peer {
    pub queue: VecDeque<(IpAddr, Vec<u8>)>,
    pub received: Vec<Received>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Received {
    pub at: Instant,
    pub src: IpAddr,
    pub src_port: u16,
    pub dst_port: u16,
    pub data: Vec<u8>,
}

impl Peer {
    /// A peer that will send `payloads` to `dst`.
    pub fn sending(dst: IpAddr, payloads: impl IntoIterator<Item = Vec<u8>>) -> Self {
        Self { queue: payloads.into_iter().map(|p| (dst, p)).collect(), received: Vec::new() }
    }
}

impl Endpoint for Peer {
    fn handle_datagram(&mut self, now: Instant, src: IpAddr, src_port: u16, dst_port: u16, data: &[u8]) {
        self.received.push(Received { at: now, src, src_port, dst_port, data: data.to_vec() });
    }

    fn poll_transmit(&mut self, _now: Instant, buf: &mut [u8]) -> Option<Transmit> {
        let (dst, payload) = self.queue.pop_front()?;
        let len = payload.len();
        if len <= buf.len() {
            buf[..len].copy_from_slice(&payload);
        }
        // A payload larger than the buffer is still announced: the sim must refuse it, not panic.
        Some(Transmit { dst, src_port: PORT, dst_port: PORT, len })
    }

    fn poll_timeout(&self) -> Option<Instant> {
        None
    }

    fn handle_timeout(&mut self, _now: Instant) {}
}

/// `len` bytes: the sequence number (u32 LE) then a fixed pattern.
pub fn numbered(seq: u32, len: usize) -> Vec<u8> {
    assert!(len >= 4);
    let mut v: Vec<u8> = (0..len).map(|i| (i as u8).wrapping_mul(37) ^ 0x5a).collect();
    v[..4].copy_from_slice(&seq.to_le_bytes());
    v
}

pub fn seq_of(data: &[u8]) -> u32 {
    u32::from_le_bytes(data[..4].try_into().unwrap())
}

/// Fires timeouts: first at `deadline`, then every `period` until `remaining` reaches zero.
#[derive(Debug)]
pub struct Timer {
    pub deadline: Option<Instant>,
    pub period: Duration,
    pub remaining: u32,
    pub fired: Vec<Instant>,
}

impl Endpoint for Timer {
    fn handle_datagram(&mut self, _: Instant, _: IpAddr, _: u16, _: u16, _: &[u8]) {}

    fn poll_transmit(&mut self, _now: Instant, _buf: &mut [u8]) -> Option<Transmit> {
        None
    }

    fn poll_timeout(&self) -> Option<Instant> {
        self.deadline
    }

    fn handle_timeout(&mut self, now: Instant) {
        self.fired.push(now);
        self.remaining = self.remaining.saturating_sub(1);
        self.deadline = (self.remaining > 0).then(|| now + self.period);
    }
}

/// Never stops: sends one datagram to `peer` every `period` of virtual time, forever
/// (or, with `flood`, returns a datagram from every `poll_transmit`).
#[derive(Debug)]
pub struct Chatter {
    pub peer: IpAddr,
    pub period: Duration,
    pub next: Option<Instant>,
    pub due: bool,
    pub flood: bool,
    pub heard: u64,
}

impl Chatter {
    pub fn new(peer: IpAddr, period: Duration) -> Self {
        Self { peer, period, next: None, due: true, flood: false, heard: 0 }
    }
}

impl Endpoint for Chatter {
    fn handle_datagram(&mut self, _: Instant, _: IpAddr, _: u16, _: u16, _: &[u8]) {
        self.heard += 1;
    }

    fn poll_transmit(&mut self, now: Instant, buf: &mut [u8]) -> Option<Transmit> {
        if !self.flood && !std::mem::take(&mut self.due) {
            return None;
        }
        if self.next.is_none() {
            self.next = Some(now + self.period);
        }
        buf[..8].copy_from_slice(b"chatter!");
        Some(Transmit { dst: self.peer, src_port: PORT, dst_port: PORT, len: 8 })
    }

    fn poll_timeout(&self) -> Option<Instant> {
        self.next
    }

    fn handle_timeout(&mut self, now: Instant) {
        self.due = true;
        self.next = Some(now + self.period);
    }
}

/// CRC-32 (IEEE), bitwise: detects every error of up to 3 bits in the toy's messages.
pub fn crc32(data: &[u8]) -> u32 {
    let mut crc = !0u32;
    for &b in data {
        crc ^= u32::from(b);
        for _ in 0..8 {
            crc = if crc & 1 != 0 { (crc >> 1) ^ 0xEDB8_8320 } else { crc >> 1 };
        }
    }
    !crc
}

/// Appends the CRC of `msg` to it.
fn seal(mut msg: Vec<u8>) -> Vec<u8> {
    let crc = crc32(&msg);
    msg.extend_from_slice(&crc.to_le_bytes());
    msg
}

/// The message body without its CRC, if the CRC checks.
fn open(data: &[u8]) -> Option<&[u8]> {
    let (body, crc) = data.split_at_checked(data.len().checked_sub(4)?)?;
    (crc32(body).to_le_bytes() == crc).then_some(body)
}

const DATA: u8 = 0;
const ACK: u8 = 1;

/// The payload of message `seq` of the reliable toy.
pub fn message(seq: u32) -> Vec<u8> {
    let len = 8 + (seq as usize * 7) % 300;
    (0..len).map(|i| (seq as usize).wrapping_mul(131).wrapping_add(i * 29) as u8).collect()
}

/// Stop-and-wait sender of `total` messages ([`message`]) with retransmission on timeout.
#[derive(Debug)]
pub struct SawSender {
    pub peer: IpAddr,
    pub total: u32,
    /// The message being sent (all before it are acknowledged).
    pub next: u32,
    pub rto: Duration,
    pub max_retries: u32,
    pub retries: u32,
    pub need_send: bool,
    pub timer: Option<Instant>,
    pub gave_up: bool,
    pub transmissions: u64,
    pub bad_acks: u64,
}

impl SawSender {
    pub fn new(peer: IpAddr, total: u32, rto: Duration, max_retries: u32) -> Self {
        Self {
            peer,
            total,
            next: 0,
            rto,
            max_retries,
            retries: 0,
            need_send: total > 0,
            timer: None,
            gave_up: false,
            transmissions: 0,
            bad_acks: 0,
        }
    }

    pub fn done(&self) -> bool {
        self.next == self.total
    }
}

impl Endpoint for SawSender {
    fn handle_datagram(&mut self, _now: Instant, _src: IpAddr, _sp: u16, _dp: u16, data: &[u8]) {
        let Some(body) = open(data) else {
            self.bad_acks += 1;
            return;
        };
        let [ACK, a, b, c, d] = *body else {
            self.bad_acks += 1;
            return;
        };
        let next_expected = u32::from_le_bytes([a, b, c, d]);
        // Stale (reordered or duplicated) acks acknowledge nothing new.
        if next_expected > self.next && !self.gave_up {
            self.next = next_expected.min(self.total);
            self.retries = 0;
            self.timer = None;
            self.need_send = !self.done();
        }
    }

    fn poll_transmit(&mut self, now: Instant, buf: &mut [u8]) -> Option<Transmit> {
        if !std::mem::take(&mut self.need_send) || self.gave_up || self.done() {
            return None;
        }
        let mut msg = vec![DATA];
        msg.extend_from_slice(&self.next.to_le_bytes());
        msg.extend_from_slice(&message(self.next));
        let msg = seal(msg);
        buf[..msg.len()].copy_from_slice(&msg);
        self.timer = Some(now + self.rto);
        self.transmissions += 1;
        Some(Transmit { dst: self.peer, src_port: PORT, dst_port: PORT, len: msg.len() })
    }

    fn poll_timeout(&self) -> Option<Instant> {
        self.timer
    }

    fn handle_timeout(&mut self, _now: Instant) {
        self.timer = None;
        if self.done() || self.gave_up {
            return;
        }
        self.retries += 1;
        if self.retries > self.max_retries {
            self.gave_up = true;
        } else {
            self.need_send = true;
        }
    }
}

/// Stop-and-wait receiver: delivers messages in order, acknowledges every intact message.
#[derive(Debug, Default)]
pub struct SawReceiver {
    pub expected: u32,
    pub delivered: Vec<Vec<u8>>,
    pub acks_owed: VecDeque<IpAddr>,
    pub rejected: u64,
    pub duplicates: u64,
}

impl Endpoint for SawReceiver {
    fn handle_datagram(&mut self, _now: Instant, src: IpAddr, _sp: u16, _dp: u16, data: &[u8]) {
        let Some(body) = open(data) else {
            self.rejected += 1;
            return;
        };
        let Some((&[DATA, a, b, c, d], payload)) = body.split_first_chunk::<5>() else {
            self.rejected += 1;
            return;
        };
        let seq = u32::from_le_bytes([a, b, c, d]);
        if seq == self.expected {
            self.delivered.push(payload.to_vec());
            self.expected += 1;
        } else {
            self.duplicates += 1;
        }
        if seq <= self.expected {
            self.acks_owed.push_back(src);
        }
    }

    fn poll_transmit(&mut self, _now: Instant, buf: &mut [u8]) -> Option<Transmit> {
        let dst = self.acks_owed.pop_front()?;
        let mut msg = vec![ACK];
        msg.extend_from_slice(&self.expected.to_le_bytes());
        let msg = seal(msg);
        buf[..msg.len()].copy_from_slice(&msg);
        Some(Transmit { dst, src_port: PORT, dst_port: PORT, len: msg.len() })
    }

    fn poll_timeout(&self) -> Option<Instant> {
        None
    }

    fn handle_timeout(&mut self, _now: Instant) {}
}

/// Either side of the reliable toy, so both fit in one `Sim`.
#[derive(Debug)]
pub enum Saw {
    Sender(SawSender),
    Receiver(SawReceiver),
}

impl Saw {
    pub fn sender(&self) -> &SawSender {
        match self {
            Saw::Sender(s) => s,
            Saw::Receiver(_) => panic!("not a sender"),
        }
    }

    pub fn receiver(&self) -> &SawReceiver {
        match self {
            Saw::Receiver(r) => r,
            Saw::Sender(_) => panic!("not a receiver"),
        }
    }

    fn inner(&mut self) -> &mut dyn Endpoint {
        match self {
            Saw::Sender(s) => s,
            Saw::Receiver(r) => r,
        }
    }
}

impl Endpoint for Saw {
    fn handle_datagram(&mut self, now: Instant, src: IpAddr, src_port: u16, dst_port: u16, data: &[u8]) {
        self.inner().handle_datagram(now, src, src_port, dst_port, data)
    }

    fn poll_transmit(&mut self, now: Instant, buf: &mut [u8]) -> Option<Transmit> {
        self.inner().poll_transmit(now, buf)
    }

    fn poll_timeout(&self) -> Option<Instant> {
        match self {
            Saw::Sender(s) => s.poll_timeout(),
            Saw::Receiver(r) => r.poll_timeout(),
        }
    }

    fn handle_timeout(&mut self, now: Instant) {
        self.inner().handle_timeout(now)
    }
}

#[test]
fn crc32_matches_the_standard_check_value() {
    assert_eq!(crc32(b"123456789"), 0xCBF4_3926);
    let sealed = seal(b"abc".to_vec());
    assert_eq!(open(&sealed), Some(&b"abc"[..]));
    let mut bad = sealed.clone();
    bad[1] ^= 4;
    assert_eq!(open(&bad), None);
    assert_eq!(open(&[1, 2]), None);
}
