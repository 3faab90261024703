//! The one system call that neither std nor rustix wraps safely: the `TUNSETIFF` ioctl.
#![allow(unsafe_code)]

use std::fs::File;
use std::io;
use std::os::fd::AsRawFd;

/// Attaches the open `/dev/net/tun` file to the interface `name` (created if missing) with `flags`
/// (`IFF_TUN | IFF_NO_PI`, ...). Returns the interface name the kernel chose (the same unless `name` held a
/// `%d` template).
pub(crate) fn tun_set_iff(file: &File, name: &str, flags: libc::c_int) -> io::Result<String> {
    let bytes = name.as_bytes();
    if bytes.is_empty() || bytes.len() >= libc::IFNAMSIZ || bytes.contains(&0) || bytes.contains(&b'/') {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("bad interface name {name:?} (1 to {} bytes, no '/')", libc::IFNAMSIZ - 1),
        ));
    }
    let flags = libc::c_short::try_from(flags)
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "TUN flags do not fit in a short"))?;
    // SAFETY: `ifreq` is a plain C struct (a `c_char` array and a union of integers, arrays and a raw
    // pointer); all-zero bytes are a valid value of each of its fields.
    let mut req: libc::ifreq = unsafe { std::mem::zeroed() };
    for (dst, src) in req.ifr_name.iter_mut().zip(bytes) {
        *dst = *src as libc::c_char;
    }
    req.ifr_ifru.ifru_flags = flags;
    // SAFETY: the descriptor is open for as long as `file` is borrowed; TUNSETIFF reads and writes exactly
    // one `struct ifreq` at the pointer, and `req` is a live, exclusively borrowed `ifreq` whose name is
    // NUL-terminated (at most IFNAMSIZ - 1 bytes were copied into a zeroed array).
    let rc = unsafe { libc::ioctl(file.as_raw_fd(), libc::TUNSETIFF, &mut req as *mut libc::ifreq) };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    let len = req.ifr_name.iter().position(|&c| c == 0).unwrap_or(libc::IFNAMSIZ);
    Ok(req.ifr_name[..len].iter().map(|&c| c as u8 as char).collect())
}
