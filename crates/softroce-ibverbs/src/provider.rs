//! The provider interface of libibverbs (`driver.h`, `cmd_ioctl.h`): the
//! private version nodes IBVERBS_PRIVATE_34 (rdma-core 34 to 56) and
//! IBVERBS_PRIVATE_65 (rdma-core 65).
//!
//! Programs such as perftest and UCX link the distribution's providers
//! (libmlx5, libefa, libhns...) directly, and those are linked to resolve
//! every symbol at load, so this library must define what they import.
//! The sets are not written by hand: `scripts/abi/derive.py` reads them
//! from each release's own libibverbs and providers into
//! `abi/<suite>.exports` and `.imports`, and `tests/symbols.rs` checks the
//! built library against those lists.
//!
//! softroce never hands a device to a provider, so none of this is reached
//! except the `verbs_register_driver_*` calls of the providers'
//! constructors (harmless no-ops). Each `ibv_cmd_*` returns what rdma-core
//! returns when the kernel lacks the command (`EOPNOTSUPP`, from its
//! ioctl/write fallback; `ibv_cmd_poll_cq` -1) and says so under
//! `SOFTROCE_IBV_TRACE`. Most functions are one set bound to both nodes;
//! rdma-core 65 added the completion-counter, DMA-handle and dma-buf heap
//! commands, which only its node has.
//!
//! Pointer arguments that are ignored are typed `*mut c_void`: the ABI is
//! the same as for the real struct pointers.

use std::ffi::{c_char, c_int, c_uint, c_void};
use std::sync::atomic::AtomicBool;

use crate::export::{ibv_export, set_errno, trace_err};

/// What a kernel command returns here: `EOPNOTSUPP` (also in `errno`),
/// rdma-core's answer when the kernel has neither the ioctl nor the write
/// form of a command; traced under `SOFTROCE_IBV_TRACE`.
fn no_kernel(name: &str) -> c_int {
    trace_err(name, &"a provider's kernel command; softroce has no kernel part (EOPNOTSUPP)");
    set_errno(libc::EOPNOTSUPP);
    libc::EOPNOTSUPP
}

/// [`no_kernel`] for a function returning a pointer: NULL.
fn no_kernel_ptr<T>(name: &str) -> *mut T {
    no_kernel(name);
    std::ptr::null_mut()
}

/// rdma-core's `bool verbs_allow_disassociate_destroy` (set from
/// `RDMAV_ALLOW_DISASSOC_DESTROY`): whether providers may treat EIO from a
/// destroy as success. Always false here. An `AtomicBool` has `bool`'s layout
/// and lives in writable memory, as the C variable does.
#[unsafe(export_name = "__softroce_verbs_allow_disassociate_destroy")]
pub static VERBS_ALLOW_DISASSOCIATE_DESTROY: AtomicBool = AtomicBool::new(false);
::std::arch::global_asm!(
    ".symver __softroce_verbs_allow_disassociate_destroy, verbs_allow_disassociate_destroy@@IBVERBS_PRIVATE_34"
);
::std::arch::global_asm!(
    ".symver __softroce_verbs_allow_disassociate_destroy, verbs_allow_disassociate_destroy@IBVERBS_PRIVATE_65"
);

ibv_export! { "IBVERBS_PRIVATE_34";
    /// Registers a provider (called by the constructors of rdma-core 34-56's
    /// libmlx5, libefa..., before `main`): softroce is its own provider, so
    /// this does nothing.
    fn verbs_register_driver_34(_ops: *const c_void) {}
}

ibv_export! { "IBVERBS_PRIVATE_65";
    /// rdma-core 65's name for [`verbs_register_driver_34`]: also a no-op.
    fn verbs_register_driver_65(_ops: *const c_void) {}
}

ibv_export! { "IBVERBS_PRIVATE_34", "IBVERBS_PRIVATE_65";
    /// Provider logging. C declares it variadic
    /// (`ctx, level, fmt, ...`); the arguments are ignored, which the x86_64
    /// calling convention allows for a non-variadic definition.
    fn __verbs_log(_ctx: *mut c_void, _level: u32, _fmt: *const c_char) {}
}

ibv_export! { "IBVERBS_PRIVATE_34", "IBVERBS_PRIVATE_65";
    /// The attribute count of a linked ioctl command buffer: returns
    /// `num_attrs` (no buffer is ever sent, so the links need no room).
    fn __ioctl_final_num_attrs(num_attrs: c_uint, _link: *mut c_void) -> c_uint {
        num_attrs
    }
}

ibv_export! { "IBVERBS_PRIVATE_34", "IBVERBS_PRIVATE_65";
    /// Sends an ioctl command to the kernel: there is none, returns `EOPNOTSUPP`.
    fn execute_ioctl(_context: *mut c_void, _cmd: *mut c_void) -> c_int {
        no_kernel("execute_ioctl")
    }
}

ibv_export! { "IBVERBS_PRIVATE_34", "IBVERBS_PRIVATE_65";
    /// A provider's context allocation: not supported (NULL, `errno = EOPNOTSUPP`).
    fn _verbs_init_and_alloc_context(_device: *mut c_void, _cmd_fd: c_int, _alloc_size: usize, _context_offset: *mut c_void, _driver_id: u32) -> *mut c_void {
        no_kernel_ptr("_verbs_init_and_alloc_context")
    }
}

ibv_export! { "IBVERBS_PRIVATE_34", "IBVERBS_PRIVATE_65";
    /// Opens a device through its provider: not supported (NULL, `errno = EOPNOTSUPP`).
    fn verbs_open_device(_device: *mut c_void, _private_data: *mut c_void) -> *mut c_void {
        no_kernel_ptr("verbs_open_device")
    }
}

