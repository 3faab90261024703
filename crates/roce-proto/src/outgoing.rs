//! What a role hands the device for each packet it wrote (the requester's
//! requests, the responder's ACKs, READ responses and CNPs).

use std::net::IpAddr;

/// Payloads up to this size are copied behind the headers even for a
/// scatter-gather send: an extra iovec costs more than the copy.
pub(crate) const SMALL_PAYLOAD: usize = 256;

/// A packet a role wrote into the caller's buffer: `len` bytes of BTH
/// through pad (the device appends the ICRC), for `dst`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Outgoing {
    /// Packet length without the ICRC.
    pub(crate) len: usize,
    /// Bytes of it written into the buffer: all of them, or with a gather
    /// sink only the headers (the payload is in the sink's pieces, the pad
    /// is the sender's to add).
    pub(crate) head_len: usize,
    /// Destination address.
    pub(crate) dst: IpAddr,
    /// Index of the source GID.
    pub(crate) sgid_index: u8,
}
