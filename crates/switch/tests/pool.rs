//! The pool protocols (SwitchML, ATP, DSA: training jobs) over the software switch on
//! loopback: a switch process of this crate's binary, workers and parameter servers as threads
//! of the test (or of the binary's `run`), only 127.0.0.0/8, every run bounded by the hosts'
//! timeout and every process stopped (SIGTERM, then reaped) by the test that started it.
//!
//! Each test uses its own 127.78.K.0/24 block of addresses (`loopback.rs` uses 127.77.K.0/24).

use std::net::{Ipv4Addr, UdpSocket};
use std::process::{Command, Stdio};
use std::time::Duration;

use reducelab_switch::pool_host::{run_pool_hosts, PoolHostOptions, PoolHostReport};
use reducelab_switch::pool_plan::PoolPlan;
use serde_json::Value;

const PROTOCOLS: [&str; 3] = ["switchml", "atp", "dsa"];

mod common;
use common::{Proc, Setup, BIN};

impl Setup {
    fn new(name: &str, block: u8, text: String) -> Setup {
        Setup::at(name, Ipv4Addr::new(127, 78, block, 1), text)
    }
    fn plan(&self) -> PoolPlan {
        PoolPlan::from_scenario(&self.text, None, (self.ip, 47000)).unwrap()
    }
}

/// One job of 4 workers (and a PS for ATP and DSA) on a star: DNN A at 1% scale (648 PSNs of
/// 62 int32 values per worker), 256 aggregators, the workers' timeout floor `min_rto_us`.
fn scenario(protocol: &str, min_rto_us: u64) -> String {
    let hosts = if protocol == "switchml" { 4 } else { 5 };
    format!(
        "name = \"pool-test\"\nseed = 7\n[topology]\nkind = \"star\"\nhosts = {hosts}\nbandwidth_gbps = 100\nlatency_ns = 500\n\
         [ina]\nswitch_memory_bytes = 78336\n\
         [[traffic]]\nkind = \"training\"\nprotocol = \"{protocol}\"\njobs = 1\nworkers = 4\nmodels = [\"A\"]\nmodel_scale = 0.01\n\
         values = true\nmin_rto_us = {min_rto_us}\n"
    )
}

fn hosts(plan: &PoolPlan, timeout_s: f64) -> Vec<Result<PoolHostReport, String>> {
    let opts = PoolHostOptions { timeout: Duration::from_secs_f64(timeout_s), ..PoolHostOptions::default() };
    run_pool_hosts(plan, &plan.hosts(), &opts)
}

/// Every worker acknowledged every PSN and every result equalled the exact sum (the workers
/// check each result's bitmap, fingerprint and 62 values on arrival). Returns the workers.
fn assert_verified(protocol: &str, rs: &[Result<PoolHostReport, String>]) -> Vec<PoolHostReport> {
    assert_verified_at(protocol, rs, &[])
}

/// [`assert_verified`]; a failure names every host's error and what each of `switches` (their
/// reports) counted, so a rare failure under load says where the packets went.
fn assert_verified_at(
    protocol: &str,
    rs: &[Result<PoolHostReport, String>],
    switches: &[Value],
) -> Vec<PoolHostReport> {
    let errors: Vec<&String> = rs.iter().filter_map(|r| r.as_ref().err()).collect();
    if !errors.is_empty() {
        let sw: Vec<String> = switches
            .iter()
            .map(|r| format!("switch {}: data plane {} program {}", r["node"], r["data_plane"], r["program"]))
            .collect();
        panic!(
            "{protocol}: {} host(s) failed:\n{}\n{}",
            errors.len(),
            errors.iter().map(|e| e.as_str()).collect::<Vec<_>>().join("\n"),
            sw.join("\n")
        );
    }
    let ok: Vec<PoolHostReport> = rs.iter().flatten().cloned().collect();
    let workers: Vec<PoolHostReport> = ok.iter().filter(|r| r.role == "worker").cloned().collect();
    assert_eq!(workers.len(), 4, "{protocol}");
    for w in &workers {
        let s = w.worker.unwrap();
        assert!(w.verified && w.bad_results == 0 && w.finished_s.is_some(), "{protocol}: {w:?}");
        assert_eq!((w.psns, s.new_packets), (648, 648), "{protocol}: {w:?}");
        assert!(s.acks >= 648, "{protocol}: {w:?}");
    }
    assert_eq!(ok.iter().filter(|r| r.role == "ps").count(), if protocol == "switchml" { 0 } else { 1 }, "{protocol}");
    workers
}

fn clean_data_plane(protocol: &str, sw: &Value) {
    let d = &sw["data_plane"];
    for k in ["malformed", "foreign", "unroutable", "unencodable", "send_errors"] {
        assert_eq!(d[k], 0, "{protocol}: switch {}: {k} in {d}", sw["node"]);
    }
}

