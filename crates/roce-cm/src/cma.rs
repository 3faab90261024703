//! What rdma_cm (Linux `cma.c`) puts in the CM messages of an RC
//! connection over RoCEv2, and the path values it derives: from the
//! addresses, ports and `rdma_conn_param` of the two ends to the REQ and
//! REP Linux sends (rdmacm.md 1.2, 1.7-1.9), so that a kernel peer sees
//! the same messages from softroce as from another Linux host.

use std::net::{IpAddr, SocketAddr};

use roce_wire::Psn;

use crate::wire::{
    CmWireError, CmaHdrRepr, IpServiceId, PathMtu, PortSpace, RepRepr, ReqPath, ReqRepr, SidrReqRepr, TransportType,
    private_data,
};

/// Both CM response timeouts rdma_cm asks for (`CMA_CM_RESPONSE_TIMEOUT`).
pub const CM_RESPONSE_TIMEOUT: u8 = 20;
/// REQ retries rdma_cm allows (`CMA_MAX_CM_RETRIES`).
pub const MAX_CM_RETRIES: u8 = 15;
/// The packet lifetime of a path rdma_cm builds locally on RoCE
/// (`CMA_IBOE_PACKET_LIFETIME`).
pub const IBOE_PACKET_LIFETIME: u8 = 18;
/// The hop limit of a RoCEv2 path over IPv4.
pub const HOP_LIMIT: u8 = 64;

/// The Q_Key of rdma_cm's UDP and IB port spaces (`RDMA_UDP_QKEY`): a UD
/// id's QP gets it, and its SIDR_REP names it.
pub const UDP_QKEY: u32 = 0x0123_4567;

/// The period of a SIDR_REQ (`1 << (CMA_CM_RESPONSE_TIMEOUT - 8)` ms,
/// `cma_resolve_ib_udp`), resent [`MAX_CM_RETRIES`] times.
pub const SIDR_TIMEOUT: std::time::Duration = std::time::Duration::from_millis(1 << (CM_RESPONSE_TIMEOUT - 8));

/// `rdma_conn_param` as the CM's messages carry it: what [`rc_req`] and
/// [`rc_rep`] put in a REQ or REP, the private data borrowed. Not the
/// application's (softroce's `rdma_cm::ConnParam`): that one owns its
/// private data, as events outlive messages, and has fields no message takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WireConnParam<'a> {
    /// RDMA READ / atomic requests this side accepts in flight.
    pub responder_resources: u8,
    /// RDMA READ / atomic requests this side issues in flight.
    pub initiator_depth: u8,
    /// End-to-end flow control.
    pub flow_control: bool,
    /// Transport retries (capped at 7).
    pub retry_count: u8,
    /// RNR retries (capped at 7; 7 = infinite).
    pub rnr_retry_count: u8,
    /// The QP uses an SRQ.
    pub srq: bool,
    /// The consumer's private data (REQ: at most 56 bytes after the cma_hdr).
    pub private_data: &'a [u8],
}

impl Default for WireConnParam<'_> {
    /// librdmacm's values for a NULL `conn_param`: retry 7, RNR retry 7.
    fn default() -> Self {
        WireConnParam {
            responder_resources: 0,
            initiator_depth: 0,
            flow_control: false,
            retry_count: 7,
            rnr_retry_count: 7,
            srq: false,
            private_data: &[],
        }
    }
}

/// The local end of a connection: its device and QP.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LocalEnd {
    /// The device's CA GUID.
    pub ca_guid: u64,
    /// The device's local CA ACK delay (rxe: 15).
    pub ack_delay: u8,
    /// The QP.
    pub qpn: u32,
    /// The PSN the QP starts receiving at (the id's random `seq_num`).
    pub psn: Psn,
    /// The path MTU (rdma_cm: the netdev's, as an IB MTU).
    pub mtu: PathMtu,
    /// The IP type of service (`RDMA_OPTION_ID_TOS`; the path's traffic class).
    pub tos: u8,
}

/// rdma_cm's flow label for a RoCEv2 path (`cma_get_roce_udp_flow_label`):
/// `(src_port * 31 + dst_port) & 0xFFFFF` of the active side's rdma_cm ports.
pub fn flow_label(src_port: u16, dst_port: u16) -> u32 {
    (u32::from(src_port) * 31 + u32::from(dst_port)) & 0xf_ffff
}

/// The UDP source port rxe gives an RC QP whose path has flow label `fl`
/// (`rdma_flow_label_to_udp_sport`); both sides of an rdma_cm connection
/// use the REQ's flow label, so both send from this port.
pub fn rc_udp_sport(fl: u32) -> u16 {
    (((fl & 0x3fff) ^ ((fl & 0xf_c000) >> 14)) | 0xc000) as u16
}

/// The QP local ACK timeout for a path (IBTA: packet lifetime plus one,
/// combined with the CA's ACK delay; Linux `cm_ack_timeout`): 19 for rxe's
/// delay 15 and rdma_cm's lifetime 18.
pub fn ack_timeout(ca_ack_delay: u8, packet_life_time: u8) -> u8 {
    let t = packet_life_time.saturating_add(1);
    let t = if t >= ca_ack_delay {
        t + u8::from(ca_ack_delay >= t - 1)
    } else {
        ca_ack_delay + u8::from(t >= ca_ack_delay.saturating_sub(1))
    };
    t.min(31)
}

/// The RoCEv2 GID of an IP address: IPv4-mapped for IPv4.
pub fn gid_of(ip: IpAddr) -> std::net::Ipv6Addr {
    match ip {
        IpAddr::V4(v) => v.to_ipv6_mapped(),
        IpAddr::V6(v) => v,
    }
}

