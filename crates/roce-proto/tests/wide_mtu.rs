//! softroce's wide MTU: two ends that both set it cut messages into packets
//! of that payload (READ responses too) and check them against it; an end
//! without it refuses them as IBTA's length rule says, and a device gives
//! one only to an RC or UC QP, no larger than its link carries.

mod common;

use common::{A, B, Pair, Setup};
use roce_proto::qp_state::required_mask;
use roce_proto::verbs::{QpAttrMask, QpState, QpType, WcOpcode, WcStatus, WrOpcode};
use roce_proto::{Device, DeviceConfig, Limits, Mtu, QpAttr, QpCap, QpInitAttr, Qpn, VerbError, WideMtu};
use roce_wire::Opcode;

/// A 1500-byte link's wide MTU over IPv4.
const WIDE: usize = 1436;

fn wide_pair() -> Pair {
    let w = WideMtu::new(WIDE);
    Pair::new(Setup { wide_mtu: [w, w], ..Setup::default() })
}

/// The payload lengths of `from`'s packets in the log, with their opcodes.
fn lengths(p: &Pair, from: usize) -> Vec<(Opcode, usize)> {
    p.log.iter().filter(|k| k.from == from).map(|k| (k.opcode(), k.packet().payload().len())).collect()
}

#[test]
fn a_write_a_read_and_a_send_move_wide_packets_whole() {
    let mut p = wide_pair();
    let len = 6 * WIDE + 1000;
    let data = p.fill(A, 0, len, 3);
    p.send(A, 1, WrOpcode::RdmaWrite, 0, len as u32, 65536);
    p.run(|_| true);
    assert_eq!(p.mem[B].get(65536, len), data);
    let want: Vec<(Opcode, usize)> = std::iter::once((Opcode::RC_RDMA_WRITE_FIRST, WIDE))
        .chain(std::iter::repeat_n((Opcode::RC_RDMA_WRITE_MIDDLE, WIDE), 5))
        .chain(std::iter::once((Opcode::RC_RDMA_WRITE_LAST, 1000)))
        .collect();
    assert_eq!(lengths(&p, A), want, "seven packets where IBTA's 1024 would need ten");

    // A READ's responses are cut by the responder's wide MTU and checked
    // against the requester's.
    p.log.clear();
    let back = p.fill(B, 200_000, len, 9);
    p.send(A, 2, WrOpcode::RdmaRead, 300_000, len as u32, 200_000);
    p.run(|_| true);
    assert_eq!(p.mem[A].get(300_000, len), back);
    let responses = lengths(&p, B);
    assert_eq!(responses.len(), 7);
    assert!(responses[..6].iter().all(|&(_, n)| n == WIDE), "{responses:?}");
    assert_eq!(responses[6], (Opcode::RC_RDMA_READ_RESPONSE_LAST, 1000));

    p.log.clear();
    p.recv(B, 7, 400_000, 3 * WIDE as u32);
    let sent = p.fill(A, 500_000, 2 * WIDE + 4, 5);
    p.send(A, 3, WrOpcode::Send, 500_000, (2 * WIDE + 4) as u32, 0);
    p.run(|_| true);
    assert_eq!(p.mem[B].get(400_000, 2 * WIDE + 4), sent);
    let a: Vec<_> = p.completions(A).iter().map(|w| (w.wr_id, w.status)).collect();
    assert_eq!(a, [(1, WcStatus::Success), (2, WcStatus::Success), (3, WcStatus::Success)]);
    let b = p.completions(B);
    assert_eq!(
        (b[0].wr_id, b[0].status, b[0].opcode, b[0].byte_len),
        (7, WcStatus::Success, WcOpcode::Recv, 2 * 1436 + 4)
    );
    assert_eq!(p.dev[B].counters().drop_malformed + p.dev[A].counters().drop_malformed, 0);
}

