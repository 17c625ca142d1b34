//! Topologies as plain data, built and validated by builders, plus their minimal routes.
//!
//! A [`Topology`] lists nodes (hosts and switches), their numbered ports, and full-duplex links
//! with bandwidth and propagation latency. Hosts are the endpoints, in rank order. In direct
//! networks (torus, HyperX, HammingMesh boards) a host also forwards traffic: it is its own
//! router, with `2·D` (torus) or more network ports it can use concurrently.
//!
//! Builders validate their parameters and return [`TopoError`] naming the parameter and the
//! reason. Nothing here knows about packets or time beyond the link parameters.

mod build;
mod routes;

pub use build::*;
pub use routes::{MinimalRoutes, PathIter};

use serde::Serialize;
use std::fmt;

/// Index of a node in [`Topology::nodes`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
pub struct NodeId(pub u32);

/// Index of a link in [`Topology::links`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
pub struct LinkId(pub u32);

impl NodeId {
    pub fn idx(self) -> usize {
        self.0 as usize
    }
}
impl LinkId {
    pub fn idx(self) -> usize {
        self.0 as usize
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub enum NodeKind {
    Host,
    Switch,
}

/// What is at the other end of one of a node's ports.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct PortPeer {
    pub link: LinkId,
    pub peer: NodeId,
    pub peer_port: u16,
}

#[derive(Clone, Debug, Serialize)]
pub struct Node {
    pub kind: NodeKind,
    /// Whether the node forwards traffic that is not its own (switches always; hosts of
    /// direct networks too).
    pub forwards: bool,
    pub ports: Vec<PortPeer>,
    /// Index of this node among the hosts (its rank), if it is a host.
    pub host: Option<u32>,
}

/// Physical class of a link, for reporting and per-class parameters.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub enum LinkClass {
    /// Host to its first switch.
    Host,
    /// Between switches, or between routers of a direct network.
    Network,
    /// On a HammingMesh board (PCB traces).
    Board,
}

/// A full-duplex link. Each direction has the full bandwidth.
#[derive(Clone, Copy, Debug, Serialize)]
pub struct Link {
    pub a: NodeId,
    pub a_port: u16,
    pub b: NodeId,
    pub b_port: u16,
    pub bandwidth_bps: u64,
    pub latency_ps: u64,
    pub class: LinkClass,
}

/// Structure the builder knew; used by structural routing and reports.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub enum Shape {
    Star {
        hosts: u32,
    },
    FatTree2 {
        leaves: u32,
        hosts_per_leaf: u32,
        spines: u32,
        links_per_spine: u32,
    },
    FatTree3 {
        k: u32,
        hosts_per_edge: u32,
    },
    /// Dimension 0 varies fastest in the rank → coordinate mapping. Ports `2i`/`2i+1` go to
    /// the `+1`/`-1` neighbour in dimension `i`.
    Torus {
        dims: Vec<u32>,
    },
    /// Every node is linked to every other node sharing all coordinates but one.
    HyperX {
        dims: Vec<u32>,
    },
    /// `board_x × board_y` mesh boards arranged in a `grid_x × grid_y` grid; the board-edge
    /// ports of each global row and column go to one row/column switch.
    HammingMesh {
        board_x: u32,
        board_y: u32,
        grid_x: u32,
        grid_y: u32,
    },
    Dragonfly {
        groups: u32,
        routers_per_group: u32,
        hosts_per_router: u32,
        global_per_router: u32,
    },
}

#[derive(Clone, Debug, Serialize)]
pub struct Topology {
    pub name: String,
    pub shape: Shape,
    pub nodes: Vec<Node>,
    pub links: Vec<Link>,
    /// Host nodes in rank order.
    pub hosts: Vec<NodeId>,
}

/// A builder parameter that is invalid, and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TopoError {
    pub param: String,
    pub reason: String,
}

impl fmt::Display for TopoError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.param, self.reason)
    }
}
impl std::error::Error for TopoError {}

pub(crate) fn err<T>(param: &str, reason: impl Into<String>) -> Result<T, TopoError> {
    Err(TopoError { param: param.to_string(), reason: reason.into() })
}

impl Topology {
    pub fn num_hosts(&self) -> usize {
        self.hosts.len()
    }
    pub fn num_switches(&self) -> usize {
        self.nodes.iter().filter(|n| n.kind == NodeKind::Switch).count()
    }
    pub fn num_ports(&self) -> usize {
        self.nodes.iter().map(|n| n.ports.len()).sum()
    }
    pub fn host_node(&self, rank: u32) -> NodeId {
        self.hosts[rank as usize]
    }

    /// Structural self-check: port tables and links agree, every host is reachable from
    /// every other host through forwarding nodes. Builders call it; custom topologies should.
    pub fn validate(&self) -> Result<(), TopoError> {
        for (li, l) in self.links.iter().enumerate() {
            let pa = self.nodes[l.a.idx()].ports.get(l.a_port as usize);
            let pb = self.nodes[l.b.idx()].ports.get(l.b_port as usize);
            match (pa, pb) {
                (Some(pa), Some(pb))
                    if pa.link.idx() == li && pb.link.idx() == li && pa.peer == l.b && pb.peer == l.a => {}
                _ => return err("links", format!("link {li} does not match its nodes' port tables")),
            }
            if l.bandwidth_bps == 0 {
                return err("links", format!("link {li} has zero bandwidth"));
            }
        }
        if self.hosts.is_empty() {
            return err("hosts", "topology has no hosts");
        }
        // Reachability: BFS from host 0 through forwarding nodes must reach every host.
        let dist = self.bfs_from(self.hosts[0]);
        if let Some(h) = self.hosts.iter().position(|h| dist[h.idx()] == u32::MAX) {
            return err("links", format!("host {h} is unreachable from host 0"));
        }
        Ok(())
    }

    /// Hop distances from `src` to every node, moving only through forwarding nodes (a
    /// non-forwarding host is reached but not crossed). `u32::MAX` = unreachable.
    pub fn bfs_from(&self, src: NodeId) -> Vec<u32> {
        self.bfs_from_alive(src, &[], &[])
    }

    /// [`Topology::bfs_from`] over the surviving graph: links with `link_alive[l] == false`
    /// and nodes with `node_alive[n] == false` are skipped (empty slices mean "all alive").
    pub fn bfs_from_alive(&self, src: NodeId, link_alive: &[bool], node_alive: &[bool]) -> Vec<u32> {
        let alive_l = |l: LinkId| link_alive.get(l.idx()).copied().unwrap_or(true);
        let alive_n = |n: NodeId| node_alive.get(n.idx()).copied().unwrap_or(true);
        let mut dist = vec![u32::MAX; self.nodes.len()];
        let mut frontier = std::collections::VecDeque::new();
        dist[src.idx()] = 0;
        frontier.push_back(src);
        while let Some(v) = frontier.pop_front() {
            if v != src && !self.nodes[v.idx()].forwards {
                continue;
            }
            for p in &self.nodes[v.idx()].ports {
                if dist[p.peer.idx()] == u32::MAX && alive_l(p.link) && alive_n(p.peer) {
                    dist[p.peer.idx()] = dist[v.idx()] + 1;
                    frontier.push_back(p.peer);
                }
            }
        }
        dist
    }

    /// Largest host-to-host hop count (links crossed).
    pub fn host_diameter(&self) -> u32 {
        let mut d = 0;
        for &h in &self.hosts {
            let dist = self.bfs_from(h);
            for &g in &self.hosts {
                d = d.max(dist[g.idx()]);
            }
        }
        d
    }
}
