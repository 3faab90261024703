//! Real traffic over the loopback interface: batches, GSO/GRO, scatter-gather,
//! IPv6, packet info, and per-packet failure reporting.

mod common;

use std::net::{IpAddr, SocketAddr};

use common::{Got, assert_quiet, bind, collect, packet, try_bind};
use roce_udp::{MAX_GSO_BYTES, RecvBatch, SendBatch};

#[test]
fn two_sockets_exchange_batches() {
    let a = bind("127.0.0.2");
    let b = bind("127.0.0.3");
    assert!(a.buffer_sizes().recv > 0 && a.buffer_sizes().send > 0);
    eprintln!("buffers {:?}, gro {}", a.buffer_sizes(), a.gro_enabled());
    let mut tx = SendBatch::new(64, 64 * 1600);
    let mut rx = RecvBatch::new(32);
    for round in 0..4u8 {
        // a -> b: mixed lengths, so some runs coalesce and some do not.
        let lens: Vec<usize> = (0..48).map(|i| [1024, 1024, 1024, 60, 300, 1500][i % 6]).collect();
        let sent: Vec<Vec<u8>> = lens.iter().enumerate().map(|(i, &n)| packet(round, i, n)).collect();
        for p in &sent {
            tx.push(b.local_addr(), p).unwrap();
        }
        let f = tx.flush(&a).unwrap();
        assert_eq!((f.packets, f.failed, f.pending), (48, 0, 0), "{f:?}");
        assert!(f.messages < 48, "equal-size runs should coalesce: {f:?}");
        assert!(tx.is_empty());
        let got = collect(&b, &mut rx, sent.len());
        for (i, (g, p)) in got.iter().zip(&sent).enumerate() {
            assert_eq!(g.src, a.local_addr(), "packet {i}");
            assert_eq!(g.dst, b.local_addr().ip(), "packet {i}");
            assert_eq!(&g.data, p, "packet {i} of round {round}");
        }
        assert_eq!(got.len(), sent.len());
        // b -> a: a reply batch.
        let replies: Vec<Vec<u8>> = (0..20).map(|i| packet(round + 100, i, 64 + i)).collect();
        for p in &replies {
            tx.push(a.local_addr(), p).unwrap();
        }
        assert_eq!(tx.flush(&b).unwrap().packets, 20);
        let got = collect(&a, &mut rx, replies.len());
        let want: Vec<Got> =
            replies.iter().map(|p| Got { src: b.local_addr(), dst: a.local_addr().ip(), data: p.clone() }).collect();
        assert_eq!(got, want);
    }
    assert_quiet(&a, &mut rx);
    assert_quiet(&b, &mut rx);
    assert_eq!(tx.stats().failed, 0);
    assert_eq!(rx.stats().truncated, 0);
}

#[test]
fn gso_run_arrives_as_the_same_segments() {
    let a = bind("127.0.0.4");
    let b = bind("127.0.0.5");
    let mut tx = SendBatch::new(64, 64 * 1100);
    let mut rx = RecvBatch::new(8);
    let mut sent: Vec<Vec<u8>> = (0..40).map(|i| packet(1, i, 1100)).collect();
    sent.push(packet(1, 40, 333));
    for (i, p) in sent.iter().enumerate() {
        let q = tx.push(b.local_addr(), p).unwrap();
        assert_eq!((q.index, usize::from(q.gso_index)), (i, i), "one run: IPv4 IDs 0..=40");
    }
    let f = tx.flush(&a).unwrap();
    assert_eq!((f.packets, f.messages, f.failed, f.pending), (41, 1, 0, 0), "{f:?}");
    assert_eq!(tx.stats().gso_messages, 1);
    let got = collect(&b, &mut rx, 41);
    assert_eq!(got.len(), 41);
    for (i, (g, p)) in got.iter().zip(&sent).enumerate() {
        assert_eq!(g.data.len(), p.len(), "segment {i}");
        assert_eq!(&g.data, p, "segment {i}");
        assert_eq!((g.src, g.dst), (a.local_addr(), b.local_addr().ip()));
    }
    // With UDP_GRO the loopback delivers the GSO message whole: the batch
    // must have split a super-datagram.
    if b.gro_enabled() {
        let s = rx.stats();
        assert!(s.datagrams < s.segments, "expected a GRO super-datagram: {s:?}");
    }
    assert_quiet(&b, &mut rx);
}

