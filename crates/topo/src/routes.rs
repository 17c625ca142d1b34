//! Minimal next hops: for every (node, destination host), the ports that lie on a shortest
//! path that crosses only forwarding nodes.
//!
//! Tori and HyperX compute them from coordinates (no table: a 128×128 torus would need 268 M
//! entries). Every other topology gets a table built by one BFS per destination, with the
//! port lists interned (in a fat tree all destinations outside a subtree share one "all up
//! ports" list), so a lookup is two array reads.

use crate::{coords_of, hyperx_port, NodeId, Shape, Topology};
use std::collections::HashMap;

#[derive(Clone, Debug)]
enum Kind {
    Torus { dims: Vec<u32> },
    HyperX { dims: Vec<u32> },
    Table { hosts: usize, list_of: Vec<u32>, offsets: Vec<u32>, ports: Vec<u16> },
}

#[derive(Clone, Debug)]
pub struct MinimalRoutes {
    kind: Kind,
    host_of_node: Vec<u32>,
    host_nodes: Vec<NodeId>,
}

impl MinimalRoutes {
    pub fn new(topo: &Topology) -> Self {
        let host_of_node = topo.nodes.iter().map(|n| n.host.unwrap_or(u32::MAX)).collect();
        let kind = match &topo.shape {
            Shape::Torus { dims } => Kind::Torus { dims: dims.clone() },
            Shape::HyperX { dims } => Kind::HyperX { dims: dims.clone() },
            _ => Self::table(topo),
        };
        MinimalRoutes { kind, host_of_node, host_nodes: topo.hosts.clone() }
    }

    /// Shortest paths in the surviving graph after failures (always a table). Used when the
    /// network reconverges after a link or node failure.
    pub fn with_failures(topo: &Topology, link_alive: &[bool], node_alive: &[bool]) -> Self {
        let host_of_node = topo.nodes.iter().map(|n| n.host.unwrap_or(u32::MAX)).collect();
        let kind = Self::table_alive(topo, link_alive, node_alive);
        MinimalRoutes { kind, host_of_node, host_nodes: topo.hosts.clone() }
    }

    fn table(topo: &Topology) -> Kind {
        Self::table_alive(topo, &[], &[])
    }

    fn table_alive(topo: &Topology, link_alive: &[bool], node_alive: &[bool]) -> Kind {
        let alive_l = |l: crate::LinkId| link_alive.get(l.idx()).copied().unwrap_or(true);
        let n = topo.nodes.len();
        let hosts = topo.hosts.len();
        let mut list_of = vec![0u32; n * hosts];
        // List 0 is the empty list (the node is the destination, or cannot reach it): it
        // spans ports[0..0], so the first non-empty list is list 1.
        let mut offsets = vec![0u32, 0];
        let mut ports: Vec<u16> = Vec::new();
        let mut intern: HashMap<Vec<u16>, u32> = HashMap::new();
        intern.insert(Vec::new(), 0);
        let mut scratch = Vec::new();
        for (d, &dst) in topo.hosts.iter().enumerate() {
            let dist = topo.bfs_from_alive(dst, link_alive, node_alive);
            for v in 0..n {
                scratch.clear();
                let dv = dist[v];
                if dv != 0 && dv != u32::MAX {
                    for (pi, p) in topo.nodes[v].ports.iter().enumerate() {
                        let w = p.peer;
                        if alive_l(p.link) && dist[w.idx()].wrapping_add(1) == dv && (w == dst || topo.nodes[w.idx()].forwards) {
                            scratch.push(pi as u16);
                        }
                    }
                }
                let id = match intern.get(&scratch) {
                    Some(&id) => id,
                    None => {
                        let id = offsets.len() as u32 - 1;
                        ports.extend_from_slice(&scratch);
                        offsets.push(ports.len() as u32);
                        intern.insert(scratch.clone(), id);
                        id
                    }
                };
                list_of[v * hosts + d] = id;
            }
        }
        Kind::Table { hosts, list_of, offsets, ports }
    }

