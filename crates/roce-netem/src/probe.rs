//! Probe traffic for checking a relay end to end: numbered UDP datagrams whose every byte is known, a
//! paced sender and a receiver that classifies what arrives (intact, duplicate, one bit flipped, garbled,
//! late).
//!
//! A datagram of `size` bytes (at least [`HEADER_LEN`]) is: the magic `RNEM`, the sequence number (u32,
//! big-endian), its bitwise complement, then filler bytes that depend only on their position. A single
//! flipped bit anywhere, even in the sequence number, is therefore recognised as exactly one flipped bit.

use std::collections::HashSet;
use std::fmt;
use std::io::{self, Write};
use std::net::UdpSocket;
use std::time::{Duration, Instant};

/// Magic at the start of every probe datagram.
pub const MAGIC: [u8; 4] = *b"RNEM";
/// Bytes before the filler: magic, sequence number, complemented sequence number.
pub const HEADER_LEN: usize = 12;

fn filler(i: usize) -> u8 {
    (i.wrapping_mul(131).wrapping_add(7) % 251) as u8
}

/// The probe datagrams of one size: builds and classifies them (the filler is computed once).
#[derive(Debug, Clone)]
pub struct Probe {
    /// Datagram 0.
    template: Vec<u8>,
}

impl Probe {
    /// Probe datagrams of `size` bytes (raised to [`HEADER_LEN`] if smaller).
    pub fn new(size: usize) -> Probe {
        let size = size.max(HEADER_LEN);
        let mut template = Vec::with_capacity(size);
        template.extend_from_slice(&MAGIC);
        template.extend_from_slice(&0u32.to_be_bytes());
        template.extend_from_slice(&(!0u32).to_be_bytes());
        template.extend((HEADER_LEN..size).map(filler));
        Probe { template }
    }

    /// Datagram size.
    pub fn size(&self) -> usize {
        self.template.len()
    }

    /// Builds datagram `seq`.
    pub fn datagram(&self, seq: u32) -> Vec<u8> {
        let mut d = self.template.clone();
        d[4..8].copy_from_slice(&seq.to_be_bytes());
        d[8..12].copy_from_slice(&(!seq).to_be_bytes());
        d
    }

    /// Classifies a received datagram.
    pub fn classify(&self, data: &[u8]) -> Verdict {
        if data.len() != self.template.len() {
            return Verdict::Garbled;
        }
        let seq = u32::from_be_bytes([data[4], data[5], data[6], data[7]]);
        let inv = !u32::from_be_bytes([data[8], data[9], data[10], data[11]]);
        // Fast path (a plain comparison): intact.
        if seq == inv && data[..4] == MAGIC && data[HEADER_LEN..] == self.template[HEADER_LEN..] {
            return Verdict::Intact(seq);
        }
        // If a bit flipped in one of the two copies of the sequence number, the other one is right.
        let filler_distance: u32 =
            data[HEADER_LEN..].iter().zip(&self.template[HEADER_LEN..]).map(|(a, b)| (a ^ b).count_ones()).sum();
        let magic_distance: u32 = data[..4].iter().zip(&MAGIC).map(|(a, b)| (a ^ b).count_ones()).sum();
        for candidate in [seq, inv] {
            let header = (seq ^ candidate).count_ones() + (inv ^ candidate).count_ones();
            if magic_distance + header + filler_distance == 1 {
                return Verdict::OneBitFlipped(candidate);
            }
        }
        Verdict::Garbled
    }
}

/// Builds probe datagram `seq` of `size` bytes (`size` is raised to [`HEADER_LEN`] if smaller).
pub fn make_datagram(seq: u32, size: usize) -> Vec<u8> {
    Probe::new(size).datagram(seq)
}

/// What a received datagram is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Exactly probe datagram `seq`.
    Intact(u32),
    /// Probe datagram `seq` with exactly one bit flipped.
    OneBitFlipped(u32),
    /// Anything else: wrong size, or more than one bit differs from every candidate.
    Garbled,
}

/// Classifies a received datagram against probe datagrams of `size` bytes.
pub fn classify(data: &[u8], size: usize) -> Verdict {
    Probe::new(size).classify(data)
}

/// What a receiver saw.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Tally {
    /// Datagrams received.
    pub received: u64,
    /// Datagrams received intact (first copies and duplicates).
    pub intact: u64,
    /// Distinct sequence numbers received intact.
    pub unique: u64,
    /// Intact datagrams whose sequence number had already arrived intact.
    pub duplicates: u64,
    /// Datagrams with exactly one bit flipped.
    pub corrupted: u64,
    /// Datagrams that are neither intact nor one bit off.
    pub garbled: u64,
    /// First intact arrivals of a sequence number lower than one already seen: arrived out of order.
    pub late: u64,
    /// Lowest sequence numbers not received intact (at most 10), when the expected count is known.
    pub missing_sample: Vec<u32>,
}

impl fmt::Display for Tally {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "received={} intact={} unique={} duplicates={} corrupted={} garbled={} late={}",
            self.received, self.intact, self.unique, self.duplicates, self.corrupted, self.garbled, self.late
        )?;
        if !self.missing_sample.is_empty() {
            let list: Vec<String> = self.missing_sample.iter().map(u32::to_string).collect();
            write!(f, " missing_sample={}", list.join(","))?;
        }
        Ok(())
    }
}

