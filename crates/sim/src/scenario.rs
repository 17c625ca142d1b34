//! The scenario file format (TOML). See `docs/scenario-format.md`.
//!
//! Parsing is strict: unknown keys, wrong types and impossible values are errors that name the
//! field by its dotted path (`network.routing`, `traffic[1].bytes`) and say why.

use crate::ScenarioError;
use reducelab_des::{SimDuration, SimTime};
use reducelab_net::{Fault, FlowControl, NetConfig, RoutingAlgo};
use reducelab_topo::{self as topo, LinkParams, Shape, Topology};
use serde::Deserialize;
use std::sync::Arc;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ScenarioFile {
    pub name: String,
    #[serde(default)]
    pub description: String,
    #[serde(default = "default_seed")]
    pub seed: u64,
    /// A `[topology]` table, or a bare spec string (`topology = "torus:8x8"`).
    #[serde(deserialize_with = "topology_table_or_shape")]
    pub topology: TopologySpec,
    #[serde(default)]
    pub network: NetworkSpec,
    #[serde(default)]
    pub noise: NoiseSpec,
    #[serde(default)]
    pub traffic: Vec<TrafficSpec>,
    #[serde(default)]
    pub faults: Vec<FaultSpec>,
    #[serde(default)]
    pub run: RunSpec,
    /// Switch resources for in-network aggregation (`ina_allreduce` traffic).
    #[serde(default)]
    pub ina: InaSection,
    /// Per-host endpoint costs (default: none).
    #[serde(default)]
    pub endpoint: EndpointSpec,
    /// End-to-end transport of message traffic (default: none).
    #[serde(default)]
    pub transport: TransportSpec,
}

/// `[transport]`: the end-to-end transport of message traffic (docs/scenario-format.md).
#[derive(Debug, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct TransportSpec {
    #[serde(default)]
    pub kind: TransportKindSpec,
    pub initial_window_packets: Option<u32>,
    /// NDP only.
    pub data_queue_packets: Option<u32>,
    /// NDP only.
    pub rto_us: Option<f64>,
    /// DCTCP and DCQCN: α's gain.
    pub g: Option<f64>,
    /// DCTCP only: the retransmission timeout's lower bound.
    pub min_rto_us: Option<f64>,
    /// DCQCN only (K, T, B, F, R_AI, R_HAI, the minimum rate, N).
    pub alpha_interval_us: Option<f64>,
    pub increase_interval_us: Option<f64>,
    pub byte_counter_bytes: Option<u64>,
    pub fast_recovery_steps: Option<u32>,
    pub rai_gbps: Option<f64>,
    pub rhai_gbps: Option<f64>,
    pub min_rate_gbps: Option<f64>,
    pub cnp_interval_us: Option<f64>,
}

/// `transport.kind`.
#[derive(Debug, Deserialize, Clone, Copy, PartialEq, Eq, Default)]
#[serde(rename_all = "snake_case")]
pub enum TransportKindSpec {
    /// No transport: line-rate injection, nothing retransmitted (today's engine).
    #[default]
    None,
    Ndp,
    Dctcp,
    Dcqcn,
}

impl TransportKindSpec {
    fn name(self) -> &'static str {
        match self {
            TransportKindSpec::None => "none",
            TransportKindSpec::Ndp => "ndp",
            TransportKindSpec::Dctcp => "dctcp",
            TransportKindSpec::Dcqcn => "dcqcn",
        }
    }
}

impl TransportSpec {
    /// The run's transport, of kind `kind` (`[transport].kind`, or the one a `[[traffic]]`
    /// entry names), with `[transport]`'s parameters.
    fn resolve(
        &self,
        kind: TransportKindSpec,
        nw: &NetworkSpec,
        endpoint: &EndpointSpec,
    ) -> Result<reducelab_net::TransportConfig, ScenarioError> {
        use TransportKindSpec::{Dcqcn, Dctcp, Ndp};
        for (key, set, kinds) in [
            ("initial_window_packets", self.initial_window_packets.is_some(), &[Ndp, Dctcp][..]),
            ("data_queue_packets", self.data_queue_packets.is_some(), &[Ndp][..]),
            ("rto_us", self.rto_us.is_some(), &[Ndp][..]),
            ("g", self.g.is_some(), &[Dctcp, Dcqcn][..]),
            ("min_rto_us", self.min_rto_us.is_some(), &[Dctcp][..]),
            ("alpha_interval_us", self.alpha_interval_us.is_some(), &[Dcqcn][..]),
            ("increase_interval_us", self.increase_interval_us.is_some(), &[Dcqcn][..]),
            ("byte_counter_bytes", self.byte_counter_bytes.is_some(), &[Dcqcn][..]),
            ("fast_recovery_steps", self.fast_recovery_steps.is_some(), &[Dcqcn][..]),
            ("rai_gbps", self.rai_gbps.is_some(), &[Dcqcn][..]),
            ("rhai_gbps", self.rhai_gbps.is_some(), &[Dcqcn][..]),
            ("min_rate_gbps", self.min_rate_gbps.is_some(), &[Dcqcn][..]),
            ("cnp_interval_us", self.cnp_interval_us.is_some(), &[Dcqcn][..]),
        ] {
            if set && !kinds.contains(&kind) {
                let names: Vec<String> = kinds.iter().map(|k| format!("\"{}\"", k.name())).collect();
                return e(
                    format!("transport.{key}"),
                    format!("applies only with kind = {} (kind is \"{}\")", names.join(" or "), kind.name()),
                );
            }
        }
        match kind {
            TransportKindSpec::None => return Ok(reducelab_net::TransportConfig::None),
            TransportKindSpec::Dctcp => return self.resolve_dctcp(nw, endpoint),
            TransportKindSpec::Dcqcn => return self.resolve_dcqcn(nw, endpoint),
            TransportKindSpec::Ndp => {}
        }
        if nw.flow_control != FlowControlSpec::DropTail {
            return e("transport.kind", "\"ndp\" needs network.flow_control = \"drop_tail\" (NDP switches trim the packets they cannot queue; credit flow control never lets a queue overflow)");
        }
        if nw.arbitration != ArbitrationSpec::Fifo {
            return e(
                "transport.kind",
                "\"ndp\" needs network.arbitration = \"fifo\" (trimming cuts the packet at the tail of a port's FIFO)",
            );
        }
        if endpoint.rendezvous_threshold_bytes.is_some() {
            return e("transport.kind", "\"ndp\" does not combine with endpoint.rendezvous_threshold_bytes (NDP's receiver already grants the data by pulls)");
        }
        let d = reducelab_net::NdpConfig::default();
        let initial_window_packets = self.initial_window_packets.unwrap_or(d.initial_window_packets);
        if initial_window_packets == 0 {
            return e("transport.initial_window_packets", "must be >= 1");
        }
        let data_queue_packets = self.data_queue_packets.unwrap_or(d.data_queue_packets);
        if data_queue_packets == 0 {
            return e("transport.data_queue_packets", "must be >= 1");
        }
        let rto_ps = match self.rto_us {
            Some(us) => ns_to_ps("transport.rto_us", pos_f64("transport.rto_us", us)? * 1000.0)?,
            None => d.rto_ps,
        };
        if rto_ps == 0 {
            return e("transport.rto_us", "must be at least 1 ps");
        }
        Ok(reducelab_net::TransportConfig::Ndp(reducelab_net::NdpConfig {
            initial_window_packets,
            data_queue_packets,
            rto_ps,
        }))
    }

    fn resolve_dcqcn(
        &self,
        nw: &NetworkSpec,
        endpoint: &EndpointSpec,
    ) -> Result<reducelab_net::TransportConfig, ScenarioError> {
        // (A lossless flow control other than credits, e.g. PFC, would pass this test too.)
        if nw.flow_control == FlowControlSpec::DropTail {
            return e(
                "transport.kind",
                "\"dcqcn\" needs a lossless network (network.flow_control = \"credit\"): DCQCN does not retransmit",
            );
        }
        if nw.loss_probability > 0.0 {
            return e("transport.kind", "\"dcqcn\" needs network.loss_probability = 0: it sends every packet once (it is for lossless networks)");
        }
        if nw.ecn_threshold_bytes.is_none() {
            return e("transport.kind", "\"dcqcn\" needs network.ecn_threshold_bytes (its receivers turn ECN marks into CNPs; add network.ecn_kmax_bytes and ecn_pmax for the paper's RED marking)");
        }
        if endpoint.rendezvous_threshold_bytes.is_some() {
            return e("transport.kind", "\"dcqcn\" does not combine with endpoint.rendezvous_threshold_bytes");
        }
        let d = reducelab_net::DcqcnConfig::default();
        let g = self.g.unwrap_or(d.g);
        if !(g > 0.0 && g <= 1.0) {
            return e("transport.g", format!("must be > 0 and <= 1 (the paper's 1/256 = 0.00390625), got {g}"));
        }
        let us = |field: &str, v: Option<f64>, default: u64| -> Result<u64, ScenarioError> {
            match v {
                None => Ok(default),
                Some(us) => {
                    let ps = ns_to_ps(field, pos_f64(field, us)? * 1000.0)?;
                    if ps == 0 {
                        return e(field, "must be at least 1 ps");
                    }
                    Ok(ps)
                }
            }
        };
        let rate = |field: &str, v: Option<f64>, default: u64| -> Result<u64, ScenarioError> {
            match v {
                None => Ok(default),
                Some(g) => {
                    let bps = gbps_to_bps(field, g)?;
                    if bps == 0 {
                        return e(field, "must be at least 1 b/s");
                    }
                    Ok(bps)
                }
            }
        };
        let byte_counter_bytes = self.byte_counter_bytes.unwrap_or(d.byte_counter_bytes);
        if byte_counter_bytes == 0 {
            return e("transport.byte_counter_bytes", "must be >= 1");
        }
        Ok(reducelab_net::TransportConfig::Dcqcn(reducelab_net::DcqcnConfig {
            g,
            alpha_interval_ps: us("transport.alpha_interval_us", self.alpha_interval_us, d.alpha_interval_ps)?,
            increase_interval_ps: us(
                "transport.increase_interval_us",
                self.increase_interval_us,
                d.increase_interval_ps,
            )?,
            byte_counter_bytes,
            fast_recovery_steps: self.fast_recovery_steps.unwrap_or(d.fast_recovery_steps),
            rai_bps: rate("transport.rai_gbps", self.rai_gbps, d.rai_bps)?,
            rhai_bps: rate("transport.rhai_gbps", self.rhai_gbps, d.rhai_bps)?,
            min_rate_bps: rate("transport.min_rate_gbps", self.min_rate_gbps, d.min_rate_bps)?,
            cnp_interval_ps: us("transport.cnp_interval_us", self.cnp_interval_us, d.cnp_interval_ps)?,
        }))
    }

    fn resolve_dctcp(
        &self,
        nw: &NetworkSpec,
        endpoint: &EndpointSpec,
    ) -> Result<reducelab_net::TransportConfig, ScenarioError> {
        if nw.ecn_threshold_bytes.is_none() {
            return e(
                "transport.kind",
                "\"dctcp\" needs network.ecn_threshold_bytes (DCTCP's window follows the switches' ECN marks)",
            );
        }
        if endpoint.rendezvous_threshold_bytes.is_some() {
            return e("transport.kind", "\"dctcp\" does not combine with endpoint.rendezvous_threshold_bytes (DCTCP's window already limits what is in flight)");
        }
        let d = reducelab_net::DctcpConfig::default();
        let initial_window_packets = self.initial_window_packets.unwrap_or(d.initial_window_packets);
        if initial_window_packets == 0 {
            return e("transport.initial_window_packets", "must be >= 1");
        }
        let g = self.g.unwrap_or(d.g);
        if !(g > 0.0 && g <= 1.0) {
            return e("transport.g", format!("must be > 0 and <= 1 (the paper's 1/16 = 0.0625), got {g}"));
        }
        let min_rto_ps = match self.min_rto_us {
            Some(us) => ns_to_ps("transport.min_rto_us", pos_f64("transport.min_rto_us", us)? * 1000.0)?,
            None => d.min_rto_ps,
        };
        if min_rto_ps == 0 {
            return e("transport.min_rto_us", "must be at least 1 ps");
        }
        Ok(reducelab_net::TransportConfig::Dctcp(reducelab_net::DctcpConfig { initial_window_packets, g, min_rto_ps }))
    }
}

/// `[endpoint]`: per-message host overheads, rendezvous and the injection ceiling
/// (docs/scenario-format.md). Every key defaults to off.
#[derive(Debug, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct EndpointSpec {
    #[serde(default)]
    pub send_overhead_ns: f64,
    #[serde(default)]
    pub send_latency_ns: f64,
    #[serde(default)]
    pub recv_overhead_ns: f64,
    #[serde(default)]
    pub recv_latency_ns: f64,
    pub rendezvous_threshold_bytes: Option<u64>,
    pub injection_gbps: Option<f64>,
}

