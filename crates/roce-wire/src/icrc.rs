//! The RoCEv2 invariant CRC (IBTA Annex A17.3.3).
//!
//! The ICRC is the CRC-32 of IEEE 802.3 (zlib's `crc32`) over a pseudo
//! packet in which every field a router may change reads as all ones, stored
//! little-endian in the packet's last 4 bytes:
//!
//! ```text
//! 8 x 0xff                      (stands for the InfiniBand LRH)
//! IPv4 header: TOS, TTL, header checksum = 1s     | IPv6 header: traffic class,
//!              (identification and flags stay!)   |   flow label, hop limit = 1s
//! UDP header:  checksum = 1s
//! BTH:         byte 4 (FECN, BECN, resv6) = 1s
//! extended headers, payload, pad
//! ```
//!
//! The IPv4 identification is covered. A UDP socket cannot see it on
//! receive, so a receiver chooses an [`IcrcPolicy`]; senders on unconnected
//! sockets with `IP_PMTUDISC_DO` get ID 0 and DF from Linux, which
//! [`IpContext::v4_socket`] describes.

use std::net::{Ipv4Addr, Ipv6Addr};

use crate::field::check_len;
use crate::{ICRC_LEN, WireError, bth};

/// The IP fields that enter the ICRC, as a sender knows them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum IpContext {
    /// IPv4 without options.
    V4 {
        /// Source address.
        src: Ipv4Addr,
        /// Destination address.
        dst: Ipv4Addr,
        /// Identification field.
        identification: u16,
        /// Don't Fragment flag (MF and fragment offset are 0: RoCE is never fragmented).
        dont_fragment: bool,
    },
    /// IPv6 without extension headers.
    V6 {
        /// Source address.
        src: Ipv6Addr,
        /// Destination address.
        dst: Ipv6Addr,
    },
}

impl IpContext {
    /// IPv4 as Linux sends it from an unconnected UDP socket with
    /// `IP_MTU_DISCOVER = IP_PMTUDISC_DO`: ID 0, DF set.
    pub const fn v4_socket(src: Ipv4Addr, dst: Ipv4Addr) -> IpContext {
        IpContext::V4 { src, dst, identification: 0, dont_fragment: true }
    }
}

/// Addresses and ports of a RoCEv2 packet: all a sender needs for its ICRC.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct IcrcContext {
    /// IP fields.
    pub ip: IpContext,
    /// UDP source port (per QP in rxe, for ECMP entropy).
    pub src_port: u16,
    /// UDP destination port (4791).
    pub dst_port: u16,
}

/// An ICRC computation in progress: the masked IP/UDP pseudo header, then
/// the packet from its BTH on. Bytes are buffered while they fit and
/// absorbed in one CRC update with whatever follows, since every update call
/// has a fixed cost that matters for 20-byte ACKs.
#[derive(Clone)]
pub struct IcrcHasher {
    crc: roce_crc32::Hasher,
    pending: [u8; PENDING_CAP],
    pending_len: usize,
}

/// Room for the longest pseudo header (IPv4 with options, 60 + UDP 8), a
/// BTH, and the rest of a small packet (an ACK, an 8-byte SEND or WRITE):
/// such a packet then costs one CRC update, not one per piece.
const PENDING_CAP: usize = 96;

const LRH_STANDIN: [u8; 8] = [0xff; 8];
const UDP_LEN: usize = 8;

/// CRC-32 of the 8 bytes of 0xff that stand for the LRH: every ICRC starts
/// from this state.
const LRH_CRC: u32 = {
    let mut crc = 0xffff_ffffu32;
    let mut i = 0;
    while i < LRH_STANDIN.len() {
        crc ^= LRH_STANDIN[i] as u32;
        let mut bit = 0;
        while bit < 8 {
            crc = if crc & 1 != 0 { (crc >> 1) ^ 0xedb8_8320 } else { crc >> 1 };
            bit += 1;
        }
        i += 1;
    }
    !crc
};

