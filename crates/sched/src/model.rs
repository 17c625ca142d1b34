//! Analytical models of collective schedules: the α-β cost and the deficiencies of the Swing
//! paper (De Sensi et al., NSDI'24, §2.2), measured from a [`Schedule`] routed on a real
//! [`Topology`].
//!
//! # Routing
//!
//! Rank `r` runs on host `r` (`topo.hosts[r]`). A message that carries a `port` on a torus
//! (and whose schedule was generated for that torus shape) goes straight along the port's
//! dimension, in the port's direction, until it reaches the peer's coordinate in that
//! dimension, then in dimension order (lowest dimension first, minimal direction, `+` on a
//! tie) for any remaining dimensions. Every other message follows the topology's
//! deterministic minimal path ([`MinimalRoutes::deterministic`]). A path is a list of
//! directed links `(node, port)`.
//!
//! # Per-step loads
//!
//! All the algorithms here run in lockstep, so step `s` means step `s` of every rank. For a
//! vector of `n` bytes (4-byte elements, blocks sized by [`Schedule::blocks_bytes`]):
//! - `b_s`: the most bytes any rank sends out of any one of its ports in step `s` (the port a
//!   message leaves on is the first link of its path);
//! - `L_s`: the most bytes on any directed link in step `s`, divided by `b_s` — about the
//!   number of messages that share the busiest link, weighted by size. `L_s·b_s` is the
//!   load of the busiest link, i.e. the time of the step in units of `β`.
//!
//! # Deficiencies (Eq. 1: `T(n) = log2(p)·α·Λ + (n/D)·β·Ψ·Ξ`)
//!
//! - `Λ = steps / log2 p`;
//! - `Ψ = Σ_s b_s / (n/D)`, where `D` is the number of torus dimensions (a parameter: the
//!   ideal algorithm spreads `2n` bytes over `2D` ports, i.e. `n/D` per port);
//! - `Ξ = Σ_s L_s·b_s / Σ_s b_s`, the data-weighted congestion. This is the paper's definition
//!   for the bandwidth-optimal algorithms (§4.1: the bandwidth term `Σ_s δ·b_s` divided by the
//!   optimal one), and it makes Eq. 1 exact: `(n/D)·Ψ·Ξ = Σ_s L_s·b_s`. It gives Swing (B)
//!   1.19 / 1.03 / 1.008 on large 2D / 3D / 4D tori, recursive doubling (B)
//!   `(2^D−1)/(2^D−2)`, and 1 for the ring and bucket algorithms. (The §4.1 sum
//!   `Σ_s δ(σ(s))/2^{s+1}` tends to exactly 6/5, 28/27 and 120/119 for `D` = 2, 3, 4; Table 2's
//!   1.19 is its value at 128×128, 64×64 gives 1.184);
//! - `Ξ_sum = Σ_s L_s`, the convention Table 2 uses for the latency-optimal algorithms
//!   ("the sum of the distance between communicating nodes over all the steps": recursive
//!   doubling (L) `D·Σ 2^i ≤ 2D·p^{1/D}`, Swing (L) `≤ 4/3·D·p^{1/D}`).
//!
//! The two conventions differ because, for a latency-optimal algorithm, every step moves the
//! whole vector: `Ψ = D·log2 p` already sums the bytes over all the steps, and `Ξ_sum` sums
//! the congestion over all the steps again, so Table 2's product `Ψ·Ξ` counts
//! `Σ_s Σ_t b_s·L_t` — every step's bytes times every step's congestion — instead of
//! `Σ_s b_s·L_s`. It overestimates the bandwidth term by about `log2 p` (exactly `log2 p`
//! when all `b_s` are equal: `Ψ·Ξ_sum = log2 p · Ψ·Ξ`). For bandwidth-optimal algorithms the
//! halving of `b_s` at every step makes the weighting essential, which is why §4.1 weights.
//! The cost model ([`Deficiencies::cost_seconds`]) therefore uses the data-weighted `Ξ`
//! (equivalently `Σ_s L_s·b_s`); `Ξ_sum` is reported only to compare with Table 2.
//!
//! # Cost
//!
//! `T(n) = steps·α + β·Σ_s L_s·b_s [+ h·Σ_s hops_s]`, where `hops_s` is the longest path of
//! step `s` and `h` an optional per-hop latency. Without the hop term this is Eq. 1 with the
//! measured deficiencies. [`table2`] gives the paper's closed forms for comparison.
//!
//! # Endpoint costs ([`Deficiencies::cost_seconds_endpoint`])
//!
//! The packet engine's and flow backend's endpoint costs (LogGP-style), per step `s`:
//! - overheads: a rank's `k_s` sends leave one send overhead `o_s` apart and each receive
//!   costs `o_r` at its receiver, so the step takes `max(k_s·o_s + o_r, o_s + m_s·o_r)` more
//!   (`k_s`, `m_s`: the most messages any rank sends / receives in the step; the second term
//!   is a receiver whose receives queue because `o_r > o_s`);
//! - latencies: the send latency `l_s` and receive latency `l_r` overlap the next message, so
//!   a step pays each once: `l_s + l_r` more;
//! - rendezvous: a step whose largest message exceeds the threshold first pays one header
//!   round trip, `2·(α + h·hops_s)`;
//! - injection ceiling: the bandwidth term of the step is at least the bytes a rank sends in
//!   the step (over all its ports) at the ceiling, i.e. the step's rate per rank is
//!   `min(ports × link, injection)`: `max(β·L_s·b_s, R_s·8/injection)`.
//!
//! With no endpoint costs this is [`Deficiencies::cost_seconds`].

