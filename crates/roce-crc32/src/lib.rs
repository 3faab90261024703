//! Fast CRC-32/IEEE (the zlib / Ethernet `crc32`) for the RoCEv2 ICRC.
//!
//! Reflected polynomial `0xEDB88320`, initial value and final xor
//! `0xFFFFFFFF`; `checksum(b"123456789") == 0xCBF43926`. Results are
//! identical to [`crc32fast`].
//!
//! On x86_64 CPUs with VPCLMULQDQ and AVX2 (e.g. AMD Zen 3/4, Intel Ice Lake
//! and later) inputs of at least 16 bytes are hashed by
//! folding with 256-bit carry-less multiplies (four 256-bit accumulators,
//! 128 bytes per iteration). Shorter inputs, other CPUs and other
//! architectures use `crc32fast`, and so do inputs of at least
//! 2 KiB on CPUs with AVX-512, where `crc32fast` folds 512 bits at a time.
//! [`backend_for`] tells which kernel runtime detection chose.
//!
//! On AMD Zen 3 this is at the carry-less multiplier's limit (about 7.5 bytes
//! per cycle) for long inputs, a few percent ahead of `crc32fast` 1.5.5 (which
//! has a 256-bit VPCLMULQDQ path of its own) at 4 KiB, and 15-40% ahead from
//! 16 bytes to 1 KiB thanks to a shorter setup and reduction.
//!
//! ```
//! let mut h = roce_crc32::Hasher::new();
//! h.update(b"1234");
//! h.update(b"56789");
//! assert_eq!(h.finalize(), 0xCBF4_3926);
//! assert_eq!(roce_crc32::checksum(b"123456789"), 0xCBF4_3926);
//! ```
#![deny(unsafe_code)]

#[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
mod consts;
#[cfg(target_arch = "x86_64")]
mod x86;

/// Inputs at least this long use the SIMD kernel when it is available;
/// shorter ones go to `crc32fast`: below 16 bytes it has no whole 128-bit
/// lane to fold, and from 16 on it is the faster (`docs/icrc.md`).
#[cfg(target_arch = "x86_64")]
const SIMD_THRESHOLD: usize = 16;

/// Inputs at least this long go to `crc32fast` on CPUs with AVX-512, whose
/// 512-bit kernel then beats the 256-bit one here (both fold the same way,
/// with twice the width; `docs/icrc.md` has the measurements).
#[cfg(target_arch = "x86_64")]
pub const WIDE_THRESHOLD: usize = 2048;

/// Incremental CRC-32 (IEEE). Same results as `crc32fast::Hasher`.
#[derive(Clone, Debug)]
pub struct Hasher {
    /// The CRC of everything so far, in finalized form.
    state: u32,
}

impl Hasher {
    /// A hasher for a new message.
    #[must_use]
    pub fn new() -> Hasher {
        Hasher::new_with_initial(0)
    }

    /// A hasher that resumes from `crc`, the finalized CRC of the bytes
    /// before, like `crc32fast::Hasher::new_with_initial`.
    #[must_use]
    pub fn new_with_initial(crc: u32) -> Hasher {
        Hasher { state: crc }
    }

    /// Adds `bytes` to the message.
    pub fn update(&mut self, bytes: &[u8]) {
        self.state = update(self.state, bytes);
    }

    /// The CRC-32 of all bytes added.
    #[must_use]
    pub fn finalize(self) -> u32 {
        self.state
    }
}

impl Default for Hasher {
    fn default() -> Hasher {
        Hasher::new()
    }
}

/// The CRC-32 (IEEE) of `bytes`, equal to `crc32fast::hash(bytes)`.
#[must_use]
pub fn checksum(bytes: &[u8]) -> u32 {
    update(0, bytes)
}

/// Which kernel runtime detection chose for inputs of at least 16 bytes
/// (and under 2 KiB): `"vpclmulqdq-avx2"` or `"crc32fast"`.
#[must_use]
pub fn backend() -> &'static str {
    backend_for(16)
}

/// Which kernel hashes an input of `len` bytes on this CPU:
/// `"vpclmulqdq-avx2"` or `"crc32fast"`.
#[must_use]
pub fn backend_for(len: usize) -> &'static str {
    #[cfg(target_arch = "x86_64")]
    if vpclmul_for(len).is_some() {
        return "vpclmulqdq-avx2";
    }
    let _ = len;
    "crc32fast"
}

/// This crate's 256-bit kernel, if it hashes an input of `len` bytes here.
#[cfg(target_arch = "x86_64")]
#[inline]
fn vpclmul_for(len: usize) -> Option<x86::Vpclmul> {
    if len < SIMD_THRESHOLD || (len >= WIDE_THRESHOLD && x86::crc32fast_has_avx512()) {
        return None;
    }
    x86::Vpclmul::detect()
}

