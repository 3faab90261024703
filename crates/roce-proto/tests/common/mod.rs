//! A two-device harness on explicit virtual time: every packet passes
//! through the test, which may inspect, drop, duplicate or reorder it.

#![allow(dead_code, unsafe_code)]

use std::net::{IpAddr, Ipv4Addr};
use std::time::{Duration, Instant};

use roce_proto::mem::OwnedBuffer;
use roce_proto::verbs::{AccessFlags, QpState, QpType, SendFlags, WrOpcode};
use roce_proto::*;
use roce_wire::{Opcode, Packet, Psn};

pub const A: usize = 0;
pub const B: usize = 1;

/// A packet on the wire.
#[derive(Debug, Clone)]
pub struct Pkt {
    pub from: usize,
    pub src_port: u16,
    pub bytes: Vec<u8>,
    pub at: Duration,
}

impl Pkt {
    pub fn packet(&self) -> Packet<&[u8]> {
        Packet::new_checked(&self.bytes[..]).expect("devices emit valid packets")
    }
    pub fn opcode(&self) -> Opcode {
        self.packet().bth().opcode()
    }
    pub fn psn(&self) -> Psn {
        self.packet().bth().psn()
    }
}

/// Settings of the connected QPs.
#[derive(Debug, Clone, Copy)]
pub struct Setup {
    pub qp_type: QpType,
    pub mtu: Mtu,
    pub timeout: u8,
    pub retry_cnt: u8,
    pub rnr_retry: u8,
    pub min_rnr_timer: u8,
    pub max_rd_atomic: u8,
    /// Both QPs' `max_dest_rd_atomic`.
    pub max_dest_rd_atomic: u8,
    pub sq_psn: [u32; 2],
    pub cqe: u32,
    pub sq_sig_all: bool,
    /// Give B's QP a shared receive queue (in `Pair::srq`).
    pub srq_on_b: bool,
    /// `DeviceConfig::udp_src_port` of both devices.
    pub udp_src_port: Option<u16>,
    /// Each QP's wide MTU (both devices take up to `WideMtu::MAX`).
    pub wide_mtu: [Option<WideMtu>; 2],
}

impl Default for Setup {
    fn default() -> Setup {
        Setup {
            qp_type: QpType::Rc,
            mtu: Mtu::Mtu1024,
            timeout: 14,
            retry_cnt: 7,
            rnr_retry: 7,
            min_rnr_timer: 12,
            max_rd_atomic: 16,
            max_dest_rd_atomic: 16,
            sq_psn: [0x1000, 0xff_fff0],
            cqe: 256,
            sq_sig_all: false,
            srq_on_b: false,
            udp_src_port: None,
            wide_mtu: [None; 2],
        }
    }
}

/// Two devices with one connected QP each and a registered buffer each.
pub struct Pair {
    // Devices first: they drop before the memory they point into.
    pub dev: [Device; 2],
    pub qpn: [u32; 2],
    pub cq: [CqHandle; 2],
    pub pd: [PdHandle; 2],
    pub key: [u32; 2],
    pub mem: [OwnedBuffer; 2],
    pub addr: [IpAddr; 2],
    pub srq: Option<SrqHandle>,
    pub t0: Instant,
    pub now: Instant,
    pub log: Vec<Pkt>,
    buf: Vec<u8>,
}

pub const MEM: usize = 1 << 20;

/// A test QP: one CQ for both queues, 256 WRs of 4 SGEs, 256 inline bytes.
fn qp_init(s: Setup, pd: PdHandle, cq: CqHandle, srq: Option<SrqHandle>) -> QpInitAttr {
    QpInitAttr {
        qp_type: s.qp_type,
        pd,
        send_cq: cq,
        recv_cq: cq,
        srq,
        cap: QpCap { max_send_wr: 256, max_recv_wr: 256, max_send_sge: 4, max_recv_sge: 4, max_inline_data: 256 },
        sq_sig_all: s.sq_sig_all,
        block_self_mcast_lb: false,
    }
}

