//! Input-buffered routers (`RouterKind::InputBuffered`): head-of-line blocking, no added
//! latency when unloaded, lossless credits under random traffic, determinism.

use reducelab_des::{Rng, SimDuration, SimTime};
use reducelab_net::*;
use reducelab_topo::*;

mod common;
use common::{lp, Batch, GBPS100};

fn run(topo: &Topology, cfg: NetConfig, msgs: Vec<(u32, u32, u64, u64)>) -> (Network, RunEnd) {
    let mut net = Network::new(topo, cfg, vec![], &Rng::new(1)).unwrap();
    let mut w = Batch::new(msgs);
    let end = net.run(&mut w, Some(SimTime(1_000_000_000_000)), &mut |_| {});
    (net, end)
}

fn ib(input: u64, output: u64, speedup: f64) -> RouterKind {
    RouterKind::InputBuffered(InputBuffered {
        input_buffer_bytes: input,
        output_buffer_bytes: output,
        crossbar_speedup: speedup,
    })
}

fn base() -> NetConfig {
    NetConfig {
        mtu_bytes: 4096,
        header_bytes: 64,
        switch_latency_ps: 100_000,
        buffer_bytes: 1 << 20,
        ..NetConfig::default()
    }
}

/// The classic case. One switch; hosts 0, 1, 2 each send 3 packets to host 3 (output X, three
/// times oversubscribed); host 4 sends packet A to host 3, then packet B to host 5 (output Y,
/// idle). Input-buffered (one-packet output buffers, round-robin crossbar, speedup 1024 so a
/// crossing takes 320 ps): A waits at the head of host 4's input for X, and B waits behind
/// it although Y is idle. Output-queued: B goes to Y's queue on arrival.
///
/// With T = 4096 B at 100 Gb/s = 327,680 ps, L = link latency, S = switch latency,
/// D = T + L + S (a packet sent at 0 reaches the switch): B reaches the switch at D + T.
/// Output-queued: it leaves at once and arrives at D + 2T + L. Input-buffered: X's output
/// buffer takes host 0's packet at D (sent at once), host 1's at D + 320 (waits), host 2's at
/// D + T (when X sends host 1's) and A's at D + 2T (X sends it at D + 3T); B is then the head
/// and crosses at D + 2T + 320, arriving at D + 3T + 320 + L: T + 320 ps later.
#[test]
fn a_blocked_head_delays_the_packet_behind_it_only_in_input_buffered_routers() {
    let (t, l, s) = (327_680u64, 100_000u64, 100_000u64);
    let d = t + l + s;
    let topo = star(6, lp(GBPS100, l)).unwrap();
    let payload = 4032;
    let msgs = vec![
        (0, 3, 3 * payload, 0),
        (1, 3, 3 * payload, 0),
        (2, 3, 3 * payload, 0),
        (4, 3, payload, 0),
        (4, 5, payload, 1),
    ];
    let mut oq = base();
    oq.switch_latency_ps = s;
    let (net, end) = run(&topo, oq.clone(), msgs.clone());
    assert_eq!(end, RunEnd::Stopped);
    assert_eq!(net.messages()[4].end.ps(), d + 2 * t + l, "output-queued: B is not held back");
    let mut c = oq;
    c.router = ib(1 << 20, 4096, 1024.0);
    c.arbitration = Arbitration::InputRoundRobin;
    let (net, end) = run(&topo, c, msgs);
    assert_eq!(end, RunEnd::Stopped);
    assert_eq!(net.messages()[3].end.ps(), d + 4 * t + l, "A crosses at D + 2T and X sends it after host 2's packet");
    assert_eq!(net.messages()[4].end.ps(), d + 3 * t + 320 + l, "input-buffered: B waits behind A");
    assert!(net.messages().iter().all(|m| m.verified()));
    net.check_quiescent().unwrap();
}

/// Unloaded, an input-buffered router adds nothing: a lone message takes exactly as long as
/// through output-queued switches (the crossing at speedup 1 overlaps the next packet's
/// arrival), on a star, a 3-level fat tree and a torus.
#[test]
fn a_lone_message_takes_the_same_time_through_both_routers() {
    let l = lp(GBPS100, 250_000);
    for topo in [star(4, l).unwrap(), fat_tree_3level(4, 2, l, l).unwrap(), torus(&[4, 4], l).unwrap()] {
        for bytes in [1u64, 4032, 100_000, 1 << 20] {
            let msgs = vec![(0, 3, bytes, 0)];
            let (a, _) = run(&topo, base(), msgs.clone());
            for arb in [Arbitration::Fifo, Arbitration::InputRoundRobin, Arbitration::Lru] {
                let mut c = base();
                c.router = ib(64 << 10, 8192, 1.0);
                c.arbitration = arb;
                let (b, end) = run(&topo, c, msgs.clone());
                assert_eq!(end, RunEnd::Stopped);
                assert_eq!(a.messages()[0].end, b.messages()[0].end, "{} {bytes} B {arb:?}", topo.name);
                b.check_quiescent().unwrap();
            }
        }
    }
}

