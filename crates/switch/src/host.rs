//! A host of a plan over a real UDP socket: the protocol's [`HostProtocol`] agents (the
//! simulator's, unchanged) driven by packets, a monotonic clock and their own timers, with the
//! NIC modelled as a bound on blocks in flight. Every result is checked by the agent against
//! the exact sum of all ranks' contributions (fingerprint and every element value); a run
//! that cannot finish ends at its deadline with an error saying what is missing and why.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::net::SocketAddrV4;
use std::time::{Duration, Instant};

use reducelab_ina::host::HostStats;
use reducelab_ina::{wire, HostAction, HostProtocol, Values, NIL};
use serde::Serialize;

use crate::plan::InaPlan;
use crate::udp;

/// How a host is run.
#[derive(Clone, Debug)]
pub struct HostOptions {
    /// Wall-clock limit of the whole run on this host.
    pub timeout: Duration,
    /// Blocks a host keeps in flight (sent and not yet finished): the NIC queue the simulator's
    /// agents are pulled by, and what keeps a burst within the switch's socket buffer.
    pub max_inflight: usize,
    /// How long a host that has completed keeps answering its peers (a Canary leader may
    /// still be asked to retransmit, a coordinator to release a late host).
    pub linger: Duration,
    /// Hosts of one run start together once every socket is bound: a packet for a host whose
    /// socket is not bound yet is dropped by the kernel (the simulator starts every host at
    /// once). Threads of one process wait on a barrier; processes sleep until a shared wall
    /// clock time.
    pub barrier: Option<std::sync::Arc<std::sync::Barrier>>,
    pub start_at: Option<std::time::SystemTime>,
    /// Hosts of one process (`for_threads`): how many have completed, and how many there are.
    /// A host whose protocol asks it to stay after completing (`HostProtocol::linger_ps`, e.g.
    /// Canary's coordinator) stops early once every host has completed, when every host of the
    /// plan is a thread of this process (with peers in other processes it stays the full time).
    pub completed: Option<(std::sync::Arc<std::sync::atomic::AtomicUsize>, usize)>,
}

impl Default for HostOptions {
    fn default() -> Self {
        HostOptions {
            timeout: Duration::from_secs(10),
            max_inflight: 256,
            linger: Duration::from_millis(100),
            barrier: None,
            start_at: None,
            completed: None,
        }
    }
}

impl HostOptions {
    /// These options for `n` host threads that start together.
    pub fn for_threads(&self, n: usize) -> HostOptions {
        HostOptions {
            barrier: Some(std::sync::Arc::new(std::sync::Barrier::new(n))),
            completed: Some((Default::default(), n)),
            ..self.clone()
        }
    }
}

/// One collective as a host saw it.
#[derive(Clone, Debug, Serialize)]
pub struct HostCollective {
    pub tenant: u16,
    pub rank: u32,
    pub blocks: u32,
    pub elements: u64,
    /// Seconds from the host's start until it had every block.
    pub finished_s: Option<f64>,
    /// ... until it was released (Canary's completion notification; otherwise = finished).
    pub completed_s: Option<f64>,
    /// Every block arrived and matched the exact sum.
    pub verified: bool,
    pub stats: HostStats,
}

#[derive(Clone, Debug, Serialize)]
pub struct HostReport {
    pub host: u32,
    pub collectives: Vec<HostCollective>,
    pub tx_packets: u64,
    pub rx_packets: u64,
    pub malformed: u64,
    /// Packets for another host or collective.
    pub misdelivered: u64,
    /// Frames the kernel refused to send (counted as lost; the protocol recovers or times out).
    pub send_errors: u64,
    pub elapsed_s: f64,
}

/// A host's first transmissions so far by its agent's counters (contributions sent, less
/// re-sends): what the NIC bound on blocks in flight counts. Re-sends, fetched contributions and
/// notices do not put a new block in flight; counted, they would hold the NIC shut for ever on a
/// rank that re-sends more than the bound while a block is missing.
pub(crate) fn first_sends(s: &HostStats) -> u64 {
    s.sent_reduce.wrapping_sub(s.retransmits_sent)
}

