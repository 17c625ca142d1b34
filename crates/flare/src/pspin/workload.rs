//! The hosts feeding one Flare switch (seed 004 §4–5): P children, each on its own port at line
//! rate, each splitting its Z bytes into blocks of one packet, sending in order or *staggered*,
//! with at most W blocks in flight, optionally with exponentially distributed extra gaps ("we
//! generate packets with a random and exponentially distributed arrival rate", §6.4).

use super::config::ConfigError;
use super::dtype::{DataType, Operator};

/// The allreduce one switch aggregates and how its children send it.
#[derive(Clone, Copy, Debug)]
pub struct Workload {
    /// P: children of the switch (one host per port).
    pub hosts: u32,
    /// Z: bytes each host contributes.
    pub bytes_per_host: u64,
    /// N: payload bytes per packet (one packet per block per host).
    pub packet_bytes: u32,
    /// Line rate of each port.
    pub bandwidth_gbps: f64,
    pub dtype: DataType,
    pub op: Operator,
    /// Staggered sending (§5): host h sends each window's blocks starting at h·W/P.
    pub staggered: bool,
    /// W: blocks a host may have in flight (sent, result not yet back); 0 = no limit (every
    /// block, as the paper's models assume: δc up to δ·Z/N, §5).
    pub window_blocks: u32,
    /// Mean of an exponentially distributed extra gap after each packet, in ns (0 = none).
    pub jitter_ns: f64,
    /// Carry real element arrays (small runs) and check the results.
    pub carry_data: bool,
    /// Each packet's header carries an f32 scale (quantised payloads, [`Workload::scale`]).
    pub header_scales: bool,
    /// Seeds the jitter (the arrival order).
    pub seed: u64,
    /// Seeds the hosts' element values, independently of the arrival order.
    pub data_seed: u64,
}

impl Workload {
    /// A 1 KiB-packet int32 sum of `bytes_per_host` over `hosts` ports at 100 Gb/s.
    pub fn new(hosts: u32, bytes_per_host: u64) -> Self {
        Workload {
            hosts,
            bytes_per_host,
            packet_bytes: 1024,
            bandwidth_gbps: 100.0,
            dtype: DataType::Int32,
            op: Operator::Sum,
            staggered: true,
            window_blocks: 0,
            jitter_ns: 0.0,
            carry_data: false,
            header_scales: false,
            seed: 1,
            data_seed: 1,
        }
    }

    pub fn blocks(&self) -> u32 {
        self.bytes_per_host.div_ceil(self.packet_bytes as u64) as u32
    }

    /// Payload bytes of block `b` (the last one may be short).
    pub fn block_bytes(&self, b: u32) -> u32 {
        let start = b as u64 * self.packet_bytes as u64;
        (self.bytes_per_host - start).min(self.packet_bytes as u64) as u32
    }

    /// Picoseconds to serialise one packet on a port.
    pub fn packet_ps(&self) -> u64 {
        (self.packet_bytes as f64 * 8.0 * 1000.0 / self.bandwidth_gbps).round() as u64
    }

    pub fn validate(&self) -> Result<(), ConfigError> {
        if self.hosts == 0 || self.hosts > 4096 {
            return Err(ConfigError::new(
                "pspin.allreduce.hosts",
                format!("expected 1..=4096 children, got {}", self.hosts),
            ));
        }
        let e = self.dtype.bytes();
        if self.packet_bytes == 0 || self.packet_bytes % e != 0 || self.packet_bytes > 9000 {
            return Err(ConfigError::new(
                "pspin.allreduce.packet_bytes",
                format!("expected a positive multiple of {e} ({}) up to 9000, got {}", self.dtype, self.packet_bytes),
            ));
        }
        if self.bytes_per_host == 0 || self.bytes_per_host % e as u64 != 0 {
            return Err(ConfigError::new(
                "pspin.allreduce.bytes",
                format!("expected a positive multiple of {e} ({}), got {}", self.dtype, self.bytes_per_host),
            ));
        }
        if self.bytes_per_host / self.packet_bytes as u64 > u32::MAX as u64 / 2 {
            return Err(ConfigError::new("pspin.allreduce.bytes", "too many blocks (more than 2^31)"));
        }
        if !(self.bandwidth_gbps.is_finite() && self.bandwidth_gbps > 0.0) {
            return Err(ConfigError::new(
                "pspin.allreduce.bandwidth_gbps",
                format!("expected a positive number, got {}", self.bandwidth_gbps),
            ));
        }
        if !(self.jitter_ns.is_finite() && self.jitter_ns >= 0.0) {
            return Err(ConfigError::new(
                "pspin.allreduce.jitter_ns",
                format!("expected a non-negative number, got {}", self.jitter_ns),
            ));
        }
        if self.carry_data && self.bytes_per_host * self.hosts as u64 > 256 << 20 {
            return Err(ConfigError::new(
                "pspin.allreduce.data",
                "real element arrays are for small runs (at most 256 MiB over all hosts)",
            ));
        }
        Ok(())
    }