/// Continues the finalized CRC `crc` over `bytes`.
#[inline]
fn update(crc: u32, bytes: &[u8]) -> u32 {
    #[cfg(target_arch = "x86_64")]
    if let Some(kernel) = vpclmul_for(bytes.len()) {
        return kernel.update(crc, bytes);
    }
    update_crc32fast(crc, bytes)
}

/// Continues the finalized CRC `crc` over `bytes` with `crc32fast`.
#[inline]
fn update_crc32fast(crc: u32, bytes: &[u8]) -> u32 {
    let mut h = crc32fast::Hasher::new_with_initial(crc);
    h.update(bytes);
    h.finalize()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn check_value() {
        assert_eq!(checksum(b"123456789"), 0xCBF4_3926);
        assert_eq!(checksum(b""), 0);
    }

    #[test]
    fn backend_is_simd_when_the_cpu_has_it() {
        #[cfg(target_arch = "x86_64")]
        {
            let has = std::arch::is_x86_feature_detected!("vpclmulqdq")
                && std::arch::is_x86_feature_detected!("avx2")
                && std::arch::is_x86_feature_detected!("pclmulqdq")
                && std::arch::is_x86_feature_detected!("sse4.1");
            assert_eq!(x86::Vpclmul::detect().is_some(), has);
            assert_eq!(backend(), if has { "vpclmulqdq-avx2" } else { "crc32fast" });
            eprintln!("roce-crc32 backend: {}", backend());
        }
        #[cfg(not(target_arch = "x86_64"))]
        assert_eq!(backend(), "crc32fast");
    }

    #[test]
    fn long_inputs_go_to_crc32fast_where_it_has_avx512() {
        #[cfg(target_arch = "x86_64")]
        {
            let avx512 =
                std::arch::is_x86_feature_detected!("avx512f") && std::arch::is_x86_feature_detected!("vpclmulqdq");
            let ours = x86::Vpclmul::detect().is_some();
            let want = |long: bool| if ours && !(long && avx512) { "vpclmulqdq-avx2" } else { "crc32fast" };
            assert_eq!(backend_for(15), "crc32fast");
            assert_eq!(backend_for(WIDE_THRESHOLD - 1), want(false));
            assert_eq!(backend_for(WIDE_THRESHOLD), want(true));
            assert_eq!(backend_for(4096), want(true));
            eprintln!("roce-crc32 backend for 4096 bytes: {}", backend_for(4096));
        }
        #[cfg(not(target_arch = "x86_64"))]
        assert_eq!(backend_for(4096), "crc32fast");
    }

    #[test]
    fn every_length_around_the_wide_threshold_matches_crc32fast() {
        let data: Vec<u8> = (0..3000u32).map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8).collect();
        for len in 2000..2100 {
            for init in [0u32, 0xDEAD_BEEF] {
                let mut h = Hasher::new_with_initial(init);
                h.update(&data[..len]);
                assert_eq!(h.finalize(), update_crc32fast(init, &data[..len]), "len {len} init {init:#x}");
            }
        }
    }

    /// Deterministic pseudo-random bytes (xorshift64*).
    #[cfg(target_arch = "x86_64")]
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

    #[cfg(target_arch = "x86_64")]
    #[test]
    fn simd_kernel_directly_matches_crc32fast() {
        let Some(kernel) = x86::Vpclmul::detect() else {
            eprintln!("no vpclmulqdq+avx2 on this CPU: SIMD kernel not tested");
            return;
        };
        let data = bytes(4096 + 64, 7);
        // Every length through several 128-byte blocks, every start offset
        // mod 64, and a few initial values.
        for len in 0..=1100 {
            for &off in &[0usize, 1, 3, 15, 17, 31, 33, 63] {
                let s = &data[off..off + len];
                for &init in &[0u32, 0xFFFF_FFFF, 0x1234_5678] {
                    let want = update_crc32fast(init, s);
                    assert_eq!(kernel.update(init, s), want, "len {len} off {off} init {init:#x}");
                }
            }
        }
        for len in [4096, 4095, 4081, 4097 - 33, 2048 + 7, 4096 + 64] {
            let s = &data[..len];
            assert_eq!(kernel.update(0, s), crc32fast::hash(s), "len {len}");
        }
    }

    #[test]
    fn all_zero_and_all_ones() {
        for len in [16, 31, 32, 128, 255, 256, 257, 1024, 4096] {
            for byte in [0u8, 0xFF] {
                let v = vec![byte; len];
                assert_eq!(checksum(&v), crc32fast::hash(&v), "len {len} byte {byte:#x}");
            }
        }
    }
}
