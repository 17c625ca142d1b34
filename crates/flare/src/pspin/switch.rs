//! The PsPIN switch as a deterministic discrete-event model (seed 004 §3–5), sans I/O: a
//! [`Workload`] of hosts in, a [`SwitchReport`] out.
//!
//! - Packets arrive from P ports at line rate; each is stored in the L2 packet memory (dropped
//!   when it is full, §3 footnote 2) until its payload handler returns.
//! - Hierarchical FCFS scheduling (§5): a block is given to the next subset of S cores (round
//!   robin, in order of the block's first packet); its packets wait in that subset's FIFO for
//!   the first free core of the subset.
//! - Each core runs the [`HandlerSet`]'s handlers step by step ([`Step`]); a core waiting for a
//!   lock spins (its cycles are counted as spent), locks are granted FCFS.
//! - When a block's result is sent, every host may send one more block (window W).
//!
//! Time is integer picoseconds; events are ordered by (time, insertion sequence), so a run is a
//! function of its inputs and seed alone.

use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap, VecDeque};

use super::config::{ConfigError, SwitchConfig};
use super::handler::{Emitted, HandlerCx, HandlerSet, LockKey, Packet, RunState, Step};
use super::workload::{splitmix, Workload};

/// Locks held and waited for, by key; waiters are served in request order.
#[derive(Default)]
pub struct LockTable {
    locks: BTreeMap<LockKey, (u32, VecDeque<u32>)>,
}

impl LockTable {
    pub(crate) fn try_take(&mut self, key: LockKey, core: u32) -> bool {
        if self.locks.contains_key(&key) {
            return false;
        }
        self.locks.insert(key, (core, VecDeque::new()));
        true
    }

    /// Takes `key` for `core` or queues it; true if taken.
    fn acquire(&mut self, key: LockKey, core: u32) -> bool {
        match self.locks.get_mut(&key) {
            None => {
                self.locks.insert(key, (core, VecDeque::new()));
                true
            }
            Some((holder, waiters)) => {
                assert_ne!(*holder, core, "core {core} acquired lock {key:#x} it already holds");
                waiters.push_back(core);
                false
            }
        }
    }

