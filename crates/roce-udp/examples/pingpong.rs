//! What the transport alone costs in a ping-pong: the median one-way
//! latency of plain blocking UDP sockets (`send_to` / `recv`, as the
//! baseline of `softroce perf send-lat`) next to the sockets and calls
//! softroce uses (`sendmmsg`, a `recvmmsg` that sleeps with
//! `MSG_WAITFORONE`, `IP_PKTINFO`, `UDP_GRO`), with one packet per turn
//! and with two sent as one GSO send (a reply and the ACK it carries).
//! The three take turns in rounds, so a busy machine slows all alike.
//!
//! `cargo run --release -p roce-udp --example pingpong [TURNS]`

use std::net::{SocketAddr, UdpSocket};
use std::time::{Duration, Instant};

use roce_udp::{RecvBatch, SendBatch, Socket};

/// A SEND of 8 bytes (BTH, payload, ICRC) and an ACK (BTH, AETH, ICRC).
const REPLY: usize = 12 + 8 + 4;
const ACK: usize = 12 + 4 + 4;

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).copied().unwrap_or(0.0)
}

/// One-way latencies (µs) of `turns` round trips over plain sockets.
fn plain(turns: usize) -> std::io::Result<Vec<f64>> {
    let a = UdpSocket::bind("127.0.0.4:0")?;
    let b = UdpSocket::bind("127.0.0.5:0")?;
    let (a_addr, b_addr) = (a.local_addr()?, b.local_addr()?);
    for s in [&a, &b] {
        s.set_read_timeout(Some(Duration::from_secs(5)))?;
    }
    let echo = std::thread::spawn(move || -> std::io::Result<()> {
        let mut buf = [0u8; 2048];
        for _ in 0..turns {
            b.recv(&mut buf)?;
            b.send_to(&[0u8; REPLY], a_addr)?;
        }
        Ok(())
    });
    let mut buf = [0u8; 2048];
    let mut out = Vec::with_capacity(turns);
    for _ in 0..turns {
        let t = Instant::now();
        a.send_to(&[0u8; REPLY], b_addr)?;
        a.recv(&mut buf)?;
        out.push(t.elapsed().as_secs_f64() * 1e6 / 2.0);
    }
    echo.join().map_err(|_| std::io::Error::other("echo thread panicked"))??;
    Ok(out)
}

/// Sends the turn's packets (`two`: a reply and an ACK, one GSO send).
fn send(sock: &Socket, batch: &mut SendBatch<'_>, to: SocketAddr, two: bool) -> std::io::Result<()> {
    let full = |_| std::io::Error::other("batch full");
    batch.push(to, &[0u8; REPLY]).map_err(full)?;
    if two {
        batch.push(to, &[0u8; ACK]).map_err(full)?;
    }
    batch.flush(sock)?;
    Ok(())
}

fn receive(sock: &Socket, batch: &mut RecvBatch) -> std::io::Result<()> {
    while sock.recv_wait(batch, Duration::from_secs(5))? == 0 {}
    Ok(())
}

/// The same over softroce's sockets and calls.
fn transport(turns: usize, two: bool) -> Result<Vec<f64>, Box<dyn std::error::Error>> {
    let a = Socket::bind_addr("127.0.0.6:0".parse()?)?;
    let b = Socket::bind_addr("127.0.0.7:0".parse()?)?;
    let (a_addr, b_addr) = (a.local_addr(), b.local_addr());
    let echo = std::thread::spawn(move || -> std::io::Result<()> {
        let (mut rx, mut tx) = (RecvBatch::new(64), SendBatch::new(64, 64 * 512));
        for _ in 0..turns {
            receive(&b, &mut rx)?;
            send(&b, &mut tx, a_addr, two)?;
        }
        Ok(())
    });
    let (mut rx, mut tx) = (RecvBatch::new(64), SendBatch::new(64, 64 * 512));
    let mut out = Vec::with_capacity(turns);
    for _ in 0..turns {
        let t = Instant::now();
        send(&a, &mut tx, b_addr, two)?;
        receive(&a, &mut rx)?;
        out.push(t.elapsed().as_secs_f64() * 1e6 / 2.0);
    }
    echo.join().map_err(|_| std::io::Error::other("echo thread panicked"))??;
    Ok(out)
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let turns: usize = match std::env::args().nth(1) {
        Some(a) => a.parse().map_err(|_| format!("TURNS must be a number, not {a:?}"))?,
        None => 20_000,
    };
    const ROUNDS: usize = 5;
    let per = (turns / ROUNDS).max(1);
    let (mut p, mut one, mut two) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..ROUNDS {
        p.extend(plain(per)?);
        one.extend(transport(per, false)?);
        two.extend(transport(per, true)?);
    }
    let base = median(p);
    println!("median one-way latency over {} turns each, microseconds:", per * ROUNDS);
    println!("  plain UDP sockets (send_to, recv)          {base:7.2}");
    for (what, v) in [("softroce's sockets, 1 packet per turn", one), ("softroce's sockets, 2 packets (GSO)", two)] {
        let m = median(v);
        println!("  {what:<42} {m:7.2}  {:.2}x", m / base);
    }
    Ok(())
}
