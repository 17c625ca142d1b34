//! Chakra execution traces as traffic (`kind = "chakra"`): a trace of one allreduce takes exactly
//! the native collective's time (the round trip), the shipped example runs verified with results
//! that add up, the same scenario and seed give the same bytes, and bad entries are refused
//! naming the key.

use reducelab_chakra::{AttrValue, CommType, EtWriter, Node, NodeType};
use reducelab_sim::{run_scenario_str, RunOptions};
use serde_json::Value;
use std::path::{Path, PathBuf};

const TOPO: &str = "[topology]\nkind = \"fat_tree_2\"\nleaves = 4\nhosts_per_leaf = 4\nspines = 2\nbandwidth_gbps = 100\nlatency_ns = 500\n[network]\nswitch_latency_ns = 300\n";

fn dir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("reducelab-chakra-test-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn run_in(dir: &Path, text: &str) -> Result<(Value, Vec<(String, String)>), reducelab_sim::ScenarioError> {
    let opts = RunOptions { base_dir: Some(dir.to_path_buf()), ..Default::default() };
    run_scenario_str(text, &opts).map(|o| (serde_json::from_str(&o.summary_json).unwrap(), o.files))
}

/// `prefix.<r>.et` for `p` ranks, each one collective node of `c` and `bytes`.
fn one_collective(d: &Path, prefix: &str, p: u32, c: CommType, bytes: u64) {
    for r in 0..p {
        let mut w = EtWriter::new("1.0.0");
        w.node(
            &Node::new(1, "coll", NodeType::CommColl)
                .with_attr("comm_type", AttrValue::Int64(c as i64))
                .with_attr("comm_size", AttrValue::Int64(bytes as i64)),
        );
        std::fs::write(d.join(format!("{prefix}.{r}.et")), w.finish()).unwrap();
    }
}

#[test]
fn a_trace_of_one_collective_takes_the_native_collectives_time() {
    let d = dir("roundtrip");
    let mut checked = 0;
    for (algorithm, c, collective, p, bytes) in [
        ("ring", CommType::AllReduce, "allreduce", 8u32, 1u64 << 20),
        ("ring", CommType::AllReduce, "allreduce", 5, 40 << 10),
        ("recursive-doubling-bandwidth", CommType::AllReduce, "allreduce", 16, 256 << 10),
        ("swing-bandwidth", CommType::AllReduce, "allreduce", 8, 512 << 10),
        ("ring", CommType::AllGather, "allgather", 8, 256 << 10),
        ("ring", CommType::ReduceScatter, "reduce_scatter", 6, 96 << 10),
        ("binomial", CommType::Broadcast, "broadcast", 11, 64 << 10),
        ("swing-latency", CommType::Reduce, "reduce", 8, 32 << 10),
        ("pairwise", CommType::AllToAll, "alltoall", 12, 48 << 10),
        ("bruck", CommType::AllToAll, "alltoall", 9, 9 << 10),
    ] {
        let prefix = format!("{algorithm}-{collective}-{p}");
        one_collective(&d, &prefix, p, c, bytes);
        let hosts: Vec<String> = (0..p).map(|h| h.to_string()).collect();
        let hosts = hosts.join(", ");
        let (native, _) = run_in(
            &d,
            &format!("name = \"n\"\n{TOPO}[[traffic]]\nkind = \"collective\"\nalgorithm = \"{algorithm}\"\ncollective = \"{collective}\"\nbytes = {bytes}\nhosts = [{hosts}]\n"),
        )
        .unwrap();
        let (traced, files) = run_in(
            &d,
            &format!("name = \"c\"\n{TOPO}[[traffic]]\nkind = \"chakra\"\ntrace = \"{prefix}\"\nhosts = [{hosts}]\nalgorithms = {{ {} = \"{algorithm}\" }}\n", c.key()),
        )
        .unwrap();
        let (n, t) = (&native["traffic"][0], &traced["traffic"][0]);
        assert_eq!(native["status"], "completed", "{algorithm}: {n}");
        assert_eq!(traced["status"], "completed", "{algorithm}: {t}");
        assert_eq!(t["kind"], "chakra");
        assert_eq!(t["verified"], true, "{t}");
        assert_eq!(n["algorithm"], algorithm);
        assert_eq!(
            t["runtime_ps"], n["runtime_ps"],
            "{algorithm} {collective} on {p} ranks, {bytes} B: chakra {t} vs native {n}"
        );
        assert_eq!(t["iteration_time_ps"], n["runtime_ps"]);
        assert_eq!(t["messages"], n["messages"], "{algorithm}");
        // No compute: all of a rank's time is exposed communication, and the instance spans the run.
        assert_eq!(t["rank_exposed_comm_ps"], t["rank_end_ps"]);
        let csv = &files.iter().find(|(f, _)| f == "chakra_collectives.csv").unwrap().1;
        let row = format!("0,0,{},{bytes},{algorithm},0,{},{}\n", c.name(), n["runtime_ps"], n["runtime_ps"]);
        assert_eq!(csv.lines().nth(1).map(|l| format!("{l}\n")), Some(row), "{csv}");
        checked += 1;
    }
    assert_eq!(checked, 10);
}

