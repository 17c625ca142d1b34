//! In-network allreduce (Canary, static trees) on the packet engine: every host's result is
//! checked (fingerprints and real element values), under loss, collisions, a failing switch,
//! noise and stragglers; nothing hangs and every descriptor is freed at the end.

use reducelab_sim::run_scenario_str;
use serde_json::Value;

/// A 4-leaf × 4-host, 4-spine fat tree (nodes: leaf l = 5l, its hosts 5l+1..5l+4, spines 20..23).
fn scenario(traffic: &str, extra: &str) -> String {
    format!(
        r#"name = "ina-test"
seed = 7
[topology]
kind = "fat_tree_2"
leaves = 4
hosts_per_leaf = 4
spines = 4
bandwidth_gbps = 100
latency_ns = 500
[network]
mtu_bytes = 4096
switch_latency_ns = 300
routing = "canary"
{extra}
{traffic}
"#
    )
}

const CANARY_ALL: &str = "[[traffic]]\nkind = \"ina_allreduce\"\nhosts = \"all\"\nbytes = 262144\n";

fn run(text: &str) -> Value {
    let out = run_scenario_str(text, &Default::default()).unwrap_or_else(|e| panic!("{e}"));
    serde_json::from_str(&out.summary_json).unwrap()
}

/// The run completed, every host has every block, fingerprints and values all correct,
/// no descriptor or value slot left behind.
fn assert_clean(s: &Value) {
    assert_eq!(s["status"], "completed", "{}", s["status_reason"]);
    for t in s["traffic"].as_array().unwrap() {
        if t["kind"] == "ina_allreduce" {
            assert_eq!(t["verified"].as_u64(), t["hosts"].as_u64(), "{t}");
            assert_eq!(t["bad_blocks"], 0, "{t}");
            assert_eq!(t["values_checked"], true);
        }
    }
    assert_eq!(s["ina"]["descriptors_left"], 0, "{}", s["ina"]);
    assert_eq!(s["ina"]["values_slots_left"], 0, "{}", s["ina"]);
}

#[test]
fn canary_without_faults_aggregates_in_the_network() {
    let s = run(&scenario(CANARY_ALL, ""));
    assert_clean(&s);
    let t = &s["traffic"][0];
    assert_eq!(t["host_stats"]["retx_requests"], 0);
    assert_eq!(s["ina"]["collisions"], 0);
    // 64 blocks × 15 contributions; switches absorbed most of them.
    let aggregated = s["ina"]["aggregated"].as_u64().unwrap();
    assert!(aggregated >= 64 * 15, "{aggregated}");
    assert!(t["goodput_gbps"].as_f64().unwrap() > 20.0, "{t}");
}

#[test]
fn one_percent_loss_recovers_every_contribution_exactly_once() {
    let s = run(&scenario(CANARY_ALL, "loss_probability = 0.01\n"));
    assert_clean(&s);
    assert!(s["ina"]["lost_packets"].as_u64().unwrap() > 0);
    let hs = &s["traffic"][0]["host_stats"];
    assert!(hs["retx_requests"].as_u64().unwrap() > 0, "{hs}");
    assert!(hs["failures_issued"].as_u64().unwrap() + hs["retransmits_sent"].as_u64().unwrap() > 0, "{hs}");
}

#[test]
fn tiny_descriptor_tables_collide_and_restore_the_tree() {
    let s = run(&scenario(CANARY_ALL, "[ina]\ntable_size = 4\n"));
    assert_clean(&s);
    assert!(s["ina"]["collisions"].as_u64().unwrap() > 100, "{}", s["ina"]);
    assert!(s["ina"]["restorations"].as_u64().unwrap() > 0, "{}", s["ina"]);
    assert!(s["ina"]["peak_descriptors"].as_u64().unwrap() <= 4);
}

#[test]
fn a_spine_failing_mid_run_is_handled_like_loss() {
    let s = run(&scenario(CANARY_ALL, "[[faults]]\nkind = \"node\"\nnode = 20\nat_ns = 8000\n"));
    assert_clean(&s);
    assert!(s["ina"]["lost_packets"].as_u64().unwrap() > 0, "{}", s["ina"]);
}

