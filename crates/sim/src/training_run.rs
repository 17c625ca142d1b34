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
//!   (`switch_memory_bytes / 306 B` aggregators, SwitchML's split evenly among its jobs);
//!   packets of other switches' jobs pass through. Multi-level aggregation (a program on every
//!   switch of a job's tree) is not modelled. A `Workers` packet is multicast by the job's
//!   switch: one copy per worker, routed.
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

use reducelab_des::Rng;
use reducelab_ina::atp::AtpSwitch;
use reducelab_ina::dsa::{DsaSwitch, REMINDER_AFTER_RETRANSMISSIONS};
use reducelab_ina::fabric::Fabric;
use reducelab_ina::policy::{self, PolicyInputs, Preemption};
use reducelab_ina::pool::{self, AggPacket, Dest, PacketKind, PoolAction, PoolLayout, PoolProgram, PoolStats, PsAction};
use reducelab_ina::ps::{AtpPs, DsaPs, PsStats};
use reducelab_ina::switchml::{even_regions, SwitchMlSwitch};
use reducelab_ina::training::{self, DnnModel, Partition};
use reducelab_ina::{Values, NIL};
use reducelab_net::{AppDst, AppOut, AppPacket, Network, PacketId, APP_QUEUE_LOW};
use reducelab_topo::Topology;
use reducelab_transport::worker::{WindowControl, WorkerParams, WorkerWindow};
use serde::Serialize;
use std::collections::VecDeque;

/// Payload of a gradient packet: 62 four-byte values (ATP's `MAX_ENTRIES_PER_PACKET`).
pub const ELEMS_PER_PACKET: u16 = 62;
/// A data packet on the wire (§VII-B: "the same packet size (306Byte) as ... ATP").
pub const PACKET_BYTES: u32 = 306;
/// Headers of a packet: 306 B less 248 B of values.
pub const HEADER_BYTES: u32 = PACKET_BYTES - ELEMS_PER_PACKET as u32 * 4;
/// A control packet (reminder, fetch, notice): a minimum Ethernet frame.
pub const CONTROL_BYTES: u32 = 64;
/// Aggregator occupancy is sampled this often.
pub const SAMPLE_PS: u64 = 10_000_000;
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
}

impl TrainingSpec {
    /// Aggregators per switch.
    pub fn aggregators(&self) -> Result<u32, String> {
        PoolLayout { memory_bytes: self.memory_bytes, aggregator_bytes: PACKET_BYTES as u64 }.aggregators().map_err(|r| r.replace("memory_bytes", "switch_memory_bytes"))
    }
}

enum Program {
    SwitchMl(SwitchMlSwitch),
    Atp(AtpSwitch),
    Dsa(DsaSwitch),
}

impl Program {
    fn get(&mut self) -> &mut dyn PoolProgram {
        match self {
            Program::SwitchMl(p) => p,
            Program::Atp(p) => p,
            Program::Dsa(p) => p,
        }
    }
    fn view(&self) -> &dyn PoolProgram {
        match self {
            Program::SwitchMl(p) => p,
            Program::Atp(p) => p,
            Program::Dsa(p) => p,
        }
    }
}

enum Ps {
    Atp(AtpPs),
    Dsa(DsaPs),
}

#[derive(Clone, Copy)]
enum Target {
    JobStart(u16),
    Ready { job: u16, rank: u16 },
    Rto { job: u16, rank: u16 },
    Ps { job: u16, token: u64 },
    PsRestart,
    Sample,
}

/// Counters of the workers, summed.
#[derive(Clone, Copy, Debug, Default, Serialize)]
pub struct WorkerTotals {
    pub new_packets: u64,
    pub retransmissions: u64,
    pub timeouts: u64,
    pub acks: u64,
    pub duplicate_acks: u64,
    pub out_of_order_acks: u64,
    pub ecn_echoes: u64,
    pub window_decreases: u64,
    pub reminder_notices: u64,
    pub fetched: u64,
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
    start_ps: u64,
    switch: u32,
    workers: Vec<Worker>,
    ps: Option<Ps>,
    /// A packet that reached the PS was ECN-marked: its next ACK echoes it.
    ps_mark: bool,
    done_ps: Option<u64>,
    released: u32,
    psns: u32,
}

