//! The BTH opcode table: what follows the BTH for each opcode.
//!
//! An opcode is `transport (3 bits) | operation (5 bits)` (IBTA 9.2, table 38).
//! The table lists every opcode Linux rxe sends or accepts on RC, UC and UD
//! QPs, including RC FLUSH and ATOMIC_WRITE (IBTA 1.5 memory placement
//! extensions, in rxe since Linux 6.2), plus the RoCEv2 congestion
//! notification packet (CNP, Annex A17.9.3) that RoCE NICs send. RD and XRC
//! (rxe has no such QPs) and the manufacturer range are unknown here and fail
//! to parse.
//!
//! Extended headers always appear in the order of [`ExtHeader::ALL`], so an
//! opcode's header offsets follow from the set of headers it carries.

use core::fmt;

/// A raw BTH opcode byte, with a name for every opcode in the table.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Opcode(pub u8);

/// Which transport service an opcode belongs to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Transport {
    /// Reliable Connected (prefix `000`).
    Rc,
    /// Unreliable Connected (prefix `001`).
    Uc,
    /// Unreliable Datagram (prefix `011`).
    Ud,
    /// RoCEv2 congestion notification (prefix `100`).
    Cnp,
}

/// What a packet does.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Operation {
    /// SEND (with immediate or invalidate).
    Send,
    /// RDMA WRITE (with immediate).
    RdmaWrite,
    /// RDMA READ request.
    RdmaReadRequest,
    /// RDMA READ response.
    RdmaReadResponse,
    /// ACK / NAK.
    Acknowledge,
    /// ATOMIC ACKNOWLEDGE (carries the original remote value).
    AtomicAcknowledge,
    /// ATOMIC compare and swap.
    CompareSwap,
    /// ATOMIC fetch and add.
    FetchAdd,
    /// FLUSH (memory placement extension).
    Flush,
    /// ATOMIC WRITE (memory placement extension).
    AtomicWrite,
    /// Congestion notification: the receiver of ECN-marked traffic asks the
    /// sending QP to slow down.
    CongestionNotification,
}

/// Where a packet sits in its message.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Position {
    /// The first packet of a multi-packet message.
    First,
    /// A packet strictly inside a multi-packet message.
    Middle,
    /// The last packet of a multi-packet message.
    Last,
    /// A whole message in one packet.
    Only,
}

/// Whether a requester or a responder sends the packet.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Direction {
    /// Sent by the requester.
    Request,
    /// Sent back toward the requester (read responses, ACKs, CNPs).
    Response,
}

/// How many payload bytes an opcode may carry.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum PayloadRule {
    /// No payload, pad count 0.
    None,
    /// Any length (the path MTU bounds it; that is checked by the transport).
    Any,
    /// Exactly this many bytes.
    Exactly(usize),
}

/// An extended transport header that may follow the BTH.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ExtHeader {
    /// Datagram ETH (UD): Q_Key, source QP. 8 bytes.
    Deth,
    /// Flush ETH: selectivity level and placement type. 4 bytes.
    Feth,
    /// RDMA ETH: virtual address, R_Key, DMA length. 16 bytes.
    Reth,
    /// Atomic ETH: virtual address, R_Key, swap/add, compare. 28 bytes.
    AtomicEth,
    /// ACK ETH: syndrome and MSN. 4 bytes.
    Aeth,
    /// Atomic ACK ETH: original remote data. 8 bytes.
    AtomicAckEth,
    /// Immediate data. 4 bytes.
    ImmDt,
    /// Invalidate ETH: the R_Key to invalidate. 4 bytes.
    Ieth,
}

impl ExtHeader {
    /// All extended headers, in the order they appear on the wire.
    pub const ALL: [ExtHeader; 8] = [
        ExtHeader::Deth,
        ExtHeader::Feth,
        ExtHeader::Reth,
        ExtHeader::AtomicEth,
        ExtHeader::Aeth,
        ExtHeader::AtomicAckEth,
        ExtHeader::ImmDt,
        ExtHeader::Ieth,
    ];

