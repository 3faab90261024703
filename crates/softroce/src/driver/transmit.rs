//! Transmitting: every packet the engine has to send goes by one of the
//! links, the local link (`local_link.rs`: a device of this host) or the
//! socket link (`socket_link.rs`), or, a MAD to QP 1 of this very shared
//! device, to the member that owns the port's GSI; each is recorded in the
//! capture as it leaves.

use super::*;

impl Shared {
    /// Sends what a waiter's pass or a receive post deferred, if anything:
    /// the application is about to sleep where softroce cannot see it (on
    /// a completion channel's fd).
    pub(crate) fn flush_owed(&self) {
        if self.tx_owed.is_some() {
            let mut st = self.lock();
            let _ = self.flush(&mut st);
        }
    }

    /// Sends everything the engine has to send now (also what a waiter's
    /// pass deferred), e.g. before a QP is destroyed.
    pub(crate) fn flush(&self, st: &mut State) -> io::Result<()> {
        self.transmit(st, Instant::now(), false)
    }

    /// Pulls every packet due from the engine and sends it.
    ///
    /// `first_alone`: a post found that a waiter's pass deferred packets
    /// (the ACK of the SEND its application now answers, typically). If the
    /// post's first packet is a whole request (a one-packet message), it is
    /// what the peer waits for: it leaves alone in a `sendmmsg` of its own,
    /// and the rest in a second call while the peer wakes on another CPU.
    /// A lone packet reaches the peer sooner than a GSO send of two, and the
    /// ACK leaves the ping-pong's path (on both sides: the peer takes it
    /// after its reply). Bulk messages of many packets gain nothing from
    /// this, and on one CPU the peer cannot run meanwhile, so the second
    /// call would only delay it: the caller asks only with `reply_first`.
    pub(super) fn transmit(&self, st: &mut State, now: Instant, first_alone: bool) -> io::Result<()> {
        self.tx_owed.store(None);
        if !st.dev.transmit_ready() {
            return st.tap.as_mut().map_or(Ok(()), Tap::flush);
        }
        let local = st.local_link.begin();
        let State { dev, socket_link, head, pieces, tap, stats, scratch, sources, local_link, .. } = st;
        let member = self.sock.member();
        let mut socket = socket_link.begin(&self.sock, first_alone);
        // A packet's payload pieces: on the stack, spilling to the heap only
        // past INLINE_PIECES (a packet over many small SGEs).
        let mut inline: [&[u8]; INLINE_PIECES] = [&[]; INLINE_PIECES];
        let mut spill: Vec<&[u8]> = Vec::new();
        let mut result = Ok(());
        dev.poll_transmit_burst(now, head, pieces, |t, head, pieces| {
            let mut n = 0;
            spill.clear();
            for p in pieces {
                let Some(s) = crate::sg::piece_bytes(p) else { continue };
                if n < INLINE_PIECES {
                    inline[n] = s;
                } else {
                    if n == INLINE_PIECES {
                        spill.extend_from_slice(&inline);
                    }
                    spill.push(s);
                }
                n += 1;
            }
            let slices: &[&[u8]] = if n <= INLINE_PIECES { &inline[..n] } else { &spill };
            let p = Packet {
                src: t.src,
                src_port: t.src_port,
                dst: t.dst,
                to: sources.dst(t.dst, PORT),
                dest_qpn: t.dest_qpn,
                head,
                payload: slices,
                trailer_len: t.pad_len + ICRC_LEN,
            };
            let gsi = t.dest_qpn.get() == roce_proto::device::GSI_QPN;
            // The route: a device of this host through memory (not a MAD:
            // QP 1's are routed by their payload, `roce_host::gsi`); a MAD
            // to QP 1 of this very device to its owner's seat; else the socket.
            let mut sent = None;
            // The trailer is computed at most once, only if a link needs it.
            let mut computed = None;
            if local && !gsi {
                let via = member.map(|m| (m, &*self.sock));
                let icrc = || *computed.get_or_insert_with(|| icrc_trailer(t, head, slices));
                if let Sent::Local(trailer) = local_link.send(&p, via, now, tap.is_some(), icrc, stats) {
                    sent = Some((trailer, None));
                }
            }
            let (trailer, ipv4_id) = match sent {
                Some(s) => s,
                None => {
                    let trailer = computed.unwrap_or_else(|| icrc_trailer(t, head, slices));
                    match member.filter(|m| gsi && t.dst == m.addr().ip()) {
                        Some(m) => {
                            let whole = whole_packet(scratch, head, slices, &trailer[..p.trailer_len]);
                            m.send_local_mad(&self.sock, t.src, t.src_port, t.dst, whole);
                            (trailer, None)
                        }
                        None => match socket.send(&p, t, trailer, sources, stats) {
                            Ok(Queued::Socket { trailer, ipv4_id }) => (trailer, ipv4_id),
                            Ok(Queued::Lost) => return true,
                            Err(e) => {
                                result = Err(e);
                                return false;
                            }
                        },
                    }
                }
            };
            if let Some(tp) = tap.as_mut() {
                let whole = whole_packet(scratch, head, slices, &trailer[..p.trailer_len]);
                if let Err(e) = tp.write(t.src, t.src_port, t.dst, PORT, ipv4_id, whole) {
                    result = Err(e);
                    return false;
                }
            }
            true
        });
        let (flushed, unbound) = socket.finish(result.is_ok(), sources, stats);
        result = result.and(flushed);
        local_link.finish(member.map(|m| (m, &*self.sock)), stats);
        if unbound {
            stats.src_port_fallbacks += 1;
            dev.set_udp_src_port(Some(self.sock.local_port()));
        }
        if let Some(tp) = tap.as_mut() {
            tp.flush()?;
        }
        result
    }
}

/// The packet of `head`, `slices` and `trailer` in one piece, in `scratch`
/// (for a capture, or a MAD handed to another member).
pub(super) fn whole_packet<'s>(scratch: &'s mut Vec<u8>, head: &[u8], slices: &[&[u8]], trailer: &[u8]) -> &'s [u8] {
    scratch.clear();
    scratch.extend_from_slice(head);
    slices.iter().for_each(|s| scratch.extend_from_slice(s));
    scratch.extend_from_slice(trailer);
    scratch
}

/// The pad and ICRC that end the packet `t` with headers `head` and
/// payload `slices` (`t.pad_len + ICRC_LEN` bytes of the result).
pub(super) fn icrc_trailer(t: &roce_proto::TransmitGather, head: &[u8], slices: &[&[u8]]) -> [u8; 8] {
    let mut trailer = [0u8; 8];
    trailer[t.pad_len..t.pad_len + ICRC_LEN].copy_from_slice(&t.icrc(head, slices.iter().copied()).to_le_bytes());
    trailer
}
