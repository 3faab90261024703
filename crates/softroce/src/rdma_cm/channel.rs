//! rdma_cm's event channel and what it carries: [`EventChannel`] (an
//! eventfd counting the queued [`Event`]s), [`EventType`], [`ConnParam`]
//! and [`UdParam`]. Touch here the event's shape and the channel's queue;
//! what produces the events lives in `id.rs` and `registry.rs`.

use std::collections::VecDeque;
use std::ffi::CStr;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use roce_cm::cma::WireConnParam;

use super::CmId;
use crate::error::Error;

/// librdmacm's event types, in its order (`enum rdma_cm_event_type`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u32)]
pub enum EventType {
    /// `rdma_resolve_addr` finished.
    AddrResolved = 0,
    /// `rdma_resolve_addr` failed.
    AddrError = 1,
    /// `rdma_resolve_route` finished.
    RouteResolved = 2,
    /// `rdma_resolve_route` failed.
    RouteError = 3,
    /// A connection request for a listener (on a new id).
    ConnectRequest = 4,
    /// The REP, for an id without a QP (the consumer calls `establish`).
    ConnectResponse = 5,
    /// Setting up the QP after the REP failed.
    ConnectError = 6,
    /// The peer did not answer.
    Unreachable = 7,
    /// The peer rejected.
    Rejected = 8,
    /// Connected.
    Established = 9,
    /// Disconnected.
    Disconnected = 10,
    /// The device went away.
    DeviceRemoval = 11,
    /// A multicast join finished.
    MulticastJoin = 12,
    /// A multicast join failed.
    MulticastError = 13,
    /// The address moved.
    AddrChange = 14,
    /// The timewait after a disconnect ended.
    TimewaitExit = 15,
    /// `rdma_resolve_addrinfo` finished (rdma-core 65): the answer waits
    /// for `rdma_query_addrinfo`.
    AddrinfoResolved = 16,
    /// `rdma_resolve_addrinfo` failed (rdma-core 65; only its IB SA path,
    /// which RoCE has not, reports failures so).
    AddrinfoError = 17,
    /// An event the consumer wrote itself (`rdma_write_cm_event`,
    /// rdma-core 65), carrying its status and argument.
    User = 18,
}

impl EventType {
    /// `rdma_event_str`'s name, NUL-terminated for the C API.
    pub fn c_name(self) -> &'static CStr {
        match self {
            EventType::AddrResolved => c"RDMA_CM_EVENT_ADDR_RESOLVED",
            EventType::AddrError => c"RDMA_CM_EVENT_ADDR_ERROR",
            EventType::RouteResolved => c"RDMA_CM_EVENT_ROUTE_RESOLVED",
            EventType::RouteError => c"RDMA_CM_EVENT_ROUTE_ERROR",
            EventType::ConnectRequest => c"RDMA_CM_EVENT_CONNECT_REQUEST",
            EventType::ConnectResponse => c"RDMA_CM_EVENT_CONNECT_RESPONSE",
            EventType::ConnectError => c"RDMA_CM_EVENT_CONNECT_ERROR",
            EventType::Unreachable => c"RDMA_CM_EVENT_UNREACHABLE",
            EventType::Rejected => c"RDMA_CM_EVENT_REJECTED",
            EventType::Established => c"RDMA_CM_EVENT_ESTABLISHED",
            EventType::Disconnected => c"RDMA_CM_EVENT_DISCONNECTED",
            EventType::DeviceRemoval => c"RDMA_CM_EVENT_DEVICE_REMOVAL",
            EventType::MulticastJoin => c"RDMA_CM_EVENT_MULTICAST_JOIN",
            EventType::MulticastError => c"RDMA_CM_EVENT_MULTICAST_ERROR",
            EventType::AddrChange => c"RDMA_CM_EVENT_ADDR_CHANGE",
            EventType::TimewaitExit => c"RDMA_CM_EVENT_TIMEWAIT_EXIT",
            EventType::AddrinfoResolved => c"RDMA_CM_EVENT_ADDRINFO_RESOLVED",
            EventType::AddrinfoError => c"RDMA_CM_EVENT_ADDRINFO_ERROR",
            // librdmacm 65's rdma_event_str has no name for it ("UNKNOWN
            // EVENT"); the C layer says so, this is the enum's name.
            EventType::User => c"RDMA_CM_EVENT_USER",
        }
    }

    /// `rdma_event_str`'s name.
    pub fn name(self) -> &'static str {
        self.c_name().to_str().expect("ASCII names")
    }

    /// The event type numbered `v` in librdmacm's enum.
    pub fn from_raw(v: u32) -> Option<EventType> {
        use EventType::*;
        const ALL: [EventType; 19] = [
            AddrResolved,
            AddrError,
            RouteResolved,
            RouteError,
            ConnectRequest,
            ConnectResponse,
            ConnectError,
            Unreachable,
            Rejected,
            Established,
            Disconnected,
            DeviceRemoval,
            MulticastJoin,
            MulticastError,
            AddrChange,
            TimewaitExit,
            AddrinfoResolved,
            AddrinfoError,
            User,
        ];
        ALL.get(v as usize).copied()
    }
}