ibv_export! { "IBVERBS_PRIVATE_34", "IBVERBS_PRIVATE_65";
    /// Initialises a provider's CQ: does nothing.
    fn verbs_init_cq(_cq: *mut c_void, _context: *mut c_void, _channel: *mut c_void, _cq_context: *mut c_void) {}
}

ibv_export! { "IBVERBS_PRIVATE_34", "IBVERBS_PRIVATE_65";
    /// Installs a provider's ops in a context: does nothing.
    fn verbs_set_ops(_vctx: *mut c_void, _ops: *const c_void) {}
}

ibv_export! { "IBVERBS_PRIVATE_34", "IBVERBS_PRIVATE_65";
    /// Tears down a provider's context: does nothing.
    fn verbs_uninit_context(_context: *mut c_void) {}
}

ibv_export! { "IBVERBS_PRIVATE_34", "IBVERBS_PRIVATE_65";
    /// Reads a file of a device's sysfs directory (a printf-style name;
    /// variadic in C, the arguments are ignored): softroce devices have no
    /// sysfs entries, so -1 with `errno = ENOENT`.
    fn ibv_read_ibdev_sysfs_file(_buf: *mut c_char, _size: usize, _sysfs_dev: *mut c_void, _fnfmt: *const c_char) -> c_int {
        set_errno(libc::ENOENT);
        -1
    }
}

ibv_export! { "IBVERBS_PRIVATE_34", "IBVERBS_PRIVATE_65";
    /// Kernel command `ADVISE_MR`: not supported (returns `EOPNOTSUPP`).
    fn ibv_cmd_advise_mr(_pd: *mut c_void, _advice: c_uint, _flags: u32, _sg_list: *mut c_void, _num_sge: u32) -> c_int {
        no_kernel("ibv_cmd_advise_mr")
    }
}

ibv_export! { "IBVERBS_PRIVATE_34", "IBVERBS_PRIVATE_65";
    /// Kernel command `ALLOC_DM`: not supported (returns `EOPNOTSUPP`).
    fn ibv_cmd_alloc_dm(_ctx: *mut c_void, _dm_attr: *const c_void, _dm: *mut c_void, _link: *mut c_void) -> c_int {
        no_kernel("ibv_cmd_alloc_dm")
    }
}

ibv_export! { "IBVERBS_PRIVATE_34", "IBVERBS_PRIVATE_65";
    /// Kernel command `ALLOC_MW`: not supported (returns `EOPNOTSUPP`).
    #[allow(clippy::too_many_arguments)]
    fn ibv_cmd_alloc_mw(_pd: *mut c_void, _type: c_uint, _mw: *mut c_void, _cmd: *mut c_void, _cmd_size: usize, _resp: *mut c_void, _resp_size: usize) -> c_int {
        no_kernel("ibv_cmd_alloc_mw")
    }
}

ibv_export! { "IBVERBS_PRIVATE_34", "IBVERBS_PRIVATE_65";
    /// Kernel command `ALLOC_PD`: not supported (returns `EOPNOTSUPP`).
    fn ibv_cmd_alloc_pd(_context: *mut c_void, _pd: *mut c_void, _cmd: *mut c_void, _cmd_size: usize, _resp: *mut c_void, _resp_size: usize) -> c_int {
        no_kernel("ibv_cmd_alloc_pd")
    }
}

ibv_export! { "IBVERBS_PRIVATE_34", "IBVERBS_PRIVATE_65";
    /// Kernel command `ATTACH_MCAST`: not supported (returns `EOPNOTSUPP`).
    fn ibv_cmd_attach_mcast(_qp: *mut c_void, _gid: *const c_void, _lid: u16) -> c_int {
        no_kernel("ibv_cmd_attach_mcast")
    }
}

ibv_export! { "IBVERBS_PRIVATE_34", "IBVERBS_PRIVATE_65";
    /// Kernel command `CLOSE_XRCD`: not supported (returns `EOPNOTSUPP`).
    fn ibv_cmd_close_xrcd(_xrcd: *mut c_void) -> c_int {
        no_kernel("ibv_cmd_close_xrcd")
    }
}

ibv_export! { "IBVERBS_PRIVATE_34", "IBVERBS_PRIVATE_65";
    /// Kernel command `CREATE_AH`: not supported (returns `EOPNOTSUPP`).
    fn ibv_cmd_create_ah(_pd: *mut c_void, _ah: *mut c_void, _attr: *mut c_void, _resp: *mut c_void, _resp_size: usize) -> c_int {
        no_kernel("ibv_cmd_create_ah")
    }
}

ibv_export! { "IBVERBS_PRIVATE_34", "IBVERBS_PRIVATE_65";
    /// Kernel command `CREATE_COUNTERS`: not supported (returns `EOPNOTSUPP`).
    fn ibv_cmd_create_counters(_context: *mut c_void, _init_attr: *mut c_void, _vcounters: *mut c_void, _link: *mut c_void) -> c_int {
        no_kernel("ibv_cmd_create_counters")
    }
}

ibv_export! { "IBVERBS_PRIVATE_34", "IBVERBS_PRIVATE_65";
    /// Kernel command `CREATE_CQ`: not supported (returns `EOPNOTSUPP`).
    #[allow(clippy::too_many_arguments)]
    fn ibv_cmd_create_cq(_context: *mut c_void, _cqe: c_int, _channel: *mut c_void, _comp_vector: c_int, _cq: *mut c_void, _cmd: *mut c_void, _cmd_size: usize, _resp: *mut c_void, _resp_size: usize) -> c_int {
        no_kernel("ibv_cmd_create_cq")
    }
}

