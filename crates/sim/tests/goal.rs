//! GOAL traces as traffic (`kind = "goal"`): the GOAL that ReduceLab exports for a registry
//! algorithm and collective (allreduce, its halves, broadcast, reduce, all-to-all), run back
//! through the importer on the packet engine, takes exactly the native collective's time (the
//! round trip, from the text and from LogGOPSim's binary form); placement, `eager_bytes`, stalls
//! and bad traces.

use reducelab_sched::algos::{build, Layout};
use reducelab_sched::export::{to_goal, GoalOptions};
use reducelab_sched::Collective;
use reducelab_sim::{run_scenario_str, RunOptions};
use serde_json::Value;
use std::path::PathBuf;

const TOPO: &str = "[topology]\nkind = \"fat_tree_2\"\nleaves = 4\nhosts_per_leaf = 4\nspines = 2\nbandwidth_gbps = 100\nlatency_ns = 500\n[network]\nswitch_latency_ns = 300\n";

/// A directory of this test's own (removed first), for trace files.
fn dir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("reducelab-goal-test-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn run_in(dir: &std::path::Path, text: &str) -> Result<Value, reducelab_sim::ScenarioError> {
    let opts = RunOptions { base_dir: Some(dir.to_path_buf()), ..Default::default() };
    run_scenario_str(text, &opts).map(|o| serde_json::from_str(&o.summary_json).unwrap())
}

#[test]
fn an_exported_schedule_run_as_goal_takes_the_native_collectives_time() {
    let d = dir("roundtrip");
    let mut checked = 0;
    let (ar, rs) = (Collective::Allreduce, Collective::ReduceScatter);
    let cases = [
        ("ring", ar, 16u32, 1u64 << 20),
        ("ring", ar, 5, 40 << 10),
        ("ring-bidirectional", ar, 8, 256 << 10),
        ("recursive-doubling-latency", ar, 16, 64 << 10),
        ("recursive-doubling-bandwidth", ar, 8, 256 << 10),
        ("swing-bandwidth", ar, 16, 1 << 20),
        ("swing-latency", ar, 8, 32 << 10),
        ("bucket", ar, 16, 512 << 10),
        ("ring", rs, 12, 96 << 10),
        ("recursive-doubling-bandwidth", Collective::Allgather, 16, 256 << 10),
        ("swing-bandwidth", Collective::Broadcast { root: 5 }, 16, 256 << 10),
        ("binomial", Collective::Broadcast { root: 3 }, 11, 64 << 10),
        ("binomial", Collective::Reduce { root: 0 }, 16, 64 << 10),
        ("binomial", ar, 12, 32 << 10),
        ("pairwise", Collective::Alltoall, 16, 64 << 10),
        ("bruck", Collective::Alltoall, 13, 13 << 10),
    ];
    for (algorithm, collective, p, bytes) in cases {
        let Ok(s) = build(algorithm, collective, &Layout::line(p)) else {
            panic!("{algorithm} {collective:?} on {p} ranks does not build")
        };
        let goal = to_goal(&s, &GoalOptions { size_bytes: bytes, elem_bytes: 4, calc_ns_per_byte: 0.0 }).unwrap();
        let file = format!("{algorithm}-{}-{p}.goal", collective.name());
        std::fs::write(d.join(&file), &goal).unwrap();
        let hosts: Vec<String> = (0..p).map(|h| h.to_string()).collect();
        let hosts = hosts.join(", ");
        let root = match collective {
            Collective::Broadcast { root } | Collective::Reduce { root } => format!("root = {root}\n"),
            _ => String::new(),
        };
        let native = run_in(
            &d,
            &format!(
                "name = \"n\"\n{TOPO}[[traffic]]\nkind = \"collective\"\nalgorithm = \"{algorithm}\"\ncollective = \"{}\"\n{root}bytes = {bytes}\nhosts = [{hosts}]\n",
                collective.name()
            ),
        )
        .unwrap();
        let traced = run_in(
            &d,
            &format!("name = \"g\"\n{TOPO}[[traffic]]\nkind = \"goal\"\nfile = \"{file}\"\nhosts = [{hosts}]\n"),
        )
        .unwrap();
        let (n, g) = (&native["traffic"][0], &traced["traffic"][0]);
        let what = format!("{algorithm} {} on {p} ranks, {bytes} B", collective.name());
        assert_eq!(native["status"], "completed", "{what}: {n}");
        assert_eq!(n["verified"], true, "{what}: {n}");
        assert_eq!(traced["status"], "completed", "{what}: {g}");
        assert_eq!(g["verified"], true, "{what}: {g}");
        assert_eq!(n["algorithm"], algorithm, "the native run is the same variant");
        assert_eq!(g["runtime_ps"], n["runtime_ps"], "{what}: GOAL {g} vs native {n}");
        assert_eq!(g["messages"], n["messages"], "{what}");
        // No calc: the critical path is a chain of messages, no longer than the run.
        assert!(g["critical_path_ps"].as_u64().unwrap() <= g["runtime_ps"].as_u64().unwrap());
        // The same trace in LogGOPSim's binary form (what txt2bin writes) runs alike.
        let bin = format!("{file}.bin");
        let trace = reducelab_goal::parse_str(&goal).unwrap();
        std::fs::write(d.join(&bin), reducelab_goal::write_binary(&trace)).unwrap();
        let b = run_in(
            &d,
            &format!("name = \"g\"\n{TOPO}[[traffic]]\nkind = \"goal\"\nfile = \"{bin}\"\nhosts = [{hosts}]\n"),
        )
        .unwrap();
        let b = &b["traffic"][0];
        assert_eq!(b["verified"], true, "{what}, binary: {b}");
        for k in ["runtime_ps", "messages", "critical_path_ps"] {
            assert_eq!(b[k], g[k], "{what}: {k} from the binary form");
        }
        checked += 1;
    }
    assert_eq!(checked, cases.len());
}

