//! Each fault does what it says, at the rate it is configured for.

use std::collections::HashMap;
use std::time::Duration;

use roce_sim::{Bound, ConfigError, Fate, FaultConfig, Sim};

use crate::toys::{PORT, Peer, ip, numbered, seq_of};

const N: u32 = 10_000;
const LEN: usize = 64;

/// Endpoint 0 at 10.0.0.1 sends `payloads` to endpoint 1 at 10.0.0.2; runs until idle.
fn blast(seed: u64, faults: FaultConfig, payloads: Vec<Vec<u8>>) -> Sim<Peer> {
    let mut sim = Sim::new(seed, faults).unwrap();
    sim.add_endpoint(ip(1), Peer::sending(ip(2), payloads));
    sim.add_endpoint(ip(2), Peer::default());
    sim.run_until_idle(Bound::default()).unwrap();
    sim
}

fn numbered_burst() -> Vec<Vec<u8>> {
    (0..N).map(|i| numbered(i, LEN)).collect()
}

fn rx(sim: &Sim<Peer>) -> &Peer {
    sim.endpoint(sim.endpoint_id(ip(2)).unwrap())
}

fn assert_rate(what: &str, count: u64, total: u64, lo: f64, hi: f64) {
    let rate = count as f64 / total as f64;
    assert!((lo..=hi).contains(&rate), "{what}: {count}/{total} = {rate:.4} outside {lo}..={hi}");
}

#[test]
fn perfect_network_delivers_everything_in_order_unchanged() {
    let sim = blast(1, FaultConfig::default().with_delay(Duration::from_micros(5)), numbered_burst());
    let st = sim.stats();
    assert_eq!((st.sent, st.delivered), (u64::from(N), u64::from(N)));
    assert_eq!(st.bytes_delivered, u64::from(N) * LEN as u64);
    assert_eq!(
        (st.dropped, st.duplicated, st.reordered, st.corrupted, st.too_big, st.undeliverable),
        (0, 0, 0, 0, 0, 0)
    );
    let got = &rx(&sim).received;
    assert_eq!(got.len(), N as usize);
    for (i, r) in got.iter().enumerate() {
        assert_eq!(r.data, numbered(i as u32, LEN));
        assert_eq!((r.src, r.src_port, r.dst_port), (ip(1), PORT, PORT));
        assert_eq!(r.at, sim.start() + Duration::from_micros(5));
    }
    assert_eq!(st.per_endpoint[0].sent, u64::from(N));
    assert_eq!(st.per_endpoint[0].received, 0);
    assert_eq!(st.per_endpoint[1].received, u64::from(N));
    assert_eq!(st.per_endpoint[1].bytes_received, u64::from(N) * LEN as u64);
    assert_eq!(sim.elapsed(), Duration::from_micros(5));
}

#[test]
fn drop_rate_matches_and_the_rest_arrives() {
    for seed in [1, 2, 3] {
        let sim = blast(seed, FaultConfig::default().with_drop(0.2), numbered_burst());
        let st = sim.stats();
        assert_eq!(st.sent, u64::from(N));
        assert_rate("drop", st.dropped, st.sent, 0.17, 0.23);
        assert_eq!(st.delivered, st.sent - st.dropped);
        let got = &rx(&sim).received;
        assert_eq!(got.len() as u64, st.delivered);
        // What survives is intact and still in order.
        assert!(got.windows(2).all(|w| seq_of(&w[0].data) < seq_of(&w[1].data)));
        assert!(got.iter().all(|r| r.data == numbered(seq_of(&r.data), LEN)));
    }
}

#[test]
fn duplicate_rate_matches_and_copies_arrive() {
    for seed in [4, 5, 6] {
        let sim = blast(seed, FaultConfig::default().with_duplicate(0.05), numbered_burst());
        let st = sim.stats();
        assert_rate("duplicate", st.duplicated, st.sent, 0.04, 0.06);
        let got = &rx(&sim).received;
        assert_eq!(got.len() as u64, st.sent + st.duplicated);
        assert_eq!(st.delivered, got.len() as u64);
        let mut copies: HashMap<u32, u32> = HashMap::new();
        for r in got {
            *copies.entry(seq_of(&r.data)).or_default() += 1;
        }
        assert_eq!(copies.len(), N as usize, "every datagram arrives");
        assert_eq!(copies.values().filter(|&&c| c == 2).count() as u64, st.duplicated);
        assert!(copies.values().all(|&c| c <= 2));
    }
}

