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
    pub fn check(c: &Collective, b: u32, fp: u64, data: u32, vals: &Values, stats: &mut HostStats) {
        let mut ok = fp == c.expected_fp[b as usize];
        if ok && !c.expected_values.is_empty() && data != NIL {
            let k = c.elems(b) as usize;
            let base = b as usize * c.elems_per_packet as usize;
            ok = vals.get(data)[..k] == c.expected_values[base..base + k];
        }
        if !ok {
            stats.bad_blocks += 1;
        }
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
        let app = vals.inputs_of(c.tenant, rank);
        let d = vals.get_mut(h.data);
        for (e, x) in d.iter_mut().enumerate().take(h.elems as usize) {
            *x = match &app {
                Some(a) => a.values[b as usize * c.elems_per_packet as usize + e],
                None => contribution_value(c.salt, c.tenant, rank, b, e as u32),
            };
        }
    }
    h
}
