//! Attributes of QPs and address handles, as `ibv_qp_attr` and friends carry them.

use std::net::IpAddr;

use roce_wire::Psn;

use crate::Qpn;
use crate::verbs::{AccessFlags, QpState, QpType};

/// Path MTU (`enum ibv_mtu`): payload bytes per packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[repr(u32)]
pub enum Mtu {
    /// 256 bytes.
    Mtu256 = 1,
    /// 512 bytes.
    Mtu512 = 2,
    /// 1024 bytes.
    Mtu1024 = 3,
    /// 2048 bytes.
    Mtu2048 = 4,
    /// 4096 bytes.
    Mtu4096 = 5,
}

impl Mtu {
    /// Payload bytes.
    pub const fn bytes(self) -> usize {
        128 << (self as u32)
    }

    /// From `enum ibv_mtu`'s value.
    pub fn from_raw(v: u32) -> Option<Mtu> {
        [Mtu::Mtu256, Mtu::Mtu512, Mtu::Mtu1024, Mtu::Mtu2048, Mtu::Mtu4096].into_iter().find(|m| *m as u32 == v)
    }

    /// The largest RoCE MTU that fits a link MTU (rxe's `eth_mtu_int_to_enum`
    /// minus the RoCE headers: IP 20 + UDP 8 + BTH 12 + ext. headers up to 28 + ICRC 4).
    pub fn for_link_mtu(link_mtu: usize) -> Option<Mtu> {
        let room = link_mtu.checked_sub(20 + 8 + 12 + 28 + 4)?;
        [Mtu::Mtu4096, Mtu::Mtu2048, Mtu::Mtu1024, Mtu::Mtu512, Mtu::Mtu256].into_iter().find(|m| m.bytes() <= room)
    }
}

/// softroce's wide MTU, not IBTA's: the payload bytes of a FIRST or MIDDLE
/// packet in place of the path MTU's, for an RC or UC path whose two ends
/// are softroce and agreed on it out of band (as perftest agrees on `-m`).
/// IBTA's largest path MTU, 4096, leaves most of a jumbo frame empty and
/// puts 1,024 bytes in a 1500-byte frame that carries TCP's 1,448: on a
/// path whose cost is per packet that caps goodput at 0.71x TCP's
/// (docs/engine.md). A kernel rxe or a NIC refuses such packets (rxe's
/// `check_length`), so the engine never sends them unless the QP was given
/// one, and the verbs ABI cannot give one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct WideMtu(u16);

impl WideMtu {
    /// The smallest: IBTA's smallest path MTU.
    pub const MIN: usize = 256;
    /// The largest: what a 9000-byte jumbo frame carries over IPv4.
    pub const MAX: usize = 9000 - Self::OVERHEAD_V4;
    /// Bytes of an IPv4 packet around the payload: IP 20, UDP 8, BTH 12,
    /// RETH 16 and ImmDt 4 (an RDMA WRITE ONLY with immediate, RC's most),
    /// ICRC 4.
    const OVERHEAD_V4: usize = 20 + 8 + 12 + 16 + 4 + 4;
    /// IPv6's header is 20 bytes longer.
    const OVERHEAD_V6: usize = Self::OVERHEAD_V4 + 20;

    /// `bytes` as a wide MTU: a multiple of 4 (FIRST and MIDDLE packets
    /// carry no pad) in `MIN..=MAX`.
    pub fn new(bytes: usize) -> Option<WideMtu> {
        ((Self::MIN..=Self::MAX).contains(&bytes) && bytes.is_multiple_of(4)).then_some(WideMtu(bytes as u16))
    }

    /// The largest wide MTU a link of `link_mtu` bytes carries, for IPv6 or
    /// IPv4 packets (at most [`WideMtu::MAX`]).
    pub fn for_link_mtu(link_mtu: usize, ipv6: bool) -> Option<WideMtu> {
        let room = link_mtu.checked_sub(if ipv6 { Self::OVERHEAD_V6 } else { Self::OVERHEAD_V4 })?;
        WideMtu::new((room.min(Self::MAX)) & !3)
    }

