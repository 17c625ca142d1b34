//! What a switch node of a training run on a pool protocol (SwitchML, ATP, DSA) does with a
//! packet, sans I/O: which packets its program takes (its jobs' gradients and what is addressed
//! to it; on a tree, a leaf's workers' gradients as a job of the leaf's workers), and where each
//! packet the program makes goes (one copy per worker of a job's result, one per leaf of ATP's
//! ACK on a tree, a leaf's result up to the root). The simulator's driver and the software
//! switch both call [`PoolNodes::on_packet`] and carry out its [`NodeOut`]s, each with its own
//! I/O: the engine's packets, or frames on UDP ports.
//!
//! Delivery rule: a packet for job `j`'s switch or its workers (`Dest::Switch`,
//! `Dest::Workers`) is addressed to `j`'s aggregation switch and taken by the program there; on
//! a tree, a leaf's program also takes its workers' gradients on their way up and what is
//! addressed to the leaf (ATP's ACK copy, DSA's reminder copy); anything else (to the PS, to one
//! worker, a job aggregated elsewhere) passes through by its destination.
//!
//! Outputs come in the order the engine takes them (so the simulator's event order is the
//! program's action order): on a tree, the packets the tree routes first, then the rest.

use crate::dsa_tasks::TaskTypes;
use crate::pool::{hash_index, AggPacket, Dest, PacketKind, PoolAction, PoolProgram, Task};
use crate::pool_jobs::{Tree, TreeRoute};
use crate::Values;

/// Where one job's packets go: its aggregation switch (the tree's root), its tree, its hosts.
#[derive(Clone, Debug)]
pub struct JobRoute {
    pub switch: u32,
    pub tree: Option<Tree>,
    /// Worker hosts by rank.
    pub workers: Vec<u32>,
    pub ps: Option<u32>,
}

/// Where a packet a node sends is addressed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NodeDst {
    /// A switch node (its program takes it there).
    Node(u32),
    /// A host (a worker or a parameter server).
    Host(u32),
}

/// A packet arriving at a switch node.
#[derive(Clone, Copy, Debug)]
pub struct Arrival {
    pub node: u32,
    pub now: u64,
    pub in_port: u16,
    pub p: AggPacket,
    /// It carries an ECN mark.
    pub ecn: bool,
    /// Where its sender addressed it.
    pub addressed: NodeDst,
}

/// One packet a node sends.
#[derive(Clone, Copy, Debug)]
pub struct NodeSend {
    pub p: AggPacket,
    /// It carries an ECN mark (a forwarded packet keeps the arriving mark; a new one starts
    /// unmarked).
    pub ecn: bool,
    pub dst: NodeDst,
    /// Programmable switches on its way take it (a packet for a job's switch).
    pub intercept: bool,
    /// It is the arriving packet going on (the simulator forwards it rather than emitting a
    /// new one).
    pub custody: bool,
}

/// What a node does with the arriving packet and what it sends.
#[derive(Clone, Copy, Debug)]
pub enum NodeOut {
    /// The arriving packet ends here.
    Consume,
    Send(NodeSend),
}

/// The node logic of every switch of a training run: the jobs' routes and the counters the
/// logic keeps.
#[derive(Clone, Debug)]
pub struct PoolNodes {
    pub jobs: Vec<JobRoute>,
    /// `aggregation = "tree"`.
    pub tree: bool,
    /// The protocol is ATP (its ACK goes down a tree to every leaf).
    pub atp: bool,
    /// The protocol is DSA (its preemption contests are counted, [`TaskTypes`]).
    pub dsa: bool,
    /// Tree aggregation: gradients a leaf refused (not from one of its workers).
    pub malformed_at_leaves: u64,
    actions: Vec<PoolAction>,
    /// On a tree, the actions the tree does not route (kept to reuse its memory).
    rest: Vec<PoolAction>,
}

impl PoolNodes {
    pub fn new(jobs: Vec<JobRoute>, tree: bool, atp: bool, dsa: bool) -> PoolNodes {
        PoolNodes { jobs, tree, atp, dsa, malformed_at_leaves: 0, actions: Vec::new(), rest: Vec::new() }
    }

    /// Where a packet of its job addressed by its destination goes, and whether programmable
    /// switches take it.
    pub fn route_of(&self, p: &AggPacket) -> (NodeDst, bool) {
        let job = &self.jobs[p.job as usize];
        match p.dst {
            Dest::Switch | Dest::Workers => (NodeDst::Node(job.switch), true),
            Dest::Ps => (NodeDst::Host(job.ps.expect("a job with a PS")), false),
            Dest::Worker(r) => (NodeDst::Host(job.workers[r as usize]), false),
        }
    }

    /// Where `node` stands in job `job`'s tree ([`Tree::place`]; `None` also without a tree).
    fn tree_place(&self, job: u16, node: u32) -> Option<Option<u16>> {
        let j = &self.jobs[job as usize];
        j.tree.as_ref()?.place(j.switch, node)
    }

