//! Background traffic as the Canary paper states it (`random_permutation`), per-packet noise in
//! scenarios (modes, chosen hosts, in-network hosts), HammingMesh board links with their own
//! bandwidth and latency (packet and flow), and link utilisation over all links and over
//! network links.

use reducelab_des::{Rng, SimDuration};
use reducelab_sim::{load_scenario_str, run_scenario_str, RunOptions, RunOutput};
use serde_json::Value;
use std::collections::BTreeMap;

fn run(text: &str) -> RunOutput {
    run_scenario_str(text, &RunOptions::default()).unwrap_or_else(|e| panic!("{e}\n{text}"))
}

fn file<'a>(out: &'a RunOutput, name: &str) -> &'a str {
    &out.files.iter().find(|(n, _)| n == name).unwrap_or_else(|| panic!("no {name}")).1
}

fn summary(out: &RunOutput) -> Value {
    serde_json::from_str(&out.summary_json).unwrap()
}

/// messages.csv rows: (src, dst, bytes, start_ps, end_ps if delivered), in message order.
fn messages(out: &RunOutput) -> Vec<(u32, u32, u64, u64, Option<u64>)> {
    file(out, "messages.csv")
        .lines()
        .skip(1)
        .map(|l| {
            let c: Vec<&str> = l.split(',').collect();
            (
                c[1].parse().unwrap(),
                c[2].parse().unwrap(),
                c[3].parse().unwrap(),
                c[4].parse().unwrap(),
                c[5].parse().ok(),
            )
        })
        .collect()
}

/// A 32-host two-level fat tree (4 leaves of 8 hosts, 4 spines), 100 Gb/s, 500 ns.
const FAT_TREE: &str = "[topology]\nkind = \"fat_tree_2\"\nleaves = 4\nhosts_per_leaf = 8\nspines = 4\nbandwidth_gbps = 100\nlatency_ns = 500\n";

fn hosts_toml(h: &[u32]) -> String {
    format!("[{}]", h.iter().map(|x| x.to_string()).collect::<Vec<_>>().join(", "))
}

/// Asserts that `map` (sender → receiver over `hosts`) is a permutation of `hosts` without
/// fixed points: every host sends once and receives once, never from itself.
fn assert_derangement(map: &BTreeMap<u32, u32>, hosts: &[u32], what: &str) {
    assert_eq!(map.len(), hosts.len(), "{what}: every host sends");
    let mut recv: Vec<u32> = map.values().copied().collect();
    recv.sort_unstable();
    let mut want = hosts.to_vec();
    want.sort_unstable();
    assert_eq!(recv, want, "{what}: every host receives exactly once");
    for (s, d) in map {
        assert_ne!(s, d, "{what}: host {s} sends to itself");
    }
}

/// Over random host sets (2 to 32 hosts), seeds and window sizes: round k of every host's
/// k-th message is a permutation without fixed points of the set, and rounds differ.
#[test]
fn each_message_round_is_a_permutation_without_fixed_points() {
    let mut rng = Rng::new(2024);
    let mut rounds_checked = 0;
    for case in 0..16 {
        let n = 2 + rng.below(31) as usize;
        let mut all: Vec<u32> = (0..32).collect();
        rng.shuffle(&mut all);
        let hosts = &all[..n];
        let seed = rng.below(1 << 40);
        let inflight = 1 + rng.below(3);
        let text = format!(
            "name = \"p\"\nseed = {seed}\n{FAT_TREE}[[traffic]]\nkind = \"random_permutation\"\nhosts = {}\nbytes = 2000\ninflight = {inflight}\n[run]\ntime_limit_us = 15\n",
            hosts_toml(hosts)
        );
        let out = run(&text);
        let mut per_src: BTreeMap<u32, Vec<u32>> = BTreeMap::new();
        for (s, d, b, _, _) in messages(&out) {
            assert_eq!(b, 2000);
            per_src.entry(s).or_default().push(d);
        }
        let full_rounds = hosts.iter().map(|h| per_src.get(h).map_or(0, |v| v.len())).min().unwrap();
        assert!(full_rounds >= inflight as usize + 2, "case {case}: only {full_rounds} rounds ran");
        let mut distinct = std::collections::BTreeSet::new();
        // (`k` is a round number: it indexes every host's list, `per_src[&h][k]`.)
        #[allow(clippy::needless_range_loop)]
        for k in 0..full_rounds {
            let round: BTreeMap<u32, u32> = hosts.iter().map(|&h| (h, per_src[&h][k])).collect();
            assert_derangement(&round, hosts, &format!("case {case} ({n} hosts, seed {seed}) round {k}"));
            distinct.insert(round.values().copied().collect::<Vec<_>>());
            rounds_checked += 1;
        }
        if n >= 4 {
            assert!(distinct.len() > 1, "case {case}: every round drew the same permutation");
        }
    }
    assert!(rounds_checked > 100);
}

