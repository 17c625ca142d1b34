//! End-to-end runs of training jobs on a shared switch memory (`kind = "training"`: SwitchML,
//! ATP, DSA) through the one door: loss at a worker and at a parameter server, a PS restart,
//! a topology with several switches, a run that cannot finish, determinism, and property tests
//! over random loss, duplication, reordering, seeds, pool sizes and job shapes. Every run must end with every job's
//! results verified (fingerprints and element values) and every aggregator free.

use reducelab_des::Rng;
use reducelab_sim::{run_scenario_str, RunOptions, RunStatus};
use serde_json::Value;

/// A small star run: `jobs` jobs of `workers` workers, DNN A and B at 1/100 size.
fn scenario(
    protocol: &str,
    seed: u64,
    jobs: u32,
    workers: u32,
    memory_bytes: u64,
    extra_traffic: &str,
    faults: &str,
) -> String {
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
[ina]
switch_memory_bytes = {memory_bytes}
[[traffic]]
kind = "training"
protocol = "{protocol}"
jobs = {jobs}
workers = {workers}
models = ["A", "B"]
model_scale = 0.01
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

/// A `[network]` header with the duplication and reordering faults, each in half the cases:
/// up to 10 % of the protocol packets sent twice per link, up to 20 % held back 0.1–20 µs.
fn dup_and_reorder(rng: &mut Rng) -> String {
    let mut keys = String::from("[network]\n");
    if rng.below(2) == 0 {
        keys += &format!("duplicate_probability = {:.3}\n", rng.below(100) as f64 / 1000.0);
    }
    if rng.below(2) == 0 {
        keys += &format!(
            "reorder_probability = {:.3}\nreorder_delay_ns = {}\n",
            (1 + rng.below(200)) as f64 / 1000.0,
            100 + rng.below(20_000)
        );
    }
    keys
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
            "switchml" => assert_eq!(
                (t["switch"]["fallbacks"].as_u64(), t["switch"]["completed"].as_u64().unwrap() > 0),
                (Some(0), true)
            ),
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
        assert!(
            t["lost_packets"].as_u64().unwrap() > 0 && t["workers"]["retransmissions"].as_u64().unwrap() > 0,
            "{p}: {t}"
        );
    }
    for p in ["atp", "dsa"] {
        let r = run(&scenario(p, 3, 2, 4, 30_600, "", PS_LOSS));
        assert_clean(&r, &format!("{p} PS loss"));
        let t = training(&r);
        assert!(t["lost_packets"].as_u64().unwrap() > 0, "{p}: {t}");
    }
}

#[test]
fn the_windows_of_atp_and_dsa_shrink_on_ecn_only_not_on_timeouts() {
    // DSA §III-D: "Like ATP [34], DSA applies on-switch ECN as the congestion signal"; ATP's
    // worker code changes its window only in adjustWindow(isECN). ATP's window used to halve
    // on every timeout round: at the full Fig. 8 point (8 jobs of DNN B) 27 009 halvings, a
    // window of about one packet and 69 aggregators in use on average, JCT 21.3 ms (2.9 ms
    // without).
    for p in ["atp", "dsa"] {
        let r = run(&scenario(p, 2, 2, 4, 30_600, "", WORKER_LOSS));
        assert_clean(&r, p);
        let w = &training(&r)["workers"];
        let n = |k: &str| w[k].as_u64().unwrap();
        assert!(n("timeouts") > 0, "{p}: no timeout to react to: {w}");
        assert!(n("window_decreases") <= n("ecn_echoes"), "{p}: the window shrank on timeouts: {w}");
    }
}

#[test]
fn atp_completes_split_tasks_by_gap_resends_not_timeouts() {
    // A 100-aggregator pool shared by four jobs: tasks split between the PS (a collision) and
    // the switch (the freed aggregator re-reserved). ATP's worker resends the gap as soon as
    // an ACK above it arrives (its p4ml_manager.cc); only a timeout (1 ms at full scale) used
    // to complete them.
    let r = run(&scenario("atp", 1, 4, 4, 30_600, "", ""));
    assert_clean(&r, "atp");
    let t = training(&r);
    let n = |k: &str| t["workers"][k].as_u64().unwrap_or_else(|| panic!("{k}: {t}"));
    assert!(
        t["switch"]["fallbacks"].as_u64().unwrap() > 0 && t["switch"]["resend_clears"].as_u64().unwrap() > 0,
        "{t}"
    );
    assert!(n("gap_resends") > 0, "{t}");
    assert_eq!(n("timeouts"), 0, "{t}");
}

