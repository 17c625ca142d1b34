//! Runs a GOAL trace (`[[traffic]] kind = "goal"`, `reducelab_goal`) on the packet network:
//! every `send` is a message of the network (with the scenario's transport), every `recv` waits
//! for its message, every `calc` occupies its CPU for its time. The bookkeeping below is
//! network-agnostic ([`GoalNet`]): the flow backend runs traces with it too
//! (`crate::goal_flow`).
//!
//! - **Dependencies.** An operation starts once every operation it `requires` has completed and
//!   every operation it `irequires` has started; operations freed at one instant start in trace
//!   order (so a step's sends enter the NIC in the order the file lists them).
//! - **Sends** start a message to the destination rank's host at once. A send of more than
//!   `eager_bytes` completes when its message is delivered (default: every send, as a
//!   collective's step completes when its sends are delivered); one of at most `eager_bytes`
//!   completes when handed to the network (MPI's eager protocol, its buffering not timed).
//! - **Receives** match MPI's rules: the k-th send from `a` to `b` with tag `t` is the k-th
//!   receive at `b` from `a` with tag `t`, whatever order the network delivers them in (a
//!   message that arrives before its receive is posted waits). Wildcard receives are refused
//!   when the scenario is read (their match would depend on arrival order).
//! - **Calc** `T` takes `T` ns of its CPU (`cpu N`, default 0); calcs of one CPU run one at a
//!   time, in the order they became ready. Message overheads are the scenario's `[endpoint]`
//!   costs, not the CPU's: `nic` is not used (the network routes every message).
//! - **Results**: each rank's end (its last operation's completion) after the entry's start,
//!   the makespan, and the critical path: the longest chain of dependencies and messages,
//!   weighted by each calc's time and each message's time in the network (send start to
//!   delivery), waits for a busy CPU left out (as LogGOPSim's critical path leaves out waits
//!   for busy CPUs and NICs); `irequires` waits for its predecessor's start, `requires` for its
//!   end. With `ops = true`, every operation's start and end.
//! - **In-network collectives** (a `chakra` entry's collectives served by an in-network
//!   protocol: `reducelab_chakra::CollectiveInstance::in_network`): a rank's operation for one
//!   is a `calc 0` that neither takes its CPU nor completes by itself. When the rank reaches it,
//!   the run queues (instance, rank) for the caller ([`GoalRun::take_joins`]), which starts that
//!   rank's host agent; the caller completes it when the rank has the result
//!   ([`GoalRun::innet_done`]). In the critical path it weighs its own span (join to result).
//! - **Verified**: the network checks every message's bytes and fingerprint; the run checks
//!   that every operation completed and every receive got the message the matching rule
//!   names (its sender's operation, by (source, tag, order)).
//!
//! Deterministic: maps are only looked up, never iterated; the engine orders events totally.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;

use reducelab_des::SimTime;
use reducelab_goal::{DepKind, OpId, OpKind, Rank, Trace};
use reducelab_net::Network;
use reducelab_scenario::GoalSpec;

/// What a GOAL run needs of the network it runs on: the packet engine's [`Network`], or the
/// flow backend's executor (`crate::goal_flow`). The run's bookkeeping (dependencies, MPI
/// matching, CPU queues, results) is the same on both.
pub trait GoalNet {
    /// The current time (ps).
    fn now_ps(&self) -> u64;
    /// Starts a message of `bytes` from host `src` to host `dst` now, for traffic `tag`; its
    /// id is what [`GoalRun::on_delivered`] is told when it is delivered.
    fn send_msg(&mut self, src: u32, dst: u32, bytes: u64, tag: u64) -> u32;
    /// Calls back [`GoalRun::on_timer`] with `token` (without [`GOAL_TIMER`] and the traffic
    /// index) at `at_ps`, no earlier than now.
    fn wake_at(&mut self, at_ps: u64, token: u64);
}

