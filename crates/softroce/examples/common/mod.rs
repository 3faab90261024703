// Shared by the examples: a device on a loopback address, so two ends can
// run in one process (or two) with no configuration.

use std::net::{IpAddr, Ipv4Addr};

use softroce::config::DeviceInfo;

/// A device bound to 127.0.0.`last`.
pub fn loopback_device(last: u8) -> DeviceInfo {
    let addr = IpAddr::V4(Ipv4Addr::new(127, 0, 0, last));
    DeviceInfo {
        name: format!("softroce_lo{last}"),
        addr,
        interface: Some("lo".into()),
        gids: vec!["fe80::1".parse().unwrap(), addr],
        bindable: vec![false, true],
        active_mtu: softroce::Mtu::Mtu4096,
    }
}
