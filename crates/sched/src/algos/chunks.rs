//! Chunk numbering shared by the reduce-scatter + allgather algorithms.
//!
//! These algorithms split the vector into `parts` (one per concurrent collective, i.e. per
//! port used) and each part into one chunk per rank: chunk `(c, q)` is the piece of part `c`
//! that rank `q` holds fully reduced at the end of the reduce-scatter. Each algorithm visits
//! the chunks of part `c` in an order of its own (`order[c][pos] = q`), chosen so that every
//! message carries a range of positions. How a chunk maps to a block of the schedule depends
//! on the collective:
//! - allreduce: part-major, in the algorithm's order, so every message is one contiguous
//!   buffer (the "logical remapping" of the Swing paper §3.1.1; the allgather puts every
//!   block back where it belongs, so the remapping is invisible to the caller);
//! - reduce-scatter and allgather: rank-major (`q·parts + c`), so rank `q` owns the
//!   contiguous blocks `[q·parts, (q+1)·parts)` in rank order — MPI reduce-scatter and
//!   allgather semantics. Messages may then carry several runs.

use crate::ir::{Blocks, Collective};

pub(crate) struct Chunks {
    ranks: u32,
    parts: u32,
    /// `order[c][pos]` = owner rank of the chunk of part `c` at position `pos`.
    order: Vec<Vec<u32>>,
    rank_major: bool,
}

impl Chunks {
    pub fn new(collective: Collective, ranks: u32, order: Vec<Vec<u32>>) -> Chunks {
        debug_assert!(order.iter().all(|o| o.len() == ranks as usize));
        Chunks { ranks, parts: order.len() as u32, order, rank_major: collective != Collective::Allreduce }
    }

    /// Rank-major numbering in rank order for every collective (for algorithms whose
    /// messages carry one chunk, where the order does not matter).
    pub fn rank_major(ranks: u32, parts: u32) -> Chunks {
        Chunks { ranks, parts, order: vec![(0..ranks).collect(); parts as usize], rank_major: true }
    }

    pub fn blocks(&self) -> u32 {
        self.ranks * self.parts
    }

    /// `block_owner` of the schedule (rank-major numbering only).
    pub fn owners(&self) -> Vec<u32> {
        if self.rank_major {
            (0..self.blocks()).map(|b| b / self.parts).collect()
        } else {
            Vec::new()
        }
    }

    fn id(&self, c: u32, pos: u32) -> u32 {
        if self.rank_major {
            self.order[c as usize][pos as usize] * self.parts + c
        } else {
            c * self.ranks + pos
        }
    }

    /// The chunks of part `c` at positions `lo..hi`.
    pub fn range(&self, c: u32, lo: u32, hi: u32) -> Blocks {
        if self.rank_major {
            Blocks::from_ids((lo..hi).map(|pos| self.id(c, pos)))
        } else {
            Blocks::range(self.id(c, lo), self.id(c, lo) + (hi - lo))
        }
    }

    /// The chunk `(c, q)` (rank-major numbering only).
    pub fn chunk(&self, c: u32, q: u32) -> Blocks {
        debug_assert!(self.rank_major);
        let b = q * self.parts + c;
        Blocks::range(b, b + 1)
    }

    /// Every part's chunks of the ranks in `owners` (rank-major numbering only).
    pub fn of_owners(&self, owners: impl IntoIterator<Item = u32>) -> Blocks {
        debug_assert!(self.rank_major);
        Blocks::from_ids(owners.into_iter().flat_map(|q| (0..self.parts).map(move |c| q * self.parts + c)))
    }

    pub fn all(&self) -> Blocks {
        Blocks::range(0, self.blocks())
    }
}

/// Which halves of an allreduce `collective` asks for: (reduce-scatter, allgather).
pub(crate) fn halves(collective: Collective, algorithm: &str) -> Result<(bool, bool), String> {
    match collective {
        Collective::Allreduce => Ok((true, true)),
        Collective::ReduceScatter => Ok((true, false)),
        Collective::Allgather => Ok((false, true)),
        _ => Err(format!("{algorithm} supports allreduce, reduce_scatter and allgather, not {collective:?}")),
    }
}

/// Receive op that keeps contributions in rank order when the sender's contributions all
/// precede or all follow the receiver's (true of the linear recursive-doubling groups).
pub(crate) fn rank_order_op(from: u32, to: u32) -> crate::ir::RecvOp {
    if from < to {
        crate::ir::RecvOp::ReduceIncomingFirst
    } else {
        crate::ir::RecvOp::ReduceLocalFirst
    }
}
