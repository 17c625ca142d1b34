//! Recursive-doubling allreduce (Swing paper §2.3.2, §2.3.3, §5.1), optimised for tori.
//!
//! - `recursive-doubling-latency`: at each step every rank exchanges its whole vector with
//!   its peer and reduces it (`log2 p` steps, `n·log2 p` bytes per rank).
//! - `recursive-doubling-bandwidth` (Rabenseifner): a reduce-scatter that halves the data and
//!   doubles the distance at each step, then an allgather that reverses it (`2·log2 p` steps,
//!   `2(p−1)/p·n` bytes per rank).
//! - `recursive-doubling-mirrored`: the bandwidth-optimised algorithm run as `D` plain and `D`
//!   mirrored collectives, each on `1/(2D)` of the data, like Swing's multiport scheme (§4.1).
//!
//! # Torus mapping
//!
//! Peers differ in one coordinate, and the dimension changes at every step (Fig. 2, Sack et
//! al.): the steps go round-robin over the dimensions, flipping bit 0 of every coordinate,
//! then bit 1, and so on; dimensions with fewer bits drop out when exhausted. On a 1D layout
//! this is the classic algorithm (peer `r XOR 2^s`). Every message therefore travels along
//! one dimension; its port is the minimal direction (`+` on a tie), except in the mirrored
//! algorithm, where plain collectives go `+` from ranks whose bit is 0 and mirrored ones the
//! other way, so the two never share a port.
//!
//! # Mirrored collectives
//!
//! A plain collective pairs coordinate `a` with `a XOR 2^b`, i.e. `a + 2^b` if bit `b` of `a`
//! is 0 and `a − 2^b` otherwise. Its mirror goes the opposite way: `a − 2^b` if the bit is 0,
//! `a + 2^b` otherwise (mod the dimension). The mirrored peer agrees with the plain one
//! modulo `2^(b+1)`, so it holds the same blocks at every step; the contribution sets stay
//! disjoint because `Σ ±2^i` over distinct bit sets are distinct modulo the next power of two.
//! Collective `k` of each kind starts at dimension `k`, so on a square power-of-two torus the
//! `2D` collectives use the `2D` ports of every rank exactly once per step.
//!
//! # Non-power-of-two sizes
//!
//! Each dimension of size `d` is folded to its largest power of two `d' = d − m` before the
//! algorithm and unfolded after it, one dimension after the other (2 extra steps per such
//! dimension): in every line of the dimension, coordinate `2j` sends its data to `2j + 1`
//! for `j < m` (a neighbour, as in MPICH), and the survivors — `2j+1` for `j < m` and all
//! coordinates `≥ 2m` — run the algorithm on the virtual `d'₀ × d'₁ × …` torus; at the end
//! `2j + 1` sends the result back. On a 1D layout this is the usual reduction to the largest
//! power of two `p' ≤ p`. (The 3-2 elimination of Rabenseifner & Träff, which transmits less
//! for the bandwidth-optimised variant, is not implemented.) For the reduce-scatter the
//! survivors end with the blocks of the ranks folded into them and hand them back; for the
//! allgather the folded ranks first hand their blocks to the survivors.
//!
//! # Non-commutative operators
//!
//! On a layout with at most one dimension of size > 1, the groups combined at each step are
//! contiguous rank intervals (the folding pairs neighbours), and every reduction puts the
//! lower ranks first, so the latency and bandwidth variants are `noncommutative_safe`
//! (the checker proves it). On multi-dimensional tori the dimension interleaving makes the
//! groups non-contiguous, and mirrored collectives are never rank-ordered.

use super::chunks::{halves, rank_order_op, Chunks};
use super::Layout;
use crate::ir::{Blocks, Collective, RecvOp, Schedule};

/// Per-dimension folding of a torus to power-of-two dimensions.
struct Folding {
    layout: Layout,
    /// Folded (virtual) dimension sizes, the largest powers of two `≤ dims`.
    vdims: Vec<u32>,
    virt: Layout,
    /// Folding steps in order.
    levels: Vec<FoldLevel>,
    /// Physical rank of each virtual rank.
    phys: Vec<u32>,
}

