//! The engine fuzzer's harness (`roce_proto::testing::engine_harness`, also
//! run by the cargo-fuzz target in `crates/roce-proto/fuzz`) over a fixed
//! pseudo-random stream of scripts, so `cargo test` runs a short version of
//! the fuzzer. `SOFTROCE_FUZZ_INPUTS=N` runs N scripts instead of the
//! default; `SOFTROCE_FUZZ_INPUT=FILE cargo test -p roce-proto --test
//! engine_fuzz replay -- --nocapture` runs one input file (a libFuzzer
//! crash artifact or corpus entry) without libFuzzer;
//! `SOFTROCE_FUZZ_SEEDS=DIR` writes the weighted scripts as plain ones
//! there, to seed the fuzzer's corpus; `SOFTROCE_FUZZ_ONLY=I` runs only
//! script I of the stream (with `SOFTROCE_FUZZ_TRACE=1`: step by step).

use roce_proto::testing::engine_harness;

/// Scripts `cargo test` runs.
const INPUTS: usize = 3000;

/// xorshift64*: the same stream on every machine.
fn next(state: &mut u64) -> u64 {
    *state ^= *state >> 12;
    *state ^= *state << 25;
    *state ^= *state >> 27;
    state.wrapping_mul(0x2545_f491_4f6c_dd1d)
}

/// Kinds of step (`Harness::step`, modulo 32) for the weighted scripts:
/// post send, post receive, exchange, advance time, poll, pump, deliver
/// one, inject, replay, reread.
const WEIGHTED: [u8; 24] =
    [23, 24, 25, 23, 24, 26, 27, 26, 31, 31, 31, 31, 28, 29, 30, 15, 20, 20, 0, 5, 10, 12, 13, 19];

#[test]
fn pseudo_random_scripts() {
    let n = std::env::var("SOFTROCE_FUZZ_INPUTS").ok().and_then(|v| v.parse().ok()).unwrap_or(INPUTS);
    let mut state = 0x005e_ed0f_f022_u64;
    let mut total = engine_harness::Stats::default();
    let seeds = std::env::var_os("SOFTROCE_FUZZ_SEEDS").map(std::path::PathBuf::from);
    let only: Option<usize> = std::env::var("SOFTROCE_FUZZ_ONLY").ok().and_then(|v| v.parse().ok());
    for i in 0..n {
        let len = 16 + (next(&mut state) % 2048) as usize;
        let data: Vec<u8> = (0..len).map(|_| (next(&mut state) >> 56) as u8).collect();
        // Half the scripts are random bytes as they are; in the other half
        // the kinds of step are drawn so that posted WRs, exchanges and time
        // steps dominate (random bytes mostly forge packets, which soon end
        // the QPs), so the stream also reaches deep traffic.
        let mut ops = state ^ 0x9e37_79b9;
        let mut weighted = move || WEIGHTED[(next(&mut ops) % WEIGHTED.len() as u64) as usize];
        if only.is_some_and(|o| o != i) {
            continue;
        }
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            if i % 2 == 0 {
                engine_harness::run(&data)
            } else {
                let mut script = Vec::new();
                let stats = engine_harness::run_with(&data, Some(&mut weighted), Some(&mut script));
                if let Some(dir) = &seeds {
                    std::fs::write(dir.join(format!("weighted-{i}")), &script).expect("write a seed");
                }
                stats
            }
        }));
        if let Ok(s) = r {
            total.steps += s.steps;
            total.rts_steps += s.rts_steps;
            total.delivered += s.delivered;
            total.completed += s.completed;
        } else if i % 2 == 0 {
            let path = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("engine-fuzz-script-{i}"));
            std::fs::write(&path, &data).expect("write the failing script");
            panic!(
                "script {i} failed; replay it with SOFTROCE_FUZZ_INPUT={} (or SOFTROCE_FUZZ_ONLY={i})",
                path.display()
            );
        } else {
            panic!("weighted script {i} failed; rerun it alone with SOFTROCE_FUZZ_ONLY={i}");
        }
    }
    println!("{n} scripts: {total:?}");
}

#[test]
fn replay() {
    let Ok(path) = std::env::var("SOFTROCE_FUZZ_INPUT") else { return };
    let data = std::fs::read(&path).expect("SOFTROCE_FUZZ_INPUT names a readable file");
    println!("{:?}", engine_harness::run(&data));
}
