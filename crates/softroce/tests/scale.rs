//! Scale. In one process: 10,000 RC QPs (5,000 connected pairs between two
//! devices on two leased loopback addresses) all move data at once, and
//! every message lands whole, in its own QP's receive, exactly once. Kernel
//! rxe is reported to fail under such loads; softroce's device keeps its
//! QPs in one table and its timers in deadline order, so nothing scans them.
//! Between two processes: 1,000 rdma_cm connections held at once.

use std::collections::HashMap;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::time::{Duration, Instant};

use softroce::config::{DeviceInfo, LoopbackLease};
use softroce::rdma_cm::{CmId, ConnParam, Event, EventChannel, EventType, PortSpace};
use softroce::{
    AccessFlags, Context, Options, Payload, QpInit, RecvWr, SendFlags, SendWr, Wc, WcFlags, WcOpcode, WcStatus,
    WrOpcode,
};

/// The host's shared device: rdma_cm binds to its address.
const LO: IpAddr = IpAddr::V4(Ipv4Addr::LOCALHOST);

/// QP pairs: 10,000 QPs in all.
const PAIRS: usize = 5_000;
/// Bytes each SEND carries: two packets at the loopback's MTU of 4096 (a
/// message that needs its QP's PSN sequence, not one lone packet).
const LEN: usize = 5_000;

fn device(name: &str, lease: &LoopbackLease) -> DeviceInfo {
    DeviceInfo::on_address(name, IpAddr::V4(lease.addr())).unwrap()
}

fn payload(i: usize) -> Vec<u8> {
    (0..LEN).map(|k| (k as u8) ^ (i as u8).wrapping_mul(37) ^ ((i >> 8) as u8)).collect()
}

