//! End-to-end transport of message traffic: the host side of NDP and DCTCP on the packet
//! engine.
//!
//! With [`TransportConfig::None`] (the default) messages have no transport: a host injects a
//! message's packets as fast as its port and the link credits allow, and nothing is ever sent
//! twice. Nothing in this module runs then, and results are the same as without it.
//!
//! With [`TransportConfig::Ndp`] every message (not local, not a protocol packet) is carried by
//! NDP, driving the sans-I/O state machines of [`reducelab_transport::ndp`]:
//!
//! - When a message may leave (after its endpoint costs), its sender may send its initial
//!   window. NDP messages have an injection slot of their own in the host port's arbitration
//!   (competing by age like raw messages; the host's injection ceiling and OS noise apply),
//!   served round-robin over the port's NDP messages, and a message is in that round only
//!   while its sender may send (window, pulls, timeouts): retransmissions first. The raw
//!   message path is untouched.
//! - The receiving host answers each data packet with an ACK and each trimmed header with a
//!   NACK, at once; a pull asked of the host's pacer rides on that ACK/NACK when the pacer may
//!   send one now, or goes later as a PULL packet. The pacer sends at most one pull per time to
//!   serialise one MTU over the host's NIC ports together, round-robin over its messages.
//!   ACK, NACK and PULL are `header_bytes` on the wire and go through the receiving host
//!   port's priority queue (see [`crate::trimming`]); they do not pay OS noise or the
//!   injection ceiling.
//! - A message is delivered when every one of its packets has arrived whole at least once; a
//!   packet arriving again is acknowledged but not counted (`duplicates`), so payload bytes
//!   and fingerprints are counted exactly once. Endpoint receive costs apply as without NDP.
//! - Each sender has one pending timer event at a time ([`Event::Rto`]); each receiving host's
//!   pacer one ([`Event::Pull`]).
//!
//! NDP needs drop-tail flow control (the switches trim instead of pausing senders) and FIFO
//! arbitration (trimming takes the tail of a FIFO); rendezvous is refused (NDP's receiver
//! already grants the data). [`Network::set_transport`] checks these.
//!
//! With [`TransportConfig::Dctcp`] every message is carried by DCTCP
//! ([`reducelab_transport::dctcp`]) through the same injection slot: a message is in its
//! port's round while its window (or a pending retransmission) lets it send. The receiving
//! host answers every data packet at once with a cumulative ACK (`header_bytes` on the wire,
//! queued like any packet of that host port: no priority queue, it may be dropped) carrying
//! ECE, the CE bit the switches' ECN marking set on that data packet
//! (`network.ecn_threshold_bytes`, required). DCTCP runs on drop-tail (losses are recovered by
//! fast retransmit or the timeout) and on lossless flow control (credit or PFC: the window
//! follows the marks only). Each sender has one timer (its retransmission timeout).
//!
//! With [`TransportConfig::Dcqcn`] every message is carried by DCQCN
//! ([`reducelab_transport::dcqcn`]), for lossless networks only (credit or PFC): the
//! sender paces its packets at its current rate (a message is in its port's round while its
//! pacing gap has passed), the receiving host answers CE-marked data with at most one CNP
//! (`header_bytes`) per interval per message, and nothing is acknowledged or resent. Each
//! sender has one timer: the end of its pacing gap, its α update or its rate increase,
//! whichever is first. Switches mark RED-style if `NetConfig::ecn_red` is set.

use crate::config::{Arbitration, FlowControl};
use crate::ids::{PktId, PortId};
use crate::network::{Arrival, Event, Network};
use crate::packet::{fingerprint, Body, PackedDst, Packet, TransportPacket};
use crate::protocol::AppDst;
use crate::trimming::Trimming;
use reducelab_des::{SimDuration, SimTime};
use reducelab_transport::dcqcn::{DcqcnParams, DcqcnReceiver, DcqcnSender};
use reducelab_transport::dctcp::{DctcpParams, DctcpReceiver, DctcpSender};
use reducelab_transport::ndp::{NdpParams, NdpReceiver, NdpSender, PullPacer, Reply};
use serde::Serialize;
use std::collections::VecDeque;

/// End-to-end transport of message traffic (the scenario's `[transport]`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize)]
pub enum TransportConfig {
    /// No transport: line-rate injection, no retransmission (the default).
    #[default]
    None,
    Ndp(NdpConfig),
    Dctcp(DctcpConfig),
    Dcqcn(DcqcnConfig),
}

impl TransportConfig {
    /// The scenario's name of the kind (`transport.kind`).
    pub fn kind(&self) -> &'static str {
        match self {
            TransportConfig::None => "none",
            TransportConfig::Ndp(_) => "ndp",
            TransportConfig::Dctcp(_) => "dctcp",
            TransportConfig::Dcqcn(_) => "dcqcn",
        }
    }
}

/// Parameters of DCTCP (`[transport] kind = "dctcp"`).
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct DctcpConfig {
    /// Window at the start, in packets (the MSS is the network's payload per packet).
    pub initial_window_packets: u32,
    /// α's gain (0 < g <= 1).
    pub g: f64,
    /// Lower bound of the retransmission timeout (and its value before an RTT sample).
    pub min_rto_ps: u64,
}

impl Default for DctcpConfig {
    /// Linux's initial window of 10 segments (RFC 6928); the paper's g = 1/16; a 1 ms
    /// minimum RTO (as NDP's timeout here; Linux's 200 ms is far above data-centre RTTs).
    fn default() -> Self {
        DctcpConfig { initial_window_packets: 10, g: 1.0 / 16.0, min_rto_ps: 1_000_000_000 }
    }
}

/// Parameters of NDP (`[transport] kind = "ndp"`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct NdpConfig {
    /// Packets a message sends at line rate when it starts, before any pull. A message sends
    /// at most this many packets per round trip, so it should be at least the bandwidth-delay
    /// product in packets.
    pub initial_window_packets: u32,
    /// Data queue of every switch and host port, in MTU-sized packets (its priority queue
    /// holds twice as many bytes).
    pub data_queue_packets: u32,
    /// Retransmission timeout.
    pub rto_ps: u64,
}

