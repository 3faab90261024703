//! RoCEv2 on the wire: everything between the UDP header and the end of the
//! packet, as Linux `rdma_rxe` and RoCE NICs put it there.
//!
//! ```text
//! | IP | UDP (dst 4791) | BTH | ext. headers by opcode | payload | pad | ICRC |
//!                       |<----------- a `Packet` view covers this ------------>|
//! ```
//!
//! The crate has no I/O and no state. Each header has a zero-copy view
//! (`Bth<T>`, `Reth<T>`, ...) over any `AsRef<[u8]>` buffer and a small
//! `*Repr` struct that parses from and emits to bytes, as in smoltcp.
//! [`Packet`] validates a whole BTH..ICRC layout against the [`opcode`] table,
//! [`PacketRepr`] re-emits it, and [`icrc`] computes and verifies the
//! invariant CRC. Every sequence-number comparison goes through [`Psn`].

#![forbid(unsafe_code)]

pub mod field;

pub mod aeth;
pub mod atomic_ack_eth;
pub mod atomic_eth;
pub mod bth;
pub mod deth;
pub mod ecn;
pub mod error;
pub mod feth;
pub mod icrc;
pub mod ieth;
pub mod immdt;
pub mod opcode;
pub mod packet;
pub mod psn;
pub mod reth;

pub use aeth::{Aeth, AethRepr, NakCode, RnrTimer, Syndrome};
pub use atomic_ack_eth::{AtomicAckEth, AtomicAckEthRepr};
pub use atomic_eth::{AtomicEth, AtomicEthRepr};
pub use bth::{Bth, BthRepr};
pub use deth::{Deth, DethRepr};
pub use ecn::Ecn;
pub use error::WireError;
pub use feth::{Feth, FethRepr};
pub use icrc::{IcrcCheck, IcrcContext, IcrcHasher, IcrcPolicy, IpContext, Ipv4IdFixup, Ipv4IdFixups};
pub use ieth::{Ieth, IethRepr};
pub use immdt::{ImmDt, ImmDtRepr};
pub use opcode::{Direction, ExtHeader, Opcode, OpcodeInfo, Operation, Position, Transport};
pub use packet::{ExtRepr, Packet, PacketRepr};
pub use psn::Psn;
pub use reth::{Reth, RethRepr};

/// The UDP destination port of RoCEv2 (IANA "roce").
pub const ROCE_V2_UDP_PORT: u16 = 4791;
/// Length of the trailing invariant CRC.
pub const ICRC_LEN: usize = 4;
/// Path MTUs RoCE allows (payload bytes per packet).
pub const PATH_MTUS: [usize; 5] = [256, 512, 1024, 2048, 4096];
