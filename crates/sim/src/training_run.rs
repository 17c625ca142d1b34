//! Drives the shared-switch-memory protocols of `reducelab-ina` (SwitchML, ATP, DSA: the
//! `pool`, `switchml`, `atp`, `dsa`, `ps` modules) with the training jobs of DSA's evaluation
//! (seed 001, §VII-B) on the packet engine: `[[traffic]] kind = "training"`.
//!
//! - **Jobs.** Job `j` has `workers` hosts and, for ATP and DSA, one parameter server host. Its
//!   DNN ([`reducelab_ina::training`]) is one epoch: each worker's gradients are one stream of
//!   PSNs (partitions in the seed's backward order), released as each layer is computed
//!   (start `t ~ U(0, start_max)` per job, jitter `U(0, jitter_max)` per worker and partition).
//!   The job completes (its JCT) when every worker holds the aggregate of every PSN.
//! - **Workers** use [`reducelab_transport::worker::WorkerWindow`]: SwitchML one packet per slot
//!   of its region; ATP and DSA AIMD from a 60 KB window on ECN echoes, per-packet timeouts
//!   (EWMA, 1 ms floor), ATP's resend flag, DSA's reminder notices after 3 retransmissions.
//! - **Switches.** Each job aggregates on one switch: the switch nearest to all its hosts
//!   (the largest hop distance to them smallest, lowest node id on ties; on a star, the
//!   switch). Every such switch runs the protocol's program over its own pool
//!   (`[ina] switch_memory_bytes / 306 B` aggregators, SwitchML's split evenly among its jobs);
//!   packets of other switches' jobs pass through. With `aggregation = "tree"` every switch
//!   of a job's two-level tree runs the program (leaves for their workers, the root for one
//!   contribution per leaf; docs/ina.md). A `Workers` packet is multicast by the job's
//!   switch: one copy per worker, routed. What a switch does with a packet is
//!   [`reducelab_ina::pool_node`]'s, which the software switch runs too; this driver carries
//!   out its outputs on the engine.
//! - **ECN.** Switch queues mark packets above `network.ecn_threshold_bytes`. A worker reads a
//!   mark on the ACK it receives; a parameter server that receives a marked packet echoes the
//!   mark on its next ACK (ATP's PS does; DSA follows ATP's congestion control, §III-D).
//! - **Teardown.** When a job ends, its switch frees whatever aggregators the job still holds
//!   (SwitchML's region with its shadow copies; ATP/DSA leftovers of late retransmissions, the
//!   "memory leak" of §IV-A that DSA otherwise leaves to priority downgrading): counted as
//!   `aggregators_released_at_end`.
//! - **PS restart** (`ps_restart_us`): every parameter server loses its partial aggregates at
//!   that time and keeps its completed results (it is the parameter server: they are the
//!   model). The workers' timeouts (ATP resends, DSA reminders) rebuild the lost PSNs.
//! - **Verification.** A worker checks the first ACK of every PSN: full bitmap, the
//!   fingerprint sum of every worker's contribution and, with `values`, every element.
//!
//! Deterministic: every draw comes from the scenario's seed; timers and packets go through the
//! engine's total-order event queue.

use reducelab_ina::dsa_tasks::{TaskTypeCounts, TaskTypes};
use reducelab_ina::pool::{AggPacket, Dest, PacketKind, PoolStats, PsAction};
use reducelab_ina::pool_jobs::{
    check_result, gradient_packet, AnyPoolProgram, JobLayout, JobSpec, PoolProtocol, Ps, TrainingLayout, TrainingSpec,
    CONTROL_BYTES, ELEMS_PER_PACKET, HEADER_BYTES, PACKET_BYTES, PS_RANK,
};
use reducelab_ina::pool_node::{Arrival, JobRoute, NodeDst, NodeOut, PoolNodes};
use reducelab_ina::ps::PsStats;
use reducelab_ina::training::{self, Partition};
use reducelab_ina::Values;
use reducelab_net::{AppDst, AppOut, AppPacket, Network, PacketId, APP_QUEUE_LOW};
use reducelab_topo::Topology;
use reducelab_transport::worker::{WorkerParams, WorkerStats, WorkerWindow};
use serde::Serialize;

use crate::slab::Slab;

pub use reducelab_scenario::training::{layout, resolve};

/// Aggregator occupancy is sampled this often.
pub const SAMPLE_PS: u64 = 10_000_000;

