//! Big-endian field access on the fixed-size CM buffers. Every offset is a
//! constant inside the 232-byte CM data (or the 24-byte header), so the
//! indexing cannot fail; emitters mask values to their field widths.

use std::net::Ipv6Addr;

pub(crate) use roce_wire::field::{set_u16, set_u24, set_u32, set_u64, u16_at, u24_at, u32_at, u64_at};

pub(crate) fn gid_at(b: &[u8], at: usize) -> Ipv6Addr {
    Ipv6Addr::from(array_at::<16>(b, at))
}

/// The `N` bytes at `at`.
pub(crate) fn array_at<const N: usize>(b: &[u8], at: usize) -> [u8; N] {
    let mut x = [0u8; N];
    x.copy_from_slice(&b[at..at + N]);
    x
}

pub(crate) fn set_gid(b: &mut [u8], at: usize, gid: Ipv6Addr) {
    b[at..at + 16].copy_from_slice(&gid.octets());
}

pub(crate) fn set_bytes(b: &mut [u8], at: usize, v: &[u8]) {
    b[at..at + v.len()].copy_from_slice(v);
}

/// The top `width` bits of `byte`, shifted down (an MSB-first field at bit 0).
pub(crate) const fn top(byte: u8, width: u32) -> u8 {
    byte >> (8 - width)
}

/// The `width` bits of `byte` that start `offset` bits below its MSB.
pub(crate) const fn bits(byte: u8, offset: u32, width: u32) -> u8 {
    (byte >> (8 - offset - width)) & ((1u8 << width) - 1)
}

/// `v` masked to `width` bits and placed `offset` bits below the MSB.
pub(crate) const fn put(v: u8, offset: u32, width: u32) -> u8 {
    (v & ((1u8 << width) - 1)) << (8 - offset - width)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn msb_first_bit_fields() {
        // REQ byte 43 of the rping capture: response timeout 20, RC, no flow control.
        assert_eq!((top(0xa0, 5), bits(0xa0, 5, 2), bits(0xa0, 7, 1)), (20, 0, 0));
        assert_eq!(put(20, 0, 5) | put(3, 5, 2) | put(1, 7, 1), 0xa7);
        // Out-of-range values are masked to the field.
        assert_eq!(put(0xff, 4, 1), 0x08);
        assert_eq!(bits(0x37, 4, 1), 0);
        assert_eq!(bits(0x37, 5, 3), 7);
        assert_eq!(top(0x37, 4), 3);
    }
}