/// A random permutation (every host sends to one other host, none receives twice) on a
/// 2-level fat tree with Canary's routing and round-robin crossbars.
/// - Low load (each host sends 16 KiB every 6.4 us, a quarter of its link), speedup 1: the
///   input-buffered router delivers everything within 2% of the output-queued makespan and
///   its mean message time within 10%.
/// - Full load (256 KiB at once), speedup 2: within 10% of output-queued (a crossbar twice as
///   fast as the links hides head-of-line blocking, the textbook result).
/// - Full load, speedup 1: head-of-line blocking on shared links costs throughput: over the
///   three seeds the worst makespan is more than 10% longer (measured 1.17, 1.20, 1.93), and
///   no run is more than 2% shorter than output-queued.
#[test]
fn a_permutation_keeps_its_throughput_within_a_stated_bound() {
    let topo = fat_tree_2level(4, 4, 4, 1, None, lp(GBPS100, 500_000), lp(GBPS100, 500_000)).unwrap();
    let n = topo.num_hosts() as u32;
    let mut worst = 0f64;
    for seed in 1..=3u64 {
        let mut rng = Rng::new(seed);
        let mut perm: Vec<u32> = (0..n).collect();
        loop {
            rng.shuffle(&mut perm);
            if perm.iter().enumerate().all(|(i, &d)| i as u32 != d) {
                break;
            }
        }
        let low: Vec<_> = (0..n)
            .flat_map(|s| (0..20u64).map(move |k| (s, k)))
            .map(|(s, k)| (s, perm[s as usize], 16 << 10, k * 6_400_000))
            .collect();
        let full: Vec<_> = (0..n).map(|s| (s, perm[s as usize], 256 << 10, 0)).collect();
        let measure = |c: NetConfig, msgs: &Vec<(u32, u32, u64, u64)>| {
            let (net, end) = run(&topo, c, msgs.clone());
            assert_eq!(end, RunEnd::Stopped);
            let m = net.messages();
            let makespan = m.iter().map(|m| m.end.ps()).max().unwrap() as f64;
            let mean = m.iter().map(|m| m.end.since(m.start).ps() as f64).sum::<f64>() / m.len() as f64;
            (makespan, mean)
        };
        let mut oq = base();
        oq.routing = RoutingAlgo::CANARY;
        oq.buffer_bytes = 64 << 10;
        let with = |speedup: f64| NetConfig {
            router: ib(64 << 10, 64 << 10, speedup),
            arbitration: Arbitration::InputRoundRobin,
            ..oq.clone()
        };
        let (a, b) = (measure(oq.clone(), &low), measure(with(1.0), &low));
        assert!(
            b.0 <= a.0 * 1.02 && b.1 <= a.1 * 1.10,
            "seed {seed} low load: output-queued {a:?}, input-buffered {b:?}"
        );
        let a = measure(oq.clone(), &full);
        let b2 = measure(with(2.0), &full);
        assert!(b2.0 <= a.0 * 1.10, "seed {seed} full load, speedup 2: output-queued {a:?}, input-buffered {b2:?}");
        let b1 = measure(with(1.0), &full);
        assert!(b1.0 >= a.0 * 0.98, "seed {seed} full load, speedup 1: output-queued {a:?}, input-buffered {b1:?}");
        worst = worst.max(b1.0 / a.0);
    }
    assert!(worst > 1.10, "head-of-line blocking should cost a full-load permutation throughput: worst ratio {worst}");
}

/// Property test over random topologies, buffer sizes (1–6 packets in, 1–4 out), speedups,
/// arbitrations, routings and seeds with random messages: every message is delivered exactly
/// once (fingerprints), the run never hangs, and afterwards every credit is back.
#[test]
fn random_traffic_is_delivered_and_credits_are_conserved() {
    let l = lp(GBPS100, 100_000);
    let topos: Vec<(Topology, RoutingAlgo)> = vec![
        (star(5, l).unwrap(), RoutingAlgo::Minimal),
        (fat_tree_2level(3, 3, 2, 1, None, l, l).unwrap(), RoutingAlgo::CANARY),
        (fat_tree_2level(3, 3, 2, 1, None, l, l).unwrap(), RoutingAlgo::Adaptive),
        (fat_tree_3level(4, 2, l, l).unwrap(), RoutingAlgo::Ecmp),
        (torus(&[4, 3], l).unwrap(), RoutingAlgo::Minimal),
        (torus(&[3, 3], l).unwrap(), RoutingAlgo::Adaptive),
        (hyperx(&[3, 3], l).unwrap(), RoutingAlgo::Minimal),
        (hammingmesh(2, 2, 2, 2, l, l).unwrap(), RoutingAlgo::Adaptive),
        (dragonfly(5, 2, 2, 2, l, l, l).unwrap(), RoutingAlgo::Adaptive),
    ];
    let mut cases = 0;
    for seed in 0..48u64 {
        let mut rng = Rng::new(1000 + seed);
        let (topo, routing) = &topos[seed as usize % topos.len()];
        let mut c = base();
        c.mtu_bytes = 1024;
        c.routing = *routing;
        let speedup = [1.0, 1.25, 2.0, 4.0][rng.below(4) as usize];
        c.router = ib(1024 * (1 + rng.below(6)), 1024 * (1 + rng.below(4)), speedup);
        c.arbitration = [Arbitration::Fifo, Arbitration::InputRoundRobin, Arbitration::Lru][rng.below(3) as usize];
        let n = topo.num_hosts() as u64;
        let msgs: Vec<_> = (0..60)
            .map(|_| {
                let s = rng.below(n) as u32;
                let d = rng.below(n) as u32;
                (s, d, 1 + rng.below(20_000), rng.below(20_000_000))
            })
            .collect();
        let what = format!("seed {seed}: {} {routing:?} {:?} {:?}", topo.name, c.router, c.arbitration);
        let (net, end) = run(topo, c, msgs);
        assert_eq!(end, RunEnd::Stopped, "{what}");
        assert!(net.messages().iter().all(|m| m.verified()), "{what}");
        net.check_quiescent().unwrap_or_else(|e| panic!("{what}: {e}"));
        cases += 1;
    }
    assert_eq!(cases, 48);
}

