//! A whole RoCEv2 packet, BTH through ICRC (the UDP payload).
//!
//! ```text
//! +-----+---------------------------+-------------------+-----+------+
//! | BTH | ext. headers (by opcode)  | payload           | pad | ICRC |
//! | 12  | 0..=36                    | 0..=MTU           | 0-3 | 4    |
//! +-----+---------------------------+-------------------+-----+------+
//!                                   |<- payload area: multiple of 4 ->|
//! ```
//!
//! [`Packet::new_checked`] validates the layout against the opcode table the
//! way rxe's receive path does (version, known opcode, headers present, pad
//! within the payload area); MTU limits belong to the transport, which knows
//! the path MTU. The ICRC is verified separately because it needs the IP
//! context (see [`crate::icrc`]).

use crate::aeth::{Aeth, AethRepr};
use crate::atomic_ack_eth::{AtomicAckEth, AtomicAckEthRepr};
use crate::atomic_eth::{AtomicEth, AtomicEthRepr};
use crate::bth::{self, Bth, BthRepr};
use crate::deth::{Deth, DethRepr};
use crate::feth::{Feth, FethRepr};
use crate::field::check_len;
use crate::icrc::{self, IcrcContext, IcrcHasher};
use crate::ieth::{Ieth, IethRepr};
use crate::immdt::{ImmDt, ImmDtRepr};
use crate::opcode::{ExtHeader, HeaderSet, OpcodeInfo, PayloadRule};
use crate::reth::{Reth, RethRepr};
use crate::{ICRC_LEN, WireError};

/// A validated view of a RoCEv2 packet.
#[derive(Debug, Clone, Copy)]
pub struct Packet<T: AsRef<[u8]>> {
    buffer: T,
    info: &'static OpcodeInfo,
}

impl<T: AsRef<[u8]>> Packet<T> {
    /// Validates `buffer` as a packet: BTH present, TVer 0, opcode known,
    /// every extended header of the opcode present, the bytes between headers
    /// and ICRC a multiple of 4 that fits the opcode's payload rule, and the
    /// pad count within them.
    pub fn new_checked(buffer: T) -> Result<Packet<T>, WireError> {
        let b = buffer.as_ref();
        check_len("packet (BTH + ICRC)", bth::LEN + ICRC_LEN, b.len())?;
        let bth = Bth::new_unchecked(b);
        if bth.tver() != 0 {
            return Err(WireError::BadVersion(bth.tver()));
        }
        let op = bth.opcode();
        let info = op.info().ok_or(WireError::UnknownOpcode(op.0))?;
        check_len("extended headers", info.header_len() + ICRC_LEN, b.len())?;
        let area = b.len() - info.header_len() - ICRC_LEN;
        let pad = bth.pad_count();
        let bad_len = |reason| Err(WireError::BadLength { opcode: op.0, area, reason });
        if !area.is_multiple_of(4) {
            return bad_len("payload and pad must fill a multiple of 4 bytes");
        }
        match info.payload {
            PayloadRule::None if area != 0 => return bad_len("the opcode carries no payload"),
            PayloadRule::Exactly(n) if area != n => return bad_len("the opcode carries a fixed-size payload"),
            PayloadRule::None | PayloadRule::Exactly(_) if pad != 0 => {
                return Err(WireError::BadPad { pad, area });
            }
            _ if usize::from(pad) > area => return Err(WireError::BadPad { pad, area }),
            _ => {}
        }
        Ok(Packet { buffer, info })
    }

