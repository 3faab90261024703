//! Invalidate Extended Transport Header (IBTA 9.3.6): the R_Key that a
//! SEND_WITH_INVALIDATE asks the responder to invalidate.
//!
//! ```text
//! +---------------------------------------------------------------+
//! |                      R_Key (32 bits)                          |
//! +---------------------------------------------------------------+
//! ```

use crate::field::{header_view, set_u32, u32_at};

/// IETH length in bytes.
pub const LEN: usize = 4;

header_view!(
    /// A zero-copy view of an IETH.
    Ieth,
    "IETH"
);

impl<T: AsRef<[u8]>> Ieth<T> {
    /// The R_Key to invalidate.
    pub fn rkey(&self) -> u32 {
        u32_at(self.bytes(), 0)
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Ieth<T> {
    /// Sets the R_Key.
    pub fn set_rkey(&mut self, rkey: u32) {
        set_u32(self.bytes_mut(), 0, rkey);
    }
}

/// The meaning of an IETH.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct IethRepr {
    /// The R_Key to invalidate.
    pub rkey: u32,
}

impl IethRepr {
    /// Reads an IETH.
    pub fn parse<T: AsRef<[u8]>>(h: &Ieth<T>) -> IethRepr {
        IethRepr { rkey: h.rkey() }
    }
    /// Writes an IETH.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, h: &mut Ieth<T>) {
        h.set_rkey(self.rkey);
    }
}