struct FoldLevel {
    dim: usize,
    /// `(folded, survivor)` pairs: neighbours along `dim`.
    pairs: Vec<(u32, u32)>,
    /// Representative of every rank before this level (the rank whose data it is in).
    rep_before: Vec<u32>,
}

impl Folding {
    fn new(layout: &Layout) -> Folding {
        let p = layout.ranks();
        let vdims: Vec<u32> = layout.dims.iter().map(|&d| 1 << (31 - d.leading_zeros())).collect();
        let extra: Vec<u32> = layout.dims.iter().zip(&vdims).map(|(d, v)| d - v).collect();
        let survives = |a: u32, m: u32| a >= 2 * m || a % 2 == 1;
        let mut rep: Vec<u32> = (0..p).collect();
        let mut levels = Vec::new();
        for dim in 0..layout.ndims() {
            let m = extra[dim];
            if m == 0 {
                continue;
            }
            let alive = |x: u32| {
                let c = layout.coords(x);
                levels.iter().all(|l: &FoldLevel| survives(c[l.dim], extra[l.dim]))
            };
            let pairs: Vec<(u32, u32)> = (0..p)
                .filter(|&x| alive(x) && !survives(layout.coords(x)[dim], m))
                .map(|x| (x, layout.shift(x, dim, 1)))
                .collect();
            let rep_before = rep.clone();
            let mut into = vec![None; p as usize];
            for &(x, y) in &pairs {
                into[x as usize] = Some(y);
            }
            for r in rep.iter_mut() {
                if let Some(y) = into[*r as usize] {
                    *r = y;
                }
            }
            levels.push(FoldLevel { dim, pairs, rep_before });
        }
        let virt = Layout { dims: vdims.clone() };
        let phys = (0..virt.ranks())
            .map(|v| {
                let c: Vec<u32> =
                    virt.coords(v).iter().zip(&extra).map(|(&a, &m)| if a < m { 2 * a + 1 } else { a + m }).collect();
                layout.rank(&c)
            })
            .collect();
        Folding { layout: layout.clone(), vdims, virt, levels, phys }
    }

    /// Final representative (survivor) of every rank.
    fn rep(&self) -> Vec<u32> {
        let p = self.layout.ranks();
        let mut rep: Vec<u32> = (0..p).collect();
        if let Some(last) = self.levels.last() {
            let mut into: Vec<u32> = (0..p).collect();
            for &(x, y) in &last.pairs {
                into[x as usize] = y;
            }
            rep = last.rep_before.iter().map(|&r| into[r as usize]).collect();
        }
        rep
    }

    /// Virtual rank of each physical rank that survives.
    fn virt_of(&self) -> Vec<Option<u32>> {
        let mut v = vec![None; self.layout.ranks() as usize];
        for (i, &q) in self.phys.iter().enumerate() {
            v[q as usize] = Some(i as u32);
        }
        v
    }

    /// The fold steps, from `step`; `what(level, folded)` is what the folded rank sends.
    fn fold(&self, s: &mut Schedule, mut step: usize, what: impl Fn(&FoldLevel, u32) -> Blocks, op: RecvOp) -> usize {
        for l in &self.levels {
            let port = 2 * l.dim as u16;
            for &(x, y) in &l.pairs {
                s.exchange(step, x, y, Some(port), Some(port + 1), what(l, x), op);
            }
            step += 1;
        }
        step
    }

    /// The unfold steps (reverse order), from `step`; survivors send `what(level, folded)`.
    fn unfold(&self, s: &mut Schedule, mut step: usize, what: impl Fn(&FoldLevel, u32) -> Blocks) -> usize {
        for l in self.levels.iter().rev() {
            let port = 2 * l.dim as u16;
            for &(x, y) in &l.pairs {
                s.exchange(step, y, x, Some(port + 1), Some(port), what(l, x), RecvOp::Copy);
            }
            step += 1;
        }
        step
    }

    fn bits(&self, dim: usize) -> u32 {
        self.vdims[dim].trailing_zeros()
    }

    /// Dimensions that take part in the algorithm (folded size > 1).
    fn active(&self) -> Vec<usize> {
        (0..self.vdims.len()).filter(|&d| self.vdims[d] > 1).collect()
    }

