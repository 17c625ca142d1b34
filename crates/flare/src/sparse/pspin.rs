//! Sparse allreduce on the PsPIN switch model (seed 004 §7, Figs. 13 and 14): the hosts'
//! sparse blocks as packets ([`SparseTraffic`]), the switch's sparse handlers as a sPIN
//! handler set ([`SparseHandlers`], single-buffer aggregation around a
//! [`SparseAggregator`]), and their cycle costs ([`SparseCosts`]) for the simulation and for
//! the §6 model (`sparse_l_cycles`).
//!
//! **Data.** Each of the P hosts sends `bytes` of (index, value) pairs (8 bytes each): on
//! average one packet of `pairs_per_packet` pairs per block, blocks of span
//! `⌈pairs_per_packet / density⌉` (§7), `bytes / packet_bytes` blocks. Within a block each
//! element is non-zero with probability `density`, independently per host (seeded; no index
//! overlap beyond chance): a block holds Binomial(span, density) pairs, so about half the
//! blocks are split over two packets (the shard count, §7) and some are empty.
//!
//! **Costs** (docs/flare-sparse.md, "Sparse handler costs"): instruction counts of the
//! handlers' inner loops at one instruction per cycle — the calibration the seed gives for the
//! dense loop ("four cycles to sum two 4-bytes floating point values and to store the result
//! back", §6: load, load, add, store).

use super::format::{Chunk, Layout, Pair};
use super::switch::{SparseAggregator, Storage};
use crate::pspin::handler::{HandlerCx, HandlerSet, LockKey, Packet, RunState, Step};
use crate::pspin::switch::Traffic;
use crate::pspin::workload::{splitmix, Workload};

/// Cycles of the sparse handlers' loops (one RI5CY instruction per cycle; hardware loops and
/// post-increment loads, so no loop or pointer overhead).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SparseCosts {
    /// A pair into the hash table: load index, load value, multiply and shift (Fibonacci hash),
    /// shift and add (slot address), load the slot's index, compare, load, add, store.
    pub hash_pair: u32,
    /// A pair that collides goes to the spill buffer instead: the compare fails, an emptiness
    /// test, two stores and the spill count's increment and test (hash_pair + 2).
    pub spill_pair: u32,
    /// A pair into the array: load index, load value, subtract the block's start, shift, load,
    /// add, store (register-offset addressing).
    pub array_pair: u32,
    /// Completion, per hash slot: load its index, test for empty.
    pub hash_scan_slot: u32,
    /// Completion, per occupied slot: load the value, store index and value into the outgoing
    /// packet, clear the slot.
    pub hash_emit_entry: u32,
    /// Completion, per array element: load, test for zero.
    pub array_scan_element: u32,
    /// Completion, per non-zero element: store index and value, clear the element.
    pub array_emit_element: u32,
    /// Per packet: the block's shard counter for the sending port (load, add, store, compare
    /// with the shard count).
    pub shard_counter: u32,
}

impl Default for SparseCosts {
    fn default() -> Self {
        SparseCosts {
            hash_pair: 11,
            spill_pair: 13,
            array_pair: 7,
            hash_scan_slot: 2,
            hash_emit_entry: 4,
            array_scan_element: 2,
            array_emit_element: 3,
            shard_counter: 4,
        }
    }
}

/// Working memory one block's storage takes in L1: 8 bytes per hash slot and spill entry; 4 per
/// element of the block's span for an array (the handler scans the values for non-zeros at
/// completion, as §7 describes: "the buffer needs to be entirely scanned and only the non-zero
/// elements inserted in the packet"; the aggregator's presence bits are bookkeeping of the model,
/// not charged).
pub fn block_bytes(storage: &Storage, span: u64) -> u64 {
    match *storage {
        Storage::Hash { .. } => storage.block_bytes(span),
        Storage::Array => span * 4,
    }
}

/// `hash` or `array`.
pub fn storage_name(s: &Storage) -> &'static str {
    match s {
        Storage::Hash { .. } => "hash",
        Storage::Array => "array",
    }
}

/// The sparse allreduce one switch aggregates: P hosts' pairs, block by block.
pub struct SparseTraffic {
    pub layout: Layout,
    pub density: f64,
    pub hosts: u32,
    pub data_seed: u64,
    /// Per host, the packets it sends in order: (block, first pair, pairs, shard count or 0).
    sends: Vec<Vec<(u32, u32, u32, u32)>>,
    /// Per block, the packets from all hosts.
    expected: Vec<u32>,
    /// Per block, the distinct indices over all hosts (the fully aggregated block).
    pub distinct: Vec<u32>,
    pub pairs_total: u64,
}

