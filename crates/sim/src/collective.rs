//! Executes a collective [`Schedule`] on the packet network, as MPI ranks would.
//!
//! Each rank runs its steps in order. Starting a step sends every message of the step at
//! once (on the NIC port the schedule names, if any) and posts its receives; the step
//! completes when all its sends have been delivered and all its receives have arrived.
//! Messages that arrive before their receive is posted wait (MPI's unexpected-message queue);
//! the k-th message on a (sender, receiver) pair matches the k-th receive, whatever the
//! network's delivery order.
//!
//! **Verified data.** Every (rank, block) carries a 64-bit fingerprint, initially a hash of
//! (seed, rank, block); reductions add fingerprints (wrapping), copies overwrite. At the end
//! every rank compares each block it must hold with the sum over all ranks: a lost,
//! duplicated or misrouted contribution shows up as a mismatch.

use reducelab_des::SimTime;
use reducelab_net::{MsgId, Network, Workload};
use reducelab_sched::{Blocks, Collective, RecvOp, Schedule};
use reducelab_topo::{coords_of, hyperx_port, Shape, Topology};
use std::collections::HashMap;

fn mix(seed: u64, a: u64, b: u64) -> u64 {
    let mut z = seed ^ a.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ b.wrapping_mul(0xC2B2_AE3D_27D4_EB4F);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

struct InFlight {
    from: u32,
    to: u32,
    ordinal: u32,
    payload: Vec<u64>,
}

/// Outcome of a finished collective.
#[derive(Clone, Debug)]
pub struct CollectiveResult {
    pub algorithm: String,
    pub collective: Collective,
    pub ranks: u32,
    pub bytes: u64,
    pub start: SimTime,
    /// When the last rank finished (`None` if some rank never did).
    pub end: Option<SimTime>,
    pub verified: bool,
    /// First data mismatch, if any.
    pub mismatch: Option<String>,
    pub messages: u64,
}

impl CollectiveResult {
    pub fn runtime_ps(&self) -> Option<u64> {
        self.end.map(|e| e.ps() - self.start.ps())
    }
    /// Vector bytes per second of runtime, in Gb/s (the Swing paper's goodput).
    pub fn goodput_gbps(&self) -> Option<f64> {
        self.runtime_ps().filter(|&t| t > 0).map(|t| self.bytes as f64 * 8.0 / (t as f64 * 1e-12) / 1e9)
    }
}

pub struct CollectiveRun {
    sched: std::sync::Arc<Schedule>,
    /// Host index of each rank.
    hosts: Vec<u32>,
    bytes: u64,
    elem_bytes: u64,
    tag: u64,
    start: SimTime,
    seed: u64,
    pc: Vec<usize>,
    outstanding: Vec<u32>,
    values: Vec<u64>,
    sent_on: HashMap<(u32, u32), u32>,
    posted_on: HashMap<(u32, u32), u32>,
    /// Posted receives waiting for their message: (from, to, ordinal) → (blocks, op).
    waiting: HashMap<(u32, u32, u32), (Blocks, RecvOp)>,
    /// Messages that arrived before their receive was posted.
    early: HashMap<(u32, u32, u32), Vec<u64>>,
    inflight: HashMap<u32, InFlight>,
    done_at: Vec<Option<SimTime>>,
    port_of: PortMap,
    finished: u32,
    messages: u64,
}

impl CollectiveRun {
    /// `hosts[r]` is the host running rank `r`; `bytes` is the vector size per rank (an
    /// all-to-all: a rank's send buffer, [`Collective::vector_bytes`]); messages carry
    /// `tag` so the scenario workload can route deliveries back here.
    // (One independent setting each; the scenario workload is the one caller outside tests.)
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        topo: &Topology,
        sched: impl Into<std::sync::Arc<Schedule>>,
        hosts: Vec<u32>,
        bytes: u64,
        elem_bytes: u64,
        tag: u64,
        start: SimTime,
        seed: u64,
    ) -> Self {
        let sched: std::sync::Arc<Schedule> = sched.into();
        let p = sched.ranks as usize;
        assert_eq!(hosts.len(), p);
        let port_of = PortMap::new(topo, &sched, &hosts);
        let nb = sched.blocks as usize;
        let mut values = vec![0u64; p * nb];
        let total: Vec<u64> =
            (0..nb).map(|b| (0..p).fold(0u64, |acc, r| acc.wrapping_add(mix(seed, r as u64, b as u64)))).collect();
        for r in 0..p {
            for b in 0..nb {
                values[r * nb + b] = match sched.collective {
                    Collective::Allreduce | Collective::ReduceScatter | Collective::Reduce { .. } => {
                        mix(seed, r as u64, b as u64)
                    }
                    Collective::Allgather => {
                        if sched.block_owner[b] as usize == r {
                            total[b]
                        } else {
                            0
                        }
                    }
                    Collective::Broadcast { root } => {
                        if root as usize == r {
                            total[b]
                        } else {
                            0
                        }
                    }
                    Collective::Alltoall => {
                        if sched.alltoall_pair(b as u32).0 as usize == r {
                            total[b]
                        } else {
                            0
                        }
                    }
                };
            }
        }
        CollectiveRun {
            hosts,
            bytes,
            elem_bytes: elem_bytes.max(1),
            tag,
            start,
            seed,
            pc: vec![0; p],
            outstanding: vec![0; p],
            values,
            sent_on: HashMap::new(),
            posted_on: HashMap::new(),
            waiting: HashMap::new(),
            early: HashMap::new(),
            inflight: HashMap::new(),
            done_at: vec![None; p],
            port_of,
            finished: 0,
            messages: 0,
            sched,
        }
    }

    pub fn is_done(&self) -> bool {
        self.finished == self.sched.ranks
    }

    /// (steps finished over all ranks, steps over all ranks): the collective's progress.
    pub fn steps(&self) -> (u64, u64) {
        let total: u64 = self.sched.programs.iter().map(|p| p.steps.len() as u64).sum();
        (self.pc.iter().map(|&s| s as u64).sum(), total)
    }

    /// When the collective starts.
    pub fn start_time(&self) -> SimTime {
        self.start
    }

    /// Ranks that have not finished, with the step each is at: (rank, step, steps).
    pub fn unfinished_ranks(&self) -> Vec<(u32, usize, usize)> {
        (0..self.sched.ranks)
            .filter(|&r| self.done_at[r as usize].is_none())
            .map(|r| (r, self.pc[r as usize], self.sched.programs[r as usize].steps.len()))
            .collect()
    }

    /// Host index of each rank.
    pub fn hosts(&self) -> &[u32] {
        &self.hosts
    }

    /// Starts every rank's first step.
    pub fn start(&mut self, net: &mut Network) {
        for r in 0..self.sched.ranks {
            self.start_step(net, r);
        }
    }

    fn start_step(&mut self, net: &mut Network, r: u32) {
        loop {
            let ri = r as usize;
            let Some(step) = self.sched.programs[ri].steps.get(self.pc[ri]).cloned() else {
                self.done_at[ri] = Some(net.now().max(self.start));
                self.finished += 1;
                return;
            };
            let nb = self.sched.blocks as usize;
            for t in &step.sends {
                let payload: Vec<u64> = t.blocks.iter().map(|b| self.values[ri * nb + b as usize]).collect();
                let ordinal = {
                    let c = self.sent_on.entry((r, t.peer)).or_insert(0);
                    *c += 1;
                    *c - 1
                };
                let vector = self.sched.collective.vector_bytes(self.bytes, self.sched.ranks);
                let bytes = self.sched.blocks_bytes(&t.blocks, vector, self.elem_bytes);
                let at = net.now().max(self.start);
                let port = self.port_of.map(r, t.peer, t.port);
                let id = net.send(self.hosts[ri], self.hosts[t.peer as usize], bytes, at, self.tag, port);
                self.inflight.insert(id.0, InFlight { from: r, to: t.peer, ordinal, payload });
                self.outstanding[ri] += 1;
                self.messages += 1;
            }
            for t in &step.recvs {
                let ordinal = {
                    let c = self.posted_on.entry((t.peer, r)).or_insert(0);
                    *c += 1;
                    *c - 1
                };
                let key = (t.peer, r, ordinal);
                let op = t.op.unwrap_or(RecvOp::Copy);
                if let Some(payload) = self.early.remove(&key) {
                    self.apply(r, &t.blocks, op, &payload);
                } else {
                    self.waiting.insert(key, (t.blocks.clone(), op));
                    self.outstanding[ri] += 1;
                }
            }
            if self.outstanding[ri] > 0 {
                return;
            }
            self.pc[ri] += 1; // a step with nothing pending completes at once
        }
    }

    fn apply(&mut self, r: u32, blocks: &Blocks, op: RecvOp, payload: &[u64]) {
        let nb = self.sched.blocks as usize;
        for (j, b) in blocks.iter().enumerate() {
            let v = &mut self.values[r as usize * nb + b as usize];
            *v = match op {
                RecvOp::Copy => payload[j],
                RecvOp::ReduceIncomingFirst | RecvOp::ReduceLocalFirst => v.wrapping_add(payload[j]),
            };
        }
    }

    fn step_op_done(&mut self, net: &mut Network, r: u32) {
        let ri = r as usize;
        self.outstanding[ri] -= 1;
        if self.outstanding[ri] == 0 {
            self.pc[ri] += 1;
            self.start_step(net, r);
        }
    }

    /// Handles the delivery of one of this collective's messages. Returns true if the
    /// message belonged to it.
    pub fn on_delivered(&mut self, net: &mut Network, msg: MsgId) -> bool {
        let Some(m) = self.inflight.remove(&msg.0) else { return false };
        let key = (m.from, m.to, m.ordinal);
        // The receiver: apply now if posted, else keep for later.
        if let Some((blocks, op)) = self.waiting.remove(&key) {
            self.apply(m.to, &blocks, op, &m.payload);
            self.step_op_done(net, m.to);
        } else {
            self.early.insert(key, m.payload);
        }
        // The sender: its send is complete.
        self.step_op_done(net, m.from);
        true
    }

    /// Checks every block every rank must hold against the sum over all ranks.
    pub fn result(&self) -> CollectiveResult {
        let p = self.sched.ranks as usize;
        let nb = self.sched.blocks as usize;
        let mut mismatch = None;
        let end = if self.is_done() { self.done_at.iter().filter_map(|t| *t).max() } else { None };
        if end.is_none() {
            let stuck = self.pc.iter().enumerate().filter(|(r, _)| self.done_at[*r].is_none()).count();
            mismatch = Some(format!("{stuck} ranks did not finish"));
        } else {
            'outer: for b in 0..nb {
                let want = (0..p).fold(0u64, |acc, r| acc.wrapping_add(mix(self.seed, r as u64, b as u64)));
                let holders: Vec<usize> = match self.sched.collective {
                    Collective::Allreduce | Collective::Allgather | Collective::Broadcast { .. } => (0..p).collect(),
                    Collective::ReduceScatter => vec![self.sched.block_owner[b] as usize],
                    Collective::Reduce { root } => vec![root as usize],
                    Collective::Alltoall => vec![self.sched.alltoall_pair(b as u32).1 as usize],
                };
                for r in holders {
                    if self.values[r * nb + b] != want {
                        mismatch = Some(format!(
                            "rank {r} block {b}: fingerprint {:016x}, expected {want:016x}",
                            self.values[r * nb + b]
                        ));
                        break 'outer;
                    }
                }
            }
        }
        CollectiveResult {
            algorithm: self.sched.algorithm.clone(),
            collective: self.sched.collective,
            ranks: self.sched.ranks,
            bytes: self.bytes,
            start: self.start,
            end,
            verified: mismatch.is_none(),
            mismatch,
            messages: self.messages,
        }
    }
}

