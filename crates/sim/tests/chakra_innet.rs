//! Chakra traces whose allreduces an in-network protocol serves (`algorithms = { all_reduce =
//! "canary" }`): a lone allreduce takes exactly a standalone `ina_allreduce`'s time, no rank has
//! the result before every rank joined and nothing that waits for it starts earlier, results are
//! verified under random seeds, placements, protocols and loss, the same seed gives the same
//! bytes, and what cannot run is refused naming the key.

use reducelab_chakra::{AttrValue, CommType, EtWriter, Node, NodeType};
use reducelab_des::Rng;
use reducelab_sim::{run_scenario_str, RunOptions};
use serde_json::Value;
use std::path::{Path, PathBuf};

const TOPO: &str = "[topology]\nkind = \"fat_tree_2\"\nleaves = 4\nhosts_per_leaf = 4\nspines = 2\n\
                    bandwidth_gbps = 100\nlatency_ns = 500\n[network]\nswitch_latency_ns = 300\nrouting = \"canary\"\n";

fn dir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("reducelab-chakra-innet-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

type Files = Vec<(String, String)>;

fn run_in(dir: &Path, text: &str) -> Result<(Value, Files), reducelab_sim::ScenarioError> {
    let opts = RunOptions { base_dir: Some(dir.to_path_buf()), ..Default::default() };
    run_scenario_str(text, &opts).map(|o| (serde_json::from_str(&o.summary_json).unwrap(), o.files))
}

fn file<'a>(files: &'a Files, name: &str) -> &'a str {
    &files.iter().find(|(f, _)| f == name).unwrap_or_else(|| panic!("no {name}")).1
}

fn comp(id: u64, us: u64, deps: &[u64]) -> Node {
    let mut n = Node::new(id, &format!("comp_{id}"), NodeType::Comp);
    n.duration_micros = us;
    n.data_deps = deps.to_vec();
    n
}

fn allreduce(id: u64, bytes: u64, deps: &[u64]) -> Node {
    let mut n = Node::new(id, &format!("all_reduce_{id}"), NodeType::CommColl)
        .with_attr("comm_type", AttrValue::Int64(CommType::AllReduce as i64))
        .with_attr("comm_size", AttrValue::Int64(bytes as i64));
    n.data_deps = deps.to_vec();
    n
}

/// `prefix.<r>.et` for `p` ranks: compute of `us[r]` µs, an allreduce of `bytes[0]` after it,
/// then for each further size compute of 5 µs and an allreduce after the previous one; a last
/// compute node after everything.
fn chain(d: &Path, prefix: &str, p: u32, us: &[u64], bytes: &[u64]) {
    for r in 0..p {
        let mut w = EtWriter::new("1.0.0");
        let mut id = 1;
        w.node(&comp(id, us[r as usize % us.len()], &[]));
        let mut prev = id;
        for (k, &b) in bytes.iter().enumerate() {
            if k > 0 {
                id += 1;
                w.node(&comp(id, 5, &[prev]));
                prev = id;
            }
            id += 1;
            w.node(&allreduce(id, b, &[prev]));
            prev = id;
        }
        w.node(&comp(id + 1, 3, &[prev]));
        std::fs::write(d.join(format!("{prefix}.{r}.et")), w.finish()).unwrap();
    }
}

fn hosts(h: &[u32]) -> String {
    h.iter().map(|h| h.to_string()).collect::<Vec<_>>().join(", ")
}

fn chakra(prefix: &str, h: &[u32], algorithm: &str, extra: &str) -> String {
    format!(
        "name = \"c\"\n{TOPO}{extra}[[traffic]]\nkind = \"chakra\"\ntrace = \"{prefix}\"\nhosts = [{}]\nops = true\n\
         algorithms = {{ all_reduce = \"{algorithm}\" }}\n",
        hosts(h)
    )
}

/// Rows of `goal_ops_0.csv`: (rank, label, start, end).
fn ops(files: &Files) -> Vec<(u32, String, u64, u64)> {
    file(files, "goal_ops_0.csv")
        .lines()
        .skip(1)
        .map(|l| {
            let c: Vec<&str> = l.split(',').collect();
            (c[0].parse().unwrap(), c[1].to_string(), c[5].parse().unwrap(), c[6].parse().unwrap())
        })
        .collect()
}

/// Rows of `chakra_collectives.csv`: (type, algorithm, start, end).
fn collectives(files: &Files) -> Vec<(String, String, u64, u64)> {
    file(files, "chakra_collectives.csv")
        .lines()
        .skip(1)
        .map(|l| {
            let c: Vec<&str> = l.split(',').collect();
            (c[2].to_string(), c[4].to_string(), c[5].parse().unwrap(), c[6].parse().unwrap())
        })
        .collect()
}

