//! rsockets' wire formats, as rdma-core's `rsocket.c` puts them on the
//! wire: the connection private data (`struct rs_conn_data`), the 32-bit
//! immediate data of every RDMA WRITE WITH IMMEDIATE, and the two records
//! one side RDMA-writes into the other's memory (a target-SGL entry, an
//! iomap entry).
//!
//! # `rs_conn_data` (40 bytes, in the REQ's and the REP's private data)
//!
//! ```text
//!  byte   0          1          2          3
//!       +----------+----------+----------+----------+
//!     0 | version  |  flags   |   credits (BE16)    |   version 1
//!       +----------+----------+----------+----------+   flags: bit0 NET (the sender is big-endian)
//!     4 |        reserved (0)            |iomap size|          bit1 IOMAP (an iomap table follows
//!       +----------+----------+----------+----------+                the target SGL)
//!     8 |          target_sgl.addr (BE64)           |   credits: receives the sender posted
//!    12 |                                           |   iomap size: entries, scaled (see below)
//!       +-------------------------------------------+
//!    16 |          target_sgl.key (BE32)            |   target_sgl: where the peer writes the
//!       +-------------------------------------------+   receive buffers it grants (an array of
//!    20 |          target_sgl.length (BE32)         |   `length` 16-byte entries; 2)
//!       +-------------------------------------------+
//!    24 |          data_buf.addr (BE64)             |   data_buf: the first receive buffer
//!    28 |                                           |   granted (half the ring)
//!       +-------------------------------------------+
//!    32 |          data_buf.key (BE32)              |
//!       +-------------------------------------------+
//!    36 |          data_buf.length (BE32)           |
//!       +-------------------------------------------+
//! ```
//!
//! # Immediate data (`imm_data`, big-endian on the wire)
//!
//! ```text
//!   31   29 28                                             0
//!  +-------+------------------------------------------------+
//!  |  op   |                    data                        |
//!  +-------+------------------------------------------------+
//!   op 0  DATA       data: bytes this write carried into the ring
//!   op 4  SGL        data: the new credit limit (a 16-bit message sequence number);
//!                    the write carries 0 bytes, or a 16-byte target-SGL entry
//!   op 6  IOMAP_SGL  data[15:0]: the index of the 24-byte iomap entry the write carried
//!   op 7  CTRL       data: 0 DISCONNECT, 1 KEEPALIVE, 2 SHUTDOWN (0 bytes)
//!   op 2  WRITE      never sent: rsockets tags its direct (riowrite) writes so
//!   op 1, 3, 5       reserved
//! ```
//!
//! # Records written into the peer's memory (in the *peer's* byte order)
//!
//! ```text
//!  target-SGL entry (16 bytes)        iomap entry (24 bytes)
//!  +0  addr   (u64)                   +0  offset (u64)  the riowrite offset it maps
//!  +8  key    (u32)                   +8  addr   (u64)
//!  +12 length (u32)                   +16 key    (u32)
//!                                     +20 length (u32)
//! ```
//!
//! The writer converts: a side whose peer's NET flag differs from its own
//! byte-swaps what it writes (`RS_OPT_SWAP_SGL`), so each side reads its
//! own arrays in host order.

use std::fmt;

/// The only `rs_conn_data` version there is.
pub const VERSION: u8 = 1;
/// `RS_CONN_FLAG_NET`: the sender is a big-endian host.
pub const FLAG_NET: u8 = 1 << 0;
/// `RS_CONN_FLAG_IOMAP`: an iomap table follows the sender's target SGL.
pub const FLAG_IOMAP: u8 = 1 << 1;
/// Bytes of `rs_conn_data`.
pub const CONN_DATA_LEN: usize = 40;
/// Bytes of a target-SGL entry (`struct rs_sge`).
pub const SGE_LEN: usize = 16;
/// Bytes of an iomap entry (`struct rs_iomap`).
pub const IOMAP_LEN: usize = 24;

/// How the multi-byte fields of an SGL or iomap entry are laid out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Order {
    /// Little-endian.
    Little,
    /// Big-endian.
    Big,
}

