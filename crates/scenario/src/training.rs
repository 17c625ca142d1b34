//! A `training` traffic entry (seed 001, §VII-B's jobs on the shared switch memory) resolved
//! into a [`TrainingSpec`], and laid out on the topology ([`layout`]).

use reducelab_ina::pool::{self, PoolLayout};
use reducelab_ina::pool_jobs::{JobSpec, PoolProtocol, TrainingLayout, TrainingSpec, ELEMS_PER_PACKET, PACKET_BYTES};
use reducelab_ina::switchml::even_regions;
use reducelab_ina::training;
use reducelab_topo::Topology;

/// Lays a training entry out on `topo` ([`TrainingSpec::layout`]): the scenario's validation
/// and the first step of the simulator's world. Errors start with the field they are about.
pub fn layout(topo: &Topology, spec: &TrainingSpec, seed: u64) -> Result<TrainingLayout, String> {
    if topo.nodes.iter().any(|n| n.host.is_some() && n.forwards) {
        return Err(format!(
            "topology: training jobs aggregate on switches; the hosts of {} forward traffic",
            topo.name
        ));
    }
    spec.layout(&crate::ina::fabric_of(topo), seed)
}

/// Keys of a `training` traffic entry (docs/scenario-format.md).
pub const KEYS: &[&str] = &[
    "protocol",
    "preemption",
    "jobs",
    "workers",
    "models",
    "switch_memory_bytes",
    "start_max_us",
    "jitter_max_us",
    "window_bytes",
    "min_rto_us",
    "ps_restart_us",
    "values",
    "model_scale",
    "aggregation",
];