impl SparseTraffic {
    /// The traffic of `w` (hosts, bytes, packet size, staggering, window, data seed) at
    /// `density`: `w.blocks()` blocks of span ⌈(packet_bytes/8)/density⌉.
    pub fn new(w: &Workload, density: f64) -> Result<SparseTraffic, String> {
        let ppp = w.packet_bytes / super::format::PAIR_BYTES;
        if ppp == 0 {
            return Err("pspin.allreduce.packet_bytes: a sparse packet carries at least one 8-byte pair".into());
        }
        let blocks = w.blocks() as u64;
        let probe = Layout::from_density(1 << 40, ppp, density).map_err(|e| format!("pspin.allreduce.{e}"))?;
        let elements = blocks * probe.span;
        if elements > u32::MAX as u64 {
            return Err(format!("pspin.allreduce.density: {blocks} blocks of span {} exceed 2^32 indices", probe.span));
        }
        let layout = Layout::from_density(elements, ppp, density).map_err(|e| format!("pspin.allreduce.{e}"))?;
        let mut t = SparseTraffic {
            layout,
            density,
            hosts: w.hosts,
            data_seed: w.data_seed,
            sends: vec![Vec::new(); w.hosts as usize],
            expected: vec![0; layout.blocks() as usize],
            distinct: vec![0; layout.blocks() as usize],
            pairs_total: 0,
        };
        let mut counts = vec![0u32; w.hosts as usize * layout.blocks() as usize];
        let mut seen = vec![0u64; (layout.span as usize).div_ceil(64)];
        let mut idx = Vec::new();
        for b in 0..layout.blocks() {
            seen.iter_mut().for_each(|x| *x = 0);
            let mut distinct = 0;
            for h in 0..w.hosts {
                t.indices(h, b, &mut idx);
                counts[(h * layout.blocks() + b) as usize] = idx.len() as u32;
                let start = layout.range(b).0;
                for &i in &idx {
                    let o = (i as u64 - start) as usize;
                    if seen[o / 64] & (1 << (o % 64)) == 0 {
                        seen[o / 64] |= 1 << (o % 64);
                        distinct += 1;
                    }
                }
                t.pairs_total += idx.len() as u64;
            }
            t.distinct[b as usize] = distinct;
        }
        let window = w.window();
        for h in 0..w.hosts {
            for k in 0..layout.blocks() {
                let b = w.block_order(h, k, window);
                let n = counts[(h * layout.blocks() + b) as usize];
                let parts = n.div_ceil(ppp).max(1);
                for j in 0..parts {
                    let first = j * ppp;
                    t.sends[h as usize].push((
                        b,
                        first,
                        ppp.min(n - first.min(n)),
                        if j + 1 == parts { parts } else { 0 },
                    ));
                }
                t.expected[b as usize] += parts;
            }
        }
        Ok(t)
    }

    /// The block span of `w`'s packets at `density`: ⌈(packet_bytes / 8) / density⌉.
    pub fn span(w: &Workload, density: f64) -> u64 {
        let ppp = (w.packet_bytes / super::format::PAIR_BYTES).max(1);
        Layout::from_density(1 << 40, ppp, density).map(|l| l.span).unwrap_or(ppp as u64)
    }

    /// Host `h`'s non-zero indices in block `b`, ascending (each element non-zero with
    /// probability `density`, drawn by geometric skips so the cost is the pairs', not the span's).
    pub fn indices(&self, h: u32, b: u32, out: &mut Vec<u32>) {
        out.clear();
        let (start, len) = self.layout.range(b);
        let mut r = splitmix(self.data_seed ^ 0x005B_A55E ^ ((h as u64) << 36) ^ b as u64);
        if self.density >= 1.0 {
            out.extend((start..start + len).map(|i| i as u32));
            return;
        }
        let ln_q = (1.0 - self.density).ln();
        let mut i = 0u64;
        loop {
            r = splitmix(r);
            let u = ((r >> 11) as f64 + 1.0) / (1u64 << 53) as f64; // (0, 1]
            i += (u.ln() / ln_q).floor() as u64;
            if i >= len {
                return;
            }
            out.push((start + i) as u32);
            i += 1;
        }
    }

