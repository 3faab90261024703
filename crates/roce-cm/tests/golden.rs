//! Every CM MAD Linux put in the two rdma_cm golden captures (kernel
//! rdma_cm + ib_cm over rdma_rxe, Debian 12) parses, re-emits byte for
//! byte, and decodes to the values the kernel is known to have sent.
//!
//! - `rping_c3`: `rping -c -a 10.77.0.2 -C 3 -S 64` against `rping -s`, one
//!   connection: REQ, REP, RTU, data, DREQ, DREP (5 MADs).
//! - `ib_send_bw_rdmacm_s64_n5`: `ib_send_bw -R -n 5 -s 64`, two connections
//!   to the same service ID: A (perftest's parameter exchange, QPN 0x11) and
//!   B (the measured QP, QPN 0x12). REQ/REP/RTU of A, of B, then DREQ/DREP
//!   of B from the client and DREQ/DREP of A from the server (10 MADs).
//!
//! The client C is 10.77.0.3 (MAC 52:54:00:77:00:03), the server S 10.77.0.2.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::path::{Path, PathBuf};

use roce_capture::{Classified, RoceDatagram, classify, read_file};
use roce_cm::wire::mad::{GSI_QKEY, GSI_QPN};
use roce_cm::wire::{
    AttributeId, CMA_HDR_LEN, CmMad, CmMessage, CmaAddrs, CmaHdrRepr, DrepRepr, DreqRepr, IpServiceId, MAD_LEN,
    MadHeaderRepr, PathMtu, PortSpace, RepRepr, ReqPath, ReqRepr, RtuRepr, TransportType, kernel_tid, rep, req,
    tid_comm_id, tid_hi,
};
use roce_wire::{Opcode, Packet, Psn};

const CLIENT: Ipv4Addr = Ipv4Addr::new(10, 77, 0, 3);
const SERVER: Ipv4Addr = Ipv4Addr::new(10, 77, 0, 2);
/// The CA GUIDs: the EUI-64 of each host's MAC (U/L bit flipped).
const CLIENT_GUID: u64 = 0x5054_00ff_fe77_0003;
const SERVER_GUID: u64 = 0x5054_00ff_fe77_0002;
/// rxe's QP 1 UDP source port: 0xC000 + (hash_32(1, 14) & 0x3fff), on both hosts.
const QP1_UDP_PORT: u16 = 55410;

fn golden(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/data/golden-pcaps").join(format!("{name}.pcap.gz"))
}

/// A CM MAD of a capture, with what carried it.
#[derive(Debug)]
struct CmFrame {
    /// Frame number (1-based).
    frame: usize,
    /// IP source.
    src: IpAddr,
    /// UDP source port.
    udp_sport: u16,
    /// BTH PSN: the sending host's QP 1 send counter.
    psn: u32,
    /// The parsed MAD.
    mad: CmMad,
}

/// A RoCE packet of a capture that is not a CM MAD.
#[derive(Debug)]
struct DataFrame {
    frame: usize,
    src: IpAddr,
    udp_sport: u16,
    opcode: Opcode,
    dest_qpn: u32,
    psn: Psn,
}

fn datagrams(frames: &[roce_capture::Frame]) -> Vec<(usize, RoceDatagram<'_>)> {
    frames
        .iter()
        .filter_map(|f| match classify(f) {
            Classified::Roce(d) => Some((f.number, d)),
            Classified::NotRoce => None,
            Classified::Malformed(why) => panic!("frame {}: {why}", f.number),
        })
        .collect()
}

