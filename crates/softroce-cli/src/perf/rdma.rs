//! The softroce side of a perf test: two ends (in one process with
//! `--loopback`, or server and client across the network), the QPs, and
//! the traffic loops of perftest's tests.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::time::{Duration, Instant};

use softroce::config::DeviceInfo;
use softroce::{
    AccessFlags, ConnectOptions, Context, Cq, Mr, Options, Payload, Qp, QpEndpoint, QpInit, RecvWr, SendFlags, SendWr,
    Sge, Wc, WcOpcode, WcStatus, WideMtu, WrOpcode,
};

use super::report::BwRow;
use super::{Op, PerfError, Settings};

/// Outstanding READs/atomics per QP, issued and accepted (the device maximum).
const RD_ATOMIC: u8 = 128;

/// One end: a context, a CQ, QPs and one region.
pub struct End {
    pub ctx: Context,
    pub cq: Cq,
    pub qps: Vec<Qp>,
    pub mr: Mr,
}

/// What each side tells the other: every QP (connected pairwise, QP i to
/// the peer's QP i), and the region.
#[derive(Debug, Clone)]
pub struct Remote {
    pub qps: Vec<QpEndpoint>,
    pub rkey: u32,
    pub addr: u64,
    /// The largest wide MTU this end takes, when it was asked to offer one
    /// (`--wide-mtu`): both ends use the smaller if both offer.
    pub wide: Option<WideMtu>,
}

impl End {
    pub fn open(info: &DeviceInfo, s: &Settings, region: usize) -> Result<End, PerfError> {
        let ctx = Context::open_with(info, Options::from_env()?)?;
        let pd = ctx.alloc_pd()?;
        let depth = s.tx_depth.max(s.rx_depth) as u32 + 1;
        let cq = ctx.create_cq((depth * s.qps as u32 * 2).min(32_767), None)?;
        let access = AccessFlags::LOCAL_WRITE
            | AccessFlags::REMOTE_WRITE
            | AccessFlags::REMOTE_READ
            | AccessFlags::REMOTE_ATOMIC;
        let mr = pd.reg_mr(region.max(64), access)?;
        let mut qps = Vec::new();
        for _ in 0..s.qps {
            let mut init = QpInit::rc(&cq, &cq, depth);
            init.cap.max_inline_data = s.inline_size as u32;
            qps.push(pd.create_qp(init)?);
        }
        Ok(End { ctx, cq, qps, mr })
    }

    pub fn remote(&self, s: &Settings, psn: u32) -> Remote {
        Remote {
            qps: self.qps.iter().map(|q| q.endpoint(psn)).collect(),
            rkey: self.mr.rkey(),
            addr: self.mr.addr(),
            wide: if s.wide_mtu { self.ctx.wide_mtu() } else { None },
        }
    }

    /// Connects every QP to the peer's; returns the payload bytes of a
    /// packet: the wide MTU both ends offered (the smaller), else the path MTU.
    pub fn connect(&self, s: &Settings, psn: u32, peer: &Remote) -> Result<usize, PerfError> {
        let wide = if s.wide_mtu { self.ctx.wide_mtu().zip(peer.wide).map(|(a, b)| a.min(b)) } else { None };
        let o = ConnectOptions {
            mtu: s.mtu,
            wide_mtu: wide,
            timeout: s.qp_timeout,
            max_rd_atomic: RD_ATOMIC,
            ..ConnectOptions::default()
        };
        if peer.qps.len() != self.qps.len() {
            return Err(PerfError::Usage(format!(
                "the peer has {} QPs, this side {}: use the same -q",
                peer.qps.len(),
                self.qps.len()
            )));
        }
        for (qp, theirs) in self.qps.iter().zip(&peer.qps) {
            qp.connect_with(psn, theirs, &o)?;
        }
        Ok(wide.map_or(s.mtu.unwrap_or(self.ctx.device().active_mtu()).bytes(), WideMtu::bytes))
    }
}

