//! SparCML's host-based sparse allreduce (Renggli et al., SC'19, cited by seed 004 as [39]):
//! **sparse recursive doubling** (SSAR_Recursive_double, [`SparcmlRank::new`]) and **split
//! allgather** (SSAR_Split_allgather, [`SparcmlRank::new_split`]; see there). In round `k` every rank sends its
//! whole current sparse vector to rank `r ⊕ 2^k` and adds the partner's into its own, so
//! after `log₂ P` rounds every rank holds the sum; the vectors grow as non-overlapping indices
//! accumulate. Like SparCML, a vector is sent densely (4 bytes per element) once that is
//! smaller than its pairs (8 bytes each) — the switch to a dense representation.
//!
//! For `P` not a power of two, the `P − P'` ranks above the largest power of two `P'` first
//! fold their vector into rank `r − P'`, and get the result back at the end (the usual
//! recursive-doubling extension; SparCML's own paper assumes powers of two).
//!
//! Sans-I/O: a rank's state machine yields the chunks it sends (lazily, so a 100 MiB vector is
//! never copied into packets up front) and takes the chunks it receives. A message is tagged
//! with its step (0 = fold, `1..=log₂ P'` = rounds, `log₂ P' + 1` = unfold) in
//! [`Chunk::block`], so a partner that is ahead can send before this rank is ready.

use std::collections::BTreeMap;

use super::format::{merge_into, Chunk, Pair};

/// What a rank does in one step.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Step {
    send_to: Option<u32>,
    /// The index range of its vector it sends.
    send_range: (u64, u64),
    recv_from: Option<u32>,
    /// What the received pairs do: `None` adds them; `Some(range)` replaces this rank's pairs in
    /// `range` with them (unfold, allgather).
    replace: Option<(u64, u64)>,
}

/// Whether a vector of `nnz` non-zeros in `elements` goes dense, and in how many packets.
pub fn message_plan(nnz: u64, elements: u64, pairs_per_packet: u32) -> (bool, u64) {
    let dense = elements < 2 * nnz;
    let packets =
        if dense { elements.div_ceil(2 * pairs_per_packet as u64) } else { nnz.div_ceil(pairs_per_packet as u64) };
    (dense, packets.max(1))
}

/// Where a step's message is: its index range, encoding, packets, and the next pair to send.
#[derive(Clone, Copy, Debug)]
struct Cursor {
    lo: u64,
    hi: u64,
    dense: bool,
    packets: u64,
    sent: u64,
    pos: usize,
    end: usize,
}

/// One rank of a SparCML sparse allreduce (recursive doubling or split allgather).
pub struct SparcmlRank {
    rank: u32,
    ppp: u32,
    steps: Vec<Option<Step>>,
    step: usize,
    current: Vec<Pair>,
    /// Send cursor of the current step.
    send: Option<Cursor>,
    /// Per step: packets received, total announced, pairs.
    incoming: BTreeMap<u32, (u32, u32, Vec<Pair>)>,
    pub bytes_sent: u64,
    pub packets_sent: u64,
}

impl SparcmlRank {
    /// Rank `rank` of `n` with its own non-zeros `pairs` (ascending) of a vector of
    /// `elements`; `pairs_per_packet` sparse pairs (or twice as many dense elements) per
    /// packet.
    pub fn new(
        rank: u32,
        n: u32,
        pairs: Vec<Pair>,
        elements: u64,
        pairs_per_packet: u32,
    ) -> Result<SparcmlRank, String> {
        if n == 0 || rank >= n {
            return Err(format!("rank: {rank} of {n} ranks"));
        }
        if pairs_per_packet == 0 {
            return Err("pairs_per_packet: must be at least 1".into());
        }
        let p2 = 1u32 << (31 - n.leading_zeros());
        let rounds = p2.trailing_zeros() as usize;
        let extra = n - p2;
        let all = (0, elements);
        let mut steps = vec![None; rounds + 2];
        if rank >= p2 {
            steps[0] = Some(Step { send_to: Some(rank - p2), send_range: all, recv_from: None, replace: None });
            steps[rounds + 1] =
                Some(Step { send_to: None, send_range: all, recv_from: Some(rank - p2), replace: Some(all) });
        } else {
            if rank < extra {
                steps[0] = Some(Step { send_to: None, send_range: all, recv_from: Some(rank + p2), replace: None });
                steps[rounds + 1] =
                    Some(Step { send_to: Some(rank + p2), send_range: all, recv_from: None, replace: None });
            }
            for k in 0..rounds {
                let peer = rank ^ (1 << k);
                steps[k + 1] =
                    Some(Step { send_to: Some(peer), send_range: all, recv_from: Some(peer), replace: None });
            }
        }
        Self::with_steps(rank, pairs, pairs_per_packet, steps)
    }

