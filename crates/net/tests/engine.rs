use reducelab_des::{Rng, SimDuration, SimTime};
use reducelab_net::*;
use reducelab_topo::*;

mod common;
use common::{lp, Batch, GBPS100};

fn run(topo: &Topology, cfg: NetConfig, msgs: Vec<(u32, u32, u64, u64)>, faults: Vec<Fault>) -> (Network, RunEnd) {
    let mut net = Network::new(topo, cfg, faults, &Rng::new(1)).unwrap();
    let mut w = Batch::new(msgs);
    let end = net.run(&mut w, None, &mut |_| {});
    (net, end)
}

fn cfg() -> NetConfig {
    NetConfig {
        mtu_bytes: 4096,
        header_bytes: 64,
        switch_latency_ps: 300_000,
        buffer_bytes: 1 << 20,
        ..NetConfig::default()
    }
}

/// Store-and-forward tandem queue (max-plus recurrence): packet `i` starts on link `j` when
/// it has fully arrived there (plus the node's pipeline latency) and link `j` has finished
/// packet `i-1`. Every forwarding node charges its pipeline latency on receipt, including
/// a torus node receiving a packet for its own host. Exact in integer picoseconds; credits
/// never bind with a 1 MiB buffer.
fn analytic_ps(bytes: u64, hops: usize, dst_forwards: bool, c: &NetConfig, bw: u64, lat: u64) -> u64 {
    let payload = c.payload_per_packet() as u64;
    let k = bytes.div_ceil(payload).max(1);
    let mut link_free = vec![0u64; hops];
    let mut last_arrival = 0;
    for i in 0..k {
        let pb = (bytes - i * payload).min(payload) + c.header_bytes as u64;
        let ser = SimDuration::serialization(pb, bw).ps();
        let mut ready = 0; // at the source: available immediately
        for (j, free) in link_free.iter_mut().enumerate() {
            let start = ready.max(*free);
            *free = start + ser;
            ready = *free + lat + if j + 1 < hops || dst_forwards { c.switch_latency_ps } else { 0 };
        }
        last_arrival = ready;
    }
    last_arrival
}

#[test]
fn lone_message_takes_the_analytical_time_exactly() {
    let c = cfg();
    let lat = 1_000_000;
    let cases: Vec<(Topology, u32, u32, usize)> = vec![
        (star(4, lp(GBPS100, lat)).unwrap(), 0, 3, 2),
        (fat_tree_3level(4, 2, lp(GBPS100, lat), lp(GBPS100, lat)).unwrap(), 0, 15, 6),
        (torus(&[8], lp(GBPS100, lat)).unwrap(), 0, 3, 3),
        (torus(&[4, 4], lp(GBPS100, lat)).unwrap(), 0, 10, 4),
    ];
    for (topo, s, d, hops) in cases {
        for bytes in [1u64, 4032, 4033, 100_000, 1 << 20] {
            let (net, end) = run(&topo, c.clone(), vec![(s, d, bytes, 0)], vec![]);
            assert_eq!(end, RunEnd::Stopped);
            let m = &net.messages()[0];
            assert!(m.verified());
            let dst_forwards = topo.nodes[topo.hosts[d as usize].idx()].forwards;
            assert_eq!(
                m.end.ps(),
                analytic_ps(bytes, hops, dst_forwards, &c, GBPS100, lat),
                "{} bytes={bytes}",
                topo.name
            );
        }
    }
}

#[test]
fn two_flows_share_a_bottleneck_equally() {
    let topo = star(3, lp(GBPS100, 1_000_000)).unwrap();
    let bytes = 20_000_000;
    let (net, _) = run(&topo, cfg(), vec![(0, 2, bytes, 0), (1, 2, bytes, 0)], vec![]);
    let wire = bytes + bytes.div_ceil(4032) * 64;
    let fair = SimDuration::serialization(2 * wire, GBPS100).ps() as f64;
    for m in net.messages() {
        assert!(m.verified());
        let t = m.end.ps() as f64;
        assert!((t / fair - 1.0).abs() < 0.01, "flow finished at {t} ps, fair share predicts {fair}");
    }
}