    /// Packet `a.p` arrived at `a.node`, whose program is `program` (`None`: the node forwards
    /// only). Pushes what becomes of it and what is sent to `out`; `tasks` counts DSA's
    /// preemption contests.
    pub fn on_packet(
        &mut self,
        a: Arrival,
        program: Option<&mut dyn PoolProgram>,
        vals: &mut Values,
        tasks: &mut TaskTypes,
        out: &mut Vec<NodeOut>,
    ) {
        let Arrival { node, now, in_port, p, ecn, addressed } = a;
        let has_tree = self.jobs[p.job as usize].tree.is_some();
        if has_tree && p.dst == Dest::Switch {
            let leaf = self.tree_place(p.job, node).flatten();
            match (p.kind, leaf) {
                (PacketKind::Gradient, Some(c)) => return self.at_leaf(a, c, program, vals, tasks, out),
                // A reminder goes to every switch of the tree (the PS sends one copy to each):
                // each copy is for the switch it is addressed to.
                (PacketKind::Reminder, _) if addressed != NodeDst::Node(node) => {
                    out.push(NodeOut::Send(NodeSend { p, ecn, dst: addressed, intercept: true, custody: true }));
                    return;
                }
                (PacketKind::Reminder, Some(c)) => return self.at_leaf(a, c, program, vals, tasks, out),
                _ => {}
            }
        }
        // ATP: the root's copy of the PS's ACK for each leaf (it frees the leaf's aggregator).
        if p.kind == PacketKind::Ack && has_tree && addressed == NodeDst::Node(node) {
            if let Some(Some(c)) = self.tree_place(p.job, node) {
                return self.at_leaf(a, c, program, vals, tasks, out);
            }
        }
        let program = match program {
            Some(program) if self.jobs[p.job as usize].switch == node => program,
            _ => {
                // Another switch's job: pass through.
                let (dst, intercept) = self.route_of(&p);
                out.push(NodeOut::Send(NodeSend { p, ecn, dst, intercept, custody: true }));
                return;
            }
        };
        let mut buf = std::mem::take(&mut self.actions);
        let contested = p.kind == PacketKind::Gradient && p.dst == Dest::Switch;
        self.run(program, now, in_port, p, contested, vals, tasks, &mut buf);
        self.actions = buf;
        if self.tree {
            return self.tree_actions(node, ecn, None, vals, out);
        }
        self.plain_actions(ecn, vals, out);
    }

    /// Runs `program` on `p`; with DSA, a gradient (`contested`) that found its aggregator
    /// held by another task is counted by who won ([`Self::note_contest`]).
    #[allow(clippy::too_many_arguments)]
    fn run(
        &self,
        program: &mut dyn PoolProgram,
        now: u64,
        in_port: u16,
        p: AggPacket,
        contested: bool,
        vals: &mut Values,
        tasks: &mut TaskTypes,
        buf: &mut Vec<PoolAction>,
    ) {
        let holder = (self.dsa && contested)
            .then(|| program.pool().get(hash_index(p.task(), program.pool().len())).task)
            .flatten();
        program.on_packet(now, in_port, p, vals, buf);
        if let Some(held) = holder.filter(|&t| t != p.task()) {
            note_contest(tasks, held, p.task(), buf);
        }
    }

    /// A packet for job `p.job`'s leaf program at `node` (child `c` of its tree): a worker's
    /// gradient, as local rank `local[rank]` of a job of the leaf's workers, or what is
    /// addressed to the leaf (ATP's ACK, DSA's reminder).
    fn at_leaf(
        &mut self,
        a: Arrival,
        c: u16,
        program: Option<&mut dyn PoolProgram>,
        vals: &mut Values,
        tasks: &mut TaskTypes,
        out: &mut Vec<NodeOut>,
    ) {
        let Arrival { node, now, in_port, p, ecn, .. } = a;
        let t = self.jobs[p.job as usize].tree.as_ref().expect("a tree");
        let Some(local) = t.leaf_input(c, p) else {
            // Not one of this leaf's workers (a malformed bitmap): dropped, counted.
            self.malformed_at_leaves += 1;
            vals.release(p.data);
            out.push(NodeOut::Consume);
            return;
        };
        let program = program.expect("a leaf program");
        let mut buf = std::mem::take(&mut self.actions);
        self.run(program, now, in_port, local, local.kind == PacketKind::Gradient, vals, tasks, &mut buf);
        self.actions = buf;
        self.tree_actions(node, ecn, Some(p), vals, out);
    }

