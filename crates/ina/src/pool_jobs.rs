//! Training jobs on the shared switch memory (SwitchML, ATP, DSA; seed 001, §VII-B): a
//! validated `training` entry ([`TrainingSpec`]), its layout on a fabric ([`TrainingLayout`]:
//! the switch that aggregates each job, its two-level tree, every worker's partitions and start
//! times), the switch programs ([`AnyPoolProgram`]), the parameter servers ([`Ps`]), the workers'
//! window parameters, their gradient packets and the check of a result.
//!
//! Both drivers take everything here and nothing else: the simulator's `training_run` runs it
//! on the packet engine, the software switch (`reducelab-switch`) over UDP, so a job is laid
//! out, seeded and verified the same way on both. Plain data and pure functions of the spec,
//! the fabric and the seed: no clock, no I/O.

use std::collections::VecDeque;

use reducelab_des::Rng;
use reducelab_transport::worker::{WindowControl, WorkerParams};

use crate::atp::AtpSwitch;
use crate::dsa::{DsaSwitch, REMINDER_AFTER_RETRANSMISSIONS};
use crate::fabric::Fabric;
use crate::policy::{self, PolicyInputs, Preemption};
use crate::pool::{self, full_bitmap, AggPacket, Dest, PacketKind, PoolLayout, PoolProgram, PsAction};
use crate::ps::{AtpPs, DsaPs, PsStats};
use crate::switchml::{even_regions, SwitchMlSwitch};
use crate::training::{self, DnnModel, Partition};
use crate::{Values, NIL};

/// Payload of a gradient packet: 62 four-byte values (ATP's `MAX_ENTRIES_PER_PACKET`).
pub const ELEMS_PER_PACKET: u16 = 62;
/// A data packet on the wire (§VII-B: "the same packet size (306Byte) as ... ATP").
pub const PACKET_BYTES: u32 = 306;
/// Headers of a packet: 306 B less 248 B of values.
pub const HEADER_BYTES: u32 = PACKET_BYTES - ELEMS_PER_PACKET as u32 * 4;
/// A control packet (reminder, fetch, notice): a minimum Ethernet frame.
pub const CONTROL_BYTES: u32 = 64;
/// The AIMD window's ceiling, in initial windows.
pub const MAX_WINDOW_FACTOR: u64 = 16;

/// Which program the switches run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PoolProtocol {
    SwitchMl,
    Atp,
    Dsa(Preemption),
}

impl PoolProtocol {
    pub fn uses_ps(&self) -> bool {
        !matches!(self, PoolProtocol::SwitchMl)
    }
    /// Whether its parameter server fetches a PSN's original gradients from every worker (DSA's
    /// reminder, §IV-B): then a worker that has every result must go on answering.
    pub fn fetches_from_workers(&self) -> bool {
        matches!(self, PoolProtocol::Dsa(_))
    }
    /// Its name in the pool registry ([`crate::pool::POOL_PROTOCOLS`]); DSA's strawmen are
    /// `dsa` too (their rule is [`Self::label`]'s suffix).
    pub fn name(&self) -> &'static str {
        match self {
            PoolProtocol::SwitchMl => "switchml",
            PoolProtocol::Atp => "atp",
            PoolProtocol::Dsa(_) => "dsa",
        }
    }
    pub fn label(&self) -> String {
        match self {
            PoolProtocol::SwitchMl => "switchml".into(),
            PoolProtocol::Atp => "atp".into(),
            PoolProtocol::Dsa(Preemption::Priority) => "dsa".into(),
            PoolProtocol::Dsa(Preemption::Always) => "dsa:always".into(),
            PoolProtocol::Dsa(Preemption::Coin { .. }) => "dsa:coin".into(),
        }
    }
}

/// One job of a `training` traffic entry.
#[derive(Clone, Debug)]
pub struct JobSpec {
    pub model: DnnModel,
    pub workers: Vec<u32>,
    pub ps: Option<u32>,
}

/// A validated `training` traffic entry.
#[derive(Clone, Debug)]
pub struct TrainingSpec {
    pub protocol: PoolProtocol,
    pub jobs: Vec<JobSpec>,
    pub memory_bytes: u64,
    pub values: bool,
    pub start_max_ps: u64,
    pub jitter_max_ps: u64,
    pub window_bytes: u64,
    pub min_rto_ps: u64,
    pub ps_restart_ps: Option<u64>,
    /// `aggregation = "tree"`: every switch of a job's two-level tree aggregates.
    pub tree: bool,
}

