//! `reducelab._core`: the thin PyO3 layer over `reducelab_sim` (scenarios, benchmarks, single
//! collectives on a whole topology) and the analytical schedule model of `reducelab_sched::model`.
//!
//! Only conversion lives here: Rust results become plain Python dicts, lists and strings, and
//! `reducelab_sim::ScenarioError` becomes the Python exception `ScenarioError(ValueError)` with
//! `field` and `reason` attributes. Everything a user sees (result objects, file writing, the CLI,
//! plots) is in the Python package `reducelab`, which wraps this module.
//!
//! The GIL is released while the simulator runs, so other Python threads keep going. The
//! simulator calls a plain `fn(f64) -> bool` about every 65k events ([`poll_run`]); it draws the
//! optional terminal progress bar and, on the main thread, runs Python's signal handlers
//! (`PyErr_CheckSignals`): a handler that raises (Ctrl-C's `KeyboardInterrupt`, or the
//! `SIGTERM` handler of the command line) stops the run, whose partial results are attached to
//! the exception as `partial_run`. A plain `fn` cannot capture state, so the bar's state is a
//! few process-wide atomics (only one run at a time, the first to start, draws a bar) and the
//! pending exception is thread-local.

// pyo3 0.22's #[pyfunction] expansion converts a `PyResult`'s error into `PyErr` again, which
// clippy reports at every `-> PyResult<_>` (PyO3/pyo3#4828, fixed in pyo3 0.23).
#![allow(clippy::useless_conversion)]

use std::cell::{Cell, RefCell};
use std::io::{IsTerminal, Write};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use pyo3::create_exception;
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList, PyTuple};

use reducelab_sim::{EngineStats, RunOptions};

create_exception!(
    reducelab,
    ScenarioError,
    PyValueError,
    "A scenario (or benchmark name) was rejected. `field` is the dotted path of the offending \
     field (e.g. `network.bogus`, empty when the error is not about one field); `reason` says why."
);

/// Builds a Python `ScenarioError` whose message is `FIELD: REASON` (just `REASON` when the error
/// names no field), with the two parts also available as attributes.
fn scenario_error(py: Python<'_>, err: &reducelab_sim::ScenarioError) -> PyErr {
    let py_err = ScenarioError::new_err(err.to_string());
    let value = py_err.value_bound(py);
    // Setting attributes on a fresh exception instance cannot fail short of memory exhaustion; if
    // it does, that error is more informative than the scenario error.
    if let Err(e) =
        value.setattr("field", err.field.as_str()).and_then(|()| value.setattr("reason", err.reason.as_str()))
    {
        return e;
    }
    py_err
}

fn stats_dict<'py>(py: Python<'py>, stats: &EngineStats) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new_bound(py);
    d.set_item("wall_seconds", stats.wall_seconds)?;
    d.set_item("events", stats.events)?;
    d.set_item("packets", stats.packets)?;
    d.set_item("packet_hops", stats.packet_hops)?;
    d.set_item("sim_time_ps", stats.sim_time_ps)?;
    Ok(d)
}

// ---------------------------------------------------------------------------------------------
// Terminal progress bar.

/// The bar appears only for runs that last longer than this, so short runs print nothing extra.
const PROGRESS_DELAY: Duration = Duration::from_secs(2);
const BAR_WIDTH: usize = 40;

/// Reference point for the nanosecond timestamps stored in `RUN_START_NS`.
static EPOCH: OnceLock<Instant> = OnceLock::new();
/// Wall-clock start of the run that owns the bar, in ns since `EPOCH`.
static RUN_START_NS: AtomicU64 = AtomicU64::new(0);
/// Set while some run owns the bar; other concurrent runs then run without one.
static BAR_OWNED: AtomicBool = AtomicBool::new(false);
/// Set once the bar has been drawn, so the end of the run knows to finish the line.
static BAR_DRAWN: AtomicBool = AtomicBool::new(false);

fn now_ns() -> u64 {
    let epoch = *EPOCH.get_or_init(Instant::now);
    u64::try_from(epoch.elapsed().as_nanos()).unwrap_or(u64::MAX)
}

