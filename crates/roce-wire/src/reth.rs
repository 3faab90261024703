//! RDMA Extended Transport Header (IBTA 9.3.3): where an RDMA WRITE, READ,
//! FLUSH or ATOMIC_WRITE acts in the responder's memory.
//!
//! ```text
//!  0                   1                   2                   3
//! +-------------------------------+-------------------------------+
//! |                  Virtual Address (64 bits)                    |
//! +                                                               +
//! |                                                               |
//! +---------------------------------------------------------------+
//! |                       Remote Key (R_Key)                      |
//! +---------------------------------------------------------------+
//! |                     DMA Length (bytes)                        |
//! +---------------------------------------------------------------+
//! ```

use crate::field::{header_view, set_u32, set_u64, u32_at, u64_at};

/// RETH length in bytes.
pub const LEN: usize = 16;

header_view!(
    /// A zero-copy view of a RETH.
    Reth,
    "RETH"
);

impl<T: AsRef<[u8]>> Reth<T> {
    /// Virtual address in the responder's memory region.
    pub fn va(&self) -> u64 {
        u64_at(self.bytes(), 0)
    }
    /// Remote key of the region.
    pub fn rkey(&self) -> u32 {
        u32_at(self.bytes(), 8)
    }
    /// Length of the whole message (not of this packet).
    pub fn dma_len(&self) -> u32 {
        u32_at(self.bytes(), 12)
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Reth<T> {
    /// Sets the virtual address.
    pub fn set_va(&mut self, va: u64) {
        set_u64(self.bytes_mut(), 0, va);
    }
    /// Sets the remote key.
    pub fn set_rkey(&mut self, rkey: u32) {
        set_u32(self.bytes_mut(), 8, rkey);
    }
    /// Sets the DMA length.
    pub fn set_dma_len(&mut self, len: u32) {
        set_u32(self.bytes_mut(), 12, len);
    }
}

/// The meaning of a RETH.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct RethRepr {
    /// Virtual address.
    pub va: u64,
    /// Remote key.
    pub rkey: u32,
    /// DMA length of the whole message.
    pub dma_len: u32,
}

impl RethRepr {
    /// Reads a RETH.
    pub fn parse<T: AsRef<[u8]>>(h: &Reth<T>) -> RethRepr {
        RethRepr { va: h.va(), rkey: h.rkey(), dma_len: h.dma_len() }
    }
    /// Writes a RETH.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, h: &mut Reth<T>) {
        h.set_va(self.va);
        h.set_rkey(self.rkey);
        h.set_dma_len(self.dma_len);
    }
}
