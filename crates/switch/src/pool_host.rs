//! The hosts of a pool run over real UDP sockets: **workers** driving the worker transport's
//! [`WorkerWindow`] (the simulator's state machine: slots for SwitchML, AIMD windows, per-packet
//! timeouts, ATP's gap resends, DSA's reminder notices and fetches) and **parameter servers**
//! driving the simulator's [`Ps`] (ATP's, DSA's with its reminder timers). Timers run on a
//! monotonic clock read as integer picoseconds since the run's start (every host of a process
//! starts together at a barrier, so the partitions' ready times — job start and jitter drawn
//! from the seed, as in the simulator — are the same instants for every worker).
//!
//! Every worker checks the first ACK of every PSN with the simulator's `check_result`: full
//! bitmap, the fingerprint sum of every worker's contribution and each of its 62 int32 values
//! against the exact sum. A host that cannot finish stops at its deadline with an error naming
//! what is missing. A worker that gave up (a PSN retransmitted `MAX_RETRANSMISSIONS` times with
//! no ACK in between) still answers its PS's fetches and resumes on the next new ACK, as in the
//! simulator; with no ACK for `linger` after giving up (200 ms for a session's call), it stops
//! with that reason.
//!
//! **Staying.** A worker with every result keeps answering its PS's fetches (DSA's reminder
//! asks every worker of a job for its original packet, even one that already has the result)
//! until every worker of its job has finished, when they are all threads of this process, or
//! for `linger` otherwise. A parameter server stops once every worker of its job (all in this
//! process) has finished; with workers elsewhere it serves until its deadline.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::net::SocketAddrV4;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use reducelab_ina::pool::{AggPacket, Dest, PacketKind, PsAction};
use reducelab_ina::pool_jobs::{check_result, gradient_packet, Ps, ELEMS_PER_PACKET};
use reducelab_ina::ps::PsStats;
use reducelab_ina::{pool_wire, training, Values, NIL};
pub use reducelab_transport::worker::WorkerStats;
use reducelab_transport::worker::{Send, WorkerWindow, MAX_RETRANSMISSIONS};
use serde::Serialize;

use crate::pool_plan::{PoolPlan, Role};
use crate::udp;

/// How the hosts of a pool run are run.
#[derive(Clone, Debug)]
pub struct PoolHostOptions {
    /// Wall-clock limit of each host.
    pub timeout: Duration,
    /// How long a finished worker whose job has workers in other processes keeps answering,
    /// and how long a worker that gave up waits for an ACK that resumes it.
    pub linger: Duration,
}

impl Default for PoolHostOptions {
    fn default() -> Self {
        PoolHostOptions { timeout: Duration::from_secs(10), linger: Duration::from_millis(200) }
    }
}

/// One host of a pool run.
#[derive(Clone, Debug, Default, Serialize)]
pub struct PoolHostReport {
    pub host: u32,
    /// `worker` or `ps`.
    pub role: &'static str,
    pub job: u16,
    pub rank: Option<u16>,
    /// Workers: PSNs of the epoch; every one acknowledged and checked when `verified`.
    pub psns: u32,
    /// Workers: seconds from the start until the last result.
    pub finished_s: Option<f64>,
    pub verified: bool,
    /// Results that differed from the exact sum.
    pub bad_results: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub worker: Option<WorkerStats>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ps: Option<PsStats>,
    /// PS: restarts (`ps_restart_us`) and the partial aggregates they lost.
    pub ps_restarts: u32,
    pub ps_partials_lost: u64,
    /// Packets that arrived with an ECN mark (a worker's marked ACKs; a PS's marked packets,
    /// each echoed on its next ACK).
    pub ecn_marked_rx: u64,
    pub tx_packets: u64,
    pub rx_packets: u64,
    pub malformed: u64,
    /// Packets of another job, or of a kind this host does not take.
    pub misdelivered: u64,
    pub send_errors: u64,
    pub elapsed_s: f64,
}