fn render_bar(fraction: f64, elapsed: Duration) -> String {
    let fraction = if fraction.is_finite() { fraction.clamp(0.0, 1.0) } else { 0.0 };
    // Truncation is intended: a cell fills only once its share of the work is done.
    let filled = ((fraction * BAR_WIDTH as f64) as usize).min(BAR_WIDTH);
    // Linear extrapolation of the elapsed wall time; unknown until some work is done.
    let eta = if fraction > 0.0 && fraction < 1.0 {
        format!("  ETA {:.0} s", elapsed.as_secs_f64() * (1.0 - fraction) / fraction)
    } else {
        "          ".to_string()
    };
    format!(
        "\r[{}{}] {:5.1}%  {:.0} s{eta}",
        "#".repeat(filled),
        "-".repeat(BAR_WIDTH - filled),
        fraction * 100.0,
        elapsed.as_secs_f64()
    )
}

thread_local! {
    /// This thread's run owns the progress bar.
    static DRAWS_BAR: Cell<bool> = const { Cell::new(false) };
    /// The exception a signal handler raised during this thread's run.
    static PENDING_SIGNAL: RefCell<Option<PyErr>> = const { RefCell::new(None) };
}

/// The `fn(f64) -> bool` handed to the simulator: draws the bar if this run owns it, then runs
/// Python's signal handlers; false (stop the run) if one raised.
fn poll_run(fraction: f64) -> bool {
    if DRAWS_BAR.with(Cell::get) {
        draw_progress(fraction);
    }
    // Only the main thread runs signal handlers; elsewhere this returns Ok at once.
    match Python::with_gil(|py| py.check_signals()) {
        Ok(()) => true,
        Err(e) => {
            PENDING_SIGNAL.with(|p| *p.borrow_mut() = Some(e));
            false
        }
    }
}

fn draw_progress(fraction: f64) {
    let elapsed = Duration::from_nanos(now_ns().saturating_sub(RUN_START_NS.load(Ordering::Relaxed)));
    if elapsed < PROGRESS_DELAY {
        return;
    }
    let mut err = std::io::stderr().lock();
    // A failed write to the terminal must not abort the simulation.
    let _ = err.write_all(render_bar(fraction, elapsed).as_bytes());
    let _ = err.flush();
    BAR_DRAWN.store(true, Ordering::Relaxed);
}

/// Owns the progress bar for one run; dropping it finishes the bar's line (also on panic).
struct ProgressBar {
    succeeded: bool,
}

impl ProgressBar {
    /// Returns `None` (no bar) when stderr is not a terminal or another run already owns the bar.
    fn start() -> Option<ProgressBar> {
        if !std::io::stderr().is_terminal() {
            return None;
        }
        if BAR_OWNED.compare_exchange(false, true, Ordering::AcqRel, Ordering::Relaxed).is_err() {
            return None;
        }
        BAR_DRAWN.store(false, Ordering::Relaxed);
        RUN_START_NS.store(now_ns(), Ordering::Relaxed);
        Some(ProgressBar { succeeded: false })
    }
}

impl Drop for ProgressBar {
    fn drop(&mut self) {
        if BAR_DRAWN.swap(false, Ordering::Relaxed) {
            let elapsed = Duration::from_nanos(now_ns().saturating_sub(RUN_START_NS.load(Ordering::Relaxed)));
            let mut err = std::io::stderr().lock();
            if self.succeeded {
                let _ = err.write_all(render_bar(1.0, elapsed).as_bytes());
            }
            let _ = err.write_all(b"\n");
            let _ = err.flush();
        }
        BAR_OWNED.store(false, Ordering::Release);
    }
}

// ---------------------------------------------------------------------------------------------
// Module functions.

