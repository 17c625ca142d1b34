//! A trace built in memory instead of parsed from text: importers of other formats (Chakra
//! execution traces) lower into GOAL with [`TraceBuilder`] and then run through the same
//! checker and simulations as a parsed trace.
//!
//! Operations are added rank by rank, in increasing rank order (the layout of [`Trace`]);
//! dependencies join two operations of one rank and may be added in any order, before
//! [`TraceBuilder::finish`]. Successor rows keep the order dependencies were added in
//! (`requires` before `irequires`), as the parser keeps file order. Built operations have no
//! input line ([`Trace::line`] is 0).

use crate::trace::{OpKind, Rank, Trace, ANY_SOURCE, MAX_OPS, MAX_RANKS, START_DEP};
use crate::{GoalError, OpId};

/// Builds a [`Trace`] (module docs).
#[derive(Debug)]
pub struct TraceBuilder {
    t: Trace,
    /// (awaited, waiter | [`START_DEP`] for `irequires`).
    edges: Vec<(u32, u32)>,
}

impl TraceBuilder {
    /// A trace of `num_ranks` ranks (1 … [`MAX_RANKS`]) and no operations yet.
    pub fn new(num_ranks: u32) -> Result<TraceBuilder, GoalError> {
        if num_ranks == 0 || num_ranks > MAX_RANKS {
            return Err(GoalError::new(0, format!("num_ranks {num_ranks}: must be 1 … {MAX_RANKS}")));
        }
        let t = Trace { num_ranks, rank_start: vec![0], label_start: vec![0], ..Trace::default() };
        Ok(TraceBuilder { t, edges: Vec::new() })
    }