    /// The opcode's table entry.
    pub fn info(&self) -> &'static OpcodeInfo {
        self.info
    }

    /// The BTH.
    pub fn bth(&self) -> Bth<&[u8]> {
        Bth::new_unchecked(&self.buffer.as_ref()[..bth::LEN])
    }

    fn ext(&self, h: ExtHeader) -> Option<&[u8]> {
        let off = self.info.offset(h)?;
        Some(&self.buffer.as_ref()[off..off + h.byte_len()])
    }

    /// The RETH, if the opcode carries one.
    pub fn reth(&self) -> Option<Reth<&[u8]>> {
        self.ext(ExtHeader::Reth).map(Reth::new_unchecked)
    }
    /// The AETH, if the opcode carries one.
    pub fn aeth(&self) -> Option<Aeth<&[u8]>> {
        self.ext(ExtHeader::Aeth).map(Aeth::new_unchecked)
    }
    /// The AtomicETH, if the opcode carries one.
    pub fn atomic_eth(&self) -> Option<AtomicEth<&[u8]>> {
        self.ext(ExtHeader::AtomicEth).map(AtomicEth::new_unchecked)
    }
    /// The AtomicAckETH, if the opcode carries one.
    pub fn atomic_ack_eth(&self) -> Option<AtomicAckEth<&[u8]>> {
        self.ext(ExtHeader::AtomicAckEth).map(AtomicAckEth::new_unchecked)
    }
    /// The ImmDt, if the opcode carries one.
    pub fn immdt(&self) -> Option<ImmDt<&[u8]>> {
        self.ext(ExtHeader::ImmDt).map(ImmDt::new_unchecked)
    }
    /// The IETH, if the opcode carries one.
    pub fn ieth(&self) -> Option<Ieth<&[u8]>> {
        self.ext(ExtHeader::Ieth).map(Ieth::new_unchecked)
    }
    /// The DETH, if the opcode carries one.
    pub fn deth(&self) -> Option<Deth<&[u8]>> {
        self.ext(ExtHeader::Deth).map(Deth::new_unchecked)
    }
    /// The FETH, if the opcode carries one.
    pub fn feth(&self) -> Option<Feth<&[u8]>> {
        self.ext(ExtHeader::Feth).map(Feth::new_unchecked)
    }

    /// The payload, without pad.
    pub fn payload(&self) -> &[u8] {
        let b = self.buffer.as_ref();
        let end = b.len() - ICRC_LEN - usize::from(self.bth().pad_count());
        &b[self.info.header_len()..end]
    }

    /// The pad bytes (zero on the wire; ignored on receive).
    pub fn pad(&self) -> &[u8] {
        let b = self.buffer.as_ref();
        let end = b.len() - ICRC_LEN;
        &b[end - usize::from(self.bth().pad_count())..end]
    }

    /// Everything the ICRC covers after the pseudo header: BTH up to the ICRC.
    pub fn covered(&self) -> &[u8] {
        let b = self.buffer.as_ref();
        &b[..b.len() - ICRC_LEN]
    }

    /// The ICRC the packet carries.
    pub fn icrc(&self) -> u32 {
        let b = self.buffer.as_ref();
        u32::from_le_bytes([b[b.len() - 4], b[b.len() - 3], b[b.len() - 2], b[b.len() - 1]])
    }

    /// Checks the payload length against the path MTU, as a responder does
    /// (IBTA 9.7.4.1.3): FIRST and MIDDLE packets carry exactly one MTU
    /// (with pad 0), LAST carries 1 to MTU bytes, ONLY 0 to MTU. With
    /// `mtu = None` any RoCE path MTU is accepted for FIRST/MIDDLE and the
    /// largest (4096) bounds the rest.
    pub fn check_path_mtu(&self, mtu: Option<usize>) -> Result<(), WireError> {
        use crate::opcode::Position;
        if self.info.payload != PayloadRule::Any {
            return Ok(());
        }
        let len = self.payload().len();
        let max = mtu.unwrap_or(crate::PATH_MTUS[crate::PATH_MTUS.len() - 1]);
        let area = len + usize::from(self.bth().pad_count());
        let bad = |reason| Err(WireError::BadLength { opcode: self.info.opcode.0, area, reason });
        match self.info.position {
            Position::First | Position::Middle => match mtu {
                Some(m) if len != m => bad("FIRST/MIDDLE payload must be exactly the path MTU"),
                None if !crate::PATH_MTUS.contains(&len) => bad("FIRST/MIDDLE payload is not a path MTU"),
                _ => Ok(()),
            },
            Position::Last if len == 0 => bad("LAST payload is empty"),
            Position::Last | Position::Only if len > max => bad("payload exceeds the path MTU"),
            _ => Ok(()),
        }
    }

    /// Verifies the ICRC, `hasher` holding the packet's IP/UDP pseudo header.
    pub fn verify_icrc(&self, hasher: IcrcHasher) -> Result<(), WireError> {
        icrc::verify(hasher, self.buffer.as_ref())
    }

    /// The underlying buffer.
    pub fn into_inner(self) -> T {
        self.buffer
    }
}

