//! Scenario files → simulated worlds → result files.
//!
//! `scenario` parses and validates the TOML format (docs/scenario-format.md); `workload`
//! turns its traffic generators into messages on a [`reducelab_net::Network`]; `report`
//! writes the result files. Runs are deterministic: the same scenario text and seed give
//! byte-identical files (wall-clock figures are only in [`EngineStats`], never in files).

pub mod bench;
pub mod collective;
pub mod collective_run;
#[doc(hidden)]
pub mod fuzz;
pub mod goal_flow;
pub mod goal_run;
pub mod ina_run;
pub mod pspin_run;
pub mod report;
mod slab;
pub mod training_run;
pub mod workload;

use reducelab_des::Rng;
use reducelab_net::{Network, RunLimits};
use std::time::Instant;

/// The scenario schema and its resolution ([`reducelab_scenario`]), under its old path.
pub use reducelab_scenario as scenario;
pub use reducelab_scenario::{
    load_scenario_file, load_scenario_str, parse, Scenario, ScenarioError, ScenarioFile, Traffic,
};
pub use report::RunStatus;

/// Options that are not part of the scenario file.
#[derive(Clone, Debug, Default)]
pub struct RunOptions {
    /// Overrides `seed` in the scenario when set.
    pub seed: Option<u64>,
    /// Called about every 65k events with the fraction of the finite work done (see
    /// [`reducelab_net::WorkDone`]); returning false stops the run, which then ends with
    /// status `interrupted` and the results measured so far. A plain `fn` keeps the event
    /// loop free of allocation; a front end polls its signal flag here.
    pub progress: Option<fn(f64) -> bool>,
    /// Validate and stop at simulated time 1 ps (status `time_limit`), whatever the backend:
    /// a check that the scenario runs, with every key of its summary.
    pub probe: bool,
    /// The directory relative file paths of the scenario (GOAL traces) are read from: the
    /// scenario file's (`None`: the working directory).
    pub base_dir: Option<std::path::PathBuf>,
}

/// Everything a run produces. File contents are deterministic: same scenario + seed →
/// identical bytes (no wall-clock values inside them).
#[derive(Clone, Debug)]
pub struct RunOutput {
    /// How the run ended (also `status` in `summary.json`).
    pub status: RunStatus,
    /// Contents of `summary.json`.
    pub summary_json: String,
    /// Other files to write into the output directory: (file name, contents).
    pub files: Vec<(String, String)>,
    /// A short human-readable table for the terminal.
    pub table: String,
    /// Engine counters (for benchmarks; not written to files).
    pub stats: EngineStats,
}

#[derive(Clone, Copy, Debug, Default)]
pub struct EngineStats {
    pub wall_seconds: f64,
    pub events: u64,
    pub packets: u64,
    pub packet_hops: u64,
    pub sim_time_ps: u64,
}

/// Parses, validates and runs a TOML scenario.
pub fn run_scenario_str(text: &str, opts: &RunOptions) -> Result<RunOutput, ScenarioError> {
    let mut file = scenario::parse(text)?;
    if file.pspin.is_some() {
        return pspin_run::run(&file, opts); // one Flare PsPIN switch, no network (docs/flare.md)
    }
    file.base_dir = opts.base_dir.clone();
    let sc = file.resolve(opts.seed)?;
    run_scenario(sc, opts)
}

/// Runs a validated scenario on its backend (`sc.backend`), taking the worlds its validation
/// built.
pub fn run_scenario(mut sc: Scenario, opts: &RunOptions) -> Result<RunOutput, ScenarioError> {
    if sc.backend == scenario::Backend::Flow {
        return run_flow(&sc, opts.probe);
    }
    if sc.backend == scenario::Backend::LogGp {
        return run_loggp(&sc, opts.probe);
    }
    let t0 = Instant::now();
    let rng = Rng::new(sc.seed);
    let mut net = Network::new(&sc.topology, sc.net.clone(), sc.faults.clone(), &rng)
        .map_err(|reason| ScenarioError { field: "network".into(), reason })?;
    for &(link, p) in &sc.link_loss {
        net.set_link_loss(link, p);
    }
    net.set_endpoint(sc.endpoint).map_err(|reason| ScenarioError { field: "endpoint".into(), reason })?;
    net.set_transport(sc.transport).map_err(|reason| ScenarioError { field: "transport".into(), reason })?;
    net.set_raw_tags(&sc.raw_traffic);
    let mut w = workload::ScenarioWorkload::new(
        sc.traffic.clone(),
        rng.fork(0x7AFF1C),
        &sc.topology,
        sc.seed,
        &sc.ina,
        sc.ina_setup.take(),
        sc.training_layout.take(),
    );
    let mut progress = |f: f64| opts.progress.is_none_or(|p| p(f));
    let until = if opts.probe { Some(reducelab_des::SimTime(1)) } else { sc.time_limit };
    let end = net.run_limited(&mut w, RunLimits { until, watchdog: sc.watchdog }, &mut progress);
    let wall = t0.elapsed().as_secs_f64();
    let r = report::build(&sc, &net, &w, &end);
    let s = net.stats();
    Ok(RunOutput {
        status: r.status,
        summary_json: serde_json::to_string_pretty(&r.summary).expect("json") + "\n",
        files: {
            let mut f = vec![("messages.csv".into(), r.messages_csv), ("links.csv".into(), r.links_csv)];
            if let Some(m) = r.ina_memory_csv {
                f.push(("ina_memory.csv".into(), m));
            }
            if let Some(m) = r.ina_switches_csv {
                f.push(("ina_switches.csv".into(), m));
            }
            f.extend(r.workload_files);
            f
        },
        table: r.table,
        stats: EngineStats {
            wall_seconds: wall,
            events: s.events,
            packets: s.packets_created,
            packet_hops: s.packet_hops,
            sim_time_ps: net.now().ps(),
        },
    })
}