impl Order {
    /// This host's order.
    pub const HOST: Order = if cfg!(target_endian = "big") { Order::Big } else { Order::Little };

    /// The order of the host that sent `flags` (its NET flag).
    pub fn of_flags(flags: u8) -> Order {
        if flags & FLAG_NET != 0 { Order::Big } else { Order::Little }
    }

    /// This host's NET flag.
    pub fn host_flag() -> u8 {
        if Order::HOST == Order::Big { FLAG_NET } else { 0 }
    }

    fn put_u64(self, out: &mut [u8], v: u64) {
        out.copy_from_slice(&match self {
            Order::Little => v.to_le_bytes(),
            Order::Big => v.to_be_bytes(),
        });
    }

    fn put_u32(self, out: &mut [u8], v: u32) {
        out.copy_from_slice(&match self {
            Order::Little => v.to_le_bytes(),
            Order::Big => v.to_be_bytes(),
        });
    }

    fn u64(self, b: &[u8]) -> u64 {
        let a: [u8; 8] = b.try_into().expect("8 bytes");
        match self {
            Order::Little => u64::from_le_bytes(a),
            Order::Big => u64::from_be_bytes(a),
        }
    }

    fn u32(self, b: &[u8]) -> u32 {
        let a: [u8; 4] = b.try_into().expect("4 bytes");
        match self {
            Order::Little => u32::from_le_bytes(a),
            Order::Big => u32::from_be_bytes(a),
        }
    }
}

/// `struct rs_sge`: `length` bytes at `addr` under R_Key `key`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct RsSge {
    /// Start address (the peer's virtual address).
    pub addr: u64,
    /// R_Key.
    pub key: u32,
    /// Length (bytes, or entries for the target SGL of `rs_conn_data`).
    pub length: u32,
}

impl RsSge {
    /// The 16-byte entry in `order`.
    pub fn to_bytes(self, order: Order) -> [u8; SGE_LEN] {
        let mut b = [0; SGE_LEN];
        order.put_u64(&mut b[0..8], self.addr);
        order.put_u32(&mut b[8..12], self.key);
        order.put_u32(&mut b[12..16], self.length);
        b
    }

    /// The entry in `b` (16 bytes) read in `order`.
    pub fn from_bytes(b: &[u8; SGE_LEN], order: Order) -> RsSge {
        RsSge { addr: order.u64(&b[0..8]), key: order.u32(&b[8..12]), length: order.u32(&b[12..16]) }
    }
}

/// `struct rs_iomap`: the peer's riowrite offsets `[offset, offset +
/// sge.length)` land at `sge.addr`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct IomapEntry {
    /// The first offset mapped.
    pub offset: u64,
    /// Where it lands.
    pub sge: RsSge,
}

impl IomapEntry {
    /// The 24-byte entry in `order`.
    pub fn to_bytes(self, order: Order) -> [u8; IOMAP_LEN] {
        let mut b = [0; IOMAP_LEN];
        order.put_u64(&mut b[0..8], self.offset);
        b[8..24].copy_from_slice(&self.sge.to_bytes(order));
        b
    }

    /// The entry in `b` (24 bytes) read in `order`.
    pub fn from_bytes(b: &[u8; IOMAP_LEN], order: Order) -> IomapEntry {
        let sge: &[u8; SGE_LEN] = b[8..24].try_into().expect("16 bytes");
        IomapEntry { offset: order.u64(&b[0..8]), sge: RsSge::from_bytes(sge, order) }
    }

    /// Whether `off` falls in the entry's range (an empty entry maps nothing).
    pub fn covers(&self, off: u64) -> bool {
        off >= self.offset && off - self.offset < u64::from(self.sge.length)
    }
}

/// `struct rs_conn_data`, decoded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConnData {
    /// `VERSION`.
    pub version: u8,
    /// `FLAG_NET`, `FLAG_IOMAP`.
    pub flags: u8,
    /// Receives the sender posted: how many messages the other side may send.
    pub credits: u16,
    /// The sender's iomap table size, scaled ([`scale_to_value`]).
    pub iomap_size: u8,
    /// The sender's target-SGL array (`length`: its entries).
    pub target_sgl: RsSge,
    /// The first receive buffer the sender grants.
    pub data_buf: RsSge,
}

