//! Capture files in, frames and RoCEv2 datagrams out.

use std::io::Read;
use std::net::{IpAddr, SocketAddr};

use etherparse::{EtherType, LaxNetSlice, LaxSlicedPacket, NetSlice, SlicedPacket, TransportSlice};
use pcap_parser::pcapng::Block;
use roce_wire::{IcrcContext, IcrcHasher, IpContext, Packet, ROCE_V2_UDP_PORT, WireError};

use crate::{CaptureError, linktype};

/// One captured frame.
#[derive(Debug, Clone, PartialEq)]
pub struct Frame {
    /// 1-based position in the file, as Wireshark numbers frames.
    pub number: usize,
    /// Capture time in seconds since the Unix epoch.
    pub time: f64,
    /// Link-layer header type (see [`crate::linktype`]).
    pub linktype: u32,
    /// The captured bytes.
    pub data: Vec<u8>,
    /// Whether the capture cut the frame short (caplen < original length).
    pub truncated: bool,
}

/// Reads a capture file (see [`read_frames`]).
pub fn read_file(path: &std::path::Path) -> Result<Vec<Frame>, CaptureError> {
    let bytes = std::fs::read(path).map_err(|source| CaptureError::Io { path: path.display().to_string(), source })?;
    read_frames(&bytes)
}

/// Reads every frame of a pcap or pcapng capture, gzip-compressed or not.
pub fn read_frames(bytes: &[u8]) -> Result<Vec<Frame>, CaptureError> {
    if bytes.starts_with(&[0x1f, 0x8b]) {
        let mut raw = Vec::new();
        flate2::read::MultiGzDecoder::new(bytes).read_to_end(&mut raw).map_err(CaptureError::Gzip)?;
        return read_frames(&raw);
    }
    match bytes.get(..4) {
        Some([0x0a, 0x0d, 0x0d, 0x0a]) => read_pcapng(bytes),
        Some(
            [0xd4, 0xc3, 0xb2, 0xa1] | [0xa1, 0xb2, 0xc3, 0xd4] | [0x4d, 0x3c, 0xb2, 0xa1] | [0xa1, 0xb2, 0x3c, 0x4d],
        ) => read_pcap(bytes),
        _ => Err(CaptureError::NotACapture(bytes.iter().take(4).copied().collect())),
    }
}

fn malformed(format: &'static str, reason: impl ToString) -> CaptureError {
    CaptureError::Malformed { format, reason: reason.to_string() }
}

fn read_pcap(bytes: &[u8]) -> Result<Vec<Frame>, CaptureError> {
    let (rest, cap) = pcap_parser::parse_pcap(bytes).map_err(|e| malformed("pcap", e))?;
    if !rest.is_empty() {
        return Err(malformed("pcap", format!("{} bytes after the last complete record", rest.len())));
    }
    let frac = if cap.header.is_nanosecond_precision() { 1e-9 } else { 1e-6 };
    Ok(cap
        .blocks
        .iter()
        .enumerate()
        .map(|(i, b)| Frame {
            number: i + 1,
            time: f64::from(b.ts_sec) + f64::from(b.ts_usec) * frac,
            linktype: cap.header.network.0 as u32,
            data: b.data[..(b.caplen as usize).min(b.data.len())].to_vec(),
            truncated: b.caplen < b.origlen,
        })
        .collect())
}

fn read_pcapng(bytes: &[u8]) -> Result<Vec<Frame>, CaptureError> {
    let (rest, cap) = pcap_parser::parse_pcapng(bytes).map_err(|e| malformed("pcapng", e))?;
    if !rest.is_empty() {
        return Err(malformed("pcapng", format!("{} bytes after the last complete block", rest.len())));
    }
    let mut frames = Vec::new();
    for section in &cap.sections {
        // (linktype, ts offset, ts units per second) per interface of this section
        let mut ifaces: Vec<(u32, u64, u64)> = Vec::new();
        for block in &section.blocks {
            let (iface, time_raw, caplen, origlen, data) = match block {
                Block::InterfaceDescription(idb) => {
                    let res = idb.ts_resolution().ok_or_else(|| malformed("pcapng", "bad if_tsresol"))?;
                    ifaces.push((idb.linktype.0 as u32, idb.if_tsoffset as u64, res));
                    continue;
                }
                Block::EnhancedPacket(epb) => {
                    (epb.if_id as usize, Some((epb.ts_high, epb.ts_low)), epb.caplen, epb.origlen, epb.data)
                }
                Block::SimplePacket(spb) => (0, None, spb.origlen.min(spb.data.len() as u32), spb.origlen, spb.data),
                _ => continue,
            };
            let &(lt, off, res) = ifaces
                .get(iface)
                .ok_or_else(|| malformed("pcapng", format!("packet on undeclared interface {iface}")))?;
            let time = time_raw.map_or(0.0, |(hi, lo)| pcap_parser::build_ts_f64(hi, lo, off, res));
            frames.push(Frame {
                number: frames.len() + 1,
                time,
                linktype: lt,
                data: data[..(caplen as usize).min(data.len())].to_vec(),
                truncated: caplen < origlen,
            });
        }
    }
    Ok(frames)
}

