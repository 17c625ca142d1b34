//! Validated builders. Each returns a [`Topology`] whose port numbering is documented on the
//! builder, so that routing and collectives can name ports.

use crate::{err, Link, LinkClass, LinkId, Node, NodeId, NodeKind, PortPeer, Shape, TopoError, Topology};

/// Bandwidth and propagation latency of one class of links.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LinkParams {
    pub bandwidth_bps: u64,
    pub latency_ps: u64,
}

const UNSET: PortPeer = PortPeer { link: LinkId(u32::MAX), peer: NodeId(u32::MAX), peer_port: u16::MAX };

struct Net {
    nodes: Vec<Node>,
    links: Vec<Link>,
    hosts: Vec<NodeId>,
}

impl Net {
    fn new() -> Self {
        Net { nodes: Vec::new(), links: Vec::new(), hosts: Vec::new() }
    }
    fn add(&mut self, kind: NodeKind, forwards: bool, ports: usize) -> NodeId {
        let id = NodeId(self.nodes.len() as u32);
        let host = if kind == NodeKind::Host {
            self.hosts.push(id);
            Some(self.hosts.len() as u32 - 1)
        } else {
            None
        };
        self.nodes.push(Node { kind, forwards, ports: vec![UNSET; ports], host });
        id
    }
    fn connect(&mut self, a: NodeId, a_port: usize, b: NodeId, b_port: usize, p: LinkParams, class: LinkClass) {
        let link = LinkId(self.links.len() as u32);
        debug_assert_eq!(self.nodes[a.idx()].ports[a_port], UNSET, "port {a_port} of node {a:?} reused");
        debug_assert_eq!(self.nodes[b.idx()].ports[b_port], UNSET, "port {b_port} of node {b:?} reused");
        self.nodes[a.idx()].ports[a_port] = PortPeer { link, peer: b, peer_port: b_port as u16 };
        self.nodes[b.idx()].ports[b_port] = PortPeer { link, peer: a, peer_port: a_port as u16 };
        self.links.push(Link {
            a,
            a_port: a_port as u16,
            b,
            b_port: b_port as u16,
            bandwidth_bps: p.bandwidth_bps,
            latency_ps: p.latency_ps,
            class,
        });
    }
    fn finish(self, name: String, shape: Shape) -> Result<Topology, TopoError> {
        for (i, n) in self.nodes.iter().enumerate() {
            if n.ports.contains(&UNSET) {
                return err("ports", format!("node {i} has an unconnected port (builder bug)"));
            }
        }
        let t = Topology { name, shape, nodes: self.nodes, links: self.links, hosts: self.hosts };
        t.validate()?;
        Ok(t)
    }
}

fn check_link(param: &str, p: LinkParams) -> Result<(), TopoError> {
    if p.bandwidth_bps == 0 {
        return err(param, "bandwidth must be > 0");
    }
    Ok(())
}

/// Upper bound on nodes any builder accepts, to turn typos into errors instead of OOM.
pub const MAX_NODES: u64 = 1 << 22;

fn check_count(param: &str, v: u32, min: u32) -> Result<(), TopoError> {
    if v < min {
        return err(param, format!("must be at least {min}, got {v}"));
    }
    Ok(())
}

fn check_total(param: &str, n: u64) -> Result<(), TopoError> {
    if n > MAX_NODES {
        return err(param, format!("would build {n} nodes, more than the limit of {MAX_NODES}"));
    }
    Ok(())
}

/// One switch with `hosts` hosts (DSA §VII-B: 64 servers on one switch). Host `i` is on
/// switch port `i`; each host has one port (0).
pub fn star(hosts: u32, link: LinkParams) -> Result<Topology, TopoError> {
    check_count("hosts", hosts, 1)?;
    check_total("hosts", hosts as u64 + 1)?;
    check_link("link", link)?;
    if hosts > u16::MAX as u32 {
        return err("hosts", "a switch has at most 65535 ports");
    }
    let mut net = Net::new();
    let hs: Vec<NodeId> = (0..hosts).map(|_| net.add(NodeKind::Host, false, 1)).collect();
    let sw = net.add(NodeKind::Switch, true, hosts as usize);
    for (i, h) in hs.into_iter().enumerate() {
        net.connect(h, 0, sw, i, link, LinkClass::Host);
    }
    net.finish(format!("star-{hosts}"), Shape::Star { hosts })
}

