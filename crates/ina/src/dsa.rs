//! DSA's switch program (seed 001, Wang et al., ICNP 2023, §III–V): statistical INA with
//! preemption by priority.
//!
//! On a worker's gradient packet (§III-B, "Switch and PS aggregating packets with
//! preemption"), the aggregator is `Hash(JobID, PSN)`:
//! - "If the aggregator is empty, the packet tensor_values, JobID_PSN, bitmap and the priority
//!   are written into the aggregator."
//! - Same JobID_PSN: "their bitmaps are further compared (i.e., agtr.bitmap ANDing pkt.bitmap):
//!   if the comparison returns 0 … the packet is accumulated to the aggregator; otherwise, the
//!   packet has arrived before, and it should not participate in the aggregation again"
//!   (deduplication; the duplicate is dropped).
//! - Another JobID_PSN: "The priority fields of the packet and the aggregator are compared, and
//!   the one with a higher priority is kept in the switch. If the aggregator wins, the packet is
//!   forwarded to the PS; if the packet wins, the packet and the aggregator's contents are
//!   swapped, and then the packet is forwarded to the PS." (§VI: the swap is a resubmit on
//!   Tofino; here it is one step.) On a lost preemption "the aggregator's priority is halved,
//!   i.e., shifting one bit to the right" (§V, priority downgrading). Ties keep the holder. The
//!   rule is a [`Preemption`]: DSA's priorities, or a strawman of §VII-C.
//! - "if the bitmap is full, indicating the aggregation is complete, an ACK packet is
//!   constructed and returned to workers … multicast to all workers. On the switch, when the ACK
//!   packet is constructed, the aggregator is deallocated for future use".
//!
//! A reminder from the PS (§IV-B, Fig. 4 ⑤–⑥) "fetches the aggregated result … from the switch
//! to the PS": the aggregator's partial aggregate goes to the PS and the aggregator is freed
//! (nothing is sent when it holds another task or none). ACKs from the PS, fetch requests to the
//! workers and packets addressed to the PS pass through untouched: §III-B says the PS's ACK "as
//! it passes the switch, it is duplicated and multicast", not that it frees anything. So a
//! retransmission that arrives after its task completed holds an aggregator until a collision
//! takes it (the "memory leak" of §IV-A, which §V leaves to priority downgrading: each lost
//! preemption halves the holder's priority until a packet wins and evicts it to the PS, which
//! drops it as already complete).
//!
//! The PS side is [`crate::ps::DsaPs`]; the worker's side of the reminder (after
//! [`REMINDER_AFTER_RETRANSMISSIONS`] retransmissions it notifies the PS) is the transport's.

use crate::policy::Preemption;
use crate::pool::{
    full_bitmap, hash_index, AggPacket, AggregatorPool, Dest, PacketKind, PoolAction, PoolProgram, PoolStats,
};
use crate::Values;

/// "After three retransmissions, the worker sends a special reminder notification to the PS"
/// (§IV-B).
pub const REMINDER_AFTER_RETRANSMISSIONS: u32 = 3;

pub struct DsaSwitch {
    pool: AggregatorPool,
    rule: Preemption,
    /// Collisions so far (input of the strawman's coin).
    collisions: u64,
    stats: PoolStats,
}

impl DsaSwitch {
    pub fn new(aggregators: u32, rule: Preemption) -> Result<DsaSwitch, String> {
        Ok(DsaSwitch { pool: AggregatorPool::new(aggregators)?, rule, collisions: 0, stats: PoolStats::default() })
    }

    /// Full bitmap: the ACK to the workers, the aggregator freed.
    fn complete_if_full(&mut self, now: u64, i: u32, vals: &mut Values, out: &mut Vec<PoolAction>) {
        let a = self.pool.get(i);
        if a.bitmap == full_bitmap(a.workers) {
            self.stats.completed += 1;
            let ack = self.pool.take(i, PacketKind::Ack, Dest::Workers);
            self.pool.free(now, i, vals);
            out.push(PoolAction::Emit(ack));
        }
    }

