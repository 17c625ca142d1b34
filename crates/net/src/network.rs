use crate::config::{Arbitration, FlowControl, NetConfig, RoutingAlgo};
use crate::ids::{PktId, PortId};
use crate::packet::{fingerprint, Body, Packet, PacketPool};
use crate::routing::{torus_is_wrap, VcPolicy};
use crate::wires::Wires;
use reducelab_des::{EventQueue, Rng, SimDuration, SimTime};
use reducelab_topo::{MinimalRoutes, NodeId, Shape, Topology};
use serde::Serialize;
use std::collections::VecDeque;

/// Index of a message in [`Network::messages`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct MsgId(pub u32);

/// A point-to-point message: `bytes` of payload from host `src` to host `dst`.
#[derive(Clone, Debug)]
pub struct Message {
    pub src: u32,
    pub dst: u32,
    pub bytes: u64,
    pub start: SimTime,
    /// When the last packet was delivered (`SimTime::MAX` while incomplete).
    pub end: SimTime,
    /// Free for the workload (e.g. which generator sent it).
    pub tag: u64,
    /// NIC port it is sent from (`u16::MAX` = chosen by routing at start).
    pub port: u16,
    pub total_packets: u32,
    pub sent_packets: u32,
    pub recv_packets: u32,
    pub recv_bytes: u64,
    pub fingerprint_expected: u64,
    pub fingerprint_received: u64,
    /// Background traffic (see [`Network::mark_background`]): never waited for, not counted
    /// in [`Network::foreground`].
    pub background: bool,
}

impl Message {
    pub fn is_complete(&self) -> bool {
        self.end != SimTime::MAX
    }
    /// Delivered completely, every packet exactly once (fingerprints match).
    pub fn verified(&self) -> bool {
        self.is_complete() && self.recv_bytes == self.bytes && self.fingerprint_expected == self.fingerprint_received
    }
    pub fn completion_time(&self) -> Option<SimDuration> {
        self.is_complete().then(|| self.end.since(self.start))
    }
}

/// Where a protocol (in-network aggregation) packet is going: a host, or a switch node.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AppDst {
    Host(u32),
    Node(u32),
}

/// A protocol packet as the engine sees it: a handle into the workload's own arena (which
/// holds the protocol header and data), its size on the wire and its destination.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AppPacket {
    pub app: u32,
    pub wire_bytes: u32,
    pub dst: AppDst,
    /// Switches running a program hand the packet to it; otherwise they only forward it.
    pub intercept: bool,
}

/// Output of a packet a switch program forwards or emits.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AppOut {
    /// Towards the packet's destination, by the network's routing algorithm (congestion-aware
    /// where the routing is).
    Route,
    /// Out of this local port.
    Port(u16),
}

/// Limits of the switches' programmable pipelines (same for every programmable switch).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ProgramLimits {
    /// Protocol packets a switch's program processes per second (its aggregation throughput);
    /// packets beyond it wait, holding their ingress buffer.
    pub packets_per_second: f64,
    /// Extra latency of the program's processing, on top of the forwarding pipeline.
    pub latency_ps: u64,
}

/// A failure injected at a given time.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Fault {
    /// Both directions of the link go down; queued and in-flight packets on it are lost.
    Link { link: u32, at: SimTime },
    /// The node and all its links go down; packets inside it are lost.
    Node { node: u32, at: SimTime },
}

/// How far the finite part of a workload has got, for progress bars and the no-progress
/// watchdog of [`Network::run_limited`]. Background traffic is not part of it.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct WorkDone {
    /// Fraction of the finite work done, in `[0, 1]`.
    pub fraction: f64,
    /// A counter that grows whenever finite work moves on (payload delivered, a step or block
    /// finished, work started). Its unit does not matter; only a change does.
    pub units: u64,
    /// Some finite work has started and not finished: only then can the run stall.
    pub waiting: bool,
}

/// Limits of one run (see [`Network::run_limited`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RunLimits {
    /// End the run as [`RunEnd::TimeLimit`] when the next event is later than this.
    pub until: Option<SimTime>,
    /// End the run as [`RunEnd::Stalled`] when the workload is waiting ([`WorkDone::waiting`])
    /// and its [`WorkDone::units`] have not changed for this long (simulated time).
    pub watchdog: Option<SimDuration>,
}

/// Foreground (not background) message counters of the network.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Foreground {
    /// Messages whose start time has come.
    pub started: u64,
    /// Messages delivered completely.
    pub delivered: u64,
    /// Payload bytes delivered, packet by packet.
    pub payload_bytes: u64,
}

/// The workload driving a run: starts messages and reacts to deliveries and timers.
/// Implementations are called synchronously from the event loop (no boxing per event).
pub trait Workload {
    fn on_start(&mut self, _net: &mut Network) {}
    /// Message `msg` has been delivered completely at its destination.
    fn on_delivered(&mut self, _net: &mut Network, _msg: MsgId) {}
    fn on_timer(&mut self, _net: &mut Network, _token: u64) {}
    /// A protocol packet reached a programmable switch (`node`, arriving on local port
    /// `in_port`). The workload takes custody and must resolve it with exactly one of
    /// [`Network::app_consume`] or [`Network::app_forward`]; it may emit more packets.
    fn on_app_at_switch(&mut self, net: &mut Network, _node: u32, _in_port: u16, pkt: PktId) {
        net.app_consume(pkt);
    }
    /// A protocol packet was delivered to its destination host.
    fn on_app_delivered(&mut self, _net: &mut Network, _host: u32, _app: u32) {}
    /// A protocol packet was lost (link loss, failure, buffer overflow, no route).
    fn on_app_lost(&mut self, _net: &mut Network, _app: u32) {}
    /// The protocol injection queue of a host port ran low (see [`Network::app_inject`]).
    fn on_app_queue_low(&mut self, _net: &mut Network, _host: u32, _port: u16) {}
    /// Called when the run cannot go on (no event left, or the watchdog fired): `Some(reason)`
    /// if the workload has not finished, naming what is stuck; the run ends as
    /// [`RunEnd::Stalled`] with this reason followed by the network's state.
    fn unfinished(&self, _net: &Network) -> Option<String> {
        None
    }
    /// Progress of the finite work (cheap: called every few thousand events).
    fn work(&self, _net: &Network) -> WorkDone {
        WorkDone::default()
    }
}

/// How a run ended.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub enum RunEnd {
    /// The workload called [`Network::stop`].
    Stopped,
    /// No events left and every message delivered.
    Drained,
    /// The time limit passed.
    TimeLimit,
    /// The work cannot finish (no event left, or no progress for the watchdog's time); says
    /// why: the stuck workload first, then the network's state.
    Stalled { reason: String },
    /// The caller's poll function asked to stop (e.g. a signal).
    Interrupted,
}

#[derive(Clone, Copy, Debug)]
enum Event {
    /// The port may transmit (its previous packet finished, or a noise delay ended).
    Wake { port: u32 },
    /// The packet at the head of the wire of output `port` arrives at the other end (last
    /// bit plus the receiving node's pipeline latency).
    Arrive { port: u32 },
    MsgStart { msg: u32 },
    Timer { token: u64 },
    Fault { idx: u32 },
    /// A protocol packet reaches the program of the switch it is in (it had to wait for the
    /// program's throughput).
    Program { pkt: PktId },
}

/// What an arrival turned into, for the run loop to report to the workload.
enum Arrival {
    Nothing,
    Delivered(u32),
    AppAtSwitch { node: u32, in_port: u16, pkt: PktId },
    AppAtHost { host: u32, app: u32 },
}

/// A protocol packet waiting in a host's injection queue.
#[derive(Clone, Copy)]
struct AppQueued {
    pkt: AppPacket,
    since: u64,
}

/// Notifications raised deep in the engine and delivered to the workload after the event.
#[derive(Clone, Copy)]
enum Note {
    AppLost(u32),
    /// A message delivered without crossing the network (source = destination).
    Delivered(u32),
    QueueLow { host: u32, port: u16 },
}