/// Parses, validates and runs a TOML scenario given as text.
///
/// Returns a dict with `summary_json` (str), `files` (list of `(name, contents)`), `table` (str)
/// and `stats` (engine counters). `seed` overrides the scenario's seed. With `progress=True` a
/// progress bar is drawn on stderr if it is a terminal and the run lasts more than 2 s. With
/// `probe=True` the scenario is validated and stopped at simulated time 1 ps (status
/// `time_limit`) on whichever backend it resolves to. Raises `ScenarioError` for an invalid
/// scenario. The GIL is released during the run; Python's
/// signal handlers run about every 65k events, and if one raises, the run stops and that
/// exception propagates with the partial output dict (status `interrupted`) as `partial_run`.
#[pyfunction]
#[pyo3(signature = (text, seed=None, progress=false, probe=false, base_dir=None))]
fn run<'py>(
    py: Python<'py>,
    text: &str,
    seed: Option<u64>,
    progress: bool,
    probe: bool,
    base_dir: Option<std::path::PathBuf>,
) -> PyResult<Bound<'py, PyDict>> {
    PENDING_SIGNAL.with(|p| p.borrow_mut().take());
    let result = py.allow_threads(|| {
        let mut bar = if progress { ProgressBar::start() } else { None };
        DRAWS_BAR.with(|d| d.set(bar.is_some()));
        let opts = RunOptions { seed, progress: Some(poll_run as fn(f64) -> bool), probe, base_dir };
        let result = reducelab_sim::run_scenario_str(text, &opts);
        DRAWS_BAR.with(|d| d.set(false));
        if let Some(bar) = bar.as_mut() {
            bar.succeeded = result.as_ref().is_ok_and(|o| o.status != reducelab_sim::RunStatus::Interrupted);
        }
        result
    });
    let out = result.map_err(|e| scenario_error(py, &e))?;
    let interrupt = PENDING_SIGNAL.with(|p| p.borrow_mut().take());

    let files = PyList::empty_bound(py);
    for (name, contents) in &out.files {
        files.append(PyTuple::new_bound(py, [name.as_str(), contents.as_str()]))?;
    }
    let d = PyDict::new_bound(py);
    d.set_item("summary_json", out.summary_json)?;
    d.set_item("files", files)?;
    d.set_item("table", out.table)?;
    d.set_item("stats", stats_dict(py, &out.stats)?)?;
    if let Some(e) = interrupt {
        // The run stopped because a signal handler raised: re-raise that exception, carrying
        // what was measured so far (status `interrupted`).
        e.value_bound(py).setattr("partial_run", &d)?;
        return Err(e);
    }
    Ok(d)
}

/// Names of the built-in engine benchmark scenarios.
#[pyfunction]
fn bench_names() -> Vec<&'static str> {
    reducelab_sim::engine_bench_names()
}

/// Runs one built-in engine benchmark by name (GIL released).
///
/// Returns a dict with `name`, `wall_seconds`, `events`, `packets`, `packet_hops`, `sim_time_ps`
/// and `peak_rss_bytes`. Raises `ScenarioError` for an unknown name.
#[pyfunction]
fn bench_engine<'py>(py: Python<'py>, name: &str) -> PyResult<Bound<'py, PyDict>> {
    let result = py.allow_threads(|| reducelab_sim::bench_engine(name));
    let bench = result.map_err(|e| scenario_error(py, &e))?;
    let d = stats_dict(py, &bench.stats)?;
    d.set_item("name", bench.name)?;
    d.set_item("peak_rss_bytes", bench.peak_rss_bytes)?;
    Ok(d)
}

/// Names of the algorithm registry's variants (the names that build schedules).
#[pyfunction]
fn algorithms() -> Vec<&'static str> {
    reducelab_sched::registry::variant_names()
}

