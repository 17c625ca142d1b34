//! Scenario files with a `[pspin]` table: one PsPIN switch of Flare (seed 004 §3–6) aggregating
//! one allreduce from its children, with no network around it (`reducelab_flare::pspin`). The
//! same door as every other run: scenario text in, `summary.json` and a status out
//! (docs/flare.md, "Scenario files").

use reducelab_flare::pspin::designs::Design;
use reducelab_flare::pspin::examples::QuantisedInt8Sum;
use reducelab_flare::pspin::model::ModelInput;
use reducelab_flare::pspin::verify::{fingerprint, verify};
use reducelab_flare::pspin::{self, ConfigError, DataType, Operator, SwitchConfig, SwitchReport, Workload};
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

impl From<ConfigError> for ScenarioError {
    fn from(e: ConfigError) -> Self {
        ScenarioError { field: e.field, reason: e.reason }
    }
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
        if self.path.is_empty() { key.to_string() } else { format!("{}.{key}", self.path) }
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
}

/// Parses and validates a `[pspin]` scenario (`seed` overrides the file's).
pub fn parse(text: &str, seed: Option<u64>) -> Result<PspinScenario, ScenarioError> {
    let doc: toml::Table = text.parse().map_err(|e: toml::de::Error| err("", format!("invalid TOML: {}", e.message())))?;
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
            handler_overhead_cycles: p.int("handler_overhead_cycles", c.handler_overhead_cycles as u64, 1 << 20)? as u32,
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
    let dtype = DataType::from_name(&dtype_name)
        .ok_or_else(|| err("pspin.allreduce.dtype", format!("unknown type {dtype_name:?} (known: int32, int16, int8, f32, f16)")))?;
    let op_name = a.string("op", "sum")?;
    let op = Operator::from_name(&op_name).ok_or_else(|| err("pspin.allreduce.op", format!("unknown operator {op_name:?} (known: sum, min, max, prod)")))?;
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
    a.done()?;
    if w.hosts == 0 {
        return Err(err("pspin.allreduce.hosts", "missing: the number of children (ports) of the switch"));
    }
    w.validate()?;
    let handlers = match design_requested.as_str() {
        "flare" => Handlers::Design(Design::flare_policy(bytes, reproducible)),
        "quantised-int8-sum" => {
            if dtype != DataType::Int8 || !matches!(op, Operator::Sum) {
                return Err(err("pspin.allreduce.dtype", "design quantised-int8-sum aggregates int8 sums (dtype = \"int8\", op = \"sum\")"));
            }
            w.header_scales = true;
            Handlers::QuantisedInt8Sum
        }
        name => match Design::from_name(name) {
            Some(d) if reproducible && d != Design::Tree => {
                return Err(err("pspin.allreduce.reproducible", format!("only the tree design is reproducible, not {name:?}")))
            }
            Some(d) => Handlers::Design(d),
            None => {
                return Err(err(
                    "pspin.allreduce.design",
                    format!("unknown design {name:?} (known: single, multi-B for B in 2..=64, tree, flare, quantised-int8-sum)"),
                ))
            }
        },
    };
    Ok(PspinScenario { name, seed, switch, workload: w, design_requested, reproducible, handlers, allreduces })
}

/// Runs a `[pspin]` scenario.
pub fn run(text: &str, opts: &RunOptions) -> Result<RunOutput, ScenarioError> {
    let sc = parse(text, opts.seed)?;
    let t0 = Instant::now();
    let (w, cfg) = (&sc.workload, &sc.switch);
    // A probe validates and models without running (`reducelab model flare` reads its model).
    let (report, design, quantised) = match sc.handlers {
        _ if opts.probe => (
            SwitchReport { status: "time_limit", ..Default::default() },
            match sc.handlers {
                Handlers::Design(d) => Some(d),
                Handlers::QuantisedInt8Sum => None,
            },
            false,
        ),
        Handlers::Design(d) => (pspin::run(cfg, w, &mut d.handlers(w.dtype, w.op))?, Some(d), false),
        Handlers::QuantisedInt8Sum => (pspin::run(cfg, w, &mut QuantisedInt8Sum::new())?, None, true),
    };
    let wall = t0.elapsed().as_secs_f64();
    let checked = if opts.probe { Ok(()) } else { verify(w, &report, quantised) };
    let (status, reason) = match (report.status, &checked) {
        ("time_limit", _) => (RunStatus::TimeLimit, "probe: validated, not run".to_string()),
        ("stalled", _) => (RunStatus::Stalled, format!("{} packets dropped (L2 packet memory full) and never resent", report.drops)),
        ("l1_overflow", _) => (
            RunStatus::Unverified,
            format!("working memory needed {} bytes in one cluster's L1 of {}", report.peak_cluster_l1_bytes, cfg.l1_bytes_per_cluster),
        ),
        (_, Err(e)) => (RunStatus::Unverified, e.clone()),
        _ => (RunStatus::Completed, String::new()),
    };
    let cycle_ns = 1000.0 / cfg.clock_mhz as f64;
    let model = design.map(|d| {
        let m = ModelInput::new(cfg, w, d).evaluate();
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
        "verified": if w.carry_data { json!(checked.is_ok()) } else { json!(null) },
        "result_fingerprint": if w.carry_data { json!(format!("{:016x}", fingerprint(&report))) } else { json!(null) },
        "model": model,
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
        stats: EngineStats { wall_seconds: wall, events: report.events, packets: report.packets_in, packet_hops: report.packets_in, sim_time_ps: report.last_completion_ps },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const BASE: &str = "name = \"t\"\nseed = 3\n[pspin]\nclusters = 4\n[pspin.allreduce]\nhosts = 8\nbytes = 65536\n";

    #[test]
    fn a_pspin_scenario_runs_through_the_one_door_and_is_deterministic() {
        let text = format!("{BASE}dtype = \"f32\"\ndata = true\ndesign = \"flare\"\nreproducible = true\njitter_ns = 20\n");
        let a = crate::run_scenario_str(&text, &RunOptions::default()).unwrap();
        let b = crate::run_scenario_str(&text, &RunOptions::default()).unwrap();
        assert_eq!(a.summary_json, b.summary_json);
        assert_eq!(a.status, RunStatus::Completed);
        let s: serde_json::Value = serde_json::from_str(&a.summary_json).unwrap();
        assert_eq!((s["kind"].as_str(), s["design"].as_str(), s["verified"].as_bool()), (Some("pspin"), Some("tree"), Some(true)));
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
        assert_eq!((s["design"].as_str(), s["bytes"].as_u64(), s["allreduces"].as_u64()), (Some("tree"), Some(65536), Some(4)));
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
        let e = crate::run_scenario_str("[pspin]\nsubset_cores = 3\n[pspin.allreduce]\nhosts = 2\nbytes = 1024\n", &RunOptions::default()).unwrap_err();
        assert_eq!(e.field, "pspin.subset_cores");
        let e = crate::run_scenario_str("[pspin]\nl2_full = \"spill\"\n[pspin.allreduce]\nhosts = 2\nbytes = 1024\n", &RunOptions::default()).unwrap_err();
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
}