#[derive(Clone, Copy)]
enum Target {
    JobStart(u16),
    Ready { job: u16, rank: u16 },
    Rto { job: u16, rank: u16 },
    Ps { job: u16, token: u64 },
    PsRestart,
    Sample,
}

struct Worker {
    host: u32,
    plan: Vec<Partition>,
    win: Option<WorkerWindow>,
    rto_armed: Option<u64>,
    first_send_ps: Option<u64>,
    done_ps: Option<u64>,
    bad: u64,
}

struct Job {
    spec: JobSpec,
    /// Where the job aggregates and when it starts (its plans moved to its workers).
    layout: JobLayout,
    /// Its workers' window parameters ([`TrainingSpec::worker_params`]).
    params: WorkerParams,
    workers: Vec<Worker>,
    ps: Option<Ps>,
    /// A packet that reached the PS was ECN-marked: its next ACK echoes it.
    ps_mark: bool,
    done_ps: Option<u64>,
    released: u32,
}

/// Per-job result.
#[derive(Clone, Debug, Serialize)]
pub struct JobResult {
    pub job: u16,
    pub model: &'static str,
    pub workers: usize,
    pub ps_host: Option<u32>,
    pub switch_node: u32,
    /// With `aggregation = "tree"`: the leaf switches below `switch_node` (none when every
    /// worker of the job is under one switch).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub leaf_switches: Vec<u32>,
    pub start_ps: u64,
    /// Job completion time: one epoch, from the job's start to the last worker's last result.
    pub jct_ps: Option<u64>,
    /// Epoch payload per worker over the communication span (first gradient sent to last
    /// result), as a fraction of the host link capacity.
    pub aggregation_utilization: Option<f64>,
    pub psns: u32,
    pub workers_finished: usize,
    pub bad_results: u64,
    pub verified: bool,
    pub aggregators_released_at_end: u32,
}

/// Totals of a training run (summary.json `training`).
#[derive(Clone, Debug, Serialize)]
pub struct TrainingTotals {
    pub protocol: String,
    pub jobs: usize,
    pub aggregators_per_switch: u32,
    pub mean_jct_ps: Option<f64>,
    pub max_jct_ps: Option<u64>,
    /// Mean over jobs of [`JobResult::aggregation_utilization`] (the seed's Fig. 10 metric).
    pub memory_utilization: Option<f64>,
    /// Time-weighted mean and peak aggregators in use on the busiest switch.
    pub mean_aggregators_in_use: f64,
    pub peak_aggregators_in_use: u32,
    pub aggregators_left: u64,
    pub aggregators_released_at_end: u64,
    pub switch: PoolStats,
    pub ps: PsStats,
    /// The workers' counters, summed.
    pub workers: WorkerStats,
    /// Bytes by where they went: worker NICs out, into parameter servers, results to workers.
    pub worker_bytes_sent: u64,
    pub ps_bytes_received: u64,
    pub ps_bytes_sent: u64,
    pub result_bytes_delivered: u64,
    pub lost_packets: u64,
    /// DSA only: aggregation tasks and lost packets by §IV-C task type (type I: no
    /// preemption; II: won one; III: lost one), [`reducelab_ina::dsa_tasks`].
    #[serde(skip_serializing_if = "Option::is_none")]
    pub task_types: Option<TaskTypeCounts>,
    pub ps_restarts: u32,
    pub values_checked: bool,
    pub values_slots_left: u32,
}

pub struct TrainingWorld {
    pub spec: TrainingSpec,
    jobs: Vec<Job>,
    programs: Vec<Option<AnyPoolProgram>>,
    aggregators: u32,
    arena: Slab<(AggPacket, bool)>,
    vals: Values,
    timers: Slab<(Target, u64)>,
    /// The switch nodes' logic (what a program takes, where its packets go).
    nodes: PoolNodes,
    nbuf: Vec<NodeOut>,
    psbuf: Vec<PsAction>,
    salt: u64,
    link_bps: u64,
    /// Packets per second a switch program processes: the busiest switch's line rate.
    program_pps: f64,
    /// Per host: (job, rank) of the worker there, or (job, PS_RANK).
    role: Vec<Option<(u16, u16)>>,
    left: usize,
    pub lost_packets: u64,
    /// DSA's §IV-C task types (preemption contests and losses per task).
    task_types: TaskTypes,
    restarts: u32,
    worker_bytes_sent: u64,
    ps_bytes_received: u64,
    ps_bytes_sent: u64,
    result_bytes: u64,
    /// (time ps, aggregators in use on the busiest switch, over all switches).
    pub occupancy: Vec<(u64, u32, u64)>,
}

