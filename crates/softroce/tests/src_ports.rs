//! UDP source ports as Linux rxe picks them, seen where they arrive: each
//! RC QP sends from its QPN pair's port (both ends the same), a UD QP from
//! its QPN's, and `SrcPorts::Device` sends everything from 4791. The
//! receiver's capture records each datagram's source port as its socket
//! reported it, and the receiver checked every ICRC over that port.

use std::net::IpAddr;
use std::path::Path;
use std::time::Duration;

use roce_proto::qp::{rxe_init_sport, udp_src_port};
use roce_wire::Packet;
use softroce::config::{DeviceInfo, LoopbackLease};
use softroce::{
    AccessFlags, Context, Cq, Mr, Options, Payload, Pd, Qp, QpInit, QpType, RecvWr, SendFlags, SendWr, SrcPorts,
    UdDest, Wc, WcOpcode, WcStatus, WrOpcode,
};

struct Dev {
    ctx: Context,
    pd: Pd,
    cq: Cq,
    mr: Mr,
    addr: IpAddr,
    _lease: LoopbackLease,
}

fn dev(tag: &str, opts: Options) -> Dev {
    let lease = LoopbackLease::take().expect("a free loopback address");
    let addr = IpAddr::V4(lease.addr());
    let info = DeviceInfo::on_address(format!("sp{tag}{}", lease.addr().octets()[3]), addr).unwrap();
    let ctx = Context::open_with(&info, opts).unwrap();
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx.create_cq(512, None).unwrap();
    let mr = pd.reg_mr(1 << 20, AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE).unwrap();
    Dev { ctx, pd, cq, mr, addr, _lease: lease }
}

fn wait(d: &Dev, want: usize) -> Vec<Wc> {
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    let mut all = Vec::new();
    let mut wc = [Wc::new(0, WcStatus::Success, WcOpcode::Send, 0); 16];
    while all.len() < want {
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        assert!(!left.is_zero(), "{} of {want} completions within 20 s", all.len());
        let n = d.cq.wait(&mut wc, left).unwrap();
        all.extend_from_slice(&wc[..n]);
    }
    assert!(all.iter().all(|w| w.status == WcStatus::Success), "{all:?}");
    all
}

fn rc_pair(a: &Dev, b: &Dev) -> (Qp, Qp) {
    let (x, y) =
        (a.pd.create_qp(QpInit::rc(&a.cq, &a.cq, 64)).unwrap(), b.pd.create_qp(QpInit::rc(&b.cq, &b.cq, 64)).unwrap());
    x.connect(1, &y.endpoint(2)).unwrap();
    y.connect(2, &x.endpoint(1)).unwrap();
    (x, y)
}

/// A 64 KiB WRITE from `x` (16+ packets, ACKed by `y`'s side).
fn write(a: &Dev, b: &Dev, x: &Qp) {
    let sge = [a.mr.sge(0, 65536)];
    let mut wr = SendWr::new(1, WrOpcode::RdmaWrite, SendFlags::SIGNALED, Payload::Sges(&sge));
    wr.remote_addr = b.mr.addr();
    wr.rkey = b.mr.rkey();
    x.post_send(&wr).unwrap();
    wait(a, 1);
}

/// The capture's RoCE packets arriving from `from`: (destination QPN, UDP
/// source port), each distinct pair once, and how many packets there were.
fn arrivals(pcap: &Path, from: IpAddr) -> (std::collections::BTreeSet<(u32, u16)>, usize) {
    let frames = roce_capture::read_file(pcap).unwrap();
    let (mut seen, mut n) = (std::collections::BTreeSet::new(), 0);
    for f in &frames {
        let roce_capture::Classified::Roce(d) = roce_capture::classify(f) else { continue };
        if d.src.ip() != from {
            continue;
        }
        let p = Packet::new_checked(d.payload).unwrap();
        seen.insert((p.bth().dest_qpn(), d.src.port()));
        n += 1;
    }
    (seen, n)
}