impl EndpointSpec {
    fn resolve(&self) -> Result<reducelab_net::EndpointConfig, ScenarioError> {
        Ok(reducelab_net::EndpointConfig {
            send_overhead_ps: ns_to_ps("endpoint.send_overhead_ns", self.send_overhead_ns)?,
            send_latency_ps: ns_to_ps("endpoint.send_latency_ns", self.send_latency_ns)?,
            recv_overhead_ps: ns_to_ps("endpoint.recv_overhead_ns", self.recv_overhead_ns)?,
            recv_latency_ps: ns_to_ps("endpoint.recv_latency_ns", self.recv_latency_ns)?,
            rendezvous_threshold_bytes: self.rendezvous_threshold_bytes,
            injection_bps: match self.injection_gbps {
                Some(g) => Some(gbps_to_bps("endpoint.injection_gbps", g)?),
                None => None,
            },
        })
    }
}

/// `[ina]`: programmable-switch resources and Canary switch timers (docs/scenario-format.md).
#[derive(Debug, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct InaSection {
    pub table_size: Option<u32>,
    pub slots_per_tenant: Option<u32>,
    pub packets_per_second: Option<f64>,
    pub latency_ns: Option<f64>,
    pub timeout_ns: Option<f64>,
    pub reclaim_us: Option<f64>,
    pub sample_ns: Option<f64>,
    pub max_elements_per_packet: Option<u16>,
    /// Verification mode: every protocol header travels through its wire frame and back.
    pub wire_check: Option<bool>,
}

fn default_seed() -> u64 {
    1
}

/// `topology` is a table, or a bare string: the same as a table with only `shape` (and the
/// default link parameters).
fn topology_table_or_shape<'de, D: serde::Deserializer<'de>>(d: D) -> Result<TopologySpec, D::Error> {
    struct V;
    impl<'de> serde::de::Visitor<'de> for V {
        type Value = TopologySpec;
        fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
            f.write_str("a [topology] table or a topology spec string such as \"torus:8x8\"")
        }
        fn visit_str<E: serde::de::Error>(self, s: &str) -> Result<TopologySpec, E> {
            Ok(TopologySpec { shape: Some(s.to_string()), ..TopologySpec::default() })
        }
        fn visit_map<A: serde::de::MapAccess<'de>>(self, map: A) -> Result<TopologySpec, A::Error> {
            TopologySpec::deserialize(serde::de::value::MapAccessDeserializer::new(map))
        }
    }
    d.deserialize_any(V)
}

#[derive(Debug, Deserialize, Clone, Copy, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum TopologyKind {
    Star,
    #[serde(rename = "fat_tree_2")]
    FatTree2,
    #[serde(rename = "fat_tree_3")]
    FatTree3,
    Torus,
    Hyperx,
    Hammingmesh,
    Dragonfly,
}

/// All topology parameters; which are required depends on `kind`. `shape` (a
/// [`reducelab_sched::TopologySpec`] string such as `torus:64x64`) replaces `kind` and its
/// size parameters.
#[derive(Debug, Deserialize, Default, Clone)]
#[serde(deny_unknown_fields)]
pub struct TopologySpec {
    pub shape: Option<String>,
    pub kind: Option<TopologyKind>,
    pub bandwidth_gbps: Option<f64>,
    pub latency_ns: Option<f64>,
    pub host_bandwidth_gbps: Option<f64>,
    pub host_latency_ns: Option<f64>,
    // star
    pub hosts: Option<u32>,
    // fat_tree_2
    pub leaves: Option<u32>,
    pub hosts_per_leaf: Option<u32>,
    pub spines: Option<u32>,
    pub links_per_spine: Option<u32>,
    pub radix: Option<u32>,
    // fat_tree_3
    pub k: Option<u32>,
    pub hosts_per_edge: Option<u32>,
    // torus / hyperx
    pub dims: Option<Vec<u32>>,
    // hammingmesh
    pub board: Option<Vec<u32>>,
    pub grid: Option<Vec<u32>>,
    pub board_latency_ns: Option<f64>,
    /// Bandwidth of the on-board (mesh) links (default: `bandwidth_gbps`).
    pub board_bandwidth_gbps: Option<f64>,
    // dragonfly
    pub groups: Option<u32>,
    pub routers_per_group: Option<u32>,
    pub hosts_per_router: Option<u32>,
    pub global_per_router: Option<u32>,
    pub global_latency_ns: Option<f64>,
}

#[derive(Debug, Deserialize, Clone, Copy, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum FlowControlSpec {
    Credit,
    DropTail,
    Pfc,
}

#[derive(Debug, Deserialize, Clone, Copy, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum RoutingSpec {
    Minimal,
    Ecmp,
    Adaptive,
    Canary,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NetworkSpec {
    #[serde(default = "d_mtu")]
    pub mtu_bytes: u32,
    #[serde(default = "d_header")]
    pub header_bytes: u32,
    #[serde(default = "d_switch_latency")]
    pub switch_latency_ns: f64,
    #[serde(default = "d_buffer")]
    pub buffer_bytes: BufferSpec,
    #[serde(default = "d_fc")]
    pub flow_control: FlowControlSpec,
    /// `flow_control = "pfc"` only: PAUSE above this many bytes per ingress port and VC
    /// (default: `buffer_bytes` minus the headroom).
    pub pfc_xoff_bytes: Option<u64>,
    /// `flow_control = "pfc"` only: RESUME at this many bytes or fewer (default: XOFF - 2 MTU).
    pub pfc_xon_bytes: Option<u64>,
    /// `flow_control = "pfc"` only: buffer above XOFF for what arrives while the PAUSE travels
    /// (default and minimum: from each link's bandwidth-delay product and the MTU).
    pub pfc_headroom_bytes: Option<u64>,
    pub ecn_threshold_bytes: Option<u64>,
    /// RED marking (DCQCN's switches): `ecn_threshold_bytes` is Kmin, this Kmax.
    pub ecn_kmax_bytes: Option<u64>,
    /// RED marking probability at Kmax (default 1).
    pub ecn_pmax: Option<f64>,
    #[serde(default = "d_routing")]
    pub routing: RoutingSpec,
    /// `routing = "canary"` only: leave the default port above this many queued bytes instead
    /// of Canary's 50% of `buffer_bytes`.
    pub adaptive_threshold_bytes: Option<u64>,
    /// How a message's packets break routing ties: `"flow"` (all alike, by the message's flow
    /// hash) or `"packet"` (a path number per packet, cycled by its sender; see
    /// `reducelab_net::routing`).
    #[serde(default)]
    pub spray: SpraySpec,
    #[serde(default)]
    pub loss_probability: f64,
    #[serde(default)]
    pub arbitration: ArbitrationSpec,
    /// Switch microarchitecture; the three keys after it apply to `"input_buffered"` only.
    #[serde(default)]
    pub router: RouterSpec,
    pub input_buffer_bytes: Option<u64>,
    pub output_buffer_bytes: Option<u64>,
    pub crossbar_speedup: Option<f64>,
}

/// `network.spray`.
#[derive(Debug, Deserialize, Clone, Copy, PartialEq, Eq, Default)]
#[serde(rename_all = "snake_case")]
pub enum SpraySpec {
    #[default]
    Flow,
    Packet,
}

/// `network.router`.
#[derive(Debug, Deserialize, Clone, Copy, PartialEq, Eq, Default)]
#[serde(rename_all = "snake_case")]
pub enum RouterSpec {
    #[default]
    OutputQueued,
    InputBuffered,
}

#[derive(Debug, Deserialize, Clone, Copy, PartialEq, Eq, Default)]
#[serde(rename_all = "snake_case")]
pub enum ArbitrationSpec {
    #[default]
    Fifo,
    InputRoundRobin,
    Lru,
}
fn d_mtu() -> u32 {
    4096
}
fn d_header() -> u32 {
    64
}
fn d_switch_latency() -> f64 {
    100.0
}
fn d_buffer() -> BufferSpec {
    BufferSpec::Bytes(64 * 1024)
}

/// `network.buffer_bytes`: a size, or `"line_rate"` ([`line_rate_buffer_bytes`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BufferSpec {
    Bytes(u64),
    LineRate,
}

impl<'de> Deserialize<'de> for BufferSpec {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> serde::de::Visitor<'de> for V {
            type Value = BufferSpec;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a number of bytes or \"line_rate\"")
            }
            fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<BufferSpec, E> {
                Ok(BufferSpec::Bytes(v))
            }
            fn visit_i64<E: serde::de::Error>(self, v: i64) -> Result<BufferSpec, E> {
                u64::try_from(v)
                    .map(BufferSpec::Bytes)
                    .map_err(|_| E::custom(format!("must be a non-negative number of bytes or \"line_rate\", got {v}")))
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<BufferSpec, E> {
                match v {
                    "line_rate" => Ok(BufferSpec::LineRate),
                    _ => Err(E::custom(format!("must be a number of bytes or \"line_rate\", got \"{v}\""))),
                }
            }
        }
        d.deserialize_any(V)
    }
}

/// `network.router` and its input-buffered keys (each defaults to `buffer_bytes`, the speedup
/// to 1.0); the keys without `router = "input_buffered"` are an error naming them.
fn resolve_router(nw: &NetworkSpec, buffer_bytes: u64) -> Result<reducelab_net::RouterKind, ScenarioError> {
    let keys = [
        ("network.input_buffer_bytes", nw.input_buffer_bytes.is_some()),
        ("network.output_buffer_bytes", nw.output_buffer_bytes.is_some()),
        ("network.crossbar_speedup", nw.crossbar_speedup.is_some()),
    ];
    if nw.router == RouterSpec::OutputQueued {
        if let Some((k, _)) = keys.iter().find(|(_, set)| *set) {
            return e(*k, "applies only with network.router = \"input_buffered\"");
        }
        return Ok(reducelab_net::RouterKind::OutputQueued);
    }
    if nw.flow_control != FlowControlSpec::Credit {
        return e("network.router", "\"input_buffered\" needs flow_control = \"credit\" (its buffers are lossless)");
    }
    let mtu = nw.mtu_bytes as u64;
    let input_buffer_bytes = nw.input_buffer_bytes.unwrap_or(buffer_bytes);
    let output_buffer_bytes = nw.output_buffer_bytes.unwrap_or(buffer_bytes);
    for (k, v) in
        [("network.input_buffer_bytes", input_buffer_bytes), ("network.output_buffer_bytes", output_buffer_bytes)]
    {
        if v < mtu {
            return e(k, format!("must hold at least one MTU ({mtu} bytes), got {v}"));
        }
    }
    let crossbar_speedup = nw.crossbar_speedup.unwrap_or(1.0);
    if !(crossbar_speedup.is_finite() && (1.0..=1024.0).contains(&crossbar_speedup)) {
        return e(
            "network.crossbar_speedup",
            format!("must be within [1, 1024] (crossbar bandwidth over link bandwidth), got {crossbar_speedup}"),
        );
    }
    Ok(reducelab_net::RouterKind::InputBuffered(reducelab_net::InputBuffered {
        input_buffer_bytes,
        output_buffer_bytes,
        crossbar_speedup,
    }))
}

/// Ingress buffer per port and VC that sustains line rate on a link of `bandwidth_gbps` and
/// `latency_ns` with `switch_latency_ns` of pipeline latency per forwarding node: twice the
/// bandwidth-delay product of one hop's credit loop (the packet is serialised, crosses the
/// link, pays the pipeline latency, is serialised out again, and its credit crosses the link
/// back), at least 256 KiB, rounded up to whole packets (256 KiB at <= 2 Tb/s with the Swing
/// paper's latencies; about 410 KiB at 3.2 Tb/s, where 256 KiB would be only ~1.25x the loop).
pub fn line_rate_buffer_bytes(bandwidth_gbps: f64, latency_ns: f64, switch_latency_ns: f64, mtu_bytes: u32) -> u64 {
    let ser = mtu_bytes as f64 * 8.0 / (bandwidth_gbps * 1e9) * 1e12;
    let credit_loop_ps = 2.0 * latency_ns * 1e3 + switch_latency_ns * 1e3 + 2.0 * ser;
    let bdp = credit_loop_ps * 1e-12 * bandwidth_gbps * 1e9 / 8.0;
    let want = (2.0 * bdp).ceil() as u64;
    let mtu = mtu_bytes as u64;
    want.max(256 << 10).div_ceil(mtu) * mtu
}
fn d_fc() -> FlowControlSpec {
    FlowControlSpec::Credit
}
fn d_routing() -> RoutingSpec {
    RoutingSpec::Adaptive
}
impl Default for NetworkSpec {
    fn default() -> Self {
        NetworkSpec {
            mtu_bytes: d_mtu(),
            header_bytes: d_header(),
            switch_latency_ns: d_switch_latency(),
            buffer_bytes: d_buffer(),
            flow_control: d_fc(),
            pfc_xoff_bytes: None,
            pfc_xon_bytes: None,
            pfc_headroom_bytes: None,
            ecn_threshold_bytes: None,
            ecn_kmax_bytes: None,
            ecn_pmax: None,
            routing: d_routing(),
            adaptive_threshold_bytes: None,
            spray: SpraySpec::Flow,
            loss_probability: 0.0,
            arbitration: ArbitrationSpec::Fifo,
            router: RouterSpec::OutputQueued,
            input_buffer_bytes: None,
            output_buffer_bytes: None,
            crossbar_speedup: None,
        }
    }
}

#[derive(Debug, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct NoiseSpec {
    #[serde(default)]
    pub probability: f64,
    #[serde(default)]
    pub delay_ns: f64,
    /// How a drawn packet is delayed (default: the port stalls).
    #[serde(default)]
    pub mode: NoiseModeSpec,
    /// `"all"` (default), `"foreground"` (the hosts of non-background traffic) or host indices.
    pub hosts: Option<HostsSpec>,
}

