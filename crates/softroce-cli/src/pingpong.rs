//! `softroce rc-pingpong`, `ud-pingpong` and `srq-pingpong`: rdma-core's
//! `ibv_rc_pingpong`, `ibv_ud_pingpong` and `ibv_srq_pingpong` over
//! softroce, with their options, their out-of-band exchange (a 52-byte
//! `LID:QPN:PSN:GID` text message per QP each way over TCP, then "done") and
//! their printed results, so a softroce ping-pong and an rdma-core one on
//! any RoCEv2 device can talk.

use std::io::{Read, Write};
use std::net::{IpAddr, Ipv6Addr, TcpListener, TcpStream};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use clap::Args;
use softroce::{
    AccessFlags, ConnectOptions, Context, Payload, QpEndpoint, QpInit, RecvWr, SendFlags, SendWr, Wc, WcOpcode,
    WcStatus, WrOpcode,
};

/// `ibv_rc_pingpong`'s options.
#[derive(Debug, Args)]
pub struct PingpongArgs {
    /// Connect to the server on HOST (without it: the server).
    host: Option<String>,
    /// TCP port of the exchange.
    #[arg(short = 'p', long = "port", default_value_t = 18515)]
    port: u16,
    /// Device (default: the first).
    #[arg(short = 'd', long = "ib-dev")]
    device: Option<String>,
    /// Port of the device.
    #[arg(short = 'i', long = "ib-port", default_value_t = 1)]
    ib_port: u8,
    /// Message size (default 4096; 2048 for ud-pingpong).
    #[arg(short = 's', long = "size")]
    size: Option<usize>,
    /// Path MTU.
    #[arg(short = 'm', long = "mtu", default_value_t = 1024)]
    mtu: usize,
    /// Receives kept posted.
    #[arg(short = 'r', long = "rx-depth", default_value_t = 500)]
    rx_depth: usize,
    /// Exchanges.
    #[arg(short = 'n', long = "iters", default_value_t = 1000)]
    iters: usize,
    /// Service level.
    #[arg(short = 'l', long = "sl", default_value_t = 0)]
    sl: u8,
    /// Sleep on CQ events instead of polling.
    #[arg(short = 'e', long = "events")]
    events: bool,
    /// Local GID index (the IPv4 GID is 1).
    #[arg(short = 'g', long = "gid-idx")]
    gid_idx: Option<usize>,
    /// Check the received data.
    #[arg(short = 'c', long = "chk")]
    chk: bool,
    /// Print the counters (rxe names) at the end.
    #[arg(long)]
    stats: bool,
    /// QPs (`srq-pingpong` only).
    #[arg(short = 'q', long = "num-qp", default_value_t = 16)]
    pub num_qp: usize,
}

/// One side's address as the exchange carries it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Dest {
    /// LID (0 on RoCE).
    pub lid: u16,
    /// QP number.
    pub qpn: u32,
    /// First PSN.
    pub psn: u32,
    /// GID (all zeros when `-g` is not given).
    pub gid: [u8; 16],
}

/// Bytes of the exchange message: `sizeof "0000:000000:000000:" + 32 hex digits`.
pub const MSG_LEN: usize = 52;

impl Dest {
    /// The message rdma-core writes: `%04x:%06x:%06x:%s` and the GID as 32
    /// hex digits (rdma-core's `gid_to_wire_gid`), NUL-terminated.
    pub fn to_wire(self) -> [u8; MSG_LEN] {
        let gid: String = self.gid.iter().map(|b| format!("{b:02x}")).collect();
        let s = format!("{:04x}:{:06x}:{:06x}:{gid}", self.lid, self.qpn, self.psn);
        let mut m = [0u8; MSG_LEN];
        m[..s.len()].copy_from_slice(s.as_bytes());
        m
    }

    /// Parses a peer's message (`sscanf("%x:%x:%x:%s")`).
    pub fn from_wire(m: &[u8]) -> Option<Dest> {
        let text = std::str::from_utf8(m.split(|b| *b == 0).next()?).ok()?;
        let mut f = text.split(':');
        let lid = u16::from_str_radix(f.next()?, 16).ok()?;
        let qpn = u32::from_str_radix(f.next()?, 16).ok()?;
        let psn = u32::from_str_radix(f.next()?, 16).ok()?;
        let g = f.next()?;
        if g.len() != 32 || f.next().is_some() || qpn > 0xff_ffff || psn > 0xff_ffff {
            return None;
        }
        let mut gid = [0u8; 16];
        for (i, b) in gid.iter_mut().enumerate() {
            *b = u8::from_str_radix(&g[2 * i..2 * i + 2], 16).ok()?;
        }
        Some(Dest { lid, qpn, psn, gid })
    }

