//! NDP as sans-I/O state machines: [`NdpSender`], [`NdpReceiver`] and the receiving host's
//! [`PullPacer`].
//!
//! NDP (Handley et al., SIGCOMM 2017) is receiver-driven. Behaviour follows csg-htsim's
//! `ndp.cpp` (`NdpSrc`, `NdpSink`, `NdpPullPacer`), written anew:
//!
//! - **Sender.** When a message starts it may send `initial_window_packets` packets at once
//!   (the engine sends them back to back at line rate). After that it sends one packet per
//!   pull it is granted. PULLs carry a cumulative pull number per message, so a lost PULL is
//!   made good by the next one (htsim `pull_packets`); pulls that arrive when there is nothing
//!   to send are kept and spent on a later retransmission (htsim's `_last_pull < _max_pull`).
//!   A NACK queues its packet for retransmission; retransmissions go before new packets, the
//!   lowest sequence number first (htsim's `_rtx_queue`, an ordered map).
//! - **Receiver.** An ACK for every data packet, a NACK for every trimmed header (an ACK if
//!   that packet already arrived whole: its copy was trimmed), and, while the message is
//!   incomplete, one pull requested from the host's pacer per arrival. A packet that arrives a
//!   second time is acknowledged again but counted once (`duplicates`), so delivery is
//!   exactly once.
//! - **Pull pacer** (one per receiving host, shared by its messages): at most one pull per
//!   `interval_ps` (the engine uses the time to serialise one MTU on the host's link), queued
//!   pulls served round-robin over messages (htsim's `FairPullQueue`). A pull that may go at
//!   once rides on the ACK or NACK that asked for it (htsim sends the ACK with its pull bit
//!   set); a queued pull goes later as a PULL packet. A complete message's queued pulls are
//!   dropped (htsim `release_pulls`).
//! - **Retransmission timeout** (htsim has one, `NdpSrc::retransmit_packet`, compiled out by
//!   default): a packet sent `rto_ps` ago and neither ACKed nor NACKed is queued again and
//!   sent without waiting for a pull (its header, ACK or NACK was lost, so no pull will come
//!   for it). A sender with packets to send, none in flight and no pull for `rto_ps` since it
//!   last heard from the receiver grants itself one pull (a lost PULL that no later one
//!   covered). After more than [`MAX_TIMEOUTS`] timeout rounds in a row with nothing heard
//!   (a round: the expiries within `rto_ps` of its first, since a lost burst expires packet by
//!   packet) the sender gives up ([`NdpSender::gave_up`]), so a run across a broken network
//!   ends.
//!
//! Not modelled (htsim options off by default there too): return-to-sender of dropped
//! headers, RTS mode, the receiver-window increase (`RCV_CWND`), path scoring of multipath
//! senders (the engine's routing spreads packets instead).

use crate::bitset::Bitset;
use std::collections::VecDeque;

/// A sender gives up after this many retransmission timeouts in a row without an ACK, NACK
/// or PULL between them.
pub const MAX_TIMEOUTS: u32 = 32;

/// Parameters of an NDP sender.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NdpParams {
    /// Packets a message sends when it starts, before any pull (at least 1).
    pub initial_window_packets: u32,
    /// Retransmission timeout (> 0).
    pub rto_ps: u64,
}

/// A packet the sender sends now.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Transmit {
    pub seq: u32,
    /// A copy of a packet sent before (after a NACK or a timeout).
    pub retransmission: bool,
}

/// Counters of one sender.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SenderStats {
    /// Distinct packets sent (the first copy of each).
    pub new_packets: u64,
    /// Copies sent again after a NACK or a timeout.
    pub retransmissions: u64,
    pub acks: u64,
    pub nacks: u64,
    /// Pulls granted (the highest cumulative pull number heard).
    pub pulls: u64,
    /// Timer expiries that queued a packet again or granted a pull.
    pub timeouts: u64,
}

