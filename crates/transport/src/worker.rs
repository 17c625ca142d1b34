//! The worker transport of in-network aggregation jobs (SwitchML, ATP, DSA) as a sans-I/O
//! state machine: [`WorkerWindow`].
//!
//! A worker streams one tensor as packets with sequence numbers (PSNs) `0..packets`; the
//! network (a switch aggregator or a parameter server) answers each PSN with an ACK that
//! carries the aggregated result. Unlike a byte stream, ACKs are *per PSN*, may come from two
//! places (the switch and the PS) and so arrive out of order. What the window does:
//!
//! - **Admission.** Two window disciplines:
//!   - [`WindowControl::Slots`] (SwitchML, Sapio et al. NSDI'21): one packet per slot of the
//!     job's switch pool; PSN `p` may go once the result of `p - slots` (the slot's previous
//!     packet) has come back. No congestion control: the pool size is the window.
//!   - [`WindowControl::Aimd`] (ATP, Lao et al. NSDI'21, and DSA §III-D, "DSA applies
//!     on-switch ECN as the congestion signal, and Additive-Increase-Multiplicative-Decrease
//!     (AIMD) as the congestion control algorithm"): PSN `p` may go while
//!     `p − acked < ⌊cwnd / packet_bytes⌋`, i.e. the packets in flight fit the window: every
//!     ACK frees a place whatever its PSN, so one PSN waiting for DSA's reminder does not stop
//!     the stream (DSA §III-D: ACKs "may arrive at the worker out of order"); counted against the
//!     lowest unacknowledged PSN instead, a split DSA task (waiting ≥ 1 ms for the PS's
//!     reminder) stalled every worker of its job. `cwnd` starts at `initial_bytes` (DSA: "60 KB as
//!     the initial window size"), grows by one packet per window of ACKs without an ECN echo,
//!     and halves on an ECN-echo ACK (at most once per window of data); it stays within
//!     `[packet_bytes, max_bytes]`. ECN is the only congestion signal, for ATP as for DSA (DSA
//!     §III-D: "Like ATP [34], DSA applies on-switch ECN as the congestion signal"; ATP's own
//!     worker, `common/CC_manager.h` of the code the seed cites as [2], changes its window only
//!     in `adjustWindow(isECN)`): a timeout resends, it does not shrink the window.
//! - **Out-of-order and duplicate ACKs leave the window alone** (DSA §III-D: "DSA chooses to
//!   take no actions to change the sliding window size when observing out-of-order or
//!   duplicate ACKs"; ATP's and SwitchML's windows do not react to them either).
//! - **Gap resends** (ATP; `resend_on_gap`): ATP's worker (`client/p4ml_manager.cc` of the
//!   code the seed cites as [2], "Seq %d trigger %d~%d Resend!") resends at once, with the
//!   resend flag, every unacknowledged PSN from the lowest one up to an ACK that arrived above
//!   it, and does so again only once the lowest unacknowledged PSN has passed the last PSN it
//!   resent. ATP's ACKs all come from its PS in PSN order, so a gap means a loss or a task
//!   split between the switch and the PS, which only a resend completes (its resend flag
//!   clears the switch's aggregator). DSA retransmits on timeouts only (§IV-B: "as long as its
//!   ACK does not return for a timeout, the gradient packet is retransmitted"): its ACKs come
//!   from two places and are out of order as a rule. SwitchML detects loss by per-slot
//!   timeouts.
//! - **Timeouts** per packet: a PSN whose latest copy was sent `rto` ago without an ACK is
//!   sent again. `rto = max(min_rto, srtt + 4·rttvar)` from RTT samples of packets sent once
//!   (RFC 6298's estimator and Karn's rule; DSA §VI: "The timeout is updated by an
//!   Exponentially Weighted Moving Average (EWMA) ... based on the RTT measurement ... DSA
//!   forces the minimum timeout to be 1 ms"). Before the first sample `rto = initial_rto`.
//! - **Reminders** (DSA §IV-B, "After three retransmissions, the worker sends a special
//!   reminder notification to the PS"): with `reminder_after = Some(n)`, a PSN that times out
//!   after `n` retransmissions asks the PS to run its reminder mechanism
//!   ([`WorkerWindow::take_reminder`]); it is still retransmitted, and reminds again at each
//!   later expiry, so a lost reminder is made good.
//! - **Fetches**: the PS's reminder mechanism asks workers for their original gradient packet
//!   ([`WorkerWindow::on_fetch`]); the worker sends a copy to the PS, before new packets.
//! - **Giving up**: a PSN retransmitted [`MAX_RETRANSMISSIONS`] times with no new ACK of any
//!   PSN in between stops the window's re-sends and new packets (a worker waiting for a slow
//!   peer of its job still hears ACKs as the peer's PSNs complete, so only a job that makes no
//!   progress at all gives up) ([`WorkerWindow::gave_up`]), so a run across a broken network
//!   ends and says why. A worker that gave up still answers the PS's fetches (its originals
//!   are what the PS's recovery needs; the PS's own timer paces them), and the next new ACK of
//!   any PSN resumes it where it stopped: a peer that was slower than 64 of this worker's
//!   timeouts (e.g. still finishing an earlier tensor whose last PSN needed a reminder) no
//!   longer leaves this worker's PSNs, and so the job, stalled for ever. Each resume takes a
//!   new ACK, so a job that makes no progress still ends.
//!
//! [`WorkerWindow::next_tensor`] starts the next tensor with the same window and RTT
//! estimate, as one worker's stack carries them over from tensor to tensor.
//!
//! Units: times in integer picoseconds, window in bytes. Determinism: every method is a pure
//! function of the state and its arguments.

