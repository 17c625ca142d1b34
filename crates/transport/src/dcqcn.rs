//! DCQCN as sans-I/O state machines: the reaction point [`DcqcnSender`] and the notification
//! point [`DcqcnReceiver`].
//!
//! DCQCN (Zhu et al., "Congestion Control for Large-Scale RDMA Deployments", SIGCOMM 2015) is
//! rate-based congestion control for lossless (PFC or credit) RoCE networks. Switches mark
//! ECN (RED-style between Kmin and Kmax, see `reducelab-net`); the receiver (NP) turns marks
//! into congestion notification packets (CNPs); the sender (RP) paces its packets at a current
//! rate `Rc` and moves it with a target rate `Rt`. Behaviour follows the paper and the ns-3
//! model of the HPCC repository (`rdma-hw.cc`, `cc_mode = 1`), written anew:
//!
//! - **Pacing.** After a packet of `w` bytes at time `t` the next one may go at
//!   `t + w·8/Rc` (ns-3's `m_nextAvail`). At line rate the sender is not gated (its port
//!   already serialises at that rate).
//! - **Rate decrease** on a CNP: `Rt ← Rc`, `Rc ← max(min_rate, Rc·(1 − α/2))`, and the
//!   increase stages start again (timer and byte counter at 0, the timer restarted). The first
//!   CNP starts the α and increase timers (ns-3's `m_first_cnp`); before it the sender runs at
//!   line rate with no timers.
//! - **α** (starts at 1): every `alpha_interval` (K = 55 µs) `α ← (1 − g)·α + g` if a CNP
//!   arrived since the last update, else `α ← (1 − g)·α`; g = 1/256.
//! - **Rate increase**, on two counters: the timer (every `increase_interval`, T = 55 µs) and
//!   the byte counter (every `byte_counter` bytes sent, B = 10 MB) each count stages since the
//!   last decrease, and each expiry of either is an increase event. With `F` = 5 fast-recovery
//!   stages: while both counts are below F it is **fast recovery** (`Rc ← (Rt + Rc)/2`); when
//!   both are above F, **hyper increase** (`Rt ← Rt + i·R_HAI`, i = min of the counts − F, then
//!   the average); otherwise **additive increase** (`Rt ← Rt + R_AI`, then the average). `Rt`
//!   never exceeds the line rate.
//! - **NP.** The receiver delivers each packet once and sends at most one CNP per
//!   `cnp_interval` (N = 50 µs) per flow, when a CE-marked packet arrives and none was sent in
//!   the last N.
//!
//! Rates are integer bits per second, times integer picoseconds; α is an `f64`, computed the
//! same way on every run. Packets are sent once: DCQCN relies on the network being lossless
//! (RoCE's go-back-N on loss is not modelled), so a packet lost to a fault is not recovered.

use crate::bitset::Bitset;

/// Parameters of a DCQCN sender (reaction point).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct DcqcnParams {
    /// The sender's NIC rate: the initial and highest `Rc` and `Rt`.
    pub line_rate_bps: u64,
    /// The lowest `Rc` (ns-3's `MinRate`, 100 Mb/s).
    pub min_rate_bps: u64,
    /// α's gain (the paper's 1/256).
    pub g: f64,
    /// K: α update period (55 µs).
    pub alpha_interval_ps: u64,
    /// T: rate increase timer (55 µs).
    pub increase_interval_ps: u64,
    /// B: bytes sent per byte-counter stage (10 MB).
    pub byte_counter_bytes: u64,
    /// F: fast-recovery stages (5).
    pub fast_recovery_steps: u32,
    /// R_AI: additive increase step (40 Mb/s).
    pub rai_bps: u64,
    /// R_HAI: hyper increase step (400 Mb/s).
    pub rhai_bps: u64,
}

/// Counters of one sender.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SenderStats {
    pub packets: u64,
    /// CNPs heard (each one a rate decrease).
    pub cnps: u64,
    pub fast_recoveries: u64,
    pub additive_increases: u64,
    pub hyper_increases: u64,
}

