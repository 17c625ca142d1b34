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
//! - a retransmission (`resend` set) always goes to the PS, and if its task holds the aggregator
//!   the resend forces the slot clear: any partial aggregate goes to the PS with it;
//! - the PS's ACK passing through frees the aggregator if its task holds it, and is multicast
//!   to the workers (the engine replicates a `Workers` packet).
//!
//! The PS side is [`crate::ps::AtpPs`].

use crate::pool::{full_bitmap, hash_index, AggPacket, AggregatorPool, Dest, PacketKind, PoolAction, PoolProgram, PoolStats};
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
            if a.task == Some(pkt.task()) {
                self.stats.resend_clears += 1;
                if !a.complete && a.bitmap != 0 {
                    let partial = self.pool.take(i, PacketKind::Partial, Dest::Ps);
                    out.push(PoolAction::Emit(partial));
                }
                self.pool.free(now, i, vals);
            } else {
                self.stats.fallbacks += 1;
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
    fn stats(&self) -> &PoolStats {
        &self.stats
    }
}
