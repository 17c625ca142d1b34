//! End-to-end runs of training jobs on a shared switch memory (`kind = "training"`: SwitchML,
//! ATP, DSA) through the one door: loss at a worker and at a parameter server, a PS restart,
//! a topology with several switches, a run that cannot finish, determinism, and a property test
//! over random loss, seeds, pool sizes and job shapes. Every run must end with every job's
//! results verified (fingerprints and element values) and every aggregator free.

use reducelab_des::Rng;
use reducelab_sim::{run_scenario_str, RunOptions, RunStatus};
use serde_json::Value;

/// A small star run: `jobs` jobs of `workers` workers, DNN A and B at 1/100 size.
fn scenario(protocol: &str, seed: u64, jobs: u32, workers: u32, memory_bytes: u64, extra_traffic: &str, faults: &str) -> String {
    let hosts = jobs * (workers + 1);
    format!(
        r#"name = "training-test"
seed = {seed}
[topology]
kind = "star"
hosts = {hosts}
bandwidth_gbps = 100
latency_ns = 2500
[network]
mtu_bytes = 306
buffer_bytes = 1048576
ecn_threshold_bytes = 65536
[run]
time_limit_us = 1000000
[[traffic]]
kind = "training"
protocol = "{protocol}"
jobs = {jobs}
workers = {workers}
models = ["A", "B"]
model_scale = 0.01
switch_memory_bytes = {memory_bytes}
start_max_us = 20
jitter_max_us = 10
window_bytes = 6120
min_rto_us = 50
values = true
{extra_traffic}
{faults}
"#
    )
}

struct Run {
    status: RunStatus,
    summary: Value,
    bytes: Vec<u8>,
}

fn run(text: &str) -> Run {
    let out = run_scenario_str(text, &RunOptions::default()).unwrap_or_else(|e| panic!("{e}\n{text}"));
    let mut bytes = out.summary_json.clone().into_bytes();
    for (n, c) in &out.files {
        bytes.extend(n.bytes());
        bytes.extend(c.bytes());
    }
    Run { status: out.status, summary: serde_json::from_str(&out.summary_json).expect("json"), bytes }
}

fn training(r: &Run) -> &Value {
    &r.summary["training"]
}

/// Completed, every job verified with values, every aggregator free.
fn assert_clean(r: &Run, what: &str) {
    assert_eq!(r.status, RunStatus::Completed, "{what}: {}", r.summary["status_reason"]);
    let t = training(r);
    let jobs = r.summary["traffic"][0]["jobs"].as_array().expect("jobs");
    for j in jobs {
        assert_eq!(j["verified"], true, "{what}: job {j}");
        assert_eq!(j["bad_results"], 0, "{what}");
        assert!(j["jct_ps"].as_u64().unwrap() > 0, "{what}");
    }
    assert_eq!(t["values_checked"], true, "{what}");
    assert_eq!(t["aggregators_left"], 0, "{what}: {t}");
}

const WORKER_LOSS: &str = "[[faults]]\nkind = \"loss\"\nlink = 1\nprobability = 0.02";
/// Job 0's parameter server is host jobs·workers = 8 (2 jobs of 4), on link 8.
const PS_LOSS: &str = "[[faults]]\nkind = \"loss\"\nlink = 8\nprobability = 0.02";

#[test]
fn every_protocol_finishes_verified_and_frees_every_aggregator() {
    for p in ["switchml", "atp", "dsa"] {
        let r = run(&scenario(p, 1, 2, 4, 30_600, "", ""));
        assert_clean(&r, p);
        let t = training(&r);
        // A 100-aggregator pool shared by two jobs of 20-packet windows: the hashed protocols
        // collide; SwitchML's regions never do.
        match p {
            "switchml" => assert_eq!((t["switch"]["fallbacks"].as_u64(), t["switch"]["completed"].as_u64().unwrap() > 0), (Some(0), true)),
            "atp" => assert!(t["switch"]["fallbacks"].as_u64().unwrap() > 0, "{t}"),
            _ => assert!(t["switch"]["preemptions"].as_u64().unwrap() > 0, "{t}"),
        }
        assert_eq!(t["lost_packets"], 0);
    }
}

