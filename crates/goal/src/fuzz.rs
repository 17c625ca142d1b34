//! Body of the cargo-fuzz target `goal_text` (`fuzz/fuzz_targets/goal_text.rs`), also run by
//! `tests/fuzz_corpus.rs` over the committed corpus and seeded mutants of it. Panics on a broken
//! property.

use crate::{check, parse_str, simulate, LogGpParams};

/// Arbitrary bytes as GOAL text: parsing never panics and every error has a line and a reason;
/// a trace that parses and checks (and is small) simulates without panicking or hanging, and
/// either completes every operation or names one that did not; on one CPU and NIC per rank the
/// critical path is at most the latest end time.
pub fn goal_text(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let trace = match parse_str(text) {
        Ok(t) => t,
        Err(e) => {
            assert!(!e.message.is_empty());
            assert!(e.line >= 1, "{e}");
            return;
        }
    };
    assert_eq!(trace.rank_start.len(), trace.num_ranks() as usize + 1);
    let checked = match check(&trace) {
        Ok(c) => c,
        Err(e) => {
            assert!(!e.message.is_empty() && e.line >= 1, "{e}");
            return;
        }
    };
    if trace.num_ranks() > 4096 || trace.num_ops() > 100_000 {
        return;
    }
    match simulate(&checked, &LogGpParams::default(), true) {
        Ok(r) => {
            assert_eq!(r.rank_end_ns.len(), trace.num_ranks() as usize);
            if trace.cpus() == 1 && trace.nics() == 1 {
                assert!(r.critical_path_ns <= r.max_end().1 || r.max_end().1 == 0, "{r:?}");
            }
        }
        Err(e) => assert!(!e.message.is_empty()),
    }
}
