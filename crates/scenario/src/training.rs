//! A `training` traffic entry (seed 001, §VII-B's jobs on the shared switch memory) resolved
//! into a [`TrainingSpec`], and laid out on the topology ([`layout`]).

use reducelab_ina::pool::{self, PoolLayout};
use reducelab_ina::pool_jobs::{
    epoch_plans, JobSpec, PoolProtocol, TrainingLayout, TrainingSpec, ELEMS_PER_PACKET, PACKET_BYTES,
};
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

/// Elements per packet of a training entry's in-network allreduces: the shared-pool protocols'
/// payload ([`ELEMS_PER_PACKET`], ATP's 62 values), so that every protocol carries a partition in
/// the same packets.
pub const INA_ELEMS_PER_PACKET: u16 = ELEMS_PER_PACKET;

/// Resolves a `training` traffic entry at `f` (`traffic[i]`): on a shared-pool protocol
/// ([`resolve_pool`]) or on an in-network allreduce protocol of the registry
/// ([`resolve_on_ina`]). Keys of the other family are refused with the reason.
pub fn resolve(f: &str, t: &crate::TrainingEntry, topo: &Topology) -> Result<crate::Traffic, crate::ScenarioError> {
    let err = |field: &str, reason: String| crate::ScenarioError { field: format!("{f}.{field}"), reason };
    let name = t.protocol.as_deref().unwrap_or("dsa");
    // The keys only the shared-pool protocols (SwitchML, ATP, DSA) take.
    let pool_keys = [
        ("preemption", t.preemption.is_some()),
        ("window_bytes", t.window_bytes.is_some()),
        ("min_rto_us", t.min_rto_us.is_some()),
        ("ps_restart_us", t.ps_restart_us.is_some()),
        ("aggregation", t.aggregation.is_some()),
    ];
    // A shared-pool protocol's own training jobs first (SwitchML is also a registry entry, the
    // same switch program serving allreduces).
    let pool = pool::pool_protocol(name).is_some();
    if let Some(info) = reducelab_ina::protocol(name).filter(|_| !pool) {
        if let Some((k, _)) = pool_keys.iter().find(|(_, set)| *set) {
            return Err(err(
                k,
                format!("is a key of the shared-pool protocols (switchml, atp, dsa), not of protocol = \"{name}\" (its switches' resources are in [ina])"),
            ));
        }
        return resolve_on_ina(f, t, topo, info);
    }
    if pool {
        let ina_key = t.params.keys().map(String::as_str).chain(t.roots.as_ref().map(|_| "roots")).next();
        if let Some(k) = ina_key {
            return Err(err(
                k,
                format!("is a key of the in-network allreduce protocols, not of protocol = \"{name}\""),
            ));
        }
    }
    resolve_pool(f, t, topo).map(crate::Traffic::Training)
}

/// The jobs' models of a training entry (`models`, cycled over the jobs; `model_scale`).
fn models_of(f: &str, t: &crate::TrainingEntry) -> Result<Vec<training::DnnModel>, crate::ScenarioError> {
    let err = |field: &str, reason: String| crate::ScenarioError { field: format!("{f}.{field}"), reason };
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
    Ok(models)
}

/// A training entry on an in-network allreduce protocol: job `j`'s workers are hosts
/// `j·workers ..` (no parameter server), its partitions (in send order) are allreduces of
/// its workers of [`INA_ELEMS_PER_PACKET`] values per packet, each worker joining one when the
/// partition is ready on it ([`epoch_plans`], the same draws as a shared-pool run of the same
/// seed). The protocol's keys are an `ina_allreduce` entry's; `[ina]` holds the switches'.
fn resolve_on_ina(
    f: &str,
    t: &crate::TrainingEntry,
    topo: &Topology,
    info: &'static reducelab_ina::ProtocolInfo,
) -> Result<crate::Traffic, crate::ScenarioError> {
    use crate::ns_to_ps;
    let err = |field: &str, reason: String| crate::ScenarioError { field: format!("{f}.{field}"), reason };
    let protocol = crate::traffic::ina_protocol(f, &t.params, &t.roots, topo, info)?;
    let jobs = t.jobs.unwrap_or(1);
    if jobs == 0 || jobs > 4096 {
        return Err(err("jobs", format!("must be within 1..=4096, got {jobs}")));
    }
    let workers = t.workers.unwrap_or(8);
    if !(1..=u16::MAX as u32).contains(&workers) {
        return Err(err("workers", format!("must be within 1..=65535, got {workers}")));
    }
    let models = models_of(f, t)?;
    let n = topo.num_hosts() as u64;
    if jobs as u64 * workers as u64 > n {
        return Err(err(
            "jobs",
            format!(
                "{jobs} jobs of {workers} workers need {} hosts; the topology has {n}",
                jobs as u64 * workers as u64
            ),
        ));
    }
    let us = |key: &str, v: Option<f64>, default: f64| -> Result<u64, crate::ScenarioError> {
        ns_to_ps(&format!("{f}.{key}"), v.unwrap_or(default) * 1000.0)
    };
    let start_max_ps = us("start_max_us", t.start_max_us, 1000.0)?;
    let jitter_max_ps = us("jitter_max_us", t.jitter_max_us, 300.0)?;
    let job_models: Vec<training::DnnModel> = (0..jobs).map(|j| models[j as usize % models.len()]).collect();
    let values = t.values.unwrap_or(false);
    let mut out = crate::ina::InaTraining {
        protocol: protocol.clone(),
        jobs: Vec::new(),
        specs: Vec::new(),
        start_max_ps,
        jitter_max_ps,
    };
    for (j, model) in job_models.iter().enumerate() {
        let hosts: Vec<u32> = (j as u32 * workers..(j as u32 + 1) * workers).collect();
        let first = out.specs.len();
        for _ in model.send_order() {
            out.specs.push(crate::ina::InaSpec {
                hosts: hosts.clone(),
                bytes: model.partition_bytes,
                start: reducelab_des::SimTime(0),
                // One instance per allreduce, as one per `ina_allreduce` entry (a protocol may
                // keep per-collective state, e.g. the sparse ones' data model).
                protocol: crate::traffic::ina_protocol(f, &t.params, &t.roots, topo, info)?,
                elems_per_packet: INA_ELEMS_PER_PACKET,
                values,
                roots: t.roots.clone().unwrap_or_default(),
                rank_start: Vec::new(),
                trace_driven: false,
            });
        }
        out.jobs.push(crate::ina::InaTrainingJob {
            model: *model,
            workers: hosts,
            start_ps: 0,
            specs: first..out.specs.len(),
        });
    }
    Ok(crate::Traffic::InaTraining(out))
}

