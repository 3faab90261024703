//! Envelopes: the datagrams members of a shared device send each other
//! through the group's own address, steered to a seat by the program.
//!
//! ```text
//!  0               4               8                              24
//!  +---------------+---------------+------------------------------+
//!  | FF F5 53 52   | seat (BE u32) | secret (16 bytes, the file's)|
//!  +-------+-------+---------------+------------------------------+
//!  24      25      26      28                                     36
//!  | kind  | hops  | 0  0  | member incarnation (BE u64)          |
//!  +-------+-------+-------+--------------------------------------+
//!  Forward (kind 1): 36..52 source address (IPv6, or IPv4-mapped),
//!     52..54 source port, 54..70 destination address, 70.. the packet
//!  Wake (kind 2):    nothing more
//!  Probe (kind 3):   36..44 generation (BE u64)
//! ```
//!
//! The first byte, 0xFF, is a reserved (manufacturer) opcode and the
//! second says BTH transport version 15: no RoCE packet starts so. An
//! envelope counts only with the secret, which only processes of the
//! device file's user can read.

use std::net::{IpAddr, Ipv6Addr};

/// Word 0 of every envelope, big-endian.
pub const MAGIC: u32 = 0xfff5_5352;
/// Bytes before a forwarded packet.
pub const FORWARD_HEADER: usize = 70;
/// Most hops a forwarded packet makes before it is dropped (and counted).
pub const MAX_HOPS: u8 = 4;

const KIND_FORWARD: u8 = 1;
const KIND_WAKE: u8 = 2;
const KIND_PROBE: u8 = 3;

/// A parsed envelope.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Envelope<'a> {
    /// A packet that reached the wrong member, for `member`.
    Forward {
        /// The member meant (low 48 bits of its incarnation).
        member: u64,
        /// Members it went through.
        hops: u8,
        /// The packet's IP source.
        src: IpAddr,
        /// The packet's UDP source port.
        src_port: u16,
        /// The packet's IP destination.
        dst: IpAddr,
        /// The packet (UDP payload).
        packet: &'a [u8],
    },
    /// Ends a sleep in `recvmmsg` of `member`.
    Wake {
        /// The member meant.
        member: u64,
    },
    /// Whoever gets this sits at `seat` of the group (`generation`'s count).
    Probe {
        /// The seat the program steered it to.
        seat: u32,
        /// The reconciliation it belongs to.
        generation: u64,
    },
}

/// Why a datagram that starts like an envelope was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum EnvelopeError {
    /// Shorter than its kind needs.
    #[error("envelope truncated")]
    Truncated,
    /// Not the device file's secret: not from a member.
    #[error("envelope with a wrong secret")]
    BadSecret,
    /// An unknown kind.
    #[error("envelope of unknown kind {0}")]
    UnknownKind(u8),
}

/// Whether `data` starts like an envelope.
pub fn is_envelope(data: &[u8]) -> bool {
    data.len() >= 4 && u32::from_be_bytes([data[0], data[1], data[2], data[3]]) == MAGIC
}

fn v6(a: IpAddr) -> [u8; 16] {
    match a {
        IpAddr::V4(v) => v.to_ipv6_mapped().octets(),
        IpAddr::V6(v) => v.octets(),
    }
}

fn ip(b: &[u8]) -> IpAddr {
    let a = Ipv6Addr::from(<[u8; 16]>::try_from(b).expect("16 bytes"));
    a.to_ipv4_mapped().map_or(IpAddr::V6(a), IpAddr::V4)
}

fn header(out: &mut Vec<u8>, seat: u32, secret: &[u8; 16], kind: u8, hops: u8, member: u64) {
    out.clear();
    out.extend_from_slice(&MAGIC.to_be_bytes());
    out.extend_from_slice(&seat.to_be_bytes());
    out.extend_from_slice(secret);
    out.extend_from_slice(&[kind, hops, 0, 0]);
    out.extend_from_slice(&member.to_be_bytes());
}

/// Writes a Forward envelope's header (the packet follows it as its own
/// iovec, or appended by the caller).
#[allow(clippy::too_many_arguments)]
pub fn forward_header(
    out: &mut Vec<u8>,
    seat: u32,
    secret: &[u8; 16],
    member: u64,
    hops: u8,
    src: IpAddr,
    src_port: u16,
    dst: IpAddr,
) {
    header(out, seat, secret, KIND_FORWARD, hops, member);
    out.extend_from_slice(&v6(src));
    out.extend_from_slice(&src_port.to_be_bytes());
    out.extend_from_slice(&v6(dst));
}

