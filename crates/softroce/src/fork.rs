//! `fork()` with devices open. The child of a process with open devices has
//! copies of their engines but not their driver threads. Two things follow:
//!
//! - a driver thread takes its device's state lock on every tick; a fork
//!   that lands meanwhile would leave the child's copy of the lock held by
//!   a thread that does not exist there, and the child's first verb on an
//!   inherited object (a Python child's teardown destroys them all) would
//!   block forever. `pthread_atfork` handlers therefore hold every open
//!   device's state lock across `fork()`, so each copy is consistent and
//!   unlocked in the child;
//! - the child must not join the parent's driver thread when its last
//!   handle to a device goes ([`crate::context::Owner`] checks the pid).

use std::cell::RefCell;
use std::sync::{Arc, Mutex, MutexGuard, Once, Weak};

use crate::driver::{Shared, State};

/// Devices opened in this process (entries of closed ones are pruned).
static LIVE: Mutex<Vec<Weak<Shared>>> = Mutex::new(Vec::new());

/// What `prepare` holds until `parent` / `child` run, in the forking thread.
/// Each state guard is stored before the `Arc` that keeps its mutex alive,
/// so it drops first.
type Held = (Option<MutexGuard<'static, Vec<Weak<Shared>>>>, Vec<(MutexGuard<'static, State>, Arc<Shared>)>);

thread_local! {
    static HELD: RefCell<Held> = const { RefCell::new((None, Vec::new())) };
}

/// Registers an opened device (and the handlers, once per process).
pub(crate) fn register(shared: &Arc<Shared>) {
    static HANDLERS: Once = Once::new();
    HANDLERS.call_once(|| {
        // SAFETY: three `extern "C"` functions that never unwind; glibc runs
        // them in the thread calling fork().
        #[allow(unsafe_code)]
        unsafe {
            libc::pthread_atfork(Some(prepare), Some(release), Some(release));
        }
    });
    let mut live = LIVE.lock().unwrap_or_else(|p| p.into_inner());
    live.retain(|w| w.strong_count() > 0);
    live.push(Arc::downgrade(shared));
}

extern "C" fn prepare() {
    let _ = std::panic::catch_unwind(|| {
        let live = LIVE.lock().unwrap_or_else(|p| p.into_inner());
        let held: Vec<_> = live
            .iter()
            .filter_map(Weak::upgrade)
            .map(|s| {
                let g = s.lock();
                // SAFETY: the guard borrows from `*s`, which the `Arc` stored
                // beside it keeps alive until after the guard is dropped.
                #[allow(unsafe_code)]
                let g = unsafe { std::mem::transmute::<MutexGuard<'_, State>, MutexGuard<'static, State>>(g) };
                (g, s)
            })
            .collect();
        HELD.with(|h| *h.borrow_mut() = (Some(live), held));
    });
}

/// `parent` and `child`: let the locks go (in the child, the forking
/// thread's copies of them, which it holds).
extern "C" fn release() {
    let _ = std::panic::catch_unwind(|| {
        HELD.with(|h| {
            let (live, held) = std::mem::take(&mut *h.borrow_mut());
            drop(held);
            drop(live);
        });
    });
}
