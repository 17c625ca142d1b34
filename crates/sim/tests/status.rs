//! How a run ends: every scenario run ends with one `status` (completed, unverified, stalled,
//! time_limit, interrupted) and, unless it completed, a `status_reason` that names the stuck
//! workload first and the network's state after it. Background traffic never keeps a run alive
//! once the finite work is done or can no longer move (the no-progress watchdog).

use reducelab_sim::{load_scenario_str, run_scenario_str, RunOptions, RunStatus};
use serde_json::Value;

fn run_opts(text: &str, opts: &RunOptions) -> Value {
    let out = run_scenario_str(text, opts).unwrap_or_else(|e| panic!("{e}"));
    let v: Value = serde_json::from_str(&out.summary_json).unwrap();
    assert_eq!(v["status"], out.status.as_str(), "RunOutput.status and summary.json agree");
    v
}

fn run(text: &str) -> Value {
    run_opts(text, &RunOptions::default())
}

fn reason(s: &Value) -> &str {
    s["status_reason"].as_str().unwrap_or_else(|| panic!("no status_reason in {s}"))
}

/// 8 hosts on one switch, 10 Gb/s links.
fn star(rest: &str) -> String {
    format!("name = \"status\"\n[topology]\nkind = \"star\"\nhosts = 8\nbandwidth_gbps = 10\nlatency_ns = 1000\n{rest}")
}

/// The switch of the star (the node that is not a host).
fn star_switch() -> u32 {
    let sc = load_scenario_str(&star("[[traffic]]\nkind = \"messages\"\nlist = [[0, 1, 1, 0]]\n"), None).unwrap();
    sc.topology.nodes.iter().position(|n| n.host.is_none()).unwrap() as u32
}

const BACKGROUND: &str = "[[traffic]]\nkind = \"random_uniform\"\nhosts = [4, 5, 6, 7]\nbytes = 65536\n";

#[test]
fn completed_runs_have_no_reason() {
    let s = run(&star("[[traffic]]\nkind = \"messages\"\nlist = [[0, 1, 100000, 0], [2, 3, 5000, 1000]]\n"));
    assert_eq!(s["status"], "completed");
    assert!(s["status_reason"].is_null());
    assert!(
        s.get("end").is_none() && s.get("stall_reason").is_none() && s["messages"].get("all_verified").is_none(),
        "old fields are gone"
    );
}

#[test]
fn a_self_message_counts_once_as_done_and_once_as_verified() {
    // Host 2 sends to itself: it is delivered locally, and the workload hears of it like of
    // any delivery (it used to count as done 1 / verified 2, and an only self-message hung).
    let s = run(&star("[[traffic]]\nkind = \"messages\"\nlist = [[0, 1, 4096, 0], [2, 2, 4096, 0]]\n"));
    assert_eq!(s["status"], "completed", "{}", s["status_reason"]);
    let t = &s["traffic"][0];
    assert_eq!((t["messages"].as_u64(), t["completed"].as_u64(), t["verified"].as_u64()), (Some(2), Some(2), Some(2)));
    let only_self = run(&star("[[traffic]]\nkind = \"messages\"\nlist = [[3, 3, 4096, 0]]\n"));
    assert_eq!(only_self["status"], "completed", "{}", only_self["status_reason"]);
    assert_eq!(only_self["traffic"][0]["completed"], 1);
}

#[test]
fn background_only_runs_complete_at_their_time_limit() {
    let s = run(&star(&format!("{BACKGROUND}[run]\ntime_limit_us = 50\n")));
    assert_eq!(s["status"], "completed", "{}", s["status_reason"]);
}

#[test]
fn a_time_limit_before_the_messages_finish_says_which() {
    let s = run(&star("[[traffic]]\nkind = \"messages\"\nlist = [[0, 1, 10000000, 0]]\n[run]\ntime_limit_us = 100\n"));
    assert_eq!(s["status"], "time_limit");
    let why = reason(&s);
    assert!(why.starts_with("run.time_limit_us came first: messages traffic[0]: 1 of 1 messages undelivered"), "{why}");
}

