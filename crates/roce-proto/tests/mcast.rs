//! UD multicast in the engine: a SEND to the multicast QPN and a group's
//! MGID reaches every QP attached to the group, and only those.

mod common;

use std::net::{IpAddr, Ipv4Addr};

use common::{A, B, Pair, Setup};
use roce_proto::mcast::{MULTICAST_QPN, mgid_of};
use roce_proto::verbs::{QpType, SendFlags, WcOpcode, WcStatus, WrOpcode};
use roce_proto::{AhAttr, Payload, RecvWr, SendWr, UdDest, VerbError, Wc};

const GROUP: Ipv4Addr = Ipv4Addr::new(239, 1, 2, 3);
const QKEY: u32 = 0x1111_1111;

/// Sends `len` bytes from A's buffer to the group; returns the datagram
/// the destination the engine chose for it and its UDP source port.
/// The Pair's own QP on A.
const A_QP: u32 = u32::MAX;

fn send_to_group(p: &mut Pair, qpn: u32, len: u32, qkey: u32) -> (Vec<u8>, IpAddr, u16) {
    send_to(p, IpAddr::V4(GROUP), qpn, len, qkey)
}

/// [`send_to_group`] with another destination.
fn send_to(p: &mut Pair, dest: IpAddr, qpn: u32, len: u32, qkey: u32) -> (Vec<u8>, IpAddr, u16) {
    let ah = p.dev[A]
        .create_ah(p.pd[A], AhAttr { dest, sgid_index: 0, hop_limit: 64, traffic_class: 0, sl: 0, flow_label: 0 })
        .unwrap();
    let sge = [p.sge(A, 0, len)];
    let mut wr = SendWr::new(9, WrOpcode::SendWithImm, SendFlags::SIGNALED, Payload::Sges(&sge));
    wr.imm_data = 0x5555_0001;
    wr.ud = Some(UdDest { ah, remote_qpn: MULTICAST_QPN.into(), remote_qkey: qkey });
    let qpn = if qpn == A_QP { p.qpn[A] } else { qpn };
    p.dev[A].post_send(qpn.into(), &wr).unwrap();
    let mut buf = vec![0u8; 9000];
    let t = p.dev[A].poll_transmit(p.now, &mut buf).expect("the SEND leaves");
    assert!(p.dev[A].poll_transmit(p.now, &mut buf).is_none(), "one datagram");
    (buf[..t.len].to_vec(), t.dst, t.src_port)
}

fn recv_on(p: &mut Pair, i: usize, qpn: u32, wr_id: u64, off: usize) {
    let sge = [p.sge(i, off, 40 + 1024)];
    p.dev[i].post_recv(qpn.into(), &RecvWr { wr_id, sg_list: &sge }).unwrap();
}

fn completions(p: &mut Pair, i: usize) -> Vec<Wc> {
    p.completions(i)
}

#[test]
fn a_send_to_a_group_reaches_every_attached_qp_and_only_those() {
    let mut p = Pair::new(Setup { qp_type: QpType::Ud, ..Setup::default() });
    let [_, b2] = p.add_pair(Setup { qp_type: QpType::Ud, ..Setup::default() });
    let [_, b3] = p.add_pair(Setup { qp_type: QpType::Ud, ..Setup::default() });
    let mgid = mgid_of(IpAddr::V4(GROUP));
    let b1 = p.qpn[B];
    p.dev[B].attach_mcast(b1.into(), mgid).unwrap();
    p.dev[B].attach_mcast(b2.into(), mgid).unwrap();
    // b3 is not attached.
    for (k, q) in [b1, b2, b3].into_iter().enumerate() {
        recv_on(&mut p, B, q, 100 + k as u64, 2048 * k);
    }
    let data = p.fill(A, 0, 300, 4);
    let (pkt, dst, sport) = send_to_group(&mut p, A_QP, 300, QKEY);
    assert_eq!(dst, IpAddr::V4(GROUP), "a multicast SEND goes to the group's address");
    let packet = roce_wire::Packet::new_checked(&pkt[..]).unwrap();
    assert_eq!(packet.bth().dest_qpn(), MULTICAST_QPN);
    p.dev[B].handle_datagram(p.now, p.addr[A], sport, dst, None, &pkt);
    let mut got: Vec<(u64, u32)> = completions(&mut p, B).iter().map(|w| (w.wr_id, w.qp_num.get())).collect();
    got.sort();
    assert_eq!(got, [(100, b1), (101, b2)], "each attached QP takes its own receive");
    for w in 0..2 {
        // Payload after the 40-byte GRH area, whose IPv4 destination is the group.
        assert_eq!(p.mem[B].get(2048 * w + 40, 300), data);
        assert_eq!(p.mem[B].get(2048 * w + 36, 4), GROUP.octets());
    }
    let a = completions(&mut p, A);
    assert_eq!((a.len(), a[0].status, a[0].opcode), (1, WcStatus::Success, WcOpcode::Send));

    // Detached, b2 gets no more; b1 still does.
    p.dev[B].detach_mcast(b2.into(), mgid).unwrap();
    assert_eq!(p.dev[B].detach_mcast(b2.into(), mgid), Err(VerbError::Invalid("QP not attached to the group")));
    recv_on(&mut p, B, b1, 200, 0);
    let (pkt, dst, sport) = send_to_group(&mut p, A_QP, 300, QKEY);
    p.dev[B].handle_datagram(p.now, p.addr[A], sport, dst, None, &pkt);
    let got: Vec<u64> = completions(&mut p, B).iter().map(|w| w.wr_id).collect();
    assert_eq!(got, [200]);
}

