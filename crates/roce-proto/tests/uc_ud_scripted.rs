//! Scripted UC and UD scenarios, and QP lifecycle effects on queues.

mod common;

use std::net::Ipv4Addr;

use common::{A, B, Pair, Setup};
use roce_proto::testing::QpProbe;
use roce_proto::verbs::{QpAttrMask, QpState, QpType, SendFlags, WcOpcode, WcStatus, WrOpcode};
use roce_proto::{AhAttr, Payload, QpAttr, SendWr, UdDest, WcFlags};
use roce_wire::Opcode;

fn ud_send(p: &mut Pair, wr_id: u64, off: usize, len: u32, qkey: u32) {
    let ah = p.dev[A]
        .create_ah(
            p.pd[A],
            AhAttr { dest: p.addr[B], sgid_index: 0, hop_limit: 64, traffic_class: 0, sl: 0, flow_label: 0 },
        )
        .unwrap();
    let sge = [p.sge(A, off, len)];
    let mut wr = SendWr::new(wr_id, WrOpcode::SendWithImm, SendFlags::SIGNALED, Payload::Sges(&sge));
    wr.imm_data = 0xabcd_0001;
    wr.ud = Some(UdDest { ah, remote_qpn: p.qpn[B].into(), remote_qkey: qkey });
    p.dev[A].post_send(p.qpn[A].into(), &wr).unwrap();
}

#[test]
fn ud_receive_has_the_grh_area_and_source_qp() {
    let mut p = Pair::new(Setup { qp_type: QpType::Ud, ..Setup::default() });
    let data = p.fill(A, 0, 512, 2);
    p.recv(B, 3, 1000, 40 + 512);
    ud_send(&mut p, 1, 0, 512, 0x1111_1111);
    let pkts = p.transmit();
    assert_eq!(pkts.len(), 1);
    assert_eq!(pkts[0].opcode(), Opcode::UD_SEND_ONLY_WITH_IMMEDIATE);
    let pk = pkts[0].packet();
    let deth = pk.deth().unwrap();
    assert_eq!((deth.qkey(), deth.src_qpn()), (0x1111_1111, p.qpn[A]));
    assert!(!pkts[0].packet().bth().ack_req());
    p.deliver(&pkts[0]);
    let a = p.completions(A);
    assert_eq!((a[0].wr_id, a[0].status), (1, WcStatus::Success), "UD completes once sent");
    let b = p.completions(B);
    assert_eq!(b.len(), 1);
    let w = b[0];
    assert_eq!(
        (w.wr_id, w.status, w.opcode, w.byte_len, w.src_qp.get()),
        (3, WcStatus::Success, WcOpcode::Recv, 552, p.qpn[A])
    );
    assert!(w.wc_flags.contains(WcFlags::GRH) && w.wc_flags.contains(WcFlags::WITH_IMM));
    assert_eq!(w.imm_data, 0xabcd_0001);
    assert_eq!(w.sl, roce_proto::testing::ROCE_L3_IPV4, "mlx5's network header type for IPv4");
    // Data at offset 40; the IPv4 header of the packet in bytes 20..40.
    assert_eq!(p.mem[B].get(1040, 512), data);
    let grh = p.mem[B].get(1000, 40);
    assert_eq!(grh[20] >> 4, 4);
    assert_eq!(&grh[32..36], &Ipv4Addr::new(10, 0, 0, 1).octets());
    assert_eq!(&grh[36..40], &Ipv4Addr::new(10, 0, 0, 2).octets());
}

#[test]
fn ud_wrong_qkey_is_dropped_and_counted() {
    let mut p = Pair::new(Setup { qp_type: QpType::Ud, ..Setup::default() });
    p.recv(B, 3, 0, 1024);
    ud_send(&mut p, 1, 0, 64, 0x2222_2222);
    p.run(|_| true);
    assert!(p.completions(B).is_empty());
    assert_eq!(p.dev[B].counters().drop_invalid, 1);
}

