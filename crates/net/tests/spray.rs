//! Per-packet spraying (`NetConfig::spray`): a message's packets cycle through every up/down
//! path of a fat tree, each once per cycle, in both directions; without it every packet of a
//! message takes the same path.
use reducelab_des::Rng;
use reducelab_net::*;
use reducelab_topo::*;

mod common;
use common::{lp, Batch, GBPS100};

const PAYLOAD: u64 = 4096 - 64;

fn run(topo: &Topology, cfg: NetConfig, ndp: bool, msgs: Vec<(u32, u32, u64)>) -> Network {
    let mut net = Network::new(topo, cfg, vec![], &Rng::new(7)).unwrap();
    if ndp {
        net.set_transport(TransportConfig::Ndp(NdpConfig {
            initial_window_packets: 8,
            data_queue_packets: 8,
            rto_ps: 1_000_000_000,
        }))
        .unwrap();
    }
    let end = net.run(&mut Batch::at_zero(&msgs), None, &mut |_| {});
    assert_eq!(end, RunEnd::Stopped);
    assert!(net.messages().iter().all(|m| m.verified()));
    net
}

fn cfg(routing: RoutingAlgo, spray: bool, fc: FlowControl) -> NetConfig {
    NetConfig {
        mtu_bytes: 4096,
        header_bytes: 64,
        switch_latency_ps: 100_000,
        buffer_bytes: 1 << 20,
        flow_control: fc,
        routing,
        spray,
        ..NetConfig::default()
    }
}

/// Packets sent up each link from a switch `d` links from host `from` to one `d + 1` links
/// from it (sorted by link): `d = 1`, the uplinks of `from`'s edge switch; `d = 2`, the
/// aggregation→core links of `from`'s pod. (Up: the far end has no host, so it is no edge
/// switch.)
fn packets_between(net: &Network, topo: &Topology, from: u32, d: u32) -> Vec<u64> {
    let dist = topo.bfs_from(topo.host_node(from));
    let has_host =
        |n: u32| topo.nodes[n as usize].ports.iter().any(|pp| topo.nodes[pp.peer.idx()].kind == NodeKind::Host);
    let is_switch = |n: u32| topo.nodes[n as usize].kind == NodeKind::Switch;
    let mut v: Vec<(u32, u64)> = net
        .port_stats()
        .iter()
        .filter(|p| {
            is_switch(p.node)
                && is_switch(p.peer_node)
                && dist[p.node as usize] == d
                && dist[p.peer_node as usize] == d + 1
                && !has_host(p.peer_node)
        })
        .map(|p| (p.link, p.packets))
        .collect();
    v.sort();
    v.into_iter().map(|(_, n)| n).collect()
}

/// k = 4: four paths between pods. A 40-packet message sprayed obliviously (`ecmp`) puts
/// exactly 10 packets on each aggregation→core link of its pod and 20 on each edge→aggregation
/// uplink (each cycle of 4 path numbers is the 4 paths); per flow, all 40 share one path.
#[test]
fn a_sprayed_message_uses_every_path_equally() {
    let topo = fat_tree_3level(4, 2, lp(GBPS100, 1_000_000), lp(GBPS100, 1_000_000)).unwrap();
    // host 0 (pod 0) to host 15 (pod 3)
    let msgs = vec![(0, 15, 40 * PAYLOAD)];
    let sprayed = run(&topo, cfg(RoutingAlgo::Ecmp, true, FlowControl::Credit), false, msgs.clone());
    assert_eq!(packets_between(&sprayed, &topo, 0, 2), vec![10, 10, 10, 10]);
    assert_eq!(packets_between(&sprayed, &topo, 0, 1), vec![20, 20]);
    let per_flow = run(&topo, cfg(RoutingAlgo::Ecmp, false, FlowControl::Credit), false, msgs);
    let mut v = packets_between(&per_flow, &topo, 0, 2);
    v.sort();
    assert_eq!(v, vec![0, 0, 0, 40]);
}

/// k = 8: 16 paths. Under NDP the data packets (sender's cycle) and the ACKs, NACKs and PULLs
/// (receiver's cycle) each spread over the 16 paths as evenly as whole cycles allow: the
/// counts of any two core links differ by at most the number of cycles' leftovers (one per
/// direction).
#[test]
fn ndp_sprays_data_and_control_packets() {
    let topo = fat_tree_3level(8, 4, lp(GBPS100, 1_000_000), lp(GBPS100, 1_000_000)).unwrap();
    let (src, dst) = (0, 127); // pod 0 to pod 7
    let net = run(&topo, cfg(RoutingAlgo::Ecmp, true, FlowControl::DropTail), true, vec![(src, dst, 100 * PAYLOAD)]);
    let t = net.transport_stats().unwrap();
    assert_eq!(t.trims, 0, "a lone flow meets no contention");
    let up = packets_between(&net, &topo, src, 2);
    assert_eq!(up.len(), 16);
    assert_eq!(up.iter().sum::<u64>(), 100);
    assert!(up.iter().all(|&n| n == 6 || n == 7), "{up:?}"); // 100 = 6 cycles of 16 + 4
    let back = packets_between(&net, &topo, dst, 2);
    let total: u64 = back.iter().sum();
    let (lo, hi) = (total / 16, total.div_ceil(16));
    // One ACK or NACK per data packet, less those still on their way when the run stops (at
    // most a window of 8).
    assert!(total >= 100 - 8 && back.iter().all(|&n| n == lo || n == hi), "{total}: {back:?}");
}

