//! The engine's own cost per message, both ends in one thread with no I/O:
//! B posts a receive, A a signaled SEND (or RDMA WRITE), A's packets go to
//! B, B's ACK to A, and both CQs are polled. Beside it, the baseline of the
//! same run: a memcpy of the message's bytes. Prints `engine/memcpy`
//! for each size: what the engine adds over moving the bytes once (it
//! moves them twice, into the packets and out of them, and runs the ICRC
//! over each packet on both ends).

use std::hint::black_box;
use std::time::Instant;

use criterion::{Criterion, Throughput, criterion_group};
use roce_proto::verbs::{WcOpcode, WcStatus, WrOpcode};
use roce_proto::{Mtu, Wc};

#[path = "../tests/common/mod.rs"]
mod common;
use common::{A, B, Pair, Setup};

/// Message sizes: one packet, UCX's eager segment (two packets at MTU
/// 4096), and a bulk WRITE (16 packets).
const CASES: [(&str, WrOpcode, usize); 3] =
    [("send_64", WrOpcode::Send, 64), ("send_8192", WrOpcode::Send, 8192), ("write_65536", WrOpcode::RdmaWrite, 65536)];

/// One message from A to B and its ACK back, completions polled.
fn one_message(p: &mut Pair, buf: &mut [u8], op: WrOpcode, len: usize, wc: &mut [Wc]) {
    if op == WrOpcode::Send {
        p.recv(B, 1, 0, len as u32);
    }
    p.send(A, 2, op, 0, len as u32, 0);
    let now = Instant::now();
    for (from, to) in [(A, B), (B, A)] {
        while let Some(t) = p.dev[from].poll_transmit(now, buf) {
            let (src, dst) = (p.addr[from], p.addr[to]);
            p.dev[to].handle_datagram(now, src, t.src_port, dst, None, &buf[..t.len]);
        }
    }
    let got = p.dev[A].poll_cq(p.cq[A], wc).unwrap();
    debug_assert!(got == 1 && wc[0].status == WcStatus::Success && wc[0].opcode != WcOpcode::Recv);
    if op == WrOpcode::Send {
        let got = p.dev[B].poll_cq(p.cq[B], wc).unwrap();
        debug_assert!(got == 1 && wc[0].byte_len as usize == len);
    }
}

fn engine(c: &mut Criterion) {
    for (name, op, len) in CASES {
        let mut g = c.benchmark_group(format!("engine_{name}"));
        g.throughput(Throughput::Bytes(len as u64));
        let src = vec![0x5au8; len];
        let mut dst = vec![0u8; len];
        g.bench_function("memcpy", |b| {
            b.iter(|| {
                dst.copy_from_slice(black_box(&src));
                black_box(&dst);
            })
        });
        let mut p = Pair::new(Setup { mtu: Mtu::Mtu4096, ..Setup::default() });
        p.fill(A, 0, len, 3);
        let mut buf = vec![0u8; 9000];
        let mut wc = [Wc::new(0, WcStatus::Success, WcOpcode::Send, 0); 4];
        // The first message checked in full: the loop moves real data.
        one_message(&mut p, &mut buf, op, len, &mut wc);
        assert_eq!(p.mem[B].get(0, len), p.mem[A].get(0, len), "{name}: B holds A's bytes");
        g.bench_function("engine", |b| b.iter(|| one_message(&mut p, &mut buf, op, len, &mut wc)));
        g.finish();
    }
}

criterion_group!(benches, engine);

#[path = "../../../benches-support/criterion_mean.rs"]
mod criterion_mean;
use criterion_mean::mean_ns;

fn main() {
    benches();
    Criterion::default().configure_from_args().final_summary();
    for (name, _, len) in CASES {
        let group = format!("engine_{name}");
        if let (Some(m), Some(e)) = (mean_ns(&group, "memcpy"), mean_ns(&group, "engine")) {
            println!(
                "{name}: engine {e:.0} ns a message ({:.2} GB/s), memcpy {m:.0} ns, engine/memcpy = {:.1}x",
                len as f64 / e,
                e / m
            );
        }
    }
}
