//! Routing: the next hop and virtual channel of every packet, decided hop by hop at each
//! forwarding node, and the VC policies that make credit flow control deadlock-free.
//!
//! Guarantees:
//! - Candidates are the live ports on minimal paths to the destination (computed from the
//!   topology's structure, no per-destination table; after a failure, the shortest paths of
//!   the surviving graph, from a BFS table). Only forwarding nodes carry a packet on. A
//!   packet with no candidate is dropped as `no_route`.
//! - The choice among candidates is deterministic given the state: ties break by a fixed
//!   rotation (the packet's flow hash or destination), never by memory layout or randomness.
//! - Credit mode is deadlock-free for the (topology, routing) pairs [`VcPolicy::choose`]
//!   accepts; it rejects the others with a reason.
//! - Routing allocates nothing per packet (one reused candidate buffer).

use crate::ids::PortId;
use crate::network::Network;
use crate::packet::{fingerprint, Packet};
use crate::protocol::AppDst;
use crate::{AdaptiveThreshold, FlowControl, RoutingAlgo};
use reducelab_topo::{MinimalRoutes, NodeId, Shape, Topology};
use serde::Serialize;

/// Which VC a packet uses on its next link.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub enum VcPolicy {
    /// One VC. Up*/down* routing on trees and dimension order on HyperX have acyclic channel
    /// dependencies; drop-tail networks cannot deadlock.
    Single,
    /// Torus, dimension order: VC 1 on the wrap-around link of a dimension and after it in
    /// that dimension, VC 0 otherwise (Dally & Seitz datelines).
    TorusDateline { dims: Vec<u32> },
    /// Torus, minimal adaptive (Duato): VC 2 is adaptive, usable on any minimal port when the
    /// downstream buffer can already hold the packet and everything queued before it (so an
    /// adaptive packet never waits for credits); otherwise the packet drops to the dateline
    /// escape VCs 0/1 on the dimension-order port and stays there.
    TorusDuato { dims: Vec<u32> },
    /// VC = number of links already crossed: channel dependencies only go to higher VCs.
    /// Needs as many VCs as the longest minimal path has links.
    HopIndex { vcs: u8 },
}

impl VcPolicy {
    pub fn num_vcs(&self) -> usize {
        match self {
            VcPolicy::Single => 1,
            VcPolicy::TorusDateline { .. } => 2,
            VcPolicy::TorusDuato { .. } => 3,
            VcPolicy::HopIndex { vcs } => *vcs as usize,
        }
    }

    /// Picks the policy for a topology, routing and flow control, or explains why the
    /// combination is not supported.
    pub fn choose(topo: &Topology, routing: RoutingAlgo, fc: FlowControl) -> Result<VcPolicy, String> {
        if fc == FlowControl::DropTail {
            return Ok(VcPolicy::Single);
        }
        Ok(match (&topo.shape, routing) {
            (Shape::Star { .. } | Shape::FatTree2 { .. } | Shape::FatTree3 { .. }, _) => VcPolicy::Single,
            (Shape::Torus { dims }, RoutingAlgo::Minimal) => VcPolicy::TorusDateline { dims: dims.clone() },
            (Shape::Torus { dims }, RoutingAlgo::Adaptive) => VcPolicy::TorusDuato { dims: dims.clone() },
            (Shape::Torus { .. }, r) => {
                return Err(format!(
                    "routing '{}' is not deadlock-free on a lossless torus; use 'minimal' (dimension order) or 'adaptive' (minimal adaptive with escape channels)",
                    routing_name(r)
                ))
            }
            (Shape::HyperX { .. }, RoutingAlgo::Minimal) => VcPolicy::Single,
            _ => {
                let d = topo.host_diameter();
                if d > 32 {
                    return Err(format!("diameter {d} needs more than 32 hop-index virtual channels"));
                }
                VcPolicy::HopIndex { vcs: d.max(1) as u8 }
            }
        })
    }
}

pub fn routing_name(r: RoutingAlgo) -> &'static str {
    match r {
        RoutingAlgo::Minimal => "minimal",
        RoutingAlgo::Ecmp => "ecmp",
        RoutingAlgo::Adaptive => "adaptive",
        RoutingAlgo::ThresholdAdaptive(_) if r == RoutingAlgo::CANARY => "canary",
        RoutingAlgo::ThresholdAdaptive(_) => "threshold-adaptive",
    }
}

/// For a torus node at coordinate `c` in a dimension of size `d`, is the link leaving on
/// `port` (even = `+`, odd = `−`) the wrap-around (dateline) link?
#[inline]
pub(crate) fn torus_is_wrap(dims: &[u32], node: NodeId, port: u16) -> bool {
    let dim = (port / 2) as usize;
    let mut r = node.0;
    for &d in &dims[..dim] {
        r /= d;
    }
    let c = r % dims[dim];
    if port % 2 == 0 {
        c == dims[dim] - 1
    } else {
        c == 0
    }
}

