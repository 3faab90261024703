//! The threads softroce starts (the driver, the CM, GID and multicast
//! relays) block every signal, as a library's threads should: the kernel
//! hands a process-directed signal to any thread that does not block it,
//! so a program that blocks a signal in its own threads to read it from a
//! signalfd or `sigwait` (a common daemon pattern) would otherwise be
//! killed by it in one of ours.

use std::io;
use std::thread::JoinHandle;
use std::time::Duration;

use nix::sys::signal::{SigSet, SigmaskHow, pthread_sigmask};

/// How long [`spawn`] waits for its thread to start.
const START_WAIT: Duration = Duration::from_secs(1);

/// Starts a thread named `name` running `f` with every signal blocked (a
/// new thread inherits its creator's mask: the caller's is set for the
/// spawn and put back). glibc keeps its own internal signals unblocked.
///
/// Returns once the thread runs (or after a second): a new thread's
/// first `free` makes its malloc arena with `mmap`, `munmap` and
/// `mprotect`, and libfabric's verbs provider patches those functions'
/// code in `fi_domain` (its memhooks monitor) right after it opened the
/// device, which started the driver and CM threads. A thread inside a
/// function being patched crashes (SIGSEGV: libfabric issue #7569; in
/// 4 `fi_pingpong -p "verbs;ofi_rxm"` runs in 290 between two namespaces,
/// with the core in a softroce thread's start). Kernel rxe starts no
/// thread there.
pub fn spawn<F, T>(name: String, f: F) -> io::Result<JoinHandle<T>>
where
    F: FnOnce() -> T + Send + 'static,
    T: Send + 'static,
{
    let (started, running) = std::sync::mpsc::sync_channel::<()>(1);
    let mut old = SigSet::empty();
    pthread_sigmask(SigmaskHow::SIG_SETMASK, Some(&SigSet::all()), Some(&mut old)).map_err(io::Error::from)?;
    let spawned = std::thread::Builder::new().name(name).spawn(move || {
        let _ = started.send(());
        f()
    });
    pthread_sigmask(SigmaskHow::SIG_SETMASK, Some(&old), None).map_err(io::Error::from)?;
    let handle = spawned?;
    let _ = running.recv_timeout(START_WAIT);
    Ok(handle)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `spawn` returns once the thread runs: std names a thread from
    /// inside it (the kernel's `comm`), before its first `free`.
    #[test]
    fn spawn_returns_once_the_thread_runs() {
        let named = |name: &str| {
            std::fs::read_dir("/proc/self/task")
                .unwrap()
                .flatten()
                .any(|t| std::fs::read_to_string(t.path().join("comm")).is_ok_and(|c| c.trim_end() == name))
        };
        for i in 0..50 {
            let name = format!("probe-start-{i}");
            let (release, wait) = std::sync::mpsc::channel::<()>();
            let t = spawn(name.clone(), move || {
                let _ = wait.recv();
            })
            .unwrap();
            assert!(named(&name), "spawn {i} returned before its thread ran");
            release.send(()).unwrap();
            t.join().unwrap();
        }
    }

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
