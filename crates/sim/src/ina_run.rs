//! Drives the sans-I/O in-network aggregation protocols of `reducelab-ina` on the packet
//! engine: switch programs on every switch, host agents on the participating hosts, protocol
//! headers in an arena whose handles ride in the engine's packets.
//!
//! Every collective (tenant) of a scenario uses the same protocol; tenants share the switches'
//! descriptor tables (hash-indexed, or statically partitioned per tenant when asked).
//!
//! A collective's ranks join at times known beforehand (timers set at the start), or, for a
//! trace's collectives (`InaSpec::trace_driven`), when the workload says so ([`InaWorld::join`]);
//! then the world tells the workload when each rank has the result ([`InaWorld::take_finished`]).

use reducelab_des::SimTime;

use crate::slab::Slab;

use reducelab_ina::host::{Collective, HostStats};
use reducelab_ina::{Addr, Header, HostAction, HostProtocol, SwAction, SwitchProgram, Values, NIL};
use reducelab_net::{AppDst, AppOut, AppPacket, Network, PacketId, ProgramLimits, APP_QUEUE_LOW};
use reducelab_topo::Topology;

pub use reducelab_scenario::ina::{collective_salt, fabric_of, setup, InaSetup, InaSpec, InaSwitchSpec};
use serde::Serialize;

#[derive(Clone, Copy)]
enum TimerTarget {
    Switch(u32),
    Host { coll: u32, rank: u32 },
    Sample,
}

/// Result of one in-network allreduce.
#[derive(Clone, Debug, Serialize)]
pub struct InaResult {
    pub protocol: String,
    pub hosts: usize,
    pub bytes: u64,
    pub blocks: u32,
    /// First host to start until the last host has every block.
    pub runtime_ps: Option<u64>,
    pub goodput_gbps: Option<f64>,
    /// Until every host was released by the completion notification (Canary).
    pub completion_ps: Option<u64>,
    /// Every host has every block and every result checked out.
    pub verified: bool,
    pub hosts_finished: usize,
    pub bad_blocks: u64,
    pub values_checked: bool,
    pub host_stats: HostStats,
}

/// Network-wide protocol counters.
#[derive(Clone, Debug, Default, Serialize)]
pub struct InaTotals {
    pub aggregated: u64,
    pub flushed: u64,
    pub stragglers: u64,
    pub collisions: u64,
    pub broadcasts_without_descriptor: u64,
    pub restorations: u64,
    pub reclaimed: u64,
    pub lost_packets: u64,
    /// Descriptors still allocated at the end of the run, over all switches.
    pub descriptors_left: u64,
    /// Largest number of descriptors any switch held at once.
    pub peak_descriptors: u32,
    pub peak_descriptor_bytes: u64,
    /// Time-weighted mean descriptors of the busiest switch over the collectives' span.
    pub busiest_mean_descriptors: f64,
    pub values_slots_left: u32,
}

pub struct InaWorld {
    pub specs: Vec<InaSpec>,
    colls: Vec<Collective>,
    agents: Vec<Vec<Box<dyn HostProtocol>>>,
    /// `rank_of[c][host]`.
    rank_of: Vec<Vec<u32>>,
    /// Collectives each host takes part in.
    host_colls: Vec<Vec<u32>>,
    programs: Vec<Option<Box<dyn SwitchProgram>>>,
    arena: Slab<Header>,
    vals: Values,
    timers: Slab<(TimerTarget, u64)>,
    swbuf: Vec<SwAction>,
    hbuf: Vec<HostAction>,
    wire_buf: Vec<u8>,
    first_hop: Vec<u32>,
    pub switch: InaSwitchSpec,
    pub lost_packets: u64,
    pub misdelivered: u64,
    left: usize,
    done_flags: Vec<bool>,
    /// `started[c][rank]`: the agent's `start` has run (its NIC pulls nothing before).
    started: Vec<Vec<bool>>,
    /// (time ps, busiest switch's descriptors, descriptors over all switches).
    pub occupancy: Vec<(u64, u32, u64)>,
    descriptor_bytes: u64,
    /// Per trace-driven collective (else empty): whether each rank's result was reported.
    reported: Vec<Vec<bool>>,
    /// (collective, rank) that have the result since the workload last took them.
    finished: Vec<(u32, u32)>,
    /// Per collective: when its first rank joined (`u64::MAX`: none yet; trace-driven ones).
    first_join_ps: Vec<u64>,
}