/// Shared by the host threads of one process.
struct Shared {
    barrier: Barrier,
    /// Per job: finished workers of this process.
    finished: Vec<AtomicUsize>,
    /// Per job: whether all its workers are threads of this process.
    all_here: Vec<bool>,
}

/// Runs `hosts` of `plan` as threads of this process, started together; each host's report or
/// error.
pub fn run_pool_hosts(plan: &PoolPlan, hosts: &[u32], opts: &PoolHostOptions) -> Vec<Result<PoolHostReport, String>> {
    let shared = Arc::new(Shared {
        barrier: Barrier::new(hosts.len()),
        finished: plan.jobs.iter().map(|_| AtomicUsize::new(0)).collect(),
        all_here: plan.jobs.iter().map(|j| j.workers.iter().all(|w| hosts.contains(w))).collect(),
    });
    std::thread::scope(|s| {
        let hs: Vec<_> = hosts
            .iter()
            .map(|&h| {
                let shared = shared.clone();
                s.spawn(move || run_pool_host(plan, h, opts, &shared))
            })
            .collect();
        hs.into_iter().map(|h| h.join().unwrap_or_else(|_| Err("host thread panicked".into()))).collect()
    })
}

pub(crate) struct Io {
    pub sock: std::net::UdpSocket,
    pub first_hop: SocketAddrV4,
    pub rx: udp::RxBatch,
    pub tx: udp::TxQueue,
    pub frame: Vec<u8>,
    pub report: PoolHostReport,
}

impl Io {
    /// Host `host`'s agent (a worker of `rank`, or job `job`'s PS without) on `sock`.
    pub(crate) fn new(
        sock: std::net::UdpSocket,
        first_hop: SocketAddrV4,
        host: u32,
        job: u16,
        rank: Option<u16>,
    ) -> Io {
        let report = PoolHostReport {
            host,
            role: if rank.is_some() { "worker" } else { "ps" },
            job,
            rank,
            psns: 0,
            finished_s: None,
            verified: false,
            bad_results: 0,
            worker: None,
            ps: None,
            ps_restarts: 0,
            ps_partials_lost: 0,
            ecn_marked_rx: 0,
            tx_packets: 0,
            rx_packets: 0,
            malformed: 0,
            misdelivered: 0,
            send_errors: 0,
            elapsed_s: 0.0,
        };
        Io {
            sock,
            first_hop,
            rx: udp::RxBatch::new(8),
            tx: udp::TxQueue::default(),
            frame: Vec::with_capacity(512),
            report,
        }
    }
    /// Queues `p` (`ecn`: with an ECN mark, a PS's echo).
    fn queue(&mut self, p: &AggPacket, vals: &mut Values, ecn: bool) {
        self.encode(p, vals);
        if ecn {
            pool_wire::mark_ecn(&mut self.frame);
        }
        self.tx.push(&self.frame);
    }
    /// `p`'s frame into `self.frame` (its values released).
    fn encode(&mut self, p: &AggPacket, vals: &mut Values) {
        self.frame.clear();
        let values = (p.data != NIL).then(|| vals.get(p.data));
        let r = pool_wire::emit(p, values, &mut self.frame);
        vals.release(p.data);
        r.unwrap_or_else(|e| {
            panic!("host {}: the pool frame cannot carry {p:?}: {e} (a protocol bug)", self.report.host)
        });
    }
    /// Queues a copy of `p` addressed to child `c` of its job's tree (the leaf's switch).
    fn queue_to_child(&mut self, p: &AggPacket, vals: &mut Values, c: u16) {
        self.encode(&p.copy(vals), vals);
        pool_wire::set_tree_child(&mut self.frame, c);
        self.tx.push(&self.frame);
    }
    fn flush(&mut self) {
        if !self.tx.is_empty() {
            let (sent, _, failed) = self.tx.flush(&self.sock, self.first_hop);
            self.report.tx_packets += sent;
            self.report.send_errors += failed;
        }
    }
    /// Every datagram waiting, parsed into `vals` with its ECN mark (frames from anyone but the
    /// first hop, and malformed ones, are counted and dropped).
    fn receive(
        &mut self,
        vals: &mut Values,
        mut on: impl FnMut(AggPacket, bool, &mut Values, &mut PoolHostReport),
    ) -> bool {
        let mut got = false;
        loop {
            let n = self.rx.recv(&self.sock);
            if n == 0 {
                return got;
            }
            got = true;
            for i in 0..n {
                let (from, datagrams) = self.rx.get(i);
                for bytes in datagrams {
                    self.report.rx_packets += 1;
                    if from != self.first_hop {
                        self.report.misdelivered += 1;
                        continue;
                    }
                    let slot = vals.alloc();
                    match pool_wire::parse_into(bytes, vals.get_mut(slot)) {
                        Ok(mut p) => {
                            p.data = slot;
                            let ecn = pool_wire::ecn(bytes);
                            self.report.ecn_marked_rx += ecn as u64;
                            on(p, ecn, vals, &mut self.report);
                        }
                        Err(_) => {
                            vals.release(slot);
                            self.report.malformed += 1;
                        }
                    }
                }
            }
        }
    }
    fn wait(&self, d: Duration) {
        let mut ready = Vec::new();
        udp::poll_readable(std::slice::from_ref(&self.sock), d, &mut ready);
    }
}

