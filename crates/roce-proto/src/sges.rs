//! A message's bytes in the memory its scatter-gather list names: each
//! piece's L_Key is checked (protection domain, range, access) before it is
//! read or written. The requester gathers what it sends, the responder and
//! the completer scatter what arrives.

use crate::ctx::Ctx;
use crate::verbs::AccessFlags;

/// Walks the part of a message at byte `offset`, `len` bytes long, over an
/// SGE list: calls `f(grant, at, n)` for each piece after checking the L_Key
/// for `access` in protection domain `pd`; `at` is the piece's offset in the
/// walked range. Fails if a key check fails or the SGEs end first.
pub(crate) fn walk_sges(
    ctx: &Ctx<'_>,
    pd: u32,
    sges: &[crate::wr::Sge],
    mut offset: u64,
    len: usize,
    access: AccessFlags,
    mut f: impl FnMut(crate::mr::Grant, usize, usize) -> Result<(), crate::mem::MemError>,
) -> Result<(), crate::mr::AccessError> {
    let mut done = 0;
    for s in sges {
        if done == len {
            break;
        }
        let sge_len = u64::from(s.length);
        if offset >= sge_len {
            offset -= sge_len;
            continue;
        }
        let n = (sge_len - offset).min((len - done) as u64) as usize;
        let g = ctx.mrs.check(s.lkey, pd, s.addr + offset, n as u64, access)?;
        f(g, done, n)?;
        done += n;
        offset = 0;
    }
    if done == len {
        Ok(())
    } else {
        Err(crate::mr::AccessError::OutOfRange { key: 0, va: offset, len: (len - done) as u64 })
    }
}

/// Copies `dst.len()` bytes of the message at byte `offset` from the SGEs,
/// checking each L_Key in protection domain `pd` (local reads need no flag).
pub(crate) fn gather(
    ctx: &Ctx<'_>,
    pd: u32,
    sges: &[crate::wr::Sge],
    offset: u64,
    dst: &mut [u8],
) -> Result<(), crate::mr::AccessError> {
    let len = dst.len();
    walk_sges(ctx, pd, sges, offset, len, AccessFlags::EMPTY, |g, at, n| g.region.read(g.offset, &mut dst[at..at + n]))
}

/// Copies `src` into the SGEs at message byte `offset`, checking each L_Key
/// for LOCAL_WRITE in `pd`. Fails if the SGEs are too short.
pub(crate) fn scatter(
    ctx: &Ctx<'_>,
    pd: u32,
    sges: &[crate::wr::Sge],
    offset: u64,
    src: &[u8],
) -> Result<(), crate::mr::AccessError> {
    walk_sges(ctx, pd, sges, offset, src.len(), AccessFlags::LOCAL_WRITE, |g, at, n| {
        g.region.write(g.offset, &src[at..at + n])
    })
}
