//! The threads softroce starts (the driver, the CM, GID and multicast
//! relays) block every signal, as a library's threads should: the kernel
//! hands a process-directed signal to any thread that does not block it,
//! so a program that blocks a signal in its own threads to read it from a
//! signalfd or `sigwait` (a common daemon pattern) would otherwise be
//! killed by it in one of ours.

use std::io;
use std::thread::JoinHandle;

use nix::sys::signal::{SigSet, SigmaskHow, pthread_sigmask};

/// Starts a thread named `name` running `f` with every signal blocked (a
/// new thread inherits its creator's mask: the caller's is set for the
/// spawn and put back). glibc keeps its own internal signals unblocked.
pub fn spawn<F, T>(name: String, f: F) -> io::Result<JoinHandle<T>>
where
    F: FnOnce() -> T + Send + 'static,
    T: Send + 'static,
{
    let mut old = SigSet::empty();
    pthread_sigmask(SigmaskHow::SIG_SETMASK, Some(&SigSet::all()), Some(&mut old)).map_err(io::Error::from)?;
    let spawned = std::thread::Builder::new().name(name).spawn(f);
    pthread_sigmask(SigmaskHow::SIG_SETMASK, Some(&old), None).map_err(io::Error::from)?;
    spawned
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_thread_blocks_every_signal_and_the_caller_keeps_its_mask() {
        let before = SigSet::thread_get_mask().unwrap();
        let mask = spawn("probe".into(), || SigSet::thread_get_mask().unwrap()).unwrap().join().unwrap();
        for sig in [nix::sys::signal::SIGUSR2, nix::sys::signal::SIGTERM, nix::sys::signal::SIGINT] {
            assert!(mask.contains(sig), "{sig} is not blocked in the thread");
        }
        let after = SigSet::thread_get_mask().unwrap();
        assert_eq!(before.contains(nix::sys::signal::SIGUSR2), after.contains(nix::sys::signal::SIGUSR2));
        assert_eq!(before.contains(nix::sys::signal::SIGTERM), after.contains(nix::sys::signal::SIGTERM));
    }
}
