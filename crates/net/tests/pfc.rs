//! PFC (`FlowControl::Pfc`): lossless under incast with every ingress within XOFF + headroom,
//! no drop and no hang under random thresholds, buffers and traffic, congestion spreading by
//! pause propagation, determinism, and the threshold errors.

use reducelab_des::{Rng, SimDuration, SimTime};
use reducelab_net::*;
use reducelab_topo::*;

mod common;
use common::{lp, Batch, GBPS100};

fn run(topo: &Topology, cfg: NetConfig, msgs: Vec<(u32, u32, u64, u64)>) -> (Network, RunEnd) {
    let mut net = Network::new(topo, cfg, vec![], &Rng::new(1)).unwrap();
    let mut w = Batch::new(msgs);
    // A hang shows as a stall (watchdog) or the time limit, never as a test that never ends.
    let limits = RunLimits { until: Some(SimTime(1_000_000_000_000)), watchdog: Some(SimDuration(2_000_000_000)) };
    let end = net.run_limited(&mut w, limits, &mut |_| true);
    (net, end)
}

fn pfc_cfg(buffer_bytes: u64) -> NetConfig {
    NetConfig {
        mtu_bytes: 4096,
        header_bytes: 64,
        switch_latency_ps: 300_000,
        buffer_bytes,
        flow_control: FlowControl::Pfc,
        routing: RoutingAlgo::Minimal,
        ..NetConfig::default()
    }
}

/// Lossless, verified, and every ingress within its XOFF + headroom; the counters agree.
fn check_lossless(net: &Network, end: &RunEnd, what: &str) -> PfcStats {
    assert_eq!(*end, RunEnd::Stopped, "{what}");
    let s = net.stats();
    assert_eq!(s.drops_buffer + s.drops_loss + s.drops_failure + s.drops_no_route, 0, "{what}");
    assert!(net.messages().iter().all(|m| m.verified()), "{what}: a message is not verified");
    let ports = net.pfc_port_stats().expect("pfc on");
    for (i, p) in ports.iter().enumerate() {
        assert!(
            p.max_ingress_bytes <= p.ingress_limit_bytes,
            "{what}: port {i}: ingress peaked at {} > xoff + headroom {}",
            p.max_ingress_bytes,
            p.ingress_limit_bytes
        );
        assert!(p.pauses == 0 || p.paused_ps > 0, "{what}: port {i}");
    }
    let st = net.pfc_stats().unwrap();
    assert_eq!(st.max_ingress_bytes, ports.iter().map(|p| p.max_ingress_bytes).max().unwrap());
    assert_eq!(st.paused_ps, ports.iter().map(|p| p.paused_ps).sum::<u64>());
    // Every PAUSE was resumed: once the network is empty nothing is held or paused.
    net.check_quiescent().unwrap_or_else(|e| panic!("{what}: {e}"));
    st
}

#[test]
fn incast_on_a_fat_tree_is_lossless_and_pauses_within_the_headroom() {
    // k = 4 three-tier fat tree: 15 hosts send 200 kB each to host 0.
    let topo = fat_tree_3level(4, 2, lp(GBPS100, 500_000), lp(GBPS100, 500_000)).unwrap();
    let cfg = pfc_cfg(64 << 10);
    let th = pfc_thresholds(&topo, &cfg).unwrap();
    let t = th.iter().flatten().next().copied().unwrap();
    // The defaults: the least headroom, XOFF the rest of the buffer, XON two MTUs below.
    assert_eq!(t.headroom_bytes, pfc_min_headroom_bytes(GBPS100, 500_000, 300_000, 4096));
    assert_eq!((t.xoff_bytes, t.xon_bytes), ((64 << 10) - t.headroom_bytes, (64 << 10) - t.headroom_bytes - 8192));
    let msgs: Vec<_> = (1..16).map(|s| (s, 0, 200_000, 0)).collect();
    let (net, end) = run(&topo, cfg, msgs);
    let st = check_lossless(&net, &end, "incast");
    assert!(st.pause_frames > 0 && st.resume_frames > 0, "{st:?}");
    // The headroom was used: some ingress went past XOFF (so the bound above was at stake).
    assert!(st.max_ingress_bytes > t.xoff_bytes, "{st:?} {t:?}");
    // The receiver's link is the bottleneck and stays busy: 15 x 200 kB at line rate.
    let wire = 15 * (200_000 + 200_000u64.div_ceil(4032) * 64);
    let ideal = SimDuration::serialization(wire, GBPS100).ps();
    let last = net.messages().iter().map(|m| m.end.ps()).max().unwrap();
    assert!(last < ideal + ideal / 20, "incast took {last} ps, line rate {ideal} ps");
}