impl TrainingSpec {
    /// Aggregators per switch.
    pub fn aggregators(&self) -> Result<u32, String> {
        PoolLayout { memory_bytes: self.memory_bytes, aggregator_bytes: PACKET_BYTES as u64 }
            .aggregators()
            .map_err(|r| r.replace("memory_bytes", "switch_memory_bytes"))
    }
}

/// A switch's program of one of the pool protocols, by value (the simulator's driver reaches
/// into DSA's pool for its §IV-C task types; the software switch runs it boxed).
pub enum AnyPoolProgram {
    SwitchMl(SwitchMlSwitch),
    Atp(AtpSwitch),
    Dsa(DsaSwitch),
}

impl AnyPoolProgram {
    pub fn get(&mut self) -> &mut dyn PoolProgram {
        match self {
            AnyPoolProgram::SwitchMl(p) => p,
            AnyPoolProgram::Atp(p) => p,
            AnyPoolProgram::Dsa(p) => p,
        }
    }
    pub fn view(&self) -> &dyn PoolProgram {
        match self {
            AnyPoolProgram::SwitchMl(p) => p,
            AnyPoolProgram::Atp(p) => p,
            AnyPoolProgram::Dsa(p) => p,
        }
    }
}

/// agents take theirs from [`TrainingWorld::take_ps`].
pub enum Ps {
    Atp(AtpPs),
    Dsa(DsaPs),
}

impl Ps {
    pub fn on_packet(&mut self, now: u64, p: AggPacket, vals: &mut Values, out: &mut Vec<PsAction>) {
        match self {
            Ps::Atp(ps) => ps.on_packet(now, p, vals, out),
            Ps::Dsa(ps) => ps.on_packet(now, p, vals, out),
        }
    }
    /// ATP has no timers.
    pub fn on_timer(&mut self, now: u64, token: u64, out: &mut Vec<PsAction>) {
        if let Ps::Dsa(ps) = self {
            ps.on_timer(now, token, out);
        }
    }
    pub fn stats(&self) -> &PsStats {
        match self {
            Ps::Atp(ps) => &ps.dict.stats,
            Ps::Dsa(ps) => &ps.dict.stats,
        }
    }
    /// `ps_restart_us`: the partial aggregates are lost, the completed results kept.
    pub fn restart(&mut self, vals: &mut Values) {
        match self {
            Ps::Atp(ps) => ps.dict.restart(vals),
            Ps::Dsa(ps) => ps.dict.restart(vals),
        }
    }
    /// The job is over ([`PsDictionary::clear`](crate::ps::PsDictionary::clear)).
    pub fn clear(&mut self, vals: &mut Values) {
        match self {
            Ps::Atp(ps) => ps.dict.clear(vals),
            Ps::Dsa(ps) => ps.dict.clear(vals),
        }
    }
    /// PSNs with a partial aggregate here (what a restart loses).
    pub fn pending(&self) -> usize {
        match self {
            Ps::Atp(ps) => ps.dict.pending().count(),
            Ps::Dsa(ps) => ps.dict.pending().count(),
        }
    }
}

/// A job's two-level aggregation tree (`aggregation = "tree"`): its workers' leaf switches
/// aggregate their local workers (a leaf program sees a job of `members[c].len()` workers,
/// local ranks in rank order) and send one partial per PSN up to the root (`Job::switch`), whose
/// program sees a job of one worker per leaf (child `c`, bit `c`).
///
/// Its methods are the sans-I/O part of the tree: what a leaf's program is given
/// ([`Tree::leaf_input`]) and where a program's packet goes ([`Tree::route`]). The node logic
/// ([`crate::pool_node`]), which the simulator and the software switch both run, calls them.
#[derive(Clone, Debug)]
pub struct Tree {
    /// Per child: its leaf switch and the job ranks under it (ascending).
    pub leaves: Vec<u32>,
    pub members: Vec<Vec<u16>>,
    /// Per rank: its child and its local rank there.
    pub child_of: Vec<u16>,
    pub local: Vec<u16>,
}

