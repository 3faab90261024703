//! Datagram Extended Transport Header (IBTA 9.3.2), on every UD packet: the
//! Q_Key the receiver checks and the sender's QP number.
//!
//! ```text
//!  0                   1                   2                   3
//! +---------------------------------------------------------------+
//! |                      Queue Key (Q_Key)                        |
//! +---------------+-----------------------------------------------+
//! |   reserved    |              Source QP (24 bits)              |
//! +---------------+-----------------------------------------------+
//! ```

use crate::field::{header_view, set_u24, set_u32, u24_at, u32_at};

/// DETH length in bytes.
pub const LEN: usize = 8;

header_view!(
    /// A zero-copy view of a DETH.
    Deth,
    "DETH"
);

impl<T: AsRef<[u8]>> Deth<T> {
    /// Queue key.
    pub fn qkey(&self) -> u32 {
        u32_at(self.bytes(), 0)
    }
    /// Source QP number (24 bits).
    pub fn src_qpn(&self) -> u32 {
        u24_at(self.bytes(), 5)
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Deth<T> {
    /// Sets the Q_Key and source QP (reserved byte zero).
    pub fn set(&mut self, qkey: u32, src_qpn: u32) {
        let b = self.bytes_mut();
        set_u32(b, 0, qkey);
        b[4] = 0;
        set_u24(b, 5, src_qpn);
    }
}

/// The meaning of a DETH.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct DethRepr {
    /// Queue key.
    pub qkey: u32,
    /// Source QP number.
    pub src_qpn: u32,
}

impl DethRepr {
    /// Reads a DETH.
    pub fn parse<T: AsRef<[u8]>>(h: &Deth<T>) -> DethRepr {
        DethRepr { qkey: h.qkey(), src_qpn: h.src_qpn() }
    }
    /// Writes a DETH.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, h: &mut Deth<T>) {
        h.set(self.qkey, self.src_qpn);
    }
}
