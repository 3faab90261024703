//! The impairment logic on scripted packet sequences and virtual time: counts within tolerance, exact
//! reproducibility for a seed, FIFO order under jitter, overtaking under reorder, delays, the queue limit,
//! and corruption only of UDP payloads.

use std::time::Duration;

use roce_netem::packet::{ChecksumState, build_ipv4_udp, build_ipv6_udp, find_udp, udp_checksum_state};
use roce_netem::{Config, ConfigError, Impairer, Stats};

const MS: Duration = Duration::from_millis(1);
const US: Duration = Duration::from_micros(1);

/// An IPv4 UDP packet carrying `seq`, `!seq` (so that a flipped bit in `seq` is still noticed) and filler;
/// 100-byte payload.
fn udp4(seq: u32) -> Vec<u8> {
    let mut payload = seq.to_be_bytes().to_vec();
    payload.extend_from_slice(&(!seq).to_be_bytes());
    payload.resize(100, 0x5a);
    build_ipv4_udp([10, 233, 0, 1], [10, 233, 0, 2], 49152, 4791, &payload, true)
}

fn udp6(seq: u32) -> Vec<u8> {
    let mut payload = seq.to_be_bytes().to_vec();
    payload.resize(100, 0xa5);
    let a = [0xfd, 0, 2, 0x33, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1];
    let b = [0xfd, 0, 2, 0x33, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2];
    build_ipv6_udp(a, b, 49152, 4791, &payload)
}

/// A non-UDP IPv4 packet (protocol 6) carrying `seq`.
fn tcp_like(seq: u32) -> Vec<u8> {
    let mut p = udp4(seq);
    p[9] = 6;
    p
}

fn seq_of(p: &[u8]) -> u32 {
    let off = find_udp(p).map_or(28, |l| l.payload_offset());
    u32::from_be_bytes([p[off], p[off + 1], p[off + 2], p[off + 3]])
}

/// Pushes `n` packets made by `make`, one every `gap`, popping as time goes; then drains. Returns the
/// packets in output order with their release times.
fn run(imp: &mut Impairer, n: u32, gap: Duration, make: impl Fn(u32) -> Vec<u8>) -> Vec<(Duration, Vec<u8>)> {
    let mut out = Vec::new();
    let mut now = Duration::ZERO;
    for seq in 0..n {
        while let Some(p) = imp.pop_due(now) {
            out.push((now, p));
        }
        imp.push(now, make(seq));
        while let Some(p) = imp.pop_due(now) {
            out.push((now, p));
        }
        now += gap;
    }
    while let Some(t) = imp.next_release() {
        let p = imp.pop_due(t).expect("due at its release time");
        out.push((t, p));
    }
    assert_eq!(imp.pending(), 0);
    out
}

fn within(name: &str, value: u64, expected: f64, tolerance: f64) {
    assert!((value as f64 - expected).abs() <= tolerance, "{name} = {value}, expected {expected} ± {tolerance}");
}

#[test]
fn no_impairment_forwards_everything_unchanged_in_order() {
    let mut imp = Impairer::new(Config::default(), 1, 0);
    let out = run(&mut imp, 1000, US, udp4);
    assert_eq!(out.len(), 1000);
    for (i, (t, p)) in out.iter().enumerate() {
        assert_eq!(*p, udp4(i as u32));
        assert_eq!(*t, US * i as u32, "released the moment it arrived");
    }
    let s = imp.stats();
    assert_eq!(s, Stats { received: 1000, forwarded: 1000, ..Stats::default() });
}

#[test]
fn counts_are_within_tolerance() {
    let n = 20_000u32;
    let cfg = Config { drop: 0.1, dup: 0.05, reorder: 0.08, corrupt: 0.03, ..Config::default() };
    let mut imp = Impairer::new(cfg, 42, 0);
    let out = run(&mut imp, n, 50 * US, udp4);
    let s = imp.stats();
    let nf = f64::from(n);
    // Tolerances are about 5 standard deviations.
    within("dropped", s.dropped, nf * 0.1, 5.0 * (nf * 0.1 * 0.9).sqrt());
    let kept = (n as u64 - s.dropped) as f64;
    within("duplicated", s.duplicated, kept * 0.05, 5.0 * (kept * 0.05 * 0.95).sqrt());
    let copies = kept + s.duplicated as f64;
    within("reordered", s.reordered, copies * 0.08, 5.0 * (copies * 0.08 * 0.92).sqrt());
    within("corrupted", s.corrupted, copies * 0.03, 5.0 * (copies * 0.03 * 0.97).sqrt());
    assert_eq!(s.received, u64::from(n));
    assert_eq!(s.forwarded, s.received - s.dropped + s.duplicated);
    assert_eq!(out.len() as u64, s.forwarded);
    // What came out: every copy is an original or has one corrupted payload bit (with a valid checksum).
    let mut corrupted = 0;
    for (_, p) in &out {
        if *p != udp4(seq_of(p)) {
            corrupted += 1;
        }
        assert_eq!(udp_checksum_state(p), Some(ChecksumState::Valid));
    }
    assert_eq!(corrupted, s.corrupted);
}

