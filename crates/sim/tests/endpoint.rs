//! Endpoint costs through collectives and scenarios: packet and flow level agree with each
//! other and with the exact per-step cost; `[endpoint]` validation; random endpoint values keep
//! data verified and runs deterministic.
use reducelab_des::{Rng, SimTime};
use reducelab_flow::{run_plan, run_plan_simulated, run_schedule, Endpoint, FlowConfig};
use reducelab_net::{EndpointConfig, NetConfig, Network, RoutingAlgo};
use reducelab_sched::algos::{build, Layout};
use reducelab_sched::plan::Plan;
use reducelab_sched::{Collective, Schedule};
use reducelab_sim::collective::CollectiveRun;
use reducelab_sim::{load_scenario_str, run_scenario_str, RunOptions};
use reducelab_topo::{star, torus, LinkParams, Topology};
use serde_json::Value;

const L: LinkParams = LinkParams { bandwidth_bps: 400_000_000_000, latency_ps: 100_000 };

fn flow_ep(ep: EndpointConfig) -> Endpoint {
    Endpoint {
        send_overhead_ps: ep.send_overhead_ps,
        send_latency_ps: ep.send_latency_ps,
        recv_overhead_ps: ep.recv_overhead_ps,
        recv_latency_ps: ep.recv_latency_ps,
        rendezvous_threshold_bytes: ep.rendezvous_threshold_bytes,
        injection_bps: ep.injection_bps,
    }
}

fn packet(topo: &Topology, s: &Schedule, bytes: u64, ep: EndpointConfig) -> u64 {
    let cfg = NetConfig {
        switch_latency_ps: 300_000,
        buffer_bytes: 256 * 1024,
        routing: RoutingAlgo::Minimal,
        ..NetConfig::default()
    };
    let mut net = Network::new(topo, cfg, vec![], &Rng::new(1)).unwrap();
    net.set_endpoint(ep).unwrap();
    let mut w = CollectiveRun::new(topo, s.clone(), (0..s.ranks).collect(), bytes, 4, 0, SimTime::ZERO, 1);
    net.run(&mut w, None, &mut |_| {});
    let r = w.result();
    assert!(r.verified, "{bytes}: {:?}", r.mismatch);
    r.runtime_ps().unwrap()
}

fn fcfg(ep: EndpointConfig) -> FlowConfig {
    FlowConfig { switch_latency_ps: 300_000, mtu_bytes: 4096, header_bytes: 64, endpoint: flow_ep(ep) }
}

fn flow(topo: &Topology, s: &Schedule, bytes: u64, ep: EndpointConfig) -> u64 {
    run_schedule(topo, s, bytes, 4, &fcfg(ep)).unwrap().runtime_ps
}

const OFF: EndpointConfig = EndpointConfig {
    send_overhead_ps: 0,
    send_latency_ps: 0,
    recv_overhead_ps: 0,
    recv_latency_ps: 0,
    rendezvous_threshold_bytes: None,
    injection_bps: None,
};

#[test]
fn each_step_of_a_two_rank_allreduce_pays_exactly_send_plus_receive_overhead() {
    // Two ranks: every step is one message each way, so each step costs o_s + o_r more.
    let topo = star(2, L).unwrap();
    let s = build("ring", Collective::Allreduce, &Layout::line(2)).unwrap();
    let steps = s.programs[0].steps.len() as u64;
    for bytes in [64u64, 64 << 10, 1 << 20] {
        for (os, ls, or, lr) in [
            (400_000, 0, 0, 0),
            (0, 0, 250_000, 0),
            (1_234_567, 0, 89_000, 0),
            (0, 170_000, 0, 0),
            (0, 0, 0, 250_000),
            (201_000, 170_000, 310_000, 250_000),
        ] {
            let ep = EndpointConfig {
                send_overhead_ps: os,
                send_latency_ps: ls,
                recv_overhead_ps: or,
                recv_latency_ps: lr,
                ..OFF
            };
            let per_step = os + ls + or + lr;
            assert_eq!(
                packet(&topo, &s, bytes, ep),
                packet(&topo, &s, bytes, OFF) + steps * per_step,
                "packet {bytes} {ep:?}"
            );
            assert_eq!(
                flow(&topo, &s, bytes, ep),
                flow(&topo, &s, bytes, OFF) + steps * per_step,
                "flow {bytes} {ep:?}"
            );
        }
    }
}

