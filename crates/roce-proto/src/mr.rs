//! Memory regions and memory windows: registration, L_Keys and R_Keys,
//! binding, invalidation, and the access checks every local SGE and every
//! remote request passes before memory is touched.
//!
//! Keys are `index << 8 | key byte` as in rxe. Regions take indices from 1 up
//! to `MW_FIRST_INDEX`, windows from there on, so the index tells which table
//! a key names (rxe's `rkey_is_mw`). A region's key byte is random and never
//! repeats for a slot on re-registration, so a stale or guessed key misses; a
//! window's key byte is chosen by each bind (`ibv_inc_rkey`). A region's L_Key
//! and R_Key are equal; a window has only an R_Key.

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
    /// No region (or window) has this key.
    #[error("no memory region or window with key {0:#x}")]
    UnknownKey(u32),
    /// Memory windows are bound to the region (rxe refuses to deregister it).
    #[error("memory region {0:#x} has memory windows bound to it")]
    HasWindows(u32),
}

/// Why binding a memory window fails: the bind WR completes with
/// `IBV_WC_MW_BIND_ERR` (rxe `rxe_check_bind_mw`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub(crate) enum BindError {
    /// No window has this key (or the key byte is stale).
    #[error("no memory window with key {0:#x}")]
    UnknownWindow(u32),
    /// No region has this key.
    #[error("no memory region with key {0:#x}")]
    UnknownRegion(u32),
    /// A type 2 window must be free (invalidated) to bind (IBTA o10-37.2.30).
    #[error("type 2 memory window {0:#x} is bound: invalidate it first")]
    NotFree(u32),
    /// QP, window and region must share a protection domain (C10-72).
    #[error("the QP, the window and the region are not in one protection domain")]
    PdMismatch,
    /// The region was not registered with `MW_BIND` (C10-73).
    #[error("memory region {0:#x} does not allow binding windows")]
    NoBindAccess(u32),
    /// Remote write or atomic through the window needs LOCAL_WRITE on the region (C10-74).
    #[error("the window's access {0:#x} needs LOCAL_WRITE on the region")]
    InvalidAccess(u32),
    /// The window does not lie inside the region (C10-75), or a type 2 bind has no length.
    #[error("window of {len} bytes at {addr:#x} does not lie inside the region")]
    OutOfRange {
        /// Start address.
        addr: u64,
        /// Length.
        len: u64,
    },
}

/// `enum ibv_mw_type`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u32)]
pub enum MwType {
    /// Bound with `ibv_bind_mw`, never invalidated remotely.
    Type1 = 1,
    /// Bound with a BIND_MW work request to one QP; invalidated by LOCAL_INV
    /// or SEND_WITH_INV.
    Type2 = 2,
}

/// What a window grants (`struct ibv_mw_bind_info`). A zero `length` on a
/// type 1 window unbinds it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MwBindInfo {
    /// Key of the region the window lies in.
    pub mr_key: u32,
    /// Start address (in the region's I/O virtual address space).
    pub addr: u64,
    /// Length in bytes.
    pub length: u64,
    /// REMOTE_READ / REMOTE_WRITE / REMOTE_ATOMIC, optionally ZERO_BASED
    /// (LOCAL_WRITE is accepted and grants nothing).
    pub access: AccessFlags,
}

/// The first index of memory window keys (rxe: `RXE_MIN_MW_INDEX`).
pub(crate) const MW_FIRST_INDEX: u32 = 0x8_0001;

/// Whether `key` names a memory window rather than a region.
pub(crate) const fn is_mw_key(key: u32) -> bool {
    key >> 8 >= MW_FIRST_INDEX
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
    /// Windows bound to the region.
    pub windows: u32,
}

/// A memory window.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Mw {
    /// Protection domain handle.
    pub pd: u32,
    /// Type 1 or 2.
    pub ty: MwType,
    /// The current R_Key.
    pub key: u32,
    /// What it grants while bound.
    pub bound: Option<MwBinding>,
}

