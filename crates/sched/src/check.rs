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
//!   reduced over all ranks);
//! - if the schedule claims `noncommutative_safe`, every final value is `x₀ ⊕ … ⊕ x_{p−1}`
//!   in rank order.

use crate::ir::{Collective, RecvOp, Schedule};
use std::collections::HashMap;
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

/// Symbolic value of one block at one rank.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Val {
    held: bool,
    /// Contributing ranks (bitset).
    set: Vec<u64>,
    /// `Some((lo, hi))` if the value is exactly `x_lo ⊕ … ⊕ x_hi` in rank order.
    order: Option<(u32, u32)>,
}

struct State {
    words: usize,
    blocks: usize,
    vals: Vec<Val>,
}

impl State {
    fn idx(&self, r: u32, b: u32) -> usize {
        r as usize * self.blocks + b as usize
    }
}

fn full_set(words: usize, p: u32) -> Vec<u64> {
    let mut s = vec![0u64; words];
    for r in 0..p {
        s[(r / 64) as usize] |= 1 << (r % 64);
    }
    s
}

fn single(words: usize, r: u32) -> Vec<u64> {
    let mut s = vec![0u64; words];
    s[(r / 64) as usize] |= 1 << (r % 64);
    s
}

/// `a ⊕ b` (a first). Errors if a contribution would be counted twice.
fn combine(a: &Val, b: &Val) -> Result<Val, String> {
    let mut set = a.set.clone();
    for (i, w) in b.set.iter().enumerate() {
        if set[i] & w != 0 {
            let dup = (set[i] & w).trailing_zeros() as usize + 64 * i;
            return Err(format!("the contribution of rank {dup} would be reduced twice"));
        }
        set[i] |= w;
    }
    let order = match (a.order, b.order) {
        (Some((alo, ahi)), Some((blo, bhi))) if ahi + 1 == blo => Some((alo, bhi)),
        _ => None,
    };
    Ok(Val { held: true, set, order })
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
        _ => {}
    }
    // Structural checks and channel matching: the k-th send from r to q pairs with the k-th
    // receive at q from r.
    let mut sends: HashMap<(u32, u32), Vec<(usize, usize)>> = HashMap::new();
    let mut recvs: HashMap<(u32, u32), Vec<(usize, usize)>> = HashMap::new();
    for (r, prog) in s.programs.iter().enumerate() {
        let r = r as u32;
        for (si, st) in prog.steps.iter().enumerate() {
            for (ti, t) in st.sends.iter().enumerate() {
                validate_transfer(s, r, si, t, false)?;
                sends.entry((r, t.peer)).or_default().push((si, ti));
            }
            for (ti, t) in st.recvs.iter().enumerate() {
                validate_transfer(s, r, si, t, true)?;
                recvs.entry((t.peer, r)).or_default().push((si, ti));
            }
        }
    }
    // partner[(r, step, send?, idx)] = step of the partner op at the peer.
    let mut send_partner: HashMap<(u32, usize, usize), usize> = HashMap::new();
    let mut recv_partner: HashMap<(u32, usize, usize), (usize, usize)> = HashMap::new();
    let mut keys: Vec<&(u32, u32)> = sends.keys().chain(recvs.keys()).collect();
    keys.sort();
    keys.dedup();
    let mut messages = 0;
    let mut blocks_moved = 0u64;
    for &(from, to) in keys {
        let empty = Vec::new();
        let ss = sends.get(&(from, to)).unwrap_or(&empty);
        let rr = recvs.get(&(from, to)).unwrap_or(&empty);
        if ss.len() != rr.len() {
            return fail(
                Some(from),
                None,
                format!("sends {} messages to rank {to}, which receives {} from it", ss.len(), rr.len()),
            );
        }
        for (k, (&(ssi, sti), &(rsi, rti))) in ss.iter().zip(rr.iter()).enumerate() {
            let st = &s.programs[from as usize].steps[ssi].sends[sti];
            let rt = &s.programs[to as usize].steps[rsi].recvs[rti];
            if st.blocks != rt.blocks {
                return fail(
                    Some(from),
                    Some(ssi),
                    format!("message {k} to rank {to} carries blocks {:?} but rank {to} (step {rsi}) expects {:?}", st.blocks.0, rt.blocks.0),
                );
            }
            send_partner.insert((from, ssi, sti), rsi);
            recv_partner.insert((to, rsi, rti), (ssi, sti));
            messages += 1;
            blocks_moved += st.blocks.len() as u64;
        }
    }

    // Initial symbolic state.
    let words = (p as usize).div_ceil(64);
    let nb = s.blocks as usize;
    let empty = Val { held: false, set: vec![0; words], order: None };
    let mut st = State { words, blocks: nb, vals: vec![empty.clone(); p as usize * nb] };
    let all = full_set(words, p);
    for r in 0..p {
        for b in 0..s.blocks {
            let i = st.idx(r, b);
            st.vals[i] = match s.collective {
                Collective::Allreduce | Collective::ReduceScatter | Collective::Reduce { .. } => {
                    Val { held: true, set: single(st.words, r), order: Some((r, r)) }
                }
                Collective::Allgather => {
                    if s.block_owner[b as usize] == r {
                        Val { held: true, set: all.clone(), order: Some((0, p - 1)) }
                    } else {
                        empty.clone()
                    }
                }
                Collective::Broadcast { root } => {
                    if root == r {
                        Val { held: true, set: all.clone(), order: Some((0, p - 1)) }
                    } else {
                        empty.clone()
                    }
                }
            };
        }
    }

    // Rendezvous execution. `snap[(from, step, idx)]` = values sent, taken when posted.
    let mut pc = vec![0usize; p as usize];
    let mut snaps: HashMap<(u32, usize, usize), Vec<Val>> = HashMap::new();
    let post = |r: u32, pc: usize, st: &State, snaps: &mut HashMap<(u32, usize, usize), Vec<Val>>| -> Result<(), CheckError> {
        if let Some(step) = s.programs[r as usize].steps.get(pc) {
            for (ti, t) in step.sends.iter().enumerate() {
                let mut v = Vec::with_capacity(t.blocks.len() as usize);
                for b in t.blocks.iter() {
                    let val = &st.vals[st.idx(r, b)];
                    if !val.held {
                        return fail(Some(r), Some(pc), format!("sends block {b} to rank {} but does not hold it", t.peer));
                    }
                    v.push(val.clone());
                }
                snaps.insert((r, pc, ti), v);
            }
        }
        Ok(())
    };
    for r in 0..p {
        post(r, 0, &st, &mut snaps)?;
    }
    loop {
        let mut progressed = false;
        let mut done = true;
        for r in 0..p {
            let ri = r as usize;
            let Some(step) = s.programs[ri].steps.get(pc[ri]) else { continue };
            done = false;
            let ready = step.sends.iter().enumerate().all(|(ti, t)| pc[t.peer as usize] >= send_partner[&(r, pc[ri], ti)])
                && step.recvs.iter().enumerate().all(|(ti, t)| pc[t.peer as usize] >= recv_partner[&(r, pc[ri], ti)].0);
            if !ready {
                continue;
            }
            for (ti, t) in step.recvs.iter().enumerate() {
                let (from_step, k) = recv_partner[&(r, pc[ri], ti)];
                let incoming = snaps.get(&(t.peer, from_step, k)).expect("posted send").clone();
                for (j, b) in t.blocks.iter().enumerate() {
                    let i = st.idx(r, b);
                    let new = match t.op.expect("validated") {
                        RecvOp::Copy => Ok(incoming[j].clone()),
                        RecvOp::ReduceIncomingFirst | RecvOp::ReduceLocalFirst if !st.vals[i].held => {
                            return fail(Some(r), Some(pc[ri]), format!("reduces into block {b}, which it does not hold"))
                        }
                        RecvOp::ReduceIncomingFirst => combine(&incoming[j], &st.vals[i]),
                        RecvOp::ReduceLocalFirst => combine(&st.vals[i], &incoming[j]),
                    }
                    .map_err(|m| CheckError { rank: Some(r), step: Some(pc[ri]), message: format!("block {b} from rank {}: {m}", t.peer) })?;
                    st.vals[i] = new;
                }
            }
            pc[ri] += 1;
            post(r, pc[ri], &st, &mut snaps)?;
            progressed = true;
        }
        if done {
            break;
        }
        if !progressed {
            let stuck: Vec<String> = (0..p as usize)
                .filter(|&r| pc[r] < s.programs[r].steps.len())
                .take(8)
                .map(|r| format!("rank {r} at step {}", pc[r]))
                .collect();
            return fail(None, None, format!("deadlock: no rank can complete its step ({} ...)", stuck.join(", ")));
        }
    }

    // Postconditions.
    let is_full = |v: &Val| v.held && v.set == all;
    let check_val = |r: u32, b: u32, v: &Val| -> Result<(), CheckError> {
        if !is_full(v) {
            let missing: Vec<u32> = (0..p).filter(|&q| v.set[(q / 64) as usize] & (1 << (q % 64)) == 0).take(8).collect();
            return fail(
                Some(r),
                None,
                if v.held {
                    format!("ends with block {b} missing contributions of ranks {missing:?}")
                } else {
                    format!("ends without block {b}")
                },
            );
        }
        if s.noncommutative_safe && v.order != Some((0, p - 1)) {
            return fail(Some(r), None, format!("block {b} is not reduced in rank order, but the schedule claims noncommutative_safe"));
        }
        Ok(())
    };
    for b in 0..s.blocks {
        match s.collective {
            Collective::Allreduce | Collective::Allgather | Collective::Broadcast { .. } => {
                for r in 0..p {
                    check_val(r, b, &st.vals[st.idx(r, b)])?;
                }
            }
            Collective::ReduceScatter => {
                let o = s.block_owner[b as usize];
                check_val(o, b, &st.vals[st.idx(o, b)])?;
            }
            Collective::Reduce { root } => check_val(root, b, &st.vals[st.idx(root, b)])?,
        }
    }
    Ok(CheckReport { steps: s.num_steps(), messages, blocks_moved })
}

fn validate_transfer(s: &Schedule, r: u32, si: usize, t: &crate::ir::Transfer, is_recv: bool) -> Result<(), CheckError> {
    if t.peer >= s.ranks {
        return fail(Some(r), Some(si), format!("peer {} is not a rank", t.peer));
    }
    if t.peer == r {
        return fail(Some(r), Some(si), "transfers to itself".into());
    }
    if t.blocks.is_empty() {
        return fail(Some(r), Some(si), format!("empty transfer with rank {}", t.peer));
    }
    let mut prev_end = None;
    for &(a, b) in &t.blocks.0 {
        if a >= b || b > s.blocks || prev_end.is_some_and(|e| a <= e) {
            return fail(Some(r), Some(si), format!("block ranges {:?} are not sorted, disjoint ranges within 0..{}", t.blocks.0, s.blocks));
        }
        prev_end = Some(b);
    }
    if is_recv != t.op.is_some() {
        return fail(Some(r), Some(si), if is_recv { "receive without an op".into() } else { "send with a receive op".into() });
    }
    Ok(())
}
