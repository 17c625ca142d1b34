//! Bodies of the cargo-fuzz targets `goal_text` and `goal_binary` (`fuzz/fuzz_targets/`), also
//! run by `tests/fuzz_corpus.rs` over the committed corpora and seeded mutants of them. Panics on a
//! broken property.

use crate::{check, parse_binary, parse_str, simulate, write_binary, LogGpParams};

/// Arbitrary bytes as a binary schedule: reading never panics, every error says why (line 0: the
/// binary form has no lines); a trace that reads writes back to bytes that read to the same
/// trace, and (small) checks and simulates like a text trace.
pub fn goal_binary(data: &[u8]) {
    let trace = match parse_binary(data) {
        Ok(t) => t,
        Err(e) => {
            assert!(!e.message.is_empty() && e.line == 0, "{e}");
            return;
        }
    };
    let again = parse_binary(&write_binary(&trace)).expect("what was read writes back readably");
    assert_eq!(again, trace);
    if trace.num_ranks() > 4096 || trace.num_ops() > 100_000 {
        return;
    }
    if let Ok(checked) = check(&trace) {
        if let Err(e) = simulate(&checked, &LogGpParams::default(), false) {
            assert!(!e.message.is_empty());
        }
    }
}

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
