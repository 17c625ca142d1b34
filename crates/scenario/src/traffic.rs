//! Per-traffic validation: each `[[traffic]]` entry resolved into a [`Traffic`] generator (its
//! keys checked against its kind), host lists, and the static trees' random roots.

use super::units::{gbps_to_bps, ns_to_ps, pos_f64, MAX_TIME_NS};
use super::{e, req, HostsSpec, TrafficKind, TrafficSpec};
use crate::ScenarioError;
use reducelab_des::{SimDuration, SimTime};
use reducelab_topo::{Shape, Topology};
use std::sync::Arc;

/// When a `random_permutation` generator draws a new permutation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Redraw {
    /// Per round of messages: every host's k-th message goes to permutation k.
    Message,
    /// Per epoch: a message sent at time t goes to the permutation of epoch
    /// `(t - start) / epoch_ps`.
    Epoch { epoch_ps: u64 },
}

/// Background traffic as the Canary paper states it (§5.2: "each host sends a message to a
/// randomly selected host and receives a message from another randomly selected host"): each
/// round (or epoch) is a permutation of `hosts` without fixed points, so every host sends to
/// exactly one host and receives from exactly one other. Every host keeps `inflight` messages
/// of `bytes` going; with `rate_bps`, its j-th message starts no earlier than
/// `start + j · bytes · 8 / rate` (the host offers that rate, window permitting).
#[derive(Clone, Debug)]
pub struct RandomPermutation {
    pub hosts: Vec<u32>,
    pub bytes: u64,
    pub inflight: u32,
    pub start: SimTime,
    pub redraw: Redraw,
    pub rate_bps: Option<u64>,
}

impl RandomPermutation {
    /// When the `j`-th message of a host may start at the earliest.
    pub fn paced_start(&self, j: u64) -> SimTime {
        match self.rate_bps {
            None => self.start,
            Some(r) => {
                SimTime(self.start.ps() + (j as u128 * self.bytes as u128 * 8 * 1_000_000_000_000 / r as u128) as u64)
            }
        }
    }
}

/// A validated traffic generator.
#[derive(Clone, Debug)]
pub enum Traffic {
    Messages {
        list: Vec<(u32, u32, u64, SimTime)>,
    },
    Permutation {
        hosts: Vec<u32>,
        bytes: u64,
        start: SimTime,
    },
    Incast {
        senders: Vec<u32>,
        receiver: u32,
        bytes: u64,
        start: SimTime,
    },
    RandomUniform {
        hosts: Vec<u32>,
        bytes: u64,
        inflight: u32,
        start: SimTime,
    },
    RandomPermutation(RandomPermutation),
    /// Rank `r` on `hosts[r]`. `algorithm` is the variant that runs (a family or policy
    /// resolved for `bytes`), or `msccl:<name>` for an imported MSCCL program (`imported`, its
    /// checked schedule); the packet backend runs `schedule`, the flow backend `plan` (each
    /// built only for the backend that runs, from the process-wide caches).
    Collective {
        hosts: Vec<u32>,
        bytes: u64,
        start: SimTime,
        algorithm: String,
        imported: Option<Arc<reducelab_sched::Schedule>>,
        collective: reducelab_sched::Collective,
        layout: reducelab_sched::algos::Layout,
        schedule: Option<Arc<reducelab_sched::Schedule>>,
        plan: Option<Arc<reducelab_sched::Plan>>,
    },
    Ina(crate::ina::InaSpec),
    Training(reducelab_ina::pool_jobs::TrainingSpec),
    /// A `training` entry on an in-network allreduce protocol.
    InaTraining(crate::ina::InaTraining),
    /// A GOAL trace, rank `r` on `hosts[r]` (a `chakra` entry too, lowered into GOAL).
    Goal(GoalSpec),
}

/// A `goal` entry resolved: its trace, parsed and checked (cycles, unmatched operations); or a
/// `chakra` entry's trace set, lowered into GOAL (`reducelab_chakra::lower`) and checked alike.
#[derive(Clone, Debug)]
pub struct GoalSpec {
    /// The file as the scenario names it (for results; a `chakra` entry's `trace` prefix).
    pub file: String,
    pub trace: Arc<reducelab_goal::Trace>,
    /// Rank `r` runs on `hosts[r]`.
    pub hosts: Vec<u32>,
    /// Given no `hosts`: placed on free hosts by [`place_goal_jobs`] (`Some(random)`).
    pub placed: Option<bool>,
    pub start: SimTime,
    pub eager_bytes: u64,
    pub record_ops: bool,
    /// A `chakra` entry's bookkeeping: which operations are which collective instance, each
    /// rank's compute time.
    pub chakra: Option<Arc<reducelab_chakra::ChakraJob>>,
    /// A `chakra` entry's collectives served by an in-network protocol, in trace order (the
    /// instances with `in_network`): rank `r` on `hosts[r]`, each rank joining when its trace
    /// reaches the collective.
    pub ina: Vec<crate::ina::InaSpec>,
}

