//! The completion channel ([`CompChannel`], `ibv_comp_channel`): made by
//! [`Context::create_comp_channel`], a descriptor readable while a CQ event
//! waits. Touch here how a CQ's events are taken; the queue under it is
//! `crate::channel::EventQueue`.

use std::os::fd::{AsFd, AsRawFd, BorrowedFd, RawFd};
use std::sync::Arc;
use std::time::Duration;

use crate::channel::EventQueue;
use crate::context::Context;
use crate::error::Error;

/// A completion channel (`ibv_comp_channel`): a file descriptor that is
/// readable while a CQ event waits, for poll/epoll/`AsyncFd`.
#[derive(Debug, Clone)]
pub struct CompChannel {
    pub(super) queue: Arc<EventQueue<roce_proto::CqHandle>>,
    ctx: Context,
}

impl Context {
    /// Creates a completion channel (`ibv_create_comp_channel`).
    pub fn create_comp_channel(&self) -> Result<CompChannel, Error> {
        Ok(CompChannel { queue: Arc::new(EventQueue::new()?), ctx: self.clone() })
    }
}

impl CompChannel {
    /// The next CQ event: the handle of the CQ that fired
    /// (`ibv_get_cq_event`), waiting up to `timeout` (`None`: forever).
    /// The CQ must be re-armed for the next event.
    pub fn get_event(&self, timeout: Option<Duration>) -> Result<Option<roce_proto::CqHandle>, Error> {
        if let Some(cq) = self.queue.try_pop() {
            return Ok(Some(cq));
        }
        self.send_deferred();
        Ok(self.queue.pop_wait(timeout)?)
    }

    /// Sends what the context's posts deferred (a credit update, an ACK a
    /// waiting thread's pass held back), for a thread about to sleep on
    /// the channel's fd: fio reposts its receives, then waits there.
    pub fn send_deferred(&self) {
        self.ctx.shared().flush_owed();
    }

    /// The next CQ event if one waits, without blocking.
    pub fn try_get_event(&self) -> Option<roce_proto::CqHandle> {
        self.queue.try_pop()
    }
}

impl AsFd for CompChannel {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.queue.as_fd()
    }
}

impl AsRawFd for CompChannel {
    fn as_raw_fd(&self) -> RawFd {
        self.queue.as_raw_fd()
    }
}
