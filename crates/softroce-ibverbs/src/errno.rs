//! The errno of a softroce error, for every verb that fails with one.
//!
//! One mapping for the whole library: a verb that reports a softroce error
//! as an errno calls [`errno`]. The mapping itself is
//! `softroce::Error::errno`, which softroce-rsocket's sockets share; change
//! it there.

use std::ffi::c_int;

use softroce::Error;

/// The errno a softroce error stands for (rxe's choices where it has one).
pub(crate) fn errno(e: &Error) -> c_int {
    e.errno()
}