    /// The exact reduction of block `b` over every host: `out[i - start]` is the wrapping sum of
    /// the values at index `i` (0 where no host has `i`).
    pub fn exact_block(&self, b: u32, out: &mut Vec<u32>, idx: &mut Vec<u32>) {
        let (start, len) = self.layout.range(b);
        out.clear();
        out.resize(len as usize, 0);
        for h in 0..self.hosts {
            self.indices(h, b, idx);
            for &i in idx.iter() {
                let o = (i as u64 - start) as usize;
                out[o] = out[o].wrapping_add(value_of(h, i));
            }
        }
    }

    /// Pairs of the whole run, and packets.
    pub fn packets_total(&self) -> u64 {
        self.sends.iter().map(|s| s.len() as u64).sum()
    }
}

fn value_of(h: u32, index: u32) -> u32 {
    (splitmix(((h as u64) << 32) ^ index as u64) % 1000) as u32 + 1
}

impl Traffic for SparseTraffic {
    fn blocks(&self) -> u32 {
        self.layout.blocks()
    }
    fn packets(&self, h: u32) -> u32 {
        self.sends[h as usize].len() as u32
    }
    fn packet(&self, h: u32, k: u32) -> Packet {
        let (block, first, n, shards) = self.sends[h as usize][k as usize];
        let mut idx = Vec::new();
        self.indices(h, block, &mut idx);
        let mut data = Vec::with_capacity(n as usize * 8);
        for &i in &idx[first as usize..(first + n) as usize] {
            data.extend_from_slice(&i.to_le_bytes());
            data.extend_from_slice(&value_of(h, i).to_le_bytes());
        }
        Packet {
            block,
            port: h,
            payload_bytes: n * super::format::PAIR_BYTES,
            header_word: shards as u64,
            data: Some(data),
        }
    }
    fn opens_block(&self, h: u32, k: u32) -> bool {
        k == 0 || self.sends[h as usize][k as usize - 1].3 != 0
    }
    fn expected(&self, block: u32) -> u32 {
        self.expected[block as usize]
    }
    fn wire_bytes(&self, payload: u32) -> u32 {
        // A sparse packet is as long as its pairs (an empty one is a header, counted as 64 B).
        payload.max(64)
    }
}

/// What the sparse handlers measured.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct SparseRunStats {
    pub pairs_in: u64,
    pub pairs_out: u64,
    pub spilled_pairs: u64,
    pub spill_packets: u64,
    pub blocks_completed: u64,
    /// Working memory one block allocates (bytes).
    pub block_bytes: u64,
}

/// The switch's sparse handlers (§7) with single-buffer aggregation (§6.1): each block's
/// storage (hash table + spill buffer, or an array of its span) is allocated in L1 by the
/// header handler; every payload handler inserts its pairs in the block's critical section;
/// the completion handler scans the storage and sends the block on.
pub struct SparseHandlers {
    agg: SparseAggregator,
    storage: Storage,
    costs: SparseCosts,
    layout: Layout,
    /// Per block: the cluster holding its storage and the pairs it has sent (for the flush).
    home: Vec<u32>,
    flush: Vec<u64>,
    out: Vec<Chunk>,
    /// Per element of the vector: the wrapping sum of every pair the switch sent for it
    /// (spill packets and completed blocks), checked against the exact sums by [`Self::check`].
    sent: Vec<u32>,
    pub stats: SparseRunStats,
}

fn lock_key(block: u32) -> LockKey {
    (block as u64) << 16 | 0x5A
}

impl SparseHandlers {
    pub fn new(traffic: &SparseTraffic, storage: Storage, costs: SparseCosts) -> Result<SparseHandlers, String> {
        let agg = SparseAggregator::new(traffic.layout, storage, traffic.hosts, false)?;
        let blocks = traffic.layout.blocks() as usize;
        Ok(SparseHandlers {
            agg,
            storage,
            costs,
            layout: traffic.layout,
            home: vec![0; blocks],
            flush: vec![0; blocks],
            out: Vec::new(),
            sent: vec![
                0;
                usize::try_from(traffic.layout.elements)
                    .map_err(|_| "elements: too many for this machine".to_string())?
            ],
            stats: SparseRunStats { block_bytes: block_bytes(&storage, traffic.layout.span), ..Default::default() },
        })
    }
}

