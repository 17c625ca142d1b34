//! One switch node of a pool run (SwitchML, ATP, DSA): the node's [`PoolProgram`] (the
//! simulator's, from `reducelab_ina::pool_jobs`) over the data plane every node shares
//! ([`crate::ports`]: a UDP socket per port, the one event loop, egress faults, and shaped
//! ports that mark ECN in the pool frame).
//!
//! What the node does with a packet is the simulator's node logic,
//! [`reducelab_ina::pool_node`]: which packets the program takes (its jobs' packets to the
//! switch or the workers; on a tree, a leaf's workers' gradients and what the frame addresses to
//! that leaf: ATP's ACK copy, DSA's reminder copy) and where each packet it makes goes. This
//! file carries it out on UDP: a packet to a switch goes by the routing table (to a leaf of its
//! job's tree with the frame's tree child set), a copy of a result for one worker is addressed
//! on the wire to that worker (`Dest::Worker(r)`), so switches downstream forward it. ECN: a
//! shaped port ([`crate::faults::Shaper`]) marks what it queues above its threshold; a forwarded
//! packet keeps its mark, a new one starts unmarked (the simulator's rule).

use reducelab_ina::dsa_tasks::TaskTypes;
use reducelab_ina::pool::{AggPacket, Dest, PacketKind, PoolProgram, PoolStats};
use reducelab_ina::pool_jobs::ELEMS_PER_PACKET;
use reducelab_ina::pool_node::{Arrival, NodeDst, NodeOut, PoolNodes};
use reducelab_ina::{pool_wire, Values, NIL};
use serde::Serialize;

use crate::pool_plan::{PoolPlan, Role};
use crate::ports::{Bound, Node, Ports, PortsReport, SwitchOptions};

/// The pool program's counters and occupancy.
#[derive(Clone, Debug, Serialize)]
pub struct PoolProgramReport {
    pub aggregators: u32,
    pub aggregators_in_use: u32,
    pub peak_aggregators_in_use: u32,
    pub stats: PoolStats,
}

/// What a pool switch reports when it stops.
#[derive(Clone, Debug, Serialize)]
pub struct PoolSwitchReport {
    #[serde(flatten)]
    pub ports: PortsReport,
    /// Packets sent with an ECN mark they arrived with (a forwarded packet keeps its mark, as
    /// in the simulator; the switch's own new packets start unmarked).
    pub ecn_marks_carried: u64,
    /// Tree aggregation: gradients a leaf refused (not from one of its workers).
    pub malformed_at_leaf: u64,
    /// `None`: no job aggregates on this switch (it forwards only).
    pub program: Option<PoolProgramReport>,
}

/// A bound switch of a training run on a pool protocol, ready to run.
pub type PoolSwitch<'p> = Bound<PoolNode<'p>>;

/// The node's logic: its pool program (if a job aggregates here) and the simulator's node
/// logic ([`PoolNodes`]).
pub struct PoolNode<'p> {
    plan: &'p PoolPlan,
    node: u32,
    program: Option<Box<dyn PoolProgram>>,
    nodes: PoolNodes,
    /// DSA's preemption contests (counted as in the simulator; not reported).
    tasks: TaskTypes,
    vals: Values,
    ecn_carried: u64,
    out: Vec<NodeOut>,
    /// Per host: (job, rank) of the worker there (addresses a result's copy to its worker).
    worker_at: Vec<Option<(u16, u16)>>,
}

impl<'p> Bound<PoolNode<'p>> {
    pub fn bind(plan: &'p PoolPlan, node: u32, opts: SwitchOptions) -> Result<PoolSwitch<'p>, String> {
        let program = plan.program(node)?;
        let ports = Ports::bind(
            &plan.fabric,
            &plan.endpoints,
            node,
            opts,
            Some(pool_wire::mark_ecn),
            plan.ecn_threshold_bytes,
        )?;
        let logic = PoolNode {
            plan,
            node,
            program,
            nodes: plan.nodes(),
            tasks: TaskTypes::new(),
            vals: Values::new(ELEMS_PER_PACKET as usize),
            ecn_carried: 0,
            out: Vec::new(),
            worker_at: (0..plan.fabric.num_hosts() as u32)
                .map(|h| match plan.role(h) {
                    Some(Role::Worker { job, rank }) => Some((job, rank)),
                    _ => None,
                })
                .collect(),
        };
        Ok(Bound::new(ports, logic))
    }
}

impl Node for PoolNode<'_> {
    type Report = PoolSwitchReport;

    fn report(&self, ports: PortsReport) -> PoolSwitchReport {
        PoolSwitchReport {
            ports,
            ecn_marks_carried: self.ecn_carried,
            malformed_at_leaf: self.nodes.malformed_at_leaves,
            program: self.program.as_ref().map(|p| PoolProgramReport {
                aggregators: p.pool().len(),
                aggregators_in_use: p.pool().in_use(),
                peak_aggregators_in_use: p.pool().peak_in_use,
                stats: p.stats().clone(),
            }),
        }
    }

