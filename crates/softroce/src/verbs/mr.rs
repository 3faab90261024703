//! The memory region ([`Mr`], `ibv_mr`): registration in a PD
//! ([`Pd::reg_mr`], [`Pd::reg_mr_raw`], [`Pd::advise_mr`]), re-registration,
//! deregistration (which waits out responders' grants) and the copies in
//! and out of owned memory. Touch here what a region is and how it goes.

use std::sync::Arc;

use roce_proto::Sge;
use roce_proto::mem::{OwnedBuffer, Region};
use roce_proto::verbs::AccessFlags;

use super::Pd;
use crate::error::Error;

/// A registered memory region (`ibv_mr`).
#[derive(Debug, Clone)]
pub struct Mr(Arc<MrInner>);

#[derive(Debug)]
struct MrInner {
    pd: Pd,
    key: u32,
    addr: u64,
    len: usize,
    /// The owned memory, as the engine sees it (`None` for caller memory).
    region: Option<Region>,
    /// Owns that memory (behind a mutex only to be `Sync`; it is touched
    /// once, when the region goes).
    buf: std::sync::Mutex<Option<OwnedBuffer>>,
    /// Set by [`Mr::deregister`]: the key is gone (and may be reused).
    deregistered: std::sync::atomic::AtomicBool,
}

impl Drop for MrInner {
    fn drop(&mut self) {
        let s = self.pd.ctx().shared();
        let mut st = s.lock();
        if !self.deregistered.load(std::sync::atomic::Ordering::Acquire) {
            let _ = st.dev.dereg_mr(self.key);
        }
        if let Some(b) = self.buf.get_mut().unwrap_or_else(|e| e.into_inner()).take()
            && st.dev.memory_in_use(b.addr() as usize, b.len())
        {
            // A responder still reads or writes it: free it when it is done.
            st.graveyard.push(b);
        }
    }
}

impl Pd {
    /// Registers `len` bytes of zeroed memory the region owns, for `access`.
    /// Its I/O virtual address is the memory's address, as with `ibv_reg_mr`.
    pub fn reg_mr(&self, len: usize, access: AccessFlags) -> Result<Mr, Error> {
        let buf = OwnedBuffer::new(len);
        // SAFETY: `buf` moves into the Mr, which deregisters it before it
        // drops, and keeps it alive past that while a responder still holds
        // a grant (see MrInner::drop).
        #[allow(unsafe_code)]
        let region = unsafe { buf.region() };
        let pd = self.0.handle;
        let key = self.ctx().shared().with_live_dev(false, |d| d.reg_mr(pd, buf.addr(), region, access))?;
        Ok(Mr(Arc::new(MrInner {
            pd: self.clone(),
            key,
            addr: buf.addr(),
            len,
            region: Some(region),
            buf: std::sync::Mutex::new(Some(buf)),
            deregistered: Default::default(),
        })))
    }

    /// Registers caller memory, as `ibv_reg_mr` does.
    ///
    /// # Safety
    /// `[addr, addr + len)` must stay valid for reads and writes, and must
    /// not be accessed in ways that race with the device (remote writes,
    /// receives, READ results land there at any time), until the returned
    /// region is dropped and no remote access can be in flight.
    #[allow(unsafe_code)]
    pub unsafe fn reg_mr_raw(&self, addr: *mut u8, len: usize, access: AccessFlags) -> Result<Mr, Error> {
        // SAFETY: the caller's promise above.
        let region = unsafe { Region::new(addr, len) }.ok_or(Error::OutOfBounds { offset: 0, len, size: 0 })?;
        let pd = self.0.handle;
        let key = self.ctx().shared().with_live_dev(false, |d| d.reg_mr(pd, addr as u64, region, access))?;
        Ok(Mr(Arc::new(MrInner {
            pd: self.clone(),
            key,
            addr: addr as u64,
            len,
            region: None,
            buf: std::sync::Mutex::new(None),
            deregistered: Default::default(),
        })))
    }