#[test]
fn credit_flow_control_never_drops_and_drop_tail_does() {
    let topo = star(9, lp(GBPS100, 1_000_000)).unwrap();
    let msgs: Vec<_> = (1..9).map(|s| (s, 0, 2_000_000, 0)).collect();
    let mut c = cfg();
    c.buffer_bytes = 16 * 1024;
    c.ecn_threshold_bytes = Some(8 * 1024);
    let (net, end) = run(&topo, c.clone(), msgs.clone(), vec![]);
    assert_eq!(end, RunEnd::Stopped);
    assert_eq!(net.stats().drops_buffer, 0);
    assert!(net.messages().iter().all(|m| m.verified()));
    assert!(net.stats().ecn_marks > 0, "incast must build a queue above the ECN threshold");
    let max_q = net.port_stats().iter().map(|p| p.max_queue_bytes).max().unwrap();
    assert!(max_q > 8 * 1024);

    c.flow_control = FlowControl::DropTail;
    let (net, end) = run(&topo, c, msgs, vec![]);
    assert!(net.stats().drops_buffer > 0);
    assert!(matches!(end, RunEnd::Stalled { ref reason } if reason.contains("buffer")), "{end:?}");
    // The output queue never exceeded its buffer.
    assert!(net.port_stats().iter().all(|p| p.max_queue_bytes <= 16 * 1024));
}

#[test]
fn ecn_marks_only_above_threshold() {
    let topo = star(3, lp(GBPS100, 1_000_000)).unwrap();
    let mut c = cfg();
    c.ecn_threshold_bytes = Some(1 << 19); // two flows never queue half a MiB with 64 KiB credits
    c.buffer_bytes = 64 * 1024;
    let (net, _) = run(&topo, c, vec![(0, 2, 4_000_000, 0), (1, 2, 4_000_000, 0)], vec![]);
    assert_eq!(net.stats().ecn_marks, 0);
}

#[test]
fn adaptive_routing_moves_load_off_a_hot_port() {
    // 2 leaves × 4 hosts, 2 spines. All four hosts of leaf 0 send to hosts of leaf 1 whose
    // indices are equal mod 2, so destination-mod-k sends everything up one spine.
    let topo = fat_tree_2level(2, 4, 2, 1, None, lp(GBPS100, 1_000_000), lp(GBPS100, 1_000_000)).unwrap();
    let msgs: Vec<_> = (0..4).map(|s| (s, if s % 2 == 0 { 4 } else { 6 }, 4_000_000, 0)).collect();
    let mut results = Vec::new();
    for routing in [RoutingAlgo::Minimal, RoutingAlgo::Adaptive, RoutingAlgo::CANARY] {
        let mut c = cfg();
        c.routing = routing;
        c.buffer_bytes = 32 * 1024;
        let (net, _) = run(&topo, c, msgs.clone(), vec![]);
        assert!(net.messages().iter().all(|m| m.verified()));
        // Leaf 0 is node 0; its up ports are 4 and 5.
        let ps = net.port_stats();
        let up: Vec<u64> = ps.iter().filter(|p| p.node == 0 && p.port >= 4).map(|p| p.bytes).collect();
        let end = net.messages().iter().map(|m| m.end.ps()).max().unwrap();
        results.push((routing, up, end));
    }
    let (_, ref up_min, end_min) = results[0];
    assert_eq!(up_min.iter().filter(|&&b| b == 0).count(), 1, "minimal uses one spine: {up_min:?}");
    for (r, up, end) in &results[1..] {
        let (lo, hi) = (*up.iter().min().unwrap() as f64, *up.iter().max().unwrap() as f64);
        assert!(lo / hi > 0.8, "{r:?} must balance the up ports: {up:?}");
        assert!((*end as f64) < 0.6 * end_min as f64, "{r:?} finished at {end}, minimal at {end_min}");
    }
}

