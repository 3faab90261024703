//! `softroce rdma`, iproute2's `rdma` for softroce devices: `link show`'s
//! text and JSON as kernel rxe's, `link add`/`link delete` persisting
//! for later programs, `resource show` counting what other processes hold
//! (with their pids), `statistic show` summing their counters, and
//! `softroce run` giving programs it as `rdma`. Each test has a leased
//! loopback device of its own, named in SOFTROCE_DEVICES, or an isolated
//! configuration directory.

use std::net::{Ipv4Addr, TcpListener};
use std::os::unix::process::CommandExt;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use softroce::config::LoopbackLease;
use softroce::{AccessFlags, Context, Options, Payload, QpInit, RecvWr, SendFlags, SendWr, Wc, WcOpcode, WcStatus};
use softroce::{WrOpcode, config::DeviceInfo};

fn softroce() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_softroce"));
    // The real `rdma` (kernel RDMA) is not asked: these are softroce's devices.
    c.env("SOFTROCE_RDMA_REAL", "0");
    c
}

/// `softroce rdma ARGS` on the leased device only: (status, stdout, stderr).
fn rdma(lease: &LoopbackLease, args: &[&str]) -> (i32, String, String) {
    let o = softroce()
        .arg("rdma")
        .args(args)
        .env("SOFTROCE_DEVICES", format!("softroce_lo={}", lease.addr()))
        .output()
        .expect("softroce runs");
    (
        o.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&o.stdout).into(),
        String::from_utf8_lossy(&o.stderr).into(),
    )
}

fn json_of(lease: &LoopbackLease, args: &[&str]) -> Value {
    let (code, out, err) = rdma(lease, args);
    assert_eq!(code, 0, "{args:?}: {err}");
    serde_json::from_str(&out).unwrap_or_else(|e| panic!("{args:?}: {e}: {out:?}"))
}

fn lo_ifindex() -> u64 {
    std::fs::read_to_string("/sys/class/net/lo/ifindex").unwrap().trim().parse().unwrap()
}