/// `noise.mode`.
#[derive(Debug, Deserialize, Clone, Copy, PartialEq, Eq, Default)]
#[serde(rename_all = "snake_case")]
pub enum NoiseModeSpec {
    #[default]
    PortStall,
    Packet,
}

#[derive(Debug, Deserialize, Clone, Copy, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum TrafficKind {
    /// Explicit list of messages.
    Messages,
    /// Every host of the set sends `bytes` to a distinct host of the set (random
    /// permutation without fixed points).
    Permutation,
    /// `senders` all send `bytes` to `receiver`.
    Incast,
    /// Background: every host of the set keeps `inflight` messages of `bytes` going, each to
    /// a new uniformly random peer of the set, until the foreground is done.
    RandomUniform,
    /// Background: rounds (or epochs) of random permutations without fixed points of the set
    /// (Canary §5.2: "each host sends a message to a randomly selected host and receives a
    /// message from another"), `inflight` messages per host, optionally paced to `rate_gbps`.
    RandomPermutation,
    /// A host-based collective (allreduce, reduce-scatter, allgather) run from a schedule of
    /// `crates/sched`: rank `r` on `hosts[r]`.
    Collective,
    /// An in-network allreduce (Canary or static trees) run by switch programs.
    InaAllreduce,
    /// Training jobs on a shared switch memory (SwitchML, ATP, DSA): `crate::training_run`.
    Training,
}

/// One traffic generator; which fields apply depends on `kind`.
#[derive(Debug, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct TrafficSpec {
    pub kind: Option<TrafficKind>,
    pub hosts: Option<HostsSpec>,
    pub bytes: Option<u64>,
    pub start_ns: Option<f64>,
    pub receiver: Option<u32>,
    pub senders: Option<Vec<u32>>,
    pub inflight: Option<u32>,
    /// `[[src, dst, bytes, start_ns], ...]` for `kind = "messages"`.
    pub list: Option<Vec<[u64; 4]>>,
    /// For `kind = "collective"`: the algorithm (see `reducelab model --list`).
    pub algorithm: Option<String>,
    /// For `kind = "collective"`: `allreduce` (default), `reduce_scatter` or `allgather`.
    pub collective: Option<String>,
    /// For `kind = "collective"`: the torus shape the ranks are laid out on (default: the
    /// topology's dimensions when every host takes part, else one dimension).
    pub dims: Option<Vec<u32>>,
    /// For `kind = "ina_allreduce"`: a protocol of the registry (`canary`, `static_trees`, `flare`, ...).
    pub protocol: Option<String>,
    /// Static trees: how many (blocks round-robin over them).
    pub trees: Option<u16>,
    /// Static trees: root switch node of each tree (default: random top-level switches).
    pub roots: Option<Vec<u32>>,
    /// Static trees: blocks a host keeps outstanding.
    pub window: Option<u32>,
    /// 32-bit elements per packet.
    pub elements_per_packet: Option<u16>,
    /// Canary: hosts' per-packet retransmission timeout.
    pub retransmit_timeout_us: Option<f64>,
    /// Canary: failed attempts of a block before the host-based fallback.
    pub max_failures: Option<u8>,
    /// Carry and check real element values (default: when hosts × bytes ≤ 64 MiB).
    pub values: Option<bool>,
    /// Sparse protocols (`flare_sparse`, `sparcml`): one value per bucket of this many elements.
    pub bucket_elements: Option<u32>,
    /// Sparse protocols: probability that a rank's value of a bucket is at the bucket's shared index.
    pub index_overlap: Option<f64>,
    /// `flare_sparse`: hash-table slots per block at the non-root switches.
    pub hash_slots: Option<u32>,
    /// For `kind = "random_permutation"`: `message` (default) or `epoch`.
    pub redraw: Option<String>,
    /// For `kind = "random_permutation"` with `redraw = "epoch"`: the epoch's length.
    pub epoch_ns: Option<f64>,
    /// For `kind = "random_permutation"`: offered rate per host (absent: window-limited).
    pub rate_gbps: Option<f64>,
    /// This entry's messages use this transport instead of `[transport].kind` (its
    /// parameters stay in `[transport]`).
    pub transport: Option<TransportKindSpec>,
    /// For `kind = "training"` (`crate::training_run::resolve`): jobs, workers per job, DNN
    /// of each job (cycled), DSA's preemption rule, switch memory, start and jitter bounds,
    /// initial window, timeout floor, a parameter-server restart.
    pub jobs: Option<u32>,
    pub workers: Option<u32>,
    pub models: Option<Vec<String>>,
    pub preemption: Option<String>,
    pub switch_memory_bytes: Option<u64>,
    pub start_max_us: Option<f64>,
    pub jitter_max_us: Option<f64>,
    pub window_bytes: Option<u64>,
    pub min_rto_us: Option<f64>,
    pub ps_restart_us: Option<f64>,
    pub model_scale: Option<f64>,
    /// `"root"` (one switch per job) or `"tree"` (every switch of the job's two-level tree).
    pub aggregation: Option<String>,
}

/// `"all"` or an explicit list of host indices.
#[derive(Debug, Clone)]
pub enum HostsSpec {
    Keyword(String),
    List(Vec<u32>),
}

// Hand-written rather than `#[serde(untagged)]`: an untagged enum buffers the value and loses
// the error path, so `hosts = [0, -1]` said only "data did not match any variant" at
// `traffic[0].hosts` instead of naming `traffic[0].hosts[1]`.
impl<'de> Deserialize<'de> for HostsSpec {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> serde::de::Visitor<'de> for V {
            type Value = HostsSpec;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("\"all\" or a list of host indices")
            }
            fn visit_str<E: serde::de::Error>(self, s: &str) -> Result<HostsSpec, E> {
                Ok(HostsSpec::Keyword(s.to_string()))
            }
            fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<HostsSpec, A::Error> {
                let mut v = Vec::new();
                while let Some(h) = seq.next_element::<u32>()? {
                    v.push(h);
                }
                Ok(HostsSpec::List(v))
            }
        }
        d.deserialize_any(V)
    }
}

#[derive(Debug, Deserialize, Clone, Copy, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum FaultKind {
    Link,
    Node,
    /// A lossy link: each traversal loses the packet with `probability`.
    Loss,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FaultSpec {
    pub kind: FaultKind,
    pub link: Option<u32>,
    pub node: Option<u32>,
    pub at_ns: Option<f64>,
    pub probability: Option<f64>,
}

#[derive(Debug, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct RunSpec {
    pub time_limit_us: Option<f64>,
    /// No-progress watchdog (simulated µs); 0 turns it off.
    pub watchdog_us: Option<f64>,
    /// Which simulator runs the scenario (default `packet`).
    pub backend: Option<Backend>,
    /// `auto`'s switch-over size (default [`AUTO_FLOW_MIN_BYTES`]).
    pub flow_min_bytes: Option<u64>,
}

/// `run.backend`: which simulator times the scenario.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Backend {
    /// The packet engine (every scenario; data verified).
    Packet,
    /// Pipelined fluid flows on fixed minimal paths (`reducelab_flow::run_plan`): one
    /// allreduce on all hosts, nothing verified.
    Flow,
    /// Flow for a scenario the flow backend can run whose collective is contention-free, too
    /// large to check at packet level, or at least `run.flow_min_bytes`; packet otherwise.
    Auto,
}

impl Backend {
    pub const NAMES: &'static [&'static str] = &["packet", "flow", "auto"];

    pub fn parse(name: &str) -> Result<Backend, String> {
        match name {
            "packet" => Ok(Backend::Packet),
            "flow" => Ok(Backend::Flow),
            "auto" => Ok(Backend::Auto),
            _ => Err(format!("unknown backend '{name}' (known: {})", Backend::NAMES.join(", "))),
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Backend::Packet => "packet",
            Backend::Flow => "flow",
            Backend::Auto => "auto",
        }
    }
}

impl std::fmt::Display for Backend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// `auto` runs sizes of at least this many bytes at flow level unless `run.flow_min_bytes`
/// says otherwise (8 MiB: the size at which the flow backend is validated within 1.2% of the
/// packet engine, docs/flow-vs-packet.md).
pub const AUTO_FLOW_MIN_BYTES: u64 = 8 << 20;

/// Most (rank, block) pairs a packet-level run checks (8 bytes of fingerprint each, 2 GiB);
/// `auto` runs a collective that would need more at flow level.
pub const PACKET_MAX_FINGERPRINTS: u64 = 1 << 28;

/// The watchdog's default: 10 ms of simulated time, or, if longer, the longest time an
/// in-network protocol's hosts recover by themselves (`InaProtocol::recovery_horizon_ps`; for
/// Canary `MAX_EXPIRIES + 2` retransmission timeouts): the watchdog must not cut a recovery
/// short, and a run whose hosts gave up then says so.
pub const DEFAULT_WATCHDOG_PS: u64 = 10_000_000_000;

/// A validated scenario, ready to assemble.
pub struct Scenario {
    pub name: String,
    pub seed: u64,
    pub topology: Topology,
    pub net: NetConfig,
    /// The simulator that runs it (`run.backend` resolved: never `Auto`).
    pub backend: Backend,
    /// Why (summary.json's `backend_reason`).
    pub backend_reason: String,
    pub traffic: Vec<Traffic>,
    pub faults: Vec<Fault>,
    /// Per-link loss probabilities overriding `network.loss_probability`.
    pub link_loss: Vec<(u32, f64)>,
    pub time_limit: Option<SimTime>,
    /// No-progress watchdog: a run whose finite work has not moved for this long ends as
    /// stalled (`None`: off).
    pub watchdog: Option<SimDuration>,
    /// Switch resources for in-network aggregation.
    pub ina: crate::ina_run::InaSwitchSpec,
    /// Per-host endpoint costs (`[endpoint]`).
    pub endpoint: reducelab_net::EndpointConfig,
    /// End-to-end transport of message traffic (`[transport]`, or the one `[[traffic]]`
    /// entries name).
    pub transport: reducelab_net::TransportConfig,
    /// Traffic entries (message tags) whose messages go without it (`transport = "none"`).
    pub raw_traffic: Vec<u64>,
}

/// A validated traffic generator.
#[derive(Clone, Debug)]
pub enum Traffic {
    Messages {
        list: Vec<(u32, u32, u64, SimTime)>,
    },
    Permutation {
        hosts: Vec<u32>,
        bytes: u64,
        start: SimTime,
    },
    Incast {
        senders: Vec<u32>,
        receiver: u32,
        bytes: u64,
        start: SimTime,
    },
    RandomUniform {
        hosts: Vec<u32>,
        bytes: u64,
        inflight: u32,
        start: SimTime,
    },
    RandomPermutation(crate::workload::RandomPermutation),
    /// Rank `r` on `hosts[r]`. `algorithm` is the variant that runs (a family or policy
    /// resolved for `bytes`); the packet backend runs `schedule`, the flow backend `plan`
    /// (each built only for the backend that runs, from the process-wide caches).
    Collective {
        hosts: Vec<u32>,
        bytes: u64,
        start: SimTime,
        algorithm: &'static str,
        collective: reducelab_sched::Collective,
        layout: reducelab_sched::algos::Layout,
        schedule: Option<Arc<reducelab_sched::Schedule>>,
        plan: Option<Arc<reducelab_sched::Plan>>,
    },
    Ina(crate::ina_run::InaSpec),
    Training(crate::training_run::TrainingSpec),
}

impl Traffic {
    pub fn kind(&self) -> &'static str {
        match self {
            Traffic::Messages { .. } => "messages",
            Traffic::Permutation { .. } => "permutation",
            Traffic::Incast { .. } => "incast",
            Traffic::RandomUniform { .. } => "random_uniform",
            Traffic::RandomPermutation(_) => "random_permutation",
            Traffic::Collective { .. } => "collective",
            Traffic::Ina(_) => "ina_allreduce",
            Traffic::Training(_) => "training",
        }
    }
    pub fn is_background(&self) -> bool {
        matches!(self, Traffic::RandomUniform { .. } | Traffic::RandomPermutation(_))
    }
    /// Calls `f` with every host that sends or receives in this generator (possibly twice).
    pub fn for_each_host(&self, f: &mut dyn FnMut(u32)) {
        match self {
            Traffic::Messages { list } => list.iter().for_each(|&(s, d, _, _)| {
                f(s);
                f(d)
            }),
            Traffic::Incast { senders, receiver, .. } => {
                senders.iter().for_each(|&h| f(h));
                f(*receiver)
            }
            Traffic::Permutation { hosts, .. }
            | Traffic::RandomUniform { hosts, .. }
            | Traffic::Collective { hosts, .. } => hosts.iter().for_each(|&h| f(h)),
            Traffic::RandomPermutation(r) => r.hosts.iter().for_each(|&h| f(h)),
            Traffic::Ina(spec) => spec.hosts.iter().for_each(|&h| f(h)),
            Traffic::Training(spec) => spec.jobs.iter().for_each(|j| j.workers.iter().chain(&j.ps).for_each(|&h| f(h))),
        }
    }
}

fn e<T>(field: impl Into<String>, reason: impl Into<String>) -> Result<T, ScenarioError> {
    Err(ScenarioError { field: field.into(), reason: reason.into() })
}

