//! What a member counts of the device's sharing.

use std::sync::atomic::AtomicU64;

macro_rules! host_stats {
    ($($(#[$m:meta])* $name:ident,)*) => {
        /// Counters of one member (monotonic, relaxed).
        #[derive(Debug, Default)]
        pub struct HostStats {
            $($(#[$m])* pub $name: AtomicU64,)*
        }

        impl HostStats {
            /// `(name, value)` of every counter.
            pub fn iter(&self) -> impl Iterator<Item = (&'static str, u64)> + '_ {
                [$((stringify!($name), self.$name.load(std::sync::atomic::Ordering::Relaxed)),)*].into_iter()
            }
        }
    };
}

host_stats! {
    /// Packets for other members' QPs, forwarded to them.
    forwarded,
    /// MADs this member sent to its own device's QP 1, handed straight to
    /// their owner.
    local_mads,
    /// Packets other members forwarded here.
    received_forwarded,
    /// Packets for a QP nobody owns (dropped, as a NIC drops them).
    no_owner,
    /// Strays that could not be handed on (their owner's seat unknown, or too many hops).
    stray_dropped,
    /// Strays held until the seats were known again.
    held,
    /// REQs that waited for a listener to come.
    waited_for_listener,
    /// Envelopes for another member that reached this one.
    misdirected,
    /// Envelopes refused (forged, truncated, unknown).
    bad_envelopes,
    /// Datagrams too short to name a QP.
    malformed,
    /// Reconciliations this member made.
    reconciles,
    /// Probe rounds among them.
    probes,
    /// Dead members this member reaped.
    reaped,
    /// QPN blocks claimed before their quarantine ended (every free one
    /// was in it: thousands of processes a minute).
    quarantine_cut,
}
