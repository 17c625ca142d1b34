//! SwitchML (Sapio et al., NSDI'21) on the shared aggregator pool: synchronous INA.
//!
//! The DSA paper (§II-A) describes the class: "the switch aggregator array is divided into
//! isolated regions, and each DT job reserves a region for its lifetime. Within the region, a
//! packet with PSN is addressed to an aggregator with the modulo operation: aggregator.index ←
//! PSN % Size + Offset." and, for its baselines, "we isolate the switch memory evenly among
//! jobs" (§VII-A) — [`even_regions`].
//!
//! SwitchML's own switch algorithm (with loss recovery) keeps two copies of every slot, so that a
//! worker that lost a result can still get it after the others have moved on to the slot's next
//! use (the *shadow copy*). With `size` slots per job, PSN `p` uses slot `p mod size` of set
//! `(p / size) mod 2`; a worker sends `p + size` only after it has `p`'s result (its window is
//! at most `size` — the worker transport's rule, not checked here). Per slot and set the switch
//! keeps the contributions seen (SwitchML's `seen` bits: the aggregator's bitmap), their count
//! and the values. On a worker's packet:
//! - not seen yet: mark it seen here and clear the worker's bit in the other set (SwitchML
//!   resets the worker's `seen` bit of the other version), aggregate (the first contribution of a new use
//!   overwrites the values); at the last contribution keep the result and multicast it;
//! - seen, and the set is complete: a retransmission after completion — send the kept result
//!   to that worker alone;
//! - seen, not complete: a duplicate — drop it.
//!
//! The aggregator also records the PSN it serves (the pool's JobID_PSN). SwitchML does not
//! need it because its timeouts exclude packets older than a slot's previous use; here such a
//! packet (or one for a use whose predecessor is still incomplete) is dropped and counted as
//! `stale` instead of being answered with another PSN's result.

use std::collections::BTreeMap;

use crate::pool::{full_bitmap, AggPacket, AggregatorPool, Dest, PacketKind, PoolAction, PoolProgram, PoolStats};
use crate::Values;

/// A job's reserved region: aggregators `[offset, offset + 2·slots)`, set `v` of slot `i` at
/// `offset + v·slots + i`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Region {
    pub job: u16,
    pub offset: u32,
    /// Slots per set (the paper's `Size`).
    pub slots: u32,
    pub workers: u16,
}

impl Region {
    /// Aggregator of PSN `psn`, and of the same slot in the other set.
    pub fn index(&self, psn: u32) -> (u32, u32) {
        let set = (psn / self.slots) % 2;
        let slot = psn % self.slots;
        (self.offset + set * self.slots + slot, self.offset + (1 - set) * self.slots + slot)
    }
}

/// The pool split evenly among `jobs` (job id, workers), in the order given: each gets
/// ⌊aggregators / (2·jobs)⌋ slots per set.
pub fn even_regions(aggregators: u32, jobs: &[(u16, u16)]) -> Result<Vec<Region>, String> {
    if jobs.is_empty() {
        return Err("jobs: no job to give a region to".into());
    }
    let slots = aggregators / (2 * jobs.len() as u32);
    if slots == 0 {
        return Err(format!("aggregators: {aggregators} cannot give {} jobs two slots each", jobs.len()));
    }
    Ok(jobs
        .iter()
        .enumerate()
        .map(|(k, &(job, workers))| Region { job, offset: k as u32 * 2 * slots, slots, workers })
        .collect())
}

pub struct SwitchMlSwitch {
    pool: AggregatorPool,
    regions: BTreeMap<u16, Region>,
    stats: PoolStats,
}

impl SwitchMlSwitch {
    /// A switch with `aggregators` aggregators and these regions (disjoint, inside the pool,
    /// one per job, 1..=64 workers).
    pub fn new(aggregators: u32, regions: &[Region]) -> Result<SwitchMlSwitch, String> {
        let pool = AggregatorPool::new(aggregators)?;
        let mut by_job = BTreeMap::new();
        let mut spans: Vec<(u64, u64, u16)> = Vec::new();
        for (k, r) in regions.iter().enumerate() {
            if r.slots == 0 {
                return Err(format!("regions[{k}].slots: must be at least 1"));
            }
            if !(1..=64).contains(&r.workers) {
                return Err(format!("regions[{k}].workers: {} is outside 1..=64 (the bitmap has 64 bits)", r.workers));
            }
            let end = r.offset as u64 + 2 * r.slots as u64;
            if end > aggregators as u64 {
                return Err(format!("regions[{k}]: aggregators {}..{end} exceed the pool of {aggregators}", r.offset));
            }
            if let Some(&(_, _, other)) = spans.iter().find(|&&(s, e, _)| (r.offset as u64) < e && s < end) {
                return Err(format!("regions[{k}]: overlaps the region of job {other}"));
            }
            if by_job.insert(r.job, *r).is_some() {
                return Err(format!("regions[{k}].job: job {} has two regions", r.job));
            }
            spans.push((r.offset as u64, end, r.job));
        }
        Ok(SwitchMlSwitch { pool, regions: by_job, stats: PoolStats::default() })
    }

