//! The stream protocol of an rsocket, as a pure state: no verbs, no
//! memory, no locks. The I/O layer (`socket.rs`) asks it what to post and
//! tells it what completed; every number here is rdma-core rsockets'.
//!
//! # How the bytes flow
//!
//! Each side has a receive ring of `rbuf` bytes, registered for remote
//! write, and grants it to the peer half at a time. A grant is a 16-byte
//! SGE the receiver RDMA-writes into the sender's *target SGL* (an array of
//! two entries; `rs_conn_data` carries the first grant and where the array
//! is). The sender RDMA-writes data WITH IMMEDIATE (`DATA`, length) into
//! the current entry, advancing it, and moves to the other entry when one
//! is used up. Every WRITE WITH IMMEDIATE consumes a receive WQE of the
//! peer; the peer posts `rq` of them and grants *credits* (a 16-bit message
//! sequence number the sender may send up to) in `SGL` messages, whenever
//! half its ring is free again or half its receives were consumed.
//!
//! ```text
//!  receiver's ring (rbuf bytes)             sender's view
//!  +-------------------+-------------------+
//!  |      half A       |      half B       |   target[0] = A (conn data)
//!  +-------------------+-------------------+   target[1] = B (first SGL message)
//!  ^ rbuf_offset: the reader                   then A, B, ... as the reader frees them
//!                      ^ rbuf_free_offset: the next half to grant
//! ```
//!
//! Control messages (`SGL` updates, `CTRL`) use `CTRL_SLOTS` (4) send
//! queue entries of their own, counted by `ctrl_seqno` / `ctrl_max`; data
//! uses the other `sq - 4`. Sends are signaled; a data send's completion
//! returns its bytes to the send buffer, which is a ring too.

use std::collections::VecDeque;
use std::fmt;

use super::wire::{self, ConnData, Ctrl, IOMAP_LEN, Msg, MsgError, Order, RsSge, SGE_LEN};

/// `RS_SNDLOWAT`: a sender waits for this much free send buffer.
pub const SNDLOWAT: u32 = 2048;
/// `RS_OLAP_START_SIZE`: the first write of a send; each next one doubles...
pub const OLAP_START: u32 = 2048;
/// `RS_MAX_TRANSFER`: ...up to this.
pub const MAX_TRANSFER: u32 = 65536;
/// `RS_QP_CTRL_SIZE`: send queue entries kept for control messages.
pub const CTRL_SLOTS: u32 = 4;
/// `RS_SGL_SIZE`: entries of the target SGL.
pub const SGL_SIZE: usize = 2;
/// `RS_QP_MIN_SIZE`, `RS_QP_MAX_SIZE`: the queue sizes' bounds.
pub const QP_MIN: u16 = 16;
/// See `QP_MIN`.
pub const QP_MAX: u16 = 0xfffe;

/// The sizes of one connection (rsockets' `sq_size`, `rq_size`,
/// `sq_inline`, `sbuf_size`, `rbuf_size`, `target_iomap_size`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sizes {
    /// Send queue entries.
    pub sq: u16,
    /// Receive queue entries (and the credits granted).
    pub rq: u16,
    /// Largest write sent inline.
    pub inline: u16,
    /// Send buffer bytes.
    pub sbuf: u32,
    /// Receive ring bytes (even).
    pub rbuf: u32,
    /// Entries of this side's iomap table (what the peer may map).
    pub iomap: u16,
}

impl Sizes {
    /// The queue sizes clamped as `rs_set_qp_size` clamps them (to
    /// `[QP_MIN, min(device max, QP_MAX)]`), and the ring made even.
    pub fn clamped(mut self, device_max_wr: u32) -> Sizes {
        let max = device_max_wr.min(u32::from(QP_MAX)) as u16;
        self.sq = self.sq.clamp(QP_MIN, max.max(QP_MIN));
        self.rq = self.rq.clamp(QP_MIN, max.max(QP_MIN));
        self.rbuf &= !1;
        self
    }

    fn half(&self) -> u32 {
        self.rbuf / 2
    }
}

/// Where a write's bytes come from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    /// Copied into the WQE at post time (no send-buffer space used... but
    /// counted, as rsockets counts it).
    Inline,
    /// Copied into the send buffer: `len` bytes at `off`, then `wrap`
    /// bytes at 0 when the ring wraps.
    Sbuf {
        /// Offset in the send buffer.
        off: u32,
        /// Bytes there.
        len: u32,
        /// Bytes at the buffer's start.
        wrap: u32,
    },
}

/// One RDMA WRITE to post.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Write {
    /// Bytes.
    pub len: u32,
    /// The peer's address and R_Key.
    pub remote_addr: u64,
    /// See `remote_addr`.
    pub rkey: u32,
    /// The immediate value (`None`: a plain RDMA WRITE, riowrite's).
    pub imm: Option<u32>,
    /// The send tag (the message it completes).
    pub tag: u32,
    /// Where the payload comes from.
    pub source: Source,
    /// The target-SGL entry this write consumed, as it is now: the caller
    /// stores it back before posting (the peer rewrites an entry only once
    /// the sender has used it up).
    pub target_update: Option<(usize, RsSge)>,
}

/// A credit update (`rs_send_credits`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CreditUpdate {
    /// The immediate value (`SGL`, the new credit limit).
    pub imm: u32,
    /// A half of the ring granted with it: written into the peer's target
    /// SGL, in the peer's byte order.
    pub grant: Option<Grant>,
}