    /// Rank `rank` of `n` under SparCML's **split allgather** (SSAR_Split_allgather): the
    /// index space is cut into `n` equal partitions; a sparse reduce-scatter sends each rank
    /// the non-zeros of its partition directly (`n − 1` steps, step `s` to rank `r + s`), then
    /// a ring allgather passes the reduced partitions round (`n − 1` steps). Any `n`.
    pub fn new_split(
        rank: u32,
        n: u32,
        pairs: Vec<Pair>,
        elements: u64,
        pairs_per_packet: u32,
    ) -> Result<SparcmlRank, String> {
        if n == 0 || rank >= n {
            return Err(format!("rank: {rank} of {n} ranks"));
        }
        if pairs_per_packet == 0 {
            return Err("pairs_per_packet: must be at least 1".into());
        }
        let part = |j: u32| (j as u64 * elements / n as u64, (j as u64 + 1) * elements / n as u64);
        let mut steps = Vec::new();
        for s in 1..n {
            let to = (rank + s) % n;
            steps.push(Some(Step {
                send_to: Some(to),
                send_range: part(to),
                recv_from: Some((rank + n - s) % n),
                replace: None,
            }));
        }
        for s in 0..n.saturating_sub(1) {
            let have = (rank + n - s) % n;
            let get = (rank + 2 * n - s - 1) % n;
            steps.push(Some(Step {
                send_to: Some((rank + 1) % n),
                send_range: part(have),
                recv_from: Some((rank + n - 1) % n),
                replace: Some(part(get)),
            }));
        }
        Self::with_steps(rank, pairs, pairs_per_packet, steps)
    }

    fn with_steps(
        rank: u32,
        pairs: Vec<Pair>,
        pairs_per_packet: u32,
        steps: Vec<Option<Step>>,
    ) -> Result<SparcmlRank, String> {
        let mut r = SparcmlRank {
            rank,
            ppp: pairs_per_packet,
            steps,
            step: 0,
            current: pairs,
            send: None,
            incoming: BTreeMap::new(),
            bytes_sent: 0,
            packets_sent: 0,
        };
        r.advance()?;
        Ok(r)
    }

    pub fn rank(&self) -> u32 {
        self.rank
    }

    /// Every step done: [`Self::result`] is the sum.
    pub fn finished(&self) -> bool {
        self.step >= self.steps.len()
    }

    pub fn result(&self) -> &[Pair] {
        &self.current
    }

    /// Drops the result (after it was checked), freeing its memory.
    pub fn release_result(&mut self) {
        self.current = Vec::new();
    }

    /// Steps of the whole schedule (for progress reports).
    pub fn steps(&self) -> u32 {
        self.steps.len() as u32
    }

    /// Steps left (for progress reports).
    pub fn steps_left(&self) -> u32 {
        (self.steps.len() - self.step.min(self.steps.len())) as u32
    }

    fn cur(&self) -> Option<Step> {
        self.steps.get(self.step).copied().flatten()
    }

