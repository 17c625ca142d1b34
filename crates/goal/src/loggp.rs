//! LogGP(S) simulation of a checked trace, with LogGOPSim's semantics (its `LogGOPSim.cpp`, LogGP
//! network backend, no noise).
//!
//! # The model
//!
//! Each rank has CPUs (`cpu N`) and NICs (`nic N`); each CPU has a next free time `o_free`, each
//! NIC a next free time for sending `gs_free` and for receiving `gr_free`. An operation whose
//! dependencies are satisfied is *issued* when its resources are free; for a message of `s` bytes
//! (`s − 1` below, as in LogGOPSim):
//!
//! - `calc t` at time `T` (once `o_free ≤ T`): the CPU is busy until `T + t`.
//! - `send` at `T` (once `o_free` and `gs_free` ≤ `T`): the CPU is busy until `T + o + (s−1)·O`,
//!   the NIC until `T + g + (s−1)·G`; the message reaches the receiver at `T + o + L`. A message of
//!   at most `S` bytes is *eager*: the send completes when issued. A larger one is *rendezvous*: the
//!   send completes when a receive matches it, and that moment also becomes the earliest free time of
//!   the sender's CPU and NIC.
//! - A message arriving at `T` is taken in when the receiver's CPU and NIC are free (`o_free`,
//!   `gr_free` ≤ `T`; it waits otherwise): the CPU is busy until `T + o + max((s−1)·O, (s−1)·G)`
//!   and the NIC until `T + g + (s−1)·G`. It then completes the first posted matching receive, or
//!   waits in the unexpected queue.
//! - `recv` is posted when its dependencies are satisfied, at the CPU's free time (it takes no CPU
//!   time itself); it completes at once if a matching message is waiting, or when one is taken in.
//!
//! `a irequires b` lets `a` be issued once `b` has been issued; `a requires b` once `b` has
//! completed. An operation freed at some moment is issued no earlier than its CPU's free time
//! (a send: and its NIC's). A rank's end time is the latest free time of its CPUs at the end, as
//! LogGOPSim prints it.
//!
//! Events at the same time run in the order LogGOPSim runs them: the order their operations were
//! freed (or their message sent), with operations freed together ordered by rank, then sends before
//! receives before calcs as LogGOPSim's `std::sort` by kind leaves them (stable up to 16 operations,
//! a fixed permutation past that, reproduced by the crate's `introsort` module), from the order they were freed
//! in (file order for the first ones). That order decides, e.g., which of two sends ready together
//! leaves first; a total order keyed by `(time, insertion sequence)` makes runs deterministic.
//!
//! LogGOPSim's quirks that this reproduces on purpose (they change times only in traces that use
//! several CPUs or NICs): an arriving message occupies the receiver's CPU and NIC with the *sender's*
//! `cpu`/`nic` indices, and a rendezvous completion sets the sender's CPU/NIC of the *receive's*
//! indices when the receive was posted after the message arrived. A `calc` or an eager send
//! completes, for its dependents, when issued: a dependent on another CPU may start before it ends.
//!
//! Where this differs from LogGOPSim: whether a message goes eager or rendezvous is decided by its
//! (the send's) size; LogGOPSim uses the receive's size when the receive is posted after the
//! message arrived, so a receive whose size is on the other side of `S` from its send's leaves
//! the send waiting forever there. A 0-byte message costs like a 1-byte one here (`s − 1`
//! saturates); LogGOPSim's unsigned `s − 1` wraps.
//!
//! # Critical path
//!
//! [`LogGpResult::critical_path_ns`] is the length of the longest chain of dependencies and
//! messages (matched as in this run), each operation costed as above but never waiting for a busy
//! CPU or NIC: a calc costs `t`, a send's dependents may start `o + (s−1)·O` after it starts (a
//! rendezvous send's: also not before its message arrived, `o + L`, nor before its receive was
//! posted), a receive ends when it is posted or `o + L + o + max((s−1)·O, (s−1)·G)` after its send
//! started, whichever is later; `irequires` waits for the start, `requires` for the end. On one CPU
//! and NIC per rank it is a lower bound on the end time; the difference is time spent waiting for
//! `o` and `g`.