impl TrainingWorld {
    /// Builds the world; errors start with the field they are about.
    /// The world of `spec`, laid out by [`layout`] (the scenario's validation did).
    pub fn new(
        topo: &Topology,
        spec: TrainingSpec,
        layout: TrainingLayout,
        seed: u64,
    ) -> Result<TrainingWorld, String> {
        let programs = layout
            .switch_jobs
            .iter()
            .map(|js| spec.switch_program(layout.aggregators, js, seed))
            .collect::<Result<Vec<_>, String>>()?;
        let params: Vec<WorkerParams> = (0..spec.jobs.len()).map(|j| spec.worker_params(&layout, j as u16)).collect();
        let TrainingLayout { aggregators, jobs: laid_out, role, .. } = layout;
        let mut jobs = Vec::new();
        for (j, ((js, mut at), params)) in spec.jobs.iter().zip(laid_out).zip(params).enumerate() {
            let workers = js
                .workers
                .iter()
                .zip(std::mem::take(&mut at.plans))
                .map(|(&host, plan)| Worker {
                    host,
                    plan,
                    win: None,
                    rto_armed: None,
                    first_send_ps: None,
                    done_ps: None,
                    bad: 0,
                })
                .collect();
            jobs.push(Job {
                spec: js.clone(),
                layout: at,
                params,
                workers,
                ps: spec.parameter_server(j as u16)?,
                ps_mark: false,
                done_ps: None,
                released: 0,
            });
        }
        let link_bps = topo.links.iter().map(|l| l.bandwidth_bps).min().unwrap_or(1).max(1);
        // DSA §II-A/§III: the switch aggregates "at a line rate" ("placing the simple core
        // aggregation function on the switch to maximumly use its line-rate processing
        // capability"): a switch's program keeps up with packets of the seed's size arriving
        // on every port at once. (A fixed 1.2 Gpps, Canary's setting, capped the 64-worker
        // star at 46 Gb/s per worker and made every protocol's JCT grow with the job count.)
        let mut port_bps = vec![0u64; topo.nodes.len()];
        for l in &topo.links {
            port_bps[l.a.idx()] += l.bandwidth_bps;
            port_bps[l.b.idx()] += l.bandwidth_bps;
        }
        let busiest = topo
            .nodes
            .iter()
            .zip(&port_bps)
            .filter(|(n, _)| n.host.is_none())
            .map(|(_, &b)| b)
            .max()
            .unwrap_or(link_bps);
        let program_pps = busiest as f64 / (PACKET_BYTES as f64 * 8.0);
        let left = jobs.len();
        let routes = jobs
            .iter()
            .map(|j| JobRoute {
                switch: j.layout.switch,
                tree: j.layout.tree.clone(),
                workers: j.spec.workers.clone(),
                ps: j.spec.ps,
            })
            .collect();
        let nodes = PoolNodes::new(
            routes,
            spec.tree,
            spec.protocol == PoolProtocol::Atp,
            matches!(spec.protocol, PoolProtocol::Dsa(_)),
        );
        Ok(TrainingWorld {
            vals: Values::new(if spec.values { ELEMS_PER_PACKET as usize } else { 0 }),
            spec,
            jobs,
            programs,
            aggregators,
            arena: Slab::default(),
            timers: Slab::default(),
            nodes,
            nbuf: Vec::new(),
            psbuf: Vec::new(),
            salt: crate::ina_run::collective_salt(seed),
            link_bps,
            program_pps,
            role,
            left,
            lost_packets: 0,
            task_types: TaskTypes::new(),
            restarts: 0,
            worker_bytes_sent: 0,
            ps_bytes_received: 0,
            ps_bytes_sent: 0,
            result_bytes: 0,
            occupancy: Vec::new(),
        })
    }

    pub fn is_done(&self) -> bool {
        self.left == 0
    }

