//! REQ, the connection request (IBTA vol. 1 ch. 12, Table 106, attribute
//! 0x0010): sent by the active side, it carries everything the passive side
//! needs to build its QP (QPN, starting PSN, path, MTU, retry counts) and 92
//! bytes of private data, which rdma_cm starts with its
//! [`cma_hdr`](super::cma_hdr). Offsets are into the CM data (MAD offset =
//! data offset + 24); bit fields are MSB-first.
//!
//! ```text
//!         0               1               2               3
//!         0 1 2 3 4 5 6 7 0 1 2 3 4 5 6 7 0 1 2 3 4 5 6 7 0 1 2 3 4 5 6 7
//!        +---------------------------------------------------------------+
//!      0 |                     Local Communication ID                    |
//!        +---------------+-----------------------------------------------+
//!      4 |    reserved   |                Vendor ID (ECE)                |
//!        +---------------+-----------------------------------------------+
//!      8 |                           Service ID                          |
//!        +                                                               +
//!     12 |                                                               |
//!        +---------------------------------------------------------------+
//!     16 |                         Local CA GUID                         |
//!        +                                                               +
//!     20 |                                                               |
//!        +---------------------------------------------------------------+
//!     24 |                            reserved                           |
//!        +---------------------------------------------------------------+
//!     28 |                          Local Q_Key                          |
//!        +-----------------------------------------------+---------------+
//!     32 |                   Local QPN                   |    RespRes    |
//!        +-----------------------------------------------+---------------+
//!     36 |                   Local EECN                  |   InitDepth   |
//!        +-----------------------------------------------+---------+---+-+
//!     40 |                  Remote EECN                  | RmtCMTO |TST|E|
//!        +-----------------------------------------------+---------+---+-+
//!     44 |                  Starting PSN                 | LclCMTO |Retry|
//!        +-------------------------------+-------+-+-----+-------+-+-----+
//!     48 |         Partition Key         |  MTU  |D| RNR | MaxCMR|S|  XT |
//!        +-------------------------------+-------+-+-----+-------+-+-----+
//!     52 |     Primary Local Port LID    |    Primary Remote Port LID    |
//!        +-------------------------------+-------------------------------+
//!     56 |                     Primary Local Port GID                    |
//!        +                                                               +
//!     60 |                                                               |
//!        +                                                               +
//!     64 |                                                               |
//!        +                                                               +
//!     68 |                                                               |
//!        +---------------------------------------------------------------+
//!     72 |                    Primary Remote Port GID                    |
//!        +                                                               +
//!     76 |                                                               |
//!        +                                                               +
//!     80 |                                                               |
//!        +                                                               +
//!     84 |                                                               |
//!        +---------------------------------------+-----------+-----------+
//!     88 |           Primary Flow Label          |  reserved |  PktRate  |
//!        +---------------+---------------+-------+-+-----+---+-----+-----+
//!     92 | Traffic Class |   Hop Limit   |   SL  |L| res |  AckTO  | res |
//!        +---------------+---------------+-------+-+-----+---------+-----+
//!     96 |         Alternate path: bytes 96..140 as bytes 52..96         |
//!        +                                                               +
//!        |                                                               |
//!        +---------------+---------------+-------+-+-----+---------+-+---+
//!    136 | Traffic Class |   Hop Limit   |   SL  |L| res |  AckTO  |P| rs|
//!        +---------------+---------------+-------+-+-----+---------+-+---+
//!    140 |                    Private Data (92 bytes)                    |
//!        +                                                               +
//!        |                                                               |
//!        +                                                               +
//!    228 |                                                               |
//!        +---------------------------------------------------------------+
//! RespRes / InitDepth = responder resources / initiator depth,
//! RmtCMTO / LclCMTO = remote / local CM response timeout (4.096 us * 2^t),
//! TST = transport service type, E = end-to-end flow control,
//! MTU = path packet payload MTU, D = RDC exists, RNR = RNR retry count,
//! MaxCMR = max CM retries, S = SRQ, XT = extended transport type,
//! L = subnet local, AckTO = local ACK timeout, P = SAP supported.
//! ```
//!
//! No field is refused: Linux accepts every value at this layer and rejects
//! a bad combination later (an RD or unknown transport becomes a QP type
//! rdma_cm refuses with REJ 28; a reserved MTU fails the QP transition).
//! Reserved bits are ignored on parse and written as zero.

