//! Multicast groups: the UD QPs attached to each MGID (`ibv_attach_mcast`).
//!
//! IBTA 10.5 (multicast): only UD QPs join; a packet whose BTH names the
//! multicast QPN 0xFFFFFF and whose destination GID is a group goes to
//! every QP attached to it, each checking its own Q_Key and taking its own
//! receive WQE. On RoCEv2 the destination GID is the IP destination: an
//! IPv4 group a.b.c.d is the MGID `::ffff:a.b.c.d` (rdma_cm's mapping).
//! Limits are rxe's (8,192 groups, 56 QPs per group). As in the kernel, a
//! QP still attached cannot be destroyed (`EBUSY`).

use std::collections::BTreeMap;
use std::net::IpAddr;

/// The BTH destination QP of every multicast packet.
pub const MULTICAST_QPN: u32 = 0xFF_FFFF;

/// A multicast GID: `ff00::/8`, or an IPv4 group (224.0.0.0/4) mapped as
/// `::ffff:a.b.c.d`.
pub(crate) fn is_multicast_gid(gid: &[u8; 16]) -> bool {
    match std::net::Ipv6Addr::from(*gid).to_ipv4_mapped() {
        Some(v4) => v4.is_multicast(),
        None => gid[0] == 0xff,
    }
}

/// The MGID of IP destination `ip` (IPv4 mapped, IPv6 as it is).
pub fn mgid_of(ip: IpAddr) -> [u8; 16] {
    match ip {
        IpAddr::V4(v4) => v4.to_ipv6_mapped().octets(),
        IpAddr::V6(v6) => v6.octets(),
    }
}

/// The IP group an MGID stands for (IPv4 when mapped).
pub fn group_ip(mgid: &[u8; 16]) -> IpAddr {
    let v6 = std::net::Ipv6Addr::from(*mgid);
    match v6.to_ipv4_mapped() {
        Some(v4) => IpAddr::V4(v4),
        None => IpAddr::V6(v6),
    }
}

/// Why an attach or detach was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum McastError {
    /// Not a multicast GID.
    NotMulticast,
    /// Detach of a QP that is not attached to the group.
    NotAttached,
    /// A device limit: groups, QPs per group, or attachments in all.
    Full(&'static str),
}

/// Which QPs are attached to which groups.
#[derive(Debug, Clone, Default)]
pub(crate) struct McastTable {
    groups: BTreeMap<[u8; 16], Vec<u32>>,
    total: usize,
}

/// The table's limits (`ibv_device_attr`'s `max_mcast_*`).
#[derive(Debug, Clone, Copy)]
pub(crate) struct McastLimits {
    /// Groups.
    pub(crate) groups: usize,
    /// QPs per group.
    pub(crate) per_group: usize,
    /// Attachments in all.
    pub(crate) total: usize,
}

impl McastTable {
    /// Attaches `qpn` to `mgid`; attaching twice is not an error (as rxe).
    pub(crate) fn attach(&mut self, mgid: [u8; 16], qpn: u32, limits: McastLimits) -> Result<(), McastError> {
        if !is_multicast_gid(&mgid) {
            return Err(McastError::NotMulticast);
        }
        if self.groups.get(&mgid).is_some_and(|q| q.contains(&qpn)) {
            return Ok(());
        }
        if self.total >= limits.total {
            return Err(McastError::Full("multicast attachments"));
        }
        let is_new = !self.groups.contains_key(&mgid);
        if is_new && self.groups.len() >= limits.groups {
            return Err(McastError::Full("multicast groups"));
        }
        let qps = self.groups.entry(mgid).or_default();
        if qps.len() >= limits.per_group {
            return Err(McastError::Full("QPs per multicast group"));
        }
        qps.push(qpn);
        self.total += 1;
        Ok(())
    }

    /// Detaches `qpn` from `mgid`; the group goes with its last QP.
    pub(crate) fn detach(&mut self, mgid: [u8; 16], qpn: u32) -> Result<(), McastError> {
        let qps = self.groups.get_mut(&mgid).ok_or(McastError::NotAttached)?;
        let at = qps.iter().position(|&q| q == qpn).ok_or(McastError::NotAttached)?;
        qps.swap_remove(at);
        if qps.is_empty() {
            self.groups.remove(&mgid);
        }
        self.total -= 1;
        Ok(())
    }

    /// The QPs attached to `mgid`, in no particular order.
    pub(crate) fn members(&self, mgid: &[u8; 16]) -> &[u32] {
        self.groups.get(mgid).map_or(&[], Vec::as_slice)
    }

    /// The groups `qpn` is attached to.
    pub(crate) fn groups_of(&self, qpn: u32) -> Vec<[u8; 16]> {
        self.groups.iter().filter(|(_, q)| q.contains(&qpn)).map(|(g, _)| *g).collect()
    }

    /// Whether any QP is attached to `mgid`.
    pub(crate) fn has_group(&self, mgid: &[u8; 16]) -> bool {
        self.groups.contains_key(mgid)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LIMITS: McastLimits = McastLimits { groups: 2, per_group: 2, total: 3 };

    fn g(last: u8) -> [u8; 16] {
        mgid_of(IpAddr::V4(std::net::Ipv4Addr::new(239, 1, 1, last)))
    }

    #[test]
    fn ipv4_groups_map_to_v4_mapped_mgids_and_back() {
        let m = g(7);
        assert_eq!(&m[..12], &[0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff]);
        assert_eq!(group_ip(&m), "239.1.1.7".parse::<IpAddr>().unwrap());
        assert!(is_multicast_gid(&m));
        assert!(!is_multicast_gid(&mgid_of("10.0.0.1".parse().unwrap())));
        assert!(is_multicast_gid(&mgid_of("ff0e::1".parse().unwrap())));
        assert!(!is_multicast_gid(&mgid_of("fe80::1".parse().unwrap())));
    }

    #[test]
    fn attach_detach_and_limits() {
        let mut t = McastTable::default();
        assert_eq!(t.attach(mgid_of("10.0.0.1".parse().unwrap()), 0x11, LIMITS), Err(McastError::NotMulticast));
        t.attach(g(1), 0x11, LIMITS).unwrap();
        t.attach(g(1), 0x11, LIMITS).unwrap();
        t.attach(g(1), 0x12, LIMITS).unwrap();
        assert_eq!(t.attach(g(1), 0x13, LIMITS), Err(McastError::Full("QPs per multicast group")));
        t.attach(g(2), 0x11, LIMITS).unwrap();
        assert_eq!(t.attach(g(3), 0x11, LIMITS), Err(McastError::Full("multicast attachments")));
        let mut m = t.members(&g(1)).to_vec();
        m.sort();
        assert_eq!(m, [0x11, 0x12]);
        assert_eq!(t.groups_of(0x11), [g(1), g(2)]);
        assert_eq!(t.detach(g(2), 0x12), Err(McastError::NotAttached));
        t.detach(g(2), 0x11).unwrap();
        assert!(!t.has_group(&g(2)));
        assert_eq!(t.detach(g(2), 0x11), Err(McastError::NotAttached));
        t.attach(g(3), 0x11, LIMITS).unwrap();
        // Room for an attachment, none for a third group.
        t.detach(g(1), 0x12).unwrap();
        assert_eq!(t.attach(g(4), 0x11, LIMITS), Err(McastError::Full("multicast groups")));
        t.attach(g(1), 0x12, LIMITS).unwrap();
    }
}
