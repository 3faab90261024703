//! Classic pcap output (libpcap 2.4, microsecond timestamps, little-endian).

use std::io::{self, Write};
use std::time::Duration;

/// Writes frames as a classic pcap file.
pub struct PcapWriter<W: Write> {
    out: W,
}

/// Largest frame length recorded in the file header.
const SNAPLEN: u32 = 262_144;

impl<W: Write> PcapWriter<W> {
    /// Writes the file header for frames of `linktype` (see [`crate::linktype`]).
    pub fn new(mut out: W, linktype: u32) -> io::Result<PcapWriter<W>> {
        let mut h = [0u8; 24];
        h[0..4].copy_from_slice(&0xa1b2_c3d4u32.to_le_bytes());
        h[4..6].copy_from_slice(&2u16.to_le_bytes());
        h[6..8].copy_from_slice(&4u16.to_le_bytes());
        h[16..20].copy_from_slice(&SNAPLEN.to_le_bytes());
        h[20..24].copy_from_slice(&linktype.to_le_bytes());
        out.write_all(&h)?;
        Ok(PcapWriter { out })
    }

    /// Appends one frame captured at `time` (since the Unix epoch).
    pub fn write_frame(&mut self, time: Duration, frame: &[u8]) -> io::Result<()> {
        let len = u32::try_from(frame.len())
            .ok()
            .filter(|l| *l <= SNAPLEN)
            .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "frame longer than the pcap snaplen"))?;
        let mut r = [0u8; 16];
        r[0..4].copy_from_slice(&(time.as_secs() as u32).to_le_bytes());
        r[4..8].copy_from_slice(&time.subsec_micros().to_le_bytes());
        r[8..12].copy_from_slice(&len.to_le_bytes());
        r[12..16].copy_from_slice(&len.to_le_bytes());
        self.out.write_all(&r)?;
        self.out.write_all(frame)
    }

    /// Flushes buffered frames to the output.
    pub fn flush(&mut self) -> io::Result<()> {
        self.out.flush()
    }

    /// Flushes and returns the output.
    pub fn into_inner(mut self) -> io::Result<W> {
        self.out.flush()?;
        Ok(self.out)
    }
}