/// `redraw = "epoch"`: every message started within one epoch follows that epoch's one
/// permutation (a host sends all of them to the same host), and epochs draw new ones.
#[test]
fn an_epoch_keeps_one_permutation_and_epochs_change_it() {
    let hosts: Vec<u32> = (0..32).step_by(2).collect();
    for seed in [1u64, 7, 99] {
        let epoch_ps = 5_000_000; // 5 us; a 2000-byte message takes about 2.3 us across the tree
        let text = format!(
            "name = \"p\"\nseed = {seed}\n{FAT_TREE}[[traffic]]\nkind = \"random_permutation\"\nhosts = {}\nbytes = 2000\ninflight = 2\nredraw = \"epoch\"\nepoch_ns = 5000\nstart_ns = 100\n[run]\ntime_limit_us = 40\n",
            hosts_toml(&hosts)
        );
        let out = run(&text);
        let mut epochs: BTreeMap<u64, BTreeMap<u32, u32>> = BTreeMap::new();
        let mut per_epoch_msgs = 0;
        for (s, d, _, start, _) in messages(&out) {
            let e = (start - 100_000) / epoch_ps;
            let m = epochs.entry(e).or_default();
            if let Some(&prev) = m.get(&s) {
                assert_eq!(prev, d, "seed {seed}: host {s} sends to two hosts in epoch {e}");
            }
            m.insert(s, d);
            per_epoch_msgs += 1;
        }
        assert!(per_epoch_msgs > 4 * hosts.len(), "several messages per host and epoch");
        let full: Vec<_> = epochs.values().filter(|m| m.len() == hosts.len()).collect();
        assert!(
            full.len() >= 4,
            "seed {seed}: {} full epochs of {:?}",
            full.len(),
            epochs.values().map(|m| m.len()).collect::<Vec<_>>()
        );
        for m in &full {
            assert_derangement(m, &hosts, &format!("seed {seed}"));
        }
        for w in full.windows(2) {
            assert_ne!(w[0], w[1], "seed {seed}: consecutive epochs drew the same permutation");
        }
    }
}

/// `rate_gbps`: host h's j-th message starts at start + j·bytes·8/rate exactly while the
/// window does not bind, so each host offers the rate (delivered: within 2% over the run).
#[test]
fn a_rate_paces_every_host_at_that_rate() {
    let hosts: Vec<u32> = (0..32).collect();
    for (rate, bytes) in [(10.0f64, 1250u64), (25.0, 4000), (40.0, 3000)] {
        let interval_ps = bytes as f64 * 8.0 / rate * 1000.0; // ps
        let text = format!(
            "name = \"p\"\n{FAT_TREE}[[traffic]]\nkind = \"random_permutation\"\nhosts = {}\nbytes = {bytes}\ninflight = 32\nrate_gbps = {rate}\nstart_ns = 50\n[run]\ntime_limit_us = 40\n",
            hosts_toml(&hosts)
        );
        let out = run(&text);
        let mut per_src: BTreeMap<u32, Vec<(u64, Option<u64>)>> = BTreeMap::new();
        for (s, _, _, start, end) in messages(&out) {
            per_src.entry(s).or_default().push((start, end));
        }
        let limit_ps = 40_000_000u64;
        for (h, v) in &per_src {
            for (j, &(start, _)) in v.iter().enumerate() {
                let want = 50_000 + (j as f64 * interval_ps).floor() as u64;
                assert!(start.abs_diff(want) <= 1, "{rate} Gb/s: host {h} message {j} starts at {start}, paced {want}");
            }
            // The network keeps up: every message started 5 us before the end is delivered,
            // so the host's delivered rate over that span is the offered one.
            let span = limit_ps - 5_000_000 - 50_000;
            let started = v.iter().filter(|(st, _)| *st <= limit_ps - 5_000_000).count();
            assert_eq!(started, (span as f64 / interval_ps).floor() as usize + 1, "{rate} Gb/s: host {h}");
            let delivered =
                v.iter().filter(|(st, e)| *st <= limit_ps - 5_000_000 && e.is_some_and(|e| e <= limit_ps)).count();
            assert_eq!(delivered, started, "{rate} Gb/s: host {h} fell behind its rate");
            let gbps = delivered as f64 * bytes as f64 * 8.0 / (span as f64 * 1e-12) / 1e9;
            assert!((gbps / rate - 1.0).abs() < 0.05, "{rate} Gb/s offered: host {h} got {gbps:.2} Gb/s delivered");
        }
    }
}

