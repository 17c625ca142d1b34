//! Property test of the shared-pool protocols (SwitchML, ATP, DSA and DSA's two strawmen),
//! driving the sans-I/O switch program, the parameter servers and a minimal test-only worker
//! model on a star: every host talks through the one switch over links with random delays
//! (so arrivals interleave at random across hosts), random loss, duplication (a copy may
//! linger up to ten retransmission timeouts) and reordering (a packet may overtake its link's
//! earlier ones), several jobs on a small pool (many collisions), and retransmission timeouts
//! short enough to make spurious retransmissions common. Each case runs until no event is left
//! and asserts:
//! - every worker of every job has every PSN's result, each equal to the exact sum of all
//!   workers' contributions (fingerprint and values: no loss, no double count), and every copy
//!   of a result it received was that sum;
//! - no parameter-server entry is left, and every aggregator still held is explained, then
//!   freed by the jobs' teardown: SwitchML's kept results; ATP's late copies of tasks every
//!   worker already has (counted, `held_at_end`); DSA's the same, after the collisions §V relies
//!   on have reclaimed them (`sweep_dsa`);
//! - no value slot is leaked.
//!
//! `REDUCELAB_POOL_CASES=N` runs more cases (default 100 per protocol), `REDUCELAB_POOL_SEED=S`
//! another seed.

use std::collections::BTreeMap;

use reducelab_ina::atp::AtpSwitch;
use reducelab_ina::dsa::{DsaSwitch, REMINDER_AFTER_RETRANSMISSIONS};
use reducelab_ina::policy::Preemption;
use reducelab_ina::pool::{
    full_bitmap, gradient, hash_index, AggPacket, Dest, PacketKind, PoolAction, PoolProgram, PsAction, Task,
};
use reducelab_ina::ps::{AtpPs, DsaPs};
use reducelab_ina::switchml::{even_regions, SwitchMlSwitch};
use reducelab_ina::{contribution_fp, contribution_value, Values};

const ELEMS: usize = 3;
const SALT: u64 = 0x5EED;

mod common;
use common::Rng;

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Node {
    Switch,
    Ps(u16),
    Worker(u16, u16),
}

