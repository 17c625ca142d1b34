//! One switch node of a pool run (SwitchML, ATP, DSA) as a process-level event loop: the same
//! I/O as [`crate::switch`] (a non-blocking UDP socket per port, `recvmmsg`/`sendmmsg` with
//! GSO/GRO through [`crate::udp`], `ppoll` when idle, the egress faults of [`crate::faults`]),
//! driving the node's [`PoolProgram`] (the simulator's, taken from its `TrainingWorld`).
//!
//! Delivery rule (the simulator's, `training_run::route_of`): a packet of job `j` to the switch
//! or to the job's workers goes to the program of `j`'s aggregation switch; anything else (to the
//! PS, to one worker, or a job aggregated elsewhere) is forwarded by the routing table. A
//! program's packet to `Workers` is multicast: one copy per worker of the job, each addressed
//! on the wire to its worker (`Dest::Worker(r)`), so switches downstream forward it.
//!
//! With `aggregation = "tree"` a job's leaves run its program too: the simulator's
//! `Tree::leaf_input` gives a leaf's program its workers' gradients (and what the frame
//! addresses to that leaf: ATP's ACK copy, DSA's reminder copy), and `Tree::route` says where
//! each packet a program makes goes (`PoolSwitch::carry_out`). ECN: a shaped port
//! ([`crate::faults::Shaper`]) marks what it queues above its threshold; a forwarded packet
//! keeps its mark, a new one starts unmarked (the simulator's rule).

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::net::{SocketAddr, SocketAddrV4, UdpSocket};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use reducelab_ina::pool::{AggPacket, Dest, PacketKind, PoolAction, PoolProgram, PoolStats};
use reducelab_ina::pool_jobs::{PoolProtocol, TreeRoute, ELEMS_PER_PACKET};
use reducelab_ina::{pool_wire, Values, NIL};
use serde::Serialize;

use crate::faults::{Fate, FaultPort, PortFaults, Shaper, ShaperStats};
use crate::pool_plan::PoolPlan;
use crate::switch::{thread_cpu_s, PortCounters, SwitchOptions};
use crate::udp;

/// The pool program's counters and occupancy.
#[derive(Clone, Debug, Serialize)]
pub struct PoolProgramReport {
    pub aggregators: u32,
    pub aggregators_in_use: u32,
    pub peak_aggregators_in_use: u32,
    pub stats: PoolStats,
}

/// A shaped egress port (`--fault rate_mbps=…`): its rate, ECN threshold and counters.
#[derive(Clone, Debug, Serialize)]
pub struct ShapedPortReport {
    pub port: u16,
    pub rate_bps: u64,
    pub ecn_bytes: Option<u64>,
    pub queue_bytes: u64,
    #[serde(flatten)]
    pub stats: ShaperStats,
}

/// What a pool switch reports when it stops.
#[derive(Clone, Debug, Serialize)]
pub struct PoolSwitchReport {
    pub node: u32,
    pub ports: usize,
    pub uptime_s: f64,
    pub cpu_s: f64,
    pub data_plane: PortCounters,
    /// Packets sent with an ECN mark they arrived with (a forwarded packet keeps its mark, as
    /// in the simulator; the switch's own new packets start unmarked).
    pub ecn_marks_carried: u64,
    /// Tree aggregation: gradients a leaf refused (not from one of its workers).
    pub malformed_at_leaf: u64,
    /// The shaped ports, with the marks they set.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub shaped_ports: Vec<ShapedPortReport>,
    /// `None`: no job aggregates on this switch (it forwards only).
    pub program: Option<PoolProgramReport>,
}

struct Held {
    due: Instant,
    seq: u64,
    port: u16,
    bytes: Vec<u8>,
}
impl PartialEq for Held {
    fn eq(&self, o: &Self) -> bool {
        (self.due, self.seq) == (o.due, o.seq)
    }
}
impl Eq for Held {}
impl PartialOrd for Held {
    fn partial_cmp(&self, o: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(o))
    }
}
impl Ord for Held {
    fn cmp(&self, o: &Self) -> std::cmp::Ordering {
        (self.due, self.seq).cmp(&(o.due, o.seq))
    }
}

