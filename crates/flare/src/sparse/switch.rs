//! The sparse aggregation handler of one switch (§7), sans-I/O: chunks of a block come in
//! from the switch's children, the switch's chunks for its parent (or, at the root, the
//! result for its children) go out.
//!
//! - **Children and shard counters.** A block is complete at a switch when each of its
//!   `children` has sent all its packets of the block: per child a shard counter counts the
//!   packets received, and the child's last packet says how many there are.
//! - **Hash storage (leaves).** Pairs go into a table of `slots` (index → slot by a
//!   multiplicative hash); a pair whose slot holds another index goes to the spill buffer
//!   instead (no collision resolution); a full spill buffer goes out at once as one packet.
//!   When the block completes, the table and the spill buffer go out; the parent then sees
//!   more pairs than distinct indices (the extra traffic of Fig. 14).
//! - **Array storage (root).** A dense array of the block's span with a presence bitmap: no
//!   spill, and the block's non-zeros go out in index order when it completes, dense runs
//!   where those are smaller ([`super::format::packetize`]: densification).
//!
//! Duplicate or late packets are not expected (no loss recovery): a packet for a block whose
//! every child has finished is an error returned to the caller.

use std::collections::BTreeMap;

use super::format::{packetize, Chunk, Layout, Pair};

/// How a switch keeps the partial aggregate of a block.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Storage {
    /// Hash table of `slots` pairs and a spill buffer of `spill` pairs.
    Hash { slots: u32, spill: u32 },
    /// A dense array of the block's span.
    Array,
}

impl Storage {
    /// Working memory of one block in bytes: 8 per hash slot and spill entry; 4 per element
    /// and one presence bit per element for an array.
    pub fn block_bytes(&self, span: u64) -> u64 {
        match *self {
            Storage::Hash { slots, spill } => (slots as u64 + spill as u64) * 8,
            Storage::Array => span * 4 + span.div_ceil(8),
        }
    }
}

const EMPTY: u32 = u32::MAX;

enum Data {
    Hash { table: Vec<Pair>, spill: Vec<Pair> },
    Array { values: Vec<u32>, present: Vec<u64> },
}

struct Block {
    /// Per child: packets received, and the total announced by its last packet (0: unknown).
    seen: Vec<u32>,
    total: Vec<u32>,
    children_done: u32,
    /// Packets of this block already sent on (spills).
    sent: u32,
    data: Data,
}

/// Counters of one switch's sparse handler.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SparseStats {
    pub packets_in: u64,
    pub pairs_in: u64,
    pub packets_out: u64,
    pub pairs_out: u64,
    /// Pairs put in the spill buffer (slot held by another index).
    pub spilled_pairs: u64,
    /// Spill buffers sent on because they were full (before their block completed).
    pub spill_packets: u64,
    pub blocks_completed: u64,
    pub peak_blocks: u32,
    pub peak_bytes: u64,
}

/// A chunk that leaves the switch: towards the parent (or, at the root, the children).
pub type Emitted = Chunk;

/// The sparse handler of one switch for one allreduce.
pub struct SparseAggregator {
    layout: Layout,
    storage: Storage,
    children: u32,
    /// Root: its output may be densified (dense runs).
    root: bool,
    blocks: BTreeMap<u32, Block>,
    bytes_in_use: u64,
    pub stats: SparseStats,
}

