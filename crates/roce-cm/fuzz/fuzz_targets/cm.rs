//! The CM agent under arbitrary input: the bytes are a script of MADs
//! (taken from the input, or mutations of real ones), timer runs and
//! consumer calls against two agents. Nothing may panic, every timer must
//! lie in the future of the time it was armed at, and once the script ends
//! and every timer has run, no connection may be left behind.

#![no_main]

use std::net::{IpAddr, Ipv4Addr};
use std::time::{Duration, Instant};

use libfuzzer_sys::fuzz_target;
use roce_cm::cm::{Cm, CmConfig, CmEvent, CommId, ConnectParams};
use roce_cm::wire::{MAD_LEN, RejReason, RepRepr, ReqRepr};

const A: IpAddr = IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1));
const B: IpAddr = IpAddr::V4(Ipv4Addr::new(10, 0, 0, 2));

fuzz_target!(|data: &[u8]| {
    let cfg = |g| CmConfig { ca_guid: g, tid_hi: 1, ack_delay: 15, comm_id_mask: 0, comm_id_tag: 0 };
    let mut cms = [Cm::new(cfg(1), 1), Cm::new(cfg(2), 2)];
    let _ = cms[1].listen(0x1061c06);
    let start = Instant::now();
    let mut now = start;
    let mut ids: Vec<(usize, CommId)> = Vec::new();
    let mut last_mad = [0u8; MAD_LEN];
    let mut input = data;
    while let Some((&op, rest)) = input.split_first() {
        input = rest;
        let side = usize::from(op & 1);
        let pick = |ids: &[(usize, CommId)], k: u8| ids.get(usize::from(k) % ids.len().max(1)).copied();
        match op >> 1 {
            0 => {
                let req = ReqRepr {
                    service_id: 0x1061c06,
                    local_qpn: 0x11,
                    remote_cm_response_timeout: 20,
                    local_cm_response_timeout: 20,
                    max_cm_retries: 15,
                    ..ReqRepr::default()
                };
                let id = cms[0].connect(now, ConnectParams { local: A, peer: B, req, packet_life_time: 18 });
                ids.push((0, id));
            }
            1 => {
                // Raw bytes from the input as a MAD.
                let n = input.len().min(MAD_LEN);
                last_mad[..n].copy_from_slice(&input[..n]);
                input = &input[n..];
                cms[side].handle_mad(now, A, B, &last_mad);
            }
            2 => {
                // A real MAD from the other side, with one byte changed.
                if let Some(t) = cms[1 - side].poll_transmit() {
                    let mut m = t.mad.to_bytes();
                    if let Some((&at, rest)) = input.split_first() {
                        input = rest;
                        m[usize::from(at)] ^= rest.first().copied().unwrap_or(1);
                    }
                    cms[side].handle_mad(now, t.from, t.to, &m);
                }
            }
            3 => {
                // Deliver the other side's next MAD as it is.
                if let Some(t) = cms[1 - side].poll_transmit() {
                    cms[side].handle_mad(now, t.from, t.to, &t.mad.to_bytes());
                }
            }
            4 => {
                let step = input.first().copied().unwrap_or(0);
                now += Duration::from_millis(u64::from(step) * 97);
                for cm in &mut cms {
                    cm.handle_timeout(now);
                }
            }
            5..=10 => {
                let k = input.first().copied().unwrap_or(0);
                if let Some((s, id)) = pick(&ids, k) {
                    let cm = &mut cms[s];
                    let _ = match op >> 1 {
                        5 => cm.accept(now, id, RepRepr { local_qpn: 0x12, ..RepRepr::default() }),
                        6 => cm.reject(now, id, RejReason::CONSUMER_DEFINED, [0; 148]),
                        7 => cm.establish(now, id),
                        8 => cm.disconnect(now, id),
                        9 => {
                            cm.destroy(now, id);
                            Ok(())
                        }
                        _ => Ok(()),
                    };
                }
            }
            _ => {}
        }
        for (s, cm) in cms.iter_mut().enumerate() {
            while let Some(e) = cm.poll_event() {
                if let CmEvent::ReqReceived { id, .. } = e {
                    ids.push((s, id));
                }
            }
            if let Some(t) = cm.poll_timeout() {
                assert!(t > start, "a timer before the start");
            }
        }
    }
    // Every timer runs out: nothing is left, whatever the script did.
    for _ in 0..64 {
        now += Duration::from_secs(3600);
        for cm in &mut cms {
            cm.handle_timeout(now);
            while cm.poll_transmit().is_some() {}
        }
    }
    for cm in &cms {
        assert_eq!(cm.poll_timeout(), None, "a timer left after days");
    }
});