    fn gradient(&mut self, now: u64, pkt: AggPacket, vals: &mut Values, out: &mut Vec<PoolAction>) {
        let i = hash_index(pkt.task(), self.pool.len());
        let a = *self.pool.get(i);
        match a.task {
            None => self.pool.reserve(now, i, &pkt),
            Some(t) if t == pkt.task() => {
                if a.bitmap & pkt.bitmap != 0 {
                    self.stats.duplicates += 1;
                    vals.release(pkt.data);
                    out.push(PoolAction::Consume);
                    return;
                }
                self.pool.absorb(i, &pkt, vals);
            }
            Some(held) => {
                self.collisions += 1;
                if self.rule.packet_wins(pkt.task(), pkt.priority, held, a.priority, self.collisions) {
                    // Swap: the packet takes the aggregator, the evicted partial goes on to the PS.
                    self.stats.preemptions += 1;
                    self.stats.aggregated += 1;
                    let evicted = self.pool.take(i, PacketKind::Partial, Dest::Ps);
                    self.pool.reserve(now, i, &pkt);
                    out.push(PoolAction::Forward(evicted));
                    self.complete_if_full(now, i, vals, out);
                } else {
                    self.stats.fallbacks += 1;
                    self.stats.downgrades += 1;
                    self.pool.get_mut(i).priority >>= 1;
                    out.push(PoolAction::Forward(AggPacket { dst: Dest::Ps, ..pkt }));
                }
                return;
            }
        }
        self.stats.aggregated += 1;
        out.push(PoolAction::Consume);
        self.complete_if_full(now, i, vals, out);
    }

    fn reminder(&mut self, now: u64, pkt: AggPacket, vals: &mut Values, out: &mut Vec<PoolAction>) {
        let i = hash_index(pkt.task(), self.pool.len());
        vals.release(pkt.data);
        out.push(PoolAction::Consume);
        if self.pool.get(i).task == Some(pkt.task()) {
            self.stats.reminders_fetched += 1;
            let partial = self.pool.take(i, PacketKind::Partial, Dest::Ps);
            self.pool.free(now, i, vals);
            out.push(PoolAction::Emit(partial));
        } else {
            self.stats.reminders_empty += 1;
        }
    }
}

impl PoolProgram for DsaSwitch {
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
            (PacketKind::Reminder, Dest::Switch) => self.reminder(now, pkt, vals, out),
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
    use crate::pool::{PsAction, Task};
    use crate::ps::DsaPs;

    const N: u32 = 4;
    const T: Task = Task { job: 1, psn: 7 };

    fn send(s: &mut DsaSwitch, v: &mut Values, p: AggPacket) -> Vec<PoolAction> {
        let mut out = Vec::new();
        s.on_packet(0, p.rank(), p, v, &mut out);
        out
    }

    fn prio(mut p: AggPacket, priority: u32) -> AggPacket {
        p.priority = priority;
        p
    }

    fn setup() -> (DsaSwitch, Values, u32) {
        (DsaSwitch::new(N, Preemption::Priority).unwrap(), Values::new(ELEMS), hash_index(T, N))
    }

    #[test]
    fn first_next_last_packet_the_switch_acks_and_frees_and_duplicates_are_ignored() {
        let (mut s, mut v, i) = setup();
        let g = prio(grad(1, 7, 2, 3, &mut v), 40);
        assert_eq!(send(&mut s, &mut v, g), vec![PoolAction::Consume]);
        let a = *s.pool().get(i);
        assert_eq!((a.task, a.bitmap, a.priority, a.fp), (Some(T), 0b100, 40, fp_of(0b100)));
        let g = prio(grad(1, 7, 0, 3, &mut v), 40);
        assert_eq!(send(&mut s, &mut v, g), vec![PoolAction::Consume]);
        // Deduplication: "agtr.bitmap ANDing pkt.bitmap" is not 0.
        let g = prio(grad(1, 7, 2, 3, &mut v), 40);
        assert_eq!(send(&mut s, &mut v, g), vec![PoolAction::Consume]);
        assert_eq!((s.pool().get(i).bitmap, s.pool().get(i).fp, s.stats().duplicates), (0b101, fp_of(0b101), 1));
        let g = prio(grad(1, 7, 1, 3, &mut v), 40);
        let out = send(&mut s, &mut v, g);
        let [PoolAction::Consume, PoolAction::Emit(ack)] = out[..] else { panic!("{out:?}") };
        assert_eq!((ack.kind, ack.dst, ack.job, ack.psn), (PacketKind::Ack, Dest::Workers, 1, 7));
        assert_carries(&ack, 0b111, &v);
        assert_eq!((s.pool().in_use(), s.stats().completed, s.stats().aggregated), (0, 1, 3));
        v.release(ack.data);
        assert_eq!(v.live, 0);
    }

