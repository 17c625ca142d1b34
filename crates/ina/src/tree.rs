//! In-network allreduce on static reduction trees (SHARP / SwitchML / ATP-like with one tree,
//! PANAMA-like with N trees and blocks assigned to trees round-robin).
//!
//! Every switch of a tree knows, per (tenant, tree), the ports its children are on and its
//! parent port, set up before the run (the control plane's job). A switch aggregates a block
//! until every child has sent it, then sends the aggregate to its parent port; the root
//! multicasts the result down the same tree and each switch frees the block's slot as the
//! result passes. Slots are mapped statically (`tenant`'s range, block sequence modulo its
//! size) and hosts keep at most that many blocks outstanding, so there are no collisions — the
//! usual way such systems reserve switch memory. Packets follow the tree whatever the
//! congestion: that is what Canary is compared against. There is no loss recovery (a lost
//! packet stalls the run, which then says so).

use crate::{Header, Kind, Out, SwAction, SwitchProgram, SwitchStats, Values, NIL};

/// One switch's place in one tree.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TreeNode {
    /// Ports children (hosts or switches) send on.
    pub children: u64,
    /// `None` at the root.
    pub parent: Option<u16>,
}

#[derive(Clone, Copy, Debug)]
struct Slot {
    id: u32,
    arrived: u16,
    counter: u16,
    fp: u64,
    data: u32,
}

const EMPTY: Slot = Slot { id: NIL, arrived: 0, counter: 0, fp: 0, data: NIL };

pub struct StaticTreeSwitch {
    pub addr: u32,
    /// Indexed by `tenant · trees + tree`.
    nodes: Vec<Option<TreeNode>>,
    trees: u16,
    slots_per_tenant: u32,
    table: Vec<Slot>,
    used: u32,
    stats: SwitchStats,
}

impl StaticTreeSwitch {
    /// `nodes[tenant · trees + tree]`: this switch's role, or `None` if the tree does not
    /// cross it. `slots_per_tenant` descriptors per tenant.
    pub fn new(addr: u32, nodes: Vec<Option<TreeNode>>, trees: u16, slots_per_tenant: u32) -> StaticTreeSwitch {
        let tenants = nodes.len() / trees.max(1) as usize;
        StaticTreeSwitch {
            addr,
            nodes,
            trees: trees.max(1),
            slots_per_tenant,
            table: vec![EMPTY; tenants * slots_per_tenant as usize],
            used: 0,
            stats: SwitchStats::default(),
        }
    }

    fn slot(&self, hdr: &Header) -> usize {
        hdr.tenant as usize * self.slots_per_tenant as usize + (hdr.id & 0xFF_FFFF) as usize % self.slots_per_tenant as usize
    }

    fn node(&self, hdr: &Header) -> Option<TreeNode> {
        self.nodes.get(hdr.tenant as usize * self.trees as usize + hdr.tree as usize).copied().flatten()
    }

}

impl SwitchProgram for StaticTreeSwitch {
    fn on_packet(&mut self, now: u64, _in_port: u16, hdr: Header, vals: &mut Values, out: &mut Vec<SwAction>) {
        out.push(SwAction::Consume);
        let Some(node) = self.node(&hdr) else {
            // Not on this tree: a misconfiguration; drop it (the run then stalls and says so).
            vals.release(hdr.data);
            return;
        };
        let s = self.slot(&hdr);
        match hdr.kind {
            Kind::Reduce => {
                let mut e = self.table[s];
                if e.id == NIL {
                    e = Slot { id: hdr.id, arrived: 0, counter: 0, fp: 0, data: hdr.data };
                    self.stats.note_use(now, self.used, self.used + 1);
                    self.used += 1;
                } else if e.id != hdr.id {
                    self.stats.collisions += 1;
                    vals.release(hdr.data);
                    return;
                } else {
                    vals.absorb(e.data, hdr.data);
                }
                e.arrived += 1;
                e.counter = e.counter.saturating_add(hdr.counter);
                e.fp = e.fp.wrapping_add(hdr.fp);
                self.stats.aggregated += 1;
                let expected = node.children.count_ones() as u16;
                if e.arrived < expected {
                    self.table[s] = e;
                    return;
                }
                let mut h = hdr;
                h.counter = e.counter;
                h.fp = e.fp;
                h.data = e.data;
                self.stats.flushed += 1;
                match node.parent {
                    Some(p) => {
                        self.table[s] = Slot { data: NIL, ..e };
                        out.push(SwAction::Emit { out: Out::Port(p), hdr: h });
                    }
                    None => {
                        // Root: the result goes straight back down.
                        self.table[s] = EMPTY;
                        self.stats.note_use(now, self.used, self.used - 1);
                        self.used -= 1;
                        h.kind = Kind::Broadcast;
                        self.stats.broadcasts += 1;
                        crate::multicast(node.children, &h, vals, out);
                    }
                }
            }
            Kind::Broadcast => {
                if self.table[s].id == hdr.id {
                    self.table[s] = EMPTY;
                    self.stats.note_use(now, self.used, self.used - 1);
                    self.used -= 1;
                }
                self.stats.broadcasts += 1;
                crate::multicast(node.children, &hdr, vals, out);
            }
            _ => vals.release(hdr.data),
        }
    }

    fn on_timer(&mut self, _now: u64, _token: u64, _vals: &mut Values, _out: &mut Vec<SwAction>) {}

    fn descriptors_in_use(&self) -> u32 {
        self.used
    }
    fn stats(&self) -> &SwitchStats {
        &self.stats
    }
}