use crate::algos::Layout;
use crate::ir::{Collective, Schedule};
use crate::plan::{Plan, NO_PORT};
use reducelab_topo::{self as topo, LinkParams, MinimalRoutes, NodeId, Shape, Topology};

/// Element size used to size blocks (f32 / i32 vectors, as in the paper's evaluation).
pub const ELEM_BYTES: u64 = 4;

/// Loads of one lockstep step.
#[derive(Clone, Debug, PartialEq)]
pub struct StepLoad {
    /// `b_s`: most bytes any rank sends on any one port.
    pub max_port_bytes: u64,
    /// Most bytes on any directed link (`L_s·b_s`).
    pub max_link_bytes: u64,
    /// `L_s = max_link_bytes / max_port_bytes` (0 in a step that moves no data).
    pub congestion: f64,
    /// Longest path (links) of any message of the step.
    pub max_hops: u32,
    /// Messages with at least one byte.
    pub messages: u64,
    /// Bytes sent by all ranks.
    pub bytes: u64,
    /// Most messages any rank sends / receives in the step (`k_s`, `m_s`).
    pub max_sends: u32,
    pub max_recvs: u32,
    /// Most bytes any rank sends in the step over all its ports (`R_s`).
    pub max_rank_bytes: u64,
    /// Largest message of the step.
    pub max_msg_bytes: u64,
}

/// Endpoint costs for [`Deficiencies::cost_seconds_endpoint`] (the scenario's `[endpoint]`
/// table in seconds and bits per second). Default: none.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct EndpointCosts {
    pub send_overhead_s: f64,
    /// Per message, after the send overhead, not serialised: adds once per step.
    pub send_latency_s: f64,
    pub recv_overhead_s: f64,
    /// Per message, before the receive overhead, not serialised: adds once per step.
    pub recv_latency_s: f64,
    pub rendezvous_threshold_bytes: Option<u64>,
    pub injection_bps: Option<f64>,
}

/// Deficiencies of a schedule on a topology for one vector size.
#[derive(Clone, Debug, PartialEq)]
pub struct Deficiencies {
    pub algorithm: String,
    pub ranks: u32,
    /// `D` of `n/D` (torus dimensions; see the module docs).
    pub d: u32,
    /// `n`: vector size in bytes (rounded down to whole elements).
    pub size_bytes: u64,
    pub steps: usize,
    /// `Λ = steps / log2 p`.
    pub lambda: f64,
    /// `Ψ = Σ b_s / (n/D)`.
    pub psi: f64,
    /// `Ξ = Σ L_s·b_s / Σ b_s` (data-weighted; used by the cost model).
    pub xi: f64,
    /// `Ξ_sum = Σ L_s` (Table 2's convention for latency-optimal algorithms).
    pub xi_sum: f64,
    pub per_step: Vec<StepLoad>,
}

impl Deficiencies {
    /// `Σ_s L_s·b_s`: bytes on the busiest link, summed over the steps (the bandwidth term
    /// in units of `β`; equals `(n/D)·Ψ·Ξ`).
    pub fn bandwidth_bytes(&self) -> f64 {
        self.per_step.iter().map(|s| s.max_link_bytes as f64).sum()
    }