#[test]
fn gso_runs_to_several_peers_keep_order() {
    let a = bind("127.0.0.6");
    let peers = [bind("127.0.0.7"), bind("127.0.0.8")];
    let mut tx = SendBatch::new(256, 256 * 1200);
    let mut rx = RecvBatch::new(16);
    let mut want: [Vec<Vec<u8>>; 2] = Default::default();
    // Runs of 1..=9 packets of varying sizes, alternating peers, some runs
    // ending with a short packet.
    let mut i = 0;
    for run in 0..24 {
        let peer = run % 2;
        let len = 200 + 37 * run;
        for k in 0..=(run % 9) {
            let n = if k == run % 9 && run % 3 == 0 { len / 2 } else { len };
            let p = packet(2, i, n);
            i += 1;
            tx.push(peers[peer].local_addr(), &p).unwrap();
            want[peer].push(p);
        }
    }
    let f = tx.flush(&a).unwrap();
    assert_eq!((f.packets, f.failed, f.pending), (i, 0, 0));
    assert!(f.messages <= 24, "{f:?}");
    for (peer, sock) in peers.iter().enumerate() {
        let got = collect(sock, &mut rx, want[peer].len());
        let data: Vec<Vec<u8>> = got.into_iter().map(|g| g.data).collect();
        assert_eq!(data, want[peer], "peer {peer}");
        assert_quiet(sock, &mut rx);
    }
}

#[test]
fn scatter_gather_sends_header_then_payload() {
    let a = bind("127.0.0.9");
    let b = bind("127.0.0.10");
    let payloads: Vec<Vec<u8>> = (0..12).map(|i| packet(3, i, if i == 11 { 100 } else { 4096 })).collect();
    let headers: Vec<Vec<u8>> = (0..12).map(|i| packet(4, i, 28)).collect();
    let mut tx = SendBatch::new(16, 16 * 64);
    let mut rx = RecvBatch::new(8);
    for (h, p) in headers.iter().zip(&payloads) {
        tx.push_parts(b.local_addr(), h, p).unwrap();
    }
    // The payloads were not copied: only the headers used the batch's bytes.
    assert!(!tx.has_room(16 * 64 - 12 * 28 + 1));
    let f = tx.flush(&a).unwrap();
    assert_eq!((f.packets, f.failed, f.pending), (12, 0, 0), "{f:?}");
    assert!(f.messages < 12, "header+payload packets of one size coalesce too: {f:?}");
    let got = collect(&b, &mut rx, 12);
    for (i, g) in got.iter().enumerate() {
        assert_eq!(g.data, [&headers[i][..], &payloads[i][..]].concat(), "packet {i}");
    }
    // The same through one plain sendmsg with two iovecs.
    let (h, p) = (packet(5, 0, 28), packet(5, 1, 1000));
    let n = a.send_to_vectored(&[std::io::IoSlice::new(&h), std::io::IoSlice::new(&p)], b.local_addr()).unwrap();
    assert_eq!(n, 1028);
    assert_eq!(collect(&b, &mut rx, 1)[0].data, [h, p].concat());
}

