//! The host side shared by every protocol: the collective's description (blocks, ids, leaders,
//! expected results), each rank's contribution to a block, the check of every result that
//! arrives, and the host counters. The protocols' host agents ([`crate::canary_host`],
//! [`crate::tree`]) are built on these.
//!
//! A collective splits the vector into blocks of `elems_per_packet` elements; block `b` of
//! tenant `k` has id `k ⊕ (attempt, b)` (8-bit application id, 4-bit attempt, 20-bit block).
//! Every result is checked on arrival: its fingerprint (and its element values in small runs)
//! must equal the sum of all ranks' contributions, so a lost or double-counted contribution
//! shows up as a bad block.

use crate::{contribution_fp, contribution_value, Addr, Header, Kind, Values, NIL};

/// Everything the agents of one collective share.
#[derive(Clone, Debug)]
pub struct Collective {
    pub tenant: u16,
    /// Host index of each rank.
    pub ranks: Vec<u32>,
    pub blocks: u32,
    pub elems_per_packet: u16,
    /// Elements of the last block.
    pub last_elems: u16,
    pub salt: u64,
    /// Where its blocks start in a sequence of block numbers (modulo [`MAX_BLOCKS`]) that a
    /// session's calls continue from one call to the next; 0 in a simulated run. Ids carry
    /// `sequence_base + b` ([`Self::id`], [`Self::block_in`]), so a switch program that keeps
    /// state per block sequence (`reliable_tree`) tells a late packet of an earlier call from a
    /// packet of this one.
    pub sequence_base: u32,
    pub expected_fp: Vec<u64>,
    /// `blocks × elems_per_packet` expected element sums, empty when values are off.
    pub expected_values: Vec<i32>,
}

pub const MAX_BLOCKS: u32 = 1 << 20;

impl Collective {
    /// Builds the shared description; `values` turns on real element values.
    pub fn new(
        tenant: u16,
        ranks: Vec<u32>,
        bytes: u64,
        elems_per_packet: u16,
        salt: u64,
        values: bool,
    ) -> Result<Collective, String> {
        if ranks.is_empty() {
            return Err("hosts: empty".into());
        }
        if ranks.len() > u16::MAX as usize {
            return Err(format!("hosts: {} ranks, the 2-byte hosts field holds at most {}", ranks.len(), u16::MAX));
        }
        if elems_per_packet == 0 {
            return Err("elements_per_packet: must be at least 1".into());
        }
        let elems = bytes.div_ceil(4).max(1);
        let blocks = elems.div_ceil(elems_per_packet as u64);
        if blocks > MAX_BLOCKS as u64 {
            return Err(format!("bytes: {blocks} blocks exceed the id space ({MAX_BLOCKS} per attempt)"));
        }
        let blocks = blocks as u32;
        let last_elems = (elems - (blocks as u64 - 1) * elems_per_packet as u64) as u16;
        let n = ranks.len() as u32;
        let expected_fp = (0..blocks)
            .map(|b| (0..n).fold(0u64, |a, r| a.wrapping_add(contribution_fp(salt, tenant, r, b))))
            .collect();
        let mut expected_values = Vec::new();
        if values {
            expected_values = vec![0i32; blocks as usize * elems_per_packet as usize];
            for b in 0..blocks {
                for e in 0..elems_per_packet as u32 {
                    let mut s = 0i32;
                    for r in 0..n {
                        s = s.wrapping_add(contribution_value(salt, tenant, r, b, e));
                    }
                    expected_values[(b * elems_per_packet as u32 + e) as usize] = s;
                }
            }
        }
        Ok(Collective {
            tenant,
            ranks,
            blocks,
            elems_per_packet,
            last_elems,
            salt,
            sequence_base: 0,
            expected_fp,
            expected_values,
        })
    }

