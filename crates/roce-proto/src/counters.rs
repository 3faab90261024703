//! Per-device counters with Linux rxe's names (`rdma statistic`).

/// The counters rxe exposes, plus softroce's own drop reasons.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Counters {
    /// Packets sent.
    pub sent_pkts: u64,
    /// Packets received that passed the header, ICRC and QP checks, requests
    /// and responses alike, duplicates included (rxe counts in `rxe_rcv`).
    pub rcvd_pkts: u64,
    /// Duplicate requests received.
    pub duplicate_request: u64,
    /// Requests with a PSN ahead of the expected one.
    pub out_of_seq_request: u64,
    /// RNR NAKs received.
    pub rcvd_rnr_err: u64,
    /// RNR NAKs sent.
    pub send_rnr_err: u64,
    /// PSN-sequence NAKs received.
    pub rcvd_seq_err: u64,
    /// ACKs deferred (coalesced).
    pub ack_deferred: u64,
    /// WQEs failed with RETRY_EXC_ERR.
    pub retry_exceeded_err: u64,
    /// WQEs failed with RNR_RETRY_EXC_ERR.
    pub retry_rnr_exceeded_err: u64,
    /// Retransmissions started by the completer (timeouts and NAKs).
    pub completer_retry_err: u64,
    /// Send errors.
    pub send_err: u64,
    /// SEND messages sent.
    pub rdma_sends: u64,
    /// SEND messages received.
    pub rdma_recvs: u64,
    /// Link down events.
    pub link_downed: u64,
    /// Packets dropped: malformed (layout).
    pub drop_malformed: u64,
    /// Packets dropped: ICRC mismatch.
    pub drop_icrc: u64,
    /// Packets whose ICRC the policy did not check.
    pub icrc_unchecked: u64,
    /// Packets dropped: no such QP, or a QP in a state that takes no packets.
    pub drop_no_qp: u64,
    /// Packets dropped: wrong opcode for the QP, bad Q_Key, unexpected response.
    pub drop_invalid: u64,
    /// Work completions added to CQs (drivers watch it to wake waiters).
    pub completions: u64,
}

impl Counters {
    /// `(name, value)` for each counter, rxe's first, in rxe's order.
    pub fn iter(&self) -> impl Iterator<Item = (&'static str, u64)> {
        [
            ("sent_pkts", self.sent_pkts),
            ("rcvd_pkts", self.rcvd_pkts),
            ("duplicate_request", self.duplicate_request),
            ("out_of_seq_request", self.out_of_seq_request),
            ("rcvd_rnr_err", self.rcvd_rnr_err),
            ("send_rnr_err", self.send_rnr_err),
            ("rcvd_seq_err", self.rcvd_seq_err),
            ("ack_deferred", self.ack_deferred),
            ("retry_exceeded_err", self.retry_exceeded_err),
            ("retry_rnr_exceeded_err", self.retry_rnr_exceeded_err),
            ("completer_retry_err", self.completer_retry_err),
            ("send_err", self.send_err),
            ("link_downed", self.link_downed),
            ("rdma_sends", self.rdma_sends),
            ("rdma_recvs", self.rdma_recvs),
            ("drop_malformed", self.drop_malformed),
            ("drop_icrc", self.drop_icrc),
            ("icrc_unchecked", self.icrc_unchecked),
            ("drop_no_qp", self.drop_no_qp),
            ("drop_invalid", self.drop_invalid),
            ("completions", self.completions),
        ]
        .into_iter()
    }
}