/// A host port asks for more protocol packets when its queue falls below this length.
pub const APP_QUEUE_LOW: usize = 4;

#[derive(Clone, Copy, Default)]
struct VcQueue {
    head: Option<PktId>,
    tail: Option<PktId>,
    bytes: u64,
}

#[derive(Clone, Debug, Default)]
struct PortState {
    busy_until: u64,
    wake_pending: bool,
    /// Has work but no credits, and no credit return is pending: the next return wakes it.
    credit_blocked: bool,
    noise_paid: bool,
    /// Since when the host's next packet on this port has been ready (for age arbitration).
    inject_since: u64,
    rr: u8,
    q_bytes: u64,
    q_packets: u32,
    q_last_change: u64,
    q_area: u128,
    max_q_bytes: u64,
    bytes_tx: u64,
    packets_tx: u64,
    busy_ps: u64,
    drops: u64,
    ecn_marks: u64,
}

/// Counters of one output port (one direction of a link) at the end of a run.
#[derive(Clone, Debug, Serialize)]
pub struct PortStats {
    pub node: u32,
    pub port: u16,
    pub peer_node: u32,
    pub peer_port: u16,
    pub link: u32,
    pub bytes: u64,
    pub packets: u64,
    pub busy_ps: u64,
    pub max_queue_bytes: u64,
    /// Time-weighted mean queue length over the run.
    pub mean_queue_bytes: f64,
    pub drops: u64,
    pub ecn_marks: u64,
}

/// Whole-network counters.
#[derive(Clone, Debug, Default, Serialize)]
pub struct NetworkStats {
    pub events: u64,
    pub packets_created: u64,
    pub packet_hops: u64,
    pub delivered_packets: u64,
    pub drops_buffer: u64,
    pub drops_loss: u64,
    pub drops_failure: u64,
    pub drops_no_route: u64,
    pub ecn_marks: u64,
    pub peak_packets_in_flight: u32,
}

/// The simulated network: topology, port and queue state, messages and the event queue.
pub struct Network {
    cfg: NetConfig,
    vc_policy: VcPolicy,
    nvc: usize,
    routes: MinimalRoutes,
    /// Kept to rebuild routes after failures.
    topo: Topology,
    // Per node.
    node_port_base: Vec<u32>,
    node_forwards: Vec<bool>,
    node_host: Vec<u32>,
    node_up: Vec<bool>,
    host_node: Vec<u32>,
    // Per global port (one output direction of a link).
    port_node: Vec<u32>,
    port_local: Vec<u16>,
    port_peer: Vec<u32>,
    port_link: Vec<u32>,
    port_bps: Vec<u64>,
    port_lat: Vec<u64>,
    ports: Vec<PortState>,
    vcq: Vec<VcQueue>,
    credits: Vec<i64>,
    /// Credit returns in flight towards each output port: (arrival ps, vc, bytes), in arrival
    /// order (a link's latency is fixed and returns are sent in event order). Absorbed lazily
    /// when the port looks at its credits, so an unblocked port costs no event per packet.
    credit_returns: Vec<VecDeque<(u64, u8, u32)>>,
    wires: Wires,
    inject: Vec<VecDeque<u32>>,
    link_up: Vec<bool>,
    link_loss: Vec<f64>,
    // Traffic.
    pool: PacketPool,
    messages: Vec<Message>,
    undelivered: u64,
    fg: Foreground,
    queue: EventQueue<Event>,
    faults: Vec<Fault>,
    rng_loss: Rng,
    rng_noise: Rng,
    salt: u64,
    stats: NetworkStats,
    stop: bool,
    scratch: Vec<u16>,
    shape_dims: Vec<u32>,
    // Protocol packets (switch programs and host agents).
    app_q: Vec<VecDeque<AppQueued>>,
    app_low_armed: Vec<bool>,
    programmable: Vec<bool>,
    program_ps_per_packet: u64,
    program_latency_ps: u64,
    program_free_ps: Vec<u64>,
    notes: Vec<Note>,
    /// Hop distances to switch nodes that protocol packets are addressed to, built on first use.
    node_dist: Vec<Option<Vec<u32>>>,
    // Input round-robin arbitration (empty with FIFO): per (port, VC, input) FIFOs, the
    // inputs with packets queued as a bitmask per (port, VC), and the input served last.
    in_stride: usize,
    inq: Vec<(Option<PktId>, Option<PktId>)>,
    in_mask: Vec<u128>,
    in_last: Vec<u8>,
}

impl Network {
    /// Assembles a network. Errors name the offending setting.
    pub fn new(topo: &Topology, cfg: NetConfig, faults: Vec<Fault>, rng: &Rng) -> Result<Network, String> {
        if cfg.mtu_bytes <= cfg.header_bytes {
            return Err(format!("mtu_bytes ({}) must exceed header_bytes ({})", cfg.mtu_bytes, cfg.header_bytes));
        }
        if cfg.flow_control == FlowControl::Credit && cfg.buffer_bytes < cfg.mtu_bytes as u64 {
            return Err(format!("buffer_bytes ({}) must hold at least one MTU ({})", cfg.buffer_bytes, cfg.mtu_bytes));
        }
        if !(0.0..=1.0).contains(&cfg.loss_probability) || !(0.0..=1.0).contains(&cfg.noise_probability) {
            return Err("probabilities must be within [0, 1]".into());
        }
        let vc_policy = VcPolicy::choose(topo, cfg.routing, cfg.flow_control)?;
        let nvc = vc_policy.num_vcs();
        let shape_dims = match &topo.shape {
            Shape::Torus { dims } | Shape::HyperX { dims } => dims.clone(),
            _ => Vec::new(),
        };
        let mut node_port_base = Vec::with_capacity(topo.nodes.len() + 1);
        let mut total = 0u32;
        for n in &topo.nodes {
            node_port_base.push(total);
            total += n.ports.len() as u32;
        }
        node_port_base.push(total);
        let np = total as usize;
        let mut port_node = vec![0; np];
        let mut port_local = vec![0; np];
        let mut port_peer = vec![0; np];
        let mut port_link = vec![0; np];
        let mut port_bps = vec![0; np];
        let mut port_lat = vec![0; np];
        for (ni, n) in topo.nodes.iter().enumerate() {
            for (pi, p) in n.ports.iter().enumerate() {
                let g = node_port_base[ni] as usize + pi;
                port_node[g] = ni as u32;
                port_local[g] = pi as u16;
                port_peer[g] = node_port_base[p.peer.idx()] + p.peer_port as u32;
                port_link[g] = p.link.0;
                let l = &topo.links[p.link.idx()];
                port_bps[g] = l.bandwidth_bps;
                port_lat[g] = l.latency_ps;
            }
        }
        for f in &faults {
            match *f {
                Fault::Link { link, .. } if link as usize >= topo.links.len() => {
                    return Err(format!("fault link {link} does not exist (topology has {} links)", topo.links.len()))
                }
                Fault::Node { node, .. } if node as usize >= topo.nodes.len() => {
                    return Err(format!("fault node {node} does not exist (topology has {} nodes)", topo.nodes.len()))
                }
                _ => {}
            }
        }
        let max_ports = topo.nodes.iter().map(|n| n.ports.len()).max().unwrap_or(0);
        let rr = cfg.arbitration == Arbitration::InputRoundRobin;
        if rr && max_ports + 1 > 128 {
            return Err(format!("arbitration input_round_robin supports nodes with up to 127 ports; this topology has {max_ports}"));
        }
        let in_stride = max_ports + 1;
        let credit0 = if cfg.flow_control == FlowControl::Credit { cfg.buffer_bytes as i64 } else { i64::MAX / 4 };
        let mut net = Network {
            routes: MinimalRoutes::new(topo),
            topo: topo.clone(),
            vc_policy,
            nvc,
            node_forwards: topo.nodes.iter().map(|n| n.forwards).collect(),
            node_host: topo.nodes.iter().map(|n| n.host.unwrap_or(u32::MAX)).collect(),
            node_up: vec![true; topo.nodes.len()],
            host_node: topo.hosts.iter().map(|h| h.0).collect(),
            node_port_base,
            port_node,
            port_local,
            port_peer,
            port_link,
            port_bps,
            port_lat,
            ports: vec![PortState::default(); np],
            vcq: vec![VcQueue { head: None, tail: None, bytes: 0 }; np * nvc],
            credits: vec![credit0; np * nvc],
            credit_returns: (0..np).map(|_| VecDeque::new()).collect(),
            wires: Wires::new(np),
            inject: (0..np).map(|_| VecDeque::new()).collect(),
            link_up: vec![true; topo.links.len()],
            link_loss: vec![cfg.loss_probability; topo.links.len()],
            pool: PacketPool::new(),
            messages: Vec::new(),
            undelivered: 0,
            fg: Foreground::default(),
            queue: EventQueue::with_capacity(1 << 16),
            faults,
            rng_loss: rng.fork(0x1055),
            rng_noise: rng.fork(0x4015E),
            salt: rng.fork(0x5A17).next_u64(),
            stats: NetworkStats::default(),
            stop: false,
            scratch: Vec::with_capacity(64),
            shape_dims,
            app_q: (0..np).map(|_| VecDeque::new()).collect(),
            app_low_armed: vec![false; np],
            programmable: vec![false; topo.nodes.len()],
            program_ps_per_packet: 0,
            program_latency_ps: 0,
            program_free_ps: vec![0; topo.nodes.len()],
            notes: Vec::new(),
            node_dist: vec![None; topo.nodes.len()],
            in_stride,
            inq: if rr { vec![(None, None); np * nvc * in_stride] } else { Vec::new() },
            in_mask: if rr { vec![0; np * nvc] } else { Vec::new() },
            in_last: if rr { vec![0; np * nvc] } else { Vec::new() },
            cfg,
        };
        for i in 0..net.faults.len() {
            let at = match net.faults[i] {
                Fault::Link { at, .. } | Fault::Node { at, .. } => at,
            };
            net.queue.push(at, Event::Fault { idx: i as u32 });
        }
        Ok(net)
    }

