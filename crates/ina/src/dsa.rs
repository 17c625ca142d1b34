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
use crate::pool::{full_bitmap, hash_index, AggPacket, AggregatorPool, Dest, PacketKind, PoolAction, PoolProgram, PoolStats};
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
    fn stats(&self) -> &PoolStats {
        &self.stats
    }
}
