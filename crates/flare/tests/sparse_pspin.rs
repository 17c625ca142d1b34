//! Sparse allreduce on the PsPIN switch model (seed 004 §7, Fig. 14): the sparse handlers'
//! memory per block, their extra traffic, and the refusal of an array that does not fit.

use reducelab_flare::pspin::switch::run_traffic;
use reducelab_flare::pspin::{SwitchConfig, Workload};
use reducelab_flare::sparse::pspin::{SparseCosts, SparseHandlers, SparseTraffic};
use reducelab_flare::sparse::switch::Storage;

fn switch(clusters: u32) -> SwitchConfig {
    SwitchConfig { clusters, backpressure: true, ..SwitchConfig::default() }
}

fn workload(hosts: u32, bytes: u64) -> Workload {
    let mut w = Workload::new(hosts, bytes);
    w.window_blocks = 1024;
    w.jitter_ns = 10.0;
    w
}

fn hash() -> Storage {
    Storage::Hash { slots: 512, spill: 128 }
}

/// (status, block bytes, peak cluster L1, extra traffic, bandwidth Gb/s, pairs in)
fn run(cfg: &SwitchConfig, w: &Workload, density: f64, storage: Storage) -> (&'static str, u64, u64, f64, f64, u64) {
    let t = SparseTraffic::new(w, density).unwrap();
    let mut h = SparseHandlers::new(&t, storage, SparseCosts::default()).unwrap();
    let r = run_traffic(cfg, w, &t, &mut h).unwrap();
    let distinct: u64 = t.distinct.iter().map(|&d| d as u64).sum();
    (
        r.status,
        h.stats.block_bytes,
        r.peak_cluster_l1_bytes,
        h.stats.pairs_out as f64 / distinct as f64 - 1.0,
        r.bandwidth_gbps,
        h.stats.pairs_in,
    )
}

#[test]
fn hash_memory_per_block_is_density_independent_and_array_memory_grows_as_density_falls() {
    // 4 clusters, 4 children, 64 KiB of pairs per host (64 blocks), every block in flight.
    let (cfg, w) = (switch(4), workload(4, 64 << 10));
    let hash_runs: Vec<_> = [0.2, 0.1, 0.01].iter().map(|&d| run(&cfg, &w, d, hash())).collect();
    let array_runs: Vec<_> = [0.2, 0.1, 0.01].iter().map(|&d| run(&cfg, &w, d, Storage::Array)).collect();
    for r in hash_runs.iter().chain(&array_runs) {
        assert_eq!(r.0, "completed", "{r:?}");
    }
    // Hash: 512 slots + 128 spill entries of 8 bytes, whatever the density.
    assert!(hash_runs.iter().all(|r| r.1 == 5120), "{hash_runs:?}");
    // Array: 4 bytes per element of a span ⌈128 / density⌉ = 640, 1280, 12800.
    assert_eq!(array_runs.iter().map(|r| r.1).collect::<Vec<_>>(), [2560, 5120, 51200]);
    // The L1 the simulated switch measured follows: the array's peak grows as the density
    // falls, the hash table's does not depend on it.
    assert!(array_runs[0].2 < array_runs[1].2 && array_runs[1].2 < array_runs[2].2, "{array_runs:?}");
    assert!(hash_runs.iter().all(|r| r.2 % 5120 == 0 && r.2 <= 16 * 5120), "{hash_runs:?}");
}

#[test]
fn hash_storage_spills_extra_traffic_and_the_array_sends_none() {
    let (cfg, w) = (switch(2), workload(4, 64 << 10));
    let h = run(&cfg, &w, 0.2, hash());
    let a = run(&cfg, &w, 0.2, Storage::Array);
    // The same pairs went in; the array sends each distinct index once, the hash table more
    // (its spilled pairs are sent as they are).
    assert_eq!(h.5, a.5);
    assert_eq!(a.3, 0.0);
    assert!(h.3 > 0.0, "{h:?}");
    // A one-slot table spills almost everything: far more extra traffic than 512 slots.
    let one = run(&cfg, &w, 0.2, Storage::Hash { slots: 1, spill: 128 });
    assert!(one.3 > 2.0 * h.3, "{one:?} vs {h:?}");
    // Deterministic: the same inputs give the same run; another jitter seed another timing.
    assert_eq!(run(&cfg, &w, 0.2, hash()), h);
    let mut w7 = w;
    w7.seed = 7;
    assert_ne!(run(&cfg, &w7, 0.2, hash()).4, h.4);
}

#[test]
fn an_array_whose_blocks_in_flight_do_not_fit_in_l1_is_refused() {
    // 256 blocks in flight on 2 clusters: 128 per cluster. At 1% an array block spans 12,800
    // elements (50 KiB): 6.25 MiB in one cluster's 1 MiB L1. At 10% (5 KiB) it fits.
    let (cfg, w) = (switch(2), workload(4, 256 << 10));
    let one = run(&cfg, &w, 0.01, Storage::Array);
    assert_eq!(one.0, "l1_overflow", "{one:?}");
    assert!(one.2 > cfg.l1_bytes_per_cluster && one.2 % 51200 == 0, "{one:?}");
    let ten = run(&cfg, &w, 0.1, Storage::Array);
    assert_eq!(ten.0, "completed", "{ten:?}");
    assert!(ten.2 <= cfg.l1_bytes_per_cluster);
    // The hash table at 1% takes 5 KiB per block and fits.
    assert_eq!(run(&cfg, &w, 0.01, hash()).0, "completed");
}

#[test]
fn what_the_switch_sends_adds_up_to_the_exact_sums_whether_pairs_spill_or_not() {
    // A small table spills often at 20%: pairs leave in spill packets and in completed blocks;
    // every element's sent total must still be the hosts' exact sum, for hash and array alike.
    let (cfg, w) = (switch(2), workload(4, 32 << 10));
    let t = SparseTraffic::new(&w, 0.2).unwrap();
    for storage in [Storage::Hash { slots: 16, spill: 8 }, hash(), Storage::Array] {
        let mut h = SparseHandlers::new(&t, storage, SparseCosts::default()).unwrap();
        assert_eq!(run_traffic(&cfg, &w, &t, &mut h).unwrap().status, "completed");
        h.check(&t).unwrap_or_else(|e| panic!("{storage:?}: {e}"));
        if matches!(storage, Storage::Hash { slots: 16, .. }) {
            assert!(h.stats.spill_packets > 0, "the small table spilled: {:?}", h.stats);
        }
        // The check can fail: the same run judged against other hosts' data names a block.
        let mut w2 = w;
        w2.data_seed ^= 1;
        let other = SparseTraffic::new(&w2, 0.2).unwrap();
        let e = h.check(&other).unwrap_err();
        assert!(e.starts_with("block ") && e.contains("instead of"), "{e}");
    }
}
