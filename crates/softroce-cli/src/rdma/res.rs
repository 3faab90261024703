//! `rdma resource`: what every process sharing a device holds, read from
//! the device's file in /dev/shm (`roce_host::resources`), where the
//! kernel's resource tracker answers iproute2 for kernel rxe (`rdma/res.c`,
//! `res-qp.c`, `res-ctx.c`): the summary `0: rxe0: pd 1 cq 2 qp 1 mr 1 ctx
//! 1 srq 0`, one line per QP with its process, one per context.
//!
//! Each context is a member of the device and publishes its counts and
//! first 32 QPs at most every 20 ms, rdma_cm ids included (on the device
//! each is bound to, a wildcard listener on each). Not there: single PDs,
//! CQs, MRs, SRQs and cm_ids (counted, not listed).

use std::net::SocketAddr;

use roce_host::resources::{Census, QpEntry, census};

use super::output::Out;
use super::{Dev, Opts, Outcome, dev_port, emit, is, unknown};

const USAGE: &str = "Usage: rdma resource\n          resource show [DEV]\n          \
resource show [qp|cm_id|pd|mr|cq|ctx|srq]\n          resource show qp link [DEV/PORT]\n          \
resource show qp link [DEV/PORT] [FILTER-NAME FILTER-VALUE]\n          resource show ctx dev [DEV]\n          \
resource show ctx dev [DEV] [FILTER-NAME FILTER-VALUE]\n";

/// `rdma resource ...`.
pub fn cmd(opts: &Opts, devs: &[Dev], args: &[String]) -> Outcome {
    let Some((c, rest)) = args.split_first() else { return show(opts, devs, &[]) };
    if is(c, "show") || is(c, "list") {
        show(opts, devs, rest)
    } else if is(c, "help") {
        print!("{USAGE}");
        Outcome::Done
    } else {
        unknown("resource command", c)
    }
}

/// The census of `d`, with what it could not count said on stderr.
fn read(d: &Dev) -> Result<Census, Outcome> {
    match census(SocketAddr::new(d.info.addr, roce_wire::ROCE_V2_UDP_PORT)) {
        Ok(c) => {
            let name = &d.info.name;
            if c.unpublished > 0 {
                eprintln!(
                    "softroce rdma: {name}: {} context(s) of a softroce without resource counts not counted",
                    c.unpublished
                );
            }
            if c.skipped > 0 {
                eprintln!("softroce rdma: {name}: {} context(s) whose entries did not read back skipped", c.skipped);
            }
            Ok(c)
        }
        Err(e) => {
            eprintln!("softroce rdma: {}: {e}", d.info.name);
            Err(Outcome::Failed)
        }
    }
}

fn summary(o: &mut Out, d: &Dev, c: &Census) {
    let t = c.totals();
    o.open_object();
    o.uint(Some("ifindex"), Some(&format!("{}: ", d.index)), u64::from(d.index));
    o.string(Some("ifname"), Some(&format!("{}: ", d.info.name)), &d.info.name);
    // The kernel's order (`fill_res_info`): pd cq qp cm_id mr ctx srq.
    let ctx = c.members.len() as u64;
    for (k, v) in
        [("pd", t.pd), ("cq", t.cq), ("qp", t.qp), ("cm_id", t.cm_id), ("mr", t.mr), ("ctx", ctx), ("srq", t.srq)]
    {
        o.field(k, v);
    }
    o.newline();
}

fn show(opts: &Opts, devs: &[Dev], args: &[String]) -> Outcome {
    // `rdma res show DEV`.
    if let [name] = args
        && devs.iter().any(|d| &d.info.name == name)
    {
        return summaries(opts, devs.iter().filter(|d| &d.info.name == name), false);
    }
    let Some((what, rest)) = args.split_first() else { return summaries(opts, devs.iter(), true) };
    if is(what, "qp") {
        qps(opts, devs, rest)
    } else if is(what, "ctx") {
        contexts(opts, devs, rest)
    } else if ["cm_id", "cq", "mr", "pd", "srq"].iter().any(|w| is(what, w)) {
        eprintln!(
            "softroce rdma: softroce counts {what}s (`rdma resource show`) but does not list them one by one; \
             `resource show qp` and `resource show ctx` are listed"
        );
        Outcome::Failed
    } else if args.len() == 1 && super::real::rdma().is_some() {
        // A device the kernel may have.
        Outcome::NotMine
    } else {
        unknown("parameter", what)
    }
}

fn summaries<'a>(opts: &Opts, devs: impl Iterator<Item = &'a Dev>, all: bool) -> Outcome {
    let mut o = Out::new(opts.json, opts.pretty);
    let mut failed = false;
    for d in devs {
        match read(d) {
            Ok(c) => summary(&mut o, d, &c),
            Err(_) => failed = true,
        }
    }
    emit(o, all);
    if failed { Outcome::Failed } else { Outcome::Done }
}