impl GoalNet for Network {
    fn now_ps(&self) -> u64 {
        self.now().ps()
    }
    fn send_msg(&mut self, src: u32, dst: u32, bytes: u64, tag: u64) -> u32 {
        self.send(src, dst, bytes, self.now(), tag, None).0
    }
    fn wake_at(&mut self, at_ps: u64, token: u64) {
        self.schedule_timer(SimTime(at_ps), token);
    }
}

/// Timer tokens of GOAL runs: this bit, the traffic index above bit 32, the operation below.
pub const GOAL_TIMER: u64 = 1 << 62;

const UNSET: u64 = u64::MAX;

/// A channel of MPI matching: (source rank, destination rank, tag).
type Channel = (u32, u32, u32);

pub struct GoalRun {
    spec: GoalSpec,
    tag: u64,
    /// Per operation: `requires` predecessors not yet complete, `irequires` ones not yet
    /// started.
    wait_done: Vec<u32>,
    wait_start: Vec<u32>,
    start_ps: Vec<u64>,
    end_ps: Vec<u64>,
    /// The order operations were issued in (MPI's posting order).
    issued: Vec<u32>,
    next_issue: u32,
    /// For a receive: the send it matched.
    matched: Vec<u32>,
    /// Per (rank, cpu): busy until, and the calcs waiting for it.
    cpu_busy_until: Vec<u64>,
    cpu_queue: Vec<VecDeque<u32>>,
    cpus: usize,
    sent: HashMap<Channel, u32>,
    posted: HashMap<Channel, u32>,
    /// Posted receives waiting for their message, by (channel, ordinal).
    waiting: HashMap<(Channel, u32), u32>,
    /// Messages delivered before their receive was posted: the send operation.
    early: HashMap<(Channel, u32), u32>,
    /// Messages in flight: (send operation, channel, ordinal).
    inflight: HashMap<u32, (u32, Channel, u32)>,
    ready: VecDeque<u32>,
    left_of_rank: Vec<u32>,
    rank_end_ps: Vec<u64>,
    ranks_left: u32,
    ops_done: u64,
    messages: u64,
    mismatched: u64,
    started: bool,
    /// Per operation: the in-network instance (its index among the trace's in-network
    /// collectives) it joins, or `NOT_INNET`; empty when the trace has none.
    innet_of_op: Vec<u32>,
    /// `innet_ops[j * ranks + r]`: rank `r`'s operation of in-network instance `j`.
    innet_ops: Vec<u32>,
    /// (instance, rank) reached since the caller last took them.
    joins: Vec<(u32, u32)>,
}

const NOT_INNET: u32 = u32::MAX;

/// One GOAL entry's results.
#[derive(Clone, Debug, serde::Serialize)]
pub struct GoalResult {
    pub file: String,
    pub ranks: u32,
    pub operations: u64,
    pub operations_completed: u64,
    pub messages: u64,
    /// Each rank's end after the entry's start (`None`: it did not finish).
    pub rank_end_ps: Vec<Option<u64>>,
    /// The last rank's end (`None` unless every rank finished).
    pub runtime_ps: Option<u64>,
    pub critical_path_ps: Option<u64>,
    /// Receives whose message was not the one MPI's matching names (must be 0).
    pub mismatched_receives: u64,
    pub verified: bool,
}