/// Routing state: minimal routes (rebuilt after failures), the topology they come from, and a
/// reused candidate buffer.
pub(crate) struct Router {
    pub routes: MinimalRoutes,
    /// Kept to rebuild routes after failures.
    pub topo: Topology,
    /// Candidate local ports of the current decision.
    scratch: Vec<u16>,
    /// Torus/HyperX dimensions (empty otherwise), for dateline VCs.
    shape_dims: Vec<u32>,
    /// Hop distances to switch nodes that protocol packets are addressed to, built on first use.
    node_dist: Vec<Option<Vec<u32>>>,
    /// Threshold-adaptive routing leaves the default port when its queue holds more bytes.
    threshold_bytes: u64,
}

impl Router {
    /// Routing over `topo` with `routing`; errors name a bad parameter.
    pub fn new(topo: &Topology, routing: RoutingAlgo, buffer_bytes: u64) -> Result<Router, String> {
        let threshold_bytes = match routing {
            RoutingAlgo::ThresholdAdaptive(t @ AdaptiveThreshold::BufferPercent(p)) => {
                if p > 100 {
                    return Err(format!("adaptive threshold must be within 0..=100 percent of the buffer, got {p}"));
                }
                t.bytes(buffer_bytes)
            }
            RoutingAlgo::ThresholdAdaptive(t) => t.bytes(buffer_bytes),
            _ => u64::MAX,
        };
        Ok(Router {
            routes: MinimalRoutes::new(topo),
            topo: topo.clone(),
            scratch: Vec::with_capacity(64),
            shape_dims: match &topo.shape {
                Shape::Torus { dims } | Shape::HyperX { dims } => dims.clone(),
                _ => Vec::new(),
            },
            node_dist: vec![None; topo.nodes.len()],
            threshold_bytes,
        })
    }
}

impl Network {
    /// Minimal next hops from `node` towards switch `target` over live links, into `scratch`.
    fn candidates_to_node(&mut self, node: NodeId, target: NodeId) {
        let r = &mut self.router;
        if r.node_dist[target.idx()].is_none() {
            let d = r.topo.bfs_from_alive(target, &self.faults.link_up, &self.faults.node_up);
            r.node_dist[target.idx()] = Some(d);
        }
        let dist = r.node_dist[target.idx()].as_ref().expect("built");
        let here = dist[node.idx()];
        r.scratch.clear();
        if here == u32::MAX || here == 0 {
            return;
        }
        for (lp, g) in self.pt.of_node(node).enumerate() {
            let peer = self.pt.node(self.pt.peer(g));
            if self.faults.is_link_up(self.pt.link(g)) && dist[peer.idx()] + 1 == here {
                // Only forwarding nodes (or the target) may carry the packet on.
                if peer == target || self.node_forwards[peer.idx()] {
                    r.scratch.push(lp as u16);
                }
            }
        }
    }

    /// Live minimal candidates of `node` towards host `dst`, into `scratch` (as local port
    /// numbers).
    fn live_candidates(&mut self, node: NodeId, dst: u32) {
        let r = &mut self.router;
        r.routes.candidates(node, dst, &mut r.scratch);
        let base = self.pt.first(node) as usize;
        r.scratch.retain(|&p| self.faults.is_link_up(self.pt.link_at(base + p as usize)));
    }

    /// The deterministic choice among `scratch`: dimension order where the topology has
    /// dimensions, destination-mod-k otherwise.
    fn deterministic_pick(&self, dst: u32) -> u16 {
        let s = &self.router.scratch;
        if self.router.routes.is_dimension_ordered() {
            s[0]
        } else {
            s[dst as usize % s.len()]
        }
    }

    /// The candidate with the fewest queued bytes, looking from `start` on (the first wins
    /// ties).
    fn least_queued(&self, node: NodeId, start: usize) -> u16 {
        let s = &self.router.scratch;
        let n = s.len();
        // Raw port indices (the node's first port + local port) in this inner loop: no id
        // round trip per candidate.
        let base = self.pt.first(node) as usize;
        let mut best = s[start % n];
        let mut best_q = self.ports[base + best as usize].occupancy();
        for k in 1..n {
            let p = s[(start + k) % n];
            let q = self.ports[base + p as usize].occupancy();
            if q < best_q {
                best = p;
                best_q = q;
            }
        }
        best
    }