/// Parses TOML text into a [`ScenarioFile`], with the dotted path of any error.
///
/// Explicit message lists are read by a lean reader ([`crate::message_lists`]) so that memory
/// stays proportional to the messages; the result is the same as the full parser's.
pub fn parse(text: &str) -> Result<ScenarioFile, ScenarioError> {
    let Some((lean, lists)) = crate::message_lists::extract(text) else { return parse_toml(text) };
    // Line numbers are the same in `lean`, and its `list` values are empty, so an error here is
    // the error the full text would give.
    let mut file = parse_toml(&lean)?;
    for (t, list) in lists {
        match file.traffic.get_mut(t) {
            Some(spec) if spec.list.as_ref().is_some_and(|l| l.is_empty()) => spec.list = Some(list),
            // The lean reader misread the structure: let the full parser read it all.
            _ => return parse_toml(text),
        }
    }
    Ok(file)
}

pub(crate) fn parse_toml(text: &str) -> Result<ScenarioFile, ScenarioError> {
    let de = toml::Deserializer::new(text);
    serde_path_to_error::deserialize(de).map_err(|err| {
        let mut path = err.path().to_string();
        let inner = err.into_inner();
        let mut reason = inner.message().to_string();
        // serde names the table that lacks a required key; point at the key itself.
        if let Some(key) = reason.strip_prefix("missing field `").and_then(|r| r.split('`').next()) {
            path = if path == "." { key.to_string() } else { format!("{path}.{key}") };
        }
        if let Some(span) = inner.span() {
            let line = text[..span.start.min(text.len())].matches('\n').count() + 1;
            reason = format!("{reason} (line {line})");
        }
        ScenarioError { field: if path == "." { String::new() } else { path }, reason }
    })
}

/// `network.ecn_kmax_bytes` and `network.ecn_pmax`: RED marking above Kmin.
fn resolve_ecn_red(nw: &NetworkSpec) -> Result<Option<reducelab_net::EcnRed>, ScenarioError> {
    let Some(kmax_bytes) = nw.ecn_kmax_bytes else {
        if nw.ecn_pmax.is_some() {
            return e("network.ecn_pmax", "applies only with network.ecn_kmax_bytes (RED marking)");
        }
        return Ok(None);
    };
    let Some(kmin) = nw.ecn_threshold_bytes else {
        return e("network.ecn_kmax_bytes", "needs network.ecn_threshold_bytes (Kmin: no marks below it)");
    };
    if kmax_bytes <= kmin {
        return e(
            "network.ecn_kmax_bytes",
            format!("must exceed network.ecn_threshold_bytes (Kmin, {kmin}), got {kmax_bytes}"),
        );
    }
    let pmax = nw.ecn_pmax.unwrap_or(1.0);
    if !(pmax > 0.0 && pmax <= 1.0) {
        return e("network.ecn_pmax", format!("must be > 0 and <= 1, got {pmax}"));
    }
    Ok(Some(reducelab_net::EcnRed { kmax_bytes, pmax }))
}

pub(crate) fn pos_f64(field: &str, v: f64) -> Result<f64, ScenarioError> {
    if !v.is_finite() || v <= 0.0 {
        return e(field, format!("must be a positive number, got {v}"));
    }
    Ok(v)
}

fn nonneg_f64(field: &str, v: f64) -> Result<f64, ScenarioError> {
    if !v.is_finite() || v < 0.0 {
        return e(field, format!("must be a non-negative number, got {v}"));
    }
    Ok(v)
}

/// The latest time a scenario may name, in ns (1e18 ps, about 11.6 days of simulated time).
const MAX_TIME_NS: u64 = 1_000_000_000_000_000;

pub(crate) fn ns_to_ps(field: &str, ns: f64) -> Result<u64, ScenarioError> {
    let ns = nonneg_f64(field, ns)?;
    let ps = (ns * 1000.0).round();
    if ps > MAX_TIME_NS as f64 * 1000.0 {
        return e(field, format!("{ns} ns is too large (at most {MAX_TIME_NS} ns, about 11.6 days)"));
    }
    Ok(ps as u64)
}

fn gbps_to_bps(field: &str, g: f64) -> Result<u64, ScenarioError> {
    let g = pos_f64(field, g)?;
    if g > 1e6 {
        return e(field, format!("{g} Gb/s is beyond any link; the unit is Gb/s"));
    }
    Ok((g * 1e9).round() as u64)
}

/// Refuses traffic that could not finish within the format's time range even on the fastest
/// link of the topology (simulated times would overflow 64-bit picoseconds): an absurd size or
/// start time gets an error naming it rather than a clamped `end_ps`.
fn check_finishes_in_time(f: &str, t: &Traffic, topology: &Topology) -> Result<(), ScenarioError> {
    let fastest = topology.links.iter().map(|l| l.bandwidth_bps).max().unwrap_or(1).max(1);
    let limit_ps = MAX_TIME_NS as u128 * 1000;
    let check = |field: String, bytes: u64, start: SimTime| -> Result<(), ScenarioError> {
        let ps = start.ps() as u128 + SimDuration::serialization(bytes, fastest).ps() as u128;
        if ps > limit_ps {
            return e(
                field,
                format!(
                    "{bytes} bytes starting at {} ns cannot finish within {MAX_TIME_NS} ns (about 11.6 days) of simulated time even at {} Gb/s, the fastest link",
                    start.ps() / 1000,
                    fastest as f64 / 1e9
                ),
            );
        }
        Ok(())
    };
    match t {
        Traffic::Messages { list } => {
            for (j, &(_, _, b, at)) in list.iter().enumerate() {
                check(format!("{f}.list[{j}]"), b, at)?;
            }
            Ok(())
        }
        Traffic::Permutation { bytes, start, .. }
        | Traffic::Incast { bytes, start, .. }
        | Traffic::Collective { bytes, start, .. } => check(format!("{f}.bytes"), *bytes, *start),
        Traffic::RandomUniform { bytes, start, .. } => check(format!("{f}.bytes"), *bytes, *start),
        Traffic::RandomPermutation(r) => check(format!("{f}.bytes"), r.bytes, r.start),
        Traffic::Ina(spec) => check(format!("{f}.bytes"), spec.bytes, spec.start),
        Traffic::Training(_) => Ok(()),
    }
}

fn ina_specs_empty(traffic: &[Traffic]) -> bool {
    !traffic.iter().any(|t| matches!(t, Traffic::Ina(_)))
}

fn req<T: Copy>(field: &str, v: Option<T>, kind: &str) -> Result<T, ScenarioError> {
    match v {
        Some(v) => Ok(v),
        None => e(field, format!("is required for kind = \"{kind}\"")),
    }
}

impl TopologySpec {
    /// The table with `shape` (parsed by [`reducelab_sched::TopologySpec::parse`], the one
    /// topology-spec parser) expanded into `kind` and its size parameters, with the default
    /// link parameters where none are given; `None` without a `shape`.
    pub fn expanded(&self) -> Result<Option<TopologySpec>, ScenarioError> {
        let Some(shape) = &self.shape else { return Ok(None) };
        for (name, is) in [
            ("kind", self.kind.is_some()),
            ("dims", self.dims.is_some()),
            ("board", self.board.is_some()),
            ("grid", self.grid.is_some()),
        ] {
            if is {
                return e("topology.shape", format!("replaces kind, dims, board and grid: give either shape or kind with its sizes, not both (topology.{name} is also set)"));
            }
        }
        let spec = reducelab_sched::TopologySpec::parse(shape)
            .map_err(|r| ScenarioError { field: "topology.shape".into(), reason: r })?;
        let mut t = TopologySpec {
            shape: None,
            bandwidth_gbps: Some(self.bandwidth_gbps.unwrap_or(reducelab_sched::model::DEFAULT_BANDWIDTH_GBPS)),
            latency_ns: Some(self.latency_ns.unwrap_or(reducelab_sched::model::DEFAULT_LATENCY_NS)),
            ..self.clone()
        };
        match spec {
            reducelab_sched::TopologySpec::Torus(d) => (t.kind, t.dims) = (Some(TopologyKind::Torus), Some(d)),
            reducelab_sched::TopologySpec::HyperX(d) => (t.kind, t.dims) = (Some(TopologyKind::Hyperx), Some(d)),
            reducelab_sched::TopologySpec::HammingMesh { board, grid } => {
                (t.kind, t.board, t.grid) =
                    (Some(TopologyKind::Hammingmesh), Some(vec![board.0, board.1]), Some(vec![grid.0, grid.1]))
            }
        }
        Ok(Some(t))
    }

    /// (bandwidth Gb/s, latency ns) of each class of link the table gives (network, host,
    /// board, global), as written (for `network.buffer_bytes = "line_rate"`).
    fn link_classes(&self) -> Vec<(f64, f64)> {
        let (Some(bw), Some(lat)) = (self.bandwidth_gbps, self.latency_ns) else { return Vec::new() };
        let mut v = vec![(bw, lat)];
        if self.host_bandwidth_gbps.is_some() || self.host_latency_ns.is_some() {
            v.push((self.host_bandwidth_gbps.unwrap_or(bw), self.host_latency_ns.unwrap_or(lat)));
        }
        if self.board_bandwidth_gbps.is_some() || self.board_latency_ns.is_some() {
            v.push((self.board_bandwidth_gbps.unwrap_or(bw), self.board_latency_ns.unwrap_or(lat)));
        }
        v.extend(self.global_latency_ns.map(|l| (bw, l)));
        v
    }

    fn build(&self) -> Result<Topology, ScenarioError> {
        match self.expanded()? {
            // A size the builders refuse is the shape's fault.
            Some(t) => t.build_table().map_err(|mut err| {
                if ["topology.dims", "topology.board", "topology.grid"]
                    .iter()
                    .any(|f| err.field == *f || err.field.starts_with(&format!("{f}[")))
                {
                    err.field = "topology.shape".into();
                }
                err
            }),
            None => self.build_table(),
        }
    }