fn run_pool_host(
    plan: &PoolPlan,
    host: u32,
    opts: &PoolHostOptions,
    shared: &Shared,
) -> Result<PoolHostReport, String> {
    let role = plan.role(host);
    let node = plan.fabric.host_nodes.get(host as usize).copied();
    let sock = node
        .ok_or_else(|| format!("host: {host} is not a host of the topology ({} hosts)", plan.fabric.num_hosts()))
        .and_then(|n| udp::bind(plan.endpoints.of(n, 0)));
    // Every thread reaches the barrier, bound or not, so one failure cannot block the rest.
    shared.barrier.wait();
    let sock = sock?;
    let role = role.ok_or_else(|| {
        format!("host: {host} is neither a worker nor a parameter server of the scenario's training jobs")
    })?;
    let node = node.expect("checked");
    let (sw, sw_port) = plan.fabric.nodes[node as usize].ports[0];
    let (job, rank) = match role {
        Role::Worker { job, rank } => (job, Some(rank)),
        Role::Ps { job } => (job, None),
    };
    let mut io = Io::new(sock, plan.endpoints.of(sw, sw_port), host, job, rank);
    match rank {
        Some(r) => worker(plan, job, r, opts, shared, io),
        None => {
            let ps =
                plan.parameter_server(job)?.ok_or_else(|| format!("host {host}: job {job} has no parameter server"))?;
            parameter_server(plan, job, ps, opts, shared, &mut io)?;
            Ok(io.report)
        }
    }
}

fn worker(
    plan: &PoolPlan,
    j: u16,
    rank: u16,
    opts: &PoolHostOptions,
    shared: &Shared,
    mut io: Io,
) -> Result<PoolHostReport, String> {
    let job = &plan.jobs[j as usize];
    let n = job.workers.len() as u16;
    let mut vals = Values::new(ELEMS_PER_PACKET as usize);
    let mut win = WorkerWindow::new(job.psns, job.params);
    io.report.psns = job.psns;
    let epoch = Instant::now();
    let mut model = Model { plan, job: j, rank, workers: n, parts: &job.plans[rank as usize] };
    let finished = &shared.finished[j as usize];
    let all_done = || finished.load(Ordering::Acquire) >= n as usize;
    let stay = Stay {
        linger: opts.linger,
        resume: opts.linger,
        job_done: shared.all_here[j as usize].then_some(&all_done as &dyn Fn() -> bool),
        until_told: false,
    };
    let ctx = WorkerCtx { job: j, rank, workers: n, epoch, deadline: epoch + opts.timeout, timeout: opts.timeout };
    let bad = drive_worker(&ctx, &mut win, &mut io, &mut vals, &mut model, None, &stay, |_| {
        finished.fetch_add(1, Ordering::AcqRel);
    })?;
    io.report.elapsed_s = epoch.elapsed().as_secs_f64();
    io.report.bad_results = bad;
    io.report.worker = Some(win.stats());
    io.report.verified = win.is_done() && bad == 0;
    if bad > 0 {
        return Err(format!("host {} (job {j} worker {rank}): {bad} of {} results differ from the exact sum of the workers' contributions", io.report.host, job.psns));
    }
    Ok(io.report)
}