#[test]
fn multicast_packets_are_checked_like_any_ud_packet() {
    let mut p = Pair::new(Setup { qp_type: QpType::Ud, ..Setup::default() });
    let mgid = mgid_of(IpAddr::V4(GROUP));
    let b = p.qpn[B];
    p.dev[B].attach_mcast(b.into(), mgid).unwrap();
    recv_on(&mut p, B, b, 1, 0);
    // A wrong Q_Key: dropped as invalid.
    let (pkt, dst, sport) = send_to_group(&mut p, A_QP, 64, 0x2222_2222);
    let before = p.dev[B].counters().drop_invalid;
    p.dev[B].handle_datagram(p.now, p.addr[A], sport, dst, None, &pkt);
    assert_eq!(p.dev[B].counters().drop_invalid, before + 1);
    // To the multicast QPN at a unicast address, or at a group nobody
    // joined: no QP takes it, counted as for no QP.
    let before = p.dev[B].counters().drop_no_qp;
    for to in [p.addr[B], IpAddr::V4(Ipv4Addr::new(239, 9, 9, 9))] {
        let (pkt, dst, sport) = send_to(&mut p, to, A_QP, 64, QKEY);
        assert_eq!(dst, to);
        p.dev[B].handle_datagram(p.now, p.addr[A], sport, dst, None, &pkt);
    }
    assert_eq!(p.dev[B].counters().drop_no_qp, before + 2);
    assert!(completions(&mut p, B).is_empty());
    // The right one still arrives.
    let (pkt, dst, sport) = send_to_group(&mut p, A_QP, 64, QKEY);
    p.dev[B].handle_datagram(p.now, p.addr[A], sport, dst, None, &pkt);
    assert_eq!(completions(&mut p, B).len(), 1);
}

#[test]
fn attach_rules_follow_the_kernel() {
    let mut p = Pair::new(Setup { qp_type: QpType::Ud, ..Setup::default() });
    let mut rc = Pair::new(Setup::default());
    let mgid = mgid_of(IpAddr::V4(GROUP));
    assert_eq!(
        rc.dev[A].attach_mcast(rc.qpn[A].into(), mgid),
        Err(VerbError::Invalid("only UD QPs join multicast groups"))
    );
    let unicast = mgid_of(IpAddr::V4(Ipv4Addr::new(10, 1, 1, 1)));
    assert_eq!(p.dev[B].attach_mcast(p.qpn[B].into(), unicast), Err(VerbError::Invalid("not a multicast GID")));
    assert_eq!(p.dev[B].attach_mcast(0x99_9999.into(), mgid), Err(VerbError::UnknownHandle(0x99_9999)));
    p.dev[B].attach_mcast(p.qpn[B].into(), mgid).unwrap();
    assert_eq!(p.dev[B].mcast_groups_of(p.qpn[B].into()), [mgid]);
    // Attached, it cannot be destroyed (the kernel's EBUSY); detached, it can.
    assert_eq!(p.dev[B].destroy_qp(p.qpn[B].into()), Err(VerbError::Busy));
    p.dev[B].detach_mcast(p.qpn[B].into(), mgid).unwrap();
    assert!(!p.dev[B].has_mcast_group(&mgid));
    p.dev[B].destroy_qp(p.qpn[B].into()).unwrap();
}

#[test]
fn a_qp_that_blocks_self_loopback_misses_only_its_own_packets() {
    let mut p = Pair::new(Setup { qp_type: QpType::Ud, ..Setup::default() });
    let mgid = mgid_of(IpAddr::V4(GROUP));
    // On A: the sender, attached, with the block flag; a second QP, attached, without.
    let mut init = roce_proto::QpInitAttr {
        qp_type: QpType::Ud,
        pd: p.pd[A],
        send_cq: p.cq[A],
        recv_cq: p.cq[A],
        srq: None,
        cap: roce_proto::QpCap {
            max_send_wr: 16,
            max_recv_wr: 16,
            max_send_sge: 1,
            max_recv_sge: 1,
            max_inline_data: 0,
        },
        sq_sig_all: false,
        block_self_mcast_lb: true,
    };
    let sender = p.dev[A].create_qp(init).unwrap().get();
    init.block_self_mcast_lb = false;
    let other = p.dev[A].create_qp(init).unwrap().get();
    for q in [sender, other] {
        let a = roce_proto::QpAttr { qkey: QKEY, ..roce_proto::QpAttr::default() };
        for (from, to) in [
            (roce_proto::verbs::QpState::Reset, roce_proto::verbs::QpState::Init),
            (roce_proto::verbs::QpState::Init, roce_proto::verbs::QpState::Rtr),
            (roce_proto::verbs::QpState::Rtr, roce_proto::verbs::QpState::Rts),
        ] {
            let m = roce_proto::qp_state::required_mask(from, to, QpType::Ud).unwrap();
            p.dev[A].modify_qp(q.into(), &roce_proto::QpAttr { qp_state: to, ..a }, m).unwrap();
        }
        p.dev[A].attach_mcast(q.into(), mgid).unwrap();
        recv_on(&mut p, A, q, u64::from(q), 4096 + 2048 * (q == other) as usize);
    }
    let (pkt, dst, sport) = send_to_group(&mut p, sender, 64, QKEY);
    // The loopback copy (IP multicast loops back to the sending host).
    p.dev[A].handle_datagram(p.now, p.addr[A], sport, dst, None, &pkt);
    let recvs: Vec<u32> =
        completions(&mut p, A).iter().filter(|w| w.opcode == WcOpcode::Recv).map(|w| w.qp_num.get()).collect();
    assert_eq!(recvs, [other]);
}