    // ----- Public API for workloads -------------------------------------------------------

    pub fn now(&self) -> SimTime {
        self.queue.now()
    }
    pub fn config(&self) -> &NetConfig {
        &self.cfg
    }
    pub fn num_hosts(&self) -> usize {
        self.host_node.len()
    }
    pub fn vc_policy(&self) -> &VcPolicy {
        &self.vc_policy
    }
    pub fn messages(&self) -> &[Message] {
        &self.messages
    }
    pub fn message(&self, id: MsgId) -> &Message {
        &self.messages[id.0 as usize]
    }
    pub fn stats(&self) -> &NetworkStats {
        &self.stats
    }
    /// Messages sent but not yet delivered.
    pub fn undelivered(&self) -> u64 {
        self.undelivered
    }
    /// Events still queued (timers, packets on wires, wake-ups).
    pub fn pending_events(&self) -> usize {
        self.queue.len()
    }
    /// Ends the run after the current event.
    pub fn stop(&mut self) {
        self.stop = true;
    }
    /// Sets the loss probability of one link (both directions).
    pub fn set_link_loss(&mut self, link: u32, p: f64) {
        self.link_loss[link as usize] = p;
    }

    /// Sends `bytes` from host `src` to host `dst`, starting at `at` (not before now), from
    /// NIC port `port` or, if `None`, the port routing picks when the message starts.
    pub fn send(&mut self, src: u32, dst: u32, bytes: u64, at: SimTime, tag: u64, port: Option<u16>) -> MsgId {
        assert!((src as usize) < self.host_node.len() && (dst as usize) < self.host_node.len(), "host out of range");
        let payload = self.cfg.payload_per_packet() as u64;
        let total = bytes.div_ceil(payload).max(1);
        assert!(total < u32::MAX as u64, "message too large: {bytes} bytes");
        let id = self.messages.len() as u32;
        let mut fp = 0u64;
        for seq in 0..total as u32 {
            fp = fp.wrapping_add(fingerprint(self.salt, id, seq));
        }
        self.messages.push(Message {
            src,
            dst,
            bytes,
            start: at.max(self.now()),
            end: SimTime::MAX,
            tag,
            port: port.unwrap_or(u16::MAX),
            total_packets: total as u32,
            sent_packets: 0,
            recv_packets: 0,
            recv_bytes: 0,
            fingerprint_expected: fp,
            fingerprint_received: 0,
            background: false,
        });
        self.undelivered += 1;
        self.queue.push(at.max(self.now()), Event::MsgStart { msg: id });
        MsgId(id)
    }

    /// Marks `msg` (not yet started) as background traffic: runs never wait for it, and it is
    /// not counted in [`Network::foreground`].
    pub fn mark_background(&mut self, msg: MsgId) {
        self.messages[msg.0 as usize].background = true;
    }

    /// Counters of the foreground messages.
    pub fn foreground(&self) -> Foreground {
        self.fg
    }

    /// Calls [`Workload::on_timer`] with `token` at `at`.
    pub fn schedule_timer(&mut self, at: SimTime, token: u64) {
        self.queue.push(at.max(self.now()), Event::Timer { token });
    }

    /// Runs until the workload stops the run, the queue drains, or `until` passes.
    /// `progress` is called about every 65k events with the workload's progress estimate.
    pub fn run<W: Workload>(&mut self, w: &mut W, until: Option<SimTime>, progress: &mut dyn FnMut(f64)) -> RunEnd {
        self.run_limited(w, RunLimits { until, watchdog: None }, &mut |f| {
            progress(f);
            true
        })
    }

    /// Runs until the workload stops the run, the queue drains, a limit of `limits` is reached,
    /// or `poll` returns false. `poll` is called about every 65k events with the fraction of
    /// the finite work done; returning false ends the run as [`RunEnd::Interrupted`] (this is
    /// how a front end stops a run on a signal without a check per event).
    ///
    /// The watchdog looks at [`Workload::work`] every 4096 events, so it fires at the first
    /// check after its time has passed: deterministic, since it counts events, not wall time.
    pub fn run_limited<W: Workload>(&mut self, w: &mut W, limits: RunLimits, poll: &mut dyn FnMut(f64) -> bool) -> RunEnd {
        w.on_start(self);
        let limit = limits.until.unwrap_or(SimTime::MAX);
        let mut watch = (u64::MAX, self.now());
        loop {
            if self.stop {
                self.finish_stats();
                return RunEnd::Stopped;
            }
            match self.queue.peek_time() {
                None => break,
                Some(t) if t > limit => {
                    self.finish_stats();
                    return RunEnd::TimeLimit;
                }
                _ => {}
            }
            let (_, ev) = self.queue.pop().expect("peeked");
            self.stats.events += 1;
            if self.stats.events & 0xFFF == 0 {
                if let Some(end) = self.check_run(w, &limits, &mut watch, poll) {
                    self.finish_stats();
                    return end;
                }
            }
            match ev {
                Event::Wake { port } => {
                    self.ports[port as usize].wake_pending = false;
                    self.try_start(port);
                }
                Event::Arrive { port } => {
                    let pkt = self.wire_pop(port);
                    let ingress = self.port_peer[port as usize];
                    let a = self.arrive(ingress, pkt);
                    self.report_arrival(w, a);
                }
                Event::MsgStart { msg } => self.start_message(msg),
                Event::Timer { token } => w.on_timer(self, token),
                Event::Fault { idx } => self.apply_fault(idx),
                Event::Program { pkt } => {
                    let p = *self.pool.get(pkt);
                    let in_port = p.in_port.expect("a protocol packet at a switch came in on a port").idx();
                    let node = self.port_node[in_port];
                    if self.node_up[node as usize] {
                        w.on_app_at_switch(self, node, self.port_local[in_port], pkt);
                    } else {
                        self.stats.drops_failure += 1;
                        self.lose(pkt);
                    }
                }
            }
            while let Some(n) = self.notes.pop() {
                match n {
                    Note::AppLost(app) => w.on_app_lost(self, app),
                    Note::QueueLow { host, port } => w.on_app_queue_low(self, host, port),
                    Note::Delivered(msg) => w.on_delivered(self, MsgId(msg)),
                }
            }
        }
        self.finish_stats();
        if let Some(stuck) = w.unfinished(self) {
            RunEnd::Stalled { reason: format!("{stuck}; network: {}", self.network_state()) }
        } else if self.undelivered != 0 {
            RunEnd::Stalled { reason: self.stall_reason() }
        } else {
            RunEnd::Drained
        }
    }

