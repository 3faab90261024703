//! Every other symbol of rdma-core 44's `libibverbs.so.1`: the ones its
//! binaries (`ibv_*`, perftest, qperf), its helper libraries (librdmacm,
//! libmlx5, libefa) and pyverbs import, plus the rest of the real library's
//! default-versioned set, so that every program and library that loads
//! against rdma-core 44 resolves all of its imports here.
//!
//! The list was generated from the machine (`objdump -T` of the installed
//! binaries and of the real library), not written from memory;
//! `tests/symbols.rs` holds it and checks the built library against it.
//!
//! What they do:
//! - the enum-to-string and rate conversions are the real thing (the tables
//!   of rdma-core 44's `enum_strs.c` and `verbs.c`);
//! - fork support is not needed (softroce never pins pages), so the fork
//!   calls succeed and `ibv_is_fork_initialized` says `IBV_FORK_UNNEEDED`;
//! - everything else reports "not supported" the way rdma-core does: pointer
//!   functions return NULL with `errno = EOPNOTSUPP`, int verbs return
//!   `EOPNOTSUPP` (a positive errno, also left in `errno`), except where the
//!   real function's convention is -1 and `errno` (noted on each);
//! - the provider interface (IBVERBS_PRIVATE_34 and _65) is in
//!   `provider.rs`.
//!
//! Pointer arguments that a stub ignores are typed `*mut c_void`
//! (`*const c_void` where C has `const`): the ABI is the same as for the
//! real struct pointers.

use std::ffi::{CStr, c_char, c_int, c_uint, c_void};

use crate::export::{ibv_export, set_errno};

/// The "not supported" result of an int verb: `EOPNOTSUPP`, also in `errno`.
fn unsupported() -> c_int {
    set_errno(libc::EOPNOTSUPP);
    libc::EOPNOTSUPP
}

/// The "not supported" result of a verb returning a pointer: NULL, with
/// `errno = EOPNOTSUPP`.
fn unsupported_ptr<T>() -> *mut T {
    set_errno(libc::EOPNOTSUPP);
    std::ptr::null_mut()
}

