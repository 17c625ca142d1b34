//! The workload of a scenario: its traffic generators driving a [`Network`].

use crate::collective::{CollectiveResult, CollectiveRun};
use crate::goal_run::{GoalResult, GoalRun, GOAL_TIMER};
use crate::ina_run::{InaSetup, InaSwitchSpec, InaWorld};
use crate::scenario::Traffic;
use reducelab_des::{Rng, SimTime};
use reducelab_ina::pool_jobs::TrainingLayout;
use reducelab_net::{MsgId, Network, PacketId, WorkDone, Workload};
use reducelab_topo::Topology;
use std::collections::BTreeMap;

pub use reducelab_scenario::{RandomPermutation, Redraw};

/// The running state of a `random_permutation` generator: permutation `k` is drawn from its own
/// stream (`base.fork(k)`), so it does not depend on when it is first needed.
struct PermutationState {
    base: Rng,
    /// Position of each host in the generator's set (`u32::MAX`: not in it).
    pos: Vec<u32>,
    /// Messages each host (by position) has sent.
    sent: Vec<u64>,
    /// Message rounds in use: permutation k and how many hosts have yet to send their k-th
    /// message (dropped when every host has).
    rounds: BTreeMap<u64, (Vec<u32>, u32)>,
    /// The current epoch's permutation.
    epoch: Option<(u64, Vec<u32>)>,
}

impl PermutationState {
    fn new(spec: &RandomPermutation, base: Rng, num_hosts: usize) -> Self {
        let mut pos = vec![u32::MAX; num_hosts];
        for (i, &h) in spec.hosts.iter().enumerate() {
            pos[h as usize] = i as u32;
        }
        PermutationState { base, pos, sent: vec![0; spec.hosts.len()], rounds: BTreeMap::new(), epoch: None }
    }

    /// The destination of `src`'s next message, which starts at `at`; counts it as sent.
    fn next(&mut self, spec: &RandomPermutation, src: u32, at: SimTime) -> u32 {
        let i = self.pos[src as usize] as usize;
        let k = self.sent[i];
        self.sent[i] += 1;
        match spec.redraw {
            Redraw::Message => {
                let n = spec.hosts.len() as u32;
                let base = &self.base;
                let (perm, left) =
                    self.rounds.entry(k).or_insert_with(|| (derangement(&mut base.fork(k), &spec.hosts), n));
                let d = perm[i];
                *left -= 1;
                if *left == 0 {
                    self.rounds.remove(&k);
                }
                d
            }
            Redraw::Epoch { epoch_ps } => {
                let e = at.ps().saturating_sub(spec.start.ps()) / epoch_ps;
                if self.epoch.as_ref().is_none_or(|(cur, _)| *cur != e) {
                    self.epoch = Some((e, derangement(&mut self.base.fork(e), &spec.hosts)));
                }
                self.epoch.as_ref().expect("drawn").1[i]
            }
        }
    }
}

/// Per-generator counters.
#[derive(Clone, Debug, Default)]
pub struct TrafficCounters {
    pub messages: u64,
    pub completed: u64,
    pub bytes_delivered: u64,
}

pub struct ScenarioWorkload {
    pub traffic: Vec<Traffic>,
    pub counters: Vec<TrafficCounters>,
    /// The running collective of each `collective` generator.
    runs: Vec<Option<CollectiveRun>>,
    /// The running trace of each `goal` generator.
    goals: Vec<Option<GoalRun>>,
    goals_left: u32,
    rng: Rng,
    fg_messages: u64,
    fg_done: u64,
    fg_bytes: u64,
    fg_bytes_done: u64,
    collectives_left: u32,
    /// In-network allreduces (`ina_allreduce` generators), if any.
    pub ina: Option<InaWorld>,
    /// Training jobs on a shared switch memory (the `training` generator), if any.
    pub training: Option<crate::training_run::TrainingWorld>,
    /// The state of each `random_permutation` generator, by traffic index.
    perms: Vec<Option<PermutationState>>,
    /// The trace entries whose collectives the in-network world serves: (traffic index, the
    /// in-network world's number of its first one).
    innet_traces: Vec<(usize, u32)>,
    /// Per collective of the in-network world: the trace entry it belongs to (`u32::MAX`: none).
    innet_owner: Vec<u32>,
    /// (instance or collective, rank) handed between the traces and the in-network world.
    innet_buf: Vec<(u32, u32)>,
}