    fn build_table(&self) -> Result<Topology, ScenarioError> {
        let kind = match self.kind {
            Some(k) => k,
            None => return e("topology.kind", "is required (star, fat_tree_2, fat_tree_3, torus, hyperx, hammingmesh, dragonfly), or give topology.shape (e.g. \"torus:8x8\")"),
        };
        let kname = match kind {
            TopologyKind::Star => "star",
            TopologyKind::FatTree2 => "fat_tree_2",
            TopologyKind::FatTree3 => "fat_tree_3",
            TopologyKind::Torus => "torus",
            TopologyKind::Hyperx => "hyperx",
            TopologyKind::Hammingmesh => "hammingmesh",
            TopologyKind::Dragonfly => "dragonfly",
        };
        let bw = gbps_to_bps("topology.bandwidth_gbps", req("topology.bandwidth_gbps", self.bandwidth_gbps, kname)?)?;
        let lat = ns_to_ps("topology.latency_ns", req("topology.latency_ns", self.latency_ns, kname)?)?;
        let net = LinkParams { bandwidth_bps: bw, latency_ps: lat };
        let host = LinkParams {
            bandwidth_bps: match self.host_bandwidth_gbps {
                Some(g) => gbps_to_bps("topology.host_bandwidth_gbps", g)?,
                None => bw,
            },
            latency_ps: match self.host_latency_ns {
                Some(l) => ns_to_ps("topology.host_latency_ns", l)?,
                None => lat,
            },
        };
        // Reject parameters that the chosen kind does not use: a typo'd kind must not
        // silently ignore half of the table.
        let used: &[&str] = match kind {
            TopologyKind::Star => &["hosts", "host_bandwidth_gbps", "host_latency_ns"],
            TopologyKind::FatTree2 => &[
                "leaves",
                "hosts_per_leaf",
                "spines",
                "links_per_spine",
                "radix",
                "host_bandwidth_gbps",
                "host_latency_ns",
            ],
            TopologyKind::FatTree3 => &["k", "hosts_per_edge", "host_bandwidth_gbps", "host_latency_ns"],
            TopologyKind::Torus | TopologyKind::Hyperx => &["dims"],
            TopologyKind::Hammingmesh => &["board", "grid", "board_latency_ns", "board_bandwidth_gbps"],
            TopologyKind::Dragonfly => &[
                "groups",
                "routers_per_group",
                "hosts_per_router",
                "global_per_router",
                "global_latency_ns",
                "host_bandwidth_gbps",
                "host_latency_ns",
            ],
        };
        let present: [(&str, bool); 18] = [
            ("hosts", self.hosts.is_some()),
            ("leaves", self.leaves.is_some()),
            ("hosts_per_leaf", self.hosts_per_leaf.is_some()),
            ("spines", self.spines.is_some()),
            ("links_per_spine", self.links_per_spine.is_some()),
            ("radix", self.radix.is_some()),
            ("k", self.k.is_some()),
            ("hosts_per_edge", self.hosts_per_edge.is_some()),
            ("dims", self.dims.is_some()),
            ("board", self.board.is_some()),
            ("grid", self.grid.is_some()),
            ("board_latency_ns", self.board_latency_ns.is_some()),
            ("board_bandwidth_gbps", self.board_bandwidth_gbps.is_some()),
            ("groups", self.groups.is_some()),
            ("routers_per_group", self.routers_per_group.is_some()),
            ("hosts_per_router", self.hosts_per_router.is_some()),
            ("global_per_router", self.global_per_router.is_some()),
            ("global_latency_ns", self.global_latency_ns.is_some()),
        ];
        for (name, is) in present {
            if is && !used.contains(&name) {
                return e(format!("topology.{name}"), format!("is not a parameter of kind = \"{kname}\""));
            }
        }
        if kind != TopologyKind::Star
            && kind != TopologyKind::FatTree2
            && kind != TopologyKind::FatTree3
            && kind != TopologyKind::Dragonfly
        {
            for (name, is) in [
                ("host_bandwidth_gbps", self.host_bandwidth_gbps.is_some()),
                ("host_latency_ns", self.host_latency_ns.is_some()),
            ] {
                if is {
                    return e(
                        format!("topology.{name}"),
                        format!("is not a parameter of kind = \"{kname}\" (a direct network has no host links)"),
                    );
                }
            }
        }
        let wrap = |r: Result<Topology, topo::TopoError>| {
            r.map_err(|te| {
                // The builders name hammingmesh sizes board_x..grid_y; the file says board = [x, y].
                let param = match te.param.as_str() {
                    "board_x" => "board[0]",
                    "board_y" => "board[1]",
                    "grid_x" => "grid[0]",
                    "grid_y" => "grid[1]",
                    p => p,
                };
                ScenarioError { field: format!("topology.{param}"), reason: te.reason }
            })
        };
        // The builders size things in u32/u64 and overflow on absurd values (a panic, or a
        // wrapped size that slips past their node limit); reject those here, in u128, first.
        let too_big = |field: &str, nodes: u128| -> Result<(), ScenarioError> {
            if nodes > topo::MAX_NODES as u128 {
                return e(field, format!("would build {nodes} nodes, more than the limit of {}", topo::MAX_NODES));
            }
            Ok(())
        };
        // MAX_NODES does not bound links: a HyperX, fat tree or dragonfly within it can still
        // need billions of them (an out-of-memory abort). 2^25 links is what the largest torus
        // the builders accept (2^22 nodes, 8 dimensions) has.
        const MAX_LINKS: u128 = 1 << 25;
        let too_many_links = |field: &str, links: u128| -> Result<(), ScenarioError> {
            if links > MAX_LINKS {
                return e(field, format!("would build {links} links, more than the limit of {MAX_LINKS}"));
            }
            Ok(())
        };
        let nodes_of = |d: &[u32]| d.iter().fold(1u128, |n, &x| n.saturating_mul(x as u128));
        let dims2 = |field: &str, v: &Option<Vec<u32>>| -> Result<(u32, u32), ScenarioError> {
            match v {
                Some(v) if v.len() == 2 => Ok((v[0], v[1])),
                Some(v) => e(format!("topology.{field}"), format!("must have two entries [x, y], got {}", v.len())),
                None => e(format!("topology.{field}"), "is required for kind = \"hammingmesh\""),
            }
        };
        match kind {
            TopologyKind::Star => wrap(topo::star(req("topology.hosts", self.hosts, kname)?, host)),
            TopologyKind::FatTree2 => {
                let (l, h, s) = (
                    req("topology.leaves", self.leaves, kname)?,
                    req("topology.hosts_per_leaf", self.hosts_per_leaf, kname)?,
                    req("topology.spines", self.spines, kname)?,
                );
                let c = self.links_per_spine.unwrap_or(1);
                too_many_links("topology.spines", l as u128 * (h as u128 + s as u128 * c as u128))?;
                wrap(topo::fat_tree_2level(l, h, s, c, self.radix, host, net))
            }
            TopologyKind::FatTree3 => {
                let k = req("topology.k", self.k, kname)?;
                let hpe = self.hosts_per_edge.unwrap_or(k / 2);
                let (k2, h2) = (k as u128, (k / 2) as u128);
                too_big("topology.k", k2 * h2 * hpe as u128 + k2 * k2 + h2 * h2)?;
                too_many_links("topology.k", k2 * h2 * (hpe as u128 + 2 * h2))?;
                wrap(topo::fat_tree_3level(k, hpe, host, net))
            }
            TopologyKind::Torus => match &self.dims {
                Some(d) => wrap(topo::torus(d, net)),
                None => e("topology.dims", "is required for kind = \"torus\""),
            },
            TopologyKind::Hyperx => match &self.dims {
                Some(d) => {
                    let ports: u128 = d.iter().map(|&x| (x as u128).saturating_sub(1)).sum();
                    too_many_links("topology.dims", nodes_of(d).saturating_mul(ports) / 2)?;
                    wrap(topo::hyperx(d, net))
                }
                None => e("topology.dims", "is required for kind = \"hyperx\""),
            },
            TopologyKind::Hammingmesh => {
                let (bx, by) = dims2("board", &self.board)?;
                let (gx, gy) = dims2("grid", &self.grid)?;
                too_big("topology.grid", (bx as u128 * gx as u128 + 1) * (by as u128 * gy as u128 + 1) - 1)?;
                let board = LinkParams {
                    bandwidth_bps: match self.board_bandwidth_gbps {
                        Some(g) => gbps_to_bps("topology.board_bandwidth_gbps", g)?,
                        None => bw,
                    },
                    latency_ps: match self.board_latency_ns {
                        Some(l) => ns_to_ps("topology.board_latency_ns", l)?,
                        None => lat,
                    },
                };
                wrap(topo::hammingmesh(bx, by, gx, gy, board, net))
            }
            TopologyKind::Dragonfly => {
                let (g, a, p, h) = (
                    req("topology.groups", self.groups, kname)?,
                    req("topology.routers_per_group", self.routers_per_group, kname)?,
                    req("topology.hosts_per_router", self.hosts_per_router, kname)?,
                    req("topology.global_per_router", self.global_per_router, kname)?,
                );
                too_big("topology.groups", g as u128 * a as u128 * (p as u128 + 1))?;
                let (g2, a2) = (g as u128, a as u128);
                if g2 <= a2 * h as u128 + 1 {
                    // (Otherwise the builder explains that there are too few global ports.)
                    too_many_links(
                        "topology.groups",
                        g2 * (a2 * p as u128 + a2 * a2.saturating_sub(1) / 2) + g2 * g2.saturating_sub(1) / 2,
                    )?;
                }
                let ports = (p as u64 + a as u64 + h as u64).saturating_sub(1);
                if ports > u16::MAX as u64 {
                    let field = if h >= p.max(a) {
                        "global_per_router"
                    } else if a >= p {
                        "routers_per_group"
                    } else {
                        "hosts_per_router"
                    };
                    return e(
                        format!("topology.{field}"),
                        format!("a router would have {ports} ports (hosts + local + global), more than 65535"),
                    );
                }
                let global = LinkParams {
                    bandwidth_bps: bw,
                    latency_ps: match self.global_latency_ns {
                        Some(l) => ns_to_ps("topology.global_latency_ns", l)?,
                        None => lat,
                    },
                };
                wrap(topo::dragonfly(g, a, p, h, host, net, global))
            }
        }
    }
}

fn host_list(field: &str, spec: &Option<HostsSpec>, n: u32) -> Result<Vec<u32>, ScenarioError> {
    match spec {
        None => Ok((0..n).collect()),
        Some(HostsSpec::Keyword(k)) if k == "all" => Ok((0..n).collect()),
        Some(HostsSpec::Keyword(k)) => e(field, format!("must be \"all\" or a list of host indices, got \"{k}\"")),
        Some(HostsSpec::List(v)) => {
            let mut seen = vec![false; n as usize];
            for (i, &h) in v.iter().enumerate() {
                if h >= n {
                    return e(format!("{field}[{i}]"), format!("host {h} does not exist (the topology has {n} hosts)"));
                }
                if seen[h as usize] {
                    return e(format!("{field}[{i}]"), format!("host {h} is listed twice"));
                }
                seen[h as usize] = true;
            }
            Ok(v.clone())
        }
    }
}

impl ScenarioFile {
    /// The run's transport and the traffic entries that go without it. A `[[traffic]]`
    /// entry's `transport` overrides `[transport].kind` for its messages; a run carries at
    /// most one transport besides `"none"`, and a check that fails for a kind an entry named
    /// names that entry.
    fn resolve_transports(
        &self,
        nw: &NetworkSpec,
    ) -> Result<(reducelab_net::TransportConfig, Vec<u64>), ScenarioError> {
        let mut kinds = Vec::with_capacity(self.traffic.len());
        let mut named: Option<(usize, TransportKindSpec)> = None;
        for (i, t) in self.traffic.iter().enumerate() {
            if matches!(t.kind, Some(TrafficKind::InaAllreduce | TrafficKind::Training)) {
                if t.transport.is_some() {
                    return e(
                        format!("traffic[{i}].transport"),
                        "applies to message traffic (in-network protocol packets keep their own recovery)",
                    );
                }
                kinds.push(TransportKindSpec::None);
                continue;
            }
            let k = t.transport.unwrap_or(self.transport.kind);
            kinds.push(k);
            if k == TransportKindSpec::None {
                continue;
            }
            match named {
                None => named = Some((i, k)),
                Some((j, other)) if other != k => {
                    return e(
                        format!("traffic[{i}].transport"),
                        format!("\"{}\" next to \"{}\" (traffic[{j}]): a run carries at most one transport besides \"none\"", k.name(), other.name()),
                    );
                }
                Some(_) => {}
            }
        }
        let kind = named.map_or(self.transport.kind, |(_, k)| k);
        let transport = self.transport.resolve(kind, nw, &self.endpoint).map_err(|mut err| {
            // The kind came from a traffic entry: name it.
            if let Some((i, _)) = named.filter(|_| kind != self.transport.kind && err.field == "transport.kind") {
                err.field = format!("traffic[{i}].transport");
            }
            err
        })?;
        let raw = match transport {
            reducelab_net::TransportConfig::None => Vec::new(),
            _ => {
                kinds.iter().enumerate().filter(|(_, &k)| k == TransportKindSpec::None).map(|(i, _)| i as u64).collect()
            }
        };
        Ok((transport, raw))
    }

