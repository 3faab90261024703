//! What a device and its one port advertise (`ibv_query_device`,
//! `ibv_query_port`, `ibv_query_gid`), with the values Linux rxe shows in
//! `ibv_devinfo -v` except where softroce's limits differ (see [`Limits`]).

use std::net::IpAddr;

use crate::attr::Mtu;

/// `enum ibv_device_cap_flags` bits rxe sets (`device_cap_flags` 0x01223c76).
pub mod cap {
    /// Bad P_Key counter.
    pub const BAD_PKEY_CNTR: u32 = 1 << 1;
    /// Bad Q_Key counter.
    pub const BAD_QKEY_CNTR: u32 = 1 << 2;
    /// Automatic path migration.
    pub const AUTO_PATH_MIG: u32 = 1 << 4;
    /// Port may change on SQD -> RTS.
    pub const CHANGE_PHY_PORT: u32 = 1 << 5;
    /// UD address vectors are checked against the port.
    pub const UD_AV_PORT_ENFORCE: u32 = 1 << 6;
    /// The port-active async event is generated.
    pub const PORT_ACTIVE_EVENT: u32 = 1 << 10;
    /// `sys_image_guid` is meaningful.
    pub const SYS_IMAGE_GUID: u32 = 1 << 11;
    /// RC responders send RNR NAKs.
    pub const RC_RNR_NAK_GEN: u32 = 1 << 12;
    /// SRQs can be resized.
    pub const SRQ_RESIZE: u32 = 1 << 13;
    /// Memory windows.
    pub const MEM_WINDOW: u32 = 1 << 17;
    /// Memory management extensions (LOCAL_INV, SEND_WITH_INV).
    pub const MEM_MGT_EXTENSIONS: u32 = 1 << 21;
    /// Type 2B memory windows.
    pub const MEM_WINDOW_TYPE_2B: u32 = 1 << 24;
    /// Everything rxe advertises.
    pub const RXE: u32 = BAD_PKEY_CNTR
        | BAD_QKEY_CNTR
        | AUTO_PATH_MIG
        | CHANGE_PHY_PORT
        | UD_AV_PORT_ENFORCE
        | PORT_ACTIVE_EVENT
        | SYS_IMAGE_GUID
        | RC_RNR_NAK_GEN
        | SRQ_RESIZE
        | MEM_WINDOW
        | MEM_MGT_EXTENSIONS
        | MEM_WINDOW_TYPE_2B;
}

/// `device_cap_flags_ex` bits above the 32 of `device_cap_flags`
/// (`IB_UVERBS_DEVICE_*`; rdma-core 45+ names them).
pub mod cap_ex {
    /// FLUSH with the global visibility placement type (IBA 1.5).
    pub const FLUSH_GLOBAL: u64 = 1 << 38;
    /// FLUSH with the persistence placement type. rxe 6.2+ sets it (it
    /// flushes pmem); softroce never does: it has no persistence domain.
    pub const FLUSH_PERSISTENT: u64 = 1 << 39;
    /// ATOMIC WRITE (IBA 1.5).
    pub const ATOMIC_WRITE: u64 = 1 << 40;
}

/// On-demand paging capabilities (`struct ibv_odp_caps`).
///
/// What rxe with on-demand paging sets (Linux `rxe_init_device_param`,
/// drivers/infiniband/sw/rxe/rxe.c): `IB_ODP_SUPPORT` without
/// `IB_ODP_SUPPORT_IMPLICIT`; RC SEND, RECV, WRITE, READ, ATOMIC and
/// SRQ_RECV; UD SEND, RECV and SRQ_RECV; UC nothing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OdpCaps {
    /// `enum ibv_odp_general_caps`.
    pub general_caps: u64,
    /// `enum ibv_odp_transport_cap_bits` for RC.
    pub rc_odp_caps: u32,
    /// The same for UC.
    pub uc_odp_caps: u32,
    /// The same for UD.
    pub ud_odp_caps: u32,
}