/// Two-level fat tree (leaf/spine). Leaf ports `0..hosts_per_leaf` go to hosts, then
/// `spines·links_per_spine` up ports, spine `s` copy `c` on port `hosts_per_leaf + s·links_per_spine + c`.
/// Spine port `l·links_per_spine + c` goes to leaf `l`. The Canary network (§5.2) is
/// `leaves=32, hosts_per_leaf=32, spines=32, links_per_spine=1`: 64-port leaves, 32-port spines.
/// Oversubscription is `hosts_per_leaf : spines·links_per_spine`. If `radix` is given, every
/// switch must fit in it.
pub fn fat_tree_2level(
    leaves: u32,
    hosts_per_leaf: u32,
    spines: u32,
    links_per_spine: u32,
    radix: Option<u32>,
    host_link: LinkParams,
    net_link: LinkParams,
) -> Result<Topology, TopoError> {
    check_count("leaves", leaves, 1)?;
    check_count("hosts_per_leaf", hosts_per_leaf, 1)?;
    check_count("spines", spines, 1)?;
    check_count("links_per_spine", links_per_spine, 1)?;
    check_link("host_link", host_link)?;
    check_link("link", net_link)?;
    let leaf_ports = hosts_per_leaf as u64 + spines as u64 * links_per_spine as u64;
    let spine_ports = leaves as u64 * links_per_spine as u64;
    check_total("leaves", leaves as u64 * (hosts_per_leaf as u64 + 1) + spines as u64)?;
    if leaf_ports > u16::MAX as u64 || spine_ports > u16::MAX as u64 {
        return err("leaves", "a switch would have more than 65535 ports");
    }
    if let Some(r) = radix {
        if leaf_ports > r as u64 {
            return err("radix", format!("leaf needs {leaf_ports} ports (hosts + uplinks) but radix is {r}"));
        }
        if spine_ports > r as u64 {
            return err("radix", format!("spine needs {spine_ports} ports (one per leaf link) but radix is {r}"));
        }
    }
    let mut net = Net::new();
    let mut leaf_ids = Vec::with_capacity(leaves as usize);
    for _ in 0..leaves {
        let leaf = net.add(NodeKind::Switch, true, leaf_ports as usize);
        for h in 0..hosts_per_leaf {
            let host = net.add(NodeKind::Host, false, 1);
            net.connect(host, 0, leaf, h as usize, host_link, LinkClass::Host);
        }
        leaf_ids.push(leaf);
    }
    let spine_ids: Vec<NodeId> = (0..spines).map(|_| net.add(NodeKind::Switch, true, spine_ports as usize)).collect();
    for (l, &leaf) in leaf_ids.iter().enumerate() {
        for (s, &spine) in spine_ids.iter().enumerate() {
            for c in 0..links_per_spine as usize {
                let lp = hosts_per_leaf as usize + s * links_per_spine as usize + c;
                let sp = l * links_per_spine as usize + c;
                net.connect(leaf, lp, spine, sp, net_link, LinkClass::Network);
            }
        }
    }
    net.finish(
        format!("fattree2-{leaves}x{hosts_per_leaf}-{spines}s"),
        Shape::FatTree2 { leaves, hosts_per_leaf, spines, links_per_spine },
    )
}