/// Every entry of the algorithm registry (`reducelab_sched::registry`), in registry order, as
/// dicts (see `_core.pyi`).
#[pyfunction]
fn algorithm_registry(py: Python<'_>) -> PyResult<Bound<'_, PyList>> {
    let list = PyList::empty_bound(py);
    for a in reducelab_sched::registry::all() {
        let d = PyDict::new_bound(py);
        d.set_item("name", a.name)?;
        d.set_item("family", a.family)?;
        d.set_item("kind", a.kind.as_str())?;
        d.set_item("summary", a.summary)?;
        d.set_item("size_class", a.size_class.map(|c| c.as_str()))?;
        d.set_item("resolves_to", a.resolves_to())?;
        d.set_item("direct_plan", a.direct_plan.is_some())?;
        d.set_item("model_row", a.model_row.is_some())?;
        d.set_item("max_ranks", (a.max_ranks > 0).then_some(a.max_ranks))?;
        d.set_item("min_dims", (a.min_dims > 0).then_some(a.min_dims))?;
        d.set_item("substitute", a.substitute)?;
        d.set_item("collectives", a.collectives())?;
        list.append(d)?;
    }
    Ok(list)
}

/// Exports the schedule of any registry name for a topology spec (GIL released): `format`
/// `json` (the IR), `msccl` (MSCCL XML) or `goal` (LogGOPSim). Families and policies are
/// resolved for `size_bytes` with the `model` defaults; GOAL message sizes are for a vector of
/// `size_bytes` (4-byte elements), with `calc_ns_per_byte` per reduced byte. Raises
/// `ValueError` naming the problem.
#[pyfunction]
#[pyo3(signature = (algorithm, topology, format="json", size_bytes=1 << 20, collective="allreduce", calc_ns_per_byte=0.0, root=0))]
#[allow(clippy::too_many_arguments)] // Python's keyword arguments
fn schedule_export(
    py: Python<'_>,
    algorithm: &str,
    topology: &str,
    format: &str,
    size_bytes: u64,
    collective: &str,
    calc_ns_per_byte: f64,
    root: u32,
) -> PyResult<String> {
    use reducelab_sched::export::{self, ExportOptions, Format, GoalOptions};
    let coll = reducelab_sched::Collective::parse(collective, root)
        .map_err(|r| PyValueError::new_err(format!("collective {r}")))?;
    let format = Format::parse(format).map_err(PyValueError::new_err)?;
    if size_bytes == 0 {
        return Err(PyValueError::new_err("size_bytes must be at least 1"));
    }
    let opts =
        ExportOptions { goal: GoalOptions { size_bytes, elem_bytes: 4, calc_ns_per_byte }, ..Default::default() };
    py.allow_threads(|| {
        let s =
            export::schedule_for(algorithm, topology, coll, size_bytes, &reducelab_sched::registry::Costs::default())?;
        export::export(&s, format, &opts)
    })
    .map_err(PyValueError::new_err)
}

/// Parses a schedule in the JSON IR and runs the symbolic checker on it (GIL released).
/// Returns the schedule's `(algorithm, ranks, blocks, steps)`; raises `ValueError` with the
/// parse or checker error.
#[pyfunction]
fn schedule_check(py: Python<'_>, text: &str) -> PyResult<(String, u32, u32, usize)> {
    py.allow_threads(|| {
        let s = reducelab_sched::Schedule::from_json(text)?;
        reducelab_sched::check(&s).map_err(|e| format!("the schedule fails the checker: {e}"))?;
        Ok::<_, String>((s.algorithm.clone(), s.ranks, s.blocks, s.num_steps()))
    })
    .map_err(PyValueError::new_err)
}

/// Analytical model of an allreduce algorithm on a topology (GIL released): builds the
/// schedule, routes it on the topology and measures the Swing-paper deficiencies (see
/// `reducelab_sched::model`).
///
/// `topology` is a spec such as `torus:64x64`, `hyperx:64x64` or `hammingmesh:2x2,32x32`;
/// `size_bytes` the vector size (per rank: an `alltoall`'s is a rank's send buffer); `collective` and `root` the collective
/// (default `allreduce`); `latency_ns` (α, the latency of every step), `bandwidth_gbps` (link bandwidth,
/// β = 8 / bandwidth) and `switch_latency_ns` (per hop of a step's longest path) the α-β parameters; `d` overrides the `D` of the ideal `n/D` term.
/// `send_overhead_ns`, `send_latency_ns`, `recv_overhead_ns`, `recv_latency_ns`,
/// `rendezvous_threshold_bytes` and `injection_gbps` are the endpoint costs of a scenario's `[endpoint]` table (`time_seconds` includes them,
/// `endpoint_seconds` is their share; a family is resolved without them). Returns a
/// dict (see `_core.pyi`). Raises `ValueError` naming the problem for a bad algorithm,
/// topology or parameter.
#[pyfunction]
#[pyo3(signature = (algorithm, topology, size_bytes=512 * 1024 * 1024, latency_ns=1000.0, bandwidth_gbps=400.0, switch_latency_ns=0.0, d=None, send_overhead_ns=0.0, recv_overhead_ns=0.0, rendezvous_threshold_bytes=None, injection_gbps=None, send_latency_ns=0.0, recv_latency_ns=0.0, collective="allreduce", root=0))]
#[allow(clippy::too_many_arguments)]
fn model<'py>(
    py: Python<'py>,
    algorithm: &str,
    topology: &str,
    size_bytes: u64,
    latency_ns: f64,
    bandwidth_gbps: f64,
    switch_latency_ns: f64,
    d: Option<u32>,
    send_overhead_ns: f64,
    recv_overhead_ns: f64,
    rendezvous_threshold_bytes: Option<u64>,
    injection_gbps: Option<f64>,
    send_latency_ns: f64,
    recv_latency_ns: f64,
    collective: &str,
    root: u32,
) -> PyResult<Bound<'py, PyDict>> {
    for (name, v) in [
        ("latency_ns", latency_ns),
        ("switch_latency_ns", switch_latency_ns),
        ("send_overhead_ns", send_overhead_ns),
        ("recv_overhead_ns", recv_overhead_ns),
        ("send_latency_ns", send_latency_ns),
        ("recv_latency_ns", recv_latency_ns),
    ] {
        if !v.is_finite() || v < 0.0 {
            return Err(PyValueError::new_err(format!("{name} must be a finite number >= 0, got {v}")));
        }
    }
    if !bandwidth_gbps.is_finite() || bandwidth_gbps <= 0.0 {
        return Err(PyValueError::new_err(format!("bandwidth_gbps must be a finite number > 0, got {bandwidth_gbps}")));
    }
    if let Some(g) = injection_gbps {
        if !g.is_finite() || g <= 0.0 {
            return Err(PyValueError::new_err(format!("injection_gbps must be a finite number > 0, got {g}")));
        }
    }
    let ep = reducelab_sched::model::EndpointCosts {
        send_overhead_s: send_overhead_ns * 1e-9,
        send_latency_s: send_latency_ns * 1e-9,
        recv_overhead_s: recv_overhead_ns * 1e-9,
        recv_latency_s: recv_latency_ns * 1e-9,
        rendezvous_threshold_bytes,
        injection_bps: injection_gbps.map(|g| g * 1e9),
    };
    let report = py
        .allow_threads(|| {
            let costs = reducelab_sched::registry::Costs {
                alpha_s: latency_ns * 1e-9,
                beta_s_per_byte: 8.0 / (bandwidth_gbps * 1e9),
                per_hop_s: switch_latency_ns * 1e-9,
            };
            let coll = reducelab_sched::Collective::parse(collective, root).map_err(|r| format!("collective {r}"))?;
            reducelab_sched::model::model_resolved(algorithm, topology, coll, size_bytes, d, Some(&costs))
        })
        .map_err(PyValueError::new_err)?;
    let m = &report.deficiencies;
    let (alpha, beta, hop) = (latency_ns * 1e-9, 8.0 / (bandwidth_gbps * 1e9), switch_latency_ns * 1e-9);
    let out = PyDict::new_bound(py);
    out.set_item("algorithm", &m.algorithm)?;
    out.set_item("resolved_from", &report.resolved_from)?;
    out.set_item("collective", report.collective.name())?;
    out.set_item("topology", &report.topology)?;
    out.set_item("ranks", m.ranks)?;
    out.set_item("d", m.d)?;
    out.set_item("size_bytes", m.size_bytes)?;
    out.set_item("steps", m.steps)?;
    out.set_item("latency_deficiency", m.lambda)?;
    out.set_item("bandwidth_deficiency", m.psi)?;
    out.set_item("congestion_deficiency", m.xi)?;
    out.set_item("congestion_sum", m.xi_sum)?;
    out.set_item("latency_ns", latency_ns)?;
    out.set_item("bandwidth_gbps", bandwidth_gbps)?;
    out.set_item("switch_latency_ns", switch_latency_ns)?;
    out.set_item("send_overhead_ns", send_overhead_ns)?;
    out.set_item("recv_overhead_ns", recv_overhead_ns)?;
    out.set_item("send_latency_ns", send_latency_ns)?;
    out.set_item("recv_latency_ns", recv_latency_ns)?;
    out.set_item("rendezvous_threshold_bytes", rendezvous_threshold_bytes)?;
    out.set_item("injection_gbps", injection_gbps)?;
    let time = m.cost_seconds_endpoint(alpha, beta, hop, &ep);
    out.set_item("time_seconds", time)?;
    out.set_item("endpoint_seconds", time - m.cost_seconds(alpha, beta, hop))?;
    out.set_item("latency_seconds", m.cost_seconds(alpha, 0.0, hop))?;
    out.set_item("bandwidth_seconds", m.cost_seconds(0.0, beta, 0.0))?;
    let steps = PyList::empty_bound(py);
    for s in &m.per_step {
        let row = PyDict::new_bound(py);
        row.set_item("port_bytes", s.max_port_bytes)?;
        row.set_item("link_bytes", s.max_link_bytes)?;
        row.set_item("congestion", s.congestion)?;
        row.set_item("hops", s.max_hops)?;
        row.set_item("messages", s.messages)?;
        row.set_item("bytes", s.bytes)?;
        steps.append(row)?;
    }
    out.set_item("per_step", steps)?;
    match &report.table2 {
        None => out.set_item("table2", py.None())?,
        Some(t) => {
            let row = PyDict::new_bound(py);
            row.set_item("row", t.row)?;
            row.set_item("latency_deficiency", t.lambda)?;
            row.set_item("bandwidth_deficiency", t.psi)?;
            row.set_item("congestion_deficiency", t.xi)?;
            row.set_item("congestion_formula", t.xi_formula)?;
            let convention = match t.xi_convention {
                reducelab_sched::model::XiConvention::Weighted => "weighted",
                reducelab_sched::model::XiConvention::Sum => "sum",
            };
            row.set_item("congestion_convention", convention)?;
            row.set_item("note", t.note)?;
            out.set_item("table2", row)?;
        }
    }
    Ok(out)
}