    /// Length of the header in bytes.
    pub const fn byte_len(self) -> usize {
        match self {
            ExtHeader::Deth => crate::deth::LEN,
            ExtHeader::Feth => crate::feth::LEN,
            ExtHeader::Reth => crate::reth::LEN,
            ExtHeader::AtomicEth => crate::atomic_eth::LEN,
            ExtHeader::Aeth => crate::aeth::LEN,
            ExtHeader::AtomicAckEth => crate::atomic_ack_eth::LEN,
            ExtHeader::ImmDt => crate::immdt::LEN,
            ExtHeader::Ieth => crate::ieth::LEN,
        }
    }

    const fn bit(self) -> u8 {
        1 << (self as u8)
    }
}

/// A set of extended headers.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub struct HeaderSet(u8);

impl HeaderSet {
    const fn of(headers: &[ExtHeader]) -> HeaderSet {
        let mut bits = 0;
        let mut i = 0;
        while i < headers.len() {
            bits |= headers[i].bit();
            i += 1;
        }
        HeaderSet(bits)
    }

    /// Whether the set contains `h`.
    pub const fn contains(self, h: ExtHeader) -> bool {
        self.0 & h.bit() != 0
    }

    /// The headers of the set in wire order.
    pub fn iter(self) -> impl Iterator<Item = ExtHeader> {
        let mut bits = self.0;
        std::iter::from_fn(move || {
            let i = bits.trailing_zeros() as usize;
            bits &= bits.wrapping_sub(1);
            ExtHeader::ALL.get(i).copied()
        })
    }

    /// The set with these bits (bit i: `ExtHeader::ALL[i]`).
    pub(crate) const fn from_bits(bits: u8) -> HeaderSet {
        HeaderSet(bits)
    }

    /// Total bytes of the headers in the set (a table lookup: bit `i` is
    /// `ExtHeader::ALL[i]`, so any set is one of 256).
    pub const fn byte_len(self) -> usize {
        SET_LEN[self.0 as usize] as usize
    }

    /// The headers of the set that come before `h` on the wire.
    const fn before(self, h: ExtHeader) -> HeaderSet {
        HeaderSet(self.0 & (h.bit() - 1))
    }
}

// `HeaderSet` bit i is `ExtHeader::ALL[i]`: wire order is discriminant order.
const _: () = {
    let mut i = 0;
    while i < ExtHeader::ALL.len() {
        assert!(ExtHeader::ALL[i] as usize == i);
        i += 1;
    }
};

/// Bytes of every header set, indexed by its bits.
const SET_LEN: [u8; 256] = {
    let mut t = [0u8; 256];
    let mut bits = 0;
    while bits < 256 {
        let mut len = 0;
        let mut i = 0;
        while i < ExtHeader::ALL.len() {
            if bits & (1 << i) != 0 {
                len += ExtHeader::ALL[i].byte_len();
            }
            i += 1;
        }
        t[bits] = len as u8;
        bits += 1;
    }
    t
};

/// Everything the table knows about one opcode.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OpcodeInfo {
    /// The opcode byte.
    pub opcode: Opcode,
    /// Name in rxe's spelling without the `IB_OPCODE_` prefix, e.g. `RC_SEND_FIRST`.
    pub name: &'static str,
    /// Transport service.
    pub transport: Transport,
    /// Operation.
    pub operation: Operation,
    /// Position in the message.
    pub position: Position,
    /// Extended headers after the BTH.
    pub headers: HeaderSet,
    /// Payload the opcode carries.
    pub payload: PayloadRule,
}

impl OpcodeInfo {
    /// Byte offset of `h` from the start of the BTH, if the opcode carries it.
    pub const fn offset(&self, h: ExtHeader) -> Option<usize> {
        if !self.headers.contains(h) {
            return None;
        }
        Some(crate::bth::LEN + self.headers.before(h).byte_len())
    }

