//! One allreduce on a whole topology, timed at packet or flow level, with the network of the
//! Swing paper's evaluation (NSDI'24 §5).
//!
//! [`run_collective`] builds the algorithm's allreduce schedule for a topology spec
//! (`torus:8x8`, `hyperx:16x16`, `hammingmesh:2x2,32x32`; see [`TopologySpec`]), places rank
//! `r` on host `r` and runs it on one of two backends:
//!
//! - **packet** ([`crate::collective::CollectiveRun`] on [`reducelab_net::Network`]): every
//!   rank's result is checked block by block against the sum of all ranks' fingerprints
//!   (`verified`). Network: links of the given bandwidth and latency, `hop_ns` pipeline latency
//!   in every forwarding node (the paper's 300 ns per-hop packet processing), packets of at most
//!   4 KiB on the wire with 64 B headers, lossless credit flow control, minimal adaptive routing
//!   (Duato escape channels on tori), and ingress buffers per port and VC large enough for line
//!   rate (see [`NetworkParams::buffer_bytes`]).
//! - **flow** (`reducelab_flow::run_plan`): messages as pipelined fluid flows (a chain of
//!   per-link stages sharing each link equally) on fixed minimal paths, same latencies. No data is carried, so nothing is verified; the schedule
//!   itself is size-independent (blocks are fractions of the vector), so a packet-level run of
//!   the same schedule at a smaller size verifies its data flow.
//! - **auto**: packet below [`AUTO_FLOW_MIN_BYTES`] (8 MiB), flow from there on. The flow
//!   backend is validated within 1.2% of packet level for 8 MiB allreduces
//!   (docs/flow-vs-packet.md); below that multi-hop steps can come out up to ~6% (worst seen
//!   15%) faster than at packet level, so small sizes stay at packet level where latency
//!   effects matter. Two exceptions run every size at flow level
//!   ([`auto_flow_reason`]): contention-free plans (ring family and bucket on tori: one flow
//!   per link at a time, where the flow backend's recurrence equals packet level exactly,
//!   0.0% in docs/flow-vs-packet.md), and schedules whose packet-level data check would need
//!   more than [`PACKET_MAX_FINGERPRINTS`] (rank, block) fingerprints (Swing-B on 128x128:
//!   16384 × 65536 = 2³⁰, ≈ 13 GB).
//!
//! Built schedules are cached per (algorithm, topology) in a small process-wide cache, and
//! [`run_collective_sizes`] builds the topology once for a whole sweep of sizes.

use crate::collective::CollectiveRun;
use reducelab_des::{Rng, SimTime};
use reducelab_flow::FlowConfig;
use reducelab_net::{NetConfig, Network, RoutingAlgo, RunEnd};
use reducelab_sched::algos::{self, Layout};
use reducelab_sched::{Collective, Plan, Schedule, TopologySpec};
use reducelab_topo::{self as topo, LinkParams, Topology};
use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Instant;

/// `auto` runs sizes of at least this many bytes at flow level (8 MiB: the size at which the
/// flow backend is validated within 5% of the packet engine, docs/flow-vs-packet.md).
pub const AUTO_FLOW_MIN_BYTES: u64 = 8 << 20;

/// Most (rank, block) pairs a packet-level run checks (8 bytes of fingerprint each, 2 GiB).
pub const PACKET_MAX_FINGERPRINTS: u64 = 1 << 28;

/// Element size of the reduced vector (float32).
pub const ELEM_BYTES: u64 = 4;

/// Largest rank count of a timing plan (schedules have their own limit per variant: the
/// registry's `max_ranks`).
const MAX_RANKS: u32 = reducelab_sched::registry::MAX_RANKS;

/// Which simulator times the collective.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Backend {
    Packet,
    Flow,
    /// Packet below [`AUTO_FLOW_MIN_BYTES`], flow at or above.
    Auto,
}

