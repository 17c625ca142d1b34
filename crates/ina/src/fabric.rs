//! The network as a protocol's control plane sees it: nodes, their ports and what each port
//! leads to. Plain data built by the simulator (or a software switch) from its topology, so
//! that tree construction and other set-up logic live with the protocols and stay sans-I/O.

use crate::NIL;

/// One node: a host or a switch, and the (peer node, peer port) behind each of its ports.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FabricNode {
    pub is_host: bool,
    /// Whether the node forwards traffic (switches; hosts of direct networks).
    pub forwards: bool,
    pub ports: Vec<(u32, u16)>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Fabric {
    pub nodes: Vec<FabricNode>,
    /// Node of each host index.
    pub host_nodes: Vec<u32>,
}

impl Fabric {
    pub fn num_hosts(&self) -> usize {
        self.host_nodes.len()
    }

    /// The switch a host is attached to (its first port's peer), or [`NIL`].
    pub fn first_hop(&self, host: u32) -> u32 {
        self.nodes[self.host_nodes[host as usize] as usize].ports.first().map(|p| p.0).unwrap_or(NIL)
    }

    /// Hop distances from `src` to every node, crossing only forwarding nodes (a
    /// non-forwarding host is reached but not crossed); `u32::MAX` = unreachable.
    pub fn bfs_from(&self, src: u32) -> Vec<u32> {
        let mut dist = vec![u32::MAX; self.nodes.len()];
        let mut frontier = std::collections::VecDeque::new();
        dist[src as usize] = 0;
        frontier.push_back(src);
        while let Some(v) = frontier.pop_front() {
            if v != src && !self.nodes[v as usize].forwards {
                continue;
            }
            for &(peer, _) in &self.nodes[v as usize].ports {
                if dist[peer as usize] == u32::MAX {
                    dist[peer as usize] = dist[v as usize] + 1;
                    frontier.push_back(peer);
                }
            }
        }
        dist
    }
}
