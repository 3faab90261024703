//! Awaiting completions on tokio (feature `tokio`): the CQ's completion
//! channel is a real file descriptor, registered with tokio's reactor.

use std::io;

use tokio::io::unix::AsyncFd;

use crate::error::Error;
use crate::verbs::{CompChannel, Cq};
use roce_proto::Wc;

/// A CQ whose completions can be awaited. Build it from a CQ created with
/// a channel ([`crate::Context::create_cq`] with `Some(&channel)`); it must
/// be made inside a tokio runtime.
#[derive(Debug)]
pub struct AsyncCq {
    cq: Cq,
    fd: AsyncFd<CompChannel>,
}

impl AsyncCq {
    /// Wraps `cq`, whose events go to `channel`.
    pub fn new(cq: Cq, channel: CompChannel) -> io::Result<AsyncCq> {
        // SAFETY: the channel owns its eventfd (an OwnedFd behind an Arc)
        // for as long as the AsyncFd holds this clone, and `as_raw_fd`
        // always returns that same descriptor.
        #[allow(unsafe_code)]
        let fd = unsafe { AsyncFd::register(channel) }.map_err(|e| e.into_parts().1)?;
        Ok(AsyncCq { cq, fd })
    }

    /// The CQ.
    pub fn cq(&self) -> &Cq {
        &self.cq
    }

    /// The next completions (at least one, at most `out.len()`): polls, and
    /// when the CQ is empty arms it and sleeps until its channel fires (the
    /// usual get-event, re-arm, poll-empty loop of verbs).
    pub async fn next(&self, out: &mut [Wc]) -> Result<usize, Error> {
        loop {
            let n = self.cq.poll(out)?;
            if n > 0 {
                return Ok(n);
            }
            self.cq.req_notify(false)?;
            // A completion that landed before the arm is found here.
            let n = self.cq.poll(out)?;
            if n > 0 {
                return Ok(n);
            }
            let mut guard = self.fd.readable().await?;
            while self.fd.get_ref().try_get_event().is_some() {}
            guard.clear_ready();
        }
    }
}
