//! What rdma_cm adds to the CM for IP-addressed ids: the 36-byte header at
//! the start of REQ and SIDR_REQ private data (Linux `struct cma_hdr`), and
//! the service IDs built from an IP port.
//!
//! ```text
//!         0               1               2               3
//!         0 1 2 3 4 5 6 7 0 1 2 3 4 5 6 7 0 1 2 3 4 5 6 7 0 1 2 3 4 5 6 7
//!        +---------------+-------+-------+-------------------------------+
//!      0 |  cma_version  |  IPv  |  res  |              Port             |
//!        +---------------+-------+-------+-------------------------------+
//!      4 |              Source address (IPv4: bytes 16..20)              |
//!        +                                                               +
//!      8 |                                                               |
//!        +                                                               +
//!     12 |                                                               |
//!        +                                                               +
//!     16 |                                                               |
//!        +---------------------------------------------------------------+
//!     20 |            Destination address (IPv4: bytes 32..36)           |
//!        +                                                               +
//!     24 |                                                               |
//!        +                                                               +
//!     28 |                                                               |
//!        +                                                               +
//!     32 |                                                               |
//!        +---------------------------------------------------------------+
//! cma_version = 0, IPv = 4 or 6, Port = the active side's rdma_cm source
//! port. An IPv4 address sits in the last 4 of its 16 bytes, the rest zero.
//! ```
//!
//! The passive side rebuilds the new id's addresses from it: local = (dst,
//! the port of the service ID), peer = (src, Port). rdma_cm refuses a
//! request whose cma_version is not 0 or whose IP version is neither 4
//! nor 6, and so does [`CmaHdrRepr::parse`]. Like Linux it reads only the
//! last 4 bytes of an IPv4 address and ignores the low nibble of byte 1;
//! both are written as zero. AF_IB ids send no cma_hdr at all.
//!
//! The rdma_cm service ID of an IP port is `(port_space << 16) | port`
//! ([`IpServiceId`]): rping on TCP port 7174 listens on 0x0000000001061c06.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

use super::CmWireError;
use super::field::{array_at, set_gid, set_u16, u16_at};

/// Length of the rdma_cm header.
pub const CMA_HDR_LEN: usize = 36;
/// The only cma_version there is.
pub const CMA_VERSION: u8 = 0;

/// The two addresses of a cma_hdr, which share one IP version.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CmaAddrs {
    /// IP version 4.
    V4 {
        /// The active side's address.
        src: Ipv4Addr,
        /// The passive side's address.
        dst: Ipv4Addr,
    },
    /// IP version 6.
    V6 {
        /// The active side's address.
        src: Ipv6Addr,
        /// The passive side's address.
        dst: Ipv6Addr,
    },
}

/// The meaning of an rdma_cm private-data header.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct CmaHdrRepr {
    /// The active side's rdma_cm source port.
    pub port: u16,
    /// Source and destination addresses.
    pub addrs: CmaAddrs,
}

impl CmaHdrRepr {
    /// The header of a request from `src`:`port` to `dst`. Two IPv4
    /// addresses give an IPv4 header; otherwise IPv4 addresses are mapped
    /// (`::ffff:a.b.c.d`) into an IPv6 header.
    pub fn new(port: u16, src: IpAddr, dst: IpAddr) -> CmaHdrRepr {
        let addrs = match (src, dst) {
            (IpAddr::V4(src), IpAddr::V4(dst)) => CmaAddrs::V4 { src, dst },
            (src, dst) => CmaAddrs::V6 { src: to_v6(src), dst: to_v6(dst) },
        };
        CmaHdrRepr { port, addrs }
    }

    /// The IP version nibble: 4 or 6.
    pub const fn ip_version(&self) -> u8 {
        match self.addrs {
            CmaAddrs::V4 { .. } => 4,
            CmaAddrs::V6 { .. } => 6,
        }
    }

    /// The active side's address.
    pub const fn src_addr(&self) -> IpAddr {
        match self.addrs {
            CmaAddrs::V4 { src, .. } => IpAddr::V4(src),
            CmaAddrs::V6 { src, .. } => IpAddr::V6(src),
        }
    }

