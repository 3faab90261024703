//! Shared by the multi-process tests of this crate.
#![allow(dead_code)]

/// `len` bytes of a xorshift stream seeded by `seed`: every iteration of a
/// transfer writes other bytes, so a stale or misplaced write shows.
pub fn pattern(len: usize, seed: u64) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

/// This side of a CM exchange for `qp` on `ctx`'s device: rxe's ACK delay,
/// MTU 1024 (rping's path), the first PSN `psn`.
#[allow(dead_code)]
pub fn local_end(ctx: &softroce::Context, qp: &softroce::Qp, psn: u32) -> roce_cm::cma::LocalEnd {
    roce_cm::cma::LocalEnd {
        ca_guid: ctx.device().node_guid(),
        ack_delay: 15,
        qpn: qp.qpn().get(),
        psn: roce_wire::Psn::new(psn),
        mtu: roce_cm::wire::PathMtu::Mtu1024,
        tos: 0,
    }
}