ibv_export! { "IBVERBS_PRIVATE_34", "IBVERBS_PRIVATE_65";
    /// Kernel command `CREATE_CQ` (extended): not supported (returns `EOPNOTSUPP`).
    #[allow(clippy::too_many_arguments)]
    fn ibv_cmd_create_cq_ex(_context: *mut c_void, _cq_attr: *const c_void, _cq: *mut c_void, _cmd: *mut c_void, _cmd_size: usize, _resp: *mut c_void, _resp_size: usize, _cmd_flags: u32) -> c_int {
        no_kernel("ibv_cmd_create_cq_ex")
    }
}

ibv_export! { "IBVERBS_PRIVATE_34", "IBVERBS_PRIVATE_65";
    /// Kernel command `CREATE_FLOW`: not supported (returns `EOPNOTSUPP`).
    fn ibv_cmd_create_flow(_qp: *mut c_void, _flow_id: *mut c_void, _flow_attr: *mut c_void, _ucmd: *mut c_void, _ucmd_size: usize) -> c_int {
        no_kernel("ibv_cmd_create_flow")
    }
}

ibv_export! { "IBVERBS_PRIVATE_34", "IBVERBS_PRIVATE_65";
    /// Kernel command `CREATE_FLOW_ACTION_ESP`: not supported (returns `EOPNOTSUPP`).
    fn ibv_cmd_create_flow_action_esp(_ctx: *mut c_void, _attr: *mut c_void, _flow_action: *mut c_void, _driver: *mut c_void) -> c_int {
        no_kernel("ibv_cmd_create_flow_action_esp")
    }
}

ibv_export! { "IBVERBS_PRIVATE_34", "IBVERBS_PRIVATE_65";
    /// Kernel command `CREATE_QP`: not supported (returns `EOPNOTSUPP`).
    #[allow(clippy::too_many_arguments)]
    fn ibv_cmd_create_qp(_pd: *mut c_void, _qp: *mut c_void, _attr: *mut c_void, _cmd: *mut c_void, _cmd_size: usize, _resp: *mut c_void, _resp_size: usize) -> c_int {
        no_kernel("ibv_cmd_create_qp")
    }
}

ibv_export! { "IBVERBS_PRIVATE_34", "IBVERBS_PRIVATE_65";
    /// Kernel command `CREATE_QP` (extended attributes): not supported (returns `EOPNOTSUPP`).
    #[allow(clippy::too_many_arguments)]
    fn ibv_cmd_create_qp_ex(_context: *mut c_void, _qp: *mut c_void, _attr_ex: *mut c_void, _cmd: *mut c_void, _cmd_size: usize, _resp: *mut c_void, _resp_size: usize) -> c_int {
        no_kernel("ibv_cmd_create_qp_ex")
    }
}

ibv_export! { "IBVERBS_PRIVATE_34", "IBVERBS_PRIVATE_65";
    /// Kernel command `CREATE_QP` (extended command): not supported (returns `EOPNOTSUPP`).
    #[allow(clippy::too_many_arguments)]
    fn ibv_cmd_create_qp_ex2(_context: *mut c_void, _qp: *mut c_void, _qp_attr: *mut c_void, _cmd: *mut c_void, _cmd_size: usize, _resp: *mut c_void, _resp_size: usize) -> c_int {
        no_kernel("ibv_cmd_create_qp_ex2")
    }
}

ibv_export! { "IBVERBS_PRIVATE_34", "IBVERBS_PRIVATE_65";
    /// Kernel command `CREATE_RWQ_IND_TBL`: not supported (returns `EOPNOTSUPP`).
    fn ibv_cmd_create_rwq_ind_table(_context: *mut c_void, _init_attr: *mut c_void, _rwq_ind_table: *mut c_void, _resp: *mut c_void, _resp_size: usize) -> c_int {
        no_kernel("ibv_cmd_create_rwq_ind_table")
    }
}

ibv_export! { "IBVERBS_PRIVATE_34", "IBVERBS_PRIVATE_65";
    /// Kernel command `CREATE_SRQ`: not supported (returns `EOPNOTSUPP`).
    #[allow(clippy::too_many_arguments)]
    fn ibv_cmd_create_srq(_pd: *mut c_void, _srq: *mut c_void, _attr: *mut c_void, _cmd: *mut c_void, _cmd_size: usize, _resp: *mut c_void, _resp_size: usize) -> c_int {
        no_kernel("ibv_cmd_create_srq")
    }
}

ibv_export! { "IBVERBS_PRIVATE_34", "IBVERBS_PRIVATE_65";
    /// Kernel command `CREATE_XSRQ`: not supported (returns `EOPNOTSUPP`).
    #[allow(clippy::too_many_arguments)]
    fn ibv_cmd_create_srq_ex(_context: *mut c_void, _srq: *mut c_void, _attr_ex: *mut c_void, _cmd: *mut c_void, _cmd_size: usize, _resp: *mut c_void, _resp_size: usize) -> c_int {
        no_kernel("ibv_cmd_create_srq_ex")
    }
}

ibv_export! { "IBVERBS_PRIVATE_34", "IBVERBS_PRIVATE_65";
    /// Kernel command `CREATE_WQ`: not supported (returns `EOPNOTSUPP`).
    #[allow(clippy::too_many_arguments)]
    fn ibv_cmd_create_wq(_context: *mut c_void, _wq_init_attr: *mut c_void, _wq: *mut c_void, _cmd: *mut c_void, _cmd_size: usize, _resp: *mut c_void, _resp_size: usize) -> c_int {
        no_kernel("ibv_cmd_create_wq")
    }
}

