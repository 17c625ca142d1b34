//! Swing (De Sensi, Bonato, Saam, Hoefler, "Swing: Short-cutting Rings for Higher Bandwidth
//! Allreduce", NSDI'24) as schedule generators.
//!
//! # Peers
//!
//! On a ring of `m` nodes, node `a` talks at step `s` to `π(a, s) = a ± ρ(s) mod m` (`+` for
//! even `a`, `−` for odd `a`), `ρ(s) = Σ_{i=0..s} (−2)^i`, at ring distance `δ(s) = |ρ(s)|`
//! (Eq. 2). On a torus, a collective runs its per-dimension steps round-robin over the
//! dimensions starting from its start dimension, skipping a dimension once its
//! `⌈log2 m_i⌉` steps are exhausted (§4.1/§4.2); at per-dimension step `σ` in dimension `i`
//! the coordinate `a_i` moves by `±ρ(σ)` (sign by the parity of `a_i`, magnitude `δ(σ)`).
//! (§4.1 writes the offset as `δ(σ(s))` with a parity sign; read literally that would pair
//! node 0 with node 1 twice, so the signed `ρ(σ(s))` of Eq. 2 is used, whose magnitude is
//! `δ`.)
//!
//! # Multiport
//!
//! With `D` dimensions of size > 1 (dimensions of size 1 are ignored), the vector is split
//! into `2D` parts and `2D` collectives run in lockstep, one per part: collective `c < D` is
//! *plain* and starts in the `c`-th dimension; collective `D + c` is its *mirror* (same
//! dimension order, every offset negated). Every transfer carries the port towards its peer
//! (minimal direction; for a peer at exactly half the ring, the direction of the
//! collective's signed offset, so plain and mirror use opposite ports), and the receive
//! carries the port the message arrives on. On a square power-of-two torus each rank uses
//! all `2D` ports in every step. Within a step, each rank's transfers are listed in
//! collective order (`c = 0..2D`).
//!
//! # Bandwidth-optimal (`swing-bandwidth`)
//!
//! Reduce-scatter then allgather. In the reduce-scatter rank `r` sends to its peer `q` the
//! blocks of `q` and of every rank `q` reaches in later steps (`get_rs_idxs`, Fig. 3); if a
//! block would be sent at two steps (even non-power-of-two sizes, §3.2/A.2) it is sent only
//! at the last of them. This is computed per dimension as a next-hop table (the 1D rule
//! above) and composed over the dimensions: a block leaves `r` at the earliest step, over
//! the dimensions in which `r` and the block's owner differ, of the per-dimension next hop.
//! Every rank sends every other rank's block exactly once per collective, so every rank
//! moves `2·(p−1)/p` of the vector for any `p`. The allgather is the exact reverse.
//!
//! Block ids: reduce-scatter and allgather use `owner·2D + c` (MPI semantics: rank `r` owns
//! the contiguous segment `[r·2D, (r+1)·2D)`). Allreduce (and the bandwidth broadcast /
//! reduce) use `c·p + slot`, where slots are the depth-first order of the collective's
//! reach tree (§3.1.1 "logical remapping"): on power-of-two tori every message is then one
//! contiguous range. (Non-power-of-two sizes fall back to a best-effort order.)
//!
//! Odd sizes (§3.2, Fig. 4) are handled **per dimension**: in a dimension of odd size `d`
//! the Swing ring runs on coordinates `0..d−1` (an even ring of `d−1` nodes, whose wrap
//! link goes through the extra coordinate) and the extra coordinate `d−1` exchanges
//! directly with each other coordinate once, spread over the steps of that dimension: at
//! step `σ` with `⌈rem/2⌉` of the remaining coordinates, in order, and all the rest at the
//! last step (7 nodes: step 0 with 0,1,2; step 1 with 3,4; step 2 with 5). In the
//! reduce-scatter the extra node sends a regular node's block directly to it and receives
//! its own block directly (per dimension: a block whose owner's coordinate is the extra
//! one goes there directly). This keeps torus locality on multidimensional tori (`7x3`,
//! `3x3x3`, `10x5`) instead of flattening the torus to `p` ranks; odd `p` in 1D is the
//! paper's scheme exactly.
//!
//! # Latency-optimal (`swing-latency`)
//!
//! Same peers; every step each of the `2D` collectives exchanges and reduces its whole
//! part. With a non-power-of-two dimension size `d`, the collective runs on the largest
//! power-of-two sub-torus (`d' ≤ d` per dimension, as for latency-optimal recursive
//! doubling, §2.3.2): one pre-step in which every rank outside it sends its vector to its
//! representative (coordinates `a_i ≥ d'_i` replaced by `a_i − d'_i`), and one post-step
//! returning the result: `log2 p' + 2` steps. (Full-vector exchanges on the whole
//! non-power-of-two ring would double-count contributions in the last step.)
//!
//! # Other collectives
//!
//! `swing-bandwidth`: allreduce, reduce-scatter, allgather, broadcast (scatter down the
//! Swing tree of the root, then allgather) and reduce (reduce-scatter, then gather up the
//! same tree). `swing-latency`: allreduce, broadcast and reduce with whole parts per step,
//! along the Swing tree of the root (the allgather / reduce-scatter tree of the root's
//! block), any size. `swing-latency` has no reduce-scatter / allgather (an error).
//!
//! # Non-commutative operators
//!
//! The generator chooses each reduction's operand order to keep contributions in rank
//! order where possible and sets `noncommutative_safe` only when every final value is
//! `x₀ ⊕ … ⊕ x_{p−1}` (the checker proves the claim). Swing's partial sums cover *cyclic*
//! rank intervals (e.g. ranks `{6,7,0,1}` at 8 nodes, and the mirrored collectives start
//! with `{p−1, 0}`), so despite §3.1.1 this holds only for trivial cases (`p ≤ 2`, and the
//! copy-only allgather and broadcast).

