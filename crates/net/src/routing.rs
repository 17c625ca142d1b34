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
//! - Per-packet spraying (`NetConfig::spray`): the sender of a message's packets (and its
//!   receiver, of the control packets going back) gives each packet a *path number* in place
//!   of the flow hash, cycling through a permutation of `0..P` that is drawn again (from the
//!   run's salt, the message and the cycle) after every `P` packets, as htsim's NDP sources
//!   cycle through a permuted path list. `P` is the number of up/down paths between pods in a
//!   fat tree (`(k/2)²` three-tier, the leaf's uplinks two-tier; 65,536 elsewhere), and the
//!   hop after `h` links uses digit `h − 1` of the path number in base `n` (`n` candidates),
//!   so on a fat tree the `P` numbers of one cycle are the `P` distinct paths. A cycle's
//!   permutation is pseudo-random (a keyed Feistel network), as htsim's `random()` shuffle:
//!   a structured one (affine, `i ↦ a·i + b`) would send every `k/2` consecutive packets up
//!   `k/2` different ports, a better balance than htsim's and than a real source's.
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
    /// Per-packet spraying: paths per cycle, and per message its sender's (`[0]`) and
    /// receiver's (`[1]`) place in their cycles (grown on first use).
    spray_paths: u32,
    spray: Vec<[SprayCycle; 2]>,
}

/// One side's place in its cycle of path numbers: packets numbered so far, and the key of
/// the current cycle's permutation.
#[derive(Clone, Copy, Default)]
struct SprayCycle {
    sent: u64,
    key: u64,
}

/// The paths a sprayed packet cycles through on `topo` (see the module doc).
fn spray_paths(topo: &Topology) -> u32 {
    match &topo.shape {
        Shape::FatTree3 { k, .. } => (k / 2) * (k / 2),
        Shape::FatTree2 { spines, links_per_spine, .. } => spines * links_per_spine,
        _ => 1 << 16,
    }
    .max(1)
}

/// Element `i` of a pseudo-random permutation of `0..p` chosen by `key`: a four-round Feistel
/// network on the smallest even number of bits covering `0..p`, walked along its cycle until
/// it lands below `p` (so it is a bijection of `0..p`).
fn permute(i: u32, p: u32, key: u64) -> u32 {
    let bits = 32 - p.saturating_sub(1).leading_zeros();
    let half = bits.div_ceil(2).max(1);
    let mask = (1u32 << half) - 1;
    let mut x = i;
    loop {
        let (mut l, mut r) = (x >> half, x & mask);
        for round in 0..4 {
            let f = fingerprint(key, r, round) as u32 & mask;
            (l, r) = (r, l ^ f);
        }
        x = (l << half) | r;
        if x < p {
            return x;
        }
    }
}

/// The tie-break start among `n` candidates for a packet carrying path number `key` after
/// `hops` links: digit `hops − 1` of `key` in base `n`.
#[inline]
fn spray_digit(key: u32, hops: u8, n: usize) -> usize {
    if n.is_power_of_two() {
        // The fat trees' common case, by shifts (the divisions were ~20% of routing's time).
        let shift = n.trailing_zeros() * (hops.max(1) as u32 - 1);
        return (key as usize).checked_shr(shift).unwrap_or(0) & (n - 1);
    }
    let mut k = key as usize;
    for _ in 1..hops {
        k /= n;
        if k == 0 {
            break;
        }
    }
    k % n
}

impl Router {
    /// Drops the cached distances towards switches (a failure changed the graph).
    pub(crate) fn forget_node_distances(&mut self) {
        self.node_dist.iter_mut().for_each(|d| *d = None);
    }

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
            spray_paths: spray_paths(topo),
            spray: Vec::new(),
        })
    }
}

impl Network {
    /// The routing key of the next packet of message `msg` going from its sender
    /// (`back = false`) or from its receiver (`back = true`): the message's flow hash, or with
    /// per-packet spraying the next path number of that side's cycle.
    #[inline]
    pub(crate) fn packet_route_key(&mut self, msg: u32, back: bool) -> u32 {
        if !self.cfg.spray {
            return (fingerprint(self.salt, msg, u32::MAX) >> 32) as u32;
        }
        self.next_path_number(msg, back)
    }

    #[cold]
    fn next_path_number(&mut self, msg: u32, back: bool) -> u32 {
        let r = &mut self.router;
        let m = msg as usize;
        if m >= r.spray.len() {
            r.spray.resize((m + 1).next_power_of_two(), Default::default());
        }
        let p = r.spray_paths;
        let c = &mut r.spray[m][back as usize];
        let i = (c.sent % p as u64) as u32;
        if i == 0 {
            // A new cycle: a new permutation.
            c.key = fingerprint(self.salt ^ 0x5B4A_7000 ^ back as u64, msg, (c.sent / p as u64) as u32);
        }
        c.sent += 1;
        permute(i, p, c.key)
    }

