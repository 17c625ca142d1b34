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
    /// Whether a completed host stays for its protocol's `linger_ps` (default true). A
    /// `Session` turns it off: its coordinator goes on to the next call at once (see
    /// docs/switch.md, "Sessions").
    /// Off, a rank still not released `HostProtocol::release_wait_ps` after it had every block
    /// concludes it was (and returns its verified result).
    pub protocol_linger: bool,
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
            protocol_linger: true,
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
    run(plan, host, opts, None, None).map(|(r, _)| r)
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
    run(plan, host, opts, Some((tenant, data)), None).map(|(r, v)| (r, v.expect("a result")))
}

/// Runs host `host` of `plan` on the already bound `sock` for `coll` (a collective built for
/// this call, with the protocol of the scenario's first entry), contributing `data`.
#[allow(clippy::too_many_arguments)]
pub(crate) fn run_own(
    plan: &InaPlan,
    host: u32,
    opts: &HostOptions,
    sock: &std::net::UdpSocket,
    coll: reducelab_ina::host::Collective,
    data: Vec<i32>,
    stash: &mut Vec<Vec<u8>>,
    rxb: &mut udp::RxBatch,
) -> Result<(HostReport, Vec<i32>), String> {
    let tenant = coll.tenant;
    run(plan, host, opts, Some((tenant, data)), Some(OwnRun { sock, coll, stash, rxb }))
        .map(|(r, v)| (r, v.expect("a result")))
}

impl HostReport {
    pub(crate) fn empty(host: u32) -> HostReport {
        HostReport {
            host,
            collectives: Vec::new(),
            tx_packets: 0,
            rx_packets: 0,
            malformed: 0,
            misdelivered: 0,
            send_errors: 0,
            elapsed_s: 0.0,
        }
    }
}

/// The full results of one collective as they pass this host's socket: a packet carrying a
/// block's complete reduction (a broadcast or retransmission with counter = hosts), received
/// or (by a leader) sent.
struct Capture {
    tenant: u16,
    /// The collective's `sequence_base` (blocks are numbered from it in ids).
    base: u32,
    n: u16,
    epp: usize,
    result: Vec<i32>,
    got: Vec<bool>,
}

impl Capture {
    fn offer(&mut self, h: &reducelab_ina::Header, values: Option<&[i32]>) {
        use reducelab_ina::Kind;
        let Some(v) = values else { return };
        if h.tenant != self.tenant || h.counter != self.n || !matches!(h.kind, Kind::Broadcast | Kind::Retransmit) {
            return;
        }
        let b = (h.id.wrapping_sub(self.base) & (reducelab_ina::host::MAX_BLOCKS - 1)) as usize;
        if b >= self.got.len() || self.got[b] {
            return;
        }
        let start = b * self.epp;
        let k = (self.result.len() - start).min(self.epp).min(v.len());
        self.result[start..start + k].copy_from_slice(&v[..k]);
        self.got[b] = true;
    }
}

/// A host's own run of one collective: on a socket bound once (`Session`), with the collective
/// built for this call instead of the scenario's (its protocol is the scenario's first entry's).
struct OwnRun<'a> {
    sock: &'a std::net::UdpSocket,
    coll: reducelab_ina::host::Collective,
    /// In: frames of this call received during the previous one; out: frames of the next.
    stash: &'a mut Vec<Vec<u8>>,
    /// The session's receive batch (512 KiB: allocated once, not per call).
    rxb: &'a mut udp::RxBatch,
}