/// A bound pool switch.
pub struct PoolSwitch<'p> {
    plan: &'p PoolPlan,
    node: u32,
    socks: Vec<UdpSocket>,
    tx: Vec<udp::TxQueue>,
    peers: Vec<SocketAddrV4>,
    program: Option<Box<dyn PoolProgram>>,
    vals: Values,
    held: BinaryHeap<Reverse<Held>>,
    seq: u64,
    faults: Vec<FaultPort>,
    /// Per port: its egress shaper, if shaped.
    shapers: Vec<Option<Shaper>>,
    ecn_carried: u64,
    malformed_at_leaf: u64,
    epoch: Instant,
    /// Inside `run`: the time the current receive batch was read (every packet of it had
    /// arrived by then), the programs' `now` for its packets: one clock read per batch, not per
    /// packet (per-packet reads were 17-20% of the switch thread's time).
    batch_now_ps: Option<u64>,
    actions: Vec<PoolAction>,
    frame: Vec<u8>,
    pub counters: PortCounters,
    opts: SwitchOptions,
    trace: bool,
    cpu0: f64,
}

const RX_BATCH: usize = 32;

impl<'p> PoolSwitch<'p> {
    pub fn bind(plan: &'p PoolPlan, node: u32, opts: SwitchOptions) -> Result<PoolSwitch<'p>, String> {
        plan.check_switch(node)?;
        let program = plan.program(node)?;
        let ports = &plan.fabric.nodes[node as usize].ports;
        for &(port, _) in &opts.faults {
            if let Some(q) = port.filter(|&q| q as usize >= ports.len()) {
                return Err(format!("--fault port={q}: switch {node} has {} ports", ports.len()));
            }
        }
        let mut socks = Vec::new();
        let mut peers = Vec::new();
        let mut faults = Vec::new();
        let mut shapers = Vec::new();
        for (p, &(peer, peer_port)) in ports.iter().enumerate() {
            socks.push(udp::bind(plan.endpoints.of(node, p as u16))?);
            peers.push(plan.endpoints.of(peer, peer_port));
            let mut rates = PortFaults::default();
            for &(port, r) in &opts.faults {
                if port.is_none() || port == Some(p as u16) {
                    rates = r;
                }
            }
            faults.push(FaultPort::new(rates, opts.seed, node, p as u16));
            shapers.push(Shaper::of(&rates, plan.ecn_threshold_bytes));
        }
        Ok(PoolSwitch {
            plan,
            node,
            tx: socks.iter().map(|_| udp::TxQueue::default()).collect(),
            socks,
            peers,
            program,
            vals: Values::new(ELEMS_PER_PACKET as usize),
            held: BinaryHeap::new(),
            seq: 0,
            faults,
            shapers,
            ecn_carried: 0,
            malformed_at_leaf: 0,
            epoch: Instant::now(),
            batch_now_ps: None,
            actions: Vec::new(),
            frame: Vec::with_capacity(512),
            counters: PortCounters::default(),
            opts,
            trace: std::env::var_os("REDUCELAB_SWITCH_TRACE").is_some_and(|v| v == "1"),
            cpu0: 0.0,
        })
    }

    fn now_ps(&self) -> u64 {
        self.epoch.elapsed().as_nanos() as u64 * 1000
    }

    /// Runs until `stop` or the duration ends (the crash injection exits the process, status 3).
    pub fn run(&mut self, stop: &AtomicBool) -> PoolSwitchReport {
        let mut rx = udp::RxBatch::new(RX_BATCH);
        let mut ready = vec![true; self.socks.len()];
        self.cpu0 = thread_cpu_s();
        let end = self.opts.duration.map(|d| self.epoch + d);
        let mut idle = false;
        let mut busy_turns = 0u32;
        loop {
            if stop.load(Ordering::Relaxed) || end.is_some_and(|e| Instant::now() >= e) {
                break;
            }
            self.flush_held();
            self.flush_shaped();
            self.flush_tx();
            if idle {
                let mut wait = Duration::from_millis(20);
                if let Some(Reverse(h)) = self.held.peek() {
                    wait = wait.min(h.due.saturating_duration_since(Instant::now()));
                }
                let now_ns = self.now_ps() / 1000;
                for t in self.shapers.iter().flatten().filter_map(|s| s.next_departure_ns()) {
                    wait = wait.min(Duration::from_nanos(t.saturating_sub(now_ns)));
                }
                udp::poll_readable(&self.socks, wait, &mut ready);
            } else {
                // Busy: the sockets that had datagrams are read again, and every
                // `udp::BUSY_POLL_TURNS` turns one ppoll that does not wait looks at the others too,
                // so a port that went quiet for one turn is not starved while the rest stay busy
                // (a retransmission storm on one port kept another's packets unread, and a job
                // stalled for good).
                busy_turns += 1;
                if busy_turns % udp::BUSY_POLL_TURNS == 0 && ready.iter().any(|r| !r) {
                    udp::poll_readable(&self.socks, Duration::ZERO, &mut ready);
                }
            }
            idle = true;
            for (p, is_ready) in ready.iter_mut().enumerate() {
                if !*is_ready {
                    continue;
                }
                let n = rx.recv(&self.socks[p]);
                *is_ready = n > 0;
                if n > 0 {
                    idle = false;
                    self.batch_now_ps = Some(self.now_ps());
                }
                for i in 0..n {
                    let (from, datagrams) = rx.get(i);
                    for bytes in datagrams {
                        self.receive(p as u16, SocketAddr::V4(from), bytes);
                    }
                }
                self.batch_now_ps = None;
                self.flush_tx();
            }
        }
        self.report()
    }

    pub fn report(&self) -> PoolSwitchReport {
        PoolSwitchReport {
            node: self.node,
            ports: self.socks.len(),
            uptime_s: self.epoch.elapsed().as_secs_f64(),
            cpu_s: thread_cpu_s() - self.cpu0,
            data_plane: self.counters.clone(),
            ecn_marks_carried: self.ecn_carried,
            malformed_at_leaf: self.malformed_at_leaf,
            shaped_ports: self
                .shapers
                .iter()
                .enumerate()
                .filter_map(|(p, s)| {
                    s.as_ref().map(|s| ShapedPortReport {
                        port: p as u16,
                        rate_bps: s.rate_bps,
                        ecn_bytes: s.ecn_bytes,
                        queue_bytes: s.cap_bytes,
                        stats: s.stats,
                    })
                })
                .collect(),
            program: self.program.as_ref().map(|p| PoolProgramReport {
                aggregators: p.pool().len(),
                aggregators_in_use: p.pool().in_use(),
                peak_aggregators_in_use: p.pool().peak_in_use,
                stats: p.stats().clone(),
            }),
        }
    }

    fn flush_held(&mut self) {
        let now = Instant::now();
        while self.held.peek().is_some_and(|Reverse(h)| h.due <= now) {
            let Reverse(h) = self.held.pop().expect("peeked");
            self.egress(h.port, &h.bytes);
        }
    }

    /// Frames of shaped ports whose departure time has come, to their ports' send queues.
    fn flush_shaped(&mut self) {
        if self.shapers.iter().all(Option::is_none) {
            return;
        }
        let now_ns = self.now_ps() / 1000;
        for (p, s) in self.shapers.iter_mut().enumerate() {
            if let Some(s) = s {
                while let Some(f) = s.dequeue(now_ns) {
                    self.tx[p].push(&f);
                }
            }
        }
    }

    /// A frame leaves by `port`: into its shaper's queue (which may mark or drop it), or
    /// straight to the port's send queue. (A shaped port copies each frame into its queue: an
    /// allocation per packet, on the shaping path only.)
    fn egress(&mut self, port: u16, frame: &[u8]) {
        match self.shapers[port as usize].as_mut() {
            Some(s) => {
                let now_ns = self.epoch.elapsed().as_nanos() as u64;
                s.enqueue(now_ns, frame.to_vec(), pool_wire::mark_ecn);
            }
            None => self.tx[port as usize].push(frame),
        }
    }

    /// One datagram from port `port`.
    pub fn receive(&mut self, port: u16, from: SocketAddr, bytes: &[u8]) {
        self.counters.rx_packets += 1;
        self.counters.rx_bytes += bytes.len() as u64;
        if self.opts.exit_after_rx.is_some_and(|n| self.counters.rx_packets >= n) {
            eprintln!("switch {}: crash injected after {} packets", self.node, self.counters.rx_packets);
            std::process::exit(3);
        }
        if from != SocketAddr::V4(self.peers[port as usize]) {
            self.counters.foreign += 1;
            return;
        }
        let slot = self.vals.alloc();
        let plan = self.plan;
        // A packet of a job's workers, or (a tree's) one leaf's result up to the root.
        let valid = |p: &AggPacket| {
            let Some(job) = plan.jobs.get(p.job as usize) else { return false };
            p.workers as usize == job.workers.len()
                || job.tree.as_ref().is_some_and(|t| {
                    p.workers as usize == t.leaves.len() && p.kind == PacketKind::Gradient && p.dst == Dest::Switch
                })
        };
        let mut p = match pool_wire::parse_into(bytes, self.vals.get_mut(slot)) {
            Ok(p) if valid(&p) => p,
            _ => {
                self.vals.release(slot);
                self.counters.malformed += 1;
                return;
            }
        };
        p.data = slot;
        if self.trace {
            eprintln!(
                "{:>12} ns switch {} rx port {port}: {:?} {:?} job {} psn {} bitmap {:#x}",
                self.now_ps() / 1000,
                self.node,
                p.kind,
                p.dst,
                p.job,
                p.psn,
                p.bitmap
            );
        }
        // The simulator's rule (`switch_actions`): what the program forwards keeps the arriving
        // packet's mark, what it emits starts unmarked.
        let ecn = pool_wire::ecn(bytes);
        let now = self.batch_now_ps.unwrap_or_else(|| self.now_ps());
        let job = &plan.jobs[p.job as usize];
        let child = pool_wire::tree_child(bytes);
        if let Some(t) = job.tree.as_ref() {
            // The simulator's `on_app_at_switch` for trees: a packet addressed to one leaf goes
            // there; at a leaf, its workers' gradients and what is addressed to it go to the
            // program as the leaf's job ((`Tree::leaf_input`)).
            let place = t.place(job.switch, self.node);
            if let Some(c) = child {
                if place != Some(Some(c)) {
                    return match t.leaves.get(c as usize) {
                        Some(&leaf) => self.send_one(p, ecn, Some((leaf, c))),
                        None => {
                            self.vals.release(p.data);
                            self.counters.malformed += 1;
                        }
                    };
                }
            }
            if let Some(Some(c)) = place {
                let for_leaf = match p.kind {
                    PacketKind::Gradient => p.dst == Dest::Switch && child.is_none(),
                    PacketKind::Reminder | PacketKind::Ack => child == Some(c),
                    _ => false,
                };
                if for_leaf && self.program.is_some() {
                    let Some(local) = t.leaf_input(c, p) else {
                        self.vals.release(p.data);
                        self.malformed_at_leaf += 1;
                        return;
                    };
                    self.program.as_mut().expect("a leaf program").on_packet(
                        now,
                        port,
                        local,
                        &mut self.vals,
                        &mut self.actions,
                    );
                    return self.carry_out(ecn, Some(p));
                }
            }
        }
        let mine = matches!(p.dst, Dest::Switch | Dest::Workers) && job.switch == self.node;
        match self.program.as_mut() {
            Some(prog) if mine => {
                prog.on_packet(now, port, p, &mut self.vals, &mut self.actions);
                self.carry_out(ecn, None);
            }
            _ => self.send(p, ecn),
        }
    }

    /// Carries out the program's actions (`arriving`: at a leaf, the packet before
    /// (`Tree::leaf_input`), for its priority). With `aggregation = "tree"` each packet goes
    /// where the simulator's `Tree::route` says; a forwarded packet keeps the arriving mark.
    fn carry_out(&mut self, ecn: bool, arriving: Option<AggPacket>) {
        let mut acts = std::mem::take(&mut self.actions);
        let atp = self.plan.spec.protocol == PoolProtocol::Atp;
        for a in acts.drain(..) {
            let (x, carry) = match a {
                PoolAction::Consume => continue,
                PoolAction::Forward(x) => (x, ecn),
                PoolAction::Emit(x) => (x, false),
            };
            let job = &self.plan.jobs[x.job as usize];
            let route = match job.tree.as_ref().filter(|_| self.plan.spec.tree) {
                Some(t) => t.route(t.place(job.switch, self.node), atp, job.workers.len() as u16, x, arriving),
                None => TreeRoute::Plain(x),
            };
            match route {
                TreeRoute::Up(up) => self.send_one(up, carry, None),
                TreeRoute::Ranks(result, ranks) => {
                    for (i, &r) in ranks.iter().enumerate() {
                        let data = if i + 1 == ranks.len() { result.data } else { self.vals.duplicate(result.data) };
                        self.send_one(AggPacket { dst: Dest::Worker(r), data, ..result }, carry, None);
                    }
                    if ranks.is_empty() {
                        self.vals.release(result.data);
                    }
                }
                TreeRoute::Leaves(result) => {
                    let leaves = job.tree.as_ref().expect("a tree").leaves.clone();
                    for (c, &leaf) in leaves.iter().enumerate() {
                        let data = if c + 1 == leaves.len() { result.data } else { self.vals.duplicate(result.data) };
                        self.send_one(AggPacket { data, ..result }, carry, Some((leaf, c as u16)));
                    }
                }
                TreeRoute::Plain(x) => self.send(x, carry),
            }
        }
        self.actions = acts;
    }

    /// Sends `p` on (a `Workers` packet at its job's switch: one copy per worker).
    fn send(&mut self, p: AggPacket, ecn: bool) {
        if p.dst == Dest::Workers && self.plan.jobs[p.job as usize].switch == self.node {
            let n = self.plan.jobs[p.job as usize].workers.len() as u16;
            for r in 0..n {
                let data = if r + 1 == n { p.data } else { self.vals.duplicate(p.data) };
                self.send_one(AggPacket { dst: Dest::Worker(r), data, ..p }, ecn, None);
            }
        } else {
            self.send_one(p, ecn, None);
        }
    }

    /// Sends one packet by the routing table (`to_leaf`: addressed to that leaf node, tree child).
    fn send_one(&mut self, p: AggPacket, ecn: bool, to_leaf: Option<(u32, u16)>) {
        let dst = match to_leaf {
            Some((leaf, _)) => Some(leaf),
            None => self.plan.dst_node(p.job, p.dst),
        };
        let port = dst.filter(|&d| d != self.node).and_then(|d| self.plan.route(self.node, d, p.psn));
        let Some(port) = port else {
            self.counters.unroutable += 1;
            self.vals.release(p.data);
            return;
        };
        self.frame.clear();
        let values = (p.data != NIL).then(|| self.vals.get(p.data));
        let ok = pool_wire::emit(&p, values, &mut self.frame);
        self.vals.release(p.data);
        if let Err(e) = ok {
            if self.counters.unencodable == 0 {
                eprintln!("switch {}: cannot encode {p:?}: {e}", self.node);
            }
            self.counters.unencodable += 1;
            return;
        }
        if ecn {
            pool_wire::mark_ecn(&mut self.frame);
            self.ecn_carried += 1;
        }
        if let Some((_, c)) = to_leaf {
            pool_wire::set_tree_child(&mut self.frame, c);
        }
        let fate = self.faults[port as usize].fate();
        if self.trace {
            eprintln!(
                "{:>12} ns switch {} tx port {port}: {:?} {:?} job {} psn {} bitmap {:#x} fate {fate:?}",
                self.now_ps() / 1000,
                self.node,
                p.kind,
                p.dst,
                p.job,
                p.psn,
                p.bitmap
            );
        }
        match fate {
            Fate::Drop => self.counters.fault_dropped += 1,
            Fate::Send { copies, hold } => {
                if copies > 1 {
                    self.counters.fault_duplicated += 1;
                }
                for _ in 0..copies {
                    if hold.is_zero() {
                        let frame = std::mem::take(&mut self.frame);
                        self.egress(port, &frame);
                        self.frame = frame;
                    } else {
                        self.counters.fault_held += 1;
                        self.seq += 1;
                        self.held.push(Reverse(Held {
                            due: Instant::now() + hold,
                            seq: self.seq,
                            port,
                            bytes: self.frame.clone(),
                        }));
                    }
                }
            }
        }
    }

    pub fn flush_tx(&mut self) {
        for p in 0..self.tx.len() {
            if !self.tx[p].is_empty() {
                let (sent, bytes, failed) = self.tx[p].flush(&self.socks[p], self.peers[p]);
                self.counters.tx_packets += sent;
                self.counters.tx_bytes += bytes;
                self.counters.send_errors += failed;
            }
        }
    }
}
