//! `network.adaptive_threshold_bytes`: the threshold of `routing = "canary"` (threshold-adaptive
//! routing), validated, and with Canary's own value the same run as without it.

use reducelab_sim::{load_scenario_str, run_scenario_str, RunOptions, RunStatus};

/// 2 leaves x 4 hosts, 2 spines; leaf 0's hosts all send to hosts of leaf 1 that
/// destination-mod-k maps to one spine, so the threshold decides the spreading.
fn scenario(network_extra: &str) -> String {
    format!(
        r#"
name = "t"
seed = 1
[topology]
kind = "fat_tree_2"
leaves = 2
hosts_per_leaf = 4
spines = 2
bandwidth_gbps = 100
latency_ns = 1000
[network]
buffer_bytes = 32771
routing = "canary"
{network_extra}
[[traffic]]
kind = "messages"
list = [[0, 4, 4000000, 0], [1, 6, 4000000, 0], [2, 4, 4000000, 0], [3, 6, 4000000, 0]]
"#
    )
}

fn summary(text: &str) -> String {
    let out = run_scenario_str(text, &RunOptions::default()).expect("runs");
    assert_eq!(out.status, RunStatus::Completed);
    out.summary_json
}

#[test]
fn canarys_threshold_written_out_is_the_same_run_and_another_one_is_not() {
    let canary = summary(&scenario(""));
    assert!(canary.contains("\"routing\": \"Canary\""), "{canary}");
    let half = summary(&scenario("adaptive_threshold_bytes = 16385"));
    let strip = |s: &str| s.lines().filter(|l| !l.contains("\"routing\"")).collect::<Vec<_>>().join("\n");
    assert_eq!(strip(&canary), strip(&half), "32771 / 2 = 16385 bytes is Canary's 50%");
    assert!(half.contains("\"routing\": \"ThresholdAdaptive(Bytes(16385))\""), "{half}");
    let never = summary(&scenario("adaptive_threshold_bytes = 1000000000"));
    assert_ne!(strip(&canary), strip(&never));
}

#[test]
fn the_threshold_needs_threshold_adaptive_routing() {
    let text = scenario("adaptive_threshold_bytes = 1000").replace("routing = \"canary\"", "routing = \"adaptive\"");
    let err = load_scenario_str(&text, None).err().expect("rejected");
    assert_eq!(err.field, "network.adaptive_threshold_bytes");
    assert!(err.reason.contains("canary"), "{err}");
    let bad = scenario("adaptive_threshold_bytes = -1");
    let err = load_scenario_str(&bad, None).err().expect("rejected");
    assert!(err.to_string().contains("adaptive_threshold_bytes"), "{err}");
}
