//! Address handles for UD: `ibv_create_ah`, `ibv_destroy_ah`, and the
//! reply address of a received datagram (`ibv_init_ah_from_wc`,
//! `ibv_create_ah_from_wc`).

use std::ffi::c_int;
use std::net::IpAddr;

use softroce::{Ah, AhAttr};

use crate::abi::*;
use crate::context;
use crate::errno::errno;
use crate::export::{ibv_export, set_errno};
use crate::pd::pd_obj;

/// The IP address a GID stands for (IPv4-mapped GIDs are IPv4).
pub(crate) fn gid_ip(raw: [u8; 16]) -> IpAddr {
    let v6 = std::net::Ipv6Addr::from(raw);
    match v6.to_ipv4_mapped() {
        Some(v4) => IpAddr::V4(v4),
        None => IpAddr::V6(v6),
    }
}

/// Where an address vector points: its GRH's GID, or without a GRH the
/// host its destination LID names (`lid`).
pub(crate) fn dest_of(local: IpAddr, ah: &IbvAhAttr) -> Result<IpAddr, c_int> {
    if ah.is_global != 0 {
        // SAFETY: ibv_gid is 16 plain bytes.
        let raw: [u8; 16] = unsafe { std::mem::transmute(ah.grh.dgid) };
        return Ok(gid_ip(raw));
    }
    crate::lid::peer_of(local, ah.dlid).ok_or(libc::EINVAL)
}

/// An `ibv_ah` and the softroce AH behind it.
#[repr(C)]
pub(crate) struct AhObj {
    pub(crate) c: IbvAh,
    pub(crate) ah: Ah,
}

/// The object behind an AH pointer.
///
/// # Safety
/// `ah` is NULL or an AH from `ibv_create_ah`, not destroyed.
pub(crate) unsafe fn ah_obj<'a>(ah: *mut IbvAh) -> Option<&'a AhObj> {
    // SAFETY: per the contract; `c` is the first field.
    (!ah.is_null()).then(|| unsafe { &*(ah as *const AhObj) })
}

fn gid_bytes(g: &IbvGid) -> [u8; 16] {
    // SAFETY: ibv_gid is 16 plain bytes.
    unsafe { std::mem::transmute::<IbvGid, [u8; 16]>(*g) }
}

ibv_export! { "IBVERBS_1.1";
    /// An address handle; RoCE needs the GRH (`is_global`), whose GID names
    /// the destination.
    fn ibv_create_ah(pd: *mut IbvPd, attr: *mut IbvAhAttr) -> *mut IbvAh {
        // SAFETY: a PD from ibv_alloc_pd (checked for NULL).
        let Some(p) = (unsafe { pd_obj(pd) }) else {
            set_errno(libc::EINVAL);
            return std::ptr::null_mut();
        };
        if attr.is_null() {
            set_errno(libc::EINVAL);
            return std::ptr::null_mut();
        }
        // SAFETY: the caller passes a readable ibv_ah_attr.
        let a = unsafe { &*attr };
        let dest = match dest_of(p.pd.context().device().addr, a) {
            Ok(d) => d,
            Err(e) => {
                set_errno(e);
                return std::ptr::null_mut();
            }
        };
        let g = &a.grh;
        let sgid_index = if a.is_global != 0 { g.sgid_index } else { p.pd.context().device().addr_gid_index() as u8 };
        let attr = AhAttr {
            dest,
            sgid_index,
            hop_limit: if a.is_global != 0 { g.hop_limit } else { 64 },
            traffic_class: g.traffic_class,
            sl: a.sl,
            flow_label: if a.is_global != 0 { g.flow_label } else { 0 },
        };
        match p.pd.create_ah_with(attr) {
            Ok(ah) => {
                p.adopt();
                let c = IbvAh { context: p.c.context, pd, handle: ah.handle() };
                Box::into_raw(Box::new(AhObj { c, ah })) as *mut IbvAh
            }
            Err(e) => {
                set_errno(errno(&e));
                std::ptr::null_mut()
            }
        }
    }
}

ibv_export! { "IBVERBS_1.1";
    /// Destroys an address handle.
    fn ibv_destroy_ah(ah: *mut IbvAh) -> c_int {
        // SAFETY: an AH from ibv_create_ah (checked for NULL).
        let Some(o) = (unsafe { ah_obj(ah) }) else { return libc::EINVAL };
        // SAFETY: the AH's PD outlives it; the box was made in ibv_create_ah.
        unsafe {
            if let Some(p) = pd_obj(o.c.pd) {
                p.release();
            }
            drop(Box::from_raw(ah as *mut AhObj));
        }
        0
    }
}

