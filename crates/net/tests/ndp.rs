//! NDP on the packet engine: a lone flow's timeline checked event by event against times
//! computed by hand, and NDP's completion time against raw line-rate injection where the
//! window covers the round trip.
use reducelab_des::Rng;
use reducelab_net::*;
use reducelab_topo::*;

mod common;
use common::{run_traced, sorted_trace, GBPS100};

const LAT: u64 = 1_000_000; // 1 µs per link
const SW: u64 = 100_000; // 100 ns switch pipeline
const MTU: u64 = 4096;
const HDR: u64 = 64;
/// Serialisation of an MTU and of a header at 100 Gb/s.
const SER_D: u64 = MTU * 8 * 10; // 327,680 ps
const SER_H: u64 = HDR * 8 * 10; // 5,120 ps

fn cfg() -> NetConfig {
    NetConfig {
        mtu_bytes: MTU as u32,
        header_bytes: HDR as u32,
        switch_latency_ps: SW,
        buffer_bytes: 1 << 20,
        flow_control: FlowControl::DropTail,
        routing: RoutingAlgo::Minimal,
        ..NetConfig::default()
    }
}

fn ndp(window: u32) -> TransportConfig {
    TransportConfig::Ndp(NdpConfig { initial_window_packets: window, data_queue_packets: 8, rto_ps: 1_000_000_000 })
}

fn run(topo: &Topology, tc: TransportConfig, msgs: Vec<(u32, u32, u64, u64)>) -> Network {
    run_traced(topo, cfg(), tc, msgs)
}

/// One message from host 0 to host 1 of a star (one switch): 11 full packets and a last one
/// of 1,000 payload bytes, window 4 (less than a round trip).
///
/// By hand, with t0 = 5 µs, L = 1 µs per link, S = 100 ns per switch, D = 327.68 ns per MTU
/// and H = 5.12 ns per header at 100 Gb/s:
/// - window packet k leaves at s_k = t0 + k·D (line rate);
/// - packet k reaches the switch at s_k + D_k + L + S (D_k: its own serialisation), leaves it
///   when it has arrived and the packet before it has left, f_k = max(that, f_{k-1} + D_{k-1}),
///   and reaches the receiver at r_k = f_k + D_k + L (the short last packet waits at the
///   switch for the full one ahead of it);
/// - the receiver ACKs it at r_k; the pacer is idle, since arrivals are D apart and the pull
///   interval is D, so pull k + 1 rides on the ACK (none after the last packet);
/// - the ACK reaches the sender at a_k = r_k + 2H + 2L + S, and the sender sends packet
///   k + 4 at once: s_{k+4} = a_k;
/// - the message is delivered at r_11.
#[test]
fn a_lone_flow_follows_the_hand_computed_timeline() {
    let topo = star(2, LinkParams { bandwidth_bps: GBPS100, latency_ps: LAT }).unwrap();
    let payload = MTU - HDR;
    let bytes = 11 * payload + 1_000;
    let t0 = 5_000_000;
    let (w, n) = (4u32, 12u32);
    let net = run(&topo, ndp(w), vec![(0, 1, bytes, t0)]);
    let ser = |seq: u32| if seq == n - 1 { (1_000 + HDR) * 80 } else { SER_D };
    let mut want = Vec::new();
    let mut s = vec![0u64; n as usize];
    let mut switch_free = 0;
    for k in 0..n {
        if k < w {
            s[k as usize] = t0 + k as u64 * SER_D;
        }
        let sk = s[k as usize];
        want.push((sk, TransportEvent::Sent { msg: 0, seq: k, retransmission: false }));
        let f = (sk + ser(k) + LAT + SW).max(switch_free);
        switch_free = f + ser(k);
        let r = f + ser(k) + LAT;
        let pull = if k < n - 1 { k + 1 } else { 0 };
        want.push((r, TransportEvent::Arrived { msg: 0, seq: k, trimmed: false }));
        want.push((r, TransportEvent::Replied { msg: 0, kind: ControlKind::Ack, seq: k, pull }));
        let a = r + 2 * SER_H + 2 * LAT + SW;
        want.push((a, TransportEvent::Heard { msg: 0, kind: ControlKind::Ack, seq: k, pull }));
        if k + w < n {
            s[(k + w) as usize] = a;
        }
        if k == n - 1 {
            assert_eq!(net.messages()[0].end.ps(), r, "delivered when the last packet arrives");
        }
    }
    // The run stops at the delivery: the last ACK is still on its way.
    let end = net.messages()[0].end.ps();
    want.retain(|&(t, _)| t <= end);
    assert_eq!(sorted_trace(net.transport_trace().to_vec()), sorted_trace(want));
    // Window-limited: 4 packets per round trip, so the gap after the window is the round trip
    // minus 4 packet times.
    assert_eq!(s[4] - s[3], 2 * SER_D + 4 * LAT + 2 * SW + 2 * SER_H - 3 * SER_D);
    let st = net.transport_stats().unwrap();
    assert_eq!((st.trims, st.nacks, st.retransmissions, st.timeouts, st.pull_packets), (0, 0, 0, 0, 0));
    assert_eq!(st.pulls, n as u64 - 1, "one pull per arrival but the last");
    assert_eq!(st.acks, n as u64);
}