use crate::check::CheckedTrace;
use crate::hash::FxHashMap;
use crate::introsort::std_sort;
use crate::trace::{OpId, OpKind, Rank, ANY_SOURCE, ANY_TAG, START_DEP};
use crate::GoalError;
use std::cmp::{Ordering, Reverse};
use std::collections::BinaryHeap;

/// LogGP(S) parameters in LogGOPSim's names and units; [`Default`] is LogGOPSim's defaults.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LogGpParams {
    /// `L`: network latency.
    pub latency_ns: u64,
    /// `o`: CPU overhead per message, at the sender and at the receiver.
    pub overhead_ns: u64,
    /// `g`: gap between messages at one NIC.
    pub gap_ns: u64,
    /// `G`: gap per byte (inverse bandwidth).
    pub gap_per_byte_ns: u64,
    /// `O`: CPU overhead per byte.
    pub overhead_per_byte_ns: u64,
    /// `S`: messages of more bytes than this use rendezvous.
    pub eager_limit_bytes: u64,
}

impl Default for LogGpParams {
    fn default() -> LogGpParams {
        LogGpParams {
            latency_ns: 2500,
            overhead_ns: 1500,
            gap_ns: 1000,
            gap_per_byte_ns: 6,
            overhead_per_byte_ns: 0,
            eager_limit_bytes: 65535,
        }
    }
}

/// Start and end of every operation (indexed by [`OpId`]): start is when it was issued (a receive:
/// posted), end when it completed on its CPU (a calc: start + time; a send: its CPU overhead done,
/// and for rendezvous its receive matched; a receive: its message taken in, or posted if the message
/// was already there).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct OpTimes {
    pub start_ns: Vec<u64>,
    pub end_ns: Vec<u64>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LogGpResult {
    /// Each rank's end time: the latest free time of its CPUs (LogGOPSim's "Host i" lines).
    pub rank_end_ns: Vec<u64>,
    /// Module docs, "Critical path".
    pub critical_path_ns: u64,
    /// Events LogGOPSim would process: issue attempts and message arrivals, each retry of an
    /// operation waiting for a busy CPU or NIC included (those that move in a group count one each).
    pub events: u64,
    pub op_times: Option<OpTimes>,
}

impl LogGpResult {
    /// The latest rank end time and its rank (the lowest such rank, as LogGOPSim reports it).
    pub fn max_end(&self) -> (Rank, u64) {
        let mut best = (Rank(0), 0);
        for (r, &t) in self.rank_end_ns.iter().enumerate() {
            if t > best.1 {
                best = (Rank(r as u32), t);
            }
        }
        best
    }
}

const NIL: u32 = u32::MAX;
/// Marks an event as a message arrival (its `op` is the send).
const MSG: u32 = 1 << 31;
/// Marks an event as a waiting group's token (its `op` is the group, its `rank` the token's
/// number).
const TOKEN: u32 = 1 << 30;

/// Events that found the same resources busy (one signature, [`Sim::signature`]) until the same
/// time, each standing for an event at (wake, its sequence): LogGOPSim re-inserts every one of them
/// at every free time, so a rank with n sends ready at once costs it n²/2 attempts; a group moves
/// in one step where that is exact ([`Sim::wake`]).
struct Group {
    wake: u64,
    /// Number of the group's live token in the heap.
    token: u32,
    /// (sequence, op, rank) of each member; the smallest sequence first.
    members: BinaryHeap<Reverse<(u64, u32, u32)>>,
}

/// An event: an operation to issue, or a message arriving. Ordered by time, then by insertion
/// sequence: an event put back because its CPU or NIC was busy keeps its sequence, as in LogGOPSim,
/// so it keeps its place among events of its new time.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Event {
    time: u64,
    seq: u64,
    /// Operation, or send | [`MSG`] for a message arrival.
    op: u32,
    /// Where it happens: the operation's rank, the message's destination.
    rank: u32,
}