impl ScenarioWorkload {
    /// `ina` holds the switch resources for `ina_allreduce` generators, `ina_setup` and
    /// `training_layout` what the scenario's validation built of them and of a training entry
    /// (so building the worlds cannot fail here).
    pub fn new(
        traffic: Vec<Traffic>,
        rng: Rng,
        topo: &Topology,
        seed: u64,
        ina: &InaSwitchSpec,
        ina_setup: Option<InaSetup>,
        training_layout: Option<TrainingLayout>,
    ) -> Self {
        let ina_specs: Vec<_> = traffic.iter().flat_map(|t| t.ina_specs().iter().cloned()).collect();
        let (mut innet_traces, mut innet_owner) = (Vec::new(), Vec::new());
        for (ti, t) in traffic.iter().enumerate() {
            let n = t.ina_specs().len();
            if matches!(t, Traffic::Goal(_)) && n > 0 {
                innet_traces.push((ti, innet_owner.len() as u32));
                innet_owner.extend(std::iter::repeat_n(ti as u32, n));
            } else {
                innet_owner.extend(std::iter::repeat_n(u32::MAX, n));
            }
        }
        let ina = ina_setup.map(|built| InaWorld::new(topo, ina_specs, ina.clone(), built));
        let training = traffic.iter().find_map(|t| if let Traffic::Training(s) = t { Some(s.clone()) } else { None });
        let training = training.zip(training_layout).map(|(s, layout)| {
            crate::training_run::TrainingWorld::new(topo, s, layout, seed).expect("validated with the scenario")
        });
        let counters = vec![TrafficCounters::default(); traffic.len()];
        let mut collectives_left = 0;
        let runs = traffic
            .iter()
            .enumerate()
            .map(|(ti, t)| match t {
                Traffic::Collective { hosts, bytes, start, schedule, .. } => {
                    collectives_left += 1;
                    let schedule = schedule.clone().expect("the packet backend's schedule is built with the scenario");
                    Some(CollectiveRun::new(
                        topo,
                        schedule,
                        hosts.clone(),
                        *bytes,
                        4,
                        ti as u64,
                        *start,
                        seed ^ ti as u64,
                    ))
                }
                _ => None,
            })
            .collect();
        let goals: Vec<Option<GoalRun>> = traffic
            .iter()
            .enumerate()
            .map(|(ti, t)| match t {
                Traffic::Goal(g) => Some(GoalRun::new(g.clone(), ti as u64)),
                _ => None,
            })
            .collect();
        let goals_left = goals.iter().flatten().filter(|g| !g.is_done()).count() as u32;
        let perms = traffic
            .iter()
            .enumerate()
            .map(|(ti, t)| match t {
                Traffic::RandomPermutation(spec) => {
                    Some(PermutationState::new(spec, rng.fork(0x9E3_0000 + ti as u64), topo.num_hosts()))
                }
                _ => None,
            })
            .collect();
        ScenarioWorkload {
            traffic,
            counters,
            runs,
            goals,
            goals_left,
            rng,
            fg_messages: 0,
            fg_done: 0,
            fg_bytes: 0,
            fg_bytes_done: 0,
            collectives_left,
            ina,
            training,
            perms,
            innet_traces,
            innet_owner,
            innet_buf: Vec::new(),
        }
    }

    /// Hands what the traces and the in-network world owe each other until neither owes anything:
    /// ranks that reached an in-network collective join it, ranks that have its result go on in
    /// their trace (which may reach the next one at once).
    fn settle_innet(&mut self, net: &mut Network) {
        if self.innet_traces.is_empty() {
            return;
        }
        let Some(w) = self.ina.as_mut() else { return };
        let mut buf = std::mem::take(&mut self.innet_buf);
        loop {
            for &(ti, first) in &self.innet_traces {
                let run = self.goals[ti].as_mut().expect("a trace entry's run");
                run.take_joins(&mut buf);
                for (j, rank) in buf.drain(..) {
                    w.join(net, first + j, rank);
                }
            }
            w.take_finished(&mut buf);
            if buf.is_empty() {
                break;
            }
            for (ci, rank) in buf.drain(..) {
                let ti = self.innet_owner[ci as usize] as usize;
                let first = self.innet_traces.iter().find(|&&(t, _)| t == ti).expect("an owner").1;
                let run = self.goals[ti].as_mut().expect("a trace entry's run");
                let was_done = run.is_done();
                run.innet_done(net, ci - first, rank);
                if run.is_done() && !was_done {
                    self.goals_left -= 1;
                }
            }
        }
        self.innet_buf = buf;
        self.stop_if_done(net);
    }

