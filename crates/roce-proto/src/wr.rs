//! Work requests as posted, and work completions as polled.

use crate::Qpn;
use crate::verbs::{SendFlags, WcOpcode, WcStatus, WrOpcode};

/// A scatter/gather element: `length` bytes at `addr` in the region of `lkey`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Sge {
    /// Start address.
    pub addr: u64,
    /// Length in bytes.
    pub length: u32,
    /// Local key of the memory region.
    pub lkey: u32,
}

/// Where a UD send goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UdDest {
    /// Address handle.
    pub ah: u32,
    /// Destination QP number.
    pub remote_qpn: Qpn,
    /// Q_Key to put in the DETH (if its top bit is set, the QP's own Q_Key is used).
    pub remote_qkey: u32,
}

/// The data of a send: gathered from registered memory, or copied inline.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Payload<'a> {
    /// Gather from these SGEs when the packets are built.
    Sges(&'a [Sge]),
    /// Bytes copied at post time (`IBV_SEND_INLINE`), bounded by `max_inline_data`.
    Inline(&'a [u8]),
}

/// A send work request (`struct ibv_send_wr` without the list link).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SendWr<'a> {
    /// The caller's tag, returned in the completion.
    pub wr_id: u64,
    /// Operation.
    pub opcode: WrOpcode,
    /// Flags.
    pub flags: SendFlags,
    /// Local data (for READ and atomics: where the result goes; for ATOMIC
    /// WRITE: exactly 8 bytes inline, whatever `max_inline_data`; none for FLUSH).
    pub payload: Payload<'a>,
    /// Immediate data, big-endian value (SEND/WRITE with immediate).
    pub imm_data: u32,
    /// R_Key to invalidate (SEND with invalidate, LOCAL_INV).
    pub invalidate_rkey: u32,
    /// Remote address (RDMA, atomics, FLUSH).
    pub remote_addr: u64,
    /// Remote key (RDMA and atomics).
    pub rkey: u32,
    /// Compare value (CMP_AND_SWP) or addend (FETCH_AND_ADD).
    pub compare_add: u64,
    /// Swap value (CMP_AND_SWP).
    pub swap: u64,
    /// Destination, for UD QPs.
    pub ud: Option<UdDest>,
    /// The window to bind, for BIND_MW.
    pub bind: Option<MwBind>,
    /// What a FLUSH asks for (`Some` exactly for [`WrOpcode::Flush`]).
    pub flush: Option<Flush>,
}

/// FLUSH placement types (`enum ibv_placement_type`, the FETH's PLT bits):
/// one or both.
pub mod placement {
    /// Global visibility: the data is visible to every observer of the
    /// memory (`IBV_FLUSH_GLOBAL`).
    pub const GLOBAL: u8 = 1;
    /// Persistence: the data is in the memory's persistence domain
    /// (`IBV_FLUSH_PERSISTENT`).
    pub const PERSISTENT: u8 = 2;
    /// Every placement type defined.
    pub const ALL: u8 = GLOBAL | PERSISTENT;
}

/// FLUSH selectivity levels (`enum ibv_selectivity_level`, the FETH's SEL).
pub mod selectivity {
    /// The range `[remote_addr, remote_addr + len)` (`IBV_FLUSH_RANGE`).
    pub const RANGE: u8 = 0;
    /// The whole region the R_Key names; address and length are not looked
    /// at (`IBV_FLUSH_MR`).
    pub const REGION: u8 = 1;
}

/// A FLUSH request (`ibv_wr_flush`'s `len`, `type` and `level`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Flush {
    /// Placement types ([`placement`]): which guarantee the data gets.
    pub placement: u8,
    /// Selectivity level ([`selectivity`]): the range or the whole region.
    pub selectivity: u8,
    /// Length of the range (the RETH's DMA length).
    pub len: u32,
}

impl Flush {
    /// Whether the placement types and selectivity level are defined ones
    /// (at least one placement type, no reserved bit).
    pub fn is_valid(&self) -> bool {
        self.placement != 0
            && self.placement & !placement::ALL == 0
            && matches!(self.selectivity, selectivity::RANGE | selectivity::REGION)
    }
}

/// A BIND_MW request (`ibv_send_wr.bind_mw`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MwBind {
    /// The window's current R_Key (names the window).
    pub mw_key: u32,
    /// The R_Key it takes: same index, new key byte (`ibv_inc_rkey`).
    pub new_key: u32,
    /// What it grants.
    pub info: crate::mr::MwBindInfo,
}