// ---------------------------------------------------------------------------------------------
// Collectives on a whole topology (reducelab_sim::collective_run).

fn collective_dict<'py>(
    py: Python<'py>,
    o: &reducelab_sim::collective_run::CollectiveOutcome,
    net: &reducelab_sim::collective_run::NetworkOverrides,
    seed: u64,
) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new_bound(py);
    d.set_item("topology", &o.topology)?;
    d.set_item("algorithm", &o.algorithm)?;
    d.set_item("ranks", o.ranks)?;
    d.set_item("size_bytes", o.size_bytes)?;
    d.set_item("backend", o.backend.name())?;
    d.set_item("backend_reason", &o.backend_reason)?;
    d.set_item("runtime_ps", o.runtime_ps)?;
    d.set_item("goodput_gbps", o.goodput_gbps)?;
    d.set_item("verified", o.verified)?;
    d.set_item("mismatch", o.mismatch.as_deref())?;
    d.set_item("messages", o.messages)?;
    d.set_item("bandwidth_gbps", net.bandwidth_gbps)?;
    d.set_item("latency_ns", net.latency_ns)?;
    d.set_item("switch_latency_ns", net.switch_latency_ns)?;
    d.set_item("buffer_bytes", o.buffer_bytes)?;
    d.set_item("seed", seed)?;
    d.set_item("wall_seconds", o.wall_seconds)?;
    Ok(d)
}