    /// `ibv_advise_mr`: checks that each SGE names a range of an
    /// `ON_DEMAND` region of this PD (and, for `PrefetchWrite`, a writable
    /// one). The prefetch itself is a no-op that succeeds: user memory in a
    /// user-space stack is naturally on demand (never pinned; the kernel
    /// faults each page in when the engine first touches it), so whether
    /// the call waits (`IBV_ADVISE_MR_FLAG_FLUSH`) changes nothing.
    pub fn advise_mr(&self, advice: crate::odp::Advice, sges: &[Sge]) -> Result<(), Error> {
        let pd = self.0.handle;
        self.ctx().shared().with_live_dev(false, |d| crate::odp::check(d.mr_table(), pd, advice, sges))
    }
}

/// Returns once no responder holds a grant into `[addr, addr + len)`: the
/// grant goes when the response is sent or the QP fails, and the driver
/// (or this loop) makes that progress.
fn wait_until_released(s: &crate::driver::Shared, addr: usize, len: usize) -> Result<(), Error> {
    loop {
        let mut st = s.lock();
        if !st.dev.memory_in_use(addr, len) {
            return Ok(());
        }
        s.progress(&mut st)?;
        drop(st);
        std::thread::sleep(std::time::Duration::from_micros(50));
    }
}

impl Mr {
    /// Deregisters the region now (`ibv_dereg_mr`), reporting why it cannot
    /// be (memory windows still bound: the region stays registered). For
    /// caller memory ([`Pd::reg_mr_raw`]) it returns only once no responder
    /// holds a grant into the memory any more (a READ still being answered),
    /// so the caller may free it: rxe's MR references keep pinned pages for
    /// the same reason. Afterwards the keys are invalid.
    pub fn deregister(&self) -> Result<(), Error> {
        use std::sync::atomic::Ordering;
        let s = self.0.pd.ctx().shared();
        {
            let mut st = s.lock();
            if self.0.deregistered.load(Ordering::Acquire) {
                return Ok(());
            }
            st.dev.dereg_mr(self.0.key)?;
            self.0.deregistered.store(true, Ordering::Release);
        }
        if self.0.region.is_none() {
            wait_until_released(s, self.0.addr as usize, self.0.len)?;
        }
        Ok(())
    }

    /// Re-registers the region (`ibv_rereg_mr` without a new translation):
    /// into `pd` and with `access`, each if given. The keys stay (rxe 6.x's
    /// `rxe_rereg_user_mr`), the memory too. Returns the region's new handle;
    /// this one is spent (its drop no longer deregisters). Refused, changing
    /// nothing, for a PD of another device, invalid access, or windows
    /// bound ([`roce_proto::mr::MrError::HasWindows`]).
    pub fn rereg(&self, pd: Option<&Pd>, access: Option<AccessFlags>) -> Result<Mr, Error> {
        self.rereg_with(pd, None, access)
    }

    /// [`Mr::rereg`] that may also move the region to caller memory
    /// `[addr, addr + len)`, at I/O virtual address `addr`
    /// (`IBV_REREG_MR_CHANGE_TRANSLATION`); the keys stay. It returns once
    /// no responder holds a grant into the old memory, so the caller may
    /// free that (as [`Mr::deregister`]). Regions owning their memory
    /// ([`Pd::reg_mr`]) keep it: a new translation for them is refused.
    ///
    /// # Safety
    /// As for [`Pd::reg_mr_raw`], for the new memory.
    #[allow(unsafe_code)]
    pub unsafe fn rereg_raw(
        &self,
        pd: Option<&Pd>,
        mem: Option<(*mut u8, usize)>,
        access: Option<AccessFlags>,
    ) -> Result<Mr, Error> {
        let translation = match mem {
            None => None,
            Some((addr, len)) => {
                // SAFETY: the caller's promise above.
                let region = unsafe { Region::new(addr, len) }.ok_or(Error::OutOfBounds { offset: 0, len, size: 0 })?;
                Some((addr as u64, region))
            }
        };
        self.rereg_with(pd, translation, access)
    }

