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
//! what is missing; a worker that gave up (a PSN retransmitted `MAX_RETRANSMISSIONS` times with
//! no ACK in between) stops at once with that reason.
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
use reducelab_ina::ps::PsStats;
use reducelab_ina::{pool_wire, training, Values, NIL};
use reducelab_sim::training_run::{check_result, gradient_packet, ELEMS_PER_PACKET};
pub use reducelab_transport::worker::WorkerStats;
use reducelab_transport::worker::{WorkerWindow, MAX_RETRANSMISSIONS};
use serde::Serialize;

use crate::pool_plan::{PoolPlan, Role};
use crate::udp;

/// How the hosts of a pool run are run.
#[derive(Clone, Debug)]
pub struct PoolHostOptions {
    /// Wall-clock limit of each host.
    pub timeout: Duration,
    /// How long a finished worker whose job has workers in other processes keeps answering.
    pub linger: Duration,
}

impl Default for PoolHostOptions {
    fn default() -> Self {
        PoolHostOptions { timeout: Duration::from_secs(10), linger: Duration::from_millis(200) }
    }
}

/// One host of a pool run.
#[derive(Clone, Debug, Serialize)]
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

struct Io {
    sock: std::net::UdpSocket,
    first_hop: SocketAddrV4,
    rx: udp::RxBatch,
    tx: udp::TxQueue,
    frame: Vec<u8>,
    report: PoolHostReport,
}

