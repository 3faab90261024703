//! Captures of real softroce traffic decode with every ICRC ok: one taken
//! by tshark on `lo` (what the kernel really carried, GSO sends included)
//! and one written by `SOFTROCE_PCAP` (the tap's own). Each test's two
//! devices are on two free loopback addresses (leased).

use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use softroce::config::{DeviceInfo, LoopbackLease};
use softroce::testing::{End, EndSpec, connect_pair};
use softroce::{AccessFlags, Cq, Link, Options, Payload, RecvWr, SendFlags, SendWr, Wc, WcStatus, WrOpcode};

/// A loopback address of this test's own, held until the lease is dropped:
/// keep it for as long as a device binds the address.
fn lease() -> LoopbackLease {
    LoopbackLease::take().expect("a free loopback address")
}

fn device(lease: &LoopbackLease) -> DeviceInfo {
    let addr = lease.addr();
    let mut d = DeviceInfo::on_address(format!("c{}", addr.octets()[3]), IpAddr::V4(addr)).unwrap();
    // A 1500-byte link's active MTU, 1024: the WRITE leaves as runs of
    // equal packets, in GSO sends.
    d.link_mtu = 1500;
    d
}

fn open(lease: &LoopbackLease, pcap: Option<PathBuf>, link: Link) -> End {
    let access = AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_READ;
    let spec = EndSpec { cq_entries: 64, mr_len: 1 << 20, access, qp_depth: 64 };
    End::open(&device(lease), Options { pcap, link, ..Options::default() }, spec)
}

fn wait_one(cq: &Cq) -> Wc {
    softroce::testing::wait_one(cq, Duration::from_secs(20))
}

/// SENDs, a 256 KiB WRITE (MTU 1024: over the socket, runs of equal
/// packets leave as GSO sends) and a READ between devices on the addresses
/// of `a` and `b`, by `link`, each device writing its packets to its `pcap`
/// file; returns the packets the two drivers sent.
fn traffic(a: &LoopbackLease, b: &LoopbackLease, pcap: [Option<PathBuf>; 2], link: Link) -> u64 {
    let [pa, pb] = pcap;
    let x = open(a, pa, link);
    let y = open(b, pb, link);
    connect_pair(&x, &y, (1, 2));
    for len in [0u32, 100, 3000] {
        let r = [y.mr.sge(0, len)];
        y.qp.post_recv(&RecvWr { wr_id: 1, sg_list: &r }).unwrap();
        let s = [x.mr.sge(0, len)];
        x.qp.post_send(&SendWr::new(2, WrOpcode::Send, SendFlags::SIGNALED, Payload::Sges(&s))).unwrap();
        assert_eq!(wait_one(&x.cq).status, WcStatus::Success);
        assert_eq!(wait_one(&y.cq).status, WcStatus::Success);
    }
    x.mr.write(0, &(0..256 * 1024).map(|i| (i * 7) as u8).collect::<Vec<_>>()).unwrap();
    let s = [x.mr.sge(0, 256 * 1024)];
    let mut wr = SendWr::new(3, WrOpcode::RdmaWrite, SendFlags::SIGNALED, Payload::Sges(&s));
    (wr.remote_addr, wr.rkey) = (y.mr.addr(), y.mr.rkey());
    x.qp.post_send(&wr).unwrap();
    assert_eq!(wait_one(&x.cq).status, WcStatus::Success);
    let r = [x.mr.sge(512 * 1024, 64 * 1024)];
    let mut wr = SendWr::new(4, WrOpcode::RdmaRead, SendFlags::SIGNALED, Payload::Sges(&r));
    (wr.remote_addr, wr.rkey) = (y.mr.addr(), y.mr.rkey());
    x.qp.post_send(&wr).unwrap();
    assert_eq!(wait_one(&x.cq).status, WcStatus::Success);
    assert_eq!(x.mr.to_vec(512 * 1024, 65536).unwrap(), x.mr.to_vec(0, 65536).unwrap());
    std::thread::sleep(Duration::from_millis(50));
    let (dx, dy) = (x.ctx.driver_stats(), y.ctx.driver_stats());
    let sent = dx.tx_packets + dy.tx_packets;
    match link {
        Link::Udp => assert!(dx.tx_messages < dx.tx_packets, "the WRITE's packets left in GSO sends: {dx:?}"),
        Link::Local => {
            assert_eq!(dx.tx_local + dy.tx_local, sent, "every packet through memory: {dx:?}");
            assert_eq!(dx.tx_messages + dy.tx_messages, 0);
        }
    }
    sent
}