/// Threshold-adaptive routing is parameterised: Canary's rule is its 50%-of-buffer instance
/// (the same run, byte for byte, however the threshold is written), an unreachable threshold
/// is plain destination-mod-k (identical to `minimal` on a fat tree), and the threshold
/// decides when packets leave the default port.
#[test]
fn threshold_adaptive_routing_is_canary_at_half_the_buffer() {
    let topo = fat_tree_2level(2, 4, 2, 1, None, lp(GBPS100, 1_000_000), lp(GBPS100, 1_000_000)).unwrap();
    let msgs: Vec<_> = (0..4).map(|s| (s, if s % 2 == 0 { 4 } else { 6 }, 4_000_000, 0)).collect();
    let buffer = 32 * 1024 + 3; // odd, so rounding of the half would show
    let outcome = |routing: RoutingAlgo| {
        let mut c = cfg();
        c.routing = routing;
        c.buffer_bytes = buffer;
        let (net, end) = run(&topo, c, msgs.clone(), vec![]);
        assert_eq!(end, RunEnd::Stopped);
        assert!(net.messages().iter().all(|m| m.verified()));
        let ends: Vec<u64> = net.messages().iter().map(|m| m.end.ps()).collect();
        let bytes: Vec<u64> = net.port_stats().iter().map(|p| p.bytes).collect();
        (ends, bytes)
    };
    let canary = outcome(RoutingAlgo::CANARY);
    assert_eq!(canary, outcome(RoutingAlgo::ThresholdAdaptive(AdaptiveThreshold::BufferPercent(50))));
    assert_eq!(canary, outcome(RoutingAlgo::ThresholdAdaptive(AdaptiveThreshold::Bytes(buffer / 2))));
    // One byte lower is a different rule, and here a different run.
    assert_ne!(canary, outcome(RoutingAlgo::ThresholdAdaptive(AdaptiveThreshold::Bytes(buffer / 2 - 4096))));
    let never = outcome(RoutingAlgo::ThresholdAdaptive(AdaptiveThreshold::Bytes(u64::MAX)));
    assert_eq!(never, outcome(RoutingAlgo::Minimal));
    assert_ne!(never, canary);
    let end = |o: &(Vec<u64>, Vec<u64>)| *o.0.iter().max().unwrap();
    assert!((end(&canary) as f64) < 0.6 * end(&never) as f64);
}

#[test]
fn threshold_adaptive_routing_names_and_checks_its_parameter() {
    let topo = fat_tree_2level(2, 4, 2, 1, None, lp(GBPS100, 1_000_000), lp(GBPS100, 1_000_000)).unwrap();
    let mut c = cfg();
    c.routing = RoutingAlgo::ThresholdAdaptive(AdaptiveThreshold::BufferPercent(101));
    let err = Network::new(&topo, c, vec![], &Rng::new(1)).err().expect("101% is rejected");
    assert!(err.contains("0..=100 percent") && err.contains("101"), "{err}");
    assert_eq!(format!("{:?}", RoutingAlgo::CANARY), "Canary");
    assert_eq!(
        format!("{:?}", RoutingAlgo::ThresholdAdaptive(AdaptiveThreshold::Bytes(7))),
        "ThresholdAdaptive(Bytes(7))"
    );
    // Not deadlock-free on a lossless torus, by either name.
    let t = torus(&[4, 4], lp(GBPS100, 1_000_000)).unwrap();
    let e1 = VcPolicy::choose(&t, RoutingAlgo::CANARY, FlowControl::Credit).unwrap_err();
    assert!(e1.contains("routing 'canary'"), "{e1}");
    let e2 = VcPolicy::choose(&t, RoutingAlgo::ThresholdAdaptive(AdaptiveThreshold::Bytes(1)), FlowControl::Credit)
        .unwrap_err();
    assert!(e2.contains("routing 'threshold-adaptive'"), "{e2}");
}

fn all_to_all(n: u32, bytes: u64) -> Vec<(u32, u32, u64, u64)> {
    let mut v = Vec::new();
    for s in 0..n {
        for d in 0..n {
            if s != d {
                v.push((s, d, bytes, 0));
            }
        }
    }
    v
}