/// Per packet: when its latest copy was sent (in flight), or one of these.
const UNSENT: u64 = u64::MAX;
const ACKED: u64 = u64::MAX - 1;
/// NACKed or timed out: waiting in the retransmission queue.
const QUEUED: u64 = u64::MAX - 2;

/// The sending side of one message of `packets` packets (sequence numbers `0..packets`).
#[derive(Clone, Debug)]
pub struct NdpSender {
    packets: u32,
    params: NdpParams,
    state: Vec<u64>,
    rtx: Bitset,
    rtx_count: u32,
    /// No retransmission is queued below word `rtx_word` of `rtx`.
    rtx_word: usize,
    next_new: u32,
    /// Packets it may send now: the initial window, then pulls, then timeouts.
    allowance: u32,
    max_pull: u32,
    acked: u32,
    in_flight: u32,
    /// Every packet below `low` is acknowledged.
    low: u32,
    last_heard_ps: u64,
    timer_ps: Option<u64>,
    /// Timeout rounds with nothing heard since the first; a round is the expiries within
    /// `rto_ps` of its first (each packet has its own deadline, so one lost burst expires as
    /// a chain of deadlines a packet time apart).
    timeouts_in_a_row: u32,
    round_start_ps: Option<u64>,
    gave_up: bool,
    stats: SenderStats,
}

impl NdpSender {
    /// A sender of `packets` packets (at least 1) starting at `now_ps`.
    pub fn new(packets: u32, params: NdpParams, now_ps: u64) -> NdpSender {
        assert!(packets > 0 && params.initial_window_packets > 0 && params.rto_ps > 0);
        NdpSender {
            packets,
            params,
            state: vec![UNSENT; packets as usize],
            rtx: Bitset::new(packets),
            rtx_count: 0,
            rtx_word: 0,
            next_new: 0,
            allowance: params.initial_window_packets.min(packets),
            max_pull: 0,
            acked: 0,
            in_flight: 0,
            low: 0,
            last_heard_ps: now_ps,
            timer_ps: None,
            timeouts_in_a_row: 0,
            round_start_ps: None,
            gave_up: false,
            stats: SenderStats::default(),
        }
    }

    pub fn packets(&self) -> u32 {
        self.packets
    }
    /// Every packet acknowledged.
    pub fn is_done(&self) -> bool {
        self.acked == self.packets
    }
    /// [`MAX_TIMEOUTS`] timeouts in a row with nothing heard: the sender stopped.
    pub fn gave_up(&self) -> bool {
        self.gave_up
    }
    pub fn stats(&self) -> SenderStats {
        self.stats
    }
    /// Packets sent and neither acknowledged, NACKed nor timed out.
    pub fn in_flight(&self) -> u32 {
        self.in_flight
    }
    /// Packets it may send now (spent or not).
    pub fn allowance(&self) -> u32 {
        self.allowance
    }

    fn wants_to_send(&self) -> bool {
        self.rtx_count > 0 || self.next_new < self.packets
    }

    /// Whether [`NdpSender::transmit`] would send a packet now.
    pub fn has_packet(&self) -> bool {
        !self.gave_up && self.allowance > 0 && self.wants_to_send()
    }

    fn lowest_rtx(&self) -> u32 {
        self.rtx.first_from(self.rtx_word).expect("rtx_count > 0")
    }

    /// The packet [`NdpSender::transmit`] would send now.
    pub fn peek(&self) -> Option<Transmit> {
        if !self.has_packet() {
            return None;
        }
        Some(match self.rtx_count {
            0 => Transmit { seq: self.next_new, retransmission: false },
            _ => Transmit { seq: self.lowest_rtx(), retransmission: true },
        })
    }

    /// Sends the next packet, if it may: the lowest queued retransmission, else the next new
    /// packet.
    pub fn transmit(&mut self, now_ps: u64) -> Option<Transmit> {
        let t = self.peek()?;
        if t.retransmission {
            self.rtx.remove(t.seq);
            self.rtx_count -= 1;
            self.rtx_word = (t.seq / 64) as usize;
            self.stats.retransmissions += 1;
        } else {
            self.next_new += 1;
            self.stats.new_packets += 1;
        }
        self.state[t.seq as usize] = now_ps;
        self.in_flight += 1;
        self.allowance -= 1;
        self.settle(now_ps);
        Some(t)
    }

