//! Memory regions: registration, L_Keys and R_Keys, and the access checks
//! every local SGE and every remote request passes before memory is touched.
//!
//! Keys are `index << 8 | key byte` as in rxe; the key byte is random and
//! never repeats for a slot on re-registration, so a stale or guessed key
//! misses. L_Key and R_Key are equal.

use crate::mem::{MemError, Region};
use crate::verbs::AccessFlags;

/// Why a registration is refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum MrError {
    /// REMOTE_WRITE and REMOTE_ATOMIC need LOCAL_WRITE (IBTA 10.6.3.1), or unknown bits.
    #[error("invalid access flags {0:#x}")]
    InvalidAccess(u32),
    /// The device's `max_mr` regions are registered.
    #[error("no memory region left (max_mr reached)")]
    Exhausted,
    /// No region has this key.
    #[error("no memory region with key {0:#x}")]
    UnknownKey(u32),
}

/// Why an access through a key is refused. A remote one is NAKed with
/// "remote access error"; a local one completes with `LOC_PROT_ERR`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum AccessError {
    /// No region has this key (or it was deregistered).
    #[error("invalid key {0:#x}")]
    InvalidKey(u32),
    /// The region belongs to another protection domain.
    #[error("key {0:#x} belongs to another protection domain")]
    PdMismatch(u32),
    /// The region does not grant the access.
    #[error("key {key:#x} does not allow access {needed:#x}")]
    Denied {
        /// The key.
        key: u32,
        /// The access needed.
        needed: u32,
    },
    /// The range is not inside the region.
    #[error("{len} bytes at {va:#x} are outside the region of key {key:#x}")]
    OutOfRange {
        /// The key.
        key: u32,
        /// Start address.
        va: u64,
        /// Length.
        len: u64,
    },
}

impl From<MemError> for AccessError {
    fn from(e: MemError) -> AccessError {
        match e {
            MemError::OutOfBounds { offset, len, .. } => AccessError::OutOfRange { key: 0, va: offset, len },
            MemError::Misaligned { addr } => AccessError::OutOfRange { key: 0, va: addr as u64, len: 8 },
        }
    }
}

/// A registered memory region.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Mr {
    /// Protection domain handle.
    pub pd: u32,
    /// The I/O virtual address the region starts at (the buffer's address for `ibv_reg_mr`).
    pub iova: u64,
    /// The memory.
    pub region: Region,
    /// What the region allows.
    pub access: AccessFlags,
    /// The key, used as L_Key and R_Key.
    pub key: u32,
}

/// A checked access: the region and the offset of the range inside it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Grant {
    /// The region's memory.
    pub region: Region,
    /// Offset of the range in the region.
    pub offset: u64,
}

#[derive(Debug, Default)]
struct Slot {
    mr: Option<Mr>,
    key_byte: u8,
}

/// The device's memory regions.
#[derive(Debug)]
pub struct MrTable {
    slots: Vec<Slot>,
    free: Vec<u32>,
    max: u32,
    rng: u64,
}

impl MrTable {
    /// An empty table of at most `max` regions; `seed` drives the key bytes.
    pub fn new(max: u32, seed: u64) -> MrTable {
        MrTable { slots: Vec::new(), free: Vec::new(), max, rng: seed | 1 }
    }

    fn next_random(&mut self) -> u8 {
        // xorshift64*: deterministic per seed, so simulations replay.
        self.rng ^= self.rng >> 12;
        self.rng ^= self.rng << 25;
        self.rng ^= self.rng >> 27;
        (self.rng.wrapping_mul(0x2545_f491_4f6c_dd1d) >> 56) as u8
    }

    /// Registers `region` at `iova` for `pd` with `access`; returns its key.
    pub fn register(&mut self, pd: u32, iova: u64, region: Region, access: AccessFlags) -> Result<u32, MrError> {
        let needs_local_write = AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_ATOMIC;
        if access.unknown_bits() != 0
            || (access.intersects(needs_local_write) && !access.contains(AccessFlags::LOCAL_WRITE))
        {
            return Err(MrError::InvalidAccess(access.0));
        }
        iova.checked_add(region.len() as u64).ok_or(MrError::InvalidAccess(access.0))?;
        let index = match self.free.pop() {
            Some(i) => i,
            None if (self.slots.len() as u32) < self.max && self.slots.len() < (1 << 24) - 1 => {
                self.slots.push(Slot::default());
                self.slots.len() as u32 // indices start at 1: key 0 is never valid
            }
            None => return Err(MrError::Exhausted),
        };
        let slot_key = self.slots[index as usize - 1].key_byte;
        let mut byte = self.next_random();
        while byte == slot_key {
            byte = self.next_random();
        }
        let key = (index << 8) | u32::from(byte);
        self.slots[index as usize - 1] = Slot { mr: Some(Mr { pd, iova, region, access, key }), key_byte: byte };
        Ok(key)
    }

    /// Removes the region with `key`.
    pub fn deregister(&mut self, key: u32) -> Result<Mr, MrError> {
        let slot = self.slot_mut(key).ok_or(MrError::UnknownKey(key))?;
        let mr = slot.mr.take().ok_or(MrError::UnknownKey(key))?;
        self.free.push(key >> 8);
        Ok(mr)
    }