/// A filter (`rd_build_filter`): `KEY VALUE` pairs, numbers as lists of
/// values and ranges (`1,4-7`), words compared without case.
struct Filters(Vec<(String, String)>);

impl Filters {
    fn parse(args: &[String], valid: &[&str]) -> Result<Filters, Outcome> {
        if args.len() == 1 {
            eprintln!("No filter data was supplied to filter option {}", args[0]);
            return Err(Outcome::Failed);
        }
        if args.len() % 2 == 1 {
            eprintln!("There is filter option without data");
            return Err(Outcome::Failed);
        }
        let mut out = Vec::new();
        for kv in args.chunks(2) {
            let Some(key) = valid.iter().find(|v| is(&kv[0], v)) else {
                eprintln!("Unsupported filter option: {}", kv[0]);
                return Err(Outcome::Failed);
            };
            out.push((key.to_string(), kv[1].to_lowercase()));
        }
        Ok(Filters(out))
    }

    fn get(&self, key: &str) -> Option<&str> {
        self.0.iter().find(|(k, _)| k == key).map(|(_, v)| v.as_str())
    }

    /// Whether a number passes (`None`: the object has no such value,
    /// which a filter on it excludes).
    fn number(&self, key: &str, v: Option<u64>) -> bool {
        let Some(want) = self.get(key) else { return true };
        let Some(v) = v else { return false };
        want.split(',').any(|part| match part.split_once('-') {
            Some((a, b)) => a.parse().is_ok_and(|a: u64| a <= v) && b.parse().is_ok_and(|b: u64| v <= b),
            None => part.parse() == Ok(v),
        })
    }

    fn word(&self, key: &str, v: Option<&str>) -> bool {
        let Some(want) = self.get(key) else { return true };
        v.is_some_and(|v| want.split(',').any(|w| w == v.to_lowercase()))
    }
}

/// The devices (and ports) a `link`/`dev` filter names, or all.
fn chosen<'a>(devs: &'a [Dev], f: &Filters, key: &str) -> Result<(Vec<&'a Dev>, Option<u32>, bool), Outcome> {
    let Some(which) = f.get(key) else { return Ok((devs.iter().collect(), None, true)) };
    // Filter values were lowercased; device names are matched as given.
    let which = devs.iter().map(|d| d.info.name.as_str()).find(|n| {
        let l = n.to_lowercase();
        which == l || which.strip_prefix(&l).is_some_and(|r| r.starts_with('/'))
    });
    let Some(full) = which else {
        return match super::real::rdma() {
            Some(_) => Err(Outcome::NotMine),
            None => {
                eprintln!("Wrong device name");
                Err(Outcome::Failed)
            }
        };
    };
    let arg = f.get(key).unwrap_or_default();
    let port_part = &arg[full.len()..];
    let (_, port, all) = dev_port(&format!("x{port_part}")).ok_or_else(|| {
        eprintln!("Wrong device name");
        Outcome::Failed
    })?;
    if port > 1 {
        eprintln!("Wrong device name");
        return Err(Outcome::Failed);
    }
    Ok((devs.iter().filter(|d| d.info.name == full).collect(), (!all).then_some(port), false))
}

/// The name of process `pid` (`/proc/PID/comm`, as iproute2's `get_task_name`).
fn comm(pid: u32) -> Option<String> {
    std::fs::read_to_string(format!("/proc/{pid}/comm")).ok().map(|s| s.trim_end().to_string())
}

const QP_TYPES: [&str; 11] =
    ["SMI", "GSI", "RC", "UC", "UD", "RAW_IPV6", "RAW_ETHERTYPE", "UNKNOWN", "RAW_PACKET", "XRC_INI", "XRC_TGT"];
const QP_STATES: [&str; 7] = ["RESET", "INIT", "RTR", "RTS", "SQD", "SQE", "ERR"];
const PATH_MIG: [&str; 3] = ["MIGRATED", "REARM", "ARMED"];

fn name_of(table: &'static [&'static str], v: u8) -> &'static str {
    table.get(usize::from(v)).copied().unwrap_or("UNKNOWN")
}

