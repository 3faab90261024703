//! The sans-IO RoCEv2 engine (work in progress): the verbs' vocabulary and
//! the QP lifecycle table. The protocol roles (requester, completer,
//! responder) build on these.

#![forbid(unsafe_code)]

pub mod qp_state;
pub mod verbs;