/// Every UD SEND_ONLY to QP 1 of `name`, checked for its framing, parsed
/// and re-emitted; and the other packets.
fn read_capture(name: &str) -> (Vec<CmFrame>, Vec<DataFrame>) {
    let frames = read_file(&golden(name)).unwrap();
    let mut cm = Vec::new();
    let mut data = Vec::new();
    for (n, d) in datagrams(&frames) {
        let p = Packet::new_checked(d.payload).unwrap_or_else(|e| panic!("{name} frame {n}: {e}"));
        let bth = p.bth();
        if bth.opcode() != Opcode::UD_SEND_ONLY || bth.dest_qpn() != GSI_QPN {
            assert_ne!(bth.dest_qpn(), GSI_QPN, "{name} frame {n}: only UD SEND_ONLY goes to QP 1");
            data.push(DataFrame {
                frame: n,
                src: d.src.ip(),
                udp_sport: d.src.port(),
                opcode: bth.opcode(),
                dest_qpn: bth.dest_qpn(),
                psn: bth.psn(),
            });
            continue;
        }
        // The framing of 1.1: P_Key 0xffff, AckReq, Q_Key 0x80010000 from QP 1.
        assert_eq!((bth.pkey(), bth.ack_req(), bth.pad_count()), (0xffff, true, 0), "{name} frame {n}");
        let deth = p.deth().unwrap();
        assert_eq!((deth.qkey(), deth.src_qpn()), (GSI_QKEY, GSI_QPN), "{name} frame {n}");
        assert_eq!(d.src.port(), QP1_UDP_PORT, "{name} frame {n}");
        let bytes = p.payload();
        assert_eq!(bytes.len(), MAD_LEN, "{name} frame {n}");
        let mad = CmMad::parse(bytes).unwrap_or_else(|e| panic!("{name} frame {n}: {e}"));
        assert_eq!(mad.to_bytes(), bytes, "{name} frame {n}: re-emitted MAD differs");
        // The header is the one Linux puts on every CM message.
        assert_eq!(mad.header, MadHeaderRepr::cm(mad.message.attr_id(), mad.header.tid), "{name} frame {n}");
        cm.push(CmFrame { frame: n, src: d.src.ip(), udp_sport: d.src.port(), psn: bth.psn().value(), mad });
    }
    (cm, data)
}

/// Who sent each MAD, its attribute, TID and BTH PSN, in capture order.
fn summary(cm: &[CmFrame]) -> Vec<(usize, char, AttributeId, u64, u32)> {
    cm.iter()
        .map(|f| {
            let who = if f.src == IpAddr::V4(CLIENT) { 'C' } else { 'S' };
            (f.frame, who, f.mad.message.attr_id(), f.mad.header.tid, f.psn)
        })
        .collect()
}

/// The REQ rdma_cm sends for an RC connection from `CLIENT` to `SERVER` on
/// TCP port `port`. Fixed by the kernel: both CM response timeouts 20, max
/// CM retries 15, retry and RNR retry 7, MTU 1024, LIDs 0xffff, hop limit
/// 64, ACK timeout 19 (packet lifetime 18 + 1), no alternate path.
struct KernelReq {
    comm_id: u32,
    port: u16,
    qpn: u32,
    rd_atomic: u8,
    psn: u32,
    flow_label: u32,
    cma_port: u16,
}

impl KernelReq {
    fn repr(&self) -> ReqRepr {
        let cma = CmaHdrRepr { port: self.cma_port, addrs: CmaAddrs::V4 { src: CLIENT, dst: SERVER } };
        ReqRepr {
            local_comm_id: self.comm_id,
            vendor_id: 0,
            service_id: 0x0000_0000_0106_0000 | u64::from(self.port),
            local_ca_guid: CLIENT_GUID,
            local_qkey: 0,
            local_qpn: self.qpn,
            responder_resources: self.rd_atomic,
            local_eecn: 0,
            initiator_depth: self.rd_atomic,
            remote_eecn: 0,
            remote_cm_response_timeout: 20,
            transport: TransportType::Rc,
            end_to_end_flow_control: false,
            starting_psn: Psn::new(self.psn),
            local_cm_response_timeout: 20,
            retry_count: 7,
            pkey: 0xffff,
            path_mtu: PathMtu::Mtu1024,
            rdc_exists: false,
            rnr_retry_count: 7,
            max_cm_retries: 15,
            srq: false,
            extended_transport_type: 0,
            primary_path: ReqPath {
                local_lid: 0xffff,
                remote_lid: 0xffff,
                local_gid: CLIENT.to_ipv6_mapped(),
                remote_gid: SERVER.to_ipv6_mapped(),
                flow_label: self.flow_label,
                packet_rate: 0,
                traffic_class: 0,
                hop_limit: 64,
                sl: 0,
                subnet_local: false,
                local_ack_timeout: 19,
            },
            alternate_path: ReqPath::default(),
            sap_supported: false,
            private_data: cma.private_data(&[]).unwrap(),
        }
    }
}