    /// Ends the run once a trace entry finished, if the foreground is done.
    fn stop_after_trace(&self, net: &mut Network) {
        if self.innet_traces.is_empty() {
            if self.foreground_done() {
                net.stop();
            }
        } else {
            self.stop_if_done(net);
        }
    }

    /// True when every foreground message has been delivered and every collective is done.
    pub fn foreground_done(&self) -> bool {
        self.fg_done == self.fg_messages
            && self.collectives_left == 0
            && self.goals_left == 0
            && self.ina.as_ref().is_none_or(|w| w.is_done())
            && self.training.as_ref().is_none_or(|w| w.is_done())
            && (self.fg_messages > 0
                || self.runs.iter().any(|r| r.is_some())
                || self.goals.iter().any(|r| r.is_some())
                || self.ina.is_some()
                || self.training.is_some())
    }

    /// Results of the GOAL generators, by traffic index.
    pub fn goal_results(&self) -> Vec<(usize, GoalResult)> {
        self.goals.iter().enumerate().filter_map(|(i, r)| r.as_ref().map(|r| (i, r.result()))).collect()
    }

    /// Results of the `chakra` entries that finished, by traffic index.
    pub fn chakra_results(&self) -> Vec<(usize, reducelab_chakra::ChakraResults)> {
        self.goals
            .iter()
            .enumerate()
            .filter_map(|(i, r)| r.as_ref().and_then(|r| r.chakra_results()).map(|c| (i, c)))
            .collect()
    }

    /// `goal_ops.csv` of the GOAL generators that record their operations, by traffic index.
    pub fn goal_ops_csv(&self) -> Vec<(usize, String)> {
        self.goals
            .iter()
            .enumerate()
            .filter_map(|(i, r)| r.as_ref().and_then(|r| r.ops_csv()).map(|c| (i, c)))
            .collect()
    }

    /// Results of the collective generators, by traffic index.
    pub fn collective_results(&self) -> Vec<(usize, CollectiveResult)> {
        self.runs.iter().enumerate().filter_map(|(i, r)| r.as_ref().map(|r| (i, r.result()))).collect()
    }

    fn send(&mut self, net: &mut Network, ti: usize, src: u32, dst: u32, bytes: u64, at: SimTime) {
        let id = net.send(src, dst, bytes, at, ti as u64, None);
        self.counters[ti].messages += 1;
        if self.traffic[ti].is_background() {
            net.mark_background(id);
        } else {
            self.fg_messages += 1;
            self.fg_bytes += bytes;
        }
    }

    /// Ends the run once the foreground is done — except an in-network run without
    /// background traffic, which drains instead, so the switches' soft state (descriptors of
    /// re-issued blocks) times out and the run can show every descriptor freed.
    fn stop_if_done(&self, net: &mut Network) {
        if self.foreground_done() && (self.ina.is_none() || self.traffic.iter().any(|t| t.is_background())) {
            net.stop();
        }
    }

    /// Sends host `src`'s next `random_permutation` message of generator `ti` (paced, if the
    /// generator has a rate).
    fn send_permutation(&mut self, net: &mut Network, ti: usize, src: u32) {
        let Traffic::RandomPermutation(spec) = &self.traffic[ti] else {
            unreachable!("a random_permutation generator")
        };
        let state = self.perms[ti].as_mut().expect("permutation state");
        let j = state.sent[state.pos[src as usize] as usize];
        let at = spec.paced_start(j).max(net.now());
        let dst = state.next(spec, src, at);
        let bytes = spec.bytes;
        self.send(net, ti, src, dst, bytes, at);
    }

    /// A uniformly random peer of `hosts` other than `src`.
    fn random_peer(rng: &mut Rng, hosts: &[u32], src: u32) -> u32 {
        loop {
            let p = hosts[rng.below(hosts.len() as u64) as usize];
            if p != src {
                return p;
            }
        }
    }
}

