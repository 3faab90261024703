//! Shared by the multi-process tests of this crate.

/// `len` bytes of a xorshift stream seeded by `seed`: every iteration of a
/// transfer writes other bytes, so a stale or misplaced write shows.
pub fn pattern(len: usize, seed: u64) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}