    /// Picks the output port and VC for a packet at a forwarding node.
    pub(crate) fn route(&mut self, node: NodeId, p: &Packet) -> Option<(PortId, u8)> {
        match p.dst {
            AppDst::Node(n) => self.candidates_to_node(node, NodeId(n)),
            AppDst::Host(h) => self.live_candidates(node, h),
        }
        let n = self.router.scratch.len();
        if n == 0 {
            return None;
        }
        let base = self.pt.first(node);
        let port = |lp: u16| PortId::new(base + lp as u32);
        if let VcPolicy::TorusDuato { .. } = self.vc_policy {
            if p.in_vc == 2 {
                // Adaptive channel: minimal ports whose downstream adaptive buffer can take
                // this packet after everything already queued for it.
                let mut best: Option<(u16, u64)> = None;
                for k in 0..n {
                    let lp = self.router.scratch[(p.flow_hash as usize + k) % n];
                    let g = port(lp);
                    let free = self.credits.available(g, 2) - self.queues.bytes(g, 2) as i64;
                    if free >= p.wire_bytes as i64 {
                        let q = self.ports[g.idx()].occupancy();
                        if best.is_none_or(|(_, bq)| q < bq) {
                            best = Some((lp, q));
                        }
                    }
                }
                if let Some((lp, _)) = best {
                    return Some((port(lp), 2));
                }
            }
            let lp = self.router.scratch[0];
            return Some((port(lp), self.dateline_vc(node, lp, p)));
        }
        let lp = match self.cfg.routing {
            RoutingAlgo::Minimal => self.deterministic_pick(p.dst_key()),
            RoutingAlgo::Ecmp => self.router.scratch[p.flow_hash as usize % n],
            RoutingAlgo::Adaptive => self.least_queued(node, p.flow_hash as usize % n),
            RoutingAlgo::ThresholdAdaptive(_) => {
                let start = p.dst_key() as usize % n;
                let def = self.router.scratch[start];
                if self.ports[port(def).idx()].occupancy() > self.router.threshold_bytes {
                    self.least_queued(node, start)
                } else {
                    def
                }
            }
        };
        Some((port(lp), self.deterministic_vc(node, lp, p)))
    }

    /// VC of a packet leaving `node` on local port `lp` by a non-adaptive choice (on a Duato
    /// torus that is the escape channel, whose dateline VCs are deadlock-free).
    pub(crate) fn deterministic_vc(&self, node: NodeId, lp: u16, p: &Packet) -> u8 {
        match &self.vc_policy {
            VcPolicy::Single => 0,
            VcPolicy::HopIndex { vcs } => p.hops.min(vcs - 1),
            VcPolicy::TorusDateline { .. } | VcPolicy::TorusDuato { .. } => self.dateline_vc(node, lp, p),
        }
    }

    /// Dateline VC for leaving `node` on local port `lp`: 1 on the wrap link of a dimension
    /// and after it while the packet stays in that dimension on the escape channels.
    fn dateline_vc(&self, node: NodeId, lp: u16, p: &Packet) -> u8 {
        if torus_is_wrap(&self.router.shape_dims, node, lp) {
            return 1;
        }
        let same_dim = p.in_port.is_some_and(|ip| self.pt.local(ip) / 2 == lp / 2);
        (p.in_vc == 1 && same_dim) as u8
    }

    /// VC of a packet a host injects on `port`.
    pub(crate) fn injection_vc(&self, port: PortId) -> u8 {
        match &self.vc_policy {
            VcPolicy::Single | VcPolicy::HopIndex { .. } => 0,
            VcPolicy::TorusDateline { dims } => torus_is_wrap(dims, self.pt.node(port), self.pt.local(port)) as u8,
            VcPolicy::TorusDuato { .. } => 2,
        }
    }

    /// The NIC port of host node `node` that message `msg` to host `dst` is sent from, when
    /// the sender did not fix one and the host has several: `None` if no live port leads to
    /// `dst`.
    pub(crate) fn injection_port(&mut self, node: NodeId, dst: u32, msg: u32) -> Option<u16> {
        self.live_candidates(node, dst);
        if self.router.scratch.is_empty() {
            return None;
        }
        Some(match self.cfg.routing {
            RoutingAlgo::Minimal => self.deterministic_pick(dst),
            RoutingAlgo::Ecmp => {
                let h = (fingerprint(self.salt, msg, u32::MAX) >> 32) as usize;
                self.router.scratch[h % self.router.scratch.len()]
            }
            RoutingAlgo::Adaptive | RoutingAlgo::ThresholdAdaptive(_) => {
                // Spread messages: fewest active injections, then fewest queued bytes.
                let mut best = self.router.scratch[0];
                let mut key = (u64::MAX, u64::MAX);
                for &c in &self.router.scratch {
                    let g = self.pt.of(node, c).idx();
                    let k = (self.inject[g].len() as u64, self.ports[g].q_bytes);
                    if k < key {
                        key = k;
                        best = c;
                    }
                }
                best
            }
        })
    }
}