impl Ord for Event {
    fn cmp(&self, other: &Event) -> Ordering {
        // Reversed: BinaryHeap pops the greatest.
        (other.time, other.seq).cmp(&(self.time, self.seq))
    }
}

impl PartialOrd for Event {
    fn partial_cmp(&self, other: &Event) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

#[derive(Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
enum State {
    Waiting,
    Issued,
    Done,
}

/// One FIFO per channel of intrusive links through the operations (an operation waits in at most
/// one queue): no allocation while the simulation runs.
struct Fifos {
    head: Vec<u32>,
    tail: Vec<u32>,
}

impl Fifos {
    fn new(n: usize) -> Fifos {
        Fifos { head: vec![NIL; n], tail: vec![NIL; n] }
    }
    fn push(&mut self, next: &mut [u32], c: u32, op: u32) {
        let c = c as usize;
        next[op as usize] = NIL;
        if self.tail[c] == NIL {
            self.head[c] = op;
        } else {
            next[self.tail[c] as usize] = op;
        }
        self.tail[c] = op;
    }
    fn pop(&mut self, next: &[u32], c: u32) -> u32 {
        let c = c as usize;
        let op = self.head[c];
        self.head[c] = next[op as usize];
        if self.head[c] == NIL {
            self.tail[c] = NIL;
        }
        op
    }
}

struct Sim<'a> {
    ct: &'a CheckedTrace<'a>,
    p: LogGpParams,
    ncpu: usize,
    nnic: usize,
    o_free: Vec<u64>,
    gr_free: Vec<u64>,
    gs_free: Vec<u64>,
    deps_left: Vec<u32>,
    state: Vec<State>,
    /// Critical path: an operation's earliest start (max over what it waits for), then kept as its
    /// start once issued.
    cp_start: Vec<u64>,
    cp_max: u64,
    /// Posted receives and unexpected messages per channel, and the order they were queued in
    /// (to pick the oldest across channels for wildcard matching).
    rq: Fifos,
    uq: Fifos,
    next: Vec<u32>,
    queued_at: Vec<u64>,
    queue_seq: u64,
    heap: BinaryHeap<Event>,
    groups: Vec<Group>,
    group_of: FxHashMap<(u32, u32), u32>,
    grouped: bool,
    seq: u64,
    /// Operations freed by the current event: (rank, kind, order freed, op).
    freed: Vec<(u32, u8, u32, u32)>,
    times: Option<OpTimes>,
    events: u64,
}

fn sat_mul(a: u64, b: u64) -> u64 {
    a.saturating_mul(b)
}

/// Runs the trace (module docs). An error names the first operation, in file order, that never
/// completed (a receive no message matched, a message no receive took, an operation waiting on
/// those), or says that time overflowed 64 bits.
pub fn simulate(ct: &CheckedTrace<'_>, p: &LogGpParams, record_ops: bool) -> Result<LogGpResult, GoalError> {
    run(ct, p, record_ops, true)
}

/// [`simulate`] re-inserting every waiting event on its own, as LogGOPSim does: the reference the
/// grouped retries are tested against.
#[doc(hidden)]
pub fn simulate_ungrouped(ct: &CheckedTrace<'_>, p: &LogGpParams, record_ops: bool) -> Result<LogGpResult, GoalError> {
    run(ct, p, record_ops, false)
}

