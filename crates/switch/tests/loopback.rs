//! The software switch on loopback: switch processes of this crate's binary, hosts as threads
//! of the test, only 127.0.0.0/8, every run bounded by the hosts' timeout and every process
//! stopped (SIGTERM, then reaped) by the test that started it.
//!
//! Each test uses its own 127.77.K.0/24 block of addresses so tests can run in parallel.

use std::net::Ipv4Addr;
use std::process::Command;
use std::time::Duration;

use reducelab_switch::{run_host, udp, HostOptions, HostReport, InaPlan};
use serde_json::Value;

mod common;
use common::{spawn_switch, Proc, Setup, BIN};

impl Setup {
    fn new(name: &str, block: u8, text: String) -> Setup {
        Setup::at(name, Ipv4Addr::new(127, 77, block, 1), text)
    }

    fn plan(&self) -> InaPlan {
        InaPlan::from_scenario(&self.text, None, (self.ip, 47000)).unwrap()
    }

    fn switches(&self, extra: &[&str]) -> Vec<Proc> {
        self.plan().switches().into_iter().map(|s| self.switch(s, extra)).collect()
    }
}

fn hosts(plan: &InaPlan, timeout_s: f64) -> Vec<Result<HostReport, String>> {
    let opts = HostOptions { timeout: Duration::from_secs_f64(timeout_s), ..HostOptions::default() }
        .for_threads(plan.hosts().len());
    std::thread::scope(|s| {
        let hs: Vec<_> = plan
            .hosts()
            .into_iter()
            .map(|h| {
                let o = &opts;
                s.spawn(move || run_host(plan, h, o))
            })
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    })
}

/// Every host finished, and every result equalled the exact sum (the agents check each
/// block's fingerprint and all its element values on arrival).
fn assert_verified(rs: &[Result<HostReport, String>], n: usize) -> Vec<HostReport> {
    let ok: Vec<HostReport> = rs.iter().map(|r| r.clone().unwrap_or_else(|e| panic!("{e}"))).collect();
    assert_eq!(ok.len(), n);
    for r in &ok {
        for c in &r.collectives {
            assert!(c.verified && c.stats.bad_blocks == 0 && c.finished_s.is_some(), "host {}: {c:?}", r.host);
        }
    }
    ok
}

fn clean_data_plane(sw: &Value) {
    let d = &sw["data_plane"];
    for k in ["malformed", "foreign", "unroutable", "unencodable"] {
        assert_eq!(d[k], 0, "switch {}: {k} in {d}", sw["node"]);
    }
}

/// A scenario of `hosts` hosts on `topology`, one allreduce of `bytes` with `protocol`.
/// Timers are far beyond any scheduling delay of a loaded machine (switch timeout 10 s,
/// retransmission 5 s), so in a run without faults none fires and the counters depend on the
/// protocol alone; tests with faults shorten them with [`fast_timers`].
fn scenario(topology: &str, protocol: &str, bytes: u64, extra: &str) -> String {
    let info = reducelab_ina::protocol(protocol).unwrap();
    let rto = if info.params.iter().any(|p| p.key == "retransmit_timeout_us") {
        "retransmit_timeout_us = 5000000\n"
    } else {
        ""
    };
    format!(
        "name = \"switch-test\"\nseed = 3\n[topology]\n{topology}\nbandwidth_gbps = 100\nlatency_ns = 500\n[ina]\ntimeout_ns = 10000000000\nreclaim_us = 30000000\n\
         [[traffic]]\nkind = \"ina_allreduce\"\nhosts = \"all\"\nbytes = {bytes}\nprotocol = \"{protocol}\"\n{rto}{extra}"
    )
}

/// Canary timers for runs with faults: recovery within tens of milliseconds.
fn fast_timers(text: String) -> String {
    let t = text
        .replace("retransmit_timeout_us = 5000000", "retransmit_timeout_us = 20000")
        .replace("timeout_ns = 10000000000", "timeout_ns = 5000000");
    assert!(t.contains("retransmit_timeout_us = 20000") && t.contains("timeout_ns = 5000000"));
    t
}

fn fast_timers_if_canary(text: String) -> String {
    if text.contains("retransmit_timeout_us") {
        fast_timers(text)
    } else {
        text.replace("timeout_ns = 10000000000", "timeout_ns = 5000000")
    }
}

const STAR4: &str = "kind = \"star\"\nhosts = 4";

/// The registered protocols the software switch runs (every one on main: a protocol refuses
/// through `InaProtocol::software_switch` only if its packets cannot travel in a frame).
fn wire_protocols() -> impl Iterator<Item = &'static reducelab_ina::ProtocolInfo> {
    reducelab_ina::PROTOCOLS.iter().filter(|p| (p.build)(&Default::default()).unwrap().software_switch().is_ok())
}

/// Those that reduce application vectors (dense values; the sparse ones carry their own
/// payload and reduce the synthetic sparse vectors of their scenario keys).
fn dense_protocols() -> impl Iterator<Item = &'static reducelab_ina::ProtocolInfo> {
    wire_protocols().filter(|p| !(p.build)(&Default::default()).unwrap().carries_payload())
}

const SPARSE: [&str; 3] = ["flare_sparse", "sparcml", "sparcml_split"];

#[test]
fn every_registered_protocol_is_planned_and_sparse_ones_refuse_application_vectors() {
    assert_eq!(wire_protocols().count(), reducelab_ina::PROTOCOLS.len(), "the software switch serves every protocol");
    for p in SPARSE {
        assert!(dense_protocols().all(|d| d.name != p), "{p} carries a payload of its own");
        let plan =
            InaPlan::from_scenario(&scenario(STAR4, p, 32 << 10, ""), None, ("127.0.0.1".parse().unwrap(), 40000))
                .unwrap();
        let e = reducelab_switch::allreduce_data(&plan, 0, &HostOptions::default(), 0, vec![1; 8192]).unwrap_err();
        assert!(e.starts_with(&format!("protocol: {p} reduces its own sparse vectors")), "{p}: {e}");
    }
    // The largest sparse packet a scenario allows (2048 elements: up to 2048 pairs of a dense
    // run, 16 404 payload bytes) fits one datagram.
    let big = scenario(STAR4, "flare_sparse", 1 << 20, "elements_per_packet = 2048\n")
        .replace("[ina]\n", "[network]\nmtu_bytes = 9216\n[ina]\nmax_elements_per_packet = 2048\n");
    let plan = InaPlan::from_scenario(&big, None, ("127.0.0.1".parse().unwrap(), 40000)).unwrap();
    assert_eq!(plan.specs[0].protocol.max_payload_bytes(&plan.colls[0]), 20 + 8 * 2048);
}

#[test]
fn every_registered_protocol_reduces_exactly_through_one_switch_process() {
    for (i, p) in wire_protocols().enumerate() {
        let s = Setup::new(&format!("star-{}", p.name), 10 + i as u8, scenario(STAR4, p.name, 32 << 10, ""));
        let plan = s.plan();
        let sw = s.switches(&[]);
        let rs = hosts(&plan, 10.0);
        let reports: Vec<Value> = sw.into_iter().map(Proc::stop).collect();
        assert_verified(&rs, 4);
        clean_data_plane(&reports[0]);
        if reports[0]["program"].is_null() {
            // Host-based (SparCML): the switch forwards only.
            assert!(plan.programs().unwrap().iter().all(|p| p.is_none()), "{}", p.name);
            assert!(
                reports[0]["data_plane"]["rx_packets"].as_u64().unwrap() > 0,
                "{}: nothing went through the switch",
                p.name
            );
            continue;
        }
        assert!(
            reports[0]["program"]["aggregated"].as_u64().unwrap() > 0,
            "{}: the switch aggregated nothing: {}",
            p.name,
            reports[0]
        );
        // Nothing held but the results a protocol keeps to answer re-sends (the running switch
        // is never told the collective ended).
        let prog = &reports[0]["program"];
        assert_eq!(prog["descriptors_left"], prog["kept_results"], "{}", p.name);
    }
}

