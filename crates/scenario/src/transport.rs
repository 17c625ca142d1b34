//! Transport and endpoint resolution: `[transport]` (NDP, DCTCP, DCQCN) with the network it
//! needs, the per-traffic transport overrides, and `[endpoint]`'s host costs.

use super::units::{gbps_to_bps, ns_to_ps, pos_f64};
use super::{e, ArbitrationSpec, EndpointSpec, FlowControlSpec, NetworkSpec, ScenarioFile, TrafficKind};
use super::{DcqcnKeys, DctcpKeys, NdpKeys, TransportKindSpec, TransportParams, TransportSpec};
use crate::ScenarioError;

impl TransportKindSpec {
    pub const ALL: [TransportKindSpec; 4] =
        [TransportKindSpec::None, TransportKindSpec::Ndp, TransportKindSpec::Dctcp, TransportKindSpec::Dcqcn];

    /// The `[transport]` keys this kind takes besides `kind`, as its schema struct declares
    /// them (a key of another kind is refused with the kinds that take it, and an unknown key's
    /// error lists these).
    pub fn keys(self) -> &'static [&'static str] {
        use super::schema::{fields_of, DcqcnKeys, DctcpKeys, NdpKeys, NoTransportKeys};
        match self {
            TransportKindSpec::None => fields_of::<NoTransportKeys>(),
            TransportKindSpec::Ndp => fields_of::<NdpKeys>(),
            TransportKindSpec::Dctcp => fields_of::<DctcpKeys>(),
            TransportKindSpec::Dcqcn => fields_of::<DcqcnKeys>(),
        }
    }

    pub fn name(self) -> &'static str {
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
        for &key in &self.written {
            if !kind.keys().contains(&key) {
                let names: Vec<String> = TransportKindSpec::ALL
                    .iter()
                    .filter(|k| k.keys().contains(&key))
                    .map(|k| format!("\"{}\"", k.name()))
                    .collect();
                return e(
                    format!("transport.{key}"),
                    format!("applies only with kind = {} (kind is \"{}\")", names.join(" or "), kind.name()),
                );
            }
        }
        let (ndp, dctcp, dcqcn) = (NdpKeys::default(), DctcpKeys::default(), DcqcnKeys::default());
        let (ndp, dctcp, dcqcn) = match &self.params {
            TransportParams::None(_) => (&ndp, &dctcp, &dcqcn),
            TransportParams::Ndp(p) => (p, &dctcp, &dcqcn),
            TransportParams::Dctcp(p) => (&ndp, p, &dcqcn),
            TransportParams::Dcqcn(p) => (&ndp, &dctcp, p),
        };
        if let Some(key) = self.written.first().filter(|_| self.params.kind() != kind) {
            return e(
                format!("transport.{key}"),
                format!(
                    "is a parameter of kind = \"{}\", but the run's transport is \"{}\" (named by its traffic)",
                    self.params.kind().name(),
                    kind.name()
                ),
            );
        }
        match kind {
            TransportKindSpec::None => return Ok(reducelab_net::TransportConfig::None),
            TransportKindSpec::Dctcp => return resolve_dctcp(dctcp, nw, endpoint),
            TransportKindSpec::Dcqcn => return resolve_dcqcn(dcqcn, nw, endpoint),
            TransportKindSpec::Ndp => {}
        }
        let p = ndp;
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
        let initial_window_packets = p.initial_window_packets.unwrap_or(d.initial_window_packets);
        if initial_window_packets == 0 {
            return e("transport.initial_window_packets", "must be >= 1");
        }
        let data_queue_packets = p.data_queue_packets.unwrap_or(d.data_queue_packets);
        if data_queue_packets == 0 {
            return e("transport.data_queue_packets", "must be >= 1");
        }
        let rto_ps = match p.rto_us {
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
}

impl TransportParams {
    /// The kind these parameters were read for.
    pub fn kind(&self) -> TransportKindSpec {
        match self {
            TransportParams::None(_) => TransportKindSpec::None,
            TransportParams::Ndp(_) => TransportKindSpec::Ndp,
            TransportParams::Dctcp(_) => TransportKindSpec::Dctcp,
            TransportParams::Dcqcn(_) => TransportKindSpec::Dcqcn,
        }
    }
}

