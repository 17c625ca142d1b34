//! Where the sparse vectors come from: a synthetic model of top-1-per-bucket sparsified
//! gradients, stated so that its index statistics are known.
//!
//! §7.1 sends the gradients of one sparsified ResNet50 iteration on 64 nodes (SparCML's top-k
//! per bucket: one value per bucket of 512, ≈0.2% density); those data are not public. Here
//! each rank keeps exactly one element per bucket of `bucket` elements; with probability
//! `overlap` it is the bucket's *shared* index (the same on every rank: a coordinate every
//! replica finds large), otherwise an index drawn uniformly in the bucket for that rank alone.
//! `overlap = 0` is independent ranks (in a bucket of 512, 64 ranks then hit ≈ 60.2 distinct
//! indices: the sum is ≈ 11.8% dense); `overlap = 1` makes every rank pick the same index (the
//! sum stays 0.2% dense). The distinct-index count of the sum is what densification, traffic
//! and switch memory depend on, and [`TopOneModel::expected_distinct`] gives it in closed form
//! (tested against the generator).
//!
//! Values are seeded 32-bit integers (never 0), so sums are exact (see [`super::format`]).

use super::format::{canonical, Pair};

fn mix(x: u64) -> u64 {
    let mut z = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// One value per bucket, shared index with probability `overlap`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct TopOneModel {
    pub elements: u64,
    pub bucket: u32,
    pub overlap: f64,
    pub salt: u64,
}

impl TopOneModel {
    /// Errors name the argument.
    pub fn new(elements: u64, bucket: u32, overlap: f64, salt: u64) -> Result<TopOneModel, String> {
        if elements == 0 || elements > u32::MAX as u64 {
            return Err(format!("elements: must be within 1..={}, got {elements}", u32::MAX));
        }
        if bucket == 0 {
            return Err("bucket: must be at least 1".into());
        }
        if !(overlap.is_finite() && (0.0..=1.0).contains(&overlap)) {
            return Err(format!("overlap: must be within 0..=1, got {overlap}"));
        }
        Ok(TopOneModel { elements, bucket, overlap, salt })
    }

    pub fn buckets(&self) -> u64 {
        self.elements.div_ceil(self.bucket as u64)
    }

    /// Average fraction of non-zero elements of one rank's vector.
    pub fn density(&self) -> f64 {
        self.buckets() as f64 / self.elements as f64
    }

    fn bucket_len(&self, k: u64) -> u64 {
        (self.bucket as u64).min(self.elements - k * self.bucket as u64)
    }

    /// Rank `rank`'s non-zeros of tenant `tenant`, ascending by index.
    pub fn rank_pairs(&self, tenant: u16, rank: u32) -> Vec<Pair> {
        let threshold = (self.overlap * (1u64 << 53) as f64) as u64;
        let t = (tenant as u64) << 48;
        (0..self.buckets())
            .map(|k| {
                let len = self.bucket_len(k);
                let r = mix(self.salt ^ t ^ (rank as u64) << 32 ^ k);
                let off = if (r >> 11) < threshold { mix(self.salt ^ t ^ 0xB0C4 ^ k << 8) % len } else { mix(r) % len };
                let index = (k * self.bucket as u64 + off) as u32;
                let value = (mix(self.salt.rotate_left(29) ^ t ^ (rank as u64) << 36 ^ index as u64) as u32) | 1;
                Pair { index, value }
            })
            .collect()
    }

    /// The exact sum over ranks `0..n` (ascending, duplicates summed).
    pub fn sum(&self, tenant: u16, n: u32) -> Vec<Pair> {
        let mut all = Vec::with_capacity(self.buckets() as usize * n as usize);
        for r in 0..n {
            all.extend(self.rank_pairs(tenant, r));
        }
        canonical(all)
    }

    /// Expected distinct indices of the sum over `n` ranks (full buckets): the shared index
    /// appears unless no rank took it, and each of the other `bucket − 1` indices is hit by a
    /// rank drawing at random with probability `(1 − overlap)/bucket`.
    pub fn expected_distinct(&self, n: u32) -> f64 {
        let b = self.bucket as f64;
        let q = self.overlap;
        let p_hit = (1.0 - q) / b; // a given index, by one rank, at random
        let shared = 1.0 - (1.0 - q - p_hit).powi(n as i32);
        let other = (b - 1.0) * (1.0 - (1.0 - p_hit).powi(n as i32));
        (shared + other) * self.buckets() as f64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_value_per_bucket_and_deterministic() {
        let m = TopOneModel::new(10_000, 512, 0.3, 7).unwrap();
        let a = m.rank_pairs(0, 3);
        assert_eq!(a.len(), 20);
        for (k, p) in a.iter().enumerate() {
            assert_eq!(p.index as usize / 512, k);
            assert_ne!(p.value, 0);
        }
        assert_eq!(a, m.rank_pairs(0, 3));
        assert_ne!(a, m.rank_pairs(0, 4));
        // The last bucket is short (10 000 = 19·512 + 272).
        assert!(a[19].index < 10_000);
    }

    #[test]
    fn distinct_indices_match_the_closed_form() {
        for overlap in [0.0, 0.4, 0.9, 1.0] {
            let m = TopOneModel::new(512 * 400, 512, overlap, 11).unwrap();
            let measured = m.sum(0, 64).len() as f64;
            let model = m.expected_distinct(64);
            assert!((measured - model).abs() <= 0.03 * model + 2.0, "overlap {overlap}: {measured} vs {model}");
        }
        // Independent ranks: ≈ 60.2 of 512 per bucket.
        let m = TopOneModel::new(512, 512, 0.0, 0).unwrap();
        assert!((m.expected_distinct(64) - 60.2).abs() < 0.05);
    }

    #[test]
    fn bad_arguments_name_themselves() {
        assert!(TopOneModel::new(0, 512, 0.0, 0).unwrap_err().starts_with("elements"));
        assert!(TopOneModel::new(10, 0, 0.0, 0).unwrap_err().starts_with("bucket"));
        assert!(TopOneModel::new(10, 4, 1.5, 0).unwrap_err().starts_with("overlap"));
    }
}