impl Pair {
    pub fn new(s: Setup) -> Pair {
        let addr = [IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1)), IpAddr::V4(Ipv4Addr::new(10, 0, 0, 2))];
        let mk = |i: usize| {
            Device::new(DeviceConfig {
                gids: vec![addr[i]],
                seed: 7 + i as u64,
                icrc_policy: roce_wire::IcrcPolicy::Full,
                active_mtu: s.mtu,
                limits: Limits { max_wide_mtu: WideMtu::new(WideMtu::MAX), ..Limits::default() },
                udp_src_port: s.udp_src_port,
            })
        };
        let mut dev = [mk(0), mk(1)];
        let mem = [OwnedBuffer::new(MEM), OwnedBuffer::new(MEM)];
        let mut pd = [PdHandle::from(0); 2];
        let mut key = [0; 2];
        let mut cq = [CqHandle::from(0); 2];
        let mut qpn = [0; 2];
        let mut srq = None;
        let access = AccessFlags::LOCAL_WRITE
            | AccessFlags::REMOTE_WRITE
            | AccessFlags::REMOTE_READ
            | AccessFlags::REMOTE_ATOMIC
            | AccessFlags::MW_BIND;
        for i in 0..2 {
            pd[i] = dev[i].alloc_pd().unwrap();
            // SAFETY: the devices are declared before `mem` in Pair, so they
            // drop first.
            let region = unsafe { mem[i].region() };
            key[i] = dev[i].reg_mr(pd[i], mem[i].addr(), region, access).unwrap();
            cq[i] = dev[i].create_cq(s.cqe).unwrap();
            if i == B && s.srq_on_b {
                srq = Some(dev[i].create_srq(pd[i], 8, 2).unwrap());
            }
            qpn[i] = dev[i].create_qp(qp_init(s, pd[i], cq[i], if i == B { srq } else { None })).unwrap().get();
        }
        let mut p = Pair {
            dev,
            qpn,
            cq,
            pd,
            key,
            mem,
            addr,
            srq,
            t0: Instant::now(),
            now: Instant::now(),
            log: Vec::new(),
            buf: vec![0u8; 9000],
        };
        p.t0 = p.now;
        for i in 0..2 {
            p.connect(p.qpn, i, s);
        }
        p
    }

    /// Creates and connects one more QP on each device, on the same PD, CQ
    /// and (on B) SRQ; returns their numbers.
    pub fn add_pair(&mut self, s: Setup) -> [u32; 2] {
        let mut qpn = [0; 2];
        for (i, q) in qpn.iter_mut().enumerate() {
            let srq = if i == B { self.srq } else { None };
            *q = self.dev[i].create_qp(qp_init(s, self.pd[i], self.cq[i], srq)).unwrap().get();
        }
        for i in 0..2 {
            self.connect(qpn, i, s);
        }
        qpn
    }

    fn connect(&mut self, qpn: [u32; 2], i: usize, s: Setup) {
        let j = 1 - i;
        let mut a = QpAttr {
            qp_state: QpState::Init,
            qp_access_flags: AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_READ | AccessFlags::REMOTE_ATOMIC,
            pkey_index: 0,
            port_num: 1,
            qkey: 0x1111_1111,
            ..QpAttr::default()
        };
        let init = roce_proto::qp_state::required_mask(QpState::Reset, QpState::Init, s.qp_type).unwrap();
        self.dev[i].modify_qp(qpn[i].into(), &a, init).unwrap();
        a.qp_state = QpState::Rtr;
        a.path_mtu = s.mtu;
        a.wide_mtu = s.wide_mtu[i];
        a.dest_qp_num = qpn[j].into();
        a.rq_psn = Psn::new(s.sq_psn[j]);
        a.max_dest_rd_atomic = s.max_dest_rd_atomic;
        a.min_rnr_timer = s.min_rnr_timer;
        a.ah_attr = AhAttr { dest: self.addr[j], sgid_index: 0, hop_limit: 64, traffic_class: 0, sl: 0, flow_label: 0 };
        let rtr = roce_proto::qp_state::required_mask(QpState::Init, QpState::Rtr, s.qp_type).unwrap();
        self.dev[i].modify_qp(qpn[i].into(), &a, rtr).unwrap();
        a.qp_state = QpState::Rts;
        a.sq_psn = Psn::new(s.sq_psn[i]);
        a.timeout = s.timeout;
        a.retry_cnt = s.retry_cnt;
        a.rnr_retry = s.rnr_retry;
        a.max_rd_atomic = s.max_rd_atomic;
        let rts = roce_proto::qp_state::required_mask(QpState::Rtr, QpState::Rts, s.qp_type).unwrap();
        self.dev[i].modify_qp(qpn[i].into(), &a, rts).unwrap();
    }

    /// Virtual time since the start.
    pub fn elapsed(&self) -> Duration {
        self.now - self.t0
    }

    /// The address of byte `off` of device `i`'s buffer.
    pub fn va(&self, i: usize, off: usize) -> u64 {
        self.mem[i].addr() + off as u64
    }

    pub fn sge(&self, i: usize, off: usize, len: u32) -> Sge {
        Sge { addr: self.va(i, off), length: len, lkey: self.key[i] }
    }

    /// Posts a receive of `len` bytes at `off` on device `i`.
    pub fn recv(&mut self, i: usize, wr_id: u64, off: usize, len: u32) {
        let sge = [self.sge(i, off, len)];
        self.dev[i].post_recv(self.qpn[i].into(), &RecvWr { wr_id, sg_list: &sge }).unwrap();
    }

    /// Posts a signaled send WR of `op` from `off`/`len` on device `i`, to
    /// the peer's buffer at `remote_off`.
    pub fn send(&mut self, i: usize, wr_id: u64, op: WrOpcode, off: usize, len: u32, remote_off: usize) {
        self.send_flags(i, wr_id, op, off, len, remote_off, SendFlags::SIGNALED);
    }

    #[allow(clippy::too_many_arguments)]
    pub fn send_flags(
        &mut self,
        i: usize,
        wr_id: u64,
        op: WrOpcode,
        off: usize,
        len: u32,
        remote_off: usize,
        flags: SendFlags,
    ) {
        let sge = [self.sge(i, off, len)];
        let mut wr = SendWr::new(wr_id, op, flags, Payload::Sges(&sge));
        wr.remote_addr = self.va(1 - i, remote_off);
        wr.rkey = self.key[1 - i];
        wr.imm_data = 0x1122_3344;
        self.dev[i].post_send(self.qpn[i].into(), &wr).unwrap();
    }

    /// Everything the devices want to send now, in order.
    pub fn transmit(&mut self) -> Vec<Pkt> {
        let mut out = Vec::new();
        loop {
            let mut any = false;
            for i in 0..2 {
                if let Some(t) = self.dev[i].poll_transmit(self.now, &mut self.buf) {
                    assert_eq!(t.src, self.addr[i]);
                    assert_eq!(t.dst, self.addr[1 - i]);
                    let pkt =
                        Pkt { from: i, src_port: t.src_port, bytes: self.buf[..t.len].to_vec(), at: self.elapsed() };
                    self.log.push(pkt.clone());
                    out.push(pkt);
                    any = true;
                }
            }
            if !any {
                return out;
            }
        }
    }

    /// The bytes of `repr` with `payload` as A's QP sends them to B (its
    /// UDP source port, the ICRC over both addresses): for forged packets.
    pub fn emit_from_a(&self, repr: &roce_wire::PacketRepr, payload: &[u8]) -> Vec<u8> {
        let (IpAddr::V4(s), IpAddr::V4(d)) = (self.addr[A], self.addr[B]) else { unreachable!("IPv4 pair") };
        let src_port = self.dev[A].qp(self.qpn[A].into()).unwrap().src_port;
        let ctx = roce_wire::IcrcContext { ip: roce_wire::IpContext::v4_socket(s, d), src_port, dst_port: 4791 };
        let mut buf = vec![0u8; repr.packet_len(payload.len()).unwrap()];
        repr.emit(&mut buf, payload, &ctx).unwrap();
        buf
    }

    /// Hands `p` to its destination device.
    pub fn deliver(&mut self, p: &Pkt) {
        let to = 1 - p.from;
        self.dev[to].handle_datagram(self.now, self.addr[p.from], p.src_port, self.addr[to], None, &p.bytes);
    }

    /// Moves virtual time to the next timer and runs it; false if none.
    pub fn advance(&mut self) -> bool {
        let next = [self.dev[0].poll_timeout(), self.dev[1].poll_timeout()].into_iter().flatten().min();
        match next {
            Some(t) => {
                if t > self.now {
                    self.now = t;
                }
                for d in &mut self.dev {
                    d.handle_timeout(self.now);
                }
                true
            }
            None => false,
        }
    }

    /// Exchanges packets until quiet (no packets, no timers), letting
    /// `keep` decide for each packet whether it is delivered. Bounded.
    pub fn run(&mut self, mut keep: impl FnMut(&Pkt) -> bool) {
        for _ in 0..100_000 {
            let pkts = self.transmit();
            if pkts.is_empty() {
                if !self.advance() {
                    return;
                }
                continue;
            }
            for p in &pkts {
                if keep(p) {
                    self.deliver(p);
                }
            }
        }
        panic!("no quiescence after 100000 rounds");
    }

    /// All completions of device `i`.
    pub fn completions(&mut self, i: usize) -> Vec<Wc> {
        let mut out = vec![Wc::new(0, roce_proto::verbs::WcStatus::Success, roce_proto::verbs::WcOpcode::Send, 0); 64];
        let mut all = Vec::new();
        loop {
            let n = self.dev[i].poll_cq(self.cq[i], &mut out).unwrap();
            if n == 0 {
                return all;
            }
            all.extend_from_slice(&out[..n]);
        }
    }

    /// Fills `len` bytes at `off` of device `i` with a pattern.
    pub fn fill(&mut self, i: usize, off: usize, len: usize, seed: u8) -> Vec<u8> {
        let data: Vec<u8> = (0..len).map(|k| (k as u8).wrapping_mul(31).wrapping_add(seed)).collect();
        self.mem[i].set(off, &data);
        data
    }
}
