//! Binomial trees (MPICH's and Open MPI's default broadcast and reduce for small vectors):
//! `⌈log2 p⌉` steps, the whole vector in every message.
//!
//! Ranks are numbered relative to the root, `v = (r − root) mod p`. The broadcast's step `k`
//! has every `v < 2^k` that holds the vector send it to `v + 2^k` (if that is a rank); the
//! reduce runs the same tree backwards, step `k` having every `v` with `v mod 2^{k+1} = 2^k`
//! send its partial result to `v − 2^k`, which reduces it after its own. The allreduce is the
//! reduce to rank 0 followed by the broadcast from it (`2⌈log2 p⌉` steps: latency-optimal
//! only in the step count of one tree; Open MPI's `nonoverlapping` allreduce).

use super::Layout;
use crate::ir::{Blocks, Collective, RecvOp, Schedule};

const NAME: &str = "binomial";

/// Binomial-tree broadcast, reduce and allreduce (see the module docs).
pub fn binomial(collective: Collective, layout: &Layout) -> Result<Schedule, String> {
    let p = layout.ranks();
    let mut s = Schedule::new(collective, NAME, p, 1);
    let levels = steps(p);
    match collective {
        Collective::Broadcast { root } => broadcast(&mut s, root, 0)?,
        Collective::Reduce { root } => reduce(&mut s, root)?,
        Collective::Allreduce => {
            reduce(&mut s, 0)?;
            broadcast(&mut s, 0, levels)?;
        }
        other => return Err(format!("{NAME} builds broadcast, reduce and allreduce, not {}", other.name())),
    }
    s.trim();
    Ok(s)
}

/// `⌈log2 p⌉`: the tree's depth.
fn steps(p: u32) -> usize {
    (u32::BITS - p.saturating_sub(1).leading_zeros()) as usize
}

fn check_root(p: u32, root: u32) -> Result<(), String> {
    if root >= p {
        return Err(format!("{NAME}: root {root} is not a rank (p = {p})"));
    }
    Ok(())
}

/// The broadcast from `root`, its step `k` at global step `step0 + k`.
fn broadcast(s: &mut Schedule, root: u32, step0: usize) -> Result<(), String> {
    let p = s.ranks;
    check_root(p, root)?;
    let abs = |v: u32| (v + root) % p;
    for k in 0..steps(p) {
        let half = 1u32 << k;
        for v in 0..half.min(p) {
            if v + half < p {
                s.exchange(step0 + k, abs(v), abs(v + half), None, None, Blocks::range(0, 1), RecvOp::Copy);
            }
        }
    }
    Ok(())
}

/// The reduce to `root`, from global step 0.
fn reduce(s: &mut Schedule, root: u32) -> Result<(), String> {
    let p = s.ranks;
    check_root(p, root)?;
    let abs = |v: u32| (v + root) % p;
    for k in 0..steps(p) {
        let half = 1u32 << k;
        for v in (half..p).step_by(2 * half as usize) {
            // The sender's ranks (relative) all follow the receiver's.
            s.exchange(k, abs(v), abs(v - half), None, None, Blocks::range(0, 1), RecvOp::ReduceLocalFirst);
        }
    }
    Ok(())
}