    pub fn n(&self) -> u32 {
        self.ranks.len() as u32
    }
    pub fn elems(&self, b: u32) -> u16 {
        if b + 1 == self.blocks {
            self.last_elems
        } else {
            self.elems_per_packet
        }
    }
    /// The id of block `b` under `attempt`: the tenant byte, the attempt nibble and the block's
    /// place in the sequence (`sequence_base + b`, 20 bits).
    pub fn id(&self, b: u32, attempt: u8) -> u32 {
        (self.tenant as u32 & 0xFF) << 24
            | (attempt as u32 & 0xF) << 20
            | (self.sequence_base.wrapping_add(b) & (MAX_BLOCKS - 1))
    }
    /// The sequence bits of an id (its block, for a collective whose `sequence_base` is 0).
    pub fn block_of(id: u32) -> u32 {
        id & (MAX_BLOCKS - 1)
    }
    /// The block of this collective that id `id` names (`>= blocks` for an id of another
    /// call of a session, whatever its attempt).
    pub fn block_in(&self, id: u32) -> u32 {
        id.wrapping_sub(self.sequence_base) & (MAX_BLOCKS - 1)
    }
    pub fn leader(&self, b: u32) -> u32 {
        b % self.n()
    }
}

/// Counters of one host agent.
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize)]
pub struct HostStats {
    pub sent_reduce: u64,
    pub retx_requests: u64,
    pub retransmits_sent: u64,
    pub failures_issued: u64,
    pub reissued: u64,
    pub fallbacks: u64,
    pub duplicates: u64,
    pub stale: u64,
    /// Results whose fingerprint or values were wrong.
    pub bad_blocks: u64,
    /// Blocks (or completion notices) given up after [`MAX_EXPIRIES`] timer expiries.
    pub abandoned: u64,
}

impl HostStats {
    /// Adds another agent's counters.
    pub fn accumulate(&mut self, o: &HostStats) {
        self.sent_reduce += o.sent_reduce;
        self.retx_requests += o.retx_requests;
        self.retransmits_sent += o.retransmits_sent;
        self.failures_issued += o.failures_issued;
        self.reissued += o.reissued;
        self.fallbacks += o.fallbacks;
        self.duplicates += o.duplicates;
        self.stale += o.stale;
        self.bad_blocks += o.bad_blocks;
        self.abandoned += o.abandoned;
    }
}

/// Which blocks of one rank have their (checked) result.
#[derive(Clone, Debug)]
pub struct Results {
    done: Vec<bool>,
    done_count: u32,
    /// When this rank had every block.
    pub finished_ps: Option<u64>,
}

impl Results {
    pub fn new(c: &Collective) -> Results {
        Results { done: vec![false; c.blocks as usize], done_count: 0, finished_ps: None }
    }
    pub fn is_done(&self, b: u32) -> bool {
        self.done[b as usize]
    }
    /// Blocks still expected.
    pub fn missing(&self) -> u32 {
        self.done.len() as u32 - self.done_count
    }
    pub fn progress(&self) -> crate::protocol::Progress {
        crate::protocol::Progress { finished_ps: self.finished_ps, missing: self.missing() }
    }
    /// Checks a result for block `b` against the expected sum (counting a bad one in
    /// `stats`).
    pub fn check(c: &Collective, b: u32, fp: u64, data: u32, vals: &mut Values, stats: &mut HostStats) {
        let mut ok = fp == c.expected_fp[b as usize];
        if ok && !c.expected_values.is_empty() && data != NIL {
            let k = c.elems(b) as usize;
            let base = b as usize * c.elems_per_packet as usize;
            ok = vals.get(data)[..k] == c.expected_values[base..base + k];
        }
        if !ok {
            stats.bad_blocks += 1;
        }
        vals.note_result(c, b, data);
    }
    /// Marks block `b` done; true when that was the last one.
    pub fn mark_done(&mut self, now: u64, b: u32) -> bool {
        self.done[b as usize] = true;
        self.done_count += 1;
        if self.done_count == self.done.len() as u32 {
            self.finished_ps = Some(now);
            return true;
        }
        false
    }
    /// A result (broadcast, restoration copy or retransmission) arrived: checked and marked,
    /// or counted as a duplicate or stale. True when it completed the last block.
    pub fn accept(&mut self, c: &Collective, now: u64, hdr: &Header, vals: &mut Values, stats: &mut HostStats) -> bool {
        let b = c.block_in(hdr.id);
        if b >= c.blocks {
            stats.stale += 1;
            vals.release(hdr.data);
            return false;
        }
        if self.is_done(b) {
            stats.duplicates += 1;
            vals.release(hdr.data);
            return false;
        }
        Self::check(c, b, hdr.fp, hdr.data, vals, stats);
        vals.release(hdr.data);
        self.mark_done(now, b)
    }
}