#[test]
fn switchml_atp_and_dsa_aggregate_exactly_through_one_switch_process() {
    for (i, p) in PROTOCOLS.iter().enumerate() {
        let s = Setup::new(&format!("star-{p}"), 10 + i as u8, scenario(p, 20_000));
        let plan = s.plan();
        let sw = s.switch(plan.jobs[0].switch, &[]);
        let rs = hosts(&plan, 20.0);
        let report = sw.stop();
        assert_verified_at(p, &rs, std::slice::from_ref(&report));
        clean_data_plane(p, &report);
        let prog = &report["program"];
        // The switch aggregated (SwitchML: every contribution; ATP/DSA: most, the rest at the PS).
        assert!(prog["stats"]["aggregated"].as_u64().unwrap() > 648, "{p}: {report}");
        assert!(prog["stats"]["completed"].as_u64().unwrap() > 0, "{p}: {report}");
        if *p == "switchml" {
            assert_eq!(prog["stats"]["aggregated"], 4 * 648, "{p}: {report}");
            assert_eq!(prog["stats"]["completed"], 648, "{p}: {report}");
        } else {
            let ps = rs.iter().flatten().find(|r| r.role == "ps").unwrap().ps.clone().unwrap();
            assert!(ps.merged > 0, "{p}: the PS aggregated nothing: {ps:?}");
        }
    }
}

/// Loss, duplication and reordering on every egress port of the switch (so on results, on the
/// switch's fallbacks and partials to the PS, on the PS's ACKs and reminders): every worker
/// still gets every exact result. Through the binary's `run` on the shipped scenario files.
#[test]
fn the_shipped_scenarios_recover_exactly_from_loss_duplication_and_reordering() {
    for (i, p) in PROTOCOLS.iter().enumerate() {
        let path = format!("{}/../../scenarios/switch/star4_{p}.toml", env!("CARGO_MANIFEST_DIR"));
        let ip = format!("127.78.{}.1", 20 + i);
        let out = Command::new(BIN)
            .args([
                "run",
                "--scenario",
                &path,
                "--ip-base",
                &ip,
                "--fault",
                "loss=0.05,dup=0.05,reorder=0.1",
                "--fault-seed",
                "3",
                "--timeout-s",
                "20",
            ])
            .stdin(Stdio::null())
            .output()
            .expect("run");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{p}: exit {:?}: {stderr}", out.status);
        let v: Value = serde_json::from_slice(&out.stdout)
            .unwrap_or_else(|e| panic!("{p}: {e}: {}", String::from_utf8_lossy(&out.stdout)));
        let rs: Vec<Result<PoolHostReport, String>> =
            v["hosts"].as_array().unwrap().iter().map(|h| Ok(report_of(h))).collect();
        let workers = assert_verified(p, &rs);
        let dp = &v["switches"][0]["data_plane"];
        for k in ["fault_dropped", "fault_duplicated", "fault_held"] {
            assert!(dp[k].as_u64().unwrap() > 20, "{p}: {k} in {dp}");
        }
        let rtx: u64 = workers.iter().map(|w| w.worker.unwrap().retransmissions).sum();
        let dups: u64 = workers.iter().map(|w| w.worker.unwrap().duplicate_acks).sum();
        assert!(rtx > 0 && dups > 0, "{p}: lost results were not resent or duplicates not seen: {rtx} {dups}");
    }
}

fn report_of(h: &Value) -> PoolHostReport {
    let w = &h["worker"];
    PoolHostReport {
        host: h["host"].as_u64().unwrap() as u32,
        role: if h["role"] == "worker" { "worker" } else { "ps" },
        job: h["job"].as_u64().unwrap() as u16,
        rank: h["rank"].as_u64().map(|r| r as u16),
        psns: h["psns"].as_u64().unwrap() as u32,
        finished_s: h["finished_s"].as_f64(),
        verified: h["verified"].as_bool().unwrap(),
        bad_results: h["bad_results"].as_u64().unwrap(),
        worker: w.is_object().then(|| reducelab_transport_stats(w)),
        ps: None,
        ps_restarts: h["ps_restarts"].as_u64().unwrap() as u32,
        ps_partials_lost: h["ps_partials_lost"].as_u64().unwrap(),
        ecn_marked_rx: h["ecn_marked_rx"].as_u64().unwrap(),
        tx_packets: 0,
        rx_packets: 0,
        malformed: 0,
        misdelivered: 0,
        send_errors: 0,
        elapsed_s: 0.0,
    }
}

fn reducelab_transport_stats(w: &Value) -> reducelab_switch::pool_host::WorkerStats {
    let g = |k: &str| w[k].as_u64().unwrap_or_else(|| panic!("{k} in {w}"));
    reducelab_switch::pool_host::WorkerStats {
        new_packets: g("new_packets"),
        retransmissions: g("retransmissions"),
        timeouts: g("timeouts"),
        acks: g("acks"),
        duplicate_acks: g("duplicate_acks"),
        out_of_order_acks: g("out_of_order_acks"),
        ecn_echoes: g("ecn_echoes"),
        window_decreases: g("window_decreases"),
        reminder_notices: g("reminder_notices"),
        fetched: g("fetched"),
        gap_resends: g("gap_resends"),
    }
}

