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

use std::any::Any;
use std::sync::Arc;

use crate::fabric::Fabric;
use crate::host::{contribution, Collective, HostStats, Results};
use crate::protocol::{
    integer, only_known, HostProtocol, InaProtocol, ParamError, Params, Progress, SessionCalls, SwitchConfig, Tenant,
};
use crate::{port_bit, Addr, Header, HostAction, Kind, Out, SwAction, SwitchProgram, SwitchStats, Values, NIL};

/// Static trees as configured for one collective.
#[derive(Clone, Debug, PartialEq)]
pub struct StaticTrees {
    /// Trees; block `b` uses tree `b mod trees`.
    pub trees: u16,
    /// Blocks a host keeps outstanding (the slots reserved for it in the switches).
    pub window: u32,
}

impl StaticTrees {
    /// From a traffic entry's keys: `trees` (default 1, at most 64), `window` (default 1024).
    pub fn build(p: &Params) -> Result<Arc<dyn InaProtocol>, ParamError> {
        only_known(p, crate::protocol_info("static_trees"))?;
        let trees = integer(p, "trees", 1, 0, u16::MAX as u64)?;
        if trees == 0 || trees > 64 {
            return Err(ParamError::new("trees", format!("must be within 1..=64, got {trees}")));
        }
        let window = integer(p, "window", 1024, 0, u32::MAX as u64)?;
        if window == 0 {
            return Err(ParamError::new("window", "must be at least 1"));
        }
        Ok(Arc::new(StaticTrees { trees: trees as u16, window: window as u32 }))
    }
}

impl InaProtocol for StaticTrees {
    fn info(&self) -> &'static crate::ProtocolInfo {
        crate::protocol_info("static_trees")
    }
    fn label(&self) -> String {
        format!("static_trees:{}", self.trees)
    }
    fn as_any(&self) -> &dyn Any {
        self
    }
    /// One root per tree.
    fn root_count(&self) -> Option<u16> {
        Some(self.trees)
    }
    /// Each switch's role (children ports, parent port) per (tenant, tree), from shortest
    /// paths to each tree's root; `slots_per_tenant` slots per tenant (default: the largest
    /// window).
    fn switch_programs(
        &self,
        fabric: &Fabric,
        tenants: &[Tenant<'_>],
        cfg: &SwitchConfig,
    ) -> Result<Vec<Option<Box<dyn SwitchProgram>>>, String> {
        let trees = self.trees;
        let mut window = 1;
        for (ci, t) in tenants.iter().enumerate() {
            let Some(p) = t.protocol.as_any().downcast_ref::<StaticTrees>() else {
                return Err(format!("traffic: in-network allreduce {ci} uses protocol {}; static trees share the switches with no other protocol", t.protocol.label()));
            };
            if p.trees != trees {
                return Err(format!("traffic: in-network allreduce {ci} has {} trees, allreduce 0 has {trees}: every static-tree allreduce of a scenario uses the same number", p.trees));
            }
            window = window.max(p.window);
        }
        let roles = build_trees(fabric, tenants, trees)?;
        let slots = cfg.slots_per_tenant.unwrap_or(window);
        if (slots as u64) * tenants.len() as u64 > cfg.table_size as u64 {
            return Err(format!(
                "table_size: {} tenants × {slots} slots exceed {} descriptors",
                tenants.len(),
                cfg.table_size
            ));
        }
        Ok(roles
            .into_iter()
            .enumerate()
            .map(|(i, r)| {
                (!fabric.nodes[i].is_host)
                    .then(|| Box::new(StaticTreeSwitch::new(i as u32, r, trees, slots)) as Box<dyn SwitchProgram>)
            })
            .collect())
    }
    fn host_agent(&self, c: &Collective, rank: u32) -> Box<dyn HostProtocol> {
        Box::new(TreeHost {
            rank,
            next: 0,
            trees: self.trees,
            window: self.window,
            results: Results::new(c),
            stats: HostStats::default(),
        })
    }
    /// A tenant's switch state is its trees and its slots, not the collective's size, and a
    /// call's blocks are all done (every slot freed by its result on the way down) before the
    /// next call starts, so calls can continue one block sequence. The slot of a block is its
    /// sequence modulo the window, which must then be a power of two: the sequence wraps at
    /// 2^20, and consecutive blocks across the wrap must still take consecutive slots.
    fn session_calls(&self) -> Result<SessionCalls, String> {
        tree_session_calls(self.window)
    }
    fn stall_cause(&self, lost_packets: u64) -> String {
        if lost_packets > 0 {
            format!("{lost_packets} packets were lost and static trees have no loss recovery")
        } else {
            "no event is pending".to_string()
        }
    }
}

