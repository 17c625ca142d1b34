//! The cargo-fuzz target `chakra_et` in the normal suite: its committed corpus
//! (fuzz/corpus/chakra_et/) and seeded mutants of it go through the target's own body,
//! `reducelab_chakra::fuzz::chakra_et`. A short deterministic fuzzing run on every test run; the
//! coverage-guided one is `cargo +nightly fuzz run chakra_et` (fuzz/README.md).

#[path = "../../../fuzz/corpus_replay.rs"]
mod corpus_replay;

use corpus_replay::{corpus, Xs};
use reducelab_chakra::fuzz::chakra_et;
use reducelab_chakra::read_et;
use std::panic::catch_unwind;

#[test]
fn the_corpus_passes_the_fuzz_target() {
    let files = corpus("chakra_et");
    assert!(files.len() >= 4, "{files:?}");
    for (name, data) in &files {
        read_et(data).unwrap_or_else(|e| panic!("{name}: {e:?}"));
        chakra_et(data);
    }
}

/// One to four edits of `data`: bit flips, protobuf bytes (keys, varint continuations, lengths)
/// in place of bytes or inserted, deletions, truncation, a duplicated span.
fn mutant(rng: &mut Xs, data: &[u8]) -> Vec<u8> {
    const BYTES: &[u8] =
        &[0x00, 0x01, 0x02, 0x07, 0x08, 0x0A, 0x12, 0x18, 0x1B, 0x22, 0x28, 0x2A, 0x38, 0x48, 0x52, 0x7F, 0x80, 0xFF];
    let mut v = data.to_vec();
    for _ in 0..1 + rng.below(4) {
        let i = rng.below(v.len() as u64 + 1) as usize;
        match rng.below(6) {
            0 if i < v.len() => v[i] ^= 1 << rng.below(8),
            1 if i < v.len() => v[i] = BYTES[rng.below(BYTES.len() as u64) as usize],
            2 => v.insert(i, BYTES[rng.below(BYTES.len() as u64) as usize]),
            3 if i < v.len() => {
                let end = (i + 1 + rng.below(8) as usize).min(v.len());
                v.drain(i..end);
            }
            4 if i < v.len() => {
                let end = (i + 1 + rng.below(24) as usize).min(v.len());
                let span = v[i..end].to_vec();
                v.splice(i..i, span);
            }
            _ => v.truncate(i),
        }
    }
    v
}

#[test]
fn seeded_mutants_of_the_corpus_pass_the_fuzz_target() {
    const MUTANTS: usize = 30_000;
    let seeds: Vec<Vec<u8>> = corpus("chakra_et").into_iter().map(|(_, d)| d).collect();
    let mut rng = Xs(0xC4A7_F022);
    let (mut read, mut failures) = (0usize, Vec::new());
    for k in 0..MUTANTS {
        let data = mutant(&mut rng, &seeds[k % seeds.len()]);
        read += read_et(&data).is_ok() as usize;
        if catch_unwind(|| chakra_et(&data)).is_err() && failures.len() < 5 {
            failures.push(format!("mutant {k}: {data:?}"));
        }
    }
    assert!(failures.is_empty(), "chakra_et failed on\n{}", failures.join("\n"));
    // Edits inside a field keep the framing (about 1 in 13 here), so lowering and the LogGP run
    // are exercised too.
    assert!(read > MUTANTS / 20, "only {read} of {MUTANTS} mutants read");
}
