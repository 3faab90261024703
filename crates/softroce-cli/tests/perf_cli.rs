//! `softroce perf --loopback` as a user runs it: each of perftest's eight
//! tests briefly, the table parses, `--baseline` adds a readable ratio, and
//! `-a --plot` writes an SVG; `devices` and `devinfo` list the devices.

use std::process::Command;

fn softroce(args: &[&str]) -> (bool, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_softroce")).args(args).output().unwrap();
    (out.status.success(), String::from_utf8_lossy(&out.stdout).into(), String::from_utf8_lossy(&out.stderr).into())
}

/// The data rows of a perftest table: the lines after the header that start
/// with a number.
fn rows(out: &str) -> Vec<Vec<String>> {
    let mut in_table = false;
    let mut v = Vec::new();
    for l in out.lines() {
        if l.trim_start().starts_with("#bytes") {
            in_table = true;
            continue;
        }
        if in_table && l.trim_start().chars().next().is_some_and(|c| c.is_ascii_digit()) {
            v.push(l.split_whitespace().map(String::from).collect());
        }
    }
    v
}

#[test]
fn each_of_the_eight_tests_runs_and_its_table_parses() {
    for test in ["send-bw", "write-bw", "read-bw", "atomic-bw", "send-lat", "write-lat", "read-lat", "atomic-lat"] {
        let bw = test.ends_with("-bw");
        let iters = if bw { "300" } else { "100" };
        let (ok, out, err) = softroce(&["perf", test, "--loopback", "-n", iters, "-s", "4096"]);
        assert!(ok, "{test}: {err}\n{out}");
        assert!(out.contains(if bw { "BW peak[MiB/sec]" } else { "t_typical[usec]" }), "{test}:\n{out}");
        let r = rows(&out);
        assert_eq!(r.len(), 1, "{test}: one row\n{out}");
        let size = if test.starts_with("atomic") { "8" } else { "4096" };
        assert_eq!(r[0][0], size, "{test}: #bytes");
        assert_eq!(r[0][1], iters, "{test}: #iterations");
        let nums: Vec<f64> = r[0][2..].iter().map(|x| x.parse().unwrap()).collect();
        assert!(nums.iter().all(|x| *x > 0.0), "{test}: positive figures {nums:?}");
        if !bw {
            // min <= typical <= max.
            assert!(nums[0] <= nums[2] && nums[2] <= nums[1], "{test}: {nums:?}");
        }
    }
}

/// A stall (ACKs held back, a timer missed) leaves a bandwidth test at a
/// few percent of the UDP baseline measured in the same run: this floor is
/// far below what any of them reaches (0.5x and up in release builds,
/// about half that in test builds) and far above a stalled run (0.01x).
#[test]
fn no_bandwidth_test_stalls_next_to_its_baseline() {
    for test in ["send-bw", "write-bw", "read-bw"] {
        let (ok, out, err) = softroce(&["perf", test, "--loopback", "--baseline", "-n", "2000", "-s", "65536"]);
        assert!(ok, "{test}: {err}\n{out}");
        let r = rows(&out);
        let ratio: f64 = r[0].last().unwrap().strip_suffix('x').unwrap().parse().unwrap();
        assert!(ratio >= 0.08, "{test} stalled: {ratio}x of the baseline\n{out}");
    }
}

#[test]
fn baseline_adds_a_ratio_scripts_can_read() {
    let (ok, out, err) = softroce(&["perf", "write-bw", "--loopback", "--baseline", "-n", "500", "-s", "65536"]);
    assert!(ok, "{err}\n{out}");
    let r = rows(&out);
    let ratio: f64 = r[0].last().unwrap().strip_suffix('x').unwrap().parse().unwrap();
    let (avg, base): (f64, f64) = (r[0][3].parse().unwrap(), r[0][5].parse().unwrap());
    assert!(ratio > 0.0 && (ratio - avg / base).abs() < 0.02, "{out}");
    let (ok, out, _) = softroce(&["perf", "send-lat", "--loopback", "--baseline", "-n", "200", "-s", "8"]);
    assert!(ok);
    assert!(rows(&out)[0].last().unwrap().ends_with('x'), "{out}");
}

#[test]
fn all_sizes_with_plot_write_an_svg() {
    let path = std::env::temp_dir().join(format!("softroce-plot-{}.svg", std::process::id()));
    let p = path.to_str().unwrap();
    let (ok, out, err) = softroce(&["perf", "send-lat", "--loopback", "-a", "-n", "20", "--plot", p]);
    assert!(ok, "{err}");
    assert_eq!(rows(&out).len(), 23, "sizes 2 to 2^23");
    let svg = std::fs::read_to_string(&path).unwrap();
    assert!(svg.starts_with("<svg xmlns=\"http://www.w3.org/2000/svg\"") && svg.trim_end().ends_with("</svg>"));
    assert_eq!(svg.matches("<polyline").count(), 2, "bandwidth and latency");
    // Well formed: every tag closed (the elements used are self-closing or paired).
    assert_eq!(svg.matches("<text").count(), svg.matches("</text>").count());
    let (ok, _, err) = softroce(&["perf", "send-lat", "--loopback", "--plot", p]);
    assert!(!ok && err.contains("--plot needs -a"), "{err}");
}