    fn slot_mut(&mut self, key: u32) -> Option<&mut Slot> {
        let i = (key >> 8) as usize;
        self.slots.get_mut(i.checked_sub(1)?).filter(|s| s.mr.is_some_and(|m| m.key == key))
    }

    /// The region with `key`.
    pub fn get(&self, key: u32) -> Option<&Mr> {
        let i = (key >> 8) as usize;
        self.slots.get(i.checked_sub(1)?)?.mr.as_ref().filter(|m| m.key == key)
    }

    /// Checks that `key` grants `needed` on `[va, va + len)` to a QP of
    /// protection domain `pd`.
    pub fn check(&self, key: u32, pd: u32, va: u64, len: u64, needed: AccessFlags) -> Result<Grant, AccessError> {
        let mr = self.get(key).ok_or(AccessError::InvalidKey(key))?;
        if mr.pd != pd {
            return Err(AccessError::PdMismatch(key));
        }
        if !mr.access.contains(needed) {
            return Err(AccessError::Denied { key, needed: needed.0 });
        }
        let out = AccessError::OutOfRange { key, va, len };
        let offset = va.checked_sub(mr.iova).ok_or(out)?;
        let end = offset.checked_add(len).ok_or(out)?;
        if end > mr.region.len() as u64 {
            return Err(out);
        }
        Ok(Grant { region: mr.region, offset })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[allow(unsafe_code)]
    fn region(buf: &mut [u8]) -> Region {
        // SAFETY: every test keeps `buf` alive while the table is used.
        unsafe { Region::from_slice(buf) }
    }

    #[test]
    fn keys_and_checks() {
        let mut buf = vec![0u8; 4096];
        let mut t = MrTable::new(16, 42);
        let rw = AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_READ;
        let key = t.register(1, 0x1000, region(&mut buf), rw).unwrap();
        assert_eq!(key >> 8, 1);
        let g = t.check(key, 1, 0x1010, 16, AccessFlags::REMOTE_WRITE).unwrap();
        assert_eq!(g.offset, 0x10);
        assert_eq!(t.check(key, 2, 0x1010, 16, AccessFlags::REMOTE_WRITE), Err(AccessError::PdMismatch(key)));
        assert!(matches!(t.check(key, 1, 0x1000, 8, AccessFlags::REMOTE_ATOMIC), Err(AccessError::Denied { .. })));
        assert!(matches!(t.check(key, 1, 0xfff, 1, AccessFlags::REMOTE_READ), Err(AccessError::OutOfRange { .. })));
        assert!(matches!(t.check(key, 1, 0x1fff, 2, AccessFlags::REMOTE_READ), Err(AccessError::OutOfRange { .. })));
        assert!(t.check(key, 1, 0x1fff, 1, AccessFlags::REMOTE_READ).is_ok());
        assert!(matches!(t.check(key, 1, u64::MAX, 2, AccessFlags::REMOTE_READ), Err(AccessError::OutOfRange { .. })));
        // Another key byte on the same index misses.
        assert_eq!(t.check(key ^ 1, 1, 0x1000, 1, AccessFlags::REMOTE_READ), Err(AccessError::InvalidKey(key ^ 1)));
        assert_eq!(t.check(0, 1, 0, 0, AccessFlags::EMPTY), Err(AccessError::InvalidKey(0)));
    }

    #[test]
    fn reregistration_changes_the_key() {
        let mut buf = vec![0u8; 64];
        let mut t = MrTable::new(1, 7);
        let mut seen = std::collections::HashSet::new();
        let mut last = None;
        for _ in 0..300 {
            let k = t.register(1, 0, region(&mut buf), AccessFlags::LOCAL_WRITE).unwrap();
            assert_eq!(k >> 8, 1, "the one slot is reused");
            assert_ne!(Some(k), last, "a stale key never comes back at once");
            assert_eq!(t.register(1, 0, region(&mut buf), AccessFlags::EMPTY), Err(MrError::Exhausted));
            t.deregister(k).unwrap();
            assert!(t.check(k, 1, 0, 1, AccessFlags::EMPTY).is_err());
            assert_eq!(t.deregister(k), Err(MrError::UnknownKey(k)));
            seen.insert(k & 0xff);
            last = Some(k);
        }
        // 300 uniform draws from 256 values hit about 176 distinct ones.
        assert!(seen.len() > 150, "key bytes spread over the byte: {}", seen.len());
    }

    #[test]
    fn remote_write_needs_local_write() {
        let mut buf = vec![0u8; 8];
        let mut t = MrTable::new(4, 1);
        assert_eq!(t.register(1, 0, region(&mut buf), AccessFlags::REMOTE_WRITE), Err(MrError::InvalidAccess(2)));
        assert_eq!(t.register(1, 0, region(&mut buf), AccessFlags::REMOTE_ATOMIC), Err(MrError::InvalidAccess(8)));
        assert_eq!(t.register(1, 0, region(&mut buf), AccessFlags(0x1000)), Err(MrError::InvalidAccess(0x1000)));
        assert!(t.register(1, 0, region(&mut buf), AccessFlags::REMOTE_READ).is_ok());
    }
}
