//! ATP (Lao et al., NSDI'21) on the shared aggregator pool: statistical INA, first come first
//! served.
//!
//! The DSA paper (§II-A) describes it: "A packet with PSN is addressed to aggregator.index ←
//! Hash(JobID, PSN). From the perspective of an aggregator, it serves job packets with
//! First-Come-First-Serve (FCFS). The aggregator would detect addressing collisions (due to hash
//! collision), and pass the late-arrived packet to a fallback server." and "the gradient packet
//! reserves the aggregator, and the ACK packet releases the aggregator". The switch here:
//! - a worker's gradient finds its aggregator free: reserve it (JobID_PSN, bitmap, values);
//!   same task: add it unless its bit is already in the bitmap (a duplicate, dropped); at a full
//!   bitmap the aggregate goes to the PS and the aggregator waits, reserved, for the PS's ACK;
//! - another task holds it (a collision): forward the packet to the PS;
//! - a retransmission (`resend` set) always goes to the PS (counted in `resends`, not as a
//!   collision's fallback), and if its task holds the aggregator the resend forces the slot
//!   clear: any partial aggregate goes to the PS with it;
//! - the PS's ACK passing through frees the aggregator if its task holds it, and is multicast
//!   to the workers (the engine replicates a `Workers` packet).
//!
//! The PS side is [`crate::ps::AtpPs`].

use crate::pool::{
    full_bitmap, hash_index, AggPacket, AggregatorPool, Dest, PacketKind, PoolAction, PoolProgram, PoolStats,
};
use crate::Values;

pub struct AtpSwitch {
    pool: AggregatorPool,
    stats: PoolStats,
}

impl AtpSwitch {
    pub fn new(aggregators: u32) -> Result<AtpSwitch, String> {
        Ok(AtpSwitch { pool: AggregatorPool::new(aggregators)?, stats: PoolStats::default() })
    }

    fn gradient(&mut self, now: u64, pkt: AggPacket, vals: &mut Values, out: &mut Vec<PoolAction>) {
        let i = hash_index(pkt.task(), self.pool.len());
        let a = *self.pool.get(i);
        let to_ps = AggPacket { dst: Dest::Ps, ..pkt };
        if pkt.resend {
            out.push(PoolAction::Forward(to_ps));
            self.stats.resends += 1;
            if a.task == Some(pkt.task()) {
                self.stats.resend_clears += 1;
                if !a.complete && a.bitmap != 0 {
                    let partial = self.pool.take(i, PacketKind::Partial, Dest::Ps);
                    out.push(PoolAction::Emit(partial));
                }
                self.pool.free(now, i, vals);
            }
            return;
        }
        match a.task {
            None => self.pool.reserve(now, i, &pkt),
            Some(t) if t == pkt.task() => {
                if a.complete || a.bitmap & pkt.bitmap != 0 {
                    self.stats.duplicates += 1;
                    vals.release(pkt.data);
                    out.push(PoolAction::Consume);
                    return;
                }
                self.pool.absorb(i, &pkt, vals);
            }
            Some(_) => {
                self.stats.fallbacks += 1;
                out.push(PoolAction::Forward(to_ps));
                return;
            }
        }
        self.stats.aggregated += 1;
        out.push(PoolAction::Consume);
        let a = self.pool.get_mut(i);
        if a.bitmap == full_bitmap(a.workers) {
            a.complete = true;
            self.stats.completed += 1;
            let result = self.pool.take(i, PacketKind::Partial, Dest::Ps);
            out.push(PoolAction::Emit(result));
        }
    }
}

