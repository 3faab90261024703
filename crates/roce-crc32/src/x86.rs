//! The x86_64 kernel: CRC-32/IEEE by folding with 256-bit VPCLMULQDQ on AVX2
//! registers (no AVX-512 needed).
//!
//! This is the only module of the crate with `unsafe` code: the unaligned
//! vector loads (always from `&[u8; N]` references, so never out of bounds)
//! and the calls into `#[target_feature]` functions, made only after runtime
//! feature detection.
//!
//! # Algorithm
//!
//! Four 256-bit accumulators hold eight 128-bit lanes, i.e. 128 bytes of
//! message. Each main-loop iteration moves every lane 128 bytes (1024 bits)
//! forward by multiplying it by `x^1024 mod P` (two carry-less multiplies per
//! lane, one per 64-bit half) and adds the next 128 bytes. Afterwards the
//! accumulators are folded onto one 256-bit register, which absorbs any
//! further whole 32-byte chunks, is folded to 128 bits, absorbs a whole
//! 16-byte chunk if one is left, then the final 1..=15 bytes by a byte shuffle
//! of the lane and an overlapping (in-bounds) load of the last 16 input bytes.
//! The 128-bit remainder is reduced to 96, then 64 bits, and a Barrett
//! reduction yields the 32-bit CRC. See [`crate::consts`] for the conventions
//! and the derivation of the constants.
//!
//! # Speed
//!
//! The main loop is bound by the carry-less multiplier: on AMD Zen 3 one
//! `vpclmulqdq` (256-bit) issues every ~2.1 cycles, the same rate as the
//! 128-bit form, so two of them per 32 bytes cap the kernel near 7.5 bytes
//! per cycle. Interleaving a scalar slice-by-16 table CRC with the loop was
//! tried and made it slower (the extra integer work is not free there).
#![allow(unsafe_code)]

use core::arch::x86_64::{
    __m128i, __m256i, _mm_add_epi8, _mm_blend_epi32, _mm_blendv_epi8, _mm_clmulepi64_si128, _mm_cvtsi32_si128,
    _mm_extract_epi32, _mm_loadu_si128, _mm_set_epi64x, _mm_set1_epi8, _mm_setr_epi8, _mm_setzero_si128,
    _mm_shuffle_epi8, _mm_slli_si128, _mm_srli_si128, _mm_xor_si128, _mm256_castsi256_si128, _mm256_clmulepi64_epi128,
    _mm256_extracti128_si256, _mm256_loadu_si256, _mm256_set_epi64x, _mm256_setr_epi32, _mm256_xor_si256,
};
use std::sync::OnceLock;

use crate::consts::{BARRETT_MU, BARRETT_P, FOLD_128, FOLD_256, FOLD_512, FOLD_768, FOLD_1024, RED_64, RED_96};

/// Proof that the CPU supports the kernel's instruction set extensions.
///
/// Only [`Vpclmul::detect`] creates one, and only after runtime detection
/// found every feature the kernel is compiled for.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Vpclmul(());

impl Vpclmul {
    /// Returns the token when `vpclmulqdq`, `avx2`, `pclmulqdq` and `sse4.1`
    /// are all available. The detection runs once and is cached.
    #[inline]
    pub(crate) fn detect() -> Option<Vpclmul> {
        static DETECTED: OnceLock<bool> = OnceLock::new();
        let ok = *DETECTED.get_or_init(|| {
            is_x86_feature_detected!("vpclmulqdq")
                && is_x86_feature_detected!("avx2")
                && is_x86_feature_detected!("pclmulqdq")
                && is_x86_feature_detected!("sse4.1")
        });
        ok.then_some(Vpclmul(()))
    }

    /// Continues the CRC `crc` (in finalized form, like
    /// `crc32fast::Hasher::new_with_initial`) over `data`; any length.
    #[inline]
    pub(crate) fn update(self, crc: u32, data: &[u8]) -> u32 {
        // SAFETY: `self` exists only if `detect` found vpclmulqdq, avx2,
        // pclmulqdq and sse4.1 on this CPU, which are all the features
        // `update_vpclmul` is compiled with.
        unsafe { update_vpclmul(crc, data) }
    }
}

/// Whether `crc32fast` runs its 512-bit kernel here (it checks `avx512f`
/// and `vpclmulqdq`, with the SSE features every such CPU has). Cached.
#[inline]
pub(crate) fn crc32fast_has_avx512() -> bool {
    static DETECTED: OnceLock<bool> = OnceLock::new();
    *DETECTED.get_or_init(|| {
        is_x86_feature_detected!("avx512f")
            && is_x86_feature_detected!("vpclmulqdq")
            && is_x86_feature_detected!("pclmulqdq")
            && is_x86_feature_detected!("sse4.1")
            && is_x86_feature_detected!("ssse3")
    })
}