/// A receive buffer granted to the peer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Grant {
    /// The 16-byte entry.
    pub entry: [u8; SGE_LEN],
    /// Where in the peer's target SGL it goes.
    pub remote_addr: u64,
    /// The R_Key of the peer's target SGL.
    pub rkey: u32,
    /// Inline, or from this send-buffer offset (a control slot) when the
    /// inline size is below 16.
    pub slot: Option<u32>,
}

/// What a receive completion meant.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Received {
    /// Data queued for the reader.
    Data,
    /// New credits (and maybe a new target entry in memory).
    Credits,
    /// The peer wrote an iomap entry.
    Iomap,
    /// A control message.
    Ctrl(Ctrl),
}

/// What a send completion meant.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Sent {
    /// Resources returned.
    Done,
    /// The DISCONNECT control message left: the connection is over.
    Disconnect,
}

/// What the peer sent that rsockets never sends. The socket fails with
/// EPROTO and disconnects; nothing of it reaches memory beyond the regions
/// the peer may write anyway.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProtoError {
    /// Not an rsockets message.
    Msg(MsgError),
    /// `RS_OP_WRITE` (a local tag) as an immediate value.
    WriteOp,
    /// A receive completion without immediate data (rsockets over RoCE sends none).
    NoImmediate,
    /// A DATA message whose length is not the bytes written.
    Length {
        /// The length the immediate value says.
        said: u32,
        /// The bytes the write carried.
        wrote: u32,
    },
    /// More messages than the receives granted (the reader's queue is full).
    TooManyMessages,
    /// More bytes than the ring space granted.
    Overrun {
        /// The message's bytes.
        len: u32,
        /// The granted space not yet written.
        room: u64,
    },
    /// A control or SGL message with a payload of the wrong size.
    Payload {
        /// Its bytes.
        len: u32,
    },
    /// An iomap entry beyond this side's table.
    IomapIndex(u16),
    /// The connection data's target SGL has no entries, or overflows.
    TargetSgl,
}

impl fmt::Display for ProtoError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ProtoError::Msg(m) => m.fmt(f),
            ProtoError::WriteOp => f.write_str("immediate data with the local-only WRITE op"),
            ProtoError::NoImmediate => f.write_str("a receive completion without immediate data"),
            ProtoError::Length { said, wrote } => write!(f, "DATA message of {said} bytes carried {wrote}"),
            ProtoError::TooManyMessages => f.write_str("more messages than the credits granted"),
            ProtoError::Overrun { len, room } => write!(f, "{len} bytes written, {room} granted"),
            ProtoError::Payload { len } => write!(f, "a control message carried {len} bytes"),
            ProtoError::IomapIndex(i) => write!(f, "iomap entry {i} is beyond the table"),
            ProtoError::TargetSgl => f.write_str("the peer's target SGL is empty or out of range"),
        }
    }
}

/// One connection's protocol state (rsockets' `struct rsocket` counters).
#[derive(Debug, Clone)]
pub struct Stream {
    sizes: Sizes,
    /// The receive ring's address and R_Key (granted to the peer).
    rbuf_addr: u64,
    rbuf_rkey: u32,

    // The send side.
    /// Messages sent (`sseq_no`), and the limit the peer granted (`sseq_comp`).
    sseq_no: u16,
    sseq_comp: u16,
    /// Data send queue entries free.
    sqe_avail: u32,
    /// Send buffer bytes free, and where the next copy goes.
    sbuf_avail: u32,
    sbuf_head: u32,
    /// Control messages posted, and the count that may be (4 ahead of the
    /// completed ones).
    ctrl_seqno: u32,
    ctrl_max: u32,
    /// The target SGL as last loaded from memory, and the entry in use.
    target: [RsSge; SGL_SIZE],
    target_sge: usize,
    /// The peer's target SGL (`length`: entries), and the entry the next
    /// grant goes to.
    remote_sgl: RsSge,
    remote_sge: u32,
    /// The peer's iomap table (`length`: entries), if it has one.
    remote_iomap: Option<RsSge>,
    /// The peer's byte order (what grants and iomap entries are written in).
    peer_order: Order,

    // The receive side.
    /// Messages consumed by the reader (`rseq_no`), and the count at which
    /// credits are due again (`rseq_comp`).
    rseq_no: u16,
    rseq_comp: u16,
    /// The reader's position, the bytes it freed not yet granted, and the
    /// next half to grant.
    rbuf_offset: u32,
    rbuf_avail: u32,
    rbuf_free_offset: u32,
    /// Lengths of the DATA messages not yet read (`rmsg`), and their sum.
    rmsg: VecDeque<u32>,
    rmsg_bytes: u64,
}

impl Stream {
    /// A connection's state before the peer's connection data
    /// (`rs_init_bufs`): half the ring granted (in our connection data),
    /// half free, 4 send entries kept for control messages.
    pub fn new(sizes: Sizes, rbuf_addr: u64, rbuf_rkey: u32) -> Stream {
        Stream {
            sizes,
            rbuf_addr,
            rbuf_rkey,
            sseq_no: 0,
            sseq_comp: 0,
            sqe_avail: u32::from(sizes.sq).saturating_sub(CTRL_SLOTS),
            sbuf_avail: sizes.sbuf,
            sbuf_head: 0,
            ctrl_seqno: 0,
            ctrl_max: CTRL_SLOTS,
            target: [RsSge::default(); SGL_SIZE],
            target_sge: 0,
            remote_sgl: RsSge::default(),
            remote_sge: 0,
            remote_iomap: None,
            peer_order: Order::HOST,
            rseq_no: 0,
            rseq_comp: sizes.rq / 2,
            rbuf_offset: 0,
            rbuf_avail: sizes.half(),
            rbuf_free_offset: sizes.half(),
            rmsg: VecDeque::with_capacity(usize::from(sizes.rq)),
            rmsg_bytes: 0,
        }
    }