/// The IPv4 header in a UD receive's GRH area, if the area holds one
/// (rdma-core's rule: an area not starting with an IPv6 version nibble holds
/// IPv4 in bytes 20..40; one that does is IPv4 only if those bytes are a
/// 20-byte IPv4 header with a valid checksum).
fn grh_ipv4(raw: &[u8; 40]) -> Option<&[u8]> {
    let ip = &raw[20..];
    if raw[0] >> 4 != 6 {
        return (ip[0] >> 4 == 4).then_some(ip);
    }
    if ip[0] != 0x45 {
        return None;
    }
    let sum: u32 = ip.chunks(2).map(|c| u32::from(u16::from_be_bytes([c[0], c[1]]))).sum();
    let folded = (sum & 0xffff) + (sum >> 16);
    ((folded & 0xffff) + (folded >> 16) == 0xffff).then_some(ip)
}

ibv_export! { "IBVERBS_1.1";
    /// The address to answer a received UD datagram: the GRH the receive
    /// buffer starts with gives the peer's GID (its source) and which of our
    /// GIDs it was sent to.
    fn ibv_init_ah_from_wc(context: *mut IbvContext, port_num: u8, wc: *mut IbvWc, grh: *mut IbvGrh, ah_attr: *mut IbvAhAttr) -> c_int {
        // SAFETY: a context from ibv_open_device (checked for NULL).
        let Some(b) = (unsafe { context::block(context) }) else { return libc::EINVAL };
        if wc.is_null() || grh.is_null() || ah_attr.is_null() || port_num != 1 {
            return libc::EINVAL;
        }
        // SAFETY: the caller passes readable wc and grh.
        let (w, h) = unsafe { (&*wc, &*grh) };
        if w.wc_flags & IBV_WC_GRH == 0 {
            return libc::EINVAL;
        }
        // SAFETY: the GRH area is 40 readable bytes.
        let raw = unsafe { &*(grh as *const [u8; 40]) };
        let (sgid, dgid, traffic_class, flow_label) = match grh_ipv4(raw) {
            // RoCEv2 over IPv4: the IPv4 header fills the area's last 20
            // bytes; its addresses stand for IPv4-mapped GIDs.
            Some(ip) => {
                let gid = |o: usize| {
                    std::net::Ipv4Addr::new(ip[o], ip[o + 1], ip[o + 2], ip[o + 3]).to_ipv6_mapped().octets()
                };
                (gid(12), gid(16), ip[1], 0)
            }
            None => {
                let vtf = u32::from_be(h.version_tclass_flow);
                (gid_bytes(&h.sgid), gid_bytes(&h.dgid), ((vtf >> 20) & 0xff) as u8, vtf & 0xfffff)
            }
        };
        let Some(sgid_index) = (0..b.ctx.device().gids.len()).find(|&i| b.ctx.query_gid(i) == Some(dgid)) else {
            return libc::ENOENT;
        };
        let mut a = IbvAhAttr::default();
        // SAFETY: ibv_gid is 16 plain bytes.
        a.grh.dgid = unsafe { std::mem::transmute::<[u8; 16], IbvGid>(sgid) };
        a.grh.sgid_index = sgid_index as u8;
        a.grh.hop_limit = 0xff;
        a.grh.traffic_class = traffic_class;
        a.grh.flow_label = flow_label;
        a.is_global = 1;
        a.dlid = w.slid;
        a.sl = w.sl;
        a.port_num = port_num;
        // SAFETY: the caller passes a writable ibv_ah_attr.
        unsafe { ah_attr.write(a) };
        0
    }
}

ibv_export! { "IBVERBS_1.1";
    /// `ibv_init_ah_from_wc` then `ibv_create_ah`.
    fn ibv_create_ah_from_wc(pd: *mut IbvPd, wc: *mut IbvWc, grh: *mut IbvGrh, port_num: u8) -> *mut IbvAh {
        // SAFETY: a PD from ibv_alloc_pd (checked for NULL).
        let Some(p) = (unsafe { pd_obj(pd) }) else {
            set_errno(libc::EINVAL);
            return std::ptr::null_mut();
        };
        let mut a = IbvAhAttr::default();
        // SAFETY: forwarded with the caller's pointers.
        let r = unsafe { ibv_init_ah_from_wc(p.c.context, port_num, wc, grh, &mut a) };
        if r != 0 {
            set_errno(r);
            return std::ptr::null_mut();
        }
        // SAFETY: a local attribute struct.
        unsafe { ibv_create_ah(pd, &mut a) }
    }
}