    #[test]
    fn preemption_won_swaps_lost_downgrades_until_a_packet_wins() {
        let (mut s, mut v, i) = setup();
        let g = prio(grad(1, 7, 0, 3, &mut v), 10);
        let held_values = g.data;
        send(&mut s, &mut v, g);
        // Won: the packet takes the aggregator, the partial goes on to the PS (the swap).
        let q = colliding(T, 2, N);
        let w = prio(grad(2, q, 1, 2, &mut v), 20);
        let out = send(&mut s, &mut v, w);
        let [PoolAction::Forward(evicted)] = out[..] else { panic!("{out:?}") };
        assert_eq!(
            (evicted.kind, evicted.dst, evicted.task(), evicted.priority),
            (PacketKind::Partial, Dest::Ps, T, 10)
        );
        assert_eq!(evicted.data, held_values, "the aggregator's values left with the packet");
        assert_carries(&evicted, 0b001, &v);
        let a = *s.pool().get(i);
        assert_eq!((a.task, a.bitmap, a.priority, a.data), (Some(Task { job: 2, psn: q }), 0b010, 20, w.data));
        // Lost (5 < 20, 5 < 10, 5 = 5): each loser goes to the PS and halves the holder's priority.
        let r = colliding(T, 3, N);
        for expect in [10, 5, 2] {
            let l = prio(grad(3, r, 0, 2, &mut v), 5);
            assert_eq!(send(&mut s, &mut v, l), vec![PoolAction::Forward(AggPacket { dst: Dest::Ps, ..l })]);
            assert_eq!((s.pool().get(i).priority, s.pool().get(i).task), (expect, Some(Task { job: 2, psn: q })));
        }
        assert_eq!((s.stats().fallbacks, s.stats().downgrades), (3, 3));
        // 5 > 2: the holder is evicted.
        let l = prio(grad(3, r, 0, 2, &mut v), 5);
        let out = send(&mut s, &mut v, l);
        let [PoolAction::Forward(evicted)] = out[..] else { panic!("{out:?}") };
        assert_eq!((evicted.task(), evicted.priority, evicted.bitmap), (Task { job: 2, psn: q }, 2, 0b010));
        assert_eq!(
            (s.pool().get(i).task, s.stats().preemptions, s.pool().in_use()),
            (Some(Task { job: 3, psn: r }), 2, 1)
        );
    }

    #[test]
    fn a_winner_that_fills_its_bitmap_completes_at_once_and_strawmen_ignore_priorities() {
        let mut v = Values::new(ELEMS);
        let mut s = DsaSwitch::new(N, Preemption::Always).unwrap();
        let g = prio(grad(1, 7, 0, 3, &mut v), 1000);
        send(&mut s, &mut v, g);
        let solo = prio(grad(5, colliding(T, 5, N), 0, 1, &mut v), 1);
        let out = send(&mut s, &mut v, solo);
        let [PoolAction::Forward(evicted), PoolAction::Emit(ack)] = out[..] else { panic!("{out:?}") };
        assert_eq!((evicted.task(), ack.job, ack.dst, s.pool().in_use()), (T, 5, Dest::Workers, 0));
        // The coin: same seed, same decisions.
        let decide = |seed| {
            let mut v = Values::new(0);
            let mut s = DsaSwitch::new(1, Preemption::Coin { seed }).unwrap();
            (0..64u32)
                .map(|k| {
                    let g = grad(1 + (k % 2) as u16, k, 0, 2, &mut v);
                    send(&mut s, &mut v, g);
                    s.pool().get(0).task == Some(g.task())
                })
                .collect::<Vec<_>>()
        };
        assert_eq!(decide(3), decide(3));
        assert_ne!(decide(3), decide(4));
    }

