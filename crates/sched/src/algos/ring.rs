//! Ring allreduce (Patarasuk & Yuan): a reduce-scatter then an allgather around a ring,
//! `p−1` steps each, one block per step. Single port; ranks in rank order around the ring.

use super::Layout;
use crate::ir::{Blocks, Collective, RecvOp, Schedule};

/// Ring over all ranks in rank order (rank `r` sends to `r+1`). Supports allreduce,
/// reduce-scatter (rank `r` ends with block `r`) and allgather (rank `r` starts with block `r`).
pub fn ring(collective: Collective, layout: &Layout) -> Result<Schedule, String> {
    let p = layout.ranks();
    let mut s = Schedule::new(collective, "ring", p, p);
    if collective != Collective::Allreduce {
        s.block_owner = (0..p).collect();
    }
    if p == 1 {
        return Ok(s);
    }
    let next = |r: u32| (r + 1) % p;
    let prev_block = |r: u32, k: u32| (r + p - (k % p)) % p;
    let mut step = 0;
    let rs = matches!(collective, Collective::Allreduce | Collective::ReduceScatter);
    let ag = matches!(collective, Collective::Allreduce | Collective::Allgather);
    if !rs && !ag {
        return Err("ring supports allreduce, reduce_scatter and allgather".into());
    }
    if rs {
        // Step k: r sends the partial of block (r − k − 1) and receives block (r − k − 2), so
        // that after p−1 steps rank r holds block r complete.
        for k in 0..p - 1 {
            for r in 0..p {
                let b = prev_block(r, k + 1);
                s.exchange(step, r, next(r), None, None, Blocks::range(b, b + 1), RecvOp::ReduceIncomingFirst);
            }
            step += 1;
        }
    }
    if ag {
        // Step k: r forwards block (r − k), which it holds complete.
        for k in 0..p - 1 {
            for r in 0..p {
                let b = prev_block(r, k);
                s.exchange(step, r, next(r), None, None, Blocks::range(b, b + 1), RecvOp::Copy);
            }
            step += 1;
        }
    }
    Ok(s)
}