impl IcrcHasher {
    /// Starts the ICRC of a packet whose UDP payload (BTH through ICRC) is
    /// `roce_len` bytes long, from the fields a sender knows.
    pub fn new(ctx: &IcrcContext, roce_len: usize) -> IcrcHasher {
        let udp_len = (UDP_LEN + roce_len) as u16;
        let mut pseudo = [0xffu8; PENDING_CAP];
        let ip_len = match ctx.ip {
            IpContext::V4 { src, dst, identification, dont_fragment } => {
                let total = 20u16.wrapping_add(udp_len);
                let flags: u16 = if dont_fragment { 0x4000 } else { 0 };
                let h = &mut pseudo[..20];
                h[0] = 0x45;
                h[1] = 0xff; // TOS
                h[2..4].copy_from_slice(&total.to_be_bytes());
                h[4..6].copy_from_slice(&identification.to_be_bytes());
                h[6..8].copy_from_slice(&flags.to_be_bytes());
                h[8] = 0xff; // TTL
                h[9] = 17;
                h[10..12].copy_from_slice(&[0xff, 0xff]); // header checksum
                h[12..16].copy_from_slice(&src.octets());
                h[16..20].copy_from_slice(&dst.octets());
                20
            }
            IpContext::V6 { src, dst } => {
                let h = &mut pseudo[..40];
                h[0..4].copy_from_slice(&[0x6f, 0xff, 0xff, 0xff]); // TC, flow label
                h[4..6].copy_from_slice(&udp_len.to_be_bytes());
                h[6] = 17;
                h[7] = 0xff; // hop limit
                h[8..24].copy_from_slice(&src.octets());
                h[24..40].copy_from_slice(&dst.octets());
                40
            }
        };
        let u = &mut pseudo[ip_len..ip_len + UDP_LEN];
        u[0..2].copy_from_slice(&ctx.src_port.to_be_bytes());
        u[2..4].copy_from_slice(&ctx.dst_port.to_be_bytes());
        u[4..6].copy_from_slice(&udp_len.to_be_bytes());
        u[6..8].copy_from_slice(&[0xff, 0xff]); // UDP checksum
        IcrcHasher {
            crc: roce_crc32::Hasher::new_with_initial(LRH_CRC),
            pending: pseudo,
            pending_len: ip_len + UDP_LEN,
        }
    }

    /// Starts the ICRC from the raw IP and UDP headers of a captured packet
    /// (IPv4 with any options, or a 40-byte IPv6 header). Every bit the
    /// sender's kernel wrote is checked, the IPv4 identification included.
    pub fn from_raw_headers(ip: &[u8], udp: &[u8]) -> Result<IcrcHasher, WireError> {
        check_len("UDP header", UDP_LEN, udp.len())?;
        check_len("IP header", 1, ip.len())?;
        let mut buf = [0xffu8; PENDING_CAP];
        let ip_len = match ip[0] >> 4 {
            4 => {
                let ihl = usize::from(ip[0] & 0xf) * 4;
                if ihl < 20 {
                    return Err(WireError::Truncated { what: "IPv4 header", need: 20, have: ihl });
                }
                check_len("IPv4 header", ihl, ip.len())?;
                let h = &mut buf[..ihl];
                h.copy_from_slice(&ip[..ihl]);
                h[1] = 0xff;
                h[8] = 0xff;
                h[10] = 0xff;
                h[11] = 0xff;
                ihl
            }
            _ => {
                check_len("IPv6 header", 40, ip.len())?;
                let h = &mut buf[..40];
                h.copy_from_slice(&ip[..40]);
                h[0] |= 0x0f;
                h[1] = 0xff;
                h[2] = 0xff;
                h[3] = 0xff;
                h[7] = 0xff;
                40
            }
        };
        buf[ip_len..ip_len + 6].copy_from_slice(&udp[..6]);
        buf[ip_len + 6..ip_len + UDP_LEN].copy_from_slice(&[0xff, 0xff]);
        Ok(IcrcHasher {
            crc: roce_crc32::Hasher::new_with_initial(LRH_CRC),
            pending: buf,
            pending_len: ip_len + UDP_LEN,
        })
    }