impl SparseHandlers {
    /// `Ok` if every block completed and, for every element, what the switch sent adds up to the
    /// exact sum of the hosts' values (nothing lost, nothing counted twice, whether a pair left in
    /// a spill packet or in its block's result); else the first wrong element.
    pub fn check(&self, traffic: &SparseTraffic) -> Result<(), String> {
        let blocks = traffic.layout.blocks();
        if self.stats.blocks_completed != blocks as u64 {
            return Err(format!("{} of {blocks} blocks completed", self.stats.blocks_completed));
        }
        let (mut exact, mut idx) = (Vec::new(), Vec::new());
        for b in 0..blocks {
            traffic.exact_block(b, &mut exact, &mut idx);
            let start = traffic.layout.range(b).0 as usize;
            let got = &self.sent[start..start + exact.len()];
            if let Some(o) = (0..exact.len()).find(|&o| got[o] != exact[o]) {
                return Err(format!(
                    "block {b} index {}: the switch sent a sum of {} instead of {}",
                    start + o,
                    got[o],
                    exact[o]
                ));
            }
        }
        Ok(())
    }
}

impl HandlerSet for SparseHandlers {
    fn name(&self) -> String {
        format!("single/{}", storage_name(&self.storage))
    }

    fn buffers_per_block(&self) -> Option<f64> {
        Some(1.0)
    }

    fn header(&mut self, cx: &mut HandlerCx<'_>, run: &mut RunState) -> Step {
        if run.pc == 1 {
            return Step::Done;
        }
        run.pc = 1;
        let b = cx.packet().block;
        let (_, len) = self.layout.range(b);
        let cluster = cx.cluster();
        self.home[b as usize] = cluster;
        cx.alloc_l1(cluster, block_bytes(&self.storage, len));
        Step::Compute(cx.costs().lock_cycles as u64)
    }

    fn payload(&mut self, cx: &mut HandlerCx<'_>, run: &mut RunState) -> Step {
        let b = cx.packet().block;
        match run.pc {
            0 => {
                run.pc = 1;
                Step::Compute(cx.costs().handler_overhead_cycles as u64)
            }
            1 => {
                run.pc = 2;
                Step::Acquire(lock_key(b))
            }
            2 => {
                // In the block's critical section: insert the pairs.
                let data = cx.take_packet_data().unwrap_or_default();
                let pairs: Vec<Pair> = data
                    .chunks_exact(8)
                    .map(|c| Pair {
                        index: u32::from_le_bytes(c[..4].try_into().unwrap()),
                        value: u32::from_le_bytes(c[4..].try_into().unwrap()),
                    })
                    .collect();
                let chunk = Chunk {
                    block: b,
                    wire_words: 2 * pairs.len() as u32,
                    pairs,
                    shards: cx.packet().header_word as u32,
                    seq: 0,
                };
                let spilled0 = self.agg.stats.spilled_pairs;
                self.out.clear();
                let done = self
                    .agg
                    .on_chunk(cx.packet().port, &chunk, &mut self.out)
                    .unwrap_or_else(|e| panic!("sparse traffic is well-formed: {e}"));
                let spilled = self.agg.stats.spilled_pairs - spilled0;
                for p in self.out.iter().flat_map(|o| o.pairs.iter()) {
                    let e = &mut self.sent[p.index as usize];
                    *e = e.wrapping_add(p.value);
                }
                let n = chunk.pairs.len() as u64;
                let c = self.costs;
                let remote = cx.remote(self.home[b as usize]);
                let per_pair = match self.storage {
                    Storage::Hash { .. } => (n - spilled) * c.hash_pair as u64 + spilled * c.spill_pair as u64,
                    Storage::Array => n * c.array_pair as u64,
                };
                // Packets sent now: full spill buffers (a DMA copy each); on completion, the
                // whole block goes out in the completion handler.
                let sent_bytes: u64 = self.out.iter().map(|o| o.payload_bytes()).sum();
                if done {
                    let entries = self.out.iter().map(|o| o.pairs.len() as u64).sum::<u64>();
                    let (_, len) = self.layout.range(b);
                    self.flush[b as usize] = match self.storage {
                        // The table's entries are at most its slots; what is left in the
                        // spill buffer goes out as it is (its DMA copy below).
                        Storage::Hash { slots, .. } => {
                            slots as u64 * c.hash_scan_slot as u64
                                + entries.min(slots as u64) * c.hash_emit_entry as u64
                        }
                        Storage::Array => len * c.array_scan_element as u64 + entries * c.array_emit_element as u64,
                    } + cx
                        .dma_cycles(sent_bytes.min(u32::MAX as u64) as u32, self.home[b as usize]);
                    self.stats.pairs_out += entries;
                } else {
                    self.stats.pairs_out += self.out.iter().map(|o| o.pairs.len() as u64).sum::<u64>();
                }
                let spill_send =
                    if done { 0 } else { cx.dma_cycles(sent_bytes.min(u32::MAX as u64) as u32, self.home[b as usize]) };
                self.stats.pairs_in += n;
                run.pc = 3;
                Step::Compute(
                    (c.shard_counter as u64 + per_pair) * remote + spill_send + 2 * cx.costs().lock_cycles as u64,
                )
            }
            3 => {
                run.pc = 4;
                Step::Release(lock_key(b))
            }
            _ => Step::Done,
        }
    }