struct Agent {
    ci: usize,
    rank: u32,
    agent: Box<dyn HostProtocol>,
    /// First transmissions produced by `pull` (blocks put in flight).
    pulled: u64,
    /// When the rank joins its collective, in ps from the host's start (a training partition's
    /// ready time), until it has (`None`); before, its NIC pulls nothing, as in the simulator.
    joins_at: Option<u64>,
}

/// Runs host `host` (a host index) of `plan`: every collective it takes part in, with the
/// protocol's seeded contributions (checked against their exact sums).
pub fn run_host(plan: &InaPlan, host: u32, opts: &HostOptions) -> Result<HostReport, String> {
    run(plan, host, opts, None).map(|(r, _)| r)
}

/// Runs host `host` contributing the application vector `data` to allreduce `tenant` (its
/// other collectives, if any, use seeded values); returns the reduced vector (wrapping i32
/// sums). The agents check every result's fingerprint (each rank's contribution counted
/// exactly once); the values cannot be checked here (the other ranks' data is not known), so
/// the caller checks them if it can.
pub fn allreduce_data(
    plan: &InaPlan,
    host: u32,
    opts: &HostOptions,
    tenant: u16,
    data: Vec<i32>,
) -> Result<(HostReport, Vec<i32>), String> {
    let c = plan.colls.get(tenant as usize).ok_or_else(|| {
        format!("tenant: the scenario has {} in-network allreduces, not {}", plan.colls.len(), tenant as u32 + 1)
    })?;
    let elems = (c.blocks as u64 - 1) * c.elems_per_packet as u64 + c.last_elems as u64;
    if data.len() as u64 != elems {
        return Err(format!(
            "data: {} elements, but allreduce {tenant} of the scenario reduces {elems} (bytes / 4)",
            data.len()
        ));
    }
    run(plan, host, opts, Some((tenant, data))).map(|(r, v)| (r, v.expect("a result")))
}