#[test]
fn same_seed_same_result_different_seed_different_result() {
    let cfg = Config { drop: 0.1, dup: 0.1, reorder: 0.1, corrupt: 0.1, jitter: MS, ..Config::default() };
    let a = run(&mut Impairer::new(cfg.clone(), 7, 0), 2000, 100 * US, udp4);
    let b = run(&mut Impairer::new(cfg.clone(), 7, 0), 2000, 100 * US, udp4);
    let c = run(&mut Impairer::new(cfg.clone(), 8, 0), 2000, 100 * US, udp4);
    let d = run(&mut Impairer::new(cfg, 7, 1), 2000, 100 * US, udp4);
    assert_eq!(a, b);
    assert_ne!(a, c, "another seed");
    assert_ne!(a, d, "another stream (the other direction)");
}

#[test]
fn decisions_do_not_shift_when_other_impairments_change() {
    // Same seed: which packets are dropped and duplicated does not depend on corruption, reordering or
    // jitter being on (a fixed number of random draws per packet).
    let plain = Config { drop: 0.2, dup: 0.2, ..Config::default() };
    let busy = Config { corrupt: 0.5, reorder: 0.5, jitter: MS, ..plain.clone() };
    // The sequence number is carried three times: a flipped bit in one copy is outvoted.
    let make = |seq: u32| {
        let payload: Vec<u8> = [seq, seq, seq].iter().flat_map(|s| s.to_be_bytes()).chain([7; 88]).collect();
        build_ipv4_udp([10, 233, 0, 1], [10, 233, 0, 2], 49152, 4791, &payload, true)
    };
    let vote = |p: &[u8]| {
        let w = |i: usize| u32::from_be_bytes([p[28 + i], p[29 + i], p[30 + i], p[31 + i]]);
        let (x, y, z) = (w(0), w(4), w(8));
        if x == y || x == z { x } else { y }
    };
    let seqs = |cfg: Config| {
        let out = run(&mut Impairer::new(cfg, 99, 0), 3000, 10 * MS, make);
        let mut s: Vec<u32> = out.iter().map(|(_, p)| vote(p)).collect();
        s.sort_unstable();
        s
    };
    let busy_out = seqs(busy);
    assert_eq!(seqs(plain), busy_out);
    assert!(busy_out.len() > 2000 && busy_out.len() < 3000);
}

#[test]
fn drop_all_and_dup_all() {
    let mut imp = Impairer::new(Config { drop: 1.0, ..Config::default() }, 1, 0);
    assert!(run(&mut imp, 500, US, udp4).is_empty());
    assert_eq!(imp.stats().dropped, 500);

    let mut imp = Impairer::new(Config { dup: 1.0, ..Config::default() }, 1, 0);
    let out = run(&mut imp, 500, US, udp4);
    assert_eq!(out.len(), 1000);
    for (i, (_, p)) in out.iter().enumerate() {
        assert_eq!(*p, udp4(i as u32 / 2), "the duplicate follows its original");
    }
    assert_eq!(imp.stats().duplicated, 500);
}

#[test]
fn constant_delay() {
    let mut imp = Impairer::new(Config { delay: 10 * MS, ..Config::default() }, 1, 0);
    imp.push(Duration::ZERO, udp4(0));
    imp.push(MS, udp4(1));
    assert_eq!(imp.next_release(), Some(10 * MS));
    assert!(imp.pop_due(10 * MS - US).is_none());
    assert_eq!(imp.pop_due(10 * MS), Some(udp4(0)));
    assert!(imp.pop_due(10 * MS).is_none());
    assert_eq!(imp.pop_due(11 * MS), Some(udp4(1)));
}

#[test]
fn jitter_keeps_fifo_order_and_varies_delay() {
    let cfg = Config { delay: 10 * MS, jitter: 8 * MS, ..Config::default() };
    let mut imp = Impairer::new(cfg, 5, 0);
    let gap = 100 * US;
    let out = run(&mut imp, 5000, gap, udp4);
    assert_eq!(out.len(), 5000);
    let mut delays = Vec::new();
    for (i, (t, p)) in out.iter().enumerate() {
        assert_eq!(seq_of(p), i as u32, "jitter alone never reorders");
        let delay = *t - gap * i as u32;
        assert!(delay >= 2 * MS && delay <= 18 * MS + gap, "delay {delay:?} outside 10ms ± 8ms");
        delays.push(delay);
    }
    let min = delays.iter().min().unwrap();
    let max = delays.iter().max().unwrap();
    assert!(*max - *min > 5 * MS, "delays vary: {min:?}..{max:?}");
}

#[test]
fn jitter_without_delay_is_fifo_too() {
    let cfg = Config { jitter: 3 * MS, ..Config::default() };
    let out = run(&mut Impairer::new(cfg, 11, 0), 3000, 10 * US, udp4);
    let seqs: Vec<u32> = out.iter().map(|(_, p)| seq_of(p)).collect();
    assert_eq!(seqs, (0..3000).collect::<Vec<_>>());
}