/// `rkey addr` then `qpn psn gid` per QP, on one line over TCP (perftest
/// exchanges the same facts over its Ethernet socket).
pub fn exchange(stream: &mut TcpStream, mine: &Remote) -> Result<Remote, PerfError> {
    let mut out = format!("{} {}", mine.rkey, mine.addr);
    for q in &mine.qps {
        out.push_str(&format!(" {} {} {}", q.qpn, q.psn, q.gid));
    }
    if let Some(w) = mine.wide {
        out.push_str(&format!(" {WIDE}{}", w.bytes()));
    }
    writeln!(stream, "{out}")?;
    let line = read_line(stream)?;
    let mut f: Vec<&str> = line.split_whitespace().collect();
    let bad = || PerfError::Exchange(line.trim().to_string());
    let wide = match f.last().and_then(|l| l.strip_prefix(WIDE)) {
        Some(w) => {
            let w = w.parse().ok().and_then(WideMtu::new).ok_or_else(bad)?;
            f.pop();
            Some(w)
        }
        None => None,
    };
    if f.len() < 5 || !(f.len() - 2).is_multiple_of(3) {
        return Err(bad());
    }
    let mut qps = Vec::new();
    for q in f[2..].chunks(3) {
        qps.push(QpEndpoint {
            qpn: q[0].parse().map_err(|_| bad())?,
            psn: q[1].parse().map_err(|_| bad())?,
            gid: q[2].parse().map_err(|_| bad())?,
        });
    }
    Ok(Remote { qps, rkey: f[0].parse().map_err(|_| bad())?, addr: f[1].parse().map_err(|_| bad())?, wide })
}

/// The exchange's last field when an end offers a wide MTU: `wide=BYTES`.
const WIDE: &str = "wide=";

/// The longest exchange line read (1,024 QPs of about 60 bytes each).
const MAX_LINE: usize = 1 << 17;

/// One line from the peer, read a byte at a time: a buffered reader would
/// also swallow what the peer sends after it (the first sync byte), and
/// the sync that follows would wait for it forever.
fn read_line(stream: &mut TcpStream) -> Result<String, PerfError> {
    let mut line = Vec::new();
    let mut b = [0u8; 1];
    loop {
        stream.read_exact(&mut b)?;
        if b[0] == b'\n' {
            return String::from_utf8(line).map_err(|e| PerfError::Exchange(format!("not UTF-8: {e}")));
        }
        if line.len() >= MAX_LINE {
            return Err(PerfError::Exchange(format!("no end of line in {MAX_LINE} bytes")));
        }
        line.push(b[0]);
    }
}

/// Client of a SEND test run for a time (`-D`): tells the server how many
/// SENDs completed on each QP, which its receiver then takes exactly.
pub fn send_counts(stream: &mut TcpStream, done: &[usize]) -> Result<(), PerfError> {
    let line: Vec<String> = done.iter().map(usize::to_string).collect();
    stream.write_all(format!("{}\n", line.join(" ")).as_bytes())?;
    Ok(())
}

/// Server of a SEND test run for a time: the client's counts (see
/// [`send_counts`]) once they came, looking at the stream without
/// blocking at most once a millisecond (the receiver polls its CQ
/// meanwhile). `qps` counts are expected.
pub struct PeerCounts<'a> {
    stream: &'a mut TcpStream,
    qps: usize,
    got: Vec<u8>,
    next_look: Instant,
}