ibv_export! { "IBVERBS_PRIVATE_34", "IBVERBS_PRIVATE_65";
    /// Kernel command `DEALLOC_MW`: not supported (returns `EOPNOTSUPP`).
    fn ibv_cmd_dealloc_mw(_mw: *mut c_void) -> c_int {
        no_kernel("ibv_cmd_dealloc_mw")
    }
}

ibv_export! { "IBVERBS_PRIVATE_34", "IBVERBS_PRIVATE_65";
    /// Kernel command `DEALLOC_PD`: not supported (returns `EOPNOTSUPP`).
    fn ibv_cmd_dealloc_pd(_pd: *mut c_void) -> c_int {
        no_kernel("ibv_cmd_dealloc_pd")
    }
}

ibv_export! { "IBVERBS_PRIVATE_34", "IBVERBS_PRIVATE_65";
    /// Kernel command `DEREG_MR`: not supported (returns `EOPNOTSUPP`).
    fn ibv_cmd_dereg_mr(_vmr: *mut c_void) -> c_int {
        no_kernel("ibv_cmd_dereg_mr")
    }
}

ibv_export! { "IBVERBS_PRIVATE_34", "IBVERBS_PRIVATE_65";
    /// Kernel command `DESTROY_AH`: not supported (returns `EOPNOTSUPP`).
    fn ibv_cmd_destroy_ah(_ah: *mut c_void) -> c_int {
        no_kernel("ibv_cmd_destroy_ah")
    }
}

ibv_export! { "IBVERBS_PRIVATE_34", "IBVERBS_PRIVATE_65";
    /// Kernel command `DESTROY_COUNTERS`: not supported (returns `EOPNOTSUPP`).
    fn ibv_cmd_destroy_counters(_vcounters: *mut c_void) -> c_int {
        no_kernel("ibv_cmd_destroy_counters")
    }
}

ibv_export! { "IBVERBS_PRIVATE_34", "IBVERBS_PRIVATE_65";
    /// Kernel command `DESTROY_CQ`: not supported (returns `EOPNOTSUPP`).
    fn ibv_cmd_destroy_cq(_cq: *mut c_void) -> c_int {
        no_kernel("ibv_cmd_destroy_cq")
    }
}

ibv_export! { "IBVERBS_PRIVATE_34", "IBVERBS_PRIVATE_65";
    /// Kernel command `DESTROY_FLOW`: not supported (returns `EOPNOTSUPP`).
    fn ibv_cmd_destroy_flow(_flow_id: *mut c_void) -> c_int {
        no_kernel("ibv_cmd_destroy_flow")
    }
}

ibv_export! { "IBVERBS_PRIVATE_34", "IBVERBS_PRIVATE_65";
    /// Kernel command `DESTROY_FLOW_ACTION`: not supported (returns `EOPNOTSUPP`).
    fn ibv_cmd_destroy_flow_action(_action: *mut c_void) -> c_int {
        no_kernel("ibv_cmd_destroy_flow_action")
    }
}

ibv_export! { "IBVERBS_PRIVATE_34", "IBVERBS_PRIVATE_65";
    /// Kernel command `DESTROY_QP`: not supported (returns `EOPNOTSUPP`).
    fn ibv_cmd_destroy_qp(_qp: *mut c_void) -> c_int {
        no_kernel("ibv_cmd_destroy_qp")
    }
}

ibv_export! { "IBVERBS_PRIVATE_34", "IBVERBS_PRIVATE_65";
    /// Kernel command `DESTROY_RWQ_IND_TBL`: not supported (returns `EOPNOTSUPP`).
    fn ibv_cmd_destroy_rwq_ind_table(_rwq_ind_table: *mut c_void) -> c_int {
        no_kernel("ibv_cmd_destroy_rwq_ind_table")
    }
}

ibv_export! { "IBVERBS_PRIVATE_34", "IBVERBS_PRIVATE_65";
    /// Kernel command `DESTROY_SRQ`: not supported (returns `EOPNOTSUPP`).
    fn ibv_cmd_destroy_srq(_srq: *mut c_void) -> c_int {
        no_kernel("ibv_cmd_destroy_srq")
    }
}

ibv_export! { "IBVERBS_PRIVATE_34", "IBVERBS_PRIVATE_65";
    /// Kernel command `DESTROY_WQ`: not supported (returns `EOPNOTSUPP`).
    fn ibv_cmd_destroy_wq(_wq: *mut c_void) -> c_int {
        no_kernel("ibv_cmd_destroy_wq")
    }
}

ibv_export! { "IBVERBS_PRIVATE_34", "IBVERBS_PRIVATE_65";
    /// Kernel command `DETACH_MCAST`: not supported (returns `EOPNOTSUPP`).
    fn ibv_cmd_detach_mcast(_qp: *mut c_void, _gid: *const c_void, _lid: u16) -> c_int {
        no_kernel("ibv_cmd_detach_mcast")
    }
}

ibv_export! { "IBVERBS_PRIVATE_34", "IBVERBS_PRIVATE_65";
    /// Kernel command `FREE_DM`: not supported (returns `EOPNOTSUPP`).
    fn ibv_cmd_free_dm(_dm: *mut c_void) -> c_int {
        no_kernel("ibv_cmd_free_dm")
    }
}

