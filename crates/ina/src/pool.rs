//! The shared aggregator pool of switch memory and the packets of the three protocols that use
//! it ([`crate::switchml`], [`crate::atp`], [`crate::dsa`]), after the DSA paper (seed 001,
//! §III-A): "DSA organizes the switch memory as an *aggregator array*, where each aggregator has
//! the format of ⟨JobID_PSN, bitmap, priority, tensor_values⟩. Each aggregator can store the same
//! length of tensor values as a gradient packet's payload."
//!
//! Everything here is sans-I/O: a switch program takes an [`AggPacket`] (and the time, in integer
//! picoseconds) and pushes [`PoolAction`]s; a parameter server pushes [`PsAction`]s. Where a
//! packet goes is in the packet ([`Dest`]), so a packet engine and a worker transport can route
//! it without knowing the protocol: `Workers` means the job's multicast group, which the switch
//! replicates. No clock, no RNG: the index hash is a fixed function of (JobID, PSN).
//!
//! **Memory model.** §VII-B: "The switch spares 5 MB memory for INA. We use the same packet
//! size (306Byte) as the setting of ATP." An aggregator holds one packet's worth; we charge each
//! one the whole 306-byte packet (its values plus the ⟨JobID_PSN, bitmap, priority⟩ metadata
//! the header carries), so [`PoolLayout::DSA_SIMULATION`] has ⌊5·10⁶ / 306⌋ = **16 339**
//! aggregators. What matters to the protocols is that count; the values a packet carries are the
//! job's `elems` (32-bit integers, fixed point as the switch ALUs add them) and a 64-bit
//! fingerprint, kept exactly as [`crate::Values`] and [`crate::contribution_fp`] do for Canary.

use crate::{mix, Values, NIL};

/// A pool's size in switch memory.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PoolLayout {
    /// Switch memory spared for aggregation.
    pub memory_bytes: u64,
    /// Memory charged per aggregator (one packet: values and metadata).
    pub aggregator_bytes: u64,
}

impl PoolLayout {
    /// §VII-B: 5 MB of switch memory (10⁶ bytes per MB), 306-byte packets → 16 339 aggregators.
    pub const DSA_SIMULATION: PoolLayout = PoolLayout { memory_bytes: 5_000_000, aggregator_bytes: 306 };

    /// Aggregators that fit, or an error naming the field.
    pub fn aggregators(&self) -> Result<u32, String> {
        if self.aggregator_bytes == 0 {
            return Err("aggregator_bytes: must be at least 1".into());
        }
        let n = self.memory_bytes / self.aggregator_bytes;
        if n == 0 {
            return Err(format!(
                "memory_bytes: {} bytes hold no aggregator of {} bytes",
                self.memory_bytes, self.aggregator_bytes
            ));
        }
        u32::try_from(n).map_err(|_| format!("memory_bytes: {n} aggregators exceed the 32-bit index"))
    }
}

/// One aggregation task: a job's packets with one PSN (the paper's JobID_PSN).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Task {
    pub job: u16,
    pub psn: u32,
}

/// Where a packet is going. The engine maps these to hosts and ports: `Ps` is the job's
/// parameter server, `Workers` the job's multicast group (replicated by the switch), `Worker`
/// one rank of the job.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Dest {
    Switch,
    Ps,
    Workers,
    Worker(u16),
}

/// What a packet is for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PacketKind {
    /// A worker's gradient fragment: one contribution (one bit set). To the switch for
    /// aggregation; to the PS when a switch forwards it (collision, lost preemption, ATP resend)
    /// or when a worker answers a DSA fetch.
    Gradient,
    /// A switch's (possibly partial) aggregate on its way to the PS: complete (ATP), evicted by
    /// preemption or fetched by a reminder (DSA), cleared by a resend (ATP).
    Partial,
    /// The aggregation result, to the workers (from the switch or the PS; through the switch).
    Ack,
    /// DSA, PS → switch: send this task's partial aggregate to the PS.
    Reminder,
    /// DSA, PS → workers: send your original gradient packet of this task to the PS.
    Fetch,
    /// DSA, worker → PS: stuck on this task after three retransmissions.
    ReminderNotice,
    /// Not aggregation traffic: a switch program passes it through untouched.
    Other,
}

