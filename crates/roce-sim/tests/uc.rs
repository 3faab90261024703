//! Randomised UC traffic through the simulated network. UC has no ACKs and no
//! retransmission: a message that loses a packet is dropped whole. Every
//! receive that completes carries one sent message, whole, once and in order
//! (old, duplicated or reordered packets are dropped);
//! WRITE targets hold only bytes of the old or the new contents; nothing is
//! lost on a lossless network.

// Registering test-owned memory is the one unsafe step.
#![allow(unsafe_code)]

mod support;

use std::net::{IpAddr, Ipv4Addr};
use std::time::Duration;

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use roce_proto::mem::OwnedBuffer;
use roce_proto::verbs::{AccessFlags, QpAttrMask as M, QpState, QpType, SendFlags, WcStatus, WrOpcode};
use roce_proto::{AhAttr, Mtu, Payload, QpAttr, QpCap, QpInitAttr, RecvWr, SendWr, Sge};
use roce_sim::{Bound, FaultConfig, Sim, SimDevice};

#[derive(Clone, Copy, PartialEq)]
enum Kind {
    SendImm,
    Write,
    WriteImm,
}

struct Msg {
    kind: Kind,
    len: u32,
    a_off: usize,
    b_off: usize,
}

fn run(seed: u64, lossy: bool) -> Result<(usize, usize), String> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let addr = [IpAddr::V4(Ipv4Addr::new(10, 0, 2, 1)), IpAddr::V4(Ipv4Addr::new(10, 0, 2, 2))];
    let mtu = [Mtu::Mtu256, Mtu::Mtu1024, Mtu::Mtu4096][rng.random_range(0..3)];
    let faults = if lossy {
        FaultConfig::default()
            .with_drop(rng.random_range(0.0..0.2))
            .with_duplicate(rng.random_range(0.0..0.05))
            .with_reorder(rng.random_range(0.0..0.1))
            .with_corrupt(rng.random_range(0.0..0.02))
    } else {
        FaultConfig::default()
    }
    .with_delay(Duration::from_micros(20))
    .with_jitter(Duration::from_micros(10));
    let mut msgs = Vec::new();
    let (mut a_end, mut b_end) = (0, 0);
    for _ in 0..rng.random_range(1..=40) {
        let kind = [Kind::SendImm, Kind::Write, Kind::WriteImm][rng.random_range(0..3)];
        let len = rng.random_range(0..=20_000);
        msgs.push(Msg { kind, len, a_off: a_end, b_off: b_end });
        a_end += len as usize;
        b_end += len as usize;
    }
    let recv_len = 20_000usize;
    let nrecv = msgs.len();
    let recv_base = b_end;
    let mut mem = [OwnedBuffer::new(a_end + 8), OwnedBuffer::new(b_end + nrecv * recv_len + 8)];
    for m in mem.iter_mut() {
        let mut v = vec![0u8; m.len()];
        rng.fill(&mut v[..]);
        m.set(0, &v);
    }
    let before = mem[1].get(0, b_end);
    let mut sim: Sim<SimDevice> = Sim::new(seed, faults).map_err(|e| e.to_string())?;
    let mut ids = Vec::new();
    let (mut key, mut cq, mut qpn) = ([0; 2], [roce_proto::CqHandle::from(0); 2], [0; 2]);
    let psn: [u32; 2] = [rng.random_range(0..1 << 24), rng.random_range(0..1 << 24)];
    for side in 0..2 {
        let mut d = support::device(addr[side], seed + side as u64, mtu);
        let pd = d.alloc_pd().unwrap();
        // SAFETY: `mem` outlives `sim`, which is dropped first below.
        let region = unsafe { mem[side].region() };
        key[side] =
            d.reg_mr(pd, mem[side].addr(), region, AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE).unwrap();
        cq[side] = d.create_cq(2 * nrecv as u32 + 8).unwrap();
        qpn[side] = d
            .create_qp(QpInitAttr {
                qp_type: QpType::Uc,
                pd,
                send_cq: cq[side],
                recv_cq: cq[side],
                srq: None,
                cap: QpCap {
                    max_send_wr: 64,
                    max_recv_wr: nrecv as u32 + 1,
                    max_send_sge: 1,
                    max_recv_sge: 1,
                    max_inline_data: 0,
                },
                sq_sig_all: true,
                block_self_mcast_lb: false,
            })
            .unwrap()
            .get();
        ids.push(sim.add_endpoint(addr[side], SimDevice::new(d, addr[side])));
    }
    for side in 0..2 {
        let d = &mut sim.endpoint_mut(ids[side]).dev;
        let mut a = QpAttr { qp_state: QpState::Init, qp_access_flags: AccessFlags::REMOTE_WRITE, ..QpAttr::default() };
        d.modify_qp(qpn[side].into(), &a, M(M::STATE.0 | M::PKEY_INDEX.0 | M::PORT.0 | M::ACCESS_FLAGS.0)).unwrap();
        a.qp_state = QpState::Rtr;
        a.path_mtu = mtu;
        a.dest_qp_num = qpn[1 - side].into();
        a.rq_psn = roce_proto::Psn::new(psn[1 - side]);
        a.ah_attr =
            AhAttr { dest: addr[1 - side], sgid_index: 0, hop_limit: 64, traffic_class: 0, sl: 0, flow_label: 0 };
        d.modify_qp(qpn[side].into(), &a, M(M::STATE.0 | M::AV.0 | M::PATH_MTU.0 | M::DEST_QPN.0 | M::RQ_PSN.0))
            .unwrap();
        a.qp_state = QpState::Rts;
        a.sq_psn = roce_proto::Psn::new(psn[side]);
        d.modify_qp(qpn[side].into(), &a, M(M::STATE.0 | M::SQ_PSN.0)).unwrap();
    }
    for r in 0..nrecv {
        let sge =
            [Sge { addr: mem[1].addr() + (recv_base + r * recv_len) as u64, length: recv_len as u32, lkey: key[1] }];
        sim.endpoint_mut(ids[1]).dev.post_recv(qpn[1].into(), &RecvWr { wr_id: r as u64, sg_list: &sge }).unwrap();
    }
    for (k, m) in msgs.iter().enumerate() {
        let sge = [Sge { addr: mem[0].addr() + m.a_off as u64, length: m.len, lkey: key[0] }];
        let op = match m.kind {
            Kind::SendImm => WrOpcode::SendWithImm,
            Kind::Write => WrOpcode::RdmaWrite,
            Kind::WriteImm => WrOpcode::RdmaWriteWithImm,
        };
        let mut wr = SendWr::new(k as u64, op, SendFlags::SIGNALED, Payload::Sges(&sge));
        wr.imm_data = k as u32;
        wr.remote_addr = mem[1].addr() + m.b_off as u64;
        wr.rkey = key[1];
        sim.endpoint_mut(ids[0]).dev.post_send(qpn[0].into(), &wr).unwrap();
    }
    sim.run_until_idle(Bound::new(1_000_000, Duration::from_secs(10))).map_err(|e| e.to_string())?;
    let got = [support::drain_cq(&mut sim, ids[0], cq[0]), support::drain_cq(&mut sim, ids[1], cq[1])];
    drop(sim);
    let sends: Vec<u64> = got[0].iter().filter(|w| w.status == WcStatus::Success).map(|w| w.wr_id).collect();
    if sends != (0..msgs.len() as u64).collect::<Vec<_>>() {
        return Err(format!("seed {seed}: send completions {sends:?}"));
    }
    // Receives: in posting order, each a distinct message, in message order.
    let mut last = None;
    for (r, w) in got[1].iter().enumerate() {
        let k = w.imm_data as usize;
        let m = msgs.get(k).ok_or(format!("seed {seed}: unknown immediate {k}"))?;
        if w.wr_id != r as u64 || w.status != WcStatus::Success || w.byte_len != m.len || last.is_some_and(|l| l >= k) {
            return Err(format!("seed {seed}: receive {r} (message len {}, previous {last:?}): {w:?}", m.len));
        }
        last = Some(k);
        let landed = match m.kind {
            Kind::SendImm => mem[1].get(recv_base + r * recv_len, m.len as usize),
            _ => mem[1].get(m.b_off, m.len as usize),
        };
        if landed != mem[0].get(m.a_off, m.len as usize) {
            return Err(format!("seed {seed}: message {k} delivered with the wrong bytes"));
        }
    }
    // WRITE targets hold old or new bytes only; lossless runs deliver everything.
    let after = mem[1].get(0, b_end);
    for m in &msgs {
        let new = mem[0].get(m.a_off, m.len as usize);
        for i in 0..m.len as usize {
            let (o, n, a) = (before[m.b_off + i], new[i], after[m.b_off + i]);
            if a != o && a != n {
                return Err(format!("seed {seed}: WRITE target byte {} is neither old nor new", m.b_off + i));
            }
            if !lossy && m.kind != Kind::SendImm && a != n {
                return Err(format!("seed {seed}: lossless WRITE not delivered"));
            }
        }
    }
    let want = msgs.iter().filter(|m| m.kind != Kind::Write).count();
    if !lossy && got[1].len() != want {
        return Err(format!("seed {seed}: {} of {want} receives on a lossless network", got[1].len()));
    }
    drop(mem);
    Ok((msgs.len(), got[1].len()))
}

#[test]
fn uc_messages_arrive_whole_in_order_or_not_at_all() {
    support::run_seeds("UC", "messages", 200, run);
}