    fn heard(&mut self, now_ps: u64) {
        self.last_heard_ps = now_ps;
        self.timeouts_in_a_row = 0;
        self.round_start_ps = None;
    }

    fn pulled(&mut self, pull: Option<u32>) {
        if let Some(p) = pull {
            if p > self.max_pull {
                self.allowance += p - self.max_pull;
                self.max_pull = p;
                self.stats.pulls = p as u64;
            }
        }
    }

    /// Arms the timer if something is in flight or the sender waits for a pull: the timer is
    /// never later than the earliest deadline (it may be earlier; [`NdpSender::on_timer`]
    /// then finds nothing due and moves it).
    fn settle(&mut self, now_ps: u64) {
        if self.is_done() || self.gave_up {
            self.timer_ps = None;
        } else if self.timer_ps.is_none() && (self.in_flight > 0 || self.wants_to_send()) {
            self.timer_ps = Some(now_ps + self.params.rto_ps);
        }
    }

    /// An ACK for packet `seq`, carrying pull number `pull` if a pull rode on it.
    pub fn on_ack(&mut self, seq: u32, pull: Option<u32>, now_ps: u64) {
        if seq >= self.packets {
            return;
        }
        self.heard(now_ps);
        self.stats.acks += 1;
        match self.state[seq as usize] {
            ACKED | UNSENT => {}
            QUEUED => {
                // Another copy arrived: the queued retransmission is not needed.
                self.rtx.remove(seq);
                self.rtx_count -= 1;
                self.state[seq as usize] = ACKED;
                self.acked += 1;
            }
            _ => {
                self.in_flight -= 1;
                self.state[seq as usize] = ACKED;
                self.acked += 1;
            }
        }
        self.pulled(pull);
        self.settle(now_ps);
    }

    /// A NACK for packet `seq` (its payload was trimmed), carrying pull number `pull` if a
    /// pull rode on it.
    pub fn on_nack(&mut self, seq: u32, pull: Option<u32>, now_ps: u64) {
        if seq >= self.packets {
            return;
        }
        self.heard(now_ps);
        self.stats.nacks += 1;
        let s = self.state[seq as usize];
        if s < QUEUED {
            self.in_flight -= 1;
            self.queue_rtx(seq);
        }
        self.pulled(pull);
        self.settle(now_ps);
    }

    /// A PULL packet with cumulative pull number `pull`.
    pub fn on_pull(&mut self, pull: u32, now_ps: u64) {
        self.heard(now_ps);
        self.pulled(Some(pull));
        self.settle(now_ps);
    }

    fn queue_rtx(&mut self, seq: u32) {
        self.state[seq as usize] = QUEUED;
        self.rtx.insert(seq);
        self.rtx_count += 1;
        self.rtx_word = self.rtx_word.min((seq / 64) as usize);
    }

    /// When [`NdpSender::on_timer`] should run next (`None`: nothing to time).
    pub fn timer_ps(&self) -> Option<u64> {
        self.timer_ps
    }

