//! Times the flow backend on big tori: `cargo run --release -p reducelab-sim --example
//! flow_scale -- torus:64x64 swing-bandwidth,bucket [min_bytes] [max_bytes]`.
use reducelab_sim::collective_run::{run_collective_sizes, Backend, NetworkOverrides};
use std::time::Instant;

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let topo = args.get(1).map(String::as_str).unwrap_or("torus:64x64");
    let algs = args.get(2).map(String::as_str).unwrap_or("swing-bandwidth");
    let lo: u64 = args.get(3).and_then(|s| s.parse().ok()).unwrap_or(32);
    let hi: u64 = args.get(4).and_then(|s| s.parse().ok()).unwrap_or(512 << 20);
    let sizes: Vec<u64> = std::iter::successors(Some(lo), |&s| (s < hi).then_some(s * 2)).collect();
    let params = NetworkOverrides::default();
    for alg in algs.split(',') {
        let t0 = Instant::now();
        let r = run_collective_sizes(topo, alg, &sizes, Backend::Flow, &params, 1, 1).unwrap();
        let wall = t0.elapsed().as_secs_f64();
        let worst = r.iter().map(|o| o.wall_seconds).fold(0.0, f64::max);
        let last = r.last().unwrap();
        println!(
            "{alg:32} {topo} {} sizes in {wall:.2} s (slowest size {worst:.2} s); {} B: {:.1} µs, {:.0} Gb/s, {} msgs",
            sizes.len(),
            last.size_bytes,
            last.runtime_ps as f64 / 1e6,
            last.goodput_gbps,
            last.messages
        );
    }
}