const PINGPONG: &str = "num_ranks 2\nrank 0 {\nl1: send 1000b to 1 tag 5\nl2: recv 1000b from 1 tag 5\nl2 requires l1\nl3: calc 3000\nl3 requires l2\n}\nrank 1 {\nl1: recv 1000b from 0 tag 5\nl2: send 1000b to 0 tag 5\nl2 requires l1\n}\n";

#[test]
fn ranks_are_placed_linearly_randomly_or_as_listed_and_the_run_is_deterministic() {
    let d = dir("placement");
    std::fs::write(d.join("pp.goal"), PINGPONG).unwrap();
    let sc = |extra: &str| {
        format!("name = \"p\"\nseed = 7\n{TOPO}[[traffic]]\nkind = \"goal\"\nfile = \"pp.goal\"\n{extra}")
    };
    let near = run_in(&d, &sc("hosts = [0, 1]\n")).unwrap();
    let far = run_in(&d, &sc("hosts = [0, 15]\n")).unwrap();
    let t = |v: &Value| v["traffic"][0]["runtime_ps"].as_u64().unwrap();
    // Two hops through a leaf against four through a spine; the calc adds 3 µs to both.
    assert!(t(&near) < t(&far), "{} vs {}", t(&near), t(&far));
    assert!(t(&near) > 3_000_000);
    assert_eq!(near["traffic"][0]["critical_path_ps"], near["traffic"][0]["runtime_ps"], "one chain");
    let a = run_in(&d, &sc("hosts = \"all\"\n")).unwrap_err();
    assert_eq!(a.field, "traffic[0].hosts");
    assert!(a.reason.contains("16 hosts for the 2 ranks of pp.goal"), "{a}");
    let r1 = run_scenario_str(
        &sc("hosts = [3, 9]\nplacement = \"random\"\n"),
        &RunOptions { base_dir: Some(d.clone()), ..Default::default() },
    )
    .unwrap();
    let r2 = run_scenario_str(
        &sc("hosts = [3, 9]\nplacement = \"random\"\n"),
        &RunOptions { base_dir: Some(d.clone()), ..Default::default() },
    )
    .unwrap();
    assert_eq!(r1.summary_json, r2.summary_json, "same scenario and seed, same bytes");
    assert_eq!(r1.files, r2.files);
    let e = run_in(&d, &sc("placement = \"round_robin\"\n")).unwrap_err();
    assert_eq!(e.field, "traffic[0].placement");
}

#[test]
fn an_eager_send_completes_when_handed_to_the_network() {
    let d = dir("eager");
    // Rank 0 sends, then computes; with eager sends the calc starts at once.
    std::fs::write(
        d.join("e.goal"),
        "num_ranks 2\nrank 0 {\nl1: send 100000b to 1 tag 0\nl2: calc 1000\nl2 requires l1\n}\nrank 1 {\nl1: recv 100000b from 0 tag 0\n}\n",
    )
    .unwrap();
    let sc = |eager: u64| {
        format!(
            "name = \"e\"\n{TOPO}[[traffic]]\nkind = \"goal\"\nfile = \"e.goal\"\neager_bytes = {eager}\nops = true\n"
        )
    };
    let ends = |v: &Value| -> (u64, u64) {
        let e =
            v["traffic"][0]["rank_end_ps"].as_array().unwrap().iter().map(|x| x.as_u64().unwrap()).collect::<Vec<_>>();
        (e[0], e[1])
    };
    let (r0, r1) = ends(&run_in(&d, &sc(0)).unwrap());
    assert!(r0 == r1 + 1_000_000, "rendezvous: the calc follows delivery ({r0} vs {r1})");
    let (e0, e1) = ends(&run_in(&d, &sc(1 << 20)).unwrap());
    assert_eq!(e0, 1_000_000, "eager: the calc runs while the message travels");
    assert_eq!(e1, r1, "the receiver sees the same delivery");
}