    #[test]
    fn a_reminder_fetches_the_partial_and_frees_the_aggregator_and_ps_traffic_passes() {
        let (mut s, mut v, i) = setup();
        let g = prio(grad(1, 7, 1, 3, &mut v), 9);
        send(&mut s, &mut v, g);
        let other = AggPacket::new(PacketKind::Reminder, Dest::Switch, 2, colliding(T, 2, N), 2);
        assert_eq!(send(&mut s, &mut v, other), vec![PoolAction::Consume]);
        assert_eq!((s.pool().in_use(), s.stats().reminders_empty), (1, 1));
        // Passing through: the PS's ACK (it frees nothing), a fetch, a fallback to the PS, other traffic.
        let ack = AggPacket::new(PacketKind::Ack, Dest::Workers, 1, 7, 3);
        let fetch = AggPacket::new(PacketKind::Fetch, Dest::Workers, 1, 7, 3);
        let to_ps = AggPacket { dst: Dest::Ps, ..grad(1, 7, 0, 3, &mut v) };
        let bg = AggPacket::new(PacketKind::Other, Dest::Worker(0), 0, 0, 1);
        for p in [ack, fetch, to_ps, bg] {
            assert_eq!(send(&mut s, &mut v, p), vec![PoolAction::Forward(p)]);
        }
        v.release(to_ps.data);
        assert_eq!((s.pool().in_use(), s.stats().passed_through), (1, 4));
        let rem = AggPacket::new(PacketKind::Reminder, Dest::Switch, 1, 7, 3);
        let out = send(&mut s, &mut v, rem);
        let [PoolAction::Consume, PoolAction::Emit(p)] = out[..] else { panic!("{out:?}") };
        assert_eq!((p.kind, p.dst), (PacketKind::Partial, Dest::Ps));
        assert_carries(&p, 0b010, &v);
        assert_eq!((s.pool().get(i).task, s.stats().reminders_fetched), (None, 1));
    }

    #[test]
    fn packets_of_one_job_on_different_ports_aggregate_alike() {
        let run = |ports: [u16; 3]| {
            let (mut s, mut v, i) = setup();
            let outs: Vec<Vec<PoolAction>> = (0..3)
                .map(|r| {
                    let g = prio(grad(1, 7, r, 3, &mut v), 3);
                    let mut out = Vec::new();
                    s.on_packet(0, ports[r as usize], g, &mut v, &mut out);
                    out
                })
                .collect();
            (outs, *s.pool().get(i), s.stats().clone())
        };
        assert_eq!(run([0, 0, 0]), run([3, 8, 1]));
    }

    /// A minimal star: switch, one PS per job; returns what reached the workers.
    struct Star {
        s: DsaSwitch,
        ps: Vec<DsaPs>,
        v: Values,
        timers: Vec<(u64, u16, u64)>,
        to_workers: Vec<AggPacket>,
    }

    impl Star {
        fn at_switch(&mut self, now: u64, p: AggPacket) {
            let mut out = Vec::new();
            self.s.on_packet(now, 0, p, &mut self.v, &mut out);
            for a in out {
                match a {
                    PoolAction::Consume => {}
                    PoolAction::Forward(p) | PoolAction::Emit(p) => match p.dst {
                        Dest::Ps => self.at_ps(now, p),
                        _ => self.to_workers.push(p),
                    },
                }
            }
        }
        fn at_ps(&mut self, now: u64, p: AggPacket) {
            let mut acts = Vec::new();
            let k = (p.job - 1) as usize;
            self.ps[k].on_packet(now, p, &mut self.v, &mut acts);
            self.ps_actions(now, p.job, acts);
        }
        fn ps_actions(&mut self, now: u64, job: u16, acts: Vec<PsAction>) {
            for a in acts {
                match a {
                    PsAction::Send(p) => self.at_switch(now, p),
                    PsAction::Timer { at, token } => self.timers.push((at, job, token)),
                }
            }
        }
        fn fire(&mut self, now: u64) {
            let due: Vec<_> = self.timers.iter().copied().filter(|t| t.0 <= now).collect();
            self.timers.retain(|t| t.0 > now);
            for (_, job, token) in due {
                let mut acts = Vec::new();
                self.ps[(job - 1) as usize].on_timer(now, token, &mut acts);
                self.ps_actions(now, job, acts);
            }
        }
    }

