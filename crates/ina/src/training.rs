//! Training jobs as traffic: the simulated DNN training of DSA's evaluation (seed 001,
//! §VII-B), as plain data a worker transport can stream.
//!
//! What the seed states, and how it is modelled:
//!
//! - "we assume that all DNNs have only two layers with the same size, and each layer is
//!   evenly divided into two tensor partitions" — [`DnnModel`] with `layers = 2`,
//!   `partitions_per_layer = 2`.
//! - "DNN A ... is communication-intensive with a tensor partition size of 4 MB and a
//!   computation time of 0.32 ms per layer (theoretical communication time: computation time
//!   = 2:1). ... B ... 2MB and ... 0.64 ms per layer (... 1:2)" — [`DNN_A`], [`DNN_B`]. The
//!   2:1 holds for decimal megabytes of payload at 100 Gb/s (a layer of 8·10⁶ B takes
//!   0.64 ms), so MB here is 10⁶ B and the ratio counts payload only.
//! - "Since the backward propagation (BP) starts to compute the gradients from the back layer,
//!   we assume that the first tensor partition of the second layer is transmitted first,
//!   followed by the first layer, and finally, the second tensor partition of the second
//!   layer." — [`DnnModel::send_order`]. The gradients of layer `l` are computed after those
//!   of the layers behind it, one computation time per layer, from the job's start: layer 2's
//!   at `start + c`, layer 1's at `start + 2c`. A partition may be sent once its layer is
//!   computed (plus the worker's jitter) and the partitions before it in the order may be
//!   sent: a worker streams its epoch's partitions as one sequence of PSNs, so the
//!   communication of layer 2 overlaps the computation of layer 1.
//! - "a job is defined as a one-epoch training — computing a gradient, AllReducing gradients,
//!   and updating the model" — the job completes when every worker holds every aggregated
//!   PSN (the model update is not timed). The seed's remark that the *next* epoch's layer 1
//!   may start as soon as its results are in concerns the epoch after the one timed; it is
//!   not modelled (one epoch per job).
//! - "we use a random variable t as the job start time, where t ∼ U(0, 1 ms)" and "we add a
//!   jitter j on the sending side, where j ∼ U(0, 300 µs), which is approximate to the
//!   computation time of a tensor partition" — the caller draws them (this module has no
//!   RNG): one start per job, one jitter per (worker, partition), added to the time the
//!   partition becomes ready.
//! - Priorities (§V, Eq. 1, `P_j(l) = (1/T_j)·(L_j/l)·(Comm_j/Comp_j)`, "We use the remaining
//!   time of the current epoch to estimate T_j"): [`DnnModel::epoch_estimate_ps`] is the
//!   epoch's theoretical length (the computation of every layer plus the communication of
//!   every partition at the link rate, not overlapped); `T_j` is that minus the time the job
//!   has run, floored at one packet time.
//!
//! Units: integer picoseconds, bytes.

/// One DNN as the seed's simulation describes it.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct DnnModel {
    pub name: &'static str,
    pub layers: u32,
    pub partitions_per_layer: u32,
    /// Payload bytes of one tensor partition.
    pub partition_bytes: u64,
    /// Computation time of one layer's gradients.
    pub compute_ps_per_layer: u64,
}

/// "communication-intensive with a tensor partition size of 4 MB and a computation time of
/// 0.32 ms per layer".
pub const DNN_A: DnnModel = DnnModel {
    name: "A",
    layers: 2,
    partitions_per_layer: 2,
    partition_bytes: 4_000_000,
    compute_ps_per_layer: 320_000_000,
};

/// "computation-intensive with a tensor partition size of 2MB and a computation time of 0.64
/// ms per layer".
pub const DNN_B: DnnModel = DnnModel {
    name: "B",
    layers: 2,
    partitions_per_layer: 2,
    partition_bytes: 2_000_000,
    compute_ps_per_layer: 640_000_000,
};