/// Runs a scenario of GOAL traces in the LogGP model (`run.backend = "loggp"`): each trace on
/// its own (LogGP has no network they could share), with the scenario's `[loggp]` parameters.
fn run_loggp(sc: &Scenario, probe: bool) -> Result<RunOutput, ScenarioError> {
    let t0 = Instant::now();
    let mut results = Vec::new();
    let mut events = 0;
    for (ti, t) in sc.traffic.iter().enumerate() {
        let Traffic::Goal(g) = t else { unreachable!("run.backend = \"loggp\" resolves with GOAL traffic only") };
        let r = if probe {
            None
        } else {
            let ct = reducelab_goal::check(&g.trace).expect("checked when the scenario was read");
            // A chakra entry's collective times come from its operations' times.
            Some(reducelab_goal::simulate(&ct, &sc.loggp, g.record_ops || g.chakra.is_some()))
        };
        if let Some(Ok(r)) = &r {
            events += r.events;
        }
        results.push((ti, g, r));
    }
    Ok(trace_output(report::build_loggp(sc, &results), t0, events))
}

/// The output of a run of traces without packets (LogGP, flow): its report and its engine's
/// events.
fn trace_output(r: report::TraceReport, t0: Instant, events: u64) -> RunOutput {
    RunOutput {
        status: r.status,
        summary_json: serde_json::to_string_pretty(&r.summary).expect("json") + "\n",
        files: r.workload_files,
        table: r.table,
        stats: EngineStats {
            wall_seconds: t0.elapsed().as_secs_f64(),
            events,
            packets: 0,
            packet_hops: 0,
            sim_time_ps: r.sim_time_ps,
        },
    }
}

/// Runs a scenario whose backend resolved to flow: its GOAL and Chakra traces on one flow
/// network ([`goal_flow`]), or its one allreduce, timed by `reducelab_flow::run_plan` (no
/// per-message or per-link files).
fn run_flow(sc: &Scenario, probe: bool) -> Result<RunOutput, ScenarioError> {
    let t0 = Instant::now();
    if matches!(sc.traffic.first(), Some(Traffic::Goal(_))) {
        let out = goal_flow::run(sc, probe);
        return Ok(trace_output(report::build_flow_goal(sc, &out), t0, out.events));
    }
    let Some(Traffic::Collective { hosts, bytes, algorithm, plan: Some(plan), .. }) = sc.traffic.first() else {
        unreachable!("a scenario resolves to flow only with one collective whose plan is built");
    };
    let r = match probe {
        true => None,
        false => Some(
            reducelab_flow::run_plan(
                &sc.topology,
                plan,
                *bytes,
                collective_run::ELEM_BYTES,
                &scenario::flow_config(&sc.net, &sc.endpoint),
            )
            .map_err(|reason| ScenarioError {
                field: "run.backend".into(),
                reason: format!("the flow backend failed: {reason}"),
            })?,
        ),
    };
    let (summary, table) = report::build_flow(sc, algorithm, hosts.len(), *bytes, r.as_ref());
    let r = r.unwrap_or(reducelab_flow::FlowResult { runtime_ps: 0, messages: 0, events: 0, contention_free: false });
    Ok(RunOutput {
        status: if probe { RunStatus::TimeLimit } else { RunStatus::Completed },
        summary_json: serde_json::to_string_pretty(&summary).expect("json") + "\n",
        files: Vec::new(),
        table,
        stats: EngineStats {
            wall_seconds: t0.elapsed().as_secs_f64(),
            events: r.events,
            packets: 0,
            packet_hops: 0,
            sim_time_ps: r.runtime_ps,
        },
    })
}

pub use bench::{bench_engine, engine_bench_names, BenchResult};
