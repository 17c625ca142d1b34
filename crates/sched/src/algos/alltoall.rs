//! All-to-all algorithms (the block layout is the IR's: blocks `s·p + d` are rank `s`'s data
//! for rank `d`, one block per pair).
//!
//! - `pairwise` (MPICH's and Open MPI's choice for large messages): `p − 1` steps; in step
//!   `i − 1` rank `r` sends its data for `r + i` to it and receives from `r − i` (mod `p`). Every
//!   byte crosses the network once: bandwidth-optimal, `p − 1` latencies.
//! - `bruck` (Bruck et al., IEEE TPDS 1997; MPICH's choice for small messages): `⌈log2 p⌉`
//!   steps. A block travelling from `s` to `d` has distance `δ = (d − s) mod p`; in step `k`
//!   every block whose `δ` has bit `k` set moves `2^k` ranks on, so rank `r` sends to `r + 2^k`
//!   the blocks it holds with that bit set (about half of its `p` blocks). Latency-optimal, at
//!   about `log2(p)/2` times the bytes of `pairwise`.

use super::Layout;
use crate::ir::{Blocks, Collective, RecvOp, Schedule};

fn alltoall_only(name: &str, collective: Collective) -> Result<(), String> {
    if collective != Collective::Alltoall {
        return Err(format!("{name} builds alltoall, not {}", collective.name()));
    }
    Ok(())
}

/// Pairwise-exchange all-to-all (see the module docs).
pub fn pairwise(collective: Collective, layout: &Layout) -> Result<Schedule, String> {
    alltoall_only("pairwise", collective)?;
    let p = layout.ranks();
    let mut s = Schedule::new(collective, "pairwise", p, p * p);
    for i in 1..p {
        for r in 0..p {
            let d = (r + i) % p;
            let b = r * p + d;
            s.exchange(i as usize - 1, r, d, None, None, Blocks::range(b, b + 1), RecvOp::Copy);
        }
    }
    Ok(s)
}

/// Bruck's all-to-all (see the module docs).
pub fn bruck(collective: Collective, layout: &Layout) -> Result<Schedule, String> {
    alltoall_only("bruck", collective)?;
    let p = layout.ranks();
    let mut s = Schedule::new(collective, "bruck", p, p * p);
    let mut k = 0;
    while (1u64 << k) < p as u64 {
        let hop = 1u32 << k;
        for r in 0..p {
            // The blocks at `r` before step `k` whose distance has bit `k` set: the block from
            // `s` with distance `δ` is at `s + (δ mod 2^k)`.
            let ids = (1..p).filter(|&delta| delta & hop != 0).map(|delta| {
                let src = (r + p - (delta & (hop - 1)) % p) % p;
                src * p + (src + delta) % p
            });
            s.exchange(k, r, (r + hop) % p, None, None, Blocks::from_ids(ids), RecvOp::Copy);
        }
        k += 1;
    }
    Ok(s)
}