/// A random permutation of `hosts` with no host mapped to itself.
pub fn derangement(rng: &mut Rng, hosts: &[u32]) -> Vec<u32> {
    let mut perm = hosts.to_vec();
    rng.shuffle(&mut perm);
    let n = perm.len();
    for i in 0..n {
        if perm[i] == hosts[i] {
            perm.swap(i, (i + 1) % n);
        }
    }
    perm
}

impl Workload for ScenarioWorkload {
    fn on_start(&mut self, net: &mut Network) {
        for ti in 0..self.traffic.len() {
            // Explicit lists can hold millions of messages: read them in place, not cloned.
            if let Traffic::Messages { list } = &self.traffic[ti] {
                for k in 0..list.len() {
                    let Traffic::Messages { list } = &self.traffic[ti] else { unreachable!() };
                    let (s, d, b, at) = list[k];
                    self.send(net, ti, s, d, b, at);
                }
                continue;
            }
            match self.traffic[ti].clone() {
                Traffic::Messages { .. } => unreachable!("handled above"),
                Traffic::Permutation { hosts, bytes, start } => {
                    let perm = derangement(&mut self.rng, &hosts);
                    for (i, &s) in hosts.iter().enumerate() {
                        self.send(net, ti, s, perm[i], bytes, start);
                    }
                }
                Traffic::Incast { senders, receiver, bytes, start } => {
                    for s in senders {
                        self.send(net, ti, s, receiver, bytes, start);
                    }
                }
                Traffic::RandomUniform { hosts, bytes, inflight, start } => {
                    for &s in &hosts {
                        for _ in 0..inflight {
                            let d = Self::random_peer(&mut self.rng, &hosts, s);
                            self.send(net, ti, s, d, bytes, start);
                        }
                    }
                }
                Traffic::RandomPermutation(spec) => {
                    for &s in &spec.hosts {
                        for _ in 0..spec.inflight {
                            self.send_permutation(net, ti, s);
                        }
                    }
                }
                Traffic::Ina(_) | Traffic::Training(_) | Traffic::InaTraining(_) => {}
                Traffic::Goal(_) => {
                    let run = self.goals[ti].as_mut().expect("goal run");
                    run.start(net, ti);
                    if run.is_done() {
                        self.goals_left -= 1;
                    }
                }
                Traffic::Collective { .. } => {
                    let run = self.runs[ti].as_mut().expect("collective run");
                    run.start(net);
                    if run.is_done() {
                        self.collectives_left -= 1;
                    }
                }
            }
        }
        if let Some(w) = self.ina.as_mut() {
            w.start(net);
        }
        if let Some(w) = self.training.as_mut() {
            w.start(net);
        }
        self.settle_innet(net);
        if self.foreground_done() {
            net.stop();
        }
    }

    fn on_timer(&mut self, net: &mut Network, token: u64) {
        if token & GOAL_TIMER != 0 {
            let ti = ((token & !GOAL_TIMER) >> 32) as usize;
            if let Some(run) = self.goals.get_mut(ti).and_then(|r| r.as_mut()) {
                let was_done = run.is_done();
                run.on_timer(net, token as u32);
                if run.is_done() && !was_done {
                    self.goals_left -= 1;
                    self.stop_after_trace(net);
                }
            }
            self.settle_innet(net);
            return;
        }
        if let Some(w) = self.training.as_mut() {
            w.on_timer(net, token);
            self.stop_if_done(net);
        } else if let Some(w) = self.ina.as_mut() {
            w.on_timer(net, token);
            self.stop_if_done(net);
            self.settle_innet(net);
        }
    }

    fn on_app_at_switch(&mut self, net: &mut Network, node: u32, in_port: u16, pkt: PacketId) {
        if let Some(w) = self.training.as_mut() {
            return w.on_app_at_switch(net, node, in_port, pkt);
        }
        match self.ina.as_mut() {
            Some(w) => w.on_app_at_switch(net, node, in_port, pkt),
            None => net.app_consume(pkt),
        }
    }