ibv_export! { "IBVERBS_PRIVATE_34", "IBVERBS_PRIVATE_65";
    /// Kernel command `GET_CONTEXT`: not supported (returns `EOPNOTSUPP`).
    fn ibv_cmd_get_context(_context: *mut c_void, _cmd: *mut c_void, _cmd_size: usize, _resp: *mut c_void, _resp_size: usize) -> c_int {
        no_kernel("ibv_cmd_get_context")
    }
}

ibv_export! { "IBVERBS_PRIVATE_34", "IBVERBS_PRIVATE_65";
    /// Kernel command `MODIFY_CQ`: not supported (returns `EOPNOTSUPP`).
    fn ibv_cmd_modify_cq(_cq: *mut c_void, _attr: *mut c_void, _cmd: *mut c_void, _cmd_size: usize) -> c_int {
        no_kernel("ibv_cmd_modify_cq")
    }
}

ibv_export! { "IBVERBS_PRIVATE_34", "IBVERBS_PRIVATE_65";
    /// Kernel command `MODIFY_FLOW_ACTION_ESP`: not supported (returns `EOPNOTSUPP`).
    fn ibv_cmd_modify_flow_action_esp(_flow_action: *mut c_void, _attr: *mut c_void, _driver: *mut c_void) -> c_int {
        no_kernel("ibv_cmd_modify_flow_action_esp")
    }
}

ibv_export! { "IBVERBS_PRIVATE_34", "IBVERBS_PRIVATE_65";
    /// Kernel command `MODIFY_QP`: not supported (returns `EOPNOTSUPP`).
    fn ibv_cmd_modify_qp(_qp: *mut c_void, _attr: *mut c_void, _attr_mask: c_int, _cmd: *mut c_void, _cmd_size: usize) -> c_int {
        no_kernel("ibv_cmd_modify_qp")
    }
}

ibv_export! { "IBVERBS_PRIVATE_34", "IBVERBS_PRIVATE_65";
    /// Kernel command `MODIFY_QP` (extended): not supported (returns `EOPNOTSUPP`).
    #[allow(clippy::too_many_arguments)]
    fn ibv_cmd_modify_qp_ex(_qp: *mut c_void, _attr: *mut c_void, _attr_mask: c_int, _cmd: *mut c_void, _cmd_size: usize, _resp: *mut c_void, _resp_size: usize) -> c_int {
        no_kernel("ibv_cmd_modify_qp_ex")
    }
}

ibv_export! { "IBVERBS_PRIVATE_34", "IBVERBS_PRIVATE_65";
    /// Kernel command `MODIFY_SRQ`: not supported (returns `EOPNOTSUPP`).
    fn ibv_cmd_modify_srq(_srq: *mut c_void, _srq_attr: *mut c_void, _srq_attr_mask: c_int, _cmd: *mut c_void, _cmd_size: usize) -> c_int {
        no_kernel("ibv_cmd_modify_srq")
    }
}

ibv_export! { "IBVERBS_PRIVATE_34", "IBVERBS_PRIVATE_65";
    /// Kernel command `MODIFY_WQ`: not supported (returns `EOPNOTSUPP`).
    fn ibv_cmd_modify_wq(_wq: *mut c_void, _attr: *mut c_void, _cmd: *mut c_void, _cmd_size: usize) -> c_int {
        no_kernel("ibv_cmd_modify_wq")
    }
}

ibv_export! { "IBVERBS_PRIVATE_34", "IBVERBS_PRIVATE_65";
    /// Kernel command `OPEN_QP`: not supported (returns `EOPNOTSUPP`).
    #[allow(clippy::too_many_arguments)]
    fn ibv_cmd_open_qp(_context: *mut c_void, _qp: *mut c_void, _vqp_sz: c_int, _attr: *mut c_void, _cmd: *mut c_void, _cmd_size: usize, _resp: *mut c_void, _resp_size: usize) -> c_int {
        no_kernel("ibv_cmd_open_qp")
    }
}

ibv_export! { "IBVERBS_PRIVATE_34", "IBVERBS_PRIVATE_65";
    /// Kernel command `OPEN_XRCD`: not supported (returns `EOPNOTSUPP`).
    #[allow(clippy::too_many_arguments)]
    fn ibv_cmd_open_xrcd(_context: *mut c_void, _xrcd: *mut c_void, _vxrcd_size: c_int, _attr: *mut c_void, _cmd: *mut c_void, _cmd_size: usize, _resp: *mut c_void, _resp_size: usize) -> c_int {
        no_kernel("ibv_cmd_open_xrcd")
    }
}

ibv_export! { "IBVERBS_PRIVATE_34", "IBVERBS_PRIVATE_65";
    /// Kernel command `POLL_CQ`: not supported. Like the real one, fails
    /// with -1 (`errno = EOPNOTSUPP`), since success is a count.
    fn ibv_cmd_poll_cq(_cq: *mut c_void, _ne: c_int, _wc: *mut c_void) -> c_int {
        no_kernel("ibv_cmd_poll_cq");
        -1
    }
}

ibv_export! { "IBVERBS_PRIVATE_34", "IBVERBS_PRIVATE_65";
    /// Kernel command `POST_RECV`: not supported (returns `EOPNOTSUPP`).
    fn ibv_cmd_post_recv(_qp: *mut c_void, _wr: *mut c_void, _bad_wr: *mut *mut c_void) -> c_int {
        no_kernel("ibv_cmd_post_recv")
    }
}

