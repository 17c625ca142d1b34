//! Collective algorithms as schedule generators: allreduce (and its reduce-scatter / allgather
//! halves), broadcast and reduce trees, and all-to-all exchanges.
//!
//! Every generator takes a [`Layout`]: the rank count and the torus shape the ranks are laid
//! on (linearly, dimension 0 fastest, as in the Swing paper §2.2). Non-torus networks use a
//! 1D layout `[p]`. Ports follow the torus convention: `2i` = `+1` in dimension `i`, `2i+1` =
//! `−1`.

pub mod alltoall;
pub mod binomial;
pub mod bucket;
mod chunks;
pub mod hamiltonian;
pub mod recursive_doubling;
pub mod ring;
pub mod swing;

use crate::ir::{Collective, Schedule};
use crate::registry::{
    other, variant, Algorithm, CostForm, Kind, ModelRow, Rule, SizeClass, MAX_RANKS_ALLTOALL, MAX_RANKS_RING,
};
use recursive_doubling as rd;

/// Ranks laid out on a torus of shape `dims` (product = ranks).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Layout {
    pub dims: Vec<u32>,
}

impl Layout {
    pub fn new(dims: Vec<u32>) -> Result<Layout, String> {
        if dims.is_empty() || dims.contains(&0) {
            return Err(format!("invalid torus shape {dims:?}"));
        }
        Ok(Layout { dims })
    }
    pub fn line(p: u32) -> Layout {
        Layout { dims: vec![p] }
    }
    pub fn ranks(&self) -> u32 {
        self.dims.iter().product()
    }
    pub fn ndims(&self) -> usize {
        self.dims.len()
    }
    pub fn coords(&self, r: u32) -> Vec<u32> {
        let mut r = r;
        self.dims
            .iter()
            .map(|&d| {
                let c = r % d;
                r /= d;
                c
            })
            .collect()
    }
    pub fn rank(&self, c: &[u32]) -> u32 {
        let mut r = 0;
        for i in (0..self.dims.len()).rev() {
            r = r * self.dims[i] + c[i];
        }
        r
    }
    /// The rank `delta` steps away from `r` along dimension `dim` (with wrap-around).
    pub fn shift(&self, r: u32, dim: usize, delta: i64) -> u32 {
        let mut c = self.coords(r);
        let d = self.dims[dim] as i64;
        c[dim] = (((c[dim] as i64 + delta) % d + d) % d) as u32;
        self.rank(&c)
    }
    /// Port to use from `r` towards a peer `delta` away in `dim` (the minimal direction;
    /// `+` on a tie).
    pub fn port_towards(&self, dim: usize, delta: i64) -> u16 {
        let d = self.dims[dim] as i64;
        let fwd = ((delta % d) + d) % d;
        if fwd <= d - fwd {
            2 * dim as u16
        } else {
            2 * dim as u16 + 1
        }
    }
}

/// Builds the schedule of the variant `algorithm` (a name of [`crate::registry`]) for
/// `collective` on `layout`.
pub fn build(algorithm: &str, collective: Collective, layout: &Layout) -> Result<Schedule, String> {
    crate::registry::build(algorithm, collective, layout)
}

