//! Transport and endpoint resolution: `[transport]` (NDP, DCTCP, DCQCN) with the network it
//! needs, the per-traffic transport overrides, and `[endpoint]`'s host costs.

use super::units::{gbps_to_bps, ns_to_ps, pos_f64};
use super::{e, ArbitrationSpec, EndpointSpec, FlowControlSpec, NetworkSpec, ScenarioFile, TrafficKind};
use super::{TransportKindSpec, TransportSpec};
use crate::ScenarioError;

impl TransportKindSpec {
    pub const ALL: [TransportKindSpec; 4] =
        [TransportKindSpec::None, TransportKindSpec::Ndp, TransportKindSpec::Dctcp, TransportKindSpec::Dcqcn];

    /// The `[transport]` keys this kind takes besides `kind` (the one list: a key of another
    /// kind is refused with it, and an unknown key's error lists it).
    pub fn keys(self) -> &'static [&'static str] {
        match self {
            TransportKindSpec::None => &[],
            TransportKindSpec::Ndp => &["initial_window_packets", "data_queue_packets", "rto_us"],
            TransportKindSpec::Dctcp => &["initial_window_packets", "g", "min_rto_us"],
            TransportKindSpec::Dcqcn => &[
                "g",
                "alpha_interval_us",
                "increase_interval_us",
                "byte_counter_bytes",
                "fast_recovery_steps",
                "rai_gbps",
                "rhai_gbps",
                "min_rate_gbps",
                "cnp_interval_us",
            ],
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
    /// Whether each kind-owned key is set (every field but `kind`), by name: the names are
    /// tested against the schema's own field list.
    pub fn set_keys(&self) -> [(&'static str, bool); 13] {
        [
            ("initial_window_packets", self.initial_window_packets.is_some()),
            ("data_queue_packets", self.data_queue_packets.is_some()),
            ("rto_us", self.rto_us.is_some()),
            ("g", self.g.is_some()),
            ("min_rto_us", self.min_rto_us.is_some()),
            ("alpha_interval_us", self.alpha_interval_us.is_some()),
            ("increase_interval_us", self.increase_interval_us.is_some()),
            ("byte_counter_bytes", self.byte_counter_bytes.is_some()),
            ("fast_recovery_steps", self.fast_recovery_steps.is_some()),
            ("rai_gbps", self.rai_gbps.is_some()),
            ("rhai_gbps", self.rhai_gbps.is_some()),
            ("min_rate_gbps", self.min_rate_gbps.is_some()),
            ("cnp_interval_us", self.cnp_interval_us.is_some()),
        ]
    }

    /// The run's transport, of kind `kind` (`[transport].kind`, or the one a `[[traffic]]`
    /// entry names), with `[transport]`'s parameters.
    fn resolve(
        &self,
        kind: TransportKindSpec,
        nw: &NetworkSpec,
        endpoint: &EndpointSpec,
    ) -> Result<reducelab_net::TransportConfig, ScenarioError> {
        for (key, set) in self.set_keys() {
            if set && !kind.keys().contains(&key) {
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
}
