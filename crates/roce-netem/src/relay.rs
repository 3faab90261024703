//! The forwarding loop of one direction: poll the input, push what arrives through an [`Impairer`], write
//! what is due to the output. The relay runs two of them, one thread per direction.

use std::io;
use std::os::fd::AsFd;
use std::os::unix::net::UnixDatagram;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use rustix::event::{PollFd, PollFlags, Timespec, poll};

use crate::impair::{Impairer, Stats};

/// Largest packet read: a TUN's MTU is at most 65535.
pub const MAX_PACKET: usize = 65536;

/// Longest the loop sleeps before looking at the stop flag again.
const STOP_CHECK: Duration = Duration::from_millis(50);

/// Most packets read in one go before due packets are released again.
const READ_BATCH: usize = 256;

/// Something that carries whole packets, non-blocking: a TUN device, or a datagram socket in tests.
pub trait PacketPort: AsFd + Send + Sync {
    /// Reads one packet; `ErrorKind::WouldBlock` when none is waiting.
    fn recv_packet(&self, buf: &mut [u8]) -> io::Result<usize>;
    /// Writes one packet.
    fn send_packet(&self, packet: &[u8]) -> io::Result<()>;
}

impl PacketPort for UnixDatagram {
    fn recv_packet(&self, buf: &mut [u8]) -> io::Result<usize> {
        self.recv(buf)
    }

    fn send_packet(&self, packet: &[u8]) -> io::Result<()> {
        self.send(packet).map(|_| ())
    }
}

/// How one direction ended.
#[derive(Debug)]
pub struct DirectionReport {
    /// Label, e.g. `a->b (rnta -> rntb)`.
    pub label: String,
    /// Counters; `forwarded` counts successful writes only.
    pub stats: Stats,
    /// Writes that failed (the packets are lost; they are not in `forwarded`).
    pub write_errors: u64,
    /// Copies still queued when the relay stopped (never sent).
    pub pending: usize,
    /// The read or poll error that stopped this direction, if any.
    pub error: Option<io::Error>,
}

impl DirectionReport {
    /// The one-line summary: `LABEL: forwarded N, dropped N, duplicated N, reordered N, corrupted N`, with
    /// `, write errors N` and `, unsent N` appended only when not zero.
    pub fn summary(&self) -> String {
        let mut s = format!("{}: {}", self.label, self.stats);
        if self.write_errors > 0 {
            s.push_str(&format!(", write errors {}", self.write_errors));
        }
        if self.pending > 0 {
            s.push_str(&format!(", unsent {}", self.pending));
        }
        s
    }
}

/// Forwards packets from `input` to `output` through `imp` until `stop` is set (or reading fails, which
/// sets `stop` for the other direction too). Times are measured from `start`. Every `stats_every`, the
/// counters are printed to stderr (0: never).
pub fn run_direction(
    label: String,
    input: &dyn PacketPort,
    output: &dyn PacketPort,
    mut imp: Impairer,
    start: Instant,
    stop: &AtomicBool,
    stats_every: Option<Duration>,
) -> DirectionReport {
    let stats_every = stats_every.filter(|every| !every.is_zero());
    let mut buf = vec![0u8; MAX_PACKET];
    let mut write_errors = 0u64;
    let mut error = None;
    let mut next_stats = stats_every.map(|every| start.elapsed() + every);
    let write = |imp: &mut Impairer, now: Duration, write_errors: &mut u64| {
        while let Some(packet) = imp.pop_due(now) {
            if let Err(e) = output.send_packet(&packet) {
                *write_errors += 1;
                if *write_errors <= 5 || write_errors.is_power_of_two() {
                    eprintln!("roce-netem: {label}: write #{write_errors} failed: {e}");
                }
            }
        }
    };
    while !stop.load(Ordering::Relaxed) {
        let now = start.elapsed();
        write(&mut imp, now, &mut write_errors);
        if let (Some(at), Some(every)) = (next_stats, stats_every)
            && now >= at
        {
            let mut stats = imp.stats();
            stats.forwarded -= write_errors;
            eprintln!("roce-netem: t={:.3}s {label}: {stats}", now.as_secs_f64());
            let mut next = at + every;
            while next <= now {
                next += every;
            }
            next_stats = Some(next);
        }
        let mut wait = STOP_CHECK;
        for deadline in [imp.next_release(), next_stats].into_iter().flatten() {
            wait = wait.min(deadline.saturating_sub(now));
        }
        let timeout = Timespec { tv_sec: wait.as_secs() as _, tv_nsec: wait.subsec_nanos() as _ };
        let fd = input.as_fd();
        let mut fds = [PollFd::from_borrowed_fd(fd, PollFlags::IN)];
        match poll(&mut fds, Some(&timeout)) {
            Ok(0) => continue,
            Ok(_) => {}
            Err(rustix::io::Errno::INTR) => continue,
            Err(e) => {
                error = Some(io::Error::other(format!("poll: {e}")));
                break;
            }
        }
        for _ in 0..READ_BATCH {
            match input.recv_packet(&mut buf) {
                Ok(n) => imp.push(start.elapsed(), buf[..n].to_vec()),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => {
                    error = Some(io::Error::new(e.kind(), format!("read: {e}")));
                    break;
                }
            }
        }
        if error.is_some() {
            break;
        }
    }
    if error.is_some() {
        stop.store(true, Ordering::Relaxed);
    }
    let mut stats = imp.stats();
    stats.forwarded -= write_errors;
    DirectionReport { label, stats, write_errors, pending: imp.pending(), error }
}