    pub fn start(&mut self, net: &mut Network) {
        net.set_program_limits(reducelab_net::ProgramLimits {
            packets_per_second: self.program_pps.max(1.0),
            latency_ps: 0,
        });
        for (i, p) in self.programs.iter().enumerate() {
            if p.is_some() {
                net.set_programmable(i as u32, true);
            }
        }
        for j in 0..self.jobs.len() {
            let at = self.jobs[j].layout.start_ps;
            self.timer(net, at, Target::JobStart(j as u16), 0);
        }
        if let Some(at) = self.spec.ps_restart_ps {
            self.timer(net, at, Target::PsRestart, 0);
        }
        self.timer(net, 0, Target::Sample, 0);
    }

    fn timer(&mut self, net: &mut Network, at: u64, target: Target, token: u64) {
        let slot = self.timers.put((target, token));
        net.schedule_timer(reducelab_des::SimTime(at), slot as u64);
    }

    fn put(&mut self, p: AggPacket, ecn: bool) -> u32 {
        self.arena.put((p, ecn))
    }

    fn take(&mut self, app: u32) -> (AggPacket, bool) {
        self.arena.take(app)
    }

    fn wire_bytes(p: &AggPacket) -> u32 {
        match p.kind {
            PacketKind::Gradient | PacketKind::Partial | PacketKind::Ack | PacketKind::Other => {
                HEADER_BYTES + p.elems as u32 * 4
            }
            PacketKind::Reminder | PacketKind::Fetch | PacketKind::ReminderNotice => CONTROL_BYTES,
        }
    }

    /// Where a packet addressed by its destination goes, and whether switch programs take it.
    fn route_of(&self, p: &AggPacket) -> (AppDst, bool) {
        let (dst, intercept) = self.nodes.route_of(p);
        (app_dst(dst), intercept)
    }

    fn app(&mut self, p: AggPacket, ecn: bool, dst: AppDst, intercept: bool) -> AppPacket {
        let wire_bytes = Self::wire_bytes(&p);
        AppPacket { app: self.put(p, ecn), wire_bytes, dst, intercept }
    }

    fn host_send(&mut self, net: &mut Network, host: u32, p: AggPacket, ecn: bool) {
        let (dst, intercept) = self.route_of(&p);
        let a = self.app(p, ecn, dst, intercept);
        net.app_inject(host, 0, a);
    }

    /// A packet at switch `node`: what [`PoolNodes::on_packet`] says becomes of it and what
    /// the node sends, in that order.
    pub fn on_app_at_switch(&mut self, net: &mut Network, node: u32, in_port: u16, pkt: PacketId) {
        let app = net.app_packet(pkt).app;
        let ecn = net.app_ecn(pkt);
        let (p, carried) = self.take(app);
        let addressed = match net.app_packet(pkt).dst {
            AppDst::Node(n) => NodeDst::Node(n),
            AppDst::Host(h) => NodeDst::Host(h),
        };
        let now = net.now().ps();
        let mut out = std::mem::take(&mut self.nbuf);
        let program = self.programs[node as usize].as_mut().map(|p| p.get());
        let (vals, tasks) = (&mut self.vals, &mut self.task_types);
        let a = Arrival { node, now, in_port, p, ecn: ecn || carried, addressed };
        self.nodes.on_packet(a, program, vals, tasks, &mut out);
        for o in out.drain(..) {
            match o {
                NodeOut::Consume => net.app_consume(pkt),
                NodeOut::Send(s) => {
                    let a = self.app(s.p, s.ecn, app_dst(s.dst), s.intercept);
                    if s.custody {
                        net.app_forward(node, pkt, AppOut::Route, a);
                    } else {
                        net.app_emit(node, AppOut::Route, a);
                    }
                }
            }
        }
        self.nbuf = out;
    }

