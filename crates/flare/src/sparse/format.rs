//! Sparse data on the wire (§7, Fig. 12): (index, value) pairs, reduction blocks whose span
//! follows from the density, and the packets of one block.
//!
//! - A host splits its vector into blocks of `span` elements, `span = ⌈pairs per packet /
//!   density⌉`, so that a block holds one packet's worth of non-zeros on average.
//! - A packet never carries two blocks; a block with more non-zeros than fit is split over
//!   several packets and its **last** packet carries the number of packets of the block (the
//!   shard count); an all-zero block still sends one empty packet, so the switch can count it.
//! - A packet is either sparse (4-byte index + 4-byte value per pair) or dense (4 bytes per
//!   element of a contiguous run); [`packetize`] picks whichever needs fewer bytes when allowed
//!   (densification: sums get denser along the tree, §7). Either way the packet's *content* is
//!   its non-zero pairs; the encoding only decides its size on the wire.
//!
//! Values are 32-bit integers added with wrapping arithmetic: sums are exact and independent
//! of the order of additions, so every result can be compared with the exact sum.

/// One non-zero element: its index in the whole vector and its value.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Pair {
    pub index: u32,
    pub value: u32,
}

/// Bytes of one sparse pair on the wire (index and value, 4 bytes each).
pub const PAIR_BYTES: u32 = 8;
/// Bytes of one dense element on the wire.
pub const ELEMENT_BYTES: u32 = 4;

/// How a vector of `elements` is cut into reduction blocks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Layout {
    /// Elements of the whole vector.
    pub elements: u64,
    /// Elements per block (the last block may be shorter).
    pub span: u64,
    /// Sparse pairs one packet carries (its payload is `pairs_per_packet · 8` bytes, or
    /// `2 · pairs_per_packet` dense elements).
    pub pairs_per_packet: u32,
}

impl Layout {
    /// Blocks of `⌈pairs_per_packet / density⌉` elements (§7: on average one packet of
    /// non-zeros per block). Errors name the argument.
    pub fn from_density(elements: u64, pairs_per_packet: u32, density: f64) -> Result<Layout, String> {
        if elements == 0 {
            return Err("elements: must be at least 1".into());
        }
        if pairs_per_packet == 0 {
            return Err("pairs_per_packet: must be at least 1".into());
        }
        if !(density.is_finite() && density > 0.0 && density <= 1.0) {
            return Err(format!("density: must be within (0, 1], got {density}"));
        }
        let span = ((pairs_per_packet as f64 / density).ceil() as u64)
            .clamp(pairs_per_packet as u64, elements.max(pairs_per_packet as u64));
        Ok(Layout { elements, span, pairs_per_packet })
    }

    pub fn blocks(&self) -> u32 {
        self.elements.div_ceil(self.span) as u32
    }

    pub fn block_of(&self, index: u32) -> u32 {
        (index as u64 / self.span) as u32
    }

    /// First element and length of block `b`.
    pub fn range(&self, b: u32) -> (u64, u64) {
        let start = b as u64 * self.span;
        (start, self.span.min(self.elements - start))
    }
}

/// One packet of one block as its receiver sees it.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct Chunk {
    pub block: u32,
    /// Its non-zero pairs, ascending by index (unique, except in a hash switch's spill packets,
    /// which may repeat an index: the next switch adds them up).
    pub pairs: Vec<Pair>,
    /// 4-byte words of payload on the wire (2 per pair when sparse, the run length when dense).
    pub wire_words: u32,
    /// On the last packet of a block from one sender: how many packets that sender sent for
    /// the block (this one included). 0 on the others.
    pub shards: u32,
    /// Its number among its sender's packets of the block (0, 1, ...; the last is `shards - 1`):
    /// what tells a duplicated packet from the next one (packets carry no other sequence).
    pub seq: u32,
}

impl Chunk {
    pub fn payload_bytes(&self) -> u64 {
        self.wire_words as u64 * 4
    }
}

/// The packets of `pairs` (ascending, all within `layout.range(block)`) under `block`:
/// sparse chunks of at most `layout.pairs_per_packet` pairs, or — if `allow_dense` and it is
/// smaller — dense runs of `2 · pairs_per_packet` elements covering the block's range. At least
/// one packet (an empty one for an all-zero block); the last carries the shard count.
/// `already_sent` packets of this block went out before (a switch's spills) and are counted in
/// the shard count.
pub fn packetize(
    layout: &Layout,
    block: u32,
    pairs: &[Pair],
    allow_dense: bool,
    already_sent: u32,
    out: &mut Vec<Chunk>,
) {
    debug_assert!(pairs.windows(2).all(|w| w[0].index < w[1].index), "pairs must be sorted and unique");
    let (start, len) = layout.range(block);
    let ppp = layout.pairs_per_packet.max(1) as usize;
    let first = out.len();
    let sparse_words = 2 * pairs.len() as u64;
    if allow_dense && len < sparse_words {
        let run = 2 * ppp as u64;
        let mut at = 0usize;
        let mut s = start;
        while s < start + len {
            let e = (s + run).min(start + len);
            let from = at;
            while at < pairs.len() && (pairs[at].index as u64) < e {
                at += 1;
            }
            out.push(Chunk { block, pairs: pairs[from..at].to_vec(), wire_words: (e - s) as u32, shards: 0, seq: 0 });
            s = e;
        }
    } else if pairs.is_empty() {
        out.push(Chunk { block, pairs: Vec::new(), wire_words: 0, shards: 0, seq: 0 });
    } else {
        for c in pairs.chunks(ppp) {
            out.push(Chunk { block, pairs: c.to_vec(), wire_words: 2 * c.len() as u32, shards: 0, seq: 0 });
        }
    }
    let made = (out.len() - first) as u32;
    for (i, c) in out[first..].iter_mut().enumerate() {
        c.seq = already_sent + i as u32;
    }
    out.last_mut().expect("at least one").shards = already_sent + made;
}

