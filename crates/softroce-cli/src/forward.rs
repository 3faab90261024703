//! `softroce run` stands in for the program it runs, as `sudo` and
//! container init processes do: a signal sent to it (by `kill`,
//! `timeout`, a job scheduler) is passed on to the program, and when the
//! program is killed by a signal, `softroce run` dies of the same signal,
//! so its caller sees what it would have seen of the program.
//!
//! A signal the kernel itself sent (`si_code == SI_KERNEL`: a terminal's
//! Ctrl-C, Ctrl-\, hang-up or resize) is not passed on: the kernel sends
//! it to the whole foreground process group, the program included, which
//! would otherwise get it twice.

use std::os::unix::process::ExitStatusExt;
use std::process::{Child, ExitStatus};

use signal_hook::consts::{SIGALRM, SIGHUP, SIGINT, SIGQUIT, SIGTERM, SIGUSR1, SIGUSR2, SIGWINCH};
use signal_hook::iterator::SignalsInfo;
use signal_hook::iterator::exfiltrator::WithRawSiginfo;

/// The signals passed on (those a supervisor sends to stop or steer a
/// program; SIGKILL and SIGSTOP cannot be caught).
const FORWARDED: [i32; 8] = [SIGHUP, SIGINT, SIGQUIT, SIGTERM, SIGUSR1, SIGUSR2, SIGALRM, SIGWINCH];

/// `si_code` of a signal the kernel generated (`<asm-generic/siginfo.h>`).
const SI_KERNEL: i32 = 0x80;

/// Whether a signal with this `si_code` should be passed on.
fn forwardable(si_code: i32) -> bool {
    si_code != SI_KERNEL
}

/// The [`FORWARDED`] signals, caught from its making on.
pub struct Forwarder {
    signals: SignalsInfo<WithRawSiginfo>,
}

impl Forwarder {
    /// Catches the [`FORWARDED`] signals from now on. Made before the
    /// program is spawned: one sent to `softroce run` between the spawn and
    /// [`Forwarder::wait`] is passed on then, instead of killing `softroce
    /// run` by its default action and leaving the program orphaned (CI: a
    /// SIGUSR2 sent once the program had printed that it was ready).
    pub fn catch() -> std::io::Result<Forwarder> {
        Ok(Forwarder { signals: SignalsInfo::<WithRawSiginfo>::new(FORWARDED)? })
    }

    /// Waits for `child`, passing the signals on to it meanwhile.
    pub fn wait(self, child: &mut Child) -> std::io::Result<ExitStatus> {
        let mut signals = self.signals;
        let pid = rustix::process::Pid::from_child(child);
        let handle = signals.handle();
        let relay = std::thread::spawn(move || {
            for info in &mut signals {
                if !forwardable(info.si_code) {
                    continue;
                }
                if let Some(sig) = rustix::process::Signal::from_named_raw(info.si_signo) {
                    // The program may be gone already: nothing to pass on then.
                    let _ = rustix::process::kill_process(pid, sig);
                }
            }
        });
        // Waits until the program has ended without reaping it, so that its pid
        // cannot be another process's while the relay may still signal it.
        let ended = loop {
            match rustix::process::waitid(
                rustix::process::WaitId::Pid(pid),
                rustix::process::WaitIdOptions::EXITED | rustix::process::WaitIdOptions::NOWAIT,
            ) {
                Err(rustix::io::Errno::INTR) => continue,
                r => break r,
            }
        };
        handle.close();
        let _ = relay.join();
        ended?;
        child.wait()
    }
}

/// Ends this process as `status` ended the program: the same exit code,
/// or death by the same signal (its default action restored first); if
/// that signal does not end a process, exit code 128 + the signal.
pub fn exit_like(status: ExitStatus) -> std::process::ExitCode {
    match (status.code(), status.signal()) {
        (Some(c), _) => std::process::ExitCode::from(c.clamp(0, 255) as u8),
        (None, Some(sig)) => {
            let _ = signal_hook::low_level::emulate_default_handler(sig);
            std::process::ExitCode::from((128 + sig).clamp(0, 255) as u8)
        }
        _ => std::process::ExitCode::FAILURE,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kernel_signals_stay_and_sent_ones_pass() {
        assert!(!forwardable(SI_KERNEL), "a terminal's Ctrl-C reached the program already");
        assert!(forwardable(0), "SI_USER: kill(2)");
        assert!(forwardable(-6), "SI_TKILL: tgkill(2)");
        assert!(forwardable(-1), "SI_QUEUE: sigqueue(3)");
    }
}