impl InaWorld {
    /// The world of `specs`, set up on `topo` by [`setup`] (the scenario's validation did).
    pub fn new(topo: &Topology, specs: Vec<InaSpec>, switch: InaSwitchSpec, built: InaSetup) -> InaWorld {
        let n_hosts = topo.num_hosts();
        let InaSetup { fabric, colls, programs, elems_per_packet: epp } = built;
        let values = specs.iter().any(|s| s.values);
        let mut agents = Vec::new();
        let mut rank_of = Vec::new();
        let mut host_colls = vec![Vec::new(); n_hosts];
        for (ci, s) in specs.iter().enumerate() {
            let mut ro = vec![NIL; n_hosts];
            for (r, &h) in s.hosts.iter().enumerate() {
                ro[h as usize] = r as u32;
                host_colls[h as usize].push(ci as u32);
            }
            rank_of.push(ro);
        }
        let first_hop: Vec<u32> = (0..n_hosts as u32).map(|h| fabric.first_hop(h)).collect();
        // Host agents after the switch programs: a protocol may size its hosts' window from
        // the switch memory it laid out (Flare).
        for (s, c) in specs.iter().zip(&colls) {
            agents.push((0..c.n()).map(|r| s.protocol.host_agent(c, r)).collect());
        }
        let left = specs.len();
        let started = colls.iter().map(|c| vec![false; c.n() as usize]).collect();
        let descriptor_bytes = epp as u64 * 4 + reducelab_ina::wire::HEADER_BYTES as u64;
        let reported =
            specs
                .iter()
                .zip(&colls)
                .map(|(s, c)| if s.trace_driven { vec![false; c.n() as usize] } else { Vec::new() });
        let reported = reported.collect();
        let first_join_ps = vec![u64::MAX; left];
        InaWorld {
            specs,
            colls,
            agents,
            rank_of,
            host_colls,
            programs,
            arena: Slab::default(),
            vals: Values::new(if values { epp as usize } else { 0 }),
            timers: Slab::default(),
            swbuf: Vec::new(),
            hbuf: Vec::new(),
            wire_buf: Vec::new(),
            first_hop,
            switch,
            lost_packets: 0,
            misdelivered: 0,
            done_flags: vec![false; left],
            started,
            left,
            occupancy: Vec::new(),
            descriptor_bytes,
            reported,
            finished: Vec::new(),
            first_join_ps,
        }
    }

    pub fn is_done(&self) -> bool {
        self.left == 0
    }

    pub fn start(&mut self, net: &mut Network) {
        // A protocol with its own switch model (Flare's PsPIN) sets the service time itself.
        let epp = self.colls.iter().map(|c| c.elems_per_packet).max().unwrap_or(1);
        let limits = match self.specs.first().and_then(|s| s.protocol.switch_service(epp)) {
            Some((packets_per_second, latency_ps)) => ProgramLimits { packets_per_second, latency_ps },
            None => self.switch.limits,
        };
        net.set_program_limits(limits);
        for (i, p) in self.programs.iter().enumerate() {
            if p.is_some() {
                net.set_programmable(i as u32, true);
            }
        }
        for ci in 0..self.colls.len() {
            if self.specs[ci].trace_driven {
                continue;
            }
            for r in 0..self.colls[ci].n() {
                let at = self.rank_start(ci, r);
                self.timer(net, at, TimerTarget::Host { coll: ci as u32, rank: r }, u64::MAX);
            }
        }
        if !self.specs.is_empty() {
            self.timer(net, 0, TimerTarget::Sample, 0);
        }
    }

    /// When rank `r` of collective `ci` joins it (ps).
    fn rank_start(&self, ci: usize, r: u32) -> u64 {
        let s = &self.specs[ci];
        s.rank_start.get(r as usize).unwrap_or(&s.start).ps()
    }

    /// Rank `rank` of trace-driven collective `ci` joins it now: its agent starts.
    pub fn join(&mut self, net: &mut Network, ci: u32, rank: u32) {
        let now = net.now().ps();
        let first = &mut self.first_join_ps[ci as usize];
        *first = (*first).min(now);
        self.start_agent(net, ci, rank);
    }