    /// The sizes in use.
    pub fn sizes(&self) -> Sizes {
        self.sizes
    }

    /// This side's connection data (`rs_format_conn_data`): `target_addr`
    /// and `target_rkey` name its target-SGL array (and the iomap table
    /// behind it).
    pub fn conn_data(&self, target_addr: u64, target_rkey: u32) -> ConnData {
        ConnData {
            version: wire::VERSION,
            flags: wire::FLAG_IOMAP | Order::host_flag(),
            credits: self.sizes.rq,
            iomap_size: wire::value_to_scale(u32::from(self.sizes.iomap)),
            target_sgl: RsSge { addr: target_addr, key: target_rkey, length: SGL_SIZE as u32 },
            data_buf: RsSge { addr: self.rbuf_addr, key: self.rbuf_rkey, length: self.sizes.half() },
        }
    }

    /// Takes the peer's connection data (`rs_save_conn_data`); returns the
    /// first target entry, which the caller stores in its target SGL.
    pub fn on_peer_conn_data(&mut self, c: &ConnData) -> Result<RsSge, ProtoError> {
        let n = c.target_sgl.length;
        let end = (SGE_LEN as u64).checked_mul(u64::from(n)).and_then(|len| c.target_sgl.addr.checked_add(len));
        let Some(iomap_addr) = end.filter(|_| n > 0) else { return Err(ProtoError::TargetSgl) };
        self.remote_sgl = c.target_sgl;
        // rsockets writes its first grant into entry 1 (entry 0 came in the
        // connection data); with one entry, that is entry 0.
        self.remote_sge = 1 % n;
        self.peer_order = Order::of_flags(c.flags);
        self.remote_iomap = (c.flags & wire::FLAG_IOMAP != 0).then_some(RsSge {
            addr: iomap_addr,
            key: c.target_sgl.key,
            length: wire::scale_to_value(c.iomap_size),
        });
        self.target = [c.data_buf, RsSge::default()];
        self.target_sge = 0;
        self.sseq_comp = c.credits;
        Ok(c.data_buf)
    }

    /// The byte order the peer reads its arrays in.
    pub fn peer_order(&self) -> Order {
        self.peer_order
    }

    /// The peer's iomap table, if it announced one.
    pub fn remote_iomap(&self) -> Option<RsSge> {
        self.remote_iomap
    }

    /// The target SGL as just read from memory (the peer writes it).
    pub fn set_targets(&mut self, t: [RsSge; SGL_SIZE]) {
        self.target = t;
    }

    /// Whether a data write may be posted now (`rs_can_send`): a send
    /// entry, `SNDLOWAT` bytes of send buffer, a credit, and room in the
    /// current target entry.
    pub fn can_send(&self) -> bool {
        self.sqe_avail > 0
            && self.sbuf_avail >= SNDLOWAT
            && self.sseq_no != self.sseq_comp
            && self.target[self.target_sge].length != 0
    }

    /// Whether a control message may be posted (`rs_ctrl_avail`).
    pub fn ctrl_avail(&self) -> bool {
        self.ctrl_seqno != self.ctrl_max
    }

    /// Whether every posted send has completed (`rs_conn_all_sends_done`).
    pub fn all_sends_done(&self) -> bool {
        let ctrl_free = self.ctrl_max.wrapping_sub(self.ctrl_seqno);
        u64::from(ctrl_free) + u64::from(self.sqe_avail) == u64::from(self.sizes.sq)
    }

    /// The size of the next write of a send with `left` bytes to go: the
    /// overlap size (2 KiB, doubling to 64 KiB per write), cut to the free
    /// send buffer and the target entry's room. Call only when
    /// [`Stream::can_send`].
    fn next_len(&self, left: usize, olen: &mut u32) -> u32 {
        let mut x = if (*olen as usize) < left {
            let x = *olen;
            if *olen < MAX_TRANSFER {
                *olen <<= 1;
            }
            x
        } else {
            left.min(u32::MAX as usize) as u32
        };
        x = x.min(self.sbuf_avail).min(self.target[self.target_sge].length);
        x
    }

    /// Room in the send buffer for `len` bytes at its head (`ssgl`), wrapping.
    fn place(&mut self, len: u32) -> Source {
        let to_end = self.sizes.sbuf - self.sbuf_head;
        if len <= to_end {
            let off = self.sbuf_head;
            self.sbuf_head = if len < to_end { off + len } else { 0 };
            Source::Sbuf { off, len, wrap: 0 }
        } else {
            let off = self.sbuf_head;
            self.sbuf_head = len - to_end;
            Source::Sbuf { off, len: to_end, wrap: len - to_end }
        }
    }

