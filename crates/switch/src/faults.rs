//! Faults the switch injects on its egress ports (the kernel's netem is not available here):
//! loss, duplication, delay and reordering, each a per-packet probability or a duration, drawn
//! from a seeded generator per port so a run's fault decisions depend only on the seed and the
//! order of the packets a port sends.

use std::time::Duration;

/// One port's (or every port's) fault rates.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct PortFaults {
    /// Probability that a packet is dropped.
    pub loss: f64,
    /// Probability that a packet is sent twice.
    pub dup: f64,
    /// Probability that a packet is held back by `reorder_us` (later packets overtake it).
    pub reorder: f64,
    /// Extra hold time of a reordered packet.
    pub reorder_us: f64,
    /// Delay added to every packet.
    pub delay_us: f64,
    /// Egress shaping (pool switch only): the port sends at most this many bits per second
    /// through a FIFO queue ([`Shaper`]); 0: not shaped.
    pub rate_bps: u64,
    /// Shaped port: ECN-mark a packet when the queue, the packet included, exceeds this many
    /// bytes (`None`: the scenario's `network.ecn_threshold_bytes`, else no marking).
    pub ecn_bytes: Option<u64>,
    /// Shaped port: the queue's capacity (tail drop beyond it); 0: [`DEFAULT_QUEUE_BYTES`].
    pub queue_bytes: u64,
}

/// A shaped port's queue capacity unless `queue_bytes` says otherwise.
pub const DEFAULT_QUEUE_BYTES: u64 = 1 << 20;

/// A `--fault` argument: `[port=N,]loss=P,dup=P,reorder=P,reorder_us=D,delay_us=D,
/// rate_mbps=R,ecn_bytes=K,queue_bytes=Q` (probabilities in 0..=1, durations in microseconds,
/// the rate in 10⁶ bit/s, queue sizes in bytes). Without `port` it applies to every port.
/// `ecn_bytes` and `queue_bytes` need `rate_mbps` (they describe the shaped port's queue).
pub fn parse_fault(spec: &str) -> Result<(Option<u16>, PortFaults), String> {
    let mut f = PortFaults { reorder_us: 200.0, ..PortFaults::default() };
    let mut port = None;
    for part in spec.split(',').filter(|s| !s.is_empty()) {
        let (k, v) = part.split_once('=').ok_or_else(|| format!("--fault: `{part}` is not key=value"))?;
        if k == "port" {
            port = Some(v.parse::<u16>().map_err(|_| format!("--fault port: `{v}` is not a port number"))?);
            continue;
        }
        if k == "ecn_bytes" || k == "queue_bytes" {
            let n: u64 = v.parse().map_err(|_| format!("--fault {k}: `{v}` is not a whole number of bytes"))?;
            if n == 0 || n > 1 << 32 {
                return Err(format!("--fault {k}: {n} is not within 1..=4294967296 bytes"));
            }
            if k == "ecn_bytes" {
                f.ecn_bytes = Some(n);
            } else {
                f.queue_bytes = n;
            }
            continue;
        }
        let x: f64 = v.parse().map_err(|_| format!("--fault {k}: `{v}` is not a number"))?;
        let prob = |x: f64| {
            if (0.0..=1.0).contains(&x) {
                Ok(x)
            } else {
                Err(format!("--fault {k}: probability {x} is not within 0..=1"))
            }
        };
        let dur = |x: f64| {
            if x.is_finite() && (0.0..=10e6).contains(&x) {
                Ok(x)
            } else {
                Err(format!("--fault {k}: {x} µs is not within 0..=10000000"))
            }
        };
        match k {
            "loss" => f.loss = prob(x)?,
            "dup" => f.dup = prob(x)?,
            "reorder" => f.reorder = prob(x)?,
            "reorder_us" => f.reorder_us = dur(x)?,
            "delay_us" => f.delay_us = dur(x)?,
            "rate_mbps" if x.is_finite() && (0.001..=1e6).contains(&x) => f.rate_bps = (x * 1e6).round() as u64,
            "rate_mbps" => return Err(format!("--fault rate_mbps: {x} is not within 0.001..=1000000 (Mb/s)")),
            _ => return Err(format!("--fault: unknown key `{k}` (port, loss, dup, reorder, reorder_us, delay_us, rate_mbps, ecn_bytes, queue_bytes)")),
        }
    }
    if f.rate_bps == 0 && (f.ecn_bytes.is_some() || f.queue_bytes != 0) {
        return Err(format!(
            "--fault {}: describes a shaped port's queue; add rate_mbps",
            if f.ecn_bytes.is_some() { "ecn_bytes" } else { "queue_bytes" }
        ));
    }
    if let Some(k) = f.ecn_bytes {
        let cap = if f.queue_bytes == 0 { DEFAULT_QUEUE_BYTES } else { f.queue_bytes };
        if k >= cap {
            return Err(format!(
                "--fault ecn_bytes: {k} is not below the queue's {cap} bytes (queue_bytes), so nothing would be marked"
            ));
        }
    }
    if f.loss + f.dup > 1.0 {
        return Err(format!("--fault: loss {} + dup {} exceed 1", f.loss, f.dup));
    }
    Ok((port, f))
}