    /// The periodic part of the event loop (every 4096 events): the watchdog and the caller's
    /// poll. `watch` is (work units at the last change, when they changed).
    #[cold]
    #[inline(never)]
    fn check_run<W: Workload>(&mut self, w: &mut W, limits: &RunLimits, watch: &mut (u64, SimTime), poll: &mut dyn FnMut(f64) -> bool) -> Option<RunEnd> {
        let now = self.now();
        let work = w.work(self);
        if work.units != watch.0 || !work.waiting {
            *watch = (work.units, now);
        } else if let Some(wd) = limits.watchdog {
            if now.since(watch.1) >= wd {
                let stuck = w.unfinished(self).unwrap_or_else(|| "the workload".into());
                return Some(RunEnd::Stalled {
                    reason: format!(
                        "{stuck}; no progress for {} us of simulated time (run.watchdog_us); network: {}",
                        wd.ps() / 1_000_000,
                        self.network_state()
                    ),
                });
            }
        }
        if self.stats.events & 0xFFFF == 0 && !poll(work.fraction) {
            return Some(RunEnd::Interrupted);
        }
        None
    }

    fn report_arrival<W: Workload>(&mut self, w: &mut W, a: Arrival) {
        match a {
            Arrival::Nothing => {}
            Arrival::Delivered(msg) => w.on_delivered(self, MsgId(msg)),
            Arrival::AppAtSwitch { node, in_port, pkt } => w.on_app_at_switch(self, node, in_port, pkt),
            Arrival::AppAtHost { host, app } => w.on_app_delivered(self, host, app),
        }
    }

    // ----- Protocol packets (switch programs and host agents) -----------------------------

    /// Makes switch `node` run the workload's program: protocol packets with `intercept`
    /// set are handed to [`Workload::on_app_at_switch`] there.
    pub fn set_programmable(&mut self, node: u32, on: bool) {
        self.programmable[node as usize] = on;
    }

    pub fn set_program_limits(&mut self, limits: ProgramLimits) {
        assert!(limits.packets_per_second > 0.0);
        self.program_ps_per_packet = (1e12 / limits.packets_per_second).round() as u64;
        self.program_latency_ps = limits.latency_ps;
    }

    /// Node id of host `host`.
    pub fn host_node_id(&self, host: u32) -> u32 {
        self.host_node[host as usize]
    }
    /// Host index of node `node`, if it is a host.
    pub fn node_host(&self, node: u32) -> Option<u32> {
        let h = self.node_host[node as usize];
        (h != u32::MAX).then_some(h)
    }
    /// Number of ports of `node`.
    pub fn node_ports(&self, node: u32) -> u16 {
        (self.node_port_base[node as usize + 1] - self.node_port_base[node as usize]) as u16
    }
    /// The node at the far end of local port `port` of `node`.
    pub fn port_peer_node(&self, node: u32, port: u16) -> u32 {
        self.port_node[self.port_peer[(self.node_port_base[node as usize] + port as u32) as usize] as usize]
    }
    pub fn node_is_up(&self, node: u32) -> bool {
        self.node_up[node as usize]
    }

    /// Queues a protocol packet for injection by host `host` on NIC port `port` (hosts with
    /// one port: 0). It leaves at line rate when the port's arbitration and credits allow,
    /// like message packets. When the queue falls below [`APP_QUEUE_LOW`] packets the
    /// workload gets [`Workload::on_app_queue_low`] once (re-armed by the next call), so a
    /// host agent can produce packets lazily instead of queueing a whole vector.
    pub fn app_inject(&mut self, host: u32, port: u16, pkt: AppPacket) {
        let node = self.host_node[host as usize];
        let g = self.node_port_base[node as usize] + port as u32;
        assert!(g < self.node_port_base[node as usize + 1], "host {host} has no port {port}");
        let now = self.queue.now().0;
        self.app_q[g as usize].push_back(AppQueued { pkt, since: now });
        self.app_low_armed[g as usize] = true;
        self.kick(g);
    }

    /// Protocol packets waiting in host `host`'s injection queue on `port`.
    pub fn app_queued(&self, host: u32, port: u16) -> usize {
        let node = self.host_node[host as usize];
        self.app_q[(self.node_port_base[node as usize] + port as u32) as usize].len()
    }

    /// The protocol packet `pkt` (in the workload's custody).
    pub fn app_packet(&self, pkt: PktId) -> AppPacket {
        let p = self.pool.get(pkt);
        AppPacket { app: p.app().expect("a protocol packet"), wire_bytes: p.wire_bytes, dst: p.dst, intercept: p.intercept }
    }

    /// Ends custody of `pkt`: the program absorbed it; its ingress buffer is free again.
    pub fn app_consume(&mut self, pkt: PktId) {
        self.drop_packet(pkt);
    }

    /// Ends custody of `pkt` by sending it on from `node`, rewritten to `as_pkt`. It keeps
    /// its ingress buffer until it leaves, like a forwarded packet.
    pub fn app_forward(&mut self, node: u32, pkt: PktId, out: AppOut, as_pkt: AppPacket) {
        self.set_app_fields(pkt, as_pkt);
        self.app_send(node, pkt, out);
    }

    /// A switch program creates a packet at `node`. It occupies no ingress buffer (it lives in
    /// the switch's own memory until sent).
    pub fn app_emit(&mut self, node: u32, out: AppOut, pkt: AppPacket) {
        let now = self.queue.now().0;
        let id = self.alloc_app_packet(u32::MAX, 0, now, pkt);
        self.app_send(node, id, out);
    }

    /// A new protocol packet from `src` (a host, or `u32::MAX` for a switch) on VC `vc`.
    fn alloc_app_packet(&mut self, src: u32, vc: u8, born_ps: u64, a: AppPacket) -> PktId {
        self.stats.packets_created += 1;
        let id = self.pool.alloc(Packet {
            next: None,
            wire_bytes: a.wire_bytes,
            payload_bytes: 0,
            src,
            dst: a.dst,
            body: Body::App(a.app),
            seq: 0,
            in_port: None,
            in_vc: 0,
            vc,
            hops: 0,
            ecn: false,
            flow_hash: a.app,
            fingerprint: 0,
            intercept: a.intercept,
            arrive_ps: 0,
            born_ps,
        });
        self.stats.peak_packets_in_flight = self.stats.peak_packets_in_flight.max(self.pool.live);
        id
    }

    fn set_app_fields(&mut self, id: PktId, a: AppPacket) {
        let p = self.pool.get_mut(id);
        p.body = Body::App(a.app);
        p.wire_bytes = a.wire_bytes;
        p.intercept = a.intercept;
        p.dst = a.dst;
    }