/// What a worker's packets carry and what it does with their results: a training job's
/// gradients ([`Model`], the simulator's) or an application's vector (the pool session,
/// [`crate::pool_session`]). The protocol (the window, timers, reminders, fetches, the ACK
/// path) is [`drive_worker`]'s, the same for both.
pub(crate) trait Tensor {
    /// The wire PSN of the window's PSN 0 (a session's calls take successive ranges).
    fn base(&self) -> u32;
    /// Window PSNs that may be sent at `now_ps` (a training job's partitions become ready as
    /// its layers are computed).
    fn available(&self, now_ps: u64) -> u32;
    /// When more become available after `now_ps` (`None`: no more).
    fn next_ready_ps(&self, now_ps: u64) -> Option<u64>;
    /// The gradient packet of `s` (a window PSN), its values in `vals`.
    fn packet(&mut self, s: Send, vals: &mut Values) -> AggPacket;
    /// The first ACK of window PSN `psn`: whether it is right (and take its values).
    fn result(&mut self, psn: u32, p: &AggPacket, vals: &Values) -> bool;
}

/// The training job's gradients, as the simulator makes and checks them.
struct Model<'a> {
    plan: &'a PoolPlan,
    job: u16,
    rank: u16,
    workers: u16,
    parts: &'a [reducelab_ina::training::Partition],
}

impl Tensor for Model<'_> {
    fn base(&self) -> u32 {
        0
    }
    fn available(&self, now_ps: u64) -> u32 {
        training::available_psns(self.parts, now_ps)
    }
    fn next_ready_ps(&self, now_ps: u64) -> Option<u64> {
        training::next_ready_ps(self.parts, now_ps)
    }
    fn packet(&mut self, s: Send, vals: &mut Values) -> AggPacket {
        let (plan, j) = (self.plan, self.job as usize);
        gradient_packet(
            plan.spec.protocol,
            plan.salt,
            self.job,
            self.rank,
            self.workers,
            s,
            self.parts,
            &plan.jobs[j].model,
            plan.link_bps,
            vals,
        )
    }
    fn result(&mut self, _psn: u32, p: &AggPacket, vals: &Values) -> bool {
        check_result(p, self.plan.salt, vals)
    }
}

/// Who a worker is and its time limits.
pub(crate) struct WorkerCtx {
    pub job: u16,
    pub rank: u16,
    pub workers: u16,
    /// The programs' clock: picoseconds since `epoch`.
    pub epoch: Instant,
    pub deadline: Instant,
    pub timeout: Duration,
}

/// How long a worker with every result stays to answer its PS's fetches: until `job_done`
/// (every worker of the job is a thread of this process, or a session's next call begins) or
/// for `linger`.
pub(crate) struct Stay<'a> {
    pub linger: Duration,
    /// How long a worker that gave up waits for an ACK that resumes it.
    pub resume: Duration,
    pub job_done: Option<&'a dyn Fn() -> bool>,
    /// Once done, stay past the deadline until `job_done`, checking it at least every
    /// millisecond (a session's rank between calls: the next call asks it to stop).
    pub until_told: bool,
}