#[test]
fn each_qp_sends_from_rxes_port_for_it() {
    let pcap = capture_path();
    let a = dev("a", Options::default());
    let b = dev("b", Options { pcap: Some(pcap.clone()), ..Options::default() });
    a.mr.write(0, &[7u8; 65536]).unwrap();
    let pairs = [rc_pair(&a, &b), rc_pair(&a, &b)];
    for (x, _) in &pairs {
        write(&a, &b, x);
    }
    // A UD QP of a's sends to one of b's.
    let ud = |d: &Dev| {
        let q = d.pd.create_qp(QpInit::rc(&d.cq, &d.cq, 16).with_type(QpType::Ud)).unwrap();
        q.connect(0, &q.endpoint(0)).unwrap();
        q
    };
    let (ua, ub) = (ud(&a), ud(&b));
    b.qp_recv(&ub);
    let ah = a.pd.create_ah(b.addr).unwrap();
    let sge = [a.mr.sge(0, 512)];
    let mut wr = SendWr::new(2, WrOpcode::Send, SendFlags::SIGNALED, Payload::Sges(&sge));
    wr.ud = Some(UdDest { ah: ah.handle(), remote_qpn: ub.qpn(), remote_qkey: 0x1111_1111 });
    ua.post_send(&wr).unwrap();
    wait(&a, 1);
    assert_eq!(wait(&b, 1)[0].opcode, WcOpcode::Recv);
    let stats = a.ctx.driver_stats();
    let counters = b.ctx.counters();
    let mut want: std::collections::BTreeSet<(u32, u16)> =
        pairs.iter().map(|(x, y)| (y.qpn().get(), udp_src_port(x.qpn().get(), y.qpn().get()))).collect();
    want.insert((ub.qpn().get(), rxe_init_sport(ua.qpn().get())));
    // b's capture is whole once its context is gone.
    drop((pairs, ub, b));

    let (seen, n) = arrivals(&pcap, a.addr);
    assert_eq!(seen, want, "{n} packets from {}", a.addr);
    assert!(n > 2 * 16, "two 64 KiB WRITEs and a SEND: {n} packets");
    assert_eq!((counters.drop_icrc, counters.drop_malformed), (0, 0), "{counters:?}");
    // Two RC ports and the UD QP's (b's side holds its own sockets).
    assert_eq!((stats.src_port_sockets, stats.src_port_fallbacks), (3, 0), "{stats:?}");
}

#[test]
fn src_ports_device_sends_everything_from_4791() {
    let pcap = capture_path();
    let a = dev("c", Options { src_ports: SrcPorts::Device, ..Options::default() });
    let b = dev("d", Options { pcap: Some(pcap.clone()), ..Options::default() });
    a.mr.write(0, &[9u8; 65536]).unwrap();
    let (x, y) = rc_pair(&a, &b);
    write(&a, &b, &x);
    assert_eq!(a.ctx.driver_stats().src_port_sockets, 0);
    let yq = y.qpn().get();
    drop((y, b));
    let (seen, _) = arrivals(&pcap, a.addr);
    assert_eq!(seen.into_iter().collect::<Vec<_>>(), [(yq, 4791)]);
}

#[test]
fn a_port_held_by_another_program_leaves_the_qp_on_4791() {
    let pcap = capture_path();
    let a = dev("e", Options::default());
    let b = dev("f", Options { pcap: Some(pcap.clone()), ..Options::default() });
    a.mr.write(0, &[3u8; 65536]).unwrap();
    let (x, y) =
        (a.pd.create_qp(QpInit::rc(&a.cq, &a.cq, 64)).unwrap(), b.pd.create_qp(QpInit::rc(&b.cq, &b.cq, 64)).unwrap());
    // Another program (no SO_REUSEPORT) holds the port x's pair will use.
    let port = udp_src_port(x.qpn().get(), y.qpn().get());
    let _holder = std::net::UdpSocket::bind((a.addr, port)).expect("the pair's port is free before the test");
    x.connect(1, &y.endpoint(2)).unwrap();
    y.connect(2, &x.endpoint(1)).unwrap();
    write(&a, &b, &x);
    let stats = a.ctx.driver_stats();
    assert_eq!(stats.src_port_fallbacks, 1, "{stats:?}");
    let yq = y.qpn().get();
    drop((y, b));
    let (seen, _) = arrivals(&pcap, a.addr);
    assert_eq!(seen.into_iter().collect::<Vec<_>>(), [(yq, 4791)]);
}

/// A capture file of this test's own.
fn capture_path() -> std::path::PathBuf {
    static N: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    std::env::temp_dir().join(format!("softroce-src-ports-{}-{n}.pcap", std::process::id()))
}

impl Dev {
    fn qp_recv(&self, qp: &Qp) {
        let r = [self.mr.sge(8192, 40 + 512)];
        qp.post_recv(&RecvWr { wr_id: 9, sg_list: &r }).unwrap();
    }
}
