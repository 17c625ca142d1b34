//! GOAL and Chakra traces on the flow backend (`run.backend = "flow"`): the GOAL export of a
//! registry allreduce takes the native flow run's time (the round trip), the shipped examples
//! agree with the packet engine on the same paths within the flow model's validated tolerance,
//! runs are deterministic, random deadlock-free traces complete with every receive matched, and
//! what flow cannot model is refused naming the field.

use reducelab_sched::algos::{build, Layout};
use reducelab_sched::export::{to_goal, GoalOptions};
use reducelab_sched::Collective;
use reducelab_sim::{run_scenario_str, RunOptions, RunOutput, Traffic};
use serde_json::Value;
use std::path::{Path, PathBuf};

const FAT_TREE: &str = "[topology]\nkind = \"fat_tree_2\"\nleaves = 4\nhosts_per_leaf = 4\nspines = 2\nbandwidth_gbps = 100\nlatency_ns = 500\n[network]\nswitch_latency_ns = 300\n";
const TORUS: &str =
    "[topology]\nshape = \"torus:4x4\"\nbandwidth_gbps = 400\nlatency_ns = 100\n[network]\nswitch_latency_ns = 300\n";
const FLOW: &str = "[run]\nbackend = \"flow\"\n";

fn dir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("reducelab-goal-flow-test-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn run_out(dir: &Path, text: &str) -> Result<RunOutput, reducelab_sim::ScenarioError> {
    run_scenario_str(text, &RunOptions { base_dir: Some(dir.to_path_buf()), ..Default::default() })
}

fn run_in(dir: &Path, text: &str) -> Result<Value, reducelab_sim::ScenarioError> {
    run_out(dir, text).map(|o| serde_json::from_str(&o.summary_json).unwrap())
}

fn ps(v: &Value) -> u64 {
    v.as_u64().unwrap_or_else(|| panic!("not a time: {v}"))
}

/// The round trip at flow level. A plan's step semantics are GOAL's (step k+1 of a rank waits
/// for its own step k: sends delivered, receives in), messages start at the exact time of the
/// delivery that freed them, and the engine is the plan runner's: the trace takes the plan's
/// fluid simulation's time to the picosecond. The native scenario run times contention-free
/// plans (ring and bucket on the torus) with the max-plus recurrence instead, which computes
/// the same times in another order of floating-point operations: within 2 ps.
#[test]
fn an_exported_allreduce_run_as_goal_at_flow_level_takes_the_native_flow_runs_time() {
    let d = dir("roundtrip");
    let mut checked = 0;
    let cases = [
        (FAT_TREE, Layout::line(16), "ring", 1u64 << 20),
        (FAT_TREE, Layout::line(16), "recursive-doubling-bandwidth", 256 << 10),
        (FAT_TREE, Layout::line(16), "swing-bandwidth", 1 << 20),
        (FAT_TREE, Layout::line(16), "recursive-doubling-latency", 64 << 10),
        (TORUS, Layout::new(vec![4, 4]).unwrap(), "bucket", 512 << 10),
        (TORUS, Layout::new(vec![4, 4]).unwrap(), "ring", 1 << 20),
        (TORUS, Layout::new(vec![4, 4]).unwrap(), "recursive-doubling-bandwidth", 256 << 10),
        (TORUS, Layout::new(vec![4, 4]).unwrap(), "swing-bandwidth", 8 << 20),
    ];
    let n_cases = cases.len();
    for (topo, layout, algorithm, bytes) in cases {
        let s = build(algorithm, Collective::Allreduce, &layout).unwrap();
        let goal = to_goal(&s, &GoalOptions { size_bytes: bytes, elem_bytes: 4, calc_ns_per_byte: 0.0 }).unwrap();
        let file = format!("{algorithm}-{}.goal", layout.dims.len());
        std::fs::write(d.join(&file), goal).unwrap();
        let what = format!("{algorithm} on {:?}, {bytes} B", layout.dims);
        let native_text = format!(
            "name = \"n\"\n{topo}{FLOW}[[traffic]]\nkind = \"collective\"\nalgorithm = \"{algorithm}\"\nbytes = {bytes}\nhosts = \"all\"\n"
        );
        let native = run_in(&d, &native_text).unwrap();
        let traced = run_in(
            &d,
            &format!("name = \"g\"\n{topo}{FLOW}[[traffic]]\nkind = \"goal\"\nfile = \"{file}\"\nhosts = \"all\"\nops = true\n"),
        )
        .unwrap();
        let (n, g) = (&native["traffic"][0], &traced["traffic"][0]);
        assert_eq!((native["backend"].as_str(), traced["backend"].as_str()), (Some("flow"), Some("flow")), "{what}");
        assert_eq!(traced["status"], "completed", "{what}: {traced}");
        assert_eq!(g["verified"], true, "{what}: {g}");
        assert_eq!(g["mismatched_receives"], 0, "{what}");
        assert_eq!(g["messages"], n["messages"], "{what}");
        // The plan's fluid simulation, on the scenario's own topology and flow parameters.
        let sc = reducelab_sim::load_scenario_str(&native_text, None).unwrap();
        let Some(Traffic::Collective { plan: Some(plan), .. }) = sc.traffic.first() else { panic!("{what}: no plan") };
        let cfg = reducelab_sim::scenario::flow_config(&sc.net, &sc.endpoint);
        let sim = reducelab_flow::run_plan_simulated(&sc.topology, plan, bytes, 4, &cfg).unwrap();
        assert_eq!(ps(&g["runtime_ps"]), sim.runtime_ps, "{what}: GOAL {g} vs the plan's fluid simulation");
        let (gt, nt) = (ps(&g["runtime_ps"]), ps(&n["runtime_ps"]));
        if native["flow"]["contention_free"] == true {
            assert!(gt.abs_diff(nt) <= 2, "{what}: GOAL {gt} ps vs native recurrence {nt} ps");
        } else {
            assert_eq!(gt, nt, "{what}: GOAL {gt} ps vs native {nt} ps");
        }
        assert!(ps(&g["critical_path_ps"]) <= gt, "{what}");
        checked += 1;
    }
    assert_eq!(checked, n_cases);
}