/// Runs `softroce decode -q FILE`: returns (exit ok, summary line).
fn decode(file: &Path) -> (bool, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_softroce")).args(["decode", "-q"]).arg(file).output().unwrap();
    (out.status.success(), String::from_utf8(out.stdout).unwrap().trim().to_string())
}

fn tmp(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("softroce-capture-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir.join(name)
}

#[test]
fn a_tshark_capture_on_loopback_decodes_with_every_icrc_ok() {
    let file = tmp("lo.pcap");
    let (la, lb) = (lease(), lease());
    // Only the traffic of this test's devices: every packet has `a` at one end.
    let filter = format!("udp port 4791 and host {}", la.addr());
    let mut tshark = match Command::new("tshark")
        .args(["-i", "lo", "-f", &filter, "-w"])
        .arg(&file)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
    {
        Ok(c) => c,
        Err(e) => panic!("tshark is needed for this test (.ci/run installs it): {e}"),
    };
    // tshark says "Capture started" once dumpcap listens.
    let mut err = tshark.stderr.take().unwrap();
    let ready = std::thread::spawn(move || {
        use std::io::Read;
        let mut seen = Vec::new();
        let mut b = [0u8; 256];
        while let Ok(n) = err.read(&mut b) {
            if n == 0 {
                break;
            }
            seen.extend_from_slice(&b[..n]);
            if String::from_utf8_lossy(&seen).contains("Capture started") {
                return (true, String::from_utf8_lossy(&seen).into_owned());
            }
        }
        (false, String::from_utf8_lossy(&seen).into_owned())
    });
    let (ok, msg) = ready.join().unwrap();
    assert!(ok, "tshark did not start capturing: {msg}");
    // tcpdump and tshark see what crosses the kernel: the socket link.
    let sent = traffic(&la, &lb, [None, None], Link::Udp);
    std::thread::sleep(Duration::from_millis(300));
    let _ = Command::new("kill").args(["-INT", &tshark.id().to_string()]).status();
    let t = Instant::now();
    while tshark.try_wait().unwrap().is_none() && t.elapsed() < Duration::from_secs(10) {
        std::thread::sleep(Duration::from_millis(20));
    }
    let _ = tshark.kill();
    let (ok, summary) = decode(&file);
    println!("tshark capture: {summary} ({sent} packets sent by the drivers)");
    assert!(ok, "softroce decode flagged the capture: {summary}");
    let n: u64 = summary.split_whitespace().next().unwrap().parse().unwrap();
    assert_eq!(n, sent, "every packet sent was captured and decoded: {summary}");
    assert_eq!(summary, format!("{n} packets, {n} icrc ok, 0 icrc bad, 0 malformed"));
}

/// Over either link: over the local link, a device with a capture asks its
/// peers for ICRCs and computes its own, so the file is what the wire would
/// have carried.
#[test]
fn softroce_pcap_writes_what_was_sent_and_received_with_valid_icrcs() {
    for link in [Link::Local, Link::Udp] {
        pcap_of_both_sides(link);
    }
}

fn pcap_of_both_sides(link: Link) {
    let base = tmp(&format!("tap-{link:?}.pcap"));
    let (la, lb) = (lease(), lease());
    let sent = traffic(&la, &lb, ["a", "b"].map(|side| Some(base.with_extension(format!("{side}.pcap")))), link);
    for side in ["a", "b"] {
        let (ok, summary) = decode(&base.with_extension(format!("{side}.pcap")));
        println!("SOFTROCE_PCAP {link:?} side {side}: {summary}");
        assert!(ok, "{summary}");
        assert!(summary.contains(" 0 icrc bad, 0 malformed"), "{summary}");
    }
    // Each side wrote what it sent and what it received: together, every
    // packet twice.
    let count = |side: &str| -> u64 {
        let (_, s) = decode(&base.with_extension(format!("{side}.pcap")));
        s.split_whitespace().next().unwrap().parse().unwrap()
    };
    assert_eq!(count("a") + count("b"), 2 * sent);
}

/// Two devices of one process with one `SOFTROCE_PCAP` file (UCX, and so
/// Open MPI's ranks, open every device): both write into it, each frame
/// whole. Each device used to create the file anew and write over the
/// other's frames.
#[test]
fn two_devices_of_one_process_share_one_softroce_pcap_file() {
    let file = tmp("shared.pcap");
    let (la, lb) = (lease(), lease());
    let sent = traffic(&la, &lb, [Some(file.clone()), Some(file.clone())], Link::Local);
    let (ok, summary) = decode(&file);
    println!("one SOFTROCE_PCAP for two devices: {summary}");
    assert!(ok, "{summary}");
    let n = 2 * sent;
    assert_eq!(summary, format!("{n} packets, {n} icrc ok, 0 icrc bad, 0 malformed"));
}