    pub fn on_app_delivered(&mut self, net: &mut Network, host: u32, app: u32) {
        let (p, carried) = self.take(app);
        let ecn = carried || net.app_delivered_ecn();
        let now = net.now().ps();
        match self.role[host as usize] {
            Some((j, PS_RANK)) if j == p.job => {
                self.ps_bytes_received += Self::wire_bytes(&p) as u64;
                let job = &mut self.jobs[j as usize];
                job.ps_mark |= ecn;
                let mut out = std::mem::take(&mut self.psbuf);
                match job.ps.as_mut() {
                    Some(Ps::Atp(ps)) => ps.on_packet(now, p, &mut self.vals, &mut out),
                    Some(Ps::Dsa(ps)) => ps.on_packet(now, p, &mut self.vals, &mut out),
                    None => self.vals.release(p.data),
                }
                self.psbuf = out;
                self.ps_actions(net, j);
            }
            Some((j, rank)) if j == p.job => {
                let w = &mut self.jobs[j as usize].workers[rank as usize];
                let Some(win) = w.win.as_mut() else {
                    self.vals.release(p.data);
                    return;
                };
                match p.kind {
                    PacketKind::Ack => {
                        self.result_bytes += Self::wire_bytes(&p) as u64;
                        if win.on_ack(p.psn, ecn, now) {
                            let ok = check_result(&p, self.salt, &self.vals);
                            if !ok {
                                w.bad += 1;
                            }
                        }
                        self.vals.release(p.data);
                        if win.is_done() && w.done_ps.is_none() {
                            w.done_ps = Some(now);
                            self.worker_done(net, j, now);
                        }
                    }
                    PacketKind::Fetch => {
                        win.on_fetch(p.psn);
                        self.vals.release(p.data);
                    }
                    _ => self.vals.release(p.data),
                }
                self.after_worker(net, j, rank);
            }
            _ => self.vals.release(p.data),
        }
    }

    fn worker_done(&mut self, net: &mut Network, j: u16, now: u64) {
        let job = &mut self.jobs[j as usize];
        if job.done_ps.is_none() && job.workers.iter().all(|w| w.done_ps.is_some()) {
            job.done_ps = Some(now);
            self.left -= 1;
            let switches: Vec<u32> = job.switches().collect();
            for sw in switches {
                if let Some(p) = self.programs[sw as usize].as_mut() {
                    job.released += p.get().pool_mut().release_job(now, j, &mut self.vals);
                }
            }
            if self.left == 0 {
                // Late packets of jobs that ended before may have reserved aggregators since.
                for k in 0..self.jobs.len() {
                    let switches: Vec<u32> = self.jobs[k].switches().collect();
                    for sw in switches {
                        if let Some(p) = self.programs[sw as usize].as_mut() {
                            self.jobs[k].released += p.get().pool_mut().release_job(now, k as u16, &mut self.vals);
                        }
                    }
                }
            }
            let _ = net;
        }
    }

    fn ps_actions(&mut self, net: &mut Network, j: u16) {
        let mut out = std::mem::take(&mut self.psbuf);
        let host = self.jobs[j as usize].spec.ps.expect("a PS");
        for a in out.drain(..) {
            match a {
                PsAction::Send(p) => {
                    let ecn = p.kind == PacketKind::Ack && std::mem::take(&mut self.jobs[j as usize].ps_mark);
                    self.ps_bytes_sent += Self::wire_bytes(&p) as u64;
                    if p.kind == PacketKind::Reminder {
                        // DSA's reminder fetches "the switch's" partial: on a tree, every
                        // switch's (one copy each, addressed to it).
                        let leaves =
                            self.jobs[j as usize].layout.tree.as_ref().map_or(Vec::new(), |t| t.leaves.clone());
                        for leaf in leaves {
                            self.ps_bytes_sent += Self::wire_bytes(&p) as u64;
                            let a = self.app(p, false, AppDst::Node(leaf), true);
                            net.app_inject(host, 0, a);
                        }
                    }
                    self.host_send(net, host, p, ecn);
                }
                PsAction::Timer { at, token } => self.timer(net, at, Target::Ps { job: j, token }, 0),
            }
        }
        self.psbuf = out;
    }

    /// Refills the worker's NIC queue and re-arms its timeout.
    fn after_worker(&mut self, net: &mut Network, j: u16, rank: u16) {
        self.refill(net, j, rank);
        let w = &self.jobs[j as usize].workers[rank as usize];
        if let Some(t) = w.win.as_ref().and_then(|x| x.timer_ps()) {
            if w.rto_armed.is_none_or(|a| a > t) {
                self.jobs[j as usize].workers[rank as usize].rto_armed = Some(t);
                self.timer(net, t, Target::Rto { job: j, rank }, t);
            }
        }
    }

