//! The baseline measured in the same run: the same traffic over plain UDP
//! sockets on loopback, with the same batching allowed (`sendmmsg` with
//! GSO, `recvmmsg` with GRO) and the same packet sizes as the RoCEv2 packets
//! (BTH, RETH on a message's first packet, ICRC), but no RDMA processing at
//! all: what the machine itself can do. Bandwidth is timed as softroce's
//! is (perftest's way): by the sender, from its first send until it learns
//! that the last packet arrived. Latency is a UDP ping-pong of equally
//! sized datagrams. Both wait as softroce's tests wait: polling without
//! pause (as perftest polls its CQs), or blocking, as they sleep with `-e`.

use std::net::{IpAddr, Ipv4Addr, SocketAddr, UdpSocket};
use std::os::fd::AsFd;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use roce_udp::{Interest, RecvBatch, SendBatch, Socket, wait};

use super::PerfError;

const BTH: usize = 12;
const RETH: usize = 16;
const ICRC: usize = 4;

/// The UDP payload sizes of one RoCEv2 message of `size` bytes at `mtu`
/// (`first_ext`: extended header bytes on the first packet, e.g. RETH).
pub fn packet_sizes(size: usize, mtu: usize, first_ext: usize) -> Vec<usize> {
    let n = size.div_ceil(mtu).max(1);
    (0..n)
        .map(|i| {
            let payload = (size - i * mtu).min(mtu);
            BTH + if i == 0 { first_ext } else { 0 } + payload.next_multiple_of(4) + ICRC
        })
        .collect()
}

/// Message payload moved and the time it took.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Moved {
    /// Bytes of message payload.
    pub bytes: f64,
    /// Seconds from the first packet sent until the sender learned that
    /// the last one arrived.
    pub secs: f64,
}

impl Moved {
    /// Bytes per second (0 when nothing was timed).
    pub fn rate(&self) -> f64 {
        if self.secs > 0.0 { self.bytes / self.secs } else { 0.0 }
    }
}

impl std::ops::AddAssign for Moved {
    fn add_assign(&mut self, o: Moved) {
        self.bytes += o.bytes;
        self.secs += o.secs;
    }
}