#[test]
fn bad_traces_are_refused_naming_the_file_line_and_reason() {
    let d = dir("bad");
    let cases = [
        ("cycle.goal", "num_ranks 1\nrank 0 {\na: calc 1\nb: calc 1\na requires b\nb requires a\n}\n", "cycle"),
        ("unmatched.goal", "num_ranks 2\nrank 0 {\na: send 8b to 1 tag 0\n}\nrank 1 {\n}\n", "rank 0"),
        ("peer.goal", "num_ranks 2\nrank 0 {\na: send 8b to 7 tag 0\n}\nrank 1 {\n}\n", "line 3"),
        ("syntax.goal", "num_ranks 2\nrank 0 {\na: sned 8b to 1\n}\n", "line 3"),
        (
            "wild.goal",
            "num_ranks 2\nrank 0 {\na: send 8b to 1 tag 0\n}\nrank 1 {\nb: recv 8b from -1 tag 0\n}\n",
            "wildcard",
        ),
    ];
    for (file, text, says) in cases {
        std::fs::write(d.join(file), text).unwrap();
        let e =
            run_in(&d, &format!("name = \"b\"\n{TOPO}[[traffic]]\nkind = \"goal\"\nfile = \"{file}\"\n")).unwrap_err();
        assert_eq!(e.field, "traffic[0].file", "{file}: {e}");
        assert!(e.reason.starts_with(file) && e.reason.contains(says), "{file}: {e}");
    }
    let e = run_in(&d, &format!("name = \"b\"\n{TOPO}[[traffic]]\nkind = \"goal\"\nfile = \"missing.goal\"\n"))
        .unwrap_err();
    assert!(e.field == "traffic[0].file" && e.reason.starts_with("missing.goal"), "{e}");
    let e = run_in(&d, &format!("name = \"b\"\n{TOPO}[[traffic]]\nkind = \"goal\"\n")).unwrap_err();
    assert_eq!((e.field.as_str(), e.reason.contains("is required")), ("traffic[0].file", true), "{e}");
}

#[test]
fn a_trace_that_cannot_finish_stalls_naming_the_rank_and_operation() {
    let d = dir("stall");
    std::fs::write(d.join("pp.goal"), PINGPONG).unwrap();
    // Every packet lost, raw messages: nothing arrives, and the run says where each rank waits.
    let text = format!(
        "name = \"s\"\n{TOPO}loss_probability = 1.0\n[run]\nwatchdog_us = 50\n[[traffic]]\nkind = \"goal\"\nfile = \"pp.goal\"\nhosts = [0, 5]\n"
    );
    let s = run_in(&d, &text).unwrap();
    assert_eq!(s["status"], "stalled", "{s}");
    let why = s["status_reason"].as_str().unwrap();
    assert!(
        why.contains("goal traffic[0] (pp.goal): 2 of 2 ranks unfinished") && why.contains("rank 1: recv l1 (started)"),
        "{why}"
    );
}