#[test]
fn gathered_pieces_and_a_trailer_arrive_as_one_datagram_each() {
    // RoCE packets sent from registered memory: header, the payload in two
    // pieces (an SGE boundary), then pad + ICRC; equal sizes coalesce.
    let a = bind("127.0.0.13");
    let b = bind("127.0.0.14");
    let mem: Vec<u8> = (0..44_000u32).map(|i| (i * 7 + 1) as u8).collect();
    let mut tx = SendBatch::new(16, 16 * 64);
    let mut rx = RecvBatch::new(8);
    let mut want = Vec::new();
    for i in 0..10usize {
        let h = packet(7, i, 28);
        let (p1, p2) = (&mem[i * 4000..i * 4000 + 1000], &mem[i * 4000 + 1000..i * 4000 + 4096]);
        let t = [0, 0, i as u8, 0xee];
        let q = tx.push_gather(b.local_addr(), &h, &[p1, p2], &t).unwrap();
        assert_eq!(q.index, i);
        // Patching the trailer after queueing (the ICRC of GSO segment k).
        tx.last_trailer_mut().unwrap()[0] = q.gso_index as u8;
        want.push([&h[..], p1, p2, &[q.gso_index as u8, 0, i as u8, 0xee]].concat());
    }
    let f = tx.flush(&a).unwrap();
    assert_eq!((f.packets, f.failed, f.pending), (10, 0, 0), "{f:?}");
    assert!(f.messages < 10, "one GSO message for equal sizes: {f:?}");
    let got = collect(&b, &mut rx, 10);
    for (i, g) in got.iter().enumerate() {
        assert_eq!(g.data, want[i], "packet {i}");
    }
}

#[test]
fn packets_written_in_place_are_sent() {
    let a = bind("127.0.0.11");
    let b = bind("127.0.0.12");
    let mut tx = SendBatch::new(8, 8 * 2048);
    let mut rx = RecvBatch::new(8);
    let mut want = Vec::new();
    while tx.has_room(2048) {
        let p = packet(6, want.len(), 2000);
        tx.spare()[..2000].copy_from_slice(&p);
        tx.commit(b.local_addr(), 2000).unwrap();
        want.push(p);
    }
    assert_eq!(want.len(), 8);
    assert_eq!(tx.flush(&a).unwrap().packets, 8);
    let got: Vec<Vec<u8>> = collect(&b, &mut rx, 8).into_iter().map(|g| g.data).collect();
    assert_eq!(got, want);
}

#[test]
fn refused_packets_are_reported_and_the_rest_sent() {
    let a = bind("127.0.0.13");
    let b = bind("127.0.0.14");
    let mut tx = SendBatch::new(16, 200_000);
    let mut rx = RecvBatch::new(8);
    let port0 = SocketAddr::new(b.local_addr().ip(), 0);
    let ok = |i| packet(7, i, 500);
    tx.push(b.local_addr(), &ok(0)).unwrap();
    // Three equal packets to port 0 form one GSO message, which the kernel
    // refuses (EINVAL): it is split and each packet reported.
    for _ in 0..3 {
        tx.push(port0, &[1; 500]).unwrap();
    }
    tx.push(b.local_addr(), &ok(1)).unwrap();
    // Larger than any UDP datagram: EMSGSIZE.
    tx.push(b.local_addr(), &vec![2; MAX_GSO_BYTES + 100]).unwrap();
    tx.push(b.local_addr(), &ok(2)).unwrap();
    let f = tx.flush(&a).unwrap();
    assert_eq!((f.packets, f.failed, f.pending), (3, 4, 0), "{f:?}");
    let failures: Vec<(usize, i32)> = tx.failures().iter().map(|x| (x.index, x.errno)).collect();
    assert_eq!(failures, [(1, libc::EINVAL), (2, libc::EINVAL), (3, libc::EINVAL), (5, libc::EMSGSIZE)]);
    assert_eq!(tx.failures()[0].dst, port0);
    assert_eq!(tx.failures()[3].error().raw_os_error(), Some(libc::EMSGSIZE));
    assert_eq!(tx.stats().gso_splits, 1);
    assert!(!tx.gso_disabled());
    assert!(tx.is_empty());
    let got: Vec<Vec<u8>> = collect(&b, &mut rx, 3).into_iter().map(|g| g.data).collect();
    assert_eq!(got, [ok(0), ok(1), ok(2)]);
    assert_quiet(&b, &mut rx);
    // The next flush starts with a clean failure list.
    tx.push(b.local_addr(), &ok(3)).unwrap();
    assert_eq!(tx.flush(&a).unwrap().packets, 1);
    assert!(tx.failures().is_empty());
}