#[test]
fn noise_and_short_timeouts_make_stragglers_not_errors() {
    let s = run(&scenario(CANARY_ALL, "[noise]\nprobability = 0.1\ndelay_ns = 1000\n[ina]\ntimeout_ns = 20\n"));
    assert_clean(&s);
    assert!(s["ina"]["stragglers"].as_u64().unwrap() > 1000, "{}", s["ina"]);
}

#[test]
fn everything_at_once() {
    let extra = "loss_probability = 0.01\n[ina]\ntable_size = 8\ntimeout_ns = 300\n[noise]\nprobability = 0.05\ndelay_ns = 1000\n[[faults]]\nkind = \"node\"\nnode = 21\nat_ns = 6000\n";
    let s = run(&scenario(CANARY_ALL, extra));
    assert_clean(&s);
}

#[test]
fn concurrent_tenants_with_background_traffic() {
    let t = "[[traffic]]\nkind = \"ina_allreduce\"\nhosts = [0, 4, 8, 12, 1, 5]\nbytes = 131072\n\
             [[traffic]]\nkind = \"ina_allreduce\"\nhosts = [2, 6, 10, 14, 9]\nbytes = 131072\n\
             [[traffic]]\nkind = \"random_uniform\"\nhosts = [3, 7, 11, 15, 13]\nbytes = 16384\n";
    let s = run(&scenario(t, "[ina]\ntable_size = 64\n"));
    assert_eq!(s["status"], "completed", "{}", s["status_reason"]);
    for i in 0..2 {
        assert_eq!(s["traffic"][i]["bad_blocks"], 0);
        assert_eq!(s["traffic"][i]["verified"], s["traffic"][i]["hosts"]);
    }
    assert!(s["traffic"][2]["completed"].as_u64().unwrap() > 0);
}

#[test]
fn static_trees_are_verified_and_a_loss_stalls_them_with_a_reason() {
    let t = "[[traffic]]\nkind = \"ina_allreduce\"\nhosts = \"all\"\nbytes = 262144\nprotocol = \"static_trees\"\ntrees = 4\n";
    let s = run(&scenario(t, ""));
    assert_clean(&s);
    assert_eq!(s["traffic"][0]["protocol"], "static_trees:4");
    let lossy = run(&scenario(t, "loss_probability = 0.05\n"));
    assert_eq!(lossy["status"], "stalled");
    let why = lossy["status_reason"].as_str().unwrap();
    assert!(why.contains("static trees have no loss recovery"), "{why}");
}

#[test]
fn same_scenario_same_bytes() {
    let text = scenario(CANARY_ALL, "loss_probability = 0.01\n[ina]\ntable_size = 16\n");
    let a = run_scenario_str(&text, &Default::default()).unwrap();
    let b = run_scenario_str(&text, &Default::default()).unwrap();
    assert_eq!(a.summary_json, b.summary_json);
    assert_eq!(a.files, b.files);
    let names: Vec<_> = a.files.iter().map(|f| f.0.as_str()).collect();
    assert!(names.contains(&"ina_memory.csv") && names.contains(&"ina_switches.csv"), "{names:?}");
    let sw = &a.files.iter().find(|f| f.0 == "ina_switches.csv").unwrap().1;
    assert_eq!(sw.lines().count(), 1 + 8, "header + 8 switches");
}

#[test]
fn bad_ina_settings_name_the_field() {
    let cases = [
        (CANARY_ALL.replace("bytes = 262144", "bytes = 262144\nprotocol = \"sharp\""), "", "traffic[0].protocol"),
        (CANARY_ALL.replace("bytes = 262144", "bytes = 262144\ntrees = 2"), "", "traffic[0].trees"),
        (
            CANARY_ALL.replace("bytes = 262144", "bytes = 262144\nelements_per_packet = 0"),
            "",
            "traffic[0].elements_per_packet",
        ),
        (CANARY_ALL.to_string(), "[ina]\ntable_size = 0\n", "ina.table_size"),
        (CANARY_ALL.to_string(), "[ina]\nslots_per_tenant = 99999999\n", "ina.slots_per_tenant"),
        (CANARY_ALL.to_string(), "[ina]\nbogus = 1\n", "ina"),
        (CANARY_ALL.to_string(), "[ina]\nmax_elements_per_packet = 32\n", "ina.max_elements_per_packet"),
        (
            CANARY_ALL.replace("bytes = 262144", "bytes = 262144\nprotocol = \"static_trees\"\nroots = [1]"),
            "",
            "traffic[0].roots[0]",
        ),
    ];
    for (traffic, extra, field) in cases {
        let err = run_scenario_str(&scenario(&traffic, extra), &Default::default())
            .err()
            .unwrap_or_else(|| panic!("accepted: {field}"));
        assert!(err.field.starts_with(field), "{field}: got {err}");
    }
}

