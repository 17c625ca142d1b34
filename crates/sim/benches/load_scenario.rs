//! Criterion benchmark of loading a scenario (parsing, validation and the topology build it
//! implies; nothing is simulated).
//!
//! `large_hammingmesh` is a known slow path that the cargo-fuzz target found (its `timeout-…`
//! artifact): for adaptive routing on a lossless HyperX, HammingMesh or dragonfly,
//! `VcPolicy::choose` (reducelab-net) sizes the hop-index VCs from `Topology::host_diameter`,
//! one BFS per host, O(hosts × links): this 10,752-host HammingMesh takes seconds just to load,
//! and larger ones that the size limits accept take minutes to hours.
//!
//! `cargo bench -p reducelab-sim --bench load_scenario`
use criterion::{criterion_group, criterion_main, Criterion};
use reducelab_sim::load_scenario_str;

const LARGE_HAMMINGMESH: &str = r#"
name = "hx-large"
[topology]
kind = "hammingmesh"
board = [8, 7]
grid = [4, 48]
bandwidth_gbps = 400
latency_ns = 100
[[traffic]]
kind = "permutation"
bytes = 131072
"#;

fn load(c: &mut Criterion) {
    let mut group = c.benchmark_group("load_scenario");
    group.sample_size(10);
    group.bench_function("large_hammingmesh", |b| {
        b.iter(|| {
            let sc = load_scenario_str(LARGE_HAMMINGMESH, None).unwrap_or_else(|e| panic!("{e}"));
            assert_eq!(sc.topology.num_hosts(), 8 * 4 * 7 * 48);
            sc
        })
    });
    group.finish();
}

criterion_group!(benches, load);
criterion_main!(benches);