/// Translates a schedule's torus-convention ports (`2i` = `+` in dimension `i`) to the
/// topology's NIC ports. They are used as they are on a torus when rank `r` runs on host
/// `r`; on HyperX the dimension selects the direct link to the peer; elsewhere (HammingMesh
/// included: its board-edge ports lead to row/column switches, not to the torus neighbour)
/// routing picks the port.
enum PortMap {
    AsIs,
    HyperX(Vec<u32>),
    Routing,
}

impl PortMap {
    fn new(topo: &Topology, sched: &Schedule, hosts: &[u32]) -> PortMap {
        let identity =
            hosts.iter().enumerate().all(|(r, &h)| r as u32 == h) && sched.ranks as usize == topo.hosts.len();
        let same_dims = |dims: &Vec<u32>| sched.torus.as_ref().is_none_or(|t| t == dims);
        match &topo.shape {
            Shape::Torus { dims } if identity && same_dims(dims) => PortMap::AsIs,
            Shape::HyperX { dims } if identity && same_dims(dims) => PortMap::HyperX(dims.clone()),
            _ => PortMap::Routing,
        }
    }

    fn map(&self, from: u32, to: u32, port: Option<u16>) -> Option<u16> {
        let port = port?;
        match self {
            PortMap::AsIs => Some(port),
            PortMap::HyperX(dims) => {
                let dim = (port / 2) as usize;
                let (a, b) = (coords_of(from, dims), coords_of(to, dims));
                (dim < dims.len() && a[dim] != b[dim]).then(|| hyperx_port(dims, dim, a[dim], b[dim]))
            }
            PortMap::Routing => None,
        }
    }
}

/// A collective running alone: the run stops when every rank has finished.
impl Workload for CollectiveRun {
    fn on_start(&mut self, net: &mut Network) {
        self.start(net);
        if self.is_done() {
            net.stop();
        }
    }
    fn on_delivered(&mut self, net: &mut Network, msg: MsgId) {
        let mine = CollectiveRun::on_delivered(self, net, msg);
        debug_assert!(mine, "message {msg:?} does not belong to this collective");
        if self.is_done() {
            net.stop();
        }
    }
}