impl Default for NdpConfig {
    /// htsim's `main_ndp` defaults for the window (15 packets); NDP's 8-packet switch queues;
    /// a 1 ms timeout.
    fn default() -> Self {
        NdpConfig { initial_window_packets: 15, data_queue_packets: 8, rto_ps: 1_000_000_000 }
    }
}

/// Parameters of DCQCN (`[transport] kind = "dcqcn"`); the line rate is each sender's NIC
/// port bandwidth.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct DcqcnConfig {
    /// α's gain.
    pub g: f64,
    /// K: α update period.
    pub alpha_interval_ps: u64,
    /// T: rate increase timer.
    pub increase_interval_ps: u64,
    /// B: byte counter.
    pub byte_counter_bytes: u64,
    /// F: fast-recovery stages.
    pub fast_recovery_steps: u32,
    /// R_AI, R_HAI: additive and hyper increase steps.
    pub rai_bps: u64,
    pub rhai_bps: u64,
    /// The lowest rate a sender is cut to.
    pub min_rate_bps: u64,
    /// N: a receiver sends at most one CNP per message per this interval.
    pub cnp_interval_ps: u64,
}

impl Default for DcqcnConfig {
    /// g = 1/256, K = T = 55 µs, B = 10 MB, F = 5, N = 50 µs and R_AI = 40 Mb/s, the DCQCN
    /// paper's values as issue 14 quotes them; R_HAI = 10·R_AI and the 100 Mb/s minimum rate
    /// as in the ns-3 model of the HPCC repository (`rdma-hw.cc`: `RateHAI` 50 Mb/s =
    /// 10 × `RateAI` 5 Mb/s, `MinRate`; its other defaults differ, see docs/engine.md).
    fn default() -> Self {
        DcqcnConfig {
            g: 1.0 / 256.0,
            alpha_interval_ps: 55_000_000,
            increase_interval_ps: 55_000_000,
            byte_counter_bytes: 10_000_000,
            fast_recovery_steps: 5,
            rai_bps: 40_000_000,
            rhai_bps: 400_000_000,
            min_rate_bps: 100_000_000,
            cnp_interval_ps: 50_000_000,
        }
    }
}

/// Whole-network transport counters. The fields marked "DCTCP" are not in NDP's
/// serialisation (summary.json lists each kind's counters, see `reducelab-sim`'s report).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct TransportStats {
    /// Data packets whose payload a switch trimmed.
    pub trims: u64,
    /// Headers and control packets dropped because a priority queue was full.
    pub priority_drops: u64,
    /// Data packets sent again (after a NACK or a timeout).
    pub retransmissions: u64,
    /// Sender timer expiries that queued a packet again or granted a pull.
    pub timeouts: u64,
    pub acks: u64,
    pub nacks: u64,
    /// Pulls issued by receivers (on ACKs/NACKs or as PULL packets).
    pub pulls: u64,
    /// Pulls that went as PULL packets of their own.
    pub pull_packets: u64,
    /// Data packets that reached their receiver again after a first whole copy.
    pub duplicates: u64,
    /// Senders that gave up after too many timeouts in a row.
    pub senders_gave_up: u64,
    /// DCTCP: ACKs that echoed a CE mark (ECE), as the senders heard them.
    #[serde(skip)]
    pub marks_echoed: u64,
    /// DCTCP: window reductions for ECN.
    #[serde(skip)]
    pub ecn_reductions: u64,
    /// DCTCP: fast retransmits (third duplicate ACKs).
    #[serde(skip)]
    pub fast_retransmits: u64,
    /// DCQCN: CE-marked data packets that reached their receivers.
    #[serde(skip)]
    pub marked_packets: u64,
    /// DCQCN: CNPs sent by receivers.
    #[serde(skip)]
    pub cnps: u64,
    /// DCQCN: CNPs senders acted on (rate decreases), and their increase events.
    #[serde(skip)]
    pub rate_decreases: u64,
    #[serde(skip)]
    pub fast_recoveries: u64,
    #[serde(skip)]
    pub additive_increases: u64,
    #[serde(skip)]
    pub hyper_increases: u64,
}

/// Transport counters of one message (NDP runs only).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct MessageTransport {
    pub retransmissions: u64,
    /// Its data packets trimmed by switches.
    pub trims: u64,
    /// NACKs its receiver sent.
    pub nacks: u64,
    /// Pulls its receiver issued.
    pub pulls: u64,
    pub timeouts: u64,
    pub duplicates: u64,
    /// DCTCP: ACKs with ECE its sender heard.
    #[serde(skip)]
    pub marks_echoed: u64,
    /// DCTCP: its fast retransmits.
    #[serde(skip)]
    pub fast_retransmits: u64,
    /// DCQCN: CNPs its receiver sent, and those its sender acted on.
    #[serde(skip)]
    pub cnps: u64,
    #[serde(skip)]
    pub rate_decreases: u64,
}

/// What a transport control packet is, in a [`TransportEvent`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub enum ControlKind {
    Ack,
    Nack,
    Pull,
    /// DCTCP: a cumulative ACK (its `seq`: the next packet expected) with ECE clear.
    CumAck,
    /// DCTCP: a cumulative ACK with ECE set (the data packet was CE-marked).
    CumAckEce,
    /// DCQCN: a congestion notification packet.
    Cnp,
}

/// One step of a transport at a host, recorded with [`Network::record_transport`] (for tests and
/// debugging: a flow's timeline).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub enum TransportEvent {
    /// The sender's host port started sending data packet `seq` of `msg`.
    Sent { msg: u32, seq: u32, retransmission: bool },
    /// Data packet `seq` (or, `trimmed`, its header) reached the receiving host.
    Arrived { msg: u32, seq: u32, trimmed: bool },
    /// The receiving host queued an ACK/NACK of `seq` (or a PULL) granting pull number `pull`
    /// (0: none) on its port's priority queue.
    Replied { msg: u32, kind: ControlKind, seq: u32, pull: u32 },
    /// An ACK/NACK/PULL reached the sending host.
    Heard { msg: u32, kind: ControlKind, seq: u32, pull: u32 },
    /// The sender's timer expired with something due (a packet queued again or a pull granted).
    Timeout { msg: u32 },
}