/// Draws a training entry's start times and jitters from the scenario's `seed` (known once
/// every entry is read) into its in-network allreduces: each rank joins a partition's allreduce
/// when the partition is ready on it, the earliest of those is the allreduce's start. The same
/// draws as a shared-pool run of the same seed ([`epoch_plans`]).
pub fn time_ina_training(t: &mut crate::ina::InaTraining, seed: u64) {
    let epochs = epoch_plans(t.jobs.iter().map(|j| (j.model, j.workers.len())), t.start_max_ps, t.jitter_max_ps, seed);
    for (job, (start_ps, plans)) in t.jobs.iter_mut().zip(epochs) {
        job.start_ps = start_ps;
        for (k, spec) in t.specs[job.specs.clone()].iter_mut().enumerate() {
            spec.rank_start = plans.iter().map(|p| reducelab_des::SimTime(p[k].ready_ps)).collect();
            spec.start = spec.rank_start.iter().copied().min().unwrap_or(reducelab_des::SimTime(start_ps));
        }
    }
}

/// Validates a `training` traffic entry on a shared-pool protocol at `f` (`traffic[i]`). Placement (§VII-B: "no
/// overlapping usage of servers among different jobs, and each server contains at most one
/// worker"): job `j`'s workers are hosts `j·workers ..`, its parameter server host
/// `jobs·workers + j`.
fn resolve_pool(f: &str, t: &crate::TrainingEntry, topo: &Topology) -> Result<TrainingSpec, crate::ScenarioError> {
    use crate::{ns_to_ps, pos_f64};
    let err = |field: &str, reason: String| crate::ScenarioError { field: format!("{f}.{field}"), reason };
    let name = t.protocol.as_deref().unwrap_or("dsa");
    let Some(info) = pool::pool_protocol(name) else {
        let names: Vec<String> = pool::POOL_PROTOCOLS.iter().map(|p| format!("\"{}\"", p.name)).collect();
        return Err(err(
            "protocol",
            format!(
                "must be one of {} (shared pool) or {} (in-network allreduce) for kind = \"training\", got \"{name}\"",
                names.join(", "),
                reducelab_ina::protocol_names()
            ),
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
    let models = models_of(f, t)?;
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
        // `[ina]`'s, set by the scenario once that is read ([`set_pool_memory`]).
        memory_bytes: PoolLayout::DSA_SIMULATION.memory_bytes,
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
    Ok(spec)
}

/// Gives a shared-pool training spec the switches' memory of `[ina]`: `switch_memory_bytes`, or
/// `table_size` aggregators of [`PACKET_BYTES`], or §VII-B's 5 MB when neither is given ("The
/// switch spares 5 MB memory for INA"). Errors start with the `[ina]` key they are about.
pub fn set_pool_memory(spec: &mut TrainingSpec, ina: &crate::InaSection) -> Result<(), crate::ScenarioError> {
    let (key, bytes) = match (ina.switch_memory_bytes, ina.table_size) {
        (Some(b), _) => ("ina.switch_memory_bytes", b),
        (None, Some(slots)) => ("ina.table_size", slots as u64 * PACKET_BYTES as u64),
        (None, None) => ("ina.switch_memory_bytes", PoolLayout::DSA_SIMULATION.memory_bytes),
    };
    spec.memory_bytes = bytes;
    let err = |why: &str| crate::ScenarioError { field: key.into(), reason: why.to_string() };
    // `aggregators` names its own key first (`switch_memory_bytes: ...`).
    let aggregators = spec.aggregators().map_err(|r| err(r.split_once(": ").map_or(r.as_str(), |(_, why)| why)))?;
    if spec.protocol == PoolProtocol::SwitchMl {
        even_regions(aggregators, &[(0, 1)].repeat(spec.jobs.len())).map_err(|r| err(&r))?;
    }
    Ok(())
}
