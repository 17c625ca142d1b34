//! The shared-pool protocols (SwitchML, ATP, DSA; seed 001 and its baselines) as in-network
//! allreduces of the registry: each one's own switch program (the one its training jobs run:
//! [`SwitchMlSwitch`], [`AtpSwitch`], [`DsaSwitch`]), its workers' window ([`WorkerWindow`],
//! the training workers' one) and, for ATP and DSA, its parameter server ([`AtpPs`], [`DsaPs`]),
//! driven through [`InaProtocol`] so that an `ina_allreduce` entry, a training entry's
//! partitions and any runtime of [`crate::PROTOCOLS`] can use them beside Canary and the trees.
//!
//! One switch aggregates each tenant: its root (`roots`, or one drawn from the scenario seed
//! among the top-level switches, as for one static tree). Every rank sends block `b`'s
//! contribution (one bit of the aggregator's bitmap: its rank) to its first-hop switch, which
//! sends it on to the tenant's root by the network's routing. Other switches on the way
//! forward the packets untouched.
//!
//! - **SwitchML**: the root adds the contribution into slot `b mod window` of the set
//!   `(b / window) mod 2` of the tenant's region (two sets of `window` aggregators: the shadow
//!   copy) and, when every rank's bit is in, sends the result to each rank. A rank keeps at
//!   most `window` blocks outstanding (a slot's next block waits for its previous block's
//!   result), re-sends a block whose result has not come within `retransmit_timeout_us`, and
//!   the switch answers a re-sent block whose aggregation is complete from the kept result.
//! - **ATP**: the root's aggregators (`[ina] table_size` of them, shared by every tenant it
//!   aggregates) are taken by `Hash(tenant, block)`, first come first served; a collision sends
//!   the contribution on to the parameter server, a full aggregate goes to the PS too, and the
//!   PS's result, multicast to the ranks by the root, frees the aggregator. Ranks keep an AIMD
//!   window of `window` packets (up to 16×), re-send after their timeout with ATP's resend flag
//!   (which clears the aggregator and sends its partial to the PS).
//! - **DSA**: the same pool and hash with preemption by priority, bitmap deduplication, the
//!   switch's own result multicast, and the PS's reminders (fetching the switch's partial and
//!   every rank's original contribution) on its EWMA timeout, or when a rank stuck after three
//!   re-sends sends it a notice. A block's priority is Eq. (1)'s `P_j(l)` for a one-layer job
//!   with equal communication and computation, `1/T_j`, where `T_j` is the rank's remaining
//!   time estimated as its blocks without a result × one 306-byte packet at 100 Gb/s: the
//!   allreduce closest to its end keeps the aggregator (the seed's priority is for training
//!   jobs; an allreduce has no layers or computation, so only its remaining time is left).
//!
//! **Where the parameter server runs.** An allreduce has no host beside its ranks, so the PS of
//! a tenant runs on its rank 0's host, in that rank's agent (a co-located PS); what rank 0
//! sends to its own PS, and what the PS answers rank 0 alone, stays in the host.
//!
//! **Packets** are the registry's [`Header`] (one packet type for every protocol of the
//! registry); [`to_header`] and [`from_header`] are the one mapping of a pool packet
//! ([`AggPacket`]) onto it:
//!
//! | pool packet | header kind | goes to |
//! | --- | --- | --- |
//! | gradient to the switch | `Reduce` | first hop, then the root |
//! | gradient to the PS (collision, fetch answer) | `Fallback` | rank 0's host |
//! | partial aggregate to the PS | `Reduce` with `bypass` | rank 0's host |
//! | result through the switch (PS → ranks) | `Broadcast` | first hop, then the root, then every rank |
//! | result to one rank | `Retransmit` | the rank's host |
//! | reminder (PS → switch) | `Restore` | first hop, then the root |
//! | fetch (PS → ranks) | `Failure`, multicast mark | first hop, then the root, then every rank |
//! | reminder notice (rank → PS) | `RetxRequest` | rank 0's host |
//!
//! The bitmap rides in `children`, DSA's priority in `src` and ATP's resend flag in `tree`
//! (0 or 1); a SwitchML rank's contribution keeps the Canary frame's form (counter 1, its rank
//! in `src`), so SwitchML runs on the software switch. ATP's and DSA's packets do not fit the
//! Canary frame (a 64-bit bitmap and a priority), so they travel in the addressed pool frame
//! ([`crate::pool_wire`]). A PSN is a block's place in the collective's sequence
//! (`sequence_base + b`, 20 bits, as [`Collective::id`]): a session's calls of SwitchML
//! continue it ([`InaProtocol::session_calls`]).
//!
//! A root keeps every completed SwitchML aggregation of a tenant (to answer re-sends), and ATP
//! or DSA leftovers of late re-sends, until the tenant is released
//! ([`SwitchProgram::release_tenant`]): they are its [`SwitchProgram::kept_results`] and
//! descriptors in use.

use std::any::Any;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use reducelab_transport::worker::{WindowControl, WorkerParams, WorkerWindow, MAX_RETRANSMISSIONS};

