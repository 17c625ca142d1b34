//! Choosing between the latency- and bandwidth-optimal variant of an algorithm by vector size,
//! as the Swing paper's plots do (NSDI'24 §5.1: "for each size we only report the best
//! between the latency- and bandwidth-optimal versions").
//!
//! Two families are selectable: `swing` (`swing-latency` / `swing-bandwidth`) and
//! `recursive-doubling` (`recursive-doubling-latency` / `recursive-doubling-bandwidth`).
//! [`choose_variant`] compares the α-β cost of the two variants of the allreduce (the cost of
//! [`crate::model`]: `steps·α + β·Σ_s L_s·b_s + per_hop·Σ_s hops_s`), computed from closed
//! forms rather than from built schedules (a Swing-bandwidth schedule on 64×64 takes seconds
//! and gigabytes to build). [`build_for_size`] resolves a family name and builds the chosen
//! variant; every other name goes to [`algos::build`] unchanged.
//!
//! # Closed forms (torus of power-of-two dimension sizes, vector of `n` bytes)
//!
//! Dimensions of size 1 are ignored; `D'` is the number of the others. For each step `s` of
//! the schedule: `b_s`, the most bytes a rank sends on one port; `L_s·b_s`, the most bytes on
//! one directed link; `hops_s`, the longest path. All messages go straight along one
//! dimension, so a message over distance `h` takes `h` links.
//!
//! - **Swing.** `2D'` collectives (`D'` plain ones starting at each dimension, and their
//!   mirrors) each on `n/(2D')`. Per-dimension step counts are `log2 d_i`; collective `c`
//!   visits the dimensions round-robin from its start, skipping exhausted ones, so at global
//!   step `s` plain collective `c` is at per-dimension step `σ_c(s)` of some dimension. In a
//!   dimension, a plain collective and its mirror send in opposite directions (the sign of
//!   `±ρ(σ)` flips with the coordinate's parity and between plain and mirror), so every rank
//!   sends exactly one message of each such pair in each direction, over `δ(σ)` links. With
//!   `k_i(s)` plain collectives in dimension `i` at step `s` and `m_s` bytes per message:
//!   `b_s = m_s·max_i k_i(s)`, `L_s·b_s = m_s·max_i Σ_{c in i} δ(σ_c(s))` (every link of the
//!   dimension is crossed by exactly `δ` messages of each pair), `hops_s = max_c δ(σ_c(s))`.
//!   Bandwidth-optimal: `m_s = n/(2D')/2^{s+1}` for the `Σ log2 d_i` reduce-scatter steps, then
//!   the allgather repeats them in reverse order. Latency-optimal: `m_s = n/(2D')` for the
//!   `Σ log2 d_i` steps.
//! - **Recursive doubling.** One collective; steps flip bit `b` of one coordinate, round-robin
//!   over the dimensions bit by bit; peers are `2^b` apart, sending in the minimal direction
//!   (`+` from coordinates whose bit `b` is 0, everybody `+` when `2^b = d/2`). A link is then
//!   crossed by at most `2^b` messages (the `2^b` coordinates before it with bit `b` = 0):
//!   `L_s = 2^b`, `hops_s = 2^b`. Latency-optimal: `b_s = n` for every step.
//!   Bandwidth-optimal: `b_s = n/2^{t+1}` at reduce-scatter step `t`, then the allgather in
//!   reverse order.
//!
//! `crates/sched/tests/select.rs` checks every per-step quantity against
//! [`model::deficiencies`](crate::model::deficiencies) of the real schedules on 4×4, 8×8, 16×16,
//! 8×8×8 and more (within 1%).
//!
//! # Other shapes
//!
//! On tori with a non-power-of-two dimension size the loads are computed message by message
//! without building the schedule: the same peers, block counts and routing as the
//! generators and the model, with block counts in product form (Swing bandwidth: the
//! per-dimension next-hop tables composed over the dimensions; recursive doubling: the
//! folding weights; latency-optimal Swing: the pre- and post-step to the power-of-two
//! sub-torus), `O(p·steps·hops)` time. The tests find them exact too (7, 12, 3×5, 6×6, 9×8, 10×4,
//! 12×12, 6×6×6, 12×6×5). Above [`MAX_ENUMERATED_LINKS`] directed links the closed forms above
//! are used as an approximation ([`ClosedForm::exact`] is false): `⌈log2 m⌉` steps per
//! dimension with halving data and distances `δ(σ)` for Swing, the largest power-of-two
//! sub-torus plus a pre- and post-step for latency-optimal Swing, and two 1-hop steps per
//! folded dimension and distances stretched by `d / d'` for recursive doubling.
//!
//! Every cost is affine in the size, so [`choose_variant`] and [`crossover_bytes`] compute
//! each variant's loads once.

use crate::algos::{self, swing, Layout};
use crate::ir::{Collective, Schedule};
use crate::registry::{self, CostForm};

/// Names [`build_for_size`] resolves by vector size: the registry's families.
pub fn families() -> Vec<&'static str> {
    registry::all().iter().filter(|a| a.kind == registry::Kind::Family).map(|a| a.name).collect()
}

