use serde::Serialize;

/// Link-level flow control.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub enum FlowControl {
    /// Lossless credit-based flow control (the default).
    Credit,
    /// Drop-tail output queues of `buffer_bytes`.
    DropTail,
    /// Lossless priority flow control (IEEE 802.1Qbb): an ingress buffer that holds more than
    /// its XOFF threshold pauses the upstream's VC with a PAUSE frame and resumes it at XON
    /// (see [`NetConfig::pfc`] and docs/engine.md, "PFC pause frames").
    Pfc,
}

impl FlowControl {
    /// Does this flow control guarantee that no packet is dropped for lack of buffer space
    /// (credits and PFC), as lossless transports such as RoCE's DCQCN assume?
    pub fn is_lossless(self) -> bool {
        match self {
            FlowControl::Credit | FlowControl::Pfc => true,
            FlowControl::DropTail => false,
        }
    }
}

/// Thresholds of [`FlowControl::Pfc`], per ingress port and VC of a forwarding node; `None`
/// derives the value from the port's link (see [`crate::pfc_min_headroom_bytes`]): headroom from the link's
/// bandwidth-delay product and the MTU, XOFF as the rest of `buffer_bytes`, XON two MTUs below.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct PfcConfig {
    /// PAUSE the upstream when the ingress holds more than this many bytes.
    pub xoff_bytes: Option<u64>,
    /// RESUME it when the ingress holds this many bytes or fewer (<= XOFF).
    pub xon_bytes: Option<u64>,
    /// Buffer kept above XOFF for what arrives during the pause's round trip; must be at least
    /// what the link can deliver then (checked), and `xoff + headroom <= buffer_bytes`.
    pub headroom_bytes: Option<u64>,
}

/// How a forwarding node picks among the minimal next hops.
#[derive(Clone, Copy, PartialEq, Eq, Serialize)]
pub enum RoutingAlgo {
    /// Deterministic: dimension order on tori/HyperX, destination-mod-k up/down elsewhere.
    Minimal,
    /// Per-flow hash over the minimal next hops.
    Ecmp,
    /// Per packet, the minimal next hop with the fewest queued bytes. On tori this is
    /// minimal adaptive routing with Duato escape channels.
    Adaptive,
    /// Threshold-adaptive: per packet, the default minimal port (chosen by destination, as
    /// destination-mod-k) unless its output queue holds more than the threshold; then the
    /// minimal port with the fewest queued bytes (looking from the default one on, which wins
    /// ties). [`RoutingAlgo::CANARY`] is the Canary paper's rule.
    ThresholdAdaptive(AdaptiveThreshold),
}

/// When [`RoutingAlgo::ThresholdAdaptive`] leaves the default port: when its output queue holds
/// more than this.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub enum AdaptiveThreshold {
    /// A share of the port buffer (`NetConfig::buffer_bytes`), in percent (0..=100).
    BufferPercent(u8),
    /// A number of bytes.
    Bytes(u64),
}

impl AdaptiveThreshold {
    /// The threshold in bytes for ports of `buffer_bytes`: `q > bytes` is exactly
    /// `q > buffer_bytes * percent / 100` for integer queue lengths `q`.
    pub fn bytes(self, buffer_bytes: u64) -> u64 {
        match self {
            AdaptiveThreshold::BufferPercent(p) => (buffer_bytes as u128 * p as u128 / 100) as u64,
            AdaptiveThreshold::Bytes(b) => b,
        }
    }
}

impl RoutingAlgo {
    /// Canary's routing (De Sensi et al., "Canary: Congestion-aware in-network allreduce using
    /// dynamic trees", FGCS 2024, §5.2 "Large network simulations"):
    ///
    /// > "By default, each switch sends packets on a default *up* port (selected depending on
    /// > the packet destination). If the output port buffer has an occupancy higher than 50% of
    /// > its capacity, the switch forwards the packet on the *up* port with the smallest number
    /// > of enqueued bytes."
    ///
    /// That is threshold-adaptive routing with the threshold at 50% of the port buffer. (The
    /// engine applies the rule at every hop with several minimal candidates, which on a fat
    /// tree are exactly the up ports; going down there is one.)
    pub const CANARY: RoutingAlgo = RoutingAlgo::ThresholdAdaptive(AdaptiveThreshold::BufferPercent(50));
}

