//! TUN devices (`IFF_TUN | IFF_NO_PI`): every read returns one bare IP packet, every write injects one.

use std::fs::{File, OpenOptions};
use std::io::{self, Read, Write};
use std::os::fd::{AsFd, BorrowedFd};
use std::os::unix::fs::OpenOptionsExt;

use crate::relay::PacketPort;

/// An open TUN device. The interface exists while this (or another descriptor attached to it) is open,
/// unless it was made persistent by someone else.
#[derive(Debug)]
pub struct Tun {
    file: File,
    name: String,
}

impl Tun {
    /// Creates (or attaches to an existing persistent) TUN interface `name`, non-blocking.
    ///
    /// Needs `CAP_NET_ADMIN` to create. The interface is down and has no address: configure it with `ip`.
    /// It may then be moved to another network namespace (`ip link set NAME netns NS`): this descriptor
    /// keeps reading and writing its packets.
    pub fn create(name: &str) -> io::Result<Tun> {
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .custom_flags(libc::O_NONBLOCK)
            .open("/dev/net/tun")
            .map_err(|e| io::Error::new(e.kind(), format!("open /dev/net/tun: {e}")))?;
        let name = crate::sys::tun_set_iff(&file, name, libc::IFF_TUN | libc::IFF_NO_PI)
            .map_err(|e| io::Error::new(e.kind(), format!("create TUN {name:?} (TUNSETIFF): {e}")))?;
        Ok(Tun { file, name })
    }

    /// The interface name.
    pub fn name(&self) -> &str {
        &self.name
    }
}

impl AsFd for Tun {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.file.as_fd()
    }
}

impl PacketPort for Tun {
    fn recv_packet(&self, buf: &mut [u8]) -> io::Result<usize> {
        (&self.file).read(buf)
    }

    fn send_packet(&self, packet: &[u8]) -> io::Result<()> {
        let n = (&self.file).write(packet)?;
        if n == packet.len() {
            Ok(())
        } else {
            Err(io::Error::other(format!("short TUN write: {n} of {}", packet.len())))
        }
    }
}
