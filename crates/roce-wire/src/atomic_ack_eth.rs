//! Atomic Acknowledge Extended Transport Header (IBTA 9.5.3): the value the
//! target held before an atomic, returned after the AETH.
//!
//! ```text
//! +---------------------------------------------------------------+
//! |              Original Remote Data (64 bits)                   |
//! +---------------------------------------------------------------+
//! ```

use crate::field::{header_view, set_u64, u64_at};

/// AtomicAckETH length in bytes.
pub const LEN: usize = 8;

header_view!(
    /// A zero-copy view of an AtomicAckETH.
    AtomicAckEth,
    "AtomicAckETH"
);

impl<T: AsRef<[u8]>> AtomicAckEth<T> {
    /// The original value at the target address.
    pub fn orig(&self) -> u64 {
        u64_at(self.bytes(), 0)
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> AtomicAckEth<T> {
    /// Sets the original value.
    pub fn set_orig(&mut self, v: u64) {
        set_u64(self.bytes_mut(), 0, v);
    }
}

/// The meaning of an AtomicAckETH.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct AtomicAckEthRepr {
    /// The original value at the target address.
    pub orig: u64,
}

impl AtomicAckEthRepr {
    /// Reads an AtomicAckETH.
    pub fn parse<T: AsRef<[u8]>>(h: &AtomicAckEth<T>) -> AtomicAckEthRepr {
        AtomicAckEthRepr { orig: h.orig() }
    }
    /// Writes an AtomicAckETH.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, h: &mut AtomicAckEth<T>) {
        h.set_orig(self.orig);
    }
}