/// Per-job result.
#[derive(Clone, Debug, Serialize)]
pub struct JobResult {
    pub job: u16,
    pub model: &'static str,
    pub workers: usize,
    pub ps_host: Option<u32>,
    pub switch_node: u32,
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
    pub workers: WorkerTotals,
    /// Bytes by where they went: worker NICs out, into parameter servers, results to workers.
    pub worker_bytes_sent: u64,
    pub ps_bytes_received: u64,
    pub ps_bytes_sent: u64,
    pub result_bytes_delivered: u64,
    pub lost_packets: u64,
    pub ps_restarts: u32,
    pub values_checked: bool,
    pub values_slots_left: u32,
}

pub struct TrainingWorld {
    pub spec: TrainingSpec,
    jobs: Vec<Job>,
    programs: Vec<Option<Program>>,
    aggregators: u32,
    arena: Vec<(AggPacket, bool)>,
    arena_free: Vec<u32>,
    vals: Values,
    timers: Vec<(Target, u64)>,
    timers_free: Vec<u32>,
    pbuf: Vec<PoolAction>,
    psbuf: Vec<PsAction>,
    salt: u64,
    link_bps: u64,
    /// Per host: (job, rank) of the worker there, or (job, PS_RANK).
    role: Vec<Option<(u16, u16)>>,
    left: usize,
    pub lost_packets: u64,
    restarts: u32,
    worker_bytes_sent: u64,
    ps_bytes_received: u64,
    ps_bytes_sent: u64,
    result_bytes: u64,
    /// (time ps, aggregators in use on the busiest switch, over all switches).
    pub occupancy: Vec<(u64, u32, u64)>,
}

const PS_RANK: u16 = u16::MAX;