#[test]
fn a_leaf_failure_cut_off_hosts_ends_as_stalled_with_the_reason() {
    // Leaf 1 (node 5) carries hosts 4..7: their contributions can never arrive.
    let s = run(&scenario(CANARY_ALL, "[[faults]]\nkind = \"node\"\nnode = 5\nat_ns = 2000\n"));
    assert_eq!(s["status"], "stalled");
    let why = s["status_reason"].as_str().unwrap();
    assert!(why.contains("gave up") && why.contains("blocks missing"), "{why}");
    assert_eq!(s["traffic"][0]["bad_blocks"], 0, "no wrong result, only missing ones");
}

#[test]
fn input_round_robin_gives_switch_made_packets_one_inputs_share() {
    // A static tree across 8 hosts while the other 8 load the network. Under FIFO output
    // queues the aggregates a switch emits take bandwidth in proportion to their number; with
    // input round-robin they are one input among the others, as in an input-queued router.
    let t = "[[traffic]]\nkind = \"ina_allreduce\"\nhosts = [0, 4, 8, 12, 1, 5, 9, 13]\nbytes = 1048576\nprotocol = \"static_trees\"\n\
             [[traffic]]\nkind = \"random_uniform\"\nhosts = [2, 3, 6, 7, 10, 11, 14, 15]\nbytes = 65536\ninflight = 4\n";
    let goodput = |arb: &str| {
        let s = run(&scenario(t, &format!("arbitration = \"{arb}\"\n")));
        assert_eq!(s["traffic"][0]["bad_blocks"], 0);
        assert_eq!(s["traffic"][0]["verified"], 8);
        s["traffic"][0]["goodput_gbps"].as_f64().unwrap()
    };
    let (fifo, rr) = (goodput("fifo"), goodput("input_round_robin"));
    assert!(rr < 0.85 * fifo, "fifo {fifo:.1} Gb/s, input round-robin {rr:.1} Gb/s");
}

#[test]
fn in_network_traffic_on_a_direct_network_is_refused_with_a_reason() {
    let text = r#"name = "t"
[topology]
kind = "torus"
dims = [4, 4]
bandwidth_gbps = 100
latency_ns = 100
[[traffic]]
kind = "ina_allreduce"
hosts = "all"
bytes = 4096
"#;
    let err = run_scenario_str(text, &Default::default()).expect_err("refused");
    assert_eq!(err.field, "topology");
    assert!(err.reason.contains("indirect networks"), "{err}");
}

/// Canary and static trees through input-buffered routers (`network.router =
/// "input_buffered"`): the packets switch programs forward or create enter the crossbar as one
/// more input; every host's result is verified, alone and with background traffic, under both
/// crossbar arbitrations; the same scenario gives the same bytes.
#[test]
fn in_network_allreduce_is_verified_through_input_buffered_routers() {
    let bg =
        "[[traffic]]\nkind = \"random_uniform\"\nhosts = [2, 3, 6, 7, 10, 11, 14, 15]\nbytes = 65536\ninflight = 4\n";
    let hosts = "hosts = [0, 4, 8, 12, 1, 5, 9, 13]";
    for arb in ["fifo", "input_round_robin", "lru"] {
        let net = format!("arbitration = \"{arb}\"\nrouter = \"input_buffered\"\ninput_buffer_bytes = 32768\noutput_buffer_bytes = 16384\n");
        for proto in ["protocol = \"canary\"", "protocol = \"static_trees\"\ntrees = 4", "protocol = \"static_trees\""]
        {
            let t = format!("[[traffic]]\nkind = \"ina_allreduce\"\n{hosts}\nbytes = 524288\n{proto}\n{bg}");
            let text = scenario(&t, &net);
            let s = run(&text);
            assert_eq!(s["status"], "completed", "{arb} {proto}: {}", s["status_reason"]);
            assert_eq!(s["traffic"][0]["bad_blocks"], 0, "{arb} {proto}");
            assert_eq!(s["traffic"][0]["verified"], 8, "{arb} {proto}");
            assert_eq!(s["traffic"][0]["values_checked"], true);
            assert_eq!(s["ina"]["descriptors_left"], 0, "{}", s["ina"]);
        }
        let s = run(&scenario(CANARY_ALL, &net));
        assert_clean(&s);
    }
    let text = scenario(CANARY_ALL, "router = \"input_buffered\"\ncrossbar_speedup = 1.5\nloss_probability = 0.01\n");
    let (a, b) =
        (run_scenario_str(&text, &Default::default()).unwrap(), run_scenario_str(&text, &Default::default()).unwrap());
    assert_eq!(a.summary_json, b.summary_json);
    assert_eq!(a.files, b.files);
    assert_clean(&serde_json::from_str(&a.summary_json).unwrap());
    let oq = run_scenario_str(&scenario(CANARY_ALL, "loss_probability = 0.01\n"), &Default::default()).unwrap();
    assert_ne!(a.files, oq.files, "the router must change the run");
}