use crate::bitset::Bitset;
use crate::rto::EwmaTimeout;
use std::collections::VecDeque;

/// A PSN retransmitted this many times without an ACK stops the worker.
pub const MAX_RETRANSMISSIONS: u32 = 64;

/// How many packets a worker may have outstanding.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WindowControl {
    /// SwitchML: `slots` packets, one per slot of the job's pool; a slot's next packet waits
    /// for its previous packet's result.
    Slots { slots: u32 },
    /// ATP / DSA: AIMD on ECN echoes and timeouts, in bytes.
    Aimd { initial_bytes: u64, max_bytes: u64 },
}

/// Parameters of a worker's window.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WorkerParams {
    /// Wire size of one gradient packet (the AIMD window counts these).
    pub packet_bytes: u32,
    pub control: WindowControl,
    /// Timeout before the first RTT sample.
    pub initial_rto_ps: u64,
    /// Floor of the timeout.
    pub min_rto_ps: u64,
    /// Retransmissions of a PSN after which each further timeout also sends a reminder to the
    /// PS (DSA: `Some(3)`; baselines: `None`).
    pub reminder_after: Option<u32>,
    /// ATP: an ACK above the lowest unacknowledged PSN resends the gap at once (see the module
    /// documentation, "Gap resends").
    pub resend_on_gap: bool,
}

impl WorkerParams {
    /// Checks the parameters; the error names the field.
    pub fn validate(&self) -> Result<(), String> {
        if self.packet_bytes == 0 {
            return Err("packet_bytes: must be >= 1".into());
        }
        match self.control {
            WindowControl::Slots { slots: 0 } => return Err("slots: must be >= 1".into()),
            WindowControl::Aimd { initial_bytes, max_bytes } => {
                if initial_bytes < self.packet_bytes as u64 {
                    return Err(format!("initial_bytes: must hold at least one packet ({} B)", self.packet_bytes));
                }
                if max_bytes < initial_bytes {
                    return Err("max_bytes: must be >= initial_bytes".into());
                }
            }
            _ => {}
        }
        if self.min_rto_ps == 0 || self.initial_rto_ps == 0 {
            return Err("min_rto / initial_rto: must be > 0".into());
        }
        Ok(())
    }
}

/// A packet the worker sends now.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Send {
    pub psn: u32,
    /// A copy of a packet sent before.
    pub retransmission: bool,
    /// Addressed to the PS (a reply to its fetch), not to the switch.
    pub to_ps: bool,
}

/// Counters of one worker (over all its tensors); summed over workers with
/// [`WorkerStats::add`] (the `training.workers` object of a run's `summary.json`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub struct WorkerStats {
    pub new_packets: u64,
    pub retransmissions: u64,
    /// Timer expiries that resent at least one packet.
    pub timeouts: u64,
    pub acks: u64,
    /// ACKs for a PSN already acknowledged.
    pub duplicate_acks: u64,
    /// ACKs that arrived while a lower PSN was still unacknowledged.
    pub out_of_order_acks: u64,
    pub ecn_echoes: u64,
    /// Times the window was halved (on ECN echoes).
    pub window_decreases: u64,
    /// Reminder notifications sent to the PS (DSA).
    pub reminder_notices: u64,
    /// Copies sent to the PS on its request.
    pub fetched: u64,
    /// PSNs queued again because an ACK arrived above them (`resend_on_gap`; each is also
    /// counted in `retransmissions` when sent).
    pub gap_resends: u64,
}

impl WorkerStats {
    /// Adds `o`'s counters to these.
    pub fn add(&mut self, o: &WorkerStats) {
        let WorkerStats {
            new_packets,
            retransmissions,
            timeouts,
            acks,
            duplicate_acks,
            out_of_order_acks,
            ecn_echoes,
            window_decreases,
            reminder_notices,
            fetched,
            gap_resends,
        } = *o;
        self.new_packets += new_packets;
        self.retransmissions += retransmissions;
        self.timeouts += timeouts;
        self.acks += acks;
        self.duplicate_acks += duplicate_acks;
        self.out_of_order_acks += out_of_order_acks;
        self.ecn_echoes += ecn_echoes;
        self.window_decreases += window_decreases;
        self.reminder_notices += reminder_notices;
        self.fetched += fetched;
        self.gap_resends += gap_resends;
    }
}

const UNSENT: u64 = u64::MAX;
const ACKED: u64 = u64::MAX - 1;
/// Timed out, waiting in the retransmission queue.
const QUEUED: u64 = u64::MAX - 2;