/// The simulator is the oracle: the same scenario run by `reducelab_sim` and over the switch
/// gives verified results on both sides (every element checked against the exact sum of the
/// same seeded contributions: the same values), the same job placement and PSNs, and — where
/// the protocol is deterministic — the same counters. SwitchML on a star with timers that
/// never fire (a 5 s floor) is: every counter of the switch and of the workers is equal. ATP's
/// and DSA's hashed pools depend on which tasks are in flight together (the simulator's ECN
/// and link timing against real scheduling), so only their totals that do not depend on it
/// are compared: new packets, and ATP's PS completing every PSN (its workers' ACKs all come
/// from the PS). DSA needs its timers (a task split between the switch and the PS completes
/// only by the PS's reminder, armed with the timeout floor): 20 ms there.
#[test]
fn the_simulator_and_the_software_switch_agree_on_training_jobs() {
    for (i, p) in PROTOCOLS.iter().enumerate() {
        let text = scenario(p, if *p == "dsa" { 20_000 } else { 5_000_000 });
        let sim = reducelab_sim::run_scenario_str(&text, &reducelab_sim::RunOptions::default()).unwrap();
        let summary: Value = serde_json::from_str(&sim.summary_json).unwrap();
        let t = &summary["training"];
        let job = &summary["traffic"][0]["jobs"][0];
        assert_eq!(
            (job["verified"].as_bool(), t["values_checked"].as_bool(), t["lost_packets"].as_u64()),
            (Some(true), Some(true), Some(0)),
            "simulator {p}: {t}"
        );
        let s = Setup::new(&format!("oracle-{p}"), 30 + i as u8, text);
        let plan = s.plan();
        assert_eq!(
            (plan.jobs[0].switch as u64, plan.jobs[0].psns as u64),
            (job["switch_node"].as_u64().unwrap(), job["psns"].as_u64().unwrap()),
            "{p}: placement"
        );
        let sw = s.switch(plan.jobs[0].switch, &[]);
        let rs = hosts(&plan, 30.0);
        let report = sw.stop();
        let workers = assert_verified_at(p, &rs, std::slice::from_ref(&report));
        clean_data_plane(p, &report);
        let mut ws = reducelab_switch::pool_host::WorkerStats::default();
        workers.iter().for_each(|w| ws.add(&w.worker.unwrap()));
        let ws = serde_json::to_value(ws).unwrap();
        assert_eq!(
            ws["new_packets"], t["workers"]["new_packets"],
            "{p}: workers' new packets: software {ws} vs simulator {}",
            t["workers"]
        );
        match *p {
            "switchml" => {
                assert_eq!(ws, t["workers"], "{p}: every worker counter");
                assert_eq!(report["program"]["stats"], t["switch"], "{p}: every switch counter");
                assert_eq!(ws["timeouts"], 0);
            }
            "atp" => {
                let ps = rs.iter().flatten().find(|r| r.role == "ps").unwrap().ps.clone().unwrap();
                assert_eq!(ps.completed, t["ps"]["completed"].as_u64().unwrap(), "{p}: PS completions");
                assert_eq!(ps.completed, 648);
            }
            _ => {}
        }
    }
}

/// Hosts with no switch: every worker stops at its deadline and says what is missing and why.
#[test]
fn workers_without_a_switch_end_with_a_timeout_naming_what_is_missing() {
    let s = Setup::new("no-switch", 40, scenario("atp", 20_000));
    let plan = s.plan();
    let rs = hosts(&plan, 0.5);
    let errs: Vec<String> = rs.iter().filter_map(|r| r.clone().err()).collect();
    assert_eq!(errs.len(), 4, "{rs:?}");
    for e in &errs {
        assert!(
            e.contains("timed out after 0.5 s")
                && e.contains("648 of 648 results missing")
                && e.contains("nothing came back"),
            "{e}"
        );
    }
    // The PS served until its deadline and reports its job unfinished.
    let ps = rs.iter().flatten().find(|r| r.role == "ps").expect("the PS's report");
    assert!(!ps.verified);
}

