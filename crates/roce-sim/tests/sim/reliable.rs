//! A toy stop-and-wait protocol gets 1,000 messages through a hostile network,
//! and gives up (ending the run) when its peer is taken down.

use std::time::{Duration, Instant};

use roce_sim::{Bound, EndpointId, FaultConfig, Sim, SimError};

use crate::toys::{Saw, SawReceiver, SawSender, ip, message};

const MESSAGES: u32 = 1000;
const RTO: Duration = Duration::from_millis(12);
const MAX_RETRIES: u32 = 40;

pub fn hostile() -> FaultConfig {
    FaultConfig::default()
        .with_drop(0.2)
        .with_duplicate(0.05)
        .with_reorder(0.1)
        .with_corrupt(0.02)
        .with_delay(Duration::from_millis(1))
        .with_jitter(Duration::from_micros(500))
        .with_reorder_delay(Duration::from_millis(4))
}

/// A sender at 10.0.0.1 and a receiver at 10.0.0.2.
pub fn pair(seed: u64, faults: FaultConfig, messages: u32) -> (Sim<Saw>, EndpointId, EndpointId) {
    let mut sim = Sim::new(seed, faults).unwrap();
    let tx = sim.add_endpoint(ip(1), Saw::Sender(SawSender::new(ip(2), messages, RTO, MAX_RETRIES)));
    let rx = sim.add_endpoint(ip(2), Saw::Receiver(SawReceiver::default()));
    (sim, tx, rx)
}

fn bound() -> Bound {
    Bound::new(2_000_000, Duration::from_secs(600))
}

#[test]
fn stop_and_wait_delivers_a_thousand_messages_in_order_for_fifty_seeds() {
    let real = Instant::now();
    let mut totals = (0, 0, 0, 0, 0);
    for seed in 0..50 {
        let (mut sim, tx, rx) = pair(seed, hostile(), MESSAGES);
        let run = sim.run_until(|s| s.endpoint(tx).sender().done(), bound()).unwrap_or_else(|e| {
            panic!("seed {seed}: {e}\n{}", sim.stats());
        });
        let (sender, receiver) = (sim.endpoint(tx).sender(), sim.endpoint(rx).receiver());
        assert!(!sender.gave_up, "seed {seed}");
        assert_eq!(receiver.delivered.len(), MESSAGES as usize, "seed {seed}");
        for (i, m) in receiver.delivered.iter().enumerate() {
            assert_eq!(*m, message(i as u32), "seed {seed}: message {i}");
        }
        // The network really was hostile, and the toy really coped with it.
        let st = sim.stats();
        assert!(st.dropped > 0 && st.duplicated > 0 && st.reordered > 0 && st.corrupted > 0, "seed {seed}: {st}");
        assert!(sender.transmissions > u64::from(MESSAGES), "seed {seed}: no retransmission");
        assert!(receiver.rejected + sender.bad_acks > 0, "seed {seed}: no corruption detected");
        assert!(run.virtual_elapsed > Duration::from_millis(2 * u64::from(MESSAGES)), "seed {seed}");
        totals.0 += st.dropped;
        totals.1 += st.duplicated;
        totals.2 += st.reordered;
        totals.3 += receiver.rejected + sender.bad_acks;
        totals.4 += receiver.duplicates;
    }
    assert!(totals.4 > 0, "no duplicate message ever reached the receiver: {totals:?}");
    eprintln!("50 seeds in {:?}: dropped/duplicated/reordered/rejected/duplicates {totals:?}", real.elapsed());
}

#[test]
fn a_peer_set_down_makes_the_sender_give_up_and_the_run_end() {
    let (mut sim, tx, rx) = pair(7, hostile(), MESSAGES);
    sim.run_until(|s| s.endpoint(rx).receiver().delivered.len() >= 100, bound()).unwrap();
    sim.set_down(rx, true);
    let down_at = sim.now();
    // Waiting for all the messages can only end one way: the sender gives up, then nothing is left to do.
    let err = sim.run_until(|s| s.endpoint(rx).receiver().delivered.len() == MESSAGES as usize, bound()).unwrap_err();
    assert!(matches!(err, SimError::Stalled { seed: 7, .. }), "{err}");
    let sender = sim.endpoint(tx).sender();
    assert!(sender.gave_up);
    assert_eq!(sender.retries, MAX_RETRIES + 1);
    assert!(!sender.done());
    let delivered = sim.endpoint(rx).receiver().delivered.len();
    assert!((100..=101).contains(&delivered), "{delivered}");
    assert!(sim.stats().down >= u64::from(MAX_RETRIES), "{}", sim.stats());
    // Giving up took the retry budget's worth of timeouts (the first retry may already have been under way).
    let waited = sim.now() - down_at;
    assert!(waited >= RTO * (MAX_RETRIES - 1) && waited <= RTO * (MAX_RETRIES + 1), "{waited:?}");
    assert!(!sim.step());
}

#[test]
fn waiting_for_the_give_up_succeeds() {
    let (mut sim, tx, rx) = pair(8, FaultConfig::default().with_delay(Duration::from_millis(1)), MESSAGES);
    sim.run_until(|s| s.endpoint(rx).receiver().delivered.len() >= 10, bound()).unwrap();
    sim.set_down(rx, true);
    let run = sim.run_until(|s| s.endpoint(tx).sender().gave_up, bound()).unwrap();
    assert!(run.virtual_elapsed >= RTO * MAX_RETRIES);
    assert_eq!(sim.run_until_idle(bound()).unwrap().steps, 0);
}