    /// Moves the (collective, rank) of trace-driven collectives that got their result since the
    /// last call to `out`.
    pub fn take_finished(&mut self, out: &mut Vec<(u32, u32)>) {
        out.append(&mut self.finished);
    }

    fn start_agent(&mut self, net: &mut Network, coll: u32, rank: u32) {
        let now = net.now().ps();
        let c = &self.colls[coll as usize];
        let mut buf = std::mem::take(&mut self.hbuf);
        self.started[coll as usize][rank as usize] = true;
        self.agents[coll as usize][rank as usize].start(c, now, &mut self.vals, &mut buf);
        self.hbuf = buf;
        self.after_host_event(net, coll, rank);
        self.update_done(net, coll);
    }

    /// Reports rank `rank` of trace-driven collective `ci` once it has the result.
    fn note_finished(&mut self, ci: u32, rank: u32) {
        let Some(seen) = self.reported.get_mut(ci as usize).and_then(|r| r.get_mut(rank as usize)) else { return };
        if !*seen && self.agents[ci as usize][rank as usize].finished_ps().is_some() {
            *seen = true;
            self.finished.push((ci, rank));
        }
    }

    fn timer(&mut self, net: &mut Network, at: u64, target: TimerTarget, token: u64) {
        let slot = self.timers.put((target, token));
        net.schedule_timer(SimTime(at), slot as u64);
    }

    fn put(&mut self, h: Header) -> u32 {
        let h = if self.switch.wire_check { self.through_wire(h) } else { h };
        self.arena.put(h)
    }

    /// `h` as its receiver parses it from the bytes of its frame (wire-check mode). A header
    /// the frame cannot carry is a protocol bug: the run stops with it.
    fn through_wire(&mut self, h: Header) -> Header {
        let mut buf = std::mem::take(&mut self.wire_buf);
        let values = (h.data != NIL).then(|| self.vals.get(h.data));
        let frame = self.specs[h.tenant as usize].protocol.frame();
        let (mut p, v) = frame.round_trip(&h, values, &mut buf).unwrap_or_else(|e| panic!("wire check: {e} in {h:?}"));
        self.wire_buf = buf;
        if h.data != NIL {
            self.vals.get_mut(h.data)[..v.len()].copy_from_slice(&v);
            p.data = h.data;
        }
        p.ecn = h.ecn;
        p
    }

    fn take(&mut self, app: u32) -> Header {
        self.arena.take(app)
    }

    fn app_packet(&self, app: u32, h: &Header, host_node_first_hop: u32) -> AppPacket {
        let dst = match h.dst {
            Addr::Host(x) => AppDst::Host(x),
            Addr::Switch(s) => AppDst::Node(s),
            Addr::FirstHop => AppDst::Node(host_node_first_hop),
        };
        AppPacket { app, wire_bytes: h.wire_bytes(), dst, intercept: h.intercepted() }
    }

    /// Carries out a host agent's actions.
    fn host_actions(&mut self, net: &mut Network, coll: u32, rank: u32) {
        let host = self.colls[coll as usize].ranks[rank as usize];
        let mut buf = std::mem::take(&mut self.hbuf);
        for a in buf.drain(..) {
            match a {
                HostAction::Send(h) => {
                    let app = self.put(h);
                    let pkt = self.app_packet(app, &h, self.first_hop[host as usize]);
                    net.app_inject(host, 0, pkt);
                }
                HostAction::Timer { at, token } => self.timer(net, at, TimerTarget::Host { coll, rank }, token),
            }
        }
        self.hbuf = buf;
    }