#[test]
fn reorder_lets_later_packets_overtake() {
    let cfg = Config { reorder: 0.1, reorder_delay: 2 * MS, ..Config::default() };
    let mut imp = Impairer::new(cfg, 3, 0);
    let out = run(&mut imp, 5000, 100 * US, udp4);
    assert_eq!(out.len(), 5000);
    let seqs: Vec<u32> = out.iter().map(|(_, p)| seq_of(p)).collect();
    let mut sorted = seqs.clone();
    sorted.sort_unstable();
    assert_eq!(sorted, (0..5000).collect::<Vec<_>>(), "nothing lost or duplicated");
    // A held-back packet arrives after later ones: count packets that arrive after a higher sequence.
    let mut highest = 0;
    let mut late = 0u64;
    for &s in &seqs {
        if s < highest {
            late += 1;
        }
        highest = highest.max(s);
    }
    let reordered = imp.stats().reordered;
    within("reordered", reordered, 500.0, 5.0 * (5000.0f64 * 0.1 * 0.9).sqrt());
    // With a packet every 0.1 ms and 2 ms of hold-back, every held-back packet is overtaken.
    assert_eq!(late, reordered);
    // And held back by exactly reorder_delay.
    for (t, p) in &out {
        let arrived = 100 * US * seq_of(p);
        assert!(*t == arrived || *t == arrived + 2 * MS, "released at {t:?}, arrived {arrived:?}");
    }
}

#[test]
fn queue_limit_drops_the_excess() {
    let cfg = Config { delay: Duration::from_secs(1), limit: 10, ..Config::default() };
    let mut imp = Impairer::new(cfg, 1, 0);
    for seq in 0..25 {
        imp.push(Duration::ZERO, udp4(seq));
    }
    assert_eq!(imp.pending(), 10);
    assert_eq!(imp.stats().dropped, 15);
}

#[test]
fn corrupt_all_udp_flips_one_payload_bit_with_valid_checksum() {
    for (family, make) in [("ipv4", udp4 as fn(u32) -> Vec<u8>), ("ipv6", udp6)] {
        let mut imp = Impairer::new(Config { corrupt: 1.0, ..Config::default() }, 2, 0);
        let out = run(&mut imp, 300, US, make);
        assert_eq!(imp.stats().corrupted, 300, "{family}");
        for (i, (_, p)) in out.iter().enumerate() {
            let orig = make(i as u32);
            let loc = find_udp(&orig).unwrap();
            let diffs: u32 = p[loc.payload_offset()..]
                .iter()
                .zip(&orig[loc.payload_offset()..])
                .map(|(a, b)| (a ^ b).count_ones())
                .sum();
            assert_eq!(diffs, 1, "{family}: exactly one payload bit");
            assert_eq!(p[..loc.checksum_offset()], orig[..loc.checksum_offset()], "{family}: headers untouched");
            assert_eq!(udp_checksum_state(p), Some(ChecksumState::Valid), "{family}");
        }
    }
}

#[test]
fn corrupt_never_touches_non_udp() {
    let mut imp = Impairer::new(Config { corrupt: 1.0, ..Config::default() }, 2, 0);
    let out = run(&mut imp, 300, US, tcp_like);
    assert_eq!(imp.stats().corrupted, 0);
    for (i, (_, p)) in out.iter().enumerate() {
        assert_eq!(*p, tcp_like(i as u32));
    }
}

#[test]
fn ipv4_without_checksum_stays_without_checksum() {
    let make = |seq: u32| {
        let mut payload = seq.to_be_bytes().to_vec();
        payload.resize(64, 1);
        build_ipv4_udp([10, 0, 0, 1], [10, 0, 0, 2], 1, 4791, &payload, false)
    };
    let mut imp = Impairer::new(Config { corrupt: 1.0, ..Config::default() }, 2, 0);
    for (i, (_, p)) in run(&mut imp, 100, US, make).iter().enumerate() {
        assert_ne!(*p, make(i as u32));
        assert_eq!(udp_checksum_state(p), Some(ChecksumState::Absent));
    }
}

#[test]
fn config_validation() {
    assert_eq!(Config::default().validate(), Ok(()));
    let bad = Config { dup: 1.5, ..Config::default() };
    assert_eq!(bad.validate(), Err(ConfigError::Probability { name: "dup", value: 1.5 }));
    assert!(Config { corrupt: f64::NAN, ..Config::default() }.validate().is_err());
    assert_eq!(Config { limit: 0, ..Config::default() }.validate(), Err(ConfigError::Limit));
}

#[test]
fn stats_line_round_trips() {
    let s = Stats { received: 0, forwarded: 1, dropped: 2, duplicated: 3, reordered: 4, corrupted: 5 };
    let line = format!("a->b (x -> y): {s}");
    assert_eq!(line, "a->b (x -> y): forwarded 1, dropped 2, duplicated 3, reordered 4, corrupted 5");
    assert_eq!(Stats::parse(&line), Some(s));
    assert_eq!(Stats::parse(&format!("{line}, write errors 3")), Some(s));
    assert_eq!(Stats::parse("forwarded 1, dropped 2"), None);
}
