//! Symbolic checker: proves a schedule correct without timing it.
//!
//! Each (rank, block) holds a symbolic value: the set of ranks whose contributions it
//! contains, and — when the contributions were combined strictly in rank order — the
//! contiguous rank interval they cover. The checker executes the programs with rendezvous
//! semantics (a transfer completes only when both sides have posted it, the most
//! deadlock-prone MPI behaviour), so a schedule that passes cannot deadlock under any
//! buffering. It verifies that
//! - every send has a matching receive (same peer pair order, same blocks) and vice versa;
//! - no rank sends a block it does not hold;
//! - no reduction combines a contribution twice (exactly-once);
//! - the collective's postcondition holds (e.g. allreduce: every rank holds every block
//!   reduced over all ranks; all-to-all: every rank holds every block sent to it);
//! - if the schedule claims `noncommutative_safe`, every final value is `x₀ ⊕ … ⊕ x_{p−1}`
//!   in rank order.
//!
//! Implementation: the programs are flattened once into compact per-transfer records (CSR
//! offsets per step), sends and receives are paired per channel with counting sorts, and
//! symbolic values are fixed-size records (`⌈p/64⌉`-word bitset plus rank-order interval) in
//! one flat arena. Execution only re-examines ranks whose step may have become ready.

use crate::ir::{Collective, RecvOp, Schedule, Transfer};
use std::cell::Cell;
use std::fmt;

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CheckError {
    pub rank: Option<u32>,
    pub step: Option<usize>,
    pub message: String,
}

impl fmt::Display for CheckError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (self.rank, self.step) {
            (Some(r), Some(s)) => write!(f, "rank {r}, step {s}: {}", self.message),
            (Some(r), None) => write!(f, "rank {r}: {}", self.message),
            _ => write!(f, "{}", self.message),
        }
    }
}
impl std::error::Error for CheckError {}

fn fail<T>(rank: Option<u32>, step: Option<usize>, message: String) -> Result<T, CheckError> {
    Err(CheckError { rank, step, message })
}

/// Summary of a checked schedule.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CheckReport {
    pub steps: usize,
    pub messages: usize,
    /// Total blocks moved over all messages.
    pub blocks_moved: u64,
}

/// One send or receive, flattened. Its blocks are the ranges `first` then
/// `extra[more.0..more.1]` (a transfer rarely has more than one range).
#[derive(Clone, Copy)]
struct Xfer {
    peer: u32,
    /// Step of the owning rank.
    step: u32,
    /// Step of the partner transfer at `peer` (set by matching).
    partner_step: u32,
    /// Send: the partner receive (set by matching). Receive: the first snapshot record of the
    /// partner send (set when that is posted).
    link: u32,
    op: Option<RecvOp>,
    /// No blocks at all (`first` is then meaningless).
    empty: bool,
    first: (u32, u32),
    more: (u32, u32),
}

/// All programs, flattened: everything after the one pass over the [`Schedule`] works on these
/// compact tables. Rank `r`'s step `si` is flat step `g = step_base[r] + si`; its sends are
/// `sends[steps[g].0..steps[g + 1].0]` (in listed order), its receives
/// `recvs[steps[g].1..steps[g + 1].1]`. Transfers are thus in program order.
#[derive(Default)]
struct Flat {
    step_base: Vec<usize>,
    steps: Vec<(u32, u32)>,
    sends: Vec<Xfer>,
    recvs: Vec<Xfer>,
    extra: Vec<(u32, u32)>,
}