    fn receive(&mut self, io: &mut Ports, port: u16, bytes: &[u8], now: u64) {
        let slot = self.vals.alloc();
        let plan = self.plan;
        // A packet of a job's workers, or (a tree's) one leaf's result up to the root, to a
        // destination the job has.
        let valid = |p: &AggPacket| {
            let Some(job) = plan.jobs.get(p.job as usize) else { return false };
            let to = match p.dst {
                Dest::Ps => job.ps.is_some(),
                Dest::Worker(r) => (r as usize) < job.workers.len(),
                Dest::Switch | Dest::Workers => true,
            };
            to && (p.workers as usize == job.workers.len()
                || job.tree.as_ref().is_some_and(|t| {
                    p.workers as usize == t.leaves.len() && p.kind == PacketKind::Gradient && p.dst == Dest::Switch
                }))
        };
        let mut p = match pool_wire::parse_into(bytes, self.vals.get_mut(slot)) {
            Ok(p) if valid(&p) => p,
            _ => {
                self.vals.release(slot);
                io.counters.malformed += 1;
                return;
            }
        };
        p.data = slot;
        io.trace_packet("rx", port, &Traced(&p), None);
        // Where its sender addressed it: one leaf of its job's tree (the frame's tree child),
        // or by its destination.
        let job = &plan.jobs[p.job as usize];
        let addressed = match (pool_wire::tree_child(bytes), job.tree.as_ref()) {
            (Some(c), Some(t)) => match t.leaves.get(c as usize) {
                Some(&leaf) => NodeDst::Node(leaf),
                None => {
                    self.vals.release(p.data);
                    io.counters.malformed += 1;
                    return;
                }
            },
            _ => self.nodes.route_of(&p).0,
        };
        let ecn = pool_wire::ecn(bytes);
        // The simulator hands a switch's program what is addressed to the switch, and, where
        // the switch has a program, what is addressed to another switch (it intercepts its
        // jobs' packets on their way); what is addressed to a host passes by.
        match addressed {
            NodeDst::Node(n) if n == self.node || self.program.is_some() => {
                // (Shortens the boxed program's `'static` bound to this borrow.)
                let program = self.program.as_mut().map(|p| -> &mut dyn PoolProgram { p.as_mut() });
                let mut out = std::mem::take(&mut self.out);
                let (vals, tasks) = (&mut self.vals, &mut self.tasks);
                let a = Arrival { node: self.node, now, in_port: port, p, ecn, addressed };
                self.nodes.on_packet(a, program, vals, tasks, &mut out);
                for o in out.drain(..) {
                    if let NodeOut::Send(s) = o {
                        self.send(io, s.p, s.ecn, s.dst);
                    }
                }
                self.out = out;
            }
            dst => self.send(io, p, ecn, dst),
        }
    }
}

impl PoolNode<'_> {
    /// Sends `p` towards `dst` by the routing table: to a leaf of its job's tree with the
    /// frame's tree child set; a job's result to one of its workers addressed to that worker
    /// (`Dest::Worker`), so the switches on its way route it.
    fn send(&mut self, io: &mut Ports, mut p: AggPacket, ecn: bool, dst: NodeDst) {
        let job = &self.plan.jobs[p.job as usize];
        let (dst_node, child) = match dst {
            NodeDst::Node(n) => (Some(n), job.tree.as_ref().and_then(|t| t.place(job.switch, n)).flatten()),
            NodeDst::Host(h) => {
                if p.dst == Dest::Workers {
                    if let Some(Some((j, r))) = self.worker_at.get(h as usize) {
                        if *j == p.job {
                            p.dst = Dest::Worker(*r);
                        }
                    }
                }
                (self.plan.fabric.host_nodes.get(h as usize).copied(), None)
            }
        };
        let port = dst_node.filter(|&d| d != self.node).and_then(|d| self.plan.route(self.node, d, p.psn));
        let Some(port) = port else {
            io.counters.unroutable += 1;
            self.vals.release(p.data);
            return;
        };
        let vals = &self.vals;
        let sent = io.send(port, |buf| {
            let start = buf.len();
            let values = (p.data != NIL).then(|| vals.get(p.data));
            pool_wire::emit(&p, values, buf)?;
            if ecn {
                pool_wire::mark_ecn(&mut buf[start..]);
            }
            if let Some(c) = child {
                pool_wire::set_tree_child(&mut buf[start..], c);
            }
            Ok::<(), reducelab_ina::wire::WireError>(())
        });
        self.vals.release(p.data);
        match sent {
            Err(e) => io.unencodable(&p, &e),
            Ok(fate) => {
                self.ecn_carried += ecn as u64;
                io.trace_packet("tx", port, &Traced(&p), Some(fate));
            }
        }
    }
}

/// A pool packet in a trace line.
struct Traced<'a>(&'a AggPacket);

impl std::fmt::Display for Traced<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let p = self.0;
        write!(f, "{:?} {:?} job {} psn {} bitmap {:#x}", p.kind, p.dst, p.job, p.psn, p.bitmap)
    }
}