#[test]
fn lossless_torus_and_hop_index_networks_do_not_deadlock_under_all_to_all() {
    let l = lp(400_000_000_000, 100_000);
    let cases = vec![
        (torus(&[4, 4], l).unwrap(), RoutingAlgo::Minimal),
        (torus(&[4, 4], l).unwrap(), RoutingAlgo::Adaptive),
        (torus(&[5, 3, 2], l).unwrap(), RoutingAlgo::Adaptive),
        (hyperx(&[4, 4], l).unwrap(), RoutingAlgo::Minimal),
        (hyperx(&[4, 4], l).unwrap(), RoutingAlgo::Adaptive),
        (hammingmesh(2, 2, 2, 2, l, l).unwrap(), RoutingAlgo::Adaptive),
        (dragonfly(5, 2, 2, 2, l, l, l).unwrap(), RoutingAlgo::Adaptive),
    ];
    for (topo, routing) in cases {
        let mut c = cfg();
        c.routing = routing;
        c.buffer_bytes = 8 * 1024; // two packets per VC: as tight as it gets
        let n = topo.num_hosts() as u32;
        let (net, end) = run(&topo, c, all_to_all(n, 50_000), vec![]);
        assert_eq!(end, RunEnd::Stopped, "{} {routing:?}", topo.name);
        assert!(net.messages().iter().all(|m| m.verified()));
        assert_eq!(net.packets_in_flight(), 0);
    }
}

#[test]
fn lossy_links_lose_raw_messages_and_the_run_says_why() {
    let topo = star(4, lp(GBPS100, 1_000_000)).unwrap();
    let mut c = cfg();
    c.loss_probability = 0.01;
    let (net, end) = run(&topo, c, vec![(0, 1, 4_000_000, 0)], vec![]);
    assert!(net.stats().drops_loss > 0);
    match end {
        RunEnd::Stalled { reason } => assert!(reason.contains("link loss"), "{reason}"),
        e => panic!("expected a stall, got {e:?}"),
    }
}

#[test]
fn traffic_routes_around_a_failed_link() {
    // Fail leaf 0's link to spine 0 at t=0; adaptive and minimal routing avoid it.
    let topo = fat_tree_2level(2, 2, 2, 1, None, lp(GBPS100, 1_000_000), lp(GBPS100, 1_000_000)).unwrap();
    let up_link = topo.nodes[0].ports[2].link.0;
    for routing in [RoutingAlgo::Minimal, RoutingAlgo::Adaptive] {
        let mut c = cfg();
        c.routing = routing;
        let (net, end) = run(
            &topo,
            c,
            vec![(0, 2, 1_000_000, 10), (1, 3, 1_000_000, 10)],
            vec![Fault::Link { link: up_link, at: SimTime(0) }],
        );
        assert_eq!(end, RunEnd::Stopped);
        assert!(net.messages().iter().all(|m| m.verified()));
        assert_eq!(net.port_stats().iter().find(|p| p.link == up_link && p.node == 0).unwrap().bytes, 0);
    }
}

#[test]
fn routing_reconverges_after_a_failure_instead_of_dead_ending() {
    // Leaf 0's link to spine 0 fails before traffic starts. Hosts of leaf 1 send to leaf 0:
    // minimal routing would still send half of them through spine 0, a dead end; after
    // reconvergence no packet is lost.
    let topo = fat_tree_2level(2, 4, 2, 1, None, lp(GBPS100, 1_000_000), lp(GBPS100, 1_000_000)).unwrap();
    let dead = topo.nodes[0].ports[4].link.0;
    for routing in [RoutingAlgo::Minimal, RoutingAlgo::CANARY] {
        let mut c = cfg();
        c.routing = routing;
        let msgs: Vec<_> = (4..8).map(|s| (s, s - 4, 500_000, 1_000)).collect();
        let (net, end) = run(&topo, c, msgs, vec![Fault::Link { link: dead, at: SimTime(0) }]);
        assert_eq!(end, RunEnd::Stopped, "{routing:?}");
        assert_eq!(net.stats().drops_no_route + net.stats().drops_failure, 0);
        assert!(net.messages().iter().all(|m| m.verified()));
    }
}