/// The simulator is the oracle: the same scenario gives the same verified results (both sides
/// check every element against the exact sum of the same seeded contributions) and, with
/// timers that never fire first, the same protocol counters in the switch and the hosts.
#[test]
fn the_simulator_and_the_software_switch_agree_on_a_star() {
    for (i, protocol) in ["canary", "static_trees"].iter().enumerate() {
        // No timer fires (see `scenario`): with a 100 ms retransmission timeout, a host
        // descheduled that long under a parallel test run made a leader re-issue a block.
        let text = scenario(STAR4, protocol, 64 << 10, "");
        let sim = reducelab_sim::run_scenario_str(&text, &reducelab_sim::RunOptions::default()).unwrap();
        let summary: Value = serde_json::from_str(&sim.summary_json).unwrap();
        let t = &summary["traffic"][0];
        assert_eq!(t["verified"], 4, "simulator: {t}");
        assert_eq!(t["values_checked"], true);
        let s = Setup::new(&format!("oracle-{protocol}"), 20 + i as u8, text);
        let plan = s.plan();
        let sw = s.switches(&[]);
        let rs = hosts(&plan, 10.0);
        let report = sw.into_iter().map(Proc::stop).next().unwrap();
        let ok = assert_verified(&rs, 4);
        let ina = &summary["ina"];
        let prog = &report["program"];
        for k in [
            "aggregated",
            "flushed",
            "stragglers",
            "collisions",
            "broadcasts_without_descriptor",
            "restorations",
            "reclaimed",
            "descriptors_left",
        ] {
            assert_eq!(prog[k], ina[k], "{protocol}: switch counter {k}: software {prog} vs simulator {ina}");
        }
        // Every host counter, summed over the hosts as the simulator reports them.
        let mut hs = reducelab_ina::host::HostStats::default();
        ok.iter().for_each(|r| hs.accumulate(&r.collectives[0].stats));
        assert_eq!(serde_json::to_value(&hs).unwrap(), t["host_stats"], "{protocol}: host counters");
        assert!(hs.sent_reduce > 0 && hs.retx_requests == 0, "{protocol}: {hs:?}");
    }
}

#[test]
fn a_two_level_fat_tree_of_switch_processes_reduces_exactly() {
    let topo = "kind = \"fat_tree_2\"\nleaves = 2\nhosts_per_leaf = 2\nspines = 2";
    for (i, protocol) in ["canary", "static_trees"].iter().enumerate() {
        // A leaf sees only its own hosts' contributions, so Canary's switches flush on their
        // timeout here, which must be well below the hosts' retransmission timeout.
        let s = Setup::new(
            &format!("fat-{protocol}"),
            30 + i as u8,
            fast_timers_if_canary(scenario(topo, protocol, 32 << 10, "")),
        );
        let plan = s.plan();
        assert_eq!(plan.switches().len(), 4, "two leaves and two spines, one process each");
        let sw = s.switches(&[]);
        let rs = hosts(&plan, 10.0);
        let reports: Vec<Value> = sw.into_iter().map(Proc::stop).collect();
        assert_verified(&rs, 4);
        reports.iter().for_each(clean_data_plane);
        // Packets crossed the spines: leaves alone cannot join the two halves.
        let spine_rx: u64 =
            reports.iter().filter(|r| r["ports"] == 2).map(|r| r["data_plane"]["rx_packets"].as_u64().unwrap()).sum();
        assert!(spine_rx > 0, "{protocol}: no packet went through a spine: {reports:?}");
    }
}

#[test]
fn canary_recovers_exactly_from_loss_duplication_and_reordering_in_the_switch() {
    let text = fast_timers(scenario(STAR4, "canary", 32 << 10, ""));
    let s = Setup::new("faults", 40, text);
    let plan = s.plan();
    let sw = s.switches(&["--fault", "loss=0.05,dup=0.05,reorder=0.1,reorder_us=300", "--fault-seed", "9"]);
    let rs = hosts(&plan, 20.0);
    let report = sw.into_iter().map(Proc::stop).next().unwrap();
    let ok = assert_verified(&rs, 4);
    let d = &report["data_plane"];
    assert!(
        d["fault_dropped"].as_u64().unwrap() > 0
            && d["fault_duplicated"].as_u64().unwrap() > 0
            && d["fault_held"].as_u64().unwrap() > 0,
        "faults were injected: {d}"
    );
    let recovered: u64 =
        ok.iter().map(|r| r.collectives[0].stats.retx_requests + r.collectives[0].stats.duplicates).sum();
    assert!(recovered > 0, "the hosts saw the faults (requests or duplicates)");
}

/// SwitchML, ATP and DSA as allreduces: ranks re-send until their result comes (ATP's resend
/// clears the aggregator, DSA's notices bring the co-located PS's reminders), so every rank ends
/// with the exact sum whatever the switch drops, duplicates or holds back.
#[test]
fn shared_pool_allreduces_recover_exactly_from_loss_duplication_and_reordering_in_the_switch() {
    for (i, p) in ["switchml", "atp", "dsa"].iter().enumerate() {
        let text = fast_timers(scenario(STAR4, p, 32 << 10, ""));
        let s = Setup::new(&format!("pool-faults-{p}"), 46 + i as u8, text);
        let plan = s.plan();
        let sw = s.switches(&["--fault", "loss=0.05,dup=0.05,reorder=0.1,reorder_us=300", "--fault-seed", "9"]);
        let rs = hosts(&plan, 20.0);
        let report = sw.into_iter().map(Proc::stop).next().unwrap();
        let ok = assert_verified(&rs, 4);
        let d = &report["data_plane"];
        assert!(d["fault_dropped"].as_u64().unwrap() > 0, "{p}: faults were injected: {d}");
        let resent: u64 = ok.iter().map(|r| r.collectives[0].stats.retransmits_sent).sum();
        assert!(resent > 0, "{p}: the ranks re-sent what was lost");
    }
}

#[test]
fn a_protocol_without_loss_recovery_ends_with_the_reason_when_the_switch_drops() {
    let s = Setup::new("noretx", 41, scenario(STAR4, "static_trees", 32 << 10, ""));
    let plan = s.plan();
    let sw = s.switches(&["--fault", "loss=0.3"]);
    let rs = hosts(&plan, 1.0);
    drop(sw);
    let errs: Vec<String> = rs.into_iter().filter_map(|r| r.err()).collect();
    assert!(!errs.is_empty(), "30% loss without recovery cannot finish");
    for e in &errs {
        assert!(
            e.contains("timed out after 1.0 s")
                && e.contains("blocks missing")
                && e.contains("static_trees has no loss recovery"),
            "{e}"
        );
    }
}

#[test]
fn canary_finishes_exactly_when_its_switch_crashes_mid_run_and_restarts() {
    let text = fast_timers(scenario(STAR4, "canary", 64 << 10, ""));
    let s = Setup::new("restart", 42, text);
    let plan = s.plan();
    // The switch dies (exit 3, no report) after 60 of the run's ~250 packets; the test
    // restarts it 50 ms later with empty descriptor tables.
    let mut first = s.switch(4, &["--exit-after-rx", "60"]);
    let (rs, second) = std::thread::scope(|sc| {
        let h = sc.spawn(|| hosts(&plan, 20.0));
        let status = first.child.wait().unwrap();
        assert_eq!(status.code(), Some(3), "the injected crash");
        std::thread::sleep(Duration::from_millis(50));
        let second = s.switch(4, &[]);
        (h.join().unwrap(), second)
    });
    let report = second.stop();
    let ok = assert_verified(&rs, 4);
    assert!(report["data_plane"]["rx_packets"].as_u64().unwrap() > 0, "the restarted switch carried the rest");
    let retx: u64 = ok.iter().map(|r| r.collectives[0].stats.retx_requests).sum();
    assert!(retx > 0, "blocks lost in the crash were recovered by the hosts");
}