/// k-ary three-tier fat tree (Al-Fares et al.; htsim's `FatTreeTopology`): `k` pods of `k/2`
/// edge and `k/2` aggregation switches, `(k/2)²` core switches, `hosts_per_edge` hosts per edge
/// switch (`k/2` for a full-bisection tree, `o·k/2` for oversubscription `o:1`).
/// Edge ports: hosts first, then agg `j` of its pod on port `hosts_per_edge + j`. Agg ports:
/// edge `i` of its pod on port `i`, then core `j·k/2 + c` on port `k/2 + c` for agg `j`. Core
/// port `p` goes to pod `p`. `k=16, hosts_per_edge=8` is the 1024-host htsim comparison network.
pub fn fat_tree_3level(
    k: u32,
    hosts_per_edge: u32,
    host_link: LinkParams,
    net_link: LinkParams,
) -> Result<Topology, TopoError> {
    if k < 2 || k % 2 != 0 {
        return err("k", format!("must be an even number ≥ 2, got {k}"));
    }
    check_count("hosts_per_edge", hosts_per_edge, 1)?;
    check_link("host_link", host_link)?;
    check_link("link", net_link)?;
    let h = k / 2;
    let hosts = k as u64 * h as u64 * hosts_per_edge as u64;
    check_total("k", hosts + k as u64 * k as u64 + h as u64 * h as u64)?;
    if hosts_per_edge as u64 + h as u64 > u16::MAX as u64 {
        return err("hosts_per_edge", "edge switch would have more than 65535 ports");
    }
    let mut net = Net::new();
    let mut aggs = Vec::new();
    for _pod in 0..k {
        let mut edges = Vec::new();
        for _e in 0..h {
            let edge = net.add(NodeKind::Switch, true, (hosts_per_edge + h) as usize);
            for i in 0..hosts_per_edge {
                let host = net.add(NodeKind::Host, false, 1);
                net.connect(host, 0, edge, i as usize, host_link, LinkClass::Host);
            }
            edges.push(edge);
        }
        let pod_aggs: Vec<NodeId> = (0..h).map(|_| net.add(NodeKind::Switch, true, k as usize)).collect();
        for (i, &edge) in edges.iter().enumerate() {
            for (j, &agg) in pod_aggs.iter().enumerate() {
                net.connect(edge, (hosts_per_edge as usize) + j, agg, i, net_link, LinkClass::Network);
            }
        }
        aggs.push(pod_aggs);
    }
    let cores: Vec<NodeId> = (0..h * h).map(|_| net.add(NodeKind::Switch, true, k as usize)).collect();
    for (pod, pod_aggs) in aggs.iter().enumerate() {
        for (j, &agg) in pod_aggs.iter().enumerate() {
            for c in 0..h as usize {
                let core = cores[j * h as usize + c];
                net.connect(agg, h as usize + c, core, pod, net_link, LinkClass::Network);
            }
        }
    }
    net.finish(format!("fattree3-k{k}"), Shape::FatTree3 { k, hosts_per_edge })
}

/// Rank ↔ coordinates with dimension 0 varying fastest (ranks mapped to nodes linearly, as
/// in the Swing paper §2.2).
pub fn coords_of(rank: u32, dims: &[u32]) -> Vec<u32> {
    let mut r = rank;
    dims.iter()
        .map(|&d| {
            let c = r % d;
            r /= d;
            c
        })
        .collect()
}

pub fn rank_of(coords: &[u32], dims: &[u32]) -> u32 {
    let mut r = 0;
    for i in (0..dims.len()).rev() {
        r = r * dims[i] + coords[i];
    }
    r
}

fn check_dims(dims: &[u32]) -> Result<u64, TopoError> {
    if dims.is_empty() {
        return err("dims", "needs at least one dimension");
    }
    if dims.len() > 8 {
        return err("dims", format!("at most 8 dimensions are supported, got {}", dims.len()));
    }
    let mut n: u64 = 1;
    for (i, &d) in dims.iter().enumerate() {
        if d < 2 {
            return err(&format!("dims[{i}]"), format!("each dimension needs size ≥ 2, got {d}"));
        }
        n = n.saturating_mul(d as u64);
    }
    check_total("dims", n)?;
    Ok(n)
}

/// D-dimensional torus, a direct network: every node is a host with `2·D` ports and routes
/// for others. Port `2i` goes to the `+1` neighbour in dimension `i`, port `2i+1` to the `-1`
/// neighbour (a dimension of size 2 therefore has two parallel links between the pair).
pub fn torus(dims: &[u32], link: LinkParams) -> Result<Topology, TopoError> {
    let n = check_dims(dims)? as u32;
    check_link("link", link)?;
    let d = dims.len();
    let mut net = Net::new();
    for _ in 0..n {
        net.add(NodeKind::Host, true, 2 * d);
    }
    for r in 0..n {
        let c = coords_of(r, dims);
        for i in 0..d {
            let mut cp = c.clone();
            cp[i] = (c[i] + 1) % dims[i];
            let peer = rank_of(&cp, dims);
            net.connect(NodeId(r), 2 * i, NodeId(peer), 2 * i + 1, link, LinkClass::Network);
        }
    }
    let name = format!("torus-{}", dims.iter().map(|d| d.to_string()).collect::<Vec<_>>().join("x"));
    net.finish(name, Shape::Torus { dims: dims.to_vec() })
}

/// Port of the HyperX link from a node with coordinate `from` to coordinate `to` in dimension
/// `dim` (`from != to`). Ports of dimension `i` follow those of dimensions `< i`; within a
/// dimension they are ordered by the peer's coordinate, skipping the node's own.
pub fn hyperx_port(dims: &[u32], dim: usize, from: u32, to: u32) -> u16 {
    let base: u32 = dims[..dim].iter().map(|d| d - 1).sum();
    (base + if to < from { to } else { to - 1 }) as u16
}