    fn app_send(&mut self, node: u32, pkt: PktId, out: AppOut) {
        let p = *self.pool.get(pkt);
        let chosen = match out {
            AppOut::Route => self.route(node, &p),
            AppOut::Port(lp) => {
                let g = self.node_port_base[node as usize] + lp as u32;
                if lp >= self.node_ports(node) || !self.link_up[self.port_link[g as usize] as usize] {
                    None
                } else {
                    Some((g, self.deterministic_vc(node, lp, &p)))
                }
            }
        };
        match chosen {
            Some((g, vc)) => {
                self.pool.get_mut(pkt).vc = vc;
                self.enqueue(g, pkt);
            }
            None => {
                self.stats.drops_no_route += 1;
                self.lose(pkt);
            }
        }
    }

    /// A packet is lost: frees it (and its ingress buffer) and tells the workload if it was
    /// a protocol packet.
    fn lose(&mut self, pkt: PktId) {
        let app = self.pool.get(pkt).app();
        self.drop_packet(pkt);
        if let Some(app) = app {
            self.notes.push(Note::AppLost(app));
        }
    }

    /// Minimal next hops from `node` towards switch `target` over live links, into `scratch`.
    fn candidates_to_node(&mut self, node: u32, target: u32) {
        if self.node_dist[target as usize].is_none() {
            let d = self.topo.bfs_from_alive(NodeId(target), &self.link_up, &self.node_up);
            self.node_dist[target as usize] = Some(d);
        }
        let dist = self.node_dist[target as usize].as_ref().expect("built");
        let here = dist[node as usize];
        self.scratch.clear();
        if here == u32::MAX || here == 0 {
            return;
        }
        let (b, e) = (self.node_port_base[node as usize], self.node_port_base[node as usize + 1]);
        for g in b..e {
            let peer = self.port_node[self.port_peer[g as usize] as usize];
            if self.link_up[self.port_link[g as usize] as usize] && dist[peer as usize] + 1 == here {
                // Only forwarding nodes (or the target) may carry the packet on.
                if peer == target || self.node_forwards[peer as usize] {
                    self.scratch.push((g - b) as u16);
                }
            }
        }
    }

    /// Why undelivered messages are stuck, when the workload does not say (see
    /// [`Workload::unfinished`]).
    fn stall_reason(&self) -> String {
        let lost = self.lost_packets();
        let hint = if lost > 0 { " (raw messages have no retransmission)" } else { "" };
        format!("{} of {} messages undelivered{hint}; network: {}", self.undelivered, self.messages.len(), self.network_state())
    }

    fn lost_packets(&self) -> u64 {
        let s = &self.stats;
        s.drops_buffer + s.drops_loss + s.drops_failure + s.drops_no_route
    }

    /// The network's part of a stall reason: drops, stuck queues, failed nodes and links.
    pub fn network_state(&self) -> String {
        let queued: u64 = self.ports.iter().map(|p| p.q_packets as u64).sum();
        let waiting: usize = self.inject.iter().filter(|q| !q.is_empty()).count();
        let s = &self.stats;
        let lost = self.lost_packets();
        let mut why = Vec::new();
        let down_nodes: Vec<String> = (0..self.node_up.len()).filter(|&n| !self.node_up[n]).map(|n| n.to_string()).collect();
        let down_links = self.link_up.iter().filter(|&&u| !u).count();
        if !down_nodes.is_empty() {
            why.push(format!("node {} failed", down_nodes.join(", ")));
        }
        if down_links > 0 {
            why.push(format!("{down_links} links down"));
        }
        if lost > 0 {
            why.push(format!(
                "{lost} packets were dropped (buffer {}, link loss {}, failures {}, no route {})",
                s.drops_buffer, s.drops_loss, s.drops_failure, s.drops_no_route
            ));
        }
        if queued > 0 || waiting > 0 {
            why.push(format!(
                "{queued} packets are stuck in queues and {waiting} ports cannot inject for lack of credits or a live link (deadlock or failed link)"
            ));
        }
        if why.is_empty() {
            why.push("no packet lost or stuck".into());
        }
        why.join("; ")
    }

    // ----- Port machinery ----------------------------------------------------------------

    #[inline]
    fn kick(&mut self, port: u32) {
        let now = self.queue.now().0;
        let ps = &mut self.ports[port as usize];
        if ps.wake_pending {
            return;
        }
        if now < ps.busy_until {
            ps.wake_pending = true;
            let t = ps.busy_until;
            self.queue.push(SimTime(t), Event::Wake { port });
            return;
        }
        self.try_start(port);
    }

    fn has_work(&self, port: u32) -> bool {
        self.ports[port as usize].q_packets > 0 || !self.inject[port as usize].is_empty() || !self.app_q[port as usize].is_empty()
    }

    /// Starts transmitting the next eligible packet on `port`, if idle.
    fn try_start(&mut self, port: u32) {
        let g = port as usize;
        let now = self.queue.now().0;
        if now < self.ports[g].busy_until || !self.link_up[self.port_link[g] as usize] {
            return;
        }
        self.ports[g].credit_blocked = false;
        self.absorb_credits(g, now);
        let nvc = self.nvc;
        let slots = nvc + 2; // VC queues, local message injection, local protocol injection
        let rr = self.ports[g].rr as usize;
        // Age-based arbitration (as in Cray Aries/Slingshot routers): among the queue heads
        // that have credits, the packet waiting longest in the network goes first; the host's
        // next packet counts as waiting since the port last injected (or its message
        // started). Ties go round-robin. Oldest-first keeps multi-hop flows from being
        // starved at every merge point (the parking-lot problem of plain round-robin).
        let mut best: Option<(u64, usize)> = None;
        for k in 0..slots {
            let idx = (rr + k) % slots;
            let age = if idx < nvc {
                let Some(head) = self.vc_head(g * nvc + idx) else { continue };
                let p = self.pool.get(head);
                if self.credits[g * nvc + idx] < p.wire_bytes as i64 {
                    continue;
                }
                p.born_ps
            } else if let (true, Some(&msg)) = (idx == nvc, self.inject[g].front()) {
                let vc = self.injection_vc(port, msg);
                let size = self.next_packet_size(msg);
                if self.credits[g * nvc + vc as usize] < size as i64 {
                    continue;
                }
                self.ports[g].inject_since.max(self.messages[msg as usize].start.ps())
            } else if idx == nvc + 1 {
                let Some(a) = self.app_q[g].front() else { continue };
                let vc = self.injection_vc(port, 0);
                if self.credits[g * nvc + vc as usize] < a.pkt.wire_bytes as i64 {
                    continue;
                }
                self.ports[g].inject_since.max(a.since)
            } else {
                continue;
            };
            if best.is_none_or(|(a, _)| age < a) {
                best = Some((age, idx));
            }
        }
        if let Some((_, idx)) = best {
            if idx < nvc {
                self.ports[g].rr = ((idx + 1) % slots) as u8;
                let pkt = self.dequeue(g, idx);
                self.transmit(port, pkt);
                return;
            }
            // Host injection (messages or protocol packets); OS noise may delay it.
            if self.cfg.noise_probability > 0.0 && !self.ports[g].noise_paid {
                self.ports[g].noise_paid = true;
                if self.rng_noise.bernoulli(self.cfg.noise_probability) {
                    let t = now + self.cfg.noise_delay_ps;
                    self.ports[g].busy_until = t;
                    self.ports[g].wake_pending = true;
                    self.queue.push(SimTime(t), Event::Wake { port });
                    return;
                }
            }
            self.ports[g].noise_paid = false;
            self.ports[g].rr = ((idx + 1) % slots) as u8;
            if idx == nvc + 1 {
                self.inject_app(g);
                return;
            }
            let msg = *self.inject[g].front().expect("candidate");
            let vc = self.injection_vc(port, msg);
            let size = self.next_packet_size(msg);
            let pkt = self.make_packet(g, msg, vc, size);
            self.ports[g].inject_since = now + SimDuration::serialization(size as u64, self.port_bps[g]).0;
            self.transmit(port, pkt);
            return;
        }
        // Work is waiting but no credits: sleep until the next credit return.
        if self.has_work(port) {
            match self.credit_returns[g].front() {
                Some(&(t, _, _)) => {
                    self.ports[g].wake_pending = true;
                    self.queue.push(SimTime(t), Event::Wake { port });
                }
                None => self.ports[g].credit_blocked = true,
            }
        }
    }