use std::net::Ipv6Addr;

use roce_wire::Psn;

use super::field::{
    array_at, bits, gid_at, put, set_bytes, set_gid, set_u16, set_u24, set_u32, set_u64, top, u16_at, u24_at, u32_at,
    u64_at,
};
use super::mad::CM_DATA_LEN;

/// Bytes of private data a REQ carries.
pub const PRIVATE_DATA_LEN: usize = 92;
/// Offset of the private data in the CM data.
pub const PRIVATE_DATA_OFFSET: usize = 140;
const PRIMARY_PATH: usize = 52;
const ALTERNATE_PATH: usize = 96;

/// Transport Service Type (2 bits). The extended transport type refines 3.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum TransportType {
    /// 0: Reliable Connected (every rdma_cm connection over rxe).
    #[default]
    Rc,
    /// 1: Unreliable Connected.
    Uc,
    /// 2: Reliable Datagram (Linux has no RD QPs and refuses it later).
    Rd,
    /// 3: look at the extended transport type (1 = XRC).
    Extended,
}

impl TransportType {
    /// Decodes the 2-bit field (upper bits are ignored).
    pub const fn from_bits(b: u8) -> TransportType {
        match b & 3 {
            0 => TransportType::Rc,
            1 => TransportType::Uc,
            2 => TransportType::Rd,
            _ => TransportType::Extended,
        }
    }

    /// The 2-bit field.
    pub const fn bits(self) -> u8 {
        match self {
            TransportType::Rc => 0,
            TransportType::Uc => 1,
            TransportType::Rd => 2,
            TransportType::Extended => 3,
        }
    }
}

/// A path MTU in the IBTA's 4-bit encoding (REQ "Path Packet Payload MTU").
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PathMtu {
    /// 1: 256 bytes.
    Mtu256,
    /// 2: 512 bytes.
    Mtu512,
    /// 3: 1024 bytes (rdma_cm's choice for a 1500-byte Ethernet MTU).
    Mtu1024,
    /// 4: 2048 bytes.
    Mtu2048,
    /// 5: 4096 bytes.
    Mtu4096,
    /// 0 or 6..=15: reserved; kept so the message re-emits as received.
    Reserved(u8),
}

impl PathMtu {
    /// Decodes the 4-bit code (upper bits are ignored).
    pub const fn from_code(c: u8) -> PathMtu {
        match c & 0xf {
            1 => PathMtu::Mtu256,
            2 => PathMtu::Mtu512,
            3 => PathMtu::Mtu1024,
            4 => PathMtu::Mtu2048,
            5 => PathMtu::Mtu4096,
            c => PathMtu::Reserved(c),
        }
    }

    /// The 4-bit code.
    pub const fn code(self) -> u8 {
        match self {
            PathMtu::Mtu256 => 1,
            PathMtu::Mtu512 => 2,
            PathMtu::Mtu1024 => 3,
            PathMtu::Mtu2048 => 4,
            PathMtu::Mtu4096 => 5,
            PathMtu::Reserved(c) => c & 0xf,
        }
    }

    /// Payload bytes per packet, `None` for a reserved code.
    pub const fn bytes(self) -> Option<usize> {
        match self {
            PathMtu::Mtu256 => Some(256),
            PathMtu::Mtu512 => Some(512),
            PathMtu::Mtu1024 => Some(1024),
            PathMtu::Mtu2048 => Some(2048),
            PathMtu::Mtu4096 => Some(4096),
            PathMtu::Reserved(_) => None,
        }
    }

    /// The MTU of `bytes` payload bytes, if it is one of the five IB MTUs.
    pub const fn from_bytes(bytes: usize) -> Option<PathMtu> {
        match bytes {
            256 => Some(PathMtu::Mtu256),
            512 => Some(PathMtu::Mtu512),
            1024 => Some(PathMtu::Mtu1024),
            2048 => Some(PathMtu::Mtu2048),
            4096 => Some(PathMtu::Mtu4096),
            _ => None,
        }
    }
}