/// The models by name (`A`, `B`), for scenario files.
pub fn dnn_model(name: &str) -> Option<DnnModel> {
    [DNN_A, DNN_B].into_iter().find(|m| m.name.eq_ignore_ascii_case(name))
}

/// One tensor partition of a worker's epoch, in send order.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Partition {
    /// Layer, 1-based from the front (the seed's `l`).
    pub layer: u32,
    /// Partition within the layer, 0-based.
    pub index: u32,
    /// First PSN of the partition in the epoch's sequence.
    pub first_psn: u32,
    pub packets: u32,
    /// When its packets may be sent at the earliest.
    pub ready_ps: u64,
}

impl DnnModel {
    /// The order partitions are sent in, as (layer, partition): for the seed's 2×2 model, the
    /// first partition of layer 2, then layer 1, then the rest of layer 2; for other shapes,
    /// plain backward order (back layer first, partitions in order).
    pub fn send_order(&self) -> Vec<(u32, u32)> {
        if self.layers == 2 && self.partitions_per_layer == 2 {
            return vec![(2, 0), (1, 0), (1, 1), (2, 1)];
        }
        (1..=self.layers).rev().flat_map(|l| (0..self.partitions_per_layer).map(move |p| (l, p))).collect()
    }

    /// When layer `l`'s gradients are computed, from the job's start (back layer first).
    pub fn layer_done_ps(&self, layer: u32) -> u64 {
        (self.layers - layer + 1) as u64 * self.compute_ps_per_layer
    }

    /// Packets of one partition at `payload_bytes` per packet.
    pub fn packets_per_partition(&self, payload_bytes: u32) -> u32 {
        self.partition_bytes.div_ceil(payload_bytes as u64) as u32
    }

    /// Payload bytes of one epoch.
    pub fn epoch_bytes(&self) -> u64 {
        self.partition_bytes * (self.layers * self.partitions_per_layer) as u64
    }

    /// The epoch's theoretical communication time at `link_bps` (payload only, as the seed's
    /// ratios count it).
    pub fn comm_ps(&self, link_bps: u64) -> u64 {
        (self.epoch_bytes() as u128 * 8 * 1_000_000_000_000 / link_bps as u128) as u64
    }

    /// The epoch's computation time.
    pub fn comp_ps(&self) -> u64 {
        self.layers as u64 * self.compute_ps_per_layer
    }

    /// `Comm_j / Comp_j` of Eq. (1).
    pub fn comm_to_comp(&self, link_bps: u64) -> f64 {
        self.comm_ps(link_bps) as f64 / self.comp_ps() as f64
    }

    /// The epoch's estimated length: computation plus communication, not overlapped.
    pub fn epoch_estimate_ps(&self, link_bps: u64) -> u64 {
        self.comm_ps(link_bps) + self.comp_ps()
    }

    /// One worker's epoch: its partitions in send order with PSN ranges and ready times.
    /// `jitter_ps[k]` delays the `k`-th partition in send order (one entry per partition).
    pub fn plan(&self, payload_bytes: u32, start_ps: u64, jitter_ps: &[u64]) -> Vec<Partition> {
        let order = self.send_order();
        assert_eq!(jitter_ps.len(), order.len(), "one jitter per partition");
        let packets = self.packets_per_partition(payload_bytes);
        let mut psn = 0u32;
        let mut ready = 0u64;
        order
            .iter()
            .zip(jitter_ps)
            .map(|(&(layer, index), &j)| {
                ready = ready.max(start_ps + self.layer_done_ps(layer) + j);
                let p = Partition { layer, index, first_psn: psn, packets, ready_ps: ready };
                psn += packets;
                p
            })
            .collect()
    }
}

/// PSNs of a planned epoch that may be sent at `now_ps` (a prefix of the sequence).
pub fn available_psns(plan: &[Partition], now_ps: u64) -> u32 {
    plan.iter().take_while(|p| p.ready_ps <= now_ps).map(|p| p.packets).sum()
}

/// The next time more PSNs become available after `now_ps`, if any.
pub fn next_ready_ps(plan: &[Partition], now_ps: u64) -> Option<u64> {
    plan.iter().map(|p| p.ready_ps).find(|&t| t > now_ps)
}