    /// `Σ_s hops_s`: the longest path of each step, summed.
    pub fn hops(&self) -> u64 {
        self.per_step.iter().map(|s| s.max_hops as u64).sum()
    }

    /// α-β time in seconds: `steps·α + β·Σ_s L_s·b_s + per_hop·Σ_s hops_s`, with `α` and
    /// `per_hop` in seconds and `β` in seconds per byte (`8 / link bits-per-second`).
    pub fn cost_seconds(&self, alpha: f64, beta: f64, per_hop: f64) -> f64 {
        self.steps as f64 * alpha + beta * self.bandwidth_bytes() + per_hop * self.hops() as f64
    }

    /// [`Deficiencies::cost_seconds`] with endpoint costs (see the module docs); equal to it
    /// when `ep` is the default.
    pub fn cost_seconds_endpoint(&self, alpha: f64, beta: f64, per_hop: f64, ep: &EndpointCosts) -> f64 {
        if *ep == EndpointCosts::default() {
            return self.cost_seconds(alpha, beta, per_hop);
        }
        let mut t = self.steps as f64 * alpha + per_hop * self.hops() as f64;
        for s in &self.per_step {
            let mut bw = beta * s.max_link_bytes as f64;
            if let Some(inj) = ep.injection_bps {
                bw = bw.max(s.max_rank_bytes as f64 * 8.0 / inj);
            }
            t += bw;
            if s.messages > 0 {
                let (k, m) = (s.max_sends as f64, s.max_recvs as f64);
                t += (k * ep.send_overhead_s + ep.recv_overhead_s).max(ep.send_overhead_s + m * ep.recv_overhead_s);
                t += ep.send_latency_s + ep.recv_latency_s;
            }
            if ep.rendezvous_threshold_bytes.is_some_and(|thr| s.max_msg_bytes > thr) {
                t += 2.0 * (alpha + per_hop * s.max_hops as f64);
            }
        }
        t
    }
}

/// Routes messages of a schedule on a topology (see the module docs).
pub struct Router<'a> {
    topo: &'a Topology,
    routes: MinimalRoutes,
    /// Torus shape and strides, if the topology is a torus.
    torus: Option<(Vec<u32>, Vec<u32>)>,
    /// Index of a node's port 0 in the global port numbering.
    port_base: Vec<usize>,
    scratch: Vec<u16>,
}