    /// Length of BTH plus all extended headers: where the payload starts.
    pub const fn header_len(&self) -> usize {
        crate::bth::LEN + self.headers.byte_len()
    }

    /// Whether a requester or a responder sends this opcode.
    pub const fn direction(&self) -> Direction {
        match self.operation {
            Operation::RdmaReadResponse | Operation::Acknowledge | Operation::AtomicAcknowledge => Direction::Response,
            _ => Direction::Request,
        }
    }

    /// First or only packet of a message.
    pub const fn starts_message(&self) -> bool {
        matches!(self.position, Position::First | Position::Only)
    }

    /// Last or only packet of a message.
    pub const fn ends_message(&self) -> bool {
        matches!(self.position, Position::Last | Position::Only)
    }

    /// Whether the opcode carries immediate data.
    pub const fn has_immediate(&self) -> bool {
        self.headers.contains(ExtHeader::ImmDt)
    }

    /// Whether the opcode carries an R_Key to invalidate.
    pub const fn has_invalidate(&self) -> bool {
        self.headers.contains(ExtHeader::Ieth)
    }

    /// Whether the opcode may carry payload bytes.
    pub const fn carries_payload(&self) -> bool {
        !matches!(self.payload, PayloadRule::None)
    }
}

const fn entry(
    code: u8,
    name: &'static str,
    transport: Transport,
    operation: Operation,
    position: Position,
    headers: &[ExtHeader],
    payload: PayloadRule,
) -> OpcodeInfo {
    OpcodeInfo { opcode: Opcode(code), name, transport, operation, position, headers: HeaderSet::of(headers), payload }
}

use ExtHeader as H;
use Operation as O;
use PayloadRule as P;
use Position::{First, Last, Middle, Only};

