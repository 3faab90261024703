// Shared by the examples: a device on a loopback address, so two ends can
// run in one process (or two) with no configuration.

use std::net::{IpAddr, Ipv4Addr};

use softroce::config::DeviceInfo;

/// A device bound to 127.0.0.`last`.
pub fn loopback_device(last: u8) -> DeviceInfo {
    DeviceInfo::on_address(format!("softroce_lo{last}"), IpAddr::V4(Ipv4Addr::new(127, 0, 0, last)))
        .expect("the host's interfaces can be listed")
}