#[test]
fn hosts_without_a_switch_end_with_a_timeout_naming_what_is_missing() {
    let s = Setup::new("noswitch", 43, scenario(STAR4, "canary", 8 << 10, ""));
    let plan = s.plan();
    let rs = hosts(&plan, 0.5);
    for r in rs {
        let e = r.unwrap_err();
        assert!(e.contains("timed out after 0.5 s") && e.contains("of 8 blocks missing"), "{e}");
    }
}

#[test]
fn the_switch_counts_and_drops_malformed_and_foreign_datagrams() {
    let s = Setup::new("garbage", 44, scenario(STAR4, "canary", 8 << 10, ""));
    let plan = s.plan();
    let mut sw = reducelab_switch::Switch::bind(&plan, 4, Default::default()).unwrap();
    let peer = std::net::SocketAddr::V4(plan.endpoints.of(0, 0));
    sw.receive(0, peer, &[1, 2, 3]);
    sw.receive(0, peer, &[0xFF; 40]);
    sw.receive(0, std::net::SocketAddr::V4(plan.endpoints.of(1, 0)), &[0; 40]);
    assert_eq!((sw.counters().malformed, sw.counters().foreign), (2, 1));
}

#[test]
fn bad_plans_are_refused_with_the_field() {
    let ip = Ipv4Addr::new(127, 77, 50, 1);
    let e = InaPlan::from_scenario(&scenario(STAR4, "canary", 1024, ""), None, (Ipv4Addr::new(10, 0, 0, 1), 47000))
        .err()
        .unwrap();
    assert!(e.starts_with("ip_base:") && e.contains("127.0.0.0/8"), "{e}");
    let e = InaPlan::from_scenario(&scenario(STAR4, "canary", 1024, ""), None, (ip, 65534)).err().unwrap();
    assert!(e.starts_with("port_base:"), "{e}");
    let e = InaPlan::from_scenario(
        &scenario(STAR4, "canary", 1024, "").replace("\"canary\"", "\"nope\""),
        None,
        (ip, 47000),
    )
    .err()
    .unwrap();
    assert!(e.contains("protocol"), "{e}");
    let plan = InaPlan::from_scenario(&scenario(STAR4, "canary", 1024, ""), None, (ip, 47000)).unwrap();
    assert!(plan.check_switch(0).unwrap_err().contains("is a host"));
    assert!(plan.check_switch(99).unwrap_err().starts_with("node:"));
}

#[test]
fn endpoints_files_place_each_node_and_bad_ones_are_refused_with_the_line_and_field() {
    use reducelab_switch::EndpointSpec;
    let text = scenario(STAR4, "canary", 1024, "");
    // Node 4 is the switch (4 ports), nodes 0-3 the hosts (1 port each).
    let good = "# node address:port_base\n4 127.77.51.9:40000\n0 127.77.51.1:41000 # a host\n\n1 127.77.51.1:41001\n2 10.1.2.3:5000\n3 127.77.51.4:41000\n";
    let map = |t: &str| EndpointSpec::Map { path: "ep.txt".into(), text: t.into() };
    let plan = InaPlan::from_scenario(&text, None, map(good)).unwrap();
    assert_eq!(plan.endpoints.of(4, 3).to_string(), "127.77.51.9:40003");
    assert_eq!(plan.endpoints.of(1, 0).to_string(), "127.77.51.1:41001");
    assert_eq!(plan.endpoints.of(2, 0).to_string(), "10.1.2.3:5000", "any unicast address, through a file");
    let err = |t: &str| InaPlan::from_scenario(&text, None, map(t)).err().expect("refused");
    let e = err(&good.replace("3 127.77.51.4:41000\n", ""));
    assert!(e.contains("ep.txt") && e.contains("node 3 is missing"), "{e}");
    let e = err(&good.replace("3 127.77.51.4:41000", "3 127.77.51.4:41000\n3 127.77.51.5:41000"));
    assert!(e.contains("line 8") && e.contains("node: 3 is listed twice"), "{e}");
    let e = err(&good.replace("2 10.1.2.3:5000", "9 10.1.2.3:5000"));
    assert!(e.contains("line 6: node: 9 is not a node of the topology (5 nodes)"), "{e}");
    let e = err(&good.replace("2 10.1.2.3:5000", "2 10.1.2.3"));
    assert!(e.contains("line 6: address: `10.1.2.3` is not IPV4:PORT"), "{e}");
    let e = err(&good.replace("2 10.1.2.3:5000", "2 224.0.0.1:5000"));
    assert!(e.contains("line 6: address: 224.0.0.1 is not a unicast address"), "{e}");
    let e = err(&good.replace("4 127.77.51.9:40000", "4 127.77.51.9:65533"));
    assert!(e.contains("line 2: address: port base 65533 + 4 ports"), "{e}");
    let e = err(&good.replace("4 127.77.51.9:40000", "4 127.77.51.1:40998"));
    assert!(e.contains("nodes 4 and 0 both use ports of 127.77.51.1 from 41000"), "{e}");
    let e = err(&good.replace("2 10.1.2.3:5000", "2 10.1.2.3:5000 extra"));
    assert!(e.contains("line 6: `2 10.1.2.3:5000 extra` is not `NODE ADDRESS:PORT_BASE`"), "{e}");
    assert!(EndpointSpec::parse("file:/nonexistent/ep.txt")
        .unwrap_err()
        .starts_with("endpoints: /nonexistent/ep.txt:"));
    assert!(EndpointSpec::parse("127.0.0.1").unwrap_err().contains("neither IP_BASE:PORT_BASE nor file:PATH"));
    assert_eq!(
        EndpointSpec::parse("127.0.0.9:4000").unwrap(),
        EndpointSpec::Loopback(Ipv4Addr::new(127, 0, 0, 9), 4000)
    );
}

#[test]
fn a_fat_tree_placed_by_an_endpoints_file_reduces_exactly() {
    // Not the ip_base + n layout: nodes share addresses at different port bases, in no order.
    let topo = "kind = \"fat_tree_2\"\nleaves = 2\nhosts_per_leaf = 2\nspines = 2";
    let s = Setup::new("fat-endpoints", 52, fast_timers_if_canary(scenario(topo, "canary", 32 << 10, "")));
    let nodes = s.plan().fabric.nodes.len() as u32;
    let lines: Vec<String> =
        (0..nodes).map(|n| format!("{n} 127.77.52.{}:{}", 1 + n % 3, 45000 + 100 * (nodes - n))).collect();
    let ep = s.path.with_extension("endpoints");
    std::fs::write(&ep, lines.join("\n")).unwrap();
    let plan = InaPlan::from_scenario(
        &s.text,
        None,
        reducelab_switch::EndpointSpec::parse(&format!("file:{}", ep.display())).unwrap(),
    )
    .unwrap();
    let sw: Vec<Proc> = plan
        .switches()
        .into_iter()
        .map(|node| spawn_switch(&s.path, node, &["--endpoints", ep.to_str().unwrap()]))
        .collect();
    let rs = hosts(&plan, 10.0);
    let reports: Vec<Value> = sw.into_iter().map(Proc::stop).collect();
    assert_verified(&rs, 4);
    reports.iter().for_each(clean_data_plane);
    // --endpoints and --ip-base together are refused.
    let out = Command::new(BIN)
        .args([
            "plan",
            "--scenario",
            s.path.to_str().unwrap(),
            "--endpoints",
            ep.to_str().unwrap(),
            "--ip-base",
            "127.0.0.1",
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr)
        .contains("--endpoints: give either an endpoints file or --ip-base/--port-base, not both"));
}

