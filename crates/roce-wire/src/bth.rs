//! Base Transport Header (IBTA 9.2), the first 12 bytes of every packet.
//!
//! ```text
//!  0               1               2               3
//!  0 1 2 3 4 5 6 7 0 1 2 3 4 5 6 7 0 1 2 3 4 5 6 7 0 1 2 3 4 5 6 7
//! +---------------+-+-+---+-------+-------------------------------+
//! |    OpCode     |S|M|Pad| TVer  |            P_Key              |
//! +-+-+-----------+---------------+-------------------------------+
//! |F|B|  resv6    |              Destination QP                   |
//! +-+-------------+-----------------------------------------------+
//! |A|   resv7     |          Packet Sequence Number               |
//! +-+-------------+-----------------------------------------------+
//! S = solicited event, M = MigReq, F/B = FECN/BECN (RoCEv2 carries ECN in
//! IP; the whole byte 4 is masked out of the ICRC), A = AckReq.
//! ```

use crate::field::{check_len, header_view, set_u16, set_u24, u16_at, u24_at};
use crate::{Opcode, Psn, WireError};

/// BTH length in bytes.
pub const LEN: usize = 12;

/// The destination QP of `packet` (BTH first), read without parsing or
/// checking the rest: what steering, GSO grouping and forwarding between
/// the processes of a host look at before the engine sees the packet.
/// `None` when the packet is too short to hold the field.
pub fn dest_qpn_of(packet: &[u8]) -> Option<u32> {
    packet.get(5..8).map(|q| u32::from_be_bytes([0, q[0], q[1], q[2]]))
}

header_view!(
    /// A zero-copy view of a BTH.
    Bth,
    "BTH"
);