/// One path of a REQ (primary at data offset 52, alternate at 96; 44 bytes
/// each). On RoCE the LIDs are 0xffff (permissive) and the GIDs are the
/// IPv4-mapped or IPv6 addresses of the two ports.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ReqPath {
    /// Local port LID.
    pub local_lid: u16,
    /// Remote port LID.
    pub remote_lid: u16,
    /// Local port GID.
    pub local_gid: Ipv6Addr,
    /// Remote port GID.
    pub remote_gid: Ipv6Addr,
    /// Flow label (20 bits); rdma_cm derives the RoCEv2 UDP source port from it.
    pub flow_label: u32,
    /// Packet rate (6 bits, IBTA rate encoding; 0 = port current rate).
    pub packet_rate: u8,
    /// Traffic class.
    pub traffic_class: u8,
    /// Hop limit.
    pub hop_limit: u8,
    /// Service level (4 bits).
    pub sl: u8,
    /// Subnet local.
    pub subnet_local: bool,
    /// Local ACK timeout (5 bits): the QP timeout the passive side uses.
    pub local_ack_timeout: u8,
}

impl Default for ReqPath {
    /// The all-zero path (an absent alternate path).
    fn default() -> ReqPath {
        ReqPath {
            local_lid: 0,
            remote_lid: 0,
            local_gid: Ipv6Addr::UNSPECIFIED,
            remote_gid: Ipv6Addr::UNSPECIFIED,
            flow_label: 0,
            packet_rate: 0,
            traffic_class: 0,
            hop_limit: 0,
            sl: 0,
            subnet_local: false,
            local_ack_timeout: 0,
        }
    }
}

impl ReqPath {
    fn read(d: &[u8], at: usize) -> ReqPath {
        ReqPath {
            local_lid: u16_at(d, at),
            remote_lid: u16_at(d, at + 2),
            local_gid: gid_at(d, at + 4),
            remote_gid: gid_at(d, at + 20),
            flow_label: u32_at(d, at + 36) >> 12,
            packet_rate: bits(d[at + 39], 2, 6),
            traffic_class: d[at + 40],
            hop_limit: d[at + 41],
            sl: top(d[at + 42], 4),
            subnet_local: bits(d[at + 42], 4, 1) != 0,
            local_ack_timeout: top(d[at + 43], 5),
        }
    }

    /// Writes the path; byte 43 gets only the ACK timeout (the caller adds
    /// SAP Supported in the alternate path).
    fn write(&self, d: &mut [u8], at: usize) {
        set_u16(d, at, self.local_lid);
        set_u16(d, at + 2, self.remote_lid);
        set_gid(d, at + 4, self.local_gid);
        set_gid(d, at + 20, self.remote_gid);
        set_u32(d, at + 36, ((self.flow_label & 0xf_ffff) << 12) | u32::from(self.packet_rate & 0x3f));
        d[at + 40] = self.traffic_class;
        d[at + 41] = self.hop_limit;
        d[at + 42] = put(self.sl, 0, 4) | put(u8::from(self.subnet_local), 4, 1);
        d[at + 43] = put(self.local_ack_timeout, 0, 5);
    }
}

/// The meaning of a REQ.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ReqRepr {
    /// The sender's local communication ID.
    pub local_comm_id: u32,
    /// Vendor ID (24 bits; ECE, 0 from rxe).
    pub vendor_id: u32,
    /// Service ID: the listener's (see [`IpServiceId`](super::IpServiceId)).
    pub service_id: u64,
    /// The sender's CA GUID (the EUI-64 of its MAC on RoCE).
    pub local_ca_guid: u64,
    /// Local Q_Key (0 for RC).
    pub local_qkey: u32,
    /// Local QPN (24 bits).
    pub local_qpn: u32,
    /// Responder resources: RDMA READ / atomic requests the sender accepts in flight.
    pub responder_resources: u8,
    /// Local EECN (24 bits; 0 without RD).
    pub local_eecn: u32,
    /// Initiator depth: RDMA READ / atomic requests the sender issues in flight.
    pub initiator_depth: u8,
    /// Remote EECN (24 bits).
    pub remote_eecn: u32,
    /// Remote CM response timeout (5 bits).
    pub remote_cm_response_timeout: u8,
    /// Transport service type.
    pub transport: TransportType,
    /// End-to-end flow control.
    pub end_to_end_flow_control: bool,
    /// The PSN the sender's QP starts receiving at (what the passive side sends with).
    pub starting_psn: Psn,
    /// Local CM response timeout (5 bits).
    pub local_cm_response_timeout: u8,
    /// Retry count (3 bits).
    pub retry_count: u8,
    /// Partition key.
    pub pkey: u16,
    /// Path packet payload MTU.
    pub path_mtu: PathMtu,
    /// RDC exists.
    pub rdc_exists: bool,
    /// RNR retry count (3 bits; 7 = infinite).
    pub rnr_retry_count: u8,
    /// Max CM retries (4 bits).
    pub max_cm_retries: u8,
    /// The sender's QP uses an SRQ.
    pub srq: bool,
    /// Extended transport type (3 bits; 1 = XRC when the transport is `Extended`).
    pub extended_transport_type: u8,
    /// The primary path.
    pub primary_path: ReqPath,
    /// The alternate path (all zero when there is none, see [`Self::has_alternate_path`]).
    pub alternate_path: ReqPath,
    /// SAP supported (in the alternate path's last byte).
    pub sap_supported: bool,
    /// Private data (rdma_cm: a 36-byte cma_hdr, then the user's 56 bytes).
    pub private_data: [u8; PRIVATE_DATA_LEN],
}

