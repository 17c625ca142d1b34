//! Arbitrary bytes as one rank's Chakra execution trace into the reader, the writer (round
//! trip), the lowering into GOAL (as one rank and as two) and, for small traces, the LogGP
//! simulation: the body is `reducelab_chakra::fuzz::chakra_et`, which the normal test suite
//! also runs over this target's corpus (crates/chakra/tests/fuzz_corpus.rs).
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| reducelab_chakra::fuzz::chakra_et(data));