    /// Releases `key` held by `core`; returns the core it passes to.
    fn release(&mut self, key: LockKey, core: u32) -> Option<u32> {
        let (holder, waiters) =
            self.locks.get_mut(&key).unwrap_or_else(|| panic!("core {core} released lock {key:#x} it does not hold"));
        assert_eq!(*holder, core, "core {core} released lock {key:#x} held by core {holder}");
        match waiters.pop_front() {
            Some(next) => {
                *holder = next;
                Some(next)
            }
            None => {
                self.locks.remove(&key);
                None
            }
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Ev {
    /// Host h's next packet reaches the switch.
    Send(u32),
    /// Core c's current step ended (or its lock was granted).
    Resume(u32),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Phase {
    Header,
    Payload,
    Completion,
}

struct Job {
    packet: Packet,
    phase: Phase,
    run: RunState,
    spin_since_ps: Option<u64>,
}

#[derive(Clone, Copy, Default)]
struct BlockState {
    subset: u32,
    arrived: u32,
    finished: u32,
    header_started: bool,
    first_arrival_ps: u64,
    last_arrival_ps: u64,
}

/// What one run measured.
#[derive(Clone, Debug, Default)]
pub struct SwitchReport {
    pub design: String,
    /// "completed" (every block's result sent), "stalled" (a packet was dropped, so its block
    /// never completes: the model has no retransmission) or "l1_overflow" (the working memory
    /// needed more than a cluster's L1).
    pub status: &'static str,
    pub blocks: u32,
    pub blocks_completed: u32,
    pub packets_in: u64,
    pub drops: u64,
    pub bytes_in: u64,
    pub first_arrival_ps: u64,
    pub last_completion_ps: u64,
    /// Aggregation bandwidth: bytes received from the hosts over [first arrival, last result].
    pub bandwidth_gbps: f64,
    /// Cycles cores spent working (handlers' Compute steps).
    pub busy_cycles: u64,
    /// Cycles cores spent spinning for a lock.
    pub spin_cycles: u64,
    /// Mean cycles a core spent per packet (busy + spin over packets processed): measured τ.
    pub tau_cycles: f64,
    /// Mean over blocks of (last − first arrival)/(P − 1): measured δc, in cycles.
    pub delta_c_cycles: f64,
    /// Mean gap between packets reaching the switch: measured δ, in cycles.
    pub delta_cycles: f64,
    /// Largest number of packets waiting in one subset's FIFO.
    pub max_subset_queue: u32,
    /// Largest number of packets in the switch (waiting or being processed): measured 𝒬.
    pub peak_packets: u32,
    pub peak_l2_bytes: u64,
    /// Mean block latency (first packet in → result sent): measured ℒ, in cycles.
    pub block_latency_cycles: f64,
    /// Peak working memory over all clusters' L1 (measured ℛ), and the largest in one cluster.
    pub peak_working_bytes: u64,
    pub peak_cluster_l1_bytes: u64,
    pub window_blocks: u32,
    /// Each block's result (runs that carry data), by block.
    pub results: Vec<Option<Vec<u8>>>,
    /// Each block's result header word (e.g. a quantisation scale), by block.
    pub result_words: Vec<u64>,
    pub events: u64,
}

/// Runs `workload` through one switch `cfg` whose handlers are `handlers`.
pub fn run<H: HandlerSet>(
    cfg: &SwitchConfig,
    workload: &Workload,
    handlers: &mut H,
) -> Result<SwitchReport, ConfigError> {
    run_traffic(cfg, workload, &DenseTraffic(workload), handlers)
}

/// The packets the hosts send, when a block is not exactly one packet from each host (sparse
/// data, seed 004 §7: a host may split a block over several packets, or send an empty one).
/// The [`Workload`] still gives the ports (hosts, line rate, jitter, seed, window W).
pub trait Traffic {
    /// Reduction blocks.
    fn blocks(&self) -> u32;
    /// Packets host `h` sends in all.
    fn packets(&self, h: u32) -> u32;
    /// Host `h`'s `k`-th packet (its data may carry what the handlers need).
    fn packet(&self, h: u32, k: u32) -> Packet;
    /// Whether host `h`'s `k`-th packet is its first of a block (the window W counts blocks).
    fn opens_block(&self, h: u32, k: u32) -> bool;
    /// Packets of `block` over all hosts (its payload handlers before the completion handler).
    fn expected(&self, block: u32) -> u32;
    /// Bytes on the wire of a packet of `payload` bytes (its serialisation time on the port).
    fn wire_bytes(&self, payload: u32) -> u32;
}

/// The dense traffic of a [`Workload`]: one packet per host and block, in the host's order.
pub struct DenseTraffic<'a>(pub &'a Workload);

impl Traffic for DenseTraffic<'_> {
    fn blocks(&self) -> u32 {
        self.0.blocks()
    }
    fn packets(&self, _h: u32) -> u32 {
        self.0.blocks()
    }
    fn packet(&self, h: u32, k: u32) -> Packet {
        let w = self.0;
        let block = w.block_order(h, k, w.window());
        Packet {
            block,
            port: h,
            payload_bytes: w.block_bytes(block),
            header_word: if w.header_scales { w.scale(h, block).to_bits() as u64 } else { 0 },
            data: if w.carry_data { Some(w.host_block(h, block)) } else { None },
        }
    }
    fn opens_block(&self, _h: u32, _k: u32) -> bool {
        true
    }
    fn expected(&self, _block: u32) -> u32 {
        self.0.hosts
    }
    fn wire_bytes(&self, _payload: u32) -> u32 {
        self.0.packet_bytes
    }
}

/// Runs the packets of `traffic` from the ports of `workload` through one switch `cfg`.
pub fn run_traffic<H: HandlerSet>(
    cfg: &SwitchConfig,
    workload: &Workload,
    traffic: &dyn Traffic,
    handlers: &mut H,
) -> Result<SwitchReport, ConfigError> {
    cfg.validate()?;
    workload.validate()?;
    Ok(Model::new(cfg, workload, traffic).run(handlers))
}

struct Model<'a> {
    cfg: &'a SwitchConfig,
    w: &'a Workload,
    t: &'a dyn Traffic,
    /// Blocks each host has started sending (the window W counts these).
    opened: Vec<u32>,
    cycle_ps: u64,
    window: u32,
    queue: BinaryHeap<Reverse<(u64, u64, Ev)>>,
    seq: u64,
    now: u64,
    // Hosts.
    sent: Vec<u32>,
    blocked: Vec<Option<u64>>,
    next_send_ps: Vec<u64>,
    completed: u32,
    // Switch.
    blocks: Vec<BlockState>,
    next_subset: u32,
    subset_queue: Vec<VecDeque<Packet>>,
    subset_free: Vec<Vec<u32>>, // free cores of each subset, highest index first (pop = lowest)
    jobs: Vec<Option<Job>>,
    locks: LockTable,
    l1_used: Vec<u64>,
    l2_used: u64,
    in_switch: u32,
    r: SwitchReport,
    last_arrival_ps: Option<u64>,
    gaps_ps: u64,
    gaps: u64,
    latency_sum_cycles: f64,
    payloads_done: u64,
    /// Cores given a packet during the current event, to step after it.
    pending_start: VecDeque<u32>,
    /// Packets held at their hosts while the L2 is full (backpressure), in pause order.
    paused: VecDeque<Packet>,
}

impl<'a> Model<'a> {
    fn new(cfg: &'a SwitchConfig, w: &'a Workload, t: &'a dyn Traffic) -> Self {
        let k = cfg.cores();
        let s = cfg.subset_cores;
        let subsets = k / s;
        let window = w.window();
        let p = w.hosts as usize;
        Model {
            cfg,
            w,
            t,
            opened: vec![0; p],
            cycle_ps: cfg.cycle_ps(),
            window,
            queue: BinaryHeap::new(),
            seq: 0,
            now: 0,
            sent: vec![0; p],
            blocked: vec![None; p],
            next_send_ps: vec![0; p],
            completed: 0,
            blocks: vec![BlockState::default(); t.blocks() as usize],
            next_subset: 0,
            subset_queue: (0..subsets).map(|_| VecDeque::new()).collect(),
            subset_free: (0..subsets).map(|i| (i * s..(i + 1) * s).rev().collect()).collect(),
            jobs: (0..k).map(|_| None).collect(),
            locks: LockTable::default(),
            l1_used: vec![0; cfg.clusters as usize],
            l2_used: 0,
            in_switch: 0,
            r: SwitchReport {
                blocks: t.blocks(),
                window_blocks: window,
                results: if w.carry_data { vec![None; t.blocks() as usize] } else { Vec::new() },
                result_words: vec![0; t.blocks() as usize],
                ..Default::default()
            },
            last_arrival_ps: None,
            gaps_ps: 0,
            gaps: 0,
            latency_sum_cycles: 0.0,
            payloads_done: 0,
            pending_start: VecDeque::new(),
            paused: VecDeque::new(),
        }
    }