/// How the tree program's switches serve a session whose hosts keep `window` blocks
/// outstanding (static trees, dense Flare): the next call continues the block sequence, and the
/// window must be a power of two for the slots (sequence mod window) to stay in step where the
/// sequence wraps at 2^20.
pub fn tree_session_calls(window: u32) -> Result<SessionCalls, String> {
    if !window.is_power_of_two() {
        return Err(format!(
            "window: {window} is not a power of two; a session's block sequence wraps at 2^20, where the slots (sequence mod window) must stay in step"
        ));
    }
    Ok(SessionCalls::ContinuedSequence)
}

/// Every switch's role in every (tenant, tree): `roles[node][tenant · trees + tree]`. Each
/// host walks towards the tree's root along the lowest-numbered port that gets closer,
/// recording each switch's child and parent ports; the walk stops where it meets a switch
/// already on the tree.
pub fn build_trees(fabric: &Fabric, tenants: &[Tenant<'_>], trees: u16) -> Result<Vec<Vec<Option<TreeNode>>>, String> {
    let mut roles: Vec<Vec<Option<TreeNode>>> = vec![vec![None; tenants.len() * trees as usize]; fabric.nodes.len()];
    for (ci, s) in tenants.iter().enumerate() {
        if s.roots.len() != trees as usize {
            return Err(format!("traffic: in-network allreduce {ci} has {} roots for {trees} trees", s.roots.len()));
        }
        for (t, &root) in s.roots.iter().enumerate() {
            let dist = fabric.bfs_from(root);
            for &h in &s.coll.ranks {
                let mut node = fabric.host_nodes[h as usize];
                let mut from_port: Option<u16> = None;
                loop {
                    let nd = &fabric.nodes[node as usize];
                    if !nd.is_host {
                        let role = roles[node as usize][ci * trees as usize + t]
                            .get_or_insert(TreeNode { children: 0, parent: None });
                        role.children |= port_bit(from_port.expect("arrived from a port"));
                        if node == root {
                            break;
                        }
                    }
                    let (pi, &(peer, peer_port)) = nd
                        .ports
                        .iter()
                        .enumerate()
                        .find(|(_, &(peer, _))| {
                            dist[peer as usize].wrapping_add(1) == dist[node as usize]
                                && !fabric.nodes[peer as usize].is_host
                        })
                        .ok_or_else(|| {
                            format!("traffic: static-tree root switch {root} is unreachable from host {h}")
                        })?;
                    if !nd.is_host {
                        let role = roles[node as usize][ci * trees as usize + t].as_mut().expect("set");
                        if role.parent.is_some_and(|q| q != pi as u16) {
                            return Err(format!("traffic: static tree {t} of in-network allreduce {ci} has two parents at switch {node}"));
                        }
                        let known = role.parent.is_some();
                        role.parent = Some(pi as u16);
                        if known {
                            break; // the rest of the path is already recorded
                        }
                    }
                    from_port = Some(peer_port);
                    node = peer;
                }
            }
        }
    }
    Ok(roles)
}

/// A host of a static-tree collective: sends every block (tree `b mod trees`) to its first-hop
/// switch, at most `window` blocks ahead of its oldest unfinished one (the slots reserved for
/// it in the switches), and receives the result from the tree. No timers: without loss
/// recovery a lost packet stalls the run, which then says so.
pub struct TreeHost {
    rank: u32,
    next: u32,
    trees: u16,
    window: u32,
    results: Results,
    stats: HostStats,
}

impl HostProtocol for TreeHost {
    fn start(&mut self, _c: &Collective, _now: u64, _vals: &mut Values, _out: &mut Vec<HostAction>) {}
    fn pull(&mut self, c: &Collective, _now: u64, room: usize, vals: &mut Values, out: &mut Vec<HostAction>) {
        let mut made = 0;
        while made < room && self.next < c.blocks {
            let b = self.next;
            if b >= self.window && !self.results.is_done(b - self.window) {
                break;
            }
            self.next += 1;
            let mut h = contribution(c, self.rank, b, 0, Kind::Reduce, Addr::FirstHop, vals);
            h.tree = (b % self.trees as u32) as u16;
            self.stats.sent_reduce += 1;
            out.push(HostAction::Send(h));
            made += 1;
        }
    }
    fn on_packet(&mut self, c: &Collective, now: u64, hdr: Header, vals: &mut Values, _out: &mut Vec<HostAction>) {
        match hdr.kind {
            Kind::Broadcast | Kind::Retransmit => {
                self.results.accept(c, now, &hdr, vals, &mut self.stats);
            }
            _ => {
                self.stats.stale += 1;
                vals.release(hdr.data);
            }
        }
    }
    fn on_timer(&mut self, _c: &Collective, _now: u64, _token: u64, _vals: &mut Values, _out: &mut Vec<HostAction>) {}
    fn progress(&self) -> Progress {
        self.results.progress()
    }
    fn stats(&self) -> &HostStats {
        &self.stats
    }
}

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
        hdr.tenant as usize * self.slots_per_tenant as usize
            + (hdr.id & 0xFF_FFFF) as usize % self.slots_per_tenant as usize
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