    /// Absorbs the BTH, masking its byte 4. Call it once, first.
    pub fn update_bth(&mut self, bth: &[u8; bth::LEN]) {
        let at = self.pending_len;
        if at + bth::LEN > PENDING_CAP {
            self.flush();
            return self.update_bth(bth);
        }
        self.pending[at..at + bth::LEN].copy_from_slice(bth);
        self.pending[at + 4] = 0xff;
        self.pending_len = at + bth::LEN;
    }

    /// Absorbs the buffered bytes now (the pseudo header, after
    /// [`IcrcHasher::new`]): a hasher to clone for many packets of one
    /// length and address pair, which then skip that part of the work.
    pub fn absorbed(mut self) -> IcrcHasher {
        self.flush();
        self
    }

    fn flush(&mut self) {
        if self.pending_len > 0 {
            self.crc.update(&self.pending[..self.pending_len]);
            self.pending_len = 0;
        }
    }

    /// Absorbs bytes that follow the BTH (headers, payload, pad).
    pub fn update(&mut self, bytes: &[u8]) {
        let at = self.pending_len;
        if let Some(room) = self.pending.get_mut(at..at + bytes.len()) {
            room.copy_from_slice(bytes);
            self.pending_len = at + bytes.len();
            return;
        }
        self.flush();
        self.crc.update(bytes);
    }

    /// Absorbs a whole packet from its BTH up to (not including) the ICRC and
    /// returns the ICRC. Fails if `covered` is shorter than a BTH.
    pub fn finish_over(mut self, covered: &[u8]) -> Result<u32, WireError> {
        check_len("BTH", bth::LEN, covered.len())?;
        let (head, rest) = covered.split_at(bth::LEN);
        let mut b = [0u8; bth::LEN];
        b.copy_from_slice(head);
        self.update_bth(&b);
        self.update(rest);
        Ok(self.finish())
    }

    /// The ICRC of everything absorbed.
    pub fn finish(mut self) -> u32 {
        self.value()
    }

    /// The ICRC of everything absorbed so far, leaving the hasher in place
    /// (no copy of its buffer: the per-packet path of a burst).
    pub fn value(&mut self) -> u32 {
        self.flush();
        self.crc.clone().finalize()
    }
}

/// Reads the ICRC stored in the last 4 bytes of `packet` (little-endian,
/// as rxe writes it on x86 and as every RoCE peer reads it).
pub fn stored_icrc(packet: &[u8]) -> Result<u32, WireError> {
    check_len("ICRC", ICRC_LEN, packet.len())?;
    let at = packet.len() - ICRC_LEN;
    Ok(u32::from_le_bytes([packet[at], packet[at + 1], packet[at + 2], packet[at + 3]]))
}

/// How a receiver checks ICRCs when it may not know the IPv4 identification.
///
/// | mode            | IPv6    | IPv4, ID known | IPv4, ID unseen (UDP socket)            |
/// |-----------------|---------|----------------|-----------------------------------------|
/// | `Full`          | checked | checked        | checked assuming ID 0 and DF            |
/// | `Ipv6OrKnownId` | checked | checked        | ID solved from the ICRC: 16-bit check   |
/// | `Off`           | skipped | skipped        | skipped                                 |
///
/// `Full` suits softroce-to-softroce traffic (softroce sends ID 0, DF) and
/// captures. `Ipv6OrKnownId` lets a socket receiver talk to kernel rxe or
/// NICs, whose IPv4 IDs vary per packet: the CRC is affine in the 16 ID bits,
/// so the one ID (with DF set or clear) that would make the ICRC match is
/// computed, and the packet is accepted only if such an ID exists. That keeps
/// 16 of the 32 check bits: a random corruption passes with probability
/// 2^-15, and so does a single flipped bit at an unlucky position (about one
/// position in 8,000 on a 1 KiB packet). `Off` is for debugging peers with
/// broken ICRCs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum IcrcPolicy {
    /// Check every packet with all 32 bits.
    Full,
    /// Check IPv6 and known-ID IPv4 fully; solve for an unseen IPv4 ID.
    #[default]
    Ipv6OrKnownId,
    /// Check nothing.
    Off,
}