fn run(
    plan: &InaPlan,
    host: u32,
    opts: &HostOptions,
    app: Option<(u16, Vec<i32>)>,
) -> Result<(HostReport, Option<Vec<i32>>), String> {
    let node = *plan
        .fabric
        .host_nodes
        .get(host as usize)
        .ok_or_else(|| format!("host: {host} is not a host of the topology ({} hosts)", plan.fabric.num_hosts()))?;
    let mut agents: Vec<Agent> = Vec::new();
    let mut colls = plan.colls.clone();
    let mut vals = Values::new(plan.max_elems as usize);
    // The collective whose result the caller gets (its application data's).
    let mut app_coll = None;
    if let Some((tenant, data)) = app {
        let c = colls
            .iter_mut()
            .find(|c| c.tenant == tenant)
            .ok_or_else(|| format!("tenant: no in-network allreduce {tenant}"))?;
        let Some(rank) = c.ranks.iter().position(|&h| h == host) else {
            return Err(format!("host: {host} is not a rank of allreduce {tenant}"));
        };
        // The agents check fingerprints only: the expected values are the seeded ones.
        c.expected_values = Vec::new();
        vals.open_call(reducelab_ina::AppCall::new(c, rank as u32, data));
        app_coll = Some(c.clone());
    }
    let colls = colls;
    for (ci, c) in colls.iter().enumerate() {
        if let Some(rank) = c.ranks.iter().position(|&h| h == host) {
            agents.push(Agent {
                ci,
                rank: rank as u32,
                agent: plan.specs[ci].protocol.host_agent(c, rank as u32),
                pulled: 0,
                joins_at: Some(plan.rank_start_ps(ci, rank as u32)),
            });
        }
    }
    if agents.is_empty() {
        return Err(format!("host: {host} takes part in no in-network allreduce of the scenario"));
    }
    // Per agent: its protocol and collective when the protocol carries a payload of its own.
    let payloads: Vec<Option<(&dyn reducelab_ina::InaProtocol, usize)>> = agents
        .iter()
        .map(|a| {
            let p = &*plan.specs[a.ci].protocol;
            p.carries_payload().then_some((p, a.ci))
        })
        .collect();
    if app_coll.is_some() {
        if let Some((p, _)) = payloads.iter().flatten().next() {
            return Err(format!(
                "protocol: {} reduces its own sparse vectors (a payload of its own), not application vectors",
                p.label()
            ));
        }
    }
    let mut own_payload: Vec<u8> = Vec::new();
    let sock = udp::bind(plan.endpoints.of(node, 0));
    if let Some(b) = &opts.barrier {
        // Every thread reaches the barrier, bound or not, so one failure cannot block the rest.
        b.wait();
    }
    let socks = [sock?];
    if let Some(at) = opts.start_at {
        if let Ok(d) = at.duration_since(std::time::SystemTime::now()) {
            std::thread::sleep(d.min(opts.timeout));
        }
    }
    let (sw, sw_port) = plan.fabric.nodes[node as usize].ports[0];
    let first_hop: SocketAddrV4 = plan.endpoints.of(sw, sw_port);
    let epoch = Instant::now();
    let now_ps = || epoch.elapsed().as_nanos() as u64 * 1000;
    let deadline = epoch + opts.timeout;
    let mut out: Vec<HostAction> = Vec::new();
    let mut timers: BinaryHeap<Reverse<(u64, u64, usize, u64)>> = BinaryHeap::new();
    let mut seq = 0u64;
    let mut frame = Vec::with_capacity(2048);
    // The frame family of the scenario's protocol (one protocol per scenario).
    let family = plan.frame();
    let mut rxb = udp::RxBatch::new(8);
    let mut txq = udp::TxQueue::default();
    // Queued frames leave in one sendmmsg (runs of equal-sized frames as one GSO buffer).
    let flush = |txq: &mut udp::TxQueue, report: &mut HostReport| {
        if !txq.is_empty() {
            let (sent, _, failed) = txq.flush(&socks[0], first_hop);
            report.tx_packets += sent;
            report.send_errors += failed;
        }
    };
    let mut ready = Vec::new();
    let mut report = HostReport {
        host,
        collectives: Vec::new(),
        tx_packets: 0,
        rx_packets: 0,
        malformed: 0,
        misdelivered: 0,
        send_errors: 0,
        elapsed_s: 0.0,
    };

    // Carries out agent `ai`'s actions.
    let mut carry_out = |ai: usize,
                         out: &mut Vec<HostAction>,
                         vals: &mut Values,
                         timers: &mut BinaryHeap<Reverse<(u64, u64, usize, u64)>>,
                         txq: &mut udp::TxQueue| {
        for a in out.drain(..) {
            match a {
                HostAction::Send(h) => {
                    frame.clear();
                    let r = match payloads[ai] {
                        // The protocol's own payload (out of this process's memory).
                        Some((proto, ci)) => {
                            own_payload.clear();
                            proto
                                .encode_payload(&colls[ci], &h, &mut own_payload)
                                .map_err(|e| wire::WireError { field: "payload", reason: e })
                                .and_then(|()| wire::emit_payload(&h, &own_payload, &mut frame))
                        }
                        None => family.emit(&h, (h.data != NIL).then(|| vals.get(h.data)), &mut frame),
                    };
                    vals.release(h.data);
                    r.unwrap_or_else(|e| {
                        panic!("host {host}: the wire frame cannot carry {h:?}: {e} (a protocol bug)")
                    });
                    txq.push(&frame);
                }
                HostAction::Timer { at, token } => {
                    seq += 1;
                    timers.push(Reverse((at, seq, ai, token)));
                }
            }
        }
    };

    // Starts the agents whose time has come.
    macro_rules! start_due {
        () => {
            for (ai, a) in agents.iter_mut().enumerate() {
                let now = now_ps();
                if a.joins_at.is_some_and(|t| t <= now) {
                    a.joins_at = None;
                    a.agent.start(&colls[a.ci], now, &mut vals, &mut out);
                    carry_out(ai, &mut out, &mut vals, &mut timers, &mut txq);
                }
            }
        };
    }
    start_due!();
    flush(&mut txq, &mut report);
    let mut linger_until: Option<Instant> = None;
    // Once complete: until when it must stay at least, and at most (the protocol's linger).
    let mut stay_until: Option<Instant> = None;
    // Only when every host of the plan is a thread of this process: peers elsewhere may still
    // need an answer.
    let all_here = plan.hosts().len();
    let all_completed = || {
        opts.completed
            .as_ref()
            .is_some_and(|(k, n)| *n >= all_here && k.load(std::sync::atomic::Ordering::Acquire) >= *n)
    };
    loop {
        let now_i = Instant::now();
        if agents.iter().all(|a| a.agent.completed_ps().is_some()) {
            if linger_until.is_none() {
                let proto = agents.iter().map(|a| a.agent.linger_ps()).max().unwrap_or(0);
                linger_until = Some(now_i + opts.linger);
                stay_until = Some(now_i + opts.linger.max(Duration::from_nanos(proto / 1000)));
                if let Some((k, _)) = &opts.completed {
                    k.fetch_add(1, std::sync::atomic::Ordering::AcqRel);
                }
            }
            let (until, stay) = (linger_until.unwrap(), stay_until.unwrap());
            if now_i >= stay || now_i >= until && all_completed() {
                break;
            }
        }
        if now_i >= deadline {
            let parts: Vec<_> =
                agents.iter().map(|a| (&colls[a.ci], a.rank, &*a.agent, plan.specs[a.ci].protocol.info())).collect();
            let dropped = report.malformed + report.misdelivered;
            return Err(stall_message(host, &parts, opts.timeout, report.tx_packets, report.rx_packets, dropped));
        }
        start_due!();
        // Timers due.
        while let Some(&Reverse((at, _, ai, token))) = timers.peek() {
            let now = now_ps();
            if at > now {
                break;
            }
            timers.pop();
            let a = &mut agents[ai];
            a.agent.on_timer(&colls[a.ci], now, token, &mut vals, &mut out);
            carry_out(ai, &mut out, &mut vals, &mut timers, &mut txq);
        }
        flush(&mut txq, &mut report);
        // The NIC pulls more blocks while fewer than `max_inflight` are outstanding.
        let mut sent_any = false;
        for (ai, a) in agents.iter_mut().enumerate().filter(|(_, a)| a.joins_at.is_none()) {
            let c = &colls[a.ci];
            let done = (c.blocks - a.agent.missing()) as u64;
            let room = (opts.max_inflight as u64).saturating_sub(a.pulled.saturating_sub(done)) as usize;
            if room > 0 {
                let before = first_sends(a.agent.stats());
                a.agent.pull(c, now_ps(), room, &mut vals, &mut out);
                a.pulled += first_sends(a.agent.stats()).wrapping_sub(before);
                sent_any |= out.iter().any(|x| matches!(x, HostAction::Send(_)));
                carry_out(ai, &mut out, &mut vals, &mut timers, &mut txq);
            }
        }
        flush(&mut txq, &mut report);
        // Everything that has arrived (first, once, what an earlier call kept for this one).
        let mut got_any = false;
        macro_rules! handle {
            ($from:expr, $bytes:expr) => {{
                let bytes: &[u8] = $bytes;
                report.rx_packets += 1;
                if $from != first_hop {
                    report.misdelivered += 1;
                    continue;
                }
                let (mut hdr, payload) = match family.parse_header(bytes) {
                    Ok(h) => h,
                    Err(_) => {
                        report.malformed += 1;
                        continue;
                    }
                };
                // As in the simulator, whatever the first hop delivers is the host's (a
                // multicast copy keeps the tree's destination, not the host's).
                let Some(ai) = agents.iter().position(|a| colls[a.ci].tenant == hdr.tenant) else {
                    report.misdelivered += 1;
                    continue;
                };
                match payloads[ai] {
                    // The protocol's own payload, checked and put in this process's memory.
                    Some((proto, ci)) => {
                        if let Err(e) = proto.decode_payload(&colls[ci], &mut hdr, payload) {
                            if report.malformed == 0 {
                                eprintln!("host {host}: a malformed {} payload (dropped, counted): {e}", proto.label());
                            }
                            report.malformed += 1;
                            continue;
                        }
                    }
                    None => {
                        let slot = vals.alloc();
                        if wire::values_into(payload, vals.get_mut(slot)).is_err() {
                            vals.release(slot);
                            report.malformed += 1;
                            continue;
                        }
                        hdr.data = slot;
                    }
                }
                let a = &mut agents[ai];
                a.agent.on_packet(&colls[a.ci], now_ps(), hdr, &mut vals, &mut out);
                carry_out(ai, &mut out, &mut vals, &mut timers, &mut txq);
            }};
        }
        loop {
            let n = rxb.recv(&socks[0]);
            if n == 0 {
                break;
            }
            got_any = true;
            for i in 0..n {
                let (from, datagrams) = rxb.get(i);
                for bytes in datagrams {
                    handle!(from, bytes);
                }
            }
            flush(&mut txq, &mut report);
        }
        if !got_any && !sent_any {
            let mut wait = Duration::from_millis(20).min(deadline.saturating_duration_since(Instant::now()));
            if let (Some(u), Some(st)) = (linger_until, stay_until) {
                let u = if all_completed() { u } else { st };
                wait = wait.min(u.saturating_duration_since(Instant::now()));
            }
            if let Some(&Reverse((at, ..))) = timers.peek() {
                wait = wait.min(Duration::from_nanos(at.saturating_sub(now_ps()) / 1000));
            }
            if let Some(at) = agents.iter().filter_map(|a| a.joins_at).min() {
                wait = wait.min(Duration::from_nanos(at.saturating_sub(now_ps()) / 1000));
            }
            udp::poll_readable(&socks, wait, &mut ready);
        }
    }
    report.elapsed_s = epoch.elapsed().as_secs_f64();
    for a in &agents {
        let c = &colls[a.ci];
        let s = a.agent.stats().clone();
        let verified = a.agent.missing() == 0 && s.bad_blocks == 0;
        report.collectives.push(HostCollective {
            tenant: c.tenant,
            rank: a.rank,
            blocks: c.blocks,
            elements: (c.blocks as u64 - 1) * c.elems_per_packet as u64 + c.last_elems as u64,
            finished_s: a.agent.finished_ps().map(|p| p as f64 * 1e-12),
            completed_s: a.agent.completed_ps().map(|p| p as f64 * 1e-12),
            verified,
            stats: s,
        });
        if !verified {
            return Err(format!(
                "host {host}: in-network allreduce {}: {} of {} results differ from the exact sum of the ranks' contributions",
                c.tenant, a.agent.stats().bad_blocks, c.blocks
            ));
        }
    }
    let result = match app_coll {
        None => None,
        Some(c) => {
            let call = vals.close_call(&c).expect("the application's call is open");
            if let Some(b) = call.first_missing() {
                return Err(format!("host {host}: allreduce {}: the result of block {b} was never checked by this host's agent (the protocol does not expose it)", c.tenant));
            }
            Some(call.result)
        }
    };
    Ok((report, result))
}

