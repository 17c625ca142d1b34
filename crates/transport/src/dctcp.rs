//! DCTCP as sans-I/O state machines: [`DctcpSender`] and [`DctcpReceiver`].
//!
//! DCTCP (Alizadeh et al., "Data Center TCP (DCTCP)", SIGCOMM 2010) is TCP whose window
//! reacts to the *fraction* of ECN-marked packets instead of halving on any mark. Behaviour
//! follows the paper and csg-htsim's `tcp.cpp`/`dctcp.cpp` (`TcpSrc`, `DCTCPSrc`), written anew,
//! with sequence numbers counting packets of one message:
//!
//! - **Window** in bytes (`cwnd_bytes`), one MSS (`mss_bytes`, the payload of a full packet)
//!   per packet. The sender may have `cwnd / MSS` (rounded down, at least one) packets
//!   unacknowledged. It starts at `initial_window_packets` MSS with an unbounded slow-start
//!   threshold. **Slow start**: each newly acknowledged packet adds one MSS. **Congestion
//!   avoidance** (`cwnd >= ssthresh`): each newly acknowledged packet adds `MSS² / cwnd`
//!   (integer division), one MSS per window of data, i.e. per round trip.
//! - **ECN echo.** The receiver acknowledges **every data packet** (no delayed ACKs: the
//!   paper's two-state ACK machine is then not needed, since each ACK carries exactly the CE
//!   bit of the one packet that caused it). ACKs are cumulative: they carry the next sequence
//!   number the receiver expects, and ECE, the CE bit of the packet that triggered them.
//! - **α.** The sender counts the packets newly acknowledged and those acknowledged by ACKs
//!   with ECE. Once per window of data (when the cumulative ACK passes the highest sequence
//!   number sent when the window began) it sets `α ← (1 − g)·α + g·F`, `F` the marked fraction
//!   of that window, and starts a new window. α starts at 1 (Linux's `dctcp_alpha_on_init`).
//! - **Reduction.** An ACK with ECE outside a reduction window sets
//!   `cwnd ← max(MSS, cwnd·(1 − α/2))` and `ssthresh ← cwnd`, and opens a reduction window that
//!   ends when everything sent so far is acknowledged: at most one reduction per window of data
//!   (the paper's and Linux's CWR state).
//! - **Fast retransmit** on the third duplicate ACK (NewReno, RFC 6582, without window
//!   inflation): `ssthresh ← max(MSS, cwnd/2)`, `cwnd ← ssthresh`, the first unacknowledged
//!   packet is sent again at once (whatever the window) and, until everything sent before the
//!   loss is acknowledged, each partial ACK sends the next hole again.
//! - **Retransmission timeout** (RFC 6298): `RTO = max(min_rto, SRTT + 4·RTTVAR)` from RTT
//!   samples of packets sent once (Karn), `min_rto` before the first sample; each expiry
//!   doubles it (up to [`MAX_BACKOFF`] doublings), sets `ssthresh ← max(MSS, cwnd/2)`,
//!   `cwnd ← MSS` and goes back to the first unacknowledged packet (go-back-N: the packets
//!   after it are sent again as the window allows; the receiver keeps those it already has, so
//!   a cumulative ACK may skip over them). The timer runs whenever data is unacknowledged and
//!   restarts when an ACK acknowledges new data. After more than [`MAX_TIMEOUTS`] expiries in a
//!   row with no new data acknowledged the sender gives up ([`DctcpSender::gave_up`]), so a run
//!   across a broken network ends.
//!
//! Not modelled: SACK, delayed ACKs, receive windows, Nagle, byte-granular sequence numbers
//! (a message's last packet may be short; it still counts one MSS in the window).

use crate::bitset::Bitset;

/// A sender gives up after this many retransmission timeouts in a row with no new data
/// acknowledged between them.
pub const MAX_TIMEOUTS: u32 = 10;
/// The retransmission timeout doubles on each expiry, at most this many times.
pub const MAX_BACKOFF: u32 = 6;