/// The in-network collectives' semantics on a finished run, from every rank's operation times:
/// each rank has one `_innet` operation per allreduce node; none has the result before every
/// rank joined (an allreduce needs every contribution); whatever waits for it on that rank
/// starts no earlier than its end; each instance in `chakra_collectives.csv` spans its ranks'
/// operations.
fn check_semantics(files: &Files, p: u32, nodes: &[u64]) {
    let ops = ops(files);
    let colls = collectives(files);
    assert_eq!(colls.len(), nodes.len());
    for (k, &node) in nodes.iter().enumerate() {
        let label = format!("n{node}_innet");
        let mine: Vec<_> = ops.iter().filter(|o| o.1 == label).collect();
        assert_eq!(mine.len(), p as usize, "{label}: one operation per rank");
        let last_join = mine.iter().map(|o| o.2).max().unwrap();
        for o in &mine {
            assert!(o.3 >= last_join, "rank {} has {label}'s result at {} before the last join {last_join}", o.0, o.3);
        }
        assert_eq!(colls[k].2, mine.iter().map(|o| o.2).min().unwrap());
        assert_eq!(colls[k].3, mine.iter().map(|o| o.3).max().unwrap());
        // The node after it on each rank (its id is one more).
        let next = format!("n{}", node + 1);
        for o in &mine {
            let after = ops.iter().find(|x| x.0 == o.0 && x.1 == next).expect("a dependent node");
            assert!(after.2 >= o.3, "rank {}: {next} starts at {} before {label} ends at {}", o.0, after.2, o.3);
        }
    }
}

/// A lone allreduce joined by every rank at the same instant on an idle network is the same
/// protocol run as a standalone `ina_allreduce` starting then on the same hosts (same tenant 0,
/// same seed, same switch state; the trace only decides when agents start and reads when they
/// finish), so its instance takes exactly the standalone runtime: the bound is 0 ps. The
/// ring-served trace runs the same instance another way and takes another time.
#[test]
fn a_lone_in_network_allreduce_takes_exactly_the_standalone_time() {
    let d = dir("lone");
    let mut checked = 0;
    for (protocol, p, bytes) in
        [("canary", 8u32, 256u64 << 10), ("canary", 5, 1 << 20), ("static_trees", 8, 128 << 10), ("flare", 6, 64 << 10)]
    {
        let prefix = format!("{protocol}-{p}-{bytes}");
        chain(&d, &prefix, p, &[10], &[bytes]);
        let h: Vec<u32> = (0..p).map(|r| (3 * r + 1) % 16).collect();
        let (innet, files) = run_in(&d, &chakra(&prefix, &h, protocol, "")).unwrap();
        let (ring, ring_files) = run_in(&d, &chakra(&prefix, &h, "ring", "")).unwrap();
        let (alone, _) = run_in(
            &d,
            &format!(
                "name = \"s\"\n{TOPO}[[traffic]]\nkind = \"ina_allreduce\"\nprotocol = \"{protocol}\"\n\
                 hosts = [{}]\nbytes = {bytes}\nstart_ns = 10000\n",
                hosts(&h)
            ),
        )
        .unwrap();
        for s in [&innet, &ring, &alone] {
            assert_eq!(s["status"], "completed", "{s}");
        }
        let t = &innet["traffic"][0];
        assert_eq!(t["verified"], true, "{t}");
        assert_eq!(t["in_network"]["verified"], 1, "{t}");
        assert_eq!(t["in_network"]["collectives"], 1);
        assert_eq!(t["messages"], 0, "the protocol's packets are not the trace's messages");
        assert_eq!(ring["traffic"][0]["verified"], true);
        let a = &alone["traffic"][0];
        assert_eq!(a["verified"], a["hosts"], "{a}");
        let standalone = a["runtime_ps"].as_u64().unwrap();
        let colls = collectives(&files);
        assert_eq!(colls[0].0, "ALL_REDUCE");
        assert_eq!(colls[0].1, a["protocol"].as_str().unwrap());
        assert_eq!(colls[0].2, 10_000_000, "every rank joins after its 10 us of compute");
        assert_eq!(colls[0].3 - colls[0].2, standalone, "{protocol} on {p} ranks, {bytes} B: {t} vs {a}");
        check_semantics(&files, p, &[2]);
        let ring_colls = collectives(&ring_files);
        assert_eq!(ring_colls[0].1, "ring");
        assert_ne!(ring_colls[0].3 - ring_colls[0].2, standalone, "{protocol}: the ring takes its own time");
        // The trace ends 3 us of compute after the last rank has the result.
        assert_eq!(t["iteration_time_ps"], colls[0].3 + 3_000_000);
        checked += 1;
    }
    assert_eq!(checked, 4);
}