/// Garbage and frames from strangers are counted and dropped; the switch keeps serving.
#[test]
fn the_pool_switch_counts_and_drops_malformed_and_foreign_datagrams() {
    let s = Setup::new("garbage", 41, scenario("switchml", 20_000));
    let plan = s.plan();
    let node = plan.jobs[0].switch;
    let sw = s.switch(node, &[]);
    // Host 0's own address (port 0 of its node), then a stranger's.
    let host0 = UdpSocket::bind(plan.endpoints.of(plan.fabric.host_nodes[0], 0)).unwrap();
    let port0 = plan.endpoints.of(node, 0);
    let mut frame = Vec::new();
    let mut p = reducelab_ina::pool::AggPacket::new(
        reducelab_ina::pool::PacketKind::Gradient,
        reducelab_ina::pool::Dest::Switch,
        0,
        1,
        4,
    );
    p.bitmap = 1;
    reducelab_ina::pool_wire::emit(&p, None, &mut frame).unwrap();
    let mut bad_workers = frame.clone();
    bad_workers[21] = 5; // a job of 5 workers: the plan's job has 4
    for d in [&b"garbage"[..], &frame[..10], &[frame.clone(), vec![0; 4]].concat(), &bad_workers] {
        host0.send_to(d, port0).unwrap();
    }
    let stranger = UdpSocket::bind("127.78.41.200:0").unwrap();
    stranger.send_to(&frame, port0).unwrap();
    std::thread::sleep(Duration::from_millis(200));
    drop(host0);
    let rs = hosts(&plan, 20.0);
    let report = sw.stop();
    assert_verified("switchml", &rs);
    assert_eq!(report["data_plane"]["malformed"], 4, "{report}");
    assert_eq!(report["data_plane"]["foreign"], 1, "{report}");
}

#[test]
fn pool_plans_refuse_what_the_software_switch_does_not_run() {
    // A tree of more than two levels is the simulator's error, naming the field.
    let tree = scenario("switchml", 20_000)
        .replace("kind = \"star\"\nhosts = 4", "kind = \"fat_tree_3\"\nk = 4")
        .replace("workers = 4", "workers = 8")
        + "aggregation = \"tree\"\n";
    let e = PoolPlan::from_scenario(&tree, None, (Ipv4Addr::new(127, 78, 42, 1), 47000)).err().expect("refused");
    assert!(e.contains("aggregation") && e.contains("is not a neighbour of the job's root switch"), "{e}");
    let e = PoolPlan::from_scenario(&scenario("dsa", 20_000), None, (Ipv4Addr::new(10, 0, 0, 1), 47000))
        .err()
        .expect("refused");
    assert!(e.starts_with("ip_base: "), "{e}");
    let e = PoolPlan::from_scenario(
        &(scenario("switchml", 20_000) + "ps_restart_us = 100\n"),
        None,
        (Ipv4Addr::new(127, 78, 42, 1), 47000),
    )
    .err()
    .expect("refused");
    assert!(e.contains("ps_restart_us") && e.contains("no parameter server"), "{e}");
    // Shaping is the pool switch's: the Canary switch refuses it rather than ignore it, and a
    // bad shaping key is named.
    let canary = format!("{}/../../scenarios/switch/star4_canary.toml", env!("CARGO_MANIFEST_DIR"));
    for (args, want) in [
        (
            vec!["switch", "--scenario", &canary, "--node", "4", "--ip-base", "127.78.42.1", "--fault", "rate_mbps=10"],
            "--fault rate_mbps: egress shaping and ECN marking run in the pool switch",
        ),
        (
            vec!["run", "--scenario", &canary, "--ip-base", "127.78.42.1", "--fault", "port=1,rate_mbps=10"],
            "--fault rate_mbps: egress shaping and ECN marking run in the pool switch",
        ),
        (
            vec!["run", "--scenario", &canary, "--ip-base", "127.78.42.1", "--fault", "ecn_bytes=100"],
            "--fault ecn_bytes: describes a shaped port's queue; add rate_mbps",
        ),
    ] {
        let out = Command::new(BIN).args(&args).stdin(Stdio::null()).output().expect("run");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(stderr.contains(want), "{args:?}: {stderr}");
    }
}

/// A two-level fat tree of four switch processes (2 leaves, 2 spines, 3 hosts per leaf): each
/// job aggregates on the simulator's nearest switch (a spine), the leaves and the other spine
/// only forward (results multicast per worker, fallbacks and PS traffic routed by ECMP), with
/// loss, duplication and reordering on every switch's egress ports.
#[test]
fn pool_protocols_aggregate_exactly_across_a_fat_tree_of_switch_processes_under_faults() {
    for (i, p) in PROTOCOLS.iter().enumerate() {
        let star = if *p == "switchml" { "hosts = 4" } else { "hosts = 5" };
        let text = scenario(p, 20_000).replace(
            &format!("kind = \"star\"\n{star}"),
            "kind = \"fat_tree_2\"\nleaves = 2\nhosts_per_leaf = 3\nspines = 2",
        );
        assert!(text.contains("fat_tree_2"), "{text}");
        let s = Setup::new(&format!("fat-tree-{p}"), 50 + i as u8, text);
        let plan = s.plan();
        let switches = plan.switches();
        assert_eq!(switches.len(), 4);
        let procs: Vec<Proc> = switches
            .iter()
            .map(|&n| s.switch(n, &["--fault", "loss=0.05,dup=0.05,reorder=0.1", "--fault-seed", "5"]))
            .collect();
        let rs = hosts(&plan, 30.0);
        let reports: Vec<Value> = procs.into_iter().map(Proc::stop).collect();
        assert_verified_at(p, &rs, &reports);
        let agg = plan.jobs[0].switch;
        for r in &reports {
            let d = &r["data_plane"];
            for k in ["malformed", "foreign", "unroutable", "unencodable"] {
                assert_eq!(d[k], 0, "{p}: switch {}: {k} in {d}", r["node"]);
            }
            if r["node"] == agg {
                assert!(r["program"]["stats"]["aggregated"].as_u64().unwrap() > 648, "{p}: {r}");
            } else {
                assert!(r["program"].is_null(), "{p}: only the job's switch runs a program: {r}");
            }
        }
        // Both leaves carried the job's traffic (workers under each) and dropped some of it.
        let leaves: Vec<&Value> = reports
            .iter()
            .filter(|r| {
                plan.fabric
                    .host_nodes
                    .iter()
                    .any(|&h| plan.fabric.nodes[h as usize].ports[0].0 as u64 == r["node"].as_u64().unwrap())
            })
            .collect();
        assert_eq!(leaves.len(), 2, "{p}");
        for l in leaves {
            assert!(
                l["data_plane"]["rx_packets"].as_u64().unwrap() > 648
                    && l["data_plane"]["fault_dropped"].as_u64().unwrap() > 0,
                "{p}: {l}"
            );
        }
    }
}