#[derive(Clone, Copy, Debug)]
enum Ev {
    Deliver { to: Node, from: Node, pkt: AggPacket },
    WorkerTimer { job: u16, rank: u16, psn: u32, gen: u32 },
    PsTimer { job: u16, token: u64 },
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum Proto {
    SwitchMl,
    Atp,
    Dsa(Preemption),
}

enum Sw {
    Ml(SwitchMlSwitch),
    Atp(AtpSwitch),
    Dsa(DsaSwitch),
}

impl Sw {
    fn prog(&mut self) -> &mut dyn PoolProgram {
        match self {
            Sw::Ml(s) => s,
            Sw::Atp(s) => s,
            Sw::Dsa(s) => s,
        }
    }
}

enum Ps {
    Atp(AtpPs),
    Dsa(DsaPs),
}

/// The test-only worker: a window of PSNs, a retransmission timer per unacknowledged PSN, ATP's
/// resend flag, DSA's reminder notice after three retransmissions and its answers to fetches.
struct Worker {
    job: u16,
    rank: u16,
    workers: u16,
    priority: u32,
    next: u32,
    window: u32,
    acked: Vec<bool>,
    base: u32,
    retx: BTreeMap<u32, (u32, u32)>,
}

struct Case {
    proto: Proto,
    rng: Rng,
    now: u64,
    seq: u64,
    queue: BTreeMap<(u64, u64), Ev>,
    link_last: BTreeMap<(Node, Node), u64>,
    loss: f64,
    /// Chance that a link delivers a packet twice (a copy on its own random delay).
    dup: f64,
    /// Chance that a packet ignores its link's order (it may overtake earlier packets).
    reorder: f64,
    delay_ps: u64,
    jitter_ps: u64,
    rto_ps: u64,
    psns: u32,
    sw: Sw,
    ps: BTreeMap<u16, Ps>,
    workers: BTreeMap<(u16, u16), Worker>,
    ports: BTreeMap<Node, u16>,
    vals: Values,
    expected_fp: BTreeMap<(u16, u32), u64>,
    expected_values: BTreeMap<(u16, u32), Vec<i32>>,
    /// Results received, checked on arrival.
    results: u64,
    sent: u64,
    duplicated: u64,
    reordered: u64,
    /// ATP/DSA aggregators held at the jobs' end by late copies of completed tasks.
    held_at_end: u64,
}

impl Case {
    fn new(proto: Proto, seed: u64) -> Case {
        let mut rng = Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1);
        let jobs = 1 + rng.below(3) as u16;
        let pool = match proto {
            Proto::SwitchMl => 2 * jobs as u32 * (1 + rng.below(4) as u32),
            _ => 1 + rng.below(12) as u32,
        };
        let psns = 8 + rng.below(40) as u32;
        let loss = [0.0, 0.02, 0.1][rng.below(3) as usize];
        let dup = [0.0, 0.0, 0.02, 0.1][rng.below(4) as usize];
        let reorder = [0.0, 0.0, 0.1, 0.5][rng.below(4) as usize];
        let delay_ps = 1_000_000;
        let jitter_ps = 1 + rng.below(4_000_000);
        let rto_ps = 2 * delay_ps + rng.below(6 * delay_ps);
        let floor_ps = 2 * delay_ps + rng.below(20 * delay_ps);
        let job_list: Vec<(u16, u16)> = (0..jobs).map(|j| (10 + j, 1 + rng.below(6) as u16)).collect();
        let (sw, window_of): (Sw, Box<dyn Fn(u16) -> u32>) = match proto {
            Proto::SwitchMl => {
                let regions = even_regions(pool, &job_list).unwrap();
                let slots: BTreeMap<u16, u32> = regions.iter().map(|r| (r.job, r.slots)).collect();
                (Sw::Ml(SwitchMlSwitch::new(pool, &regions).unwrap()), Box::new(move |j| slots[&j]))
            }
            Proto::Atp => (Sw::Atp(AtpSwitch::new(pool).unwrap()), Box::new(|_| 1)),
            Proto::Dsa(rule) => (Sw::Dsa(DsaSwitch::new(pool, rule).unwrap()), Box::new(|_| 1)),
        };
        let stat_window = 1 + rng.below(8) as u32;
        let mut ps = BTreeMap::new();
        let mut workers = BTreeMap::new();
        let mut ports = BTreeMap::new();
        let mut expected_fp = BTreeMap::new();
        let mut expected_values = BTreeMap::new();
        for &(job, n) in &job_list {
            match proto {
                Proto::SwitchMl => {}
                Proto::Atp => {
                    ps.insert(job, Ps::Atp(AtpPs::new(job, n).unwrap()));
                }
                Proto::Dsa(_) => {
                    ps.insert(job, Ps::Dsa(DsaPs::new(job, n, floor_ps).unwrap()));
                }
            }
            ports.insert(Node::Ps(job), ports.len() as u16);
            let priority = 1 + rng.below(1000) as u32;
            let window = if proto == Proto::SwitchMl { window_of(job) } else { stat_window };
            for r in 0..n {
                ports.insert(Node::Worker(job, r), ports.len() as u16);
                workers.insert(
                    (job, r),
                    Worker {
                        job,
                        rank: r,
                        workers: n,
                        priority,
                        next: 0,
                        window,
                        acked: vec![false; psns as usize],
                        base: 0,
                        retx: BTreeMap::new(),
                    },
                );
            }
            for p in 0..psns {
                expected_fp.insert(
                    (job, p),
                    (0..n).fold(0u64, |a, r| a.wrapping_add(contribution_fp(SALT, job, r as u32, p))),
                );
                let v: Vec<i32> = (0..ELEMS)
                    .map(|e| {
                        (0..n).fold(0i32, |a, r| a.wrapping_add(contribution_value(SALT, job, r as u32, p, e as u32)))
                    })
                    .collect();
                expected_values.insert((job, p), v);
            }
        }
        Case {
            proto,
            rng,
            now: 0,
            seq: 0,
            queue: BTreeMap::new(),
            link_last: BTreeMap::new(),
            loss,
            dup,
            reorder,
            delay_ps,
            jitter_ps,
            rto_ps,
            psns,
            sw,
            ps,
            workers,
            ports,
            vals: Values::new(ELEMS),
            expected_fp,
            expected_values,
            results: 0,
            sent: 0,
            duplicated: 0,
            reordered: 0,
            held_at_end: 0,
        }
    }