impl<'a> Router<'a> {
    pub fn new(topo: &'a Topology) -> Router<'a> {
        let torus = match &topo.shape {
            Shape::Torus { dims } => {
                let mut strides = Vec::with_capacity(dims.len());
                let mut acc = 1u32;
                for &d in dims {
                    strides.push(acc);
                    acc *= d;
                }
                Some((dims.clone(), strides))
            }
            _ => None,
        };
        let mut port_base = Vec::with_capacity(topo.nodes.len() + 1);
        let mut acc = 0usize;
        for n in &topo.nodes {
            port_base.push(acc);
            acc += n.ports.len();
        }
        port_base.push(acc);
        Router { topo, routes: MinimalRoutes::new(topo), torus, port_base, scratch: Vec::new() }
    }

    /// Number of directed links (= ports) in the topology.
    pub fn num_ports(&self) -> usize {
        *self.port_base.last().unwrap_or(&0)
    }

    /// Global index of `port` of `node` (ports numbered node after node).
    pub fn global_port(&self, node: NodeId, port: u16) -> usize {
        self.port_base[node.idx()] + port as usize
    }

    /// Whether the topology is a torus of shape `dims` (so schedule ports can be honoured).
    pub fn is_torus(&self, dims: &[u32]) -> bool {
        self.torus.as_ref().is_some_and(|(d, _)| d == dims)
    }

    /// The path of a message from rank `src` to rank `dst` as directed links `(node, port)`,
    /// written to `out` (cleared first). `port` is honoured only on a torus (and only if it is
    /// one of the torus ports); elsewhere the deterministic minimal path is used.
    pub fn path(&mut self, src: u32, dst: u32, port: Option<u16>, out: &mut Vec<(NodeId, u16)>) -> Result<(), String> {
        out.clear();
        let hosts = self.topo.hosts.len() as u32;
        if src >= hosts || dst >= hosts {
            return Err(format!("rank {} has no host (the topology has {hosts} hosts)", src.max(dst)));
        }
        if let Some((dims, strides)) = &self.torus {
            let port = port.filter(|&p| (p as usize) < 2 * dims.len());
            torus_path(dims, strides, self.topo.hosts[src as usize], self.topo.hosts[dst as usize], port, out);
            return Ok(());
        }
        let target = self.topo.hosts[dst as usize];
        let mut cur = self.topo.hosts[src as usize];
        while cur != target {
            let Some(p) = self.routes.deterministic(cur, dst, &mut self.scratch) else {
                return Err(format!("no route from rank {src} to rank {dst}"));
            };
            out.push((cur, p));
            cur = self.topo.nodes[cur.idx()].ports[p as usize].peer;
            if out.len() > self.topo.nodes.len() {
                return Err(format!("routing loop from rank {src} to rank {dst}"));
            }
        }
        Ok(())
    }
}

/// Torus path: straight along `port` (if any) until the peer's coordinate in that dimension
/// is reached, then dimension order. Torus node `i` has coordinates `coords_of(i)`.
fn torus_path(
    dims: &[u32],
    strides: &[u32],
    src: NodeId,
    dst: NodeId,
    port: Option<u16>,
    out: &mut Vec<(NodeId, u16)>,
) {
    let mut c = topo::coords_of(src.0, dims);
    let t = topo::coords_of(dst.0, dims);
    let mut node = src.0;
    let hop = |i: usize, plus: bool, c: &mut [u32], node: &mut u32, out: &mut Vec<(NodeId, u16)>| {
        out.push((NodeId(*node), 2 * i as u16 + u16::from(!plus)));
        let d = dims[i];
        if plus {
            if c[i] + 1 == d {
                c[i] = 0;
                *node -= (d - 1) * strides[i];
            } else {
                c[i] += 1;
                *node += strides[i];
            }
        } else if c[i] == 0 {
            c[i] = d - 1;
            *node += (d - 1) * strides[i];
        } else {
            c[i] -= 1;
            *node -= strides[i];
        }
    };
    if let Some(p) = port {
        let i = (p / 2) as usize;
        while c[i] != t[i] {
            hop(i, p % 2 == 0, &mut c, &mut node, out);
        }
    }
    for i in 0..dims.len() {
        let d = dims[i];
        while c[i] != t[i] {
            let fwd = (t[i] + d - c[i]) % d;
            hop(i, fwd <= d - fwd, &mut c, &mut node, out);
        }
    }
}

/// Measures the deficiencies of `schedule` on `topo` for a vector of `size_bytes` bytes, with
/// `d` the `D` of `n/D`. The schedule's rank `r` runs on host `r`.
pub fn deficiencies(schedule: &Schedule, topo: &Topology, size_bytes: u64, d: u32) -> Result<Deficiencies, String> {
    deficiencies_of_plan(&Plan::from_schedule(schedule)?, topo, size_bytes, d)
}

/// [`deficiencies`] of a timing plan (what they depend on: per step, who sends how many
/// blocks to whom on which port). Message bytes are the blocks' share of the vector
/// ([`Plan::bytes`]).
pub fn deficiencies_of_plan(plan: &Plan, topo: &Topology, size_bytes: u64, d: u32) -> Result<Deficiencies, String> {
    let p = plan.ranks;
    if p as usize != topo.hosts.len() {
        return Err(format!("the schedule has {p} ranks but the topology has {} hosts", topo.hosts.len()));
    }
    if p < 2 {
        return Err("the model needs at least 2 ranks (log2 p = 0)".into());
    }
    if d == 0 {
        return Err("D (torus dimensions) must be at least 1".into());
    }
    let n = size_bytes / ELEM_BYTES * ELEM_BYTES;
    if n == 0 {
        return Err(format!("vector size must be at least {ELEM_BYTES} bytes (one element), got {size_bytes}"));
    }
    let mut router = Router::new(topo);
    let honour_ports = plan.torus.as_deref().is_some_and(|dims| router.is_torus(dims));
    let nports = router.num_ports();
    let mut link = vec![0u64; nports];
    let mut sent = vec![0u64; nports];
    let mut touched: Vec<usize> = Vec::new();
    // Per rank in the step: messages sent, received, bytes sent.
    let mut sends = vec![0u32; p as usize];
    let mut recvs = vec![0u32; p as usize];
    let mut rank_bytes = vec![0u64; p as usize];
    let mut ranks_touched: Vec<usize> = Vec::new();
    let mut path = Vec::new();
    let steps = plan.num_steps() as usize;
    let mut per_step = Vec::with_capacity(steps);
    for (s, st) in plan.steps.iter().enumerate() {
        let mut load = StepLoad {
            max_port_bytes: 0,
            max_link_bytes: 0,
            congestion: 0.0,
            max_hops: 0,
            messages: 0,
            bytes: 0,
            max_sends: 0,
            max_recvs: 0,
            max_rank_bytes: 0,
            max_msg_bytes: 0,
        };
        for m in &st.msgs {
            let bytes = plan.bytes(m.blocks, n, ELEM_BYTES);
            if bytes == 0 {
                continue;
            }
            if m.to >= p {
                return Err(format!("rank {} sends to rank {} in step {s}, but there are {p} ranks", m.from, m.to));
            }
            let port = (honour_ports && m.port != NO_PORT).then_some(m.port);
            router.path(m.from, m.to, port, &mut path)?;
            let Some(&(n0, p0)) = path.first() else { continue };
            load.messages += 1;
            load.bytes += bytes;
            load.max_msg_bytes = load.max_msg_bytes.max(bytes);
            for r in [m.from as usize, m.to as usize] {
                if sends[r] == 0 && recvs[r] == 0 {
                    ranks_touched.push(r);
                }
            }
            sends[m.from as usize] += 1;
            recvs[m.to as usize] += 1;
            rank_bytes[m.from as usize] += bytes;
            load.max_hops = load.max_hops.max(path.len() as u32);
            let g0 = router.global_port(n0, p0);
            if sent[g0] == 0 && link[g0] == 0 {
                touched.push(g0);
            }
            sent[g0] += bytes;
            for &(node, port) in &path {
                let g = router.global_port(node, port);
                if link[g] == 0 && sent[g] == 0 {
                    touched.push(g);
                }
                link[g] += bytes;
            }
        }
        for &g in &touched {
            load.max_port_bytes = load.max_port_bytes.max(sent[g]);
            load.max_link_bytes = load.max_link_bytes.max(link[g]);
            sent[g] = 0;
            link[g] = 0;
        }
        touched.clear();
        for &r in &ranks_touched {
            load.max_sends = load.max_sends.max(sends[r]);
            load.max_recvs = load.max_recvs.max(recvs[r]);
            load.max_rank_bytes = load.max_rank_bytes.max(rank_bytes[r]);
            (sends[r], recvs[r], rank_bytes[r]) = (0, 0, 0);
        }
        ranks_touched.clear();
        if load.max_port_bytes > 0 {
            load.congestion = load.max_link_bytes as f64 / load.max_port_bytes as f64;
        }
        // A run of identical steps has identical loads.
        for _ in 0..st.repeat {
            per_step.push(load.clone());
        }
    }
    let sum_b: f64 = per_step.iter().map(|l| l.max_port_bytes as f64).sum();
    let sum_lb: f64 = per_step.iter().map(|l| l.max_link_bytes as f64).sum();
    let ideal = n as f64 / d as f64;
    Ok(Deficiencies {
        algorithm: plan.algorithm.clone(),
        ranks: p,
        d,
        size_bytes: n,
        steps,
        lambda: steps as f64 / (p as f64).log2(),
        psi: sum_b / ideal,
        xi: if sum_b > 0.0 { sum_lb / sum_b } else { 0.0 },
        xi_sum: per_step.iter().map(|l| l.congestion).sum(),
        per_step,
    })
}

// ---------------------------------------------------------------------------------------------
// Table 2 closed forms.

/// How Table 2 defines the congestion deficiency of a row.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum XiConvention {
    /// Data-weighted (compare with [`Deficiencies::xi`]).
    Weighted,
    /// Summed over the steps (compare with [`Deficiencies::xi_sum`]).
    Sum,
}

