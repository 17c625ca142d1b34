//! Minimal next hops: for every (node, destination host), the ports that lie on a shortest
//! path that crosses only forwarding nodes, in increasing port order.
//!
//! On every topology the builders make, next hops are computed from the builder's node and
//! port numbering, with no per-destination table, so routing memory is one host index per
//! node: tori and HyperX from coordinates; the star and fat trees by up/down (down when the
//! destination is below the switch, else every up port); dragonflies from router-to-router
//! distances (minimal paths there include global-global detours through a third group);
//! HammingMesh from per-row and per-column distances. The private `FatTree2`, `FatTree3`,
//! `Dragonfly` and `HammingMesh` types below say how.
//!
//! Tables remain where paths are irregular: after failures ([`MinimalRoutes::with_failures`])
//! the surviving graph gets one BFS per destination host, stored as a u32 list id per
//! (node, host) with the port lists interned. [`MinimalRoutes::bfs`] builds that table for the
//! intact graph: the reference the structural routes are tested against, list for list
//! (tests/routes.rs).

use crate::{coords_of, hyperx_port, NodeId, Shape, Topology};
use std::collections::HashMap;

#[derive(Clone, Debug)]
enum Kind {
    Torus { dims: Vec<u32> },
    HyperX { dims: Vec<u32> },
    Star,
    FatTree2(FatTree2),
    FatTree3(FatTree3),
    Dragonfly(Dragonfly),
    HammingMesh(HammingMesh),
    Table { hosts: usize, list_of: Vec<u32>, offsets: Vec<u32>, ports: Vec<u16> },
}

#[derive(Clone, Debug)]
pub struct MinimalRoutes {
    kind: Kind,
    host_of_node: Vec<u32>,
    host_nodes: Vec<NodeId>,
}

impl MinimalRoutes {
    /// Minimal routes of an intact topology: structural for every shape the builders make
    /// (a table only for a hand-made [`Topology`] whose nodes and links do not match its
    /// [`Shape`]).
    pub fn new(topo: &Topology) -> Self {
        let kind = match &topo.shape {
            Shape::Torus { dims } => Kind::Torus { dims: dims.clone() },
            Shape::HyperX { dims } => Kind::HyperX { dims: dims.clone() },
            _ => Self::structural(topo).unwrap_or_else(|| Self::table(topo)),
        };
        Self::with_kind(topo, kind)
    }

    /// The reference: the same routes from one BFS per destination host, stored as a table
    /// (memory grows as nodes × hosts). Tests compare the structural routes with it; the
    /// engine does not use it on an intact network. Being a table, its
    /// [`MinimalRoutes::deterministic`] choice is destination-mod-k on every topology.
    pub fn bfs(topo: &Topology) -> Self {
        Self::with_kind(topo, Self::table(topo))
    }

    /// Shortest paths in the surviving graph after failures (always a table: paths around a
    /// failure are irregular). Used when the network reconverges after a link or node failure.
    pub fn with_failures(topo: &Topology, link_alive: &[bool], node_alive: &[bool]) -> Self {
        Self::with_kind(topo, Self::table_alive(topo, link_alive, node_alive))
    }

    fn with_kind(topo: &Topology, kind: Kind) -> Self {
        let host_of_node = topo.nodes.iter().map(|n| n.host.unwrap_or(u32::MAX)).collect();
        MinimalRoutes { kind, host_of_node, host_nodes: topo.hosts.clone() }
    }

