//! The relay's forwarding loop with real descriptors, no root: datagram socket pairs stand in for the TUN
//! devices (a TUN read, like a datagram receive, returns exactly one packet).

use std::os::unix::net::UnixDatagram;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use roce_netem::packet::build_ipv4_udp;
use roce_netem::relay::run_direction;
use roce_netem::{Config, Impairer};

fn packet(seq: u32) -> Vec<u8> {
    let mut payload = seq.to_be_bytes().to_vec();
    payload.resize(200, 3);
    build_ipv4_udp([10, 233, 0, 1], [10, 233, 0, 2], 49152, 4791, &payload, true)
}

/// Receives until `n` packets arrived or 10 s passed.
fn collect(sock: &UnixDatagram, n: usize) -> Vec<Vec<u8>> {
    sock.set_read_timeout(Some(Duration::from_millis(100))).unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut out = Vec::new();
    let mut buf = vec![0u8; 65536];
    while out.len() < n && Instant::now() < deadline {
        if let Ok(len) = sock.recv(&mut buf) {
            out.push(buf[..len].to_vec());
        }
    }
    out
}

#[test]
fn forwards_in_order_with_delay_and_duplicates() {
    // sender -> [in_peer | in] relay [out | out_peer] -> receiver
    let (sender, input) = UnixDatagram::pair().unwrap();
    let (output, receiver) = UnixDatagram::pair().unwrap();
    input.set_nonblocking(true).unwrap();
    output.set_nonblocking(true).unwrap();
    let stop = AtomicBool::new(false);
    let cfg =
        Config { dup: 1.0, delay: Duration::from_millis(20), jitter: Duration::from_millis(5), ..Config::default() };
    let start = Instant::now();
    let n = 200u32;
    let (report, got) = std::thread::scope(|s| {
        let relay =
            s.spawn(|| run_direction("a->b".into(), &input, &output, Impairer::new(cfg, 1, 0), start, &stop, None));
        for seq in 0..n {
            sender.send(&packet(seq)).unwrap();
            if seq % 20 == 19 {
                std::thread::sleep(Duration::from_millis(1));
            }
        }
        let got = collect(&receiver, 2 * n as usize);
        stop.store(true, Ordering::Relaxed);
        (relay.join().unwrap(), got)
    });
    assert!(start.elapsed() >= Duration::from_millis(15), "delayed");
    assert_eq!(got.len(), 2 * n as usize);
    for (i, p) in got.iter().enumerate() {
        assert_eq!(*p, packet(i as u32 / 2), "each packet twice, in order despite jitter");
    }
    assert!(report.error.is_none());
    assert_eq!(report.write_errors, 0);
    assert_eq!(report.pending, 0);
    assert_eq!(report.stats.forwarded, 2 * u64::from(n));
    assert_eq!(report.stats.duplicated, u64::from(n));
    assert_eq!(report.summary(), "a->b: forwarded 400, dropped 0, duplicated 200, reordered 0, corrupted 0");
}

#[test]
fn stops_promptly_and_reports_unsent_packets() {
    let (sender, input) = UnixDatagram::pair().unwrap();
    let (output, _receiver) = UnixDatagram::pair().unwrap();
    input.set_nonblocking(true).unwrap();
    output.set_nonblocking(true).unwrap();
    let stop = AtomicBool::new(false);
    let cfg = Config { delay: Duration::from_secs(60), ..Config::default() };
    let start = Instant::now();
    let report = std::thread::scope(|s| {
        let relay =
            s.spawn(|| run_direction("x".into(), &input, &output, Impairer::new(cfg, 1, 0), start, &stop, None));
        for seq in 0..5 {
            sender.send(&packet(seq)).unwrap();
        }
        std::thread::sleep(Duration::from_millis(200));
        stop.store(true, Ordering::Relaxed);
        relay.join().unwrap()
    });
    assert!(start.elapsed() < Duration::from_secs(5), "the 60 s delay did not hold up the stop");
    assert_eq!(report.stats.received, 5);
    assert_eq!(report.stats.forwarded, 0);
    assert_eq!(report.pending, 5);
    assert!(report.summary().ends_with(", unsent 5"), "{}", report.summary());
}

#[test]
fn write_errors_are_counted_not_forwarded() {
    let (sender, input) = UnixDatagram::pair().unwrap();
    let (output, receiver) = UnixDatagram::pair().unwrap();
    input.set_nonblocking(true).unwrap();
    output.set_nonblocking(true).unwrap();
    drop(receiver); // sends on `output` now fail (ECONNREFUSED)
    let stop = AtomicBool::new(false);
    let start = Instant::now();
    let report = std::thread::scope(|s| {
        let relay = s.spawn(|| {
            run_direction("x".into(), &input, &output, Impairer::new(Config::default(), 1, 0), start, &stop, None)
        });
        for seq in 0..3 {
            sender.send(&packet(seq)).unwrap();
        }
        std::thread::sleep(Duration::from_millis(200));
        stop.store(true, Ordering::Relaxed);
        relay.join().unwrap()
    });
    assert_eq!(report.write_errors, 3);
    assert_eq!(report.stats.forwarded, 0);
    assert!(report.error.is_none(), "a failed write does not stop the relay");
}