impl GoalRun {
    pub fn new(spec: GoalSpec, tag: u64) -> GoalRun {
        let t = &*spec.trace;
        let n = t.num_ops();
        let mut wait_done = vec![0u32; n];
        let mut wait_start = vec![0u32; n];
        for i in 0..n {
            for (s, k) in t.successors(OpId(i as u32)) {
                match k {
                    DepKind::Requires => wait_done[s.index()] += 1,
                    DepKind::Irequires => wait_start[s.index()] += 1,
                }
            }
        }
        let ranks = t.num_ranks() as usize;
        let cpus = t.cpus().max(1);
        let left_of_rank: Vec<u32> = (0..ranks).map(|r| t.ops_of(Rank(r as u32)).len() as u32).collect();
        let ranks_left = left_of_rank.iter().filter(|&&k| k > 0).count() as u32;
        let rank_end_ps = left_of_rank.iter().map(|&k| if k == 0 { 0 } else { UNSET }).collect();
        let innet: Vec<_> = spec.chakra.iter().flat_map(|j| j.collectives.iter().filter(|c| c.in_network)).collect();
        let mut innet_of_op = if innet.is_empty() { Vec::new() } else { vec![NOT_INNET; n] };
        let mut innet_ops = Vec::new();
        for (j, inst) in innet.iter().enumerate() {
            for o in &inst.begin {
                innet_of_op[o.index()] = j as u32;
                innet_ops.push(o.0);
            }
        }
        GoalRun {
            tag,
            wait_done,
            wait_start,
            start_ps: vec![UNSET; n],
            end_ps: vec![UNSET; n],
            issued: vec![u32::MAX; n],
            next_issue: 0,
            matched: vec![u32::MAX; n],
            cpu_busy_until: vec![0; ranks * cpus],
            cpu_queue: vec![VecDeque::new(); ranks * cpus],
            cpus,
            sent: HashMap::new(),
            posted: HashMap::new(),
            waiting: HashMap::new(),
            early: HashMap::new(),
            inflight: HashMap::new(),
            ready: VecDeque::new(),
            left_of_rank,
            rank_end_ps,
            ranks_left,
            ops_done: 0,
            messages: 0,
            mismatched: 0,
            started: false,
            innet_of_op,
            innet_ops,
            joins: Vec::new(),
            spec,
        }
    }

    pub fn trace(&self) -> &Trace {
        &self.spec.trace
    }

    pub fn is_done(&self) -> bool {
        self.ranks_left == 0
    }

    pub fn start_time(&self) -> SimTime {
        self.spec.start
    }

    /// Operations done and in all.
    pub fn progress(&self) -> (u64, u64) {
        (self.ops_done, self.spec.trace.num_ops() as u64)
    }

    /// Starts the trace (at the entry's start: now, or by a timer then).
    pub fn start(&mut self, net: &mut impl GoalNet, ti: usize) {
        if net.now_ps() < self.spec.start.ps() {
            net.wake_at(self.spec.start.ps(), GOAL_TIMER | (ti as u64) << 32 | u32::MAX as u64);
            return;
        }
        self.begin(net);
    }

    fn begin(&mut self, net: &mut impl GoalNet) {
        self.started = true;
        for i in 0..self.spec.trace.num_ops() {
            if self.wait_done[i] == 0 && self.wait_start[i] == 0 {
                self.ready.push_back(i as u32);
            }
        }
        self.drain(net);
    }

    /// A timer of this run (token without [`GOAL_TIMER`] and the traffic index).
    pub fn on_timer(&mut self, net: &mut impl GoalNet, op: u32) {
        if op == u32::MAX {
            return self.begin(net);
        }
        let now = net.now_ps();
        let t = &*self.spec.trace;
        let o = OpId(op);
        let slot = t.rank_of(o).index() * self.cpus + t.op(o).cpu as usize;
        self.complete(op, now);
        // The CPU takes its next calc.
        if let Some(next) = self.cpu_queue[slot].pop_front() {
            self.run_calc(net, next, now);
        }
        self.drain(net);
    }

    /// Starts every ready operation (and what they free in turn).
    fn drain(&mut self, net: &mut impl GoalNet) {
        while let Some(op) = self.ready.pop_front() {
            self.begin_op(net, op);
        }
    }

