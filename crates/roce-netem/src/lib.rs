//! Seeded impairment relay between two TUN devices: the library half of the `roce-netem` test tool.
//!
//! `roce-netem relay` reads every IP packet from one TUN device and writes it to the other, in both
//! directions, dropping, duplicating, delaying, reordering and corrupting packets on the way with a seeded
//! random generator ([`impair`]). With each TUN device moved into its own network namespace
//! (`scripts/netns/setup.sh`), two "hosts" talk through the relay. The kernel has no `netem` qdisc here;
//! this is the substitute, and corruption is done so that the UDP checksum stays valid and only the RoCE
//! ICRC can catch it ([`packet::corrupt_udp_payload`]).
//!
//! [`probe`] is a numbered-datagram sender and checking receiver for testing the whole path.

pub mod impair;
pub mod packet;
pub mod parse;
pub mod probe;
pub mod relay;
mod sys;
pub mod tun;

pub use impair::{Config, ConfigError, Impairer, Stats};