/// `enum ibv_odp_general_caps` and `enum ibv_odp_transport_cap_bits`.
pub mod odp {
    /// On-demand paging regions (`IBV_ODP_SUPPORT`).
    pub const SUPPORT: u64 = 1;
    /// A region over the whole address space (`IBV_ODP_SUPPORT_IMPLICIT`).
    pub const SUPPORT_IMPLICIT: u64 = 1 << 1;
    /// SEND from ODP memory.
    pub const SEND: u32 = 1;
    /// Receives into ODP memory.
    pub const RECV: u32 = 1 << 1;
    /// RDMA WRITE targets.
    pub const WRITE: u32 = 1 << 2;
    /// RDMA READ sources.
    pub const READ: u32 = 1 << 3;
    /// Atomic targets.
    pub const ATOMIC: u32 = 1 << 4;
    /// SRQ receives.
    pub const SRQ_RECV: u32 = 1 << 5;
}

/// `struct ibv_device_attr` (the fields rxe fills; the rest are 0).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DeviceAttr {
    /// Firmware version text (`0.0.0`, as rxe).
    pub fw_ver: &'static str,
    /// Node GUID (EUI-64, network byte order as a number).
    pub node_guid: u64,
    /// System image GUID (the node GUID).
    pub sys_image_guid: u64,
    /// Largest region.
    pub max_mr_size: u64,
    /// Page sizes supported.
    pub page_size_cap: u64,
    /// Vendor (rxe: 0xffffff).
    pub vendor_id: u32,
    /// Vendor part.
    pub vendor_part_id: u32,
    /// Hardware version.
    pub hw_ver: u32,
    /// QPs.
    pub max_qp: u32,
    /// WRs per queue.
    pub max_qp_wr: u32,
    /// `enum ibv_device_cap_flags`.
    pub device_cap_flags: u32,
    /// SGEs per WR.
    pub max_sge: u32,
    /// SGEs per READ.
    pub max_sge_rd: u32,
    /// CQs.
    pub max_cq: u32,
    /// Entries per CQ.
    pub max_cqe: u32,
    /// Regions.
    pub max_mr: u32,
    /// Protection domains.
    pub max_pd: u32,
    /// Outstanding READ/atomics a QP answers.
    pub max_qp_rd_atom: u32,
    /// Responder resources in all.
    pub max_res_rd_atom: u32,
    /// Outstanding READ/atomics a QP issues.
    pub max_qp_init_rd_atom: u32,
    /// `enum ibv_atomic_cap` (1: atomic within the HCA).
    pub atomic_cap: u32,
    /// Memory windows.
    pub max_mw: u32,
    /// Multicast groups.
    pub max_mcast_grp: u32,
    /// QPs per multicast group.
    pub max_mcast_qp_attach: u32,
    /// QP attachments in all.
    pub max_total_mcast_qp_attach: u32,
    /// Address handles.
    pub max_ah: u32,
    /// SRQs.
    pub max_srq: u32,
    /// WRs per SRQ.
    pub max_srq_wr: u32,
    /// SGEs per SRQ WR.
    pub max_srq_sge: u32,
    /// P_Keys.
    pub max_pkeys: u16,
    /// Local CA ACK delay.
    pub local_ca_ack_delay: u8,
    /// Ports.
    pub phys_port_cnt: u8,
    /// `ibv_device_attr_ex.device_cap_flags_ex`: `device_cap_flags` and
    /// the [`cap_ex`] bits softroce has.
    pub device_cap_flags_ex: u64,
    /// `ibv_device_attr_ex.odp_caps`.
    pub odp_caps: OdpCaps,
}

/// `struct ibv_port_attr` for the one port.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PortAttr {
    /// `enum ibv_port_state` (4: ACTIVE).
    pub state: u32,
    /// Largest MTU.
    pub max_mtu: Mtu,
    /// MTU of the link.
    pub active_mtu: Mtu,
    /// GID table length.
    pub gid_tbl_len: u32,
    /// `port_cap_flags` (rxe: 0x00010000, CM supported).
    pub port_cap_flags: u32,
    /// Largest message.
    pub max_msg_sz: u32,
    /// P_Key table length.
    pub pkey_tbl_len: u16,
    /// LID (0 on RoCE).
    pub lid: u16,
    /// SM LID (0 on RoCE).
    pub sm_lid: u16,
    /// Virtual lanes.
    pub max_vl_num: u8,
    /// Width (1: 1X).
    pub active_width: u8,
    /// Speed (1: 2.5 Gbps).
    pub active_speed: u8,
    /// Physical state (5: LINK_UP).
    pub phys_state: u8,
    /// Link layer (`IBV_LINK_LAYER_ETHERNET` = 2).
    pub link_layer: u8,
}