    /// The timer expired (or an earlier event for it fired): packets in flight for `rto_ps`
    /// are queued again and may go at once; a sender stuck without a pull grants itself one.
    pub fn on_timer(&mut self, now_ps: u64) {
        if self.is_done() || self.gave_up {
            self.timer_ps = None;
            return;
        }
        if self.timer_ps.is_some_and(|t| t > now_ps) {
            return;
        }
        let rto = self.params.rto_ps;
        while self.low < self.packets && self.state[self.low as usize] == ACKED {
            self.low += 1;
        }
        let mut next = u64::MAX;
        let mut fired = false;
        for seq in self.low..self.next_new {
            let s = self.state[seq as usize];
            if s >= QUEUED {
                continue;
            }
            if s + rto <= now_ps {
                self.in_flight -= 1;
                self.queue_rtx(seq);
                self.allowance += 1;
                fired = true;
            } else {
                next = next.min(s + rto);
            }
        }
        let waiting = self.in_flight == 0 && self.allowance == 0 && self.wants_to_send();
        if waiting {
            if self.last_heard_ps + rto <= now_ps {
                self.allowance += 1;
                fired = true;
            } else {
                next = next.min(self.last_heard_ps + rto);
            }
        }
        if fired {
            self.stats.timeouts += 1;
            if self.round_start_ps.is_none_or(|r| now_ps >= r + rto) {
                self.round_start_ps = Some(now_ps);
                self.timeouts_in_a_row += 1;
            }
            // The next self-granted pull waits a whole timeout again.
            self.last_heard_ps = now_ps;
            if self.timeouts_in_a_row > MAX_TIMEOUTS {
                self.gave_up = true;
                self.timer_ps = None;
                return;
            }
        }
        self.timer_ps = (next != u64::MAX).then_some(next);
        self.settle(now_ps);
    }
}

/// What the receiver answers to an arrival.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reply {
    Ack(u32),
    Nack(u32),
}

/// The receiver's account of one arrival.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Receipt {
    pub reply: Reply,
    /// A data packet that had not arrived before: its payload is delivered.
    pub new_data: bool,
    /// This arrival completed the message.
    pub completed: bool,
    /// The message is still incomplete: ask the host's pacer for one pull.
    pub wants_pull: bool,
}

/// Counters of one receiver.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ReceiverStats {
    pub acks: u64,
    pub nacks: u64,
    /// Data packets that arrived again after their first copy (acknowledged, not delivered).
    pub duplicates: u64,
    /// Pulls issued (riding on ACKs/NACKs or as PULL packets).
    pub pulls: u64,
}

/// The receiving side of one message of `packets` packets.
#[derive(Clone, Debug)]
pub struct NdpReceiver {
    packets: u32,
    got: Bitset,
    received: u32,
    stats: ReceiverStats,
}

impl NdpReceiver {
    pub fn new(packets: u32) -> NdpReceiver {
        NdpReceiver { packets, got: Bitset::new(packets), received: 0, stats: ReceiverStats::default() }
    }
    pub fn is_complete(&self) -> bool {
        self.received == self.packets
    }
    /// Distinct packets received.
    pub fn received(&self) -> u32 {
        self.received
    }
    pub fn stats(&self) -> ReceiverStats {
        self.stats
    }

    /// A whole data packet `seq` arrived.
    pub fn on_data(&mut self, seq: u32) -> Receipt {
        let new_data = seq < self.packets && self.got.insert(seq);
        if new_data {
            self.received += 1;
        } else {
            self.stats.duplicates += 1;
        }
        self.stats.acks += 1;
        Receipt {
            reply: Reply::Ack(seq),
            new_data,
            completed: new_data && self.is_complete(),
            wants_pull: !self.is_complete(),
        }
    }

    /// The header of data packet `seq` arrived (a switch trimmed its payload).
    pub fn on_header(&mut self, seq: u32) -> Receipt {
        let reply = if seq < self.packets && self.got.get(seq) {
            self.stats.acks += 1;
            Reply::Ack(seq)
        } else {
            self.stats.nacks += 1;
            Reply::Nack(seq)
        };
        Receipt { reply, new_data: false, completed: false, wants_pull: !self.is_complete() }
    }

    /// Issues the next pull of this message: its cumulative pull number (1, 2, …).
    pub fn issue_pull(&mut self) -> u32 {
        self.stats.pulls += 1;
        self.stats.pulls as u32
    }
}