/// The partition a PSN of the epoch belongs to.
pub fn partition_of(plan: &[Partition], psn: u32) -> Option<&Partition> {
    plan.iter().find(|p| psn >= p.first_psn && psn < p.first_psn + p.packets)
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: u64 = 1_000_000_000;
    const US: u64 = 1_000_000;
    const GBPS100: u64 = 100_000_000_000;

    #[test]
    fn the_seeds_ratios_hold() {
        // "theoretical communication time: computation time = 2:1" and "1:2".
        assert_eq!(DNN_A.comm_to_comp(GBPS100), 2.0);
        assert_eq!(DNN_B.comm_to_comp(GBPS100), 0.5);
        assert_eq!(DNN_A.comm_ps(GBPS100), 1_280 * US);
        assert_eq!(DNN_A.comp_ps(), 640 * US);
        assert_eq!(dnn_model("b"), Some(DNN_B));
        assert_eq!(dnn_model("C"), None);
    }

    #[test]
    fn partitions_go_in_the_seeds_order_with_overlap() {
        // 248 B of payload per packet (62 four-byte values, ATP's MAX_ENTRIES_PER_PACKET).
        let plan = DNN_A.plan(248, MS, &[0, 0, 0, 0]);
        let order: Vec<(u32, u32)> = plan.iter().map(|p| (p.layer, p.index)).collect();
        assert_eq!(order, vec![(2, 0), (1, 0), (1, 1), (2, 1)]);
        let n = 4_000_000u32.div_ceil(248);
        assert_eq!(plan.iter().map(|p| p.first_psn).collect::<Vec<_>>(), vec![0, n, 2 * n, 3 * n]);
        // Layer 2 after one computation time, layer 1 after two; the last partition (layer 2)
        // waits for the ones before it.
        assert_eq!(
            plan.iter().map(|p| p.ready_ps).collect::<Vec<_>>(),
            vec![MS + 320 * US, MS + 640 * US, MS + 640 * US, MS + 640 * US]
        );
        assert_eq!(available_psns(&plan, MS + 320 * US - 1), 0);
        assert_eq!(available_psns(&plan, MS + 320 * US), n);
        assert_eq!(available_psns(&plan, MS + 640 * US), 4 * n);
        assert_eq!(next_ready_ps(&plan, MS), Some(MS + 320 * US));
        assert_eq!(next_ready_ps(&plan, MS + 640 * US), None);
        assert_eq!(partition_of(&plan, n).map(|p| p.layer), Some(1));
        assert_eq!(partition_of(&plan, 4 * n), None);
    }

    #[test]
    fn jitter_delays_a_partition_and_everything_after_it() {
        let plan = DNN_B.plan(248, 0, &[300 * US, 0, 0, 0]);
        // Layer 2 at 640 µs + 300 µs jitter = 940 µs; layer 1 at 1280 µs.
        assert_eq!(plan[0].ready_ps, 940 * US);
        assert_eq!(plan[1].ready_ps, 1280 * US);
        // The last partition's data (layer 2) was ready long before its turn.
        let plan = DNN_B.plan(248, 0, &[0, 0, 0, 100 * US]);
        assert_eq!(plan[3].ready_ps, 1280 * US);
        let plan = DNN_B.plan(248, 0, &[0, 0, 0, 700 * US]);
        assert_eq!(plan[3].ready_ps, 1340 * US);
        let plan = DNN_B.plan(248, 0, &[700 * US, 0, 0, 0]);
        assert_eq!(plan[1].ready_ps, 1340 * US, "in-order stream: layer 1 waits for the late layer-2 partition");
    }

    #[test]
    fn other_shapes_use_backward_order() {
        let m = DnnModel { layers: 3, partitions_per_layer: 1, ..DNN_A };
        assert_eq!(m.send_order(), vec![(3, 0), (2, 0), (1, 0)]);
        assert_eq!(m.layer_done_ps(1), 3 * 320 * US);
    }
}