    fn gid_text(&self) -> String {
        let v6 = Ipv6Addr::from(self.gid);
        match v6.to_ipv4_mapped() {
            Some(v4) => format!("::ffff:{v4}"),
            None => v6.to_string(),
        }
    }
}

/// Connects to `host:port` from our device's address when it can, so a
/// peer that was given no GID can take our RoCE address from the connection.
fn connect_from(local: IpAddr, host: &str, port: u16) -> std::io::Result<TcpStream> {
    use std::net::ToSocketAddrs;
    let mut last = std::io::Error::new(std::io::ErrorKind::NotFound, format!("{host}: no address"));
    for dst in (host, port).to_socket_addrs()? {
        let sock = socket2::Socket::new(socket2::Domain::for_address(dst), socket2::Type::STREAM, None)?;
        if dst.is_ipv4() == local.is_ipv4() {
            // Best effort: a device address of another family is skipped.
            let _ = sock.bind(&std::net::SocketAddr::new(local, 0).into());
        }
        match sock.connect(&dst.into()) {
            Ok(()) => return Ok(sock.into()),
            Err(e) => last = e,
        }
    }
    Err(last)
}

fn line(who: &str, d: &Dest) -> String {
    format!("  {who} address:  LID 0x{:04x}, QPN 0x{:06x}, PSN 0x{:06x}, GID {}", d.lid, d.qpn, d.psn, d.gid_text())
}

const RECV_WRID: u64 = 1;
const SEND_WRID: u64 = 2;
/// The Q_Key rdma-core's `ibv_ud_pingpong` uses.
const UD_QKEY: u32 = 0x1111_1111;
/// Bytes in front of every UD receive: the GRH area.
const GRH: usize = 40;

/// Which of rdma-core's ping-pongs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// `ibv_rc_pingpong`.
    Rc,
    /// `ibv_ud_pingpong`.
    Ud,
    /// `ibv_srq_pingpong` with this many QPs.
    Srq(usize),
}

/// Runs a ping-pong.
pub fn run(a: &PingpongArgs, kind: Kind) -> ExitCode {
    let name = match kind {
        Kind::Rc => "rc-pingpong",
        Kind::Ud => "ud-pingpong",
        Kind::Srq(_) => "srq-pingpong",
    };
    match run_inner(a, kind) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("softroce {name}: {e}");
            ExitCode::FAILURE
        }
    }
}

/// The exchange: the client writes its messages, reads the server's and
/// writes "done"; the server reads, connects (`connect`), writes its own and
/// reads "done" (rdma-core's `pp_client_exch_dest` / `pp_server_exch_dest`).
fn exchange(
    a: &PingpongArgs,
    local: IpAddr,
    mine: &[Dest],
    mut connect: impl FnMut(&[Dest], IpAddr) -> Result<(), Box<dyn std::error::Error>>,
) -> Result<Vec<Dest>, Box<dyn std::error::Error>> {
    let read_all = |s: &mut TcpStream, n: usize| -> Result<Vec<Dest>, Box<dyn std::error::Error>> {
        let mut v = Vec::new();
        for _ in 0..n {
            let mut msg = [0u8; MSG_LEN];
            s.read_exact(&mut msg)?;
            v.push(Dest::from_wire(&msg).ok_or("Couldn't read remote address")?);
        }
        Ok(v)
    };
    match &a.host {
        Some(h) => {
            let mut s = connect_from(local, h, a.port)?;
            for d in mine {
                s.write_all(&d.to_wire())?;
            }
            let rem = read_all(&mut s, mine.len())?;
            s.write_all(b"done\0")?;
            connect(&rem, s.peer_addr()?.ip())?;
            Ok(rem)
        }
        None => {
            let l = TcpListener::bind(("0.0.0.0", a.port))?;
            let (mut s, peer) = l.accept()?;
            let rem = read_all(&mut s, mine.len())?;
            connect(&rem, peer.ip())?;
            for d in mine {
                s.write_all(&d.to_wire())?;
            }
            let mut done = [0u8; 5];
            s.read_exact(&mut done)?;
            Ok(rem)
        }
    }
}

/// The peer's address: its GID, or (no GID sent) the TCP peer's address.
fn peer_addr(d: &Dest, tcp_peer: IpAddr) -> IpAddr {
    let v6 = Ipv6Addr::from(d.gid);
    if d.gid == [0; 16] { tcp_peer } else { v6.to_ipv4_mapped().map_or(IpAddr::V6(v6), IpAddr::V4) }
}