    /// W, at most the number of blocks.
    pub fn window(&self) -> u32 {
        if self.window_blocks == 0 {
            self.blocks()
        } else {
            self.window_blocks.min(self.blocks())
        }
    }

    /// The block host `h` sends `k`-th. Blocks go in windows of W; with staggering, host h
    /// starts each window at its offset h·len/P, so the packets of a block reach the switch
    /// spread over the window rather than together (§5, scenario C of Fig. 5).
    pub fn block_order(&self, h: u32, k: u32, window: u32) -> u32 {
        let nb = self.blocks();
        if !self.staggered {
            return k;
        }
        let start = k / window * window;
        let len = window.min(nb - start);
        let off = (h as u64 * len as u64 / self.hosts as u64) as u32;
        start + (k - start + off) % len
    }

    /// Host `h`'s contribution to block `b` (seeded; floats span many magnitudes so that the
    /// order of a floating-point sum shows in its result).
    pub fn host_block(&self, h: u32, b: u32) -> Vec<u8> {
        let n = self.block_bytes(b) / self.dtype.bytes();
        let mut out = vec![0u8; (n * self.dtype.bytes()) as usize];
        for i in 0..n {
            let r = splitmix(
                self.data_seed ^ ((h as u64) << 40) ^ ((b as u64) << 8) ^ (i as u64).wrapping_mul(0x9E37_79B9),
            );
            let v = match (self.dtype, self.op) {
                (DataType::F32 | DataType::F16, Operator::Prod) => {
                    1.0 + ((r >> 11) as f64 / (1u64 << 53) as f64 - 0.5) / 64.0
                }
                (DataType::F32, _) => {
                    let m = (r >> 11) as f64 / (1u64 << 53) as f64 * 2.0 - 1.0;
                    m * 2f64.powi(((r >> 3) % 24) as i32 - 12)
                }
                (DataType::F16, _) => ((r >> 11) as f64 / (1u64 << 53) as f64 * 2.0 - 1.0) * 8.0,
                (DataType::Int32, _) => ((r % 2001) as i64 - 1000) as f64,
                (DataType::Int16, _) => ((r % 201) as i64 - 100) as f64,
                (DataType::Int8, Operator::Prod) => ((r % 3) as i64 - 1) as f64,
                (DataType::Int8, _) => ((r % 7) as i64 - 3) as f64,
            };
            self.dtype.set(&mut out, i as usize, v);
        }
        out
    }
}

impl Workload {
    /// The quantisation scale host `h` puts in the header of its packet of block `b`
    /// (powers of two from 1/16 to 1/128, seeded).
    pub fn scale(&self, h: u32, b: u32) -> f32 {
        let r = splitmix(self.data_seed ^ 0x5CA1E ^ ((h as u64) << 32) ^ b as u64);
        1.0 / (16 << (r % 4)) as f32
    }
}

/// splitmix64: the seeded generator of the model (no global state).
pub fn splitmix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn staggered_order_is_a_permutation_of_each_window_with_spread_starts() {
        let mut w = Workload::new(4, 10 * 1024);
        w.staggered = true;
        for h in 0..4 {
            let order: Vec<u32> = (0..10).map(|k| w.block_order(h, k, 4)).collect();
            let mut sorted = order.clone();
            sorted.sort();
            assert_eq!(sorted, (0..10).collect::<Vec<_>>(), "host {h}: {order:?}");
            assert!(order[..4].iter().all(|&b| b < 4) && order[8..].iter().all(|&b| b >= 8));
        }
        let firsts: Vec<u32> = (0..4).map(|h| w.block_order(h, 0, 4)).collect();
        assert_eq!(firsts, [0, 1, 2, 3]);
        w.staggered = false;
        assert_eq!((0..4).map(|h| w.block_order(h, 5, 4)).collect::<Vec<_>>(), [5, 5, 5, 5]);
    }

    #[test]
    fn bad_workloads_name_their_field() {
        let mut w = Workload::new(4, 1000);
        w.packet_bytes = 1022; // not a multiple of int32
        assert_eq!(w.validate().unwrap_err().field, "pspin.allreduce.packet_bytes");
        let w = Workload::new(0, 1024);
        assert_eq!(w.validate().unwrap_err().field, "pspin.allreduce.hosts");
        let mut w = Workload::new(2, 1024);
        w.bandwidth_gbps = f64::NAN;
        assert_eq!(w.validate().unwrap_err().field, "pspin.allreduce.bandwidth_gbps");
    }
}
