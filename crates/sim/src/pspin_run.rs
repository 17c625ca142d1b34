//! Scenario files with a `[pspin]` table: one PsPIN switch of Flare (seed 004 §3–6) aggregating
//! one allreduce from its children, with no network around it (`reducelab_flare::pspin`). The
//! same door as every other run: scenario text in, `summary.json` and a status out
//! (docs/flare.md, "Scenario files").

use reducelab_flare::pspin::designs::Design;
use reducelab_flare::pspin::examples::QuantisedInt8Sum;
use reducelab_flare::pspin::model::ModelInput;
use reducelab_flare::pspin::verify::{fingerprint, verify};
use reducelab_flare::pspin::{self, DataType, Operator, SwitchConfig, SwitchReport, Workload};
use reducelab_flare::sparse::pspin::{
    block_bytes, sparse_l_cycles, storage_name, SparseCosts, SparseHandlers, SparseTraffic,
};
use reducelab_flare::sparse::switch::Storage;
use serde_json::json;
use std::time::Instant;

use crate::{EngineStats, RunOptions, RunOutput, RunStatus, ScenarioError};

/// Whether `text` is a PsPIN switch scenario (has a top-level `[pspin]` table).
pub fn is_pspin(text: &str) -> bool {
    text.parse::<toml::Table>().map(|t| t.contains_key("pspin")).unwrap_or(false)
}

fn err(field: &str, reason: impl Into<String>) -> ScenarioError {
    ScenarioError { field: field.into(), reason: reason.into() }
}

/// A table's fields, each taken once; what is left at the end is an unknown field.
struct Fields<'a> {
    path: &'a str,
    table: toml::Table,
}

impl<'a> Fields<'a> {
    fn new(path: &'a str, v: Option<toml::Value>) -> Result<Self, ScenarioError> {
        match v {
            None => Ok(Fields { path, table: toml::Table::new() }),
            Some(toml::Value::Table(table)) => Ok(Fields { path, table }),
            Some(_) => Err(err(path, "expected a table")),
        }
    }
    fn field(&self, key: &str) -> String {
        if self.path.is_empty() {
            key.to_string()
        } else {
            format!("{}.{key}", self.path)
        }
    }
    fn int(&mut self, key: &str, default: u64, max: u64) -> Result<u64, ScenarioError> {
        match self.table.remove(key) {
            None => Ok(default),
            Some(toml::Value::Integer(i)) if i >= 0 && i as u64 <= max => Ok(i as u64),
            Some(v) => Err(err(&self.field(key), format!("expected an integer in 0..={max}, got {v}"))),
        }
    }
    fn num(&mut self, key: &str, default: f64) -> Result<f64, ScenarioError> {
        match self.table.remove(key) {
            None => Ok(default),
            Some(toml::Value::Integer(i)) => Ok(i as f64),
            Some(toml::Value::Float(f)) => Ok(f),
            Some(v) => Err(err(&self.field(key), format!("expected a number, got {v}"))),
        }
    }
    fn boolean(&mut self, key: &str, default: bool) -> Result<bool, ScenarioError> {
        match self.table.remove(key) {
            None => Ok(default),
            Some(toml::Value::Boolean(b)) => Ok(b),
            Some(v) => Err(err(&self.field(key), format!("expected true or false, got {v}"))),
        }
    }
    fn string(&mut self, key: &str, default: &str) -> Result<String, ScenarioError> {
        match self.table.remove(key) {
            None => Ok(default.to_string()),
            Some(toml::Value::String(s)) => Ok(s),
            Some(v) => Err(err(&self.field(key), format!("expected a string, got {v}"))),
        }
    }
    fn take(&mut self, key: &str) -> Option<toml::Value> {
        self.table.remove(key)
    }
    fn done(self) -> Result<(), ScenarioError> {
        match self.table.keys().next() {
            Some(k) => Err(err(&self.field(k), "unknown field")),
            None => Ok(()),
        }
    }
}

/// The handlers a scenario asks for.
enum Handlers {
    Design(Design),
    QuantisedInt8Sum,
    /// Sparse data (seed 004 §7) at this density and storage, aggregated by this design.
    Sparse(Design, f64, Storage),
}