#[test]
fn a_switch_process_survives_garbage_and_oversized_datagrams_from_a_peer() {
    let s = Setup::new("garbage-proc", 45, scenario(STAR4, "canary", 8 << 10, ""));
    let plan = s.plan();
    let sw = s.switch(4, &[]);
    let host0 = std::net::UdpSocket::bind(plan.endpoints.of(0, 0)).unwrap();
    let port0 = plan.endpoints.of(4, 0);
    host0.send_to(&[7; 5], port0).unwrap();
    host0.send_to(&vec![0xAB; 60000], port0).unwrap();
    // A restoration naming bitmap shard 5 of 2 (the parser shifted by 160 bits: a panic in a
    // debug build before `wire::WireHeader::decode` refused it).
    let mut restore = vec![0x80, 0, 0, 4, 0, 0, 0, 1, 0, 1, 0, 4, 0, 0, 0, 1, 0, 4, 0x40 | 2 << 3 | 5];
    restore.extend_from_slice(&[0; 8]);
    host0.send_to(&restore, port0).unwrap();
    let stranger =
        std::net::UdpSocket::bind(std::net::SocketAddrV4::new(Ipv4Addr::new(127, 77, 45, 200), 47000)).unwrap();
    stranger.send_to(&[0; 40], port0).unwrap();
    std::thread::sleep(Duration::from_millis(100));
    let r = sw.stop();
    let d = &r["data_plane"];
    assert_eq!(
        (d["rx_packets"].as_u64(), d["malformed"].as_u64(), d["foreign"].as_u64(), d["tx_packets"].as_u64()),
        (Some(4), Some(3), Some(1), Some(0)),
        "{d}"
    );
}

/// Application vectors (any i32, so sums wrap) through every protocol, and through Canary
/// under loss and duplication: each host gets exactly the element-wise wrapping sum.
#[test]
fn application_vectors_are_reduced_exactly() {
    let cases: Vec<(String, &str, Vec<&str>)> = dense_protocols()
        .map(|p| (p.name.to_string(), STAR4, vec![]))
        .chain([
            ("canary".to_string(), STAR4, vec!["--fault", "loss=0.03,dup=0.05,reorder=0.05"]),
            ("canary".to_string(), "kind = \"fat_tree_2\"\nleaves = 2\nhosts_per_leaf = 2\nspines = 2", vec![]),
        ])
        .collect();
    for (i, (protocol, topo, faults)) in cases.iter().enumerate() {
        let mut text = scenario(topo, protocol, 4 * 5000, "");
        if !faults.is_empty() || topo.contains("fat_tree") {
            text = fast_timers(text);
        }
        let s = Setup::new(&format!("app-{i}"), 60 + i as u8, text);
        let plan = s.plan();
        let sw = s.switches(faults);
        let n = plan.hosts().len();
        let data: Vec<Vec<i32>> =
            (0..n as u64).map(|r| (0..5000u64).map(|e| reducelab_ina::mix(r << 32 | e) as i32).collect()).collect();
        let sum: Vec<i32> = (0..5000).map(|e| data.iter().fold(0i32, |a, d| a.wrapping_add(d[e]))).collect();
        let opts = HostOptions { timeout: Duration::from_secs(20), ..HostOptions::default() }.for_threads(n);
        let rs: Vec<_> = std::thread::scope(|sc| {
            let hs: Vec<_> = plan
                .hosts()
                .into_iter()
                .map(|h| {
                    let (p, o, d) = (&plan, &opts, data[h as usize].clone());
                    sc.spawn(move || reducelab_switch::allreduce_data(p, h, o, 0, d))
                })
                .collect();
            hs.into_iter().map(|h| h.join().unwrap()).collect()
        });
        drop(sw);
        for (h, r) in rs.into_iter().enumerate() {
            let (report, got) = r.unwrap_or_else(|e| panic!("{protocol} {faults:?}: {e}"));
            assert!(report.collectives[0].verified, "{protocol}: host {h}: fingerprints");
            assert!(
                got == sum,
                "{protocol} {faults:?}: host {h}: result differs from the exact sum at element {:?}",
                got.iter().zip(&sum).position(|(a, b)| a != b)
            );
        }
    }
}

#[test]
fn application_vectors_of_the_wrong_length_are_refused() {
    let s = Setup::new("app-len", 70, scenario(STAR4, "canary", 4 * 100, ""));
    let plan = s.plan();
    let e = reducelab_switch::allreduce_data(&plan, 0, &HostOptions::default(), 0, vec![1; 99]).unwrap_err();
    assert!(e.starts_with("data: 99 elements") && e.contains("reduces 100"), "{e}");
    let e = reducelab_switch::allreduce_data(&plan, 0, &HostOptions::default(), 1, vec![1; 100]).unwrap_err();
    assert!(e.starts_with("tenant:"), "{e}");
}

/// The fault model alone (in this test binary rather than as unit tests: one release link of
/// the crate's test targets fewer, which is most of their build time).
mod fault_model {
    use reducelab_switch::faults::*;

    #[test]
    fn fault_specs_parse_and_bad_ones_name_the_key() {
        let (p, f) = parse_fault("port=3,loss=0.1,dup=0.2,reorder=0.5,reorder_us=50,delay_us=7").unwrap();
        assert_eq!(p, Some(3));
        assert_eq!(
            f,
            PortFaults { loss: 0.1, dup: 0.2, reorder: 0.5, reorder_us: 50.0, delay_us: 7.0, ..PortFaults::default() }
        );
        assert!(parse_fault("loss=1.5").unwrap_err().contains("loss"));
        assert!(parse_fault("jitter=1").unwrap_err().contains("unknown key `jitter`"));
        assert!(parse_fault("loss").unwrap_err().contains("key=value"));
        assert!(parse_fault("loss=0.7,dup=0.5").unwrap_err().contains("exceed 1"));
    }

    #[test]
    fn fault_files_take_one_spec_per_line() {
        let v = parse_fault_file("f", "# all ports\nloss=0.1\n\nport=2,dup=0.5 # one port\n").unwrap();
        assert_eq!(v.len(), 2);
        assert_eq!(v[1].0, Some(2));
        assert_eq!(
            parse_fault_file("f", "loss=0.1\nloss=3\n").unwrap_err(),
            "f:2: --fault loss: probability 3 is not within 0..=1"
        );
    }

    #[test]
    fn fates_follow_the_rates_and_the_seed() {
        let rates =
            PortFaults { loss: 0.1, dup: 0.2, reorder: 0.3, reorder_us: 100.0, delay_us: 0.0, ..PortFaults::default() };
        let mut a = FaultPort::new(rates, 7, 1, 2);
        let fates: Vec<Fate> = (0..20000).map(|_| a.fate()).collect();
        let mut b = FaultPort::new(rates, 7, 1, 2);
        assert!(fates.iter().all(|f| *f == b.fate()), "same seed, same fates");
        let n = fates.len() as f64;
        let drops = fates.iter().filter(|f| **f == Fate::Drop).count() as f64 / n;
        let dups = fates.iter().filter(|f| matches!(f, Fate::Send { copies: 2, .. })).count() as f64 / n;
        let held = fates.iter().filter(|f| matches!(f, Fate::Send { hold, .. } if !hold.is_zero())).count() as f64 / n;
        assert!((drops - 0.1).abs() < 0.01, "{drops}");
        assert!((dups - 0.2).abs() < 0.01, "{dups}");
        assert!((held - 0.3 * 0.9).abs() < 0.015, "{held}");
        let mut c = FaultPort::new(rates, 8, 1, 2);
        assert!((0..64).any(|i| c.fate() != fates[i]), "another seed, other fates");
    }
}