/// The goodput of `msgs` messages of `size` bytes over UDP with at most
/// `depth` messages in flight, timed as perftest times softroce: by the
/// sender, from its first send until it learns that the last packet
/// arrived (the receiver's count, the RDMA ACK's part). The receiver is
/// waiting before the clock starts, so nothing queued before it looked
/// counts as received in no time. `busy`: both ends poll their sockets
/// without pause when they find nothing (else they sleep in `poll`).
///
/// Raw UDP does not retransmit: a packet the receiver's full socket
/// dropped is never counted. The window still knows exactly what is
/// settled: each packet carries its number, loopback delivers in order, so
/// once the receiver has read packet `k` every packet before it was read
/// or dropped. The receiver reports its count and the number after the
/// highest it read; after [`STALL`] without news the sender sends a probe
/// (a [`PROBE_LEN`]-byte datagram carrying its last packet's number) that
/// settles everything when read. The window never opens on a guess, so
/// the receiver's queue holds at most the window.
pub fn bw(size: usize, mtu: usize, msgs: usize, depth: usize, busy: bool) -> Result<Moved, PerfError> {
    let rx_addr = IpAddr::V4(Ipv4Addr::new(127, 0, 0, 5));
    let tx_addr = IpAddr::V4(Ipv4Addr::new(127, 0, 0, 4));
    let rx = Socket::bind_addr(SocketAddr::new(rx_addr, 0))?;
    let tx = Socket::bind_addr(SocketAddr::new(tx_addr, 0))?;
    let rx_to = rx.local_addr();
    let tx_back = tx.local_addr();
    let sizes = packet_sizes(size, mtu, RETH);
    let per_msg = sizes.len() as u64;
    let total_pkts = per_msg * msgs as u64;
    let ready = Arc::new(AtomicBool::new(false));
    let done = Arc::new(AtomicBool::new(false));
    // The receiver: counts packets (not probes), reports (count, highest
    // number read + 1) every 16 packets, after a probe and whenever the
    // socket runs dry (the RDMA ACK's part), stops when all arrived or told to.
    let (r2, d2) = (ready.clone(), done.clone());
    let receiver = std::thread::spawn(move || -> Result<u64, PerfError> {
        let mut batch = RecvBatch::new(64);
        let (mut count, mut seen) = (0u64, 0u64);
        let mut since_report = 0u64;
        let report = |count: u64, seen: u64| -> Result<(), PerfError> {
            let mut r = [0u8; 16];
            r[..8].copy_from_slice(&count.to_le_bytes());
            r[8..].copy_from_slice(&seen.to_le_bytes());
            rx.send_to(&r, tx_back)?;
            Ok(())
        };
        r2.store(true, Ordering::Release);
        while count < total_pkts && !d2.load(Ordering::Relaxed) {
            let n = rx.recv(&mut batch)?;
            if n == 0 {
                if since_report > 0 {
                    report(count, seen)?;
                    since_report = 0;
                }
                if busy {
                    // As softroce's pollers: the CPU goes to whatever else
                    // is runnable on it (the sender, on a loaded machine).
                    std::thread::yield_now();
                } else {
                    wait(&[(rx.as_fd(), Interest::READABLE)], None, Some(Duration::from_millis(5)))?;
                }
                continue;
            }
            for seg in batch.segments() {
                let Some(number) = seg.data.first_chunk::<8>().map(|b| u64::from_le_bytes(*b)) else { continue };
                seen = seen.max(number + 1);
                if seg.data.len() == PROBE_LEN {
                    // Reported at once: the sender waits for it.
                    since_report += 16;
                } else {
                    count += 1;
                    since_report += 1;
                }
            }
            if since_report >= 16 {
                report(count, seen)?;
                since_report = 0;
            }
        }
        report(count, seen)?;
        Ok(count)
    });
    let waiting_since = Instant::now();
    while !ready.load(Ordering::Acquire) {
        if waiting_since.elapsed() > Duration::from_secs(5) {
            done.store(true, Ordering::Relaxed);
            return Err(PerfError::Baseline("the receiver thread did not start".into()));
        }
        std::thread::yield_now();
    }
    let mut batch = SendBatch::new(64, 64 * 4200);
    let mut payload = vec![0x5au8; 4200];
    // What the receiver confirmed, and when the sender learned it; and how
    // many packets are settled (read or dropped).
    let t0 = Instant::now();
    let (mut confirmed, mut confirmed_at, mut settled) = (0u64, t0, 0u64);
    let mut report_buf = RecvBatch::with_slot_size(16, 64);
    // Reads the receiver's reports; whether anything moved.
    let mut read_reports = |confirmed: &mut u64, confirmed_at: &mut Instant, settled: &mut u64| {
        let before = (*confirmed, *settled);
        while tx.recv(&mut report_buf)? > 0 {
            for seg in report_buf.segments() {
                if let Ok(r) = <[u8; 16]>::try_from(seg.data) {
                    let (count, seen) = (
                        u64::from_le_bytes(r[..8].try_into().expect("8")),
                        u64::from_le_bytes(r[8..].try_into().expect("8")),
                    );
                    *confirmed = (*confirmed).max(count);
                    *settled = (*settled).max(seen);
                }
            }
        }
        if *confirmed > before.0 {
            *confirmed_at = Instant::now();
        }
        Ok::<bool, PerfError>((*confirmed, *settled) != before)
    };
    // A probe for everything sent so far (`sent` packets).
    let probe = |sent: u64| -> Result<(), PerfError> {
        let mut p = [0u8; PROBE_LEN];
        p[..8].copy_from_slice(&sent.saturating_sub(1).to_le_bytes());
        tx.send_to(&p, rx_to)?;
        Ok(())
    };
    let mut sent = 0u64;
    let window = (depth as u64 * per_msg).max(per_msg);
    let mut stalled_since = Instant::now();
    while sent < total_pkts {
        while sent < total_pkts && sent - settled.min(sent) < window {
            let sz = sizes[(sent % per_msg) as usize];
            payload[..8].copy_from_slice(&sent.to_le_bytes());
            if batch.push(rx_to, &payload[..sz]).is_err() {
                flush(&mut batch, &tx)?;
                continue;
            }
            sent += 1;
        }
        flush(&mut batch, &tx)?;
        if read_reports(&mut confirmed, &mut confirmed_at, &mut settled)? {
            stalled_since = Instant::now();
        } else if stalled_since.elapsed() > STALL {
            // Nothing for a while: the rest of the window may be lost.
            probe(sent)?;
            stalled_since = Instant::now();
        } else if busy {
            // A sender spinning on a full window would starve a receiver
            // that shares its CPU.
            std::thread::yield_now();
        } else {
            wait(&[(tx.as_fd(), Interest::READABLE)], None, Some(Duration::from_micros(200)))?;
        }
    }
    flush(&mut batch, &tx)?;
    // Wait until every packet is settled (probing when nothing comes), at
    // most a second, then stop the receiver.
    let give_up = Instant::now() + Duration::from_secs(1);
    let mut last_news = Instant::now();
    while settled < total_pkts && confirmed < total_pkts && Instant::now() < give_up {
        if read_reports(&mut confirmed, &mut confirmed_at, &mut settled)? {
            last_news = Instant::now();
        } else if last_news.elapsed() > STALL {
            probe(sent)?;
            last_news = Instant::now();
        } else {
            wait(&[(tx.as_fd(), Interest::READABLE)], None, Some(Duration::from_millis(1)))?;
        }
    }
    done.store(true, Ordering::Relaxed);
    receiver.join().map_err(|_| PerfError::Baseline("receiver thread panicked".into()))??;
    let msgs_in = confirmed.min(total_pkts) / per_msg;
    Ok(Moved { bytes: msgs_in as f64 * size as f64, secs: confirmed_at.duration_since(t0).as_secs_f64().max(1e-9) })
}