    /// Validates every field and builds the topology.
    pub fn resolve(&self, seed_override: Option<u64>) -> Result<Scenario, ScenarioError> {
        if self.name.trim().is_empty() {
            return e("name", "must not be empty");
        }
        let topology = self.topology.build()?;
        let tspec = self.topology.expanded()?;
        let tspec = tspec.as_ref().unwrap_or(&self.topology);
        let nw = &self.network;
        if nw.mtu_bytes < 64 || nw.mtu_bytes > 65536 {
            return e("network.mtu_bytes", format!("must be within 64..=65536, got {}", nw.mtu_bytes));
        }
        if nw.header_bytes >= nw.mtu_bytes {
            return e(
                "network.header_bytes",
                format!("must be smaller than mtu_bytes ({}), got {}", nw.mtu_bytes, nw.header_bytes),
            );
        }
        let switch_latency_ps = ns_to_ps("network.switch_latency_ns", nw.switch_latency_ns)?;
        let buffer_bytes = match nw.buffer_bytes {
            BufferSpec::Bytes(b) => b,
            BufferSpec::LineRate => {
                // The largest any class of link needs (one class on a direct network).
                tspec
                    .link_classes()
                    .iter()
                    .map(|&(bw, lat)| line_rate_buffer_bytes(bw, lat, nw.switch_latency_ns, nw.mtu_bytes))
                    .max()
                    .unwrap_or(256 << 10)
            }
        };
        if nw.flow_control == FlowControlSpec::Credit && buffer_bytes < nw.mtu_bytes as u64 {
            return e(
                "network.buffer_bytes",
                format!(
                    "must hold at least one MTU ({} bytes) with credit flow control, got {}",
                    nw.mtu_bytes, buffer_bytes
                ),
            );
        }
        if buffer_bytes == 0 {
            return e("network.buffer_bytes", "must be > 0");
        }
        if nw.flow_control != FlowControlSpec::Pfc {
            for (key, set) in [
                ("network.pfc_xoff_bytes", nw.pfc_xoff_bytes.is_some()),
                ("network.pfc_xon_bytes", nw.pfc_xon_bytes.is_some()),
                ("network.pfc_headroom_bytes", nw.pfc_headroom_bytes.is_some()),
            ] {
                if set {
                    return e(key, "applies only with network.flow_control = \"pfc\"");
                }
            }
        }
        if nw.adaptive_threshold_bytes.is_some() && nw.routing != RoutingSpec::Canary {
            return e(
                "network.adaptive_threshold_bytes",
                "applies only with routing = \"canary\" (threshold-adaptive routing)",
            );
        }
        if nw.spray == SpraySpec::Packet && !matches!(nw.routing, RoutingSpec::Ecmp | RoutingSpec::Adaptive) {
            return e("network.spray", "\"packet\" applies only with routing = \"ecmp\" or \"adaptive\" (the others break ties by destination, not by flow)");
        }
        if !(0.0..=1.0).contains(&nw.loss_probability) {
            return e("network.loss_probability", format!("must be within [0, 1], got {}", nw.loss_probability));
        }
        if !(0.0..=1.0).contains(&self.noise.probability) {
            return e("noise.probability", format!("must be within [0, 1], got {}", self.noise.probability));
        }
        let router = resolve_router(nw, buffer_bytes)?;
        let net = NetConfig {
            mtu_bytes: nw.mtu_bytes,
            header_bytes: nw.header_bytes,
            switch_latency_ps,
            buffer_bytes,
            flow_control: match nw.flow_control {
                FlowControlSpec::Credit => FlowControl::Credit,
                FlowControlSpec::DropTail => FlowControl::DropTail,
                FlowControlSpec::Pfc => FlowControl::Pfc,
            },
            pfc: reducelab_net::PfcConfig {
                xoff_bytes: nw.pfc_xoff_bytes,
                xon_bytes: nw.pfc_xon_bytes,
                headroom_bytes: nw.pfc_headroom_bytes,
            },
            ecn_threshold_bytes: nw.ecn_threshold_bytes,
            ecn_red: resolve_ecn_red(nw)?,
            routing: match nw.routing {
                RoutingSpec::Minimal => RoutingAlgo::Minimal,
                RoutingSpec::Ecmp => RoutingAlgo::Ecmp,
                RoutingSpec::Adaptive => RoutingAlgo::Adaptive,
                RoutingSpec::Canary => match nw.adaptive_threshold_bytes {
                    None => RoutingAlgo::CANARY,
                    Some(b) => RoutingAlgo::ThresholdAdaptive(reducelab_net::AdaptiveThreshold::Bytes(b)),
                },
            },
            spray: nw.spray == SpraySpec::Packet,
            loss_probability: nw.loss_probability,
            arbitration: match nw.arbitration {
                ArbitrationSpec::Fifo => reducelab_net::Arbitration::Fifo,
                ArbitrationSpec::InputRoundRobin => reducelab_net::Arbitration::InputRoundRobin,
                ArbitrationSpec::Lru if nw.router != RouterSpec::InputBuffered => {
                    return e(
                        "network.arbitration",
                        "\"lru\" is a crossbar arbiter: it needs network.router = \"input_buffered\"",
                    );
                }
                ArbitrationSpec::Lru => reducelab_net::Arbitration::Lru,
            },
            router,
            noise_probability: self.noise.probability,
            noise_delay_ps: ns_to_ps("noise.delay_ns", self.noise.delay_ns)?,
            noise_mode: match self.noise.mode {
                NoiseModeSpec::PortStall => reducelab_net::NoiseMode::PortStall,
                NoiseModeSpec::Packet => reducelab_net::NoiseMode::Packet,
            },
            noise_hosts: None, // set below, once the traffic is known ("foreground")
        };
        match reducelab_net::VcPolicy::choose(&topology, net.routing, net.flow_control) {
            Err(reason) => return e("network.routing", reason),
            Ok(policy) if net.flow_control == FlowControl::Pfc => {
                if let Err(reason) = reducelab_net::pfc_supports(&policy) {
                    return e("network.routing", reason);
                }
                if let Err((field, reason)) = reducelab_net::pfc_thresholds(&topology, &net) {
                    // `NetConfig` fields to scenario keys: `pfc.xoff_bytes` is `network.pfc_xoff_bytes`.
                    return e(format!("network.{}", field.replace('.', "_")), reason);
                }
            }
            Ok(_) => {}
        }
        let endpoint = self.endpoint.resolve()?;
        let (transport, raw_traffic) = self.resolve_transports(nw)?;
        let mut traffic = Vec::new();
        let seed = seed_override.unwrap_or(self.seed);
        // The static trees' switch state is laid out per (tenant, tree) for one tree count.
        let mut first_trees: Option<(usize, u16)> = None;
        for (i, t) in self.traffic.iter().enumerate() {
            let mut tr = resolve_traffic(&format!("traffic[{i}]"), t, &topology)?;
            if let Traffic::Ina(spec) = &mut tr {
                // A protocol packet is one frame: it must fit the MTU, as raw packets do.
                let wire = spec.elems_per_packet as u32 * 4 + reducelab_ina::wire::OVERHEAD_BYTES;
                if wire > nw.mtu_bytes {
                    return e(
                        format!("traffic[{i}].elements_per_packet"),
                        format!(
                            "{} elements x 4 B + {} B of headers = {wire} B per packet exceed network.mtu_bytes ({}); at most {} elements fit",
                            spec.elems_per_packet,
                            reducelab_ina::wire::OVERHEAD_BYTES,
                            nw.mtu_bytes,
                            nw.mtu_bytes.saturating_sub(reducelab_ina::wire::OVERHEAD_BYTES) / 4
                        ),
                    );
                }
                if let Some(&reducelab_ina::tree::StaticTrees { trees, .. }) =
                    spec.protocol.as_any().downcast_ref::<reducelab_ina::tree::StaticTrees>()
                {
                    match first_trees {
                        None => first_trees = Some((i, trees)),
                        Some((j, n)) if n != trees => {
                            return e(format!("traffic[{i}].trees"), format!("{trees} trees, but traffic[{j}] uses {n}: every static-tree allreduce of a scenario uses the same number of trees"));
                        }
                        _ => {}
                    }
                    if spec.roots.is_empty() {
                        spec.roots = random_roots(&topology, trees, seed ^ (i as u64) << 32);
                    }
                }
            }
            check_finishes_in_time(&format!("traffic[{i}]"), &tr, &topology)?;
            traffic.push(tr);
        }
        let mut net = net;
        net.noise_hosts = self.noise.resolve_hosts(&traffic, topology.num_hosts() as u32)?;
        let ina = self.ina.resolve()?;
        let ina_specs: Vec<_> =
            traffic.iter().filter_map(|t| if let Traffic::Ina(s) = t { Some(s.clone()) } else { None }).collect();
        if !ina_specs.is_empty() {
            // Builds the switch programs once to validate (trees, tables, protocol mix).
            if let Err(reason) = crate::ina_run::InaWorld::new(&topology, ina_specs, ina.clone(), seed) {
                // Errors start with the field they are about: an `[ina]` key, or a top-level
                // section (`topology`, `traffic`).
                let (field, reason) = match reason.split_once(": ") {
                    Some((fld, r)) if fld == "topology" || fld == "traffic" => (fld.to_string(), r.to_string()),
                    Some((fld, r)) if !fld.contains(' ') => (format!("ina.{fld}"), r.to_string()),
                    _ => ("traffic".to_string(), reason),
                };
                return e(field, reason);
            }
        }
        let trainings: Vec<usize> =
            (0..traffic.len()).filter(|&i| matches!(traffic[i], Traffic::Training(_))).collect();
        if let Some(&i) = trainings.first() {
            if let Some(&k) = trainings.get(1) {
                return e(
                    format!("traffic[{k}].kind"),
                    format!("one \"training\" entry per scenario (traffic[{i}] is one); it holds every job"),
                );
            }
            if !ina_specs_empty(&traffic) {
                return e(format!("traffic[{i}].kind"), "\"training\" and \"ina_allreduce\" traffic do not run in one scenario (the switches run one program)");
            }
            let Traffic::Training(spec) = &traffic[i] else { unreachable!() };
            crate::training_run::TrainingWorld::new(&topology, spec.clone(), seed).map_err(|r| {
                match r.split_once(": ") {
                    Some((fld, why)) if fld == "topology" => ScenarioError { field: fld.into(), reason: why.into() },
                    Some((fld, why)) if !fld.contains(' ') => {
                        ScenarioError { field: format!("traffic[{i}].{fld}"), reason: why.into() }
                    }
                    _ => ScenarioError { field: format!("traffic[{i}]"), reason: r },
                }
            })?;
        }
        if traffic.is_empty() {
            return e("traffic", "at least one [[traffic]] entry is needed");
        }
        let time_limit = match self.run.time_limit_us {
            Some(us) => Some(SimTime(ns_to_ps("run.time_limit_us", pos_f64("run.time_limit_us", us)? * 1000.0)?)),
            None => None,
        };
        if traffic.iter().all(|t| t.is_background()) && time_limit.is_none() {
            return e("run.time_limit_us", "is required when all traffic is background (random_uniform and random_permutation never end by themselves)");
        }
        // The watchdog must not cut short what a protocol's hosts recover by themselves.
        let recovery_ps = traffic
            .iter()
            .filter_map(|t| match t {
                Traffic::Ina(s) => Some(s.protocol.recovery_horizon_ps()),
                _ => None,
            })
            .max()
            .unwrap_or(0)
            .max(match transport {
                // An NDP sender retries up to MAX_TIMEOUTS + 1 timeouts in a row before it gives up.
                reducelab_net::TransportConfig::Ndp(c) => {
                    (reducelab_transport::ndp::MAX_TIMEOUTS as u64 + 2) * c.rto_ps
                }
                // A DCTCP sender's timeouts in a row double up to 2^MAX_BACKOFF times the
                // minimum, then stay there (with a factor 2 for RTOs above the minimum).
                reducelab_net::TransportConfig::Dctcp(c) => {
                    use reducelab_transport::dctcp::{MAX_BACKOFF, MAX_TIMEOUTS};
                    let rounds = (2u64 << MAX_BACKOFF) + (MAX_TIMEOUTS - MAX_BACKOFF) as u64 * (1 << MAX_BACKOFF) + 2;
                    2 * rounds * c.min_rto_ps
                }
                reducelab_net::TransportConfig::Dcqcn(_) => 0,
                reducelab_net::TransportConfig::None => 0,
            });
        let watchdog = match self.run.watchdog_us {
            Some(0.0) => None,
            Some(us) => {
                Some(SimDuration::from_ps(ns_to_ps("run.watchdog_us", pos_f64("run.watchdog_us", us)? * 1000.0)?))
            }
            None => Some(SimDuration::from_ps(DEFAULT_WATCHDOG_PS.max(recovery_ps))),
        };
        let mut faults = Vec::new();
        let mut link_loss = Vec::new();
        for (i, f) in self.faults.iter().enumerate() {
            let kname = match f.kind {
                FaultKind::Link => "link",
                FaultKind::Node => "node",
                FaultKind::Loss => "loss",
            };
            let unused = |field: &str, present: bool| -> Result<(), ScenarioError> {
                if present {
                    return e(format!("faults[{i}].{field}"), format!("is not used by kind = \"{kname}\""));
                }
                Ok(())
            };
            let link_of = |f: &FaultSpec| -> Result<u32, ScenarioError> {
                let link = req(&format!("faults[{i}].link"), f.link, kname)?;
                if link as usize >= topology.links.len() {
                    return e(
                        format!("faults[{i}].link"),
                        format!("link {link} does not exist (the topology has {} links)", topology.links.len()),
                    );
                }
                Ok(link)
            };
            let at = |f: &FaultSpec| -> Result<SimTime, ScenarioError> {
                let ns = req(&format!("faults[{i}].at_ns"), f.at_ns, kname)?;
                Ok(SimTime(ns_to_ps(&format!("faults[{i}].at_ns"), ns)?))
            };
            match f.kind {
                FaultKind::Link => {
                    unused("node", f.node.is_some())?;
                    unused("probability", f.probability.is_some())?;
                    faults.push(Fault::Link { link: link_of(f)?, at: at(f)? });
                }
                FaultKind::Node => {
                    unused("link", f.link.is_some())?;
                    unused("probability", f.probability.is_some())?;
                    let node = req(&format!("faults[{i}].node"), f.node, kname)?;
                    if node as usize >= topology.nodes.len() {
                        return e(
                            format!("faults[{i}].node"),
                            format!("node {node} does not exist (the topology has {} nodes)", topology.nodes.len()),
                        );
                    }
                    faults.push(Fault::Node { node, at: at(f)? });
                }
                FaultKind::Loss => {
                    unused("node", f.node.is_some())?;
                    unused("at_ns", f.at_ns.is_some())?;
                    let p = req(&format!("faults[{i}].probability"), f.probability, kname)?;
                    if !(0.0..=1.0).contains(&p) {
                        return e(format!("faults[{i}].probability"), format!("must be within [0, 1], got {p}"));
                    }
                    if p > 0.0 && matches!(transport, reducelab_net::TransportConfig::Dcqcn(_)) {
                        return e(format!("faults[{i}].probability"), "a lossy link under transport \"dcqcn\", which sends every packet once (it is for lossless networks)");
                    }
                    link_loss.push((link_of(f)?, p));
                }
            }
        }
        let (backend, backend_reason) =
            self.choose_backend(&topology, &net, &traffic, &faults, &link_loss, time_limit)?;
        // Build what the chosen backend runs (from the process-wide caches: a sweep over sizes
        // builds a schedule or plan once).
        for (i, t) in traffic.iter_mut().enumerate() {
            if let Traffic::Collective { hosts, algorithm, collective, layout, schedule, plan, .. } = t {
                let field = format!("traffic[{i}].algorithm");
                let cannot = |r: String| ScenarioError {
                    field: format!("traffic[{i}].algorithm"),
                    reason: format!("{algorithm} on {}: {r}", layout_name(&topology, layout)),
                };
                if backend == Backend::Flow {
                    *plan = Some(crate::collective_run::cached_plan(algorithm, layout).map_err(cannot)?);
                } else {
                    let max = reducelab_sched::registry::variant_entry(algorithm)
                        .map_err(|r| ScenarioError { field: field.clone(), reason: r })?
                        .max_ranks;
                    if hosts.len() as u64 > max as u64 {
                        return e(
                            format!("traffic[{i}].hosts"),
                            format!(
                                "{} ranks is more than the {max} that '{algorithm}' schedules support at packet level",
                                hosts.len()
                            ),
                        );
                    }
                    *schedule =
                        Some(crate::collective_run::cached_schedule(algorithm, *collective, layout).map_err(cannot)?);
                }
            }
        }
        Ok(Scenario {
            name: self.name.clone(),
            seed: seed_override.unwrap_or(self.seed),
            topology,
            net,
            backend,
            backend_reason,
            traffic,
            faults,
            link_loss,
            time_limit,
            watchdog,
            ina,
            endpoint,
            transport,
            raw_traffic,
        })
    }
}