/// The sending side of one message of `packets` packets.
#[derive(Clone, Debug)]
pub struct DcqcnSender {
    packets: u32,
    next: u32,
    p: DcqcnParams,
    rc: u64,
    rt: u64,
    alpha: f64,
    /// No packet before this time (pacing).
    next_send_ps: u64,
    /// The last packet left a pacing gap: the timer wakes the sender at `next_send_ps`.
    gated: bool,
    /// The α and increase timers run (a CNP has arrived).
    active: bool,
    cnp_since_alpha: bool,
    alpha_due_ps: u64,
    increase_due_ps: u64,
    timer_stages: u32,
    byte_stages: u32,
    bytes_since: u64,
    stats: SenderStats,
}

impl DcqcnSender {
    pub fn new(packets: u32, p: DcqcnParams) -> DcqcnSender {
        assert!(packets > 0 && p.line_rate_bps > 0 && p.min_rate_bps > 0 && p.min_rate_bps <= p.line_rate_bps);
        assert!(
            p.g > 0.0
                && p.g <= 1.0
                && p.alpha_interval_ps > 0
                && p.increase_interval_ps > 0
                && p.byte_counter_bytes > 0
        );
        DcqcnSender {
            packets,
            next: 0,
            p,
            rc: p.line_rate_bps,
            rt: p.line_rate_bps,
            alpha: 1.0,
            next_send_ps: 0,
            gated: false,
            active: false,
            cnp_since_alpha: false,
            alpha_due_ps: 0,
            increase_due_ps: 0,
            timer_stages: 0,
            byte_stages: 0,
            bytes_since: 0,
            stats: SenderStats::default(),
        }
    }

    /// Every packet sent.
    pub fn is_done(&self) -> bool {
        self.next == self.packets
    }
    pub fn stats(&self) -> SenderStats {
        self.stats
    }
    /// The current rate `Rc`.
    pub fn rate_bps(&self) -> u64 {
        self.rc
    }
    /// The target rate `Rt`.
    pub fn target_bps(&self) -> u64 {
        self.rt
    }
    pub fn alpha(&self) -> f64 {
        self.alpha
    }

    /// The next packet to send, whether or not pacing lets it go now.
    pub fn peek(&self) -> Option<u32> {
        (!self.is_done()).then_some(self.next)
    }

    /// Whether pacing lets the next packet go at `now_ps`.
    pub fn has_packet(&self, now_ps: u64) -> bool {
        !self.is_done() && now_ps >= self.next_send_ps
    }

    /// Sends the next packet, `wire_bytes` long, if pacing lets it go now.
    pub fn transmit(&mut self, now_ps: u64, wire_bytes: u64) -> Option<u32> {
        if !self.has_packet(now_ps) {
            return None;
        }
        let seq = self.next;
        self.next += 1;
        self.stats.packets += 1;
        if self.rc < self.p.line_rate_bps {
            self.next_send_ps = now_ps + (wire_bytes * 8 * 1_000_000_000_000).div_ceil(self.rc);
            self.gated = true;
        }
        if self.active {
            self.bytes_since += wire_bytes;
            while self.bytes_since >= self.p.byte_counter_bytes {
                self.bytes_since -= self.p.byte_counter_bytes;
                self.byte_stages += 1;
                self.increase();
            }
        }
        Some(seq)
    }

    /// A CNP arrived.
    pub fn on_cnp(&mut self, now_ps: u64) {
        if self.is_done() {
            return;
        }
        self.stats.cnps += 1;
        if !self.active {
            self.active = true;
            self.alpha_due_ps = now_ps + self.p.alpha_interval_ps;
        }
        self.cnp_since_alpha = true;
        self.rt = self.rc;
        self.rc = ((self.rc as f64 * (1.0 - self.alpha / 2.0)) as u64).max(self.p.min_rate_bps);
        self.timer_stages = 0;
        self.byte_stages = 0;
        self.bytes_since = 0;
        self.increase_due_ps = now_ps + self.p.increase_interval_ps;
    }

    fn increase(&mut self) {
        let f = self.p.fast_recovery_steps;
        let (lo, hi) = (self.timer_stages.min(self.byte_stages), self.timer_stages.max(self.byte_stages));
        if hi < f {
            self.stats.fast_recoveries += 1;
        } else if lo > f {
            self.stats.hyper_increases += 1;
            self.rt = (self.rt + (lo - f) as u64 * self.p.rhai_bps).min(self.p.line_rate_bps);
        } else {
            self.stats.additive_increases += 1;
            self.rt = (self.rt + self.p.rai_bps).min(self.p.line_rate_bps);
        }
        // Rounded up, so that Rc reaches Rt.
        self.rc = (self.rt + self.rc).div_ceil(2);
    }