impl Traffic {
    pub fn kind(&self) -> &'static str {
        match self {
            Traffic::Messages { .. } => "messages",
            Traffic::Permutation { .. } => "permutation",
            Traffic::Incast { .. } => "incast",
            Traffic::RandomUniform { .. } => "random_uniform",
            Traffic::RandomPermutation(_) => "random_permutation",
            Traffic::Collective { .. } => "collective",
            Traffic::Ina(_) => "ina_allreduce",
            Traffic::Training(_) | Traffic::InaTraining(_) => "training",
            Traffic::Goal(g) if g.chakra.is_some() => "chakra",
            Traffic::Goal(_) => "goal",
        }
    }
    /// The in-network allreduces this entry runs (an `ina_allreduce`'s one, a training entry's
    /// partitions on an in-network protocol, a `chakra` entry's in-network collectives), in the
    /// order the in-network world numbers them.
    pub fn ina_specs(&self) -> &[crate::ina::InaSpec] {
        match self {
            Traffic::Ina(s) => std::slice::from_ref(s),
            Traffic::InaTraining(t) => &t.specs,
            Traffic::Goal(g) => &g.ina,
            _ => &[],
        }
    }
    pub fn is_background(&self) -> bool {
        matches!(self, Traffic::RandomUniform { .. } | Traffic::RandomPermutation(_))
    }
    /// Calls `f` with every host that sends or receives in this generator (possibly twice).
    pub fn for_each_host(&self, f: &mut dyn FnMut(u32)) {
        match self {
            Traffic::Messages { list } => list.iter().for_each(|&(s, d, _, _)| {
                f(s);
                f(d)
            }),
            Traffic::Incast { senders, receiver, .. } => {
                senders.iter().for_each(|&h| f(h));
                f(*receiver)
            }
            Traffic::Permutation { hosts, .. }
            | Traffic::RandomUniform { hosts, .. }
            | Traffic::Collective { hosts, .. } => hosts.iter().for_each(|&h| f(h)),
            Traffic::RandomPermutation(r) => r.hosts.iter().for_each(|&h| f(h)),
            Traffic::Ina(spec) => spec.hosts.iter().for_each(|&h| f(h)),
            Traffic::Training(spec) => spec.jobs.iter().for_each(|j| j.workers.iter().chain(&j.ps).for_each(|&h| f(h))),
            Traffic::InaTraining(t) => t.jobs.iter().for_each(|j| j.workers.iter().for_each(|&h| f(h))),
            Traffic::Goal(g) => g.hosts.iter().for_each(|&h| f(h)),
        }
    }
}

/// Refuses traffic that could not finish within the format's time range even on the fastest
/// link of the topology (simulated times would overflow 64-bit picoseconds): an absurd size or
/// start time gets an error naming it rather than a clamped `end_ps`.
pub(super) fn check_finishes_in_time(f: &str, t: &Traffic, topology: &Topology) -> Result<(), ScenarioError> {
    let fastest = topology.links.iter().map(|l| l.bandwidth_bps).max().unwrap_or(1).max(1);
    let limit_ps = MAX_TIME_NS as u128 * 1000;
    let check = |field: String, bytes: u64, start: SimTime| -> Result<(), ScenarioError> {
        let ps = start.ps() as u128 + SimDuration::serialization(bytes, fastest).ps() as u128;
        if ps > limit_ps {
            return e(
                field,
                format!(
                    "{bytes} bytes starting at {} ns cannot finish within {MAX_TIME_NS} ns (about 11.6 days) of simulated time even at {} Gb/s, the fastest link",
                    start.ps() / 1000,
                    fastest as f64 / 1e9
                ),
            );
        }
        Ok(())
    };
    match t {
        Traffic::Messages { list } => {
            for (j, &(_, _, b, at)) in list.iter().enumerate() {
                check(format!("{f}.list[{j}]"), b, at)?;
            }
            Ok(())
        }
        Traffic::Permutation { bytes, start, .. }
        | Traffic::Incast { bytes, start, .. }
        | Traffic::Collective { bytes, start, .. } => check(format!("{f}.bytes"), *bytes, *start),
        Traffic::RandomUniform { bytes, start, .. } => check(format!("{f}.bytes"), *bytes, *start),
        Traffic::RandomPermutation(r) => check(format!("{f}.bytes"), r.bytes, r.start),
        Traffic::Ina(spec) => check(format!("{f}.bytes"), spec.bytes, spec.start),
        Traffic::Training(_) | Traffic::InaTraining(_) | Traffic::Goal(_) => Ok(()),
    }
}

pub(super) fn ina_specs_empty(traffic: &[Traffic]) -> bool {
    traffic.iter().all(|t| t.ina_specs().is_empty())
}

/// The in-network protocol keys of a traffic entry (an `ina_allreduce`, or a `training` entry on
/// an in-network protocol), built into the protocol by its registry entry, which validates them
/// (errors name the key), and its `roots` checked against the topology.
pub(super) fn ina_protocol(
    f: &str,
    params: &reducelab_ina::Params,
    roots: &Option<Vec<u32>>,
    topology: &Topology,
    info: &reducelab_ina::ProtocolInfo,
) -> Result<Arc<dyn reducelab_ina::InaProtocol>, ScenarioError> {
    let protocol =
        (info.build)(params).map_err(|pe| ScenarioError { field: format!("{f}.{}", pe.key), reason: pe.reason })?;
    if let Some(r) = roots {
        if !info.takes_roots {
            return e(format!("{f}.roots"), format!("is not used by protocol = \"{}\"", info.name));
        }
        let trees = protocol.root_count().map_or(r.len(), |n| n as usize);
        if r.len() != trees {
            return e(format!("{f}.roots"), format!("{} roots for {trees} trees", r.len()));
        }
        for (k, &node) in r.iter().enumerate() {
            if node as usize >= topology.nodes.len() || topology.nodes[node as usize].host.is_some() {
                return e(format!("{f}.roots[{k}]"), format!("node {node} is not a switch"));
            }
        }
    }
    Ok(protocol)
}

