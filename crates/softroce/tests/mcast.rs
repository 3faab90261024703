//! UD multicast between devices on loopback: a SEND to a group reaches
//! every QP attached to it in every context, through real IP multicast.

use std::net::{IpAddr, Ipv4Addr};
use std::time::Duration;

use softroce::config::{DeviceInfo, LoopbackLease};
use softroce::{
    AccessFlags, Context, Cq, Mr, Options, Payload, Pd, Qp, QpInit, QpType, RecvWr, SendFlags, SendWr, Wc, WcFlags,
    WcOpcode, WcStatus, WrOpcode,
};

const QKEY: u32 = 0x1111_1111;
const MULTICAST_QPN: u32 = 0xff_ffff;

struct Dev {
    ctx: Context,
    pd: Pd,
    cq: Cq,
    mr: Mr,
    _lease: LoopbackLease,
}

fn dev(tag: &str) -> Dev {
    dev_with(tag, Options::default())
}

fn dev_with(tag: &str, opts: Options) -> Dev {
    let lease = LoopbackLease::take().expect("a free loopback address");
    let info =
        DeviceInfo::on_address(format!("mc{tag}{}", lease.addr().octets()[3]), IpAddr::V4(lease.addr())).unwrap();
    let ctx = Context::open_with(&info, opts).unwrap();
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx.create_cq(256, None).unwrap();
    let mr = pd.reg_mr(1 << 20, AccessFlags::LOCAL_WRITE).unwrap();
    Dev { ctx, pd, cq, mr, _lease: lease }
}

fn ud_qp(d: &Dev) -> Qp {
    let qp = d.pd.create_qp(QpInit::rc(&d.cq, &d.cq, 64).with_type(QpType::Ud)).unwrap();
    qp.connect(0, &qp.endpoint(0)).unwrap();
    qp
}

/// A group of this run's own (tests of other runs may use multicast too).
fn group() -> Ipv4Addr {
    let p = std::process::id();
    Ipv4Addr::new(239, 77, (p >> 8) as u8, p as u8)
}

fn mgid(g: Ipv4Addr) -> [u8; 16] {
    g.to_ipv6_mapped().octets()
}

/// Completions of `d` within `wait`, until `want` arrived.
fn collect(d: &Dev, want: usize, wait: Duration) -> Vec<Wc> {
    let deadline = std::time::Instant::now() + wait;
    let mut all = Vec::new();
    let mut wc = [Wc::new(0, WcStatus::Success, WcOpcode::Send, 0); 16];
    while all.len() < want {
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        if left.is_zero() {
            break;
        }
        let n = d.cq.wait(&mut wc, left).unwrap();
        all.extend_from_slice(&wc[..n]);
    }
    all
}

fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len).map(|i| (i as u8).wrapping_mul(37).wrapping_add(seed)).collect()
}

/// Posts a receive for every (qp, slot) pair, slot `k` at `k * 8 KiB`.
fn post(d: &Dev, qp: &Qp, first_slot: usize, n: usize) {
    for k in first_slot..first_slot + n {
        let r = [d.mr.sge(k * 8192, 40 + 4096)];
        qp.post_recv(&RecvWr { wr_id: k as u64, sg_list: &r }).unwrap();
    }
}

fn send(a: &Dev, qp: &Qp, ah: u32, len: usize, seed: u8) {
    a.mr.write(0, &pattern(len, seed)).unwrap();
    let s = [a.mr.sge(0, len as u32)];
    let mut wr = SendWr::new(u64::from(seed), WrOpcode::SendWithImm, SendFlags::SIGNALED, Payload::Sges(&s));
    wr.imm_data = 0x00c0_ffee + u32::from(seed);
    wr.ud = Some(softroce::UdDest { ah, remote_qpn: MULTICAST_QPN.into(), remote_qkey: QKEY });
    qp.post_send(&wr).unwrap();
    let w = collect(a, 1, Duration::from_secs(10));
    assert_eq!((w.len(), w[0].status, w[0].opcode), (1, WcStatus::Success, WcOpcode::Send));
}