/// The UDP datagram of a RoCEv2 packet and the headers around it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RoceDatagram<'a> {
    /// IP source and UDP source port.
    pub src: SocketAddr,
    /// IP destination and UDP destination port (4791).
    pub dst: SocketAddr,
    /// The raw IP header (IPv4 with options, or the 40-byte IPv6 header).
    pub ip_header: Vec<u8>,
    /// The raw UDP header.
    pub udp_header: [u8; 8],
    /// The UDP payload: BTH through ICRC.
    pub payload: &'a [u8],
    /// The IPv4 identification and DF flag (`None` for IPv6).
    pub ipv4_id_df: Option<(u16, bool)>,
}

impl RoceDatagram<'_> {
    /// An ICRC hasher over the captured IP and UDP headers: every bit the
    /// sender wrote is checked.
    pub fn icrc_hasher(&self) -> Result<IcrcHasher, WireError> {
        IcrcHasher::from_raw_headers(&self.ip_header, &self.udp_header)
    }

    /// The sender's view of the addressing, from which a packet re-emitted
    /// with [`roce_wire::PacketRepr::emit`] gets the same ICRC.
    pub fn icrc_context(&self) -> IcrcContext {
        let ip = match (self.src.ip(), self.dst.ip(), self.ipv4_id_df) {
            (IpAddr::V4(src), IpAddr::V4(dst), Some((identification, dont_fragment))) => {
                IpContext::V4 { src, dst, identification, dont_fragment }
            }
            (IpAddr::V6(src), IpAddr::V6(dst), _) => IpContext::V6 { src, dst },
            (src, dst, _) => IpContext::V6 { src: to_v6(src), dst: to_v6(dst) },
        };
        IcrcContext { ip, src_port: self.src.port(), dst_port: self.dst.port() }
    }
}

impl<'a> RoceDatagram<'a> {
    /// Splits a UDP GSO super-datagram, as a capture on `lo` or a veth shows
    /// a userspace GSO send before the kernel segments it, into the packets
    /// the kernel puts on the wire: equal-size segments (the last may be
    /// shorter), each with its own IP/UDP lengths and, for IPv4, the
    /// identification incremented per segment.
    ///
    /// The segment size is the smallest multiple of 4 whose first segment is
    /// a valid packet with a valid ICRC, and every other segment must verify
    /// too. `None` if no size works: the datagram is then what it claims.
    pub fn gso_segments(&self) -> Option<Vec<RoceDatagram<'a>>> {
        let total = self.payload.len();
        let min = roce_wire::bth::LEN + roce_wire::ICRC_LEN;
        (min..total).step_by(4).find_map(|size| {
            let good = |d: &RoceDatagram<'_>| {
                Packet::new_checked(d.payload).and_then(|p| p.verify_icrc(d.icrc_hasher()?)).is_ok()
            };
            if !good(&self.segment(0, size)) {
                return None;
            }
            let segs: Vec<RoceDatagram<'a>> = (0..total.div_ceil(size)).map(|i| self.segment(i, size)).collect();
            segs.iter().all(good).then_some(segs)
        })
    }

    /// Segment `i` of size `size`, with the headers the kernel gives it.
    fn segment(&self, i: usize, size: usize) -> RoceDatagram<'a> {
        let payload = &self.payload[i * size..((i + 1) * size).min(self.payload.len())];
        let udp_len = (8 + payload.len()) as u16;
        let mut ip_header = self.ip_header.clone();
        let mut ipv4_id_df = self.ipv4_id_df;
        if let Some((id, df)) = self.ipv4_id_df {
            let id = id.wrapping_add(i as u16);
            let total = (ip_header.len() as u16).wrapping_add(udp_len);
            ip_header[2..4].copy_from_slice(&total.to_be_bytes());
            ip_header[4..6].copy_from_slice(&id.to_be_bytes());
            ipv4_id_df = Some((id, df));
        } else {
            ip_header[4..6].copy_from_slice(&udp_len.to_be_bytes());
        }
        let mut udp_header = self.udp_header;
        udp_header[4..6].copy_from_slice(&udp_len.to_be_bytes());
        RoceDatagram { src: self.src, dst: self.dst, ip_header, udp_header, payload, ipv4_id_df }
    }
}

