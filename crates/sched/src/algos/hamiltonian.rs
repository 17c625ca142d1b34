//! Hamiltonian-ring allreduce on a 2D torus (Swing paper §2.3.1): the torus is decomposed
//! into two edge-disjoint Hamiltonian cycles, and each cycle carries two rings, one per
//! direction. The four rings run concurrently, each on a quarter of the data and each on its
//! own port, so every link direction carries exactly one ring (congestion deficiency Ξ = 1).
//!
//! # Construction
//!
//! Let the torus have `c` columns (coordinate `x`) and `r = c·k` rows (`y`). Both cycles
//! leave every node on one of its two `+` links:
//! - `H1` moves `+x`, except at nodes with `(x + y + 1) mod c = 0`, where it moves `+y`. It
//!   sweeps a whole row (`c − 1` moves in `x`), steps to the next row one column to the left,
//!   and returns to its start after `r` rows because `c | r`.
//! - `H2` takes the other `+` link of every node: `+y` except where `H1` moves `+y`. It climbs
//!   a column for `c − 1` rows, steps one column to the right, and so on; after `c` columns
//!   it has advanced `c(c−1)` rows, so it is a single cycle iff `gcd(k, c−1) = 1`.
//!
//! Hence the condition of the paper, `r = c·k` (`k ≥ 1`) and `gcd(r, c−1) = 1` (equivalently
//! `gcd(k, c−1) = 1`, since `gcd(c, c−1) = 1`). Square tori always qualify. Either dimension
//! of the layout may play the role of the columns. Other shapes and other dimensionalities
//! are rejected with an error.

use super::chunks::{halves, Chunks};
use super::ring::{emit_schedule, DirectedRing, Phase};
use super::Layout;
use crate::ir::{Collective, Schedule};

fn gcd(a: u32, b: u32) -> u32 {
    if b == 0 {
        a
    } else {
        gcd(b, a % b)
    }
}

/// The raw helical construction on a torus of `c` columns and `r` rows, nodes numbered
/// `x + c·y`: for each node, the `+` link `H1` and `H2` leave it on (`false` = `+x`, `true` =
/// `+y`), as successor tables `[h1, h2]`. `H1` is a Hamiltonian cycle iff `c | r`; `H2` then
/// is one iff `gcd(r, c−1) = 1`. Exposed so tests can check that the condition is exact.
pub fn helical_successors(c: u32, r: u32) -> [Vec<u32>; 2] {
    let mut h = [Vec::with_capacity((c * r) as usize), Vec::with_capacity((c * r) as usize)];
    for y in 0..r {
        for x in 0..c {
            let step_x = (x + 1) % c + c * y; // (x+1, y)
            let step_y = x + c * ((y + 1) % r); // (x, y+1)
            let h1_turns = (x + y + 1) % c == 0;
            h[0].push(if h1_turns { step_y } else { step_x });
            h[1].push(if h1_turns { step_x } else { step_y });
        }
    }
    h
}

/// Two edge-disjoint Hamiltonian cycles of the 2D torus `layout`, each as the sequence of
/// `(rank, port)` in cycle order, where `port` (always a `+` port, `0` or `2`) is the link
/// to the next rank. Errors if the shape does not satisfy the construction's condition.
pub fn hamiltonian_cycles(layout: &Layout) -> Result<[Vec<(u32, u16)>; 2], String> {
    let dims = &layout.dims;
    if dims.len() != 2 || dims.iter().any(|&d| d < 2) {
        return Err(format!(
            "hamiltonian-rings needs a 2D torus with both dimensions ≥ 2, not {dims:?} (use ring-bidirectional on 1D, bucket on more dimensions)"
        ));
    }
    // `xd` is the dimension playing the columns (size c), `yd` the rows (size r = c·k).
    let (xd, yd) = if dims[1] % dims[0] == 0 {
        (0, 1)
    } else if dims[0] % dims[1] == 0 {
        (1, 0)
    } else {
        return Err(format!(
            "hamiltonian-rings needs one dimension to be a multiple of the other (r = c·k), not {dims:?}"
        ));
    };
    let (c, r) = (dims[xd], dims[yd]);
    if gcd(r, c - 1) != 1 {
        return Err(format!(
            "hamiltonian-rings on a {r}x{c} torus: gcd(r, c−1) = gcd({r}, {}) = {} ≠ 1, so the two cycles are not Hamiltonian",
            c - 1,
            gcd(r, c - 1)
        ));
    }
    let succ = helical_successors(c, r);
    let rank_of = |node: u32| {
        let mut coords = vec![0; 2];
        coords[xd] = node % c;
        coords[yd] = node / c;
        layout.rank(&coords)
    };
    let mut out = [Vec::new(), Vec::new()];
    for (h, cycle) in succ.iter().zip(out.iter_mut()) {
        let mut node = 0;
        loop {
            let next = h[node as usize];
            let port = if next / c == node / c { 2 * xd as u16 } else { 2 * yd as u16 };
            cycle.push((rank_of(node), port));
            node = next;
            if node == 0 {
                break;
            }
        }
        if cycle.len() != (c * r) as usize {
            return Err(format!("internal error: helical cycle on {r}x{c} has {} nodes", cycle.len()));
        }
    }
    Ok(out)
}

/// Hamiltonian-ring allreduce (and its reduce-scatter / allgather halves) on a 2D torus:
/// four rings (`H1` forward and backward, `H2` forward and backward), `2(p−1)` steps, rank `q`
/// owning blocks `4q .. 4q+4`. See the module docs for the supported shapes.
pub fn hamiltonian_rings(collective: Collective, layout: &Layout) -> Result<Schedule, String> {
    let (s, phases) = parts(collective, layout)?;
    Ok(emit_schedule(s, &phases))
}

pub(crate) fn parts(collective: Collective, layout: &Layout) -> Result<(Schedule, Vec<Phase>), String> {
    let name = "hamiltonian-rings";
    let (rs, ag) = halves(collective, name)?;
    let cycles = hamiltonian_cycles(layout)?;
    let p = layout.ranks();
    let chunks = Chunks::rank_major(p, 4);
    let mut s = Schedule::new(collective, name, p, chunks.blocks());
    if collective != Collective::Allreduce {
        s.block_owner = chunks.owners();
    }
    s.noncommutative_safe = collective == Collective::Allgather;
    s.torus = Some(layout.dims.clone());
    let mut rings = Vec::new();
    for (h, cycle) in cycles.iter().enumerate() {
        let n = cycle.len();
        // Forward: members[i] leaves on its `+` port, arrives on the receiver's `−` port.
        let fwd: Vec<u32> = cycle.iter().map(|&(q, _)| q).collect();
        let fwd_ports = cycle.iter().map(|&(_, port)| (Some(port), Some(port ^ 1))).collect();
        // Backward: members[j] = cycle[−j]; it sends to cycle[−j−1] back over that node's
        // forward link, leaving on its own `−` port.
        let bwd: Vec<u32> = (0..n).map(|j| cycle[(n - j) % n].0).collect();
        let bwd_ports = (0..n).map(|j| cycle[(2 * n - j - 1) % n].1).map(|port| (Some(port ^ 1), Some(port))).collect();
        for (c, members, ports) in [(2 * h as u32, fwd, fwd_ports), (2 * h as u32 + 1, bwd, bwd_ports)] {
            rings.push(DirectedRing { owned: members.iter().map(|&q| chunks.chunk(c, q)).collect(), members, ports });
        }
    }
    Ok((s, Phase::halves(rings, rs, ag, p as usize - 1)))
}