    /// When [`DcqcnSender::on_timer`] should run next: the end of a pacing gap, the α update
    /// or the increase timer (`None` once every packet is sent, or before the first CNP when
    /// nothing is gated).
    pub fn timer_ps(&self) -> Option<u64> {
        if self.is_done() {
            return None;
        }
        let pacing = self.gated.then_some(self.next_send_ps);
        let timers = self.active.then(|| self.alpha_due_ps.min(self.increase_due_ps));
        match (pacing, timers) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// Runs the α updates and increase events due by `now_ps`.
    pub fn on_timer(&mut self, now_ps: u64) {
        if now_ps >= self.next_send_ps {
            self.gated = false;
        }
        if !self.active || self.is_done() {
            return;
        }
        while self.alpha_due_ps <= now_ps {
            let f = if self.cnp_since_alpha { 1.0 } else { 0.0 };
            self.alpha = (1.0 - self.p.g) * self.alpha + self.p.g * f;
            self.cnp_since_alpha = false;
            self.alpha_due_ps += self.p.alpha_interval_ps;
        }
        while self.increase_due_ps <= now_ps {
            self.timer_stages += 1;
            self.increase();
            self.increase_due_ps += self.p.increase_interval_ps;
        }
    }
}

/// The receiver's account of one data packet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Receipt {
    /// A packet that had not arrived before: its payload is delivered.
    pub new_data: bool,
    /// This arrival completed the message.
    pub completed: bool,
    /// Send a CNP to the sender now.
    pub cnp: bool,
}

/// Counters of one receiver.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ReceiverStats {
    /// CE-marked data packets that arrived.
    pub marked: u64,
    pub cnps: u64,
    pub duplicates: u64,
}

/// The receiving side (notification point) of one message of `packets` packets.
#[derive(Clone, Debug)]
pub struct DcqcnReceiver {
    packets: u32,
    got: Bitset,
    received: u32,
    cnp_interval_ps: u64,
    last_cnp_ps: Option<u64>,
    stats: ReceiverStats,
}

impl DcqcnReceiver {
    pub fn new(packets: u32, cnp_interval_ps: u64) -> DcqcnReceiver {
        DcqcnReceiver {
            packets,
            got: Bitset::new(packets),
            received: 0,
            cnp_interval_ps,
            last_cnp_ps: None,
            stats: ReceiverStats::default(),
        }
    }
    pub fn is_complete(&self) -> bool {
        self.received == self.packets
    }
    pub fn stats(&self) -> ReceiverStats {
        self.stats
    }