/// One worker agent over `io` until every PSN of `win`'s tensor has its result (and the worker
/// has stayed as `stay` says): the number of wrong results, or an error naming what is missing
/// (a give-up, the deadline). `on_done` runs once, when the last result comes, with the
/// worker's counters then (its window's in `worker`). ACKs and fetches
/// for wire PSNs outside `t`'s range (a late packet of an earlier tensor) are counted as
/// misdelivered and dropped, except fetches of the `earlier` tensor's PSNs (with its packet
/// count: a session's previous call, whose PSNs DSA's PS may still fetch), answered from it.
#[allow(clippy::too_many_arguments)]
pub(crate) fn drive_worker(
    ctx: &WorkerCtx,
    win: &mut WorkerWindow,
    io: &mut Io,
    vals: &mut Values,
    t: &mut impl Tensor,
    mut earlier: Option<(&mut dyn Tensor, u32)>,
    stay: &Stay,
    mut on_done: impl FnMut(&PoolHostReport),
) -> Result<u64, String> {
    let (j, rank, n) = (ctx.job, ctx.rank, ctx.workers);
    let epoch = ctx.epoch;
    let now_ps = || epoch.elapsed().as_nanos() as u64 * 1000;
    let deadline = ctx.deadline;
    let host = io.report.host;
    let base = t.base();
    let packets = win.packets();
    let local = |psn: u32| psn.checked_sub(base).filter(|&q| q < packets);
    let earlier_range = earlier.as_ref().map(|(e, n)| (e.base(), *n));
    let in_earlier = |psn: u32| earlier_range.and_then(|(b, n)| psn.checked_sub(b).filter(|&q| q < n));
    let mut fetched_earlier: Vec<u32> = Vec::new();
    let mut done_at: Option<Instant> = None;
    let mut gave_up_at: Option<Instant> = None;
    let mut bad = 0u64;
    loop {
        let now = now_ps();
        if win.is_done() && done_at.is_none() {
            done_at = Some(Instant::now());
            io.report.finished_s = Some(epoch.elapsed().as_secs_f64());
            io.report.worker = Some(win.stats());
            on_done(&io.report);
        }
        if let Some(d) = done_at {
            if match stay.job_done {
                Some(all) => all(),
                None => d.elapsed() >= stay.linger,
            } {
                break;
            }
        }
        // A worker that gave up still answers its PS's fetches, and a new ACK resumes it (the
        // simulator's rule); with none for `linger`, it ends with the reason.
        match (win.gave_up(), gave_up_at) {
            (true, None) => gave_up_at = Some(Instant::now()),
            (true, Some(at)) if at.elapsed() >= stay.resume => {
                return Err(format!("host {host} (job {j} worker {rank}): gave up: a PSN was retransmitted {MAX_RETRANSMISSIONS} times with no ACK of any PSN in between, and no ACK came in the {:.0} ms after; {}", stay.resume.as_secs_f64() * 1e3, progress(win, &io.report)));
            }
            (true, Some(_)) => {}
            (false, _) => gave_up_at = None,
        }
        if Instant::now() >= deadline && !(stay.until_told && done_at.is_some()) {
            if done_at.is_some() {
                break; // every result is in; the job's other workers report their own errors
            }
            return Err(format!(
                "host {host} (job {j} worker {rank}): timed out after {:.1} s: {}",
                ctx.timeout.as_secs_f64(),
                progress(win, &io.report)
            ));
        }
        win.set_available(t.available(now));
        if win.timer_ps().is_some_and(|t| t <= now) {
            win.on_timer(now);
        }
        let mut sent = false;
        loop {
            if let Some(psn) = win.take_reminder() {
                let mut p = AggPacket::new(PacketKind::ReminderNotice, Dest::Ps, j, base + psn, n);
                p.bitmap = 1u64 << rank;
                io.queue(&p, vals, false);
                sent = true;
                continue;
            }
            let Some(s) = win.transmit(now_ps()) else {
                break;
            };
            let p = t.packet(s, vals);
            io.queue(&p, vals, false);
            sent = true;
        }
        io.flush();
        let got = io.receive(vals, |p, ecn, vals, report| {
            match (p.job == j).then(|| local(p.psn)).flatten() {
                None => match (p.kind, (p.job == j).then(|| in_earlier(p.psn)).flatten()) {
                    (PacketKind::Fetch, Some(q)) => fetched_earlier.push(q),
                    _ => report.misdelivered += 1,
                },
                Some(q) => match p.kind {
                    PacketKind::Ack => {
                        if win.on_ack(q, ecn, now_ps()) && !t.result(q, &p, vals) {
                            bad += 1;
                        }
                    }
                    PacketKind::Fetch => win.on_fetch(q),
                    _ => report.misdelivered += 1,
                },
            }
            vals.release(p.data);
        });
        if let Some((e, _)) = earlier.as_mut() {
            for q in fetched_earlier.drain(..) {
                let p = e.packet(Send { psn: q, retransmission: true, to_ps: true }, vals);
                io.queue(&p, vals, false);
            }
            io.flush();
        }
        if !got && !sent {
            let now = now_ps();
            let mut wait = Duration::from_millis(20).min(deadline.saturating_duration_since(Instant::now()));
            for t in [win.timer_ps(), t.next_ready_ps(now)].into_iter().flatten() {
                wait = wait.min(Duration::from_nanos(t.saturating_sub(now) / 1000));
            }
            if let Some(g) = gave_up_at {
                wait = wait.min((g + stay.resume).saturating_duration_since(Instant::now()));
            }
            if let Some(d) = done_at {
                wait = if stay.until_told {
                    Duration::from_millis(1)
                } else {
                    wait.min((d + stay.linger).saturating_duration_since(Instant::now()))
                };
            }
            io.wait(wait);
        }
    }
    Ok(bad)
}