    #[test]
    fn figure_3_preemption_then_the_ps_reminder_completes_the_split_task() {
        // Fig. 3: job 1 has W1..W4 (ranks 0..3), job 2 has W5, W6 (ranks 0, 1) with a higher
        // priority and a PSN on the same aggregator; W3 and W4 are stragglers.
        let q = colliding(T, 2, N);
        let ps = vec![DsaPs::new(1, 4, 1_000).unwrap(), DsaPs::new(2, 2, 1_000).unwrap()];
        let mut st = Star {
            s: DsaSwitch::new(N, Preemption::Priority).unwrap(),
            ps,
            v: Values::new(ELEMS),
            timers: Vec::new(),
            to_workers: Vec::new(),
        };
        let i = hash_index(T, N);
        for r in [0, 1] {
            let g = prio(grad(1, 7, r, 4, &mut st.v), 1);
            st.at_switch(0, g); // ① ②
        }
        let g5 = prio(grad(2, q, 0, 2, &mut st.v), 2);
        st.at_switch(10, g5); // ③ ④: g1 + g2 to the PS
        let e = *st.ps[0].dict.entry(7).unwrap();
        assert_eq!((e.bitmap, e.fp), (0b0011, fp_of(0b0011)));
        assert_eq!(st.timers, vec![(1_010, 1, 7 << 32 | 1)]);
        let g6 = prio(grad(2, q, 1, 2, &mut st.v), 2);
        st.at_switch(20, g6); // ⑤ ⑥: job 2 complete on the switch
        let [ack2] = st.to_workers[..] else { panic!("{:?}", st.to_workers) };
        assert_eq!((ack2.job, ack2.dst), (2, Dest::Workers));
        assert_carries(&ack2, 0b11, &st.v);
        assert_eq!(st.s.pool().in_use(), 0);
        for r in [2, 3] {
            let g = prio(grad(1, 7, r, 4, &mut st.v), 1);
            st.at_switch(30, g); // ⑦ ⑧: the aggregator is reserved again
        }
        assert_eq!((st.s.pool().get(i).task, st.s.pool().get(i).bitmap), (Some(T), 0b1100));
        st.fire(1_010); // ⑨: the entry's timeout fetches the switch's partial
        let acks: Vec<_> = st.to_workers.iter().filter(|p| p.kind == PacketKind::Ack && p.job == 1).collect();
        let [ack1] = acks[..] else { panic!("{:?}", st.to_workers) };
        assert_carries(ack1, 0b1111, &st.v); // ⑩
        assert!(st.to_workers.iter().any(|p| p.kind == PacketKind::Fetch && p.job == 1), "the workers were asked too");
        assert_eq!((st.s.pool().in_use(), st.ps[0].dict.pending().count()), (0, 0));
        assert_eq!(
            (st.ps[0].dict.stats.reminders, st.s.stats().reminders_fetched, st.s.stats().preemptions),
            (1, 1, 1)
        );
        st.fire(u64::MAX);
        assert!(st.timers.is_empty(), "no timer re-armed for a completed entry");
    }

    #[test]
    fn figure_4_a_lost_preemption_then_the_entry_timeout_fetches_the_switchs_partial() {
        // Fig. 4: g1 loses the aggregator (held by a higher-priority task) and reaches the PS
        // (① ②); the holder completes and frees it; g2 and g3 reserve it and wait for g1 (③);
        // the entry's timeout (④) sends a reminder (⑤) that fetches g2 + g3 (⑥); the entry
        // is full (⑦) and the PS multicasts the result (⑧).
        let q = colliding(T, 2, N);
        let ps = vec![DsaPs::new(1, 3, 5_000).unwrap(), DsaPs::new(2, 1, 5_000).unwrap()];
        let mut st = Star {
            s: DsaSwitch::new(N, Preemption::Priority).unwrap(),
            ps,
            v: Values::new(ELEMS),
            timers: Vec::new(),
            to_workers: Vec::new(),
        };
        let hold = prio(grad(2, q, 0, 2, &mut st.v), 50);
        st.at_switch(0, hold);
        let g1 = prio(grad(1, 7, 0, 3, &mut st.v), 10);
        st.at_switch(1, g1);
        assert_eq!(st.s.pool().get(hash_index(T, N)).priority, 25, "downgraded by the failed preemption");
        assert_eq!(st.ps[0].dict.entry(7).unwrap().bitmap, 0b001);
        let done = prio(grad(2, q, 1, 2, &mut st.v), 50);
        st.at_switch(2, done);
        assert_eq!(st.s.pool().in_use(), 0);
        for r in [1, 2] {
            let g = prio(grad(1, 7, r, 3, &mut st.v), 10);
            st.at_switch(3, g);
        }
        assert_eq!(st.s.pool().get(hash_index(T, N)).bitmap, 0b110);
        assert!(!st.to_workers.iter().any(|p| p.job == 1), "nothing for job 1 before the timeout");
        st.fire(5_001);
        let acks: Vec<_> = st.to_workers.iter().filter(|p| p.kind == PacketKind::Ack && p.job == 1).collect();
        let [ack] = acks[..] else { panic!("{:?}", st.to_workers) };
        assert_eq!(ack.dst, Dest::Workers);
        assert_carries(ack, 0b111, &st.v);
        assert_eq!((st.s.pool().in_use(), st.ps[0].dict.pending().count()), (0, 0));
    }