/// Where a tree node sends a packet its program made ([`Tree::route`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TreeRoute {
    /// A leaf's result, up to the root as its child's one contribution (a gradient of the
    /// root's job of one worker per leaf).
    Up(AggPacket),
    /// The result, with the job's full bitmap, to the workers `ranks` of the job (one copy each).
    Ranks(AggPacket, Vec<u16>),
    /// ATP: the PS's ACK at the root, one copy down to each leaf (addressed to it: it frees
    /// the leaf's aggregator there and goes on to the leaf's workers).
    Leaves(AggPacket),
    /// Not a tree matter: as without a tree (a packet for the PS already in the job's ranks).
    Plain(AggPacket),
}

impl Tree {
    /// Where `node` stands in the tree of a job whose root is `root`: `Some(None)` its root,
    /// `Some(Some(c))` the leaf of child `c`, `None` neither.
    pub fn place(&self, root: u32, node: u32) -> Option<Option<u16>> {
        if node == root {
            return Some(None);
        }
        self.leaves.iter().position(|&l| l == node).map(|c| Some(c as u16))
    }

    /// The packet child `c`'s leaf program is given for `p`: a worker's gradient as local rank
    /// `local[rank]` of a job of the leaf's workers (`None`: not one of this leaf's workers, a
    /// malformed bitmap), the PS's ACK (ATP) with the leaf's full bitmap, a reminder (DSA) with
    /// none.
    pub fn leaf_input(&self, c: u16, p: AggPacket) -> Option<AggPacket> {
        let k = self.members[c as usize].len() as u16;
        if p.kind == PacketKind::Gradient {
            let rank = p.rank() as usize;
            if p.bitmap.count_ones() != 1 || rank >= self.child_of.len() || self.child_of[rank] != c {
                return None;
            }
            Some(AggPacket { workers: k, bitmap: 1u64 << self.local[rank], ..p })
        } else if p.kind == PacketKind::Ack {
            Some(AggPacket { workers: k, bitmap: full_bitmap(k), ..p })
        } else {
            Some(AggPacket { workers: k, bitmap: 0, ..p })
        }
    }

    /// A packet a program at `place` made from its aggregators (a partial aggregate or a
    /// fallback to the PS), with its bitmap in the job's ranks (`n` workers): at a leaf, local
    /// rank `b` is the child's `b`-th worker; at the root, child `c` stands for all of its
    /// workers.
    pub fn to_job_ranks(&self, place: Option<Option<u16>>, n: u16, x: AggPacket) -> AggPacket {
        let Some(place) = place else { return x };
        let mut bits = 0u64;
        match place {
            None => {
                for (c, m) in self.members.iter().enumerate() {
                    if x.bitmap >> c & 1 == 1 {
                        bits |= m.iter().fold(0u64, |b, &r| b | 1u64 << r);
                    }
                }
            }
            Some(c) => {
                for (b, &r) in self.members[c as usize].iter().enumerate() {
                    if x.bitmap >> b & 1 == 1 {
                        bits |= 1u64 << r;
                    }
                }
            }
        }
        AggPacket { workers: n, bitmap: bits, ..x }
    }

    /// Where packet `x` a program at `place` made goes, in a job of `n` workers (`atp`: the
    /// protocol is ATP; `arriving`: the packet a leaf program was given, for its priority):
    /// - a leaf's result (its partial, on completion or to a retransmission after it) goes up
    ///   to the root as child `c`'s contribution (bit `c`);
    /// - the root's result (or the PS's, passing) goes to every worker with the job's full
    ///   bitmap, or to the workers of child `c` alone when the root answers that child's
    ///   retransmission after completion; ATP's (the PS's ACK) to every leaf instead;
    /// - a leaf's copy of ATP's ACK, to the leaf's workers;
    /// - anything for the PS (DSA: a fallback, an evicted or fetched partial) leaves with its
    ///   bitmap in the job's ranks ([`Tree::to_job_ranks`]), so the PS's dictionary, which
    ///   merges only disjoint bitmaps, never counts a contribution twice;
    /// - the rest as without a tree.
    pub fn route(
        &self,
        place: Option<Option<u16>>,
        atp: bool,
        n: u16,
        x: AggPacket,
        arriving: Option<AggPacket>,
    ) -> TreeRoute {
        // ATP's leaf completes by sending its aggregate "to the PS" (a full local bitmap; a
        // resend's clear sends a partial one): on a tree it goes up instead.
        let leaf_result = match (x.kind, place.flatten()) {
            (PacketKind::Ack, Some(_)) => !atp,
            (PacketKind::Partial, Some(_)) => atp && x.dst == Dest::Ps && x.bitmap == full_bitmap(x.workers),
            _ => false,
        };
        if !(leaf_result || (x.kind == PacketKind::Ack && place.is_some())) {
            return TreeRoute::Plain(if x.dst == Dest::Ps { self.to_job_ranks(place, n, x) } else { x });
        }
        let result = AggPacket { workers: n, bitmap: full_bitmap(n), dst: Dest::Workers, ..x };
        match (place.flatten(), leaf_result) {
            (Some(c), true) => {
                let priority = arriving.filter(|q| q.task() == x.task()).map_or(x.priority, |q| q.priority);
                TreeRoute::Up(AggPacket {
                    kind: PacketKind::Gradient,
                    dst: Dest::Switch,
                    workers: self.leaves.len() as u16,
                    bitmap: 1u64 << c,
                    resend: false,
                    priority,
                    ..x
                })
            }
            (Some(c), false) => TreeRoute::Ranks(result, self.members[c as usize].clone()),
            (None, _) if atp => TreeRoute::Leaves(result),
            (None, _) => {
                let ranks: Vec<u16> = match x.dst {
                    Dest::Worker(c) => self.members.get(c as usize).cloned().unwrap_or_default(),
                    _ => (0..n).collect(),
                };
                TreeRoute::Ranks(result, ranks)
            }
        }
    }
}