/// The input-buffered keys are checked and name their field.
#[test]
fn router_settings_name_the_field() {
    let cases = [
        ("input_buffer_bytes = 65536\n", "network.input_buffer_bytes", "input_buffered"),
        ("crossbar_speedup = 2.0\n", "network.crossbar_speedup", "input_buffered"),
        ("output_buffer_bytes = 65536\n", "network.output_buffer_bytes", "input_buffered"),
        ("router = \"input_buffered\"\ninput_buffer_bytes = 100\n", "network.input_buffer_bytes", "MTU"),
        ("router = \"input_buffered\"\noutput_buffer_bytes = 4095\n", "network.output_buffer_bytes", "MTU"),
        ("router = \"input_buffered\"\ncrossbar_speedup = 0.5\n", "network.crossbar_speedup", "[1, 1024]"),
        ("router = \"input_buffered\"\ncrossbar_speedup = nan\n", "network.crossbar_speedup", "[1, 1024]"),
        ("router = \"input_buffered\"\nflow_control = \"drop_tail\"\n", "network.router", "credit"),
        ("router = \"crossbar\"\n", "network", "router"),
        ("arbitration = \"lru\"\n", "network.arbitration", "input_buffered"),
    ];
    for (extra, field, why) in cases {
        let err = run_scenario_str(&scenario(CANARY_ALL, extra), &Default::default())
            .err()
            .unwrap_or_else(|| panic!("accepted: {extra}"));
        assert!(err.field.starts_with(field) && err.to_string().contains(why), "{extra}: got {err}");
    }
}

/// Unloaded, input-buffered routers cost an in-network allreduce nothing: a static tree over
/// half the hosts of an 8 x 8 fat tree (the small Canary network) has the output-queued
/// goodput within 1%. (The root sends every result to each child; when the program input
/// carried one link's bandwidth like a port, this run fell to an eighth.)
#[test]
fn an_unloaded_static_tree_is_as_fast_through_input_buffered_routers() {
    let hosts: Vec<String> = (0..64).filter(|h| h % 2 == 0).map(|h| h.to_string()).collect();
    let goodput = |extra: &str| {
        let text = format!(
            "name = \"t\"\nseed = 1\n[topology]\nkind = \"fat_tree_2\"\nleaves = 8\nhosts_per_leaf = 8\nspines = 8\nbandwidth_gbps = 100\nlatency_ns = 500\n\
             [network]\nswitch_latency_ns = 300\nrouting = \"canary\"\narbitration = \"input_round_robin\"\n{extra}\
             [[traffic]]\nkind = \"ina_allreduce\"\nhosts = [{}]\nbytes = 1048576\nprotocol = \"static_trees\"\nelements_per_packet = 256\n",
            hosts.join(", ")
        );
        let s = run(&text);
        assert_clean(&s);
        s["traffic"][0]["goodput_gbps"].as_f64().unwrap()
    };
    let (oq, ib) = (goodput(""), goodput("router = \"input_buffered\"\n"));
    assert!((ib / oq - 1.0).abs() < 0.01, "output-queued {oq:.2} Gb/s, input-buffered {ib:.2} Gb/s");
}
