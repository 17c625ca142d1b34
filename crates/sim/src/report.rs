//! Result files: `summary.json`, `messages.csv`, `links.csv`, and the terminal table.
//! Everything here is a pure function of the finished network: no wall-clock values, so the
//! files are byte-identical for the same scenario and seed.

use crate::scenario::Scenario;
use crate::workload::ScenarioWorkload;
use reducelab_net::{Network, RunEnd, Workload};
use reducelab_topo::LinkClass;
use serde_json::{json, Value};
use std::fmt::Write;

fn percentile(sorted: &[u64], q: f64) -> u64 {
    if sorted.is_empty() {
        return 0;
    }
    let rank = ((q * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
    sorted[rank - 1]
}

/// summary.json `network.router`: the switch kind as the scenario names it (`network.router`),
/// with the input-buffered router's sizes.
fn router_json(r: &reducelab_net::RouterKind) -> Value {
    match r {
        reducelab_net::RouterKind::OutputQueued => json!({ "kind": "output_queued" }),
        reducelab_net::RouterKind::InputBuffered(ib) => json!({
            "kind": "input_buffered",
            "input_buffer_bytes": ib.input_buffer_bytes,
            "output_buffer_bytes": ib.output_buffer_bytes,
            "crossbar_speedup": ib.crossbar_speedup,
        }),
    }
}

/// summary.json `endpoint`: the per-host endpoint costs the run charged (`[endpoint]`; zero and
/// null = not charged), so a result says which calibration made it.
fn endpoint_json(e: &reducelab_net::EndpointConfig) -> Value {
    json!({
        "send_overhead_ps": e.send_overhead_ps,
        "send_latency_ps": e.send_latency_ps,
        "recv_overhead_ps": e.recv_overhead_ps,
        "recv_latency_ps": e.recv_latency_ps,
        "rendezvous_threshold_bytes": e.rendezvous_threshold_bytes,
        "injection_bps": e.injection_bps,
    })
}

/// The transport counters of the messages `ids`, summed (summary.json `traffic[i].transport`).
fn message_transport_json(net: &Network, ids: impl Iterator<Item = reducelab_net::MsgId>) -> Value {
    let mut sum = reducelab_net::MessageTransport::default();
    for id in ids {
        let t = net.message_transport(id).unwrap_or_default();
        sum.retransmissions += t.retransmissions;
        sum.trims += t.trims;
        sum.nacks += t.nacks;
        sum.pulls += t.pulls;
        sum.timeouts += t.timeouts;
        sum.duplicates += t.duplicates;
        sum.marks_echoed += t.marks_echoed;
        sum.fast_retransmits += t.fast_retransmits;
        sum.cnps += t.cnps;
        sum.rate_decreases += t.rate_decreases;
    }
    match net.transport() {
        reducelab_net::TransportConfig::Dcqcn(_) => json!({
            "cnps": sum.cnps,
            "rate_decreases": sum.rate_decreases,
            "duplicates": sum.duplicates,
        }),
        reducelab_net::TransportConfig::Dctcp(_) => json!({
            "retransmissions": sum.retransmissions,
            "timeouts": sum.timeouts,
            "fast_retransmits": sum.fast_retransmits,
            "marks_echoed": sum.marks_echoed,
            "duplicates": sum.duplicates,
        }),
        _ => serde_json::to_value(sum).expect("json"),
    }
}

fn fct_summary(mut fcts: Vec<u64>) -> Value {
    fcts.sort_unstable();
    let mean = if fcts.is_empty() { 0.0 } else { fcts.iter().map(|&x| x as f64).sum::<f64>() / fcts.len() as f64 };
    json!({
        "min": fcts.first().copied().unwrap_or(0),
        "p50": percentile(&fcts, 0.5),
        "p99": percentile(&fcts, 0.99),
        "max": fcts.last().copied().unwrap_or(0),
        "mean": mean,
    })
}

/// How a run ended: summary.json's `status` and the exit code of `reducelab run`
/// (docs/engine.md, "Run status and exit codes").
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RunStatus {
    /// Every finite workload finished and every result was verified on every host.
    Completed,
    /// Everything finished but some result is wrong (lost, duplicated or mixed data).
    Unverified,
    /// A finite workload could not finish.
    Stalled,
    /// The scenario's time limit came before the finite workloads finished.
    TimeLimit,
    /// Stopped from outside (a signal); the files hold what was measured so far.
    Interrupted,
}

impl RunStatus {
    pub const ALL: [RunStatus; 5] =
        [RunStatus::Completed, RunStatus::Unverified, RunStatus::Stalled, RunStatus::TimeLimit, RunStatus::Interrupted];

    pub fn as_str(self) -> &'static str {
        match self {
            RunStatus::Completed => "completed",
            RunStatus::Unverified => "unverified",
            RunStatus::Stalled => "stalled",
            RunStatus::TimeLimit => "time_limit",
            RunStatus::Interrupted => "interrupted",
        }
    }
}

/// The status of a run from how the event loop ended (`end`), what is still unfinished
/// (`unfinished`: the workload's account, `None` when every finite workload finished) and
/// what is wrong (`wrong`: results that failed verification), with the reason to report.
///
/// Precedence: an interruption is reported as such whatever else happened; then a stall; then
/// the time limit if work was unfinished; then wrong data. A stalled run with wrong data says
/// both in its reason.
pub fn classify(end: &RunEnd, unfinished: Option<&str>, wrong: Option<&str>) -> (RunStatus, Option<String>) {
    let also = |r: String| match wrong {
        Some(w) => format!("{r}; also wrong results: {w}"),
        None => r,
    };
    match (end, unfinished) {
        (RunEnd::Interrupted, u) => (
            RunStatus::Interrupted,
            Some(also(match u {
                Some(u) => format!("interrupted (signal) with work unfinished: {u}"),
                None => "interrupted (signal)".into(),
            })),
        ),
        (RunEnd::Stalled { reason }, _) => (RunStatus::Stalled, Some(also(reason.clone()))),
        (RunEnd::TimeLimit, Some(u)) => {
            (RunStatus::TimeLimit, Some(also(format!("run.time_limit_us came first: {u}"))))
        }
        (_, Some(u)) => (RunStatus::Stalled, Some(also(u.to_string()))),
        (_, None) => match wrong {
            Some(w) => (RunStatus::Unverified, Some(w.to_string())),
            None => (RunStatus::Completed, None),
        },
    }
}

pub struct Report {
    pub status: RunStatus,
    /// `ina_memory.csv`: descriptor occupancy over time, when there is in-network traffic.
    pub ina_memory_csv: Option<String>,
    /// `ina_switches.csv`: per-switch descriptor peak, mean and protocol counters.
    pub ina_switches_csv: Option<String>,
    /// `training_jobs.csv` and `training_memory.csv` of training jobs, `goal_ranks.csv` (and
    /// `goal_ops_<traffic>.csv` with `ops = true`) of GOAL traces.
    pub workload_files: Vec<(String, String)>,
    pub summary: Value,
    pub messages_csv: String,
    pub links_csv: String,
    pub table: String,
}

pub fn build(sc: &Scenario, net: &Network, w: &ScenarioWorkload, end: &RunEnd) -> Report {
    let unfinished = w.unfinished(net);
    let mut wrong = Vec::new();
    let now = net.now().ps();
    let msgs = net.messages();
    let verified = msgs.iter().filter(|m| m.verified()).count();
    let completed = msgs.iter().filter(|m| m.is_complete()).count();
    // A delivered message whose bytes or fingerprints disagree: lost or duplicated data.
    let corrupted = msgs.iter().filter(|m| m.is_complete() && !m.verified()).count();
    // Background generators are cut off when the foreground ends; their last messages are
    // legitimately incomplete. Foreground messages must all arrive.
    let fg_incomplete = msgs.iter().filter(|m| !m.is_complete() && !w.traffic[m.tag as usize].is_background()).count();
    // Per traffic generator.
    let collectives = w.collective_results();
    let goals = w.goal_results();
    let chakras = w.chakra_results();
    let ina_results = w.ina.as_ref().map(|x| x.results()).unwrap_or_default();
    if corrupted > 0 {
        wrong.push(format!("{corrupted} messages delivered with wrong bytes or fingerprints"));
    }
    let mut traffic = Vec::new();
    let mut ina_k = 0;
    for (ti, t) in w.traffic.iter().enumerate() {
        if let (crate::scenario::Traffic::Training(_), Some(x)) = (t, w.training.as_ref()) {
            let jobs = x.job_results();
            let bad: u64 = jobs.iter().map(|r| r.bad_results).sum();
            if bad > 0 {
                wrong.push(format!("training traffic[{ti}]: {bad} wrong aggregation results"));
            }
            let t = x.totals();
            traffic.push(json!({
                "kind": "training",
                "background": false,
                "protocol": t.protocol,
                "jobs": jobs,
                "messages": 0,
                "completed": jobs.iter().filter(|r| r.jct_ps.is_some()).count(),
                "verified": jobs.iter().filter(|r| r.verified).count(),
                "mean_jct_ps": t.mean_jct_ps,
                "fct_ps": fct_summary(Vec::new()),
                "throughput_gbps": 0.0,
            }));
            continue;
        }
        if let crate::scenario::Traffic::InaTraining(tr) = t {
            let jobs = ina_training_jobs(tr, &ina_results[ina_k..ina_k + tr.specs.len()]);
            ina_k += tr.specs.len();
            let bad: u64 = jobs.iter().map(|r| r.bad_blocks).sum();
            if bad > 0 {
                wrong.push(format!("training traffic[{ti}]: {bad} bad blocks"));
            }
            let jcts: Vec<u64> = jobs.iter().filter_map(|r| r.jct_ps).collect();
            traffic.push(json!({
                "kind": "training",
                "background": false,
                "protocol": tr.protocol.label(),
                "jobs": jobs,
                "messages": 0,
                "completed": jcts.len(),
                "verified": jobs.iter().filter(|r| r.verified).count(),
                "mean_jct_ps": (jcts.len() == jobs.len() && !jcts.is_empty())
                    .then(|| jcts.iter().sum::<u64>() as f64 / jcts.len() as f64),
                "fct_ps": fct_summary(Vec::new()),
                "throughput_gbps": 0.0,
            }));
            continue;
        }
        if let crate::scenario::Traffic::Ina(_) = t {
            let r = &ina_results[ina_k];
            ina_k += 1;
            if r.bad_blocks > 0 {
                wrong.push(format!("ina_allreduce traffic[{ti}]: {} bad blocks over {} hosts", r.bad_blocks, r.hosts));
            }
            let mut v = serde_json::to_value(r).expect("json");
            v["kind"] = json!(t.kind());
            v["background"] = json!(false);
            v["messages"] = json!(0);
            v["completed"] = json!(r.hosts_finished);
            v["verified"] = json!(if r.verified { r.hosts } else { 0 });
            v["fct_ps"] = fct_summary(Vec::new());
            v["throughput_gbps"] = json!(r.goodput_gbps.unwrap_or(0.0));
            traffic.push(v);
            continue;
        }
        // A trace's collectives served in-network.
        let innet = &ina_results[ina_k..ina_k + t.ina_specs().len()];
        ina_k += innet.len();
        let mine: Vec<_> = msgs.iter().filter(|m| m.tag == ti as u64).collect();
        let fcts: Vec<u64> = mine.iter().filter_map(|m| m.completion_time().map(|d| d.ps())).collect();
        let first = mine.iter().map(|m| m.start.ps()).min().unwrap_or(0);
        let last = mine.iter().filter(|m| m.is_complete()).map(|m| m.end.ps()).max().unwrap_or(0);
        let delivered: u64 = mine.iter().filter(|m| m.is_complete()).map(|m| m.bytes).sum();
        let span = last.saturating_sub(first);
        if let Some((_, r)) = goals.iter().find(|(i, _)| *i == ti) {
            if r.mismatched_receives > 0 {
                wrong.push(format!(
                    "goal traffic[{ti}]: {} receives got another message than MPI's matching names",
                    r.mismatched_receives
                ));
            }
            let mut v = serde_json::to_value(r).expect("json");
            v["kind"] = json!(t.kind());
            v["background"] = json!(false);
            if let crate::scenario::Traffic::Goal(g) = t {
                chakra_summary(g, chakras.iter().find(|(i, _)| *i == ti).map(|(_, c)| c), &mut v);
            }
            if !innet.is_empty() {
                let bad: u64 = innet.iter().map(|r| r.bad_blocks).sum();
                if bad > 0 {
                    wrong.push(format!("{} traffic[{ti}]: {bad} bad blocks in its in-network collectives", t.kind()));
                }
                let verified = innet.iter().filter(|r| r.verified).count();
                v["verified"] = json!(r.verified && verified == innet.len());
                v["in_network"] = json!({
                    "protocol": innet[0].protocol,
                    "collectives": innet.len(),
                    "verified": verified,
                    "bad_blocks": bad,
                    "values_checked": innet.iter().all(|r| r.values_checked),
                });
            }
            v["messages_verified"] = json!(mine.iter().filter(|m| m.verified()).count());
            v["completed"] = json!(w.counters[ti].completed);
            v["fct_ps"] = fct_summary(fcts);
            v["throughput_gbps"] =
                json!(if span > 0 { delivered as f64 * 8.0 / (span as f64 * 1e-12) / 1e9 } else { 0.0 });
            traffic.push(v);
            continue;
        }
        if let Some((_, r)) = collectives.iter().find(|(i, _)| *i == ti) {
            if r.end.is_some() && !r.verified {
                wrong.push(format!("collective traffic[{ti}]: {}", r.mismatch.clone().unwrap_or_default()));
            }
            traffic.push(json!({
                "kind": t.kind(),
                "background": false,
                "algorithm": r.algorithm,
                "collective": format!("{:?}", r.collective),
                "ranks": r.ranks,
                "bytes": r.bytes,
                "messages": mine.len(),
                "completed": w.counters[ti].completed,
                // Every rank finished with the sum of all ranks' blocks (packet level).
                "verified": r.end.is_some() && r.verified,
                "messages_verified": mine.iter().filter(|m| m.verified()).count(),
                "result_verified": r.verified,
                "mismatch": r.mismatch,
                "runtime_ps": r.runtime_ps(),
                "goodput_gbps": r.goodput_gbps(),
                "buffer_bytes": sc.net.buffer_bytes,
                "fct_ps": fct_summary(fcts),
                "throughput_gbps": r.goodput_gbps().unwrap_or(0.0),
            }));
            continue;
        }
        let mut entry = json!({
            "kind": t.kind(),
            "background": t.is_background(),
            "messages": mine.len(),
            "completed": w.counters[ti].completed,
            "verified": mine.iter().filter(|m| m.verified()).count(),
            "bytes_delivered": delivered,
            "first_start_ps": first,
            "last_end_ps": last,
            "fct_ps": fct_summary(fcts),
            "throughput_gbps": if span > 0 { delivered as f64 * 8.0 / (span as f64 * 1e-12) / 1e9 } else { 0.0 },
        });
        if net.transport_stats().is_some() && net.transport_carries(ti as u64) {
            let ids = msgs
                .iter()
                .enumerate()
                .filter(|(_, m)| m.tag == ti as u64)
                .map(|(i, _)| reducelab_net::MsgId(i as u32));
            entry["transport"] = message_transport_json(net, ids);
        }
        traffic.push(entry);
    }
    let ports = net.port_stats();
    let topo = &sc.topology;
    let mut utils: Vec<f64> = Vec::with_capacity(ports.len());
    // With a transport: each port's trims in one more column (without, the file is as it was).
    let trims = net.port_trims();
    // With PFC: each direction's pauses, paused time and peak downstream ingress, likewise.
    let pfc_ports = net.pfc_port_stats();
    let mut links_csv = String::from("link,from_node,from_port,to_node,to_port,bytes,packets,utilization,max_queue_bytes,mean_queue_bytes,drops,ecn_marks,kind");
    if trims.is_some() {
        links_csv.push_str(",trims");
    }
    if pfc_ports.is_some() {
        links_csv.push_str(",pfc_pauses,pfc_paused_ps,pfc_max_ingress_bytes");
    }
    links_csv.push('\n');
    let mut net_utils = Vec::new();
    for (pi, p) in ports.iter().enumerate() {
        let u = if now > 0 { p.busy_ps as f64 / now as f64 } else { 0.0 };
        utils.push(u);
        // `network`: every link that is not a host's link to its switch (switch–switch links,
        // and on direct networks every link, board links included).
        let is_host = topo.links[p.link as usize].class == LinkClass::Host;
        if !is_host {
            net_utils.push(u);
        }
        let _ = write!(
            links_csv,
            "{},{},{},{},{},{},{},{:.6},{},{:.1},{},{},{}",
            p.link,
            p.node,
            p.port,
            p.peer_node,
            p.peer_port,
            p.bytes,
            p.packets,
            u,
            p.max_queue_bytes,
            p.mean_queue_bytes,
            p.drops,
            p.ecn_marks,
            if is_host { "host" } else { "network" }
        );
        if let Some(t) = &trims {
            let _ = write!(links_csv, ",{}", t[pi]);
        }
        if let Some(f) = &pfc_ports {
            let _ = write!(links_csv, ",{},{},{}", f[pi].pauses, f[pi].paused_ps, f[pi].max_ingress_bytes);
        }
        links_csv.push('\n');
    }
    let mean = |v: &[f64]| if v.is_empty() { 0.0 } else { v.iter().sum::<f64>() / v.len() as f64 };
    let maxf = |v: &[f64]| v.iter().cloned().fold(0.0f64, f64::max);
    // With a transport: its per-message counters in more columns (without, the file is as it was).
    let tp = net.transport_stats().is_some();
    let dctcp = matches!(net.transport(), reducelab_net::TransportConfig::Dctcp(_));
    let dcqcn = matches!(net.transport(), reducelab_net::TransportConfig::Dcqcn(_));
    let mut messages_csv = String::from("id,src,dst,bytes,start_ps,end_ps,fct_ps,verified");
    messages_csv.push_str(match (tp, dctcp, dcqcn) {
        (true, true, _) => ",retransmissions,timeouts,fast_retransmits,marks_echoed,duplicates\n",
        (true, _, true) => ",cnps,rate_decreases\n",
        (true, _, _) => ",retransmissions,trims,nacks,pulls,timeouts,duplicates\n",
        _ => "\n",
    });
    for (i, m) in msgs.iter().enumerate() {
        let (end_s, fct_s) = match m.completion_time() {
            Some(d) => (m.end.ps().to_string(), d.ps().to_string()),
            None => (String::new(), String::new()),
        };
        let _ = write!(
            messages_csv,
            "{i},{},{},{},{},{end_s},{fct_s},{}",
            m.src,
            m.dst,
            m.bytes,
            m.start.ps(),
            m.verified()
        );
        match net.message_transport(reducelab_net::MsgId(i as u32)) {
            Some(t) if dcqcn => {
                let _ = writeln!(messages_csv, ",{},{}", t.cnps, t.rate_decreases);
            }
            Some(t) if dctcp => {
                let _ = writeln!(
                    messages_csv,
                    ",{},{},{},{},{}",
                    t.retransmissions, t.timeouts, t.fast_retransmits, t.marks_echoed, t.duplicates
                );
            }
            Some(t) => {
                let _ = writeln!(
                    messages_csv,
                    ",{},{},{},{},{},{}",
                    t.retransmissions, t.trims, t.nacks, t.pulls, t.timeouts, t.duplicates
                );
            }
            None => messages_csv.push('\n'),
        }
    }
    let s = net.stats();
    let wrong = (!wrong.is_empty()).then(|| wrong.join("; "));
    let (status, reason) = classify(end, unfinished.as_deref(), wrong.as_deref());
    let end_kind = status.as_str();
    let summary = json!({
        "scenario": sc.name,
        "seed": sc.seed,
        "status": end_kind,
        "status_reason": reason,
        "backend": sc.backend.name(),
        "backend_reason": sc.backend_reason,
        "sim_time_ps": now,
        "topology": {
            "name": topo.name,
            "hosts": topo.num_hosts(),
            "switches": topo.num_switches(),
            "links": topo.links.len(),
            "ports": topo.num_ports(),
        },
        "network": {
            "mtu_bytes": sc.net.mtu_bytes,
            "header_bytes": sc.net.header_bytes,
            "switch_latency_ps": sc.net.switch_latency_ps,
            "buffer_bytes": sc.net.buffer_bytes,
            "flow_control": format!("{:?}", sc.net.flow_control),
            "routing": format!("{:?}", sc.net.routing),
            "virtual_channels": net.vc_policy().num_vcs(),
            "router": router_json(&sc.net.router),
        },
        "endpoint": endpoint_json(&sc.endpoint),
        "messages": {
            "count": msgs.len(),
            "completed": completed,
            "verified": verified,
            "corrupted": corrupted,
            "foreground_incomplete": fg_incomplete,
            "fct_ps": fct_summary(msgs.iter().filter_map(|m| m.completion_time().map(|d| d.ps())).collect()),
        },
        "traffic": traffic,
        "links": {
            "directions": ports.len(),
            "mean_utilization": mean(&utils),
            "max_utilization": maxf(&utils),
            "network_mean_utilization": mean(&net_utils),
            // The same as mean_utilization, named for what it averages: every directed link,
            // host links included (the Canary paper's "average of all the links").
            "all_mean_utilization": mean(&utils),
            "total_bytes": ports.iter().map(|p| p.bytes).sum::<u64>(),
            "max_queue_bytes": ports.iter().map(|p| p.max_queue_bytes).max().unwrap_or(0),
        },
        "drops": {
            "buffer": s.drops_buffer,
            "loss": s.drops_loss,
            "failure": s.drops_failure,
            "no_route": s.drops_no_route,
        },
        "ecn_marks": s.ecn_marks,
        "ina": w.ina.as_ref().map(|x| serde_json::to_value(x.totals()).expect("json")),
        "engine": {
            "events": s.events,
            "packets": s.packets_created,
            "packet_hops": s.packet_hops,
            "peak_packets_in_flight": s.peak_packets_in_flight,
        },
    });
    let mut summary = summary;
    if sc.net.duplicate_probability > 0.0 || sc.net.reorder_probability > 0.0 {
        // Only with these faults on: the other runs' summaries stay as they were.
        // Protocol packets the duplication fault sent twice and the reordering fault held back.
        summary["packet_faults"] = json!({ "duplicated": s.duplicated_packets, "held": s.held_packets });
    }
    if let Some(t) = &w.training {
        // Only in training runs: the other runs' summaries stay as they were.
        summary["training"] = serde_json::to_value(t.totals()).expect("json");
    }
    if let Some(p) = net.pfc_stats() {
        let mut v = serde_json::to_value(&p).expect("json");
        // The configured thresholds (null: derived per link, see docs/scenario-format.md).
        v["xoff_bytes"] = json!(sc.net.pfc.xoff_bytes);
        v["xon_bytes"] = json!(sc.net.pfc.xon_bytes);
        v["headroom_bytes"] = json!(sc.net.pfc.headroom_bytes);
        summary["pfc"] = v;
    }
    if sc.net.spray {
        // Only when chosen: the default runs' summaries stay as they were.
        summary["network"]["spray"] = json!("packet");
    }
    if let (reducelab_net::TransportConfig::Ndp(c), Some(t)) = (net.transport(), net.transport_stats()) {
        let mut v = serde_json::to_value(t).expect("json");
        v["kind"] = json!("ndp");
        v["initial_window_packets"] = json!(c.initial_window_packets);
        v["data_queue_packets"] = json!(c.data_queue_packets);
        v["rto_ps"] = json!(c.rto_ps);
        summary["transport"] = v;
    }
    if let (reducelab_net::TransportConfig::Dcqcn(c), Some(t)) = (net.transport(), net.transport_stats()) {
        summary["transport"] = json!({
            "kind": "dcqcn",
            "g": c.g,
            "alpha_interval_ps": c.alpha_interval_ps,
            "increase_interval_ps": c.increase_interval_ps,
            "byte_counter_bytes": c.byte_counter_bytes,
            "fast_recovery_steps": c.fast_recovery_steps,
            "rai_bps": c.rai_bps,
            "rhai_bps": c.rhai_bps,
            "min_rate_bps": c.min_rate_bps,
            "cnp_interval_ps": c.cnp_interval_ps,
            "marked_packets": t.marked_packets,
            "cnps": t.cnps,
            "rate_decreases": t.rate_decreases,
            "fast_recoveries": t.fast_recoveries,
            "additive_increases": t.additive_increases,
            "hyper_increases": t.hyper_increases,
        });
    }
    if let (reducelab_net::TransportConfig::Dctcp(c), Some(t)) = (net.transport(), net.transport_stats()) {
        summary["transport"] = json!({
            "kind": "dctcp",
            "initial_window_packets": c.initial_window_packets,
            "g": c.g,
            "min_rto_ps": c.min_rto_ps,
            "retransmissions": t.retransmissions,
            "timeouts": t.timeouts,
            "fast_retransmits": t.fast_retransmits,
            "acks": t.acks,
            "marks_echoed": t.marks_echoed,
            "ecn_reductions": t.ecn_reductions,
            "duplicates": t.duplicates,
            "senders_gave_up": t.senders_gave_up,
        });
    }
    let mut table = String::new();
    let _ = writeln!(table, "scenario   {}  (seed {})", sc.name, sc.seed);
    let _ = writeln!(
        table,
        "topology   {}: {} hosts, {} switches, {} links",
        topo.name,
        topo.num_hosts(),
        topo.num_switches(),
        topo.links.len()
    );
    let _ = writeln!(table, "status     {end_kind} at {:.3} us simulated", now as f64 * 1e-6);
    let _ = writeln!(table, "backend    packet ({})", sc.backend_reason);
    if let Some(r) = &reason {
        let _ = writeln!(table, "why        {r}");
    }
    let _ = writeln!(
        table,
        "{:<16} {:>9} {:>9} {:>9} {:>12} {:>12} {:>12} {:>10}",
        "traffic", "messages", "done", "verified", "fct p50 us", "fct p99 us", "fct max us", "Gb/s"
    );
    for t in summary["traffic"].as_array().unwrap() {
        let f = &t["fct_ps"];
        let us = |v: &Value| v.as_u64().unwrap_or(0) as f64 * 1e-6;
        let _ = writeln!(
            table,
            "{:<16} {:>9} {:>9} {:>9} {:>12.3} {:>12.3} {:>12.3} {:>10.1}",
            t["kind"].as_str().unwrap(),
            t["messages"].as_u64().unwrap_or(0),
            t["completed"].as_u64().unwrap_or(0),
            t["messages_verified"].as_u64().or(t["verified"].as_u64()).unwrap_or(0),
            us(&f["p50"]),
            us(&f["p99"]),
            us(&f["max"]),
            t["throughput_gbps"].as_f64().unwrap_or(0.0)
        );
    }
    for (_, r) in &collectives {
        let _ = writeln!(
            table,
            "collective {} {:?} on {} ranks, {} bytes: runtime {} us, goodput {:.1} Gb/s, result {}",
            r.algorithm,
            r.collective,
            r.ranks,
            r.bytes,
            r.runtime_ps().map_or("-".into(), |t| format!("{:.3}", t as f64 * 1e-6)),
            r.goodput_gbps().unwrap_or(0.0),
            if r.verified {
                "verified on every rank".to_string()
            } else {
                format!("WRONG: {}", r.mismatch.clone().unwrap_or_default())
            }
        );
    }
    for (ti, c) in &chakras {
        if let crate::scenario::Traffic::Goal(g) = &w.traffic[*ti] {
            chakra_table_line(&mut table, *ti, g, c);
        }
    }
    // The `ina_allreduce` entries' allreduces (a training entry's are its jobs, below).
    let mut ina_k = 0;
    let mut own = Vec::new();
    for t in &w.traffic {
        let n = t.ina_specs().len();
        if let (crate::scenario::Traffic::Goal(g), true) = (t, n > 0) {
            let mine = &ina_results[ina_k..ina_k + n];
            let bad: u64 = mine.iter().map(|r| r.bad_blocks).sum();
            let _ = writeln!(
                table,
                "in-network {} {} collectives of {} on {} hosts each: results {}",
                n,
                mine[0].protocol,
                g.file,
                mine[0].hosts,
                if mine.iter().all(|r| r.verified) {
                    format!(
                        "verified on every host{}",
                        if mine.iter().all(|r| r.values_checked) {
                            " (fingerprints and values)"
                        } else {
                            " (fingerprints)"
                        }
                    )
                } else {
                    format!("NOT VERIFIED: {bad} bad blocks")
                }
            );
        } else if let crate::scenario::Traffic::InaTraining(tr) = t {
            let jobs = ina_training_jobs(tr, &ina_results[ina_k..ina_k + n]);
            let jcts: Vec<u64> = jobs.iter().filter_map(|r| r.jct_ps).collect();
            let _ = writeln!(
                table,
                "training   {} jobs on {}: mean JCT {} us, results {}",
                jobs.len(),
                tr.protocol.label(),
                if jcts.len() == jobs.len() && !jcts.is_empty() {
                    format!("{:.1}", jcts.iter().sum::<u64>() as f64 / jcts.len() as f64 * 1e-6)
                } else {
                    "-".into()
                },
                if jobs.iter().all(|r| r.verified) { "verified on every worker" } else { "NOT VERIFIED" }
            );
        } else {
            own.extend(ina_k..ina_k + n);
        }
        ina_k += n;
    }
    for r in own.iter().map(|&k| &ina_results[k]) {
        let _ = writeln!(
            table,
            "in-network {} on {} hosts, {} bytes: runtime {} us, goodput {:.1} Gb/s, result {}",
            r.protocol,
            r.hosts,
            r.bytes,
            r.runtime_ps.map_or("-".into(), |t| format!("{:.3}", t as f64 * 1e-6)),
            r.goodput_gbps.unwrap_or(0.0),
            if r.verified {
                format!(
                    "verified on every host{}",
                    if r.values_checked { " (fingerprints and values)" } else { " (fingerprints)" }
                )
            } else {
                format!("NOT VERIFIED: {} of {} hosts finished, {} bad blocks", r.hosts_finished, r.hosts, r.bad_blocks)
            }
        );
    }
    if let Some(x) = w.training.as_ref() {
        let t = x.totals();
        let jobs = x.job_results();
        let _ = writeln!(
            table,
            "training   {} jobs on {}: mean JCT {} us, memory utilisation {}, results {}",
            t.jobs,
            t.protocol,
            t.mean_jct_ps.map_or("-".into(), |v| format!("{:.1}", v * 1e-6)),
            t.memory_utilization.map_or("-".into(), |u| format!("{:.1}%", 100.0 * u)),
            if jobs.iter().all(|r| r.verified) {
                format!(
                    "verified on every worker{}",
                    if t.values_checked { " (fingerprints and values)" } else { " (fingerprints)" }
                )
            } else {
                "NOT VERIFIED".into()
            }
        );
        let _ = writeln!(
            table,
            "aggregators {} per switch, peak {} in use, mean {:.0}; {} fallbacks, {} preemptions, {} reminder notices, {} PS reminders, {} retransmissions, {} lost packets, {} left",
            t.aggregators_per_switch,
            t.peak_aggregators_in_use,
            t.mean_aggregators_in_use,
            t.switch.fallbacks,
            t.switch.preemptions,
            t.workers.reminder_notices,
            t.ps.reminders,
            t.workers.retransmissions,
            t.lost_packets,
            t.aggregators_left
        );
    }
    if let Some(x) = w.ina.as_ref() {
        let t = x.totals();
        let _ = writeln!(
            table,
            "switches   peak {} descriptors ({} B) on one switch; {} collisions, {} stragglers, {} lost packets, {} descriptors left",
            t.peak_descriptors, t.peak_descriptor_bytes, t.collisions, t.stragglers, t.lost_packets, t.descriptors_left
        );
    }
    let _ = writeln!(
        table,
        "links      mean utilisation {:.1}% (network links {:.1}%), max {:.1}%; drops {}; ECN marks {}",
        100.0 * mean(&utils),
        100.0 * mean(&net_utils),
        100.0 * maxf(&utils),
        s.drops_buffer + s.drops_loss + s.drops_failure + s.drops_no_route,
        s.ecn_marks
    );
    if let Some(p) = net.pfc_stats() {
        let _ = writeln!(
            table,
            "pfc        {} pause and {} resume frames; egress paused {:.3} us in total; peak ingress {} B (xoff + headroom {} B)",
            p.pause_frames,
            p.resume_frames,
            p.paused_ps as f64 * 1e-6,
            p.max_ingress_bytes,
            p.min_xoff_plus_headroom_bytes
        );
    }
    if let (reducelab_net::TransportConfig::Dcqcn(_), Some(t)) = (net.transport(), net.transport_stats()) {
        let _ = writeln!(
            table,
            "transport  dcqcn: {} marked data packets, {} CNPs sent, {} rate decreases, {} fast recoveries, {} additive and {} hyper increases",
            t.marked_packets, t.cnps, t.rate_decreases, t.fast_recoveries, t.additive_increases, t.hyper_increases
        );
    } else if let (reducelab_net::TransportConfig::Dctcp(_), Some(t)) = (net.transport(), net.transport_stats()) {
        let _ = writeln!(
            table,
            "transport  dctcp: {} retransmissions ({} fast retransmits, {} timeouts), {} ACKs ({} echoing a mark), {} ECN window cuts, {} duplicates",
            t.retransmissions, t.fast_retransmits, t.timeouts, t.acks, t.marks_echoed, t.ecn_reductions, t.duplicates
        );
    } else if let Some(t) = net.transport_stats() {
        let _ = writeln!(
            table,
            "transport  ndp: {} trims, {} retransmissions, {} timeouts, {} NACKs, {} pulls ({} as PULL packets), {} duplicates, {} headers/control dropped",
            t.trims, t.retransmissions, t.timeouts, t.nacks, t.pulls, t.pull_packets, t.duplicates, t.priority_drops
        );
    }
    let ina_memory_csv = w.ina.as_ref().map(|x| {
        let mut c = String::from("time_ps,busiest_switch_descriptors,all_switches_descriptors\n");
        for (t, b, a) in &x.occupancy {
            let _ = writeln!(c, "{t},{b},{a}");
        }
        c
    });
    let ina_switches_csv = w.ina.as_ref().map(|x| x.switches_csv());
    let mut workload_files = w.training.as_ref().map_or(Vec::new(), |x| {
        vec![("training_jobs.csv".into(), x.jobs_csv()), ("training_memory.csv".into(), x.memory_csv())]
    });
    if !goals.is_empty() {
        workload_files.push(("goal_ranks.csv".into(), goal_ranks_csv(&goals)));
    }
    for (ti, csv) in w.goal_ops_csv() {
        workload_files.push((format!("goal_ops_{ti}.csv"), csv));
    }
    let chakra_jobs: Vec<_> = chakras
        .iter()
        .filter_map(|(ti, c)| match &w.traffic[*ti] {
            crate::scenario::Traffic::Goal(g) => g.chakra.as_deref().map(|j| (*ti, j, c)),
            _ => None,
        })
        .collect();
    workload_files.extend(chakra_files(&chakra_jobs));
    Report { status, summary, messages_csv, links_csv, table, ina_memory_csv, ina_switches_csv, workload_files }
}

/// `summary.json` and the terminal table of a run at flow level (`run.backend` resolved to
/// flow): one allreduce on every host, timed by `reducelab_flow::run_plan`. Nothing is carried,
/// so nothing is verified (`verified` is null) and the run is `completed` once timed. `r` is
/// `None` for a probe ([`crate::RunOptions::probe`]): nothing timed, status `time_limit`.
pub fn build_flow(
    sc: &Scenario,
    algorithm: &str,
    ranks: usize,
    bytes: u64,
    r: Option<&reducelab_flow::FlowResult>,
) -> (Value, String) {
    let (status, reason) = match r {
        Some(_) => (RunStatus::Completed, None),
        None => (RunStatus::TimeLimit, Some("a probe: stopped at 1 ps, before the flow backend timed anything")),
    };
    let zero = reducelab_flow::FlowResult { runtime_ps: 0, messages: 0, events: 0, contention_free: false };
    let r = r.unwrap_or(&zero);
    let goodput = (r.runtime_ps > 0).then(|| bytes as f64 * 8.0 / (r.runtime_ps as f64 * 1e-12) / 1e9);
    let runtime = (status == RunStatus::Completed).then_some(r.runtime_ps);
    let summary = flow_summary(
        sc,
        status,
        reason,
        r.runtime_ps,
        (r.messages, r.messages as usize),
        json!([{
            "kind": "collective",
            "background": false,
            "algorithm": algorithm,
            "collective": "Allreduce",
            "ranks": ranks,
            "bytes": bytes,
            "messages": r.messages,
            "completed": r.messages,
            "verified": Value::Null,
            "mismatch": Value::Null,
            "runtime_ps": runtime,
            "goodput_gbps": goodput,
            "buffer_bytes": sc.net.buffer_bytes,
            "throughput_gbps": goodput.unwrap_or(0.0),
        }]),
        json!({
            "contention_free": r.contention_free,
            "events": r.events,
        }),
    );
    let mut table = flow_head(sc, status, reason, r.runtime_ps);
    let _ = writeln!(table, "backend    flow ({})", sc.backend_reason);
    let _ = writeln!(
        table,
        "collective {algorithm} Allreduce on {ranks} ranks, {bytes} bytes: runtime {:.3} us, goodput {:.1} Gb/s, {} messages, not verified (flow level carries no data)",
        r.runtime_ps as f64 * 1e-6,
        goodput.unwrap_or(0.0),
        r.messages
    );
    (summary, table)
}

/// `summary.json` of a flow-level run: what every flow run reports (scenario, status, backend,
/// topology, network, endpoint, message counts `(count, completed)`) around its `traffic` and
/// `flow` sections.
fn flow_summary(
    sc: &Scenario,
    status: RunStatus,
    reason: Option<&str>,
    sim_time_ps: u64,
    (count, completed): (u64, usize),
    traffic: Value,
    flow: Value,
) -> Value {
    let topo = &sc.topology;
    json!({
        "scenario": sc.name,
        "seed": sc.seed,
        "status": status.as_str(),
        "status_reason": reason,
        "backend": sc.backend.name(),
        "backend_reason": sc.backend_reason,
        "sim_time_ps": sim_time_ps,
        "topology": {
            "name": topo.name,
            "hosts": topo.num_hosts(),
            "switches": topo.num_switches(),
            "links": topo.links.len(),
            "ports": topo.num_ports(),
        },
        "network": {
            "mtu_bytes": sc.net.mtu_bytes,
            "header_bytes": sc.net.header_bytes,
            "switch_latency_ps": sc.net.switch_latency_ps,
            "buffer_bytes": sc.net.buffer_bytes,
            // Fixed minimal paths at flow level, whatever network.routing says.
            "routing": "Minimal",
            // Flow level has no switch microarchitecture: recorded for what the scenario asked.
            "router": router_json(&sc.net.router),
        },
        "endpoint": endpoint_json(&sc.endpoint),
        "messages": {
            "count": count,
            "completed": completed,
        },
        "traffic": traffic,
        "flow": flow,
    })
}

/// The first lines of a flow-level run's table: scenario, topology, status and why.
fn flow_head(sc: &Scenario, status: RunStatus, reason: Option<&str>, end_ps: u64) -> String {
    use std::fmt::Write as _;
    let topo = &sc.topology;
    let mut head = String::new();
    let _ = writeln!(head, "scenario   {}  (seed {})", sc.name, sc.seed);
    let _ = writeln!(
        head,
        "topology   {}: {} hosts, {} switches, {} links",
        topo.name,
        topo.num_hosts(),
        topo.num_switches(),
        topo.links.len()
    );
    let _ = writeln!(head, "status     {} at {:.3} us simulated", status.as_str(), end_ps as f64 * 1e-6);
    if let Some(why) = reason {
        let _ = writeln!(head, "why        {why}");
    }
    head
}

#[cfg(test)]
mod tests {
    use super::{classify, RunStatus};
    use reducelab_net::RunEnd;

    /// Every way a run can end, with and without unfinished work and wrong results.
    #[test]
    fn classify_covers_every_combination() {
        let stalled = RunEnd::Stalled { reason: "x traffic[0]: stuck; network: y".into() };
        let ends = [RunEnd::Stopped, RunEnd::Drained, RunEnd::TimeLimit, stalled.clone(), RunEnd::Interrupted];
        for end in &ends {
            for unfinished in [None, Some("ina_allreduce traffic[0]: 1 of 4 hosts unfinished")] {
                for wrong in [None, Some("ina_allreduce traffic[0]: 3 bad blocks over 4 hosts")] {
                    let (status, reason) = classify(end, unfinished, wrong);
                    let want = match (end, unfinished, wrong) {
                        (RunEnd::Interrupted, _, _) => RunStatus::Interrupted,
                        (RunEnd::Stalled { .. }, _, _) => RunStatus::Stalled,
                        (RunEnd::TimeLimit, Some(_), _) => RunStatus::TimeLimit,
                        (_, Some(_), _) => RunStatus::Stalled,
                        (_, None, Some(_)) => RunStatus::Unverified,
                        (_, None, None) => RunStatus::Completed,
                    };
                    assert_eq!(status, want, "{end:?} {unfinished:?} {wrong:?}");
                    // Only a completed run has no reason; every reason says what is wrong.
                    assert_eq!(reason.is_none(), status == RunStatus::Completed, "{end:?} {unfinished:?} {wrong:?}");
                    let r = reason.unwrap_or_default();
                    if let Some(w) = wrong {
                        assert!(r.contains(w), "{r}");
                    }
                    if let (Some(u), RunStatus::TimeLimit | RunStatus::Interrupted) = (unfinished, status) {
                        assert!(r.contains(u), "{r}");
                    }
                    if let RunEnd::Stalled { reason } = end {
                        assert!(r.starts_with(reason.as_str()), "the stuck workload comes first: {r}");
                    }
                }
            }
        }
    }
}

/// One job of a training entry on an in-network protocol (summary.json `traffic[i].jobs`).
#[derive(Clone, Debug, serde::Serialize)]
pub struct InaTrainingJobResult {
    pub job: usize,
    pub model: &'static str,
    pub workers: usize,
    pub start_ps: u64,
    /// Job completion time: one epoch, from the job's start to the last worker's last block of
    /// its last partition.
    pub jct_ps: Option<u64>,
    pub partitions: usize,
    /// Workers with every block of every partition.
    pub workers_finished: usize,
    pub bad_blocks: u64,
    pub verified: bool,
}

/// The jobs of `tr` from the results of its allreduces (`results[k]` is `tr.specs[k]`'s).
fn ina_training_jobs(
    tr: &crate::scenario::ina::InaTraining,
    results: &[crate::ina_run::InaResult],
) -> Vec<InaTrainingJobResult> {
    tr.jobs
        .iter()
        .enumerate()
        .map(|(j, job)| {
            let mine = &results[job.specs.clone()];
            let ends: Option<Vec<u64>> =
                job.specs.clone().map(|k| results[k].runtime_ps.map(|rt| tr.specs[k].start.ps() + rt)).collect();
            InaTrainingJobResult {
                job: j,
                model: job.model.name,
                workers: job.workers.len(),
                start_ps: job.start_ps,
                jct_ps: ends.and_then(|e| e.into_iter().max()).map(|end| end - job.start_ps),
                partitions: mine.len(),
                workers_finished: mine.iter().map(|r| r.hosts_finished).min().unwrap_or(0),
                bad_blocks: mine.iter().map(|r| r.bad_blocks).sum(),
                verified: mine.iter().all(|r| r.verified),
            }
        })
        .collect()
}

/// `goal_ranks.csv`: every rank of every GOAL entry, its host and its end after the entry's start
/// (empty: it did not finish).
fn goal_ranks_csv(goals: &[(usize, crate::goal_run::GoalResult)]) -> String {
    use std::fmt::Write;
    let mut out = String::from("traffic,rank,end_ps\n");
    for (ti, r) in goals {
        for (rank, end) in r.rank_end_ps.iter().enumerate() {
            let _ = writeln!(out, "{ti},{rank},{}", end.map_or(String::new(), |e| e.to_string()));
        }
    }
    out
}

/// A `chakra` entry's results in its summary entry (nothing for a `goal` entry; nulls for a
/// `chakra` entry that did not finish): the iteration time, each rank's compute and exposed
/// communication, how many collective instances ran with which algorithms (each one's times
/// are in `chakra_collectives.csv`) and, with process groups, each group's ranks and count.
fn chakra_summary(g: &reducelab_scenario::GoalSpec, r: Option<&reducelab_chakra::ChakraResults>, v: &mut Value) {
    let Some(job) = &g.chakra else { return };
    v["trace"] = json!(g.file);
    v["nodes"] = json!(job.nodes);
    v["collectives"] = json!(job.collectives.len());
    // Per collective type, its algorithm; several, in order of first use, when sizes chose
    // differently (an all-to-all's MPICH rule).
    let mut algorithms = serde_json::Map::new();
    for c in &job.collectives {
        let e = algorithms.entry(c.comm.key().to_string()).or_insert_with(|| json!(c.algorithm));
        let known = e.as_str().unwrap_or_default();
        if !known.split(", ").any(|a| a == c.algorithm) {
            *e = json!(format!("{known}, {}", c.algorithm));
        }
    }
    v["collective_algorithms"] = Value::Object(algorithms);
    // Only a job with process groups says so (the others' summaries stay as they were).
    let mut groups = serde_json::Map::new();
    for c in job.collectives.iter().filter(|c| c.group.is_some()) {
        let g = groups
            .entry(c.group.clone().expect("filtered"))
            .or_insert_with(|| json!({"ranks": c.ranks, "collectives": 0}));
        g["collectives"] = json!(g["collectives"].as_u64().unwrap_or(0) + 1);
    }
    if !groups.is_empty() {
        v["process_groups"] = Value::Object(groups);
    }
    v["iteration_time_ps"] = json!(r.map(|r| r.iteration_ps));
    v["rank_compute_ps"] = json!(r.map(|r| &r.rank_compute_ps));
    v["rank_exposed_comm_ps"] = json!(r.map(|r| &r.rank_exposed_comm_ps));
    v["max_exposed_comm_ps"] = json!(r.map(|r| r.rank_exposed_comm_ps.iter().copied().max().unwrap_or(0)));
    v["collective_time_ps"] = json!(r.map(|r| r.collectives.iter().map(|(s, e)| e - s).sum::<u64>()));
}

fn chakra_table_line(
    table: &mut String,
    ti: usize,
    g: &reducelab_scenario::GoalSpec,
    r: &reducelab_chakra::ChakraResults,
) {
    use std::fmt::Write as _;
    let Some(job) = &g.chakra else { return };
    let _ = writeln!(
        table,
        "chakra     traffic[{ti}] {} ({} ranks, {} nodes, {} collectives): iteration {:.3} us, exposed communication up to {:.3} us, collectives {:.3} us in all",
        g.file,
        g.trace.num_ranks(),
        job.nodes,
        job.collectives.len(),
        r.iteration_ps as f64 * 1e-6,
        r.rank_exposed_comm_ps.iter().copied().max().unwrap_or(0) as f64 * 1e-6,
        r.collectives.iter().map(|(s, e)| e - s).sum::<u64>() as f64 * 1e-6
    );
}

/// `chakra_collectives.csv` and `chakra_ranks.csv` of the `chakra` entries that finished (none
/// without one).
fn chakra_files(
    done: &[(usize, &reducelab_chakra::ChakraJob, &reducelab_chakra::ChakraResults)],
) -> Vec<(String, String)> {
    use reducelab_chakra::lower::{COLLECTIVES_CSV_HEADER, RANKS_CSV_HEADER};
    if done.is_empty() {
        return Vec::new();
    }
    let (mut colls, mut ranks) = (COLLECTIVES_CSV_HEADER.to_string(), RANKS_CSV_HEADER.to_string());
    for (ti, job, r) in done {
        job.collectives_csv(*ti, r, &mut colls);
        job.ranks_csv(*ti, r, &mut ranks);
    }
    vec![("chakra_collectives.csv".into(), colls), ("chakra_ranks.csv".into(), ranks)]
}

/// One GOAL entry of a LogGP run: its traffic index, its spec and the simulation's outcome
/// (`None`: a probe, nothing timed).
pub type LogGpEntry<'a> =
    (usize, &'a reducelab_scenario::GoalSpec, Option<Result<reducelab_goal::LogGpResult, reducelab_goal::GoalError>>);

/// What a run of GOAL traces without the packet engine reports ([`build_loggp`], [`build_flow_goal`]).
pub struct TraceReport {
    pub status: RunStatus,
    pub summary: Value,
    pub table: String,
    pub workload_files: Vec<(String, String)>,
    pub sim_time_ps: u64,
}

/// `summary.json`, the table and the files of a LogGP run (`run.backend = "loggp"`): per GOAL
/// entry its ranks' end times, its makespan and critical path (LogGOPSim's nanoseconds, given in
/// ps as every other time of a summary), and the events; a trace whose operations cannot all
/// complete ends the run as stalled, with the simulation's reason. `None` results: a probe.
pub fn build_loggp(sc: &Scenario, results: &[LogGpEntry<'_>]) -> TraceReport {
    use std::fmt::Write as _;
    let p = &sc.loggp;
    let mut traffic = Vec::new();
    let mut stalled = Vec::new();
    let mut files = Vec::new();
    let mut ranks_csv = String::from("traffic,rank,end_ps\n");
    let mut end_ps = 0u64;
    let mut table = String::new();
    let probe = results.iter().any(|(_, _, r)| r.is_none());
    let mut chakra_done = Vec::new();
    for (ti, g, r) in results {
        let t = &*g.trace;
        let mut entry = json!({
            "kind": if g.chakra.is_some() { "chakra" } else { "goal" },
            "background": false,
            "file": g.file,
            "ranks": t.num_ranks(),
            "operations": t.num_ops(),
        });
        match r {
            Some(Ok(r)) => {
                let ends: Vec<u64> = r.rank_end_ns.iter().map(|&e| e.saturating_mul(1000)).collect();
                for (rank, e) in ends.iter().enumerate() {
                    let _ = writeln!(ranks_csv, "{ti},{rank},{e}");
                }
                let (_, max) = r.max_end();
                end_ps = end_ps.max(max.saturating_mul(1000));
                entry["rank_end_ps"] = json!(ends);
                entry["runtime_ps"] = json!(max.saturating_mul(1000));
                entry["critical_path_ps"] = json!(r.critical_path_ns.saturating_mul(1000));
                entry["events"] = json!(r.events);
                // LogGP carries no data: nothing to verify beyond the trace's own checks.
                entry["verified"] = Value::Null;
                let chakra = match (&g.chakra, &r.op_times) {
                    (Some(job), Some(ops)) => {
                        let ps = |v: &[u64]| -> Vec<u64> { v.iter().map(|&x| x.saturating_mul(1000)).collect() };
                        Some((job, job.results(&ends, &ps(&ops.start_ns), &ps(&ops.end_ns))))
                    }
                    _ => None,
                };
                chakra_summary(g, chakra.as_ref().map(|(_, c)| c), &mut entry);
                if let Some((job, c)) = chakra {
                    chakra_table_line(&mut table, *ti, g, &c);
                    chakra_done.push((*ti, &**job, c));
                }
                let _ = writeln!(
                    table,
                    "goal       traffic[{ti}] {} ({} ranks, {} operations): runtime {:.3} us, critical path {:.3} us, {} events",
                    g.file,
                    t.num_ranks(),
                    t.num_ops(),
                    max as f64 * 1e-3,
                    r.critical_path_ns as f64 * 1e-3,
                    r.events
                );
                if let Some(ops) = r.op_times.as_ref().filter(|_| g.record_ops) {
                    let mut csv = String::from("rank,label,start_ps,end_ps\n");
                    for i in 0..t.num_ops() as u32 {
                        let o = reducelab_goal::OpId(i);
                        let _ = writeln!(
                            csv,
                            "{},{},{},{}",
                            t.rank_of(o).0,
                            t.label(o),
                            ops.start_ns[i as usize].saturating_mul(1000),
                            ops.end_ns[i as usize].saturating_mul(1000)
                        );
                    }
                    files.push((format!("goal_ops_{ti}.csv"), csv));
                }
            }
            Some(Err(err)) => {
                stalled.push(format!("{} traffic[{ti}] ({}): {err}", entry["kind"].as_str().unwrap_or("goal"), g.file));
                entry["runtime_ps"] = Value::Null;
                entry["verified"] = json!(false);
                chakra_summary(g, None, &mut entry);
            }
            None => {}
        }
        traffic.push(entry);
    }
    files.insert(0, ("goal_ranks.csv".to_string(), ranks_csv));
    let done: Vec<_> = chakra_done.iter().map(|(ti, j, c)| (*ti, *j, c)).collect();
    files.extend(chakra_files(&done));
    let (status, reason) = if probe {
        (RunStatus::TimeLimit, Some("a probe: stopped before the LogGP model timed anything".to_string()))
    } else if !stalled.is_empty() {
        (RunStatus::Stalled, Some(stalled.join("; ")))
    } else {
        (RunStatus::Completed, None)
    };
    let summary = json!({
        "scenario": sc.name,
        "seed": sc.seed,
        "status": status.as_str(),
        "status_reason": reason,
        "backend": sc.backend.name(),
        "backend_reason": sc.backend_reason,
        "sim_time_ps": end_ps,
        "loggp": {
            "latency_ns": p.latency_ns,
            "overhead_ns": p.overhead_ns,
            "gap_ns": p.gap_ns,
            "gap_per_byte_ns": p.gap_per_byte_ns,
            "overhead_per_byte_ns": p.overhead_per_byte_ns,
            "eager_limit_bytes": p.eager_limit_bytes,
        },
        "traffic": traffic,
    });
    let mut head = String::new();
    let _ = writeln!(head, "scenario   {}  (seed {})", sc.name, sc.seed);
    let _ = writeln!(head, "status     {} at {:.3} us simulated", status.as_str(), end_ps as f64 * 1e-6);
    if let Some(why) = &reason {
        let _ = writeln!(head, "why        {why}");
    }
    let _ = writeln!(
        head,
        "backend    loggp ({}): L={} o={} g={} G={} O={} S={}",
        sc.backend_reason,
        p.latency_ns,
        p.overhead_ns,
        p.gap_ns,
        p.gap_per_byte_ns,
        p.overhead_per_byte_ns,
        p.eager_limit_bytes
    );
    TraceReport { status, summary, table: head + &table, workload_files: files, sim_time_ps: end_ps }
}

/// `summary.json`, the table and the files of GOAL traces run at flow level
/// (`crate::goal_flow`): per entry the packet run's keys (each rank's end, the makespan, the
/// critical path, matching), with `messages_verified` null (flow level carries no data), and
/// the same files (`goal_ranks.csv`, `goal_ops_<traffic>.csv` with `ops = true`, the
/// `chakra_*.csv` of chakra entries). A trace that cannot finish ends the run as stalled,
/// naming where its ranks wait.
pub fn build_flow_goal(sc: &Scenario, out: &crate::goal_flow::FlowGoalOutcome) -> TraceReport {
    use std::fmt::Write as _;
    let mut traffic = Vec::new();
    let mut unfinished = Vec::new();
    let mut wrong = Vec::new();
    let mut goals = Vec::new();
    let mut chakras = Vec::new();
    let mut files = Vec::new();
    let mut lines = String::new();
    for ((ti, run), m) in out.runs.iter().zip(&out.messages) {
        let crate::scenario::Traffic::Goal(g) = &sc.traffic[*ti] else { unreachable!("GOAL entries only") };
        let r = run.result();
        if !out.probe {
            unfinished.extend(run.unfinished(*ti));
        }
        if r.mismatched_receives > 0 {
            wrong.push(format!(
                "goal traffic[{ti}]: {} receives got another message than MPI's matching names",
                r.mismatched_receives
            ));
        }
        let chakra = run.chakra_results();
        let mut v = serde_json::to_value(&r).expect("json");
        v["kind"] = json!(sc.traffic[*ti].kind());
        v["background"] = json!(false);
        chakra_summary(g, chakra.as_ref(), &mut v);
        v["messages_verified"] = Value::Null;
        v["completed"] = json!(m.fcts_ps.len());
        v["fct_ps"] = fct_summary(m.fcts_ps.clone());
        let span = m.last_end_ps.saturating_sub(m.first_start_ps);
        v["throughput_gbps"] =
            json!(if span > 0 { m.bytes_delivered as f64 * 8.0 / (span as f64 * 1e-12) / 1e9 } else { 0.0 });
        traffic.push(v);
        if let Some(c) = &chakra {
            chakra_table_line(&mut lines, *ti, g, c);
        }
        if let Some(rt) = r.runtime_ps {
            let _ = writeln!(
                lines,
                "goal       traffic[{ti}] {} ({} ranks, {} operations): runtime {:.3} us, critical path {:.3} us, {} messages, matching {}",
                g.file,
                r.ranks,
                r.operations,
                rt as f64 * 1e-6,
                r.critical_path_ps.unwrap_or(0) as f64 * 1e-6,
                r.messages,
                if r.verified { "verified (flow level carries no data)" } else { "WRONG" }
            );
        }
        if let Some(csv) = run.ops_csv() {
            files.push((format!("goal_ops_{ti}.csv"), csv));
        }
        if let (Some(job), Some(c)) = (g.chakra.as_deref(), chakra) {
            chakras.push((*ti, job, c));
        }
        goals.push((*ti, r));
    }
    files.insert(0, ("goal_ranks.csv".to_string(), goal_ranks_csv(&goals)));
    let done: Vec<_> = chakras.iter().map(|(ti, j, c)| (*ti, *j, c)).collect();
    files.extend(chakra_files(&done));
    let (status, reason) = if out.probe {
        (RunStatus::TimeLimit, Some("a probe: stopped before the flow backend timed anything".to_string()))
    } else if let Some(e) = &out.error {
        (RunStatus::Stalled, Some(format!("the flow backend refused a message: {e}")))
    } else {
        let u = (!unfinished.is_empty()).then(|| unfinished.join("; "));
        let w = (!wrong.is_empty()).then(|| wrong.join("; "));
        classify(&RunEnd::Drained, u.as_deref(), w.as_deref())
    };
    let count: u64 = out.messages.iter().map(|m| m.count).sum();
    let completed: usize = out.messages.iter().map(|m| m.fcts_ps.len()).sum();
    let summary = flow_summary(
        sc,
        status,
        reason.as_deref(),
        out.end_ps,
        (count, completed),
        Value::Array(traffic),
        json!({ "contention_free": false, "events": out.events }),
    );
    let mut head = flow_head(sc, status, reason.as_deref(), out.end_ps);
    let _ = writeln!(head, "backend    flow ({}), {} events", sc.backend_reason, out.events);
    TraceReport { status, summary, table: head + &lines, workload_files: files, sim_time_ps: out.end_ps }
}
