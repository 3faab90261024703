//! softroce's CM MADs, as `SOFTROCE_PCAP` captured them in a real run,
//! against the kernel's in the golden captures: field for field, but for
//! the fields that must differ between two runs or two hosts (comm IDs,
//! TIDs, the service port, CA GUIDs, QPNs, PSNs, GIDs, the flow label
//! derived from the ports, the addresses in the rdma_cm header).

use std::fmt::Write as _;
use std::net::IpAddr;
use std::path::{Path, PathBuf};

use roce_capture::{Classified, classify, read_file};
use roce_cm::wire::mad::{GSI_QKEY, GSI_QPN};
use roce_cm::wire::{CmMad, CmMessage, CmaHdrRepr};
use roce_wire::{Opcode, Packet};

/// A CM MAD of a capture: who sent it, its QP 1 PSN, the MAD.
#[derive(Debug)]
pub struct Mad {
    pub src: IpAddr,
    pub psn: u32,
    pub mad: CmMad,
}

/// A golden capture of the repository.
pub fn golden(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/data/golden-pcaps").join(format!("{name}.pcap.gz"))
}

/// Every CM MAD of `pcap`, in order, each checked for rdma_cm's framing
/// (UD SEND_ONLY to QP 1 from QP 1, P_Key 0xffff, AckReq, Q_Key 0x80010000).
pub fn cm_mads(pcap: &Path) -> Vec<Mad> {
    let frames = read_file(pcap).unwrap_or_else(|e| panic!("{}: {e}", pcap.display()));
    let mut out = Vec::new();
    for f in &frames {
        let Classified::Roce(d) = classify(f) else { continue };
        let p = Packet::new_checked(d.payload).unwrap_or_else(|e| panic!("frame {}: {e}", f.number));
        let bth = p.bth();
        if bth.dest_qpn() != GSI_QPN {
            continue;
        }
        assert_eq!(bth.opcode(), Opcode::UD_SEND_ONLY, "frame {}", f.number);
        assert_eq!((bth.pkey(), bth.ack_req()), (0xffff, true), "frame {}", f.number);
        let deth = p.deth().expect("a DETH");
        assert_eq!((deth.qkey(), deth.src_qpn()), (GSI_QKEY, GSI_QPN), "frame {}", f.number);
        let mad = CmMad::parse(p.payload()).unwrap_or_else(|e| panic!("frame {}: {e}", f.number));
        out.push(Mad { src: d.src.ip(), psn: bth.psn().value(), mad });
    }
    out
}

