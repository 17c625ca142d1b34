//! Runs GOAL traces (`goal` and `chakra` entries) on the flow backend (`run.backend = "flow"`):
//! the same [`GoalRun`] bookkeeping as on the packet engine (dependencies, MPI matching by
//! (source, tag, order), calcs on per-(rank, cpu) queues, eager sends, results and files), with
//! every send a message of one shared [`reducelab_flow::FlowNet`]: entries on disjoint hosts
//! share its links as they would share the packet network's.
//!
//! - **Time.** The fluid engine's clock is picoseconds as `f64`. The executor handles each event
//!   at its exact time: a message freed by a delivery starts at that delivery's time, a calc's
//!   end is its start plus its integer duration, so chains of operations carry no rounding. The
//!   operations' records (`start_ps`, `end_ps`, ranks' ends) are those times rounded to the
//!   nearest picosecond.
//! - **Order.** At one instant, the engine's events (deliveries first) come before the
//!   executor's timers (calc ends, an entry's start), timers in the order they were set;
//!   operations freed at one instant start in trace order, as on the packet engine.
//! - **Nothing carried.** Flow level has no payload: a run is verified when every operation
//!   completed and every receive got the message MPI's matching names; `messages_verified`
//!   is null.
//!
//! Deterministic: no map is iterated; the engine's and the timers' orders are total.

use std::cmp::{Ordering, Reverse};
use std::collections::BinaryHeap;

use reducelab_flow::FlowNet;
use reducelab_scenario::{Scenario, Traffic};

use crate::goal_run::{GoalNet, GoalRun, GOAL_TIMER};

/// A time of the executor's timer queue (ps, never NaN), totally ordered.
#[derive(Clone, Copy, PartialEq)]
struct Ps(f64);
impl Eq for Ps {}
impl PartialOrd for Ps {
    fn partial_cmp(&self, o: &Self) -> Option<Ordering> {
        Some(self.cmp(o))
    }
}
impl Ord for Ps {
    fn cmp(&self, o: &Self) -> Ordering {
        self.0.total_cmp(&o.0)
    }
}

/// The flow network as a GOAL run sees it ([`GoalNet`]).
struct FlowGoalNet<'t> {
    net: FlowNet<'t>,
    /// The exact time of the event being handled (ps).
    now: f64,
    /// (time, insertion sequence, token): calc ends and entries' starts.
    timers: BinaryHeap<Reverse<(Ps, u64, u64)>>,
    seq: u64,
    /// Per message ([`reducelab_flow::FlowMsgId`]): its traffic entry, start and delivery
    /// (NaN until delivered).
    owner: Vec<u32>,
    start_ps: Vec<f64>,
    end_ps: Vec<f64>,
    bytes: Vec<u64>,
    /// The first message the engine refused (no route), if any.
    error: Option<String>,
}

impl GoalNet for FlowGoalNet<'_> {
    fn now_ps(&self) -> u64 {
        self.now.round() as u64
    }

    fn send_msg(&mut self, src: u32, dst: u32, bytes: u64, tag: u64) -> u32 {
        match self.net.send(src, dst, bytes, self.now) {
            Ok(id) => {
                self.owner.push(tag as u32);
                self.start_ps.push(self.now);
                self.end_ps.push(f64::NAN);
                self.bytes.push(bytes);
                id.0
            }
            Err(e) => {
                self.error.get_or_insert(format!("traffic[{tag}]: host {src} to host {dst}: {e}"));
                u32::MAX
            }
        }
    }

    fn wake_at(&mut self, at_ps: u64, token: u64) {
        // The delay after the rounded now, from the exact now: a calc of T ps ends T ps later.
        let at = self.now + at_ps.saturating_sub(self.now_ps()) as f64;
        self.timers.push(Reverse((Ps(at), self.seq, token)));
        self.seq += 1;
    }
}

/// A flow-level GOAL run's outcome, for [`crate::report::build_flow_goal`].
pub struct FlowGoalOutcome {
    /// Every GOAL entry's run, by traffic index.
    pub runs: Vec<(usize, GoalRun)>,
    /// Per entry (by traffic index): message completion times (ps) of its delivered messages,
    /// its messages in all, and the first start and last delivery (ps).
    pub messages: Vec<FlowGoalMessages>,
    pub events: u64,
    /// The last event's time (ps).
    pub end_ps: u64,
    /// Why the run stopped short, if the engine refused a message.
    pub error: Option<String>,
    /// Nothing was run (a probe).
    pub probe: bool,
}

