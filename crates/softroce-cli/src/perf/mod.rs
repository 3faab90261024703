//! `softroce perf`: perftest's tests (`ib_{send,write,read,atomic}_{bw,lat}`)
//! over softroce, with perftest's main options and tables; `--loopback`
//! runs both ends in this process with no configuration, and `--baseline`
//! measures the same traffic over plain UDP sockets in the same run, the
//! two taking turns in rounds, and prints the ratio beside each row.

mod baseline;
pub mod lossy;
pub mod middleware;
mod plot;
mod rdma;
pub mod report;
pub mod sharing;

use std::io::{IsTerminal, Write};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Args, ValueEnum};

use report::{BwRow, LatRow, RULE};
use softroce::config::LoopbackLease;

/// Which perftest test.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Test {
    /// `ib_send_bw`.
    SendBw,
    /// `ib_write_bw`.
    WriteBw,
    /// `ib_read_bw`.
    ReadBw,
    /// `ib_atomic_bw`.
    AtomicBw,
    /// `ib_send_lat`.
    SendLat,
    /// `ib_write_lat`.
    WriteLat,
    /// `ib_read_lat`.
    ReadLat,
    /// `ib_atomic_lat`.
    AtomicLat,
}

/// The operation a test moves data with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    /// SEND / receive.
    Send,
    /// RDMA WRITE.
    Write,
    /// RDMA READ.
    Read,
    /// FETCH_AND_ADD.
    Atomic,
}

impl Test {
    fn op(self) -> Op {
        match self {
            Test::SendBw | Test::SendLat => Op::Send,
            Test::WriteBw | Test::WriteLat => Op::Write,
            Test::ReadBw | Test::ReadLat => Op::Read,
            Test::AtomicBw | Test::AtomicLat => Op::Atomic,
        }
    }

    fn is_bw(self) -> bool {
        matches!(self, Test::SendBw | Test::WriteBw | Test::ReadBw | Test::AtomicBw)
    }

    fn title(self) -> &'static str {
        match self {
            Test::SendBw => "Send BW Test",
            Test::WriteBw => "RDMA_Write BW Test",
            Test::ReadBw => "RDMA_Read BW Test",
            Test::AtomicBw => "Atomic FETCH_AND_ADD BW Test",
            Test::SendLat => "Send Latency Test",
            Test::WriteLat => "RDMA_Write Latency Test",
            Test::ReadLat => "RDMA_Read Latency Test",
            Test::AtomicLat => "Atomic FETCH_AND_ADD Latency Test",
        }
    }
}