/// The sending state machine of one message.
enum Sender {
    Ndp(NdpSender),
    Dctcp(DctcpSender),
    Dcqcn(DcqcnSender),
}

/// The receiving state machine of one message.
enum Receiver {
    Ndp(NdpReceiver),
    Dctcp(DctcpReceiver),
    Dcqcn(DcqcnReceiver),
}

/// A packet a sender sends now.
struct Send {
    seq: u32,
    retransmission: bool,
}

impl Sender {
    fn has_packet(&self, now: u64) -> bool {
        match self {
            Sender::Ndp(s) => s.has_packet(),
            Sender::Dctcp(s) => s.has_packet(),
            Sender::Dcqcn(s) => s.has_packet(now),
        }
    }
    fn peek_seq(&self) -> Option<u32> {
        match self {
            Sender::Ndp(s) => s.peek().map(|t| t.seq),
            Sender::Dctcp(s) => s.peek().map(|t| t.seq),
            Sender::Dcqcn(s) => s.peek(),
        }
    }
    fn transmit(&mut self, now: u64, wire_bytes: u32) -> Option<Send> {
        match self {
            Sender::Ndp(s) => s.transmit(now).map(|t| Send { seq: t.seq, retransmission: t.retransmission }),
            Sender::Dctcp(s) => s.transmit(now).map(|t| Send { seq: t.seq, retransmission: t.retransmission }),
            Sender::Dcqcn(s) => s.transmit(now, wire_bytes as u64).map(|seq| Send { seq, retransmission: false }),
        }
    }
    fn timer_ps(&self) -> Option<u64> {
        match self {
            Sender::Ndp(s) => s.timer_ps(),
            Sender::Dctcp(s) => s.timer_ps(),
            Sender::Dcqcn(s) => s.timer_ps(),
        }
    }
    fn timeouts(&self) -> u64 {
        match self {
            Sender::Ndp(s) => s.stats().timeouts,
            Sender::Dctcp(s) => s.stats().timeouts,
            Sender::Dcqcn(_) => 0,
        }
    }
    fn on_timer(&mut self, now: u64) {
        match self {
            Sender::Ndp(s) => s.on_timer(now),
            Sender::Dctcp(s) => s.on_timer(now),
            Sender::Dcqcn(s) => s.on_timer(now),
        }
    }
    fn gave_up(&self) -> bool {
        match self {
            Sender::Ndp(s) => s.gave_up(),
            Sender::Dctcp(s) => s.gave_up(),
            Sender::Dcqcn(_) => false,
        }
    }
}

/// Transport state of one message.
#[derive(Default)]
pub(crate) struct Flow {
    sender: Option<Sender>,
    receiver: Option<Receiver>,
    /// Its slot in the receiving host's pacer.
    slot: u32,
    /// The receiving host's port for ACKs, NACKs and PULLs (chosen at the first arrival).
    reply_port: Option<PortId>,
    /// When this flow's pending timer event fires (one at a time; an event that finds another
    /// time here is stale and ignored).
    timer_at: Option<u64>,
    in_round: bool,
    pub trims: u64,
    retransmissions: u64,
    timeouts: u64,
    /// DCTCP: ACKs with ECE heard, fast retransmits.
    marks_echoed: u64,
    fast_retransmits: u64,
}

impl Flow {
    /// DCQCN: CNPs its sender acted on.
    fn rate_decreases(&self) -> u64 {
        match self.sender.as_ref() {
            Some(Sender::Dcqcn(s)) => s.stats().cnps,
            _ => 0,
        }
    }
}

/// Host-side transport state: per message and per receiving host.
pub(crate) struct Transport {
    pub cfg: TransportConfig,
    pub on: bool,
    params: NdpParams,
    dctcp: DctcpParams,
    flows: Vec<Flow>,
    pacers: Vec<PullPacer>,
    pacer_armed: Vec<bool>,
    /// Per host port: the messages whose senders may send now, served round-robin (one more
    /// injection slot of the port's arbitration).
    pub round: Vec<VecDeque<u32>>,
    /// Message tags (traffic entries) whose messages go raw, without the transport.
    raw_tags: Vec<bool>,
    pub stats: TransportStats,
    /// (time, event) when recording.
    trace: Option<Vec<(u64, TransportEvent)>>,
}

impl Transport {
    pub fn off() -> Transport {
        Transport {
            cfg: TransportConfig::None,
            on: false,
            params: NdpParams { initial_window_packets: 1, rto_ps: 1 },
            dctcp: DctcpParams { mss_bytes: 1, initial_window_packets: 1, g: 1.0, min_rto_ps: 1 },
            flows: Vec::new(),
            pacers: Vec::new(),
            pacer_armed: Vec::new(),
            round: Vec::new(),
            raw_tags: Vec::new(),
            stats: TransportStats::default(),
            trace: None,
        }
    }

    /// Whether messages tagged `tag` are carried by the transport (not raw).
    pub fn carries(&self, tag: u64) -> bool {
        self.on && !self.raw_tags.get(tag as usize).copied().unwrap_or(false)
    }

    #[inline]
    fn note(&mut self, now: u64, e: TransportEvent) {
        if let Some(t) = self.trace.as_mut() {
            t.push((now, e));
        }
    }

    fn dctcp_on(&self) -> bool {
        matches!(self.cfg, TransportConfig::Dctcp(_))
    }

    pub fn flow_mut(&mut self, msg: u32) -> &mut Flow {
        let i = msg as usize;
        if i >= self.flows.len() {
            self.flows.resize_with(i + 1, Flow::default);
        }
        &mut self.flows[i]
    }
}