/// The REP the kernel sends when a user accepts: target ACK delay 15 (rxe),
/// RNR retry 7, no SRQ, no private data.
fn kernel_rep(comm_id: u32, remote_comm_id: u32, qpn: u32, rd_atomic: u8, psn: u32) -> RepRepr {
    RepRepr {
        local_comm_id: comm_id,
        remote_comm_id,
        local_qkey: 0,
        local_qpn: qpn,
        local_eecn: 0,
        starting_psn: Psn::new(psn),
        vendor_id: 0,
        responder_resources: rd_atomic,
        initiator_depth: rd_atomic,
        target_ack_delay: 15,
        failover_accepted: 0,
        end_to_end_flow_control: false,
        rnr_retry_count: 7,
        srq: false,
        local_ca_guid: SERVER_GUID,
        private_data: [0; rep::PRIVATE_DATA_LEN],
    }
}

/// rdma_cm's flow label for IPv4: `(src_port * 31 + dst_port) & 0xFFFFF` of
/// the active side's rdma_cm ports.
fn cma_flow_label(sport: u16, dport: u16) -> u32 {
    (u32::from(sport) * 31 + u32::from(dport)) & 0xf_ffff
}

/// rxe's UDP source port of an RC QP whose path has flow label `fl`.
fn rxe_rc_udp_sport(fl: u32) -> u16 {
    (((fl & 0x3fff) ^ ((fl & 0xf_c000) >> 14)) | 0xc000) as u16
}

fn message(f: &CmFrame) -> CmMessage {
    f.mad.message
}

/// The rdma_cm header of a REQ, checked field by field.
fn check_cma_hdr(req: &ReqRepr, cma_port: u16) {
    let cma = CmaHdrRepr::parse(&req.private_data).unwrap();
    assert_eq!(cma.ip_version(), 4);
    assert_eq!(cma.port, cma_port);
    assert_eq!(cma.src_addr(), IpAddr::V4(CLIENT));
    assert_eq!(cma.dst_addr(), IpAddr::V4(SERVER));
    assert_eq!(cma.src_socket_addr(), (CLIENT, cma_port).into());
    // rping and perftest send no private data of their own.
    assert_eq!(roce_cm::wire::cma_hdr::user_private_data(&req.private_data), [0; req::PRIVATE_DATA_LEN - CMA_HDR_LEN]);
    assert_eq!(req.private_data[..4], [0x00, 0x40, (cma_port >> 8) as u8, cma_port as u8]);
}

#[test]
fn every_cm_mad_parses_and_reemits_byte_for_byte() {
    let (rping, rping_data) = read_capture("rping_c3");
    let (bw, bw_data) = read_capture("ib_send_bw_rdmacm_s64_n5");
    // 41 and 64 frames in all; the rest are RC data on QPs 0x11 / 0x12.
    assert_eq!((rping.len(), rping_data.len()), (5, 36));
    assert_eq!((bw.len(), bw_data.len()), (10, 54));
    for d in rping_data.iter().chain(&bw_data) {
        assert!(d.dest_qpn == 0x11 || d.dest_qpn == 0x12, "{d:?}");
        assert!(d.opcode.info().unwrap().transport == roce_wire::Transport::Rc, "{d:?}");
    }
}

#[test]
fn rping_sequence_tids_and_psns() {
    let (cm, _) = read_capture("rping_c3");
    let tid = 0x0000_0002_4e40_353f;
    assert_eq!(
        summary(&cm),
        [
            (1, 'C', AttributeId::REQ, tid, 0),
            (2, 'S', AttributeId::REP, tid, 0),
            (3, 'C', AttributeId::RTU, tid, 1),
            (40, 'C', AttributeId::DREQ, tid, 2),
            (41, 'S', AttributeId::DREP, tid, 1),
        ]
    );
    // The client initiated both exchanges: its REQ comm ID, byte-swapped, under hi_tid 2.
    assert_eq!(tid, kernel_tid(2, 0x3f35_404e));
    assert!(cm.iter().all(|f| f.udp_sport == QP1_UDP_PORT));
}

