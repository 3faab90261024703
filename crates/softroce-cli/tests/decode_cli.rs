//! `softroce decode` as a user runs it: listings, summaries and exit codes.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Duration;

use roce_capture::{Classified, PcapWriter, classify, linktype, read_file};

fn data(rel: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/data").join(rel)
}

fn decode(args: &[&str], file: &Path) -> (Output, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_softroce")).arg("decode").args(args).arg(file).output().unwrap();
    let stdout = String::from_utf8(out.stdout.clone()).unwrap();
    (out, stdout)
}

#[test]
fn every_golden_packet_is_icrc_ok() {
    for entry in std::fs::read_dir(data("golden-pcaps")).unwrap() {
        let path = entry.unwrap().path();
        let Some(name) = path.file_name().unwrap().to_str().unwrap().strip_suffix(".pcap.gz") else { continue };
        let expected =
            std::fs::read_to_string(data(&format!("golden-pcaps/tshark/{name}.txt"))).unwrap().lines().count();
        let (out, stdout) = decode(&["--mtu", "1024"], &path);
        assert!(out.status.success(), "{name}: {stdout}");
        let lines: Vec<&str> = stdout.lines().collect();
        assert_eq!(lines.len(), expected + 1, "{name}: one line per packet and a summary");
        assert!(lines[..expected].iter().all(|l| l.ends_with(" icrc ok")), "{name}");
        assert_eq!(lines[expected], format!("{expected} packets, {expected} icrc ok, 0 icrc bad, 0 malformed"));
    }
}

#[test]
fn a_corrupted_copy_is_icrc_bad_and_fails() {
    let frames = read_file(&data("golden-pcaps/rc_pingpong.pcap.gz")).unwrap();
    let dir = std::env::temp_dir().join(format!("softroce-decode-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("corrupted.pcap");
    let mut w = PcapWriter::new(std::fs::File::create(&path).unwrap(), linktype::ETHERNET).unwrap();
    let mut corrupted = Vec::new();
    for f in &frames {
        let mut bytes = f.data.clone();
        // Flip one payload bit in every 10th RoCE frame.
        if matches!(classify(f), Classified::Roce(_)) && f.number % 10 == 0 {
            let n = bytes.len();
            bytes[n - 20] ^= 0x04;
            corrupted.push(f.number);
        }
        w.write_frame(Duration::from_secs_f64(f.time), &bytes).unwrap();
    }
    w.into_inner().unwrap();
    let (out, stdout) = decode(&[], &path);
    assert_eq!(out.status.code(), Some(1));
    let bad: Vec<usize> = stdout
        .lines()
        .filter(|l| l.contains("icrc BAD"))
        .map(|l| l.split_whitespace().next().unwrap().parse().unwrap())
        .collect();
    assert_eq!(bad, corrupted);
    let n = 108;
    assert!(stdout.ends_with(&format!(
        "{n} packets, {} icrc ok, {} icrc bad, 0 malformed\n",
        n - bad.len(),
        bad.len()
    )));
    // --quiet prints only the bad packets and the summary.
    let (_, quiet) = decode(&["-q"], &path);
    assert_eq!(quiet.lines().count(), bad.len() + 1);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn roce_check_captures_pcap_and_pcapng() {
    for file in ["valid.pcap", "valid.pcapng"] {
        let (out, stdout) = decode(&[], &data(&format!("roce-check/{file}")));
        assert!(out.status.success(), "{file}: {stdout}");
        assert!(stdout.contains(" CNP qpn="), "{file}");
        assert_eq!(stdout.matches(" gso[").count(), 3, "{file}: the GSO super-datagram splits in 3");
        assert!(stdout.contains("[fd00:4791::1]:49153 -> [fd00:4791::2]:4791 RC_SEND_ONLY"), "{file}");
        assert!(stdout.ends_with("19 packets, 19 icrc ok, 0 icrc bad, 0 malformed\n"), "{file}: {stdout}");
    }
    let (out, stdout) = decode(&[], &data("roce-check/bad.pcap"));
    assert_eq!(out.status.code(), Some(1));
    assert!(stdout.ends_with("13 packets, 0 icrc ok, 7 icrc bad, 6 malformed\n"), "{stdout}");
    let (out, stdout) = decode(&["--mtu", "4096"], &data("roce-check/kernel-gso-veth.pcap"));
    assert!(out.status.success());
    assert!(stdout.ends_with("4 packets, 4 icrc ok, 0 icrc bad, 0 malformed\n"), "{stdout}");
}

#[test]
fn unreadable_input_is_a_clear_error() {
    let out = Command::new(env!("CARGO_BIN_EXE_softroce")).args(["decode", "/nonexistent.pcap"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("cannot read /nonexistent.pcap"));
    let out = Command::new(env!("CARGO_BIN_EXE_softroce"))
        .args(["decode"])
        .arg(data("roce-check/README.md"))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("not a pcap or pcapng capture"));
    let out = Command::new(env!("CARGO_BIN_EXE_softroce")).args(["decode", "--mtu", "1000", "x"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("1000 is not a RoCE path MTU"));
}

/// A capture of softroce's wide MTU (`perf --wide-mtu` on loopback, whose
/// 65,536-byte link gives the largest, 8,936): its FIRST and MIDDLE packets
/// are whole under `--wide-mtu 8936` and break IBTA's rule without it.
#[test]
fn a_capture_of_the_wide_mtu_decodes_under_wide_mtu() {
    let dir = std::env::temp_dir().join(format!("softroce-decode-wide-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let pcap = dir.join("wide.pcap");
    let perf = Command::new(env!("CARGO_BIN_EXE_softroce"))
        .args(["perf", "write-bw", "--loopback", "--wide-mtu", "-s", "20000", "-n", "3"])
        .env("SOFTROCE_PCAP", &pcap)
        .output()
        .unwrap();
    let perf_out = String::from_utf8_lossy(&perf.stdout);
    assert!(perf.status.success(), "{perf_out}{}", String::from_utf8_lossy(&perf.stderr));
    assert!(perf_out.contains(" Mtu             : 8936[B]"), "{perf_out}");
    let (out, stdout) = decode(&["--wide-mtu", "8936"], &pcap);
    assert!(out.status.success(), "{stdout}");
    // 20,000 bytes: 8,936 + 8,936 + 2,128.
    let firsts = stdout.lines().filter(|l| l.contains("RC_RDMA_WRITE_FIRST") && l.contains(" len=8936 ")).count();
    let lasts = stdout.lines().filter(|l| l.contains("RC_RDMA_WRITE_LAST") && l.contains(" len=2128 ")).count();
    assert!(firsts >= 3 && firsts == lasts, "{stdout}");
    assert!(stdout.trim_end().ends_with(" 0 icrc bad, 0 malformed"), "{stdout}");
    let (out, stdout) = decode(&[], &pcap);
    assert_eq!(out.status.code(), Some(1), "IBTA's path MTUs refuse them:\n{stdout}");
    assert!(stdout.contains("MALFORMED"), "{stdout}");
    let (out, _) = decode(&["--wide-mtu", "1437"], &pcap);
    assert_eq!(out.status.code(), Some(2), "a wide MTU is a multiple of 4");
    std::fs::remove_dir_all(&dir).unwrap();
}
