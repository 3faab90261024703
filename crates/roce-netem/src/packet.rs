//! Just enough IPv4/IPv6/UDP parsing to find a UDP payload, flip one bit in it and fix the UDP checksum.
//!
//! A packet read from a TUN device opened with `IFF_NO_PI` is a bare IP packet. Only unfragmented UDP
//! datagrams whose headers are consistent are ever touched: fragments, truncated packets, IPv6 jumbograms
//! and every other protocol are left alone.

/// IP protocol number of UDP.
const IPPROTO_UDP: u8 = 17;

/// IP version of a packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IpVersion {
    /// IPv4.
    V4,
    /// IPv6.
    V6,
}

/// Where the UDP datagram sits inside an IP packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UdpLocation {
    /// IP version of the enclosing packet.
    pub version: IpVersion,
    /// Offset of the UDP header in the packet.
    pub udp_offset: usize,
    /// Length of the UDP datagram (header and payload) as its length field says.
    pub udp_len: usize,
}

impl UdpLocation {
    /// Offset of the first payload byte.
    pub fn payload_offset(&self) -> usize {
        self.udp_offset + 8
    }

    /// Number of payload bytes (may be 0).
    pub fn payload_len(&self) -> usize {
        self.udp_len - 8
    }

    /// Offset of the UDP checksum field.
    pub fn checksum_offset(&self) -> usize {
        self.udp_offset + 6
    }
}

fn be16(b: &[u8], at: usize) -> usize {
    usize::from(u16::from_be_bytes([b[at], b[at + 1]]))
}

/// Finds the UDP datagram in an IPv4 or IPv6 packet.
///
/// Returns `None` for anything that is not a complete, unfragmented UDP datagram with consistent lengths.
pub fn find_udp(pkt: &[u8]) -> Option<UdpLocation> {
    let (version, udp_offset, ip_end) = match pkt.first()? >> 4 {
        4 => {
            if pkt.len() < 20 {
                return None;
            }
            let ihl = usize::from(pkt[0] & 0x0f) * 4;
            let total = be16(pkt, 2);
            if ihl < 20 || total < ihl || total > pkt.len() || pkt[9] != IPPROTO_UDP {
                return None;
            }
            // More-fragments flag or a non-zero fragment offset: not a whole datagram.
            if be16(pkt, 6) & 0x3fff != 0 {
                return None;
            }
            (IpVersion::V4, ihl, total)
        }
        6 => {
            if pkt.len() < 40 {
                return None;
            }
            let payload_len = be16(pkt, 4);
            // 0 means a jumbogram (hop-by-hop option): not handled.
            if payload_len == 0 || 40 + payload_len > pkt.len() {
                return None;
            }
            let end = 40 + payload_len;
            let mut next = pkt[6];
            let mut off = 40;
            // Walk the extension headers that may precede UDP; give up on fragments and anything unknown.
            loop {
                match next {
                    IPPROTO_UDP => break,
                    0 | 43 | 60 => {
                        if off + 8 > end {
                            return None;
                        }
                        next = pkt[off];
                        off += (usize::from(pkt[off + 1]) + 1) * 8;
                    }
                    _ => return None,
                }
            }
            (IpVersion::V6, off, end)
        }
        _ => return None,
    };
    if udp_offset + 8 > ip_end {
        return None;
    }
    let udp_len = be16(pkt, udp_offset + 4);
    if udp_len < 8 || udp_offset + udp_len > ip_end {
        return None;
    }
    Some(UdpLocation { version, udp_offset, udp_len })
}

/// Adds big-endian 16-bit words of `data` to a ones'-complement running sum (odd tail padded with zero).
fn sum_words(mut sum: u64, data: &[u8]) -> u64 {
    let mut chunks = data.chunks_exact(2);
    for c in &mut chunks {
        sum += u64::from(u16::from_be_bytes([c[0], c[1]]));
    }
    if let [last] = chunks.remainder() {
        sum += u64::from(*last) << 8;
    }
    sum
}

fn fold(mut sum: u64) -> u16 {
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    sum as u16
}

/// Computes the UDP checksum of the datagram at `loc`, as it should be stored in the checksum field
/// (the checksum field's current content is ignored; a computed 0 is returned as `0xffff`).
pub fn compute_udp_checksum(pkt: &[u8], loc: &UdpLocation) -> u16 {
    let mut sum = 0u64;
    match loc.version {
        IpVersion::V4 => {
            sum = sum_words(sum, &pkt[12..20]);
            sum += u64::from(IPPROTO_UDP);
        }
        IpVersion::V6 => {
            sum = sum_words(sum, &pkt[8..40]);
            sum += u64::from(IPPROTO_UDP);
        }
    }
    sum += loc.udp_len as u64;
    let udp = &pkt[loc.udp_offset..loc.udp_offset + loc.udp_len];
    sum = sum_words(sum, &udp[..6]);
    sum = sum_words(sum, &udp[8..]);
    match !fold(sum) {
        0 => 0xffff,
        c => c,
    }
}