impl Network {
    /// Sets the transport of message traffic (before the run starts). Errors name the field
    /// and say why.
    pub fn set_transport(&mut self, cfg: TransportConfig) -> Result<(), String> {
        let c = match cfg {
            TransportConfig::None => {
                self.tr = Transport::off();
                self.trim = Trimming::off(self.trim_rng());
                self.local_slots = 2 + self.ep.rdv as usize;
                return Ok(());
            }
            TransportConfig::Dctcp(c) => return self.set_dctcp(c),
            TransportConfig::Dcqcn(c) => return self.set_dcqcn(c),
            TransportConfig::Ndp(c) => c,
        };
        if self.cfg.flow_control != FlowControl::DropTail {
            return Err("kind: \"ndp\" needs network.flow_control = \"drop_tail\" (NDP switches trim packets they cannot queue; credit flow control never lets a queue overflow)".into());
        }
        if self.cfg.arbitration != Arbitration::Fifo {
            return Err("kind: \"ndp\" needs network.arbitration = \"fifo\" (trimming cuts the packet at the tail of a port's FIFO)".into());
        }
        if self.ep.rdv {
            return Err("kind: \"ndp\" does not combine with endpoint.rendezvous_threshold_bytes (NDP's receiver already grants the data by pulls)".into());
        }
        if c.initial_window_packets == 0 {
            return Err("initial_window_packets: must be >= 1".into());
        }
        if c.data_queue_packets == 0 {
            return Err("data_queue_packets: must be >= 1".into());
        }
        if c.rto_ps == 0 {
            return Err("rto_us: must be > 0".into());
        }
        let np = self.pt.len();
        self.trim = Trimming::new(np, c.data_queue_packets as u64 * self.cfg.mtu_bytes as u64, self.trim_rng());
        let pacers = self
            .host_node
            .iter()
            .map(|&node| {
                let bps: u64 = self.pt.of_node(node).map(|g| self.pt.bps(g)).sum();
                PullPacer::new(SimDuration::serialization(self.cfg.mtu_bytes as u64, bps.max(1)).ps())
            })
            .collect::<Vec<_>>();
        self.tr = Transport {
            cfg,
            on: true,
            params: NdpParams { initial_window_packets: c.initial_window_packets, rto_ps: c.rto_ps },
            dctcp: Transport::off().dctcp,
            flows: Vec::new(),
            pacer_armed: vec![false; pacers.len()],
            pacers,
            round: (0..np).map(|_| VecDeque::new()).collect(),
            raw_tags: Vec::new(),
            stats: TransportStats::default(),
            trace: None,
        };
        self.local_slots = 3;
        Ok(())
    }

    fn set_dctcp(&mut self, c: DctcpConfig) -> Result<(), String> {
        if self.cfg.ecn_threshold_bytes.is_none() {
            return Err(
                "kind: \"dctcp\" needs network.ecn_threshold_bytes (DCTCP's window follows the switches' ECN marks)"
                    .into(),
            );
        }
        if self.ep.rdv {
            return Err("kind: \"dctcp\" does not combine with endpoint.rendezvous_threshold_bytes (DCTCP's window already limits what is in flight)".into());
        }
        if c.initial_window_packets == 0 {
            return Err("initial_window_packets: must be >= 1".into());
        }
        if !(c.g > 0.0 && c.g <= 1.0) {
            return Err(format!("g: must be > 0 and <= 1, got {}", c.g));
        }
        if c.min_rto_ps == 0 {
            return Err("min_rto_us: must be > 0".into());
        }
        self.trim = Trimming::off(self.trim_rng());
        self.tr = Transport {
            cfg: TransportConfig::Dctcp(c),
            on: true,
            params: Transport::off().params,
            dctcp: DctcpParams {
                mss_bytes: self.cfg.payload_per_packet() as u64,
                initial_window_packets: c.initial_window_packets,
                g: c.g,
                min_rto_ps: c.min_rto_ps,
            },
            flows: Vec::new(),
            pacer_armed: Vec::new(),
            pacers: Vec::new(),
            round: (0..self.pt.len()).map(|_| VecDeque::new()).collect(),
            raw_tags: Vec::new(),
            stats: TransportStats::default(),
            trace: None,
        };
        self.local_slots = 3;
        Ok(())
    }

    fn set_dcqcn(&mut self, c: DcqcnConfig) -> Result<(), String> {
        if !self.cfg.flow_control.is_lossless() {
            return Err("kind: \"dcqcn\" needs a lossless network (network.flow_control = \"credit\" or \"pfc\"): DCQCN does not retransmit".into());
        }
        if self.cfg.ecn_threshold_bytes.is_none() {
            return Err(
                "kind: \"dcqcn\" needs network.ecn_threshold_bytes (DCQCN's receivers turn ECN marks into CNPs)".into(),
            );
        }
        if self.ep.rdv {
            return Err("kind: \"dcqcn\" does not combine with endpoint.rendezvous_threshold_bytes".into());
        }
        if !(c.g > 0.0 && c.g <= 1.0) {
            return Err(format!("g: must be > 0 and <= 1, got {}", c.g));
        }
        for (key, v) in [
            ("alpha_interval_us", c.alpha_interval_ps),
            ("increase_interval_us", c.increase_interval_ps),
            ("byte_counter_bytes", c.byte_counter_bytes),
            ("min_rate_gbps", c.min_rate_bps),
        ] {
            if v == 0 {
                return Err(format!("{key}: must be > 0"));
            }
        }
        self.trim = Trimming::off(self.trim_rng());
        self.tr = Transport {
            cfg: TransportConfig::Dcqcn(c),
            on: true,
            params: Transport::off().params,
            dctcp: Transport::off().dctcp,
            flows: Vec::new(),
            pacer_armed: Vec::new(),
            pacers: Vec::new(),
            round: (0..self.pt.len()).map(|_| VecDeque::new()).collect(),
            raw_tags: Vec::new(),
            stats: TransportStats::default(),
            trace: None,
        };
        self.local_slots = 3;
        Ok(())
    }