    /// The program's actions at `node` when jobs aggregate on trees (`arriving`: the packet the
    /// leaf program was given, for its priority): where each goes is [`Tree::route`]'s; the
    /// packet in custody goes on as the first copy. What the tree does not route follows, as
    /// without a tree.
    fn tree_actions(
        &mut self,
        node: u32,
        ecn: bool,
        arriving: Option<AggPacket>,
        vals: &mut Values,
        out: &mut Vec<NodeOut>,
    ) {
        let mut buf = std::mem::take(&mut self.actions);
        let mut rest = std::mem::take(&mut self.rest);
        for a in buf.drain(..) {
            let (x, custody) = match a {
                PoolAction::Consume => {
                    rest.push(a);
                    continue;
                }
                PoolAction::Forward(x) => (x, true),
                PoolAction::Emit(x) => (x, false),
            };
            let carry = ecn && custody;
            let job = &self.jobs[x.job as usize];
            let route = match job.tree.as_ref() {
                Some(t) => t.route(t.place(job.switch, node), self.atp, job.workers.len() as u16, x, arriving),
                None => TreeRoute::Plain(x),
            };
            match route {
                TreeRoute::Up(up) => out.push(NodeOut::Send(NodeSend {
                    p: up,
                    ecn: carry,
                    dst: NodeDst::Node(job.switch),
                    intercept: true,
                    custody,
                })),
                TreeRoute::Ranks(result, ranks) => {
                    if ranks.is_empty() {
                        vals.release(result.data);
                        if custody {
                            out.push(NodeOut::Consume);
                        }
                    }
                    for (i, &r) in ranks.iter().enumerate() {
                        let c = if i == 0 { result } else { result.copy(vals) };
                        let dst = NodeDst::Host(job.workers[r as usize]);
                        out.push(NodeOut::Send(NodeSend {
                            p: c,
                            ecn: carry,
                            dst,
                            intercept: false,
                            custody: custody && i == 0,
                        }));
                    }
                }
                TreeRoute::Leaves(result) => {
                    let leaves = &job.tree.as_ref().expect("a tree").leaves;
                    for (i, &leaf) in leaves.iter().enumerate() {
                        let copy = if i == 0 { result } else { result.copy(vals) };
                        out.push(NodeOut::Send(NodeSend {
                            p: copy,
                            ecn: carry,
                            dst: NodeDst::Node(leaf),
                            intercept: true,
                            custody: custody && i == 0,
                        }));
                    }
                }
                TreeRoute::Plain(x) => rest.push(if custody { PoolAction::Forward(x) } else { PoolAction::Emit(x) }),
            }
        }
        self.actions = buf;
        if !rest.is_empty() {
            self.actions.append(&mut rest);
            self.plain_actions(ecn, vals, out);
        }
        self.rest = rest;
    }

    /// The program's actions as without a tree: a result for a job's workers is multicast,
    /// one copy per worker; the rest goes by its destination.
    fn plain_actions(&mut self, ecn: bool, vals: &mut Values, out: &mut Vec<NodeOut>) {
        let mut buf = std::mem::take(&mut self.actions);
        for a in buf.drain(..) {
            match a {
                PoolAction::Consume => out.push(NodeOut::Consume),
                PoolAction::Forward(p) if p.dst == Dest::Workers => self.multicast(p, ecn, true, vals, out),
                PoolAction::Forward(p) => {
                    let (dst, intercept) = self.route_of(&p);
                    let intercept = intercept && p.dst != Dest::Switch;
                    out.push(NodeOut::Send(NodeSend { p, ecn, dst, intercept, custody: true }));
                }
                PoolAction::Emit(p) if p.dst == Dest::Workers => self.multicast(p, false, false, vals, out),
                PoolAction::Emit(p) => {
                    let (dst, _) = self.route_of(&p);
                    out.push(NodeOut::Send(NodeSend { p, ecn: false, dst, intercept: false, custody: false }));
                }
            }
        }
        self.actions = buf;
    }

    /// One copy of `p` to each worker of its job (the first takes over the arriving packet if
    /// `custody`).
    fn multicast(&self, p: AggPacket, ecn: bool, custody: bool, vals: &mut Values, out: &mut Vec<NodeOut>) {
        for (r, &host) in self.jobs[p.job as usize].workers.iter().enumerate() {
            let c = if r == 0 { p } else { p.copy(vals) };
            let s = NodeSend { p: c, ecn, dst: NodeDst::Host(host), intercept: false, custody: custody && r == 0 };
            out.push(NodeOut::Send(s));
        }
    }
}

/// A DSA gradient packet of `arriving` found its aggregator held by `held`: the switch's
/// actions say who won (§IV-C's types II and III). The winner keeps the aggregator: the evicted
/// partial of `held` goes to the PS (the packet won), or the packet itself does (the holder
/// won).
fn note_contest(tasks: &mut TaskTypes, held: Task, arriving: Task, actions: &[PoolAction]) {
    for a in actions {
        if let PoolAction::Forward(x) = a {
            if x.kind == PacketKind::Partial && x.task() == held {
                return tasks.on_contest(arriving, held);
            }
            if x.kind == PacketKind::Gradient && x.dst == Dest::Ps && x.task() == arriving {
                return tasks.on_contest(held, arriving);
            }
        }
    }
}