fn examples_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scenarios/examples")
}

/// The shipped trace is the generator's output, so it cannot rot.
#[test]
fn the_shipped_chakra_example_is_the_generators_output() {
    for (r, bytes) in reducelab_chakra::example::training_iteration(8).iter().enumerate() {
        let committed = std::fs::read(examples_dir().join(format!("chakra_training/train.{r}.et"))).unwrap();
        assert_eq!(&committed, bytes, "rank {r}");
    }
    assert!(!examples_dir().join("chakra_training/train.8.et").exists());
}

/// The example runs verified on the packet engine and in the LogGP mode; its results add up
/// (every rank computes 500 µs, so it ends no earlier; the gradient allreduces start in backward
/// order, each after its layer's backward pass), and the same seed gives the same bytes.
#[test]
fn the_chakra_example_runs_verified_and_deterministically() {
    use reducelab_chakra::example::*;
    let path = examples_dir().join("chakra_training.toml");
    let run = |loggp: bool| {
        let mut file = reducelab_sim::parse(&std::fs::read_to_string(&path).unwrap()).unwrap();
        file.base_dir = Some(examples_dir());
        if loggp {
            file.run.backend = Some(reducelab_sim::scenario::Backend::LogGp);
        }
        let sc = file.resolve(None).unwrap();
        reducelab_sim::run_scenario(sc, &Default::default()).unwrap()
    };
    let compute_ps = (LAYERS as u64 * (FORWARD_US + BACKWARD_US) + OPTIMIZER_US) * 1_000_000;
    for loggp in [false, true] {
        let out = run(loggp);
        let s: Value = serde_json::from_str(&out.summary_json).unwrap();
        assert_eq!(s["status"], "completed", "{s}");
        let t = &s["traffic"][0];
        assert_eq!(t["kind"], "chakra");
        assert_eq!(t["collectives"], 5);
        if !loggp {
            assert_eq!(t["verified"], true);
            assert_eq!(t["mismatched_receives"], 0);
        }
        let iteration = t["iteration_time_ps"].as_u64().unwrap();
        assert!(iteration > compute_ps, "{t}");
        let exposed: Vec<u64> = serde_json::from_value(t["rank_exposed_comm_ps"].clone()).unwrap();
        let ends: Vec<u64> = serde_json::from_value(t["rank_end_ps"].clone()).unwrap();
        assert_eq!(exposed.len(), 8);
        for (e, x) in ends.iter().zip(&exposed) {
            assert_eq!(e - compute_ps, *x);
        }
        let csv = &out.files.iter().find(|(f, _)| f == "chakra_collectives.csv").unwrap().1;
        let rows: Vec<Vec<&str>> = csv.lines().skip(1).map(|l| l.split(',').collect()).collect();
        assert_eq!(rows.len(), 5);
        assert_eq!(rows[0][2], "ALL_GATHER");
        assert_eq!(rows[0][4], "recursive-doubling-bandwidth");
        let starts: Vec<u64> = rows.iter().map(|r| r[5].parse().unwrap()).collect();
        // The allreduce of layer 3 starts once the allgather, 4 forward passes and a backward
        // pass are done somewhere; each next one a backward pass later or more.
        let gather_end: u64 = rows[0][6].parse().unwrap();
        assert!(starts[1] >= (4 * FORWARD_US + BACKWARD_US) * 1_000_000, "{csv}");
        assert!(starts[1] < gather_end + (4 * FORWARD_US + BACKWARD_US) * 1_000_000 + 1, "{csv}");
        for k in 2..5 {
            assert!(starts[k] >= starts[k - 1] + BACKWARD_US * 1_000_000, "{csv}");
        }
        let again = run(loggp);
        assert_eq!(out.summary_json, again.summary_json);
        assert_eq!(out.files, again.files);
    }
}

