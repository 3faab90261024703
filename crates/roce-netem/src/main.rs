//! `roce-netem`: a seeded impairment relay between two TUN devices, and probe traffic to check it.
//!
//! See the crate's README for the namespace topology built by `scripts/netns/setup.sh`.

use std::io::{self, Read};
use std::net::{SocketAddr, UdpSocket};
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use clap::{Args, Parser, Subcommand};
use roce_netem::parse::{parse_duration, parse_probability};
use roce_netem::probe::{self, RecvOptions, SendOptions};
use roce_netem::relay::{DirectionReport, run_direction};
use roce_netem::tun::Tun;
use roce_netem::{Config, Impairer};

#[derive(Parser)]
#[command(name = "roce-netem", version, about = "Seeded impairment relay between two TUN devices (netem substitute)")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Create TUN devices A and B and forward IP packets between them, impaired the same way in both
    /// directions. Prints one summary line per direction on SIGINT/SIGTERM (or stdin EOF) and exits 0.
    Relay(RelayArgs),
    /// Send numbered probe datagrams to a `recv`.
    Send(SendArgs),
    /// Receive probe datagrams and print what arrived: `received=N intact=N unique=N duplicates=N
    /// corrupted=N garbled=N late=N`.
    Recv(RecvArgs),
}

#[derive(Args)]
struct RelayArgs {
    /// Name of TUN device A (created if missing).
    #[arg(long = "a", value_name = "TUN_A")]
    tun_a: String,
    /// Name of TUN device B (created if missing).
    #[arg(long = "b", value_name = "TUN_B")]
    tun_b: String,
    /// Random seed (a->b uses stream 0 of it, b->a stream 1).
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Probability of dropping a packet (0.05 or 5%).
    #[arg(long, value_name = "P", default_value = "0", value_parser = parse_probability)]
    drop: f64,
    /// Probability of duplicating a packet.
    #[arg(long, value_name = "P", default_value = "0", value_parser = parse_probability)]
    dup: f64,
    /// Probability of holding a packet back by --reorder-delay so later ones overtake it.
    #[arg(long, value_name = "P", default_value = "0", value_parser = parse_probability)]
    reorder: f64,
    /// How long a reordered packet is held back.
    #[arg(long, value_name = "DUR", default_value = "5ms", value_parser = parse_duration)]
    reorder_delay: Duration,
    /// Constant delay of every packet (e.g. 10ms).
    #[arg(long, value_name = "DUR", default_value = "0", value_parser = parse_duration)]
    delay: Duration,
    /// Uniform jitter: each packet is delayed by delay ± jitter; does not reorder.
    #[arg(long, value_name = "DUR", default_value = "0", value_parser = parse_duration)]
    jitter: Duration,
    /// Probability of flipping one bit in the UDP payload (UDP checksum fixed; non-UDP never corrupted).
    #[arg(long, value_name = "P", default_value = "0", value_parser = parse_probability)]
    corrupt: f64,
    /// Most packets queued per direction; more are dropped.
    #[arg(long, value_name = "N", default_value_t = 100_000)]
    limit: usize,
    /// Print each direction's counters to stderr this often (e.g. 1s).
    #[arg(long, value_name = "DUR", value_parser = parse_duration)]
    stats_every: Option<Duration>,
    /// Also stop when standard input reaches end of file.
    #[arg(long)]
    exit_on_stdin_eof: bool,
}

#[derive(Args)]
struct SendArgs {
    /// Receiver address, e.g. 10.233.0.2:4791.
    #[arg(long)]
    to: SocketAddr,
    /// Local address to bind (default: any, ephemeral port).
    #[arg(long)]
    bind: Option<SocketAddr>,
    /// Number of datagrams.
    #[arg(long, default_value_t = 2000)]
    count: u32,
    /// UDP payload bytes per datagram (at least 12).
    #[arg(long, default_value_t = 1000)]
    size: usize,
    /// Datagrams sent back to back before each pause (0: about 16 kB worth, at most 16).
    #[arg(long, default_value_t = 0)]
    burst: u32,
    /// Pause after each burst.
    #[arg(long, value_name = "DUR", default_value = "300us", value_parser = parse_duration)]
    gap: Duration,
}

