//! Immediate Data extended header (IBTA 9.3.5): 4 opaque bytes delivered in
//! the receiver's work completion (`ibv_wc.imm_data`, kept in network order).
//!
//! ```text
//! +---------------------------------------------------------------+
//! |                     Immediate Data (32 bits)                  |
//! +---------------------------------------------------------------+
//! ```

use crate::field::{header_view, set_u32, u32_at};

/// ImmDt length in bytes.
pub const LEN: usize = 4;

header_view!(
    /// A zero-copy view of an ImmDt header.
    ImmDt,
    "ImmDt"
);

impl<T: AsRef<[u8]>> ImmDt<T> {
    /// The immediate value, read big-endian (so `0x11223344` is bytes `11 22 33 44`).
    pub fn imm(&self) -> u32 {
        u32_at(self.bytes(), 0)
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> ImmDt<T> {
    /// Sets the immediate value.
    pub fn set_imm(&mut self, imm: u32) {
        set_u32(self.bytes_mut(), 0, imm);
    }
}

/// The meaning of an ImmDt header.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ImmDtRepr {
    /// The immediate value, big-endian.
    pub imm: u32,
}

impl ImmDtRepr {
    /// Reads an ImmDt header.
    pub fn parse<T: AsRef<[u8]>>(h: &ImmDt<T>) -> ImmDtRepr {
        ImmDtRepr { imm: h.imm() }
    }
    /// Writes an ImmDt header.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, h: &mut ImmDt<T>) {
        h.set_imm(self.imm);
    }
}