    fn refill(&mut self, net: &mut Network, j: u16, rank: u16) {
        let now = net.now().ps();
        let host = self.jobs[j as usize].workers[rank as usize].host;
        let n = self.jobs[j as usize].spec.workers.len() as u16;
        let room = 2 * APP_QUEUE_LOW;
        while net.app_queued(host, 0) < room {
            let job = &mut self.jobs[j as usize];
            let w = &mut job.workers[rank as usize];
            let Some(win) = w.win.as_mut() else { return };
            if let Some(psn) = win.take_reminder() {
                let mut p = AggPacket::new(PacketKind::ReminderNotice, Dest::Ps, j, psn, n);
                p.bitmap = 1u64 << rank;
                self.host_send(net, host, p, false);
                continue;
            }
            let Some(s) = win.transmit(now) else { return };
            w.first_send_ps.get_or_insert(now);
            let p = gradient_packet(
                self.spec.protocol,
                self.salt,
                j,
                rank,
                n,
                s,
                &w.plan,
                &job.spec.model,
                self.link_bps,
                &mut self.vals,
            );
            self.worker_bytes_sent += Self::wire_bytes(&p) as u64;
            self.host_send(net, host, p, false);
        }
    }

    /// A copy of protocol packet `app` with its own data (the duplication fault).
    pub fn duplicate(&mut self, app: u32) -> u32 {
        let (p, ecn) = self.arena.get(app);
        let copy = p.copy(&mut self.vals);
        self.put(copy, ecn)
    }

    pub fn on_app_lost(&mut self, _net: &mut Network, app: u32) {
        let (p, _) = self.take(app);
        self.vals.release(p.data);
        self.lost_packets += 1;
        self.task_types.on_loss(p.task());
    }

    pub fn on_queue_low(&mut self, net: &mut Network, host: u32) {
        if let Some((j, r)) = self.role[host as usize] {
            if r != PS_RANK {
                self.refill(net, j, r);
            }
        }
    }

    pub fn on_timer(&mut self, net: &mut Network, token: u64) {
        let (target, t) = self.timers.take(token as u32);
        let now = net.now().ps();
        match target {
            Target::JobStart(j) => {
                let params = self.worker_params(j);
                let job = &mut self.jobs[j as usize];
                let psns = job.layout.psns;
                let mut ready = Vec::new();
                for (r, w) in job.workers.iter_mut().enumerate() {
                    let mut win = WorkerWindow::new(psns, params);
                    win.set_available(training::available_psns(&w.plan, now));
                    w.win = Some(win);
                    ready.extend(w.plan.iter().map(|p| p.ready_ps).filter(|&t| t > now).map(|t| (t, r as u16)));
                }
                for (at, rank) in ready {
                    self.timer(net, at, Target::Ready { job: j, rank }, 0);
                }
                for r in 0..self.jobs[j as usize].workers.len() {
                    self.after_worker(net, j, r as u16);
                }
            }
            Target::Ready { job: j, rank } => {
                let w = &mut self.jobs[j as usize].workers[rank as usize];
                let avail = training::available_psns(&w.plan, now);
                if let Some(win) = w.win.as_mut() {
                    win.set_available(avail);
                }
                self.after_worker(net, j, rank);
            }
            Target::Rto { job: j, rank } => {
                let w = &mut self.jobs[j as usize].workers[rank as usize];
                if w.rto_armed != Some(t) {
                    return;
                }
                w.rto_armed = None;
                if let Some(win) = w.win.as_mut() {
                    win.on_timer(now);
                }
                self.after_worker(net, j, rank);
            }
            Target::Ps { job: j, token } => {
                if self.jobs[j as usize].done_ps.is_some() {
                    return;
                }
                let mut out = std::mem::take(&mut self.psbuf);
                if let Some(Ps::Dsa(ps)) = self.jobs[j as usize].ps.as_mut() {
                    ps.on_timer(now, token, &mut out);
                }
                self.psbuf = out;
                self.ps_actions(net, j);
            }
            Target::PsRestart => {
                self.restarts += 1;
                for job in &mut self.jobs {
                    if let Some(ps) = job.ps.as_mut() {
                        ps.restart(&mut self.vals);
                    }
                }
            }
            Target::Sample => {
                let mut busiest = 0u32;
                let mut total = 0u64;
                for p in self.programs.iter().flatten() {
                    let u = p.view().pool().in_use();
                    busiest = busiest.max(u);
                    total += u as u64;
                }
                self.occupancy.push((now, busiest, total));
                if self.left > 0 && net.pending_events() > 0 {
                    self.timer(net, now + SAMPLE_PS, Target::Sample, 0);
                }
            }
        }
    }

    /// The window parameters of job `j`'s workers ([`TrainingSpec::worker_params`]).
    pub fn worker_params(&self, j: u16) -> WorkerParams {
        self.jobs[j as usize].params
    }