    /// Structural routes for an indirect network or HammingMesh, if `topo` has the parameters,
    /// node count and link count its shape's builder makes (the arithmetic relies on the
    /// builder's numbering).
    fn structural(topo: &Topology) -> Option<Kind> {
        let (nodes, links, kind) = match topo.shape {
            Shape::Star { hosts } => (hosts as u64 + 1, hosts as u64, Kind::Star),
            Shape::FatTree2 { leaves, hosts_per_leaf, spines, links_per_spine } => {
                if leaves.min(hosts_per_leaf).min(spines).min(links_per_spine) == 0 {
                    return None;
                }
                let (l, hpl, s, c) = (leaves as u64, hosts_per_leaf as u64, spines as u64, links_per_spine as u64);
                let up_ports = spines.checked_mul(links_per_spine)?;
                let ft = FatTree2 {
                    leaf_block: hosts_per_leaf.checked_add(1)?,
                    leaves,
                    hosts_per_leaf,
                    up_ports,
                    links_per_spine,
                };
                (l * (hpl + 1) + s, l * hpl + l * s * c, Kind::FatTree2(ft))
            }
            Shape::FatTree3 { k, hosts_per_edge } => {
                if k < 2 || k % 2 != 0 || hosts_per_edge == 0 {
                    return None;
                }
                let (h, e) = (k / 2, hosts_per_edge);
                let pod_block = u32::try_from(h as u64 * (e as u64 + 2)).ok()?;
                let ft = FatTree3 { half: h, hosts_per_edge: e, pods: k, pod_block };
                let (k, h, e) = (k as u64, h as u64, e as u64);
                (k * (h * (e + 1) + h) + h * h, k * h * e + 2 * k * h * h, Kind::FatTree3(ft))
            }
            Shape::Dragonfly { groups, routers_per_group, hosts_per_router, global_per_router } => {
                let (g, a, p, h) =
                    (groups as u64, routers_per_group as u64, hosts_per_router as u64, global_per_router as u64);
                if g == 0 || a == 0 || p == 0 || (g > 1 && a * h + 1 < g) {
                    return None;
                }
                let df = Dragonfly {
                    groups,
                    routers: routers_per_group,
                    hosts: hosts_per_router,
                    globals: global_per_router,
                };
                (g * a * (p + 1), g * a * p + g * a * (a - 1) / 2 + g * (g - 1) / 2, Kind::Dragonfly(df))
            }
            Shape::HammingMesh { board_x, board_y, grid_x, grid_y } => {
                if board_x.min(board_y).min(grid_x).min(grid_y) == 0 {
                    return None;
                }
                let (w, h) = (board_x as u64 * grid_x as u64, board_y as u64 * grid_y as u64);
                // Board links, plus two switch links per board edge in each row and column.
                let board = (board_x as u64 - 1) * grid_x as u64 * h + (board_y as u64 - 1) * grid_y as u64 * w;
                let hm =
                    HammingMesh { board_x, board_y, width: u32::try_from(w).ok()?, height: u32::try_from(h).ok()? };
                (w * h + w + h, board + 2 * grid_x as u64 * h + 2 * grid_y as u64 * w, Kind::HammingMesh(hm))
            }
            Shape::Torus { .. } | Shape::HyperX { .. } => return None,
        };
        (topo.nodes.len() as u64 == nodes && topo.links.len() as u64 == links).then_some(kind)
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
                        if alive_l(p.link)
                            && dist[w.idx()].wrapping_add(1) == dv
                            && (w == dst || topo.nodes[w.idx()].forwards)
                        {
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
        if let Some((first, count)) = self.candidate_run(node, dst) {
            out.extend(first..first + count);
            return;
        }
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
            Kind::HammingMesh(hm) => hm.candidates(node.0, dst, out),
            Kind::Star | Kind::FatTree2(_) | Kind::FatTree3(_) => unreachable!("candidate_run covers them"),
            Kind::Dragonfly(df) => {
                if !self.host_uplink(node, dst, out) {
                    df.router_candidates(node.0, dst, out);
                }
            }
        }
    }

    /// In an indirect network: if `node` is a host (which does not forward), its candidates
    /// (its one port, to its switch, unless it is the destination) into `out`, and true.
    fn host_uplink(&self, node: NodeId, dst: u32, out: &mut Vec<u16>) -> bool {
        match self.host_run(node, dst) {
            Some((first, count)) => {
                out.extend(first..first + count);
                true
            }
            None => false,
        }
    }

    /// A host's candidates (its port 0 unless it is the destination), `None` for a switch.
    #[inline]
    fn host_run(&self, node: NodeId, dst: u32) -> Option<(u16, u16)> {
        let h = self.host_of_node[node.idx()];
        (h != u32::MAX).then_some((0, (h != dst) as u16))
    }

    /// The minimal candidates as one run of consecutive local ports, `first..first + count`,
    /// where the structure gives them so: stars and fat trees (the ports, in the order, that
    /// [`MinimalRoutes::candidates`] writes; a router picks among them without filling a
    /// list). `None` for the other topologies.
    #[inline]
    pub fn candidate_run(&self, node: NodeId, dst: u32) -> Option<(u16, u16)> {
        match &self.kind {
            Kind::Star => Some(self.host_run(node, dst).unwrap_or((dst as u16, 1))),
            Kind::FatTree2(ft) => Some(self.host_run(node, dst).unwrap_or_else(|| ft.switch_run(node.0, dst))),
            Kind::FatTree3(ft) => Some(self.host_run(node, dst).unwrap_or_else(|| ft.switch_run(node.0, dst))),
            _ => None,
        }
    }