use crate::atp::AtpSwitch;
use crate::dsa::{DsaSwitch, REMINDER_AFTER_RETRANSMISSIONS};
use crate::fabric::Fabric;
use crate::host::{contribution, Collective, HostStats, Results, MAX_BLOCKS};
use crate::policy::{self, PolicyInputs, Preemption};
use crate::pool::{AggPacket, Dest, PacketKind, PoolAction, PsAction};
use crate::pool_jobs::{AnyPoolProgram, PoolProtocol, Ps, MAX_WINDOW_FACTOR, PACKET_BYTES};
use crate::protocol::{
    integer, number, only_known, HostProtocol, InaProtocol, ParamError, Params, Progress, SessionCalls, SwitchConfig,
    Tenant,
};
use crate::ps::{AtpPs, DsaPs};
use crate::switchml::{Region, SwitchMlSwitch};
use crate::{Addr, Header, HostAction, Kind, Out, SwAction, SwitchProgram, SwitchStats, Values, MULTICAST_MARK};

/// One 306-byte packet at 100 Gb/s: DSA's unit of an allreduce's remaining time.
const PACKET_TIME_PS: u64 = PACKET_BYTES as u64 * 8 * 10;

/// Re-send timeouts a rank that its peers may still need stays after it had every result
/// ([`HostProtocol::linger_ps`]), as Canary's coordinator does.
const LINGER_RTOS: u64 = crate::canary_host::COORDINATOR_LINGER_RTOS;

/// A timer token of the co-located parameter server (the workers' tokens are times, below it).
const PS_TOKEN: u64 = 1 << 63;

/// A shared-pool protocol as configured for one collective.
#[derive(Clone, Debug, PartialEq)]
pub struct PoolAllreduce {
    pub protocol: PoolProtocol,
    /// SwitchML: aggregators per set of a tenant's region (two sets) and the blocks a rank
    /// keeps outstanding. ATP, DSA: a rank's initial AIMD window in packets (up to 16×).
    pub window: u32,
    /// A rank's re-send timeout (the worker window's first and least timeout; DSA's PS
    /// timeout floor too).
    pub rto_ps: u64,
}

impl PoolAllreduce {
    fn read(name: &str, p: &Params, window: u32) -> Result<(u32, u64), ParamError> {
        only_known(p, crate::protocol_info(name))?;
        let window = integer(p, "window", window as u64, 1, 1 << 16)? as u32;
        let rto_us = number(p, "retransmit_timeout_us", 1000.0, 1e-3, 1e9)?;
        Ok((window, ((rto_us * 1e6).round() as u64).max(1)))
    }

    /// SwitchML from a traffic entry's keys: `window` (default 16), `retransmit_timeout_us`
    /// (default 1000).
    pub fn build_switchml(p: &Params) -> Result<Arc<dyn InaProtocol>, ParamError> {
        let (window, rto_ps) = Self::read("switchml", p, 16)?;
        Ok(Arc::new(PoolAllreduce { protocol: PoolProtocol::SwitchMl, window, rto_ps }))
    }

    /// ATP: `window` (default 196 packets: the training workers' 60 KB of 306-byte packets),
    /// `retransmit_timeout_us` (default 1000: the 1 ms floor).
    pub fn build_atp(p: &Params) -> Result<Arc<dyn InaProtocol>, ParamError> {
        let (window, rto_ps) = Self::read("atp", p, 196)?;
        Ok(Arc::new(PoolAllreduce { protocol: PoolProtocol::Atp, window, rto_ps }))
    }

    /// DSA (preemption by priority): keys as ATP's.
    pub fn build_dsa(p: &Params) -> Result<Arc<dyn InaProtocol>, ParamError> {
        let (window, rto_ps) = Self::read("dsa", p, 196)?;
        Ok(Arc::new(PoolAllreduce { protocol: PoolProtocol::Dsa(Preemption::Priority), window, rto_ps }))
    }

    fn params(&self) -> WorkerParams {
        let dsa = matches!(self.protocol, PoolProtocol::Dsa(_));
        let control = match self.protocol {
            PoolProtocol::SwitchMl => WindowControl::Slots { slots: self.window },
            _ => WindowControl::Aimd {
                initial_bytes: self.window as u64,
                max_bytes: self.window as u64 * MAX_WINDOW_FACTOR,
            },
        };
        WorkerParams {
            // Windows count packets.
            packet_bytes: 1,
            control,
            initial_rto_ps: self.rto_ps,
            min_rto_ps: self.rto_ps,
            reminder_after: dsa.then_some(REMINDER_AFTER_RETRANSMISSIONS),
            resend_on_gap: false,
        }
    }
}

