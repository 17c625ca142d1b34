//! Packet-level network model.
//!
//! # Model
//! - **Nodes and ports.** Every node of a [`reducelab_topo::Topology`] keeps its ports; a port is
//!   one direction of a full-duplex link (the *output* side) plus the *ingress* buffer of the
//!   reverse direction. Hosts may have several NIC ports and send on all at once.
//! - **Switching.** Output-queued, store-and-forward: a packet is routed when its last bit has
//!   arrived and the per-hop switch latency has passed, then waits in the FIFO of its output
//!   port and virtual channel (VC). Transit through a direct-network host (torus router) costs
//!   the same per-hop latency; delivery to the destination host costs none.
//!   With [`RouterKind::InputBuffered`] (`router` module) packets instead wait in per-VC input
//!   FIFOs, are routed at the head and cross a crossbar into small per-VC output buffers
//!   (head-of-line blocking, as SST merlin's `hr_router`).
//! - **Flow control.** `Credit` (default, lossless, InfiniBand style): the switch buffer is
//!   accounted per ingress port and VC (`buffer_bytes` each); a sender transmits only with
//!   credits for the downstream ingress buffer; credits return, one link latency later, when
//!   the packet leaves the downstream node. `Pfc` (lossless, RoCE style, `pfc` module): the
//!   same per ingress port and VC accounting, but senders are stopped by PAUSE frames when
//!   an ingress passes its XOFF threshold and restarted at XON; the headroom above XOFF
//!   absorbs what is in flight. `DropTail`: the output queue holds at most
//!   `buffer_bytes`, arrivals beyond that are dropped. In every mode packets are marked ECN
//!   when they join a queue already holding more than the threshold.
//! - **Deadlock freedom** in the lossless modes comes from VCs chosen per topology and routing:
//!   fat trees/star need one (up*/down*), tori use two dateline VCs with dimension order, and
//!   Duato's scheme (adaptive VC + dateline escape VCs) with adaptive routing (credits only;
//!   refused with PFC); HyperX with
//!   dimension order needs one; every other case uses one VC per hop index.
//!   A run that still cannot progress ends with [`RunEnd::Stalled`] and a reason.
//! - **Hosts** inject packets lazily from their active messages, round-robin per port, so
//!   sources never fill the network beyond what credits allow.
//!
//! # Determinism
//! All state lives in arenas indexed by typed ids; events are small `Copy` values in the
//! kernel's total-order queue; randomness (loss, noise, ECMP salt) comes from streams forked
//! from the scenario seed. Same topology, config, workload and seed → identical results.

mod config;
mod credits;
mod endpoint;
mod faults;
mod ids;
mod network;
mod noise;
mod packet;
mod pfc;
mod ports;
mod protocol;
mod queues;
mod router;
mod routing;
mod transport;
mod trimming;
mod wires;

pub use config::{
    AdaptiveThreshold, Arbitration, EcnRed, FlowControl, InputBuffered, NetConfig, NoiseMode, PfcConfig, RouterKind,
    RoutingAlgo,
};
pub use endpoint::EndpointConfig;
pub use faults::Fault;
/// The name workloads know a packet in their custody by.
pub use ids::PktId as PacketId;
pub use ids::{PktId, PortId};
pub use network::{Foreground, Message, MsgId, Network, NetworkStats, RunEnd, RunLimits, WorkDone, Workload};
pub use packet::fingerprint;
pub use pfc::{
    pfc_min_headroom_bytes, pfc_supports, pfc_thresholds, PfcPortStats, PfcStats, PfcThresholds, PFC_FRAME_BYTES,
};
pub use ports::PortStats;
pub use protocol::{AppDst, AppOut, AppPacket, ProgramLimits, APP_QUEUE_LOW};
pub use routing::VcPolicy;
pub use transport::{
    ControlKind, DcqcnConfig, DctcpConfig, MessageTransport, NdpConfig, TransportConfig, TransportEvent, TransportStats,
};
pub use trimming::HEADER_TURNS;
