//! What is proven before anything is timed: the dependencies of every rank form no cycle, and every
//! send can meet a receive and every receive a send.
//!
//! Matching follows MPI's rules, as LogGOPSim does: a message from `s` to `d` with tag `t` goes to
//! the first receive posted at `d` that names source `s` (or any, `-1`) and tag `t` (or any), and
//! messages of one sender with one tag are received in the order they were sent. Without wildcards
//! that fixes, statically, how many messages every (destination, source, tag) channel carries:
//! sends and receives must balance on each. A rank with wildcard receives is checked on its totals
//! (every message it is sent is received) and on each exact channel (no more receives than sends);
//! which wildcard receive takes which message depends on timing, and a trace that leaves one
//! unmatched at run time is reported by the simulation, naming it.

use crate::hash::FxHashMap;
use crate::trace::{DepKind, OpId, OpKind, Rank, Trace, ANY_SOURCE, ANY_TAG};
use crate::GoalError;

/// A trace that [`check`] has passed, with its matching channels.
#[derive(Debug)]
pub struct CheckedTrace<'a> {
    pub(crate) trace: &'a Trace,
    pub(crate) channels: Channels,
}

impl<'a> CheckedTrace<'a> {
    pub fn trace(&self) -> &'a Trace {
        self.trace
    }
}

/// `NONE` in [`Channels::of_op`]: a `calc`.
pub(crate) const NO_CHANNEL: u32 = u32::MAX;

/// Matching channels: one per (destination, source, tag) that a send or a receive names
/// (a wildcard receive names [`ANY_SOURCE`] and/or [`ANY_TAG`]), numbered in key order so that one
/// destination's channels are contiguous.
#[derive(Debug, Default)]
pub(crate) struct Channels {
    /// Each operation's channel (a send's is its message's, a receive's the one it waits on).
    pub of_op: Vec<u32>,
    /// Channel keys (destination, source, tag), sorted.
    pub keys: Vec<(u32, u32, u32)>,
    /// Ranks that post a wildcard receive.
    pub wildcard_rank: Vec<bool>,
}

impl Channels {
    pub fn build(t: &Trace) -> Channels {
        let mut ids: FxHashMap<(u32, u32, u32), u32> = FxHashMap::default();
        let mut keys = Vec::new();
        let mut of_op = vec![NO_CHANNEL; t.num_ops()];
        let mut wildcard_rank = vec![false; t.num_ranks() as usize];
        for r in 0..t.num_ranks() {
            for i in t.ops_of(Rank(r)) {
                let i = i as usize;
                let key = match t.kind[i] {
                    OpKind::Send => (t.peer[i], r, t.tag[i]),
                    OpKind::Recv => {
                        if t.peer[i] == ANY_SOURCE || t.tag[i] == ANY_TAG {
                            wildcard_rank[r as usize] = true;
                        }
                        (r, t.peer[i], t.tag[i])
                    }
                    OpKind::Calc => continue,
                };
                of_op[i] = *ids.entry(key).or_insert_with(|| {
                    keys.push(key);
                    keys.len() as u32 - 1
                });
            }
        }
        drop(ids);
        // Renumber in key order.
        let mut order: Vec<u32> = (0..keys.len() as u32).collect();
        order.sort_unstable_by_key(|&c| keys[c as usize]);
        let mut new_id = vec![0u32; keys.len()];
        for (new, &old) in order.iter().enumerate() {
            new_id[old as usize] = new as u32;
        }
        for c in of_op.iter_mut().filter(|c| **c != NO_CHANNEL) {
            *c = new_id[*c as usize];
        }
        let keys = order.iter().map(|&c| keys[c as usize]).collect();
        Channels { of_op, keys, wildcard_rank }
    }

    pub fn len(&self) -> usize {
        self.keys.len()
    }

    /// The channel with this key, if any operation names it.
    pub fn find(&self, key: (u32, u32, u32)) -> Option<u32> {
        self.keys.binary_search(&key).ok().map(|c| c as u32)
    }

    /// Destination `d`'s channels.
    pub fn of_rank(&self, d: u32) -> std::ops::Range<u32> {
        let lo = self.keys.partition_point(|k| k.0 < d);
        let hi = self.keys.partition_point(|k| k.0 <= d);
        lo as u32..hi as u32
    }
}

/// Checks `t` (module docs); the first error in file order.
pub fn check(t: &Trace) -> Result<CheckedTrace<'_>, GoalError> {
    check_cycles(t)?;
    let channels = Channels::build(t);
    check_matching(t, &channels)?;
    Ok(CheckedTrace { trace: t, channels })
}

fn dep_word(k: DepKind) -> &'static str {
    match k {
        DepKind::Requires => "requires",
        DepKind::Irequires => "irequires",
    }
}

/// Kahn's algorithm per rank; on a cycle, walks back along remaining predecessors to name it.
fn check_cycles(t: &Trace) -> Result<(), GoalError> {
    let mut indeg: Vec<u32> = Vec::new();
    let mut stack: Vec<u32> = Vec::new();
    for r in 0..t.num_ranks() {
        let ops = t.ops_of(Rank(r));
        let first = ops.start;
        indeg.clear();
        indeg.resize(ops.len(), 0);
        for o in ops.clone() {
            for (s, _) in t.successors(OpId(o)) {
                indeg[(s.0 - first) as usize] += 1;
            }
        }
        stack.clear();
        stack.extend(ops.clone().filter(|&o| indeg[(o - first) as usize] == 0));
        let mut done = 0usize;
        while let Some(o) = stack.pop() {
            done += 1;
            for (s, _) in t.successors(OpId(o)) {
                let d = &mut indeg[(s.0 - first) as usize];
                *d -= 1;
                if *d == 0 {
                    stack.push(s.0);
                }
            }
        }
        if done < ops.len() {
            return Err(name_cycle(t, ops, &indeg));
        }
    }
    Ok(())
}

