//! Receiving: what the socket and the local link hold goes to the engine,
//! through the capture and the fault injector when configured. On a shared
//! device, packets for other members' QPs are passed on (`roce_host`), and
//! control envelopes are answered.

use super::*;

impl Shared {
    /// Hands what waits on the socket to the engine (nothing while an
    /// application thread sleeps in the socket with the batch).
    pub(super) fn receive(&self, st: &mut State, now: Instant) -> io::Result<()> {
        let Some(mut rx) = st.rx.take() else { return Ok(()) };
        let before = st.stats.rx_packets;
        let r = loop {
            match self.sock.recv(&mut rx) {
                Ok(0) => break Ok(()),
                Ok(n) => {
                    let r = self.handle_batch(st, &rx, now);
                    if r.is_err() || n < BATCH {
                        break r;
                    }
                }
                Err(e) => break Err(e),
            }
        };
        st.rx = Some(rx);
        let found = st.stats.rx_packets != before;
        st.socket_looks.looked(now, found);
        r
    }

    /// Hands what other devices of this process handed over (the local
    /// link's inbox) to the engine, as `handle_batch` does with datagrams.
    pub(super) fn receive_local(&self, st: &mut State, now: Instant) -> io::Result<()> {
        let mut r = Ok(());
        let State { dev, faults, tap, stats, scratch, local_rx, .. } = st;
        // One packet over the local link, as `handle_batch` hands a datagram
        // on; the first error (a capture's) is kept, the packets all go on.
        let mut one = |at: Addressing, data: &[u8]| {
            stats.rx_packets += 1;
            stats.rx_local += 1;
            stats.rx_requests += u64::from(is_request(data));
            // Sent ECT(0), as every packet of softroce's sockets.
            let (src, src_port, dst, local) = (at.src, at.src_port, at.dst, !at.icrc);
            let ingested =
                ingest(dev, faults, tap, scratch, now, Arrival { src, src_port, dst, ecn: Ecn::Ect0, data, local });
            if r.is_ok() {
                r = ingested;
            }
        };
        let refused = self.inbox.as_ref().map_or(0, |inbox| inbox.drain(&mut one).refused);
        if self.local.take(local_rx) {
            local_rx.iter().flat_map(Chunk::packets).for_each(|(at, data)| one(at, data));
            self.local.recycle(local_rx.drain(..));
        }
        stats.local_refused += refused;
        r
    }

    /// Whether the local link holds packets for this device: chunks of this
    /// process's devices, or records of other processes' in its inbox.
    pub(super) fn local_pending(&self) -> bool {
        self.local.pending() || self.inbox.as_ref().is_some_and(Inbox::pending)
    }