/// `ours` with the fields that must differ taken from `theirs`, and the
/// names of those that did differ.
fn with_run_fields_of(ours: &CmMad, theirs: &CmMad) -> (CmMad, Vec<&'static str>) {
    let mut m = *ours;
    let mut took = Vec::new();
    let mut take = |name: &'static str, differ: bool| {
        if differ {
            took.push(name);
        }
    };
    take("TID", m.header.tid != theirs.header.tid);
    m.header.tid = theirs.header.tid;
    m.message = match (m.message, theirs.message) {
        (CmMessage::Req(mut a), CmMessage::Req(b)) => {
            take("comm ID", a.local_comm_id != b.local_comm_id);
            take("service ID (port)", a.service_id != b.service_id);
            take("CA GUID", a.local_ca_guid != b.local_ca_guid);
            take("QPN", a.local_qpn != b.local_qpn);
            take("PSN", a.starting_psn != b.starting_psn);
            take(
                "GIDs",
                (a.primary_path.local_gid, a.primary_path.remote_gid)
                    != (b.primary_path.local_gid, b.primary_path.remote_gid),
            );
            take("flow label (ports)", a.primary_path.flow_label != b.primary_path.flow_label);
            (a.local_comm_id, a.service_id, a.local_ca_guid) = (b.local_comm_id, b.service_id, b.local_ca_guid);
            (a.local_qpn, a.starting_psn) = (b.local_qpn, b.starting_psn);
            a.primary_path.local_gid = b.primary_path.local_gid;
            a.primary_path.remote_gid = b.primary_path.remote_gid;
            a.primary_path.flow_label = b.primary_path.flow_label;
            // The rdma_cm header: same layout and version, the run's addresses.
            let (ha, hb) =
                (CmaHdrRepr::parse(&a.private_data).expect("a cma_hdr"), CmaHdrRepr::parse(&b.private_data).unwrap());
            take("cma_hdr port and addresses", ha != hb);
            let mut h = [0u8; roce_cm::wire::CMA_HDR_LEN];
            hb.emit(&mut h);
            a.private_data[..h.len()].copy_from_slice(&h);
            CmMessage::Req(a)
        }
        (CmMessage::Rep(mut a), CmMessage::Rep(b)) => {
            take("comm IDs", (a.local_comm_id, a.remote_comm_id) != (b.local_comm_id, b.remote_comm_id));
            take("CA GUID", a.local_ca_guid != b.local_ca_guid);
            take("QPN", a.local_qpn != b.local_qpn);
            take("PSN", a.starting_psn != b.starting_psn);
            (a.local_comm_id, a.remote_comm_id, a.local_ca_guid) = (b.local_comm_id, b.remote_comm_id, b.local_ca_guid);
            (a.local_qpn, a.starting_psn) = (b.local_qpn, b.starting_psn);
            CmMessage::Rep(a)
        }
        (CmMessage::Rtu(mut a), CmMessage::Rtu(b)) => {
            take("comm IDs", (a.local_comm_id, a.remote_comm_id) != (b.local_comm_id, b.remote_comm_id));
            (a.local_comm_id, a.remote_comm_id) = (b.local_comm_id, b.remote_comm_id);
            CmMessage::Rtu(a)
        }
        (CmMessage::Dreq(mut a), CmMessage::Dreq(b)) => {
            take("comm IDs", (a.local_comm_id, a.remote_comm_id) != (b.local_comm_id, b.remote_comm_id));
            take("QPN", a.remote_qpn != b.remote_qpn);
            (a.local_comm_id, a.remote_comm_id, a.remote_qpn) = (b.local_comm_id, b.remote_comm_id, b.remote_qpn);
            CmMessage::Dreq(a)
        }
        (CmMessage::Drep(mut a), CmMessage::Drep(b)) => {
            take("comm IDs", (a.local_comm_id, a.remote_comm_id) != (b.local_comm_id, b.remote_comm_id));
            (a.local_comm_id, a.remote_comm_id) = (b.local_comm_id, b.remote_comm_id);
            CmMessage::Drep(a)
        }
        (o, t) => panic!("softroce sent {:?} where Linux sent {:?}", o.attr_id(), t.attr_id()),
    };
    (m, took)
}