    fn describe(&self) -> String {
        let jobs: Vec<String> = self.ps.keys().map(|j| format!("{j}")).collect();
        format!(
            "{:?}: {} workers in jobs [{}], {} PSNs, pool {}, loss {}, duplication {}, reordering {}, jitter {} ps, rto {} ps",
            self.proto,
            self.workers.len(),
            jobs.join(", "),
            self.psns,
            self.sw_pool_len(),
            self.loss,
            self.dup,
            self.reorder,
            self.jitter_ps,
            self.rto_ps
        )
    }

    fn sw_pool_len(&self) -> u32 {
        match &self.sw {
            Sw::Ml(s) => s.pool().len(),
            Sw::Atp(s) => s.pool().len(),
            Sw::Dsa(s) => s.pool().len(),
        }
    }

    fn push(&mut self, at: u64, ev: Ev) {
        self.seq += 1;
        self.queue.insert((at, self.seq), ev);
    }

    /// One packet on the FIFO link `from → to`: lost, or delivered after a random delay but
    /// never before the link's previous packet.
    fn send(&mut self, from: Node, to: Node, pkt: AggPacket) {
        self.sent += 1;
        if self.rng.chance(self.dup) {
            // The copy may linger far longer (a path through a deep queue, a retried frame):
            // up to ten retransmission timeouts, long after its task may have completed.
            self.duplicated += 1;
            let copy = pkt.copy(&mut self.vals);
            let late = self.rng.below(10 * self.rto_ps);
            self.transmit(from, to, copy, late);
        }
        self.transmit(from, to, pkt, 0);
    }

    /// One copy of a packet on the link `from → to`: lost, or delivered after a random delay
    /// (plus `extra`), after the link's previous packet unless this one is reordered.
    fn transmit(&mut self, from: Node, to: Node, pkt: AggPacket, extra: u64) {
        if self.rng.chance(self.loss) {
            self.vals.release(pkt.data);
            return;
        }
        let d = self.delay_ps + self.rng.below(self.jitter_ps) + extra;
        let at = if extra > 0 || self.rng.chance(self.reorder) {
            self.reordered += 1;
            self.now + d
        } else {
            let last = self.link_last.get(&(from, to)).copied().unwrap_or(0);
            let at = (self.now + d).max(last + 1);
            self.link_last.insert((from, to), at);
            at
        };
        self.push(at, Ev::Deliver { to, from, pkt });
    }

    fn gradient(&mut self, job: u16, rank: u16, psn: u32, dst: Dest) -> AggPacket {
        let w = &self.workers[&(job, rank)];
        let (n, priority) = (w.workers, w.priority);
        let mut p = gradient(SALT, job, rank, psn, n, ELEMS as u16, dst, &mut self.vals);
        p.priority = priority;
        p
    }

    fn worker_pump(&mut self, job: u16, rank: u16) {
        loop {
            let w = &self.workers[&(job, rank)];
            let psn = w.next;
            if psn >= self.psns || psn >= w.base + w.window {
                return;
            }
            self.workers.get_mut(&(job, rank)).unwrap().next += 1;
            let g = self.gradient(job, rank, psn, Dest::Switch);
            self.send(Node::Worker(job, rank), Node::Switch, g);
            self.arm(job, rank, psn, 0);
        }
    }

    fn arm(&mut self, job: u16, rank: u16, psn: u32, count: u32) {
        let w = self.workers.get_mut(&(job, rank)).unwrap();
        let gen = w.retx.get(&psn).map_or(0, |x| x.1) + 1;
        w.retx.insert(psn, (count, gen));
        let at = self.now + self.rto_ps;
        self.push(at, Ev::WorkerTimer { job, rank, psn, gen });
    }