    /// A packet of another device of this process was handed to this one
    /// over the local link: wake the threads that sleep where a datagram
    /// would have woken them. Each sets its flag, then looks at the inbox,
    /// before it sleeps; the sender pushes, then reads the flags (both
    /// SeqCst): one of the two sees the other. A busy poller or a spinning
    /// driver thread takes the packet in its next pass, with no call made.
    pub(super) fn wake_for_local(&self) {
        let mut woke = false;
        if self.driver_asleep.load(Ordering::SeqCst) {
            let _ = self.waker.wake();
            woke = true;
        }
        if self.in_socket.load(Ordering::SeqCst) {
            let _ = self.sock.wake_receiver();
            woke = true;
        }
        if self.beside.load(Ordering::SeqCst) > 0 {
            let _ = self.cq_waker.wake();
            woke = true;
        }
        if woke {
            self.local_wakes.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Datagrams that came another way than the device socket (a multicast
    /// group's, or the device's other addresses', see [`Arrivals`]) for this
    /// process's engine, in one pass.
    fn deliver_datagrams<'a>(&self, datagrams: impl Iterator<Item = Arrival<'a>>, multicast: bool) {
        let mut st = self.lock();
        let now = Instant::now();
        let made = st.dev.counters().completions;
        let State { dev, faults, tap, scratch, stats, .. } = &mut *st;
        for a in datagrams {
            if multicast {
                stats.mcast_rx += 1;
            } else {
                stats.other_gid_rx += 1;
            }
            let _ = ingest(dev, faults, tap, scratch, now, a);
        }
        let _ = tap.as_mut().map_or(Ok(()), Tap::flush);
        self.send_and_let_go(st, now, made, false);
    }

    /// Passes on the datagrams of `rx` that are other members' (the rest,
    /// this context's own, are left: at `exit()` nothing will take them).
    pub(crate) fn pass_on_others(&self, rx: &RecvBatch) {
        for s in rx.segments() {
            self.mine_or_pass_on(s.src, s.src_port, s.dst, s.data);
        }
    }

    /// Whether `data` is for this process's engine; if not, it is passed on
    /// through the device's group to the member whose QP it is (or who
    /// should see a MAD).
    fn mine_or_pass_on(&self, src: IpAddr, src_port: u16, dst: IpAddr, data: &[u8]) -> bool {
        if let Some(m) = self.sock.member()
            && let Some(r) = m.route_packet(data)
            && r != Route::Mine
        {
            m.pass_on(&self.sock, src, src_port, dst, data, 0);
            return false;
        }
        true
    }

    /// Held (reordered) packets whose time came.
    pub(super) fn release_held(&self, st: &mut State, now: Instant) {
        let State { dev, faults, .. } = st;
        if let Some(f) = faults.as_mut() {
            f.release_due(now, |p| dev.handle_datagram_ecn(now, p.src, p.src_port, p.dst, None, p.ecn, p.data));
        }
    }

    /// The packets of one received batch to the engine (through the fault
    /// injector and the capture when configured).
    pub(super) fn handle_batch(&self, st: &mut State, rx: &RecvBatch, now: Instant) -> io::Result<()> {
        let State { dev, faults, tap, stats, scratch, published, .. } = st;
        let member = self.sock.member();
        for seg in rx.segments() {
            let (mut src, mut src_port, mut dst, mut data) = (seg.src, seg.src_port, seg.dst, seg.data);
            // A packet another member passed on lost its IP header, and its mark.
            let mut ecn = seg.ecn;
            if let Some(m) = member {
                // A shared device: only this process's QPs go to its engine.
                if roce_host::envelope::is_envelope(data) {
                    match m.control(&self.sock, src, data) {
                        Control::Deliver { src: s, src_port: p, dst: d, packet } => {
                            (src, src_port, dst, data, ecn) = (s, p, d, packet, Ecn::NotEct);
                        }
                        Control::Wake => {
                            stats.wake_ups += 1;
                            continue;
                        }
                        Control::Done => continue,
                    }
                } else if let Some(Route::Member { .. } | Route::Unseated | Route::NoListenerYet) = m.route_packet(data)
                {
                    m.pass_on(&self.sock, src, src_port, dst, data, 0);
                    continue;
                }
            } else if self.sock.is_wake_up(SocketAddr::new(src, src_port), data.len()) {
                stats.wake_ups += 1;
                continue;
            }
            stats.rx_packets += 1;
            stats.rx_requests += u64::from(is_request(data));
            ingest(dev, faults, tap, scratch, now, Arrival { src, src_port, dst, ecn, data, local: false })?;
        }
        if let Some(m) = member
            && self.mode != Progress::Thread
        {
            // Strays or misdirected envelopes: the seats changed. With a
            // driver thread, that thread does it, outside the device lock (a
            // probe round may take PROBE_PATIENCE, and posting must not wait).
            m.upkeep(&self.sock);
            if published.due(now) {
                published.publish(now, dev, m);
            }
        }
        Ok(())
    }
}

impl Peer for Shared {
    fn end(&self) -> &LocalEnd {
        &self.local
    }

    fn owns(&self, head: &[u8]) -> bool {
        match self.sock.member() {
            None => true,
            Some(m) => m.route_packet(head) == Some(Route::Mine),
        }
    }

    fn owns_all(&self) -> bool {
        self.sock.member().is_none()
    }

    fn wake(&self) {
        self.wake_for_local();
    }
}

/// Whether `head` (from the BTH on) is a request packet (a known opcode
/// a requester sends).
pub(super) fn is_request(head: &[u8]) -> bool {
    head.first()
        .and_then(|&op| roce_wire::Opcode(op).info())
        .is_some_and(|i| i.direction() == roce_wire::Direction::Request)
}

/// One received packet, as it reached the driver.
pub(super) struct Arrival<'a> {
    src: IpAddr,
    src_port: u16,
    dst: IpAddr,
    ecn: Ecn,
    data: &'a [u8],
    /// Over the local link with no ICRC computed: its engine skips the
    /// check. (A receiver with a fault injector asks its senders for the
    /// ICRC, so such packets never meet the injector.)
    local: bool,
}

/// A received packet to the engine: into the capture, then through the
/// fault injector when one is configured, whatever socket it came by.
pub(super) fn ingest(
    dev: &mut Device,
    faults: &mut Option<Faults>,
    tap: &mut Option<Tap>,
    scratch: &mut Vec<u8>,
    now: Instant,
    a: Arrival<'_>,
) -> io::Result<()> {
    let Arrival { src, src_port, dst, ecn, data, local } = a;
    if let Some(t) = tap.as_mut() {
        t.write(src, src_port, dst, PORT, None, data)?;
    }
    if local {
        dev.handle_local_datagram(now, src, dst, data);
        return Ok(());
    }
    let Some(f) = faults.as_mut() else {
        dev.handle_datagram_ecn(now, src, src_port, dst, None, ecn, data);
        return Ok(());
    };
    let p = Received { src, src_port, dst, ecn, data };
    f.receive(now, p, scratch, |p| dev.handle_datagram_ecn(now, p.src, p.src_port, p.dst, None, p.ecn, p.data));
    Ok(())
}

impl Arrivals for Shared {
    fn arrived_multicast(&self, src: IpAddr, src_port: u16, group: IpAddr, data: &[u8]) {
        // A group's socket does not ask for the ECN field.
        let a = Arrival { src, src_port, dst: group, ecn: Ecn::NotEct, data, local: false };
        self.deliver_datagrams(std::iter::once(a), true);
    }

