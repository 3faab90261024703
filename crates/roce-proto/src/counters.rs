//! Per-device counters with Linux rxe's names (`rdma statistic`).

/// Declares a struct of `u64` counters with `iter()`, which yields
/// `(name, value)` for every field in declaration order: a listing (`softroce
/// stat`, `perf --stats`) cannot leave a counter out.
#[macro_export]
macro_rules! counter_struct {
    ($(#[$meta:meta])* $vis:vis struct $name:ident { $($(#[$fmeta:meta])* $fvis:vis $field:ident),* $(,)? }) => {
        $(#[$meta])*
        $vis struct $name { $($(#[$fmeta])* $fvis $field: u64,)* }

        impl $name {
            /// `(name, value)` for each counter, in declaration order.
            pub fn iter(&self) -> impl Iterator<Item = (&'static str, u64)> {
                [$((stringify!($field), self.$field)),*].into_iter()
            }
        }
    };
}

crate::counter_struct! {
    /// The counters rxe exposes, plus softroce's own drop reasons, rxe's
    /// first and in rxe's order.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
    pub struct Counters {
        /// Packets sent.
        pub sent_pkts,
        /// Packets received that passed the header, ICRC and QP checks, requests
        /// and responses alike, duplicates included (rxe counts in `rxe_rcv`).
        pub rcvd_pkts,
        /// Duplicate requests received.
        pub duplicate_request,
        /// Requests with a PSN ahead of the expected one.
        pub out_of_seq_request,
        /// RNR NAKs received.
        pub rcvd_rnr_err,
        /// RNR NAKs sent.
        pub send_rnr_err,
        /// PSN-sequence NAKs received.
        pub rcvd_seq_err,
        /// ACKs deferred (coalesced).
        pub ack_deferred,
        /// WQEs failed with RETRY_EXC_ERR.
        pub retry_exceeded_err,
        /// WQEs failed with RNR_RETRY_EXC_ERR.
        pub retry_rnr_exceeded_err,
        /// Retransmissions started by the completer (timeouts and NAKs).
        pub completer_retry_err,
        /// Send errors.
        pub send_err,
        /// Link down events.
        pub link_downed,
        /// SEND messages sent.
        pub rdma_sends,
        /// SEND messages received.
        pub rdma_recvs,
        /// Packets dropped: malformed (layout).
        pub drop_malformed,
        /// Packets dropped: ICRC mismatch.
        pub drop_icrc,
        /// Packets whose ICRC the policy did not check.
        pub icrc_unchecked,
        /// Packets another device of this host handed over through memory
        /// (`Device::handle_local_datagram`): no wire, no ICRC to check.
        pub rcvd_local,
        /// Packets dropped: no such QP, or a QP in a state that takes no packets.
        pub drop_no_qp,
        /// Packets dropped: wrong opcode for the QP, bad Q_Key, unexpected response.
        pub drop_invalid,
        /// Work completions added to CQs (drivers watch it to wake waiters).
        pub completions,
        /// Packets dropped: BTH P_Key outside the port's partition (rxe
        /// counts these in the port's `bad_pkey_cntr`).
        pub drop_bad_pkey,
        /// CNPs received for a QP of this device (mlx5's name): each one cuts
        /// that QP's congestion window (`crate::cc`).
        pub rp_cnp_handled,
        /// Tail loss probes sent: the last packet again, a while before
        /// the retransmission timeout (`crate::cc`).
        pub tail_probes,
        /// RC packets that arrived with ECN CE in their IP header (mlx5's
        /// name: the DCQCN notification point saw congestion).
        pub np_ecn_marked_roce_packets,
        /// CNPs sent for them, at most one per QP per `crate::cc::CNP_INTERVAL`.
        pub np_cnp_sent,
        /// Times a SEND or WRITE with immediate waited for the responder's
        /// end-to-end credits (IBTA 9.7.7.2) instead of meeting an empty
        /// receive queue.
        pub credit_waits,
        /// Credit updates sent: duplicate ACKs that announce a receive WQE
        /// posted after the last ACK or NAK left the requester none.
        pub credit_updates,
        /// RC requests that arrived ahead of a gap and were kept, to be
        /// executed once it is filled (`crate::reorder`).
        pub reorder_kept,
        /// RC requests ahead of a gap dropped: too far ahead, or the
        /// device's reorder budget spent (rxe drops every one).
        pub reorder_full,
        /// Single packets resent for a hole a keeping responder named,
        /// instead of going back N (`crate::reorder`).
        pub hole_resends,
        /// Times an ACK overtook a go-back-N rewind (the responder had kept
        /// what followed the gap): the requester skipped ahead.
        pub resends_skipped,
    }
}

#[cfg(test)]
mod tests {
    use super::Counters;

    #[test]
    fn iter_lists_every_counter_once_in_rxe_order() {
        let c = Counters { sent_pkts: 1, link_downed: 5, completions: 9, ..Counters::default() };
        let all: Vec<(&str, u64)> = c.iter().collect();
        assert_eq!(all.len(), 33);
        assert_eq!(all[0], ("sent_pkts", 1));
        assert_eq!(all[12], ("link_downed", 5), "after send_err, as rxe lists it");
        assert_eq!(all[21], ("completions", 9));
        let mut names: Vec<&str> = all.iter().map(|(n, _)| *n).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), 33);
    }
}