    /// Sends the head of host port `g`'s protocol queue.
    fn inject_app(&mut self, g: usize) {
        let now = self.queue.now().0;
        let a = self.app_q[g].pop_front().expect("candidate");
        let vc = self.injection_vc(g as u32, 0);
        let host = self.node_host[self.port_node[g] as usize];
        let born = now.max(self.ports[g].inject_since).max(a.since);
        let id = self.alloc_app_packet(host, vc, born, a.pkt);
        self.ports[g].inject_since = now + SimDuration::serialization(a.pkt.wire_bytes as u64, self.port_bps[g]).0;
        if self.app_q[g].len() < APP_QUEUE_LOW && self.app_low_armed[g] {
            self.app_low_armed[g] = false;
            self.notes.push(Note::QueueLow { host, port: self.port_local[g] });
        }
        self.transmit(g as u32, id);
    }

    /// Puts a packet on the wire of output `port`; only the wire's head has an event.
    #[inline]
    fn wire_push(&mut self, port: u32, pkt: PktId, arrive: u64) {
        if self.wires.push(&mut self.pool, PortId::new(port), pkt, arrive) {
            self.queue.push(SimTime(arrive), Event::Arrive { port });
        }
    }

    #[inline]
    fn wire_pop(&mut self, port: u32) -> PktId {
        let (pkt, next) = self.wires.pop(&self.pool, PortId::new(port));
        if let Some(t) = next {
            self.queue.push(SimTime(t), Event::Arrive { port });
        }
        pkt
    }

    #[inline]
    fn absorb_credits(&mut self, g: usize, now: u64) {
        let q = &mut self.credit_returns[g];
        while let Some(&(t, vc, bytes)) = q.front() {
            if t > now {
                break;
            }
            self.credits[g * self.nvc + vc as usize] += bytes as i64;
            q.pop_front();
        }
    }

    /// Credits for `bytes` of the ingress buffer behind output `port` arrive there at `at`.
    #[inline]
    fn return_credit(&mut self, port: u32, vc: u8, bytes: u32, at: u64) {
        if self.cfg.flow_control != FlowControl::Credit {
            return;
        }
        let g = port as usize;
        self.credit_returns[g].push_back((at, vc, bytes));
        let ps = &mut self.ports[g];
        if ps.credit_blocked && !ps.wake_pending {
            ps.credit_blocked = false;
            ps.wake_pending = true;
            self.queue.push(SimTime(at), Event::Wake { port });
        }
    }

    fn next_packet_size(&self, msg: u32) -> u32 {
        let m = &self.messages[msg as usize];
        let payload = self.cfg.payload_per_packet() as u64;
        let sent = m.sent_packets as u64 * payload;
        let this = m.bytes.saturating_sub(sent).min(payload) as u32;
        this + self.cfg.header_bytes
    }

    fn make_packet(&mut self, g: usize, msg: u32, vc: u8, size: u32) -> PktId {
        let m = &mut self.messages[msg as usize];
        let seq = m.sent_packets;
        m.sent_packets += 1;
        let done = m.sent_packets == m.total_packets;
        let (src, dst) = (m.src, m.dst);
        let flow_hash = (fingerprint(self.salt, msg, u32::MAX) >> 32) as u32;
        let fp = fingerprint(self.salt, msg, seq);
        let q = &mut self.inject[g];
        q.pop_front();
        if !done {
            q.push_back(msg);
        }
        self.stats.packets_created += 1;
        let id = self.pool.alloc(Packet {
            next: None,
            wire_bytes: size,
            payload_bytes: size - self.cfg.header_bytes,
            src,
            dst: AppDst::Host(dst),
            body: Body::Msg { msg },
            seq,
            in_port: None,
            in_vc: 0,
            vc,
            hops: 0,
            ecn: false,
            flow_hash,
            fingerprint: fp,
            intercept: false,
            arrive_ps: 0,
            born_ps: self.queue.now().0.max(self.ports[g].inject_since),
        });
        self.stats.peak_packets_in_flight = self.stats.peak_packets_in_flight.max(self.pool.live);
        id
    }

    fn injection_vc(&self, port: u32, _msg: u32) -> u8 {
        match &self.vc_policy {
            VcPolicy::Single | VcPolicy::HopIndex { .. } => 0,
            VcPolicy::TorusDateline { dims } => {
                torus_is_wrap(dims, self.port_node[port as usize], self.port_local[port as usize]) as u8
            }
            VcPolicy::TorusDuato { .. } => 2,
        }
    }

    fn transmit(&mut self, port: u32, pkt: PktId) {
        let g = port as usize;
        let now = self.queue.now().0;
        let p = *self.pool.get(pkt);
        let size = p.wire_bytes;
        let ser = SimDuration::serialization(size as u64, self.port_bps[g]).0;
        let end = now + ser;
        {
            let ps = &mut self.ports[g];
            ps.busy_until = end;
            ps.bytes_tx += size as u64;
            ps.packets_tx += 1;
            ps.busy_ps += ser;
        }
        self.credits[g * self.nvc + p.vc as usize] -= size as i64;
        self.stats.packet_hops += 1;
        // The packet leaves this node: give the ingress buffer back to the upstream sender.
        if let Some(ip) = p.in_port {
            let up = self.port_peer[ip.idx()];
            let lat = self.port_lat[ip.idx()];
            self.return_credit(up, p.in_vc, size, now + lat);
        }
        // Every packet a forwarding node receives pays its pipeline latency (also those it
        // delivers to its own host), so arrival times on a wire are in FIFO order.
        let peer_node = self.port_node[self.port_peer[g] as usize] as usize;
        let mut arrive = end + self.port_lat[g];
        if self.node_forwards[peer_node] {
            arrive += self.cfg.switch_latency_ps;
        }
        self.wire_push(port, pkt, arrive);
        if self.has_work(port) {
            self.ports[g].wake_pending = true;
            self.queue.push(SimTime(end), Event::Wake { port });
        }
    }

    #[inline]
    fn note_queue_change(ps: &mut PortState, now: u64) {
        ps.q_area += ps.q_bytes as u128 * (now - ps.q_last_change) as u128;
        ps.q_last_change = now;
    }

    fn enqueue(&mut self, port: u32, pkt: PktId) {
        let g = port as usize;
        let now = self.queue.now().0;
        let (size, vc) = {
            let p = self.pool.get(pkt);
            (p.wire_bytes as u64, p.vc as usize)
        };
        let cap = self.cfg.buffer_bytes;
        let ps = &mut self.ports[g];
        if self.cfg.flow_control == FlowControl::DropTail && ps.q_bytes + size > cap {
            ps.drops += 1;
            self.stats.drops_buffer += 1;
            self.lose(pkt);
            return;
        }
        if let Some(th) = self.cfg.ecn_threshold_bytes {
            if ps.q_bytes > th {
                ps.ecn_marks += 1;
                self.stats.ecn_marks += 1;
                self.pool.get_mut(pkt).ecn = true;
            }
        }
        Self::note_queue_change(ps, now);
        ps.q_bytes += size;
        ps.q_packets += 1;
        ps.max_q_bytes = ps.max_q_bytes.max(ps.q_bytes);
        let qi = g * self.nvc + vc;
        self.vcq[qi].bytes += size;
        self.pool.get_mut(pkt).next = None;
        let (head, tail) = if self.inq.is_empty() {
            let q = &mut self.vcq[qi];
            (&mut q.head, &mut q.tail)
        } else {
            let in_port = self.pool.get(pkt).in_port;
            let input = match in_port {
                None => self.in_stride - 1,
                Some(ip) => self.port_local[ip.idx()] as usize,
            };
            self.in_mask[qi] |= 1u128 << input;
            let q = &mut self.inq[qi * self.in_stride + input];
            (&mut q.0, &mut q.1)
        };
        match tail.replace(pkt) {
            None => *head = Some(pkt),
            Some(old_tail) => self.pool.get_mut(old_tail).next = Some(pkt),
        }
        self.kick(port);
    }

