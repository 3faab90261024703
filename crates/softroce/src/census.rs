//! What a context holds, published in its shared device's file
//! (`roce_host::resources`) so that `softroce rdma resource show`, as
//! iproute2's `rdma resource show` with the kernel's resource tracker,
//! counts every process's PDs, CQs, QPs and MRs, and `softroce rdma
//! statistic show` sums their engines' counters. The driver thread
//! publishes at most every [`PUBLISH_EVERY`] and only what changed, and a
//! closing context once more (its counters then stay the device's).

use std::time::{Duration, Instant};

use roce_host::resources::{Counts, MAX_LISTED, QpEntry, Resources};
use roce_proto::Device;
use roce_proto::verbs::{QpState, QpType};

/// How stale a published count may be.
pub(crate) const PUBLISH_EVERY: Duration = Duration::from_millis(20);

/// When a context last published, and what.
#[derive(Debug, Default)]
pub(crate) struct Published {
    at: Option<Instant>,
    what: Resources,
    /// The process's rdma_cm ids on this context's device.
    cm_ids: u64,
}

impl Published {
    /// Whether a publication is due at `now`.
    pub(crate) fn due(&self, now: Instant) -> bool {
        self.at.is_none_or(|t| now.saturating_duration_since(t) >= PUBLISH_EVERY)
    }

    /// Counts rdma_cm ids that came (`delta` > 0) or went on the device.
    pub(crate) fn count_cm_ids(&mut self, delta: i64) {
        self.cm_ids = self.cm_ids.saturating_add_signed(delta);
    }

    /// Publishes `dev`'s objects through `member` if they changed.
    pub(crate) fn publish(&mut self, now: Instant, dev: &Device, member: &roce_host::Member) {
        self.at = Some(now);
        let res = resources_of(dev, self.cm_ids);
        if res != self.what {
            member.publish(&res);
            self.what = res;
        }
    }
}

/// `dev`'s counts (with the process's `cm_ids` on it), its counters and its first [`MAX_LISTED`] QPs as the kernel reports
/// them (`fill_res_qp_entry`: the remote QPN, receive PSN and path
/// migration state of connected QPs only; the GSI QP as type GSI).
fn resources_of(dev: &Device, cm_ids: u64) -> Resources {
    let c = dev.object_counts();
    let n = |v: usize| v as u64;
    let counts = Counts {
        pd: n(c.pd),
        cq: n(c.cq),
        qp: n(c.qp),
        cm_id: cm_ids,
        mr: n(c.mr),
        srq: n(c.srq),
        ah: n(c.ah),
        mw: n(c.mw),
    };
    let qps = dev
        .qps()
        .take(MAX_LISTED)
        .map(|q| {
            let connected = matches!(q.qp_type(), QpType::Rc | QpType::Uc);
            QpEntry {
                qpn: q.qpn,
                qp_type: if q.qpn == roce_proto::device::GSI_QPN { 1 } else { q.qp_type() as u8 },
                state: q.state() as u8,
                // A QP gets its port at INIT (`IB_QP_PORT`); before, `/-`.
                port: if q.state() == QpState::Reset { 0 } else { q.attr.port_num.min(1) },
                remote: connected.then(|| (q.attr.dest_qp_num.get(), q.expected_psn().value())),
                sq_psn: q.next_send_psn().value(),
                // rxe has no path migration: always MIGRATED.
                path_mig_state: connected.then_some(0),
                pdn: q.init.pd.get(),
            }
        })
        .collect();
    Resources { counts, qps, counters: dev.counters().iter().map(|(_, v)| v).collect() }
}
