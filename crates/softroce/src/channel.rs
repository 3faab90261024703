//! Event queues that are real file descriptors: completion channels
//! (`ibv_comp_channel`) and the device's async event queue. Each holds the
//! events in order and an `eventfd` in semaphore mode whose count always
//! equals the number queued, so the fd is readable exactly while an event
//! waits: `poll`, `epoll` and tokio's `AsyncFd` all work on it.

use std::collections::VecDeque;
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd, RawFd};
use std::sync::Mutex;
use std::time::Duration;

use rustix::event::{EventfdFlags, PollFd, PollFlags, eventfd, poll};

/// A FIFO of events behind an fd.
#[derive(Debug)]
pub(crate) struct EventQueue<T> {
    queue: Mutex<VecDeque<T>>,
    fd: OwnedFd,
}

impl<T> EventQueue<T> {
    pub(crate) fn new() -> io::Result<EventQueue<T>> {
        // Blocking, so an application that wants `ibv_get_cq_event` not to
        // block can say so with O_NONBLOCK (rdma-core's convention); reads
        // happen only while the count is known to be positive.
        let fd = eventfd(0, EventfdFlags::SEMAPHORE | EventfdFlags::CLOEXEC)?;
        Ok(EventQueue { queue: Mutex::new(VecDeque::new()), fd })
    }

    /// Queues `ev` and makes the fd readable.
    pub(crate) fn push(&self, ev: T) {
        let mut q = self.queue.lock().unwrap_or_else(|e| e.into_inner());
        q.push_back(ev);
        // The count can only overflow after 2^64 - 2 unread events.
        let _ = rustix::io::write(&self.fd, &1u64.to_ne_bytes());
    }

    /// Takes the oldest event if one waits.
    pub(crate) fn try_pop(&self) -> Option<T> {
        let mut q = self.queue.lock().unwrap_or_else(|e| e.into_inner());
        if q.is_empty() {
            return None;
        }
        let mut buf = [0u8; 8];
        // Semaphore mode: each read takes one from the count, which equals
        // the queue's length (both change under the lock), so this read
        // never blocks.
        match rustix::io::read(&self.fd, &mut buf) {
            Ok(8) => q.pop_front(),
            _ => None,
        }
    }

    /// Takes the oldest event, waiting up to `timeout` (`None`: forever).
    pub(crate) fn pop_wait(&self, timeout: Option<Duration>) -> io::Result<Option<T>> {
        let deadline = timeout.map(|t| std::time::Instant::now() + t);
        loop {
            if let Some(ev) = self.try_pop() {
                return Ok(Some(ev));
            }
            let left = match deadline {
                Some(d) => match d.checked_duration_since(std::time::Instant::now()) {
                    Some(l) => Some(l),
                    None => return Ok(None),
                },
                None => None,
            };
            let ts = left.map(|l| rustix::event::Timespec {
                tv_sec: l.as_secs().min(i64::MAX as u64) as i64,
                tv_nsec: i64::from(l.subsec_nanos()),
            });
            let mut fds = [PollFd::new(&self.fd, PollFlags::IN)];
            match poll(&mut fds, ts.as_ref()) {
                Ok(_) | Err(rustix::io::Errno::INTR) => {}
                Err(e) => return Err(e.into()),
            }
        }
    }

    /// Events waiting.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.queue.lock().unwrap_or_else(|e| e.into_inner()).len()
    }
}

impl<T> AsFd for EventQueue<T> {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

impl<T> AsRawFd for EventQueue<T> {
    fn as_raw_fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn readable(fd: BorrowedFd<'_>) -> bool {
        let mut fds = [PollFd::new(&fd, PollFlags::IN)];
        poll(&mut fds, Some(&rustix::event::Timespec { tv_sec: 0, tv_nsec: 0 })).unwrap() == 1
    }

    #[test]
    fn the_fd_is_readable_exactly_while_events_wait() {
        let q = EventQueue::new().unwrap();
        assert!(!readable(q.as_fd()));
        q.push(1u32);
        q.push(2);
        assert!(readable(q.as_fd()));
        assert_eq!(q.len(), 2);
        assert_eq!(q.try_pop(), Some(1));
        assert!(readable(q.as_fd()), "one left");
        assert_eq!(q.try_pop(), Some(2));
        assert!(!readable(q.as_fd()));
        assert_eq!(q.try_pop(), None);
        assert_eq!(q.pop_wait(Some(Duration::from_millis(5))).unwrap(), None);
    }

    #[test]
    fn a_waiter_wakes_when_another_thread_pushes() {
        let q = std::sync::Arc::new(EventQueue::new().unwrap());
        let q2 = q.clone();
        let t = std::thread::spawn(move || q2.pop_wait(Some(Duration::from_secs(10))).unwrap());
        std::thread::sleep(Duration::from_millis(20));
        q.push(7u32);
        assert_eq!(t.join().unwrap(), Some(7));
    }
}
