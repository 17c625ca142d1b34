//! DCTCP and DCQCN on the packet engine (one test binary for both, to keep the build short).

mod common;

mod dctcp {
    //! DCTCP on the packet engine: a lone flow's slow-start timeline checked event by event
    //! against times computed by hand, and marks echoed one for one.
    use reducelab_net::*;
    use reducelab_topo::*;

    use crate::common::{run_traced, sorted_trace, GBPS100};

    const LAT: u64 = 1_000_000; // 1 µs per link
    const SW: u64 = 100_000; // 100 ns switch pipeline
    const MTU: u64 = 4096;
    const HDR: u64 = 64;
    /// Serialisation of an MTU and of a header at 100 Gb/s.
    const SER_D: u64 = MTU * 8 * 10;
    const SER_H: u64 = HDR * 8 * 10;

    fn run(fc: FlowControl, ecn: u64, tc: TransportConfig, msgs: Vec<(u32, u32, u64, u64)>, hosts: u32) -> Network {
        let topo = star(hosts, LinkParams { bandwidth_bps: GBPS100, latency_ps: LAT }).unwrap();
        let cfg = NetConfig {
            mtu_bytes: MTU as u32,
            header_bytes: HDR as u32,
            switch_latency_ps: SW,
            buffer_bytes: 1 << 20,
            flow_control: fc,
            ecn_threshold_bytes: Some(ecn),
            routing: RoutingAlgo::Minimal,
            ..NetConfig::default()
        };
        run_traced(&topo, cfg, tc, msgs)
    }

    /// One message from host 0 to host 1 of a star: 29 full packets and a short last one,
    /// initial window 2, no marks (the switch queue never exceeds one packet).
    ///
    /// By hand, with t0 = 5 µs, L = 1 µs per link, S = 100 ns per switch, D = 327.68 ns per MTU
    /// and H = 5.12 ns per header at 100 Gb/s:
    /// - slow start: the ACK of packet i makes the window 2 + i + 1 packets with i + 1
    ///   acknowledged, so packet j >= 2 may go from the ACK of packet ⌊(j − 2)/2⌋ on (two packets
    ///   per ACK); the host port sends them back to back: s_j = max(release_j, s_{j−1} + D);
    /// - packet k leaves the switch at f_k = max(s_k + D_k + L + S, f_{k−1} + D_{k−1}) and arrives
    ///   at r_k = f_k + D_k + L, where the receiver answers with the cumulative ACK k + 1;
    /// - the ACK reaches the sender at a_k = r_k + 2H + 2L + S.
    #[test]
    fn a_lone_flow_follows_the_hand_computed_slow_start_timeline() {
        let payload = MTU - HDR;
        let n = 30u32;
        let bytes = (n as u64 - 1) * payload + 1_000;
        let t0 = 5_000_000;
        let iw = 2u32;
        let tc = TransportConfig::Dctcp(DctcpConfig {
            initial_window_packets: iw,
            g: 1.0 / 16.0,
            min_rto_ps: 1_000_000_000,
        });
        let net = run(FlowControl::DropTail, 100_000, tc, vec![(0, 1, bytes, t0)], 2);
        let ser = |seq: u32| if seq == n - 1 { (1_000 + HDR) * 80 } else { SER_D };
        let mut want = Vec::new();
        let (mut s, mut a) = (vec![0u64; n as usize], vec![0u64; n as usize]);
        let mut switch_free = 0;
        for k in 0..n {
            let release = if k < iw { t0 } else { a[((k - iw) / 2) as usize] };
            s[k as usize] = if k == 0 { release } else { release.max(s[k as usize - 1] + ser(k - 1)) };
            let sk = s[k as usize];
            want.push((sk, TransportEvent::Sent { msg: 0, seq: k, retransmission: false }));
            let f = (sk + ser(k) + LAT + SW).max(switch_free);
            switch_free = f + ser(k);
            let r = f + ser(k) + LAT;
            want.push((r, TransportEvent::Arrived { msg: 0, seq: k, trimmed: false }));
            want.push((r, TransportEvent::Replied { msg: 0, kind: ControlKind::CumAck, seq: k + 1, pull: 0 }));
            a[k as usize] = r + 2 * SER_H + 2 * LAT + SW;
            want.push((
                a[k as usize],
                TransportEvent::Heard { msg: 0, kind: ControlKind::CumAck, seq: k + 1, pull: 0 },
            ));
            if k == n - 1 {
                assert_eq!(net.messages()[0].end.ps(), r, "delivered when the last packet arrives");
            }
        }
        let end = net.messages()[0].end.ps();
        want.retain(|&(t, _)| t <= end);
        assert_eq!(sorted_trace(net.transport_trace().to_vec()), sorted_trace(want));
        // Slow start doubles per round trip: the first window's two packets, then four, ...
        let rtt = a[0] - s[0];
        assert_eq!(s[2], a[0]);
        assert!(s[2] - s[0] >= rtt && s[6] - s[2] < rtt + 4 * SER_D, "second window right after the first ACK");
        let st = net.transport_stats().unwrap();
        assert_eq!(
            (st.retransmissions, st.timeouts, st.fast_retransmits, st.marks_echoed, st.duplicates),
            (0, 0, 0, 0, 0)
        );
        assert_eq!(st.acks, n as u64);
    }

