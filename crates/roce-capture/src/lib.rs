//! RoCEv2 traffic in capture files.
//!
//! [`read_frames`] reads classic pcap (micro- or nanosecond) and pcapng,
//! gzip-compressed or not; [`classify`] finds the RoCEv2 datagram (UDP
//! destination port 4791) in a frame of an Ethernet, Linux cooked (SLL,
//! SLL2), BSD loopback or raw IP link, with the raw IP and UDP headers the
//! ICRC needs. [`PcapWriter`] writes classic pcap.

mod reader;
mod writer;

pub use reader::{Classified, Frame, RoceDatagram, classify, read_file, read_frames};
pub use writer::PcapWriter;

/// Link-layer header types (tcpdump.org linktypes) this crate reads.
pub mod linktype {
    /// BSD loopback: 4-byte address family in host byte order.
    pub const NULL: u32 = 0;
    /// Ethernet II, with or without 802.1Q tags.
    pub const ETHERNET: u32 = 1;
    /// Raw IPv4 or IPv6.
    pub const RAW: u32 = 101;
    /// Linux cooked capture v1 (`tcpdump -i any`).
    pub const LINUX_SLL: u32 = 113;
    /// Raw IPv4.
    pub const IPV4: u32 = 228;
    /// Raw IPv6.
    pub const IPV6: u32 = 229;
    /// Linux cooked capture v2 (`tshark -i any`).
    pub const LINUX_SLL2: u32 = 276;
}

/// Why a capture file could not be read.
#[derive(Debug, thiserror::Error)]
pub enum CaptureError {
    /// Reading the file failed.
    #[error("cannot read {path}: {source}")]
    Io {
        /// The file.
        path: String,
        /// The OS error.
        source: std::io::Error,
    },
    /// The gzip stream is corrupt.
    #[error("corrupt gzip data: {0}")]
    Gzip(std::io::Error),
    /// Neither a pcap nor a pcapng file.
    #[error("not a pcap or pcapng capture (magic {0:02x?})")]
    NotACapture(Vec<u8>),
    /// The capture's structure is broken.
    #[error("malformed {format} capture: {reason}")]
    Malformed {
        /// `pcap` or `pcapng`.
        format: &'static str,
        /// What the parser said.
        reason: String,
    },
}