#[test]
fn rping_fields() {
    let (cm, _) = read_capture("rping_c3");
    let (c, s) = (0x3f35_404e, 0xd160_50fc);
    let expected_req = KernelReq {
        comm_id: c,
        port: 7174,
        qpn: 0x11,
        rd_atomic: 1,
        psn: 0xed57a9,
        flow_label: 0xae362,
        cma_port: 56612,
    }
    .repr();
    let CmMessage::Req(req) = message(&cm[0]) else { panic!("{:?}", cm[0]) };
    assert_eq!(req, expected_req);
    // The same values, spelled out for the fields the design notes tabulate.
    assert_eq!(IpServiceId::from_service_id(req.service_id), Ok(IpServiceId::new(PortSpace::Tcp, 7174)));
    assert_eq!(req.service_id, 0x0000_0000_0106_1c06);
    assert_eq!((req.local_ca_guid, req.local_qpn, req.starting_psn), (CLIENT_GUID, 0x11, Psn::new(0xed57a9)));
    assert_eq!((req.responder_resources, req.initiator_depth), (1, 1));
    assert_eq!((req.remote_cm_response_timeout, req.local_cm_response_timeout, req.max_cm_retries), (20, 20, 15));
    assert_eq!((req.retry_count, req.rnr_retry_count, req.path_mtu.bytes()), (7, 7, Some(1024)));
    assert_eq!(req.primary_path.local_gid, "::ffff:10.77.0.3".parse::<Ipv6Addr>().unwrap());
    assert_eq!(req.primary_path.remote_gid, "::ffff:10.77.0.2".parse::<Ipv6Addr>().unwrap());
    assert_eq!((req.primary_path.flow_label, req.primary_path.packet_rate), (0xae362, 0));
    assert_eq!((req.primary_path.hop_limit, req.primary_path.local_ack_timeout), (64, 19));
    assert!(!req.has_alternate_path());
    check_cma_hdr(&req, 56612);

    assert_eq!(message(&cm[1]), CmMessage::Rep(kernel_rep(s, c, 0x11, 1, 0x0eeec9)));
    assert_eq!(message(&cm[2]), CmMessage::Rtu(RtuRepr::new(c, s)));
    // The client's DREQ names the server's QPN.
    assert_eq!(message(&cm[3]), CmMessage::Dreq(DreqRepr::new(c, s, 0x11)));
    assert_eq!(message(&cm[4]), CmMessage::Drep(DrepRepr::new(s, c)));
}

#[test]
fn ib_send_bw_sequence_tids_and_psns() {
    let (cm, _) = read_capture("ib_send_bw_rdmacm_s64_n5");
    let (a, b) = (0x0000_0002_344c_33f6, 0x0000_0002_344c_33f7);
    let server_dreq = 0x0000_0002_2999_4834;
    assert_eq!(
        summary(&cm),
        [
            (1, 'C', AttributeId::REQ, a, 0),
            (2, 'S', AttributeId::REP, a, 0),
            (3, 'C', AttributeId::RTU, a, 1),
            (24, 'C', AttributeId::REQ, b, 2),
            (25, 'S', AttributeId::REP, b, 1),
            (26, 'C', AttributeId::RTU, b, 3),
            (61, 'C', AttributeId::DREQ, b, 4),
            (62, 'S', AttributeId::DREP, b, 2),
            (63, 'S', AttributeId::DREQ, server_dreq, 3),
            (64, 'C', AttributeId::DREP, server_dreq, 5),
        ]
    );
    // Each TID is the initiator's comm ID, byte-swapped, under hi_tid 2: the
    // client's for its REQs and its DREQ of B, the server's for its DREQ of A.
    assert_eq!(a, kernel_tid(2, 0xf633_4c34));
    assert_eq!(b, kernel_tid(2, 0xf733_4c34));
    assert_eq!((tid_hi(server_dreq), tid_comm_id(server_dreq)), (2, 0x3448_9929));
}

#[test]
fn ib_send_bw_fields() {
    let (cm, _) = read_capture("ib_send_bw_rdmacm_s64_n5");
    let (ca, sa) = (0xf633_4c34, 0x3448_9929);
    let (cb, sb) = (0xf733_4c34, 0x3648_9929);
    // Connection A: perftest's comm channel, QPN 0x11 on both sides, no RDMA READ resources.
    let req_a = KernelReq {
        comm_id: ca,
        port: 18515,
        qpn: 0x11,
        rd_atomic: 0,
        psn: 0x33dbf7,
        flow_label: 0xc39b2,
        cma_port: 59073,
    };
    assert_eq!(message(&cm[0]), CmMessage::Req(req_a.repr()));
    assert_eq!(message(&cm[1]), CmMessage::Rep(kernel_rep(sa, ca, 0x11, 0, 0x1c6cd0)));
    assert_eq!(message(&cm[2]), CmMessage::Rtu(RtuRepr::new(ca, sa)));
    // Connection B: the measured QP 0x12, to the same service ID.
    let req_b = KernelReq {
        comm_id: cb,
        port: 18515,
        qpn: 0x12,
        rd_atomic: 0,
        psn: 0x4f3f88,
        flow_label: 0x577fe,
        cma_port: 44789,
    };
    assert_eq!(message(&cm[3]), CmMessage::Req(req_b.repr()));
    assert_eq!(message(&cm[4]), CmMessage::Rep(kernel_rep(sb, cb, 0x12, 0, 0xb9bf46)));
    assert_eq!(message(&cm[5]), CmMessage::Rtu(RtuRepr::new(cb, sb)));
    // B is torn down by the client, A by the server; each DREQ names the receiver's QPN.
    assert_eq!(message(&cm[6]), CmMessage::Dreq(DreqRepr::new(cb, sb, 0x12)));
    assert_eq!(message(&cm[7]), CmMessage::Drep(DrepRepr::new(sb, cb)));
    assert_eq!(message(&cm[8]), CmMessage::Dreq(DreqRepr::new(sa, ca, 0x11)));
    assert_eq!(message(&cm[9]), CmMessage::Drep(DrepRepr::new(ca, sa)));

    for (f, cma_port) in [(&cm[0], 59073), (&cm[3], 44789)] {
        let CmMessage::Req(req) = message(f) else { panic!("{f:?}") };
        assert_eq!(IpServiceId::from_service_id(req.service_id), Ok(IpServiceId::new(PortSpace::Tcp, 18515)));
        assert_eq!(req.service_id, 0x0000_0000_0106_4853);
        check_cma_hdr(&req, cma_port);
    }
}