/// What a collective's ranks are laid out on, for errors: the topology's spec (`torus:4x4x4`)
/// when the layout is the topology's own, else the layout's dimensions.
fn layout_name(topology: &Topology, layout: &reducelab_sched::algos::Layout) -> String {
    use reducelab_sched::TopologySpec as Spec;
    let spec = match &topology.shape {
        Shape::Torus { dims } => Some(Spec::Torus(dims.clone())),
        Shape::HyperX { dims } => Some(Spec::HyperX(dims.clone())),
        Shape::HammingMesh { board_x, board_y, grid_x, grid_y } => {
            Some(Spec::HammingMesh { board: (*board_x, *board_y), grid: (*grid_x, *grid_y) })
        }
        _ => None,
    };
    match spec {
        Some(s) if s.layout().dims == layout.dims => s.spec(),
        _ => format!("ranks laid out as {:?}", layout.dims),
    }
}

/// The flow backend's timing parameters for a network and its hosts' endpoint costs.
pub fn flow_config(net: &NetConfig, ep: &reducelab_net::EndpointConfig) -> reducelab_flow::FlowConfig {
    let endpoint = reducelab_flow::Endpoint {
        send_overhead_ps: ep.send_overhead_ps,
        send_latency_ps: ep.send_latency_ps,
        recv_overhead_ps: ep.recv_overhead_ps,
        recv_latency_ps: ep.recv_latency_ps,
        rendezvous_threshold_bytes: ep.rendezvous_threshold_bytes,
        injection_bps: ep.injection_bps,
    };
    reducelab_flow::FlowConfig {
        switch_latency_ps: net.switch_latency_ps,
        mtu_bytes: net.mtu_bytes,
        header_bytes: net.header_bytes,
        endpoint,
    }
}

/// Why `auto` runs `plan` at flow level at every size, if it does: the plan is
/// contention-free (one flow per link at a time, where the flow backend's recurrence equals
/// packet level exactly), or a packet-level data check would need more than
/// [`PACKET_MAX_FINGERPRINTS`] (rank, block) fingerprints.
pub fn flow_at_every_size(
    topology: &Topology,
    plan: &reducelab_sched::Plan,
    net: &NetConfig,
    ep: &reducelab_net::EndpointConfig,
) -> Result<Option<String>, String> {
    if reducelab_flow::is_contention_free(topology, plan, &flow_config(net, ep))? {
        return Ok(Some("contention-free: one flow per link at a time, flow level equals packet level".into()));
    }
    let pairs = plan.ranks as u64 * plan.blocks as u64;
    if pairs > PACKET_MAX_FINGERPRINTS {
        return Ok(Some(format!(
            "packet level would check {pairs} (rank, block) fingerprints (more than {PACKET_MAX_FINGERPRINTS})"
        )));
    }
    Ok(None)
}

impl ScenarioFile {
    /// Why the flow backend cannot run this scenario, if it cannot: it runs exactly one
    /// collective allreduce on all hosts (rank r on host r) from time 0 on a lossless,
    /// fault-free, noise-free network without ECN or a time limit.
    fn flow_obstacle(
        &self,
        topology: &Topology,
        net: &NetConfig,
        traffic: &[Traffic],
        faults: &[Fault],
        link_loss: &[(u32, f64)],
        time_limit: Option<SimTime>,
    ) -> Option<String> {
        let [t] = traffic else {
            return Some(format!(
                "it runs one collective allreduce, and the scenario has {} traffic entries",
                traffic.len()
            ));
        };
        let Traffic::Collective { hosts, start, collective, .. } = t else {
            return Some(format!("it runs one collective allreduce, and traffic[0] is kind = \"{}\"", t.kind()));
        };
        if *collective != reducelab_sched::Collective::Allreduce {
            return Some(format!("it runs an allreduce, and traffic[0] is a {collective:?}"));
        }
        if hosts.len() != topology.num_hosts() || hosts.iter().enumerate().any(|(r, &h)| h as usize != r) {
            return Some(
                "it places rank r on host r of every host, and traffic[0].hosts is not every host in order".into(),
            );
        }
        if *start != SimTime::ZERO {
            return Some("traffic[0].start_ns is not 0".into());
        }
        let packet_only = [
            (!faults.is_empty() || !link_loss.is_empty(), "the scenario has [[faults]]"),
            (net.loss_probability > 0.0, "network.loss_probability is not 0"),
            (net.noise_probability > 0.0, "noise.probability is not 0"),
            (net.ecn_threshold_bytes.is_some(), "network.ecn_threshold_bytes is set"),
            (net.flow_control == FlowControl::DropTail, "network.flow_control is \"drop_tail\""),
            (time_limit.is_some(), "run.time_limit_us is set"),
        ];
        packet_only.iter().find(|(is, _)| *is).map(|(_, why)| format!("{why} (packet level only)"))
    }

    /// `run.backend` resolved, and why (summary.json's `backend` and `backend_reason`).
    fn choose_backend(
        &self,
        topology: &Topology,
        net: &NetConfig,
        traffic: &[Traffic],
        faults: &[Fault],
        link_loss: &[(u32, f64)],
        time_limit: Option<SimTime>,
    ) -> Result<(Backend, String), ScenarioError> {
        let obstacle = || self.flow_obstacle(topology, net, traffic, faults, link_loss, time_limit);
        match self.run.backend {
            None => Ok((Backend::Packet, "default (run.backend not set)".into())),
            Some(Backend::Packet) => Ok((Backend::Packet, "set by run.backend".into())),
            Some(Backend::Flow) => match obstacle() {
                Some(why) => e("run.backend", format!("\"flow\" cannot run this scenario: {why}")),
                None => Ok((Backend::Flow, "set by run.backend".into())),
            },
            Some(Backend::Auto) => {
                if let Some(why) = obstacle() {
                    return Ok((Backend::Packet, format!("auto: the flow backend cannot run this scenario: {why}")));
                }
                let Traffic::Collective { algorithm, layout, bytes, .. } = &traffic[0] else {
                    unreachable!("checked by flow_obstacle")
                };
                let field = |r: String| ScenarioError {
                    field: "traffic[0].algorithm".into(),
                    reason: format!("{algorithm} on {}: {r}", layout_name(topology, layout)),
                };
                let plan = crate::collective_run::cached_plan(algorithm, layout).map_err(field)?;
                if let Some(why) = flow_at_every_size(topology, &plan, net, &self.endpoint.resolve()?).map_err(field)? {
                    return Ok((Backend::Flow, format!("auto: {why}")));
                }
                let min = self.run.flow_min_bytes.unwrap_or(AUTO_FLOW_MIN_BYTES);
                Ok(if *bytes >= min {
                    (Backend::Flow, format!("auto: {bytes} B is at least flow_min_bytes ({min} B)"))
                } else {
                    (Backend::Packet, format!("auto: below flow_min_bytes ({bytes} B < {min} B)"))
                })
            }
        }
    }
}

/// `trees` distinct random top-level switches (switches with no host attached; every switch
/// if all have hosts, as in a star), the static trees' roots (§5.2: picked at random).
fn random_roots(topology: &Topology, trees: u16, seed: u64) -> Vec<u32> {
    let switches: Vec<u32> =
        (0..topology.nodes.len() as u32).filter(|&i| topology.nodes[i as usize].host.is_none()).collect();
    let top: Vec<u32> = switches
        .iter()
        .copied()
        .filter(|&i| topology.nodes[i as usize].ports.iter().all(|p| topology.nodes[p.peer.idx()].host.is_none()))
        .collect();
    let mut pool = if top.is_empty() { switches } else { top };
    let mut rng = reducelab_des::Rng::new(seed);
    rng.shuffle(&mut pool);
    (0..trees as usize).map(|t| pool[t % pool.len()]).collect()
}

impl NoiseSpec {
    /// `noise.hosts` as host indices (`None`: every host).
    fn resolve_hosts(&self, traffic: &[Traffic], n: u32) -> Result<Option<Vec<u32>>, ScenarioError> {
        match &self.hosts {
            None => Ok(None),
            Some(HostsSpec::Keyword(k)) if k == "all" => Ok(None),
            Some(HostsSpec::Keyword(k)) if k == "foreground" => {
                let mut on = vec![false; n as usize];
                for t in traffic.iter().filter(|t| !t.is_background()) {
                    t.for_each_host(&mut |h| on[h as usize] = true);
                }
                Ok(Some((0..n).filter(|&h| on[h as usize]).collect()))
            }
            Some(HostsSpec::Keyword(k)) => {
                e("noise.hosts", format!("must be \"all\", \"foreground\" or a list of host indices, got \"{k}\""))
            }
            list => host_list("noise.hosts", list, n).map(Some),
        }
    }
}

impl InaSection {
    fn resolve(&self) -> Result<crate::ina_run::InaSwitchSpec, ScenarioError> {
        let d = crate::ina_run::InaSwitchSpec::default();
        let table_size = self.table_size.unwrap_or(d.table_size);
        if table_size == 0 || table_size > 1 << 24 {
            return e("ina.table_size", format!("must be within 1..=16777216, got {table_size}"));
        }
        if let Some(s) = self.slots_per_tenant {
            if s == 0 || s > table_size {
                return e("ina.slots_per_tenant", format!("must be within 1..=table_size ({table_size}), got {s}"));
            }
        }
        let pps = self.packets_per_second.unwrap_or(d.limits.packets_per_second);
        if !(pps.is_finite() && (1e3..=1e12).contains(&pps)) {
            return e("ina.packets_per_second", format!("must be within 1e3..=1e12, got {pps}"));
        }
        let ps = |field: &str, v: Option<f64>, scale: f64, default: u64| -> Result<u64, ScenarioError> {
            match v {
                None => Ok(default),
                Some(x) => ns_to_ps(field, x * scale),
            }
        };
        let timeout_ps = ps("ina.timeout_ns", self.timeout_ns, 1.0, d.timeout_ps)?;
        let sample_ps = ps("ina.sample_ns", self.sample_ns, 1.0, d.sample_ps)?;
        if sample_ps == 0 {
            return e("ina.sample_ns", "must be positive");
        }
        Ok(crate::ina_run::InaSwitchSpec {
            table_size,
            slots_per_tenant: self.slots_per_tenant,
            limits: reducelab_net::ProgramLimits {
                packets_per_second: pps,
                latency_ps: ps("ina.latency_ns", self.latency_ns, 1.0, d.limits.latency_ps)?,
            },
            reclaim_ps: ps("ina.reclaim_us", self.reclaim_us, 1000.0, d.reclaim_ps)?,
            timeout_ps,
            sample_ps,
            max_elements_per_packet: match self.max_elements_per_packet {
                None => d.max_elements_per_packet,
                Some(0) => return e("ina.max_elements_per_packet", "must be at least 1"),
                Some(m) => m,
            },
            wire_check: self.wire_check.unwrap_or(false),
        })
    }
}

