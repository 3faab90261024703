//! Virtual time: timeouts fire exactly when asked, without waiting in real time;
//! the run bounds turn runaway endpoints into errors that name the seed.

use std::time::{Duration, Instant};

use roce_sim::{Bound, FaultConfig, Limit, Sim, SimError};

use crate::toys::{Chatter, Peer, Timer, ip};

#[test]
fn timeout_fires_at_exactly_one_virtual_second_in_no_real_time() {
    let real = Instant::now();
    let mut sim = Sim::new(1, FaultConfig::default()).unwrap();
    let t0 = sim.now();
    let id = sim.add_endpoint(
        ip(1),
        Timer { deadline: Some(t0 + Duration::from_secs(1)), period: Duration::ZERO, remaining: 1, fired: vec![] },
    );
    let run = sim.run_until(|s| !s.endpoint(id).fired.is_empty(), Bound::default()).unwrap();
    assert_eq!(sim.endpoint(id).fired, vec![t0 + Duration::from_secs(1)]);
    assert_eq!(sim.now(), t0 + Duration::from_secs(1));
    assert_eq!(run.virtual_elapsed, Duration::from_secs(1));
    assert_eq!(run.steps, 1);
    assert_eq!(sim.stats().timeouts, 1);
    assert_eq!(sim.stats().per_endpoint[0].timeouts, 1);
    assert!(!sim.step(), "the timer is spent");
    assert!(real.elapsed() < Duration::from_millis(500), "took {:?} of real time", real.elapsed());
}

#[test]
fn a_thousand_hours_of_timers_take_no_real_time() {
    let real = Instant::now();
    let mut sim = Sim::new(2, FaultConfig::default()).unwrap();
    let t0 = sim.now();
    let hour = Duration::from_secs(3600);
    let id = sim.add_endpoint(ip(1), Timer { deadline: Some(t0 + hour), period: hour, remaining: 1000, fired: vec![] });
    let run = sim.run_until_idle(Bound::new(10_000, hour * 2000)).unwrap();
    let fired = &sim.endpoint(id).fired;
    assert_eq!(fired.len(), 1000);
    assert!(fired.iter().enumerate().all(|(i, &t)| t == t0 + hour * (i as u32 + 1)));
    assert_eq!(run.virtual_elapsed, hour * 1000);
    assert!(real.elapsed() < Duration::from_millis(500), "took {:?} of real time", real.elapsed());
}

#[test]
fn timeouts_in_the_past_fire_now_and_several_endpoints_fire_together() {
    let mut sim = Sim::new(3, FaultConfig::default()).unwrap();
    let t0 = sim.now();
    let at = |d| Timer { deadline: Some(d), period: Duration::ZERO, remaining: 1, fired: vec![] };
    sim.run_for(Duration::from_millis(10), 10).unwrap();
    let past = sim.add_endpoint(ip(1), at(t0));
    let a = sim.add_endpoint(ip(2), at(t0 + Duration::from_millis(20)));
    let b = sim.add_endpoint(ip(3), at(t0 + Duration::from_millis(20)));
    assert!(sim.step());
    assert_eq!(sim.endpoint(past).fired, vec![t0 + Duration::from_millis(10)], "time never goes back");
    assert!(sim.step());
    assert_eq!(sim.endpoint(a).fired, vec![t0 + Duration::from_millis(20)]);
    assert_eq!(sim.endpoint(b).fired, vec![t0 + Duration::from_millis(20)]);
    assert!(!sim.step());
}

#[test]
fn run_for_passes_time_even_when_idle() {
    let mut sim = Sim::<Peer>::new(4, FaultConfig::default()).unwrap();
    let run = sim.run_for(Duration::from_secs(3), 10).unwrap();
    assert_eq!((run.steps, run.virtual_elapsed, sim.elapsed()), (0, Duration::from_secs(3), Duration::from_secs(3)));
}

#[test]
fn condition_already_true_takes_no_step() {
    let mut sim = Sim::<Peer>::new(5, FaultConfig::default()).unwrap();
    let run = sim.run_until(|_| true, Bound::new(0, Duration::ZERO)).unwrap();
    assert_eq!((run.steps, run.virtual_elapsed), (0, Duration::ZERO));
}