/// Smallest and largest sizes [`crossover_bytes`] considers: 32 B and 4 GiB.
pub const CROSSOVER_MIN_LOG2: u32 = 5;
pub const CROSSOVER_MAX_LOG2: u32 = 32;

/// `(latency-optimal, bandwidth-optimal)` variants of a family (from the registry).
pub fn variants(family: &str) -> Result<(&'static str, &'static str), String> {
    match registry::find(family).and_then(|a| a.variants) {
        Some(v) => Ok(v),
        None => Err(format!("unknown algorithm family '{family}' (selectable: {})", families().join(", "))),
    }
}

/// Loads of one lockstep step (see [`crate::model::StepLoad`]).
#[derive(Clone, Debug, PartialEq)]
pub struct StepCost {
    /// `b_s`: most bytes a rank sends on one port.
    pub port_bytes: f64,
    /// `L_s·b_s`: most bytes on one directed link.
    pub link_bytes: f64,
    /// Longest path (links).
    pub hops: u32,
}

impl StepCost {
    /// `L_s`.
    pub fn congestion(&self) -> f64 {
        if self.port_bytes > 0.0 {
            self.link_bytes / self.port_bytes
        } else {
            0.0
        }
    }
}

/// Closed-form per-step loads of an allreduce.
#[derive(Clone, Debug, PartialEq)]
pub struct ClosedForm {
    pub algorithm: &'static str,
    pub size_bytes: f64,
    pub steps: Vec<StepCost>,
    /// False on non-power-of-two dimension sizes (see the module docs).
    pub exact: bool,
}

impl ClosedForm {
    /// `Σ_s L_s·b_s`.
    pub fn bandwidth_bytes(&self) -> f64 {
        self.steps.iter().map(|s| s.link_bytes).sum()
    }
    /// `Σ_s hops_s`.
    pub fn hops(&self) -> u64 {
        self.steps.iter().map(|s| s.hops as u64).sum()
    }
    /// `steps·α + β·Σ_s L_s·b_s + per_hop·Σ_s hops_s` (as
    /// [`Deficiencies::cost_seconds`](crate::model::Deficiencies::cost_seconds)).
    pub fn cost_seconds(&self, alpha: f64, beta: f64, per_hop: f64) -> f64 {
        self.steps.len() as f64 * alpha + beta * self.bandwidth_bytes() + per_hop * self.hops() as f64
    }
}

fn ceil_log2(m: u32) -> u32 {
    if m <= 1 {
        0
    } else {
        32 - (m - 1).leading_zeros()
    }
}

fn floor_pow2(d: u32) -> u32 {
    if d == 0 {
        0
    } else {
        1 << (31 - d.leading_zeros())
    }
}

/// Ring distance of an offset.
fn ring_dist(off: u64, d: u32) -> u32 {
    let d = d as u64;
    let f = off % d;
    f.min(d - f) as u32
}

/// Closed-form loads of the allreduce of `algorithm` (one of the four variants) on `layout`
/// for `size_bytes` (rounded down to whole 4-byte elements, as the model does).
pub fn closed_form(algorithm: &str, layout: &Layout, size_bytes: u64) -> Result<ClosedForm, String> {
    let n = (size_bytes / crate::model::ELEM_BYTES * crate::model::ELEM_BYTES) as f64;
    closed_form_f64(algorithm, layout, n)
}

fn closed_form_f64(algorithm: &str, layout: &Layout, n: f64) -> Result<ClosedForm, String> {
    let dims = &layout.dims;
    if dims.is_empty() || dims.contains(&0) {
        return Err(format!("invalid torus shape {dims:?}"));
    }
    let pow2 = dims.iter().all(|d| d.is_power_of_two());
    let p: u64 = dims.iter().map(|&d| d as u64).product();
    // Non-power-of-two shapes: enumerate the messages (exact) if small enough.
    let enumerate = !pow2 && p * (2 * dims.len() as u64) <= MAX_ENUMERATED_LINKS;
    let exact = pow2 || enumerate;
    let entry = registry::find(algorithm).filter(|a| a.cost.is_some());
    let Some((name, cost)) = entry.map(|a| (a.name, a.cost.expect("filtered"))) else {
        let known: Vec<&str> = registry::all().iter().filter(|a| a.cost.is_some()).map(|a| a.name).collect();
        return Err(format!("no closed form for '{algorithm}' (known: {})", known.join(", ")));
    };
    let steps = match cost {
        CostForm::Swing { bandwidth: true } if enumerate => swing_bandwidth_enumerated(dims, n),
        CostForm::Swing { bandwidth: false } if enumerate => swing_latency_enumerated(dims, n),
        CostForm::Swing { bandwidth } => swing_steps(dims, n, bandwidth),
        CostForm::RecursiveDoubling { bandwidth } if enumerate => rd_enumerated(dims, n, bandwidth),
        CostForm::RecursiveDoubling { bandwidth } => rd_steps(dims, n, bandwidth),
    };
    Ok(ClosedForm { algorithm: name, size_bytes: n, steps, exact })
}

