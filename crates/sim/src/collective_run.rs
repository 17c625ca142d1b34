//! One allreduce on a whole topology, timed at packet or flow level, with the network of the
//! Swing paper's evaluation (NSDI'24 §5) — a front end of the scenario path.
//!
//! [`run_collective`] takes the Swing network scenario (`scenarios/swing/network.toml`,
//! embedded), sets its topology shape (`torus:8x8`, `hyperx:16x16`, `hammingmesh:2x2,32x32`;
//! parsed by [`reducelab_sched::TopologyShape`]), algorithm, size, backend, seed and any link or
//! buffer override, and runs it like any scenario ([`crate::run_scenario`]): the backends, the
//! `auto` rule and the validation are the scenario's (docs/scenario-format.md, "Backends").
//!
//! Built schedules and timing plans are cached per (algorithm, layout) in small process-wide
//! caches ([`cached_schedule`], [`cached_plan`]), which every scenario uses, so a sweep over
//! sizes builds a schedule once.

use crate::scenario::{BufferSpec, ScenarioFile, Traffic, TrafficSpec};
use crate::{run_scenario, RunOptions};
use reducelab_sched::TopologyShape;
use std::time::Instant;

pub use crate::scenario::{Backend, AUTO_FLOW_MIN_BYTES, PACKET_MAX_FINGERPRINTS};
pub use reducelab_scenario::schedule_cache::{cached_plan, cached_schedule};

/// Element size of the reduced vector (float32).
pub const ELEM_BYTES: u64 = 4;

/// The Swing paper's network (§5) as a scenario: the base of every run of this module.
pub const SWING_NETWORK: &str = include_str!("../../../scenarios/swing/network.toml");

/// Values of the Swing network scenario a run replaces; `None` keeps the file's (400 Gb/s
/// links of 100 ns, 300 ns per hop, line-rate buffers).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct NetworkOverrides {
    /// `topology.bandwidth_gbps`.
    pub bandwidth_gbps: Option<f64>,
    /// `topology.latency_ns`.
    pub latency_ns: Option<f64>,
    /// `network.switch_latency_ns`: pipeline latency of every forwarding node.
    pub switch_latency_ns: Option<f64>,
    /// `network.buffer_bytes` (per port and VC).
    pub buffer_bytes: Option<u64>,
}

/// Outcome of one collective run.
#[derive(Clone, Debug, PartialEq)]
pub struct CollectiveOutcome {
    /// Canonical topology spec.
    pub topology: String,
    /// The variant that ran.
    pub algorithm: String,
    pub ranks: u32,
    pub size_bytes: u64,
    /// The backend that ran it (`Auto` resolved).
    pub backend: Backend,
    /// Why (summary.json's `backend_reason`).
    pub backend_reason: String,
    pub runtime_ps: u64,
    /// `size_bytes · 8 / runtime`, Gb/s (the paper's goodput).
    pub goodput_gbps: f64,
    /// Packet level: every rank's result matched (`Some(true)`). Flow level: `None`.
    pub verified: Option<bool>,
    /// First data mismatch (packet level).
    pub mismatch: Option<String>,
    pub messages: u64,
    /// Buffer per port and VC of the network.
    pub buffer_bytes: u64,
    /// Wall-clock time of the run (not part of any result file).
    pub wall_seconds: f64,
}

/// The Swing network scenario with `topology_spec`, `algorithm`, `size_bytes`, `backend`,
/// `seed` and `net` set (not yet validated: [`ScenarioFile::resolve`] does that).
pub fn swing_scenario(
    topology_spec: &str,
    algorithm: &str,
    size_bytes: u64,
    backend: Backend,
    net: &NetworkOverrides,
    seed: u64,
) -> ScenarioFile {
    let mut f = crate::scenario::parse(SWING_NETWORK).expect("scenarios/swing/network.toml parses");
    f.seed = seed;
    let topology = f.topology.get_or_insert_with(Default::default);
    topology.shape = Some(topology_spec.to_string());
    topology.bandwidth_gbps = net.bandwidth_gbps.or(topology.bandwidth_gbps);
    topology.latency_ns = net.latency_ns.or(topology.latency_ns);
    if let Some(h) = net.switch_latency_ns {
        f.network.switch_latency_ns = h;
    }
    if let Some(b) = net.buffer_bytes {
        f.network.buffer_bytes = BufferSpec::Bytes(b);
    }
    let TrafficSpec::Collective(t) = &mut f.traffic[0] else {
        unreachable!("the Swing network's traffic is a collective")
    };
    t.algorithm = Some(algorithm.to_string());
    t.bytes = Some(size_bytes);
    f.run.backend = Some(backend);
    f
}