/// Prints the variant's name; Canary's parameterisation prints as `Canary` (the name result
/// files have always used for it).
impl std::fmt::Debug for RoutingAlgo {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RoutingAlgo::Minimal => f.write_str("Minimal"),
            RoutingAlgo::Ecmp => f.write_str("Ecmp"),
            RoutingAlgo::Adaptive => f.write_str("Adaptive"),
            _ if *self == RoutingAlgo::CANARY => f.write_str("Canary"),
            RoutingAlgo::ThresholdAdaptive(t) => f.debug_tuple("ThresholdAdaptive").field(t).finish(),
        }
    }
}

/// How an output port picks the next packet among those queued for it on one VC.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub enum Arbitration {
    /// One FIFO per output port and VC (output-queued switch): a flow's share of a link is
    /// proportional to what it offers. The default.
    Fifo,
    /// Round-robin over the input ports the queued packets came from (packets a switch
    /// creates itself count as one more input), FIFO within an input: the per-input fairness of
    /// an input-queued router with round-robin crossbar arbitration, as SST's merlin models.
    InputRoundRobin,
    /// Input-buffered routers only: least recently used (input, VC) first, merlin's default
    /// crossbar arbiter (`xbar_arb_lru`): each allocation walks a per-node priority list of
    /// every (input, VC); the ones granted move to its end, the most recently granted last.
    Lru,
}

/// How OS noise delays a host's packet (see [`NetConfig::noise_probability`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub enum NoiseMode {
    /// The host's NIC port stalls for the delay before the packet: everything behind it on
    /// that port waits too, and delays add up. (The engine's original model, the default.)
    #[default]
    PortStall,
    /// Only the chosen packet is delayed: it is set aside and re-injected once the delay has
    /// passed, while the port goes on sending the packets behind it (Canary §5.2.5: "it has a
    /// given probability (noise probability) of delaying the transmission by 1 microsecond").
    Packet,
}

/// The switch microarchitecture: where packets wait inside a forwarding node.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub enum RouterKind {
    /// Output-queued, store-and-forward: a packet is routed on arrival and waits in the queue of
    /// its output port and VC; the ingress buffer is only accounted (credits). The default.
    OutputQueued,
    /// Input-buffered with a crossbar, as SST merlin's `hr_router` (see [`crate::router`]):
    /// per-VC FIFOs at every input, a crossbar allocator matching input VC heads to outputs,
    /// small per-VC output buffers, credit flow control to the next hop. A head waiting for a
    /// busy output blocks the packets behind it (head-of-line blocking).
    InputBuffered(InputBuffered),
}

/// Parameters of [`RouterKind::InputBuffered`].
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct InputBuffered {
    /// Input buffer per input port and VC (what the upstream's credits count).
    pub input_buffer_bytes: u64,
    /// Output buffer per output port and VC (what the crossbar may fill).
    pub output_buffer_bytes: u64,
    /// Crossbar bandwidth over the node's fastest link bandwidth (>= 1.0; merlin requires
    /// `xbar_bw >= link_bw`).
    pub crossbar_speedup: f64,
}