    /// Payload bytes.
    pub const fn bytes(self) -> usize {
        self.0 as usize
    }
}

/// Where packets of a QP or a UD send go (`struct ibv_ah_attr` with its GRH).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AhAttr {
    /// The peer's address (its RoCEv2 GID).
    pub dest: IpAddr,
    /// Index of our GID (source address) in the device's table.
    pub sgid_index: u8,
    /// Hop limit / TTL.
    pub hop_limit: u8,
    /// Traffic class / TOS.
    pub traffic_class: u8,
    /// Service level.
    pub sl: u8,
    /// The GRH flow label (20 bits). On RoCEv2 it picks the UDP source
    /// port of an RC/UC QP (`rdma_get_udp_sport`); 0: from the QPN pair.
    pub flow_label: u32,
}

/// What an `ibv_ah_attr` holds beside the RoCE path [`AhAttr`]: LID
/// addressing, rate, path bits, port. The engine sends without it; it is
/// kept with the QP's other attributes so `ibv_query_qp` reports the
/// address vector as it was set.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IbPath {
    /// The address vector has a GRH (RoCE's always have one).
    pub is_global: bool,
    /// Destination LID (without a GRH: the host a LID names).
    pub dlid: u16,
    /// `enum ibv_rate`.
    pub static_rate: u8,
    /// Source path bits.
    pub src_path_bits: u8,
    /// Port.
    pub port_num: u8,
}

impl Default for IbPath {
    /// A RoCE address vector's: global, port 1.
    fn default() -> IbPath {
        IbPath { is_global: true, dlid: 0, static_rate: 0, src_path_bits: 0, port_num: 1 }
    }
}

/// Sizes of a QP's queues (`struct ibv_qp_cap`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct QpCap {
    /// Send queue depth.
    pub max_send_wr: u32,
    /// Receive queue depth.
    pub max_recv_wr: u32,
    /// SGEs per send WR.
    pub max_send_sge: u32,
    /// SGEs per receive WR.
    pub max_recv_sge: u32,
    /// Bytes a send WR may carry inline.
    pub max_inline_data: u32,
}

/// How to create a QP (`struct ibv_qp_init_attr`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QpInitAttr {
    /// Transport.
    pub qp_type: QpType,
    /// Protection domain.
    pub pd: crate::PdHandle,
    /// CQ for send completions.
    pub send_cq: crate::CqHandle,
    /// CQ for receive completions.
    pub recv_cq: crate::CqHandle,
    /// Shared receive queue, instead of the QP's own.
    pub srq: Option<crate::SrqHandle>,
    /// Queue sizes.
    pub cap: QpCap,
    /// Every send WR is signaled.
    pub sq_sig_all: bool,
    /// `IBV_QP_CREATE_BLOCK_SELF_MCAST_LB`: the QP does not receive the
    /// multicast packets it sent itself (mlx5's flag; rxe lacks it).
    pub block_self_mcast_lb: bool,
}

/// QP attributes (`struct ibv_qp_attr`); `modify_qp`'s mask says which count.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QpAttr {
    /// Requested state.
    pub qp_state: QpState,
    /// Asserted current state (with `CUR_STATE`).
    pub cur_qp_state: QpState,
    /// Path MTU.
    pub path_mtu: Mtu,
    /// softroce's wide MTU ([`WideMtu`]), set with `path_mtu` (the
    /// `PATH_MTU` bit of the mask): when `Some`, the packets' payload
    /// instead of `path_mtu`'s, both ways. Never set by the verbs ABI.
    pub wide_mtu: Option<WideMtu>,
    /// Q_Key (UD).
    pub qkey: u32,
    /// First expected request PSN.
    pub rq_psn: Psn,
    /// First PSN to send.
    pub sq_psn: Psn,
    /// Remote QP number.
    pub dest_qp_num: Qpn,
    /// Remote operations this QP accepts.
    pub qp_access_flags: AccessFlags,
    /// The primary path.
    pub ah_attr: AhAttr,
    /// The rest of the primary path's address vector (set with `AV`).
    pub ib_path: IbPath,
    /// P_Key index.
    pub pkey_index: u16,
    /// Port (1).
    pub port_num: u8,
    /// Local ACK timeout exponent: 4.096 us x 2^timeout, 0 = infinite.
    pub timeout: u8,
    /// Transport retries (0..=7).
    pub retry_cnt: u8,
    /// RNR retries (0..=7, 7 = infinite).
    pub rnr_retry: u8,
    /// RNR NAK timer code this QP's responder sends.
    pub min_rnr_timer: u8,
    /// Outstanding READ/atomic requests as initiator.
    pub max_rd_atomic: u8,
    /// READ/atomic requests held as responder.
    pub max_dest_rd_atomic: u8,
    /// Raise `IBV_EVENT_SQ_DRAINED` when SQD is reached.
    pub en_sqd_async_notify: bool,
}