/// A bound window's grant.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MwBinding {
    /// The region it lies in.
    pub mr_key: u32,
    /// Start address in the region's address space.
    pub addr: u64,
    /// Length.
    pub length: u64,
    /// Remote access granted; with ZERO_BASED, remote addresses count from 0.
    pub access: AccessFlags,
    /// For type 2: the only QP remote access may come through (IBTA 10.6.7.2.2).
    pub qpn: Option<u32>,
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

/// The device's memory regions and windows.
#[derive(Debug)]
pub struct MrTable {
    slots: Vec<Slot>,
    free: Vec<u32>,
    max: u32,
    mws: Vec<Option<Mw>>,
    mw_free: Vec<u32>,
    max_mw: u32,
    rng: u64,
}

/// What a region may be registered with: REMOTE_WRITE and REMOTE_ATOMIC
/// need LOCAL_WRITE (IBTA 10.6.3.1), no unknown bits, no ZERO_BASED (it
/// belongs to windows; a region's base is its `iova`), an address range
/// that does not wrap.
///
/// `FLUSH_PERSISTENT` is refused too: softroce cannot tell persistent memory
/// from DRAM and has no persistence domain to flush to, so it never grants
/// the persistence placement type (rxe refuses it for every page that is not
/// persistent memory, with the same EINVAL). `FLUSH_GLOBAL` and `ON_DEMAND`
/// are granted.
fn check_access(access: AccessFlags, iova: u64, region: &Region) -> Result<(), MrError> {
    let needs_local_write = AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_ATOMIC;
    if access.unknown_bits() != 0
        || access.contains(AccessFlags::ZERO_BASED)
        || access.contains(AccessFlags::FLUSH_PERSISTENT)
        || (access.intersects(needs_local_write) && !access.contains(AccessFlags::LOCAL_WRITE))
    {
        return Err(MrError::InvalidAccess(access.0));
    }
    iova.checked_add(region.len() as u64).ok_or(MrError::InvalidAccess(access.0))?;
    Ok(())
}

impl MrTable {
    /// An empty table of at most `max` regions and `max_mw` windows;
    /// `seed` drives the key bytes.
    pub(crate) fn new(max: u32, max_mw: u32, seed: u64) -> MrTable {
        let max = max.min(MW_FIRST_INDEX - 1);
        let max_mw = max_mw.min((1 << 24) - MW_FIRST_INDEX);
        MrTable {
            slots: Vec::new(),
            free: Vec::new(),
            max,
            mws: Vec::new(),
            mw_free: Vec::new(),
            max_mw,
            rng: seed | 1,
        }
    }

    fn next_random(&mut self) -> u8 {
        // xorshift64*: deterministic per seed, so simulations replay.
        self.rng ^= self.rng >> 12;
        self.rng ^= self.rng << 25;
        self.rng ^= self.rng >> 27;
        (self.rng.wrapping_mul(0x2545_f491_4f6c_dd1d) >> 56) as u8
    }

    /// How many regions and windows exist (`rdma resource show` counts them).
    pub(crate) fn counts(&self) -> (usize, usize) {
        (self.slots.iter().filter(|s| s.mr.is_some()).count(), self.mws.iter().filter(|w| w.is_some()).count())
    }

    /// Registers `region` at `iova` for `pd` with `access`; returns its key.
    pub(crate) fn register(&mut self, pd: u32, iova: u64, region: Region, access: AccessFlags) -> Result<u32, MrError> {
        check_access(access, iova, &region)?;
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
        self.slots[index as usize - 1] =
            Slot { mr: Some(Mr { pd, iova, region, access, key, windows: 0 }), key_byte: byte };
        Ok(key)
    }