#[test]
fn flow_equals_packet_with_endpoint_costs_on_contention_free_plans() {
    // Ring on a 1-D torus (one send and one receive per step) and bucket on a 2-D torus
    // (several sends per step, serialised on the send timeline): the recurrence, the fluid
    // simulation and the packet engine agree to a few ps.
    let cases = [(vec![8u32], "ring"), (vec![4, 4], "bucket"), (vec![4, 4], "ring")];
    let eps = [
        EndpointConfig { send_overhead_ps: 500_000, recv_overhead_ps: 300_000, ..OFF },
        EndpointConfig { send_overhead_ps: 0, recv_overhead_ps: 700_000, ..OFF },
        EndpointConfig {
            send_overhead_ps: 200_000,
            recv_overhead_ps: 0,
            rendezvous_threshold_bytes: Some(8192),
            ..OFF
        },
        // The Swing calibration's shape: latencies that overlap the next message.
        EndpointConfig {
            send_overhead_ps: 201_000,
            send_latency_ps: 170_000,
            recv_overhead_ps: 310_000,
            recv_latency_ps: 250_000,
            rendezvous_threshold_bytes: Some(12_000),
            ..OFF
        },
        // Latencies alone (no receive timeline at packet level).
        EndpointConfig { recv_latency_ps: 250_000, ..OFF },
        EndpointConfig { send_latency_ps: 170_000, recv_latency_ps: 90_000, ..OFF },
    ];
    let mut checked = 0;
    for (dims, alg) in &cases {
        let topo = torus(dims, L).unwrap();
        let s = build(alg, Collective::Allreduce, &Layout::new(dims.clone()).unwrap()).unwrap();
        let plan = Plan::from_schedule(&s).unwrap();
        for bytes in [64u64 << 10, 1 << 20] {
            for ep in eps {
                let fast = run_plan(&topo, &plan, bytes, 4, &fcfg(ep)).unwrap();
                let sim = run_plan_simulated(&topo, &plan, bytes, 4, &fcfg(ep)).unwrap();
                let p = packet(&topo, &s, bytes, ep);
                if !fast.contention_free {
                    continue;
                }
                // Exact to rounding. (The flow backend pays a rank's send overheads in port
                // order: plans forget the schedule's send order, and sorted by receiver two
                // senders reached one receiver at the same position, making bucket 8% slower.)
                let tol = 4 + p / 1_000_000_000;
                assert!(
                    fast.runtime_ps.abs_diff(sim.runtime_ps) <= tol,
                    "{alg} {dims:?} {bytes} {ep:?}: recurrence {} vs simulation {}",
                    fast.runtime_ps,
                    sim.runtime_ps
                );
                assert!(
                    fast.runtime_ps.abs_diff(p) <= tol,
                    "{alg} {dims:?} {bytes} {ep:?}: flow {} vs packet {p}",
                    fast.runtime_ps
                );
                checked += 1;
            }
        }
    }
    assert!(checked >= 18, "{checked}");
}

#[test]
fn injection_ceiling_halves_a_four_port_step_at_packet_and_flow_level() {
    // Bucket on a 2-D torus sends on all 4 ports at once; 100 Gb/s links under a 200 Gb/s
    // ceiling run the bandwidth-bound steps at half the rate. Ring (one port) is unaffected.
    let l = LinkParams { bandwidth_bps: 100_000_000_000, latency_ps: 100_000 };
    let topo = torus(&[4, 4], l).unwrap();
    let layout = Layout::new(vec![4, 4]).unwrap();
    let cap = EndpointConfig { injection_bps: Some(200_000_000_000), ..OFF };
    let bytes = 8 << 20;
    let ring = build("ring", Collective::Allreduce, &layout).unwrap();
    assert_eq!(packet(&topo, &ring, bytes, cap), packet(&topo, &ring, bytes, OFF), "one port at a time: not held back");
    assert_eq!(flow(&topo, &ring, bytes, cap), flow(&topo, &ring, bytes, OFF));
    let s = build("swing-bandwidth", Collective::Allreduce, &layout).unwrap();
    for (name, f) in [("packet", packet as fn(&Topology, &Schedule, u64, EndpointConfig) -> u64), ("flow", flow)] {
        let (off, on) = (f(&topo, &s, bytes, OFF) as f64, f(&topo, &s, bytes, cap) as f64);
        let ratio = on / off;
        assert!((1.9..=2.05).contains(&ratio), "{name}: multiport swing under a 2-port ceiling {ratio:.3}x");
    }
}