ibv_export! { "IBVERBS_PRIVATE_34", "IBVERBS_PRIVATE_65";
    /// Kernel command `POST_SEND`: not supported (returns `EOPNOTSUPP`).
    fn ibv_cmd_post_send(_qp: *mut c_void, _wr: *mut c_void, _bad_wr: *mut *mut c_void) -> c_int {
        no_kernel("ibv_cmd_post_send")
    }
}

ibv_export! { "IBVERBS_PRIVATE_34", "IBVERBS_PRIVATE_65";
    /// Kernel command `POST_SRQ_RECV`: not supported (returns `EOPNOTSUPP`).
    fn ibv_cmd_post_srq_recv(_srq: *mut c_void, _wr: *mut c_void, _bad_wr: *mut *mut c_void) -> c_int {
        no_kernel("ibv_cmd_post_srq_recv")
    }
}

ibv_export! { "IBVERBS_PRIVATE_34", "IBVERBS_PRIVATE_65";
    /// Kernel command `QUERY_CONTEXT`: not supported (returns `EOPNOTSUPP`).
    fn ibv_cmd_query_context(_ctx: *mut c_void, _driver: *mut c_void) -> c_int {
        no_kernel("ibv_cmd_query_context")
    }
}

ibv_export! { "IBVERBS_PRIVATE_34", "IBVERBS_PRIVATE_65";
    /// Kernel command `QUERY_DEVICE`: not supported (returns `EOPNOTSUPP`).
    fn ibv_cmd_query_device_any(_context: *mut c_void, _input: *const c_void, _attr: *mut c_void, _attr_size: usize, _resp: *mut c_void, _resp_size: *mut usize) -> c_int {
        no_kernel("ibv_cmd_query_device_any")
    }
}

ibv_export! { "IBVERBS_PRIVATE_34", "IBVERBS_PRIVATE_65";
    /// Kernel command `QUERY_MR`: not supported (returns `EOPNOTSUPP`).
    fn ibv_cmd_query_mr(_pd: *mut c_void, _vmr: *mut c_void, _mr_handle: u32) -> c_int {
        no_kernel("ibv_cmd_query_mr")
    }
}

ibv_export! { "IBVERBS_PRIVATE_34", "IBVERBS_PRIVATE_65";
    /// Kernel command `QUERY_PORT`: not supported (returns `EOPNOTSUPP`).
    fn ibv_cmd_query_port(_context: *mut c_void, _port_num: u8, _port_attr: *mut c_void, _cmd: *mut c_void, _cmd_size: usize) -> c_int {
        no_kernel("ibv_cmd_query_port")
    }
}

ibv_export! { "IBVERBS_PRIVATE_34", "IBVERBS_PRIVATE_65";
    /// Kernel command `QUERY_QP`: not supported (returns `EOPNOTSUPP`).
    fn ibv_cmd_query_qp(_qp: *mut c_void, _qp_attr: *mut c_void, _attr_mask: c_int, _qp_init_attr: *mut c_void, _cmd: *mut c_void, _cmd_size: usize) -> c_int {
        no_kernel("ibv_cmd_query_qp")
    }
}

ibv_export! { "IBVERBS_PRIVATE_34", "IBVERBS_PRIVATE_65";
    /// Kernel command `QUERY_SRQ`: not supported (returns `EOPNOTSUPP`).
    fn ibv_cmd_query_srq(_srq: *mut c_void, _srq_attr: *mut c_void, _cmd: *mut c_void, _cmd_size: usize) -> c_int {
        no_kernel("ibv_cmd_query_srq")
    }
}

ibv_export! { "IBVERBS_PRIVATE_34", "IBVERBS_PRIVATE_65";
    /// Kernel command `READ_COUNTERS`: not supported (returns `EOPNOTSUPP`).
    fn ibv_cmd_read_counters(_vcounters: *mut c_void, _counters_value: *mut u64, _ncounters: u32, _flags: u32, _link: *mut c_void) -> c_int {
        no_kernel("ibv_cmd_read_counters")
    }
}

ibv_export! { "IBVERBS_PRIVATE_34", "IBVERBS_PRIVATE_65";
    /// Kernel command `REG_DM_MR`: not supported (returns `EOPNOTSUPP`).
    #[allow(clippy::too_many_arguments)]
    fn ibv_cmd_reg_dm_mr(_pd: *mut c_void, _dm: *mut c_void, _offset: u64, _length: usize, _access: c_uint, _vmr: *mut c_void, _link: *mut c_void) -> c_int {
        no_kernel("ibv_cmd_reg_dm_mr")
    }
}

ibv_export! { "IBVERBS_PRIVATE_34", "IBVERBS_PRIVATE_65";
    /// Kernel command `REG_DMABUF_MR`: not supported (returns `EOPNOTSUPP`).
    #[allow(clippy::too_many_arguments)]
    fn ibv_cmd_reg_dmabuf_mr(_pd: *mut c_void, _offset: u64, _length: usize, _iova: u64, _fd: c_int, _access: c_int, _vmr: *mut c_void) -> c_int {
        no_kernel("ibv_cmd_reg_dmabuf_mr")
    }
}

ibv_export! { "IBVERBS_PRIVATE_34", "IBVERBS_PRIVATE_65";
    /// Kernel command `REG_MR`: not supported (returns `EOPNOTSUPP`).
    #[allow(clippy::too_many_arguments)]
    fn ibv_cmd_reg_mr(_pd: *mut c_void, _addr: *mut c_void, _length: usize, _hca_va: u64, _access: c_int, _vmr: *mut c_void, _cmd: *mut c_void, _cmd_size: usize, _resp: *mut c_void, _resp_size: usize) -> c_int {
        no_kernel("ibv_cmd_reg_mr")
    }
}