/// The GID table length rxe reports.
pub const GID_TABLE_LEN: u32 = 1024;

/// The RoCEv2 GID of an address: IPv6 as is, IPv4 mapped (`::ffff:a.b.c.d`).
pub fn gid_of(addr: IpAddr) -> [u8; 16] {
    match addr {
        IpAddr::V4(v) => v.to_ipv6_mapped().octets(),
        IpAddr::V6(v) => v.octets(),
    }
}

/// A node GUID for a device whose GID table is `gids`: the EUI-64 of a
/// locally administered MAC 02:00:a:b:c:d built from the first IPv4
/// address (or the last 4 bytes of the first GID), so each address gets
/// its own stable GUID as each NIC does.
pub fn node_guid(gids: &[IpAddr]) -> u64 {
    let tail = gids
        .iter()
        .find_map(|a| match a {
            IpAddr::V4(v) => Some(v.octets()),
            IpAddr::V6(_) => None,
        })
        .or_else(|| gids.first().map(|a| gid_of(*a)[12..].try_into().expect("4 bytes")))
        .unwrap_or([0; 4]);
    // EUI-64 from MAC m: m0^0x02 m1 m2 ff fe m3 m4 m5, with m = 02:00:t0:t1:t2:t3.
    u64::from_be_bytes([0x00, 0x00, tail[0], 0xff, 0xfe, tail[1], tail[2], tail[3]])
}

/// The `fe80::` address of an EUI-64 GUID (what rxe's GID 0 is for a MAC).
pub fn link_local_of(guid: u64) -> std::net::Ipv6Addr {
    let g = guid.to_be_bytes();
    let mut o = [0u8; 16];
    o[0] = 0xfe;
    o[1] = 0x80;
    o[8..].copy_from_slice(&g);
    o[8] ^= 0x02;
    std::net::Ipv6Addr::from(o)
}

/// The loopback IPv4 address a made-up GID 0 stands for: a device on
/// 127.a.b.c has no link-local address, so its GID 0 is
/// [`link_local_of`] its [`node_guid`], `fe80::200:7fff:fea:bc` for MAC
/// 02:00:7f:a:b:c. Only loopback's are recognised: no NIC on a wire has
/// such an address, while a real MAC 02:00:x:... would.
pub fn loopback_of_gid(gid: &std::net::Ipv6Addr) -> Option<std::net::Ipv4Addr> {
    let o = gid.octets();
    let eui = [0x02, 0x00, 0x7f, 0xff, 0xfe];
    (o[..8] == [0xfe, 0x80, 0, 0, 0, 0, 0, 0] && o[8..13] == eui)
        .then(|| std::net::Ipv4Addr::new(127, o[13], o[14], o[15]))
}

/// `addr`, or the loopback IPv4 address it stands for if it is a made-up
/// GID 0 ([`loopback_of_gid`]).
pub fn loopback_route(addr: &IpAddr) -> IpAddr {
    match addr {
        IpAddr::V6(v) => loopback_of_gid(v).map_or(*addr, IpAddr::V4),
        a => *a,
    }
}