    #[test]
    fn a_workers_reminder_notice_after_a_lost_ack_recovers_the_result() {
        // All-case analysis (§IV-C), type I: the switch completed the task but one worker's ACK
        // was lost; its retransmission reserves an aggregator that never fills; after three
        // retransmissions it notifies the PS, whose reminder fetches the switch's partial and
        // every worker's original packet.
        let ps = vec![DsaPs::new(1, 2, 1_000).unwrap()];
        let mut st = Star {
            s: DsaSwitch::new(N, Preemption::Priority).unwrap(),
            ps,
            v: Values::new(ELEMS),
            timers: Vec::new(),
            to_workers: Vec::new(),
        };
        for r in [0, 1] {
            let g = grad(1, 7, r, 2, &mut st.v);
            st.at_switch(0, g);
        }
        assert_eq!(st.to_workers.len(), 1, "the switch's ACK (lost on the way to rank 1)");
        st.to_workers.clear();
        for _ in 0..REMINDER_AFTER_RETRANSMISSIONS {
            let g = grad(1, 7, 1, 2, &mut st.v);
            st.at_switch(100, g);
        }
        assert_eq!((st.s.pool().in_use(), st.s.stats().duplicates), (1, 2), "the leaked aggregator of §IV-A");
        let mut notice = AggPacket::new(PacketKind::ReminderNotice, Dest::Ps, 1, 7, 2);
        notice.bitmap = 0b10;
        st.at_switch(200, notice);
        assert_eq!(st.s.pool().in_use(), 0, "the reminder fetched it");
        let fetch = *st.to_workers.iter().find(|p| p.kind == PacketKind::Fetch).unwrap();
        assert_eq!((fetch.job, fetch.psn, fetch.dst), (1, 7, Dest::Workers));
        // Both workers answer the fetch with their original packets, addressed to the PS.
        for r in [0, 1] {
            let g = AggPacket { dst: Dest::Ps, ..grad(1, 7, r, 2, &mut st.v) };
            st.at_switch(300, g);
        }
        // Rank 0's packet completes the entry (rank 1's came from the switch): the ACK is
        // multicast; rank 1's own packet then finds the PSN complete and is dropped.
        let acks: Vec<_> = st.to_workers.iter().filter(|p| p.kind == PacketKind::Ack).copied().collect();
        let [ack] = acks[..] else { panic!("{acks:?}") };
        assert_eq!(ack.dst, Dest::Workers);
        assert_carries(&ack, 0b11, &st.v);
        assert_eq!(
            (st.ps[0].dict.stats.completed, st.ps[0].dict.stats.re_acks, st.ps[0].dict.stats.duplicates),
            (1, 0, 1)
        );
        // A notice for a PSN the PS completed: the result again, to that worker.
        st.to_workers.clear();
        st.at_switch(400, notice);
        let [again] = st.to_workers[..] else { panic!("{:?}", st.to_workers) };
        assert_eq!(again.dst, Dest::Worker(1));
        assert_carries(&again, 0b11, &st.v);
    }

    #[test]
    fn the_ps_timeout_is_an_ewma_with_a_floor_and_stale_timers_are_ignored() {
        let mut v = Values::new(0);
        let mut ps = DsaPs::new(1, 2, 1_000).unwrap();
        assert_eq!(ps.timeout.timeout_ps(), 1_000);
        let mut acts = Vec::new();
        let mut g = grad(1, 3, 0, 2, &mut v);
        ps.on_packet(0, g, &mut v, &mut acts);
        assert_eq!(acts, vec![PsAction::Timer { at: 1_000, token: 3 << 32 | 1 }]);
        g = grad(1, 3, 1, 2, &mut v);
        ps.on_packet(40_000, g, &mut v, &mut acts);
        // One sample of 40 000 ps: mean 40 000 + 4 × 20 000.
        assert_eq!(ps.timeout.timeout_ps(), 120_000);
        acts.clear();
        ps.on_timer(1_000, 3 << 32 | 1, &mut acts);
        assert!(acts.is_empty(), "the entry completed: its timer is stale");
        assert!(DsaPs::new(1, 2, 0).unwrap_err().starts_with("timeout_floor_ps:"));
        assert!(DsaPs::new(1, 65, 1).unwrap_err().starts_with("workers:"));
    }
}
