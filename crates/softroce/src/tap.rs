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
//!
//! A process that opens several devices (UCX opens every device it finds)
//! writes all of them into the one file: the devices' taps share one writer
//! per file, so each frame is written whole and the file is created
//! (truncated) once. Before, each device created the file anew and wrote
//! its own header and frames at its own offset over the others'.

use std::fs::File;
use std::io::{self, BufWriter};
use std::net::IpAddr;
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::{SystemTime, UNIX_EPOCH};

use roce_capture::PcapWriter;
use roce_wire::{IcrcCheck, IcrcContext, IcrcPolicy, IpContext, ROCE_V2_UDP_PORT};

/// LINKTYPE_RAW: frames start with the IP header.
const LINKTYPE_RAW: u32 = 101;

/// A capture file's writer, shared by the taps of one process writing it.
type Writer = Mutex<PcapWriter<BufWriter<File>>>;

/// A capture file this process writes: its device and inode, and the
/// process that opened it (a `fork()` child's copy of a writer has the
/// parent's file offset and buffer: the child starts its own file).
struct OpenFile {
    dev: u64,
    ino: u64,
    pid: u32,
    writer: Weak<Writer>,
}

/// The capture files of this process's taps.
static OPEN: Mutex<Vec<OpenFile>> = Mutex::new(Vec::new());

/// One device's tap into a capture file.
pub(crate) struct Tap {
    out: Arc<Writer>,
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
    /// A tap into `path`: the writer another device of this process has
    /// open on the same file, or a new file.
    pub(crate) fn create(path: &Path) -> io::Result<Tap> {
        let mut open = OPEN.lock().unwrap_or_else(|e| e.into_inner());
        open.retain(|f| f.writer.strong_count() > 0);
        let pid = std::process::id();
        let same = |m: &std::fs::Metadata| {
            open.iter().find(|f| (f.dev, f.ino, f.pid) == (m.dev(), m.ino(), pid)).and_then(|f| f.writer.upgrade())
        };
        let out = match std::fs::metadata(path).ok().and_then(|m| same(&m)) {
            Some(w) => w,
            None => {
                let file = File::create(path)?;
                let m = file.metadata()?;
                let w = Arc::new(Mutex::new(PcapWriter::new(BufWriter::new(file), LINKTYPE_RAW)?));
                open.push(OpenFile { dev: m.dev(), ino: m.ino(), pid, writer: Arc::downgrade(&w) });
                w
            }
        };
        Ok(Tap { out, frame: Vec::with_capacity(9000), frames: 0 })
    }

    /// The shared writer. Taken only under a device's state lock, which
    /// `fork()` holds for every device (`crate::fork`): no fork lands while
    /// it is held.
    fn writer(&self) -> MutexGuard<'_, PcapWriter<BufWriter<File>>> {
        self.out.lock().unwrap_or_else(|e| e.into_inner())
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
        self.writer().write_frame(now, &self.frame)
    }

    pub(crate) fn flush(&mut self) -> io::Result<()> {
        self.writer().flush()
    }
}

/// The RoCEv2 port, for sent packets' destination.
pub(crate) const PORT: u16 = ROCE_V2_UDP_PORT;
