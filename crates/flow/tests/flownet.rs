//! [`FlowNet`], the flow engine driven message by message: a lone message takes its
//! store-and-forward time, two messages on one link share it, a message started later or
//! refused is handled, and a plan driven through it with the plan runner's step semantics
//! takes the plan runner's fluid simulation's time to the picosecond (one engine, two drivers).
use reducelab_flow::{run_plan_simulated, Endpoint, FlowConfig, FlowNet};
use reducelab_sched::algos::Layout;
use reducelab_sched::plan::{plan, Plan};
use reducelab_topo::{torus, LinkParams};
use std::collections::BTreeMap;

const L: LinkParams = LinkParams { bandwidth_bps: 400_000_000_000, latency_ps: 100_000 };

fn cfg(endpoint: Endpoint) -> FlowConfig {
    FlowConfig { switch_latency_ps: 300_000, mtu_bytes: 4096, header_bytes: 64, endpoint }
}

/// Steps `net` until `want` deliveries came: (message, time) in delivery order.
fn deliveries(net: &mut FlowNet, want: usize) -> Vec<(u32, f64)> {
    let mut out = Vec::new();
    while out.len() < want {
        let (t, d) = net.step().expect("messages in flight");
        if let Some(id) = d {
            out.push((id.0, t));
        }
    }
    out
}

#[test]
fn a_lone_message_takes_its_store_and_forward_time_and_two_share_a_link() {
    let topo = torus(&[8], L).unwrap();
    let c = cfg(Endpoint::OFF);
    let mut net = FlowNet::new(&topo, &c);
    // 1 MiB over 2 hops: 261 packets (4032 B payload + 64 B headers each, the last one smaller)
    // serialised at 50 B/ns, one more first packet, and per hop the link latency and the
    // router latency of the torus node it enters.
    let bytes = 1u64 << 20;
    let pkts = bytes.div_ceil(4032);
    let wire = bytes + pkts * 64;
    let want = wire as f64 / 50e-3 + 4096.0 / 50e-3 + 2.0 * (100_000.0 + 300_000.0);
    let lone = net.lone_message_ps(0, 2, bytes).unwrap();
    assert!((lone - want).abs() < 1e-6 * want, "{lone} vs {want}");
    net.send(0, 2, bytes, 1000.0).unwrap();
    let d = deliveries(&mut net, 1);
    assert!((d[0].1 - (1000.0 + lone)).abs() < 1e-6 * lone, "{d:?} vs {lone}");
    assert_eq!(net.step(), None, "nothing left");
    // Two messages from the same host over the same first link, started together: each gets
    // half the bandwidth, so both take about twice the serialisation.
    let mut net = FlowNet::new(&topo, &c);
    let t0 = net.now_ps();
    net.send(0, 1, bytes, t0).unwrap();
    net.send(0, 1, bytes, t0).unwrap();
    let d = deliveries(&mut net, 2);
    let one = FlowNet::new(&topo, &c).lone_message_ps(0, 1, bytes).unwrap();
    for (_, t) in &d {
        assert!(*t > 1.9 * (one - 200_000.0) && *t < 2.0 * one, "{d:?} vs {one}");
    }
    // A message may not start before the last event; one to its own host arrives at once.
    assert!(net.send(1, 2, 8, 0.0).is_err());
    let now = net.now_ps();
    let id = net.send(3, 3, 8, now).unwrap();
    assert_eq!(deliveries(&mut net, 1), vec![(id.0, now)]);
}