/// A fault file: one `--fault` spec per line; blank lines and `#` comments are skipped.
/// Errors name the file and line.
pub fn parse_fault_file(path: &str, text: &str) -> Result<Vec<(Option<u16>, PortFaults)>, String> {
    let mut v = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let line = line.split('#').next().unwrap_or("").trim();
        if !line.is_empty() {
            v.push(parse_fault(line).map_err(|e| format!("{path}:{}: {e}", i + 1))?);
        }
    }
    Ok(v)
}

/// What happens to one packet.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Fate {
    Drop,
    /// Send `copies` (1 or 2) copies after `hold`.
    Send {
        copies: u8,
        hold: Duration,
    },
}

/// A port's fault state: rates and its own generator.
#[derive(Clone, Debug)]
pub struct FaultPort {
    pub rates: PortFaults,
    state: u64,
}

impl FaultPort {
    pub fn new(rates: PortFaults, seed: u64, node: u32, port: u16) -> FaultPort {
        FaultPort { rates, state: reducelab_ina::mix(seed ^ (node as u64) << 32 ^ (port as u64) << 16 ^ 0xFA17) }
    }

    fn uniform(&mut self) -> f64 {
        self.state = self.state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        (reducelab_ina::mix(self.state) >> 11) as f64 / (1u64 << 53) as f64
    }

    /// No loss, duplication, reordering or delay (shaping is not a fate: [`Shaper`]).
    pub fn is_clean(&self) -> bool {
        let r = self.rates;
        r == PortFaults {
            reorder_us: r.reorder_us,
            rate_bps: r.rate_bps,
            ecn_bytes: r.ecn_bytes,
            queue_bytes: r.queue_bytes,
            ..PortFaults::default()
        }
    }

    /// The fate of the next packet (one draw per rate, in a fixed order).
    pub fn fate(&mut self) -> Fate {
        if self.is_clean() {
            return Fate::Send { copies: 1, hold: Duration::ZERO };
        }
        let r = self.rates;
        let (u_loss, u_reorder) = (self.uniform(), self.uniform());
        if u_loss < r.loss {
            return Fate::Drop;
        }
        let copies = if u_loss < r.loss + r.dup { 2 } else { 1 };
        let mut hold_us = r.delay_us;
        if u_reorder < r.reorder {
            hold_us += r.reorder_us;
        }
        Fate::Send { copies, hold: Duration::from_nanos((hold_us * 1000.0) as u64) }
    }
}