/// Swing: see the module docs.
fn swing_steps(dims: &[u32], n: f64, bandwidth: bool) -> Vec<StepCost> {
    let nd = dims.len();
    // Swing ring per dimension: bandwidth mode drops the extra node of odd sizes, latency
    // mode folds to the largest power of two.
    let ring: Vec<u32> = dims
        .iter()
        .map(|&d| {
            if bandwidth {
                if d % 2 == 1 && d > 1 {
                    d - 1
                } else {
                    d
                }
            } else {
                floor_pow2(d)
            }
        })
        .collect();
    let per_dim: Vec<u32> = ring.iter().map(|&m| ceil_log2(m)).collect();
    let active: Vec<usize> = (0..nd).filter(|&i| per_dim[i] > 0).collect();
    if active.is_empty() {
        return Vec::new();
    }
    let k: usize = per_dim.iter().map(|&s| s as usize).sum();
    // Per plain collective: global step -> (dimension, per-dimension step).
    let seqs: Vec<Vec<(usize, u32)>> = active.iter().map(|&start| swing::step_sequence(&per_dim, start)).collect();
    let part = n / (2 * active.len()) as f64;
    let mut rs = Vec::with_capacity(k);
    for s in 0..k {
        let m = if bandwidth { part / 2f64.powi(s as i32 + 1) } else { part };
        let mut count = vec![0u32; nd];
        let mut dist = vec![0u64; nd];
        let mut hops = 0;
        for seq in &seqs {
            let (i, sg) = seq[s];
            let h = ring_dist(swing::delta(sg) as u64, dims[i]);
            count[i] += 1;
            dist[i] += h as u64;
            hops = hops.max(h);
        }
        let kmax = *count.iter().max().unwrap() as f64;
        let lmax = *dist.iter().max().unwrap() as f64;
        rs.push(StepCost { port_bytes: m * kmax, link_bytes: m * lmax, hops });
    }
    let mut steps = rs.clone();
    if bandwidth {
        steps.extend(rs.into_iter().rev());
    } else if dims.iter().zip(&ring).any(|(&d, &m)| d != m) {
        // Pre- and post-step: ranks outside the sub-torus exchange the whole vector with
        // their representative, `d − d'` away in each such dimension.
        let over: Vec<u32> = dims.iter().zip(&ring).filter(|(&d, &m)| d != m).map(|(&d, &m)| d - m).collect();
        let fold =
            StepCost { port_bytes: n, link_bytes: n * *over.iter().max().unwrap() as f64, hops: over.iter().sum() };
        steps.insert(0, fold.clone());
        steps.push(fold);
    }
    steps
}

/// Recursive doubling: see the module docs.
fn rd_steps(dims: &[u32], n: f64, bandwidth: bool) -> Vec<StepCost> {
    let vdims: Vec<u32> = dims.iter().map(|&d| floor_pow2(d)).collect();
    let bits: Vec<u32> = vdims.iter().map(|&v| v.trailing_zeros()).collect();
    let active: Vec<usize> = (0..dims.len()).filter(|&i| vdims[i] > 1).collect();
    let rounds = active.iter().map(|&i| bits[i]).max().unwrap_or(0);
    let mut order = Vec::new();
    for b in 0..rounds {
        for &i in &active {
            if b < bits[i] {
                order.push((i, b));
            }
        }
    }
    let mut core = Vec::with_capacity(order.len());
    for (t, &(i, b)) in order.iter().enumerate() {
        let m = if bandwidth { n / 2f64.powi(t as i32 + 1) } else { n };
        // Physical distance: 2^b, stretched by d/d' on folded dimensions.
        let h = ((1u64 << b) as f64 * dims[i] as f64 / vdims[i] as f64).ceil() as u32;
        core.push(StepCost { port_bytes: m, link_bytes: m * h as f64, hops: h });
    }
    let folded = dims.iter().zip(&vdims).filter(|(d, v)| d != v).count();
    let fold = StepCost { port_bytes: n, link_bytes: n, hops: 1 };
    let mut steps = vec![fold.clone(); folded];
    steps.extend(core.iter().cloned());
    if bandwidth {
        steps.extend(core.into_iter().rev());
    }
    steps.extend(std::iter::repeat_n(fold, folded));
    steps
}

/// Largest `ranks × ports` for which non-power-of-two shapes are enumerated.
pub const MAX_ENUMERATED_LINKS: u64 = 1 << 20;

/// Torus routing as the model does it (see [`crate::model`]): straight along the first
/// port's dimension and direction until the coordinate matches, then dimension order,
/// minimal direction, `+` on a tie. Accumulates the loads of one step.
struct Enum<'a> {
    dims: &'a [u32],
    link: Vec<f64>,
    sent: Vec<f64>,
    touched: Vec<usize>,
    hops: u32,
}

