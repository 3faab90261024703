//! The protocol engine under a hostile peer: the input is a script of
//! forged and replayed packets, the devices' own packets (dropped,
//! duplicated, reordered), posted WRs, CQ polls and time steps against two
//! devices with one RC QP each in RTS. The harness and its oracle live in
//! `roce_proto::testing::engine_harness` (the `testing` feature), shared
//! with the `engine_fuzz` test that `cargo test` runs.

#![no_main]

use libfuzzer_sys::fuzz_target;

use roce_proto::testing::engine_harness;

fuzz_target!(|data: &[u8]| {
    engine_harness::run(data);
});