    /// Whether next hops are computed from the topology's structure rather than read from a
    /// table (false only after failures, for [`MinimalRoutes::bfs`], and for hand-made
    /// topologies that do not match their shape).
    pub fn is_structural(&self) -> bool {
        !matches!(self.kind, Kind::Table { .. })
    }

    /// Whether [`MinimalRoutes::deterministic`] picks in dimension order (the first candidate:
    /// structural routes of tori and HyperX) rather than destination-mod-k.
    pub fn is_dimension_ordered(&self) -> bool {
        matches!(self.kind, Kind::Torus { .. } | Kind::HyperX { .. })
    }

    /// The deterministic minimal port: dimension order on tori and HyperX (lowest dimension
    /// first, `+` on a tie), destination-mod-k among the candidates elsewhere (d-mod-k
    /// routing on fat trees). `None` when `node` is the destination or cannot reach it.
    pub fn deterministic(&self, node: NodeId, dst: u32, scratch: &mut Vec<u16>) -> Option<u16> {
        self.candidates(node, dst, scratch);
        if scratch.is_empty() {
            return None;
        }
        if self.is_dimension_ordered() {
            Some(scratch[0])
        } else {
            Some(scratch[dst as usize % scratch.len()])
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
                break; // cannot happen with consistent routes; guard against loops anyway
            }
        }
        PathIter { nodes }
    }

    /// Coordinates of a torus/HyperX node (helper for callers that route structurally).
    pub fn coords(&self, node: NodeId) -> Option<Vec<u32>> {
        match &self.kind {
            Kind::Torus { dims } | Kind::HyperX { dims } => Some(coords_of(node.0, dims)),
            _ => None,
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

/// Two-level fat tree ([`crate::fat_tree_2level`]'s numbering): leaf `l` is node
/// `l·(hosts_per_leaf+1)`, its hosts follow it; spines come after the last leaf.
#[derive(Clone, Debug)]
struct FatTree2 {
    leaf_block: u32,
    leaves: u32,
    hosts_per_leaf: u32,
    up_ports: u32,
    links_per_spine: u32,
}

impl FatTree2 {
    /// A switch's candidates as a run of local ports `(first, count)`.
    #[inline]
    fn switch_run(&self, node: u32, dst: u32) -> (u16, u16) {
        let leaf = dst / self.hosts_per_leaf;
        if node < self.leaves * self.leaf_block {
            if node / self.leaf_block == leaf {
                ((dst % self.hosts_per_leaf) as u16, 1)
            } else {
                // Every spine is one hop above the destination's leaf: every up port.
                (self.hosts_per_leaf as u16, self.up_ports as u16)
            }
        } else {
            // A spine: every parallel link down to the destination's leaf.
            ((leaf * self.links_per_spine) as u16, self.links_per_spine as u16)
        }
    }
}

/// Three-level fat tree ([`crate::fat_tree_3level`]'s numbering): pod `q` is the block of
/// nodes from `q·pod_block`: `half` edge switches each followed by its hosts, then `half`
/// aggregation switches; the `half²` core switches come after the last pod.
#[derive(Clone, Debug)]
struct FatTree3 {
    half: u32,
    hosts_per_edge: u32,
    pods: u32,
    pod_block: u32,
}

impl FatTree3 {
    /// A switch's candidates as a run of local ports `(first, count)`.
    #[inline]
    fn switch_run(&self, node: u32, dst: u32) -> (u16, u16) {
        let (h, e) = (self.half, self.hosts_per_edge);
        let dst_edge = dst / e; // over all pods
        let (dst_pod, dst_edge_in_pod) = (dst_edge / h, dst_edge % h);
        if node >= self.pods * self.pod_block {
            // A core switch: port p goes to pod p.
            return (dst_pod as u16, 1);
        }
        let (pod, off) = (node / self.pod_block, node % self.pod_block);
        if off < h * (e + 1) {
            // An edge switch: down to the host, or up to every aggregation switch of its pod.
            if pod == dst_pod && off / (e + 1) == dst_edge_in_pod {
                ((dst % e) as u16, 1)
            } else {
                (e as u16, h as u16)
            }
        } else if pod == dst_pod {
            // An aggregation switch: down to the destination's edge, or up to every core.
            (dst_edge_in_pod as u16, 1)
        } else {
            (h as u16, h as u16)
        }
    }
}

/// Dragonfly ([`crate::dragonfly`]'s numbering): router `r` of group `g` is node
/// `(g·routers + r)·(hosts+1)`, its hosts follow it. Router ports: hosts, local (other
/// routers of the group in index order), global (`q`-th global port of router `r` goes to
/// the `(r·globals + q)`-th other group).
///
/// Minimal paths are not only "local, global, local": with one global link per pair of groups,
/// a path through a third group (global, global) can be as short or shorter. So next hops come
/// from router-to-router distances computed from the wiring (a router is at most 3 router hops
/// from any other): the candidates are the neighbours one hop closer, exactly what a BFS finds.
/// Cost per decision: O(routers + globals) at worst, at a router 3 hops from the target.
/// (A brute-force search over 1–6 routers, 1–5 global ports and every group count found no
/// global neighbour of such a router that is 2 hops away only by global, global; `within`
/// still checks for it, so the rule does not rest on that observation.)
#[derive(Clone, Debug)]
struct Dragonfly {
    groups: u32,
    routers: u32,
    hosts: u32,
    globals: u32,
}

impl Dragonfly {
    /// Index of group `to` among the other groups of group `g`.
    fn index_of(g: u32, to: u32) -> u32 {
        if to > g {
            to - 1
        } else {
            to
        }
    }

    /// Router (index within its group) of group `g` that holds the global link to group `to`.
    fn gateway(&self, g: u32, to: u32) -> u32 {
        Self::index_of(g, to) / self.globals
    }

    /// Group at the other end of global port `q` of router `r` of group `g`, if connected.
    fn global_peer(&self, g: u32, r: u32, q: u32) -> Option<u32> {
        let j = r * self.globals + q;
        (j + 1 < self.groups).then_some(if j < g { j } else { j + 1 })
    }

    /// The groups router `r` of group `g` has global links to: `lo..hi` without `g`.
    fn global_groups(&self, g: u32, r: u32) -> (u32, u32) {
        let first = r * self.globals;
        let end = ((r + 1) * self.globals).min(self.groups - 1);
        if first >= end {
            return (0, 0);
        }
        let group = |j: u32| if j < g { j } else { j + 1 };
        (group(first), group(end - 1) + 1)
    }

    /// Whether router `(g, r)` reaches router `(tg, tr)` of another group in two global hops:
    /// through a third group linked to both (`reach`: the groups `(tg, tr)` links to) whose
    /// links to `g` and to `tg` leave from the same router.
    fn two_globals(&self, (g, r): (u32, u32), (tg, reach): (u32, (u32, u32))) -> bool {
        let (lo, hi) = self.global_groups(g, r);
        (lo.max(reach.0)..hi.min(reach.1))
            .any(|mid| mid != g && mid != tg && self.gateway(mid, g) == self.gateway(mid, tg))
    }

    /// Whether router `(g, r)` is at most `limit` router hops from router `(tg, tr)`, which
    /// has global links to the groups `reach`.
    fn within(&self, (g, r): (u32, u32), (tg, tr): (u32, u32), reach: (u32, u32), limit: u32) -> bool {
        if g == tg {
            return r == tr || limit >= 1;
        }
        let leaves_here = self.gateway(g, tg) == r;
        let lands_there = self.gateway(tg, g) == tr;
        match limit {
            0 => false,
            1 => leaves_here && lands_there,
            2 => leaves_here || lands_there || self.two_globals((g, r), (tg, reach)),
            _ => true,
        }
    }

    fn router_candidates(&self, node: u32, dst: u32, out: &mut Vec<u16>) {
        let (a, p) = (self.routers, self.hosts);
        let here = node / (p + 1);
        let (g, r) = (here / a, here % a);
        let there = dst / p;
        let (tg, tr) = (there / a, there % a);
        let local_port = |other: u32| (p + if other < r { other } else { other - 1 }) as u16;
        if here == there {
            out.push((dst % p) as u16);
            return;
        }
        if g == tg {
            out.push(local_port(tr));
            return;
        }
        // The router of this group linked to the target's group, and whether that link lands
        // on the target router.
        let gateway = self.gateway(g, tg);
        let lands = self.gateway(tg, g) == tr;
        let reach = self.global_groups(tg, tr);
        let dist = if r == gateway && lands {
            1
        } else if r == gateway || lands || self.two_globals((g, r), (tg, reach)) {
            2
        } else {
            3
        };
        if dist == 1 {
            out.push((p + a - 1 + Self::index_of(g, tg) % self.globals) as u16);
            return;
        }
        if dist == 2 {
            // The one local neighbour one hop away: the gateway, if its link lands on `tr`.
            if lands && gateway != r {
                out.push(local_port(gateway));
            }
        } else {
            // Local neighbours two hops away (`lands` is false at distance 3): the gateway, and
            // the routers with a global-global path, found from the target's side: through
            // each group `mid` linked to `tr` whose links to this group and to `tg` leave from
            // one router, router `gateway(g, mid)` here. That router does not decrease as
            // `mid` grows, so the ports come out in order, merged with the gateway's.
            let mut last = u32::MAX;
            let mut gateway_done = false;
            for mid in reach.0..reach.1 {
                if mid == g || mid == tg || self.gateway(mid, g) != self.gateway(mid, tg) {
                    continue;
                }
                let other = self.gateway(g, mid);
                if !gateway_done && gateway <= other {
                    gateway_done = true;
                    if gateway != last && gateway != r {
                        out.push(local_port(gateway));
                        last = gateway;
                    }
                }
                if other != last && other != r {
                    out.push(local_port(other));
                    last = other;
                }
            }
            if !gateway_done && gateway != last && gateway != r {
                out.push(local_port(gateway));
            }
        }
        for q in 0..self.globals {
            let Some(mid) = self.global_peer(g, r, q) else { break };
            if self.within((mid, self.gateway(mid, g)), (tg, tr), reach, dist - 1) {
                out.push((p + a - 1 + q) as u16);
            }
        }
    }
}

/// HammingMesh ([`crate::hammingmesh`]'s numbering): host `(x, y)` is node `y·width + x`,
/// then one switch per row, then one per column. Every move changes one coordinate and
/// whether it can be made depends on that coordinate alone (a board step, or through the
/// row/column switch from a board edge to any board edge), so the distance between hosts is
/// a row distance plus a column distance, each along a line of boards whose edges the switch
/// joins in 2 hops.
#[derive(Clone, Debug)]
struct HammingMesh {
    board_x: u32,
    board_y: u32,
    width: u32,
    height: u32,
}

/// Hops from the nearer end of a board of `board` hosts to position `l` on it.
fn to_edge(board: u32, l: u32) -> u32 {
    l.min(board - 1 - l)
}

/// Hops between position `l` and the target's position `lt` in one row (or column) of
/// boards of `board` hosts, `same_board` if both are on one board: along the board, or to an
/// edge, through the switch, and from an edge of the target's board.
fn line_dist(board: u32, same_board: bool, l: u32, lt: u32) -> u32 {
    let via_switch = to_edge(board, l) + 2 + to_edge(board, lt);
    if same_board {
        l.abs_diff(lt).min(via_switch)
    } else {
        via_switch
    }
}

impl HammingMesh {
    fn candidates(&self, node: u32, dst: u32, out: &mut Vec<u16>) {
        let hosts = self.width * self.height;
        let (tx, ty) = (dst % self.width, dst / self.width);
        if node >= hosts + self.height {
            // Column switch of column x: down to the nearer edge host(s) of the target's
            // board in this column (ports 2b / 2b+1: the low / high edge of board b).
            Self::switch_ports(self.board_y, ty, out);
        } else if node >= hosts {
            Self::switch_ports(self.board_x, tx, out);
        } else if node != dst {
            let (x, y) = (node % self.width, node / self.width);
            Self::host_ports(self.board_x, x, tx, 0, out);
            Self::host_ports(self.board_y, y, ty, 2, out);
        }
    }

    /// A switch's ports to the edge hosts of target position `t`'s board that are nearest `t`.
    fn switch_ports(board: u32, t: u32, out: &mut Vec<u16>) {
        let (b, l) = (t / board, t % board);
        if l <= board - 1 - l {
            out.push((2 * b) as u16);
        }
        if board - 1 - l <= l {
            out.push((2 * b + 1) as u16);
        }
    }

    /// A host's minimal ports in one dimension: `base` (towards +) and `base+1` (towards −),
    /// each a board link or a link to the switch of this row/column.
    fn host_ports(board: u32, c: u32, t: u32, base: u16, out: &mut Vec<u16>) {
        let (l, lt, same_board) = (c % board, t % board, c / board == t / board);
        let d = line_dist(board, same_board, l, lt);
        if d == 0 {
            return;
        }
        // From the switch the target is one hop to its board's nearer edge plus the board.
        let switch_closer = 1 + to_edge(board, lt) == d - 1;
        let plus_closer = if l + 1 < board { line_dist(board, same_board, l + 1, lt) == d - 1 } else { switch_closer };
        let minus_closer = if l > 0 { line_dist(board, same_board, l - 1, lt) == d - 1 } else { switch_closer };
        if plus_closer {
            out.push(base);
        }
        if minus_closer {
            out.push(base + 1);
        }
    }
}
