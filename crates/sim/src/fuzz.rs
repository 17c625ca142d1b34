//! Body of the cargo-fuzz target on the scenario parser (`fuzz/fuzz_targets/scenario_parser.rs`).
//! The target calls it, and `tests/fuzz_parser.rs` replays the committed corpus and seeded
//! mutants of it through it in the normal test suite. It panics on a broken property.

/// Arbitrary UTF-8 into the scenario parser and validator: it must never panic, and every error
/// must name a cause. Parsing (and the topology build it implies) is the target; nothing is
/// simulated.
pub fn scenario_parser(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else { return };
    match crate::load_scenario_str(text, None) {
        Ok(sc) => {
            // A valid scenario has hosts and traffic; running it is out of scope here.
            assert!(sc.topology.num_hosts() >= 1);
            assert!(!sc.traffic.is_empty());
        }
        Err(e) => {
            assert!(!e.reason.trim().is_empty(), "empty reason for field {:?}", e.field);
        }
    }
}