#[test]
fn ud_message_larger_than_mtu_is_refused_at_post() {
    let mut p = Pair::new(Setup { qp_type: QpType::Ud, ..Setup::default() });
    let ah = p.dev[A]
        .create_ah(
            p.pd[A],
            AhAttr { dest: p.addr[B], sgid_index: 0, hop_limit: 64, traffic_class: 0, sl: 0, flow_label: 0 },
        )
        .unwrap();
    let sge = [p.sge(A, 0, 1025)];
    let mut wr = SendWr::new(1, WrOpcode::Send, SendFlags::SIGNALED, Payload::Sges(&sge));
    wr.ud = Some(UdDest { ah, remote_qpn: p.qpn[B].into(), remote_qkey: 1 });
    assert!(p.dev[A].post_send(p.qpn[A].into(), &wr).is_err());
    let mut rd = SendWr::new(2, WrOpcode::RdmaRead, SendFlags::SIGNALED, Payload::Sges(&sge[..0]));
    rd.ud = wr.ud;
    assert!(p.dev[A].post_send(p.qpn[A].into(), &rd).is_err(), "UD has no RDMA READ");
}

#[test]
fn uc_lost_packet_drops_the_message_silently() {
    let mut p = Pair::new(Setup { qp_type: QpType::Uc, ..Setup::default() });
    p.fill(A, 0, 3000, 1);
    let second = p.fill(A, 10_000, 100, 7);
    p.recv(B, 1, 0, 4096);
    p.recv(B, 2, 0, 4096);
    p.send(A, 10, WrOpcode::Send, 0, 3000, 0);
    p.send(A, 11, WrOpcode::Send, 10_000, 100, 0);
    let pkts = p.transmit();
    assert_eq!(
        pkts.iter().map(|k| k.opcode()).collect::<Vec<_>>(),
        [Opcode::UC_SEND_FIRST, Opcode::UC_SEND_MIDDLE, Opcode::UC_SEND_LAST, Opcode::UC_SEND_ONLY]
    );
    for (i, k) in pkts.iter().enumerate() {
        if i != 1 {
            p.deliver(k);
        }
    }
    assert!(p.transmit().is_empty(), "UC never acknowledges");
    let a = p.completions(A);
    assert_eq!(
        a.iter().map(|w| (w.wr_id, w.status)).collect::<Vec<_>>(),
        [(10, WcStatus::Success), (11, WcStatus::Success)]
    );
    let b = p.completions(B);
    assert_eq!(b.len(), 1, "the broken message leaves no completion");
    assert_eq!((b[0].wr_id, b[0].byte_len), (1, 100));
    assert_eq!(p.mem[B].get(0, 100), second);
}

#[test]
fn uc_rejects_read_and_atomics_at_post() {
    let mut p = Pair::new(Setup { qp_type: QpType::Uc, ..Setup::default() });
    let sge = [p.sge(A, 0, 8)];
    for op in [WrOpcode::RdmaRead, WrOpcode::AtomicCmpAndSwp, WrOpcode::AtomicFetchAndAdd] {
        let wr = SendWr::new(1, op, SendFlags::SIGNALED, Payload::Sges(&sge));
        assert!(p.dev[A].post_send(p.qpn[A].into(), &wr).is_err(), "{op:?}");
    }
}

#[test]
fn modify_to_err_flushes_everything_and_later_posts() {
    let mut p = Pair::new(Setup::default());
    p.recv(B, 1, 0, 64);
    p.recv(B, 2, 64, 64);
    p.send(B, 3, WrOpcode::Send, 0, 8, 0);
    let unsignaled = [p.sge(B, 0, 8)];
    let wr = SendWr::new(4, WrOpcode::Send, SendFlags::EMPTY, Payload::Sges(&unsignaled));
    p.dev[B].post_send(p.qpn[B].into(), &wr).unwrap();
    let attr = QpAttr { qp_state: QpState::Err, ..QpAttr::default() };
    p.dev[B].modify_qp(p.qpn[B].into(), &attr, QpAttrMask::STATE).unwrap();
    let wcs = p.completions(B);
    let mut got: Vec<(u64, WcStatus, bool)> = wcs.iter().map(|w| (w.wr_id, w.status, w.opcode.is_recv())).collect();
    got.sort_by_key(|g| g.0);
    assert_eq!(
        got,
        [
            (1, WcStatus::WrFlushErr, true),
            (2, WcStatus::WrFlushErr, true),
            (3, WcStatus::WrFlushErr, false),
            (4, WcStatus::WrFlushErr, false),
        ],
        "flushes complete unsignaled WRs too"
    );
    p.recv(B, 5, 0, 8);
    let after = p.completions(B);
    assert_eq!((after[0].wr_id, after[0].status), (5, WcStatus::WrFlushErr));
    assert!(p.transmit().is_empty(), "nothing leaves a QP in ERR");
}

