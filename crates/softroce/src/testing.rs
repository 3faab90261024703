//! The test harness the integration tests of softroce and softroce-cli
//! build their ends from: a context with a PD, a CQ, an MR and an RC QP
//! ([`End`]), two of them connected to each other ([`connect_pair`]), and a
//! wait for one completion. Compiled only for tests and with the `testing`
//! feature (the crate's own dev-dependency and softroce-cli's turn it on);
//! none of it is softroce's API. A harness call that fails panics with what
//! failed, as a test would.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use crate::config::DeviceInfo;
use crate::{AccessFlags, Context, Cq, Mr, Options, Pd, Qp, QpInit, Wc, WcOpcode, WcStatus};

/// Every access a test's memory region may need: local write, remote
/// write, read and atomics.
pub const ALL_ACCESS: AccessFlags = AccessFlags(
    AccessFlags::LOCAL_WRITE.0
        | AccessFlags::REMOTE_WRITE.0
        | AccessFlags::REMOTE_READ.0
        | AccessFlags::REMOTE_ATOMIC.0,
);

/// What an [`End`] is made of.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EndSpec {
    /// Entries of its CQ (the QP's send and receive CQ).
    pub cq_entries: u32,
    /// Bytes of its memory region.
    pub mr_len: usize,
    /// The region's access.
    pub access: AccessFlags,
    /// Send and receive WRs its QP holds.
    pub qp_depth: u32,
}

impl Default for EndSpec {
    /// A CQ of 256, 1 MiB with [`ALL_ACCESS`], a QP of 128.
    fn default() -> EndSpec {
        EndSpec { cq_entries: 256, mr_len: 1 << 20, access: ALL_ACCESS, qp_depth: 128 }
    }
}

/// One end of a test: a context and the objects a test moves data with.
#[derive(Debug)]
pub struct End {
    /// Its device's context.
    pub ctx: Context,
    /// Its protection domain.
    pub pd: Pd,
    /// Its one CQ, the QP's send and receive CQ.
    pub cq: Cq,
    /// Its QP (RC unless the caller changed its [`QpInit`]).
    pub qp: Qp,
    /// Its memory region, of [`EndSpec::mr_len`] bytes.
    pub mr: Mr,
}

impl End {
    /// Opens `info` with `opts` and makes `spec`'s objects.
    pub fn open(info: &DeviceInfo, opts: Options, spec: EndSpec) -> End {
        End::open_with(info, opts, spec, |_| {})
    }

    /// [`End::open`], with the QP's creation attributes changed by `init`
    /// (its type, caps, an SRQ...).
    pub fn open_with(info: &DeviceInfo, opts: Options, spec: EndSpec, init: impl FnOnce(&mut QpInit)) -> End {
        let ctx = Context::open_with(info, opts).unwrap_or_else(|e| panic!("opening {}: {e}", info.name));
        End::on(&ctx, spec, init)
    }

    /// `spec`'s objects on a context already open (another end on it).
    pub fn on(ctx: &Context, spec: EndSpec, init: impl FnOnce(&mut QpInit)) -> End {
        let pd = ctx.alloc_pd().unwrap_or_else(|e| panic!("a PD: {e}"));
        let cq = ctx.create_cq(spec.cq_entries, None).unwrap_or_else(|e| panic!("a CQ of {}: {e}", spec.cq_entries));
        let mr = pd.reg_mr(spec.mr_len, spec.access).unwrap_or_else(|e| panic!("an MR of {}: {e}", spec.mr_len));
        let mut qp_init = QpInit::rc(&cq, &cq, spec.qp_depth);
        init(&mut qp_init);
        let qp = pd.create_qp(qp_init).unwrap_or_else(|e| panic!("a QP: {e}"));
        End { ctx: ctx.clone(), pd, cq, qp, mr }
    }

    /// The next completion of its CQ, within `within`.
    pub fn wait_one(&self, within: Duration) -> Wc {
        wait_one(&self.cq, within)
    }
}

/// Connects the QPs of `x` and `y` to each other (RTR, then RTS, with
/// softroce's defaults), `x` starting at PSN `psns.0` and `y` at `psns.1`.
pub fn connect_pair(x: &End, y: &End, psns: (u32, u32)) {
    let (ex, ey) = (x.qp.endpoint(psns.0), y.qp.endpoint(psns.1));
    x.qp.connect(psns.0, &ey).unwrap_or_else(|e| panic!("connecting x: {e}"));
    y.qp.connect(psns.1, &ex).unwrap_or_else(|e| panic!("connecting y: {e}"));
}

/// The next completion of `cq` within `within`, if one comes.
pub fn try_wait_one(cq: &Cq, within: Duration) -> Option<Wc> {
    let mut wc = [Wc::new(0, WcStatus::Success, WcOpcode::Send, 0); 1];
    let n = cq.wait(&mut wc, within).unwrap_or_else(|e| panic!("waiting on a CQ: {e}"));
    (n == 1).then_some(wc[0])
}

/// The next completion of `cq`; panics if none comes within `within`.
pub fn wait_one(cq: &Cq, within: Duration) -> Wc {
    try_wait_one(cq, within).unwrap_or_else(|| panic!("no completion within {within:?}"))
}

/// Microseconds [`crate::cm::CmService::listen`] of this process sleeps
/// between its two steps (the CM's listener, then the shared device's table
/// that routes REQs here), so a test can send a REQ between them.
static LISTEN_GAP_US: AtomicU64 = AtomicU64::new(0);

/// Makes every later [`crate::cm::CmService::listen`] of this process take
/// `gap` between its two steps.
pub fn set_listen_gap(gap: Duration) {
    LISTEN_GAP_US.store(gap.as_micros() as u64, Ordering::Relaxed);
}

/// The gap [`set_listen_gap`] asked for, slept.
pub(crate) fn listen_gap() {
    let us = LISTEN_GAP_US.load(Ordering::Relaxed);
    if us > 0 {
        std::thread::sleep(Duration::from_micros(us));
    }
}