/// Random traces (per-rank compute skew, chained allreduces of random sizes), placements, seeds,
/// protocols of the registry and (for those that recover) lossy links, duplicated packets (for
/// the duplicate-safe ones) and held-back packets: every run completes, verified on every rank,
/// and the semantics hold.
#[test]
fn random_traces_protocols_and_loss_run_verified() {
    let d = dir("random");
    let mut rng = Rng::new(0x1A7E);
    let (mut lossy, mut lost, mut copies, mut held) = (0, 0, 0, 0);
    let infos = reducelab_ina::PROTOCOLS;
    for case in 0..2 * infos.len() {
        // Every registered protocol twice.
        let info = &infos[case % infos.len()];
        let p = 2 + rng.below(7) as u32;
        let us: Vec<u64> = (0..p).map(|_| 1 + rng.below(30)).collect();
        let n = 1 + rng.below(3) as usize;
        let bytes: Vec<u64> = (0..n).map(|_| [4, 1000, 40 << 10, 300 << 10][rng.below(4) as usize]).collect();
        let prefix = format!("random-{case}");
        chain(&d, &prefix, p, &us, &bytes);
        let mut all: Vec<u32> = (0..16).collect();
        rng.shuffle(&mut all);
        let h = &all[..p as usize];
        let loss = if info.loss_recovery && rng.bernoulli(0.7) { [0.001, 0.01][rng.below(2) as usize] } else { 0.0 };
        // Duplicated packets for the protocols that tell copies apart, held-back packets for
        // those that recover.
        let mut faults = format!("loss_probability = {loss}\n");
        if info.duplicate_safe && rng.bernoulli(0.5) {
            faults += "duplicate_probability = 0.02\n";
        }
        if info.loss_recovery && rng.bernoulli(0.5) {
            faults += "reorder_probability = 0.05\nreorder_delay_ns = 1000\n";
        }
        let text = chakra(&prefix, h, info.name, "")
            .replace("routing = \"canary\"\n", &format!("routing = \"canary\"\n{faults}"));
        let text = text.replace("name = \"c\"", &format!("name = \"c\"\nseed = {}", rng.below(1000)));
        let (s, files) = run_in(&d, &text).unwrap();
        let what = format!("case {case}: {} on {p} ranks, {bytes:?} B, {faults}", info.name);
        assert_eq!(s["status"], "completed", "{what}: {s}");
        copies += s["packet_faults"]["duplicated"].as_u64().unwrap_or(0);
        held += s["packet_faults"]["held"].as_u64().unwrap_or(0);
        if loss > 0.0 {
            lossy += 1;
            lost += s["ina"]["lost_packets"].as_u64().unwrap();
        }
        let t = &s["traffic"][0];
        assert_eq!(t["verified"], true, "{what}: {t}");
        assert_eq!(t["in_network"]["verified"], n, "{what}");
        let nodes: Vec<u64> = (0..n as u64).map(|k| 2 + 2 * k).collect();
        check_semantics(&files, p, &nodes);
    }
    assert!(lossy > 0 && lost > 0, "some case lost packets ({lossy} lossy cases)");
    assert!(copies > 0 && held > 0, "some case duplicated ({copies}) and held back ({held}) packets");
}