/// The paper's deficiencies for one algorithm on a `D`-dimensional torus of `p` nodes.
#[derive(Clone, Debug, PartialEq)]
pub struct Table2 {
    /// Table 2 row this algorithm corresponds to.
    pub row: &'static str,
    pub lambda: f64,
    pub psi: f64,
    /// Table 2's `Ξ` (a bound or the `p → ∞` value), if it gives one for this `D`.
    pub xi: Option<f64>,
    /// The finite-`p` expression the paper derives the table entry from, if any (Swing (B):
    /// `Σ_s δ(σ(s))/2^{s+1}` (§4.1); recursive doubling (B): `Σ_s 2^{σ(s)}/2^{s+1}`;
    /// recursive doubling (L): `D·Σ_{i=0}^{⌊(log2 p−1)/D⌋} 2^i`; Swing (L):
    /// `D·Σ_{s=0}^{⌊(log2 p−1)/D⌋} δ(s)`; 1 for ring and bucket).
    pub xi_formula: Option<f64>,
    pub xi_convention: XiConvention,
    /// How the table's row relates to this implementation, when they differ.
    pub note: &'static str,
}

/// Swing's peer distance `δ(s) = (2^{s+1} − (−1)^{s+1}) / 3`.
fn swing_delta(s: u32) -> f64 {
    crate::algos::swing::delta(s) as f64
}