impl Default for ReqRepr {
    /// The REQ of 232 zero bytes.
    fn default() -> ReqRepr {
        ReqRepr {
            local_comm_id: 0,
            vendor_id: 0,
            service_id: 0,
            local_ca_guid: 0,
            local_qkey: 0,
            local_qpn: 0,
            responder_resources: 0,
            local_eecn: 0,
            initiator_depth: 0,
            remote_eecn: 0,
            remote_cm_response_timeout: 0,
            transport: TransportType::Rc,
            end_to_end_flow_control: false,
            starting_psn: Psn::ZERO,
            local_cm_response_timeout: 0,
            retry_count: 0,
            pkey: 0,
            path_mtu: PathMtu::Reserved(0),
            rdc_exists: false,
            rnr_retry_count: 0,
            max_cm_retries: 0,
            srq: false,
            extended_transport_type: 0,
            primary_path: ReqPath::default(),
            alternate_path: ReqPath::default(),
            sap_supported: false,
            private_data: [0; PRIVATE_DATA_LEN],
        }
    }
}

impl ReqRepr {
    /// Reads a REQ from the CM data of a MAD.
    pub fn parse(d: &[u8; CM_DATA_LEN]) -> ReqRepr {
        ReqRepr {
            local_comm_id: u32_at(d, 0),
            vendor_id: u24_at(d, 5),
            service_id: u64_at(d, 8),
            local_ca_guid: u64_at(d, 16),
            local_qkey: u32_at(d, 28),
            local_qpn: u24_at(d, 32),
            responder_resources: d[35],
            local_eecn: u24_at(d, 36),
            initiator_depth: d[39],
            remote_eecn: u24_at(d, 40),
            remote_cm_response_timeout: top(d[43], 5),
            transport: TransportType::from_bits(bits(d[43], 5, 2)),
            end_to_end_flow_control: bits(d[43], 7, 1) != 0,
            starting_psn: Psn::new(u24_at(d, 44)),
            local_cm_response_timeout: top(d[47], 5),
            retry_count: bits(d[47], 5, 3),
            pkey: u16_at(d, 48),
            path_mtu: PathMtu::from_code(top(d[50], 4)),
            rdc_exists: bits(d[50], 4, 1) != 0,
            rnr_retry_count: bits(d[50], 5, 3),
            max_cm_retries: top(d[51], 4),
            srq: bits(d[51], 4, 1) != 0,
            extended_transport_type: bits(d[51], 5, 3),
            primary_path: ReqPath::read(d, PRIMARY_PATH),
            alternate_path: ReqPath::read(d, ALTERNATE_PATH),
            sap_supported: bits(d[ALTERNATE_PATH + 43], 5, 1) != 0,
            private_data: array_at(d, PRIVATE_DATA_OFFSET),
        }
    }