fn to_v6(a: IpAddr) -> std::net::Ipv6Addr {
    match a {
        IpAddr::V4(v4) => v4.to_ipv6_mapped(),
        IpAddr::V6(v6) => v6,
    }
}

/// What a frame holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Classified<'a> {
    /// Not a UDP datagram to port 4791.
    NotRoce,
    /// A complete RoCEv2 datagram.
    Roce(RoceDatagram<'a>),
    /// A UDP datagram to port 4791 whose IP/UDP framing is broken or cut short.
    Malformed(String),
}

/// Finds the RoCEv2 datagram in `frame`.
pub fn classify(frame: &Frame) -> Classified<'_> {
    let data = frame.data.as_slice();
    let strict = match frame.linktype {
        linktype::ETHERNET => SlicedPacket::from_ethernet(data),
        linktype::LINUX_SLL => SlicedPacket::from_linux_sll(data),
        linktype::LINUX_SLL2 if data.len() >= 20 => {
            SlicedPacket::from_ether_type(EtherType(u16::from_be_bytes([data[0], data[1]])), &data[20..])
        }
        linktype::NULL if data.len() >= 4 => SlicedPacket::from_ip(&data[4..]),
        linktype::RAW | linktype::IPV4 | linktype::IPV6 => SlicedPacket::from_ip(data),
        _ => return Classified::NotRoce,
    };
    match strict {
        Ok(p) => from_sliced(&p, frame.truncated),
        Err(e) => lax_roce(frame).map_or(Classified::NotRoce, |()| Classified::Malformed(format!("IP/UDP: {e}"))),
    }
}

fn from_sliced<'a>(p: &SlicedPacket<'a>, truncated: bool) -> Classified<'a> {
    let Some(TransportSlice::Udp(udp)) = &p.transport else {
        return match &p.net {
            Some(NetSlice::Ipv4(v4)) if v4.is_payload_fragmented() && v4.header().protocol().0 == 17 => {
                Classified::Malformed("fragmented IPv4 UDP datagram (RoCEv2 is never fragmented)".into())
            }
            _ => Classified::NotRoce,
        };
    };
    if udp.destination_port() != ROCE_V2_UDP_PORT {
        return Classified::NotRoce;
    }
    if truncated {
        return Classified::Malformed("frame cut short by the capture's snaplen".into());
    }
    let (src_ip, dst_ip, ip_header, id_df) = match &p.net {
        Some(NetSlice::Ipv4(v4)) => {
            let h = v4.header();
            (
                IpAddr::V4(h.source_addr()),
                IpAddr::V4(h.destination_addr()),
                h.slice().to_vec(),
                Some((h.identification(), h.dont_fragment())),
            )
        }
        Some(NetSlice::Ipv6(v6)) => {
            let h = v6.header();
            if !v6.extensions().is_empty() {
                return Classified::Malformed("IPv6 extension headers before UDP".into());
            }
            (IpAddr::V6(h.source_addr()), IpAddr::V6(h.destination_addr()), h.slice().to_vec(), None)
        }
        _ => return Classified::NotRoce,
    };
    let mut udp_header = [0u8; 8];
    udp_header.copy_from_slice(udp.header_slice());
    Classified::Roce(RoceDatagram {
        src: SocketAddr::new(src_ip, udp.source_port()),
        dst: SocketAddr::new(dst_ip, udp.destination_port()),
        ip_header,
        udp_header,
        payload: udp.payload(),
        ipv4_id_df: id_df,
    })
}

/// `Some(())` when a lenient parse shows a UDP datagram to port 4791.
fn lax_roce(frame: &Frame) -> Option<()> {
    let data = frame.data.as_slice();
    let p = match frame.linktype {
        linktype::ETHERNET => LaxSlicedPacket::from_ethernet(data).ok()?,
        linktype::LINUX_SLL2 => LaxSlicedPacket::from_ether_type(
            EtherType(u16::from_be_bytes([*data.first()?, *data.get(1)?])),
            data.get(20..)?,
        ),
        linktype::LINUX_SLL => LaxSlicedPacket::from_ether_type(
            EtherType(u16::from_be_bytes([*data.get(14)?, *data.get(15)?])),
            data.get(16..)?,
        ),
        linktype::NULL => LaxSlicedPacket::from_ip(data.get(4..)?).ok()?,
        _ => LaxSlicedPacket::from_ip(data).ok()?,
    };
    let is_udp = matches!(&p.net, Some(LaxNetSlice::Ipv4(_) | LaxNetSlice::Ipv6(_)));
    match &p.transport {
        Some(TransportSlice::Udp(u)) if is_udp && u.destination_port() == ROCE_V2_UDP_PORT => Some(()),
        _ => None,
    }
}