/// The batched socket layer (`udp::TxQueue` runs of equal-sized frames as GSO buffers,
/// `udp::RxBatch` with GRO): frames of mixed sizes arrive as the same datagrams in the same
/// order, at a receiver that takes GRO buffers and at a plain socket the kernel splits them for;
/// with GSO on, the GRO receiver gets fewer messages than datagrams (the batching happened).
#[test]
fn batched_sends_arrive_as_the_same_datagrams_in_order_with_and_without_gro() {
    use reducelab_switch::udp;
    let ip = Ipv4Addr::new(127, 77, 90, 1);
    let sender = udp::bind(std::net::SocketAddrV4::new(ip, 47000)).unwrap();
    let gro_rx = udp::bind(std::net::SocketAddrV4::new(ip, 47001)).unwrap();
    let plain_rx = std::net::UdpSocket::bind(std::net::SocketAddrV4::new(ip, 47002)).unwrap();
    plain_rx.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
    // Room for the whole burst (the default buffer drops part of it: a datagram split out of
    // a GSO buffer is charged more than its bytes).
    let big: libc::c_int = udp::RCVBUF_BYTES;
    // SAFETY: a valid socket fd and a pointer to a c_int of the size passed.
    unsafe {
        use std::os::fd::AsRawFd;
        libc::setsockopt(
            plain_rx.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_RCVBUF,
            &big as *const libc::c_int as *const libc::c_void,
            4,
        );
    }
    // Runs of equal lengths, a shorter frame ending a run, a longer one starting the next, runs
    // longer than a GSO buffer's 64 segments, and single bytes.
    let lens: Vec<usize> = (0..300)
        .map(|i| match i % 100 {
            0..=69 => 1040,
            70 => 300,
            71..=80 => 1200,
            81 => 1,
            _ => 8 + i % 5,
        })
        .collect();
    let frames: Vec<Vec<u8>> =
        lens.iter().enumerate().map(|(i, &l)| (0..l).map(|k| (i * 7 + k) as u8).collect()).collect();
    let mut q = udp::TxQueue::default();
    for to in [47001, 47002] {
        for f in &frames {
            q.push(f);
        }
        let (sent, bytes, failed) = q.flush(&sender, std::net::SocketAddrV4::new(ip, to));
        assert_eq!((sent, bytes, failed), (300, lens.iter().sum::<usize>() as u64, 0));
    }
    let mut got = Vec::new();
    let mut messages = 0;
    let mut rx = udp::RxBatch::new(8);
    let deadline = std::time::Instant::now() + Duration::from_secs(2);
    while got.len() < frames.len() && std::time::Instant::now() < deadline {
        let n = rx.recv(&gro_rx);
        messages += n;
        for i in 0..n {
            let (from, datagrams) = rx.get(i);
            assert_eq!(from, std::net::SocketAddrV4::new(ip, 47000));
            got.extend(datagrams.map(|d| d.to_vec()));
        }
    }
    assert!(
        got == frames,
        "GRO receiver: {} datagrams, first difference at {:?}",
        got.len(),
        got.iter().zip(&frames).position(|(a, b)| a != b)
    );
    if udp::gso_enabled() {
        assert!(messages < frames.len() / 4, "{messages} messages for {} datagrams: no batching", frames.len());
    }
    let mut buf = vec![0u8; 65536];
    for (i, f) in frames.iter().enumerate() {
        let n = plain_rx.recv(&mut buf).unwrap_or_else(|e| panic!("plain receiver, datagram {i}: {e}"));
        assert_eq!(&buf[..n], &f[..], "plain receiver, datagram {i}");
    }
}

/// `Session` (the C ABI's and MPI runtime's host side): 4 ranks, each with its socket bound
/// once, make successive allreduces of different sizes (1 element, a partial block, several
/// blocks) through one running switch, int32 (exact wrapping sums) and f32 (bitwise the
/// fixed-point reference, and within its stated tolerance of the exact sum), all under the
/// tenant rotation that keeps one call's packets out of the next.
#[test]
fn sessions_reduce_successive_allreduces_of_any_size_exactly() {
    use reducelab_switch::session::FixedPoint;
    use reducelab_switch::Session;
    let s = Setup::new("session", 91, scenario(STAR4, "canary", 1024, ""));
    let _sw = s.switches(&[]);
    let opts = HostOptions { timeout: Duration::from_secs(20), linger: Duration::ZERO, ..HostOptions::default() };
    let mut sessions: Vec<Session> =
        (0..4).map(|r| Session::open(&s.text, (s.ip, 47000), 4, r, opts.clone()).unwrap()).collect();
    let sizes = [1usize, 100, 3 * 256 + 7, 5000];
    let ints: Vec<Vec<Vec<i32>>> = sizes
        .iter()
        .map(|&n| {
            (0..4u64)
                .map(|r| (0..n as u64).map(|e| reducelab_ina::mix(r << 40 | e << 8 | n as u64) as i32).collect())
                .collect()
        })
        .collect();
    // Magnitudes over 12 binades, both signs, zeros and a subnormal.
    let floats: Vec<Vec<Vec<f32>>> = sizes
        .iter()
        .map(|&n| {
            (0..4u64)
                .map(|r| {
                    (0..n as u64)
                        .map(|e| {
                            let m = reducelab_ina::mix(r << 40 | e << 8 | 1);
                            match m % 50 {
                                0 => 0.0,
                                1 => 1e-42,
                                _ => {
                                    ((m >> 8) % 1_000_000) as f32 / 1e3
                                        * 2f32.powi((m >> 40) as i32 % 12 - 6)
                                        * if m & 1 == 0 { 1.0 } else { -1.0 }
                                }
                            }
                        })
                        .collect()
                })
                .collect()
        })
        .collect();
    std::thread::scope(|sc| {
        let hs: Vec<_> = sessions
            .iter_mut()
            .enumerate()
            .map(|(r, sess)| {
                let (ints, floats) = (&ints, &floats);
                sc.spawn(move || {
                    let mut out = Vec::new();
                    for k in 0..sizes.len() {
                        let i = sess
                            .allreduce_i32(ints[k][r].clone())
                            .unwrap_or_else(|e| panic!("rank {r}, int call {k}: {e}"));
                        let f =
                            sess.allreduce_f32(&floats[k][r]).unwrap_or_else(|e| panic!("rank {r}, f32 call {k}: {e}"));
                        out.push((i, f));
                    }
                    out
                })
            })
            .collect();
        for (r, h) in hs.into_iter().enumerate() {
            for (k, (i, f)) in h.join().unwrap().into_iter().enumerate() {
                let want: Vec<i32> =
                    (0..sizes[k]).map(|e| ints[k].iter().fold(0i32, |a, v| a.wrapping_add(v[e]))).collect();
                assert!(i == want, "rank {r}, int call {k}: not the exact sum");
                let reference = FixedPoint::reference(&floats[k]);
                assert!(
                    f.iter().zip(&reference).all(|(a, b)| a.to_bits() == b.to_bits()),
                    "rank {r}, f32 call {k}: not bitwise the fixed-point reference"
                );
                let e = floats[k].iter().filter_map(|v| FixedPoint::max_exponent(v)).max().unwrap();
                let fx = FixedPoint::new(e, 4);
                for (j, &y) in f.iter().enumerate() {
                    let exact: f64 = floats[k].iter().map(|v| v[j] as f64).sum();
                    assert!(
                        (y as f64 - exact).abs() <= fx.tolerance(exact),
                        "rank {r}, f32 call {k}, element {j}: {y} vs exact {exact} (tolerance {})",
                        fx.tolerance(exact)
                    );
                }
            }
        }
    });
}