/// D-dimensional HyperX (Ahn et al.): every node links directly to every node that differs
/// in exactly one coordinate; a direct network with `Σ(dᵢ−1)` ports per node.
pub fn hyperx(dims: &[u32], link: LinkParams) -> Result<Topology, TopoError> {
    let n = check_dims(dims)? as u32;
    check_link("link", link)?;
    let ports: u32 = dims.iter().map(|d| d - 1).sum();
    if ports > u16::MAX as u32 {
        return err("dims", "a node would have more than 65535 ports");
    }
    let mut net = Net::new();
    for _ in 0..n {
        net.add(NodeKind::Host, true, ports as usize);
    }
    for r in 0..n {
        let c = coords_of(r, dims);
        for (i, &di) in dims.iter().enumerate() {
            for to in c[i] + 1..di {
                let mut cp = c.clone();
                cp[i] = to;
                let peer = rank_of(&cp, dims);
                let pa = hyperx_port(dims, i, c[i], to) as usize;
                let pb = hyperx_port(dims, i, to, c[i]) as usize;
                net.connect(NodeId(r), pa, NodeId(peer), pb, link, LinkClass::Network);
            }
        }
    }
    let name = format!("hyperx-{}", dims.iter().map(|d| d.to_string()).collect::<Vec<_>>().join("x"));
    net.finish(name, Shape::HyperX { dims: dims.to_vec() })
}

/// HammingMesh (Hoefler et al., SC22) as simulated in Swing §5.4.1: `board_x × board_y` 2D
/// mesh boards in a `grid_x × grid_y` grid. Hosts are numbered over the global
/// `(board_x·grid_x) × (board_y·grid_y)` coordinate space, x fastest. Every host has 4 ports
/// numbered like a 2D torus (0 = +x, 1 = −x, 2 = +y, 3 = −y). A port that points inside the
/// board is a board link (PCB traces, `board_link`); a port that points off the board goes to
/// the switch of its global row (x ports) or column (y ports). Each row/column network is
/// modelled as one non-blocking switch with `2·grid` ports (a full-bisection fat tree
/// collapsed into one hop). Hx2Mesh of 4096 nodes: `2,2,32,32`; Hx4Mesh: `4,4,16,16`.
pub fn hammingmesh(
    board_x: u32,
    board_y: u32,
    grid_x: u32,
    grid_y: u32,
    board_link: LinkParams,
    net_link: LinkParams,
) -> Result<Topology, TopoError> {
    check_count("board_x", board_x, 1)?;
    check_count("board_y", board_y, 1)?;
    check_count("grid_x", grid_x, 1)?;
    check_count("grid_y", grid_y, 1)?;
    check_link("board_link", board_link)?;
    check_link("link", net_link)?;
    let w = board_x as u64 * grid_x as u64;
    let hgt = board_y as u64 * grid_y as u64;
    check_total("grid_x", w * hgt + w + hgt)?;
    if w * hgt < 2 {
        return err("grid_x", "needs at least two hosts");
    }
    let (w, hgt) = (w as u32, hgt as u32);
    let mut net = Net::new();
    for _ in 0..w * hgt {
        net.add(NodeKind::Host, true, 4);
    }
    let row_sw: Vec<NodeId> = (0..hgt).map(|_| net.add(NodeKind::Switch, true, 2 * grid_x as usize)).collect();
    let col_sw: Vec<NodeId> = (0..w).map(|_| net.add(NodeKind::Switch, true, 2 * grid_y as usize)).collect();
    let id = |x: u32, y: u32| NodeId(y * w + x);
    for y in 0..hgt {
        for x in 0..w {
            let (bx, lx) = (x / board_x, x % board_x);
            // +x: on-board neighbour or the row switch (port 2·bx+1 of the row switch: east edge of board bx).
            if lx + 1 < board_x {
                net.connect(id(x, y), 0, id(x + 1, y), 1, board_link, LinkClass::Board);
            } else {
                net.connect(id(x, y), 0, row_sw[y as usize], 2 * bx as usize + 1, net_link, LinkClass::Network);
            }
            if lx == 0 {
                net.connect(id(x, y), 1, row_sw[y as usize], 2 * bx as usize, net_link, LinkClass::Network);
            }
        }
    }
    for x in 0..w {
        for y in 0..hgt {
            let (by, ly) = (y / board_y, y % board_y);
            if ly + 1 < board_y {
                net.connect(id(x, y), 2, id(x, y + 1), 3, board_link, LinkClass::Board);
            } else {
                net.connect(id(x, y), 2, col_sw[x as usize], 2 * by as usize + 1, net_link, LinkClass::Network);
            }
            if ly == 0 {
                net.connect(id(x, y), 3, col_sw[x as usize], 2 * by as usize, net_link, LinkClass::Network);
            }
        }
    }
    net.finish(
        format!("hx{board_x}x{board_y}mesh-{grid_x}x{grid_y}"),
        Shape::HammingMesh { board_x, board_y, grid_x, grid_y },
    )
}

