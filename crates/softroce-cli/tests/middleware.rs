//! The middleware RDMA applications are built on, unmodified, over
//! softroce under plain `softroce run` (issue 18): UCX 1.13 finds the
//! devices through the `/sys/class/infiniband` and `/dev/infiniband` view
//! (docs/sysfs.md) and runs its verbs transports between two processes.

use std::os::unix::process::CommandExt;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

/// Whether `tools` are installed (CI installs them: then they must be).
fn have(tools: &[&str]) -> bool {
    let path = std::env::var_os("PATH").unwrap_or_default();
    let missing: Vec<&str> =
        tools.iter().copied().filter(|t| !std::env::split_paths(&path).any(|d| d.join(t).is_file())).collect();
    if !missing.is_empty() {
        assert!(std::env::var_os("CI").is_none(), "CI installs {missing:?}");
        eprintln!("skipped: {missing:?} not installed");
    }
    missing.is_empty()
}

fn softroce(envs: &[(&str, &str)], program: &[&str]) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_softroce"));
    c.args(["run", "--"]).args(program).envs(envs.iter().copied()).stdin(Stdio::null()).process_group(0);
    c
}

/// Waits for `child` at most `within`, killing its group past that.
fn finish(mut child: Child, within: Duration, what: &str) -> Output {
    let until = Instant::now() + within;
    while child.try_wait().unwrap().is_none() {
        if Instant::now() > until {
            let _ = rustix::process::kill_process_group(
                rustix::process::Pid::from_child(&child),
                rustix::process::Signal::KILL,
            );
            let o = child.wait_with_output().unwrap();
            panic!(
                "{what} did not finish within {within:?}\n{}\n{}",
                String::from_utf8_lossy(&o.stdout),
                String::from_utf8_lossy(&o.stderr)
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    child.wait_with_output().unwrap()
}

fn text(o: &Output) -> String {
    format!("{}\n{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr))
}

/// Whether a TCP socket of this network namespace listens on `port`.
fn listening(port: u16) -> bool {
    let hex = format!(":{port:04X} ");
    ["/proc/net/tcp", "/proc/net/tcp6"].iter().any(|f| {
        std::fs::read_to_string(f).is_ok_and(|t| {
            t.lines().skip(1).any(|l| {
                let cols: Vec<&str> = l.split_whitespace().collect();
                cols.len() > 3 && format!("{} ", cols[1]).ends_with(&hex) && cols[3] == "0A"
            })
        })
    })
}

/// A TCP port no one listens on now (ucx_perftest's rendezvous).
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// ucx_perftest's `Final:` line: iterations, typical, average and
/// overall overhead (us), average and overall bandwidth (MB/s), average
/// and overall message rate.
#[derive(Debug)]
struct Final {
    iterations: u64,
    typical_us: f64,
    bw_mbs: f64,
}

fn parse_final(out: &str) -> Option<Final> {
    let line = out.lines().find(|l| l.trim_start().starts_with("Final:"))?;
    let v: Vec<f64> = line.split_whitespace().skip(1).filter_map(|w| w.parse().ok()).collect();
    (v.len() == 8).then(|| Final { iterations: v[0] as u64, typical_us: v[1], bw_mbs: v[5] })
}

/// A ucx_perftest server and client (`args`) between two processes on the
/// shared loopback device; returns the client's result.
fn perftest(envs: &[(&str, &str)], args: &[&str]) -> Final {
    let port = free_port().to_string();
    let server =
        softroce(envs, &["ucx_perftest", "-p", &port]).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
    // The server listens once it is up (looked up without connecting: its
    // first connection is its client).
    let t0 = Instant::now();
    while !listening(port.parse().unwrap()) {
        assert!(t0.elapsed() < Duration::from_secs(20), "ucx_perftest's server did not listen");
        std::thread::sleep(Duration::from_millis(50));
    }
    let mut client_args = vec!["ucx_perftest", "127.0.0.1", "-p", &port];
    client_args.extend_from_slice(args);
    let client = softroce(envs, &client_args).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
    let c = finish(client, Duration::from_secs(90), "the client");
    let s = finish(server, Duration::from_secs(30), "the server");
    assert!(c.status.success() && s.status.success(), "{args:?}\nclient:\n{}\nserver:\n{}", text(&c), text(&s));
    let f = parse_final(&String::from_utf8_lossy(&c.stdout)).unwrap_or_else(|| panic!("no Final line\n{}", text(&c)));
    println!("ucx_perftest {}: {f:?}", args.join(" "));
    f
}

#[test]
fn ucx_info_lists_rc_and_ud_verbs_on_softroce_devices() {
    if !have(&["ucx_info"]) {
        return;
    }
    let o = softroce(&[], &["ucx_info", "-d"]).output().unwrap();
    assert!(o.status.success(), "{}", text(&o));
    let out = String::from_utf8_lossy(&o.stdout);
    // Per memory domain: its transports and devices, in order.
    let domain =
        out.split("# Memory domain: ").find(|d| d.starts_with("softroce_lo\n")).unwrap_or_else(|| panic!("{out}"));
    for tl in ["rc_verbs", "ud_verbs"] {
        let mut lines = domain.lines().skip_while(|l| !l.contains(&format!("Transport: {tl}")));
        assert!(lines.next().is_some(), "no {tl} on softroce_lo\n{domain}");
        assert!(lines.next().is_some_and(|l| l.contains("Device: softroce_lo:1")), "{tl}'s device\n{domain}");
    }
}

const UCT_LO: [&str; 2] = ["-d", "softroce_lo:1"];

#[test]
fn ucx_uct_am_lat_over_ud_verbs_with_ucx_defaults() {
    if !have(&["ucx_perftest"]) {
        return;
    }
    // UD with UCX 1.13's defaults: its GRH check finds the IPv4 header by wc.sl.
    let f = perftest(&[], &[&["-x", "ud_verbs"][..], &UCT_LO, &["-t", "am_lat", "-n", "2000"]].concat());
    assert_eq!(f.iterations, 2000);
    assert!(f.typical_us > 0.0);
}

#[test]
fn ucx_uct_put_bw_and_get_over_rc_verbs() {
    if !have(&["ucx_perftest"]) {
        return;
    }
    let put = perftest(
        &[],
        &[&["-x", "rc_verbs"][..], &UCT_LO, &["-t", "put_bw", "-D", "zcopy", "-s", "65536", "-n", "2000"]].concat(),
    );
    assert_eq!(put.iterations, 2000);
    assert!(put.bw_mbs > 0.0);
    let get = perftest(
        &[],
        &[&["-x", "rc_verbs"][..], &UCT_LO, &["-t", "get", "-D", "zcopy", "-s", "65536", "-n", "1000"]].concat(),
    );
    assert_eq!(get.iterations, 1000);
    assert!(get.bw_mbs > 0.0);
}

#[test]
fn ucx_ucp_tag_and_stream_over_softroce_transports() {
    if !have(&["ucx_perftest"]) {
        return;
    }
    let env = [("UCX_TLS", "rc_verbs,ud_verbs,self"), ("UCX_NET_DEVICES", "softroce_lo:1")];
    let lat = perftest(&env, &["-t", "tag_lat", "-s", "8", "-n", "2000"]);
    assert_eq!(lat.iterations, 2000);
    let bw = perftest(&env, &["-t", "tag_bw", "-s", "1048576", "-n", "100"]);
    assert_eq!(bw.iterations, 100);
    assert!(bw.bw_mbs > 0.0);
    let st = perftest(&env, &["-t", "stream_bw", "-s", "65536", "-n", "500"]);
    assert_eq!(st.iterations, 500);
    assert!(st.bw_mbs > 0.0);
}