    fn worker_timer(&mut self, job: u16, rank: u16, psn: u32, gen: u32) {
        let Some(&(count, g)) = self.workers[&(job, rank)].retx.get(&psn) else { return };
        if g != gen {
            return;
        }
        let count = count + 1;
        let mut p = self.gradient(job, rank, psn, Dest::Switch);
        if self.proto == Proto::Atp {
            p.resend = true;
        }
        self.send(Node::Worker(job, rank), Node::Switch, p);
        if matches!(self.proto, Proto::Dsa(_)) && count >= REMINDER_AFTER_RETRANSMISSIONS {
            let mut n = AggPacket::new(PacketKind::ReminderNotice, Dest::Ps, job, psn, p.workers);
            n.bitmap = 1 << rank;
            self.send(Node::Worker(job, rank), Node::Switch, n);
        }
        self.arm(job, rank, psn, count);
    }

    fn at_worker(&mut self, job: u16, rank: u16, pkt: AggPacket) {
        match pkt.kind {
            PacketKind::Ack => {
                assert_eq!(
                    pkt.fp,
                    self.expected_fp[&(job, pkt.psn)],
                    "{}: job {job} rank {rank} PSN {} has a wrong fingerprint",
                    self.describe(),
                    pkt.psn
                );
                assert_eq!(
                    self.vals.get(pkt.data),
                    &self.expected_values[&(job, pkt.psn)][..],
                    "{}: job {job} PSN {} values",
                    self.describe(),
                    pkt.psn
                );
                assert_eq!(pkt.bitmap, full_bitmap(pkt.workers));
                self.vals.release(pkt.data);
                self.results += 1;
                let w = self.workers.get_mut(&(job, rank)).unwrap();
                if !w.acked[pkt.psn as usize] {
                    w.acked[pkt.psn as usize] = true;
                    w.retx.remove(&pkt.psn);
                    while (w.base as usize) < w.acked.len() && w.acked[w.base as usize] {
                        w.base += 1;
                    }
                    self.worker_pump(job, rank);
                }
            }
            PacketKind::Fetch => {
                self.vals.release(pkt.data);
                if pkt.psn < self.workers[&(job, rank)].next {
                    let g = self.gradient(job, rank, pkt.psn, Dest::Ps);
                    self.send(Node::Worker(job, rank), Node::Switch, g);
                }
            }
            other => panic!("{}: a worker got a {other:?}", self.describe()),
        }
    }

    fn at_switch(&mut self, from: Node, pkt: AggPacket) {
        let mut out = Vec::new();
        let port = self.ports[&from];
        self.sw.prog().on_packet(self.now, port, pkt, &mut self.vals, &mut out);
        assert!(matches!(out.first(), Some(PoolAction::Consume | PoolAction::Forward(_))), "{out:?}");
        assert_eq!(out.iter().filter(|a| matches!(a, PoolAction::Consume | PoolAction::Forward(_))).count(), 1);
        for a in out {
            let p = match a {
                PoolAction::Consume => continue,
                PoolAction::Forward(p) | PoolAction::Emit(p) => p,
            };
            match p.dst {
                Dest::Ps => self.send(Node::Switch, Node::Ps(p.job), p),
                Dest::Worker(r) => self.send(Node::Switch, Node::Worker(p.job, r), p),
                Dest::Workers => {
                    for r in 0..p.workers {
                        let c = p.copy(&mut self.vals);
                        self.send(Node::Switch, Node::Worker(p.job, r), c);
                    }
                    self.vals.release(p.data);
                }
                Dest::Switch => panic!("the switch sent {p:?} to itself"),
            }
        }
    }

    fn ps_actions(&mut self, job: u16, acts: Vec<PsAction>) {
        for a in acts {
            match a {
                PsAction::Send(p) => self.send(Node::Ps(job), Node::Switch, p),
                PsAction::Timer { at, token } => self.push(at, Ev::PsTimer { job, token }),
            }
        }
    }