pub(super) fn host_list(field: &str, spec: &Option<HostsSpec>, n: u32) -> Result<Vec<u32>, ScenarioError> {
    match spec {
        None => Ok((0..n).collect()),
        Some(HostsSpec::Keyword(k)) if k == "all" => Ok((0..n).collect()),
        Some(HostsSpec::Keyword(k)) => e(field, format!("must be \"all\" or a list of host indices, got \"{k}\"")),
        Some(HostsSpec::List(v)) => {
            let mut seen = vec![false; n as usize];
            for (i, &h) in v.iter().enumerate() {
                if h >= n {
                    return e(format!("{field}[{i}]"), format!("host {h} does not exist (the topology has {n} hosts)"));
                }
                if seen[h as usize] {
                    return e(format!("{field}[{i}]"), format!("host {h} is listed twice"));
                }
                seen[h as usize] = true;
            }
            Ok(v.clone())
        }
    }
}

/// `trees` distinct random top-level switches (switches with no host attached; every switch
/// if all have hosts, as in a star), the static trees' roots (§5.2: picked at random).
pub(super) fn random_roots(topology: &Topology, trees: u16, seed: u64) -> Vec<u32> {
    let switches: Vec<u32> =
        (0..topology.nodes.len() as u32).filter(|&i| topology.nodes[i as usize].host.is_none()).collect();
    let top: Vec<u32> = switches
        .iter()
        .copied()
        .filter(|&i| topology.nodes[i as usize].ports.iter().all(|p| topology.nodes[p.peer.idx()].host.is_none()))
        .collect();
    let mut pool = if top.is_empty() { switches } else { top };
    let mut rng = reducelab_des::Rng::new(seed);
    rng.shuffle(&mut pool);
    (0..trees as usize).map(|t| pool[t % pool.len()]).collect()
}

impl TrafficKind {
    /// Its name in scenario files.
    pub fn name(self) -> &'static str {
        match self {
            TrafficKind::Messages => "messages",
            TrafficKind::Permutation => "permutation",
            TrafficKind::Incast => "incast",
            TrafficKind::RandomUniform => "random_uniform",
            TrafficKind::RandomPermutation => "random_permutation",
            TrafficKind::Collective => "collective",
            TrafficKind::InaAllreduce => "ina_allreduce",
            TrafficKind::Training => "training",
            TrafficKind::Goal => "goal",
            TrafficKind::Chakra => "chakra",
        }
    }

    pub const ALL: [TrafficKind; 10] = [
        TrafficKind::Messages,
        TrafficKind::Permutation,
        TrafficKind::Incast,
        TrafficKind::RandomUniform,
        TrafficKind::RandomPermutation,
        TrafficKind::Collective,
        TrafficKind::InaAllreduce,
        TrafficKind::Training,
        TrafficKind::Goal,
        TrafficKind::Chakra,
    ];

    /// Its entry's own keys, as the schema declares them (`transport` first for message
    /// traffic), without an in-network protocol's keys.
    fn entry_fields(self) -> &'static [&'static str] {
        use super::schema::*;
        match self {
            TrafficKind::Messages => fields_of::<MessagesEntry>(),
            TrafficKind::Permutation => fields_of::<PermutationEntry>(),
            TrafficKind::Incast => fields_of::<IncastEntry>(),
            TrafficKind::RandomUniform => fields_of::<RandomUniformEntry>(),
            TrafficKind::RandomPermutation => fields_of::<RandomPermutationEntry>(),
            TrafficKind::Collective => fields_of::<CollectiveEntry>(),
            TrafficKind::InaAllreduce => fields_of::<InaAllreduceEntry>(),
            TrafficKind::Training => fields_of::<TrainingEntry>(),
            TrafficKind::Goal => fields_of::<GoalEntry>(),
            TrafficKind::Chakra => fields_of::<ChakraEntry>(),
        }
    }

    /// Every key an entry of this kind may take besides `kind` and `transport`: its own and,
    /// for the in-network kinds, every registered protocol's.
    pub fn keys(self) -> Vec<&'static str> {
        let mut keys: Vec<&'static str> = self.entry_fields().iter().copied().filter(|&k| k != "transport").collect();
        if matches!(self, TrafficKind::InaAllreduce | TrafficKind::Training) {
            for k in reducelab_ina::PROTOCOLS.iter().flat_map(|p| p.params).map(|p| p.key) {
                if !keys.contains(&k) {
                    keys.push(k);
                }
            }
        }
        keys
    }

    /// The keys an entry of this kind takes besides `kind` with `protocol` named (or the
    /// default): its own (`transport` first, for message traffic) and that protocol's.
    pub fn keys_with(self, protocol: Option<&str>) -> Vec<&'static str> {
        let mut keys = self.entry_fields().to_vec();
        let protocol = match self {
            TrafficKind::InaAllreduce => Some(protocol.unwrap_or(crate::ina::DEFAULT_PROTOCOL)),
            // A shared-pool protocol's training jobs take the pool keys, not its registry entry's.
            TrafficKind::Training => protocol.filter(|p| reducelab_ina::pool::pool_protocol(p).is_none()),
            _ => None,
        };
        if let Some(info) = protocol.and_then(reducelab_ina::protocol) {
            keys.extend(info.params.iter().map(|p| p.key));
        }
        keys
    }
}