/// A packet of the shared-pool protocols as the state machines use it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AggPacket {
    pub kind: PacketKind,
    pub dst: Dest,
    pub job: u16,
    pub psn: u32,
    /// Contributors (bit `r` = rank `r`, 0-based; the paper numbers ranks from 1).
    pub bitmap: u64,
    /// Workers of the job (the bitmap is full at `(1 << workers) − 1`), 1..=64.
    pub workers: u16,
    /// DSA's preemption priority (the policy's encoded P_j(l)); 0 elsewhere.
    pub priority: u32,
    /// ATP: the worker's retransmission flag.
    pub resend: bool,
    pub elems: u16,
    /// Wrapping sum of the contributions' fingerprints.
    pub fp: u64,
    /// Slot of the element values in the [`Values`] slab, or [`NIL`].
    pub data: u32,
}

impl AggPacket {
    pub fn new(kind: PacketKind, dst: Dest, job: u16, psn: u32, workers: u16) -> AggPacket {
        AggPacket { kind, dst, job, psn, bitmap: 0, workers, priority: 0, resend: false, elems: 0, fp: 0, data: NIL }
    }
    pub fn task(&self) -> Task {
        Task { job: self.job, psn: self.psn }
    }
    /// The only contributor of a worker's gradient (lowest set bit).
    pub fn rank(&self) -> u16 {
        self.bitmap.trailing_zeros() as u16
    }
    /// Whether `workers` is a valid bitmap width.
    pub fn well_formed(&self) -> bool {
        (1..=64).contains(&self.workers) && self.bitmap & !full_bitmap(self.workers) == 0
    }
    /// A copy to send on, owning a copy of the values.
    pub fn copy(&self, vals: &mut Values) -> AggPacket {
        AggPacket { data: vals.duplicate(self.data), ..*self }
    }
}

/// Rank `rank`'s gradient packet for `psn` of job `job` to `dst`: one contribution, its
/// fingerprint ([`crate::contribution_fp`] of (job, rank, PSN)) and, when `vals` is enabled,
/// its `elems` element values ([`crate::contribution_value`]). What a worker transport sends
/// and what the expected sums are made of.
#[allow(clippy::too_many_arguments)]
pub fn gradient(
    salt: u64,
    job: u16,
    rank: u16,
    psn: u32,
    workers: u16,
    elems: u16,
    dst: Dest,
    vals: &mut Values,
) -> AggPacket {
    let mut p = AggPacket::new(PacketKind::Gradient, dst, job, psn, workers);
    (p.bitmap, p.elems) = (1u64.checked_shl(rank as u32).unwrap_or(0), elems);
    p.fp = crate::contribution_fp(salt, job, rank as u32, psn);
    p.data = vals.alloc();
    if p.data != NIL {
        let d = vals.get_mut(p.data);
        for (e, x) in d.iter_mut().enumerate().take(elems as usize) {
            *x = crate::contribution_value(salt, job, rank as u32, psn, e as u32);
        }
    }
    p
}

/// Bitmap with all `workers` bits set.
#[inline]
pub fn full_bitmap(workers: u16) -> u64 {
    if workers >= 64 {
        u64::MAX
    } else {
        (1u64 << workers) - 1
    }
}

/// Statistical INA's index: "aggregator.index ← Hash(JobID, PSN)" (§II-A), a fixed mix of
/// the pair onto `n` aggregators.
#[inline]
pub fn hash_index(task: Task, n: u32) -> u32 {
    (mix((task.job as u64) << 32 | task.psn as u64) % n as u64) as u32
}

/// `*dst += src` (values), taking `src` over when `dst` holds none.
pub(crate) fn merge_values(vals: &mut Values, dst: &mut u32, src: u32) {
    if *dst == NIL {
        *dst = src;
    } else {
        vals.absorb(*dst, src);
    }
}

/// What a switch program asks its switch to do with one arriving packet (exactly one
/// `Consume` or `Forward`) and any new packets.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PoolAction {
    /// The arriving packet is absorbed (its values are freed or kept by the program).
    Consume,
    /// The arriving packet goes on to `pkt.dst`, possibly rewritten.
    Forward(AggPacket),
    /// A new packet to `pkt.dst` (a `Workers` destination is multicast by the switch).
    Emit(AggPacket),
}

/// What a parameter server asks its host to do.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PsAction {
    Send(AggPacket),
    /// Call `on_timer(token)` at `at` ps.
    Timer {
        at: u64,
        token: u64,
    },
}

