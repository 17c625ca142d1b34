//! Backend choice: `run.backend` (packet, flow, auto), what keeps the flow backend from a
//! scenario, the `auto` rule, and the flow backend's configuration.

use super::{e, ScenarioFile, Traffic};
use crate::ScenarioError;
use reducelab_des::SimTime;
use reducelab_net::{Fault, FlowControl, NetConfig};
use reducelab_topo::{Shape, Topology};
use serde::Deserialize;

/// `run.backend`: which simulator times the scenario.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Backend {
    /// The packet engine (every scenario; data verified).
    Packet,
    /// Pipelined fluid flows on fixed minimal paths (`reducelab_flow`): one allreduce on all
    /// hosts (`run_plan`), or GOAL and Chakra traces (`FlowNet`); no data carried.
    Flow,
    /// Flow for a scenario the flow backend can run whose collective is contention-free, too
    /// large to check at packet level, or at least `run.flow_min_bytes`; packet otherwise.
    Auto,
    /// GOAL traces timed in LogGOPSim's LogGP model (`reducelab_goal::loggp`, parameters in
    /// `[loggp]`): no network, no topology beyond the hosts' count.
    #[serde(rename = "loggp")]
    LogGp,
}

impl Backend {
    pub const NAMES: &'static [&'static str] = &["packet", "flow", "auto", "loggp"];

    pub fn parse(name: &str) -> Result<Backend, String> {
        match name {
            "packet" => Ok(Backend::Packet),
            "flow" => Ok(Backend::Flow),
            "auto" => Ok(Backend::Auto),
            "loggp" => Ok(Backend::LogGp),
            _ => Err(format!("unknown backend '{name}' (known: {})", Backend::NAMES.join(", "))),
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Backend::Packet => "packet",
            Backend::Flow => "flow",
            Backend::Auto => "auto",
            Backend::LogGp => "loggp",
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

/// What a collective's ranks are laid out on, for errors: the topology's spec (`torus:4x4x4`)
/// when the layout is the topology's own, else the layout's dimensions.
pub(super) fn layout_name(topology: &Topology, layout: &reducelab_sched::algos::Layout) -> String {
    use reducelab_sched::TopologyShape as Spec;
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

/// The first trace entry with collectives served in-network (packet level only), if any.
fn innet_trace(traffic: &[Traffic]) -> Option<usize> {
    traffic.iter().position(|t| matches!(t, Traffic::Goal(g) if !g.ina.is_empty()))
}

impl ScenarioFile {
    /// Why the flow backend cannot run this scenario, if it cannot: it runs exactly one
    /// collective allreduce on all hosts (rank r on host r) from time 0, or (with `traces`)
    /// GOAL and Chakra traces only, on a lossless, fault-free, noise-free network without ECN
    /// or a time limit.
    #[allow(clippy::too_many_arguments)]
    fn flow_obstacle(
        &self,
        topology: &Topology,
        net: &NetConfig,
        traffic: &[Traffic],
        faults: &[Fault],
        link_loss: &[(u32, f64)],
        time_limit: Option<SimTime>,
        traces: bool,
    ) -> Option<String> {
        let packet_only = [
            (!faults.is_empty() || !link_loss.is_empty(), "the scenario has [[faults]]"),
            (net.loss_probability > 0.0, "network.loss_probability is not 0"),
            (net.duplicate_probability > 0.0, "network.duplicate_probability is not 0"),
            (net.reorder_probability > 0.0, "network.reorder_probability is not 0"),
            (net.noise_probability > 0.0, "noise.probability is not 0"),
            (net.ecn_threshold_bytes.is_some(), "network.ecn_threshold_bytes is set"),
            (net.flow_control == FlowControl::DropTail, "network.flow_control is \"drop_tail\""),
            (time_limit.is_some(), "run.time_limit_us is set"),
        ];
        let packet_only =
            || packet_only.iter().find(|(is, _)| *is).map(|(_, why)| format!("{why} (packet level only)"));
        let goal = |t: &Traffic| matches!(t, Traffic::Goal(_));
        if traces && traffic.iter().any(goal) {
            return match traffic.iter().position(|t| !goal(t)) {
                Some(i) => Some(format!(
                    "it runs GOAL and Chakra traces only or one collective allreduce, and traffic[{i}] is kind = \"{}\" beside traces",
                    traffic[i].kind()
                )),
                None => packet_only(),
            };
        }
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
        packet_only()
    }

    /// `run.backend` resolved, and why (summary.json's `backend` and `backend_reason`).
    pub(super) fn choose_backend(
        &self,
        topology: &Topology,
        net: &NetConfig,
        traffic: &[Traffic],
        faults: &[Fault],
        link_loss: &[(u32, f64)],
        time_limit: Option<SimTime>,
    ) -> Result<(Backend, String), ScenarioError> {
        // `auto` picks flow for one allreduce only: GOAL and Chakra traces run at flow level
        // when `run.backend = "flow"` asks for it.
        let obstacle = |traces| self.flow_obstacle(topology, net, traffic, faults, link_loss, time_limit, traces);
        match self.run.backend {
            None => Ok((Backend::Packet, "default (run.backend not set)".into())),
            Some(Backend::Packet) => Ok((Backend::Packet, "set by run.backend".into())),
            Some(Backend::LogGp) => match traffic.iter().position(|t| !matches!(t, Traffic::Goal(_))) {
                Some(i) => e(
                    "run.backend",
                    format!(
                        "\"loggp\" times GOAL and Chakra traces only, and traffic[{i}] is kind = \"{}\"",
                        traffic[i].kind()
                    ),
                ),
                None => Ok((Backend::LogGp, "set by run.backend".into())),
            },
            Some(Backend::Flow) if innet_trace(traffic).is_some() => {
                let i = innet_trace(traffic).expect("checked");
                let Traffic::Goal(g) = &traffic[i] else { unreachable!("innet_trace finds trace entries") };
                e(
                    format!("traffic[{i}].algorithms.all_reduce"),
                    format!(
                        "\"{}\" is an in-network protocol, which runs at packet level only, \
                         and run.backend is \"flow\"",
                        g.ina[0].protocol.info().name
                    ),
                )
            }
            Some(Backend::Flow) => match obstacle(true) {
                Some(why) => e("run.backend", format!("\"flow\" cannot run this scenario: {why}")),
                None => Ok((Backend::Flow, "set by run.backend".into())),
            },
            Some(Backend::Auto) => {
                if let Some(why) = obstacle(false) {
                    return Ok((Backend::Packet, format!("auto: the flow backend cannot run this scenario: {why}")));
                }
                let Traffic::Collective { algorithm, layout, bytes, imported, .. } = &traffic[0] else {
                    unreachable!("checked by flow_obstacle")
                };
                let field = |r: String| ScenarioError {
                    field: "traffic[0].algorithm".into(),
                    reason: format!("{algorithm} on {}: {r}", layout_name(topology, layout)),
                };
                let plan =
                    crate::schedule_cache::collective_plan(algorithm, layout, imported.as_ref()).map_err(field)?;
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
