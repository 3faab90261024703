//! The InfiniBand Communication Manager (IBTA vol. 1 chapter 12) as Linux
//! `ib_cm` and `rdma_cm` speak it over RoCEv2: what a userspace rdma_cm
//! needs to connect to, and accept connections from, a kernel peer.
//!
//! CM messages are 256-byte MADs sent as UD SEND_ONLY packets between the
//! QP 1s of two hosts (Q_Key 0x80010000, P_Key 0xffff):
//!
//! ```text
//! | IP | UDP | BTH | DETH | MAD: common header (24) | CM message (232) | ICRC |
//!                         |<------- a `wire::CmMad` covers this ------>|
//! ```
//!
//! [`wire`] parses and emits those MADs: the common MAD header, every
//! connection message (REQ, REP, RTU, DREQ, DREP, REJ, MRA) and the UD
//! service-ID resolution pair (SIDR_REQ, SIDR_REP), the rdma_cm header at the
//! start of REQ and SIDR_REQ private data, and the rdma_cm IP service IDs.
//! Messages are plain `*Repr` values, so a state machine builds them by value.
//! The crate does no I/O.

#![forbid(unsafe_code)]

pub mod wire;

pub mod cm;
pub mod cm_state;

pub mod cma;