fn collective_params(
    backend: &str,
    bandwidth_gbps: f64,
    latency_ns: f64,
    switch_latency_ns: f64,
    buffer_bytes: Option<u64>,
) -> PyResult<(reducelab_sim::collective_run::Backend, reducelab_sim::collective_run::NetworkOverrides)> {
    use reducelab_sim::collective_run::{Backend, NetworkOverrides};
    let backend = Backend::parse(backend).map_err(PyValueError::new_err)?;
    let net = NetworkOverrides {
        bandwidth_gbps: Some(bandwidth_gbps),
        latency_ns: Some(latency_ns),
        switch_latency_ns: Some(switch_latency_ns),
        buffer_bytes,
    };
    Ok((backend, net))
}

/// Runs one allreduce of `size_bytes` with `algorithm` on a whole topology (rank r on host r)
/// through the scenario path (GIL released): `scenarios/swing/network.toml` with
/// `topology.shape = topology`, links of `bandwidth_gbps` and `latency_ns`,
/// `network.switch_latency_ns = switch_latency_ns`, line-rate buffers (`buffer_bytes` overrides them),
/// `run.backend = backend`.
///
/// `backend` is `"packet"` (data verified per rank), `"flow"` (pipelined fluid model, not verified) or
/// `"auto"` (packet below 8 MiB, flow from 8 MiB, and flow at every size where
/// summary.json's `backend_reason` says so (contention-free plans, too many fingerprints)). Returns a dict (see `_core.pyi`). Raises
/// `ValueError` naming the scenario field for a bad topology, algorithm, backend or parameter,
/// or if the packet-level run does not finish. Kept for the reproduction harness; new code
/// runs a scenario with `run`.
#[pyfunction]
#[pyo3(signature = (topology, algorithm, size_bytes, backend="auto", bandwidth_gbps=400.0, latency_ns=100.0, switch_latency_ns=300.0, seed=1, buffer_bytes=None))]
#[allow(clippy::too_many_arguments)]
fn run_collective<'py>(
    py: Python<'py>,
    topology: &str,
    algorithm: &str,
    size_bytes: u64,
    backend: &str,
    bandwidth_gbps: f64,
    latency_ns: f64,
    switch_latency_ns: f64,
    seed: u64,
    buffer_bytes: Option<u64>,
) -> PyResult<Bound<'py, PyDict>> {
    let (backend, net) = collective_params(backend, bandwidth_gbps, latency_ns, switch_latency_ns, buffer_bytes)?;
    let out = py
        .allow_threads(|| {
            reducelab_sim::collective_run::run_collective(topology, algorithm, size_bytes, backend, &net, seed)
        })
        .map_err(PyValueError::new_err)?;
    collective_dict(py, &out, &net, seed)
}