    /// Messages tagged with one of `tags` (the scenario's traffic entries with
    /// `transport = "none"`) go raw, as without a transport, while the others use it (after
    /// [`Network::set_transport`]). Their packets meet the transport's switch behaviour (NDP's
    /// data queues) like any other packet.
    pub fn set_raw_tags(&mut self, tags: &[u64]) {
        for &t in tags {
            let i = t as usize;
            if i >= self.tr.raw_tags.len() {
                self.tr.raw_tags.resize(i + 1, false);
            }
            self.tr.raw_tags[i] = true;
        }
    }

    /// Whether messages tagged `tag` are carried by the transport.
    pub fn transport_carries(&self, tag: u64) -> bool {
        self.tr.carries(tag)
    }

    /// Records every [`TransportEvent`] from now on (memory grows with the run: for tests and
    /// small runs).
    pub fn record_transport(&mut self) {
        self.tr.trace.get_or_insert_with(Vec::new);
    }

    /// The recorded (time in ps, event) pairs, in event order.
    pub fn transport_trace(&self) -> &[(u64, TransportEvent)] {
        self.tr.trace.as_deref().unwrap_or(&[])
    }

    pub fn transport(&self) -> &TransportConfig {
        &self.tr.cfg
    }

    /// Whole-network transport counters (`None` without a transport).
    pub fn transport_stats(&self) -> Option<TransportStats> {
        self.tr.on.then_some(self.tr.stats)
    }

    /// Transport counters of message `msg` (`None` without a transport).
    pub fn message_transport(&self, msg: crate::MsgId) -> Option<MessageTransport> {
        if !self.tr.on {
            return None;
        }
        let Some(f) = self.tr.flows.get(msg.0 as usize) else { return Some(MessageTransport::default()) };
        let (nacks, pulls, duplicates) = match f.receiver.as_ref() {
            Some(Receiver::Ndp(r)) => (r.stats().nacks, r.stats().pulls, r.stats().duplicates),
            Some(Receiver::Dctcp(r)) => (0, 0, r.stats().duplicates),
            Some(Receiver::Dcqcn(r)) => (0, 0, r.stats().duplicates),
            None => (0, 0, 0),
        };
        let cnps = match f.receiver.as_ref() {
            Some(Receiver::Dcqcn(r)) => r.stats().cnps,
            _ => 0,
        };
        Some(MessageTransport {
            retransmissions: f.retransmissions,
            trims: f.trims,
            nacks,
            pulls,
            timeouts: f.timeouts,
            duplicates,
            marks_echoed: f.marks_echoed,
            fast_retransmits: f.fast_retransmits,
            cnps,
            rate_decreases: f.rate_decreases(),
        })
    }

    /// Data packets trimmed at each port, in global port order (as [`Network::port_stats`];
    /// `None` without a transport).
    pub fn port_trims(&self) -> Option<&[u64]> {
        self.trim.on.then_some(&self.trim.trims[..])
    }

    /// Senders still waiting for acknowledgements and those that gave up: for stall reasons.
    pub(crate) fn transport_state(&self) -> Option<String> {
        if !self.tr.on {
            return None;
        }
        let waiting = self.tr.flows.iter().filter(|f| f.sender.as_ref().is_some_and(|s| !s.gave_up())).count();
        let gave_up = self.tr.stats.senders_gave_up;
        if let TransportConfig::Dcqcn(_) = self.tr.cfg {
            let sending = self
                .tr
                .flows
                .iter()
                .filter(|f| matches!(f.sender.as_ref(), Some(Sender::Dcqcn(s)) if !s.is_done()))
                .count();
            return Some(format!(
                "DCQCN: {sending} senders still sending; packets are sent once (a lost packet is not recovered)"
            ));
        }
        if let TransportConfig::Dctcp(_) = self.tr.cfg {
            return Some(format!(
                "DCTCP: {waiting} senders waiting, {gave_up} gave up after more than {} timeouts in a row; {} retransmissions, {} timeouts",
                reducelab_transport::dctcp::MAX_TIMEOUTS,
                self.tr.stats.retransmissions,
                self.tr.stats.timeouts
            ));
        }
        Some(format!(
            "NDP: {waiting} senders waiting, {gave_up} gave up after more than {} timeout rounds in a row; {} trims, {} retransmissions, {} headers or control packets dropped",
            reducelab_transport::ndp::MAX_TIMEOUTS,
            self.tr.stats.trims,
            self.tr.stats.retransmissions,
            self.tr.stats.priority_drops
        ))
    }

    /// Message `msg` (not local) may send from host port `port`: its sender and receiver
    /// start, and the initial window joins the port's injection round.
    pub(crate) fn transport_open(&mut self, port: PortId, msg: u32) {
        let now = self.queue.now().0;
        let (n, dst) = {
            let m = &self.messages[msg as usize];
            (m.total_packets, m.dst)
        };
        if let TransportConfig::Dcqcn(c) = self.tr.cfg {
            let line_rate_bps = self.pt.bps(port);
            let p = DcqcnParams {
                line_rate_bps,
                min_rate_bps: c.min_rate_bps.min(line_rate_bps),
                g: c.g,
                alpha_interval_ps: c.alpha_interval_ps,
                increase_interval_ps: c.increase_interval_ps,
                byte_counter_bytes: c.byte_counter_bytes,
                fast_recovery_steps: c.fast_recovery_steps,
                rai_bps: c.rai_bps,
                rhai_bps: c.rhai_bps,
            };
            let f = self.tr.flow_mut(msg);
            f.sender = Some(Sender::Dcqcn(DcqcnSender::new(n, p)));
            f.receiver = Some(Receiver::Dcqcn(DcqcnReceiver::new(n, c.cnp_interval_ps)));
            return self.transport_update_round(port, msg);
        }
        if let TransportConfig::Dctcp(_) = self.tr.cfg {
            let params = self.tr.dctcp;
            let f = self.tr.flow_mut(msg);
            f.sender = Some(Sender::Dctcp(DctcpSender::new(n, params)));
            f.receiver = Some(Receiver::Dctcp(DctcpReceiver::new(n)));
            return self.transport_update_round(port, msg);
        }
        let params = self.tr.params;
        let slot = self.tr.pacers[dst as usize].open(msg);
        let f = self.tr.flow_mut(msg);
        f.sender = Some(Sender::Ndp(NdpSender::new(n, params, now)));
        f.receiver = Some(Receiver::Ndp(NdpReceiver::new(n)));
        f.slot = slot;
        self.transport_update_round(port, msg);
    }