#[test]
fn bad_options_are_refused_with_a_reason() {
    let (ok, _, err) = softroce(&["perf", "write-bw", "--loopback", "-m", "1500"]);
    assert!(!ok && err.contains("-m 1500"), "{err}");
    let (ok, _, err) = softroce(&["perf", "write-bw", "--baseline"]);
    assert!(!ok && err.contains("--loopback"), "{err}");
    let (ok, _, err) = softroce(&["perf", "write-bw", "-c", "UD", "--loopback"]);
    assert!(!ok && err.contains("RC"), "{err}");
}

#[test]
fn devices_and_devinfo_list_the_loopback_device() {
    let env = [("SOFTROCE_DEVICES", "sr_test=127.0.0.77")];
    let run = |args: &[&str]| {
        let out = Command::new(env!("CARGO_BIN_EXE_softroce")).args(args).envs(env).output().unwrap();
        (out.status.success(), String::from_utf8_lossy(&out.stdout).to_string())
    };
    let (ok, out) = run(&["devices"]);
    assert!(ok);
    assert!(out.lines().nth(2).unwrap().starts_with("    sr_test         \t"), "{out}");
    let (ok, out) = run(&["devinfo", "-v", "-d", "sr_test"]);
    assert!(ok);
    assert!(out.contains("hca_id:\tsr_test") && out.contains("GID[  1]:\t\t::ffff:127.0.0.77, RoCE v2"), "{out}");
    let (ok, _) = run(&["devinfo", "-d", "nope"]);
    assert!(!ok);
}

#[test]
fn qp_memory_reports_resident_kib_per_qp() {
    let (ok, out, err) = softroce(&["qp-memory", "--counts", "1,200"]);
    assert!(ok, "{err}");
    let lines: Vec<Vec<&str>> = out.lines().skip(1).map(|l| l.split_whitespace().collect()).collect();
    assert_eq!(lines.len(), 2, "{out}");
    assert_eq!((lines[1][0], lines[1][1]), ("200", "128"));
    let per_qp: f64 = lines[1][3].parse().unwrap();
    // Two queues of 128 WQEs each: tens of KiB, not megabytes.
    assert!(per_qp > 4.0 && per_qp < 128.0, "{out}");
}

#[test]
fn several_qps_and_duration_mode() {
    // -q: every QP pair connected to its own peer; iterations add up.
    for test in ["write-bw", "read-bw", "send-bw"] {
        let (ok, out, err) = softroce(&["perf", test, "--loopback", "-q", "3", "-n", "200", "-s", "4096"]);
        assert!(ok, "{test} -q 3: {err}\n{out}");
        assert_eq!(rows(&out)[0][1], "600", "{test}: 3 QPs x 200\n{out}");
    }
    // -D: runs for the duration, then drains; no progress line when stderr
    // is not a terminal.
    let t = std::time::Instant::now();
    let (ok, out, err) = softroce(&["perf", "write-bw", "--loopback", "-D", "1", "-s", "4096"]);
    assert!(ok, "{err}");
    assert!(t.elapsed() >= std::time::Duration::from_secs(1));
    let iters: u64 = rows(&out)[0][1].parse().unwrap();
    assert!(iters > 100, "{out}");
    assert!(err.is_empty(), "silent on a pipe: {err:?}");
}

#[test]
fn with_a_baseline_the_rounds_add_up_to_the_iterations_asked_for() {
    // softroce and the baseline take turns in rounds (here 2 of 1250 per
    // QP): the row still counts every message, receives posted for SEND
    // never overflow a queue, and latency rounds continue each other.
    let (ok, out, err) =
        softroce(&["perf", "send-bw", "--loopback", "--baseline", "-q", "2", "-n", "2500", "-s", "4096"]);
    assert!(ok, "{err}\n{out}");
    assert_eq!(rows(&out)[0][1], "5000", "2 QPs x 2500\n{out}");
    for test in ["send-lat", "write-lat", "read-lat"] {
        let (ok, out, err) = softroce(&["perf", test, "--loopback", "--baseline", "-n", "2500", "-s", "8"]);
        assert!(ok, "{test}: {err}\n{out}");
        assert_eq!(rows(&out)[0][1], "2500", "{test}\n{out}");
    }
    // Timed rounds: a SEND round stopped by the clock leaves receives
    // posted, which the next round uses instead of posting more.
    let (ok, out, err) = softroce(&["perf", "send-bw", "--loopback", "--baseline", "-D", "1", "-s", "4096"]);
    assert!(ok, "{err}\n{out}");
    let iters: u64 = rows(&out)[0][1].parse().unwrap();
    assert!(iters > 100, "{out}");
}

