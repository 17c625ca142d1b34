//! SwitchML (NSDI'21) as an in-network allreduce of the registry: the shared-pool protocol's own
//! switch program ([`SwitchMlSwitch`], the one training jobs run) and its workers' slot window
//! ([`WorkerWindow`] with [`WindowControl::Slots`], the one training workers run), driven
//! through [`InaProtocol`] so that an `ina_allreduce` entry, a training entry's partitions and
//! any runtime of [`crate::PROTOCOLS`] can use it beside Canary and the trees.
//!
//! One switch aggregates each tenant: its root (`roots`, or one drawn from the scenario seed
//! among the top-level switches, as for one static tree). Every rank sends block `b`'s
//! contribution (one bit of the aggregator's bitmap: its rank) to its first-hop switch, which
//! sends it on to the tenant's root by the network's routing; the switch adds it into slot `b mod window` of the set `(b / window) mod 2` of the
//! tenant's region (two sets of `window` aggregators: the shadow copy) and, when every rank's
//! bit is in, sends the result to each rank. A rank keeps at most `window` blocks outstanding
//! (a slot's next block waits for its previous block's result), re-sends a block whose result
//! has not come within `retransmit_timeout_us`, and the switch answers a re-sent block whose
//! aggregation is complete from the kept result, to that rank alone. Other switches on the way
//! forward the packets untouched.
//!
//! Packets are the registry's [`Header`]: a contribution is a `Reduce` to the root with its rank
//! in `src` (the bitmap bit), a result a `Retransmit` to one host. The root keeps every
//! completed aggregation of a tenant (to answer re-sends) until the tenant is released
//! ([`SwitchProgram::release_tenant`]): they are its [`SwitchProgram::kept_results`].

use std::any::Any;
use std::collections::BTreeMap;
use std::sync::Arc;

use reducelab_transport::worker::{WindowControl, WorkerParams, WorkerWindow};

use crate::fabric::Fabric;
use crate::host::{contribution, Collective, HostStats, Results, MAX_BLOCKS};
use crate::pool::{AggPacket, Dest, PacketKind, PoolAction, PoolProgram};
use crate::protocol::{
    integer, number, only_known, HostProtocol, InaProtocol, ParamError, Params, SwitchConfig, Tenant,
};
use crate::switchml::{Region, SwitchMlSwitch};
use crate::{Addr, Header, HostAction, Kind, Out, SwAction, SwitchProgram, SwitchStats, Values};

/// SwitchML as configured for one collective.
#[derive(Clone, Debug, PartialEq)]
pub struct SwitchMlAllreduce {
    /// Aggregators per set of a tenant's region (two sets), and the blocks a rank keeps
    /// outstanding.
    pub window: u32,
    /// A rank's re-send timeout (the worker window's first and least timeout).
    pub rto_ps: u64,
}

impl SwitchMlAllreduce {
    /// From a traffic entry's keys: `window` (default 16), `retransmit_timeout_us` (default 1000).
    pub fn build(p: &Params) -> Result<Arc<dyn InaProtocol>, ParamError> {
        only_known(p, crate::protocol_info("switchml"))?;
        let window = integer(p, "window", 16, 1, 1 << 16)? as u32;
        let rto_us = number(p, "retransmit_timeout_us", 1000.0, 1e-3, 1e9)?;
        let rto_ps = (rto_us * 1e6).round() as u64;
        Ok(Arc::new(SwitchMlAllreduce { window, rto_ps: rto_ps.max(1) }))
    }

    fn params(&self) -> WorkerParams {
        WorkerParams {
            packet_bytes: 1,
            control: WindowControl::Slots { slots: self.window },
            initial_rto_ps: self.rto_ps,
            min_rto_ps: self.rto_ps,
            reminder_after: None,
            resend_on_gap: false,
        }
    }
}