#[test]
fn random_permutation_is_background_and_checks_its_fields() {
    // Background: never blamed, a foreground ends the run.
    let text = format!(
        "name = \"p\"\n{FAT_TREE}[[traffic]]\nkind = \"permutation\"\nhosts = [0, 1, 2, 3]\nbytes = 100000\n[[traffic]]\nkind = \"random_permutation\"\nhosts = [4, 5, 6, 7, 8]\nbytes = 65536\n"
    );
    let s = summary(&run(&text));
    assert_eq!(s["status"], "completed");
    assert_eq!(s["traffic"][1]["kind"], "random_permutation");
    assert_eq!(s["traffic"][1]["background"], true);
    let bad = |extra: &str| {
        let t = format!("name = \"p\"\n{FAT_TREE}[[traffic]]\nkind = \"random_permutation\"\nbytes = 1000\n{extra}\n[run]\ntime_limit_us = 1\n");
        load_scenario_str(&t, None).err().unwrap_or_else(|| panic!("accepted: {extra}"))
    };
    for (extra, field, says) in [
        ("hosts = [3]", "traffic[0].hosts", "two hosts"),
        ("inflight = 0", "traffic[0].inflight", "1..=1024"),
        ("redraw = \"round\"", "traffic[0].redraw", "\"message\" or \"epoch\""),
        ("redraw = \"epoch\"", "traffic[0].epoch_ns", "required"),
        ("epoch_ns = 100", "traffic[0].epoch_ns", "only with redraw"),
        ("redraw = \"epoch\"\nepoch_ns = -1", "traffic[0].epoch_ns", "positive"),
        ("rate_gbps = 0", "traffic[0].rate_gbps", "positive"),
        ("receiver = 3", "traffic[0].receiver", "not a parameter"),
    ] {
        let err = bad(extra);
        assert_eq!(err.field, field, "{extra}: {err}");
        assert!(err.reason.contains(says), "{extra}: {err}");
    }
    let err = load_scenario_str(
        &format!("name = \"p\"\n{FAT_TREE}[[traffic]]\nkind = \"random_permutation\"\nbytes = 1000\n"),
        None,
    )
    .err()
    .expect("rejected");
    assert_eq!(err.field, "run.time_limit_us");
}

#[test]
fn random_permutation_runs_are_deterministic_and_follow_the_seed() {
    let text = |seed: u64| {
        format!("name = \"p\"\nseed = {seed}\n{FAT_TREE}[[traffic]]\nkind = \"random_permutation\"\nbytes = 3000\ninflight = 2\nrate_gbps = 60\n[[traffic]]\nkind = \"random_permutation\"\nhosts = [1, 2, 3]\nbytes = 500\nredraw = \"epoch\"\nepoch_ns = 300\n[noise]\nprobability = 0.2\ndelay_ns = 700\nmode = \"packet\"\n[run]\ntime_limit_us = 4\n")
    };
    let (a, b, c) = (run(&text(5)), run(&text(5)), run(&text(6)));
    assert_eq!(a.summary_json, b.summary_json);
    assert_eq!(a.files, b.files);
    assert_ne!(file(&a, "messages.csv"), file(&c, "messages.csv"));
}