/// One shaped egress port: a FIFO of frames drained at `rate_bps` (a token bucket one packet
/// deep, in integer nanoseconds: a frame of `b` bytes leaves `8·b·10⁹ / rate` ns after the one
/// before it, the remainders carried so the rate is exact over time), tail drop above the
/// capacity, and an ECN mark on a frame when the queue, that frame included, holds more than
/// `ecn_bytes` (the simulator's switch queues mark above `network.ecn_threshold_bytes`). Sans
/// I/O: the caller gives the time and sends what [`Shaper::dequeue`] returns.
#[derive(Clone, Debug)]
pub struct Shaper {
    pub rate_bps: u64,
    pub ecn_bytes: Option<u64>,
    pub cap_bytes: u64,
    queue: std::collections::VecDeque<Vec<u8>>,
    queued_bytes: u64,
    /// When the next frame may leave (ns on the caller's clock).
    next_ns: u64,
    /// Remainder of `8·bytes·10⁹ mod rate` carried between frames.
    rem: u64,
    pub stats: ShaperStats,
}

/// A shaped port's counters.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct ShaperStats {
    pub enqueued: u64,
    pub sent: u64,
    /// Frames marked ECN here (the queue above `ecn_bytes`).
    pub marked: u64,
    /// Frames dropped at a full queue.
    pub dropped: u64,
    pub peak_queue_bytes: u64,
}

/// What [`Shaper::enqueue`] did with a frame.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Enqueued {
    /// Queued; `mark`: it was ECN-marked (by the caller's `mark_ecn`: the frame format is
    /// not this module's).
    Queued {
        mark: bool,
    },
    Dropped,
}

impl Shaper {
    /// A shaper for `f` (`None` when the port is not shaped); `default_ecn` is the scenario's
    /// threshold, used when `f.ecn_bytes` is not given.
    pub fn of(f: &PortFaults, default_ecn: Option<u64>) -> Option<Shaper> {
        (f.rate_bps > 0).then(|| Shaper {
            rate_bps: f.rate_bps,
            ecn_bytes: f.ecn_bytes.or(default_ecn),
            cap_bytes: if f.queue_bytes == 0 { DEFAULT_QUEUE_BYTES } else { f.queue_bytes },
            queue: std::collections::VecDeque::new(),
            queued_bytes: 0,
            next_ns: 0,
            rem: 0,
            stats: ShaperStats::default(),
        })
    }

    pub fn queued_bytes(&self) -> u64 {
        self.queued_bytes
    }

    /// Offers `frame` at `now_ns`; `mark_ecn` sets a frame's ECN bit when the queue is above
    /// the threshold.
    pub fn enqueue(&mut self, now_ns: u64, mut frame: Vec<u8>, mark_ecn: impl FnOnce(&mut [u8])) -> Enqueued {
        let len = frame.len() as u64;
        if self.queued_bytes + len > self.cap_bytes {
            self.stats.dropped += 1;
            return Enqueued::Dropped;
        }
        if self.queue.is_empty() && self.next_ns < now_ns {
            // An idle port: no credit saved up beyond one packet.
            (self.next_ns, self.rem) = (now_ns, 0);
        }
        self.queued_bytes += len;
        self.stats.enqueued += 1;
        self.stats.peak_queue_bytes = self.stats.peak_queue_bytes.max(self.queued_bytes);
        let mark = self.ecn_bytes.is_some_and(|k| self.queued_bytes > k);
        if mark {
            self.stats.marked += 1;
            mark_ecn(&mut frame);
        }
        self.queue.push_back(frame);
        Enqueued::Queued { mark }
    }

    /// The next frame that may leave at `now_ns`, if any.
    pub fn dequeue(&mut self, now_ns: u64) -> Option<Vec<u8>> {
        if self.next_ns > now_ns {
            return None;
        }
        let f = self.queue.pop_front()?;
        self.queued_bytes -= f.len() as u64;
        let bits_ns = f.len() as u128 * 8 * 1_000_000_000 + self.rem as u128;
        self.next_ns += (bits_ns / self.rate_bps as u128) as u64;
        self.rem = (bits_ns % self.rate_bps as u128) as u64;
        self.stats.sent += 1;
        Some(f)
    }