    /// Adds an operation to `rank`, which must be the rank of the last operation added or a
    /// later one. `size` is bytes for `send`/`recv`, ns for `calc`; `peer` the destination of a
    /// send or the source of a receive ([`ANY_SOURCE`] for any; 0 for a calc); `label` empty or `[a-zA-Z][a-zA-Z0-9_]*`.
    #[allow(clippy::too_many_arguments)]
    pub fn op(
        &mut self,
        rank: Rank,
        kind: OpKind,
        size: u64,
        peer: u32,
        tag: u32,
        cpu: u8,
        label: &str,
    ) -> Result<OpId, GoalError> {
        let t = &mut self.t;
        let current = t.rank_start.len() as u32 - 1;
        if rank.0 >= t.num_ranks {
            return Err(GoalError::new(0, format!("rank {}: no such rank (num_ranks {})", rank.0, t.num_ranks)));
        }
        if rank.0 < current {
            return Err(GoalError::new(
                0,
                format!("rank {} after rank {current}: operations must be added in rank order", rank.0),
            ));
        }
        if kind != OpKind::Calc && peer >= t.num_ranks && !(kind == OpKind::Recv && peer == ANY_SOURCE) {
            return Err(GoalError::new(0, format!("rank {}: peer {peer}: no such rank", rank.0)));
        }
        let ok_label = label.is_empty()
            || (label.as_bytes()[0].is_ascii_alphabetic()
                && label.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_'));
        if !ok_label {
            return Err(GoalError::new(0, format!("rank {}: label {label:?} is not [a-zA-Z][a-zA-Z0-9_]*", rank.0)));
        }
        let id = t.kind.len() as u32;
        if id >= MAX_OPS {
            return Err(GoalError::new(0, format!("more than {MAX_OPS} operations")));
        }
        if t.labels.len() + label.len() > u32::MAX as usize {
            return Err(GoalError::new(0, "labels longer than 4 GiB in total"));
        }
        while t.rank_start.len() <= rank.index() {
            t.rank_start.push(id);
        }
        t.kind.push(kind);
        t.size.push(size);
        t.peer.push(if kind == OpKind::Calc { 0 } else { peer });
        t.tag.push(if kind == OpKind::Calc { 0 } else { tag });
        t.cpu.push(cpu);
        t.nic.push(0);
        t.line.push(0);
        t.labels.extend_from_slice(label.as_bytes());
        t.label_start.push(t.labels.len() as u32);
        t.max_cpu = t.max_cpu.max(cpu);
        Ok(OpId(id))
    }

    /// `waiter requires awaited`: `waiter` starts once `awaited` has completed.
    pub fn requires(&mut self, waiter: OpId, awaited: OpId) -> Result<(), GoalError> {
        self.dep(waiter, awaited, false)
    }

    /// `waiter irequires awaited`: `waiter` starts once `awaited` has started.
    pub fn irequires(&mut self, waiter: OpId, awaited: OpId) -> Result<(), GoalError> {
        self.dep(waiter, awaited, true)
    }

    fn dep(&mut self, waiter: OpId, awaited: OpId, start: bool) -> Result<(), GoalError> {
        let n = self.t.kind.len() as u32;
        if waiter.0 >= n || awaited.0 >= n {
            return Err(GoalError::new(0, format!("dependency on operation {} of {n}", waiter.0.max(awaited.0))));
        }
        if self.edges.len() >= u32::MAX as usize {
            return Err(GoalError::new(0, "more than 4294967295 dependencies"));
        }
        self.edges.push((awaited.0, waiter.0 | if start { START_DEP } else { 0 }));
        Ok(())
    }

    pub fn num_ranks(&self) -> u32 {
        self.t.num_ranks
    }

    /// Operations added so far.
    pub fn num_ops(&self) -> usize {
        self.t.kind.len()
    }

    /// The trace: dependencies into successor rows, after checking each joins two operations of
    /// one rank.
    pub fn finish(mut self) -> Result<Trace, GoalError> {
        let t = &mut self.t;
        let n = t.kind.len() as u32;
        while t.rank_start.len() < t.num_ranks as usize + 1 {
            t.rank_start.push(n);
        }
        for &(from, to) in &self.edges {
            let to = OpId(to & !START_DEP);
            let (a, b) = (t.rank_of(OpId(from)), t.rank_of(to));
            if a != b {
                return Err(GoalError::new(
                    0,
                    format!("a dependency joins rank {}'s operation {} and rank {}'s {}", b.0, to.0, a.0, from),
                ));
            }
        }
        // Counting sort by (awaited op, kind), stable: `requires` successors, then `irequires`,
        // each in the order added.
        let key = |&(from, to): &(u32, u32)| (from as usize) * 2 + (to & START_DEP != 0) as usize;
        let mut count = vec![0u32; n as usize * 2 + 1];
        for e in &self.edges {
            count[key(e) + 1] += 1;
        }
        for k in 1..count.len() {
            count[k] += count[k - 1];
        }
        t.succ = vec![0; self.edges.len()];
        for e in &self.edges {
            let k = key(e);
            t.succ[count[k] as usize] = e.1;
            count[k] += 1;
        }
        t.succ_start = Vec::with_capacity(n as usize + 1);
        t.succ_start.push(0);
        for i in 0..n as usize {
            t.succ_start.push(count[2 * i + 1]);
        }
        Ok(self.t)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{check, parse_str, simulate, DepKind, LogGpParams};

    #[test]
    fn a_built_trace_equals_the_parsed_one_but_for_lines() {
        let text = "num_ranks 3\nrank 0 {\na: send 100b to 2 tag 4\nb: calc 50 cpu 1\nc: calc 7\nc requires a\nc irequires b\nb requires a\n}\nrank 2 {\nr: recv 100b from 0 tag 4\n}\n";
        let parsed = parse_str(text).unwrap();
        let mut b = TraceBuilder::new(3).unwrap();
        let a = b.op(Rank(0), OpKind::Send, 100, 2, 4, 0, "a").unwrap();
        let bb = b.op(Rank(0), OpKind::Calc, 50, 0, 0, 1, "b").unwrap();
        let c = b.op(Rank(0), OpKind::Calc, 7, 0, 0, 0, "c").unwrap();
        b.requires(c, a).unwrap();
        b.irequires(c, bb).unwrap();
        b.requires(bb, a).unwrap();
        b.op(Rank(2), OpKind::Recv, 100, 0, 4, 0, "r").unwrap();
        let built = b.finish().unwrap();
        let mut same = parsed.clone();
        same.line = vec![0; same.line.len()];
        assert_eq!(built, same);
        assert_eq!(built.successors(a).collect::<Vec<_>>(), vec![(c, DepKind::Requires), (bb, DepKind::Requires)]);
        let r = simulate(&check(&built).unwrap(), &LogGpParams::default(), false).unwrap();
        let p = simulate(&check(&parsed).unwrap(), &LogGpParams::default(), false).unwrap();
        assert_eq!(r.rank_end_ns, p.rank_end_ns);
    }

    #[test]
    fn misuse_is_an_error() {
        assert!(TraceBuilder::new(0).is_err());
        let mut b = TraceBuilder::new(2).unwrap();
        let x = b.op(Rank(1), OpKind::Calc, 1, 0, 0, 0, "x").unwrap();
        assert!(b.op(Rank(0), OpKind::Calc, 1, 0, 0, 0, "").unwrap_err().message.contains("rank order"));
        assert!(b.op(Rank(2), OpKind::Calc, 1, 0, 0, 0, "").is_err());
        assert!(b.op(Rank(1), OpKind::Send, 1, 5, 0, 0, "").is_err());
        assert!(b.op(Rank(1), OpKind::Calc, 1, 0, 0, 0, "9x").is_err());
        assert!(b.requires(x, OpId(7)).is_err());
        let mut b = TraceBuilder::new(2).unwrap();
        let a = b.op(Rank(0), OpKind::Calc, 1, 0, 0, 0, "").unwrap();
        let c = b.op(Rank(1), OpKind::Calc, 1, 0, 0, 0, "").unwrap();
        b.requires(c, a).unwrap();
        assert!(b.finish().unwrap_err().message.contains("joins rank 1"));
    }
}