fn qp_line(o: &mut Out, d: &Dev, q: &QpEntry, pid: u32) {
    o.open_object();
    o.json_uint("ifindex", u64::from(d.index));
    o.string(Some("ifname"), None, &d.info.name);
    if q.port != 0 {
        o.uint(Some("port"), None, u64::from(q.port));
        o.text(&format!("link {}/{} ", d.info.name, q.port));
    } else {
        o.text(&format!("link {}/- ", d.info.name));
    }
    o.field("lqpn", u64::from(q.qpn));
    if let Some((rqpn, _)) = q.remote {
        o.uint(Some("rqpn"), Some(&format!("rqpn {rqpn} ")), u64::from(rqpn));
    }
    let ty = name_of(&QP_TYPES, q.qp_type);
    o.string(Some("type"), Some(&format!("type {ty} ")), ty);
    let st = name_of(&QP_STATES, q.state);
    o.string(Some("state"), Some(&format!("state {st} ")), st);
    if let Some((_, rq_psn)) = q.remote {
        o.uint(Some("rq-psn"), Some(&format!("rq-psn {rq_psn} ")), u64::from(rq_psn));
    }
    o.field("sq-psn", u64::from(q.sq_psn));
    if let Some(m) = q.path_mig_state {
        let m = name_of(&PATH_MIG, m);
        o.string(Some("path-mig-state"), Some(&format!("path-mig-state {m} ")), m);
    }
    o.field("pdn", u64::from(q.pdn));
    o.field("pid", u64::from(pid));
    if let Some(c) = comm(pid) {
        o.string(Some("comm"), Some(&format!("comm {c} ")), &c);
    }
    o.newline();
}

fn qps(opts: &Opts, devs: &[Dev], args: &[String]) -> Outcome {
    let valid = ["link", "lqpn", "rqpn", "pid", "sq-psn", "rq-psn", "type", "path-mig-state", "state", "pdn"];
    let f = match Filters::parse(args, &valid) {
        Ok(f) => f,
        Err(out) => return out,
    };
    let (chosen, port, all) = match chosen(devs, &f, "link") {
        Ok(c) => c,
        Err(out) => return out,
    };
    let mut o = Out::new(opts.json, opts.pretty);
    let mut failed = false;
    for d in chosen {
        let Ok(c) = read(d) else {
            failed = true;
            continue;
        };
        let unlisted: u64 =
            c.members.iter().map(|m| m.counts.qp.saturating_sub(m.qps.len() as u64 + m.bad_qps as u64)).sum();
        if unlisted > 0 {
            eprintln!("softroce rdma: {}: {unlisted} QP(s) past the 32 each context lists not shown", d.info.name);
        }
        // iproute2 walks the ports in order, port 0 (`/-`) first.
        for p in [0u8, 1] {
            if port.is_some_and(|want| want != u32::from(p)) {
                continue;
            }
            for m in &c.members {
                for q in m.qps.iter().filter(|q| q.port == p) {
                    let keep = f.number("lqpn", Some(q.qpn.into()))
                        && f.number("rqpn", q.remote.map(|r| r.0.into()))
                        && f.number("rq-psn", q.remote.map(|r| r.1.into()))
                        && f.number("sq-psn", Some(q.sq_psn.into()))
                        && f.number("pdn", Some(q.pdn.into()))
                        && f.number("pid", Some(m.pid.into()))
                        && f.word("type", Some(name_of(&QP_TYPES, q.qp_type)))
                        && f.word("state", Some(name_of(&QP_STATES, q.state)))
                        && f.word("path-mig-state", q.path_mig_state.map(|v| name_of(&PATH_MIG, v)));
                    if keep {
                        qp_line(&mut o, d, q, m.pid);
                    }
                }
            }
        }
    }
    emit(o, all);
    if failed { Outcome::Failed } else { Outcome::Done }
}

/// `res show ctx`: one context per member of the device (its slot is its
/// number, `ctxn`).
fn contexts(opts: &Opts, devs: &[Dev], args: &[String]) -> Outcome {
    let f = match Filters::parse(args, &["dev", "pid", "ctxn"]) {
        Ok(f) => f,
        Err(out) => return out,
    };
    let (chosen, _, all) = match chosen(devs, &f, "dev") {
        Ok(c) => c,
        Err(out) => return out,
    };
    let mut o = Out::new(opts.json, opts.pretty);
    let mut failed = false;
    for d in chosen {
        let Ok(c) = read(d) else {
            failed = true;
            continue;
        };
        for m in &c.members {
            if !(f.number("pid", Some(m.pid.into())) && f.number("ctxn", Some(m.slot as u64))) {
                continue;
            }
            o.open_object();
            o.uint(Some("ifindex"), None, u64::from(d.index));
            o.string(Some("ifname"), Some(&format!("dev {} ", d.info.name)), &d.info.name);
            o.field("ctxn", m.slot as u64);
            o.field("pid", u64::from(m.pid));
            if let Some(c) = comm(m.pid) {
                o.string(Some("comm"), Some(&format!("comm {c} ")), &c);
            }
            o.newline();
        }
    }
    emit(o, all);
    if failed { Outcome::Failed } else { Outcome::Done }
}