impl<'a> PeerCounts<'a> {
    pub fn new(stream: &'a mut TcpStream, qps: usize) -> Result<PeerCounts<'a>, PerfError> {
        stream.set_nonblocking(true)?;
        Ok(PeerCounts { stream, qps, got: Vec::new(), next_look: Instant::now() })
    }

    /// The counts, once the whole line came.
    pub fn poll(&mut self) -> Result<Option<Vec<usize>>, PerfError> {
        let now = Instant::now();
        if now < self.next_look {
            return Ok(None);
        }
        self.next_look = now + Duration::from_millis(1);
        // One byte at a time: what follows the line (the sync) stays unread.
        let mut b = [0u8; 1];
        loop {
            match self.stream.read(&mut b) {
                Ok(0) => return Err(PerfError::Exchange("the client closed the connection".into())),
                Ok(_) if b[0] == b'\n' => break,
                Ok(_) if self.got.len() >= MAX_LINE => {
                    return Err(PerfError::Exchange(format!("no end of line in {MAX_LINE} bytes")));
                }
                Ok(_) => self.got.push(b[0]),
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return Ok(None),
                Err(e) => return Err(e.into()),
            }
        }
        self.stream.set_nonblocking(false)?;
        let bad = || PerfError::Exchange(format!("bad SEND counts: {:?}", String::from_utf8_lossy(&self.got)));
        let counts: Vec<usize> = std::str::from_utf8(&self.got)
            .map_err(|_| bad())?
            .split_whitespace()
            .map(|w| w.parse().map_err(|_| bad()))
            .collect::<Result<_, _>>()?;
        if counts.len() != self.qps {
            return Err(bad());
        }
        Ok(Some(counts))
    }
}

/// Server: accept one client on `port`.
pub fn accept(port: u16) -> Result<TcpStream, PerfError> {
    let l = TcpListener::bind(("0.0.0.0", port))?;
    Ok(l.accept()?.0)
}

fn empty_wc() -> [Wc; 64] {
    [Wc::new(0, WcStatus::Success, WcOpcode::Send, 0); 64]
}

fn check(w: &Wc) -> Result<(), PerfError> {
    if w.status == WcStatus::Success { Ok(()) } else { Err(PerfError::Completion(format!("{w:?}"))) }
}

/// The requester side of a bandwidth test: keeps `tx_depth` WRs in flight
/// per QP, signals every `cq_mod`-th, until `iters` messages (or the
/// duration) are done. Returns the row.
pub fn bw_client(
    e: &End,
    s: &Settings,
    peer: &Remote,
    size: usize,
    progress: &mut dyn FnMut(u64, Duration),
    peer_failed: &dyn Fn() -> bool,
) -> Result<(BwRow, Vec<usize>), PerfError> {
    let op = s.op;
    let opcode = match op {
        Op::Send => WrOpcode::Send,
        Op::Write => WrOpcode::RdmaWrite,
        Op::Read => WrOpcode::RdmaRead,
        Op::Atomic => WrOpcode::AtomicFetchAndAdd,
    };
    let size = if op == Op::Atomic { 8 } else { size };
    // perftest keeps as many READs/atomics outstanding as the device allows
    // (`max_qp_rd_atom`, 128 as in rxe).
    let depth = if matches!(op, Op::Read | Op::Atomic) { s.tx_depth.min(RD_ATOMIC as usize) } else { s.tx_depth };
    let cq_mod = s.cq_mod.min(depth).max(1);
    let deadline = s.duration.map(|d| Instant::now() + d);
    let iters = if deadline.is_some() { usize::MAX } else { s.iters };
    let inline = s.inline_size >= size && op != Op::Read && op != Op::Atomic && size > 0;
    let sge = [e.mr.sge(0, size as u32)];
    let mut wc = empty_wc();
    let mut posted = vec![0usize; e.qps.len()];
    let mut done = vec![0usize; e.qps.len()];
    let mut total_done = 0usize;
    let mut wrs: Vec<SendWr<'_>> = Vec::with_capacity(depth);
    let t0 = Instant::now();
    let mut last_report = t0;
    let mut peak: f64 = 0.0;
    let mut window = (t0, 0usize);
    let mut stop = false;
    loop {
        for (q, qp) in e.qps.iter().enumerate() {
            wrs.clear();
            while posted[q] - done[q] < depth && posted[q] < iters && !stop {
                let i = posted[q];
                let signaled = (i + 1).is_multiple_of(cq_mod) || i + 1 == iters;
                let mut flags = if signaled { SendFlags::SIGNALED } else { SendFlags::EMPTY };
                if inline {
                    flags = SendFlags(flags.0 | SendFlags::INLINE.0);
                }
                let mut wr = SendWr::new(((q as u64) << 48) | i as u64, opcode, flags, Payload::Sges(&sge));
                wr.remote_addr = peer.addr;
                wr.rkey = peer.rkey;
                wr.compare_add = 1;
                wrs.push(wr);
                posted[q] += 1;
            }
            if !wrs.is_empty() {
                qp.post_send_batch(&wrs).map_err(|(_, e)| e)?;
            }
        }
        if total_done >= iters.saturating_mul(e.qps.len()) || (stop && posted == done) {
            break;
        }
        if peer_failed() {
            // The receiving end (a thread of this process) gave up: what is
            // left would never complete.
            return Err(PerfError::Exchange("the receiving end failed".into()));
        }
        let n = next_completions(e, s, &mut wc, Duration::from_millis(100))?;
        for w in &wc[..n] {
            check(w)?;
            let q = (w.wr_id >> 48) as usize;
            let i = (w.wr_id & 0xffff_ffff_ffff) as usize;
            let newly = i + 1 - done[q];
            done[q] = i + 1;
            total_done += newly;
        }
        let now = Instant::now();
        if now.duration_since(window.0) >= Duration::from_millis(100) {
            let bytes = (total_done - window.1) * size;
            peak = peak.max(bytes as f64 / now.duration_since(window.0).as_secs_f64());
            window = (now, total_done);
        }
        if now.duration_since(last_report) >= Duration::from_secs(1) {
            progress((total_done * size) as u64, now - t0);
            last_report = now;
        }
        if let Some(d) = deadline
            && now >= d
            && !stop
        {
            // Time is up: one last signaled WR per QP completes every
            // unsignaled one before it, so the run can drain.
            stop = true;
            for (q, qp) in e.qps.iter().enumerate() {
                let mut wr = SendWr::new(
                    ((q as u64) << 48) | posted[q] as u64,
                    opcode,
                    SendFlags::SIGNALED,
                    Payload::Sges(&sge),
                );
                wr.remote_addr = peer.addr;
                wr.rkey = peer.rkey;
                wr.compare_add = 1;
                if posted[q] - done[q] >= depth {
                    // No room: the next completion frees some; try again.
                    stop = false;
                    continue;
                }
                qp.post_send(&wr)?;
                posted[q] += 1;
            }
        }
    }
    let secs = t0.elapsed().as_secs_f64();
    let avg = (total_done * size) as f64 / secs;
    let row =
        BwRow { bytes: size, iters: total_done, peak: peak.max(avg), avg, msg_rate: total_done as f64 / secs, secs };
    Ok((row, done))
}

/// Posts the receives a SEND bandwidth test starts with (see
/// [`bw_receiver`]); called before the client may send, as perftest's
/// server does before the exchange, so that no SEND meets an empty queue
/// (an RNR NAK would stall the sender for the RNR timer).
pub fn bw_prepost(
    e: &End,
    s: &Settings,
    size: usize,
    per_qp: usize,
    outstanding: &mut [usize],
) -> Result<(), PerfError> {
    let sge = [e.mr.sge(0, size as u32)];
    for (q, out) in outstanding.iter_mut().enumerate().take(e.qps.len()) {
        top_up(e, s, &sge, q, per_qp, out)?;
    }
    Ok(())
}

/// Posts receives on QP `q` until `outstanding` of them are posted: up to
/// `rx_depth`, and no more than the `left` messages it will still get.
fn top_up(e: &End, s: &Settings, sge: &[Sge], q: usize, left: usize, outstanding: &mut usize) -> Result<(), PerfError> {
    while *outstanding < s.rx_depth.max(1).min(left) {
        e.qps[q].post_recv(&RecvWr { wr_id: q as u64, sg_list: sge })?;
        *outstanding += 1;
    }
    Ok(())
}

/// Up to `wc.len()` completions, within `timeout` (0 when none came):
/// polled without pause, as perftest does unless told `-e` (the polling
/// thread receives the completions' packets itself; softroce yields its CPU
/// after 50 us of empty polls), or waited for in `Cq::wait` with `-e`.
fn next_completions(e: &End, s: &Settings, wc: &mut [Wc], timeout: Duration) -> Result<usize, PerfError> {
    if s.events {
        return Ok(e.cq.wait(wc, timeout)?);
    }
    // The clock is read every 64 empty polls: a busy poll is cheaper than
    // a clock read, and perftest's loops read none.
    let mut deadline = None;
    let mut empty = 0u32;
    loop {
        let n = e.cq.poll(wc)?;
        if n > 0 {
            return Ok(n);
        }
        empty = empty.wrapping_add(1);
        if empty.is_multiple_of(64) && Instant::now() > *deadline.get_or_insert_with(|| Instant::now() + timeout) {
            return Ok(0);
        }
    }
}

/// The responder side of a SEND bandwidth test: keeps up to `rx_depth`
/// receives posted per QP, never more than it will still get, and takes
/// `per_qp` completions on each QP, or, once `client_done` gives the SENDs
/// the client saw complete per QP (its run ended: `-D`, or an error, when
/// it gives zeros), exactly those. A receiver that left at the client's
/// end instead would leave completions of this round in the CQ, and the
/// next round would count them as its own, stop short, and post no more
/// receives: its client's last SENDs would meet RNR NAKs forever.
/// `outstanding` counts each QP's posted receives across calls: a round
/// that stopped early leaves some for the next.
pub fn bw_receiver(
    e: &End,
    s: &Settings,
    size: usize,
    per_qp: usize,
    client_done: &mut dyn FnMut() -> Result<Option<Vec<usize>>, PerfError>,
    outstanding: &mut [usize],
) -> Result<usize, PerfError> {
    let sge = [e.mr.sge(0, size as u32)];
    let mut got = vec![0usize; e.qps.len()];
    let mut wc = empty_wc();
    // Posted already by the caller, as a rule.
    bw_prepost(e, s, size, per_qp, outstanding)?;
    // A completed SEND's receive completion is already in the CQ: once the
    // client is done, what is missing comes at once or never.
    let mut drain_deadline = None;
    loop {
        let want = client_done()?;
        let target = |q: usize| want.as_ref().map_or(per_qp, |w| w.get(q).copied().unwrap_or(0));
        if got.iter().enumerate().all(|(q, &g)| g >= target(q)) {
            break;
        }
        if want.is_some() {
            let d = *drain_deadline.get_or_insert_with(|| Instant::now() + Duration::from_secs(5));
            if Instant::now() > d {
                return Err(PerfError::Exchange(format!(
                    "the client completed {want:?} SENDs per QP, the receiver saw {got:?}"
                )));
            }
        }
        let n = next_completions(e, s, &mut wc, Duration::from_millis(100))?;
        for w in &wc[..n] {
            check(w)?;
            let q = w.wr_id as usize;
            got[q] += 1;
            outstanding[q] = outstanding[q].saturating_sub(1);
            top_up(e, s, &sge, q, per_qp.saturating_sub(got[q]), &mut outstanding[q])?;
        }
    }
    Ok(got.iter().sum())
}

/// One side of a latency test. SEND: ping-pong (the server answers each
/// receive); WRITE: ping-pong of WRITEs, each side polling its memory for
/// the peer's next value; READ and atomics: the client alone, one at a
/// time. Returns the client's samples in microseconds (one-way for SEND and
/// WRITE, round trip for READ and atomics, as perftest reports). `first`:
/// the iterations run before on these QPs (a run in rounds continues).
pub fn lat_run(
    e: &End,
    s: &Settings,
    peer: &Remote,
    size: usize,
    client: bool,
    first: usize,
) -> Result<Vec<f64>, PerfError> {
    let mut samples = Vec::with_capacity(s.iters);
    let mut wc = empty_wc();
    let qp = &e.qps[0];
    let size = if s.op == Op::Atomic { 8 } else { size.max(1) };
    let inline = s.inline_size >= size && matches!(s.op, Op::Send | Op::Write);
    let flags = if inline { SendFlags::SIGNALED | SendFlags::INLINE } else { SendFlags::SIGNALED };
    // Sends from the first half of the region, receives (SEND) or is
    // written (WRITE) in the second: sizes of an -a run never collide.
    let half = e.mr.len() / 2;
    let sge = [e.mr.sge(0, size as u32)];
    let rsge = [e.mr.sge(half, (e.mr.len() - half) as u32)];
    // One completion at a time, as perftest takes them.
    let next = |wc: &mut [Wc; 64]| next_completions(e, s, &mut wc[..1], Duration::from_secs(10));
    let wait_for = |kind: WcOpcode, wc: &mut [Wc; 64]| -> Result<(), PerfError> {
        loop {
            let n = next(wc)?;
            if n == 0 {
                return Err(PerfError::Completion("no completion within 10 s".into()));
            }
            check(&wc[0])?;
            if wc[0].opcode == kind {
                return Ok(());
            }
        }
    };
    match s.op {
        Op::Send => {
            // Each side keeps one receive posted; the first run posts it.
            if first == 0 {
                qp.post_recv(&RecvWr { wr_id: 0, sg_list: &rsge })?;
            }
            for _ in 0..s.iters {
                let t = Instant::now();
                if client {
                    qp.post_send(&SendWr::new(1, WrOpcode::Send, flags, Payload::Sges(&sge)))?;
                    wait_for(WcOpcode::Recv, &mut wc)?;
                    qp.post_recv(&RecvWr { wr_id: 0, sg_list: &rsge })?;
                    samples.push(t.elapsed().as_secs_f64() * 1e6 / 2.0);
                } else {
                    wait_for(WcOpcode::Recv, &mut wc)?;
                    qp.post_recv(&RecvWr { wr_id: 0, sg_list: &rsge })?;
                    qp.post_send(&SendWr::new(1, WrOpcode::Send, flags, Payload::Sges(&sge)))?;
                }
            }
            // Collect the send completions left.
            let _ = e.cq.poll(&mut wc);
        }
        Op::Write => {
            // Each WRITE carries the iteration number in its last byte: the
            // peer spins on its memory for it, as perftest's write_lat does.
            let last = half + size - 1;
            let mut buf = [0u8; 1];
            for i in first..first + s.iters {
                let tag = (i % 255) as u8 + 1;
                let t = Instant::now();
                let mut wr = SendWr::new(i as u64, WrOpcode::RdmaWrite, flags, Payload::Sges(&sge));
                (wr.remote_addr, wr.rkey) = (peer.addr + half as u64, peer.rkey);
                // perftest spins on the last byte; here the thread also
                // receives the WRITE itself (with `-e` sleeping on the
                // socket between looks).
                let await_tag = |buf: &mut [u8; 1]| -> Result<(), PerfError> {
                    let deadline = Instant::now() + Duration::from_secs(10);
                    loop {
                        e.mr.read(last, buf)?;
                        if buf[0] == tag {
                            return Ok(());
                        }
                        if Instant::now() > deadline {
                            return Err(PerfError::Completion("the peer's WRITE did not arrive".into()));
                        }
                        if s.events {
                            e.ctx.progress_wait(Duration::from_millis(10))?;
                        } else {
                            e.ctx.progress()?;
                        }
                    }
                };
                if client {
                    e.mr.write(size - 1, &[tag])?;
                    qp.post_send(&wr)?;
                    await_tag(&mut buf)?;
                    samples.push(t.elapsed().as_secs_f64() * 1e6 / 2.0);
                } else {
                    await_tag(&mut buf)?;
                    e.mr.write(size - 1, &[tag])?;
                    qp.post_send(&wr)?;
                }
                wait_for(WcOpcode::RdmaWrite, &mut wc)?;
            }
        }
        Op::Read | Op::Atomic if client => {
            let opcode = if s.op == Op::Read { WrOpcode::RdmaRead } else { WrOpcode::AtomicFetchAndAdd };
            let kind = if s.op == Op::Read { WcOpcode::RdmaRead } else { WcOpcode::FetchAdd };
            for i in 0..s.iters {
                let t = Instant::now();
                let mut wr = SendWr::new(i as u64, opcode, SendFlags::SIGNALED, Payload::Sges(&sge));
                (wr.remote_addr, wr.rkey, wr.compare_add) = (peer.addr, peer.rkey, 1);
                qp.post_send(&wr)?;
                wait_for(kind, &mut wc)?;
                samples.push(t.elapsed().as_secs_f64() * 1e6);
            }
        }
        Op::Read | Op::Atomic => {}
    }
    Ok(samples)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The exchange line is read up to its newline and no further: the
    /// sync byte the peer sends right after it is still there to read.
    #[test]
    fn the_exchange_line_leaves_what_follows_it_unread() {
        let l = TcpListener::bind(("127.0.0.1", 0)).unwrap();
        let mut a = TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let mut b = l.accept().unwrap().0;
        a.write_all(b"1 2 3 4 127.0.0.1\nS").unwrap();
        assert_eq!(read_line(&mut b).unwrap(), "1 2 3 4 127.0.0.1");
        let mut s = [0u8; 1];
        b.read_exact(&mut s).unwrap();
        assert_eq!(&s, b"S");
        let w = std::thread::spawn(move || a.write_all(&[b'x'; MAX_LINE + 1]));
        assert!(matches!(read_line(&mut b), Err(PerfError::Exchange(_))));
        w.join().unwrap().unwrap();
    }

    /// A wide MTU offer rides at the end of the line and is read back; a
    /// line without one has none, and a bad one is refused, not guessed at.
    #[test]
    fn the_exchange_carries_a_wide_mtu_offer() {
        let l = TcpListener::bind(("127.0.0.1", 0)).unwrap();
        let mut a = TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let mut b = l.accept().unwrap().0;
        let qp = QpEndpoint { qpn: 0x11.into(), psn: 5, gid: "10.0.0.1".parse().unwrap() };
        let mine = Remote { qps: vec![qp], rkey: 7, addr: 4096, wide: WideMtu::new(1436) };
        let plain = Remote { wide: None, ..mine.clone() };
        let t = std::thread::spawn(move || exchange(&mut a, &mine).map(|r| (r.wide, a)));
        let got = exchange(&mut b, &plain).unwrap();
        let (theirs, mut a) = t.join().unwrap().unwrap();
        assert_eq!((got.wide, got.qps, got.rkey, got.addr), (WideMtu::new(1436), vec![qp], 7, 4096));
        assert_eq!(theirs, None, "a line without the offer has none");
        for bad in ["7 4096 17 5 10.0.0.1 wide=1437", "7 4096 17 5 10.0.0.1 wide=x", "7 4096 wide=1436"] {
            a.write_all(format!("{bad}\n").as_bytes()).unwrap();
            assert!(matches!(exchange(&mut b, &plain), Err(PerfError::Exchange(_))), "{bad}");
            // Take the line `exchange` sent back.
            read_line(&mut a).unwrap();
        }
    }
}
