//! OS noise at the hosts: per-packet noise delays only the chosen packet (exact timing on an
//! idle link), port-stall noise delays the port; noise hits only the chosen hosts; and lossless
//! credit flow control stays exact when packets are set aside (no hang, every byte verified).

use reducelab_des::{Rng, SimDuration, SimTime};
use reducelab_net::*;
use reducelab_topo::*;

mod common;
use common::{lp, Batch, GBPS100};

const LAT: u64 = 1_000_000;
const SW: u64 = 300_000;

fn run(topo: &Topology, cfg: NetConfig, msgs: Vec<(u32, u32, u64, u64)>, seed: u64) -> (Network, RunEnd) {
    let mut net = Network::new(topo, cfg, vec![], &Rng::new(seed)).unwrap();
    let mut w = Batch::new(msgs);
    let end = net.run(&mut w, None, &mut |_| {});
    (net, end)
}

fn cfg(mode: NoiseMode, p: f64, delay_ps: u64) -> NetConfig {
    NetConfig {
        switch_latency_ps: SW,
        buffer_bytes: 1 << 20,
        noise_probability: p,
        noise_delay_ps: delay_ps,
        noise_mode: mode,
        ..NetConfig::default()
    }
}

/// The network's noise draws for `seed` (the engine forks its noise stream as 0x4015E).
fn draws(seed: u64, p: f64, n: usize) -> Vec<bool> {
    let mut r = Rng::new(seed).fork(0x4015E);
    (0..n).map(|_| r.bernoulli(p)).collect()
}

/// A seed whose first noise draws are `want`.
fn seed_with(p: f64, want: &[bool]) -> u64 {
    (1..10_000).find(|&s| draws(s, p, want.len()) == want).expect("a seed with the wanted draws")
}

/// One packet of `wire` bytes from a star host to another: two links, the switch's latency.
fn one_packet_ps(wire: u64) -> u64 {
    2 * SimDuration::serialization(wire, GBPS100).ps() + 2 * LAT + SW
}

/// Host 0 sends two one-packet messages A and B at time 0; the first noise draw (A's packet)
/// delays, the second (B's) does not. Per-packet noise: A leaves at D, B at once. Port stall:
/// the port waits D before A, and B goes after A.
#[test]
fn a_delayed_packet_does_not_delay_the_next_one_but_a_port_stall_does() {
    let topo = star(2, lp(GBPS100, LAT)).unwrap();
    let d = 10_000_000; // 10 us
    let bytes = 1000;
    let wire = bytes + 64;
    let ser = SimDuration::serialization(wire, GBPS100).ps();
    let seed = seed_with(0.5, &[true, false]);
    let msgs = vec![(0, 1, bytes, 0), (0, 1, bytes, 0)];

    let (net, end) = run(&topo, cfg(NoiseMode::Packet, 0.5, d), msgs.clone(), seed);
    assert_eq!(end, RunEnd::Stopped);
    let m = net.messages();
    assert!(m.iter().all(|m| m.verified()));
    assert_eq!(m[1].end.ps(), one_packet_ps(wire), "B is not delayed by A's noise");
    assert_eq!(m[0].end.ps(), d + one_packet_ps(wire), "A leaves exactly D later");

    let (net, end) = run(&topo, cfg(NoiseMode::PortStall, 0.5, d), msgs, seed);
    assert_eq!(end, RunEnd::Stopped);
    let m = net.messages();
    assert_eq!(m[0].end.ps(), d + one_packet_ps(wire));
    assert_eq!(m[1].end.ps(), d + ser + one_packet_ps(wire), "a port stall delays B behind A");
}

