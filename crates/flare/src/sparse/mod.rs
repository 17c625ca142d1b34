//! Sparse allreduce in Flare (seed 004 §7) and its host-based baseline, sans-I/O.
//!
//! - [`format`]: (index, value) pairs, blocks whose span follows from the density, a block's
//!   packets with the shard count on the last one, empty blocks, dense runs (densification).
//! - [`switch`]: a switch's sparse handler: shard counters per child, hash table + spill
//!   buffer (leaves) or a dense array (root), what it sends on.
//! - [`gradients`]: the synthetic top-1-per-bucket gradients of Fig. 15, with a stated index
//!   overlap.
//! - [`sparcml`]: SparCML's sparse recursive doubling (host-based baseline).
//! - [`cost`]: per-packet service time of the switch handlers from the seed's PsPIN facts.

pub mod cost;
pub mod format;
pub mod gradients;
pub mod pspin;
pub mod sparcml;
pub mod switch;