/// The shipped examples' scenario with `flow_control` and `transport` left at their lossless
/// defaults (flow level models neither drop-tail queues nor NDP), at packet level on the flow
/// backend's fixed minimal paths (`routing = "minimal"`) and at flow level. Fixed paths are
/// what the flow backend models; with adaptive routing the packet engine spreads the
/// messages over both spines and the two differ by the routing, not the model
/// (docs/flow-vs-packet.md, "GOAL and Chakra traces").
fn example_both_ways(example: &str) -> (u64, u64) {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scenarios/examples");
    let text = std::fs::read_to_string(root.join(example)).unwrap();
    let lossless: String = text
        .lines()
        .filter(|l| !l.starts_with("flow_control") && !l.starts_with("transport"))
        .map(|l| if l == "[network]" { "[network]\nrouting = \"minimal\"".to_string() } else { l.to_string() })
        .collect::<Vec<_>>()
        .join("\n");
    let packet = run_in(&root, &lossless).unwrap();
    let flow = run_in(&root, &format!("{lossless}\n{FLOW}")).unwrap();
    for (s, backend) in [(&packet, "packet"), (&flow, "flow")] {
        assert_eq!(s["status"], "completed", "{example} {backend}: {s}");
        assert_eq!(s["backend"], backend);
        assert_eq!(s["traffic"][0]["verified"], true, "{example} {backend}");
    }
    let (p, f) = (&packet["traffic"][0], &flow["traffic"][0]);
    assert_eq!(p["messages"], f["messages"], "{example}");
    assert_eq!(p["operations_completed"], f["operations_completed"], "{example}");
    (ps(&p["runtime_ps"]), ps(&f["runtime_ps"]))
}

/// Within 5%, the flow backend's validated tolerance against the packet engine
/// (docs/flow-vs-packet.md: 72 of 75 collective cases within 5%, all within 6%).
#[test]
fn the_shipped_traces_take_the_packet_engines_time_within_the_flow_tolerance() {
    for example in ["goal_stencil.toml", "chakra_training.toml"] {
        let (p, f) = example_both_ways(example);
        let rel = (f as f64 - p as f64) / p as f64;
        assert!(rel.abs() <= 0.05, "{example}: packet {p} ps, flow {f} ps ({:+.2}%)", 100.0 * rel);
    }
}

