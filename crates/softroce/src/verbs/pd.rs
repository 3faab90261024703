//! The protection domain ([`Pd`], `ibv_pd`) and [`Context::alloc_pd`].
//! The objects made in a PD ([`Pd::reg_mr`], [`Pd::create_qp`], ...) are
//! made in their own files; touch here only what the PD itself holds.

use std::sync::Arc;

use crate::context::Context;
use crate::error::Error;

/// A protection domain (`ibv_pd`).
#[derive(Debug, Clone)]
pub struct Pd(pub(super) Arc<PdInner>);

#[derive(Debug)]
pub(super) struct PdInner {
    ctx: Context,
    pub(super) handle: roce_proto::PdHandle,
}

impl Drop for PdInner {
    fn drop(&mut self) {
        let h = self.handle;
        let _ = self.ctx.shared().with_dev(false, |d| d.dealloc_pd(h));
    }
}

impl Context {
    /// Allocates a protection domain.
    pub fn alloc_pd(&self) -> Result<Pd, Error> {
        let handle = self.shared().with_live_dev(false, |d| d.alloc_pd())?;
        Ok(Pd(Arc::new(PdInner { ctx: self.clone(), handle })))
    }
}

impl Pd {
    pub(super) fn ctx(&self) -> &Context {
        &self.0.ctx
    }

    /// The context it was allocated from.
    pub fn context(&self) -> &Context {
        &self.0.ctx
    }

    /// The handle the engine knows it by.
    pub fn handle(&self) -> roce_proto::PdHandle {
        self.0.handle
    }
}