impl PoolProgram for AtpSwitch {
    fn on_packet(&mut self, now: u64, _in_port: u16, pkt: AggPacket, vals: &mut Values, out: &mut Vec<PoolAction>) {
        match (pkt.kind, pkt.dst) {
            (PacketKind::Gradient, Dest::Switch) => {
                if !pkt.well_formed() || pkt.bitmap.count_ones() != 1 {
                    self.stats.malformed += 1;
                    vals.release(pkt.data);
                    out.push(PoolAction::Consume);
                    return;
                }
                self.gradient(now, pkt, vals, out)
            }
            (PacketKind::Ack, Dest::Workers | Dest::Worker(_)) => {
                let i = hash_index(pkt.task(), self.pool.len());
                if self.pool.get(i).task == Some(pkt.task()) {
                    self.stats.ack_frees += 1;
                    self.pool.free(now, i, vals);
                }
                out.push(PoolAction::Forward(pkt));
            }
            _ => {
                self.stats.passed_through += 1;
                out.push(PoolAction::Forward(pkt));
            }
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
    use crate::pool::testkit::{assert_carries, colliding, fp_of, grad, ELEMS};
    use crate::pool::PsAction;
    use crate::pool::Task;
    use crate::ps::AtpPs;

    const N: u32 = 4;
    const T: Task = Task { job: 1, psn: 7 };

    fn send(s: &mut AtpSwitch, v: &mut Values, p: AggPacket) -> Vec<PoolAction> {
        let mut out = Vec::new();
        s.on_packet(0, p.rank(), p, v, &mut out);
        out
    }

    fn setup() -> (AtpSwitch, Values, u32) {
        (AtpSwitch::new(N).unwrap(), Values::new(ELEMS), hash_index(T, N))
    }

    #[test]
    fn first_next_last_packet_then_the_aggregate_goes_to_the_ps_and_its_ack_frees_the_aggregator() {
        let (mut s, mut v, i) = setup();
        let g = grad(1, 7, 0, 3, &mut v);
        assert_eq!(send(&mut s, &mut v, g), vec![PoolAction::Consume]);
        let a = *s.pool().get(i);
        assert_eq!((a.task, a.bitmap, a.complete, a.fp), (Some(T), 0b001, false, fp_of(0b001)));
        let g = grad(1, 7, 2, 3, &mut v);
        assert_eq!(send(&mut s, &mut v, g), vec![PoolAction::Consume]);
        let g = grad(1, 7, 1, 3, &mut v);
        let out = send(&mut s, &mut v, g);
        let [PoolAction::Consume, PoolAction::Emit(agg)] = out[..] else { panic!("{out:?}") };
        assert_eq!((agg.kind, agg.dst), (PacketKind::Partial, Dest::Ps));
        assert_carries(&agg, 0b111, &v);
        let a = *s.pool().get(i);
        assert_eq!(
            (a.task, a.complete, a.data, s.pool().in_use()),
            (Some(T), true, crate::NIL, 1),
            "held until the PS's ACK"
        );
        // A late duplicate while waiting: dropped.
        let g = grad(1, 7, 1, 3, &mut v);
        assert_eq!(send(&mut s, &mut v, g), vec![PoolAction::Consume]);
        assert_eq!(s.stats().duplicates, 1);
        // The PS completes it and acknowledges through the switch.
        let mut ps = AtpPs::new(1, 3).unwrap();
        let mut acts = Vec::new();
        ps.on_packet(0, agg, &mut v, &mut acts);
        let [PsAction::Send(ack)] = acts[..] else { panic!("{acts:?}") };
        assert_eq!((ack.kind, ack.dst, ack.psn), (PacketKind::Ack, Dest::Workers, 7));
        assert_carries(&ack, 0b111, &v);
        assert_eq!(send(&mut s, &mut v, ack), vec![PoolAction::Forward(ack)], "multicast on to the workers");
        assert_eq!((s.pool().in_use(), s.stats().ack_frees), (0, 1));
        // An ACK of a task the aggregator does not hold frees nothing.
        let g = grad(1, 7, 0, 3, &mut v);
        send(&mut s, &mut v, g);
        let other = AggPacket::new(PacketKind::Ack, Dest::Worker(2), 1, colliding(T, 1, N), 3);
        assert_eq!(send(&mut s, &mut v, other), vec![PoolAction::Forward(other)]);
        assert_eq!((s.pool().in_use(), s.stats().ack_frees), (1, 1));
    }

    #[test]
    fn a_collision_goes_to_the_ps_first_come_first_served() {
        let (mut s, mut v, i) = setup();
        let g = grad(1, 7, 0, 3, &mut v);
        send(&mut s, &mut v, g);
        let held = *s.pool().get(i);
        let q = colliding(T, 2, N);
        let c = grad(2, q, 1, 2, &mut v);
        assert_eq!(send(&mut s, &mut v, c), vec![PoolAction::Forward(AggPacket { dst: Dest::Ps, ..c })]);
        assert_eq!(*s.pool().get(i), held);
        assert_eq!(s.stats().fallbacks, 1);
    }

    #[test]
    fn a_resend_forces_the_slot_clear_and_takes_the_partial_to_the_ps() {
        let (mut s, mut v, i) = setup();
        for r in [0, 1] {
            let g = grad(1, 7, r, 3, &mut v);
            send(&mut s, &mut v, g);
        }
        let mut re = grad(1, 7, 2, 3, &mut v);
        re.resend = true;
        let out = send(&mut s, &mut v, re);
        let [PoolAction::Forward(fwd), PoolAction::Emit(partial)] = out[..] else { panic!("{out:?}") };
        assert_eq!(fwd, AggPacket { dst: Dest::Ps, ..re });
        assert_eq!((partial.kind, partial.dst), (PacketKind::Partial, Dest::Ps));
        assert_carries(&partial, 0b011, &v);
        assert_eq!((s.pool().in_use(), s.stats().resend_clears), (0, 1));
        // At the PS the two complete the task.
        let mut ps = AtpPs::new(1, 3).unwrap();
        let mut acts = Vec::new();
        ps.on_packet(0, fwd, &mut v, &mut acts);
        assert!(acts.is_empty());
        ps.on_packet(0, partial, &mut v, &mut acts);
        let [PsAction::Send(ack)] = acts[..] else { panic!("{acts:?}") };
        assert_carries(&ack, 0b111, &v);
        // A resend whose aggregator holds another task goes to the PS and clears nothing.
        let q = colliding(T, 2, N);
        let g = grad(2, q, 0, 2, &mut v);
        send(&mut s, &mut v, g);
        let mut re = grad(1, 7, 0, 3, &mut v);
        re.resend = true;
        assert_eq!(send(&mut s, &mut v, re), vec![PoolAction::Forward(AggPacket { dst: Dest::Ps, ..re })]);
        assert_eq!(s.pool().get(i).task, Some(Task { job: 2, psn: q }));
        // Resends are counted as resends, never as collisions' fallbacks (one clear, one not).
        assert_eq!((s.stats().resends, s.stats().resend_clears, s.stats().fallbacks), (2, 1, 0));
        // A resend that finds its aggregator free: to the PS, still no fallback.
        let mut s = AtpSwitch::new(N).unwrap();
        let mut re = grad(1, 7, 1, 3, &mut v);
        re.resend = true;
        assert_eq!(send(&mut s, &mut v, re), vec![PoolAction::Forward(AggPacket { dst: Dest::Ps, ..re })]);
        assert_eq!((s.stats().resends, s.stats().fallbacks, s.pool().in_use()), (1, 0, 0));
    }

    #[test]
    fn the_ps_discards_what_it_cannot_add_exactly_and_answers_late_workers() {
        let mut v = Values::new(ELEMS);
        let mut ps = AtpPs::new(1, 3).unwrap();
        let mut acts = Vec::new();
        let g0 = grad(1, 7, 0, 3, &mut v);
        ps.on_packet(0, g0, &mut v, &mut acts);
        assert_eq!(ps.dict.entry(7).unwrap().bitmap, 0b001);
        // A partial aggregate of ranks 0 and 1: rank 0 is already counted, so it is discarded.
        let mut p01 = grad(1, 7, 0, 3, &mut v);
        let g1 = grad(1, 7, 1, 3, &mut v);
        (p01.bitmap, p01.fp) = (0b011, fp_of(0b011));
        v.absorb(p01.data, g1.data);
        ps.on_packet(0, p01, &mut v, &mut acts);
        let dup = grad(1, 7, 0, 3, &mut v);
        ps.on_packet(0, dup, &mut v, &mut acts);
        assert!(acts.is_empty());
        let e = ps.dict.entry(7).unwrap();
        assert_eq!((e.bitmap, e.fp), (0b001, fp_of(0b001)));
        assert_eq!((ps.dict.stats.discarded, ps.dict.stats.duplicates), (1, 1));
        for r in [1, 2] {
            let g = grad(1, 7, r, 3, &mut v);
            ps.on_packet(0, g, &mut v, &mut acts);
        }
        let [PsAction::Send(ack)] = acts[..] else { panic!("{acts:?}") };
        assert_carries(&ack, 0b111, &v);
        assert!(ps.dict.entry(7).is_none());
        v.release(ack.data);
        // After completion: a worker's resend gets the result again, a partial is dropped.
        acts.clear();
        let mut re = grad(1, 7, 2, 3, &mut v);
        re.resend = true;
        ps.on_packet(0, AggPacket { dst: Dest::Ps, ..re }, &mut v, &mut acts);
        let [PsAction::Send(again)] = acts[..] else { panic!("{acts:?}") };
        assert_eq!(again.dst, Dest::Worker(2));
        assert_carries(&again, 0b111, &v);
        v.release(again.data);
        acts.clear();
        let mut late = grad(1, 7, 1, 3, &mut v);
        late.kind = PacketKind::Partial;
        ps.on_packet(0, late, &mut v, &mut acts);
        assert!(acts.is_empty() && ps.dict.entry(7).is_none());
        assert_eq!(ps.dict.stats.discarded, 2);
        ps.dict.forget_results_below(8, &mut v);
        assert_eq!(v.live, 0, "every value slot accounted for");
    }

    #[test]
    fn packets_of_one_job_on_different_ports_aggregate_alike() {
        let run = |ports: [u16; 3]| {
            let (mut s, mut v, i) = setup();
            let outs: Vec<Vec<PoolAction>> = (0..3)
                .map(|r| {
                    let g = grad(1, 7, r, 3, &mut v);
                    let mut out = Vec::new();
                    s.on_packet(0, ports[r as usize], g, &mut v, &mut out);
                    out
                })
                .collect();
            (outs, *s.pool().get(i))
        };
        assert_eq!(run([0, 0, 0]), run([3, 8, 1]));
    }

    #[test]
    fn other_traffic_passes_through() {
        let (mut s, mut v, _) = setup();
        for p in [
            AggPacket::new(PacketKind::Other, Dest::Worker(1), 0, 0, 1),
            AggPacket { dst: Dest::Ps, ..grad(1, 7, 0, 3, &mut v) },
        ] {
            assert_eq!(send(&mut s, &mut v, p), vec![PoolAction::Forward(p)]);
        }
        assert_eq!((s.pool().in_use(), s.stats().passed_through), (0, 2));
    }
}
