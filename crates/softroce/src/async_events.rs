//! Async event queues of their own: one per `ibv_open_device`.
//!
//! rdma-core gives every context its own `async_fd`, and an event reaches
//! the context that created its object only: a QP's `IBV_EVENT_QP_FATAL`
//! is read from the fd of the context the QP was made on. UCX registers
//! one handler per context fd (two fds being one would be "id range is
//! full"). A [`Context`] is shared by every open of its device in a process,
//! so each open takes an [`AsyncEvents`] and *claims* the objects it makes;
//! events of claimed objects go to the claimer's queue, the rest to the
//! context's own queue ([`Context::get_async_event`]), and
//! `IBV_EVENT_DEVICE_FATAL` to every queue.

use std::collections::HashMap;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, RawFd};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use roce_proto::AsyncEvent;

use crate::channel::EventQueue;
use crate::{Context, Error};

/// The object an async event is about (the handle its event carries).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum EventSource {
    /// A CQ, by [`Cq::handle`](crate::Cq::handle).
    Cq(roce_proto::CqHandle),
    /// A QP, by [`Qp::qpn`](crate::Qp::qpn).
    Qp(roce_proto::Qpn),
    /// An SRQ, by [`Srq::handle`](crate::Srq::handle).
    Srq(roce_proto::SrqHandle),
}

impl EventSource {
    /// The object `ev` is about; `None` for device-wide events.
    fn of(ev: &AsyncEvent) -> Option<EventSource> {
        Some(match *ev {
            AsyncEvent::CqErr(h) => EventSource::Cq(h),
            AsyncEvent::QpFatal(q) | AsyncEvent::QpLastWqeReached(q) | AsyncEvent::SqDrained(q) => EventSource::Qp(q),
            AsyncEvent::SrqLimitReached(s) => EventSource::Srq(s),
            AsyncEvent::DeviceFatal => return None,
        })
    }
}

type Queue = EventQueue<AsyncEvent>;

/// Where a device's async events go (kept by the context's shared part).
#[derive(Debug)]
pub(crate) struct AsyncRoutes {
    /// The context's own queue: events of unclaimed objects.
    default: Queue,
    inner: Mutex<Claims>,
}

#[derive(Debug, Default)]
struct Claims {
    by_source: HashMap<EventSource, Weak<Queue>>,
    /// Every queue handed out, for device-wide events.
    queues: Vec<Weak<Queue>>,
}

impl AsyncRoutes {
    pub(crate) fn new() -> std::io::Result<AsyncRoutes> {
        Ok(AsyncRoutes { default: EventQueue::new()?, inner: Mutex::new(Claims::default()) })
    }

    fn claims(&self) -> std::sync::MutexGuard<'_, Claims> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The context's own queue.
    pub(crate) fn default_queue(&self) -> &EventQueue<AsyncEvent> {
        &self.default
    }

    /// Delivers `ev` to the queue that claimed its object (all queues for a
    /// device-wide event), else to the context's own queue.
    pub(crate) fn push(&self, ev: AsyncEvent) {
        let mut c = self.claims();
        match EventSource::of(&ev) {
            Some(src) => match c.by_source.get(&src).and_then(Weak::upgrade) {
                Some(q) => q.push(ev),
                None => self.default.push(ev),
            },
            None => {
                c.queues.retain(|q| q.strong_count() > 0);
                for q in c.queues.iter().filter_map(Weak::upgrade) {
                    q.push(ev);
                }
                self.default.push(ev);
            }
        }
    }

    /// Forgets `src`'s claim (its object is destroyed; its handle may be
    /// given to another object next).
    pub(crate) fn release(&self, src: EventSource) {
        self.claims().by_source.remove(&src);
    }

    fn add(&self, q: &Arc<Queue>) {
        let mut c = self.claims();
        c.queues.retain(|q| q.strong_count() > 0);
        c.queues.push(Arc::downgrade(q));
    }