#[test]
fn a_send_to_a_group_reaches_every_attached_qp_of_every_context() {
    let (a, b, c) = (dev("a"), dev("b"), dev("c"));
    let g = group();
    let sender = ud_qp(&a);
    let (b1, b2, c1, c2) = (ud_qp(&b), ud_qp(&b), ud_qp(&c), ud_qp(&c));
    for q in [&b1, &b2, &c1] {
        q.attach_mcast(mgid(g)).unwrap();
    }
    // Attaching twice is not an error, and does not deliver twice.
    b1.attach_mcast(mgid(g)).unwrap();
    assert_eq!(b1.mcast_groups(), [mgid(g)]);
    // b's QPs take slots 0..3 and 8..11, c's 0..3 and 8..11 too.
    post(&b, &b1, 0, 3);
    post(&b, &b2, 8, 3);
    post(&c, &c1, 0, 3);
    post(&c, &c2, 8, 3);
    let ah = a.pd.create_ah(IpAddr::V4(g)).unwrap();
    let sizes = [0usize, 100, 4096];
    for (k, len) in sizes.into_iter().enumerate() {
        send(&a, &sender, ah.handle(), len, k as u8);
    }
    for (d, qps, unattached) in [(&b, vec![(&b1, 0), (&b2, 8)], None), (&c, vec![(&c1, 0)], Some(&c2))] {
        let got = collect(d, 3 * qps.len(), Duration::from_secs(10));
        for (qp, first) in qps {
            let mine: Vec<&Wc> = got.iter().filter(|w| w.qp_num == qp.qpn()).collect();
            assert_eq!(mine.len(), 3, "QP {:#x} got every datagram once", qp.qpn());
            for (k, w) in mine.into_iter().enumerate() {
                let len = sizes[k];
                assert_eq!(
                    (w.wr_id, w.status, w.byte_len as usize, w.src_qp, w.imm_data),
                    ((first + k) as u64, WcStatus::Success, 40 + len, sender.qpn(), 0x00c0_ffee + k as u32)
                );
                assert!(w.wc_flags.contains(WcFlags::GRH));
                let slot = (first + k) * 8192;
                assert_eq!(
                    &d.mr.to_vec(slot + 36, 4).unwrap()[..],
                    &g.octets(),
                    "the GRH area's destination: the group"
                );
                assert_eq!(d.mr.to_vec(slot + 40, len).unwrap(), pattern(len, k as u8));
            }
        }
        if let Some(q) = unattached {
            assert!(got.iter().all(|w| w.qp_num != q.qpn()), "a QP not attached gets nothing");
        }
    }
    // One group socket per context: B received each datagram once for its two QPs.
    assert_eq!(b.ctx.driver_stats().mcast_rx, 3);

    // Detached, b1 and b2 get nothing more; c1 still does.
    b1.detach_mcast(mgid(g)).unwrap();
    b2.detach_mcast(mgid(g)).unwrap();
    assert!(b2.detach_mcast(mgid(g)).is_err(), "not attached any more");
    post(&b, &b1, 3, 1);
    post(&c, &c1, 3, 1);
    send(&a, &sender, ah.handle(), 64, 9);
    let got = collect(&c, 1, Duration::from_secs(10));
    assert_eq!((got.len(), got[0].qp_num, got[0].wr_id), (1, c1.qpn(), 3));
    assert!(collect(&b, 1, Duration::from_millis(300)).is_empty(), "b left the group");

    // A dropped QP leaves its groups; another can join again.
    drop(c1);
    let c3 = ud_qp(&c);
    c3.attach_mcast(mgid(g)).unwrap();
    post(&c, &c3, 4, 1);
    send(&a, &sender, ah.handle(), 64, 10);
    let got = collect(&c, 1, Duration::from_secs(10));
    assert_eq!((got.len(), got[0].qp_num), (1, c3.qpn()));
}

#[test]
fn attach_refuses_what_the_kernel_refuses() {
    let d = dev("r");
    let rc = d.pd.create_qp(QpInit::rc(&d.cq, &d.cq, 8)).unwrap();
    let ud = ud_qp(&d);
    let g = mgid(group());
    let err = |r: Result<(), softroce::Error>| r.expect_err("refused").to_string();
    assert!(err(rc.attach_mcast(g)).contains("only UD QPs"), "an RC QP joins no group");
    assert!(err(ud.attach_mcast(mgid(Ipv4Addr::new(10, 1, 2, 3)))).contains("not a multicast GID"));
    let v6: [u8; 16] = "ff0e::1".parse::<std::net::Ipv6Addr>().unwrap().octets();
    assert!(err(ud.attach_mcast(v6)).contains("another IP family"));
    assert!(err(ud.detach_mcast(g)).contains("not attached"));
    assert!(ud.mcast_groups().is_empty());
}

/// `SOFTROCE_FAULTS` acts on multicast datagrams as on the rest: a
/// receiver dropping everything gets none, and counts each one dropped.
#[test]
fn injected_faults_reach_multicast_datagrams_too() {
    let faults = Some("drop=1.0".parse().unwrap());
    let (a, b) = (dev("fa"), dev_with("fb", Options { faults, ..Options::default() }));
    // A group of its own, beside the other test's.
    let g = Ipv4Addr::new(239, 78, group().octets()[2], group().octets()[3]);
    let sender = ud_qp(&a);
    let rx = ud_qp(&b);
    rx.attach_mcast(mgid(g)).unwrap();
    post(&b, &rx, 0, 2);
    let ah = a.pd.create_ah(IpAddr::V4(g)).unwrap();
    send(&a, &sender, ah.handle(), 100, 1);
    send(&a, &sender, ah.handle(), 100, 2);
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while b.ctx.driver_stats().mcast_rx < 2 && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(10));
    }
    assert_eq!(b.ctx.driver_stats().mcast_rx, 2, "both datagrams reached b's group socket");
    let f = b.ctx.fault_stats().unwrap();
    assert_eq!((f.packets, f.dropped), (2, 2), "both went through the injector, which dropped them");
    assert!(collect(&b, 1, Duration::from_millis(200)).is_empty(), "nothing delivered");
}