fn run(ct: &CheckedTrace<'_>, p: &LogGpParams, record_ops: bool, grouped: bool) -> Result<LogGpResult, GoalError> {
    let t = ct.trace;
    let n = t.num_ops();
    let ranks = t.num_ranks() as usize;
    let (ncpu, nnic) = (t.cpus(), t.nics());
    let mut deps_left = vec![0u32; n];
    for &s in &t.succ {
        deps_left[(s & !START_DEP) as usize] += 1;
    }
    let wildcards = ct.channels.wildcard_rank.iter().any(|&w| w);
    let mut sim = Sim {
        ct,
        p: *p,
        ncpu,
        nnic,
        o_free: vec![0; ranks * ncpu],
        gr_free: vec![0; ranks * nnic],
        gs_free: vec![0; ranks * nnic],
        deps_left,
        state: vec![State::Waiting; n],
        cp_start: vec![0; n],
        cp_max: 0,
        rq: Fifos::new(ct.channels.len()),
        uq: Fifos::new(ct.channels.len()),
        next: vec![NIL; n],
        queued_at: if wildcards { vec![0; n] } else { Vec::new() },
        queue_seq: 0,
        heap: BinaryHeap::with_capacity(ranks.max(1024)),
        groups: Vec::new(),
        group_of: FxHashMap::default(),
        grouped,
        seq: 0,
        freed: Vec::new(),
        times: record_ops.then(|| OpTimes { start_ns: vec![0; n], end_ns: vec![0; n] }),
        events: 0,
    };
    sim.run();
    sim.finish()
}

