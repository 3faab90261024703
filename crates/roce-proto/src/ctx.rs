//! What the roles of a QP may touch besides the QP itself: memory regions,
//! completion queues, shared receive queues, counters and events. The device
//! lends these per call, so a role cannot reach another QP.

use std::collections::VecDeque;
use std::time::Instant;

use crate::attr::AhAttr;
use crate::counters::Counters;
use crate::cq::{Cq, Notify};
use crate::mr::MrTable;
use crate::srq::Srq;
use crate::wr::Wc;

/// Asynchronous events (`enum ibv_event_type`, the ones softroce raises).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AsyncEvent {
    /// A CQ overran (`IBV_EVENT_CQ_ERR`).
    CqErr(crate::CqHandle),
    /// A QP hit an error it reports asynchronously (`IBV_EVENT_QP_FATAL`).
    QpFatal(crate::Qpn),
    /// A QP on an SRQ entered ERR and will take no more receives (`IBV_EVENT_QP_LAST_WQE_REACHED`).
    QpLastWqeReached(crate::Qpn),
    /// An SRQ fell below its limit (`IBV_EVENT_SRQ_LIMIT_REACHED`).
    SrqLimitReached(crate::SrqHandle),
    /// The send queue drained after a move to SQD (`IBV_EVENT_SQ_DRAINED`).
    SqDrained(crate::Qpn),
    /// The device stopped working (`IBV_EVENT_DEVICE_FATAL`). The engine
    /// never raises it; a driver does when its own machinery died (softroce:
    /// a panic in its driver thread or under its device lock).
    DeviceFatal,
}

/// Borrowed device state for one call into a QP.
pub(crate) struct Ctx<'a> {
    /// The current time.
    pub(crate) now: Instant,
    /// Memory regions.
    pub(crate) mrs: &'a mut MrTable,
    /// Completion queues by handle.
    pub(crate) cqs: &'a mut Vec<Option<Cq>>,
    /// Address handles by handle.
    pub(crate) ahs: &'a [Option<AhAttr>],
    /// Shared receive queues by handle.
    pub(crate) srqs: &'a mut Vec<Option<Srq>>,
    /// Counters.
    pub(crate) counters: &'a mut Counters,
    /// Async events raised.
    pub(crate) events: &'a mut VecDeque<AsyncEvent>,
    /// CQs whose completion event fired.
    pub(crate) comp_events: &'a mut VecDeque<u32>,
    /// CQs that overran during this call (their QPs go to ERR afterwards).
    pub(crate) overrun: &'a mut Vec<u32>,
    /// When set, roles building a packet leave its payload in registered
    /// memory and list the pieces here instead of copying them behind the
    /// headers (scatter-gather sends).
    /// (Moved in and out for the call, so the list keeps its capacity.)
    pub(crate) gather: Option<Vec<Piece>>,
    /// The device's timers in deadline order (kept by the QPs' timer
    /// setters).
    pub(crate) timers: &'a mut crate::timers::Timers,
}

/// A piece of a packet's payload still in registered memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Piece {
    /// The memory.
    pub region: crate::mem::Region,
    /// Offset of the piece in it.
    pub offset: u64,
    /// Length.
    pub len: usize,
}

impl Ctx<'_> {
    /// The address handle `ah`.
    pub(crate) fn ah(&self, ah: u32) -> Option<AhAttr> {
        self.ahs.get(ah as usize).copied().flatten()
    }

    /// Appends `wc` to CQ `cq`, raising the completion event if armed; an
    /// overrun raises `CQ_ERR` once and is reported to the device.
    pub(crate) fn push_wc(&mut self, handle: crate::CqHandle, wc: Wc, solicited: bool) {
        let cq = handle.get();
        let Some(Some(c)) = self.cqs.get_mut(cq as usize) else {
            return;
        };
        let was_overrun = c.is_overrun();
        let held = c.moderation_deadline();
        let pushed = c.push(wc, solicited, self.now);
        // A moderated event that starts or stops waiting moves its timer.
        self.timers.update(cq, crate::timers::TimerKind::CqModeration, held, c.moderation_deadline());
        match pushed {
            Ok(Notify::Event) => {
                self.counters.completions += 1;
                self.comp_events.push_back(cq);
            }
            Ok(Notify::None) => self.counters.completions += 1,
            Err(_) => {
                if !was_overrun {
                    self.events.push_back(AsyncEvent::CqErr(handle));
                    self.overrun.push(cq);
                }
            }
        }
    }
}
