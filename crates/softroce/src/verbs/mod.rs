//! The verbs objects: protection domains, memory regions and windows,
//! completion queues and channels, queue pairs, SRQs and address handles.
//! Each holds what it depends on (a QP its CQs and PD), so Rust's drop
//! order destroys them in the order verbs requires.
//!
//! One object per file, each with the call that makes it (`Pd::reg_mr` in
//! `mr.rs`, `Context::create_cq` in `cq.rs`): `pd.rs`, `mr.rs`, `mw.rs`,
//! `cq.rs`, `comp_channel.rs`, `qp.rs` (with what a QP is made and moved
//! with), `srq.rs`, `ah.rs`. This file only declares and re-exports.

mod ah;
mod comp_channel;
mod cq;
mod mr;
mod mw;
mod pd;
mod qp;
mod srq;

pub use ah::Ah;
pub use comp_channel::CompChannel;
pub use cq::Cq;
pub use mr::Mr;
pub use mw::Mw;
pub use pd::Pd;
pub use qp::{ConnectOptions, Qp, QpEndpoint, QpInit, ToInit, ToRtr, ToRts};
pub use srq::Srq;
