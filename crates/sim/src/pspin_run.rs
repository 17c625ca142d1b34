//! Scenario files with a `[pspin]` table: one PsPIN switch of Flare (seed 004 §3–6) aggregating
//! one allreduce from its children, with no network around it (`reducelab_flare::pspin`). The
//! same door as every other run: scenario text in, `summary.json` and a status out
//! (docs/flare.md, "Scenario files"). The `[pspin]` table is parsed by
//! `reducelab_scenario::pspin`, with the other scenario tables.

use reducelab_flare::pspin::examples::QuantisedInt8Sum;
use reducelab_flare::pspin::model::ModelInput;
use reducelab_flare::pspin::verify::{fingerprint, verify};
use reducelab_flare::pspin::{self, SwitchReport};
use reducelab_flare::sparse::pspin::{
    block_bytes, sparse_l_cycles, storage_name, SparseCosts, SparseHandlers, SparseTraffic,
};
use serde_json::json;
use std::time::Instant;

use crate::{EngineStats, RunOptions, RunOutput, RunStatus, ScenarioError};

pub use reducelab_scenario::pspin::{parse, resolve, Handlers, PspinScenario};

fn err(field: &str, reason: impl Into<String>) -> ScenarioError {
    ScenarioError { field: field.into(), reason: reason.into() }
}

/// Runs a `[pspin]` scenario.
pub fn run(file: &crate::scenario::ScenarioFile, opts: &RunOptions) -> Result<RunOutput, ScenarioError> {
    let sc = resolve(file, opts.seed)?;
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
        "bandwidth_gbps": w.bandwidth_gbps,
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
            ("bandwidth_gbps = -1\n", "pspin.allreduce.bandwidth_gbps"),
        ] {
            let e = crate::run_scenario_str(&format!("{BASE}{extra}"), &RunOptions::default()).unwrap_err();
            assert_eq!(e.field, field, "{extra}: {e}");
        }
        let e = crate::run_scenario_str(
            "name = \"t\"\n[pspin]\nsubset_cores = 3\n[pspin.allreduce]\nhosts = 2\nbytes = 1024\n",
            &RunOptions::default(),
        )
        .unwrap_err();
        assert_eq!(e.field, "pspin.subset_cores");
        let e = crate::run_scenario_str(
            "name = \"t\"\n[pspin]\nl2_full = \"spill\"\n[pspin.allreduce]\nhosts = 2\nbytes = 1024\n",
            &RunOptions::default(),
        )
        .unwrap_err();
        assert_eq!(e.field, "pspin.l2_full");
    }

    #[test]
    fn drops_stall_and_the_example_handlers_verify() {
        let text = "name = \"t\"\n[pspin]\nclusters = 1\nl2_packet_bytes = 4096\n[pspin.allreduce]\nhosts = 32\nbytes = 16384\nbandwidth_gbps = 400\n";
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
        let sparse = "name = \"t\"\n[pspin]\nclusters = 4\nl2_full = \"backpressure\"\n[pspin.allreduce]\nhosts = 8\nbytes = 262144\ndesign = \"single\"\n";
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
