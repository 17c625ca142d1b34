//! A set of Chakra rank files lowered into one GOAL trace.
//!
//! # Nodes
//!
//! Rank `r`'s nodes become rank `r`'s GOAL operations, in file order:
//!
//! | node | GOAL | time |
//! |---|---|---|
//! | `COMP_NODE` | `calc` on CPU 0 (the compute engine) | `duration_micros` |
//! | `MEM_LOAD_NODE`, `MEM_STORE_NODE`, `METADATA_NODE` | `calc` on CPU 0 | `duration_micros` (usually 0: no memory model) |
//! | `COMM_SEND_NODE` | `send` of `comm_size` bytes to `comm_dst`, tag `comm_tag` | the network's |
//! | `COMM_RECV_NODE` | `recv` of `comm_size` bytes from `comm_src`, tag `comm_tag` | the network's |
//! | `COMM_COLL_NODE` | the registry algorithm's schedule for `comm_type` and `comm_size` ([`Algorithms`]), as `reducelab_sched::export::goal_steps` expands it | the network's |
//!
//! A `COMM_COLL_NODE` of a type served in-network ([`Algorithms::set_in_network`]) is one `calc 0`
//! per rank (`n<id>_innet`, [`CollectiveInstance::in_network`]) that the runner completes when
//! the rank has the protocol's result; it takes the protocol's time.
//!
//! Compute runs on one engine per rank (CPU 0: one compute node at a time, in the order they
//! become ready, as ASTRA-sim runs one GPU kernel at a time). Communication runs on an engine of
//! its own ([`CommEngine::Own`], CPU 1), so a collective overlaps the compute that does not
//! depend on it, or shares CPU 0 with compute ([`CommEngine::SharedWithCompute`]), as hosts do
//! in LogGOPSim's model: the LogGP mode takes only that, because LogGOPSim schedules an
//! operation freed by another CPU at its own CPU's last free time, which may be earlier than the
//! moment it was freed. Sizes are the attributes'
//! integers whatever their protobuf type (`comm_size` as Chakra's converters write it, as
//! `int64_val`; `tensor_size` is taken for a send or receive without `comm_size`).
//! `start_time_micros` and `is_cpu_op` are not used: times come from the simulation.
//!
//! # Dependencies
//!
//! `data_deps` and `ctrl_deps` alike: a node starts once every node it names (on its own rank)
//! has completed. A collective node becomes a `calc 0` that issues it (`n<id>_begin`, waiting
//! for the node's dependencies), its schedule's steps (each step waits for the previous one, as
//! in the IR), and completes with its last step (`n<id>_s<k>_end`); its dependents wait for
//! that.
//!
//! # Collectives across ranks, and process groups
//!
//! A collective node's `pg_name` names its process group ([`CommGroups`]: the scenario's
//! `comm_groups`, as ASTRA-sim's communicator-group file gives them); without one, or with `""`
//! or `"0"` (ASTRA-sim's default group), it spans every rank. In each group, the k-th collective
//! node of every member's file is one instance: all members' must have the same `comm_type` and
//! `comm_size`, and a rank outside the group may have none. An instance's schedule is built for
//! the group's size, its group rank `i` being the group's `i`-th rank (a rooted collective is
//! rooted at the group's first rank). Instances are numbered by where each stands among its
//! first rank's collectives (without groups: the files' order). A `BARRIER` is the dissemination
//! barrier ([`BARRIER_ALGORITHM`]), 0-byte messages in ⌈log₂ n⌉ rounds. `GATHER` and `SCATTER`
//! are refused (the schedule IR has no such collectives). `comm_size` is the schedule's whole vector (the
//! allreduce's buffer, the allgather's gathered output, the reduce-scatter's input), in 4-byte
//! elements as the native collective runs. Instance k's messages carry tags of their own (after
//! every point-to-point tag of the job, one per step), so MPI's matching never mixes two
//! instances or an instance and a point-to-point message.

use crate::et::{AttrValue, CommType, EtFile, Node, NodeType};
use crate::ChakraError;
use reducelab_goal::{OpId, OpKind, Rank, Trace, TraceBuilder};
use reducelab_sched::algos::{build, Layout};
use reducelab_sched::export::{goal_steps, GoalOptions, GoalStep};
use reducelab_sched::Collective;
use std::collections::{BTreeMap, BTreeSet};

/// The CPU of compute, memory and metadata nodes.
pub const COMPUTE_CPU: u8 = 0;

/// Where a rank's communication operations run (module docs).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CommEngine {
    /// CPU 1: communication overlaps compute (the packet engine).
    Own,
    /// CPU 0, with compute (the LogGP mode).
    SharedWithCompute,
}

impl CommEngine {
    fn cpu(self) -> u8 {
        match self {
            CommEngine::Own => 1,
            CommEngine::SharedWithCompute => COMPUTE_CPU,
        }
    }
}
/// Element size of collectives (as native collectives run).
pub const ELEM_BYTES: u64 = 4;
/// The largest message or collective (the scenario's bound on `bytes`).
pub const MAX_BYTES: u64 = 1 << 40;