/// The decoded values agree with the data traffic that follows: the flow
/// label is rdma_cm's hash of the cma_hdr port and the service port, the RC
/// QPs' UDP source port is rxe's fold of that flow label, the active side
/// sends from the REP's starting PSN and the passive side from the REQ's.
#[test]
fn decoded_values_match_the_data_traffic() {
    for name in ["rping_c3", "ib_send_bw_rdmacm_s64_n5"] {
        let (cm, data) = read_capture(name);
        let reqs: Vec<ReqRepr> = cm
            .iter()
            .filter_map(|f| match f.mad.message {
                CmMessage::Req(r) => Some(r),
                _ => None,
            })
            .collect();
        for req in &reqs {
            let rep = cm
                .iter()
                .find_map(|f| match f.mad.message {
                    CmMessage::Rep(r) if r.remote_comm_id == req.local_comm_id => Some(r),
                    _ => None,
                })
                .unwrap();
            let cma = CmaHdrRepr::parse(&req.private_data).unwrap();
            let service = IpServiceId::from_service_id(req.service_id).unwrap();
            let fl = cma_flow_label(cma.port, service.port);
            assert_eq!(fl, req.primary_path.flow_label, "{name}");
            // Both QPNs are equal here, so the QP's packets in both directions go to it.
            assert_eq!(req.local_qpn, rep.local_qpn);
            let qp: Vec<&DataFrame> = data.iter().filter(|d| d.dest_qpn == rep.local_qpn).collect();
            assert!(!qp.is_empty());
            assert!(qp.iter().all(|d| d.udp_sport == rxe_rc_udp_sport(fl)), "{name} QP {:#x}", rep.local_qpn);
            let first = |from: Ipv4Addr| {
                qp.iter().find(|d| d.src == IpAddr::V4(from) && d.opcode != Opcode::RC_ACKNOWLEDGE).unwrap()
            };
            assert_eq!(first(CLIENT).psn, rep.starting_psn, "{name}: the client sends from REP's PSN");
            if let Some(s) = qp.iter().find(|d| d.src == IpAddr::V4(SERVER) && d.opcode != Opcode::RC_ACKNOWLEDGE) {
                assert_eq!(s.psn, req.starting_psn, "{name} frame {}: the server sends from REQ's PSN", s.frame);
            }
        }
    }
    // The three connections of the design notes: rping 58185, ib_send_bw A 63874 and B 63467.
    assert_eq!(rxe_rc_udp_sport(cma_flow_label(56612, 7174)), 58185);
    assert_eq!(rxe_rc_udp_sport(cma_flow_label(59073, 18515)), 63874);
    assert_eq!(rxe_rc_udp_sport(cma_flow_label(44789, 18515)), 63467);
}