    /// The next data write of a send (`rs_write_data`): `left` bytes to go,
    /// `olen` the send's overlap size, `inline_ok` whether the bytes can go
    /// inline (one contiguous piece). Takes the send entry, the credit, the
    /// buffer bytes and the room in the target entry.
    pub fn next_data(&mut self, left: usize, olen: &mut u32, inline_ok: bool) -> Option<Write> {
        if !self.can_send() || left == 0 {
            return None;
        }
        let len = self.next_len(left, olen);
        let source = if inline_ok && len <= u32::from(self.sizes.inline) { Source::Inline } else { self.place(len) };
        self.sseq_no = self.sseq_no.wrapping_add(1);
        self.sqe_avail -= 1;
        self.sbuf_avail -= len;
        let i = self.target_sge;
        let e = &mut self.target[i];
        let (remote_addr, rkey) = (e.addr, e.key);
        e.addr = e.addr.wrapping_add(u64::from(len));
        e.length -= len;
        let update = (i, *e);
        if e.length == 0 {
            self.target_sge = (i + 1) % SGL_SIZE;
        }
        let msg = Msg::Data(len).encode();
        Some(Write { len, remote_addr, rkey, imm: Some(msg), tag: msg, source, target_update: Some(update) })
    }

    /// The next direct write of a riowrite (`rs_write_direct`): `left`
    /// bytes to go at `remote_addr` (of the peer's mapping with `rkey`,
    /// `room` bytes of it left). No credit or ring space is used; the send
    /// entry and buffer bytes are.
    pub fn next_direct(
        &mut self,
        left: usize,
        olen: &mut u32,
        inline_ok: bool,
        (remote_addr, rkey, room): (u64, u32, u64),
    ) -> Option<Write> {
        if !self.can_send() || left == 0 || room == 0 {
            return None;
        }
        let len = self.next_len(left, olen).min(room.min(u64::from(u32::MAX)) as u32);
        let source = if inline_ok && len <= u32::from(self.sizes.inline) { Source::Inline } else { self.place(len) };
        self.sqe_avail -= 1;
        self.sbuf_avail -= len;
        Some(Write { len, remote_addr, rkey, imm: None, tag: Msg::Write(len).encode(), source, target_update: None })
    }

    /// The write of iomap entry `index` into the peer's table
    /// (`rs_write_iomap`): a message like a data write, 24 bytes.
    pub fn next_iomap(&mut self, index: u16) -> Option<Write> {
        let table = self.remote_iomap?;
        if !self.can_send() || u32::from(index) >= table.length {
            return None;
        }
        let len = IOMAP_LEN as u32;
        let source = if u32::from(self.sizes.inline) >= len { Source::Inline } else { self.place(len) };
        self.sseq_no = self.sseq_no.wrapping_add(1);
        self.sqe_avail -= 1;
        self.sbuf_avail -= len;
        let msg = Msg::IomapSgl(index).encode();
        Some(Write {
            len,
            remote_addr: table.addr.wrapping_add(u64::from(index) * IOMAP_LEN as u64),
            rkey: table.key,
            imm: Some(msg),
            tag: msg,
            source,
            target_update: None,
        })
    }

    /// Whether credits are due (`rs_give_credits`): half the ring free or
    /// half the receives consumed since the last update, and a control
    /// slot; only while connected.
    pub fn credits_due(&self, connected: bool) -> bool {
        let half_free = self.rbuf_avail >= self.sizes.half();
        let half_consumed = self.rseq_no.wrapping_sub(self.rseq_comp) as i16 >= 0;
        connected && (half_free || half_consumed) && self.ctrl_avail()
    }

    /// The credit update to post (`rs_send_credits`), granting the next half
    /// of the ring when it is free. Takes a control slot.
    pub fn credit_update(&mut self) -> CreditUpdate {
        self.ctrl_seqno = self.ctrl_seqno.wrapping_add(1);
        self.rseq_comp = self.rseq_no.wrapping_add(self.sizes.rq / 2);
        let limit = u32::from(self.rseq_no) + u32::from(self.sizes.rq);
        let imm = Msg::Sgl(limit).encode();
        let half = self.sizes.half();
        if self.rbuf_avail < half || half == 0 {
            return CreditUpdate { imm, grant: None };
        }
        let entry =
            RsSge { addr: self.rbuf_addr + u64::from(self.rbuf_free_offset), key: self.rbuf_rkey, length: half }
                .to_bytes(self.peer_order);
        let remote_addr = self.remote_sgl.addr.wrapping_add(u64::from(self.remote_sge) * SGE_LEN as u64);
        let slot = (u32::from(self.sizes.inline) < SGE_LEN as u32)
            .then(|| self.sizes.sbuf + SGE_LEN as u32 * (self.ctrl_seqno & (CTRL_SLOTS - 1)));
        self.rbuf_avail -= half;
        self.rbuf_free_offset += half;
        if self.rbuf_free_offset >= self.sizes.rbuf {
            self.rbuf_free_offset = 0;
        }
        self.remote_sge = (self.remote_sge + 1) % self.remote_sgl.length.max(1);
        CreditUpdate { imm, grant: Some(Grant { entry, remote_addr, rkey: self.remote_sgl.key, slot }) }
    }

    /// Takes a control slot for a control message (`rs_post_msg` of CTRL).
    pub fn take_ctrl(&mut self) -> Option<u32> {
        if !self.ctrl_avail() {
            return None;
        }
        self.ctrl_seqno = self.ctrl_seqno.wrapping_add(1);
        Some(self.ctrl_seqno)
    }

