//! Folding and reduction constants for CRC-32/IEEE, derived at compile time.
//!
//! # Conventions
//!
//! CRC-32/IEEE is bit-reflected: bit 0 of the first message byte is the
//! highest-degree coefficient. A 16-byte chunk loaded little-endian into a
//! 128-bit register therefore holds `rev128(X)`, where `X` is the chunk's
//! polynomial (degree < 128) and `revN(A)` puts the coefficient of `x^i` at
//! bit `N - 1 - i`.
//!
//! For polynomials `A`, `B` of degree < 64, a carry-less multiply of the
//! reflected operands gives
//!
//! ```text
//! clmul(rev64(A), rev64(B)) = rev128(x * A * B)
//! ```
//!
//! (bit `m` of the product holds the coefficient of `x^(126 - m)` of `A * B`).
//! So to multiply a reflected half by `x^n` modulo `P` we use the constant
//! `rev64(x^(n-1) mod P)`: the extra factor `x` from the reflection supplies
//! the missing power. Everything below is computed from the polynomial alone.

/// The CRC-32/IEEE generator polynomial `P`, normal bit order, with its `x^32` term.
pub(crate) const POLY: u64 = 0x1_04C1_1DB7;

/// `x^n mod P` in normal bit order (bit `i` is the coefficient of `x^i`).
pub(crate) const fn xpow_mod(n: u32) -> u32 {
    let mut r: u64 = 1;
    let mut i = 0;
    while i < n {
        r <<= 1;
        if r & (1 << 32) != 0 {
            r ^= POLY;
        }
        i += 1;
    }
    r as u32
}

/// The 64-bit reflected multiplier that multiplies a reflected 64-bit half by
/// `x^n` (modulo `P`) under `clmul`: `rev64(x^(n-1) mod P)`.
pub(crate) const fn rk(n: u32) -> u64 {
    (xpow_mod(n - 1) as u64).reverse_bits()
}

/// The constant pair folding a 128-bit lane forward by `d` bits:
/// `(for the low qword, for the high qword)`.
///
/// A lane `X = X_hi * x^64 + X_lo` is stored as `rev128(X)`, whose low qword
/// is `rev64(X_hi)` and whose high qword is `rev64(X_lo)`. Moving it `d` bits
/// further multiplies by `x^d`: `X_hi * x^(d+64) + X_lo * x^d`.
pub(crate) const fn fold_pair(d: u32) -> (u64, u64) {
    (rk(d + 64), rk(d))
}

/// Barrett quotient `floor(x^64 / P)` (degree 32), normal bit order.
pub(crate) const fn barrett_mu() -> u64 {
    let mut rem: u128 = 1 << 64;
    let mut q: u64 = 0;
    let mut i: u32 = 64;
    loop {
        if rem & (1u128 << i) != 0 {
            q |= 1 << (i - 32);
            rem ^= (POLY as u128) << (i - 32);
        }
        if i == 32 {
            break;
        }
        i -= 1;
    }
    q
}

/// Fold 4 x 256-bit accumulators forward by 128 bytes (main loop).
pub(crate) const FOLD_1024: (u64, u64) = fold_pair(1024);
/// Fold by 96 bytes (first accumulator onto the last one).
pub(crate) const FOLD_768: (u64, u64) = fold_pair(768);
/// Fold by 64 bytes.
pub(crate) const FOLD_512: (u64, u64) = fold_pair(512);
/// Fold by 32 bytes (one 256-bit register onto the next).
pub(crate) const FOLD_256: (u64, u64) = fold_pair(256);
/// Fold by 16 bytes (one 128-bit lane onto the next).
pub(crate) const FOLD_128: (u64, u64) = fold_pair(128);