impl Backend {
    pub const NAMES: &'static [&'static str] = &["packet", "flow", "auto"];

    pub fn parse(name: &str) -> Result<Backend, String> {
        match name {
            "packet" => Ok(Backend::Packet),
            "flow" => Ok(Backend::Flow),
            "auto" => Ok(Backend::Auto),
            _ => Err(format!("unknown backend '{name}' (known: {})", Backend::NAMES.join(", "))),
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Backend::Packet => "packet",
            Backend::Flow => "flow",
            Backend::Auto => "auto",
        }
    }

    /// The backend that actually runs a vector of `size_bytes` (`Auto` resolved).
    pub fn resolve(self, size_bytes: u64) -> Backend {
        match self {
            Backend::Auto if size_bytes >= AUTO_FLOW_MIN_BYTES => Backend::Flow,
            Backend::Auto => Backend::Packet,
            b => b,
        }
    }
}

impl fmt::Display for Backend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// The network a collective runs on.
#[derive(Clone, Debug, PartialEq)]
pub struct NetworkParams {
    /// Bandwidth of every network link, Gb/s (10⁹ bit/s).
    pub bandwidth_gbps: f64,
    /// Propagation latency of every link.
    pub latency_ns: f64,
    /// Pipeline latency of every forwarding node (router) a packet enters.
    pub hop_ns: f64,
    /// Largest packet on the wire, headers included.
    pub mtu_bytes: u32,
    pub header_bytes: u32,
    /// Ingress buffer per port and VC; `None` = [`NetworkParams::line_rate_buffer_bytes`].
    pub buffer_bytes: Option<u64>,
    /// Packet-level routing (the flow backend always uses fixed minimal paths).
    pub routing: RoutingAlgo,
}

impl NetworkParams {
    /// The Swing paper's network (§5) with links of `bandwidth_gbps`: 100 ns links, 300 ns per
    /// hop, 4 KiB packets with 64 B headers, minimal adaptive routing, line-rate buffers.
    pub fn swing_paper(bandwidth_gbps: f64) -> NetworkParams {
        NetworkParams {
            bandwidth_gbps,
            latency_ns: 100.0,
            hop_ns: 300.0,
            mtu_bytes: 4096,
            header_bytes: 64,
            buffer_bytes: None,
            routing: RoutingAlgo::Adaptive,
        }
    }

    pub fn validate(&self) -> Result<(), String> {
        if !self.bandwidth_gbps.is_finite() || self.bandwidth_gbps <= 0.0 || self.bandwidth_gbps > 1e6 {
            return Err(format!("bandwidth_gbps must be a number in (0, 1e6], got {}", self.bandwidth_gbps));
        }
        for (name, v) in [("latency_ns", self.latency_ns), ("hop_ns", self.hop_ns)] {
            if !v.is_finite() || !(0.0..=1e9).contains(&v) {
                return Err(format!("{name} must be a number in [0, 1e9], got {v}"));
            }
        }
        if !(64..=65536).contains(&self.mtu_bytes) || self.header_bytes >= self.mtu_bytes {
            return Err(format!("mtu_bytes must be in 64..=65536 and above header_bytes, got {} / {}", self.mtu_bytes, self.header_bytes));
        }
        if let Some(b) = self.buffer_bytes {
            if b < self.mtu_bytes as u64 {
                return Err(format!("buffer_bytes must hold at least one packet ({} B), got {b}", self.mtu_bytes));
            }
        }
        Ok(())
    }

    fn bandwidth_bps(&self) -> u64 {
        (self.bandwidth_gbps * 1e9).round() as u64
    }

    /// Credit loop of one hop: the packet is serialised, crosses the link, pays the router's
    /// pipeline latency, is serialised out again, and its credit crosses the link back.
    fn credit_loop_ps(&self) -> f64 {
        let ser = self.mtu_bytes as f64 * 8.0 / (self.bandwidth_gbps * 1e9) * 1e12;
        2.0 * self.latency_ns * 1e3 + self.hop_ns * 1e3 + 2.0 * ser
    }

    /// Buffer per port and VC that sustains line rate: twice the bandwidth-delay product of
    /// the credit loop, at least 256 KiB, rounded up to whole packets (256 KiB at ≤ 2 Tb/s with
    /// the paper's latencies; ≈ 410 KiB at 3.2 Tb/s, where 256 KiB would be only ~1.25× the
    /// loop).
    pub fn line_rate_buffer_bytes(&self) -> u64 {
        let bdp = self.credit_loop_ps() * 1e-12 * self.bandwidth_gbps * 1e9 / 8.0;
        let want = (2.0 * bdp).ceil() as u64;
        let mtu = self.mtu_bytes as u64;
        want.max(256 << 10).div_ceil(mtu) * mtu
    }