    fn at_ps(&mut self, job: u16, pkt: AggPacket) {
        let mut acts = Vec::new();
        match self.ps.get_mut(&job).unwrap() {
            Ps::Atp(ps) => ps.on_packet(self.now, pkt, &mut self.vals, &mut acts),
            Ps::Dsa(ps) => ps.on_packet(self.now, pkt, &mut self.vals, &mut acts),
        }
        self.ps_actions(job, acts);
    }

    fn run(&mut self) {
        let keys: Vec<(u16, u16)> = self.workers.keys().copied().collect();
        for (j, r) in keys {
            self.worker_pump(j, r);
        }
        let mut events = 0u64;
        while let Some(((at, _), ev)) = self.queue.pop_first() {
            self.now = at;
            events += 1;
            assert!(events < 3_000_000, "{}: no end after {events} events (a livelock)", self.describe());
            match ev {
                Ev::Deliver { to: Node::Switch, from, pkt } => self.at_switch(from, pkt),
                Ev::Deliver { to: Node::Ps(j), pkt, .. } => self.at_ps(j, pkt),
                Ev::Deliver { to: Node::Worker(j, r), pkt, .. } => self.at_worker(j, r, pkt),
                Ev::WorkerTimer { job, rank, psn, gen } => self.worker_timer(job, rank, psn, gen),
                Ev::PsTimer { job, token } => {
                    let mut acts = Vec::new();
                    if let Some(Ps::Dsa(ps)) = self.ps.get_mut(&job) {
                        ps.on_timer(self.now, token, &mut acts);
                    }
                    self.ps_actions(job, acts);
                }
            }
        }
    }

    /// What §V relies on to reclaim an aggregator a late retransmission reserved after its
    /// task completed (the "memory leak" of §IV-A): later colliding packets, each halving the
    /// holder's priority until one wins and evicts it to the PS, which drops it as complete.
    /// Here the later traffic is a one-worker probe job of priority 1 aimed at each leaked
    /// aggregator; its own packets complete at once on the switch.
    fn sweep_dsa(&mut self) -> u32 {
        let Sw::Dsa(s) = &self.sw else { return 0 };
        let leaked: Vec<u32> = s.pool().used().collect();
        let n = s.pool().len();
        let mut probes = 0;
        for i in leaked {
            let Sw::Dsa(s) = &self.sw else { unreachable!() };
            let t = s.pool().get(i).task.unwrap();
            assert!(
                self.workers.values().filter(|w| w.job == t.job).all(|w| w.acked[t.psn as usize]),
                "{}: aggregator {i} holds {t:?}, not complete",
                self.describe()
            );
            let mut psn = 0u32;
            loop {
                let Sw::Dsa(s) = &self.sw else { unreachable!() };
                if s.pool().get(i).task.is_none() {
                    break;
                }
                while hash_index(Task { job: 999, psn }, n) != i {
                    psn += 1;
                }
                let mut p = AggPacket::new(PacketKind::Gradient, Dest::Switch, 999, psn, 1);
                (p.bitmap, p.priority) = (1, 1);
                psn += 1;
                probes += 1;
                assert!(probes < 10_000);
                let mut out = Vec::new();
                let Sw::Dsa(s) = &mut self.sw else { unreachable!() };
                s.on_packet(self.now, 0, p, &mut self.vals, &mut out);
                for a in out {
                    if let PoolAction::Forward(q) | PoolAction::Emit(q) = a {
                        if q.job == 999 {
                            self.vals.release(q.data);
                        } else {
                            self.at_ps(q.job, q); // the evicted partial
                        }
                    }
                }
            }
        }
        probes
    }

