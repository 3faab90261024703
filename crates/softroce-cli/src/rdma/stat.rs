//! `rdma statistic [show [link DEV[/PORT]]]`: a device's counters as
//! iproute2's `rdma/stat.c` prints a port's hardware counters (`link
//! rxe0/1 sent_pkts 0 rcvd_pkts 0 ...`, one per line with `-p`). They are
//! the sums over every process sharing the device, those that left
//! included (`roce_host::resources`): the engine's, with rxe's names
//! first and in rxe's order, then softroce's sharing counters
//! (`roce_host::HostStats`, prefixed `shared_`).

use std::net::SocketAddr;

use roce_host::resources::{ENGINE_COUNTERS, census};

use super::output::Out;
use super::{Dev, Opts, Outcome, dev_port, emit, find, is, unknown};

const USAGE: &str = "Usage: rdma [ OPTIONS ] statistic { COMMAND | help }\n       rdma statistic show\n       \
rdma statistic show link [ DEV/PORT_INDEX ]\n";

/// `rdma statistic ...`.
pub fn cmd(opts: &Opts, devs: &[Dev], args: &[String]) -> Outcome {
    let Some((c, rest)) = args.split_first() else { return show(opts, devs, &[]) };
    if is(c, "show") || is(c, "list") {
        show(opts, devs, rest)
    } else if is(c, "help") {
        print!("{USAGE}");
        Outcome::Done
    } else if ["qp", "mr", "mode", "set", "unset"].iter().any(|w| is(c, w)) {
        eprintln!("softroce rdma: `statistic {c}` (counters bound to QPs) is not supported");
        Outcome::Failed
    } else {
        unknown("statistic command", c)
    }
}

/// The counters' names, by their index in a published slot.
fn names() -> Vec<(usize, String)> {
    let (counters, stats) = (softroce::Counters::default(), roce_host::HostStats::default());
    let engine = counters.iter().map(|(n, _)| n.to_string()).take(ENGINE_COUNTERS).enumerate();
    let host = stats
        .iter()
        .map(|(n, _)| format!("shared_{n}"))
        .take(roce_host::resources::COUNTERS - ENGINE_COUNTERS)
        .enumerate()
        .map(|(i, n)| (ENGINE_COUNTERS + i, n));
    engine.chain(host).collect()
}

fn line(o: &mut Out, opts: &Opts, d: &Dev) -> Result<(), Outcome> {
    let c = census(SocketAddr::new(d.info.addr, roce_wire::ROCE_V2_UDP_PORT)).map_err(|e| {
        eprintln!("softroce rdma: {}: {e}", d.info.name);
        Outcome::Failed
    })?;
    let values = c.counters();
    o.open_object();
    o.string(Some("ifname"), Some(&format!("link {}/", d.info.name)), &d.info.name);
    o.uint(Some("port"), Some("1 "), 1);
    for (i, name) in names() {
        if opts.pretty && !opts.json {
            o.newline_indent();
        }
        o.field(&name, values.get(i).copied().unwrap_or(0));
    }
    o.newline();
    Ok(())
}

fn show(opts: &Opts, devs: &[Dev], args: &[String]) -> Outcome {
    let mut rest = args;
    if let Some((w, r)) = args.split_first() {
        if is(w, "link") {
            rest = r;
        } else if is(w, "mr") {
            eprintln!("softroce rdma: `statistic show mr` is not supported");
            return Outcome::Failed;
        } else {
            return unknown("parameter", w);
        }
    }
    let mut o = Out::new(opts.json, opts.pretty);
    let mut failed = false;
    let Some(which) = rest.first() else {
        for d in devs {
            failed |= line(&mut o, opts, d).is_err();
        }
        emit(o, true);
        return if failed { Outcome::Failed } else { Outcome::Done };
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
    if let Err(out) = line(&mut o, opts, d) {
        return out;
    }
    emit(o, false)
}
