//! A member that leaves hands on the other members' packets still queued
//! on its socket: a stray that a stale program steered to it reaches its
//! owner instead of being closed away with the socket (UD cannot send it
//! again). The device is on 127.0.0.1 with a UDP port of its own.

use std::net::{IpAddr, Ipv4Addr, SocketAddr, UdpSocket};
use std::time::{Duration, Instant};

use roce_host::{Control, Member, device_file, envelope};
use roce_udp::RecvBatch;

const LO: IpAddr = IpAddr::V4(Ipv4Addr::LOCALHOST);

fn fresh_addr() -> SocketAddr {
    let s = UdpSocket::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
    s.local_addr().unwrap()
}

/// A UD SEND_ONLY for `qpn` (BTH, DETH, 8 bytes of payload, ICRC room).
fn ud_packet(qpn: u32) -> Vec<u8> {
    let mut p = vec![0u8; 12 + 8 + 8 + 4];
    p[0] = 0x64;
    p[5..8].copy_from_slice(&qpn.to_be_bytes()[1..]);
    p[20..28].copy_from_slice(b"for you!");
    p
}

#[test]
fn a_leaving_member_hands_on_a_stray_queued_on_its_socket() {
    let addr = fresh_addr();
    let (a, a_sock) = Member::join(addr).unwrap();
    let (b, b_sock) = Member::join(addr).unwrap();
    let qpn = b.alloc_qpn(&b_sock, |_| false).unwrap();

    // A stray for B waits on A's socket: a Forward to A's seat (0, the
    // first to join) naming B, as a member with stale seats sends it.
    let file = std::fs::read(device_file(addr)).unwrap();
    let secret: [u8; 16] = file[16..32].try_into().unwrap();
    let packet = ud_packet(qpn);
    let mut env = Vec::new();
    envelope::forward_header(&mut env, 0, &secret, b.incarnation() & 0xffff_ffff_ffff, 1, LO, 4791, LO);
    env.extend_from_slice(&packet);
    let sender = UdpSocket::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
    sender.send_to(&env, addr).unwrap();
    std::thread::sleep(Duration::from_millis(20));

    // A leaves without reading it.
    a.leave(a_sock);

    let mut rx = RecvBatch::new(8);
    let deadline = Instant::now() + Duration::from_secs(2);
    let mut got = None;
    while got.is_none() && Instant::now() < deadline {
        if b_sock.recv_wait(&mut rx, Duration::from_millis(20)).unwrap_or(0) == 0 {
            continue;
        }
        for seg in rx.segments() {
            if let Control::Deliver { packet, .. } = b.control(&b_sock, seg.src, seg.data) {
                got = Some(packet.to_vec());
            }
        }
    }
    assert_eq!(got, Some(packet), "B got its packet from the member that left");
    b.leave(b_sock);
}

/// Seats left unknown by members that are all dead now (a probe round
/// nobody answered) do not keep the next member unseated: with no live
/// member the group holds only its socket. Before, it probed seats nobody
/// held, stayed unseated, and every MAD to its own QP 1 was held and dropped.
#[test]
fn a_joiner_is_seated_when_dead_members_left_the_seats_unknown() {
    use std::os::unix::fs::FileExt;
    let addr = fresh_addr();
    let (a, a_sock) = Member::join(addr).unwrap();
    let (c, c_sock) = Member::join(addr).unwrap();
    // Three seats, none known: word 5 is the seat count, words 8.. the seats.
    let f = std::fs::OpenOptions::new().write(true).open(device_file(addr)).unwrap();
    f.write_all_at(&3u64.to_ne_bytes(), 5 * 8).unwrap();
    for i in 0..3u64 {
        f.write_all_at(&0u64.to_ne_bytes(), (8 + i) * 8).unwrap();
    }
    // Both die (their lock bytes and sockets go with their descriptors).
    drop((a, a_sock, c, c_sock));
    let (b, b_sock) = Member::join(addr).unwrap();
    let mut buf = Vec::new();
    assert!(b.wake_envelope(&mut buf), "the joiner knows its seat");
    b.leave(b_sock);
}