/// The SEND and RDMA WRITE opcodes shared by RC and UC (operation codes 0x00..=0x0b).
const fn send_write(prefix: u8, t: Transport, names: [&'static str; 12]) -> [OpcodeInfo; 12] {
    [
        entry(prefix, names[0], t, O::Send, First, &[], P::Any),
        entry(prefix | 0x01, names[1], t, O::Send, Middle, &[], P::Any),
        entry(prefix | 0x02, names[2], t, O::Send, Last, &[], P::Any),
        entry(prefix | 0x03, names[3], t, O::Send, Last, &[H::ImmDt], P::Any),
        entry(prefix | 0x04, names[4], t, O::Send, Only, &[], P::Any),
        entry(prefix | 0x05, names[5], t, O::Send, Only, &[H::ImmDt], P::Any),
        entry(prefix | 0x06, names[6], t, O::RdmaWrite, First, &[H::Reth], P::Any),
        entry(prefix | 0x07, names[7], t, O::RdmaWrite, Middle, &[], P::Any),
        entry(prefix | 0x08, names[8], t, O::RdmaWrite, Last, &[], P::Any),
        entry(prefix | 0x09, names[9], t, O::RdmaWrite, Last, &[H::ImmDt], P::Any),
        entry(prefix | 0x0a, names[10], t, O::RdmaWrite, Only, &[H::Reth], P::Any),
        entry(prefix | 0x0b, names[11], t, O::RdmaWrite, Only, &[H::Reth, H::ImmDt], P::Any),
    ]
}

const RC_SEND_WRITE: [OpcodeInfo; 12] = send_write(
    0x00,
    Transport::Rc,
    [
        "RC_SEND_FIRST",
        "RC_SEND_MIDDLE",
        "RC_SEND_LAST",
        "RC_SEND_LAST_WITH_IMMEDIATE",
        "RC_SEND_ONLY",
        "RC_SEND_ONLY_WITH_IMMEDIATE",
        "RC_RDMA_WRITE_FIRST",
        "RC_RDMA_WRITE_MIDDLE",
        "RC_RDMA_WRITE_LAST",
        "RC_RDMA_WRITE_LAST_WITH_IMMEDIATE",
        "RC_RDMA_WRITE_ONLY",
        "RC_RDMA_WRITE_ONLY_WITH_IMMEDIATE",
    ],
);

const UC_SEND_WRITE: [OpcodeInfo; 12] = send_write(
    0x20,
    Transport::Uc,
    [
        "UC_SEND_FIRST",
        "UC_SEND_MIDDLE",
        "UC_SEND_LAST",
        "UC_SEND_LAST_WITH_IMMEDIATE",
        "UC_SEND_ONLY",
        "UC_SEND_ONLY_WITH_IMMEDIATE",
        "UC_RDMA_WRITE_FIRST",
        "UC_RDMA_WRITE_MIDDLE",
        "UC_RDMA_WRITE_LAST",
        "UC_RDMA_WRITE_LAST_WITH_IMMEDIATE",
        "UC_RDMA_WRITE_ONLY",
        "UC_RDMA_WRITE_ONLY_WITH_IMMEDIATE",
    ],
);

const RC_OTHER: [OpcodeInfo; 13] = {
    use Transport::Rc;
    [
        entry(0x0c, "RC_RDMA_READ_REQUEST", Rc, O::RdmaReadRequest, Only, &[H::Reth], P::None),
        entry(0x0d, "RC_RDMA_READ_RESPONSE_FIRST", Rc, O::RdmaReadResponse, First, &[H::Aeth], P::Any),
        entry(0x0e, "RC_RDMA_READ_RESPONSE_MIDDLE", Rc, O::RdmaReadResponse, Middle, &[], P::Any),
        entry(0x0f, "RC_RDMA_READ_RESPONSE_LAST", Rc, O::RdmaReadResponse, Last, &[H::Aeth], P::Any),
        entry(0x10, "RC_RDMA_READ_RESPONSE_ONLY", Rc, O::RdmaReadResponse, Only, &[H::Aeth], P::Any),
        entry(0x11, "RC_ACKNOWLEDGE", Rc, O::Acknowledge, Only, &[H::Aeth], P::None),
        entry(0x12, "RC_ATOMIC_ACKNOWLEDGE", Rc, O::AtomicAcknowledge, Only, &[H::Aeth, H::AtomicAckEth], P::None),
        entry(0x13, "RC_COMPARE_SWAP", Rc, O::CompareSwap, Only, &[H::AtomicEth], P::None),
        entry(0x14, "RC_FETCH_ADD", Rc, O::FetchAdd, Only, &[H::AtomicEth], P::None),
        entry(0x16, "RC_SEND_LAST_WITH_INVALIDATE", Rc, O::Send, Last, &[H::Ieth], P::Any),
        entry(0x17, "RC_SEND_ONLY_WITH_INVALIDATE", Rc, O::Send, Only, &[H::Ieth], P::Any),
        entry(0x1c, "RC_FLUSH", Rc, O::Flush, Only, &[H::Feth, H::Reth], P::None),
        entry(0x1d, "RC_ATOMIC_WRITE", Rc, O::AtomicWrite, Only, &[H::Reth], P::Exactly(8)),
    ]
};

const UD: [OpcodeInfo; 2] = [
    entry(0x64, "UD_SEND_ONLY", Transport::Ud, O::Send, Only, &[H::Deth], P::Any),
    entry(0x65, "UD_SEND_ONLY_WITH_IMMEDIATE", Transport::Ud, O::Send, Only, &[H::Deth, H::ImmDt], P::Any),
];

/// The CNP: BTH (PSN 0, the congested QP as destination) and 16 reserved bytes.
const CNP: [OpcodeInfo; 1] = [entry(0x81, "CNP", Transport::Cnp, O::CongestionNotification, Only, &[], P::Exactly(16))];

/// Number of opcodes in the table.
pub const COUNT: usize = RC_SEND_WRITE.len() + UC_SEND_WRITE.len() + RC_OTHER.len() + UD.len() + CNP.len();

/// Every known opcode, ordered by opcode byte within each group.
pub static ALL: [OpcodeInfo; COUNT] = {
    let mut all = [RC_SEND_WRITE[0]; COUNT];
    let mut n = 0;
    let mut i = 0;
    while i < RC_SEND_WRITE.len() {
        all[n] = RC_SEND_WRITE[i];
        n += 1;
        i += 1;
    }
    i = 0;
    while i < RC_OTHER.len() {
        all[n] = RC_OTHER[i];
        n += 1;
        i += 1;
    }
    i = 0;
    while i < UC_SEND_WRITE.len() {
        all[n] = UC_SEND_WRITE[i];
        n += 1;
        i += 1;
    }
    i = 0;
    while i < UD.len() {
        all[n] = UD[i];
        n += 1;
        i += 1;
    }
    all[n] = CNP[0];
    all
};

/// Index into [`ALL`] by opcode byte; `u8::MAX` for unknown opcodes.
static INDEX: [u8; 256] = {
    let mut index = [u8::MAX; 256];
    let mut i = 0;
    while i < COUNT {
        index[ALL[i].opcode.0 as usize] = i as u8;
        i += 1;
    }
    index
};

impl Opcode {
    /// The table entry of this opcode, `None` if it is unknown.
    pub fn info(self) -> Option<&'static OpcodeInfo> {
        ALL.get(INDEX[self.0 as usize] as usize)
    }

    /// The opcode's name, or `UNKNOWN`.
    pub fn name(self) -> &'static str {
        self.info().map_or("UNKNOWN", |i| i.name)
    }
}