/// `rdma_conn_param` as the application passes it to connect and accept
/// and as events carry it to the application: it owns its private data
/// (an event outlives the message it came in) and has the `qp_num` of an
/// id without a QP of its own. `ConnParam::wire` makes roce-cm's
/// [`WireConnParam`], the borrowed view the CM's message builders take.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ConnParam {
    /// The consumer's private data.
    pub private_data: Vec<u8>,
    /// RDMA READ / atomic requests this side accepts in flight.
    pub responder_resources: u8,
    /// RDMA READ / atomic requests this side issues in flight.
    pub initiator_depth: u8,
    /// End-to-end flow control.
    pub flow_control: bool,
    /// Transport retries (7 at most).
    pub retry_count: u8,
    /// RNR retries (7: infinite).
    pub rnr_retry_count: u8,
    /// The QP uses an SRQ.
    pub srq: bool,
    /// The QP number (for an id without a QP of its own).
    pub qp_num: u32,
}

impl ConnParam {
    /// librdmacm's values for a NULL `conn_param`: retry and RNR retry 7.
    pub fn null() -> ConnParam {
        ConnParam { retry_count: 7, rnr_retry_count: 7, ..ConnParam::default() }
    }

    /// What the CM puts in the REQ or REP.
    pub(super) fn wire(&self) -> WireConnParam<'_> {
        WireConnParam {
            responder_resources: self.responder_resources,
            initiator_depth: self.initiator_depth,
            flow_control: self.flow_control,
            retry_count: self.retry_count,
            rnr_retry_count: self.rnr_retry_count,
            srq: self.srq,
            private_data: &self.private_data,
        }
    }
}

/// An event (`struct rdma_cm_event`).
#[derive(Debug, Clone)]
pub struct Event {
    /// The id it is about (for `ConnectRequest`, the new id).
    pub id: CmId,
    /// The listener, for `ConnectRequest`.
    pub listen_id: Option<CmId>,
    /// What happened.
    pub event: EventType,
    /// 0, a REJ reason (`Rejected`) or a negative errno.
    pub status: i32,
    /// The connection parameters the peer's message carried (for a UD id,
    /// its private data and QPN).
    pub conn: ConnParam,
    /// A UD id's `rdma_ud_param` (`ConnectRequest`, `Established`,
    /// `MulticastJoin`).
    pub ud: Option<UdParam>,
    /// `MulticastJoin`: the context the join was given (C's
    /// `param.ud.private_data`).
    pub context: usize,
    /// `User`: the consumer's argument (C's `param.arg`, rdma-core 65).
    pub arg: u64,
}

/// `rdma_ud_param` beyond the private data: where a UD id sends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UdParam {
    /// The address handle to the peer (`None` in a `ConnectRequest`: the
    /// passive side answers from the datagrams it receives).
    pub ah: Option<crate::AhAttr>,
    /// The AH's flow label (rdma_cm's hash of the two ports).
    pub flow_label: u32,
    /// The peer's UD QP.
    pub qp_num: u32,
    /// The Q_Key to send with.
    pub qkey: u32,
}

/// An event channel (`struct rdma_event_channel`): its file descriptor is
/// readable while an event is queued (an eventfd counting them).
#[derive(Debug, Clone)]
pub struct EventChannel(Arc<ChannelInner>);

#[derive(Debug)]
struct ChannelInner {
    queue: Mutex<VecDeque<Event>>,
    ready: Condvar,
    fd: OwnedFd,
}