#[test]
fn the_loggp_backend_times_a_trace_as_the_goal_crate_and_takes_wildcards() {
    let d = dir("loggp");
    let wild = "num_ranks 3\nrank 0 {\na: recv 100b from -1 tag 0\nb: recv 100b from -1 tag 0\nc: calc 50\nc requires a\nc requires b\n}\nrank 1 {\na: send 100b to 0 tag 0\n}\nrank 2 {\nx: calc 700\na: send 100b to 0 tag 0\na requires x\n}\n";
    std::fs::write(d.join("w.goal"), wild).unwrap();
    std::fs::write(d.join("pp.goal"), PINGPONG).unwrap();
    let sc = |file: &str, extra: &str| {
        format!("name = \"l\"\n{TOPO}[run]\nbackend = \"loggp\"\n[loggp]\nlatency_ns = 1000\ngap_per_byte_ns = 2\n{extra}[[traffic]]\nkind = \"goal\"\nfile = \"{file}\"\nops = true\n")
    };
    for file in ["w.goal", "pp.goal"] {
        let out =
            run_scenario_str(&sc(file, ""), &RunOptions { base_dir: Some(d.clone()), ..Default::default() }).unwrap();
        let s: Value = serde_json::from_str(&out.summary_json).unwrap();
        assert_eq!(s["status"], "completed", "{s}");
        assert_eq!(s["backend"], "loggp");
        // The crate's own simulation with the same parameters, in ps.
        let trace = reducelab_goal::parse_file(&d.join(file)).unwrap();
        let p = reducelab_goal::LogGpParams { latency_ns: 1000, gap_per_byte_ns: 2, ..Default::default() };
        let r = reducelab_goal::simulate(&reducelab_goal::check(&trace).unwrap(), &p, false).unwrap();
        let ends: Vec<u64> = r.rank_end_ns.iter().map(|e| e * 1000).collect();
        assert_eq!(s["traffic"][0]["rank_end_ps"], serde_json::json!(ends), "{file}");
        assert_eq!(s["traffic"][0]["critical_path_ps"], r.critical_path_ns * 1000);
        assert!(out.files.iter().any(|(n, c)| n == "goal_ops_0.csv" && c.lines().count() == 1 + trace.num_ops()));
    }
    // The packet engine refuses the wildcards, naming the way to run them; LogGP takes only GOAL.
    let e = run_in(&d, &format!("name = \"p\"\n{TOPO}[[traffic]]\nkind = \"goal\"\nfile = \"w.goal\"\n")).unwrap_err();
    assert!(e.field == "traffic[0].file" && e.reason.contains("wildcard") && e.reason.contains("loggp"), "{e}");
    let e =
        run_in(&d, &format!("{}[[traffic]]\nkind = \"permutation\"\nbytes = 100\n", sc("pp.goal", ""))).unwrap_err();
    assert_eq!(e.field, "run.backend", "{e}");
    let e = run_in(&d, &sc("pp.goal", "gap = 3\n")).unwrap_err();
    assert_eq!(e.field, "loggp.gap", "{e}");
}

/// Several jobs share the network on disjoint hosts: entries without `hosts` take free ones
/// (the lowest in order, or drawn from the seed), entries with `hosts` keep theirs.
#[test]
fn several_goal_jobs_run_at_once_on_disjoint_hosts() {
    let d = dir("jobs");
    std::fs::write(d.join("pp.goal"), PINGPONG).unwrap();
    std::fs::write(
        d.join("ring6.goal"),
        reducelab_sched::export::to_goal(
            &build("ring", Collective::Allreduce, &Layout::line(6)).unwrap(),
            &GoalOptions { size_bytes: 6 << 12, elem_bytes: 4, calc_ns_per_byte: 0.0 },
        )
        .unwrap(),
    )
    .unwrap();
    let job = |file: &str, extra: &str| format!("[[traffic]]\nkind = \"goal\"\nfile = \"{file}\"\n{extra}");
    let hosts_of = |sc: &str| -> Vec<Vec<u32>> {
        let sc = reducelab_sim::load_scenario_file(
            &{
                let p = d.join("s.toml");
                std::fs::write(&p, sc).unwrap();
                p
            },
            None,
        )
        .unwrap();
        sc.traffic
            .iter()
            .map(|t| if let reducelab_sim::Traffic::Goal(g) = t { g.hosts.clone() } else { vec![] })
            .collect()
    };
    let base = format!("name = \"j\"\nseed = 4\n{TOPO}");
    let linear = hosts_of(&format!(
        "{base}{}{}{}",
        job("ring6.goal", ""),
        job("pp.goal", "hosts = [7, 2]\n"),
        job("ring6.goal", "")
    ));
    assert_eq!(linear, vec![vec![0, 1, 3, 4, 5, 6], vec![7, 2], vec![8, 9, 10, 11, 12, 13]]);
    let random = hosts_of(&format!(
        "{base}{}{}",
        job("ring6.goal", "placement = \"random\"\n"),
        job("ring6.goal", "placement = \"random\"\n")
    ));
    let mut all: Vec<u32> = random.concat();
    all.sort_unstable();
    all.dedup();
    assert_eq!(all.len(), 12, "disjoint: {random:?}");
    assert_ne!(random[0], vec![0, 1, 2, 3, 4, 5], "drawn, not in order");
    let e = run_in(&d, &format!("{base}{}{}{}", job("ring6.goal", ""), job("ring6.goal", ""), job("ring6.goal", "")))
        .unwrap_err();
    assert!(e.field == "traffic[2].hosts" && e.reason.contains("4 hosts are free"), "{e}");
    // Both jobs run to the end, each verified, on one network.
    let s = run_in(&d, &format!("{base}{}{}", job("ring6.goal", ""), job("ring6.goal", "placement = \"random\"\n")))
        .unwrap();
    assert_eq!(s["status"], "completed", "{s}");
    for t in s["traffic"].as_array().unwrap() {
        assert_eq!(t["verified"], true, "{t}");
    }
}

