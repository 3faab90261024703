//! Why a buffer is not a valid RoCEv2 packet. Parsing never panics: every
//! malformed input maps to one of these.

/// A parse or verification failure, typed so callers can count drops by cause.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum WireError {
    /// The buffer ends before a header (or the ICRC) does.
    #[error("truncated {what}: needs {need} bytes, {have} present")]
    Truncated {
        /// Which header or field was cut short.
        what: &'static str,
        /// Bytes the structure needs.
        need: usize,
        /// Bytes present.
        have: usize,
    },
    /// The BTH opcode is reserved or of a transport softroce does not speak
    /// (RD, XRC, CNP and the manufacturer-specific range).
    #[error("unknown opcode {0:#04x}")]
    UnknownOpcode(u8),
    /// BTH TVer is not 0 (IBTA 9.2: the only defined version).
    #[error("unsupported BTH transport header version {0}")]
    BadVersion(u8),
    /// The pad count does not fit the payload area (a packet without payload
    /// must have pad 0; the pad cannot exceed the payload area).
    #[error("pad count {pad} does not fit a {area}-byte payload area")]
    BadPad {
        /// The BTH PadCnt.
        pad: u8,
        /// Bytes between the last header and the ICRC.
        area: usize,
    },
    /// The bytes after the headers do not fit what the opcode carries.
    #[error("length does not fit opcode {opcode:#04x}: {reason} ({area}-byte payload area)")]
    BadLength {
        /// The BTH opcode.
        opcode: u8,
        /// Bytes between the last header and the ICRC.
        area: usize,
        /// What the opcode requires.
        reason: &'static str,
    },
    /// The invariant CRC does not match the packet.
    #[error("ICRC mismatch: packet carries {found:#010x}, computed {computed:#010x}")]
    BadIcrc {
        /// The ICRC in the packet (its 4 bytes read little-endian).
        found: u32,
        /// The ICRC computed over the packet.
        computed: u32,
    },
    /// A `PacketRepr` to emit has extended headers other than its opcode's,
    /// or a payload its opcode cannot carry.
    #[error("cannot emit opcode {opcode:#04x}: {reason}")]
    Inconsistent {
        /// The BTH opcode.
        opcode: u8,
        /// What does not match.
        reason: &'static str,
    },
    /// A buffer given to an emit function is too small.
    #[error("output buffer too small: needs {need} bytes, {have} given")]
    BufferTooSmall {
        /// Bytes needed.
        need: usize,
        /// Bytes given.
        have: usize,
    },
}