    /// `(dim, bit)` of every step, round-robin over the active dimensions starting at the
    /// `start`-th one.
    fn steps(&self, start: usize) -> Vec<(usize, u32)> {
        let active = self.active();
        let rounds = active.iter().map(|&d| self.bits(d)).max().unwrap_or(0);
        let mut out = Vec::new();
        for bit in 0..rounds {
            for i in 0..active.len() {
                let dim = active[(start + i) % active.len()];
                if bit < self.bits(dim) {
                    out.push((dim, bit));
                }
            }
        }
        out
    }

    /// Peer of virtual rank `v` at step `(dim, bit)`, and the port it sends on.
    /// `direction`: `None` = minimal direction; `Some(false)` = plain rule (`+` if the bit is
    /// 0), `Some(true)` = mirrored rule.
    fn peer(&self, v: u32, dim: usize, bit: u32, direction: Option<bool>) -> (u32, u16) {
        let mut c = self.virt.coords(v);
        let a = c[dim];
        let d = self.vdims[dim];
        let set = a >> bit & 1 == 1;
        let mirrored = direction == Some(true);
        let up = set == mirrored; // plain: + iff the bit is 0; mirrored: the opposite
        c[dim] = if up { (a + (1 << bit)) % d } else { (a + d - (1 << bit)) % d };
        let u = self.virt.rank(&c);
        let port = match direction {
            Some(_) => 2 * dim as u16 + u16::from(!up),
            None => {
                let (pv, pu) = (self.layout.coords(self.phys[v as usize]), self.layout.coords(self.phys[u as usize]));
                self.layout.port_towards(dim, pu[dim] as i64 - pv[dim] as i64)
            }
        };
        (u, port)
    }
}

/// True if every reduction can be kept in rank order (see the module docs).
fn linear(layout: &Layout) -> bool {
    layout.dims.iter().filter(|&&d| d > 1).count() <= 1
}

/// Latency-optimal recursive doubling (allreduce only, one block).
pub fn recursive_doubling_latency(collective: Collective, layout: &Layout) -> Result<Schedule, String> {
    let name = "recursive-doubling-latency";
    if collective != Collective::Allreduce {
        return Err(format!("{name} supports allreduce only, not {collective:?}"));
    }
    let p = layout.ranks();
    let f = Folding::new(layout);
    let mut s = Schedule::new(collective, name, p, 1);
    s.torus = Some(layout.dims.clone());
    s.noncommutative_safe = linear(layout);
    let all = Blocks::range(0, 1);
    let mut step = f.fold(&mut s, 0, |_, _| all.clone(), RecvOp::ReduceIncomingFirst);
    for (dim, bit) in f.steps(0) {
        for v in 0..f.virt.ranks() {
            let (u, port) = f.peer(v, dim, bit, None);
            let (from, to) = (f.phys[v as usize], f.phys[u as usize]);
            s.exchange(step, from, to, Some(port), Some(port ^ 1), all.clone(), rank_order_op(from, to));
        }
        step += 1;
    }
    f.unfold(&mut s, step, |_, _| all.clone());
    Ok(s)
}

/// Bandwidth-optimised recursive doubling (Rabenseifner): recursive-halving reduce-scatter
/// then recursive-doubling allgather, on one port.
pub fn recursive_doubling_bandwidth(collective: Collective, layout: &Layout) -> Result<Schedule, String> {
    butterfly(collective, layout, "recursive-doubling-bandwidth", false)
}

/// Mirrored recursive doubling: `D` plain + `D` mirrored bandwidth-optimised collectives.
pub fn recursive_doubling_mirrored(collective: Collective, layout: &Layout) -> Result<Schedule, String> {
    butterfly(collective, layout, "recursive-doubling-mirrored", true)
}