    /// Data packet `seq` arrived at `now_ps`, CE-marked if `ce`.
    pub fn on_data(&mut self, seq: u32, ce: bool, now_ps: u64) -> Receipt {
        let new_data = seq < self.packets && self.got.insert(seq);
        if new_data {
            self.received += 1;
        } else {
            self.stats.duplicates += 1;
        }
        let mut cnp = false;
        if ce {
            self.stats.marked += 1;
            if self.last_cnp_ps.is_none_or(|t| now_ps >= t + self.cnp_interval_ps) {
                self.last_cnp_ps = Some(now_ps);
                self.stats.cnps += 1;
                cnp = true;
            }
        }
        Receipt { new_data, completed: new_data && self.is_complete(), cnp }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const GBPS: u64 = 1_000_000_000;
    const US: u64 = 1_000_000;

    fn params() -> DcqcnParams {
        DcqcnParams {
            line_rate_bps: 100 * GBPS,
            min_rate_bps: GBPS / 10,
            g: 1.0 / 256.0,
            alpha_interval_ps: 55 * US,
            increase_interval_ps: 55 * US,
            byte_counter_bytes: 10_000_000,
            fast_recovery_steps: 5,
            rai_bps: 40_000_000,
            rhai_bps: 400_000_000,
        }
    }

    /// A lone sender, step by step: line rate until the first CNP, then the cut with α = 1,
    /// pacing at the new rate, fast recovery on the timer, α's decay, a second cut, additive
    /// increase after F timer stages, all against values computed by hand.
    #[test]
    fn a_lone_sender_step_by_step() {
        let mut s = DcqcnSender::new(1_000_000, params());
        // Line rate: not gated, no timer.
        assert_eq!(s.transmit(0, 1000), Some(0));
        assert_eq!(s.transmit(0, 1000), Some(1));
        assert_eq!(s.timer_ps(), None);
        // First CNP at 10 µs: Rt = 100 G, Rc = 100·(1 − 1/2) = 50 G.
        s.on_cnp(10 * US);
        assert_eq!((s.rate_bps(), s.target_bps()), (50 * GBPS, 100 * GBPS));
        assert_eq!(s.timer_ps(), Some(65 * US), "α and increase timers at 10 + 55 µs");
        // Pacing at 50 Gb/s: 1000 B take 160 ns.
        assert_eq!(s.transmit(10 * US, 1000), Some(2));
        assert!(!s.has_packet(10 * US + 159_999));
        assert!(s.has_packet(10 * US + 160_000));
        assert_eq!(s.timer_ps(), Some(10 * US + 160_000), "the pacing gap ends first");
        // 65 µs: α = 255/256·1 + 1/256 = 1 (a CNP came); fast recovery Rc = (100 + 50)/2 = 75 G.
        s.on_timer(65 * US);
        assert_eq!(s.alpha(), 1.0);
        assert_eq!(s.rate_bps(), 75 * GBPS);
        // 120 µs: no CNP since: α = 255/256; Rc = (100 + 75)/2 = 87.5 G.
        s.on_timer(120 * US);
        assert_eq!(s.alpha(), 255.0 / 256.0);
        assert_eq!(s.rate_bps(), 87_500_000_000);
        // A second CNP at 130 µs: Rt = 87.5 G, Rc = 87.5·(1 − 255/512) = 43.9208984375 G.
        s.on_cnp(130 * US);
        assert_eq!(s.target_bps(), 87_500_000_000);
        assert_eq!(s.rate_bps(), 43_920_898_437);
        // Its increase timer restarts: stages at 185, 240, 295, 350, 405 µs are fast recovery
        // (stage counts 1..4 < F... and the 5th: 5 is not above F, but reaches it: additive).
        let mut rc = 43_920_898_437u64;
        let rt = 87_500_000_000u64;
        for k in 1..=4u64 {
            s.on_timer(130 * US + k * 55 * US);
            rc = (rt + rc).div_ceil(2);
            assert_eq!(s.rate_bps(), rc, "fast recovery stage {k}");
        }
        assert_eq!(s.stats().fast_recoveries, 6);
        s.on_timer(130 * US + 5 * 55 * US);
        let rt = rt + 40_000_000;
        rc = (rt + rc).div_ceil(2);
        assert_eq!((s.target_bps(), s.rate_bps()), (rt, rc), "additive increase at stage F");
        assert_eq!(s.stats().additive_increases, 1);
        // α: updates at 175, 230, ... (every 55 µs from 65): 175 saw the CNP of 130.
        let mut a = 255.0 / 256.0;
        a = a * 255.0 / 256.0 + 1.0 / 256.0; // 175
        for _ in 0..4 {
            a *= 255.0 / 256.0; // 230, 285, 340, 395
        }
        assert_eq!(s.alpha(), a);
        assert_eq!(s.stats().cnps, 2);
    }

    #[test]
    fn the_byte_counter_drives_increases_and_both_counters_above_f_hyper_increase() {
        let p = DcqcnParams { byte_counter_bytes: 10_000, fast_recovery_steps: 1, ..params() };
        let mut s = DcqcnSender::new(1_000, p);
        s.on_cnp(0);
        s.on_cnp(1); // Rc = 25 G, Rt = 50 G
        assert_eq!((s.rate_bps(), s.target_bps()), (25 * GBPS, 50 * GBPS));
        let mut now = 2;
        // 10 packets of 1000 B: one byte-counter stage (1 = F: additive, the timer is at 0).
        for _ in 0..10 {
            while s.transmit(now, 1000).is_none() {
                now = s.timer_ps().unwrap();
                s.on_timer(now);
            }
        }
        assert_eq!(s.stats().additive_increases, 1);
        assert_eq!(s.target_bps(), 50 * GBPS + 40_000_000);
        // Two timer stages (55 and 110 µs after the cut) and another byte stage: both counts
        // are 2 > F = 1: hyper increase by (2 − 1)·R_HAI.
        s.on_timer(1 + 110 * US);
        assert_eq!(s.stats().additive_increases, 3, "timer stages 1 and 2 with byte stage 1: additive");
        let rt = s.target_bps();
        let mut now = 1 + 110 * US;
        for _ in 0..10 {
            while s.transmit(now, 1000).is_none() {
                now = s.timer_ps().unwrap();
                s.on_timer(now);
            }
        }
        assert_eq!(s.stats().hyper_increases, 1);
        assert_eq!(s.target_bps(), rt + 400_000_000);
    }

    #[test]
    fn the_rate_never_goes_below_the_minimum_and_the_target_never_above_line_rate() {
        let mut s = DcqcnSender::new(10, params());
        for k in 0..100 {
            s.on_cnp(k);
        }
        assert_eq!(s.rate_bps(), GBPS / 10);
        for k in 0..10_000u64 {
            s.on_timer(100 + k * 55 * US);
        }
        assert_eq!((s.rate_bps(), s.target_bps()), (100 * GBPS, 100 * GBPS));
        assert!(s.stats().hyper_increases == 0, "the byte counter never moved");
    }

    #[test]
    fn the_receiver_sends_at_most_one_cnp_per_interval() {
        let mut r = DcqcnReceiver::new(5, 50 * US);
        assert_eq!(r.on_data(0, false, 0), Receipt { new_data: true, completed: false, cnp: false });
        assert!(r.on_data(1, true, 10 * US).cnp);
        assert!(!r.on_data(2, true, 59 * US).cnp, "49 µs after the last CNP");
        assert!(r.on_data(3, true, 60 * US).cnp);
        assert!(!r.on_data(3, true, 200 * US).new_data);
        assert_eq!(r.on_data(4, false, 201 * US), Receipt { new_data: true, completed: true, cnp: false });
        assert_eq!(r.stats(), ReceiverStats { marked: 4, cnps: 3, duplicates: 1 });
    }

    /// Random CNPs and timer expiries: every packet sent once, Rc within [min, Rt], Rt within
    /// [min, line], consecutive packets at least a pacing gap apart at the rate they were
    /// sent with, and a timer armed whenever the sender waits for pacing (no hang).
    #[test]
    fn random_runs_keep_the_rates_in_bounds_and_pace() {
        let mut x = 0xDC0C_2015_u64;
        let mut rnd = move |n: u64| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x % n
        };
        for case in 0..200 {
            let p =
                DcqcnParams { byte_counter_bytes: 1 + rnd(100_000), fast_recovery_steps: rnd(6) as u32, ..params() };
            let n = 1 + rnd(2000) as u32;
            let mut s = DcqcnSender::new(n, p);
            let mut now = 0u64;
            let mut sent = 0u32;
            let mut last: Option<(u64, u64, u64)> = None; // (time, bytes, rate)
            let mut steps = 0;
            while !s.is_done() {
                steps += 1;
                assert!(steps < 100_000, "case {case} hangs");
                let w = 64 + rnd(4000);
                let rate = s.rate_bps();
                if let Some(seq) = s.transmit(now, w) {
                    assert_eq!(seq, sent, "case {case}: in order, once");
                    sent += 1;
                    if let Some((t, b, r)) = last {
                        if r < p.line_rate_bps {
                            assert!(now - t >= b * 8 * 1_000_000_000_000 / r, "case {case}: paced");
                        }
                    }
                    last = Some((now, w, rate));
                } else {
                    let t = s.timer_ps().unwrap_or_else(|| panic!("case {case}: gated with no timer"));
                    now = now.max(t);
                    s.on_timer(now);
                }
                if rnd(100) < 3 {
                    s.on_cnp(now);
                }
                now += rnd(3) * 1000;
                let (rc, rt) = (s.rate_bps(), s.target_bps());
                assert!(
                    p.min_rate_bps <= rc && rc <= rt.max(p.min_rate_bps) && rt <= p.line_rate_bps,
                    "case {case}: Rc {rc} Rt {rt}"
                );
                assert!((0.0..=1.0).contains(&s.alpha()));
            }
            assert_eq!(sent, n);
            assert_eq!(s.timer_ps(), None);
        }
    }
}
