//! The timing view of a schedule: who sends how many blocks to whom at each step, without
//! block identities.
//!
//! Timing backends (the flow simulator) need, per step, each message's sender, receiver,
//! port and size, but not which blocks it carries. A [`Plan`] keeps exactly that, with runs
//! of identical consecutive steps stored once (`repeat`): a ring allreduce on `p` ranks is one
//! step of `p` messages repeated `2(p−1)` times instead of `2p(p−1)` transfers, which is what
//! lets the flow backend run ring, Hamiltonian-ring and bucket allreduces on 4k–16k-node tori.
//!
//! Semantics are the schedule's (see [`crate::ir`]): every message of global step `s` is a
//! send in step `s` of its sender's program and a receive in step `s` of its receiver's;
//! each rank starts a step when it completed the previous one. [`Plan::from_schedule`]
//! derives the plan of any schedule whose sends and receives are matched within steps (all
//! generators in [`crate::algos`] are, since they build with [`Schedule::exchange`]);
//! [`plan`] additionally builds the plans of the heavy algorithms directly, without
//! materialising their schedules (proven equal to the derived plans in tests).

use crate::algos::{self, Layout};
use crate::ir::{Collective, Schedule};
use std::collections::HashMap;

/// `port` of a message that has none (the route is the topology's minimal path).
pub const NO_PORT: u16 = u16::MAX;

/// One message of a step.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct PlanMsg {
    pub from: u32,
    pub to: u32,
    /// Sender's port ([`NO_PORT`] if the schedule gives none).
    pub port: u16,
    /// Number of blocks carried (of [`Plan::blocks`]).
    pub blocks: u32,
}

/// A run of `repeat` identical global steps.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PlanStep {
    pub msgs: Vec<PlanMsg>,
    pub repeat: u32,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Plan {
    pub algorithm: String,
    pub ranks: u32,
    pub blocks: u32,
    /// Torus shape the ports refer to, if any.
    pub torus: Option<Vec<u32>>,
    pub steps: Vec<PlanStep>,
}

impl Plan {
    pub fn new(algorithm: impl Into<String>, ranks: u32, blocks: u32, torus: Option<Vec<u32>>) -> Plan {
        Plan { algorithm: algorithm.into(), ranks, blocks, torus, steps: Vec::new() }
    }

    /// Appends one global step (messages in any order; they are sorted). A step identical to
    /// the previous one extends its run.
    pub fn push_step(&mut self, mut msgs: Vec<PlanMsg>) {
        msgs.sort_unstable();
        match self.steps.last_mut() {
            Some(last) if last.msgs == msgs => last.repeat += 1,
            _ => self.steps.push(PlanStep { msgs, repeat: 1 }),
        }
    }

    /// Number of global steps (runs expanded).
    pub fn num_steps(&self) -> u64 {
        self.steps.iter().map(|s| s.repeat as u64).sum()
    }

    /// Number of messages (runs expanded).
    pub fn messages(&self) -> u64 {
        self.steps.iter().map(|s| s.repeat as u64 * s.msgs.len() as u64).sum()
    }

    /// Bytes of a message of `blocks` blocks for a vector of `size_bytes` bytes of
    /// `elem_bytes`-byte elements: the blocks' share of the elements, rounded to the nearest
    /// element. (The schedule's blocks differ by at most one element from this average, so a
    /// plan's bytes can differ from the schedule's by at most one element per block.)
    pub fn bytes(&self, blocks: u32, size_bytes: u64, elem_bytes: u64) -> u64 {
        let elem = elem_bytes.max(1);
        let count = (size_bytes / elem) as u128;
        let b = self.blocks.max(1) as u128;
        ((blocks as u128 * count * 2 + b) / (2 * b)) as u64 * elem
    }

    /// The plan of `s`. Errors if a step's sends and receives do not match one to one (a
    /// send in step `k` of rank `a` to `b` needs a receive from `a` in step `k` of `b` with as
    /// many blocks).
    pub fn from_schedule(s: &Schedule) -> Result<Plan, String> {
        let mut plan = Plan::new(s.algorithm.clone(), s.ranks, s.blocks, s.torus.clone());
        let mut pending: HashMap<(u32, u32, u32), i64> = HashMap::new();
        for k in 0..s.num_steps() {
            let mut msgs = Vec::new();
            pending.clear();
            for (r, prog) in s.programs.iter().enumerate() {
                let Some(step) = prog.steps.get(k) else { continue };
                for t in &step.sends {
                    if t.peer >= s.ranks {
                        return Err(format!(
                            "step {k}: rank {r} sends to rank {}, but there are {} ranks",
                            t.peer, s.ranks
                        ));
                    }
                    let n = t.blocks.len();
                    msgs.push(PlanMsg { from: r as u32, to: t.peer, port: t.port.unwrap_or(NO_PORT), blocks: n });
                    *pending.entry((r as u32, t.peer, n)).or_insert(0) += 1;
                }
                for t in &step.recvs {
                    *pending.entry((t.peer, r as u32, t.blocks.len())).or_insert(0) -= 1;
                }
            }
            if let Some((&(a, b, n), &c)) = pending.iter().filter(|e| *e.1 != 0).min_by_key(|e| *e.0) {
                let what = if c > 0 { "is not received" } else { "is received but not sent" };
                return Err(format!(
                    "step {k}: a message of {n} blocks from rank {a} to rank {b} {what} in that step; timing plans need sends and receives matched within steps"
                ));
            }
            plan.push_step(msgs);
        }
        Ok(plan)
    }
}

