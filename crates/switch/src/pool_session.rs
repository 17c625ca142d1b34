//! A rank that stays, for the **pool protocols**: one worker of a scenario's training job whose
//! switch is already running, with its socket bound once and one allreduce per call on
//! application data. [`crate::Session`] opens one of these when the scenario's traffic is a
//! training job (SwitchML, ATP or DSA).
//!
//! **The same worker agent.** A call drives [`crate::pool_host::drive_worker`], the loop of the
//! training run's workers (the simulator's `WorkerWindow`: SwitchML's slots, ATP's AIMD window,
//! per-packet timeouts, ATP's gap resends), with the packets built by the simulator's
//! `gradient_packet` (the protocol's flags) carrying the application's values instead of the
//! model's: 62 int32 per packet, the last packet of a call shorter.
//!
//! **Calls on the switch's program.** The switch's state is keyed by (job, PSN): SwitchML's
//! slot `p mod slots` of set `(p / slots) mod 2`, ATP's aggregator `hash(job, p)` and its PS's
//! dictionary. So call `k` takes the next range of PSNs, `[b_k, b_k + packets_k)`, with
//! `b_{k+1} = b_k + packets_k`: SwitchML's pool streams a tensor of any length through its
//! fixed slots (a worker sends PSN `p` once it has the result of `p - slots`, which for the first
//! `slots` PSNs of a call is in the previous call, already complete), and a late packet of an
//! earlier call carries a lower PSN: the switch answers it from the kept result or drops it as
//! stale (SwitchML), or holds it under its own task (ATP), and the worker drops any ACK outside
//! its call's range (counted as misdelivered); it is never added into a later call. The PSN is
//! 32 bits: a session carries at most 2^32 packets (1 TiB); a call beyond that is refused.
//!
//! **One session per switch start (SwitchML).** The switch keeps its slots' PSNs after a
//! session ends (SwitchML's control plane resets a job's region when the job starts; the
//! software switch has no control plane), so a second session starting again at PSN 0 finds its
//! packets older than the slots' uses and dropped as stale: restart the switch between
//! sessions. ATP keeps no state a new session's packets could be added to except aggregators
//! reserved by late retransmissions (the "leak" of DSA §IV-A) — restart it too.
//!
//! **ATP's parameter server** is a thread of rank 0's process, bound to the scenario's PS host.
//! Why there and not in a separate process: its dictionary keeps the results of PSNs (to answer
//! a worker that lost one), which must live exactly as long as the session's PSN space — a
//! server that outlived a session would answer the next session's PSN `p` with the old result —
//! and rank 0 learns when results may be forgotten: when rank 0 starts call `k`, every rank has
//! contributed every PSN of call `k - 1`, so every rank has every result of call `k - 2` and
//! the server drops them (its memory holds at most two calls). When rank 0 closes, its server
//! stays until no packet has reached it for [`PS_IDLE`] (a rank still missing a result of the
//! last call resends to it within its timeout).
//!
//! **DSA's workers answer between calls.** Its reminder (§IV-B) fetches a PSN's original
//! gradient from every worker of the job, including those that already have the result and went
//! back to the application (which may be waiting, in MPI, for the very rank that lacks it). So a
//! DSA rank's call runs its worker in a thread of its own that, once every result is in, hands
//! the result back and stays, answering fetches of that call's PSNs from a copy of the call's
//! data, until the next call (or the session's close, after [`PS_IDLE`]) tells it to stop.
//! (The training run's workers stay for the same reason, `pool_host`, "Staying".) A fetch for a
//! PSN of the next call that reaches it meanwhile is dropped (counted as misdelivered); the PS
//! asks again after its reminder timeout.

use std::net::{SocketAddrV4, UdpSocket};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use reducelab_ina::pool::{full_bitmap, AggPacket};
use reducelab_ina::pool_jobs::{gradient_packet, Ps, ELEMS_PER_PACKET};
use reducelab_ina::Values;
use reducelab_transport::worker::{Send, WorkerWindow};