fn progress(win: &WorkerWindow, r: &PoolHostReport) -> String {
    let s = win.stats();
    let why = if r.rx_packets == 0 {
        "nothing came back (is the switch running?)".to_string()
    } else {
        format!("received {} ACKs ({} duplicates)", s.acks, s.duplicate_acks)
    };
    format!(
        "{} of {} results missing (lowest PSN {}); sent {} packets, {} retransmissions after {} timeouts, {} reminder notices, {} fetched copies; {why}",
        win.packets() - win.acked(),
        win.packets(),
        win.base(),
        s.new_packets,
        s.retransmissions,
        s.timeouts,
        s.reminder_notices,
        s.fetched
    )
}

fn parameter_server(
    plan: &PoolPlan,
    j: u16,
    mut ps: Ps,
    opts: &PoolHostOptions,
    shared: &Shared,
    io: &mut Io,
) -> Result<(), String> {
    let n = plan.jobs[j as usize].workers.len();
    let epoch = Instant::now();
    let all_done = || shared.all_here[j as usize] && shared.finished[j as usize].load(Ordering::Acquire) >= n;
    // A server: it serves until the deadline; its workers report what is missing.
    let tree = PsTree {
        restart_ps: plan.spec.ps_restart_ps,
        leaves: plan.jobs[j as usize].tree.as_ref().map_or(0, |t| t.leaves.len() as u16),
    };
    serve_ps(j, &mut ps, io, epoch, Some(epoch + opts.timeout), tree, |_, _, _| all_done());
    io.report.elapsed_s = epoch.elapsed().as_secs_f64();
    io.report.ps = Some(ps.stats().clone());
    // A PS checks nothing itself: "verified" says its job's workers here all finished verified.
    io.report.verified = all_done();
    Ok(())
}

/// What a training job's PS does beside serving packets: its restart (`ps_restart_us`, ps on
/// the clock of its epoch) and the leaves of its job's tree (0: no tree), to each of which a
/// DSA reminder goes too.
#[derive(Clone, Copy, Default)]
pub(crate) struct PsTree {
    pub restart_ps: Option<u64>,
    pub leaves: u16,
}

