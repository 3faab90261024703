//! Atomic Extended Transport Header (IBTA 9.3.4): the operands of a
//! COMPARE_SWAP or FETCH_ADD on 8 bytes at an 8-byte aligned address.
//!
//! ```text
//!  0                   1                   2                   3
//! +---------------------------------------------------------------+
//! |                 Virtual Address (64 bits)                     |
//! +---------------------------------------------------------------+
//! |                    Remote Key (R_Key)                         |
//! +---------------------------------------------------------------+
//! |          Swap (CmpSwap) or Add (FetchAdd) Data (64 bits)      |
//! +---------------------------------------------------------------+
//! |               Compare Data (64 bits, CmpSwap only)            |
//! +---------------------------------------------------------------+
//! ```

use crate::field::{header_view, set_u32, set_u64, u32_at, u64_at};

/// AtomicETH length in bytes.
pub const LEN: usize = 28;

header_view!(
    /// A zero-copy view of an AtomicETH.
    AtomicEth,
    "AtomicETH"
);

impl<T: AsRef<[u8]>> AtomicEth<T> {
    /// Virtual address of the 8-byte target.
    pub fn va(&self) -> u64 {
        u64_at(self.bytes(), 0)
    }
    /// Remote key.
    pub fn rkey(&self) -> u32 {
        u32_at(self.bytes(), 8)
    }
    /// Swap value (COMPARE_SWAP) or addend (FETCH_ADD).
    pub fn swap_add(&self) -> u64 {
        u64_at(self.bytes(), 12)
    }
    /// Compare value (COMPARE_SWAP).
    pub fn compare(&self) -> u64 {
        u64_at(self.bytes(), 20)
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> AtomicEth<T> {
    /// Sets all fields.
    pub fn set(&mut self, va: u64, rkey: u32, swap_add: u64, compare: u64) {
        let b = self.bytes_mut();
        set_u64(b, 0, va);
        set_u32(b, 8, rkey);
        set_u64(b, 12, swap_add);
        set_u64(b, 20, compare);
    }
}

/// The meaning of an AtomicETH.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct AtomicEthRepr {
    /// Virtual address.
    pub va: u64,
    /// Remote key.
    pub rkey: u32,
    /// Swap value or addend.
    pub swap_add: u64,
    /// Compare value.
    pub compare: u64,
}

impl AtomicEthRepr {
    /// Reads an AtomicETH.
    pub fn parse<T: AsRef<[u8]>>(h: &AtomicEth<T>) -> AtomicEthRepr {
        AtomicEthRepr { va: h.va(), rkey: h.rkey(), swap_add: h.swap_add(), compare: h.compare() }
    }
    /// Writes an AtomicETH.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, h: &mut AtomicEth<T>) {
        h.set(self.va, self.rkey, self.swap_add, self.compare);
    }
}