ibv_export! { "IBVERBS_PRIVATE_34", "IBVERBS_PRIVATE_65";
    /// Kernel command `REQ_NOTIFY_CQ`: not supported (returns `EOPNOTSUPP`).
    fn ibv_cmd_req_notify_cq(_cq: *mut c_void, _solicited_only: c_int) -> c_int {
        no_kernel("ibv_cmd_req_notify_cq")
    }
}

ibv_export! { "IBVERBS_PRIVATE_34", "IBVERBS_PRIVATE_65";
    /// Kernel command `REREG_MR`: not supported (returns `EOPNOTSUPP`).
    #[allow(clippy::too_many_arguments)]
    fn ibv_cmd_rereg_mr(_vmr: *mut c_void, _flags: u32, _addr: *mut c_void, _length: usize, _hca_va: u64, _access: c_int, _pd: *mut c_void, _cmd: *mut c_void, _cmd_sz: usize, _resp: *mut c_void, _resp_sz: usize) -> c_int {
        no_kernel("ibv_cmd_rereg_mr")
    }
}

ibv_export! { "IBVERBS_PRIVATE_34", "IBVERBS_PRIVATE_65";
    /// Kernel command `RESIZE_CQ`: not supported (returns `EOPNOTSUPP`).
    fn ibv_cmd_resize_cq(_cq: *mut c_void, _cqe: c_int, _cmd: *mut c_void, _cmd_size: usize, _resp: *mut c_void, _resp_size: usize) -> c_int {
        no_kernel("ibv_cmd_resize_cq")
    }
}

ibv_export! { "IBVERBS_PRIVATE_34", "IBVERBS_PRIVATE_65";
    /// Kernel command `CREATE_CQ` (extended, with provider attributes;
    /// rdma-core 50 and later's libmlx5 use it): not supported (returns `EOPNOTSUPP`).
    #[allow(clippy::too_many_arguments)]
    fn ibv_cmd_create_cq_ex2(_context: *mut c_void, _cq_attr: *const c_void, _prov_attr: *mut c_void, _cq: *mut c_void, _cmd: *mut c_void, _cmd_size: usize, _resp: *mut c_void, _resp_size: usize, _cmd_flags: u32, _driver: *mut c_void) -> c_int {
        no_kernel("ibv_cmd_create_cq_ex2")
    }
}

ibv_export! { "IBVERBS_PRIVATE_34", "IBVERBS_PRIVATE_65";
    /// The name of a work request opcode (`enum ibv_wr_opcode`), as
    /// rdma-core's `enum_strs.c` has it; "unknown" outside the enum.
    fn ibv_wr_opcode_str(opcode: c_int) -> *const c_char {
        const NAMES: [&std::ffi::CStr; 15] = [
            c"rdma-write",
            c"rdma-write-with-imm",
            c"send",
            c"send-with-imm",
            c"rdma-read",
            c"atomic-cmp-and-swp",
            c"atomic-fetch-and-add",
            c"local-inv",
            c"bind-mw",
            c"send-with-inv",
            c"tso",
            c"driver1",
            c"unknown", // 12 is no opcode
            c"unknown", // 13 is no opcode
            c"flush",
        ];
        match opcode {
            15 => c"atomic-write".as_ptr(),
            o => usize::try_from(o).ok().and_then(|i| NAMES.get(i)).copied().unwrap_or(c"unknown").as_ptr(),
        }
    }
}

// rdma-core 65's additions to the provider interface.

