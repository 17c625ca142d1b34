//! The parameter server of ATP and DSA, one per job, as sans-I/O state machines: packets and
//! timer expiries in, [`PsAction`]s out.
//!
//! Both keep the seed's dictionary (§III-A: "JobID_PSN : ⟨tensor_value, bitmap, time⟩") of
//! partial aggregates by PSN ([`PsDictionary`]). A packet's contributions are merged only when
//! none of them is already in the entry (the bitmap AND is 0), so nothing is counted twice: a
//! packet whose contributions are all there is a duplicate; one that overlaps only partly (a
//! partial aggregate of which some contributor was already merged) cannot be split and is
//! discarded — its other contributors are still unacknowledged, so their workers send them
//! again (retransmission, ATP's resend, DSA's reminder). When the bitmap is full the result is
//! acknowledged to the workers through the switch, which multicasts it, and the entry is
//! deleted ("on the PS, the dictionary entry is also deleted after constructing the ACK
//! packet"). The PS keeps the result (it is the parameter server), so that a late partial
//! aggregate is dropped instead of recreating an entry that would wait for ever, and a worker
//! still missing the result gets it again, alone: ATP's PS answers the worker's resend; DSA's
//! answers its reminder notice (a gradient for a completed PSN — an answer to a fetch, or a
//! retransmission that lost a preemption — is dropped: the notice follows if the worker is
//! stuck, and answering every fetch answer would double the ACK traffic).
//!
//! - [`AtpPs`]: no timers; ATP's workers resend until acknowledged.
//! - [`DsaPs`]: the reminder mechanism (§IV-B): "if an entry in the PS dictionary experiences a
//!   timeout without completion, the PS actively runs the reminder mechanism for the entry's
//!   PSN; if a worker is stuck without receiving an ACK, the worker sends a reminder
//!   notification to the PS". The reminder "sends requests of a PSN to the switch and all
//!   workers, fetching the (possibly partial) aggregation result on the switch, and the original
//!   gradient packets to the PS". The timeout is an EWMA of the time from an entry's setup to its
//!   completion with a floor (§VI: "DSA forces the minimum timeout to be 1 ms"), see
//!   [`EwmaTimeout`]. The PS does not hear of tasks the switch completed: a leftover of one (a
//!   late retransmission that reserved an aggregator, later evicted to the PS or fetched by a
//!   worker's reminder) opens an entry whose reminder completes the task a second time; the
//!   workers already have the result and ignore the repeat.

use std::collections::BTreeMap;

pub use reducelab_transport::rto::EwmaTimeout;

use crate::pool::{full_bitmap, merge_values, AggPacket, Dest, PacketKind, PsAction};
use crate::{Values, NIL};

/// One partial aggregate of the dictionary.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Entry {
    pub bitmap: u64,
    pub elems: u16,
    pub fp: u64,
    pub data: u32,
    /// When the entry was set up.
    pub created_ps: u64,
    /// DSA: bumped at every timer armed, so stale expiries are ignored.
    pub gen: u32,
    /// DSA: reminders run for it.
    pub reminders: u32,
}

/// A completed PSN's result, kept for answering late workers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Completed {
    pub elems: u16,
    pub fp: u64,
    pub data: u32,
}

/// Counters of one parameter server.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct PsStats {
    /// Packets whose contributions were merged into an entry.
    pub merged: u64,
    /// Packets whose contributions were all there already.
    pub duplicates: u64,
    /// Partial aggregates that overlapped an entry only partly, or came after completion.
    pub discarded: u64,
    /// PSNs completed here.
    pub completed: u64,
    /// Results sent again to one worker.
    pub re_acks: u64,
    /// DSA: reminders run (timeouts + notices).
    pub reminders: u64,
    /// DSA: reminder notifications from workers.
    pub notices: u64,
    /// Packets of another job or kind, dropped.
    pub foreign: u64,
}

/// What offering a packet to the dictionary did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Offer {
    /// Merged into a new entry.
    Created,
    Merged,
    /// Merged and the bitmap is full: the ACK is sent, the entry deleted.
    Completed {
        setup_ps: u64,
        reminded: bool,
    },
    Duplicate,
    Discarded,
    /// The PSN was complete already (a worker's packet has been answered).
    AlreadyComplete,
}

/// Partial aggregates by PSN for one job, and its completed results.
#[derive(Clone, Debug)]
pub struct PsDictionary {
    pub job: u16,
    pub workers: u16,
    /// Whether a worker's gradient for a completed PSN is answered with the result (ATP, whose
    /// workers resend until acknowledged) or dropped (DSA, whose workers ask with a notice).
    pub answer_late_gradients: bool,
    entries: BTreeMap<u32, Entry>,
    done: BTreeMap<u32, Completed>,
    pub stats: PsStats,
}