/// Writes a Wake envelope.
pub fn wake(out: &mut Vec<u8>, seat: u32, secret: &[u8; 16], member: u64) {
    header(out, seat, secret, KIND_WAKE, 0, member);
}

/// Writes a Probe envelope.
pub fn probe(out: &mut Vec<u8>, seat: u32, secret: &[u8; 16], generation: u64) {
    header(out, seat, secret, KIND_PROBE, 0, 0);
    out.extend_from_slice(&generation.to_be_bytes());
}

/// Parses an envelope (`data` passed [`is_envelope`]) whose secret must
/// be `secret`.
pub fn parse<'a>(data: &'a [u8], secret: &[u8; 16]) -> Result<Envelope<'a>, EnvelopeError> {
    if data.len() < 36 {
        return Err(EnvelopeError::Truncated);
    }
    // Not a short-circuiting comparison: a guess learns nothing by timing.
    if data[8..24].iter().zip(secret).fold(0u8, |d, (a, b)| d | (a ^ b)) != 0 {
        return Err(EnvelopeError::BadSecret);
    }
    let seat = u32::from_be_bytes(data[4..8].try_into().expect("4 bytes"));
    let (kind, hops) = (data[24], data[25]);
    let member = u64::from_be_bytes(data[28..36].try_into().expect("8 bytes"));
    match kind {
        KIND_FORWARD => {
            if data.len() < FORWARD_HEADER {
                return Err(EnvelopeError::Truncated);
            }
            Ok(Envelope::Forward {
                member,
                hops,
                src: ip(&data[36..52]),
                src_port: u16::from_be_bytes([data[52], data[53]]),
                dst: ip(&data[54..70]),
                packet: &data[FORWARD_HEADER..],
            })
        }
        KIND_WAKE => Ok(Envelope::Wake { member }),
        KIND_PROBE => {
            let g = data.get(36..44).ok_or(EnvelopeError::Truncated)?;
            Ok(Envelope::Probe { seat, generation: u64::from_be_bytes(g.try_into().expect("8 bytes")) })
        }
        k => Err(EnvelopeError::UnknownKind(k)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: [u8; 16] = [9; 16];

    #[test]
    fn every_kind_round_trips() {
        let mut b = Vec::new();
        let (src, dst): (IpAddr, IpAddr) = ("10.1.2.3".parse().unwrap(), "::1".parse().unwrap());
        forward_header(&mut b, 3, &S, 77, 1, src, 50000, dst);
        assert_eq!(b.len(), FORWARD_HEADER);
        b.extend_from_slice(b"packet");
        assert!(is_envelope(&b));
        assert_eq!(u32::from_be_bytes(b[4..8].try_into().unwrap()), 3);
        assert_eq!(
            parse(&b, &S),
            Ok(Envelope::Forward { member: 77, hops: 1, src, src_port: 50000, dst, packet: b"packet" })
        );
        wake(&mut b, 2, &S, 5);
        assert_eq!(parse(&b, &S), Ok(Envelope::Wake { member: 5 }));
        probe(&mut b, 4, &S, 99);
        assert_eq!(parse(&b, &S), Ok(Envelope::Probe { seat: 4, generation: 99 }));
    }

    #[test]
    fn forgeries_and_fragments_are_refused() {
        let mut b = Vec::new();
        wake(&mut b, 2, &S, 5);
        assert_eq!(parse(&b, &[8; 16]), Err(EnvelopeError::BadSecret));
        assert_eq!(parse(&b[..35], &S), Err(EnvelopeError::Truncated));
        let mut k = b.clone();
        k[24] = 9;
        assert_eq!(parse(&k, &S), Err(EnvelopeError::UnknownKind(9)));
        forward_header(&mut b, 0, &S, 1, 0, "1.2.3.4".parse().unwrap(), 1, "1.2.3.5".parse().unwrap());
        assert_eq!(parse(&b[..69], &S), Err(EnvelopeError::Truncated));
        probe(&mut b, 0, &S, 1);
        assert_eq!(parse(&b[..40], &S), Err(EnvelopeError::Truncated));
        // A RoCE packet never looks like one: opcode 0xFF with TVer 15.
        assert!(!is_envelope(&[0x04, 0x40, 0xff, 0xff, 0, 0, 0, 0x11]));
        assert!(!is_envelope(&[0xff, 0xf5]));
    }
}