impl Sim<'_> {
    fn cpu(&self, rank: u32, op: u32) -> usize {
        rank as usize * self.ncpu + self.ct.trace.cpu[op as usize] as usize
    }
    fn nic(&self, rank: u32, op: u32) -> usize {
        rank as usize * self.nnic + self.ct.trace.nic[op as usize] as usize
    }

    fn run(&mut self) {
        let t = self.ct.trace;
        // The first operations of each rank, in rank order, all at time 0.
        for r in 0..t.num_ranks() {
            for o in t.ops_of(Rank(r)) {
                if self.deps_left[o as usize] == 0 {
                    self.freed.push((r, t.kind[o as usize] as u8, self.freed.len() as u32, o));
                }
            }
        }
        self.issue_freed();
        while let Some(ev) = self.heap.pop() {
            if ev.op & TOKEN != 0 {
                self.wake(ev);
            } else {
                self.events += 1;
                if let Some(at) = self.attempt(ev) {
                    self.park(ev, at);
                }
            }
            self.issue_freed();
        }
    }

    /// Runs one event; `Some(time)` when its CPU or NIC is busy until then (nothing changed).
    fn attempt(&mut self, ev: Event) -> Option<u64> {
        if ev.op & MSG != 0 {
            return self.arrive(ev);
        }
        match self.ct.trace.kind[ev.op as usize] {
            OpKind::Calc => self.calc(ev),
            OpKind::Send => self.send(ev),
            OpKind::Recv => {
                self.recv(ev);
                None
            }
        }
    }

    /// The resources an event waits for: (rank, CPU index, second resource: none for a calc,
    /// 0x100 | NIC for a send, 0x200 | NIC for an arrival). Events with one signature that fail
    /// at the same moment fail until the same time.
    fn signature(&self, ev: Event) -> (u32, u32) {
        let t = self.ct.trace;
        let op = (ev.op & !MSG) as usize;
        let (cpu, nic) = (t.cpu[op] as u32, t.nic[op] as u32);
        let second = if ev.op & MSG != 0 {
            0x200 | nic
        } else if t.kind[op] == OpKind::Send {
            0x100 | nic
        } else {
            0
        };
        (ev.rank, cpu << 16 | second)
    }

    /// `ev` found its resources busy until `at`: it waits in its signature's group if that group
    /// wakes at `at` (or is empty), else alone in the heap.
    fn park(&mut self, mut ev: Event, at: u64) {
        if !self.grouped {
            ev.time = at;
            return self.heap.push(ev);
        }
        let key = self.signature(ev);
        let groups = &mut self.groups;
        let gid = *self.group_of.entry(key).or_insert_with(|| {
            groups.push(Group { wake: 0, token: 0, members: BinaryHeap::new() });
            groups.len() as u32 - 1
        });
        let g = &mut self.groups[gid as usize];
        let member = Reverse((ev.seq, ev.op, ev.rank));
        if g.members.is_empty() {
            g.wake = at;
            g.members.push(member);
            self.push_token(gid);
        } else if g.wake == at {
            let first = g.members.peek().map_or(u64::MAX, |m| m.0 .0);
            g.members.push(member);
            if ev.seq < first {
                self.push_token(gid);
            }
        } else {
            ev.time = at;
            self.heap.push(ev);
        }
    }

    /// Puts the group's token in the heap at (wake, first member's sequence); older tokens of the
    /// group become stale.
    fn push_token(&mut self, gid: u32) {
        let g = &mut self.groups[gid as usize];
        g.token = g.token.wrapping_add(1);
        let seq = g.members.peek().map_or(0, |m| m.0 .0);
        self.heap.push(Event { time: g.wake, seq, op: gid | TOKEN, rank: g.token });
    }

    /// A group's token: its first member runs as the event it stands for. If that one finds its
    /// resources busy, so do the members that LogGOPSim would pop right after it (no other event
    /// between them, and a failed attempt changes nothing), all until the same time: they move
    /// together. CPU and NIC free times only grow, so nothing else can differ. With one CPU per
    /// rank and that CPU busy, every member moves, whatever comes between.
    fn wake(&mut self, tok: Event) {
        let gid = tok.op & !TOKEN;
        let g = &mut self.groups[gid as usize];
        if g.token != tok.rank || g.members.is_empty() {
            return;
        }
        let Reverse((seq, op, rank)) = g.members.pop().expect("a group with a token has members");
        let now = tok.time;
        self.events += 1;
        let Some(at) = self.attempt(Event { time: now, seq, op, rank }) else {
            if !self.groups[gid as usize].members.is_empty() {
                self.push_token(gid);
            }
            return;
        };
        let next = self.heap.peek().map(|e| (e.time, e.seq));
        // With one CPU per rank, a CPU busy past `now` cannot change before time moves on: every
        // operation and arrival of the rank needs it, and a remote rendezvous completion only raises
        // the rank's free times to `now`. Then no event at `now` can change what the members see.
        let cpu_bound = self.ncpu == 1 && self.o_free[self.cpu(rank, op & !MSG)] > now;
        let g = &mut self.groups[gid as usize];
        if cpu_bound || next.is_none_or(|(t, _)| t > now) {
            self.events += g.members.len() as u64;
            g.members.push(Reverse((seq, op, rank)));
            g.wake = at;
            self.push_token(gid);
            return;
        }
        // Another event at `now` comes between: the members before it move alone.
        let limit = next.map_or(u64::MAX, |(_, s)| s);
        self.heap.push(Event { time: at, seq, op, rank });
        while let Some(&Reverse((s, o, r))) = self.groups[gid as usize].members.peek() {
            if s >= limit {
                break;
            }
            self.groups[gid as usize].members.pop();
            self.events += 1;
            self.heap.push(Event { time: at, seq: s, op: o, rank: r });
        }
        if !self.groups[gid as usize].members.is_empty() {
            self.push_token(gid);
        }
    }

    /// Schedules the operations the last event freed, each at its CPU's (a send: and NIC's) free
    /// time, in LogGOPSim's order (module docs).
    fn issue_freed(&mut self) {
        let mut freed = std::mem::take(&mut self.freed);
        // Per rank, in the order freed; then by kind with libstdc++'s (unstable) std::sort.
        freed.sort_unstable_by_key(|&(r, _, i, _)| (r, i));
        let mut from = 0;
        while from < freed.len() {
            let to = from + freed[from..].iter().take_while(|f| f.0 == freed[from].0).count();
            std_sort(&mut freed[from..to], &|a: &(u32, u8, u32, u32), b: &(u32, u8, u32, u32)| a.1 < b.1);
            from = to;
        }
        for &(r, _, _, op) in &freed {
            let mut time = self.o_free[self.cpu(r, op)];
            if self.ct.trace.kind[op as usize] == OpKind::Send {
                time = time.max(self.gs_free[self.nic(r, op)]);
            }
            self.heap.push(Event { time, seq: self.seq, op, rank: r });
            self.seq += 1;
        }
        freed.clear();
        self.freed = freed;
    }

    fn free_successors(&mut self, op: u32, rank: u32, irequires: bool, cp: u64) {
        let t = self.ct.trace;
        let row = &t.succ[t.succ_start[op as usize] as usize..t.succ_start[op as usize + 1] as usize];
        for &s in row {
            if (s & START_DEP != 0) != irequires {
                continue;
            }
            let s = s & !START_DEP;
            let c = &mut self.cp_start[s as usize];
            *c = (*c).max(cp);
            let d = &mut self.deps_left[s as usize];
            *d -= 1;
            if *d == 0 {
                self.freed.push((rank, t.kind[s as usize] as u8, self.freed.len() as u32, s));
            }
        }
    }

    fn started(&mut self, op: u32, rank: u32, now: u64) {
        self.state[op as usize] = State::Issued;
        if let Some(tm) = &mut self.times {
            tm.start_ns[op as usize] = now;
        }
        self.free_successors(op, rank, true, self.cp_start[op as usize]);
    }

    fn done(&mut self, op: u32, rank: u32, end: u64, cp_end: u64) {
        self.state[op as usize] = State::Done;
        if let Some(tm) = &mut self.times {
            tm.end_ns[op as usize] = end;
        }
        self.cp_max = self.cp_max.max(cp_end);
        self.free_successors(op, rank, false, cp_end);
    }

    fn calc(&mut self, ev: Event) -> Option<u64> {
        let (op, r, now) = (ev.op, ev.rank, ev.time);
        let c = self.cpu(r, op);
        if self.o_free[c] > now {
            return Some(self.o_free[c]);
        }
        let len = self.ct.trace.size[op as usize];
        let end = now.saturating_add(len);
        self.o_free[c] = end;
        self.started(op, r, now);
        let cp = self.cp_start[op as usize].saturating_add(len);
        self.done(op, r, end, cp);
        None
    }

    fn send_cpu_ns(&self, size: u64) -> u64 {
        self.p.overhead_ns.saturating_add(sat_mul(size.saturating_sub(1), self.p.overhead_per_byte_ns))
    }

    /// Receiver CPU time to take a message in: `o + max((s−1)·O, (s−1)·G)`.
    fn recv_cpu_ns(&self, size: u64) -> u64 {
        let s1 = size.saturating_sub(1);
        self.p
            .overhead_ns
            .saturating_add(sat_mul(s1, self.p.overhead_per_byte_ns).max(sat_mul(s1, self.p.gap_per_byte_ns)))
    }

    fn send(&mut self, ev: Event) -> Option<u64> {
        let (op, r, now) = (ev.op, ev.rank, ev.time);
        let (c, n) = (self.cpu(r, op), self.nic(r, op));
        let free = self.o_free[c].max(self.gs_free[n]);
        if free > now {
            return Some(free);
        }
        let t = self.ct.trace;
        let size = t.size[op as usize];
        self.started(op, r, now);
        let cpu_end = now.saturating_add(self.send_cpu_ns(size));
        self.o_free[c] = cpu_end;
        self.gs_free[n] =
            now.saturating_add(self.p.gap_ns).saturating_add(sat_mul(size.saturating_sub(1), self.p.gap_per_byte_ns));
        let arrival = now.saturating_add(self.p.overhead_ns).saturating_add(self.p.latency_ns);
        self.heap.push(Event { time: arrival, seq: self.seq, op: op | MSG, rank: t.peer[op as usize] });
        self.seq += 1;
        if size <= self.p.eager_limit_bytes {
            let cp = self.cp_start[op as usize].saturating_add(self.send_cpu_ns(size));
            self.done(op, r, cpu_end, cp);
        }
        None
    }

    /// The oldest queued entry at the head of one of these channels.
    fn oldest(&self, fifos: &Fifos, channels: impl Iterator<Item = u32>) -> Option<u32> {
        let mut best: Option<(u64, u32)> = None;
        for c in channels {
            let h = fifos.head[c as usize];
            if h != NIL {
                let at = self.queued_at[h as usize];
                if best.is_none_or(|(b, _)| at < b) {
                    best = Some((at, c));
                }
            }
        }
        best.map(|(_, c)| c)
    }

    fn enqueue(&mut self, which_uq: bool, c: u32, op: u32) {
        if !self.queued_at.is_empty() {
            self.queued_at[op as usize] = self.queue_seq;
            self.queue_seq += 1;
        }
        let fifos = if which_uq { &mut self.uq } else { &mut self.rq };
        fifos.push(&mut self.next, c, op);
    }

    /// Critical-path end of a receive of `send`'s message, and of a rendezvous `send`.
    fn cp_recv_end(&self, send: u32, recv: u32) -> u64 {
        let size = self.ct.trace.size[send as usize];
        let taken_in = self.cp_start[send as usize]
            .saturating_add(self.p.overhead_ns)
            .saturating_add(self.p.latency_ns)
            .saturating_add(self.recv_cpu_ns(size));
        taken_in.max(self.cp_start[recv as usize])
    }

    fn cp_rendezvous_send_end(&self, send: u32, recv: u32) -> u64 {
        let s = self.cp_start[send as usize];
        let size = self.ct.trace.size[send as usize];
        s.saturating_add(self.send_cpu_ns(size))
            .max(s.saturating_add(self.p.overhead_ns).saturating_add(self.p.latency_ns))
            .max(self.cp_start[recv as usize])
    }

    /// A rendezvous `send` (of rank `sender`) completes: its receive `recv` matched it at `now`,
    /// which becomes the earliest free time of the sender's CPU and NIC with `indices_of`'s indices.
    fn rendezvous_done(&mut self, send: u32, sender: u32, recv: u32, indices_of: u32, now: u64) {
        let (sc, sn) = (self.cpu(sender, indices_of), self.nic(sender, indices_of));
        self.o_free[sc] = self.o_free[sc].max(now);
        self.gs_free[sn] = self.gs_free[sn].max(now);
        let cp = self.cp_rendezvous_send_end(send, recv);
        let cpu_end = self.times.as_ref().map_or(0, |tm| {
            tm.start_ns[send as usize].saturating_add(self.send_cpu_ns(self.ct.trace.size[send as usize]))
        });
        self.done(send, sender, now.max(cpu_end), cp);
    }

    fn recv(&mut self, ev: Event) {
        let (op, r, now) = (ev.op, ev.rank, ev.time);
        let t = self.ct.trace;
        let ch = &self.ct.channels;
        self.started(op, r, now);
        let own = ch.of_op[op as usize];
        let (_, src, tag) = ch.keys[own as usize];
        let found = if src != ANY_SOURCE && tag != ANY_TAG {
            Some(own).filter(|&c| self.uq.head[c as usize] != NIL)
        } else {
            // A wildcard receive takes the oldest unexpected message it matches.
            let cands = ch.of_rank(r).filter(|&c| {
                let (_, s, g) = ch.keys[c as usize];
                s != ANY_SOURCE && g != ANY_TAG && (src == ANY_SOURCE || s == src) && (tag == ANY_TAG || g == tag)
            });
            self.oldest(&self.uq, cands)
        };
        let Some(c) = found else {
            return self.enqueue(false, own, op);
        };
        let send = self.uq.pop(&self.next, c);
        let size = t.size[send as usize];
        if size > self.p.eager_limit_bytes {
            // The receive's cpu/nic indices on the sender (LogGOPSim's).
            self.rendezvous_done(send, ch.keys[c as usize].1, op, op, now);
        }
        let cp = self.cp_recv_end(send, op);
        self.done(op, r, now, cp);
    }

    fn arrive(&mut self, ev: Event) -> Option<u64> {
        let (send, r, now) = (ev.op & !MSG, ev.rank, ev.time);
        let t = self.ct.trace;
        // The receiver's CPU and NIC with the send's indices (LogGOPSim's).
        let (c, n) = (self.cpu(r, send), self.nic(r, send));
        let free = self.o_free[c].max(self.gr_free[n]);
        if free > now {
            return Some(free);
        }
        let size = t.size[send as usize];
        let taken_in = now.saturating_add(self.recv_cpu_ns(size));
        self.o_free[c] = taken_in;
        self.gr_free[n] =
            now.saturating_add(self.p.gap_ns).saturating_add(sat_mul(size.saturating_sub(1), self.p.gap_per_byte_ns));
        let ch = &self.ct.channels;
        let own = ch.of_op[send as usize];
        let (_, src, tag) = ch.keys[own as usize];
        let found = if !ch.wildcard_rank[r as usize] {
            Some(own).filter(|&c| self.rq.head[c as usize] != NIL)
        } else {
            let cands = [(src, tag), (ANY_SOURCE, tag), (src, ANY_TAG), (ANY_SOURCE, ANY_TAG)]
                .into_iter()
                .filter_map(|(s, g)| ch.find((r, s, g)));
            self.oldest(&self.rq, cands)
        };
        let Some(c) = found else {
            self.enqueue(true, own, send);
            return None;
        };
        let recv = self.rq.pop(&self.next, c);
        if size > self.p.eager_limit_bytes {
            self.rendezvous_done(send, src, recv, send, now);
        }
        let cp = self.cp_recv_end(send, recv);
        self.done(recv, r, taken_in, cp);
        None
    }

    fn finish(self) -> Result<LogGpResult, GoalError> {
        let t = self.ct.trace;
        let stuck = self.state.iter().filter(|&&s| s != State::Done).count();
        let unreceived = (0..self.ct.channels.len()).filter(|&c| self.uq.head[c] != NIL).count();
        if stuck > 0 || unreceived > 0 {
            // The first operation in file order that did not complete, or whose message no receive took.
            let mut in_uq = vec![false; t.num_ops()];
            for c in 0..self.ct.channels.len() {
                let mut m = self.uq.head[c];
                while m != NIL {
                    in_uq[m as usize] = true;
                    m = self.next[m as usize];
                }
            }
            let bad = |i: usize| self.state[i] != State::Done || in_uq[i];
            let first = (0..t.num_ops()).find(|&i| bad(i)).unwrap_or(0);
            let others = (0..t.num_ops()).filter(|&i| bad(i)).count() - 1;
            let op = OpId(first as u32);
            let o = t.op(op);
            let what = match (o.kind, self.state[first], in_uq[first]) {
                (OpKind::Send, _, true) => format!("to {} tag {}: its message was never received", o.peer, o.tag),
                (OpKind::Recv, State::Issued, _) => format!(
                    "from {} tag {}: posted, but no message ever matched it",
                    if o.peer == ANY_SOURCE { "-1".to_string() } else { o.peer.to_string() },
                    if o.tag == ANY_TAG { "-1".to_string() } else { o.tag.to_string() }
                ),
                _ => "never started: it waits for an operation that never completed".to_string(),
            };
            let tail = if others > 0 {
                format!(" ({others} more operations never completed: a deadlock across ranks?)")
            } else {
                String::new()
            };
            return Err(GoalError::new(t.line(op), format!("{} {what}{tail}", t.describe(op))));
        }
        let ranks = t.num_ranks() as usize;
        let rank_end_ns: Vec<u64> = (0..ranks)
            .map(|r| self.o_free[r * self.ncpu..(r + 1) * self.ncpu].iter().copied().max().unwrap_or(0))
            .collect();
        if rank_end_ns.contains(&u64::MAX) || self.cp_max == u64::MAX {
            return Err(GoalError::new(
                0,
                "simulated time overflows 64 bits of nanoseconds (sizes × G or calc times too large)",
            ));
        }
        Ok(LogGpResult { rank_end_ns, critical_path_ns: self.cp_max, events: self.events, op_times: self.times })
    }
}