/// A switch program over an aggregator pool.
pub trait PoolProgram {
    /// `pkt` arrived on local port `in_port` at `now` ps. Pushes exactly one `Consume` or
    /// `Forward` for it, then any `Emit`s.
    fn on_packet(&mut self, now: u64, in_port: u16, pkt: AggPacket, vals: &mut Values, out: &mut Vec<PoolAction>);
    fn pool(&self) -> &AggregatorPool;
    /// The pool, for the control plane ([`AggregatorPool::release_job`] at a job's end).
    fn pool_mut(&mut self) -> &mut AggregatorPool;
    fn stats(&self) -> &PoolStats;
}

/// A shared-pool protocol as scenario files name it (`[[traffic]] kind = "training"`,
/// `protocol = NAME`). The engine's driver is `reducelab_sim::training_run`.
#[derive(Clone, Copy, Debug)]
pub struct PoolProtocolInfo {
    pub name: &'static str,
    pub summary: &'static str,
    /// Whether each job needs a parameter server host.
    pub uses_ps: bool,
    /// Its own keys of a `training` entry, beside the jobs' keys every pool protocol takes (a
    /// key another protocol owns is refused, naming who takes it).
    pub keys: &'static [&'static str],
    /// The protocol from its keys' values; errors name the key.
    pub build: fn(&PoolParams<'_>) -> Result<crate::pool_jobs::PoolProtocol, crate::ParamError>,
}

/// The protocol-owned keys of a `training` entry, as given (`None`: absent).
#[derive(Clone, Copy, Debug, Default)]
pub struct PoolParams<'a> {
    /// DSA: `preemption`.
    pub preemption: Option<&'a str>,
}

impl PoolParams<'_> {
    /// The protocol-owned keys that are set, by name.
    pub fn set_keys(&self) -> impl Iterator<Item = &'static str> {
        [("preemption", self.preemption.is_some())].into_iter().filter(|&(_, set)| set).map(|(k, _)| k)
    }
}

fn build_dsa(p: &PoolParams<'_>) -> Result<crate::pool_jobs::PoolProtocol, crate::ParamError> {
    use crate::policy::Preemption;
    let rule = match p.preemption {
        None | Some("priority") => Preemption::Priority,
        Some("always") => Preemption::Always,
        // The coin's seed is the scenario's, given when the switch programs are built.
        Some("coin") => Preemption::Coin { seed: 0 },
        Some(other) => {
            return Err(crate::ParamError {
                key: "preemption".into(),
                reason: format!("must be \"priority\", \"always\" or \"coin\", got \"{other}\""),
            })
        }
    };
    Ok(crate::pool_jobs::PoolProtocol::Dsa(rule))
}

/// The shared-pool protocols (SwitchML, ATP, DSA), read by the scenario parser.
pub const POOL_PROTOCOLS: &[PoolProtocolInfo] = &[
    PoolProtocolInfo {
        name: "switchml",
        summary: "SwitchML (NSDI'21): a region per job, two slot sets, no PS",
        uses_ps: false,
        keys: &[],
        build: |_| Ok(crate::pool_jobs::PoolProtocol::SwitchMl),
    },
    PoolProtocolInfo {
        name: "atp",
        summary: "ATP (NSDI'21): hashed, first come first served, collisions to the PS",
        uses_ps: true,
        keys: &[],
        build: |_| Ok(crate::pool_jobs::PoolProtocol::Atp),
    },
    PoolProtocolInfo {
        name: "dsa",
        summary: "DSA (ICNP'23): hashed, preemption by priority, reminders",
        uses_ps: true,
        keys: &["preemption"],
        build: build_dsa,
    },
];

/// The registry entry called `name`.
pub fn pool_protocol(name: &str) -> Option<&'static PoolProtocolInfo> {
    POOL_PROTOCOLS.iter().find(|p| p.name == name)
}

/// One aggregator. `task == None`: free.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Aggregator {
    pub task: Option<Task>,
    pub bitmap: u64,
    pub priority: u32,
    /// Contributions aggregated (SwitchML's count; the bitmap's population elsewhere).
    pub count: u16,
    pub workers: u16,
    /// SwitchML: the result is kept as the shadow copy. ATP: sent to the PS, waiting for its ACK.
    pub complete: bool,
    pub elems: u16,
    pub fp: u64,
    pub data: u32,
}

pub const FREE: Aggregator = Aggregator {
    task: None,
    bitmap: 0,
    priority: 0,
    count: 0,
    workers: 0,
    complete: false,
    elems: 0,
    fp: 0,
    data: NIL,
};