    /// Host index of a node, if it is a host.
    pub fn host_of(&self, node: NodeId) -> Option<u32> {
        let h = self.host_of_node[node.idx()];
        (h != u32::MAX).then_some(h)
    }

    /// Ports of `node` on minimal paths to host `dst`, in increasing port order, written to
    /// `out` (cleared first). Empty when `node` is the destination.
    pub fn candidates(&self, node: NodeId, dst: u32, out: &mut Vec<u16>) {
        out.clear();
        match &self.kind {
            Kind::Table { hosts, list_of, offsets, ports } => {
                let id = list_of[node.idx() * hosts + dst as usize] as usize;
                out.extend_from_slice(&ports[offsets[id] as usize..offsets[id + 1] as usize]);
            }
            Kind::Torus { dims } => {
                let (mut a, mut b) = (node.0, dst);
                for (i, &d) in dims.iter().enumerate() {
                    let (ca, cb) = (a % d, b % d);
                    a /= d;
                    b /= d;
                    let fwd = (cb + d - ca) % d;
                    if fwd == 0 {
                        continue;
                    }
                    let back = d - fwd;
                    if fwd <= back {
                        out.push(2 * i as u16);
                    }
                    if back <= fwd {
                        out.push(2 * i as u16 + 1);
                    }
                }
            }
            Kind::HyperX { dims } => {
                let (mut a, mut b) = (node.0, dst);
                for (i, &d) in dims.iter().enumerate() {
                    let (ca, cb) = (a % d, b % d);
                    a /= d;
                    b /= d;
                    if ca != cb {
                        out.push(hyperx_port(dims, i, ca, cb));
                    }
                }
            }
        }
    }

    /// Whether next hops come from coordinates (torus, HyperX) rather than a table.
    pub fn is_structural(&self) -> bool {
        !matches!(self.kind, Kind::Table { .. })
    }

    /// The deterministic minimal port: dimension order on tori and HyperX (lowest dimension
    /// first, `+` on a tie), destination-mod-k among the candidates elsewhere (d-mod-k
    /// routing on fat trees). `None` when `node` is the destination or cannot reach it.
    pub fn deterministic(&self, node: NodeId, dst: u32, scratch: &mut Vec<u16>) -> Option<u16> {
        self.candidates(node, dst, scratch);
        if scratch.is_empty() {
            return None;
        }
        match &self.kind {
            Kind::Torus { .. } | Kind::HyperX { .. } => Some(scratch[0]),
            Kind::Table { .. } => Some(scratch[dst as usize % scratch.len()]),
        }
    }

    /// Nodes on the deterministic path from `src` to host `dst`, both ends included.
    pub fn path(&self, topo: &Topology, src: NodeId, dst: u32) -> PathIter {
        let mut nodes = vec![src];
        let mut cur = src;
        let mut scratch = Vec::new();
        let target = self.host_nodes[dst as usize];
        while cur != target {
            match self.deterministic(cur, dst, &mut scratch) {
                Some(p) => cur = topo.nodes[cur.idx()].ports[p as usize].peer,
                None => break,
            }
            nodes.push(cur);
            if nodes.len() > topo.nodes.len() {
                break; // cannot happen with a consistent table; guard against loops anyway
            }
        }
        PathIter { nodes }
    }

    /// Coordinates of a torus/HyperX node (helper for callers that route structurally).
    pub fn coords(&self, node: NodeId) -> Option<Vec<u32>> {
        match &self.kind {
            Kind::Torus { dims } | Kind::HyperX { dims } => Some(coords_of(node.0, dims)),
            Kind::Table { .. } => None,
        }
    }
}

/// A path as a list of nodes.
#[derive(Clone, Debug)]
pub struct PathIter {
    pub nodes: Vec<NodeId>,
}

impl PathIter {
    pub fn hops(&self) -> usize {
        self.nodes.len().saturating_sub(1)
    }
}