/// Validates a `training` traffic entry at `f` (`traffic[i]`). Placement (§VII-B: "no
/// overlapping usage of servers among different jobs, and each server contains at most one
/// worker"): job `j`'s workers are hosts `j·workers ..`, its parameter server host
/// `jobs·workers + j`.
pub fn resolve(f: &str, t: &crate::TrafficSpec, topo: &Topology) -> Result<TrainingSpec, crate::ScenarioError> {
    use crate::{ns_to_ps, pos_f64};
    let err = |field: &str, reason: String| crate::ScenarioError { field: format!("{f}.{field}"), reason };
    let name = t.protocol.as_deref().unwrap_or("dsa");
    let Some(info) = pool::pool_protocol(name) else {
        let names: Vec<String> = pool::POOL_PROTOCOLS.iter().map(|p| format!("\"{}\"", p.name)).collect();
        return Err(err(
            "protocol",
            format!("must be one of {} for kind = \"training\", got \"{name}\"", names.join(", ")),
        ));
    };
    // The protocol's own keys, parsed by its registry entry.
    let params = pool::PoolParams { preemption: t.preemption.as_deref() };
    for key in params.set_keys() {
        if !info.keys.contains(&key) {
            let takes: Vec<&str> =
                pool::POOL_PROTOCOLS.iter().filter(|p| p.keys.contains(&key)).map(|p| p.name).collect();
            return Err(err(key, format!("is not used by protocol = \"{}\" ({} only)", info.name, takes.join(", "))));
        }
    }
    let protocol = (info.build)(&params).map_err(|e| err(&e.key, e.reason))?;
    let jobs = t.jobs.unwrap_or(1);
    if jobs == 0 || jobs > 4096 {
        return Err(err("jobs", format!("must be within 1..=4096, got {jobs}")));
    }
    let workers = t.workers.unwrap_or(8);
    if !(1..=64).contains(&workers) {
        return Err(err(
            "workers",
            format!("must be within 1..=64 (the aggregator bitmap has 64 bits), got {workers}"),
        ));
    }
    let names = t.models.clone().unwrap_or_else(|| vec!["A".into()]);
    if names.is_empty() {
        return Err(err("models", "must name at least one model (\"A\" or \"B\")".into()));
    }
    let mut models = Vec::new();
    for (k, m) in names.iter().enumerate() {
        models.push(training::dnn_model(m).ok_or_else(|| {
            err(&format!("models[{k}]"), format!("must be \"A\" or \"B\" (seed 001 §VII-B), got \"{m}\""))
        })?);
    }
    if let Some(x) = t.model_scale {
        if !(x.is_finite() && x > 0.0 && x <= 1.0) {
            return Err(err("model_scale", format!("must be within (0, 1], got {x}")));
        }
        // Smaller runs of the same shape: partition size and computation time shrink together,
        // so the models keep their communication-to-computation ratios.
        for m in &mut models {
            m.partition_bytes = ((m.partition_bytes as f64 * x).round() as u64).max(ELEMS_PER_PACKET as u64 * 4);
            m.compute_ps_per_layer = (m.compute_ps_per_layer as f64 * x).round() as u64;
        }
    }
    let n = topo.num_hosts() as u64;
    let need = jobs as u64 * workers as u64 + if protocol.uses_ps() { jobs as u64 } else { 0 };
    if need > n {
        return Err(err(
            "jobs",
            format!(
                "{jobs} jobs of {workers} workers{} need {need} hosts; the topology has {n}",
                if protocol.uses_ps() { " and a parameter server each" } else { "" }
            ),
        ));
    }
    let us = |key: &str, v: Option<f64>, default: f64| -> Result<u64, crate::ScenarioError> {
        ns_to_ps(&format!("{f}.{key}"), v.unwrap_or(default) * 1000.0)
    };
    let min_rto_ps = us("min_rto_us", t.min_rto_us, 1000.0)?;
    if let Some(v) = t.min_rto_us {
        pos_f64(&format!("{f}.min_rto_us"), v)?;
    }
    let window_bytes = t.window_bytes.unwrap_or(60_000);
    if window_bytes < PACKET_BYTES as u64 || window_bytes > 1 << 32 {
        return Err(err(
            "window_bytes",
            format!(
                "must be within {PACKET_BYTES}..=4294967296 (at least one {PACKET_BYTES} B packet), got {window_bytes}"
            ),
        ));
    }
    let tree = match (t.aggregation.as_deref(), protocol) {
        (None | Some("root"), _) => false,
        (Some("tree"), _) => true,
        (Some(other), _) => return Err(err("aggregation", format!("must be \"root\" or \"tree\", got \"{other}\""))),
    };
    let spec = TrainingSpec {
        tree,
        protocol,
        jobs: (0..jobs)
            .map(|j| JobSpec {
                model: models[j as usize % models.len()],
                workers: (j * workers..(j + 1) * workers).collect(),
                ps: protocol.uses_ps().then_some(jobs * workers + j),
            })
            .collect(),
        memory_bytes: t.switch_memory_bytes.unwrap_or(PoolLayout::DSA_SIMULATION.memory_bytes),
        values: t.values.unwrap_or(false),
        start_max_ps: us("start_max_us", t.start_max_us, 1000.0)?,
        jitter_max_ps: us("jitter_max_us", t.jitter_max_us, 300.0)?,
        window_bytes,
        min_rto_ps,
        ps_restart_ps: match t.ps_restart_us {
            None => None,
            Some(_) if !protocol.uses_ps() => {
                return Err(err("ps_restart_us", format!("protocol = \"{}\" has no parameter server", info.name)))
            }
            Some(v) => Some(ns_to_ps(&format!("{f}.ps_restart_us"), v * 1000.0)?),
        },
    };
    spec.aggregators().map_err(|r| match r.split_once(": ") {
        Some((k, why)) => err(k, why.to_string()),
        None => err("switch_memory_bytes", r),
    })?;
    if protocol == PoolProtocol::SwitchMl {
        even_regions(spec.aggregators().unwrap_or(1), &[(0, 1)].repeat(jobs as usize))
            .map_err(|r| err("switch_memory_bytes", r))?;
    }
    Ok(spec)
}