#[test]
fn loss_at_a_worker_and_at_the_ps_is_recovered() {
    for p in ["switchml", "atp", "dsa"] {
        let r = run(&scenario(p, 2, 2, 4, 30_600, "", WORKER_LOSS));
        assert_clean(&r, &format!("{p} worker loss"));
        let t = training(&r);
        assert!(t["lost_packets"].as_u64().unwrap() > 0 && t["workers"]["retransmissions"].as_u64().unwrap() > 0, "{p}: {t}");
    }
    for p in ["atp", "dsa"] {
        let r = run(&scenario(p, 3, 2, 4, 30_600, "", PS_LOSS));
        assert_clean(&r, &format!("{p} PS loss"));
        let t = training(&r);
        assert!(t["lost_packets"].as_u64().unwrap() > 0, "{p}: {t}");
    }
}

#[test]
fn a_ps_restart_loses_partial_aggregates_and_the_workers_rebuild_them() {
    for p in ["atp", "dsa"] {
        // Mid-epoch: the PSes hold partial aggregates (collisions in a 100-aggregator pool).
        let r = run(&scenario(p, 4, 2, 4, 30_600, "ps_restart_us = 40", ""));
        assert_clean(&r, &format!("{p} PS restart"));
        let t = training(&r);
        assert_eq!(t["ps_restarts"], 1);
        assert!(t["workers"]["retransmissions"].as_u64().unwrap() > 0, "{p}: nothing was rebuilt: {t}");
    }
}

#[test]
fn jobs_spanning_racks_aggregate_on_a_spine_of_a_fat_tree() {
    for p in ["switchml", "atp", "dsa"] {
        let text = scenario(p, 5, 2, 4, 30_600, "", "").replace(
            "kind = \"star\"\nhosts = 10",
            "kind = \"fat_tree_2\"\nleaves = 4\nhosts_per_leaf = 3\nspines = 2",
        );
        let r = run(&text);
        assert_clean(&r, p);
        let jobs = r.summary["traffic"][0]["jobs"].as_array().unwrap().clone();
        // Job 0 (hosts 0-3 and its PS, host 8) spans leaves 0, 1 and 2: a spine (nodes after
        // the 12 hosts and 4 leaves) is the only switch that every host reaches in two hops.
        let sw = jobs[0]["switch_node"].as_u64().unwrap();
        assert!(sw >= 16, "{p}: job 0 aggregates on node {sw}");
    }
}

#[test]
fn a_worker_cut_off_ends_the_run_as_stalled_with_the_reason() {
    let r = run(&scenario("dsa", 6, 1, 2, 30_600, "", "[[faults]]\nkind = \"link\"\nlink = 1\nat_ns = 0"));
    assert_eq!(r.status, RunStatus::Stalled, "{}", r.summary);
    let why = r.summary["status_reason"].as_str().unwrap_or_default();
    assert!(why.contains("training job 0") && why.contains("gave up"), "{why}");
}

#[test]
fn same_seed_same_bytes_other_seed_other_bytes() {
    let a = run(&scenario("dsa", 7, 2, 4, 30_600, "", WORKER_LOSS));
    let b = run(&scenario("dsa", 7, 2, 4, 30_600, "", WORKER_LOSS));
    let c = run(&scenario("dsa", 8, 2, 4, 30_600, "", WORKER_LOSS));
    assert!(a.bytes == b.bytes, "same scenario and seed gave different result files");
    assert!(a.bytes != c.bytes);
}

/// Random protocols, seeds, loss on a random host link, pool sizes (down to a handful of
/// aggregators), job and worker counts, strawman preemption rules: every run completes
/// verified with every aggregator free.
#[test]
fn property_random_loss_seeds_and_pool_sizes() {
    let mut rng = Rng::new(0x7EA1);
    for case in 0..14 {
        let p = ["switchml", "atp", "dsa", "dsa"][rng.below(4) as usize];
        let jobs = 1 + rng.below(3) as u32;
        let workers = 1 + rng.below(5) as u32;
        let min_aggs = if p == "switchml" { 2 * jobs as u64 } else { 1 };
        let memory = 306 * (min_aggs + rng.below(300));
        let hosts = jobs * (workers + 1);
        let loss = rng.below(4) as f64 * 0.01;
        let faults = if loss > 0.0 { format!("[[faults]]\nkind = \"loss\"\nlink = {}\nprobability = {loss}", rng.below(hosts as u64)) } else { String::new() };
        let extra = match (p, rng.below(3)) {
            ("dsa", 1) => "preemption = \"always\"",
            ("dsa", 2) => "preemption = \"coin\"",
            _ => "",
        };
        let seed = rng.next_u64() % 1000;
        let text = scenario(p, seed, jobs, workers, memory, extra, &faults);
        let r = run(&text);
        assert_clean(&r, &format!("case {case}: {p} {extra} seed {seed}, {jobs}x{workers}, {memory} B, loss {loss}"));
    }
}