/// The aggregating switch dies mid-run (after 1000 packets, with loss, duplication and
/// reordering on) and is restarted with empty aggregators: ATP's and DSA's workers time out and
/// their PS rebuilds what the switch held, so every result is still exact. SwitchML either
/// verifies or, when the crash took a result some workers had and others had not (their ACK
/// lost, the shadow copy gone with the switch), ends bounded with the workers' errors and the
/// line saying why.
#[test]
fn pool_protocols_finish_exactly_or_say_why_when_their_switch_crashes_and_restarts() {
    for (i, p) in ["atp", "dsa", "switchml"].iter().enumerate() {
        let path = format!("{}/../../scenarios/switch/star4_{p}.toml", env!("CARGO_MANIFEST_DIR"));
        let ip = format!("127.78.{}.1", 60 + i);
        let out = Command::new(BIN)
            .args([
                "run",
                "--scenario",
                &path,
                "--ip-base",
                &ip,
                "--crash-after-rx",
                "1000",
                "--fault",
                "loss=0.05,dup=0.05,reorder=0.1",
                "--timeout-s",
                "20",
            ])
            .stdin(Stdio::null())
            .output()
            .expect("run");
        let stderr = String::from_utf8_lossy(&out.stderr);
        if *p == "switchml" && !out.status.success() {
            // A result lost to some workers only is beyond SwitchML's recovery: the run ends
            // (the workers give up, bounded) and says why.
            assert_eq!(out.status.code(), Some(1), "{p}: {stderr}");
            assert!(stderr.contains("gave up") || stderr.contains("timed out"), "{p}: {stderr}");
            assert!(stderr.contains("switchml: switch 4 crashed and restarted with empty slots"), "{p}: {stderr}");
            continue;
        }
        assert!(out.status.success(), "{p}: exit {:?}: {stderr}", out.status);
        assert!(stderr.contains("crash injected after 1000 packets") && stderr.contains("restarted"), "{p}: {stderr}");
        let v: Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(v["switch_restarted"], true, "{p}");
        let rs: Vec<Result<PoolHostReport, String>> =
            v["hosts"].as_array().unwrap().iter().map(|h| Ok(report_of(h))).collect();
        let workers = assert_verified(p, &rs);
        assert!(
            workers.iter().map(|w| w.worker.unwrap().timeouts).sum::<u64>() > 0,
            "{p}: no worker timed out, so the crash lost nothing"
        );
    }
}

/// SwitchML's switch crashes on a loss-free loopback and restarts with empty slots: no worker
/// had the results the crash took (the switch exits before sending anything of the batch it was
/// reading), so the workers' timeouts refill every lost slot and every worker verifies. With
/// `--restart-delay-ms 0` as well as the default, so the restarted switch also meets packets
/// of slots whose use it never saw start.
#[test]
fn switchml_survives_a_switch_crash_on_a_loss_free_network() {
    let path = format!("{}/../../scenarios/switch/star4_switchml.toml", env!("CARGO_MANIFEST_DIR"));
    for (i, delay) in ["50", "0"].iter().enumerate() {
        let ip = format!("127.78.{}.1", 64 + i);
        let out = Command::new(BIN)
            .args([
                "run",
                "--scenario",
                &path,
                "--ip-base",
                &ip,
                "--crash-after-rx",
                "1000",
                "--restart-delay-ms",
                delay,
                "--timeout-s",
                "20",
            ])
            .stdin(Stdio::null())
            .output()
            .expect("run");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "delay {delay}: exit {:?}: {stderr}", out.status);
        assert!(stderr.contains("crash injected after 1000 packets") && stderr.contains("restarted"), "{stderr}");
        let v: Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(v["switch_restarted"], true);
        let rs: Vec<Result<PoolHostReport, String>> =
            v["hosts"].as_array().unwrap().iter().map(|h| Ok(report_of(h))).collect();
        let workers = assert_verified("switchml", &rs);
        assert!(
            workers.iter().map(|w| w.worker.unwrap().timeouts).sum::<u64>() > 0,
            "no worker timed out, so the crash lost nothing"
        );
    }
}