impl Flat {
    /// Number of steps of rank `r`.
    #[inline]
    fn len(&self, r: usize) -> usize {
        self.step_base[r + 1] - self.step_base[r]
    }
    #[inline]
    fn sends(&self, g: usize) -> std::ops::Range<usize> {
        self.steps[g].0 as usize..self.steps[g + 1].0 as usize
    }
    #[inline]
    fn recvs(&self, g: usize) -> std::ops::Range<usize> {
        self.steps[g].1 as usize..self.steps[g + 1].1 as usize
    }
    /// Sends (`recv == false`) or receives of all steps of rank `r`.
    fn of_rank(&self, r: usize, recv: bool) -> std::ops::Range<usize> {
        let (a, b) = (self.steps[self.step_base[r]], self.steps[self.step_base[r + 1]]);
        if recv {
            a.1 as usize..b.1 as usize
        } else {
            a.0 as usize..b.0 as usize
        }
    }
    /// The ranges beyond the first of `t`.
    #[inline]
    fn extra(&self, t: &Xfer) -> &[(u32, u32)] {
        &self.extra[t.more.0 as usize..t.more.1 as usize]
    }
    /// The block ranges of `t`, as listed in the schedule (for error messages).
    fn listed(&self, t: &Xfer) -> Vec<(u32, u32)> {
        if t.empty {
            Vec::new()
        } else {
            [&[t.first][..], self.extra(t)].concat()
        }
    }
    /// The number of blocks of `t`.
    #[inline]
    fn count(&self, t: &Xfer) -> usize {
        (t.first.1 - t.first.0) as usize + self.extra(t).iter().map(|&(a, b)| (b - a) as usize).sum::<usize>()
    }
    /// The block ranges of `t`, in order.
    #[inline]
    fn ranges_of<'a>(&'a self, t: &'a Xfer) -> impl Iterator<Item = &'a (u32, u32)> + 'a {
        std::iter::once(&t.first).chain(self.extra(t))
    }
    fn bytes(&self) -> usize {
        self.step_base.capacity() * 8
            + self.steps.capacity() * 8
            + (self.sends.capacity() + self.recvs.capacity()) * std::mem::size_of::<Xfer>()
            + self.extra.capacity() * 8
    }
}

/// Working memory of [`check`], kept per thread for the next call: allocating afresh the tens
/// of megabytes a large schedule needs costs (in page faults) about as much as checking it.
#[derive(Default)]
struct Scratch {
    fl: Flat,
    rstart: Vec<usize>,
    fill: Vec<usize>,
    rr: Vec<(u32, u32)>,
    ss: Vec<(u32, u32)>,
    at: Vec<u32>,
    peers: Vec<u32>,
    vals: Vec<u64>,
    snaps: Snapshots,
    pc: Vec<usize>,
}

impl Scratch {
    fn bytes(&self) -> usize {
        self.fl.bytes()
            + (self.rstart.capacity()
                + self.fill.capacity()
                + self.rr.capacity()
                + self.ss.capacity()
                + self.vals.capacity()
                + self.pc.capacity())
                * 8
            + (self.at.capacity() + self.peers.capacity()) * 4
            + self.snaps.bytes()
    }
}

thread_local! {
    static SCRATCH: Cell<Scratch> = Cell::new(Scratch::default());
}

/// Scratch memory kept between calls, at most.
const KEEP_SCRATCH_BYTES: usize = 128 << 20;