use crate::plan::EndpointSpec;
use crate::pool_host::{drive_worker, serve_ps, Io, PoolHostReport, PsTree, Stay, Tensor, WorkerCtx};
use crate::pool_plan::PoolPlan;
use crate::udp;

/// How long a rank whose worker gave up during a call waits for an ACK that resumes it before
/// the call fails (the training hosts' default linger).
const RESUME_WAIT: Duration = Duration::from_millis(200);

/// How long rank 0's parameter server stays after its session closes without hearing a packet.
pub const PS_IDLE: Duration = Duration::from_millis(500);

/// One worker of a pool session (see the module documentation).
pub struct PoolSession {
    plan: Arc<PoolPlan>,
    rank: u16,
    /// The worker's socket, values and window; held by the responder between a DSA rank's calls.
    worker: Option<Worker>,
    responder: Option<Responder>,
    /// The worker's counters when the last call returned (while the responder holds it).
    last_report: Option<PoolHostReport>,
    /// The wire PSN of the next call's first packet.
    next_psn: u32,
    /// The first PSN of the previous call (what rank 0's PS may forget below at the next).
    prev_base: u32,
    calls: u64,
    epoch: Instant,
    timeout: Duration,
    ps: Option<PsThread>,
}

struct Worker {
    io: Io,
    vals: Values,
    win: Option<WorkerWindow>,
    /// The last call's tensor and its packets (DSA: its PSNs may still be fetched in the next).
    last: Option<(AppTensor, u32)>,
}

/// A DSA rank's worker thread after its call returned: answering fetches until told to stop.
struct Responder {
    stop: Arc<AtomicBool>,
    handle: JoinHandle<(Worker, Result<u64, String>)>,
}

impl Responder {
    /// Stops it and takes the worker back, with its error if it failed.
    fn finish(self) -> Result<(Worker, Result<u64, String>), String> {
        self.stop.store(true, Ordering::Release);
        self.handle.join().map_err(|_| "the worker thread panicked".to_string())
    }
}

struct PsThread {
    stop: Arc<AtomicBool>,
    forget_below: Arc<AtomicU32>,
    handle: Option<JoinHandle<()>>,
}

impl PoolSession {
    /// Rank `rank` of `ranks` (worker `rank` of the scenario's one training job) of the switch
    /// started from `text` at `endpoints`. `check_first_hop` checks that a switch listens at the
    /// address given (see `Session::open`).
    pub fn open(
        text: &str,
        endpoints: EndpointSpec,
        ranks: u32,
        rank: u32,
        timeout: Duration,
        check_first_hop: impl Fn(SocketAddrV4, u32, u16, u32) -> Result<(), String>,
    ) -> Result<PoolSession, String> {
        let plan = PoolPlan::from_scenario(text, None, endpoints)?;
        if plan.jobs.len() != 1 {
            return Err(format!("jobs: {} training jobs; a session is the ranks of one job", plan.jobs.len()));
        }
        let job = &plan.jobs[0];
        let workers = job.workers.len() as u32;
        if ranks != workers {
            return Err(format!("ranks: {ranks}, but the scenario's job has {workers} workers (the switch's program completes a PSN with exactly that many contributions)"));
        }
        if rank >= ranks {
            return Err(format!("rank: {rank} is not below ranks ({ranks})"));
        }
        let host = job.workers[rank as usize];
        let node = plan.fabric.host_nodes[host as usize];
        let (sw, sw_port) = plan.fabric.nodes[node as usize].ports[0];
        check_first_hop(plan.endpoints.of(sw, sw_port), sw, sw_port, rank)?;
        let sock = udp::bind(plan.endpoints.of(node, 0))
            .map_err(|e| format!("{e} (another process already runs host {host}?)"))?;
        let epoch = Instant::now();
        let ps = match (rank, job.ps) {
            (0, Some(ps_host)) => Some(start_ps(&plan, ps_host, epoch)?),
            _ => None,
        };
        let io = Io::new(sock, plan.endpoints.of(sw, sw_port), host, 0, Some(rank as u16));
        Ok(PoolSession {
            rank: rank as u16,
            worker: Some(Worker { io, vals: Values::new(ELEMS_PER_PACKET as usize), win: None, last: None }),
            responder: None,
            last_report: None,
            next_psn: 0,
            prev_base: 0,
            calls: 0,
            epoch,
            timeout,
            ps,
            plan: Arc::new(plan),
        })
    }

