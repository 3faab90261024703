//! Same seed, same endpoints: the same run, event for event. Another seed: another run.

use std::time::Duration;

use roce_sim::{Bound, Stats, TraceEvent};

use crate::reliable::{hostile, pair};
use crate::toys::{Peer, ip, numbered};

/// The reliable toy over the hostile network: (trace, stats, virtual time, what was delivered).
fn reliable_run(seed: u64) -> (Vec<TraceEvent>, Stats, Duration, Vec<Vec<u8>>) {
    let (mut sim, tx, rx) = pair(seed, hostile(), 200);
    sim.record_trace(true);
    sim.run_until(|s| s.endpoint(tx).sender().done(), Bound::default()).unwrap();
    let delivered = sim.endpoint(rx).receiver().delivered.clone();
    (sim.take_trace(), sim.stats().clone(), sim.elapsed(), delivered)
}

/// When each datagram arrived (since the start) and what it carried.
type Arrivals = Vec<(Duration, Vec<u8>)>;

/// A burst through every fault at once, with three endpoints talking: (trace, stats, arrivals).
fn burst_run(seed: u64) -> (Vec<TraceEvent>, Stats, Arrivals) {
    let faults = hostile().with_bandwidth(Some(10_000_000)).with_mtu(1000);
    let mut sim = roce_sim::Sim::new(seed, faults).unwrap();
    let mut events = Vec::new();
    sim.record_trace(true);
    sim.add_endpoint(ip(1), Peer::sending(ip(3), (0..500).map(|i| numbered(i, 16 + (i as usize * 13) % 1200))));
    sim.add_endpoint(ip(2), Peer::sending(ip(3), (500..1000).map(|i| numbered(i, 100))));
    let c = sim.add_endpoint(ip(3), Peer::sending(ip(1), (1000..1100).map(|i| numbered(i, 40))));
    sim.run_until_idle(Bound::default()).unwrap();
    events.extend(sim.take_trace());
    let start = sim.start();
    let arrivals = sim.endpoint(c).received.iter().map(|r| (r.at - start, r.data.clone())).collect();
    (events, sim.stats().clone(), arrivals)
}

#[test]
fn same_seed_same_reliable_run() {
    let a = reliable_run(31);
    let b = reliable_run(31);
    assert!(!a.0.is_empty());
    assert_eq!(a.0.len(), b.0.len());
    for (i, (x, y)) in a.0.iter().zip(&b.0).enumerate() {
        assert_eq!(x, y, "trace diverges at event {i}");
    }
    assert_eq!(a, b);
    let c = reliable_run(32);
    assert_ne!(a.0, c.0, "another seed gives another trace");
    assert_ne!((a.1.clone(), a.2), (c.1, c.2), "another seed gives other stats");
    // Whatever the seed, what gets delivered is the same.
    assert_eq!(a.3, c.3);
}

#[test]
fn same_seed_same_burst_run() {
    let a = burst_run(5);
    let b = burst_run(5);
    assert_eq!(a, b);
    let st = &a.1;
    assert!(st.dropped > 0 && st.duplicated > 0 && st.reordered > 0 && st.corrupted > 0 && st.too_big > 0, "{st}");
    let c = burst_run(6);
    assert_ne!(a.0, c.0);
    assert_ne!(a.2, c.2);
}
