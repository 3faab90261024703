//! Binding (errors a user can act on), waiting and waking, and the IPv4
//! header the kernel writes.

mod common;

use std::net::{IpAddr, SocketAddr};
use std::os::fd::AsFd;
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{bind, collect, packet};
use roce_udp::{BindError, Interest, ROCE_PORT, RecvBatch, SendBatch, Socket, Waker, wait, wait_precise};

#[test]
fn binding_an_address_that_is_not_local_says_so() {
    // 192.0.2.0/24 is TEST-NET-1: never configured on a host.
    let err = Socket::bind("192.0.2.77".parse().unwrap()).unwrap_err();
    assert!(matches!(err, BindError::AddressNotLocal { addr } if addr == "192.0.2.77".parse::<IpAddr>().unwrap()));
    let msg = err.to_string();
    assert!(msg.contains("192.0.2.77") && msg.contains("127.0.0.2"), "{msg}");
    eprintln!("{msg}");
}

#[test]
fn binding_a_port_in_use_names_it() {
    let first = bind("127.0.0.20");
    let addr = first.local_addr();
    let err = Socket::bind_addr(addr).unwrap_err();
    assert!(matches!(err, BindError::PortInUse { addr: a } if a == addr), "{err:?}");
    let msg = err.to_string();
    assert!(msg.contains(&addr.to_string()), "{msg}");
    assert!(msg.contains("rxe") && msg.contains("127.0.0.3") && msg.contains("SOFTROCE_DEVICES=NAME=ADDR"), "{msg}");
    eprintln!("{msg}");
}

#[test]
fn bind_uses_the_roce_port() {
    let ip: IpAddr = "127.0.79.1".parse().unwrap();
    match Socket::bind(ip) {
        Ok(s) => {
            assert_eq!(s.local_addr(), SocketAddr::new(ip, ROCE_PORT));
            assert_eq!(s.local_port(), 4791);
        }
        // Kernel rxe (or another softroce) holds 0.0.0.0:4791 on this host.
        Err(e @ BindError::PortInUse { .. }) => eprintln!("skipped: {e}"),
        Err(e) => panic!("{e}"),
    }
}

#[test]
fn waker_wakes_a_wait_before_its_timeout() {
    let sock = bind("127.0.0.21");
    let waker = Arc::new(Waker::new().unwrap());
    let w = Arc::clone(&waker);
    let t = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(20));
        w.wake().unwrap();
    });
    let start = Instant::now();
    let r = wait(&[(sock.as_fd(), Interest::READABLE)], Some(&waker), Some(Duration::from_secs(5))).unwrap();
    assert!(r.woken && !r.timed_out && !r.readable(0), "{r:?}");
    assert!(start.elapsed() < Duration::from_secs(5));
    t.join().unwrap();
    // The wake-up was consumed; a wake before the wait is kept for it.
    assert!(!waker.reset());
    waker.wake().unwrap();
    waker.wake().unwrap();
    let r = wait(&[], Some(&waker), Some(Duration::from_secs(5))).unwrap();
    assert!(r.woken, "{r:?}");
}

#[test]
fn wait_on_an_idle_socket_times_out() {
    let sock = bind("127.0.0.22");
    let waker = Waker::new().unwrap();
    let timeout = Duration::from_millis(30);
    let start = Instant::now();
    let r = wait(&[(sock.as_fd(), Interest::READABLE)], Some(&waker), Some(timeout)).unwrap();
    assert!(r.timed_out && !r.woken && !r.readable(0), "{r:?}");
    assert!(start.elapsed() >= timeout);
    // A socket with room to send is writable at once.
    let r = wait(&[(sock.as_fd(), Interest::WRITABLE)], None, Some(Duration::from_secs(5))).unwrap();
    assert!(r.writable(0) && !r.timed_out, "{r:?}");
}

/// `wait` rounds a timeout up to whole milliseconds; `wait_precise` keeps
/// it: fifty 50-us waits end long before fifty milliseconds (the bound
/// leaves each wake-up 800 us of scheduling delay).
#[test]
fn wait_precise_keeps_a_sub_millisecond_timeout() {
    let sock = bind("127.0.0.26");
    let waker = Waker::new().unwrap();
    let start = Instant::now();
    for _ in 0..50 {
        let r = wait_precise(&[(sock.as_fd(), Interest::READABLE)], Some(&waker), Duration::from_micros(50)).unwrap();
        assert!(r.timed_out && !r.woken && !r.readable(0), "{r:?}");
    }
    let took = start.elapsed();
    assert!(took >= Duration::from_micros(50 * 50) && took < Duration::from_millis(40), "{took:?}");
    // A datagram still ends it at once.
    let peer = bind("127.0.0.27");
    peer.send_to(b"x", sock.local_addr()).unwrap();
    let r = wait_precise(&[(sock.as_fd(), Interest::READABLE)], Some(&waker), Duration::from_secs(5)).unwrap();
    assert!(r.readable(0) && !r.timed_out, "{r:?}");
}