/// The schedule IR's collective for a Chakra collective type, `None` for those not run yet. The
/// one place that says which types run: extend it as the IR gains collectives.
pub fn collective_of(c: CommType) -> Option<Collective> {
    // Chakra's collective nodes name no root: rooted collectives are rooted at rank 0.
    match c {
        CommType::AllReduce => Some(Collective::Allreduce),
        CommType::ReduceScatter | CommType::ReduceScatterBlock => Some(Collective::ReduceScatter),
        CommType::AllGather => Some(Collective::Allgather),
        CommType::Broadcast => Some(Collective::Broadcast { root: 0 }),
        CommType::Reduce => Some(Collective::Reduce { root: 0 }),
        CommType::AllToAll => Some(Collective::Alltoall),
        CommType::Gather | CommType::Scatter | CommType::Barrier => None,
    }
}

/// The collective types that run, by their schema names.
pub fn supported() -> String {
    let names: Vec<&str> = CommType::ALL
        .iter()
        .filter(|c| collective_of(**c).is_some() || **c == CommType::Barrier)
        .map(|c| c.name())
        .collect();
    names.join(", ")
}

/// What a `BARRIER` runs: the dissemination barrier (Hensgen, Finkel and Manber, 1988), as MPI
/// libraries run `MPI_Barrier` — ⌈log₂ n⌉ rounds; in round `j` group rank `i` sends a 0-byte
/// message to `i + 2^j` and waits for one from `i − 2^j` (mod n).
pub const BARRIER_ALGORITHM: &str = "dissemination";

/// Rounds of the dissemination barrier on `n` ranks: ⌈log₂ n⌉.
pub fn dissemination_rounds(n: u32) -> usize {
    (u32::BITS - n.saturating_sub(1).leading_zeros()) as usize
}

/// The dissemination barrier's steps per group rank, as [`goal_steps`] gives a schedule's.
fn dissemination(n: u32) -> Vec<Vec<GoalStep>> {
    use reducelab_sched::export::GoalTransfer;
    (0..n)
        .map(|i| {
            (0..dissemination_rounds(n))
                .map(|j| {
                    let d = 1u32 << j;
                    let xfer = |index, send, peer| GoalTransfer { index, send, peer, bytes: 0, reduce_ns: None };
                    GoalStep {
                        step: j,
                        transfers: vec![xfer(0, true, (i + d) % n), xfer(1, false, (i + n - d % n) % n)],
                    }
                })
                .collect()
        })
        .collect()
}

/// A job's process groups, as ASTRA-sim's `--comm-group-configuration` file gives them: group
/// name (a collective node's `pg_name`) → its ranks. A collective without `pg_name`, or with
/// `""` or `"0"` (ASTRA-sim's default group), spans every rank.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CommGroups(BTreeMap<String, Vec<u32>>);

impl CommGroups {
    /// The groups of `ranks` ranks: each non-empty, its ranks distinct and below `ranks`; no
    /// group named `""` or `"0"` (the default group's names). Errors name the group.
    pub fn new(groups: BTreeMap<String, Vec<u32>>, ranks: u32) -> Result<CommGroups, String> {
        for (name, members) in &groups {
            if name.is_empty() || name == "0" {
                return Err(format!(
                    "group {name:?}: \"\" and \"0\" name the default group of every rank (as in ASTRA-sim)"
                ));
            }
            if members.is_empty() {
                return Err(format!("group {name:?}: no ranks"));
            }
            if let Some(&r) = members.iter().find(|&&r| r >= ranks) {
                return Err(format!("group {name:?}: rank {r} is not one of the job's {ranks} ranks"));
            }
            let mut seen = BTreeSet::new();
            if let Some(&r) = members.iter().find(|&&r| !seen.insert(r)) {
                return Err(format!("group {name:?}: rank {r} is listed twice"));
            }
        }
        Ok(CommGroups(groups))
    }

    /// The group a collective's `pg_name` names: `None` for every rank.
    fn key(&self, pg: Option<&str>) -> Result<Option<String>, String> {
        match pg {
            None | Some("") | Some("0") => Ok(None),
            Some(g) if self.0.contains_key(g) => Ok(Some(g.to_string())),
            Some(g) => Err(format!(
                "pg_name {g:?}: no such process group ({})",
                if self.0.is_empty() {
                    "the scenario gives no comm_groups".to_string()
                } else {
                    format!("the groups: {}", self.0.keys().map(|k| format!("{k:?}")).collect::<Vec<_>>().join(", "))
                }
            )),
        }
    }

    /// The group's ranks in its order (a rooted collective's root is the first), or `world`.
    fn members<'a>(&'a self, key: Option<&str>, world: &'a [u32]) -> &'a [u32] {
        match key {
            None => world,
            Some(g) => &self.0[g],
        }
    }
}

/// The registry algorithm of each collective type (defaults: [`Algorithms::default_for`]), or the
/// in-network protocol that serves it ([`Algorithms::set_in_network`]).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Algorithms(BTreeMap<CommType, String>, BTreeSet<CommType>);

