//! The address handle ([`Ah`], `ibv_ah`) for UD sends: made in a PD
//! ([`Pd::create_ah`], [`Pd::create_ah_with`]).

use std::net::IpAddr;
use std::sync::Arc;

use roce_proto::AhAttr;

use super::Pd;
use crate::error::Error;

/// An address handle (`ibv_ah`) for UD sends.
#[derive(Debug, Clone)]
pub struct Ah(Arc<AhInner>);

#[derive(Debug)]
struct AhInner {
    pd: Pd,
    handle: u32,
}

impl Drop for AhInner {
    fn drop(&mut self) {
        let h = self.handle;
        let _ = self.pd.ctx().shared().with_dev(false, |d| d.destroy_ah(h));
    }
}

impl Pd {
    /// Creates an address handle for UD sends to `dest`.
    pub fn create_ah(&self, dest: IpAddr) -> Result<Ah, Error> {
        let sgid_index = self.ctx().device().addr_gid_index() as u8;
        self.create_ah_with(AhAttr { dest, sgid_index, hop_limit: 64, traffic_class: 0, sl: 0, flow_label: 0 })
    }

    /// Creates an address handle with every GRH field given (`ibv_create_ah`).
    pub fn create_ah_with(&self, attr: AhAttr) -> Result<Ah, Error> {
        let pd = self.0.handle;
        let handle = self.ctx().shared().with_live_dev(false, |d| d.create_ah(pd, attr))?;
        Ok(Ah(Arc::new(AhInner { pd: self.clone(), handle })))
    }
}

impl Ah {
    /// The handle to put in [`roce_proto::UdDest::ah`].
    pub fn handle(&self) -> u32 {
        self.0.handle
    }
}