impl<T: AsRef<[u8]>> Bth<T> {
    /// OpCode.
    pub fn opcode(&self) -> Opcode {
        Opcode(self.bytes()[0])
    }
    /// Solicited Event bit.
    pub fn solicited(&self) -> bool {
        self.bytes()[1] & 0x80 != 0
    }
    /// MigReq bit.
    pub fn mig_req(&self) -> bool {
        self.bytes()[1] & 0x40 != 0
    }
    /// Pad count: bytes appended to the payload to reach a multiple of 4.
    pub fn pad_count(&self) -> u8 {
        (self.bytes()[1] >> 4) & 0x3
    }
    /// Transport header version (0).
    pub fn tver(&self) -> u8 {
        self.bytes()[1] & 0xf
    }
    /// Partition key.
    pub fn pkey(&self) -> u16 {
        u16_at(self.bytes(), 2)
    }
    /// FECN bit.
    pub fn fecn(&self) -> bool {
        self.bytes()[4] & 0x80 != 0
    }
    /// BECN bit.
    pub fn becn(&self) -> bool {
        self.bytes()[4] & 0x40 != 0
    }
    /// Destination QP number (24 bits).
    pub fn dest_qpn(&self) -> u32 {
        u24_at(self.bytes(), 5)
    }
    /// AckReq bit.
    pub fn ack_req(&self) -> bool {
        self.bytes()[8] & 0x80 != 0
    }
    /// Packet sequence number.
    pub fn psn(&self) -> Psn {
        Psn::new(u24_at(self.bytes(), 9))
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Bth<T> {
    /// Sets the opcode.
    pub fn set_opcode(&mut self, op: Opcode) {
        self.bytes_mut()[0] = op.0;
    }
    /// Sets byte 1: SE, MigReq, pad count and TVer.
    pub fn set_flags(&mut self, solicited: bool, mig_req: bool, pad_count: u8, tver: u8) {
        self.bytes_mut()[1] =
            (u8::from(solicited) << 7) | (u8::from(mig_req) << 6) | ((pad_count & 3) << 4) | (tver & 0xf);
    }
    /// Sets the partition key.
    pub fn set_pkey(&mut self, pkey: u16) {
        set_u16(self.bytes_mut(), 2, pkey);
    }
    /// Sets byte 4 (FECN, BECN, reserved bits zero).
    pub fn set_ecn(&mut self, fecn: bool, becn: bool) {
        self.bytes_mut()[4] = (u8::from(fecn) << 7) | (u8::from(becn) << 6);
    }
    /// Sets the destination QP (low 24 bits).
    pub fn set_dest_qpn(&mut self, qpn: u32) {
        set_u24(self.bytes_mut(), 5, qpn);
    }
    /// Sets the AckReq bit and the PSN (reserved bits zero).
    pub fn set_ack_req_psn(&mut self, ack_req: bool, psn: Psn) {
        let b = self.bytes_mut();
        b[8] = u8::from(ack_req) << 7;
        set_u24(b, 9, psn.value());
    }
}

/// The meaning of a BTH. The pad count is not stored: it follows from the
/// payload length and is written by [`BthRepr::emit`]. Reserved bits are
/// ignored on parse and written as zero (IBTA 9.2: "ignored by the receiver").
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct BthRepr {
    /// OpCode.
    pub opcode: Opcode,
    /// Solicited Event.
    pub solicited: bool,
    /// MigReq (Linux rxe sends 0).
    pub mig_req: bool,
    /// Partition key (0xffff, the default partition, on RoCE).
    pub pkey: u16,
    /// FECN.
    pub fecn: bool,
    /// BECN.
    pub becn: bool,
    /// Destination QP number (24 bits).
    pub dest_qpn: u32,
    /// AckReq.
    pub ack_req: bool,
    /// PSN.
    pub psn: Psn,
}

impl BthRepr {
    /// A BTH for `opcode` to `dest_qpn` at `psn` in the default partition
    /// (P_Key 0xffff), with every flag clear: what rxe sends unless a flag applies.
    pub const fn new(opcode: Opcode, dest_qpn: u32, psn: Psn) -> BthRepr {
        BthRepr {
            opcode,
            solicited: false,
            mig_req: false,
            pkey: 0xffff,
            fecn: false,
            becn: false,
            dest_qpn,
            ack_req: false,
            psn,
        }
    }

    /// Parses a BTH; fails on a transport header version other than 0.
    pub fn parse<T: AsRef<[u8]>>(bth: &Bth<T>) -> Result<BthRepr, WireError> {
        check_len("BTH", LEN, bth.bytes().len())?;
        if bth.tver() != 0 {
            return Err(WireError::BadVersion(bth.tver()));
        }
        Ok(BthRepr::read(bth))
    }

    /// Reads the fields of a BTH already checked (length and version).
    #[inline]
    pub(crate) fn read<T: AsRef<[u8]>>(bth: &Bth<T>) -> BthRepr {
        BthRepr {
            opcode: bth.opcode(),
            solicited: bth.solicited(),
            mig_req: bth.mig_req(),
            pkey: bth.pkey(),
            fecn: bth.fecn(),
            becn: bth.becn(),
            dest_qpn: bth.dest_qpn(),
            ack_req: bth.ack_req(),
            psn: bth.psn(),
        }
    }

    /// Writes the BTH with the given pad count (0..=3): the bytes the
    /// setters write, built whole and stored at once (every packet sent
    /// passes here).
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, bth: &mut Bth<T>, pad_count: u8) {
        let flags = (u8::from(self.solicited) << 7) | (u8::from(self.mig_req) << 6) | ((pad_count & 3) << 4);
        let ecn = (u8::from(self.fecn) << 7) | (u8::from(self.becn) << 6);
        let [p0, p1] = self.pkey.to_be_bytes();
        let [_, q1, q2, q3] = self.dest_qpn.to_be_bytes();
        let [_, s1, s2, s3] = self.psn.value().to_be_bytes();
        let ack = u8::from(self.ack_req) << 7;
        bth.bytes_mut()[..LEN].copy_from_slice(&[self.opcode.0, flags, p0, p1, ecn, q1, q2, q3, ack, s1, s2, s3]);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // An RC SEND_ONLY from the golden capture rc_pingpong_s64_n5: QPN 0x11,
    // P_Key 0xffff, MigReq clear, AckReq set.
    const SEND_ONLY: [u8; 12] = [0x04, 0x00, 0xff, 0xff, 0x00, 0x00, 0x00, 0x11, 0x80, 0x12, 0x34, 0x56];

    #[test]
    fn fields() {
        let b = Bth::new_checked(&SEND_ONLY[..]).unwrap();
        assert_eq!(b.opcode(), Opcode::RC_SEND_ONLY);
        assert!(!b.mig_req() && !b.solicited() && b.ack_req());
        assert_eq!((b.pad_count(), b.tver(), b.pkey()), (0, 0, 0xffff));
        assert_eq!(b.dest_qpn(), 0x11);
        assert_eq!(b.psn(), Psn::new(0x123456));
        let r = BthRepr::parse(&b).unwrap();
        let mut out = [0u8; 12];
        r.emit(&mut Bth::new_unchecked(&mut out[..]), 0);
        assert_eq!(out, SEND_ONLY);
    }

    #[test]
    fn errors() {
        assert_eq!(
            Bth::new_checked(&SEND_ONLY[..11]).unwrap_err(),
            WireError::Truncated { what: "BTH", need: 12, have: 11 }
        );
        let mut v1 = SEND_ONLY;
        v1[1] |= 1;
        assert_eq!(BthRepr::parse(&Bth::new_unchecked(&v1[..])), Err(WireError::BadVersion(1)));
    }

    #[test]
    fn dest_qpn_of_reads_the_24_bit_field_and_refuses_runts() {
        let mut p = [0u8; 12];
        p[4] = 0xff; // F, B and resv6: not part of the QPN
        p[5..8].copy_from_slice(&[0x12, 0x34, 0x56]);
        assert_eq!(dest_qpn_of(&p), Some(0x12_3456));
        assert_eq!(dest_qpn_of(&p[..8]), Some(0x12_3456));
        assert_eq!(dest_qpn_of(&p[..7]), None);
        assert_eq!(dest_qpn_of(&p), Some(Bth::new_checked(&p[..]).unwrap().dest_qpn()));
    }
}