    /// The buffer the packet engine is given.
    pub fn buffer_bytes(&self) -> u64 {
        self.buffer_bytes.unwrap_or_else(|| self.line_rate_buffer_bytes())
    }

    fn net_config(&self) -> NetConfig {
        NetConfig {
            mtu_bytes: self.mtu_bytes,
            header_bytes: self.header_bytes,
            switch_latency_ps: (self.hop_ns * 1e3).round() as u64,
            buffer_bytes: self.buffer_bytes(),
            routing: self.routing,
            ..NetConfig::default()
        }
    }

    fn flow_config(&self) -> FlowConfig {
        FlowConfig { per_hop_ps: (self.hop_ns * 1e3).round() as u64, mtu_bytes: self.mtu_bytes, header_bytes: self.header_bytes }
    }

    fn link(&self) -> LinkParams {
        LinkParams { bandwidth_bps: self.bandwidth_bps(), latency_ps: (self.latency_ns * 1e3).round() as u64 }
    }
}

/// Outcome of one collective run.
#[derive(Clone, Debug, PartialEq)]
pub struct CollectiveOutcome {
    /// Canonical topology spec.
    pub topology: String,
    pub algorithm: String,
    pub ranks: u32,
    pub size_bytes: u64,
    /// The backend that ran it (`Auto` resolved).
    pub backend: Backend,
    pub runtime_ps: u64,
    /// `size_bytes · 8 / runtime`, Gb/s (the paper's goodput).
    pub goodput_gbps: f64,
    /// Packet level: every rank's result matched (`Some(true)`). Flow level: `None`.
    pub verified: Option<bool>,
    /// First data mismatch (packet level).
    pub mismatch: Option<String>,
    pub messages: u64,
    /// Buffer per port and VC the packet engine used.
    pub buffer_bytes: u64,
    /// Wall-clock time of the run (not part of any result file).
    pub wall_seconds: f64,
}

/// Process-wide caches of built schedules and timing plans, per (algorithm, topology).
type Cache<T> = Mutex<HashMap<(String, String), Arc<T>>>;

/// Most entries kept per cache; a cache is emptied when it would grow beyond this.
const CACHE_ENTRIES: usize = 64;

/// `build(layout)` for (`algorithm`, `spec`) from `cache`, after checking the algorithm name and
/// the rank count against `limit`.
fn cached<T>(cache: &Cache<T>, algorithm: &str, spec: &TopologySpec, limit: u32, what: &str, build: impl FnOnce(&Layout) -> Result<T, String>) -> Result<Arc<T>, String> {
    let key = (algorithm.to_string(), spec.spec());
    if let Some(b) = cache.lock().unwrap_or_else(|e| e.into_inner()).get(&key) {
        return Ok(b.clone());
    }
    reducelab_sched::registry::variant_entry(algorithm)?;
    let layout: Layout = spec.layout();
    let p = layout.ranks();
    if p > limit {
        return Err(format!("{p} ranks is more than the {limit} that '{algorithm}' {what} support"));
    }
    // Built outside the lock so that concurrent callers do not wait on each other.
    let b = Arc::new(build(&layout).map_err(|e| format!("{algorithm} on {}: {e}", spec.spec()))?);
    let mut c = cache.lock().unwrap_or_else(|e| e.into_inner());
    if c.len() >= CACHE_ENTRIES {
        c.clear();
    }
    c.insert(key, b.clone());
    Ok(b)
}

/// The allreduce schedule of `algorithm` for `spec`'s layout, from the process-wide cache.
/// Ring-like schedules grow as p², so they are limited to fewer ranks (the registry's `max_ranks`).
pub fn cached_schedule(algorithm: &str, spec: &TopologySpec) -> Result<Arc<Schedule>, String> {
    static CACHE: OnceLock<Cache<Schedule>> = OnceLock::new();
    let limit = reducelab_sched::registry::variant_entry(algorithm)?.max_ranks;
    cached(CACHE.get_or_init(Default::default), algorithm, spec, limit, "schedules (packet level)", |layout| {
        algos::build(algorithm, Collective::Allreduce, layout)
    })
}