/// Two jobs of 4 workers share the switch's pool (SwitchML: half a region each; ATP and DSA:
/// the hashed pool, where their tasks collide and, for DSA, preempt each other), each with its
/// own PS, under loss, duplication and reordering: every worker of both jobs verified.
#[test]
fn two_jobs_share_one_switch_pool_exactly_under_faults() {
    for (i, p) in PROTOCOLS.iter().enumerate() {
        let (star, two) = if *p == "switchml" { ("hosts = 4", "hosts = 8") } else { ("hosts = 5", "hosts = 10") };
        let text = scenario(p, 20_000).replace(star, two).replace("jobs = 1", "jobs = 2");
        let s = Setup::new(&format!("two-jobs-{p}"), 70 + i as u8, text);
        let plan = s.plan();
        assert_eq!(plan.jobs.len(), 2);
        let sw = s.switch(plan.jobs[0].switch, &["--fault", "loss=0.05,dup=0.05,reorder=0.1"]);
        let rs = hosts(&plan, 30.0);
        let report = sw.stop();
        let ok: Vec<PoolHostReport> =
            rs.iter().map(|r| r.clone().unwrap_or_else(|e| panic!("{p}: {e}\nswitch: {report}"))).collect();
        for j in 0..2u16 {
            let workers: Vec<&PoolHostReport> = ok.iter().filter(|r| r.job == j && r.role == "worker").collect();
            assert_eq!(workers.len(), 4, "{p} job {j}");
            assert!(
                workers.iter().all(|w| w.verified && w.bad_results == 0 && w.worker.unwrap().new_packets == 648),
                "{p} job {j}: {workers:?}"
            );
        }
        assert!(report["program"]["stats"]["aggregated"].as_u64().unwrap() > 2 * 648, "{p}: {report}");
        assert!(report["data_plane"]["fault_dropped"].as_u64().unwrap() > 0, "{p}: {report}");
    }
}

