//! `softroce decode`: a RoCEv2 listing with ICRC verification, the check
//! Wireshark does not make.

use std::fmt::Write as _;
use std::io::Write as _;
use std::path::Path;
use std::process::ExitCode;

use roce_capture::{Classified, Frame, RoceDatagram, classify, read_file};
use roce_wire::{NakCode, Packet, Syndrome, WireError};

/// Counts for the summary line.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Summary {
    /// RoCEv2 packets seen (UDP destination port 4791).
    pub packets: usize,
    /// Packets whose ICRC verified.
    pub icrc_ok: usize,
    /// Well-formed packets whose ICRC did not verify.
    pub icrc_bad: usize,
    /// Packets that are not valid RoCEv2 (or whose IP/UDP framing is broken).
    pub malformed: usize,
}

impl std::fmt::Display for Summary {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} packets, {} icrc ok, {} icrc bad, {} malformed",
            self.packets, self.icrc_ok, self.icrc_bad, self.malformed
        )
    }
}

/// Runs the subcommand.
pub fn run(file: &Path, quiet: bool, mtu: Option<usize>) -> ExitCode {
    let frames = match read_file(file) {
        Ok(f) => f,
        Err(e) => {
            eprintln!("softroce decode: {e}");
            return ExitCode::from(2);
        }
    };
    let mut out = std::io::stdout().lock();
    let summary = decode(&frames, mtu, |line, good| {
        if !quiet || !good {
            // A closed pipe (e.g. `| head`) just ends the listing.
            let _ = writeln!(out, "{line}");
        }
    });
    let _ = writeln!(out, "{summary}");
    if summary.icrc_bad + summary.malformed > 0 { ExitCode::FAILURE } else { ExitCode::SUCCESS }
}

/// Decodes every RoCEv2 packet of `frames`, handing each line and whether
/// the packet is good to `emit`, and returns the counts.
pub fn decode(frames: &[Frame], mtu: Option<usize>, mut emit: impl FnMut(&str, bool)) -> Summary {
    let mut s = Summary::default();
    let t0 = frames.first().map_or(0.0, |f| f.time);
    for frame in frames {
        let prefix = format!("{:>4} {:.6}", frame.number, frame.time - t0);
        let (line, good) = match classify(frame) {
            Classified::NotRoce => continue,
            Classified::Malformed(why) => {
                s.malformed += 1;
                (format!("{prefix} MALFORMED frame: {why}"), false)
            }
            Classified::Roce(d) => {
                let head = format!("{prefix} {} -> {}", d.src, d.dst);
                let whole = describe(&d, mtu);
                let segments = match &whole {
                    Ok((_, Ok(()))) => None,
                    _ => d.gso_segments(),
                };
                let Some(segments) = segments else {
                    let (line, good) = verdict(&head, whole, &mut s);
                    s.packets += 1;
                    emit(&line, good);
                    continue;
                };
                let n = segments.len();
                for (i, seg) in segments.iter().enumerate() {
                    let (line, good) = verdict(&format!("{head} gso[{}/{n}]", i + 1), describe(seg, mtu), &mut s);
                    s.packets += 1;
                    emit(&line, good);
                }
                continue;
            }
        };
        s.packets += 1;
        emit(&line, good);
    }
    s
}

/// Counts a described packet and formats its line; `true` if it is good.
fn verdict(head: &str, d: Result<(String, Result<(), WireError>), WireError>, s: &mut Summary) -> (String, bool) {
    match d {
        Ok((text, Ok(()))) => {
            s.icrc_ok += 1;
            (format!("{head} {text} icrc ok"), true)
        }
        Ok((text, Err(WireError::BadIcrc { found, computed }))) => {
            s.icrc_bad += 1;
            (format!("{head} {text} icrc BAD (carries {found:#010x}, computed {computed:#010x})"), false)
        }
        Ok((_, Err(e))) | Err(e) => {
            s.malformed += 1;
            (format!("{head} MALFORMED: {e}"), false)
        }
    }
}