    /// An ECN threshold of 0 bytes marks every packet that finds anything queued: the sender
    /// hears exactly as many ECEs as its data packets got marks, and it cuts its window at most
    /// once per window of data (fewer cuts than marks).
    #[test]
    fn every_mark_is_echoed_and_cuts_are_at_most_one_per_window() {
        let tc = TransportConfig::Dctcp(DctcpConfig {
            initial_window_packets: 10,
            g: 1.0 / 16.0,
            min_rto_ps: 1_000_000_000,
        });
        // Three senders into host 0: its switch port queues.
        let msgs = vec![(1, 0, 400_000, 0), (2, 0, 400_000, 0), (3, 0, 400_000, 0)];
        for fc in [FlowControl::DropTail, FlowControl::Credit] {
            let net = run(fc, 0, tc, msgs.clone(), 4);
            let st = net.transport_stats().unwrap();
            let marked_data = net
                .transport_trace()
                .iter()
                .filter(|(_, e)| matches!(e, TransportEvent::Replied { kind: ControlKind::CumAckEce, .. }))
                .count() as u64;
            let heard = net
                .transport_trace()
                .iter()
                .filter(|(_, e)| matches!(e, TransportEvent::Heard { kind: ControlKind::CumAckEce, .. }))
                .count() as u64;
            assert!(marked_data > 0);
            assert!(st.marks_echoed <= heard && heard <= marked_data, "{st:?}");
            assert!(st.ecn_reductions > 0 && st.ecn_reductions < st.marks_echoed, "{st:?}");
            if fc == FlowControl::Credit {
                assert_eq!((st.retransmissions, st.timeouts), (0, 0), "lossless");
            }
        }
    }
}

mod dcqcn {
    //! DCQCN on the packet engine: an unmarked lone flow runs at line rate (the raw engine's
    //! delivery time to the picosecond); a CNP halves the sender's rate at once (its next packets
    //! are paced two serialisation times apart); receivers send at most one CNP per interval per
    //! message; RED marking's probabilities.
    use reducelab_des::Rng;
    use reducelab_net::*;
    use reducelab_topo::*;

    use crate::common::{run_traced, GBPS100};

    const LAT: u64 = 1_000_000;
    const MTU: u64 = 4096;
    const SER_D: u64 = MTU * 8 * 10; // one MTU at 100 Gb/s

    fn run(hosts: u32, ecn: u64, red: Option<EcnRed>, tc: TransportConfig, msgs: Vec<(u32, u32, u64, u64)>) -> Network {
        let topo = star(hosts, LinkParams { bandwidth_bps: GBPS100, latency_ps: LAT }).unwrap();
        let cfg = NetConfig {
            mtu_bytes: MTU as u32,
            buffer_bytes: 1 << 20,
            ecn_threshold_bytes: Some(ecn),
            ecn_red: red,
            routing: RoutingAlgo::Minimal,
            ..NetConfig::default()
        };
        run_traced(&topo, cfg, tc, msgs)
    }

    fn dcqcn() -> TransportConfig {
        TransportConfig::Dcqcn(DcqcnConfig::default())
    }

    #[test]
    fn an_unmarked_lone_flow_runs_at_line_rate() {
        let msgs = vec![(0, 1, 300_000, 2_000_000)];
        let raw = run(2, 1 << 20, None, TransportConfig::None, msgs.clone());
        let dc = run(2, 1 << 20, None, dcqcn(), msgs);
        assert_eq!(dc.messages()[0].end, raw.messages()[0].end);
        let sent: Vec<u64> = dc
            .transport_trace()
            .iter()
            .filter_map(|(t, e)| matches!(e, TransportEvent::Sent { .. }).then_some(*t))
            .collect();
        assert!(sent.windows(2).all(|w| w[1] - w[0] == SER_D), "back to back");
        assert_eq!(dc.transport_stats().unwrap().cnps, 0);
    }