    /// With input round-robin: the input served next on queue `qi` (the first input with
    /// packets after the one served last).
    #[inline]
    fn next_input(&self, qi: usize) -> Option<usize> {
        let mask = self.in_mask[qi];
        if mask == 0 {
            return None;
        }
        let from = (self.in_last[qi] as u32 + 1) % 128;
        let later = mask & (!0u128 << from);
        Some(if later != 0 { later.trailing_zeros() } else { mask.trailing_zeros() } as usize)
    }

    /// The packet queue `qi` (port × VC) sends next, if any.
    #[inline]
    fn vc_head(&self, qi: usize) -> Option<PktId> {
        if self.inq.is_empty() {
            self.vcq[qi].head
        } else {
            self.inq[qi * self.in_stride + self.next_input(qi)?].0
        }
    }

    fn dequeue(&mut self, g: usize, vc: usize) -> PktId {
        let now = self.queue.now().0;
        let qi = g * self.nvc + vc;
        let pkt = self.vc_head(qi).expect("dequeue from an empty queue");
        let next = self.pool.get(pkt).next;
        let size = self.pool.get(pkt).wire_bytes as u64;
        if self.inq.is_empty() {
            let q = &mut self.vcq[qi];
            q.head = next;
            if next.is_none() {
                q.tail = None;
            }
        } else {
            let i = self.next_input(qi).expect("non-empty");
            self.in_last[qi] = i as u8;
            let q = &mut self.inq[qi * self.in_stride + i];
            q.0 = next;
            if next.is_none() {
                q.1 = None;
                self.in_mask[qi] &= !(1u128 << i);
            }
        }
        self.vcq[qi].bytes -= size;
        let ps = &mut self.ports[g];
        Self::note_queue_change(ps, now);
        ps.q_bytes -= size;
        ps.q_packets -= 1;
        pkt
    }

    /// Drops a packet held by a live node, giving its ingress buffer back to the upstream.
    fn drop_packet(&mut self, pkt: PktId) {
        let p = *self.pool.get(pkt);
        if let Some(ip) = p.in_port {
            let up = self.port_peer[ip.idx()];
            let lat = self.port_lat[ip.idx()];
            let now = self.queue.now().0;
            self.return_credit(up, p.in_vc, p.wire_bytes, now + lat);
        }
        self.pool.release(pkt);
    }

    // ----- Arrival, routing, delivery ------------------------------------------------------

    fn arrive(&mut self, in_port: u32, pkt: PktId) -> Arrival {
        let gi = in_port as usize;
        let node = self.port_node[gi] as usize;
        let link = self.port_link[gi] as usize;
        if !self.link_up[link] || !self.node_up[node] {
            // Lost with the failed link or node; nobody is left to return its credit.
            self.stats.drops_failure += 1;
            let app = self.pool.get(pkt).app();
            self.pool.release(pkt);
            if let Some(app) = app {
                self.notes.push(Note::AppLost(app));
            }
            return Arrival::Nothing;
        }
        {
            let p = self.pool.get_mut(pkt);
            p.hops = p.hops.saturating_add(1);
            p.in_vc = p.vc;
            p.in_port = Some(PortId::new(in_port));
        }
        let loss = self.link_loss[link];
        if loss > 0.0 && self.rng_loss.bernoulli(loss) {
            self.stats.drops_loss += 1;
            let up = self.port_peer[gi] as usize;
            self.ports[up].drops += 1;
            self.lose(pkt);
            return Arrival::Nothing;
        }
        let p = *self.pool.get(pkt);
        if let Some(app) = p.app() {
            let host = self.node_host[node];
            // A protocol packet reaching a host is for that host when addressed to it, or when
            // the host does not forward (multicast copies carry no host address).
            if host != u32::MAX && (p.dst == AppDst::Host(host) || !self.node_forwards[node]) {
                self.drop_packet(pkt); // consumed by the host: credit goes back at once
                self.stats.delivered_packets += 1;
                return Arrival::AppAtHost { host, app };
            }
            if p.dst == AppDst::Node(node as u32) || (p.intercept && self.programmable[node]) {
                // The program processes packets at its throughput; a packet that must wait
                // keeps its ingress buffer meanwhile.
                let now = self.queue.now().0;
                let start = now.max(self.program_free_ps[node]);
                self.program_free_ps[node] = start + self.program_ps_per_packet;
                let at = start + self.program_latency_ps;
                if at > now {
                    self.queue.push(SimTime(at), Event::Program { pkt });
                    return Arrival::Nothing;
                }
                return Arrival::AppAtSwitch { node: node as u32, in_port: self.port_local[gi], pkt };
            }
        }
        if p.dst == AppDst::Host(self.node_host[node]) {
            self.drop_packet(pkt); // consumed by the host: credit goes back at once
            self.stats.delivered_packets += 1;
            match self.pool_released_delivery(&p) {
                Some(m) => Arrival::Delivered(m),
                None => Arrival::Nothing,
            }
        } else if !self.node_forwards[node] {
            self.stats.drops_no_route += 1;
            self.lose(pkt);
            Arrival::Nothing
        } else {
            match self.route(node as u32, &p) {
                Some((out, vc)) => {
                    self.pool.get_mut(pkt).vc = vc;
                    self.enqueue(out, pkt);
                }
                None => {
                    self.stats.drops_no_route += 1;
                    self.lose(pkt);
                }
            }
            Arrival::Nothing
        }
    }

    fn pool_released_delivery(&mut self, p: &Packet) -> Option<u32> {
        let now = self.queue.now();
        let Body::Msg { msg } = p.body else { unreachable!("a protocol packet delivered as a message") };
        let m = &mut self.messages[msg as usize];
        m.recv_packets += 1;
        m.recv_bytes += p.payload_bytes as u64;
        m.fingerprint_received = m.fingerprint_received.wrapping_add(p.fingerprint);
        if !m.background {
            self.fg.payload_bytes += p.payload_bytes as u64;
        }
        if m.recv_packets == m.total_packets {
            m.end = now;
            self.undelivered -= 1;
            self.fg.delivered += !m.background as u64;
            Some(msg)
        } else {
            None
        }
    }

    /// Live minimal candidates of `node` towards `dst` as global ports, into `self.scratch`
    /// (as local port numbers).
    fn live_candidates(&mut self, node: u32, dst: u32) {
        let mut buf = std::mem::take(&mut self.scratch);
        self.routes.candidates(NodeId(node), dst, &mut buf);
        let base = self.node_port_base[node as usize];
        buf.retain(|&p| self.link_up[self.port_link[(base + p as u32) as usize] as usize]);
        self.scratch = buf;
    }

    /// The deterministic choice among `scratch`: dimension order where the topology has
    /// dimensions, destination-mod-k otherwise.
    fn deterministic_pick(&self, dst: u32) -> u16 {
        if self.routes.is_structural() {
            self.scratch[0]
        } else {
            self.scratch[dst as usize % self.scratch.len()]
        }
    }

    fn least_queued(&self, base: u32, start: usize) -> u16 {
        let n = self.scratch.len();
        let mut best = self.scratch[start % n];
        let mut best_q = self.ports[(base + best as u32) as usize].q_bytes;
        for k in 1..n {
            let p = self.scratch[(start + k) % n];
            let q = self.ports[(base + p as u32) as usize].q_bytes;
            if q < best_q {
                best = p;
                best_q = q;
            }
        }
        best
    }