    /// The passive side's address.
    pub const fn dst_addr(&self) -> IpAddr {
        match self.addrs {
            CmaAddrs::V4 { dst, .. } => IpAddr::V4(dst),
            CmaAddrs::V6 { dst, .. } => IpAddr::V6(dst),
        }
    }

    /// The active side's rdma_cm address: source address and port.
    pub const fn src_socket_addr(&self) -> SocketAddr {
        SocketAddr::new(self.src_addr(), self.port)
    }

    /// Reads the header at the start of `private_data` (a REQ's or
    /// SIDR_REQ's); refuses a cma_version other than 0 and an IP version
    /// other than 4 or 6.
    pub fn parse(private_data: &[u8]) -> Result<CmaHdrRepr, CmWireError> {
        let Some(h) = private_data.first_chunk::<CMA_HDR_LEN>() else {
            return Err(CmWireError::Truncated { what: "cma_hdr", need: CMA_HDR_LEN, have: private_data.len() });
        };
        if h[0] != CMA_VERSION {
            return Err(CmWireError::BadCmaVersion(h[0]));
        }
        let port = u16_at(h, 2);
        let addrs = match h[1] >> 4 {
            4 => CmaAddrs::V4 { src: Ipv4Addr::from(array_at::<4>(h, 16)), dst: Ipv4Addr::from(array_at::<4>(h, 32)) },
            6 => CmaAddrs::V6 { src: Ipv6Addr::from(array_at::<16>(h, 4)), dst: Ipv6Addr::from(array_at::<16>(h, 20)) },
            v => return Err(CmWireError::BadIpVersion(v)),
        };
        Ok(CmaHdrRepr { port, addrs })
    }

    /// Writes the 36 header bytes.
    pub fn emit(&self, h: &mut [u8; CMA_HDR_LEN]) {
        h.fill(0);
        h[0] = CMA_VERSION;
        h[1] = self.ip_version() << 4;
        set_u16(h, 2, self.port);
        match self.addrs {
            CmaAddrs::V4 { src, dst } => {
                h[16..20].copy_from_slice(&src.octets());
                h[32..36].copy_from_slice(&dst.octets());
            }
            CmaAddrs::V6 { src, dst } => {
                set_gid(h, 4, src);
                set_gid(h, 20, dst);
            }
        }
    }

    /// A private-data field of `N` bytes: this header, then `user` (the
    /// application's private data), then zeros. `N` is the message's
    /// capacity: [`req::PRIVATE_DATA_LEN`](super::req::PRIVATE_DATA_LEN) (56
    /// bytes left for the user) or
    /// [`sidr_req::PRIVATE_DATA_LEN`](super::sidr_req::PRIVATE_DATA_LEN) (180).
    pub fn private_data<const N: usize>(&self, user: &[u8]) -> Result<[u8; N], CmWireError> {
        let capacity = N.saturating_sub(CMA_HDR_LEN);
        if N < CMA_HDR_LEN || user.len() > capacity {
            return Err(CmWireError::PrivateDataTooLong { len: user.len(), capacity });
        }
        let mut pd = [0u8; N];
        let mut h = [0u8; CMA_HDR_LEN];
        self.emit(&mut h);
        pd[..CMA_HDR_LEN].copy_from_slice(&h);
        pd[CMA_HDR_LEN..CMA_HDR_LEN + user.len()].copy_from_slice(user);
        Ok(pd)
    }
}

/// The application's part of private data that starts with a cma_hdr:
/// everything after the header (empty if `private_data` is shorter). Like
/// the kernel, this is the whole remainder, not the length the sender gave.
pub fn user_private_data(private_data: &[u8]) -> &[u8] {
    private_data.get(CMA_HDR_LEN..).unwrap_or(&[])
}

fn to_v6(a: IpAddr) -> Ipv6Addr {
    match a {
        IpAddr::V4(a) => a.to_ipv6_mapped(),
        IpAddr::V6(a) => a,
    }
}