fn resolve_traffic(f: &str, t: &TrafficSpec, topology: &Topology) -> Result<Traffic, ScenarioError> {
    let n = topology.num_hosts() as u32;
    let kind = match t.kind {
        Some(k) => k,
        None => return e(format!("{f}.kind"), "is required (messages, permutation, incast, random_uniform, random_permutation, collective, ina_allreduce, training)"),
    };
    let kname = match kind {
        TrafficKind::Messages => "messages",
        TrafficKind::Permutation => "permutation",
        TrafficKind::Incast => "incast",
        TrafficKind::RandomUniform => "random_uniform",
        TrafficKind::RandomPermutation => "random_permutation",
        TrafficKind::Collective => "collective",
        TrafficKind::InaAllreduce => "ina_allreduce",
        TrafficKind::Training => "training",
    };
    let used: &[&str] = match kind {
        TrafficKind::Messages => &["list"],
        TrafficKind::Permutation => &["hosts", "bytes", "start_ns"],
        TrafficKind::Incast => &["senders", "receiver", "bytes", "start_ns"],
        TrafficKind::RandomUniform => &["hosts", "bytes", "start_ns", "inflight"],
        TrafficKind::RandomPermutation => {
            &["hosts", "bytes", "start_ns", "inflight", "redraw", "epoch_ns", "rate_gbps"]
        }
        TrafficKind::Collective => &["hosts", "bytes", "start_ns", "algorithm", "collective", "dims"],
        TrafficKind::InaAllreduce => &[
            "hosts",
            "bytes",
            "start_ns",
            "protocol",
            "trees",
            "roots",
            "window",
            "elements_per_packet",
            "retransmit_timeout_us",
            "max_failures",
            "values",
            "bucket_elements",
            "index_overlap",
            "hash_slots",
        ],
        TrafficKind::Training => crate::training_run::KEYS,
    };
    for (name, is) in [
        ("hosts", t.hosts.is_some()),
        ("bytes", t.bytes.is_some()),
        ("start_ns", t.start_ns.is_some()),
        ("receiver", t.receiver.is_some()),
        ("senders", t.senders.is_some()),
        ("inflight", t.inflight.is_some()),
        ("list", t.list.is_some()),
        ("algorithm", t.algorithm.is_some()),
        ("collective", t.collective.is_some()),
        ("dims", t.dims.is_some()),
        ("protocol", t.protocol.is_some()),
        ("trees", t.trees.is_some()),
        ("roots", t.roots.is_some()),
        ("window", t.window.is_some()),
        ("elements_per_packet", t.elements_per_packet.is_some()),
        ("retransmit_timeout_us", t.retransmit_timeout_us.is_some()),
        ("max_failures", t.max_failures.is_some()),
        ("values", t.values.is_some()),
        ("bucket_elements", t.bucket_elements.is_some()),
        ("index_overlap", t.index_overlap.is_some()),
        ("hash_slots", t.hash_slots.is_some()),
        ("redraw", t.redraw.is_some()),
        ("epoch_ns", t.epoch_ns.is_some()),
        ("rate_gbps", t.rate_gbps.is_some()),
        ("jobs", t.jobs.is_some()),
        ("workers", t.workers.is_some()),
        ("models", t.models.is_some()),
        ("preemption", t.preemption.is_some()),
        ("switch_memory_bytes", t.switch_memory_bytes.is_some()),
        ("start_max_us", t.start_max_us.is_some()),
        ("jitter_max_us", t.jitter_max_us.is_some()),
        ("window_bytes", t.window_bytes.is_some()),
        ("min_rto_us", t.min_rto_us.is_some()),
        ("ps_restart_us", t.ps_restart_us.is_some()),
        ("model_scale", t.model_scale.is_some()),
        ("aggregation", t.aggregation.is_some()),
    ] {
        if is && !used.contains(&name) {
            return e(format!("{f}.{name}"), format!("is not a parameter of kind = \"{kname}\""));
        }
    }
    let start = SimTime(ns_to_ps(&format!("{f}.start_ns"), t.start_ns.unwrap_or(0.0))?);
    let bytes = |t: &TrafficSpec| -> Result<u64, ScenarioError> {
        let b = req(&format!("{f}.bytes"), t.bytes, kname)?;
        if b > 1 << 40 {
            return e(format!("{f}.bytes"), format!("{b} bytes is more than 1 TiB"));
        }
        Ok(b)
    };
    Ok(match kind {
        TrafficKind::Training => Traffic::Training(crate::training_run::resolve(f, t, topology)?),
        TrafficKind::Messages => {
            let list = match &t.list {
                Some(l) if !l.is_empty() => l,
                Some(_) => return e(format!("{f}.list"), "must not be empty"),
                None => return e(format!("{f}.list"), "is required for kind = \"messages\""),
            };
            let mut out = Vec::new();
            for (i, m) in list.iter().enumerate() {
                let [s, d, b, at] = *m;
                if s >= n as u64 || d >= n as u64 {
                    return e(
                        format!("{f}.list[{i}]"),
                        format!("host {} does not exist (the topology has {n} hosts)", s.max(d)),
                    );
                }
                if b > 1 << 40 {
                    return e(format!("{f}.list[{i}]"), "message larger than 1 TiB");
                }
                // The same bound as every other time of the format (1e18 ps, about 11.6 days):
                // beyond it the start used to be clamped silently to the end of time.
                if at > MAX_TIME_NS {
                    return e(
                        format!("{f}.list[{i}][3]"),
                        format!("start {at} ns is too large (at most {MAX_TIME_NS} ns)"),
                    );
                }
                out.push((s as u32, d as u32, b, SimTime(at * 1000)));
            }
            Traffic::Messages { list: out }
        }
        TrafficKind::Permutation => {
            let hosts = host_list(&format!("{f}.hosts"), &t.hosts, n)?;
            if hosts.len() < 2 {
                return e(format!("{f}.hosts"), "a permutation needs at least two hosts");
            }
            Traffic::Permutation { hosts, bytes: bytes(t)?, start }
        }
        TrafficKind::Incast => {
            let receiver = req(&format!("{f}.receiver"), t.receiver, kname)?;
            if receiver >= n {
                return e(
                    format!("{f}.receiver"),
                    format!("host {receiver} does not exist (the topology has {n} hosts)"),
                );
            }
            let senders = match &t.senders {
                Some(_) => host_list(&format!("{f}.senders"), &t.senders.clone().map(HostsSpec::List), n)?,
                None => (0..n).filter(|&h| h != receiver).collect(),
            };
            if let Some(i) = senders.iter().position(|&s| s == receiver) {
                return e(format!("{f}.senders[{i}]"), "the receiver cannot be a sender");
            }
            if senders.is_empty() {
                return e(format!("{f}.senders"), "must not be empty");
            }
            Traffic::Incast { senders, receiver, bytes: bytes(t)?, start }
        }
        TrafficKind::RandomUniform => {
            let hosts = host_list(&format!("{f}.hosts"), &t.hosts, n)?;
            if hosts.len() < 2 {
                return e(format!("{f}.hosts"), "random uniform traffic needs at least two hosts");
            }
            let inflight = t.inflight.unwrap_or(1);
            if inflight == 0 || inflight > 1024 {
                return e(format!("{f}.inflight"), format!("must be within 1..=1024, got {inflight}"));
            }
            let b = bytes(t)?;
            if b == 0 {
                return e(format!("{f}.bytes"), "background messages must carry at least one byte");
            }
            Traffic::RandomUniform { hosts, bytes: b, inflight, start }
        }
        TrafficKind::RandomPermutation => {
            use crate::workload::Redraw;
            let hosts = host_list(&format!("{f}.hosts"), &t.hosts, n)?;
            if hosts.len() < 2 {
                return e(format!("{f}.hosts"), "a permutation without fixed points needs at least two hosts");
            }
            let inflight = t.inflight.unwrap_or(1);
            if inflight == 0 || inflight > 1024 {
                return e(format!("{f}.inflight"), format!("must be within 1..=1024, got {inflight}"));
            }
            let b = bytes(t)?;
            if b == 0 {
                return e(format!("{f}.bytes"), "background messages must carry at least one byte");
            }
            let redraw = match (t.redraw.as_deref().unwrap_or("message"), t.epoch_ns) {
                ("message", None) => Redraw::Message,
                ("message", Some(_)) => return e(format!("{f}.epoch_ns"), "applies only with redraw = \"epoch\""),
                ("epoch", None) => return e(format!("{f}.epoch_ns"), "is required with redraw = \"epoch\""),
                ("epoch", Some(ns)) => {
                    let ps = ns_to_ps(&format!("{f}.epoch_ns"), pos_f64(&format!("{f}.epoch_ns"), ns)?)?;
                    if ps == 0 {
                        return e(format!("{f}.epoch_ns"), format!("must be at least 1 ps, got {ns} ns"));
                    }
                    Redraw::Epoch { epoch_ps: ps }
                }
                (other, _) => {
                    return e(format!("{f}.redraw"), format!("must be \"message\" or \"epoch\", got \"{other}\""))
                }
            };
            let rate_bps = match t.rate_gbps {
                None => None,
                Some(g) => Some(gbps_to_bps(&format!("{f}.rate_gbps"), g)?.max(1)),
            };
            Traffic::RandomPermutation(crate::workload::RandomPermutation {
                hosts,
                bytes: b,
                inflight,
                start,
                redraw,
                rate_bps,
            })
        }
        TrafficKind::InaAllreduce => {
            let hosts = host_list(&format!("{f}.hosts"), &t.hosts, n)?;
            if hosts.len() > u16::MAX as usize {
                return e(
                    format!("{f}.hosts"),
                    format!("{} hosts; the 2-byte hosts field holds at most 65535", hosts.len()),
                );
            }
            let b = bytes(t)?;
            let epp = t.elements_per_packet.unwrap_or(256);
            if epp == 0 || epp > 2048 {
                return e(format!("{f}.elements_per_packet"), format!("must be within 1..=2048, got {epp}"));
            }
            let blocks = b.div_ceil(4).max(1).div_ceil(epp as u64);
            if blocks > reducelab_ina::host::MAX_BLOCKS as u64 {
                return e(
                    format!("{f}.bytes"),
                    format!(
                        "{blocks} blocks of {epp} elements exceed the 20-bit block id ({})",
                        reducelab_ina::host::MAX_BLOCKS
                    ),
                );
            }
            let protocol_name = t.protocol.as_deref().unwrap_or("canary");
            let Some(info) = reducelab_ina::protocol(protocol_name) else {
                return e(
                    format!("{f}.protocol"),
                    format!("must be one of {}, got \"{protocol_name}\"", reducelab_ina::protocol_names()),
                );
            };
            // The protocol's own keys go to its registry entry, which validates them.
            let mut params = reducelab_ina::Params::new();
            for (key, value) in [
                ("trees", t.trees.map(|x| x as f64)),
                ("window", t.window.map(|x| x as f64)),
                ("retransmit_timeout_us", t.retransmit_timeout_us),
                ("max_failures", t.max_failures.map(|x| x as f64)),
                ("bucket_elements", t.bucket_elements.map(|x| x as f64)),
                ("index_overlap", t.index_overlap),
                ("hash_slots", t.hash_slots.map(|x| x as f64)),
            ] {
                if let Some(v) = value {
                    params.insert(key.to_string(), v);
                }
            }
            let protocol = (info.build)(&params)
                .map_err(|pe| ScenarioError { field: format!("{f}.{}", pe.key), reason: pe.reason })?;
            if let Some(r) = &t.roots {
                if !info.takes_roots {
                    return e(format!("{f}.roots"), format!("is not used by protocol = \"{protocol_name}\""));
                }
                let trees = protocol
                    .as_any()
                    .downcast_ref::<reducelab_ina::tree::StaticTrees>()
                    .map(|p| p.trees as usize)
                    .unwrap_or(r.len());
                if r.len() != trees {
                    return e(format!("{f}.roots"), format!("{} roots for {trees} trees", r.len()));
                }
                for (k, &node) in r.iter().enumerate() {
                    if node as usize >= topology.nodes.len() || topology.nodes[node as usize].host.is_some() {
                        return e(format!("{f}.roots[{k}]"), format!("node {node} is not a switch"));
                    }
                }
            }
            let values = t.values.unwrap_or(hosts.len() as u64 * b <= 64 << 20);
            Traffic::Ina(crate::ina_run::InaSpec {
                hosts,
                bytes: b,
                start,
                protocol,
                elems_per_packet: epp,
                values,
                roots: t.roots.clone().unwrap_or_default(),
            })
        }
        TrafficKind::Collective => {
            use reducelab_sched::algos::Layout;
            use reducelab_sched::{registry, Collective};
            let hosts = host_list(&format!("{f}.hosts"), &t.hosts, n)?;
            let collective = match t.collective.as_deref().unwrap_or("allreduce") {
                "allreduce" => Collective::Allreduce,
                "reduce_scatter" => Collective::ReduceScatter,
                "allgather" => Collective::Allgather,
                other => {
                    return e(
                        format!("{f}.collective"),
                        format!("must be allreduce, reduce_scatter or allgather, got \"{other}\""),
                    )
                }
            };
            let name = match &t.algorithm {
                Some(a) => a.clone(),
                None => {
                    return e(
                        format!("{f}.algorithm"),
                        format!("is required for kind = \"collective\" (one of {})", registry::names().join(", ")),
                    )
                }
            };
            let p = hosts.len() as u32;
            let dims = match &t.dims {
                Some(d) => d.clone(),
                None => match &topology.shape {
                    Shape::Torus { dims } | Shape::HyperX { dims } if p == n => dims.clone(),
                    Shape::HammingMesh { board_x, board_y, grid_x, grid_y } if p == n => {
                        vec![board_x * grid_x, board_y * grid_y]
                    }
                    _ => vec![p],
                },
            };
            let layout =
                Layout::new(dims.clone()).map_err(|r| ScenarioError { field: format!("{f}.dims"), reason: r })?;
            if layout.ranks() != p {
                return e(
                    format!("{f}.dims"),
                    format!("{dims:?} holds {} ranks but {p} hosts take part", layout.ranks()),
                );
            }
            // Before a family is resolved for the size (which models the schedules).
            if p > registry::MAX_RANKS {
                return e(
                    format!("{f}.hosts"),
                    format!(
                        "{p} ranks is more than the {} that any schedule or timing plan supports",
                        registry::MAX_RANKS
                    ),
                );
            }
            // A family, alias or policy runs the variant it resolves to for this size, with the
            // α-β parameters of the topology's links (registry::Costs::for_links).
            let size = bytes(t)?;
            if size == 0 {
                return e(format!("{f}.bytes"), "a collective needs at least one byte");
            }
            let slowest = topology.links.iter().min_by_key(|l| l.bandwidth_bps);
            let costs =
                registry::Costs::for_links(slowest.map_or(1, |l| l.bandwidth_bps), slowest.map_or(0, |l| l.latency_ps));
            let variant = registry::resolve(&name, collective, &layout, size, &costs, false)
                .map_err(|r| ScenarioError { field: format!("{f}.algorithm"), reason: r })?;
            // The schedule (packet) or plan (flow) is built once the backend is known.
            Traffic::Collective {
                hosts,
                bytes: size,
                start,
                algorithm: variant.name,
                collective,
                layout,
                schedule: None,
                plan: None,
            }
        }
    })
}

/// Duration helper used by reports.
pub fn ps_to_us(ps: u64) -> f64 {
    SimDuration(ps).as_secs_f64() * 1e6
}