/// The encoded priority of a tensor of `layer` (Eq. 1). "A tensor's priority": it is computed
/// once per tensor partition, when its layer's gradients are computed, with `T_j` the epoch's
/// remaining time then (its estimate less the job's computation up to that layer), so every
/// worker gives the same tensor the same priority whatever its jitter, and the packets of one
/// task never preempt each other.
pub fn tensor_priority(m: &DnnModel, layer: u32, link_bps: u64) -> u32 {
    let floor = PACKET_BYTES as u64 * 8 * 1_000_000_000_000 / link_bps;
    let remaining_ps = m.epoch_estimate_ps(link_bps).saturating_sub(m.layer_done_ps(layer)).max(floor);
    let inputs = PolicyInputs { remaining_ps, layers: m.layers, comm_ps: m.comm_ps(link_bps), comp_ps: m.comp_ps() };
    policy::encode(policy::priority(&inputs, layer).unwrap_or(0.0))
}

/// Worker `rank`'s packet for the window's `s` (job `j` of `n` workers): its gradient, to the
/// switch or (a fetched copy) to the PS, with ATP's resend flag and DSA's tensor priority.
#[allow(clippy::too_many_arguments)]
pub fn gradient_packet(
    protocol: PoolProtocol,
    salt: u64,
    j: u16,
    rank: u16,
    n: u16,
    s: reducelab_transport::worker::Send,
    plan: &[Partition],
    model: &DnnModel,
    link_bps: u64,
    vals: &mut Values,
) -> AggPacket {
    let dst = if s.to_ps { Dest::Ps } else { Dest::Switch };
    let mut p = pool::gradient(salt, j, rank, s.psn, n, ELEMS_PER_PACKET, dst, vals);
    match protocol {
        PoolProtocol::Atp => p.resend = s.retransmission && !s.to_ps,
        PoolProtocol::Dsa(_) => {
            let layer = training::partition_of(plan, s.psn).map_or(1, |x| x.layer);
            p.priority = tensor_priority(model, layer, link_bps);
        }
        PoolProtocol::SwitchMl => {}
    }
    p
}

/// Whether a result carries every worker's contribution exactly once (bitmap, fingerprint and,
/// with values, every element against the exact sum).
pub fn check_result(p: &AggPacket, salt: u64, vals: &Values) -> bool {
    let n = p.workers;
    if p.bitmap != pool::full_bitmap(n) {
        return false;
    }
    let fp = (0..n as u32).fold(0u64, |a, r| a.wrapping_add(crate::contribution_fp(salt, p.job, r, p.psn)));
    if fp != p.fp {
        return false;
    }
    if vals.enabled() && p.data != NIL {
        let got = vals.get(p.data);
        for e in 0..p.elems as u32 {
            let want =
                (0..n as u32).fold(0i32, |a, r| a.wrapping_add(crate::contribution_value(salt, p.job, r, p.psn, e)));
            if got[e as usize] != want {
                return false;
            }
        }
    } else if vals.enabled() {
        return false;
    }
    true
}