#[test]
fn the_headroom_formula_is_the_bytes_a_link_delivers_during_the_pause_round_trip() {
    // 100 Gb/s = 80 ps per byte: 2 x 500 ns + 300 ns + 2 x 4096 B + 64 B of serialisation is
    // 1.3 us + 660.48 ns = 1960.48 ns, 24506 B at 12.5 B/ns; plus 2 MTU.
    assert_eq!(pfc_min_headroom_bytes(GBPS100, 500_000, 300_000, 4096), 24_506 + 8192);
    // At 400 Gb/s (20 ps per byte): 1.3 us + 165.12 ns at 50 B/ns, plus 2 MTU: the
    // bandwidth-delay part scales with the bandwidth, the MTU part does not.
    assert_eq!(pfc_min_headroom_bytes(4 * GBPS100, 500_000, 300_000, 4096), 73_256 + 8192);
    assert!(
        pfc_min_headroom_bytes(GBPS100, 500_000, 300_000, 9000)
            > pfc_min_headroom_bytes(GBPS100, 500_000, 300_000, 4096)
    );
}

#[test]
fn random_buffers_thresholds_and_traffic_never_drop_nor_hang() {
    let mut rng = Rng::new(0xBFC);
    let mut paused_cases = 0;
    for case in 0..200 {
        let bw = [GBPS100, 2 * GBPS100, 4 * GBPS100, 25_000_000_000][rng.below(4) as usize];
        let lat = 50_000 + rng.below(1_000_000);
        let shape = rng.below(4);
        let topo = match shape {
            0 => star(2 + rng.below(7) as u32, lp(bw, lat)).unwrap(),
            1 => fat_tree_2level(
                2 + rng.below(2) as u32,
                2 + rng.below(3) as u32,
                1 + rng.below(2) as u32,
                1,
                None,
                lp(bw, lat),
                lp(bw, lat),
            )
            .unwrap(),
            2 => torus(&[3 + rng.below(2) as u32, 2 + rng.below(2) as u32], lp(bw, lat)).unwrap(),
            _ => dragonfly(3, 2, 1 + rng.below(2) as u32, 1, lp(bw, lat), lp(bw, lat), lp(bw, lat)).unwrap(),
        };
        let mtu = [256u32, 1024, 1500, 4096][rng.below(4) as usize];
        let sw = rng.below(400_000);
        let min =
            topo.links.iter().map(|l| pfc_min_headroom_bytes(l.bandwidth_bps, l.latency_ps, sw, mtu)).max().unwrap();
        let headroom = min + rng.below(3 * mtu as u64);
        let xoff = mtu as u64 * (1 + rng.below(8));
        let xon = rng.below(xoff + 1);
        let buffer = xoff + headroom + rng.below(4 * mtu as u64);
        // XON: set, or left to its default (XOFF - 2 MTU).
        let xon = (rng.below(4) != 0).then_some(xon);
        let pfc = PfcConfig { xoff_bytes: Some(xoff), xon_bytes: xon, headroom_bytes: Some(headroom) };
        let cfg = NetConfig {
            mtu_bytes: mtu,
            header_bytes: 64,
            switch_latency_ps: sw,
            buffer_bytes: buffer,
            flow_control: FlowControl::Pfc,
            pfc,
            // On a torus only dimension order is deadlock-free under PFC (Duato is refused below).
            routing: if shape == 2 {
                RoutingAlgo::Minimal
            } else {
                [RoutingAlgo::Minimal, RoutingAlgo::Ecmp, RoutingAlgo::Adaptive][rng.below(3) as usize]
            },
            ..NetConfig::default()
        };
        let hosts = topo.num_hosts() as u64;
        let hot = rng.below(hosts) as u32;
        let n = 2 + rng.below(3 * hosts);
        let msgs: Vec<_> = (0..n)
            .map(|_| {
                let s = rng.below(hosts) as u32;
                // Half the messages go to one hot receiver (incast), the rest anywhere.
                let d = if rng.below(2) == 0 { hot } else { rng.below(hosts) as u32 };
                (s, d, 1 + rng.below(60_000), rng.below(3_000_000))
            })
            .collect();
        let what = format!(
            "case {case}: {} mtu {mtu} buffer {buffer} xoff {xoff} xon {:?} headroom {headroom} routing {:?}",
            topo.name, pfc.xon_bytes, cfg.routing
        );
        let (net, end) = run(&topo, cfg, msgs);
        let st = check_lossless(&net, &end, &what);
        paused_cases += (st.pause_frames > 0) as u32;
    }
    // The small thresholds do pause: the property was exercised, not vacuous.
    assert!(paused_cases >= 60, "only {paused_cases} cases paused");
}

