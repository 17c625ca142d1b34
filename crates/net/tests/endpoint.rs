//! Endpoint costs (send/receive overhead, rendezvous, injection ceiling) at packet level:
//! exact picosecond checks against runs of the same network without them.
use reducelab_des::Rng;
use reducelab_net::*;
use reducelab_topo::*;

mod common;
use common::{lp, Batch, GBPS100};

const LAT: u64 = 1_000_000;

fn cfg() -> NetConfig {
    NetConfig {
        mtu_bytes: 4096,
        header_bytes: 64,
        switch_latency_ps: 300_000,
        buffer_bytes: 1 << 20,
        ..NetConfig::default()
    }
}

/// Runs the batch; returns the network and the delivery times by message.
fn run(topo: &Topology, ep: EndpointConfig, msgs: Vec<(u32, u32, u64, u64, Option<u16>)>) -> (Network, Vec<u64>) {
    let mut net = Network::new(topo, cfg(), vec![], &Rng::new(1)).unwrap();
    net.set_endpoint(ep).unwrap();
    let n = msgs.len();
    let mut w = Batch::with_ports(msgs);
    let end = net.run(&mut w, None, &mut |_| {});
    assert_eq!(end, RunEnd::Stopped);
    assert!(net.messages().iter().all(|m| m.verified()), "every message verified");
    assert_eq!(net.messages().len(), n, "control packets are not messages");
    assert_eq!(net.foreground().delivered, n as u64);
    let mut t = vec![0; n];
    for &(m, at) in &w.seen {
        assert_eq!(net.messages()[m as usize].end.ps(), at, "the workload hears of a delivery when the message ends");
        t[m as usize] = at;
    }
    (net, t)
}

fn off() -> EndpointConfig {
    EndpointConfig::default()
}

#[test]
fn a_lone_message_pays_exactly_the_endpoint_overheads_and_latencies() {
    let topos = [
        star(4, lp(GBPS100, LAT)).unwrap(),
        torus(&[4, 4], lp(GBPS100, LAT)).unwrap(),
        fat_tree_3level(4, 2, lp(GBPS100, LAT), lp(GBPS100, LAT)).unwrap(),
    ];
    for topo in &topos {
        for bytes in [0u64, 1, 4032, 4033, 100_000, 1 << 20] {
            let msg = vec![(0, 3, bytes, 5_000, None)];
            let (_, base) = run(topo, off(), msg.clone());
            for (os, or) in [(1_234_000, 0), (0, 567_000), (1_234_000, 567_000), (1, 1)] {
                let ep = EndpointConfig { send_overhead_ps: os, recv_overhead_ps: or, ..off() };
                let (_, t) = run(topo, ep, msg.clone());
                assert_eq!(t[0], base[0] + os + or, "{} bytes={bytes} o_s={os} o_r={or}", topo.name);
            }
            // The latencies add to a lone message exactly, alone or with the overheads.
            for (os, ls, or, lr) in
                [(0, 170_000, 0, 0), (0, 0, 0, 250_000), (201_000, 170_000, 310_000, 250_000), (0, 1, 0, 1)]
            {
                let ep = EndpointConfig {
                    send_overhead_ps: os,
                    send_latency_ps: ls,
                    recv_overhead_ps: or,
                    recv_latency_ps: lr,
                    ..off()
                };
                let (_, t) = run(topo, ep, msg.clone());
                assert_eq!(t[0], base[0] + os + ls + or + lr, "{} bytes={bytes} {ep:?}", topo.name);
            }
        }
    }
}

#[test]
fn messages_posted_at_once_pay_serialised_send_overheads() {
    // Torus host 5 posts one small message on each of its 4 ports to its 4 neighbours at once:
    // the k-th leaves k send overheads after the post; every receiver is different, so the
    // receive overheads overlap.
    let topo = torus(&[4, 4], lp(GBPS100, LAT)).unwrap();
    let nbrs = [6u32, 4, 9, 1]; // ports 0..3: +x, -x, +y, -y of (1, 1)
    let msgs: Vec<_> = nbrs.iter().enumerate().map(|(p, &d)| (5, d, 1000, 0, Some(p as u16))).collect();
    let (_, base) = run(&topo, off(), msgs.clone());
    assert!(base.iter().all(|&t| t == base[0]), "one hop each: same time {base:?}");
    let (os, or) = (2_000_000, 700_000);
    let (_, t) = run(&topo, EndpointConfig { send_overhead_ps: os, recv_overhead_ps: or, ..off() }, msgs.clone());
    let mut sorted = t.clone();
    sorted.sort();
    let want: Vec<u64> = (1..=4).map(|k| base[0] + k * os + or).collect();
    assert_eq!(sorted, want);

    // The send latency overlaps the next message's send overhead: with it, every message
    // leaves `l_s` later, not `k·l_s` later.
    let ls = 5_000_000;
    let (_, t) =
        run(&topo, EndpointConfig { send_overhead_ps: os, send_latency_ps: ls, recv_overhead_ps: or, ..off() }, msgs);
    let mut sorted = t.clone();
    sorted.sort();
    assert_eq!(sorted, (1..=4).map(|k| base[0] + k * os + ls + or).collect::<Vec<_>>());

    // Four hosts send to one at once: the receive overheads are serialised at the receiver.
    let msgs: Vec<_> = nbrs.iter().map(|&s| (s, 5, 1000, 0, None)).collect();
    let (_, base) = run(&topo, off(), msgs.clone());
    let (_, t) = run(&topo, EndpointConfig { recv_overhead_ps: or, ..off() }, msgs.clone());
    let mut sorted = t.clone();
    sorted.sort();
    let first = *base.iter().min().unwrap();
    assert_eq!(sorted, (1..=4).map(|k| first + k * or).collect::<Vec<_>>(), "base {base:?}");
    // ...and the receive latency is paid once, before the queue, not once per message.
    let lr = 3_000_000;
    let (_, t) = run(&topo, EndpointConfig { recv_overhead_ps: or, recv_latency_ps: lr, ..off() }, msgs);
    let mut sorted = t.clone();
    sorted.sort();
    assert_eq!(sorted, (1..=4).map(|k| first + lr + k * or).collect::<Vec<_>>(), "base {base:?}");
}