impl InaProtocol for PoolAllreduce {
    fn info(&self) -> &'static crate::ProtocolInfo {
        crate::protocol_info(self.protocol.name())
    }
    fn label(&self) -> String {
        self.protocol.label()
    }
    fn as_any(&self) -> &dyn Any {
        self
    }
    /// The aggregating switch.
    fn root_count(&self) -> Option<u16> {
        Some(1)
    }
    /// Each tenant's root aggregates it (SwitchML: a region of two sets of `window`
    /// aggregators out of its `table_size`; ATP, DSA: the root's pool of `table_size`
    /// aggregators, shared by the tenants it aggregates); every switch forwards the rest.
    fn switch_programs(
        &self,
        fabric: &Fabric,
        tenants: &[Tenant<'_>],
        cfg: &SwitchConfig,
    ) -> Result<Vec<Option<Box<dyn SwitchProgram>>>, String> {
        let name = self.protocol.name();
        let mut at: BTreeMap<u32, Vec<Region>> = BTreeMap::new();
        let mut ranks: BTreeMap<u16, Vec<u32>> = BTreeMap::new();
        let mut roots: BTreeMap<u16, u32> = BTreeMap::new();
        for (ci, t) in tenants.iter().enumerate() {
            let same = t.protocol.as_any().downcast_ref::<PoolAllreduce>().filter(|p| p.protocol == self.protocol);
            let Some(p) = same else {
                return Err(format!(
                    "traffic: in-network allreduce {ci} uses protocol {}; {name} shares the switches with no other protocol",
                    t.protocol.label()
                ));
            };
            let n = t.coll.n();
            if n > 64 {
                return Err(format!(
                    "traffic: in-network allreduce {ci} has {n} ranks; a {name} aggregator's bitmap holds 64"
                ));
            }
            let &[root] = t.roots else {
                return Err(format!(
                    "traffic: in-network allreduce {ci} names {} root switches; {name} takes one",
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
            let program = if regions.is_empty() {
                None
            } else {
                Some(match self.protocol {
                    PoolProtocol::SwitchMl => {
                        let need: u64 = regions.iter().map(|r| 2 * r.slots as u64).sum();
                        if need > cfg.table_size as u64 {
                            return Err(format!(
                                "table_size: switch {i} aggregates {} tenants of 2 × window aggregators each, {need} in all, more than its {}",
                                regions.len(),
                                cfg.table_size
                            ));
                        }
                        AnyPoolProgram::SwitchMl(SwitchMlSwitch::new(cfg.table_size.max(1), &regions)?)
                    }
                    PoolProtocol::Atp => {
                        AnyPoolProgram::Atp(AtpSwitch::new(cfg.table_size).map_err(|e| format!("table_size: {e}"))?)
                    }
                    PoolProtocol::Dsa(rule) => AnyPoolProgram::Dsa(
                        DsaSwitch::new(cfg.table_size, rule).map_err(|e| format!("table_size: {e}"))?,
                    ),
                })
            };
            let hosts: BTreeMap<u16, Vec<u32>> =
                regions.iter().map(|r| (r.job, ranks.get(&r.job).cloned().unwrap_or_default())).collect();
            programs.push(Some(Box::new(PoolRoot {
                program,
                hosts,
                roots: roots.clone(),
                released: BTreeSet::new(),
                stats: SwitchStats::default(),
                out: Vec::new(),
            })));
        }
        Ok(programs)
    }
    fn host_agent(&self, c: &Collective, rank: u32) -> Box<dyn HostProtocol> {
        let n = c.n() as u16;
        let ps = match (rank, self.protocol) {
            (0, PoolProtocol::Atp) => AtpPs::new(c.tenant, n).ok().map(Ps::Atp),
            (0, PoolProtocol::Dsa(_)) => DsaPs::new(c.tenant, n, self.rto_ps).ok().map(Ps::Dsa),
            _ => None,
        };
        Box::new(PoolHost {
            protocol: self.protocol,
            rank,
            rto_ps: self.rto_ps,
            window: WorkerWindow::new(c.blocks.max(1), self.params()),
            armed: None,
            results: Results::new(c),
            stats: HostStats::default(),
            ps,
            ps_out: Vec::new(),
            ps_mark: false,
        })
    }
    /// An aggregator holds one 306-byte packet (DSA §VII-B: "The switch spares 5 MB memory for
    /// INA", 16,339 such aggregators), whatever the elements per packet.
    fn slot_bytes(&self, _max_elements_per_packet: u16) -> u64 {
        PACKET_BYTES as u64
    }
    /// SwitchML's packets fit the Canary frame; ATP's and DSA's carry a 64-bit bitmap and a
    /// priority, so they travel in the addressed pool frame.
    fn frame(&self) -> crate::wire::Frame {
        match self.protocol {
            PoolProtocol::SwitchMl => crate::wire::Frame::Canary,
            _ => crate::wire::Frame::Pool,
        }
    }
    /// A rank gives a block up after 64 re-sends without progress
    /// ([`reducelab_transport::worker::MAX_RETRANSMISSIONS`]); ATP's and DSA's timeouts follow
    /// the round trip above the floor (allowed 4×).
    fn recovery_horizon_ps(&self) -> u64 {
        let rto = if self.protocol == PoolProtocol::SwitchMl { self.rto_ps } else { 4 * self.rto_ps };
        rto.saturating_mul(MAX_RETRANSMISSIONS as u64 + 2)
    }
    /// SwitchML: every call is the scenario's allreduce with its blocks numbered on from the
    /// last call's (block `b` of a call is PSN `sequence_base + b`), so the switch's slots see
    /// one PSN sequence, as a training job's tensors give them. A rank sends PSN `p` only when it
    /// has the result of `p − window`: within a call by its window, and for the first `window`
    /// PSNs of a call because it had every result of the earlier calls before this one started.
    /// So, as in one long allreduce, the slot's previous use `p − 2·window` is complete when
    /// `p` takes it over, a rank still missing a result of an earlier call gets it again from
    /// the kept result (its slot is not taken over until that rank's next contribution), and a
    /// late packet of an earlier call carries a lower PSN than its slot's, so the switch drops it
    /// as stale, or answers it with its own kept result, which the rank drops as not of this
    /// call. The switch compares PSNs as plain integers, so the sequence must not wrap
    /// ([`SessionCalls::ContinuedSequenceNoWrap`]: at most 2^20 PSNs, what the frames carry).
    ///
    ///
    /// ATP and DSA continue the sequence the same way, for their hashed aggregators and for
    /// the parameter server's dictionary, both keyed by PSN. Their results come from that
    /// server too, in rank 0's agent of each call, and DSA's server fetches a block's original
    /// contributions from every rank, so a runtime serving sessions keeps each call's agents
    /// answering after the call returns, until the rank begins the call after next (the
    /// software switch's session thread: by then every rank had every result of that call).
    fn session_calls(&self) -> Result<SessionCalls, String> {
        Ok(SessionCalls::ContinuedSequenceNoWrap)
    }
    fn stall_cause(&self, lost_packets: u64) -> String {
        format!(
            "{lost_packets} packets were lost; ranks re-send a block until its result arrives, so the aggregating switch or a link to it (or to rank 0's parameter server) stayed unreachable (or a rank gave a block up after {MAX_RETRANSMISSIONS} re-sends)"
        )
    }
}

/// `p` as the registry's header, addressed to `dst` (the table of the module docs).
pub fn to_header(p: &AggPacket, dst: Addr) -> Header {
    let (kind, bypass, multicast) = match (p.kind, p.dst) {
        (PacketKind::Gradient, Dest::Switch) => (Kind::Reduce, false, false),
        (PacketKind::Gradient, _) => (Kind::Fallback, false, false),
        (PacketKind::Partial, _) => (Kind::Reduce, true, false),
        (PacketKind::Ack, Dest::Workers) => (Kind::Broadcast, false, false),
        (PacketKind::Ack, _) => (Kind::Retransmit, false, false),
        (PacketKind::Reminder, _) => (Kind::Restore, false, false),
        (PacketKind::Fetch, Dest::Workers) => (Kind::Failure, false, true),
        (PacketKind::Fetch, _) => (Kind::Failure, false, false),
        (PacketKind::ReminderNotice, _) => (Kind::RetxRequest, false, false),
        (PacketKind::Other, _) => (Kind::Done, false, false),
    };
    let mut h = Header::new(kind, dst, (p.job as u32 & 0xFF) << 24 | p.psn, p.job);
    h.bypass = bypass;
    if multicast {
        h.switch_addr = MULTICAST_MARK;
    }
    h.counter = p.bitmap.count_ones() as u16;
    h.hosts = p.workers;
    h.children = p.bitmap;
    h.src = p.priority;
    h.tree = p.resend as u16;
    h.elems = p.elems;
    h.fp = p.fp;
    h.data = p.data;
    h
}

/// The pool packet `h` carries ([`to_header`]'s inverse); `rank`: the receiving rank, for a
/// packet addressed to one. A SwitchML rank's contribution in the Canary frame's form (counter
/// 1, no bitmap, its rank in `src`) is the gradient of that rank.
pub fn from_header(h: &Header, rank: u16) -> AggPacket {
    let (kind, dst) = match h.kind {
        Kind::Reduce if h.bypass => (PacketKind::Partial, Dest::Ps),
        Kind::Reduce => (PacketKind::Gradient, Dest::Switch),
        Kind::Fallback => (PacketKind::Gradient, Dest::Ps),
        Kind::Broadcast => (PacketKind::Ack, Dest::Workers),
        Kind::Retransmit => (PacketKind::Ack, Dest::Worker(rank)),
        Kind::Restore => (PacketKind::Reminder, Dest::Switch),
        Kind::Failure if h.switch_addr == MULTICAST_MARK => (PacketKind::Fetch, Dest::Workers),
        Kind::Failure => (PacketKind::Fetch, Dest::Worker(rank)),
        Kind::RetxRequest => (PacketKind::ReminderNotice, Dest::Ps),
        Kind::Done => (PacketKind::Other, Dest::Switch),
    };
    let mut p = AggPacket::new(kind, dst, h.tenant, h.id & (MAX_BLOCKS - 1), h.hosts);
    if h.children == 0 && h.kind == Kind::Reduce && !h.bypass {
        // A rank's contribution in the frame's form; anything else is malformed for the program.
        p.bitmap = if h.src < 64 && h.counter == 1 { 1u64 << h.src } else { 0 };
    } else {
        p.bitmap = h.children;
        p.priority = h.src;
    }
    p.resend = h.tree == 1;
    p.elems = h.elems;
    p.fp = h.fp;
    p.data = h.data;
    p
}

/// A switch under a pool protocol: the protocol's program for the tenants it aggregates,
/// forwarding for the others.
struct PoolRoot {
    program: Option<AnyPoolProgram>,
    /// Host of each rank of each tenant it aggregates (rank 0's runs the PS).
    hosts: BTreeMap<u16, Vec<u32>>,
    /// The aggregating switch of every tenant (where a rank's first hop sends its packets on).
    roots: BTreeMap<u16, u32>,
    /// Tenants the control plane released: their late contributions are dropped, so that none
    /// takes an aggregator again.
    released: BTreeSet<u16>,
    stats: SwitchStats,
    out: Vec<PoolAction>,
}

impl PoolRoot {
    /// Where `p`, of a tenant this switch aggregates, goes (`None`: to every rank).
    fn addr(&self, p: &AggPacket) -> Option<Addr> {
        let hosts = &self.hosts[&p.job];
        match p.dst {
            Dest::Ps => Some(Addr::Host(hosts[0])),
            Dest::Worker(r) => Some(Addr::Host(hosts[r as usize])),
            Dest::Workers => None,
            Dest::Switch => Some(Addr::Switch(self.roots[&p.job])),
        }
    }

    /// Carries out `a` (`custody`: the arriving packet is forwarded as this one, with its ECN
    /// mark `ecn`, on every copy of a multicast; a packet the program emits starts unmarked).
    fn act(&mut self, p: AggPacket, custody: bool, ecn: bool, vals: &mut Values, out: &mut Vec<SwAction>) {
        let mut send = |mut hdr: Header, first: bool| {
            hdr.ecn = custody && ecn;
            out.push(if custody && first {
                SwAction::Forward { out: Out::Route, hdr }
            } else {
                SwAction::Emit { out: Out::Route, hdr }
            })
        };
        match self.addr(&p) {
            Some(to) => {
                if matches!(p.dst, Dest::Worker(_)) && p.kind == PacketKind::Ack {
                    self.stats.stragglers += 1;
                }
                send(self.header(&p, to), true);
            }
            None => {
                // One copy per rank, each to its host as the unicast form.
                if p.kind == PacketKind::Ack {
                    self.stats.broadcasts += 1;
                }
                let hosts = self.hosts[&p.job].clone();
                for (k, &host) in hosts.iter().enumerate() {
                    let one = AggPacket { dst: Dest::Worker(k as u16), ..p };
                    let mut h = self.header(&one, Addr::Host(host));
                    if k > 0 {
                        h.data = vals.duplicate(p.data);
                    }
                    send(h, k == 0);
                }
            }
        }
    }

    /// The header of `p`: SwitchML's result to a rank in the Canary frame's form (counter, no
    /// bitmap); ATP's and DSA's as [`to_header`] makes it (their frame carries the bitmap).
    fn header(&self, p: &AggPacket, to: Addr) -> Header {
        let mut h = to_header(p, to);
        if matches!(self.program, Some(AnyPoolProgram::SwitchMl(_))) && h.kind == Kind::Retransmit {
            h.children = 0;
            h.src = 0;
        }
        h
    }
}

impl SwitchProgram for PoolRoot {
    fn on_packet(&mut self, now: u64, in_port: u16, hdr: Header, vals: &mut Values, out: &mut Vec<SwAction>) {
        let to_switch = matches!(hdr.kind, Kind::Reduce | Kind::Broadcast | Kind::Restore | Kind::Failure)
            && !hdr.bypass
            && (hdr.kind != Kind::Failure || hdr.switch_addr == MULTICAST_MARK);
        if to_switch && hdr.kind == Kind::Reduce && self.released.contains(&hdr.tenant) {
            self.stats.stragglers += 1;
            vals.release(hdr.data);
            out.push(SwAction::Consume);
            return;
        }
        let mine = to_switch && self.hosts.contains_key(&hdr.tenant);
        if !mine || self.program.is_none() {
            // On its way to the tenant's aggregating switch (a host sends to its first hop).
            let mut hdr = hdr;
            if to_switch {
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
        }
        let program = self.program.as_mut().expect("a program").get();
        let p = from_header(&hdr, 0);
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
                PoolAction::Forward(p) => self.act(p, true, hdr.ecn, vals, out),
                PoolAction::Emit(p) => self.act(p, false, false, vals, out),
            }
        }
        self.out = acts;
    }
    fn on_timer(&mut self, _now: u64, _token: u64, _vals: &mut Values, _out: &mut Vec<SwAction>) {}
    fn descriptors_in_use(&self) -> u32 {
        self.program.as_ref().map_or(0, |p| p.view().pool().in_use())
    }
    /// Completed aggregations kept to answer re-sends.
    fn kept_results(&self) -> u32 {
        self.program.as_ref().map_or(0, |p| {
            let pool = p.view().pool();
            pool.used().filter(|&i| pool.get(i).complete).count() as u32
        })
    }
    fn release_tenant(&mut self, now: u64, tenant: u16, vals: &mut Values) {
        self.released.insert(tenant);
        if let Some(p) = self.program.as_mut() {
            let before = p.view().pool().in_use();
            match &mut *p {
                AnyPoolProgram::SwitchMl(s) => s.release_job(now, tenant, vals),
                other => _ = other.get().pool_mut().release_job(now, tenant, vals),
            }
            let after = p.view().pool().in_use();
            if after != before {
                self.stats.note_use(now, before, after);
            }
        }
    }
    fn stats(&self) -> &SwitchStats {
        &self.stats
    }
}

/// The PSN of block `b` of `c`: its place in the session's sequence, as [`Collective::id`]
/// numbers it (`b` in a simulated run, whose `sequence_base` is 0).
fn wire_psn(c: &Collective, b: u32) -> u32 {
    c.sequence_base.wrapping_add(b) & (MAX_BLOCKS - 1)
}

/// A rank of a pool allreduce: the window of a training worker over the collective's blocks,
/// and on rank 0 of ATP and DSA the tenant's parameter server.
struct PoolHost {
    protocol: PoolProtocol,
    rank: u32,
    /// The least re-send timeout.
    rto_ps: u64,
    window: WorkerWindow,
    /// The time of the worker timer last asked for.
    armed: Option<u64>,
    results: Results,
    stats: HostStats,
    ps: Option<Ps>,
    ps_out: Vec<PsAction>,
    /// A packet that reached the PS was ECN-marked: its next ACK echoes the mark (ATP's PS
    /// does; DSA follows ATP's congestion control).
    ps_mark: bool,
}

impl PoolHost {
    fn arm(&mut self, out: &mut Vec<HostAction>) {
        if let Some(t) = self.window.timer_ps() {
            if self.armed != Some(t) {
                self.armed = Some(t);
                out.push(HostAction::Timer { at: t, token: t });
            }
        }
    }

    /// DSA's priority of this rank's next block ([module docs](self)).
    fn priority(&self, c: &Collective) -> u32 {
        let left = c.blocks.saturating_sub(self.window.acked()).max(1) as u64;
        let inputs = PolicyInputs { remaining_ps: left * PACKET_TIME_PS, layers: 1, comm_ps: 1, comp_ps: 1 };
        policy::encode(policy::priority(&inputs, 1).unwrap_or(0.0))
    }

    /// A packet for this rank's co-located PS (`ecn`: it was marked), and what the PS does in
    /// turn.
    fn at_ps(
        &mut self,
        c: &Collective,
        now: u64,
        p: AggPacket,
        ecn: bool,
        vals: &mut Values,
        out: &mut Vec<HostAction>,
    ) {
        self.ps_mark |= ecn;
        let Some(ps) = self.ps.as_mut() else {
            self.stats.stale += 1;
            vals.release(p.data);
            return;
        };
        let mut acts = std::mem::take(&mut self.ps_out);
        ps.on_packet(now, p, vals, &mut acts);
        self.ps_actions(c, now, &mut acts, vals, out);
        self.ps_out = acts;
    }

    fn ps_actions(
        &mut self,
        c: &Collective,
        now: u64,
        acts: &mut Vec<PsAction>,
        vals: &mut Values,
        out: &mut Vec<HostAction>,
    ) {
        for a in std::mem::take(acts) {
            match a {
                PsAction::Timer { at, token } => out.push(HostAction::Timer { at, token: PS_TOKEN | token }),
                // The PS's answer to rank 0 alone stays in the host.
                PsAction::Send(p) if p.dst == Dest::Worker(0) => {
                    let mut h = to_header(&p, Addr::Host(c.ranks[0]));
                    h.ecn = p.kind == PacketKind::Ack && std::mem::take(&mut self.ps_mark);
                    self.on_packet(c, now, h, vals, out);
                }
                PsAction::Send(p) => {
                    let to = match p.dst {
                        Dest::Worker(r) => Addr::Host(c.ranks[r as usize]),
                        _ => Addr::FirstHop,
                    };
                    let mut h = to_header(&p, to);
                    h.ecn = p.kind == PacketKind::Ack && std::mem::take(&mut self.ps_mark);
                    out.push(HostAction::Send(h));
                }
            }
        }
    }

    /// A packet of this rank to its tenant's PS (rank 0's host).
    fn send_to_ps(&mut self, c: &Collective, now: u64, p: AggPacket, vals: &mut Values, out: &mut Vec<HostAction>) {
        if self.rank == 0 {
            self.at_ps(c, now, p, false, vals, out);
        } else {
            out.push(HostAction::Send(to_header(&p, Addr::Host(c.ranks[0]))));
        }
    }
}

impl HostProtocol for PoolHost {
    fn start(&mut self, _c: &Collective, _now: u64, _vals: &mut Values, _out: &mut Vec<HostAction>) {}
    fn pull(&mut self, c: &Collective, now: u64, room: usize, vals: &mut Values, out: &mut Vec<HostAction>) {
        let n = c.n() as u16;
        let mut made = 0;
        while made < room {
            if let Some(psn) = self.window.take_reminder() {
                let mut p = AggPacket::new(PacketKind::ReminderNotice, Dest::Ps, c.tenant, wire_psn(c, psn), n);
                p.bitmap = 1u64 << self.rank;
                self.send_to_ps(c, now, p, vals, out);
                made += 1;
                continue;
            }
            let Some(s) = self.window.transmit(now) else { break };
            self.stats.sent_reduce += 1;
            if s.retransmission {
                self.stats.retransmits_sent += 1;
            }
            made += 1;
            if self.protocol == PoolProtocol::SwitchMl {
                out.push(HostAction::Send(contribution(c, self.rank, s.psn, 0, Kind::Reduce, Addr::FirstHop, vals)));
                continue;
            }
            let h = contribution(c, self.rank, s.psn, 0, Kind::Reduce, Addr::FirstHop, vals);
            let dst = if s.to_ps { Dest::Ps } else { Dest::Switch };
            let mut p = AggPacket::new(PacketKind::Gradient, dst, c.tenant, wire_psn(c, s.psn), n);
            p.bitmap = 1u64 << self.rank;
            p.elems = h.elems;
            p.fp = h.fp;
            p.data = h.data;
            match self.protocol {
                PoolProtocol::Atp => p.resend = s.retransmission && !s.to_ps,
                PoolProtocol::Dsa(_) => p.priority = self.priority(c),
                PoolProtocol::SwitchMl => {}
            }
            if s.to_ps {
                self.send_to_ps(c, now, p, vals, out);
            } else {
                out.push(HostAction::Send(to_header(&p, Addr::FirstHop)));
            }
        }
        self.arm(out);
    }
    fn on_packet(&mut self, c: &Collective, now: u64, hdr: Header, vals: &mut Values, out: &mut Vec<HostAction>) {
        match hdr.kind {
            Kind::Retransmit => {
                let b = c.block_in(hdr.id);
                if b < c.blocks {
                    self.window.on_ack(b, hdr.ecn, now);
                }
                self.results.accept(c, now, &hdr, vals, &mut self.stats);
            }
            Kind::Failure => {
                let b = c.block_in(hdr.id);
                if b < c.blocks {
                    self.window.on_fetch(b);
                }
                vals.release(hdr.data);
            }
            Kind::Fallback | Kind::RetxRequest | Kind::Reduce if hdr.kind != Kind::Reduce || hdr.bypass => {
                let p = from_header(&hdr, self.rank as u16);
                self.at_ps(c, now, p, hdr.ecn, vals, out);
            }
            _ => {
                self.stats.stale += 1;
                vals.release(hdr.data);
            }
        }
        self.arm(out);
    }
    fn on_timer(&mut self, c: &Collective, now: u64, token: u64, vals: &mut Values, out: &mut Vec<HostAction>) {
        if token & PS_TOKEN != 0 {
            if let Some(ps) = self.ps.as_mut() {
                let mut acts = std::mem::take(&mut self.ps_out);
                ps.on_timer(now, token & !PS_TOKEN, &mut acts);
                self.ps_actions(c, now, &mut acts, vals, out);
                self.ps_out = acts;
            }
            return;
        }
        if self.armed != Some(token) {
            return; // superseded
        }
        self.armed = None;
        self.window.on_timer(now);
        self.arm(out);
    }
    fn progress(&self) -> Progress {
        self.results.progress()
    }
    fn stats(&self) -> &HostStats {
        &self.stats
    }
    /// Peers need this rank after it had every result when it runs ATP's or DSA's server
    /// (rank 0: a rank that lost a result asks it again) or, under DSA, for its original
    /// contributions (the server's fetches): [`LINGER_RTOS`] of its longest re-send timeouts
    /// (4× the floor, as [`InaProtocol::recovery_horizon_ps`] counts them). SwitchML's switch
    /// keeps the results, so nobody needs its hosts.
    fn linger_ps(&self) -> u64 {
        match self.protocol {
            PoolProtocol::Dsa(_) => LINGER_RTOS * 4 * self.rto_ps,
            PoolProtocol::Atp if self.ps.is_some() => LINGER_RTOS * 4 * self.rto_ps,
            _ => 0,
        }
    }
    /// The PS's results and partials are dropped; a late packet for it is then stale.
    fn release(&mut self, _now: u64, vals: &mut Values) {
        if let Some(mut ps) = self.ps.take() {
            ps.clear(vals);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use reducelab_des::Rng;

    /// Every pool packet a protocol sends survives the header mapping: kind, destination (the
    /// receiving rank for a packet to one), task, bitmap, workers, priority, resend flag and
    /// data, for random packets.
    #[test]
    fn a_pool_packet_survives_the_header_mapping() {
        let mut rng = Rng::new(3);
        let kinds = [
            (PacketKind::Gradient, Dest::Switch),
            (PacketKind::Gradient, Dest::Ps),
            (PacketKind::Partial, Dest::Ps),
            (PacketKind::Ack, Dest::Workers),
            (PacketKind::Ack, Dest::Worker(5)),
            (PacketKind::Reminder, Dest::Switch),
            (PacketKind::Fetch, Dest::Workers),
            (PacketKind::Fetch, Dest::Worker(5)),
            (PacketKind::ReminderNotice, Dest::Ps),
        ];
        for _ in 0..2000 {
            let (kind, dst) = kinds[rng.below(kinds.len() as u64) as usize];
            let workers = 1 + rng.below(64) as u16;
            let mut p = AggPacket::new(kind, dst, rng.below(256) as u16, rng.below(MAX_BLOCKS as u64) as u32, workers);
            p.bitmap = (rng.next_u64() & crate::pool::full_bitmap(workers)).max(1);
            p.priority = rng.next_u64() as u32;
            p.resend = kind == PacketKind::Gradient && dst == Dest::Switch && rng.below(2) == 1;
            p.elems = rng.below(300) as u16;
            p.fp = rng.next_u64();
            p.data = rng.next_u64() as u32;
            let back = from_header(&to_header(&p, Addr::FirstHop), 5);
            assert_eq!(back, p, "{:?}", to_header(&p, Addr::FirstHop));
        }
    }

    /// SwitchML's contribution in the Canary frame's form (counter 1, rank in `src`) is that
    /// rank's gradient; a contribution claiming more is malformed (no bitmap).
    #[test]
    fn a_frame_form_contribution_is_its_ranks_gradient() {
        let mut h = Header::new(Kind::Reduce, Addr::FirstHop, 2 << 24 | 9, 2);
        (h.counter, h.src, h.hosts) = (1, 6, 8);
        let p = from_header(&h, 0);
        assert_eq!(
            (p.kind, p.dst, p.job, p.psn, p.bitmap, p.workers),
            (PacketKind::Gradient, Dest::Switch, 2, 9, 1 << 6, 8)
        );
        h.counter = 2;
        assert_eq!(from_header(&h, 0).bitmap, 0);
    }

    /// ATP's co-located PS echoes an ECN mark it received on its next ACK, and a rank takes a
    /// marked result as a congestion signal (its window halves), an unmarked one not.
    #[test]
    fn the_parameter_server_echoes_a_mark_and_ranks_read_it() {
        let atp = PoolAllreduce::build_atp(&Params::new()).unwrap();
        let c = Collective::new(3, vec![10, 11], 4 * 64, 64, 7, false).unwrap();
        let mut vals = Values::new(0);
        let (mut host0, mut out) = (atp.host_agent(&c, 0), Vec::new());
        // Rank 0's and rank 1's contributions of block 0 reach the PS (collisions at the
        // switch), rank 1's marked on its way.
        for (rank, ecn) in [(0u32, false), (1, true)] {
            let mut g = AggPacket::new(PacketKind::Gradient, Dest::Ps, 3, 0, 2);
            g.bitmap = 1 << rank;
            g.fp = crate::contribution_fp(7, 3, rank, 0);
            let mut h = to_header(&g, Addr::Host(10));
            h.ecn = ecn;
            host0.on_packet(&c, 1000, h, &mut vals, &mut out);
        }
        let acks: Vec<&Header> = out
            .iter()
            .filter_map(|a| match a {
                HostAction::Send(h) if h.kind == Kind::Broadcast => Some(h),
                _ => None,
            })
            .collect();
        assert_eq!(acks.len(), 1, "{out:?}");
        assert!(acks[0].ecn && acks[0].counter == 2, "{:?}", acks[0]);

        // A rank's window: one marked result halves it, an unmarked one lets it grow.
        let mut window_after = |ecn: bool| {
            let mut host = PoolHost {
                protocol: PoolProtocol::Atp,
                rank: 1,
                rto_ps: 1 << 30,
                window: WorkerWindow::new(
                    c.blocks,
                    PoolAllreduce { protocol: PoolProtocol::Atp, window: 4, rto_ps: 1 << 30 }.params(),
                ),
                armed: None,
                results: Results::new(&c),
                stats: HostStats::default(),
                ps: None,
                ps_out: Vec::new(),
                ps_mark: false,
            };
            let mut out = Vec::new();
            host.pull(&c, 0, 8, &mut vals, &mut out);
            let mut r = AggPacket::new(PacketKind::Ack, Dest::Worker(1), 3, 0, 2);
            r.bitmap = 3;
            let before = host.window.cwnd_bytes();
            let mut ack = to_header(&r, Addr::Host(11));
            ack.ecn = ecn;
            host.on_packet(&c, 10, ack, &mut vals, &mut out);
            host.window.cwnd_bytes() * 100 / before
        };
        assert!(
            window_after(true) < 100 && window_after(false) >= 100,
            "{} {}",
            window_after(true),
            window_after(false)
        );
    }
}