#[test]
fn a_switch_failing_mid_run_is_reported_not_hung() {
    let topo = star(4, lp(GBPS100, 1_000_000)).unwrap();
    let sw = topo.nodes.iter().position(|n| n.kind == NodeKind::Switch).unwrap() as u32;
    let (net, end) =
        run(&topo, cfg(), vec![(0, 1, 10_000_000, 0)], vec![Fault::Node { node: sw, at: SimTime(50_000_000) }]);
    assert!(net.stats().drops_failure > 0);
    assert!(matches!(end, RunEnd::Stalled { ref reason } if reason.contains("failures")), "{end:?}");
}

#[test]
fn same_seed_same_results() {
    let topo = fat_tree_3level(4, 2, lp(GBPS100, 1_000_000), lp(GBPS100, 1_000_000)).unwrap();
    let mut c = cfg();
    c.noise_probability = 0.1;
    c.noise_delay_ps = 1_000_000;
    let msgs = all_to_all(16, 30_000);
    let (a, _) = run(&topo, c.clone(), msgs.clone(), vec![]);
    let (b, _) = run(&topo, c, msgs, vec![]);
    let ea: Vec<u64> = a.messages().iter().map(|m| m.end.ps()).collect();
    let eb: Vec<u64> = b.messages().iter().map(|m| m.end.ps()).collect();
    assert_eq!(ea, eb);
    assert_eq!(a.stats().events, b.stats().events);
}

#[test]
fn os_noise_delays_injection() {
    let topo = star(2, lp(GBPS100, 1_000_000)).unwrap();
    let mut c = cfg();
    let (quiet, _) = run(&topo, c.clone(), vec![(0, 1, 4_032_000, 0)], vec![]);
    c.noise_probability = 0.1;
    c.noise_delay_ps = 1_000_000;
    let (noisy, _) = run(&topo, c, vec![(0, 1, 4_032_000, 0)], vec![]);
    // 1000 packets, ~100 delayed by 1 µs each.
    let extra = noisy.messages()[0].end.ps() - quiet.messages()[0].end.ps();
    assert!((70_000_000..130_000_000).contains(&extra), "noise added {extra} ps");
}

/// Parking lot on a ring: every node sends to the node `dist` hops ahead, so each link
/// carries `dist` flows and the flow from farthest away must win at every merge point.
/// Age-based arbitration keeps every link busy: the all-flows completion time equals
/// `dist` × one message's serialisation (±1%). (Plain round-robin over VC queues and the
/// host port took 1.9–2.2× here.)
#[test]
fn age_arbitration_keeps_multi_hop_links_busy() {
    let topo = torus(&[8], lp(400_000_000_000, 100_000)).unwrap();
    for dist in [2u32, 3, 4] {
        let mut c = cfg();
        c.routing = RoutingAlgo::Minimal;
        c.buffer_bytes = 256 * 1024;
        let bytes = 8u64 << 20;
        let msgs: Vec<_> = (0..8).map(|r| (r, (r + dist) % 8, bytes, 0)).collect();
        let (net, end) = run(&topo, c.clone(), msgs, vec![]);
        assert_eq!(end, RunEnd::Stopped);
        let t = net.messages().iter().map(|m| m.end.ps()).max().unwrap() as f64;
        let wire = bytes + bytes.div_ceil(c.payload_per_packet() as u64) * 64;
        let ideal = dist as f64 * SimDuration::serialization(wire, 400_000_000_000).ps() as f64;
        assert!((t / ideal - 1.0).abs() < 0.01, "dist {dist}: {t} ps vs ideal {ideal}");
    }
}