impl TrainingWorld {
    /// Builds the world; errors start with the field they are about.
    pub fn new(topo: &Topology, spec: TrainingSpec, seed: u64) -> Result<TrainingWorld, String> {
        if topo.nodes.iter().any(|n| n.host.is_some() && n.forwards) {
            return Err(format!("topology: training jobs aggregate on switches; the hosts of {} forward traffic", topo.name));
        }
        if spec.jobs.len() > u16::MAX as usize - 1 {
            return Err("jobs: too many".into());
        }
        let aggregators = spec.aggregators()?;
        let fabric = crate::ina_run::fabric_of(topo);
        let n_hosts = topo.num_hosts();
        let mut role = vec![None; n_hosts];
        let mut rng = Rng::new(seed).fork(0xD5A);
        let mut jobs = Vec::new();
        let mut switch_jobs: Vec<Vec<(u16, u16)>> = vec![Vec::new(); topo.nodes.len()];
        for (j, js) in spec.jobs.iter().enumerate() {
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
            let switch = nearest_switch(&fabric, &hosts).ok_or_else(|| format!("topology: no switch reaches every host of job {j}"))?;
            switch_jobs[switch as usize].push((j as u16, js.workers.len() as u16));
            let start_ps = if spec.start_max_ps == 0 { 0 } else { rng.below(spec.start_max_ps + 1) };
            let parts = js.model.send_order().len();
            let payload = ELEMS_PER_PACKET as u32 * 4;
            let workers = js
                .workers
                .iter()
                .map(|&host| {
                    let jit: Vec<u64> = (0..parts).map(|_| if spec.jitter_max_ps == 0 { 0 } else { rng.below(spec.jitter_max_ps + 1) }).collect();
                    Worker { host, plan: js.model.plan(payload, start_ps, &jit), win: None, rto_armed: None, first_send_ps: None, done_ps: None, bad: 0 }
                })
                .collect::<Vec<_>>();
            let psns = js.model.packets_per_partition(payload) * parts as u32;
            let ps = match (spec.protocol, js.ps) {
                (PoolProtocol::SwitchMl, _) | (_, None) => None,
                (PoolProtocol::Atp, Some(_)) => Some(Ps::Atp(AtpPs::new(j as u16, js.workers.len() as u16).map_err(|r| format!("workers: {r}"))?)),
                (PoolProtocol::Dsa(_), Some(_)) => Some(Ps::Dsa(DsaPs::new(j as u16, js.workers.len() as u16, spec.min_rto_ps.max(1)).map_err(|r| format!("workers: {r}"))?)),
            };
            if spec.protocol.uses_ps() && ps.is_none() {
                return Err(format!("jobs: job {j} needs a parameter server host"));
            }
            jobs.push(Job { spec: js.clone(), start_ps, switch, workers, ps, ps_mark: false, done_ps: None, released: 0, psns });
        }
        let mut programs: Vec<Option<Program>> = (0..topo.nodes.len()).map(|_| None).collect();
        for (node, js) in switch_jobs.iter().enumerate() {
            if js.is_empty() {
                continue;
            }
            programs[node] = Some(match spec.protocol {
                PoolProtocol::SwitchMl => {
                    let regions = even_regions(aggregators, js).map_err(|r| format!("switch_memory_bytes: {r}"))?;
                    Program::SwitchMl(SwitchMlSwitch::new(aggregators, &regions)?)
                }
                PoolProtocol::Atp => Program::Atp(AtpSwitch::new(aggregators)?),
                PoolProtocol::Dsa(Preemption::Coin { .. }) => Program::Dsa(DsaSwitch::new(aggregators, Preemption::Coin { seed: seed ^ 0xC014 })?),
                PoolProtocol::Dsa(rule) => Program::Dsa(DsaSwitch::new(aggregators, rule)?),
            });
        }
        let link_bps = topo.links.iter().map(|l| l.bandwidth_bps).min().unwrap_or(1).max(1);
        let left = jobs.len();
        Ok(TrainingWorld {
            vals: Values::new(if spec.values { ELEMS_PER_PACKET as usize } else { 0 }),
            spec,
            jobs,
            programs,
            aggregators,
            arena: Vec::new(),
            arena_free: Vec::new(),
            timers: Vec::new(),
            timers_free: Vec::new(),
            pbuf: Vec::new(),
            psbuf: Vec::new(),
            salt: crate::ina_run::collective_salt(seed),
            link_bps,
            role,
            left,
            lost_packets: 0,
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
        net.set_program_limits(reducelab_net::ProgramLimits { packets_per_second: 1.2e9, latency_ps: 0 });
        for (i, p) in self.programs.iter().enumerate() {
            if p.is_some() {
                net.set_programmable(i as u32, true);
            }
        }
        for j in 0..self.jobs.len() {
            let at = self.jobs[j].start_ps;
            self.timer(net, at, Target::JobStart(j as u16), 0);
        }
        if let Some(at) = self.spec.ps_restart_ps {
            self.timer(net, at, Target::PsRestart, 0);
        }
        self.timer(net, 0, Target::Sample, 0);
    }

    fn timer(&mut self, net: &mut Network, at: u64, target: Target, token: u64) {
        let slot = match self.timers_free.pop() {
            Some(s) => {
                self.timers[s as usize] = (target, token);
                s
            }
            None => {
                self.timers.push((target, token));
                self.timers.len() as u32 - 1
            }
        };
        net.schedule_timer(reducelab_des::SimTime(at), slot as u64);
    }

    fn put(&mut self, p: AggPacket, ecn: bool) -> u32 {
        match self.arena_free.pop() {
            Some(s) => {
                self.arena[s as usize] = (p, ecn);
                s
            }
            None => {
                self.arena.push((p, ecn));
                self.arena.len() as u32 - 1
            }
        }
    }

    fn take(&mut self, app: u32) -> (AggPacket, bool) {
        self.arena_free.push(app);
        self.arena[app as usize]
    }

    fn wire_bytes(p: &AggPacket) -> u32 {
        match p.kind {
            PacketKind::Gradient | PacketKind::Partial | PacketKind::Ack | PacketKind::Other => HEADER_BYTES + p.elems as u32 * 4,
            PacketKind::Reminder | PacketKind::Fetch | PacketKind::ReminderNotice => CONTROL_BYTES,
        }
    }

    /// Where a packet of job `job` addressed to `dst` goes, and whether switch programs take it.
    fn route_of(&self, p: &AggPacket) -> (AppDst, bool) {
        let job = &self.jobs[p.job as usize];
        match p.dst {
            Dest::Switch | Dest::Workers => (AppDst::Node(job.switch), true),
            Dest::Ps => (AppDst::Host(job.spec.ps.expect("a job with a PS")), false),
            Dest::Worker(r) => (AppDst::Host(job.spec.workers[r as usize]), false),
        }
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

    /// Carries out a switch program's actions at `node` (`pkt`: the arriving packet in custody).
    fn switch_actions(&mut self, net: &mut Network, node: u32, pkt: PacketId, ecn: bool) {
        let mut buf = std::mem::take(&mut self.pbuf);
        for a in buf.drain(..) {
            match a {
                PoolAction::Consume => net.app_consume(pkt),
                PoolAction::Forward(p) if p.dst == Dest::Workers => {
                    self.multicast(net, node, p, ecn, Some(pkt));
                }
                PoolAction::Forward(p) => {
                    let (dst, intercept) = self.route_of(&p);
                    let a = self.app(p, ecn, dst, intercept && p.dst != Dest::Switch);
                    net.app_forward(node, pkt, AppOut::Route, a);
                }
                PoolAction::Emit(p) if p.dst == Dest::Workers => self.multicast(net, node, p, false, None),
                PoolAction::Emit(p) => {
                    let (dst, _) = self.route_of(&p);
                    let a = self.app(p, false, dst, false);
                    net.app_emit(node, AppOut::Route, a);
                }
            }
        }
        self.pbuf = buf;
    }

    /// One copy of `p` to each worker of its job (the first takes over `custody`, if given).
    fn multicast(&mut self, net: &mut Network, node: u32, p: AggPacket, ecn: bool, custody: Option<PacketId>) {
        let n = self.jobs[p.job as usize].spec.workers.len();
        for r in 0..n {
            let host = self.jobs[p.job as usize].spec.workers[r];
            let c = if r == 0 { p } else { p.copy(&mut self.vals) };
            let a = self.app(c, ecn, AppDst::Host(host), false);
            match (r, custody) {
                (0, Some(pkt)) => net.app_forward(node, pkt, AppOut::Route, a),
                _ => net.app_emit(node, AppOut::Route, a),
            }
        }
    }

    pub fn on_app_at_switch(&mut self, net: &mut Network, node: u32, in_port: u16, pkt: PacketId) {
        let app = net.app_packet(pkt).app;
        let ecn = net.app_ecn(pkt);
        let (p, carried) = self.take(app);
        let ecn = ecn || carried;
        if self.jobs[p.job as usize].switch != node || self.programs[node as usize].is_none() {
            // Another switch's job: pass through.
            let (dst, intercept) = self.route_of(&p);
            let a = self.app(p, ecn, dst, intercept);
            net.app_forward(node, pkt, AppOut::Route, a);
            return;
        }
        let now = net.now().ps();
        let mut buf = std::mem::take(&mut self.pbuf);
        self.programs[node as usize].as_mut().expect("a program").get().on_packet(now, in_port, p, &mut self.vals, &mut buf);
        self.pbuf = buf;
        self.switch_actions(net, node, pkt, ecn);
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
            if let Some(p) = self.programs[job.switch as usize].as_mut() {
                job.released = p.get().pool_mut().release_job(now, j, &mut self.vals);
            }
            if self.left == 0 {
                // Late packets of jobs that ended before may have reserved aggregators since.
                for k in 0..self.jobs.len() {
                    let sw = self.jobs[k].switch as usize;
                    if let Some(p) = self.programs[sw].as_mut() {
                        self.jobs[k].released += p.get().pool_mut().release_job(now, k as u16, &mut self.vals);
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
            let dst = if s.to_ps { Dest::Ps } else { Dest::Switch };
            let mut p = pool::gradient(self.salt, j, rank, s.psn, n, ELEMS_PER_PACKET, dst, &mut self.vals);
            match self.spec.protocol {
                PoolProtocol::Atp => p.resend = s.retransmission && !s.to_ps,
                PoolProtocol::Dsa(_) => {
                    let layer = training::partition_of(&w.plan, s.psn).map_or(1, |x| x.layer);
                    p.priority = tensor_priority(&job.spec.model, layer, self.link_bps);
                }
                PoolProtocol::SwitchMl => {}
            }
            self.worker_bytes_sent += Self::wire_bytes(&p) as u64;
            self.host_send(net, host, p, false);
        }
    }

    pub fn on_app_lost(&mut self, _net: &mut Network, app: u32) {
        let (p, _) = self.take(app);
        self.vals.release(p.data);
        self.lost_packets += 1;
    }

    pub fn on_queue_low(&mut self, net: &mut Network, host: u32) {
        if let Some((j, r)) = self.role[host as usize] {
            if r != PS_RANK {
                self.refill(net, j, r);
            }
        }
    }

    pub fn on_timer(&mut self, net: &mut Network, token: u64) {
        let (target, t) = self.timers[token as usize];
        self.timers_free.push(token as u32);
        let now = net.now().ps();
        match target {
            Target::JobStart(j) => {
                let params = self.worker_params(j);
                let job = &mut self.jobs[j as usize];
                let psns = job.psns;
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
                    match job.ps.as_mut() {
                        Some(Ps::Atp(ps)) => ps.dict.restart(&mut self.vals),
                        Some(Ps::Dsa(ps)) => ps.dict.restart(&mut self.vals),
                        None => {}
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

    fn worker_params(&self, j: u16) -> WorkerParams {
        let control = match self.spec.protocol {
            PoolProtocol::SwitchMl => {
                let node = self.jobs[j as usize].switch as usize;
                let slots = match self.programs[node].as_ref() {
                    Some(Program::SwitchMl(s)) => s.region(j).map_or(1, |r| r.slots),
                    _ => 1,
                };
                WindowControl::Slots { slots }
            }
            _ => WindowControl::Aimd { initial_bytes: self.spec.window_bytes, max_bytes: self.spec.window_bytes * MAX_WINDOW_FACTOR },
        };
        WorkerParams {
            packet_bytes: PACKET_BYTES,
            control,
            initial_rto_ps: self.spec.min_rto_ps,
            min_rto_ps: self.spec.min_rto_ps,
            reminder_after: matches!(self.spec.protocol, PoolProtocol::Dsa(_)).then_some(REMINDER_AFTER_RETRANSMISSIONS),
            halve_on_timeout: !matches!(self.spec.protocol, PoolProtocol::Dsa(_)),
        }
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
            let missing: u64 = job.workers.iter().map(|w| w.win.as_ref().map_or(job.psns, |x| x.packets() - acked(x)) as u64).sum();
            let gave_up = job.workers.iter().filter(|w| w.win.as_ref().is_some_and(|x| x.gave_up())).count();
            let why = if gave_up > 0 {
                format!("{gave_up} workers gave up after {} retransmissions of one PSN", reducelab_transport::worker::MAX_RETRANSMISSIONS)
            } else if self.lost_packets > 0 {
                format!("{} packets were lost and recovery did not complete", self.lost_packets)
            } else {
                "no event is pending".to_string()
            };
            parts.push(format!("training job {j}: {missing} results missing over {} workers ({why})", job.workers.len()));
        }
        Some(parts.join("; "))
    }

    /// Progress: (results received, results expected, any job running).
    pub fn work(&self, now_ps: u64) -> (u64, u64, bool) {
        let mut done = 0;
        let mut total = 0;
        let mut running = false;
        for job in &self.jobs {
            total += job.psns as u64 * job.workers.len() as u64;
            done += job.workers.iter().map(|w| w.win.as_ref().map_or(0, acked) as u64).sum::<u64>();
            running |= now_ps >= job.start_ps && job.done_ps.is_none();
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
                let span = job.done_ps.and_then(|d| job.workers.iter().filter_map(|w| w.first_send_ps).min().map(|f| d.saturating_sub(f)));
                JobResult {
                    job: j as u16,
                    model: job.spec.model.name,
                    workers: job.workers.len(),
                    ps_host: job.spec.ps,
                    switch_node: job.switch,
                    start_ps: job.start_ps,
                    jct_ps: job.done_ps.map(|d| d - job.start_ps),
                    aggregation_utilization: span.filter(|&s| s > 0).map(|s| job.spec.model.epoch_bytes() as f64 * 8.0 / (s as f64 * 1e-12) / self.link_bps as f64),
                    psns: job.psns,
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
        let mut ps = PsStats::default();
        for job in &self.jobs {
            let s = match job.ps.as_ref() {
                Some(Ps::Atp(p)) => &p.dict.stats,
                Some(Ps::Dsa(p)) => &p.dict.stats,
                None => continue,
            };
            add_ps_stats(&mut ps, s);
        }
        let mut wt = WorkerTotals::default();
        for w in self.jobs.iter().flat_map(|j| &j.workers) {
            let Some(s) = w.win.as_ref().map(|x| x.stats()) else { continue };
            wt.new_packets += s.new_packets;
            wt.retransmissions += s.retransmissions;
            wt.timeouts += s.timeouts;
            wt.acks += s.acks;
            wt.duplicate_acks += s.duplicate_acks;
            wt.out_of_order_acks += s.out_of_order_acks;
            wt.ecn_echoes += s.ecn_echoes;
            wt.window_decreases += s.decreases;
            wt.reminder_notices += s.reminders;
            wt.fetched += s.fetched;
        }
        TrainingTotals {
            protocol: self.spec.protocol.label(),
            jobs: self.jobs.len(),
            aggregators_per_switch: self.aggregators,
            mean_jct_ps: (jcts.len() == jobs.len() && !jcts.is_empty()).then(|| jcts.iter().sum::<u64>() as f64 / jcts.len() as f64),
            max_jct_ps: (jcts.len() == jobs.len()).then(|| jcts.iter().copied().max().unwrap_or(0)),
            memory_utilization: (utils.len() == jobs.len() && !utils.is_empty()).then(|| utils.iter().sum::<f64>() / utils.len() as f64),
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

fn acked(w: &WorkerWindow) -> u32 {
    w.acked()
}

/// Whether a result carries every worker's contribution exactly once.
fn check_result(p: &AggPacket, salt: u64, vals: &Values) -> bool {
    let n = p.workers;
    if p.bitmap != pool::full_bitmap(n) {
        return false;
    }
    let fp = (0..n as u32).fold(0u64, |a, r| a.wrapping_add(reducelab_ina::contribution_fp(salt, p.job, r, p.psn)));
    if fp != p.fp {
        return false;
    }
    if vals.enabled() && p.data != NIL {
        let got = vals.get(p.data);
        for e in 0..p.elems as u32 {
            let want = (0..n as u32).fold(0i32, |a, r| a.wrapping_add(reducelab_ina::contribution_value(salt, p.job, r, p.psn, e)));
            if got[e as usize] != want {
                return false;
            }
        }
    } else if vals.enabled() {
        return false;
    }
    true
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

fn add_pool_stats(a: &mut PoolStats, b: &PoolStats) {
    a.aggregated += b.aggregated;
    a.completed += b.completed;
    a.fallbacks += b.fallbacks;
    a.preemptions += b.preemptions;
    a.downgrades += b.downgrades;
    a.duplicates += b.duplicates;
    a.results_resent += b.results_resent;
    a.stale += b.stale;
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

/// Keys of a `training` traffic entry (docs/scenario-format.md).
pub const KEYS: &[&str] = &[
    "protocol", "preemption", "jobs", "workers", "models", "switch_memory_bytes", "start_max_us", "jitter_max_us", "window_bytes", "min_rto_us",
    "ps_restart_us", "values", "model_scale",
];

/// Validates a `training` traffic entry at `f` (`traffic[i]`). Placement (§VII-B: "no
/// overlapping usage of servers among different jobs, and each server contains at most one
/// worker"): job `j`'s workers are hosts `j·workers ..`, its parameter server host
/// `jobs·workers + j`.
pub fn resolve(f: &str, t: &crate::scenario::TrafficSpec, topo: &Topology) -> Result<TrainingSpec, crate::ScenarioError> {
    use crate::scenario::{ns_to_ps, pos_f64};
    let err = |field: &str, reason: String| crate::ScenarioError { field: format!("{f}.{field}"), reason };
    let name = t.protocol.as_deref().unwrap_or("dsa");
    let Some(info) = pool::pool_protocol(name) else {
        let names: Vec<String> = pool::POOL_PROTOCOLS.iter().map(|p| format!("\"{}\"", p.name)).collect();
        return Err(err("protocol", format!("must be one of {} for kind = \"training\", got \"{name}\"", names.join(", "))));
    };
    let protocol = match (info.name, t.preemption.as_deref()) {
        ("switchml", None) => PoolProtocol::SwitchMl,
        ("atp", None) => PoolProtocol::Atp,
        ("dsa", None | Some("priority")) => PoolProtocol::Dsa(Preemption::Priority),
        ("dsa", Some("always")) => PoolProtocol::Dsa(Preemption::Always),
        ("dsa", Some("coin")) => PoolProtocol::Dsa(Preemption::Coin { seed: 0 }),
        ("dsa", Some(other)) => return Err(err("preemption", format!("must be \"priority\", \"always\" or \"coin\", got \"{other}\""))),
        (p, Some(_)) => return Err(err("preemption", format!("is not used by protocol = \"{p}\" (DSA only)"))),
        (p, None) => return Err(err("protocol", format!("\"{p}\" has no driver"))),
    };
    let jobs = t.jobs.unwrap_or(1);
    if jobs == 0 || jobs > 4096 {
        return Err(err("jobs", format!("must be within 1..=4096, got {jobs}")));
    }
    let workers = t.workers.unwrap_or(8);
    if !(1..=64).contains(&workers) {
        return Err(err("workers", format!("must be within 1..=64 (the aggregator bitmap has 64 bits), got {workers}")));
    }
    let names = t.models.clone().unwrap_or_else(|| vec!["A".into()]);
    if names.is_empty() {
        return Err(err("models", "must name at least one model (\"A\" or \"B\")".into()));
    }
    let mut models = Vec::new();
    for (k, m) in names.iter().enumerate() {
        models.push(training::dnn_model(m).ok_or_else(|| err(&format!("models[{k}]"), format!("must be \"A\" or \"B\" (seed 001 §VII-B), got \"{m}\"")))?);
    }
    if let Some(x) = t.model_scale {
        if !(x.is_finite() && x > 0.0 && x <= 1.0) {
            return Err(err("model_scale", format!("must be within (0, 1], got {x}")));
        }
        // Smaller runs of the same shape: partition size and computation time shrink together,
        // so the models keep their communication-to-computation ratios.
        for m in &mut models {
            m.partition_bytes = ((m.partition_bytes as f64 * x).round() as u64).max(ELEMS_PER_PACKET as u64 * 4);
            m.compute_ps_per_layer = (m.compute_ps_per_layer as f64 * x).round() as u64;
        }
    }
    let n = topo.num_hosts() as u64;
    let need = jobs as u64 * workers as u64 + if protocol.uses_ps() { jobs as u64 } else { 0 };
    if need > n {
        return Err(err(
            "jobs",
            format!(
                "{jobs} jobs of {workers} workers{} need {need} hosts; the topology has {n}",
                if protocol.uses_ps() { " and a parameter server each" } else { "" }
            ),
        ));
    }
    let us = |key: &str, v: Option<f64>, default: f64| -> Result<u64, crate::ScenarioError> { ns_to_ps(&format!("{f}.{key}"), v.unwrap_or(default) * 1000.0) };
    let min_rto_ps = us("min_rto_us", t.min_rto_us, 1000.0)?;
    if let Some(v) = t.min_rto_us {
        pos_f64(&format!("{f}.min_rto_us"), v)?;
    }
    let window_bytes = t.window_bytes.unwrap_or(60_000);
    if window_bytes < PACKET_BYTES as u64 || window_bytes > 1 << 32 {
        return Err(err("window_bytes", format!("must be within {PACKET_BYTES}..=4294967296 (at least one {PACKET_BYTES} B packet), got {window_bytes}")));
    }
    let spec = TrainingSpec {
        protocol,
        jobs: (0..jobs)
            .map(|j| JobSpec {
                model: models[j as usize % models.len()],
                workers: (j * workers..(j + 1) * workers).collect(),
                ps: protocol.uses_ps().then_some(jobs * workers + j),
            })
            .collect(),
        memory_bytes: t.switch_memory_bytes.unwrap_or(PoolLayout::DSA_SIMULATION.memory_bytes),
        values: t.values.unwrap_or(false),
        start_max_ps: us("start_max_us", t.start_max_us, 1000.0)?,
        jitter_max_ps: us("jitter_max_us", t.jitter_max_us, 300.0)?,
        window_bytes,
        min_rto_ps,
        ps_restart_ps: match t.ps_restart_us {
            None => None,
            Some(_) if !protocol.uses_ps() => return Err(err("ps_restart_us", format!("protocol = \"{}\" has no parameter server", info.name))),
            Some(v) => Some(ns_to_ps(&format!("{f}.ps_restart_us"), v * 1000.0)?),
        },
    };
    spec.aggregators().map_err(|r| match r.split_once(": ") {
        Some((k, why)) => err(k, why.to_string()),
        None => err("switch_memory_bytes", r),
    })?;
    if protocol == PoolProtocol::SwitchMl {
        even_regions(spec.aggregators().unwrap_or(1), &[(0, 1)].repeat(jobs as usize)).map_err(|r| err("switch_memory_bytes", r))?;
    }
    Ok(spec)
}
