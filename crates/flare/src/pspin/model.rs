//! The analytical models of Flare §4–6 (seed 004), for one switch and one design.
//!
//! Symbols as in the paper's Table 2: K cores, S cores per subset, C cores per cluster, P packets
//! per block (children), δ the interarrival time of packets at the switch, δc that of packets of
//! one block, τ the service time of a core, L the cycles to aggregate one packet, M the buffers
//! of a block. Times are in cycles.
//!
//! - ℬ = min(K/τ, 1/δ) packets per cycle (§4.1);
//! - δk = min(Sδc, Kδ), Q = (P/S)(1 − δk/τ) (at least 0), 𝒬 = (Q + 1)K (eq. 1, §5);
//! - ℒ = (P − 1)δc + (Q + 1)τ (§5);
//! - ℛ = M·(ℬ/P)·ℒ buffers (§4.3, Little's law);
//! - τ per design (§6): single buffer L if S = 1 or δc ≥ L, else eq. 2's L(c − 1)/2 for c =
//!   min(S, P) handlers meeting in one critical section (the first only copies its packet, the
//!   i-th waits for i − 2 aggregations and does one: mean Σᵢ(i − 1)L / c), at least L; B buffers:
//!   δc replaced by Bδc (§6.2), c handlers over B critical sections spend L·mean(⌈i/B⌉ − 1), at
//!   least L, plus the last handler's (B − 1)L merge spread over the P packets; tree (P − 1)L/P
//!   with M = (P − 1)/log₂P.
//!
//! δ is the interarrival of P ports at line rate ((packet time + mean jitter) / P); with staggered
//! sending the packets of one block are spread over the blocks in flight, δc = δ·min(Z/N, W),
//! else δc = δ.

use super::config::SwitchConfig;
use super::designs::Design;
use super::workload::Workload;

/// Inputs of the model, in cycles and packets.
#[derive(Clone, Copy, Debug)]
pub struct ModelInput {
    pub cores: f64,
    pub subset: f64,
    pub cluster_cores: f64,
    pub children: f64,
    pub delta: f64,
    pub delta_c: f64,
    /// L: cycles to aggregate one packet.
    pub l_cycles: f64,
    pub packet_bytes: f64,
    pub clock_ghz: f64,
    pub design: Design,
}

/// What the model predicts.
#[derive(Clone, Copy, Debug, Default)]
pub struct ModelOutput {
    pub l_cycles: f64,
    pub tau_cycles: f64,
    /// ℬ in packets per cycle, and as aggregation bandwidth in Gb/s.
    pub bandwidth_pkts_per_cycle: f64,
    pub bandwidth_gbps: f64,
    pub delta_cycles: f64,
    pub delta_c_cycles: f64,
    pub delta_k_cycles: f64,
    /// Q: the longest queue in front of a core.
    pub queue: f64,
    /// 𝒬: packets in the switch (input buffer occupancy, eq. 1), and in bytes.
    pub packets_in_switch: f64,
    pub input_buffer_bytes: f64,
    /// ℒ: block latency.
    pub block_latency_cycles: f64,
    /// M: buffers per block.
    pub buffers_per_block: f64,
    /// ℛ: working memory, in buffers and bytes.
    pub working_buffers: f64,
    pub working_bytes: f64,
}

impl ModelInput {
    /// The model's inputs for `workload` on `cfg` with `design` (δ and δc as in the module docs).
    pub fn new(cfg: &SwitchConfig, w: &Workload, design: Design) -> ModelInput {
        let cycle_ps = cfg.cycle_ps() as f64;
        // Each port sends a packet every packet time plus the mean exponential gap.
        let delta = (w.packet_ps() as f64 + w.jitter_ns * 1000.0) / cycle_ps / w.hosts as f64;
        let delta_c = if w.staggered { delta * w.window() as f64 } else { delta };
        let l =
            cfg.costs.combine_cycles(w.packet_bytes, w.dtype.bytes(), w.dtype.lanes(), cfg.costs.cycles_per_vector_op)
                as f64;
        ModelInput {
            cores: cfg.cores() as f64,
            subset: cfg.subset_cores as f64,
            cluster_cores: cfg.hpus_per_cluster as f64,
            children: w.hosts as f64,
            delta,
            delta_c,
            l_cycles: l,
            packet_bytes: w.packet_bytes as f64,
            clock_ghz: cfg.clock_mhz as f64 / 1000.0,
            design,
        }
    }

    /// τ of the design (§6).
    pub fn tau(&self) -> f64 {
        let (l, p) = (self.l_cycles, self.children);
        let c = self.subset.min(p).max(1.0);
        let contended = |b: f64| ((1..=c as u64).map(|i| (i as f64 / b).ceil() - 1.0).sum::<f64>() / c * l).max(l);
        match self.design {
            Design::SingleBuffer => {
                if self.subset <= 1.0 || self.delta_c >= l {
                    l
                } else {
                    contended(1.0)
                }
            }
            Design::MultiBuffer(b) => {
                let b = b as f64;
                let agg = if self.subset <= 1.0 || b * self.delta_c >= l { l } else { contended(b) };
                agg + (b - 1.0) * l / p
            }
            Design::Tree => (p - 1.0).max(0.0) * l / p.max(1.0),
        }
    }

