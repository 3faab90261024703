//! CRC-32 on a 4096-byte buffer: roce-crc32 vs crc32fast vs a plain memcpy of
//! the same bytes, plus a size sweep used to pick `SIMD_THRESHOLD` and `WIDE_THRESHOLD`.
#![allow(missing_docs)]

use std::hint::black_box;

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};

const LEN: usize = 4096;
/// Destination offset from the source: 64-byte aligned, and its page offset
/// (2048) is far from 1..=31, avoiding glibc memcpy's 4K-aliasing slowdown.
const DST_OFFSET: usize = 2 * 4096 + 2048;

/// A page-aligned arena holding both buffers.
#[repr(C, align(4096))]
struct Arena([u8; 4 * 4096]);

fn arena() -> Box<Arena> {
    let mut a = Box::new(Arena([0; 4 * 4096]));
    let mut s = 0x9E37_79B9_7F4A_7C15u64;
    for b in a.0.iter_mut() {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        *b = s as u8;
    }
    a
}

fn bench_4096(c: &mut Criterion) {
    let mut arena = arena();
    let (src_part, dst_part) = arena.0.split_at_mut(DST_OFFSET);
    let src = &src_part[..LEN];
    let dst = &mut dst_part[..LEN];
    assert_eq!(roce_crc32::checksum(src), crc32fast::hash(src));

    let mut g = c.benchmark_group(format!("crc32-4096 [{}]", roce_crc32::backend_for(LEN)));
    g.throughput(Throughput::Bytes(LEN as u64));
    g.bench_function("roce_crc32::checksum", |b| b.iter(|| roce_crc32::checksum(black_box(src))));
    g.bench_function("crc32fast::hash", |b| b.iter(|| crc32fast::hash(black_box(src))));
    g.bench_function("memcpy", |b| {
        b.iter(|| {
            black_box(&mut *dst).copy_from_slice(black_box(src));
        })
    });
    g.finish();
}

fn bench_sizes(c: &mut Criterion) {
    let arena = arena();
    let mut g = c.benchmark_group("crc32-sizes");
    g.measurement_time(std::time::Duration::from_secs(1)).warm_up_time(std::time::Duration::from_millis(300));
    for len in [64usize, 128, 192, 256, 512, 1024, 1500, 2048, 3072, 4096, 9000] {
        // Unaligned start, as packet payloads usually are.
        let data = &arena.0[3..3 + len];
        g.throughput(Throughput::Bytes(len as u64));
        g.bench_with_input(BenchmarkId::new("roce_crc32", len), data, |b, d| {
            b.iter(|| roce_crc32::checksum(black_box(d)))
        });
        g.bench_with_input(BenchmarkId::new("crc32fast", len), data, |b, d| b.iter(|| crc32fast::hash(black_box(d))));
    }
    g.finish();
}

criterion_group!(benches, bench_4096, bench_sizes);
criterion_main!(benches);