/// Job `j`'s two-level tree under `root`: each worker's leaf is the switch its host attaches
/// to. `None` when every worker attaches to `root` (one switch aggregates, as without a tree).
/// Errors (field `aggregation`) for what two levels cannot express: a worker attached to the
/// root beside workers under leaves, or a leaf that is not a neighbour of the root.
fn two_level_tree(f: &Fabric, j: usize, workers: &[u32], root: u32) -> Result<Option<Tree>, String> {
    let leaf_of: Vec<u32> = workers.iter().map(|&h| f.first_hop(h)).collect();
    if leaf_of.iter().all(|&l| l == root) {
        return Ok(None);
    }
    let mut t = Tree { leaves: Vec::new(), members: Vec::new(), child_of: Vec::new(), local: Vec::new() };
    for (r, (&h, &leaf)) in workers.iter().zip(&leaf_of).enumerate() {
        if leaf == root {
            return Err(format!(
                "aggregation: \"tree\" takes two levels (workers under leaf switches, one root), but job {j}'s worker host {h} is attached to its root switch (node {root}) while others are not"
            ));
        }
        if !f.nodes[leaf as usize].ports.iter().any(|&(peer, _)| peer == root) {
            return Err(format!(
                "aggregation: \"tree\" takes two levels, but the leaf switch (node {leaf}) of job {j}'s worker host {h} is not a neighbour of the job's root switch (node {root})"
            ));
        }
        let c = match t.leaves.iter().position(|&l| l == leaf) {
            Some(c) => c,
            None => {
                t.leaves.push(leaf);
                t.members.push(Vec::new());
                t.leaves.len() - 1
            }
        };
        t.child_of.push(c as u16);
        t.local.push(t.members[c].len() as u16);
        t.members[c].push(r as u16);
    }
    if t.leaves.len() > 64 {
        return Err(format!(
            "aggregation: job {j} spans {} leaf switches; the root's bitmap has 64 bits",
            t.leaves.len()
        ));
    }
    Ok(Some(t))
}

/// The switch whose largest hop distance to `hosts` is smallest (lowest id on ties).
fn nearest_switch(f: &Fabric, hosts: &[u32]) -> Option<u32> {
    let n = f.nodes.len();
    let mut worst = vec![0u32; n];
    for &h in hosts {
        let src = f.host_nodes[h as usize] as usize;
        let mut dist = vec![u32::MAX; n];
        dist[src] = 0;
        let mut q = VecDeque::from([src]);
        while let Some(x) = q.pop_front() {
            if x != src && f.nodes[x].is_host {
                continue;
            }
            for &(peer, _) in &f.nodes[x].ports {
                let peer = peer as usize;
                if dist[peer] == u32::MAX {
                    dist[peer] = dist[x] + 1;
                    q.push_back(peer);
                }
            }
        }
        for i in 0..n {
            worst[i] = worst[i].max(dist[i]);
        }
    }
    (0..n).filter(|&i| !f.nodes[i].is_host && worst[i] != u32::MAX).min_by_key(|&i| (worst[i], i)).map(|i| i as u32)
}

/// Each job's start time, drawn from `U(0, start_max_ps)`, and its workers' epoch plans (the
/// partitions in send order with their ready times, each delayed by a jitter from
/// `U(0, jitter_max_ps)`), for jobs given as (model, workers), all drawn from `seed` in job
/// order: what a training entry's jobs do whichever protocol aggregates them. Payloads are
/// [`ELEMS_PER_PACKET`] values per packet.
pub fn epoch_plans(
    jobs: impl Iterator<Item = (DnnModel, usize)>,
    start_max_ps: u64,
    jitter_max_ps: u64,
    seed: u64,
) -> Vec<(u64, Vec<Vec<Partition>>)> {
    let mut rng = Rng::new(seed).fork(0xD5A);
    let payload = ELEMS_PER_PACKET as u32 * 4;
    jobs.map(|(model, workers)| {
        let start_ps = if start_max_ps == 0 { 0 } else { rng.below(start_max_ps + 1) };
        let parts = model.send_order().len();
        let plans = (0..workers)
            .map(|_| {
                let jit: Vec<u64> =
                    (0..parts).map(|_| if jitter_max_ps == 0 { 0 } else { rng.below(jitter_max_ps + 1) }).collect();
                model.plan(payload, start_ps, &jit)
            })
            .collect();
        (start_ps, plans)
    })
    .collect()
}