#[test]
fn a_chakra_entry_at_flow_level_reports_its_iteration_and_files() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scenarios/examples");
    let text = std::fs::read_to_string(root.join("chakra_training.toml")).unwrap();
    let lossless: String = text
        .lines()
        .filter(|l| !l.starts_with("flow_control") && !l.starts_with("transport"))
        .collect::<Vec<_>>()
        .join("\n");
    let a = run_out(&root, &format!("{lossless}\n{FLOW}")).unwrap();
    let b = run_out(&root, &format!("{lossless}\n{FLOW}")).unwrap();
    assert_eq!(a.summary_json, b.summary_json, "same scenario and seed, same bytes");
    assert_eq!(a.files, b.files);
    let s: Value = serde_json::from_str(&a.summary_json).unwrap();
    let t = &s["traffic"][0];
    assert_eq!(t["kind"], "chakra");
    assert_eq!(t["iteration_time_ps"], t["runtime_ps"], "{t}");
    let names: Vec<&str> = a.files.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(names, ["goal_ranks.csv", "chakra_collectives.csv", "chakra_ranks.csv"]);
    // Every rank's compute plus exposed communication is its end.
    let ends: Vec<u64> = t["rank_end_ps"].as_array().unwrap().iter().map(ps).collect();
    for (r, e) in ends.iter().enumerate() {
        assert_eq!(ps(&t["rank_compute_ps"][r]) + ps(&t["rank_exposed_comm_ps"][r]), *e, "rank {r}");
    }
}

const PINGPONG: &str = "num_ranks 2\nrank 0 {\nl1: send 1000b to 1 tag 5\nl2: recv 1000b from 1 tag 5\nl2 requires l1\nl3: calc 3000\nl3 requires l2\n}\nrank 1 {\nl1: recv 1000b from 0 tag 5\nl2: send 1000b to 0 tag 5\nl2 requires l1\n}\n";

/// Two entries on disjoint hosts share one flow network; a run is byte-identical when repeated;
/// a lone message takes the flow backend's lone-message time; an entry's start delays it.
#[test]
fn several_entries_share_the_network_deterministically() {
    let d = dir("entries");
    std::fs::write(d.join("pp.goal"), PINGPONG).unwrap();
    let two = format!(
        "name = \"two\"\nseed = 11\n{FAT_TREE}{FLOW}[[traffic]]\nkind = \"goal\"\nfile = \"pp.goal\"\nhosts = [0, 15]\nops = true\n[[traffic]]\nkind = \"goal\"\nfile = \"pp.goal\"\nplacement = \"random\"\nstart_ns = 2000\n"
    );
    let a = run_out(&d, &two).unwrap();
    let b = run_out(&d, &two).unwrap();
    assert_eq!(a.summary_json, b.summary_json);
    assert_eq!(a.files, b.files);
    let s: Value = serde_json::from_str(&a.summary_json).unwrap();
    assert_eq!(s["status"], "completed", "{s}");
    assert_eq!(s["messages"]["count"], 4);
    let names: Vec<&str> = a.files.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(names, ["goal_ranks.csv", "goal_ops_0.csv"]);
    // Ping-pong: two lone messages of 1000 B from host 0 to host 15 and back, then 3 µs.
    let mut file = reducelab_sim::parse(&two).unwrap();
    file.base_dir = Some(d.clone());
    let sc = file.resolve(None).unwrap();
    let cfg = reducelab_sim::scenario::flow_config(&sc.net, &sc.endpoint);
    let mut net = reducelab_flow::FlowNet::new(&sc.topology, &cfg);
    let there = net.lone_message_ps(0, 15, 1000).unwrap();
    let back = net.lone_message_ps(15, 0, 1000).unwrap();
    let t0 = &s["traffic"][0];
    // The other entry's messages may share a spine link; alone the chain takes exactly this.
    let alone = run_in(
        &d,
        &format!("name = \"one\"\n{FAT_TREE}{FLOW}[[traffic]]\nkind = \"goal\"\nfile = \"pp.goal\"\nhosts = [0, 15]\n"),
    )
    .unwrap();
    assert_eq!(ps(&alone["traffic"][0]["runtime_ps"]), (there + back).round() as u64 + 3_000_000);
    assert!(ps(&t0["runtime_ps"]) >= ps(&alone["traffic"][0]["runtime_ps"]));
    assert_eq!(ps(&t0["critical_path_ps"]), ps(&t0["runtime_ps"]), "one chain");
    // Times of an entry are after its start.
    assert!(ps(&s["traffic"][1]["runtime_ps"]) > 3_000_000);
    assert!(ps(&s["sim_time_ps"]) >= 2_000_000 + ps(&s["traffic"][1]["runtime_ps"]));
}