/// Same configuration and seed, same run: every message's end time and every port counter.
#[test]
fn input_buffered_runs_are_deterministic() {
    let topo = fat_tree_2level(4, 4, 2, 1, None, lp(GBPS100, 500_000), lp(GBPS100, 500_000)).unwrap();
    let mut rng = Rng::new(7);
    let msgs: Vec<_> = (0..200)
        .map(|_| (rng.below(16) as u32, rng.below(16) as u32, 1 + rng.below(100_000), rng.below(5_000_000)))
        .collect();
    let mut c = base();
    c.routing = RoutingAlgo::CANARY;
    c.router = ib(16 << 10, 8 << 10, 1.5);
    c.arbitration = Arbitration::InputRoundRobin;
    let once = || {
        let (net, _) = run(&topo, c.clone(), msgs.clone());
        let ends: Vec<u64> = net.messages().iter().map(|m| m.end.ps()).collect();
        (ends, format!("{:?}", net.port_stats()), net.stats().events)
    };
    let a = once();
    assert_eq!(a, once());
    let (oq, _) = run(&topo, NetConfig { router: RouterKind::OutputQueued, ..c.clone() }, msgs.clone());
    let oq_ends: Vec<u64> = oq.messages().iter().map(|m| m.end.ps()).collect();
    assert_ne!(a.0, oq_ends, "the router kind must matter under load");
}

/// Bad parameters are errors that say what is wrong, not panics.
#[test]
fn input_buffered_parameters_are_checked() {
    let topo = star(3, lp(GBPS100, 1000)).unwrap();
    let err = |c: NetConfig| Network::new(&topo, c, vec![], &Rng::new(1)).err().expect("an error");
    let mut c = base();
    c.router = ib(1000, 1 << 20, 1.0);
    assert!(err(c.clone()).contains("at least one MTU"));
    c.router = ib(1 << 20, 1 << 20, 0.5);
    assert!(err(c.clone()).contains("crossbar_speedup"));
    c.router = ib(1 << 20, 1 << 20, 1.0);
    c.flow_control = FlowControl::DropTail;
    assert!(err(c).contains("credit flow control"));
    let c = NetConfig { arbitration: Arbitration::Lru, ..base() };
    assert!(err(c).contains("needs router input_buffered"));
    let _ = SimDuration(0);
}

/// merlin's default crossbar arbiter (`xbar_arb_lru`): hosts 0, 1, 2 each send 3 packets to
/// host 3 at once through one input-buffered switch (one-packet output buffer). The least
/// recently granted input goes first, so X takes the inputs in strict rotation 0, 1, 2, 0, ...:
/// the three messages end one packet time T apart, in input order, and the last one at the
/// same time as under round-robin (the output never idles). Each arbiter's runs repeat exactly.
#[test]
fn lru_crossbar_takes_contending_inputs_in_rotation() {
    let t = 327_680u64;
    let topo = star(4, lp(GBPS100, 100_000)).unwrap();
    let msgs = vec![(0, 3, 3 * 4032, 0), (1, 3, 3 * 4032, 0), (2, 3, 3 * 4032, 0)];
    let ends = |arb: Arbitration| {
        let c = NetConfig { router: ib(1 << 20, 4096, 1.0), arbitration: arb, ..base() };
        let (net, end) = run(&topo, c, msgs.clone());
        assert_eq!(end, RunEnd::Stopped);
        assert!(net.messages().iter().all(|m| m.verified()));
        net.check_quiescent().unwrap();
        net.messages().iter().map(|m| m.end.ps()).collect::<Vec<u64>>()
    };
    let lru = ends(Arbitration::Lru);
    assert_eq!((lru[1] - lru[0], lru[2] - lru[1]), (t, t), "rotation: {lru:?}");
    assert_eq!(lru, ends(Arbitration::Lru));
    assert_eq!(lru[2], ends(Arbitration::InputRoundRobin)[2], "work-conserving like round-robin");
}
