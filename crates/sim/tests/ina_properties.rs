//! Property test of every in-network protocol in the registry (`reducelab_ina::PROTOCOLS`):
//! over random retransmission timeouts (1 µs–1 ms), loss (0–20 % per link traversal),
//! duplication (0–10 % of protocol packets sent twice per link) and reordering (0–20 % held
//! back 0.1–5 µs), descriptor table sizes (1–64), tenants (1–3 concurrent allreduces),
//! stragglers (OS noise and switch timeouts from 20 ns to 3 µs) and switch failures, a run
//! either completes with every host's result verified (fingerprints and real element values),
//! nothing counted twice and nothing left in the switches — or it ends as stalled with a
//! reason. No run returns a wrong sum, and none runs for ever. A protocol that is not
//! `duplicate_safe` (the seeds' counters: Canary, static trees, Flare, SparCML) may add a
//! duplicated contribution twice: then every host's check finds the wrong sum, counted in
//! `bad_blocks`, and no host is verified with it. Each case runs a second time with `[ina]
//! wire_check`, every protocol header emitted to its wire frame and parsed back, and must give
//! the same bytes (not for a duplicate-unsafe protocol under duplication, whose double count
//! can make a header the frame refuses, e.g. Canary's counter beyond its hosts).
//!
//! The cases are drawn from a fixed seed, so a failure is reproducible: the message prints
//! the case's scenario. `REDUCELAB_PROPERTY_CASES=N` runs N cases per protocol (default 24;
//! the issue-11 soak ran 2,000) and `REDUCELAB_PROPERTY_SEED` picks another seed.

use reducelab_des::Rng;
use reducelab_ina::{ProtocolInfo, PROTOCOLS};
use reducelab_sim::run_scenario_str;
use serde_json::Value;

/// 4 leaves × 4 hosts, 4 spines: leaf l is node 5l, its hosts nodes 5l+1..5l+4, spines 20..23.
const LEAVES: [u32; 4] = [0, 5, 10, 15];
const SPINES: [u32; 4] = [20, 21, 22, 23];

fn log_uniform(rng: &mut Rng, lo: f64, hi: f64) -> f64 {
    (lo.ln() + rng.unit_f64() * (hi.ln() - lo.ln())).exp()
}

fn param_value(rng: &mut Rng, p: &reducelab_ina::ParamSpec) -> String {
    let x = if p.log {
        log_uniform(rng, p.explore_min.max(1e-9), p.explore_max)
    } else {
        p.explore_min + rng.unit_f64() * (p.explore_max - p.explore_min)
    };
    if p.integer {
        format!("{}", x.round() as i64)
    } else {
        format!("{x:.3}")
    }
}