#[test]
fn each_source_leaves_from_its_own_socket() {
    // Sockets on three ports of one address, as softroce's per-QP source ports.
    let (s1, s2) = (bind("127.0.0.18"), bind("127.0.0.18"));
    let b = bind("127.0.0.19");
    let (p1, p2) = (s1.local_port(), s2.local_port());
    let mut tx = SendBatch::new(16, 200_000);
    let mut rx = RecvBatch::new(16);
    let sends = [(p1, 0), (p1, 1), (p1, 2), (p2, 3), (p2, 4), (9, 5), (p1, 6)];
    for (source, i) in sends {
        tx.set_source(source);
        tx.push(b.local_addr(), &packet(7, i, 300)).unwrap();
    }
    assert_eq!(tx.pending_source(), Some(p1));
    let f = tx.flush_from(|port| [&s1, &s2].into_iter().find(|s| s.local_port() == port)).unwrap();
    // Equal packets of one source coalesce (p1's first three, p2's two);
    // a source without a socket fails alone.
    assert_eq!((f.packets, f.messages, f.failed, f.pending), (6, 3, 1, 0), "{f:?}");
    let failures: Vec<(usize, i32)> = tx.failures().iter().map(|x| (x.index, x.errno)).collect();
    assert_eq!(failures, [(5, libc::EADDRNOTAVAIL)]);
    let got: Vec<(u16, Vec<u8>)> = collect(&b, &mut rx, 6).into_iter().map(|g| (g.src.port(), g.data)).collect();
    let want: Vec<(u16, Vec<u8>)> =
        sends.iter().filter(|(s, _)| *s != 9).map(|&(s, i)| (s, packet(7, i, 300))).collect();
    assert_eq!(got, want);
    assert_quiet(&b, &mut rx);
    assert_eq!(tx.pending_source(), None);
}

#[test]
fn destination_comes_from_packet_info() {
    // A socket on the wildcard address receives for every loopback
    // address; only IP_PKTINFO can tell which one a datagram was sent to.
    let any = bind("0.0.0.0");
    let a = bind("127.0.0.15");
    let mut rx = RecvBatch::new(4);
    let port = any.local_addr().port();
    for (i, dst) in ["127.0.0.16", "127.1.2.3"].iter().enumerate() {
        let dst: IpAddr = dst.parse().unwrap();
        a.send_to(&packet(8, i, 100), SocketAddr::new(dst, port)).unwrap();
        let got = collect(&any, &mut rx, 1);
        assert_eq!(got[0].dst, dst);
        assert_eq!(got[0].src, a.local_addr());
        assert_eq!(got[0].data, packet(8, i, 100));
    }
    // A socket on one address is told nothing: the destination is its own.
    let b = bind("127.0.0.17");
    any.send_to(&packet(8, 3, 100), b.local_addr()).unwrap();
    let got = collect(&b, &mut rx, 1);
    assert_eq!((got[0].dst, got[0].data.as_slice()), (b.local_addr().ip(), &packet(8, 3, 100)[..]));
}

#[test]
fn ipv6_loopback_works() {
    let (Some(a), Some(b)) = (try_bind("::1"), try_bind("::1")) else { return };
    assert_ne!(a.local_port(), b.local_port());
    let mut tx = SendBatch::new(64, 64 * 1300);
    let mut rx = RecvBatch::new(8);
    let mut sent: Vec<Vec<u8>> = (0..30).map(|i| packet(9, i, 1200)).collect();
    sent.push(packet(9, 30, 17));
    for p in &sent {
        tx.push(b.local_addr(), p).unwrap();
    }
    let f = tx.flush(&a).unwrap();
    assert_eq!((f.packets, f.messages, f.failed), (31, 1, 0), "{f:?}");
    let got = collect(&b, &mut rx, 31);
    for (i, (g, p)) in got.iter().zip(&sent).enumerate() {
        assert_eq!(&g.data, p, "packet {i}");
        assert_eq!(g.src, a.local_addr());
        assert_eq!(g.dst, "::1".parse::<IpAddr>().unwrap());
    }
    // IPV6_V6ONLY: an IPv4 destination is refused, and reported.
    tx.push("127.0.0.2:4791".parse().unwrap(), &[0; 10]).unwrap();
    let f = tx.flush(&a).unwrap();
    assert_eq!((f.packets, f.failed), (0, 1));
    assert_quiet(&b, &mut rx);
}

