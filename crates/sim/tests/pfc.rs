//! PFC through the one door: a scenario file with `flow_control = "pfc"` runs lossless, and
//! its result files carry the PFC counters.

use reducelab_sim::{run_scenario_str, RunOptions, RunStatus};
use serde_json::Value;

#[test]
fn the_pfc_incast_example_completes_lossless_and_reports_its_pauses() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../scenarios/examples/fattree_pfc_incast.toml");
    let text = std::fs::read_to_string(path).unwrap();
    let out = run_scenario_str(&text, &RunOptions::default()).unwrap();
    assert_eq!(out.status, RunStatus::Completed, "{}", out.table);
    let s: Value = serde_json::from_str(&out.summary_json).unwrap();
    assert_eq!(s["network"]["flow_control"], "Pfc");
    assert_eq!(s["messages"]["verified"], 12);
    for cause in ["buffer", "loss", "failure", "no_route"] {
        assert_eq!(s["drops"][cause], 0, "{cause}");
    }
    let p = &s["pfc"];
    assert!(p["pause_frames"].as_u64().unwrap() > 0 && p["resume_frames"].as_u64().unwrap() > 0, "{p}");
    assert!(p["paused_ps"].as_u64().unwrap() > 0, "{p}");
    let peak = p["max_ingress_bytes"].as_u64().unwrap();
    assert!(peak > 0 && peak <= p["min_xoff_plus_headroom_bytes"].as_u64().unwrap(), "{p}");
    // links.csv: one row per direction with its pauses; they add up to the summary.
    let links = &out.files.iter().find(|(n, _)| n == "links.csv").unwrap().1;
    let mut rows = links.lines();
    let head: Vec<&str> = rows.next().unwrap().split(',').collect();
    let col = |name: &str| head.iter().position(|h| *h == name).unwrap_or_else(|| panic!("no column {name}"));
    let (paused, ingress) = (col("pfc_paused_ps"), col("pfc_max_ingress_bytes"));
    let (mut total, mut max) = (0u64, 0u64);
    for r in rows {
        let f: Vec<&str> = r.split(',').collect();
        total += f[paused].parse::<u64>().unwrap();
        max = max.max(f[ingress].parse().unwrap());
    }
    assert_eq!(total, p["paused_ps"].as_u64().unwrap());
    assert_eq!(max, peak);
    assert!(out.table.contains("pfc "), "{}", out.table);
}