/// Noise in a scenario: `mode` and `hosts` reach the engine; "foreground" is the hosts of
/// the non-background traffic; a Canary allreduce's hosts (injecting protocol packets through
/// the engine) are delayed by per-packet noise and their data still verifies.
#[test]
fn scenario_noise_modes_and_hosts() {
    let base = |noise: &str| {
        format!("name = \"n\"\n{FAT_TREE}[[traffic]]\nkind = \"messages\"\nlist = [[0, 9, 40000, 0], [16, 25, 40000, 0]]\n[[traffic]]\nkind = \"random_permutation\"\nhosts = [2, 3, 4, 5]\nbytes = 4000\n{noise}")
    };
    let ends = |text: &str| -> Vec<Option<u64>> {
        messages(&run(text)).iter().filter(|m| m.0 == 0 || m.0 == 16).map(|m| m.4).collect()
    };
    let quiet = ends(&base(""));
    let stall = ends(&base("[noise]\nprobability = 1.0\ndelay_ns = 2000\n"));
    let packet = ends(&base("[noise]\nprobability = 1.0\ndelay_ns = 2000\nmode = \"packet\"\n"));
    let only16 = ends(&base("[noise]\nprobability = 1.0\ndelay_ns = 2000\nmode = \"packet\"\nhosts = [16]\n"));
    let fg = ends(&base("[noise]\nprobability = 1.0\ndelay_ns = 2000\nmode = \"packet\"\nhosts = \"foreground\"\n"));
    let bg = ends(&base("[noise]\nprobability = 1.0\ndelay_ns = 2000\nmode = \"packet\"\nhosts = [2, 3, 4, 5]\n"));
    for i in 0..2 {
        let q = quiet[i].unwrap();
        // 10 packets: a stalled port pays 2 us before each (the first overlaps the start-up
        // of the quiet run's pipeline a little), per-packet noise 2 us once.
        assert!(stall[i].unwrap() >= q + 9 * 2_000_000, "port stall: {:?} vs quiet {q}", stall[i]);
        assert_eq!(packet[i].unwrap(), q + 2_000_000, "per-packet: the whole message set aside once");
        assert_eq!(fg[i].unwrap(), q + 2_000_000, "foreground hosts are noisy");
    }
    assert_eq!(only16[0], quiet[0]);
    assert_eq!(only16[1].unwrap(), quiet[1].unwrap() + 2_000_000);
    // Background hosts' noise changes the background only (it shares no link with these).
    assert_eq!(bg, quiet);
    let err = load_scenario_str(&base("[noise]\nhosts = \"some\"\n"), None).err().expect("rejected");
    assert_eq!(err.field, "noise.hosts");
    let err = load_scenario_str(&base("[noise]\nhosts = [40]\n"), None).err().expect("rejected");
    assert_eq!(err.field, "noise.hosts[0]");
    let err = load_scenario_str(&base("[noise]\nmode = \"stall\"\n"), None).err().expect("rejected");
    assert!(err.field.starts_with("noise"), "{err}");

    // Canary: the hosts inject protocol packets through the engine; per-packet noise delays
    // them (runtime grows) and every block still verifies.
    let canary = |noise: &str| {
        let out = run(&format!(
            "name = \"c\"\n{FAT_TREE}[network]\nrouting = \"canary\"\n[[traffic]]\nkind = \"ina_allreduce\"\nprotocol = \"canary\"\nhosts = [0, 1, 5, 9, 12, 17, 22, 30]\nbytes = 65536\n{noise}"
        ));
        let s = summary(&out);
        assert_eq!(s["status"], "completed", "{noise}: {}", out.summary_json);
        assert_eq!(s["traffic"][0]["verified"], 8, "every host verified its result");
        s["traffic"][0]["runtime_ps"].as_u64().unwrap()
    };
    let t0 = canary("");
    let t1 = canary("[noise]\nprobability = 0.2\ndelay_ns = 1000\nmode = \"packet\"\n");
    let t2 = canary("[noise]\nprobability = 0.2\ndelay_ns = 1000\nmode = \"packet\"\nhosts = [2, 3]\n");
    assert!(t1 > t0, "per-packet noise on the allreduce's hosts delays it ({t0} -> {t1} ps)");
    assert_eq!(t2, t0, "noise on hosts outside the allreduce does not touch it");
}

