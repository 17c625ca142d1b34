//! The scenario format's one door (docs/scenario-format.md): topology shorthand, line-rate
//! buffers, `run.backend` and what summary.json says about the backend.

use reducelab_sim::{load_scenario_str, run_scenario_str, RunOptions, RunStatus};
use serde_json::Value;

fn summary(text: &str) -> Value {
    let out = run_scenario_str(text, &RunOptions::default()).unwrap_or_else(|e| panic!("{e}\n{text}"));
    serde_json::from_str(&out.summary_json).unwrap()
}

/// One allreduce of `bytes` with `algorithm` on `topology` (a TOML value: a string or a table)
/// with `run` as the [run] table's lines.
fn allreduce(topology: &str, algorithm: &str, bytes: u64, run: &str) -> String {
    format!("name = \"t\"\ntopology = {topology}\n[[traffic]]\nkind = \"collective\"\nalgorithm = \"{algorithm}\"\nbytes = {bytes}\n[run]\n{run}\n")
}

#[test]
fn a_shape_builds_the_same_topology_as_kind_and_sizes() {
    let perm = "[[traffic]]\nkind = \"permutation\"\nbytes = 20000\n";
    for (shape, table) in [
        ("torus:4x2x2", "kind = \"torus\"\ndims = [4, 2, 2]"),
        ("hyperx:3x4", "kind = \"hyperx\"\ndims = [3, 4]"),
        ("hammingmesh:2x2,2x3", "kind = \"hammingmesh\"\nboard = [2, 2]\ngrid = [2, 3]\nboard_latency_ns = 20"),
    ] {
        let extra = if shape.starts_with("hamming") { "board_latency_ns = 20\n" } else { "" };
        let a = summary(&format!(
            "name = \"t\"\n[topology]\nshape = \"{shape}\"\nbandwidth_gbps = 100\nlatency_ns = 250\n{extra}{perm}"
        ));
        let b = summary(&format!("name = \"t\"\n[topology]\n{table}\nbandwidth_gbps = 100\nlatency_ns = 250\n{perm}"));
        assert_eq!(a, b, "{shape}");
        assert_eq!(a["status"], "completed");
    }
    // A bare string: the same with the default links (400 Gb/s, 100 ns).
    let bare = summary(&format!("name = \"t\"\ntopology = \"torus:4x4\"\n{perm}"));
    let table = summary(&format!(
        "name = \"t\"\n[topology]\nkind = \"torus\"\ndims = [4, 4]\nbandwidth_gbps = 400\nlatency_ns = 100\n{perm}"
    ));
    assert_eq!(bare, table);
}

#[test]
fn line_rate_buffers_follow_the_credit_loop() {
    let buffer = |bw: u32, hop: u32| {
        let text = format!(
            "name = \"t\"\n[topology]\nshape = \"torus:2x2\"\nbandwidth_gbps = {bw}\nlatency_ns = 100\n[network]\nswitch_latency_ns = {hop}\nbuffer_bytes = \"line_rate\"\n[[traffic]]\nkind = \"permutation\"\nbytes = 1\n"
        );
        load_scenario_str(&text, None).unwrap().net.buffer_bytes
    };
    // At least 256 KiB; 2 × the loop (2 × 100 ns + hop + 2 packets) × bandwidth above that.
    assert_eq!(buffer(400, 300), 256 << 10);
    assert_eq!(buffer(3200, 300), 417_792); // 2 × 3.2 Tb/s × 520.48 ns = 416 384 B, in 4 KiB packets
    assert_eq!(buffer(3200, 3000), 2_576_384); // 2 × 3.2 Tb/s × 3220.48 ns = 629 packets of 4 KiB
    assert_eq!(reducelab_sim::scenario::line_rate_buffer_bytes(3200.0, 100.0, 300.0, 4096), 417_792);
}

