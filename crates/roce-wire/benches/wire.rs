//! Wire-layer speed: the ICRC over a 4096-byte-payload packet next to a
//! plain memcpy of the same 4096 bytes (the baseline, measured in the same
//! run), and parse + verify time per packet. Prints `icrc/memcpy = N.NNx`.

use std::hint::black_box;
use std::net::Ipv4Addr;

use criterion::{Criterion, Throughput, criterion_group};
use roce_wire::{
    AethRepr, BthRepr, ExtRepr, IcrcContext, IcrcHasher, IpContext, Opcode, Packet, PacketRepr, Psn, RethRepr, Syndrome,
};

const PAYLOAD: usize = 4096;

fn ctx() -> IcrcContext {
    IcrcContext {
        ip: IpContext::v4_socket(Ipv4Addr::new(127, 0, 0, 2), Ipv4Addr::new(127, 0, 0, 3)),
        src_port: 0xc121,
        dst_port: roce_wire::ROCE_V2_UDP_PORT,
    }
}

fn packet(opcode: Opcode, payload_len: usize, ext: ExtRepr) -> Vec<u8> {
    let repr = PacketRepr { bth: BthRepr::new(opcode, 0x11, Psn::new(0x123456)), ext };
    let payload: Vec<u8> = (0..payload_len).map(|i| (i * 31 + 7) as u8).collect();
    let mut buf = vec![0u8; repr.packet_len(payload_len).unwrap()];
    repr.emit(&mut buf, &payload, &ctx()).unwrap();
    buf
}

fn icrc_vs_memcpy(c: &mut Criterion) {
    let mut g = c.benchmark_group("icrc_4096");
    g.throughput(Throughput::Bytes(PAYLOAD as u64));
    // Source and destination 64-byte aligned and 2 KiB apart modulo 4096, so
    // glibc's memcpy does not hit the 4K-aliasing slow path.
    let src = vec![0x5au8; PAYLOAD + 4096];
    let mut dst = vec![0u8; PAYLOAD + 8192];
    let s_off = src.as_ptr().align_offset(64);
    let d_off = (dst.as_ptr().align_offset(64) + 2048) % 4096;
    let src = &src[s_off..s_off + PAYLOAD];
    g.bench_function("memcpy", |b| {
        b.iter(|| {
            dst[d_off..d_off + PAYLOAD].copy_from_slice(black_box(src));
            black_box(&dst);
        })
    });
    let pkt = packet(Opcode::RC_RDMA_WRITE_MIDDLE, PAYLOAD, ExtRepr::default());
    let covered = &pkt[..pkt.len() - 4];
    let ctx = ctx();
    g.bench_function("icrc", |b| {
        b.iter(|| IcrcHasher::new(black_box(&ctx), pkt.len()).finish_over(black_box(covered)).unwrap())
    });
    g.finish();
}

fn parse_verify(c: &mut Criterion) {
    let mut g = c.benchmark_group("parse_verify");
    g.throughput(Throughput::Elements(1));
    let reth = RethRepr { va: 0x7f00_0000_1000, rkey: 0x1234, dma_len: PAYLOAD as u32 };
    let aeth = AethRepr { syndrome: Syndrome::Ack { credits: Syndrome::CREDITS_INVALID }, msn: 9 };
    let cases = [
        (
            "write_only_4096",
            packet(Opcode::RC_RDMA_WRITE_ONLY, PAYLOAD, ExtRepr { reth: Some(reth), ..Default::default() }),
        ),
        ("send_only_64", packet(Opcode::RC_SEND_ONLY, 64, ExtRepr::default())),
        ("ack", packet(Opcode::RC_ACKNOWLEDGE, 0, ExtRepr { aeth: Some(aeth), ..Default::default() })),
    ];
    let ctx = ctx();
    for (name, pkt) in &cases {
        g.bench_function(*name, |b| {
            b.iter(|| {
                let p = Packet::new_checked(black_box(&pkt[..])).unwrap();
                p.verify_icrc(IcrcHasher::new(&ctx, pkt.len())).unwrap();
                p.payload().len()
            })
        });
    }
    g.finish();
}

criterion_group!(benches, icrc_vs_memcpy, parse_verify);

#[path = "../../../benches-support/criterion_mean.rs"]
mod criterion_mean;
use criterion_mean::mean_ns;

fn main() {
    benches();
    Criterion::default().configure_from_args().final_summary();
    if let (Some(memcpy), Some(icrc)) = (mean_ns("icrc_4096", "memcpy"), mean_ns("icrc_4096", "icrc")) {
        let gbs = |ns: f64| PAYLOAD as f64 / ns;
        println!(
            "icrc 4096 B: {:.1} GB/s, memcpy 4096 B: {:.1} GB/s, icrc/memcpy = {:.2}x",
            gbs(icrc),
            gbs(memcpy),
            memcpy / icrc
        );
    }
}
