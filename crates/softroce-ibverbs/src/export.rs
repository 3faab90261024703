//! How a Rust function becomes a versioned C symbol of `libibverbs.so.1`,
//! and the guard that keeps panics from unwinding into C.
//!
//! rustc hands the linker its own anonymous version script, so ours cannot
//! list symbols. Each export is therefore compiled under a private name
//! (`__softroce_NAME`) and bound to `NAME@@NODE` with a `.symver`
//! directive; `libibverbs.map` only declares the nodes (rdma-core's names:
//! IBVERBS_1.0 ... 1.18, IBVERBS_PRIVATE_34 and _65, RDMACM_1.0 ... 1.5).
//!
//! A symbol may also be bound to further nodes as `NAME@NODE` (a second
//! `.symver` on the same private name): the provider interface is one set
//! of functions that rdma-core 34-56's providers import from
//! IBVERBS_PRIVATE_34 and 65's from IBVERBS_PRIVATE_65. The dynamic loader
//! resolves a versioned reference to such a non-default version as to the
//! default one.

use std::panic::{AssertUnwindSafe, catch_unwind};

/// Defines `pub unsafe extern "C" fn $name` and exports it as
/// `$name@@$node`. The body runs under [`guard`].
macro_rules! ibv_export {
    ($node:literal $(, $also:literal)*; $(#[$m:meta])* fn $name:ident ( $($arg:ident : $ty:ty),* $(,)? ) -> $ret:ty $body:block) => {
        $(#[$m])*
        ///
        #[doc = concat!("Exported as `", stringify!($name), "@@", $node, "`", $(", `", stringify!($name), "@", $also, "`",)* ".")]
        #[unsafe(export_name = concat!("__softroce_", stringify!($name)))]
        pub unsafe extern "C" fn $name( $($arg: $ty),* ) -> $ret {
            $crate::export::guard(stringify!($name), move || -> $ret { $body })
        }
        $crate::export::symver!($name, $node $(, $also)*);
    };
    ($node:literal $(, $also:literal)*; $(#[$m:meta])* fn $name:ident ( $($arg:ident : $ty:ty),* $(,)? ) $body:block) => {
        ibv_export!($node $(, $also)*; $(#[$m])* fn $name( $($arg: $ty),* ) -> () $body);
    };
}
pub(crate) use ibv_export;

/// Exports a verb that blocks on a descriptor (`ibv_get_cq_event`,
/// `ibv_get_async_event`, `rdma_get_cm_event`) so that `pthread_cancel`
/// of the waiting thread ends it as it ends rdma-core's `read()` there
/// (rping cancels its CQ thread on a failed accept). The body is one
/// step, run under [`guard`]: it returns [`Step::Done`] with the result,
/// or [`Step::Wait`] with the descriptor to wait on before the next step
/// (`$again` is true in the steps after a wait). The wait, a cancellation
/// point, happens in this frame, where only plain values live: the forced
/// unwind of a cancellation passes through it (`extern "C-unwind"`) and no
/// Rust destructor is skipped or caught. A step keeps what must outlive
/// the wait in a thread-local (dropped with the thread if it is
/// cancelled). A failed wait (EINTR) returns -1 with `errno`.
macro_rules! ibv_export_blocking {
    ($node:literal $(, $also:literal)*; $(#[$m:meta])* fn $name:ident ( $($arg:ident : $ty:ty),* $(,)? ) -> c_int, |$again:ident| $body:block) => {
        $(#[$m])*
        ///
        #[doc = concat!("Exported as `", stringify!($name), "@@", $node, "`", $(", `", stringify!($name), "@", $also, "`",)* ".")]
        #[unsafe(export_name = concat!("__softroce_", stringify!($name)))]
        pub unsafe extern "C-unwind" fn $name( $($arg: $ty),* ) -> ::std::ffi::c_int {
            let mut $again = false;
            loop {
                let step = $crate::export::guard(stringify!($name), move || -> $crate::export::Step { $body });
                match step {
                    $crate::export::Step::Done(r) => return r,
                    $crate::export::Step::Wait(fd) => {
                        if let Err(e) = $crate::fd::wait_readable(fd) {
                            $crate::export::set_errno(e);
                            return -1;
                        }
                    }
                }
                $again = true;
            }
        }
        $crate::export::symver!($name, $node $(, $also)*);
    };
}
pub(crate) use ibv_export_blocking;

/// Binds `__softroce_NAME` to `NAME@@NODE` (the default version) and to
/// `NAME@ALSO` for each older node.
macro_rules! symver {
    ($name:ident, $node:literal $(, $also:literal)*) => {
        ::std::arch::global_asm!(concat!(
            ".symver __softroce_", stringify!($name), ", ", stringify!($name), "@@", $node
        ));
        $(
            ::std::arch::global_asm!(concat!(
                ".symver __softroce_", stringify!($name), ", ", stringify!($name), "@", $also
            ));
        )*
    };
}
pub(crate) use symver;

/// What a blocking verb keeps across its waits (see
/// [`ibv_export_blocking`]), in a thread-local `slot`, dropped with the
/// thread if it is cancelled: made by `first` on the first step (an errno
/// for a bad argument), the same on the steps after a wait.
pub fn kept<T: Clone + 'static>(
    slot: &'static std::thread::LocalKey<std::cell::RefCell<Option<T>>>,
    again: bool,
    first: impl FnOnce() -> Result<T, std::ffi::c_int>,
) -> Result<T, Step> {
    let kept = if again {
        slot.with(|w| w.borrow().clone()).ok_or(libc::EIO)
    } else {
        first().inspect(|k| slot.with(|w| *w.borrow_mut() = Some(k.clone())))
    };
    kept.map_err(|e| {
        set_errno(e);
        Step::Done(-1)
    })
}

/// The blocking verb's result `r`; what it kept in `slot` is let go.
pub fn finished<T: 'static>(
    slot: &'static std::thread::LocalKey<std::cell::RefCell<Option<T>>>,
    r: std::ffi::c_int,
) -> Step {
    slot.with(|w| w.borrow_mut().take());
    Step::Done(r)
}

/// One step of a blocking verb (see [`ibv_export_blocking`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    /// The verb's result.
    Done(std::ffi::c_int),
    /// Wait until this descriptor is readable, then step again.
    Wait(std::ffi::c_int),
}

impl PanicValue for Step {
    fn panic_value() -> Step {
        set_errno(libc::EIO);
        Step::Done(-1)
    }
}

/// What a C entry point returns when its Rust body panicked: an error the
/// caller already checks for (rdma-core's conventions).
pub trait PanicValue {
    /// The failure value.
    fn panic_value() -> Self;
}

impl PanicValue for i32 {
    /// A positive errno: every int verb's callers test for non-zero.
    fn panic_value() -> i32 {
        set_errno(libc::EIO);
        libc::EIO
    }
}
impl PanicValue for u32 {
    fn panic_value() -> u32 {
        0
    }
}
impl PanicValue for isize {
    /// A negative errno (the `ssize_t` verbs' convention).
    fn panic_value() -> isize {
        -(libc::EIO as isize)
    }
}
impl PanicValue for u64 {
    fn panic_value() -> u64 {
        0
    }
}
impl PanicValue for u8 {
    fn panic_value() -> u8 {
        0
    }
}
impl PanicValue for u16 {
    fn panic_value() -> u16 {
        0
    }
}
impl PanicValue for () {
    fn panic_value() {}
}
impl<T> PanicValue for *mut T {
    fn panic_value() -> *mut T {
        set_errno(libc::EIO);
        std::ptr::null_mut()
    }
}
impl<T> PanicValue for *const T {
    fn panic_value() -> *const T {
        set_errno(libc::EIO);
        std::ptr::null()
    }
}

/// Runs an entry point's body; a panic becomes the entry point's failure
/// value and a line on stderr instead of unwinding into C.
pub fn guard<R: PanicValue>(name: &str, f: impl FnOnce() -> R) -> R {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(r) => r,
        Err(_) => {
            eprintln!("softroce-ibverbs: internal error in {name}; the call failed with EIO");
            R::panic_value()
        }
    }
}

/// A constructor's result as C wants it: the object (as its C view), or
/// NULL with `errno` set.
pub fn ptr_or_errno<T, U>(r: Result<*mut T, i32>) -> *mut U {
    match r {
        Ok(p) => p.cast(),
        Err(e) => {
            set_errno(e);
            std::ptr::null_mut()
        }
    }
}

/// Sets the calling thread's `errno`.
pub fn set_errno(e: i32) {
    // SAFETY: __errno_location returns the calling thread's errno slot,
    // valid for the thread's lifetime.
    unsafe { *libc::__errno_location() = e };
}

/// Whether `SOFTROCE_IBV_TRACE` asks for a line on stderr for each failed
/// verb (the errno alone rarely says why).
pub fn tracing() -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ON.get_or_init(|| softroce::env::on(softroce::env::IBV_TRACE))
}

/// Reports why `verb` failed when tracing is on.
pub fn trace_err(verb: &str, why: &dyn std::fmt::Display) {
    if tracing() {
        eprintln!("softroce-ibverbs: {verb}: {why}");
    }
}