/// Why a peer's connection data is refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConnDataError {
    /// Fewer than 40 bytes.
    Short(usize),
    /// Not version 1.
    Version(u8),
}

impl fmt::Display for ConnDataError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ConnDataError::Short(n) => write!(f, "rs_conn_data: {n} bytes of private data, 40 needed"),
            ConnDataError::Version(v) => write!(f, "rs_conn_data: version {v}, only 1 is known"),
        }
    }
}

impl ConnData {
    /// The 40 bytes (every field big-endian, reserved bytes 0).
    pub fn emit(&self) -> [u8; CONN_DATA_LEN] {
        let mut b = [0; CONN_DATA_LEN];
        b[0] = self.version;
        b[1] = self.flags;
        b[2..4].copy_from_slice(&self.credits.to_be_bytes());
        b[7] = self.iomap_size;
        b[8..24].copy_from_slice(&self.target_sgl.to_bytes(Order::Big));
        b[24..40].copy_from_slice(&self.data_buf.to_bytes(Order::Big));
        b
    }

    /// Reads the first 40 bytes of `p` (private data is zero-padded beyond).
    pub fn parse(p: &[u8]) -> Result<ConnData, ConnDataError> {
        let b: &[u8; CONN_DATA_LEN] =
            p.get(..CONN_DATA_LEN).and_then(|s| s.try_into().ok()).ok_or(ConnDataError::Short(p.len()))?;
        if b[0] != VERSION {
            return Err(ConnDataError::Version(b[0]));
        }
        let sge = |at: usize| RsSge::from_bytes(b[at..at + SGE_LEN].try_into().expect("16 bytes"), Order::Big);
        Ok(ConnData {
            version: b[0],
            flags: b[1],
            credits: u16::from_be_bytes([b[2], b[3]]),
            iomap_size: b[7],
            target_sgl: sge(8),
            data_buf: sge(24),
        })
    }
}

/// `rs_value_to_scale(v, 8)`: a table size in 8 bits (up to 128 as is,
/// above that 0x80 | v / 256, cut to 8 bits as rsockets' cast cuts it).
pub fn value_to_scale(v: u32) -> u8 {
    if v <= 128 { v as u8 } else { (0x80 | (v >> 8)) as u8 }
}

/// `rs_scale_to_value(s, 8)`, the inverse.
pub fn scale_to_value(s: u8) -> u32 {
    if s <= 128 { u32::from(s) } else { u32::from(s & 0x7f) << 8 }
}

/// A size as the 8-bit scale can carry it (rsockets rounds
/// `RDMA_IOMAPSIZE` and the `iomap_size` file so).
pub fn round_iomap_size(v: u32) -> u16 {
    scale_to_value(value_to_scale(v)) as u16
}

/// The three control messages (`RS_CTRL_*`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ctrl {
    /// The sender is gone: no more data either way.
    Disconnect,
    /// A probe (rsockets sends it as a plain zero-length RDMA WRITE).
    Keepalive,
    /// The sender will send no more data.
    Shutdown,
}

/// One rsockets message: what an immediate value (or a local send tag) says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Msg {
    /// `RS_OP_DATA`: this many bytes went into the receive ring.
    Data(u32),
    /// `RS_OP_WRITE`: a direct (riowrite) write of this many bytes; a local
    /// tag only, never an immediate value.
    Write(u32),
    /// `RS_OP_SGL`: the receiver's new credit limit (message sequence number).
    Sgl(u32),
    /// `RS_OP_IOMAP_SGL`: iomap entry `index` was written.
    IomapSgl(u16),
    /// `RS_OP_CTRL`.
    Ctrl(Ctrl),
}

/// An immediate value that is no rsockets message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MsgError {
    /// A reserved op (1, 3 or 5).
    ReservedOp(u8),
    /// A control code other than 0, 1, 2.
    UnknownCtrl(u32),
}

impl fmt::Display for MsgError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            MsgError::ReservedOp(op) => write!(f, "immediate data with reserved op {op}"),
            MsgError::UnknownCtrl(c) => write!(f, "control message {c} (0-2 are defined)"),
        }
    }
}

