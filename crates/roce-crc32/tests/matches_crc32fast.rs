//! roce-crc32 must give exactly crc32fast's results, whatever the length,
//! alignment, split points and initial value.
#![allow(missing_docs)]

use proptest::prelude::*;
use roce_crc32::{Hasher, checksum};

/// Deterministic pseudo-random bytes (xorshift64*).
fn bytes(n: usize, seed: u64) -> Vec<u8> {
    let mut s = seed | 1;
    (0..n)
        .map(|_| {
            s ^= s >> 12;
            s ^= s << 25;
            s ^= s >> 27;
            (s.wrapping_mul(0x2545_F491_4F6C_DD1D) >> 56) as u8
        })
        .collect()
}

#[test]
fn check_value() {
    assert_eq!(checksum(b"123456789"), 0xCBF4_3926);
    let mut h = Hasher::default();
    h.update(b"123456789");
    assert_eq!(h.finalize(), 0xCBF4_3926);
}

#[test]
fn backend_reports_simd_on_capable_cpus() {
    let backend = roce_crc32::backend();
    eprintln!("backend: {backend}");
    #[cfg(target_arch = "x86_64")]
    if is_x86_feature_detected!("vpclmulqdq")
        && is_x86_feature_detected!("avx2")
        && is_x86_feature_detected!("pclmulqdq")
        && is_x86_feature_detected!("sse4.1")
    {
        assert_eq!(backend, "vpclmulqdq-avx2");
        return;
    }
    assert_eq!(backend, "crc32fast");
}

#[test]
fn every_length_up_to_2048() {
    let data = bytes(2048, 1);
    for len in 0..=2048 {
        let s = &data[..len];
        assert_eq!(checksum(s), crc32fast::hash(s), "len {len}");
    }
}

#[test]
fn unaligned_starts() {
    let data = bytes(4096 + 64, 2);
    for off in 1..64 {
        for len in (0..=600).chain([1023, 1024, 1025, 1500, 2047, 4000, 4096]) {
            let s = &data[off..off + len];
            assert_eq!(checksum(s), crc32fast::hash(s), "offset {off} len {len}");
        }
    }
}

#[test]
fn resume_from_finalized_value() {
    let data = bytes(5000, 3);
    for split in [0, 1, 15, 16, 100, 255, 256, 257, 1000, 4096, 5000] {
        let (a, b) = data.split_at(split);
        let mut h = Hasher::new_with_initial(checksum(a));
        h.update(b);
        assert_eq!(h.finalize(), crc32fast::hash(&data), "split {split}");

        let mut theirs = crc32fast::Hasher::new_with_initial(0xDEAD_BEEF);
        theirs.update(b);
        let mut ours = Hasher::new_with_initial(0xDEAD_BEEF);
        ours.update(b);
        assert_eq!(ours.finalize(), theirs.finalize(), "split {split}");
    }
}

#[test]
fn clone_continues_independently() {
    let data = bytes(3000, 4);
    let mut h = Hasher::new();
    h.update(&data[..1000]);
    let mut h2 = h.clone();
    h.update(&data[1000..]);
    h2.update(&data[1000..2000]);
    assert_eq!(h.finalize(), crc32fast::hash(&data));
    assert_eq!(h2.finalize(), crc32fast::hash(&data[..2000]));
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn random_data_up_to_64k(data in prop::collection::vec(any::<u8>(), 0..=65536), off in 0usize..64) {
        let s = &data[off.min(data.len())..];
        prop_assert_eq!(checksum(s), crc32fast::hash(s));
    }

    #[test]
    fn incremental_equals_one_shot(
        data in prop::collection::vec(any::<u8>(), 0..=20000),
        mut cuts in prop::collection::vec(any::<prop::sample::Index>(), 0..8),
        init in any::<u32>(),
    ) {
        let mut points: Vec<usize> = cuts.drain(..).map(|i| i.index(data.len() + 1)).collect();
        points.sort_unstable();
        let mut h = Hasher::new_with_initial(init);
        let mut start = 0;
        for p in points.into_iter().chain([data.len()]) {
            h.update(&data[start..p]);
            start = p;
        }
        let mut reference = crc32fast::Hasher::new_with_initial(init);
        reference.update(&data);
        prop_assert_eq!(h.finalize(), reference.finalize());
    }
}