#[test]
fn lost_raw_messages_stall_naming_the_messages_then_the_network() {
    // The switch fails while the message is on its way: no retransmission, the run drains.
    let sw = star_switch();
    let s = run(&star(&format!(
        "[[traffic]]\nkind = \"messages\"\nlist = [[0, 1, 1000000, 0]]\n[[faults]]\nkind = \"node\"\nnode = {sw}\nat_ns = 20000\n"
    )));
    assert_eq!(s["status"], "stalled");
    let why = reason(&s);
    assert!(
        why.starts_with(
            "messages traffic[0]: 1 of 1 messages undelivered (raw messages have no retransmission); network: "
        ),
        "{why}"
    );
    assert!(why.contains(&format!("node {sw} failed")), "{why}");
}

#[test]
fn background_does_not_keep_a_stalled_run_alive_and_is_not_blamed() {
    // The same loss with background traffic on other hosts: the queue never drains; the
    // watchdog ends the run after `watchdog_us` without progress of the finite work.
    let s = run(&star(&format!(
        "[[traffic]]\nkind = \"messages\"\nlist = [[0, 1, 1000000, 0]]\n{BACKGROUND}[[faults]]\nkind = \"link\"\nlink = 0\nat_ns = 20000\n[run]\nwatchdog_us = 300\n"
    )));
    assert_eq!(s["status"], "stalled");
    let why = reason(&s);
    assert!(why.starts_with("messages traffic[0]: 1 of 1 messages undelivered"), "{why}");
    assert!(why.contains("no progress for 300 us of simulated time (run.watchdog_us)"), "{why}");
    assert!(!why.contains("random_uniform"), "background is not a stuck workload: {why}");
    // It ended soon after the watchdog's time (the last progress was before the fault at
    // 20 µs; the watchdog looks every 4096 events, about a millisecond here).
    let t = s["sim_time_ps"].as_u64().unwrap();
    assert!((320_000_000..5_000_000_000).contains(&t), "ended at {t} ps");
}

#[test]
fn the_watchdog_waits_for_work_that_has_not_started() {
    // A message starting 30 ms later, background meanwhile: nothing is waiting in between, so
    // a 1 ms watchdog must not fire; the run completes when the late message arrives.
    let s = run(&star(&format!("[[traffic]]\nkind = \"messages\"\nlist = [[0, 1, 4096, 0], [2, 3, 4096, 30000000]]\n{BACKGROUND}[run]\nwatchdog_us = 1000\n")));
    assert_eq!(s["status"], "completed", "{}", s["status_reason"]);
    assert!(s["sim_time_ps"].as_u64().unwrap() > 30_000_000_000);
}

#[test]
fn a_big_message_is_progress_packet_by_packet() {
    // 20 MB at 10 Gb/s take 16 ms, longer than the 2 ms watchdog: payload delivered counts.
    let s = run(&star("[[traffic]]\nkind = \"messages\"\nlist = [[0, 1, 20000000, 0]]\n[run]\nwatchdog_us = 2000\n"));
    assert_eq!(s["status"], "completed", "{}", s["status_reason"]);
}

#[test]
fn watchdog_zero_turns_it_off_and_bad_values_are_refused() {
    let text = star(&format!(
        "[[traffic]]\nkind = \"messages\"\nlist = [[0, 1, 1000000, 0]]\n{BACKGROUND}[[faults]]\nkind = \"link\"\nlink = 0\nat_ns = 20000\n[run]\nwatchdog_us = 0\ntime_limit_us = 2000\n"
    ));
    let s = run(&text);
    assert_eq!(s["status"], "time_limit", "without the watchdog only the time limit ends it");
    for bad in ["-1", "nan", "1e30"] {
        let err = load_scenario_str(
            &star(&format!("[[traffic]]\nkind = \"messages\"\nlist = [[0, 1, 1, 0]]\n[run]\nwatchdog_us = {bad}\n")),
            None,
        )
        .err();
        let err = err.unwrap_or_else(|| panic!("watchdog_us = {bad} accepted"));
        assert_eq!(err.field, "run.watchdog_us", "{err}");
    }
}

