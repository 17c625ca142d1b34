//! The cargo-fuzz target on the MSCCL XML importer (`msccl_import`) in the normal suite: its
//! committed corpus (fuzz/corpus/msccl_import/) and seeded mutants of it go through the
//! target's own body, `reducelab_sched::fuzz::msccl_xml`. The coverage-guided run is `cargo
//! +nightly fuzz run msccl_import` (fuzz/README.md).

#[path = "../../../fuzz/corpus_replay.rs"]
mod corpus_replay;

use corpus_replay::{corpus, Xs};
use reducelab_sched::fuzz::msccl_xml;
use std::panic::catch_unwind;

/// Tokens worth splicing into MSCCL XML: step types, buffers, numbers, markup.
const TOKENS: &[&str] = &[
    "s",
    "r",
    "rrc",
    "rcs",
    "rrs",
    "rrcs",
    "re",
    "cpy",
    "nop",
    "i",
    "o",
    "-1",
    "0",
    "1",
    "2",
    "3",
    "99",
    "\"",
    "<",
    "/>",
    "</tb>",
    "<step",
    "hasdep=\"1\"",
    "&amp;",
    "\n",
];

/// One to four edits: byte flips, deletions, truncation, and tokens replacing an attribute
/// value's first character or inserted anywhere (so that many mutants still parse and reach
/// the replay and the checker).
fn mutant(rng: &mut Xs, data: &[u8]) -> Vec<u8> {
    let mut v = data.to_vec();
    for _ in 0..1 + rng.below(4) {
        let i = rng.below(v.len() as u64) as usize;
        let tok = TOKENS[rng.below(TOKENS.len() as u64) as usize].as_bytes();
        match rng.below(6) {
            0 if !v.is_empty() => v[i] ^= 1 << rng.below(8),
            1 if !v.is_empty() => {
                v.remove(i);
            }
            2 => v.truncate(rng.below(v.len() as u64 + 1) as usize),
            3 => {
                // Replace the value after the i-th '="'.
                let quotes: Vec<usize> =
                    v.windows(2).enumerate().filter(|(_, w)| w == b"=\"").map(|(k, _)| k + 2).collect();
                if let Some(&at) = quotes.get(rng.below(quotes.len() as u64) as usize) {
                    let end = v[at..].iter().position(|&c| c == b'"').map_or(v.len(), |e| at + e);
                    v.splice(at..end, tok.iter().copied());
                }
            }
            _ => {
                let at = i.min(v.len());
                v.splice(at..at, tok.iter().copied());
            }
        }
    }
    v
}

#[test]
fn the_corpus_passes_the_fuzz_target() {
    let files = corpus("msccl_import");
    assert!(files.len() >= 4, "{:?}", files.iter().map(|f| &f.0).collect::<Vec<_>>());
    for (name, data) in &files {
        // The seeds are accepted programs: they reach the replay, the levels and the checker.
        let text = std::str::from_utf8(data).unwrap();
        reducelab_sched::from_msccl_xml(text).unwrap_or_else(|e| panic!("{name}: {e}"));
        msccl_xml(data);
    }
}

#[test]
fn seeded_mutants_of_the_corpus_pass_the_fuzz_target() {
    const MUTANTS: usize = 20_000;
    let seeds: Vec<Vec<u8>> = corpus("msccl_import").into_iter().map(|(_, d)| d).collect();
    let mut rng = Xs(0x3CC1_1B0F);
    let (mut accepted, mut parsed, mut failures) = (0usize, 0usize, Vec::new());
    for k in 0..MUTANTS {
        let data = mutant(&mut rng, &seeds[k % seeds.len()]);
        if let Ok(text) = std::str::from_utf8(&data) {
            match reducelab_sched::from_msccl_xml(text) {
                Ok(_) => accepted += 1,
                // Past the reader: an error about the program, not the markup.
                Err(e) if e.contains("<step") || e.contains("the program") => parsed += 1,
                Err(_) => {}
            }
        }
        if catch_unwind(|| msccl_xml(&data)).is_err() && failures.len() < 5 {
            failures.push(format!("mutant {k}:\n{}", String::from_utf8_lossy(&data)));
        }
    }
    assert!(failures.is_empty(), "the fuzz target failed on\n{}", failures.join("\n"));
    eprintln!("{accepted} of {MUTANTS} mutants accepted, {parsed} refused past the reader");
    assert!(accepted > MUTANTS / 50 && parsed > MUTANTS / 10, "{accepted} accepted, {parsed} refused past the reader");
}