/// The allreduce timing plan of `algorithm` for `spec`'s layout (flow backend), from the
/// process-wide cache. Built without materialising the schedule where that is large.
pub fn cached_plan(algorithm: &str, spec: &TopologySpec) -> Result<Arc<Plan>, String> {
    static CACHE: OnceLock<Cache<Plan>> = OnceLock::new();
    cached(CACHE.get_or_init(Default::default), algorithm, spec, MAX_RANKS, "timing plans", |layout| {
        reducelab_sched::plan::plan(algorithm, layout)
    })
}

/// Builds `spec` with every network link given by `params` (HammingMesh board links too).
pub fn build_topology(spec: &TopologySpec, params: &NetworkParams) -> Result<Topology, String> {
    let link = params.link();
    let r = match spec {
        TopologySpec::Torus(dims) => topo::torus(dims, link),
        TopologySpec::HyperX(dims) => topo::hyperx(dims, link),
        TopologySpec::HammingMesh { board, grid } => topo::hammingmesh(board.0, board.1, grid.0, grid.1, link, link),
    };
    r.map_err(|e| format!("topology '{}': {e}", spec.spec()))
}

fn goodput(size_bytes: u64, runtime_ps: u64) -> f64 {
    if runtime_ps == 0 {
        return f64::INFINITY;
    }
    size_bytes as f64 * 8.0 / (runtime_ps as f64 * 1e-12) / 1e9
}

fn run_one(
    spec: &TopologySpec,
    topo: &Topology,
    algorithm: &str,
    ranks: u32,
    sched: Option<&Schedule>,
    plan: Option<&Plan>,
    size_bytes: u64,
    backend: Backend,
    params: &NetworkParams,
    seed: u64,
) -> Result<CollectiveOutcome, String> {
    let t0 = Instant::now();
    let backend = backend.resolve(size_bytes);
    let mut out = CollectiveOutcome {
        topology: spec.spec(),
        algorithm: algorithm.to_string(),
        ranks,
        size_bytes,
        backend,
        runtime_ps: 0,
        goodput_gbps: 0.0,
        verified: None,
        mismatch: None,
        messages: 0,
        buffer_bytes: params.buffer_bytes(),
        wall_seconds: 0.0,
    };
    match backend {
        Backend::Packet => {
            let sched = sched.expect("schedule built for packet-level sizes");
            let mut net = Network::new(topo, params.net_config(), vec![], &Rng::new(seed))?;
            let hosts = (0..sched.ranks).collect();
            let mut w = CollectiveRun::new(topo, sched.clone(), hosts, size_bytes, ELEM_BYTES, 0, SimTime::ZERO, seed);
            let end = net.run(&mut w, None, &mut |_| {});
            let r = w.result();
            let Some(runtime) = r.runtime_ps() else {
                let why = match end {
                    RunEnd::Stalled { reason } => reason,
                    other => format!("{other:?}"),
                };
                return Err(format!(
                    "{} allreduce of {size_bytes} B on {} did not finish at packet level: {} ({why})",
                    sched.algorithm,
                    spec.spec(),
                    r.mismatch.unwrap_or_default()
                ));
            };
            out.runtime_ps = runtime;
            out.verified = Some(r.verified);
            out.mismatch = r.mismatch;
            out.messages = r.messages;
        }
        Backend::Flow => {
            let plan = plan.expect("plan built for flow-level sizes");
            let r = reducelab_flow::run_plan(topo, plan, size_bytes, ELEM_BYTES, &params.flow_config())?;
            out.runtime_ps = r.runtime_ps;
            out.messages = r.messages;
        }
        Backend::Auto => unreachable!("resolved above"),
    }
    out.goodput_gbps = goodput(size_bytes, out.runtime_ps);
    out.wall_seconds = t0.elapsed().as_secs_f64();
    Ok(out)
}

/// Runs one allreduce of `size_bytes` (4-byte elements) with `algorithm` on the topology
/// `topology_spec` (rank r on host r) and times it on `backend`. `seed` seeds the packet
/// engine (adaptive tie-breaks) and the data fingerprints.
pub fn run_collective(
    topology_spec: &str,
    algorithm: &str,
    size_bytes: u64,
    backend: Backend,
    params: &NetworkParams,
    seed: u64,
) -> Result<CollectiveOutcome, String> {
    let mut v = run_collective_sizes(topology_spec, algorithm, &[size_bytes], backend, params, seed, 1)?;
    Ok(v.pop().expect("one size"))
}