#[test]
fn wait_reports_a_readable_socket() {
    let a = bind("127.0.0.23");
    let b = bind("127.0.0.24");
    let idle = bind("127.0.0.25");
    a.send_to(b"ping", b.local_addr()).unwrap();
    let fds = [(idle.as_fd(), Interest::READABLE), (b.as_fd(), Interest::READABLE)];
    let r = wait(&fds, None, Some(Duration::from_secs(5))).unwrap();
    assert!(r.readable(1) && !r.readable(0) && !r.timed_out, "{r:?}");
    let mut rx = RecvBatch::new(2);
    assert_eq!(collect(&b, &mut rx, 1)[0].data, b"ping");
}

#[test]
fn recv_wait_sleeps_until_a_datagram_arrives_then_takes_what_waits() {
    let a = bind("127.0.0.26");
    let b = Arc::new(bind("127.0.0.27"));
    let to = b.local_addr();
    let t = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(30));
        a.send_to(b"one", to).unwrap();
        a.send_to(b"two", to).unwrap();
        a
    });
    let mut rx = RecvBatch::new(8);
    let start = Instant::now();
    let mut got = Vec::new();
    while got.len() < 2 && start.elapsed() < Duration::from_secs(5) {
        let n = b.recv_wait(&mut rx, Duration::from_secs(5)).unwrap();
        assert!(n > 0, "woke with nothing after {:?}", start.elapsed());
        got.extend(rx.segments().map(|s| s.data.to_vec()));
    }
    assert_eq!(got, [b"one".to_vec(), b"two".to_vec()]);
    assert!(start.elapsed() >= Duration::from_millis(25), "did not sleep: {:?}", start.elapsed());
    t.join().unwrap();
}

#[test]
fn recv_wait_takes_all_that_waits_but_only_the_datagram_it_slept_for() {
    let a = Arc::new(bind("127.0.0.30"));
    let b = bind("127.0.0.31");
    let to = b.local_addr();
    let mut rx = RecvBatch::new(8);
    let data = |rx: &RecvBatch| rx.segments().map(|s| s.data.to_vec()).collect::<Vec<_>>();
    // What waits is taken whole, at once.
    for i in 0..3u8 {
        a.send_to(&[i; 3], to).unwrap();
    }
    assert_eq!(b.recv_wait(&mut rx, Duration::from_secs(5)).unwrap(), 3);
    assert_eq!(data(&rx), [[0; 3], [1; 3], [2; 3]]);
    // Nothing waits: the call sleeps, and returns the first datagram that
    // comes (a reply) without those right behind it (its ACK).
    let a2 = Arc::clone(&a);
    let t = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(30));
        a2.send_to(b"reply", to).unwrap();
        a2.send_to(b"ack", to).unwrap();
    });
    let start = Instant::now();
    assert_eq!(b.recv_wait(&mut rx, Duration::from_secs(5)).unwrap(), 1);
    assert!(start.elapsed() >= Duration::from_millis(25), "did not sleep: {:?}", start.elapsed());
    assert_eq!(data(&rx), [b"reply".to_vec()]);
    t.join().unwrap();
    assert_eq!(b.recv_wait(&mut rx, Duration::from_secs(5)).unwrap(), 1);
    assert_eq!(data(&rx), [b"ack".to_vec()]);
}

#[test]
fn recv_wait_on_an_idle_socket_times_out_with_nothing() {
    let b = bind("127.0.0.28");
    let mut rx = RecvBatch::new(4);
    let start = Instant::now();
    assert_eq!(b.recv_wait(&mut rx, Duration::from_millis(20)).unwrap(), 0);
    let took = start.elapsed();
    assert!(took >= Duration::from_millis(19) && took < Duration::from_secs(2), "{took:?}");
    // The socket stays usable without blocking.
    assert_eq!(b.recv(&mut rx).unwrap(), 0);
}