/// HammingMesh board links with their own bandwidth and latency: a one-packet message to the
/// on-board neighbour crosses one board link, to the next board's host two switch links; the
/// runtime is exact at packet and flow level, through the table and the shape shorthand.
#[test]
fn board_links_have_their_own_bandwidth_and_latency() {
    let (bw, lat, sw) = (100u64, 500u64, 300u64);
    let (bbw, blat) = (400u64, 20u64);
    let bytes = 1000u64;
    let wire = bytes + 64;
    let ser = |gbps: u64| SimDuration::serialization(wire, gbps * 1_000_000_000).ps();
    // The receiving host forwards (a direct network): every hop pays the switch latency.
    let on_board = ser(bbw) + blat * 1000 + sw * 1000;
    let off_board = 2 * (ser(bw) + lat * 1000 + sw * 1000);
    let board_keys = format!("board_bandwidth_gbps = {bbw}\nboard_latency_ns = {blat}\n");
    for topo in [
        format!("[topology]\nkind = \"hammingmesh\"\nboard = [2, 2]\ngrid = [2, 2]\nbandwidth_gbps = {bw}\nlatency_ns = {lat}\n{board_keys}"),
        format!("[topology]\nshape = \"hammingmesh:2x2,2x2\"\nbandwidth_gbps = {bw}\nlatency_ns = {lat}\n{board_keys}"),
    ] {
        // Hosts are numbered row by row over the 4x4 grid: 0 = (0,0), 1 = (1,0) on board 0;
        // 2 = (2,0) on the next board.
        let text = format!("name = \"b\"\n{topo}[network]\nswitch_latency_ns = {sw}\nrouting = \"minimal\"\n[[traffic]]\nkind = \"messages\"\nlist = [[0, 1, {bytes}, 0], [1, 2, {bytes}, 0]]\n");
        let m = messages(&run(&text));
        assert_eq!(m[0].4, Some(on_board), "on board");
        assert_eq!(m[1].4, Some(off_board), "off board");
        // Flow level: the same one-message steps.
        let sc = load_scenario_str(&text, None).unwrap();
        for (from, to, want) in [(0u32, 1u32, on_board), (1, 2, off_board)] {
            let mut plan = reducelab_sched::Plan::new("one", 16, 1, None);
            plan.push_step(vec![reducelab_sched::PlanMsg { from, to, port: reducelab_sched::plan::NO_PORT, blocks: 1 }]);
            let r = reducelab_flow::run_plan(&sc.topology, &plan, bytes, 1, &reducelab_sim::scenario::flow_config(&sc.net, &sc.endpoint)).unwrap();
            assert_eq!(r.runtime_ps, want, "flow {from} -> {to}");
        }
    }
    // Unset: the board links are the switch links (today's topology).
    let same = |extra: &str| {
        let t = format!("name = \"b\"\n[topology]\nshape = \"hammingmesh:2x2,2x2\"\nbandwidth_gbps = {bw}\nlatency_ns = {lat}\n{extra}[[traffic]]\nkind = \"messages\"\nlist = [[0, 1, {bytes}, 0]]\n");
        run(&t).summary_json
    };
    assert_eq!(same(""), same(&format!("board_bandwidth_gbps = {bw}\nboard_latency_ns = {lat}\n")));
    let err = load_scenario_str(
        &format!("name = \"b\"\n{FAT_TREE}board_bandwidth_gbps = 10\n[[traffic]]\nkind = \"permutation\"\nbytes = 1\n"),
        None,
    )
    .err()
    .expect("rejected");
    assert_eq!(err.field, "topology.board_bandwidth_gbps");
    let err = load_scenario_str(
        "name = \"b\"\n[topology]\nshape = \"hammingmesh:2x2,2x2\"\nboard_bandwidth_gbps = -3\n\
         [[traffic]]\nkind = \"permutation\"\nbytes = 1\n",
        None,
    )
    .err()
    .expect("rejected");
    assert_eq!(err.field, "topology.board_bandwidth_gbps");
}

/// summary.json's `all_mean_utilization` is the mean of every links.csv row, and
/// `network_mean_utilization` the mean of its `network` rows; host rows are the host links.
#[test]
fn utilisation_over_all_links_and_over_network_links() {
    for topo in [FAT_TREE.to_string(), "[topology]\nshape = \"hammingmesh:2x2,2x2\"\n".to_string()] {
        let out = run(&format!("name = \"u\"\n{topo}[[traffic]]\nkind = \"permutation\"\nbytes = 300000\n[[traffic]]\nkind = \"random_permutation\"\nhosts = [0, 3, 6, 9, 12]\nbytes = 20000\n"));
        let s = summary(&out);
        let csv = file(&out, "links.csv");
        let header: Vec<&str> = csv.lines().next().unwrap().split(',').collect();
        let (ui, ki) = (
            header.iter().position(|&h| h == "utilization").unwrap(),
            header.iter().position(|&h| h == "kind").unwrap(),
        );
        let rows: Vec<(f64, String)> = csv
            .lines()
            .skip(1)
            .map(|l| {
                let c: Vec<&str> = l.split(',').collect();
                (c[ui].parse().unwrap(), c[ki].to_string())
            })
            .collect();
        let mean = |v: &[f64]| v.iter().sum::<f64>() / v.len() as f64;
        let all: Vec<f64> = rows.iter().map(|r| r.0).collect();
        let net: Vec<f64> = rows.iter().filter(|r| r.1 == "network").map(|r| r.0).collect();
        let hosts = rows.iter().filter(|r| r.1 == "host").count();
        assert!(rows.iter().all(|r| r.1 == "host" || r.1 == "network"));
        let l = &s["links"];
        assert!((l["all_mean_utilization"].as_f64().unwrap() - mean(&all)).abs() < 1e-6);
        assert!((l["network_mean_utilization"].as_f64().unwrap() - mean(&net)).abs() < 1e-6);
        assert_eq!(l["all_mean_utilization"], l["mean_utilization"]);
        let nhosts = s["topology"]["hosts"].as_u64().unwrap() as usize;
        if topo.contains("fat_tree") {
            assert_eq!(hosts, 2 * nhosts, "one host link per host, two directions");
            assert!(l["all_mean_utilization"] != l["network_mean_utilization"]);
        } else {
            assert_eq!(hosts, 0, "a direct network has no host links");
            assert_eq!(l["all_mean_utilization"], l["network_mean_utilization"]);
        }
    }
}