/// The algorithm registry ([`crate::registry`]), in the order front ends list it: variants
/// first, then the other names. One entry per algorithm name; nothing else lists names.
pub static REGISTRY: &[Algorithm] = &[
    Algorithm {
        direct_plan: Some(ring::ring_plan),
        model_row: Some(ModelRow::Ring),
        model_note: "Table 2's ring is multiport (2D rings); `ring` is one unidirectional ring, so Ψ = 2D",
        max_ranks: MAX_RANKS_RING,
        ..variant("ring", "ring", ring::ring, SizeClass::Bandwidth, "one unidirectional ring in rank order (Patarasuk & Yuan)")
    },
    Algorithm {
        direct_plan: Some(ring::ring_bidirectional_plan),
        model_row: Some(ModelRow::Ring),
        model_note: "Table 2's ring is multiport (2D rings); `ring-bidirectional` runs 2 rings, so Ψ = D",
        max_ranks: MAX_RANKS_RING,
        substitute: Some("ring"),
        ..variant("ring-bidirectional", "ring", ring::ring_bidirectional, SizeClass::Bandwidth, "two rings in opposite directions, half the data each")
    },
    Algorithm {
        direct_plan: Some(ring::hamiltonian_plan),
        model_row: Some(ModelRow::Ring),
        max_ranks: MAX_RANKS_RING,
        min_dims: 2,
        substitute: Some("ring"),
        ..variant("hamiltonian-rings", "ring", hamiltonian::hamiltonian_rings, SizeClass::Bandwidth, "2D rings along edge-disjoint Hamiltonian cycles of a 2D torus (both directions)")
    },
    Algorithm {
        model_row: Some(ModelRow::RecursiveDoublingLatency),
        model_note: "Ξ summed over the steps; Table 2's 2D·p^(1/D) bounds D·Σ 2^i ≈ D·p^(1/D) by a factor 2",
        cost: Some(CostForm::RecursiveDoubling { bandwidth: false }),
        halves: false,
        rank_ordered_1d: true,
        substitute: Some("recursive-doubling-bandwidth"),
        ..variant("recursive-doubling-latency", "recursive-doubling", rd::recursive_doubling_latency, SizeClass::Latency, "recursive doubling, the whole vector every step")
    },
    Algorithm {
        model_row: Some(ModelRow::RecursiveDoublingBandwidth),
        cost: Some(CostForm::RecursiveDoubling { bandwidth: true }),
        ..variant("recursive-doubling-bandwidth", "recursive-doubling", rd::recursive_doubling_bandwidth, SizeClass::Bandwidth, "recursive halving reduce-scatter + recursive doubling allgather (Rabenseifner)")
    },
    variant(
        "recursive-doubling-mirrored",
        "recursive-doubling-mirrored",
        rd::recursive_doubling_mirrored,
        SizeClass::Bandwidth,
        "recursive-doubling-bandwidth and its mirror, half the data each",
    ),
    Algorithm {
        direct_plan: Some(ring::bucket_plan),
        model_row: Some(ModelRow::Bucket),
        ..variant("bucket", "bucket", bucket::bucket, SizeClass::Bandwidth, "rings along each torus dimension in turn (bucket / multidimensional ring)")
    },
    Algorithm {
        direct_plan: Some(swing::bandwidth_allreduce_plan),
        model_row: Some(ModelRow::SwingBandwidth),
        model_note: "Table 2 gives Ξ for p → ∞; the §4.1 sum tends to 6/5, 28/27, 120/119 for D = 2, 3, 4 \
                     (2D: 1.184 at 64x64, 1.192 at 128x128)",
        cost: Some(CostForm::Swing { bandwidth: true }),
        rooted: true,
        ..variant(swing::SWING_BANDWIDTH, "swing", swing::swing_bandwidth, SizeClass::Bandwidth, "Swing (NSDI'24), bandwidth-optimal: reduce-scatter + allgather on 2D collectives")
    },
    Algorithm {
        model_row: Some(ModelRow::SwingLatency),
        model_note: "Ξ summed over the steps; Table 2's Ψ = D·log2 p is the one-port value: the multiport \
                     schedule sends n/(2D) per port per step, Ψ = log2(p)/2",
        cost: Some(CostForm::Swing { bandwidth: false }),
        halves: false,
        rooted: true,
        substitute: Some(swing::SWING_BANDWIDTH),
        ..variant(swing::SWING_LATENCY, "swing", swing::swing_latency, SizeClass::Latency, "Swing (NSDI'24), latency-optimal: the whole vector every step")
    },
    Algorithm {
        halves: false,
        rooted: true,
        substitute: Some("ring"),
        ..variant("binomial", "binomial", binomial::binomial, SizeClass::Latency, "binomial tree: broadcast, reduce, and allreduce as a reduce then a broadcast")
    },
    Algorithm {
        allreduce: false,
        halves: false,
        alltoall: true,
        max_ranks: MAX_RANKS_ALLTOALL,
        ..variant("pairwise", "alltoall", alltoall::pairwise, SizeClass::Bandwidth, "all-to-all by pairwise exchange: p-1 steps, rank r sends to r+i in step i")
    },
    Algorithm {
        allreduce: false,
        halves: false,
        alltoall: true,
        max_ranks: MAX_RANKS_ALLTOALL,
        ..variant("bruck", "alltoall", alltoall::bruck, SizeClass::Latency, "Bruck's all-to-all: log2(p) steps, each block moving 2^k ranks on when bit k of its distance is set")
    },
    Algorithm {
        variants: Some((swing::SWING_LATENCY, swing::SWING_BANDWIDTH)),
        ..other("swing", "swing", Kind::Family, "swing-latency or swing-bandwidth, whichever the α-β model finds cheaper for the size")
    },
    Algorithm {
        variants: Some(("recursive-doubling-latency", "recursive-doubling-bandwidth")),
        ..other("recursive-doubling", "recursive-doubling", Kind::Family, "recursive-doubling-latency or -bandwidth, whichever the α-β model finds cheaper")
    },
    Algorithm {
        alias_of: Some("recursive-doubling-bandwidth"),
        ..other("rabenseifner", "recursive-doubling", Kind::Alias, "= recursive-doubling-bandwidth")
    },
    Algorithm {
        rules: &[
            Rule { below_bytes: 64 << 10, allreduce_only: true, variant: "recursive-doubling-latency" },
            Rule { below_bytes: 2 << 20, allreduce_only: false, variant: "recursive-doubling-bandwidth" },
        ],
        otherwise: Some("ring"),
        ..other("auto", "auto", Kind::Policy, "the MPI runtime's measured choice: recursive-doubling-latency below 64 KiB, -bandwidth below 2 MiB, ring above")
    },
];