    /// Re-registers the region with `key` in place (`ibv_rereg_mr`): a new
    /// protection domain, new memory at a new I/O virtual address, new
    /// access, each if given. The keys stay: rxe 6.x's `rxe_rereg_user_mr`
    /// keeps `lkey`/`rkey` for PD and access changes, and softroce keeps
    /// them for a new translation too, as NICs that re-register in place
    /// do. Refused while windows are bound (the kernel's EBUSY on a region
    /// in use) and for access `register` refuses; nothing changes then.
    pub(crate) fn reregister(
        &mut self,
        key: u32,
        pd: Option<u32>,
        translation: Option<(u64, Region)>,
        access: Option<AccessFlags>,
    ) -> Result<(), MrError> {
        let mr = self.slot_mut(key).and_then(|s| s.mr).ok_or(MrError::UnknownKey(key))?;
        if mr.windows > 0 {
            return Err(MrError::HasWindows(key));
        }
        let access = access.unwrap_or(mr.access);
        let (iova, region) = translation.unwrap_or((mr.iova, mr.region));
        check_access(access, iova, &region)?;
        let pd = pd.unwrap_or(mr.pd);
        if let Some(m) = self.slot_mut(key).and_then(|s| s.mr.as_mut()) {
            *m = Mr { pd, iova, region, access, ..*m };
        }
        Ok(())
    }

    /// Removes the region with `key`; refused while windows are bound to it.
    pub(crate) fn deregister(&mut self, key: u32) -> Result<Mr, MrError> {
        let slot = self.slot_mut(key).ok_or(MrError::UnknownKey(key))?;
        if slot.mr.is_some_and(|m| m.windows > 0) {
            return Err(MrError::HasWindows(key));
        }
        let mr = slot.mr.take().ok_or(MrError::UnknownKey(key))?;
        self.free.push(key >> 8);
        Ok(mr)
    }

    /// Whether a region or window belongs to `pd`.
    pub(crate) fn uses_pd(&self, pd: u32) -> bool {
        self.slots.iter().any(|s| s.mr.is_some_and(|m| m.pd == pd)) || self.mws.iter().flatten().any(|m| m.pd == pd)
    }

    /// Allocates an unbound window in `pd` (`ibv_alloc_mw`); returns its R_Key.
    /// A type 1 window starts valid with nothing granted, a type 2 free.
    pub(crate) fn alloc_mw(&mut self, pd: u32, ty: MwType) -> Result<u32, MrError> {
        let i = match self.mw_free.pop() {
            Some(i) => i,
            None if (self.mws.len() as u32) < self.max_mw => {
                self.mws.push(None);
                self.mws.len() as u32 - 1
            }
            None => return Err(MrError::Exhausted),
        };
        let key = ((MW_FIRST_INDEX + i) << 8) | u32::from(self.next_random());
        self.mws[i as usize] = Some(Mw { pd, ty, key, bound: None });
        Ok(key)
    }

    /// Frees the window with `key` (`ibv_dealloc_mw`), unbinding it.
    pub(crate) fn dealloc_mw(&mut self, key: u32) -> Result<Mw, MrError> {
        // By index, as rxe deallocates by handle: the key's low byte may
        // have moved on with type 2 binds the owner posted.
        let i = (key >> 8).checked_sub(MW_FIRST_INDEX).ok_or(MrError::UnknownKey(key))? as usize;
        let mw = self.mws.get_mut(i).and_then(Option::take).ok_or(MrError::UnknownKey(key))?;
        self.unbind(mw.bound);
        self.mw_free.push(i as u32);
        Ok(mw)
    }

    fn mw_index(&self, key: u32) -> Option<usize> {
        let i = (key >> 8).checked_sub(MW_FIRST_INDEX)? as usize;
        self.mws.get(i)?.filter(|m| m.key == key).map(|_| i)
    }

    /// The window with `key`.
    pub fn mw(&self, key: u32) -> Option<&Mw> {
        self.mws[self.mw_index(key)?].as_ref()
    }

    fn unbind(&mut self, b: Option<MwBinding>) {
        if let Some(b) = b
            && let Some(mr) = self.slot_mut(b.mr_key).and_then(|s| s.mr.as_mut())
        {
            mr.windows -= 1;
        }
    }