macro_rules! opcode_consts {
    ($($name:ident = $v:expr),* $(,)?) => {
        impl Opcode {
            $(
                #[doc = concat!("`", stringify!($name), "` (", stringify!($v), ").")]
                pub const $name: Opcode = Opcode($v);
            )*
        }
    };
}

opcode_consts! {
    RC_SEND_FIRST = 0x00, RC_SEND_MIDDLE = 0x01, RC_SEND_LAST = 0x02,
    RC_SEND_LAST_WITH_IMMEDIATE = 0x03, RC_SEND_ONLY = 0x04, RC_SEND_ONLY_WITH_IMMEDIATE = 0x05,
    RC_RDMA_WRITE_FIRST = 0x06, RC_RDMA_WRITE_MIDDLE = 0x07, RC_RDMA_WRITE_LAST = 0x08,
    RC_RDMA_WRITE_LAST_WITH_IMMEDIATE = 0x09, RC_RDMA_WRITE_ONLY = 0x0a,
    RC_RDMA_WRITE_ONLY_WITH_IMMEDIATE = 0x0b, RC_RDMA_READ_REQUEST = 0x0c,
    RC_RDMA_READ_RESPONSE_FIRST = 0x0d, RC_RDMA_READ_RESPONSE_MIDDLE = 0x0e,
    RC_RDMA_READ_RESPONSE_LAST = 0x0f, RC_RDMA_READ_RESPONSE_ONLY = 0x10,
    RC_ACKNOWLEDGE = 0x11, RC_ATOMIC_ACKNOWLEDGE = 0x12, RC_COMPARE_SWAP = 0x13,
    RC_FETCH_ADD = 0x14, RC_SEND_LAST_WITH_INVALIDATE = 0x16, RC_SEND_ONLY_WITH_INVALIDATE = 0x17,
    RC_FLUSH = 0x1c, RC_ATOMIC_WRITE = 0x1d,
    UC_SEND_FIRST = 0x20, UC_SEND_MIDDLE = 0x21, UC_SEND_LAST = 0x22,
    UC_SEND_LAST_WITH_IMMEDIATE = 0x23, UC_SEND_ONLY = 0x24, UC_SEND_ONLY_WITH_IMMEDIATE = 0x25,
    UC_RDMA_WRITE_FIRST = 0x26, UC_RDMA_WRITE_MIDDLE = 0x27, UC_RDMA_WRITE_LAST = 0x28,
    UC_RDMA_WRITE_LAST_WITH_IMMEDIATE = 0x29, UC_RDMA_WRITE_ONLY = 0x2a,
    UC_RDMA_WRITE_ONLY_WITH_IMMEDIATE = 0x2b,
    UD_SEND_ONLY = 0x64, UD_SEND_ONLY_WITH_IMMEDIATE = 0x65,
    CNP = 0x81,
}