/// The outcome of an ICRC check under a policy.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum IcrcCheck {
    /// The ICRC matched with every header field known.
    Verified,
    /// The IPv4 identification was unseen; the ICRC matches for exactly this
    /// identification and DF flag, which the sender must have used.
    IdSolved {
        /// The IPv4 identification.
        identification: u16,
        /// The DF flag.
        dont_fragment: bool,
    },
    /// The policy did not check this packet.
    Skipped,
}

impl IcrcPolicy {
    /// Checks the ICRC of `packet` (BTH through ICRC) received with `ctx`.
    /// `id_known` says whether `ctx`'s IPv4 identification and DF flag are
    /// what was on the wire (false for UDP sockets, where `ctx` should come
    /// from [`IpContext::v4_socket`]).
    pub fn check(self, ctx: &IcrcContext, id_known: bool, packet: &[u8]) -> Result<IcrcCheck, WireError> {
        match (self, ctx.ip) {
            (IcrcPolicy::Off, _) => Ok(IcrcCheck::Skipped),
            (IcrcPolicy::Ipv6OrKnownId, IpContext::V4 { src, dst, .. }) if !id_known => {
                solve_ipv4_id(&IcrcContext { ip: IpContext::v4_socket(src, dst), ..*ctx }, packet)
            }
            _ => verify(IcrcHasher::new(ctx, packet.len()), packet).map(|()| IcrcCheck::Verified),
        }
    }
}

/// Turns the ICRC of an IPv4 packet computed with identification 0 into the
/// ICRC for another identification, without running the CRC again: the CRC
/// is affine in the header bits, so the change is the 16-bit difference
/// times a power of x that depends only on the packet's length. A UDP GSO
/// send gives its k-th segment identification k (Linux), so a sender fixes
/// up those segments' ICRCs for peers that check the identification (rxe).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ipv4IdFixup {
    roce_len: usize,
    /// The change each identification bit makes (the map is linear).
    bits: [u32; 16],
}

impl Ipv4IdFixup {
    /// For packets of `roce_len` bytes (BTH through ICRC).
    pub fn new(roce_len: usize) -> Ipv4IdFixup {
        let n = LRH_STANDIN.len() + 20 + UDP_LEN + roce_len.saturating_sub(ICRC_LEN);
        let shift = gf2::x_pow(8 * (n - 14) as u64 + 32);
        let bits = std::array::from_fn(|b| gf2::mul(u32::from((1u16 << b).swap_bytes()) << 16, shift));
        Ipv4IdFixup { roce_len, bits }
    }

    /// The packet length this fixup is for.
    pub fn roce_len(&self) -> usize {
        self.roce_len
    }

    /// The value to XOR into an ICRC computed with identification 0 to get
    /// the ICRC with `identification`.
    pub fn delta(&self, identification: u16) -> u32 {
        let mut d = 0;
        let mut id = identification;
        while id != 0 {
            d ^= self.bits[id.trailing_zeros() as usize];
            id &= id - 1;
        }
        d
    }

