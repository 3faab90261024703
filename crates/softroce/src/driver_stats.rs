//! The driver's counters (besides the engine's own), kept by the driver
//! (`driver/`) and both links (`local_link.rs`, `socket_link.rs`).

roce_proto::counter_struct! {
    /// Counters of the driver (besides the engine's own); `iter` is the list
    /// `perf --stats` prints.
    #[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
    pub struct DriverStats {
        /// Packets received and handed to the engine.
        pub rx_packets,
        /// Of those, requests (what a responder answers: a passive side's
        /// driver thread polls on after them, see `Options::driver_spin`).
        pub rx_requests,
        /// Packets sent.
        pub tx_packets,
        /// UDP messages sent (a GSO send counts once).
        pub tx_messages,
        /// Packets the kernel refused for good (e.g. no route); the engine's
        /// retransmission covers them, as for a loss on the wire.
        pub tx_failed,
        /// Times the socket's send buffer was full (packets stayed queued).
        pub tx_would_block,
        /// Packets dropped because the socket stayed full for 100 ms (the
        /// transport's retransmission repairs them, as a loss on the wire).
        pub tx_dropped,
        /// Datagrams received on the context's multicast group sockets.
        pub mcast_rx,
        /// Receive errors on those sockets.
        pub mcast_errors,
        /// Progress passes.
        pub passes,
        /// The passes of those made by the driver thread.
        pub driver_passes,
        /// The passes of those made by a thread waiting in `Cq::wait` (it
        /// slept in the socket, or beside a thread that did, and received
        /// for the whole device).
        pub waiter_passes,
        /// Wake-up datagrams a thread sent to end another's sleep in the socket.
        pub wake_ups,
        /// Passes of a waiting application thread that returned its
        /// completions before sending what the packets it received called for
        /// (ACKs, READ responses); the next call or pass sent it.
        pub tx_deferred,
        /// QPs that send from the device's port because theirs could not
        /// be bound (see `sources.rs`), plus one if the whole device had to.
        pub src_port_fallbacks,
        /// Source sockets open (a gauge, not a counter): per-QP ports, and
        /// the device's other addresses.
        pub src_port_sockets,
        /// Datagrams received on the device's other addresses (GID 0, the
        /// link-local one; other IPv6 addresses of the interface).
        pub other_gid_rx,
        /// Receive errors on those sockets.
        pub other_gid_errors,
        /// Packets from a source GID no socket could send from (a made-up
        /// link-local address of loopback), lost as on a wire.
        pub tx_no_source,
        /// The driver thread's grace to a busy-polling application, in us
        /// (a gauge: see `driver_policy::AppGrace`; 0 without a driver thread).
        pub app_grace_us,
        /// Turns the driver thread polled on after a pass of a passive side
        /// (`Options::driver_spin`).
        pub driver_spins,
        /// How long it polls on after such a pass now, in us (a gauge:
        /// from `Options::driver_spin`, learned from the gaps between
        /// requests, see `driver_policy::PassiveSpin`).
        pub passive_spin_us,
        /// Packets sent over the local link to a device of this process, or
        /// to another process's member of this shared device through its
        /// inbox (`local_link.rs`, `roce_host::inbox`; also counted in
        /// `tx_packets`).
        pub tx_local,
        /// Packets received over it (also counted in `rx_packets`).
        pub rx_local,
        /// Packets for a local device sent by the socket instead, because
        /// its inbox was full.
        pub local_full,
        /// Packets for another process's member of this shared device sent
        /// by the socket instead, because its inbox could not be opened
        /// (not made yet, or /dev/shm full; tried again after 100 ms).
        pub local_unopened,
        /// Inbox lanes another process's member filled against the layout:
        /// what they held was dropped (`roce_host::inbox::Drained::refused`).
        pub local_refused,
        /// Wake-up calls this device's senders needed to hand it a local
        /// packet (one of its threads slept where a datagram would wake it).
        pub local_wakes,
        /// Wake envelopes this device sent to another process's member of
        /// the shared device, whose threads slept when a packet was put in
        /// its inbox.
        pub member_wakes,
    }
}
