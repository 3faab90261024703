//! The shared receive queue ([`Srq`], `ibv_srq`): made in a PD
//! ([`Pd::create_srq`]), posted to, its limit armed, resized.

use std::sync::Arc;

use roce_proto::{RecvWr, SrqHandle};

use super::Pd;
use crate::error::Error;

/// A shared receive queue (`ibv_srq`).
#[derive(Debug, Clone)]
pub struct Srq(pub(super) Arc<SrqInner>);

#[derive(Debug)]
pub(super) struct SrqInner {
    pd: Pd,
    pub(super) handle: SrqHandle,
}

impl Drop for SrqInner {
    fn drop(&mut self) {
        let h = self.handle;
        self.pd.ctx().shared().async_routes.release(crate::EventSource::Srq(h));
        let _ = self.pd.ctx().shared().with_dev(false, |d| d.destroy_srq(h));
    }
}

impl Pd {
    /// Creates a shared receive queue of `max_wr` WRs with `max_sge` SGEs each.
    pub fn create_srq(&self, max_wr: u32, max_sge: u32) -> Result<Srq, Error> {
        let pd = self.0.handle;
        let handle = self.ctx().shared().with_live_dev(false, |d| d.create_srq(pd, max_wr, max_sge))?;
        Ok(Srq(Arc::new(SrqInner { pd: self.clone(), handle })))
    }
}

impl Srq {
    /// Posts a receive.
    pub fn post_recv(&self, wr: &RecvWr<'_>) -> Result<(), Error> {
        let h = self.0.handle;
        self.0.pd.ctx().shared().with_live_dev(false, |d| d.post_srq_recv(h, wr))
    }

    /// The armed limit (0: disarmed, as after the limit event fired).
    pub fn limit(&self) -> Result<u32, Error> {
        let h = self.0.handle;
        Ok(self.0.pd.ctx().shared().with_dev(false, |d| d.srq_limit(h))?)
    }

    /// Arms the limit event: `SrqLimitReached` when fewer than `limit` WRs remain.
    pub fn set_limit(&self, limit: u32) -> Result<(), Error> {
        let h = self.0.handle;
        Ok(self.0.pd.ctx().shared().with_dev(false, |d| d.set_srq_limit(h, limit))?)
    }

    /// The WRs it holds at most (`ibv_query_srq`'s `max_wr`).
    pub fn size(&self) -> Result<u32, Error> {
        let h = self.0.handle;
        Ok(self.0.pd.ctx().shared().with_dev(false, |d| d.srq_size(h))?)
    }

    /// Resizes it to `max_wr` WRs (`ibv_modify_srq` with `IBV_SRQ_MAX_WR`),
    /// keeping those posted; refused for 0, past `max_srq_wr`, below the
    /// armed limit or below the WRs posted (see [`Device::resize_srq`]).
    ///
    /// [`Device::resize_srq`]: roce_proto::Device::resize_srq
    pub fn resize(&self, max_wr: u32) -> Result<(), Error> {
        let h = self.0.handle;
        self.0.pd.ctx().shared().with_live_dev(false, |d| d.resize_srq(h, max_wr))
    }
}

impl Srq {
    /// The handle the engine knows it by (what SRQ events carry).
    pub fn handle(&self) -> SrqHandle {
        self.0.handle
    }
}
