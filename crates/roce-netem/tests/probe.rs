//! Probe datagrams (build, classify every single-bit flip, tally), the command-line value parsers, and the
//! paced sender with the checking receiver over loopback (no root needed).

use std::net::UdpSocket;
use std::time::Duration;

use roce_netem::parse::{parse_duration, parse_probability};
use roce_netem::probe::{
    Counter, HEADER_LEN, Probe, RecvOptions, SendOptions, Tally, Verdict, classify, make_datagram, receive_probes,
    send_probes,
};

#[test]
fn intact_datagrams_are_recognised() {
    for size in [12, 13, 64, 1000, 8972] {
        for seq in [0, 1, 77, u32::MAX] {
            let d = make_datagram(seq, size);
            assert_eq!(d.len(), size);
            assert_eq!(classify(&d, size), Verdict::Intact(seq));
        }
    }
    assert_eq!(make_datagram(5, 3).len(), HEADER_LEN, "raised to the header size");
}

#[test]
fn every_single_bit_flip_is_recognised_as_such() {
    let probe = Probe::new(64);
    for seq in [0u32, 12345, u32::MAX] {
        let d = probe.datagram(seq);
        for bit in 0..64 * 8 {
            let mut c = d.clone();
            c[bit / 8] ^= 0x80 >> (bit % 8);
            let v = probe.classify(&c);
            let Verdict::OneBitFlipped(got) = v else { panic!("bit {bit}: {v:?}") };
            // A flip inside the sequence number leaves it ambiguous which copy was hit; outside it, the
            // sequence number is exact.
            if !(4..12).contains(&(bit / 8)) {
                assert_eq!(got, seq, "bit {bit}");
            } else {
                assert!(got == seq || (got ^ seq).count_ones() == 1, "bit {bit}: {got}");
            }
        }
    }
}

#[test]
fn two_flips_or_wrong_size_are_garbled() {
    let probe = Probe::new(100);
    let d = probe.datagram(9);
    // (Not bits 33 and 65: the same bit of the sequence number and of its complement make another valid
    // datagram. The relay never flips two bits.)
    for (a, b) in [(0, 1), (5, 700), (40, 41), (100, 799), (33, 66)] {
        let mut c = d.clone();
        c[a / 8] ^= 0x80 >> (a % 8);
        c[b / 8] ^= 0x80 >> (b % 8);
        assert_eq!(probe.classify(&c), Verdict::Garbled, "bits {a} and {b}");
    }
    assert_eq!(probe.classify(&d[..99]), Verdict::Garbled);
    assert_eq!(probe.classify(&[d.clone(), vec![0]].concat()), Verdict::Garbled);
    assert_eq!(probe.classify(&[]), Verdict::Garbled);
}

#[test]
fn counter_tallies_duplicates_corruption_and_lateness() {
    let mut c = Counter::default();
    for v in [
        Verdict::Intact(0),
        Verdict::Intact(2),
        Verdict::Intact(1), // late
        Verdict::Intact(2), // duplicate
        Verdict::OneBitFlipped(3),
        Verdict::Garbled,
        Verdict::Intact(4),
    ] {
        c.record(v);
    }
    let t = c.tally(Some(6));
    assert_eq!(
        t,
        Tally {
            received: 7,
            intact: 5,
            unique: 4,
            duplicates: 1,
            corrupted: 1,
            garbled: 1,
            late: 1,
            missing_sample: vec![3, 5]
        }
    );
    let line = t.to_string();
    assert_eq!(line, "received=7 intact=5 unique=4 duplicates=1 corrupted=1 garbled=1 late=1 missing_sample=3,5");
    assert_eq!(Tally::parse(&line), Some(t));
    assert_eq!(Tally::parse("received=1 intact=1"), None);
}

#[test]
fn durations_parse() {
    assert_eq!(parse_duration("0"), Ok(Duration::ZERO));
    assert_eq!(parse_duration("10ms"), Ok(Duration::from_millis(10)));
    assert_eq!(parse_duration("250us"), Ok(Duration::from_micros(250)));
    assert_eq!(parse_duration("250µs"), Ok(Duration::from_micros(250)));
    assert_eq!(parse_duration("1.5s"), Ok(Duration::from_millis(1500)));
    assert_eq!(parse_duration("2m"), Ok(Duration::from_secs(120)));
    assert_eq!(parse_duration("100ns"), Ok(Duration::from_nanos(100)));
    for bad in ["", "10", "ms", "10 parsecs", "-1ms", "1.2.3s"] {
        assert!(parse_duration(bad).is_err(), "{bad:?}");
    }
}

#[test]
fn probabilities_parse() {
    assert_eq!(parse_probability("0"), Ok(0.0));
    assert_eq!(parse_probability("0.05"), Ok(0.05));
    assert_eq!(parse_probability("5%"), Ok(0.05));
    assert_eq!(parse_probability("100%"), Ok(1.0));
    assert_eq!(parse_probability("1"), Ok(1.0));
    for bad in ["", "1.01", "-0.1", "101%", "NaN", "five"] {
        assert!(parse_probability(bad).is_err(), "{bad:?}");
    }
}

#[test]
fn send_and_receive_over_loopback() {
    let rx = UdpSocket::bind("127.0.0.1:0").unwrap();
    let to = rx.local_addr().unwrap();
    let receiver = std::thread::spawn(move || {
        let opts = RecvOptions {
            size: 1000,
            expected: Some(300),
            idle: Duration::from_millis(500),
            timeout: Duration::from_secs(20),
        };
        receive_probes(&rx, &opts, None).unwrap()
    });
    let tx = UdpSocket::bind("127.0.0.1:0").unwrap();
    tx.connect(to).unwrap();
    let opts = SendOptions { count: 300, size: 1000, burst: 16, gap: Duration::from_micros(300) };
    assert_eq!(send_probes(&tx, &opts).unwrap(), 300);
    let t = receiver.join().unwrap();
    assert_eq!(
        t,
        Tally { received: 300, intact: 300, unique: 300, ..Tally::default() },
        "loopback loses, reorders and corrupts nothing"
    );
}
