//! softroce: RDMA over Converged Ethernet v2 in user space.
//!
//! Applications post work requests (SEND, RDMA WRITE/READ, atomics, with
//! immediate data) on queue pairs; softroce moves the bytes as real RoCEv2
//! packets over UDP port 4791 and reports completions on completion
//! queues, as the verbs API promises. No kernel module, no root, no RDMA
//! hardware; wire compatible with Linux rxe and RoCE NICs.
//!
//! ```no_run
//! use softroce::{Context, QpInit, AccessFlags, SendFlags, Payload, SendWr, WrOpcode, Wc};
//!
//! let ctx = Context::open("softroce_lo")?;
//! let pd = ctx.alloc_pd()?;
//! let cq = ctx.create_cq(64, None)?;
//! let mr = pd.reg_mr(4096, AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE)?;
//! let qp = pd.create_qp(QpInit::rc(&cq, &cq, 64))?;
//! // Exchange qp.endpoint(psn) with the peer out of band, then:
//! # let peer = qp.endpoint(0);
//! qp.connect(0, &peer)?;
//! let sge = [mr.sge(0, 4096)];
//! qp.post_send(&SendWr::new(1, WrOpcode::Send, SendFlags::SIGNALED, Payload::Sges(&sge)))?;
//! let mut wc = [Wc::new(0, softroce::WcStatus::Success, softroce::WcOpcode::Send, 0); 16];
//! let n = cq.wait(&mut wc, std::time::Duration::from_secs(1))?;
//! # let _ = n;
//! # Ok::<(), softroce::Error>(())
//! ```
//!
//! Environment: `SOFTROCE_DEVICES` / config files name devices
//! ([`config`]); `SOFTROCE_PROGRESS=inline` drives progress from the
//! application's calls instead of a thread; `SOFTROCE_PCAP=FILE` records
//! every packet ([`tap`]); `SOFTROCE_FAULTS=drop=0.01,...` injects faults
//! ([`faults`]).

#![deny(unsafe_code)]

#[cfg(feature = "tokio")]
mod async_cq;
mod channel;
pub mod config;
mod context;
mod driver;
mod error;
pub mod faults;
pub mod tap;
mod verbs;

#[cfg(feature = "tokio")]
pub use async_cq::AsyncCq;
pub use config::DeviceInfo;
pub use context::{Context, Options, devices};
pub use driver::{DriverStats, Progress};
pub use error::Error;
pub use faults::{FaultSpec, FaultStats};
pub use roce_proto::counters::Counters;
pub use roce_proto::devattr::{DeviceAttr, PortAttr};
pub use roce_proto::mr::{MwBindInfo, MwType};
pub use roce_proto::verbs::{AccessFlags, QpAttrMask, QpState, QpType, SendFlags, WcOpcode, WcStatus, WrOpcode};
pub use roce_proto::wr::MwBind;
pub use roce_proto::{AsyncEvent, Mtu, Payload, QpAttr, QpCap, RecvWr, SendWr, Sge, UdDest, Wc, WcFlags};
pub use verbs::{Ah, CompChannel, ConnectOptions, Cq, Mr, Mw, Pd, Qp, QpEndpoint, QpInit, Srq};
