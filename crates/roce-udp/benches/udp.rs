//! Loopback throughput of RoCE-sized datagrams (32-byte header + 4096-byte
//! payload, sent as two iovecs), 16 per round: one `sendmsg` per packet
//! versus `SendBatch` GSO messages; the other socket, in the same thread,
//! drains each round with `recvmmsg` + GRO.

use std::hint::black_box;
use std::io::IoSlice;
use std::net::SocketAddr;
use std::time::Duration;

use criterion::{Criterion, Throughput, criterion_group};
use roce_udp::{RecvBatch, SendBatch, Socket};

const HEADER: usize = 32;
const PAYLOAD: usize = 4096;
const PACKET: usize = HEADER + PAYLOAD;
/// Packets per round (GSO messages hold up to 16; 16 x 4128 bytes exceeds
/// a datagram, so a round is one 15-segment message and one single).
const BURST: usize = 16;
const GROUP: &str = "loopback_4128B_x16";

/// Receives until `want` packets arrived; returns their bytes.
fn drain(sock: &Socket, rx: &mut RecvBatch, want: usize) -> usize {
    let (mut got, mut bytes) = (0, 0);
    while got < want {
        if sock.recv(rx).unwrap() == 0 {
            std::hint::spin_loop();
            continue;
        }
        for s in rx.segments() {
            got += 1;
            bytes += s.data.len();
        }
    }
    assert_eq!(got, want, "lost or extra packets");
    bytes
}

fn sockets() -> (Socket, Socket) {
    let bind = |ip: &str| Socket::bind_addr(SocketAddr::new(ip.parse().unwrap(), 0)).unwrap();
    (bind("127.0.0.30"), bind("127.0.0.31"))
}

fn loopback(c: &mut Criterion) {
    let (tx_sock, rx_sock) = sockets();
    let dst = rx_sock.local_addr();
    let header = [0x5au8; HEADER];
    let payload = vec![0xa5u8; PAYLOAD];
    let whole = [&header[..], &payload[..]].concat();
    let mut rx = RecvBatch::new(BURST);
    let mut g = c.benchmark_group(GROUP);
    g.throughput(Throughput::Bytes((BURST * PACKET) as u64));
    g.measurement_time(Duration::from_secs(4));

    g.bench_function("per_packet", |b| {
        b.iter(|| {
            for _ in 0..BURST {
                let n = tx_sock.send_to_vectored(&[IoSlice::new(&header), IoSlice::new(&payload)], dst).unwrap();
                assert_eq!(n, PACKET);
            }
            black_box(drain(&rx_sock, &mut rx, BURST))
        })
    });

    let mut batch = SendBatch::new(BURST, BURST * HEADER);
    batch.set_max_segments(16);
    g.bench_function("gso16", |b| {
        b.iter(|| {
            for _ in 0..BURST {
                batch.push_parts(dst, &header, &payload).unwrap();
            }
            let f = batch.flush(&tx_sock).unwrap();
            assert_eq!((f.packets, f.pending), (BURST, 0));
            black_box(drain(&rx_sock, &mut rx, BURST))
        })
    });

    let mut batch = SendBatch::new(BURST, BURST * PACKET);
    batch.set_max_segments(16);
    g.bench_function("gso16_copied", |b| {
        b.iter(|| {
            for _ in 0..BURST {
                batch.push(dst, &whole).unwrap();
            }
            let f = batch.flush(&tx_sock).unwrap();
            assert_eq!((f.packets, f.pending), (BURST, 0));
            black_box(drain(&rx_sock, &mut rx, BURST))
        })
    });
    g.finish();
    let s = rx.stats();
    println!(
        "receiver: {} recvmmsg calls, {} datagrams, {} packets (GRO on: {})",
        s.calls,
        s.datagrams,
        s.segments,
        rx_sock.gro_enabled()
    );
}

criterion_group!(benches, loopback);

#[path = "../../../benches-support/criterion_mean.rs"]
mod criterion_mean;
use criterion_mean::mean_ns;

fn main() {
    benches();
    Criterion::default().configure_from_args().final_summary();
    let gbs = |ns: f64| (BURST * PACKET) as f64 / ns;
    if let (Some(per), Some(gso)) = (mean_ns(GROUP, "per_packet"), mean_ns(GROUP, "gso16")) {
        let copied = mean_ns(GROUP, "gso16_copied");
        println!(
            "per-packet: {:.2} GB/s ({:.0} ns/packet), gso16: {:.2} GB/s ({:.0} ns/packet), gso16 copied: {}",
            gbs(per),
            per / BURST as f64,
            gbs(gso),
            gso / BURST as f64,
            copied.map_or("-".to_owned(), |c| format!("{:.2} GB/s", gbs(c)))
        );
        println!("gso/per-packet = {:.2}x", per / gso);
    }
}