/// One random scenario for `proto`.
fn case(proto: &ProtocolInfo, rng: &mut Rng) -> String {
    let mut hosts: Vec<u32> = (0..16).collect();
    rng.shuffle(&mut hosts);
    let tenants = 1 + rng.below(3) as usize;
    // Protocol parameters are the scenario's (the tenants share the switches' layout).
    let mut params = String::new();
    for p in proto.params {
        if rng.bernoulli(0.8) {
            params += &format!("{} = {}\n", p.key, param_value(rng, p));
        }
    }
    let mut traffic = String::new();
    let mut at = 0usize;
    for k in 0..tenants {
        let left = hosts.len() - at - 2 * (tenants - k - 1);
        let size = if k + 1 == tenants { left } else { 2 + rng.below((left - 1) as u64) as usize };
        let size = size.clamp(2, left);
        let mine = &hosts[at..at + size];
        at += size;
        let bytes = 1024 + rng.below(48 * 1024);
        let epp = [16, 64, 256][rng.below(3) as usize];
        traffic += &format!("[[traffic]]\nkind = \"ina_allreduce\"\nprotocol = \"{}\"\nhosts = {mine:?}\nbytes = {bytes}\nelements_per_packet = {epp}\n", proto.name);
        traffic += &params;
    }
    let loss = if rng.bernoulli(0.5) { 0.0 } else { rng.unit_f64() * 0.2 };
    let table = 1 + rng.below(64);
    let timeout_ns = log_uniform(rng, 20.0, 3000.0).round() as u64;
    let mut extra = format!(
        "[network]\nmtu_bytes = 4096\nswitch_latency_ns = 300\nrouting = \"canary\"\nloss_probability = {loss:.4}\n{}",
        dup_and_reorder(rng)
    );
    if rng.bernoulli(0.5) {
        extra += "arbitration = \"input_round_robin\"\n";
    }
    extra += &format!("[ina]\ntable_size = {table}\ntimeout_ns = {timeout_ns}\n");
    if tenants > 1 && rng.bernoulli(0.3) {
        extra += &format!("slots_per_tenant = {}\n", (1 + rng.below((table / tenants as u64).max(1))).min(table));
    }
    if rng.bernoulli(0.4) {
        extra += &format!("[noise]\nprobability = {:.3}\ndelay_ns = {}\n", rng.unit_f64() * 0.2, 100 + rng.below(2000));
    }
    if rng.bernoulli(0.3) {
        let node = if rng.bernoulli(0.7) { SPINES[rng.below(4) as usize] } else { LEAVES[rng.below(4) as usize] };
        extra += &format!("[[faults]]\nkind = \"node\"\nnode = {node}\nat_ns = {}\n", rng.below(20_000));
    }
    format!(
        "name = \"ina-property\"\nseed = {}\n[topology]\nkind = \"fat_tree_2\"\nleaves = 4\nhosts_per_leaf = 4\nspines = 4\nbandwidth_gbps = 100\nlatency_ns = 500\n{extra}{traffic}",
        rng.below(1 << 30)
    )
}

/// `[network]` keys of the duplication and reordering faults, each on in half the cases:
/// up to 10 % of protocol packets sent twice per link, up to 20 % held back 0.1–5 µs.
fn dup_and_reorder(rng: &mut Rng) -> String {
    let mut keys = String::new();
    if rng.bernoulli(0.5) {
        keys += &format!("duplicate_probability = {:.4}\n", rng.unit_f64() * 0.1);
    }
    if rng.bernoulli(0.5) {
        keys += &format!(
            "reorder_probability = {:.4}\nreorder_delay_ns = {}\n",
            rng.unit_f64() * 0.2,
            log_uniform(rng, 100.0, 5000.0).round()
        );
    }
    keys
}

/// Whether a case's packets may be added twice: `proto` is not duplicate-safe and the
/// scenario duplicates packets.
fn double_counts(proto: &ProtocolInfo, text: &str) -> bool {
    !proto.duplicate_safe && text.contains("duplicate_probability")
}

