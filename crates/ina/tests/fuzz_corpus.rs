//! The cargo-fuzz target `canary_header` in the normal suite: its committed corpus
//! (fuzz/corpus/canary_header/) and seeded mutants of it go through the target's own body,
//! `reducelab_ina::fuzz::canary_header`. A short deterministic fuzzing run on every test run;
//! the coverage-guided one is `cargo +nightly fuzz run canary_header` (fuzz/README.md).

use reducelab_ina::fuzz::canary_header;
use reducelab_ina::wire::WireHeader;
use std::panic::catch_unwind;
use std::path::Path;

/// The corpus files, by name.
fn corpus() -> Vec<(String, Vec<u8>)> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/corpus/canary_header");
    let mut files: Vec<(String, Vec<u8>)> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| {
            let p = e.unwrap().path();
            (p.file_name().unwrap().to_string_lossy().into_owned(), std::fs::read(&p).unwrap())
        })
        .collect();
    files.sort();
    files
}

/// xorshift64*: the mutants' seeded stream (this crate has no RNG of its own).
struct Xs(u64);

impl Xs {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D) % n.max(1)
    }
}

/// One to four byte-level edits of `data`: bit flips, boundary bytes, random bytes,
/// insertions, deletions, truncation, appended bytes.
fn mutant(rng: &mut Xs, data: &[u8]) -> Vec<u8> {
    let mut v = data.to_vec();
    for _ in 0..1 + rng.below(4) {
        let i = rng.below(v.len() as u64) as usize;
        match rng.below(7) {
            0 if !v.is_empty() => v[i] ^= 1 << rng.below(8),
            1 if !v.is_empty() => v[i] = [0x00, 0x01, 0x7f, 0x80, 0xfe, 0xff][rng.below(6) as usize],
            2 if !v.is_empty() => v[i] = rng.below(256) as u8,
            3 => v.insert(i.min(v.len()), rng.below(256) as u8),
            4 if !v.is_empty() => {
                v.remove(i);
            }
            5 => v.truncate(rng.below(v.len() as u64 + 1) as usize),
            _ => v.extend((0..rng.below(48)).map(|_| rng.below(256) as u8)),
        }
    }
    v
}

#[test]
fn the_corpus_passes_the_fuzz_target() {
    let files = corpus();
    assert!(files.len() >= 2, "{files:?}");
    for (name, data) in &files {
        // The seeds are valid headers: they reach the round-trip checks, not only the errors.
        assert!(WireHeader::decode(data).is_ok(), "{name}");
        canary_header(data);
    }
}

#[test]
fn seeded_mutants_of_the_corpus_pass_the_fuzz_target() {
    const MUTANTS: usize = 100_000;
    let seeds: Vec<Vec<u8>> = corpus().into_iter().map(|(_, d)| d).collect();
    let mut rng = Xs(0xCA4A_2F01);
    let (mut decoded, mut failures) = (0usize, Vec::new());
    for k in 0..MUTANTS {
        let data = mutant(&mut rng, &seeds[k % seeds.len()]);
        decoded += WireHeader::decode(&data).is_ok() as usize;
        if catch_unwind(|| canary_header(&data)).is_err() && failures.len() < 5 {
            failures.push(format!("mutant {k}: {data:02x?}"));
        }
    }
    assert!(failures.is_empty(), "the fuzz target failed on\n{}", failures.join("\n"));
    // Edits must leave enough headers intact that the round trip is exercised.
    assert!(decoded > MUTANTS / 20, "only {decoded} of {MUTANTS} mutants decode");
}
