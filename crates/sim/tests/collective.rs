use reducelab_des::{Rng, SimTime};
use reducelab_net::{NetConfig, Network, RunEnd};
use reducelab_sched::algos::{build, Layout};
use reducelab_sched::{Collective, RecvOp, Schedule};
use reducelab_sim::collective::CollectiveRun;
use reducelab_topo::{star, torus, LinkParams};

fn run(topo: &reducelab_topo::Topology, sched: Schedule, bytes: u64) -> (reducelab_sim::collective::CollectiveResult, RunEnd) {
    let cfg = NetConfig { switch_latency_ps: 300_000, ..NetConfig::default() };
    let mut net = Network::new(topo, cfg, vec![], &Rng::new(5)).unwrap();
    let hosts = (0..sched.ranks).collect();
    let mut w = CollectiveRun::new(topo, sched, hosts, bytes, 4, 0, SimTime::ZERO, 99);
    let end = net.run(&mut w, None, &mut |_| {});
    (w.result(), end)
}

const L: LinkParams = LinkParams { bandwidth_bps: 400_000_000_000, latency_ps: 100_000 };

#[test]
fn ring_allreduce_runs_and_verifies_on_star_and_torus() {
    for p in [2u32, 3, 8, 13] {
        let topo = star(p, L).unwrap();
        let s = build("ring", Collective::Allreduce, &Layout::line(p)).unwrap();
        let (r, end) = run(&topo, s, 1 << 20);
        assert_eq!(end, RunEnd::Stopped);
        assert!(r.verified, "{:?}", r.mismatch);
        assert_eq!(r.messages, 2 * (p as u64 - 1) * p as u64);
        // Bandwidth bound: every rank sends 2(p-1)/p of the vector through its one link.
        let lower = (2.0 * (p - 1) as f64 / p as f64) * (1 << 20) as f64 * 8.0 / 400e9;
        let t = r.runtime_ps().unwrap() as f64 * 1e-12;
        assert!(t > lower && t < 1.5 * lower + 2.0 * (p as f64) * 2e-6, "p={p}: {t} s vs bound {lower}");
    }
    let topo = torus(&[4, 4], L).unwrap();
    let s = build("ring", Collective::ReduceScatter, &Layout::line(16)).unwrap();
    let (r, _) = run(&topo, s, 1 << 16);
    assert!(r.verified, "{:?}", r.mismatch);
}

#[test]
fn a_wrong_schedule_is_caught_by_the_fingerprints() {
    let topo = star(4, L).unwrap();
    let mut s = build("ring", Collective::Allreduce, &Layout::line(4)).unwrap();
    // Turn one reduction into a copy: a contribution is lost.
    s.programs[1].steps[0].recvs[0].op = Some(RecvOp::Copy);
    let (r, _) = run(&topo, s, 4096);
    assert!(!r.verified);
    assert!(r.mismatch.unwrap().contains("expected"));
}