/// Runs one allreduce of `size_bytes` (4-byte elements) with `algorithm` on the topology
/// `topology_spec` (rank r on host r) and times it on `backend`, through the scenario path
/// ([`swing_scenario`]). `seed` seeds the packet engine (adaptive tie-breaks) and the data
/// fingerprints. Errors name the scenario field (`topology.shape: ...`, `traffic[0].bytes: ...`).
pub fn run_collective(
    topology_spec: &str,
    algorithm: &str,
    size_bytes: u64,
    backend: Backend,
    net: &NetworkOverrides,
    seed: u64,
) -> Result<CollectiveOutcome, String> {
    let t0 = Instant::now();
    let sc =
        swing_scenario(topology_spec, algorithm, size_bytes, backend, net, seed).resolve(None).map_err(legacy_error)?;
    let Some(Traffic::Collective { algorithm: variant, hosts, .. }) = sc.traffic.first() else {
        unreachable!("the Swing network's traffic is one collective")
    };
    let (variant, ranks) = (variant.to_string(), hosts.len() as u32);
    let (backend, backend_reason, buffer_bytes) = (sc.backend, sc.backend_reason.clone(), sc.net.buffer_bytes);
    let out = run_scenario(sc, &RunOptions::default()).map_err(legacy_error)?;
    let summary: serde_json::Value = serde_json::from_str(&out.summary_json).expect("own json");
    let t = &summary["traffic"][0];
    let canonical = TopologyShape::parse(topology_spec).map(|s| s.spec()).unwrap_or_else(|_| topology_spec.to_string());
    let Some(runtime_ps) = t["runtime_ps"].as_u64() else {
        return Err(format!(
            "{variant} allreduce of {size_bytes} B on {canonical} did not finish at packet level: {} ({})",
            t["mismatch"].as_str().unwrap_or_default(),
            summary["status_reason"].as_str().unwrap_or_default()
        ));
    };
    Ok(CollectiveOutcome {
        topology: canonical,
        algorithm: variant,
        ranks,
        size_bytes,
        backend,
        backend_reason,
        runtime_ps,
        goodput_gbps: goodput(size_bytes, runtime_ps),
        verified: t["verified"].as_bool(),
        mismatch: t["mismatch"].as_str().map(str::to_string),
        messages: t["messages"].as_u64().unwrap_or(0),
        buffer_bytes,
        wall_seconds: t0.elapsed().as_secs_f64(),
    })
}

/// A scenario error as this module's callers have always seen it: `field: reason`, except that
/// an algorithm that cannot run gives the reason alone (`hamiltonian-rings on torus:4x4x4:
/// ...`), the text the reproductions' reports quote.
fn legacy_error(e: crate::ScenarioError) -> String {
    if e.field == "traffic[0].algorithm" {
        return e.reason;
    }
    e.to_string()
}

fn goodput(size_bytes: u64, runtime_ps: u64) -> f64 {
    if runtime_ps == 0 {
        return f64::INFINITY;
    }
    size_bytes as f64 * 8.0 / (runtime_ps as f64 * 1e-12) / 1e9
}