/// An rdma_cm port space: the top half of the low 32 bits of an IP service ID.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum PortSpace {
    /// `RDMA_PS_IPOIB` (0x0002): UD.
    Ipoib,
    /// `RDMA_PS_TCP` (0x0106): RC, what rping and perftest use.
    Tcp,
    /// `RDMA_PS_UDP` (0x0111): UD, resolved with SIDR.
    Udp,
    /// `RDMA_PS_IB` (0x013F): RC or UD.
    Ib,
}

impl PortSpace {
    /// The 16-bit port-space number.
    pub const fn value(self) -> u16 {
        match self {
            PortSpace::Ipoib => 0x0002,
            PortSpace::Tcp => 0x0106,
            PortSpace::Udp => 0x0111,
            PortSpace::Ib => 0x013f,
        }
    }

    /// The port space numbered `v`, if rdma_cm defines it.
    pub const fn from_value(v: u16) -> Option<PortSpace> {
        match v {
            0x0002 => Some(PortSpace::Ipoib),
            0x0106 => Some(PortSpace::Tcp),
            0x0111 => Some(PortSpace::Udp),
            0x013f => Some(PortSpace::Ib),
            _ => None,
        }
    }
}

/// An rdma_cm IP service ID, `(port_space << 16) | port`: what a listener
/// bound to `port` in `port_space` registers with the CM, and what a REQ
/// or SIDR_REQ to it carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct IpServiceId {
    /// The port space.
    pub port_space: PortSpace,
    /// The IP port.
    pub port: u16,
}

impl IpServiceId {
    /// The service ID of `port` in `port_space`.
    pub const fn new(port_space: PortSpace, port: u16) -> IpServiceId {
        IpServiceId { port_space, port }
    }

    /// The 64-bit service ID.
    pub const fn service_id(self) -> u64 {
        ((self.port_space.value() as u64) << 16) | self.port as u64
    }

