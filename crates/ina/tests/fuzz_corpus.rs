//! The cargo-fuzz targets on this crate's codecs in the normal suite: `canary_header` (the
//! Canary header and protocol frame) and `pool_frame` (the pool protocols' frame). Each one's
//! committed corpus (fuzz/corpus/<target>/) and seeded mutants of it go through the target's
//! own body, `reducelab_ina::fuzz::<target>`. A short deterministic fuzzing run on every test
//! run; the coverage-guided one is `cargo +nightly fuzz run <target>` (fuzz/README.md).

#[path = "../../../fuzz/corpus_replay.rs"]
mod corpus_replay;

use corpus_replay::{corpus, Xs};
use reducelab_ina::fuzz::{canary_header, pool_frame};
use reducelab_ina::wire::WireHeader;
use std::panic::catch_unwind;

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
    let files = corpus("canary_header");
    assert!(files.len() >= 2, "{files:?}");
    for (name, data) in &files {
        // The seeds are valid headers: they reach the round-trip checks, not only the errors.
        assert!(WireHeader::decode(data).is_ok(), "{name}");
        canary_header(data);
    }
}

#[test]
fn the_pool_corpus_passes_the_fuzz_target() {
    let files = corpus("pool_frame");
    assert!(files.len() >= 5, "{files:?}");
    let mut values = vec![0i32; 64];
    for (name, data) in &files {
        // The seeds are valid frames (every kind of destination, the flags): they reach the
        // round trip, not only the errors.
        assert!(reducelab_ina::pool_wire::parse_into(data, &mut values).is_ok(), "{name}");
        pool_frame(data);
    }
}

/// `MUTANTS` seeded mutants of `target`'s corpus through `body`; at least one in `min_ok` of
/// them must pass `ok` (decode), so that edits leave the round trip exercised.
fn mutants_pass(target: &str, body: fn(&[u8]), mut ok: impl FnMut(&[u8]) -> bool, min_ok: usize) {
    const MUTANTS: usize = 100_000;
    let seeds: Vec<Vec<u8>> = corpus(target).into_iter().map(|(_, d)| d).collect();
    let mut rng = Xs(0xCA4A_2F01);
    let (mut decoded, mut failures) = (0usize, Vec::new());
    for k in 0..MUTANTS {
        let data = mutant(&mut rng, &seeds[k % seeds.len()]);
        decoded += ok(&data) as usize;
        if catch_unwind(|| body(&data)).is_err() && failures.len() < 5 {
            failures.push(format!("mutant {k}: {data:02x?}"));
        }
    }
    assert!(failures.is_empty(), "{target}: the fuzz target failed on\n{}", failures.join("\n"));
    assert!(decoded > MUTANTS / min_ok, "{target}: only {decoded} of {MUTANTS} mutants decode");
}

#[test]
fn seeded_mutants_of_the_corpus_pass_the_fuzz_target() {
    mutants_pass("canary_header", canary_header, |d| WireHeader::decode(d).is_ok(), 20);
}

#[test]
fn seeded_mutants_of_the_pool_corpus_pass_the_fuzz_target() {
    let mut values = vec![0i32; u16::MAX as usize];
    let ok = move |d: &[u8]| reducelab_ina::pool_wire::parse_into(d, &mut values).is_ok();
    mutants_pass("pool_frame", pool_frame, ok, 50);
}