/// [`run_collective`] for several sizes on up to `threads` threads (the results are the same
/// for any count); the schedule or plan is built once (process-wide caches).
pub fn run_collective_sizes(
    topology_spec: &str,
    algorithm: &str,
    sizes: &[u64],
    backend: Backend,
    net: &NetworkOverrides,
    seed: u64,
    threads: usize,
) -> Result<Vec<CollectiveOutcome>, String> {
    let one = |s: u64| run_collective(topology_spec, algorithm, s, backend, net, seed);
    let threads = threads.clamp(1, sizes.len().max(1));
    if threads == 1 {
        return sizes.iter().map(|&s| one(s)).collect();
    }
    // Sizes are independent runs: `threads` workers take the next size from a shared counter
    // (largest first, so the long runs do not end up last) and the outcomes go back in the
    // callers' order (same results as one thread).
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
/// (a contention-free plan, or a packet-level data check too large): the scenario's
/// `backend_reason` for a 1-byte allreduce, without its `auto: ` prefix.
pub fn auto_flow_reason(
    topology_spec: &str,
    algorithm: &str,
    net: &NetworkOverrides,
) -> Result<Option<String>, String> {
    let sc = swing_scenario(topology_spec, algorithm, 1, Backend::Auto, net, 1).resolve(None).map_err(legacy_error)?;
    Ok((sc.backend == Backend::Flow).then(|| sc.backend_reason.trim_start_matches("auto: ").to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn swing() -> NetworkOverrides {
        NetworkOverrides::default()
    }

    #[test]
    fn auto_runs_contention_free_plans_at_flow_level() {
        let p = swing();
        assert!(auto_flow_reason("torus:8x8", "bucket", &p).unwrap().unwrap().contains("contention-free"));
        assert!(auto_flow_reason("torus:8x8", "swing-bandwidth", &p).unwrap().is_none());
        let pb = run_collective("torus:4x4", "bucket", 1024, Backend::Auto, &p, 1).unwrap();
        assert_eq!(pb.backend, Backend::Flow);
        assert!(pb.backend_reason.starts_with("auto: contention-free"), "{}", pb.backend_reason);
        let pk = run_collective("torus:4x4", "bucket", 1024, Backend::Packet, &p, 1).unwrap();
        assert_eq!(pk.verified, Some(true));
        assert_eq!(pk.backend_reason, "set by run.backend");
        assert_eq!(pb.runtime_ps, pk.runtime_ps, "the recurrence equals packet level on one-hop uncontended steps");
    }

    #[test]
    fn auto_switches_to_flow_at_flow_min_bytes() {
        let p = swing();
        let below = run_collective("torus:8x8", "swing-latency", (8 << 20) - 4, Backend::Auto, &p, 1).unwrap();
        assert_eq!(
            (below.backend, below.backend_reason.as_str()),
            (Backend::Packet, "auto: below flow_min_bytes (8388604 B < 8388608 B)")
        );
        let at = run_collective("torus:8x8", "swing-latency", 8 << 20, Backend::Auto, &p, 1).unwrap();
        assert_eq!(at.backend, Backend::Flow);
        assert_eq!(at.verified, None);
    }

    #[test]
    fn threads_give_the_same_outcomes() {
        let p = swing();
        let sizes = [32u64, 4096, 1 << 16, 1 << 20, 8 << 20];
        let one = run_collective_sizes("torus:4x4", "swing-latency", &sizes, Backend::Auto, &p, 1, 1).unwrap();
        let two = run_collective_sizes("torus:4x4", "swing-latency", &sizes, Backend::Auto, &p, 1, 2).unwrap();
        let strip = |v: Vec<CollectiveOutcome>| {
            v.into_iter().map(|o| CollectiveOutcome { wall_seconds: 0.0, ..o }).collect::<Vec<_>>()
        };
        assert_eq!(strip(one), strip(two));
    }

    #[test]
    fn line_rate_buffers() {
        let b = |bw: f64| {
            run_collective(
                "torus:2x2",
                "ring",
                64,
                Backend::Flow,
                &NetworkOverrides { bandwidth_gbps: Some(bw), ..swing() },
                1,
            )
            .unwrap()
            .buffer_bytes
        };
        assert_eq!(b(400.0), 256 << 10);
        // Credit loop ≈ 500 ns + 2 packets: 2 × 3.2 Tb/s × 520 ns ≈ 416 kB.
        assert!(b(3200.0) > 400_000 && b(3200.0) < 430_000, "{}", b(3200.0));
    }

    #[test]
    fn packet_run_verifies_and_flow_agrees_at_8_mib() {
        let p = swing();
        let pk = run_collective("torus:8x8", "swing-bandwidth", 1 << 16, Backend::Packet, &p, 1).unwrap();
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
    fn errors_name_the_field() {
        let p = swing();
        let err =
            |t: &str, a: &str, s: u64, p: &NetworkOverrides| run_collective(t, a, s, Backend::Auto, p, 1).unwrap_err();
        assert!(
            err("torus:4x4", "nope", 64, &p).starts_with("unknown algorithm 'nope'"),
            "{}",
            err("torus:4x4", "nope", 64, &p)
        );
        assert!(err("torus:4x4x4", "hamiltonian-rings", 64, &p)
            .starts_with("hamiltonian-rings on torus:4x4x4: hamiltonian-rings needs a 2D torus"));
        assert!(err("ring:4", "ring", 64, &p).starts_with("topology.shape: topology 'ring:4': unknown kind"));
        assert!(
            err("torus:4x4", "ring", 0, &p).starts_with("traffic[0].bytes:"),
            "{}",
            err("torus:4x4", "ring", 0, &p)
        );
        let bad = NetworkOverrides { bandwidth_gbps: Some(0.0), ..p };
        assert!(err("torus:4x4", "ring", 64, &bad).starts_with("topology.bandwidth_gbps:"));
    }
}