    /// Keeps `msg` in `port`'s injection round exactly while its sender may send (an ACK can
    /// cancel the retransmission it was waiting to send).
    fn transport_update_round(&mut self, port: PortId, msg: u32) {
        let f = &mut self.tr.flows[msg as usize];
        let now = self.queue.now().0;
        let may = f.sender.as_ref().is_some_and(|s| s.has_packet(now));
        if may && !f.in_round {
            f.in_round = true;
            self.tr.round[port.idx()].push_back(msg);
            self.kick(port);
        } else if !may && f.in_round {
            f.in_round = false;
            self.tr.round[port.idx()].retain(|&m| m != msg);
        }
    }

    fn trim_rng(&self) -> reducelab_des::Rng {
        self.trim.rng.clone()
    }

    /// Wire size of the packet message `msg`'s sender sends next.
    // Kept out of line so that the raw engine's callers stay as they were (see docs/engine.md,
    // "Performance").
    #[cold]
    #[inline(never)]
    pub(crate) fn transport_next_size(&self, msg: u32) -> u32 {
        let seq = self.tr.flows[msg as usize]
            .sender
            .as_ref()
            .and_then(|s| s.peek_seq())
            .expect("a message in the round has a packet to send");
        self.transport_data_size(msg, seq)
    }

    fn transport_data_size(&self, msg: u32, seq: u32) -> u32 {
        let payload = self.cfg.payload_per_packet() as u64;
        let bytes = self.messages[msg as usize].bytes;
        bytes.saturating_sub(seq as u64 * payload).min(payload) as u32 + self.cfg.header_bytes
    }

    /// The sender's next packet for host port `port` (the arbitration chose NDP's slot), and
    /// `msg`'s place in the port's round.
    #[cold]
    #[inline(never)]
    pub(crate) fn make_transport_packet(&mut self, port: PortId, msg: u32, vc: u8, size: u32) -> PktId {
        let now = self.queue.now().0;
        let g = port.idx();
        let f = &mut self.tr.flows[msg as usize];
        let s = f.sender.as_mut().expect("a message in the round has a sender");
        let t = s.transmit(now, size).expect("a message in the round has a packet to send");
        let more = s.has_packet(now);
        if let Sender::Dcqcn(d) = &*s {
            if d.is_done() {
                let st = d.stats();
                let ts = &mut self.tr.stats;
                ts.rate_decreases += st.cnps;
                ts.fast_recoveries += st.fast_recoveries;
                ts.additive_increases += st.additive_increases;
                ts.hyper_increases += st.hyper_increases;
            }
        }
        self.tr.note(now, TransportEvent::Sent { msg, seq: t.seq, retransmission: t.retransmission });
        let f = &mut self.tr.flows[msg as usize];
        if t.retransmission {
            f.retransmissions += 1;
            self.tr.stats.retransmissions += 1;
        } else {
            self.messages[msg as usize].sent_packets += 1;
        }
        self.tr.round[g].pop_front();
        if more {
            self.tr.round[g].push_back(msg);
        } else {
            self.tr.flows[msg as usize].in_round = false;
        }
        self.arm_transport_timer(msg);
        let dst = self.messages[msg as usize].dst;
        self.stats.packets_created += 1;
        let flow_hash = self.packet_route_key(msg, false);
        let id = self.pool.alloc(Packet {
            next: None,
            wire_bytes: size,
            payload_bytes: size - self.cfg.header_bytes,
            dst: PackedDst::new(AppDst::Host(dst)),
            body: Body::Transport { msg, kind: TransportPacket::Data },
            seq: t.seq,
            in_port: None,
            in_vc: 0,
            vc,
            hops: 0,
            flags: Packet::new_flags(false),
            flow_hash,
            fingerprint: fingerprint(self.salt, msg, t.seq),
            arrive_ps: 0,
            born_ps: now.max(self.ports[g].inject_since),
        });
        self.stats.peak_packets_in_flight = self.stats.peak_packets_in_flight.max(self.pool.live);
        id
    }

    /// Keeps one timer event pending for `msg`'s sender while it has something to time.
    fn arm_transport_timer(&mut self, msg: u32) {
        let now = self.queue.now().0;
        let f = &mut self.tr.flows[msg as usize];
        let Some(t) = f.sender.as_ref().and_then(|s| s.timer_ps()) else { return };
        let t = t.max(now);
        // A later deadline waits for the pending event (the sender then finds nothing due and
        // names the next); an earlier one (DCTCP's timeout after its backoff ends) gets an
        // event of its own and the pending one goes stale. NDP's deadlines never move earlier.
        if f.timer_at.is_some_and(|a| a <= t) {
            return;
        }
        f.timer_at = Some(t);
        self.queue.push(SimTime(t), Event::Rto { msg });
    }

    /// Keeps one event pending for host `host`'s pacer while pulls are queued.
    fn ndp_arm_pacer(&mut self, host: u32) {
        let h = host as usize;
        if self.tr.pacer_armed[h] {
            return;
        }
        if let Some(t) = self.tr.pacers[h].due_ps() {
            self.tr.pacer_armed[h] = true;
            let now = self.queue.now().0;
            self.queue.push(SimTime(t.max(now)), Event::Pull { host });
        }
    }