    /// Executes a BIND_MW work request of QP `qpn` (protection domain `pd`):
    /// the window `mw_key` takes key byte `new_key & 0xff` and grants `info`
    /// (rxe `rxe_bind_mw`). A type 1 bind of length 0 unbinds.
    pub(crate) fn bind_mw(
        &mut self,
        pd: u32,
        qpn: u32,
        mw_key: u32,
        new_key: u32,
        info: &MwBindInfo,
    ) -> Result<u32, BindError> {
        let i = self.mw_index(mw_key).ok_or(BindError::UnknownWindow(mw_key))?;
        let mw = self.mws[i].expect("index checked");
        let zero_based = info.access.contains(AccessFlags::ZERO_BASED);
        let remote = AccessFlags::REMOTE_READ | AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_ATOMIC;
        // A window grants remote rights only (IBTA 10.6.7.2). LOCAL_WRITE in
        // its access is accepted and has no effect, as with rxe (which keeps
        // any bits) and mlx5 (which keeps the remote ones): pyverbs' own
        // tests bind windows with LOCAL_WRITE | REMOTE_WRITE.
        if info.access.0 & !(remote | AccessFlags::ZERO_BASED | AccessFlags::LOCAL_WRITE).0 != 0 {
            return Err(BindError::InvalidAccess(info.access.0));
        }
        let info = &MwBindInfo { access: AccessFlags(info.access.0 & !AccessFlags::LOCAL_WRITE.0), ..*info };
        if mw.pd != pd {
            return Err(BindError::PdMismatch);
        }
        match mw.ty {
            MwType::Type1 if zero_based => return Err(BindError::InvalidAccess(info.access.0)),
            MwType::Type2 if mw.bound.is_some() => return Err(BindError::NotFree(mw_key)),
            MwType::Type2 if info.length == 0 => {
                return Err(BindError::OutOfRange { addr: info.addr, len: info.length });
            }
            _ => {}
        }
        let binding = if info.length == 0 {
            None
        } else {
            let mr = self.get(info.mr_key).ok_or(BindError::UnknownRegion(info.mr_key))?;
            if mr.pd != pd {
                return Err(BindError::PdMismatch);
            }
            if !mr.access.contains(AccessFlags::MW_BIND) {
                return Err(BindError::NoBindAccess(info.mr_key));
            }
            let needs_local_write = AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_ATOMIC;
            if info.access.intersects(needs_local_write) && !mr.access.contains(AccessFlags::LOCAL_WRITE) {
                return Err(BindError::InvalidAccess(info.access.0));
            }
            let out = BindError::OutOfRange { addr: info.addr, len: info.length };
            let start = info.addr.checked_sub(mr.iova).ok_or(out)?;
            if start.checked_add(info.length).is_none_or(|end| end > mr.region.len() as u64) {
                return Err(out);
            }
            Some(MwBinding {
                mr_key: info.mr_key,
                addr: info.addr,
                length: info.length,
                access: info.access,
                qpn: (mw.ty == MwType::Type2).then_some(qpn),
            })
        };
        self.unbind(mw.bound);
        if let Some(b) = binding
            && let Some(mr) = self.slot_mut(b.mr_key).and_then(|s| s.mr.as_mut())
        {
            mr.windows += 1;
        }
        let key = (mw_key & !0xff) | (new_key & 0xff);
        self.mws[i] = Some(Mw { key, bound: binding, ..mw });
        Ok(key)
    }

