//! Flow-level backend: collective schedules with messages as fluid flows.
//!
//! Each message of a schedule is a flow on its route (the same routes the deficiency model
//! uses: straight along the transfer's port on tori, the topology's deterministic minimal
//! path elsewhere). Active flows share link capacity max-min fairly; rates are recomputed
//! whenever flows start or end (simultaneous ends are batched). A message is delivered when
//! its last byte has left the source plus the path latency: link latencies, the pipeline
//! latency of every forwarding node it enters, and one packet serialisation per extra hop
//! (store-and-forward), so that it matches the packet engine's timing of a lone message.
//! Ranks follow the same step semantics as the packet engine: a step's messages start
//! together and the step completes when all its sends and receives are done.
//!
//! The backend runs timing [`Plan`]s (message sizes without block identities, identical
//! steps stored once), so ring-family and bucket allreduces on 16k-node tori fit in memory.
//! **Contention-free plans** — every directed link carries messages of one sender only, at
//! most one per step — cannot have two flows on a link at once (a rank starts a step only
//! after its previous sends were delivered), so every flow runs at its path's capacity and
//! the fluid simulation reduces exactly to a max-plus recurrence over the steps: a rank's
//! step ends at the latest delivery among its sends and receives, a message is delivered at
//! its sender's step start plus its duration. [`run_plan`] uses that recurrence for them
//! (`O(ranks + messages)` per step, no events; the ring, Hamiltonian-ring and bucket
//! allreduces on tori qualify) and the event-driven fluid simulation otherwise; tests check
//! that both give the same times.
//!
//! Where it differs from packet level: no queueing dynamics or credit stalls (sharing is
//! instantly fair), no packet interleaving effects at step boundaries, and one fixed path per
//! message (no adaptive spreading). See docs/flow-vs-packet.md for the cross-validation.

mod fluid;

pub use fluid::Fluid;

use reducelab_sched::model::Router;
use reducelab_sched::plan::{Plan, NO_PORT};
use reducelab_sched::Schedule;
use reducelab_topo::Topology;
use std::cmp::{Ordering, Reverse};
use std::collections::{BinaryHeap, HashMap};

/// Timing parameters shared with the packet engine.
#[derive(Clone, Debug)]
pub struct FlowConfig {
    /// Pipeline latency of each forwarding node a message enters (ps).
    pub per_hop_ps: u64,
    /// Largest packet on the wire (headers included).
    pub mtu_bytes: u32,
    pub header_bytes: u32,
}

#[derive(Clone, Debug, PartialEq)]
pub struct FlowResult {
    /// Time until the last rank finished its last step.
    pub runtime_ps: u64,
    pub messages: u64,
    /// Number of max-min recomputations (0 on the contention-free path).
    pub solves: u64,
    /// Whether the contention-free recurrence was used.
    pub contention_free: bool,
}

#[derive(Clone, Copy, PartialEq)]
struct T(f64);
impl Eq for T {}
impl PartialOrd for T {
    fn partial_cmp(&self, o: &Self) -> Option<Ordering> {
        Some(self.cmp(o))
    }
}
impl Ord for T {
    fn cmp(&self, o: &Self) -> Ordering {
        self.0.total_cmp(&o.0)
    }
}

/// A plan routed on a topology: per distinct step, every message's path (a range of the
/// link arena), fixed latency, and the senders' and receivers' message lists.
struct Routed {
    /// Link ids of every path, concatenated.
    arena: Vec<u32>,
    /// Capacity of every directed link, bytes/ps.
    cap: Vec<f64>,
    steps: Vec<RoutedStep>,
}

struct RoutedStep {
    repeat: u32,
    msgs: Vec<RoutedMsg>,
    /// Messages by sender: `send_idx[send_off[r]..send_off[r+1]]` (built on demand).
    send_off: Vec<u32>,
    send_idx: Vec<u32>,
    /// Messages received by each rank in this step.
    recv_count: Vec<u32>,
}

struct RoutedMsg {
    from: u32,
    to: u32,
    /// Bytes on the wire (payload plus one header per packet).
    wire: f64,
    path: (u32, u32),
    /// Delivery delay after the last byte left the source (ps).
    delay_ps: f64,
    /// Smallest capacity on the path (bytes/ps); infinite for an empty path.
    bottleneck: f64,
}