/// Unaligned 32-byte load.
// SAFETY: a safe `#[target_feature]` fn: callable without `unsafe` only from
// code compiled with avx2 (here: `update_vpclmul`, entered after detection).
#[inline]
#[target_feature(enable = "avx2")]
fn load256(bytes: &[u8; 32]) -> __m256i {
    // SAFETY: `bytes` refers to exactly 32 readable bytes, and `loadu` has no
    // alignment requirement.
    unsafe { _mm256_loadu_si256(bytes.as_ptr().cast()) }
}

/// Unaligned 16-byte load.
// SAFETY: safe `#[target_feature]` fn; sse2 is part of the x86_64 baseline.
#[inline]
#[target_feature(enable = "sse2")]
fn load128(bytes: &[u8; 16]) -> __m128i {
    // SAFETY: `bytes` refers to exactly 16 readable bytes, and `loadu` has no
    // alignment requirement.
    unsafe { _mm_loadu_si128(bytes.as_ptr().cast()) }
}

/// Broadcasts a fold constant pair to both 128-bit halves of a 256-bit register.
// SAFETY: safe `#[target_feature]` fn, only called from `update_vpclmul`,
// which has avx2 enabled and is entered only after runtime detection.
#[inline]
#[target_feature(enable = "avx2")]
fn k256((lo, hi): (u64, u64)) -> __m256i {
    _mm256_set_epi64x(hi as i64, lo as i64, hi as i64, lo as i64)
}

/// A fold constant pair in a 128-bit register.
// SAFETY: safe `#[target_feature]` fn; sse2 is part of the x86_64 baseline.
#[inline]
#[target_feature(enable = "sse2")]
fn k128((lo, hi): (u64, u64)) -> __m128i {
    _mm_set_epi64x(hi as i64, lo as i64)
}

/// Moves each 128-bit lane of `acc` forward by the distance `k` encodes.
// SAFETY: safe `#[target_feature]` fn (register operations only), only
// called from `update_vpclmul`, entered after avx2 and vpclmulqdq detection.
#[inline]
#[target_feature(enable = "avx2,vpclmulqdq")]
fn fold256(acc: __m256i, k: __m256i) -> __m256i {
    _mm256_xor_si256(_mm256_clmulepi64_epi128::<0x00>(acc, k), _mm256_clmulepi64_epi128::<0x11>(acc, k))
}

/// Moves the 128-bit lane `acc` forward by the distance `k` encodes.
// SAFETY: safe `#[target_feature]` fn (register operations only), only
// called from `update_vpclmul`, entered after pclmulqdq detection.
#[inline]
#[target_feature(enable = "sse2,pclmulqdq")]
fn fold128(acc: __m128i, k: __m128i) -> __m128i {
    _mm_xor_si128(_mm_clmulepi64_si128::<0x00>(acc, k), _mm_clmulepi64_si128::<0x11>(acc, k))
}

/// Reduces the 128-bit lane `x` (with no message bytes after it) to the CRC
/// register value `x^32 * X mod P`, reflected.
// SAFETY: safe `#[target_feature]` fn (register operations only), only
// called from `update_vpclmul`, entered after avx2 and pclmulqdq detection.
#[inline]
#[target_feature(enable = "avx2,pclmulqdq")]
fn reduce128(x: __m128i) -> u32 {
    // X * x^32 = X_hi * x^96 + X_lo * x^32. The low qword of `x` is
    // rev64(X_hi); the high qword, rev64(X_lo), moves to bits 32..96 to
    // represent X_lo * x^32 in 128-bit reflected form. Result: degree < 96.
    let k = _mm_set_epi64x(RED_64 as i64, RED_96 as i64);
    let t = _mm_xor_si128(_mm_clmulepi64_si128::<0x00>(x, k), _mm_slli_si128::<4>(_mm_srli_si128::<8>(x)));
    // T = T_top * x^64 + T_low: the low qword of `t` is rev64(T_top) (degree
    // < 32), the high qword rev64(T_low). T_top * x^64 mod P has degree < 64
    // and lands in the high qword, giving w = rev64(W) there, deg W < 64.
    let u = _mm_xor_si128(_mm_clmulepi64_si128::<0x10>(t, k), t);
    // Barrett: q = floor(W_hi * mu / x^32) where W_hi = W / x^32 is
    // reflected in the low half of w (dword 2 of `u`); rev32(q) comes out in
    // the low dword of t1. Then W mod P = (W + q * P) mod x^32, which is the
    // upper half of w ^ t2.lo, i.e. dword 3 of `u` xor dword 1 of `t2`.
    let k = _mm_set_epi64x(BARRETT_P as i64, BARRETT_MU as i64);
    let zero = _mm_setzero_si128();
    let t1 = _mm_clmulepi64_si128::<0x01>(_mm_blend_epi32::<0b0100>(zero, u), k);
    let t2 = _mm_clmulepi64_si128::<0x10>(_mm_blend_epi32::<0b0001>(zero, t1), k);
    let r = _mm_xor_si128(_mm_srli_si128::<8>(u), t2);
    _mm_extract_epi32::<1>(r) as u32
}