/// Rank of a job's parameter server in [`TrainingLayout::role`].
pub const PS_RANK: u16 = u16::MAX;

/// One job laid out on the fabric.
#[derive(Clone, Debug)]
pub struct JobLayout {
    /// The switch that completes the job's aggregates: the only one, or the tree's root (the
    /// switch nearest to all of the job's hosts: the largest hop distance smallest, lowest node
    /// id on ties).
    pub switch: u32,
    /// `aggregation = "tree"`: the job's two-level tree (`None` without one, or when every
    /// worker is under the root).
    pub tree: Option<Tree>,
    /// The job's start time, drawn from `U(0, start_max)`.
    pub start_ps: u64,
    /// Per rank: the partitions (PSN ranges, ready times from time 0, with the job's start and
    /// the worker's jitter per partition drawn from the seed).
    pub plans: Vec<Vec<Partition>>,
    /// PSNs of the epoch per worker.
    pub psns: u32,
}

impl JobLayout {
    /// The switches that run the job's program: its root (or only switch) and its leaves.
    pub fn switches(&self) -> impl Iterator<Item = u32> + '_ {
        std::iter::once(self.switch).chain(self.tree.iter().flat_map(|t| t.leaves.iter().copied()))
    }
}

/// A training entry laid out on a fabric: what every driver derives from the spec and the seed.
#[derive(Clone, Debug)]
pub struct TrainingLayout {
    /// Aggregators per switch.
    pub aggregators: u32,
    pub jobs: Vec<JobLayout>,
    /// Per node: the (job, workers) its program aggregates (empty: no program there).
    pub switch_jobs: Vec<Vec<(u16, u16)>>,
    /// Per host: (job, rank) of the worker there, or (job, [`PS_RANK`]).
    pub role: Vec<Option<(u16, u16)>>,
}

impl TrainingSpec {
    /// Lays the jobs out on `fabric` and draws their start times and jitters from `seed`.
    /// Errors start with the field they are about. Builds no switch program and no parameter
    /// server: this is also the scenario's validation.
    pub fn layout(&self, fabric: &Fabric, seed: u64) -> Result<TrainingLayout, String> {
        if self.jobs.len() > u16::MAX as usize - 1 {
            return Err("jobs: too many".into());
        }
        let aggregators = self.aggregators()?;
        let n_hosts = fabric.num_hosts();
        let mut role = vec![None; n_hosts];
        let mut epochs = epoch_plans(
            self.jobs.iter().map(|js| (js.model, js.workers.len())),
            self.start_max_ps,
            self.jitter_max_ps,
            seed,
        )
        .into_iter();
        let mut jobs = Vec::new();
        let mut switch_jobs: Vec<Vec<(u16, u16)>> = vec![Vec::new(); fabric.nodes.len()];
        for (j, js) in self.jobs.iter().enumerate() {
            let mut hosts = js.workers.clone();
            hosts.extend(js.ps);
            for (r, &h) in hosts.iter().enumerate() {
                if h as usize >= n_hosts {
                    return Err(format!("jobs: host {h} of job {j} is not in the topology ({n_hosts} hosts)"));
                }
                if role[h as usize].is_some() {
                    return Err(format!("jobs: host {h} has two roles (jobs do not share servers)"));
                }
                role[h as usize] = Some((j as u16, if r < js.workers.len() { r as u16 } else { PS_RANK }));
            }
            let switch = nearest_switch(fabric, &hosts)
                .ok_or_else(|| format!("topology: no switch reaches every host of job {j}"))?;
            let tree = if self.tree { two_level_tree(fabric, j, &js.workers, switch)? } else { None };
            match &tree {
                None => switch_jobs[switch as usize].push((j as u16, js.workers.len() as u16)),
                Some(t) => {
                    switch_jobs[switch as usize].push((j as u16, t.leaves.len() as u16));
                    for (c, &leaf) in t.leaves.iter().enumerate() {
                        switch_jobs[leaf as usize].push((j as u16, t.members[c].len() as u16));
                    }
                }
            }
            let (start_ps, plans) = epochs.next().expect("one epoch per job");
            let parts = js.model.send_order().len();
            let psns = js.model.packets_per_partition(ELEMS_PER_PACKET as u32 * 4) * parts as u32;
            self.parameter_server(j as u16)?;
            jobs.push(JobLayout { switch, tree, start_ps, plans, psns });
        }
        if self.protocol == PoolProtocol::SwitchMl {
            // The only program that can refuse its jobs: SwitchML's regions must fit.
            for js in switch_jobs.iter().filter(|js| !js.is_empty()) {
                even_regions(aggregators, js).map_err(|r| format!("switch_memory_bytes: {r}"))?;
            }
        }
        Ok(TrainingLayout { aggregators, jobs, switch_jobs, role })
    }