/// A parsed PsPIN scenario.
pub struct PspinScenario {
    pub name: String,
    pub seed: u64,
    pub switch: SwitchConfig,
    pub workload: Workload,
    pub design_requested: String,
    pub reproducible: bool,
    handlers: Handlers,
    pub allreduces: u64,
    /// `simulate = false`: evaluate the §4–6 model only (Fig. 13); the run is not simulated.
    pub simulate: bool,
}

/// Parses and validates a `[pspin]` scenario (`seed` overrides the file's).
pub fn parse(text: &str, seed: Option<u64>) -> Result<PspinScenario, ScenarioError> {
    let doc: toml::Table =
        text.parse().map_err(|e: toml::de::Error| err("", format!("invalid TOML: {}", e.message())))?;
    let mut top = Fields::new("", Some(toml::Value::Table(doc)))?;
    let name = top.string("name", "pspin")?;
    let seed = match seed {
        Some(s) => s,
        None => top.int("seed", 1, u64::MAX >> 1)?,
    };
    let _ = top.take("seed");
    let mut p = Fields::new("pspin", top.take("pspin"))?;
    top.done()?;
    let d = SwitchConfig::default();
    let c = d.costs;
    let mut a = Fields::new("pspin.allreduce", p.take("allreduce"))?;
    let mut switch = SwitchConfig {
        clusters: p.int("clusters", d.clusters as u64, u32::MAX as u64)? as u32,
        hpus_per_cluster: p.int("hpus_per_cluster", d.hpus_per_cluster as u64, u32::MAX as u64)? as u32,
        clock_mhz: p.int("clock_mhz", d.clock_mhz as u64, 1_000_000)? as u32,
        l1_bytes_per_cluster: p.int("l1_bytes_per_cluster", d.l1_bytes_per_cluster, 1 << 40)?,
        l2_packet_bytes: p.int("l2_packet_bytes", d.l2_packet_bytes, 1 << 40)?,
        subset_cores: p.int("subset_cores", d.subset_cores as u64, u32::MAX as u64)? as u32,
        backpressure: false,
        costs: pspin::CostModel {
            cycles_per_vector_op: p.int("cycles_per_vector_op", c.cycles_per_vector_op as u64, 1 << 20)? as u32,
            dma_cycles_per_kib: p.int("dma_cycles_per_kib", c.dma_cycles_per_kib as u64, 1 << 20)? as u32,
            remote_l1_factor: p.int("remote_l1_factor", c.remote_l1_factor as u64, 1 << 20)? as u32,
            lock_cycles: p.int("lock_cycles", c.lock_cycles as u64, 1 << 20)? as u32,
            handler_overhead_cycles: p.int("handler_overhead_cycles", c.handler_overhead_cycles as u64, 1 << 20)?
                as u32,
        },
    };
    switch.backpressure = match p.string("l2_full", "drop")?.as_str() {
        "drop" => false,
        "backpressure" => true,
        other => return Err(err("pspin.l2_full", format!("expected \"drop\" or \"backpressure\", got {other:?}"))),
    };
    p.done()?;
    switch.validate()?;

    let dtype_name = a.string("dtype", "int32")?;
    let dtype = DataType::from_name(&dtype_name).ok_or_else(|| {
        err("pspin.allreduce.dtype", format!("unknown type {dtype_name:?} (known: int32, int16, int8, f32, f16)"))
    })?;
    let op_name = a.string("op", "sum")?;
    let op = Operator::from_name(&op_name).ok_or_else(|| {
        err("pspin.allreduce.op", format!("unknown operator {op_name:?} (known: sum, min, max, prod)"))
    })?;
    let bytes = a.int("bytes", 0, 1 << 40)?;
    // `allreduces`: back-to-back allreduces of `bytes` each (a stream); the switch sees them as
    // one vector of allreduces × bytes, each host keeping one allreduce's blocks in flight unless
    // `window_blocks` says otherwise. Flare's policy picks the design by `bytes`.
    let allreduces = a.int("allreduces", 1, 1 << 20)?;
    if allreduces == 0 {
        return Err(err("pspin.allreduce.allreduces", "expected at least 1"));
    }
    let mut w = Workload::new(a.int("hosts", 0, 4096)? as u32, bytes.saturating_mul(allreduces));
    w.dtype = dtype;
    w.op = op;
    w.packet_bytes = a.int("packet_bytes", 1024, 9000)? as u32;
    w.link_gbps = a.num("link_gbps", 100.0)?;
    w.staggered = a.boolean("staggered", true)?;
    w.window_blocks = a.int("window_blocks", 0, u32::MAX as u64)? as u32;
    if allreduces > 1 {
        let per = bytes.div_ceil(w.packet_bytes.max(1) as u64) as u32;
        w.window_blocks = if w.window_blocks == 0 { per } else { w.window_blocks.min(per) };
    }
    w.jitter_ns = a.num("jitter_ns", 0.0)?;
    w.carry_data = a.boolean("data", false)?;
    w.seed = seed;
    w.data_seed = a.int("data_seed", 1, u64::MAX >> 1)?;
    let reproducible = a.boolean("reproducible", false)?;
    let design_requested = a.string("design", "flare")?;
    let simulate = a.boolean("simulate", true)?;
    // Sparse data (§7): `density` of non-zeros, `storage` hash (+ spill) or array.
    let density = a.num("density", 0.0)?;
    let sparse_keys: Vec<&str> =
        ["storage", "hash_slots", "spill_pairs"].into_iter().filter(|k| a.table.contains_key(*k)).collect();
    let ppp = (w.packet_bytes / 8).max(1) as u64;
    let storage_name_req = a.string("storage", "hash")?;
    let hash_slots = a.int("hash_slots", 4 * ppp, 1 << 24)?;
    let spill_pairs = a.int("spill_pairs", ppp, 1 << 24)?;
    a.done()?;
    if density == 0.0 {
        if let Some(k) = sparse_keys.first() {
            return Err(err(&format!("pspin.allreduce.{k}"), "is for sparse runs: set `density` (0 < density ≤ 1)"));
        }
    } else if !(density.is_finite() && density > 0.0 && density <= 1.0) {
        return Err(err("pspin.allreduce.density", format!("expected a fraction in (0, 1], got {density}")));
    }
    if w.hosts == 0 {
        return Err(err("pspin.allreduce.hosts", "missing: the number of children (ports) of the switch"));
    }
    w.validate()?;
    if density > 0.0 {
        if dtype != DataType::Int32 || !matches!(op, Operator::Sum) {
            return Err(err(
                "pspin.allreduce.dtype",
                "sparse runs aggregate int32 sums (pairs of a 4-byte index and a 4-byte value)",
            ));
        }
        if w.carry_data {
            return Err(err("pspin.allreduce.data", "sparse runs always carry their pairs; `data` is for dense runs"));
        }
        if reproducible {
            return Err(err(
                "pspin.allreduce.reproducible",
                "sparse runs are integer sums (reproducibility is for floating point)",
            ));
        }
        let storage = match storage_name_req.as_str() {
            "hash" => {
                if hash_slots == 0 || spill_pairs == 0 {
                    return Err(err(
                        if hash_slots == 0 { "pspin.allreduce.hash_slots" } else { "pspin.allreduce.spill_pairs" },
                        "must be at least 1",
                    ));
                }
                Storage::Hash { slots: hash_slots as u32, spill: spill_pairs as u32 }
            }
            "array" => Storage::Array,
            other => {
                return Err(err("pspin.allreduce.storage", format!("expected \"hash\" or \"array\", got {other:?}")))
            }
        };
        let design = match design_requested.as_str() {
            "flare" => Design::flare_policy(bytes, false),
            name => Design::from_name(name).ok_or_else(|| {
                err(
                    "pspin.allreduce.design",
                    format!("unknown design {name:?} for sparse data (known: single, multi-B, tree, flare)"),
                )
            })?,
        };
        if simulate && design != Design::SingleBuffer {
            return Err(err(
                "pspin.allreduce.design",
                format!("the simulated sparse handlers aggregate in a single buffer (the {} design is modelled only: simulate = false)", design.name()),
            ));
        }
        return Ok(PspinScenario {
            name,
            seed,
            switch,
            workload: w,
            design_requested,
            reproducible,
            handlers: Handlers::Sparse(design, density, storage),
            allreduces,
            simulate,
        });
    }
    let handlers = match design_requested.as_str() {
        "flare" => Handlers::Design(Design::flare_policy(bytes, reproducible)),
        "quantised-int8-sum" => {
            if dtype != DataType::Int8 || !matches!(op, Operator::Sum) {
                return Err(err(
                    "pspin.allreduce.dtype",
                    "design quantised-int8-sum aggregates int8 sums (dtype = \"int8\", op = \"sum\")",
                ));
            }
            w.header_scales = true;
            Handlers::QuantisedInt8Sum
        }
        name => match Design::from_name(name) {
            Some(d) if reproducible && d != Design::Tree => {
                return Err(err(
                    "pspin.allreduce.reproducible",
                    format!("only the tree design is reproducible, not {name:?}"),
                ))
            }
            Some(d) => Handlers::Design(d),
            None => {
                return Err(err(
                    "pspin.allreduce.design",
                    format!(
                        "unknown design {name:?} (known: single, multi-B for B in 2..=64, tree, flare, \
                         quantised-int8-sum)"
                    ),
                ))
            }
        },
    };
    Ok(PspinScenario {
        name,
        seed,
        switch,
        workload: w,
        design_requested,
        reproducible,
        handlers,
        allreduces,
        simulate,
    })
}