impl Default for QpAttr {
    fn default() -> QpAttr {
        QpAttr {
            qp_state: QpState::Reset,
            cur_qp_state: QpState::Reset,
            path_mtu: Mtu::Mtu1024,
            wide_mtu: None,
            qkey: 0,
            rq_psn: Psn::ZERO,
            sq_psn: Psn::ZERO,
            dest_qp_num: Qpn::from(0),
            qp_access_flags: AccessFlags::EMPTY,
            ah_attr: AhAttr {
                dest: IpAddr::V4(std::net::Ipv4Addr::UNSPECIFIED),
                sgid_index: 0,
                hop_limit: 64,
                traffic_class: 0,
                sl: 0,
                flow_label: 0,
            },
            ib_path: IbPath::default(),
            pkey_index: 0,
            port_num: 1,
            timeout: 0,
            retry_cnt: 0,
            rnr_retry: 0,
            min_rnr_timer: 0,
            max_rd_atomic: 0,
            max_dest_rd_atomic: 0,
            en_sqd_async_notify: false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mtus() {
        assert_eq!(Mtu::Mtu256.bytes(), 256);
        assert_eq!(Mtu::Mtu4096.bytes(), 4096);
        assert_eq!(Mtu::from_raw(3), Some(Mtu::Mtu1024));
        assert_eq!(Mtu::from_raw(6), None);
        // rxe on a 1500-byte netdev runs with active_mtu 1024 (the golden captures).
        assert_eq!(Mtu::for_link_mtu(1500), Some(Mtu::Mtu1024));
        assert_eq!(Mtu::for_link_mtu(9000), Some(Mtu::Mtu4096));
        assert_eq!(Mtu::for_link_mtu(65536), Some(Mtu::Mtu4096));
        assert_eq!(Mtu::for_link_mtu(200), None);
    }

    #[test]
    fn wide_mtus() {
        // 1500 - IP 20 - UDP 8 - BTH 12 - RETH 16 - ImmDt 4 - ICRC 4.
        assert_eq!(WideMtu::for_link_mtu(1500, false).map(WideMtu::bytes), Some(1436));
        assert_eq!(WideMtu::for_link_mtu(1500, true).map(WideMtu::bytes), Some(1416));
        assert_eq!(WideMtu::for_link_mtu(9000, false).map(WideMtu::bytes), Some(8936));
        assert_eq!(WideMtu::for_link_mtu(9000, true).map(WideMtu::bytes), Some(8916));
        // Loopback's 65,536 is capped; an odd room is rounded down to a multiple of 4.
        assert_eq!(WideMtu::for_link_mtu(65536, false).map(WideMtu::bytes), Some(WideMtu::MAX));
        assert_eq!(WideMtu::for_link_mtu(1501, false).map(WideMtu::bytes), Some(1436));
        assert_eq!(WideMtu::for_link_mtu(300, false), None);
        assert_eq!(WideMtu::new(1437), None, "FIRST and MIDDLE packets carry no pad");
        assert_eq!(WideMtu::new(252), None);
        assert_eq!(WideMtu::new(WideMtu::MAX + 4), None);
        assert_eq!(WideMtu::new(2000).map(WideMtu::bytes), Some(2000));
    }
}
