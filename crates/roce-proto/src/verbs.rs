//! The verbs' vocabulary with rdma-core's numeric values (`<infiniband/verbs.h>`),
//! so the C ABI can pass them through unchanged.

macro_rules! c_enum {
    ($(#[$doc:meta])* $name:ident : $repr:ty { $($(#[$vdoc:meta])* $variant:ident = $value:expr),* $(,)? }) => {
        $(#[$doc])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        #[repr($repr)]
        pub enum $name {
            $($(#[$vdoc])* $variant = $value),*
        }

        impl $name {
            /// Every value, in declaration order.
            pub const ALL: &'static [$name] = &[$($name::$variant),*];

            /// The variant with numeric value `v`, if any.
            pub fn from_raw(v: $repr) -> Option<$name> {
                Self::ALL.iter().copied().find(|x| *x as $repr == v)
            }
        }
    };
}

c_enum!(
    /// `enum ibv_qp_state`.
    QpState: u32 {
        /// Just created or reset: no traffic, queues empty.
        Reset = 0,
        /// Receives may be posted; nothing is processed.
        Init = 1,
        /// Ready to receive.
        Rtr = 2,
        /// Ready to send.
        Rts = 3,
        /// Send queue drained.
        Sqd = 4,
        /// Send queue error (UD/UC only).
        Sqe = 5,
        /// Error: every WR is flushed.
        Err = 6,
    }
);

c_enum!(
    /// `enum ibv_qp_type` (the ones softroce implements).
    QpType: u32 {
        /// Reliable connected.
        Rc = 2,
        /// Unreliable connected.
        Uc = 3,
        /// Unreliable datagram.
        Ud = 4,
    }
);

c_enum!(
    /// `enum ibv_wc_status`.
    WcStatus: u32 {
        /// Success.
        Success = 0,
        /// Local length error (e.g. a message longer than the receive buffer).
        LocLenErr = 1,
        /// Local QP operation error.
        LocQpOpErr = 2,
        /// Local EE context operation error.
        LocEecOpErr = 3,
        /// Local protection error (bad lkey or access).
        LocProtErr = 4,
        /// Flushed because the QP entered the error state.
        WrFlushErr = 5,
        /// Memory window bind error.
        MwBindErr = 6,
        /// Bad response (unexpected opcode from the responder).
        BadRespErr = 7,
        /// Local access error.
        LocAccessErr = 8,
        /// Remote invalid request (NAK invalid request).
        RemInvReqErr = 9,
        /// Remote access error (NAK remote access).
        RemAccessErr = 10,
        /// Remote operational error.
        RemOpErr = 11,
        /// Transport retries exhausted.
        RetryExcErr = 12,
        /// RNR retries exhausted.
        RnrRetryExcErr = 13,
        /// Local RDD violation.
        LocRddViolErr = 14,
        /// Remote invalid RD request.
        RemInvRdReqErr = 15,
        /// Remote aborted.
        RemAbortErr = 16,
        /// Invalid EE context number.
        InvEecnErr = 17,
        /// Invalid EE context state.
        InvEecStateErr = 18,
        /// Fatal error.
        FatalErr = 19,
        /// Response timeout.
        RespTimeoutErr = 20,
        /// General error.
        GeneralErr = 21,
    }
);

impl WcStatus {
    /// The text `ibv_wc_status_str` gives.
    pub fn as_str(self) -> &'static str {
        match self {
            WcStatus::Success => "success",
            WcStatus::LocLenErr => "local length error",
            WcStatus::LocQpOpErr => "local QP operation error",
            WcStatus::LocEecOpErr => "local EE context operation error",
            WcStatus::LocProtErr => "local protection error",
            WcStatus::WrFlushErr => "Work Request Flushed Error",
            WcStatus::MwBindErr => "memory management operation error",
            WcStatus::BadRespErr => "bad response error",
            WcStatus::LocAccessErr => "local access error",
            WcStatus::RemInvReqErr => "remote invalid request error",
            WcStatus::RemAccessErr => "remote access error",
            WcStatus::RemOpErr => "remote operation error",
            WcStatus::RetryExcErr => "transport retry counter exceeded",
            WcStatus::RnrRetryExcErr => "RNR retry counter exceeded",
            WcStatus::LocRddViolErr => "local RDD violation error",
            WcStatus::RemInvRdReqErr => "remote invalid RD request",
            WcStatus::RemAbortErr => "operation aborted",
            WcStatus::InvEecnErr => "invalid EE context number",
            WcStatus::InvEecStateErr => "invalid EE context state",
            WcStatus::FatalErr => "fatal error",
            WcStatus::RespTimeoutErr => "response timeout error",
            WcStatus::GeneralErr => "general error",
        }
    }
}

c_enum!(
    /// `enum ibv_wc_opcode`.
    WcOpcode: u32 {
        /// SEND completed.
        Send = 0,
        /// RDMA WRITE completed.
        RdmaWrite = 1,
        /// RDMA READ completed.
        RdmaRead = 2,
        /// Compare and swap completed.
        CompSwap = 3,
        /// Fetch and add completed.
        FetchAdd = 4,
        /// Memory window bound.
        BindMw = 5,
        /// Local invalidate completed.
        LocalInv = 6,
        /// FLUSH completed (`IBV_WC_FLUSH`, rdma-core 45+; IBA 1.5).
        Flush = 8,
        /// ATOMIC WRITE completed (`IBV_WC_ATOMIC_WRITE`; IBA 1.5).
        AtomicWrite = 9,
        /// A receive completed.
        Recv = 128,
        /// An RDMA WRITE with immediate consumed a receive.
        RecvRdmaWithImm = 129,
    }
);

impl WcOpcode {
    /// `opcode & IBV_WC_RECV`: true exactly for receive-queue completions.
    pub const fn is_recv(self) -> bool {
        self as u32 & WcOpcode::Recv as u32 != 0
    }
}

c_enum!(
    /// `enum ibv_wr_opcode`.
    WrOpcode: u32 {
        /// RDMA WRITE.
        RdmaWrite = 0,
        /// RDMA WRITE with immediate.
        RdmaWriteWithImm = 1,
        /// SEND.
        Send = 2,
        /// SEND with immediate.
        SendWithImm = 3,
        /// RDMA READ.
        RdmaRead = 4,
        /// Atomic compare and swap.
        AtomicCmpAndSwp = 5,
        /// Atomic fetch and add.
        AtomicFetchAndAdd = 6,
        /// Local invalidate.
        LocalInv = 7,
        /// Bind a memory window.
        BindMw = 8,
        /// SEND with invalidate.
        SendWithInv = 9,
        /// FLUSH of a remote range or region to a placement type
        /// (`IBV_WR_FLUSH`, rdma-core 45+; IBA 1.5 memory placement extensions).
        Flush = 14,
        /// ATOMIC WRITE: 8 bytes stored at once at an aligned remote address
        /// (`IBV_WR_ATOMIC_WRITE`; IBA 1.5).
        AtomicWrite = 15,
    }
);

/// Bit sets with rdma-core's values.
macro_rules! c_flags {
    ($(#[$doc:meta])* $name:ident { $($(#[$vdoc:meta])* $flag:ident = $value:expr),* $(,)? }) => {
        $(#[$doc])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
        pub struct $name(pub u32);

        impl $name {
            $($(#[$vdoc])* pub const $flag: $name = $name($value);)*
            /// No flag.
            pub const EMPTY: $name = $name(0);
            /// Every known flag.
            pub const ALL: $name = $name(0 $(| $value)*);

            /// Whether every flag of `other` is set.
            pub const fn contains(self, other: $name) -> bool {
                self.0 & other.0 == other.0
            }

            /// Whether any flag of `other` is set.
            pub const fn intersects(self, other: $name) -> bool {
                self.0 & other.0 != 0
            }

            /// Flags set in `self` that are not known.
            pub const fn unknown_bits(self) -> u32 {
                self.0 & !Self::ALL.0
            }
        }

        impl core::ops::BitOr for $name {
            type Output = $name;
            fn bitor(self, rhs: $name) -> $name {
                $name(self.0 | rhs.0)
            }
        }

        impl core::ops::BitOrAssign for $name {
            fn bitor_assign(&mut self, rhs: $name) {
                self.0 |= rhs.0;
            }
        }
    };
}

c_flags!(
    /// `enum ibv_access_flags`: what a memory region or QP allows.
    AccessFlags {
        /// The local HCA may write (needed for receives, READ and atomic results).
        LOCAL_WRITE = 1,
        /// Remote RDMA WRITE allowed.
        REMOTE_WRITE = 2,
        /// Remote RDMA READ allowed.
        REMOTE_READ = 4,
        /// Remote atomics allowed.
        REMOTE_ATOMIC = 8,
        /// Memory windows may be bound.
        MW_BIND = 16,
        /// Remote addresses count from the window's start (type 2 windows).
        ZERO_BASED = 32,
        /// On-demand paging: the region need not be resident when registered.
        /// softroce never pins memory, so every region behaves so; the flag is
        /// accepted and kept.
        ON_DEMAND = 64,
        /// FLUSH with the global visibility placement type allowed
        /// (`IBV_ACCESS_FLUSH_GLOBAL`, rdma-core 45+).
        FLUSH_GLOBAL = 256,
        /// FLUSH with the persistence placement type allowed
        /// (`IBV_ACCESS_FLUSH_PERSISTENT`, rdma-core 45+).
        FLUSH_PERSISTENT = 512,
    }
);

c_flags!(
    /// `enum ibv_send_flags`.
    SendFlags {
        /// Wait for earlier READs and atomics to complete first.
        FENCE = 1,
        /// Generate a work completion.
        SIGNALED = 2,
        /// Set the solicited event bit.
        SOLICITED = 4,
        /// Copy the payload at post time.
        INLINE = 8,
    }
);

c_flags!(
    /// `enum ibv_qp_attr_mask`: which attributes a modify call sets.
    QpAttrMask {
        /// `qp_state`.
        STATE = 1 << 0,
        /// `cur_qp_state`.
        CUR_STATE = 1 << 1,
        /// `en_sqd_async_notify`.
        EN_SQD_ASYNC_NOTIFY = 1 << 2,
        /// `qp_access_flags`.
        ACCESS_FLAGS = 1 << 3,
        /// `pkey_index`.
        PKEY_INDEX = 1 << 4,
        /// `port_num`.
        PORT = 1 << 5,
        /// `qkey`.
        QKEY = 1 << 6,
        /// `ah_attr` (the primary path).
        AV = 1 << 7,
        /// `path_mtu`.
        PATH_MTU = 1 << 8,
        /// `timeout`.
        TIMEOUT = 1 << 9,
        /// `retry_cnt`.
        RETRY_CNT = 1 << 10,
        /// `rnr_retry`.
        RNR_RETRY = 1 << 11,
        /// `rq_psn`.
        RQ_PSN = 1 << 12,
        /// `max_rd_atomic`.
        MAX_QP_RD_ATOMIC = 1 << 13,
        /// `alt_ah_attr` and friends.
        ALT_PATH = 1 << 14,
        /// `min_rnr_timer`.
        MIN_RNR_TIMER = 1 << 15,
        /// `sq_psn`.
        SQ_PSN = 1 << 16,
        /// `max_dest_rd_atomic`.
        MAX_DEST_RD_ATOMIC = 1 << 17,
        /// `path_mig_state`.
        PATH_MIG_STATE = 1 << 18,
        /// `cap`.
        CAP = 1 << 19,
        /// `dest_qp_num`.
        DEST_QPN = 1 << 20,
        /// `rate_limit`.
        RATE_LIMIT = 1 << 25,
    }
);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_match_rdma_core() {
        assert_eq!(WcStatus::from_raw(12), Some(WcStatus::RetryExcErr));
        assert_eq!(WcStatus::from_raw(22), None);
        assert_eq!(WcStatus::WrFlushErr.as_str(), "Work Request Flushed Error");
        assert!(WcOpcode::RecvRdmaWithImm.is_recv() && WcOpcode::Recv.is_recv());
        assert!(!WcOpcode::RdmaRead.is_recv());
        assert_eq!(WrOpcode::from_raw(9), Some(WrOpcode::SendWithInv));
        assert_eq!(QpState::from_raw(6), Some(QpState::Err));
        assert_eq!(QpAttrMask::DEST_QPN.0, 0x10_0000);
        assert_eq!(AccessFlags(0x80).unknown_bits(), 0x80, "HUGETLB is not an access softroce knows");
        assert_eq!(AccessFlags(0x340).unknown_bits(), 0, "ON_DEMAND and the FLUSH placement types are");
        assert_eq!(
            (WrOpcode::from_raw(14), WrOpcode::from_raw(15)),
            (Some(WrOpcode::Flush), Some(WrOpcode::AtomicWrite))
        );
        assert_eq!((WcOpcode::Flush as u32, WcOpcode::AtomicWrite as u32), (8, 9));
        assert!((AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_READ).contains(AccessFlags::REMOTE_READ));
    }
}