/// `reducelab-switch run` on a scenario file written for the test; stdout's JSON, stderr.
fn run_file(name: &str, text: &str, ip: &str, extra: &[&str]) -> (Option<i32>, Value, String) {
    let dir = std::env::temp_dir().join(format!("reducelab-switch-pool-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join(format!("{name}.toml"));
    std::fs::write(&path, text).unwrap();
    let out = Command::new(BIN)
        .args(["run", "--scenario", path.to_str().unwrap(), "--ip-base", ip, "--timeout-s", "30"])
        .args(extra)
        .stdin(Stdio::null())
        .output()
        .expect("run");
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    let v = serde_json::from_slice(&out.stdout).unwrap_or(Value::Null);
    (out.status.code(), v, stderr)
}

/// ECN in the software switch: the switch's egress port to ATP's parameter server (port 4 of
/// the star) shaped to 20 Mb/s, so the partial aggregates queue there. With a threshold (the
/// scenario's `network.ecn_threshold_bytes`, 5000 B, as the default of the port's `ecn_bytes`)
/// the port marks what it queues above it; the PS echoes a mark on its next ACK, the switch
/// carries it on the ACK's multicast, and every worker's window halves (`window_decreases`).
/// The same shaping with no threshold marks nothing and no window shrinks, so the reaction
/// comes from the marks. Every result verified in both.
#[test]
fn a_shaped_port_marks_ecn_and_atps_windows_halve() {
    let base = scenario("atp", 20_000);
    let marked = base.replace("[[traffic]]", "[network]\necn_threshold_bytes = 5000\n[[traffic]]");
    for (i, (text, with_k)) in [(marked, true), (base, false)].into_iter().enumerate() {
        let (code, v, stderr) =
            run_file(&format!("ecn-{i}"), &text, &format!("127.78.{}.1", 80 + i), &["--fault", "port=4,rate_mbps=20"]);
        assert_eq!(code, Some(0), "{stderr}");
        let sw = &v["switches"][0];
        clean_data_plane("atp", sw);
        let port = &sw["shaped_ports"][0];
        assert_eq!((port["port"].as_u64(), port["rate_bps"].as_u64()), (Some(4), Some(20_000_000)), "{port}");
        assert!(port["peak_queue_bytes"].as_u64().unwrap() > 5000, "the port never queued past K: {port}");
        let rs: Vec<Result<PoolHostReport, String>> =
            v["hosts"].as_array().unwrap().iter().map(|h| Ok(report_of(h))).collect();
        let workers = assert_verified("atp", &rs);
        let ps = rs.iter().flatten().find(|r| r.role == "ps").unwrap();
        if with_k {
            assert_eq!(port["ecn_bytes"], 5000, "the scenario's threshold: {port}");
            assert!(port["marked"].as_u64().unwrap() > 0, "{port}");
            assert_eq!(
                ps.ecn_marked_rx,
                port["marked"].as_u64().unwrap(),
                "every mark set at the PS's port reaches the PS (nothing dropped)"
            );
            assert!(sw["ecn_marks_carried"].as_u64().unwrap() > 0, "{sw}");
            for w in &workers {
                let s = w.worker.unwrap();
                assert!(w.ecn_marked_rx > 0 && s.ecn_echoes > 0 && s.window_decreases > 0, "{w:?}");
            }
        } else {
            assert_eq!((port["ecn_bytes"].is_null(), port["marked"].as_u64()), (true, Some(0)), "{port}");
            for w in &workers {
                let s = w.worker.unwrap();
                assert_eq!((w.ecn_marked_rx, s.ecn_echoes, s.window_decreases), (0, 0, 0), "{w:?}");
            }
        }
    }
}

/// `ps_restart_us` in the software switch: the PS agent loses its partial aggregates at that
/// time after the start (the simulator's model: completed results kept), with 2 aggregators on
/// the switch so most tasks go through the PS, and loss, duplication and reordering so that the
/// PS holds partials waiting for lost contributions when it restarts. ATP's resends and DSA's
/// reminders rebuild them: every worker verifies every result (a partial counted twice, or a
/// contribution lost, would fail the exact sum). The simulator takes the same file (its
/// 100 Gb/s job ends before the restart; `crates/sim`'s own tests cover it).
///
/// Whether the PS holds a partial at the instant of its restart depends on how far the job has
/// got on a real clock (a loaded machine starts the processes later), so the restart is tried at
/// several times after the start; every run must verify, and at least one restart must have
/// found partials to lose (else the recovery was not exercised).
#[test]
fn atp_and_dsa_rebuild_what_a_ps_restart_lost() {
    for (i, p) in ["atp", "dsa"].iter().enumerate() {
        let mut lost = Vec::new();
        for (k, restart_us) in [5_000, 20_000, 2_000, 50_000, 1_000].into_iter().enumerate() {
            let text = scenario(p, 20_000).replace("switch_memory_bytes = 78336", "switch_memory_bytes = 612")
                + &format!("ps_restart_us = {restart_us}\n");
            if k == 0 {
                let sim = reducelab_sim::run_scenario_str(&text, &reducelab_sim::RunOptions::default()).unwrap();
                let summary: Value = serde_json::from_str(&sim.summary_json).unwrap();
                // (At 100 Gb/s the simulated job is over before 5 ms: its restart never comes.)
                assert_eq!(summary["traffic"][0]["jobs"][0]["verified"].as_bool(), Some(true), "simulator {p}");
            }
            let (code, v, stderr) = run_file(
                &format!("ps-restart-{p}-{k}"),
                &text,
                &format!("127.78.{}.1", 90 + i),
                &["--fault", "loss=0.05,dup=0.05,reorder=0.1"],
            );
            assert_eq!(code, Some(0), "{p} (restart at {restart_us} µs): {stderr}");
            let rs: Vec<Result<PoolHostReport, String>> =
                v["hosts"].as_array().unwrap().iter().map(|h| Ok(report_of(h))).collect();
            assert_verified(p, &rs);
            let ps = rs.iter().flatten().find(|r| r.role == "ps").unwrap();
            assert_eq!(ps.ps_restarts, 1, "{p} (restart at {restart_us} µs)");
            lost.push((restart_us, ps.ps_partials_lost));
            if ps.ps_partials_lost > 0 {
                break;
            }
        }
        assert!(
            lost.iter().any(|&(_, n)| n > 0),
            "{p}: no restart found a partial aggregate to lose (restart µs, partials lost): {lost:?}"
        );
    }
}

/// `aggregation = "tree"` on the fat tree of four switch processes (2 leaves with 3 hosts each,
/// 2 spines): workers 0–2 under leaf 0, worker 3 (and the PS) under leaf 1, the root a spine.
fn tree_scenario(protocol: &str, min_rto_us: u64) -> String {
    let star = if protocol == "switchml" { "hosts = 4" } else { "hosts = 5" };
    scenario(protocol, min_rto_us).replace(
        &format!("kind = \"star\"\n{star}"),
        "kind = \"fat_tree_2\"\nleaves = 2\nhosts_per_leaf = 3\nspines = 2",
    ) + "aggregation = \"tree\"\n"
}

/// Two-level tree aggregation across switch processes, with the simulator's tree
/// (`Tree::{leaf_input, route}`, the same code its driver runs): each leaf's program aggregates
/// its workers and sends one partial per PSN up, the root's program aggregates one
/// contribution per leaf, results come down through the leaves (ATP: the PS's ACK, one copy
/// addressed to each leaf; DSA: the PS's reminders to every switch of the tree). Under loss,
/// duplication and reordering on every switch: every worker verified, every leaf and the root
/// aggregated, no frame malformed, unroutable or refused by a leaf; the fourth switch (the
/// other spine) runs no program.
#[test]
fn tree_aggregation_runs_on_leaf_and_root_switch_processes_under_faults() {
    for (i, p) in PROTOCOLS.iter().enumerate() {
        let s = Setup::new(&format!("tree-{p}"), 100 + i as u8, tree_scenario(p, 20_000));
        let plan = s.plan();
        let t = plan.jobs[0].tree.clone().expect("a tree");
        assert_eq!((t.leaves.len(), t.members.clone()), (2, vec![vec![0, 1, 2], vec![3]]), "{p}");
        let procs: Vec<Proc> = plan
            .switches()
            .iter()
            .map(|&n| s.switch(n, &["--fault", "loss=0.05,dup=0.05,reorder=0.1", "--fault-seed", "3"]))
            .collect();
        let rs = hosts(&plan, 30.0);
        let reports: Vec<Value> = procs.into_iter().map(Proc::stop).collect();
        assert_verified_at(p, &rs, &reports);
        for r in &reports {
            clean_data_plane(p, r);
            assert_eq!(r["malformed_at_leaf"], 0, "{p}: {r}");
            let node = r["node"].as_u64().unwrap() as u32;
            if node == plan.jobs[0].switch || t.leaves.contains(&node) {
                let st = &r["program"]["stats"];
                assert!(
                    st["aggregated"].as_u64().unwrap() > 100 && st["completed"].as_u64().unwrap() > 100,
                    "{p}: switch {node}: {r}"
                );
                assert!(r["data_plane"]["fault_dropped"].as_u64().unwrap() > 0, "{p}: {r}");
            } else {
                assert!(r["program"].is_null(), "{p}: switch {node} is not in the tree: {r}");
            }
        }
    }
}

/// The simulator is the oracle for the tree too: SwitchML with timers that never fire (a 5 s
/// floor) on a loss-free loopback completes every PSN once at each leaf and once at the root,
/// and the switches' counters summed, and the workers', equal the simulator's.
#[test]
fn switchml_tree_counters_equal_the_simulators() {
    let text = tree_scenario("switchml", 5_000_000);
    let sim = reducelab_sim::run_scenario_str(&text, &reducelab_sim::RunOptions::default()).unwrap();
    let summary: Value = serde_json::from_str(&sim.summary_json).unwrap();
    let t = &summary["training"];
    assert_eq!(summary["traffic"][0]["jobs"][0]["verified"].as_bool(), Some(true), "{t}");
    let s = Setup::new("tree-oracle", 103, text);
    let plan = s.plan();
    let procs: Vec<Proc> = plan.switches().iter().map(|&n| s.switch(n, &[])).collect();
    let rs = hosts(&plan, 30.0);
    let reports: Vec<Value> = procs.into_iter().map(Proc::stop).collect();
    let workers = assert_verified_at("switchml", &rs, &reports);
    let mut sum = reducelab_ina::pool::PoolStats::default();
    let mut completions = Vec::new();
    for r in reports.iter().filter(|r| !r["program"].is_null()) {
        let st: reducelab_ina::pool::PoolStats = pool_stats(&r["program"]["stats"]);
        completions.push(st.completed);
        sum.aggregated += st.aggregated;
        sum.completed += st.completed;
        sum.duplicates += st.duplicates;
        sum.results_resent += st.results_resent;
        sum.stale += st.stale;
        sum.passed_through += st.passed_through;
    }
    assert_eq!(completions, vec![648, 648, 648], "each leaf and the root complete every PSN once");
    assert_eq!(serde_json::to_value(&sum).unwrap(), t["switch"], "every switch counter, summed");
    let mut ws = reducelab_switch::pool_host::WorkerStats::default();
    workers.iter().for_each(|w| ws.add(&w.worker.unwrap()));
    assert_eq!(serde_json::to_value(ws).unwrap(), t["workers"], "every worker counter");
}

fn pool_stats(v: &Value) -> reducelab_ina::pool::PoolStats {
    let g = |k: &str| v[k].as_u64().unwrap_or_else(|| panic!("{k} in {v}"));
    reducelab_ina::pool::PoolStats {
        aggregated: g("aggregated"),
        completed: g("completed"),
        fallbacks: g("fallbacks"),
        preemptions: g("preemptions"),
        downgrades: g("downgrades"),
        duplicates: g("duplicates"),
        results_resent: g("results_resent"),
        stale: g("stale"),
        resends: g("resends"),
        resend_clears: g("resend_clears"),
        ack_frees: g("ack_frees"),
        reminders_fetched: g("reminders_fetched"),
        reminders_empty: g("reminders_empty"),
        passed_through: g("passed_through"),
        malformed: g("malformed"),
    }
}
