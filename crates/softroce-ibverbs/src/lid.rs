//! LID-only addressing over RoCE, for programs that never use a GRH
//! (qperf without `-cm1` exchanges only LIDs).
//!
//! rxe reports LID 0 and refuses address vectors without a GRH. softroce
//! instead gives an IPv4 device the low 16 bits of its address as LID, and
//! reads an address vector without a GRH as "the host with this LID in my
//! /16": a destination LID `d` from a device on `a.b.c.d'` means
//! `a.b.(d >> 8).(d & 0xff)`. That covers loopback (127.0.0.x) and hosts on
//! one /16; other peers need the GRH, as with rxe.

use std::net::{IpAddr, Ipv4Addr};

/// The LID of a device on `addr` (0 for IPv6 devices, as rxe reports).
pub(crate) fn lid_of(addr: IpAddr) -> u16 {
    match addr {
        IpAddr::V4(v4) => {
            let o = v4.octets();
            u16::from_be_bytes([o[2], o[3]])
        }
        IpAddr::V6(_) => 0,
    }
}

/// The peer a destination LID names, seen from a device on `local`.
pub(crate) fn peer_of(local: IpAddr, dlid: u16) -> Option<IpAddr> {
    match local {
        IpAddr::V4(v4) if dlid != 0 => {
            let o = v4.octets();
            let [hi, lo] = dlid.to_be_bytes();
            Some(IpAddr::V4(Ipv4Addr::new(o[0], o[1], hi, lo)))
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lid_names_the_host_with_those_low_bits_in_the_same_slash_16() {
        let me: IpAddr = "10.7.1.2".parse().unwrap();
        assert_eq!(lid_of(me), 0x0102);
        assert_eq!(peer_of(me, 0x0305), Some("10.7.3.5".parse().unwrap()));
        let lo: IpAddr = "127.0.0.3".parse().unwrap();
        assert_eq!(peer_of(lo, lid_of("127.0.0.2".parse().unwrap())), Some("127.0.0.2".parse().unwrap()));
        assert_eq!(peer_of(me, 0), None);
        assert_eq!(lid_of("::1".parse().unwrap()), 0);
        assert_eq!(peer_of("::1".parse().unwrap(), 5), None);
    }
}