impl<'a> Enum<'a> {
    fn new(dims: &'a [u32]) -> Enum<'a> {
        let p: usize = dims.iter().map(|&d| d as usize).product();
        let ports = 2 * dims.len();
        Enum { dims, link: vec![0.0; p * ports], sent: vec![0.0; p * ports], touched: Vec::new(), hops: 0 }
    }

    fn rank(&self, c: &[u32]) -> usize {
        c.iter().zip(self.dims).rev().fold(0, |r, (&x, &d)| r * d as usize + x as usize)
    }

    fn hit(&mut self, l: usize, bytes: f64, first: bool) {
        if self.link[l] == 0.0 && self.sent[l] == 0.0 {
            self.touched.push(l);
        }
        self.link[l] += bytes;
        if first {
            self.sent[l] += bytes;
        }
    }

    /// Adds a message of `bytes` from coordinates `src` to `dst`, leaving on `first` =
    /// `(dim, plus)` if given.
    fn message(&mut self, src: &[u32], dst: &[u32], first: Option<(usize, bool)>, bytes: f64) {
        let ports = 2 * self.dims.len();
        let mut c = src.to_vec();
        let mut hops = 0u32;
        let mut go = |me: &mut Enum, c: &mut Vec<u32>, i: usize, plus: bool| {
            let l = me.rank(c) * ports + 2 * i + usize::from(!plus);
            me.hit(l, bytes, hops == 0);
            hops += 1;
            let d = me.dims[i];
            c[i] = if plus { (c[i] + 1) % d } else { (c[i] + d - 1) % d };
        };
        if let Some((i, plus)) = first {
            while c[i] != dst[i] {
                go(self, &mut c, i, plus);
            }
        }
        for i in 0..self.dims.len() {
            let d = self.dims[i];
            while c[i] != dst[i] {
                let fwd = (dst[i] + d - c[i]) % d;
                go(self, &mut c, i, fwd <= d - fwd);
            }
        }
        self.hops = self.hops.max(hops);
    }

    fn finish(&mut self) -> StepCost {
        let mut st = StepCost { port_bytes: 0.0, link_bytes: 0.0, hops: self.hops };
        for &l in &self.touched {
            st.port_bytes = st.port_bytes.max(self.sent[l]);
            st.link_bytes = st.link_bytes.max(self.link[l]);
            self.sent[l] = 0.0;
            self.link[l] = 0.0;
        }
        self.touched.clear();
        self.hops = 0;
        st
    }
}

fn all_coords(dims: &[u32]) -> impl Iterator<Item = Vec<u32>> + '_ {
    let p: u64 = dims.iter().map(|&d| d as u64).product();
    (0..p).map(move |mut r| {
        dims.iter()
            .map(|&d| {
                let c = (r % d as u64) as u32;
                r /= d as u64;
                c
            })
            .collect()
    })
}

/// Latency-optimal Swing on a non-power-of-two torus, message by message: the pre-step to
/// the representatives in the largest power-of-two sub-torus, Swing on the sub-torus (peers
/// on its rings of `m_i` coordinates, routed on the physical rings of `d_i`), the post-step.
fn swing_latency_enumerated(dims: &[u32], n: f64) -> Vec<StepCost> {
    let nd = dims.len();
    let m: Vec<u32> = dims.iter().map(|&d| floor_pow2(d)).collect();
    let per_dim: Vec<u32> = m.iter().map(|&x| ceil_log2(x)).collect();
    let active: Vec<usize> = (0..nd).filter(|&i| per_dim[i] > 0).collect();
    let k: usize = per_dim.iter().map(|&s| s as usize).sum();
    let mut e = Enum::new(dims);
    let mut steps = Vec::new();
    let folded: Vec<Vec<u32>> = all_coords(dims).filter(|c| c.iter().zip(&m).any(|(a, m)| a >= m)).collect();
    let rep = |c: &[u32]| -> Vec<u32> { c.iter().zip(&m).map(|(&a, &m)| if a >= m { a - m } else { a }).collect() };
    let first_dim = |c: &[u32]| (0..nd).find(|&i| c[i] >= m[i]).unwrap();
    let last_dim = |c: &[u32]| (0..nd).rev().find(|&i| c[i] >= m[i]).unwrap();
    if !folded.is_empty() {
        for c in &folded {
            e.message(c, &rep(c), Some((first_dim(c), true)), n);
        }
        steps.push(e.finish());
    }
    let starts: Vec<usize> = if active.is_empty() { vec![0] } else { active.clone() };
    let seqs: Vec<Vec<(usize, u32)>> = starts.iter().map(|&start| swing::step_sequence(&per_dim, start)).collect();
    let part = n / (2 * starts.len()) as f64;
    let sub: Vec<Vec<u32>> = all_coords(&m).collect();
    for s in 0..k {
        for eps in [1i64, -1] {
            for seq in &seqs {
                let (i, sg) = seq[s];
                let (d, mi) = (dims[i] as i64, m[i] as i64);
                for c in &sub {
                    let a = c[i] as i64;
                    let off = eps * if a % 2 == 0 { 1 } else { -1 } * swing::rho(sg);
                    let q = (a + off).rem_euclid(mi);
                    let fwd = (q - a).rem_euclid(d);
                    let plus = if 2 * fwd != d { 2 * fwd < d } else { off > 0 };
                    let mut t = c.clone();
                    t[i] = q as u32;
                    e.message(c, &t, Some((i, plus)), part);
                }
            }
        }
        steps.push(e.finish());
    }
    if !folded.is_empty() {
        for c in &folded {
            e.message(&rep(c), c, Some((last_dim(c), false)), n);
        }
        steps.push(e.finish());
    }
    steps
}