    /// Two senders into one receiver with a zero threshold: the first marked packet makes a CNP;
    /// when it reaches its sender, that sender's rate is cut from 100 to 50 Gb/s (α = 1), so its
    /// following packets leave at least two MTU times apart. Every receiver's CNPs of one message
    /// are at least 50 µs apart.
    #[test]
    fn a_cnp_halves_the_senders_rate_at_once() {
        let net = run(3, 0, None, dcqcn(), vec![(1, 0, 2_000_000, 0), (2, 0, 2_000_000, 0)]);
        let trace = net.transport_trace();
        let (t_cnp, msg) = trace
            .iter()
            .find_map(|&(t, e)| {
                if let TransportEvent::Heard { msg, kind: ControlKind::Cnp, .. } = e {
                    Some((t, msg))
                } else {
                    None
                }
            })
            .expect("a CNP");
        let after: Vec<u64> = trace
            .iter()
            .filter_map(|&(t, e)| {
                matches!(e, TransportEvent::Sent { msg: m, .. } if m == msg && t >= t_cnp).then_some(t)
            })
            .take(20)
            .collect();
        assert!(after.len() >= 10);
        // The first packet after the CNP may have been paced at line rate; the others at 50 Gb/s.
        for w in after[1..].windows(2) {
            assert!(w[1] - w[0] >= 2 * SER_D, "paced at half the line rate: {} ps", w[1] - w[0]);
        }
        for m in 0..2u32 {
            let cnps: Vec<u64> = trace
                .iter()
                .filter_map(|&(t, e)| {
                    matches!(e, TransportEvent::Replied { msg, kind: ControlKind::Cnp, .. } if msg == m).then_some(t)
                })
                .collect();
            assert!(cnps.windows(2).all(|w| w[1] - w[0] >= 50_000_000), "message {m}: {cnps:?}");
        }
        let st = net.transport_stats().unwrap();
        assert!(st.cnps > 0 && st.rate_decreases > 0 && st.rate_decreases <= st.cnps, "{st:?}");
    }

    #[test]
    fn red_marks_with_the_configured_probability() {
        let red = EcnRed { kmax_bytes: 200_000, pmax: 0.01 };
        assert_eq!(red.probability(5_001, 5_000), 0.01 / 195_000.0);
        assert_eq!(red.probability(102_500, 5_000), 0.005);
        assert_eq!(red.probability(200_000, 5_000), 0.01);
        assert_eq!(red.probability(200_001, 5_000), 1.0);
        // On the engine: with Kmax above every queue of a raw incast, RED marks each packet with
        // probability at most pmax·(q − Kmin)/(Kmax − Kmin) <= 1/4 here, so well under half of what
        // step marking at Kmin marks; and its draws are deterministic.
        let red = EcnRed { kmax_bytes: 8_000_000, pmax: 0.5 };
        let msgs = vec![(1, 0, 1_000_000, 0), (2, 0, 1_000_000, 0), (3, 0, 1_000_000, 0)];
        let step_net = run(4, 5_000, None, TransportConfig::None, msgs.clone());
        let step = step_net.stats().ecn_marks;
        let maxq = step_net.port_stats().iter().map(|p| p.max_queue_bytes).max().unwrap();
        assert!(maxq < 4_000_000, "{maxq}");
        let r1 = run(4, 5_000, Some(red), TransportConfig::None, msgs.clone()).stats().ecn_marks;
        let r2 = run(4, 5_000, Some(red), TransportConfig::None, msgs).stats().ecn_marks;
        assert!(r1 > 0 && r1 * 2 < step, "RED {r1}, step {step}");
        assert_eq!(r1, r2);
    }

    #[test]
    fn dcqcn_is_refused_on_drop_tail_and_without_marking() {
        let topo = star(2, LinkParams { bandwidth_bps: GBPS100, latency_ps: LAT }).unwrap();
        let mk = |cfg: NetConfig| Network::new(&topo, cfg, vec![], &Rng::new(1)).unwrap();
        let e =
            mk(NetConfig { flow_control: FlowControl::DropTail, ecn_threshold_bytes: Some(1), ..NetConfig::default() })
                .set_transport(dcqcn())
                .unwrap_err();
        assert!(e.contains("lossless"), "{e}");
        let e = mk(NetConfig::default()).set_transport(dcqcn()).unwrap_err();
        assert!(e.contains("ecn_threshold_bytes"), "{e}");
        let e = Network::new(
            &topo,
            NetConfig { ecn_red: Some(EcnRed { kmax_bytes: 10, pmax: 0.5 }), ..NetConfig::default() },
            vec![],
            &Rng::new(1),
        )
        .err()
        .unwrap();
        assert!(e.contains("Kmin"), "{e}");
    }
}