    /// Decodes a service ID. Bits 63..32 must be zero (the CM matches
    /// listeners on the exact ID, and rdma_cm registers IP listeners with
    /// those bits clear) and bits 31..16 a known port space; otherwise
    /// [`CmWireError::NotIpServiceId`].
    pub const fn from_service_id(sid: u64) -> Result<IpServiceId, CmWireError> {
        if sid >> 32 != 0 {
            return Err(CmWireError::NotIpServiceId(sid));
        }
        match PortSpace::from_value((sid >> 16) as u16) {
            Some(port_space) => Ok(IpServiceId { port_space, port: sid as u16 }),
            None => Err(CmWireError::NotIpServiceId(sid)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // The cma_hdr of the rping REQ (golden capture rping_c3, frame 1).
    const RPING: [u8; CMA_HDR_LEN] = [
        0x00, 0x40, 0xdd, 0x24, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 10, 77, 0, 3, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
        10, 77, 0, 2,
    ];

    #[test]
    fn ipv4_header() {
        let h = CmaHdrRepr::parse(&RPING).unwrap();
        assert_eq!(h, CmaHdrRepr::new(56612, "10.77.0.3".parse().unwrap(), "10.77.0.2".parse().unwrap()));
        assert_eq!(h.ip_version(), 4);
        assert_eq!(h.src_socket_addr(), "10.77.0.3:56612".parse().unwrap());
        assert_eq!(h.dst_addr(), "10.77.0.2".parse::<IpAddr>().unwrap());
        let mut out = [0xa5u8; CMA_HDR_LEN];
        h.emit(&mut out);
        assert_eq!(out, RPING);
        // Like Linux: the first 12 bytes of an IPv4 address and the low nibble are ignored.
        let mut noisy = RPING;
        noisy[1] |= 0x0f;
        noisy[4] = 0xff;
        noisy[31] = 0x01;
        assert_eq!(CmaHdrRepr::parse(&noisy), Ok(h));
    }

    #[test]
    fn ipv6_header_and_mixed_families() {
        let src: Ipv6Addr = "fd00::1".parse().unwrap();
        let dst: Ipv6Addr = "fd00::2:3".parse().unwrap();
        let h = CmaHdrRepr::new(0x1234, src.into(), dst.into());
        let mut out = [0u8; CMA_HDR_LEN];
        h.emit(&mut out);
        assert_eq!(out[..4], [0, 0x60, 0x12, 0x34]);
        assert_eq!(out[4..20], src.octets());
        assert_eq!(out[20..], dst.octets());
        assert_eq!(CmaHdrRepr::parse(&out), Ok(h));

        let mixed = CmaHdrRepr::new(1, "10.0.0.1".parse().unwrap(), dst.into());
        assert_eq!(mixed.addrs, CmaAddrs::V6 { src: "::ffff:10.0.0.1".parse().unwrap(), dst });
    }

    #[test]
    fn refusals() {
        let mut v = RPING;
        v[0] = 1;
        assert_eq!(CmaHdrRepr::parse(&v), Err(CmWireError::BadCmaVersion(1)));
        let mut ip = RPING;
        ip[1] = 0x50;
        assert_eq!(CmaHdrRepr::parse(&ip), Err(CmWireError::BadIpVersion(5)));
        ip[1] = 0x04; // the version is the high nibble
        assert_eq!(CmaHdrRepr::parse(&ip), Err(CmWireError::BadIpVersion(0)));
        assert_eq!(
            CmaHdrRepr::parse(&RPING[..35]),
            Err(CmWireError::Truncated { what: "cma_hdr", need: 36, have: 35 })
        );
    }

    #[test]
    fn private_data_with_user_bytes() {
        let h = CmaHdrRepr::parse(&RPING).unwrap();
        let pd: [u8; 92] = h.private_data(&[7; 56]).unwrap();
        assert_eq!(pd[..CMA_HDR_LEN], RPING);
        assert_eq!(user_private_data(&pd), &[7; 56]);
        let short: [u8; 92] = h.private_data(b"hi").unwrap();
        assert_eq!(&user_private_data(&short)[..3], b"hi\0");
        assert_eq!(h.private_data::<92>(&[0; 57]), Err(CmWireError::PrivateDataTooLong { len: 57, capacity: 56 }));
        assert_eq!(h.private_data::<216>(&[0; 181]), Err(CmWireError::PrivateDataTooLong { len: 181, capacity: 180 }));
        assert_eq!(h.private_data::<8>(&[]), Err(CmWireError::PrivateDataTooLong { len: 0, capacity: 0 }));
        assert_eq!(user_private_data(&RPING[..10]), &[] as &[u8]);
    }

    #[test]
    fn service_ids() {
        let rping = IpServiceId::new(PortSpace::Tcp, 7174);
        assert_eq!(rping.service_id(), 0x0000_0000_0106_1c06);
        assert_eq!(IpServiceId::from_service_id(0x0000_0000_0106_4853), Ok(IpServiceId::new(PortSpace::Tcp, 18515)));
        assert_eq!(IpServiceId::new(PortSpace::Udp, 7174).service_id(), 0x0000_0000_0111_1c06);
        assert_eq!(IpServiceId::new(PortSpace::Ib, 1).service_id(), 0x0000_0000_013f_0001);
        assert_eq!(IpServiceId::new(PortSpace::Ipoib, 0xffff).service_id(), 0x0000_0000_0002_ffff);
        for ps in [PortSpace::Ipoib, PortSpace::Tcp, PortSpace::Udp, PortSpace::Ib] {
            assert_eq!(PortSpace::from_value(ps.value()), Some(ps));
            let id = IpServiceId::new(ps, 0xbeef);
            assert_eq!(IpServiceId::from_service_id(id.service_id()), Ok(id));
        }
        assert_eq!(IpServiceId::from_service_id(0x0107_1c06), Err(CmWireError::NotIpServiceId(0x0107_1c06)));
        assert_eq!(IpServiceId::from_service_id(0x1_0106_1c06), Err(CmWireError::NotIpServiceId(0x1_0106_1c06)));
    }
}
