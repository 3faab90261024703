//! The transaction IDs Linux ib_cm puts in CM MADs.
//!
//! The kernel forms a TID as `hi_tid << 32 | local_comm_id`, where `hi_tid`
//! belongs to the port's MAD agent and the low word is the sender's local
//! communication ID taken as a host (little-endian on x86) integer of its
//! wire bytes. Read back from the big-endian TID field, the low 32 bits are
//! therefore the comm ID **byte-swapped**: comm ID bytes `3f 35 40 4e`
//! (0x3f35404e) with hi_tid 2 give TID 0x0000_0002_4e40_353f.
//!
//! The initiator of an exchange picks the TID (REQ, DREQ, SIDR_REQ, and
//! a REJ or MRA sent unprompted), and the answers copy it (REP and RTU carry
//! the REQ's TID, DREP the DREQ's). The kernel matches CM messages by comm
//! IDs, not by TID, so any `hi_tid` interoperates.
//!
//! ```text
//!  TID  | hi_tid (32 bits) | comm ID bytes in reverse order (32 bits) |
//! ```

/// The TID Linux would use for a message initiated by the side whose local
/// comm ID is `local_comm_id` (as read big-endian from the message).
pub const fn kernel_tid(hi_tid: u32, local_comm_id: u32) -> u64 {
    ((hi_tid as u64) << 32) | local_comm_id.swap_bytes() as u64
}

/// The high word of a TID (the MAD agent's `hi_tid` for a kernel TID).
pub const fn tid_hi(tid: u64) -> u32 {
    (tid >> 32) as u32
}

/// The comm ID a kernel TID was formed from (its low word byte-swapped).
pub const fn tid_comm_id(tid: u64) -> u32 {
    (tid as u32).swap_bytes()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_captures_tids() {
        // rping_c3: the client's REQ, comm ID 0x3f35404e.
        assert_eq!(kernel_tid(2, 0x3f35404e), 0x0000_0002_4e40_353f);
        // ib_send_bw: the server's DREQ of connection A, comm ID 0x34489929.
        assert_eq!(kernel_tid(2, 0x34489929), 0x0000_0002_2999_4834);
        assert_eq!(tid_hi(0x0000_0002_2999_4834), 2);
        assert_eq!(tid_comm_id(0x0000_0002_2999_4834), 0x34489929);
        for (hi, id) in [(0, 0), (u32::MAX, 1), (0x1234_5678, 0x9abc_def0)] {
            let t = kernel_tid(hi, id);
            assert_eq!((tid_hi(t), tid_comm_id(t)), (hi, id));
        }
    }
}
