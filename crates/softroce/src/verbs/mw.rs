//! The memory window ([`Mw`], `ibv_mw`): allocated in a PD
//! ([`Pd::alloc_mw`]) and bound over a region through a QP ([`Mw::bind`]).

use roce_proto::mr::{MwBindInfo, MwType};
use roce_proto::verbs::{AccessFlags, SendFlags};

use super::{Mr, Pd, Qp};
use crate::error::Error;

/// A memory window (`ibv_mw`).
#[derive(Debug)]
pub struct Mw {
    pd: Pd,
    key: std::sync::atomic::AtomicU32,
    ty: MwType,
}

impl Drop for Mw {
    fn drop(&mut self) {
        let k = self.rkey();
        let _ = self.pd.ctx().shared().with_dev(false, |d| d.dealloc_mw(k));
    }
}

impl Pd {
    /// Allocates a memory window (`ibv_alloc_mw`).
    pub fn alloc_mw(&self, ty: MwType) -> Result<Mw, Error> {
        let pd = self.0.handle;
        let key = self.ctx().shared().with_live_dev(false, |d| d.alloc_mw(pd, ty))?;
        Ok(Mw { pd: self.clone(), key: std::sync::atomic::AtomicU32::new(key), ty })
    }
}

impl Mw {
    /// The window's current R_Key.
    pub fn rkey(&self) -> u32 {
        self.key.load(std::sync::atomic::Ordering::Acquire)
    }

    /// Window type.
    pub fn mw_type(&self) -> MwType {
        self.ty
    }

    /// Binds a type 1 window over `len` bytes at `offset` of `mr` through
    /// `qp` (`ibv_bind_mw`): posts a BIND_MW WR and returns the new R_Key,
    /// valid once that WR completes.
    pub fn bind(
        &self,
        qp: &Qp,
        wr_id: u64,
        mr: &Mr,
        offset: usize,
        len: u64,
        access: AccessFlags,
    ) -> Result<u32, Error> {
        let info = MwBindInfo { mr_key: mr.lkey(), addr: mr.addr() + offset as u64, length: len, access };
        self.bind_with(qp, wr_id, SendFlags::SIGNALED, info)
    }

    /// [`Mw::bind`] with the bind described by keys and addresses, as
    /// `ibv_bind_mw` passes it.
    pub fn bind_with(&self, qp: &Qp, wr_id: u64, flags: SendFlags, info: MwBindInfo) -> Result<u32, Error> {
        let (qpn, key) = (qp.0.qpn, self.rkey());
        let new = qp.ctx().shared().with_live_dev(true, |d| d.bind_mw(qpn, key, wr_id, flags, info))?;
        self.key.store(new, std::sync::atomic::Ordering::Release);
        Ok(new)
    }
}
