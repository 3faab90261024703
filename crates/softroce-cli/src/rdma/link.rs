//! `rdma link`: ports (`link show [DEV[/PORT]]`) and the devices
//! `link add NAME type rxe netdev IF` / `link delete NAME` make, as
//! iproute2's `rdma/link.c` prints and parses them. A softroce device has
//! one port, shown as kernel rxe shows its own: no LID or subnet prefix
//! (RoCE), its state following its interface's.

use roce_proto::Limits;
use roce_proto::devattr::PortAttr;
use softroce::config::ConfigError;

use super::output::Out;
use super::{Dev, Opts, Outcome, dev_port, emit, find, is, unknown};

const USAGE: &str = "Usage: rdma link show [DEV/PORT_INDEX]\nUsage: rdma link add NAME type TYPE netdev NETDEV\n\
Usage: rdma link delete NAME\n";

/// iproute2's names of `port_cap_flags` bits 0..=31 (`caps_to_str`).
const CAPS: [&str; 32] = [
    "RESERVED",
    "SM",
    "NOTICE",
    "TRAP",
    "OPT_IPD",
    "AUTO_MIGR",
    "SL_MAP",
    "MKEY_NVRAM",
    "PKEY_NVRAM",
    "LED_INFO",
    "SM_DISABLED",
    "SYS_IMAGE_GUID",
    "PKEY_SW_EXT_PORT_TRAP",
    "CABLE_INFO",
    "EXTENDED_SPEEDS",
    "CAP_MASK2",
    "CM",
    "SNMP_TUNNEL",
    "REINIT",
    "DEVICE_MGMT",
    "VENDOR_CLASS",
    "DR_NOTICE",
    "CAP_MASK_NOTICE",
    "BOOT_MGMT",
    "LINK_LATENCY",
    "CLIENT_REG",
    "OTHER_LOCAL_CHANGES",
    "LINK_SPPED_WIDTH",
    "VENDOR_SPECIFIC_MADS",
    "MULT_PKER_TRAP",
    "MULT_FDB",
    "HIERARCHY_INFO",
];

/// `rdma link ...`.
pub fn cmd(opts: &Opts, devs: &[Dev], args: &[String]) -> Outcome {
    let Some((c, rest)) = args.split_first() else { return show(opts, devs, &[]) };
    if is(c, "add") {
        add(rest)
    } else if is(c, "delete") {
        delete(devs, rest)
    } else if is(c, "show") || is(c, "list") {
        show(opts, devs, rest)
    } else if is(c, "help") {
        print!("{USAGE}");
        Outcome::Done
    } else {
        unknown("link command", c)
    }
}

/// One port's line (`link_parse_cb`).
pub fn port_line(o: &mut Out, opts: &Opts, d: &Dev) {
    let up = d.up();
    o.open_object();
    o.json_uint("ifindex", u64::from(d.index));
    o.string(Some("ifname"), Some(&format!("link {}/", d.info.name)), &d.info.name);
    o.uint(Some("port"), Some("1 "), 1);
    let state = if up { "ACTIVE" } else { "DOWN" };
    o.string(Some("state"), Some(&format!("state {state} ")), state);
    let phys = if up { "LINK_UP" } else { "DISABLED" };
    o.string(Some("physical_state"), Some(&format!("physical_state {phys} ")), phys);
    if let (Some(netdev), Some(idx)) = (d.info.interface.as_deref(), d.netdev_index()) {
        o.string(Some("netdev"), Some(&format!("netdev {netdev} ")), netdev);
        let text = format!("netdev_index {idx} ");
        o.uint(Some("netdev_index"), opts.details.then_some(text.as_str()), u64::from(idx));
    }
    if opts.details {
        let flags = PortAttr::new(&Limits::default(), d.info.active_mtu()).port_cap_flags;
        let names: Vec<&str> = (0..32).filter(|b| flags & (1 << b) != 0).map(|b| CAPS[b]).collect();
        o.caps(&names);
    }
    o.newline();
}

fn show(opts: &Opts, devs: &[Dev], args: &[String]) -> Outcome {
    let mut o = Out::new(opts.json, opts.pretty);
    let Some((which, rest)) = args.split_first() else {
        for d in devs {
            port_line(&mut o, opts, d);
        }
        return emit(o, true);
    };
    let (name, port, _) = dev_port(which).unwrap_or((which, u32::MAX, false));
    let d = match find(devs, name, "Wrong device name") {
        Ok(d) => d,
        Err(out) => return out,
    };
    if port > 1 {
        eprintln!("Wrong device name");
        return Outcome::Failed;
    }
    if let Some(extra) = rest.first() {
        return unknown("parameter", extra);
    }
    port_line(&mut o, opts, d);
    emit(o, false)
}

/// The kernel's answer as iproute2 prints a failed request (`perror("error")`),
/// with softroce's reason after it.
fn error(errno: &str, why: &dyn std::fmt::Display) -> Outcome {
    eprintln!("error: {errno} (softroce: {why})");
    Outcome::Failed
}

fn add(args: &[String]) -> Outcome {
    let Some((name, rest)) = args.split_first() else {
        eprintln!("Please provide a link name to add.");
        return Outcome::Failed;
    };
    let Some((kw, rest)) = rest.split_first() else {
        print!("{USAGE}");
        return Outcome::Done;
    };
    if !is(kw, "type") {
        return unknown("parameter", kw);
    }
    let Some((ty, rest)) = rest.split_first() else {
        eprintln!("Please provide a link type name.");
        return Outcome::Failed;
    };
    let Some((kw, rest)) = rest.split_first() else {
        print!("{USAGE}");
        return Outcome::Done;
    };
    if !is(kw, "netdev") {
        return unknown("parameter", kw);
    }
    let Some(netdev) = rest.first() else {
        eprintln!("Please provide a net device name.");
        return Outcome::Failed;
    };
    if ty != "rxe" {
        if super::real::rdma().is_some() {
            return Outcome::NotMine;
        }
        return error("Operation not supported", &format!("it makes rxe devices only, not {ty}"));
    }
    match softroce::config::add_device(name, netdev) {
        Ok(()) => Outcome::Done,
        Err(e @ ConfigError::Exists(_)) => error("File exists", &e),
        Err(e @ ConfigError::NoInterface(_)) => error("No such device", &e),
        Err(e @ (ConfigError::BadAdded { .. } | ConfigError::DuplicateName { .. })) => error("Invalid argument", &e),
        Err(e) => error("Operation not permitted", &e),
    }
}

fn delete(devs: &[Dev], args: &[String]) -> Outcome {
    let Some((name, rest)) = args.split_first() else {
        eprintln!("Please provide device name.");
        return Outcome::Failed;
    };
    // A device whose interface lost its address is not listed, and still
    // deletable.
    let added = softroce::config::added_devices().unwrap_or_default().iter().any(|a| &a.name == name);
    if !added && let Err(out) = find(devs, name, &format!("Wrong device name - {name}")) {
        return out;
    }
    if let Some(extra) = rest.first() {
        eprintln!("Unknown parameter {extra}");
        return Outcome::Failed;
    }
    match softroce::config::delete_device(name) {
        Ok(()) => Outcome::Done,
        Err(e @ ConfigError::NotAdded(_)) => error("Operation not supported", &e),
        Err(e) => error("Operation not permitted", &e),
    }
}
