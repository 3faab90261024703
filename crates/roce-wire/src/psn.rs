//! 24-bit packet sequence numbers.
//!
//! PSNs wrap modulo 2^24 (IBTA 9.7.1), so "before" only means something
//! inside a window of less than half the space. `Psn` deliberately has no
//! `PartialOrd`: ordering goes through [`Psn::distance_to`] and friends, which
//! interpret the difference as a signed 24-bit number, as rxe's `psn_compare`
//! does with its `(a - b) << 8` trick.

use core::fmt;

/// A 24-bit packet sequence number. The high 8 bits are always zero.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Psn(u32);

impl Psn {
    /// Mask of the 24 significant bits.
    pub const MASK: u32 = 0x00ff_ffff;
    /// Half the sequence space: two PSNs further apart than this have no
    /// defined order.
    pub const HALF: u32 = 1 << 23;
    /// PSN 0.
    pub const ZERO: Psn = Psn(0);

    /// The PSN of `value`'s low 24 bits (upper bits are dropped, as the BTH field does).
    pub const fn new(value: u32) -> Psn {
        Psn(value & Self::MASK)
    }

    /// The 24-bit value.
    pub const fn value(self) -> u32 {
        self.0
    }

    /// `self + n` modulo 2^24.
    #[allow(clippy::should_implement_trait)]
    pub const fn add(self, n: u32) -> Psn {
        Psn(self.0.wrapping_add(n) & Self::MASK)
    }

    /// `self - n` modulo 2^24.
    #[allow(clippy::should_implement_trait)]
    pub const fn sub(self, n: u32) -> Psn {
        Psn(self.0.wrapping_sub(n) & Self::MASK)
    }

    /// The following PSN.
    pub const fn next(self) -> Psn {
        self.add(1)
    }

    /// Signed distance from `self` to `other` (`other - self`), in
    /// `-2^23 ..= 2^23 - 1`: positive when `other` comes after `self`.
    pub const fn distance_to(self, other: Psn) -> i32 {
        // Sign-extend the 24-bit difference.
        ((other.0.wrapping_sub(self.0) << 8) as i32) >> 8
    }

    /// Whether `self` comes strictly before `other` (within half the space).
    pub const fn before(self, other: Psn) -> bool {
        self.distance_to(other) > 0
    }

    /// Whether `self` comes strictly after `other` (within half the space).
    pub const fn after(self, other: Psn) -> bool {
        self.distance_to(other) < 0
    }

    /// Wrap-safe ordering of two PSNs less than 2^23 apart.
    pub const fn cmp_wrapping(self, other: Psn) -> core::cmp::Ordering {
        let d = other.distance_to(self);
        if d < 0 {
            core::cmp::Ordering::Less
        } else if d > 0 {
            core::cmp::Ordering::Greater
        } else {
            core::cmp::Ordering::Equal
        }
    }

    /// Whether `self` lies in the `len` PSNs starting at `start`
    /// (`start <= self < start + len`, modulo 2^24). `len` is clamped to 2^24.
    pub const fn in_window(self, start: Psn, len: u32) -> bool {
        let offset = self.0.wrapping_sub(start.0) & Self::MASK;
        let len = if len > Self::MASK { Self::MASK + 1 } else { len };
        offset < len
    }
}

impl fmt::Debug for Psn {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Psn({:#08x})", self.0)
    }
}

impl fmt::Display for Psn {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.0, f)
    }
}

impl fmt::LowerHex for Psn {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::LowerHex::fmt(&self.0, f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use core::cmp::Ordering;
    use proptest::prelude::*;

    #[test]
    fn wraps_at_24_bits() {
        assert_eq!(Psn::new(0xff_ffff).next(), Psn::ZERO);
        assert_eq!(Psn::ZERO.sub(1).value(), 0xff_ffff);
        assert_eq!(Psn::new(0x1234_5678).value(), 0x34_5678);
        assert!(Psn::new(0xff_fffe).before(Psn::new(3)));
        assert!(Psn::new(3).after(Psn::new(0xff_fffe)));
        assert_eq!(Psn::new(0xff_fffe).distance_to(Psn::new(3)), 5);
        assert_eq!(Psn::new(3).distance_to(Psn::new(0xff_fffe)), -5);
    }

    #[test]
    fn half_space_edges() {
        let a = Psn::ZERO;
        assert_eq!(a.distance_to(Psn::new(Psn::HALF - 1)), (Psn::HALF - 1) as i32);
        assert_eq!(a.distance_to(Psn::new(Psn::HALF)), -(Psn::HALF as i32));
        assert_eq!(a.cmp_wrapping(a), Ordering::Equal);
    }

    #[test]
    fn window_across_wrap() {
        let start = Psn::new(0xff_fff0);
        assert!(start.in_window(start, 1));
        assert!(!start.in_window(start, 0));
        assert!(Psn::new(0xf).in_window(start, 0x20));
        assert!(!Psn::new(0x10).in_window(start, 0x20));
        assert!(!Psn::new(0xff_ffef).in_window(start, 0x20));
        assert!(Psn::new(0xff_ffef).in_window(start, u32::MAX));
    }

    proptest! {
        #[test]
        fn add_then_distance(a in 0u32..1 << 24, n in 0u32..Psn::HALF) {
            let p = Psn::new(a);
            let q = p.add(n);
            prop_assert_eq!(p.distance_to(q), n as i32);
            prop_assert_eq!(q.sub(n), p);
            prop_assert_eq!(q.distance_to(p), -(n as i32));
            prop_assert_eq!(n > 0, p.before(q));
            prop_assert_eq!(n > 0, q.after(p));
            prop_assert_eq!(p.cmp_wrapping(q), if n == 0 { Ordering::Equal } else { Ordering::Less });
            prop_assert!(q.in_window(p, n + 1));
            prop_assert!(!q.in_window(p, n));
        }
    }
}