#[test]
fn ten_thousand_qps_in_one_process_each_deliver_their_message() {
    let (la, lb) = (LoopbackLease::take().unwrap(), LoopbackLease::take().unwrap());
    let access = AccessFlags::LOCAL_WRITE;
    let (a, b) = (
        Context::open_with(&device("scale_a", &la), Options::default()).unwrap(),
        Context::open_with(&device("scale_b", &lb), Options::default()).unwrap(),
    );
    let (pa, pb) = (a.alloc_pd().unwrap(), b.alloc_pd().unwrap());
    let (ca, cb) = (a.create_cq(2 * PAIRS as u32, None).unwrap(), b.create_cq(2 * PAIRS as u32, None).unwrap());
    let (ma, mb) = (pa.reg_mr(PAIRS * LEN, access).unwrap(), pb.reg_mr(PAIRS * LEN, access).unwrap());
    let t0 = Instant::now();
    let mut qps = Vec::with_capacity(PAIRS);
    for i in 0..PAIRS {
        let x = pa.create_qp(QpInit::rc(&ca, &ca, 2)).unwrap();
        let y = pb.create_qp(QpInit::rc(&cb, &cb, 2)).unwrap();
        let psn = (i as u32).wrapping_mul(2_654_435_761) & 0xff_ffff;
        let (ex, ey) = (x.endpoint(psn), y.endpoint(psn ^ 0x5a5a5a));
        x.connect(psn, &ey).unwrap();
        y.connect(psn ^ 0x5a5a5a, &ex).unwrap();
        qps.push((x, y));
    }
    let created = t0.elapsed();
    // Every QP number is its own.
    let by_qpn: HashMap<softroce::Qpn, usize> = qps.iter().enumerate().map(|(i, (_, y))| (y.qpn(), i)).collect();
    assert_eq!(by_qpn.len(), PAIRS);
    let senders: HashMap<softroce::Qpn, usize> = qps.iter().enumerate().map(|(i, (x, _))| (x.qpn(), i)).collect();
    assert_eq!(senders.len(), PAIRS);

    let t1 = Instant::now();
    for (i, (x, y)) in qps.iter().enumerate() {
        let rsge = [mb.sge((i) * LEN, LEN as u32)];
        y.post_recv(&RecvWr { wr_id: i as u64, sg_list: &rsge }).unwrap();
        ma.write((i) * LEN, &payload(i)).unwrap();
        let sge = [ma.sge((i) * LEN, LEN as u32)];
        let mut wr = SendWr::new(i as u64, WrOpcode::SendWithImm, SendFlags::SIGNALED, Payload::Sges(&sge));
        wr.imm_data = i as u32;
        x.post_send(&wr).unwrap();
    }
    let mut wc = vec![Wc::new(0, WcStatus::Success, WcOpcode::Send, 0); 256];
    let (mut sent, mut got) = (vec![false; PAIRS], vec![false; PAIRS]);
    let (mut ns, mut nr) = (0, 0);
    let deadline = Instant::now() + Duration::from_secs(120);
    while (ns < PAIRS || nr < PAIRS) && Instant::now() < deadline {
        let n = ca.wait(&mut wc, Duration::from_millis(50)).unwrap();
        for w in &wc[..n] {
            assert_eq!((w.status, w.opcode), (WcStatus::Success, WcOpcode::Send), "{w:?}");
            let i = senders[&w.qp_num];
            assert_eq!(w.wr_id, i as u64);
            assert!(!std::mem::replace(&mut sent[i], true), "QP pair {i}: a second send completion");
            ns += 1;
        }
        let n = cb.poll(&mut wc).unwrap();
        for w in &wc[..n] {
            assert_eq!((w.status, w.opcode, w.byte_len as usize), (WcStatus::Success, WcOpcode::Recv, LEN), "{w:?}");
            let i = by_qpn[&w.qp_num];
            assert_eq!((w.wr_id, w.imm_data), (i as u64, i as u32), "a receive on the QP its SEND went to");
            assert!(w.wc_flags.contains(WcFlags::WITH_IMM));
            assert!(!std::mem::replace(&mut got[i], true), "QP pair {i}: a second receive");
            nr += 1;
        }
    }
    let moved = t1.elapsed();
    assert_eq!((ns, nr), (PAIRS, PAIRS), "every SEND completed and every receive took one");
    for i in 0..PAIRS {
        assert_eq!(mb.to_vec((i) * LEN, LEN).unwrap(), payload(i), "QP pair {i}'s bytes");
    }
    let (sa, sb) = (a.counters(), b.counters());
    eprintln!(
        "{} QPs created and connected in {:.2?}; {PAIRS} SENDs of {LEN} B completed in {:.2?} \
         ({} packets sent by A, {} retransmissions, {} duplicates at B)",
        2 * PAIRS,
        created,
        moved,
        sa.sent_pkts,
        sa.completer_retry_err,
        sb.duplicate_request
    );
}

/// rdma_cm connections held at once between two processes.
const CONNS: usize = 1_000;

fn next_event(ch: &EventChannel, want: EventType, what: &str) -> Event {
    let e = ch.get_event(Some(Duration::from_secs(60))).unwrap_or_else(|| panic!("{what}: no {want:?}"));
    assert_eq!((e.event, e.status), (want, 0), "{what}: {e:?}");
    e
}