impl InaProtocol for SwitchMlAllreduce {
    fn info(&self) -> &'static crate::ProtocolInfo {
        crate::protocol_info("switchml")
    }
    fn label(&self) -> String {
        "switchml".to_string()
    }
    fn as_any(&self) -> &dyn Any {
        self
    }
    /// The aggregating switch.
    fn root_count(&self) -> Option<u16> {
        Some(1)
    }
    /// Each tenant's root gets a region of two sets of `window` aggregators out of its
    /// `table_size`; every switch forwards the tenants it does not aggregate.
    fn switch_programs(
        &self,
        fabric: &Fabric,
        tenants: &[Tenant<'_>],
        cfg: &SwitchConfig,
    ) -> Result<Vec<Option<Box<dyn SwitchProgram>>>, String> {
        let mut at: BTreeMap<u32, Vec<Region>> = BTreeMap::new();
        let mut ranks: BTreeMap<u16, Vec<u32>> = BTreeMap::new();
        let mut roots: BTreeMap<u16, u32> = BTreeMap::new();
        for (ci, t) in tenants.iter().enumerate() {
            let Some(p) = t.protocol.as_any().downcast_ref::<SwitchMlAllreduce>() else {
                return Err(format!(
                    "traffic: in-network allreduce {ci} uses protocol {}; switchml shares the switches with no other protocol",
                    t.protocol.label()
                ));
            };
            let n = t.coll.n();
            if n > 64 {
                return Err(format!(
                    "traffic: in-network allreduce {ci} has {n} ranks; a SwitchML aggregator's bitmap holds 64"
                ));
            }
            let &[root] = t.roots else {
                return Err(format!(
                    "traffic: in-network allreduce {ci} names {} root switches; switchml takes one",
                    t.roots.len()
                ));
            };
            if fabric.nodes.get(root as usize).is_none_or(|nd| nd.is_host) {
                return Err(format!("traffic: in-network allreduce {ci}'s root {root} is not a switch"));
            }
            let regions = at.entry(root).or_default();
            let offset = regions.iter().map(|r| r.offset + 2 * r.slots).max().unwrap_or(0);
            regions.push(Region { job: t.coll.tenant, offset, slots: p.window, workers: n as u16 });
            ranks.insert(t.coll.tenant, t.coll.ranks.clone());
            roots.insert(t.coll.tenant, root);
        }
        let mut programs: Vec<Option<Box<dyn SwitchProgram>>> = Vec::with_capacity(fabric.nodes.len());
        for (i, node) in fabric.nodes.iter().enumerate() {
            if node.is_host {
                programs.push(None);
                continue;
            }
            let regions = at.remove(&(i as u32)).unwrap_or_default();
            let need: u64 = regions.iter().map(|r| 2 * r.slots as u64).sum();
            if need > cfg.table_size as u64 {
                return Err(format!(
                    "table_size: switch {i} aggregates {} tenants of 2 × window aggregators each, {need} in all, more than its {}",
                    regions.len(),
                    cfg.table_size
                ));
            }
            let hosts: BTreeMap<u16, Vec<u32>> =
                regions.iter().map(|r| (r.job, ranks.get(&r.job).cloned().unwrap_or_default())).collect();
            let program =
                if regions.is_empty() { None } else { Some(SwitchMlSwitch::new(cfg.table_size.max(1), &regions)?) };
            programs.push(Some(Box::new(SwitchMlRoot {
                program,
                hosts,
                roots: roots.clone(),
                released: Default::default(),
                stats: SwitchStats::default(),
                out: Vec::new(),
            })));
        }
        Ok(programs)
    }
    fn host_agent(&self, c: &Collective, rank: u32) -> Box<dyn HostProtocol> {
        Box::new(SwitchMlHost {
            rank,
            window: WorkerWindow::new(c.blocks.max(1), self.params()),
            armed: None,
            results: Results::new(c),
            stats: HostStats::default(),
        })
    }
    /// A rank gives a block up after 64 re-sends without progress
    /// ([`reducelab_transport::worker::MAX_RETRANSMISSIONS`]).
    fn recovery_horizon_ps(&self) -> u64 {
        self.rto_ps.saturating_mul(reducelab_transport::worker::MAX_RETRANSMISSIONS as u64 + 2)
    }
    fn stall_cause(&self, lost_packets: u64) -> String {
        format!(
            "{lost_packets} packets were lost; ranks re-send a block until its result arrives, so the aggregating switch or a link to it stayed unreachable (or a rank gave a block up after {} re-sends)",
            reducelab_transport::worker::MAX_RETRANSMISSIONS
        )
    }
}