impl<'a> SendWr<'a> {
    /// A request with every optional field zero.
    pub fn new(wr_id: u64, opcode: WrOpcode, flags: SendFlags, payload: Payload<'a>) -> SendWr<'a> {
        SendWr {
            wr_id,
            opcode,
            flags,
            payload,
            imm_data: 0,
            invalidate_rkey: 0,
            remote_addr: 0,
            rkey: 0,
            compare_add: 0,
            swap: 0,
            ud: None,
            bind: None,
            flush: None,
        }
    }

    /// A FLUSH of `flush.len` bytes at `remote_addr` (or of the whole region,
    /// [`selectivity::REGION`]) under `rkey`: it completes once every request
    /// posted before it was executed by the responder and its memory holds
    /// their data with the placement asked for (IBA 1.5 memory placement
    /// extensions).
    pub fn flush(wr_id: u64, flags: SendFlags, rkey: u32, remote_addr: u64, flush: Flush) -> SendWr<'static> {
        let mut wr = SendWr::new(wr_id, WrOpcode::Flush, flags, Payload::Sges(&[]));
        (wr.rkey, wr.remote_addr, wr.flush) = (rkey, remote_addr, Some(flush));
        wr
    }

    /// An ATOMIC WRITE of the 8 bytes `value` (copied at post time, as
    /// `ibv_wr_atomic_write` copies them) to the 8-byte aligned
    /// `remote_addr` under `rkey`: the responder stores them at once, after
    /// everything before it (IBA 1.5).
    pub fn atomic_write(wr_id: u64, flags: SendFlags, rkey: u32, remote_addr: u64, value: &'a [u8; 8]) -> SendWr<'a> {
        let mut wr = SendWr::new(wr_id, WrOpcode::AtomicWrite, flags, Payload::Inline(value));
        (wr.rkey, wr.remote_addr) = (rkey, remote_addr);
        wr
    }
}

/// A receive work request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RecvWr<'a> {
    /// The caller's tag.
    pub wr_id: u64,
    /// Where incoming data is scattered (may be empty).
    pub sg_list: &'a [Sge],
}

/// `enum ibv_wc_flags`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct WcFlags(pub u32);

impl WcFlags {
    /// The first 40 bytes of the buffer hold a GRH (UD receives).
    pub const GRH: WcFlags = WcFlags(1);
    /// `imm_data` is valid.
    pub const WITH_IMM: WcFlags = WcFlags(2);
    /// `invalidated_rkey` is valid.
    pub const WITH_INV: WcFlags = WcFlags(8);

    /// Whether every flag of `other` is set.
    pub const fn contains(self, other: WcFlags) -> bool {
        self.0 & other.0 == other.0
    }
}

impl core::ops::BitOr for WcFlags {
    type Output = WcFlags;
    fn bitor(self, rhs: WcFlags) -> WcFlags {
        WcFlags(self.0 | rhs.0)
    }
}

/// A work completion (`struct ibv_wc`). When `status` is not success only
/// `wr_id`, `status`, `qp_num` and `vendor_err` are meaningful.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Wc {
    /// The WR's tag.
    pub wr_id: u64,
    /// Outcome.
    pub status: WcStatus,
    /// What completed.
    pub opcode: WcOpcode,
    /// Vendor error (0).
    pub vendor_err: u32,
    /// Bytes received (receives), or read/atomic result length.
    pub byte_len: u32,
    /// Immediate data (big-endian value) with [`WcFlags::WITH_IMM`], or the
    /// invalidated R_Key with [`WcFlags::WITH_INV`].
    pub imm_data: u32,
    /// The local QP.
    pub qp_num: Qpn,
    /// The remote QP (UD receives).
    pub src_qp: Qpn,
    /// Flags.
    pub wc_flags: WcFlags,
    /// P_Key index (0).
    pub pkey_index: u16,
    /// Source LID (0 on RoCE).
    pub slid: u16,
    /// Service level.
    pub sl: u8,
    /// DLID path bits (0 on RoCE).
    pub dlid_path_bits: u8,
}

impl Wc {
    /// A completion with only the always-defined fields set.
    pub fn new(wr_id: u64, status: WcStatus, opcode: WcOpcode, qp_num: impl Into<Qpn>) -> Wc {
        Wc {
            wr_id,
            status,
            opcode,
            vendor_err: 0,
            byte_len: 0,
            imm_data: 0,
            qp_num: qp_num.into(),
            src_qp: Qpn::from(0),
            wc_flags: WcFlags::default(),
            pkey_index: 0,
            slid: 0,
            sl: 0,
            dlid_path_bits: 0,
        }
    }
}