fn route(topo: &Topology, plan: &Plan, bytes: u64, elem_bytes: u64, cfg: &FlowConfig) -> Result<Routed, String> {
    if (plan.ranks as usize) > topo.hosts.len() {
        return Err(format!("schedule has {} ranks but the topology {} hosts", plan.ranks, topo.hosts.len()));
    }
    let mut router = Router::new(topo);
    let honour_ports = plan.torus.as_deref().is_some_and(|d| router.is_torus(d));
    let mut cap = vec![0.0; router.num_ports()];
    for (ni, n) in topo.nodes.iter().enumerate() {
        for (pi, pp) in n.ports.iter().enumerate() {
            let g = router.global_port(reducelab_topo::NodeId(ni as u32), pi as u16);
            cap[g] = topo.links[pp.link.idx()].bandwidth_bps as f64 / 8.0 / 1e12;
        }
    }
    let payload = (cfg.mtu_bytes - cfg.header_bytes) as u64;
    let p = plan.ranks as usize;
    let mut arena = Vec::new();
    let mut path = Vec::new();
    // Paths are the same for equal (from, to, port): intern them across steps.
    let mut interned: HashMap<(u32, u32, u16), (u32, u32, f64, f64, u64)> = HashMap::new();
    let mut steps = Vec::with_capacity(plan.steps.len());
    for st in &plan.steps {
        let mut msgs = Vec::with_capacity(st.msgs.len());
        for m in &st.msgs {
            if m.from >= plan.ranks || m.to >= plan.ranks {
                return Err(format!("message from rank {} to rank {}, but there are {} ranks", m.from, m.to, plan.ranks));
            }
            let port = if honour_ports && m.port != NO_PORT { Some(m.port) } else { None };
            let key = (m.from, m.to, m.port);
            let (start, len, lat, bottleneck, first_bw) = match interned.get(&key) {
                Some(&v) => v,
                None => {
                    router.path(m.from, m.to, port, &mut path)?;
                    let start = arena.len() as u32;
                    let mut lat = 0.0;
                    let mut bottleneck = f64::INFINITY;
                    for &(node, port) in &path {
                        let g = router.global_port(node, port);
                        arena.push(g as u32);
                        bottleneck = bottleneck.min(cap[g]);
                        let pp = topo.nodes[node.idx()].ports[port as usize];
                        lat += topo.links[pp.link.idx()].latency_ps as f64;
                        if topo.nodes[pp.peer.idx()].forwards {
                            lat += cfg.per_hop_ps as f64;
                        }
                    }
                    let first_bw = path.first().map_or(0, |&(n, p)| topo.links[topo.nodes[n.idx()].ports[p as usize].link.idx()].bandwidth_bps);
                    let v = (start, path.len() as u32, lat, bottleneck, first_bw);
                    interned.insert(key, v);
                    v
                }
            };
            let b = plan.bytes(m.blocks, bytes, elem_bytes);
            let pkts = b.div_ceil(payload).max(1);
            let wire = b + pkts * cfg.header_bytes as u64;
            let mut delay = lat;
            // Store-and-forward with equal link speeds is a flow shop: the makespan is the
            // source's serialisation of every packet plus, per extra hop, the largest
            // packet's serialisation (Σ pᵢ + (h−1)·max pᵢ).
            if len > 1 {
                let largest = b.min(payload) + cfg.header_bytes as u64;
                delay += (len - 1) as f64 * (largest as f64 * 8.0 / first_bw as f64 * 1e12);
            }
            msgs.push(RoutedMsg { from: m.from, to: m.to, wire: wire as f64, path: (start, len), delay_ps: delay, bottleneck });
        }
        steps.push(RoutedStep { repeat: st.repeat, msgs, send_off: Vec::new(), send_idx: Vec::new(), recv_count: Vec::new() });
    }
    Ok(Routed { arena, cap, steps })
}

/// Adds the per-rank message index the event-driven simulation needs.
fn index(mut r: Routed, ranks: u32) -> Routed {
    let p = ranks as usize;
    for st in &mut r.steps {
        let mut send_off = vec![0u32; p + 1];
        let mut recv_count = vec![0u32; p];
        for m in &st.msgs {
            send_off[m.from as usize + 1] += 1;
            recv_count[m.to as usize] += 1;
        }
        for i in 0..p {
            send_off[i + 1] += send_off[i];
        }
        let mut send_idx = vec![0u32; st.msgs.len()];
        let mut fill = send_off.clone();
        for (i, m) in st.msgs.iter().enumerate() {
            send_idx[fill[m.from as usize] as usize] = i as u32;
            fill[m.from as usize] += 1;
        }
        (st.send_off, st.send_idx, st.recv_count) = (send_off, send_idx, recv_count);
    }
    r
}