    fn begin_op(&mut self, net: &mut impl GoalNet, op: u32) {
        let now = net.now_ps();
        let t = Arc::clone(&self.spec.trace);
        let o = OpId(op);
        let me = t.rank_of(o).0;
        let d = t.op(o);
        self.start_ps[op as usize] = now;
        self.issued[op as usize] = self.next_issue;
        self.next_issue += 1;
        for (s, k) in t.successors(o) {
            if k == DepKind::Irequires {
                self.free_start(s.0);
            }
        }
        if let Some(&j) = self.innet_of_op.get(op as usize).filter(|&&j| j != NOT_INNET) {
            self.joins.push((j, me));
            return;
        }
        match d.kind {
            OpKind::Send => {
                let ch = (me, d.peer, d.tag);
                let ord = next_ordinal(&mut self.sent, ch);
                let src = self.spec.hosts[me as usize];
                let dst = self.spec.hosts[d.peer as usize];
                let id = net.send_msg(src, dst, d.size, self.tag);
                self.inflight.insert(id, (op, ch, ord));
                self.messages += 1;
                if d.size <= self.spec.eager_bytes {
                    self.complete(op, now);
                }
            }
            OpKind::Recv => {
                let ch = (d.peer, me, d.tag);
                let ord = next_ordinal(&mut self.posted, ch);
                match self.early.remove(&(ch, ord)) {
                    Some(send) => {
                        self.matched[op as usize] = send;
                        self.complete(op, now);
                    }
                    None => {
                        self.waiting.insert((ch, ord), op);
                    }
                }
            }
            OpKind::Calc => {
                let slot = me as usize * self.cpus + d.cpu as usize;
                if self.cpu_busy_until[slot] > now || !self.cpu_queue[slot].is_empty() {
                    self.cpu_queue[slot].push_back(op);
                } else {
                    self.run_calc(net, op, now);
                }
            }
        }
    }

    /// Runs calc `op` on its (free) CPU from `now`: a calc of no time completes at once.
    fn run_calc(&mut self, net: &mut impl GoalNet, op: u32, now: u64) {
        let t = &*self.spec.trace;
        let o = OpId(op);
        let d = t.op(o);
        let slot = t.rank_of(o).index() * self.cpus + d.cpu as usize;
        let until = now.saturating_add(d.size.saturating_mul(1000));
        self.cpu_busy_until[slot] = until;
        if until == now {
            self.complete(op, now);
            if let Some(next) = self.cpu_queue[slot].pop_front() {
                self.run_calc(net, next, now);
            }
        } else {
            let ti = (self.tag & 0x3FFF_FFFF) << 32;
            net.wake_at(until, GOAL_TIMER | ti | op as u64);
        }
    }

    fn free_start(&mut self, s: u32) {
        self.wait_start[s as usize] -= 1;
        if self.wait_start[s as usize] == 0 && self.wait_done[s as usize] == 0 {
            self.ready.push_back(s);
        }
    }

    fn complete(&mut self, op: u32, now: u64) {
        let t = Arc::clone(&self.spec.trace);
        let o = OpId(op);
        self.end_ps[op as usize] = now;
        self.ops_done += 1;
        for (s, k) in t.successors(o) {
            if k == DepKind::Requires {
                let w = &mut self.wait_done[s.index()];
                *w -= 1;
                if *w == 0 && self.wait_start[s.index()] == 0 {
                    self.ready.push_back(s.0);
                }
            }
        }
        let r = t.rank_of(o).index();
        self.left_of_rank[r] -= 1;
        if self.left_of_rank[r] == 0 {
            self.rank_end_ps[r] = now;
            self.ranks_left -= 1;
        }
    }

    /// Moves the in-network instances ranks have reached since the last call, as (instance,
    /// rank), to `out`.
    pub fn take_joins(&mut self, out: &mut Vec<(u32, u32)>) {
        out.append(&mut self.joins);
    }

    /// Rank `rank` has the result of in-network instance `j`: its operation completes now.
    pub fn innet_done(&mut self, net: &mut impl GoalNet, j: u32, rank: u32) {
        let ranks = self.spec.trace.num_ranks() as usize;
        let op = self.innet_ops[j as usize * ranks + rank as usize];
        self.complete(op, net.now_ps());
        self.drain(net);
    }