#[test]
fn bad_chakra_entries_are_refused_naming_the_key() {
    let d = dir("errors");
    one_collective(&d, "ok", 4, CommType::AllReduce, 4096);
    let sc = |extra: &str| format!("name = \"e\"\n{TOPO}[[traffic]]\nkind = \"chakra\"\n{extra}");
    let err = |extra: &str| run_in(&d, &sc(extra)).unwrap_err();
    let e = err("trace = \"ok\"\nfile = \"x\"\n");
    assert_eq!(e.field, "traffic[0].file");
    for k in ["trace", "ranks", "algorithms", "placement"] {
        assert!(e.reason.contains(k), "{}", e.reason);
    }
    assert!(!e.reason.contains("`bytes`") && !e.reason.contains("`collective`"), "{}", e.reason);
    assert_eq!(err("").field, "traffic[0].trace");
    let e = err("trace = \"missing\"\n");
    assert_eq!(e.field, "traffic[0].trace");
    assert!(e.reason.contains("missing.0.et: no such file"), "{}", e.reason);
    let e = err("trace = \"ok\"\nranks = 5\n");
    assert!(e.reason.contains("ok.4.et: no such file: rank 4 of 5 is missing"), "{}", e.reason);
    let e = err("trace = \"ok\"\nalgorithms = { all_reduce = \"warp-drive\" }\n");
    assert_eq!(e.field, "traffic[0].algorithms.all_reduce");
    let e = err("trace = \"ok\"\nalgorithms = { all_to_all = \"ring\" }\n");
    assert_eq!(e.field, "traffic[0].algorithms.all_to_all");
    assert!(e.reason.contains("ring builds allreduce, reduce_scatter, allgather, not alltoall"), "{}", e.reason);
    let e = err("trace = \"ok\"\nalgorithms = { barrier = \"ring\" }\n");
    assert_eq!(e.field, "traffic[0].algorithms.barrier");
    assert!(e.reason.contains("BARRIER runs the dissemination barrier; it takes no algorithm"), "{}", e.reason);
    let e = err("trace = \"ok\"\nalgorithms = { gather = \"ring\" }\n");
    assert!(e.reason.contains("GATHER is not run yet"), "{}", e.reason);
    let e = err("trace = \"ok\"\nalgorithms = { allreduce = \"ring\" }\n");
    assert!(e.reason.contains("all_reduce, reduce, all_gather, broadcast, all_to_all, reduce_scatter"), "{}", e.reason);
    let e = err("trace = \"ok\"\nhosts = [0, 1]\n");
    assert_eq!(e.field, "traffic[0].hosts");
    // A trace whose collectives differ across ranks: the file and node.
    let mut w = EtWriter::new("1");
    w.node(
        &Node::new(3, "x", NodeType::CommColl)
            .with_attr("comm_type", AttrValue::Int64(2))
            .with_attr("comm_size", AttrValue::Int64(64)),
    );
    std::fs::write(d.join("ok.2.et"), w.finish()).unwrap();
    let e = err("trace = \"ok\"\n");
    assert!(
        e.reason.contains("ok.2.et: node 3: collective 0") && e.reason.contains("ALL_GATHER of 64 B"),
        "{}",
        e.reason
    );
}