    /// Tops up host `host`'s NIC queue from its agents.
    fn refill(&mut self, net: &mut Network, host: u32) {
        let queued = net.app_queued(host, 0);
        if queued >= APP_QUEUE_LOW {
            return;
        }
        let room = 2 * APP_QUEUE_LOW - queued;
        for i in 0..self.host_colls[host as usize].len() {
            let ci = self.host_colls[host as usize][i];
            let now = net.now().ps();
            let rank = self.rank_of[ci as usize][host as usize];
            // Not before the agent's own start (another collective of this host may start it
            // at the same time, earlier in the event order).
            if !self.started[ci as usize][rank as usize] {
                continue;
            }
            let c = &self.colls[ci as usize];
            let mut buf = std::mem::take(&mut self.hbuf);
            self.agents[ci as usize][rank as usize].pull(c, now, room, &mut self.vals, &mut buf);
            self.hbuf = buf;
            self.note_finished(ci, rank);
            self.host_actions(net, ci, rank);
        }
    }

    fn after_host_event(&mut self, net: &mut Network, ci: u32, rank: u32) {
        self.note_finished(ci, rank);
        self.host_actions(net, ci, rank);
        let host = self.colls[ci as usize].ranks[rank as usize];
        self.refill(net, host);
    }

    fn switch_actions(&mut self, net: &mut Network, node: u32, pkt: Option<PacketId>) {
        let mut buf = std::mem::take(&mut self.swbuf);
        for a in buf.drain(..) {
            match a {
                SwAction::Consume => net.app_consume(pkt.expect("custody")),
                SwAction::Forward { out, hdr } => {
                    let pkt = pkt.expect("custody");
                    let app = self.put(hdr);
                    let ap = self.app_packet(app, &hdr, NIL);
                    net.app_forward(node, pkt, to_out(out), ap);
                }
                SwAction::Emit { out, hdr } => {
                    let app = self.put(hdr);
                    let ap = self.app_packet(app, &hdr, NIL);
                    net.app_emit(node, to_out(out), ap);
                }
                SwAction::Timer { at, token } => self.timer(net, at, TimerTarget::Switch(node), token),
            }
        }
        self.swbuf = buf;
    }

    pub fn on_app_at_switch(&mut self, net: &mut Network, node: u32, in_port: u16, pkt: PacketId) {
        let app = net.app_packet(pkt).app;
        let mut hdr = self.take(app);
        hdr.ecn |= net.app_ecn(pkt);
        let now = net.now().ps();
        match self.programs[node as usize].as_mut() {
            Some(p) => p.on_packet(now, in_port, hdr, &mut self.vals, &mut self.swbuf),
            None => {
                self.vals.release(hdr.data);
                self.swbuf.push(SwAction::Consume);
            }
        }
        self.switch_actions(net, node, Some(pkt));
    }

    pub fn on_app_delivered(&mut self, net: &mut Network, host: u32, app: u32) {
        let mut hdr = self.take(app);
        hdr.ecn |= net.app_delivered_ecn();
        let ci = hdr.tenant as u32;
        let rank = self.rank_of.get(ci as usize).map(|r| r[host as usize]).unwrap_or(NIL);
        if rank == NIL {
            self.misdelivered += 1;
            self.vals.release(hdr.data);
            return;
        }
        let now = net.now().ps();
        let c = &self.colls[ci as usize];
        let mut buf = std::mem::take(&mut self.hbuf);
        self.agents[ci as usize][rank as usize].on_packet(c, now, hdr, &mut self.vals, &mut buf);
        self.hbuf = buf;
        self.after_host_event(net, ci, rank);
        self.update_done(net, ci);
    }

    /// A copy of protocol packet `app` with its own data (the duplication fault).
    pub fn duplicate(&mut self, app: u32) -> u32 {
        let h = self.arena.get(app);
        let copy = Header { data: self.vals.duplicate(h.data), ..h };
        self.put(copy)
    }

    pub fn on_app_lost(&mut self, _net: &mut Network, app: u32) {
        let hdr = self.take(app);
        self.vals.release(hdr.data);
        self.lost_packets += 1;
    }

    pub fn on_queue_low(&mut self, net: &mut Network, host: u32) {
        self.refill(net, host);
    }