use super::Layout;
use crate::ir::{Blocks, Collective, RecvOp, Schedule};
use std::collections::BTreeMap;

/// Bandwidth-optimal Swing: reduce-scatter + allgather, multiport.
pub const SWING_BANDWIDTH: &str = "swing-bandwidth";
/// Latency-optimal Swing: whole vector every step, multiport.
pub const SWING_LATENCY: &str = "swing-latency";

/// `ρ(s) = Σ_{i=0..s} (−2)^i = (1 − (−2)^{s+1}) / 3`.
pub fn rho(s: u32) -> i64 {
    (1 - (-2i64).pow(s + 1)) / 3
}

/// `δ(s) = |ρ(s)|`, the distance between peers at step `s`.
pub fn delta(s: u32) -> i64 {
    rho(s).abs()
}

/// Eq. 2: the peer of `r` at step `s` on a ring of `p` nodes.
pub fn pi(r: u32, s: u32, p: u32) -> u32 {
    let off = if r & 1 == 0 { rho(s) } else { -rho(s) };
    (r as i64 + off).rem_euclid(p as i64) as u32
}

fn ceil_log2(m: u32) -> u32 {
    if m <= 1 {
        0
    } else {
        32 - (m - 1).leading_zeros()
    }
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Mode {
    /// Swing on even rings, extra node for odd sizes.
    Bandwidth,
    /// Swing on the largest power-of-two prefix of each dimension.
    Folded,
}

/// The 1D pattern of one dimension for one direction (plain `eps = 1`, mirrored `−1`).
struct Line {
    /// Physical ring size.
    d: u32,
    /// Swing ring: coordinates `0..m`.
    m: u32,
    /// Coordinate `m` (= `d−1`) is the extra node of an odd dimension.
    extra: bool,
    steps: u32,
    eps: i64,
    /// Step at which regular coordinate `a` exchanges with the extra node.
    dir_step: Vec<u32>,
    /// `reach[σ][a]`: coordinates of the Swing ring that `a` reaches with steps `≥ σ`.
    reach: Vec<Vec<Vec<u64>>>,
    /// Precomputed [`Line::next_hop`] (`d·d` entries; empty for very large rings).
    nh: Vec<(u32, u32)>,
}

/// Rings up to this size get a precomputed next-hop table.
const NH_TABLE_MAX: u32 = 1024;

fn bit(set: &[u64], i: u32) -> bool {
    set[(i / 64) as usize] >> (i % 64) & 1 == 1
}

impl Line {
    fn new(d: u32, eps: i64, mode: Mode) -> Result<Line, String> {
        let (m, extra) = match mode {
            Mode::Bandwidth if d % 2 == 1 && d > 1 => (d - 1, true),
            Mode::Bandwidth => (d, false),
            Mode::Folded => (if d == 0 { 0 } else { 1u32 << (31 - d.leading_zeros()) }, false),
        };
        let steps = ceil_log2(m);
        let mut line = Line { d, m, extra, steps, eps, dir_step: Vec::new(), reach: Vec::new(), nh: Vec::new() };
        let words = (m as usize).div_ceil(64).max(1);
        let mut reach = vec![Vec::new(); steps as usize + 1];
        reach[steps as usize] = (0..m)
            .map(|a| {
                let mut s = vec![0u64; words];
                s[(a / 64) as usize] |= 1 << (a % 64);
                s
            })
            .collect();
        for sg in (0..steps).rev() {
            let next = &reach[sg as usize + 1];
            let cur: Vec<Vec<u64>> = (0..m)
                .map(|a| {
                    let q = line.swing_peer(a, sg);
                    next[a as usize].iter().zip(&next[q as usize]).map(|(x, y)| x | y).collect()
                })
                .collect();
            reach[sg as usize] = cur;
        }
        for a in 0..m {
            if (0..m).any(|t| !bit(&reach[0][a as usize], t)) {
                return Err(format!("swing: the Swing pattern on a ring of {m} does not reach every node"));
            }
        }
        line.reach = reach;
        if extra {
            let mut rem = m;
            let mut next = 0;
            for sg in 0..steps {
                let take = if sg + 1 == steps { rem } else { rem.div_ceil(2) };
                for _ in 0..take {
                    line.dir_step.push(sg);
                    next += 1;
                }
                rem -= take;
            }
            debug_assert_eq!(next, m);
        }
        if mode == Mode::Bandwidth && d <= NH_TABLE_MAX {
            let mut nh = vec![(u32::MAX, u32::MAX); (d * d) as usize];
            for a in 0..d {
                for t in (0..d).filter(|&t| t != a) {
                    nh[(a * d + t) as usize] = line.compute_next_hop(a, t);
                }
            }
            line.nh = nh;
        }
        Ok(line)
    }

    /// Signed offset of regular coordinate `a` at per-dimension step `sg`.
    fn offset(&self, a: u32, sg: u32) -> i64 {
        let par = if a & 1 == 0 { 1 } else { -1 };
        self.eps * par * rho(sg)
    }

    fn swing_peer(&self, a: u32, sg: u32) -> u32 {
        (a as i64 + self.offset(a, sg)).rem_euclid(self.m as i64) as u32
    }

    fn is_regular(&self, a: u32) -> bool {
        a < self.m
    }

    /// Next hop `(σ, q)` from coordinate `a` towards coordinate `t ≠ a` (bandwidth mode):
    /// the last step whose peer still reaches `t`, or the direct exchange with the extra node.
    fn next_hop(&self, a: u32, t: u32) -> (u32, u32) {
        if self.nh.is_empty() {
            self.compute_next_hop(a, t)
        } else {
            self.nh[(a * self.d + t) as usize]
        }
    }

    fn compute_next_hop(&self, a: u32, t: u32) -> (u32, u32) {
        if self.extra && t == self.m {
            return (self.dir_step[a as usize], t);
        }
        if self.extra && a == self.m {
            return (self.dir_step[t as usize], t);
        }
        for sg in (0..self.steps).rev() {
            let q = self.swing_peer(a, sg);
            if bit(&self.reach[sg as usize + 1][q as usize], t) {
                return (sg, q);
            }
        }
        unreachable!("coverage is verified in Line::new")
    }

    /// Port direction (0 = `+`, 1 = `−`) from `a` to `q` at step `sg`: minimal physical
    /// direction; on a tie, the direction of the Swing offset.
    fn port_dir(&self, a: u32, q: u32, sg: u32) -> u16 {
        let d = self.d as u64;
        let fwd = (q as u64 + d - a as u64) % d;
        if 2 * fwd < d {
            0
        } else if 2 * fwd > d {
            1
        } else if self.is_regular(a) && self.offset(a, sg) > 0 {
            0
        } else {
            1
        }
    }
}

/// The order in which a collective starting in dimension `start` runs its per-dimension
/// steps (`per_dim[i]` of them in dimension `i`): round-robin over the dimensions, skipping a
/// dimension once its steps are exhausted (§4.1/§4.2). Entry `k` is global step `k`'s
/// (dimension, per-dimension step).
pub(crate) fn step_sequence(per_dim: &[u32], start: usize) -> Vec<(usize, u32)> {
    let nd = per_dim.len();
    let steps: usize = per_dim.iter().map(|&s| s as usize).sum();
    let mut used = vec![0u32; nd];
    let mut seq = Vec::with_capacity(steps);
    let mut i = start;
    while seq.len() < steps {
        if used[i] < per_dim[i] {
            seq.push((i, used[i]));
            used[i] += 1;
        }
        i = (i + 1) % nd;
    }
    seq
}

/// One of the `2D` concurrent collectives.
struct Coll {
    mirrored: bool,
    /// Global step → (dimension, per-dimension step).
    seq: Vec<(usize, u32)>,
    /// `pos[dim][σ]` = global step.
    pos: Vec<Vec<usize>>,
}

struct Pattern {
    p: u32,
    coords: Vec<Vec<u32>>,
    strides: Vec<u32>,
    /// `[plain, mirrored]` lines per dimension.
    lines: [Vec<Line>; 2],
    colls: Vec<Coll>,
    /// Steps of one pass (same for every collective).
    steps: usize,
}

impl Pattern {
    fn new(layout: &Layout, mode: Mode) -> Result<Pattern, String> {
        let p = layout.ranks();
        let nd = layout.ndims();
        let coords: Vec<Vec<u32>> = (0..p).map(|r| layout.coords(r)).collect();
        let mut strides = Vec::with_capacity(nd);
        let mut acc = 1u32;
        for &d in &layout.dims {
            strides.push(acc);
            acc *= d;
        }
        let plain = layout.dims.iter().map(|&d| Line::new(d, 1, mode)).collect::<Result<Vec<_>, _>>()?;
        let mirror = layout.dims.iter().map(|&d| Line::new(d, -1, mode)).collect::<Result<Vec<_>, _>>()?;
        let per_dim: Vec<u32> = plain.iter().map(|l| l.steps).collect();
        let active: Vec<usize> = (0..nd).filter(|&i| per_dim[i] > 0).collect();
        let steps: usize = per_dim.iter().map(|&s| s as usize).sum();
        let mut colls = Vec::new();
        let starts: Vec<usize> = if active.is_empty() { vec![0] } else { active.clone() };
        for mirrored in [false, true] {
            for &start in &starts {
                let seq = step_sequence(&per_dim, start);
                let mut pos: Vec<Vec<usize>> = per_dim.iter().map(|&s| vec![0; s as usize]).collect();
                for (k, &(i, sg)) in seq.iter().enumerate() {
                    pos[i][sg as usize] = k;
                }
                colls.push(Coll { mirrored, seq, pos });
            }
        }
        Ok(Pattern { p, coords, strides, lines: [plain, mirror], colls, steps })
    }

    fn ncoll(&self) -> u32 {
        self.colls.len() as u32
    }

    fn line(&self, c: usize, dim: usize) -> &Line {
        &self.lines[self.colls[c].mirrored as usize][dim]
    }

    fn with_coord(&self, r: u32, dim: usize, v: u32) -> u32 {
        let a = self.coords[r as usize][dim];
        (r as i64 + (v as i64 - a as i64) * self.strides[dim] as i64) as u32
    }

    /// Bandwidth mode: where collective `c` at rank `r` sends block-owner `b`'s data in the
    /// reduce-scatter: `(global step, peer, port)`.
    fn first_hop(&self, c: usize, r: u32, b: u32) -> (usize, u32, u16) {
        let a = &self.coords[r as usize];
        let t = &self.coords[b as usize];
        let mut best: Option<(usize, usize, u32, u32)> = None;
        for i in 0..a.len() {
            if a[i] != t[i] {
                let (sg, qi) = self.line(c, i).next_hop(a[i], t[i]);
                let k = self.colls[c].pos[i][sg as usize];
                if !matches!(best, Some((bk, ..)) if bk <= k) {
                    best = Some((k, i, sg, qi));
                }
            }
        }
        let (k, i, sg, qi) = best.expect("r != b");
        let port = 2 * i as u16 + self.line(c, i).port_dir(a[i], qi, sg);
        (k, self.with_coord(r, i, qi), port)
    }

    /// Swing peer of `r` in collective `c` at global step `k` (regular coordinates only).
    fn swing_peer(&self, c: usize, r: u32, k: usize) -> Option<(u32, u16)> {
        let (i, sg) = self.colls[c].seq[k];
        let line = self.line(c, i);
        let a = self.coords[r as usize][i];
        if !line.is_regular(a) {
            return None;
        }
        let q = line.swing_peer(a, sg);
        Some((self.with_coord(r, i, q), 2 * i as u16 + line.port_dir(a, q, sg)))
    }

    /// Depth-first order of collective `c`'s reach tree from rank 0 (a permutation of the
    /// ranks on power-of-two tori; deduplicated and completed otherwise). Returns the slot
    /// of each rank.
    fn slots(&self, c: usize) -> Vec<u32> {
        fn rec(pat: &Pattern, c: usize, r: u32, k: usize, out: &mut Vec<u32>) {
            if k == pat.steps {
                out.push(r);
                return;
            }
            rec(pat, c, r, k + 1, out);
            if let Some((q, _)) = pat.swing_peer(c, r, k) {
                rec(pat, c, q, k + 1, out);
            }
        }
        let mut order = Vec::new();
        rec(self, c, 0, 0, &mut order);
        let mut slot = vec![u32::MAX; self.p as usize];
        let mut n = 0;
        for r in order.into_iter().chain(0..self.p) {
            if slot[r as usize] == u32::MAX {
                slot[r as usize] = n;
                n += 1;
            }
        }
        slot
    }
}

/// Most rank × block pairs whose reduction order [`finish`] tracks (≈ 400 MB).
const TRACK_LIMIT: usize = 1 << 25;

/// A planned transfer (the op of reductions is chosen in [`finish`]).
struct Xfer {
    step: usize,
    from: u32,
    to: u32,
    port_out: Option<u16>,
    port_in: Option<u16>,
    blocks: Blocks,
    reduce: bool,
}

impl Xfer {
    fn new(step: usize, from: u32, to: u32, port: u16, blocks: Blocks, reduce: bool) -> Xfer {
        Xfer { step, from, to, port_out: Some(port), port_in: Some(port ^ 1), blocks, reduce }
    }
}

/// Bandwidth-mode reduce-scatter messages of every collective: `(step, c, from, to)` →
/// `(port, block ids)`, with `id(c, owner)` the block id of `owner`'s block of collective `c`.
type Msgs = BTreeMap<(usize, usize, u32, u32), (u16, Blocks)>;

fn rs_messages(pat: &Pattern, id: &dyn Fn(usize, u32) -> u32) -> Msgs {
    let mut msgs: Msgs = BTreeMap::new();
    // Per (collective, rank) the hops go to few (step, peer) pairs: collect them locally.
    let mut local: Vec<(usize, u32, u16, Vec<u32>)> = Vec::new();
    for c in 0..pat.colls.len() {
        for r in 0..pat.p {
            local.clear();
            for b in (0..pat.p).filter(|&b| b != r) {
                let (k, q, port) = pat.first_hop(c, r, b);
                match local.iter_mut().find(|e| e.0 == k && e.1 == q) {
                    Some(e) => e.3.push(b),
                    None => local.push((k, q, port, vec![b])),
                }
            }
            for (k, q, port, owners) in local.drain(..) {
                msgs.insert((k, c, r, q), (port, Blocks::from_ids(owners.into_iter().map(|b| id(c, b)))));
            }
        }
    }
    msgs
}

/// Owner-indexed reduce-scatter tree of collective `c` towards `root`: for every other
/// rank, `(step, parent, port)`.
fn tree_to(pat: &Pattern, c: usize, root: u32) -> Vec<Option<(usize, u32, u16)>> {
    (0..pat.p).map(|r| (r != root).then(|| pat.first_hop(c, r, root))).collect()
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Iv {
    Absent,
    /// `x_lo ⊕ … ⊕ x_hi` in rank order.
    Ord(u32, u32),
    Mixed,
}

fn merge(first: Iv, second: Iv) -> Iv {
    match (first, second) {
        (Iv::Ord(a, b), Iv::Ord(c, d)) if b + 1 == c => Iv::Ord(a, d),
        _ => Iv::Mixed,
    }
}

/// Chooses reduction orders (tracking rank-order intervals like the checker), emits the
/// transfers and sets `noncommutative_safe` when every final value is in rank order.
fn finish(mut s: Schedule, mut xfers: Vec<Xfer>) -> Schedule {
    let p = s.ranks;
    let nb = s.blocks as usize;
    // Rank-order tracking needs p·blocks intervals; above TRACK_LIMIT (16k-rank tori) the
    // reduction order is not tracked: the schedule is then never marked
    // `noncommutative_safe` (which it is not for p > 2 anyway) and reductions put the
    // lower rank's operand first.
    let track = p as usize * nb <= TRACK_LIMIT;
    let mut v = vec![Iv::Absent; if track { p as usize * nb } else { 0 }];
    let full = Iv::Ord(0, p - 1);
    for r in (0..p).filter(|_| track) {
        for b in 0..nb {
            v[r as usize * nb + b] = match s.collective {
                Collective::Allreduce | Collective::ReduceScatter | Collective::Reduce { .. } => Iv::Ord(r, r),
                Collective::Allgather if s.block_owner[b] == r => full,
                Collective::Broadcast { root } if root == r => full,
                _ => Iv::Absent,
            };
        }
    }
    xfers.sort_by_key(|x| x.step);
    let mut i = 0;
    while i < xfers.len() {
        let step = xfers[i].step;
        let mut j = i;
        while j < xfers.len() && xfers[j].step == step {
            j += 1;
        }
        if !track {
            for x in &xfers[i..j] {
                let op = if !x.reduce {
                    RecvOp::Copy
                } else if x.from < x.to {
                    RecvOp::ReduceIncomingFirst
                } else {
                    RecvOp::ReduceLocalFirst
                };
                s.exchange(x.step, x.from, x.to, x.port_out, x.port_in, x.blocks.clone(), op);
            }
            i = j;
            continue;
        }
        let incoming: Vec<Vec<Iv>> = xfers[i..j]
            .iter()
            .map(|x| x.blocks.iter().map(|b| v[x.from as usize * nb + b as usize]).collect())
            .collect();
        for (x, inc) in xfers[i..j].iter().zip(incoming) {
            let at = |b: u32| x.to as usize * nb + b as usize;
            let op = if !x.reduce {
                for (b, &val) in x.blocks.iter().zip(&inc) {
                    v[at(b)] = val;
                }
                RecvOp::Copy
            } else {
                let ok = |incoming_first: bool| {
                    x.blocks.iter().zip(&inc).all(|(b, &val)| {
                        let local = v[at(b)];
                        let m = if incoming_first { merge(val, local) } else { merge(local, val) };
                        m != Iv::Mixed
                    })
                };
                let incoming_first = if ok(true) {
                    true
                } else if ok(false) {
                    false
                } else {
                    x.from < x.to
                };
                for (b, &val) in x.blocks.iter().zip(&inc) {
                    let local = v[at(b)];
                    v[at(b)] = if incoming_first { merge(val, local) } else { merge(local, val) };
                }
                if incoming_first {
                    RecvOp::ReduceIncomingFirst
                } else {
                    RecvOp::ReduceLocalFirst
                }
            };
            s.exchange(x.step, x.from, x.to, x.port_out, x.port_in, x.blocks.clone(), op);
        }
        i = j;
    }
    let ok = |r: u32, b: usize| v[r as usize * nb + b] == full;
    s.noncommutative_safe = track
        && match s.collective {
            Collective::ReduceScatter => (0..nb).all(|b| ok(s.block_owner[b], b)),
            Collective::Reduce { root } => (0..nb).all(|b| ok(root, b)),
            _ => (0..p).all(|r| (0..nb).all(|b| ok(r, b))),
        };
    s.trim();
    s
}

fn new_schedule(collective: Collective, name: &str, layout: &Layout, blocks: u32) -> Schedule {
    let mut s = Schedule::new(collective, name, layout.ranks(), blocks);
    s.torus = Some(layout.dims.clone());
    s
}

/// Bandwidth-optimal Swing for any collective on any torus shape.
pub fn swing_bandwidth(collective: Collective, layout: &Layout) -> Result<Schedule, String> {
    let pat = Pattern::new(layout, Mode::Bandwidth)?;
    let p = pat.p;
    let nc = pat.ncoll();
    let k = pat.steps;
    let mut s = new_schedule(collective, SWING_BANDWIDTH, layout, nc * p);
    // Block ids.
    let owner_major = matches!(collective, Collective::ReduceScatter | Collective::Allgather);
    let slots: Vec<Vec<u32>> = if owner_major { Vec::new() } else { (0..nc as usize).map(|c| pat.slots(c)).collect() };
    let id = |c: usize, owner: u32| -> u32 {
        if owner_major {
            owner * nc + c as u32
        } else {
            c as u32 * p + slots[c][owner as usize]
        }
    };
    if owner_major {
        s.block_owner = (0..nc * p).map(|b| b / nc).collect();
    }
    if let Collective::Broadcast { root } | Collective::Reduce { root } = collective {
        if root >= p {
            return Err(format!("swing: root {root} is not a rank (p = {p})"));
        }
    }
    let mut xfers = Vec::new();
    let reduce_scatter = |offset: usize, xfers: &mut Vec<Xfer>, msgs: &Msgs| {
        for (&(step, _, from, to), (port, blocks)) in msgs {
            xfers.push(Xfer::new(offset + step, from, to, *port, blocks.clone(), true));
        }
    };
    let allgather = |offset: usize, xfers: &mut Vec<Xfer>, msgs: &Msgs| {
        let mut rev: Vec<_> = msgs.iter().collect();
        rev.sort_by_key(|e| {
            let (step, c, from, to) = *e.0;
            (k - 1 - step, c, to, from)
        });
        for (&(step, _, from, to), (port, blocks)) in rev {
            xfers.push(Xfer::new(offset + k - 1 - step, to, from, port ^ 1, blocks.clone(), false));
        }
    };
    match collective {
        Collective::Allreduce => {
            let msgs = rs_messages(&pat, &id);
            reduce_scatter(0, &mut xfers, &msgs);
            allgather(k, &mut xfers, &msgs);
        }
        Collective::ReduceScatter => reduce_scatter(0, &mut xfers, &rs_messages(&pat, &id)),
        Collective::Allgather => allgather(0, &mut xfers, &rs_messages(&pat, &id)),
        Collective::Alltoall => return Err(format!("{SWING_BANDWIDTH} does not build alltoall")),
        Collective::Broadcast { root } | Collective::Reduce { root } => {
            let is_bcast = matches!(collective, Collective::Broadcast { .. });
            let msgs = rs_messages(&pat, &id);
            if !is_bcast {
                reduce_scatter(0, &mut xfers, &msgs);
            }
            for c in 0..nc as usize {
                let tree = tree_to(&pat, c, root);
                // Subtree of each rank in the tree rooted at `root` (children send earlier in
                // the reduce-scatter order, so process ranks by decreasing step).
                let mut order: Vec<u32> = (0..p).filter(|&r| r != root).collect();
                order.sort_by_key(|&r| tree[r as usize].unwrap().0);
                let mut sub: Vec<Vec<u32>> = (0..p).map(|r| vec![r]).collect();
                for &r in &order {
                    let parent = tree[r as usize].unwrap().1;
                    let mine = std::mem::take(&mut sub[r as usize]);
                    sub[parent as usize].extend(&mine);
                    sub[r as usize] = mine;
                }
                let mut per_step: Vec<Xfer> = Vec::new();
                for &r in &order {
                    let (step, parent, port) = tree[r as usize].unwrap();
                    let blocks = Blocks::from_ids(sub[r as usize].iter().map(|&o| id(c, o)));
                    if is_bcast {
                        // Scatter: the reverse of the gather.
                        per_step.push(Xfer::new(k - 1 - step, parent, r, port ^ 1, blocks, false));
                    } else {
                        // Gather after the reduce-scatter: every rank holds its own block.
                        per_step.push(Xfer::new(k + step, r, parent, port, blocks, false));
                    }
                }
                xfers.extend(per_step);
            }
            if is_bcast {
                allgather(k, &mut xfers, &msgs);
            }
        }
    }
    // Keep collective order within a step (the sort in `finish` is stable).
    Ok(finish(s, xfers))
}

/// Latency-optimal Swing: allreduce, broadcast and reduce.
pub fn swing_latency(collective: Collective, layout: &Layout) -> Result<Schedule, String> {
    match collective {
        Collective::Allreduce => latency_allreduce(layout),
        Collective::Broadcast { root } | Collective::Reduce { root } => {
            let pat = Pattern::new(layout, Mode::Bandwidth)?;
            let p = pat.p;
            if root >= p {
                return Err(format!("swing: root {root} is not a rank (p = {p})"));
            }
            let nc = pat.ncoll();
            let k = pat.steps;
            let s = new_schedule(collective, SWING_LATENCY, layout, nc);
            let is_bcast = matches!(collective, Collective::Broadcast { .. });
            let mut xfers = Vec::new();
            for c in 0..nc as usize {
                for (r, hop) in tree_to(&pat, c, root).into_iter().enumerate() {
                    if let Some((step, parent, port)) = hop {
                        let b = Blocks::range(c as u32, c as u32 + 1);
                        xfers.push(if is_bcast {
                            Xfer::new(k - 1 - step, parent, r as u32, port ^ 1, b, false)
                        } else {
                            Xfer::new(step, r as u32, parent, port, b, true)
                        });
                    }
                }
            }
            // Order by step, then collective, then rank.
            xfers.sort_by_key(|x| x.step);
            Ok(finish(s, xfers))
        }
        Collective::ReduceScatter | Collective::Allgather | Collective::Alltoall => Err(format!(
            "{SWING_LATENCY} supports allreduce, broadcast and reduce; use {SWING_BANDWIDTH} for {collective:?}"
        )),
    }
}

fn latency_allreduce(layout: &Layout) -> Result<Schedule, String> {
    let pat = Pattern::new(layout, Mode::Folded)?;
    let p = pat.p;
    let nc = pat.ncoll();
    let s = new_schedule(Collective::Allreduce, SWING_LATENCY, layout, nc);
    let lines = &pat.lines[0];
    let active = |r: u32| pat.coords[r as usize].iter().zip(lines).all(|(&a, l)| a < l.m);
    let folded: Vec<u32> = (0..p).filter(|&r| !active(r)).collect();
    // Representative of a folded rank, with the ports of dimension-ordered routing.
    let rep = |r: u32| -> (u32, u16, u16) {
        let a = &pat.coords[r as usize];
        let mut q = r;
        let mut first = None;
        let mut last = 0;
        for (i, l) in lines.iter().enumerate() {
            if a[i] >= l.m {
                let t = a[i] - l.m;
                q = pat.with_coord(q, i, t);
                let dir = l.port_dir(a[i], t, 0);
                let port = 2 * i as u16 + dir;
                first.get_or_insert(port);
                last = port ^ 1;
            }
        }
        (q, first.unwrap(), last)
    };
    let all = Blocks::range(0, nc);
    let mut xfers = Vec::new();
    let pre = usize::from(!folded.is_empty());
    for &r in &folded {
        let (q, out, inn) = rep(r);
        xfers.push(Xfer {
            step: 0,
            from: r,
            to: q,
            port_out: Some(out),
            port_in: Some(inn),
            blocks: all.clone(),
            reduce: true,
        });
    }
    for k in 0..pat.steps {
        for c in 0..nc as usize {
            for r in (0..p).filter(|&r| active(r)) {
                let (q, port) = pat.swing_peer(c, r, k).expect("active ranks are regular");
                xfers.push(Xfer::new(pre + k, r, q, port, Blocks::range(c as u32, c as u32 + 1), true));
            }
        }
    }
    for &r in &folded {
        let (q, out, inn) = rep(r);
        // The reverse route: leave on the port the pre-step arrived on.
        xfers.push(Xfer {
            step: pre + pat.steps,
            from: q,
            to: r,
            port_out: Some(inn),
            port_in: Some(out),
            blocks: all.clone(),
            reduce: false,
        });
    }
    Ok(finish(s, xfers))
}

/// The timing plan of the bandwidth-optimal Swing allreduce, computed from message sizes
/// alone (no block sets): equal to `Plan::from_schedule(swing_bandwidth(allreduce))` but in
/// `O(p · 2D · steps · D)` time and `O(p · 2D · steps)` memory, so it scales to 16k-node tori.
///
/// A block owned by `t` leaves rank `r` (coordinates `a`) in the dimension `i` whose
/// per-dimension next hop towards `t_i` comes first in the collective's step order. So the
/// message of `r` at the step of dimension `i`'s step `σ` towards `q_i` carries
/// `n_i(σ, q_i) · Π_{j≠i} (1 + later_j)` blocks: `n_i` counts the coordinates `t_i ≠ a_i`
/// whose next hop is `(σ, q_i)`, and `later_j` the coordinates `t_j ≠ a_j` whose next hop
/// comes after that step (or `t_j = a_j`, the `1`).
pub fn bandwidth_allreduce_plan(layout: &Layout) -> Result<crate::plan::Plan, String> {
    use crate::plan::{Plan, PlanMsg};
    let pat = Pattern::new(layout, Mode::Bandwidth)?;
    let p = pat.p;
    let nc = pat.ncoll() as usize;
    let k = pat.steps;
    let nd = layout.ndims();
    let mut plan = Plan::new(SWING_BANDWIDTH, p, nc as u32 * p, Some(layout.dims.clone()));
    // groups[mirrored][dim][a] = [(σ, q, count)] over the targets t ≠ a.
    type NextHops = Vec<(u32, u32, u64)>;
    let groups: Vec<Vec<Vec<NextHops>>> = pat
        .lines
        .iter()
        .map(|lines| {
            lines
                .iter()
                .map(|line| {
                    (0..line.d)
                        .map(|a| {
                            let mut g = NextHops::new();
                            for t in (0..line.d).filter(|&t| t != a) {
                                let (sg, q) = line.next_hop(a, t);
                                match g.iter_mut().find(|e| e.0 == sg && e.1 == q) {
                                    Some(e) => e.2 += 1,
                                    None => g.push((sg, q, 1)),
                                }
                            }
                            g
                        })
                        .collect()
                })
                .collect()
        })
        .collect();
    // rs[step] = reduce-scatter messages of that step.
    let mut rs: Vec<Vec<PlanMsg>> = vec![Vec::new(); k];
    for c in 0..nc {
        let coll = &pat.colls[c];
        let m = coll.mirrored as usize;
        // later[dim][a][step] = 1 + #{t ≠ a whose next hop in `dim` is at a global step > step}.
        let later: Vec<Vec<Vec<u64>>> = (0..nd)
            .map(|j| {
                groups[m][j]
                    .iter()
                    .map(|g| {
                        (0..k)
                            .map(|kk| 1 + g.iter().filter(|e| coll.pos[j][e.0 as usize] > kk).map(|e| e.2).sum::<u64>())
                            .collect()
                    })
                    .collect()
            })
            .collect();
        for r in 0..p {
            let a = &pat.coords[r as usize];
            for i in 0..nd {
                let line = pat.line(c, i);
                for &(sg, qi, n) in &groups[m][i][a[i] as usize] {
                    let kk = coll.pos[i][sg as usize];
                    let mut count = n;
                    for j in (0..nd).filter(|&j| j != i) {
                        count *= later[j][a[j] as usize][kk];
                    }
                    let port = 2 * i as u16 + line.port_dir(a[i], qi, sg);
                    rs[kk].push(PlanMsg { from: r, to: pat.with_coord(r, i, qi), port, blocks: count as u32 });
                }
            }
        }
    }
    let ag: Vec<Vec<PlanMsg>> = rs
        .iter()
        .rev()
        .map(|msgs| {
            msgs.iter().map(|m| PlanMsg { from: m.to, to: m.from, port: m.port ^ 1, blocks: m.blocks }).collect()
        })
        .collect();
    for msgs in rs.into_iter().chain(ag) {
        plan.push_step(msgs);
    }
    Ok(plan)
}