impl EventChannel {
    /// A new channel.
    pub fn new() -> Result<EventChannel, Error> {
        // Blocking, as the kernel's rdma_cm fd is: the consumer sets
        // O_NONBLOCK itself (rsocket, UCX), and `rdma_get_cm_event` honours it.
        // The count changes only under the queue's lock, with the queue:
        // a read (after its event is dequeued) never waits.
        use rustix::event::EventfdFlags as F;
        let fd = rustix::event::eventfd(0, F::CLOEXEC | F::SEMAPHORE).map_err(std::io::Error::from)?;
        Ok(EventChannel(Arc::new(ChannelInner { queue: Mutex::new(VecDeque::new()), ready: Condvar::new(), fd })))
    }

    /// The descriptor to poll (readable while events wait).
    pub fn fd(&self) -> BorrowedFd<'_> {
        self.0.fd.as_fd()
    }

    /// The next event, waiting up to `timeout` (`None`: for ever).
    pub fn get_event(&self, timeout: Option<Duration>) -> Option<Event> {
        let deadline = timeout.map(|t| Instant::now() + t);
        let mut q = self.0.queue.lock().unwrap_or_else(|e| e.into_inner());
        loop {
            if let Some(e) = q.pop_front() {
                // One count off the eventfd: readable while events wait.
                let _ = rustix::io::read(&self.0.fd, &mut [0u8; 8]);
                return Some(e);
            }
            match deadline {
                None => q = self.0.ready.wait(q).unwrap_or_else(|e| e.into_inner()),
                Some(d) => {
                    let left = d.saturating_duration_since(Instant::now());
                    if left.is_zero() {
                        return None;
                    }
                    q = self.0.ready.wait_timeout(q, left).unwrap_or_else(|e| e.into_inner()).0;
                }
            }
        }
    }

    /// Moves the queued events of `id` (a `ConnectRequest` belongs to its
    /// listener), in order, behind `to`'s: `rdma_migrate_id` takes an id's
    /// pending events along, as the kernel's ucma does, so an event queued
    /// between `rdma_accept` and the migration (librpma's ESTABLISHED) is
    /// not left on the old channel.
    pub(super) fn move_events(&self, id: &CmId, to: &EventChannel) {
        if Arc::ptr_eq(&self.0, &to.0) {
            return;
        }
        let moved: VecDeque<Event> = {
            let mut q = self.0.queue.lock().unwrap_or_else(|e| e.into_inner());
            let (moved, kept) = q.drain(..).partition(|e: &Event| e.listen_id.as_ref().unwrap_or(&e.id) == id);
            *q = kept;
            // One count off the eventfd per event taken: each push added one.
            for _ in &moved {
                let _ = rustix::io::read(&self.0.fd, &mut [0u8; 8]);
            }
            moved
        };
        for e in moved {
            to.push(e);
        }
    }

    pub(super) fn push(&self, e: Event) {
        let mut q = self.0.queue.lock().unwrap_or_else(|e| e.into_inner());
        q.push_back(e);
        // The count goes up under the lock that the taking threads hold
        // when they take one off: written after it, a taker on an
        // O_NONBLOCK fd (rsocket, UCX set it) could pop the event first,
        // find the count still 0 (EAGAIN), and the count would then stay 1
        // on an empty queue: a readable fd with nothing to read.
        let _ = rustix::io::write(&self.0.fd, &1u64.to_ne_bytes());
        drop(q);
        self.0.ready.notify_all();
    }
}

#[cfg(test)]
mod tests {
    use super::EventType;

    #[test]
    fn event_types_number_and_name_as_librdmacm_does() {
        for v in 0..19 {
            let e = EventType::from_raw(v).unwrap();
            assert_eq!(e as u32, v);
            assert!(e.name().starts_with("RDMA_CM_EVENT_"));
            assert_eq!(e.c_name().to_str().unwrap(), e.name());
        }
        assert_eq!(EventType::from_raw(9).unwrap().name(), "RDMA_CM_EVENT_ESTABLISHED");
        assert_eq!(EventType::from_raw(16), Some(EventType::AddrinfoResolved));
        assert_eq!(EventType::from_raw(18), Some(EventType::User));
        assert_eq!(EventType::from_raw(19), None);
    }
}