impl PsDictionary {
    pub fn new(job: u16, workers: u16, answer_late_gradients: bool) -> Result<PsDictionary, String> {
        if !(1..=64).contains(&workers) {
            return Err(format!("workers: {workers} is outside 1..=64 (the bitmap has 64 bits)"));
        }
        Ok(PsDictionary {
            job,
            workers,
            answer_late_gradients,
            entries: BTreeMap::new(),
            done: BTreeMap::new(),
            stats: PsStats::default(),
        })
    }
    pub fn entry(&self, psn: u32) -> Option<&Entry> {
        self.entries.get(&psn)
    }
    /// PSNs with a partial aggregate here.
    pub fn pending(&self) -> impl Iterator<Item = u32> + '_ {
        self.entries.keys().copied()
    }
    pub fn completed(&self, psn: u32) -> Option<&Completed> {
        self.done.get(&psn)
    }
    /// A restart: the partial aggregates in memory are lost (their values freed); the
    /// completed results are kept, as a parameter server keeps its parameters.
    pub fn restart(&mut self, vals: &mut Values) {
        for e in std::mem::take(&mut self.entries).into_values() {
            vals.release(e.data);
        }
    }
    /// The job is over: every partial aggregate and kept result is dropped, their values freed.
    pub fn clear(&mut self, vals: &mut Values) {
        self.restart(vals);
        for c in std::mem::take(&mut self.done).into_values() {
            vals.release(c.data);
        }
    }
    /// Drops the kept results of PSNs below `psn` (every worker has them), freeing their values.
    pub fn forget_results_below(&mut self, psn: u32, vals: &mut Values) {
        let keep = self.done.split_off(&psn);
        for c in std::mem::replace(&mut self.done, keep).into_values() {
            vals.release(c.data);
        }
    }

    fn result(&self, psn: u32, c: &Completed, dst: Dest, vals: &mut Values) -> AggPacket {
        let mut p = AggPacket::new(PacketKind::Ack, dst, self.job, psn, self.workers);
        (p.bitmap, p.elems, p.fp, p.data) = (full_bitmap(self.workers), c.elems, c.fp, vals.duplicate(c.data));
        p
    }

    /// Offers a worker's gradient or a switch's partial aggregate.
    pub fn offer(&mut self, now: u64, pkt: AggPacket, vals: &mut Values, out: &mut Vec<PsAction>) -> Offer {
        if let Some(c) = self.done.get(&pkt.psn).copied() {
            vals.release(pkt.data);
            if pkt.kind != PacketKind::Gradient {
                self.stats.discarded += 1;
            } else if self.answer_late_gradients {
                self.stats.re_acks += 1;
                let r = self.result(pkt.psn, &c, Dest::Worker(pkt.rank()), vals);
                out.push(PsAction::Send(r));
            } else {
                self.stats.duplicates += 1;
            }
            return Offer::AlreadyComplete;
        }
        let created = !self.entries.contains_key(&pkt.psn);
        let e = self.entries.entry(pkt.psn).or_insert(Entry {
            bitmap: 0,
            elems: 0,
            fp: 0,
            data: NIL,
            created_ps: now,
            gen: 0,
            reminders: 0,
        });
        if e.bitmap & pkt.bitmap != 0 {
            vals.release(pkt.data);
            if pkt.bitmap & !e.bitmap == 0 {
                self.stats.duplicates += 1;
                return Offer::Duplicate;
            }
            self.stats.discarded += 1;
            return Offer::Discarded;
        }
        self.stats.merged += 1;
        e.bitmap |= pkt.bitmap;
        e.fp = e.fp.wrapping_add(pkt.fp);
        e.elems = e.elems.max(pkt.elems);
        merge_values(vals, &mut e.data, pkt.data);
        if e.bitmap == full_bitmap(self.workers) {
            let e = self.entries.remove(&pkt.psn).expect("just merged");
            self.stats.completed += 1;
            let c = Completed { elems: e.elems, fp: e.fp, data: e.data };
            self.done.insert(pkt.psn, c);
            let ack = self.result(pkt.psn, &c, Dest::Workers, vals);
            out.push(PsAction::Send(ack));
            return Offer::Completed { setup_ps: e.created_ps, reminded: e.reminders > 0 };
        }
        if created {
            Offer::Created
        } else {
            Offer::Merged
        }
    }

    /// Whether a packet is this job's and carries contributions the dictionary takes.
    fn accepts(&self, pkt: &AggPacket) -> bool {
        pkt.job == self.job
            && pkt.workers == self.workers
            && pkt.well_formed()
            && pkt.bitmap != 0
            && matches!(pkt.kind, PacketKind::Gradient | PacketKind::Partial)
    }
}