impl Algorithms {
    /// The algorithm a collective type runs unless the scenario names one: `ring` for allreduce
    /// and its halves, `binomial` for broadcast and reduce, `pairwise` for all-to-all (the
    /// bandwidth-optimal choices of MPI libraries for large messages, or the only one; a small
    /// all-to-all runs Bruck, [`Algorithms::choose`]).
    pub fn default_for(c: CommType) -> &'static str {
        match collective_of(c) {
            Some(Collective::Broadcast { .. } | Collective::Reduce { .. }) => "binomial",
            Some(Collective::Alltoall) => "pairwise",
            _ => "ring",
        }
    }

    pub fn set(&mut self, c: CommType, algorithm: &str) {
        self.0.insert(c, algorithm.to_string());
        self.1.remove(&c);
    }

    /// `c` runs as an in-network collective named `protocol` (module docs): the trace says where
    /// each rank joins it, the runner serves it.
    pub fn set_in_network(&mut self, c: CommType, protocol: &str) {
        self.0.insert(c, protocol.to_string());
        self.1.insert(c);
    }

    pub fn is_in_network(&self, c: CommType) -> bool {
        self.1.contains(&c)
    }

    pub fn get(&self, c: CommType) -> &str {
        self.0.get(&c).map_or(Algorithms::default_for(c), String::as_str)
    }

    /// The algorithm an instance of `c` with `comm_size` = `bytes` on `n` ranks runs: the one the
    /// scenario names, else [`Algorithms::default_for`], except that an all-to-all follows
    /// MPICH's rule (`MPIR_CVAR_ALLTOALL_SHORT_MSG_SIZE`, 256 B): Bruck when each destination's
    /// part of a rank's buffer is at most [`ALLTOALL_SHORT_BYTES`] and there are at least 8 ranks
    /// (⌈log₂ n⌉ steps beat n − 1 when latency dominates), pairwise otherwise (MPICH's medium
    /// sizes post every message at once; pairwise is the registry's nearest).
    pub fn choose(&self, c: CommType, bytes: u64, n: u32) -> &str {
        match self.0.get(&c) {
            Some(a) => a,
            None if collective_of(c) == Some(Collective::Alltoall)
                && n >= 8
                && bytes / n as u64 <= ALLTOALL_SHORT_BYTES =>
            {
                "bruck"
            }
            None => Algorithms::default_for(c),
        }
    }
}

/// MPICH's short all-to-all threshold per destination ([`Algorithms::choose`]).
pub const ALLTOALL_SHORT_BYTES: u64 = 256;

/// One collective instance: the k-th collective node of every member of its process group.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CollectiveInstance {
    pub comm: CommType,
    pub bytes: u64,
    pub algorithm: String,
    /// Served by an in-network protocol (`algorithm` names it): one operation per rank, both
    /// `begin` and `end`, that the runner completes when that rank has the result.
    pub in_network: bool,
    /// Its process group (`pg_name`, [`CommGroups`]); `None`: every rank.
    pub group: Option<String>,
    /// The ranks taking part, in rank order; then, per rank: its node's id, the operation that
    /// issues it and the one that completes it.
    pub ranks: Vec<u32>,
    pub node: Vec<u64>,
    pub begin: Vec<OpId>,
    pub end: Vec<OpId>,
}

/// What the GOAL trace does not say about the Chakra job it came from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ChakraJob {
    /// The rank files, as the caller named them.
    pub files: Vec<String>,
    pub nodes: usize,
    pub collectives: Vec<CollectiveInstance>,
    /// Per rank: the compute engine's busy time (ns), the sum of its compute, memory and
    /// metadata nodes' durations.
    pub rank_compute_ns: Vec<u64>,
}

/// The lowered trace and its bookkeeping.
#[derive(Clone, Debug)]
pub struct Lowered {
    pub trace: Trace,
    pub job: ChakraJob,
}

/// A run's results in Chakra's terms (times in ps after the job's start).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ChakraResults {
    /// The iteration time: the last rank's end.
    pub iteration_ps: u64,
    pub rank_end_ps: Vec<u64>,
    pub rank_compute_ps: Vec<u64>,
    /// Per rank: end − compute busy time (docs/workloads.md).
    pub rank_exposed_comm_ps: Vec<u64>,
    /// Per instance: (start, end): the first rank issuing it, the last rank completing it.
    pub collectives: Vec<(u64, u64)>,
}

impl ChakraJob {
    /// Results from a completed run: each rank's end and every operation's start and end (ps,
    /// after the job's start; indexed by [`OpId`]).
    pub fn results(&self, rank_end_ps: &[u64], op_start_ps: &[u64], op_end_ps: &[u64]) -> ChakraResults {
        let rank_compute_ps: Vec<u64> = self.rank_compute_ns.iter().map(|c| c.saturating_mul(1000)).collect();
        let rank_exposed_comm_ps =
            rank_end_ps.iter().zip(&rank_compute_ps).map(|(e, c)| e.saturating_sub(*c)).collect();
        let collectives = self
            .collectives
            .iter()
            .map(|c| {
                let start = c.begin.iter().map(|o| op_start_ps[o.index()]).min().unwrap_or(0);
                let end = c.end.iter().map(|o| op_end_ps[o.index()]).max().unwrap_or(0);
                (start, end)
            })
            .collect();
        ChakraResults {
            iteration_ps: rank_end_ps.iter().copied().max().unwrap_or(0),
            rank_end_ps: rank_end_ps.to_vec(),
            rank_compute_ps,
            rank_exposed_comm_ps,
            collectives,
        }
    }