#[test]
fn corruption_rate_matches_and_flips_one_to_three_bits() {
    let payload = vec![0xa5u8; LEN];
    for seed in [7, 8, 9] {
        let sim = blast(seed, FaultConfig::default().with_corrupt(0.02), vec![payload.clone(); N as usize]);
        let st = sim.stats();
        assert_rate("corrupt", st.corrupted, st.sent, 0.015, 0.025);
        let got = &rx(&sim).received;
        assert_eq!(got.len(), N as usize);
        let mut changed = 0;
        for r in got {
            assert_eq!(r.data.len(), LEN);
            let flipped: u32 = r.data.iter().zip(&payload).map(|(a, b)| (a ^ b).count_ones()).sum();
            assert!(flipped <= 3, "{flipped} bits flipped");
            if flipped > 0 {
                changed += 1;
            }
        }
        // Every corrupted datagram really differs from what was sent.
        assert_eq!(changed, st.corrupted);
    }
}

#[test]
fn reorder_holds_datagrams_back_behind_later_ones() {
    let faults = FaultConfig::default()
        .with_reorder(0.1)
        .with_delay(Duration::from_millis(1))
        .with_reorder_delay(Duration::from_millis(2));
    for seed in [10, 11, 12] {
        let sim = blast(seed, faults, numbered_burst());
        let st = sim.stats();
        assert_rate("reorder", st.reordered, st.sent, 0.085, 0.115);
        let got = &rx(&sim).received;
        assert_eq!(got.len(), N as usize, "reordering loses nothing");
        let mut max_seen = None;
        let mut late = 0u64;
        for r in got {
            let seq = seq_of(&r.data);
            if max_seen.is_some_and(|m| seq < m) {
                late += 1;
            }
            max_seen = max_seen.max(Some(seq));
        }
        assert!(late > 0, "nothing arrived out of order");
        assert!(late <= st.reordered && late * 10 >= st.reordered * 9, "late {late}, reordered {}", st.reordered);
        // Held-back datagrams arrive within delay + [reorder_delay / 2, reorder_delay].
        for r in got {
            let t = r.at - sim.start();
            assert!(
                t == Duration::from_millis(1) || (Duration::from_millis(2)..=Duration::from_millis(3)).contains(&t)
            );
        }
    }
}

#[test]
fn mtu_drops_oversize_datagrams() {
    let sizes: Vec<usize> = (0..2000).map(|i| 4 + (i * 7919) % 3000).collect();
    let payloads = sizes.iter().enumerate().map(|(i, &len)| numbered(i as u32, len)).collect();
    let sim = blast(13, FaultConfig::default().with_mtu(1500), payloads);
    let st = sim.stats();
    let oversize = sizes.iter().filter(|&&len| len > 1500).count() as u64;
    assert!(oversize > 0 && oversize < sizes.len() as u64);
    assert_eq!(st.too_big, oversize);
    assert_eq!(st.delivered, sizes.len() as u64 - oversize);
    let got = &rx(&sim).received;
    assert!(got.iter().all(|r| r.data.len() <= 1500));
    assert!(got.iter().any(|r| r.data.len() == 1500) || !sizes.contains(&1500));
    // A payload larger than the transmit buffer is refused too, even with no MTU set.
    let sim = blast(13, FaultConfig::default(), vec![numbered(0, roce_sim::TRANSMIT_BUF_LEN + 1), numbered(1, 9000)]);
    assert_eq!((sim.stats().too_big, sim.stats().delivered), (1, 1));
}

#[test]
fn jitter_spreads_arrivals_within_bounds() {
    let faults = FaultConfig::default().with_delay(Duration::from_millis(10)).with_jitter(Duration::from_millis(5));
    let sim = blast(14, faults, (0..1000).map(|i| numbered(i, 16)).collect());
    let got = &rx(&sim).received;
    assert_eq!(got.len(), 1000);
    let offsets: Vec<Duration> = got.iter().map(|r| r.at - sim.start()).collect();
    assert!(offsets.iter().all(|t| (Duration::from_millis(10)..=Duration::from_millis(15)).contains(t)));
    // Jitter spreads the burst's arrivals, but the link stays FIFO: nothing
    // overtakes a datagram sent before it (only `reorder` reorders).
    assert!(offsets[0] < offsets[999]);
    assert!(offsets.iter().any(|t| *t > Duration::from_millis(14)));
    let seqs: Vec<u32> = got.iter().map(|r| seq_of(&r.data)).collect();
    assert_eq!(seqs, (0..1000).collect::<Vec<u32>>());
    // Arrivals are handed over in time order.
    assert!(offsets.windows(2).all(|w| w[0] <= w[1]));
}