    fn check_end(&mut self) {
        // An evicted leftover of a task the switch completed is news to the PS (it never saw
        // the task): it opens an entry, whose reminder completes the task again. Run that out.
        for round in 0.. {
            assert!(round < 5, "{}: sweeping does not end", self.describe());
            if self.sweep_dsa() == 0 {
                break;
            }
            self.run();
        }
        for w in self.workers.values() {
            assert!(w.acked.iter().all(|&a| a), "{}: job {} rank {} lacks PSNs", self.describe(), w.job, w.rank);
        }
        let what = self.describe();
        for (j, ps) in &self.ps {
            let dict = match ps {
                Ps::Atp(p) => &p.dict,
                Ps::Dsa(p) => &p.dict,
            };
            assert_eq!(dict.pending().count(), 0, "{what}: job {j}'s PS has entries left");
        }
        // Every aggregator still held at the jobs' end is explained, then freed by the control
        // plane's teardown (as the simulator does at a job's end). SwitchML keeps each slot's
        // last result (its shadow copy, for retransmissions). ATP and DSA can only hold a late
        // copy of a task every worker already has: a duplicate or an overtaken original that
        // reached the switch after the task's ACK had freed its aggregator and reserved it
        // again (the switch cannot tell it is late; DSA's collisions reclaim such aggregators,
        // `sweep_dsa`, ATP's only through a resend of the same task or the teardown).
        let held = self.sw.prog().pool();
        let pool: Vec<_> = held.used().map(|i| *held.get(i)).collect();
        for a in &pool {
            let t = a.task.unwrap();
            if let Sw::Ml(_) = self.sw {
                assert!(a.complete, "{what}: a SwitchML aggregator holds a partial {a:?}");
                continue;
            }
            assert!(
                self.workers.values().filter(|w| w.job == t.job).all(|w| w.acked[t.psn as usize]),
                "{what}: an aggregator holds {t:?}, which some worker still lacks: {a:?}"
            );
            assert!(a.bitmap != 0 && a.bitmap & !full_bitmap(a.workers) == 0, "{what}: {a:?}");
            self.held_at_end += 1;
        }
        let jobs: Vec<u16> = self.workers.values().map(|w| w.job).collect();
        let mut released = 0;
        for j in jobs {
            released += self.sw.prog().pool_mut().release_job(self.now, j, &mut self.vals);
        }
        assert_eq!(released as usize, pool.len(), "{what}: the teardown freed other aggregators than those held");
        let in_use = self.sw.prog().pool().in_use();
        assert_eq!(in_use, 0, "{what}: {in_use} aggregators still held after the teardown");
        for ps in self.ps.values_mut() {
            match ps {
                Ps::Atp(p) => p.dict.forget_results_below(u32::MAX, &mut self.vals),
                Ps::Dsa(p) => p.dict.forget_results_below(u32::MAX, &mut self.vals),
            }
        }
        assert_eq!(self.vals.live, 0, "{}: value slots leaked", self.describe());
    }
}

fn cases() -> (u64, u64) {
    let n = std::env::var("REDUCELAB_POOL_CASES").ok().and_then(|s| s.parse().ok()).unwrap_or(100);
    let seed = std::env::var("REDUCELAB_POOL_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or(1);
    (n, seed)
}

/// Runs `n` random cases of `proto`; returns summed switch counters for the coverage checks.
fn property(proto: Proto) -> BTreeMap<&'static str, u64> {
    let (n, seed) = cases();
    let mut seen = BTreeMap::new();
    for k in 0..n {
        let mut c = Case::new(proto, seed.wrapping_mul(1_000_003).wrapping_add(k));
        c.run();
        c.check_end();
        let st = c.sw.prog().stats().clone();
        for (name, x) in [
            ("completed_on_switch", st.completed),
            ("fallbacks", st.fallbacks),
            ("preemptions", st.preemptions),
            ("downgrades", st.downgrades),
            ("duplicates", st.duplicates),
            ("results_resent", st.results_resent),
            ("resends", st.resends),
            ("resend_clears", st.resend_clears),
            ("ack_frees", st.ack_frees),
            ("reminders_fetched", st.reminders_fetched),
            ("stale", st.stale),
            ("passed_through", st.passed_through),
            ("results_at_workers", c.results),
        ] {
            *seen.entry(name).or_insert(0) += x;
        }
        let ps_completed: u64 =
            c.ps.values()
                .map(|p| match p {
                    Ps::Atp(p) => p.dict.stats.completed,
                    Ps::Dsa(p) => p.dict.stats.completed,
                })
                .sum();
        *seen.entry("completed_at_ps").or_insert(0) += ps_completed;
        *seen.entry("packets_sent").or_insert(0) += c.sent;
        *seen.entry("packets_duplicated").or_insert(0) += c.duplicated;
        *seen.entry("packets_reordered").or_insert(0) += c.reordered;
        *seen.entry("held_at_end").or_insert(0) += c.held_at_end;
        for p in c.ps.values() {
            let st = match p {
                Ps::Atp(p) => &p.dict.stats,
                Ps::Dsa(p) => &p.dict.stats,
            };
            for (name, x) in [
                ("ps_reminders", st.reminders),
                ("ps_notices", st.notices),
                ("ps_duplicates", st.duplicates),
                ("ps_discarded", st.discarded),
                ("ps_re_acks", st.re_acks),
            ] {
                *seen.entry(name).or_insert(0) += x;
            }
        }
    }
    if std::env::var_os("REDUCELAB_POOL_VERBOSE").is_some() {
        eprintln!("{proto:?}: {n} cases: {seen:?}");
    }
    seen
}