fn slot_of(index: u32, slots: u32) -> usize {
    // Fibonacci hashing: consecutive indices spread over the table.
    ((index as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 32) as usize % slots as usize
}

impl SparseAggregator {
    /// A switch with `children` children in the reduction tree; `root` marks the tree's root
    /// (its output goes back down, and may be dense).
    pub fn new(layout: Layout, storage: Storage, children: u32, root: bool) -> Result<SparseAggregator, String> {
        if children == 0 {
            return Err("children: a switch of a reduction tree has at least one child".into());
        }
        if let Storage::Hash { slots, spill } = storage {
            if slots == 0 || spill == 0 {
                return Err(format!("storage: a hash table needs slots and spill ≥ 1, got {slots} and {spill}"));
            }
        }
        Ok(SparseAggregator {
            layout,
            storage,
            children,
            root,
            blocks: BTreeMap::new(),
            bytes_in_use: 0,
            stats: SparseStats::default(),
        })
    }

    /// Blocks being aggregated now.
    pub fn blocks_in_use(&self) -> u32 {
        self.blocks.len() as u32
    }

    /// Working memory in use now (bytes).
    pub fn bytes_in_use(&self) -> u64 {
        self.bytes_in_use
    }

    /// Chunk `c` arrived from child `child` (`0..children`). Chunks that leave the switch are
    /// pushed to `out`; returns whether the block completed here.
    pub fn on_chunk(&mut self, child: u32, c: &Chunk, out: &mut Vec<Emitted>) -> Result<bool, String> {
        if child >= self.children {
            return Err(format!("child: {child} of {} children", self.children));
        }
        if c.block >= self.layout.blocks() {
            return Err(format!("block: {} of {} blocks", c.block, self.layout.blocks()));
        }
        let (start, len) = self.layout.range(c.block);
        if let Some(p) = c.pairs.iter().find(|p| (p.index as u64) < start || p.index as u64 >= start + len) {
            return Err(format!("pairs: index {} outside block {} ({start}..{})", p.index, c.block, start + len));
        }
        self.stats.packets_in += 1;
        self.stats.pairs_in += c.pairs.len() as u64;
        if !self.blocks.contains_key(&c.block) {
            let data = match self.storage {
                Storage::Hash { slots, spill } => Data::Hash {
                    table: vec![Pair { index: EMPTY, value: 0 }; slots as usize],
                    spill: Vec::with_capacity(spill as usize),
                },
                Storage::Array => {
                    Data::Array { values: vec![0; len as usize], present: vec![0; (len as usize).div_ceil(64)] }
                }
            };
            let n = self.children as usize;
            self.blocks.insert(c.block, Block { seen: vec![0; n], total: vec![0; n], children_done: 0, sent: 0, data });
            self.bytes_in_use += self.storage.block_bytes(len);
            self.stats.peak_blocks = self.stats.peak_blocks.max(self.blocks.len() as u32);
            self.stats.peak_bytes = self.stats.peak_bytes.max(self.bytes_in_use);
        }
        let ppp = self.layout.pairs_per_packet;
        let b = self.blocks.get_mut(&c.block).expect("inserted");
        let ch = child as usize;
        if b.total[ch] != 0 && b.seen[ch] >= b.total[ch] {
            return Err(format!(
                "block {}: child {child} sent more packets than its shard count {}",
                c.block, b.total[ch]
            ));
        }
        match &mut b.data {
            Data::Hash { table, spill } => {
                let Storage::Hash { slots, spill: cap } = self.storage else { unreachable!() };
                for p in &c.pairs {
                    let s = &mut table[slot_of(p.index, slots)];
                    if s.index == EMPTY {
                        *s = *p;
                    } else if s.index == p.index {
                        s.value = s.value.wrapping_add(p.value);
                    } else {
                        spill.push(*p);
                        self.stats.spilled_pairs += 1;
                        if spill.len() as u32 == cap {
                            let mut pairs = std::mem::replace(spill, Vec::with_capacity(cap as usize));
                            pairs.sort_unstable();
                            for part in pairs.chunks(ppp as usize) {
                                out.push(Chunk {
                                    block: c.block,
                                    pairs: part.to_vec(),
                                    wire_words: 2 * part.len() as u32,
                                    shards: 0,
                                    seq: b.sent,
                                });
                                b.sent += 1;
                                self.stats.spill_packets += 1;
                                self.stats.packets_out += 1;
                                self.stats.pairs_out += part.len() as u64;
                            }
                        }
                    }
                }
            }
            Data::Array { values, present } => {
                for p in &c.pairs {
                    let i = (p.index as u64 - start) as usize;
                    values[i] = values[i].wrapping_add(p.value);
                    present[i / 64] |= 1 << (i % 64);
                }
            }
        }
        b.seen[ch] += 1;
        if c.shards != 0 {
            if b.total[ch] != 0 {
                return Err(format!("block {}: child {child} sent two last packets", c.block));
            }
            b.total[ch] = c.shards;
        }
        if b.total[ch] != 0 && b.seen[ch] == b.total[ch] {
            b.children_done += 1;
        } else if b.total[ch] != 0 && b.seen[ch] > b.total[ch] {
            return Err(format!(
                "block {}: child {child} sent {} packets, its shard count says {}",
                c.block, b.seen[ch], b.total[ch]
            ));
        }
        if b.children_done < self.children {
            return Ok(false);
        }
        let b = self.blocks.remove(&c.block).expect("present");
        self.bytes_in_use -= self.storage.block_bytes(len);
        self.stats.blocks_completed += 1;
        let first = out.len();
        match b.data {
            Data::Hash { table, spill } => {
                let mut pairs: Vec<Pair> = table.into_iter().filter(|p| p.index != EMPTY).collect();
                pairs.sort_unstable();
                let mut spill = spill;
                spill.sort_unstable();
                // Table entries are unique; the spill may repeat indices of the table and of
                // itself. They go out as they are (the next switch adds them up).
                let mut made = 0u32;
                for part in pairs.chunks(ppp as usize).chain(spill.chunks(ppp as usize)) {
                    out.push(Chunk {
                        block: c.block,
                        pairs: part.to_vec(),
                        wire_words: 2 * part.len() as u32,
                        shards: 0,
                        seq: b.sent + made,
                    });
                    made += 1;
                }
                if made == 0 {
                    out.push(Chunk { block: c.block, pairs: Vec::new(), wire_words: 0, shards: 0, seq: b.sent });
                    made = 1;
                }
                out.last_mut().expect("one").shards = b.sent + made;
            }
            Data::Array { values, present } => {
                let mut pairs = Vec::new();
                for (w, &bits) in present.iter().enumerate() {
                    let mut bits = bits;
                    while bits != 0 {
                        let i = w * 64 + bits.trailing_zeros() as usize;
                        bits &= bits - 1;
                        pairs.push(Pair { index: (start + i as u64) as u32, value: values[i] });
                    }
                }
                packetize(&self.layout, c.block, &pairs, self.root, b.sent, out);
            }
        }
        for e in &out[first..] {
            self.stats.packets_out += 1;
            self.stats.pairs_out += e.pairs.len() as u64;
        }
        Ok(true)
    }
}

/// Collects the chunks of blocks (from any number of packets per block) until each block is
/// complete by its shard count: what a host does with the result, and the parent side of a
/// link in tests.
#[derive(Default)]
pub struct BlockAssembler {
    pending: BTreeMap<u32, (u32, u32, Vec<Pair>)>,
}

impl BlockAssembler {
    /// Adds a chunk; returns the block's pairs (sorted, duplicates summed) when it completes.
    pub fn add(&mut self, c: Chunk) -> Result<Option<(u32, Vec<Pair>)>, String> {
        let e = self.pending.entry(c.block).or_insert((0, 0, Vec::new()));
        e.0 += 1;
        if c.shards != 0 {
            if e.1 != 0 {
                return Err(format!("block {}: two last packets", c.block));
            }
            e.1 = c.shards;
        }
        e.2.extend_from_slice(&c.pairs);
        if e.1 != 0 && e.0 > e.1 {
            return Err(format!("block {}: {} packets, shard count {}", c.block, e.0, e.1));
        }
        if e.1 != 0 && e.0 == e.1 {
            let (_, _, pairs) = self.pending.remove(&c.block).expect("present");
            return Ok(Some((c.block, super::format::canonical(pairs))));
        }
        Ok(None)
    }

    pub fn pending(&self) -> usize {
        self.pending.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sparse::format::canonical;

    struct Xs(u64);
    impl Xs {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            self.0
        }
        fn below(&mut self, n: u64) -> u64 {
            self.next() % n.max(1)
        }
    }

    /// Host vectors: `nnz` random indices each, drawn from a pool of `distinct` indices (small
    /// pools force overlaps).
    fn vectors(rng: &mut Xs, hosts: usize, elements: u64, nnz: usize, distinct: u64) -> Vec<Vec<Pair>> {
        let pool: Vec<u32> = (0..distinct.max(1)).map(|_| rng.below(elements) as u32).collect();
        (0..hosts)
            .map(|_| {
                canonical(
                    (0..nnz)
                        .map(|_| Pair {
                            index: pool[rng.below(pool.len() as u64) as usize],
                            value: rng.next() as u32 | 1,
                        })
                        .collect(),
                )
            })
            .collect()
    }

    /// Runs a two-level tree — `leaves` hash switches of `per_leaf` hosts under an array root
    /// — with packets delivered in a random order. Returns the root's result (assembled by
    /// shard counts) and the switches.
    fn two_level(
        rng: &mut Xs,
        layout: Layout,
        hosts: &[Vec<Pair>],
        per_leaf: usize,
        slots: u32,
        spill: u32,
    ) -> (Vec<Pair>, Vec<SparseAggregator>, SparseAggregator) {
        let leaves = hosts.len().div_ceil(per_leaf);
        let mut leaf: Vec<SparseAggregator> = (0..leaves)
            .map(|l| {
                SparseAggregator::new(
                    layout,
                    Storage::Hash { slots, spill },
                    (hosts.len() - l * per_leaf).min(per_leaf) as u32,
                    false,
                )
                .unwrap()
            })
            .collect();
        let mut root = SparseAggregator::new(layout, Storage::Array, leaves as u32, true).unwrap();
        // (level: 0 = to a leaf, 1 = to the root; switch; child; chunk)
        let mut wire: Vec<(u8, usize, u32, Chunk)> = Vec::new();
        for (h, v) in hosts.iter().enumerate() {
            for b in 0..layout.blocks() {
                let (s, n) = layout.range(b);
                let lo = v.partition_point(|p| (p.index as u64) < s);
                let hi = v.partition_point(|p| (p.index as u64) < s + n);
                let mut out = Vec::new();
                packetize(&layout, b, &v[lo..hi], false, 0, &mut out);
                wire.extend(out.into_iter().map(|c| (0, h / per_leaf, (h % per_leaf) as u32, c)));
            }
        }
        let mut result = BlockAssembler::default();
        let mut sum = Vec::new();
        while !wire.is_empty() {
            let i = rng.below(wire.len() as u64) as usize;
            let (level, sw, child, c) = wire.swap_remove(i);
            let mut out = Vec::new();
            if level == 0 {
                leaf[sw].on_chunk(child, &c, &mut out).unwrap();
                wire.extend(out.into_iter().map(|c| (1, 0, sw as u32, c)));
            } else {
                root.on_chunk(child, &c, &mut out).unwrap();
                for c in out {
                    if let Some((_, pairs)) = result.add(c).unwrap() {
                        sum.extend(pairs);
                    }
                }
            }
        }
        assert_eq!(result.pending(), 0);
        sum.sort_unstable();
        (sum, leaf, root)
    }

    #[test]
    fn random_trees_give_the_exact_sum() {
        let mut rng = Xs(0x5EED);
        let mut spilled_cases = 0;
        for case in 0..60 {
            let elements = 200 + rng.below(3000);
            let hosts = 1 + rng.below(12) as usize;
            let per_leaf = 1 + rng.below(5) as usize;
            let nnz = rng.below(elements / 4 + 1) as usize;
            let distinct = 1 + rng.below(elements);
            let ppp = 1 + rng.below(16) as u32;
            let density = [0.002, 0.01, 0.1, 0.2, 0.5, 1.0][rng.below(6) as usize];
            let layout = Layout::from_density(elements, ppp, density).unwrap();
            let slots = 1 + rng.below(64) as u32;
            let spill = 1 + rng.below(8) as u32;
            let v = vectors(&mut rng, hosts, elements, nnz, distinct);
            let expect = canonical(v.iter().flatten().copied().collect());
            let (sum, leaves, root) = two_level(&mut rng, layout, &v, per_leaf, slots, spill);
            assert_eq!(sum, expect, "case {case}: {hosts} hosts, {per_leaf} per leaf, {layout:?}, {slots} slots");
            // Nothing is left in any switch, and every block completed once per switch.
            assert!(leaves.iter().all(|l| l.blocks_in_use() == 0 && l.bytes_in_use() == 0));
            assert_eq!(root.stats.blocks_completed, layout.blocks() as u64);
            // Pairs are conserved up to merging: the leaves send at most what they got.
            let spilled: u64 = leaves.iter().map(|l| l.stats.spilled_pairs).sum();
            for l in &leaves {
                assert!(l.stats.pairs_out <= l.stats.pairs_in);
            }
            spilled_cases += (spilled > 0) as u32;
        }
        assert!(spilled_cases > 10, "the spill path must be exercised: {spilled_cases}");
    }

    #[test]
    fn a_full_table_spills_and_nothing_is_lost() {
        // One slot: the first index takes it, every other distinct index spills.
        let layout = Layout { elements: 100, span: 100, pairs_per_packet: 4 };
        let mut leaf = SparseAggregator::new(layout, Storage::Hash { slots: 1, spill: 3 }, 2, false).unwrap();
        let mut out = Vec::new();
        let a = Chunk {
            block: 0,
            pairs: (0..4).map(|i| Pair { index: i * 10, value: 1 }).collect(),
            wire_words: 8,
            shards: 1,
            seq: 0,
        };
        assert!(!leaf.on_chunk(0, &a, &mut out).unwrap());
        // 3 spilled pairs filled the spill buffer: sent on at once, not the last packet.
        assert_eq!(out.len(), 1);
        assert_eq!((out[0].pairs.len(), out[0].shards), (3, 0));
        assert_eq!(leaf.stats.spilled_pairs, 3);
        let b = Chunk {
            block: 0,
            pairs: vec![Pair { index: 0, value: 5 }, Pair { index: 10, value: 1 }],
            wire_words: 4,
            shards: 1,
            seq: 0,
        };
        assert!(leaf.on_chunk(1, &b, &mut out).unwrap());
        // Then: the table ({0: 6}) and the spill ({10: 1}); the shard count covers all three.
        assert_eq!(out.len(), 3);
        assert_eq!(out[1].pairs, vec![Pair { index: 0, value: 6 }]);
        assert_eq!(out[2].pairs, vec![Pair { index: 10, value: 1 }]);
        assert_eq!(out[2].shards, 3);
        // The spilled packet, then the table, then the rest of the spill: numbered 0, 1, 2.
        assert_eq!(out.iter().map(|c| c.seq).collect::<Vec<_>>(), vec![0, 1, 2]);
        let mut asm = BlockAssembler::default();
        let mut got = None;
        for c in out {
            got = asm.add(c).unwrap().or(got);
        }
        assert_eq!(
            got.unwrap().1,
            vec![
                Pair { index: 0, value: 6 },
                Pair { index: 10, value: 2 },
                Pair { index: 20, value: 1 },
                Pair { index: 30, value: 1 }
            ]
        );
    }

    #[test]
    fn shard_counters_complete_a_block_only_with_every_packet() {
        let layout = Layout { elements: 8, span: 8, pairs_per_packet: 1 };
        let mut root = SparseAggregator::new(layout, Storage::Array, 2, true).unwrap();
        let mut out = Vec::new();
        let p = |i, s| Chunk { block: 0, pairs: vec![Pair { index: i, value: 1 }], wire_words: 2, shards: s, seq: 0 };
        // Child 0's last packet (3 shards) arrives first; the block waits for the other two.
        assert!(!root.on_chunk(0, &p(1, 3), &mut out).unwrap());
        assert!(!root
            .on_chunk(1, &Chunk { block: 0, pairs: vec![], wire_words: 0, shards: 1, seq: 0 }, &mut out)
            .unwrap());
        assert!(!root.on_chunk(0, &p(2, 0), &mut out).unwrap());
        assert!(root.on_chunk(0, &p(1, 0), &mut out).unwrap());
        // Result {1: 2, 2: 1}: 2 pairs (4 words) are smaller than the dense 8 elements.
        assert_eq!(out.len(), 2);
        assert_eq!(out[0].pairs, vec![Pair { index: 1, value: 2 }]);
        assert_eq!(out[1].shards, 2);
        // A fourth packet from child 0 after its count is an error, not a double count.
        let mut leaf = SparseAggregator::new(layout, Storage::Array, 2, false).unwrap();
        leaf.on_chunk(0, &p(1, 1), &mut out).unwrap();
        assert!(leaf.on_chunk(0, &p(1, 0), &mut out).unwrap_err().contains("more packets"));
        assert!(leaf.on_chunk(2, &p(1, 0), &mut out).unwrap_err().starts_with("child"));
        assert!(leaf
            .on_chunk(
                0,
                &Chunk { block: 0, pairs: vec![Pair { index: 9, value: 1 }], wire_words: 2, shards: 0, seq: 0 },
                &mut out
            )
            .unwrap_err()
            .starts_with("pairs"));
    }

    #[test]
    fn the_root_densifies_a_dense_sum() {
        let layout = Layout { elements: 16, span: 16, pairs_per_packet: 4 };
        let mut root = SparseAggregator::new(layout, Storage::Array, 2, true).unwrap();
        let mut out = Vec::new();
        let half = |lo: u32| Chunk {
            block: 0,
            pairs: (lo..lo + 4).map(|i| Pair { index: i, value: 1 }).collect(),
            wire_words: 8,
            shards: 0,
            seq: 0,
        };
        for (child, lo) in [(0, 0), (0, 4), (1, 8), (1, 12)] {
            let mut c = half(lo);
            c.shards = if lo % 8 == 4 { 2 } else { 0 };
            root.on_chunk(child, &c, &mut out).unwrap();
        }
        // 16 non-zeros of 16: two dense runs of 8 elements (32 words as pairs).
        assert_eq!(out.iter().map(|c| c.wire_words).collect::<Vec<_>>(), vec![8, 8]);
        assert_eq!(out.iter().map(|c| c.pairs.len()).sum::<usize>(), 16);
    }
}