/// The report of issue 11: Canary with background traffic and a failed host never ended.
#[test]
fn canary_example_with_a_failed_host_ends_stalled_naming_the_allreduce_first() {
    let base =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../../scenarios/examples/canary_allreduce.toml"))
            .unwrap();
    let text = format!("{base}\n[[faults]]\nkind = \"node\"\nnode = 2\nat_ns = 20000\n");
    let s = run(&text);
    assert_eq!(s["status"], "stalled");
    let why = reason(&s);
    assert!(why.starts_with("ina_allreduce traffic[0]: "), "{why}");
    assert!(why.contains("hosts unfinished"), "{why}");
    assert!(why.contains("node 2 failed"), "{why}");
    assert!(!why.contains("raw messages have no retransmission"), "{why}");
    // Ended by the watchdog: 10 ms, or long enough for the hosts (RTO 500 µs) to give up.
    assert!(why.contains("no progress for 17000 us"), "{why}");
    assert!(s["sim_time_ps"].as_u64().unwrap() < 100_000_000_000, "ended within 100 ms simulated");
}

#[test]
fn a_poll_returning_false_interrupts_with_the_partial_results() {
    fn stop(_: f64) -> bool {
        false
    }
    // Long enough for the first poll (65k events): background traffic for 200 ms.
    let s = run_opts(
        &star(&format!("{BACKGROUND}[run]\ntime_limit_us = 200000\n")),
        &RunOptions { seed: None, progress: Some(stop), probe: false, base_dir: None },
    );
    assert_eq!(s["status"], "interrupted");
    assert!(reason(&s).starts_with("interrupted"));
    let t = s["sim_time_ps"].as_u64().unwrap();
    assert!(t > 0 && t < 200_000_000_000, "stopped early, at {t} ps");
    assert!(s["messages"]["count"].as_u64().unwrap() > 0, "what was measured is there");
}

#[test]
fn statuses_have_distinct_names() {
    let names: std::collections::BTreeSet<_> = RunStatus::ALL.iter().map(|s| s.as_str()).collect();
    assert_eq!(names.len(), RunStatus::ALL.len());
}

/// Records the fractions a run reports to its poll function.
macro_rules! recorder {
    ($name:ident, $store:ident) => {
        static $store: std::sync::Mutex<Vec<f64>> = std::sync::Mutex::new(Vec::new());
        fn $name(f: f64) -> bool {
            $store.lock().unwrap().push(f);
            true
        }
    };
}

fn assert_progresses(fractions: &[f64], what: &str) {
    assert!(fractions.len() >= 3, "{what}: only {} polls", fractions.len());
    assert!(fractions.windows(2).all(|w| w[0] <= w[1]), "{what}: not monotone: {fractions:?}");
    assert!(fractions.iter().all(|f| (0.0..=1.0).contains(f)), "{what}: {fractions:?}");
    // Not stuck at 0 (the old behaviour for collectives and in-network runs) and not at 1 early.
    assert!(fractions.iter().any(|&f| f > 0.05 && f < 0.95), "{what}: {fractions:?}");
}

#[test]
fn collective_runs_report_progress_by_steps() {
    recorder!(poll, SEEN);
    let text = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../scenarios/examples/torus_swing_allreduce.toml"
    ))
    .unwrap()
    .replace("bytes = 4194304", "bytes = 33554432");
    let s = run_opts(&text, &RunOptions { seed: None, progress: Some(poll), probe: false, base_dir: None });
    assert_eq!(s["status"], "completed", "{}", s["status_reason"]);
    assert_progresses(&SEEN.lock().unwrap(), "collective");
}

#[test]
fn in_network_runs_report_progress_by_blocks() {
    recorder!(poll, SEEN);
    let text =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../../scenarios/examples/canary_allreduce.toml"))
            .unwrap()
            .replace("bytes = 1048576", "bytes = 8388608");
    let s = run_opts(&text, &RunOptions { seed: None, progress: Some(poll), probe: false, base_dir: None });
    assert_eq!(s["status"], "completed", "{}", s["status_reason"]);
    assert_progresses(&SEEN.lock().unwrap(), "ina_allreduce");
}

// ----- Guards: absurd sizes and times, protocol packets larger than the MTU ----------------