/// A `goal` entry at `f`: its trace read (relative to `base_dir`), parsed and checked, its ranks
/// placed on hosts.
fn resolve_goal(
    f: &str,
    t: &crate::schema::GoalEntry,
    topology: &Topology,
    base_dir: Option<&std::path::Path>,
    seed: u64,
    wildcards: bool,
) -> Result<Traffic, ScenarioError> {
    let Some(file) = &t.file else {
        return e(format!("{f}.file"), "is required for kind = \"goal\" (a GOAL trace)");
    };
    let path = match base_dir {
        Some(dir) => dir.join(file),
        None => std::path::PathBuf::from(file),
    };
    let trace = reducelab_goal::parse_file(&path)
        .map_err(|err| ScenarioError { field: format!("{f}.file"), reason: err.in_file(file.clone()).to_string() })?;
    reducelab_goal::check(&trace)
        .map_err(|err| ScenarioError { field: format!("{f}.file"), reason: err.in_file(file.clone()).to_string() })?;
    let ranks = trace.num_ranks();
    let (hosts, placed) = place_ranks(f, ("file", file), ranks, &t.hosts, t.placement.as_deref(), topology, seed)?;
    for r in (0..ranks).filter(|_| !wildcards) {
        for op in trace.ops_of(reducelab_goal::Rank(r)) {
            let op = reducelab_goal::OpId(op);
            let o = trace.op(op);
            if o.kind == reducelab_goal::OpKind::Recv
                && (o.peer == reducelab_goal::trace::ANY_SOURCE || o.tag == reducelab_goal::trace::ANY_TAG)
            {
                return e(
                    format!("{f}.file"),
                    format!("{file}: line {}: {}: a wildcard receive (its match depends on arrival order); the packet engine runs exact sources and tags, run.backend = \"loggp\" runs wildcards", trace.line(op), trace.describe(op)),
                );
            }
        }
    }
    Ok(Traffic::Goal(GoalSpec {
        file: file.clone(),
        trace: Arc::new(trace),
        hosts,
        placed,
        start: SimTime(ns_to_ps(&format!("{f}.start_ns"), t.start_ns.unwrap_or(0.0))?),
        eager_bytes: t.eager_bytes.unwrap_or(0),
        record_ops: t.ops.unwrap_or(false),
        chakra: None,
        ina: Vec::new(),
    }))
}

/// Where a trace's `ranks` run (a `goal` or `chakra` entry at `f`, its trace named `file` by
/// the entry's `key`):
/// `hosts` (in order, or a seeded permutation of them with `placement = "random"`), or, without
/// `hosts`, free hosts chosen once every entry is read ([`place_goal_jobs`], `Some(random)`).
fn place_ranks(
    f: &str,
    (key, file): (&str, &str),
    ranks: u32,
    hosts: &Option<HostsSpec>,
    placement: Option<&str>,
    topology: &Topology,
    seed: u64,
) -> Result<(Vec<u32>, Option<bool>), ScenarioError> {
    let n = topology.num_hosts() as u32;
    let random = match placement.unwrap_or("linear") {
        "linear" => false,
        "random" => true,
        other => return e(format!("{f}.placement"), format!("must be \"linear\" or \"random\", got \"{other}\"")),
    };
    let Some(_) = hosts else {
        if ranks > n {
            return e(format!("{f}.{key}"), format!("{file}: {ranks} ranks, and the topology has {n} hosts"));
        }
        return Ok((Vec::new(), Some(random)));
    };
    let mut hosts = host_list(&format!("{f}.hosts"), hosts, n)?;
    if hosts.len() as u32 != ranks {
        return e(format!("{f}.hosts"), format!("{} hosts for the {ranks} ranks of {file}", hosts.len()));
    }
    if random {
        reducelab_des::Rng::new(seed).fork(0x60A1).shuffle(&mut hosts);
    }
    Ok((hosts, None))
}