    /// Rewrites the ICRC at the end of `packet` (computed for identification
    /// 0) for `identification`.
    pub fn apply(&self, packet: &mut [u8], identification: u16) -> Result<(), WireError> {
        let icrc = stored_icrc(packet)? ^ self.delta(identification);
        let at = packet.len() - ICRC_LEN;
        packet[at..].copy_from_slice(&icrc.to_le_bytes());
        Ok(())
    }
}

/// The [`Ipv4IdFixup`]s of the last few packet lengths a sender used. A
/// fix-up costs hundreds of field multiplications to make, and a flow mixes
/// few lengths: READ responses alternate FIRST/LAST (with an AETH) and
/// MIDDLE lengths within one GSO run.
pub struct Ipv4IdFixups(ByLength<Ipv4IdFixup, 4>);

impl Ipv4IdFixups {
    /// An empty cache.
    pub const fn new() -> Ipv4IdFixups {
        Ipv4IdFixups(ByLength::new())
    }

    /// The fix-up for packets of `roce_len` bytes (BTH through ICRC).
    pub fn get(&mut self, roce_len: usize) -> Ipv4IdFixup {
        *self.0.get(roce_len, || Ipv4IdFixup::new(roce_len))
    }
}

impl Default for Ipv4IdFixups {
    fn default() -> Ipv4IdFixups {
        Ipv4IdFixups::new()
    }
}

/// Up to `N` values by packet length, the oldest replaced first: for
/// values that depend only on the length and cost much to make.
pub(crate) struct ByLength<T, const N: usize> {
    slots: [Option<(usize, T)>; N],
    /// The slot the next new length takes.
    next: usize,
}

impl<T, const N: usize> ByLength<T, N> {
    pub(crate) const fn new() -> ByLength<T, N> {
        ByLength { slots: [const { None }; N], next: 0 }
    }

    /// The value for `len`, made by `make` unless held.
    pub(crate) fn get(&mut self, len: usize, make: impl FnOnce() -> T) -> &T {
        let slot = match self.slots.iter().position(|s| matches!(s, Some((l, _)) if *l == len)) {
            Some(i) => &mut self.slots[i],
            None => {
                let i = self.next;
                self.next = (i + 1) % N;
                let s = &mut self.slots[i];
                *s = None;
                s
            }
        };
        &slot.get_or_insert_with(|| (len, make())).1
    }
}

/// Finds the IPv4 identification and DF flag for which `packet`'s ICRC
/// matches. `ctx` must hold identification 0 with DF set.
fn solve_ipv4_id(ctx: &IcrcContext, packet: &[u8]) -> Result<IcrcCheck, WireError> {
    let found = stored_icrc(packet)?;
    let computed = IcrcHasher::new(ctx, packet.len()).finish_over(&packet[..packet.len() - ICRC_LEN])?;
    if found == computed {
        // The common case from softroce and other socket senders: ID 0, DF.
        return Ok(IcrcCheck::IdSolved { identification: 0, dont_fragment: true });
    }
    // Bytes the CRC runs over: LRH stand-in, IPv4 and UDP headers, packet less ICRC.
    let n = LRH_STANDIN.len() + 20 + UDP_LEN + packet.len() - ICRC_LEN;
    id_terms(n, |inv_id_shift, df_term| {
        let mut diff = found ^ computed;
        for dont_fragment in [true, false] {
            // diff = E(x) * x^(8k+32) mod P for the 16-bit ID polynomial E.
            let e = inv_id_shift.mul(diff);
            if e & 0xffff == 0 {
                let identification = ((e >> 16) as u16).swap_bytes();
                return Ok(IcrcCheck::IdSolved { identification, dont_fragment });
            }
            diff ^= df_term;
        }
        Err(WireError::BadIcrc { found, computed })
    })
}

/// Multiplication by a constant modulo the CRC polynomial, by byte tables:
/// the product is linear in the other factor, so four lookups replace the
/// 32 shift-and-add steps of [`gf2::mul`].
struct ConstMul {
    tables: [[u32; 256]; 4],
}

