//! Every environment variable softroce reads, in one table ([`VARS`]): its
//! name, whether a user sets it at run time or only the test suites do,
//! and what it does. Code of every crate reads a run-time variable through
//! this module's names and accessors. `tests/env.rs` checks that every
//! `SOFTROCE_*` the workspace names is listed here and that the README's
//! table lists exactly the run-time ones.

use std::ffi::OsString;
use std::path::PathBuf;

/// Who sets a variable.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scope {
    /// A user, at run time (the README's table).
    Run,
    /// A test suite or a CI script only.
    Test,
}

/// One variable.
#[derive(Debug, Clone, Copy)]
pub struct Var {
    /// `SOFTROCE_...`.
    pub name: &'static str,
    /// Who sets it.
    pub scope: Scope,
    /// What it does, in a line (the README says more).
    pub summary: &'static str,
}

/// `NAME=ADDR,...`: the devices (read by [`crate::config`]).
pub const DEVICES: &str = "SOFTROCE_DEVICES";
/// A device file to read instead of the default places.
pub const CONFIG: &str = "SOFTROCE_CONFIG";
/// The file of devices `softroce add` made.
pub const ADDED: &str = "SOFTROCE_ADDED";
/// `thread` or `inline` progress ([`crate::Options::from_env`]).
pub const PROGRESS: &str = "SOFTROCE_PROGRESS";
/// How long `Cq::wait` polls before it sleeps, in microseconds.
pub const SPIN_US: &str = "SOFTROCE_SPIN_US";
/// How long a passive side's driver thread polls after a busy pass.
pub const DRIVER_SPIN_US: &str = "SOFTROCE_DRIVER_SPIN_US";
/// A pcap file of every packet sent and received.
pub const PCAP: &str = "SOFTROCE_PCAP";
/// One line of counters on stderr when a context closes.
pub const STATS: &str = "SOFTROCE_STATS";
/// `qp` (rxe's per-QP source ports) or `device` (every packet from 4791).
pub const SRC_PORT: &str = "SOFTROCE_SRC_PORT";
/// Faults injected into received packets ([`crate::faults`]).
pub const FAULTS: &str = "SOFTROCE_FAULTS";
/// `0`: `softroce run` gives the program no sysfs view.
pub const SYSFS: &str = "SOFTROCE_SYSFS";
/// Non-empty, not `0`: the C library traces each failing verb on stderr.
pub const IBV_TRACE: &str = "SOFTROCE_IBV_TRACE";
/// A vendor part ID to report instead of rxe's 0.
pub const VENDOR_PART_ID: &str = "SOFTROCE_VENDOR_PART_ID";
/// `0`: `softroce rdma` never hands over to iproute2's `rdma`.
pub const RDMA_REAL: &str = "SOFTROCE_RDMA_REAL";
/// `udp`: packets to this process's other devices, and to other processes
/// sharing a device, go by the socket, not memory.
pub const LINK: &str = "SOFTROCE_LINK";