/// `rdma link show` as kernel rxe's: the text line with iproute2's
/// trailing space, `-j` with exactly its keys and types, `-p` the same
/// values indented, `-d` the port's capabilities and the netdev index.
#[test]
fn link_show_prints_kernel_rxes_text_and_json() {
    let lease = LoopbackLease::take().unwrap();
    let (code, out, err) = rdma(&lease, &["link", "show"]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(out, "link softroce_lo/1 state ACTIVE physical_state LINK_UP netdev lo \n");
    assert_eq!(rdma(&lease, &["link"]).1, out, "`link` alone is `link show`");
    assert_eq!(rdma(&lease, &["l", "sh", "softroce_lo/1"]).1, out, "prefixes and DEV/PORT, as iproute2");
    let want = json!([{
        "ifindex": 0, "ifname": "softroce_lo", "port": 1, "state": "ACTIVE",
        "physical_state": "LINK_UP", "netdev": "lo", "netdev_index": lo_ifindex(),
    }]);
    assert_eq!(json_of(&lease, &["-j", "link", "show"]), want);
    let (_, compact, _) = rdma(&lease, &["link", "show", "-j"]);
    assert!(compact.starts_with("[{\"ifindex\":0,\"ifname\":\"softroce_lo\",\"port\":1,"), "{compact}");
    let (_, pretty, _) = rdma(&lease, &["-j", "-p", "link"]);
    assert!(pretty.starts_with("[ {\n        \"ifindex\": 0,\n") && pretty.ends_with("\n    } ]\n"), "{pretty}");
    assert_eq!(serde_json::from_str::<Value>(&pretty).unwrap(), want);
    let mut detailed = want.clone();
    detailed[0]["caps"] = json!(["CM"]);
    assert_eq!(json_of(&lease, &["-jd", "link"]), detailed);
    let (_, text, _) = rdma(&lease, &["-d", "link"]);
    assert_eq!(
        text,
        format!(
            "link softroce_lo/1 state ACTIVE physical_state LINK_UP netdev lo netdev_index {} \n    caps: <CM>\n",
            lo_ifindex()
        )
    );
    // iproute2's errors and exit codes.
    let (code, out, err) = rdma(&lease, &["link", "show", "nope"]);
    assert_eq!((code, out.as_str(), err.as_str()), (1, "", "Wrong device name\n"));
    assert_eq!(rdma(&lease, &["link", "show", "softroce_lo/2"]).0, 1);
    assert_eq!(rdma(&lease, &["bogus"]).2, "Unknown object 'bogus'.\n");
    let (code, out, _) = rdma(&lease, &["-j", "dev"]);
    assert_eq!(code, 0);
    let dev: Value = serde_json::from_str(&out).unwrap();
    assert_eq!((&dev[0]["ifname"], &dev[0]["node_type"]), (&json!("softroce_lo"), &json!("ca")));
    let guid = dev[0]["node_guid"].as_str().unwrap();
    assert!(guid.len() == 19 && guid.split(':').all(|g| g.len() == 4), "{guid}");
}

/// A configuration directory of its own, removed at the end.
struct ConfigHome(std::path::PathBuf);

impl ConfigHome {
    fn new(tag: &str) -> ConfigHome {
        let d = std::env::temp_dir().join(format!("softroce-rdma-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        ConfigHome(d)
    }

    fn cmd(&self, args: &[&str]) -> (i32, String, String) {
        let o = softroce()
            .args(args)
            .env("XDG_CONFIG_HOME", &self.0)
            .env_remove("SOFTROCE_DEVICES")
            .env_remove("SOFTROCE_CONFIG")
            .env_remove("SOFTROCE_ADDED")
            .output()
            .unwrap();
        (
            o.status.code().unwrap_or(-1),
            String::from_utf8_lossy(&o.stdout).into(),
            String::from_utf8_lossy(&o.stderr).into(),
        )
    }

    /// The device names `softroce devices` lists.
    fn devices(&self) -> Vec<String> {
        let (code, out, err) = self.cmd(&["devices"]);
        assert_eq!(code, 0, "{err}");
        out.lines().skip(2).filter_map(|l| l.split_whitespace().next().map(String::from)).collect()
    }
}

impl Drop for ConfigHome {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// `rdma link add rxe0 type rxe netdev lo` makes a device later programs
/// see, in loopback's device's place (one device per net device, as rxe),
/// the other devices still listed; `link delete` takes it away again.
/// What the kernel refuses is refused.
#[test]
fn link_add_and_delete_persist_for_later_programs() {
    let home = ConfigHome::new("add");
    let before = home.devices();
    assert!(before.iter().any(|d| d == "softroce_lo"), "{before:?}");
    let (code, out, err) = home.cmd(&["rdma", "link", "add", "rxe0", "type", "rxe", "netdev", "lo"]);
    assert_eq!((code, out.as_str()), (0, ""), "{err}");
    let after = home.devices();
    let want: Vec<String> = before.iter().map(|d| if d == "softroce_lo" { "rxe0".into() } else { d.clone() }).collect();
    assert_eq!(after, want, "rxe0 takes softroce_lo's place, the others stay");
    let (_, out, _) = home.cmd(&["rdma", "-j", "link", "show", "rxe0"]);
    let v: Value = serde_json::from_str(&out).unwrap();
    assert_eq!((&v[0]["ifname"], &v[0]["netdev"]), (&json!("rxe0"), &json!("lo")), "{out}");
    let (_, devinfo, _) = home.cmd(&["devinfo", "-d", "rxe0"]);
    assert!(devinfo.starts_with("hca_id:\trxe0\n"), "{devinfo}");

    let (code, _, err) = home.cmd(&["rdma", "link", "add", "rxe1", "type", "rxe", "netdev", "lo"]);
    assert_eq!(code, 1);
    assert!(err.starts_with("error: File exists") && err.contains("rxe0 is already on lo"), "{err}");
    let (code, _, err) = home.cmd(&["rdma", "link", "add", "rxe1", "type", "rxe", "netdev", "nosuch0"]);
    assert!(code == 1 && err.starts_with("error: No such device"), "{err}");
    let (code, _, err) = home.cmd(&["rdma", "link", "add", "rxe1"]);
    assert_eq!((code, err.as_str()), (0, ""), "iproute2 prints its usage for a missing type");
    let (code, _, err) = home.cmd(&["rdma", "link", "add", "rxe1", "type"]);
    assert_eq!((code, err.as_str()), (1, "Please provide a link type name.\n"));
    if let Some(auto) = after.iter().find(|d| d.as_str() != "rxe0") {
        let (code, _, err) = home.cmd(&["rdma", "link", "delete", auto]);
        assert!(code == 1 && err.starts_with("error: Operation not supported"), "{err}");
    }

    let (code, _, err) = home.cmd(&["rdma", "link", "delete", "rxe0"]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(home.devices(), before);
    let (code, _, err) = home.cmd(&["rdma", "link", "delete", "rxe0"]);
    assert_eq!((code, err.as_str()), (1, "Wrong device name - rxe0\n"));
}

/// Polls `rdma -j ARGS` until `done` holds (what contexts publish is at
/// most 20 ms old), returning the last JSON.
fn wait_for(lease: &LoopbackLease, args: &[&str], done: impl Fn(&Value) -> bool) -> Value {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let v = json_of(lease, args);
        if done(&v) || Instant::now() > deadline {
            return v;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn device(lease: &LoopbackLease) -> DeviceInfo {
    lease.device().unwrap()
}

/// This process's name as /proc shows it (what `comm` prints).
fn my_comm() -> String {
    std::fs::read_to_string("/proc/self/comm").unwrap().trim_end().to_string()
}

/// `resource show` counts the objects of every context on the device
/// (here this test's: it is another process than `softroce rdma`), `res
/// show qp` lists the QP with its pid and comm, `res show ctx` each
/// context; closed contexts are no longer counted.
#[test]
fn resource_show_counts_what_other_processes_hold_and_names_their_pids() {
    let lease = LoopbackLease::take().unwrap();
    let info = device(&lease);
    let ctx = Context::open_with(&info, Options::default()).unwrap();
    let pd = ctx.alloc_pd().unwrap();
    let (cq1, cq2) = (ctx.create_cq(16, None).unwrap(), ctx.create_cq(16, None).unwrap());
    let mrs: Vec<_> = (0..3).map(|_| pd.reg_mr(4096, AccessFlags::LOCAL_WRITE).unwrap()).collect();
    let qp = pd.create_qp(QpInit::rc(&cq1, &cq2, 8)).unwrap();
    let ctx2 = Context::open_with(&info, Options::default()).unwrap();
    let _pd2 = ctx2.alloc_pd().unwrap();

    let want = json!([{
        "ifindex": 0, "ifname": "softroce_lo", "pd": 2, "cq": 2, "qp": 1, "cm_id": 0, "mr": 3, "ctx": 2, "srq": 0,
    }]);
    let v = wait_for(&lease, &["-j", "resource", "show"], |v| *v == want);
    assert_eq!(v, want);
    let (_, text, _) = rdma(&lease, &["res"]);
    assert_eq!(text, "0: softroce_lo: pd 2 cq 2 qp 1 cm_id 0 mr 3 ctx 2 srq 0 \n");
    assert_eq!(rdma(&lease, &["res", "show", "softroce_lo"]).1, text, "`res show DEV`");

    let pid = u64::from(std::process::id());
    let qps = json_of(&lease, &["-j", "res", "show", "qp"]);
    let want_qp = json!([{
        "ifindex": 0, "ifname": "softroce_lo", "lqpn": qp.qpn().get(), "rqpn": 0, "type": "RC", "state": "RESET",
        "rq-psn": 0, "sq-psn": 0, "path-mig-state": "MIGRATED", "pdn": 0, "pid": pid, "comm": my_comm(),
    }]);
    assert_eq!(qps, want_qp);
    let (_, text, _) = rdma(&lease, &["res", "show", "qp"]);
    assert_eq!(
        text,
        format!(
            "link softroce_lo/- lqpn {} rqpn 0 type RC state RESET rq-psn 0 sq-psn 0 path-mig-state MIGRATED pdn 0 \
             pid {pid} comm {} \n",
            qp.qpn(),
            my_comm()
        )
    );
    // Filters: by pid (ours, and none), by link.
    assert_eq!(json_of(&lease, &["-j", "res", "show", "qp", "pid", &pid.to_string()]), want_qp);
    assert_eq!(json_of(&lease, &["-j", "res", "show", "qp", "pid", "1"]), json!([]));
    assert_eq!(
        json_of(&lease, &["-j", "res", "show", "qp", "link", "softroce_lo/1"]),
        json!([]),
        "a RESET QP has no port"
    );
    let ctxs = json_of(&lease, &["-j", "res", "show", "ctx"]);
    assert_eq!(ctxs.as_array().unwrap().len(), 2);
    assert!(ctxs.as_array().unwrap().iter().all(|c| c["pid"] == json!(pid) && c["comm"] == json!(my_comm())));
    assert_eq!(rdma(&lease, &["res", "show", "pd"]).0, 1, "single PDs are not listed, and it says so");

    drop((qp, mrs, cq1, cq2, pd));
    drop(ctx);
    let want = json!([{
        "ifindex": 0, "ifname": "softroce_lo", "pd": 1, "cq": 0, "qp": 0, "cm_id": 0, "mr": 0, "ctx": 1, "srq": 0,
    }]);
    assert_eq!(wait_for(&lease, &["-j", "res"], |v| *v == want), want, "a closed context is not counted");
}

/// `statistic show` sums the counters of every context on the device,
/// including those that closed (as rxe's run from the device's creation).
#[test]
fn statistic_show_sums_the_counters_of_every_context() {
    let lease = LoopbackLease::take().unwrap();
    let info = device(&lease);
    // Keeps the device (its file) while the others come and go.
    let _keeper = Context::open_with(&info, Options::default()).unwrap();
    {
        let (x, y) = (
            Context::open_with(&info, Options::default()).unwrap(),
            Context::open_with(&info, Options::default()).unwrap(),
        );
        let (pdx, pdy) = (x.alloc_pd().unwrap(), y.alloc_pd().unwrap());
        let (cqx, cqy) = (x.create_cq(16, None).unwrap(), y.create_cq(16, None).unwrap());
        let (mx, my) =
            (pdx.reg_mr(4096, AccessFlags::LOCAL_WRITE).unwrap(), pdy.reg_mr(4096, AccessFlags::LOCAL_WRITE).unwrap());
        let (qx, qy) =
            (pdx.create_qp(QpInit::rc(&cqx, &cqx, 8)).unwrap(), pdy.create_qp(QpInit::rc(&cqy, &cqy, 8)).unwrap());
        qx.connect(1, &qy.endpoint(2)).unwrap();
        qy.connect(2, &qx.endpoint(1)).unwrap();
        let (sx, sy) = ([mx.sge(0, 64)], [my.sge(0, 64)]);
        qy.post_recv(&RecvWr { wr_id: 7, sg_list: &sy }).unwrap();
        qx.post_send(&SendWr::new(1, WrOpcode::Send, SendFlags::SIGNALED, Payload::Sges(&sx))).unwrap();
        let mut wc = [Wc::new(0, WcStatus::Success, WcOpcode::Send, 0); 1];
        assert_eq!(cqx.wait(&mut wc, Duration::from_secs(20)).unwrap(), 1);
        assert_eq!(wc[0].status, WcStatus::Success);
        assert_eq!(cqy.wait(&mut wc, Duration::from_secs(20)).unwrap(), 1);
    }
    // x and y closed: their counters stay the device's.
    let v = json_of(&lease, &["-j", "statistic", "show"]);
    let s = &v[0];
    assert_eq!((&s["ifname"], &s["port"]), (&json!("softroce_lo"), &json!(1)));
    assert!(s["sent_pkts"].as_u64().unwrap() >= 2, "a SEND and its ACK: {s}");
    assert!(s["rcvd_pkts"].as_u64().unwrap() >= 2, "{s}");
    assert_eq!(s["rdma_sends"], json!(1));
    assert_eq!(s["rdma_recvs"], json!(1));
    let (_, raw, _) = rdma(&lease, &["-j", "statistic", "show"]);
    assert!(raw.starts_with("[{\"ifname\":\"softroce_lo\",\"port\":1,\"sent_pkts\":"), "rxe's counters first: {raw}");
    let (_, text, _) = rdma(&lease, &["stat", "show", "link", "softroce_lo/1"]);
    assert!(text.starts_with("link softroce_lo/1 sent_pkts ") && text.ends_with(" \n"), "{text}");
    assert!(text.contains(" rdma_sends 1 rdma_recvs 1 "), "{text}");
}

/// A TCP port nobody listens on now (bound and released).
fn free_port() -> u16 {
    TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).unwrap().local_addr().unwrap().port()
}

fn on_path(tool: &str) -> bool {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path).any(|d| d.join(tool).is_file())
}

/// The drop-in library beside the binary (cargo test --workspace builds it).
fn have_library() -> bool {
    let exe = std::path::PathBuf::from(env!("CARGO_BIN_EXE_softroce"));
    let dir = exe.parent().unwrap();
    let ok = dir.join("libsoftroce_ibverbs.so").is_file() || dir.join("deps/libsoftroce_ibverbs.so").is_file();
    if !ok {
        assert!(std::env::var_os("CI").is_none(), "libsoftroce_ibverbs.so was not built next to softroce");
        eprintln!("skipped: build softroce-ibverbs first (cargo test --workspace does)");
    }
    ok
}

/// `softroce run -- rdma ...` finds softroce's `rdma` first on PATH, and
/// an unmodified rdma-core program's objects (an `ibv_rc_pingpong` server
/// under `softroce run`) are counted and its QP listed with its pid and
/// name.
#[test]
fn softroce_run_gives_programs_rdma_and_an_rdma_core_servers_qp_is_listed() {
    if !have_library() {
        return;
    }
    let lease = LoopbackLease::take().unwrap();
    let dev = format!("softroce_lo={}", lease.addr());
    let o = softroce().args(["run", "--device", &dev, "--", "rdma", "link", "show"]).output().unwrap();
    assert_eq!(
        String::from_utf8_lossy(&o.stdout),
        "link softroce_lo/1 state ACTIVE physical_state LINK_UP netdev lo \n"
    );
    let o = softroce().args(["run", "--device", &dev, "--", "sh", "-c", "command -v rdma"]).output().unwrap();
    let shim = std::fs::canonicalize(String::from_utf8_lossy(&o.stdout).trim()).unwrap();
    assert_eq!(shim, std::fs::canonicalize(env!("CARGO_BIN_EXE_softroce")).unwrap(), "`rdma` is softroce");

    if !on_path("ibv_rc_pingpong") {
        assert!(std::env::var_os("CI").is_none(), "ibv_rc_pingpong is missing (apt-get install ibverbs-utils)");
        eprintln!("skipped: ibv_rc_pingpong not found (apt-get install ibverbs-utils)");
        return;
    }
    let port = free_port().to_string();
    let mut server = softroce()
        .args(["run", "--device", &dev, "--", "ibv_rc_pingpong", "-g", "1", "-p", &port])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .process_group(0)
        .spawn()
        .unwrap();
    // ibv_rc_pingpong holds a PD, a CQ, an MR and an RC QP in INIT while
    // it waits for its client.
    let v = wait_for(&lease, &["-j", "res", "show", "qp"], |v| v.as_array().is_some_and(|a| !a.is_empty()));
    let summary = json_of(&lease, &["-j", "res"]);
    // The whole group: SIGKILL is the one signal `softroce run` cannot pass on.
    let _ =
        rustix::process::kill_process_group(rustix::process::Pid::from_child(&server), rustix::process::Signal::KILL);
    let _ = server.wait();
    let q = &v[0];
    assert_eq!((&q["type"], &q["state"], &q["port"]), (&json!("RC"), &json!("INIT"), &json!(1)), "{v}");
    assert_eq!(q["comm"], json!("ibv_rc_pingpong"), "{v}");
    let pid = q["pid"].as_u64().unwrap();
    assert_ne!(pid, u64::from(std::process::id()));
    let s = &summary[0];
    assert_eq!(
        (&s["pd"], &s["cq"], &s["qp"], &s["mr"], &s["ctx"]),
        (&json!(1), &json!(1), &json!(1), &json!(1), &json!(1)),
        "{s}"
    );
}

/// rdma_cm ids count on the device they are bound to, as the kernel's
/// resource tracker counts them: an `rping` server's listening id is one,
/// and it goes with the server.
#[test]
fn resource_show_counts_an_rdma_cm_servers_listening_id() {
    if !have_library() {
        return;
    }
    if !on_path("rping") {
        assert!(std::env::var_os("CI").is_none(), "rping is missing (apt-get install rdmacm-utils)");
        eprintln!("skipped: rping not found (apt-get install rdmacm-utils)");
        return;
    }
    let lease = LoopbackLease::take().unwrap();
    let dev = format!("softroce_lo={}", lease.addr());
    let (addr, port) = (lease.addr().to_string(), free_port().to_string());
    // A process group of its own, killed whole: SIGKILL is the one signal
    // `softroce run` cannot pass on to rping.
    let mut server = softroce()
        .args(["run", "--device", &dev, "--", "rping", "-s", "-a", &addr, "-p", &port])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .process_group(0)
        .spawn()
        .unwrap();
    let v = wait_for(&lease, &["-j", "res"], |v| v[0]["cm_id"] == json!(1));
    let (_, text, _) = rdma(&lease, &["res"]);
    let group = rustix::process::Pid::from_child(&server);
    let _ = rustix::process::kill_process_group(group, rustix::process::Signal::KILL);
    let _ = server.wait();
    assert_eq!(v[0]["cm_id"], json!(1), "{v}");
    assert!(text.contains(" qp 1 cm_id 1 mr "), "the kernel's order, pd cq qp cm_id mr ctx srq: {text}");
    let gone = wait_for(&lease, &["-j", "res"], |v| v[0]["cm_id"] == json!(0));
    assert_eq!(gone[0]["cm_id"], json!(0), "the server's id went with it: {gone}");
}
