//! The ECN field of the IP header that carries a RoCEv2 packet (RFC 3168):
//! the two low bits of the IPv4 TOS byte or of the IPv6 traffic class.
//!
//! ```text
//!   0   1   2   3   4   5   6   7
//! +---+---+---+---+---+---+---+---+
//! |          DSCP         |  ECN  |   00 Not-ECT, 01 ECT(1),
//! +---+---+---+---+---+---+---+---+   10 ECT(0),  11 CE
//! ```
//!
//! RoCEv2 congestion control (Annex A17.9) reads CE marks there: the
//! receiver of a marked packet sends a CNP. The ICRC masks the whole byte.

/// An ECN codepoint.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Ecn {
    /// Not ECN-capable transport.
    #[default]
    NotEct,
    /// ECN-capable transport, codepoint 1.
    Ect1,
    /// ECN-capable transport, codepoint 0 (what a sender sets).
    Ect0,
    /// Congestion experienced (what a congested queue sets instead of dropping).
    Ce,
}

impl Ecn {
    /// The codepoint in the low two bits of a TOS or traffic-class byte.
    pub const fn from_tos(tos: u8) -> Ecn {
        match tos & 0b11 {
            0b00 => Ecn::NotEct,
            0b01 => Ecn::Ect1,
            0b10 => Ecn::Ect0,
            _ => Ecn::Ce,
        }
    }

    /// The two bits, as they go into a TOS byte.
    pub const fn bits(self) -> u8 {
        match self {
            Ecn::NotEct => 0b00,
            Ecn::Ect1 => 0b01,
            Ecn::Ect0 => 0b10,
            Ecn::Ce => 0b11,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::Ecn;

    #[test]
    fn codepoints_round_trip_and_ignore_the_dscp() {
        for e in [Ecn::NotEct, Ecn::Ect1, Ecn::Ect0, Ecn::Ce] {
            assert_eq!(Ecn::from_tos(0xb8 | e.bits()), e, "DSCP 46 with {e:?}");
        }
        assert_eq!(Ecn::from_tos(0x03), Ecn::Ce);
        assert_eq!(Ecn::from_tos(0x02), Ecn::Ect0);
    }
}