    /// A send completion of the message tagged `tag` (`rs_poll_cq`'s send
    /// side): its queue entry and buffer bytes return.
    pub fn on_send_done(&mut self, tag: u32) -> Sent {
        let sq_data = u32::from(self.sizes.sq).saturating_sub(CTRL_SLOTS);
        let give_back = |s: &mut Stream, bytes: u32| {
            s.sqe_avail = (s.sqe_avail + 1).min(sq_data);
            s.sbuf_avail = s.sbuf_avail.saturating_add(bytes).min(s.sizes.sbuf);
        };
        match Msg::decode(tag) {
            Ok(Msg::Sgl(_)) => self.ctrl_max = self.ctrl_max.wrapping_add(1),
            Ok(Msg::Ctrl(c)) => {
                self.ctrl_max = self.ctrl_max.wrapping_add(1);
                if c == Ctrl::Disconnect {
                    return Sent::Disconnect;
                }
            }
            Ok(Msg::IomapSgl(_)) => give_back(self, IOMAP_LEN as u32),
            Ok(Msg::Data(n) | Msg::Write(n)) => give_back(self, n),
            // Tags are this side's own: nothing else is ever posted.
            Err(_) => {}
        }
        Sent::Done
    }

    /// A receive completion (`rs_poll_cq`'s receive side): `imm` the
    /// immediate value, `wrote` the bytes the write carried, `iomap_entries`
    /// this side's table size. Checks it against what was granted.
    pub fn on_recv(&mut self, imm: Option<u32>, wrote: u32, iomap_entries: u16) -> Result<Received, ProtoError> {
        let imm = imm.ok_or(ProtoError::NoImmediate)?;
        match Msg::decode(imm).map_err(ProtoError::Msg)? {
            Msg::Data(len) => {
                if len != wrote {
                    return Err(ProtoError::Length { said: len, wrote });
                }
                if self.rmsg.len() >= usize::from(self.sizes.rq) {
                    return Err(ProtoError::TooManyMessages);
                }
                let granted = u64::from(self.sizes.rbuf) - u64::from(self.rbuf_avail);
                let room = granted.saturating_sub(self.rmsg_bytes);
                if u64::from(len) > room {
                    return Err(ProtoError::Overrun { len, room });
                }
                self.rmsg.push_back(len);
                self.rmsg_bytes += u64::from(len);
                Ok(Received::Data)
            }
            Msg::Sgl(limit) => {
                if wrote != 0 && wrote != SGE_LEN as u32 {
                    return Err(ProtoError::Payload { len: wrote });
                }
                self.sseq_comp = limit as u16;
                Ok(Received::Credits)
            }
            Msg::IomapSgl(i) => {
                if wrote != 0 && wrote != IOMAP_LEN as u32 {
                    return Err(ProtoError::Payload { len: wrote });
                }
                if i >= iomap_entries {
                    return Err(ProtoError::IomapIndex(i));
                }
                Ok(Received::Iomap)
            }
            Msg::Ctrl(c) => {
                if wrote != 0 {
                    return Err(ProtoError::Payload { len: wrote });
                }
                Ok(Received::Ctrl(c))
            }
            Msg::Write(_) => Err(ProtoError::WriteOp),
        }
    }

    /// Whether data waits for the reader (`rs_have_rdata`).
    pub fn have_rdata(&self) -> bool {
        !self.rmsg.is_empty()
    }

    /// Bytes waiting for the reader.
    #[cfg(test)]
    pub fn rdata_bytes(&self) -> u64 {
        self.rmsg_bytes
    }