/// The plan runner's step semantics on [`FlowNet`]: a rank starts a step's sends together and
/// moves on when they are delivered and its receives are in.
fn drive(topo: &reducelab_topo::Topology, pl: &Plan, bytes: u64, c: &FlowConfig) -> u64 {
    let steps: Vec<_> = pl.steps.iter().flat_map(|s| std::iter::repeat_n(&s.msgs, s.repeat as usize)).collect();
    let p = pl.ranks as usize;
    let mut net = FlowNet::new(topo, c);
    let (mut cur, mut outstanding) = (vec![0usize; p], vec![0u32; p]);
    let mut early: BTreeMap<(usize, usize), u32> = BTreeMap::new();
    let mut what: Vec<(usize, usize, usize)> = Vec::new();
    let mut end = 0.0f64;
    let mut enter = |net: &mut FlowNet,
                     what: &mut Vec<(usize, usize, usize)>,
                     cur: &mut Vec<usize>,
                     outstanding: &mut Vec<u32>,
                     early: &mut BTreeMap<(usize, usize), u32>,
                     rank: usize,
                     now: f64| loop {
        let Some(msgs) = steps.get(cur[rank]) else {
            end = end.max(now);
            return;
        };
        // A rank pays its send overheads in port order, as the plan runner does.
        let mut sends: Vec<_> = msgs.iter().filter(|m| m.from as usize == rank).collect();
        if c.endpoint.send_overhead_ps > 0 {
            sends.sort_by_key(|m| m.port);
        }
        let mut wait = sends.len() as u32;
        for m in sends {
            net.send(m.from, m.to, pl.bytes(m.blocks, bytes, 4), now).unwrap();
            what.push((m.from as usize, m.to as usize, cur[rank]));
        }
        wait += msgs.iter().filter(|m| m.to as usize == rank).count() as u32;
        wait -= early.remove(&(rank, cur[rank])).unwrap_or(0);
        outstanding[rank] = wait;
        if wait > 0 {
            return;
        }
        cur[rank] += 1;
    };
    for r in 0..p {
        enter(&mut net, &mut what, &mut cur, &mut outstanding, &mut early, r, 0.0);
    }
    while let Some((now, d)) = net.step() {
        let Some(id) = d else { continue };
        let (from, to, g) = what[id.0 as usize];
        outstanding[from] -= 1;
        if outstanding[from] == 0 {
            cur[from] += 1;
            enter(&mut net, &mut what, &mut cur, &mut outstanding, &mut early, from, now);
        }
        if cur[to] == g && outstanding[to] > 0 {
            outstanding[to] -= 1;
            if outstanding[to] == 0 {
                cur[to] += 1;
                enter(&mut net, &mut what, &mut cur, &mut outstanding, &mut early, to, now);
            }
        } else {
            *early.entry((to, g)).or_insert(0) += 1;
        }
    }
    assert!(cur.iter().all(|&c| c == steps.len()), "every rank finished");
    end.round() as u64
}

#[test]
fn a_plan_driven_through_flownet_takes_the_plan_runners_time() {
    let costs = [
        Endpoint::OFF,
        Endpoint {
            send_overhead_ps: 201_000,
            send_latency_ps: 170_000,
            recv_overhead_ps: 310_000,
            recv_latency_ps: 250_000,
            rendezvous_threshold_bytes: Some(12_000),
            injection_bps: None,
        },
        Endpoint { injection_bps: Some(300_000_000_000), ..Endpoint::OFF },
    ];
    let mut checked = 0;
    // A FlowNet message takes the default path; on these tori and plans the default paths
    // cross the links the plans' ports name (or, half-way round a ring, as many equally loaded
    // ones), so the times agree exactly.
    for (dims, algs) in [
        (vec![8u32], &["ring", "swing-bandwidth", "swing-latency", "recursive-doubling-bandwidth"][..]),
        (vec![4, 4], &["bucket"][..]),
    ] {
        let topo = torus(&dims, L).unwrap();
        let layout = Layout::new(dims.clone()).unwrap();
        for alg in algs {
            let pl = plan(alg, &layout).unwrap();
            for bytes in [32u64, 64 << 10, 4 << 20] {
                for endpoint in costs {
                    let c = cfg(endpoint);
                    let want = run_plan_simulated(&topo, &pl, bytes, 4, &c).unwrap().runtime_ps;
                    assert_eq!(drive(&topo, &pl, bytes, &c), want, "{alg} {dims:?} {bytes} {endpoint:?}");
                    checked += 1;
                }
            }
        }
    }
    assert!(checked >= 45, "{checked}");
}