    /// Handles a timer of the in-network world.
    pub fn on_timer(&mut self, net: &mut Network, token: u64) {
        let (target, t) = self.timers.take(token as u32);
        let now = net.now().ps();
        match target {
            TimerTarget::Switch(node) => {
                if let Some(p) = self.programs[node as usize].as_mut() {
                    p.on_timer(now, t, &mut self.vals, &mut self.swbuf);
                }
                self.switch_actions(net, node, None);
            }
            TimerTarget::Host { coll, rank } if t == u64::MAX => self.start_agent(net, coll, rank),
            TimerTarget::Host { coll, rank } => {
                let c = &self.colls[coll as usize];
                let mut buf = std::mem::take(&mut self.hbuf);
                self.agents[coll as usize][rank as usize].on_timer(c, now, t, &mut self.vals, &mut buf);
                self.hbuf = buf;
                self.after_host_event(net, coll, rank);
                self.update_done(net, coll);
            }
            TimerTarget::Sample => {
                let mut busiest = 0u32;
                let mut total = 0u64;
                for p in self.programs.iter().flatten() {
                    let u = p.descriptors_in_use();
                    busiest = busiest.max(u);
                    total += u as u64;
                }
                self.occupancy.push((now, busiest, total));
                // Keep sampling while the collectives run and anything else can still happen
                // (alone, the sampler would keep a stalled run alive for ever).
                if self.left > 0 && net.pending_events() > 0 {
                    self.timer(net, now + self.switch.sample_ps, TimerTarget::Sample, 0);
                }
            }
        }
    }

    fn update_done(&mut self, net: &mut Network, ci: u32) {
        if !self.done_flags[ci as usize] && self.agents[ci as usize].iter().all(|a| a.completed_ps().is_some()) {
            self.done_flags[ci as usize] = true;
            self.left -= 1;
            // Its switches' control plane releases what they keep of it.
            let now = net.now().ps();
            for p in self.programs.iter_mut().flatten() {
                p.release_tenant(now, self.colls[ci as usize].tenant, &mut self.vals);
            }
            for a in self.agents[ci as usize].iter_mut() {
                a.release(now, &mut self.vals);
            }
        }
    }
}

/// Time-weighted mean descriptors of a switch over `[0, end]` ps.
fn mean_descriptors(p: &dyn SwitchProgram, end: u64) -> f64 {
    let s = p.stats();
    (s.descriptor_ps + p.descriptors_in_use() as u128 * end.saturating_sub(s.last_change_ps) as u128) as f64
        / end as f64
}

fn to_out(o: reducelab_ina::Out) -> AppOut {
    match o {
        reducelab_ina::Out::Route => AppOut::Route,
        reducelab_ina::Out::Port(p) => AppOut::Port(p),
    }
}

impl InaWorld {
    /// Why the run cannot finish, if it has not.
    pub fn unfinished(&self) -> Option<String> {
        if self.left == 0 {
            return None;
        }
        let mut parts = Vec::new();
        for (ci, c) in self.colls.iter().enumerate() {
            if self.done_flags[ci] {
                continue;
            }
            let missing: u64 = self.agents[ci].iter().map(|a| a.missing() as u64).sum();
            let unreleased =
                self.agents[ci].iter().filter(|a| a.finished_ps().is_some() && a.completed_ps().is_none()).count();
            let why = self.specs[ci].protocol.stall_cause(self.lost_packets);
            let abandoned: u64 = self.agents[ci].iter().map(|a| a.stats().abandoned).sum();
            let why = if abandoned > 0 {
                format!("{why}; hosts gave up {abandoned} blocks or completion notices after {} retransmission timeouts each (peers unreachable)", reducelab_ina::canary_host::MAX_EXPIRIES)
            } else {
                why
            };
            parts.push(format!("in-network allreduce {ci}: {missing} blocks missing over {} hosts, {unreleased} hosts not released ({why})", c.n()));
        }
        Some(parts.join("; "))
    }

    pub fn results(&self) -> Vec<InaResult> {
        self.colls
            .iter()
            .enumerate()
            .map(|(ci, c)| {
                let ags = &self.agents[ci];
                let start = self.start_ps(ci);
                let finished = ags.iter().filter(|a| a.finished_ps().is_some()).count();
                let all = finished == ags.len();
                let runtime = all.then(|| ags.iter().filter_map(|a| a.finished_ps()).max().unwrap_or(start) - start);
                let completion = ags
                    .iter()
                    .all(|a| a.completed_ps().is_some())
                    .then(|| ags.iter().map(|a| a.completed_ps().unwrap_or(start)).max().unwrap_or(start) - start);
                let mut hs = HostStats::default();
                for a in ags {
                    hs.accumulate(a.stats());
                }
                let bytes = self.specs[ci].bytes;
                InaResult {
                    protocol: self.specs[ci].protocol.label(),
                    hosts: ags.len(),
                    bytes,
                    blocks: c.blocks,
                    runtime_ps: runtime,
                    goodput_gbps: runtime.filter(|&t| t > 0).map(|t| bytes as f64 * 8.0 / (t as f64 * 1e-3)),
                    completion_ps: completion,
                    verified: all && hs.bad_blocks == 0,
                    hosts_finished: finished,
                    bad_blocks: hs.bad_blocks,
                    values_checked: !c.expected_values.is_empty(),
                    host_stats: hs,
                }
            })
            .collect()
    }

