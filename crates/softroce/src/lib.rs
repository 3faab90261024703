//! softroce: RDMA over Converged Ethernet v2 in user space.
//!
//! Applications post work requests (SEND, RDMA WRITE/READ, atomics, with
//! immediate data) on queue pairs; softroce moves the bytes as real RoCEv2
//! packets over UDP port 4791 and reports completions on completion
//! queues, as the verbs API promises. No kernel module, no root, no RDMA
//! hardware; wire compatible with Linux rxe and RoCE NICs.
//!
//! Two contexts on the host's loopback device (as two processes would
//! share it), an RC connection between them, and a SEND (this example runs
//! as a test):
//!
//! ```
//! use std::time::Duration;
//! use softroce::{AccessFlags, Context, Payload, QpInit, RecvWr, SendFlags, SendWr, Wc, WcOpcode, WcStatus, WrOpcode};
//!
//! // The host's loopback device, found with no configuration; two contexts
//! // on it, as two processes of the host would have.
//! let (a, b) = (Context::open("softroce_lo")?, Context::open("softroce_lo")?);
//! let (pa, pb) = (a.alloc_pd()?, b.alloc_pd()?);
//! let (ca, cb) = (a.create_cq(16, None)?, b.create_cq(16, None)?);
//! let ma = pa.reg_mr(4096, AccessFlags::LOCAL_WRITE)?;
//! let mb = pb.reg_mr(4096, AccessFlags::LOCAL_WRITE)?;
//! let qa = pa.create_qp(QpInit::rc(&ca, &ca, 16))?;
//! let qb = pb.create_qp(QpInit::rc(&cb, &cb, 16))?;
//! // What rdma-core's examples swap over TCP: QPN, first PSN and GID.
//! let (ea, eb) = (qa.endpoint(100), qb.endpoint(200));
//! qa.connect(100, &eb)?;
//! qb.connect(200, &ea)?;
//!
//! qb.post_recv(&RecvWr { wr_id: 1, sg_list: &[mb.sge(0, 4096)] })?;
//! ma.write(0, b"hello, RDMA")?;
//! qa.post_send(&SendWr::new(2, WrOpcode::Send, SendFlags::SIGNALED, Payload::Sges(&[ma.sge(0, 11)])))?;
//!
//! let mut wc = [Wc::new(0, WcStatus::Success, WcOpcode::Send, 0); 4];
//! assert_eq!(cb.wait(&mut wc, Duration::from_secs(5))?, 1);
//! assert_eq!((wc[0].wr_id, wc[0].status, wc[0].byte_len), (1, WcStatus::Success, 11));
//! assert_eq!(mb.to_vec(0, 11)?, b"hello, RDMA");
//! # Ok::<(), softroce::Error>(())
//! ```
//!
//! Environment: every variable is in [`env`](mod@env). `SOFTROCE_DEVICES` / config
//! files name devices ([`config`]); `SOFTROCE_PROGRESS=inline` drives
//! progress from the application's calls instead of a thread;
//! `SOFTROCE_PCAP=FILE` records every packet ([`tap`]);
//! `SOFTROCE_FAULTS=drop=0.01,...` injects faults ([`faults`]).

#![deny(unsafe_code)]

mod arrivals;
#[cfg(feature = "tokio")]
mod async_cq;
mod async_events;
mod atomic_instant;
mod census;
mod channel;
pub mod config;
mod context;
mod driver;
mod driver_policy;
mod driver_stats;
pub mod env;
mod error;
pub mod faults;
mod fork;
mod gids;
mod local_link;
mod mcast;
mod odp;
mod port;
pub mod rdma_cm;
/// The device's CM: QP 1 and a `roce_cm` agent ([`cm::CmService`]), which
/// rdma_cm's ids run on. It lives in `rdma_cm/service.rs`.
pub mod cm {
    pub use crate::rdma_cm::service::*;
}
mod sched;
mod sg;
mod socket_link;
mod sources;
pub mod tap;
#[cfg(any(test, feature = "testing"))]
pub mod testing;
pub mod thread;
mod verbs;

#[cfg(feature = "tokio")]
pub use async_cq::AsyncCq;
pub use async_events::{AsyncEvents, EventSource};
pub use config::DeviceInfo;
pub use context::{Context, DEFAULT_DRIVER_SPIN, Options, WeakContext, devices};
pub use driver::{DriverStats, Progress};
pub use error::Error;
pub use faults::{FaultSpec, FaultStats};
pub use local_link::Link;
pub use odp::{Advice, AdviseError};
pub use roce_proto::counters::Counters;
pub use roce_proto::devattr::{DeviceAttr, OdpCaps, PortAttr};
pub use roce_proto::mr::{MwBindInfo, MwType};
pub use roce_proto::verbs::{AccessFlags, QpAttrMask, QpState, QpType, SendFlags, WcOpcode, WcStatus, WrOpcode};
pub use roce_proto::wr::{Flush, MwBind, placement, selectivity};
pub use roce_proto::{
    AhAttr, AsyncEvent, CqHandle, IbPath, Mtu, Payload, PdHandle, QpAttr, QpCap, Qpn, RecvWr, SendWr, Sge, SrqHandle,
    UdDest, Wc, WcFlags, WideMtu,
};
pub use sources::SrcPorts;
pub use verbs::{Ah, CompChannel, ConnectOptions, Cq, Mr, Mw, Pd, Qp, QpEndpoint, QpInit, Srq, ToInit, ToRtr, ToRts};