impl DeviceAttr {
    /// The attributes of a device with `limits` whose GID table is `gids`.
    pub fn new(limits: &Limits, gids: &[IpAddr]) -> DeviceAttr {
        let guid = node_guid(gids);
        DeviceAttr {
            fw_ver: "0.0.0",
            node_guid: guid,
            sys_image_guid: guid,
            max_mr_size: u64::MAX,
            page_size_cap: 0xffff_f000,
            vendor_id: 0xff_ffff,
            vendor_part_id: 0,
            hw_ver: 0,
            max_qp: limits.max_qp,
            max_qp_wr: limits.max_qp_wr,
            device_cap_flags: cap::RXE,
            max_sge: limits.max_sge,
            max_sge_rd: limits.max_sge,
            max_cq: limits.max_cq,
            max_cqe: limits.max_cqe,
            max_mr: limits.max_mr,
            max_pd: limits.max_pd,
            max_qp_rd_atom: u32::from(limits.max_qp_rd_atom),
            max_res_rd_atom: 258_048,
            max_qp_init_rd_atom: u32::from(limits.max_qp_rd_atom),
            atomic_cap: 1,
            max_mw: limits.max_mw,
            max_mcast_grp: 8192,
            max_mcast_qp_attach: 56,
            max_total_mcast_qp_attach: 458_752,
            max_ah: limits.max_ah,
            max_srq: limits.max_srq,
            max_srq_wr: limits.max_srq_wr,
            max_srq_sge: limits.max_srq_sge,
            max_pkeys: 64,
            local_ca_ack_delay: 15,
            phys_port_cnt: 1,
            device_cap_flags_ex: u64::from(cap::RXE) | cap_ex::FLUSH_GLOBAL | cap_ex::ATOMIC_WRITE,
            // Every region is on demand: softroce reads and writes user
            // memory where it is, never pinning it (see `AccessFlags::ON_DEMAND`).
            odp_caps: OdpCaps {
                general_caps: odp::SUPPORT,
                rc_odp_caps: odp::SEND | odp::RECV | odp::WRITE | odp::READ | odp::ATOMIC | odp::SRQ_RECV,
                uc_odp_caps: 0,
                ud_odp_caps: odp::SEND | odp::RECV | odp::SRQ_RECV,
            },
        }
    }
}

impl PortAttr {
    /// The port of a device with `limits` whose link carries `active_mtu`.
    pub fn new(limits: &Limits, active_mtu: Mtu) -> PortAttr {
        PortAttr {
            state: 4,
            max_mtu: Mtu::Mtu4096,
            active_mtu,
            gid_tbl_len: GID_TABLE_LEN,
            port_cap_flags: 0x0001_0000,
            max_msg_sz: u32::try_from(limits.max_msg_sz).unwrap_or(u32::MAX),
            pkey_tbl_len: 1,
            lid: 0,
            sm_lid: 0,
            max_vl_num: 1,
            active_width: 1,
            active_speed: 1,
            phys_state: 5,
            link_layer: 2,
        }
    }
}

/// Limits the device advertises and enforces (defaults: Linux rxe's).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// QPs.
    pub max_qp: u32,
    /// WRs per queue.
    pub max_qp_wr: u32,
    /// SGEs per WR.
    pub max_sge: u32,
    /// CQs.
    pub max_cq: u32,
    /// Entries per CQ.
    pub max_cqe: u32,
    /// Memory regions.
    pub max_mr: u32,
    /// Protection domains.
    pub max_pd: u32,
    /// Outstanding READ/atomic per QP (both directions).
    pub max_qp_rd_atom: u8,
    /// SRQs.
    pub max_srq: u32,
    /// WRs per SRQ.
    pub max_srq_wr: u32,
    /// SGEs per SRQ WR.
    pub max_srq_sge: u32,
    /// Address handles.
    pub max_ah: u32,
    /// Inline bytes per send WR.
    pub max_inline_data: u32,
    /// Largest message.
    pub max_msg_sz: u64,
    /// Memory windows.
    pub max_mw: u32,
    /// The largest [`WideMtu`](crate::WideMtu) a QP may be given: what the
    /// device's link carries. `None`: IBTA's path MTUs only.
    pub max_wide_mtu: Option<crate::WideMtu>,
}

