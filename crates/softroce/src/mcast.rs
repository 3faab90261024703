//! IP multicast for a context's UD QPs attached to groups.
//!
//! The engine keeps which QP is in which group; this module makes the
//! host receive the groups: the first QP of the context to attach to a
//! group opens a [`GroupSocket`] on `group:4791` (joined on the device's
//! interface) and a relay thread that hands each datagram to the engine,
//! as the driver does for the device socket; the last one to detach
//! closes both. Sending needs nothing here: a SEND to a group's AH leaves
//! the device socket for the group's address (`IP_MULTICAST_IF` is the
//! device's), and the kernel loops a copy back to this host's members.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::thread::JoinHandle;
use std::time::Duration;

use roce_udp::GroupSocket;

use crate::arrivals::Arrivals;

/// How often a relay thread looks whether it should stop.
const POLL: Duration = Duration::from_millis(100);

/// The groups a context receives, by IP group.
#[derive(Debug, Default)]
pub(crate) struct Groups(Mutex<HashMap<IpAddr, Joined>>);

#[derive(Debug)]
struct Joined {
    /// Attachments of the context's QPs to the group.
    users: usize,
    stop: Arc<AtomicBool>,
    relay: Option<JoinHandle<()>>,
}

impl Drop for Joined {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
        if let Some(t) = self.relay.take() {
            // The relay notices within POLL; its socket leaves the group.
            let _ = t.join();
        }
    }
}

impl Groups {
    /// One more attachment to `group` on the interface of address `iface`:
    /// joins it first if it is the first; its datagrams go `to`.
    pub(crate) fn add(&self, to: Weak<dyn Arrivals>, iface: IpAddr, group: IpAddr) -> std::io::Result<()> {
        let mut g = self.0.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(j) = g.get_mut(&group) {
            j.users += 1;
            return Ok(());
        }
        let sock = GroupSocket::join(group, iface, roce_udp::ROCE_PORT, POLL)?;
        let stop = Arc::new(AtomicBool::new(false));
        let s = stop.clone();
        let relay = crate::thread::spawn(format!("softroce mcast {group}"), move || relay(sock, to, s))?;
        g.insert(group, Joined { users: 1, stop, relay: Some(relay) });
        Ok(())
    }

    /// One attachment to `group` fewer: leaves it with the last.
    pub(crate) fn remove(&self, group: IpAddr) {
        let left = {
            let mut g = self.0.lock().unwrap_or_else(|e| e.into_inner());
            match g.get_mut(&group) {
                Some(j) if j.users > 1 => {
                    j.users -= 1;
                    None
                }
                Some(_) => g.remove(&group),
                None => None,
            }
        };
        // Joined outside the lock (the relay may be delivering meanwhile).
        drop(left);
    }
}

/// Hands every datagram of `sock` to the engine until told to stop or the
/// context is gone.
fn relay(sock: GroupSocket, to: Weak<dyn Arrivals>, stop: Arc<AtomicBool>) {
    let mut buf = vec![0u8; 65_536];
    while !stop.load(Ordering::Acquire) {
        match sock.recv(&mut buf) {
            Ok(Some((n, from))) => {
                let Some(s) = to.upgrade() else { return };
                s.arrived_multicast(from.ip(), from.port(), sock.group(), &buf[..n]);
            }
            Ok(None) => {
                if to.strong_count() == 0 {
                    return;
                }
            }
            Err(_) => {
                // Counted, and tried again (UD: what was lost stays lost,
                // as on the wire).
                let Some(s) = to.upgrade() else { return };
                s.receive_failed(true);
                drop(s);
                std::thread::sleep(POLL);
            }
        }
    }
}