/// Flattens the programs into `fl` and validates every transfer (in program order, as the
/// errors are reported).
fn flatten(s: &Schedule, fl: &mut Flat) -> Result<(), CheckError> {
    let (mut nsteps, mut nsends, mut nrecvs) = (0, 0, 0);
    for prog in &s.programs {
        nsteps += prog.steps.len();
        for st in &prog.steps {
            nsends += st.sends.len();
            nrecvs += st.recvs.len();
        }
    }
    assert!(nsends.max(nrecvs) < u32::MAX as usize, "too many transfers to check");
    fl.step_base.clear();
    fl.steps.clear();
    fl.sends.clear();
    fl.recvs.clear();
    fl.extra.clear();
    fl.step_base.reserve(s.programs.len() + 1);
    fl.steps.reserve(nsteps + 1);
    fl.sends.reserve(nsends);
    fl.recvs.reserve(nrecvs);
    // One tight pass over the schedule's memory (one allocation per step direction and per
    // transfer's ranges); validation follows on the flat copy.
    let extra = &mut fl.extra;
    let mut flat = |si: usize, t: &Transfer| {
        let (first, more) = match t.blocks.0.split_first() {
            Some((&first, more)) if !more.is_empty() => {
                let start = extra.len();
                extra.extend_from_slice(more);
                let end = u32::try_from(extra.len()).expect("fewer than 2^32 block ranges");
                (first, (start as u32, end))
            }
            Some((&first, _)) => (first, (0, 0)),
            None => ((0, 0), (0, 0)),
        };
        Xfer {
            peer: t.peer,
            step: si as u32,
            partner_step: 0,
            link: 0,
            op: t.op,
            empty: t.blocks.is_empty(),
            first,
            more,
        }
    };
    for prog in &s.programs {
        fl.step_base.push(fl.steps.len());
        for (si, st) in prog.steps.iter().enumerate() {
            fl.steps.push((fl.sends.len() as u32, fl.recvs.len() as u32));
            for t in &st.sends {
                fl.sends.push(flat(si, t));
            }
            for t in &st.recvs {
                fl.recvs.push(flat(si, t));
            }
        }
    }
    fl.step_base.push(fl.steps.len());
    fl.steps.push((fl.sends.len() as u32, fl.recvs.len() as u32));
    for r in 0..s.programs.len() {
        for g in fl.step_base[r]..fl.step_base[r + 1] {
            let si = g - fl.step_base[r];
            for t in &fl.sends[fl.sends(g)] {
                validate_transfer(s, r as u32, si, t, fl, false)?;
            }
            for t in &fl.recvs[fl.recvs(g)] {
                validate_transfer(s, r as u32, si, t, fl, true)?;
            }
        }
    }
    Ok(())
}

fn validate_transfer(s: &Schedule, r: u32, si: usize, t: &Xfer, fl: &Flat, is_recv: bool) -> Result<(), CheckError> {
    if t.peer >= s.ranks {
        return fail(Some(r), Some(si), format!("peer {} is not a rank", t.peer));
    }
    if t.peer == r {
        return fail(Some(r), Some(si), "transfers to itself".into());
    }
    if t.empty {
        return fail(Some(r), Some(si), format!("empty transfer with rank {}", t.peer));
    }
    let mut prev_end = None;
    for &(a, b) in fl.ranges_of(t) {
        if a >= b || b > s.blocks || prev_end.is_some_and(|e| a <= e) {
            return fail(
                Some(r),
                Some(si),
                format!("block ranges {:?} are not sorted, disjoint ranges within 0..{}", fl.listed(t), s.blocks),
            );
        }
        prev_end = Some(b);
    }
    if is_recv != t.op.is_some() {
        return fail(
            Some(r),
            Some(si),
            if is_recv { "receive without an op".into() } else { "send with a receive op".into() },
        );
    }
    Ok(())
}

