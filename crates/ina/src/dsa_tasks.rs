//! DSA's three kinds of aggregation task (seed 001, §IV-C, "All-case Analysis") and the packet
//! losses that fall on each, as an observer beside the switch program (sans-I/O: it is told
//! what happened and counts; it changes nothing).
//!
//! §IV-A: "We name the aggregation operation on packets with the same PSN in a job an
//! *aggregation task*." §IV-C: "We consider three kinds of aggregation tasks: **type-I** tasks
//! do not experience preemption, **type-II** tasks experience and win the preemption, and
//! **type-III** ones experience but lose the preemption."
//!
//! A preemption contest happens when a gradient packet of one task finds its aggregator held
//! by another task (§III-B): one of the two is kept in the switch (it won) and the other goes
//! to the PS (it lost). Both tasks "experience" the preemption, so every contest makes one
//! task type II and one type III. A task that won some contests and lost others counts as
//! type III: it has a partial result at the PS, the case §IV-C analyses as type III.
//!
//! §VII ("Performance in Lossy Networks") reports "the ratio of each packet loss type, i.e.,
//! corresponding to which aggregation tasks (§IV-C)": [`TaskTypes::on_loss`] records which
//! task a dropped packet belonged to, and [`TaskTypes::counts`] classifies it by what its
//! task went through over the whole run (a packet lost before its task was preempted counts
//! under the task's final type).
//!
//! Determinism: a `BTreeMap` keyed by task; only tasks with a contest or a loss are stored.

use crate::pool::Task;
use serde::Serialize;
use std::collections::BTreeMap;

#[derive(Clone, Copy, Debug, Default)]
struct Record {
    won: bool,
    lost: bool,
    lost_packets: u64,
}

/// Counts by §IV-C task type.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct ByTaskType {
    pub type_i: u64,
    pub type_ii: u64,
    pub type_iii: u64,
}

/// What [`TaskTypes`] reports (summary.json `training.task_types` in DSA runs).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct TaskTypeCounts {
    /// Tasks of each type (type I: every task of the run that met no contest).
    pub tasks: ByTaskType,
    /// Packets dropped by the network, by the type of the task they belonged to.
    pub lost_packets: ByTaskType,
}

/// The observer: preemption contests and lost packets per task.
#[derive(Clone, Debug, Default)]
pub struct TaskTypes {
    tasks: BTreeMap<Task, Record>,
}

impl TaskTypes {
    pub fn new() -> TaskTypes {
        TaskTypes::default()
    }

    /// A contest at an aggregator: `winner` stays in the switch, `loser` goes to the PS.
    pub fn on_contest(&mut self, winner: Task, loser: Task) {
        self.tasks.entry(winner).or_default().won = true;
        self.tasks.entry(loser).or_default().lost = true;
    }

    /// The network dropped a packet of `task`.
    pub fn on_loss(&mut self, task: Task) {
        self.tasks.entry(task).or_default().lost_packets += 1;
    }

    /// The counts, with `total_tasks` the run's aggregation tasks (type I is the rest).
    pub fn counts(&self, total_tasks: u64, lost_packets: u64) -> TaskTypeCounts {
        let mut c = TaskTypeCounts::default();
        let mut lost_typed = 0;
        for r in self.tasks.values() {
            let (t, l) = if r.lost {
                (&mut c.tasks.type_iii, &mut c.lost_packets.type_iii)
            } else if r.won {
                (&mut c.tasks.type_ii, &mut c.lost_packets.type_ii)
            } else {
                continue;
            };
            *t += 1;
            *l += r.lost_packets;
            lost_typed += r.lost_packets;
        }
        c.tasks.type_i = total_tasks.saturating_sub(c.tasks.type_ii + c.tasks.type_iii);
        c.lost_packets.type_i = lost_packets.saturating_sub(lost_typed);
        c
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const A: Task = Task { job: 0, psn: 1 };
    const B: Task = Task { job: 1, psn: 1 };
    const C: Task = Task { job: 1, psn: 2 };

    #[test]
    fn each_contest_makes_a_winner_and_a_loser_and_losses_follow_their_task() {
        let mut t = TaskTypes::new();
        for x in [A, A, B, C, C] {
            t.on_loss(x);
        }
        t.on_contest(A, B); // A won, B lost
        t.on_contest(C, A); // A lost afterwards: type III
        let c = t.counts(10, 7);
        assert_eq!(c.tasks, ByTaskType { type_i: 7, type_ii: 1, type_iii: 2 });
        // A (2, III), B (1, III), C (2, II), and 2 lost packets of tasks with no contest.
        assert_eq!(c.lost_packets, ByTaskType { type_i: 2, type_ii: 2, type_iii: 3 });
    }

    #[test]
    fn no_contest_everything_is_type_i() {
        let mut t = TaskTypes::new();
        t.on_loss(A);
        assert_eq!(
            t.counts(5, 1),
            TaskTypeCounts {
                tasks: ByTaskType { type_i: 5, ..Default::default() },
                lost_packets: ByTaskType { type_i: 1, ..Default::default() }
            }
        );
    }
}