/// How long the bandwidth baseline's sender waits for news before it probes.
const STALL: Duration = Duration::from_millis(5);
/// A probe's length: a packet number and a byte (data packets are longer
/// and a multiple of four).
const PROBE_LEN: usize = 9;

fn flush(batch: &mut SendBatch<'_>, sock: &Socket) -> Result<(), PerfError> {
    loop {
        let f = batch.flush(sock)?;
        if f.pending == 0 {
            return Ok(());
        }
        wait(&[(sock.as_fd(), Interest::WRITABLE)], None, Some(Duration::from_millis(10)))?;
    }
}

/// One-way latencies (round trip / 2, or the round trip when `round_trip`)
/// in microseconds of a UDP ping-pong: `req` bytes out, `resp` bytes back;
/// receives that poll without pause (`busy`, as softroce's latency tests
/// poll their CQs) or block.
pub fn lat(req: usize, resp: usize, iters: usize, round_trip: bool, busy: bool) -> Result<Vec<f64>, PerfError> {
    let a = UdpSocket::bind((Ipv4Addr::new(127, 0, 0, 4), 0))?;
    let b = UdpSocket::bind((Ipv4Addr::new(127, 0, 0, 5), 0))?;
    let (a_addr, b_addr) = (a.local_addr()?, b.local_addr()?);
    for s in [&a, &b] {
        s.set_read_timeout(Some(Duration::from_secs(5)))?;
        s.set_nonblocking(busy)?;
    }
    let echo = std::thread::spawn(move || -> std::io::Result<()> {
        let mut buf = vec![0u8; 65536];
        let out = vec![0u8; resp];
        for _ in 0..iters + 10 {
            recv(&b, &mut buf)?;
            b.send_to(&out, a_addr)?;
        }
        Ok(())
    });
    let out = vec![0u8; req];
    let mut buf = vec![0u8; 65536];
    let mut samples = Vec::with_capacity(iters);
    for i in 0..iters + 10 {
        let t = Instant::now();
        a.send_to(&out, b_addr)?;
        recv(&a, &mut buf)?;
        if i >= 10 {
            let us = t.elapsed().as_secs_f64() * 1e6;
            samples.push(if round_trip { us } else { us / 2.0 });
        }
    }
    echo.join().map_err(|_| PerfError::Baseline("echo thread panicked".into()))??;
    Ok(samples)
}

/// One datagram: a blocking receive (5 s timeout), or on a non-blocking
/// socket, receives retried without pause for up to 5 s.
fn recv(sock: &UdpSocket, buf: &mut [u8]) -> std::io::Result<usize> {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        match sock.recv(buf) {
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock && Instant::now() < deadline => {
                std::hint::spin_loop();
            }
            r => return r,
        }
    }
}

/// RoCEv2 sizes of a latency test's request and response datagrams.
pub fn lat_sizes(op: super::Op, size: usize) -> (usize, usize) {
    use super::Op;
    match op {
        Op::Send => (BTH + size.next_multiple_of(4) + ICRC, BTH + size.next_multiple_of(4) + ICRC),
        Op::Write => (BTH + RETH + size.next_multiple_of(4) + ICRC, BTH + RETH + size.next_multiple_of(4) + ICRC),
        Op::Read => (BTH + RETH + ICRC, BTH + 4 + size.next_multiple_of(4) + ICRC),
        Op::Atomic => (BTH + 28 + ICRC, BTH + 4 + 8 + ICRC),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn packet_sizes_follow_the_roce_layout() {
        assert_eq!(packet_sizes(65536, 4096, RETH).len(), 16);
        assert_eq!(packet_sizes(65536, 4096, RETH)[0], 12 + 16 + 4096 + 4);
        assert_eq!(packet_sizes(65536, 4096, RETH)[1], 12 + 4096 + 4);
        assert_eq!(packet_sizes(8, 4096, RETH), [12 + 16 + 8 + 4]);
        assert_eq!(packet_sizes(0, 4096, 0), [16]);
    }

    #[test]
    fn the_bandwidth_baseline_counts_what_the_receiver_confirmed_over_the_senders_time() {
        // Polling and sleeping alike.
        for busy in [true, false] {
            let started = Instant::now();
            // A window (16 x 64 KiB) the receiver's 8 MiB socket holds
            // whole: nothing can be dropped, so everything is counted.
            let m = bw(65536, 4096, 300, 16, busy).unwrap();
            let wall = started.elapsed().as_secs_f64();
            assert_eq!(m.bytes, 300.0 * 65536.0, "busy {busy}");
            // Timed inside the call, from the first send to the last
            // confirmation: a positive span no longer than the call itself.
            assert!(m.secs > 0.0 && m.secs <= wall, "busy {busy}: {m:?} in {wall} s");
        }
    }
}