/// Adds `b` into the sorted, duplicate-free `a` (wrapping), keeping it sorted. `b` may be in
/// any order and hold duplicates.
pub fn merge_into(a: &mut Vec<Pair>, mut b: Vec<Pair>) {
    if b.is_empty() {
        return;
    }
    b.sort_unstable_by_key(|p| p.index);
    let mut out = Vec::with_capacity(a.len() + b.len());
    let (mut i, mut j) = (0, 0);
    while i < a.len() || j < b.len() {
        let take_a = j == b.len() || (i < a.len() && a[i].index <= b[j].index);
        let p = if take_a {
            i += 1;
            a[i - 1]
        } else {
            j += 1;
            b[j - 1]
        };
        match out.last_mut() {
            Some(Pair { index, value }) if *index == p.index => *value = value.wrapping_add(p.value),
            _ => out.push(p),
        }
    }
    *a = out;
}

/// `pairs` sorted by index with duplicates summed.
pub fn canonical(pairs: Vec<Pair>) -> Vec<Pair> {
    let mut a = Vec::new();
    merge_into(&mut a, pairs);
    a
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(index: u32, value: u32) -> Pair {
        Pair { index, value }
    }

    #[test]
    fn span_follows_the_density() {
        // §7's example: 2 pairs per packet at 50% density → blocks of 4 elements.
        assert_eq!(Layout::from_density(12, 2, 0.5).unwrap().span, 4);
        // Fig. 15: 128 pairs per 1 KiB packet, one value per bucket of 512.
        assert_eq!(Layout::from_density(26_214_400, 128, 1.0 / 512.0).unwrap().span, 65_536);
        assert!(Layout::from_density(10, 2, 0.0).unwrap_err().starts_with("density"));
        assert!(Layout::from_density(10, 0, 0.5).unwrap_err().starts_with("pairs_per_packet"));
    }

    #[test]
    fn figure_12_host_1_packets() {
        // Host 1 of Fig. 12: 9 2 0 7 | 0 0 0 0 | 0 4 0 6, two pairs per packet, blocks of 4.
        let l = Layout::from_density(12, 2, 0.5).unwrap();
        let data = [9u32, 2, 0, 7, 0, 0, 0, 0, 0, 4, 0, 6];
        let mut out = Vec::new();
        for b in 0..l.blocks() {
            let (s, n) = l.range(b);
            let pairs: Vec<Pair> =
                (s..s + n).filter(|&i| data[i as usize] != 0).map(|i| p(i as u32, data[i as usize])).collect();
            packetize(&l, b, &pairs, false, 0, &mut out);
        }
        // Block 0 splits in two packets (the last says 2), block 1 is one empty packet.
        assert_eq!(out.len(), 4);
        assert_eq!((out[0].pairs.len(), out[0].shards), (2, 0));
        assert_eq!((out[1].pairs.clone(), out[1].shards), (vec![p(3, 7)], 2));
        assert_eq!((out[2].block, out[2].pairs.len(), out[2].shards, out[2].wire_words), (1, 0, 1, 0));
        assert_eq!((out[3].block, out[3].pairs.len(), out[3].shards), (2, 2, 1));
    }

    #[test]
    fn dense_encoding_only_when_smaller() {
        let mut out = Vec::new();
        // 3 non-zeros in 4 elements: sparse 6 words > dense 4 words.
        let four = Layout { elements: 4, span: 4, pairs_per_packet: 2 };
        packetize(&four, 0, &[p(0, 1), p(1, 1), p(3, 1)], true, 0, &mut out);
        assert_eq!(out.len(), 1);
        assert_eq!((out[0].wire_words, out[0].pairs.len(), out[0].shards), (4, 3, 1));
        out.clear();
        // 1 non-zero in 4: sparse wins, and dense is never used when not allowed.
        packetize(&four, 0, &[p(2, 1)], true, 0, &mut out);
        assert_eq!(out[0].wire_words, 2);
        out.clear();
        // Block 10 of blocks of 10 elements: elements 100..110.
        let tens = Layout { elements: 110, span: 10, pairs_per_packet: 2 };
        packetize(&tens, 10, &(100..110).map(|i| p(i, 1)).collect::<Vec<_>>(), true, 3, &mut out);
        // Runs of 4 elements: 4 + 4 + 2; the shard count includes 3 earlier packets.
        assert_eq!(out.iter().map(|c| c.wire_words).collect::<Vec<_>>(), vec![4, 4, 2]);
        assert_eq!(out.iter().map(|c| c.pairs.len()).sum::<usize>(), 10);
        assert_eq!(out.last().unwrap().shards, 6);
        // Each packet is numbered after the 3 earlier ones; the last is `shards - 1`.
        assert_eq!(out.iter().map(|c| c.seq).collect::<Vec<_>>(), vec![3, 4, 5]);
    }

    #[test]
    fn merge_sums_overlaps_and_keeps_order() {
        let mut a = vec![p(1, 1), p(5, 2)];
        merge_into(&mut a, vec![p(5, 3), p(0, 4), p(9, 1), p(0, u32::MAX)]);
        assert_eq!(a, vec![p(0, 3), p(1, 1), p(5, 5), p(9, 1)]);
    }
}
