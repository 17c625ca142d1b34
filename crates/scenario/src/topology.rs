//! The `[topology]` table resolved: a `shape` expanded into its kind and sizes, the per-kind
//! parameter checks, and the topology built (with its limits on nodes and links).

use super::units::{gbps_to_bps, ns_to_ps};
use super::{e, req, TopologyKind, TopologySpec};
use crate::ScenarioError;
use reducelab_topo::{self as topo, LinkParams, Topology};

impl TopologyKind {
    /// Its name in scenario files.
    pub fn name(self) -> &'static str {
        match self {
            TopologyKind::Star => "star",
            TopologyKind::FatTree2 => "fat_tree_2",
            TopologyKind::FatTree3 => "fat_tree_3",
            TopologyKind::Torus => "torus",
            TopologyKind::Hyperx => "hyperx",
            TopologyKind::Hammingmesh => "hammingmesh",
            TopologyKind::Dragonfly => "dragonfly",
        }
    }

    /// The keys a table of this kind takes besides `kind` and the link parameters
    /// (`bandwidth_gbps`, `latency_ns`) (the one list: a key of another kind is refused with it,
    /// and an unknown key's error lists it).
    pub fn keys(self) -> &'static [&'static str] {
        match self {
            TopologyKind::Star => &["hosts", "host_bandwidth_gbps", "host_latency_ns"],
            TopologyKind::FatTree2 => &[
                "leaves",
                "hosts_per_leaf",
                "spines",
                "links_per_spine",
                "radix",
                "host_bandwidth_gbps",
                "host_latency_ns",
            ],
            TopologyKind::FatTree3 => &["k", "hosts_per_edge", "host_bandwidth_gbps", "host_latency_ns"],
            TopologyKind::Torus | TopologyKind::Hyperx => &["dims"],
            TopologyKind::Hammingmesh => &["board", "grid", "board_latency_ns", "board_bandwidth_gbps"],
            TopologyKind::Dragonfly => &[
                "groups",
                "routers_per_group",
                "hosts_per_router",
                "global_per_router",
                "global_latency_ns",
                "host_bandwidth_gbps",
                "host_latency_ns",
            ],
        }
    }
}

