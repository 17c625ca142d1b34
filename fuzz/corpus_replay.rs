//! What every crate's fuzz-corpus test shares (each includes this file with
//! `#[path = "../../../fuzz/corpus_replay.rs"] mod corpus_replay;`): a target's committed corpus
//! and the seeded stream its mutants are drawn from. Each test keeps its own mutator, which knows
//! its format's tokens.

use std::path::Path;

/// The corpus files of the cargo-fuzz target `target` (fuzz/corpus/<target>/), sorted by name.
pub fn corpus(target: &str) -> Vec<(String, Vec<u8>)> {
    // Expanded in the including crate: crates/<name>/, two levels below the workspace.
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/corpus").join(target);
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

/// xorshift64*: the mutants' seeded stream.
pub struct Xs(pub u64);

impl Xs {
    /// A draw in `0..n` (0 when `n` is 0).
    pub fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D) % n.max(1)
    }
}