fn allreduce(extra: &str, algorithm: &str, bytes: u64, backend: &str) -> String {
    format!("name = \"t\"\ntopology = \"torus:4x4\"\n{extra}\n[[traffic]]\nkind = \"collective\"\nalgorithm = \"{algorithm}\"\nbytes = {bytes}\n[run]\nbackend = \"{backend}\"\n")
}

fn summary(text: &str) -> Value {
    let out = run_scenario_str(text, &RunOptions::default()).unwrap_or_else(|e| panic!("{e}\n{text}"));
    serde_json::from_str(&out.summary_json).unwrap()
}

#[test]
fn endpoint_table_is_validated_by_field() {
    for (line, field, why) in [
        ("send_overhead_ns = -1", "endpoint.send_overhead_ns", "non-negative"),
        ("recv_overhead_ns = nan", "endpoint.recv_overhead_ns", "non-negative"),
        ("send_latency_ns = -0.5", "endpoint.send_latency_ns", "non-negative"),
        ("recv_latency_ns = inf", "endpoint.recv_latency_ns", "non-negative"),
        ("injection_gbps = 0", "endpoint.injection_gbps", "positive"),
        ("injection_gbps = -5", "endpoint.injection_gbps", "positive"),
        ("rendezvous_threshold_bytes = -1", "endpoint.rendezvous_threshold_bytes", ""),
        ("rendezvous_bytes = 5", "endpoint", "unknown field"),
    ] {
        let text = allreduce(&format!("[endpoint]\n{line}"), "ring", 4096, "packet");
        let err = load_scenario_str(&text, None).err().unwrap_or_else(|| panic!("{line} accepted"));
        assert!(err.field.starts_with(field) && err.reason.contains(why), "{line}: {err}");
    }
}

#[test]
fn an_empty_or_zero_endpoint_table_changes_nothing_and_the_flow_backend_gets_the_values() {
    let base = summary(&allreduce("", "swing-bandwidth", 65536, "packet"));
    let zero = summary(&allreduce(
        "[endpoint]\nsend_overhead_ns = 0\nrecv_overhead_ns = 0.0\nsend_latency_ns = 0\nrecv_latency_ns = 0.0",
        "swing-bandwidth",
        65536,
        "packet",
    ));
    assert_eq!(base, zero);
    // The flow backend (explicit, and auto on a contention-free plan) sees the overheads.
    let rt = |t: &str| {
        summary(t)["traffic"][0]["runtime_ps"]
            .as_u64()
            .or_else(|| summary(t)["runtime_ps"].as_u64())
            .unwrap_or_else(|| panic!("{}", summary(t)))
    };
    for backend in ["flow", "auto"] {
        let off = rt(&allreduce("", "bucket", 1 << 20, backend));
        let on =
            rt(&allreduce("[endpoint]\nsend_overhead_ns = 1000\nrecv_overhead_ns = 500", "bucket", 1 << 20, backend));
        assert!(on >= off + 1_500_000, "{backend}: {on} vs {off}");
    }
}

