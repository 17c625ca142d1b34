//! The flow backend on timing plans: the contention-free recurrence gives the same times as
//! the fluid simulation, and direct plans time like the schedules they stand for.
use reducelab_flow::{run_plan, run_plan_simulated, run_schedule, FlowConfig};
use reducelab_sched::algos::{build, Layout};
use reducelab_sched::plan::{plan, Plan};
use reducelab_sched::Collective;
use reducelab_topo::{torus, LinkParams};

const L: LinkParams = LinkParams { bandwidth_bps: 400_000_000_000, latency_ps: 100_000 };
const CFG: FlowConfig = FlowConfig {
    switch_latency_ps: 300_000,
    mtu_bytes: 4096,
    header_bytes: 64,
    endpoint: reducelab_flow::Endpoint::OFF,
};

#[test]
fn recurrence_equals_fluid_simulation_on_contention_free_plans() {
    let mut checked = 0;
    for dims in [vec![4u32, 4], vec![8, 8], vec![8, 4], vec![16], vec![4, 4, 4], vec![6, 3]] {
        let topo = torus(&dims, L).unwrap();
        let layout = Layout::new(dims.clone()).unwrap();
        for alg in ["ring", "ring-bidirectional", "hamiltonian-rings", "bucket"] {
            let Ok(pl) = plan(alg, &layout) else { continue };
            for bytes in [32u64, 64 << 10, 8 << 20] {
                let fast = run_plan(&topo, &pl, bytes, 4, &CFG).unwrap();
                let sim = run_plan_simulated(&topo, &pl, bytes, 4, &CFG).unwrap();
                assert!(!sim.contention_free);
                assert_eq!(fast.messages, sim.messages, "{alg} {dims:?}");
                // Ring on a multi-dimensional torus in rank order takes multi-hop wrap paths
                // that still never share links; bucket and Hamiltonian rings are one hop.
                if alg != "ring-bidirectional" || dims.len() == 1 {
                    assert!(fast.contention_free, "{alg} on {dims:?} should be contention-free");
                }
                if fast.contention_free {
                    let d = (fast.runtime_ps as f64 - sim.runtime_ps as f64).abs();
                    assert!(
                        d <= 2.0 + 1e-9 * sim.runtime_ps as f64,
                        "{alg} {dims:?} {bytes}: {} vs {}",
                        fast.runtime_ps,
                        sim.runtime_ps
                    );
                    checked += 1;
                }
            }
        }
    }
    assert!(checked >= 40, "{checked}");
}

#[test]
fn swing_uses_the_fluid_simulation_and_direct_plans_time_like_schedules() {
    let topo = torus(&[8, 8], L).unwrap();
    let layout = Layout::new(vec![8, 8]).unwrap();
    for alg in ["swing-bandwidth", "bucket", "hamiltonian-rings"] {
        let s = build(alg, Collective::Allreduce, &layout).unwrap();
        let direct = plan(alg, &layout).unwrap();
        assert_eq!(direct, Plan::from_schedule(&s).unwrap());
        for bytes in [1024u64, 1 << 20] {
            let a = run_schedule(&topo, &s, bytes, 4, &CFG).unwrap();
            let b = run_plan(&topo, &direct, bytes, 4, &CFG).unwrap();
            assert_eq!(a, b, "{alg} {bytes}");
            assert_eq!(a.contention_free, alg != "swing-bandwidth");
        }
    }
}

#[test]
fn bigger_vectors_take_longer_and_ring_time_matches_closed_form() {
    // Bidirectional ring on a 1D torus of 8: 2·7 steps of one hop each, no sharing, every
    // step = wire(block)/bandwidth + link latency + per-hop latency.
    let topo = torus(&[8], L).unwrap();
    let pl = plan("ring-bidirectional", &Layout::line(8)).unwrap();
    let bytes = 8u64 << 20;
    let r = run_plan(&topo, &pl, bytes, 4, &CFG).unwrap();
    assert!(r.contention_free);
    let block = bytes / 16;
    let pkts = block.div_ceil(4032);
    let step_ps = (block + pkts * 64) as f64 * 8.0 / 400e9 * 1e12 + 100_000.0 + 300_000.0;
    let want = 14.0 * step_ps;
    assert!((r.runtime_ps as f64 - want).abs() < 1.0 + 1e-9 * want, "{} vs {want}", r.runtime_ps);
    let small = run_plan(&topo, &pl, 1 << 20, 4, &CFG).unwrap();
    assert!(small.runtime_ps < r.runtime_ps);
}