#[test]
fn jitter_spaced_sends_use_the_whole_window() {
    // Datagrams sent far apart are not held back by FIFO order, so their
    // latencies cover delay..delay + jitter.
    let faults = FaultConfig::default().with_delay(Duration::from_millis(10)).with_jitter(Duration::from_millis(5));
    let mut sim = Sim::new(15, faults).unwrap();
    let tx = sim.add_endpoint(ip(1), Peer::default());
    sim.add_endpoint(ip(2), Peer::default());
    let mut lat = Vec::new();
    for i in 0..400u32 {
        sim.endpoint_mut(tx).queue.push_back((ip(2), numbered(i, 16)));
        let sent = sim.now();
        sim.run_until(|s| rx(s).received.len() == i as usize + 1, Bound::default()).unwrap();
        lat.push(rx(&sim).received[i as usize].at - sent);
        sim.run_for(Duration::from_millis(20), 100).unwrap();
    }
    assert!(lat.iter().all(|t| (Duration::from_millis(10)..=Duration::from_millis(15)).contains(t)));
    assert!(lat.iter().any(|t| *t < Duration::from_millis(11)) && lat.iter().any(|t| *t > Duration::from_millis(14)));
}

#[test]
fn bandwidth_serialises_each_link() {
    let faults = FaultConfig::default().with_delay(Duration::from_millis(1)).with_bandwidth(Some(1_000_000));
    let mut sim = Sim::new(15, faults).unwrap();
    // Two senders to one receiver: each directed link serialises on its own.
    sim.add_endpoint(ip(1), Peer::sending(ip(3), (0..5).map(|i| numbered(i, 1000))));
    sim.add_endpoint(ip(2), Peer::sending(ip(3), (100..105).map(|i| numbered(i, 1000))));
    let r = sim.add_endpoint(ip(3), Peer::default());
    sim.run_until_idle(Bound::default()).unwrap();
    let got = &sim.endpoint(r).received;
    assert_eq!(got.len(), 10);
    for r in got {
        let k = seq_of(&r.data) % 100;
        // 1000 bytes at 1 MB/s is 1 ms on the wire, then 1 ms of latency.
        assert_eq!(r.at - sim.start(), Duration::from_millis(u64::from(k) + 2), "datagram {}", seq_of(&r.data));
    }
    assert_eq!(sim.elapsed(), Duration::from_millis(6));
}

#[test]
fn undeliverable_and_down_are_counted_not_fatal() {
    let mut sim = Sim::new(16, FaultConfig::default()).unwrap();
    let a = sim.add_endpoint(ip(1), Peer::sending(ip(99), (0..3).map(|i| numbered(i, 8))));
    let b = sim.add_endpoint(ip(2), Peer::sending(ip(1), (0..4).map(|i| numbered(i, 8))));
    sim.set_down(b, true);
    assert!(sim.is_down(b));
    sim.run_until_idle(Bound::default()).unwrap();
    assert_eq!(sim.stats().undeliverable, 3);
    assert_eq!(sim.stats().down, 4);
    assert_eq!(sim.stats().delivered, 0);
    assert!(sim.endpoint(a).received.is_empty());
    // Back up: traffic to and from it flows again.
    sim.set_down(b, false);
    sim.endpoint_mut(b).queue.push_back((ip(1), numbered(9, 8)));
    sim.endpoint_mut(a).queue.push_back((ip(2), numbered(10, 8)));
    sim.run_until_idle(Bound::default()).unwrap();
    assert_eq!(sim.endpoint(a).received.len(), 1);
    assert_eq!(sim.endpoint(b).received.len(), 1);
}

#[test]
fn going_down_loses_datagrams_already_in_flight() {
    let mut sim = Sim::new(17, FaultConfig::default().with_delay(Duration::from_millis(10))).unwrap();
    sim.add_endpoint(ip(1), Peer::sending(ip(2), (0..5).map(|i| numbered(i, 8))));
    let b = sim.add_endpoint(ip(2), Peer::default());
    sim.run_for(Duration::from_millis(5), 100).unwrap();
    assert_eq!((sim.in_flight(), sim.elapsed()), (5, Duration::from_millis(5)));
    sim.set_down(b, true);
    sim.run_until_idle(Bound::default()).unwrap();
    assert_eq!((sim.stats().down, sim.stats().delivered, sim.in_flight()), (5, 0, 0));
    assert!(sim.endpoint(b).received.is_empty());
    assert!(sim.trace().is_empty(), "no trace unless asked for");
}