/// Process groups on the packet engine: two groups ({0, 2}, {1, 3}) each allreduce on their own
/// (given inline and as ASTRA-sim's JSON file, alike); group {0, 2}'s allreduce on hosts 0 and 2
/// takes the time of the same allreduce as a 2-rank job on those hosts when the other group's
/// traffic shares no link with it (hosts 1 and 3 on another leaf); a barrier of 0-byte messages
/// ends the iteration. Bad groups name `traffic[0].comm_groups`.
#[test]
fn process_groups_and_barriers_run_on_the_packet_engine() {
    let d = dir("groups");
    let bytes = 256u64 << 10;
    let node = |id: u64, c: CommType, b: u64, pg: Option<&str>, deps: &[u64]| {
        let mut n = Node::new(id, "k", NodeType::CommColl)
            .with_attr("comm_type", AttrValue::Int64(c as i64))
            .with_attr("comm_size", AttrValue::Int64(b as i64));
        if let Some(g) = pg {
            n = n.with_attr("pg_name", AttrValue::Str(g.into()));
        }
        n.data_deps = deps.to_vec();
        n
    };
    for r in 0..4u32 {
        let mut w = EtWriter::new("1.0.0");
        w.node(&node(1, CommType::AllReduce, bytes, Some(if r % 2 == 0 { "1" } else { "2" }), &[]));
        w.node(&node(2, CommType::Barrier, 0, None, &[1]));
        std::fs::write(d.join(format!("dp.{r}.et")), w.finish()).unwrap();
    }
    one_collective(&d, "pair", 2, CommType::AllReduce, bytes);
    std::fs::write(d.join("groups.json"), r#"{"1": [0, 2], "2": [1, 3]}"#).unwrap();
    std::fs::write(d.join("bad.json"), r#"{"1": [0, "two"]}"#).unwrap();
    // Hosts 0 and 4 on leaves 0 and 1; hosts 8 and 12 on leaves 2 and 3.
    let sc = |groups: &str| {
        format!("name = \"g\"\n{TOPO}[[traffic]]\nkind = \"chakra\"\ntrace = \"dp\"\nhosts = [0, 8, 4, 12]\ncomm_groups = {groups}\n")
    };
    let (inline, files) = run_in(&d, &sc(r#"{ "1" = [0, 2], "2" = [1, 3] }"#)).unwrap();
    let (file, _) = run_in(&d, &sc("\"groups.json\"")).unwrap();
    assert_eq!(inline, file, "inline and file groups");
    let t = &inline["traffic"][0];
    assert_eq!((inline["status"].as_str(), t["verified"].as_bool()), (Some("completed"), Some(true)), "{t}");
    assert_eq!(t["process_groups"]["1"], serde_json::json!({"ranks": [0, 2], "collectives": 1}));
    assert_eq!(t["collective_algorithms"]["barrier"], "dissemination");
    let (pair, _) =
        run_in(&d, &format!("name = \"p\"\n{TOPO}[[traffic]]\nkind = \"chakra\"\ntrace = \"pair\"\nhosts = [0, 4]\n"))
            .unwrap();
    let csv = &files.iter().find(|(f, _)| f == "chakra_collectives.csv").unwrap().1;
    // Instances in the files' order: group 1's allreduce (its first rank is 0), group 2's, the
    // barrier.
    let rows: Vec<Vec<&str>> = csv.lines().skip(1).map(|l| l.split(',').collect()).collect();
    let types: Vec<&str> = rows.iter().map(|r| r[2]).collect();
    assert_eq!(types, ["ALL_REDUCE", "ALL_REDUCE", "BARRIER"], "{csv}");
    assert_eq!(rows[0][7], pair["traffic"][0]["runtime_ps"].to_string(), "{csv}");
    // The barrier comes last on every rank: 2 rounds of 4 messages, after both groups.
    let barrier = &rows[2];
    let last_group_end =
        csv.lines().skip(1).take(2).map(|l| l.split(',').nth(6).unwrap().parse::<u64>().unwrap()).max();
    assert!(barrier[5].parse::<u64>().unwrap() >= last_group_end.unwrap(), "{csv}");
    assert_eq!(t["messages"].as_u64().unwrap(), pair["traffic"][0]["messages"].as_u64().unwrap() * 2 + 8, "{t}");
    for (groups, says) in [
        (r#"{ "1" = [0, 2] }"#, "pg_name \"2\": no such process group"),
        (r#"{ "1" = [0, 9], "2" = [1, 3] }"#, "rank 9 is not one of the job's 4 ranks"),
        ("\"missing.json\"", "missing.json"),
        ("\"dp.0.et\"", "did not contain valid UTF-8"),
        ("\"bad.json\"", "ASTRA-sim's communicator groups"),
    ] {
        let e = run_in(&d, &sc(groups)).unwrap_err();
        assert!(e.field.starts_with("traffic[0]."), "{e}");
        assert!(e.to_string().contains(says), "{groups}: {e}");
    }
    let e =
        run_in(&d, &(sc(r#"{ "1" = [0, 2], "2" = [1, 3] }"#) + "algorithms = { barrier = \"ring\" }\n")).unwrap_err();
    assert_eq!(e.field, "traffic[0].algorithms.barrier");
}