    fn rereg_with(
        &self,
        pd: Option<&Pd>,
        translation: Option<(u64, Region)>,
        access: Option<AccessFlags>,
    ) -> Result<Mr, Error> {
        use std::sync::atomic::Ordering;
        let invalid = |why| Error::Verb(roce_proto::VerbError::Invalid(why));
        let s = self.0.pd.ctx().shared();
        if pd.is_some_and(|p| !std::ptr::eq(p.ctx().shared(), s)) {
            return Err(invalid("the PD is of another device"));
        }
        if translation.is_some() && self.0.region.is_some() {
            return Err(invalid("the region owns its memory: no new translation"));
        }
        {
            let mut st = s.lock();
            s.live()?;
            if self.0.deregistered.load(Ordering::Acquire) {
                return Err(roce_proto::VerbError::Mr(roce_proto::mr::MrError::UnknownKey(self.0.key)).into());
            }
            st.dev.rereg_mr(self.0.key, pd.map(Pd::handle), translation, access)?;
            // The key now belongs to the new handle.
            self.0.deregistered.store(true, Ordering::Release);
        }
        let (addr, len) = translation.map_or((self.0.addr, self.0.len), |(a, r)| (a, r.len()));
        if translation.is_some() {
            wait_until_released(s, self.0.addr as usize, self.0.len)?;
        }
        let buf = self.0.buf.lock().unwrap_or_else(|e| e.into_inner()).take();
        Ok(Mr(Arc::new(MrInner {
            pd: pd.unwrap_or(&self.0.pd).clone(),
            key: self.0.key,
            addr,
            len,
            region: self.0.region,
            buf: std::sync::Mutex::new(buf),
            deregistered: Default::default(),
        })))
    }

    /// L_Key.
    pub fn lkey(&self) -> u32 {
        self.0.key
    }

    /// R_Key (equal to the L_Key, as in rxe).
    pub fn rkey(&self) -> u32 {
        self.0.key
    }

    /// Start address (the I/O virtual address remote peers use).
    pub fn addr(&self) -> u64 {
        self.0.addr
    }

    /// Length in bytes.
    pub fn len(&self) -> usize {
        self.0.len
    }

    /// Whether the region is empty.
    pub fn is_empty(&self) -> bool {
        self.0.len == 0
    }

    /// An SGE for `len` bytes at `offset` of the region.
    pub fn sge(&self, offset: usize, len: u32) -> Sge {
        Sge { addr: self.0.addr + offset as u64, length: len, lkey: self.0.key }
    }

    fn check(&self, offset: usize, len: usize) -> Result<(), Error> {
        if offset.checked_add(len).is_none_or(|e| e > self.0.len) {
            return Err(Error::OutOfBounds { offset, len, size: self.0.len });
        }
        Ok(())
    }

    fn owned(&self) -> Result<Region, Error> {
        self.0.region.ok_or(Error::Verb(roce_proto::VerbError::Invalid("caller memory: access it directly")))
    }

    /// Copies `dst.len()` bytes at `offset` out of the region (owned regions).
    /// Taken under the device lock, so it never races the device.
    pub fn read(&self, offset: usize, dst: &mut [u8]) -> Result<(), Error> {
        self.check(offset, dst.len())?;
        let r = self.owned()?;
        // The lock excludes the device, which touches the memory only under it.
        let _st = self.0.pd.ctx().shared().lock();
        r.read(offset as u64, dst).map_err(|_| Error::OutOfBounds { offset, len: dst.len(), size: self.0.len })
    }

    /// Copies `src` into the region at `offset` (owned regions), under the
    /// device lock.
    pub fn write(&self, offset: usize, src: &[u8]) -> Result<(), Error> {
        self.check(offset, src.len())?;
        let r = self.owned()?;
        let _st = self.0.pd.ctx().shared().lock();
        r.write(offset as u64, src).map_err(|_| Error::OutOfBounds { offset, len: src.len(), size: self.0.len })
    }

    /// A copy of `len` bytes at `offset`.
    pub fn to_vec(&self, offset: usize, len: usize) -> Result<Vec<u8>, Error> {
        let mut v = vec![0; len];
        self.read(offset, &mut v)?;
        Ok(v)
    }
}