    pub fn buffers_per_block(&self) -> f64 {
        match self.design {
            Design::SingleBuffer => 1.0,
            Design::MultiBuffer(b) => b as f64,
            Design::Tree => {
                if self.children < 2.0 {
                    1.0
                } else {
                    (self.children - 1.0) / self.children.log2()
                }
            }
        }
    }

    pub fn evaluate(&self) -> ModelOutput {
        let tau = self.tau();
        let bw = if tau > 0.0 { (self.cores / tau).min(1.0 / self.delta) } else { 1.0 / self.delta };
        let delta_k = (self.subset * self.delta_c).min(self.cores * self.delta);
        let queue = if tau > 0.0 { (self.children / self.subset * (1.0 - delta_k / tau)).max(0.0) } else { 0.0 };
        let packets = (queue + 1.0) * self.cores;
        let latency = (self.children - 1.0) * self.delta_c + (queue + 1.0) * tau;
        let m = self.buffers_per_block();
        let working = m * bw / self.children * latency;
        ModelOutput {
            l_cycles: self.l_cycles,
            tau_cycles: tau,
            bandwidth_pkts_per_cycle: bw,
            bandwidth_gbps: bw * self.packet_bytes * 8.0 * self.clock_ghz,
            delta_cycles: self.delta,
            delta_c_cycles: self.delta_c,
            delta_k_cycles: delta_k,
            queue,
            packets_in_switch: packets,
            input_buffer_bytes: packets * self.packet_bytes,
            block_latency_cycles: latency,
            buffers_per_block: m,
            working_buffers: working,
            working_bytes: working * self.packet_bytes,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn input(design: Design, subset: f64, delta_c: f64) -> ModelInput {
        ModelInput {
            cores: 512.0,
            subset,
            cluster_cores: 8.0,
            children: 64.0,
            delta: 2.0,
            delta_c,
            l_cycles: 1024.0,
            packet_bytes: 1024.0,
            clock_ghz: 1.0,
            design,
        }
    }

    #[test]
    fn single_buffer_tau_follows_equation_2() {
        assert_eq!(input(Design::SingleBuffer, 1.0, 2.0).tau(), 1024.0);
        assert_eq!(input(Design::SingleBuffer, 8.0, 1024.0).tau(), 1024.0);
        assert_eq!(input(Design::SingleBuffer, 8.0, 10.0).tau(), 1024.0 * 3.5);
    }

    #[test]
    fn more_buffers_cut_contention_but_pay_the_merge() {
        let t2 = input(Design::MultiBuffer(2), 8.0, 10.0).tau();
        let t4 = input(Design::MultiBuffer(4), 8.0, 10.0).tau();
        // ⌈i/2⌉ − 1 over i = 1..8 averages 1.5; ⌈i/4⌉ − 1 averages 0.5, below the L every packet
        // costs anyway; merges add L/64 and 3L/64.
        assert_eq!(t2, 1024.0 * 1.5 + 1024.0 / 64.0);
        assert_eq!(t4, 1024.0 + 3.0 * 1024.0 / 64.0);
        // Uncontended (Bδc ≥ L), only the merge remains.
        assert_eq!(input(Design::MultiBuffer(4), 8.0, 256.0).tau(), 1024.0 + 48.0);
    }

    #[test]
    fn tree_tau_and_memory_are_the_papers() {
        let m = input(Design::Tree, 8.0, 2.0);
        assert_eq!(m.tau(), 63.0 * 1024.0 / 64.0);
        assert!((m.buffers_per_block() - 63.0 / 6.0).abs() < 1e-12);
    }

    #[test]
    fn equation_1_and_the_latency_on_the_papers_example() {
        // Fig. 5 scenario B: K = 4, S = 1, P = 4, δ = δc = 1, τ = 4: each core gets bursts of 4
        // packets 1 apart, Q = 4(1 − 1/4) = 3, 𝒬 = 16, ℒ = 3 + 4·4 = 19.
        let m = ModelInput {
            cores: 4.0,
            subset: 1.0,
            cluster_cores: 4.0,
            children: 4.0,
            delta: 1.0,
            delta_c: 1.0,
            l_cycles: 4.0,
            packet_bytes: 1.0,
            clock_ghz: 1.0,
            design: Design::SingleBuffer,
        }
        .evaluate();
        assert_eq!((m.queue, m.packets_in_switch, m.block_latency_cycles), (3.0, 16.0, 19.0));
        assert_eq!(m.bandwidth_pkts_per_cycle, 1.0);
        // Scenario C (δc = 4): δk = min(4, 4) = τ, no queue.
        let c = ModelInput {
            delta_c: 4.0,
            ..ModelInput {
                cores: 4.0,
                subset: 1.0,
                cluster_cores: 4.0,
                children: 4.0,
                delta: 1.0,
                delta_c: 1.0,
                l_cycles: 4.0,
                packet_bytes: 1.0,
                clock_ghz: 1.0,
                design: Design::SingleBuffer,
            }
        }
        .evaluate();
        assert_eq!(c.queue, 0.0);
        assert_eq!(c.packets_in_switch, 4.0);
    }
}