    pub fn region(&self, job: u16) -> Option<&Region> {
        self.regions.get(&job)
    }

    /// The job ended: its region's aggregators (results kept as shadow copies) are freed.
    pub fn release_job(&mut self, now: u64, job: u16, vals: &mut Values) {
        if let Some(r) = self.regions.get(&job).copied() {
            for i in r.offset..r.offset + 2 * r.slots {
                self.pool.free(now, i, vals);
            }
        }
    }

    fn result(&self, i: u32, dst: Dest, vals: &mut Values) -> AggPacket {
        let a = self.pool.get(i);
        let t = a.task.expect("a kept result");
        let mut p = AggPacket::new(PacketKind::Ack, dst, t.job, t.psn, a.workers);
        (p.bitmap, p.elems, p.fp, p.data) = (full_bitmap(a.workers), a.elems, a.fp, vals.duplicate(a.data));
        p
    }
}

impl PoolProgram for SwitchMlSwitch {
    fn on_packet(&mut self, now: u64, _in_port: u16, pkt: AggPacket, vals: &mut Values, out: &mut Vec<PoolAction>) {
        let region = match self.regions.get(&pkt.job) {
            Some(r) if pkt.kind == PacketKind::Gradient && pkt.dst == Dest::Switch => *r,
            _ => {
                self.stats.passed_through += 1;
                out.push(PoolAction::Forward(pkt));
                return;
            }
        };
        let drop = |stats_field: &mut u64, vals: &mut Values, out: &mut Vec<PoolAction>| {
            *stats_field += 1;
            vals.release(pkt.data);
            out.push(PoolAction::Consume);
        };
        if !pkt.well_formed() || pkt.bitmap.count_ones() != 1 || pkt.workers != region.workers {
            return drop(&mut self.stats.malformed, vals, out);
        }
        let (i, other) = region.index(pkt.psn);
        let a = *self.pool.get(i);
        let seen = a.bitmap & pkt.bitmap != 0;
        let new_use = match a.task {
            None => true,
            Some(t) if t.psn == pkt.psn => false,
            // The slot's next use starts once its current one is complete.
            Some(t) if t.psn < pkt.psn && a.complete => true,
            Some(_) => return drop(&mut self.stats.stale, vals, out),
        };
        if !new_use && seen {
            if a.complete {
                // Retransmission after completion: the kept result, to this worker alone.
                self.stats.results_resent += 1;
                vals.release(pkt.data);
                out.push(PoolAction::Consume);
                let r = self.result(i, Dest::Worker(pkt.rank()), vals);
                out.push(PoolAction::Emit(r));
            } else {
                drop(&mut self.stats.duplicates, vals, out);
            }
            return;
        }
        if !new_use && a.complete {
            // Complete without this worker's bit: it was cleared by the worker's contribution
            // to the other set, so this packet is older than that one.
            return drop(&mut self.stats.stale, vals, out);
        }
        // First arrival of this worker's contribution to this use.
        let o = self.pool.get_mut(other);
        if o.complete {
            o.bitmap &= !pkt.bitmap;
        }
        if new_use {
            self.pool.free(now, i, vals);
            self.pool.reserve(now, i, &pkt);
        } else {
            self.pool.absorb(i, &pkt, vals);
        }
        self.stats.aggregated += 1;
        out.push(PoolAction::Consume);
        let a = self.pool.get_mut(i);
        if a.count >= region.workers {
            a.complete = true;
            self.stats.completed += 1;
            let r = self.result(i, Dest::Workers, vals);
            out.push(PoolAction::Emit(r));
        }
    }
    fn pool(&self) -> &AggregatorPool {
        &self.pool
    }
    fn pool_mut(&mut self) -> &mut AggregatorPool {
        &mut self.pool
    }
    fn stats(&self) -> &PoolStats {
        &self.stats
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pool::testkit::{assert_carries, fp_of, grad, sum_of, ELEMS};
    use crate::pool::Task;

    const JOB: u16 = 1;

    /// 8 aggregators; job 1 has 2 slots per set at offset 2: PSN 0 → aggregator 2 (set 0),
    /// 1 → 3, 2 → 4 (set 1), 3 → 5, 4 → 2 again.
    fn switch() -> (SwitchMlSwitch, Values, Vec<PoolAction>) {
        let r = Region { job: JOB, offset: 2, slots: 2, workers: 3 };
        (SwitchMlSwitch::new(8, &[r]).unwrap(), Values::new(ELEMS), Vec::new())
    }

    fn send(s: &mut SwitchMlSwitch, v: &mut Values, psn: u32, rank: u16, port: u16) -> Vec<PoolAction> {
        let mut out = Vec::new();
        let g = grad(JOB, psn, rank, 3, v);
        s.on_packet(0, port, g, v, &mut out);
        out
    }

    fn emitted(out: &[PoolAction]) -> AggPacket {
        match out {
            [PoolAction::Consume, PoolAction::Emit(p)] => *p,
            _ => panic!("expected consume + emit, got {out:?}"),
        }
    }

    #[test]
    fn first_next_and_last_packet_then_multicast_keeping_the_result() {
        let (mut s, mut v, _) = switch();
        assert_eq!(s.region(JOB).unwrap().index(0), (2, 4));
        assert_eq!(send(&mut s, &mut v, 0, 0, 1), vec![PoolAction::Consume]);
        let a = *s.pool().get(2);
        assert_eq!(
            (a.task, a.bitmap, a.count, a.complete, a.fp),
            (Some(Task { job: JOB, psn: 0 }), 0b001, 1, false, fp_of(0b001))
        );
        assert_eq!(v.get(a.data), &sum_of(0b001)[..]);
        assert_eq!(send(&mut s, &mut v, 0, 1, 2), vec![PoolAction::Consume]);
        assert_eq!((s.pool().get(2).bitmap, s.pool().get(2).count), (0b011, 2));
        let out = send(&mut s, &mut v, 0, 2, 3);
        let ack = emitted(&out);
        assert_eq!((ack.kind, ack.dst, ack.psn), (PacketKind::Ack, Dest::Workers, 0));
        assert_carries(&ack, 0b111, &v);
        let a = *s.pool().get(2);
        assert!(a.complete, "the result stays as the shadow copy");
        assert_eq!((a.count, a.fp), (3, fp_of(0b111)));
        assert_eq!(v.get(a.data), &sum_of(0b111)[..]);
        assert_eq!((s.pool().in_use(), s.stats().aggregated, s.stats().completed), (1, 3, 1));
        assert_eq!(v.live, 2, "kept result + the multicast's copy");
    }

    #[test]
    fn retransmission_before_completion_is_dropped_after_completion_gets_the_result() {
        let (mut s, mut v, _) = switch();
        send(&mut s, &mut v, 1, 0, 1);
        let before = *s.pool().get(3);
        assert_eq!(send(&mut s, &mut v, 1, 0, 1), vec![PoolAction::Consume], "an ignored duplicate");
        assert_eq!(*s.pool().get(3), before);
        assert_eq!(s.stats().duplicates, 1);
        send(&mut s, &mut v, 1, 1, 2);
        send(&mut s, &mut v, 1, 2, 3);
        let again = emitted(&send(&mut s, &mut v, 1, 1, 2));
        assert_eq!(
            (again.kind, again.dst, again.psn),
            (PacketKind::Ack, Dest::Worker(1), 1),
            "unicast to the worker that asked"
        );
        assert_carries(&again, 0b111, &v);
        assert_eq!((s.stats().results_resent, s.stats().aggregated), (1, 3));
    }

    #[test]
    fn both_sets_slot_reuse_and_retransmission_from_the_previous_set() {
        let (mut s, mut v, _) = switch();
        for r in 0..3 {
            send(&mut s, &mut v, 0, r, r);
        }
        // Workers 0 and 2 got PSN 0's result and send PSN 2: same slot, set 1. Their bits in set
        // 0 are cleared (they will not ask for PSN 0 again).
        assert_eq!(send(&mut s, &mut v, 2, 0, 0), vec![PoolAction::Consume]);
        assert_eq!(send(&mut s, &mut v, 2, 2, 2), vec![PoolAction::Consume]);
        assert_eq!((s.pool().get(4).task, s.pool().get(4).bitmap), (Some(Task { job: JOB, psn: 2 }), 0b101));
        assert_eq!((s.pool().get(2).bitmap, s.pool().get(2).complete), (0b010, true));
        // Worker 1 lost PSN 0's result: set 0 still has it.
        let r = emitted(&send(&mut s, &mut v, 0, 1, 1));
        assert_eq!((r.dst, r.psn), (Dest::Worker(1), 0));
        assert_carries(&r, 0b111, &v);
        // Worker 1 moves on and completes PSN 2 in set 1.
        let ack = emitted(&send(&mut s, &mut v, 2, 1, 1));
        assert_eq!((ack.dst, ack.psn), (Dest::Workers, 2));
        assert_carries(&ack, 0b111, &v);
        assert_eq!(s.pool().get(2).bitmap, 0);
        // PSN 4 reuses set 0's aggregator: the old result is overwritten by the first packet.
        assert_eq!(send(&mut s, &mut v, 4, 2, 2), vec![PoolAction::Consume]);
        let a = *s.pool().get(2);
        assert_eq!(
            (a.task, a.bitmap, a.count, a.complete, a.fp),
            (Some(Task { job: JOB, psn: 4 }), 0b100, 1, false, fp_of(0b100))
        );
        assert_eq!(v.get(a.data), &sum_of(0b100)[..]);
        assert_eq!(s.pool().in_use(), 2);
        // PSN 0 again (older than the slot's use) and PSN 8 (its predecessor PSN 4 is not
        // complete): both stale, dropped.
        assert_eq!(send(&mut s, &mut v, 0, 1, 1), vec![PoolAction::Consume]);
        assert_eq!(send(&mut s, &mut v, 8, 0, 0), vec![PoolAction::Consume]);
        assert_eq!(s.stats().stale, 2);
        assert_eq!(*s.pool().get(2), a);
        s.release_job(10, JOB, &mut v);
        // What is left is the three results emitted (PSN 0's multicast, its unicast, PSN 2's).
        assert_eq!((s.pool().in_use(), v.live), (0, 3));
    }

    #[test]
    fn non_aggregation_traffic_and_jobs_without_a_region_pass_through() {
        let (mut s, mut v, mut out) = switch();
        let other = AggPacket::new(PacketKind::Other, Dest::Worker(3), 0, 0, 1);
        let foreign = grad(9, 0, 0, 3, &mut v);
        let ack = AggPacket::new(PacketKind::Ack, Dest::Workers, JOB, 0, 3);
        for p in [other, foreign, ack] {
            out.clear();
            s.on_packet(0, 4, p, &mut v, &mut out);
            assert_eq!(out, vec![PoolAction::Forward(p)]);
        }
        assert_eq!((s.pool().in_use(), s.stats().passed_through), (0, 3));
    }

    #[test]
    fn packets_of_one_job_on_different_ports_aggregate_alike() {
        let run = |ports: [u16; 3]| {
            let (mut s, mut v, _) = switch();
            let outs: Vec<Vec<PoolAction>> = (0..3).map(|r| send(&mut s, &mut v, 0, r, ports[r as usize])).collect();
            (outs, *s.pool().get(2), s.stats().clone())
        };
        assert_eq!(run([0, 0, 0]), run([5, 9, 2]), "the multicast group is the job's, not learnt from ports");
    }

    #[test]
    fn malformed_packets_and_bad_regions_are_refused() {
        let (mut s, mut v, mut out) = switch();
        let mut two = grad(JOB, 0, 0, 3, &mut v);
        two.bitmap = 0b11;
        s.on_packet(0, 0, two, &mut v, &mut out);
        assert_eq!((out.as_slice(), s.stats().malformed, v.live), (&[PoolAction::Consume][..], 1, 0));
        let r = |job, offset, slots, workers| Region { job, offset, slots, workers };
        assert!(SwitchMlSwitch::new(8, &[r(1, 0, 2, 2), r(2, 3, 2, 2)])
            .err()
            .unwrap()
            .contains("overlaps the region of job 1"));
        assert!(SwitchMlSwitch::new(8, &[r(1, 6, 2, 2)]).err().unwrap().starts_with("regions[0]: aggregators 6..10"));
        assert!(SwitchMlSwitch::new(8, &[r(1, 0, 2, 65)]).err().unwrap().starts_with("regions[0].workers"));
        assert!(SwitchMlSwitch::new(8, &[r(1, 0, 0, 2)]).err().unwrap().starts_with("regions[0].slots"));
        assert!(SwitchMlSwitch::new(8, &[r(1, 0, 1, 2), r(1, 2, 1, 2)]).err().unwrap().starts_with("regions[1].job"));
        let even = even_regions(16_339, &[(1, 8), (2, 8), (3, 4)]).unwrap();
        assert_eq!(
            even.iter().map(|r| (r.offset, r.slots)).collect::<Vec<_>>(),
            vec![(0, 2723), (5446, 2723), (10892, 2723)]
        );
        assert!(even_regions(5, &[(1, 2), (2, 2), (3, 2)]).unwrap_err().starts_with("aggregators:"));
    }
}