fn resolve_dcqcn(
    p: &DcqcnKeys,
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
        return e(
            "transport.kind",
            "\"dcqcn\" needs network.loss_probability = 0: it sends every packet once (it is for lossless networks)",
        );
    }
    if nw.ecn_threshold_bytes.is_none() {
        return e("transport.kind", "\"dcqcn\" needs network.ecn_threshold_bytes (its receivers turn ECN marks into CNPs; add network.ecn_kmax_bytes and ecn_pmax for the paper's RED marking)");
    }
    if endpoint.rendezvous_threshold_bytes.is_some() {
        return e("transport.kind", "\"dcqcn\" does not combine with endpoint.rendezvous_threshold_bytes");
    }
    let d = reducelab_net::DcqcnConfig::default();
    let g = p.g.unwrap_or(d.g);
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
    let byte_counter_bytes = p.byte_counter_bytes.unwrap_or(d.byte_counter_bytes);
    if byte_counter_bytes == 0 {
        return e("transport.byte_counter_bytes", "must be >= 1");
    }
    Ok(reducelab_net::TransportConfig::Dcqcn(reducelab_net::DcqcnConfig {
        g,
        alpha_interval_ps: us("transport.alpha_interval_us", p.alpha_interval_us, d.alpha_interval_ps)?,
        increase_interval_ps: us("transport.increase_interval_us", p.increase_interval_us, d.increase_interval_ps)?,
        byte_counter_bytes,
        fast_recovery_steps: p.fast_recovery_steps.unwrap_or(d.fast_recovery_steps),
        rai_bps: rate("transport.rai_gbps", p.rai_gbps, d.rai_bps)?,
        rhai_bps: rate("transport.rhai_gbps", p.rhai_gbps, d.rhai_bps)?,
        min_rate_bps: rate("transport.min_rate_gbps", p.min_rate_gbps, d.min_rate_bps)?,
        cnp_interval_ps: us("transport.cnp_interval_us", p.cnp_interval_us, d.cnp_interval_ps)?,
    }))
}

fn resolve_dctcp(
    p: &DctcpKeys,
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
    let initial_window_packets = p.initial_window_packets.unwrap_or(d.initial_window_packets);
    if initial_window_packets == 0 {
        return e("transport.initial_window_packets", "must be >= 1");
    }
    let g = p.g.unwrap_or(d.g);
    if !(g > 0.0 && g <= 1.0) {
        return e("transport.g", format!("must be > 0 and <= 1 (the paper's 1/16 = 0.0625), got {g}"));
    }
    let min_rto_ps = match p.min_rto_us {
        Some(us) => ns_to_ps("transport.min_rto_us", pos_f64("transport.min_rto_us", us)? * 1000.0)?,
        None => d.min_rto_ps,
    };
    if min_rto_ps == 0 {
        return e("transport.min_rto_us", "must be at least 1 ps");
    }
    Ok(reducelab_net::TransportConfig::Dctcp(reducelab_net::DctcpConfig { initial_window_packets, g, min_rto_ps }))
}

impl EndpointSpec {
    pub(super) fn resolve(&self) -> Result<reducelab_net::EndpointConfig, ScenarioError> {
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

impl ScenarioFile {
    /// The run's transport and the traffic entries that go without it. A `[[traffic]]`
    /// entry's `transport` overrides `[transport].kind` for its messages; a run carries at
    /// most one transport besides `"none"`, and a check that fails for a kind an entry named
    /// names that entry.
    pub(super) fn resolve_transports(
        &self,
        nw: &NetworkSpec,
    ) -> Result<(reducelab_net::TransportConfig, Vec<u64>), ScenarioError> {
        let mut kinds = Vec::with_capacity(self.traffic.len());
        let mut named: Option<(usize, TransportKindSpec)> = None;
        for (i, t) in self.traffic.iter().enumerate() {
            // In-network protocol packets keep their own recovery (such an entry has no
            // `transport` key).
            if matches!(t.kind(), TrafficKind::InaAllreduce | TrafficKind::Training) {
                kinds.push(TransportKindSpec::None);
                continue;
            }
            let k = t.transport().unwrap_or(self.transport.kind);
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
}