/// [`run_collective`] for several sizes: the schedule (or plan) and topology are built once,
/// and the sizes run on up to `threads` threads (the results are the same for any count).
pub fn run_collective_sizes(
    topology_spec: &str,
    algorithm: &str,
    sizes: &[u64],
    backend: Backend,
    params: &NetworkParams,
    seed: u64,
    threads: usize,
) -> Result<Vec<CollectiveOutcome>, String> {
    params.validate()?;
    if let Some(&s) = sizes.iter().find(|&&s| s == 0) {
        return Err(format!("size_bytes must be at least 1, got {s}"));
    }
    let spec = TopologySpec::parse(topology_spec)?;
    let topo = build_topology(&spec, params)?;
    let backend = match backend {
        Backend::Auto if flow_reason(&topo, &*cached_plan(algorithm, &spec)?, params)?.is_some() => Backend::Flow,
        b => b,
    };
    let needs = |b: Backend| sizes.iter().any(|&s| backend.resolve(s) == b);
    let sched = if needs(Backend::Packet) { Some(cached_schedule(algorithm, &spec)?) } else { None };
    let plan = if needs(Backend::Flow) { Some(cached_plan(algorithm, &spec)?) } else { None };
    let ranks = spec.layout().ranks();
    if (ranks as usize) != topo.hosts.len() {
        return Err(format!("{algorithm}: schedule has {ranks} ranks but {} has {} hosts", spec.spec(), topo.hosts.len()));
    }
    let one = |s: u64| run_one(&spec, &topo, algorithm, ranks, sched.as_deref(), plan.as_deref(), s, backend, params, seed);
    let threads = threads.clamp(1, sizes.len().max(1));
    if threads == 1 {
        return sizes.iter().map(|&s| one(s)).collect();
    }
    // Sizes are independent runs on shared, read-only inputs: `threads` workers take the next
    // size from a shared counter (largest first, so the long runs do not end up last) and the
    // outcomes go back in the callers' order (same results as one thread).
    let mut order: Vec<usize> = (0..sizes.len()).collect();
    order.sort_by_key(|&i| std::cmp::Reverse(sizes[i]));
    let next = std::sync::atomic::AtomicUsize::new(0);
    let mut slots: Vec<Option<Result<CollectiveOutcome, String>>> = (0..sizes.len()).map(|_| None).collect();
    std::thread::scope(|scope| {
        let workers: Vec<_> = (0..threads)
            .map(|_| {
                let (one, next, order) = (&one, &next, &order);
                scope.spawn(move || {
                    let mut done = Vec::new();
                    loop {
                        let k = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        let Some(&i) = order.get(k) else { return done };
                        done.push((i, one(sizes[i])));
                    }
                })
            })
            .collect();
        for w in workers {
            for (i, r) in w.join().expect("a size worker panicked") {
                slots[i] = Some(r);
            }
        }
    });
    slots.into_iter().map(|r| r.expect("every size ran")).collect()
}

/// Why `auto` runs `algorithm` on `topology_spec` at flow level at every size, if it does
/// (see the module docs): the plan is contention-free, or a packet-level data check would be
/// too large.
pub fn auto_flow_reason(topology_spec: &str, algorithm: &str, params: &NetworkParams) -> Result<Option<String>, String> {
    let spec = TopologySpec::parse(topology_spec)?;
    flow_reason(&build_topology(&spec, params)?, &*cached_plan(algorithm, &spec)?, params)
}

