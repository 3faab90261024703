//! The sans-IO RoCEv2 engine (work in progress): the verbs' vocabulary and
//! the QP lifecycle table. The protocol roles (requester, completer,
//! responder) build on these.

#![deny(unsafe_code)]

pub mod cq;
pub mod mem;
pub mod mr;
pub mod qp_state;
pub mod verbs;
pub mod wr;
