//! rsockets' C entry points: librdmacm's `rsocket`, `rbind`, `rlisten`,
//! `raccept`, `rconnect`, `rsend`, `rrecv`, `rpoll`, `rselect`, `riomap`,
//! `riowrite`, `rsetsockopt`, ... (`RDMACM_1.0`) and rdma-core 65's
//! `repoll_*` (`RDMACM_1.5`). Only the C side lives here: arguments read
//! from C and checked, results and `errno` as rsockets returns them, the
//! symbols in their version nodes, and the one call that needs this
//! library's internals (`rsocket` makes rdma_cm share the contexts
//! `ibv_open_device` opens).
//!
//! The protocol and the sockets (connection data, the stream over RDMA
//! WRITE WITH IMMEDIATE, credits, shutdown, riomap, `rpoll`, the process's
//! sockets by number) are the `softroce-rsocket` crate's, whose crate
//! documentation says what is implemented, what is left out and where it
//! departs from rdma-core's behaviour.

mod api;
mod repoll;