/// Channel matching: the k-th send from r to q pairs with the k-th receive at q from r.
/// Channels are checked in (from, to) order, each in program order. Sets the partners and
/// returns (messages, blocks moved).
fn match_channels(s: &Schedule, sc: &mut Scratch) -> Result<(usize, u64), CheckError> {
    let p = s.ranks as usize;
    let Scratch { fl, rstart, fill, rr, ss, at, peers, .. } = sc;
    // Receives as (receiver, id), grouped by sender (a stable counting sort of the program
    // order): sender r's are `rr[rstart[r]..rstart[r + 1]]`, by receiver then program order.
    rstart.clear();
    rstart.resize(p + 1, 0);
    for t in &fl.recvs {
        rstart[t.peer as usize + 1] += 1;
    }
    for r in 0..p {
        rstart[r + 1] += rstart[r];
    }
    rr.clear();
    rr.resize(fl.recvs.len(), (0, 0));
    fill.clear();
    fill.extend_from_slice(rstart);
    for q in 0..p {
        for f in fl.of_rank(q, true) {
            let from = fl.recvs[f].peer as usize;
            rr[fill[from]] = (q as u32, f as u32);
            fill[from] += 1;
        }
    }
    // Sends of each sender as (receiver, id), by receiver then program order: a counting sort
    // over the (few) receivers it talks to.
    at.clear();
    at.resize(p, 0);
    let (mut messages, mut blocks_moved) = (0, 0u64);
    for from in 0..p {
        let sr = fl.of_rank(from, false);
        peers.clear();
        for t in &fl.sends[sr.clone()] {
            if at[t.peer as usize] == 0 {
                peers.push(t.peer);
            }
            at[t.peer as usize] += 1;
        }
        peers.sort_unstable();
        let mut n = 0;
        for &q in peers.iter() {
            let c = at[q as usize];
            at[q as usize] = n;
            n += c;
        }
        ss.clear();
        ss.resize(sr.len(), (0, 0));
        for f in sr {
            let q = fl.sends[f].peer;
            ss[at[q as usize] as usize] = (q, f as u32);
            at[q as usize] += 1;
        }
        for &q in peers.iter() {
            at[q as usize] = 0;
        }
        let rr = &rr[rstart[from]..rstart[from + 1]];
        let (mut i, mut j) = (0, 0);
        while i < ss.len() || j < rr.len() {
            let to = match (ss.get(i), rr.get(j)) {
                (Some(a), Some(b)) => a.0.min(b.0),
                (Some(a), None) => a.0,
                (None, Some(b)) => b.0,
                (None, None) => unreachable!(),
            };
            let i_end = i + ss[i..].iter().take_while(|e| e.0 == to).count();
            let j_end = j + rr[j..].iter().take_while(|e| e.0 == to).count();
            if i_end - i != j_end - j {
                return fail(
                    Some(from as u32),
                    None,
                    format!("sends {} messages to rank {to}, which receives {} from it", i_end - i, j_end - j),
                );
            }
            for (k, (&(_, fs), &(_, fr))) in ss[i..i_end].iter().zip(&rr[j..j_end]).enumerate() {
                let (st, rt) = (fl.sends[fs as usize], fl.recvs[fr as usize]);
                if st.first != rt.first || fl.extra(&st) != fl.extra(&rt) {
                    return fail(
                        Some(from as u32),
                        Some(st.step as usize),
                        format!(
                            "message {k} to rank {to} carries blocks {:?} but rank {to} (step {}) expects {:?}",
                            fl.listed(&st),
                            rt.step,
                            fl.listed(&rt)
                        ),
                    );
                }
                messages += 1;
                blocks_moved += fl.count(&st) as u64;
                fl.sends[fs as usize].partner_step = rt.step;
                fl.sends[fs as usize].link = fr;
                fl.recvs[fr as usize].partner_step = st.step;
            }
            (i, j) = (i_end, j_end);
        }
    }
    Ok((messages, blocks_moved))
}

/// Snapshot records (of `stride` words) of the messages in flight. A message of `n` blocks
/// takes `n` consecutive records, recycled for a later message of `n` blocks once received, so
/// the arena stays as small (and as hot in cache) as the set of messages in flight.
#[derive(Default)]
struct Snapshots {
    recs: Vec<u64>,
    /// `free[n]`: first records of released runs of `n` records.
    free: Vec<Vec<u32>>,
    stride: usize,
}