    fn on_app_delivered(&mut self, net: &mut Network, host: u32, app: u32) {
        if let Some(w) = self.training.as_mut() {
            w.on_app_delivered(net, host, app);
            self.stop_if_done(net);
        } else if let Some(w) = self.ina.as_mut() {
            w.on_app_delivered(net, host, app);
            self.stop_if_done(net);
            self.settle_innet(net);
        }
    }

    fn on_app_lost(&mut self, net: &mut Network, app: u32) {
        if let Some(w) = self.training.as_mut() {
            w.on_app_lost(net, app);
        } else if let Some(w) = self.ina.as_mut() {
            w.on_app_lost(net, app);
        }
    }
    fn on_app_duplicate(&mut self, _net: &mut Network, app: u32) -> Option<u32> {
        if let Some(w) = self.training.as_mut() {
            Some(w.duplicate(app))
        } else {
            self.ina.as_mut().map(|w| w.duplicate(app))
        }
    }

    fn on_app_queue_low(&mut self, net: &mut Network, host: u32, _port: u16) {
        if let Some(w) = self.training.as_mut() {
            w.on_queue_low(net, host);
        } else if let Some(w) = self.ina.as_mut() {
            w.on_queue_low(net, host);
            self.settle_innet(net);
        }
    }

    /// The finite generators that have not finished, each named by kind and index, then
    /// the in-network protocol's own account. Background traffic is never blamed.
    fn unfinished(&self, net: &Network) -> Option<String> {
        let s = net.stats();
        let lost = s.drops_buffer + s.drops_loss + s.drops_failure + s.drops_no_route;
        let mut parts = Vec::new();
        let mut ina_k = 0;
        for (ti, t) in self.traffic.iter().enumerate() {
            let c = &self.counters[ti];
            match t {
                _ if t.is_background() => {}
                Traffic::Ina(spec) => {
                    let ci = ina_k;
                    ina_k += 1;
                    let Some(w) = self.ina.as_ref() else { continue };
                    let stuck = w.unfinished_hosts(ci);
                    if !stuck.is_empty() {
                        parts.push(format!(
                            "ina_allreduce traffic[{ti}]: {} of {} hosts unfinished ({})",
                            stuck.len(),
                            spec.hosts.len(),
                            list_some("host", stuck.iter().map(|h| h.to_string()))
                        ));
                    }
                }
                Traffic::InaTraining(t) => {
                    let first = ina_k;
                    ina_k += t.specs.len();
                    let Some(w) = self.ina.as_ref() else { continue };
                    for (j, job) in t.jobs.iter().enumerate() {
                        let mut stuck: Vec<u32> =
                            job.specs.clone().flat_map(|k| w.unfinished_hosts(first + k)).collect();
                        stuck.sort_unstable();
                        stuck.dedup();
                        if !stuck.is_empty() {
                            parts.push(format!(
                                "training traffic[{ti}] job {j}: {} of {} workers unfinished ({})",
                                stuck.len(),
                                job.workers.len(),
                                list_some("host", stuck.iter().map(|h| h.to_string()))
                            ));
                        }
                    }
                }
                Traffic::Goal(g) => {
                    ina_k += g.ina.len();
                    let Some(run) = self.goals[ti].as_ref() else { continue };
                    parts.extend(run.unfinished(ti));
                }
                Traffic::Collective { .. } => {
                    let Some(run) = self.runs[ti].as_ref() else { continue };
                    let stuck = run.unfinished_ranks();
                    if !stuck.is_empty() {
                        let r = run.result();
                        parts.push(format!(
                            "collective traffic[{ti}] ({} {:?}): {} of {} ranks unfinished ({})",
                            r.algorithm,
                            r.collective,
                            stuck.len(),
                            r.ranks,
                            list_some(
                                "rank",
                                stuck.iter().map(|&(rank, step, steps)| format!(
                                    "{rank} on host {} at step {step} of {steps}",
                                    run.hosts()[rank as usize]
                                ))
                            )
                        ));
                    }
                }
                _ if c.completed < c.messages => {
                    let raw = *net.transport() == reducelab_net::TransportConfig::None;
                    let hint = if lost > 0 && raw { " (raw messages have no retransmission)" } else { "" };
                    parts.push(format!(
                        "{} traffic[{ti}]: {} of {} messages undelivered{hint}",
                        t.kind(),
                        c.messages - c.completed,
                        c.messages
                    ));
                }
                _ => {}
            }
        }
        if let Some(why) = self.ina.as_ref().and_then(|w| w.unfinished()) {
            parts.push(why);
        }
        if let Some(why) = self.training.as_ref().and_then(|w| w.unfinished()) {
            parts.push(why);
        }
        (!parts.is_empty()).then(|| parts.join("; "))
    }