    /// One CSV row per programmable switch: its descriptor peak and time-weighted mean
    /// over the sampled span, and its protocol counters.
    pub fn switches_csv(&self) -> String {
        use std::fmt::Write;
        let end = self.occupancy.last().map(|o| o.0).unwrap_or(0).max(1);
        let mut c = String::from("node,peak_descriptors,mean_descriptors,descriptors_left,aggregated,flushed,stragglers,collisions,broadcasts_without_descriptor,restorations,reclaimed\n");
        for (node, p) in self.programs.iter().enumerate() {
            let Some(p) = p else { continue };
            let s = p.stats();
            let mean = mean_descriptors(p.as_ref(), end);
            let _ = writeln!(
                c,
                "{node},{},{mean:.3},{},{},{},{},{},{},{},{}",
                s.peak_descriptors,
                p.descriptors_in_use(),
                s.aggregated,
                s.flushed,
                s.stragglers,
                s.collisions,
                s.broadcasts_without_descriptor,
                s.restorations,
                s.reclaimed
            );
        }
        c
    }

    pub fn totals(&self) -> InaTotals {
        let mut t =
            InaTotals { lost_packets: self.lost_packets, values_slots_left: self.vals.live, ..InaTotals::default() };
        let end = self.occupancy.last().map(|o| o.0).unwrap_or(0).max(1);
        for p in self.programs.iter().flatten() {
            let s = p.stats();
            t.aggregated += s.aggregated;
            t.flushed += s.flushed;
            t.stragglers += s.stragglers;
            t.collisions += s.collisions;
            t.broadcasts_without_descriptor += s.broadcasts_without_descriptor;
            t.restorations += s.restorations;
            t.reclaimed += s.reclaimed;
            t.descriptors_left += p.descriptors_in_use() as u64;
            if s.peak_descriptors >= t.peak_descriptors {
                t.peak_descriptors = s.peak_descriptors;
            }
            let mean = mean_descriptors(p.as_ref(), end);
            t.busiest_mean_descriptors = t.busiest_mean_descriptors.max(mean);
        }
        t.peak_descriptor_bytes = t.peak_descriptors as u64 * self.descriptor_bytes;
        t
    }
}

impl InaWorld {
    /// Progress of allreduce `ci` at `now_ps`: (blocks received over all its hosts, blocks
    /// expected over all its hosts, started and not complete).
    pub fn work_of(&self, ci: usize, now_ps: u64) -> (u64, u64, bool) {
        let total = self.colls[ci].blocks as u64 * self.agents[ci].len() as u64;
        let missing: u64 = self.agents[ci].iter().map(|a| a.missing() as u64).sum();
        (total - missing, total, now_ps >= self.start_ps(ci) && !self.done_flags[ci])
    }

    /// When allreduce `ci` started: its spec's start, or a trace-driven one's first join
    /// (`u64::MAX` before it).
    fn start_ps(&self, ci: usize) -> u64 {
        if self.specs[ci].trace_driven {
            self.first_join_ps[ci]
        } else {
            self.specs[ci].start.ps()
        }
    }

    /// Hosts of allreduce `ci` that have not completed it (received every block and, for
    /// Canary, been released), in rank order.
    pub fn unfinished_hosts(&self, ci: usize) -> Vec<u32> {
        self.agents[ci]
            .iter()
            .zip(&self.specs[ci].hosts)
            .filter(|(a, _)| a.completed_ps().is_none())
            .map(|(_, &h)| h)
            .collect()
    }
}
