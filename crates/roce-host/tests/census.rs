//! What members publish of their resources is read back by any process
//! of the user ([`roce_host::resources::census`], behind `softroce rdma
//! resource show`): live members only, their own pids, and a slot someone
//! garbled is skipped and counted, never trusted. The device is on
//! 127.0.0.1 with a UDP port of its own.

use std::net::{Ipv4Addr, SocketAddr, UdpSocket};
use std::os::unix::fs::FileExt;

use roce_host::resources::{Counts, QpEntry, Resources, census};
use roce_host::{Member, device_file, layout};

fn fresh_addr() -> SocketAddr {
    let s = UdpSocket::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
    s.local_addr().unwrap()
}

#[test]
fn the_census_counts_each_live_members_published_resources() {
    let addr = fresh_addr();
    assert_eq!(census(addr).unwrap(), Default::default(), "no file: nobody holds anything");
    let (a, a_sock) = Member::join(addr).unwrap();
    let (b, b_sock) = Member::join(addr).unwrap();
    // Joined, nothing published yet: two contexts holding nothing.
    let c = census(addr).unwrap();
    assert_eq!((c.members.len(), c.unpublished, c.skipped), (2, 0, 0), "{c:?}");
    assert_eq!(c.totals(), Counts::default());
    assert!(c.members.iter().all(|m| m.pid == std::process::id()));

    let qp = QpEntry {
        qpn: 0x1011,
        qp_type: 2,
        state: 3,
        port: 1,
        remote: Some((0x2011, 5)),
        sq_psn: 9,
        path_mig_state: Some(0),
        pdn: 0,
    };
    a.publish(&Resources {
        counts: Counts { pd: 1, cq: 2, qp: 1, mr: 3, ..Counts::default() },
        qps: vec![qp],
        counters: vec![100, 7],
    });
    b.publish(&Resources {
        counts: Counts { pd: 2, cq: 1, cm_id: 1, ..Counts::default() },
        counters: vec![1],
        ..Resources::default()
    });
    let c = census(addr).unwrap();
    assert_eq!(c.totals(), Counts { pd: 3, cq: 3, qp: 1, cm_id: 1, mr: 3, ..Counts::default() });
    let listed: Vec<QpEntry> = c.members.iter().flat_map(|m| m.qps.clone()).collect();
    assert_eq!(listed, [qp]);
    assert_eq!(c.counters()[..2], [101, 7], "the device's counters are its members' summed");

    // Garbage in b's slot (counts past any real one): skipped and counted.
    let path = device_file(addr);
    let file = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
    let b_slot = c.members.iter().find(|m| m.counts.cm_id == 1).unwrap().slot;
    let counts_at = (layout::WORDS + 68 + b_slot * 172 + 2) * 8;
    file.write_at(&[0xff; 64], counts_at as u64).unwrap();
    let c = census(addr).unwrap();
    assert_eq!((c.members.len(), c.skipped), (1, 1), "{c:?}");
    assert_eq!(c.totals().mr, 3);

    // A member that leaves is no longer counted; its counters still are.
    a.leave(a_sock);
    b.publish(&Resources::default());
    let c = census(addr).unwrap();
    assert_eq!((c.members.len(), c.skipped), (1, 0), "{c:?}");
    assert_eq!(c.counters()[..2], [100, 7], "a's counters stay the device's after it left");
    b.leave(b_sock);
    assert_eq!(census(addr).unwrap(), Default::default(), "the last one out removed the file");
}

/// A first member writes the device file's header before it takes its
/// liveness byte: a census reading the header mid-write and the byte just
/// after must see a device being made, not one of another version (seen in
/// CI: `rdma resource show` refused while tests joined and left).
#[test]
fn a_census_beside_first_members_joining_and_leaving_never_calls_the_file_another_versions() {
    let addr = fresh_addr();
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let churn = {
        let stop = stop.clone();
        std::thread::spawn(move || {
            let mut rounds = 0u32;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let (m, sock) = Member::join(addr).unwrap();
                // Briefly, for many joins; every tenth time long enough for
                // whole censuses (a few ms each) to find it there.
                let stay = if rounds % 10 == 9 { 50 } else { 5 };
                std::thread::sleep(std::time::Duration::from_millis(stay));
                m.leave(sock);
                rounds += 1;
            }
            rounds
        })
    };
    let (mut seen, mut empty) = (0, 0);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(3);
    while std::time::Instant::now() < deadline {
        let c = census(addr).unwrap_or_else(|e| panic!("census beside a joining first member: {e}"));
        assert!(c.members.len() + c.unpublished <= 1, "one member at most: {c:?}");
        // The member is there whether or not it published its resources yet.
        if c.members.len() + c.unpublished == 0 { empty += 1 } else { seen += 1 }
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let rounds = churn.join().unwrap();
    eprintln!("joins {rounds}, censuses with the member {seen}, without {empty}");
    assert!(rounds > 100 && seen > 0 && empty > 0, "joins {rounds}, censuses with the member {seen}, without {empty}");
}