#[derive(Clone, Debug, Default)]
pub struct FlowGoalMessages {
    pub count: u64,
    pub fcts_ps: Vec<u64>,
    pub bytes_delivered: u64,
    pub first_start_ps: u64,
    pub last_end_ps: u64,
}

/// Runs every GOAL entry of `sc` on one flow network until all are done or nothing is left
/// to happen (a trace that cannot finish: its runs say which ranks wait where).
pub fn run(sc: &Scenario, probe: bool) -> FlowGoalOutcome {
    let mut runs: Vec<(usize, GoalRun)> = sc
        .traffic
        .iter()
        .enumerate()
        .map(|(ti, t)| match t {
            Traffic::Goal(g) => (ti, GoalRun::new(g.clone(), ti as u64)),
            _ => unreachable!("run.backend = \"flow\" resolves GOAL traffic only with GOAL entries"),
        })
        .collect();
    let cfg = reducelab_scenario::flow_config(&sc.net, &sc.endpoint);
    let mut drv = FlowGoalNet {
        net: FlowNet::new(&sc.topology, &cfg),
        now: 0.0,
        timers: BinaryHeap::new(),
        seq: 0,
        owner: Vec::new(),
        start_ps: Vec::new(),
        end_ps: Vec::new(),
        bytes: Vec::new(),
        error: None,
    };
    // Runs are stored in traffic order and every entry is GOAL: run k is traffic[k].
    let mut left = 0usize;
    if !probe {
        for (ti, run) in runs.iter_mut() {
            run.start(&mut drv, *ti);
            left += usize::from(!run.is_done());
        }
    }
    while left > 0 && drv.error.is_none() {
        let te = drv.net.next_event_ps();
        let tt = drv.timers.peek().map(|Reverse((Ps(t), ..))| *t);
        let (was_done, ti) = match (te, tt) {
            (None, None) => break,
            (Some(e), t) if t.is_none_or(|t| e <= t) => {
                let (now, delivered) = drv.net.step().expect("an event is pending");
                drv.now = now;
                let Some(id) = delivered else { continue };
                drv.end_ps[id.0 as usize] = now;
                let ti = drv.owner[id.0 as usize] as usize;
                let run = &mut runs[ti].1;
                let was_done = run.is_done();
                run.on_delivered(&mut drv, id.0);
                (was_done, ti)
            }
            _ => {
                let Reverse((Ps(at), _, token)) = drv.timers.pop().expect("peeked");
                drv.now = at;
                debug_assert!(token & GOAL_TIMER != 0);
                let ti = ((token & !GOAL_TIMER) >> 32) as usize;
                let run = &mut runs[ti].1;
                let was_done = run.is_done();
                run.on_timer(&mut drv, token as u32);
                (was_done, ti)
            }
        };
        if !was_done && runs[ti].1.is_done() {
            left -= 1;
        }
    }
    let mut messages = vec![FlowGoalMessages::default(); runs.len()];
    let (mut first, mut last) = (vec![f64::INFINITY; runs.len()], vec![0.0f64; runs.len()]);
    for (k, &ti) in drv.owner.iter().enumerate() {
        let ti = ti as usize;
        let m = &mut messages[ti];
        m.count += 1;
        first[ti] = first[ti].min(drv.start_ps[k]);
        let end = drv.end_ps[k];
        if !end.is_nan() {
            m.fcts_ps.push((end - drv.start_ps[k]).round() as u64);
            m.bytes_delivered += drv.bytes[k];
            last[ti] = last[ti].max(end);
        }
    }
    for (k, m) in messages.iter_mut().enumerate() {
        m.first_start_ps = if first[k].is_finite() { first[k].round() as u64 } else { 0 };
        m.last_end_ps = last[k].round() as u64;
    }
    FlowGoalOutcome {
        runs,
        messages,
        events: drv.net.events(),
        end_ps: drv.now.round() as u64,
        error: drv.error,
        probe,
    }
}