#[test]
fn the_switch_aggregates_at_line_rate_whatever_the_number_of_jobs() {
    // DSA §III: the switch's "line-rate processing capability". The switch program used to
    // process 1.2 G packets/s whatever the switch: 64 workers sending 306 B packets at
    // 100 Gb/s offer 2.6 G/s, so SwitchML's per-job utilisation fell from 2 jobs to 8.
    let util = |jobs: u32| {
        let text = scenario("switchml", 1, jobs, 8, 5_000_000, "", "")
            .replace("model_scale = 0.01", "model_scale = 0.05")
            .replace(r#"models = ["A", "B"]"#, r#"models = ["A"]"#)
            .replace("jitter_max_us = 10", "jitter_max_us = 0")
            .replace("values = true", "values = false");
        let r = run(&text);
        assert_eq!(r.status, RunStatus::Completed);
        training(&r)["memory_utilization"].as_f64().unwrap()
    };
    let (two, eight) = (util(2), util(8));
    assert!(eight >= 0.9 * two, "utilisation {two:.3} with 2 jobs, {eight:.3} with 8");
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
    let (mut copies, mut held) = (0, 0);
    for case in 0..14 {
        let p = ["switchml", "atp", "dsa", "dsa"][rng.below(4) as usize];
        let jobs = 1 + rng.below(3) as u32;
        let workers = 1 + rng.below(5) as u32;
        let min_aggs = if p == "switchml" { 2 * jobs as u64 } else { 1 };
        let memory = 306 * (min_aggs + rng.below(300));
        let hosts = jobs * (workers + 1);
        let loss = rng.below(4) as f64 * 0.01;
        let faults = if loss > 0.0 {
            format!("[[faults]]\nkind = \"loss\"\nlink = {}\nprobability = {loss}", rng.below(hosts as u64))
        } else {
            String::new()
        };
        let extra = match (p, rng.below(3)) {
            ("dsa", 1) => "preemption = \"always\"",
            ("dsa", 2) => "preemption = \"coin\"",
            _ => "",
        };
        let seed = rng.next_u64() % 1000;
        let faulty = dup_and_reorder(&mut rng);
        let text = scenario(p, seed, jobs, workers, memory, extra, &faults).replace("[network]\n", &faulty);
        let r = run(&text);
        assert_clean(
            &r,
            &format!("case {case}: {p} {extra} seed {seed}, {jobs}x{workers}, {memory} B, loss {loss}, {faulty}"),
        );
        copies += r.summary["packet_faults"]["duplicated"].as_u64().unwrap_or(0);
        held += r.summary["packet_faults"]["held"].as_u64().unwrap_or(0);
    }
    // The faults did act: packets were duplicated and held back, and every run stayed exact.
    assert!(copies > 0 && held > 0, "{copies} duplicated, {held} held");
}

/// §IV-C's task types in a lossy DSA run: every lost packet is counted under exactly one
/// type, every task of the epoch has one type, each preemption contest makes a type-II and a
/// type-III task; baselines report none.
#[test]
fn dsa_counts_lost_packets_by_the_type_of_their_aggregation_task() {
    let r = run(&scenario("dsa", 9, 2, 4, 30_600, "", WORKER_LOSS));
    assert_clean(&r, "dsa worker loss");
    let t = training(&r);
    let tt = &t["task_types"];
    let sum = |v: &Value| ["type_i", "type_ii", "type_iii"].iter().map(|k| v[k].as_u64().unwrap()).sum::<u64>();
    assert!(t["lost_packets"].as_u64().unwrap() > 0, "{t}");
    assert_eq!(sum(&tt["lost_packets"]), t["lost_packets"].as_u64().unwrap(), "{tt}");
    let psns: u64 =
        r.summary["traffic"][0]["jobs"].as_array().unwrap().iter().map(|j| j["psns"].as_u64().unwrap()).sum();
    assert_eq!(sum(&tt["tasks"]), psns, "{tt}");
    // Contests: preemptions won by the packet and fallbacks lost by it (both have a holder).
    let contests = t["switch"]["preemptions"].as_u64().unwrap() + t["switch"]["fallbacks"].as_u64().unwrap();
    let (ii, iii) = (tt["tasks"]["type_ii"].as_u64().unwrap(), tt["tasks"]["type_iii"].as_u64().unwrap());
    assert!(contests > 0 && ii > 0 && iii > 0 && ii + iii <= 2 * contests, "{t}");
    for p in ["switchml", "atp"] {
        let r = run(&scenario(p, 9, 2, 4, 30_600, "", WORKER_LOSS));
        assert!(training(&r).get("task_types").is_none(), "{p}");
    }
}

/// Two jobs of four workers on a leaf/spine fat tree (3 hosts per leaf; node ids: each leaf
/// then its hosts, spines 16 and 17; links: host h's is h, then leaf l to spine s is
/// 12 + 2l + s): job 0 on leaves 0 and 4, job 1 on leaves 4 and 8, both rooted at spine 16.
fn fat_tree(protocol: &str, seed: u64, extra: &str, faults: &str) -> String {
    scenario(protocol, seed, 2, 4, 30_600, extra, faults)
        .replace("kind = \"star\"\nhosts = 10", "kind = \"fat_tree_2\"\nleaves = 4\nhosts_per_leaf = 3\nspines = 2")
}

/// `aggregation = "tree"` (SwitchML): each leaf aggregates its workers' packets and sends one
/// partial per PSN to the root (a spine), whose result goes back down. Without loss every PSN
/// completes once at each leaf of its job and once at the root, so the switches' completions
/// count both levels; results are exact (fingerprints and values) and every aggregator of
/// every switch is free at the end.
#[test]
fn tree_aggregation_completes_every_psn_on_each_leaf_and_the_root() {
    let r = run(&fat_tree("switchml", 5, "aggregation = \"tree\"", ""));
    assert_clean(&r, "tree");
    let jobs = r.summary["traffic"][0]["jobs"].as_array().unwrap().clone();
    let mut want = 0;
    for (j, leaves) in [(0, vec![0, 4]), (1, vec![4, 8])] {
        let job = &jobs[j];
        assert_eq!(job["switch_node"], 16, "{job}");
        let got: Vec<u64> = job["leaf_switches"].as_array().unwrap().iter().map(|x| x.as_u64().unwrap()).collect();
        assert_eq!(got, leaves, "job {j}");
        want += job["psns"].as_u64().unwrap() * (leaves.len() as u64 + 1);
    }
    assert_eq!(training(&r)["switch"]["completed"].as_u64().unwrap(), want, "{}", training(&r));
    // One switch per job (the default): the root alone completes each PSN.
    let flat = run(&fat_tree("switchml", 5, "", ""));
    assert_clean(&flat, "root");
    assert!(flat.summary["traffic"][0]["jobs"][0].get("leaf_switches").is_none());
    let psns: u64 = jobs.iter().map(|j| j["psns"].as_u64().unwrap()).sum();
    assert_eq!(training(&flat)["switch"]["completed"].as_u64().unwrap(), psns);
}

/// Loss on a worker's link and, separately, on a leaf-spine link (partials and results lost
/// above the leaf): retransmissions re-send the leaf's partial, the root counts each child
/// once, results stay exact, every aggregator is free; same seed, same bytes.
#[test]
fn tree_aggregation_under_loss_is_exact_and_deterministic() {
    // Host 1 (job 0, under leaf 0), and leaves 0, 4 and 8 to the root spine.
    for link in [1, 12, 14, 16] {
        let faults = format!("[[faults]]\nkind = \"loss\"\nlink = {link}\nprobability = 0.03");
        let a = run(&fat_tree("switchml", 11, "aggregation = \"tree\"", &faults));
        assert_clean(&a, &format!("loss on link {link}"));
        let t = training(&a);
        assert!(
            t["lost_packets"].as_u64().unwrap() > 0 && t["workers"]["retransmissions"].as_u64().unwrap() > 0,
            "link {link}: {t}"
        );
        if link == 1 {
            let b = run(&fat_tree("switchml", 11, "aggregation = \"tree\"", &faults));
            assert!(a.bytes == b.bytes, "same scenario and seed gave different result files");
        }
    }
}

#[test]
fn tree_aggregation_errors_name_the_field_and_the_reason() {
    let e = |text: &str| run_scenario_str(text, &RunOptions::default()).unwrap_err();
    let err = e(&fat_tree("switchml", 1, "aggregation = \"ring\"", ""));
    assert_eq!(
        (err.field.as_str(), err.reason.contains("\"root\" or \"tree\"")),
        ("traffic[0].aggregation", true),
        "{}",
        err.reason
    );
    // Three tiers: 8 workers over two pods of a k = 4 fat tree meet at a core switch, which no
    // edge switch neighbours.
    let text = scenario("switchml", 1, 1, 8, 30_600, "aggregation = \"tree\"", "")
        .replace("kind = \"star\"\nhosts = 9", "kind = \"fat_tree_3\"\nk = 4");
    let err = e(&text);
    assert_eq!(err.field, "traffic[0].aggregation", "{}", err.reason);
    assert!(err.reason.contains("two levels") && err.reason.contains("not a neighbour"), "{}", err.reason);
    // On a star every worker is under the one switch: the same run as without the key.
    let a = run(&scenario("switchml", 3, 2, 4, 30_600, "aggregation = \"tree\"", WORKER_LOSS));
    let b = run(&scenario("switchml", 3, 2, 4, 30_600, "", WORKER_LOSS));
    assert!(a.bytes == b.bytes);
}

/// ATP and DSA on both levels of the tree, in a 100-aggregator pool shared by two jobs (leaf 4
/// serves both): leaves and the root both complete tasks; collisions (ATP) and contests (DSA)
/// at both levels send packets and partials to the PS in the job's ranks; ATP's PS ACK frees
/// the root's and then each leaf's aggregator; DSA's reminders fetch from every switch. With
/// loss on a worker's link, on a leaf-spine link and on the PS's link every result is exact
/// (values included) and every aggregator of every switch is free at the end; same seed, same
/// bytes.
#[test]
fn atp_and_dsa_tree_aggregation_is_exact_under_contests_and_loss() {
    for p in ["atp", "dsa"] {
        let plain = run(&fat_tree(p, 12, "aggregation = \"tree\"", ""));
        assert_clean(&plain, &format!("{p} tree"));
        let t = training(&plain);
        let psns: u64 =
            plain.summary["traffic"][0]["jobs"].as_array().unwrap().iter().map(|j| j["psns"].as_u64().unwrap()).sum();
        // More completions than PSNs: leaves complete their workers' tasks, the root the children's.
        assert!(t["switch"]["completed"].as_u64().unwrap() > psns, "{p}: {t}");
        assert_eq!(t["switch"]["malformed"], 0, "{p}: {t}");
        match p {
            // The PS's ACK frees the root's and every leaf's aggregator: nothing left for the
            // job's teardown.
            "atp" => assert!(
                t["switch"]["fallbacks"].as_u64().unwrap() > 0
                    && t["switch"]["ack_frees"].as_u64().unwrap() > psns
                    && t["aggregators_released_at_end"] == 0,
                "{t}"
            ),
            _ => assert!(t["switch"]["preemptions"].as_u64().unwrap() > 0, "{t}"),
        }
        // Host 1 (a worker under leaf 0), leaf 0 to the root spine, host 8 (job 0's PS).
        for link in [1, 12, 8] {
            let faults = format!("[[faults]]\nkind = \"loss\"\nlink = {link}\nprobability = 0.03");
            let a = run(&fat_tree(p, 13, "aggregation = \"tree\"", &faults));
            assert_clean(&a, &format!("{p} tree, loss on link {link}"));
            assert!(training(&a)["lost_packets"].as_u64().unwrap() > 0, "{p}: link {link}");
            if link == 12 {
                let b = run(&fat_tree(p, 13, "aggregation = \"tree\"", &faults));
                assert!(a.bytes == b.bytes, "{p}: same scenario and seed gave different result files");
            }
        }
    }
}

/// Random seeds, pool sizes (down to a handful of aggregators), loss on a random host or
/// leaf-spine link, SwitchML, ATP and DSA (and its strawmen) on trees: every run completes exact
/// with every aggregator free.
#[test]
fn property_tree_aggregation_random_loss_seeds_and_pool_sizes() {
    let mut rng = Rng::new(0x7EE);
    let mut reminded = 0;
    for case in 0..12 {
        let p = ["switchml", "atp", "dsa", "dsa"][rng.below(4) as usize];
        let memory = 306 * (if p == "switchml" { 4 } else { 1 } + rng.below(200));
        let link = [1, 5, 7, 8, 12, 14, 16][rng.below(7) as usize];
        let loss = (1 + rng.below(4)) as f64 * 0.01;
        let extra = match (p, rng.below(3)) {
            ("dsa", 1) => "aggregation = \"tree\"\npreemption = \"always\"",
            ("dsa", 2) => "aggregation = \"tree\"\npreemption = \"coin\"",
            _ => "aggregation = \"tree\"",
        };
        let seed = rng.next_u64() % 1000;
        let faulty = dup_and_reorder(&mut rng);
        let text = scenario(
            p,
            seed,
            2,
            4,
            memory,
            extra,
            &format!("[[faults]]\nkind = \"loss\"\nlink = {link}\nprobability = {loss}"),
        )
        .replace("kind = \"star\"\nhosts = 10", "kind = \"fat_tree_2\"\nleaves = 4\nhosts_per_leaf = 3\nspines = 2")
        .replace("[network]\n", &faulty);
        let r = run(&text);
        assert_clean(
            &r,
            &format!("case {case}: {p} {extra} seed {seed}, {memory} B, loss {loss} on link {link}, {faulty}"),
        );
        reminded += training(&r)["switch"]["reminders_fetched"].as_u64().unwrap_or(0);
    }
    assert!(reminded > 0, "no reminder fetched a partial from any switch");
}

/// The switch memory is one `[ina]` setting for every protocol, in slots or in bytes: a
/// shared-pool job given `table_size` aggregators runs exactly as with the same memory in bytes
/// (306 B per aggregator), and so does a Canary allreduce (one descriptor: the 19-byte header
/// and 4 B per element of `max_elements_per_packet`); a byte count between two slots rounds
/// down to the slots it holds.
#[test]
fn switch_memory_in_slots_or_in_bytes_runs_the_same() {
    for protocol in ["switchml", "atp", "dsa"] {
        let bytes = scenario(protocol, 5, 2, 3, 48 * 306, "", "");
        let slots = bytes.replace("switch_memory_bytes = 14688", "table_size = 48");
        let between = bytes.replace("switch_memory_bytes = 14688", "switch_memory_bytes = 14993");
        assert_ne!(slots, bytes);
        let (a, b, c) = (run(&bytes), run(&slots), run(&between));
        assert_eq!(training(&a)["aggregators_per_switch"], 48, "{protocol}");
        assert!(a.bytes == b.bytes && a.bytes == c.bytes, "{protocol}: the same memory gave different runs");
    }
    let canary = |ina: &str| {
        format!(
            "name = \"memory\"\nseed = 2\n[topology]\nkind = \"fat_tree_2\"\nleaves = 2\nhosts_per_leaf = 4\nspines = 2\n\
             bandwidth_gbps = 100\nlatency_ns = 500\n[ina]\nmax_elements_per_packet = 64\n{ina}\n\
             [[traffic]]\nkind = \"ina_allreduce\"\nhosts = \"all\"\nbytes = 262144\nelements_per_packet = 64\n"
        )
    };
    // 16 descriptors of 19 + 4 × 64 = 275 B: few enough that the table limits the run.
    let (a, b) = (run(&canary("table_size = 16")), run(&canary("switch_memory_bytes = 4400")));
    assert!(a.bytes == b.bytes, "canary: the same memory gave different runs");
    let wide = run(&canary("table_size = 4096"));
    assert_ne!(a.summary["ina"]["collisions"], wide.summary["ina"]["collisions"], "the table does limit the run");
}