    /// Rows of `chakra_collectives.csv` (header [`COLLECTIVES_CSV_HEADER`]) for traffic entry
    /// `traffic`.
    pub fn collectives_csv(&self, traffic: usize, r: &ChakraResults, out: &mut String) {
        use std::fmt::Write;
        for (k, (c, &(s, e))) in self.collectives.iter().zip(&r.collectives).enumerate() {
            let _ = writeln!(
                out,
                "{traffic},{k},{},{},{},{s},{e},{}",
                c.comm.name(),
                c.bytes,
                c.algorithm,
                e.saturating_sub(s)
            );
        }
    }

    /// Rows of `chakra_ranks.csv` (header [`RANKS_CSV_HEADER`]).
    pub fn ranks_csv(&self, traffic: usize, r: &ChakraResults, out: &mut String) {
        use std::fmt::Write;
        for (rank, e) in r.rank_end_ps.iter().enumerate() {
            let _ = writeln!(out, "{traffic},{rank},{e},{},{}", r.rank_compute_ps[rank], r.rank_exposed_comm_ps[rank]);
        }
    }
}

pub const COLLECTIVES_CSV_HEADER: &str = "traffic,instance,type,bytes,algorithm,start_ps,end_ps,duration_ps\n";
pub const RANKS_CSV_HEADER: &str = "traffic,rank,end_ps,compute_ps,exposed_comm_ps\n";

/// A node's work, its attributes read and checked.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Work {
    Calc { ns: u64 },
    Send { peer: u32, bytes: u64, tag: u32 },
    Recv { peer: u32, bytes: u64, tag: u32 },
    Coll { comm: CommType, bytes: u64, pg: Option<String> },
}

fn int_attr(n: &Node, name: &str) -> Result<Option<i128>, String> {
    match n.attr(name) {
        None => Ok(None),
        Some(v) => match v.as_int() {
            Some(i) => Ok(Some(i)),
            None => Err(format!("attribute {name} is {}, not an integer", v.member())),
        },
    }
}

fn bytes_attr(n: &Node, names: &[&str]) -> Result<u64, String> {
    for name in names {
        if let Some(b) = int_attr(n, name)? {
            if b < 0 || b > MAX_BYTES as i128 {
                return Err(format!("{name} = {b}: a size must be 0 … {MAX_BYTES} bytes (1 TiB)"));
            }
            return Ok(b as u64);
        }
    }
    Err(format!("{} has no {} attribute", n.kind().map_or("node", |k| k.name()), names.join(" or ")))
}

fn rank_attr(n: &Node, name: &str, me: u32, ranks: u32) -> Result<u32, String> {
    let what = n.kind().map_or("node", |k| k.name());
    match int_attr(n, name)? {
        None => Err(format!("{what} has no {name} attribute")),
        Some(p) if p < 0 || p >= ranks as i128 => Err(format!("{name} = {p}: no such rank ({ranks} rank files)")),
        Some(p) if p as u32 == me => Err(format!("{name} = {p} is this file's own rank")),
        Some(p) => Ok(p as u32),
    }
}

fn node_work(n: &Node, me: u32, ranks: u32) -> Result<Work, String> {
    let Some(kind) = n.kind() else {
        return Err(match n.node_type {
            0 => "type 0 (INVALID_NODE) is not a node to run".to_string(),
            t => format!("type {t} is not a NodeType of the schema (1 … 7)"),
        });
    };
    let tag = || -> Result<u32, String> {
        match int_attr(n, "comm_tag")? {
            None => Ok(0),
            Some(t) if (0..u32::MAX as i128).contains(&t) => Ok(t as u32),
            Some(t) => Err(format!("comm_tag = {t} does not fit (0 … {})", u32::MAX - 1)),
        }
    };
    Ok(match kind {
        NodeType::Comp | NodeType::MemLoad | NodeType::MemStore | NodeType::Metadata => {
            let ns = n
                .duration_micros
                .checked_mul(1000)
                .ok_or_else(|| format!("duration_micros = {} does not fit in 64-bit nanoseconds", n.duration_micros))?;
            Work::Calc { ns }
        }
        NodeType::CommSend => Work::Send {
            peer: rank_attr(n, "comm_dst", me, ranks)?,
            bytes: bytes_attr(n, &["comm_size", "tensor_size"])?,
            tag: tag()?,
        },
        NodeType::CommRecv => Work::Recv {
            peer: rank_attr(n, "comm_src", me, ranks)?,
            bytes: bytes_attr(n, &["comm_size", "tensor_size"])?,
            tag: tag()?,
        },
        NodeType::CommColl => {
            let comm = match int_attr(n, "comm_type")? {
                None => return Err("COMM_COLL_NODE has no comm_type attribute".into()),
                Some(v) => i64::try_from(v)
                    .ok()
                    .and_then(CommType::from_i64)
                    .ok_or_else(|| format!("comm_type = {v} is not a CollectiveCommType of the schema (0 … 9)"))?,
            };
            let pg = match n.attr("pg_name") {
                None => None,
                Some(AttrValue::Str(s)) => Some(s.clone()),
                Some(v) => return Err(format!("attribute pg_name is {}, not a string_val", v.member())),
            };
            Work::Coll { comm, bytes: bytes_attr(n, &["comm_size"])?, pg }
        }
    })
}