fn run_inner(a: &PingpongArgs, kind: Kind) -> Result<(), Box<dyn std::error::Error>> {
    let mtu = (1..=5)
        .filter_map(softroce::Mtu::from_raw)
        .find(|m| m.bytes() == a.mtu)
        .ok_or(format!("-m {}: not a RoCE MTU", a.mtu))?;
    let devices = softroce::devices()?;
    let info = match &a.device {
        Some(n) => devices.iter().find(|d| &d.name == n).ok_or(format!("IB device {n} not found"))?,
        None => devices.first().ok_or("No IB devices found")?,
    };
    let ud = kind == Kind::Ud;
    let size = a.size.unwrap_or(if ud { 2048 } else { 4096 });
    if ud && size > info.active_mtu().bytes() {
        return Err(format!("Requested size larger than port MTU ({})", info.active_mtu().bytes()).into());
    }
    let nqp = match kind {
        Kind::Srq(n) => n.max(1),
        _ => 1,
    };
    let ctx = Context::open_with(info, softroce::Options::from_env()?)?;
    let pd = ctx.alloc_pd()?;
    let cq = ctx.create_cq((a.rx_depth + nqp) as u32, None)?;
    let buf_len = size + if ud { GRH } else { 0 };
    let mr = pd.reg_mr(buf_len.max(1), AccessFlags::LOCAL_WRITE)?;
    let srq = match kind {
        Kind::Srq(_) => Some(pd.create_srq(a.rx_depth as u32, 1)?),
        _ => None,
    };
    let mut qps = Vec::new();
    for _ in 0..nqp {
        let mut init = QpInit::rc(&cq, &cq, a.rx_depth as u32);
        init.qp_type = if ud { softroce::QpType::Ud } else { softroce::QpType::Rc };
        init.srq = srq.as_ref();
        init.cap.max_send_wr = 1;
        init.cap.max_send_sge = 1;
        init.cap.max_recv_sge = 1;
        qps.push(pd.create_qp(init)?);
    }
    let page = 4096;
    let data_at = if ud { GRH } else { 0 };
    if a.chk && a.host.is_some() {
        let pat: Vec<u8> = (0..size).map(|i| (i / page) as u8).collect();
        mr.write(data_at, &pat)?;
    }
    let gid = match a.gid_idx {
        Some(i) => ctx.query_gid(i).ok_or(format!("no GID at index {i}"))?,
        None => [0; 16],
    };
    let mine: Vec<Dest> = qps
        .iter()
        .map(|qp| {
            use std::hash::BuildHasher;
            let psn =
                roce_wire::Psn::new(std::collections::hash_map::RandomState::new().hash_one(qp.qpn()) as u32).value();
            Dest { lid: 0, qpn: qp.qpn().get(), psn, gid }
        })
        .collect();
    let opts = ConnectOptions { mtu: Some(mtu), max_rd_atomic: 1, qkey: UD_QKEY, ..ConnectOptions::default() };
    // As rdma-core's pingpongs: INIT and the receives posted before the
    // exchange, so the peer's first message (a UD datagram is not resent)
    // always finds one.
    for qp in &qps {
        qp.to_init(&softroce::ToInit { access: opts.access, qkey: opts.qkey })?;
    }
    let rsge = [mr.sge(0, buf_len as u32)];
    let post_recv = || match &srq {
        Some(s) => s.post_recv(&RecvWr { wr_id: RECV_WRID, sg_list: &rsge }),
        None => qps[0].post_recv(&RecvWr { wr_id: RECV_WRID, sg_list: &rsge }),
    };
    let mut routs = 0;
    for _ in 0..a.rx_depth {
        post_recv()?;
        routs += 1;
    }
    let mut ah = None;
    let rem = exchange(a, info.addr, &mine, |rem, tcp_peer| {
        for (i, qp) in qps.iter().enumerate() {
            let r = rem.get(i).ok_or("fewer remote QPs than local ones")?;
            let peer = QpEndpoint { qpn: r.qpn.into(), psn: r.psn, gid: peer_addr(r, tcp_peer) };
            qp.connect_from_init(mine[i].psn, &peer, &opts)?;
        }
        if ud {
            ah = Some(pd.create_ah(peer_addr(&rem[0], tcp_peer))?);
        }
        Ok(())
    })?;
    for (m, r) in mine.iter().zip(&rem) {
        println!("{}", line("local", m));
        println!("{}", line("remote", r));
    }
    let ssge = [mr.sge(data_at, size as u32)];
    let send = |i: usize| {
        let mut wr = SendWr::new(SEND_WRID, WrOpcode::Send, SendFlags::SIGNALED, Payload::Sges(&ssge));
        if let Some(ah) = &ah {
            wr.ud = Some(softroce::UdDest { ah: ah.handle(), remote_qpn: rem[0].qpn.into(), remote_qkey: UD_QKEY });
        }
        qps[i].post_send(&wr)
    };
    let t0 = Instant::now();
    let mut pending = vec![RECV_WRID; nqp];
    if a.host.is_some() {
        for (i, p) in pending.iter_mut().enumerate() {
            send(i)?;
            *p = SEND_WRID | RECV_WRID;
        }
    }
    let (mut scnt, mut rcnt) = (0usize, 0usize);
    let mut wc = [Wc::new(0, WcStatus::Success, WcOpcode::Send, 0); 2];
    while rcnt < a.iters || scnt < a.iters {
        let n = if a.events { cq.wait(&mut wc, Duration::from_secs(60))? } else { cq.poll(&mut wc)? };
        for w in &wc[..n] {
            if w.status != WcStatus::Success {
                return Err(
                    format!("Failed status {} ({}) for wr_id {}", w.status.as_str(), w.status as u32, w.wr_id).into()
                );
            }
            let q = qps.iter().position(|qp| qp.qpn() == w.qp_num).ok_or("completion for an unknown QP")?;
            match w.wr_id {
                SEND_WRID => scnt += 1,
                RECV_WRID => {
                    routs -= 1;
                    if routs <= nqp {
                        while routs < a.rx_depth {
                            post_recv()?;
                            routs += 1;
                        }
                    }
                    let got = mr.to_vec(data_at, size)?;
                    if a.chk && got.iter().enumerate().any(|(i, b)| i % page == 0 && *b != (i / page) as u8) {
                        return Err("invalid data in page".into());
                    }
                    rcnt += 1;
                }
                other => return Err(format!("Completion for unknown wr_id {other}").into()),
            }
            pending[q] &= !w.wr_id;
            if scnt < a.iters && pending[q] == 0 {
                send(q)?;
                pending[q] = RECV_WRID | SEND_WRID;
            }
        }
    }
    let secs = t0.elapsed().as_secs_f64();
    let bytes = size * a.iters * 2;
    let usec = secs * 1e6;
    println!("{bytes} bytes in {secs:.2} seconds = {:.2} Mbit/sec", bytes as f64 * 8.0 / usec);
    println!("{} iters in {secs:.2} seconds = {:.2} usec/iter", a.iters, usec / a.iters as f64);
    if a.stats {
        for (name, v) in ctx.counters().iter() {
            println!("   {name:<24} {v}");
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What rdma-core's `sprintf("%04x:%06x:%06x:%s", ...)` with
    /// `gid_to_wire_gid` (each 4-byte group printed as `%08x` of its
    /// big-endian value: the GID's bytes in order) writes for QP 0x11 on
    /// 10.77.0.2, and with no GID (`-g` not given: zeros).
    #[test]
    fn exchange_messages_match_rdma_core() {
        let mut gid = [0u8; 16];
        gid[10] = 0xff;
        gid[11] = 0xff;
        gid[12..].copy_from_slice(&[10, 77, 0, 2]);
        let d = Dest { lid: 0, qpn: 0x11, psn: 0x503a4c, gid };
        let w = d.to_wire();
        assert_eq!(&w[..51], b"0000:000011:503a4c:00000000000000000000ffff0a4d0002");
        assert_eq!(w[51], 0, "NUL-terminated, 52 bytes as sizeof msg");
        assert_eq!(Dest::from_wire(&w), Some(d));
        assert_eq!(d.gid_text(), "::ffff:10.77.0.2");
        let none = Dest { lid: 0, qpn: 0x1234, psn: 0xabcdef, gid: [0; 16] };
        assert_eq!(&none.to_wire()[..51], b"0000:001234:abcdef:00000000000000000000000000000000");
        assert_eq!(line("local", &d), "  local address:  LID 0x0000, QPN 0x000011, PSN 0x503a4c, GID ::ffff:10.77.0.2");
        // Malformed messages are refused, not guessed at.
        assert_eq!(Dest::from_wire(b"0000:000011:503a4c:00ff\0"), None);
        assert_eq!(Dest::from_wire(b"garbage"), None);
    }
}
