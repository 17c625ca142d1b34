//! Virtual-channel policies that make credit flow control deadlock-free.

use crate::{FlowControl, RoutingAlgo};
use reducelab_topo::{Shape, Topology};
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
        RoutingAlgo::Canary => "canary",
    }
}

/// For a torus node at coordinate `c` in a dimension of size `d`, is the link leaving on
/// `port` (even = `+`, odd = `−`) the wrap-around (dateline) link?
#[inline]
pub(crate) fn torus_is_wrap(dims: &[u32], node: u32, port: u16) -> bool {
    let dim = (port / 2) as usize;
    let mut r = node;
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