/// With every packet drawn (probability 1), per-packet noise sets a whole message aside at
/// once: it arrives exactly D later than without noise (the delays do not add up), while a
/// port stall pays D before every packet.
#[test]
fn per_packet_delays_do_not_accumulate_and_port_stalls_do() {
    let topo = star(2, lp(GBPS100, LAT)).unwrap();
    let d = 2_000_000;
    let bytes = 8 * 4032;
    let (quiet, _) = run(&topo, cfg(NoiseMode::Packet, 0.0, d), vec![(0, 1, bytes, 0)], 1);
    let base = quiet.messages()[0].end.ps();
    let (net, _) = run(&topo, cfg(NoiseMode::Packet, 1.0, d), vec![(0, 1, bytes, 0)], 1);
    assert!(net.messages()[0].verified());
    assert_eq!(net.messages()[0].end.ps(), base + d);
    let (net, _) = run(&topo, cfg(NoiseMode::PortStall, 1.0, d), vec![(0, 1, bytes, 0)], 1);
    assert!(net.messages()[0].verified());
    assert!(net.messages()[0].end.ps() >= base + 8 * d, "port stall pays D per packet");
}

/// Noise restricted to some hosts: their messages are delayed, the others' are exact.
#[test]
fn noise_hits_only_the_chosen_hosts() {
    let topo = star(4, lp(GBPS100, LAT)).unwrap();
    let d = 5_000_000;
    let bytes = 3 * 4032;
    let msgs = vec![(0, 1, bytes, 0), (2, 3, bytes, 0)];
    let (quiet, _) = run(&topo, cfg(NoiseMode::Packet, 0.0, d), msgs.clone(), 1);
    for mode in [NoiseMode::Packet, NoiseMode::PortStall] {
        for (noisy, hit) in [(vec![2], 1usize), (vec![0], 0), (vec![0, 2], 2)] {
            let mut c = cfg(mode, 1.0, d);
            c.noise_hosts = Some(noisy.clone());
            let (net, end) = run(&topo, c, msgs.clone(), 1);
            assert_eq!(end, RunEnd::Stopped);
            for (i, m) in net.messages().iter().enumerate() {
                assert!(m.verified());
                let quiet_end = quiet.messages()[i].end.ps();
                let delayed = hit == 2 || hit == i;
                if delayed {
                    assert!(m.end.ps() >= quiet_end + d, "{mode:?} {noisy:?}: message {i} should be delayed");
                } else {
                    assert_eq!(m.end.ps(), quiet_end, "{mode:?} {noisy:?}: message {i} should not be delayed");
                }
            }
        }
    }
    let mut c = cfg(NoiseMode::Packet, 0.5, d);
    c.noise_hosts = Some(vec![4]);
    let err = Network::new(&topo, c, vec![], &Rng::new(1)).err().expect("host 4 does not exist");
    assert!(err.contains("noise host 4"), "{err}");
}

/// Credit conservation under per-packet noise: random probabilities, delays and buffers of one
/// to four MTUs, all-to-all and incast traffic on a fat tree and a torus (whose hosts also
/// forward transit traffic), in three waves (a credit leaked by an earlier wave would hang a
/// later one). Every run ends with every message delivered exactly once and no packet left.
#[test]
fn credits_are_conserved_when_packets_are_set_aside() {
    let mut rng = Rng::new(77);
    let topos = [
        fat_tree_2level(4, 4, 2, 1, None, lp(GBPS100, LAT), lp(GBPS100, LAT)).unwrap(),
        torus(&[4, 4], lp(GBPS100, LAT)).unwrap(),
    ];
    for case in 0..24 {
        let topo = &topos[case % 2];
        let n = topo.hosts.len() as u32;
        let p = [0.01, 0.1, 0.5, 0.9, 1.0][rng.below(5) as usize];
        let d = 1 + rng.below(5_000_000);
        let mut c = cfg(NoiseMode::Packet, p, d);
        c.buffer_bytes = 4096 * (1 + rng.below(4));
        c.routing = if case % 4 < 2 { RoutingAlgo::Minimal } else { RoutingAlgo::Adaptive };
        let mut msgs = Vec::new();
        for s in 0..n {
            for k in 0..3 {
                let dst = if case % 3 == 0 { 0 } else { (s + 1 + rng.below(n as u64 - 1) as u32) % n };
                if dst != s {
                    msgs.push((s, dst, 1 + rng.below(20_000), k * 3_000_000 + rng.below(1_000_000)));
                }
            }
        }
        let mut net = Network::new(topo, c.clone(), vec![], &Rng::new(case as u64)).unwrap();
        let mut w = Batch::new(msgs.clone());
        let end = net.run(&mut w, Some(SimTime(1_000_000_000_000)), &mut |_| {});
        assert_eq!(end, RunEnd::Stopped, "case {case}: p {p}, delay {d} ps, buffer {}", c.buffer_bytes);
        assert!(net.messages().iter().all(|m| m.verified()), "case {case}");
        assert_eq!(net.packets_in_flight(), 0, "case {case}: packets left behind");
    }
}