/// Compares `ours` (one side's capture of a run) with the golden
/// exchange `theirs` (`ours_client` / `their_client` tell the active side):
/// - the first `ordered` MADs are the kernel's, in the same order, from the
///   same sides, with the same QP 1 PSNs;
/// - the rest are a teardown whose order and initiator are a race between
///   the two processes' exits (each end may send its DREQ, they may cross,
///   and then each answers the other's with a DREP, as IBTA 12.6.11 has
///   it): each is compared with the kernel's teardown MAD of its attribute;
/// - at least `at_least` are there (a process that exits before the last
///   answer comes does not capture it: the kernel's CM outlives a process,
///   a user-space one does not);
/// - each is equal to its kernel MAD byte for byte once the run's fields
///   are the golden ones.
///
/// Returns the printout: each MAD and which fields were the run's.
pub fn compare(
    ours: &[Mad],
    ours_client: IpAddr,
    theirs: &[Mad],
    their_client: IpAddr,
    ordered: usize,
    at_least: usize,
) -> String {
    let side = |m: &Mad, client| if m.src == client { "client" } else { "server" };
    let seq = |v: &[Mad], client| -> Vec<(&str, roce_cm::wire::AttributeId, u32)> {
        v.iter().map(|m| (side(m, client), m.mad.message.attr_id(), m.psn)).collect()
    };
    let (o, t) = (seq(ours, ours_client), seq(theirs, their_client));
    let k = ordered.min(o.len());
    assert!(
        o.len() >= at_least && o[..k] == t[..k],
        "the MADs, their senders and QP 1 PSNs:\nours   {o:?}\nkernel {t:?}"
    );
    let mut out = String::new();
    for (i, m) in ours.iter().enumerate() {
        let t = if i < k {
            &theirs[i]
        } else {
            theirs[k..].iter().find(|t| t.mad.message.attr_id() == m.mad.message.attr_id()).unwrap_or_else(|| {
                panic!("the kernel's teardown has no {:?}:\nours   {o:?}\nkernel {t:?}", m.mad.message.attr_id())
            })
        };
        let (n, took) = with_run_fields_of(&m.mad, &t.mad);
        assert_eq!(
            n.to_bytes(),
            t.mad.to_bytes(),
            "{:?} differs from the kernel's beyond the run's fields:\nours   {:?}\nkernel {:?}",
            t.mad.message.attr_id(),
            m.mad,
            t.mad
        );
        let _ = writeln!(
            out,
            "{:>6} {:<5?} psn {}{}: equal to the kernel's but for {}",
            side(m, ours_client),
            m.mad.message.attr_id(),
            m.psn,
            if i < k { "" } else { " (teardown)" },
            took.join(", ")
        );
    }
    out
}

/// Checks that every RoCE packet of `pcap` left from the UDP source port
/// Linux rxe gives it: a MAD from QP 1's (55410), a packet of a connection
/// from the fold of its REQ's flow label, at both ends (the connection is
/// found by the destination QPN: the REQ's or the REP's QP). Holds for the
/// kernel's captures and for softroce's; returns a line per port seen.
/// A QP is known by its host's address and its QPN (the REQ's sender's,
/// the REP's sender's).
pub fn check_source_ports(pcap: &Path) -> String {
    let frames = read_file(pcap).unwrap_or_else(|e| panic!("{}: {e}", pcap.display()));
    // (address, QPN) -> the flow label of the connection it belongs to.
    let mut label = std::collections::HashMap::new();
    let mut reqs = std::collections::HashMap::new();
    for m in cm_mads(pcap) {
        match m.mad.message {
            CmMessage::Req(r) => {
                label.insert((m.src, r.local_qpn), r.primary_path.flow_label);
                reqs.insert(r.local_comm_id, r.primary_path.flow_label);
            }
            CmMessage::Rep(r) => {
                if let Some(fl) = reqs.get(&r.remote_comm_id) {
                    label.insert((m.src, r.local_qpn), *fl);
                }
            }
            _ => {}
        }
    }
    let mut seen = std::collections::BTreeMap::new();
    for f in &frames {
        let Classified::Roce(d) = classify(f) else { continue };
        let p = Packet::new_checked(d.payload).unwrap_or_else(|e| panic!("frame {}: {e}", f.number));
        let q = p.bth().dest_qpn();
        let want = if q == GSI_QPN {
            roce_proto::qp::rxe_init_sport(GSI_QPN)
        } else {
            let fl = label
                .get(&(d.dst.ip(), q))
                .unwrap_or_else(|| panic!("frame {}: QP {q:#x} of {} is no connection's", f.number, d.dst.ip()));
            roce_proto::qp::flow_label_to_udp_sport(*fl)
        };
        assert_eq!(d.src.port(), want, "frame {} from {} to QP {q:#x}", f.number, d.src);
        *seen.entry((d.src.port(), q == GSI_QPN)).or_insert(0) += 1;
    }
    let mut out = String::new();
    for ((port, mad), n) in seen {
        let _ = writeln!(out, "  {n:4} packets from port {port} ({})", if mad { "QP 1, MADs" } else { "RC" });
    }
    out
}