    /// Writes all 232 bytes of CM data; each value is masked to its field.
    pub fn emit(&self, d: &mut [u8; CM_DATA_LEN]) {
        d.fill(0);
        set_u32(d, 0, self.local_comm_id);
        set_u24(d, 5, self.vendor_id);
        set_u64(d, 8, self.service_id);
        set_u64(d, 16, self.local_ca_guid);
        set_u32(d, 28, self.local_qkey);
        set_u24(d, 32, self.local_qpn);
        d[35] = self.responder_resources;
        set_u24(d, 36, self.local_eecn);
        d[39] = self.initiator_depth;
        set_u24(d, 40, self.remote_eecn);
        d[43] = put(self.remote_cm_response_timeout, 0, 5)
            | put(self.transport.bits(), 5, 2)
            | put(u8::from(self.end_to_end_flow_control), 7, 1);
        set_u24(d, 44, self.starting_psn.value());
        d[47] = put(self.local_cm_response_timeout, 0, 5) | put(self.retry_count, 5, 3);
        set_u16(d, 48, self.pkey);
        d[50] =
            put(self.path_mtu.code(), 0, 4) | put(u8::from(self.rdc_exists), 4, 1) | put(self.rnr_retry_count, 5, 3);
        d[51] =
            put(self.max_cm_retries, 0, 4) | put(u8::from(self.srq), 4, 1) | put(self.extended_transport_type, 5, 3);
        self.primary_path.write(d, PRIMARY_PATH);
        self.alternate_path.write(d, ALTERNATE_PATH);
        d[ALTERNATE_PATH + 43] |= put(u8::from(self.sap_supported), 5, 1);
        set_bytes(d, PRIVATE_DATA_OFFSET, &self.private_data);
    }