/// The extended headers of a packet; exactly those of its opcode are `Some`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct ExtRepr {
    /// DETH (UD).
    pub deth: Option<DethRepr>,
    /// FETH (FLUSH).
    pub feth: Option<FethRepr>,
    /// RETH.
    pub reth: Option<RethRepr>,
    /// AtomicETH.
    pub atomic_eth: Option<AtomicEthRepr>,
    /// AETH.
    pub aeth: Option<AethRepr>,
    /// AtomicAckETH.
    pub atomic_ack_eth: Option<AtomicAckEthRepr>,
    /// ImmDt.
    pub immdt: Option<ImmDtRepr>,
    /// IETH.
    pub ieth: Option<IethRepr>,
}

impl ExtRepr {
    /// The headers present.
    fn set(&self) -> HeaderSet {
        // Bit i: `ExtHeader::ALL[i]`.
        let bits = u8::from(self.deth.is_some())
            | (u8::from(self.feth.is_some()) << 1)
            | (u8::from(self.reth.is_some()) << 2)
            | (u8::from(self.atomic_eth.is_some()) << 3)
            | (u8::from(self.aeth.is_some()) << 4)
            | (u8::from(self.atomic_ack_eth.is_some()) << 5)
            | (u8::from(self.immdt.is_some()) << 6)
            | (u8::from(self.ieth.is_some()) << 7);
        HeaderSet::from_bits(bits)
    }
}

/// The meaning of a packet's headers; the payload travels beside it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct PacketRepr {
    /// The BTH.
    pub bth: BthRepr,
    /// The extended headers.
    pub ext: ExtRepr,
}

/// Pad bytes that bring `payload_len` to a multiple of 4.
pub const fn pad_for(payload_len: usize) -> usize {
    (4 - payload_len % 4) % 4
}

impl PacketRepr {
    /// Reads the headers of a validated packet.
    pub fn parse<T: AsRef<[u8]>>(p: &Packet<T>) -> PacketRepr {
        PacketRepr {
            bth: BthRepr::read(&p.bth()),
            ext: ExtRepr {
                deth: p.deth().as_ref().map(DethRepr::parse),
                feth: p.feth().as_ref().map(FethRepr::parse),
                reth: p.reth().as_ref().map(RethRepr::parse),
                atomic_eth: p.atomic_eth().as_ref().map(AtomicEthRepr::parse),
                aeth: p.aeth().as_ref().map(AethRepr::parse),
                atomic_ack_eth: p.atomic_ack_eth().as_ref().map(AtomicAckEthRepr::parse),
                immdt: p.immdt().as_ref().map(ImmDtRepr::parse),
                ieth: p.ieth().as_ref().map(IethRepr::parse),
            },
        }
    }

