//! Network resolution beyond the topology: the router, RED marking, line-rate buffer sizing,
//! the hosts noise applies to, and the in-network switch resources (`[ina]`).

use super::traffic::host_list;
use super::units::ns_to_ps;
use super::{e, FlowControlSpec, HostsSpec, InaSection, NetworkSpec, NoiseSpec, RouterSpec, Traffic};
use crate::ScenarioError;

/// `network.router` and its input-buffered keys (each defaults to `buffer_bytes`, the speedup
/// to 1.0); the keys without `router = "input_buffered"` are an error naming them.
pub(super) fn resolve_router(nw: &NetworkSpec, buffer_bytes: u64) -> Result<reducelab_net::RouterKind, ScenarioError> {
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

/// `network.ecn_kmax_bytes` and `network.ecn_pmax`: RED marking above Kmin.
pub(super) fn resolve_ecn_red(nw: &NetworkSpec) -> Result<Option<reducelab_net::EcnRed>, ScenarioError> {
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

impl NoiseSpec {
    /// `noise.hosts` as host indices (`None`: every host).
    pub(super) fn resolve_hosts(&self, traffic: &[Traffic], n: u32) -> Result<Option<Vec<u32>>, ScenarioError> {
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
    pub(super) fn resolve(&self) -> Result<crate::ina::InaSwitchSpec, ScenarioError> {
        let d = crate::ina::InaSwitchSpec::default();
        let table_size = self.table_size.unwrap_or(d.table_size);
        if table_size == 0 || table_size > 1 << 24 {
            return e("ina.table_size", format!("must be within 1..=16777216, got {table_size}"));
        }
        match (self.switch_memory_bytes, self.table_size) {
            (Some(_), Some(_)) => {
                return e(
                    "ina.switch_memory_bytes",
                    "gives the switch memory in bytes, table_size in aggregator slots: give one of them",
                )
            }
            (Some(0), None) => return e("ina.switch_memory_bytes", "must be positive"),
            _ => {}
        }
        if let (Some(_), Some(_)) = (self.switch_memory_bytes, self.slots_per_tenant) {
            return e(
                "ina.slots_per_tenant",
                "a static partition is given in slots: use table_size, not switch_memory_bytes",
            );
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
        Ok(crate::ina::InaSwitchSpec {
            table_size,
            switch_memory_bytes: self.switch_memory_bytes,
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