    fn claim(&self, src: EventSource, q: &Arc<Queue>) {
        let mut c = self.claims();
        c.by_source.retain(|_, q| q.strong_count() > 0);
        c.by_source.insert(src, Arc::downgrade(q));
    }
}

/// An async event queue of its own on a shared [`Context`], with its own
/// file descriptor (readable while an event waits): what each
/// `ibv_open_device` of a device gets as its `async_fd`.
#[derive(Debug)]
pub struct AsyncEvents {
    queue: Arc<Queue>,
    ctx: Context,
}

impl AsyncEvents {
    pub(crate) fn new(ctx: &Context) -> Result<AsyncEvents, Error> {
        let queue = Arc::new(EventQueue::new()?);
        ctx.shared().async_routes.add(&queue);
        Ok(AsyncEvents { queue, ctx: ctx.clone() })
    }

    /// From now on, `src`'s events come to this queue (until its object is
    /// destroyed or another queue claims it).
    pub fn claim(&self, src: EventSource) {
        self.ctx.shared().async_routes.claim(src, &self.queue);
    }

    /// The next event, waiting up to `timeout` (`None`: forever).
    pub fn get(&self, timeout: Option<Duration>) -> Result<Option<AsyncEvent>, Error> {
        Ok(self.queue.pop_wait(timeout)?)
    }
}

impl AsFd for AsyncEvents {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.queue.as_fd()
    }
}

impl AsRawFd for AsyncEvents {
    fn as_raw_fd(&self) -> RawFd {
        self.queue.as_raw_fd()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn queue(r: &AsyncRoutes) -> Arc<Queue> {
        let q = Arc::new(EventQueue::new().unwrap());
        r.add(&q);
        q
    }

    #[test]
    fn claimed_objects_events_reach_their_claimer_only() {
        let r = AsyncRoutes::new().unwrap();
        let (a, b) = (queue(&r), queue(&r));
        r.claim(EventSource::Qp(17.into()), &a);
        r.claim(EventSource::Cq(1.into()), &b);
        r.push(AsyncEvent::QpFatal(17.into()));
        r.push(AsyncEvent::CqErr(1.into()));
        r.push(AsyncEvent::SrqLimitReached(3.into()));
        assert_eq!(a.try_pop(), Some(AsyncEvent::QpFatal(17.into())));
        assert_eq!(a.try_pop(), None);
        assert_eq!(b.try_pop(), Some(AsyncEvent::CqErr(1.into())));
        assert_eq!(b.try_pop(), None);
        assert_eq!(r.default.try_pop(), Some(AsyncEvent::SrqLimitReached(3.into())), "unclaimed: the context's queue");
        assert_eq!(r.default.try_pop(), None);
    }

    #[test]
    fn device_fatal_reaches_every_queue_and_released_handles_go_home() {
        let r = AsyncRoutes::new().unwrap();
        let (a, b) = (queue(&r), queue(&r));
        r.push(AsyncEvent::DeviceFatal);
        assert_eq!(a.try_pop(), Some(AsyncEvent::DeviceFatal));
        assert_eq!(b.try_pop(), Some(AsyncEvent::DeviceFatal));
        assert_eq!(r.default.try_pop(), Some(AsyncEvent::DeviceFatal));
        r.claim(EventSource::Qp(5.into()), &a);
        r.release(EventSource::Qp(5.into()));
        r.push(AsyncEvent::SqDrained(5.into()));
        assert_eq!(a.try_pop(), None);
        assert_eq!(r.default.try_pop(), Some(AsyncEvent::SqDrained(5.into())));
        // A dropped queue's claims fall back to the context's queue.
        r.claim(EventSource::Srq(2.into()), &b);
        drop(b);
        r.push(AsyncEvent::SrqLimitReached(2.into()));
        assert_eq!(r.default.try_pop(), Some(AsyncEvent::SrqLimitReached(2.into())));
    }
}