/// Dragonfly (Kim et al., ISCA'08) with `groups` groups of `routers_per_group` routers, each
/// with `hosts_per_router` hosts and `global_per_router` global ports; routers of a group are
/// fully connected. Groups are joined all-to-all with one global link per pair ("consecutive"
/// arrangement: group `g`'s `j`-th global port, counting over its routers, goes to the `j`-th
/// other group), so `groups ≤ routers_per_group·global_per_router + 1`. Router ports: hosts,
/// then local (to the other routers in index order), then global.
pub fn dragonfly(
    groups: u32,
    routers_per_group: u32,
    hosts_per_router: u32,
    global_per_router: u32,
    host_link: LinkParams,
    local_link: LinkParams,
    global_link: LinkParams,
) -> Result<Topology, TopoError> {
    check_count("groups", groups, 1)?;
    check_count("routers_per_group", routers_per_group, 1)?;
    check_count("hosts_per_router", hosts_per_router, 1)?;
    check_link("host_link", host_link)?;
    check_link("link", local_link)?;
    check_link("global_link", global_link)?;
    let (a, p, h) = (routers_per_group, hosts_per_router, global_per_router);
    if groups > 1 && (a as u64 * h as u64 + 1) < groups as u64 {
        return err(
            "groups",
            format!("{groups} groups need {} global ports per group but there are only a·h = {}", groups - 1, a * h),
        );
    }
    check_total("groups", groups as u64 * a as u64 * (p as u64 + 1))?;
    let ports = p + (a - 1) + h;
    if ports > u16::MAX as u32 {
        return err("routers_per_group", "a router would have more than 65535 ports");
    }
    let mut net = Net::new();
    let mut routers = Vec::new();
    for _g in 0..groups {
        let mut rs = Vec::new();
        for _r in 0..a {
            let rt = net.add(NodeKind::Switch, true, ports as usize);
            for i in 0..p {
                let host = net.add(NodeKind::Host, false, 1);
                net.connect(host, 0, rt, i as usize, host_link, LinkClass::Host);
            }
            rs.push(rt);
        }
        for i in 0..a {
            for j in i + 1..a {
                // Local port index of router j at router i skips i itself.
                let pi = p + (j - 1);
                let pj = p + i;
                net.connect(rs[i as usize], pi as usize, rs[j as usize], pj as usize, local_link, LinkClass::Network);
            }
        }
        routers.push(rs);
    }
    // Unused global ports stay unconnected; drop them so every port has a peer.
    let mut used = vec![0u32; (groups * a) as usize];
    for g1 in 0..groups {
        for g2 in g1 + 1..groups {
            let j1 = g2 - 1; // index of g2 among g1's other groups
            let j2 = g1;
            let (r1, r2) = (j1 / h, j2 / h);
            let (q1, q2) = (j1 % h, j2 % h);
            net.connect(
                routers[g1 as usize][r1 as usize],
                (p + a - 1 + q1) as usize,
                routers[g2 as usize][r2 as usize],
                (p + a - 1 + q2) as usize,
                global_link,
                LinkClass::Network,
            );
            used[(g1 * a + r1) as usize] = used[(g1 * a + r1) as usize].max(q1 + 1);
            used[(g2 * a + r2) as usize] = used[(g2 * a + r2) as usize].max(q2 + 1);
        }
    }
    for g in 0..groups {
        for r in 0..a {
            let node = routers[g as usize][r as usize];
            let keep = (p + a - 1 + used[(g * a + r) as usize]) as usize;
            net.nodes[node.idx()].ports.truncate(keep);
        }
    }
    net.finish(
        format!("dragonfly-g{groups}-a{a}-p{p}-h{h}"),
        Shape::Dragonfly { groups, routers_per_group: a, hosts_per_router: p, global_per_router: h },
    )
}
