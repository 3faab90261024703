//! What the UC and UD simulations share: a device, draining a CQ, and the
//! seed loop that collects failures and prints the figures.

use std::net::IpAddr;

use roce_proto::verbs::{WcOpcode, WcStatus};
use roce_proto::{Device, DeviceConfig, Limits, Mtu, Wc};
use roce_sim::{EndpointId, Sim, SimDevice};

/// A device at `addr` checking every ICRC, with port MTU `mtu`.
pub fn device(addr: IpAddr, seed: u64, mtu: Mtu) -> Device {
    Device::new(DeviceConfig {
        gids: vec![addr],
        seed,
        icrc_policy: roce_wire::IcrcPolicy::Full,
        active_mtu: mtu,
        limits: Limits::default(),
        udp_src_port: None,
    })
}

/// Every completion waiting in CQ `cq` of endpoint `id`.
pub fn drain_cq(sim: &mut Sim<SimDevice>, id: EndpointId, cq: roce_proto::CqHandle) -> Vec<Wc> {
    let mut buf = vec![Wc::new(0, WcStatus::Success, WcOpcode::Send, 0); 64];
    let mut all = Vec::new();
    loop {
        let n = sim.endpoint_mut(id).dev.poll_cq(cq, &mut buf).unwrap();
        if n == 0 {
            return all;
        }
        all.extend_from_slice(&buf[..n]);
    }
}

/// Runs `run(seed, lossy)` for `seeds` seeds (odd ones lossy), prints how
/// many `what` were sent and receives checked, and fails with every failure.
pub fn run_seeds(label: &str, what: &str, seeds: u64, run: impl Fn(u64, bool) -> Result<(usize, usize), String>) {
    let (mut sent, mut received) = (0, 0);
    let mut failures = Vec::new();
    for seed in 0..seeds {
        match run(seed, seed % 2 == 1) {
            Ok((s, r)) => {
                sent += s;
                received += r;
            }
            Err(e) => failures.push(e),
        }
    }
    println!("{label}: {seeds} seeds, {sent} {what} sent, {received} receive completions checked");
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