fn error_of(text: &str) -> reducelab_sim::ScenarioError {
    match load_scenario_str(text, None) {
        Ok(_) => panic!("accepted:\n{text}"),
        Err(e) => e,
    }
}

#[test]
fn protocol_packets_must_fit_the_mtu() {
    let ina = |protocol: &str, epp: u32| {
        star(&format!(
            "[network]\nmtu_bytes = 4096\n[ina]\nmax_elements_per_packet = 2048\n[[traffic]]\nkind = \"ina_allreduce\"\nprotocol = \"{protocol}\"\nhosts = \"all\"\nbytes = 65536\nelements_per_packet = {epp}\n"
        ))
    };
    for protocol in ["canary", "static_trees"] {
        // 1009 elements x 4 B + 57 B of headers = 4093 B fit; 1010 (4097 B) do not.
        load_scenario_str(&ina(protocol, 1009), None).unwrap_or_else(|e| panic!("{protocol}: {e}"));
        let err = error_of(&ina(protocol, 1010));
        assert_eq!(err.field, "traffic[0].elements_per_packet", "{err}");
        assert!(
            err.reason.contains("4097 B per packet exceed network.mtu_bytes (4096)")
                && err.reason.contains("at most 1009 elements"),
            "{err}"
        );
    }
}

#[test]
fn absurd_times_and_sizes_are_refused_with_the_field() {
    let msg = |rest: &str, list: &str| star(&format!("{rest}[[traffic]]\nkind = \"messages\"\nlist = [{list}]\n"));
    // A start beyond the format's range used to be clamped to the end of time.
    let err = error_of(&msg("", "[0, 1, 1, 0], [0, 1, 1, 2000000000000000]"));
    assert_eq!(err.field, "traffic[0].list[1][3]", "{err}");
    assert!(err.reason.contains("too large"), "{err}");
    // 4 MB at 1 b/s take 1e12 s: the end would overflow 64-bit picoseconds.
    let slow = "name = \"status\"\n[topology]\nkind = \"star\"\nhosts = 8\nbandwidth_gbps = 1e-9\nlatency_ns = 1000\n";
    let err = error_of(&format!("{slow}[[traffic]]\nkind = \"messages\"\nlist = [[0, 1, 4000000, 0]]\n"));
    assert_eq!(err.field, "traffic[0].list[0]", "{err}");
    assert!(err.reason.contains("cannot finish within"), "{err}");
    let err = error_of(&format!("{slow}[[traffic]]\nkind = \"permutation\"\nhosts = \"all\"\nbytes = 4000000\n"));
    assert_eq!(err.field, "traffic[0].bytes", "{err}");
    // The largest start that fits is accepted.
    load_scenario_str(&msg("", "[0, 1, 1, 999999999999999]"), None).unwrap();
    let err = error_of(&msg("[run]\ntime_limit_us = 1e20\n", "[0, 1, 1, 0]"));
    assert_eq!(err.field, "run.time_limit_us", "{err}");
}

#[test]
fn a_collective_cut_by_a_failed_host_stalls_naming_its_ranks() {
    // Host 5 of an 8x8 torus fails during a Swing allreduce: its peers wait for ever.
    let text = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../scenarios/examples/torus_swing_allreduce.toml"
    ))
    .unwrap();
    let sc = load_scenario_str(&text, None).unwrap();
    let node = sc.topology.nodes.iter().position(|n| n.host == Some(5)).unwrap();
    let s = run(&format!("{text}\n[[faults]]\nkind = \"node\"\nnode = {node}\nat_ns = 1000\n"));
    assert_eq!(s["status"], "stalled");
    let why = reason(&s);
    assert!(why.starts_with("collective traffic[0] (swing-bandwidth Allreduce): "), "{why}");
    assert!(why.contains("of 64 ranks unfinished (ranks "), "{why}");
    assert!(why.contains(&format!("network: node {node} failed")), "{why}");
}

/// PFC through the one door: a scenario file with `flow_control = "pfc"` runs lossless (status
/// completed, no drop), and its result files carry the PFC counters, consistently.
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
    // The example leaves every threshold to its per-link default.
    assert!(p["xoff_bytes"].is_null() && p["xon_bytes"].is_null() && p["headroom_bytes"].is_null(), "{p}");
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