    /// The timer event of `msg`'s sender.
    pub(crate) fn transport_timer(&mut self, msg: u32) {
        let now = self.queue.now().0;
        let f = &mut self.tr.flows[msg as usize];
        if f.timer_at != Some(now) {
            return; // stale: an earlier event replaced it
        }
        f.timer_at = None;
        let Some(s) = f.sender.as_mut() else { return };
        let before = s.timeouts();
        s.on_timer(now);
        let fired = s.timeouts() - before;
        let gave_up = s.gave_up();
        if fired > 0 {
            self.tr.note(now, TransportEvent::Timeout { msg });
        }
        let f = &mut self.tr.flows[msg as usize];
        f.timeouts += fired;
        self.tr.stats.timeouts += fired;
        if gave_up {
            self.tr.stats.senders_gave_up += 1;
        }
        let port = self.transport_sender_port(msg);
        self.transport_update_round(port, msg);
        self.arm_transport_timer(msg);
    }

    /// The pacer event of host `host`: its next queued pull goes as a PULL packet.
    pub(crate) fn ndp_pacer(&mut self, host: u32) {
        let now = self.queue.now().0;
        self.tr.pacer_armed[host as usize] = false;
        if let Some(msg) = self.tr.pacers[host as usize].poll(now) {
            let Some(Receiver::Ndp(rx)) = self.tr.flows[msg as usize].receiver.as_mut() else {
                unreachable!("pulls are NDP's")
            };
            let pull = rx.issue_pull();
            self.tr.stats.pulls += 1;
            self.tr.stats.pull_packets += 1;
            self.transport_reply(msg, TransportPacket::Pull, 0, pull);
        }
        self.ndp_arm_pacer(host);
    }

    /// Global id of the host port `msg` is sent from.
    fn transport_sender_port(&self, msg: u32) -> PortId {
        let m = &self.messages[msg as usize];
        self.pt.of(self.host_node[m.src as usize], m.port)
    }

    /// Sends an ACK, NACK or PULL of `msg` from its receiving host to its sender, granting
    /// cumulative pull `pull` (0: none).
    fn transport_reply(&mut self, msg: u32, kind: TransportPacket, seq: u32, pull: u32) {
        let (src, dst) = {
            let m = &self.messages[msg as usize];
            (m.src, m.dst)
        };
        let port = match self.tr.flows[msg as usize].reply_port {
            Some(p) => p,
            None => {
                let node = self.host_node[dst as usize];
                let lp = if self.pt.count(node) == 1 { Some(0) } else { self.injection_port(node, src, msg) };
                let Some(lp) = lp else {
                    self.stats.drops_no_route += 1;
                    return;
                };
                let p = self.pt.of(node, lp);
                self.tr.flows[msg as usize].reply_port = Some(p);
                p
            }
        };
        let now = self.queue.now().0;
        let ck = match kind {
            TransportPacket::Ack if self.tr.dctcp_on() => [ControlKind::CumAck, ControlKind::CumAckEce][pull as usize],
            TransportPacket::Ack => ControlKind::Ack,
            TransportPacket::Nack => ControlKind::Nack,
            TransportPacket::Cnp => ControlKind::Cnp,
            _ => ControlKind::Pull,
        };
        self.tr.note(now, TransportEvent::Replied { msg, kind: ck, seq, pull });
        let vc = self.injection_vc(port);
        self.stats.packets_created += 1;
        let flow_hash = self.packet_route_key(msg, true);
        let id = self.pool.alloc(Packet {
            next: None,
            wire_bytes: self.cfg.header_bytes,
            payload_bytes: 0,
            dst: PackedDst::new(AppDst::Host(src)),
            body: Body::Transport { msg, kind },
            seq,
            in_port: None,
            in_vc: 0,
            vc,
            hops: 0,
            flags: Packet::new_flags(false),
            flow_hash,
            fingerprint: pull as u64,
            arrive_ps: 0,
            born_ps: now,
        });
        self.stats.peak_packets_in_flight = self.stats.peak_packets_in_flight.max(self.pool.live);
        self.enqueue(port, id);
    }

    /// NDP packet `p` of message `msg` reached its destination host (its buffer is already
    /// released).
    pub(crate) fn transport_arrived(&mut self, p: &Packet, msg: u32, kind: TransportPacket) -> Arrival {
        if self.tr.dctcp_on() {
            return self.dctcp_arrived(p, msg, kind);
        }
        if let TransportConfig::Dcqcn(_) = self.tr.cfg {
            return self.dcqcn_arrived(p, msg, kind);
        }
        let now = self.queue.now().0;
        match kind {
            TransportPacket::Data | TransportPacket::Header => {
                self.tr
                    .note(now, TransportEvent::Arrived { msg, seq: p.seq, trimmed: kind == TransportPacket::Header });
                let dst = self.messages[msg as usize].dst;
                let f = &mut self.tr.flows[msg as usize];
                let slot = f.slot;
                let Some(Receiver::Ndp(rx)) = f.receiver.as_mut() else {
                    unreachable!("a receiver for every started message")
                };
                let rc = if kind == TransportPacket::Data { rx.on_data(p.seq) } else { rx.on_header(p.seq) };
                let mut pull = 0;
                if rc.wants_pull {
                    if self.tr.pacers[dst as usize].request(slot, now) {
                        pull = rx.issue_pull();
                        self.tr.stats.pulls += 1;
                    } else {
                        self.ndp_arm_pacer(dst);
                    }
                }
                if rc.completed {
                    self.tr.pacers[dst as usize].close(slot);
                }
                if kind == TransportPacket::Data && !rc.new_data {
                    self.tr.stats.duplicates += 1;
                }
                let (reply, seq) = match rc.reply {
                    Reply::Ack(s) => {
                        self.tr.stats.acks += 1;
                        (TransportPacket::Ack, s)
                    }
                    Reply::Nack(s) => {
                        self.tr.stats.nacks += 1;
                        (TransportPacket::Nack, s)
                    }
                };
                self.transport_reply(msg, reply, seq, pull);
                self.data_received(p, msg, rc.new_data, rc.completed)
            }
            TransportPacket::Ack | TransportPacket::Nack | TransportPacket::Pull => {
                let ck = match kind {
                    TransportPacket::Ack => ControlKind::Ack,
                    TransportPacket::Nack => ControlKind::Nack,
                    _ => ControlKind::Pull,
                };
                self.tr.note(now, TransportEvent::Heard { msg, kind: ck, seq: p.seq, pull: p.fingerprint as u32 });
                let f = &mut self.tr.flows[msg as usize];
                let Some(Sender::Ndp(s)) = f.sender.as_mut() else { return Arrival::Nothing }; // done already
                let pull = (p.fingerprint != 0).then_some(p.fingerprint as u32);
                match kind {
                    TransportPacket::Ack => s.on_ack(p.seq, pull, now),
                    TransportPacket::Nack => s.on_nack(p.seq, pull, now),
                    _ => s.on_pull(p.fingerprint as u32, now),
                }
                if s.is_done() {
                    f.sender = None;
                }
                let port = self.transport_sender_port(msg);
                self.transport_update_round(port, msg);
                self.arm_transport_timer(msg);
                Arrival::Nothing
            }
            TransportPacket::Cnp => unreachable!("CNPs are DCQCN's"),
        }
    }