/// The random cases must reach the paths the protocol has (a sweep that never collides tests
/// little).
fn assert_exercised(seen: &BTreeMap<&str, u64>, names: &[&str]) {
    for n in names {
        assert!(seen[n] > 0, "no case exercised {n}: {seen:?}");
    }
}

#[test]
fn switchml_results_are_exact_under_loss_and_duplicates() {
    let seen = property(Proto::SwitchMl);
    assert_exercised(&seen, &["completed_on_switch", "duplicates", "results_resent"]);
}

#[test]
fn atp_results_are_exact_under_collisions_loss_and_resends() {
    let seen = property(Proto::Atp);
    assert_exercised(
        &seen,
        &[
            "completed_on_switch",
            "completed_at_ps",
            "fallbacks",
            "resends",
            "resend_clears",
            "ack_frees",
            "held_at_end",
            "ps_duplicates",
            "ps_discarded",
            "ps_re_acks",
        ],
    );
}

#[test]
fn dsa_results_are_exact_under_preemption_loss_and_reminders() {
    let seen = property(Proto::Dsa(Preemption::Priority));
    assert_exercised(
        &seen,
        &[
            "completed_on_switch",
            "completed_at_ps",
            "fallbacks",
            "preemptions",
            "downgrades",
            "duplicates",
            "reminders_fetched",
            "ps_reminders",
            "ps_notices",
            "ps_discarded",
            "ps_re_acks",
        ],
    );
}

#[test]
fn dsa_strawmen_results_are_exact() {
    for rule in [Preemption::Always, Preemption::Coin { seed: 7 }] {
        let seen = property(Proto::Dsa(rule));
        assert_exercised(&seen, &["completed_on_switch", "completed_at_ps", "preemptions", "reminders_fetched"]);
    }
}