#[test]
fn rendezvous_costs_one_header_round_trip_above_the_threshold_only() {
    let thr = 10_000u64;
    for topo in [
        star(4, lp(GBPS100, LAT)).unwrap(),
        torus(&[4, 4], lp(GBPS100, LAT)).unwrap(),
        fat_tree_3level(4, 2, lp(GBPS100, LAT), lp(GBPS100, LAT)).unwrap(),
    ] {
        // One way of a header-only packet (a 0-byte message is one header packet).
        let (_, one_way) = run(&topo, off(), vec![(0, 3, 0, 0, None)]);
        let (_, back) = run(&topo, off(), vec![(3, 0, 0, 0, None)]);
        let rtt = one_way[0] + back[0];
        let ep = EndpointConfig { rendezvous_threshold_bytes: Some(thr), ..off() };
        for bytes in [thr, thr + 1, 1 << 20] {
            let msg = vec![(0, 3, bytes, 0, None)];
            let (_, eager) = run(&topo, off(), msg.clone());
            let (net, t) = run(&topo, ep, msg);
            let extra = if bytes > thr { rtt } else { 0 };
            assert_eq!(t[0], eager[0] + extra, "{} bytes={bytes}", topo.name);
            let data_packets = bytes.div_ceil(4032);
            let ctrl = if bytes > thr { 2 } else { 0 };
            assert_eq!(net.stats().packets_created, data_packets + ctrl);
            assert_eq!(net.foreground().payload_bytes, bytes, "control packets carry no payload");
        }
    }
}

#[test]
fn rendezvous_control_packets_see_congestion() {
    // Two long flows 1 -> 0 and 2 -> 0 build a queue at the switch's port to host 0, the way
    // back of host 0's CTS but not the way of its data: an eager message 0 -> 3 does not
    // notice them, a rendezvous one does (its CTS queues behind them).
    let topo = star(4, lp(GBPS100, LAT)).unwrap();
    let msg = (0, 3, 4096, 50_000_000, None);
    let bg = [(1, 0, 4 << 20, 0, None), (2, 0, 4 << 20, 0, None)];
    for thr in [4095, 1 << 30] {
        let ep = EndpointConfig { rendezvous_threshold_bytes: Some(thr), ..off() };
        let idle = run(&topo, ep, vec![msg]).1[0];
        let busy = run(&topo, ep, vec![bg[0], bg[1], msg]).1[2];
        if thr > 4096 {
            assert_eq!(busy, idle, "eager: the queue is not on the data's way");
        } else {
            assert!(busy > idle + 10_000_000, "the CTS waits behind the flows: {busy} vs idle {idle}");
        }
    }
}

#[test]
fn injection_ceiling_caps_a_hosts_ports_together_but_not_one_port() {
    let topo = torus(&[4, 4], lp(GBPS100, LAT)).unwrap();
    let nbrs = [6u32, 4, 9, 1];
    let bytes = 4u64 << 20;
    let four: Vec<_> = nbrs.iter().enumerate().map(|(p, &d)| (5, d, bytes, 0, Some(p as u16))).collect();
    let half = EndpointConfig { injection_bps: Some(200_000_000_000), ..off() };
    let (_, base) = run(&topo, off(), four.clone());
    let (_, capped) = run(&topo, half, four);
    let (b, c) = (*base.iter().max().unwrap() as f64, *capped.iter().max().unwrap() as f64);
    let ratio = (c - LAT as f64) / (b - LAT as f64);
    assert!((ratio - 2.0).abs() < 0.01, "4 x 100 Gb/s under a 200 Gb/s ceiling take twice as long: {ratio}");
    // One port alone is under the ceiling: not held back at all.
    let one = vec![(5, 6, bytes, 0, Some(0))];
    assert_eq!(run(&topo, off(), one.clone()).1, run(&topo, half, one).1);
    // Transit traffic through host 5 (1 -> 9 crosses it) is not the host's injection.
    let transit = vec![(5, 6, bytes, 0, Some(0)), (4, 6, bytes, 0, None)];
    let tight = EndpointConfig { injection_bps: Some(100_000_000_000), ..off() };
    assert_eq!(run(&topo, off(), transit.clone()).1, run(&topo, tight, transit).1);
}