/// `softroce perf` options (perftest's names).
#[derive(Debug, Args)]
pub struct PerfArgs {
    /// The test.
    #[arg(value_enum)]
    test: Test,
    /// Run as the client of the server on HOST (without it: the server).
    host: Option<String>,
    /// Device to use (default: the first, or two free loopback addresses with --loopback).
    #[arg(short = 'd', long = "ib-dev")]
    device: Option<String>,
    /// Port of the device (softroce devices have one).
    #[arg(short = 'i', long = "ib-port", default_value_t = 1)]
    ib_port: u8,
    /// GID index (default: the IPv4 GID, 1).
    #[arg(short = 'x', long = "gid-index")]
    gid_index: Option<usize>,
    /// Message size (default 65536 for bandwidth tests, 2 for latency).
    #[arg(short = 's', long = "size")]
    size: Option<usize>,
    /// Iterations (default 5000 for bandwidth tests, 1000 for latency).
    #[arg(short = 'n', long = "iters")]
    iters: Option<usize>,
    /// Run sizes 2 to 2^23.
    #[arg(short = 'a', long = "all")]
    all: bool,
    /// QPs.
    #[arg(short = 'q', long = "qp", default_value_t = 1)]
    qps: usize,
    /// Connection type (RC only).
    #[arg(short = 'c', long = "connection", default_value = "RC")]
    connection: String,
    /// Send queue depth (default 128 for bandwidth tests, 1 for latency).
    #[arg(short = 't', long = "tx-depth")]
    tx_depth: Option<usize>,
    /// Run for this many seconds instead of a number of iterations.
    #[arg(short = 'D', long = "duration")]
    duration: Option<u64>,
    /// Do not fail on CPU frequency warnings (accepted for perftest compatibility).
    #[arg(short = 'F', long = "CPU-freq")]
    cpu_freq: bool,
    /// Report bandwidth in Gbit/s.
    #[arg(long = "report_gbits")]
    report_gbits: bool,
    /// TCP port of the out-of-band exchange.
    #[arg(short = 'p', long = "port", default_value_t = 18515)]
    port: u16,
    /// Path MTU (256..4096; default: the port's active MTU).
    #[arg(short = 'm', long = "mtu")]
    mtu: Option<usize>,
    /// Offer softroce's wide MTU (not IBTA's: the payload the link carries,
    /// up to 8,936 bytes); used when the peer offers it too, else -m's.
    #[arg(long = "wide-mtu")]
    wide_mtu: bool,
    /// Send messages up to this size inline.
    #[arg(short = 'I', long = "inline_size", default_value_t = 0)]
    inline_size: usize,
    /// QP timeout exponent (4.096 us x 2^N).
    #[arg(short = 'u', long = "qp-timeout", default_value_t = 14)]
    qp_timeout: u8,
    /// Signal every N-th send (CQ moderation).
    #[arg(short = 'Q', long = "cq-mod", default_value_t = 100)]
    cq_mod: usize,
    /// Both ends in this process on two free loopback addresses (127.0.0.2 and .3 unless another run holds them): no configuration.
    #[arg(long)]
    loopback: bool,
    /// Also measure the same traffic over plain UDP sockets, taking turns with
    /// softroce in up to 5 rounds, and print the ratio.
    #[arg(long)]
    baseline: bool,
    /// With -a: draw bandwidth and latency against message size into this SVG.
    #[arg(long)]
    plot: Option<PathBuf>,
    /// Print the counters (rxe names) at the end.
    #[arg(long)]
    stats: bool,
    /// Sleep until completions come (in `Cq::wait`, and for write-lat
    /// between looks at memory); without it every test polls without pause,
    /// as perftest's do (softroce yields the CPU after 50 us of empty polls,
    /// so a peer on the same core still runs). The baseline blocks in its
    /// sockets or polls them to match.
    #[arg(short = 'e', long = "events")]
    events: bool,
}

/// Resolved settings of a run.
#[derive(Debug, Clone)]
pub struct Settings {
    pub op: Op,
    pub iters: usize,
    pub tx_depth: usize,
    pub rx_depth: usize,
    pub cq_mod: usize,
    pub qps: usize,
    pub inline_size: usize,
    pub qp_timeout: u8,
    pub mtu: Option<softroce::Mtu>,
    /// Offer a wide MTU to the peer (`--wide-mtu`).
    pub wide_mtu: bool,
    pub duration: Option<Duration>,
    /// Tests sleep for completions (`-e`) instead of polling.
    pub events: bool,
}

impl Settings {
    /// The settings of round `r` of `rounds`: its share of the iterations
    /// (the first rounds take the remainder) or of the duration.
    pub fn round(&self, r: usize, rounds: usize) -> Settings {
        let rounds = rounds.max(1);
        let iters = self.iters / rounds + usize::from(r < self.iters % rounds);
        Settings { iters, duration: self.duration.map(|d| d / rounds as u32), ..self.clone() }
    }
}