    fn completion(&mut self, cx: &mut HandlerCx<'_>, run: &mut RunState) -> Step {
        if run.pc == 1 {
            return Step::Done;
        }
        run.pc = 1;
        let b = cx.packet().block;
        let (_, len) = self.layout.range(b);
        let home = self.home[b as usize];
        let cost = self.flush[b as usize] * cx.remote(home);
        cx.emit(0, 0, None);
        cx.free_l1(home, block_bytes(&self.storage, len));
        self.stats.blocks_completed += 1;
        self.stats.spilled_pairs = self.agg.stats.spilled_pairs;
        self.stats.spill_packets = self.agg.stats.spill_packets;
        Step::Compute(cost)
    }
}

/// L of the §6 model for a sparse packet (cycles per packet in the critical section): its
/// pairs' insertions and shard counter, plus the block's completion scan spread over the P
/// packets of the block (the paper's average case, §7: "the term P … represents the average
/// case"). The scan needs the expected distinct indices of a block,
/// U = span·(1 − (1 − density)^P) (independent hosts), at most `slots` in a hash table.
pub fn sparse_l_cycles(
    storage: &Storage,
    costs: &SparseCosts,
    pairs_per_packet: u32,
    span: u64,
    density: f64,
    children: u32,
) -> f64 {
    let p = children.max(1) as f64;
    let u = span as f64 * (1.0 - (1.0 - density).powf(p));
    let n = pairs_per_packet as f64;
    let (insert, flush) = match *storage {
        Storage::Hash { slots, .. } => (
            n * costs.hash_pair as f64,
            slots as f64 * costs.hash_scan_slot as f64 + u.min(slots as f64) * costs.hash_emit_entry as f64,
        ),
        Storage::Array => (
            n * costs.array_pair as f64,
            span as f64 * costs.array_scan_element as f64 + u * costs.array_emit_element as f64,
        ),
    };
    costs.shard_counter as f64 + insert + flush / p
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn traffic_has_one_packet_of_pairs_per_block_on_average_and_shard_counts() {
        let mut w = Workload::new(4, 64 << 10);
        w.window_blocks = 16;
        let t = SparseTraffic::new(&w, 0.1).unwrap();
        assert_eq!((t.layout.span, t.layout.blocks()), (1280, 64));
        let mean = t.pairs_total as f64 / (4.0 * 64.0);
        assert!((mean - 128.0).abs() < 6.0, "{mean}");
        // Every block's packets over all hosts are at least one per host; split blocks exist.
        assert!((0..64).all(|b| t.expected(b) >= 4));
        assert!((0..64).any(|b| t.expected(b) > 4));
        for h in 0..4 {
            let mut per_block = vec![0u32; 64];
            for k in 0..t.packets(h) {
                let p = t.packet(h, k);
                per_block[p.block as usize] += 1;
                assert!(p.payload_bytes <= 1024);
                if p.header_word != 0 {
                    assert_eq!(p.header_word as u32, per_block[p.block as usize]);
                }
            }
        }
        // Distinct indices of 4 independent hosts at 10%: span·(1 − 0.9⁴) ≈ 440.
        let mean_u = t.distinct.iter().map(|&d| d as f64).sum::<f64>() / 64.0;
        assert!((mean_u - 1280.0 * (1.0 - 0.9f64.powi(4))).abs() < 15.0, "{mean_u}");
    }
}