#[test]
fn backends_and_their_reasons() {
    let t = "\"torus:8x8\"";
    let s = summary(&allreduce(t, "swing-latency", 4096, ""));
    assert_eq!(
        (s["backend"].as_str(), s["backend_reason"].as_str()),
        (Some("packet"), Some("default (run.backend not set)"))
    );
    assert_eq!(s["traffic"][0]["verified"], true);
    assert_eq!(s["traffic"][0]["buffer_bytes"], 64 << 10);

    let f = summary(&allreduce(t, "swing-latency", 4096, "backend = \"flow\""));
    assert_eq!((f["backend"].as_str(), f["backend_reason"].as_str()), (Some("flow"), Some("set by run.backend")));
    assert_eq!((f["status"].as_str(), &f["status_reason"]), (Some("completed"), &Value::Null));
    let ft = &f["traffic"][0];
    assert_eq!(ft["verified"], Value::Null);
    assert_eq!(ft["algorithm"], "swing-latency");
    assert_eq!((ft["ranks"].as_u64(), ft["bytes"].as_u64()), (Some(64), Some(4096)));
    let runtime = ft["runtime_ps"].as_u64().unwrap();
    assert_eq!(ft["goodput_gbps"].as_f64().unwrap(), 4096.0 * 8.0 / (runtime as f64 * 1e-12) / 1e9);
    // Same messages as at packet level (the plan is the schedule's), and a runtime close to it.
    assert_eq!(ft["messages"], s["traffic"][0]["messages"]);
    let pk = s["traffic"][0]["runtime_ps"].as_u64().unwrap() as f64;
    assert!((runtime as f64 / pk - 1.0).abs() < 0.05, "{runtime} vs {pk}");

    let auto =
        |bytes: u64, run: &str| summary(&allreduce(t, "swing-latency", bytes, &format!("backend = \"auto\"\n{run}")));
    let below = auto(65535, "flow_min_bytes = 65536");
    assert_eq!(
        (below["backend"].as_str(), below["backend_reason"].as_str()),
        (Some("packet"), Some("auto: below flow_min_bytes (65535 B < 65536 B)"))
    );
    let at = auto(65536, "flow_min_bytes = 65536");
    assert_eq!(
        (at["backend"].as_str(), at["backend_reason"].as_str()),
        (Some("flow"), Some("auto: 65536 B is at least flow_min_bytes (65536 B)"))
    );
    assert_eq!(auto(65536, "")["backend_reason"], "auto: below flow_min_bytes (65536 B < 8388608 B)");
    let cf = summary(&allreduce(t, "bucket", 32, "backend = \"auto\""));
    assert_eq!(cf["backend"], "flow");
    assert!(cf["backend_reason"].as_str().unwrap().starts_with("auto: contention-free"), "{}", cf["backend_reason"]);
    // A scenario the flow backend cannot run stays at packet level under auto, saying why.
    let two = format!(
        "{}[[traffic]]\nkind = \"permutation\"\nbytes = 100\n",
        allreduce(t, "bucket", 32, "backend = \"auto\"")
    );
    let two = summary(&(two.replace("[run]\nbackend = \"auto\"\n", "") + "[run]\nbackend = \"auto\"\n"));
    assert_eq!(two["backend"], "packet");
    assert!(two["backend_reason"].as_str().unwrap().contains("2 traffic entries"), "{}", two["backend_reason"]);
}

#[test]
fn flow_runs_are_deterministic_and_probes_stop_at_once() {
    let text = allreduce("\"hyperx:4x4\"", "swing", 1 << 20, "backend = \"flow\"");
    let a = run_scenario_str(&text, &RunOptions::default()).unwrap();
    let b = run_scenario_str(&text, &RunOptions::default()).unwrap();
    assert_eq!(a.summary_json, b.summary_json);
    assert_eq!(a.status, RunStatus::Completed);
    assert!(a.files.is_empty());
    // A family resolves per size, as at packet level.
    let s: Value = serde_json::from_str(&a.summary_json).unwrap();
    assert_eq!(s["traffic"][0]["algorithm"], "swing-bandwidth");
    let probe = run_scenario_str(&text, &RunOptions { probe: true, ..RunOptions::default() }).unwrap();
    let p: Value = serde_json::from_str(&probe.summary_json).unwrap();
    assert_eq!(
        (probe.status, p["status"].as_str(), &p["traffic"][0]["runtime_ps"]),
        (RunStatus::TimeLimit, Some("time_limit"), &Value::Null)
    );
    assert_eq!(p["backend"], "flow");
}

#[test]
fn the_swing_network_file_is_the_papers_network() {
    let text =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../../scenarios/swing/network.toml")).unwrap();
    let sc = load_scenario_str(&text, None).unwrap();
    assert_eq!(sc.topology.num_hosts(), 64);
    assert!(sc.topology.links.iter().all(|l| l.bandwidth_bps == 400_000_000_000 && l.latency_ps == 100_000));
    assert_eq!(
        (sc.net.switch_latency_ps, sc.net.mtu_bytes, sc.net.header_bytes, sc.net.buffer_bytes),
        (300_000, 4096, 64, 256 << 10)
    );
    assert_eq!(sc.net.routing, reducelab_net::RoutingAlgo::Adaptive);
    // swing-bandwidth on 8x8 is not contention-free: 1 MiB is below flow_min_bytes.
    assert_eq!(
        (sc.backend.name(), sc.backend_reason.as_str()),
        ("packet", "auto: below flow_min_bytes (1048576 B < 8388608 B)")
    );
}