/// Table 2 of the Swing paper for `algorithm` (a name accepted by [`algos::build`]) on a
/// `d`-dimensional torus with `p` nodes, or `None` if the table has no row for it.
pub fn table2(algorithm: &str, d: u32, p: u32) -> Option<Table2> {
    let lg = (p as f64).log2();
    let df = d as f64;
    let root = (p as f64).powf(1.0 / df);
    let nsteps = lg.ceil().max(0.0) as u32;
    let last_sigma = if lg >= 1.0 { ((lg - 1.0) / df).floor() as u32 } else { 0 };
    let sigma = |s: u32| s / d.max(1);
    use crate::registry::ModelRow;
    let entry = crate::registry::variant_entry(algorithm).ok()?;
    let note = entry.model_note;
    let row = match entry.model_row? {
        ModelRow::Ring => Table2 {
            row: "Ring",
            lambda: 2.0 * p as f64 / lg,
            psi: 1.0,
            xi: Some(1.0),
            xi_formula: Some(1.0),
            xi_convention: XiConvention::Weighted,
            note,
        },
        ModelRow::RecursiveDoublingLatency => Table2 {
            row: "Rec.Doub. (L)",
            lambda: 1.0,
            psi: df * lg,
            xi: Some(2.0 * df * root),
            xi_formula: Some(df * (0..=last_sigma).map(|i| 2f64.powi(i as i32)).sum::<f64>()),
            xi_convention: XiConvention::Sum,
            note,
        },
        ModelRow::RecursiveDoublingBandwidth => Table2 {
            row: "Rec.Doub. (B)",
            lambda: 2.0,
            psi: 2.0 * df,
            xi: (d >= 2).then(|| (2f64.powi(d as i32) - 1.0) / (2f64.powi(d as i32) - 2.0)),
            xi_formula: Some((0..nsteps).map(|s| 2f64.powi(sigma(s) as i32) / 2f64.powi(s as i32 + 1)).sum()),
            xi_convention: XiConvention::Weighted,
            note,
        },
        ModelRow::Bucket => Table2 {
            row: "Bucket",
            lambda: 2.0 * df * root / lg,
            psi: 1.0,
            xi: Some(1.0),
            xi_formula: Some(1.0),
            xi_convention: XiConvention::Weighted,
            note,
        },
        ModelRow::SwingLatency => Table2 {
            row: "Swing (L)",
            lambda: 1.0,
            psi: df * lg,
            xi: Some(4.0 / 3.0 * df * root),
            xi_formula: Some(df * (0..=last_sigma).map(swing_delta).sum::<f64>()),
            xi_convention: XiConvention::Sum,
            note,
        },
        ModelRow::SwingBandwidth => Table2 {
            row: "Swing (B)",
            lambda: 2.0,
            psi: 1.0,
            xi: match d {
                2 => Some(1.19),
                3 => Some(1.03),
                4 => Some(1.008),
                _ => None,
            },
            xi_formula: Some((0..nsteps).map(|s| swing_delta(sigma(s)) / 2f64.powi(s as i32 + 1)).sum()),
            xi_convention: XiConvention::Weighted,
            note,
        },
    };
    Some(row)
}

// ---------------------------------------------------------------------------------------------
// Topology specs and the one-call model.

/// A short topology description: `torus:64x64`, `hyperx:64x64`, `hammingmesh:2x2,32x32`
/// (board, grid).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TopologyShape {
    Torus(Vec<u32>),
    HyperX(Vec<u32>),
    HammingMesh { board: (u32, u32), grid: (u32, u32) },
}