/// A `chakra` entry at `f`: its rank files read (`<trace>.<r>.et`, relative to `base_dir`),
/// lowered into one GOAL trace with each collective type's algorithm, checked, its ranks placed.
fn resolve_chakra(
    f: &str,
    t: &crate::schema::ChakraEntry,
    topology: &Topology,
    base_dir: Option<&std::path::Path>,
    seed: u64,
    loggp: bool,
) -> Result<Traffic, ScenarioError> {
    use reducelab_chakra::{collective_of, lower::supported, Algorithms, CommEngine, CommType};
    let Some(prefix) = &t.trace else {
        return e(format!("{f}.trace"), "is required for kind = \"chakra\" (the trace's prefix: <trace>.<rank>.et)");
    };
    if t.ranks == Some(0) {
        return e(format!("{f}.ranks"), "must be at least 1");
    }
    let mut algorithms = Algorithms::default();
    let mut named = Vec::new();
    // The in-network protocol serving a collective type, if one does: (field, its registry entry).
    let mut innet = None;
    for (key, name) in t.algorithms.iter().flatten() {
        let field = format!("{f}.algorithms.{key}");
        let keys: Vec<&str> = CommType::ALL.iter().filter(|c| collective_of(**c).is_some()).map(|c| c.key()).collect();
        let Some(c) = CommType::ALL.into_iter().find(|c| c.key() == key) else {
            return e(field, format!("not a collective type of Chakra's schema (those run: {})", keys.join(", ")));
        };
        if c == CommType::Barrier {
            return e(field, "BARRIER runs the dissemination barrier; it takes no algorithm");
        }
        if collective_of(c).is_none() {
            return e(field, format!("{} is not run yet (the collectives run: {})", c.name(), supported()));
        }
        if let Some(info) = reducelab_ina::protocol(name) {
            // The registry's in-network protocols are allreduces (`reducelab_ina::PROTOCOLS`).
            if c != CommType::AllReduce {
                let coll = collective_of(c).expect("checked above");
                return e(
                    field,
                    format!(
                        "\"{name}\" is an in-network allreduce protocol: in-network protocols serve {} only; \
                         {} runs a registry algorithm ({})",
                        CommType::AllReduce.key(),
                        c.key(),
                        reducelab_sched::registry::variants_for(coll).join(", ")
                    ),
                );
            }
            if loggp {
                let why = "is an in-network protocol, which runs at packet level only, and run.backend is \"loggp\"";
                return e(field, format!("\"{name}\" {why}"));
            }
            let protocol = ina_protocol(f, &Default::default(), &None, topology, info)?;
            algorithms.set_in_network(c, &protocol.label());
            innet = Some((field, info));
            continue;
        }
        algorithms.set(c, name);
        named.push((field, c));
    }
    let path = match base_dir {
        Some(dir) => dir.join(prefix),
        None => std::path::PathBuf::from(prefix),
    };
    let files = reducelab_chakra::read_files(&path, t.ranks)
        .map_err(|err| ScenarioError { field: format!("{f}.trace"), reason: err.to_string() })?;
    let ranks = files.len() as u32;
    if ranks > 1 {
        for (field, c) in &named {
            let coll = collective_of(*c).expect("checked above");
            let layout = reducelab_sched::algos::Layout::line(ranks);
            if let Err(m) = reducelab_sched::algos::build(algorithms.get(*c), coll, &layout) {
                // A name that is no registry algorithm may be meant as an in-network protocol.
                let innet =
                    if *c == CommType::AllReduce && reducelab_sched::registry::find(algorithms.get(*c)).is_none() {
                        format!("; or an in-network protocol: {}", reducelab_ina::protocol_names())
                    } else {
                        String::new()
                    };
                return e(field.clone(), format!("{} on {ranks} ranks: {m}{innet}", algorithms.get(*c)));
            }
        }
    }
    let groups = match &t.comm_groups {
        None => reducelab_chakra::CommGroups::default(),
        Some(spec) => {
            let field = format!("{f}.comm_groups");
            let map = match spec {
                crate::schema::CommGroupsSpec::Inline(m) => m.clone(),
                crate::schema::CommGroupsSpec::File(name) => {
                    let path = match base_dir {
                        Some(dir) => dir.join(name),
                        None => std::path::PathBuf::from(name),
                    };
                    let text = std::fs::read_to_string(&path).map_err(|err| ScenarioError {
                        field: field.clone(),
                        reason: format!("{}: {err}", path.display()),
                    })?;
                    serde_json::from_str::<std::collections::BTreeMap<String, Vec<u32>>>(&text).map_err(|err| {
                        ScenarioError {
                            field: field.clone(),
                            reason: format!(
                                "{}: {err} (ASTRA-sim's communicator groups: {{\"1\": [0, 2], \"2\": [1, 3]}})",
                                path.display()
                            ),
                        }
                    })?
                }
            };
            reducelab_chakra::CommGroups::new(map, ranks).map_err(|reason| ScenarioError { field, reason })?
        }
    };
    // LogGP's hosts have one CPU for everything (reducelab_chakra::lower's docs).
    let engine = if loggp { CommEngine::SharedWithCompute } else { CommEngine::Own };
    let lowered = reducelab_chakra::lower_grouped(&files, &algorithms, engine, &groups)
        .map_err(|err| ScenarioError { field: format!("{f}.trace"), reason: err.to_string() })?;
    reducelab_goal::check(&lowered.trace).map_err(|err| ScenarioError {
        field: format!("{f}.trace"),
        reason: format!("{prefix}: the lowered trace: {err}"),
    })?;
    let (hosts, placed) = place_ranks(f, ("trace", prefix), ranks, &t.hosts, t.placement.as_deref(), topology, seed)?;
    let ina = match innet {
        Some((field, info)) => innet_specs(&field, info, &lowered.job, &hosts, topology)?,
        None => Vec::new(),
    };
    Ok(Traffic::Goal(GoalSpec {
        file: prefix.clone(),
        trace: Arc::new(lowered.trace),
        hosts,
        placed,
        start: SimTime(ns_to_ps(&format!("{f}.start_ns"), t.start_ns.unwrap_or(0.0))?),
        eager_bytes: t.eager_bytes.unwrap_or(0),
        record_ops: t.ops.unwrap_or(false),
        chakra: Some(Arc::new(lowered.job)),
        ina,
    }))
}

/// Elements per packet of a trace's in-network collectives (`ina_allreduce`'s default).
pub const TRACE_INA_ELEMS_PER_PACKET: u16 = 256;

/// The in-network collectives of a lowered `chakra` trace (its instances with `in_network`),
/// served by protocol `info` as `field` names it; `hosts` may be empty until the entry is placed
/// (then [`place_goal_jobs`] fills them in).
fn innet_specs(
    field: &str,
    info: &'static reducelab_ina::ProtocolInfo,
    job: &reducelab_chakra::ChakraJob,
    hosts: &[u32],
    topology: &Topology,
) -> Result<Vec<crate::ina::InaSpec>, ScenarioError> {
    let epp = TRACE_INA_ELEMS_PER_PACKET;
    let mut out = Vec::new();
    for c in job.collectives.iter().filter(|c| c.in_network) {
        let ranks = c.node.len() as u64;
        let blocks = c.bytes.div_ceil(4).max(1).div_ceil(epp as u64);
        if blocks > reducelab_ina::host::MAX_BLOCKS as u64 {
            return e(
                field,
                format!(
                    "{} of {} B (node {}): {blocks} blocks of {epp} elements exceed the protocol's \
                     20-bit block id ({})",
                    c.comm.name(),
                    c.bytes,
                    c.node[0],
                    reducelab_ina::host::MAX_BLOCKS
                ),
            );
        }
        out.push(crate::ina::InaSpec {
            hosts: hosts.to_vec(),
            bytes: c.bytes,
            start: SimTime::ZERO,
            // One instance per collective, as one per `ina_allreduce` entry.
            protocol: ina_protocol(field, &Default::default(), &None, topology, info)?,
            elems_per_packet: epp,
            // As an `ina_allreduce` entry's default.
            values: ranks * c.bytes <= 64 << 20,
            roots: Vec::new(),
            rank_start: Vec::new(),
            trace_driven: true,
        });
    }
    // The 8-bit application id of in-network packets (`crate::ina::setup`).
    if out.len() > 256 {
        return e(field, format!("{} in-network collectives in the trace; a scenario runs at most 256", out.len()));
    }
    Ok(out)
}