/// One worker's window over a tensor of `packets` PSNs.
#[derive(Clone, Debug)]
pub struct WorkerWindow {
    params: WorkerParams,
    packets: u32,
    /// Per PSN: send time of its latest copy, or [`UNSENT`] / [`ACKED`].
    sent_ps: Vec<u64>,
    /// Per PSN: retransmissions so far.
    rtx: Vec<u32>,
    /// PSNs waiting to be sent again (timeouts), oldest first.
    rtx_queue: VecDeque<u32>,
    queued: Bitset,
    /// PSNs the PS fetched, oldest first.
    fetch_queue: VecDeque<u32>,
    /// Copies in flight in send order: (send time, PSN); stale entries (acked or resent since)
    /// are skipped. The front's deadline is the earliest.
    flight: VecDeque<(u64, u32)>,
    reminders: VecDeque<u32>,
    next_new: u32,
    /// PSNs below this may be sent (the tensor's data produced so far).
    available: u32,
    /// Lowest unacknowledged PSN.
    base: u32,
    acked: u32,
    cwnd: u64,
    /// ACKs counted towards the next additive increase.
    ai_acks: u64,
    /// No decrease until an ACK for a PSN at or above this (once per window of data).
    recover: u32,
    rto: EwmaTimeout,
    /// `resend_on_gap`: the highest PSN the last gap resend covered (none yet: `None`).
    gap_resent_to: Option<u32>,
    gave_up: bool,
    /// Retransmissions of each PSN since the last new ACK of any PSN (the give-up count).
    rtx_since_progress: Vec<u32>,
    /// New ACKs so far; `rtx_since_progress` is stale when it was filled before the last one.
    progress: u64,
    rtx_progress: Vec<u64>,
    stats: WorkerStats,
}

impl WorkerWindow {
    /// A window over the first tensor (`packets` >= 1). Panics on parameters
    /// [`WorkerParams::validate`] rejects (callers validate at their door).
    pub fn new(packets: u32, params: WorkerParams) -> WorkerWindow {
        params.validate().expect("invalid WorkerParams");
        assert!(packets > 0, "a tensor has at least one packet");
        let cwnd = match params.control {
            WindowControl::Aimd { initial_bytes, .. } => initial_bytes,
            WindowControl::Slots { slots } => slots as u64 * params.packet_bytes as u64,
        };
        let mut w = WorkerWindow {
            params,
            packets: 0,
            sent_ps: Vec::new(),
            rtx: Vec::new(),
            rtx_queue: VecDeque::new(),
            queued: Bitset::new(0),
            fetch_queue: VecDeque::new(),
            flight: VecDeque::new(),
            reminders: VecDeque::new(),
            next_new: 0,
            available: 0,
            base: 0,
            acked: 0,
            cwnd,
            ai_acks: 0,
            recover: 0,
            rto: EwmaTimeout::with_initial(params.initial_rto_ps, params.min_rto_ps),
            gap_resent_to: None,
            gave_up: false,
            rtx_since_progress: Vec::new(),
            progress: 0,
            rtx_progress: Vec::new(),
            stats: WorkerStats::default(),
        };
        w.next_tensor(packets);
        w
    }

    /// Starts the next tensor (PSNs `0..packets` again), keeping the window, the RTT estimate
    /// and the counters. The previous tensor should be done.
    pub fn next_tensor(&mut self, packets: u32) {
        assert!(packets > 0, "a tensor has at least one packet");
        self.packets = packets;
        self.sent_ps.clear();
        self.sent_ps.resize(packets as usize, UNSENT);
        self.rtx.clear();
        self.rtx.resize(packets as usize, 0);
        self.rtx_since_progress.clear();
        self.rtx_since_progress.resize(packets as usize, 0);
        self.rtx_progress.clear();
        self.rtx_progress.resize(packets as usize, 0);
        self.rtx_queue.clear();
        self.queued = Bitset::new(packets);
        self.fetch_queue.clear();
        self.flight.clear();
        self.reminders.clear();
        self.next_new = 0;
        self.available = packets;
        self.base = 0;
        self.acked = 0;
        self.recover = 0;
        self.gap_resent_to = None;
    }

    /// Only PSNs below `psns` may be sent until it is raised (a stream whose data is produced
    /// as it goes, e.g. a training job's gradient partitions computed one after another).
    /// Starts at the whole tensor.
    pub fn set_available(&mut self, psns: u32) {
        self.available = psns.min(self.packets);
    }

    pub fn packets(&self) -> u32 {
        self.packets
    }
    /// Every PSN of the tensor acknowledged.
    pub fn is_done(&self) -> bool {
        self.acked == self.packets
    }
    /// A PSN was retransmitted [`MAX_RETRANSMISSIONS`] times without any new ACK in between:
    /// the worker stopped (until a new ACK resumes it; it still answers fetches).
    pub fn gave_up(&self) -> bool {
        self.gave_up
    }
    pub fn stats(&self) -> WorkerStats {
        self.stats
    }
    /// The congestion window in bytes (for `Slots`, the pool's bytes).
    pub fn cwnd_bytes(&self) -> u64 {
        self.cwnd
    }
    /// PSNs acknowledged.
    pub fn acked(&self) -> u32 {
        self.acked
    }
    /// Lowest unacknowledged PSN.
    pub fn base(&self) -> u32 {
        self.base
    }
    /// The current retransmission timeout.
    pub fn rto_ps(&self) -> u64 {
        self.rto.timeout_ps()
    }
    pub fn is_acked(&self, psn: u32) -> bool {
        psn < self.packets && self.sent_ps[psn as usize] == ACKED
    }

    fn window_packets(&self) -> u64 {
        (self.cwnd / self.params.packet_bytes as u64).max(1)
    }

    fn may_send_new(&self) -> bool {
        let p = self.next_new;
        if p >= self.available {
            return false;
        }
        match self.params.control {
            WindowControl::Slots { slots } => p < slots || self.sent_ps[(p - slots) as usize] == ACKED,
            // Packets in flight (sent, not acknowledged) below the window: an ACK frees a
            // place whatever its PSN, so a PSN waiting for a reminder does not hold the stream.
            WindowControl::Aimd { .. } => (p.saturating_sub(self.acked) as u64) < self.window_packets(),
        }
    }

