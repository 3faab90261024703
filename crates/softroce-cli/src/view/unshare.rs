//! `unshare(2)` for the view: the one system call of `softroce run` that
//! rustix marks unsafe.
#![allow(unsafe_code)]

use rustix::thread::UnshareFlags;

/// A new mount namespace, and a new user namespace with `user`.
pub fn unshare_mounts(user: bool) -> rustix::io::Result<()> {
    let flags = if user { UnshareFlags::NEWUSER | UnshareFlags::NEWNS } else { UnshareFlags::NEWNS };
    // SAFETY: rustix marks unshare unsafe for CLONE_FILES, which would
    // split the descriptor table under other threads; these flags change
    // only the mounts and user IDs this process sees.
    unsafe { rustix::thread::unshare_unsafe(flags) }
}