/// The permutation draw itself, over 3000 random host sets (2 to 200 hosts, any ids) and
/// streams: a permutation of the set with no fixed point.
#[test]
fn every_draw_is_a_derangement_of_the_set() {
    let mut rng = Rng::new(99);
    for case in 0..3000 {
        let n = 2 + rng.below(199) as usize;
        let mut ids: Vec<u32> = (0..1000).collect();
        rng.shuffle(&mut ids);
        let hosts = &ids[..n];
        let perm = reducelab_sim::workload::derangement(&mut rng.fork(case), hosts);
        let map: BTreeMap<u32, u32> = hosts.iter().copied().zip(perm.iter().copied()).collect();
        assert_derangement(&map, hosts, &format!("case {case} ({n} hosts)"));
    }
}

/// Multi-packet messages on paths that mix board and switch links of different speeds: the
/// flow backend's contention-free recurrence (a flow shop) takes exactly the packet engine's
/// time for a lone message, on every pair of hosts, with board links faster and slower than
/// the switch links; the event-driven stages stay within one MTU on the slowest link.
#[test]
fn mixed_speed_paths_take_the_same_time_at_flow_and_packet_level() {
    for board_gbps in [400u64, 25] {
        let text = |list: &str| {
            format!("name = \"m\"\n[topology]\nshape = \"hammingmesh:2x2,2x2\"\nbandwidth_gbps = 100\nlatency_ns = 500\nboard_bandwidth_gbps = {board_gbps}\nboard_latency_ns = 20\n[network]\nswitch_latency_ns = 300\nrouting = \"minimal\"\nbuffer_bytes = 1048576\n[[traffic]]\nkind = \"messages\"\nlist = {list}\n")
        };
        let sc = load_scenario_str(&text("[[0, 1, 1, 0]]"), None).unwrap();
        let cfg = reducelab_sim::scenario::flow_config(&sc.net, &sc.endpoint);
        let mut checked = 0;
        for bytes in [1000u64, 4032 * 3 + 100, 50_000] {
            for from in 0..16u32 {
                for to in (0..16u32).filter(|&t| t != from) {
                    let m = messages(&run(&text(&format!("[[{from}, {to}, {bytes}, 0]]"))));
                    let packet = m[0].4.expect("delivered");
                    let mut plan = reducelab_sched::Plan::new("one", 16, 1, None);
                    plan.push_step(vec![reducelab_sched::PlanMsg {
                        from,
                        to,
                        port: reducelab_sched::plan::NO_PORT,
                        blocks: 1,
                    }]);
                    let rec = reducelab_flow::run_plan(&sc.topology, &plan, bytes, 1, &cfg).unwrap();
                    let sim = reducelab_flow::run_plan_simulated(&sc.topology, &plan, bytes, 1, &cfg).unwrap();
                    assert!(
                        rec.runtime_ps.abs_diff(packet) <= 2,
                        "board {board_gbps} Gb/s, {bytes} B {from} -> {to}: recurrence {} vs packet {packet}",
                        rec.runtime_ps
                    );
                    // The stages are fluid (a stage may run ahead of its upstream's packets): on
                    // mixed speeds they stay within one MTU's serialisation on the slowest link.
                    let mtu_slowest = SimDuration::serialization(4096, board_gbps.min(100) * 1_000_000_000).ps();
                    assert!(
                        sim.runtime_ps.abs_diff(packet) <= mtu_slowest,
                        "board {board_gbps} Gb/s, {bytes} B {from} -> {to}: stages {} vs packet {packet}",
                        sim.runtime_ps
                    );
                    checked += 1;
                }
            }
        }
        assert_eq!(checked, 3 * 240);
    }
}