    /// The packet [`WorkerWindow::transmit`] would send now: a fetched copy, else a
    /// retransmission, else the next new PSN if the window admits it.
    pub fn peek(&self) -> Option<Send> {
        if let Some(&psn) = self.fetch_queue.front() {
            return Some(Send { psn, retransmission: true, to_ps: true });
        }
        if self.gave_up {
            return None;
        }
        if let Some(&psn) = self.rtx_queue.front() {
            return Some(Send { psn, retransmission: true, to_ps: false });
        }
        self.may_send_new().then_some(Send { psn: self.next_new, retransmission: false, to_ps: false })
    }

    pub fn has_packet(&self) -> bool {
        self.peek().is_some()
    }

    /// Sends the next packet, if any may go.
    pub fn transmit(&mut self, now_ps: u64) -> Option<Send> {
        let s = self.peek()?;
        if s.to_ps {
            self.fetch_queue.pop_front();
            self.stats.fetched += 1;
            return Some(s);
        }
        if s.retransmission {
            self.rtx_queue.pop_front();
            self.queued.remove(s.psn);
            self.stats.retransmissions += 1;
        } else {
            self.next_new += 1;
            self.stats.new_packets += 1;
        }
        self.sent_ps[s.psn as usize] = now_ps;
        self.flight.push_back((now_ps, s.psn));
        Some(s)
    }

    /// An ACK for `psn` carrying its result; `ecn` if it echoes a congestion mark. Returns
    /// whether it was the first ACK for that PSN (the caller takes the result only then).
    pub fn on_ack(&mut self, psn: u32, ecn: bool, now_ps: u64) -> bool {
        if psn >= self.packets {
            return false;
        }
        self.stats.acks += 1;
        let sent = self.sent_ps[psn as usize];
        if sent == ACKED {
            self.stats.duplicate_acks += 1;
            return false;
        }
        if psn > self.base {
            self.stats.out_of_order_acks += 1;
        }
        if sent < QUEUED && self.rtx[psn as usize] == 0 && now_ps >= sent {
            self.rto.sample(now_ps - sent);
        }
        self.sent_ps[psn as usize] = ACKED;
        self.progress += 1;
        // Progress resumes a worker that gave up: its copies in flight are due at once, each
        // with a fresh give-up count.
        self.gave_up = false;
        if self.queued.remove(psn) {
            self.rtx_queue.retain(|&q| q != psn);
        }
        self.acked += 1;
        while self.base < self.packets && self.sent_ps[self.base as usize] == ACKED {
            self.base += 1;
        }
        self.pop_stale();
        if self.params.resend_on_gap && psn > self.base && self.gap_resent_to.is_none_or(|r| self.base > r) {
            self.resend_gap(psn);
        }
        if ecn {
            self.stats.ecn_echoes += 1;
        }
        if let WindowControl::Aimd { max_bytes, .. } = self.params.control {
            if ecn {
                self.decrease(psn);
            } else {
                self.ai_acks += 1;
                if self.ai_acks >= self.window_packets() {
                    self.ai_acks = 0;
                    self.cwnd = (self.cwnd + self.params.packet_bytes as u64).min(max_bytes);
                }
            }
        }
        true
    }

    /// ATP's gap resend: every PSN in `[base, above)` still in flight is queued again now.
    fn resend_gap(&mut self, above: u32) {
        for q in self.base..above {
            let sent = self.sent_ps[q as usize];
            if sent >= QUEUED {
                continue; // acknowledged, already queued, or (never below `above`) unsent
            }
            let i = q as usize;
            if self.rtx_progress[i] != self.progress {
                self.rtx_progress[i] = self.progress;
                self.rtx_since_progress[i] = 0;
            }
            self.requeue(q);
            self.stats.gap_resends += 1;
        }
        self.gap_resent_to = Some(above - 1);
    }

    /// Queues `psn` (in flight) for retransmission; its copy in flight stops counting.
    fn requeue(&mut self, psn: u32) {
        let i = psn as usize;
        self.rtx[i] += 1;
        self.rtx_since_progress[i] += 1;
        // Not in flight any more: a late ACK still counts, and its sample is skipped (Karn).
        self.sent_ps[i] = QUEUED;
        self.queued.insert(psn);
        self.rtx_queue.push_back(psn);
    }

    /// On an ECN echo for `psn`: halves the window unless it already did for this window of
    /// data (`psn` below `recover`, the first PSN sent after the last decrease).
    fn decrease(&mut self, psn: u32) {
        if psn >= self.recover {
            self.halve();
        }
    }

    fn halve(&mut self) {
        let pkt = self.params.packet_bytes as u64;
        self.cwnd = (self.cwnd / 2).max(pkt);
        self.ai_acks = 0;
        self.recover = self.next_new;
        self.stats.window_decreases += 1;
    }

    fn is_stale(&self, (t, psn): (u64, u32)) -> bool {
        self.sent_ps[psn as usize] != t
    }

    fn pop_stale(&mut self) {
        while let Some(&e) = self.flight.front() {
            if !self.is_stale(e) {
                break;
            }
            self.flight.pop_front();
        }
    }

    /// The PS asks for this worker's gradient packet `psn` (its reminder mechanism).
    pub fn on_fetch(&mut self, psn: u32) {
        if psn < self.packets {
            self.fetch_queue.push_back(psn);
        }
    }