    /// Moves on over every step that is complete.
    fn advance(&mut self) -> Result<(), String> {
        loop {
            if self.finished() {
                return Ok(());
            }
            let Some(st) = self.cur() else {
                self.step += 1;
                continue;
            };
            // Arm the send of this step once.
            if st.send_to.is_some() && self.send.is_none() {
                let (lo, hi) = st.send_range;
                let pos = self.current.partition_point(|p| (p.index as u64) < lo);
                let end = self.current.partition_point(|p| (p.index as u64) < hi);
                let (dense, packets) = message_plan((end - pos) as u64, hi - lo, self.ppp);
                self.send = Some(Cursor { lo, hi, dense, packets, sent: 0, pos, end });
            }
            let sent_all = match self.send {
                Some(c) => c.sent == c.packets,
                None => true,
            };
            let got_all = match st.recv_from {
                None => true,
                Some(_) => self.incoming.get(&(self.step as u32)).is_some_and(|e| e.1 != 0 && e.0 == e.1),
            };
            if !(sent_all && got_all) {
                return Ok(());
            }
            if st.recv_from.is_some() {
                let (_, _, pairs) = self.incoming.remove(&(self.step as u32)).expect("complete");
                match st.replace {
                    Some((lo, hi)) => {
                        let a = self.current.partition_point(|p| (p.index as u64) < lo);
                        let b = self.current.partition_point(|p| (p.index as u64) < hi);
                        self.current.splice(a..b, super::format::canonical(pairs));
                    }
                    None => merge_into(&mut self.current, pairs),
                }
            }
            self.send = None;
            self.step += 1;
        }
    }

    /// The next packet this rank sends now, and to whom (`None`: nothing to send until more
    /// arrives, or finished).
    pub fn next_chunk(&mut self) -> Option<(u32, Chunk)> {
        let st = self.cur()?;
        let to = st.send_to?;
        let c = self.send?;
        if c.sent == c.packets {
            return None;
        }
        let step = self.step as u32;
        let ppp = self.ppp as u64;
        let (chunk, next) = if c.dense {
            let start = c.lo + c.sent * 2 * ppp;
            let end = (start + 2 * ppp).min(c.hi);
            let mut at = c.pos;
            while at < c.end && (self.current[at].index as u64) < end {
                at += 1;
            }
            (
                Chunk {
                    block: step,
                    pairs: self.current[c.pos..at].to_vec(),
                    wire_words: (end - start) as u32,
                    shards: 0,
                    seq: c.sent as u32,
                },
                at,
            )
        } else {
            let to_i = (c.pos + ppp as usize).min(c.end);
            (
                Chunk {
                    block: step,
                    pairs: self.current[c.pos..to_i].to_vec(),
                    wire_words: 2 * (to_i - c.pos) as u32,
                    shards: 0,
                    seq: c.sent as u32,
                },
                to_i,
            )
        };
        let mut chunk = chunk;
        let last = c.sent + 1 == c.packets;
        if last {
            chunk.shards = u32::try_from(c.packets).unwrap_or(u32::MAX);
        }
        self.send = Some(Cursor { sent: c.sent + 1, pos: next, ..c });
        self.bytes_sent += chunk.payload_bytes();
        self.packets_sent += 1;
        if last {
            // The last packet is out: the step may be complete already.
            let _ = self.advance();
        }
        Some((to, chunk))
    }

