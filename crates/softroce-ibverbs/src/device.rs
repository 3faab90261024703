//! Devices: the list, names, GUIDs, and opening a context (shared per
//! device, its operation tables filled); the queries are [`crate::query`]'s.
//!
//! Devices come from softroce's configuration (`SOFTROCE_DEVICES`, config
//! files, or one per interface), read once per process. Each is reported
//! as rxe reports itself: a CA on an InfiniBand transport whose port has an
//! Ethernet link layer, with RoCE v2 GIDs.

use std::ffi::{c_char, c_int, c_void};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::{Mutex, OnceLock};

use softroce::{Context, DeviceInfo, Error, Options};

use crate::abi::*;
use crate::context::{self, CtxBlock};
use crate::export::{ibv_export, set_errno};

/// A device as C sees it, with what softroce needs to open it. Boxed once
/// and never freed, so `ibv_device` pointers stay valid for the process.
pub(crate) struct DevEntry {
    pub(crate) dev: IbvDevice,
    pub(crate) info: DeviceInfo,
}

// Never resized after it is made, so `ibv_device` addresses stay put.
struct Registry(Vec<DevEntry>);
// SAFETY: the entries are written once before publication and only read
// afterwards; the raw pointers inside `IbvDevice` are null placeholders.
unsafe impl Sync for Registry {}
// SAFETY: as above.
unsafe impl Send for Registry {}

static REGISTRY: OnceLock<Result<Registry, String>> = OnceLock::new();

fn registry() -> Result<&'static [DevEntry], &'static str> {
    let r = REGISTRY.get_or_init(|| {
        let infos = softroce::devices().map_err(|e| e.to_string())?;
        let entries = infos
            .into_iter()
            .enumerate()
            .map(|(i, info)| {
                let mut dev = IbvDevice::default();
                dev.node_type = IBV_NODE_CA as _;
                dev.transport_type = IBV_TRANSPORT_IB as _;
                copy_str(&mut dev.name, &info.name);
                copy_str(&mut dev.dev_name, &format!("uverbs{i}"));
                copy_str(&mut dev.dev_path, &format!("/sys/class/infiniband_verbs/uverbs{i}"));
                copy_str(&mut dev.ibdev_path, &format!("/sys/class/infiniband/{}", info.name));
                DevEntry { dev, info }
            })
            .collect();
        Ok(Registry(entries))
    });
    match r {
        Ok(reg) => Ok(&reg.0),
        Err(e) => Err(e.as_str()),
    }
}

/// The entry of the device named `name`.
pub(crate) fn entry_by_name(name: &str) -> Option<&'static DevEntry> {
    registry().ok()?.iter().find(|e| e.info.name == name)
}

/// The entry behind a device pointer this library handed out.
pub(crate) fn entry(dev: *mut IbvDevice) -> Option<(usize, &'static DevEntry)> {
    let all = registry().ok()?;
    all.iter().enumerate().find(|(_, e)| std::ptr::eq(&e.dev, dev))
}

ibv_export! { "IBVERBS_1.1";
    /// A NULL-terminated array of the devices (free it with `ibv_free_device_list`).
    fn ibv_get_device_list(num_devices: *mut c_int) -> *mut *mut IbvDevice {
        let all = match registry() {
            Ok(a) => a,
            Err(e) => {
                static ONCE: std::sync::Once = std::sync::Once::new();
                ONCE.call_once(|| eprintln!("softroce: no devices: {e}"));
                set_errno(libc::ENODEV);
                return std::ptr::null_mut();
            }
        };
        // SAFETY: calloc of (n+1) pointers; checked for NULL below.
        let list = unsafe { libc::calloc(all.len() + 1, size_of::<*mut IbvDevice>()) } as *mut *mut IbvDevice;
        if list.is_null() {
            set_errno(libc::ENOMEM);
            return list;
        }
        for (i, e) in all.iter().enumerate() {
            // SAFETY: i < n+1 slots allocated above; the device is 'static.
            unsafe { *list.add(i) = &e.dev as *const IbvDevice as *mut IbvDevice };
        }
        if !num_devices.is_null() {
            // SAFETY: the caller passes a writable int (or NULL, checked).
            unsafe { *num_devices = all.len() as c_int };
        }
        list
    }
}

ibv_export! { "IBVERBS_1.1";
    /// Frees a list from `ibv_get_device_list`.
    fn ibv_free_device_list(list: *mut *mut IbvDevice) {
        // SAFETY: the list came from calloc in ibv_get_device_list (or is NULL).
        unsafe { libc::free(list as *mut c_void) };
    }
}

ibv_export! { "IBVERBS_1.1";
    /// The device's name.
    fn ibv_get_device_name(device: *mut IbvDevice) -> *const c_char {
        match entry(device) {
            Some((_, e)) => e.dev.name.as_ptr(),
            None => {
                set_errno(libc::EINVAL);
                std::ptr::null()
            }
        }
    }
}

