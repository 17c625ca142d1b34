//! Arbitrary bytes into the MSCCL XML importer (reader, replay, levels, checker): the body is
//! `reducelab_sched::fuzz::msccl_xml`, which the normal test suite also runs over this target's
//! corpus (crates/sched/tests/fuzz_corpus.rs).
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| reducelab_sched::fuzz::msccl_xml(data));