#[test]
fn random_endpoint_values_keep_data_verified_runs_slower_and_deterministic() {
    let mut rng = Rng::new(13);
    let algs = ["swing-bandwidth", "ring", "recursive-doubling-latency", "bucket"];
    for case in 0..12 {
        let alg = algs[case % algs.len()];
        let bytes = 1 + rng.below(256 << 10);
        let mut lines = vec![
            format!("send_overhead_ns = {}", rng.below(3000) as f64 / 3.0),
            format!("recv_overhead_ns = {}", rng.below(3000) as f64 / 7.0),
        ];
        if rng.below(2) == 0 {
            lines.push(format!("send_latency_ns = {}", rng.below(1000)));
            lines.push(format!("recv_latency_ns = {}", rng.below(1000)));
        }
        if rng.below(2) == 0 {
            lines.push(format!("rendezvous_threshold_bytes = {}", rng.below(64 << 10)));
        }
        if rng.below(2) == 0 {
            lines.push(format!("injection_gbps = {}", 50 + rng.below(1600)));
        }
        let ep = format!("[endpoint]\n{}", lines.join("\n"));
        let text = allreduce(&ep, alg, bytes, "packet");
        let a = run_scenario_str(&text, &RunOptions::default()).unwrap();
        let b = run_scenario_str(&text, &RunOptions::default()).unwrap();
        assert!(a.summary_json == b.summary_json && a.files == b.files, "case {case}: not deterministic\n{text}");
        let s: Value = serde_json::from_str(&a.summary_json).unwrap();
        let t = &s["traffic"][0];
        assert_eq!(t["result_verified"], true, "case {case}\n{text}");
        assert_eq!(t["messages_verified"], t["messages"], "case {case}: control packets are not messages\n{text}");
        let off = summary(&allreduce("", alg, bytes, "packet"));
        assert!(
            t["runtime_ps"].as_u64() >= off["traffic"][0]["runtime_ps"].as_u64(),
            "case {case}: faster with endpoint costs\n{text}"
        );
    }
}

#[test]
fn the_alpha_beta_model_predicts_the_endpoint_costs_of_contention_free_plans() {
    use reducelab_sched::model::{deficiencies, EndpointCosts};
    // α = what one step costs beyond its bytes at packet level for one hop: link latency,
    // the receiving torus node's pipeline latency and one packet's store-and-forward.
    let alpha = (100_000.0 + 300_000.0) * 1e-12;
    let beta = 8.0 / 400e9;
    let eps = [
        EndpointConfig { send_overhead_ps: 400_000, recv_overhead_ps: 400_000, ..OFF },
        EndpointConfig { send_overhead_ps: 150_000, recv_overhead_ps: 900_000, ..OFF },
        EndpointConfig {
            send_overhead_ps: 300_000,
            recv_overhead_ps: 100_000,
            rendezvous_threshold_bytes: Some(4096),
            ..OFF
        },
        EndpointConfig {
            send_overhead_ps: 201_000,
            send_latency_ps: 170_000,
            recv_overhead_ps: 310_000,
            recv_latency_ps: 250_000,
            ..OFF
        },
    ];
    for (dims, alg) in [(vec![8u32], "ring"), (vec![4, 4], "bucket")] {
        let topo = torus(&dims, L).unwrap();
        let s = build(alg, Collective::Allreduce, &Layout::new(dims.clone()).unwrap()).unwrap();
        for bytes in [64u64 << 10, 4 << 20] {
            let d = deficiencies(&s, &topo, bytes, dims.len() as u32).unwrap();
            let base = packet(&topo, &s, bytes, OFF) as f64 * 1e-12;
            for ep in eps {
                let c = EndpointCosts {
                    send_overhead_s: ep.send_overhead_ps as f64 * 1e-12,
                    send_latency_s: ep.send_latency_ps as f64 * 1e-12,
                    recv_overhead_s: ep.recv_overhead_ps as f64 * 1e-12,
                    recv_latency_s: ep.recv_latency_ps as f64 * 1e-12,
                    rendezvous_threshold_bytes: ep.rendezvous_threshold_bytes,
                    injection_bps: None,
                };
                let model_extra = d.cost_seconds_endpoint(alpha, beta, 0.0, &c) - d.cost_seconds(alpha, beta, 0.0);
                let p = packet(&topo, &s, bytes, ep) as f64 * 1e-12;
                let model = d.cost_seconds_endpoint(alpha, beta, 0.0, &c);
                // The endpoint share: exact for overheads; a rendezvous round trip in the model
                // leaves out the two header serialisations (0.2% of it here).
                let share = ((p - base) - model_extra).abs() / model_extra;
                assert!(
                    share <= 0.01,
                    "{alg} {dims:?} {bytes} {ep:?}: packet +{:.4e} s, model +{model_extra:.4e} s",
                    p - base
                );
                // The whole time, within 2% (the base model has no store-and-forward term).
                assert!(
                    (model - p).abs() / p <= 0.02,
                    "{alg} {dims:?} {bytes} {ep:?}: packet {p:.4e} s, model {model:.4e} s"
                );
            }
        }
    }
}