fn name_cycle(t: &Trace, ops: std::ops::Range<u32>, indeg: &[u32]) -> GoalError {
    let first = ops.start;
    let left = |o: u32| indeg[(o - first) as usize] > 0;
    // One remaining predecessor per remaining op (the first in file order): every op left after
    // Kahn's algorithm has one, so following them must close a cycle.
    let mut pred: Vec<Option<(u32, DepKind)>> = vec![None; ops.len()];
    for o in ops.clone().filter(|&o| left(o)) {
        for (s, k) in t.successors(OpId(o)) {
            let p = &mut pred[(s.0 - first) as usize];
            if left(s.0) && p.is_none() {
                *p = Some((o, k));
            }
        }
    }
    let start = ops.clone().find(|&o| left(o)).unwrap_or(first);
    let mut seen = vec![false; ops.len()];
    let mut o = start;
    while !seen[(o - first) as usize] {
        seen[(o - first) as usize] = true;
        o = pred[(o - first) as usize].map(|p| p.0).unwrap_or(o);
    }
    // `o` is on the cycle: walk it once, as "a requires b" steps.
    let mut steps = Vec::new();
    let mut lowest = o;
    let mut cur = o;
    loop {
        let (p, k) = pred[(cur - first) as usize].unwrap_or((cur, DepKind::Requires));
        steps.push(format!("{} {} {}", t.label(OpId(cur)), dep_word(k), t.label(OpId(p))));
        lowest = lowest.min(cur);
        cur = p;
        if cur == o {
            break;
        }
    }
    GoalError::new(
        t.line(OpId(lowest)),
        format!("rank {}: dependency cycle: {}", t.rank_of(OpId(o)).0, steps.join(", ")),
    )
}

fn peer_text(p: u32) -> String {
    if p == ANY_SOURCE {
        "-1 (any)".into()
    } else {
        p.to_string()
    }
}

fn tag_text(p: u32) -> String {
    if p == ANY_TAG {
        "-1 (any)".into()
    } else {
        p.to_string()
    }
}

fn check_matching(t: &Trace, ch: &Channels) -> Result<(), GoalError> {
    let n = ch.len();
    let (mut sends, mut recvs) = (vec![0u32; n], vec![0u32; n]);
    let mut sends_to = vec![0u64; t.num_ranks() as usize];
    let mut recvs_at = vec![0u64; t.num_ranks() as usize];
    for (i, &c) in ch.of_op.iter().enumerate() {
        match t.kind[i] {
            OpKind::Send => {
                sends[c as usize] += 1;
                sends_to[t.peer[i] as usize] += 1;
            }
            OpKind::Recv => {
                recvs[c as usize] += 1;
                recvs_at[ch.keys[c as usize].0 as usize] += 1;
            }
            OpKind::Calc => {}
        }
    }
    // First unmatched operation in file order: the k-th send (receive) of a channel is unmatched
    // when the channel has at most k receives (sends).
    let (mut sends_seen, mut recvs_seen) = (vec![0u32; n], vec![0u32; n]);
    for (i, &c) in ch.of_op.iter().enumerate() {
        if c == NO_CHANNEL {
            continue;
        }
        let c = c as usize;
        let (dst, src, tag) = ch.keys[c];
        let seen = if t.kind[i] == OpKind::Send { &mut sends_seen } else { &mut recvs_seen };
        let k = seen[c];
        seen[c] += 1;
        let op = OpId(i as u32);
        let wild_dst = ch.wildcard_rank[dst as usize];
        match t.kind[i] {
            OpKind::Send if !wild_dst && k >= recvs[c] => {
                return Err(GoalError::new(
                    t.line(op),
                    format!(
                        "{} to {dst} tag {tag}: no matching recv (rank {dst} posts {} recv from {src} tag {tag} for {} sends)",
                        t.describe(op),
                        recvs[c],
                        sends[c]
                    ),
                ))
            }
            OpKind::Recv if src != ANY_SOURCE && tag != ANY_TAG && k >= sends[c] => {
                return Err(GoalError::new(
                    t.line(op),
                    format!(
                        "{} from {src} tag {tag}: no matching send (rank {src} sends {} message to {dst} tag {tag} for {} recvs)",
                        t.describe(op),
                        sends[c],
                        recvs[c]
                    ),
                ))
            }
            _ => {}
        }
    }
    // Ranks with wildcard receives: totals.
    for d in 0..t.num_ranks() as usize {
        if !ch.wildcard_rank[d] || sends_to[d] == recvs_at[d] {
            continue;
        }
        let last_recv = t.ops_of(Rank(d as u32)).rev().find(|&o| t.kind[o as usize] == OpKind::Recv);
        let op = OpId(last_recv.unwrap_or(t.ops_of(Rank(d as u32)).start));
        let r = t.op(op);
        return Err(GoalError::new(
            t.line(op),
            format!(
                "{} from {} tag {}: rank {d} is sent {} messages but posts {} receives (some from any source or with any tag)",
                t.describe(op),
                peer_text(r.peer),
                tag_text(r.tag),
                sends_to[d],
                recvs_at[d]
            ),
        ));
    }
    Ok(())
}