/// The REQ rdma_cm sends for an RC connection (`cma_connect_ib`) from
/// `src` to `dst` in port space `ps`. The comm ID is left 0: the CM agent
/// fills it in. Fails when the private data does not fit.
pub fn rc_req(
    ps: PortSpace,
    src: SocketAddr,
    dst: SocketAddr,
    local: &LocalEnd,
    p: &WireConnParam<'_>,
) -> Result<ReqRepr, CmWireError> {
    let hdr = CmaHdrRepr::new(src.port(), src.ip(), dst.ip());
    let path = ReqPath {
        local_lid: 0xffff,
        remote_lid: 0xffff,
        local_gid: gid_of(src.ip()),
        remote_gid: gid_of(dst.ip()),
        flow_label: flow_label(src.port(), dst.port()),
        packet_rate: 0,
        traffic_class: local.tos,
        hop_limit: HOP_LIMIT,
        sl: 0,
        subnet_local: false,
        local_ack_timeout: ack_timeout(local.ack_delay, IBOE_PACKET_LIFETIME),
    };
    Ok(ReqRepr {
        service_id: IpServiceId { port_space: ps, port: dst.port() }.service_id(),
        local_ca_guid: local.ca_guid,
        local_qpn: local.qpn,
        responder_resources: p.responder_resources,
        initiator_depth: p.initiator_depth,
        remote_cm_response_timeout: CM_RESPONSE_TIMEOUT,
        transport: TransportType::Rc,
        end_to_end_flow_control: p.flow_control,
        starting_psn: local.psn,
        local_cm_response_timeout: CM_RESPONSE_TIMEOUT,
        retry_count: p.retry_count.min(7),
        pkey: 0xffff,
        path_mtu: local.mtu,
        rnr_retry_count: p.rnr_retry_count.min(7),
        max_cm_retries: MAX_CM_RETRIES,
        srq: p.srq,
        primary_path: path,
        private_data: hdr.private_data(p.private_data)?,
        ..ReqRepr::default()
    })
}

/// The SIDR_REQ rdma_cm sends for a UD id (`cma_resolve_ib_udp`) from
/// `src` to `dst` in port space `ps`: the cma_hdr, then at most 180 bytes
/// of `user` private data. The request ID is left 0 for the CM agent.
pub fn ud_sidr_req(ps: PortSpace, src: SocketAddr, dst: SocketAddr, user: &[u8]) -> Result<SidrReqRepr, CmWireError> {
    let mut req = SidrReqRepr::new(0, 0xffff, IpServiceId { port_space: ps, port: dst.port() }.service_id());
    req.private_data = CmaHdrRepr::new(src.port(), src.ip(), dst.ip()).private_data(user)?;
    Ok(req)
}

/// The REP rdma_cm sends when the consumer accepts (`cma_accept_ib`); the
/// comm IDs are left 0 for the CM agent.
pub fn rc_rep(local: &LocalEnd, p: &WireConnParam<'_>) -> Result<RepRepr, CmWireError> {
    Ok(RepRepr {
        local_qpn: local.qpn,
        starting_psn: local.psn,
        responder_resources: p.responder_resources,
        initiator_depth: p.initiator_depth,
        target_ack_delay: local.ack_delay,
        end_to_end_flow_control: p.flow_control,
        rnr_retry_count: p.rnr_retry_count.min(7),
        srq: p.srq,
        local_ca_guid: local.ca_guid,
        private_data: private_data(p.private_data)?,
        ..RepRepr::default()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ack_timeout_follows_the_ibta_rule() {
        assert_eq!(ack_timeout(15, 18), 19, "rxe and rdma_cm");
        // 2^a + 2^b as a power of two: the larger exponent, plus one when
        // the smaller is within one of it. A short lifetime leaves the delay.
        assert_eq!(ack_timeout(20, 0), 20);
        assert_eq!(ack_timeout(20, 18), 21, "2^19 + 2^20");
        assert_eq!(ack_timeout(20, 19), 21, "2^20 + 2^20");
        assert_eq!(ack_timeout(0, 30), 31);
        assert_eq!(ack_timeout(31, 31), 31);
    }

    #[test]
    fn flow_labels_and_udp_ports_of_the_captures() {
        // rdmacm.md 1.2: rping and ib_send_bw's two connections.
        for (sport, dport, fl, udp) in
            [(56612, 7174, 0xAE362, 58185), (59073, 18515, 0xC39B2, 63874), (44789, 18515, 0x577FE, 63467)]
        {
            assert_eq!(flow_label(sport, dport), fl);
            assert_eq!(rc_udp_sport(fl), udp);
        }
    }

    #[test]
    fn private_data_too_long_for_a_req_is_refused() {
        let local = LocalEnd { ca_guid: 1, ack_delay: 15, qpn: 0x11, psn: Psn::ZERO, mtu: PathMtu::Mtu1024, tos: 0 };
        let a: SocketAddr = "10.0.0.1:5000".parse().unwrap();
        let b: SocketAddr = "10.0.0.2:7174".parse().unwrap();
        let ok = [7u8; 56];
        assert!(
            rc_req(PortSpace::Tcp, a, b, &local, &WireConnParam { private_data: &ok, ..WireConnParam::default() })
                .is_ok()
        );
        let long = [7u8; 57];
        let e =
            rc_req(PortSpace::Tcp, a, b, &local, &WireConnParam { private_data: &long, ..WireConnParam::default() });
        assert!(matches!(e, Err(CmWireError::PrivateDataTooLong { .. })), "{e:?}");
        let rep = rc_rep(&local, &WireConnParam { private_data: &[1; 197], ..WireConnParam::default() });
        assert!(matches!(rep, Err(CmWireError::PrivateDataTooLong { len: 197, capacity: 196 })), "{rep:?}");
    }
}