/// With a window of at least a round trip, NDP sends back to back from the start, like raw
/// line-rate injection: the same delivery time to the picosecond, on a star, a fat tree and
/// a torus, for a message shorter and longer than the window.
#[test]
fn with_a_window_over_the_round_trip_ndp_runs_at_line_rate() {
    let l = LinkParams { bandwidth_bps: GBPS100, latency_ps: LAT };
    let topos = [star(4, l).unwrap(), fat_tree_3level(4, 2, l, l).unwrap(), torus(&[4, 4], l).unwrap()];
    for topo in &topos {
        for packets in [1u64, 5, 60] {
            let bytes = packets * (MTU - HDR) - 7;
            let msgs = vec![(0, 3, bytes, 1_000)];
            let raw = run(topo, TransportConfig::None, msgs.clone());
            let nd = run(topo, ndp(40), msgs);
            assert_eq!(nd.messages()[0].end, raw.messages()[0].end, "{} {packets} packets", topo.name);
            let sent: Vec<u64> = nd
                .transport_trace()
                .iter()
                .filter_map(|(t, e)| matches!(e, TransportEvent::Sent { .. }).then_some(*t))
                .collect();
            assert_eq!(sent.len() as u64, packets);
            assert!(sent.windows(2).all(|p| p[1] - p[0] == SER_D), "{}: back to back", topo.name);
        }
    }
}

/// Settings NDP cannot run with are refused with the reason.
#[test]
fn ndp_refuses_lossless_networks_and_bad_parameters() {
    let topo = star(2, LinkParams { bandwidth_bps: GBPS100, latency_ps: LAT }).unwrap();
    let mut credit =
        Network::new(&topo, NetConfig { flow_control: FlowControl::Credit, ..cfg() }, vec![], &Rng::new(1)).unwrap();
    let e = credit.set_transport(ndp(4)).unwrap_err();
    assert!(e.contains("drop_tail"), "{e}");
    let mut net = Network::new(&topo, cfg(), vec![], &Rng::new(1)).unwrap();
    for (c, field) in [
        (NdpConfig { initial_window_packets: 0, data_queue_packets: 8, rto_ps: 1 }, "initial_window_packets"),
        (NdpConfig { initial_window_packets: 1, data_queue_packets: 0, rto_ps: 1 }, "data_queue_packets"),
        (NdpConfig { initial_window_packets: 1, data_queue_packets: 8, rto_ps: 0 }, "rto_us"),
    ] {
        let e = net.set_transport(TransportConfig::Ndp(c)).unwrap_err();
        assert!(e.starts_with(field), "{e}");
    }
    net.set_endpoint(EndpointConfig { rendezvous_threshold_bytes: Some(100), ..EndpointConfig::default() }).unwrap();
    assert!(net.set_transport(ndp(4)).unwrap_err().contains("rendezvous"));
}

/// An incast of 8 senders to one receiver on a star, windows of 30 packets each (the first
/// burst alone is 240 packets into one port: trims): no flow starves. The receiver's pulls,
/// round-robin over its flows at one per MTU time, share its link fairly, so every flow
/// finishes within 5% of the time the whole incast needs at line rate (the fair share of
/// each flow is 1/8 of the link for the whole incast). The receiver never pulls faster than
/// one MTU time, and pulls alternate between flows.
#[test]
fn an_incast_shares_the_receiver_fairly_and_no_flow_starves() {
    let senders = 8u32;
    let topo = star(senders + 1, LinkParams { bandwidth_bps: GBPS100, latency_ps: LAT }).unwrap();
    let payload = MTU - HDR;
    let packets = 300u64;
    let bytes = packets * payload;
    let msgs: Vec<_> = (1..=senders).map(|s| (s, 0, bytes, 0)).collect();
    let tc =
        TransportConfig::Ndp(NdpConfig { initial_window_packets: 30, data_queue_packets: 8, rto_ps: 1_000_000_000 });
    let net = run(&topo, tc, msgs);
    let st = net.transport_stats().unwrap();
    assert!(st.trims > 0 && st.nacks == st.trims && st.retransmissions == st.trims, "{st:?}");
    assert_eq!((st.timeouts, st.duplicates, st.priority_drops), (0, 0, 0), "{st:?}");
    // The bottleneck is the receiver's link: all packets of all flows at line rate.
    let line_rate = senders as u64 * packets * SER_D;
    for (i, m) in net.messages().iter().enumerate() {
        let fct = m.completion_time().unwrap().ps();
        assert!(
            fct as f64 >= 0.95 * line_rate as f64 && fct as f64 <= 1.05 * line_rate as f64,
            "flow {i}: {fct} ps vs {line_rate} ps for the whole incast"
        );
    }
    // Pulls at the receiver (on ACKs/NACKs or alone): never closer than an MTU time.
    let pulls: Vec<(u64, u32)> = net
        .transport_trace()
        .iter()
        .filter_map(|&(t, e)| match e {
            TransportEvent::Replied { msg, pull, .. } if pull > 0 => Some((t, msg)),
            _ => None,
        })
        .collect();
    assert_eq!(pulls.len() as u64, st.pulls);
    assert!(pulls.windows(2).all(|w| w[1].0 - w[0].0 >= SER_D), "pulls spaced by an MTU time at least");
    // Round-robin: in any 8 consecutive PULL packets while all flows wait, no flow twice.
    let queued: Vec<u32> = net
        .transport_trace()
        .iter()
        .filter(|&&(_, e)| matches!(e, TransportEvent::Replied { kind: ControlKind::Pull, .. }))
        .map(|&(_, e)| if let TransportEvent::Replied { msg, .. } = e { msg } else { 0 })
        .collect();
    assert!(queued.len() > 1000, "most pulls are paced: {}", queued.len());
    let mid = &queued[100..900];
    for w in mid.windows(senders as usize) {
        let mut seen = w.to_vec();
        seen.sort_unstable();
        seen.dedup();
        assert_eq!(seen.len(), senders as usize, "round-robin over the 8 flows: {w:?}");
    }
}