    /// When [`WorkerWindow::on_timer`] should run next (`None`: nothing in flight).
    pub fn timer_ps(&self) -> Option<u64> {
        if self.gave_up {
            return None;
        }
        self.flight.front().map(|&(t, _)| t + self.rto_ps())
    }

    /// The timer expired: every copy in flight for `rto` is queued again (and may remind
    /// the PS). The window is left as it is (ECN is the congestion signal).
    pub fn on_timer(&mut self, now_ps: u64) {
        if self.gave_up {
            return;
        }
        let rto = self.rto_ps();
        let mut fired = false;
        while let Some(&(t, psn)) = self.flight.front() {
            if self.is_stale((t, psn)) {
                self.flight.pop_front();
                continue;
            }
            if t + rto > now_ps {
                break;
            }
            let i = psn as usize;
            if self.rtx_progress[i] != self.progress {
                self.rtx_progress[i] = self.progress;
                self.rtx_since_progress[i] = 0;
            }
            if self.rtx_since_progress[i] >= MAX_RETRANSMISSIONS {
                // Stopped with the copies in flight kept: a new ACK resumes from them.
                self.gave_up = true;
                return;
            }
            self.flight.pop_front();
            fired = true;
            if self.params.reminder_after.is_some_and(|n| self.rtx[i] >= n) {
                self.reminders.push_back(psn);
                self.stats.reminder_notices += 1;
            }
            self.requeue(psn);
        }
        if fired {
            self.stats.timeouts += 1;
        }
    }