    /// A message of this run was delivered. Returns false if it is not one of its messages.
    pub fn on_delivered(&mut self, net: &mut impl GoalNet, msg: u32) -> bool {
        let Some((send, ch, ord)) = self.inflight.remove(&msg) else { return false };
        let now = net.now_ps();
        // The receiver first, then the sender, each with everything its completion frees (as a
        // collective's receiving rank moves on to its next step before its sending one).
        match self.waiting.remove(&(ch, ord)) {
            Some(recv) => {
                self.matched[recv as usize] = send;
                self.complete(recv, now);
                self.drain(net);
            }
            None => {
                self.early.insert((ch, ord), send);
            }
        }
        if self.end_ps[send as usize] == UNSET {
            self.complete(send, now);
            self.drain(net);
        }
        true
    }

    /// Ranks that did not finish: (rank, host, operations left, the first operation not done).
    pub fn unfinished_ranks(&self) -> Vec<(u32, u32, u32, String)> {
        let t = &*self.spec.trace;
        (0..t.num_ranks())
            .filter(|&r| self.left_of_rank[r as usize] > 0)
            .map(|r| {
                let first = t.ops_of(Rank(r)).find(|&i| self.end_ps[i as usize] == UNSET).map(OpId);
                let what = first.map_or(String::new(), |o| {
                    let state = if self.start_ps[o.index()] == UNSET { "not started" } else { "started" };
                    format!("{} ({state})", t.describe(o))
                });
                (r, self.spec.hosts[r as usize], self.left_of_rank[r as usize], what)
            })
            .collect()
    }

    /// What is unfinished, if anything, for a stalled run's reason (this run is `traffic[ti]`).
    pub fn unfinished(&self, ti: usize) -> Option<String> {
        let stuck = self.unfinished_ranks();
        (!stuck.is_empty()).then(|| {
            format!(
                "goal traffic[{ti}] ({}): {} of {} ranks unfinished ({})",
                self.spec.file,
                stuck.len(),
                self.spec.hosts.len(),
                crate::workload::list_some(
                    "rank",
                    stuck.iter().map(|(rank, host, left, op)| format!(
                        "{rank} on host {host} with {left} operations left, at {op}"
                    ))
                )
            )
        })
    }

    pub fn result(&self) -> GoalResult {
        let t = &*self.spec.trace;
        let start = self.spec.start.ps();
        let done = self.is_done();
        // Every receive got the message its (source, tag, order) names: the k-th send on its
        // channel (checked against the trace's own order, independently of the run's maps).
        let mut mismatched = self.mismatched;
        if done {
            let mut sends: HashMap<Channel, Vec<u32>> = HashMap::new();
            let mut recvs: HashMap<Channel, Vec<u32>> = HashMap::new();
            for i in 0..t.num_ops() as u32 {
                let o = OpId(i);
                let d = t.op(o);
                let me = t.rank_of(o).0;
                match d.kind {
                    OpKind::Send => sends.entry((me, d.peer, d.tag)).or_default().push(i),
                    OpKind::Recv => recvs.entry((d.peer, me, d.tag)).or_default().push(i),
                    OpKind::Calc => {}
                }
            }
            // MPI's order is the order operations were posted in.
            for (ch, rs) in recvs.iter_mut() {
                rs.sort_by_key(|&i| self.issued[i as usize]);
                let mut ss = sends.get(ch).cloned().unwrap_or_default();
                ss.sort_by_key(|&i| self.issued[i as usize]);
                for (k, &r) in rs.iter().enumerate() {
                    if ss.get(k) != Some(&self.matched[r as usize]) {
                        mismatched += 1;
                    }
                }
            }
        }
        let rank_end_ps: Vec<Option<u64>> =
            self.rank_end_ps.iter().map(|&e| (e != UNSET).then(|| e.saturating_sub(start))).collect();
        let runtime_ps = done.then(|| rank_end_ps.iter().flatten().copied().max().unwrap_or(0));
        GoalResult {
            file: self.spec.file.clone(),
            ranks: t.num_ranks(),
            operations: t.num_ops() as u64,
            operations_completed: self.ops_done,
            messages: self.messages,
            rank_end_ps,
            runtime_ps,
            critical_path_ps: done.then(|| self.critical_path_ps()),
            mismatched_receives: mismatched,
            verified: done && mismatched == 0,
        }
    }