    /// The tie-break start among `n` candidates for `p`: its flow hash mod `n`, or with
    /// per-packet spraying its path number's digit for this hop.
    #[inline]
    fn tie_start(&self, p: &Packet, n: usize) -> usize {
        if self.cfg.spray {
            spray_digit(p.flow_hash, p.hops, n)
        } else {
            p.flow_hash as usize % n
        }
    }

    /// Minimal next hops from `node` towards switch `target` over live links, into `scratch`
    /// (distances by a search from `target` over live links, kept until the next failure).
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
        if self.faults.all_up() {
            return;
        }
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
        if let Some(r) = self.route_in_run(node, p) {
            return r;
        }
        match p.dst.get() {
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
                let start = self.tie_start(p, n);
                for k in 0..n {
                    let lp = self.router.scratch[(start + k) % n];
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
            RoutingAlgo::Ecmp => self.router.scratch[self.tie_start(p, n)],
            RoutingAlgo::Adaptive => self.least_queued(node, self.tie_start(p, n)),
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

    /// [`Network::route`] without a candidate list, for ECMP and non-dimension-ordered
    /// minimal routing where the topology gives the candidates as a run of consecutive ports
    /// (stars and fat trees) and nothing can fail: the same choice, by index into the run.
    /// `None`: the caller takes the general way. (Filling and indexing the list was ~9% of the
    /// instructions of an NDP permutation on a fat tree.)
    #[inline]
    fn route_in_run(&self, node: NodeId, p: &Packet) -> Option<Option<(PortId, u8)>> {
        let AppDst::Host(h) = p.dst.get() else { return None };
        let simple = matches!(self.cfg.routing, RoutingAlgo::Ecmp | RoutingAlgo::Minimal)
            && matches!(self.vc_policy, VcPolicy::Single | VcPolicy::HopIndex { .. });
        if !simple || !self.faults.all_up() {
            return None;
        }
        let (first, n) = self.router.routes.candidate_run(node, h)?;
        if n == 0 {
            return Some(None);
        }
        let i = match self.cfg.routing {
            RoutingAlgo::Ecmp => self.tie_start(p, n as usize),
            _ => p.dst_key() as usize % n as usize,
        };
        let lp = first + i as u16;
        Some(Some((PortId::new(self.pt.first(node) + lp as u32), self.deterministic_vc(node, lp, p))))
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
                    let active = self.inject[g].len() + self.tr.round.get(g).map_or(0, |r| r.len());
                    let k = (active as u64, self.ports[g].q_bytes);
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

#[cfg(test)]
mod tests {
    use super::*;

    /// Each cycle's path numbers are a permutation of `0..p` (every path once), different
    /// keys give different orders, and the digits of a fat tree's `(k/2)²` numbers name every
    /// (edge uplink, aggregation uplink) pair once.
    #[test]
    fn a_cycle_is_a_permutation() {
        for p in [1u32, 2, 3, 4, 7, 64, 100, 256, 576, 1 << 16] {
            for key in [0u64, 1, 0xDEAD_BEEF] {
                let mut seen = vec![false; p as usize];
                for i in 0..p {
                    let x = permute(i, p, key) as usize;
                    assert!(x < p as usize && !seen[x], "p {p} key {key}: {x} twice or out of range");
                    seen[x] = true;
                }
            }
            if p >= 64 {
                let a: Vec<u32> = (0..p).map(|i| permute(i, p, 1)).collect();
                let b: Vec<u32> = (0..p).map(|i| permute(i, p, 2)).collect();
                assert_ne!(a, b, "p {p}");
            }
        }
        let n = 8;
        let mut pairs = std::collections::HashSet::new();
        for i in 0..64 {
            let key = permute(i, 64, 9);
            pairs.insert((spray_digit(key, 1, n), spray_digit(key, 2, n)));
        }
        assert_eq!(pairs.len(), 64);
    }

    /// The shift form for powers of two gives the digit the divisions give.
    #[test]
    fn spray_digits_by_shifts_equal_those_by_division() {
        let by_division = |key: u32, hops: u8, n: usize| {
            let mut k = key as usize;
            for _ in 1..hops {
                k /= n;
            }
            k % n
        };
        let mut rng = reducelab_des::Rng::new(11);
        for n in 1..=130usize {
            for hops in 0..=40u8 {
                for key in [0, 1, u32::MAX, rng.next_u64() as u32, rng.next_u64() as u32 >> (rng.next_u64() % 32)] {
                    assert_eq!(spray_digit(key, hops, n), by_division(key, hops, n), "key {key} hops {hops} n {n}");
                }
            }
        }
    }
}