    fn push(&mut self, t: u64, ev: Ev) {
        self.seq += 1;
        self.queue.push(Reverse((t, self.seq, ev)));
    }

    fn run<H: HandlerSet>(mut self, h: &mut H) -> SwitchReport {
        self.r.design = h.name();
        for host in 0..self.w.hosts {
            self.push(0, Ev::Send(host));
        }
        while let Some(Reverse((t, _, ev))) = self.queue.pop() {
            self.now = t;
            self.r.events += 1;
            match ev {
                Ev::Send(host) => self.send(host),
                Ev::Resume(core) => self.step(core, h),
            }
            // Arrivals start handlers at once; run them here so the order stays (time, seq).
            while let Some(core) = self.pending_start.pop_front() {
                self.step(core, h);
            }
        }
        self.finish()
    }

    fn send(&mut self, host: u32) {
        let hi = host as usize;
        let k = self.sent[hi];
        let packet = self.t.packet(host, k);
        if self.t.opens_block(host, k) {
            self.opened[hi] += 1;
        }
        self.sent[hi] += 1;
        // Next packet of this host: one serialisation time later, plus the jitter.
        let wire = self.t.wire_bytes(packet.payload_bytes);
        let mut gap = if wire == self.w.packet_bytes {
            self.w.packet_ps()
        } else {
            (wire as f64 * 8.0 * 1000.0 / self.w.bandwidth_gbps).round() as u64
        };
        if self.w.jitter_ns > 0.0 {
            let r = splitmix(self.w.seed ^ ((host as u64) << 32) ^ k as u64);
            let u = ((r >> 11) as f64 + 1.0) / (1u64 << 53) as f64; // (0, 1]
            gap += (-u.ln() * self.w.jitter_ns * 1000.0).round() as u64;
        }
        self.next_send_ps[hi] = self.now + gap;
        let bytes = packet.payload_bytes as u64;
        if self.l2_used + bytes > self.cfg.l2_packet_bytes {
            if self.cfg.backpressure {
                // The port is paused: this packet waits at the host, which sends nothing more.
                self.paused.push_back(packet);
                return;
            }
            self.r.packets_in += 1;
            self.r.bytes_in += bytes;
            self.r.drops += 1;
        } else {
            self.arrive(packet);
        }
        self.schedule_next(host);
    }