#[test]
fn a_session_names_the_missing_switch_and_refuses_bad_arguments() {
    use reducelab_switch::Session;
    let s = Setup::new("session-none", 92, scenario(STAR4, "canary", 1024, ""));
    let e = Session::open(&s.text, (s.ip, 47000), 4, 1, HostOptions::default()).err().unwrap();
    assert!(e.starts_with("no switch: nothing listens at 127.77.92.5:47001 (port 1 of switch node 4"), "{e}");
    assert!(Session::open(&s.text, (s.ip, 47000), 5, 0, HostOptions::default()).err().unwrap().starts_with("ranks: 5"));
    assert!(Session::open(&s.text, (s.ip, 47000), 4, 4, HostOptions::default()).err().unwrap().starts_with("rank: 4"));
    let e = Session::open(&scenario(STAR4, "flare_sparse", 1024, ""), (s.ip, 47000), 4, 0, HostOptions::default())
        .err()
        .unwrap();
    assert!(e.starts_with("protocol: flare_sparse's switch programs are built for the scenario's collectives"), "{e}");
    // Static trees and dense Flare serve sessions whose slots stay in step across the
    // sequence's wrap.
    for protocol in ["static_trees", "flare"] {
        let e = Session::open(
            &scenario(STAR4, protocol, 1024, "window = 24\n"),
            (s.ip, 47000),
            4,
            0,
            HostOptions::default(),
        )
        .err()
        .unwrap();
        assert!(e.starts_with("window: 24 is not a power of two"), "{protocol}: {e}");
    }
    let _sw = s.switches(&[]);
    let mut one = Session::open(&s.text, (s.ip, 47000), 1, 0, HostOptions::default()).unwrap();
    let e = one.allreduce_f32(&[1.0, f32::NAN]).err().unwrap();
    assert!(e.starts_with("data: element 1 is NaN"), "{e}");
}

