//! Bucket allreduce on a `D`-dimensional torus (Swing paper §2.3.4, §5.2; Jain & Sabharwal,
//! Sack & Gropp): a ring reduce-scatter along each dimension in turn, each on the data
//! reduced so far, then ring allgathers along the dimensions in reverse order.
//!
//! Multiport: `2D` bucket collectives run concurrently, each on `1/(2D)` of the data.
//! Collective `(k, ±)` visits the dimensions `k, k+1, …, k+D−1 (mod D)` with its rings all
//! turning in the `±` direction, so in every phase the `2D` collectives occupy `2D` distinct
//! (dimension, direction) pairs and every link direction carries at most one ring (Ξ = 1).
//!
//! Synchronous dimension change (§5.2): all collectives move to their next dimension
//! together. A phase lasts `d_max − 1` steps; collectives whose current dimension is shorter
//! finish early and idle until the phase ends. The schedule has `2·D·(d_max − 1)` steps
//! (`Σ 2(d_i − 1)` on a square torus). Dimensions of size 1 are ignored; a 1D layout gives the
//! bidirectional ring.
//!
//! Chunk `(c, q)` is the piece of collective `c`'s data that rank `q` ends the reduce-scatter
//! with: the sub-segment selected by `q`'s coordinates in the order the collective visits the
//! dimensions. Every shape is supported; ring reductions are not rank-ordered, so the
//! schedule is not `noncommutative_safe` (except for the allgather, which only copies).

use super::chunks::{halves, Chunks};
use super::ring::{emit_schedule, DirectedRing, Phase};
use super::Layout;
use crate::ir::{Collective, Schedule};

pub fn bucket(collective: Collective, layout: &Layout) -> Result<Schedule, String> {
    let (s, phases) = parts(collective, layout)?;
    Ok(emit_schedule(s, &phases))
}

pub(crate) fn parts(collective: Collective, layout: &Layout) -> Result<(Schedule, Vec<Phase>), String> {
    let name = "bucket";
    let (rs, ag) = halves(collective, name)?;
    let p = layout.ranks();
    let active: Vec<usize> = (0..layout.ndims()).filter(|&i| layout.dims[i] > 1).collect();
    let ndim = active.len();
    // Collective `c = 2k + (direction is −)`: its dimension order and direction.
    let parts: Vec<(Vec<usize>, i64)> = (0..2 * ndim)
        .map(|c| ((0..ndim).map(|j| active[(c / 2 + j) % ndim]).collect(), if c % 2 == 0 { 1 } else { -1 }))
        .collect();
    // Position of rank `q` in collective `c`'s order: its coordinates in the dimension order
    // of `c`, most significant first, so every sub-segment is a range of positions.
    let position = |dims: &[usize], q: u32| {
        let coords = layout.coords(q);
        dims.iter().fold(0, |pos, &d| pos * layout.dims[d] + coords[d])
    };
    let order: Vec<Vec<u32>> = if parts.is_empty() {
        vec![(0..p).collect()]
    } else {
        parts
            .iter()
            .map(|(dims, _)| {
                let mut o: Vec<u32> = (0..p).collect();
                o.sort_by_key(|&q| position(dims, q));
                o
            })
            .collect()
    };
    let chunks = Chunks::new(collective, p, order);
    let mut s = Schedule::new(collective, name, p, chunks.blocks());
    s.block_owner = chunks.owners();
    s.torus = Some(layout.dims.clone());
    s.noncommutative_safe = collective == Collective::Allgather;
    if ndim == 0 {
        return Ok((s, Vec::new()));
    }
    let phase_len = active.iter().map(|&d| layout.dims[d] as usize - 1).max().unwrap_or(0);

    // The rings of collective `c` in phase `j`: one per line along its `j`-th dimension.
    let rings = |c: usize, j: usize| -> Vec<DirectedRing> {
        let (dims, dir) = &parts[c];
        let dim = dims[j];
        let m = layout.dims[dim];
        // Sub-segment width (in positions) at this phase.
        let width: u32 = dims[j + 1..].iter().map(|&d| layout.dims[d]).product();
        let (out, inp) =
            if *dir > 0 { (2 * dim as u16, 2 * dim as u16 + 1) } else { (2 * dim as u16 + 1, 2 * dim as u16) };
        (0..p)
            .filter(|&r| layout.coords(r)[dim] == 0)
            .map(|base| {
                let members: Vec<u32> = (0..m as i64).map(|i| layout.shift(base, dim, dir * i)).collect();
                let owned = members
                    .iter()
                    .map(|&q| {
                        // Positions sharing `q`'s first `j + 1` digits.
                        let lo = position(&dims[..=j], q) * width;
                        chunks.range(c as u32, lo, lo + width)
                    })
                    .collect();
                DirectedRing { members, ports: vec![(Some(out), Some(inp)); m as usize], owned }
            })
            .collect()
    };
    // One phase per (half, dimension index): all collectives move dimension together.
    let mut phases = Vec::new();
    if rs {
        for j in 0..ndim {
            let rings = (0..parts.len()).flat_map(|c| rings(c, j)).collect();
            phases.push(Phase { step0: j * phase_len, rings, reduce: true });
        }
    }
    if ag {
        let base = if rs { ndim * phase_len } else { 0 };
        for j in (0..ndim).rev() {
            let rings = (0..parts.len()).flat_map(|c| rings(c, j)).collect();
            phases.push(Phase { step0: base + (ndim - 1 - j) * phase_len, rings, reduce: false });
        }
    }
    Ok((s, phases))
}