/// Two leaves and one spine; hosts 0..4 on leaf 0, 4..8 on leaf 1. Hosts 0, 1, 2, 4, 5 and 6
/// flood host 7 (hot); host 3 sends to host 4 (a victim that shares only the leaf 0 -> spine ->
/// leaf 1 path with the hot traffic, never the hot receiver's link).
fn spreading_case(fc: FlowControl) -> (Network, RunEnd, Topology) {
    let topo = fat_tree_2level(2, 4, 1, 1, None, lp(GBPS100, 500_000), lp(GBPS100, 500_000)).unwrap();
    let mut cfg = pfc_cfg(64 << 10);
    cfg.flow_control = fc;
    let mut msgs: Vec<_> = [0u32, 1, 2, 4, 5, 6].iter().map(|&s| (s, 7, 400_000, 0)).collect();
    msgs.push((3, 4, 400_000, 0));
    let (net, end) = run(&topo, cfg, msgs);
    (net, end, topo)
}

#[test]
fn a_hot_receiver_pauses_a_flow_that_only_shares_an_upstream_link() {
    let (net, end, topo) = spreading_case(FlowControl::Pfc);
    check_lossless(&net, &end, "spreading");
    let victim = net.messages().iter().find(|m| m.src == 3).unwrap();
    // Alone, the victim would take 400 kB at line rate (plus ~3 us of hops). Its max-min fair
    // share is half the shared links: the three hot flows from leaf 0 can drain only 3/6 of
    // host 7's link. Head-of-line blocking behind paused hot packets makes it much slower than
    // twice its time alone (measured: 6.6x).
    let alone = SimDuration::serialization(400_000 + 400_000u64.div_ceil(4032) * 64, GBPS100).ps();
    let fct = victim.completion_time().unwrap().ps();
    assert!(fct > 4 * alone, "victim FCT {fct} ps, alone {alone} ps: no head-of-line blocking");
    let ports = net.port_stats();
    let pfc = net.pfc_port_stats().unwrap();
    let leaf0 = 0; // leaf 0 is node 0, its hosts follow it
    let row = |node: u32, port: u16| ports.iter().position(|p| p.node == node && p.port == port).unwrap();
    // Leaf 0's up-link (port 4) was paused by the spine, and the pause spread to the victim's
    // own NIC (host 3): congestion spreading two hops back from the hot receiver.
    let up = row(leaf0, 4);
    assert!(pfc[up].pauses > 0 && pfc[up].paused_ps > 0, "{:?}", pfc[up]);
    let victim_nic = row(topo.hosts[3].0, 0);
    assert!(pfc[victim_nic].pauses > 0, "victim's NIC never paused: {:?}", pfc[victim_nic]);
    // Credits spread the same congestion (both are lossless, one VC): the victim is held up
    // comparably (measured: 214.9 us with PFC, 214.2 us with credits, 32.5 us alone).
    let (cnet, cend, _) = spreading_case(FlowControl::Credit);
    assert_eq!(cend, RunEnd::Stopped);
    let cfct = cnet.messages().iter().find(|m| m.src == 3).unwrap().completion_time().unwrap().ps();
    assert!(cfct > 4 * alone, "credit run: victim FCT {cfct} ps");
    let ratio = fct as f64 / cfct as f64;
    assert!((0.5..2.0).contains(&ratio), "PFC victim FCT {fct} vs credit {cfct}");
}

