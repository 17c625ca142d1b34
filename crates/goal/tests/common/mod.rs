//! Random valid GOAL traces for the property tests.
#![allow(dead_code)]

use std::fmt::Write;

/// The tests' seeded stream (xorshift64*), the fuzz-corpus tests' own.
#[path = "../../../../fuzz/corpus_replay.rs"]
mod corpus_replay;
pub use corpus_replay::Xs;

/// One operation of a generated trace.
#[derive(Clone, Debug)]
pub struct GenOp {
    pub label: String,
    /// `send 64b to 1 tag 3`, `recv …`, `calc 100`.
    pub body: String,
    /// (label awaited, irequires?)
    pub deps: Vec<(String, bool)>,
}

/// A trace as per-rank operation lists, written out by [`GenTrace::text`].
#[derive(Clone, Debug)]
pub struct GenTrace {
    pub ranks: Vec<Vec<GenOp>>,
}

impl GenTrace {
    pub fn text(&self) -> String {
        let mut s = format!("num_ranks {}\n", self.ranks.len());
        for (r, ops) in self.ranks.iter().enumerate() {
            let _ = writeln!(s, "rank {r} {{");
            for o in ops {
                let _ = writeln!(s, "{}: {}", o.label, o.body);
            }
            for o in ops {
                for (d, i) in &o.deps {
                    let _ = writeln!(s, "{} {} {d}", o.label, if *i { "irequires" } else { "requires" });
                }
            }
            let _ = writeln!(s, "}}");
        }
        s
    }
}

/// A random trace that completes: messages drawn in one global order, each rank's operations in
/// that order, dependencies only on earlier operations of the same rank, receives of one source and
/// tag posted in order, eager sizes (≤ 65535 B, so no send waits for its receive). `chain` makes every operation require the previous one of its
/// rank (one operation free at a time per rank).
pub fn random_trace(rng: &mut Xs, chain: bool) -> GenTrace {
    let n = 2 + rng.below(5) as usize;
    let mut ranks: Vec<Vec<GenOp>> = vec![Vec::new(); n];
    let steps = 1 + rng.below(24);
    let mut next_label = 0;
    let mut label = |r: usize| {
        next_label += 1;
        format!("r{r}op{next_label}")
    };
    for _ in 0..steps {
        if rng.below(4) == 0 {
            let r = rng.below(n as u64) as usize;
            let l = label(r);
            ranks[r].push(GenOp { label: l, body: format!("calc {}", rng.below(5000)), deps: vec![] });
            continue;
        }
        let src = rng.below(n as u64) as usize;
        let mut dst = rng.below(n as u64) as usize;
        if dst == src {
            dst = (dst + 1) % n;
        }
        let tag = rng.below(3);
        let max = if rng.below(2) == 0 { 64 } else { 65535 };
        let size = 1 + rng.below(max);
        let (ls, lr) = (label(src), label(dst));
        ranks[src].push(GenOp { label: ls, body: format!("send {size}b to {dst} tag {tag}"), deps: vec![] });
        ranks[dst].push(GenOp { label: lr, body: format!("recv {size}b from {src} tag {tag}"), deps: vec![] });
    }
    for ops in &mut ranks {
        for i in 1..ops.len() {
            if chain {
                let prev = ops[i - 1].label.clone();
                ops[i].deps.push((prev, false));
            } else {
                for _ in 0..rng.below(3) {
                    let j = rng.below(i as u64) as usize;
                    let d = (ops[j].label.clone(), rng.below(4) == 0);
                    if !ops[i].deps.contains(&d) {
                        ops[i].deps.push(d);
                    }
                }
                // Receives of one source and tag are posted in the messages' order: otherwise a
                // later one, posted early, takes a message an earlier one waits for, and the earlier
                // one may wait forever (MPI's matching; LogGOPSim deadlocks there too).
                if let Some(channel) =
                    ops[i].body.strip_prefix("recv ").and_then(|b| b.split_once(" from ")).map(|x| x.1.to_string())
                {
                    if let Some(j) = (0..i).rev().find(|&j| {
                        ops[j].body.starts_with("recv ") && ops[j].body.ends_with(&format!(" from {channel}"))
                    }) {
                        let d = (ops[j].label.clone(), true);
                        if !ops[i].deps.contains(&d) {
                            ops[i].deps.push(d);
                        }
                    }
                }
            }
        }
    }
    GenTrace { ranks }
}

/// Bursts: every rank sends `m` messages to every other rank at once (no dependencies), some on a
/// second CPU or NIC, some rendezvous — the case where hundreds of events wait for one CPU.
pub fn burst_trace(rng: &mut Xs) -> String {
    let n = 2 + rng.below(10) as usize;
    let m = 1 + rng.below(4);
    let multi = rng.below(2) == 0;
    let mut ranks: Vec<String> = vec![String::new(); n];
    let mut k = 0;
    for src in 0..n {
        for dst in (0..n).filter(|&d| d != src) {
            for _ in 0..m {
                k += 1;
                let max = if rng.below(4) == 0 { 100_000 } else { 4096 };
                let size = 1 + rng.below(max);
                let (c, nic) = if multi { (rng.below(2), rng.below(2)) } else { (0, 0) };
                ranks[src] += &format!("s{k}: send {size}b to {dst} tag {} cpu {c} nic {nic}\n", k % 3);
                let (c, nic) = if multi { (rng.below(2), rng.below(2)) } else { (0, 0) };
                ranks[dst] += &format!("r{k}: recv {size}b from {src} tag {} cpu {c} nic {nic}\n", k % 3);
                if rng.below(3) == 0 {
                    ranks[src] += &format!("c{k}: calc {} cpu {c}\nc{k} irequires s{k}\n", rng.below(3000));
                }
            }
        }
    }
    let mut text = format!("num_ranks {n}\n");
    for (r, body) in ranks.iter().enumerate() {
        text += &format!("rank {r} {{\n{body}}}\n");
    }
    text
}
