//! Whether a QP of a shared device of this host still has a live process
//! behind it.
//!
//! When a process dies, Linux's CM (in the kernel, which outlives it)
//! ends its connections: a DREQ for those established, a REJ for those
//! being set up (`cm_destroy_id`), so its peers hear of it at once. A
//! softroce process has no kernel part to speak for it; but a peer on the
//! same host shares the device file, where the dead member's QPN block
//! and liveness lock tell the story: a block whose owner no longer holds
//! its OFD lock (the kernel dropped it at the crash), or that is free,
//! has no process behind its QPs. Read-only: nothing is joined or written.

use std::collections::HashMap;
use std::fs::File;
use std::net::SocketAddr;
use std::os::unix::fs::{FileExt, MetadataExt, OpenOptionsExt};
use std::time::{Duration, Instant};

use crate::layout::{self, LIVENESS_BASE};

/// How long an address without a device file is taken to have none.
const RECHECK: Duration = Duration::from_secs(5);

/// The device files of the peers asked about, kept open.
#[derive(Debug, Default)]
pub struct PeerWatch {
    /// Each address's file, and when opening it last failed.
    files: HashMap<SocketAddr, (Option<File>, Option<Instant>)>,
}

impl PeerWatch {
    /// Watches nothing yet.
    pub fn new() -> PeerWatch {
        PeerWatch::default()
    }

    /// Whether QP `qpn` of the shared device on `addr` (port 4791) belongs
    /// to a live process: `Some(false)` once its owner died or left,
    /// `None` where this host and user share no device on `addr` (a remote
    /// peer, or a device of a port of its own) or the file cannot be read.
    pub fn qp_alive(&mut self, addr: SocketAddr, qpn: u32, now: Instant) -> Option<bool> {
        let entry = self.files.entry(addr).or_insert((None, None));
        if entry.0.is_none() && entry.1.is_none_or(|t| now.saturating_duration_since(t) >= RECHECK) {
            entry.0 = open(addr);
            entry.1 = Some(now);
        }
        let file = entry.0.as_ref()?;
        let word = |i: usize| {
            let mut b = [0u8; 8];
            file.read_exact_at(&mut b, (i * 8) as u64).ok().map(|()| u64::from_ne_bytes(b))
        };
        if word(0)? != layout::MAGIC || word(1)? != layout::VERSION {
            return None;
        }
        let Some(owner) = layout::Owner::from_word(word(layout::block_word(layout::block_of(qpn) as usize))?) else {
            // Free: left or reaped (a block is never free while its QPs live).
            return Some(false);
        };
        if !layout::same_incarnation(word(layout::member_word(owner.slot))?, owner.incarnation) {
            return Some(false);
        }
        crate::shm::byte_held(file, LIVENESS_BASE + owner.slot as u64).ok()
    }
}

/// The device file on `addr`, if this user's (as `Member::join` demands).
fn open(addr: SocketAddr) -> Option<File> {
    let path = crate::member::device_file(addr);
    let file =
        std::fs::OpenOptions::new().read(true).custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC).open(path).ok()?;
    let meta = file.metadata().ok()?;
    (meta.uid() == rustix::process::getuid().as_raw() && meta.mode() & 0o077 == 0).then_some(file)
}