#[test]
fn reset_empties_the_queues() {
    let mut p = Pair::new(Setup::default());
    p.recv(B, 1, 0, 64);
    p.send(B, 3, WrOpcode::Send, 0, 8, 0);
    let attr = QpAttr { qp_state: QpState::Reset, ..QpAttr::default() };
    p.dev[B].modify_qp(p.qpn[B].into(), &attr, QpAttrMask::STATE).unwrap();
    assert!(p.completions(B).is_empty(), "RESET discards without completions");
    let qp = p.dev[B].qp(p.qpn[B].into()).unwrap();
    assert_eq!(qp.state(), QpState::Reset);
    assert!(qp.queues_empty());
    assert!(
        p.dev[B]
            .post_send(p.qpn[B].into(), &SendWr::new(9, WrOpcode::Send, SendFlags::EMPTY, Payload::Inline(b"x")))
            .is_err()
    );
}

#[test]
fn the_qp_keeps_what_was_set_until_reset() {
    // ibv_query_qp reads the engine's attributes and the mask of those set.
    use roce_proto::qp_state::required_mask;
    let mut p = Pair::new(Setup::default());
    let q = p.qpn[B].into();
    let (set, held) = p.dev[B].qp(q).map(|qp| (qp.set, qp.attr)).unwrap();
    for m in [QpAttrMask::STATE, QpAttrMask::AV, QpAttrMask::PATH_MTU, QpAttrMask::DEST_QPN, QpAttrMask::SQ_PSN] {
        assert!(set.contains(m), "{set:?} lacks {m:?}");
    }
    assert!(!set.contains(QpAttrMask::EN_SQD_ASYNC_NOTIFY));
    assert_eq!(held.dest_qp_num.get(), p.qpn[A]);
    let reset = QpAttr { qp_state: QpState::Reset, ..QpAttr::default() };
    p.dev[B].modify_qp(q, &reset, QpAttrMask::STATE).unwrap();
    let qp = p.dev[B].qp(q).unwrap();
    assert_eq!((qp.set, qp.attr), (QpAttrMask::EMPTY, QpAttr::default()), "RESET forgets the attributes");
    // What RoCE does not use is kept with the path it came with.
    let lid_path = roce_proto::IbPath { is_global: false, dlid: 7, static_rate: 3, src_path_bits: 1, port_num: 1 };
    let mut a = QpAttr { qp_state: QpState::Init, ..held };
    p.dev[B].modify_qp(q, &a, required_mask(QpState::Reset, QpState::Init, QpType::Rc).unwrap()).unwrap();
    a.qp_state = QpState::Rtr;
    a.ib_path = lid_path;
    p.dev[B].modify_qp(q, &a, required_mask(QpState::Init, QpState::Rtr, QpType::Rc).unwrap()).unwrap();
    let qp = p.dev[B].qp(q).unwrap();
    assert_eq!(qp.attr.ib_path, lid_path);
    assert!(qp.set.contains(QpAttrMask::AV));
}

#[test]
fn cq_overrun_raises_cq_err_and_moves_the_qp_to_err() {
    // (3 entries: rxe's CQ sizes are 2^k - 1.)
    let mut p = Pair::new(Setup { cqe: 3, ..Setup::default() });
    for i in 0..4 {
        p.recv(B, i, 0, 64);
    }
    for i in 0..4 {
        p.send(A, 10 + i, WrOpcode::Send, 0, 8, 0);
    }
    p.run(|_| true);
    let mut events = Vec::new();
    while let Some(e) = p.dev[B].poll_event() {
        events.push(e);
    }
    assert!(events.contains(&roce_proto::AsyncEvent::CqErr(p.cq[B])), "{events:?}");
    assert_eq!(p.dev[B].qp(p.qpn[B].into()).unwrap().state(), QpState::Err);
    assert_eq!(p.completions(B).len(), 3, "what fitted stays readable");
}