#[test]
fn a_packet_for_a_host_cut_off_by_a_failure_is_dropped_where_it_stands() {
    // Host 3's only link fails before traffic starts: nothing can reach it any more. Its
    // packets are dropped as `no_route` at the first switch (leaf 0), never sent on through
    // some other port (before the fix the table's empty list aliased its first list, port 0,
    // and sent them back down to host 0). Traffic from host 1 to host 2 is unaffected.
    let topo = fat_tree_2level(2, 2, 2, 1, None, lp(GBPS100, 1_000_000), lp(GBPS100, 1_000_000)).unwrap();
    let host3 = topo.hosts[3];
    let dead = topo.nodes[host3.idx()].ports[0].link.0;
    let leaf0_down_to_host0 = topo.nodes[0].ports[0].link.0;
    for routing in [RoutingAlgo::Minimal, RoutingAlgo::Adaptive] {
        let mut c = cfg();
        c.routing = routing;
        let (net, _) = run(
            &topo,
            c,
            vec![(0, 3, 100_000, 10), (1, 2, 100_000, 10)],
            vec![Fault::Link { link: dead, at: SimTime(0) }],
        );
        assert!(net.stats().drops_no_route > 0, "{routing:?}");
        assert!(net.messages()[1].verified(), "{routing:?}");
        let down = net.port_stats().into_iter().find(|p| p.link == leaf0_down_to_host0 && p.node == 0).unwrap();
        assert_eq!(down.bytes, 0, "{routing:?}: packets for the cut-off host went back down to host 0");
    }
}

/// Protocol packets addressed to a switch, one before and one after a link on their way fails:
/// the second goes round (leaf 0 → spine 1 → leaf 1 → spine 0). The distances towards a switch
/// are recomputed when the routes reconverge, not kept from before the failure (kept, leaf 0
/// saw spine 0 one hop away over the dead link and dropped the packet as unroutable).
#[test]
fn packets_addressed_to_a_switch_route_around_a_link_that_failed_after_the_first() {
    struct ToSwitch {
        target: u32,
        arrived: Vec<(u64, u16)>,
        lost: u32,
    }
    impl ToSwitch {
        fn inject(&self, net: &mut Network) {
            let p = AppPacket { app: 0, wire_bytes: 128, dst: AppDst::Node(self.target), intercept: false };
            net.app_inject(0, 0, p);
        }
    }
    impl Workload for ToSwitch {
        fn on_start(&mut self, net: &mut Network) {
            net.set_programmable(self.target, true);
            self.inject(net);
            net.schedule_timer(SimTime(100_000_000), 0);
        }
        fn on_timer(&mut self, net: &mut Network, _token: u64) {
            self.inject(net);
        }
        fn on_app_at_switch(&mut self, net: &mut Network, node: u32, in_port: u16, pkt: PktId) {
            assert_eq!(node, self.target);
            self.arrived.push((net.now().ps(), in_port));
            net.app_consume(pkt);
            if self.arrived.len() == 2 {
                net.stop();
            }
        }
        fn on_app_lost(&mut self, _net: &mut Network, _app: u32) {
            self.lost += 1;
        }
    }
    let topo = fat_tree_2level(2, 2, 2, 1, None, lp(GBPS100, 1_000_000), lp(GBPS100, 1_000_000)).unwrap();
    let (spine, link) = (topo.nodes[0].ports[2].peer.0, topo.nodes[0].ports[2].link.0);
    for routing in [RoutingAlgo::Minimal, RoutingAlgo::Adaptive] {
        let mut c = cfg();
        c.routing = routing;
        let mut net =
            Network::new(&topo, c, vec![Fault::Link { link, at: SimTime(50_000_000) }], &Rng::new(1)).unwrap();
        let mut w = ToSwitch { target: spine, arrived: Vec::new(), lost: 0 };
        let end = net.run(&mut w, None, &mut |_| {});
        assert_eq!((end, w.lost, net.stats().drops_no_route), (RunEnd::Stopped, 0, 0), "{routing:?}");
        // The first straight up from leaf 0 (one link each way: 2 µs and change), the second
        // in through the other leaf's port after three links.
        assert_ne!(w.arrived[0].1, w.arrived[1].1, "{routing:?}: the second came another way");
        assert!(w.arrived[1].0 - 100_000_000 > 4_000_000, "{routing:?}: {:?}", w.arrived);
    }
}