impl fmt::Debug for Opcode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}({:#04x})", self.name(), self.0)
    }
}

impl fmt::Display for Opcode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_is_consistent() {
        for info in ALL.iter() {
            assert_eq!(info.opcode.info(), Some(info), "{}", info.name);
            let prefix = match info.transport {
                Transport::Rc => "RC_",
                Transport::Uc => "UC_",
                Transport::Ud => "UD_",
                Transport::Cnp => "CNP",
            };
            assert!(info.name.starts_with(prefix), "{}", info.name);
            assert_eq!(info.name.contains("IMMEDIATE"), info.has_immediate(), "{}", info.name);
            assert_eq!(info.name.contains("INVALIDATE"), info.has_invalidate(), "{}", info.name);
            assert_eq!(info.transport == Transport::Ud, info.headers.contains(ExtHeader::Deth));
            let ext: usize = info.headers.iter().map(ExtHeader::byte_len).sum();
            assert_eq!(info.header_len(), crate::bth::LEN + ext);
        }
        let known = (0..=255u8).filter(|b| Opcode(*b).info().is_some()).count();
        assert_eq!(known, COUNT);
        assert_eq!(COUNT, 40);
    }

    #[test]
    fn offsets_follow_wire_order() {
        let w = Opcode::RC_RDMA_WRITE_ONLY_WITH_IMMEDIATE.info().unwrap();
        assert_eq!(w.offset(ExtHeader::Reth), Some(12));
        assert_eq!(w.offset(ExtHeader::ImmDt), Some(28));
        assert_eq!(w.header_len(), 32);
        let a = Opcode::RC_ATOMIC_ACKNOWLEDGE.info().unwrap();
        assert_eq!(a.offset(ExtHeader::Aeth), Some(12));
        assert_eq!(a.offset(ExtHeader::AtomicAckEth), Some(16));
        assert_eq!(a.offset(ExtHeader::Reth), None);
        let u = Opcode::UD_SEND_ONLY_WITH_IMMEDIATE.info().unwrap();
        assert_eq!(u.offset(ExtHeader::Deth), Some(12));
        assert_eq!(u.offset(ExtHeader::ImmDt), Some(20));
        let f = Opcode::RC_FLUSH.info().unwrap();
        assert_eq!((f.offset(ExtHeader::Feth), f.offset(ExtHeader::Reth)), (Some(12), Some(16)));
        assert_eq!(Opcode::RC_COMPARE_SWAP.info().unwrap().header_len(), 40);
    }

    #[test]
    fn unknown_opcodes() {
        for b in [0x15u8, 0x18, 0x1b, 0x1e, 0x2c, 0x40, 0x66, 0x80, 0xa0, 0xff] {
            assert!(Opcode(b).info().is_none(), "{b:#x}");
        }
        assert_eq!(Opcode(0x80).name(), "UNKNOWN");
        assert_eq!(Opcode::CNP.info().unwrap().payload, PayloadRule::Exactly(16));
        assert_eq!(Opcode::RC_RDMA_READ_RESPONSE_MIDDLE.info().unwrap().direction(), Direction::Response);
        assert_eq!(Opcode::UC_SEND_ONLY.info().unwrap().direction(), Direction::Request);
    }
}