/// Packets leave ECN-capable (ECT(0)), and the ECN field of each datagram
/// received comes with it: CE from a marking sender (here a plain socket
/// whose TOS says CE, as a congested queue would rewrite it), ECT(0) from
/// softroce's own sockets, Not-ECT from a plain socket (IPv4; on IPv6,
/// where socket2 sets no traffic class, softroce's ECT(0)).
#[test]
fn datagrams_carry_their_ecn_field() {
    use roce_wire::Ecn;
    for ip in ["127.0.0.1", "::1"] {
        let (Some(a), Some(b)) = (try_bind(ip), try_bind(ip)) else { continue };
        let mut tx = SendBatch::new(4, 4 * 200);
        let mut rx = RecvBatch::new(8);
        let sent: Vec<Vec<u8>> = (0..3).map(|i| packet(7, i, 100)).collect();
        tx.push(b.local_addr(), &sent[0]).unwrap();
        assert_eq!(tx.flush(&a).unwrap().packets, 1);
        let plain = socket2::Socket::new(
            socket2::Domain::for_address(b.local_addr()),
            socket2::Type::DGRAM,
            Some(socket2::Protocol::UDP),
        )
        .unwrap();
        let v4 = b.local_addr().is_ipv4();
        let plain_sent = if v4 { &sent[1..] } else { &[] };
        for (tos, data) in [0u32, Ecn::Ce.bits().into()].into_iter().zip(plain_sent) {
            plain.set_tos_v4(tos).unwrap();
            plain.send_to(data, &b.local_addr().into()).unwrap();
        }
        let want = 1 + plain_sent.len();
        let mut seen = Vec::new();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        while seen.len() < want && std::time::Instant::now() < deadline {
            b.recv_wait(&mut rx, std::time::Duration::from_millis(100)).unwrap();
            seen.extend(rx.segments().map(|s| (sent.iter().position(|p| p == s.data), s.ecn)));
        }
        seen.sort_by_key(|&(i, _)| i);
        let all = [(Some(0), Ecn::Ect0), (Some(1), Ecn::NotEct), (Some(2), Ecn::Ce)];
        assert_eq!(seen, all[..want], "on {ip}");
    }
}

/// A member of a `SO_REUSEPORT` group that stops drawing datagrams
/// (`Socket::stop_drawing`, before it closes) keeps what it drew, readable,
/// and the kernel gives every later datagram to the others: a closing
/// member hands its queue on instead of losing it, and loses none that
/// come meanwhile.
#[test]
fn a_group_member_that_stops_drawing_keeps_its_queue_and_gets_nothing_new() {
    let a = roce_udp::Socket::bind_shared("127.0.0.1:0".parse().unwrap()).unwrap();
    let b = roce_udp::Socket::bind_shared(a.local_addr()).unwrap();
    let send = |tag: u8, n: u8| {
        for i in 0..n {
            let s = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
            s.send_to(&[tag, i], a.local_addr()).unwrap();
        }
    };
    let drain = |s: &roce_udp::Socket| {
        let mut rx = RecvBatch::new(64);
        let mut got = Vec::new();
        while s.recv(&mut rx).unwrap() > 0 {
            got.extend(rx.segments().map(|g| g.data.to_vec()));
        }
        got
    };
    // 64 flows: the kernel's hash spreads them over both members.
    send(1, 64);
    b.stop_drawing().unwrap();
    send(2, 64);
    std::thread::sleep(std::time::Duration::from_millis(50));
    let (got_a, got_b) = (drain(&a), drain(&b));
    assert!(!got_b.is_empty() && got_b.iter().all(|d| d[0] == 1), "b keeps what it drew before, only: {got_b:?}");
    assert_eq!(got_a.iter().filter(|d| d[0] == 2).count(), 64, "a gets every later datagram");
    assert_eq!(got_a.len() + got_b.len(), 128, "none lost");
}