fn env_u64(name: &str, default: u64) -> u64 {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

/// What every run must satisfy, whatever happened to it (`tally`: completed, stalled, and
/// found double counted).
fn check(proto: &ProtocolInfo, text: &str, s: &Value, tally: &mut [u64; 3]) {
    let ctx = || format!("protocol {}, scenario:\n{text}\nsummary: {}", proto.name, s["traffic"]);
    let inas: Vec<&Value> = s["traffic"].as_array().unwrap().iter().filter(|t| t["kind"] == "ina_allreduce").collect();
    let mut bad = 0;
    for t in &inas {
        // A host counts as verified only with every block right; never more than the hosts.
        assert!(t["verified"].as_u64() <= t["hosts"].as_u64(), "{}", ctx());
        bad += t["bad_blocks"].as_u64().unwrap();
    }
    if bad > 0 {
        // Only a duplicate-unsafe protocol under duplication adds a contribution twice, and
        // its hosts find it: the run is not verified.
        assert!(double_counts(proto, text), "a wrong result: {}", ctx());
        assert!(matches!(s["status"].as_str(), Some("unverified" | "stalled")), "{}", ctx());
        for t in &inas {
            if t["bad_blocks"] != 0 {
                assert!(t["verified"].as_u64() < t["hosts"].as_u64(), "{}", ctx());
            }
        }
        tally[2] += 1;
        return;
    }
    match s["status"].as_str().unwrap() {
        "completed" => {
            tally[0] += 1;
            for t in &inas {
                assert_eq!(
                    t["verified"].as_u64(),
                    t["hosts"].as_u64(),
                    "completed but not verified everywhere: {}",
                    ctx()
                );
                assert_eq!(t["hosts_finished"].as_u64(), t["hosts"].as_u64(), "{}", ctx());
            }
            // A late copy may hold a descriptor (and its values) in a duplicate-unsafe
            // protocol's switch (counted).
            if !double_counts(proto, text) {
                assert_eq!(s["ina"]["descriptors_left"], 0, "{}", ctx());
                assert_eq!(s["ina"]["values_slots_left"], 0, "{}", ctx());
            }
        }
        "stalled" => {
            tally[1] += 1;
            let why = s["status_reason"].as_str().unwrap_or("");
            assert!(why.contains("in-network allreduce"), "a stall must name the stuck allreduce: {why:?}; {}", ctx());
            let lossy = s["ina"]["lost_packets"].as_u64().unwrap_or(0) > 0 || text.contains("[[faults]]");
            assert!(lossy || !proto.loss_recovery, "stalled without any loss or failure: {why}; {}", ctx());
        }
        other => panic!("run ended {other:?}: {}", ctx()),
    }
}

#[test]
fn every_protocol_completes_verified_or_stalls_with_a_reason() {
    let cases = env_u64("REDUCELAB_PROPERTY_CASES", 24);
    let seed = env_u64("REDUCELAB_PROPERTY_SEED", 11);
    assert!(PROTOCOLS.len() >= 2);
    for (i, proto) in PROTOCOLS.iter().enumerate() {
        let mut rng = Rng::new(seed).fork(i as u64);
        let (mut tally, mut rejected, mut redrawn) = ([0u64; 3], 0u64, 0u64);
        let on_the_wire = (proto.build)(&Default::default()).unwrap().software_switch().is_ok();
        for _ in 0..cases {
            // Some random combinations are invalid for a protocol (e.g. static trees' or the
            // reliable tree's window × tenants beyond the table): refused up front, naming the
            // field; the case is drawn again (three draws), so every protocol is tested on as
            // many runs whatever its constraints.
            let mut drawn = None;
            for _ in 0..3 {
                let text = case(proto, &mut rng);
                match run_scenario_str(&text, &Default::default()) {
                    Ok(out) => {
                        drawn = Some((text, out));
                        break;
                    }
                    Err(e) => {
                        assert!(!e.field.is_empty() && !e.reason.is_empty(), "{e}");
                        redrawn += 1;
                    }
                }
            }
            let Some((text, out)) = drawn else {
                rejected += 1;
                continue;
            };
            check(proto, &text, &serde_json::from_str(&out.summary_json).unwrap(), &mut tally);
            // The same run with every header carried by its wire frame and parsed back gives
            // the same bytes: the frame carries everything the protocol uses. A protocol the
            // software switch cannot run has its wire check refused.
            if double_counts(proto, &text) {
                continue;
            }
            let wired = run_scenario_str(&text.replace("[ina]\n", "[ina]\nwire_check = true\n"), &Default::default());
            match (wired, on_the_wire) {
                (Ok(wired), true) => assert!(
                    wired.summary_json == out.summary_json && wired.files == out.files,
                    "wire check changed the run:\n{text}"
                ),
                (Err(e), false) => assert_eq!(e.field, "ina.wire_check", "{e}"),
                (r, _) => panic!("wire check of {}: {:?}", proto.name, r.map(|_| ()).map_err(|e| e.to_string())),
            }
        }
        eprintln!(
            "{}: {cases} cases, {} completed and verified, {} stalled with a reason, {} double counted under duplication and found by the hosts, {rejected} refused as invalid three times ({redrawn} draws refused)",
            proto.name, tally[0], tally[1], tally[2]
        );
        // The property is only worth something if the cases mostly run and some complete.
        if cases >= 16 {
            assert!(rejected * 2 < cases, "{}: {rejected} of {cases} cases refused", proto.name);
            assert!(tally[0] > 0, "{}: no case completed", proto.name);
        }
    }
}

/// The issue-11 regression in its smallest form: with no loss at all, a retransmission
/// timeout far below the collective's duration makes hosts ask for blocks, leaders issue
/// failures and hosts re-send — including for blocks their NIC has not sent yet. Each
/// contribution must still be counted once per attempt.
#[test]
fn canary_short_retransmission_timeouts_without_loss_give_exact_sums() {
    let mut failures = 0;
    for rto_us in [1.0, 5.0, 20.0] {
        let text = format!(
            "name = \"t\"\nseed = 1\n[topology]\nkind = \"fat_tree_2\"\nleaves = 4\nhosts_per_leaf = 4\nspines = 4\nbandwidth_gbps = 100\nlatency_ns = 500\n\
             [network]\nmtu_bytes = 4096\nswitch_latency_ns = 300\nrouting = \"canary\"\narbitration = \"input_round_robin\"\n[ina]\ntable_size = 64\ntimeout_ns = 1000\n\
             [[traffic]]\nkind = \"ina_allreduce\"\nprotocol = \"canary\"\nhosts = [0, 1, 2, 4, 5, 6, 8, 9, 10, 12, 13, 14]\nbytes = 262144\nelements_per_packet = 256\nretransmit_timeout_us = {rto_us}\n"
        );
        let s: Value =
            serde_json::from_str(&run_scenario_str(&text, &Default::default()).unwrap().summary_json).unwrap();
        let t = &s["traffic"][0];
        assert_eq!(s["status"], "completed", "rto {rto_us} µs: {}", s["status_reason"]);
        assert_eq!(t["bad_blocks"], 0, "rto {rto_us} µs: {t}");
        assert_eq!(t["verified"], 12, "rto {rto_us} µs: {t}");
        assert!(t["host_stats"]["retx_requests"].as_u64().unwrap() > 0, "rto {rto_us} µs: {t}");
        failures += t["host_stats"]["failures_issued"].as_u64().unwrap();
    }
    // The scenario does exercise the re-issue path (failure notices racing the NIC).
    assert!(failures > 0);
}

/// Training jobs (`kind = "training"`) on every in-network protocol of the registry: one or two
/// jobs of 2 to 6 workers, small models, random start times and jitter, random loss,
/// duplication and reordering, the protocol's keys at random. Each run completes with every job verified (every partition's
/// allreduce on every worker) and a JCT no shorter than the model's computation (a worker
/// joins a partition's allreduce only once its layer is computed), or stalls with a reason
/// (only under loss, or for a protocol without loss recovery), and runs the same twice.
#[test]
fn every_protocol_runs_training_jobs_verified_or_stalls_with_a_reason() {
    let cases = env_u64("REDUCELAB_PROPERTY_CASES", 24) / 3;
    let seed = env_u64("REDUCELAB_PROPERTY_SEED", 11);
    for (i, proto) in PROTOCOLS.iter().enumerate() {
        // A shared-pool protocol's training jobs are its own (crates/ina/tests/shared_pool.rs,
        // the training tests), not its registry entry's allreduces.
        if reducelab_ina::pool::pool_protocol(proto.name).is_some() {
            continue;
        }
        let mut rng = Rng::new(seed ^ 0x7A11).fork(i as u64);
        let (mut completed, mut double) = (0, 0);
        for _ in 0..cases {
            let jobs = 1 + rng.below(2);
            let workers = 2 + rng.below(5);
            let scale = 0.002 + rng.unit_f64() * 0.008;
            let mut params = String::new();
            for p in proto.params {
                if rng.bernoulli(0.5) {
                    params += &format!("{} = {}\n", p.key, param_value(&mut rng, p));
                }
            }
            let loss = if rng.bernoulli(0.5) { 0.0 } else { rng.unit_f64() * 0.05 };
            let text = format!(
                "name = \"training-property\"\nseed = {}\n[topology]\nkind = \"fat_tree_2\"\nleaves = 4\nhosts_per_leaf = 4\nspines = 4\nbandwidth_gbps = 100\nlatency_ns = 500\n\
                 [network]\nmtu_bytes = 4096\nrouting = \"canary\"\nloss_probability = {loss:.4}\n{}[ina]\ntimeout_ns = {}\n\
                 [[traffic]]\nkind = \"training\"\nprotocol = \"{}\"\njobs = {jobs}\nworkers = {workers}\nmodels = [\"A\", \"B\"]\nmodel_scale = {scale:.4}\n\
                 start_max_us = {}\njitter_max_us = {}\nvalues = true\n{params}",
                rng.below(1 << 30),
                dup_and_reorder(&mut rng),
                log_uniform(&mut rng, 20.0, 3000.0).round() as u64,
                proto.name,
                rng.below(50),
                rng.below(30),
            );
            let out = match run_scenario_str(&text, &Default::default()) {
                Ok(out) => out,
                Err(e) => {
                    assert!(!e.field.is_empty() && !e.reason.is_empty(), "{e}");
                    continue;
                }
            };
            let again = run_scenario_str(&text, &Default::default()).unwrap();
            assert!(again.summary_json == out.summary_json, "not deterministic:\n{text}");
            let s: Value = serde_json::from_str(&out.summary_json).unwrap();
            let t = &s["traffic"][0];
            let ctx = || format!("protocol {}, scenario:\n{text}\nsummary: {t}", proto.name);
            assert_eq!(t["kind"], "training", "{}", ctx());
            let js = t["jobs"].as_array().unwrap();
            assert_eq!(js.len() as u64, jobs, "{}", ctx());
            for j in js {
                assert_eq!(j["partitions"], 4, "{}", ctx());
            }
            if js.iter().any(|j| j["bad_blocks"] != 0) {
                // Only a duplicate-unsafe protocol under duplication adds a contribution
                // twice, and its workers find it: that job is not verified.
                assert!(double_counts(proto, &text), "a wrong result: {}", ctx());
                assert!(js.iter().all(|j| j["bad_blocks"] == 0 || j["verified"] == false), "{}", ctx());
                double += 1;
                continue;
            }
            match s["status"].as_str().unwrap() {
                "completed" => {
                    completed += 1;
                    for (k, j) in js.iter().enumerate() {
                        assert!(j["verified"].as_bool().unwrap(), "completed but not verified: {}", ctx());
                        // Model A (even jobs) computes 2 × 320 µs, B 2 × 640 µs, at `scale`.
                        let comp_ps = if k % 2 == 0 { 640e6 } else { 1280e6 } * scale;
                        assert!(
                            j["jct_ps"].as_f64().unwrap() >= comp_ps.floor(),
                            "JCT below the computation: {}",
                            ctx()
                        );
                    }
                    if !double_counts(proto, &text) {
                        assert_eq!(s["ina"]["descriptors_left"], 0, "{}", ctx());
                        assert_eq!(s["ina"]["values_slots_left"], 0, "{}", ctx());
                    }
                }
                "stalled" => {
                    let why = s["status_reason"].as_str().unwrap_or("");
                    assert!(
                        why.contains("training traffic[0] job"),
                        "a stall must name the stuck job: {why:?}; {}",
                        ctx()
                    );
                    assert!(loss > 0.0 || !proto.loss_recovery, "stalled without loss: {why}; {}", ctx());
                }
                other => panic!("run ended {other:?}: {}", ctx()),
            }
        }
        eprintln!(
            "{}: {cases} training cases, {completed} completed and verified, {double} double counted under duplication and found by the workers",
            proto.name
        );
        if cases >= 8 {
            assert!(completed > 0, "{}: no training case completed", proto.name);
        }
    }
}

/// Two allreduces on the same hosts at the same time (as a training job's partitions are),
/// for every protocol: each host's agents must start before their NIC pulls (the simulator
/// once pulled the second collective's agent when the first one's start ran, so a sparse
/// protocol sent its blocks before it had its data and every result of the second was wrong).
#[test]
fn every_protocol_runs_two_allreduces_on_the_same_hosts() {
    for proto in PROTOCOLS {
        let entry = format!(
            "[[traffic]]\nkind = \"ina_allreduce\"\nprotocol = \"{}\"\nhosts = [0, 1, 2, 5, 6, 9]\nbytes = 15200\nelements_per_packet = 62\nvalues = true\n",
            proto.name
        );
        let text = format!(
            "name = \"shared-hosts\"\nseed = 3\n[topology]\nkind = \"fat_tree_2\"\nleaves = 4\nhosts_per_leaf = 4\nspines = 4\nbandwidth_gbps = 100\nlatency_ns = 500\n{entry}{entry}"
        );
        let s: Value =
            serde_json::from_str(&run_scenario_str(&text, &Default::default()).unwrap().summary_json).unwrap();
        assert_eq!(s["status"], "completed", "{}: {}", proto.name, s["status_reason"]);
        for t in s["traffic"].as_array().unwrap() {
            assert_eq!(t["bad_blocks"], 0, "{}: {t}", proto.name);
            assert_eq!(t["verified"], 6, "{}: {t}", proto.name);
        }
    }
}

/// The duplication and reordering faults act on protocol packets only: beside a DSA allreduce
/// (duplicate-safe), a permutation's raw messages are delivered once each, while protocol
/// packets are sent twice and held back; every host's result is exact, its hosts count the
/// copies they dropped, and the same scenario gives the same bytes.
#[test]
fn duplication_and_reordering_touch_protocol_packets_only_and_keep_results_exact() {
    let text = "name = \"dup\"\nseed = 5\n[topology]\nkind = \"fat_tree_2\"\nleaves = 4\nhosts_per_leaf = 4\nspines = 4\nbandwidth_gbps = 100\nlatency_ns = 500\n\
                [network]\nduplicate_probability = 0.3\nreorder_probability = 0.3\nreorder_delay_ns = 2000\n\
                [[traffic]]\nkind = \"ina_allreduce\"\nprotocol = \"dsa\"\nhosts = [0, 1, 2, 4, 5, 6, 8, 9]\nbytes = 65536\nvalues = true\n\
                [[traffic]]\nkind = \"permutation\"\nhosts = [3, 7, 11, 15, 12, 13, 14, 10]\nbytes = 100000\n";
    let out = run_scenario_str(text, &Default::default()).unwrap();
    let s: Value = serde_json::from_str(&out.summary_json).unwrap();
    assert_eq!(s["status"], "completed", "{}", s["status_reason"]);
    let (ina, perm) = (&s["traffic"][0], &s["traffic"][1]);
    assert_eq!((ina["verified"].as_u64(), ina["bad_blocks"].as_u64()), (Some(8), Some(0)), "{ina}");
    assert_eq!(perm["completed"], perm["messages"], "{perm}");
    let (dup, held) =
        (s["packet_faults"]["duplicated"].as_u64().unwrap(), s["packet_faults"]["held"].as_u64().unwrap());
    // About 30 % of the protocol packets' link crossings each.
    assert!(dup > 100 && held > 100, "{}", s["packet_faults"]);
    assert!(ina["host_stats"]["duplicates"].as_u64().unwrap() > 0, "{ina}");
    let again = run_scenario_str(text, &Default::default()).unwrap();
    assert!(again.summary_json == out.summary_json && again.files == out.files);
}