/// The allreduce plan of the variant `algorithm` on `layout`: built directly for the
/// algorithms whose schedules are large (the registry's [`direct_plan`]: ring family, bucket,
/// bandwidth-optimal Swing), derived from the schedule otherwise.
///
/// [`direct_plan`]: crate::registry::Algorithm::direct_plan
pub fn plan(algorithm: &str, layout: &Layout) -> Result<Plan, String> {
    let a = crate::registry::variant_entry(algorithm)?;
    match a.direct_plan {
        Some(direct) => direct(layout),
        None => Plan::from_schedule(&algos::build(algorithm, Collective::Allreduce, layout)?),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ir::{Blocks, RecvOp};

    #[test]
    fn identical_steps_are_one_run() {
        let s = algos::build("ring", Collective::Allreduce, &Layout::line(8)).unwrap();
        let p = Plan::from_schedule(&s).unwrap();
        assert_eq!(p.steps.len(), 1);
        assert_eq!(p.steps[0].repeat, 14);
        assert_eq!(p.num_steps(), 14);
        assert_eq!(p.messages(), 14 * 8);
        assert!(p.steps[0].msgs.iter().all(|m| m.blocks == 1 && m.to == (m.from + 1) % 8 && m.port == NO_PORT));
    }

    #[test]
    fn unmatched_steps_are_rejected() {
        let mut s = Schedule::new(Collective::Allreduce, "bad", 2, 2);
        s.step_mut(0, 0).sends.push(crate::ir::Transfer { peer: 1, port: None, blocks: Blocks::range(0, 1), op: None });
        s.step_mut(1, 1).recvs.push(crate::ir::Transfer {
            peer: 0,
            port: None,
            blocks: Blocks::range(0, 1),
            op: Some(RecvOp::Copy),
        });
        let e = Plan::from_schedule(&s).unwrap_err();
        assert!(e.contains("step 0") && e.contains("from rank 0 to rank 1 is not received"), "{e}");
    }

    #[test]
    fn bytes_are_the_blocks_share() {
        let p = Plan::new("x", 4, 16, None);
        assert_eq!(p.bytes(16, 1 << 20, 4), 1 << 20);
        assert_eq!(p.bytes(1, 1 << 20, 4), 1 << 16);
        // 8 elements over 16 blocks: half an element per block, rounded to nearest.
        assert_eq!(p.bytes(1, 32, 4), 4);
        assert_eq!(p.bytes(3, 32, 4), 8);
        assert_eq!(p.bytes(0, 32, 4), 0);
    }
}

#[cfg(test)]
mod direct_plans {
    use super::*;

    /// The directly built plans equal the plans of the materialised schedules.
    #[test]
    fn direct_plans_equal_derived_plans() {
        let shapes: &[&[u32]] = &[
            &[2],
            &[3],
            &[7],
            &[8],
            &[12],
            &[16],
            &[2, 2],
            &[4, 4],
            &[8, 8],
            &[4, 8],
            &[8, 2],
            &[6, 4],
            &[3, 3],
            &[5, 7],
            &[10, 5],
            &[16, 4],
            &[4, 4, 4],
            &[2, 4, 8],
            &[3, 3, 3],
            &[2, 2, 2, 2],
            &[4, 4, 2, 2],
            &[32, 8],
        ];
        for dims in shapes {
            let layout = Layout::new(dims.to_vec()).unwrap();
            let direct = crate::registry::all().iter().filter(|a| a.direct_plan.is_some()).map(|a| a.name);
            for alg in direct {
                let Ok(s) = algos::build(alg, Collective::Allreduce, &layout) else {
                    assert!(plan(alg, &layout).is_err(), "{alg} on {dims:?}: plan built where the schedule is not");
                    continue;
                };
                let want = Plan::from_schedule(&s).unwrap();
                let got = plan(alg, &layout).unwrap();
                assert_eq!(got, want, "{alg} on {dims:?}");
            }
        }
    }

    #[test]
    fn ring_family_plans_are_compact() {
        let layout = Layout::new(vec![64, 64]).unwrap();
        let h = plan("hamiltonian-rings", &layout).unwrap();
        assert_eq!(h.steps.len(), 1, "every step of the four rings is alike");
        assert_eq!(h.num_steps(), 2 * 4095);
        assert_eq!(h.messages(), 2 * 4095 * 4 * 4096);
        let b = plan("bucket", &layout).unwrap();
        assert_eq!(b.num_steps(), 4 * 63);
        assert!(b.steps.len() <= 4, "{}", b.steps.len());
    }
}