fn butterfly(collective: Collective, layout: &Layout, name: &str, mirrored: bool) -> Result<Schedule, String> {
    let (rs, ag) = halves(collective, name)?;
    let p = layout.ranks();
    let f = Folding::new(layout);
    let ndim = f.active().len();
    // Part `c`: starting dimension and direction rule.
    let parts: Vec<(usize, Option<bool>)> = if mirrored && ndim > 0 {
        (0..2 * ndim).map(|c| (c % ndim, Some(c >= ndim))).collect()
    } else {
        vec![(0, None)]
    };
    let steps: Vec<Vec<(usize, u32)>> = parts.iter().map(|&(start, _)| f.steps(start)).collect();
    let len = steps[0].len();
    let nv = f.virt.ranks();
    // key[c][v]: the bits of virtual rank `v` flipped by part `c`'s steps, first step most
    // significant. After `t` reduce-scatter steps a rank holds the chunks whose owners' keys
    // share its first `t` bits — a range once chunks are sorted by key.
    let key: Vec<Vec<u32>> = steps
        .iter()
        .map(|st| {
            (0..nv)
                .map(|v| {
                    let c = f.virt.coords(v);
                    st.iter().fold(0, |k, &(dim, bit)| k << 1 | (c[dim] >> bit & 1))
                })
                .collect()
        })
        .collect();
    let rep = f.rep();
    let virt_of = f.virt_of();
    let owner_key =
        |c: usize, q: u32| key[c][virt_of[rep[q as usize] as usize].expect("representatives survive") as usize];
    let order: Vec<Vec<u32>> = (0..parts.len())
        .map(|c| {
            let mut o: Vec<u32> = (0..p).collect();
            o.sort_by_key(|&q| (owner_key(c, q), q));
            o
        })
        .collect();
    let sorted_keys: Vec<Vec<u32>> =
        (0..parts.len()).map(|c| order[c].iter().map(|&q| owner_key(c, q)).collect()).collect();
    let chunks = Chunks::new(collective, p, order);
    // Chunks of part `c` whose key starts with the first `t` bits of `v`'s key.
    let prefix_range = |c: usize, v: u32, t: usize| -> Blocks {
        let shift = len - t;
        let pre = if t == 0 { 0 } else { key[c][v as usize] >> shift };
        let ks = &sorted_keys[c];
        let lo = ks.partition_point(|&k| (k as u64) < (pre as u64) << shift);
        let hi = ks.partition_point(|&k| (k as u64) < ((pre as u64) + 1) << shift);
        chunks.range(c as u32, lo as u32, hi as u32)
    };

    let mut s = Schedule::new(collective, name, p, chunks.blocks());
    s.block_owner = chunks.owners();
    s.torus = Some(layout.dims.clone());
    s.noncommutative_safe = collective == Collective::Allgather || (!mirrored && linear(layout));
    let folded_into = |l: &FoldLevel, x: u32| chunks.of_owners((0..p).filter(|&q| l.rep_before[q as usize] == x));
    let mut step = match collective {
        Collective::Allgather => f.fold(&mut s, 0, folded_into, RecvOp::Copy),
        _ => f.fold(&mut s, 0, |_, _| chunks.all(), RecvOp::ReduceIncomingFirst),
    };
    if rs {
        // (`t` is a step number: it indexes each part's steps, `steps[c][t]`, not `steps`.)
        #[allow(clippy::needless_range_loop)]
        for t in 0..len {
            for (c, &(_, dir)) in parts.iter().enumerate() {
                let (dim, bit) = steps[c][t];
                for v in 0..nv {
                    let (u, port) = f.peer(v, dim, bit, dir);
                    let (from, to) = (f.phys[v as usize], f.phys[u as usize]);
                    s.exchange(
                        step,
                        from,
                        to,
                        Some(port),
                        Some(port ^ 1),
                        prefix_range(c, u, t + 1),
                        rank_order_op(from, to),
                    );
                }
            }
            step += 1;
        }
    }
    if ag {
        for t in (0..len).rev() {
            for (c, &(_, dir)) in parts.iter().enumerate() {
                let (dim, bit) = steps[c][t];
                for v in 0..nv {
                    let (u, port) = f.peer(v, dim, bit, dir);
                    s.exchange(
                        step,
                        f.phys[v as usize],
                        f.phys[u as usize],
                        Some(port),
                        Some(port ^ 1),
                        prefix_range(c, v, t + 1),
                        RecvOp::Copy,
                    );
                }
            }
            step += 1;
        }
    }
    match collective {
        Collective::ReduceScatter => f.unfold(&mut s, step, folded_into),
        _ => f.unfold(&mut s, step, |_, _| chunks.all()),
    };
    Ok(s)
}