#[test]
fn one_step_sends_then_jumps_to_the_arrival() {
    let mut sim = Sim::new(17, FaultConfig::default().with_delay(Duration::from_millis(10))).unwrap();
    sim.add_endpoint(ip(1), Peer::sending(ip(2), (0..5).map(|i| numbered(i, 8))));
    let b = sim.add_endpoint(ip(2), Peer::default());
    assert!(sim.step());
    assert_eq!(sim.endpoint(b).received.len(), 5);
    assert_eq!(sim.elapsed(), Duration::from_millis(10));
    assert!(!sim.step(), "nothing left to do");
    assert_eq!(sim.elapsed(), Duration::from_millis(10));
}

#[test]
fn invalid_faults_are_typed_errors() {
    assert!(matches!(
        Sim::<Peer>::new(1, FaultConfig::default().with_drop(1.5)),
        Err(ConfigError::Probability { field: "drop", .. })
    ));
    assert!(matches!(
        Sim::<Peer>::new(1, FaultConfig::default().with_corrupt(f64::NAN)),
        Err(ConfigError::Probability { field: "corrupt", .. })
    ));
    let mut sim = Sim::<Peer>::new(1, FaultConfig::default().with_drop(0.5)).unwrap();
    let err = sim.set_faults(FaultConfig::default().with_duplicate(-1.0)).unwrap_err();
    assert!(matches!(err, ConfigError::Probability { field: "duplicate", .. }));
    assert_eq!(sim.faults().drop, 0.5, "a refused configuration leaves the old one");
    sim.set_faults(FaultConfig::default().with_drop(1.0)).unwrap();
    assert_eq!(sim.faults().drop, 1.0);
}

#[test]
fn set_faults_applies_from_then_on() {
    let mut sim = Sim::new(18, FaultConfig::default().with_drop(1.0)).unwrap();
    let a = sim.add_endpoint(ip(1), Peer::sending(ip(2), (0..10).map(|i| numbered(i, 8))));
    let b = sim.add_endpoint(ip(2), Peer::default());
    sim.run_until_idle(Bound::default()).unwrap();
    assert_eq!(sim.stats().dropped, 10);
    sim.set_faults(FaultConfig::default()).unwrap();
    sim.endpoint_mut(a).queue.extend((10..20).map(|i| (ip(2), numbered(i, 8))));
    sim.run_until_idle(Bound::default()).unwrap();
    let seqs: Vec<u32> = sim.endpoint(b).received.iter().map(|r| seq_of(&r.data)).collect();
    assert_eq!(seqs, (10..20).collect::<Vec<_>>());
}

#[test]
fn trace_records_every_fate() {
    let faults =
        FaultConfig::default().with_drop(0.3).with_duplicate(0.3).with_corrupt(0.3).with_reorder(0.3).with_mtu(100);
    let mut sim = Sim::new(19, faults).unwrap();
    sim.record_trace(true);
    let hooked = std::rc::Rc::new(std::cell::Cell::new(0usize));
    let counter = hooked.clone();
    sim.set_trace(Box::new(move |_| counter.set(counter.get() + 1)));
    let mut payloads: Vec<Vec<u8>> = (0..200).map(|i| numbered(i, 50)).collect();
    payloads.push(numbered(999, 200));
    let a = sim.add_endpoint(ip(1), Peer::sending(ip(2), payloads));
    sim.add_endpoint(ip(2), Peer::default());
    sim.endpoint_mut(a).queue.push_back((ip(77), numbered(1000, 10)));
    sim.run_until_idle(Bound::default()).unwrap();
    let trace = sim.trace();
    assert_eq!(hooked.get(), trace.len());
    let count = |f: &dyn Fn(&Fate) -> bool| trace.iter().filter(|e| f(&e.fate)).count() as u64;
    let st = sim.stats();
    assert_eq!(count(&|f| *f == Fate::Dropped), st.dropped);
    assert_eq!(count(&|f| *f == Fate::TooBig), st.too_big);
    assert_eq!(count(&|f| *f == Fate::Undeliverable), st.undeliverable);
    assert_eq!(count(&|f| *f == Fate::Delivered), st.delivered);
    assert_eq!(count(&|f| matches!(f, Fate::Scheduled { copy: true, .. })), st.duplicated);
    assert_eq!(count(&|f| matches!(f, Fate::Scheduled { reordered: true, .. })), st.reordered);
    assert_eq!((st.too_big, st.undeliverable), (1, 1));
    assert!(st.dropped > 0 && st.duplicated > 0 && st.corrupted > 0 && st.reordered > 0);
    let line = trace.iter().find(|e| e.fate == Fate::TooBig).unwrap().to_string();
    assert!(line.contains("10.0.0.1:4791 -> 10.0.0.2:4791") && line.contains("200B too big"), "{line}");
    assert!(format!("{st}").contains("too_big 1"));
    let taken = sim.take_trace();
    assert!(!taken.is_empty() && sim.trace().is_empty());
}