/// What one member's receive loop does with a datagram, as the driver
/// does: an envelope by `control`, a packet for another member handed on;
/// returns whether it was this member's packet for `qpn`.
fn handle(m: &Member, sock: &roce_udp::Socket, src: IpAddr, src_port: u16, dst: IpAddr, data: &[u8], qpn: u32) -> bool {
    let data = if envelope::is_envelope(data) {
        match m.control(sock, src, data) {
            Control::Deliver { packet, .. } => packet,
            _ => return false,
        }
    } else {
        match m.route_packet(data) {
            Some(roce_host::Route::Mine) => data,
            Some(_) => {
                m.pass_on(sock, src, src_port, dst, data, 0);
                return false;
            }
            None => return false,
        }
    };
    roce_wire::bth::dest_qpn_of(data) == Some(qpn)
}

/// A member leaving while datagrams stream to the member the kernel moves
/// into its seat (the last to join) loses none of them. The leaver used to
/// install the program for the seats after its close before closing: the
/// mover's datagrams (and others' forwards to it) went to the leaving
/// socket meanwhile and were closed away with it (seen as a lost REP
/// between processes, about one run in fifteen of `cm_processes`).
#[test]
fn datagrams_to_the_member_moved_into_a_leavers_seat_all_arrive() {
    const ROUNDS: usize = 12;
    const PER_ROUND: usize = 1500;
    for round in 0..ROUNDS {
        let addr = fresh_addr();
        let (a, a_sock) = Member::join(addr).unwrap();
        let (b, b_sock) = Member::join(addr).unwrap();
        let (c, c_sock) = Member::join(addr).unwrap();
        let qpn = c.alloc_qpn(&c_sock, |_| false).unwrap();
        let stop = std::sync::atomic::AtomicBool::new(false);
        let (got, sent) = (std::sync::atomic::AtomicUsize::new(0), std::sync::atomic::AtomicUsize::new(0));
        std::thread::scope(|s| {
            for (m, sock) in [(&b, &b_sock), (&c, &c_sock)] {
                let (stop, got) = (&stop, &got);
                s.spawn(move || {
                    let mut rx = RecvBatch::new(64);
                    while !stop.load(std::sync::atomic::Ordering::Acquire) {
                        if sock.recv_wait(&mut rx, Duration::from_millis(5)).unwrap_or(0) > 0 {
                            for seg in rx.segments() {
                                if handle(m, sock, seg.src, seg.src_port, seg.dst, seg.data, qpn) {
                                    got.fetch_add(1, std::sync::atomic::Ordering::AcqRel);
                                }
                            }
                        }
                        m.upkeep(sock);
                    }
                });
            }
            // Another thread sends (on loopback the kernel steers each
            // datagram inside its sendto) while this one leaves.
            let sending = s.spawn(|| {
                let sender = UdpSocket::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
                let packet = ud_packet(qpn);
                for i in 0..PER_ROUND {
                    sender.send_to(&packet, addr).unwrap();
                    sent.store(i + 1, std::sync::atomic::Ordering::Release);
                    if i % 4 == 0 {
                        std::thread::sleep(Duration::from_micros(1));
                    }
                }
            });
            while sent.load(std::sync::atomic::Ordering::Acquire) < PER_ROUND / 3 {
                std::thread::yield_now();
            }
            a.leave(a_sock);
            sending.join().unwrap();
            let deadline = Instant::now() + Duration::from_secs(3);
            while got.load(std::sync::atomic::Ordering::Acquire) < PER_ROUND && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(5));
            }
            stop.store(true, std::sync::atomic::Ordering::Release);
        });
        let n = got.load(std::sync::atomic::Ordering::Acquire);
        assert_eq!(n, PER_ROUND, "round {round}: C got {n} of {PER_ROUND} datagrams ({:?})", c.stats());
        b.leave(b_sock);
        c.leave(c_sock);
    }
}
