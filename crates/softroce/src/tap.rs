//! `SOFTROCE_PCAP=FILE`: every packet the process sends and receives,
//! written as a pcap of raw IP frames (LINKTYPE_RAW) that Wireshark, tshark
//! and `softroce decode` read.
//!
//! A UDP socket does not see the IP header, so the tap writes one: IPv4
//! with DF and TTL 64 (IPv6: hop limit 64) and a zero UDP checksum (no
//! checksum, as RoCEv2 allows). The IPv4 identification of a sent packet is
//! the one the kernel gives it (0, or its place in a GSO send); for a
//! received packet it is solved from the packet's ICRC (see `docs/icrc.md`),
//! so every written frame verifies in a full ICRC check.

use std::fs::File;
use std::io::{self, BufWriter};
use std::net::IpAddr;
use std::path::Path;
use std::time::{SystemTime, UNIX_EPOCH};

use roce_capture::PcapWriter;
use roce_wire::{IcrcCheck, IcrcContext, IcrcPolicy, IpContext, ROCE_V2_UDP_PORT};

/// LINKTYPE_RAW: frames start with the IP header.
const LINKTYPE_RAW: u32 = 101;

/// An open capture file.
pub(crate) struct Tap {
    out: PcapWriter<BufWriter<File>>,
    frame: Vec<u8>,
    /// Frames written.
    pub(crate) frames: u64,
}

impl std::fmt::Debug for Tap {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tap").field("frames", &self.frames).finish()
    }
}

fn ip_checksum(h: &[u8]) -> u16 {
    let mut sum: u32 = h.chunks(2).map(|c| u32::from(u16::from_be_bytes([c[0], *c.get(1).unwrap_or(&0)]))).sum();
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    !(sum as u16)
}

impl Tap {
    pub(crate) fn create(path: &Path) -> io::Result<Tap> {
        let out = PcapWriter::new(BufWriter::new(File::create(path)?), LINKTYPE_RAW)?;
        Ok(Tap { out, frame: Vec::with_capacity(9000), frames: 0 })
    }

    /// Writes one packet: `roce` is the UDP payload, `id` the IPv4
    /// identification (`None`: solve it from the ICRC).
    pub(crate) fn write(
        &mut self,
        src: IpAddr,
        src_port: u16,
        dst: IpAddr,
        dst_port: u16,
        id: Option<u16>,
        roce: &[u8],
    ) -> io::Result<()> {
        let f = &mut self.frame;
        f.clear();
        let udp_len = 8 + roce.len();
        match (src, dst) {
            (IpAddr::V4(s), IpAddr::V4(d)) => {
                let id = id.unwrap_or_else(|| {
                    let ctx = IcrcContext { ip: IpContext::v4_socket(s, d), src_port, dst_port };
                    match IcrcPolicy::Ipv6OrKnownId.check(&ctx, false, roce) {
                        Ok(IcrcCheck::IdSolved { identification, .. }) => identification,
                        _ => 0,
                    }
                });
                let total = (20 + udp_len) as u16;
                f.extend_from_slice(&[0x45, 0]);
                f.extend_from_slice(&total.to_be_bytes());
                f.extend_from_slice(&id.to_be_bytes());
                f.extend_from_slice(&[0x40, 0, 64, 17, 0, 0]);
                f.extend_from_slice(&s.octets());
                f.extend_from_slice(&d.octets());
                let c = ip_checksum(&f[..20]);
                f[10..12].copy_from_slice(&c.to_be_bytes());
            }
            (s, d) => {
                let v6 = |a: IpAddr| match a {
                    IpAddr::V4(v) => v.to_ipv6_mapped(),
                    IpAddr::V6(v) => v,
                };
                f.extend_from_slice(&[0x60, 0, 0, 0]);
                f.extend_from_slice(&(udp_len as u16).to_be_bytes());
                f.extend_from_slice(&[17, 64]);
                f.extend_from_slice(&v6(s).octets());
                f.extend_from_slice(&v6(d).octets());
            }
        }
        f.extend_from_slice(&src_port.to_be_bytes());
        f.extend_from_slice(&dst_port.to_be_bytes());
        f.extend_from_slice(&(udp_len as u16).to_be_bytes());
        f.extend_from_slice(&[0, 0]);
        f.extend_from_slice(roce);
        self.frames += 1;
        let now = SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default();
        self.out.write_frame(now, &self.frame)
    }

    pub(crate) fn flush(&mut self) -> io::Result<()> {
        self.out.flush()
    }
}

/// The RoCEv2 port, for sent packets' destination.
pub(crate) const PORT: u16 = ROCE_V2_UDP_PORT;
