//! Randomised UD traffic through the simulated network: every datagram that
//! arrives is whole, correct and attributed to its sender; without loss every
//! one arrives; UD never acknowledges or retransmits.

// Registering test-owned memory is the one unsafe step.
#![allow(unsafe_code)]

mod support;

use std::collections::HashMap;
use std::net::{IpAddr, Ipv4Addr};
use std::time::Duration;

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use roce_proto::mem::OwnedBuffer;
use roce_proto::verbs::{AccessFlags, QpAttrMask as M, QpState, QpType, SendFlags, WcOpcode, WcStatus, WrOpcode};
use roce_proto::{AhAttr, Mtu, Payload, QpAttr, QpCap, QpInitAttr, RecvWr, SendWr, Sge, UdDest, WcFlags};
use roce_sim::{Bound, FaultConfig, Sim, SimDevice};

const QKEY: u32 = 0x1111_1111;

struct Msg {
    qp: usize,
    len: u32,
    off: usize,
}

fn run(seed: u64, lossy: bool) -> Result<(usize, usize), String> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let addr = [IpAddr::V4(Ipv4Addr::new(10, 0, 1, 1)), IpAddr::V4(Ipv4Addr::new(10, 0, 1, 2))];
    let mtu = [Mtu::Mtu256, Mtu::Mtu1024, Mtu::Mtu4096][rng.random_range(0..3)];
    let faults = if lossy {
        FaultConfig::default()
            .with_drop(rng.random_range(0.0..0.2))
            .with_duplicate(rng.random_range(0.0..0.05))
            .with_reorder(rng.random_range(0.0..0.1))
            .with_corrupt(rng.random_range(0.0..0.02))
    } else {
        FaultConfig::default().with_reorder(rng.random_range(0.0..0.1))
    }
    .with_delay(Duration::from_micros(20))
    .with_jitter(Duration::from_micros(10));
    let nqp = rng.random_range(1..=8usize);
    let mut msgs = Vec::new();
    let mut a_end = 0;
    for _ in 0..rng.random_range(1..=60) {
        let len = rng.random_range(0..=mtu.bytes() as u32);
        msgs.push(Msg { qp: rng.random_range(0..nqp), len, off: a_end });
        a_end += len as usize;
    }
    // Each receive buffer holds the GRH and a full MTU; two per message
    // leave room for duplicates.
    let slot = 40 + mtu.bytes();
    let nrecv = 2 * msgs.len();
    let mut mem = [OwnedBuffer::new(a_end + 8), OwnedBuffer::new(nrecv * slot)];
    let mut v = vec![0u8; mem[0].len()];
    rng.fill(&mut v[..]);
    mem[0].set(0, &v);
    let mut sim: Sim<SimDevice> = Sim::new(seed, faults).map_err(|e| e.to_string())?;
    let mut ids = Vec::new();
    let mut qpn = vec![[0u32; 2]; nqp];
    let (mut key, mut cq, mut pd) = ([0; 2], [roce_proto::CqHandle::from(0); 2], [roce_proto::PdHandle::from(0); 2]);
    for side in 0..2 {
        let mut d = support::device(addr[side], seed + side as u64, mtu);
        pd[side] = d.alloc_pd().unwrap();
        // SAFETY: `mem` outlives `sim` (dropped at the end of this function, sim first).
        let region = unsafe { mem[side].region() };
        key[side] = d.reg_mr(pd[side], mem[side].addr(), region, AccessFlags::LOCAL_WRITE).unwrap();
        cq[side] = d.create_cq(2 * nrecv as u32 + 8).unwrap();
        for q in qpn.iter_mut() {
            q[side] = d
                .create_qp(QpInitAttr {
                    qp_type: QpType::Ud,
                    pd: pd[side],
                    send_cq: cq[side],
                    recv_cq: cq[side],
                    srq: None,
                    cap: QpCap {
                        max_send_wr: 64,
                        max_recv_wr: nrecv as u32,
                        max_send_sge: 1,
                        max_recv_sge: 1,
                        max_inline_data: 0,
                    },
                    sq_sig_all: true,
                    block_self_mcast_lb: false,
                })
                .unwrap()
                .get();
            let mut a = QpAttr { qp_state: QpState::Init, qkey: QKEY, ..QpAttr::default() };
            d.modify_qp(q[side].into(), &a, M(M::STATE.0 | M::PKEY_INDEX.0 | M::PORT.0 | M::QKEY.0)).unwrap();
            a.qp_state = QpState::Rtr;
            d.modify_qp(q[side].into(), &a, M::STATE).unwrap();
            a.qp_state = QpState::Rts;
            a.sq_psn = roce_proto::Psn::new(rng.random_range(0..1 << 24));
            d.modify_qp(q[side].into(), &a, M(M::STATE.0 | M::SQ_PSN.0)).unwrap();
        }
        ids.push(sim.add_endpoint(addr[side], SimDevice::new(d, addr[side])));
    }
    // Receives: spread over the QPs, each message's QP gets two.
    let mut recv_of: HashMap<u64, usize> = HashMap::new();
    for (k, m) in msgs.iter().enumerate() {
        for copy in 0..2 {
            let r = 2 * k + copy;
            let sge = [Sge { addr: mem[1].addr() + (r * slot) as u64, length: slot as u32, lkey: key[1] }];
            sim.endpoint_mut(ids[1])
                .dev
                .post_recv(qpn[m.qp][1].into(), &RecvWr { wr_id: r as u64, sg_list: &sge })
                .unwrap();
            recv_of.insert(r as u64, r);
        }
    }
    let ah = sim
        .endpoint_mut(ids[0])
        .dev
        .create_ah(
            pd[0],
            AhAttr { dest: addr[1], sgid_index: 0, hop_limit: 64, traffic_class: 0, sl: 0, flow_label: 0 },
        )
        .unwrap();
    for (k, m) in msgs.iter().enumerate() {
        let sge = [Sge { addr: mem[0].addr() + m.off as u64, length: m.len, lkey: key[0] }];
        let mut wr = SendWr::new(k as u64, WrOpcode::SendWithImm, SendFlags::SIGNALED, Payload::Sges(&sge));
        wr.imm_data = k as u32;
        wr.ud = Some(UdDest { ah, remote_qpn: qpn[m.qp][1].into(), remote_qkey: QKEY });
        sim.endpoint_mut(ids[0]).dev.post_send(qpn[m.qp][0].into(), &wr).unwrap();
    }
    sim.run_until_idle(Bound::new(1_000_000, Duration::from_secs(10))).map_err(|e| e.to_string())?;
    let got = [support::drain_cq(&mut sim, ids[0], cq[0]), support::drain_cq(&mut sim, ids[1], cq[1])];
    // Every send completes successfully, once, in order per QP.
    if got[0].len() != msgs.len() || got[0].iter().any(|w| w.status != WcStatus::Success) {
        return Err(format!("seed {seed}: send completions {:?}", got[0].len()));
    }
    let mut arrivals: HashMap<u32, usize> = HashMap::new();
    for w in &got[1] {
        let k = w.imm_data as usize;
        let m = msgs.get(k).ok_or(format!("seed {seed}: unknown immediate {k}"))?;
        let ok = w.status == WcStatus::Success
            && w.opcode == WcOpcode::Recv
            && w.byte_len == 40 + m.len
            && w.src_qp.get() == qpn[m.qp][0]
            && w.qp_num.get() == qpn[m.qp][1]
            && w.wc_flags.contains(WcFlags::GRH)
            && w.wc_flags.contains(WcFlags::WITH_IMM);
        if !ok {
            return Err(format!("seed {seed}: receive {w:?} for message {k}"));
        }
        let r = recv_of[&w.wr_id];
        if mem[1].get(r * slot + 40, m.len as usize) != mem[0].get(m.off, m.len as usize) {
            return Err(format!("seed {seed}: message {k} arrived corrupted"));
        }
        if mem[1].get(r * slot + 32, 4) != [10, 0, 1, 1] {
            return Err(format!("seed {seed}: GRH of message {k} lacks the source address"));
        }
        *arrivals.entry(w.imm_data).or_default() += 1;
    }
    let dups = sim.stats().duplicated as usize;
    if !lossy && arrivals.len() != msgs.len() {
        return Err(format!(
            "seed {seed}: {} of {} datagrams arrived on a lossless network",
            arrivals.len(),
            msgs.len()
        ));
    }
    if arrivals.values().sum::<usize>() > msgs.len() + dups {
        return Err(format!("seed {seed}: more arrivals than datagrams sent and duplicated"));
    }
    let counters = sim.endpoint(ids[0]).dev.counters();
    if counters.completer_retry_err != 0 {
        return Err(format!("seed {seed}: UD retransmitted"));
    }
    drop(sim);
    drop(mem);
    Ok((msgs.len(), got[1].len()))
}

#[test]
fn ud_datagrams_arrive_whole_or_not_at_all() {
    support::run_seeds("UD", "datagrams", 200, run);
}