/// The packet's fields, and the outcome of its ICRC check.
fn describe(d: &RoceDatagram<'_>, mtu: Option<usize>) -> Result<(String, Result<(), WireError>), WireError> {
    let p = Packet::new_checked(d.payload)?;
    p.check_path_mtu(mtu)?;
    let b = p.bth();
    let mut t =
        format!("{} qpn={:#08x} psn={} ackreq={}", b.opcode(), b.dest_qpn(), b.psn().value(), u8::from(b.ack_req()));
    if b.solicited() {
        t.push_str(" se=1");
    }
    if let Some(h) = p.deth() {
        let _ = write!(t, " qkey={:#x} src_qp={:#08x}", h.qkey(), h.src_qpn());
    }
    if let Some(h) = p.feth() {
        let _ = write!(t, " flush_sel={} flush_plt={}", h.selectivity_level(), h.placement_type());
    }
    if let Some(h) = p.reth() {
        let _ = write!(t, " va={:#x} rkey={:#x} dmalen={}", h.va(), h.rkey(), h.dma_len());
    }
    if let Some(h) = p.atomic_eth() {
        let _ =
            write!(t, " va={:#x} rkey={:#x} swap_add={:#x} compare={:#x}", h.va(), h.rkey(), h.swap_add(), h.compare());
    }
    if let Some(h) = p.aeth() {
        let _ = write!(t, " {} msn={}", syndrome(h.syndrome()), h.msn());
    }
    if let Some(h) = p.atomic_ack_eth() {
        let _ = write!(t, " orig={:#x}", h.orig());
    }
    if let Some(h) = p.immdt() {
        let _ = write!(t, " imm={:#010x}", h.imm());
    }
    if let Some(h) = p.ieth() {
        let _ = write!(t, " inv_rkey={:#x}", h.rkey());
    }
    let _ = write!(t, " len={}", p.payload().len());
    let icrc = d.icrc_hasher().and_then(|h| p.verify_icrc(h));
    Ok((t, icrc))
}

fn syndrome(s: Syndrome) -> String {
    match s {
        Syndrome::Ack { credits } => format!("ACK credits={credits}"),
        Syndrome::RnrNak { timer } => format!("RNR-NAK timer={} ({:?})", timer.0, timer.duration()),
        Syndrome::Nak(code) => {
            let name = match code {
                NakCode::PsnSequenceError => "PSN-sequence-error".to_string(),
                NakCode::InvalidRequest => "invalid-request".to_string(),
                NakCode::RemoteAccessError => "remote-access-error".to_string(),
                NakCode::RemoteOperationalError => "remote-operational-error".to_string(),
                NakCode::InvalidRdRequest => "invalid-RD-request".to_string(),
                NakCode::Reserved(c) => format!("reserved-{c}"),
            };
            format!("NAK {name}")
        }
        Syndrome::Reserved(b) => format!("syndrome={b:#04x}(reserved)"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn golden(name: &str) -> Vec<Frame> {
        let p = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/data/golden-pcaps").join(name);
        read_file(&p).unwrap()
    }

    fn lines(frames: &[Frame]) -> (Vec<String>, Summary) {
        let mut v = Vec::new();
        let s = decode(frames, Some(1024), |l, _| v.push(l.to_string()));
        (v, s)
    }

    #[test]
    fn listing_of_a_pyverbs_capture() {
        let (v, s) = lines(&golden("rc_send_imm_write_imm_pyverbs.pcap.gz"));
        assert_eq!(s, Summary { packets: 4, icrc_ok: 4, icrc_bad: 0, malformed: 0 });
        assert!(v[0].contains("10.77.0.3:49441 -> 10.77.0.2:4791 RC_SEND_ONLY_WITH_IMMEDIATE qpn=0x000011"));
        assert!(v[0].ends_with("ackreq=1 imm=0x11223344 len=2 icrc ok"), "{}", v[0]);
        assert!(v[1].contains("RC_ACKNOWLEDGE") && v[1].contains("ACK credits=31 msn=1 len=0 icrc ok"), "{}", v[1]);
        assert!(v[2].contains("RC_RDMA_WRITE_ONLY_WITH_IMMEDIATE") && v[2].contains("dmalen=16"), "{}", v[2]);
        assert!(v[2].ends_with("imm=0x55667788 len=16 icrc ok"), "{}", v[2]);
    }

    #[test]
    fn corrupted_and_cut_packets_are_reported() {
        let mut frames = golden("rc_pingpong_s64_n5.pcap.gz");
        let roce: Vec<usize> =
            (0..frames.len()).filter(|i| matches!(classify(&frames[*i]), Classified::Roce(_))).collect();
        let (a, b) = (roce[0], roce[1]);
        let n = frames[a].data.len();
        frames[a].data[n - 10] ^= 0x01; // a payload byte
        let m = frames[b].data.len();
        frames[b].data.truncate(m - 2); // cut inside the ICRC
        let (v, s) = lines(&frames);
        assert_eq!(s, Summary { packets: 20, icrc_ok: 18, icrc_bad: 1, malformed: 1 });
        assert!(v[0].contains("icrc BAD (carries"), "{}", v[0]);
        assert!(v[1].contains("MALFORMED"), "{}", v[1]);
        assert_eq!(s.to_string(), "20 packets, 18 icrc ok, 1 icrc bad, 1 malformed");
    }
}
