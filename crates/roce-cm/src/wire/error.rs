//! Why bytes are not a CM MAD softroce accepts. Parsing never panics: every
//! malformed input maps to one of these.

use super::mad::AttributeId;

/// A parse or build failure of the CM wire layer, typed so a caller can
/// count drops by cause.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum CmWireError {
    /// A CM MAD is exactly 256 bytes (the UD payload after BTH and DETH).
    #[error("a CM MAD is 256 bytes, {have} given")]
    WrongLength {
        /// Bytes given.
        have: usize,
    },
    /// A structure shorter than its fixed layout (the MAD header, a cma_hdr).
    #[error("truncated {what}: needs {need} bytes, {have} present")]
    Truncated {
        /// Which structure was cut short.
        what: &'static str,
        /// Bytes it needs.
        need: usize,
        /// Bytes present.
        have: usize,
    },
    /// MAD BaseVersion is not 1 (the MAD layer drops such MADs).
    #[error("MAD base version {0} (expected 1)")]
    BadBaseVersion(u8),
    /// The management class is not CM (0x07): another class's MAD.
    #[error("management class {0:#04x} is not CM (0x07)")]
    NotCm(u8),
    /// The CM class version is not 2 (no CM agent is registered for it).
    #[error("CM class version {0} (expected 2)")]
    BadClassVersion(u8),
    /// The method byte is not Send (0x03), the only method CM messages use
    /// and the only one the Linux CM agent registers for.
    #[error("MAD method {0:#04x} (CM messages are Send, 0x03)")]
    BadMethod(u8),
    /// An attribute ID the CM class does not define.
    #[error("unknown CM attribute {0:?}")]
    UnknownAttribute(AttributeId),
    /// A CM attribute that is defined but not spoken over RoCE
    /// (ClassPortInfo, LAP, APR): Linux drops them.
    #[error("CM attribute {0:?} is not supported")]
    UnsupportedAttribute(AttributeId),
    /// The rdma_cm header's cma_version is not 0 (rdma_cm refuses the request).
    #[error("cma_hdr version {0} (expected 0)")]
    BadCmaVersion(u8),
    /// The rdma_cm header's IP version is neither 4 nor 6.
    #[error("cma_hdr IP version {0} (expected 4 or 6)")]
    BadIpVersion(u8),
    /// A service ID outside the rdma_cm IP ranges: bits 63..32 not zero, or
    /// a port space other than IPoIB, TCP, UDP or IB in bits 31..16.
    #[error("service ID {0:#018x} is not an rdma_cm IP service ID")]
    NotIpServiceId(u64),
    /// Private data longer than the message's private-data field.
    #[error("{len} bytes of private data do not fit the {capacity}-byte field")]
    PrivateDataTooLong {
        /// Bytes given.
        len: usize,
        /// Bytes the field holds.
        capacity: usize,
    },
}
