//! `reducelab-switch bench --protocol switchml|atp|dsa`: the pool protocols' benchmark runs one
//! training job through one switch thread and reports a verified run with plausible counts.
//! Nothing here is timed (timings are the bench's output, not a test's assertion).
//!
//! Addresses: 127.79.K.0/24 (`loopback.rs` uses 127.77, `pool.rs` 127.78).

use std::net::Ipv4Addr;

use reducelab_switch::bench::{measure_pool, pool_scenario, POOL_PAYLOAD_BYTES};

#[test]
fn pool_bench_runs_each_protocol_verified_with_every_packet_counted() {
    // 4 partitions of 15,500 B: 63 packets each (62 × 248 B = 15,376 B, one more for the rest).
    let bytes: u64 = 62_000;
    let psns = 4 * (bytes / 4).div_ceil(POOL_PAYLOAD_BYTES) as u32;
    assert_eq!(psns, 252);
    for (k, proto) in ["switchml", "atp", "dsa"].into_iter().enumerate() {
        let workers = 4;
        let m = measure_pool(workers, bytes, proto, Ipv4Addr::new(127, 79, k as u8 + 1, 1), 47000)
            .unwrap_or_else(|e| panic!("{proto}: {e}"));
        assert_eq!(m.verified_workers, workers, "{proto}");
        // The size is the parameter: each worker's epoch is the requested bytes in whole packets.
        assert_eq!(m.psns, psns, "{proto}");
        assert_eq!(m.payload_bytes, psns as u64 * POOL_PAYLOAD_BYTES, "{proto}");
        // Every worker sends every PSN through the switch at least once (ATP's and DSA's PS
        // traffic and retransmissions come on top); the hosts sent every packet it received
        // (the switch receives nothing else on loopback).
        assert!(
            m.switch_packets >= workers as u64 * psns as u64,
            "{proto}: the switch saw {} packets, fewer than {workers} × {psns}",
            m.switch_packets
        );
        assert!(
            m.switch_packets <= m.host_tx_packets,
            "{proto}: switch received {} > hosts sent {}",
            m.switch_packets,
            m.host_tx_packets
        );
        assert!(m.switch_cpu_s > 0.0 && m.slowest_s > 0.0 && m.slowest_s.is_finite(), "{proto}: {m:?}");
    }
}

#[test]
fn pool_bench_refuses_a_size_outside_the_model_with_the_reason() {
    let e = pool_scenario(4, 16_000_001, "atp").unwrap_err();
    assert!(e.starts_with("--bytes:") && e.contains("16000000"), "{e}");
    let e = pool_scenario(4, 100, "dsa").unwrap_err();
    assert!(e.starts_with("--bytes:") && e.contains("992"), "{e}");
    let e = pool_scenario(4, 1 << 20, "canary").unwrap_err();
    assert!(e.starts_with("--protocol:"), "{e}");
}