/// Every variable, run-time ones first in the README's order.
pub const VARS: &[Var] = &[
    Var { name: DEVICES, scope: Scope::Run, summary: "NAME=ADDR,...: the devices" },
    Var { name: CONFIG, scope: Scope::Run, summary: "a device file to read instead of the default places" },
    Var { name: ADDED, scope: Scope::Run, summary: "the file of devices `softroce add` made" },
    Var { name: PROGRESS, scope: Scope::Run, summary: "thread (default) or inline progress" },
    Var { name: SPIN_US, scope: Scope::Run, summary: "how long Cq::wait busy-polls before it sleeps (us)" },
    Var { name: DRIVER_SPIN_US, scope: Scope::Run, summary: "a passive side's driver thread's spin (us)" },
    Var { name: PCAP, scope: Scope::Run, summary: "a pcap of every packet sent and received" },
    Var { name: STATS, scope: Scope::Run, summary: "a line of counters on stderr when a context closes" },
    Var { name: SRC_PORT, scope: Scope::Run, summary: "qp (rxe's source ports) or device (4791)" },
    Var { name: FAULTS, scope: Scope::Run, summary: "faults injected into received packets" },
    Var { name: SYSFS, scope: Scope::Run, summary: "0: softroce run makes no sysfs view" },
    Var { name: IBV_TRACE, scope: Scope::Run, summary: "the C library traces failing verbs on stderr" },
    Var { name: VENDOR_PART_ID, scope: Scope::Run, summary: "a vendor part ID to report instead of 0" },
    Var { name: RDMA_REAL, scope: Scope::Run, summary: "0: softroce rdma never runs iproute2's rdma" },
    Var { name: LINK, scope: Scope::Run, summary: "udp: local devices talk by the socket, not memory" },
    Var { name: "SOFTROCE_TEST_SCALE", scope: Scope::Test, summary: "the scale tests' sizes" },
    Var { name: "SOFTROCE_TEST_PEER", scope: Scope::Test, summary: "a test process's peer role" },
    Var { name: "SOFTROCE_TEST_OTHER_USER", scope: Scope::Test, summary: "a test process run as another user" },
    Var { name: "SOFTROCE_TEST_MEMBER", scope: Scope::Test, summary: "a shared-device test's member process" },
    Var { name: "SOFTROCE_TEST_DEVICE", scope: Scope::Test, summary: "the device a shared-device test's members open" },
    Var { name: "SOFTROCE_TEST_TO", scope: Scope::Test, summary: "the GID a shared-device test's UD members address" },
    Var { name: "SOFTROCE_TEST_CM", scope: Scope::Test, summary: "an rdma_cm test's server process" },
    Var { name: "SOFTROCE_C_ADDR", scope: Scope::Test, summary: "the address a C test program's device takes" },
    Var { name: "SOFTROCE_SIM_SEED", scope: Scope::Test, summary: "one simulator seed to run" },
    Var { name: "SOFTROCE_SIM_SEEDS", scope: Scope::Test, summary: "how many simulator seeds to run" },
    Var { name: "SOFTROCE_SIM_TRACE", scope: Scope::Test, summary: "trace a simulator run's packets" },
    Var { name: "SOFTROCE_SIM_NETTRACE", scope: Scope::Test, summary: "trace the simulated network" },
    Var { name: "SOFTROCE_FUZZ_INPUT", scope: Scope::Test, summary: "replay one engine fuzz input" },
    Var { name: "SOFTROCE_FUZZ_INPUTS", scope: Scope::Test, summary: "write the fuzz scripts as inputs here" },
    Var { name: "SOFTROCE_FUZZ_ONLY", scope: Scope::Test, summary: "run one fuzz script" },
    Var { name: "SOFTROCE_FUZZ_SEEDS", scope: Scope::Test, summary: "how many fuzz scripts to run" },
    Var { name: "SOFTROCE_FUZZ_TRACE", scope: Scope::Test, summary: "trace a fuzz script's steps" },
    Var { name: "SOFTROCE_NETNS_ROLE", scope: Scope::Test, summary: "a namespace test process's role" },
    Var { name: "SOFTROCE_NETNS_PORT", scope: Scope::Test, summary: "a namespace test's port" },
    Var { name: "SOFTROCE_NETNS_ROUNDS", scope: Scope::Test, summary: "a namespace test's rounds" },
    Var { name: "SOFTROCE_DISTRO_CACHE", scope: Scope::Test, summary: "where the Debian roots are cached" },
    Var { name: "SOFTROCE_TARGET_DIR", scope: Scope::Test, summary: "the CI script's cargo target directory" },
];

/// The variable's value, if set and valid Unicode.
pub fn string(name: &'static str) -> Option<String> {
    debug_assert!(known(name), "{name} is not in softroce::env::VARS");
    std::env::var(name).ok()
}

/// The variable's raw value, if set (even empty).
pub fn os(name: &'static str) -> Option<OsString> {
    debug_assert!(known(name), "{name} is not in softroce::env::VARS");
    std::env::var_os(name)
}

/// The variable's value as a path, if set and not empty.
pub fn path(name: &'static str) -> Option<PathBuf> {
    debug_assert!(known(name), "{name} is not in softroce::env::VARS");
    std::env::var_os(name).filter(|p| !p.is_empty()).map(PathBuf::from)
}

/// Whether the variable is set to something other than empty or `0`.
pub fn on(name: &'static str) -> bool {
    debug_assert!(known(name), "{name} is not in softroce::env::VARS");
    std::env::var_os(name).is_some_and(|v| !v.is_empty() && v != "0")
}

/// Whether the variable is set to exactly `0` (a default turned off).
pub fn off(name: &'static str) -> bool {
    debug_assert!(known(name), "{name} is not in softroce::env::VARS");
    std::env::var_os(name).is_some_and(|v| v == "0")
}

fn known(name: &str) -> bool {
    VARS.iter().any(|v| v.name == name)
}
