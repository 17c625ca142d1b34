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
//! Where it differs from packet level: no queueing dynamics or credit stalls (sharing is
//! instantly fair), no packet interleaving effects at step boundaries, and one fixed path per
//! message (no adaptive spreading). See docs/flow-vs-packet.md for the cross-validation.

mod fluid;

pub use fluid::Fluid;

use reducelab_sched::model::Router;
use reducelab_sched::{RecvOp, Schedule};
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
    /// Number of max-min recomputations.
    pub solves: u64,
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

struct Msg {
    from: u32,
    to: u32,
    ordinal: u32,
    delay_ps: f64,
}

struct Ranks<'a> {
    sched: &'a Schedule,
    pc: Vec<usize>,
    outstanding: Vec<u32>,
    sent_on: HashMap<(u32, u32), u32>,
    posted_on: HashMap<(u32, u32), u32>,
    waiting: HashMap<(u32, u32, u32), ()>,
    early: HashMap<(u32, u32, u32), ()>,
    finished: u32,
    end_ps: f64,
}

/// Runs `sched` for a vector of `bytes` on `topo` (rank r on host r).
pub fn run_schedule(topo: &Topology, sched: &Schedule, bytes: u64, elem_bytes: u64, cfg: &FlowConfig) -> Result<FlowResult, String> {
    if (sched.ranks as usize) > topo.hosts.len() {
        return Err(format!("schedule has {} ranks but the topology {} hosts", sched.ranks, topo.hosts.len()));
    }
    let mut router = Router::new(topo);
    // Directed link capacities in bytes/ps, indexed by global port.
    let mut cap = vec![0.0; router.num_ports()];
    for (ni, n) in topo.nodes.iter().enumerate() {
        for (pi, pp) in n.ports.iter().enumerate() {
            let g = router.global_port(reducelab_topo::NodeId(ni as u32), pi as u16);
            cap[g] = topo.links[pp.link.idx()].bandwidth_bps as f64 / 8.0 / 1e12;
        }
    }
    let mut fluid = Fluid::new(cap);
    let payload = (cfg.mtu_bytes - cfg.header_bytes) as u64;
    let mut msgs: Vec<Msg> = Vec::new();
    let mut deliveries: BinaryHeap<Reverse<(T, u32)>> = BinaryHeap::new();
    let mut path = Vec::new();
    let mut ranks = Ranks {
        sched,
        pc: vec![0; sched.ranks as usize],
        outstanding: vec![0; sched.ranks as usize],
        sent_on: HashMap::new(),
        posted_on: HashMap::new(),
        waiting: HashMap::new(),
        early: HashMap::new(),
        finished: 0,
        end_ps: 0.0,
    };
    let mut now = 0.0f64;
    let mut solves = 0u64;
    // flow id -> message id (they are allocated together, so equal).
    let mut start = |r: u32, now: f64, ranks: &mut Ranks, fluid: &mut Fluid, msgs: &mut Vec<Msg>, router: &mut Router, deliveries: &mut BinaryHeap<Reverse<(T, u32)>>| -> Result<(), String> {
        loop {
            let ri = r as usize;
            let Some(step) = ranks.sched.programs[ri].steps.get(ranks.pc[ri]) else {
                ranks.finished += 1;
                ranks.end_ps = ranks.end_ps.max(now);
                return Ok(());
            };
            for t in &step.sends {
                let b = ranks.sched.blocks_bytes(&t.blocks, bytes, elem_bytes);
                let pkts = b.div_ceil(payload).max(1);
                let wire = b + pkts * cfg.header_bytes as u64;
                router.path(r, t.peer, t.port, &mut path)?;
                let mut lat = 0.0;
                let mut links = Vec::with_capacity(path.len());
                for &(node, port) in &path {
                    let g = router.global_port(node, port);
                    links.push(g as u32);
                    let pp = topo.nodes[node.idx()].ports[port as usize];
                    lat += topo.links[pp.link.idx()].latency_ps as f64;
                    if topo.nodes[pp.peer.idx()].forwards {
                        lat += cfg.per_hop_ps as f64;
                    }
                }
                // Store-and-forward with equal link speeds is a flow shop: the makespan is the
                // source's serialisation of every packet plus, per extra hop, the largest
                // packet's serialisation (Σ pᵢ + (h−1)·max pᵢ).
                if path.len() > 1 {
                    let largest = b.min(payload) + cfg.header_bytes as u64;
                    let bw = topo.links[topo.nodes[path[0].0.idx()].ports[path[0].1 as usize].link.idx()].bandwidth_bps as f64;
                    lat += (path.len() - 1) as f64 * (largest as f64 * 8.0 / bw * 1e12);
                }
                let ordinal = {
                    let c = ranks.sent_on.entry((r, t.peer)).or_insert(0);
                    *c += 1;
                    *c - 1
                };
                let id = fluid.add(links, wire as f64);
                debug_assert_eq!(id as usize, msgs.len());
                msgs.push(Msg { from: r, to: t.peer, ordinal, delay_ps: lat });
                if wire == 0 {
                    deliveries.push(Reverse((T(now + lat), id)));
                }
                ranks.outstanding[ri] += 1;
            }
            for t in &step.recvs {
                let _ = t.op.unwrap_or(RecvOp::Copy);
                let ordinal = {
                    let c = ranks.posted_on.entry((t.peer, r)).or_insert(0);
                    *c += 1;
                    *c - 1
                };
                let key = (t.peer, r, ordinal);
                if ranks.early.remove(&key).is_none() {
                    ranks.waiting.insert(key, ());
                    ranks.outstanding[ri] += 1;
                }
            }
            if ranks.outstanding[ri] > 0 {
                return Ok(());
            }
            ranks.pc[ri] += 1;
        }
    };
    for r in 0..sched.ranks {
        start(r, 0.0, &mut ranks, &mut fluid, &mut msgs, &mut router, &mut deliveries)?;
    }
    fluid.solve();
    solves += 1;
    let mut done = Vec::new();
    let mut ready: Vec<u32> = Vec::new();
    while ranks.finished < sched.ranks {
        let next_flow = fluid.next_completion().map(|dt| now + dt);
        let next_deliv = deliveries.peek().map(|Reverse((T(t), _))| *t);
        let t_next = match (next_flow, next_deliv) {
            (Some(a), Some(b)) => a.min(b),
            (Some(a), None) => a,
            (None, Some(b)) => b,
            (None, None) => {
                return Err(format!("stalled: {} of {} ranks finished and nothing is in flight", ranks.finished, sched.ranks))
            }
        };
        if !t_next.is_finite() {
            return Err("stalled: active flows have zero rate".into());
        }
        fluid.advance(t_next - now, &mut done);
        now = t_next;
        for &f in &done {
            deliveries.push(Reverse((T(now + msgs[f as usize].delay_ps), f)));
        }
        let mut changed = !done.is_empty();
        // Deliver everything due now.
        while let Some(&Reverse((T(t), m))) = deliveries.peek() {
            if t > now {
                break;
            }
            deliveries.pop();
            let (from, to, ordinal) = (msgs[m as usize].from, msgs[m as usize].to, msgs[m as usize].ordinal);
            ready.clear();
            if ranks.waiting.remove(&(from, to, ordinal)).is_some() {
                ranks.outstanding[to as usize] -= 1;
                if ranks.outstanding[to as usize] == 0 {
                    ready.push(to);
                }
            } else {
                ranks.early.insert((from, to, ordinal), ());
            }
            ranks.outstanding[from as usize] -= 1;
            if ranks.outstanding[from as usize] == 0 {
                ready.push(from);
            }
            for &r in &ready {
                ranks.pc[r as usize] += 1;
                start(r, now, &mut ranks, &mut fluid, &mut msgs, &mut router, &mut deliveries)?;
                changed = true;
            }
        }
        if changed {
            fluid.solve();
            solves += 1;
        }
    }
    Ok(FlowResult { runtime_ps: ranks.end_ps.round() as u64, messages: msgs.len() as u64, solves })
}
