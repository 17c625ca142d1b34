//! A small multiplicative hasher (FxHash's) for the integer keys of the checker's and the
//! simulation's channel tables: std's SipHash costs more than the rest of a lookup, and these keys
//! are not attacker-chosen. Tables keyed with it are only looked up, never iterated.

use std::hash::{BuildHasherDefault, Hasher};

#[derive(Default, Clone, Copy)]
pub(crate) struct FxHasher(u64);

const SEED: u64 = 0x51_7c_c1_b7_27_22_0a_95;

impl Hasher for FxHasher {
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.write_u64(b as u64);
        }
    }
    fn write_u32(&mut self, i: u32) {
        self.write_u64(i as u64);
    }
    fn write_u64(&mut self, i: u64) {
        self.0 = (self.0.rotate_left(5) ^ i).wrapping_mul(SEED);
    }
    fn finish(&self) -> u64 {
        self.0
    }
}

pub(crate) type FxBuild = BuildHasherDefault<FxHasher>;
pub(crate) type FxHashMap<K, V> = std::collections::HashMap<K, V, FxBuild>;

/// FxHash of a byte string (labels), 8 bytes at a time.
pub(crate) fn hash_bytes(bytes: &[u8]) -> u64 {
    let mut h = FxHasher::default();
    let mut chunks = bytes.chunks_exact(8);
    for c in &mut chunks {
        h.write_u64(u64::from_le_bytes([c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7]]));
    }
    let mut last = [0u8; 8];
    last[..chunks.remainder().len()].copy_from_slice(chunks.remainder());
    h.write_u64(u64::from_le_bytes(last) ^ (bytes.len() as u64) << 56);
    h.finish()
}