/// `table[index]` as a C string, or "unknown" (rdma-core's answer for a
/// value outside the enum).
fn enum_str(table: &[&'static CStr], index: c_int) -> *const c_char {
    usize::try_from(index).ok().and_then(|i| table.get(i)).copied().unwrap_or(c"unknown").as_ptr()
}

// ---------------------------------------------------------------------------
// IBVERBS_1.0: the historical helpers other rdma-core libraries still use
// (librdmacm: the kernel-struct copies and sysfs helpers), and the IB rate
// multiplier conversions, whose default version never moved past 1.0.
// ---------------------------------------------------------------------------

ibv_export! { "IBVERBS_1.0";
    /// Copies a kernel path record into an `ibv_sa_path_rec`: there is no
    /// kernel, so nothing is copied.
    fn ibv_copy_path_rec_from_kern(_dst: *mut c_void, _src: *mut c_void) {}
}

ibv_export! { "IBVERBS_1.0";
    /// Copies an `ibv_sa_path_rec` into a kernel path record: nothing to copy.
    fn ibv_copy_path_rec_to_kern(_dst: *mut c_void, _src: *mut c_void) {}
}

ibv_export! { "IBVERBS_1.0";
    /// Copies kernel QP attributes into an `ibv_qp_attr`: nothing to copy.
    fn ibv_copy_qp_attr_from_kern(_dst: *mut c_void, _src: *mut c_void) {}
}

ibv_export! { "IBVERBS_1.0";
    /// The sysfs mount point: always "/sys".
    fn ibv_get_sysfs_path() -> *const c_char {
        c"/sys".as_ptr()
    }
}

ibv_export! { "IBVERBS_1.0";
    /// Reads `dir/file` from sysfs: softroce devices have no sysfs entries,
    /// so this fails with -1 and `errno = ENOENT` (rdma-core's convention;
    /// librdmacm then assumes the newest rdma_cm ABI, ibv_devinfo prints no
    /// board id).
    fn ibv_read_sysfs_file(_dir: *const c_char, _file: *const c_char, _buf: *mut c_char, _size: usize) -> c_int {
        set_errno(libc::ENOENT);
        -1
    }
}

ibv_export! { "IBVERBS_1.0";
    /// An `enum ibv_rate` as a multiple of 2.5 Gb/s (-1 if it is none).
    fn ibv_rate_to_mult(rate: c_int) -> c_int {
        rate_to_mult(rate)
    }
}

ibv_export! { "IBVERBS_1.0";
    /// A multiple of 2.5 Gb/s as an `enum ibv_rate` (`IBV_RATE_MAX`, 0, if none).
    fn mult_to_ibv_rate(mult: c_int) -> c_int {
        RATES.iter().find(|r| r.mult == mult && r.mult != -1).map_or(0, |r| r.rate)
    }
}

/// One `enum ibv_rate` value with its 2.5 Gb/s multiple (-1 where it has
/// none: the FDR/EDR-coded rates) and its Mb/s (rdma-core 44's `verbs.c`).
struct Rate {
    rate: c_int,
    mult: c_int,
    mbps: c_int,
}

const fn rate(rate: c_int, mult: c_int, mbps: c_int) -> Rate {
    Rate { rate, mult, mbps }
}

/// rdma-core 44's rate table (`IBV_RATE_2_5_GBPS` = 2 ... `IBV_RATE_1200_GBPS` = 24).
const RATES: [Rate; 23] = [
    rate(2, 1, 2500),       // IBV_RATE_2_5_GBPS
    rate(5, 2, 5000),       // IBV_RATE_5_GBPS
    rate(3, 4, 10000),      // IBV_RATE_10_GBPS
    rate(6, 8, 20000),      // IBV_RATE_20_GBPS
    rate(4, 12, 30000),     // IBV_RATE_30_GBPS
    rate(7, 16, 40000),     // IBV_RATE_40_GBPS
    rate(8, 24, 60000),     // IBV_RATE_60_GBPS
    rate(9, 32, 80000),     // IBV_RATE_80_GBPS
    rate(10, 48, 120000),   // IBV_RATE_120_GBPS
    rate(11, -1, 14062),    // IBV_RATE_14_GBPS
    rate(12, -1, 56250),    // IBV_RATE_56_GBPS
    rate(13, -1, 112500),   // IBV_RATE_112_GBPS
    rate(14, -1, 168750),   // IBV_RATE_168_GBPS
    rate(15, -1, 25781),    // IBV_RATE_25_GBPS
    rate(16, -1, 103125),   // IBV_RATE_100_GBPS
    rate(17, -1, 206250),   // IBV_RATE_200_GBPS
    rate(18, -1, 309375),   // IBV_RATE_300_GBPS
    rate(19, 11, 28125),    // IBV_RATE_28_GBPS
    rate(20, 20, 53125),    // IBV_RATE_50_GBPS
    rate(21, 160, 425000),  // IBV_RATE_400_GBPS
    rate(22, 240, 637500),  // IBV_RATE_600_GBPS
    rate(23, 320, 850000),  // IBV_RATE_800_GBPS
    rate(24, 480, 1275000), // IBV_RATE_1200_GBPS
];

fn rate_to_mult(rate: c_int) -> c_int {
    RATES.iter().find(|r| r.rate == rate).map_or(-1, |r| r.mult)
}

// ---------------------------------------------------------------------------
// IBVERBS_1.1: fork support, the enum strings, Mb/s rate
// conversions, the kernel AH copy and RoCE L2 resolution.
// ---------------------------------------------------------------------------

ibv_export! { "IBVERBS_1.1";
    /// The provider registration of rdma-core before 17 (`name`, an init
    /// function), kept by every release since for old out-of-tree
    /// providers: softroce is its own provider and loads none, so a
    /// registration is accepted and ignored.
    fn ibv_register_driver(_name: *const c_char, _init: *const c_void) {}
}

ibv_export! { "IBVERBS_1.1";
    /// Copies kernel AH attributes into an `ibv_ah_attr`: nothing to copy.
    fn ibv_copy_ah_attr_from_kern(_dst: *mut c_void, _src: *mut c_void) {}
}

ibv_export! { "IBVERBS_1.1";
    /// Marks a range to be inherited by fork() children again: nothing to
    /// undo (softroce never marks memory `MADV_DONTFORK`), returns 0.
    fn ibv_dofork_range(_base: *mut c_void, _size: usize) -> c_int {
        0
    }
}

ibv_export! { "IBVERBS_1.1";
    /// Keeps a range out of fork() children: softroce reads registered memory
    /// through ordinary pointers and pins nothing, so there is nothing to
    /// protect; returns 0.
    fn ibv_dontfork_range(_base: *mut c_void, _size: usize) -> c_int {
        0
    }
}

ibv_export! { "IBVERBS_1.1";
    /// Prepares for fork(): not needed (see `ibv_is_fork_initialized`), returns 0.
    fn ibv_fork_init() -> c_int {
        0
    }
}

/// `enum ibv_node_type` (`IBV_NODE_CA` = 1 ... `IBV_NODE_UNSPECIFIED` = 7).
const NODE_TYPE_STR: [&CStr; 8] = [
    c"unknown",
    c"InfiniBand channel adapter",
    c"InfiniBand switch",
    c"InfiniBand router",
    c"iWARP NIC",
    c"usNIC",
    c"usNIC UDP",
    c"unspecified",
];

/// `enum ibv_port_state` (`IBV_PORT_NOP` = 0 ... `IBV_PORT_ACTIVE_DEFER` = 5).
const PORT_STATE_STR: [&CStr; 6] = [c"no state change (NOP)", c"down", c"init", c"armed", c"active", c"active defer"];

/// `enum ibv_event_type` as of rdma-core 44 (`IBV_EVENT_CQ_ERR` = 0 ...
/// `IBV_EVENT_WQ_FATAL` = 19; "Device link speed change" came later).
const EVENT_TYPE_STR: [&CStr; 20] = [
    c"CQ error",
    c"local work queue catastrophic error",
    c"invalid request local work queue error",
    c"local access violation work queue error",
    c"communication established",
    c"send queue drained",
    c"path migrated",
    c"path migration request error",
    c"local catastrophic error",
    c"port active",
    c"port error",
    c"LID change",
    c"P_Key change",
    c"SM change",
    c"SRQ catastrophic error",
    c"SRQ limit reached",
    c"last WQE reached",
    c"client reregistration",
    c"GID table change",
    c"WQ fatal",
];

/// `enum ibv_wc_status` (`IBV_WC_SUCCESS` = 0 ... `IBV_WC_TM_RNDV_INCOMPLETE` = 23).
const WC_STATUS_STR: [&CStr; 24] = [
    c"success",
    c"local length error",
    c"local QP operation error",
    c"local EE context operation error",
    c"local protection error",
    c"Work Request Flushed Error",
    c"memory management operation error",
    c"bad response error",
    c"local access error",
    c"remote invalid request error",
    c"remote access error",
    c"remote operation error",
    c"transport retry counter exceeded",
    c"RNR retry counter exceeded",
    c"local RDD violation error",
    c"remote invalid RD request",
    c"aborted error",
    c"invalid EE context number",
    c"invalid EE context state",
    c"fatal error",
    c"response timeout error",
    c"general error",
    c"TM error",
    c"TM software rendezvous",
];

ibv_export! { "IBVERBS_1.1";
    /// A static description of an `enum ibv_event_type` value ("unknown" if out of range).
    fn ibv_event_type_str(event: c_int) -> *const c_char {
        enum_str(&EVENT_TYPE_STR, event)
    }
}

ibv_export! { "IBVERBS_1.1";
    /// A static description of an `enum ibv_node_type` value ("unknown" if out of range).
    fn ibv_node_type_str(node_type: c_int) -> *const c_char {
        enum_str(&NODE_TYPE_STR, node_type)
    }
}

ibv_export! { "IBVERBS_1.1";
    /// A static description of an `enum ibv_port_state` value ("unknown" if out of range).
    fn ibv_port_state_str(port_state: c_int) -> *const c_char {
        enum_str(&PORT_STATE_STR, port_state)
    }
}

ibv_export! { "IBVERBS_1.1";
    /// A static description of an `enum ibv_wc_status` value ("unknown" if out of range).
    fn ibv_wc_status_str(status: c_int) -> *const c_char {
        enum_str(&WC_STATUS_STR, status)
    }
}

ibv_export! { "IBVERBS_1.1";
    /// An `enum ibv_rate` in Mb/s (-1 if it is none).
    fn ibv_rate_to_mbps(rate: c_int) -> c_int {
        RATES.iter().find(|r| r.rate == rate).map_or(-1, |r| r.mbps)
    }
}

ibv_export! { "IBVERBS_1.1";
    /// A rate in Mb/s as an `enum ibv_rate` (`IBV_RATE_MAX`, 0, if none).
    fn mbps_to_ibv_rate(mbps: c_int) -> c_int {
        RATES.iter().find(|r| r.mbps == mbps).map_or(0, |r| r.rate)
    }
}

ibv_export! { "IBVERBS_1.1";
    /// Resolves the destination MAC and VLAN of a RoCE AH through the kernel's
    /// neighbour table (a provider helper): not supported. Like the real
    /// function, failures are negative errnos: returns `-EOPNOTSUPP`.
    fn ibv_resolve_eth_l2_from_gid(_context: *mut c_void, _attr: *mut c_void, _eth_mac: *mut u8, _vid: *mut u16) -> c_int {
        set_errno(libc::EOPNOTSUPP);
        -libc::EOPNOTSUPP
    }
}

// ---------------------------------------------------------------------------
// IBVERBS_1.10: importing objects shared through a command FD, and ECE.
// ---------------------------------------------------------------------------

ibv_export! { "IBVERBS_1.10";
    /// Imports a device context from another process's command FD: not
    /// supported (NULL, `errno = EOPNOTSUPP`).
    fn ibv_import_device(_cmd_fd: c_int) -> *mut c_void {
        unsupported_ptr()
    }
}

ibv_export! { "IBVERBS_1.10";
    /// Imports an MR by handle: not supported (NULL, `errno = EOPNOTSUPP`).
    fn ibv_import_mr(_pd: *mut c_void, _mr_handle: u32) -> *mut c_void {
        unsupported_ptr()
    }
}

ibv_export! { "IBVERBS_1.10";
    /// Imports a PD by handle: not supported (NULL, `errno = EOPNOTSUPP`).
    fn ibv_import_pd(_context: *mut c_void, _pd_handle: u32) -> *mut c_void {
        unsupported_ptr()
    }
}

ibv_export! { "IBVERBS_1.10";
    /// Un-imports an MR: nothing was imported, does nothing.
    fn ibv_unimport_mr(_mr: *mut c_void) {}
}

ibv_export! { "IBVERBS_1.10";
    /// Un-imports a PD: nothing was imported, does nothing.
    fn ibv_unimport_pd(_pd: *mut c_void) {}
}

ibv_export! { "IBVERBS_1.10";
    /// Reads the QP's accepted enhanced connection establishment options:
    /// not supported (returns `EOPNOTSUPP`; librdmacm then carries on without ECE).
    fn ibv_query_ece(_qp: *mut c_void, _ece: *mut c_void) -> c_int {
        unsupported()
    }
}

ibv_export! { "IBVERBS_1.10";
    /// Sets the QP's enhanced connection establishment options: not
    /// supported (returns `EOPNOTSUPP`).
    fn ibv_set_ece(_qp: *mut c_void, _ece: *mut c_void) -> c_int {
        unsupported()
    }
}

// ---------------------------------------------------------------------------
// IBVERBS_1.12: dma-buf memory registration.
// ---------------------------------------------------------------------------

ibv_export! { "IBVERBS_1.12";
    /// Registers a dma-buf as an MR: not supported (NULL, `errno = EOPNOTSUPP`).
    fn ibv_reg_dmabuf_mr(_pd: *mut c_void, _offset: u64, _length: usize, _iova: u64, _fd: c_int, _access: c_int) -> *mut c_void {
        unsupported_ptr()
    }
}

// ---------------------------------------------------------------------------
// IBVERBS_1.13: device-memory import, and the fork status.
// ---------------------------------------------------------------------------

ibv_export! { "IBVERBS_1.13";
    /// Imports device memory by handle: not supported (NULL, `errno = EOPNOTSUPP`).
    fn ibv_import_dm(_context: *mut c_void, _dm_handle: u32) -> *mut c_void {
        unsupported_ptr()
    }
}

ibv_export! { "IBVERBS_1.13";
    /// Un-imports device memory: nothing was imported, does nothing.
    fn ibv_unimport_dm(_dm: *mut c_void) {}
}

ibv_export! { "IBVERBS_1.13";
    /// The fork-support status: `IBV_FORK_UNNEEDED` (2), as rdma-core reports
    /// on kernels with copy-on-fork for pinned pages; softroce pins nothing,
    /// so fork() is always safe.
    fn ibv_is_fork_initialized() -> c_uint {
        2
    }
}

// ---------------------------------------------------------------------------
// IBVERBS_1.14: data ordering.
// ---------------------------------------------------------------------------

ibv_export! { "IBVERBS_1.14";
    /// Whether an opcode's data lands in memory in order: 0 ("not
    /// guaranteed"), which is also rdma-core's answer when a provider does not say.
    fn ibv_query_qp_data_in_order(_qp: *mut c_void, _op: c_uint, _flags: u32) -> c_int {
        0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(p: *const c_char) -> &'static str {
        // SAFETY: the functions under test return pointers to static C strings.
        unsafe { CStr::from_ptr(p) }.to_str().unwrap()
    }

    #[test]
    fn enum_strings_match_rdma_core_44() {
        // SAFETY: the string functions take plain integers.
        unsafe {
            assert_eq!(s(ibv_wc_status_str(0)), "success");
            assert_eq!(s(ibv_wc_status_str(5)), "Work Request Flushed Error");
            assert_eq!(s(ibv_wc_status_str(12)), "transport retry counter exceeded");
            assert_eq!(s(ibv_wc_status_str(23)), "TM software rendezvous");
            assert_eq!(s(ibv_wc_status_str(24)), "unknown");
            assert_eq!(s(ibv_wc_status_str(-1)), "unknown");
            assert_eq!(s(ibv_node_type_str(1)), "InfiniBand channel adapter");
            assert_eq!(s(ibv_node_type_str(0)), "unknown");
            assert_eq!(s(ibv_node_type_str(-1)), "unknown");
            assert_eq!(s(ibv_node_type_str(7)), "unspecified");
            assert_eq!(s(ibv_node_type_str(8)), "unknown");
            assert_eq!(s(ibv_port_state_str(4)), "active");
            assert_eq!(s(ibv_port_state_str(6)), "unknown");
            assert_eq!(s(ibv_event_type_str(0)), "CQ error");
            assert_eq!(s(ibv_event_type_str(19)), "WQ fatal");
            assert_eq!(s(ibv_event_type_str(20)), "unknown");
        }
    }

    #[test]
    fn rate_conversions_round_trip() {
        // SAFETY: the conversions take plain integers.
        unsafe {
            assert_eq!(ibv_rate_to_mult(2), 1); // 2.5 Gb/s
            assert_eq!(ibv_rate_to_mult(7), 16); // 40 Gb/s
            assert_eq!(ibv_rate_to_mult(15), -1); // 25 Gb/s has no multiple
            assert_eq!(ibv_rate_to_mult(0), -1);
            assert_eq!(mult_to_ibv_rate(16), 7);
            assert_eq!(mult_to_ibv_rate(3), 0);
            assert_eq!(mult_to_ibv_rate(-1), 0);
            assert_eq!(ibv_rate_to_mbps(16), 103125); // 100 Gb/s
            assert_eq!(ibv_rate_to_mbps(0), -1);
            assert_eq!(mbps_to_ibv_rate(25781), 15);
            assert_eq!(mbps_to_ibv_rate(1), 0);
            for r in &RATES {
                assert_eq!(mbps_to_ibv_rate(ibv_rate_to_mbps(r.rate)), r.rate);
                if r.mult != -1 {
                    assert_eq!(mult_to_ibv_rate(ibv_rate_to_mult(r.rate)), r.rate);
                }
            }
        }
    }

    #[test]
    fn unsupported_conventions() {
        // SAFETY: the stubs ignore their pointer arguments.
        unsafe {
            let null = std::ptr::null_mut();
            assert!(ibv_import_pd(null, 1).is_null());
            assert_eq!(*libc::__errno_location(), libc::EOPNOTSUPP);
            assert_eq!(ibv_read_sysfs_file(c"/sys".as_ptr(), c"x".as_ptr(), null.cast(), 0), -1);
            assert_eq!(*libc::__errno_location(), libc::ENOENT);
            assert_eq!(s(ibv_get_sysfs_path()), "/sys");
            assert_eq!(ibv_fork_init(), 0);
            assert_eq!(ibv_is_fork_initialized(), 2);
        }
    }
}
