//! The cargo-fuzz target `goal_text` in the normal suite: its committed corpus
//! (fuzz/corpus/goal_text/) and seeded mutants of it go through the target's own body,
//! `reducelab_goal::fuzz::goal_text`. A short deterministic fuzzing run on every test run; the
//! coverage-guided one is `cargo +nightly fuzz run goal_text` (fuzz/README.md).

#[path = "../../../fuzz/corpus_replay.rs"]
mod corpus_replay;

use corpus_replay::{corpus, Xs};
use reducelab_goal::fuzz::goal_text;
use reducelab_goal::{check, parse_str};
use std::panic::catch_unwind;

/// Inputs that once broke a property, kept so they stay fixed.
const REGRESSIONS: &[&str] = &[
    // A table-full label lookup must not spin: many labels in one rank.
    "num_ranks 1\nrank 0 {\na: calc 1\nb: calc 1\nc: calc 1\nd: calc 1\ne: calc 1\nf requires a\nf: calc 1\n}\n",
    "num_ranks 16777216\nrank 16777215 {\n}\n",
    "num_ranks 2\nrank 0 {\nsend 18446744073709551615b to 1\n}\nrank 1 {\nrecv 1b from 0\n}\n",
    "num_ranks 1\nrank 0 {\ncalc 18446744073709551615\n}\n",
];

#[test]
fn the_corpus_passes_the_fuzz_target() {
    let files = corpus("goal_text");
    assert!(files.len() >= 8, "{files:?}");
    let mut checked = 0;
    for (name, data) in &files {
        let text = std::str::from_utf8(data).unwrap();
        let t = parse_str(text).unwrap_or_else(|e| panic!("{name}: {e}"));
        checked += check(&t).is_ok() as usize;
        goal_text(data);
    }
    // The seeds reach the simulation, not only the errors.
    assert!(checked >= 6, "{checked}");
    for r in REGRESSIONS {
        goal_text(r.as_bytes());
    }
}

/// One to four edits of `data`: GOAL tokens and digits in place of bytes, bit flips, insertions,
/// deletions, truncation, duplicated lines.
fn mutant(rng: &mut Xs, data: &[u8]) -> Vec<u8> {
    const TOKENS: &[&str] = &[
        "send",
        "recv",
        "calc",
        " requires ",
        " irequires ",
        "rank",
        "{",
        "}",
        "\n",
        ":",
        "-1",
        "tag",
        "cpu",
        "nic",
        "b",
        "99999999999999999999",
        "0",
        "7",
        "/*",
        "*/",
        "//",
    ];
    let mut v = data.to_vec();
    for _ in 0..1 + rng.below(4) {
        let i = rng.below(v.len() as u64 + 1) as usize;
        match rng.below(6) {
            0 if i < v.len() => v[i] ^= 1 << rng.below(7),
            1 if i < v.len() => v[i] = b"0123456789"[rng.below(10) as usize],
            2 => {
                let t = TOKENS[rng.below(TOKENS.len() as u64) as usize].as_bytes();
                v.splice(i..i, t.iter().copied());
            }
            3 if i < v.len() => {
                let end = (i + 1 + rng.below(12) as usize).min(v.len());
                v.drain(i..end);
            }
            4 => {
                // Duplicate a line.
                let start = v[..i].iter().rposition(|&b| b == b'\n').map_or(0, |p| p + 1);
                let end = v[i..].iter().position(|&b| b == b'\n').map_or(v.len(), |p| i + p + 1);
                let line = v[start..end].to_vec();
                v.splice(start..start, line);
            }
            _ => v.truncate(i),
        }
    }
    v
}

#[test]
fn seeded_mutants_of_the_corpus_pass_the_fuzz_target() {
    const MUTANTS: usize = 100_000;
    let seeds: Vec<Vec<u8>> = corpus("goal_text").into_iter().map(|(_, d)| d).collect();
    let mut rng = Xs(0x60A1_7E47);
    let (mut parsed, mut failures) = (0usize, Vec::new());
    for k in 0..MUTANTS {
        let data = mutant(&mut rng, &seeds[k % seeds.len()]);
        parsed += std::str::from_utf8(&data).ok().is_some_and(|s| parse_str(s).is_ok()) as usize;
        if catch_unwind(|| goal_text(&data)).is_err() && failures.len() < 5 {
            failures.push(format!("mutant {k}: {:?}", String::from_utf8_lossy(&data)));
        }
    }
    assert!(failures.is_empty(), "goal_text failed on\n{}", failures.join("\n"));
    // Edits leave many traces valid, so the checker and the simulation are exercised too.
    assert!(parsed > MUTANTS / 30, "only {parsed} of {MUTANTS} mutants parse");
}

/// The `goal_binary` target's corpus (fuzz/corpus/goal_binary/: the text seeds in the binary form)
/// and seeded byte mutants of it: bit flips, small and extreme integers written over 1, 4 or 8
/// bytes (counts, offsets, peers), truncation, deletions.
#[test]
fn the_binary_corpus_and_its_mutants_pass_the_fuzz_target() {
    use reducelab_goal::fuzz::goal_binary;
    use reducelab_goal::parse_binary;
    let seeds: Vec<Vec<u8>> = corpus("goal_binary").into_iter().map(|(_, d)| d).collect();
    assert!(seeds.len() >= 8);
    for s in &seeds {
        parse_binary(s).unwrap();
        goal_binary(s);
    }
    const MUTANTS: usize = 50_000;
    let mut rng = Xs(0xB1_4A27);
    let (mut read, mut failures) = (0usize, Vec::new());
    for k in 0..MUTANTS {
        let mut v = seeds[k % seeds.len()].clone();
        for _ in 0..1 + rng.below(3) {
            let i = rng.below(v.len() as u64) as usize;
            match rng.below(5) {
                0 => v[i] ^= 1 << rng.below(8),
                1 | 2 => {
                    let w = [1usize, 4, 8][rng.below(3) as usize];
                    let x: u64 = [0, 1, 2, 3, 38, 999, u32::MAX as u64, u64::MAX][rng.below(8) as usize];
                    let end = (i + w).min(v.len());
                    v[i..end].copy_from_slice(&x.to_le_bytes()[..end - i]);
                }
                3 => v.truncate(i),
                _ => {
                    let end = (i + 1 + rng.below(8) as usize).min(v.len());
                    v.drain(i..end);
                }
            }
            if v.is_empty() {
                break;
            }
        }
        read += parse_binary(&v).is_ok() as usize;
        if catch_unwind(|| goal_binary(&v)).is_err() && failures.len() < 5 {
            failures.push(format!("mutant {k}: {v:?}"));
        }
    }
    assert!(failures.is_empty(), "goal_binary failed on\n{}", failures.join("\n"));
    // Overwrites of sizes, tags and CPUs leave many files readable: the checker and the
    // simulation are reached too.
    assert!(read > MUTANTS / 20, "only {read} of {MUTANTS} mutants read");
}