/// The server side of [`a_thousand_rdma_cm_connections_between_two_processes_at_once`]
/// (this binary run again with `SOFTROCE_TEST_SCALE=PORT`): accepts
/// [`CONNS`] connections, each with a receive posted, answers each message
/// with its bytes reversed on the same connection, and leaves once every
/// client has disconnected, saying how many it served.
#[test]
fn scale_server_process() {
    let Ok(port) = std::env::var("SOFTROCE_TEST_SCALE") else { return };
    let port: u16 = port.parse().unwrap();
    let ch = EventChannel::new().unwrap();
    let listen = CmId::new(&ch, PortSpace::Tcp);
    listen.bind_addr(SocketAddr::new(LO, port)).unwrap();
    listen.listen().unwrap();
    // After libtest's "test scale_server_process ... " on the same line.
    println!("READY");
    let ctx = listen.context().expect("bound to a device");
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx.create_cq(4 * CONNS as u32, None).unwrap();
    let mr = pd.reg_mr(2 * CONNS * 64, AccessFlags::LOCAL_WRITE).unwrap();
    let mut ids = HashMap::new();
    let (mut established, mut served, mut gone) = (0, 0, 0);
    let mut wc = vec![Wc::new(0, WcStatus::Success, WcOpcode::Send, 0); 64];
    while gone < CONNS {
        if let Some(e) = ch.get_event(Some(Duration::from_millis(1))) {
            match e.event {
                EventType::ConnectRequest => {
                    let i = ids.len();
                    let qp = e.id.create_qp(&pd, QpInit::rc(&cq, &cq, 2)).unwrap();
                    qp.post_recv(&RecvWr { wr_id: i as u64, sg_list: &[mr.sge(i * 64, 64)] }).unwrap();
                    e.id.accept(&ConnParam::null()).unwrap();
                    ids.insert(qp.qpn(), (i, e.id));
                }
                EventType::Established => established += 1,
                EventType::Disconnected => {
                    e.id.disconnect().ok();
                    gone += 1;
                }
                EventType::TimewaitExit => {}
                other => panic!("server: {other:?} ({e:?})"),
            }
        }
        let n = cq.poll(&mut wc).unwrap();
        for w in &wc[..n] {
            assert_eq!(w.status, WcStatus::Success, "server: {w:?}");
            if w.opcode == WcOpcode::Recv {
                let (i, id) = &ids[&w.qp_num];
                let mut msg = mr.to_vec((i) * 64, w.byte_len as usize).unwrap();
                msg.reverse();
                let at = (CONNS + i) * 64;
                mr.write(at, &msg).unwrap();
                let sge = [mr.sge(at, msg.len() as u32)];
                let qp = id.qp().unwrap();
                qp.post_send(&SendWr::new(*i as u64, WrOpcode::Send, SendFlags::SIGNALED, Payload::Sges(&sge)))
                    .unwrap();
                served += 1;
            }
        }
    }
    println!("SERVED {established} {served} {gone} {}", ids.len());
}