    pub fn protocol(&self) -> &'static str {
        self.plan.spec.protocol.name()
    }

    pub fn ranks(&self) -> u32 {
        self.plan.jobs[0].workers.len() as u32
    }

    pub fn elems_per_packet(&self) -> u16 {
        ELEMS_PER_PACKET
    }

    /// This rank's counters over the session so far: packets sent and received, and
    /// `misdelivered` — among them the late packets of earlier calls, dropped. While a DSA
    /// rank's worker answers between calls, they are its counters when the last call returned.
    pub fn report(&self) -> PoolHostReport {
        let mut r = match (&self.worker, &self.last_report) {
            (Some(w), _) => {
                let mut r = w.io.report.clone();
                r.worker = w.win.as_ref().map(|w| w.stats());
                r
            }
            (None, Some(r)) => r.clone(),
            (None, None) => PoolHostReport::default(),
        };
        r.elapsed_s = self.epoch.elapsed().as_secs_f64();
        r
    }

    /// The worker, taken back from the responder if it is answering between calls.
    fn worker(&mut self) -> Result<&mut Worker, String> {
        if let Some(r) = self.responder.take() {
            let (w, r) = r.finish()?;
            self.worker = Some(w);
            r.map_err(|e| format!("between calls: {e}"))?;
        }
        self.worker.as_mut().ok_or_else(|| "session: its worker failed in an earlier call".to_string())
    }

    /// The element-wise wrapping sum of every rank's `data` (the same length on every rank).
    pub fn allreduce_i32(&mut self, data: &[i32]) -> Result<Vec<i32>, String> {
        if data.is_empty() {
            return Ok(Vec::new());
        }
        let per = ELEMS_PER_PACKET as usize;
        let packets = u32::try_from(data.len().div_ceil(per))
            .map_err(|_| format!("count: {} elements exceed 2^32 packets", data.len()))?;
        let base = self.next_psn;
        let Some(next) = base.checked_add(packets) else {
            return Err(format!("count: this call's {packets} packets would pass PSN 2^32 (the session has used {base}); open a new session after restarting the switch"));
        };
        self.worker()?;
        if let Some(ps) = &self.ps {
            ps.forget_below.store(self.prev_base, Ordering::Release);
        }
        let call = self.calls;
        self.calls += 1;
        self.prev_base = base;
        self.next_psn = next;
        let n = self.plan.jobs[0].workers.len() as u16;
        let params = self.plan.jobs[0].params;
        let mut w = self.worker.take().expect("taken back above");
        match &mut w.win {
            Some(win) => win.next_tensor(packets),
            None => w.win = Some(WorkerWindow::new(packets, params)),
        }
        let out = Arc::new(Mutex::new(vec![0; data.len()]));
        let bad = Arc::new(AtomicU64::new(0));
        let mut t = AppTensor {
            plan: self.plan.clone(),
            rank: self.rank,
            workers: n,
            base,
            data: data.to_vec(),
            out: out.clone(),
            bad: bad.clone(),
        };
        let ctx = WorkerCtx {
            job: 0,
            rank: self.rank,
            workers: n,
            epoch: self.epoch,
            deadline: Instant::now() + self.timeout,
            timeout: self.timeout,
        };
        let label = self.plan.spec.protocol.label();
        let elems = data.len();
        let describe = move |e: String, rx_packets: u64| {
            let hint = if rx_packets == 0 && call == 0 {
                format!(" (a {label} switch that served an earlier session keeps its PSNs: restart it before a new session)")
            } else {
                String::new()
            };
            format!("call {call} ({elems} elements, PSNs {base}..{next}): {e}{hint}")
        };
        if self.plan.spec.protocol.fetches_from_workers() {
            // The worker runs in its own thread, hands the result back when it has it and stays.
            let (tx, rx) = mpsc::channel();
            let stop = Arc::new(AtomicBool::new(false));
            let told = stop.clone();
            let handle = std::thread::Builder::new()
                .name(format!("reducelab-worker-{}", self.rank))
                .spawn(move || {
                    let stopped = || told.load(Ordering::Acquire);
                    let stay = Stay {
                        linger: Duration::ZERO,
                        resume: RESUME_WAIT,
                        job_done: Some(&stopped),
                        until_told: true,
                    };
                    let win = w.win.as_mut().expect("set above");
                    let mut last = w.last.take();
                    let earlier = last.as_mut().map(|(e, n)| (e as &mut dyn Tensor, *n));
                    let r = drive_worker(&ctx, win, &mut w.io, &mut w.vals, &mut t, earlier, &stay, |report| {
                        let _ = tx.send(report.clone());
                    });
                    w.last = Some((t, packets));
                    (w, r)
                })
                .map_err(|e| format!("cannot start the worker thread: {e}"))?;
            let responder = Responder { stop, handle };
            let Ok(report) = rx.recv() else {
                // It ended without every result: its error.
                let (w, r) = responder.finish()?;
                let rx_packets = w.io.report.rx_packets;
                self.worker = Some(w);
                let e = r.err().unwrap_or_else(|| "the worker ended without its results".to_string());
                return Err(describe(e, rx_packets));
            };
            self.last_report = Some(report);
            self.responder = Some(responder);
        } else {
            let stay = Stay { linger: Duration::ZERO, resume: RESUME_WAIT, job_done: None, until_told: false };
            let win = w.win.as_mut().expect("set above");
            let r = drive_worker(&ctx, win, &mut w.io, &mut w.vals, &mut t, None, &stay, |_| {});
            let rx_packets = w.io.report.rx_packets;
            self.worker = Some(w);
            r.map_err(|e| describe(e, rx_packets))?;
        }
        let bad = bad.load(Ordering::Acquire);
        if bad > 0 {
            return Err(format!("call {call}: {bad} of {packets} results do not carry every rank's contribution exactly once (bitmap or fingerprint)"));
        }
        let out = std::mem::take(&mut *out.lock().map_err(|_| "the worker thread panicked".to_string())?);
        Ok(out)
    }
}