/// Link bandwidth of a topology given only by its spec (a scenario's bare `topology =
/// "torus:8x8"`, and the model): the Swing paper's 400 Gb/s (NSDI'24 §5).
pub const DEFAULT_BANDWIDTH_GBPS: f64 = 400.0;
/// Link latency of a topology given only by its spec: the Swing paper's 100 ns.
pub const DEFAULT_LATENCY_NS: f64 = 100.0;

/// Topology kinds [`TopologyShape::parse`] accepts, with an example each.
pub const TOPOLOGY_KINDS: &str = "torus:64x64, hyperx:64x64, hammingmesh:2x2,32x32 (board,grid)";

fn parse_dims(spec: &str, what: &str, text: &str) -> Result<Vec<u32>, String> {
    if text.is_empty() {
        return Err(format!("topology '{spec}': missing {what} (e.g. {TOPOLOGY_KINDS})"));
    }
    text.split('x')
        .map(|t| match t.trim().parse::<u32>() {
            Ok(v) if v >= 1 => Ok(v),
            _ => Err(format!("topology '{spec}': {what} '{text}' has '{t}', expected a positive integer")),
        })
        .collect()
}

impl TopologyShape {
    pub fn parse(spec: &str) -> Result<TopologyShape, String> {
        let Some((kind, rest)) = spec.split_once(':') else {
            return Err(format!("topology '{spec}': expected KIND:SHAPE, one of {TOPOLOGY_KINDS}"));
        };
        match kind.trim().to_ascii_lowercase().as_str() {
            "torus" => Ok(TopologyShape::Torus(parse_dims(spec, "dimensions", rest.trim())?)),
            "hyperx" => Ok(TopologyShape::HyperX(parse_dims(spec, "dimensions", rest.trim())?)),
            "hammingmesh" | "hxmesh" => {
                let parts: Vec<&str> = rest.split(',').collect();
                let [board, grid] = parts[..] else {
                    return Err(format!(
                        "topology '{spec}': expected hammingmesh:BXxBY,GXxGY (board, grid), e.g. hammingmesh:2x2,32x32"
                    ));
                };
                let two = |what: &str, text: &str| -> Result<(u32, u32), String> {
                    match parse_dims(spec, what, text.trim())?[..] {
                        [x, y] => Ok((x, y)),
                        _ => Err(format!("topology '{spec}': {what} '{}' must be XxY", text.trim())),
                    }
                };
                Ok(TopologyShape::HammingMesh { board: two("board", board)?, grid: two("grid", grid)? })
            }
            other => Err(format!(
                "topology '{spec}': unknown kind '{other}' (known: torus, hyperx, hammingmesh; e.g. {TOPOLOGY_KINDS})"
            )),
        }
    }

    /// The kind's name (`torus`, `hyperx`, `hammingmesh`), as a scenario's `topology.kind`.
    pub fn kind(&self) -> &'static str {
        match self {
            TopologyShape::Torus(_) => "torus",
            TopologyShape::HyperX(_) => "hyperx",
            TopologyShape::HammingMesh { .. } => "hammingmesh",
        }
    }

    /// Number of hosts (= ranks): the product of the dimensions, or of board and grid sizes.
    /// Saturates instead of overflowing (a spec's dimensions are not bounded here).
    pub fn hosts(&self) -> u64 {
        let dims: Vec<u32> = match self {
            TopologyShape::Torus(dims) | TopologyShape::HyperX(dims) => dims.clone(),
            TopologyShape::HammingMesh { board, grid } => vec![board.0, board.1, grid.0, grid.1],
        };
        dims.iter().fold(1u64, |n, &d| n.saturating_mul(d as u64))
    }

    /// Builds the topology with links of [`DEFAULT_BANDWIDTH_GBPS`] and [`DEFAULT_LATENCY_NS`]
    /// (link parameters do not matter to the model).
    pub fn build(&self) -> Result<Topology, String> {
        let link = LinkParams {
            bandwidth_bps: (DEFAULT_BANDWIDTH_GBPS * 1e9) as u64,
            latency_ps: (DEFAULT_LATENCY_NS * 1e3) as u64,
        };
        let r = match self {
            TopologyShape::Torus(dims) => topo::torus(dims, link),
            TopologyShape::HyperX(dims) => topo::hyperx(dims, link),
            TopologyShape::HammingMesh { board, grid } => {
                topo::hammingmesh(board.0, board.1, grid.0, grid.1, link, link)
            }
        };
        r.map_err(|e| format!("topology '{}': {e}", self.spec()))
    }

    /// The rank layout schedules are generated for: the torus / HyperX shape, or the global
    /// `(board_x·grid_x) × (board_y·grid_y)` grid of a HammingMesh.
    pub fn layout(&self) -> Layout {
        let dims = match self {
            TopologyShape::Torus(dims) | TopologyShape::HyperX(dims) => dims.clone(),
            TopologyShape::HammingMesh { board, grid } => vec![board.0 * grid.0, board.1 * grid.1],
        };
        Layout { dims }
    }

    /// Default `D` of `n/D`: the number of dimensions (2 for HammingMesh).
    pub fn default_d(&self) -> u32 {
        match self {
            TopologyShape::Torus(dims) | TopologyShape::HyperX(dims) => dims.len() as u32,
            TopologyShape::HammingMesh { .. } => 2,
        }
    }

    /// Canonical text form.
    pub fn spec(&self) -> String {
        let x = |v: &[u32]| v.iter().map(u32::to_string).collect::<Vec<_>>().join("x");
        match self {
            TopologyShape::Torus(d) => format!("torus:{}", x(d)),
            TopologyShape::HyperX(d) => format!("hyperx:{}", x(d)),
            TopologyShape::HammingMesh { board, grid } => {
                format!("hammingmesh:{}x{},{}x{}", board.0, board.1, grid.0, grid.1)
            }
        }
    }
}

