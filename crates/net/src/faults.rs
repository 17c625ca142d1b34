//! Faults: link loss, link and node failures, and what is alive.
//!
//! Guarantees:
//! - A failure takes effect at its scheduled time as an event of the run (deterministic
//!   order). A link failure takes both directions down; a node failure takes the node and all
//!   its links down. Packets queued on dead ports, on dead wires (detected when they arrive)
//!   or inside a dead node are lost and counted as `drops_failure`; protocol packets among them
//!   are reported to the workload as lost.
//! - Routing reconverges at once: next hops become the shortest paths of the surviving graph
//!   (a packet with no path left is dropped as `no_route`).
//! - Link loss draws one Bernoulli trial per link traversal from its own random stream (forked
//!   from the scenario seed), so loss never shifts any other concern's draws.

use crate::ids::PortId;
use crate::network::{Event, Network};
use reducelab_des::{EventQueue, SimTime};
use reducelab_topo::{LinkId, MinimalRoutes, NodeId, Topology};

/// A failure injected at a given time.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Fault {
    /// Both directions of the link go down; queued and in-flight packets on it are lost.
    Link { link: u32, at: SimTime },
    /// The node and all its links go down; packets inside it are lost.
    Node { node: u32, at: SimTime },
}

impl Fault {
    pub fn at(&self) -> SimTime {
        match *self {
            Fault::Link { at, .. } | Fault::Node { at, .. } => at,
        }
    }
}

/// The failure schedule and the liveness and loss of every link and node.
pub(crate) struct Faults {
    schedule: Vec<Fault>,
    /// Per link; `&[bool]` for the routing's BFS over the surviving graph.
    pub link_up: Vec<bool>,
    /// Per node.
    pub node_up: Vec<bool>,
    /// Loss probability per link traversal.
    link_loss: Vec<f64>,
    /// Every link and node is up for good and no link loses packets (no fault scheduled, no
    /// loss set): the per-hop checks then read nothing.
    quiet: bool,
}

impl Faults {
    /// Checks the schedule against `topo`; every link starts with loss `loss`.
    pub fn new(topo: &Topology, schedule: Vec<Fault>, loss: f64) -> Result<Faults, String> {
        for f in &schedule {
            match *f {
                Fault::Link { link, .. } if link as usize >= topo.links.len() => {
                    return Err(format!("fault link {link} does not exist (topology has {} links)", topo.links.len()))
                }
                Fault::Node { node, .. } if node as usize >= topo.nodes.len() => {
                    return Err(format!("fault node {node} does not exist (topology has {} nodes)", topo.nodes.len()))
                }
                _ => {}
            }
        }
        let quiet = schedule.is_empty() && loss == 0.0;
        Ok(Faults {
            schedule,
            link_up: vec![true; topo.links.len()],
            node_up: vec![true; topo.nodes.len()],
            link_loss: vec![loss; topo.links.len()],
            quiet,
        })
    }

    /// Puts one event per scheduled failure in the queue (in schedule order).
    pub fn schedule(&self, queue: &mut EventQueue<Event>) {
        for (i, f) in self.schedule.iter().enumerate() {
            queue.push(f.at(), Event::Fault { idx: i as u32 });
        }
    }

    /// Nothing can fail or lose packets in this run (see `quiet`): callers may skip reading
    /// the link or node they would check.
    #[inline]
    pub fn all_up(&self) -> bool {
        self.quiet
    }
    #[inline]
    pub fn is_link_up(&self, link: LinkId) -> bool {
        self.quiet || self.link_up[link.idx()]
    }
    #[inline]
    pub fn is_node_up(&self, node: NodeId) -> bool {
        self.quiet || self.node_up[node.idx()]
    }
    #[inline]
    pub fn loss(&self, link: LinkId) -> f64 {
        if self.quiet {
            return 0.0;
        }
        self.link_loss[link.idx()]
    }
    pub fn set_loss(&mut self, link: LinkId, p: f64) {
        self.link_loss[link.idx()] = p;
        self.quiet &= p == 0.0;
    }

    /// "node 3, 5 failed; 4 links down" parts of a stall reason.
    pub fn describe(&self, why: &mut Vec<String>) {
        let down_nodes: Vec<String> =
            (0..self.node_up.len()).filter(|&n| !self.node_up[n]).map(|n| n.to_string()).collect();
        let down_links = self.link_up.iter().filter(|&&u| !u).count();
        if !down_nodes.is_empty() {
            why.push(format!("node {} failed", down_nodes.join(", ")));
        }
        if down_links > 0 {
            why.push(format!("{down_links} links down"));
        }
    }
}

impl Network {
    /// Applies scheduled failure `idx`: liveness, rerouting, and the loss of the packets queued
    /// on the ports that died.
    pub(crate) fn apply_fault(&mut self, idx: u32) {
        let f = self.faults.schedule[idx as usize];
        let mut dead_ports: Vec<PortId> = Vec::new();
        match f {
            Fault::Link { link, .. } => {
                self.faults.link_up[link as usize] = false;
                dead_ports.extend(self.pt.all().filter(|&g| self.pt.link(g).0 == link));
            }
            Fault::Node { node, .. } => {
                self.faults.node_up[node as usize] = false;
                for g in self.pt.of_node(NodeId(node)) {
                    self.faults.link_up[self.pt.link(g).idx()] = false;
                    dead_ports.push(g);
                    dead_ports.push(self.pt.peer(g));
                }
            }
        }
        // The routing layer reconverges at once: shortest paths over the surviving graph.
        // (Packets already past their last live choice are dropped as `no_route`.)
        self.router.routes =
            MinimalRoutes::with_failures(&self.router.topo, &self.faults.link_up, &self.faults.node_up);
        // Distances towards switches (protocol packets addressed to one) are rebuilt over the
        // surviving graph at their next use.
        self.router.forget_node_distances();
        // Packets queued on dead ports are lost with them.
        for g in dead_ports {
            for vc in 0..self.nvc {
                while self.queues.head(g, vc).is_some() {
                    let pkt = self.dequeue(g, vc);
                    self.stats.drops_failure += 1;
                    self.port_counters[g.idx()].drops += 1;
                    self.lose(pkt);
                }
            }
            while self.trim.on && self.ports[g.idx()].prio_packets > 0 {
                let pkt = self.take_priority(g);
                self.stats.drops_failure += 1;
                self.port_counters[g.idx()].drops += 1;
                self.lose(pkt);
            }
        }
        if self.ib.on {
            self.ib_after_fault();
        }
    }
}