#[test]
fn what_flow_level_cannot_model_is_refused_naming_the_field() {
    let d = dir("refused");
    std::fs::write(d.join("pp.goal"), PINGPONG).unwrap();
    let goal = "[[traffic]]\nkind = \"goal\"\nfile = \"pp.goal\"\n";
    let cases = [
        ("loss_probability = 0.01\n", "network.loss_probability"),
        ("ecn_threshold_bytes = 20000\n", "network.ecn_threshold_bytes"),
        ("flow_control = \"drop_tail\"\n", "network.flow_control"),
    ];
    for (network, says) in cases {
        let e = run_in(&d, &format!("name = \"r\"\n{FAT_TREE}{network}{FLOW}{goal}")).unwrap_err();
        assert_eq!(e.field, "run.backend", "{e}");
        assert!(e.reason.contains(says) && e.reason.contains("packet level only"), "{e}");
    }
    let e = run_in(&d, &format!("name = \"r\"\n{FAT_TREE}[run]\nbackend = \"flow\"\ntime_limit_us = 5\n{goal}"))
        .unwrap_err();
    assert!(e.field == "run.backend" && e.reason.contains("run.time_limit_us"), "{e}");
    let mixed = format!(
        "name = \"r\"\n{FAT_TREE}{FLOW}{goal}hosts = [0, 1]\n[[traffic]]\nkind = \"collective\"\nalgorithm = \"ring\"\nbytes = 1000\nhosts = [2, 3]\n"
    );
    let e = run_in(&d, &mixed).unwrap_err();
    assert!(e.field == "run.backend" && e.reason.contains("traffic[1] is kind = \"collective\""), "{e}");
    // `auto` keeps traces at packet level.
    let auto = run_in(&d, &format!("name = \"r\"\n{FAT_TREE}[run]\nbackend = \"auto\"\n{goal}")).unwrap();
    assert_eq!(auto["backend"], "packet");
}

