//! Arbitrary UTF-8 into the scenario parser and validator: the body is
//! `reducelab_sim::fuzz::scenario_parser`, which the normal test suite also runs over this
//! target's corpus (crates/sim/tests/fuzz_parser.rs).
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| reducelab_sim::fuzz::scenario_parser(data));