impl Snapshots {
    fn reset(&mut self, stride: usize) {
        self.recs.clear();
        self.free.iter_mut().for_each(Vec::clear);
        self.stride = stride;
    }
    #[inline]
    fn alloc(&mut self, n: usize) -> u32 {
        if let Some(first) = self.free.get_mut(n).and_then(Vec::pop) {
            return first;
        }
        let first = self.recs.len() / self.stride;
        self.recs.resize(self.recs.len() + n * self.stride, 0);
        u32::try_from(first).expect("fewer than 2^32 blocks in flight")
    }
    #[inline]
    fn release(&mut self, first: u32, n: usize) {
        if self.free.len() <= n {
            self.free.resize_with(n + 1, Vec::new);
        }
        self.free[n].push(first);
    }
    fn bytes(&self) -> usize {
        self.recs.capacity() * 8 + self.free.iter().map(|f| f.capacity() * 4 + 24).sum::<usize>()
    }
}

/// A set of ranks as a bitset, iterated in increasing order.
struct RankSet(Vec<u64>);

impl RankSet {
    #[inline]
    fn insert(&mut self, r: usize) {
        self.0[r / 64] |= 1 << (r % 64);
    }
    /// Removes and returns the smallest member `>= from`.
    #[inline]
    fn take_from(&mut self, from: usize) -> Option<usize> {
        let mut w = from / 64;
        if w >= self.0.len() {
            return None;
        }
        let mut bits = self.0[w] & (!0u64 << (from % 64));
        loop {
            if bits != 0 {
                let r = w * 64 + bits.trailing_zeros() as usize;
                self.0[w] &= !(1 << (r % 64));
                return Some(r);
            }
            w += 1;
            if w == self.0.len() {
                return None;
            }
            bits = self.0[w];
        }
    }
    fn is_empty(&self) -> bool {
        self.0.iter().all(|&w| w == 0)
    }
}

/// Symbolic values are records of `1 + words` words: word 0 is the rank-order interval —
/// `lo << 32 | hi` if the value is exactly `x_lo ⊕ … ⊕ x_hi` in rank order, else
/// [`NO_ORDER`] — and the rest is the bitset of contributing ranks. A value is held iff its
/// set is non-empty (initial values contribute their rank, reductions and copies keep the set
/// non-empty, a block not held has none).
const NO_ORDER: u64 = u64::MAX;

#[inline]
fn order(lo: u32, hi: u32) -> u64 {
    (lo as u64) << 32 | hi as u64
}

/// The rank-order interval of `a ⊕ b` (a first).
#[inline]
fn combine_order(a: u64, b: u64) -> u64 {
    if a != NO_ORDER && b != NO_ORDER && (a as u32).wrapping_add(1) == (b >> 32) as u32 {
        (a & !0xffff_ffff) | (b & 0xffff_ffff)
    } else {
        NO_ORDER
    }
}

/// Proves `s` correct or says where it goes wrong.
pub fn check(s: &Schedule) -> Result<CheckReport, CheckError> {
    let p = s.ranks;
    if p == 0 {
        return fail(None, None, "schedule has no ranks".into());
    }
    if s.programs.len() != p as usize {
        return fail(None, None, format!("{} programs for {p} ranks", s.programs.len()));
    }
    let needs_owner = matches!(s.collective, Collective::ReduceScatter | Collective::Allgather);
    if needs_owner && s.block_owner.len() != s.blocks as usize {
        return fail(None, None, format!("block_owner has {} entries for {} blocks", s.block_owner.len(), s.blocks));
    }
    if let Some(o) = s.block_owner.iter().find(|&&o| o >= p) {
        return fail(None, None, format!("block owner {o} is not a rank"));
    }
    match s.collective {
        Collective::Broadcast { root } | Collective::Reduce { root } if root >= p => {
            return fail(None, None, format!("root {root} is not a rank"))
        }
        Collective::Alltoall if s.blocks == 0 || s.blocks as u64 % (p as u64 * p as u64) != 0 => {
            return fail(
                None,
                None,
                format!("an all-to-all of {p} ranks needs a multiple of {p}² blocks, not {}", s.blocks),
            )
        }
        _ => {}
    }
    let mut sc = SCRATCH.try_with(Cell::take).unwrap_or_default();
    let result = check_with(s, &mut sc);
    if sc.bytes() <= KEEP_SCRATCH_BYTES {
        let _ = SCRATCH.try_with(|c| c.set(sc));
    }
    result
}