/// A receiving host's pull pacer: at most one pull per `interval_ps`, queued pulls served
/// round-robin over the host's incomplete messages.
///
/// Messages are known by the caller's flow id (`u32`) and own a slot from
/// [`PullPacer::open`]; slots are not reused, so a slot's state is a few bytes per message.
#[derive(Clone, Debug)]
pub struct PullPacer {
    interval_ps: u64,
    /// No pull before this time (the previous one plus the interval).
    next_free_ps: u64,
    /// Slots with queued pulls, each at most once, in service order (closed slots are skipped).
    ring: VecDeque<u32>,
    in_ring: Vec<bool>,
    pending: Vec<u32>,
    flows: Vec<u32>,
    queued: u64,
}

impl PullPacer {
    pub fn new(interval_ps: u64) -> PullPacer {
        PullPacer {
            interval_ps,
            next_free_ps: 0,
            ring: VecDeque::new(),
            in_ring: Vec::new(),
            pending: Vec::new(),
            flows: Vec::new(),
            queued: 0,
        }
    }
    pub fn interval_ps(&self) -> u64 {
        self.interval_ps
    }
    /// Pulls waiting.
    pub fn queued(&self) -> u64 {
        self.queued
    }

    /// A new incoming message `flow`: its slot.
    pub fn open(&mut self, flow: u32) -> u32 {
        self.flows.push(flow);
        self.pending.push(0);
        self.in_ring.push(false);
        (self.flows.len() - 1) as u32
    }

    /// The message of `slot` is complete: its queued pulls are dropped.
    pub fn close(&mut self, slot: u32) {
        self.queued -= self.pending[slot as usize] as u64;
        self.pending[slot as usize] = 0;
    }

    /// The message of `slot` asks for a pull at `now_ps`: `true` if it may go now (the caller
    /// sends it with the ACK/NACK that asked), `false` if it was queued (see
    /// [`PullPacer::due_ps`]).
    pub fn request(&mut self, slot: u32, now_ps: u64) -> bool {
        if self.queued == 0 && now_ps >= self.next_free_ps {
            self.next_free_ps = now_ps + self.interval_ps;
            return true;
        }
        self.pending[slot as usize] += 1;
        self.queued += 1;
        if !self.in_ring[slot as usize] {
            self.in_ring[slot as usize] = true;
            self.ring.push_back(slot);
        }
        false
    }

    /// When the next queued pull is due (`None`: none queued).
    pub fn due_ps(&self) -> Option<u64> {
        (self.queued > 0).then_some(self.next_free_ps)
    }