/// Job `j`'s parameter server over `io` (its timers on the clock of `epoch`) until `stop`
/// (asked every round with the server, its values and when the last packet came) or the
/// deadline.
pub(crate) fn serve_ps(
    j: u16,
    ps: &mut Ps,
    io: &mut Io,
    epoch: Instant,
    deadline: Option<Instant>,
    tree: PsTree,
    mut stop: impl FnMut(&mut Ps, &mut Values, Instant) -> bool,
) {
    let mut vals = Values::new(ELEMS_PER_PACKET as usize);
    let now_ps = || epoch.elapsed().as_nanos() as u64 * 1000;
    let mut timers: BinaryHeap<Reverse<(u64, u64, u64)>> = BinaryHeap::new();
    let mut seq = 0u64;
    let mut out: Vec<PsAction> = Vec::new();
    let mut last_rx = Instant::now();
    // The simulator's echo: a marked packet reaching the PS marks its next ACK.
    let mut mark = false;
    let mut restart_at = tree.restart_ps;
    let leaves = tree.leaves;
    let mut carry = |out: &mut Vec<PsAction>,
                     vals: &mut Values,
                     io: &mut Io,
                     timers: &mut BinaryHeap<Reverse<(u64, u64, u64)>>,
                     mark: &mut bool| {
        for a in out.drain(..) {
            match a {
                PsAction::Send(p) => {
                    let ecn = p.kind == PacketKind::Ack && std::mem::take(mark);
                    if p.kind == PacketKind::Reminder {
                        // The simulator's `ps_actions`: on a tree, DSA's reminder fetches every
                        // switch's partial, one copy addressed to each leaf.
                        for c in 0..leaves {
                            io.queue_to_child(&p, vals, c);
                        }
                    }
                    io.queue(&p, vals, ecn)
                }
                PsAction::Timer { at, token } => {
                    seq += 1;
                    timers.push(Reverse((at, seq, token)));
                }
            }
        }
    };
    loop {
        if stop(ps, &mut vals, last_rx) {
            break;
        }
        if deadline.is_some_and(|d| Instant::now() >= d) {
            break;
        }
        if restart_at.is_some_and(|t| now_ps() >= t) {
            // `ps_restart_us`, the simulator's model: the partial aggregates in memory are lost,
            // the completed results (the parameters) kept; timers stay armed.
            restart_at = None;
            io.report.ps_restarts += 1;
            io.report.ps_partials_lost += ps.pending() as u64;
            ps.restart(&mut vals);
        }
        while let Some(&Reverse((at, _, token))) = timers.peek() {
            let now = now_ps();
            if at > now {
                break;
            }
            timers.pop();
            ps.on_timer(now, token, &mut out);
            carry(&mut out, &mut vals, io, &mut timers, &mut mark);
        }
        io.flush();
        let mut pending = Vec::new();
        let got = io.receive(&mut vals, |p, ecn, vals, report| {
            if p.job != j {
                report.misdelivered += 1;
                vals.release(p.data);
            } else {
                pending.push((p, ecn));
            }
        });
        if got {
            last_rx = Instant::now();
        }
        for (p, ecn) in pending {
            mark |= ecn;
            ps.on_packet(now_ps(), p, &mut vals, &mut out);
            carry(&mut out, &mut vals, io, &mut timers, &mut mark);
        }
        io.flush();
        if !got {
            let mut wait = Duration::from_millis(20);
            if let Some(d) = deadline {
                wait = wait.min(d.saturating_duration_since(Instant::now()));
            }
            for at in [timers.peek().map(|&Reverse((at, ..))| at), restart_at].into_iter().flatten() {
                wait = wait.min(Duration::from_nanos(at.saturating_sub(now_ps()) / 1000));
            }
            io.wait(wait);
        }
    }
}