    /// Reads up to `want` bytes in order: `copy(off, len)` is called for
    /// each piece of the ring to copy out (at most two per message: the
    /// ring wraps). Unless `peek`, the bytes are consumed: the ring space
    /// returns for granting, and each message read whole counts for credits.
    pub fn read(&mut self, want: usize, peek: bool, mut copy: impl FnMut(u32, u32)) -> usize {
        let size = self.sizes.rbuf;
        let (mut off, mut i, mut left) = (self.rbuf_offset, 0usize, want);
        while left > 0 {
            let Some(&m) = self.rmsg.get(i) else { break };
            let n = (m as usize).min(left) as u32;
            // Copy n bytes at `off`, wrapping at the ring's end.
            let to_end = size - off;
            if n > to_end {
                copy(off, to_end);
                copy(0, n - to_end);
            } else if n > 0 {
                copy(off, n);
            }
            off = (off + n) % size.max(1);
            left -= n as usize;
            if peek {
                i += 1;
                continue;
            }
            if n < m {
                self.rmsg[0] = m - n;
            } else {
                self.rmsg.pop_front();
                self.rseq_no = self.rseq_no.wrapping_add(1);
            }
            self.rmsg_bytes -= u64::from(n);
            self.rbuf_avail += n;
        }
        if !peek {
            self.rbuf_offset = off;
        }
        want - left
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::Ctrl;

    const SIZES: Sizes = Sizes { sq: 384, rq: 384, inline: 64, sbuf: 1 << 17, rbuf: 1 << 17, iomap: 0 };

    /// Two connected streams, as each would be after the exchange of
    /// connection data (a's ring at 0x1000_0000, b's at 0x2000_0000).
    fn pair(sizes: Sizes) -> (Stream, Stream) {
        let mut a = Stream::new(sizes, 0x1000_0000, 0xa);
        let mut b = Stream::new(sizes, 0x2000_0000, 0xb);
        let ca = a.conn_data(0x1800_0000, 0xaa);
        let cb = b.conn_data(0x2800_0000, 0xbb);
        a.on_peer_conn_data(&ConnData::parse(&cb.emit()).unwrap()).unwrap();
        b.on_peer_conn_data(&ConnData::parse(&ca.emit()).unwrap()).unwrap();
        (a, b)
    }

    #[test]
    fn the_defaults_grant_half_the_ring_and_all_receives() {
        let s = Stream::new(SIZES, 0x1000, 7);
        let c = s.conn_data(0x2000, 9);
        assert_eq!(c.version, 1);
        assert_eq!(c.flags & wire::FLAG_IOMAP, wire::FLAG_IOMAP);
        assert_eq!(c.credits, 384);
        assert_eq!(c.target_sgl, RsSge { addr: 0x2000, key: 9, length: 2 });
        assert_eq!(c.data_buf, RsSge { addr: 0x1000, key: 7, length: 1 << 16 });
        assert_eq!(s.sqe_avail, 380, "4 send entries are the control messages'");
        assert_eq!(s.rseq_comp, 192);
        assert!(!s.can_send(), "nothing before the peer's connection data");
    }

    #[test]
    fn sizes_clamp_to_the_queue_bounds_and_an_even_ring() {
        let s = Sizes { sq: 4, rq: 60000, rbuf: 4097, ..SIZES }.clamped(1 << 20);
        assert_eq!((s.sq, s.rq, s.rbuf), (16, 60000, 4096));
        assert_eq!(Sizes { sq: 9000, ..SIZES }.clamped(4096).sq, 4096, "the device's max_qp_wr");
    }

    #[test]
    fn a_send_grows_from_2k_to_64k_writes_within_the_target_entry() {
        let (mut a, _) = pair(SIZES);
        let mut olen = OLAP_START;
        let mut lens = Vec::new();
        let mut left = 1usize << 20;
        while let Some(w) = a.next_data(left, &mut olen, true) {
            lens.push(w.len);
            left -= w.len as usize;
        }
        // The first target entry is half of b's ring (64 KiB): then a waits
        // for b's grant of the other half.
        assert_eq!(lens, vec![2048, 4096, 8192, 16384, 32768, 2048]);
        assert_eq!(lens.iter().sum::<u32>(), 1 << 16);
        assert!(!a.can_send() && a.target_sge == 1);
    }

    #[test]
    fn writes_land_back_to_back_in_the_target_entry_and_update_it() {
        let (mut a, _) = pair(SIZES);
        let mut olen = OLAP_START;
        let w1 = a.next_data(100, &mut olen, true).unwrap();
        assert_eq!((w1.remote_addr, w1.rkey, w1.len), (0x2000_0000, 0xb, 100));
        assert_eq!(w1.source, Source::Sbuf { off: 0, len: 100, wrap: 0 }, "100 > 64: through the send buffer");
        let w2 = a.next_data(10, &mut olen, true).unwrap();
        assert_eq!(w2.remote_addr, 0x2000_0000 + 100);
        assert_eq!(w2.target_update, Some((0, RsSge { addr: 0x2000_0000 + 110, key: 0xb, length: (1 << 16) - 110 })));
        assert_eq!(Msg::decode(w2.imm.unwrap()), Ok(Msg::Data(10)));
    }

    #[test]
    fn small_writes_go_inline_and_large_ones_through_the_send_ring() {
        let (mut a, _) = pair(SIZES);
        let mut olen = OLAP_START;
        assert_eq!(a.next_data(64, &mut olen, true).unwrap().source, Source::Inline);
        assert_eq!(a.next_data(64, &mut olen, false).unwrap().source, Source::Sbuf { off: 0, len: 64, wrap: 0 });
        assert_eq!(a.next_data(65, &mut olen, true).unwrap().source, Source::Sbuf { off: 64, len: 65, wrap: 0 });
        // Inline bytes are counted against the send buffer too, as rsockets counts them.
        assert_eq!(a.sbuf_avail, (1 << 17) - 64 - 64 - 65);
    }

    #[test]
    fn the_send_ring_wraps_and_completions_return_its_bytes() {
        let sizes = Sizes { sbuf: 8192, inline: 0, ..SIZES };
        let (mut a, _) = pair(sizes);
        let mut olen = 4096;
        let w1 = a.next_data(3000, &mut olen, true).unwrap();
        let w2 = a.next_data(3000, &mut olen, true).unwrap();
        assert_eq!(w2.source, Source::Sbuf { off: 3000, len: 3000, wrap: 0 });
        assert_eq!(a.sbuf_avail, 2192);
        assert!(a.can_send() && a.next_len(3000, &mut 4096) == 2192, "cut to the free buffer");
        assert_eq!(a.on_send_done(w1.tag), Sent::Done);
        let w3 = a.next_data(3000, &mut olen, true).unwrap();
        assert_eq!(w3.source, Source::Sbuf { off: 6000, len: 2192, wrap: 808 });
        assert_eq!(a.sbuf_head, 808);
        a.on_send_done(w2.tag);
        a.on_send_done(w3.tag);
        assert_eq!(a.sbuf_avail, 8192);
        assert!(a.all_sends_done());
    }

    #[test]
    fn a_sender_stops_at_the_credit_limit() {
        let (mut a, _) = pair(Sizes { rq: 16, ..SIZES });
        let mut olen = 1;
        let mut n = 0;
        while a.next_data(1, &mut olen, true).is_some() {
            n += 1;
        }
        assert_eq!(n, 16, "credits: the peer's 16 receives");
        assert_eq!(a.on_recv(Some(Msg::Sgl(16 + 8).encode()), 0, 0), Ok(Received::Credits));
        assert!(a.can_send());
    }

    #[test]
    fn credit_updates_grant_the_free_half_into_the_peer_s_target_sgl() {
        let (mut a, mut b) = pair(SIZES);
        assert!(b.credits_due(true), "half of b's ring is free from the start");
        assert!(!b.credits_due(false), "only while connected");
        let u = b.credit_update();
        assert_eq!(Msg::decode(u.imm), Ok(Msg::Sgl(384)));
        let g = u.grant.unwrap();
        assert_eq!(g.remote_addr, 0x1800_0000 + 16, "entry 1 of a's target SGL");
        assert_eq!(g.rkey, 0xaa);
        assert_eq!(g.slot, None, "inline (64 >= 16)");
        assert_eq!(
            RsSge::from_bytes(&g.entry, Order::HOST),
            RsSge { addr: 0x2000_0000 + (1 << 16), key: 0xb, length: 1 << 16 }
        );
        assert!(!b.credits_due(true), "nothing free, nothing consumed yet");
        // a's RDMA write of the grant lands in its target SGL.
        a.set_targets([a.target[0], RsSge::from_bytes(&g.entry, Order::HOST)]);
        assert_eq!(a.on_recv(Some(u.imm), 16, 0), Ok(Received::Credits));
        let mut olen = MAX_TRANSFER;
        let mut total = 0;
        while let Some(w) = a.next_data(1 << 20, &mut olen, true) {
            assert_eq!(b.on_recv(w.imm, w.len, 0), Ok(Received::Data));
            total += w.len;
        }
        assert_eq!(total, 1 << 17, "both halves");
        assert_eq!(b.rdata_bytes(), 1 << 17);
    }

    #[test]
    fn a_grant_follows_the_reader_around_the_ring() {
        let sizes = Sizes { rbuf: 8192, ..SIZES };
        let (mut a, mut b) = pair(sizes);
        let g1 = b.credit_update().grant.unwrap();
        a.set_targets([a.target[0], RsSge::from_bytes(&g1.entry, Order::HOST)]);
        let mut olen = MAX_TRANSFER;
        while let Some(w) = a.next_data(8192, &mut olen, true) {
            b.on_recv(w.imm, w.len, 0).unwrap();
        }
        let mut pieces = Vec::new();
        assert_eq!(b.read(5000, false, |off, len| pieces.push((off, len))), 5000);
        assert_eq!(pieces, vec![(0, 4096), (4096, 904)]);
        assert!(b.credits_due(true), "half (4096) is free again");
        let g2 = b.credit_update().grant.unwrap();
        let e = RsSge::from_bytes(&g2.entry, Order::HOST);
        assert_eq!((e.addr, e.length), (0x2000_0000, 4096), "the first half again");
        assert_eq!(g2.remote_addr, 0x1800_0000, "into entry 0 of a's target SGL");
        assert_eq!(b.rbuf_free_offset, 4096);
    }

    #[test]
    fn reading_wraps_and_a_partial_read_keeps_the_rest() {
        let sizes = Sizes { rbuf: 8192, ..SIZES };
        let (_, mut b) = pair(sizes);
        b.credit_update();
        b.rbuf_offset = 8000;
        b.on_recv(Some(Msg::Data(300).encode()), 300, 0).unwrap();
        let mut pieces = Vec::new();
        assert_eq!(b.read(100, false, |o, l| pieces.push((o, l))), 100);
        assert_eq!(pieces, vec![(8000, 100)]);
        assert!(b.have_rdata());
        pieces.clear();
        assert_eq!(b.read(1000, true, |o, l| pieces.push((o, l))), 200, "a peek...");
        assert_eq!(pieces, vec![(8100, 92), (0, 108)]);
        assert_eq!(b.rdata_bytes(), 200, "...consumes nothing");
        pieces.clear();
        assert_eq!(b.read(1000, false, |o, l| pieces.push((o, l))), 200);
        assert_eq!(pieces, vec![(8100, 92), (0, 108)]);
        assert_eq!((b.rbuf_offset, b.rseq_no, b.have_rdata()), (108, 1, false));
    }

    #[test]
    fn credits_come_back_after_half_the_receives_are_consumed() {
        let (_, mut b) = pair(Sizes { rq: 16, rbuf: 1 << 20, ..SIZES });
        b.credit_update();
        for _ in 0..8 {
            b.on_recv(Some(Msg::Data(1).encode()), 1, 0).unwrap();
        }
        assert!(!b.credits_due(true));
        b.read(7, false, |_, _| {});
        assert!(!b.credits_due(true), "7 of 16");
        b.read(1, false, |_, _| {});
        assert!(b.credits_due(true), "8 of 16: half");
        let u = b.credit_update();
        assert_eq!(Msg::decode(u.imm), Ok(Msg::Sgl(8 + 16)));
        assert_eq!(u.grant, None, "no free half of the ring: credits only");
    }

    #[test]
    fn control_messages_have_four_slots_of_their_own() {
        let (_, mut b) = pair(SIZES);
        let mut tags = Vec::new();
        while let Some(s) = b.take_ctrl() {
            tags.push(s);
        }
        assert_eq!(tags, vec![1, 2, 3, 4]);
        assert!(!b.credits_due(true), "no slot left for credits");
        assert!(!b.all_sends_done());
        assert_eq!(b.on_send_done(Msg::Ctrl(Ctrl::Shutdown).encode()), Sent::Done);
        assert!(b.ctrl_avail());
        assert_eq!(b.on_send_done(Msg::Sgl(1).encode()), Sent::Done);
        assert_eq!(b.on_send_done(Msg::Ctrl(Ctrl::Keepalive).encode()), Sent::Done);
        assert_eq!(b.on_send_done(Msg::Ctrl(Ctrl::Disconnect).encode()), Sent::Disconnect);
        assert!(b.all_sends_done());
    }

    #[test]
    fn below_16_inline_bytes_a_grant_goes_from_a_control_slot() {
        let (_, mut b) = pair(Sizes { inline: 0, sbuf: 4096, ..SIZES });
        let g = b.credit_update().grant.unwrap();
        assert_eq!(g.slot, Some(4096 + 16), "slot ctrl_seqno & 3 past the send buffer");
    }

    #[test]
    fn grants_are_written_in_the_peer_s_byte_order() {
        let mut b = Stream::new(SIZES, 0x2000_0000, 0xb);
        let other = if Order::HOST == Order::Big { 0 } else { wire::FLAG_NET };
        let peer = ConnData {
            version: 1,
            flags: wire::FLAG_IOMAP | other,
            credits: 384,
            iomap_size: 1,
            target_sgl: RsSge { addr: 0x1800_0000, key: 0xaa, length: 2 },
            data_buf: RsSge { addr: 0x1000_0000, key: 0xa, length: 4096 },
        };
        b.on_peer_conn_data(&peer).unwrap();
        let g = b.credit_update().grant.unwrap();
        let swapped = if Order::HOST == Order::Big { Order::Little } else { Order::Big };
        assert_eq!(RsSge::from_bytes(&g.entry, swapped).length, 1 << 16);
        assert_eq!(b.remote_iomap(), Some(RsSge { addr: 0x1800_0000 + 32, key: 0xaa, length: 1 }));
    }

    #[test]
    fn iomap_writes_go_into_the_peer_s_table() {
        let (mut a, _) = pair(Sizes { iomap: 4, ..SIZES });
        let w = a.next_iomap(2).unwrap();
        assert_eq!(w.remote_addr, 0x2800_0000 + 32 + 2 * 24, "behind b's two SGL entries");
        assert_eq!((w.len, w.rkey, w.source), (24, 0xbb, Source::Inline));
        assert_eq!(Msg::decode(w.imm.unwrap()), Ok(Msg::IomapSgl(2)));
        assert_eq!(a.next_iomap(4), None, "beyond b's table");
        let (mut none, _) = pair(SIZES);
        assert_eq!(none.next_iomap(0), None, "b offers no table");
        a.on_send_done(w.tag);
        assert_eq!(a.sbuf_avail, 1 << 17);
    }

    #[test]
    fn direct_writes_use_no_credit_and_stop_at_the_mapping_s_end() {
        let (mut a, _) = pair(SIZES);
        let mut olen = OLAP_START;
        let w = a.next_direct(10_000, &mut olen, true, (0x5000, 0x55, 100)).unwrap();
        assert_eq!((w.len, w.remote_addr, w.rkey, w.imm), (100, 0x5000, 0x55, None));
        assert_eq!(Msg::decode(w.tag), Ok(Msg::Write(100)));
        assert_eq!(a.sseq_no, 0);
        assert_eq!(a.next_direct(1, &mut olen, true, (0x5000, 0x55, 0)), None);
    }

    #[test]
    fn the_peer_s_messages_are_checked_against_what_was_granted() {
        let (_, mut b) = pair(Sizes { rq: 16, rbuf: 8192, ..SIZES });
        assert_eq!(b.on_recv(None, 0, 0), Err(ProtoError::NoImmediate));
        assert_eq!(b.on_recv(Some(Msg::Data(10).encode()), 9, 0), Err(ProtoError::Length { said: 10, wrote: 9 }));
        assert_eq!(
            b.on_recv(Some(Msg::Data(4097).encode()), 4097, 0),
            Err(ProtoError::Overrun { len: 4097, room: 4096 }),
            "only half the ring is granted before the first update"
        );
        assert_eq!(b.on_recv(Some(Msg::Write(1).encode()), 1, 0), Err(ProtoError::WriteOp));
        assert_eq!(b.on_recv(Some(1 << 29), 0, 0), Err(ProtoError::Msg(MsgError::ReservedOp(1))));
        assert_eq!(b.on_recv(Some(Msg::Sgl(1).encode()), 8, 0), Err(ProtoError::Payload { len: 8 }));
        assert_eq!(b.on_recv(Some(Msg::Ctrl(Ctrl::Shutdown).encode()), 1, 0), Err(ProtoError::Payload { len: 1 }));
        assert_eq!(b.on_recv(Some(Msg::IomapSgl(0).encode()), 24, 0), Err(ProtoError::IomapIndex(0)));
        assert_eq!(b.on_recv(Some(Msg::IomapSgl(0).encode()), 24, 1), Ok(Received::Iomap));
        for _ in 0..16 {
            b.on_recv(Some(Msg::Data(1).encode()), 1, 0).unwrap();
        }
        assert_eq!(b.on_recv(Some(Msg::Data(1).encode()), 1, 0), Err(ProtoError::TooManyMessages));
    }

    #[test]
    fn an_empty_or_overflowing_target_sgl_is_refused() {
        let mut s = Stream::new(SIZES, 0, 0);
        let mut c = Stream::new(SIZES, 0, 0).conn_data(0x1000, 1);
        c.target_sgl.length = 0;
        assert_eq!(s.on_peer_conn_data(&c), Err(ProtoError::TargetSgl));
        c.target_sgl = RsSge { addr: u64::MAX - 8, key: 1, length: 2 };
        assert_eq!(s.on_peer_conn_data(&c), Err(ProtoError::TargetSgl));
        c.target_sgl = RsSge { addr: 0x1000, key: 1, length: 1 };
        assert!(s.on_peer_conn_data(&c).is_ok());
        assert_eq!(s.remote_sge, 0, "one entry: every grant goes to entry 0");
    }
}