/// The 1D Swing pattern of bandwidth-optimal Swing on a ring of `d` (see `algos::swing`):
/// even rings of `m = d` (or `m = d − 1` plus an extra node for odd `d`), next hops towards
/// every target coordinate.
struct SwingLine {
    d: u32,
    m: u32,
    extra: bool,
    steps: u32,
    eps: i64,
    /// `nh[a·d + t]` = `(σ, q)`: per-dimension step and peer through which `a` sends `t`'s
    /// blocks.
    nh: Vec<(u32, u32)>,
}

impl SwingLine {
    fn new(d: u32, eps: i64) -> SwingLine {
        let (m, extra) = if d % 2 == 1 && d > 1 { (d - 1, true) } else { (d, false) };
        let steps = ceil_log2(m);
        let peer = |a: u32, sg: u32| -> u32 {
            let off = eps * if a % 2 == 0 { 1 } else { -1 } * swing::rho(sg);
            (a as i64 + off).rem_euclid(m as i64) as u32
        };
        // reach[σ][a]: coordinates `a` reaches with steps ≥ σ.
        let words = (m as usize).div_ceil(64).max(1);
        let mut reach = vec![vec![vec![0u64; words]; m as usize]; steps as usize + 1];
        for a in 0..m {
            reach[steps as usize][a as usize][(a / 64) as usize] |= 1 << (a % 64);
        }
        for sg in (0..steps).rev() {
            for a in 0..m {
                let q = peer(a, sg);
                let v: Vec<u64> = reach[sg as usize + 1][a as usize]
                    .iter()
                    .zip(&reach[sg as usize + 1][q as usize])
                    .map(|(x, y)| x | y)
                    .collect();
                reach[sg as usize][a as usize] = v;
            }
        }
        let mut dir_step = Vec::new();
        if extra {
            let mut rem = m;
            for sg in 0..steps {
                let take = if sg + 1 == steps { rem } else { rem.div_ceil(2) };
                dir_step.extend(std::iter::repeat_n(sg, take as usize));
                rem -= take;
            }
        }
        let mut nh = vec![(u32::MAX, u32::MAX); (d * d) as usize];
        for a in 0..d {
            for t in (0..d).filter(|&t| t != a) {
                nh[(a * d + t) as usize] = if extra && t == m {
                    (dir_step[a as usize], t)
                } else if extra && a == m {
                    (dir_step[t as usize], t)
                } else {
                    (0..steps)
                        .rev()
                        .map(|sg| (sg, peer(a, sg)))
                        .find(|&(sg, q)| reach[sg as usize + 1][q as usize][(t / 64) as usize] >> (t % 64) & 1 == 1)
                        .expect("the Swing pattern reaches every node")
                };
            }
        }
        SwingLine { d, m, extra, steps, eps, nh }
    }

    /// Direction (`true` = `+`) from `a` to `q` at step `sg`: minimal; on a tie, the
    /// direction of the Swing offset.
    fn plus(&self, a: u32, q: u32, sg: u32) -> bool {
        let d = self.d as u64;
        let fwd = (q as u64 + d - a as u64) % d;
        if 2 * fwd != d {
            return 2 * fwd < d;
        }
        let regular = !self.extra || a < self.m;
        regular && self.eps * if a % 2 == 0 { 1 } else { -1 } * swing::rho(sg) > 0
    }
}

