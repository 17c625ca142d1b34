//! Scenario files → simulated worlds → result files.
//!
//! (API skeleton; implementation in progress.)

use std::fmt;

/// Options that are not part of the scenario file.
#[derive(Clone, Debug, Default)]
pub struct RunOptions {
    /// Overrides `seed` in the scenario when set.
    pub seed: Option<u64>,
    /// Called periodically (about every 100 ms of wall time) with the fraction done in [0, 1]
    /// estimated from simulated progress. Never called when `None`.
    pub progress: Option<fn(f64)>,
}

/// Everything a run produces. File contents are deterministic: same scenario + seed →
/// identical bytes (no wall-clock values inside them).
#[derive(Clone, Debug)]
pub struct RunOutput {
    /// Contents of `summary.json`.
    pub summary_json: String,
    /// Other files to write into the output directory: (file name, contents), e.g.
    /// `("messages.csv", ...)`, `("links.csv", ...)`.
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

/// A scenario error: `field` is the dotted path of the offending field (e.g.
/// `topology.dims[1]`), `reason` says why it is wrong.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ScenarioError {
    pub field: String,
    pub reason: String,
}

impl fmt::Display for ScenarioError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.field.is_empty() {
            write!(f, "{}", self.reason)
        } else {
            write!(f, "{}: {}", self.field, self.reason)
        }
    }
}
impl std::error::Error for ScenarioError {}

/// Parses, validates and runs a TOML scenario.
pub fn run_scenario_str(_text: &str, _opts: &RunOptions) -> Result<RunOutput, ScenarioError> {
    Err(ScenarioError { field: String::new(), reason: "not implemented yet".into() })
}

/// One engine benchmark result (see `bench_engine`).
#[derive(Clone, Debug)]
pub struct BenchResult {
    pub name: String,
    pub stats: EngineStats,
    pub peak_rss_bytes: u64,
}

/// Names of the built-in engine benchmark scenarios (`reducelab bench engine`).
pub fn engine_bench_names() -> Vec<&'static str> {
    vec![]
}

/// Runs one built-in engine benchmark scenario by name.
pub fn bench_engine(name: &str) -> Result<BenchResult, ScenarioError> {
    Err(ScenarioError { field: "name".into(), reason: format!("unknown benchmark '{name}'") })
}