/// `run_collective` for a list of sizes (GIL released), the sizes on up to `threads` threads;
/// schedules and plans come from the process-wide caches, so they are built once. Returns one
/// dict per size, in order.
#[pyfunction]
#[pyo3(signature = (topology, algorithm, sizes, backend="auto", bandwidth_gbps=400.0, latency_ns=100.0, switch_latency_ns=300.0, seed=1, buffer_bytes=None, threads=1))]
#[allow(clippy::too_many_arguments)]
fn run_collective_sizes<'py>(
    py: Python<'py>,
    topology: &str,
    algorithm: &str,
    sizes: Vec<u64>,
    backend: &str,
    bandwidth_gbps: f64,
    latency_ns: f64,
    switch_latency_ns: f64,
    seed: u64,
    buffer_bytes: Option<u64>,
    threads: usize,
) -> PyResult<Bound<'py, PyList>> {
    let (backend, net) = collective_params(backend, bandwidth_gbps, latency_ns, switch_latency_ns, buffer_bytes)?;
    if threads == 0 {
        return Err(PyValueError::new_err("threads must be at least 1, got 0"));
    }
    let outs = py
        .allow_threads(|| {
            reducelab_sim::collective_run::run_collective_sizes(
                topology, algorithm, &sizes, backend, &net, seed, threads,
            )
        })
        .map_err(PyValueError::new_err)?;
    let list = PyList::empty_bound(py);
    for o in &outs {
        list.append(collective_dict(py, o, &net, seed)?)?;
    }
    Ok(list)
}

/// The topology spec `spec` (`torus:8x8`, `hyperx:16x16`, `hammingmesh:2x2,32x32`) parsed by
/// the one parser (the same as a scenario's `topology.shape` and `reducelab model`): a dict
/// with `canonical`, `kind`, `hosts`, `dims` (torus/HyperX dimensions, or the HammingMesh's
/// global grid of ranks), `board` and `grid` (HammingMesh; else None). Raises `ValueError`
/// naming the problem.
#[pyfunction]
fn topology_spec<'py>(py: Python<'py>, spec: &str) -> PyResult<Bound<'py, PyDict>> {
    use reducelab_sched::TopologyShape;
    let t = TopologyShape::parse(spec).map_err(PyValueError::new_err)?;
    let d = PyDict::new_bound(py);
    d.set_item("canonical", t.spec())?;
    d.set_item("kind", t.kind())?;
    d.set_item("hosts", t.hosts())?;
    let (dims, board, grid) = match &t {
        TopologyShape::Torus(d) | TopologyShape::HyperX(d) => {
            (d.iter().map(|&x| x as u64).collect::<Vec<u64>>(), None, None)
        }
        TopologyShape::HammingMesh { board, grid } => (
            vec![board.0 as u64 * grid.0 as u64, board.1 as u64 * grid.1 as u64],
            Some(vec![board.0, board.1]),
            Some(vec![grid.0, grid.1]),
        ),
    };
    d.set_item("dims", dims)?;
    d.set_item("board", board)?;
    d.set_item("grid", grid)?;
    Ok(d)
}

