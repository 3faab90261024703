//! ACK Extended Transport Header (IBTA 9.3.5): what a responder says about
//! the request PSNs up to this one.
//!
//! ```text
//!  0               1                   2                   3
//!  0 1 2 3 4 5 6 7
//! +-+---+---------+-----------------------------------------------+
//! |r|typ|  value  |       Message Sequence Number (24 bits)       |
//! +-+---+---------+-----------------------------------------------+
//! typ 00 ACK (value = credit count), 01 RNR NAK (value = RNR timer code),
//! 11 NAK (value = NAK code), 10 reserved. r is reserved.
//! ```

use core::time::Duration;

use crate::field::{header_view, set_u24, u24_at};

/// AETH length in bytes.
pub const LEN: usize = 4;

header_view!(
    /// A zero-copy view of an AETH.
    Aeth,
    "AETH"
);

impl<T: AsRef<[u8]>> Aeth<T> {
    /// The raw syndrome byte.
    pub fn syndrome_byte(&self) -> u8 {
        self.bytes()[0]
    }
    /// The decoded syndrome.
    pub fn syndrome(&self) -> Syndrome {
        Syndrome::from_byte(self.syndrome_byte())
    }
    /// Message sequence number (24 bits).
    pub fn msn(&self) -> u32 {
        u24_at(self.bytes(), 1)
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Aeth<T> {
    /// Sets the syndrome.
    pub fn set_syndrome(&mut self, s: Syndrome) {
        self.bytes_mut()[0] = s.to_byte();
    }
    /// Sets the MSN (low 24 bits).
    pub fn set_msn(&mut self, msn: u32) {
        set_u24(self.bytes_mut(), 1, msn);
    }
}

/// A decoded AETH syndrome.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Syndrome {
    /// Positive acknowledgement with an end-to-end credit count code
    /// (0..=30; [`Syndrome::CREDITS_INVALID`] means "no credit information",
    /// which Linux rxe always sends).
    Ack {
        /// 5-bit credit count code.
        credits: u8,
    },
    /// Receiver not ready: retry after the timer.
    RnrNak {
        /// The responder's RNR timer code.
        timer: RnrTimer,
    },
    /// Negative acknowledgement.
    Nak(NakCode),
    /// The reserved type `10`, or the reserved top bit set: kept verbatim.
    Reserved(u8),
}

impl Syndrome {
    /// The credit code that means "credit count invalid" (IBTA 9.7.5.1.5).
    pub const CREDITS_INVALID: u8 = 0x1f;

    /// Receive WQEs each credit code 0..=30 stands for (IBTA 9.7.5.1.5,
    /// the end-to-end credit encoding; rdmavt's `credit_table`).
    pub const CREDIT_COUNTS: [u32; 31] = [
        0, 1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 96, 128, 192, 256, 384, 512, 768, 1024, 1536, 2048, 3072, 4096,
        6144, 8192, 12288, 16384, 24576, 32768,
    ];

    /// The code for `wqes` available receive WQEs: the largest count not
    /// above it (a responder may understate its credits, never overstate).
    pub fn credits_for(wqes: u64) -> u8 {
        Self::CREDIT_COUNTS.iter().rposition(|&c| u64::from(c) <= wqes).unwrap_or(0) as u8
    }

    /// The receive WQEs credit code `code` stands for; `None` for
    /// [`Syndrome::CREDITS_INVALID`] (no end-to-end flow control).
    pub fn credit_count(code: u8) -> Option<u32> {
        Self::CREDIT_COUNTS.get(usize::from(code)).copied()
    }

    /// Decodes a syndrome byte. Never fails: unknown forms become `Reserved`.
    pub const fn from_byte(b: u8) -> Syndrome {
        let value = b & 0x1f;
        if b & 0x80 != 0 {
            return Syndrome::Reserved(b);
        }
        match (b >> 5) & 0x3 {
            0 => Syndrome::Ack { credits: value },
            1 => Syndrome::RnrNak { timer: RnrTimer(value) },
            3 => Syndrome::Nak(NakCode::from_code(value)),
            _ => Syndrome::Reserved(b),
        }
    }

    /// Encodes the syndrome byte.
    pub const fn to_byte(self) -> u8 {
        match self {
            Syndrome::Ack { credits } => credits & 0x1f,
            Syndrome::RnrNak { timer } => 0x20 | (timer.0 & 0x1f),
            Syndrome::Nak(code) => 0x60 | (code.code() & 0x1f),
            Syndrome::Reserved(b) => b,
        }
    }
}

/// NAK codes (IBTA 9.7.5.2.2).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum NakCode {
    /// 0: a request PSN was out of sequence; the requester rewinds.
    PsnSequenceError,
    /// 1: invalid request (unsupported opcode, bad length, ...).
    InvalidRequest,
    /// 2: R_Key, access rights or bounds check failed.
    RemoteAccessError,
    /// 3: the responder failed to carry out a valid request.
    RemoteOperationalError,
    /// 4: invalid RD request.
    InvalidRdRequest,
    /// 5..=31: reserved.
    Reserved(u8),
}