/// The aggregator array, with its occupancy over time (for memory-utilisation figures).
#[derive(Clone, Debug)]
pub struct AggregatorPool {
    aggs: Vec<Aggregator>,
    in_use: u32,
    pub peak_in_use: u32,
    /// Time integral of aggregators in use (aggregator·ps).
    pub aggregator_ps: u128,
    last_change_ps: u64,
}

impl AggregatorPool {
    pub fn new(n: u32) -> Result<AggregatorPool, String> {
        if n == 0 {
            return Err("aggregators: must be at least 1".into());
        }
        Ok(AggregatorPool {
            aggs: vec![FREE; n as usize],
            in_use: 0,
            peak_in_use: 0,
            aggregator_ps: 0,
            last_change_ps: 0,
        })
    }
    pub fn len(&self) -> u32 {
        self.aggs.len() as u32
    }
    pub fn is_empty(&self) -> bool {
        self.aggs.is_empty()
    }
    pub fn get(&self, i: u32) -> &Aggregator {
        &self.aggs[i as usize]
    }
    pub(crate) fn get_mut(&mut self, i: u32) -> &mut Aggregator {
        &mut self.aggs[i as usize]
    }
    /// Aggregators holding a task now.
    pub fn in_use(&self) -> u32 {
        self.in_use
    }
    /// Indices of the aggregators in use, ascending.
    pub fn used(&self) -> impl Iterator<Item = u32> + '_ {
        self.aggs.iter().enumerate().filter(|(_, a)| a.task.is_some()).map(|(i, _)| i as u32)
    }
    fn note(&mut self, now: u64, after: u32) {
        self.aggregator_ps += self.in_use as u128 * now.saturating_sub(self.last_change_ps) as u128;
        self.last_change_ps = self.last_change_ps.max(now);
        self.in_use = after;
        self.peak_in_use = self.peak_in_use.max(after);
    }
    /// Writes `pkt` into aggregator `i` (free before or not: the caller has taken what it held).
    pub(crate) fn reserve(&mut self, now: u64, i: u32, pkt: &AggPacket) {
        if self.aggs[i as usize].task.is_none() {
            self.note(now, self.in_use + 1);
        }
        self.aggs[i as usize] = Aggregator {
            task: Some(pkt.task()),
            bitmap: pkt.bitmap,
            priority: pkt.priority,
            count: pkt.bitmap.count_ones() as u16,
            workers: pkt.workers,
            complete: false,
            elems: pkt.elems,
            fp: pkt.fp,
            data: pkt.data,
        };
    }
    /// Adds `pkt`'s contribution(s) to aggregator `i`.
    pub(crate) fn absorb(&mut self, i: u32, pkt: &AggPacket, vals: &mut Values) {
        let a = &mut self.aggs[i as usize];
        a.bitmap |= pkt.bitmap;
        a.count = a.count.saturating_add(pkt.bitmap.count_ones() as u16);
        a.fp = a.fp.wrapping_add(pkt.fp);
        a.elems = a.elems.max(pkt.elems);
        merge_values(vals, &mut a.data, pkt.data);
    }
    /// Frees every aggregator holding a task of `job` (the control plane's teardown when the
    /// job ends); returns how many it freed.
    pub fn release_job(&mut self, now: u64, job: u16, vals: &mut Values) -> u32 {
        let held: Vec<u32> = self
            .aggs
            .iter()
            .enumerate()
            .filter(|(_, a)| a.task.is_some_and(|t| t.job == job))
            .map(|(i, _)| i as u32)
            .collect();
        for &i in &held {
            self.free(now, i, vals);
        }
        held.len() as u32
    }
    /// Time-weighted mean of aggregators in use over `[0, end_ps]`.
    pub fn mean_in_use(&self, end_ps: u64) -> f64 {
        let tail = self.in_use as u128 * end_ps.saturating_sub(self.last_change_ps) as u128;
        (self.aggregator_ps + tail) as f64 / end_ps.max(1) as f64
    }
    /// Frees aggregator `i`, releasing any values it still holds.
    pub(crate) fn free(&mut self, now: u64, i: u32, vals: &mut Values) {
        if self.aggs[i as usize].task.is_some() {
            vals.release(self.aggs[i as usize].data);
            self.aggs[i as usize] = FREE;
            self.note(now, self.in_use - 1);
        }
    }
    /// Aggregator `i`'s content as a packet of `kind` to `dst`, taking its values out.
    pub(crate) fn take(&mut self, i: u32, kind: PacketKind, dst: Dest) -> AggPacket {
        let a = &mut self.aggs[i as usize];
        let t = a.task.expect("take from a reserved aggregator");
        let mut p = AggPacket::new(kind, dst, t.job, t.psn, a.workers);
        (p.bitmap, p.priority, p.elems, p.fp, p.data) = (a.bitmap, a.priority, a.elems, a.fp, a.data);
        a.data = NIL;
        p
    }
}