    /// Job `j`'s parameter server, new (`None`: SwitchML has none). Errors name the field.
    pub fn parameter_server(&self, j: u16) -> Result<Option<Ps>, String> {
        let js = &self.jobs[j as usize];
        let ps = match (self.protocol, js.ps) {
            (PoolProtocol::SwitchMl, _) | (_, None) => None,
            (PoolProtocol::Atp, Some(_)) => {
                Some(Ps::Atp(AtpPs::new(j, js.workers.len() as u16).map_err(|r| format!("workers: {r}"))?))
            }
            (PoolProtocol::Dsa(_), Some(_)) => Some(Ps::Dsa(
                DsaPs::new(j, js.workers.len() as u16, self.min_rto_ps.max(1)).map_err(|r| format!("workers: {r}"))?,
            )),
        };
        if self.protocol.uses_ps() && ps.is_none() {
            return Err(format!("jobs: job {j} needs a parameter server host"));
        }
        Ok(ps)
    }

    /// A switch's program, new: `aggregators` aggregators for `js`, the (job, workers) it
    /// aggregates ([`TrainingLayout::switch_jobs`] of its node; `None` for none). Errors name
    /// the field.
    pub fn switch_program(
        &self,
        aggregators: u32,
        js: &[(u16, u16)],
        seed: u64,
    ) -> Result<Option<AnyPoolProgram>, String> {
        if js.is_empty() {
            return Ok(None);
        }
        Ok(Some(match self.protocol {
            PoolProtocol::SwitchMl => {
                let regions = even_regions(aggregators, js).map_err(|r| format!("switch_memory_bytes: {r}"))?;
                AnyPoolProgram::SwitchMl(SwitchMlSwitch::new(aggregators, &regions)?)
            }
            PoolProtocol::Atp => AnyPoolProgram::Atp(AtpSwitch::new(aggregators)?),
            PoolProtocol::Dsa(Preemption::Coin { .. }) => {
                AnyPoolProgram::Dsa(DsaSwitch::new(aggregators, Preemption::Coin { seed: seed ^ 0xC014 })?)
            }
            PoolProtocol::Dsa(rule) => AnyPoolProgram::Dsa(DsaSwitch::new(aggregators, rule)?),
        }))
    }

    /// The window parameters of job `j`'s workers (SwitchML: the smallest region of its switches).
    pub fn worker_params(&self, layout: &TrainingLayout, j: u16) -> WorkerParams {
        let job = &layout.jobs[j as usize];
        let control = match self.protocol {
            PoolProtocol::SwitchMl => {
                // Every switch of the job's tree serves PSN p in slot p mod its region's size:
                // the smallest region is the window.
                let slots = job
                    .switches()
                    .map(|node| {
                        even_regions(layout.aggregators, &layout.switch_jobs[node as usize])
                            .ok()
                            .and_then(|rs| rs.into_iter().find(|r| r.job == j))
                            .map_or(1, |r| r.slots)
                    })
                    .min()
                    .unwrap_or(1);
                WindowControl::Slots { slots }
            }
            _ => WindowControl::Aimd {
                initial_bytes: self.window_bytes,
                max_bytes: self.window_bytes * MAX_WINDOW_FACTOR,
            },
        };
        WorkerParams {
            packet_bytes: PACKET_BYTES,
            control,
            initial_rto_ps: self.min_rto_ps,
            min_rto_ps: self.min_rto_ps,
            reminder_after: matches!(self.protocol, PoolProtocol::Dsa(_)).then_some(REMINDER_AFTER_RETRANSMISSIONS),
            resend_on_gap: self.protocol == PoolProtocol::Atp,
        }
    }
}

impl AnyPoolProgram {
    /// The program as a trait object (the software switch runs it).
    pub fn boxed(self) -> Box<dyn PoolProgram> {
        match self {
            AnyPoolProgram::SwitchMl(p) => Box::new(p),
            AnyPoolProgram::Atp(p) => Box::new(p),
            AnyPoolProgram::Dsa(p) => Box::new(p),
        }
    }
}