/// Bandwidth-optimal Swing on a non-power-of-two torus, message by message. A block leaves
/// rank `r` at the earliest global step, over the dimensions in which `r` and its owner
/// differ, of the per-dimension next hop; so at global step `k`, collective `c` being in
/// dimension `i` at per-dimension step `σ`, the message from `r` to peer coordinate `q`
/// carries `N_i(σ, q) · Π_{j≠i} M_j(k)` blocks: the target coordinates `t_i` whose next hop
/// is `(σ, q)`, times, in every other dimension `j`, the coordinates that are `r`'s own or
/// leave after step `k`. The allgather reverses every message.
fn swing_bandwidth_enumerated(dims: &[u32], n: f64) -> Vec<StepCost> {
    let nd = dims.len();
    let lines: [Vec<SwingLine>; 2] =
        [dims.iter().map(|&d| SwingLine::new(d, 1)).collect(), dims.iter().map(|&d| SwingLine::new(d, -1)).collect()];
    let per_dim: Vec<u32> = lines[0].iter().map(|l| l.steps).collect();
    let active: Vec<usize> = (0..nd).filter(|&i| per_dim[i] > 0).collect();
    if active.is_empty() {
        return Vec::new();
    }
    let k_total: usize = per_dim.iter().map(|&s| s as usize).sum();
    // Per start dimension: pos[i][σ] = global step, and seq[k] = (i, σ).
    let mut pos: Vec<Vec<Vec<usize>>> = Vec::new();
    let mut seq: Vec<Vec<(usize, u32)>> = Vec::new();
    for &start in &active {
        let mut used = vec![0u32; nd];
        let mut ps: Vec<Vec<usize>> = per_dim.iter().map(|&s| vec![0; s as usize]).collect();
        let mut sq = Vec::with_capacity(k_total);
        let mut i = start;
        while sq.len() < k_total {
            if used[i] < per_dim[i] {
                ps[i][used[i] as usize] = sq.len();
                sq.push((i, used[i]));
                used[i] += 1;
            }
            i = (i + 1) % nd;
        }
        pos.push(ps);
        seq.push(sq);
    }
    // Per direction, dimension and coordinate: how many targets leave at each per-dimension
    // step, and through which peers.
    let mut hist: [Vec<Vec<Vec<f64>>>; 2] = [Vec::new(), Vec::new()];
    // groups[mirror][dim][coordinate][σ] = [(peer, targets)].
    type Groups = Vec<Vec<Vec<Vec<(u32, f64)>>>>;
    let mut groups: [Groups; 2] = [Vec::new(), Vec::new()];
    for mi in 0..2 {
        for (j, l) in lines[mi].iter().enumerate() {
            let mut h = vec![vec![0.0; l.steps as usize]; dims[j] as usize];
            let mut g = vec![vec![Vec::<(u32, f64)>::new(); l.steps as usize]; dims[j] as usize];
            for a in 0..dims[j] {
                for t in (0..dims[j]).filter(|&t| t != a) {
                    let (sg, q) = l.nh[(a * l.d + t) as usize];
                    h[a as usize][sg as usize] += 1.0;
                    let gs = &mut g[a as usize][sg as usize];
                    match gs.iter_mut().find(|e| e.0 == q) {
                        Some(e) => e.1 += 1.0,
                        None => gs.push((q, 1.0)),
                    }
                }
            }
            hist[mi].push(h);
            groups[mi].push(g);
        }
    }
    let nc = 2 * active.len();
    let p: f64 = dims.iter().map(|&d| d as f64).product();
    let block = n / (nc as f64 * p);
    let coords: Vec<Vec<u32>> = all_coords(dims).collect();
    let mut e = Enum::new(dims);
    let mut rs = Vec::with_capacity(k_total);
    let mut ag = Vec::with_capacity(k_total);
    for k in 0..k_total {
        for reverse in [false, true] {
            for mi in 0..2 {
                for (si, sq) in seq.iter().enumerate() {
                    let (i, sg) = sq[k];
                    let l = &lines[mi][i];
                    for a in &coords {
                        // Coordinates of the other dimensions still travelling with the blocks.
                        let others: f64 = (0..nd)
                            .filter(|&j| j != i)
                            .map(|j| {
                                1.0 + (0..per_dim[j] as usize)
                                    .filter(|&x| pos[si][j][x] > k)
                                    .map(|x| hist[mi][j][a[j] as usize][x])
                                    .sum::<f64>()
                            })
                            .product();
                        for &(q, cnt) in &groups[mi][i][a[i] as usize][sg as usize] {
                            let mut to = a.clone();
                            to[i] = q;
                            let plus = l.plus(a[i], q, sg);
                            let bytes = cnt * others * block;
                            if reverse {
                                e.message(&to, a, Some((i, !plus)), bytes);
                            } else {
                                e.message(a, &to, Some((i, plus)), bytes);
                            }
                        }
                    }
                }
            }
            if reverse {
                ag.push(e.finish());
            } else {
                rs.push(e.finish());
            }
        }
    }
    rs.extend(ag.into_iter().rev());
    rs
}