/// `mad` with the comm IDs and TID of the capture's `theirs` (what must
/// differ between two runs), everything else as softroce made it.
fn with_ids_of(mad: CmMad, theirs: &CmMad) -> CmMad {
    let mut m = mad;
    m.header.tid = theirs.header.tid;
    m.message = match (m.message, theirs.message) {
        (CmMessage::Req(mut a), CmMessage::Req(b)) => {
            a.local_comm_id = b.local_comm_id;
            CmMessage::Req(a)
        }
        (CmMessage::Rep(mut a), CmMessage::Rep(b)) => {
            (a.local_comm_id, a.remote_comm_id) = (b.local_comm_id, b.remote_comm_id);
            CmMessage::Rep(a)
        }
        (CmMessage::Rtu(mut a), CmMessage::Rtu(b)) => {
            (a.local_comm_id, a.remote_comm_id) = (b.local_comm_id, b.remote_comm_id);
            CmMessage::Rtu(a)
        }
        (CmMessage::Dreq(mut a), CmMessage::Dreq(b)) => {
            (a.local_comm_id, a.remote_comm_id) = (b.local_comm_id, b.remote_comm_id);
            CmMessage::Dreq(a)
        }
        (CmMessage::Drep(mut a), CmMessage::Drep(b)) => {
            (a.local_comm_id, a.remote_comm_id) = (b.local_comm_id, b.remote_comm_id);
            CmMessage::Drep(a)
        }
        (ours, theirs) => panic!("softroce sent {:?} where Linux sent {:?}", ours.attr_id(), theirs.attr_id()),
    };
    m
}

/// softroce's CM agents, given what rping gives rdma_cm (the addresses and
/// ports, QPN 0x11 on both sides, its PSNs, responder resources and
/// initiator depth 1), make rping's whole exchange: the same five MADs in
/// the same order, equal to the kernel's byte for byte once the comm IDs
/// and TIDs (random per run) are the capture's.
#[test]
fn softroce_makes_rpings_exchange_byte_for_byte_but_for_the_comm_ids() {
    use roce_cm::cm::{Cm, CmConfig, CmEvent, ConnectParams};
    use roce_cm::cma::{self, LocalEnd, WireConnParam};
    let (theirs, _) = read_capture("rping_c3");
    let now = std::time::Instant::now();
    let cfg = |ca_guid| CmConfig { ca_guid, tid_hi: 2, ack_delay: 15, comm_id_mask: 0, comm_id_tag: 0 };
    let (mut c, mut s) = (Cm::new(cfg(CLIENT_GUID), 7), Cm::new(cfg(SERVER_GUID), 8));
    s.listen(IpServiceId::new(PortSpace::Tcp, 7174).service_id()).unwrap();
    let end = |ca_guid, psn| LocalEnd {
        ca_guid,
        ack_delay: 15,
        qpn: 0x11,
        psn: Psn::new(psn),
        mtu: PathMtu::Mtu1024,
        tos: 0,
    };
    let rping = WireConnParam { responder_resources: 1, initiator_depth: 1, ..WireConnParam::default() };
    let req =
        cma::rc_req(PortSpace::Tcp, (CLIENT, 56612).into(), (SERVER, 7174).into(), &end(CLIENT_GUID, 0xed57a9), &rping)
            .unwrap();
    let (ci, si) = (IpAddr::V4(CLIENT), IpAddr::V4(SERVER));
    let id_c = c.connect(now, ConnectParams { local: ci, peer: si, req, packet_life_time: cma::IBOE_PACKET_LIFETIME });
    let mut ours = Vec::new();
    let mut hop = |from: &mut Cm, to: &mut Cm| {
        let t = from.poll_transmit().expect("a MAD");
        assert!(from.poll_transmit().is_none(), "one MAD at a time");
        to.handle_mad(now, t.from, t.to, &t.mad.to_bytes());
        ours.push((t.from, t.mad));
    };
    hop(&mut c, &mut s);
    let Some(CmEvent::ReqReceived { id: id_s, .. }) = s.poll_event() else { panic!("no REQ") };
    s.accept(now, id_s, cma::rc_rep(&end(SERVER_GUID, 0x0eeec9), &rping).unwrap()).unwrap();
    hop(&mut s, &mut c);
    c.establish(now, id_c).unwrap();
    hop(&mut c, &mut s);
    c.disconnect(now, id_c).unwrap();
    hop(&mut c, &mut s);
    s.disconnect(now, id_s).unwrap();
    hop(&mut s, &mut c);
    assert_eq!(ours.len(), theirs.len());
    for ((from, mad), t) in ours.iter().zip(&theirs) {
        assert_eq!(*from, t.src, "frame {}: sent by the same side", t.frame);
        assert_eq!(
            with_ids_of(*mad, &t.mad).to_bytes(),
            t.mad.to_bytes(),
            "frame {}: {:?}",
            t.frame,
            t.mad.message.attr_id()
        );
    }
}