/// Rank `rank`'s contribution to block `b` under `attempt`: one contribution (counter 1), its
/// fingerprint and, in small runs, its element values.
pub fn contribution(
    c: &Collective,
    rank: u32,
    b: u32,
    attempt: u8,
    kind: Kind,
    dst: Addr,
    vals: &mut Values,
) -> Header {
    let mut h = Header::new(kind, dst, c.id(b, attempt), c.tenant);
    h.counter = 1;
    h.hosts = c.n() as u16;
    h.elems = c.elems(b);
    h.src = rank;
    h.fp = contribution_fp(c.salt, c.tenant, rank, b);
    h.data = vals.alloc();
    if h.data != NIL {
        vals.fill_contribution(h.data, c, rank, b, h.elems);
    }
    h
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::AppCall;

    /// Two calls of one session (the same tenant, consecutive block sequences) open at once, as
    /// a software-switch rank keeps them: each contribution comes from its own call's data, and
    /// each checked result lands in its own call's vector, the first copy only; a collective
    /// with no open call keeps the seeded values.
    #[test]
    fn open_calls_keep_their_own_inputs_and_results() {
        let mut a = Collective::new(3, vec![0, 1], 10 * 4, 4, 7, false).unwrap();
        let mut b = a.clone();
        a.sequence_base = 100;
        b.sequence_base = 103; // a's 3 blocks, then b's
        let mut vals = Values::new(4);
        vals.open_call(AppCall::new(&a, 1, (0..10).collect()));
        vals.open_call(AppCall::new(&b, 1, (100..110).collect()));
        let ha = contribution(&a, 1, 2, 0, Kind::Reduce, Addr::FirstHop, &mut vals);
        let hb = contribution(&b, 1, 2, 0, Kind::Reduce, Addr::FirstHop, &mut vals);
        assert_eq!(&vals.get(ha.data)[..2], &[8, 9]);
        assert_eq!(&vals.get(hb.data)[..2], &[108, 109]);
        // Another rank of the same collective has no open call here: seeded values.
        let h0 = contribution(&a, 0, 0, 0, Kind::Reduce, Addr::FirstHop, &mut vals);
        assert_eq!(vals.get(h0.data)[0], crate::contribution_value(a.salt, a.tenant, 0, 0, 0));
        let mut stats = HostStats::default();
        let r = vals.alloc();
        vals.get_mut(r)[..4].copy_from_slice(&[5, 6, 7, 8]);
        Results::check(&b, 1, 0, r, &mut vals, &mut stats);
        vals.get_mut(r)[..4].copy_from_slice(&[0; 4]);
        Results::check(&b, 1, 0, r, &mut vals, &mut stats); // a duplicate: not taken
        let call_b = vals.close_call(&b).unwrap();
        assert_eq!(&call_b.result[4..8], &[5, 6, 7, 8]);
        assert_eq!(call_b.first_missing(), Some(0));
        assert!(vals.call(&b).is_none());
        let call_a = vals.close_call(&a).unwrap();
        assert!(call_a.got.iter().all(|g| !g), "b's result is not a's");
    }
}