/// Recursive doubling on a non-power-of-two torus, message by message: fold each such
/// dimension (`2j → 2j+1`, one step each), the algorithm on the folded torus (virtual
/// coordinate `a` is physical `2a+1` below the fold, `a + extra` above), unfold.
fn rd_enumerated(dims: &[u32], n: f64, bandwidth: bool) -> Vec<StepCost> {
    let nd = dims.len();
    let vd: Vec<u32> = dims.iter().map(|&d| floor_pow2(d)).collect();
    let extra: Vec<u32> = dims.iter().zip(&vd).map(|(d, v)| d - v).collect();
    let p: f64 = dims.iter().map(|&d| d as f64).product();
    let survives = |a: u32, m: u32| a >= 2 * m || a % 2 == 1;
    let mut e = Enum::new(dims);
    let mut fold = Vec::new();
    let mut unfold = Vec::new();
    let fdims: Vec<usize> = (0..nd).filter(|&i| extra[i] > 0).collect();
    for (li, &dim) in fdims.iter().enumerate() {
        let pairs: Vec<(Vec<u32>, Vec<u32>)> = all_coords(dims)
            .filter(|c| fdims[..li].iter().all(|&j| survives(c[j], extra[j])) && !survives(c[dim], extra[dim]))
            .map(|c| {
                let mut y = c.clone();
                y[dim] = (y[dim] + 1) % dims[dim];
                (c, y)
            })
            .collect();
        for (x, y) in &pairs {
            e.message(x, y, Some((dim, true)), n);
        }
        fold.push(e.finish());
        for (x, y) in &pairs {
            e.message(y, x, Some((dim, false)), n);
        }
        unfold.push(e.finish());
    }
    let phys = |v: &[u32]| -> Vec<u32> {
        v.iter().zip(&extra).map(|(&a, &m)| if a < m { 2 * a + 1 } else { a + m }).collect()
    };
    let bits: Vec<u32> = vd.iter().map(|&v| v.trailing_zeros()).collect();
    let active: Vec<usize> = (0..nd).filter(|&i| vd[i] > 1).collect();
    let rounds = active.iter().map(|&i| bits[i]).max().unwrap_or(0);
    let mut order = Vec::new();
    for b in 0..rounds {
        for &i in &active {
            if b < bits[i] {
                order.push((i, b));
            }
        }
    }
    // Physical ranks represented by virtual coordinate `c` of dimension `i`.
    let weight = |i: usize, c: u32| if c < extra[i] { 2.0 } else { 1.0 };
    // Bytes of the owners whose virtual coordinates agree with `w` on the bits flipped by the
    // first `t` steps.
    let owned = |w: &[u32], t: usize| -> f64 {
        let mut mask = vec![0u32; nd];
        for &(i, b) in &order[..t] {
            mask[i] |= 1 << b;
        }
        let count: f64 = (0..nd)
            .map(|i| (0..vd[i]).filter(|&c| c & mask[i] == w[i] & mask[i]).map(|c| weight(i, c)).sum::<f64>())
            .product();
        n * count / p
    };
    let virt: Vec<Vec<u32>> = all_coords(&vd).collect();
    let mut core = Vec::new();
    let mut ag = Vec::new();
    for (t, &(i, b)) in order.iter().enumerate() {
        let d = dims[i];
        for pass in 0..1 + usize::from(bandwidth) {
            for v in &virt {
                let a = v[i];
                let mut u = v.clone();
                u[i] = if a >> b & 1 == 0 { (a + (1 << b)) % vd[i] } else { (a + vd[i] - (1 << b)) % vd[i] };
                let (pv, pu) = (phys(v), phys(&u));
                let fwd = (pu[i] + d - pv[i]) % d;
                let bytes = match (bandwidth, pass) {
                    (false, _) => n,
                    (true, 0) => owned(&u, t + 1),
                    (true, _) => owned(v, t + 1),
                };
                e.message(&pv, &pu, Some((i, fwd <= d - fwd)), bytes);
            }
            let st = e.finish();
            if pass == 0 {
                core.push(st);
            } else {
                ag.push(st);
            }
        }
    }
    let mut steps = fold;
    steps.extend(core);
    steps.extend(ag.into_iter().rev());
    steps.extend(unfold.into_iter().rev());
    steps
}

fn check_params(alpha: f64, beta: f64, per_hop: f64) -> Result<(), String> {
    for (what, v) in [("alpha", alpha), ("beta", beta), ("per-hop latency", per_hop)] {
        if !v.is_finite() || v < 0.0 {
            return Err(format!("{what} must be a finite non-negative number, got {v}"));
        }
    }
    Ok(())
}

/// A variant's cost as a function of the size: `steps·α + β·per_byte·n + h·hops` (every
/// closed form is linear in `n`).
struct Affine {
    steps: f64,
    link_per_byte: f64,
    hops: f64,
}

impl Affine {
    fn of(algorithm: &str, layout: &Layout) -> Result<Affine, String> {
        let c = closed_form_f64(algorithm, layout, 1.0)?;
        Ok(Affine { steps: c.steps.len() as f64, link_per_byte: c.bandwidth_bytes(), hops: c.hops() as f64 })
    }
    fn cost(&self, n: f64, alpha: f64, beta: f64, per_hop: f64) -> f64 {
        self.steps * alpha + beta * self.link_per_byte * n + per_hop * self.hops
    }
}

/// `(latency-optimal, bandwidth-optimal)` cost functions of `family`.
fn affines(family: &str, layout: &Layout, alpha: f64, beta: f64, per_hop: f64) -> Result<(Affine, Affine), String> {
    check_params(alpha, beta, per_hop)?;
    let (lat, bw) = variants(family)?;
    Ok((Affine::of(lat, layout)?, Affine::of(bw, layout)?))
}

fn elements(size_bytes: u64) -> f64 {
    (size_bytes / crate::model::ELEM_BYTES * crate::model::ELEM_BYTES) as f64
}