/// Parameters of a DCTCP sender.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct DctcpParams {
    /// Bytes a full packet carries (the MSS the window counts in).
    pub mss_bytes: u64,
    /// Window at the start, in packets (at least 1).
    pub initial_window_packets: u32,
    /// α's gain `g` (0 < g <= 1; the paper's 1/16).
    pub g: f64,
    /// Lower bound of the retransmission timeout, and its value before an RTT sample (> 0).
    pub min_rto_ps: u64,
}

/// A packet the sender sends now.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Transmit {
    pub seq: u32,
    /// A copy of a packet sent before (fast retransmit, partial ACK or after a timeout).
    pub retransmission: bool,
}

/// Counters of one sender.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SenderStats {
    /// Distinct packets sent (the first copy of each).
    pub new_packets: u64,
    /// Copies sent again.
    pub retransmissions: u64,
    pub acks: u64,
    /// ACKs that carried ECE (the receiver echoed a CE mark).
    pub marks_echoed: u64,
    /// Window reductions for ECN (at most one per window of data).
    pub ecn_reductions: u64,
    /// Third duplicate ACKs that started a fast retransmit.
    pub fast_retransmits: u64,
    /// Retransmission timer expiries.
    pub timeouts: u64,
}

/// Per packet: when its latest copy was sent, with this bit set once it has been sent twice
/// (no RTT sample from it then: Karn's rule).
const RESENT: u64 = 1 << 63;
const UNSENT: u64 = u64::MAX;

/// The sending side of one message of `packets` packets (sequence numbers `0..packets`).
#[derive(Clone, Debug)]
pub struct DctcpSender {
    packets: u32,
    p: DctcpParams,
    sent_ps: Vec<u64>,
    /// Every packet below it is acknowledged (the cumulative ACK).
    una: u32,
    /// The next packet to send in sequence (goes back to `una` after a timeout).
    nxt: u32,
    /// One more than the highest packet ever sent.
    high: u32,
    cwnd: u64,
    ssthresh: u64,
    dupacks: u32,
    /// In fast recovery until `una` reaches `recover`.
    recover: Option<u32>,
    /// A retransmission to send at once, whatever the window.
    rtx: Option<u32>,
    alpha: f64,
    /// The α observation window ends when `una` passes this.
    window_end: u32,
    window_acked: u64,
    window_marked: u64,
    /// No ECN reduction until `una` passes this.
    cwr_end: u32,
    srtt_ps: Option<u64>,
    rttvar_ps: u64,
    backoff: u32,
    timeouts_in_a_row: u32,
    /// When the retransmission timer expires (`None`: nothing unacknowledged).
    deadline_ps: Option<u64>,
    gave_up: bool,
    stats: SenderStats,
}

impl DctcpSender {
    /// A sender of `packets` packets (at least 1).
    pub fn new(packets: u32, p: DctcpParams) -> DctcpSender {
        assert!(
            packets > 0
                && p.mss_bytes > 0
                && p.initial_window_packets > 0
                && p.min_rto_ps > 0
                && p.g > 0.0
                && p.g <= 1.0
        );
        DctcpSender {
            packets,
            p,
            sent_ps: vec![UNSENT; packets as usize],
            una: 0,
            nxt: 0,
            high: 0,
            cwnd: p.initial_window_packets as u64 * p.mss_bytes,
            ssthresh: u64::MAX,
            dupacks: 0,
            recover: None,
            rtx: None,
            alpha: 1.0,
            window_end: 0,
            window_acked: 0,
            window_marked: 0,
            cwr_end: 0,
            srtt_ps: None,
            rttvar_ps: 0,
            backoff: 0,
            timeouts_in_a_row: 0,
            deadline_ps: None,
            gave_up: false,
            stats: SenderStats::default(),
        }
    }