    /// Whether the REQ offers an alternate path: as Linux decides it, a
    /// non-zero alternate local port LID.
    pub fn has_alternate_path(&self) -> bool {
        self.alternate_path.local_lid != 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> ReqRepr {
        let mut private_data = [0u8; PRIVATE_DATA_LEN];
        for (i, b) in private_data.iter_mut().enumerate() {
            *b = i as u8 ^ 0x5a;
        }
        ReqRepr {
            local_comm_id: 0x0102_0304,
            vendor_id: 0x05_0607,
            service_id: 0x0809_0a0b_0c0d_0e0f,
            local_ca_guid: 0x1011_1213_1415_1617,
            local_qkey: 0x1819_1a1b,
            local_qpn: 0x1c_1d1e,
            responder_resources: 0x1f,
            local_eecn: 0x20_2122,
            initiator_depth: 0x23,
            remote_eecn: 0x24_2526,
            remote_cm_response_timeout: 0x15,
            transport: TransportType::Uc,
            end_to_end_flow_control: true,
            starting_psn: Psn::new(0x27_2829),
            local_cm_response_timeout: 0x0b,
            retry_count: 5,
            pkey: 0x2a2b,
            path_mtu: PathMtu::Mtu4096,
            rdc_exists: true,
            rnr_retry_count: 6,
            max_cm_retries: 9,
            srq: true,
            extended_transport_type: 1,
            primary_path: ReqPath {
                local_lid: 0x3031,
                remote_lid: 0x3233,
                local_gid: "fe80::1:2:3:4".parse().unwrap(),
                remote_gid: "::ffff:10.1.2.3".parse().unwrap(),
                flow_label: 0xa_bcde,
                packet_rate: 0x2d,
                traffic_class: 0x34,
                hop_limit: 0x35,
                sl: 0xc,
                subnet_local: true,
                local_ack_timeout: 0x13,
            },
            alternate_path: ReqPath {
                local_lid: 0x4041,
                remote_lid: 0x4243,
                local_gid: "2001:db8::7".parse().unwrap(),
                remote_gid: "2001:db8::8".parse().unwrap(),
                flow_label: 0x1_2345,
                packet_rate: 0x07,
                traffic_class: 0x44,
                hop_limit: 0x45,
                sl: 0x3,
                subnet_local: false,
                local_ack_timeout: 0x1f,
            },
            sap_supported: true,
            private_data,
        }
    }

    #[test]
    fn every_field_has_its_offset_and_bits() {
        let r = sample();
        let mut d = [0xa5u8; CM_DATA_LEN];
        r.emit(&mut d);
        assert_eq!(d[0..4], [1, 2, 3, 4]);
        assert_eq!(d[4..8], [0, 5, 6, 7]);
        assert_eq!(d[8..16], [8, 9, 0xa, 0xb, 0xc, 0xd, 0xe, 0xf]);
        assert_eq!(d[16..24], [0x10, 0x11, 0x12, 0x13, 0x14, 0x15, 0x16, 0x17]);
        assert_eq!(d[24..28], [0; 4]);
        assert_eq!(
            d[28..52],
            [
                0x18, 0x19, 0x1a, 0x1b, 0x1c, 0x1d, 0x1e, 0x1f, 0x20, 0x21, 0x22, 0x23, 0x24, 0x25, 0x26,
                0xab, // 10101 01 1: timeout 0x15, UC, flow control
                0x27, 0x28, 0x29, 0x5d, // 01011 101: timeout 0x0b, retry 5
                0x2a, 0x2b, 0x5e, // 0101 1 110: MTU 4096, RDC, RNR 6
                0x99, // 1001 1 001: 9 retries, SRQ, XRC
            ]
        );
        assert_eq!(d[52..56], [0x30, 0x31, 0x32, 0x33]);
        assert_eq!(d[56..72], "fe80::1:2:3:4".parse::<Ipv6Addr>().unwrap().octets());
        assert_eq!(d[72..88], [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 10, 1, 2, 3]);
        // flow label 0xabcde, 6 reserved bits, rate 0x2d
        assert_eq!(d[88..92], [0xab, 0xcd, 0xe0, 0x2d]);
        // SL 0xc, subnet local: 1100 1 000; ACK timeout 0x13: 10011 000
        assert_eq!(d[92..96], [0x34, 0x35, 0xc8, 0x98]);
        assert_eq!(d[96..100], [0x40, 0x41, 0x42, 0x43]);
        assert_eq!(d[132..136], [0x12, 0x34, 0x50, 0x07]);
        // SL 3, not subnet local; timeout 0x1f, SAP supported: 11111 1 00
        assert_eq!(d[136..140], [0x44, 0x45, 0x30, 0xfc]);
        assert_eq!(d[140..], r.private_data);
        assert_eq!(ReqRepr::parse(&d), r);
        assert!(r.has_alternate_path());
    }

    #[test]
    fn reserved_bits_are_ignored_and_emitted_as_zero() {
        let r = sample();
        let mut d = [0u8; CM_DATA_LEN];
        r.emit(&mut d);
        let mut noisy = d;
        noisy[4] = 0xff;
        noisy[24..28].fill(0xff);
        noisy[90] |= 0x0f;
        noisy[91] |= 0xc0;
        noisy[94] |= 0x07;
        noisy[95] |= 0x07;
        noisy[134] |= 0x0f;
        noisy[135] |= 0xc0;
        noisy[138] |= 0x07;
        noisy[139] |= 0x03;
        assert_eq!(ReqRepr::parse(&noisy), r);
        let mut again = [0xffu8; CM_DATA_LEN];
        ReqRepr::parse(&noisy).emit(&mut again);
        assert_eq!(again, d);
    }

    #[test]
    fn out_of_range_values_are_masked_to_their_fields() {
        let mut r = sample();
        r.local_qpn = 0xff12_3456;
        r.retry_count = 0xf;
        r.primary_path.flow_label = 0xfff_ffff;
        let mut d = [0u8; CM_DATA_LEN];
        r.emit(&mut d);
        let back = ReqRepr::parse(&d);
        assert_eq!((back.local_qpn, back.retry_count, back.primary_path.flow_label), (0x12_3456, 7, 0xf_ffff));
        assert_eq!(back.local_cm_response_timeout, r.local_cm_response_timeout);
    }

    #[test]
    fn zero_bytes_are_the_default() {
        assert_eq!(ReqRepr::parse(&[0; CM_DATA_LEN]), ReqRepr::default());
        assert!(!ReqRepr::default().has_alternate_path());
    }

    #[test]
    fn enums_cover_their_fields() {
        for b in 0..4 {
            assert_eq!(TransportType::from_bits(b).bits(), b);
        }
        for c in 0..16 {
            let m = PathMtu::from_code(c);
            assert_eq!(m.code(), c);
            assert_eq!(m.bytes().is_some(), (1..=5).contains(&c), "{m:?}");
            if let Some(n) = m.bytes() {
                assert_eq!(PathMtu::from_bytes(n), Some(m));
                assert_eq!(n, 128 << c);
            }
        }
        assert_eq!(PathMtu::from_bytes(1500), None);
    }
}
