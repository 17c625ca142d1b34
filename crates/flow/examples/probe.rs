use reducelab_flow::{run_plan, FlowConfig};
use reducelab_sched::algos::Layout;
use reducelab_sched::plan::plan;
use reducelab_topo::{torus, LinkParams};
use std::time::Instant;
fn main() {
    let a: Vec<String> = std::env::args().collect();
    let d: u32 = a[1].parse().unwrap();
    let alg = &a[2];
    let bytes: u64 = a[3].parse().unwrap();
    let l = LinkParams { bandwidth_bps: 400_000_000_000, latency_ps: 100_000 };
    let topo = torus(&[d, d], l).unwrap();
    let t0 = Instant::now();
    let pl = plan(alg, &Layout::new(vec![d, d]).unwrap()).unwrap();
    let t1 = Instant::now();
    let r = run_plan(&topo, &pl, bytes, 4, &FlowConfig { per_hop_ps: 300_000, mtu_bytes: 4096, header_bytes: 64 }).unwrap();
    println!("plan {:.2}s run {:.2}s {:?}", (t1 - t0).as_secs_f64(), t1.elapsed().as_secs_f64(), r);
}
