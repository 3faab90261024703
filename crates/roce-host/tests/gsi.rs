//! QP 1's MADs between two members of one device: a REQ that comes before
//! its listener waits for it (and reaches it once it listens), and one for
//! a service ID nobody listens on reaches a CM after the grace, to be
//! rejected there. Each test uses a device on 127.0.0.1 and a UDP port of
//! its own.

use std::net::{IpAddr, Ipv4Addr, SocketAddr, UdpSocket};
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use roce_host::{Control, LISTEN_GRACE, Member, Route};
use roce_udp::{RecvBatch, Socket};

const LO: IpAddr = IpAddr::V4(Ipv4Addr::LOCALHOST);

fn fresh_addr() -> SocketAddr {
    let s = UdpSocket::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
    s.local_addr().unwrap()
}

/// A CM REQ for `service_id` as it reaches QP 1: BTH (dest QP 1), DETH,
/// then the 256-byte MAD (class 0x07, attribute 0x0010).
fn req(service_id: u64) -> Vec<u8> {
    let mut p = vec![0u8; 12 + 8 + 256];
    p[0] = 0x64; // UD SEND_ONLY
    p[7] = 1; // dest QP 1
    p[20] = 1; // base version
    p[21] = 0x07; // CM class
    p[20 + 16..20 + 18].copy_from_slice(&0x0010u16.to_be_bytes());
    p[20 + 24..20 + 28].copy_from_slice(&0x1234_5600u32.to_be_bytes());
    p[20 + 32..20 + 40].copy_from_slice(&service_id.to_be_bytes());
    p
}

/// What `m` does with the next datagram on `sock` within `within`: the
/// packet it delivers to its own engine, if any.
fn next_delivered(m: &Member, sock: &Socket, within: Duration) -> Option<Vec<u8>> {
    let mut rx = RecvBatch::new(8);
    let deadline = Instant::now() + within;
    while Instant::now() < deadline {
        if sock.recv_wait(&mut rx, Duration::from_millis(10)).unwrap_or(0) == 0 {
            continue;
        }
        for seg in rx.segments() {
            if let Control::Deliver { packet, .. } = m.control(sock, seg.src, seg.data) {
                return Some(packet.to_vec());
            }
        }
    }
    None
}

#[test]
fn a_req_before_its_listener_waits_for_it_and_one_nobody_listens_for_is_answered_after_the_grace() {
    let addr = fresh_addr();
    let (client, c_sock) = Member::join(addr).unwrap();
    let (server, s_sock) = Member::join(addr).unwrap();
    client.set_cm(true);
    server.set_cm(true);
    let sid = 0x0106_0000_u64 | u64::from(addr.port());

    // The REQ reaches the client's socket before the server listens.
    let packet = req(sid);
    assert_eq!(client.route_mad(&packet), Route::NoListenerYet);
    client.pass_on(&c_sock, LO, 4791, LO, &packet, 0);
    assert_eq!(client.stats().waited_for_listener.load(Ordering::Relaxed), 1);
    client.upkeep(&c_sock);
    assert_eq!(next_delivered(&server, &s_sock, Duration::from_millis(30)), None, "nobody listens yet");

    server.listen(sid).unwrap();
    assert!(matches!(client.route_mad(&packet), Route::Member { .. }));
    client.upkeep(&c_sock);
    assert_eq!(next_delivered(&server, &s_sock, Duration::from_secs(2)), Some(packet), "the listener gets the REQ");

    // A REQ for a service ID nobody listens on: the client's own CM gets it
    // once the grace is over (and answers REJ 8), not before.
    let other = req(sid + 1);
    let t = Instant::now();
    client.pass_on(&c_sock, LO, 4791, LO, &other, 0);
    let mut got = None;
    while got.is_none() && t.elapsed() < LISTEN_GRACE * 4 {
        client.upkeep(&c_sock);
        got = next_delivered(&client, &c_sock, Duration::from_millis(10));
    }
    let waited = t.elapsed();
    assert_eq!(got, Some(other), "the client's CM answers a REQ nobody listens for");
    assert!(waited >= LISTEN_GRACE, "answered after {waited:?}, before the grace was over");
    assert_eq!(
        next_delivered(&server, &s_sock, Duration::from_millis(20)),
        None,
        "the listener of another ID is left out"
    );

    server.leave(s_sock);
    client.leave(c_sock);
}