/// Whether no two messages can ever share a link at the same time: every directed link
/// carries messages of a single sender, at most one per step.
fn contention_free(r: &Routed) -> bool {
    let mut owner = vec![u32::MAX; r.cap.len()];
    let mut stamp = vec![u32::MAX; r.cap.len()];
    for (j, st) in r.steps.iter().enumerate() {
        for m in &st.msgs {
            for &l in &r.arena[m.path.0 as usize..(m.path.0 + m.path.1) as usize] {
                let l = l as usize;
                if owner[l] == u32::MAX {
                    owner[l] = m.from;
                } else if owner[l] != m.from {
                    return false;
                }
                if stamp[l] == j as u32 {
                    return false;
                }
                stamp[l] = j as u32;
            }
        }
    }
    true
}

/// Whether `plan` on `topo` is contention-free (see the crate docs), i.e. whether
/// [`run_plan`] times it with the exact recurrence.
pub fn is_contention_free(topo: &Topology, plan: &Plan, cfg: &FlowConfig) -> Result<bool, String> {
    Ok(contention_free(&route(topo, plan, 0, 1, cfg)?))
}

/// Runs `sched` for a vector of `bytes` on `topo` (rank r on host r).
pub fn run_schedule(topo: &Topology, sched: &Schedule, bytes: u64, elem_bytes: u64, cfg: &FlowConfig) -> Result<FlowResult, String> {
    run_plan(topo, &Plan::from_schedule(sched)?, bytes, elem_bytes, cfg)
}

/// Runs `plan` for a vector of `bytes` on `topo` (rank r on host r): the contention-free
/// recurrence when it applies, the fluid simulation otherwise.
pub fn run_plan(topo: &Topology, plan: &Plan, bytes: u64, elem_bytes: u64, cfg: &FlowConfig) -> Result<FlowResult, String> {
    let routed = route(topo, plan, bytes, elem_bytes, cfg)?;
    if contention_free(&routed) {
        return Ok(recurrence(plan, &routed));
    }
    simulate(plan, &index(routed, plan.ranks))
}

/// Runs `plan` with the event-driven fluid simulation even if it is contention-free (for
/// tests and comparisons).
pub fn run_plan_simulated(topo: &Topology, plan: &Plan, bytes: u64, elem_bytes: u64, cfg: &FlowConfig) -> Result<FlowResult, String> {
    simulate(plan, &index(route(topo, plan, bytes, elem_bytes, cfg)?, plan.ranks))
}

/// The contention-free max-plus recurrence (see the crate docs).
fn recurrence(plan: &Plan, r: &Routed) -> FlowResult {
    let p = plan.ranks as usize;
    let mut start = vec![0.0f64; p];
    let mut next = vec![0.0f64; p];
    let mut messages = 0u64;
    for st in &r.steps {
        let dur: Vec<f64> = st.msgs.iter().map(|m| m.wire / m.bottleneck + m.delay_ps).collect();
        for _ in 0..st.repeat {
            next.copy_from_slice(&start);
            for (m, &d) in st.msgs.iter().zip(&dur) {
                let t = start[m.from as usize] + d;
                let (f, to) = (m.from as usize, m.to as usize);
                if next[f] < t {
                    next[f] = t;
                }
                if next[to] < t {
                    next[to] = t;
                }
            }
            std::mem::swap(&mut start, &mut next);
        }
        messages += st.repeat as u64 * st.msgs.len() as u64;
    }
    let end = start.iter().fold(0.0f64, |a, &b| a.max(b));
    FlowResult { runtime_ps: end.round() as u64, messages, solves: 0, contention_free: true }
}

/// Position of a rank in the plan: distinct step `j`, repetition `rep`, global step `g`.
#[derive(Clone, Copy)]
struct Cursor {
    j: usize,
    rep: u32,
    g: u64,
}

fn advance(c: Cursor, repeat: u32) -> Cursor {
    if c.rep + 1 < repeat {
        Cursor { j: c.j, rep: c.rep + 1, g: c.g + 1 }
    } else {
        Cursor { j: c.j + 1, rep: 0, g: c.g + 1 }
    }
}

/// State of the event-driven simulation.
struct Sim<'a> {
    r: &'a Routed,
    fluid: Fluid<'a>,
    /// Per flow: (distinct step, message index, global step).
    flows: Vec<(u32, u32, u64)>,
    deliveries: BinaryHeap<Reverse<(T, u32)>>,
    cur: Vec<Cursor>,
    outstanding: Vec<u32>,
    /// Receives that arrived before their receiver reached the step: (rank, global step).
    early: HashMap<(u32, u64), u32>,
    finished: usize,
    end_ps: f64,
}