/// Sessions (the C ABI's and the MPI path's) under 5% loss, 5% duplication and 10% reordering
/// on every port of the switch: 24 successive calls, every result the exact sum. A session's
/// coordinator moves on at its release, so a rank whose release is lost concludes it
/// (`HostProtocol::release_wait_ps`) instead of waiting for an answer that cannot come; before
/// that, such a rank gave up (about 3 of the 72 releases here are lost).
#[test]
fn sessions_under_loss_dup_and_reorder_reduce_every_call_exactly() {
    use reducelab_switch::Session;
    let s = Setup::new("session-faults", 93, fast_timers(scenario(STAR4, "canary", 1024, "")));
    let _sw = s.switches(&["--fault", "loss=0.05,dup=0.05,reorder=0.1,reorder_us=300", "--fault-seed", "7"]);
    let opts = HostOptions { timeout: Duration::from_secs(20), linger: Duration::ZERO, ..HostOptions::default() };
    let mut sessions: Vec<Session> =
        (0..4).map(|r| Session::open(&s.text, (s.ip, 47000), 4, r, opts.clone()).unwrap()).collect();
    let calls = 24u64;
    let data = |r: u64, k: u64| -> Vec<i32> {
        (0..(100 + 37 * k)).map(|e| reducelab_ina::mix(r << 40 | k << 20 | e) as i32).collect()
    };
    std::thread::scope(|sc| {
        let hs: Vec<_> = sessions
            .iter_mut()
            .enumerate()
            .map(|(r, sess)| {
                sc.spawn(move || {
                    (0..calls)
                        .map(|k| {
                            sess.allreduce_i32(data(r as u64, k)).unwrap_or_else(|e| panic!("rank {r}, call {k}: {e}"))
                        })
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        for (r, h) in hs.into_iter().enumerate() {
            for (k, got) in h.join().unwrap().into_iter().enumerate() {
                let k = k as u64;
                let want: Vec<i32> = (0..(100 + 37 * k) as usize)
                    .map(|e| (0..4).fold(0i32, |a, q| a.wrapping_add(data(q, k)[e])))
                    .collect();
                assert!(got == want, "rank {r}, call {k}: not the exact sum");
            }
        }
    });
}

/// Runs `calls` (every rank's int32 vector of each call) on `ranks` sessions (threads) through
/// the switch of `s`, each rank stopping at its first error; checks every rank's every result
/// against the exact wrapping sum.
fn run_session_calls(s: &Setup, ranks: u32, calls: &[Vec<Vec<i32>>], what: &str) {
    use reducelab_switch::Session;
    let opts = HostOptions { timeout: Duration::from_secs(20), linger: Duration::ZERO, ..HostOptions::default() };
    let mut sessions: Vec<Session> =
        (0..ranks).map(|r| Session::open(&s.text, (s.ip, 47000), ranks, r, opts.clone()).unwrap()).collect();
    let got: Vec<Vec<Vec<i32>>> = std::thread::scope(|sc| {
        let hs: Vec<_> = sessions
            .iter_mut()
            .enumerate()
            .map(|(r, sess)| {
                sc.spawn(move || {
                    calls
                        .iter()
                        .enumerate()
                        .map(|(k, v)| {
                            sess.allreduce_i32(v[r].clone())
                                .unwrap_or_else(|e| panic!("{what}: rank {r}, call {k}: {e}"))
                        })
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    });
    for (r, results) in got.iter().enumerate() {
        for (k, (res, v)) in results.iter().zip(calls).enumerate() {
            let want: Vec<i32> = (0..v[0].len()).map(|e| v.iter().fold(0i32, |a, x| a.wrapping_add(x[e]))).collect();
            assert!(
                res == &want,
                "{what}: rank {r}, call {k} ({} elements): differs from the exact sum at element {:?}",
                want.len(),
                res.iter().zip(&want).position(|(a, b)| a != b)
            );
        }
    }
}

/// Every rank's vector of each of these call sizes (any i32, so sums wrap).
fn call_vectors(ranks: u64, sizes: &[usize], seed: u64) -> Vec<Vec<Vec<i32>>> {
    sizes
        .iter()
        .enumerate()
        .map(|(k, &n)| {
            (0..ranks)
                .map(|r| {
                    (0..n as u64)
                        .map(|e| reducelab_ina::mix(seed << 56 | r << 48 | (k as u64) << 32 | e) as i32)
                        .collect()
                })
                .collect()
        })
        .collect()
}

/// The shared-pool protocols as in-network allreduces serve sessions: every call is the
/// scenario's allreduce with its PSNs numbered on from the last call's. SwitchML, through a
/// window of 4 slots per set, so its slots see one PSN sequence across calls; ATP and DSA with
/// a window of 8 packets, through hashed aggregators and rank 0's parameter server. Calls of
/// one element, of less than, exactly and just more than a window's blocks (256 elements
/// each), and of many windows, in an order that makes each call's first PSNs take over slots
/// of the previous one.
#[test]
fn shared_pool_allreduce_sessions_reduce_calls_of_any_size_exactly() {
    for (p, block) in [("switchml", 94), ("atp", 120), ("dsa", 121)] {
        let s = Setup::new(&format!("session-{p}"), block, scenario(STAR4, p, 1024, "window = 4\n"));
        let _sw = s.switches(&[]);
        let sizes = [1, 3 * 256 + 5, 4 * 256, 4 * 256 + 1, 1, 40 * 256 + 77, 2, 5000, 256, 9 * 256 + 255];
        run_session_calls(&s, 4, &call_vectors(4, &sizes, 1), p);
    }
}

/// The same under 5% loss, 5% duplication and 10% reordering on every port of the switch:
/// late and repeated packets of an earlier call (lower PSNs) are dropped by the switch or the
/// hosts, never added into a later call. SwitchML's lost results are answered from the
/// switch's kept copies; ATP's and DSA's by rank 0's parameter server, whose agent answers
/// after rank 0's call has returned (the session's host thread), and DSA's server fetches
/// contributions from ranks that have theirs.
#[test]
fn shared_pool_allreduce_sessions_reduce_exactly_under_loss_dup_and_reorder() {
    for (p, block) in [("switchml", 95), ("atp", 122), ("dsa", 123)] {
        let s =
            Setup::new(&format!("session-{p}-faults"), block, fast_timers(scenario(STAR4, p, 1024, "window = 4\n")));
        let sw = s.switches(&["--fault", "loss=0.05,dup=0.05,reorder=0.1,reorder_us=300", "--fault-seed", "5"]);
        let sizes: Vec<usize> = (0..24).map(|k| [1, 300, 1100, 3000][k % 4] + 37 * k).collect();
        run_session_calls(&s, 4, &call_vectors(4, &sizes, 2), &format!("{p} under faults"));
        let reports: Vec<Value> = sw.into_iter().map(Proc::stop).collect();
        let d = &reports[0]["data_plane"];
        assert!(
            d["fault_dropped"].as_u64().unwrap() > 0
                && d["fault_duplicated"].as_u64().unwrap() > 0
                && d["fault_held"].as_u64().unwrap() > 0,
            "{p}: faults were injected: {d}"
        );
        if p == "switchml" {
            // Lost results were answered from the switch's kept copies (to one rank each).
            assert!(reports[0]["program"]["stragglers"].as_u64().unwrap() > 0, "{}", reports[0]);
        }
    }
}

/// A SwitchML session's PSNs do not wrap (its switch takes a slot over only for a higher PSN):
/// a call that would pass the 2^20 PSNs the frames carry is refused on every rank before it
/// sends anything, and the session goes on with its next call.
#[test]
fn a_switchml_session_refuses_a_call_past_its_psn_space() {
    use reducelab_switch::Session;
    let s = Setup::new("session-switchml-end", 96, scenario(STAR4, "switchml", 1024, "elements_per_packet = 1\n"));
    let _sw = s.switches(&[]);
    let opts = HostOptions { timeout: Duration::from_secs(20), linger: Duration::ZERO, ..HostOptions::default() };
    let big = 1usize << 20;
    std::thread::scope(|sc| {
        let hs: Vec<_> = (0..4u32)
            .map(|r| {
                let (s, opts) = (&s, opts.clone());
                sc.spawn(move || {
                    let mut sess = Session::open(&s.text, (s.ip, 47000), 4, r, opts).unwrap();
                    assert_eq!(sess.allreduce_i32(vec![r as i32; 3]).unwrap(), vec![6; 3]);
                    let e = sess.allreduce_i32(vec![1; big]).unwrap_err();
                    assert!(
                        e.starts_with("count: this call's 1048576 blocks would pass block 1048576 of the session's sequence (its earlier calls used 3); switchml's switch takes a slot over only for a higher block number"),
                        "{e}"
                    );
                    assert_eq!(sess.allreduce_i32(vec![r as i32 + 1; 5]).unwrap(), vec![10; 5]);
                })
            })
            .collect();
        hs.into_iter().for_each(|h| h.join().unwrap());
    });
}

/// Frames emitted in place into a queue are queued, copied or dropped as asked and leave
/// in queue order, a run of equal sizes in one GSO message (two messages here: 15 bytes;
/// block 127.77.99.0/24, ephemeral ports).
#[test]
fn frames_built_in_place_are_queued_copied_or_dropped_and_leave_in_order() {
    let a = udp::bind("127.77.99.1:0".parse().unwrap()).unwrap();
    let b = udp::bind("127.77.99.1:0".parse().unwrap()).unwrap();
    let std::net::SocketAddr::V4(to) = b.local_addr().unwrap() else { panic!("not IPv4") };
    let mut q = udp::TxQueue::default();
    q.open().extend_from_slice(b"one");
    assert_eq!(q.pending(), b"one");
    q.commit(1);
    q.open().extend_from_slice(b"dropped");
    q.discard();
    assert_eq!(q.pending(), b"");
    q.open().extend_from_slice(b"two");
    q.commit(2);
    q.open().extend_from_slice(b"left pending"); // the next `open` drops it
    q.open().extend_from_slice(b"three!");
    q.commit(1);
    assert_eq!(q.len(), 4);
    assert_eq!(q.flush(&a, to), (4, 15, 0));
    assert!(q.is_empty());
    let mut rx = udp::RxBatch::new(8);
    let mut got: Vec<Vec<u8>> = Vec::new();
    let deadline = std::time::Instant::now() + Duration::from_secs(2);
    while got.len() < 4 && std::time::Instant::now() < deadline {
        for i in 0..rx.recv(&b) {
            got.extend(rx.get(i).1.map(|d| d.to_vec()));
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    assert_eq!(got, [&b"one"[..], b"two", b"two", b"three!"]);
}

/// The sparse protocols' keys for the tests: 64 elements (32 pairs) per packet, one value per
/// bucket of 64, half of them at an index the ranks share (sums merge; several blocks and
/// packets per block).
const SPARSE_KEYS: &str = "elements_per_packet = 64\nbucket_elements = 64\nindex_overlap = 0.5\n";

/// The simulator is the oracle for the sparse protocols too: on a star and on a two-level fat
/// tree (leaf hash tables under a spine's array), the same scenario gives results verified
/// pair by pair against the same exact sums on both sides, and the same counters: every
/// switch program's (summed over the switches, as `summary.json` reports them) and every
/// host's (summed over the hosts). The protocols are deterministic without timers: the
/// counters do not depend on arrival order.
#[test]
fn the_simulator_and_the_software_switch_agree_on_the_sparse_protocols() {
    let fat = "kind = \"fat_tree_2\"\nleaves = 2\nhosts_per_leaf = 2\nspines = 2";
    let mut block = 100;
    for topo in [STAR4, fat] {
        for protocol in SPARSE {
            let text = scenario(topo, protocol, 256 << 10, SPARSE_KEYS);
            let sim = reducelab_sim::run_scenario_str(&text, &reducelab_sim::RunOptions::default()).unwrap();
            let summary: Value = serde_json::from_str(&sim.summary_json).unwrap();
            let t = &summary["traffic"][0];
            assert_eq!(t["verified"], 4, "simulator {protocol}: {t}");
            block += 1;
            let s = Setup::new(&format!("oracle-{protocol}-{}", topo.len()), block, text);
            let plan = s.plan();
            let sw = s.switches(&[]);
            let rs = hosts(&plan, 15.0);
            let reports: Vec<Value> = sw.into_iter().map(Proc::stop).collect();
            let ok = assert_verified(&rs, 4);
            reports.iter().for_each(clean_data_plane);
            let ina = &summary["ina"];
            let programs: Vec<&Value> = reports.iter().map(|r| &r["program"]).filter(|p| !p.is_null()).collect();
            if protocol == "flare_sparse" {
                assert!(!programs.is_empty());
                for k in [
                    "aggregated",
                    "flushed",
                    "stragglers",
                    "collisions",
                    "broadcasts_without_descriptor",
                    "restorations",
                    "reclaimed",
                    "descriptors_left",
                ] {
                    let sum: u64 = programs.iter().map(|p| p[k].as_u64().unwrap()).sum();
                    assert_eq!(
                        Some(sum),
                        ina[k].as_u64(),
                        "{protocol} on {topo}: switch counter {k}: software {programs:?} vs simulator {ina}"
                    );
                }
                assert!(
                    programs.iter().map(|p| p["aggregated"].as_u64().unwrap()).sum::<u64>() > 16,
                    "{protocol}: {programs:?}"
                );
            } else {
                assert!(programs.is_empty(), "{protocol} is host-based: {programs:?}");
            }
            let mut hs = reducelab_ina::host::HostStats::default();
            ok.iter().for_each(|r| hs.accumulate(&r.collectives[0].stats));
            assert_eq!(serde_json::to_value(&hs).unwrap(), t["host_stats"], "{protocol} on {topo}: host counters");
            assert!(hs.sent_reduce > 4 && hs.bad_blocks == 0 && hs.duplicates == 0, "{protocol}: {hs:?}");
            // Every frame the hosts sent and received carried its chunk: none was refused.
            assert!(ok.iter().all(|r| r.malformed == 0 && r.misdelivered == 0 && r.rx_packets > 0), "{protocol}");
        }
    }
}

/// No loss recovery: with the switch dropping packets every host that misses a result ends
/// within its timeout with an error saying so (nothing lost silently, no hang); no host
/// verifies a wrong result.
#[test]
fn sparse_protocols_end_with_the_reason_when_the_switch_drops() {
    for (i, protocol) in SPARSE.iter().enumerate() {
        let s = Setup::new(
            &format!("sparse-loss-{protocol}"),
            120 + i as u8,
            scenario(STAR4, protocol, 256 << 10, SPARSE_KEYS),
        );
        let plan = s.plan();
        let sw = s.switches(&["--fault", "loss=0.2", "--fault-seed", "4"]);
        let rs = hosts(&plan, 1.0);
        let reports: Vec<Value> = sw.into_iter().map(Proc::stop).collect();
        assert!(reports[0]["data_plane"]["fault_dropped"].as_u64().unwrap() > 0);
        let errs: Vec<&String> = rs.iter().filter_map(|r| r.as_ref().err()).collect();
        assert!(!errs.is_empty(), "{protocol}: 20% loss without recovery cannot finish");
        // Counted in the protocol's own units (sparse Flare's blocks, SparCML's steps).
        let unit = if *protocol == "flare_sparse" { "sparse blocks missing" } else { "steps missing" };
        for e in &errs {
            assert!(
                e.contains("timed out after 1.0 s")
                    && e.contains(unit)
                    && e.contains(&format!("{protocol} has no loss recovery")),
                "{e}"
            );
        }
        // A host that did finish has every result exact (bad blocks fail a host as an error).
        for r in rs.iter().flatten() {
            assert!(r.collectives[0].verified && r.collectives[0].stats.bad_blocks == 0, "{protocol}: {r:?}");
        }
    }
}

/// Duplication and reordering only: every host verifies, and every duplicated frame was
/// dropped and counted exactly once (host `duplicates` or `stale`; on the fat tree, where the
/// leaves' copies reach the spine's program, also switch `collisions`), never added twice.
#[test]
fn sparse_protocols_verify_under_duplication_and_reordering_and_count_every_copy() {
    let fat = "kind = \"fat_tree_2\"\nleaves = 2\nhosts_per_leaf = 2\nspines = 2";
    let cases = SPARSE.iter().map(|p| (*p, STAR4)).chain([("flare_sparse", fat)]);
    for (i, (protocol, topo)) in cases.enumerate() {
        let s = Setup::new(
            &format!("sparse-dup-{protocol}-{i}"),
            125 + i as u8,
            scenario(topo, protocol, 256 << 10, SPARSE_KEYS),
        );
        let plan = s.plan();
        let sw = s.switches(&["--fault", "dup=0.2,reorder=0.3,reorder_us=300", "--fault-seed", "6"]);
        let rs = hosts(&plan, 15.0);
        let reports: Vec<Value> = sw.into_iter().map(Proc::stop).collect();
        let ok = assert_verified(&rs, 4);
        let sum = |k: &str| reports.iter().map(|r| r["data_plane"][k].as_u64().unwrap()).sum::<u64>();
        let dups = sum("fault_duplicated");
        assert!(dups > 0 && sum("fault_held") > 0, "{protocol}: faults were injected: {reports:?}");
        let at_hosts: u64 = ok.iter().map(|r| r.collectives[0].stats.duplicates + r.collectives[0].stats.stale).sum();
        let at_switches: u64 = reports.iter().filter_map(|r| r["program"]["collisions"].as_u64()).sum();
        assert_eq!(at_hosts + at_switches, dups, "{protocol} on {topo}: every copy dropped and counted once");
        if topo == fat {
            assert!(at_switches > 0, "copies reached a switch program: {reports:?}");
        }
    }
}

/// Training jobs (`kind = "training"`) on every registered allreduce protocol through switch
/// processes: two jobs of three workers on a two-level fat tree, each job's four partitions
/// allreduces its workers join when the partition is ready on them (the simulator's draws from
/// the seed, here in wall-clock time). Every partition of every job reaches every worker as the
/// exact sum, and a job takes no less than its model's computation (a worker joins a
/// partition's allreduce only once its layer is computed). The protocols that recover from loss
/// do it again through switches that drop, duplicate and reorder. The shared-pool protocols'
/// training jobs have their own switch (tests/pool.rs).
#[test]
fn training_jobs_of_every_allreduce_protocol_run_exactly_through_switch_processes() {
    let fat_tree = "kind = \"fat_tree_2\"\nleaves = 2\nhosts_per_leaf = 3\nspines = 2";
    for (i, p) in wire_protocols().filter(|p| reducelab_ina::pool::pool_protocol(p.name).is_none()).enumerate() {
        // Model A at 1/10: 4 partitions of 400 kB, layers computed 32 µs apart; jobs start
        // within 2 ms, 1 ms of jitter per worker and partition.
        let text = scenario(fat_tree, p.name, 0, "")
            .replace("kind = \"ina_allreduce\"\nhosts = \"all\"\nbytes = 0\n", "kind = \"training\"\njobs = 2\nworkers = 3\nmodels = [\"A\"]\nmodel_scale = 0.1\nstart_max_us = 2000\njitter_max_us = 1000\n");
        assert!(text.contains("kind = \"training\""), "{text}");
        let s = Setup::new(&format!("training-{}", p.name), 100 + i as u8, text.clone());
        let plan = s.plan();
        assert_eq!(plan.training.len(), 2, "{}", p.name);
        assert_eq!(plan.colls.len(), 8, "{}: four partitions per job", p.name);
        // The partitions' ready times are the simulator's: per worker, in send order, after its
        // layer's computation (32 µs per layer at this scale).
        let mut last_ready = Vec::new();
        for job in &plan.training {
            let mut last = 0;
            for ci in job.specs.clone() {
                for r in 0..3 {
                    let at = plan.rank_start_ps(ci, r);
                    assert!(at >= job.start_ps + 32_000_000, "{}", p.name);
                    last = last.max(at);
                }
            }
            last_ready.push((last - job.start_ps) as f64 * 1e-12);
        }
        let sw = s.switches(&[]);
        let rs = hosts(&plan, 20.0);
        let reports: Vec<Value> = sw.into_iter().map(Proc::stop).collect();
        let ok = assert_verified(&rs, 6);
        for r in &reports {
            clean_data_plane(r);
            // Nothing held at the end but the results a protocol keeps to answer re-sends (the
            // running switch is never told a partition ended).
            let prog = &r["program"];
            if !prog.is_null() {
                assert_eq!(prog["descriptors_left"], prog["kept_results"], "{}: switch {}", p.name, r["node"]);
            }
        }
        for c in ok.iter().flat_map(|r| &r.collectives) {
            let ready = plan.rank_start_ps(c.tenant as usize, c.rank) as f64 * 1e-12;
            assert!(c.finished_s.unwrap() >= ready, "{}: a partition finished before it was ready: {c:?}", p.name);
        }
        let jobs = plan.training_results(&ok);
        assert_eq!(jobs.len(), 2);
        for j in &jobs {
            assert!(j.verified && j.partitions == 4 && j.workers == 3, "{}: {j:?}", p.name);
            // No shorter than until its last partition was ready on its last worker.
            assert!(
                j.jct_s.unwrap() >= last_ready[j.job],
                "{}: JCT before the last partition was ready: {j:?}",
                p.name
            );
        }
        // Without a report from one worker the job is not verified.
        let partial = plan.training_results(&ok[1..]);
        assert!(!partial[0].verified && partial[0].jct_s.is_none(), "{}", p.name);
        // A protocol that recovers from loss does so in every partition of every job, with
        // switches that drop, duplicate and reorder on every port.
        if p.loss_recovery {
            let s = Setup::new(&format!("training-faults-{}", p.name), 110 + i as u8, fast_timers_if_canary(text));
            let plan = s.plan();
            let sw = s.switches(&["--fault", "loss=0.02,dup=0.02,reorder=0.05,reorder_us=300", "--fault-seed", "5"]);
            let rs = hosts(&plan, 30.0);
            let reports: Vec<Value> = sw.into_iter().map(Proc::stop).collect();
            let ok = assert_verified(&rs, 6);
            let injected = |k: &str| reports.iter().map(|r| r["data_plane"][k].as_u64().unwrap()).sum::<u64>();
            assert!(
                injected("fault_dropped") > 0 && injected("fault_duplicated") > 0,
                "{}: faults were injected",
                p.name
            );
            assert!(plan.training_results(&ok).iter().all(|j| j.verified), "{}", p.name);
        }
    }
}