macro_rules! no_kernel_65 {
    ($($(#[$m:meta])* fn $name:ident ( $($arg:ident : $ty:ty),* $(,)? );)*) => {
        $(
            ibv_export! { "IBVERBS_PRIVATE_65";
                $(#[$m])*
                fn $name( $($arg: $ty),* ) -> c_int {
                    no_kernel(stringify!($name))
                }
            }
        )*
    };
}

no_kernel_65! {
    /// Kernel command `ALLOC_DMAH`: not supported (returns `EOPNOTSUPP`).
    fn ibv_cmd_alloc_dmah(_ctx: *mut c_void, _st: *mut c_void, _attr: *mut c_void);
    /// Kernel command `FREE_DMAH`: not supported (returns `EOPNOTSUPP`).
    fn ibv_cmd_free_dmah(_dmah: *mut c_void);
    /// Kernel command `CREATE_COMP_CNTR`: not supported (returns `EOPNOTSUPP`).
    fn ibv_cmd_create_comp_cntr(_context: *mut c_void, _comp_cntr: *mut c_void, _link: *mut c_void);
    /// Kernel command `DESTROY_COMP_CNTR`: not supported (returns `EOPNOTSUPP`).
    fn ibv_cmd_destroy_comp_cntr(_comp_cntr: *mut c_void);
    /// Kernel command `SET_COMP_CNTR`: not supported (returns `EOPNOTSUPP`).
    fn ibv_cmd_set_comp_cntr(_comp_cntr: *mut c_void, _value: u64);
    /// Kernel command `SET_ERR_COMP_CNTR`: not supported (returns `EOPNOTSUPP`).
    fn ibv_cmd_set_err_comp_cntr(_comp_cntr: *mut c_void, _value: u64);
    /// Kernel command `INC_COMP_CNTR`: not supported (returns `EOPNOTSUPP`).
    fn ibv_cmd_inc_comp_cntr(_comp_cntr: *mut c_void, _amount: u64);
    /// Kernel command `INC_ERR_COMP_CNTR`: not supported (returns `EOPNOTSUPP`).
    fn ibv_cmd_inc_err_comp_cntr(_comp_cntr: *mut c_void, _amount: u64);
    /// Kernel command `READ_COMP_CNTR`: not supported (returns `EOPNOTSUPP`).
    fn ibv_cmd_read_comp_cntr(_comp_cntr: *mut c_void, _value: *mut u64);
    /// Kernel command `READ_ERR_COMP_CNTR`: not supported (returns `EOPNOTSUPP`).
    fn ibv_cmd_read_err_comp_cntr(_comp_cntr: *mut c_void, _value: *mut u64);
    /// Kernel command `QP_ATTACH_COMP_CNTR`: not supported (returns `EOPNOTSUPP`).
    fn ibv_cmd_qp_attach_comp_cntr(_qp: *mut c_void, _comp_cntr: *mut c_void, _attr: *mut c_void);
    /// Kernel command `QUERY_COMP_CNTR_CAPS`: not supported (returns `EOPNOTSUPP`).
    fn ibv_cmd_query_comp_cntr_caps(_context: *mut c_void, _caps: *mut c_void, _caps_size: usize);
    /// Kernel command `QUERY_PORT_SPEED`: not supported (returns `EOPNOTSUPP`).
    fn ibv_cmd_query_port_speed(_context: *mut c_void, _port_num: u32, _speed: *mut u64);
    /// Kernel command `REG_MR` with `ibv_mr_init_attr`: not supported (returns `EOPNOTSUPP`).
    fn ibv_cmd_reg_mr_ex(_pd: *mut c_void, _vmr: *mut c_void, _attr: *mut c_void);
}

ibv_export! { "IBVERBS_PRIVATE_65";
    /// Kernel command `EXPORT_DMABUF_FD`: not supported (-1, `errno =
    /// EOPNOTSUPP`: the real one returns an fd or -1).
    fn ibv_cmd_export_dmabuf_fd(_ctx: *mut c_void, _pg_off: i64) -> c_int {
        no_kernel("ibv_cmd_export_dmabuf_fd");
        -1
    }
}

ibv_export! { "IBVERBS_PRIVATE_65";
    /// A dma-buf heap for confidential-computing shared memory: there is
    /// none (NULL, `errno = EOPNOTSUPP`).
    fn ibv_dmabuf_heap_cc_shared_init() -> *mut c_void {
        no_kernel_ptr("ibv_dmabuf_heap_cc_shared_init")
    }
}

ibv_export! { "IBVERBS_PRIVATE_65";
    /// Allocation from a dma-buf heap: no heap is ever made (NULL,
    /// `errno = EOPNOTSUPP`).
    fn ibv_dmabuf_heap_alloc(_heap: *mut c_void, _size: usize, _dmabuf_fd: *mut c_int) -> *mut c_void {
        no_kernel_ptr("ibv_dmabuf_heap_alloc")
    }
}

ibv_export! { "IBVERBS_PRIVATE_65";
    /// Frees a dma-buf heap allocation: none exists, nothing to free.
    fn ibv_dmabuf_heap_free(_buf: *mut c_void, _size: usize, _dmabuf_fd: c_int) {}
}

ibv_export! { "IBVERBS_PRIVATE_65";
    /// Destroys a dma-buf heap: none exists, nothing to destroy.
    fn ibv_dmabuf_heap_destroy(_heap: *mut c_void) {}
}

#[cfg(test)]
mod tests {
    use std::ffi::CStr;

    use super::*;

    fn s(p: *const c_char) -> &'static str {
        // SAFETY: the function under test returns pointers to static C strings.
        unsafe { CStr::from_ptr(p) }.to_str().unwrap()
    }

    #[test]
    fn wr_opcode_names_match_rdma_core() {
        // SAFETY: takes a plain integer.
        unsafe {
            assert_eq!(s(ibv_wr_opcode_str(0)), "rdma-write");
            assert_eq!(s(ibv_wr_opcode_str(4)), "rdma-read");
            assert_eq!(s(ibv_wr_opcode_str(9)), "send-with-inv");
            assert_eq!(s(ibv_wr_opcode_str(14)), "flush");
            assert_eq!(s(ibv_wr_opcode_str(15)), "atomic-write");
            assert_eq!(s(ibv_wr_opcode_str(16)), "unknown");
            assert_eq!(s(ibv_wr_opcode_str(-1)), "unknown");
        }
    }

    #[test]
    fn kernel_commands_fail_as_without_a_kernel() {
        // SAFETY: the functions ignore their pointer arguments.
        unsafe {
            let null = std::ptr::null_mut();
            assert_eq!(ibv_cmd_alloc_pd(null, null, null, 0, null, 0), libc::EOPNOTSUPP);
            assert_eq!(ibv_cmd_poll_cq(null, 1, null), -1);
            assert_eq!(*libc::__errno_location(), libc::EOPNOTSUPP);
            assert_eq!(ibv_cmd_create_cq_ex2(null, null, null, null, null, 0, null, 0, 0, null), libc::EOPNOTSUPP);
            assert_eq!(ibv_cmd_query_port_speed(null, 1, null.cast()), libc::EOPNOTSUPP);
            assert_eq!(ibv_cmd_export_dmabuf_fd(null, 0), -1);
            assert!(ibv_dmabuf_heap_cc_shared_init().is_null());
            assert_eq!(__ioctl_final_num_attrs(3, null), 3);
            verbs_register_driver_34(std::ptr::null());
            verbs_register_driver_65(std::ptr::null());
        }
    }
}