    /// A packet of step `chunk.block` arrived.
    pub fn on_chunk(&mut self, chunk: Chunk) -> Result<(), String> {
        let step = chunk.block as usize;
        if step >= self.steps.len() || self.steps[step].and_then(|s| s.recv_from).is_none() {
            return Err(format!("rank {}: a packet of step {step}, where it receives nothing", self.rank));
        }
        if step < self.step {
            return Err(format!("rank {}: a packet of step {step}, which is over", self.rank));
        }
        let e = self.incoming.entry(step as u32).or_insert((0, 0, Vec::new()));
        e.0 += 1;
        if chunk.shards != 0 {
            e.1 = chunk.shards;
        }
        e.2.extend_from_slice(&chunk.pairs);
        if e.1 != 0 && e.0 > e.1 {
            return Err(format!("rank {}: step {step} got {} packets, its shard count says {}", self.rank, e.0, e.1));
        }
        self.advance()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sparse::format::canonical;
    use std::collections::VecDeque;

    /// Runs `n` ranks with messages delivered in an order drawn from `seed`; returns each
    /// rank's result and the payload bytes sent.
    fn run(vectors: Vec<Vec<Pair>>, elements: u64, ppp: u32, seed: u64) -> (Vec<Vec<Pair>>, u64) {
        run_with(vectors, elements, ppp, seed, SparcmlRank::new)
    }

    type New = fn(u32, u32, Vec<Pair>, u64, u32) -> Result<SparcmlRank, String>;

    fn run_with(vectors: Vec<Vec<Pair>>, elements: u64, ppp: u32, seed: u64, new: New) -> (Vec<Vec<Pair>>, u64) {
        let n = vectors.len() as u32;
        let mut ranks: Vec<SparcmlRank> =
            vectors.into_iter().enumerate().map(|(r, v)| new(r as u32, n, v, elements, ppp).unwrap()).collect();
        let mut wire: VecDeque<(u32, Chunk)> = VecDeque::new();
        let mut x = seed | 1;
        for _ in 0..1_000_000 {
            let mut progressed = false;
            for r in ranks.iter_mut() {
                // Each rank sends a few packets per turn.
                for _ in 0..(1 + x % 3) {
                    if let Some((to, c)) = r.next_chunk() {
                        wire.push_back((to, c));
                        progressed = true;
                    }
                }
            }
            // Deliver one packet from a pseudo-random position (reordering).
            if !wire.is_empty() {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                let i = (x % wire.len() as u64) as usize;
                let (to, c) = wire.remove(i).unwrap();
                ranks[to as usize].on_chunk(c).unwrap();
                progressed = true;
            }
            if !progressed {
                break;
            }
        }
        assert!(ranks.iter().all(|r| r.finished()), "some rank did not finish");
        let bytes = ranks.iter().map(|r| r.bytes_sent).sum();
        (ranks.iter().map(|r| r.result().to_vec()).collect(), bytes)
    }

    fn vectors(n: u32, elements: u64, nnz: usize, seed: u64) -> Vec<Vec<Pair>> {
        let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
        (0..n)
            .map(|_| {
                canonical(
                    (0..nnz)
                        .map(|_| {
                            x ^= x << 13;
                            x ^= x >> 7;
                            x ^= x << 17;
                            Pair { index: (x % elements) as u32, value: (x >> 40) as u32 | 1 }
                        })
                        .collect(),
                )
            })
            .collect()
    }

    #[test]
    fn every_rank_gets_the_exact_sum_for_any_count_and_order() {
        for (n, nnz, seed) in [(1, 5, 1), (2, 30, 2), (3, 10, 3), (5, 40, 4), (8, 50, 5), (12, 3, 6), (16, 400, 7)] {
            let elements = 1000;
            let v = vectors(n, elements, nnz, seed);
            let expect = canonical(v.iter().flatten().copied().collect());
            for (variant, new) in
                [("recursive doubling", SparcmlRank::new as New), ("split allgather", SparcmlRank::new_split as New)]
            {
                let (results, _) = run_with(v.clone(), elements, 8, seed, new);
                for (r, res) in results.iter().enumerate() {
                    assert_eq!(res, &expect, "{variant}: n {n} rank {r}");
                }
            }
        }
    }

    #[test]
    fn dense_messages_once_denser_than_half() {
        assert_eq!(message_plan(10, 1000, 8), (false, 2));
        assert_eq!(message_plan(600, 1000, 8), (true, 63));
        assert_eq!(message_plan(0, 1000, 8), (false, 1));
        // 16 ranks of 400 random non-zeros in 1000 elements go dense in later rounds: fewer
        // bytes than all-sparse messages would be.
        let v = vectors(16, 1000, 400, 9);
        let (_, bytes) = run(v, 1000, 8, 9);
        assert!(bytes < 16 * 4 * 1000 * 4, "{bytes}");
    }
}