/// Result of checking a UDP checksum.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChecksumState {
    /// The checksum field is 0: no checksum (legal for IPv4 only).
    Absent,
    /// The checksum is correct.
    Valid,
    /// The checksum is wrong (or 0 in IPv6, where it is mandatory).
    Invalid,
}

/// Checks the UDP checksum of a packet, or returns `None` if it is not a UDP datagram [`find_udp`] accepts.
pub fn udp_checksum_state(pkt: &[u8]) -> Option<ChecksumState> {
    let loc = find_udp(pkt)?;
    let stored = u16::from_be_bytes([pkt[loc.checksum_offset()], pkt[loc.checksum_offset() + 1]]);
    Some(match (stored, loc.version) {
        (0, IpVersion::V4) => ChecksumState::Absent,
        (0, IpVersion::V6) => ChecksumState::Invalid,
        (s, _) if s == compute_udp_checksum(pkt, &loc) => ChecksumState::Valid,
        _ => ChecksumState::Invalid,
    })
}

/// Flips one bit of the UDP payload and fixes the UDP checksum so the receiving kernel still delivers the
/// datagram (only an end-to-end check such as the RoCE ICRC can then notice).
///
/// `pick` is given the number of payload bits and returns the index of the bit to flip (it is reduced modulo
/// that number). The checksum is recomputed, except that an IPv4 datagram sent without a checksum (field 0)
/// keeps 0. Returns the flipped bit's index within the payload, or `None` (packet unchanged) if the packet is
/// not a UDP datagram [`find_udp`] accepts or its payload is empty.
pub fn corrupt_udp_payload(pkt: &mut [u8], pick: impl FnOnce(usize) -> usize) -> Option<usize> {
    let loc = find_udp(pkt)?;
    let bits = loc.payload_len() * 8;
    if bits == 0 {
        return None;
    }
    let bit = pick(bits) % bits;
    pkt[loc.payload_offset() + bit / 8] ^= 0x80 >> (bit % 8);
    let at = loc.checksum_offset();
    let had_checksum = pkt[at] != 0 || pkt[at + 1] != 0;
    if had_checksum || loc.version == IpVersion::V6 {
        let c = compute_udp_checksum(pkt, &loc);
        pkt[at..at + 2].copy_from_slice(&c.to_be_bytes());
    }
    Some(bit)
}

/// Builds an IPv4 UDP packet (no options, DF set, valid IP header checksum; UDP checksum computed when
/// `with_checksum`, else 0). Handy for tests and for the relay's self-checks.
pub fn build_ipv4_udp(
    src: [u8; 4],
    dst: [u8; 4],
    sport: u16,
    dport: u16,
    payload: &[u8],
    with_checksum: bool,
) -> Vec<u8> {
    let total = 20 + 8 + payload.len();
    let mut p = Vec::with_capacity(total);
    p.extend_from_slice(&[0x45, 0]);
    p.extend_from_slice(&(total as u16).to_be_bytes());
    p.extend_from_slice(&[0, 0, 0x40, 0, 64, IPPROTO_UDP, 0, 0]);
    p.extend_from_slice(&src);
    p.extend_from_slice(&dst);
    let hsum = !fold(sum_words(0, &p[..20]));
    p[10..12].copy_from_slice(&hsum.to_be_bytes());
    push_udp(&mut p, IpVersion::V4, sport, dport, payload, with_checksum);
    p
}

/// Builds an IPv6 UDP packet with no extension headers and a valid UDP checksum.
pub fn build_ipv6_udp(src: [u8; 16], dst: [u8; 16], sport: u16, dport: u16, payload: &[u8]) -> Vec<u8> {
    let mut p = Vec::with_capacity(48 + payload.len());
    p.extend_from_slice(&[0x60, 0, 0, 0]);
    p.extend_from_slice(&((8 + payload.len()) as u16).to_be_bytes());
    p.extend_from_slice(&[IPPROTO_UDP, 64]);
    p.extend_from_slice(&src);
    p.extend_from_slice(&dst);
    push_udp(&mut p, IpVersion::V6, sport, dport, payload, true);
    p
}

fn push_udp(p: &mut Vec<u8>, version: IpVersion, sport: u16, dport: u16, payload: &[u8], with_checksum: bool) {
    let udp_offset = p.len();
    let udp_len = 8 + payload.len();
    p.extend_from_slice(&sport.to_be_bytes());
    p.extend_from_slice(&dport.to_be_bytes());
    p.extend_from_slice(&(udp_len as u16).to_be_bytes());
    p.extend_from_slice(&[0, 0]);
    p.extend_from_slice(payload);
    if with_checksum {
        let loc = UdpLocation { version, udp_offset, udp_len };
        let c = compute_udp_checksum(p, &loc);
        p[udp_offset + 6..udp_offset + 8].copy_from_slice(&c.to_be_bytes());
    }
}