#[test]
fn endless_chatter_is_a_livelock_naming_the_seed() {
    let real = Instant::now();
    let mut sim = Sim::new(4242, FaultConfig::default().with_delay(Duration::from_micros(100))).unwrap();
    let a = sim.add_endpoint(ip(1), Chatter::new(ip(2), Duration::from_millis(1)));
    sim.add_endpoint(ip(2), Chatter::new(ip(1), Duration::from_millis(1)));
    // Step limit.
    let err =
        sim.run_until(|s| s.endpoint(a).heard > 1_000_000, Bound::new(5000, Duration::from_secs(3600))).unwrap_err();
    match err {
        SimError::Livelock { seed, steps, limit, .. } => {
            assert_eq!((seed, steps, limit), (4242, 5000, Limit::Steps(5000)));
        }
        other => panic!("expected a livelock, got {other:?}"),
    }
    let msg = err.to_string();
    assert!(msg.contains("replay with seed 4242") && msg.contains("step limit 5000"), "{msg}");
    // Virtual-time limit: the clock stops at the bound, never past it.
    let before = sim.now();
    let err = sim.run_until(|_| false, Bound::new(u64::MAX, Duration::from_secs(2))).unwrap_err();
    match err {
        SimError::Livelock { seed: 4242, virtual_elapsed, limit: Limit::VirtualTime(l), .. } => {
            assert_eq!(l, Duration::from_secs(2));
            assert!(virtual_elapsed <= l && virtual_elapsed > l - Duration::from_millis(2), "{virtual_elapsed:?}");
            assert_eq!(sim.now() - before, virtual_elapsed);
        }
        other => panic!("expected a livelock, got {other:?}"),
    }
    assert!(err.to_string().contains("replay with seed 4242"));
    assert!(real.elapsed() < Duration::from_secs(5));
}

#[test]
fn an_endpoint_that_never_stops_sending_cannot_hang_a_step() {
    let mut sim = Sim::new(77, FaultConfig::default()).unwrap();
    let mut flood = Chatter::new(ip(2), Duration::from_secs(1));
    flood.flood = true;
    sim.add_endpoint(ip(1), flood);
    let b = sim.add_endpoint(ip(2), Chatter::new(ip(9), Duration::from_secs(1)));
    let err = sim.run_until(|_| false, Bound::new(20, Duration::from_secs(1))).unwrap_err();
    assert!(matches!(err, SimError::Livelock { seed: 77, steps: 20, limit: Limit::Steps(20), .. }), "{err:?}");
    assert!(err.to_string().contains("replay with seed 77"));
    assert_eq!(sim.elapsed(), Duration::ZERO, "time cannot advance past an endless burst");
    assert_eq!(sim.stats().sent, 1 + 20 * roce_sim::MAX_TRANSMITS_PER_STEP as u64);
    assert_eq!(sim.endpoint(b).heard, 0);
}

#[test]
fn nothing_left_to_do_before_the_condition_is_a_stall() {
    let mut sim = Sim::new(99, FaultConfig::default()).unwrap();
    sim.add_endpoint(ip(1), Peer::sending(ip(2), vec![vec![1, 2, 3]]));
    let b = sim.add_endpoint(ip(2), Peer::default());
    let err = sim.run_until(|s| s.endpoint(b).received.len() == 2, Bound::default()).unwrap_err();
    assert!(matches!(err, SimError::Stalled { seed: 99, .. }), "{err:?}");
    assert!(err.to_string().contains("replay with seed 99"));
    assert_eq!(sim.endpoint(b).received.len(), 1);
}

#[test]
fn endpoints_are_looked_up_by_address() {
    let mut sim = Sim::new(1, FaultConfig::default()).unwrap();
    let a = sim.add_endpoint(ip(1), Peer::default());
    let b = sim.add_endpoint("fd00::2".parse().unwrap(), Peer::default());
    assert_eq!((a.index(), b.index()), (0, 1));
    assert_eq!(sim.endpoint_count(), 2);
    assert_eq!(sim.endpoint_id(ip(1)), Some(a));
    assert_eq!(sim.addr(b), "fd00::2".parse::<std::net::IpAddr>().unwrap());
    assert_eq!(sim.endpoint_id(ip(3)), None);
    assert_eq!(sim.try_add_endpoint(ip(1), Peer::default()), Err(roce_sim::DuplicateAddress(ip(1))));
    assert_eq!(sim.endpoints().map(|(id, _)| id).collect::<Vec<_>>(), vec![a, b]);
    assert_eq!(sim.seed(), 1);
}