    pub fn packets(&self) -> u32 {
        self.packets
    }
    /// Every packet acknowledged.
    pub fn is_done(&self) -> bool {
        self.una == self.packets
    }
    pub fn gave_up(&self) -> bool {
        self.gave_up
    }
    pub fn stats(&self) -> SenderStats {
        self.stats
    }
    pub fn cwnd_bytes(&self) -> u64 {
        self.cwnd
    }
    pub fn ssthresh_bytes(&self) -> u64 {
        self.ssthresh
    }
    pub fn alpha(&self) -> f64 {
        self.alpha
    }
    /// Packets sent in sequence and not yet acknowledged.
    pub fn outstanding(&self) -> u32 {
        self.nxt.max(self.una) - self.una
    }
    /// The first unacknowledged packet.
    pub fn una(&self) -> u32 {
        self.una
    }
    /// The retransmission timeout now (with backoff).
    pub fn rto_ps(&self) -> u64 {
        let base = match self.srtt_ps {
            None => self.p.min_rto_ps,
            Some(s) => (s + 4 * self.rttvar_ps).max(self.p.min_rto_ps),
        };
        base << self.backoff
    }

    fn window_packets(&self) -> u32 {
        (self.cwnd / self.p.mss_bytes).clamp(1, u32::MAX as u64) as u32
    }

    /// The packet [`DctcpSender::transmit`] would send now.
    pub fn peek(&self) -> Option<Transmit> {
        if self.gave_up || self.is_done() {
            return None;
        }
        if let Some(seq) = self.rtx {
            return Some(Transmit { seq, retransmission: true });
        }
        (self.nxt < self.packets && self.nxt - self.una < self.window_packets())
            .then_some(Transmit { seq: self.nxt, retransmission: self.nxt < self.high })
    }

    /// Whether [`DctcpSender::transmit`] would send a packet now.
    pub fn has_packet(&self) -> bool {
        self.peek().is_some()
    }

    /// Sends the next packet, if the window (or a pending retransmission) allows.
    pub fn transmit(&mut self, now_ps: u64) -> Option<Transmit> {
        let t = self.peek()?;
        if self.rtx == Some(t.seq) {
            self.rtx = None;
        }
        if t.seq == self.nxt {
            self.nxt += 1;
        }
        let s = &mut self.sent_ps[t.seq as usize];
        if t.retransmission {
            *s = now_ps | RESENT;
            self.stats.retransmissions += 1;
        } else {
            *s = now_ps;
            self.stats.new_packets += 1;
        }
        self.high = self.high.max(t.seq + 1);
        if self.deadline_ps.is_none() || t.retransmission && self.timeouts_in_a_row > 0 {
            self.deadline_ps = Some(now_ps + self.rto_ps());
        }
        Some(t)
    }

    /// A cumulative ACK: the receiver expects packet `ack` next; `ece`: the packet that caused
    /// it was CE-marked.
    pub fn on_ack(&mut self, ack: u32, ece: bool, now_ps: u64) {
        if self.gave_up || self.is_done() || ack > self.high {
            return;
        }
        self.stats.acks += 1;
        if ece {
            self.stats.marks_echoed += 1;
        }
        if ack > self.una {
            let newly = (ack - self.una) as u64;
            // An RTT sample from the newest packet this ACK covers, if nothing was resent
            // since the last loss (Karn: the ACK may be for a copy).
            let s = self.sent_ps[ack as usize - 1];
            if self.recover.is_none() && s & RESENT == 0 && s <= now_ps {
                self.rtt_sample(now_ps - s);
            }
            self.una = ack;
            self.nxt = self.nxt.max(ack);
            self.dupacks = 0;
            self.backoff = 0;
            self.timeouts_in_a_row = 0;
            self.window_acked += newly;
            if ece {
                self.window_marked += newly;
            }
            match self.recover {
                Some(r) if ack < r => {
                    // Partial ACK: the next hole goes again at once (unless going back to it
                    // after a timeout sends it next anyway).
                    if ack < self.nxt {
                        self.rtx = Some(ack);
                    }
                }
                Some(_) => {
                    self.recover = None;
                    self.cwnd = self.ssthresh;
                }
                None => {
                    if self.cwnd < self.ssthresh {
                        self.cwnd += newly * self.p.mss_bytes;
                    } else {
                        self.cwnd += newly * self.p.mss_bytes * self.p.mss_bytes / self.cwnd;
                    }
                }
            }
            if self.rtx.is_some_and(|r| r < self.una) {
                self.rtx = None;
            }
            if self.una >= self.window_end {
                if self.window_acked > 0 {
                    let f = self.window_marked as f64 / self.window_acked as f64;
                    self.alpha = (1.0 - self.p.g) * self.alpha + self.p.g * f;
                }
                self.window_acked = 0;
                self.window_marked = 0;
                self.window_end = self.high.max(self.una + 1);
            }
            self.deadline_ps = (!self.is_done() && self.una < self.high).then(|| now_ps + self.rto_ps());
        } else if ack == self.una && self.una < self.high {
            self.dupacks += 1;
            if self.dupacks == 3 && self.recover.is_none() {
                self.stats.fast_retransmits += 1;
                self.ssthresh = (self.cwnd / 2).max(self.p.mss_bytes);
                self.cwnd = self.ssthresh;
                self.recover = Some(self.high);
                self.rtx = Some(self.una);
                // The loss reduced the window for this window of data already.
                self.cwr_end = self.high;
            }
        }
        if ece && self.una >= self.cwr_end && !self.is_done() {
            self.stats.ecn_reductions += 1;
            self.cwnd = ((self.cwnd as f64 * (1.0 - self.alpha / 2.0)) as u64).max(self.p.mss_bytes);
            self.ssthresh = self.cwnd;
            self.cwr_end = self.high.max(self.una + 1);
        }
    }