/// Per-packet tie-breaks under `adaptive` routing: a lone flow at line rate meets equal
/// queues at every choice, so a sprayed message again covers all four paths equally (per
/// flow, one path).
#[test]
fn adaptive_ties_follow_the_path_number() {
    let topo = fat_tree_3level(4, 2, lp(GBPS100, 1_000_000), lp(GBPS100, 1_000_000)).unwrap();
    let msgs = vec![(0, 15, 40 * PAYLOAD)];
    let sprayed = run(&topo, cfg(RoutingAlgo::Adaptive, true, FlowControl::Credit), false, msgs.clone());
    assert_eq!(packets_between(&sprayed, &topo, 0, 2), vec![10, 10, 10, 10]);
    let per_flow = run(&topo, cfg(RoutingAlgo::Adaptive, false, FlowControl::Credit), false, msgs);
    let mut v = packets_between(&per_flow, &topo, 0, 2);
    v.sort();
    assert_eq!(v, vec![0, 0, 0, 40]);
}

/// NIC-port spreading counts NDP messages: on a 4×4 torus, host 0's two messages to host 5
/// (one hop +x and one +y, both minimal first hops) leave by different ports, as raw messages
/// do. (Before NDP messages were counted, both chose the first port.)
#[test]
fn ndp_messages_spread_over_nic_ports() {
    let topo = torus(&[4, 4], lp(GBPS100, 1_000_000)).unwrap();
    for ndp in [false, true] {
        let net = run(
            &topo,
            cfg(RoutingAlgo::Adaptive, false, FlowControl::DropTail),
            ndp,
            vec![(0, 5, 20 * PAYLOAD), (0, 5, 20 * PAYLOAD)],
        );
        let host0 = topo.host_node(0).0;
        let mut used: Vec<u64> =
            net.port_stats().iter().filter(|p| p.node == host0 && p.packets > 0).map(|p| p.packets).collect();
        used.sort();
        // Only the two messages' data leaves host 0 (its ACKs come back to it): 20 packets
        // each, more under NDP if some were retransmitted.
        assert_eq!(used.len(), 2, "ndp {ndp}: {used:?}");
        assert!(used.iter().all(|&n| n >= 20), "ndp {ndp}: {used:?}");
    }
}

/// Routing an arrival one event early (`Network::set_route_ahead_min_ports`; by default only
/// above 8,192 ports) is a speed choice: on a small fat tree with the early route forced on,
/// every message ends at the same picosecond and every port carries the same packets, with
/// NDP (trims, NACKs, pulls) and with raw lossless messages, per-flow and sprayed.
#[test]
fn routing_one_event_early_changes_no_result() {
    let topo = fat_tree_3level(4, 2, lp(GBPS100, 1_000_000), lp(GBPS100, 1_000_000)).unwrap();
    let mut rng = Rng::new(11);
    let hosts = topo.num_hosts() as u32;
    let msgs: Vec<(u32, u32, u64)> = (0..48)
        .map(|_| {
            let s = rng.below(hosts as u64) as u32;
            let d = (s + 1 + rng.below(hosts as u64 - 1) as u32) % hosts;
            (s, d, (1 + rng.below(60)) * PAYLOAD)
        })
        .collect();
    for (routing, spray, fc, ndp) in [
        (RoutingAlgo::Ecmp, true, FlowControl::DropTail, true),
        (RoutingAlgo::Ecmp, false, FlowControl::Credit, false),
        (RoutingAlgo::Minimal, false, FlowControl::Credit, false),
    ] {
        let go = |min_ports: usize| {
            let mut net = Network::new(&topo, cfg(routing, spray, fc), vec![], &Rng::new(7)).unwrap();
            net.set_route_ahead_min_ports(min_ports);
            if ndp {
                net.set_transport(TransportConfig::Ndp(NdpConfig {
                    initial_window_packets: 8,
                    data_queue_packets: 8,
                    rto_ps: 1_000_000_000,
                }))
                .unwrap();
            }
            assert_eq!(net.run(&mut Batch::at_zero(&msgs), None, &mut |_| {}), RunEnd::Stopped);
            assert!(net.messages().iter().all(|m| m.verified()));
            let ends: Vec<u64> = net.messages().iter().map(|m| m.end.0).collect();
            let ports: Vec<(u32, u64, u64, u64)> =
                net.port_stats().iter().map(|p| (p.link, p.packets, p.bytes, p.drops)).collect();
            let st = net.stats();
            (ends, ports, (st.events, st.packet_hops, st.drops_buffer))
        };
        let (early, default) = (go(0), go(usize::MAX));
        assert_eq!(early.0, default.0, "{routing:?} spray={spray}: message end times");
        assert_eq!(early.1, default.1, "{routing:?} spray={spray}: port counters");
        assert_eq!(early.2, default.2, "{routing:?} spray={spray}: events, hops, drops");
    }
}