#[test]
fn wake_receiver_ends_a_recv_wait_with_a_recognizable_datagram() {
    let b = Arc::new(bind("127.0.0.29"));
    let b2 = Arc::clone(&b);
    let t = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(20));
        b2.wake_receiver().unwrap();
    });
    let mut rx = RecvBatch::new(4);
    let start = Instant::now();
    let n = b.recv_wait(&mut rx, Duration::from_secs(5)).unwrap();
    assert!(start.elapsed() < Duration::from_secs(4), "not woken: {:?}", start.elapsed());
    assert_eq!(n, 1);
    let seg = rx.segments().next().expect("the wake-up datagram");
    assert!(b.is_wake_up(seg.src_addr(), seg.data.len()), "{:?} {} bytes", seg.src_addr(), seg.data.len());
    // An empty datagram from another socket is not a wake-up.
    let other = bind("127.0.0.29");
    other.send_to(&[], b.local_addr()).unwrap();
    assert_eq!(b.recv_wait(&mut rx, Duration::from_secs(5)).unwrap(), 1);
    let seg = rx.segments().next().expect("the empty datagram");
    assert!(!b.is_wake_up(seg.src_addr(), seg.data.len()));
    t.join().unwrap();
}

/// Reads raw IPv4 datagrams to `dst` until one is UDP from `src`; returns
/// (identification, DF, UDP payload length).
fn raw_ipv4_header(raw: &socket2::Socket, src: SocketAddr, dst: SocketAddr) -> (u16, bool, usize) {
    use std::io::Read;
    let deadline = Instant::now() + Duration::from_secs(5);
    let mut buf = vec![0u8; 70_000];
    loop {
        assert!(Instant::now() < deadline, "no raw copy of {src} -> {dst}");
        let Ok(n) = (&*raw).read(&mut buf) else { continue };
        let ip = &buf[..n];
        let ihl = usize::from(ip[0] & 0x0f) * 4;
        if n < ihl + 8 || ip[9] != 17 {
            continue;
        }
        let (s, d) = (&ip[12..16], &ip[16..20]);
        let udp = &ip[ihl..];
        let (sport, dport) = (u16::from_be_bytes([udp[0], udp[1]]), u16::from_be_bytes([udp[2], udp[3]]));
        if SocketAddr::new(IpAddr::from(<[u8; 4]>::try_from(s).unwrap()), sport) == src
            && SocketAddr::new(IpAddr::from(<[u8; 4]>::try_from(d).unwrap()), dport) == dst
        {
            let id = u16::from_be_bytes([ip[4], ip[5]]);
            let df = ip[6] & 0x40 != 0;
            return (id, df, usize::from(u16::from_be_bytes([udp[4], udp[5]])) - 8);
        }
    }
}

#[test]
fn ipv4_identification_is_zero_with_df() {
    use socket2::{Domain, Protocol, Type};
    // A raw IPPROTO_UDP socket sees received UDP datagrams with their IP header.
    let raw = match socket2::Socket::new(Domain::IPV4, Type::from(libc::SOCK_RAW), Some(Protocol::UDP)) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("skipped: a raw socket needs root (CAP_NET_RAW): {e}");
            return;
        }
    };
    let a = bind("127.0.0.26");
    let b = bind("127.0.0.27");
    raw.bind(&SocketAddr::new(b.local_addr().ip(), 0).into()).unwrap();
    raw.set_read_timeout(Some(Duration::from_millis(200))).unwrap();
    let mut rx = RecvBatch::new(8);
    for i in 0..3 {
        a.send_to(&packet(10, i, 300), b.local_addr()).unwrap();
        let (id, df, len) = raw_ipv4_header(&raw, a.local_addr(), b.local_addr());
        assert_eq!((id, df, len), (0, true, 300), "datagram {i}: IPv4 ID 0 with DF");
    }
    collect(&b, &mut rx, 3);
    // A GSO message: the loopback carries it unsegmented, as one datagram
    // whose header is the first segment's (ID 0); real devices number the
    // following segments 1, 2, ...
    let mut tx = SendBatch::new(8, 8 * 1000);
    for i in 0..5 {
        assert_eq!(tx.push(b.local_addr(), &packet(11, i, 1000)).unwrap().gso_index, i as u16);
    }
    assert_eq!(tx.flush(&a).unwrap().messages, 1);
    let (id, df, _) = raw_ipv4_header(&raw, a.local_addr(), b.local_addr());
    assert_eq!((id, df), (0, true), "GSO message: first segment has ID 0 with DF");
    assert_eq!(collect(&b, &mut rx, 5).len(), 5);
}