    /// Why the run cannot finish, if it has not.
    pub fn unfinished(&self) -> Option<String> {
        if self.left == 0 {
            return None;
        }
        let mut parts = Vec::new();
        for (j, job) in self.jobs.iter().enumerate() {
            if job.done_ps.is_some() {
                continue;
            }
            let missing: u64 = job
                .workers
                .iter()
                .map(|w| w.win.as_ref().map_or(job.layout.psns, |x| x.packets() - acked(x)) as u64)
                .sum();
            let gave_up = job.workers.iter().filter(|w| w.win.as_ref().is_some_and(|x| x.gave_up())).count();
            let why = if gave_up > 0 {
                format!(
                    "{gave_up} workers gave up after {} retransmissions of one PSN",
                    reducelab_transport::worker::MAX_RETRANSMISSIONS
                )
            } else if self.lost_packets > 0 {
                format!("{} packets were lost and recovery did not complete", self.lost_packets)
            } else {
                "no event is pending".to_string()
            };
            parts.push(format!(
                "training job {j}: {missing} results missing over {} workers ({why})",
                job.workers.len()
            ));
        }
        Some(parts.join("; "))
    }

    /// Progress: (results received, results expected, any job running).
    pub fn work(&self, now_ps: u64) -> (u64, u64, bool) {
        let mut done = 0;
        let mut total = 0;
        let mut running = false;
        for job in &self.jobs {
            total += job.layout.psns as u64 * job.workers.len() as u64;
            done += job.workers.iter().map(|w| w.win.as_ref().map_or(0, acked) as u64).sum::<u64>();
            running |= now_ps >= job.layout.start_ps && job.done_ps.is_none();
        }
        (done, total, running)
    }

    pub fn job_results(&self) -> Vec<JobResult> {
        self.jobs
            .iter()
            .enumerate()
            .map(|(j, job)| {
                let finished = job.workers.iter().filter(|w| w.done_ps.is_some()).count();
                let bad: u64 = job.workers.iter().map(|w| w.bad).sum();
                let span = job.done_ps.and_then(|d| {
                    job.workers.iter().filter_map(|w| w.first_send_ps).min().map(|f| d.saturating_sub(f))
                });
                JobResult {
                    job: j as u16,
                    model: job.spec.model.name,
                    workers: job.workers.len(),
                    ps_host: job.spec.ps,
                    switch_node: job.layout.switch,
                    leaf_switches: job.layout.tree.as_ref().map_or(Vec::new(), |t| t.leaves.clone()),
                    start_ps: job.layout.start_ps,
                    jct_ps: job.done_ps.map(|d| d - job.layout.start_ps),
                    aggregation_utilization: span
                        .filter(|&s| s > 0)
                        .map(|s| job.spec.model.epoch_bytes() as f64 * 8.0 / (s as f64 * 1e-12) / self.link_bps as f64),
                    psns: job.layout.psns,
                    workers_finished: finished,
                    bad_results: bad,
                    verified: job.done_ps.is_some() && bad == 0,
                    aggregators_released_at_end: job.released,
                }
            })
            .collect()
    }