impl Drop for PoolSession {
    /// A DSA rank's worker answers fetches for [`PS_IDLE`] more (ranks still missing a result
    /// of the last call), then stops.
    fn drop(&mut self) {
        if let Some(r) = self.responder.take() {
            std::thread::sleep(PS_IDLE);
            let _ = r.finish();
        }
    }
}

/// An application's vector as a worker's tensor: window PSN `q` is wire PSN `base + q` and
/// carries elements `[62q, 62q + 62)`; its result is checked for every rank's contribution
/// exactly once (full bitmap, the fingerprint sum of every rank's `contribution_fp`, the
/// element count) and copied out.
struct AppTensor {
    plan: Arc<PoolPlan>,
    rank: u16,
    workers: u16,
    base: u32,
    data: Vec<i32>,
    /// The results, where the caller takes them once every PSN has one.
    out: Arc<Mutex<Vec<i32>>>,
    /// Results that are not the exact sum.
    bad: Arc<AtomicU64>,
}

impl AppTensor {
    fn span(&self, q: u32) -> std::ops::Range<usize> {
        let per = ELEMS_PER_PACKET as usize;
        let lo = q as usize * per;
        lo..(lo + per).min(self.data.len())
    }
}

impl Tensor for AppTensor {
    fn base(&self) -> u32 {
        self.base
    }
    fn available(&self, _now_ps: u64) -> u32 {
        u32::MAX
    }
    fn next_ready_ps(&self, _now_ps: u64) -> Option<u64> {
        None
    }
    fn packet(&mut self, s: Send, vals: &mut Values) -> AggPacket {
        let plan = &*self.plan;
        let job = &plan.jobs[0];
        let wire = Send { psn: self.base + s.psn, ..s };
        // The protocol's fields from the simulator's packet; the values are the application's
        // (a disabled slab: the model's values are not computed).
        let mut p = gradient_packet(
            plan.spec.protocol,
            plan.salt,
            0,
            self.rank,
            self.workers,
            wire,
            &job.plans[self.rank as usize],
            &job.model,
            plan.link_bps,
            &mut Values::new(0),
        );
        p.data = vals.alloc();
        let span = self.span(s.psn);
        p.elems = span.len() as u16;
        let v = vals.get_mut(p.data);
        v[..span.len()].copy_from_slice(&self.data[span]);
        v[p.elems as usize..].fill(0);
        p
    }
    fn result(&mut self, q: u32, p: &AggPacket, vals: &Values) -> bool {
        let span = self.span(q);
        let fp = (0..self.workers as u32)
            .fold(0u64, |a, r| a.wrapping_add(reducelab_ina::contribution_fp(self.plan.salt, 0, r, p.psn)));
        if p.bitmap != full_bitmap(self.workers) || p.fp != fp || p.elems as usize != span.len() {
            self.bad.fetch_add(1, Ordering::AcqRel);
            return false;
        }
        let got = vals.get(p.data);
        if let Ok(mut out) = self.out.lock() {
            out[span.clone()].copy_from_slice(&got[..span.len()]);
        }
        true
    }
}

