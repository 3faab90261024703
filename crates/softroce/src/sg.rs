//! The one step of the send path that needs `unsafe`: lending registered
//! memory to the kernel for a scatter-gather send instead of copying it
//! behind the headers.

use roce_proto::Piece;

/// The bytes of `p`, borrowed for one progress pass.
///
/// Sound because the pass holds the device lock from the engine's
/// `poll_transmit_burst` (which checked the piece against a registered
/// region) until the batch is flushed or cleared, within the same pass: a
/// region cannot be deregistered, and the device cannot write it, without
/// that lock. The application may not write a buffer whose WR is in flight
/// (verbs' rule; the safe `Mr::write` also takes the lock).
pub(crate) fn piece_bytes<'pass>(p: &Piece) -> Option<&'pass [u8]> {
    // SAFETY: see above; `as_slice` checks the range against the region.
    #[allow(unsafe_code)]
    unsafe {
        p.region.as_slice(p.offset, p.len).ok()
    }
}