pub(super) fn resolve_traffic(
    f: &str,
    t: &TrafficSpec,
    topology: &Topology,
    base_dir: Option<&std::path::Path>,
    seed: u64,
    wildcards: bool,
) -> Result<Traffic, ScenarioError> {
    let n = topology.num_hosts() as u32;
    let kname = t.kind().name();
    let start = |start_ns: Option<f64>| -> Result<SimTime, ScenarioError> {
        Ok(SimTime(ns_to_ps(&format!("{f}.start_ns"), start_ns.unwrap_or(0.0))?))
    };
    let bytes = |b: Option<u64>| -> Result<u64, ScenarioError> {
        let b = req(&format!("{f}.bytes"), b, kname)?;
        if b > 1 << 40 {
            return e(format!("{f}.bytes"), format!("{b} bytes is more than 1 TiB"));
        }
        Ok(b)
    };
    Ok(match t {
        TrafficSpec::Goal(t) => resolve_goal(f, t, topology, base_dir, seed, wildcards)?,
        TrafficSpec::Chakra(t) => resolve_chakra(f, t, topology, base_dir, seed, wildcards)?,
        TrafficSpec::Training(t) => crate::training::resolve(f, t, topology)?,
        TrafficSpec::Messages(t) => {
            let list = match &t.list {
                Some(l) if !l.is_empty() => l,
                Some(_) => return e(format!("{f}.list"), "must not be empty"),
                None => return e(format!("{f}.list"), "is required for kind = \"messages\""),
            };
            let mut out = Vec::new();
            for (i, m) in list.iter().enumerate() {
                let [s, d, b, at] = *m;
                if s >= n as u64 || d >= n as u64 {
                    return e(
                        format!("{f}.list[{i}]"),
                        format!("host {} does not exist (the topology has {n} hosts)", s.max(d)),
                    );
                }
                if b > 1 << 40 {
                    return e(format!("{f}.list[{i}]"), "message larger than 1 TiB");
                }
                // The same bound as every other time of the format (1e18 ps, about 11.6 days):
                // beyond it the start used to be clamped silently to the end of time.
                if at > MAX_TIME_NS {
                    return e(
                        format!("{f}.list[{i}][3]"),
                        format!("start {at} ns is too large (at most {MAX_TIME_NS} ns)"),
                    );
                }
                out.push((s as u32, d as u32, b, SimTime(at * 1000)));
            }
            Traffic::Messages { list: out }
        }
        TrafficSpec::Permutation(t) => {
            let hosts = host_list(&format!("{f}.hosts"), &t.hosts, n)?;
            if hosts.len() < 2 {
                return e(format!("{f}.hosts"), "a permutation needs at least two hosts");
            }
            Traffic::Permutation { hosts, bytes: bytes(t.bytes)?, start: start(t.start_ns)? }
        }
        TrafficSpec::Incast(t) => {
            let receiver = req(&format!("{f}.receiver"), t.receiver, kname)?;
            if receiver >= n {
                return e(
                    format!("{f}.receiver"),
                    format!("host {receiver} does not exist (the topology has {n} hosts)"),
                );
            }
            let senders = match &t.senders {
                Some(_) => host_list(&format!("{f}.senders"), &t.senders.clone().map(HostsSpec::List), n)?,
                None => (0..n).filter(|&h| h != receiver).collect(),
            };
            if let Some(i) = senders.iter().position(|&s| s == receiver) {
                return e(format!("{f}.senders[{i}]"), "the receiver cannot be a sender");
            }
            if senders.is_empty() {
                return e(format!("{f}.senders"), "must not be empty");
            }
            Traffic::Incast { senders, receiver, bytes: bytes(t.bytes)?, start: start(t.start_ns)? }
        }
        TrafficSpec::RandomUniform(t) => {
            let hosts = host_list(&format!("{f}.hosts"), &t.hosts, n)?;
            if hosts.len() < 2 {
                return e(format!("{f}.hosts"), "random uniform traffic needs at least two hosts");
            }
            let inflight = t.inflight.unwrap_or(1);
            if inflight == 0 || inflight > 1024 {
                return e(format!("{f}.inflight"), format!("must be within 1..=1024, got {inflight}"));
            }
            let b = bytes(t.bytes)?;
            if b == 0 {
                return e(format!("{f}.bytes"), "background messages must carry at least one byte");
            }
            Traffic::RandomUniform { hosts, bytes: b, inflight, start: start(t.start_ns)? }
        }
        TrafficSpec::RandomPermutation(t) => {
            use Redraw;
            let hosts = host_list(&format!("{f}.hosts"), &t.hosts, n)?;
            if hosts.len() < 2 {
                return e(format!("{f}.hosts"), "a permutation without fixed points needs at least two hosts");
            }
            let inflight = t.inflight.unwrap_or(1);
            if inflight == 0 || inflight > 1024 {
                return e(format!("{f}.inflight"), format!("must be within 1..=1024, got {inflight}"));
            }
            let b = bytes(t.bytes)?;
            if b == 0 {
                return e(format!("{f}.bytes"), "background messages must carry at least one byte");
            }
            let start = start(t.start_ns)?;
            let redraw = match (t.redraw.as_deref().unwrap_or("message"), t.epoch_ns) {
                ("message", None) => Redraw::Message,
                ("message", Some(_)) => return e(format!("{f}.epoch_ns"), "applies only with redraw = \"epoch\""),
                ("epoch", None) => return e(format!("{f}.epoch_ns"), "is required with redraw = \"epoch\""),
                ("epoch", Some(ns)) => {
                    let ps = ns_to_ps(&format!("{f}.epoch_ns"), pos_f64(&format!("{f}.epoch_ns"), ns)?)?;
                    if ps == 0 {
                        return e(format!("{f}.epoch_ns"), format!("must be at least 1 ps, got {ns} ns"));
                    }
                    Redraw::Epoch { epoch_ps: ps }
                }
                (other, _) => {
                    return e(format!("{f}.redraw"), format!("must be \"message\" or \"epoch\", got \"{other}\""))
                }
            };
            let rate_bps = match t.rate_gbps {
                None => None,
                Some(g) => Some(gbps_to_bps(&format!("{f}.rate_gbps"), g)?.max(1)),
            };
            Traffic::RandomPermutation(RandomPermutation { hosts, bytes: b, inflight, start, redraw, rate_bps })
        }
        TrafficSpec::InaAllreduce(t) => {
            let hosts = host_list(&format!("{f}.hosts"), &t.hosts, n)?;
            if hosts.len() > u16::MAX as usize {
                return e(
                    format!("{f}.hosts"),
                    format!("{} hosts; the 2-byte hosts field holds at most 65535", hosts.len()),
                );
            }
            let b = bytes(t.bytes)?;
            let epp = t.elements_per_packet.unwrap_or(256);
            if epp == 0 || epp > 2048 {
                return e(format!("{f}.elements_per_packet"), format!("must be within 1..=2048, got {epp}"));
            }
            let blocks = b.div_ceil(4).max(1).div_ceil(epp as u64);
            if blocks > reducelab_ina::host::MAX_BLOCKS as u64 {
                return e(
                    format!("{f}.bytes"),
                    format!(
                        "{blocks} blocks of {epp} elements exceed the 20-bit block id ({})",
                        reducelab_ina::host::MAX_BLOCKS
                    ),
                );
            }
            let protocol_name = t.protocol.as_deref().unwrap_or(crate::ina::DEFAULT_PROTOCOL);
            let Some(info) = reducelab_ina::protocol(protocol_name) else {
                return e(
                    format!("{f}.protocol"),
                    format!("must be one of {}, got \"{protocol_name}\"", reducelab_ina::protocol_names()),
                );
            };
            // The protocol's own keys go to its registry entry, which validates them.
            let protocol = ina_protocol(f, &t.params, &t.roots, topology, info)?;
            let values = t.values.unwrap_or(hosts.len() as u64 * b <= 64 << 20);
            Traffic::Ina(crate::ina::InaSpec {
                hosts,
                bytes: b,
                start: start(t.start_ns)?,
                protocol,
                elems_per_packet: epp,
                values,
                roots: t.roots.clone().unwrap_or_default(),
                rank_start: Vec::new(),
                trace_driven: false,
            })
        }
        TrafficSpec::Collective(t) => {
            use reducelab_sched::algos::Layout;
            use reducelab_sched::{registry, Collective};
            let hosts = host_list(&format!("{f}.hosts"), &t.hosts, n)?;
            let collective = Collective::parse(t.collective.as_deref().unwrap_or("allreduce"), t.root.unwrap_or(0))
                .map_err(|r| ScenarioError { field: format!("{f}.collective"), reason: r })?;
            match (collective, t.root) {
                (Collective::Broadcast { root } | Collective::Reduce { root }, _) if root as usize >= hosts.len() => {
                    return e(
                        format!("{f}.root"),
                        format!("{root} is not a rank: {} hosts take part (ranks 0..{})", hosts.len(), hosts.len()),
                    )
                }
                (Collective::Broadcast { .. } | Collective::Reduce { .. }, _) | (_, None) => {}
                (c, Some(_)) => {
                    return e(format!("{f}.root"), format!("applies to broadcast and reduce, not {}", c.name()))
                }
            }
            if let Some(file) = &t.msccl {
                return msccl_collective(f, t, file, hosts, collective, base_dir, bytes(t.bytes)?, start(t.start_ns)?);
            }
            let name = match &t.algorithm {
                Some(a) => a.clone(),
                None => {
                    return e(
                        format!("{f}.algorithm"),
                        format!(
                        "is required for kind = \"collective\" (one of {}), unless `msccl` names an MSCCL XML program",
                        registry::names().join(", ")
                    ),
                    )
                }
            };
            let p = hosts.len() as u32;
            let dims = match &t.dims {
                Some(d) => d.clone(),
                None => match &topology.shape {
                    Shape::Torus { dims } | Shape::HyperX { dims } if p == n => dims.clone(),
                    Shape::HammingMesh { board_x, board_y, grid_x, grid_y } if p == n => {
                        vec![board_x * grid_x, board_y * grid_y]
                    }
                    _ => vec![p],
                },
            };
            let layout =
                Layout::new(dims.clone()).map_err(|r| ScenarioError { field: format!("{f}.dims"), reason: r })?;
            if layout.ranks() != p {
                return e(
                    format!("{f}.dims"),
                    format!("{dims:?} holds {} ranks but {p} hosts take part", layout.ranks()),
                );
            }
            // Before a family is resolved for the size (which models the schedules).
            if p > registry::MAX_RANKS {
                return e(
                    format!("{f}.hosts"),
                    format!(
                        "{p} ranks is more than the {} that any schedule or timing plan supports",
                        registry::MAX_RANKS
                    ),
                );
            }
            // A family, alias or policy runs the variant it resolves to for this size, with the
            // α-β parameters of the topology's links (registry::Costs::for_links).
            let size = bytes(t.bytes)?;
            if size == 0 {
                return e(format!("{f}.bytes"), "a collective needs at least one byte");
            }
            let slowest = topology.links.iter().min_by_key(|l| l.bandwidth_bps);
            let costs =
                registry::Costs::for_links(slowest.map_or(1, |l| l.bandwidth_bps), slowest.map_or(0, |l| l.latency_ps));
            let variant = registry::resolve(&name, collective, &layout, size, &costs, false)
                .map_err(|r| ScenarioError { field: format!("{f}.algorithm"), reason: r })?;
            // The schedule (packet) or plan (flow) is built once the backend is known.
            Traffic::Collective {
                hosts,
                bytes: size,
                start: start(t.start_ns)?,
                algorithm: variant.name.to_string(),
                imported: None,
                collective,
                layout,
                schedule: None,
                plan: None,
            }
        }
    })
}