fn start_ps(plan: &PoolPlan, ps_host: u32, epoch: Instant) -> Result<PsThread, String> {
    let node = plan.fabric.host_nodes[ps_host as usize];
    let (sw, sw_port) = plan.fabric.nodes[node as usize].ports[0];
    let sock: UdpSocket = udp::bind(plan.endpoints.of(node, 0)).map_err(|e| {
        format!("{e} (rank 0 runs the job's parameter server, host {ps_host}: another process already runs it?)")
    })?;
    let mut ps = plan.parameter_server(0)?.ok_or("the job has no parameter server")?;
    let mut io = Io::new(sock, plan.endpoints.of(sw, sw_port), ps_host, 0, None);
    // The job's tree, if it has one (DSA's reminders go to each leaf too); a session's PS is not
    // restarted on a timer (`ps_restart_us` belongs to a training run's clock).
    let tree = PsTree { restart_ps: None, leaves: plan.jobs[0].tree.as_ref().map_or(0, |t| t.leaves.len() as u16) };
    let stop = Arc::new(AtomicBool::new(false));
    let forget_below = Arc::new(AtomicU32::new(0));
    let (s, f) = (stop.clone(), forget_below.clone());
    let handle = std::thread::Builder::new()
        .name(format!("reducelab-ps-{ps_host}"))
        .spawn(move || {
            let mut forgot = 0u32;
            serve_ps(0, &mut ps, &mut io, epoch, None, tree, |ps, vals, last_rx| {
                let below = f.load(Ordering::Acquire);
                if below > forgot {
                    forgot = below;
                    match ps {
                        Ps::Atp(p) => p.dict.forget_results_below(below, vals),
                        Ps::Dsa(p) => p.dict.forget_results_below(below, vals),
                    }
                }
                s.load(Ordering::Acquire) && last_rx.elapsed() >= PS_IDLE
            });
        })
        .map_err(|e| format!("cannot start the parameter server thread: {e}"))?;
    Ok(PsThread { stop, forget_below, handle: Some(handle) })
}

impl Drop for PsThread {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
        if let Some(h) = self.handle.take() {
            let _ = h.join();
        }
    }
}