    /// A `chakra` entry's results (iteration time, exposed communication, per-collective times;
    /// `reducelab_chakra::ChakraJob::results`), once every rank has finished.
    pub fn chakra_results(&self) -> Option<reducelab_chakra::ChakraResults> {
        let job = self.spec.chakra.as_ref()?;
        if !self.is_done() {
            return None;
        }
        let start = self.spec.start.ps();
        let rel = |v: &[u64]| -> Vec<u64> { v.iter().map(|&x| x.saturating_sub(start)).collect() };
        Some(job.results(&rel(&self.rank_end_ps), &rel(&self.start_ps), &rel(&self.end_ps)))
    }

    /// The longest chain of dependencies and messages (module docs), over the completed run.
    fn critical_path_ps(&self) -> u64 {
        let t = &*self.spec.trace;
        let n = t.num_ops();
        // Operations in completion order are a topological order of dependencies and matches.
        let mut order: Vec<u32> = (0..n as u32).collect();
        order.sort_by_key(|&i| (self.end_ps[i as usize], self.start_ps[i as usize], i));
        let mut finish = vec![0u64; n];
        let mut best = 0;
        let mut ready_at = vec![0u64; n];
        for &i in &order {
            let o = OpId(i);
            let d = t.op(o);
            let own = match d.kind {
                _ if self.innet_of_op.get(i as usize).is_some_and(|&j| j != NOT_INNET) => {
                    self.end_ps[i as usize].saturating_sub(self.start_ps[i as usize])
                }
                OpKind::Calc => d.size.saturating_mul(1000),
                _ => 0,
            };
            // When the operation may start: what `irequires` successors wait for (a receive's
            // message below delays its end, not its start).
            let start_at = ready_at[i as usize];
            let mut at = start_at;
            if d.kind == OpKind::Recv {
                let s = self.matched[i as usize];
                if s != u32::MAX {
                    // The message: from its send's start to its delivery (this receive's end
                    // or, if posted later, no later than that).
                    let net = self.end_ps[i as usize].saturating_sub(self.start_ps[s as usize]);
                    let posted_after = self.start_ps[i as usize] > self.end_ps[s as usize].min(self.end_ps[i as usize]);
                    let msg = if posted_after { 0 } else { net };
                    at = at.max(ready_at[s as usize].saturating_add(msg));
                }
            }
            let f = at.saturating_add(own);
            finish[i as usize] = f;
            best = best.max(f);
            for (s, k) in t.successors(o) {
                let edge = match k {
                    DepKind::Requires => f,
                    DepKind::Irequires => start_at,
                };
                let r = &mut ready_at[s.index()];
                *r = (*r).max(edge);
            }
        }
        best
    }

    /// `ops.csv`: every operation's rank, label, kind, start and end after the entry's start.
    pub fn ops_csv(&self) -> Option<String> {
        use std::fmt::Write;
        if !self.spec.record_ops {
            return None;
        }
        let t = &*self.spec.trace;
        let start = self.spec.start.ps();
        let mut out = String::from("rank,label,kind,size,peer,start_ps,end_ps\n");
        for i in 0..t.num_ops() as u32 {
            let o = OpId(i);
            let d = t.op(o);
            let kind = match d.kind {
                OpKind::Send => "send",
                OpKind::Recv => "recv",
                OpKind::Calc => "calc",
            };
            let at = |x: u64| if x == UNSET { String::new() } else { x.saturating_sub(start).to_string() };
            let peer = if d.kind == OpKind::Calc { String::new() } else { d.peer.to_string() };
            let _ = writeln!(
                out,
                "{},{},{kind},{},{peer},{},{}",
                t.rank_of(o).0,
                t.label(o),
                d.size,
                at(self.start_ps[i as usize]),
                at(self.end_ps[i as usize])
            );
        }
        Some(out)
    }
}

fn next_ordinal(m: &mut HashMap<Channel, u32>, ch: Channel) -> u32 {
    let c = m.entry(ch).or_insert(0);
    *c += 1;
    *c - 1
}
