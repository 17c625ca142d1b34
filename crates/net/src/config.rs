use serde::Serialize;

/// Link-level flow control.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub enum FlowControl {
    /// Lossless credit-based flow control (the default).
    Credit,
    /// Drop-tail output queues of `buffer_bytes`.
    DropTail,
}

/// How a forwarding node picks among the minimal next hops.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub enum RoutingAlgo {
    /// Deterministic: dimension order on tori/HyperX, destination-mod-k up/down elsewhere.
    Minimal,
    /// Per-flow hash over the minimal next hops.
    Ecmp,
    /// Per packet, the minimal next hop with the fewest queued bytes. On tori this is
    /// minimal adaptive routing with Duato escape channels.
    Adaptive,
    /// Canary §5.2: the default port (by destination); if its queue holds more than half of
    /// its buffer, the minimal port with the fewest queued bytes.
    Canary,
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
    /// Buffer per port: ingress buffer per VC (credit mode) or output queue (drop-tail).
    pub buffer_bytes: u64,
    pub flow_control: FlowControl,
    /// Mark ECN when a packet joins an output queue holding more than this many bytes.
    pub ecn_threshold_bytes: Option<u64>,
    pub routing: RoutingAlgo,
    pub arbitration: Arbitration,
    /// Probability that a packet is lost on any link traversal.
    pub loss_probability: f64,
    /// OS noise: probability that a host delays the injection of a packet...
    pub noise_probability: f64,
    /// ...by this long.
    pub noise_delay_ps: u64,
}

impl Default for NetConfig {
    fn default() -> Self {
        NetConfig {
            mtu_bytes: 4096,
            header_bytes: 64,
            switch_latency_ps: 100_000,
            buffer_bytes: 64 * 1024,
            flow_control: FlowControl::Credit,
            ecn_threshold_bytes: None,
            routing: RoutingAlgo::Adaptive,
            arbitration: Arbitration::Fifo,
            loss_probability: 0.0,
            noise_probability: 0.0,
            noise_delay_ps: 0,
        }
    }
}

impl NetConfig {
    pub fn payload_per_packet(&self) -> u32 {
        self.mtu_bytes - self.header_bytes
    }
}
