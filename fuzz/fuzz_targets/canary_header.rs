//! Arbitrary bytes into the Canary packet-header decoder and the whole protocol frame: the body
//! is `reducelab_ina::fuzz::canary_header`, which the normal test suite also runs over this
//! target's corpus (crates/ina/tests/fuzz_corpus.rs).
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| reducelab_ina::fuzz::canary_header(data));