/// A `collective` entry with `msccl = "file.xml"`: the program imported and checked (from the
/// process-wide cache), its ranks on `hosts` in order, its collective the entry's.
#[allow(clippy::too_many_arguments)]
fn msccl_collective(
    f: &str,
    t: &super::CollectiveEntry,
    file: &str,
    hosts: Vec<u32>,
    collective: reducelab_sched::Collective,
    base_dir: Option<&std::path::Path>,
    size: u64,
    start: SimTime,
) -> Result<Traffic, ScenarioError> {
    if t.algorithm.is_some() {
        return e(
            format!("{f}.msccl"),
            "`msccl` and `algorithm` are mutually exclusive: the MSCCL program is the algorithm",
        );
    }
    if t.dims.is_some() {
        return e(format!("{f}.dims"), "does not apply with `msccl` (the program's rank r runs on hosts[r])");
    }
    let path = match base_dir {
        Some(dir) if std::path::Path::new(file).is_relative() => dir.join(file),
        _ => std::path::PathBuf::from(file),
    };
    let schedule = crate::schedule_cache::cached_msccl(&path)
        .map_err(|r| ScenarioError { field: format!("{f}.msccl"), reason: format!("{}: {r}", path.display()) })?;
    if schedule.ranks as usize != hosts.len() {
        return e(
            format!("{f}.hosts"),
            format!(
                "{} hosts, but {} has ngpus = {} (rank r runs on hosts[r])",
                hosts.len(),
                path.display(),
                schedule.ranks
            ),
        );
    }
    if t.collective.is_some() && schedule.collective != collective {
        return e(
            format!("{f}.collective"),
            format!("is {collective:?}, but {} computes {:?}", path.display(), schedule.collective),
        );
    }
    if size == 0 {
        return e(format!("{f}.bytes"), "a collective needs at least one byte");
    }
    Ok(Traffic::Collective {
        layout: reducelab_sched::algos::Layout::line(schedule.ranks),
        hosts,
        bytes: size,
        start,
        algorithm: schedule.algorithm.clone(),
        collective: schedule.collective,
        imported: Some(schedule),
        schedule: None,
        plan: None,
    })
}

