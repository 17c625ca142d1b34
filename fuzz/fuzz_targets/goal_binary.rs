//! Arbitrary bytes as LogGOPSim's binary schedule form into the reader, the writer, the checker and
//! (small traces) the LogGP simulation: the body is `reducelab_goal::fuzz::goal_binary`, which the
//! normal test suite also runs over this target's corpus (crates/goal/tests/fuzz_corpus.rs).
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| reducelab_goal::fuzz::goal_binary(data));