    fn on_delivered(&mut self, net: &mut Network, msg: MsgId) {
        let (ti, src, bytes) = {
            let m = net.message(msg);
            (m.tag as usize, m.src, m.bytes)
        };
        let c = &mut self.counters[ti];
        c.completed += 1;
        c.bytes_delivered += bytes;
        if let Some(run) = self.goals[ti].as_mut() {
            let was_done = run.is_done();
            run.on_delivered(net, msg.0);
            if run.is_done() && !was_done {
                self.goals_left -= 1;
                self.stop_after_trace(net);
            }
            self.settle_innet(net);
        } else if let Some(run) = self.runs[ti].as_mut() {
            run.on_delivered(net, msg);
            if run.is_done() {
                self.collectives_left -= 1;
                if self.foreground_done() {
                    net.stop();
                }
            }
        } else if let Traffic::RandomUniform { hosts, bytes, .. } = &self.traffic[ti] {
            // Closed loop: the sender moves on to a new random peer.
            let d = Self::random_peer(&mut self.rng, hosts, src);
            let b = *bytes;
            let now = net.now();
            self.send(net, ti, src, d, b, now);
        } else if let Traffic::RandomPermutation(_) = &self.traffic[ti] {
            self.send_permutation(net, ti, src);
        } else {
            self.fg_done += 1;
            self.fg_bytes_done += bytes;
            if self.foreground_done() {
                net.stop();
            }
        }
    }

    /// Progress of the finite generators: the mean of their fractions done (plain messages by
    /// bytes, collectives by steps, in-network allreduces by blocks received); any foreground
    /// payload delivered, message started, step or block finished counts as movement.
    fn work(&self, net: &Network) -> WorkDone {
        let now = net.now();
        let fg = net.foreground();
        let mut units = fg.payload_bytes + fg.started;
        let mut waiting = fg.started > fg.delivered;
        let (mut fractions, mut n) = (0.0, 0u32);
        if self.fg_bytes > 0 {
            fractions += self.fg_bytes_done as f64 / self.fg_bytes as f64;
            n += 1;
        }
        for run in self.goals.iter().flatten() {
            let (done, total) = run.progress();
            units += done;
            waiting |= now >= run.start_time() && !run.is_done();
            fractions += if total == 0 { 1.0 } else { done as f64 / total as f64 };
            n += 1;
        }
        for run in self.runs.iter().flatten() {
            let (done, total) = run.steps();
            units += done;
            waiting |= now >= run.start_time() && !run.is_done();
            fractions += if total == 0 { 1.0 } else { done as f64 / total as f64 };
            n += 1;
        }
        if let Some(w) = self.ina.as_ref() {
            for ci in 0..w.specs.len() {
                let (done, total, wait) = w.work_of(ci, now.ps());
                units += done;
                waiting |= wait;
                fractions += if total == 0 { 1.0 } else { done as f64 / total as f64 };
                n += 1;
            }
        }
        if let Some(w) = self.training.as_ref() {
            let (done, total, wait) = w.work(now.ps());
            units += done;
            waiting |= wait;
            fractions += if total == 0 { 1.0 } else { done as f64 / total as f64 };
            n += 1;
        }
        WorkDone { fraction: if n == 0 { 0.0 } else { fractions / n as f64 }, units, waiting }
    }
}

/// `"host 2"`, `"hosts 2, 5, 7"` or `"hosts 2, 5, 7, 9 and 12 more"`: at most four names.
pub(crate) fn list_some(noun: &str, items: impl Iterator<Item = String>) -> String {
    let all: Vec<String> = items.collect();
    let shown = all.iter().take(4).cloned().collect::<Vec<_>>().join(", ");
    let more = if all.len() > 4 { format!(" and {} more", all.len() - 4) } else { String::new() };
    format!("{noun}{} {shown}{more}", if all.len() == 1 { "" } else { "s" })
}
