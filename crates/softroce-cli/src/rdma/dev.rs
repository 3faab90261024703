//! `rdma dev [show [DEV]]`: devices as iproute2's `rdma/dev.c` prints
//! kernel rxe's (`node_type ca`, the GUIDs; no firmware version, which rxe
//! has none of; with `-d` adaptive moderation, off, and the capability
//! bits by iproute2's names).

use roce_proto::Limits;
use roce_proto::devattr::DeviceAttr;

use super::output::Out;
use super::{Dev, Opts, Outcome, emit, find, is, unknown};

const USAGE: &str = "Usage: rdma dev show [DEV]\n       rdma dev set [DEV] name DEVNAME\n       \
rdma dev set [DEV] netns NSNAME\n       rdma dev set [DEV] adaptive-moderation [on|off]\n";

/// iproute2's names of device capability bits 0..=31 (`dev_caps_to_str`).
const CAPS_LOW: [&str; 32] = [
    "RESIZE_MAX_WR",
    "BAD_PKEY_CNTR",
    "BAD_QKEY_CNTR",
    "RAW_MULTI",
    "AUTO_PATH_MIG",
    "CHANGE_PHY_PORT",
    "UD_AV_PORT_ENFORCE_PORT_ENFORCE",
    "CURR_QP_STATE_MOD",
    "SHUTDOWN_PORT",
    "INIT_TYPE",
    "PORT_ACTIVE_EVENT",
    "SYS_IMAGE_GUID",
    "RC_RNR_NAK_GEN",
    "SRQ_RESIZE",
    "N_NOTIFY_CQ",
    "LOCAL_DMA_LKEY",
    "UNKNOWN",
    "MEM_WINDOW",
    "UD_IP_CSUM",
    "UD_TSO",
    "XRC",
    "MEM_MGT_EXTENSIONS",
    "BLOCK_MULTICAST_LOOPBACK",
    "MEM_WINDOW_TYPE_2A",
    "MEM_WINDOW_TYPE_2B",
    "RC_IP_CSUM",
    "RAW_IP_CSUM",
    "CROSS_CHANNEL",
    "UNKNOWN",
    "MANAGED_FLOW_STEERING",
    "SIGNATURE_HANDOVER",
    "ON_DEMAND_PAGING",
];
/// Bits 32..=36.
const CAPS_HIGH: [&str; 5] =
    ["SG_GAPS_REG", "VIRTUAL_FUNCTION", "RAW_SCATTER_FCS", "RDMA_NETDEV_OPA_VNIC", "PCI_WRITE_END_PADDING"];

fn cap_name(bit: usize) -> &'static str {
    CAPS_LOW.get(bit).or_else(|| CAPS_HIGH.get(bit.wrapping_sub(32))).copied().unwrap_or("UNKNOWN")
}

/// A GUID as iproute2 prints one: four groups of four hex digits.
pub fn guid(g: u64) -> String {
    format!("{:04x}:{:04x}:{:04x}:{:04x}", g >> 48, (g >> 32) & 0xffff, (g >> 16) & 0xffff, g & 0xffff)
}

/// `rdma dev ...`.
pub fn cmd(opts: &Opts, devs: &[Dev], args: &[String]) -> Outcome {
    let Some((c, rest)) = args.split_first() else { return show(opts, devs, &[]) };
    if is(c, "show") || is(c, "list") {
        show(opts, devs, rest)
    } else if is(c, "set") {
        if super::real::rdma().is_some() && rest.first().is_some_and(|n| !devs.iter().any(|d| &d.info.name == n)) {
            return Outcome::NotMine;
        }
        eprintln!("softroce rdma: `dev set` is not supported (rename a device with `rdma link delete` and `link add`)");
        Outcome::Failed
    } else if is(c, "help") {
        print!("{USAGE}");
        Outcome::Done
    } else {
        unknown("dev command", c)
    }
}

fn line(o: &mut Out, opts: &Opts, d: &Dev) {
    let a = DeviceAttr::new(&Limits::default(), &d.info.gids);
    o.open_object();
    o.uint(Some("ifindex"), Some(&format!("{}: ", d.index)), u64::from(d.index));
    o.string(Some("ifname"), Some(&format!("{}: ", d.info.name)), &d.info.name);
    o.string(Some("node_type"), Some("node_type ca "), "ca");
    let (ng, sg) = (guid(a.node_guid), guid(a.sys_image_guid));
    o.string(Some("node_guid"), Some(&format!("node_guid {ng} ")), &ng);
    o.string(Some("sys_image_guid"), Some(&format!("sys_image_guid {sg} ")), &sg);
    if opts.details {
        o.on_off("adaptive-moderation", "adaptive-moderation off ", false);
        let names: Vec<&str> = (0..64).filter(|b| a.device_cap_flags_ex & (1 << b) != 0).map(cap_name).collect();
        o.caps(&names);
    }
    o.newline();
}

fn show(opts: &Opts, devs: &[Dev], args: &[String]) -> Outcome {
    let mut o = Out::new(opts.json, opts.pretty);
    let Some((name, rest)) = args.split_first() else {
        for d in devs {
            line(&mut o, opts, d);
        }
        return emit(o, true);
    };
    let d = match find(devs, name, &format!("Wrong device name - {name}")) {
        Ok(d) => d,
        Err(out) => return out,
    };
    if let Some(extra) = rest.first() {
        return unknown("parameter", extra);
    }
    line(&mut o, opts, d);
    emit(o, false)
}

#[cfg(test)]
mod tests {
    #[test]
    fn guids_and_capability_names_are_iproute2s() {
        assert_eq!(super::guid(0x5054_00ff_fe12_3456), "5054:00ff:fe12:3456");
        assert_eq!(super::cap_name(1), "BAD_PKEY_CNTR");
        assert_eq!(super::cap_name(24), "MEM_WINDOW_TYPE_2B");
        assert_eq!(super::cap_name(32), "SG_GAPS_REG");
        assert_eq!(super::cap_name(38), "UNKNOWN", "iproute2 6.1 has no name for FLUSH_GLOBAL");
    }
}