fn flow_reason(topo: &Topology, plan: &Plan, params: &NetworkParams) -> Result<Option<String>, String> {
    if reducelab_flow::is_contention_free(topo, plan, &params.flow_config())? {
        return Ok(Some("contention-free: one flow per link at a time, flow level equals packet level".into()));
    }
    let pairs = plan.ranks as u64 * plan.blocks as u64;
    if pairs > PACKET_MAX_FINGERPRINTS {
        return Ok(Some(format!(
            "packet level would check {pairs} (rank, block) fingerprints (more than {PACKET_MAX_FINGERPRINTS})"
        )));
    }
    Ok(None)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn auto_switches_to_flow_at_8_mib() {
        assert_eq!(Backend::Auto.resolve((8 << 20) - 1), Backend::Packet);
        assert_eq!(Backend::Auto.resolve(8 << 20), Backend::Flow);
        assert_eq!(Backend::Packet.resolve(1 << 30), Backend::Packet);
        assert!(Backend::parse("fluid").unwrap_err().contains("packet, flow, auto"));
    }

    #[test]
    fn auto_runs_contention_free_plans_at_flow_level() {
        let p = NetworkParams::swing_paper(400.0);
        assert!(auto_flow_reason("torus:8x8", "bucket", &p).unwrap().unwrap().contains("contention-free"));
        assert!(auto_flow_reason("torus:8x8", "swing-bandwidth", &p).unwrap().is_none());
        let pb = run_collective("torus:4x4", "bucket", 1024, Backend::Auto, &p, 1).unwrap();
        assert_eq!(pb.backend, Backend::Flow);
        let pk = run_collective("torus:4x4", "bucket", 1024, Backend::Packet, &p, 1).unwrap();
        assert_eq!(pk.verified, Some(true));
        assert_eq!(pb.runtime_ps, pk.runtime_ps, "the recurrence equals packet level on one-hop uncontended steps");
    }

    #[test]
    fn threads_give_the_same_outcomes() {
        let p = NetworkParams::swing_paper(400.0);
        let sizes = [32u64, 4096, 1 << 16, 1 << 20, 8 << 20];
        let one = run_collective_sizes("torus:4x4", "swing-latency", &sizes, Backend::Auto, &p, 1, 1).unwrap();
        let two = run_collective_sizes("torus:4x4", "swing-latency", &sizes, Backend::Auto, &p, 1, 2).unwrap();
        let strip = |v: Vec<CollectiveOutcome>| v.into_iter().map(|o| CollectiveOutcome { wall_seconds: 0.0, ..o }).collect::<Vec<_>>();
        assert_eq!(strip(one), strip(two));
    }

    #[test]
    fn line_rate_buffers() {
        assert_eq!(NetworkParams::swing_paper(400.0).buffer_bytes(), 256 << 10);
        let b = NetworkParams::swing_paper(3200.0).buffer_bytes();
        // Credit loop ≈ 500 ns + 2 packets: 2 × 3.2 Tb/s × 520 ns ≈ 416 kB.
        assert!(b > 400_000 && b < 430_000, "{b}");
    }

    #[test]
    fn packet_run_verifies_and_flow_agrees_at_8_mib() {
        let p = NetworkParams::swing_paper(400.0);
        let pk = run_collective("torus:8x8", "swing-bandwidth", 1 << 16, Backend::Auto, &p, 1).unwrap();
        assert_eq!(pk.backend, Backend::Packet);
        assert_eq!(pk.verified, Some(true));
        assert!((pk.goodput_gbps - (1u64 << 16) as f64 * 8.0 / (pk.runtime_ps as f64 * 1e-3)).abs() < 1e-9);
        let both: Vec<_> = [Backend::Packet, Backend::Flow]
            .iter()
            .map(|&b| run_collective("torus:4x4", "bucket", 8 << 20, b, &p, 1).unwrap().runtime_ps as f64)
            .collect();
        assert!((both[1] / both[0] - 1.0).abs() < 0.05, "{both:?}");
    }

    #[test]
    fn errors_name_the_problem() {
        let p = NetworkParams::swing_paper(400.0);
        assert!(run_collective("torus:4x4", "nope", 64, Backend::Auto, &p, 1).unwrap_err().contains("unknown algorithm 'nope'"));
        assert!(run_collective("ring:4", "ring", 64, Backend::Auto, &p, 1).unwrap_err().contains("unknown kind"));
        assert!(run_collective("torus:4x4", "ring", 0, Backend::Auto, &p, 1).unwrap_err().contains("at least 1"));
        let bad = NetworkParams { bandwidth_gbps: 0.0, ..p };
        assert!(run_collective("torus:4x4", "ring", 64, Backend::Auto, &bad, 1).unwrap_err().contains("bandwidth_gbps"));
    }
}
