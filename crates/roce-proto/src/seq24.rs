//! Fields that are 24 bits on the wire and are not PSNs: QPNs, and the
//! message and send sequence numbers (MSN, SSN, credit limits), which wrap
//! as PSNs do (`roce_wire::Psn` has the PSN's own arithmetic).

/// The low 24 bits of a field that is 24 bits on the wire and not a PSN
/// (QPNs; [`add`] for MSNs and SSNs).
pub(crate) const fn low24(v: u32) -> u32 {
    v & 0xff_ffff
}

/// `a + n` in the 24-bit space of message and send sequence numbers.
pub(crate) const fn add(a: u32, n: u32) -> u32 {
    low24(a.wrapping_add(n))
}

#[cfg(test)]
mod tests {
    #[test]
    fn sequence_numbers_wrap_at_24_bits() {
        assert_eq!(super::add(0xff_fffe, 3), 1);
        assert_eq!(super::add(5, 1), 6);
        assert_eq!(super::low24(0x1ab_cdef), 0xab_cdef);
    }
}
