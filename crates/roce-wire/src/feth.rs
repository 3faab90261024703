//! Flush Extended Transport Header (IBTA 1.5 memory placement extensions),
//! carried by RC FLUSH before its RETH.
//!
//! ```text
//!  0                   1                   2                   3
//! +---------------------------------------------------+---+-------+
//! |                 reserved (26 bits)                |SEL|  PLT  |
//! +---------------------------------------------------+---+-------+
//! SEL = selectivity level (0 memory region range, 1 whole region),
//! PLT = placement type bits (1 global visibility, 2 persistence).
//! ```

use crate::field::{header_view, set_u32, u32_at};

/// FETH length in bytes.
pub const LEN: usize = 4;

header_view!(
    /// A zero-copy view of a FETH.
    Feth,
    "FETH"
);

impl<T: AsRef<[u8]>> Feth<T> {
    /// Selectivity level (2 bits).
    pub fn selectivity_level(&self) -> u8 {
        ((u32_at(self.bytes(), 0) >> 4) & 0x3) as u8
    }
    /// Placement type (4 bits).
    pub fn placement_type(&self) -> u8 {
        (u32_at(self.bytes(), 0) & 0xf) as u8
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Feth<T> {
    /// Sets both fields (reserved bits zero).
    pub fn set(&mut self, selectivity_level: u8, placement_type: u8) {
        let v = (u32::from(selectivity_level & 0x3) << 4) | u32::from(placement_type & 0xf);
        set_u32(self.bytes_mut(), 0, v);
    }
}

/// The meaning of a FETH.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct FethRepr {
    /// Selectivity level (2 bits).
    pub selectivity_level: u8,
    /// Placement type (4 bits).
    pub placement_type: u8,
}

impl FethRepr {
    /// Reads a FETH.
    pub fn parse<T: AsRef<[u8]>>(h: &Feth<T>) -> FethRepr {
        FethRepr { selectivity_level: h.selectivity_level(), placement_type: h.placement_type() }
    }
    /// Writes a FETH.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, h: &mut Feth<T>) {
        h.set(self.selectivity_level, self.placement_type);
    }
}