fn check_with(s: &Schedule, sc: &mut Scratch) -> Result<CheckReport, CheckError> {
    flatten(s, &mut sc.fl)?;
    let (messages, blocks_moved) = match_channels(s, sc)?;
    // Fixed-size value records for up to 256 ranks.
    match (s.ranks as usize).div_ceil(64) {
        1 => execute::<1>(s, sc)?,
        2 => execute::<2>(s, sc)?,
        3 => execute::<3>(s, sc)?,
        4 => execute::<4>(s, sc)?,
        _ => execute::<0>(s, sc)?,
    }
    Ok(CheckReport { steps: s.num_steps(), messages, blocks_moved })
}

/// Executes the matched schedule symbolically and checks the postconditions. `W` is the number
/// of bitset words (`⌈p/64⌉`), or 0 to compute it at run time.
fn execute<const W: usize>(s: &Schedule, sc: &mut Scratch) -> Result<(), CheckError> {
    let p = s.ranks;
    let pu = p as usize;
    let words = if W > 0 { W } else { pu.div_ceil(64) };
    let stride = 1 + words;
    let nb = s.blocks as usize;
    let Scratch { fl, vals, snaps, pc, .. } = sc;
    // Value of block `b` at rank `r`: record `r·blocks + b` of `vals`.
    let at = |r: u32, b: u32| (r as usize * nb + b as usize) * stride;
    let mut all = vec![0u64; words];
    for r in 0..p {
        all[(r / 64) as usize] |= 1 << (r % 64);
    }
    vals.clear();
    vals.resize(pu * nb * stride, 0);
    for r in 0..p {
        for b in 0..s.blocks {
            let v = &mut vals[at(r, b)..][..stride];
            let owner = match s.collective {
                Collective::Allreduce | Collective::ReduceScatter | Collective::Reduce { .. } => None,
                Collective::Allgather => Some(s.block_owner[b as usize]),
                Collective::Broadcast { root } => Some(root),
                Collective::Alltoall => Some(s.alltoall_pair(b).0),
            };
            match owner {
                None => {
                    v[0] = order(r, r);
                    v[1 + (r / 64) as usize] |= 1 << (r % 64);
                }
                Some(o) if o == r => {
                    v[0] = order(0, p - 1);
                    v[1..].copy_from_slice(&all);
                }
                Some(_) => v[0] = NO_ORDER,
            }
        }
    }

    // Rendezvous execution, in rounds: in each round ranks 0, 1, … in turn complete their
    // current step if every partner has posted its side. Only ranks whose step may have
    // become ready are examined: a rank that advanced (its next step), and the peers of a
    // step a rank just posted. A peer woken by rank q is examined later in the same round if
    // it is above q, else in the next round — exactly as a full scan would find it.
    // Sent values are snapshot when posted, into records `recvs[link].link ..` of `snaps`
    // (one per block, in block order).
    pc.clear();
    pc.resize(pu, 0);
    snaps.reset(stride);
    let post = |r: u32, pc: usize, fl: &mut Flat, vals: &[u64], snaps: &mut Snapshots| -> Result<(), CheckError> {
        if pc < fl.len(r as usize) {
            for f in fl.sends(fl.step_base[r as usize] + pc) {
                let t = fl.sends[f];
                let first = snaps.alloc(fl.count(&t));
                fl.recvs[t.link as usize].link = first;
                let mut j = first as usize * stride;
                for &(a, e) in fl.ranges_of(&t) {
                    // Blocks a..e are consecutive records.
                    let src = &vals[at(r, a)..at(r, e)];
                    for (b, v) in (a..e).zip(src.chunks_exact(stride)) {
                        if v[1..].iter().fold(0, |x, &w| x | w) == 0 {
                            return fail(
                                Some(r),
                                Some(pc),
                                format!("sends block {b} to rank {} but does not hold it", t.peer),
                            );
                        }
                    }
                    snaps.recs[j..j + src.len()].copy_from_slice(src);
                    j += src.len();
                }
            }
        }
        Ok(())
    };
    for r in 0..p {
        post(r, 0, fl, vals, snaps)?;
    }
    let rank_words = pu.div_ceil(64);
    // Every rank is examined in the first round.
    let mut cur = RankSet(vec![!0u64; rank_words]);
    cur.0[rank_words - 1] = !0u64 >> (rank_words * 64 - pu);
    let mut next = RankSet(vec![0u64; rank_words]);
    loop {
        let mut from = 0;
        while let Some(ri) = cur.take_from(from) {
            from = ri + 1;
            let r = ri as u32;
            if pc[ri] >= fl.len(ri) {
                continue;
            }
            let g = fl.step_base[ri] + pc[ri];
            let ready = fl.sends[fl.sends(g)].iter().all(|t| pc[t.peer as usize] >= t.partner_step as usize)
                && fl.recvs[fl.recvs(g)].iter().all(|t| pc[t.peer as usize] >= t.partner_step as usize);
            if !ready {
                continue;
            }
            for t in &fl.recvs[fl.recvs(g)] {
                let op = t.op.expect("validated");
                let mut j = t.link as usize * stride;
                for &(a, e) in fl.ranges_of(t) {
                    // Blocks a..e are consecutive records, here and in the snapshot.
                    let locals = &mut vals[at(r, a)..at(r, e)];
                    let incs = &snaps.recs[j..j + locals.len()];
                    j += locals.len();
                    if op == RecvOp::Copy {
                        locals.copy_from_slice(incs);
                        continue;
                    }
                    for (b, (local, inc)) in (a..e).zip(locals.chunks_exact_mut(stride).zip(incs.chunks_exact(stride)))
                    {
                        let (mut held, mut twice) = (0, 0);
                        for w in 1..stride {
                            held |= local[w];
                            twice |= local[w] & inc[w];
                        }
                        if held == 0 {
                            return fail(
                                Some(r),
                                Some(pc[ri]),
                                format!("reduces into block {b}, which it does not hold"),
                            );
                        }
                        if twice != 0 {
                            let w = (1..stride).find(|&w| local[w] & inc[w] != 0).expect("overlap");
                            let dup = (local[w] & inc[w]).trailing_zeros() as usize + 64 * (w - 1);
                            return fail(
                                Some(r),
                                Some(pc[ri]),
                                format!(
                                    "block {b} from rank {}: the contribution of rank {dup} would be reduced twice",
                                    t.peer
                                ),
                            );
                        }
                        for w in 1..stride {
                            local[w] |= inc[w];
                        }
                        local[0] = match op {
                            RecvOp::ReduceIncomingFirst => combine_order(inc[0], local[0]),
                            _ => combine_order(local[0], inc[0]),
                        };
                    }
                }
                snaps.release(t.link, fl.count(t));
            }
            pc[ri] += 1;
            post(r, pc[ri], fl, vals, snaps)?;
            next.insert(ri);
            if pc[ri] < fl.len(ri) {
                for t in fl.sends[fl.sends(g + 1)].iter().chain(&fl.recvs[fl.recvs(g + 1)]) {
                    if t.peer > r {
                        cur.insert(t.peer as usize);
                    } else {
                        next.insert(t.peer as usize);
                    }
                }
            }
        }
        if next.is_empty() {
            break;
        }
        // The next round's candidates become the current ones (`cur` is empty here).
        std::mem::swap(&mut cur, &mut next);
    }
    if (0..pu).any(|r| pc[r] < fl.len(r)) {
        let stuck: Vec<String> =
            (0..pu).filter(|&r| pc[r] < fl.len(r)).take(8).map(|r| format!("rank {r} at step {}", pc[r])).collect();
        return fail(None, None, format!("deadlock: no rank can complete its step ({} ...)", stuck.join(", ")));
    }

    // Postconditions.
    let check_val = |r: u32, b: u32| -> Result<(), CheckError> {
        let v = &vals[at(r, b)..][..stride];
        if v[1..].iter().zip(&all).any(|(a, b)| a != b) {
            let held = v[1..].iter().any(|&w| w != 0);
            let missing: Vec<u32> =
                (0..p).filter(|&q| v[1 + (q / 64) as usize] & (1 << (q % 64)) == 0).take(8).collect();
            return fail(
                Some(r),
                None,
                if held {
                    format!("ends with block {b} missing contributions of ranks {missing:?}")
                } else {
                    format!("ends without block {b}")
                },
            );
        }
        if s.noncommutative_safe && v[0] != order(0, p - 1) {
            return fail(
                Some(r),
                None,
                format!("block {b} is not reduced in rank order, but the schedule claims noncommutative_safe"),
            );
        }
        Ok(())
    };
    for b in 0..s.blocks {
        match s.collective {
            Collective::Allreduce | Collective::Allgather | Collective::Broadcast { .. } => {
                for r in 0..p {
                    check_val(r, b)?;
                }
            }
            Collective::ReduceScatter => check_val(s.block_owner[b as usize], b)?,
            Collective::Reduce { root } => check_val(root, b)?,
            Collective::Alltoall => check_val(s.alltoall_pair(b).1, b)?,
        }
    }
    Ok(())
}

