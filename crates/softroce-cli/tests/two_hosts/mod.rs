//! Two network namespaces joined by a veth pair, removed when dropped: two
//! hosts for the tests that need a second machine (the rdma_cm tools in
//! `rdma_core_tools.rs`, Open MPI's ranks in `middleware.rs`), as a user
//! tries them without one.

use std::process::Command;

/// The two hosts: namespace names, addresses, and the name of the link's
/// interface, the same on both (as two machines' `eth1`, so one device
/// name, `softroce_<iface>`, names the link's device on either).
pub struct TwoHosts {
    pub ns: [String; 2],
    pub addr: [&'static str; 2],
    pub iface: String,
}

impl TwoHosts {
    /// `None` (after saying why) unless this is root with `ip`; under CI
    /// (root with iproute2) a missing one fails the test.
    pub fn new(tag: &str) -> Option<TwoHosts> {
        let root = Command::new("id").arg("-u").output().is_ok_and(|o| o.stdout.starts_with(b"0\n"));
        let ip = Command::new("ip").arg("-V").output().is_ok_and(|o| o.status.success());
        if !(root && ip) {
            let msg = format!("{tag}: needs root and ip (iproute2)");
            assert!(std::env::var_os("CI").is_none(), "CI runs as root with iproute2: {msg}");
            eprintln!("skipped: {msg}");
            return None;
        }
        let p = format!("sr{}{tag}", std::process::id() % 100_000);
        let h = TwoHosts {
            ns: [format!("{p}a"), format!("{p}b")],
            addr: ["10.234.0.1", "10.234.0.2"],
            iface: format!("{p}v"),
        };
        let run = |args: &[&str]| {
            let o = Command::new("ip").args(args).output().expect("ip runs");
            assert!(o.status.success(), "ip {}: {}", args.join(" "), String::from_utf8_lossy(&o.stderr));
        };
        let (a, b, v) = (h.ns[0].as_str(), h.ns[1].as_str(), h.iface.as_str());
        run(&["netns", "add", a]);
        run(&["netns", "add", b]);
        // Each end is made in its namespace: the one name twice never meets.
        run(&["link", "add", v, "netns", a, "type", "veth", "peer", "name", v, "netns", b]);
        for (ns, addr) in [(a, h.addr[0]), (b, h.addr[1])] {
            run(&["-n", ns, "addr", "add", &format!("{addr}/24"), "dev", v]);
            run(&["-n", ns, "link", "set", v, "up"]);
            run(&["-n", ns, "link", "set", "lo", "up"]);
        }
        Some(h)
    }
}

impl Drop for TwoHosts {
    fn drop(&mut self) {
        for ns in &self.ns {
            let _ = Command::new("ip").args(["netns", "del", ns]).output();
        }
    }
}