impl TopologySpec {
    /// Whether each kind-owned size key is set, by name (the link parameters and `shape` are
    /// checked apart): the names are tested against the schema's own field list.
    pub fn set_keys(&self) -> [(&'static str, bool); 18] {
        [
            ("hosts", self.hosts.is_some()),
            ("leaves", self.leaves.is_some()),
            ("hosts_per_leaf", self.hosts_per_leaf.is_some()),
            ("spines", self.spines.is_some()),
            ("links_per_spine", self.links_per_spine.is_some()),
            ("radix", self.radix.is_some()),
            ("k", self.k.is_some()),
            ("hosts_per_edge", self.hosts_per_edge.is_some()),
            ("dims", self.dims.is_some()),
            ("board", self.board.is_some()),
            ("grid", self.grid.is_some()),
            ("board_latency_ns", self.board_latency_ns.is_some()),
            ("board_bandwidth_gbps", self.board_bandwidth_gbps.is_some()),
            ("groups", self.groups.is_some()),
            ("routers_per_group", self.routers_per_group.is_some()),
            ("hosts_per_router", self.hosts_per_router.is_some()),
            ("global_per_router", self.global_per_router.is_some()),
            ("global_latency_ns", self.global_latency_ns.is_some()),
        ]
    }

    /// The table with `shape` (parsed by [`reducelab_sched::TopologyShape::parse`], the one
    /// topology-spec parser) expanded into `kind` and its size parameters, with the default
    /// link parameters where none are given; `None` without a `shape`.
    pub fn expanded(&self) -> Result<Option<TopologySpec>, ScenarioError> {
        let Some(shape) = &self.shape else { return Ok(None) };
        for (name, is) in [
            ("kind", self.kind.is_some()),
            ("dims", self.dims.is_some()),
            ("board", self.board.is_some()),
            ("grid", self.grid.is_some()),
        ] {
            if is {
                return e("topology.shape", format!("replaces kind, dims, board and grid: give either shape or kind with its sizes, not both (topology.{name} is also set)"));
            }
        }
        let spec = reducelab_sched::TopologyShape::parse(shape)
            .map_err(|r| ScenarioError { field: "topology.shape".into(), reason: r })?;
        let mut t = TopologySpec {
            shape: None,
            bandwidth_gbps: Some(self.bandwidth_gbps.unwrap_or(reducelab_sched::model::DEFAULT_BANDWIDTH_GBPS)),
            latency_ns: Some(self.latency_ns.unwrap_or(reducelab_sched::model::DEFAULT_LATENCY_NS)),
            ..self.clone()
        };
        match spec {
            reducelab_sched::TopologyShape::Torus(d) => (t.kind, t.dims) = (Some(TopologyKind::Torus), Some(d)),
            reducelab_sched::TopologyShape::HyperX(d) => (t.kind, t.dims) = (Some(TopologyKind::Hyperx), Some(d)),
            reducelab_sched::TopologyShape::HammingMesh { board, grid } => {
                (t.kind, t.board, t.grid) =
                    (Some(TopologyKind::Hammingmesh), Some(vec![board.0, board.1]), Some(vec![grid.0, grid.1]))
            }
        }
        Ok(Some(t))
    }

    /// (bandwidth Gb/s, latency ns) of each class of link the table gives (network, host,
    /// board, global), as written (for `network.buffer_bytes = "line_rate"`).
    pub(super) fn link_classes(&self) -> Vec<(f64, f64)> {
        let (Some(bw), Some(lat)) = (self.bandwidth_gbps, self.latency_ns) else { return Vec::new() };
        let mut v = vec![(bw, lat)];
        if self.host_bandwidth_gbps.is_some() || self.host_latency_ns.is_some() {
            v.push((self.host_bandwidth_gbps.unwrap_or(bw), self.host_latency_ns.unwrap_or(lat)));
        }
        if self.board_bandwidth_gbps.is_some() || self.board_latency_ns.is_some() {
            v.push((self.board_bandwidth_gbps.unwrap_or(bw), self.board_latency_ns.unwrap_or(lat)));
        }
        v.extend(self.global_latency_ns.map(|l| (bw, l)));
        v
    }

    pub(super) fn build(&self) -> Result<Topology, ScenarioError> {
        match self.expanded()? {
            // A size the builders refuse is the shape's fault.
            Some(t) => t.build_table().map_err(|mut err| {
                if ["topology.dims", "topology.board", "topology.grid"]
                    .iter()
                    .any(|f| err.field == *f || err.field.starts_with(&format!("{f}[")))
                {
                    err.field = "topology.shape".into();
                }
                err
            }),
            None => self.build_table(),
        }
    }

    fn build_table(&self) -> Result<Topology, ScenarioError> {
        let kind = match self.kind {
            Some(k) => k,
            None => return e("topology.kind", "is required (star, fat_tree_2, fat_tree_3, torus, hyperx, hammingmesh, dragonfly), or give topology.shape (e.g. \"torus:8x8\")"),
        };
        let kname = kind.name();
        let bw = gbps_to_bps("topology.bandwidth_gbps", req("topology.bandwidth_gbps", self.bandwidth_gbps, kname)?)?;
        let lat = ns_to_ps("topology.latency_ns", req("topology.latency_ns", self.latency_ns, kname)?)?;
        let net = LinkParams { bandwidth_bps: bw, latency_ps: lat };
        let host = LinkParams {
            bandwidth_bps: match self.host_bandwidth_gbps {
                Some(g) => gbps_to_bps("topology.host_bandwidth_gbps", g)?,
                None => bw,
            },
            latency_ps: match self.host_latency_ns {
                Some(l) => ns_to_ps("topology.host_latency_ns", l)?,
                None => lat,
            },
        };
        // Reject parameters that the chosen kind does not use: a typo'd kind must not
        // silently ignore half of the table.
        let used = kind.keys();
        let present = self.set_keys();
        for (name, is) in present {
            if is && !used.contains(&name) {
                return e(format!("topology.{name}"), format!("is not a parameter of kind = \"{kname}\""));
            }
        }
        if kind != TopologyKind::Star
            && kind != TopologyKind::FatTree2
            && kind != TopologyKind::FatTree3
            && kind != TopologyKind::Dragonfly
        {
            for (name, is) in [
                ("host_bandwidth_gbps", self.host_bandwidth_gbps.is_some()),
                ("host_latency_ns", self.host_latency_ns.is_some()),
            ] {
                if is {
                    return e(
                        format!("topology.{name}"),
                        format!("is not a parameter of kind = \"{kname}\" (a direct network has no host links)"),
                    );
                }
            }
        }
        let wrap = |r: Result<Topology, topo::TopoError>| {
            r.map_err(|te| {
                // The builders name hammingmesh sizes board_x..grid_y; the file says board = [x, y].
                let param = match te.param.as_str() {
                    "board_x" => "board[0]",
                    "board_y" => "board[1]",
                    "grid_x" => "grid[0]",
                    "grid_y" => "grid[1]",
                    p => p,
                };
                ScenarioError { field: format!("topology.{param}"), reason: te.reason }
            })
        };
        // The builders size things in u32/u64 and overflow on absurd values (a panic, or a
        // wrapped size that slips past their node limit); reject those here, in u128, first.
        let too_big = |field: &str, nodes: u128| -> Result<(), ScenarioError> {
            if nodes > topo::MAX_NODES as u128 {
                return e(field, format!("would build {nodes} nodes, more than the limit of {}", topo::MAX_NODES));
            }
            Ok(())
        };
        // MAX_NODES does not bound links: a HyperX, fat tree or dragonfly within it can still
        // need billions of them (an out-of-memory abort). 2^25 links is what the largest torus
        // the builders accept (2^22 nodes, 8 dimensions) has.
        const MAX_LINKS: u128 = 1 << 25;
        let too_many_links = |field: &str, links: u128| -> Result<(), ScenarioError> {
            if links > MAX_LINKS {
                return e(field, format!("would build {links} links, more than the limit of {MAX_LINKS}"));
            }
            Ok(())
        };
        let nodes_of = |d: &[u32]| d.iter().fold(1u128, |n, &x| n.saturating_mul(x as u128));
        let dims2 = |field: &str, v: &Option<Vec<u32>>| -> Result<(u32, u32), ScenarioError> {
            match v {
                Some(v) if v.len() == 2 => Ok((v[0], v[1])),
                Some(v) => e(format!("topology.{field}"), format!("must have two entries [x, y], got {}", v.len())),
                None => e(format!("topology.{field}"), "is required for kind = \"hammingmesh\""),
            }
        };
        match kind {
            TopologyKind::Star => wrap(topo::star(req("topology.hosts", self.hosts, kname)?, host)),
            TopologyKind::FatTree2 => {
                let (l, h, s) = (
                    req("topology.leaves", self.leaves, kname)?,
                    req("topology.hosts_per_leaf", self.hosts_per_leaf, kname)?,
                    req("topology.spines", self.spines, kname)?,
                );
                let c = self.links_per_spine.unwrap_or(1);
                too_many_links("topology.spines", l as u128 * (h as u128 + s as u128 * c as u128))?;
                wrap(topo::fat_tree_2level(l, h, s, c, self.radix, host, net))
            }
            TopologyKind::FatTree3 => {
                let k = req("topology.k", self.k, kname)?;
                let hpe = self.hosts_per_edge.unwrap_or(k / 2);
                let (k2, h2) = (k as u128, (k / 2) as u128);
                too_big("topology.k", k2 * h2 * hpe as u128 + k2 * k2 + h2 * h2)?;
                too_many_links("topology.k", k2 * h2 * (hpe as u128 + 2 * h2))?;
                wrap(topo::fat_tree_3level(k, hpe, host, net))
            }
            TopologyKind::Torus => match &self.dims {
                Some(d) => wrap(topo::torus(d, net)),
                None => e("topology.dims", "is required for kind = \"torus\""),
            },
            TopologyKind::Hyperx => match &self.dims {
                Some(d) => {
                    let ports: u128 = d.iter().map(|&x| (x as u128).saturating_sub(1)).sum();
                    too_many_links("topology.dims", nodes_of(d).saturating_mul(ports) / 2)?;
                    wrap(topo::hyperx(d, net))
                }
                None => e("topology.dims", "is required for kind = \"hyperx\""),
            },
            TopologyKind::Hammingmesh => {
                let (bx, by) = dims2("board", &self.board)?;
                let (gx, gy) = dims2("grid", &self.grid)?;
                too_big("topology.grid", (bx as u128 * gx as u128 + 1) * (by as u128 * gy as u128 + 1) - 1)?;
                let board = LinkParams {
                    bandwidth_bps: match self.board_bandwidth_gbps {
                        Some(g) => gbps_to_bps("topology.board_bandwidth_gbps", g)?,
                        None => bw,
                    },
                    latency_ps: match self.board_latency_ns {
                        Some(l) => ns_to_ps("topology.board_latency_ns", l)?,
                        None => lat,
                    },
                };
                wrap(topo::hammingmesh(bx, by, gx, gy, board, net))
            }
            TopologyKind::Dragonfly => {
                let (g, a, p, h) = (
                    req("topology.groups", self.groups, kname)?,
                    req("topology.routers_per_group", self.routers_per_group, kname)?,
                    req("topology.hosts_per_router", self.hosts_per_router, kname)?,
                    req("topology.global_per_router", self.global_per_router, kname)?,
                );
                too_big("topology.groups", g as u128 * a as u128 * (p as u128 + 1))?;
                let (g2, a2) = (g as u128, a as u128);
                if g2 <= a2 * h as u128 + 1 {
                    // (Otherwise the builder explains that there are too few global ports.)
                    too_many_links(
                        "topology.groups",
                        g2 * (a2 * p as u128 + a2 * a2.saturating_sub(1) / 2) + g2 * g2.saturating_sub(1) / 2,
                    )?;
                }
                let ports = (p as u64 + a as u64 + h as u64).saturating_sub(1);
                if ports > u16::MAX as u64 {
                    let field = if h >= p.max(a) {
                        "global_per_router"
                    } else if a >= p {
                        "routers_per_group"
                    } else {
                        "hosts_per_router"
                    };
                    return e(
                        format!("topology.{field}"),
                        format!("a router would have {ports} ports (hosts + local + global), more than 65535"),
                    );
                }
                let global = LinkParams {
                    bandwidth_bps: bw,
                    latency_ps: match self.global_latency_ns {
                        Some(l) => ns_to_ps("topology.global_latency_ns", l)?,
                        None => lat,
                    },
                };
                wrap(topo::dragonfly(g, a, p, h, host, net, global))
            }
        }
    }
}
