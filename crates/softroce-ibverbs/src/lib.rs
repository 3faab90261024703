//! A drop-in `libibverbs.so.1` over softroce.
//!
//! Unmodified programs linked against rdma-core 44's libibverbs
//! (`ibv_rc_pingpong`, perftest, qperf, pyverbs) load this library instead
//! (`softroce run -- PROGRAM`, or `LD_LIBRARY_PATH`) and talk RoCEv2 over
//! UDP through softroce. The facts it is built on (symbols, version nodes,
//! struct layouts, the verbs that header-inline functions reach through
//! pointers) are in `docs/ibverbs.md`.
//!
//! Layout: [`abi`] mirrors rdma-core's structs; `export` turns Rust
//! functions into versioned C symbols; one module per object family holds
//! the verbs (`device`, `context`, `pd`, `cq` with the extended CQ, `qp`
//! with the `ibv_wr_*` builder, `srq`, `ah`, `mw`); what they share has a
//! file of its own: `errno` (a softroce error's errno), `fd` (waiting on a
//! program's descriptors) and `ops` (the context's operation tables, the
//! one place that names every object module). rdma-core 65's
//! additions have theirs (`buf`, `comp_cntr`), `lid` answers LID-only
//! addressing, `provider` the private provider interface, `rdmacm` and
//! [`rdmacm_abi`] librdmacm, `rsocket` the C entry points of rsockets
//! (the protocol is the `softroce-rsocket` crate's), and `stubs` every other
//! symbol rdma-core's binaries and helper libraries import.

// This crate is the C ABI: its entry points take raw pointers from C by
// definition. Each dereference carries a SAFETY comment.
#![allow(unsafe_code)]
// C structs are filled field by field from a zeroed default, as C code
// fills them; struct-literal syntax would hide which fields matter.
#![allow(clippy::field_reassign_with_default)]

pub mod abi;
mod export;

mod ah;
mod buf;
mod comp_cntr;
mod context;
mod cq;
mod device;
mod errno;
mod fd;
mod lid;
mod mw;
mod ops;
mod pd;
mod provider;
mod qp;
mod query;
mod rdmacm;
pub mod rdmacm_abi;
mod rsocket;
mod srq;
mod stubs;