    /// The next reminder to send to the PS (the PSN it is about), if any.
    pub fn take_reminder(&mut self) -> Option<u32> {
        self.reminders.pop_front()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const US: u64 = 1_000_000;
    const PKT: u32 = 306;

    fn aimd(initial_packets: u64) -> WorkerParams {
        WorkerParams {
            packet_bytes: PKT,
            control: WindowControl::Aimd { initial_bytes: initial_packets * PKT as u64, max_bytes: 1000 * PKT as u64 },
            initial_rto_ps: 1000 * US,
            min_rto_ps: 1000 * US,
            reminder_after: Some(3),
            resend_on_gap: false,
        }
    }

    fn drain(w: &mut WorkerWindow, now: u64) -> Vec<u32> {
        std::iter::from_fn(|| w.transmit(now)).map(|s| s.psn).collect()
    }

    #[test]
    fn aimd_sends_the_initial_window_and_each_ack_frees_a_place_whatever_its_psn() {
        let mut w = WorkerWindow::new(20, aimd(4));
        assert_eq!(drain(&mut w, 0), vec![0, 1, 2, 3]);
        // An ACK above the base frees a place: a PSN stuck below does not hold the stream.
        assert!(w.on_ack(2, false, 10 * US));
        assert_eq!(drain(&mut w, 10 * US), vec![4]);
        assert_eq!((w.stats().out_of_order_acks, w.base()), (1, 0));
        assert!(w.on_ack(0, false, 10 * US));
        assert_eq!(w.base(), 1);
        assert_eq!(drain(&mut w, 10 * US), vec![5]);
        assert!(w.on_ack(1, false, 11 * US));
        assert_eq!(w.base(), 3);
        assert_eq!(drain(&mut w, 11 * US), vec![6]);
        // A duplicate ACK frees nothing.
        assert!(!w.on_ack(1, false, 12 * US));
        assert_eq!(drain(&mut w, 12 * US), Vec::<u32>::new());
    }

    #[test]
    fn a_timeout_resends_but_leaves_the_window_alone() {
        // ECN is the congestion signal (ATP's CC_manager, DSA §III-D); a timeout is a failure.
        let mut w = WorkerWindow::new(20, aimd(4));
        drain(&mut w, 0);
        for _ in 0..3 {
            let t = w.timer_ps().unwrap();
            w.on_timer(t);
            assert_eq!(drain(&mut w, t).len(), 4);
        }
        assert_eq!((w.cwnd_bytes() / PKT as u64, w.stats().timeouts, w.stats().window_decreases), (4, 3, 0));
    }

    #[test]
    fn additive_increase_is_one_packet_per_window_of_acks() {
        let mut w = WorkerWindow::new(100, aimd(4));
        drain(&mut w, 0);
        for psn in 0..3 {
            w.on_ack(psn, false, 10 * US);
            assert_eq!(w.cwnd_bytes(), 4 * PKT as u64, "after ack {psn}");
        }
        w.on_ack(3, false, 10 * US);
        assert_eq!(w.cwnd_bytes(), 5 * PKT as u64);
        // Next increase after 5 more ACKs.
        drain(&mut w, 10 * US);
        for psn in 4..8 {
            w.on_ack(psn, false, 20 * US);
        }
        assert_eq!(w.cwnd_bytes(), 5 * PKT as u64);
        w.on_ack(8, false, 20 * US);
        assert_eq!(w.cwnd_bytes(), 6 * PKT as u64);
    }

    #[test]
    fn ecn_halves_the_window_once_per_window_of_data() {
        let mut w = WorkerWindow::new(100, aimd(16));
        drain(&mut w, 0); // 0..16 in flight; recover becomes 16 at the first decrease
        w.on_ack(0, true, 10 * US);
        assert_eq!(w.cwnd_bytes(), 8 * PKT as u64);
        w.on_ack(1, true, 10 * US);
        w.on_ack(2, true, 10 * US);
        assert_eq!(w.cwnd_bytes(), 8 * PKT as u64, "same window of data: one decrease");
        assert_eq!(w.stats().window_decreases, 1);
        for psn in 3..16 {
            w.on_ack(psn, false, 10 * US);
        }
        drain(&mut w, 10 * US);
        // PSN 16 was sent after the decrease: its mark halves again.
        w.on_ack(16, true, 20 * US);
        assert_eq!(w.stats().window_decreases, 2);
        assert!(w.cwnd_bytes() <= 5 * PKT as u64);
        assert_eq!(w.stats().ecn_echoes, 4);
    }

    #[test]
    fn the_window_never_drops_below_one_packet() {
        let mut w = WorkerWindow::new(200, aimd(2));
        let mut now = 0;
        for _ in 0..50 {
            for s in drain(&mut w, now) {
                w.on_ack(s, true, now + US);
            }
            now += 10 * US;
            assert!(w.cwnd_bytes() >= PKT as u64);
            if w.is_done() {
                break;
            }
        }
        assert_eq!(w.cwnd_bytes(), PKT as u64);
    }

    #[test]
    fn duplicate_and_out_of_order_acks_leave_the_window_alone() {
        let mut w = WorkerWindow::new(10, aimd(8));
        drain(&mut w, 0);
        let before = w.cwnd_bytes();
        assert!(w.on_ack(5, false, US));
        assert!(!w.on_ack(5, false, US));
        assert!(!w.on_ack(5, false, US));
        assert_eq!(w.cwnd_bytes(), before);
        assert_eq!(w.stats().window_decreases, 0);
        assert_eq!(w.stats().duplicate_acks, 2);
        assert_eq!(w.stats().retransmissions, 0);
    }

    #[test]
    fn slots_reuse_a_slot_only_after_its_result() {
        let p = WorkerParams { control: WindowControl::Slots { slots: 3 }, ..aimd(1) };
        let mut w = WorkerWindow::new(7, p);
        assert_eq!(drain(&mut w, 0), vec![0, 1, 2]);
        w.on_ack(1, false, US);
        // PSN 3 uses slot 0, whose packet 0 has no result yet.
        assert_eq!(drain(&mut w, US), Vec::<u32>::new());
        w.on_ack(0, false, US);
        assert_eq!(drain(&mut w, US), vec![3, 4]);
        // ECN does not move a slot window.
        w.on_ack(2, true, 2 * US);
        assert_eq!(w.cwnd_bytes(), 3 * PKT as u64);
        assert_eq!(drain(&mut w, 2 * US), vec![5]);
    }

    #[test]
    fn rto_follows_rfc6298_with_the_floor() {
        let mut p = aimd(4);
        p.min_rto_ps = 50 * US;
        p.initial_rto_ps = 300 * US;
        let mut w = WorkerWindow::new(10, p);
        assert_eq!(w.rto_ps(), 300 * US);
        drain(&mut w, 0);
        w.on_ack(0, false, 20 * US); // srtt 20, var 10 -> 60
        assert_eq!(w.rto_ps(), 60 * US);
        w.on_ack(1, false, 4 * US); // sent at 0: r = 4
                                    // var = (3*10 + |20-4|)/4 = 11.5, srtt = (7*20+4)/8 = 18 -> 18 + 46 = 64
        assert_eq!(w.rto_ps(), 64 * US);
        w.on_ack(2, false, 2 * US); // var=(3*11.5+16)/4=12.625, srtt=(126+2)/8=16 -> 66.5
        assert_eq!(w.rto_ps(), 16 * US + 4 * 12_625_000);
        let mut q = p;
        q.min_rto_ps = 1000 * US;
        let mut w = WorkerWindow::new(10, q);
        drain(&mut w, 0);
        w.on_ack(0, false, 20 * US);
        assert_eq!(w.rto_ps(), 1000 * US, "DSA's 1 ms floor");
    }

    #[test]
    fn a_timeout_resends_and_reminds_after_three_retransmissions() {
        let mut w = WorkerWindow::new(4, aimd(4));
        assert_eq!(drain(&mut w, 0), vec![0, 1, 2, 3]);
        w.on_ack(0, false, 10 * US);
        w.on_ack(2, false, 10 * US);
        w.on_ack(3, false, 10 * US);
        let rto = w.rto_ps();
        assert_eq!(rto, 1000 * US);
        assert_eq!(w.timer_ps(), Some(rto));
        w.on_timer(rto - 1);
        assert!(!w.has_packet());
        let mut now = rto;
        for round in 1..=5u64 {
            w.on_timer(now);
            assert_eq!(w.stats().timeouts, round);
            let sent = drain(&mut w, now);
            assert_eq!(sent, vec![1]);
            // Reminders from the expiry after the third retransmission on.
            let reminded = w.take_reminder();
            assert_eq!(reminded.is_some(), round >= 4, "round {round}");
            assert_eq!(w.take_reminder(), None);
            now = w.timer_ps().expect("PSN 1 is in flight");
        }
        assert_eq!(w.stats().retransmissions, 5);
        assert_eq!(w.stats().reminder_notices, 2);
        assert_eq!(w.cwnd_bytes(), 4 * PKT as u64, "timeouts leave the window alone");
        // A late ACK of the original copy completes it (no RTT sample: Karn).
        let rto_before = w.rto_ps();
        assert!(w.on_ack(1, false, now + 1));
        assert!(w.is_done());
        assert_eq!(w.rto_ps(), rto_before);
        assert_eq!(w.timer_ps(), None);
    }

    #[test]
    fn atp_resends_a_gap_at_once_and_again_only_after_the_base_passed_it() {
        let p = WorkerParams { resend_on_gap: true, reminder_after: None, ..aimd(8) };
        let mut w = WorkerWindow::new(20, p);
        assert_eq!(drain(&mut w, 0), (0..8).collect::<Vec<_>>());
        w.on_ack(0, false, 10 * US);
        assert_eq!(drain(&mut w, 10 * US), vec![8]);
        // PSNs 1 and 2 are stuck (split between the switch and the PS); 3's ACK opens a gap.
        w.on_ack(3, false, 11 * US);
        assert_eq!(w.stats().gap_resends, 2);
        let sent: Vec<Send> = std::iter::from_fn(|| w.transmit(11 * US)).collect();
        assert_eq!(
            sent.iter().map(|s| (s.psn, s.retransmission)).collect::<Vec<_>>(),
            vec![(1, true), (2, true), (9, false)]
        );
        // Further ACKs above the gap do not resend it again ...
        w.on_ack(4, false, 12 * US);
        w.on_ack(5, false, 12 * US);
        assert_eq!(w.stats().gap_resends, 2);
        // ... until the base has passed the PSNs resent: then a new gap is resent.
        w.on_ack(1, false, 13 * US);
        w.on_ack(2, false, 13 * US);
        assert_eq!(w.base(), 6);
        w.on_ack(7, false, 14 * US);
        assert_eq!(w.stats().gap_resends, 3);
        drain(&mut w, 14 * US);
        assert_eq!((w.stats().retransmissions, w.stats().timeouts), (3, 0));
        // Without the option (DSA: ACKs from two places, out of order as a rule) nothing is resent.
        let mut w = WorkerWindow::new(20, aimd(8));
        drain(&mut w, 0);
        w.on_ack(3, false, 11 * US);
        assert_eq!((w.stats().gap_resends, w.peek().map(|s| s.retransmission)), (0, Some(false)));
    }

    #[test]
    fn stats_add_sums_every_counter() {
        let one = WorkerStats {
            new_packets: 1,
            retransmissions: 2,
            timeouts: 3,
            acks: 4,
            duplicate_acks: 5,
            out_of_order_acks: 6,
            ecn_echoes: 7,
            window_decreases: 8,
            reminder_notices: 9,
            fetched: 10,
            gap_resends: 11,
        };
        let mut sum = one;
        sum.add(&one);
        let doubled = WorkerStats {
            new_packets: 2,
            retransmissions: 4,
            timeouts: 6,
            acks: 8,
            duplicate_acks: 10,
            out_of_order_acks: 12,
            ecn_echoes: 14,
            window_decreases: 16,
            reminder_notices: 18,
            fetched: 20,
            gap_resends: 22,
        };
        assert_eq!(sum, doubled);
    }

    #[test]
    fn a_fetch_sends_a_copy_to_the_ps_first() {
        let mut w = WorkerWindow::new(10, aimd(2));
        assert_eq!(drain(&mut w, 0), vec![0, 1]);
        w.on_fetch(0);
        let s = w.transmit(US).unwrap();
        assert_eq!(s, Send { psn: 0, retransmission: true, to_ps: true });
        // The copy to the PS does not restart PSN 0's own timer.
        assert_eq!(w.timer_ps(), Some(w.rto_ps()));
        assert_eq!(w.stats().fetched, 1);
    }

    #[test]
    fn a_worker_gives_up_after_max_retransmissions() {
        let mut w = WorkerWindow::new(1, aimd(1));
        let mut now = 0;
        drain(&mut w, now);
        let mut rounds = 0;
        while let Some(t) = w.timer_ps() {
            now = t;
            w.on_timer(now);
            drain(&mut w, now);
            rounds += 1;
            assert!(rounds <= MAX_RETRANSMISSIONS + 1);
        }
        assert!(w.gave_up());
        assert_eq!(w.stats().retransmissions, MAX_RETRANSMISSIONS as u64);
        assert!(!w.has_packet());
    }

    /// A worker that gave up answers the PS's fetches and nothing else, and the next new ACK
    /// (a slow peer caught up) resumes it: its unacknowledged copy goes again at once, with a
    /// fresh give-up count.
    #[test]
    fn a_worker_that_gave_up_answers_fetches_and_resumes_on_progress() {
        let mut w = WorkerWindow::new(2, aimd(2));
        let mut now = 0;
        assert_eq!(drain(&mut w, now), vec![0, 1]);
        while let Some(t) = w.timer_ps() {
            now = t;
            w.on_timer(now);
            drain(&mut w, now);
        }
        assert!(w.gave_up());
        let sent = w.stats().retransmissions;
        // A stale timer changes nothing.
        w.on_timer(now + 10 * w.rto_ps());
        assert!(!w.has_packet() && w.timer_ps().is_none());
        w.on_fetch(1);
        assert_eq!(w.transmit(now), Some(Send { psn: 1, retransmission: true, to_ps: true }));
        assert!(!w.has_packet() && w.gave_up());
        // PSN 1's result: progress. PSN 0 is due at once and retransmitted.
        now += 5 * w.rto_ps();
        assert!(w.on_ack(1, false, now));
        assert!(!w.gave_up());
        let due = w.timer_ps().expect("PSN 0 still in flight");
        assert!(due <= now, "{due} > {now}");
        w.on_timer(now);
        assert_eq!(w.transmit(now), Some(Send { psn: 0, retransmission: true, to_ps: false }));
        assert_eq!(w.stats().retransmissions, sent + 1);
        // It gives up again only after MAX_RETRANSMISSIONS more without progress.
        let mut rounds = 0;
        while let Some(t) = w.timer_ps() {
            now = t;
            w.on_timer(now);
            rounds += drain(&mut w, now).len() as u32;
        }
        assert!(w.gave_up());
        assert_eq!(rounds + 1, MAX_RETRANSMISSIONS);
    }

    #[test]
    fn acks_of_other_psns_keep_a_slow_psn_alive() {
        let mut w = WorkerWindow::new(200, aimd(2));
        let mut now = 0;
        drain(&mut w, now);
        // PSN 0 never completes (a slow peer), but the rest of the stream does: no give-up.
        let mut next = 1;
        for _ in 0..3 * MAX_RETRANSMISSIONS {
            now = w.timer_ps().unwrap();
            w.on_timer(now);
            for psn in drain(&mut w, now) {
                if psn != 0 {
                    next = next.max(psn);
                }
            }
            if w.is_acked(next) || next == 0 {
                continue;
            }
            w.on_ack(next, false, now + 1);
            drain(&mut w, now + 1);
        }
        assert!(!w.gave_up());
        assert!(w.stats().retransmissions > MAX_RETRANSMISSIONS as u64);
    }

    #[test]
    fn only_available_psns_are_sent() {
        let mut w = WorkerWindow::new(10, aimd(8));
        w.set_available(3);
        assert_eq!(drain(&mut w, 0), vec![0, 1, 2]);
        w.set_available(5);
        assert_eq!(drain(&mut w, 0), vec![3, 4]);
        w.set_available(99);
        assert_eq!(drain(&mut w, 0), vec![5, 6, 7]);
    }

    #[test]
    fn the_next_tensor_keeps_window_and_rtt() {
        let mut w = WorkerWindow::new(4, aimd(4));
        drain(&mut w, 0);
        for psn in 0..4 {
            w.on_ack(psn, false, 30 * US);
        }
        assert!(w.is_done());
        let (cwnd, rto) = (w.cwnd_bytes(), w.rto_ps());
        w.next_tensor(6);
        assert!(!w.is_done());
        assert_eq!((w.cwnd_bytes(), w.rto_ps()), (cwnd, rto));
        assert_eq!(drain(&mut w, 40 * US), vec![0, 1, 2, 3, 4]);
    }

    /// A tiny deterministic generator (the crate has no dependencies).
    struct Lcg(u64);
    impl Lcg {
        fn next(&mut self) -> u64 {
            self.0 = self.0.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            self.0 >> 33
        }
        fn below(&mut self, n: u64) -> u64 {
            self.next() % n
        }
    }

    /// Random loss, reordering, duplicate ACKs, ECN marks and fetches, over both disciplines:
    /// every PSN is acknowledged exactly once as new, the window stays in bounds, and the
    /// worker never stalls (something is in flight or queued whenever it is not done).
    #[test]
    fn random_exchanges_complete_every_psn() {
        for case in 0..300u64 {
            let mut rng = Lcg(case * 7919 + 1);
            let packets = 1 + rng.below(60) as u32;
            let params = if case % 3 == 0 {
                WorkerParams { control: WindowControl::Slots { slots: 1 + rng.below(8) as u32 }, ..aimd(1) }
            } else {
                let mut p = aimd(1 + rng.below(10));
                p.min_rto_ps = (50 + rng.below(500)) * US;
                p
            };
            let loss = rng.below(40); // percent
            let mut w = WorkerWindow::new(packets, params);
            let mut firsts = vec![0u32; packets as usize];
            // In-flight network: (arrival time, psn, ecn).
            let mut net: Vec<(u64, u32, bool)> = Vec::new();
            let mut now = 0u64;
            let mut steps = 0;
            while !w.is_done() {
                steps += 1;
                assert!(steps < 200_000, "case {case}: no progress");
                while let Some(s) = w.transmit(now) {
                    if s.to_ps || rng.below(100) < loss {
                        continue;
                    }
                    let copies = 1 + (rng.below(10) == 0) as u64;
                    for _ in 0..copies {
                        net.push((now + (5 + rng.below(40)) * US, s.psn, rng.below(5) == 0));
                    }
                }
                if rng.below(20) == 0 {
                    w.on_fetch(rng.below(packets as u64) as u32);
                }
                while w.take_reminder().is_some() {}
                let next_arrival = net.iter().map(|a| a.0).min();
                let next_timer = w.timer_ps();
                assert!(next_arrival.is_some() || next_timer.is_some() || w.has_packet(), "case {case}: stalled");
                match (next_arrival, next_timer) {
                    (Some(a), t) if t.is_none_or(|t| a <= t) => {
                        now = now.max(a);
                        let i = net.iter().position(|x| x.0 == a).unwrap();
                        let (_, psn, ecn) = net.swap_remove(i);
                        if w.on_ack(psn, ecn, now) {
                            firsts[psn as usize] += 1;
                        }
                    }
                    (_, Some(t)) => {
                        now = now.max(t);
                        w.on_timer(now);
                    }
                    _ => {}
                }
                assert!(w.cwnd_bytes() >= PKT as u64 && w.cwnd_bytes() <= 1000 * PKT as u64);
                assert!(!w.gave_up(), "case {case}: gave up at {loss}% loss");
            }
            assert!(firsts.iter().all(|&n| n == 1), "case {case}: {firsts:?}");
            assert_eq!(w.stats().new_packets, packets as u64);
        }
    }
}
