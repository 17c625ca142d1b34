//! The PsPIN switch's parameters and its per-operation cycle costs, calibrated once from the
//! facts stated in seeds 003/004 (each constant's source is quoted in docs/flare.md).

use std::fmt;

/// A rejected parameter: the field (dotted path as in a scenario file) and the reason.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConfigError {
    pub field: String,
    pub reason: String,
}

impl ConfigError {
    pub fn new(field: impl Into<String>, reason: impl Into<String>) -> Self {
        ConfigError { field: field.into(), reason: reason.into() }
    }
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.field, self.reason)
    }
}

impl std::error::Error for ConfigError {}

/// Cycle costs of the operations handlers perform.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct CostModel {
    /// Cycles for one vector operation of "sum two elements and store the result back in the
    /// aggregation buffer" (seed 004 §6: "four cycles to sum two 4-bytes floating point values").
    pub cycles_per_vector_op: u32,
    /// Cycles of a DMA copy of 1 KiB between L1 buffers (seed 004 §6.3: "the DMA engine, at the
    /// cost of 64 cycles instead of the 1024 cycles needed for the aggregation").
    pub dma_cycles_per_kib: u32,
    /// Slow-down of an access to another cluster's L1 (seed 004 §5: "up to 25x higher").
    pub remote_l1_factor: u32,
    /// Cycles of one acquire or release of a lock in L1 (an atomic on single-cycle TCDM; not
    /// stated in the seeds: an assumption, docs/flare.md).
    pub lock_cycles: u32,
    /// Cycles of a handler's fixed work per packet (reading the header, the block's state).
    /// Not stated in the seeds: an assumption, docs/flare.md.
    pub handler_overhead_cycles: u32,
}

impl Default for CostModel {
    fn default() -> Self {
        CostModel {
            cycles_per_vector_op: 4,
            dma_cycles_per_kib: 64,
            remote_l1_factor: 25,
            lock_cycles: 2,
            handler_overhead_cycles: 16,
        }
    }
}

impl CostModel {
    /// Cycles to combine `bytes` of `lanes`-wide elements at `cycles_per_op` cycles per vector
    /// operation (rounded up to whole vector operations).
    pub fn combine_cycles(&self, bytes: u32, elem_bytes: u32, lanes: u32, cycles_per_op: u32) -> u64 {
        let elems = (bytes / elem_bytes) as u64;
        elems.div_ceil(lanes as u64) * cycles_per_op as u64
    }

    /// Cycles of a DMA copy of `bytes` (rounded up to whole 64-byte beats).
    pub fn dma_cycles(&self, bytes: u32) -> u64 {
        (bytes as u64 * self.dma_cycles_per_kib as u64).div_ceil(1024)
    }
}

/// One PsPIN processing unit of a Flare switch (seed 004 §3).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct SwitchConfig {
    /// Clusters ("we can fit ∼64 clusters", §3).
    pub clusters: u32,
    /// HPUs per cluster ("eight cores each", §3).
    pub hpus_per_cluster: u32,
    /// Clock in MHz ("clocked at 1 GHz", §3). Must divide 10^6 so a cycle is whole picoseconds.
    pub clock_mhz: u32,
    /// L1 scratchpad per cluster ("single-cycle scratchpad 1MiB memory", §3).
    pub l1_bytes_per_cluster: u64,
    /// L2 packet memory ("a 4MiB L2 packet memory", §3): packets wait here until their handler ends.
    pub l2_packet_bytes: u64,
    /// Cores per scheduling subset S (§5): the packets of one block run on one subset.
    pub subset_cores: u32,
    /// When the L2 is full: pause the ports (true) or drop the packet (false). "If the packet
    /// memory is full, the packet is dropped or congestion is notified before filling the
    /// buffer, depending on the specific network" (§3, footnote 2).
    pub backpressure: bool,
    pub costs: CostModel,
}

impl Default for SwitchConfig {
    fn default() -> Self {
        SwitchConfig {
            clusters: 64,
            hpus_per_cluster: 8,
            clock_mhz: 1000,
            l1_bytes_per_cluster: 1 << 20,
            l2_packet_bytes: 4 << 20,
            subset_cores: 8,
            backpressure: false,
            costs: CostModel::default(),
        }
    }
}

impl SwitchConfig {
    /// K: cores of the switch.
    pub fn cores(&self) -> u32 {
        self.clusters * self.hpus_per_cluster
    }

    /// Picoseconds per cycle.
    pub fn cycle_ps(&self) -> u64 {
        1_000_000 / self.clock_mhz as u64
    }

    /// Checks the parameters; fields are named as in a scenario's `[pspin]` table.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let pos = |v: u64, f: &str| if v == 0 { Err(ConfigError::new(f, "must be positive")) } else { Ok(()) };
        pos(self.clusters as u64, "pspin.clusters")?;
        pos(self.hpus_per_cluster as u64, "pspin.hpus_per_cluster")?;
        pos(self.clock_mhz as u64, "pspin.clock_mhz")?;
        pos(self.l1_bytes_per_cluster, "pspin.l1_bytes_per_cluster")?;
        pos(self.l2_packet_bytes, "pspin.l2_packet_bytes")?;
        pos(self.subset_cores as u64, "pspin.subset_cores")?;
        pos(self.costs.cycles_per_vector_op as u64, "pspin.cycles_per_vector_op")?;
        pos(self.costs.remote_l1_factor as u64, "pspin.remote_l1_factor")?;
        if 1_000_000 % self.clock_mhz != 0 {
            return Err(ConfigError::new(
                "pspin.clock_mhz",
                format!(
                    "{} MHz is not a whole number of picoseconds per cycle (use a divisor of 1000000)",
                    self.clock_mhz
                ),
            ));
        }
        if self.cores() > 1 << 20 {
            return Err(ConfigError::new(
                "pspin.clusters",
                format!("{} cores is more than the model's limit of 2^20", self.cores()),
            ));
        }
        let (s, c) = (self.subset_cores, self.hpus_per_cluster);
        if self.cores() % s != 0 || !(c % s == 0 || s % c == 0) {
            return Err(ConfigError::new(
                "pspin.subset_cores",
                format!(
                    "{s} must divide the {} cores and either divide or be a multiple of the {c} HPUs of a cluster",
                    self.cores()
                ),
            ));
        }
        Ok(())
    }
}