/// Runs a `[pspin]` scenario.
pub fn run(text: &str, opts: &RunOptions) -> Result<RunOutput, ScenarioError> {
    let sc = parse(text, opts.seed)?;
    let t0 = Instant::now();
    let (w, cfg) = (&sc.workload, &sc.switch);
    // A probe validates and models without running (`reducelab model flare` reads its model).
    let mut sparse: Option<serde_json::Value> = None;
    let mut sparse_check: Option<Result<(), String>> = None;
    let (report, design, quantised) = match sc.handlers {
        _ if opts.probe || !sc.simulate => (
            SwitchReport { status: if opts.probe { "time_limit" } else { "model_only" }, ..Default::default() },
            match sc.handlers {
                Handlers::Design(d) | Handlers::Sparse(d, ..) => Some(d),
                Handlers::QuantisedInt8Sum => None,
            },
            false,
        ),
        Handlers::Sparse(d, density, storage) => {
            let traffic = SparseTraffic::new(w, density).map_err(|e| {
                let (f, r) = e.split_once(": ").unwrap_or(("pspin.allreduce.density", e.as_str()));
                err(f, r)
            })?;
            let mut h = SparseHandlers::new(&traffic, storage, SparseCosts::default())
                .map_err(|e| err("pspin.allreduce.storage", e))?;
            let report = pspin::switch::run_traffic(cfg, w, &traffic, &mut h)?;
            sparse_check = Some(if report.status == "completed" {
                h.check(&traffic)
            } else {
                Err(format!("the run ended {}", report.status))
            });
            let distinct: u64 = traffic.distinct.iter().map(|&d| d as u64).sum();
            let st = &h.stats;
            sparse = Some(json!({
                "pairs_in": st.pairs_in,
                "pairs_out": st.pairs_out,
                "distinct_indices": distinct,
                "extra_traffic": if distinct > 0 { st.pairs_out as f64 / distinct as f64 - 1.0 } else { 0.0 },
                "spilled_pairs": st.spilled_pairs,
                "spill_packets": st.spill_packets,
                "packets_from_hosts": traffic.packets_total(),
            }));
            (report, Some(d), false)
        }
        Handlers::Design(d) => (pspin::run(cfg, w, &mut d.handlers(w.dtype, w.op))?, Some(d), false),
        Handlers::QuantisedInt8Sum => (pspin::run(cfg, w, &mut QuantisedInt8Sum::new())?, None, true),
    };
    let wall = t0.elapsed().as_secs_f64();
    let is_sparse = matches!(sc.handlers, Handlers::Sparse(..));
    let checked = match &sparse_check {
        Some(c) => c.clone(),
        None if opts.probe || !sc.simulate || is_sparse => Ok(()),
        None => verify(w, &report, quantised),
    };
    let (status, reason) = match (report.status, &checked) {
        ("time_limit", _) => (RunStatus::TimeLimit, "probe: validated, not run".to_string()),
        ("model_only", _) => (RunStatus::Completed, "model only (simulate = false): the §4–6 model was evaluated, the switch not simulated".to_string()),
        ("stalled", _) => (RunStatus::Stalled, format!("{} packets dropped (L2 packet memory full) and never resent", report.drops)),
        ("l1_overflow", _) => (
            RunStatus::Unverified,
            format!(
                "does not fit: the blocks processed concurrently needed {} bytes of working memory in one cluster's L1 of {}{}",
                report.peak_cluster_l1_bytes,
                cfg.l1_bytes_per_cluster,
                match sc.handlers {
                    Handlers::Sparse(_, density, storage) => {
                        let span = SparseTraffic::span(w, density);
                        format!(" ({} storage at density {density}: {} bytes per block, span {span})", storage_name(&storage), block_bytes(&storage, span))
                    }
                    _ => String::new(),
                }
            ),
        ),
        (_, Err(e)) => (RunStatus::Unverified, e.clone()),
        _ => (RunStatus::Completed, String::new()),
    };
    let cycle_ns = 1000.0 / cfg.clock_mhz as f64;
    let model = design.map(|d| {
        let mut mi = ModelInput::new(cfg, w, d);
        if let Handlers::Sparse(_, density, storage) = sc.handlers {
            // The sparse handlers' L (sparse::pspin::sparse_l_cycles): their insertions and the
            // completion scan per packet, in place of the dense combine.
            mi.l_cycles = sparse_l_cycles(
                &storage,
                &SparseCosts::default(),
                w.packet_bytes / 8,
                SparseTraffic::span(w, density),
                density,
                w.hosts,
            );
        }
        let m = mi.evaluate();
        json!({
            "tau_cycles": m.tau_cycles,
            "l_cycles": m.l_cycles,
            "bandwidth_gbps": m.bandwidth_gbps,
            "delta_cycles": m.delta_cycles,
            "delta_c_cycles": m.delta_c_cycles,
            "queue": m.queue,
            "packets_in_switch": m.packets_in_switch,
            "input_buffer_bytes": m.input_buffer_bytes,
            "block_latency_cycles": m.block_latency_cycles,
            "block_latency_ns": m.block_latency_cycles * cycle_ns,
            "buffers_per_block": m.buffers_per_block,
            "working_bytes": m.working_bytes,
        })
    });
    let design_name = match (&design, quantised) {
        (Some(d), _) => d.name(),
        (None, true) => "quantised-int8-sum".into(),
        _ => sc.design_requested.clone(),
    };
    let elements_per_s = report.bandwidth_gbps * 1e9 / 8.0 / w.dtype.bytes() as f64;
    let summary = json!({
        "name": sc.name,
        "kind": "pspin",
        "status": status.as_str(),
        "status_reason": reason,
        "seed": sc.seed,
        "design": design_name,
        "design_requested": sc.design_requested,
        "reproducible": sc.reproducible,
        "dtype": w.dtype.name(),
        "op": w.op.name(),
        "hosts": w.hosts,
        "bytes": w.bytes_per_host / sc.allreduces,
        "allreduces": sc.allreduces,
        "packet_bytes": w.packet_bytes,
        "link_gbps": w.link_gbps,
        "staggered": w.staggered,
        "window_blocks": report.window_blocks,
        "jitter_ns": w.jitter_ns,
        "clusters": cfg.clusters,
        "hpus_per_cluster": cfg.hpus_per_cluster,
        "cores": cfg.cores(),
        "subset_cores": cfg.subset_cores,
        "l2_full": if cfg.backpressure { "backpressure" } else { "drop" },
        "simulated": sc.simulate && !opts.probe,
    });
    let measured = json!({
        "bandwidth_gbps": report.bandwidth_gbps,
        "elements_per_s": elements_per_s,
        "blocks": report.blocks,
        "blocks_completed": report.blocks_completed,
        "packets": report.packets_in,
        "drops": report.drops,
        "tau_cycles": report.tau_cycles,
        "busy_cycles": report.busy_cycles,
        "spin_cycles": report.spin_cycles,
        "delta_cycles": report.delta_cycles,
        "delta_c_cycles": report.delta_c_cycles,
        "max_subset_queue": report.max_subset_queue,
        "peak_packets": report.peak_packets,
        "peak_l2_bytes": report.peak_l2_bytes,
        "block_latency_ns": report.block_latency_cycles * cycle_ns,
        "peak_working_bytes": report.peak_working_bytes,
        "peak_cluster_l1_bytes": report.peak_cluster_l1_bytes,
        "sim_time_ps": report.last_completion_ps,
        "verified": if w.carry_data || sparse_check.is_some() { json!(checked.is_ok()) } else { json!(null) },
        "result_fingerprint": if w.carry_data { json!(format!("{:016x}", fingerprint(&report))) } else { json!(null) },
        "model": model,
        "sparse": match sc.handlers {
            Handlers::Sparse(_, density, storage) => {
                let span = SparseTraffic::span(w, density);
                let mut v = json!({
                    "density": density,
                    "storage": storage_name(&storage),
                    "span": span,
                    "block_bytes": block_bytes(&storage, span),
                    "fits": report.status != "l1_overflow",
                });
                if let (Some(o), Some(serde_json::Value::Object(m))) = (v.as_object_mut(), sparse) {
                    o.extend(m);
                }
                v
            }
            _ => json!(null),
        },
    });
    let mut summary = summary;
    if let (Some(s), serde_json::Value::Object(m)) = (summary.as_object_mut(), measured) {
        s.extend(m);
    }
    let table = format!(
        "{} ({}): {} on {} cores ({} × {}), S = {}, {} hosts × {} B of {} {}\n  status      {}{}\n  bandwidth   {:.1} Gb/s ({:.3e} elements/s)\n  τ           {:.0} cycles per packet ({} spinning of {} cycles)\n  𝒬 (peak)    {} packets, {} B of L2; drops {}\n  ℒ (mean)    {:.0} ns; working memory peak {} B\n",
        sc.name,
        "pspin",
        design_name,
        cfg.cores(),
        cfg.clusters,
        cfg.hpus_per_cluster,
        cfg.subset_cores,
        w.hosts,
        w.bytes_per_host,
        w.dtype,
        w.op.name(),
        status.as_str(),
        if reason.is_empty() { String::new() } else { format!(" ({reason})") },
        report.bandwidth_gbps,
        elements_per_s,
        report.tau_cycles,
        report.spin_cycles,
        report.busy_cycles + report.spin_cycles,
        report.peak_packets,
        report.peak_l2_bytes,
        report.drops,
        report.block_latency_cycles * cycle_ns,
        report.peak_working_bytes,
    );
    Ok(RunOutput {
        status,
        summary_json: serde_json::to_string_pretty(&summary).expect("json") + "\n",
        files: Vec::new(),
        table,
        stats: EngineStats {
            wall_seconds: wall,
            events: report.events,
            packets: report.packets_in,
            packet_hops: report.packets_in,
            sim_time_ps: report.last_completion_ps,
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const BASE: &str = "name = \"t\"\nseed = 3\n[pspin]\nclusters = 4\n[pspin.allreduce]\nhosts = 8\nbytes = 65536\n";

    #[test]
    fn a_pspin_scenario_runs_through_the_one_door_and_is_deterministic() {
        let text =
            format!("{BASE}dtype = \"f32\"\ndata = true\ndesign = \"flare\"\nreproducible = true\njitter_ns = 20\n");
        let a = crate::run_scenario_str(&text, &RunOptions::default()).unwrap();
        let b = crate::run_scenario_str(&text, &RunOptions::default()).unwrap();
        assert_eq!(a.summary_json, b.summary_json);
        assert_eq!(a.status, RunStatus::Completed);
        let s: serde_json::Value = serde_json::from_str(&a.summary_json).unwrap();
        assert_eq!(
            (s["kind"].as_str(), s["design"].as_str(), s["verified"].as_bool()),
            (Some("pspin"), Some("tree"), Some(true))
        );
        assert!(s["bandwidth_gbps"].as_f64().unwrap() > 0.0 && s["model"]["tau_cycles"].as_f64().unwrap() > 0.0);
        // The tree's result does not depend on the arrival order (seed → jitter).
        let c = crate::run_scenario_str(&text, &RunOptions { seed: Some(99), ..Default::default() }).unwrap();
        let t: serde_json::Value = serde_json::from_str(&c.summary_json).unwrap();
        assert_ne!(s["sim_time_ps"], t["sim_time_ps"]);
        assert_eq!(s["result_fingerprint"], t["result_fingerprint"]);
    }

    #[test]
    fn a_stream_of_small_allreduces_keeps_its_size_for_the_policy() {
        let text = format!("{BASE}allreduces = 4\nbytes_unused = 0\n").replace("bytes_unused = 0\n", "");
        let out = crate::run_scenario_str(&text, &RunOptions::default()).unwrap();
        let s: serde_json::Value = serde_json::from_str(&out.summary_json).unwrap();
        // 4 × 64 KiB: the policy sees 64 KiB (tree), one allreduce (64 blocks) in flight.
        assert_eq!(
            (s["design"].as_str(), s["bytes"].as_u64(), s["allreduces"].as_u64()),
            (Some("tree"), Some(65536), Some(4))
        );
        assert_eq!((s["blocks"].as_u64(), s["window_blocks"].as_u64()), (Some(256), Some(64)));
    }

    #[test]
    fn bad_fields_are_named() {
        for (extra, field) in [
            ("design = \"ring\"\n", "pspin.allreduce.design"),
            ("dtype = \"f64\"\n", "pspin.allreduce.dtype"),
            ("colour = 1\n", "pspin.allreduce.colour"),
            ("design = \"single\"\nreproducible = true\n", "pspin.allreduce.reproducible"),
            ("design = \"quantised-int8-sum\"\n", "pspin.allreduce.dtype"),
            ("link_gbps = -1\n", "pspin.allreduce.link_gbps"),
        ] {
            let e = crate::run_scenario_str(&format!("{BASE}{extra}"), &RunOptions::default()).unwrap_err();
            assert_eq!(e.field, field, "{extra}: {e}");
        }
        let e = crate::run_scenario_str(
            "[pspin]\nsubset_cores = 3\n[pspin.allreduce]\nhosts = 2\nbytes = 1024\n",
            &RunOptions::default(),
        )
        .unwrap_err();
        assert_eq!(e.field, "pspin.subset_cores");
        let e = crate::run_scenario_str(
            "[pspin]\nl2_full = \"spill\"\n[pspin.allreduce]\nhosts = 2\nbytes = 1024\n",
            &RunOptions::default(),
        )
        .unwrap_err();
        assert_eq!(e.field, "pspin.l2_full");
    }

    #[test]
    fn drops_stall_and_the_example_handlers_verify() {
        let text = "[pspin]\nclusters = 1\nl2_packet_bytes = 4096\n[pspin.allreduce]\nhosts = 32\nbytes = 16384\nlink_gbps = 400\n";
        let out = crate::run_scenario_str(text, &RunOptions::default()).unwrap();
        assert_eq!(out.status, RunStatus::Stalled);
        let text = format!("{BASE}dtype = \"int8\"\ndata = true\ndesign = \"quantised-int8-sum\"\n");
        let out = crate::run_scenario_str(&text, &RunOptions::default()).unwrap();
        assert_eq!(out.status, RunStatus::Completed, "{}", out.summary_json);
        let probe = crate::run_scenario_str(BASE, &RunOptions { probe: true, ..Default::default() }).unwrap();
        assert_eq!(probe.status, RunStatus::TimeLimit);
        let s: serde_json::Value = serde_json::from_str(&probe.summary_json).unwrap();
        assert_eq!((s["packets"].as_u64(), s["design"].as_str()), (Some(0), Some("tree")));
        assert_eq!(s["model"]["tau_cycles"].as_f64(), Some(7.0 * 1024.0 / 8.0));
    }

    #[test]
    fn a_sparse_run_reports_storage_memory_and_traffic_and_a_misfit_says_why() {
        // 4 clusters, 8 children, 256 KiB of pairs per host (256 blocks, 64 per cluster).
        let sparse = "[pspin]\nclusters = 4\nl2_full = \"backpressure\"\n[pspin.allreduce]\nhosts = 8\nbytes = 262144\ndesign = \"single\"\n";
        let out =
            crate::run_scenario_str(&format!("{sparse}density = 0.1\nstorage = \"hash\"\n"), &RunOptions::default())
                .unwrap();
        assert_eq!(out.status, RunStatus::Completed, "{}", out.summary_json);
        let s: serde_json::Value = serde_json::from_str(&out.summary_json).unwrap();
        let sp = &s["sparse"];
        assert_eq!(
            (sp["storage"].as_str(), sp["span"].as_u64(), sp["block_bytes"].as_u64(), sp["fits"].as_bool()),
            (Some("hash"), Some(1280), Some(5120), Some(true))
        );
        assert!(sp["pairs_out"].as_u64().unwrap() >= sp["distinct_indices"].as_u64().unwrap());
        // What the switch sent adds up to the exact sums (checked for every simulated sparse run).
        assert_eq!(s["verified"].as_bool(), Some(true));
        // The model uses the sparse handlers' L (more than the dense packet's 1024 cycles).
        assert!(s["model"]["l_cycles"].as_f64().unwrap() > 1024.0);
        // At 1% an array block is 50 KiB: 64 of them in one cluster's 1 MiB L1 do not fit.
        let out =
            crate::run_scenario_str(&format!("{sparse}density = 0.01\nstorage = \"array\"\n"), &RunOptions::default())
                .unwrap();
        assert_eq!(out.status, RunStatus::Unverified);
        let s: serde_json::Value = serde_json::from_str(&out.summary_json).unwrap();
        let why = s["status_reason"].as_str().unwrap();
        assert!(
            why.starts_with("does not fit: the blocks processed concurrently needed")
                && why.contains("array storage at density 0.01: 51200 bytes per block, span 12800"),
            "{why}"
        );
        assert_eq!(s["sparse"]["fits"].as_bool(), Some(false));
        assert_eq!(s["verified"].as_bool(), Some(false));
        // Model only (Fig. 13): any design, not simulated.
        let out = crate::run_scenario_str(
            &format!("{sparse}density = 0.1\nstorage = \"array\"\nsimulate = false\n")
                .replace("\"single\"", "\"tree\""),
            &RunOptions::default(),
        )
        .unwrap();
        let s: serde_json::Value = serde_json::from_str(&out.summary_json).unwrap();
        assert_eq!(
            (s["simulated"].as_bool(), s["packets"].as_u64(), s["design"].as_str()),
            (Some(false), Some(0), Some("tree"))
        );
        for (extra, field) in [
            ("density = 0.1\ndesign = \"tree\"\n", "pspin.allreduce.design"),
            ("density = 1.5\n", "pspin.allreduce.density"),
            ("density = 0.1\nstorage = \"list\"\n", "pspin.allreduce.storage"),
            ("storage = \"hash\"\n", "pspin.allreduce.storage"),
            ("density = 0.1\ndtype = \"f32\"\n", "pspin.allreduce.dtype"),
            ("density = 0.1\nhash_slots = 0\n", "pspin.allreduce.hash_slots"),
        ] {
            let e = crate::run_scenario_str(&format!("{BASE}{extra}"), &RunOptions::default()).unwrap_err();
            assert_eq!(e.field, field, "{extra}: {e}");
        }
    }
}