    fn arrived_batch(&self, rx: &RecvBatch) {
        // Passed on before the device is locked: a pass-on is a send.
        let mine: Vec<Arrival<'_>> = rx
            .segments()
            .filter(|s| self.mine_or_pass_on(s.src, s.src_port, s.dst, s.data))
            .map(|s| Arrival { src: s.src, src_port: s.src_port, dst: s.dst, ecn: s.ecn, data: s.data, local: false })
            .collect();
        if !mine.is_empty() {
            self.deliver_datagrams(mine.into_iter(), false);
        }
    }

    fn receive_failed(&self, multicast: bool) {
        let mut st = self.lock();
        if multicast {
            st.stats.mcast_errors += 1;
        } else {
            st.stats.other_gid_errors += 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::is_request;
    use roce_wire::Opcode;

    #[test]
    fn requests_are_told_from_responses_and_acks() {
        for op in [Opcode::RC_SEND_MIDDLE, Opcode::RC_RDMA_READ_REQUEST, Opcode::RC_FETCH_ADD, Opcode::UD_SEND_ONLY] {
            assert!(is_request(&[op.0, 0, 0, 0]), "{op:?}");
        }
        for op in [Opcode::RC_ACKNOWLEDGE, Opcode::RC_RDMA_READ_RESPONSE_ONLY, Opcode::RC_ATOMIC_ACKNOWLEDGE] {
            assert!(!is_request(&[op.0, 0, 0, 0]), "{op:?}");
        }
        assert!(!is_request(&[]), "no header");
    }
}