#[test]
fn an_irequires_successor_of_a_receive_waits_on_the_critical_path_for_its_start_only() {
    let d = dir("irequires");
    // The calc may start as soon as the receive is posted (time 0), not when its message is in
    // (about 85 µs later); it runs 200 µs and ends the run.
    std::fs::write(
        d.join("i.goal"),
        "num_ranks 2\nrank 0 {\ns: send 1000000b to 1 tag 0\n}\nrank 1 {\nr: recv 1000000b from 0 tag 0\nc: calc 200000\nc irequires r\n}\n",
    )
    .unwrap();
    let s =
        run_in(&d, &format!("name = \"i\"\n{TOPO}[[traffic]]\nkind = \"goal\"\nfile = \"i.goal\"\nhosts = [0, 15]\n"))
            .unwrap();
    let t = &s["traffic"][0];
    assert_eq!(s["status"], "completed", "{s}");
    assert_eq!(t["runtime_ps"], 200_000_000, "{t}");
    // The calc alone is the longest chain (the message ends before it).
    assert_eq!(t["critical_path_ps"], t["runtime_ps"], "{t}");
}

/// The packet engine against the LogGP mode on a ping-pong, with the packet engine given
/// LogGOPSim's parameters (`o` as `[endpoint]` send and receive overheads, `L` as the two links'
/// latency, `G` = 6 ns per byte as the link rate, no switch latency; LogGOPSim's per-message `g`
/// has no packet-level counterpart and does not bind here): each message takes exactly what its
/// packets add to LogGP's `2o + L + (s−1)·G` — `G` per header byte (one 64-byte header per packet
/// of at most 4096 bytes) and `G` per byte of the first, largest packet, which the switch stores
/// before forwarding — plus the one `G` of LogGP's `s − 1` (docs/workloads.md, "The packet engine
/// against LogGP").
#[test]
fn the_packet_engines_ping_pong_is_loggps_plus_what_packets_add() {
    let d = dir("pingpong-loggp");
    let (o, l, g, mtu, hdr) = (1500u64, 2500u64, 6u64, 4096u64, 64u64);
    for s in [1u64, 100, 4032, 4033, 4096, 65536, 1 << 20] {
        let text = format!(
            "num_ranks 2\nrank 0 {{\nl1: send {s}b to 1 tag 5\nl2: recv {s}b from 1 tag 6\nl2 requires l1\n}}\nrank 1 {{\nl1: recv {s}b from 0 tag 5\nl2: send {s}b to 0 tag 6\nl2 requires l1\n}}\n"
        );
        std::fs::write(d.join("pp.goal"), &text).unwrap();
        let loggp = reducelab_goal::simulate(
            &reducelab_goal::check(&reducelab_goal::parse_str(&text).unwrap()).unwrap(),
            &reducelab_goal::LogGpParams::default(),
            false,
        )
        .unwrap()
        .max_end()
        .1;
        assert_eq!(loggp, 2 * (2 * o + l + (s - 1) * g), "{s} B: LogGP's formula");
        let sc = format!(
            "name = \"pp\"\n[topology]\nkind = \"star\"\nhosts = 2\nbandwidth_gbps = 1.3333333333333333\nlatency_ns = {}\n\
             [network]\nswitch_latency_ns = 0\n[endpoint]\nsend_overhead_ns = {o}\nrecv_overhead_ns = {o}\n\
             [[traffic]]\nkind = \"goal\"\nfile = \"pp.goal\"\nhosts = [0, 1]\n",
            l / 2
        );
        let v = run_in(&d, &sc).unwrap();
        let packet_ns = v["traffic"][0]["runtime_ps"].as_u64().unwrap() / 1000;
        let packets = s.div_ceil(mtu - hdr).max(1);
        let first = (s + hdr).min(mtu);
        assert_eq!(
            packet_ns - loggp,
            2 * g * (packets * hdr + first + 1),
            "{s} B: packet {packet_ns} ns, LogGP {loggp} ns"
        );
    }
}
