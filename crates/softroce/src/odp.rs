//! On-demand paging: `ibv_advise_mr` (prefetch advice for ODP regions).
//!
//! A user-space stack never pins memory: it reads and writes the caller's
//! pages where they are, and the kernel faults them in on the first touch,
//! as on-demand paging asks. So every region is on demand, and a prefetch
//! has nothing to do once the advice is checked.

use roce_proto::Sge;
use roce_proto::mr::MrTable;
use roce_proto::verbs::AccessFlags;

/// `enum ibv_advise_mr_advice`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Advice {
    /// Make the range present for reading (`IBV_ADVISE_MR_ADVICE_PREFETCH`).
    Prefetch = 0,
    /// Make it present for writing (`IBV_ADVISE_MR_ADVICE_PREFETCH_WRITE`).
    PrefetchWrite = 1,
    /// Map what is present, faulting nothing
    /// (`IBV_ADVISE_MR_ADVICE_PREFETCH_NO_FAULT`).
    PrefetchNoFault = 2,
}

impl Advice {
    /// The advice with the C value `v`.
    pub fn from_raw(v: u32) -> Option<Advice> {
        match v {
            0 => Some(Advice::Prefetch),
            1 => Some(Advice::PrefetchWrite),
            2 => Some(Advice::PrefetchNoFault),
            _ => None,
        }
    }
}

/// Why `ibv_advise_mr` refused its scatter list.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum AdviseError {
    /// An empty list (the kernel's uverbs refuses it).
    #[error("ibv_advise_mr needs at least one SGE")]
    NoSge,
    /// The L_Key names no region of this PD (rxe's `lookup_mr`: EINVAL).
    #[error("L_Key {0:#x} names no memory region of this protection domain")]
    BadKey(u32),
    /// The region was not registered with `IBV_ACCESS_ON_DEMAND`.
    #[error("the region of L_Key {0:#x} was not registered IBV_ACCESS_ON_DEMAND")]
    NotOnDemand(u32),
    /// The range is not inside the region.
    #[error("{len} bytes at {addr:#x} are outside the region of L_Key {lkey:#x}")]
    OutOfRange {
        /// The L_Key.
        lkey: u32,
        /// Start of the range.
        addr: u64,
        /// Its length.
        len: u32,
    },
    /// PREFETCH_WRITE on a region without local write (rxe and the man
    /// page: EPERM).
    #[error("PREFETCH_WRITE on the region of L_Key {0:#x}, which is not writable")]
    NotWritable(u32),
}