/// One rank's nodes, interpreted, with their dependencies as node indices.
struct RankPlan {
    work: Vec<Work>,
    deps: Vec<Vec<usize>>,
    colls: Vec<usize>,
}

fn plan_rank(file: &str, f: &EtFile, me: u32, ranks: u32) -> Result<RankPlan, ChakraError> {
    let err =
        |n: &Node, m: String| ChakraError { file: Some(file.to_string()), node: Some(n.id), offset: None, message: m };
    let mut index: BTreeMap<u64, usize> = BTreeMap::new();
    for (i, n) in f.nodes.iter().enumerate() {
        if let Some(&j) = index.get(&n.id) {
            return Err(err(n, format!("a second node with id {} (the first at byte {})", n.id, f.nodes[j].offset)));
        }
        index.insert(n.id, i);
    }
    let mut work = Vec::with_capacity(f.nodes.len());
    let mut deps = Vec::with_capacity(f.nodes.len());
    let mut colls = Vec::new();
    for (i, n) in f.nodes.iter().enumerate() {
        let w = node_work(n, me, ranks).map_err(|m| err(n, m))?;
        if matches!(w, Work::Coll { .. }) {
            colls.push(i);
        }
        work.push(w);
        let mut seen = BTreeSet::new();
        let mut mine = Vec::new();
        for &d in n.data_deps.iter().chain(&n.ctrl_deps) {
            let Some(&j) = index.get(&d) else {
                return Err(err(n, format!("depends on node {d}, which this file does not have")));
            };
            if seen.insert(j) {
                mine.push(j);
            }
        }
        deps.push(mine);
    }
    // Cycles (Kahn's order; what it cannot order holds a cycle, walked to be named).
    let k = f.nodes.len();
    let mut waiting: Vec<usize> = deps.iter().map(Vec::len).collect();
    let mut dependents: Vec<Vec<usize>> = vec![Vec::new(); k];
    for (i, ds) in deps.iter().enumerate() {
        ds.iter().for_each(|&j| dependents[j].push(i));
    }
    let mut ready: Vec<usize> = (0..k).filter(|&i| waiting[i] == 0).collect();
    let mut done = vec![false; k];
    while let Some(i) = ready.pop() {
        done[i] = true;
        for &s in &dependents[i] {
            waiting[s] -= 1;
            if waiting[s] == 0 {
                ready.push(s);
            }
        }
    }
    if let Some(start) = (0..k).find(|&i| !done[i]) {
        // Every node left waits for another node left: follow those until one repeats.
        let mut pos: BTreeMap<usize, usize> = BTreeMap::new();
        let mut path = Vec::new();
        let mut at = start;
        while !pos.contains_key(&at) {
            pos.insert(at, path.len());
            path.push(at);
            at = *deps[at].iter().find(|&&j| !done[j]).expect("a node left waits for a node left");
        }
        let cycle: Vec<String> = path[pos[&at]..].iter().chain([&at]).map(|&i| f.nodes[i].id.to_string()).collect();
        return Err(err(
            &f.nodes[at],
            format!("dependency cycle: node {} (each depends on the next)", cycle.join(" → ")),
        ));
    }
    Ok(RankPlan { work, deps, colls })
}

fn describe_coll(w: &Work) -> String {
    match w {
        Work::Coll { comm, bytes, pg } => {
            let pg = pg.as_ref().map_or(String::new(), |p| format!(" in process group {p:?}"));
            format!("{} of {bytes} B{pg}", comm.name())
        }
        _ => String::new(),
    }
}

/// Lowers rank files (rank `r` is `files[r]`, named as errors should name it) into one GOAL trace
/// (module docs), each collective type run by `algorithms`' registry algorithm, communication on
/// `engine`.
pub fn lower(files: &[(String, EtFile)], algorithms: &Algorithms, engine: CommEngine) -> Result<Lowered, ChakraError> {
    lower_grouped(files, algorithms, engine, &CommGroups::default())
}