    /// Host `host` sends again at its next line-rate time, unless its window is full.
    fn schedule_next(&mut self, host: u32) {
        let hi = host as usize;
        if self.sent[hi] < self.t.packets(host) {
            if self.may_send(host) {
                self.push(self.next_send_ps[hi].max(self.now), Ev::Send(host));
            } else {
                self.blocked[hi] = Some(self.next_send_ps[hi]);
            }
        }
    }

    /// Whether host `host`'s next packet is within its window: it continues a block already
    /// open, or fewer than W of its blocks are open (blocks it started minus blocks completed).
    fn may_send(&self, host: u32) -> bool {
        let hi = host as usize;
        !self.t.opens_block(host, self.sent[hi]) || self.opened[hi] - self.completed < self.window
    }

    /// Admits paused packets, in the order they were paused, while the L2 has room.
    fn unpause(&mut self) {
        while let Some(p) = self.paused.front() {
            if self.l2_used + p.payload_bytes as u64 > self.cfg.l2_packet_bytes {
                return;
            }
            let p = self.paused.pop_front().expect("front exists");
            let host = p.port;
            self.arrive(p);
            self.schedule_next(host);
        }
    }

    fn arrive(&mut self, packet: Packet) {
        self.r.packets_in += 1;
        self.r.bytes_in += packet.payload_bytes as u64;
        if let Some(last) = self.last_arrival_ps {
            self.gaps_ps += self.now - last;
            self.gaps += 1;
        } else {
            self.r.first_arrival_ps = self.now;
        }
        self.last_arrival_ps = Some(self.now);
        let bytes = packet.payload_bytes as u64;
        self.l2_used += bytes;
        self.in_switch += 1;
        self.r.peak_l2_bytes = self.r.peak_l2_bytes.max(self.l2_used);
        self.r.peak_packets = self.r.peak_packets.max(self.in_switch);
        let subsets = self.subset_queue.len() as u32;
        let b = &mut self.blocks[packet.block as usize];
        if b.arrived == 0 {
            b.subset = self.next_subset;
            b.first_arrival_ps = self.now;
            self.next_subset = (self.next_subset + 1) % subsets;
        }
        b.arrived += 1;
        b.last_arrival_ps = self.now;
        let s = b.subset as usize;
        match self.subset_free[s].pop() {
            Some(core) => self.start(core, packet),
            None => {
                self.subset_queue[s].push_back(packet);
                self.r.max_subset_queue = self.r.max_subset_queue.max(self.subset_queue[s].len() as u32);
            }
        }
    }

    fn start(&mut self, core: u32, packet: Packet) {
        let b = &mut self.blocks[packet.block as usize];
        let phase = if b.header_started { Phase::Payload } else { Phase::Header };
        b.header_started = true;
        self.jobs[core as usize] = Some(Job { packet, phase, run: RunState::default(), spin_since_ps: None });
        self.pending_start.push_back(core);
    }