impl Tally {
    /// Parses the `key=value` line that [`fmt::Display`] writes (unknown keys are ignored).
    pub fn parse(line: &str) -> Option<Tally> {
        let mut t = Tally::default();
        let mut seen = 0;
        for word in line.split_whitespace() {
            let Some((key, value)) = word.split_once('=') else { continue };
            if key == "missing_sample" {
                t.missing_sample = value.split(',').filter_map(|v| v.parse().ok()).collect();
                continue;
            }
            let field = match key {
                "received" => &mut t.received,
                "intact" => &mut t.intact,
                "unique" => &mut t.unique,
                "duplicates" => &mut t.duplicates,
                "corrupted" => &mut t.corrupted,
                "garbled" => &mut t.garbled,
                "late" => &mut t.late,
                _ => continue,
            };
            *field = value.parse().ok()?;
            seen += 1;
        }
        (seen == 7).then_some(t)
    }
}

/// Accumulates verdicts into a [`Tally`].
#[derive(Debug, Default)]
pub struct Counter {
    tally: Tally,
    seen: HashSet<u32>,
    highest: Option<u32>,
}

impl Counter {
    /// Records one received datagram.
    pub fn record(&mut self, verdict: Verdict) {
        let t = &mut self.tally;
        t.received += 1;
        match verdict {
            Verdict::Intact(seq) => {
                t.intact += 1;
                if self.seen.insert(seq) {
                    t.unique += 1;
                    if self.highest.is_some_and(|h| seq < h) {
                        t.late += 1;
                    }
                    self.highest = Some(self.highest.map_or(seq, |h| h.max(seq)));
                } else {
                    t.duplicates += 1;
                }
            }
            Verdict::OneBitFlipped(_) => t.corrupted += 1,
            Verdict::Garbled => t.garbled += 1,
        }
    }

    /// The tally so far; with `expected` = number of datagrams sent, also a sample of missing ones.
    pub fn tally(&self, expected: Option<u32>) -> Tally {
        let mut t = self.tally.clone();
        if let Some(n) = expected {
            t.missing_sample = (0..n).filter(|s| !self.seen.contains(s)).take(10).collect();
        }
        t
    }
}

/// Sender settings.
#[derive(Debug, Clone)]
pub struct SendOptions {
    /// Number of datagrams (sequence numbers 0 to count - 1).
    pub count: u32,
    /// Bytes per datagram (UDP payload).
    pub size: usize,
    /// Datagrams sent back to back before pausing; 0 picks about 16 kB worth (1 to 16 datagrams).
    pub burst: u32,
    /// Pause after each burst.
    pub gap: Duration,
}

/// Sends the probe datagrams on a socket already connected to the receiver; returns how many were sent.
pub fn send_probes(socket: &UdpSocket, opts: &SendOptions) -> io::Result<u32> {
    let probe = Probe::new(opts.size);
    let burst = if opts.burst > 0 { opts.burst } else { (16_000 / probe.size()).clamp(1, 16) as u32 };
    for seq in 0..opts.count {
        let d = probe.datagram(seq);
        loop {
            match socket.send(&d) {
                Ok(_) => break,
                // A full socket or device queue: wait a moment and retry rather than lose the datagram.
                Err(e) if e.raw_os_error() == Some(libc::ENOBUFS) || e.kind() == io::ErrorKind::WouldBlock => {
                    std::thread::sleep(Duration::from_micros(200))
                }
                Err(e) => return Err(e),
            }
        }
        if (seq + 1) % burst == 0 && !opts.gap.is_zero() {
            std::thread::sleep(opts.gap);
        }
    }
    Ok(opts.count)
}

/// Receiver settings.
#[derive(Debug, Clone)]
pub struct RecvOptions {
    /// Expected datagram size.
    pub size: usize,
    /// Number sent, if known (for the sample of missing ones).
    pub expected: Option<u32>,
    /// Stop after this long without a datagram, once the first one has arrived.
    pub idle: Duration,
    /// Stop after this long in all, even if nothing arrived.
    pub timeout: Duration,
}

/// Receive buffer asked for (the kernel caps it at `net.core.rmem_max`): large datagrams in bursts
/// overflow the default one.
pub const RECV_BUFFER: usize = 4 << 20;

/// Receives probe datagrams on a bound socket until it has been idle for `idle` after the first one, or
/// `timeout` has passed. The socket's receive buffer is raised towards [`RECV_BUFFER`] first. If `ready` is
/// given, `ready\n` is written and flushed to it then.
pub fn receive_probes(socket: &UdpSocket, opts: &RecvOptions, ready: Option<&mut dyn Write>) -> io::Result<Tally> {
    rustix::net::sockopt::set_socket_recv_buffer_size(socket, RECV_BUFFER)?;
    if let Some(w) = ready {
        w.write_all(b"ready\n")?;
        w.flush()?;
    }
    let start = Instant::now();
    let mut last: Option<Instant> = None;
    let mut counter = Counter::default();
    let probe = Probe::new(opts.size);
    let mut buf = vec![0u8; 65536];
    socket.set_read_timeout(Some(Duration::from_millis(20)))?;
    loop {
        let now = Instant::now();
        if now.duration_since(start) >= opts.timeout || last.is_some_and(|l| now.duration_since(l) >= opts.idle) {
            break;
        }
        match socket.recv(&mut buf) {
            Ok(n) => {
                counter.record(probe.classify(&buf[..n]));
                last = Some(Instant::now());
            }
            Err(e) if matches!(e.kind(), io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut) => {}
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(counter.tally(opts.expected))
}