/// The model of one algorithm on one topology.
#[derive(Clone, Debug, PartialEq)]
pub struct ModelReport {
    /// Canonical topology spec.
    pub topology: String,
    /// The name asked for, when it is not the variant modelled (a family, alias or policy
    /// resolved for the size; see [`crate::registry::resolve`]).
    pub resolved_from: Option<String>,
    pub collective: Collective,
    pub deficiencies: Deficiencies,
    pub table2: Option<Table2>,
}

/// Builds the allreduce timing plan of `algorithm` for the topology `topology_spec` (see
/// [`TopologyShape`]; the plan is built directly for the large ring-family, bucket and Swing-B
/// schedules) and measures its deficiencies for a `size_bytes` vector. `d` overrides
/// the topology's default `D`. `algorithm` must name a variant (or an alias of one); see
/// [`model_resolved`] for families, policies and other collectives.
pub fn model(algorithm: &str, topology_spec: &str, size_bytes: u64, d: Option<u32>) -> Result<ModelReport, String> {
    model_resolved(algorithm, topology_spec, Collective::Allreduce, size_bytes, d, None)
}

/// [`model`] for any registry name and any collective: with `costs`, a family or policy is
/// first resolved to the variant it picks for `size_bytes` on the topology's layout. A
/// collective other than allreduce is measured on the plan of its schedule, `size_bytes` per
/// rank ([`Collective::vector_bytes`]); Table 2 has rows for allreduce only.
pub fn model_resolved(
    algorithm: &str,
    topology_spec: &str,
    collective: Collective,
    size_bytes: u64,
    d: Option<u32>,
    costs: Option<&crate::registry::Costs>,
) -> Result<ModelReport, String> {
    let spec = TopologyShape::parse(topology_spec)?;
    let layout = spec.layout();
    let entry = match costs {
        Some(c) => crate::registry::resolve(algorithm, collective, &layout, size_bytes, c, false)?,
        None => crate::registry::variant_entry(algorithm)?,
    };
    let variant = entry.name;
    let d = d.unwrap_or_else(|| spec.default_d());
    let topo = spec.build()?;
    let plan = match collective {
        Collective::Allreduce => crate::plan::plan(variant, &layout),
        _ => crate::registry::build(variant, collective, &layout).and_then(|s| Plan::from_schedule(&s)),
    }
    .map_err(|e| format!("{variant}: {e}"))?;
    let vector = collective.vector_bytes(size_bytes, layout.ranks());
    let deficiencies = deficiencies_of_plan(&plan, &topo, vector, d)?;
    Ok(ModelReport {
        topology: spec.spec(),
        resolved_from: (variant != algorithm).then(|| algorithm.to_string()),
        collective,
        table2: if collective == Collective::Allreduce { table2(variant, d, deficiencies.ranks) } else { None },
        deficiencies,
    })
}