/// Each latency test between a server and a client process on one shared
/// device, polling (perftest's default) and sleeping (`-e`): the client
/// prints its row, and a READ or atomic server, which has nothing to do,
/// stays until its client is done (it used to leave at once, and its
/// client's READs failed with RETRY_EXC_ERR).
#[test]
fn the_latency_tests_run_between_two_processes_polling_or_sleeping() {
    for test in ["send-lat", "write-lat", "read-lat", "atomic-lat"] {
        for events in [false, true] {
            let mut args = vec!["perf", test, "-n", "300"];
            if events {
                args.push("-e");
            }
            let (client, server) = server_and_client(&args, &[]);
            assert!(client.status.success(), "{test} -e {events}: client\n{}", text(&client));
            assert!(server.status.success(), "{test} -e {events}: server\n{}", text(&server));
            let out = String::from_utf8_lossy(&client.stdout);
            assert_eq!(rows(&out)[0][1], "300", "{test} -e {events}\n{out}");
        }
    }
}

/// `softroce perf ARGS` as a server (with `server_only` besides) and as its
/// client, two processes on the host's shared loopback device and a free
/// TCP port: the client's output, then the server's.
fn server_and_client(args: &[&str], server_only: &[&str]) -> (std::process::Output, std::process::Output) {
    let env = [("SOFTROCE_DEVICES", "softroce_lo=127.0.0.1")];
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port().to_string();
    let mut args: Vec<&str> = args.iter().copied().chain(["-p", &port]).collect();
    let server = Command::new(env!("CARGO_BIN_EXE_softroce"))
        .args(&args)
        .args(server_only)
        .envs(env)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    args.push("127.0.0.1");
    let client = Command::new(env!("CARGO_BIN_EXE_softroce")).args(&args).envs(env).output().unwrap();
    (client, server.wait_with_output().unwrap())
}

/// A process's stdout and stderr, for a failure's message.
fn text(o: &std::process::Output) -> String {
    format!("{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr))
}

/// `send-bw -D` between a server and a client process: the client runs for
/// the time and tells the server how many SENDs completed on each QP; the
/// server's receiver takes exactly those (it used to stop at `-n`'s
/// default, and the client's later SENDs met RNR NAKs forever).
#[test]
fn send_bw_for_a_time_between_two_processes_ends_with_the_clients_count() {
    let (client, server) = server_and_client(&["perf", "send-bw", "-D", "1", "-q", "2", "-s", "4096"], &["--stats"]);
    assert!(client.status.success(), "client\n{}", text(&client));
    assert!(server.status.success(), "server\n{}", text(&server));
    let (c_out, s_out) = (String::from_utf8_lossy(&client.stdout), String::from_utf8_lossy(&server.stdout));
    let iters: u64 = rows(&c_out)[0][1].parse().unwrap();
    assert!(iters > 1000, "{c_out}");
    let recvs =
        s_out.lines().find_map(|l| l.trim().strip_prefix("rdma_recvs")).map(|v| v.trim().parse::<u64>().unwrap());
    assert_eq!(recvs, Some(iters), "the server received what the client completed\n{s_out}");
}

/// `softroce perf-sharing --quick`: eight `softroce perf` processes in all
/// (a pair on two addresses, a pair on one shared device, four pairs on
/// it) and raw UDP; every figure is measured, and each ratio is the shared
/// figure over the other one. The one pair's bandwidth is set against
/// raw UDP's.
#[test]
fn perf_sharing_measures_both_modes_and_prints_each_ratio() {
    let (ok, out, err) = softroce(&["perf-sharing", "--quick", "--rounds", "1"]);
    assert!(ok, "{err}\n{out}");
    let figures: Vec<Vec<&str>> = [
        "send-lat 8 B [usec]",
        "write-bw 64 KiB [MiB/sec]",
        "write 8 B msg rate [Mpps]",
        "bandwidth [MiB/sec]",
        "aggregate [MiB/sec]",
    ]
    .iter()
    .map(|label| {
        let l = out.lines().find(|l| l.trim_start().starts_with(label)).unwrap_or_else(|| panic!("{label}:\n{out}"));
        l[l.find(']').unwrap() + 1..].split_whitespace().collect()
    })
    .collect();
    for f in &figures {
        let (a, b): (f64, f64) = (f[0].parse().unwrap(), f[1].parse().unwrap());
        let ratio: f64 = f[2].strip_suffix('x').unwrap().parse().unwrap();
        assert!(a > 0.0 && b > 0.0, "{f:?}");
        assert!((ratio - b / a).abs() < 0.01 + 0.005 * ratio, "{f:?}");
        assert!(f[3] == "<=" || f[3] == ">=", "{f:?}");
        assert!(f[5] == "met" || f[5] == "MISSED", "{f:?}");
    }
    assert_eq!(figures[3][1], figures[4][0], "raw UDP is set against the one pair's bandwidth");
}