#[test]
fn same_seed_gives_identical_runs() {
    let topo = fat_tree_3level(4, 2, lp(GBPS100, 500_000), lp(GBPS100, 500_000)).unwrap();
    let mut cfg = pfc_cfg(48 << 10);
    cfg.routing = RoutingAlgo::Adaptive;
    cfg.pfc.xoff_bytes = Some(8192);
    let msgs: Vec<_> = (1..16)
        .map(|s| (s, (s * 7) % 16, 50_000 + s as u64 * 3000, s as u64 * 10_000))
        .chain((4..12).map(|s| (s, 0, 30_000, 0)))
        .collect();
    let a = run(&topo, cfg.clone(), msgs.clone());
    let b = run(&topo, cfg, msgs);
    let key = |(n, e): &(Network, RunEnd)| {
        (
            format!("{e:?}"),
            n.messages().iter().map(|m| m.end.ps()).collect::<Vec<_>>(),
            format!("{:?}", n.pfc_stats()),
            format!("{:?}{:?}", n.port_stats(), n.pfc_port_stats()),
            n.stats().events,
        )
    };
    assert_eq!(key(&a), key(&b));
    assert!(a.0.pfc_stats().unwrap().pause_frames > 0);
}

#[test]
fn bad_thresholds_and_duato_are_refused_naming_the_setting() {
    let topo = star(4, lp(GBPS100, 500_000)).unwrap();
    let min = pfc_min_headroom_bytes(GBPS100, 500_000, 300_000, 4096);
    let err = |pfc: PfcConfig, buffer: u64| {
        let cfg = NetConfig { pfc, ..pfc_cfg(buffer) };
        let e1 = pfc_thresholds(&topo, &cfg).unwrap_err();
        let e2 = Network::new(&topo, cfg, vec![], &Rng::new(1)).err().unwrap();
        assert!(e2.starts_with(e1.0) && e2.contains(&e1.1), "{e2}");
        e1
    };
    let (f, why) = err(PfcConfig { headroom_bytes: Some(min - 1), ..PfcConfig::default() }, 1 << 20);
    assert_eq!(f, "pfc.headroom_bytes");
    assert!(why.contains(&min.to_string()) && why.contains("overflow"), "{why}");
    let (f, why) = err(PfcConfig::default(), min + 4095);
    assert_eq!(f, "buffer_bytes");
    assert!(why.contains("headroom"), "{why}");
    let (f, _) = err(PfcConfig { xoff_bytes: Some(64 << 10), ..PfcConfig::default() }, 64 << 10);
    assert_eq!(f, "buffer_bytes");
    let (f, _) = err(PfcConfig { xoff_bytes: Some(1000), ..PfcConfig::default() }, 1 << 20);
    assert_eq!(f, "pfc.xoff_bytes");
    let (f, _) = err(PfcConfig { xoff_bytes: Some(8192), xon_bytes: Some(8193), ..PfcConfig::default() }, 1 << 20);
    assert_eq!(f, "pfc.xon_bytes");
    // Just enough buffer is accepted.
    assert!(pfc_thresholds(&topo, &pfc_cfg(min + 4096)).is_ok());
    // Duato's adaptive torus VC needs credits; dimension order is fine.
    let torus = torus(&[4, 4], lp(GBPS100, 500_000)).unwrap();
    let e =
        Network::new(&torus, NetConfig { routing: RoutingAlgo::Adaptive, ..pfc_cfg(1 << 20) }, vec![], &Rng::new(1))
            .err()
            .unwrap();
    assert!(e.contains("Duato") && e.contains("minimal"), "{e}");
    assert!(Network::new(&torus, pfc_cfg(1 << 20), vec![], &Rng::new(1)).is_ok());
    assert!(
        FlowControl::Pfc.is_lossless() && FlowControl::Credit.is_lossless() && !FlowControl::DropTail.is_lossless()
    );
}

#[test]
fn a_run_cut_mid_incast_names_the_paused_ports_in_its_network_state() {
    let topo = star(5, lp(GBPS100, 500_000)).unwrap();
    let mut net = Network::new(&topo, pfc_cfg(40 << 10), vec![], &Rng::new(1)).unwrap();
    let msgs: Vec<_> = (1..5).map(|s| (s, 0, 1_000_000, 0)).collect();
    let mut w = Batch::new(msgs);
    // Mid-incast: the senders' NICs are paused.
    let end = net.run_limited(&mut w, RunLimits { until: Some(SimTime(20_000_000)), watchdog: None }, &mut |_| true);
    assert_eq!(end, RunEnd::TimeLimit);
    let state = net.network_state();
    assert!(state.contains("PFC: ") && state.contains("egress ports are paused"), "{state}");
    let paused = net.pfc_port_stats().unwrap().iter().filter(|p| p.paused_ps > 0).count();
    assert!(paused >= 3, "{paused} ports were paused");
}