/// Checks the advice on `sges` for PD `pd`: each L_Key must name an
/// ON_DEMAND region of the PD and its range must lie inside it.
pub(crate) fn check(mrs: &MrTable, pd: roce_proto::PdHandle, advice: Advice, sges: &[Sge]) -> Result<(), AdviseError> {
    if sges.is_empty() {
        return Err(AdviseError::NoSge);
    }
    for g in sges {
        let mr = mrs.get(g.lkey).filter(|m| m.pd == pd.get()).ok_or(AdviseError::BadKey(g.lkey))?;
        if !mr.access.contains(AccessFlags::ON_DEMAND) {
            return Err(AdviseError::NotOnDemand(g.lkey));
        }
        let out = AdviseError::OutOfRange { lkey: g.lkey, addr: g.addr, len: g.length };
        let end = g.addr.checked_add(u64::from(g.length)).ok_or(out)?;
        let mr_end = mr.iova.checked_add(mr.region.len() as u64).ok_or(out)?;
        if g.addr < mr.iova || end > mr_end {
            return Err(out);
        }
        if advice == Advice::PrefetchWrite && !mr.access.contains(AccessFlags::LOCAL_WRITE) {
            return Err(AdviseError::NotWritable(g.lkey));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::net::{IpAddr, Ipv4Addr};

    use super::*;
    use crate::{Context, Error, Options, config::DeviceInfo};

    #[test]
    fn advice_values() {
        assert_eq!(Advice::from_raw(0), Some(Advice::Prefetch));
        assert_eq!(Advice::from_raw(1), Some(Advice::PrefetchWrite));
        assert_eq!(Advice::from_raw(2), Some(Advice::PrefetchNoFault));
        assert_eq!(Advice::from_raw(3), None);
    }

    #[test]
    fn advise_mr_checks() {
        let info = DeviceInfo::on_address("odp37", IpAddr::V4(Ipv4Addr::new(127, 0, 0, 37))).unwrap();
        let ctx = Context::open_with(&info, Options::default()).unwrap();
        // The Rust API reports what ibv_query_device_ex does.
        let a = ctx.query_device();
        assert_eq!(a.odp_caps.general_caps, roce_proto::devattr::odp::SUPPORT, "explicit ODP only");
        assert_eq!(a.device_cap_flags_ex >> 38 & 0b111, 0b101, "FLUSH_GLOBAL and ATOMIC_WRITE, not FLUSH_PERSISTENT");
        let pd = ctx.alloc_pd().unwrap();
        let other = ctx.alloc_pd().unwrap();
        let odp = pd.reg_mr(4096, AccessFlags::LOCAL_WRITE | AccessFlags::ON_DEMAND).unwrap();
        let ro = pd.reg_mr(4096, AccessFlags::ON_DEMAND).unwrap();
        let pinned = pd.reg_mr(4096, AccessFlags::LOCAL_WRITE).unwrap();
        let theirs = other.reg_mr(4096, AccessFlags::LOCAL_WRITE | AccessFlags::ON_DEMAND).unwrap();
        let err = |r: Result<(), Error>| match r {
            Err(Error::Advise(e)) => Some(e),
            Ok(()) => None,
            Err(e) => panic!("{e}"),
        };
        for a in [Advice::Prefetch, Advice::PrefetchWrite, Advice::PrefetchNoFault] {
            assert_eq!(err(pd.advise_mr(a, &[odp.sge(0, 4096)])), None, "{a:?} of the whole region");
            assert_eq!(err(pd.advise_mr(a, &[odp.sge(4095, 1), odp.sge(0, 0)])), None, "{a:?} of parts");
        }
        assert_eq!(err(pd.advise_mr(Advice::Prefetch, &[])), Some(AdviseError::NoSge));
        let mut bad = odp.sge(0, 16);
        bad.lkey ^= 0x80;
        assert_eq!(err(pd.advise_mr(Advice::Prefetch, &[bad])), Some(AdviseError::BadKey(bad.lkey)));
        let t = theirs.sge(0, 16);
        assert_eq!(err(pd.advise_mr(Advice::Prefetch, &[t])), Some(AdviseError::BadKey(t.lkey)), "another PD's");
        let p = pinned.sge(0, 16);
        assert_eq!(err(pd.advise_mr(Advice::Prefetch, &[p])), Some(AdviseError::NotOnDemand(p.lkey)));
        let mut past = odp.sge(4000, 96);
        past.length = 97;
        assert!(matches!(err(pd.advise_mr(Advice::Prefetch, &[past])), Some(AdviseError::OutOfRange { .. })));
        let mut before = odp.sge(0, 1);
        before.addr -= 1;
        assert!(matches!(err(pd.advise_mr(Advice::Prefetch, &[before])), Some(AdviseError::OutOfRange { .. })));
        let mut wrap = odp.sge(0, 16);
        wrap.addr = u64::MAX - 4;
        assert!(matches!(err(pd.advise_mr(Advice::Prefetch, &[wrap])), Some(AdviseError::OutOfRange { .. })));
        let r = ro.sge(0, 16);
        assert_eq!(err(pd.advise_mr(Advice::Prefetch, &[r])), None, "reading a read-only region");
        assert_eq!(err(pd.advise_mr(Advice::PrefetchWrite, &[r])), Some(AdviseError::NotWritable(r.lkey)));
        // The first bad SGE fails the call, wherever it is.
        assert_eq!(err(pd.advise_mr(Advice::Prefetch, &[odp.sge(0, 8), p])), Some(AdviseError::NotOnDemand(p.lkey)));
    }
}