ibv_export! { "IBVERBS_1.1";
    /// The node GUID, big-endian (`__be64`).
    fn ibv_get_device_guid(device: *mut IbvDevice) -> u64 {
        entry(device).map_or(0, |(_, e)| e.info.node_guid().to_be())
    }
}

ibv_export! { "IBVERBS_1.9";
    /// The device's index (its position in the list), or -1.
    fn ibv_get_device_index(device: *mut IbvDevice) -> c_int {
        entry(device).map_or(-1, |(i, _)| i as c_int)
    }
}

ibv_export! { "IBVERBS_1.1";
    /// Opens a device: joins the host's shared device on its address (UDP
    /// port 4791) and starts this process's driver for it.
    fn ibv_open_device(device: *mut IbvDevice) -> *mut IbvContext {
        let Some((_, e)) = entry(device) else {
            set_errno(libc::ENODEV);
            return std::ptr::null_mut();
        };
        match open(e) {
            Ok(ctx) => ctx,
            Err(err) => {
                eprintln!("softroce: cannot open {}: {err}", e.info.name);
                set_errno(crate::errno::errno(&err));
                std::ptr::null_mut()
            }
        }
    }
}

ibv_export! { "IBVERBS_1.1";
    /// Closes a context opened by `ibv_open_device`.
    fn ibv_close_device(context: *mut IbvContext) -> c_int {
        // SAFETY: the caller passes a context from ibv_open_device and uses
        // it no more.
        unsafe { context::close(context) }
    }
}

/// Devices open in this process, with the pid that opened them. A device
/// binds its address once: every further `ibv_open_device` of it (qperf
/// opens one per test, pyverbs tests open several) shares the same softroce
/// context, as contexts share one device in rdma-core. The entry is weak, so
/// the device closes when its last context and every object made from them
/// are gone; programs that close a context with objects still alive find it
/// still open. A `fork()` child inherits the entries of its parent but not
/// their driver threads: it never reuses them, and its own open joins the
/// host's shared device as a process of its own.
static OPEN: Mutex<Vec<(String, u32, softroce::WeakContext)>> = Mutex::new(Vec::new());

fn shared_open(e: &DevEntry) -> Result<Context, Error> {
    let pid = std::process::id();
    let mut open = OPEN.lock().unwrap_or_else(|p| p.into_inner());
    // A parent's entries are never upgraded here.
    open.retain(|(_, p, w)| *p == pid && w.upgrade().is_some());
    if let Some(ctx) = open.iter().find(|(n, p, _)| *n == e.info.name && *p == pid).and_then(|(_, _, w)| w.upgrade()) {
        return Ok(ctx);
    }
    let ctx = Context::open_with(&e.info, Options::from_env()?)?;
    open.push((e.info.name.clone(), pid, ctx.downgrade()));
    Ok(ctx)
}

/// The context rdma_cm uses for `info`'s device: the one `ibv_open_device`
/// shares (so `id->verbs` and the CM's QP 1 are one device in the process).
pub(crate) fn open_for_info(info: &softroce::DeviceInfo) -> Result<Context, Error> {
    match crate::device::entry_by_name(&info.name) {
        Some(e) => shared_open(e),
        None => Context::open_with(info, Options::from_env()?),
    }
}

/// `ibv_open_device`: opens (or shares) the device and fills both operation tables.
pub(crate) fn open(e: &DevEntry) -> Result<*mut IbvContext, Error> {
    let ctx = shared_open(e)?;
    // SAFETY: eventfd(2) with valid flags; the result is checked.
    let fd = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_NONBLOCK) };
    if fd < 0 {
        return Err(std::io::Error::last_os_error().into());
    }
    // SAFETY: a fresh fd we own.
    let cmd_fd = unsafe { OwnedFd::from_raw_fd(fd) };
    let mut vctx = VerbsContext::default();
    crate::ops::fill(&mut vctx);
    vctx.sz = size_of::<VerbsContext>() as _;
    let c = &mut vctx.context;
    c.device = &e.dev as *const IbvDevice as *mut IbvDevice;
    c.cmd_fd = cmd_fd.as_raw_fd();
    let events = ctx.async_events()?;
    c.async_fd = events.as_raw_fd();
    c.num_comp_vectors = roce_proto::device::NUM_COMP_VECTORS as c_int;
    c.abi_compat = usize::MAX as *mut c_void;
    let block = Box::new(CtxBlock::new(vctx, ctx, events, cmd_fd));
    let block = Box::into_raw(block);
    // SAFETY: a live allocation we just made.
    Ok(unsafe { &mut (*block).vctx.context as *mut IbvContext })
}