impl ConstMul {
    fn new(c: u32) -> Box<ConstMul> {
        let mut m = Box::new(ConstMul { tables: [[0; 256]; 4] });
        for (j, t) in m.tables.iter_mut().enumerate() {
            for v in 1..256usize {
                let low = v & v.wrapping_neg();
                t[v] = if v == low { gf2::mul((low as u32) << (8 * j), c) } else { t[v ^ low] ^ t[low] };
            }
        }
        m
    }

    fn mul(&self, a: u32) -> u32 {
        let t = &self.tables;
        t[0][(a & 0xff) as usize]
            ^ t[1][((a >> 8) & 0xff) as usize]
            ^ t[2][((a >> 16) & 0xff) as usize]
            ^ t[3][(a >> 24) as usize]
    }
}

/// For a CRC message of `n` bytes, calls `f` with multiplication by the
/// inverse of the factor that moves the identification (bytes 12..14) to
/// the CRC, and with the DF bit's term. They depend only on the length, and
/// a flow has few lengths: a small per-thread cache saves the ~2,000 field
/// operations per packet.
fn id_terms<R>(n: usize, f: impl FnOnce(&ConstMul, u32) -> R) -> R {
    use std::cell::RefCell;
    thread_local! {
        /// Multiplication by the inverse shift and the DF term, by length.
        static CACHE: RefCell<ByLength<(Box<ConstMul>, u32), 8>> = const { RefCell::new(ByLength::new()) };
    }
    CACHE.with(|c| {
        let mut c = c.borrow_mut();
        let (inv, df) = c.get(n, || {
            let inv = ConstMul::new(gf2::inverse(gf2::x_pow(8 * (n - 14) as u64 + 32)));
            let df = gf2::mul(0x40 << 24, gf2::x_pow(8 * (n - 15) as u64 + 32));
            (inv, df)
        });
        f(inv, *df)
    })
}

/// Arithmetic modulo the CRC-32 polynomial in the reflected representation
/// CRC registers use: bit 31 holds the coefficient of x^0, bit 0 that of x^31.
mod gf2 {
    const POLY: u32 = 0xedb8_8320;
    const ONE: u32 = 0x8000_0000;

    fn mul_x(a: u32) -> u32 {
        if a & 1 != 0 { (a >> 1) ^ POLY } else { a >> 1 }
    }

    /// `a * b mod P`.
    pub(super) fn mul(a: u32, mut b: u32) -> u32 {
        let mut p = 0;
        for i in 0..32 {
            if a & (ONE >> i) != 0 {
                p ^= b;
            }
            b = mul_x(b);
        }
        p
    }

    fn pow(mut base: u32, mut e: u64) -> u32 {
        let mut r = ONE;
        while e != 0 {
            if e & 1 != 0 {
                r = mul(r, base);
            }
            base = mul(base, base);
            e >>= 1;
        }
        r
    }

    /// `x^e mod P`.
    pub(super) fn x_pow(e: u64) -> u32 {
        pow(ONE >> 1, e)
    }

    /// `a^-1 mod P` for `a != 0`: P is irreducible, so the nonzero residues
    /// form a group of order 2^32 - 1 and `a^(2^32 - 2)` is the inverse.
    pub(super) fn inverse(a: u32) -> u32 {
        pow(a, (1u64 << 32) - 2)
    }

    #[cfg(test)]
    mod tests {
        use super::*;

        #[test]
        fn field_laws() {
            assert_eq!(mul(ONE, 0x1234_5678), 0x1234_5678);
            assert_eq!(x_pow(1), ONE >> 1);
            assert_eq!(x_pow(32), mul_x(ONE >> 31));
            for a in [ONE >> 1, 0xdead_beef, 0x0000_0001, x_pow(12_345)] {
                assert_eq!(mul(a, inverse(a)), ONE, "{a:#x}");
            }
            assert_eq!(mul(x_pow(1000), x_pow(234)), x_pow(1234));
        }