#[derive(Args)]
struct RecvArgs {
    /// Address to bind, e.g. 10.233.0.2:4791.
    #[arg(long)]
    bind: SocketAddr,
    /// Expected datagram size.
    #[arg(long, default_value_t = 1000)]
    size: usize,
    /// Number of datagrams the sender sends (adds a sample of missing ones to the output).
    #[arg(long)]
    count: Option<u32>,
    /// Stop after this long without traffic, once something arrived.
    #[arg(long, value_name = "DUR", default_value = "1s", value_parser = parse_duration)]
    idle: Duration,
    /// Stop after this long in all.
    #[arg(long, value_name = "DUR", default_value = "30s", value_parser = parse_duration)]
    timeout: Duration,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Relay(args) => relay(args),
        Command::Send(args) => send(args),
        Command::Recv(args) => recv(args),
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("roce-netem: {e}");
            ExitCode::FAILURE
        }
    }
}

fn relay(args: RelayArgs) -> io::Result<ExitCode> {
    let cfg = Config {
        drop: args.drop,
        dup: args.dup,
        reorder: args.reorder,
        reorder_delay: args.reorder_delay,
        delay: args.delay,
        jitter: args.jitter,
        corrupt: args.corrupt,
        limit: args.limit,
    };
    cfg.validate().map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
    if args.tun_a == args.tun_b {
        return Err(io::Error::new(io::ErrorKind::InvalidInput, "--a and --b must differ"));
    }
    let stop = Arc::new(AtomicBool::new(false));
    for sig in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        // A second signal while stopping exits at once.
        signal_hook::flag::register_conditional_shutdown(sig, 1, Arc::clone(&stop))?;
        signal_hook::flag::register(sig, Arc::clone(&stop))?;
    }
    let a = Tun::create(&args.tun_a)?;
    let b = Tun::create(&args.tun_b)?;
    eprintln!(
        "roce-netem: relaying {} <-> {} (seed {}, drop {}, dup {}, reorder {} by {:?}, delay {:?} ± {:?}, corrupt {})",
        a.name(),
        b.name(),
        args.seed,
        cfg.drop,
        cfg.dup,
        cfg.reorder,
        cfg.reorder_delay,
        cfg.delay,
        cfg.jitter,
        cfg.corrupt
    );
    if args.exit_on_stdin_eof {
        let stop = Arc::clone(&stop);
        std::thread::spawn(move || {
            let _ = io::copy(&mut io::stdin().lock().by_ref(), &mut io::sink());
            stop.store(true, Ordering::Relaxed);
        });
    }
    let start = Instant::now();
    let ab = Impairer::new(cfg.clone(), args.seed, 0);
    let ba = Impairer::new(cfg, args.seed, 1);
    let label_ab = format!("a->b ({} -> {})", a.name(), b.name());
    let label_ba = format!("b->a ({} -> {})", b.name(), a.name());
    let reports: [DirectionReport; 2] = std::thread::scope(|s| {
        let back = s.spawn(|| run_direction(label_ba, &b, &a, ba, start, &stop, args.stats_every));
        let forth = run_direction(label_ab, &a, &b, ab, start, &stop, args.stats_every);
        [forth, back.join().expect("b->a thread panicked")]
    });
    let mut failed = false;
    for r in &reports {
        println!("{}", r.summary());
        if let Some(e) = &r.error {
            eprintln!("roce-netem: {}: stopped by error: {e}", r.label);
            failed = true;
        }
    }
    Ok(if failed { ExitCode::FAILURE } else { ExitCode::SUCCESS })
}

fn send(args: SendArgs) -> io::Result<ExitCode> {
    let local = args.bind.unwrap_or_else(|| match args.to {
        SocketAddr::V4(_) => "0.0.0.0:0".parse().expect("literal address"),
        SocketAddr::V6(_) => "[::]:0".parse().expect("literal address"),
    });
    let socket = UdpSocket::bind(local)?;
    socket.connect(args.to)?;
    let opts = SendOptions { count: args.count, size: args.size, burst: args.burst, gap: args.gap };
    let sent = probe::send_probes(&socket, &opts)?;
    println!("sent={sent} size={}", args.size.max(probe::HEADER_LEN));
    Ok(ExitCode::SUCCESS)
}

fn recv(args: RecvArgs) -> io::Result<ExitCode> {
    let socket = UdpSocket::bind(args.bind)?;
    let opts = RecvOptions { size: args.size, expected: args.count, idle: args.idle, timeout: args.timeout };
    let tally = probe::receive_probes(&socket, &opts, Some(&mut io::stdout()))?;
    println!("{tally}");
    Ok(ExitCode::SUCCESS)
}