    /// DCTCP packet `p` of message `msg` reached its destination host: data at the receiver
    /// (delivered once, answered by a cumulative ACK echoing its CE bit), an ACK at the sender.
    fn dctcp_arrived(&mut self, p: &Packet, msg: u32, kind: TransportPacket) -> Arrival {
        let now = self.queue.now().0;
        if kind == TransportPacket::Data {
            self.tr.note(now, TransportEvent::Arrived { msg, seq: p.seq, trimmed: false });
            let f = &mut self.tr.flows[msg as usize];
            let Some(Receiver::Dctcp(rx)) = f.receiver.as_mut() else {
                unreachable!("a receiver for every started message")
            };
            let rc = rx.on_data(p.seq, p.ecn());
            if !rc.new_data {
                self.tr.stats.duplicates += 1;
            }
            self.tr.stats.acks += 1;
            self.transport_reply(msg, TransportPacket::Ack, rc.ack, rc.ece as u32);
            return self.data_received(p, msg, rc.new_data, rc.completed);
        }
        debug_assert_eq!(kind, TransportPacket::Ack);
        let ece = p.fingerprint != 0;
        let kind = if ece { ControlKind::CumAckEce } else { ControlKind::CumAck };
        self.tr.note(now, TransportEvent::Heard { msg, kind, seq: p.seq, pull: ece as u32 });
        let f = &mut self.tr.flows[msg as usize];
        let Some(Sender::Dctcp(s)) = f.sender.as_mut() else { return Arrival::Nothing }; // done already
        let before = s.stats();
        s.on_ack(p.seq, ece, now);
        let after = s.stats();
        let done = s.is_done();
        let (marks, fast) =
            (after.marks_echoed - before.marks_echoed, after.fast_retransmits - before.fast_retransmits);
        f.marks_echoed += marks;
        f.fast_retransmits += fast;
        self.tr.stats.marks_echoed += marks;
        self.tr.stats.fast_retransmits += fast;
        self.tr.stats.ecn_reductions += after.ecn_reductions - before.ecn_reductions;
        if done {
            f.sender = None;
        }
        let port = self.transport_sender_port(msg);
        self.transport_update_round(port, msg);
        self.arm_transport_timer(msg);
        Arrival::Nothing
    }

    /// A data packet of message `msg` reached its receiver: its payload and fingerprint are
    /// counted if it is `new_data` (each packet once, whatever the transport resent), and the
    /// message is delivered when the receiver says it is `completed` (after its endpoint cost).
    fn data_received(&mut self, p: &Packet, msg: u32, new_data: bool, completed: bool) -> Arrival {
        if new_data {
            let m = &mut self.messages[msg as usize];
            m.recv_packets += 1;
            m.recv_bytes += p.payload_bytes as u64;
            m.fingerprint_received = m.fingerprint_received.wrapping_add(p.fingerprint);
            if !m.background {
                self.fg.payload_bytes += p.payload_bytes as u64;
            }
        }
        if completed && self.endpoint_received(msg) {
            self.complete_delivery(msg);
            return Arrival::Delivered(msg);
        }
        Arrival::Nothing
    }

    /// DCQCN packet `p` of message `msg` reached its destination host: data at the receiver
    /// (delivered once; a CE mark may send a CNP), a CNP at the sender.
    fn dcqcn_arrived(&mut self, p: &Packet, msg: u32, kind: TransportPacket) -> Arrival {
        let now = self.queue.now().0;
        if kind == TransportPacket::Data {
            self.tr.note(now, TransportEvent::Arrived { msg, seq: p.seq, trimmed: false });
            let f = &mut self.tr.flows[msg as usize];
            let Some(Receiver::Dcqcn(rx)) = f.receiver.as_mut() else {
                unreachable!("a receiver for every started message")
            };
            let rc = rx.on_data(p.seq, p.ecn(), now);
            self.tr.stats.marked_packets += p.ecn() as u64;
            if !rc.new_data {
                self.tr.stats.duplicates += 1;
            }
            if rc.cnp {
                self.tr.stats.cnps += 1;
                self.transport_reply(msg, TransportPacket::Cnp, p.seq, 0);
            }
            return self.data_received(p, msg, rc.new_data, rc.completed);
        }
        debug_assert_eq!(kind, TransportPacket::Cnp);
        self.tr.note(now, TransportEvent::Heard { msg, kind: ControlKind::Cnp, seq: p.seq, pull: 0 });
        let f = &mut self.tr.flows[msg as usize];
        let Some(Sender::Dcqcn(s)) = f.sender.as_mut() else { return Arrival::Nothing };
        s.on_cnp(now);
        let port = self.transport_sender_port(msg);
        self.transport_update_round(port, msg);
        self.arm_transport_timer(msg);
        Arrival::Nothing
    }
}