        /// The linear part of the CRC of a message is the message polynomial
        /// times x^32: check against the CRC on equal-length messages.
        #[test]
        fn matches_the_crc() {
            let a = [0u8; 10];
            let mut b = a;
            b[3] = 0x5a;
            let diff = roce_crc32::checksum(&a) ^ roce_crc32::checksum(&b);
            // byte 3 of 10: 6 bytes follow it.
            assert_eq!(diff, mul(0x5a << 24, x_pow(8 * 6 + 32)));
        }
    }
}

/// Checks that the last 4 bytes of `packet` (BTH through ICRC) are the ICRC
/// of the rest, with `hasher` holding the pseudo header.
pub fn verify(hasher: IcrcHasher, packet: &[u8]) -> Result<(), WireError> {
    let found = stored_icrc(packet)?;
    let computed = hasher.finish_over(&packet[..packet.len() - ICRC_LEN])?;
    if found == computed { Ok(()) } else { Err(WireError::BadIcrc { found, computed }) }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An RC SEND_ONLY of 64 bytes of 0x7b from the golden capture
    /// rc_pingpong_s64_n5 (frame 1): IP/UDP headers and RoCE packet.
    fn golden() -> (Vec<u8>, Vec<u8>, Vec<u8>) {
        let ip = hex("4500006ccd584000401100000a4d00030a4d0002");
        let udp = hex("c12112b700580000");
        let mut roce = hex("0400ffff0000001180e5847f");
        roce.extend(std::iter::repeat_n(0x7b, 64));
        (ip, udp, roce)
    }

    #[test]
    fn table_multiplication_matches_shift_and_add() {
        let mut x = 0x1234_5678u32;
        for _ in 0..200 {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            let c = x.rotate_left(7) ^ 0x9e37_79b9;
            let m = ConstMul::new(c);
            for a in [0, 1, 0x8000_0000, x, !x, x.swap_bytes()] {
                assert_eq!(m.mul(a), gf2::mul(a, c), "a={a:#x} c={c:#x}");
            }
        }
    }

    fn hex(s: &str) -> Vec<u8> {
        (0..s.len()).step_by(2).map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap()).collect()
    }

    #[test]
    fn lrh_standin_state() {
        assert_eq!(LRH_CRC, roce_crc32::checksum(&LRH_STANDIN));
    }

    #[test]
    fn context_matches_raw_headers() {
        let (ip, udp, roce) = golden();
        let ctx = IcrcContext {
            ip: IpContext::V4 {
                src: Ipv4Addr::new(10, 77, 0, 3),
                dst: Ipv4Addr::new(10, 77, 0, 2),
                identification: 0xcd58,
                dont_fragment: true,
            },
            src_port: 0xc121,
            dst_port: 4791,
        };
        let len = roce.len() + ICRC_LEN;
        let a = IcrcHasher::new(&ctx, len).finish_over(&roce).unwrap();
        let b = IcrcHasher::from_raw_headers(&ip, &udp).unwrap().finish_over(&roce).unwrap();
        assert_eq!(a, b);
        // Byte 4 of the BTH and TTL/TOS/checksum do not matter.
        let mut roce2 = roce.clone();
        roce2[4] = 0xc0;
        let mut ip2 = ip.clone();
        ip2[1] = 0x02;
        ip2[8] = 1;
        ip2[10] = 0x12;
        assert_eq!(IcrcHasher::from_raw_headers(&ip2, &udp).unwrap().finish_over(&roce2).unwrap(), a);
        // The identification does.
        ip2[5] ^= 1;
        assert_ne!(IcrcHasher::from_raw_headers(&ip2, &udp).unwrap().finish_over(&roce2).unwrap(), a);
    }

    #[test]
    fn policies() {
        let (_, _, roce) = golden();
        let ctx = IcrcContext {
            ip: IpContext::v4_socket(Ipv4Addr::new(127, 0, 0, 2), Ipv4Addr::new(127, 0, 0, 3)),
            src_port: 0xc000,
            dst_port: 4791,
        };
        let mut pkt = roce.clone();
        let icrc = IcrcHasher::new(&ctx, pkt.len() + 4).finish_over(&pkt).unwrap();
        pkt.extend_from_slice(&icrc.to_le_bytes());
        assert_eq!(IcrcPolicy::Full.check(&ctx, false, &pkt), Ok(IcrcCheck::Verified));
        assert_eq!(
            IcrcPolicy::Ipv6OrKnownId.check(&ctx, false, &pkt),
            Ok(IcrcCheck::IdSolved { identification: 0, dont_fragment: true })
        );
        assert_eq!(IcrcPolicy::Ipv6OrKnownId.check(&ctx, true, &pkt), Ok(IcrcCheck::Verified));
        let n = pkt.len();
        pkt[n - 1] ^= 0x80;
        assert!(matches!(IcrcPolicy::Full.check(&ctx, false, &pkt), Err(WireError::BadIcrc { .. })));
        assert!(matches!(IcrcPolicy::Ipv6OrKnownId.check(&ctx, false, &pkt), Err(WireError::BadIcrc { .. })));
        assert_eq!(IcrcPolicy::Off.check(&ctx, true, &pkt), Ok(IcrcCheck::Skipped));
        let v6 = IcrcContext { ip: IpContext::V6 { src: Ipv6Addr::LOCALHOST, dst: Ipv6Addr::LOCALHOST }, ..ctx };
        assert!(matches!(IcrcPolicy::Ipv6OrKnownId.check(&v6, false, &pkt), Err(WireError::BadIcrc { .. })));
        assert!(IcrcPolicy::Full.check(&ctx, false, &pkt[..3]).is_err());
    }
}

