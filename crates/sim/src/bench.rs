//! Built-in engine benchmarks (`reducelab bench engine`). Their scenarios are shipped as
//! files under `scenarios/bench/` and embedded here so the benchmark needs no paths.

use crate::{run_scenario, EngineStats, RunOptions, ScenarioError};

/// One engine benchmark result.
#[derive(Clone, Debug)]
pub struct BenchResult {
    pub name: String,
    pub stats: EngineStats,
    /// Peak resident memory of the process during the run (VmHWM, reset before the run
    /// where the kernel allows it).
    pub peak_rss_bytes: u64,
    /// Whether every message was delivered and verified.
    pub verified: bool,
}

const BENCHES: &[(&str, &str)] = &[
    ("htsim-permutation", include_str!("../../../scenarios/bench/htsim_permutation.toml")),
    ("htsim-permutation-ndp", include_str!("../../../scenarios/bench/htsim_permutation_ndp.toml")),
    ("canary-uniform", include_str!("../../../scenarios/bench/canary_uniform.toml")),
    ("torus-permutation", include_str!("../../../scenarios/bench/torus_permutation.toml")),
    ("canary-fig8-point", include_str!("../../../scenarios/bench/canary_fig8_point.toml")),
    // One full-scale Flare Fig. 15 point (64 hosts, 100 MiB, sparse Flare).
    ("flare-fig15-point", include_str!("../../../scenarios/bench/flare_fig15_point.toml")),
    // The largest point of DSA's Fig. 8: 8 jobs x 8 workers training DNN A on DSA.
    ("dsa-fig8-point", include_str!("../../../scenarios/bench/dsa_fig8_point.toml")),
    ("flare-fig11-point", include_str!("../../../scenarios/bench/flare_fig11_point.toml")),
    // The NDP permutation against htsim at three sizes, the same work as htsim's `-strat perm`
    // (docs/engine.md, "Performance"); the two large ones take minutes and are left out of
    // `reducelab bench engine` without `--name`.
    ("ndp-permutation-1k", include_str!("../../../scenarios/bench/ndp_permutation_1k.toml")),
    ("ndp-permutation-8k", include_str!("../../../scenarios/bench/ndp_permutation_8k.toml")),
    ("ndp-permutation-27k", include_str!("../../../scenarios/bench/ndp_permutation_27k.toml")),
];

/// Names of the built-in engine benchmark scenarios.
pub fn engine_bench_names() -> Vec<&'static str> {
    BENCHES.iter().map(|(n, _)| *n).collect()
}

fn read_status_kb(key: &str) -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with(key))
                .and_then(|l| l.split_whitespace().nth(1).and_then(|v| v.parse().ok()))
        })
        .unwrap_or(0)
}

/// Runs one built-in engine benchmark scenario by name.
pub fn bench_engine(name: &str) -> Result<BenchResult, ScenarioError> {
    let text = BENCHES.iter().find(|(n, _)| *n == name).map(|(_, t)| *t).ok_or_else(|| ScenarioError {
        field: "name".into(),
        reason: format!("unknown benchmark '{name}' (known: {})", engine_bench_names().join(", ")),
    })?;
    // Reset the peak-RSS counter so it reflects this run (Linux ≥ 4.0; ignored elsewhere).
    let file = crate::scenario::parse(text)?;
    let out = if file.pspin.is_some() {
        let _ = std::fs::write("/proc/self/clear_refs", "5");
        crate::pspin_run::run(&file, &RunOptions::default())?
    } else {
        let sc = file.resolve(None)?;
        let _ = std::fs::write("/proc/self/clear_refs", "5");
        run_scenario(sc, &RunOptions::default())?
    };
    let peak = read_status_kb("VmHWM:") * 1024;
    let summary: serde_json::Value = serde_json::from_str(&out.summary_json).expect("own json");
    Ok(BenchResult {
        name: name.to_string(),
        stats: out.stats,
        peak_rss_bytes: peak,
        verified: summary["status"] == "completed",
    })
}