/// Why host `host` did not finish by its deadline: per collective (its rank, agent and protocol),
/// what is missing and the likely cause.
pub(crate) fn stall_message(
    host: u32,
    agents: &[(&reducelab_ina::host::Collective, u32, &dyn HostProtocol, &reducelab_ina::ProtocolInfo)],
    timeout: Duration,
    tx_packets: u64,
    rx_packets: u64,
    dropped: u64,
) -> String {
    let mut parts = Vec::new();
    for &(c, rank, agent, info) in agents {
        let s = agent.stats();
        let missing = agent.missing();
        let state = if missing > 0 {
            let (of, unit) = agent.expected(c);
            format!("{missing} of {of} {unit} missing")
        } else {
            "every block received but not released by the coordinator".to_string()
        };
        let why = if !info.loss_recovery {
            format!("{} has no loss recovery: a lost packet (or a switch restart) stalls it", info.name)
        } else if s.abandoned > 0 {
            format!("gave up {} blocks or completion notices after {} retransmission timeouts each (peers or switch unreachable)", s.abandoned, reducelab_ina::canary_host::MAX_EXPIRIES)
        } else {
            "recovery (retransmission requests, failures, fallback) had not completed".to_string()
        };
        parts.push(format!(
            "allreduce {} (rank {}): {state}; sent {} contributions, {} retransmission requests; {why}",
            c.tenant, rank, s.sent_reduce, s.retx_requests
        ));
    }
    format!(
        "host {host}: timed out after {:.1} s ({tx_packets} packets sent, {rx_packets} received, {dropped} of them dropped as malformed, from elsewhere or of no collective here): {}",
        timeout.as_secs_f64(),
        parts.join("; ")
    )
}