/// Two traces and an `ina_allreduce` entry on the same switches: the in-network world numbers
/// their collectives in traffic order, and each entry gets its own back (its count, its
/// verification); a second protocol in the scenario is refused.
#[test]
fn traces_and_ina_allreduce_entries_share_the_switches() {
    let d = dir("shared");
    chain(&d, "a", 4, &[2], &[64 << 10, 4096]);
    chain(&d, "b", 3, &[7, 1, 4], &[1000]);
    let entry = |prefix: &str, h: &[u32]| {
        format!(
            "[[traffic]]\nkind = \"chakra\"\ntrace = \"{prefix}\"\nhosts = [{}]\nops = true\n\
             algorithms = {{ all_reduce = \"canary\" }}\n",
            hosts(h)
        )
    };
    let ina = |protocol: &str| {
        format!(
            "[[traffic]]\nkind = \"ina_allreduce\"\nprotocol = \"{protocol}\"\n\
             hosts = [8, 9, 10, 11]\nbytes = 100000\n"
        )
    };
    let text = format!("name = \"m\"\n{TOPO}{}{}{}", entry("a", &[0, 1, 2, 3]), ina("canary"), entry("b", &[4, 5, 6]));
    let (s, _) = run_in(&d, &text).unwrap();
    assert_eq!(s["status"], "completed", "{s}");
    let t = &s["traffic"];
    assert_eq!(t[0]["in_network"]["collectives"], 2, "{}", t[0]);
    assert_eq!(t[0]["in_network"]["verified"], 2);
    assert_eq!(t[1]["kind"], "ina_allreduce");
    assert_eq!(t[1]["bytes"], 100000, "the ina_allreduce entry's own result: {}", t[1]);
    assert_eq!(t[1]["verified"], 4);
    assert_eq!(t[2]["in_network"]["collectives"], 1, "{}", t[2]);
    assert_eq!(t[2]["verified"], true);
    let text = format!("name = \"m\"\n{TOPO}{}{}", entry("a", &[0, 1, 2, 3]), ina("static_trees"));
    let e = run_in(&d, &text).unwrap_err();
    assert!(e.reason.contains("same protocol") && e.reason.contains("static_trees"), "{e:?}");
}

fn examples_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scenarios/examples")
}

/// The shipped example: canary serves its four gradient allreduces (the allgather stays a
/// registry schedule), verified, each overlapping the backward passes below it; the same seed
/// gives the same bytes.
#[test]
fn the_shipped_in_network_example_runs_verified_and_deterministically() {
    let text = std::fs::read_to_string(examples_dir().join("chakra_innet.toml")).unwrap();
    let (s, files) = run_in(&examples_dir(), &text).unwrap();
    assert_eq!(s["status"], "completed", "{s}");
    let t = &s["traffic"][0];
    assert_eq!(t["verified"], true, "{t}");
    assert_eq!(t["in_network"]["protocol"], "canary");
    assert_eq!(t["in_network"]["verified"], 4);
    let colls = collectives(&files);
    assert_eq!(colls[0].1, "recursive-doubling-bandwidth");
    assert!(colls[1..].iter().all(|c| c.0 == "ALL_REDUCE" && c.1 == "canary"), "{colls:?}");
    let opts = RunOptions { base_dir: Some(examples_dir()), ..Default::default() };
    let a = run_scenario_str(&text, &opts).unwrap();
    let b = run_scenario_str(&text, &opts).unwrap();
    assert_eq!(a.summary_json, b.summary_json);
    assert_eq!(a.files, b.files);
}

#[test]
fn what_cannot_serve_a_collective_in_network_is_refused_naming_the_key() {
    let d = dir("errors");
    chain(&d, "ok", 4, &[1], &[4096]);
    let err = |algorithms: &str, extra: &str| {
        let text = format!(
            "name = \"e\"\n{TOPO}{extra}[[traffic]]\nkind = \"chakra\"\ntrace = \"ok\"\n\
             algorithms = {{ {algorithms} }}\n"
        );
        run_in(&d, &text).unwrap_err()
    };
    let e = err("all_reduce = \"canari\"", "");
    assert_eq!(e.field, "traffic[0].algorithms.all_reduce");
    assert!(e.reason.contains("canari") && e.reason.contains("\"canary\""), "{}", e.reason);
    let e = err("broadcast = \"canary\"", "");
    assert_eq!(e.field, "traffic[0].algorithms.broadcast");
    assert!(e.reason.contains("serve all_reduce only") && e.reason.contains("binomial"), "{}", e.reason);
    for backend in ["flow", "loggp"] {
        let e = err("all_reduce = \"canary\"", &format!("[run]\nbackend = \"{backend}\"\n"));
        assert_eq!(e.field, "traffic[0].algorithms.all_reduce", "{backend}");
        assert!(e.reason.contains("packet level only") && e.reason.contains(backend), "{}", e.reason);
    }
    // The same trace with a registry algorithm runs on both.
    for backend in ["flow", "loggp"] {
        let text = format!(
            "name = \"e\"\n{TOPO}[run]\nbackend = \"{backend}\"\n[[traffic]]\nkind = \"chakra\"\ntrace = \"ok\"\n\
             algorithms = {{ all_reduce = \"ring\" }}\n"
        )
        .replace("routing = \"canary\"\n", "");
        let (s, _) = run_in(&d, &text).unwrap();
        assert_eq!(s["status"], "completed", "{backend}: {s}");
    }
}