impl Io {
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
        r.unwrap_or_else(|e| panic!("host {}: the pool frame cannot carry {p:?}: {e} (a protocol bug)", self.report.host));
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
    fn receive(&mut self, vals: &mut Values, mut on: impl FnMut(AggPacket, bool, &mut Values, &mut PoolHostReport)) -> bool {
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

fn run_pool_host(plan: &PoolPlan, host: u32, opts: &PoolHostOptions, shared: &Shared) -> Result<PoolHostReport, String> {
    let role = plan.role(host);
    let node = plan.fabric.host_nodes.get(host as usize).copied();
    let sock = node.ok_or_else(|| format!("host: {host} is not a host of the topology ({} hosts)", plan.fabric.num_hosts())).and_then(|n| udp::bind(plan.endpoints.of(n, 0)));
    // Every thread reaches the barrier, bound or not, so one failure cannot block the rest.
    shared.barrier.wait();
    let sock = sock?;
    let role = role.ok_or_else(|| format!("host: {host} is neither a worker nor a parameter server of the scenario's training jobs"))?;
    let node = node.expect("checked");
    let (sw, sw_port) = plan.fabric.nodes[node as usize].ports[0];
    let (job, rank) = match role {
        Role::Worker { job, rank } => (job, Some(rank)),
        Role::Ps { job } => (job, None),
    };
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
    let mut io = Io { sock, first_hop: plan.endpoints.of(sw, sw_port), rx: udp::RxBatch::new(8), tx: udp::TxQueue::default(), frame: Vec::with_capacity(512), report };
    match rank {
        Some(r) => worker(plan, job, r, opts, shared, io),
        None => {
            let ps = plan.parameter_server(job)?.ok_or_else(|| format!("host {host}: job {job} has no parameter server"))?;
            parameter_server(plan, job, ps, opts, shared, &mut io)?;
            Ok(io.report)
        }
    }
}

fn worker(plan: &PoolPlan, j: u16, rank: u16, opts: &PoolHostOptions, shared: &Shared, mut io: Io) -> Result<PoolHostReport, String> {
    let job = &plan.jobs[j as usize];
    let n = job.workers.len() as u16;
    let parts = &job.plans[rank as usize];
    let host = io.report.host;
    let mut vals = Values::new(ELEMS_PER_PACKET as usize);
    let mut win = WorkerWindow::new(job.psns, job.params);
    win.set_available(training::available_psns(parts, 0));
    io.report.psns = job.psns;
    let epoch = Instant::now();
    let now_ps = || epoch.elapsed().as_nanos() as u64 * 1000;
    let deadline = epoch + opts.timeout;
    let mut done_at: Option<Instant> = None;
    let mut bad = 0u64;
    loop {
        let now = now_ps();
        if win.is_done() && done_at.is_none() {
            done_at = Some(Instant::now());
            io.report.finished_s = Some(epoch.elapsed().as_secs_f64());
            shared.finished[j as usize].fetch_add(1, Ordering::AcqRel);
        }
        if let Some(d) = done_at {
            let all = shared.finished[j as usize].load(Ordering::Acquire) >= n as usize;
            if if shared.all_here[j as usize] { all } else { d.elapsed() >= opts.linger } {
                break;
            }
        }
        if win.gave_up() {
            return Err(format!("host {host} (job {j} worker {rank}): gave up: a PSN was retransmitted {MAX_RETRANSMISSIONS} times with no ACK of any PSN in between; {}", progress(&win, &io.report)));
        }
        if Instant::now() >= deadline {
            if done_at.is_some() {
                break; // every result is in; the job's other workers report their own errors
            }
            return Err(format!("host {host} (job {j} worker {rank}): timed out after {:.1} s: {}", opts.timeout.as_secs_f64(), progress(&win, &io.report)));
        }
        win.set_available(training::available_psns(parts, now));
        if win.timer_ps().is_some_and(|t| t <= now) {
            win.on_timer(now);
        }
        let mut sent = false;
        loop {
            if let Some(psn) = win.take_reminder() {
                let mut p = AggPacket::new(PacketKind::ReminderNotice, Dest::Ps, j, psn, n);
                p.bitmap = 1u64 << rank;
                io.queue(&p, &mut vals, false);
                sent = true;
                continue;
            }
            let Some(s) = win.transmit(now_ps()) else {
                break;
            };
            let p = gradient_packet(plan.spec.protocol, plan.salt, j, rank, n, s, parts, &job.model, plan.link_bps, &mut vals);
            io.queue(&p, &mut vals, false);
            sent = true;
        }
        io.flush();
        let salt = plan.salt;
        let got = io.receive(&mut vals, |p, ecn, vals, report| {
            if p.job != j {
                report.misdelivered += 1;
            } else {
                match p.kind {
                    PacketKind::Ack => {
                        if win.on_ack(p.psn, ecn, now_ps()) && !check_result(&p, salt, vals) {
                            bad += 1;
                        }
                    }
                    PacketKind::Fetch => win.on_fetch(p.psn),
                    _ => report.misdelivered += 1,
                }
            }
            vals.release(p.data);
        });
        if !got && !sent {
            let now = now_ps();
            let mut wait = Duration::from_millis(20).min(deadline.saturating_duration_since(Instant::now()));
            for t in [win.timer_ps(), training::next_ready_ps(parts, now)].into_iter().flatten() {
                wait = wait.min(Duration::from_nanos(t.saturating_sub(now) / 1000));
            }
            if let Some(d) = done_at {
                wait = wait.min((d + opts.linger).saturating_duration_since(Instant::now()));
            }
            io.wait(wait);
        }
    }
    io.report.elapsed_s = epoch.elapsed().as_secs_f64();
    io.report.bad_results = bad;
    io.report.worker = Some(win.stats());
    io.report.verified = win.is_done() && bad == 0;
    if bad > 0 {
        return Err(format!("host {host} (job {j} worker {rank}): {bad} of {} results differ from the exact sum of the workers' contributions", job.psns));
    }
    Ok(io.report)
}

fn progress(win: &WorkerWindow, r: &PoolHostReport) -> String {
    let s = win.stats();
    let why = if r.rx_packets == 0 { "nothing came back (is the switch running?)".to_string() } else { format!("received {} ACKs ({} duplicates)", s.acks, s.duplicate_acks) };
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

fn parameter_server(plan: &PoolPlan, j: u16, mut ps: reducelab_sim::training_run::Ps, opts: &PoolHostOptions, shared: &Shared, io: &mut Io) -> Result<(), String> {
    let n = plan.jobs[j as usize].workers.len();
    let mut vals = Values::new(ELEMS_PER_PACKET as usize);
    let epoch = Instant::now();
    let now_ps = || epoch.elapsed().as_nanos() as u64 * 1000;
    let deadline = epoch + opts.timeout;
    let mut timers: BinaryHeap<Reverse<(u64, u64, u64)>> = BinaryHeap::new();
    let mut seq = 0u64;
    let mut out: Vec<PsAction> = Vec::new();
    // The simulator's echo: a marked packet reaching the PS marks its next ACK.
    let mut mark = false;
    let mut restart_at = plan.spec.ps_restart_ps;
    let leaves = plan.jobs[j as usize].tree.as_ref().map_or(0, |t| t.leaves.len() as u16);
    let mut carry = |out: &mut Vec<PsAction>, vals: &mut Values, io: &mut Io, timers: &mut BinaryHeap<Reverse<(u64, u64, u64)>>, mark: &mut bool| {
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
        if shared.all_here[j as usize] && shared.finished[j as usize].load(Ordering::Acquire) >= n {
            break;
        }
        if Instant::now() >= deadline {
            break; // a server: it served until the deadline; its workers report what is missing
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
        for (p, ecn) in pending {
            mark |= ecn;
            ps.on_packet(now_ps(), p, &mut vals, &mut out);
            carry(&mut out, &mut vals, io, &mut timers, &mut mark);
        }
        io.flush();
        if !got {
            let mut wait = Duration::from_millis(20).min(deadline.saturating_duration_since(Instant::now()));
            for at in [timers.peek().map(|&Reverse((at, ..))| at), restart_at].into_iter().flatten() {
                wait = wait.min(Duration::from_nanos(at.saturating_sub(now_ps()) / 1000));
            }
            io.wait(wait);
        }
    }
    io.report.elapsed_s = epoch.elapsed().as_secs_f64();
    io.report.ps = Some(ps.stats().clone());
    // A PS checks nothing itself: "verified" says its job's workers here all finished verified.
    io.report.verified = shared.all_here[j as usize] && shared.finished[j as usize].load(Ordering::Acquire) >= n;
    Ok(())
}
