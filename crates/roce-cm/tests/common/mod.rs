//! What the agent tests share: draining an agent, and a MAD's delivery.

use std::time::Instant;

use roce_cm::cm::{Cm, CmEvent, Transmit};

/// Every MAD `cm` has to send.
pub fn sends(cm: &mut Cm) -> Vec<Transmit> {
    std::iter::from_fn(|| cm.poll_transmit()).collect()
}

/// Every event `cm` has for its consumer.
pub fn events(cm: &mut Cm) -> Vec<CmEvent> {
    std::iter::from_fn(|| cm.poll_event()).collect()
}

/// `t` received by `to` at `now`.
pub fn deliver(to: &mut Cm, now: Instant, t: &Transmit) {
    to.handle_mad(now, t.from, t.to, &t.mad.to_bytes());
}
