//! Per-packet service time of the switch handlers, from the seed's PsPIN facts (seed 004 §3,
//! §6): handler processing units (HPUs) at 1 GHz, 64 clusters of 8 (512 HPUs); four cycles to
//! add a 4-byte element into the aggregation buffer and store it (≈1 ns per byte); a 64-cycle
//! DMA copy of a 1 KiB packet into L1. A packet is served by one HPU in `τ` cycles, and the
//! switch serves `K/τ` packets per cycle (the `B = min(K/τ, 1/δ)` of §4.1).
//!
//! The sparse costs per pair are those of the PsPIN model's sparse handlers
//! ([`super::pspin::SparseCosts`]: instruction counts at one instruction per cycle, the seed's
//! calibration of the dense loop; docs/flare-sparse.md, "Sparse handler costs"): 11 cycles per
//! pair into a hash table, 7 into an array.
//!
//! This is a seam: the PsPIN cycle model (`crate::pspin`) replaces these constants with its
//! scheduled, contention-aware handler times once it exists. The engine applies one per-packet
//! time to every programmable switch (`reducelab_net::ProgramLimits`), so a protocol gives the
//! cost of its largest packet.

/// HPUs per switch (64 clusters × 8, seed 004 §3).
pub const HPUS: u32 = 512;
/// HPU clock.
pub const CLOCK_GHZ: f64 = 1.0;
/// Cycles to add one 4-byte element into the aggregation buffer (seed 004 §6).
pub const CYCLES_PER_ELEMENT: u64 = 4;
/// DMA copy of a packet into L1 (seed 004 §6.3: 64 cycles for 1 KiB).
pub const DMA_CYCLES: u64 = 64;
/// Cycles per (index, value) pair into a hash table (`SparseCosts::hash_pair`).
pub const HASH_CYCLES_PER_PAIR: u64 = 11;
/// Cycles per pair into an array (`SparseCosts::array_pair`).
pub const ARRAY_CYCLES_PER_PAIR: u64 = 7;

/// Handler cycles `τ` of one packet.
pub fn dense_cycles(elements: u64) -> u64 {
    DMA_CYCLES + CYCLES_PER_ELEMENT * elements
}

/// Handler cycles `τ` of a sparse packet of `pairs` pairs into hash storage (the slower one).
pub fn sparse_cycles(pairs: u64) -> u64 {
    DMA_CYCLES + HASH_CYCLES_PER_PAIR.max(ARRAY_CYCLES_PER_PAIR) * pairs
}

/// (packets per second the switch serves with all HPUs busy, one packet's handler time in ps).
pub fn service(cycles_per_packet: u64) -> (f64, u64) {
    let per_packet_ps = cycles_per_packet as f64 * 1000.0 / CLOCK_GHZ;
    (HPUS as f64 * 1e12 / per_packet_ps, per_packet_ps.round() as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_kib_packets() {
        // 256 floats: 1088 cycles on one HPU (≈1 ns per byte plus the DMA copy).
        assert_eq!(dense_cycles(256), 1088);
        let (pps, lat) = service(dense_cycles(256));
        assert_eq!(lat, 1_088_000);
        // 512 HPUs: ≈470 M packets/s, ≈3.9 Tb/s of 1 KiB payloads: above an 8-port 100 Gb/s
        // switch's 800 Gb/s, so dense aggregation runs at line rate (as §6.4 finds).
        assert!((pps - 470.6e6).abs() < 1e6, "{pps}");
        assert!(sparse_cycles(128) > dense_cycles(256));
    }

    #[test]
    fn per_pair_costs_are_the_pspin_handlers() {
        let c = super::super::pspin::SparseCosts::default();
        assert_eq!((HASH_CYCLES_PER_PAIR, ARRAY_CYCLES_PER_PAIR), (c.hash_pair as u64, c.array_pair as u64));
        assert_eq!(sparse_cycles(128), 64 + 11 * 128);
    }
}