    /// When the next queued frame may leave (`None`: the queue is empty).
    pub fn next_departure_ns(&self) -> Option<u64> {
        (!self.queue.is_empty()).then_some(self.next_ns)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_shaper_paces_at_its_rate_marks_above_k_and_drops_when_full() {
        // 8 Mb/s: a 100-byte frame takes 100 µs; K = 250 B, capacity 400 B.
        let f = parse_fault("rate_mbps=8,ecn_bytes=250,queue_bytes=400").unwrap().1;
        let mut s = Shaper::of(&f, None).unwrap();
        let mut marks = Vec::new();
        for _ in 0..5 {
            let r = s.enqueue(1_000, vec![0u8; 100], |b| b[0] = 1);
            marks.push(r);
        }
        let q = |mark| Enqueued::Queued { mark };
        assert_eq!(marks, vec![q(false), q(false), q(true), q(true), Enqueued::Dropped]);
        assert_eq!((s.stats.marked, s.stats.dropped, s.stats.peak_queue_bytes), (2, 1, 400));
        // Departures at 1000, 101000, 201000, 301000 ns; nothing early.
        let mut out = Vec::new();
        for t in [1_000u64, 100_999, 101_000, 201_000, 300_000, 301_000] {
            while let Some(b) = s.dequeue(t) {
                out.push((t, b[0]));
            }
        }
        assert_eq!(out, vec![(1_000, 0), (101_000, 0), (201_000, 1), (301_000, 1)]);
        assert_eq!(s.next_departure_ns(), None);
        // Idle: no saved-up credit; the next frame leaves when offered, the one after it 100 µs on.
        s.enqueue(1_000_000, vec![0u8; 100], |_| {});
        s.enqueue(1_000_000, vec![0u8; 100], |_| {});
        assert!(s.dequeue(1_000_000).is_some() && s.dequeue(1_099_999).is_none() && s.dequeue(1_100_000).is_some());
    }

    #[test]
    fn the_rate_is_exact_over_time_in_integer_ns() {
        // 3 Mb/s, 1-byte frames: 2666.66… ns each; 3000 frames take exactly 8 ms.
        let mut s = Shaper::of(&parse_fault("rate_mbps=3").unwrap().1, Some(1 << 30)).unwrap();
        for _ in 0..3000 {
            s.enqueue(0, vec![0u8], |_| {});
        }
        let mut n = 0;
        while s.dequeue(u64::MAX / 2).is_some() {
            n += 1;
        }
        assert_eq!((n, s.next_ns), (3000, 8_000_000));
    }

    #[test]
    fn shaping_keys_are_checked() {
        assert!(parse_fault("ecn_bytes=100").unwrap_err().contains("add rate_mbps"));
        assert!(parse_fault("rate_mbps=0").unwrap_err().contains("rate_mbps"));
        assert!(parse_fault("rate_mbps=1,ecn_bytes=1x").unwrap_err().contains("ecn_bytes"));
        assert!(parse_fault("rate_mbps=1,ecn_bytes=5000,queue_bytes=4000")
            .unwrap_err()
            .starts_with("--fault ecn_bytes: 5000 is not below"));
        let f = parse_fault("port=2,rate_mbps=50,ecn_bytes=3000").unwrap();
        assert_eq!((f.0, f.1.rate_bps, f.1.ecn_bytes, f.1.queue_bytes), (Some(2), 50_000_000, Some(3000), 0));
        assert!(FaultPort::new(f.1, 1, 1, 1).is_clean(), "shaping is not a fate");
        // The scenario's threshold is the default K.
        assert_eq!(Shaper::of(&parse_fault("rate_mbps=1").unwrap().1, Some(777)).unwrap().ecn_bytes, Some(777));
    }
}