    /// Steps core `core`'s handler until it must wait (cycles or a lock) or the job ends.
    fn step<H: HandlerSet>(&mut self, core: u32, h: &mut H) {
        let cluster = core / self.cfg.hpus_per_cluster;
        let mut job = self.jobs[core as usize].take().expect("a resumed core has a job");
        if let Some(since) = job.spin_since_ps.take() {
            self.r.spin_cycles += (self.now - since) / self.cycle_ps;
        }
        loop {
            let mut emitted: Option<Emitted> = None;
            let step = {
                let mut cx = HandlerCx {
                    now_cycles: self.now / self.cycle_ps,
                    core,
                    cluster,
                    costs: &self.cfg.costs,
                    children: self.w.hosts,
                    packet: &mut job.packet,
                    l1_used: &mut self.l1_used,
                    locks: &mut self.locks,
                    emitted: &mut emitted,
                };
                match job.phase {
                    Phase::Header => h.header(&mut cx, &mut job.run),
                    Phase::Payload => h.payload(&mut cx, &mut job.run),
                    Phase::Completion => h.completion(&mut cx, &mut job.run),
                }
            };
            let used: u64 = self.l1_used.iter().sum();
            self.r.peak_working_bytes = self.r.peak_working_bytes.max(used);
            self.r.peak_cluster_l1_bytes = self.r.peak_cluster_l1_bytes.max(self.l1_used[cluster as usize]);
            if let Some(e) = emitted {
                let b = job.packet.block as usize;
                if self.w.carry_data {
                    self.r.results[b] = e.data;
                }
                self.r.result_words[b] = e.header_word;
            }
            match step {
                Step::Compute(c) => {
                    self.r.busy_cycles += c;
                    self.jobs[core as usize] = Some(job);
                    self.push(self.now + c * self.cycle_ps, Ev::Resume(core));
                    return;
                }
                Step::Acquire(key) => {
                    if !self.locks.acquire(key, core) {
                        job.spin_since_ps = Some(self.now);
                        self.jobs[core as usize] = Some(job);
                        return;
                    }
                }
                Step::Release(key) => {
                    if let Some(next) = self.locks.release(key, core) {
                        self.push(self.now, Ev::Resume(next));
                    }
                }
                Step::Done => {
                    job.run = RunState::default();
                    match job.phase {
                        Phase::Header => job.phase = Phase::Payload,
                        Phase::Payload => {
                            self.payloads_done += 1;
                            self.l2_used -= job.packet.payload_bytes as u64;
                            self.in_switch -= 1;
                            self.unpause();
                            let b = &mut self.blocks[job.packet.block as usize];
                            b.finished += 1;
                            if b.finished < self.t.expected(job.packet.block) {
                                return self.free(core);
                            }
                            job.phase = Phase::Completion;
                        }
                        Phase::Completion => {
                            self.complete(job.packet.block);
                            return self.free(core);
                        }
                    }
                }
            }
        }
    }

    fn free(&mut self, core: u32) {
        let s = (core / self.cfg.subset_cores) as usize;
        match self.subset_queue[s].pop_front() {
            Some(p) => self.start(core, p),
            None => self.subset_free[s].push(core),
        }
    }

    fn complete(&mut self, block: u32) {
        let b = &self.blocks[block as usize];
        self.latency_sum_cycles += (self.now - b.first_arrival_ps) as f64 / self.cycle_ps as f64;
        self.r.delta_c_cycles += if self.w.hosts > 1 {
            (b.last_arrival_ps - b.first_arrival_ps) as f64 / (self.w.hosts - 1) as f64 / self.cycle_ps as f64
        } else {
            0.0
        };
        self.r.blocks_completed += 1;
        self.r.last_completion_ps = self.now;
        self.completed += 1;
        for host in 0..self.w.hosts as usize {
            if let Some(t) = self.blocked[host] {
                if self.may_send(host as u32) {
                    self.blocked[host] = None;
                    self.push(t.max(self.now), Ev::Send(host as u32));
                }
            }
        }
    }

    fn finish(mut self) -> SwitchReport {
        let r = &mut self.r;
        let done = r.blocks_completed.max(1) as f64;
        r.delta_c_cycles /= done;
        r.block_latency_cycles = self.latency_sum_cycles / done;
        r.tau_cycles = (r.busy_cycles + r.spin_cycles) as f64 / self.payloads_done.max(1) as f64;
        r.delta_cycles =
            if self.gaps > 0 { self.gaps_ps as f64 / self.gaps as f64 / self.cycle_ps as f64 } else { 0.0 };
        let span = r.last_completion_ps.saturating_sub(r.first_arrival_ps);
        r.bandwidth_gbps = if span > 0 { r.bytes_in as f64 * 8.0 / (span as f64 / 1000.0) } else { 0.0 };
        r.status = if r.peak_cluster_l1_bytes > self.cfg.l1_bytes_per_cluster {
            "l1_overflow"
        } else if r.blocks_completed < r.blocks {
            "stalled"
        } else {
            "completed"
        };
        self.r
    }
}