/// A switch under SwitchML: [`SwitchMlSwitch`] for the tenants it aggregates, forwarding for
/// the others.
struct SwitchMlRoot {
    program: Option<SwitchMlSwitch>,
    /// Host of each rank of each tenant it aggregates.
    hosts: BTreeMap<u16, Vec<u32>>,
    /// The aggregating switch of every tenant (where a rank's first hop sends its blocks on).
    roots: BTreeMap<u16, u32>,
    /// Tenants the control plane released: their late packets are dropped, so that none
    /// takes an aggregator again.
    released: std::collections::BTreeSet<u16>,
    stats: SwitchStats,
    out: Vec<PoolAction>,
}

impl SwitchMlRoot {
    /// The registry header of `p`, a result for rank `rank` of its job.
    fn result_header(&self, p: &AggPacket, host: u32) -> Header {
        let mut h = Header::new(Kind::Retransmit, Addr::Host(host), (p.job as u32 & 0xFF) << 24 | p.psn, p.job);
        h.counter = p.bitmap.count_ones() as u16;
        h.hosts = p.workers;
        h.elems = p.elems;
        h.fp = p.fp;
        h.data = p.data;
        h
    }
}

impl SwitchProgram for SwitchMlRoot {
    fn on_packet(&mut self, now: u64, in_port: u16, hdr: Header, vals: &mut Values, out: &mut Vec<SwAction>) {
        if hdr.kind == Kind::Reduce && self.released.contains(&hdr.tenant) {
            self.stats.stragglers += 1;
            vals.release(hdr.data);
            out.push(SwAction::Consume);
            return;
        }
        let mine = hdr.kind == Kind::Reduce && self.hosts.contains_key(&hdr.tenant);
        let (Some(program), true) = (self.program.as_mut(), mine) else {
            // On its way to the tenant's aggregating switch (a rank sends to its first hop).
            let mut hdr = hdr;
            if hdr.kind == Kind::Reduce {
                match self.roots.get(&hdr.tenant) {
                    Some(&root) => hdr.dst = Addr::Switch(root),
                    None => {
                        vals.release(hdr.data);
                        out.push(SwAction::Consume);
                        return;
                    }
                }
            }
            out.push(SwAction::Forward { out: Out::Route, hdr });
            return;
        };
        let workers = self.hosts[&hdr.tenant].len() as u16;
        let mut p = AggPacket::new(PacketKind::Gradient, Dest::Switch, hdr.tenant, hdr.id & (MAX_BLOCKS - 1), workers);
        // A contribution carries its rank; anything else is malformed for the program.
        p.bitmap = if hdr.src < 64 && hdr.counter == 1 { 1u64 << hdr.src } else { 0 };
        p.elems = hdr.elems;
        p.fp = hdr.fp;
        p.data = hdr.data;
        let before = program.pool().in_use();
        let completed = program.stats().completed;
        let aggregated = program.stats().aggregated;
        self.out.clear();
        program.on_packet(now, in_port, p, vals, &mut self.out);
        let after = program.pool().in_use();
        if after != before {
            self.stats.note_use(now, before, after);
        }
        self.stats.aggregated += program.stats().aggregated - aggregated;
        self.stats.flushed += program.stats().completed - completed;
        let acts = std::mem::take(&mut self.out);
        for a in &acts {
            match *a {
                PoolAction::Consume => out.push(SwAction::Consume),
                // A gradient of a job it aggregates is never passed on.
                PoolAction::Forward(_) => unreachable!("SwitchML forwards only packets of other jobs"),
                PoolAction::Emit(r) => {
                    let hosts = &self.hosts[&r.job];
                    match r.dst {
                        Dest::Worker(rank) => {
                            self.stats.stragglers += 1;
                            out.push(SwAction::Emit {
                                out: Out::Route,
                                hdr: self.result_header(&r, hosts[rank as usize]),
                            });
                        }
                        _ => {
                            self.stats.broadcasts += 1;
                            for (k, &host) in hosts.iter().enumerate() {
                                let mut h = self.result_header(&r, host);
                                if k > 0 {
                                    h.data = vals.duplicate(r.data);
                                }
                                out.push(SwAction::Emit { out: Out::Route, hdr: h });
                            }
                        }
                    }
                }
            }
        }
        self.out = acts;
    }
    fn on_timer(&mut self, _now: u64, _token: u64, _vals: &mut Values, _out: &mut Vec<SwAction>) {}
    fn descriptors_in_use(&self) -> u32 {
        self.program.as_ref().map_or(0, |p| p.pool().in_use())
    }
    /// Completed aggregations kept to answer re-sends.
    fn kept_results(&self) -> u32 {
        self.program.as_ref().map_or(0, |p| p.pool().used().filter(|&i| p.pool().get(i).complete).count() as u32)
    }
    fn release_tenant(&mut self, now: u64, tenant: u16, vals: &mut Values) {
        self.released.insert(tenant);
        if let Some(p) = self.program.as_mut() {
            let before = p.pool().in_use();
            p.release_job(now, tenant, vals);
            let after = p.pool().in_use();
            if after != before {
                self.stats.note_use(now, before, after);
            }
        }
    }
    fn stats(&self) -> &SwitchStats {
        &self.stats
    }
}