/// The kernel. `crc` is in finalized form (0 for a fresh hash).
// SAFETY: callers outside code with these features must use `unsafe` and
// guarantee the CPU supports vpclmulqdq, avx2, pclmulqdq and sse4.1; the only
// caller, `Vpclmul::update`, holds a token proving runtime detection found
// them. The body reads `data` only through `&[u8; N]` sub-slices obtained
// with bounds-checked slice methods, so no load leaves the slice.
#[target_feature(enable = "vpclmulqdq,avx2,pclmulqdq,sse4.1")]
fn update_vpclmul(crc: u32, data: &[u8]) -> u32 {
    if data.len() < 16 {
        return crate::update_crc32fast(crc, data);
    }
    let reg = !crc;
    let mut rest = data;
    let mut x: __m128i;
    if rest.len() >= 32 {
        let mut y: __m256i;
        // The register value is added to the first 32 bits of the message.
        let init = _mm256_setr_epi32(reg as i32, 0, 0, 0, 0, 0, 0, 0);
        if let Some((first, r)) = rest.split_first_chunk::<128>()
            && r.len() >= 128
        {
            let (c, _) = first.as_chunks::<32>();
            let mut a0 = _mm256_xor_si256(load256(&c[0]), init);
            let mut a1 = load256(&c[1]);
            let mut a2 = load256(&c[2]);
            let mut a3 = load256(&c[3]);
            let (blocks, r) = r.as_chunks::<128>();
            rest = r;
            let k = k256(FOLD_1024);
            for block in blocks {
                let (c, _) = block.as_chunks::<32>();
                a0 = _mm256_xor_si256(fold256(a0, k), load256(&c[0]));
                a1 = _mm256_xor_si256(fold256(a1, k), load256(&c[1]));
                a2 = _mm256_xor_si256(fold256(a2, k), load256(&c[2]));
                a3 = _mm256_xor_si256(fold256(a3, k), load256(&c[3]));
            }
            // Lanes of a0 are 96 bytes before those of a3, a1 64, a2 32.
            let b0 = _mm256_xor_si256(fold256(a0, k256(FOLD_768)), fold256(a1, k256(FOLD_512)));
            let b1 = _mm256_xor_si256(fold256(a2, k256(FOLD_256)), a3);
            y = _mm256_xor_si256(b0, b1);
        } else {
            let Some((first, r)) = rest.split_first_chunk::<32>() else { unreachable!("len >= 32") };
            y = _mm256_xor_si256(load256(first), init);
            rest = r;
        }
        let (chunks, r) = rest.as_chunks::<32>();
        rest = r;
        let k = k256(FOLD_256);
        for chunk in chunks {
            y = _mm256_xor_si256(fold256(y, k), load256(chunk));
        }
        // Fold the first lane onto the second.
        let lo = _mm256_castsi256_si128(y);
        let hi = _mm256_extracti128_si256::<1>(y);
        x = _mm_xor_si128(fold128(lo, k128(FOLD_128)), hi);
    } else {
        let Some((first, r)) = rest.split_first_chunk::<16>() else { unreachable!("len >= 16") };
        x = _mm_xor_si128(load128(first), _mm_cvtsi32_si128(reg as i32));
        rest = r;
    }

    let k = k128(FOLD_128);
    let (chunks, r) = rest.as_chunks::<16>();
    for chunk in chunks {
        x = _mm_xor_si128(fold128(x, k), load128(chunk));
    }

    let left = r.len(); // 0..=15 bytes
    if left > 0 {
        // The message still to reduce is S = (16 bytes of x) ++ (`left` tail
        // bytes). Split it as A = S[..left] and B = S[left..]: S = A * x^128
        // + B. A becomes a lane with 16 - left leading zero bytes and is
        // folded by 16 bytes onto B; B is x shifted down by `left` bytes,
        // topped up with the tail taken from the last 16 bytes of `data`
        // (in bounds: data.len() >= 16).
        let Some(last) = data.last_chunk::<16>() else { unreachable!("len >= 16") };
        let last = load128(last);
        // ctrl[i] = i + left + 0x70: below 0x80 (select x[i + left]) iff
        // i + left < 16, otherwise high bit set (zero in pshufb, `last` in
        // blendv) with low nibble i + left - 16.
        let iota = _mm_setr_epi8(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
        let ctrl_b = _mm_add_epi8(iota, _mm_set1_epi8((left + 0x70) as i8));
        let ctrl_a = _mm_xor_si128(ctrl_b, _mm_set1_epi8(0x80u8 as i8));
        let a = _mm_shuffle_epi8(x, ctrl_a);
        let b = _mm_blendv_epi8(_mm_shuffle_epi8(x, ctrl_b), last, ctrl_b);
        x = _mm_xor_si128(fold128(a, k), b);
    }

    !reduce128(x)
}