/// Multiplier for `X_hi * x^96` in the final 128 -> 96 bit step.
pub(crate) const RED_96: u64 = rk(96);
/// Multiplier for `T_top * x^64` in the final 96 -> 64 bit step.
pub(crate) const RED_64: u64 = rk(64);
/// `rev64(mu * x^31)`: puts `rev32(floor(W_hi * mu / x^32))` in the low 32 bits.
pub(crate) const BARRETT_MU: u64 = (barrett_mu() << 31).reverse_bits();
/// `rev64(P * x^31)`: lines `q * P` up with the reflected 64-bit remainder input.
pub(crate) const BARRETT_P: u64 = (POLY << 31).reverse_bits();

#[cfg(test)]
mod tests {
    use super::*;

    /// Plain carry-less multiply, for checking the constants independently.
    fn clmul(a: u64, b: u64) -> u128 {
        (0..64).filter(|i| b >> i & 1 == 1).fold(0u128, |acc, i| acc ^ (u128::from(a) << i))
    }

    /// Remainder of a polynomial of degree < 128 modulo `P`.
    fn poly_mod(mut v: u128) -> u32 {
        for i in (32..128).rev() {
            if v >> i & 1 == 1 {
                v ^= u128::from(POLY) << (i - 32);
            }
        }
        v as u32
    }

    /// `x^n mod P` by square-and-multiply, independent of `xpow_mod`'s loop.
    fn xpow_by_squaring(n: u32) -> u32 {
        let mut result = 1u32;
        let mut base = 2u32; // x
        let mut e = n;
        while e > 0 {
            if e & 1 == 1 {
                result = poly_mod(clmul(result.into(), base.into()));
            }
            base = poly_mod(clmul(base.into(), base.into()));
            e >>= 1;
        }
        result
    }

    #[test]
    fn xpow_mod_matches_square_and_multiply() {
        for n in (0..40).chain([63, 64, 95, 127, 191, 255, 319, 511, 575, 767, 831, 1023, 1087, 4000]) {
            assert_eq!(xpow_mod(n), xpow_by_squaring(n), "x^{n} mod P");
        }
        // x^32 mod P is P without its leading term.
        assert_eq!(u64::from(xpow_mod(32)), POLY & 0xFFFF_FFFF);
    }

    #[test]
    fn barrett_mu_is_the_quotient() {
        let mu = barrett_mu();
        assert_eq!(mu >> 32, 1, "mu has degree 32");
        let product = clmul(mu, POLY);
        let rem = product ^ (1u128 << 64);
        assert!(rem < 1 << 32, "x^64 - mu * P must have degree < 32, got {rem:#x}");
    }

    #[test]
    fn reflected_clmul_identity() {
        // clmul(rev64(A), rev64(B)) == rev128(x * A * B): the fact every constant relies on.
        let samples = [1u64, 2, 0x8000_0000, 0x1234_5678_9abc_def0, u64::MAX >> 1, 0xdead_beef];
        for &a in &samples {
            for &b in &samples {
                let lhs = clmul(a.reverse_bits(), b.reverse_bits());
                let ab = clmul(a, b); // degree < 127, so x * A * B fits in 128 bits
                assert_eq!(lhs, (ab << 1).reverse_bits());
            }
        }
    }

    #[test]
    fn fold_constants_move_lanes() {
        // Folding X by d bits with the pair must give a value congruent to X * x^d.
        for d in [128u32, 256, 512, 768, 1024] {
            let (klo, khi) = fold_pair(d);
            for x in [1u128, 0xFFFF_FFFF_FFFF_FFFF_FFFF_FFFF_FFFF_FFFF, 0x0123_4567_89ab_cdef_fedc_ba98_7654_3210] {
                // x is the register value rev128(X).
                let reg_lo = x as u64;
                let reg_hi = (x >> 64) as u64;
                let folded = clmul(reg_lo, klo) ^ clmul(reg_hi, khi); // rev128(F)
                let f = folded.reverse_bits();
                let xpoly = x.reverse_bits();
                let want = poly_mod(clmul(poly_mod(xpoly).into(), xpow_mod(d).into()));
                assert_eq!(poly_mod(f), want, "d = {d}");
            }
        }
    }
}
