//! Completion counters (rdma-core 65, IBVERBS_1.18): counters of completed
//! work requests or bytes that a QP updates instead of writing CQEs.
//!
//! rxe offers none: rdma-core answers its programs with `EOPNOTSUPP` from
//! the default ops (`dummy_ops.c`), having zeroed the caps first. softroce
//! answers the same, so a program that probes for counters (pyverbs'
//! `comp_cntr` tests, libfabric) takes its fallback path as over rxe.
//! Since no counter can be created, the verbs that take one never read it.

use std::ffi::c_int;

use crate::abi::{IbvCompCntrCaps, IbvContext, IbvQp};
use crate::export::{ibv_export, set_errno, trace_err};

/// The answer of every counter verb.
fn none(verb: &str) -> c_int {
    trace_err(verb, &"completion counters are not offered, as by rxe (EOPNOTSUPP)");
    libc::EOPNOTSUPP
}

ibv_export! { "IBVERBS_1.18";
    /// The counter capabilities (the inline `ibv_query_comp_cntr_caps`):
    /// zeroes the caller's `caps_size` bytes, then `EOPNOTSUPP`.
    fn _ibv_query_comp_cntr_caps(context: *mut IbvContext, caps: *mut IbvCompCntrCaps, caps_size: usize) -> c_int {
        if context.is_null() || caps.is_null() {
            return libc::EINVAL;
        }
        // SAFETY: the caller's struct has caps_size bytes.
        unsafe { std::ptr::write_bytes(caps.cast::<u8>(), 0, caps_size) };
        none("ibv_query_comp_cntr_caps")
    }
}

ibv_export! { "IBVERBS_1.18";
    /// Creates a counter: NULL with `errno = EOPNOTSUPP`.
    fn ibv_create_comp_cntr(_context: *mut IbvContext, _attr: *mut std::ffi::c_void) -> *mut std::ffi::c_void {
        none("ibv_create_comp_cntr");
        set_errno(libc::EOPNOTSUPP);
        std::ptr::null_mut()
    }
}

macro_rules! counter_verbs {
    ($($(#[$m:meta])* fn $name:ident ( $($arg:ident : $ty:ty),* );)*) => {
        $(
            ibv_export! { "IBVERBS_1.18";
                $(#[$m])*
                fn $name( $($arg: $ty),* ) -> c_int {
                    none(stringify!($name))
                }
            }
        )*
    };
}

counter_verbs! {
    /// Destroys a counter: returns `EOPNOTSUPP`.
    fn ibv_destroy_comp_cntr(_cntr: *mut std::ffi::c_void);
    /// Sets the completion count: returns `EOPNOTSUPP`.
    fn ibv_set_comp_cntr(_cntr: *mut std::ffi::c_void, _value: u64);
    /// Sets the error count: returns `EOPNOTSUPP`.
    fn ibv_set_err_comp_cntr(_cntr: *mut std::ffi::c_void, _value: u64);
    /// Adds to the completion count: returns `EOPNOTSUPP`.
    fn ibv_inc_comp_cntr(_cntr: *mut std::ffi::c_void, _amount: u64);
    /// Adds to the error count: returns `EOPNOTSUPP`.
    fn ibv_inc_err_comp_cntr(_cntr: *mut std::ffi::c_void, _amount: u64);
    /// Reads the completion count: returns `EOPNOTSUPP`.
    fn ibv_read_comp_cntr(_cntr: *mut std::ffi::c_void, _value: *mut u64);
    /// Reads the error count: returns `EOPNOTSUPP`.
    fn ibv_read_err_comp_cntr(_cntr: *mut std::ffi::c_void, _value: *mut u64);
    /// Attaches a counter to a QP: returns `EOPNOTSUPP`.
    fn ibv_qp_attach_comp_cntr(_qp: *mut IbvQp, _cntr: *mut std::ffi::c_void, _attr: *mut std::ffi::c_void);
}