/// 1,000 rdma_cm connections between two processes, all established at
/// once before any closes: every connection carries its own message there
/// and its answer back, and the server (another process) counts 1,000
/// established, served and disconnected.
#[test]
fn a_thousand_rdma_cm_connections_between_two_processes_at_once() {
    use std::io::{BufRead, BufReader};
    let port = 21000 + (std::process::id() % 9000) as u16 * 4;
    let mut server = std::process::Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "scale_server_process", "--nocapture", "--test-threads=1"])
        .env("SOFTROCE_TEST_SCALE", port.to_string())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(server.stdout.take().unwrap()).lines();
    assert!(lines.by_ref().map_while(Result::ok).any(|l| l.ends_with("READY")), "the server never listened");

    let ch = EventChannel::new().unwrap();
    let t0 = Instant::now();
    let ids: Vec<CmId> = (0..CONNS)
        .map(|_| {
            let id = CmId::new(&ch, PortSpace::Tcp);
            id.resolve_addr(None, SocketAddr::new(LO, port)).unwrap();
            id
        })
        .collect();
    let key = |id: &CmId| ids.iter().position(|x| x == id).unwrap();
    let (mut resolved, mut routed, mut established) = (0, 0, 0);
    let ctx = {
        let e = next_event(&ch, EventType::AddrResolved, "client");
        resolved += 1;
        e.id.resolve_route().unwrap();
        e.id.context().unwrap()
    };
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx.create_cq(4 * CONNS as u32, None).unwrap();
    let mr = pd.reg_mr(2 * CONNS * 64, AccessFlags::LOCAL_WRITE).unwrap();
    let mut qps = HashMap::new();
    while established < CONNS {
        let e = ch.get_event(Some(Duration::from_secs(60))).expect("client: an event");
        assert_eq!(e.status, 0, "client: {e:?}");
        match e.event {
            EventType::AddrResolved => {
                resolved += 1;
                e.id.resolve_route().unwrap();
            }
            EventType::RouteResolved => {
                routed += 1;
                let i = key(&e.id);
                let qp = e.id.create_qp(&pd, QpInit::rc(&cq, &cq, 2)).unwrap();
                qp.post_recv(&RecvWr { wr_id: i as u64, sg_list: &[mr.sge((CONNS + i) * 64, 64)] }).unwrap();
                qps.insert(qp.qpn(), i);
                e.id.connect(&ConnParam::null()).unwrap();
            }
            EventType::Established => established += 1,
            other => panic!("client: {other:?} ({e:?})"),
        }
    }
    assert_eq!((resolved, routed), (CONNS, CONNS));
    let connected = t0.elapsed();
    // Every connection is up: each sends its message.
    let msg = |i: usize| format!("connection {i:04} of {CONNS}").into_bytes();
    for (i, id) in ids.iter().enumerate() {
        mr.write((i) * 64, &msg(i)).unwrap();
        let sge = [mr.sge((i) * 64, msg(i).len() as u32)];
        id.qp()
            .unwrap()
            .post_send(&SendWr::new(i as u64, WrOpcode::Send, SendFlags::SIGNALED, Payload::Sges(&sge)))
            .unwrap();
    }
    let mut wc = vec![Wc::new(0, WcStatus::Success, WcOpcode::Send, 0); 64];
    let (mut sent, mut answered) = (0, vec![false; CONNS]);
    let deadline = Instant::now() + Duration::from_secs(60);
    while (sent < CONNS || answered.iter().any(|a| !a)) && Instant::now() < deadline {
        let n = cq.wait(&mut wc, Duration::from_millis(50)).unwrap();
        for w in &wc[..n] {
            assert_eq!(w.status, WcStatus::Success, "client: {w:?}");
            match w.opcode {
                WcOpcode::Send => sent += 1,
                WcOpcode::Recv => {
                    let i = qps[&w.qp_num];
                    assert_eq!(w.wr_id, i as u64);
                    let mut want = msg(i);
                    want.reverse();
                    let got = mr.to_vec((CONNS + i) * 64, w.byte_len as usize).unwrap();
                    assert_eq!(got, want, "connection {i}'s answer came back on it");
                    assert!(!std::mem::replace(&mut answered[i], true), "connection {i}: a second answer");
                }
                other => panic!("client: {other:?}"),
            }
        }
    }
    assert_eq!(sent, CONNS);
    assert!(answered.iter().all(|&a| a), "every connection was answered");
    let exchanged = t0.elapsed();
    for id in &ids {
        id.disconnect().unwrap();
    }
    let mut disconnected = 0;
    while disconnected < CONNS {
        match ch.get_event(Some(Duration::from_secs(60))).expect("client: a DISCONNECTED").event {
            EventType::Disconnected => disconnected += 1,
            EventType::TimewaitExit => {}
            other => panic!("client: {other:?}"),
        }
    }
    // Read to the end: the server's harness prints after the count.
    let rest: Vec<String> = lines.map_while(Result::ok).collect();
    let served = rest.iter().find_map(|l| l.split_once("SERVED ").map(|(_, v)| v.to_string()));
    assert!(server.wait().unwrap().success());
    assert_eq!(
        served.as_deref(),
        Some(&*format!("{CONNS} {CONNS} {CONNS} {CONNS}")),
        "established, served, gone, accepted"
    );
    eprintln!(
        "{CONNS} rdma_cm connections between two processes: all established in {connected:.2?}, \
         a message each way on each by {exchanged:.2?}, all disconnected by {:.2?}",
        t0.elapsed()
    );
}