/// ATP's parameter server: aggregates what the switch could not (collisions, resends, cleared
/// partial aggregates) and acknowledges every completed PSN through the switch, whose
/// aggregator the ACK frees. No timers.
#[derive(Clone, Debug)]
pub struct AtpPs {
    pub dict: PsDictionary,
}

impl AtpPs {
    pub fn new(job: u16, workers: u16) -> Result<AtpPs, String> {
        Ok(AtpPs { dict: PsDictionary::new(job, workers, true)? })
    }
    pub fn on_packet(&mut self, now: u64, pkt: AggPacket, vals: &mut Values, out: &mut Vec<PsAction>) {
        if !self.dict.accepts(&pkt) {
            self.dict.stats.foreign += 1;
            vals.release(pkt.data);
            return;
        }
        self.dict.offer(now, pkt, vals, out);
    }
}

/// DSA's PS timeout floor: 1 ms (§VI).
pub const DSA_TIMEOUT_FLOOR_PS: u64 = 1_000_000_000;

/// DSA's parameter server.
#[derive(Clone, Debug)]
pub struct DsaPs {
    pub dict: PsDictionary,
    pub timeout: EwmaTimeout,
}

impl DsaPs {
    /// `floor_ps`: the timeout floor ([`DSA_TIMEOUT_FLOOR_PS`] in the paper).
    pub fn new(job: u16, workers: u16, floor_ps: u64) -> Result<DsaPs, String> {
        if floor_ps == 0 {
            return Err("timeout_floor_ps: must be positive".into());
        }
        Ok(DsaPs { dict: PsDictionary::new(job, workers, false)?, timeout: EwmaTimeout::new(floor_ps) })
    }

    fn arm(&mut self, now: u64, psn: u32, out: &mut Vec<PsAction>) {
        let at = now + self.timeout.timeout_ps();
        let e = self.dict.entries.get_mut(&psn).expect("an entry to time");
        e.gen = e.gen.wrapping_add(1);
        out.push(PsAction::Timer { at, token: (psn as u64) << 32 | e.gen as u64 });
    }

    /// Fetches `psn`'s partial aggregate from the switch and the original packets from every
    /// worker.
    fn remind(&mut self, psn: u32, out: &mut Vec<PsAction>) {
        self.dict.stats.reminders += 1;
        if let Some(e) = self.dict.entries.get_mut(&psn) {
            e.reminders += 1;
        }
        let (job, n) = (self.dict.job, self.dict.workers);
        out.push(PsAction::Send(AggPacket::new(PacketKind::Reminder, Dest::Switch, job, psn, n)));
        out.push(PsAction::Send(AggPacket::new(PacketKind::Fetch, Dest::Workers, job, psn, n)));
    }

    pub fn on_packet(&mut self, now: u64, pkt: AggPacket, vals: &mut Values, out: &mut Vec<PsAction>) {
        if pkt.kind == PacketKind::ReminderNotice
            && pkt.job == self.dict.job
            && pkt.workers == self.dict.workers
            && pkt.well_formed()
            && pkt.bitmap.count_ones() == 1
        {
            self.dict.stats.notices += 1;
            vals.release(pkt.data);
            if let Some(c) = self.dict.done.get(&pkt.psn).copied() {
                self.dict.stats.re_acks += 1;
                let r = self.dict.result(pkt.psn, &c, Dest::Worker(pkt.rank()), vals);
                out.push(PsAction::Send(r));
                return;
            }
            if let std::collections::btree_map::Entry::Vacant(e) = self.dict.entries.entry(pkt.psn) {
                e.insert(Entry { bitmap: 0, elems: 0, fp: 0, data: NIL, created_ps: now, gen: 0, reminders: 0 });
                self.arm(now, pkt.psn, out);
            }
            self.remind(pkt.psn, out);
            return;
        }
        if !self.dict.accepts(&pkt) {
            self.dict.stats.foreign += 1;
            vals.release(pkt.data);
            return;
        }
        let psn = pkt.psn;
        match self.dict.offer(now, pkt, vals, out) {
            Offer::Created => self.arm(now, psn, out),
            // Karn's rule: an entry a reminder completed says nothing about how long one takes.
            Offer::Completed { setup_ps, reminded: false } => self.timeout.sample(now - setup_ps),
            _ => {}
        }
    }

    pub fn on_timer(&mut self, now: u64, token: u64, out: &mut Vec<PsAction>) {
        let (psn, gen) = ((token >> 32) as u32, token as u32);
        if self.dict.entries.get(&psn).is_some_and(|e| e.gen == gen) {
            self.remind(psn, out);
            self.arm(now, psn, out);
        }
    }
}