/// A small deterministic generator (SplitMix64), so failures name a reproducible case.
struct Mix(u64);
impl Mix {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// A random trace that cannot deadlock: a global sequence of messages and calcs, each rank's
/// operations in that order, each depending (requires or irequires) on some of its rank's
/// earlier operations, or on none, and each send or receive started after the previous one of
/// its channel at its rank (irequires), so that the k-th send and the k-th receive of a
/// channel are one message of the sequence. Then every operation completes, by induction
/// along the sequence: its predecessors complete, so it starts, and a receive's send (same
/// place in the sequence) starts too and is delivered (a send does not wait for its receive).
/// Without the channel order, a receive posted early takes an earlier message, and a later
/// one can wait for a send that waits for it: MPI's rules allow that deadlock.
fn random_trace(m: &mut Mix, ranks: u32, events: usize) -> (String, usize, usize) {
    use std::collections::BTreeMap;
    let mut ops: Vec<Vec<String>> = vec![Vec::new(); ranks as usize];
    // Per rank, per operation: its predecessors (true: requires, false: irequires).
    let mut deps: Vec<Vec<BTreeMap<usize, bool>>> = vec![Vec::new(); ranks as usize];
    // The last send and receive of each (rank, peer, tag, is_send).
    let mut last: BTreeMap<(u32, u32, u64, bool), usize> = BTreeMap::new();
    let (mut sends, mut recvs) = (0, 0);
    let mut push = |r: u32, op: String, chan: Option<(u32, u64, bool)>, m: &mut Mix| {
        let ri = r as usize;
        let me = ops[ri].len();
        ops[ri].push(format!("o{me}: {op}"));
        let mut d = BTreeMap::new();
        if me > 0 {
            match m.below(4) {
                0 => {}
                1 => {
                    d.insert(me - 1, false);
                }
                _ => {
                    d.insert(m.below(me as u64) as usize, true);
                }
            }
            if m.below(3) == 0 {
                d.insert(me - 1, true);
            }
        }
        if let Some((peer, tag, send)) = chan {
            if let Some(prev) = last.insert((r, peer, tag, send), me) {
                d.entry(prev).or_insert(false);
            }
        }
        deps[ri].push(d);
    };
    for _ in 0..events {
        let a = m.below(ranks as u64) as u32;
        if m.below(4) == 0 {
            let cpu = m.below(2);
            push(a, format!("calc {} cpu {cpu}", m.below(3000)), None, m);
            continue;
        }
        let b = (a + 1 + m.below(ranks as u64 - 1) as u32) % ranks;
        let bytes = [0u64, 8, 1000, 4032, 70_000, 300_000][m.below(6) as usize];
        let tag = m.below(3);
        push(a, format!("send {bytes}b to {b} tag {tag}"), Some((b, tag, true)), m);
        push(b, format!("recv {bytes}b from {a} tag {tag}"), Some((a, tag, false)), m);
        sends += 1;
        recvs += 1;
    }
    let mut text = format!("num_ranks {ranks}\n");
    for r in 0..ranks as usize {
        text += &format!("rank {r} {{\n");
        for o in &ops[r] {
            text += o;
            text += "\n";
        }
        for (me, d) in deps[r].iter().enumerate() {
            for (&p, &requires) in d {
                text += &format!("o{me} {} o{p}\n", if requires { "requires" } else { "irequires" });
            }
        }
        text += "}\n";
    }
    (text, sends, recvs)
}

#[test]
fn random_deadlock_free_traces_complete_at_flow_level_with_every_receive_matched() {
    let d = dir("random");
    let mut m = Mix(0x5EED_F10E);
    for case in 0..40 {
        let ranks = 2 + m.below(7) as u32;
        let events = 5 + m.below(40) as usize;
        let (text, sends, recvs) = random_trace(&mut m, ranks, events);
        let file = format!("r{case}.goal");
        std::fs::write(d.join(&file), &text).unwrap();
        let eager = [0u64, 1000, 1 << 20][m.below(3) as usize];
        let endpoint = if m.below(2) == 0 {
            "[endpoint]\nsend_overhead_ns = 200\nrecv_overhead_ns = 300\nrendezvous_threshold_bytes = 12000\n"
        } else {
            ""
        };
        let topo = if m.below(2) == 0 { FAT_TREE } else { TORUS };
        let s = run_out(
            &d,
            &format!(
                "name = \"r\"\nseed = {case}\n{topo}{endpoint}{FLOW}[[traffic]]\nkind = \"goal\"\nfile = \"{file}\"\nplacement = \"random\"\neager_bytes = {eager}\nops = true\n"
            ),
        )
        .unwrap();
        let v: Value = serde_json::from_str(&s.summary_json).unwrap();
        let t = &v["traffic"][0];
        let what = format!("case {case} ({ranks} ranks, eager {eager}):\n{text}");
        assert_eq!(v["status"], "completed", "{what}{v}");
        assert_eq!(t["verified"], true, "{what}");
        assert_eq!(t["mismatched_receives"], 0, "{what}");
        assert_eq!(t["operations_completed"], t["operations"], "{what}");
        assert_eq!(t["messages"], sends as u64, "{what}");
        assert_eq!(v["messages"]["completed"], sends as u64, "{what}");
        let runtime = ps(&t["runtime_ps"]);
        assert!(ps(&t["critical_path_ps"]) <= runtime, "{what}{t}");
        // Every operation has a start and an end, no earlier than its start and no later than
        // the run; receives end no earlier than some send of their channel started.
        let (_, csv) = s.files.iter().find(|(n, _)| n == "goal_ops_0.csv").expect("ops file");
        let mut recv_ends = 0;
        for line in csv.lines().skip(1) {
            let f: Vec<&str> = line.split(',').collect();
            let (start, end): (u64, u64) = (f[5].parse().unwrap(), f[6].parse().unwrap());
            assert!(start <= end && end <= runtime, "{what}{line}");
            if f[2] == "recv" {
                recv_ends += 1;
            }
        }
        assert_eq!(recv_ends, recvs, "{what}");
        if case % 4 == 0 {
            // The same trace at packet level: the shared bookkeeping's guarantees hold there too.
            let p = run_in(
                &d,
                &format!(
                    "name = \"r\"\nseed = {case}\n{topo}{endpoint}[[traffic]]\nkind = \"goal\"\nfile = \"{file}\"\nplacement = \"random\"\neager_bytes = {eager}\n"
                ),
            )
            .unwrap();
            let t = &p["traffic"][0];
            assert_eq!(p["status"], "completed", "{what}{p}");
            assert_eq!(t["verified"], true, "{what}");
            assert!(ps(&t["critical_path_ps"]) <= ps(&t["runtime_ps"]), "{what}{t}");
        }
    }
}