/// One rank's in-network allreduce through running software switches (crates/switch): host
/// `host` of the scenario contributes `data` (int32 values, native byte order) to allreduce
/// `tenant` and gets the element-wise wrapping sum back, as bytes. Every host of the allreduce
/// must call this (each in its own thread or process) with the same scenario, endpoints and
/// `start_at` (seconds since the epoch: each host binds its socket, then waits until then, so
/// no packet reaches an unbound host). Raises `ValueError` for a bad scenario, host or length,
/// `RuntimeError` when the run cannot finish (timeout: what is missing and why) or a result
/// fails its fingerprint check. The GIL is released during the run.
#[pyfunction]
#[pyo3(signature = (text, host, data, tenant=0, ip_base="127.0.100.1", port_base=47000, timeout_s=10.0, start_at=None))]
#[allow(clippy::too_many_arguments)]
fn innet_allreduce<'py>(
    py: Python<'py>,
    text: &str,
    host: u32,
    data: &[u8],
    tenant: u16,
    ip_base: &str,
    port_base: u16,
    timeout_s: f64,
    start_at: Option<f64>,
) -> PyResult<(Bound<'py, pyo3::types::PyBytes>, String)> {
    let ip: std::net::Ipv4Addr =
        ip_base.parse().map_err(|_| PyValueError::new_err(format!("ip_base: `{ip_base}` is not an IPv4 address")))?;
    if data.len() % 4 != 0 {
        return Err(PyValueError::new_err(format!("data: {} bytes is not a whole number of int32 values", data.len())));
    }
    if !(timeout_s.is_finite() && timeout_s > 0.0) {
        return Err(PyValueError::new_err(format!("timeout_s: must be a positive number of seconds, got {timeout_s}")));
    }
    let values: Vec<i32> = data.chunks_exact(4).map(|c| i32::from_ne_bytes([c[0], c[1], c[2], c[3]])).collect();
    let plan = reducelab_switch::InaPlan::from_scenario(text, None, (ip, port_base)).map_err(PyValueError::new_err)?;
    let opts = reducelab_switch::HostOptions {
        timeout: Duration::from_secs_f64(timeout_s),
        start_at: start_at.map(|t| std::time::UNIX_EPOCH + Duration::from_secs_f64(t.max(0.0))),
        ..reducelab_switch::HostOptions::default()
    };
    if host as usize >= plan.fabric.num_hosts()
        || plan.colls.get(tenant as usize).is_some_and(|c| !c.ranks.contains(&host))
    {
        return Err(PyValueError::new_err(format!("host: {host} is not a rank of allreduce {tenant} of the scenario")));
    }
    let (report, sum) =
        py.allow_threads(|| reducelab_switch::allreduce_data(&plan, host, &opts, tenant, values)).map_err(|e| {
            if e.starts_with("data:") || e.starts_with("tenant:") || e.starts_with("host:") && !e.contains("timed out")
            {
                PyValueError::new_err(e)
            } else {
                pyo3::exceptions::PyRuntimeError::new_err(e)
            }
        })?;
    let bytes: Vec<u8> = sum.iter().flat_map(|v| v.to_ne_bytes()).collect();
    let json = serde_json::to_string(&report).map_err(|e| pyo3::exceptions::PyRuntimeError::new_err(e.to_string()))?;
    Ok((pyo3::types::PyBytes::new_bound(py, &bytes), json))
}

#[pymodule]
fn _core(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("ScenarioError", m.py().get_type_bound::<ScenarioError>())?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    m.add_function(wrap_pyfunction!(run, m)?)?;
    m.add_function(wrap_pyfunction!(innet_allreduce, m)?)?;
    m.add_function(wrap_pyfunction!(bench_names, m)?)?;
    m.add_function(wrap_pyfunction!(bench_engine, m)?)?;
    m.add_function(wrap_pyfunction!(algorithms, m)?)?;
    m.add_function(wrap_pyfunction!(algorithm_registry, m)?)?;
    m.add_function(wrap_pyfunction!(schedule_export, m)?)?;
    m.add_function(wrap_pyfunction!(schedule_check, m)?)?;
    m.add_function(wrap_pyfunction!(model, m)?)?;
    m.add_function(wrap_pyfunction!(run_collective, m)?)?;
    m.add_function(wrap_pyfunction!(run_collective_sizes, m)?)?;
    m.add_function(wrap_pyfunction!(topology_spec, m)?)?;
    m.add("AUTO_FLOW_MIN_BYTES", reducelab_sim::collective_run::AUTO_FLOW_MIN_BYTES)?;
    Ok(())
}