/// Network-wide parameters (per-link bandwidth and latency live in the topology).
#[derive(Clone, Debug, Serialize)]
pub struct NetConfig {
    /// Largest packet on the wire, headers included.
    pub mtu_bytes: u32,
    /// Header bytes added to every packet of raw point-to-point traffic.
    pub header_bytes: u32,
    /// Pipeline latency of a forwarding node, paid by every packet it forwards.
    pub switch_latency_ps: u64,
    /// Buffer per port: ingress buffer per VC (credit and PFC modes) or output queue (drop-tail).
    pub buffer_bytes: u64,
    pub flow_control: FlowControl,
    /// Thresholds of [`FlowControl::Pfc`] (ignored otherwise).
    pub pfc: PfcConfig,
    /// Mark ECN when a packet joins an output queue holding more than this many bytes.
    pub ecn_threshold_bytes: Option<u64>,
    /// RED-style marking (DCQCN's switches): `ecn_threshold_bytes` is then Kmin, and a packet
    /// joining a queue of `q` bytes is marked with probability `pmax·(q − Kmin)/(Kmax − Kmin)`
    /// for Kmin < q <= Kmax, always above Kmax. `None`: every packet above the threshold.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ecn_red: Option<EcnRed>,
    pub routing: RoutingAlgo,
    /// How a message's packets break routing ties (`ecmp`'s pick, `adaptive`'s start among
    /// equally queued ports): `false`, all alike by the message's flow hash (per-flow paths);
    /// `true`, by a per-packet path number the sender draws (per-packet spraying, as htsim's
    /// NDP sources; see [`crate::routing`]).
    pub spray: bool,
    pub arbitration: Arbitration,
    /// Output-queued (default) or input-buffered switches.
    pub router: RouterKind,
    /// Probability that a packet is lost on any link traversal.
    pub loss_probability: f64,
    /// Probability that a protocol packet crossing a link is sent again by the link's sender:
    /// a copy (the workload's, [`crate::Workload::on_app_duplicate`]) joins the sender's
    /// output queue behind what is queued there and crosses the link after it.
    #[serde(skip_serializing_if = "is_zero")]
    pub duplicate_probability: f64,
    /// Probability that a protocol packet arriving over a link is held back for
    /// `reorder_delay_ps` before the node takes it (packets behind it overtake it).
    #[serde(skip_serializing_if = "is_zero")]
    pub reorder_probability: f64,
    #[serde(skip_serializing_if = "is_zero_u64")]
    pub reorder_delay_ps: u64,
    /// OS noise: probability that a host delays the injection of a packet...
    pub noise_probability: f64,
    /// ...by this long...
    pub noise_delay_ps: u64,
    /// ...in this way...
    pub noise_mode: NoiseMode,
    /// ...on these hosts (host indices; `None`: every host).
    pub noise_hosts: Option<Vec<u32>>,
}

impl Default for NetConfig {
    fn default() -> Self {
        NetConfig {
            mtu_bytes: 4096,
            header_bytes: 64,
            switch_latency_ps: 100_000,
            buffer_bytes: 64 * 1024,
            flow_control: FlowControl::Credit,
            pfc: PfcConfig::default(),
            ecn_threshold_bytes: None,
            ecn_red: None,
            routing: RoutingAlgo::Adaptive,
            spray: false,
            arbitration: Arbitration::Fifo,
            router: RouterKind::OutputQueued,
            loss_probability: 0.0,
            duplicate_probability: 0.0,
            reorder_probability: 0.0,
            reorder_delay_ps: 0,
            noise_probability: 0.0,
            noise_delay_ps: 0,
            noise_mode: NoiseMode::PortStall,
            noise_hosts: None,
        }
    }
}

/// RED marking above `ecn_threshold_bytes` (Kmin): see [`NetConfig::ecn_red`].
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct EcnRed {
    pub kmax_bytes: u64,
    /// Marking probability at Kmax (0 < pmax <= 1).
    pub pmax: f64,
}

impl EcnRed {
    /// The marking probability of a packet joining a queue of `queued` bytes (> `kmin`).
    pub fn probability(&self, queued: u64, kmin: u64) -> f64 {
        if queued > self.kmax_bytes {
            1.0
        } else {
            self.pmax * (queued - kmin) as f64 / (self.kmax_bytes - kmin) as f64
        }
    }
}

impl NetConfig {
    pub fn payload_per_packet(&self) -> u32 {
        self.mtu_bytes - self.header_bytes
    }
}

fn is_zero(x: &f64) -> bool {
    *x == 0.0
}

fn is_zero_u64(x: &u64) -> bool {
    *x == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Canary's "occupancy higher than 50% of its capacity" (`2q > B`, as the engine wrote it
    /// before the rule was parameterised) is exactly `q > AdaptiveThreshold::BufferPercent(50)`.
    #[test]
    fn half_the_buffer_in_bytes_is_the_same_comparison() {
        for b in [1u64, 2, 3, 4095, 4096, 32771, 65536, 262_147, (1 << 40) + 1] {
            let t = AdaptiveThreshold::BufferPercent(50).bytes(b);
            for q in [0, 1, (b / 2).saturating_sub(1), b / 2, b / 2 + 1, b - 1, b, b + 1, 3 * b] {
                assert_eq!(q * 2 > b, q > t, "buffer {b}, queue {q}");
            }
        }
        assert_eq!(AdaptiveThreshold::BufferPercent(100).bytes(u64::MAX), u64::MAX);
        assert_eq!(AdaptiveThreshold::BufferPercent(0).bytes(1000), 0);
        assert_eq!(AdaptiveThreshold::Bytes(5).bytes(1000), 5);
    }
}