/// Why a perf run failed.
#[derive(Debug, thiserror::Error)]
pub enum PerfError {
    /// softroce refused.
    #[error(transparent)]
    Softroce(#[from] softroce::Error),
    /// Socket or file trouble.
    #[error(transparent)]
    Io(#[from] std::io::Error),
    /// The UDP baseline could not be measured.
    #[error("baseline: {0}")]
    Baseline(String),
    /// A socket for the baseline could not be bound.
    #[error(transparent)]
    Bind(#[from] roce_udp::BindError),
    /// A work completion failed.
    #[error("a work completion failed: {0}")]
    Completion(String),
    /// The peer's exchange message is malformed.
    #[error("malformed exchange message from the peer: {0:?}")]
    Exchange(String),
    /// Options that do not go together.
    #[error("{0}")]
    Usage(String),
}

impl PerfArgs {
    fn settings(&self) -> Result<Settings, PerfError> {
        if self.connection != "RC" {
            return Err(PerfError::Usage(format!("connection type {} is not supported: use RC", self.connection)));
        }
        if self.qps == 0 || self.qps > 1024 {
            return Err(PerfError::Usage("-q must be 1..=1024".into()));
        }
        let bw = self.test.is_bw();
        let mtu = match self.mtu {
            None => None,
            Some(m) => Some(
                (1..=5)
                    .filter_map(softroce::Mtu::from_raw)
                    .find(|x| x.bytes() == m)
                    .ok_or_else(|| PerfError::Usage(format!("-m {m}: not 256, 512, 1024, 2048 or 4096")))?,
            ),
        };
        Ok(Settings {
            op: self.test.op(),
            iters: self.iters.unwrap_or(if bw { 5000 } else { 1000 }).max(1),
            tx_depth: self.tx_depth.unwrap_or(if bw { 128 } else { 1 }).clamp(1, 8192),
            rx_depth: 512,
            cq_mod: self.cq_mod.max(1),
            qps: self.qps,
            inline_size: self.inline_size.min(256),
            qp_timeout: self.qp_timeout,
            mtu,
            wide_mtu: self.wide_mtu,
            duration: self.duration.map(Duration::from_secs),
            events: self.events,
        })
    }

    fn sizes(&self) -> Vec<usize> {
        if self.all {
            let top = if self.test.op() == Op::Atomic { 3 } else { 23 };
            (1..=top).map(|k| 1usize << k).filter(|s| self.test.op() != Op::Atomic || *s == 8).collect()
        } else if self.test.op() == Op::Atomic {
            vec![8]
        } else {
            vec![self.size.unwrap_or(if self.test.is_bw() { 65536 } else { 2 })]
        }
    }
}

/// Runs `softroce perf`.
pub fn run(args: &PerfArgs) -> ExitCode {
    match run_inner(args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("softroce perf: {e}");
            ExitCode::FAILURE
        }
    }
}

fn banner(args: &PerfArgs, s: &Settings, dev: &str, mtu: usize, gid: usize) {
    println!("{RULE}");
    println!("                    {}", args.test.title());
    println!(" Dual-port       : OFF\t\tDevice         : {dev}");
    println!(" Number of qps   : {}\t\tTransport type : IB", s.qps);
    println!(" Connection type : RC\t\tUsing SRQ      : OFF");
    if args.test.is_bw() {
        println!(" TX depth        : {}", s.tx_depth);
        println!(" CQ Moderation   : {}", s.cq_mod);
    }
    println!(" Mtu             : {mtu}[B]");
    println!(" Link type       : Ethernet");
    println!(" GID index       : {gid}");
    println!(" Max inline data : {}[B]", s.inline_size);
    println!(" rdma_cm QPs\t : OFF");
    println!(" Data ex. method : Ethernet");
    println!("{RULE}");
}

fn addresses(side: &str, r: &rdma::Remote) {
    let q = &r.qps[0];
    println!(
        " {side} address: LID 0000 QPN {:#06x} PSN {:#08x} RKey {:#08x} VAddr {:#016x}",
        q.qpn, q.psn, r.rkey, r.addr
    );
    let gid = match q.gid {
        std::net::IpAddr::V4(v) => v.to_ipv6_mapped().octets(),
        std::net::IpAddr::V6(v) => v.octets(),
    };
    println!(" GID: {}", gid.iter().map(|b| format!("{b:02}")).collect::<Vec<_>>().join(":"));
}

fn run_inner(args: &PerfArgs) -> Result<(), PerfError> {
    let s = args.settings()?;
    if args.plot.is_some() && !args.all {
        return Err(PerfError::Usage("--plot needs -a (all sizes)".into()));
    }
    if args.baseline && !args.loopback {
        return Err(PerfError::Usage("--baseline runs the UDP baseline on loopback: use it with --loopback".into()));
    }
    let sizes = args.sizes();
    let region = sizes.iter().max().copied().unwrap_or(8).max(64) * 2 + 128;
    let tty = std::io::stderr().is_terminal();
    let mut rows: Vec<(BwRow, Option<f64>)> = Vec::new();
    let mut lat_rows: Vec<(LatRow, Option<f64>)> = Vec::new();
    if args.loopback {
        let ((a, b), _leases) = open_loopback_pair(&s, region)?;
        let (ra, rb) = (a.remote(&s, 0x1234), b.remote(&s, 0x5678));
        let mtu = a.connect(&s, 0x1234, &rb)?;
        b.connect(&s, 0x5678, &ra)?;
        banner(args, &s, &a.ctx.device().name, mtu, args.gid_index.unwrap_or(1));
        addresses("local", &ra);
        addresses("remote", &rb);
        println!("{RULE}");
        println!(
            "{}",
            if args.test.is_bw() {
                report::bw_header(args.report_gbits, args.baseline)
            } else {
                report::lat_header(args.baseline)
            }
        );
        // With a baseline, softroce and the baseline take turns in rounds:
        // this machine's speed may swing by 2x within seconds (a shared VM),
        // and the ratio must compare the two under the same conditions.
        let rounds = if args.baseline { rounds_for(s.iters, s.duration.is_some()) } else { 1 };
        let mut outstanding = vec![0usize; s.qps];
        let mut lat_done = 0usize;
        for &size in &sizes {
            if args.test.is_bw() {
                let mut parts = Vec::with_capacity(rounds);
                let mut base = args.baseline.then(baseline::Moved::default);
                for r in 0..rounds {
                    let sr = s.round(r, rounds);
                    let part = bw_round(&a, &b, &sr, &rb, size, tty, &mut outstanding)?;
                    if let Some(m) = base.as_mut() {
                        let size = if s.op == Op::Atomic { 8 } else { size };
                        // The same messages as softroce moved (fewer with -D:
                        // the baseline is the faster, and a fraction suffices).
                        let msgs = if s.duration.is_some() { part.iters.min(sr.iters.max(200)) } else { part.iters };
                        *m += baseline::bw(size, mtu, msgs.max(1), s.tx_depth, !s.events)?;
                    }
                    parts.push(part);
                }
                let row = BwRow::combine(&parts).ok_or_else(|| PerfError::Usage("no rounds ran".into()))?;
                let base = base.map(|m| m.rate());
                println!("{}", report::bw_line(&row, args.report_gbits, base));
                rows.push((row, base));
            } else {
                let mut samples = Vec::with_capacity(s.iters);
                let mut base = Vec::new();
                for r in 0..rounds {
                    let sr = s.round(r, rounds);
                    samples.extend(std::thread::scope(|sc| -> Result<Vec<f64>, PerfError> {
                        let (bref, sref, ra2) = (&b, &sr, ra.clone());
                        let server = sc.spawn(move || rdma::lat_run(bref, sref, &ra2, size, false, lat_done));
                        let r = rdma::lat_run(&a, &sr, &rb, size, true, lat_done);
                        server.join().map_err(|_| PerfError::Usage("server thread panicked".into()))??;
                        r
                    })?);
                    lat_done += sr.iters;
                    if args.baseline {
                        let (req, resp) = baseline::lat_sizes(s.op, size);
                        base.extend(baseline::lat(
                            req,
                            resp,
                            sr.iters,
                            matches!(s.op, Op::Read | Op::Atomic),
                            !s.events,
                        )?);
                    }
                }
                let row = LatRow::from_samples(size, samples);
                let base = args.baseline.then(|| LatRow::from_samples(size, base).typical);
                println!("{}", report::lat_line(&row, base));
                lat_rows.push((row, base));
            }
            std::io::stdout().flush()?;
        }
        println!("{RULE}");
        if args.stats {
            print_stats("client", &a.ctx);
            print_stats("server", &b.ctx);
        }
    } else {
        two_hosts(args, &s, &sizes, region)?;
    }
    if let Some(path) = &args.plot {
        plot::write(path, args.test.title(), &rows, &lat_rows)?;
        println!("plot written to {}", path.display());
    }
    Ok(())
}

/// How many rounds a run with a baseline takes: 5, each of at least 1000
/// iterations where there are that many.
fn rounds_for(iters: usize, timed: bool) -> usize {
    if timed { 5 } else { (iters / 1000).clamp(1, 5) }
}

/// One round of a bandwidth test on the loopback pair: the client posts,
/// and for SEND a thread keeps receives posted on the server.
fn bw_round(
    a: &rdma::End,
    b: &rdma::End,
    s: &Settings,
    rb: &rdma::Remote,
    size: usize,
    tty: bool,
    outstanding: &mut [usize],
) -> Result<BwRow, PerfError> {
    // The SENDs per QP the client saw complete, once it is done (zeros if
    // it failed): the receiver takes exactly those.
    let client_done = std::sync::Mutex::new(None::<Vec<usize>>);
    let per_qp = if s.duration.is_some() { usize::MAX } else { s.iters };
    if s.op == Op::Send {
        rdma::bw_prepost(b, s, size, per_qp, outstanding)?;
    }
    let failed = std::sync::atomic::AtomicBool::new(false);
    std::thread::scope(|sc| -> Result<BwRow, PerfError> {
        let recv = (s.op == Op::Send).then(|| {
            let (client_done, failed) = (&client_done, &failed);
            sc.spawn(move || {
                let mut done = || Ok(client_done.lock().unwrap_or_else(|p| p.into_inner()).clone());
                let r = rdma::bw_receiver(b, s, size, per_qp, &mut done, outstanding);
                failed.store(r.is_err(), std::sync::atomic::Ordering::Relaxed);
                r
            })
        });
        let mut progress = |bytes: u64, t: Duration| {
            if tty && s.duration.is_some() {
                eprint!(
                    "\r {:.2} MiB/sec after {:.0} s   ",
                    bytes as f64 / t.as_secs_f64() / 1048576.0,
                    t.as_secs_f64()
                );
            }
        };
        let r = rdma::bw_client(a, s, rb, size, &mut progress, &|| failed.load(std::sync::atomic::Ordering::Relaxed));
        let done = r.as_ref().map_or_else(|_| vec![0; a.qps.len()], |(_, d)| d.clone());
        *client_done.lock().unwrap_or_else(|p| p.into_inner()) = Some(done);
        if let Some(h) = recv {
            // The receiver's error first: the client's is its consequence.
            h.join().map_err(|_| PerfError::Usage("receiver thread panicked".into()))??;
        }
        if tty && s.duration.is_some() {
            eprintln!();
        }
        r.map(|(row, _)| row)
    })
}

/// Two ends on loopback addresses of their own (127.0.0.2 and .3 unless
/// another run holds those): held by the leases returned with them.
fn open_loopback_pair(s: &Settings, region: usize) -> Result<((rdma::End, rdma::End), [LoopbackLease; 2]), PerfError> {
    let leases = [LoopbackLease::take()?, LoopbackLease::take()?];
    let end = |l: &LoopbackLease| -> Result<rdma::End, PerfError> {
        rdma::End::open(&l.device().map_err(softroce::Error::from)?, s, region)
    };
    Ok(((end(&leases[0])?, end(&leases[1])?), leases))
}

fn print_stats(who: &str, ctx: &softroce::Context) {
    let c = ctx.counters();
    println!(" {who} counters:");
    for (name, v) in c.iter() {
        println!("   {name:<24} {v}");
    }
    println!(" {who} driver:");
    for (name, v) in ctx.driver_stats().iter() {
        println!("   {name:<24} {v}");
    }
}

/// Server and client on two hosts (or two processes), perftest style.
fn two_hosts(args: &PerfArgs, s: &Settings, sizes: &[usize], region: usize) -> Result<(), PerfError> {
    let devices = softroce::devices()?;
    let info = match &args.device {
        Some(d) => devices.iter().find(|x| &x.name == d).cloned(),
        None => devices.first().cloned(),
    }
    .ok_or_else(|| PerfError::Usage("no softroce device: name one with -d or SOFTROCE_DEVICES".into()))?;
    let me = rdma::End::open(&info, s, region)?;
    let mine = me.remote(s, rand_psn());
    let mut stream = match &args.host {
        None => rdma::accept(args.port)?,
        Some(h) => connect(h, args.port)?,
    };
    let peer = rdma::exchange(&mut stream, &mine)?;
    let mtu = me.connect(s, mine.qps[0].psn, &peer)?;
    banner(args, s, &info.name, mtu, args.gid_index.unwrap_or(info.addr_gid_index()));
    addresses("local", &mine);
    addresses("remote", &peer);
    println!("{RULE}");
    let client = args.host.is_some();
    println!(
        "{}",
        if args.test.is_bw() { report::bw_header(args.report_gbits, false) } else { report::lat_header(false) }
    );
    let mut outstanding = vec![0usize; s.qps];
    let mut lat_done = 0usize;
    // With -D the client runs for a time and tells how many SENDs it made.
    let per_qp = if s.duration.is_some() { usize::MAX } else { s.iters };
    for &size in sizes {
        if args.test.is_bw() && !client && s.op == Op::Send {
            rdma::bw_prepost(&me, s, size, per_qp, &mut outstanding)?;
        }
        // Both sides are ready for this size before traffic starts.
        sync(&mut stream)?;
        if args.test.is_bw() {
            if client {
                let (row, done) = rdma::bw_client(&me, s, &peer, size, &mut |_, _| {}, &|| false)?;
                println!("{}", report::bw_line(&row, args.report_gbits, None));
                if s.op == Op::Send && s.duration.is_some() {
                    rdma::send_counts(&mut stream, &done)?;
                }
                sync(&mut stream)?;
            } else {
                if s.op == Op::Send {
                    if s.duration.is_some() {
                        let mut counts = rdma::PeerCounts::new(&mut stream, s.qps)?;
                        rdma::bw_receiver(&me, s, size, per_qp, &mut || counts.poll(), &mut outstanding)?;
                    } else {
                        rdma::bw_receiver(&me, s, size, per_qp, &mut || Ok(None), &mut outstanding)?;
                    }
                }
                sync(&mut stream)?;
            }
        } else {
            let samples = rdma::lat_run(&me, s, &peer, size, client, lat_done)?;
            lat_done += s.iters;
            // A READ or atomic server has nothing to do but stay until its
            // client is done (it used to leave at once: RETRY_EXC_ERR).
            sync(&mut stream)?;
            if client {
                println!("{}", report::lat_line(&LatRow::from_samples(size, samples), None));
            }
        }
    }
    println!("{RULE}");
    if args.stats {
        print_stats(if client { "client" } else { "server" }, &me.ctx);
    }
    Ok(())
}

/// How long a client waits for its server to listen: a client started
/// together with its server (a script, `softroce perf-sharing`) finds the
/// port closed for the first milliseconds.
const CONNECT_PATIENCE: Duration = Duration::from_secs(10);

/// Connects to the server, retrying while it refuses for [`CONNECT_PATIENCE`].
fn connect(host: &str, port: u16) -> Result<std::net::TcpStream, PerfError> {
    let deadline = std::time::Instant::now() + CONNECT_PATIENCE;
    loop {
        match std::net::TcpStream::connect((host, port)) {
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionRefused && std::time::Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(10));
            }
            r => return Ok(r?),
        }
    }
}

fn sync(stream: &mut std::net::TcpStream) -> Result<(), PerfError> {
    use std::io::Read;
    stream.write_all(b"S")?;
    let mut b = [0u8; 1];
    stream.read_exact(&mut b)?;
    Ok(())
}

fn rand_psn() -> u32 {
    use std::hash::BuildHasher;
    roce_wire::Psn::new(std::collections::hash_map::RandomState::new().hash_one(std::process::id()) as u32).value()
}
