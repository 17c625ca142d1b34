//! Arbitrary bytes into the pool protocols' frame decoder (SwitchML, ATP, DSA): the body is
//! `reducelab_ina::fuzz::pool_frame`, which the normal test suite also runs over this target's
//! corpus (crates/ina/tests/fuzz_corpus.rs).
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| reducelab_ina::fuzz::pool_frame(data));