/// The cheaper variant of `family` (`swing` or `recursive-doubling`) for an allreduce of
/// `size_bytes` on `layout`, with `alpha_s` seconds per step, `beta_s_per_byte` seconds per
/// byte on a link (`8 / link bits-per-second`) and `per_hop_s` seconds per link of a path.
/// The latency-optimal variant wins ties. Deterministic (pure arithmetic).
pub fn choose_variant(
    family: &str,
    layout: &Layout,
    size_bytes: u64,
    alpha_s: f64,
    beta_s_per_byte: f64,
    per_hop_s: f64,
) -> Result<&'static str, String> {
    let (lat, bw) = variants(family)?;
    let (l, b) = affines(family, layout, alpha_s, beta_s_per_byte, per_hop_s)?;
    let n = elements(size_bytes);
    Ok(if b.cost(n, alpha_s, beta_s_per_byte, per_hop_s) < l.cost(n, alpha_s, beta_s_per_byte, per_hop_s) {
        bw
    } else {
        lat
    })
}

/// [`crossover_bytes`] with errors instead of panics.
pub fn try_crossover_bytes(
    family: &str,
    layout: &Layout,
    alpha_s: f64,
    beta_s_per_byte: f64,
    per_hop_s: f64,
) -> Result<u64, String> {
    let (l, b) = affines(family, layout, alpha_s, beta_s_per_byte, per_hop_s)?;
    let wins = |e: u32| -> Result<bool, String> {
        let n = elements(1u64 << e);
        Ok(b.cost(n, alpha_s, beta_s_per_byte, per_hop_s) < l.cost(n, alpha_s, beta_s_per_byte, per_hop_s))
    };
    let (mut lo, mut hi) = (CROSSOVER_MIN_LOG2, CROSSOVER_MAX_LOG2);
    if wins(lo)? {
        return Ok(1 << lo);
    }
    if !wins(hi)? {
        return Ok(u64::MAX);
    }
    // Invariant: the bandwidth variant loses at 2^lo and wins at 2^hi (the cost difference
    // is linear in the size, so there is one crossing).
    while hi - lo > 1 {
        let mid = (lo + hi) / 2;
        if wins(mid)? {
            hi = mid;
        } else {
            lo = mid;
        }
    }
    Ok(1 << hi)
}

/// The smallest power of two from 32 B to 4 GiB at which the bandwidth-optimal variant of
/// `family` is cheaper than the latency-optimal one, by bisection over the exponents;
/// `u64::MAX` if it does not win up to 4 GiB.
///
/// # Panics
///
/// On an unknown family, an invalid layout or a negative / non-finite parameter (see
/// [`try_crossover_bytes`]).
pub fn crossover_bytes(family: &str, layout: &Layout, alpha_s: f64, beta_s_per_byte: f64, per_hop_s: f64) -> u64 {
    try_crossover_bytes(family, layout, alpha_s, beta_s_per_byte, per_hop_s)
        .unwrap_or_else(|e| panic!("crossover_bytes: {e}"))
}

/// The exact size (bytes, not rounded to elements) at which the two variants cost the same:
/// both costs are affine in the size. `None` if the bandwidth-optimal variant never becomes
/// cheaper.
pub fn crossover_exact(
    family: &str,
    layout: &Layout,
    alpha_s: f64,
    beta_s_per_byte: f64,
    per_hop_s: f64,
) -> Result<Option<f64>, String> {
    let (l, b) = affines(family, layout, alpha_s, beta_s_per_byte, per_hop_s)?;
    let (l0, b0) = (l.cost(0.0, alpha_s, beta_s_per_byte, per_hop_s), b.cost(0.0, alpha_s, beta_s_per_byte, per_hop_s));
    let (slope_l, slope_b) = (beta_s_per_byte * l.link_per_byte, beta_s_per_byte * b.link_per_byte);
    if slope_b >= slope_l {
        return Ok((b0 < l0).then_some(0.0));
    }
    Ok(Some(((b0 - l0) / (slope_l - slope_b)).max(0.0)))
}

/// Resolves `name`: a family (`swing`, `recursive-doubling`) becomes the variant
/// [`choose_variant`] picks (by the allreduce cost; the bandwidth-optimal variant if the
/// latency-optimal one does not build `collective`); any other name is returned unchanged.
#[allow(clippy::too_many_arguments)]
pub fn resolve(
    name: &str,
    collective: Collective,
    layout: &Layout,
    size_bytes: u64,
    alpha_s: f64,
    beta_s_per_byte: f64,
    per_hop_s: f64,
) -> Result<String, String> {
    match registry::find(name) {
        Some(a) if a.kind == registry::Kind::Family => {
            let costs = registry::Costs { alpha_s, beta_s_per_byte, per_hop_s };
            Ok(registry::resolve(name, collective, layout, size_bytes, &costs, false)?.name.to_string())
        }
        _ => Ok(name.to_string()),
    }
}

/// [`algos::build`] with `swing` and `recursive-doubling` resolved by vector size (see
/// [`resolve`]); the schedule's `algorithm` names the variant built.
#[allow(clippy::too_many_arguments)]
pub fn build_for_size(
    name: &str,
    collective: Collective,
    layout: &Layout,
    size_bytes: u64,
    alpha_s: f64,
    beta_s_per_byte: f64,
    per_hop_s: f64,
) -> Result<Schedule, String> {
    let alg = resolve(name, collective, layout, size_bytes, alpha_s, beta_s_per_byte, per_hop_s)?;
    algos::build(&alg, collective, layout)
}