    /// The queued pull that goes at `now_ps`, if one is due: the flow it is for.
    pub fn poll(&mut self, now_ps: u64) -> Option<u32> {
        if self.queued == 0 || now_ps < self.next_free_ps {
            return None;
        }
        loop {
            let slot = self.ring.pop_front().expect("queued pulls are in the ring");
            let s = slot as usize;
            if self.pending[s] == 0 {
                self.in_ring[s] = false; // closed
                continue;
            }
            self.pending[s] -= 1;
            self.queued -= 1;
            if self.pending[s] > 0 {
                self.ring.push_back(slot);
            } else {
                self.in_ring[s] = false;
            }
            self.next_free_ps = now_ps + self.interval_ps;
            return Some(self.flows[s]);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const RTO: u64 = 1_000_000;

    fn params(w: u32) -> NdpParams {
        NdpParams { initial_window_packets: w, rto_ps: RTO }
    }

    fn drain(s: &mut NdpSender, now: u64) -> Vec<Transmit> {
        std::iter::from_fn(|| s.transmit(now)).collect()
    }

    fn seqs(t: &[Transmit]) -> Vec<u32> {
        t.iter().map(|t| t.seq).collect()
    }

    #[test]
    fn the_initial_window_then_one_packet_per_pull() {
        let mut s = NdpSender::new(10, params(3), 0);
        assert_eq!(seqs(&drain(&mut s, 0)), [0, 1, 2]);
        assert!(!s.has_packet());
        // ACKs without a pull send nothing.
        s.on_ack(0, None, 10);
        assert!(!s.has_packet());
        // A pull rides on an ACK: one packet.
        s.on_ack(1, Some(1), 11);
        assert_eq!(seqs(&drain(&mut s, 11)), [3]);
        // Cumulative pull numbers: pull 3 after pull 1 grants two (pull 2 was lost).
        s.on_pull(3, 12);
        assert_eq!(seqs(&drain(&mut s, 12)), [4, 5]);
        // An old pull number grants nothing.
        s.on_pull(2, 13);
        assert!(!s.has_packet());
        assert_eq!(s.stats().pulls, 3);
        assert_eq!(s.in_flight(), 4); // 2, 3, 4, 5
    }

    #[test]
    fn a_window_larger_than_the_message_sends_the_message() {
        let mut s = NdpSender::new(2, params(15), 0);
        assert_eq!(seqs(&drain(&mut s, 0)), [0, 1]);
        s.on_ack(1, Some(1), 5);
        s.on_ack(0, Some(2), 6);
        assert!(s.is_done());
        assert_eq!(s.timer_ps(), None);
        assert!(!s.has_packet());
    }

    #[test]
    fn retransmissions_go_first_lowest_sequence_first() {
        let mut s = NdpSender::new(100, params(4), 0);
        drain(&mut s, 0);
        s.on_nack(2, None, 5);
        s.on_nack(1, None, 6);
        assert!(!s.has_packet(), "a NACK without a pull only queues the packet");
        s.on_pull(1, 7);
        let t = drain(&mut s, 7);
        assert_eq!(t, [Transmit { seq: 1, retransmission: true }]);
        s.on_pull(3, 8);
        assert_eq!(
            drain(&mut s, 8),
            [Transmit { seq: 2, retransmission: true }, Transmit { seq: 4, retransmission: false }]
        );
        assert_eq!(s.stats().retransmissions, 2);
        assert_eq!(s.stats().new_packets, 5);
    }

    #[test]
    fn pulls_that_find_nothing_to_send_are_kept_for_a_later_nack() {
        let mut s = NdpSender::new(2, params(2), 0);
        drain(&mut s, 0);
        s.on_pull(1, 5); // nothing left to send: banked
        assert!(!s.has_packet());
        s.on_nack(1, None, 6);
        assert_eq!(drain(&mut s, 6), [Transmit { seq: 1, retransmission: true }]);
    }

    #[test]
    fn an_ack_for_a_queued_packet_cancels_its_retransmission() {
        let mut s = NdpSender::new(3, params(3), 0);
        drain(&mut s, 0);
        s.on_nack(0, None, 5);
        s.on_ack(0, None, 6); // an earlier copy got through after all
        s.on_pull(1, 7);
        assert!(!s.has_packet(), "nothing to retransmit");
        s.on_ack(1, None, 8);
        s.on_ack(2, None, 9);
        assert!(s.is_done());
    }

    #[test]
    fn a_timeout_resends_what_is_in_flight_without_a_pull() {
        let mut s = NdpSender::new(4, params(2), 0);
        drain(&mut s, 100);
        assert_eq!(s.timer_ps(), Some(100 + RTO));
        s.on_ack(0, Some(1), 500); // packet 1's ACK (or header) is lost
        assert_eq!(seqs(&drain(&mut s, 500)), [2]);
        // Early expiry: nothing due, the timer moves to packet 1's deadline.
        s.on_timer(100 + RTO - 1);
        assert_eq!(s.stats().timeouts, 0);
        s.on_timer(100 + RTO);
        assert_eq!(s.stats().timeouts, 1);
        assert_eq!(drain(&mut s, 100 + RTO), [Transmit { seq: 1, retransmission: true }]);
        // Packet 2 (sent at 500) is next.
        assert_eq!(s.timer_ps(), Some(500 + RTO));
    }

    #[test]
    fn a_sender_waiting_for_a_lost_pull_grants_itself_one_after_a_timeout() {
        let mut s = NdpSender::new(3, params(1), 0);
        drain(&mut s, 0);
        s.on_ack(0, None, 50); // the pull that should ride on it was lost
        assert_eq!(s.in_flight(), 0);
        assert_eq!(s.timer_ps(), Some(RTO), "the timer was armed when packet 0 left");
        s.on_timer(RTO);
        assert!(!s.has_packet(), "heard from the receiver at 50: wait until 50 + RTO");
        assert_eq!(s.timer_ps(), Some(50 + RTO));
        s.on_timer(50 + RTO);
        assert_eq!(drain(&mut s, 50 + RTO), [Transmit { seq: 1, retransmission: false }]);
        assert_eq!(s.stats().timeouts, 1);
    }

    #[test]
    fn a_sender_gives_up_after_max_timeouts_in_a_row() {
        let mut s = NdpSender::new(1, params(1), 0);
        let mut now = 0;
        drain(&mut s, now);
        for _ in 0..=MAX_TIMEOUTS {
            now = s.timer_ps().expect("armed");
            s.on_timer(now);
            drain(&mut s, now);
        }
        assert!(s.gave_up());
        assert_eq!(s.timer_ps(), None);
        assert!(!s.has_packet());
        assert_eq!(s.stats().timeouts, MAX_TIMEOUTS as u64 + 1);
        // Anything heard in between restarts the count.
        let mut s = NdpSender::new(2, params(1), 0);
        drain(&mut s, 0);
        for k in 0..3 * MAX_TIMEOUTS {
            let t = s.timer_ps().unwrap();
            s.on_timer(t);
            drain(&mut s, t);
            if k % 10 == 9 {
                s.on_pull(k + 1, t + 1);
            }
        }
        assert!(!s.gave_up());
    }

    /// A lost burst expires packet by packet, one deadline a packet time after the other:
    /// that is one timeout round, however many packets it holds.
    #[test]
    fn the_expiries_of_one_lost_burst_are_one_timeout_round() {
        let n = 3 * MAX_TIMEOUTS;
        let mut s = NdpSender::new(n, params(n), 0);
        for k in 0..n as u64 {
            s.transmit(k * 10);
        }
        let mut expiries = 0;
        while let Some(t) = s.timer_ps() {
            if t > RTO + 10 * n as u64 {
                break;
            }
            s.on_timer(t);
            expiries += 1;
            assert!(!s.gave_up(), "gave up after {expiries} expiries of one burst");
            assert!(s.transmit(t).unwrap().retransmission);
        }
        assert_eq!(expiries, n, "each packet expired on its own deadline");
        assert_eq!(s.stats().timeouts, n as u64);
    }

    #[test]
    fn the_receiver_acks_nacks_and_counts_each_packet_once() {
        let mut r = NdpReceiver::new(3);
        let a = r.on_data(1);
        assert_eq!(a, Receipt { reply: Reply::Ack(1), new_data: true, completed: false, wants_pull: true });
        assert_eq!(
            r.on_header(0),
            Receipt { reply: Reply::Nack(0), new_data: false, completed: false, wants_pull: true }
        );
        // A trimmed copy of a packet that already arrived is acknowledged.
        assert_eq!(r.on_header(1).reply, Reply::Ack(1));
        assert!(!r.on_data(1).new_data);
        assert_eq!(r.stats().duplicates, 1);
        assert!(r.on_data(0).new_data);
        let last = r.on_data(2);
        assert!(last.completed && !last.wants_pull);
        assert_eq!(r.received(), 3);
        // After completion: ACK again, no pull, not completed twice.
        assert_eq!(
            r.on_data(2),
            Receipt { reply: Reply::Ack(2), new_data: false, completed: false, wants_pull: false }
        );
        assert_eq!(r.issue_pull(), 1);
        assert_eq!(r.issue_pull(), 2);
    }

    #[test]
    fn the_pacer_spaces_pulls_and_serves_flows_round_robin() {
        let mut p = PullPacer::new(100);
        let a = p.open(7);
        let b = p.open(9);
        assert!(p.request(a, 1_000), "idle pacer: the pull goes at once");
        assert!(!p.request(a, 1_050), "50 ps later: queued");
        assert!(!p.request(a, 1_060));
        assert!(!p.request(b, 1_070));
        assert_eq!(p.due_ps(), Some(1_100));
        assert_eq!(p.poll(1_099), None);
        assert_eq!(p.poll(1_100), Some(7));
        assert_eq!(p.due_ps(), Some(1_200));
        assert_eq!(p.poll(1_200), Some(9), "round-robin: b before a's second");
        assert_eq!(p.poll(1_300), Some(7));
        assert_eq!(p.due_ps(), None);
        // Idle again, but within the interval of the last pull: queued.
        assert!(!p.request(b, 1_350));
        assert_eq!(p.poll(1_400), Some(9));
        assert!(p.request(a, 1_500));
    }

    #[test]
    fn closing_a_flow_drops_its_queued_pulls() {
        let mut p = PullPacer::new(10);
        let a = p.open(1);
        let b = p.open(2);
        assert!(p.request(a, 0));
        assert!(!p.request(a, 1));
        assert!(!p.request(a, 2));
        assert!(!p.request(b, 3));
        p.close(a);
        assert_eq!(p.queued(), 1);
        assert_eq!(p.poll(10), Some(2));
        assert_eq!(p.poll(20), None);
        assert_eq!(p.due_ps(), None);
    }

    /// A whole exchange without a network: every packet delivered exactly once whatever the
    /// order of trims, losses and pulls, driven by a small seeded generator.
    #[test]
    fn random_exchanges_deliver_every_packet_exactly_once() {
        let mut x = 0x1234_5678_9ABC_DEF0u64;
        let mut rnd = move |n: u64| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x % n
        };
        for case in 0..300 {
            let n = 1 + rnd(60) as u32;
            let w = 1 + rnd(20) as u32;
            let (trim, lose) = (rnd(50), rnd(30)); // percent
            let mut s = NdpSender::new(n, params(w), 0);
            let mut r = NdpReceiver::new(n);
            let mut now = 0u64;
            let mut delivered = 0;
            // In flight towards the receiver: (seq, trimmed); towards the sender: replies.
            let mut fwd: VecDeque<(u32, bool)> = VecDeque::new();
            let mut back: VecDeque<(Reply, Option<u32>)> = VecDeque::new();
            let mut steps = 0;
            while !s.is_done() {
                steps += 1;
                assert!(steps < 1_000_000, "case {case} does not finish");
                assert!(!s.gave_up(), "case {case}: gave up");
                now += 1;
                while let Some(t) = s.transmit(now) {
                    if rnd(100) >= lose {
                        fwd.push_back((t.seq, rnd(100) < trim));
                    }
                }
                if let Some((seq, trimmed)) = fwd.pop_front() {
                    let rc = if trimmed { r.on_header(seq) } else { r.on_data(seq) };
                    delivered += rc.new_data as u32;
                    let pull = rc.wants_pull.then(|| r.issue_pull());
                    if rnd(100) >= lose {
                        back.push_back((rc.reply, pull));
                    }
                } else if let Some((reply, pull)) = back.pop_front() {
                    match reply {
                        Reply::Ack(q) => s.on_ack(q, pull, now),
                        Reply::Nack(q) => s.on_nack(q, pull, now),
                    }
                } else if let Some(t) = s.timer_ps() {
                    now = now.max(t);
                    s.on_timer(now);
                }
            }
            assert!(r.is_complete(), "case {case}");
            assert_eq!(delivered, n, "case {case}: each packet delivered once");
            let st = s.stats();
            assert_eq!(st.new_packets, n as u64, "case {case}: each packet sent new once");
            let arrivals = r.stats().acks + r.stats().nacks;
            assert!(arrivals <= st.new_packets + st.retransmissions, "case {case}: no arrival that was not sent");
            if lose == 0 && trim == 0 {
                assert_eq!(st.retransmissions, 0, "case {case}: nothing to retransmit without loss or trims");
            }
        }
    }
}