impl Sim<'_> {
    /// Starts rank `rank`'s current step at `now` (and every following step that has
    /// nothing to wait for).
    fn enter(&mut self, rank: usize, now: f64) {
        loop {
            let c = self.cur[rank];
            let Some(st) = self.r.steps.get(c.j) else {
                self.finished += 1;
                self.end_ps = self.end_ps.max(now);
                return;
            };
            let (lo, hi) = (st.send_off[rank] as usize, st.send_off[rank + 1] as usize);
            for &mi in &st.send_idx[lo..hi] {
                let m = &st.msgs[mi as usize];
                let id = self.fluid.add(m.path, m.wire);
                debug_assert_eq!(id as usize, self.flows.len());
                self.flows.push((c.j as u32, mi, c.g));
                if m.path.1 == 0 {
                    self.deliveries.push(Reverse((T(now + m.delay_ps), id)));
                }
            }
            let mut wait = (hi - lo) as u32 + st.recv_count[rank];
            if st.recv_count[rank] > 0 {
                if let Some(e) = self.early.remove(&(rank as u32, c.g)) {
                    wait -= e;
                }
            }
            self.outstanding[rank] = wait;
            if wait > 0 {
                return;
            }
            self.cur[rank] = advance(c, st.repeat);
        }
    }

    /// One message of `rank`'s current step completed; starts its next step if that was
    /// the last.
    fn complete(&mut self, rank: usize, now: f64) {
        self.outstanding[rank] -= 1;
        if self.outstanding[rank] == 0 {
            let c = self.cur[rank];
            self.cur[rank] = advance(c, self.r.steps[c.j].repeat);
            self.enter(rank, now);
        }
    }
}

/// Event-driven fluid simulation of `plan`.
fn simulate(plan: &Plan, r: &Routed) -> Result<FlowResult, String> {
    let p = plan.ranks as usize;
    let mut sim = Sim {
        r,
        fluid: Fluid::new(r.cap.clone(), &r.arena),
        flows: Vec::new(),
        deliveries: BinaryHeap::new(),
        cur: vec![Cursor { j: 0, rep: 0, g: 0 }; p],
        outstanding: vec![0; p],
        early: HashMap::new(),
        finished: 0,
        end_ps: 0.0,
    };
    for rank in 0..p {
        sim.enter(rank, 0.0);
    }
    sim.fluid.solve();
    let mut solves = 1u64;
    let mut done = Vec::new();
    let mut now = 0.0f64;
    while sim.finished < p {
        let next_flow = sim.fluid.next_completion().map(|dt| now + dt);
        let next_deliv = sim.deliveries.peek().map(|Reverse((T(t), _))| *t);
        let t_next = match (next_flow, next_deliv) {
            (Some(a), Some(b)) => a.min(b),
            (Some(a), None) => a,
            (None, Some(b)) => b,
            (None, None) => return Err(format!("stalled: {} of {p} ranks finished and nothing is in flight", sim.finished)),
        };
        if !t_next.is_finite() {
            return Err("stalled: active flows have zero rate".into());
        }
        sim.fluid.advance(t_next - now, &mut done);
        now = t_next;
        for &f in &done {
            let (j, mi, _) = sim.flows[f as usize];
            sim.deliveries.push(Reverse((T(now + r.steps[j as usize].msgs[mi as usize].delay_ps), f)));
        }
        let mut changed = !done.is_empty();
        while let Some(&Reverse((T(t), f))) = sim.deliveries.peek() {
            if t > now {
                break;
            }
            sim.deliveries.pop();
            let (j, mi, g) = sim.flows[f as usize];
            let m = &r.steps[j as usize].msgs[mi as usize];
            let (from, to) = (m.from as usize, m.to as usize);
            // The sender is at step g (it cannot leave before its sends are delivered); the
            // receiver may not have reached it yet.
            sim.complete(from, now);
            if sim.cur[to].g == g && sim.outstanding[to] > 0 {
                sim.complete(to, now);
            } else {
                *sim.early.entry((m.to, g)).or_insert(0) += 1;
            }
            changed = true;
        }
        if changed {
            sim.fluid.solve();
            solves += 1;
        }
    }
    Ok(FlowResult { runtime_ps: sim.end_ps.round() as u64, messages: sim.flows.len() as u64, solves, contention_free: false })
}
