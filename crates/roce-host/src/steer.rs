//! The steering program: classic BPF that the kernel runs on every
//! datagram to the device's address to pick the member socket
//! (`SO_ATTACH_REUSEPORT_CBPF`; offsets are into the UDP payload).
//!
//! ```text
//!   ld  [0]                       word 0 of the payload
//!   jeq #ENVELOPE_MAGIC, 0, 2
//!   ld  [4]; ret A                an envelope names its seat in word 1
//!   ld  [4] & 0xffffff >> 12      BTH dest QPN (bytes 5..7) -> block
//!   for each run lo..=hi of blocks with one seat:
//!     jgt #hi, next
//!     jge #lo -> ret #seat
//!   ret #NOWHERE                  the kernel falls back to its flow hash
//! ```
//!
//! A datagram shorter than a load ends the program with 0 (seat 0), as
//! the kernel does; seat 0's member drops it as malformed.

use roce_udp::SockFilter;

use crate::envelope::MAGIC;

const LD_W_ABS: u16 = 0x20;
const ALU_AND_K: u16 = 0x54;
const ALU_RSH_K: u16 = 0x74;
const JMP_JEQ_K: u16 = 0x15;
const JMP_JGT_K: u16 = 0x25;
const JMP_JGE_K: u16 = 0x35;
const RET_K: u16 = 0x06;
const RET_A: u16 = 0x16;

/// What the program returns for a QPN nobody is seated for: past any
/// group's last index, so the kernel hashes (and the member that gets it
/// forwards or drops it).
pub const NOWHERE: u32 = u32::MAX;

/// Most instructions the kernel takes (`BPF_MAXINSNS`).
pub const MAX_INSNS: usize = 4096;

fn insn(code: u16, jt: u8, jf: u8, k: u32) -> SockFilter {
    SockFilter { code, jt, jf, k }
}

/// A run of blocks `lo..=hi` whose QPNs go to `seat`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Run {
    /// First block.
    pub lo: u32,
    /// Last block.
    pub hi: u32,
    /// The group index their packets go to.
    pub seat: u32,
}

/// Merges `(block, seat)` pairs into sorted runs of consecutive blocks.
pub fn runs(mut blocks: Vec<(u32, u32)>) -> Vec<Run> {
    blocks.sort_unstable();
    let mut out: Vec<Run> = Vec::new();
    for (b, seat) in blocks {
        match out.last_mut() {
            Some(r) if r.seat == seat && r.hi + 1 == b => r.hi = b,
            _ => out.push(Run { lo: b, hi: b, seat }),
        }
    }
    out
}

/// The program for `runs` (sorted, as [`runs`] makes them). `None` when
/// it would be longer than the kernel takes.
pub fn program(runs: &[Run]) -> Option<Vec<SockFilter>> {
    let mut p = vec![
        insn(LD_W_ABS, 0, 0, 0),
        // An envelope: its word 1 is the seat. Anything else skips that.
        insn(JMP_JEQ_K, 0, 2, MAGIC),
        insn(LD_W_ABS, 0, 0, 4),
        insn(RET_A, 0, 0, 0),
        insn(LD_W_ABS, 0, 0, 4),
        insn(ALU_AND_K, 0, 0, 0x00ff_ffff),
        insn(ALU_RSH_K, 0, 0, crate::layout::BLOCK_BITS),
    ];
    for r in runs {
        // Above this run: try the next one (2 ahead); within it: return.
        p.push(insn(JMP_JGT_K, 2, 0, r.hi));
        p.push(insn(JMP_JGE_K, 0, 1, r.lo));
        p.push(insn(RET_K, 0, 0, r.seat));
    }
    p.push(insn(RET_K, 0, 0, NOWHERE));
    (p.len() <= MAX_INSNS).then_some(p)
}

/// Runs `prog` on `payload` as the kernel would (the subset [`program`]
/// emits): the seat it picks.
pub fn run(prog: &[SockFilter], payload: &[u8]) -> u32 {
    let mut a: u32 = 0;
    let mut pc = 0usize;
    while let Some(i) = prog.get(pc) {
        pc += 1;
        match i.code {
            LD_W_ABS => match payload.get(i.k as usize..i.k as usize + 4) {
                Some(w) => a = u32::from_be_bytes(w.try_into().expect("4 bytes")),
                None => return 0,
            },
            ALU_AND_K => a &= i.k,
            ALU_RSH_K => a >>= i.k,
            JMP_JEQ_K | JMP_JGT_K | JMP_JGE_K => {
                let t = match i.code {
                    JMP_JEQ_K => a == i.k,
                    JMP_JGT_K => a > i.k,
                    _ => a >= i.k,
                };
                pc += usize::from(if t { i.jt } else { i.jf });
            }
            RET_K => return i.k,
            RET_A => return a,
            _ => return 0,
        }
    }
    0
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bth_to(qpn: u32) -> Vec<u8> {
        let mut p = vec![0x04, 0x40, 0xff, 0xff, 0x80, 0, 0, 0, 0, 0, 0, 1];
        p[5..8].copy_from_slice(&qpn.to_be_bytes()[1..]);
        p
    }

    #[test]
    fn runs_merge_consecutive_blocks_of_one_seat() {
        let r = runs(vec![(5, 1), (3, 0), (4, 0), (7, 1), (6, 1), (9, 0)]);
        assert_eq!(r, [Run { lo: 3, hi: 4, seat: 0 }, Run { lo: 5, hi: 7, seat: 1 }, Run { lo: 9, hi: 9, seat: 0 }]);
    }

    #[test]
    fn the_program_steers_by_destination_qp_block_and_envelopes_by_seat() {
        let p = program(&runs(vec![(1, 2), (2, 2), (5, 0), (9, 1)])).unwrap();
        for (qpn, seat) in [
            (0x1000, 2),
            (0x1fff, 2),
            (0x2abc, 2),
            (0x3000, NOWHERE),
            (0x5123, 0),
            (0x9000, 1),
            (0x9fff, 1),
            (0xa000, NOWHERE),
            (0x11, NOWHERE),
            (0xff_ffff, NOWHERE),
        ] {
            assert_eq!(run(&p, &bth_to(qpn)), seat, "QPN {qpn:#x}");
        }
        // BTH byte 4 (FECN/BECN, reserved) does not change the QPN.
        let mut b = bth_to(0x5123);
        b[4] = 0xff;
        assert_eq!(run(&p, &b), 0);
        let mut env = MAGIC.to_be_bytes().to_vec();
        env.extend_from_slice(&7u32.to_be_bytes());
        assert_eq!(run(&p, &env), 7);
        // Runts go to seat 0, as in the kernel.
        assert_eq!(run(&p, &[1, 2, 3]), 0);
        assert_eq!(run(&p, &MAGIC.to_be_bytes()), 0);
    }

    #[test]
    fn every_block_of_a_full_table_is_reachable() {
        // Alternating seats: no two blocks merge, the longest program that fits.
        let blocks: Vec<(u32, u32)> = (1..=1362).map(|b| (b, b % 3)).collect();
        let p = program(&runs(blocks.clone())).unwrap();
        assert_eq!(p.len(), 4094);
        for (b, seat) in blocks {
            assert_eq!(run(&p, &bth_to(b << 12 | 0x77)), seat);
        }
        let too_many: Vec<(u32, u32)> = (1..=1400).map(|b| (b, b % 2)).collect();
        assert!(program(&runs(too_many)).is_none());
    }
}