    /// Invalidates the R_Key `key` for a QP of protection domain `pd`
    /// (LOCAL_INV, or the IETH of a SEND_WITH_INV). Only a bound type 2
    /// window can be invalidated: a type 1 window cannot (o10-37.2.26), and
    /// neither can a region registered by `ibv_reg_mr` (rxe: only fast-reg
    /// regions, which user space cannot create).
    pub(crate) fn invalidate(&mut self, key: u32, pd: u32) -> Result<(), AccessError> {
        let i = self.mw_index(key).ok_or(AccessError::InvalidKey(key))?;
        let mw = self.mws[i].expect("index checked");
        if mw.pd != pd {
            return Err(AccessError::PdMismatch(key));
        }
        if mw.ty != MwType::Type2 || mw.bound.is_none() {
            return Err(AccessError::InvalidKey(key));
        }
        self.unbind(mw.bound);
        self.mws[i] = Some(Mw { bound: None, ..mw });
        Ok(())
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

    /// Checks that the R_Key `key` (a region's or a window's) grants
    /// `needed` on `[va, va + len)` to QP `qpn` of protection domain `pd`:
    /// the remote access check of IBTA 9.7.5.1.3 / rxe `check_rkey`.
    pub fn check_remote(
        &self,
        key: u32,
        pd: u32,
        qpn: u32,
        va: u64,
        len: u64,
        needed: AccessFlags,
    ) -> Result<Grant, AccessError> {
        if !is_mw_key(key) {
            return self.check(key, pd, va, len, needed);
        }
        let mw = self.mw(key).ok_or(AccessError::InvalidKey(key))?;
        let b = mw.bound.ok_or(AccessError::InvalidKey(key))?;
        if b.qpn.is_some_and(|q| q != qpn) {
            return Err(AccessError::InvalidKey(key));
        }
        if mw.pd != pd {
            return Err(AccessError::PdMismatch(key));
        }
        if !b.access.contains(needed) {
            return Err(AccessError::Denied { key, needed: needed.0 });
        }
        let out = AccessError::OutOfRange { key, va, len };
        let in_window =
            if b.access.contains(AccessFlags::ZERO_BASED) { va } else { va.checked_sub(b.addr).ok_or(out)? };
        if in_window.checked_add(len).is_none_or(|end| end > b.length) {
            return Err(out);
        }
        let mr = self.get(b.mr_key).ok_or(AccessError::InvalidKey(key))?;
        let offset = b.addr - mr.iova + in_window;
        Ok(Grant { region: mr.region, offset })
    }

    /// Checks that the R_Key `key` (a region's or a window's) grants
    /// `needed` to QP `qpn` of protection domain `pd`, whatever the address:
    /// a FLUSH of the whole region (selectivity level `IBV_FLUSH_MR`) names
    /// no range. Returns the start of what the key grants and its length
    /// (the region, or the window's range).
    pub(crate) fn check_remote_key(
        &self,
        key: u32,
        pd: u32,
        qpn: u32,
        needed: AccessFlags,
    ) -> Result<(Grant, u64), AccessError> {
        if !is_mw_key(key) {
            let mr = self.get(key).ok_or(AccessError::InvalidKey(key))?;
            let g = self.check(key, pd, mr.iova, 0, needed)?;
            return Ok((g, mr.region.len() as u64));
        }
        let mw = self.mw(key).ok_or(AccessError::InvalidKey(key))?;
        let b = mw.bound.ok_or(AccessError::InvalidKey(key))?;
        let start = if b.access.contains(AccessFlags::ZERO_BASED) { 0 } else { b.addr };
        Ok((self.check_remote(key, pd, qpn, start, b.length, needed)?, b.length))
    }

    /// Checks that the region `key` grants `needed` on `[va, va + len)` to a
    /// QP of protection domain `pd` (an L_Key, or a region's R_Key).
    pub(crate) fn check(
        &self,
        key: u32,
        pd: u32,
        va: u64,
        len: u64,
        needed: AccessFlags,
    ) -> Result<Grant, AccessError> {
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
        let mut t = MrTable::new(16, 16, 42);
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
        let mut t = MrTable::new(1, 1, 7);
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
        let mut t = MrTable::new(4, 4, 1);
        assert_eq!(t.register(1, 0, region(&mut buf), AccessFlags::REMOTE_WRITE), Err(MrError::InvalidAccess(2)));
        assert_eq!(t.register(1, 0, region(&mut buf), AccessFlags::REMOTE_ATOMIC), Err(MrError::InvalidAccess(8)));
        assert_eq!(t.register(1, 0, region(&mut buf), AccessFlags(0x1000)), Err(MrError::InvalidAccess(0x1000)));
        assert!(t.register(1, 0, region(&mut buf), AccessFlags::REMOTE_READ).is_ok());
    }
}
