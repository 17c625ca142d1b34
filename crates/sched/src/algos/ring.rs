//! Ring allreduce (Patarasuk & Yuan): a reduce-scatter then an allgather around a ring,
//! `p−1` steps each, one block per step. `ring` is single-port, ranks in rank order around
//! the ring; `ring-bidirectional` runs two such rings in opposite directions (Swing paper
//! §2.3.1 on a 1D torus). `DirectedRing` is the ring building block shared with
//! `hamiltonian-rings` and `bucket`.

use super::chunks::{halves, Chunks};
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

/// One directed ring used by a part of a multi-ring algorithm: `members[i]` sends to
/// `members[(i+1) % m]`, leaving on port `ports[i].0` of the sender and arriving on port
/// `ports[i].1` of the receiver; `owned[i]` is what `members[i]` holds fully reduced after the
/// reduce-scatter (and starts the allgather with).
pub(crate) struct DirectedRing {
    pub members: Vec<u32>,
    pub ports: Vec<(Option<u16>, Option<u16>)>,
    pub owned: Vec<Blocks>,
}

impl DirectedRing {
    /// Reduce-scatter in steps `step0 .. step0 + m − 1`: at step `k`, position `i` sends the
    /// partial of what position `i − k − 1` will own.
    pub fn reduce_scatter(&self, s: &mut Schedule, step0: usize) {
        let m = self.members.len();
        for k in 0..m.saturating_sub(1) {
            for i in 0..m {
                let seg = &self.owned[(i + 2 * m - k - 1) % m];
                let (po, pi) = self.ports[i];
                s.exchange(step0 + k, self.members[i], self.members[(i + 1) % m], po, pi, seg.clone(), RecvOp::ReduceIncomingFirst);
            }
        }
    }

    /// Allgather in steps `step0 .. step0 + m − 1`: at step `k`, position `i` forwards what
    /// position `i − k` owns.
    pub fn allgather(&self, s: &mut Schedule, step0: usize) {
        let m = self.members.len();
        for k in 0..m.saturating_sub(1) {
            for i in 0..m {
                let seg = &self.owned[(i + m - k) % m];
                let (po, pi) = self.ports[i];
                s.exchange(step0 + k, self.members[i], self.members[(i + 1) % m], po, pi, seg.clone(), RecvOp::Copy);
            }
        }
    }
}

/// Bidirectional ring: two rings over the ranks in rank order, one in each direction, each
/// on half of the data (the 1D-torus multiport ring of the Swing paper §2.3.1), `2(p−1)` steps.
/// On a 1D layout the `+` ring uses port 0 and the `−` ring port 1, so each link direction
/// carries one message per step. Other layouts are accepted but get no ports (rank order is
/// not a torus cycle there; use `hamiltonian-rings` or `bucket`). Rank `q` owns blocks
/// `2q` (`+` ring) and `2q + 1` (`−` ring).
pub fn ring_bidirectional(collective: Collective, layout: &Layout) -> Result<Schedule, String> {
    let name = "ring-bidirectional";
    let (rs, ag) = halves(collective, name)?;
    let p = layout.ranks();
    let chunks = Chunks::rank_major(p, 2);
    let mut s = Schedule::new(collective, name, p, chunks.blocks());
    if collective != Collective::Allreduce {
        s.block_owner = chunks.owners();
    }
    s.noncommutative_safe = collective == Collective::Allgather;
    let on_torus = layout.ndims() == 1;
    if on_torus {
        s.torus = Some(layout.dims.clone());
    }
    if p == 1 {
        return Ok(s);
    }
    let port = |q: u16| if on_torus { Some(q) } else { None };
    let rings: Vec<DirectedRing> = [(0u32, 0u16), (1, 1)]
        .into_iter()
        .map(|(c, out)| {
            let members: Vec<u32> = if c == 0 { (0..p).collect() } else { (0..p).map(|i| (p - i) % p).collect() };
            DirectedRing {
                owned: members.iter().map(|&q| chunks.chunk(c, q)).collect(),
                ports: vec![(port(out), port(out ^ 1)); p as usize],
                members,
            }
        })
        .collect();
    let mut step = 0;
    if rs {
        rings.iter().for_each(|r| r.reduce_scatter(&mut s, step));
        step += p as usize - 1;
    }
    if ag {
        rings.iter().for_each(|r| r.allgather(&mut s, step));
    }
    Ok(s)
}