    /// The opcode's entry, checked against the extended headers present.
    fn checked_info(&self, payload_len: usize) -> Result<&'static OpcodeInfo, WireError> {
        let op = self.bth.opcode;
        let info = op.info().ok_or(WireError::UnknownOpcode(op.0))?;
        let inconsistent = |reason| Err(WireError::Inconsistent { opcode: op.0, reason });
        if info.headers != self.ext.set() {
            return inconsistent("extended headers differ from the opcode's");
        }
        match info.payload {
            PayloadRule::None if payload_len != 0 => inconsistent("the opcode carries no payload"),
            PayloadRule::Exactly(n) if payload_len != n => inconsistent("the opcode carries a fixed-size payload"),
            _ => Ok(info),
        }
    }

    /// Bytes from BTH through the last extended header.
    pub fn header_len(&self) -> Result<usize, WireError> {
        let op = self.bth.opcode;
        op.info().map(OpcodeInfo::header_len).ok_or(WireError::UnknownOpcode(op.0))
    }

    /// The whole packet length (UDP payload) for `payload_len` payload bytes.
    pub fn packet_len(&self, payload_len: usize) -> Result<usize, WireError> {
        Ok(self.header_len()? + payload_len + pad_for(payload_len) + ICRC_LEN)
    }

    /// Writes BTH (with the pad count for `payload_len`) and extended headers
    /// to the start of `buf`; returns the header length. The payload, pad and
    /// ICRC are the caller's, e.g. as separate iovecs.
    pub fn emit_headers(&self, buf: &mut [u8], payload_len: usize) -> Result<usize, WireError> {
        let info = self.checked_info(payload_len)?;
        let len = info.header_len();
        if buf.len() < len {
            return Err(WireError::BufferTooSmall { need: len, have: buf.len() });
        }
        let buf = &mut buf[..len];
        self.bth.emit(&mut Bth::new_unchecked(&mut buf[..bth::LEN]), pad_for(payload_len) as u8);
        if len == bth::LEN {
            // BTH alone (MIDDLE and most LAST packets): `checked_info` saw no
            // extended header set.
            return Ok(len);
        }
        let e = &self.ext;
        // The headers present are the opcode's (`checked_info`): each goes
        // right after the last, in wire order (`ExtHeader::ALL`).
        let mut rest = &mut buf[bth::LEN..];
        fn slot<'a>(rest: &mut &'a mut [u8], n: usize) -> &'a mut [u8] {
            let (s, tail) = std::mem::take(rest).split_at_mut(n);
            *rest = tail;
            s
        }
        macro_rules! put {
            ($($field:ident: $view:ident, $len:expr;)*) => {$(
                if let Some(r) = e.$field {
                    r.emit(&mut $view::new_unchecked(slot(&mut rest, $len)));
                }
            )*};
        }
        put! {
            deth: Deth, crate::deth::LEN;
            feth: Feth, crate::feth::LEN;
            reth: Reth, crate::reth::LEN;
            atomic_eth: AtomicEth, crate::atomic_eth::LEN;
            aeth: Aeth, crate::aeth::LEN;
            atomic_ack_eth: AtomicAckEth, crate::atomic_ack_eth::LEN;
            immdt: ImmDt, crate::immdt::LEN;
            ieth: Ieth, crate::ieth::LEN;
        }
        debug_assert!(rest.is_empty(), "the opcode's headers fill its header length");
        Ok(len)
    }

    /// Writes the whole packet (headers, payload, zero pad, ICRC for `ctx`)
    /// to the start of `buf`; returns its length.
    pub fn emit(&self, buf: &mut [u8], payload: &[u8], ctx: &IcrcContext) -> Result<usize, WireError> {
        let total = self.packet_len(payload.len())?;
        if buf.len() < total {
            return Err(WireError::BufferTooSmall { need: total, have: buf.len() });
        }
        let hlen = self.emit_headers(buf, payload.len())?;
        let pend = hlen + payload.len();
        buf[hlen..pend].copy_from_slice(payload);
        buf[pend..total - ICRC_LEN].fill(0);
        let icrc = IcrcHasher::new(ctx, total).finish_over(&buf[..total - ICRC_LEN])?;
        buf[total - ICRC_LEN..total].copy_from_slice(&icrc.to_le_bytes());
        Ok(total)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Opcode, Psn, Syndrome};
    use std::net::Ipv4Addr;

    fn ctx() -> IcrcContext {
        IcrcContext {
            ip: crate::IpContext::v4_socket(Ipv4Addr::new(127, 0, 0, 2), Ipv4Addr::new(127, 0, 0, 3)),
            src_port: 0xc121,
            dst_port: crate::ROCE_V2_UDP_PORT,
        }
    }

    fn repr(opcode: Opcode) -> PacketRepr {
        PacketRepr {
            bth: BthRepr { ack_req: true, ..BthRepr::new(opcode, 0x11, Psn::new(7)) },
            ext: ExtRepr::default(),
        }
    }

    #[test]
    fn send_with_pad() {
        let mut buf = [0u8; 64];
        let n = repr(Opcode::RC_SEND_ONLY).emit(&mut buf, b"hi", &ctx()).unwrap();
        assert_eq!(n, 12 + 2 + 2 + 4);
        let p = Packet::new_checked(&buf[..n]).unwrap();
        assert_eq!(p.payload(), b"hi");
        assert_eq!(p.pad(), &[0, 0]);
        assert_eq!(p.bth().pad_count(), 2);
        p.verify_icrc(IcrcHasher::new(&ctx(), n)).unwrap();
        assert_eq!(PacketRepr::parse(&p), repr(Opcode::RC_SEND_ONLY));
    }

    #[test]
    fn layout_errors() {
        let mut buf = [0u8; 64];
        let mut ack = repr(Opcode::RC_ACKNOWLEDGE);
        assert!(matches!(ack.emit(&mut buf, &[], &ctx()), Err(WireError::Inconsistent { .. })));
        ack.ext.aeth = Some(AethRepr { syndrome: Syndrome::Ack { credits: 31 }, msn: 1 });
        assert!(matches!(ack.emit(&mut buf, b"x", &ctx()), Err(WireError::Inconsistent { .. })));
        let n = ack.emit(&mut buf, &[], &ctx()).unwrap();
        assert_eq!(n, 20);
        assert!(Packet::new_checked(&buf[..n]).is_ok());
        assert_eq!(
            Packet::new_checked(&buf[..n - 1]).unwrap_err(),
            WireError::Truncated { what: "extended headers", need: 20, have: 19 }
        );
        let mut long = buf;
        assert!(matches!(Packet::new_checked(&long[..n + 4]), Err(WireError::BadLength { .. })));
        long[1] |= 0x10; // pad count 1 on an ACK
        assert!(matches!(Packet::new_checked(&long[..n]), Err(WireError::BadPad { pad: 1, area: 0 })));
        long[0] = 0x15;
        assert_eq!(Packet::new_checked(&long[..n]).unwrap_err(), WireError::UnknownOpcode(0x15));
        long[1] = 0x02;
        assert_eq!(Packet::new_checked(&long[..n]).unwrap_err(), WireError::BadVersion(2));
        let n = repr(Opcode::RC_SEND_FIRST).emit(&mut buf, &[7; 40], &ctx()).unwrap();
        assert!(matches!(
            Packet::new_checked(&buf[..n]).unwrap().check_path_mtu(None),
            Err(WireError::BadLength { opcode: 0, area: 40, .. })
        ));
        let mut big = [0u8; 600];
        let n = repr(Opcode::RC_SEND_MIDDLE).emit(&mut big, &[7; 512], &ctx()).unwrap();
        let p = Packet::new_checked(&big[..n]).unwrap();
        assert_eq!(p.check_path_mtu(None), Ok(()));
        assert_eq!(p.check_path_mtu(Some(512)), Ok(()));
        assert!(p.check_path_mtu(Some(256)).is_err());
        let n = repr(Opcode::RC_SEND_ONLY).emit(&mut big, &[7; 300], &ctx()).unwrap();
        let p = Packet::new_checked(&big[..n]).unwrap();
        assert!(p.check_path_mtu(Some(256)).is_err());
        assert_eq!(p.check_path_mtu(Some(512)), Ok(()));
        assert!(matches!(
            repr(Opcode::RC_SEND_ONLY).emit(&mut buf[..10], b"", &ctx()),
            Err(WireError::BufferTooSmall { need: 16, have: 10 })
        ));
    }
}
