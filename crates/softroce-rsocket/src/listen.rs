//! A listening rsocket's service thread and accept queue, as rsockets'
//! listen service works: the thread takes each connection request from the
//! listener's event channel, makes the new socket (its own event channel
//! and number, its QP and buffers, sizes inherited from the listener),
//! accepts with its connection data, waits for ESTABLISHED, and queues it.
//! `raccept` takes queued sockets; the queue's descriptor is readable while
//! one waits (what `rpoll` sleeps on for a listener). A client's connect
//! thus completes before the server calls `raccept`, as a TCP backlog's.

use std::collections::VecDeque;
use std::io::{PipeReader, PipeWriter, Read, Write};
use std::os::fd::AsRawFd;
use std::sync::{Arc, Mutex, Weak};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use softroce::rdma_cm::{Event, EventChannel, EventType};

use super::socket::Socket;
use super::{Errno, pollfd, sys_poll};

/// How long an accepted connection may take to be established (the REP's
/// retries take about a minute before the CM reports the failure).
const ESTABLISH_LIMIT: Duration = Duration::from_secs(90);

/// Accepted sockets waiting for `raccept`.
pub(super) struct AcceptQueue {
    q: Mutex<VecDeque<Arc<Socket>>>,
    /// One byte per queued socket: readable while one waits.
    ready: (PipeReader, PipeWriter),
    /// Written once to stop the service thread (and wake `raccept`).
    stop: (PipeReader, PipeWriter),
}

impl AcceptQueue {
    fn new() -> std::io::Result<AcceptQueue> {
        Ok(AcceptQueue { q: Mutex::new(VecDeque::new()), ready: std::io::pipe()?, stop: std::io::pipe()? })
    }

    fn push(&self, s: Arc<Socket>) {
        let mut q = self.q.lock().unwrap_or_else(|e| e.into_inner());
        q.push_back(s);
        let _ = (&self.ready.1).write_all(&[1]);
    }

    /// The oldest accepted socket, if one waits.
    pub fn pop(&self) -> Option<Arc<Socket>> {
        let mut q = self.q.lock().unwrap_or_else(|e| e.into_inner());
        let s = q.pop_front()?;
        // One byte per queued socket, both changed under the lock: the read
        // finds its byte at once.
        let _ = (&self.ready.0).read_exact(&mut [0]);
        Some(s)
    }

    /// Whether a socket waits.
    pub fn ready(&self) -> bool {
        !self.q.lock().unwrap_or_else(|e| e.into_inner()).is_empty()
    }

    /// Readable while a socket waits.
    pub fn ready_fd(&self) -> i32 {
        self.ready.0.as_raw_fd()
    }

    /// Readable once the listener is closed.
    pub fn stop_fd(&self) -> i32 {
        self.stop.0.as_raw_fd()
    }

    fn stopped(&self) -> bool {
        let mut p = [pollfd(self.stop_fd(), libc::POLLIN)];
        sys_poll(&mut p, Some(Duration::ZERO)).is_ok_and(|n| n > 0)
    }
}

/// A listener's service.
pub(super) struct Listener {
    queue: Arc<AcceptQueue>,
    thread: Option<JoinHandle<()>>,
}

impl Listener {
    /// Starts the service of `listener`, whose id listens on `ch`.
    pub fn start(listener: Weak<Socket>, ch: EventChannel) -> Result<Listener, Errno> {
        let queue = Arc::new(AcceptQueue::new().map_err(|e| Errno(e.raw_os_error().unwrap_or(libc::EMFILE)))?);
        let q = queue.clone();
        let thread = softroce::thread::spawn("rsocket-listen".into(), move || serve(listener, ch, q))
            .map_err(|e| Errno(e.raw_os_error().unwrap_or(libc::EAGAIN)))?;
        Ok(Listener { queue, thread: Some(thread) })
    }

    /// The accept queue.
    pub fn queue(&self) -> Arc<AcceptQueue> {
        self.queue.clone()
    }

    /// Stops the thread; returns the sockets accepted but never taken.
    pub fn stop(mut self) -> Vec<Arc<Socket>> {
        let _ = (&self.queue.stop.1).write_all(&[1]);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        std::iter::from_fn(|| self.queue.pop()).collect()
    }
}

/// The service thread: connection requests until the listener closes.
fn serve(listener: Weak<Socket>, ch: EventChannel, queue: Arc<AcceptQueue>) {
    loop {
        let mut fds = [pollfd(ch.fd().as_raw_fd(), libc::POLLIN), pollfd(queue.stop_fd(), libc::POLLIN)];
        let r = sys_poll(&mut fds, None);
        if fds[1].revents != 0 || (r.is_err() && queue.stopped()) {
            return;
        }
        while let Some(e) = ch.get_event(Some(Duration::ZERO)) {
            if e.event != EventType::ConnectRequest {
                continue;
            }
            let Some(l) = listener.upgrade() else { return };
            let (domain, opts) = {
                let g = l.lock();
                (g.domain, g.opts.inherited())
            };
            drop(l);
            if let Some(s) = accept(domain, opts, e, &queue) {
                queue.push(s);
            }
        }
    }
}

/// Makes, accepts and establishes the socket of one request (`rs_accept`);
/// `None` (and the request rejected, or the connection dropped) if any step fails.
fn accept(domain: i32, opts: super::socket::Options, e: Event, queue: &AcceptQueue) -> Option<Arc<Socket>> {
    let id = e.id.clone();
    let ch = match EventChannel::new() {
        Ok(ch) => ch,
        Err(err) => {
            crate::trace_err("rsocket: accept", &err);
            let _ = id.reject(&[]);
            return None;
        }
    };
    // The new id's events (ESTABLISHED, DISCONNECTED) go to its own channel.
    id.migrate(&ch);
    let (s, param) = match Socket::accepted(domain, ch.clone(), id.clone(), opts, &e) {
        Ok(v) => v,
        Err(err) => {
            crate::trace_err("rsocket: accept", &err);
            let _ = id.reject(&[]);
            return None;
        }
    };
    if let Err(err) = id.accept(&param) {
        crate::trace_err("rsocket: accept", &err);
        return None;
    }
    let deadline = Instant::now() + ESTABLISH_LIMIT;
    loop {
        match ch.get_event(Some(Duration::ZERO)) {
            Some(ev) if ev.event == EventType::Established => break,
            Some(ev) => {
                crate::trace_err("rsocket: accept", &format!("{} before ESTABLISHED", ev.event.name()));
                return None;
            }
            None => {}
        }
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            crate::trace_err("rsocket: accept", &"no ESTABLISHED");
            return None;
        }
        let mut fds = [pollfd(ch.fd().as_raw_fd(), libc::POLLIN), pollfd(queue.stop_fd(), libc::POLLIN)];
        let _ = sys_poll(&mut fds, Some(left.min(Duration::from_secs(1))));
        if fds[1].revents != 0 {
            return None;
        }
    }
    let s = Arc::new(s);
    super::insert(s.clone());
    Some(s)
}

/// `raccept`: the next accepted socket, waiting unless nonblocking (EAGAIN).
pub(super) fn take(queue: &AcceptQueue, nonblock: bool) -> Result<Arc<Socket>, Errno> {
    loop {
        if let Some(s) = queue.pop() {
            return Ok(s);
        }
        if nonblock {
            return Err(Errno::AGAIN);
        }
        let mut fds = [pollfd(queue.ready_fd(), libc::POLLIN), pollfd(queue.stop_fd(), libc::POLLIN)];
        sys_poll(&mut fds, None)?;
        if fds[1].revents != 0 {
            return Err(Errno::BADF);
        }
    }
}