    /// Picks the output port (global id) and VC for a packet at a forwarding node.
    fn route(&mut self, node: u32, p: &Packet) -> Option<(u32, u8)> {
        match p.dst {
            AppDst::Node(n) => self.candidates_to_node(node, n),
            AppDst::Host(h) => self.live_candidates(node, h),
        }
        if self.scratch.is_empty() {
            return None;
        }
        let base = self.node_port_base[node as usize];
        let n = self.scratch.len();
        if let VcPolicy::TorusDuato { .. } = self.vc_policy {
            if p.in_vc == 2 {
                // Adaptive channel: minimal ports whose downstream adaptive buffer can take
                // this packet after everything already queued for it.
                let mut best: Option<(u16, u64)> = None;
                for k in 0..n {
                    let lp = self.scratch[(p.flow_hash as usize + k) % n];
                    let g = (base + lp as u32) as usize;
                    let free = self.credits[g * 3 + 2] - self.vcq[g * 3 + 2].bytes as i64;
                    if free >= p.wire_bytes as i64 {
                        let q = self.ports[g].q_bytes;
                        if best.is_none_or(|(_, bq)| q < bq) {
                            best = Some((lp, q));
                        }
                    }
                }
                if let Some((lp, _)) = best {
                    return Some((base + lp as u32, 2));
                }
            }
            let lp = self.scratch[0];
            return Some((base + lp as u32, self.dateline_vc(node, lp, p)));
        }
        let lp = match self.cfg.routing {
            RoutingAlgo::Minimal => self.deterministic_pick(p.dst_key()),
            RoutingAlgo::Ecmp => self.scratch[p.flow_hash as usize % n],
            RoutingAlgo::Adaptive => self.least_queued(base, p.flow_hash as usize % n),
            RoutingAlgo::Canary => {
                let start = p.dst_key() as usize % n;
                let def = self.scratch[start];
                if self.ports[(base + def as u32) as usize].q_bytes * 2 > self.cfg.buffer_bytes {
                    self.least_queued(base, start)
                } else {
                    def
                }
            }
        };
        Some((base + lp as u32, self.deterministic_vc(node, lp, p)))
    }

    /// VC of a packet leaving `node` on local port `lp` by a non-adaptive choice (on a Duato
    /// torus that is the escape channel, whose dateline VCs are deadlock-free).
    fn deterministic_vc(&self, node: u32, lp: u16, p: &Packet) -> u8 {
        match &self.vc_policy {
            VcPolicy::Single => 0,
            VcPolicy::HopIndex { vcs } => p.hops.min(vcs - 1),
            VcPolicy::TorusDateline { .. } | VcPolicy::TorusDuato { .. } => self.dateline_vc(node, lp, p),
        }
    }

    /// Dateline VC for leaving `node` on local port `lp`: 1 on the wrap link of a dimension
    /// and after it while the packet stays in that dimension on the escape channels.
    fn dateline_vc(&self, node: u32, lp: u16, p: &Packet) -> u8 {
        if torus_is_wrap(&self.shape_dims, node, lp) {
            return 1;
        }
        let same_dim = p.in_port.is_some_and(|ip| self.port_local[ip.idx()] / 2 == lp / 2);
        (p.in_vc == 1 && same_dim) as u8
    }

    fn start_message(&mut self, msg: u32) {
        let (src, dst, port) = {
            let m = &self.messages[msg as usize];
            (m.src, m.dst, m.port)
        };
        let node = self.host_node[src as usize];
        let base = self.node_port_base[node as usize];
        let nports = self.node_port_base[node as usize + 1] - base;
        let fg = !self.messages[msg as usize].background;
        self.fg.started += fg as u64;
        if src == dst {
            // Local delivery: nothing crosses the network, but the workload hears of it like
            // of any other delivery.
            let m = &mut self.messages[msg as usize];
            m.sent_packets = m.total_packets;
            m.recv_packets = m.total_packets;
            m.recv_bytes = m.bytes;
            m.fingerprint_received = m.fingerprint_expected;
            m.end = self.queue.now();
            self.undelivered -= 1;
            if fg {
                self.fg.delivered += 1;
                self.fg.payload_bytes += m.bytes;
            }
            self.notes.push(Note::Delivered(msg));
            return;
        }
        let lp = if port != u16::MAX && (port as u32) < nports {
            port
        } else if nports == 1 {
            0
        } else {
            self.live_candidates(node, dst);
            if self.scratch.is_empty() {
                self.stats.drops_no_route += 1;
                return; // stays undelivered; reported at the end
            }
            match self.cfg.routing {
                RoutingAlgo::Minimal => self.deterministic_pick(dst),
                RoutingAlgo::Ecmp => {
                    let h = (fingerprint(self.salt, msg, u32::MAX) >> 32) as usize;
                    self.scratch[h % self.scratch.len()]
                }
                RoutingAlgo::Adaptive | RoutingAlgo::Canary => {
                    // Spread messages: fewest active injections, then fewest queued bytes.
                    let mut best = self.scratch[0];
                    let mut key = (u64::MAX, u64::MAX);
                    for &c in &self.scratch {
                        let g = (base + c as u32) as usize;
                        let k = (self.inject[g].len() as u64, self.ports[g].q_bytes);
                        if k < key {
                            key = k;
                            best = c;
                        }
                    }
                    best
                }
            }
        };
        self.messages[msg as usize].port = lp;
        let g = base + lp as u32;
        self.inject[g as usize].push_back(msg);
        self.kick(g);
    }

    fn apply_fault(&mut self, idx: u32) {
        let f = self.faults[idx as usize];
        let mut dead_ports = Vec::new();
        match f {
            Fault::Link { link, .. } => {
                self.link_up[link as usize] = false;
                for g in 0..self.port_link.len() {
                    if self.port_link[g] == link {
                        dead_ports.push(g);
                    }
                }
            }
            Fault::Node { node, .. } => {
                self.node_up[node as usize] = false;
                let (b, e) = (self.node_port_base[node as usize], self.node_port_base[node as usize + 1]);
                for g in b..e {
                    self.link_up[self.port_link[g as usize] as usize] = false;
                    dead_ports.push(g as usize);
                    dead_ports.push(self.port_peer[g as usize] as usize);
                }
            }
        }
        // The routing layer reconverges at once: shortest paths over the surviving graph.
        // (Packets already past their last live choice are dropped as `no_route`.)
        let node_alive = self.node_up.clone();
        self.routes = MinimalRoutes::with_failures(&self.topo, &self.link_up, &node_alive);
        // Packets queued on dead ports are lost with them.
        for g in dead_ports {
            for vc in 0..self.nvc {
                while self.vc_head(g * self.nvc + vc).is_some() {
                    let pkt = self.dequeue(g, vc);
                    self.stats.drops_failure += 1;
                    self.ports[g].drops += 1;
                    self.lose(pkt);
                }
            }
        }
    }

    fn finish_stats(&mut self) {
        let now = self.queue.now().0;
        for ps in &mut self.ports {
            Self::note_queue_change(ps, now);
        }
    }

    /// Per output port counters (one row per link direction), in global port order.
    pub fn port_stats(&self) -> Vec<PortStats> {
        let end = self.queue.now().0.max(1);
        (0..self.ports.len())
            .map(|g| {
                let ps = &self.ports[g];
                let peer = self.port_peer[g] as usize;
                PortStats {
                    node: self.port_node[g],
                    port: self.port_local[g],
                    peer_node: self.port_node[peer],
                    peer_port: self.port_local[peer],
                    link: self.port_link[g],
                    bytes: ps.bytes_tx,
                    packets: ps.packets_tx,
                    busy_ps: ps.busy_ps,
                    max_queue_bytes: ps.max_q_bytes,
                    mean_queue_bytes: ps.q_area as f64 / end as f64,
                    drops: ps.drops,
                    ecn_marks: ps.ecn_marks,
                }
            })
            .collect()
    }

    /// Number of packets currently allocated (in queues or on wires).
    pub fn packets_in_flight(&self) -> u32 {
        self.pool.live
    }
}