/// [`lower`] with the job's process groups: a collective whose `pg_name` names one of `groups`
/// spans that group's ranks (module docs).
pub fn lower_grouped(
    files: &[(String, EtFile)],
    algorithms: &Algorithms,
    engine: CommEngine,
    groups: &CommGroups,
) -> Result<Lowered, ChakraError> {
    let comm_cpu = engine.cpu();
    let p = files.len() as u32;
    if p == 0 {
        return Err(ChakraError::new("no rank files"));
    }
    let plans: Vec<RankPlan> =
        files.iter().enumerate().map(|(r, (name, f))| plan_rank(name, f, r as u32, p)).collect::<Result<_, _>>()?;

    if let Some((g, r)) = groups.0.iter().find_map(|(g, m)| m.iter().find(|&&r| r >= p).map(|&r| (g, r))) {
        return Err(ChakraError::new(format!("process group {g:?}: rank {r} is not one of the job's {p} rank files")));
    }
    // Collective instances: in each process group, the k-th collective of every member, alike.
    let world: Vec<u32> = (0..p).collect();
    let mut seqs: BTreeMap<Option<String>, Vec<Vec<usize>>> = BTreeMap::new();
    for (r, plan) in plans.iter().enumerate() {
        let (name, f) = &files[r];
        for &i in &plan.colls {
            let Work::Coll { pg, .. } = &plan.work[i] else { unreachable!("a collective's index") };
            let key = groups
                .key(pg.as_deref())
                .map_err(|m| ChakraError::new(m).in_file(name.clone()).at_node(f.nodes[i].id))?;
            let members = groups.members(key.as_deref(), &world);
            let Some(pos) = members.iter().position(|&m| m == r as u32) else {
                return Err(ChakraError::new(format!(
                    "{} is in process group {:?}, whose ranks are {members:?}, and this file is rank {r}",
                    describe_coll(&plan.work[i]),
                    key.as_deref().unwrap_or_default()
                ))
                .in_file(name.clone())
                .at_node(f.nodes[i].id));
            };
            seqs.entry(key).or_insert_with(|| vec![Vec::new(); members.len()])[pos].push(i);
        }
    }
    // Per group, every member's sequence against its first member's.
    for (key, seq) in &seqs {
        let members = groups.members(key.as_deref(), &world);
        let r0 = members[0] as usize;
        let (name0, fr0) = &files[r0];
        let in_group = key.as_ref().map_or(String::new(), |g| format!(" in process group {g:?}"));
        for (pos, mine) in seq.iter().enumerate().skip(1) {
            let r = members[pos] as usize;
            let (name, f) = &files[r];
            for (k, (&i, &i0)) in mine.iter().zip(&seq[0]).enumerate() {
                if plans[r].work[i] != plans[r0].work[i0] {
                    return Err(ChakraError::new(format!(
                        "collective {k}{in_group} (COMM_COLL_NODE number {} of the file) is {}, and on rank {r0} ({name0}, node {}) {}: collectives are matched by their order on each rank",
                        k + 1,
                        describe_coll(&plans[r].work[i]),
                        fr0.nodes[i0].id,
                        describe_coll(&plans[r0].work[i0])
                    ))
                    .in_file(name.clone())
                    .at_node(f.nodes[i].id));
                }
            }
            if mine.len() != seq[0].len() {
                let (more, fewer) = if mine.len() > seq[0].len() { (pos, 0) } else { (0, pos) };
                let n = seq[fewer].len();
                let (rm, rf) = (members[more] as usize, members[fewer] as usize);
                return Err(ChakraError::new(format!(
                    "{} collective nodes{in_group}, and {} has {n}: this one, collective {n}{in_group} of the file, has no counterpart there (collectives are matched by their order on each rank)",
                    seq[more].len(),
                    files[rf].0,
                ))
                .in_file(files[rm].0.clone())
                .at_node(files[rm].1.nodes[seq[more][n]].id));
            }
        }
    }
    // The instances in order: by where each stands among its first rank's collectives, then by
    // that rank (without groups: every rank's order); and each rank's map from a collective node
    // to its instance and its place in the group.
    let mut inst_keys: Vec<(Option<String>, usize)> =
        seqs.iter().flat_map(|(key, seq)| (0..seq[0].len()).map(move |k| (key.clone(), k))).collect();
    inst_keys.sort_by_cached_key(|(key, k)| {
        let r0 = groups.members(key.as_deref(), &world)[0];
        let i0 = seqs[key][0][*k];
        (plans[r0 as usize].colls.iter().position(|&x| x == i0), r0)
    });
    let mut inst_of: Vec<BTreeMap<usize, (usize, u32)>> = vec![BTreeMap::new(); p as usize];
    for (n, (key, k)) in inst_keys.iter().enumerate() {
        let members = groups.members(key.as_deref(), &world);
        for (pos, mine) in seqs[key].iter().enumerate() {
            inst_of[members[pos] as usize].insert(mine[*k], (n, pos as u32));
        }
    }
    for (key, k) in &inst_keys {
        let r0 = groups.members(key.as_deref(), &world)[0] as usize;
        let i0 = seqs[key][0][*k];
        if let Work::Coll { comm, .. } = plans[r0].work[i0] {
            if collective_of(comm).is_none() && comm != CommType::Barrier {
                return Err(ChakraError::new(format!(
                    "{}: not run yet (the collectives run: {})",
                    comm.name(),
                    supported()
                ))
                .in_file(files[r0].0.clone())
                .at_node(files[r0].1.nodes[i0].id));
            }
        }
    }

    // Point-to-point messages: MPI's channels must balance.
    type Ends = (Vec<(u32, usize)>, Vec<(u32, usize)>);
    let mut channels: BTreeMap<(u32, u32, u32), Ends> = BTreeMap::new();
    let mut max_tag: Option<u32> = None;
    for (r, plan) in plans.iter().enumerate() {
        let r = r as u32;
        for (i, w) in plan.work.iter().enumerate() {
            match *w {
                Work::Send { peer, tag, .. } => {
                    channels.entry((r, peer, tag)).or_default().0.push((r, i));
                    max_tag = max_tag.max(Some(tag));
                }
                Work::Recv { peer, tag, .. } => {
                    channels.entry((peer, r, tag)).or_default().1.push((r, i));
                    max_tag = max_tag.max(Some(tag));
                }
                _ => {}
            }
        }
    }
    for (&(src, dst, tag), (sends, recvs)) in &channels {
        if sends.len() != recvs.len() {
            let (verb, what, &(r, i)) = if sends.len() > recvs.len() {
                ("COMM_SEND_NODE", "COMM_RECV_NODE", &sends[recvs.len()])
            } else {
                ("COMM_RECV_NODE", "COMM_SEND_NODE", &recvs[sends.len()])
            };
            return Err(ChakraError::new(format!(
                "{verb} from rank {src} to rank {dst} with tag {tag}: no matching {what} ({} sends, {} receives on that channel)",
                sends.len(),
                recvs.len()
            ))
            .in_file(files[r as usize].0.clone())
            .at_node(files[r as usize].1.nodes[i].id));
        }
    }

    // Schedules (per collective type and group size), their expansion per size, and each
    // instance's tags.
    let mut schedules = BTreeMap::new();
    let mut expanded: BTreeMap<(CommType, u64, u32), Vec<Vec<GoalStep>>> = BTreeMap::new();
    let mut tag_base = Vec::with_capacity(inst_keys.len());
    let mut next_tag: u64 = max_tag.map_or(0, |t| t as u64 + 1);
    for (key, k) in &inst_keys {
        let n = groups.members(key.as_deref(), &world).len() as u32;
        let r0 = groups.members(key.as_deref(), &world)[0] as usize;
        let i0 = seqs[key][0][*k];
        let Work::Coll { comm, bytes, .. } = plans[r0].work[i0] else { continue };
        let algorithm = if comm == CommType::Barrier { BARRIER_ALGORITHM } else { algorithms.choose(comm, bytes, n) };
        if n > 1 && algorithms.is_in_network(comm) {
            if let Some(g) = key {
                return Err(ChakraError::new(format!(
                    "{} in process group {g:?}: {algorithm} serves collectives of every rank only (a group's in-network collective is not run yet)",
                    comm.name()
                ))
                .in_file(files[r0].0.clone())
                .at_node(files[r0].1.nodes[i0].id));
            }
            // No schedule and no messages of the trace's own: the protocol's packets.
            tag_base.push(next_tag);
            continue;
        }
        let at = |m: String| {
            ChakraError::new(format!("{} with algorithm {algorithm:?}: {m}", comm.name()))
                .in_file(files[r0].0.clone())
                .at_node(files[r0].1.nodes[i0].id)
        };
        if let std::collections::btree_map::Entry::Vacant(v) = expanded.entry((comm, bytes, n)) {
            let steps = if n == 1 {
                vec![Vec::new()]
            } else if comm == CommType::Barrier {
                dissemination(n)
            } else {
                let coll = collective_of(comm).expect("checked above");
                if let std::collections::btree_map::Entry::Vacant(s) = schedules.entry((comm, n, algorithm)) {
                    s.insert(build(algorithm, coll, &Layout::line(n)).map_err(|m| at(format!("{m} ({n} ranks)")))?);
                }
                let opts = GoalOptions { size_bytes: bytes, elem_bytes: ELEM_BYTES, calc_ns_per_byte: 0.0 };
                goal_steps(&schedules[&(comm, n, algorithm)], &opts).map_err(at)?
            };
            v.insert(steps);
        }
        tag_base.push(next_tag);
        next_tag += match (n, comm) {
            (1, _) => 0,
            (_, CommType::Barrier) => dissemination_rounds(n) as u64,
            _ => schedules[&(comm, n, algorithm)].num_steps() as u64,
        };
        if next_tag >= u32::MAX as u64 {
            return Err(at(format!(
                "the job's collectives need more than {} message tags (one per step)",
                u32::MAX - 1
            )));
        }
    }

    // The trace, rank by rank.
    let mut b = TraceBuilder::new(p).map_err(|e| ChakraError::new(e.message))?;
    let mut instances: Vec<CollectiveInstance> = inst_keys
        .iter()
        .map(|(key, k)| {
            let members = groups.members(key.as_deref(), &world);
            let r0 = members[0] as usize;
            let Work::Coll { comm, bytes, .. } = plans[r0].work[seqs[key][0][*k]] else {
                unreachable!("a collective's index")
            };
            CollectiveInstance {
                comm,
                bytes,
                algorithm: match (members.len(), comm) {
                    (1, _) => String::new(),
                    (_, CommType::Barrier) => BARRIER_ALGORITHM.to_string(),
                    _ => algorithms.choose(comm, bytes, members.len() as u32).to_string(),
                },
                in_network: members.len() > 1 && algorithms.is_in_network(comm),
                group: key.clone(),
                ranks: Vec::new(),
                node: Vec::new(),
                begin: Vec::new(),
                end: Vec::new(),
            }
        })
        .collect();
    let mut rank_compute_ns = Vec::with_capacity(p as usize);
    for (r, plan) in plans.iter().enumerate() {
        let (name, f) = &files[r];
        let rank = Rank(r as u32);
        let goal = |e: reducelab_goal::GoalError| ChakraError::new(e.message).in_file(name.clone());
        let mut entry = Vec::with_capacity(plan.work.len());
        let mut exit = Vec::with_capacity(plan.work.len());
        let mut compute = 0u64;
        for (i, w) in plan.work.iter().enumerate() {
            let id = f.nodes[i].id;
            let label = format!("n{id}");
            let (first, last) = match *w {
                Work::Calc { ns } => {
                    compute = compute.saturating_add(ns);
                    let o = b.op(rank, OpKind::Calc, ns, 0, 0, COMPUTE_CPU, &label).map_err(goal)?;
                    (o, o)
                }
                Work::Send { peer, bytes, tag } => {
                    let o = b.op(rank, OpKind::Send, bytes, peer, tag, comm_cpu, &label).map_err(goal)?;
                    (o, o)
                }
                Work::Recv { peer, bytes, tag } => {
                    let o = b.op(rank, OpKind::Recv, bytes, peer, tag, comm_cpu, &label).map_err(goal)?;
                    (o, o)
                }
                Work::Coll { .. } if instances[inst_of[r][&i].0].in_network => {
                    let o = b.op(rank, OpKind::Calc, 0, 0, 0, comm_cpu, &format!("{label}_innet")).map_err(goal)?;
                    let inst = &mut instances[inst_of[r][&i].0];
                    inst.ranks.push(r as u32);
                    inst.node.push(id);
                    inst.begin.push(o);
                    inst.end.push(o);
                    (o, o)
                }
                Work::Coll { comm, bytes, .. } => {
                    let (k, pos) = inst_of[r][&i];
                    let members = groups.members(instances[k].group.as_deref(), &world);
                    let begin = b.op(rank, OpKind::Calc, 0, 0, 0, comm_cpu, &format!("{label}_begin")).map_err(goal)?;
                    let mut prev = begin;
                    for st in &expanded[&(comm, bytes, members.len() as u32)][pos as usize] {
                        let tag = (tag_base[k] + st.step as u64) as u32;
                        let mut ends = Vec::with_capacity(st.transfers.len());
                        for t in &st.transfers {
                            let kind = if t.send { OpKind::Send } else { OpKind::Recv };
                            let l = format!("{label}_s{}_x{}", st.step, t.index);
                            let peer = members[t.peer as usize];
                            let o = b.op(rank, kind, t.bytes, peer, tag, comm_cpu, &l).map_err(goal)?;
                            b.requires(o, prev).map_err(goal)?;
                            match t.reduce_ns {
                                Some(ns) => {
                                    let l = format!("{label}_s{}_c{}", st.step, t.index);
                                    let c = b.op(rank, OpKind::Calc, ns, 0, 0, comm_cpu, &l).map_err(goal)?;
                                    b.requires(c, o).map_err(goal)?;
                                    ends.push(c);
                                }
                                None => ends.push(o),
                            }
                        }
                        let l = format!("{label}_s{}_end", st.step);
                        let end = b.op(rank, OpKind::Calc, 0, 0, 0, comm_cpu, &l).map_err(goal)?;
                        for e in ends {
                            b.requires(end, e).map_err(goal)?;
                        }
                        prev = end;
                    }
                    let inst = &mut instances[k];
                    inst.ranks.push(r as u32);
                    inst.node.push(id);
                    inst.begin.push(begin);
                    inst.end.push(prev);
                    (begin, prev)
                }
            };
            entry.push(first);
            exit.push(last);
        }
        for (i, ds) in plan.deps.iter().enumerate() {
            for &j in ds {
                b.requires(entry[i], exit[j]).map_err(goal)?;
            }
        }
        rank_compute_ns.push(compute);
    }
    let trace = b.finish().map_err(|e| ChakraError::new(e.message))?;
    let job = ChakraJob {
        files: files.iter().map(|(n, _)| n.clone()).collect(),
        nodes: files.iter().map(|(_, f)| f.nodes.len()).sum(),
        collectives: instances,
        rank_compute_ns,
    };
    Ok(Lowered { trace, job })
}