/// The three host- and switch-side mechanisms of issue 13 together (merged by hand, so tested
/// together): per-packet noise that sets packets aside, the endpoint's rendezvous control
/// packets and shared DMA engine (injection ceiling), and input-buffered routers with
/// head-of-line blocking. Random cases over topologies, probabilities, delays, thresholds,
/// ceilings, buffers and speedups: every message delivered exactly once and verified, no packet
/// and no credit left at the end, and the same seed gives the same end time.
#[test]
fn noise_endpoint_and_input_buffered_routers_together_lose_nothing() {
    let mut rng = Rng::new(1313);
    let topos = [
        fat_tree_2level(4, 4, 2, 1, None, lp(GBPS100, LAT), lp(GBPS100, LAT)).unwrap(),
        torus(&[4, 4], lp(GBPS100, LAT)).unwrap(),
        star(6, lp(GBPS100, LAT)).unwrap(),
    ];
    for case in 0..30 {
        let topo = &topos[case % 3];
        let n = topo.hosts.len() as u32;
        let p = [0.0, 0.05, 0.5, 1.0][rng.below(4) as usize];
        let mode = if rng.below(2) == 0 { NoiseMode::Packet } else { NoiseMode::PortStall };
        let mut c = cfg(mode, p, 1 + rng.below(3_000_000));
        c.buffer_bytes = 4096 * (2 + rng.below(4));
        c.routing = if case % 2 == 0 { RoutingAlgo::Minimal } else { RoutingAlgo::Adaptive };
        if rng.below(3) > 0 {
            let ib = 4096 * (1 + rng.below(4));
            c.router = RouterKind::InputBuffered(InputBuffered {
                input_buffer_bytes: ib.max(c.buffer_bytes),
                output_buffer_bytes: 4096 * (1 + rng.below(3)),
                crossbar_speedup: [1.0, 1.5, 2.0][rng.below(3) as usize],
            });
            c.buffer_bytes = ib.max(c.buffer_bytes);
        }
        let ep = EndpointConfig {
            send_overhead_ps: rng.below(500_000),
            send_latency_ps: rng.below(2) * rng.below(500_000),
            recv_overhead_ps: rng.below(500_000),
            recv_latency_ps: rng.below(2) * rng.below(500_000),
            rendezvous_threshold_bytes: if rng.below(2) == 0 { Some(rng.below(16_000)) } else { None },
            injection_bps: if rng.below(2) == 0 { Some(GBPS100 / (1 + rng.below(4))) } else { None },
        };
        let mut msgs = Vec::new();
        for s in 0..n {
            for k in 0..3 {
                let dst = if case % 4 == 0 { 0 } else { (s + 1 + rng.below(n as u64 - 1) as u32) % n };
                if dst != s {
                    msgs.push((s, dst, 1 + rng.below(30_000), k * 2_000_000 + rng.below(1_000_000)));
                }
            }
        }
        let run_once = |seed: u64| {
            let mut net = Network::new(topo, c.clone(), vec![], &Rng::new(seed)).unwrap();
            net.set_endpoint(ep).unwrap();
            let mut w = Batch::new(msgs.clone());
            let end = net.run(&mut w, Some(SimTime(1_000_000_000_000)), &mut |_| {});
            (net, end)
        };
        let (net, end) = run_once(case as u64);
        let what = format!("case {case}: noise {mode:?} p {p}, router {:?}, endpoint {ep:?}", c.router);
        assert_eq!(end, RunEnd::Stopped, "{what}");
        assert!(net.messages().iter().all(|m| m.verified()), "{what}");
        assert_eq!(net.packets_in_flight(), 0, "{what}: packets left behind");
        net.check_quiescent().unwrap_or_else(|e| panic!("{what}: {e}"));
        let (again, _) = run_once(case as u64);
        assert_eq!(net.now(), again.now(), "{what}: not deterministic");
    }
}