/// Counters of one switch program (fallbacks, preemptions, reminders … for the results).
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct PoolStats {
    /// Gradient packets added into an aggregator (including the first).
    pub aggregated: u64,
    /// Tasks completed on the switch.
    pub completed: u64,
    /// Gradient packets sent to the PS because their aggregator held another task (ATP's
    /// collisions; DSA's lost preemptions); not ATP's retransmissions (`resends`), which go to
    /// the PS whatever the aggregator holds.
    pub fallbacks: u64,
    /// DSA: packets that won an aggregator and evicted its partial aggregate to the PS.
    pub preemptions: u64,
    /// DSA: aggregator priorities halved after a failed preemption.
    pub downgrades: u64,
    /// Packets whose contribution the aggregator already had (dropped).
    pub duplicates: u64,
    /// SwitchML: retransmissions answered with the kept result.
    pub results_resent: u64,
    /// SwitchML: packets older (or newer) than their slot's current use, dropped.
    pub stale: u64,
    /// ATP: retransmissions (resend flag), each forwarded to the PS.
    pub resends: u64,
    /// ATP: aggregators cleared by a resend.
    pub resend_clears: u64,
    /// ATP: aggregators freed by the PS's ACK.
    pub ack_frees: u64,
    /// DSA: reminders answered with a partial aggregate / with nothing held.
    pub reminders_fetched: u64,
    pub reminders_empty: u64,
    /// Packets not for the program, passed on untouched.
    pub passed_through: u64,
    /// Aggregation packets with a bad `workers`/bitmap, dropped.
    pub malformed: u64,
}

/// Packets and checks shared by the golden tests of the three programs.
#[cfg(test)]
pub(crate) mod testkit {
    use super::*;

    /// Values carried per packet in the golden tests.
    pub const ELEMS: usize = 2;

    /// Rank `rank`'s gradient for `psn`: fingerprint `1 << 4·rank` (a double count shows as a 2
    /// in that nibble), values `[rank + 1, 10·(rank + 1)]`.
    pub fn grad(job: u16, psn: u32, rank: u16, workers: u16, vals: &mut Values) -> AggPacket {
        let mut p = AggPacket::new(PacketKind::Gradient, Dest::Switch, job, psn, workers);
        (p.bitmap, p.elems, p.fp) = (1 << rank, ELEMS as u16, 1 << (4 * rank));
        p.data = vals.alloc();
        if vals.enabled() {
            vals.get_mut(p.data).copy_from_slice(&[rank as i32 + 1, 10 * (rank as i32 + 1)]);
        }
        p
    }

    /// The values of the ranks in `bitmap`, summed.
    pub fn sum_of(bitmap: u64) -> [i32; ELEMS] {
        let mut s = [0; ELEMS];
        for r in 0..64 {
            if bitmap >> r & 1 == 1 {
                s[0] += r + 1;
                s[1] += 10 * (r + 1);
            }
        }
        s
    }

    pub fn fp_of(bitmap: u64) -> u64 {
        (0..16).filter(|r| bitmap >> r & 1 == 1).map(|r| 1u64 << (4 * r)).sum()
    }

    /// Asserts that `p` carries exactly the contributions of `bitmap` (fingerprint and values).
    pub fn assert_carries(p: &AggPacket, bitmap: u64, vals: &Values) {
        assert_eq!(p.bitmap, bitmap, "{p:?}");
        assert_eq!(p.fp, fp_of(bitmap), "{p:?}");
        assert_eq!(vals.get(p.data), &sum_of(bitmap)[..], "{p:?}");
    }

    /// A PSN of job `job` whose aggregator is the same as `task`'s in a pool of `n`.
    pub fn colliding(task: Task, job: u16, n: u32) -> u32 {
        (0..)
            .find(|&psn| (job, psn) != (task.job, task.psn) && hash_index(Task { job, psn }, n) == hash_index(task, n))
            .unwrap()
    }
}