/// Places the `goal` entries that name no `hosts` (at `traffic[i]`) on hosts no other `goal`
/// entry uses, in entry order: the lowest free hosts in order (`placement = "linear"`), or free
/// hosts drawn at random from the seed (`"random"`), so that several jobs share a network on
/// disjoint hosts. Entries that name `hosts` keep them (and may share hosts with one another).
pub(super) fn place_goal_jobs(traffic: &mut [Traffic], num_hosts: u32, seed: u64) -> Result<(), ScenarioError> {
    let mut taken = vec![false; num_hosts as usize];
    for t in traffic.iter() {
        if let Traffic::Goal(g) = t {
            if g.placed.is_none() {
                g.hosts.iter().for_each(|&h| taken[h as usize] = true);
            }
        }
    }
    let mut rng = reducelab_des::Rng::new(seed).fork(0x60A2);
    for (i, t) in traffic.iter_mut().enumerate() {
        let Traffic::Goal(g) = t else { continue };
        let Some(random) = g.placed else { continue };
        let mut free: Vec<u32> = (0..num_hosts).filter(|&h| !taken[h as usize]).collect();
        let ranks = g.trace.num_ranks() as usize;
        if free.len() < ranks {
            return e(
                format!("traffic[{i}].hosts"),
                format!("{}: {ranks} ranks, and {} hosts are free of the other goal entries", g.file, free.len()),
            );
        }
        if random {
            rng.shuffle(&mut free);
        }
        free.truncate(ranks);
        free.iter().for_each(|&h| taken[h as usize] = true);
        for spec in &mut g.ina {
            spec.hosts = free.clone();
        }
        g.hosts = free;
    }
    Ok(())
}