/// Untrusted input: random packets of every kind and destination (bad worker counts, empty and
/// multi-bit bitmaps, unknown jobs), and random timer tokens, into every program and PS. None may
/// panic; each arrival gets exactly one `Consume` or `Forward`; the pool's count of aggregators in
/// use matches its array; and every value slot is accounted for (in an aggregator, in a packet
/// that left, or in a PS).
#[test]
fn random_packets_never_panic_and_conserve_aggregators_and_value_slots() {
    let kinds = [
        PacketKind::Gradient,
        PacketKind::Partial,
        PacketKind::Ack,
        PacketKind::Reminder,
        PacketKind::Fetch,
        PacketKind::ReminderNotice,
        PacketKind::Other,
    ];
    let dsts = [Dest::Switch, Dest::Ps, Dest::Workers, Dest::Worker(0), Dest::Worker(70)];
    let mut rng = Rng(0xC0FFEE);
    for proto in
        [Proto::SwitchMl, Proto::Atp, Proto::Dsa(Preemption::Priority), Proto::Dsa(Preemption::Coin { seed: 1 })]
    {
        let mut vals = Values::new(2);
        let mut sw = match proto {
            Proto::SwitchMl => Sw::Ml(SwitchMlSwitch::new(8, &even_regions(8, &[(1, 3), (2, 2)]).unwrap()).unwrap()),
            Proto::Atp => Sw::Atp(AtpSwitch::new(5).unwrap()),
            Proto::Dsa(rule) => Sw::Dsa(DsaSwitch::new(5, rule).unwrap()),
        };
        let mut atp = AtpPs::new(1, 3).unwrap();
        let mut dsa = DsaPs::new(1, 3, 10).unwrap();
        let mut left = 0u32; // value slots in packets that left
        for _ in 0..50_000 {
            let job = [1, 2, 3][rng.below(3) as usize];
            let workers = [0, 1, 2, 3, 64, 65][rng.below(6) as usize];
            let mut p = AggPacket::new(
                kinds[rng.below(7) as usize],
                dsts[rng.below(5) as usize],
                job,
                rng.below(20) as u32,
                workers,
            );
            p.bitmap = [0, 1, 2, 4, 3, 7, 1 << 63, rng.next()][rng.below(8) as usize];
            (p.priority, p.resend, p.elems, p.fp) = (rng.below(8) as u32, rng.chance(0.2), 2, rng.next());
            p.data = if rng.chance(0.8) { vals.alloc() } else { reducelab_ina::NIL };
            let mut out = Vec::new();
            let mut acts = Vec::new();
            match rng.below(4) {
                0 | 1 => {
                    sw.prog().on_packet(rng.below(1000), rng.below(64) as u16, p, &mut vals, &mut out);
                    assert_eq!(
                        out.iter().filter(|a| matches!(a, PoolAction::Consume | PoolAction::Forward(_))).count(),
                        1,
                        "{p:?} → {out:?}"
                    );
                }
                2 => atp.on_packet(rng.below(1000), p, &mut vals, &mut acts),
                _ => {
                    dsa.on_packet(rng.below(1000), p, &mut vals, &mut acts);
                    dsa.on_timer(
                        rng.below(1000),
                        if rng.chance(0.5) { rng.next() } else { rng.below(20) << 32 | rng.below(4) },
                        &mut acts,
                    );
                }
            }
            for a in &out {
                if let PoolAction::Forward(q) | PoolAction::Emit(q) = a {
                    left += (q.data != reducelab_ina::NIL) as u32;
                }
            }
            for a in &acts {
                if let PsAction::Send(q) = a {
                    left += (q.data != reducelab_ina::NIL) as u32;
                }
            }
            let pool = sw.prog().pool();
            assert_eq!(pool.in_use() as usize, pool.used().count());
        }
        let pool = sw.prog().pool();
        let in_pool = pool.used().filter(|&i| pool.get(i).data != reducelab_ina::NIL).count() as u32;
        let in_ps: u32 = [&atp.dict, &dsa.dict]
            .iter()
            .map(|d| {
                d.pending().filter(|&k| d.entry(k).unwrap().data != reducelab_ina::NIL).count() as u32
                    + (0..20).filter(|&k| d.completed(k).is_some_and(|c| c.data != reducelab_ina::NIL)).count() as u32
            })
            .sum();
        assert_eq!(vals.live, in_pool + left + in_ps, "{proto:?}: value slots unaccounted for");
    }
}

/// Every pool registry entry builds from its keys' defaults, under its own name, with the
/// parameter server it declares; a key it owns is parsed by it, with errors naming the key.
#[test]
fn every_pool_registry_entry_builds_under_its_name() {
    use reducelab_ina::pool::{PoolParams, POOL_PROTOCOLS};
    for info in POOL_PROTOCOLS {
        let p = (info.build)(&PoolParams::default()).unwrap_or_else(|e| panic!("{}: {e:?}", info.name));
        assert_eq!(p.name(), info.name);
        assert_eq!(p.uses_ps(), info.uses_ps, "{}", info.name);
        for key in info.keys {
            // An impossible value of each of its own keys is refused, naming the key.
            let bad = PoolParams { preemption: (*key == "preemption").then_some("sometimes") };
            let e = (info.build)(&bad).expect_err(key);
            assert_eq!(e.key, *key, "{}", info.name);
        }
    }
}