    fn rtt_sample(&mut self, r: u64) {
        match self.srtt_ps {
            None => {
                self.srtt_ps = Some(r);
                self.rttvar_ps = r / 2;
            }
            Some(s) => {
                self.rttvar_ps = (3 * self.rttvar_ps + s.abs_diff(r)) / 4;
                self.srtt_ps = Some((7 * s + r) / 8);
            }
        }
    }

    /// When [`DctcpSender::on_timer`] should run next: always set while data is
    /// unacknowledged.
    pub fn timer_ps(&self) -> Option<u64> {
        self.deadline_ps
    }

    /// The timer fired at `now_ps` (nothing happens if the deadline has moved past it).
    pub fn on_timer(&mut self, now_ps: u64) {
        let Some(d) = self.deadline_ps else { return };
        if d > now_ps || self.gave_up || self.is_done() {
            return;
        }
        self.stats.timeouts += 1;
        self.timeouts_in_a_row += 1;
        if self.timeouts_in_a_row > MAX_TIMEOUTS {
            self.gave_up = true;
            self.deadline_ps = None;
            return;
        }
        self.backoff = (self.backoff + 1).min(MAX_BACKOFF);
        self.ssthresh = (self.cwnd / 2).max(self.p.mss_bytes);
        self.cwnd = self.p.mss_bytes;
        self.nxt = self.una;
        self.rtx = None;
        self.recover = Some(self.high);
        self.dupacks = 0;
        self.cwr_end = self.high;
        self.deadline_ps = Some(now_ps + self.rto_ps());
    }
}

/// The receiver's account of one data packet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Receipt {
    /// The cumulative ACK to send: the next packet expected.
    pub ack: u32,
    /// ECN echo: the packet was CE-marked.
    pub ece: bool,
    /// A packet that had not arrived before: its payload is delivered.
    pub new_data: bool,
    /// This arrival completed the message.
    pub completed: bool,
}

/// Counters of one receiver.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ReceiverStats {
    pub acks: u64,
    /// ACKs sent with ECE.
    pub marks_echoed: u64,
    /// Data packets that arrived again (acknowledged, not delivered).
    pub duplicates: u64,
}

/// The receiving side of one message of `packets` packets: keeps out-of-order packets and
/// acknowledges every arrival cumulatively.
#[derive(Clone, Debug)]
pub struct DctcpReceiver {
    packets: u32,
    got: Bitset,
    expected: u32,
    received: u32,
    stats: ReceiverStats,
}

impl DctcpReceiver {
    pub fn new(packets: u32) -> DctcpReceiver {
        DctcpReceiver { packets, got: Bitset::new(packets), expected: 0, received: 0, stats: ReceiverStats::default() }
    }
    pub fn is_complete(&self) -> bool {
        self.received == self.packets
    }
    pub fn received(&self) -> u32 {
        self.received
    }
    pub fn stats(&self) -> ReceiverStats {
        self.stats
    }