#[test]
fn the_models_injection_ceiling_caps_a_ranks_ports_together() {
    use reducelab_sched::model::{deficiencies, EndpointCosts};
    let topo = torus(&[4, 4], LinkParams { bandwidth_bps: 100_000_000_000, latency_ps: 100_000 }).unwrap();
    let layout = Layout::new(vec![4, 4]).unwrap();
    let beta = 8.0 / 100e9;
    let cap = EndpointCosts { injection_bps: Some(200e9), ..EndpointCosts::default() };
    // Bucket sends on 4 ports at once: min(4 x 100, 200) Gb/s halves its bandwidth term.
    let d = deficiencies(&build("bucket", Collective::Allreduce, &layout).unwrap(), &topo, 8 << 20, 2).unwrap();
    let (off, on) = (d.cost_seconds(0.0, beta, 0.0), d.cost_seconds_endpoint(0.0, beta, 0.0, &cap));
    assert!((on / off - 2.0).abs() < 1e-9, "{on} vs {off}");
    // Ring sends on one port: min(100, 200) Gb/s, unchanged.
    let d = deficiencies(&build("ring", Collective::Allreduce, &layout).unwrap(), &topo, 8 << 20, 2).unwrap();
    let (off, on) = (d.cost_seconds(0.0, beta, 0.0), d.cost_seconds_endpoint(0.0, beta, 0.0, &cap));
    assert!((on / off - 1.0).abs() < 1e-12, "{on} vs {off}");
}

/// summary.json says which endpoint costs and which switch kind made a result, at packet and
/// at flow level (values in the summary's units: ps, bytes, bits per second).
#[test]
fn summary_records_the_endpoint_costs_and_the_router_kind() {
    let ep = "[endpoint]\nsend_overhead_ns = 12.5\nsend_latency_ns = 3\nrecv_overhead_ns = 7\nrecv_latency_ns = 4\nrendezvous_threshold_bytes = 12000\ninjection_gbps = 50";
    for backend in ["packet", "flow"] {
        let s = summary(&allreduce(ep, "ring", 1 << 16, backend));
        assert_eq!(s["backend"], backend);
        let e = &s["endpoint"];
        assert_eq!(
            (e["send_overhead_ps"].as_u64(), e["recv_overhead_ps"].as_u64()),
            (Some(12_500), Some(7_000)),
            "{backend}: {e}"
        );
        assert_eq!(
            (e["send_latency_ps"].as_u64(), e["recv_latency_ps"].as_u64()),
            (Some(3_000), Some(4_000)),
            "{backend}: {e}"
        );
        assert_eq!(
            (e["rendezvous_threshold_bytes"].as_u64(), e["injection_bps"].as_u64()),
            (Some(12_000), Some(50_000_000_000)),
            "{backend}: {e}"
        );
        assert_eq!(s["network"]["router"]["kind"], "output_queued", "{backend}");
        let off = summary(&allreduce("", "ring", 1 << 16, backend));
        assert_eq!(off["endpoint"]["send_overhead_ps"].as_u64(), Some(0));
        assert!(
            off["endpoint"]["rendezvous_threshold_bytes"].is_null() && off["endpoint"]["injection_bps"].is_null(),
            "{backend}: {}",
            off["endpoint"]
        );
    }
    let ib = "[network]\nrouter = \"input_buffered\"\ninput_buffer_bytes = 65536\noutput_buffer_bytes = 8192\ncrossbar_speedup = 2.0";
    let r = &summary(&allreduce(ib, "ring", 1 << 16, "packet"))["network"]["router"];
    assert_eq!(r["kind"], "input_buffered");
    assert_eq!(
        (r["input_buffer_bytes"].as_u64(), r["output_buffer_bytes"].as_u64(), r["crossbar_speedup"].as_f64()),
        (Some(65536), Some(8192), Some(2.0)),
        "{r}"
    );
}