impl NakCode {
    /// Decodes a 5-bit NAK code.
    pub const fn from_code(c: u8) -> NakCode {
        match c {
            0 => NakCode::PsnSequenceError,
            1 => NakCode::InvalidRequest,
            2 => NakCode::RemoteAccessError,
            3 => NakCode::RemoteOperationalError,
            4 => NakCode::InvalidRdRequest,
            c => NakCode::Reserved(c & 0x1f),
        }
    }

    /// The 5-bit code.
    pub const fn code(self) -> u8 {
        match self {
            NakCode::PsnSequenceError => 0,
            NakCode::InvalidRequest => 1,
            NakCode::RemoteAccessError => 2,
            NakCode::RemoteOperationalError => 3,
            NakCode::InvalidRdRequest => 4,
            NakCode::Reserved(c) => c,
        }
    }
}

/// An RNR NAK timer code (IBTA table 45): how long the requester waits
/// before retrying a request the responder had no receive WQE for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct RnrTimer(pub u8);

/// Microseconds per RNR timer code; code 0 is the longest wait.
const RNR_TIMER_US: [u32; 32] = [
    655_360, 10, 20, 30, 40, 60, 80, 120, 160, 240, 320, 480, 640, 960, 1_280, 1_920, 2_560, 3_840, 5_120, 7_680,
    10_240, 15_360, 20_480, 30_720, 40_960, 61_440, 81_920, 122_880, 163_840, 245_760, 327_680, 491_520,
];

impl RnrTimer {
    /// The wait this code stands for.
    pub const fn duration(self) -> Duration {
        Duration::from_micros(RNR_TIMER_US[(self.0 & 0x1f) as usize] as u64)
    }
}

/// The meaning of an AETH.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct AethRepr {
    /// Syndrome.
    pub syndrome: Syndrome,
    /// Message sequence number (24 bits).
    pub msn: u32,
}

impl AethRepr {
    /// Reads an AETH.
    pub fn parse<T: AsRef<[u8]>>(h: &Aeth<T>) -> AethRepr {
        AethRepr { syndrome: h.syndrome(), msn: h.msn() }
    }
    /// Writes an AETH.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, h: &mut Aeth<T>) {
        h.set_syndrome(self.syndrome);
        h.set_msn(self.msn);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn syndromes_decode() {
        // rxe's plain ACK: credits invalid.
        assert_eq!(Syndrome::from_byte(0x1f), Syndrome::Ack { credits: Syndrome::CREDITS_INVALID });
        assert_eq!(Syndrome::from_byte(0x2e), Syndrome::RnrNak { timer: RnrTimer(14) });
        assert_eq!(Syndrome::from_byte(0x60), Syndrome::Nak(NakCode::PsnSequenceError));
        assert_eq!(Syndrome::from_byte(0x62), Syndrome::Nak(NakCode::RemoteAccessError));
        assert_eq!(Syndrome::from_byte(0x69), Syndrome::Nak(NakCode::Reserved(9)));
        assert_eq!(Syndrome::from_byte(0x41), Syndrome::Reserved(0x41));
        assert_eq!(Syndrome::from_byte(0x9f), Syndrome::Reserved(0x9f));
        for b in 0..=255u8 {
            assert_eq!(Syndrome::from_byte(b).to_byte(), b);
        }
    }

    #[test]
    fn rnr_timer_table() {
        assert_eq!(RnrTimer(14).duration(), Duration::from_micros(1_280));
        assert_eq!(RnrTimer(0).duration(), Duration::from_micros(655_360));
        assert_eq!(RnrTimer(1).duration(), Duration::from_micros(10));
        assert_eq!(RnrTimer(31).duration(), Duration::from_micros(491_520));
        // Codes 1..=31 grow strictly.
        for c in 1..31u8 {
            assert!(RnrTimer(c).duration() < RnrTimer(c + 1).duration());
        }
    }

    #[test]
    fn credit_codes_round_down() {
        assert_eq!(Syndrome::credits_for(0), 0);
        assert_eq!(Syndrome::credits_for(5), 4);
        assert_eq!(Syndrome::credits_for(6), 5);
        assert_eq!(Syndrome::credits_for(63), 11);
        assert_eq!(Syndrome::credits_for(64), 12);
        assert_eq!(Syndrome::credits_for(1 << 40), 30);
        for n in 0..40_000u64 {
            let c = Syndrome::credits_for(n);
            let v = u64::from(Syndrome::credit_count(c).unwrap());
            let above = Syndrome::credit_count(c + 1).map_or(u64::MAX, u64::from);
            assert!(v <= n && n < above, "{n} -> code {c} ({v})");
        }
        assert_eq!(Syndrome::credit_count(Syndrome::CREDITS_INVALID), None);
    }

    #[test]
    fn view_round_trip() {
        let bytes = [0x2e, 0x12, 0x34, 0x56];
        let a = Aeth::new_checked(&bytes[..]).unwrap();
        let r = AethRepr::parse(&a);
        assert_eq!(r, AethRepr { syndrome: Syndrome::RnrNak { timer: RnrTimer(14) }, msn: 0x123456 });
        let mut out = [0u8; 4];
        r.emit(&mut Aeth::new_unchecked(&mut out[..]));
        assert_eq!(out, bytes);
    }
}
