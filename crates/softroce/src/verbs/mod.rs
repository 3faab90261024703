//! The verbs objects. Everything is in `qp.rs` for one commit, so that its
//! history follows `verbs.rs`; the next splits it into a file per object.

mod qp;

pub use qp::*;