const OP_DATA: u32 = 0;
const OP_WRITE: u32 = 2;
const OP_SGL: u32 = 4;
const OP_IOMAP_SGL: u32 = 6;
const OP_CTRL: u32 = 7;
/// The 29 data bits.
pub const DATA_MASK: u32 = 0x1fff_ffff;

impl Msg {
    /// The 32-bit value (`rs_msg_set(op, data)`); data beyond 29 bits is cut.
    pub fn encode(self) -> u32 {
        let (op, data) = match self {
            Msg::Data(n) => (OP_DATA, n),
            Msg::Write(n) => (OP_WRITE, n),
            Msg::Sgl(c) => (OP_SGL, c),
            Msg::IomapSgl(i) => (OP_IOMAP_SGL, u32::from(i)),
            Msg::Ctrl(Ctrl::Disconnect) => (OP_CTRL, 0),
            Msg::Ctrl(Ctrl::Keepalive) => (OP_CTRL, 1),
            Msg::Ctrl(Ctrl::Shutdown) => (OP_CTRL, 2),
        };
        (op << 29) | (data & DATA_MASK)
    }

    /// The message a 32-bit value names (`Write` included: the caller
    /// refuses it from the wire).
    pub fn decode(v: u32) -> Result<Msg, MsgError> {
        let data = v & DATA_MASK;
        match v >> 29 {
            OP_DATA => Ok(Msg::Data(data)),
            OP_WRITE => Ok(Msg::Write(data)),
            OP_SGL => Ok(Msg::Sgl(data)),
            OP_IOMAP_SGL => Ok(Msg::IomapSgl(data as u16)),
            OP_CTRL => match data {
                0 => Ok(Msg::Ctrl(Ctrl::Disconnect)),
                1 => Ok(Msg::Ctrl(Ctrl::Keepalive)),
                2 => Ok(Msg::Ctrl(Ctrl::Shutdown)),
                c => Err(MsgError::UnknownCtrl(c)),
            },
            op => Err(MsgError::ReservedOp(op as u8)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn conn_data_is_40_big_endian_bytes_in_rsocket_c_s_field_order() {
        let c = ConnData {
            version: 1,
            flags: FLAG_IOMAP,
            credits: 384,
            iomap_size: 1,
            target_sgl: RsSge { addr: 0x1122_3344_5566_7788, key: 0xaabb_ccdd, length: 2 },
            data_buf: RsSge { addr: 0x0102_0304_0506_0708, key: 0x1234, length: 0x10000 },
        };
        let b = c.emit();
        assert_eq!(&b[..8], &[1, 2, 0x01, 0x80, 0, 0, 0, 1]);
        assert_eq!(&b[8..16], &[0x11, 0x22, 0x33, 0x44, 0x55, 0x66, 0x77, 0x88]);
        assert_eq!(&b[16..20], &[0xaa, 0xbb, 0xcc, 0xdd], "key before length, as struct rs_sge");
        assert_eq!(&b[20..24], &[0, 0, 0, 2]);
        assert_eq!(&b[36..40], &[0, 1, 0, 0]);
        assert_eq!(ConnData::parse(&b), Ok(c));
        // Private data comes zero-padded (56 bytes in a REQ, 196 in a REP).
        let mut padded = b.to_vec();
        padded.resize(196, 0);
        assert_eq!(ConnData::parse(&padded), Ok(c));
    }

    #[test]
    fn conn_data_refuses_short_data_and_other_versions() {
        let mut b = ConnData {
            version: 1,
            flags: 0,
            credits: 1,
            iomap_size: 0,
            target_sgl: RsSge::default(),
            data_buf: RsSge::default(),
        }
        .emit();
        assert_eq!(ConnData::parse(&b[..39]), Err(ConnDataError::Short(39)));
        assert_eq!(ConnData::parse(&[]), Err(ConnDataError::Short(0)));
        b[0] = 2;
        assert_eq!(ConnData::parse(&b), Err(ConnDataError::Version(2)));
    }

    #[test]
    fn immediate_data_ops_sit_in_the_top_three_bits() {
        assert_eq!(Msg::Data(4096).encode(), 4096);
        assert_eq!(Msg::Sgl(400).encode(), 0x8000_0000 | 400);
        assert_eq!(Msg::IomapSgl(3).encode(), 0xc000_0003);
        assert_eq!(Msg::Ctrl(Ctrl::Disconnect).encode(), 0xe000_0000);
        assert_eq!(Msg::Ctrl(Ctrl::Keepalive).encode(), 0xe000_0001);
        assert_eq!(Msg::Ctrl(Ctrl::Shutdown).encode(), 0xe000_0002);
        assert_eq!(Msg::Write(10).encode(), 0x4000_000a);
        for m in [
            Msg::Data(0),
            Msg::Data(DATA_MASK),
            Msg::Sgl(65535 + 384),
            Msg::IomapSgl(u16::MAX),
            Msg::Write(65536),
            Msg::Ctrl(Ctrl::Shutdown),
        ] {
            assert_eq!(Msg::decode(m.encode()), Ok(m));
        }
        // More than 29 bits of data are cut, as rs_msg_set's OR would mix them into the op.
        assert_eq!(Msg::Data(0x2000_0001).encode(), 1);
    }

    #[test]
    fn reserved_ops_and_unknown_control_codes_are_refused() {
        for op in [1u32, 3, 5] {
            assert_eq!(Msg::decode(op << 29 | 7), Err(MsgError::ReservedOp(op as u8)));
        }
        assert_eq!(Msg::decode(0xe000_0003), Err(MsgError::UnknownCtrl(3)));
    }

    #[test]
    fn entries_are_written_in_the_reader_s_byte_order() {
        let e = RsSge { addr: 0x0102_0304_0506_0708, key: 0x0a0b_0c0d, length: 0x10 };
        let le = e.to_bytes(Order::Little);
        assert_eq!(le[0], 0x08);
        assert_eq!(&le[8..12], &[0x0d, 0x0c, 0x0b, 0x0a]);
        let be = e.to_bytes(Order::Big);
        assert_eq!(be[0], 0x01);
        assert_eq!(RsSge::from_bytes(&le, Order::Little), e);
        assert_eq!(RsSge::from_bytes(&be, Order::Big), e);
        assert_ne!(RsSge::from_bytes(&be, Order::Little), e);
        let m = IomapEntry { offset: 4096, sge: e };
        assert_eq!(IomapEntry::from_bytes(&m.to_bytes(Order::Big), Order::Big), m);
        assert_eq!(&m.to_bytes(Order::Little)[..8], &4096u64.to_le_bytes());
        assert_eq!(Order::of_flags(FLAG_NET | FLAG_IOMAP), Order::Big);
        assert_eq!(Order::of_flags(FLAG_IOMAP), Order::Little);
    }

    #[test]
    fn an_iomap_entry_covers_its_range_only() {
        let m = IomapEntry { offset: 100, sge: RsSge { addr: 0, key: 0, length: 10 } };
        assert!(!m.covers(99) && m.covers(100) && m.covers(109) && !m.covers(110));
        assert!(!IomapEntry::default().covers(0), "an empty entry maps nothing");
        let top = IomapEntry { offset: u64::MAX - 1, sge: RsSge { addr: 0, key: 0, length: 10 } };
        assert!(top.covers(u64::MAX), "no overflow at the top of the range");
    }

    #[test]
    fn iomap_sizes_scale_to_8_bits_as_rsockets_rounds_them() {
        assert_eq!((value_to_scale(0), value_to_scale(1), value_to_scale(128)), (0, 1, 128));
        assert_eq!(value_to_scale(256), 0x81);
        assert_eq!(scale_to_value(0x81), 256);
        assert_eq!(round_iomap_size(1), 1);
        assert_eq!(round_iomap_size(300), 256);
        assert_eq!(round_iomap_size(129), 128, "129..255 scale to 0x80, which reads back as 128");
        assert_eq!(round_iomap_size(40000), 0x1c << 8, "bits above the scale's are cut, as rsockets' u8 cast does");
    }
}
