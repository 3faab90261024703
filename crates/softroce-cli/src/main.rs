//! `softroce`: the command-line face of softroce.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

mod decode;
mod devinfo;
mod forward;
mod perf;
mod pingpong;
mod qpmem;
mod rdma;
mod run;
mod view;

/// softroce: RDMA over Converged Ethernet v2 in user space.
#[derive(Parser)]
#[command(name = "softroce", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Decode the RoCEv2 packets of a capture and verify every ICRC.
    ///
    /// Reads pcap or pcapng (gzip-compressed too) of Ethernet, Linux cooked
    /// (SLL/SLL2), loopback or raw IP links. Prints one line per RoCEv2
    /// packet (UDP destination port 4791) and a summary; exits 1 if any
    /// packet has a bad ICRC or is malformed, 2 if the file cannot be read.
    Decode {
        /// The capture file.
        file: PathBuf,
        /// Print only bad and malformed packets, and the summary.
        #[arg(short, long)]
        quiet: bool,
        /// Path MTU of the traffic: FIRST/MIDDLE packets must carry exactly
        /// this much payload (default: any of 256, 512, 1024, 2048, 4096).
        #[arg(long, value_parser = parse_mtu)]
        mtu: Option<usize>,
        /// softroce's wide MTU of the traffic (`perf --wide-mtu`), checked
        /// as `--mtu` is.
        #[arg(long, value_parser = parse_wide_mtu, conflicts_with = "mtu")]
        wide_mtu: Option<usize>,
    },
    /// perftest's bandwidth and latency tests over softroce
    /// (`ib_{send,write,read,atomic}_{bw,lat}` options and tables).
    ///
    /// `softroce perf write-bw --loopback --baseline` runs both ends here
    /// and prints the ratio to plain UDP sockets beside each row.
    Perf(perf::PerfArgs),
    /// What sharing one device costs: two `softroce perf` processes on one
    /// shared device against the same two on two addresses (8-byte
    /// send-lat, 64 KiB write-bw, 8-byte write message rate), the shared
    /// device's 64 KiB write-bw against raw UDP with GSO/GRO, and four
    /// pairs on one device against one pair alone; ratios and targets.
    PerfSharing(perf::sharing::SharingArgs),
    /// Goodput on a lossy path: `softroce perf write-bw` against a TCP
    /// stream between two network namespaces, at 0, 0.1, 1, 2 and 5% loss,
    /// with and without reordering (root).
    PerfLossy(perf::lossy::LossyArgs),
    /// UCX over softroce against softroce perf on the shared loopback
    /// device: UCT put_bw 64 KiB against write-bw, UCP tag_lat 8 B against
    /// send-lat; medians of rounds, ratios and targets.
    PerfMiddleware(perf::middleware::MiddlewareArgs),
    /// rdma-core's `ibv_rc_pingpong` over softroce (same options, exchange and output).
    RcPingpong(pingpong::PingpongArgs),
    /// rdma-core's `ibv_ud_pingpong` over softroce (default size 2048).
    UdPingpong(pingpong::PingpongArgs),
    /// rdma-core's `ibv_srq_pingpong` over softroce (`-q` QPs on one SRQ).
    SrqPingpong(pingpong::PingpongArgs),
    /// Resident memory per QP at 1, 100 and 10,000 QPs.
    QpMemory {
        /// Send and receive queue depth of each QP.
        #[arg(short = 't', long, default_value_t = 128)]
        depth: u32,
        /// QP counts to measure.
        #[arg(long, value_delimiter = ',', default_value = "1,100,10000")]
        counts: Vec<usize>,
    },
    /// Run an unmodified libibverbs program (ibv_rc_pingpong, ib_write_bw,
    /// qperf, pyverbs...) over softroce.
    ///
    /// Puts softroce's libibverbs.so.1 first on the library path. Any
    /// number of processes share the host's devices; `--loopback` gives a
    /// run an isolated device on a free 127.0.0.x instead.
    /// Example: `softroce run -- ibv_rc_pingpong -g 1` and, beside it,
    /// `softroce run -- ibv_rc_pingpong -g 1 127.0.0.1`.
    Run(run::RunArgs),
    /// List the softroce devices (as rdma-core's `ibv_devices`).
    Devices,
    /// iproute2's `rdma` for softroce devices: `link show|add|delete`,
    /// `dev show`, `resource show [qp|ctx]`, `statistic show`, with `-j`,
    /// `-p` and `-d` (`docs/rdma-tool.md`). `softroce run` gives programs
    /// it as `rdma`.
    #[command(disable_help_flag = true)]
    Rdma {
        /// iproute2's `rdma` options and command.
        #[arg(trailing_var_arg = true, allow_hyphen_values = true, value_name = "OPTIONS] [OBJECT")]
        args: Vec<String>,
    },
    /// Show a device's attributes (as rdma-core's `ibv_devinfo`).
    Devinfo {
        /// Only this device.
        #[arg(short = 'd', long = "ib-dev")]
        device: Option<String>,
        /// All attributes and the GID table.
        #[arg(short, long)]
        verbose: bool,
    },
}

fn main() -> ExitCode {
    // Run as `rdma` (the link `softroce run` puts on PATH): iproute2's tool.
    let mut argv = std::env::args();
    if argv.next().is_some_and(|a| std::path::Path::new(&a).file_name().is_some_and(|n| n == "rdma")) {
        return rdma::run(&argv.collect::<Vec<_>>());
    }
    let cli = Cli::parse();
    match cli.command {
        Command::Decode { file, quiet, mtu, wide_mtu } => decode::run(&file, quiet, mtu.or(wide_mtu)),
        Command::Perf(args) => perf::run(&args),
        Command::PerfSharing(args) => perf::sharing::run(&args),
        Command::PerfLossy(args) => perf::lossy::run(&args),
        Command::PerfMiddleware(args) => perf::middleware::run(&args),
        Command::Run(args) => run::run(&args),
        Command::Devices => devinfo::run_devices(),
        Command::RcPingpong(args) => pingpong::run(&args, pingpong::Kind::Rc),
        Command::UdPingpong(args) => pingpong::run(&args, pingpong::Kind::Ud),
        Command::SrqPingpong(args) => pingpong::run(&args, pingpong::Kind::Srq(args.num_qp)),
        Command::QpMemory { depth, counts } => qpmem::run(&counts, depth),
        Command::Devinfo { device, verbose } => devinfo::run_devinfo(device.as_deref(), verbose),
        Command::Rdma { args } => rdma::run(&args),
    }
}

fn parse_mtu(s: &str) -> Result<usize, String> {
    match s.parse::<usize>() {
        Ok(m) if roce_wire::PATH_MTUS.contains(&m) => Ok(m),
        _ => Err(format!("{s} is not a RoCE path MTU (256, 512, 1024, 2048 or 4096)")),
    }
}

fn parse_wide_mtu(s: &str) -> Result<usize, String> {
    match s.parse::<usize>().ok().and_then(roce_proto::WideMtu::new) {
        Some(m) => Ok(m.bytes()),
        None => Err(format!(
            "{s} is not a softroce wide MTU (a multiple of 4, {}..={})",
            roce_proto::WideMtu::MIN,
            roce_proto::WideMtu::MAX
        )),
    }
}