    pub fn totals(&self) -> TrainingTotals {
        let jobs = self.job_results();
        let jcts: Vec<u64> = jobs.iter().filter_map(|r| r.jct_ps).collect();
        let utils: Vec<f64> = jobs.iter().filter_map(|r| r.aggregation_utilization).collect();
        let end = self.occupancy.last().map_or(1, |o| o.0.max(1));
        let mut sw = PoolStats::default();
        let (mut mean_busiest, mut peak, mut left) = (0.0f64, 0u32, 0u64);
        for p in self.programs.iter().flatten() {
            let p = p.view();
            add_pool_stats(&mut sw, p.stats());
            mean_busiest = mean_busiest.max(p.pool().mean_in_use(end));
            peak = peak.max(p.pool().peak_in_use);
            left += p.pool().in_use() as u64;
        }
        sw.malformed += self.nodes.malformed_at_leaves;
        let mut ps = PsStats::default();
        for job in &self.jobs {
            let s = match job.ps.as_ref() {
                Some(Ps::Atp(p)) => &p.dict.stats,
                Some(Ps::Dsa(p)) => &p.dict.stats,
                None => continue,
            };
            add_ps_stats(&mut ps, s);
        }
        let mut wt = WorkerStats::default();
        for w in self.jobs.iter().flat_map(|j| &j.workers) {
            if let Some(s) = w.win.as_ref().map(|x| x.stats()) {
                wt.add(&s);
            }
        }
        TrainingTotals {
            protocol: self.spec.protocol.label(),
            jobs: self.jobs.len(),
            aggregators_per_switch: self.aggregators,
            mean_jct_ps: (jcts.len() == jobs.len() && !jcts.is_empty())
                .then(|| jcts.iter().sum::<u64>() as f64 / jcts.len() as f64),
            max_jct_ps: (jcts.len() == jobs.len()).then(|| jcts.iter().copied().max().unwrap_or(0)),
            memory_utilization: (utils.len() == jobs.len() && !utils.is_empty())
                .then(|| utils.iter().sum::<f64>() / utils.len() as f64),
            mean_aggregators_in_use: mean_busiest,
            peak_aggregators_in_use: peak,
            aggregators_left: left,
            aggregators_released_at_end: jobs.iter().map(|r| r.aggregators_released_at_end as u64).sum(),
            switch: sw,
            ps,
            workers: wt,
            worker_bytes_sent: self.worker_bytes_sent,
            ps_bytes_received: self.ps_bytes_received,
            ps_bytes_sent: self.ps_bytes_sent,
            result_bytes_delivered: self.result_bytes,
            lost_packets: self.lost_packets,
            task_types: matches!(self.spec.protocol, PoolProtocol::Dsa(_)).then(|| {
                self.task_types.counts(self.jobs.iter().map(|j| j.layout.psns as u64).sum(), self.lost_packets)
            }),
            ps_restarts: self.restarts,
            values_checked: self.vals.enabled(),
            values_slots_left: self.vals.live,
        }
    }

    /// `training_jobs.csv`: one row per job.
    pub fn jobs_csv(&self) -> String {
        use std::fmt::Write;
        let mut c = String::from("job,model,workers,ps_host,switch_node,start_ps,jct_ps,aggregation_utilization,workers_finished,bad_results,verified,aggregators_released_at_end\n");
        for r in self.job_results() {
            let _ = writeln!(
                c,
                "{},{},{},{},{},{},{},{},{},{},{},{}",
                r.job,
                r.model,
                r.workers,
                r.ps_host.map_or(String::new(), |h| h.to_string()),
                r.switch_node,
                r.start_ps,
                r.jct_ps.map_or(String::new(), |t| t.to_string()),
                r.aggregation_utilization.map_or(String::new(), |u| format!("{u:.6}")),
                r.workers_finished,
                r.bad_results,
                r.verified,
                r.aggregators_released_at_end
            );
        }
        c
    }

    /// `training_memory.csv`: aggregators in use over time.
    pub fn memory_csv(&self) -> String {
        use std::fmt::Write;
        let mut c = String::from("time_ps,busiest_switch_aggregators,all_switches_aggregators\n");
        for (t, b, a) in &self.occupancy {
            let _ = writeln!(c, "{t},{b},{a}");
        }
        c
    }
}

fn app_dst(d: NodeDst) -> AppDst {
    match d {
        NodeDst::Node(n) => AppDst::Node(n),
        NodeDst::Host(h) => AppDst::Host(h),
    }
}

fn acked(w: &WorkerWindow) -> u32 {
    w.acked()
}

impl Job {
    /// The switches that run the job's program: its root (or only switch) and its leaves.
    fn switches(&self) -> impl Iterator<Item = u32> + '_ {
        self.layout.switches()
    }
}

fn add_pool_stats(a: &mut PoolStats, b: &PoolStats) {
    a.aggregated += b.aggregated;
    a.completed += b.completed;
    a.fallbacks += b.fallbacks;
    a.preemptions += b.preemptions;
    a.downgrades += b.downgrades;
    a.duplicates += b.duplicates;
    a.results_resent += b.results_resent;
    a.stale += b.stale;
    a.resends += b.resends;
    a.resend_clears += b.resend_clears;
    a.ack_frees += b.ack_frees;
    a.reminders_fetched += b.reminders_fetched;
    a.reminders_empty += b.reminders_empty;
    a.passed_through += b.passed_through;
    a.malformed += b.malformed;
}

fn add_ps_stats(a: &mut PsStats, b: &PsStats) {
    a.merged += b.merged;
    a.duplicates += b.duplicates;
    a.discarded += b.discarded;
    a.completed += b.completed;
    a.re_acks += b.re_acks;
    a.reminders += b.reminders;
    a.notices += b.notices;
    a.foreign += b.foreign;
}