    /// Data packet `seq` arrived, CE-marked if `ce`.
    pub fn on_data(&mut self, seq: u32, ce: bool) -> Receipt {
        let new_data = seq < self.packets && self.got.insert(seq);
        if new_data {
            self.received += 1;
            while self.expected < self.packets && self.got.get(self.expected) {
                self.expected += 1;
            }
        } else {
            self.stats.duplicates += 1;
        }
        self.stats.acks += 1;
        self.stats.marks_echoed += ce as u64;
        Receipt { ack: self.expected, ece: ce, new_data, completed: new_data && self.is_complete() }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::VecDeque;

    const MSS: u64 = 1000;
    const RTO: u64 = 1_000_000;

    fn params(w: u32) -> DctcpParams {
        DctcpParams { mss_bytes: MSS, initial_window_packets: w, g: 1.0 / 16.0, min_rto_ps: RTO }
    }

    fn drain(s: &mut DctcpSender, now: u64) -> Vec<u32> {
        std::iter::from_fn(|| s.transmit(now)).map(|t| t.seq).collect()
    }

    /// A lone flow, step by step: slow start, an ECN reduction by α/2 (once per window),
    /// congestion avoidance, and α after each window, against values computed by hand:
    /// α₁ = 15/16 (window {0} unmarked), α₂ = (15/16)², α₄ = 15/16·α₂ + 1/16 (window {2, 3}
    /// both marked), α₆ = 15/16·α₄, α₇ = 15/16·α₆ + 1/16.
    #[test]
    fn a_lone_flow_step_by_step() {
        let mut s = DctcpSender::new(100, params(2));
        assert_eq!(drain(&mut s, 0), [0, 1], "initial window: 2 packets");
        assert_eq!(s.timer_ps(), Some(RTO), "armed at the first packet");
        // Slow start: the ACK adds one MSS; the first window ({0}, unmarked) ends.
        s.on_ack(1, false, 10);
        assert_eq!(s.cwnd_bytes(), 3 * MSS);
        assert_eq!(s.alpha(), 0.9375);
        assert_eq!(drain(&mut s, 10), [2, 3]);
        assert_eq!(s.timer_ps(), Some(10 + RTO), "restarted by new data acknowledged");
        s.on_ack(2, false, 20);
        assert_eq!(s.cwnd_bytes(), 4 * MSS);
        assert_eq!(s.alpha(), 0.87890625, "window {{1}} unmarked");
        assert_eq!(drain(&mut s, 20), [4, 5]);
        // ECE: slow start to 5000, then the cut with α₂: 5000·(1 − 0.87890625/2) = 2802.73.
        s.on_ack(3, true, 30);
        assert_eq!((s.cwnd_bytes(), s.ssthresh_bytes()), (2802, 2802));
        assert_eq!(s.alpha(), 0.87890625, "window {{2, 3}} still open");
        // ECE again, same window of data (sent before the cut): no second cut; congestion
        // avoidance 2802 + 10⁶/2802 = 3158; window {2, 3} ends with F = 2/2.
        s.on_ack(4, true, 40);
        assert_eq!(s.cwnd_bytes(), 3158);
        assert_eq!(s.alpha(), 0.886474609375);
        assert_eq!(s.stats().ecn_reductions, 1);
        assert_eq!(drain(&mut s, 40), [6], "a 3-packet window, 2 outstanding");
        s.on_ack(5, false, 50);
        assert_eq!(s.cwnd_bytes(), 3474, "3158 + 10⁶/3158");
        s.on_ack(6, false, 60);
        assert_eq!(s.cwnd_bytes(), 3761, "3474 + 10⁶/3474");
        assert_eq!(s.alpha(), 0.8310699462890625, "window {{4, 5}} unmarked");
        assert_eq!(drain(&mut s, 60), [7, 8]);
        // Packet 6 was sent after the cut: its mark cuts again, with α₇ (window {6} marked):
        // 3761 + 10⁶/3761 = 4026, then 4026·(1 − α₇/2) = 2331.8.
        s.on_ack(7, true, 70);
        assert_eq!(s.alpha(), 0.8416280746459961);
        assert_eq!(s.cwnd_bytes(), 2331);
        assert_eq!(s.stats().ecn_reductions, 2);
        assert_eq!(s.stats().marks_echoed, 3);
        assert_eq!((s.stats().new_packets, s.stats().retransmissions), (9, 0));
    }

    #[test]
    fn three_duplicate_acks_retransmit_the_hole_and_halve_the_window() {
        let mut s = DctcpSender::new(20, params(8));
        assert_eq!(drain(&mut s, 0).len(), 8);
        // Packet 0 is lost: 1..=3 arrive, each a duplicate ACK of 0.
        s.on_ack(0, false, 10);
        s.on_ack(0, false, 11);
        assert!(!s.has_packet(), "no retransmission before the third; the window is full");
        assert_eq!(s.stats().fast_retransmits, 0);
        s.on_ack(0, false, 12);
        assert_eq!(s.stats().fast_retransmits, 1);
        assert_eq!(s.cwnd_bytes(), 4 * MSS);
        assert_eq!(s.transmit(12), Some(Transmit { seq: 0, retransmission: true }));
        assert!(!s.has_packet(), "8 outstanding, window 4");
        // Packets 1..=5 and 0's copy arrived; 6 is lost too: partial ACK of 6.
        s.on_ack(6, false, 20);
        assert_eq!(s.transmit(20), Some(Transmit { seq: 6, retransmission: true }));
        // The full ACK ends recovery.
        s.on_ack(8, false, 30);
        assert_eq!(s.cwnd_bytes(), 4 * MSS);
        assert_eq!(drain(&mut s, 30), [8, 9, 10, 11]);
        assert_eq!(s.stats().retransmissions, 2);
    }

    #[test]
    fn a_timeout_goes_back_to_the_hole_with_a_one_packet_window_and_backs_off() {
        let mut s = DctcpSender::new(10, params(4));
        drain(&mut s, 0);
        s.on_timer(RTO - 1);
        assert_eq!(s.stats().timeouts, 0, "not due yet");
        s.on_timer(RTO);
        assert_eq!(s.stats().timeouts, 1);
        assert_eq!(s.cwnd_bytes(), MSS);
        assert_eq!(s.ssthresh_bytes(), 2 * MSS);
        assert_eq!(s.timer_ps(), Some(RTO + 2 * RTO), "doubled");
        assert_eq!(s.transmit(RTO), Some(Transmit { seq: 0, retransmission: true }));
        assert!(!s.has_packet());
        // The receiver had 1..=3: the ACK of the copy jumps to 4; the backoff ends.
        s.on_ack(4, false, RTO + 100);
        assert_eq!(s.cwnd_bytes(), 2 * MSS, "recovery over: cwnd = ssthresh");
        assert_eq!(s.rto_ps(), RTO, "no RTT sample from a resent packet; backoff reset");
        assert_eq!(drain(&mut s, RTO + 100), [4, 5]);
    }

    #[test]
    fn the_window_never_goes_below_one_packet_and_a_lone_sender_gives_up() {
        let mut s = DctcpSender::new(50, params(1));
        drain(&mut s, 0);
        for k in 0..20 {
            s.on_ack(k + 1, true, 10 + k as u64);
            assert!(s.cwnd_bytes() >= MSS);
            drain(&mut s, 10 + k as u64);
        }
        let mut now = 100;
        for _ in 0..=MAX_TIMEOUTS {
            now = s.timer_ps().expect("armed while data is unacknowledged");
            s.on_timer(now);
            drain(&mut s, now);
        }
        assert!(s.gave_up());
        assert_eq!(s.timer_ps(), None);
        assert!(now > 2 * RTO * 32, "backed off");
    }

    #[test]
    fn the_receiver_acks_cumulatively_and_echoes_each_mark() {
        let mut r = DctcpReceiver::new(4);
        assert_eq!(r.on_data(1, true), Receipt { ack: 0, ece: true, new_data: true, completed: false });
        assert_eq!(r.on_data(0, false), Receipt { ack: 2, ece: false, new_data: true, completed: false });
        assert!(!r.on_data(1, false).new_data);
        assert_eq!(r.on_data(3, false).ack, 2);
        assert_eq!(r.on_data(2, true), Receipt { ack: 4, ece: true, new_data: true, completed: true });
        assert_eq!(r.stats(), ReceiverStats { acks: 5, marks_echoed: 2, duplicates: 1 });
    }

    /// Whole exchanges without a network over random loss, marks and reordering: every
    /// packet delivered exactly once, and the sender's timer armed whenever data is
    /// unacknowledged (no hang).
    #[test]
    fn random_exchanges_deliver_every_packet_exactly_once() {
        let mut x = 0x9E37_79B9_7F4A_7C15u64;
        let mut rnd = move |n: u64| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x % n
        };
        let mut total = SenderStats::default();
        for case in 0..400 {
            let n = 1 + rnd(80) as u32;
            let w = 1 + rnd(16) as u32;
            let (lose, mark, reorder) = (rnd(25), rnd(100), rnd(50)); // percent
            let mut s = DctcpSender::new(
                n,
                DctcpParams {
                    mss_bytes: 1 + rnd(9000),
                    initial_window_packets: w,
                    g: 1.0 / 16.0,
                    min_rto_ps: 1000 + rnd(5000),
                },
            );
            let mut r = DctcpReceiver::new(n);
            let mut now = 0u64;
            let mut delivered = 0;
            let mut fwd: VecDeque<(u32, bool)> = VecDeque::new();
            let mut back: VecDeque<(u32, bool)> = VecDeque::new();
            let mut steps = 0;
            while !s.is_done() {
                steps += 1;
                assert!(steps < 1_000_000, "case {case} does not finish");
                assert!(!s.gave_up(), "case {case}: gave up");
                now += 1;
                while let Some(t) = s.transmit(now) {
                    if rnd(100) >= lose {
                        let m = rnd(100) < mark;
                        // Reordering: a packet may overtake the one queued before it.
                        if rnd(100) < reorder && !fwd.is_empty() {
                            let i = fwd.len() - 1;
                            fwd.insert(i, (t.seq, m));
                        } else {
                            fwd.push_back((t.seq, m));
                        }
                    }
                }
                if s.outstanding() > 0 || s.una() < n && !s.has_packet() {
                    assert!(s.timer_ps().is_some(), "case {case}: data unacknowledged and no timer");
                }
                if let Some((seq, ce)) = fwd.pop_front() {
                    let rc = r.on_data(seq, ce);
                    delivered += rc.new_data as u32;
                    if rnd(100) >= lose {
                        back.push_back((rc.ack, rc.ece));
                    }
                } else if let Some((ack, ece)) = back.pop_front() {
                    s.on_ack(ack, ece, now);
                    assert!(s.cwnd_bytes() >= s.p.mss_bytes, "case {case}: window below one MSS");
                    assert!((0.0..=1.0).contains(&s.alpha()));
                } else if let Some(t) = s.timer_ps() {
                    now = now.max(t);
                    s.on_timer(now);
                } else {
                    panic!("case {case}: nothing in flight, nothing to send, no timer: a hang");
                }
            }
            assert!(r.is_complete(), "case {case}");
            assert_eq!(delivered, n, "case {case}: each packet delivered once");
            let st = s.stats();
            assert_eq!(st.new_packets, n as u64, "case {case}");
            if lose == 0 && reorder == 0 {
                assert_eq!(st.retransmissions, 0, "case {case}: nothing to retransmit without loss or reordering");
            }
            if mark == 0 {
                assert_eq!(st.ecn_reductions, 0, "case {case}");
            }
            total.fast_retransmits += st.fast_retransmits;
            total.timeouts += st.timeouts;
            total.ecn_reductions += st.ecn_reductions;
            total.retransmissions += st.retransmissions;
        }
        // The cases reach every recovery path.
        assert!(total.fast_retransmits > 100 && total.timeouts > 100 && total.ecn_reductions > 100, "{total:?}");
    }
}