#[cfg(test)]
mod id_fixup_tests {
    use super::*;

    #[test]
    fn fixup_equals_recomputing_with_the_identification() {
        let (src, dst) = (Ipv4Addr::new(10, 0, 0, 1), Ipv4Addr::new(10, 0, 0, 2));
        for len in [16usize, 28, 60, 1000, 4124] {
            let mut body: Vec<u8> = (0..len - ICRC_LEN).map(|i| (i * 7 + 3) as u8).collect();
            body[0] = 0x0a; // an RC opcode in the BTH byte 0
            let icrc_for = |id: u16| {
                let ctx = IcrcContext {
                    ip: IpContext::V4 { src, dst, identification: id, dont_fragment: true },
                    src_port: 4791,
                    dst_port: 4791,
                };
                IcrcHasher::new(&ctx, len).finish_over(&body).unwrap()
            };
            let fix = Ipv4IdFixup::new(len);
            let base = icrc_for(0);
            for id in [1u16, 2, 63, 0x1234, 0xffff] {
                assert_eq!(base ^ fix.delta(id), icrc_for(id), "len {len} id {id}");
            }
            let mut pkt = body.clone();
            pkt.extend_from_slice(&base.to_le_bytes());
            fix.apply(&mut pkt, 5).unwrap();
            assert_eq!(stored_icrc(&pkt).unwrap(), icrc_for(5));
        }
    }

    #[test]
    fn fixups_answer_for_the_length_asked_while_lengths_alternate_and_get_evicted() {
        let mut f = Ipv4IdFixups::new();
        // FIRST/LAST and MIDDLE READ responses alternate; then more lengths
        // than slots push the oldest out.
        for len in [4116, 4112, 4116, 4112, 100, 200, 300, 400, 4116, 4112, 100] {
            let got = f.get(len);
            assert_eq!(got.roce_len(), len);
            assert_eq!(got, Ipv4IdFixup::new(len));
        }
        assert_eq!(f.0.slots.iter().flatten().count(), 4);
    }
}