/// A rank of a SwitchML allreduce: the slot window of a training worker over the collective's
/// blocks.
struct SwitchMlHost {
    rank: u32,
    window: WorkerWindow,
    /// The time of the timer last asked for.
    armed: Option<u64>,
    results: Results,
    stats: HostStats,
}

impl SwitchMlHost {
    fn arm(&mut self, out: &mut Vec<HostAction>) {
        if let Some(t) = self.window.timer_ps() {
            if self.armed != Some(t) {
                self.armed = Some(t);
                out.push(HostAction::Timer { at: t, token: t });
            }
        }
    }
}

impl HostProtocol for SwitchMlHost {
    fn start(&mut self, _c: &Collective, _now: u64, _vals: &mut Values, _out: &mut Vec<HostAction>) {}
    fn pull(&mut self, c: &Collective, now: u64, room: usize, vals: &mut Values, out: &mut Vec<HostAction>) {
        let mut made = 0;
        while made < room {
            let Some(s) = self.window.transmit(now) else { break };
            let h = contribution(c, self.rank, s.psn, 0, Kind::Reduce, Addr::FirstHop, vals);
            self.stats.sent_reduce += 1;
            if s.retransmission {
                self.stats.retransmits_sent += 1;
            }
            out.push(HostAction::Send(h));
            made += 1;
        }
        self.arm(out);
    }
    fn on_packet(&mut self, c: &Collective, now: u64, hdr: Header, vals: &mut Values, out: &mut Vec<HostAction>) {
        if hdr.kind != Kind::Retransmit {
            self.stats.stale += 1;
            vals.release(hdr.data);
            return;
        }
        let b = c.block_in(hdr.id);
        if b < c.blocks {
            self.window.on_ack(b, false, now);
        }
        self.results.accept(c, now, &hdr, vals, &mut self.stats);
        self.arm(out);
    }
    fn on_timer(&mut self, _c: &Collective, now: u64, token: u64, _vals: &mut Values, out: &mut Vec<HostAction>) {
        if self.armed != Some(token) {
            return; // superseded
        }
        self.armed = None;
        self.window.on_timer(now);
        self.arm(out);
    }
    fn finished_ps(&self) -> Option<u64> {
        self.results.finished_ps
    }
    fn completed_ps(&self) -> Option<u64> {
        self.results.finished_ps
    }
    fn missing(&self) -> u32 {
        self.results.missing()
    }
    fn stats(&self) -> &HostStats {
        &self.stats
    }
}