impl Default for Limits {
    fn default() -> Limits {
        // rxe-devinfo.txt; max_msg_sz raised from rxe's 8 MiB to 2 GiB.
        Limits {
            max_qp: 1_048_560,
            max_qp_wr: 1_048_576,
            max_sge: 32,
            max_cq: 1_048_576,
            // mlx5's (2^22 - 1), not rxe's 32,767: libfabric's rxm asks for
            // 1,024 entries per peer of its universe (262,144 by default),
            // which rxe refuses (issue 31). A CQ's entries are allocated when
            // it is made, as a NIC's are.
            max_cqe: 4_194_303,
            max_mr: 524_287,
            max_pd: 1_048_576,
            max_qp_rd_atom: 128,
            max_srq: 917_503,
            max_srq_wr: 1_048_576,
            max_srq_sge: 27,
            max_ah: 32_767,
            max_inline_data: 512,
            max_msg_sz: 1 << 31,
            max_mw: 524_287,
            max_wide_mtu: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::Ipv4Addr;

    #[test]
    fn a_loopback_devices_gid_0_stands_for_its_ipv4_address() {
        let lo = IpAddr::V4(Ipv4Addr::new(127, 0, 3, 5));
        let gid0 = link_local_of(node_guid(&[lo]));
        assert_eq!(gid0, "fe80::200:7fff:fe00:305".parse::<std::net::Ipv6Addr>().unwrap());
        assert_eq!(loopback_of_gid(&gid0), Some(Ipv4Addr::new(127, 0, 3, 5)));
        assert_eq!(loopback_route(&IpAddr::V6(gid0)), lo);
        // A NIC's GID 0 (its MAC's) and a made-up one of a non-loopback
        // address stay as they are.
        let nic = link_local_of(node_guid(&[IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1))]));
        assert_eq!(loopback_of_gid(&nic), None);
        let real: std::net::Ipv6Addr = "fe80::5054:ff:fe12:3456".parse().unwrap();
        assert_eq!(loopback_route(&IpAddr::V6(real)), IpAddr::V6(real));
        assert_eq!(loopback_of_gid(&"fe81::200:7fff:fe00:305".parse().unwrap()), None);
    }

    #[test]
    fn rxe_values() {
        let gids = [IpAddr::V4(Ipv4Addr::new(10, 77, 0, 2))];
        let d = DeviceAttr::new(&Limits::default(), &gids);
        // rxe-devinfo: device_cap_flags 0x01223c76 and the limits it lists.
        assert_eq!(d.device_cap_flags, 0x0122_3c76);
        // max_cqe is mlx5's (Limits::default says why).
        assert_eq!((d.max_qp, d.max_qp_wr, d.max_sge, d.max_cqe), (1_048_560, 1_048_576, 32, 4_194_303));
        assert_eq!((d.max_mr, d.max_mw, d.max_srq, d.max_srq_sge, d.max_ah), (524_287, 524_287, 917_503, 27, 32_767));
        assert_eq!((d.max_qp_rd_atom, d.max_qp_init_rd_atom, d.atomic_cap), (128, 128, 1));
        // IBA 1.5 placement: FLUSH_GLOBAL and ATOMIC_WRITE, no persistence.
        assert_eq!(d.device_cap_flags_ex, 0x0122_3c76 | 1 << 38 | 1 << 40);
        assert_eq!(d.device_cap_flags_ex & cap_ex::FLUSH_PERSISTENT, 0);
        // rxe's ODP capabilities: explicit regions only, RC and UD.
        assert_eq!(d.odp_caps.general_caps, 1);
        assert_eq!((d.odp_caps.rc_odp_caps, d.odp_caps.uc_odp_caps, d.odp_caps.ud_odp_caps), (0x3f, 0, 0x23));
        let p = PortAttr::new(&Limits::default(), Mtu::Mtu1024);
        assert_eq!((p.state, p.max_mtu, p.active_mtu, p.gid_tbl_len), (4, Mtu::Mtu4096, Mtu::Mtu1024, 1024));
        assert_eq!((p.port_cap_flags, p.link_layer, p.phys_state), (0x0001_0000, 2, 5));
        // GIDs as rxe lists them.
        assert_eq!(gid_of(gids[0]), "::ffff:10.77.0.2".parse::<std::net::Ipv6Addr>().unwrap().octets());
        // One GUID per address, stable.
        assert_eq!(d.node_guid, 0x0000_0aff_fe4d_0002);
        assert_ne!(
            node_guid(&[IpAddr::V4(Ipv4Addr::new(127, 0, 0, 3))]),
            node_guid(&[IpAddr::V4(Ipv4Addr::LOCALHOST)])
        );
    }
}