#[cfg(test)]
mod timing {
    use crate::algos::{build, Layout};
    use crate::ir::Collective;
    use std::time::Instant;

    fn best<T>(reps: usize, mut f: impl FnMut() -> T) -> f64 {
        (0..reps)
            .map(|_| {
                let t = Instant::now();
                std::hint::black_box(f());
                t.elapsed().as_secs_f64()
            })
            .fold(f64::INFINITY, f64::min)
    }

    /// Checker speed on large schedules:
    /// `cargo test --release -p reducelab-sched --lib check::timing -- --ignored --nocapture`
    #[test]
    #[ignore]
    fn check_timing() {
        let cases: [(&str, Vec<u32>); 5] = [
            ("ring", vec![256]),
            ("ring-bidirectional", vec![256]),
            ("swing-bandwidth", vec![256]),
            ("bucket", vec![16, 16]),
            ("hamiltonian-rings", vec![16, 16]),
        ];
        for (algo, dims) in cases {
            let layout = Layout::new(dims.clone()).unwrap();
            let tb = best(3, || build(algo, Collective::Allreduce, &layout).unwrap());
            let s = build(algo, Collective::Allreduce, &layout).unwrap();
            let rep = super::check(&s).unwrap();
            let tc = best(10, || super::check(&s).unwrap());
            println!(
                "{algo:20} {dims:?}: {} messages, {} blocks moved: check {:.1} ms (build {:.1} ms)",
                rep.messages,
                rep.blocks_moved,
                tc * 1e3,
                tb * 1e3
            );
        }
        // The 1D sweep of tests/baselines.rs for the two ring-based algorithms.
        for algo in ["ring-bidirectional", "bucket"] {
            let (mut tb, mut tc) = (0.0, 0.0);
            for p in 2..=256u32 {
                for c in [Collective::Allreduce, Collective::ReduceScatter, Collective::Allgather] {
                    let t = Instant::now();
                    let s = build(algo, c, &Layout::line(p)).unwrap();
                    tb += t.elapsed().as_secs_f64();
                    let t = Instant::now();
                    super::check(&s).unwrap();
                    tc += t.elapsed().as_secs_f64();
                }
            }
            println!(
                "{algo:20} p = 2..=256, allreduce + reduce-scatter + allgather: check {tc:.2} s (build {tb:.2} s)"
            );
        }
    }
}