fn run(
    plan: &InaPlan,
    host: u32,
    opts: &HostOptions,
    app: Option<(u16, Vec<i32>)>,
    own: Option<OwnRun<'_>>,
) -> Result<(HostReport, Option<Vec<i32>>), String> {
    let node = *plan
        .fabric
        .host_nodes
        .get(host as usize)
        .ok_or_else(|| format!("host: {host} is not a host of the topology ({} hosts)", plan.fabric.num_hosts()))?;
    let mut agents: Vec<Agent> = Vec::new();
    let mut own_rxb = None;
    let (mut colls, sock_in, mut stash) = match own {
        Some(o) => {
            own_rxb = Some(o.rxb);
            (vec![o.coll], Some(o.sock), Some(o.stash))
        }
        None => (plan.colls.clone(), None, None),
    };
    // Frames an earlier call kept for this one (its tenant), handled before the socket's.
    let mut kept: Vec<Vec<u8>> = stash.as_mut().map(|st| std::mem::take(&mut **st)).unwrap_or_default();
    let spec_of = |ci: usize| if sock_in.is_some() { 0 } else { ci };
    let mut vals = Values::new(plan.max_elems as usize);
    let mut capture = None;
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
        let epp = c.elems_per_packet as usize;
        let mut cap = Capture {
            tenant,
            base: c.sequence_base,
            n: c.n() as u16,
            epp,
            result: vec![0; data.len()],
            got: vec![false; c.blocks as usize],
        };
        if c.n() == 1 {
            cap.result.copy_from_slice(&data);
            cap.got.fill(true);
        }
        capture = Some(cap);
        vals.set_inputs(reducelab_ina::AppInputs { tenant, rank: rank as u32, values: data });
    }
    let colls = colls;
    for (ci, c) in colls.iter().enumerate() {
        if let Some(rank) = c.ranks.iter().position(|&h| h == host) {
            agents.push(Agent {
                ci,
                rank: rank as u32,
                agent: plan.specs[spec_of(ci)].protocol.host_agent(c, rank as u32),
                pulled: 0,
                // A session's call starts at once.
                joins_at: Some(if sock_in.is_some() { 0 } else { plan.rank_start_ps(ci, rank as u32) }),
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
            let p = &*plan.specs[spec_of(a.ci)].protocol;
            p.carries_payload().then_some((p, a.ci))
        })
        .collect();
    if capture.is_some() {
        if let Some((p, _)) = payloads.iter().flatten().next() {
            return Err(format!(
                "protocol: {} reduces its own sparse vectors (a payload of its own), not application vectors",
                p.label()
            ));
        }
    }
    let mut own_payload: Vec<u8> = Vec::new();
    let bound;
    let sock = match sock_in {
        Some(s) => s,
        None => {
            let sock = udp::bind(plan.endpoints.of(node, 0));
            if let Some(b) = &opts.barrier {
                // Every thread reaches the barrier, bound or not, so one failure cannot block the rest.
                b.wait();
            }
            bound = sock?;
            &bound
        }
    };
    let socks = [sock];
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
    let mut fresh_rxb;
    let rxb: &mut udp::RxBatch = match own_rxb {
        Some(r) => r,
        None => {
            fresh_rxb = udp::RxBatch::new(8);
            &mut fresh_rxb
        }
    };
    let mut txq = udp::TxQueue::default();
    // Queued frames leave in one sendmmsg (runs of equal-sized frames as one GSO buffer).
    let flush = |txq: &mut udp::TxQueue, report: &mut HostReport| {
        if !txq.is_empty() {
            let (sent, _, failed) = txq.flush(socks[0], first_hop);
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
                         capture: &mut Option<Capture>,
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
                        None => {
                            let values = (h.data != NIL).then(|| vals.get(h.data));
                            if let Some(cap) = capture.as_mut() {
                                cap.offer(&h, values);
                            }
                            family.emit(&h, values, &mut frame)
                        }
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
                    carry_out(ai, &mut out, &mut vals, &mut timers, &mut capture, &mut txq);
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
    // Without the protocol's linger (a session: the coordinator moves on at its release), a rank
    // whose release was lost concludes it after the protocol's `release_wait_ps`.
    let released = |a: &Agent, now: u64| {
        a.agent.completed_ps().is_some()
            || !opts.protocol_linger
                && a.agent.finished_ps().zip(a.agent.release_wait_ps()).is_some_and(|(f, w)| now >= f.saturating_add(w))
    };
    loop {
        let now_i = Instant::now();
        if agents.iter().all(|a| released(a, now_ps())) {
            if linger_until.is_none() {
                let proto = if opts.protocol_linger {
                    agents.iter().map(|a| a.agent.linger_ps()).max().unwrap_or(0)
                } else {
                    0
                };
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
            return Err(stall_message(plan, &colls, &spec_of, host, &agents, opts.timeout, &report));
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
            carry_out(ai, &mut out, &mut vals, &mut timers, &mut capture, &mut txq);
        }
        flush(&mut txq, &mut report);
        // The NIC pulls more blocks while fewer than `max_inflight` are outstanding.
        let mut sent_any = false;
        for (ai, a) in agents.iter_mut().enumerate().filter(|(_, a)| a.joins_at.is_none()) {
            let c = &colls[a.ci];
            let done = (c.blocks - a.agent.missing()) as u64;
            let room = (opts.max_inflight as u64).saturating_sub(a.pulled.saturating_sub(done)) as usize;
            if room > 0 {
                a.agent.pull(c, now_ps(), room, &mut vals, &mut out);
                let made = out.iter().filter(|x| matches!(x, HostAction::Send(_))).count();
                a.pulled += made as u64;
                sent_any |= made > 0;
                carry_out(ai, &mut out, &mut vals, &mut timers, &mut capture, &mut txq);
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
                    // A session's next call (peers already in it: their contributions, a
                    // leader's aggregate) is kept for it; anything else is stale.
                    match stash.as_mut() {
                        Some(st) if hdr.tenant == (colls[0].tenant + 1) % 256 => st.push(bytes.to_vec()),
                        _ => report.misdelivered += 1,
                    }
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
                        if let Some(cap) = capture.as_mut() {
                            cap.offer(&hdr, Some(&vals.get(slot)[..hdr.elems as usize]));
                        }
                    }
                }
                let a = &mut agents[ai];
                a.agent.on_packet(&colls[a.ci], now_ps(), hdr, &mut vals, &mut out);
                carry_out(ai, &mut out, &mut vals, &mut timers, &mut capture, &mut txq);
            }};
        }
        for bytes in kept.drain(..) {
            got_any = true;
            handle!(first_hop, &bytes[..]);
        }
        loop {
            let n = rxb.recv(socks[0]);
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
    let result = match capture {
        None => None,
        Some(cap) => {
            if let Some(b) = cap.got.iter().position(|g| !g) {
                return Err(format!("host {host}: allreduce {}: the result of block {b} never passed this host's socket (the protocol does not expose it)", cap.tenant));
            }
            Some(cap.result)
        }
    };
    Ok((report, result))
}

fn stall_message(
    plan: &InaPlan,
    colls: &[reducelab_ina::host::Collective],
    spec_of: &dyn Fn(usize) -> usize,
    host: u32,
    agents: &[Agent],
    timeout: Duration,
    r: &HostReport,
) -> String {
    let mut parts = Vec::new();
    for a in agents {
        let c = &colls[a.ci];
        let s = a.agent.stats();
        let missing = a.agent.missing();
        let state = if missing > 0 {
            let (of, unit) = a.agent.expected(c);
            format!("{missing} of {of} {unit} missing")
        } else {
            "every block received but not released by the coordinator".to_string()
        };
        let info = plan.specs[spec_of(a.ci)].protocol.info();
        let why = if !info.loss_recovery {
            format!("{} has no loss recovery: a lost packet (or a switch restart) stalls it", info.name)
        } else if s.abandoned > 0 {
            format!("gave up {} blocks or completion notices after {} retransmission timeouts each (peers or switch unreachable)", s.abandoned, reducelab_ina::canary_host::MAX_EXPIRIES)
        } else {
            "recovery (retransmission requests, failures, fallback) had not completed".to_string()
        };
        parts.push(format!(
            "allreduce {} (rank {}): {state}; sent {} contributions, {} retransmission requests; {why}",
            c.tenant, a.rank, s.sent_reduce, s.retx_requests
        ));
    }
    format!(
        "host {host}: timed out after {:.1} s ({} packets sent, {} received): {}",
        timeout.as_secs_f64(),
        r.tx_packets,
        r.rx_packets,
        parts.join("; ")
    )
}
