// Shared by the examples: a device on a loopback address, so two ends can
// run in one process (or two) with no configuration.

use softroce::config::DeviceInfo;

/// A device bound to 127.0.0.`last`.
pub fn loopback_device(last: u8) -> DeviceInfo {
    DeviceInfo::loopback(last).expect("the host's interfaces can be listed")
}