#[test]
fn an_end_without_the_wide_mtu_refuses_its_packets_as_ibta_says() {
    // B has IBTA's 1024 (as a kernel rxe or a NIC would): A's 1436-byte
    // FIRST packet breaks the length rule and is dropped, counted, and
    // nothing of the message is placed.
    let mut p = Pair::new(Setup { wide_mtu: [WideMtu::new(WIDE), None], retry_cnt: 1, ..Setup::default() });
    let len = 3 * WIDE;
    p.fill(A, 0, len, 1);
    p.send(A, 1, WrOpcode::RdmaWrite, 0, len as u32, 65536);
    p.run(|_| true);
    assert_eq!(p.mem[B].get(65536, len), vec![0; len]);
    let c = p.dev[B].counters();
    assert!(c.drop_malformed >= 3, "every wide packet is refused: {c:?}");
    assert_eq!(c.rcvd_pkts, 0);
    let a = p.completions(A);
    assert_eq!((a.len(), a[0].status), (1, WcStatus::RetryExcErr), "the requester sees what a dead path gives");
}

/// A device whose link carries `max` as its widest MTU, with a QP of `ty`
/// in INIT.
fn device_with_qp(max: Option<WideMtu>, ty: QpType) -> (Device, Qpn) {
    let mut dev = Device::new(DeviceConfig {
        gids: vec!["10.0.0.9".parse().unwrap()],
        seed: 1,
        icrc_policy: roce_wire::IcrcPolicy::Full,
        active_mtu: Mtu::Mtu1024,
        limits: Limits { max_wide_mtu: max, ..Limits::default() },
        udp_src_port: None,
    });
    let cq = dev.create_cq(4).unwrap();
    let pd = dev.alloc_pd().unwrap();
    let cap = QpCap { max_send_wr: 4, max_recv_wr: 4, max_send_sge: 1, max_recv_sge: 1, max_inline_data: 0 };
    let init = QpInitAttr {
        qp_type: ty,
        pd,
        send_cq: cq,
        recv_cq: cq,
        srq: None,
        cap,
        sq_sig_all: false,
        block_self_mcast_lb: false,
    };
    let qp = dev.create_qp(init).unwrap();
    let a = QpAttr { qp_state: QpState::Init, qkey: 1, ..QpAttr::default() };
    dev.modify_qp(qp, &a, required_mask(QpState::Reset, QpState::Init, ty).unwrap()).unwrap();
    (dev, qp)
}

#[test]
fn a_device_gives_a_wide_mtu_only_within_its_link_and_to_rc_or_uc() {
    let link_1500 = WideMtu::for_link_mtu(1500, false);
    let rtr = QpAttr { qp_state: QpState::Rtr, path_mtu: Mtu::Mtu1024, ..QpAttr::default() };
    let mask = required_mask(QpState::Init, QpState::Rtr, QpType::Rc).unwrap();
    let with = |w: usize| QpAttr { wide_mtu: WideMtu::new(w), ..rtr };

    let (mut dev, qp) = device_with_qp(link_1500, QpType::Rc);
    assert!(matches!(dev.modify_qp(qp, &with(1440), mask), Err(VerbError::Invalid(_))), "1440 > a 1500 link's 1436");
    assert_eq!(dev.modify_qp(qp, &with(WIDE), mask), Ok(()));

    // A device that offers none (the default: IBTA's MTUs only) refuses any.
    assert_eq!(Limits::default().max_wide_mtu, None);
    let (mut dev, qp) = device_with_qp(None, QpType::Rc);
    assert!(matches!(dev.modify_qp(qp, &with(512), mask), Err(VerbError::Invalid(_))));

    // UC takes one; UD, whose datagrams are one packet, does not.
    let (mut dev, qp) = device_with_qp(link_1500, QpType::Uc);
    let uc = required_mask(QpState::Init, QpState::Rtr, QpType::Uc).unwrap();
    assert_eq!(dev.modify_qp(qp, &with(WIDE), uc), Ok(()));
    let (mut dev, qp) = device_with_qp(link_1500, QpType::Ud);
    let ud = QpAttrMask::STATE | QpAttrMask::PATH_MTU;
    assert!(matches!(dev.modify_qp(qp, &with(WIDE), ud), Err(VerbError::Invalid(_))));
}
