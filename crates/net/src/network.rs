use crate::config::{Arbitration, FlowControl, NetConfig, RouterKind, RoutingAlgo};
use crate::credits::Credits;
use crate::endpoint::{Endpoint, EndpointConfig};
use crate::faults::{Fault, Faults};
use crate::ids::{PktId, PortId};
use crate::packet::{fingerprint, Body, PackedDst, Packet, PacketPool};
use crate::ports::{PortCounters, PortState, PortTable};
use crate::protocol::{AppDst, Protocol};
use crate::queues::VcQueues;
use crate::router::InputBuffers;
use crate::routing::{Router, VcPolicy};
use reducelab_des::{EventQueue, Packable, Rng, SimDuration, SimTime, PACKED_BITS};
use reducelab_topo::{LinkId, NodeId, Topology};
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
    /// The duplication fault ([`crate::NetConfig::duplicate_probability`]) copies protocol
    /// packet `app`, which is crossing a link: the handle of an identical packet with its
    /// own data, or `None` if this workload's packets cannot be copied (then none is made).
    fn on_app_duplicate(&mut self, _net: &mut Network, _app: u32) -> Option<u32> {
        None
    }
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
pub(crate) enum Event {
    /// The port may transmit (its previous packet finished, or a noise delay ended).
    Wake {
        port: PortId,
    },
    /// A packet set aside by per-packet noise on host port `port` may go now.
    NoiseRelease {
        port: PortId,
    },
    /// The packet at the head of the wire of output `port` arrives at the other end (last
    /// bit plus the receiving node's pipeline latency).
    Arrive {
        port: PortId,
    },
    MsgStart {
        msg: u32,
    },
    /// The send overhead and send latency of a message are over: it may inject (or send its
    /// RTS).
    MsgReady {
        msg: u32,
    },
    /// The receive latency and receive overhead of a message are over: its delivery completes.
    Deliver {
        msg: u32,
    },
    Timer {
        token: u64,
    },
    Fault {
        idx: u32,
    },
    /// A protocol packet reaches the program of the switch it is in (it had to wait for the
    /// program's throughput).
    Program {
        pkt: PktId,
    },
    /// Crossbar allocation of an input-buffered node (see [`crate::router`]).
    Xbar {
        node: NodeId,
    },
    /// The retransmission timer of message `msg`'s NDP sender (see [`crate::transport`]).
    Rto {
        msg: u32,
    },
    /// The pull pacer of receiving host `host` may send its next pull.
    Pull {
        host: u32,
    },
    /// The PFC control frame reserved on output `port` starts (see [`crate::pfc`]).
    PfcSend {
        port: PortId,
    },
    /// A PFC control frame reaches egress `port`: the VCs in the mask `paused` are paused.
    PfcArrive {
        port: PortId,
        paused: u32,
    },
    /// Protocol packet `pkt`, which arrived over the wire of output `port` and was held back
    /// by the reordering fault, reaches its node now.
    Held {
        port: PortId,
        pkt: PktId,
    },
}

/// The two events of nearly every packet hop, a port's wake-up and an arrival, travel inside
/// their heap key (`port << 1 | is_arrival`, ports below 2^24): popping them reads no slab.
impl Packable for Event {
    #[inline]
    fn pack(&self) -> Option<u32> {
        match *self {
            Event::Wake { port } if port.idx() < 1 << (PACKED_BITS - 1) => Some((port.idx() as u32) << 1),
            Event::Arrive { port } if port.idx() < 1 << (PACKED_BITS - 1) => Some((port.idx() as u32) << 1 | 1),
            _ => None,
        }
    }
    #[inline]
    fn unpack(bits: u32) -> Self {
        let port = PortId::from_idx((bits >> 1) as usize);
        if bits & 1 == 0 {
            Event::Wake { port }
        } else {
            Event::Arrive { port }
        }
    }
}

/// Arrivals are routed one event early only with more ports than this: below, the ports'
/// state (128 bytes each) fits this machine's 1 MiB L2 cache and the early route and the third
/// prefetch stage cost more than they save (1,024 hosts, 6,144 ports: +13% CPU time; 8,192
/// hosts, 49,152 ports: −6%). A speed choice only: the route is the same either way.
const ROUTE_AHEAD_MIN_PORTS: usize = 8192;

/// What an arrival turned into, for the run loop to report to the workload.
pub(crate) enum Arrival {
    Nothing,
    Delivered(u32),
    AppAtSwitch { node: u32, in_port: u16, pkt: PktId },
    AppAtHost { host: u32, app: u32 },
}

/// Notifications raised deep in the engine and delivered to the workload after the event.
#[derive(Clone, Copy)]
pub(crate) enum Note {
    AppLost(u32),
    /// A message delivered without crossing the network (source = destination).
    Delivered(u32),
    QueueLow {
        host: u32,
        port: u16,
    },
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
    /// Protocol packets the duplication fault sent again, and those the reordering fault
    /// held back.
    pub duplicated_packets: u64,
    pub held_packets: u64,
}

/// The simulated network: the event loop over the mechanisms of the sibling modules (ports
/// and arbitration, VC queues, wires, credits, routing, protocol packets, faults), plus hosts
/// and their messages.
pub struct Network {
    pub(crate) cfg: NetConfig,
    pub(crate) vc_policy: VcPolicy,
    /// Virtual channels per port.
    pub(crate) nvc: usize,
    // Per node.
    pub(crate) node_forwards: Vec<bool>,
    pub(crate) node_host: Vec<Option<u32>>,
    /// Per host.
    pub(crate) host_node: Vec<NodeId>,
    // Per global port (one output direction of a link).
    pub(crate) pt: PortTable,
    pub(crate) ports: Vec<PortState>,
    pub(crate) port_counters: Vec<PortCounters>,
    pub(crate) queues: VcQueues,
    /// Input buffers and crossbars (empty with the output-queued router).
    pub(crate) ib: InputBuffers,
    pub(crate) credits: Credits,
    /// Messages each host port is injecting, served round-robin.
    pub(crate) inject: Vec<VecDeque<u32>>,
    pub(crate) router: Router,
    pub(crate) faults: Faults,
    pub(crate) protocol: Protocol,
    pub(crate) ep: Endpoint,
    /// Host injection slots of a port's arbitration after its VC queues: messages, protocol
    /// packets, and a third with rendezvous (control packets) or NDP (messages under NDP).
    pub(crate) local_slots: usize,
    /// End-to-end transport of messages (host side) and NDP's port queues (switch side).
    pub(crate) tr: crate::transport::Transport,
    pub(crate) trim: crate::trimming::Trimming,
    /// PFC ingress accounting and pause state (off unless `FlowControl::Pfc`).
    pub(crate) pfc: crate::pfc::Pfc,
    // Traffic.
    pub(crate) pool: PacketPool,
    pub(crate) messages: Vec<Message>,
    undelivered: u64,
    pub(crate) fg: Foreground,
    pub(crate) queue: EventQueue<Event>,
    rng_loss: Rng,
    /// The duplication or reordering fault is on (`NetConfig::duplicate_probability`,
    /// `reorder_probability`): arrivals of protocol packets draw for them.
    app_faults_on: bool,
    /// The duplication and reordering faults' draws (only when their probability is not 0,
    /// each its own stream: they never shift another concern's draws).
    rng_duplicate: Rng,
    rng_reorder: Rng,
    /// RED ECN marking's draws (only with `NetConfig::ecn_red`).
    pub(crate) rng_ecn: Rng,
    pub(crate) noise: crate::noise::Noise,
    pub(crate) salt: u64,
    pub(crate) stats: NetworkStats,
    stop: bool,
    pub(crate) notes: Vec<Note>,
    /// Routing depends only on the packet and the topology in this run (see
    /// [`Network::route_ahead`]), so arrivals may be routed one event early.
    route_ahead_on: bool,
    /// [`ROUTE_AHEAD_MIN_PORTS`] unless a test or benchmark sets it ([`Network::set_route_ahead_min_ports`]).
    route_ahead_min_ports: usize,
    /// The next event's arrival, routed early: its packet, output port and VC.
    next_route: Option<(PktId, PortId, u8)>,
}

impl Network {
    /// Assembles a network. Errors name the offending setting.
    pub fn new(topo: &Topology, cfg: NetConfig, faults: Vec<Fault>, rng: &Rng) -> Result<Network, String> {
        if topo.nodes.len() > PackedDst::MAX_ID as usize {
            return Err(format!("{} nodes: a packet names at most {} nodes", topo.nodes.len(), PackedDst::MAX_ID));
        }
        if cfg.mtu_bytes <= cfg.header_bytes {
            return Err(format!("mtu_bytes ({}) must exceed header_bytes ({})", cfg.mtu_bytes, cfg.header_bytes));
        }
        if cfg.flow_control == FlowControl::Credit && cfg.buffer_bytes < cfg.mtu_bytes as u64 {
            return Err(format!("buffer_bytes ({}) must hold at least one MTU ({})", cfg.buffer_bytes, cfg.mtu_bytes));
        }
        for (name, p) in [
            ("loss_probability", cfg.loss_probability),
            ("noise_probability", cfg.noise_probability),
            ("duplicate_probability", cfg.duplicate_probability),
            ("reorder_probability", cfg.reorder_probability),
        ] {
            if !(0.0..=1.0).contains(&p) {
                return Err(format!("{name}: must be within [0, 1], got {p}"));
            }
        }
        if cfg.reorder_probability > 0.0 && cfg.reorder_delay_ps == 0 {
            return Err("reorder_delay_ns: a held packet needs a positive delay".into());
        }
        if (cfg.duplicate_probability > 0.0 || cfg.reorder_probability > 0.0)
            && matches!(cfg.router, RouterKind::InputBuffered(_))
        {
            return Err(
                "duplicate_probability, reorder_probability: not modelled with router input_buffered (its crossbar takes packets from input buffers only)"
                    .into(),
            );
        }
        if let Some(red) = cfg.ecn_red {
            match cfg.ecn_threshold_bytes {
                None => return Err("ecn_kmax_bytes: RED marking needs ecn_threshold_bytes (Kmin)".into()),
                Some(kmin) if red.kmax_bytes <= kmin => {
                    return Err(format!(
                        "ecn_kmax_bytes: must exceed ecn_threshold_bytes (Kmin, {kmin}), got {}",
                        red.kmax_bytes
                    ))
                }
                _ if !(red.pmax > 0.0 && red.pmax <= 1.0) => {
                    return Err(format!("ecn_pmax: must be > 0 and <= 1, got {}", red.pmax))
                }
                _ => {}
            }
        }
        let vc_policy = VcPolicy::choose(topo, cfg.routing, cfg.flow_control)?;
        if cfg.flow_control == FlowControl::Pfc {
            crate::pfc::pfc_supports(&vc_policy)?;
        }
        let nvc = vc_policy.num_vcs();
        let pfc = crate::pfc::Pfc::new(topo, &cfg, nvc)?;
        let pt = PortTable::new(topo);
        let noise = crate::noise::Noise::new(topo, &pt, &cfg, rng.fork(0x4015E))?;
        let np = pt.len();
        let faults = Faults::new(topo, faults, cfg.loss_probability)?;
        let max_ports = topo.nodes.iter().map(|n| n.ports.len()).max().unwrap_or(0);
        let mut credit_bytes = cfg.buffer_bytes;
        let mut threshold_base = cfg.buffer_bytes;
        if let RouterKind::InputBuffered(ib) = cfg.router {
            if cfg.flow_control != FlowControl::Credit {
                return Err("router input_buffered needs credit flow control".into());
            }
            if ib.input_buffer_bytes < cfg.mtu_bytes as u64 || ib.output_buffer_bytes < cfg.mtu_bytes as u64 {
                return Err(format!("input and output buffers must hold at least one MTU ({})", cfg.mtu_bytes));
            }
            if !(ib.crossbar_speedup >= 1.0 && ib.crossbar_speedup.is_finite()) {
                return Err(format!("crossbar_speedup must be a finite number >= 1, got {}", ib.crossbar_speedup));
            }
            if max_ports + 1 > 128 {
                return Err(format!(
                    "router input_buffered supports nodes with up to 127 ports; this topology has {max_ports}"
                ));
            }
            credit_bytes = ib.input_buffer_bytes;
            threshold_base = ib.output_buffer_bytes;
        }
        if cfg.arbitration == Arbitration::Lru && cfg.router == RouterKind::OutputQueued {
            return Err("arbitration lru is a crossbar arbiter: it needs router input_buffered".into());
        }
        // With input buffers the crossbar arbitrates; the output buffers are plain FIFOs.
        let rr = cfg.arbitration == Arbitration::InputRoundRobin && cfg.router == RouterKind::OutputQueued;
        if rr && max_ports + 1 > 128 {
            return Err(format!(
                "arbitration input_round_robin supports nodes with up to 127 ports; this topology has {max_ports}"
            ));
        }
        let ib = InputBuffers::new(cfg.router, cfg.arbitration == Arbitration::Lru, &pt, topo.nodes.len(), nvc);
        let mut net = Network {
            router: Router::new(topo, cfg.routing, threshold_base)?,
            vc_policy,
            nvc,
            node_forwards: topo.nodes.iter().map(|n| n.forwards).collect(),
            node_host: topo.nodes.iter().map(|n| n.host).collect(),
            host_node: topo.hosts.clone(),
            pt,
            ports: vec![PortState::default(); np],
            port_counters: vec![PortCounters::default(); np],
            queues: VcQueues::new(np, nvc, rr, max_ports),
            ib,
            credits: Credits::new(np, nvc, cfg.flow_control, credit_bytes),
            inject: (0..np).map(|_| VecDeque::new()).collect(),
            faults,
            protocol: Protocol::new(np, topo.nodes.len()),
            ep: Endpoint::new(EndpointConfig::default(), topo.hosts.len(), np),
            local_slots: 2,
            tr: crate::transport::Transport::off(),
            trim: crate::trimming::Trimming::off(rng.fork(0x7819)),
            pfc,
            pool: PacketPool::new(),
            messages: Vec::new(),
            undelivered: 0,
            fg: Foreground::default(),
            queue: EventQueue::with_capacity(1 << 16),
            rng_loss: rng.fork(0x1055),
            app_faults_on: cfg.duplicate_probability > 0.0 || cfg.reorder_probability > 0.0,
            rng_duplicate: rng.fork(0xD0B1),
            rng_reorder: rng.fork(0x4E0D),
            rng_ecn: rng.fork(0xEC2),
            noise,
            salt: rng.fork(0x5A17).next_u64(),
            stats: NetworkStats::default(),
            stop: false,
            notes: Vec::new(),
            route_ahead_on: false,
            route_ahead_min_ports: ROUTE_AHEAD_MIN_PORTS,
            next_route: None,
            cfg,
        };
        net.faults.schedule(&mut net.queue);
        for g in net.pt.all() {
            net.ports[g.idx()].host = net.node_host[net.pt.node(g).idx()].is_some();
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
    /// Routes arrivals one event early when the network has more than `ports` ports (default
    /// [`ROUTE_AHEAD_MIN_PORTS`]; 0: always, where the routing allows it). A speed choice only,
    /// which must not change any result: tests use it to run the early route on small networks.
    pub fn set_route_ahead_min_ports(&mut self, ports: usize) {
        self.route_ahead_min_ports = ports;
    }

    pub fn set_link_loss(&mut self, link: u32, p: f64) {
        self.faults.set_loss(LinkId(link), p);
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
    pub fn run_limited<W: Workload>(
        &mut self,
        w: &mut W,
        limits: RunLimits,
        poll: &mut dyn FnMut(f64) -> bool,
    ) -> RunEnd {
        w.on_start(self);
        self.route_ahead_on = matches!(self.cfg.routing, RoutingAlgo::Ecmp | RoutingAlgo::Minimal)
            && matches!(self.vc_policy, VcPolicy::Single)
            && !self.ib.on
            && self.ports.len() > self.route_ahead_min_ports;
        self.next_route = None;
        let limit = limits.until.unwrap_or(SimTime::MAX);
        let mut watch = (u64::MAX, self.now());
        loop {
            if self.stop {
                self.finish_stats();
                if let Some(reason) = self.pfc.violation.take() {
                    return RunEnd::Stalled { reason };
                }
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
            // Routed while the previous event was handled, if this is an arrival.
            let routed = self.next_route.take();
            self.prefetch_next_events();
            self.stats.events += 1;
            if self.stats.events & 0xFFF == 0 {
                if let Some(end) = self.check_run(w, &limits, &mut watch, poll) {
                    self.finish_stats();
                    return end;
                }
            }
            match ev {
                Event::Wake { port } => {
                    self.ports[port.idx()].wake_pending = false;
                    self.try_start(port);
                }
                Event::Arrive { port } => {
                    let (pkt, next) = self.pt.wire_mut(port).pop(&self.pool);
                    if let Some(t) = next {
                        self.queue.push(SimTime(t), Event::Arrive { port });
                    }
                    // Unless the reordering fault holds it back.
                    if !(self.app_faults_on && self.app_faults(w, port, pkt)) {
                        let a = self.arrive(port, pkt, routed);
                        self.report_arrival(w, a);
                    }
                }
                Event::Held { port, pkt } => {
                    let a = self.arrive(port, pkt, None);
                    self.report_arrival(w, a);
                }
                Event::NoiseRelease { port } => self.kick(port),
                Event::MsgStart { msg } => self.start_message(msg),
                Event::MsgReady { msg } => self.message_ready(msg),
                Event::Deliver { msg } => self.endpoint_deliver(msg),
                Event::Timer { token } => w.on_timer(self, token),
                Event::Fault { idx } => self.apply_fault(idx),
                Event::Xbar { node } => self.ib_allocate(node),
                Event::Rto { msg } => self.transport_timer(msg),
                Event::Pull { host } => self.ndp_pacer(host),
                Event::PfcSend { port } => self.pfc_send(port),
                Event::PfcArrive { port, paused } => self.pfc_arrive(port, paused),
                Event::Program { pkt } => {
                    let p = *self.pool.get(pkt);
                    let in_port = p.in_port.expect("a protocol packet at a switch came in on a port");
                    let node = self.pt.node(in_port);
                    if self.faults.is_node_up(node) {
                        w.on_app_at_switch(self, node.0, self.pt.local(in_port), pkt);
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

    /// Starts loading what the next three events will read first while this one is handled,
    /// in three stages: for the third event from now, the lines that name its data (the port's
    /// state, the wire's ends and the sending port's wiring); for the second, whose such lines
    /// were loaded meanwhile, the packets they name (the packet an arrival takes off its wire,
    /// the heads of a woken port's queues); for the next, an arrival's packet is there: it is
    /// routed now and its output port's lines loaded ([`Network::route_ahead`]). These misses
    /// were ~40% of an NDP permutation's time (see docs/engine.md, "Performance"). Except for
    /// the early route, which is the route `arrive` would compute, hints only: results do not
    /// depend on them.
    #[inline(always)]
    fn prefetch_next_events(&mut self) {
        if !self.route_ahead_on {
            return self.prefetch_two_events();
        }
        if let Some(Event::Arrive { port }) = self.queue.peek_event() {
            self.next_route = self.route_ahead(port);
        }
        self.prefetch_packets_of(self.queue.peek_second());
        self.prefetch_lines_of(self.queue.peek_third());
    }

    /// The prefetcher without the early route, two stages (runs where routing depends on
    /// state, and small networks: at 1,024 hosts the three stages cost 13% more CPU time than
    /// these two, see docs/engine.md, "Performance").
    #[inline(always)]
    fn prefetch_two_events(&self) {
        self.prefetch_packets_of(self.queue.peek_event());
        self.prefetch_lines_of(self.queue.peek_second());
    }

    /// The packets event `ev` handles first (an arrival's head packet, a woken port's queue
    /// heads), whose naming lines an earlier stage loaded.
    #[inline(always)]
    fn prefetch_packets_of(&self, ev: Option<Event>) {
        use reducelab_des::prefetch;
        match ev {
            Some(Event::Arrive { port }) => {
                if let Some(pkt) = self.pt.wire(port).head() {
                    prefetch(self.pool.get(pkt));
                }
            }
            Some(Event::Wake { port }) => {
                let ps = &self.ports[port.idx()];
                if let Some(pkt) = ps.prio_head {
                    prefetch(self.pool.get(pkt));
                }
                if let Some(pkt) = self.queues.fifo_head(port) {
                    prefetch(self.pool.get(pkt));
                }
            }
            _ => {}
        }
    }

    /// The lines that name event `ev`'s data: an arrival's sending port's wiring record (with
    /// its wire's ends), a woken port's state and FIFO queue.
    #[inline(always)]
    fn prefetch_lines_of(&self, ev: Option<Event>) {
        use reducelab_des::prefetch;
        match ev {
            Some(Event::Arrive { port }) => {
                self.pt.prefetch_wiring(port);
            }
            Some(Event::Wake { port }) => {
                prefetch(&self.ports[port.idx()]);
                self.queues.prefetch_fifo(port);
            }
            _ => {}
        }
    }

    /// Routes the head packet of `port`'s wire, whose arrival is the next event, and starts
    /// loading its output port's lines (its first touch after routing was ~15% of the
    /// 8,192-host NDP permutation's samples). Only when `arrive` would route it with
    /// [`Network::route`] and the result cannot change before then: ECMP or minimal routing
    /// with one VC (a function of the packet, its hop count and the topology), the
    /// output-queued router, nothing that can fail (`arrive` checks that again), a forwarding
    /// node that is not the destination, no switch program. Returns (packet, port, VC).
    #[inline]
    fn route_ahead(&mut self, port: PortId) -> Option<(PktId, PortId, u8)> {
        if !self.faults.all_up() {
            return None;
        }
        let pkt = self.pt.wire(port).head()?;
        let node = self.pt.peer_node(port);
        if !self.node_forwards[node.idx()] {
            return None;
        }
        let mut p = *self.pool.get(pkt);
        match p.dst.get() {
            AppDst::Host(h) if self.node_host[node.idx()] != Some(h) && p.app().is_none() => {}
            _ => return None,
        }
        // `arrive` counts this hop before routing.
        p.hops = p.hops.saturating_add(1);
        let (out, vc) = self.route(node, &p)?;
        reducelab_des::prefetch(&self.ports[out.idx()]);
        self.queues.prefetch_fifo(out);
        Some((pkt, out, vc))
    }

    /// The periodic part of the event loop (every 4096 events): the watchdog and the caller's
    /// poll. `watch` is (work units at the last change, when they changed).
    #[cold]
    #[inline(never)]
    fn check_run<W: Workload>(
        &mut self,
        w: &mut W,
        limits: &RunLimits,
        watch: &mut (u64, SimTime),
        poll: &mut dyn FnMut(f64) -> bool,
    ) -> Option<RunEnd> {
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

    /// Node id of host `host`.
    pub fn host_node_id(&self, host: u32) -> u32 {
        self.host_node[host as usize].0
    }
    /// Host index of node `node`, if it is a host.
    pub fn node_host(&self, node: u32) -> Option<u32> {
        self.node_host[node as usize]
    }
    /// Number of ports of `node`.
    pub fn node_ports(&self, node: u32) -> u16 {
        self.pt.count(NodeId(node))
    }
    /// The node at the far end of local port `port` of `node`.
    pub fn port_peer_node(&self, node: u32, port: u16) -> u32 {
        self.pt.node(self.pt.peer(self.pt.of(NodeId(node), port))).0
    }
    pub fn node_is_up(&self, node: u32) -> bool {
        self.faults.is_node_up(NodeId(node))
    }

    /// A packet is lost: frees it (and its ingress buffer) and tells the workload if it was
    /// a protocol packet.
    pub(crate) fn lose(&mut self, pkt: PktId) {
        let app = self.pool.get(pkt).app();
        self.drop_packet(pkt);
        if let Some(app) = app {
            self.notes.push(Note::AppLost(app));
        }
    }

    /// Why undelivered messages are stuck, when the workload does not say (see
    /// [`Workload::unfinished`]).
    fn stall_reason(&self) -> String {
        let lost = self.lost_packets();
        let hint = if lost > 0 && !self.tr.on { " (raw messages have no retransmission)" } else { "" };
        format!(
            "{} of {} messages undelivered{hint}; network: {}",
            self.undelivered,
            self.messages.len(),
            self.network_state()
        )
    }

    fn lost_packets(&self) -> u64 {
        let s = &self.stats;
        s.drops_buffer + s.drops_loss + s.drops_failure + s.drops_no_route
    }

    /// The network's part of a stall reason: drops, stuck queues, failed nodes and links.
    pub fn network_state(&self) -> String {
        let queued: u64 = self.ports.iter().map(|p| p.q_packets as u64).sum::<u64>() + self.ib.packets;
        let waiting: usize = self.inject.iter().chain(&self.tr.round).filter(|q| !q.is_empty()).count();
        let s = &self.stats;
        let lost = self.lost_packets();
        let mut why = Vec::new();
        self.faults.describe(&mut why);
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
        if let Some(t) = self.transport_state() {
            why.push(t);
        }
        if let Some(t) = self.pfc_state() {
            why.push(t);
        }
        let held = self.noise.held_packets();
        if held > 0 {
            why.push(format!("{held} packets are set aside by per-packet noise"));
        }
        if why.is_empty() {
            why.push("no packet lost or stuck".into());
        }
        why.join("; ")
    }

    /// Wire size of message `msg`'s next packet.
    pub(crate) fn next_packet_size(&self, msg: u32) -> u32 {
        let m = &self.messages[msg as usize];
        let payload = self.cfg.payload_per_packet() as u64;
        let sent = m.sent_packets as u64 * payload;
        let this = m.bytes.saturating_sub(sent).min(payload) as u32;
        this + self.cfg.header_bytes
    }

    /// Cuts the next packet of message `msg` for host port `port` and moves the message to the
    /// back of the port's injection round (or off it, after its last packet).
    pub(crate) fn make_packet(&mut self, port: PortId, msg: u32, vc: u8, size: u32) -> PktId {
        let g = port.idx();
        let m = &mut self.messages[msg as usize];
        let seq = m.sent_packets;
        m.sent_packets += 1;
        let done = m.sent_packets == m.total_packets;
        let dst = m.dst;
        let flow_hash = self.packet_route_key(msg, false);
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
            dst: PackedDst::new(AppDst::Host(dst)),
            body: Body::Msg { msg },
            seq,
            in_port: None,
            in_vc: 0,
            vc,
            hops: 0,
            flags: Packet::new_flags(false),
            flow_hash,
            fingerprint: fp,
            arrive_ps: 0,
            born_ps: self.queue.now().0.max(self.ports[g].inject_since),
        });
        self.stats.peak_packets_in_flight = self.stats.peak_packets_in_flight.max(self.pool.live);
        id
    }

    /// Drops a packet held by a live node, giving its ingress buffer back to the upstream.
    pub(crate) fn drop_packet(&mut self, pkt: PktId) {
        let p = *self.pool.get(pkt);
        if let (Some(ip), true) = (p.in_port, self.ingress_accounted()) {
            let up = self.pt.peer(ip);
            let lat = self.pt.latency_ps(ip);
            let now = self.queue.now().0;
            self.return_credit(up, p.in_vc, p.wire_bytes, now + lat);
        }
        self.pool.release(pkt);
    }

    // ----- Arrival, routing, delivery ------------------------------------------------------

    /// The duplication and reordering faults on `pkt`, which has come off the wire of output
    /// `out` (drawn for protocol packets on live links only, duplication first): a copy the
    /// workload makes joins `out`'s queue again, as if the link's sender sent the packet
    /// twice (it takes no ingress buffer there, like a packet a switch program emits, and
    /// the link's credits and PFC count it as any packet); a held packet reaches its node
    /// `reorder_delay_ps` later ([`Event::Held`]). Returns whether `pkt` was held.
    fn app_faults<W: Workload>(&mut self, w: &mut W, out: PortId, pkt: PktId) -> bool {
        let p = *self.pool.get(pkt);
        let Some(app) = p.app() else { return false };
        if !self.faults.all_up()
            && (!self.faults.is_link_up(self.pt.link(out)) || !self.faults.is_node_up(self.pt.peer_node(out)))
        {
            return false; // `arrive` loses it
        }
        let dup = self.cfg.duplicate_probability;
        if dup > 0.0 && self.rng_duplicate.bernoulli(dup) {
            if let Some(copy) = w.on_app_duplicate(self, app) {
                self.stats.packets_created += 1;
                self.stats.duplicated_packets += 1;
                let now = self.queue.now().0;
                let id = self.pool.alloc(Packet {
                    next: None,
                    body: Body::App(copy),
                    in_port: None,
                    in_vc: 0,
                    born_ps: now,
                    arrive_ps: 0,
                    ..p
                });
                self.stats.peak_packets_in_flight = self.stats.peak_packets_in_flight.max(self.pool.live);
                self.enqueue(out, id);
            }
        }
        let reorder = self.cfg.reorder_probability;
        if reorder > 0.0 && self.rng_reorder.bernoulli(reorder) {
            self.stats.held_packets += 1;
            let at = self.queue.now().0 + self.cfg.reorder_delay_ps;
            self.queue.push(SimTime(at), Event::Held { port: out, pkt });
            return true;
        }
        false
    }

    /// `pkt`, sent by output `out`, has arrived at the other end of its link (ingress port
    /// `in_port`): lost with a failure or to link loss, delivered, handed to the protocol, or
    /// routed on.
    /// `routed`: the route of `pkt` computed one event early by [`Network::route_ahead`] (used
    /// if it is this packet's and nothing could fail meanwhile).
    fn arrive(&mut self, out: PortId, pkt: PktId, routed: Option<(PktId, PortId, u8)>) -> Arrival {
        // One wiring record (the sender's) names the ingress port, its node and the link.
        let (in_port, node, link) = (self.pt.peer(out), self.pt.peer_node(out), self.pt.link(out));
        if !self.faults.all_up() && (!self.faults.is_link_up(link) || !self.faults.is_node_up(node)) {
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
            p.in_port = Some(in_port);
        }
        if self.pfc.on {
            let p = self.pool.get(pkt);
            self.pfc_hold(in_port, p.vc, p.wire_bytes);
        }
        let loss = self.faults.loss(link);
        if loss > 0.0 && self.rng_loss.bernoulli(loss) {
            self.stats.drops_loss += 1;
            let up = self.pt.peer(in_port);
            self.port_counters[up.idx()].drops += 1;
            self.lose(pkt);
            return Arrival::Nothing;
        }
        let p = *self.pool.get(pkt);
        if let Some(app) = p.app() {
            if let Some(a) = self.arrive_app(node, in_port, pkt, app) {
                return a;
            }
        }
        let for_this_host = match (p.dst.get(), self.node_host[node.idx()]) {
            (AppDst::Host(h), Some(here)) => h == here,
            _ => false,
        };
        if for_this_host {
            self.drop_packet(pkt); // consumed by the host: credit goes back at once
            self.stats.delivered_packets += 1;
            if let Body::Ctrl { msg, cts } = p.body {
                self.ctrl_arrived(msg, cts);
                return Arrival::Nothing;
            }
            if let Body::Transport { msg, kind } = p.body {
                return self.transport_arrived(&p, msg, kind);
            }
            match self.pool_released_delivery(&p) {
                Some(m) => Arrival::Delivered(m),
                None => Arrival::Nothing,
            }
        } else if !self.node_forwards[node.idx()] {
            self.stats.drops_no_route += 1;
            self.lose(pkt);
            Arrival::Nothing
        } else if self.ib.on {
            self.ib_arrive(node, in_port, pkt);
            Arrival::Nothing
        } else {
            let route = match routed {
                Some((early, out, vc)) if early == pkt && self.faults.all_up() => Some((out, vc)),
                _ => self.route(node, &p),
            };
            match route {
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
        let Body::Msg { msg } = p.body else { unreachable!("a protocol packet delivered as a message") };
        let m = &mut self.messages[msg as usize];
        m.recv_packets += 1;
        m.recv_bytes += p.payload_bytes as u64;
        m.fingerprint_received = m.fingerprint_received.wrapping_add(p.fingerprint);
        if !m.background {
            self.fg.payload_bytes += p.payload_bytes as u64;
        }
        if m.recv_packets == m.total_packets && self.endpoint_received(msg) {
            self.complete_delivery(msg);
            Some(msg)
        } else {
            None
        }
    }

    /// Message `msg` is delivered now (its receive overhead, if any, is over).
    pub(crate) fn complete_delivery(&mut self, msg: u32) {
        let m = &mut self.messages[msg as usize];
        m.end = self.queue.now();
        self.undelivered -= 1;
        self.fg.delivered += !m.background as u64;
    }

    fn start_message(&mut self, msg: u32) {
        let (src, dst) = {
            let m = &self.messages[msg as usize];
            (m.src, m.dst)
        };
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
        self.endpoint_start(msg);
    }

    /// Message `msg` (not local) may inject now: picks its NIC port and queues it there (or,
    /// by rendezvous, its RTS).
    pub(crate) fn message_ready(&mut self, msg: u32) {
        let (src, dst, port) = {
            let m = &self.messages[msg as usize];
            (m.src, m.dst, m.port)
        };
        let node = self.host_node[src as usize];
        let nports = self.pt.count(node);
        let lp = if port != u16::MAX && port < nports {
            port
        } else if nports == 1 {
            0
        } else {
            match self.injection_port(node, dst, msg) {
                Some(lp) => lp,
                None => {
                    self.stats.drops_no_route += 1;
                    return; // stays undelivered; reported at the end
                }
            }
        };
        self.messages[msg as usize].port = lp;
        let g = self.pt.of(node, lp);
        if self.tr.on && self.tr.carries(self.messages[msg as usize].tag) {
            return self.transport_open(g, msg);
        }
        if self.ep.rdv && self.ep.cfg.rendezvous(self.messages[msg as usize].bytes) {
            return self.send_rts(g, msg);
        }
        self.inject[g.idx()].push_back(msg);
        self.kick(g);
    }

    /// Number of packets currently allocated (in queues or on wires).
    pub fn packets_in_flight(&self) -> u32 {
        self.pool.live
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Wake-ups and arrivals of ports below 2^24 pack into their heap key and come back
    /// unchanged; larger ports and every other event go to the slab.
    #[test]
    fn wakes_and_arrivals_pack_and_unpack() {
        let limit = 1usize << (PACKED_BITS - 1);
        for i in [0, 1, 2, 12_345, limit - 1] {
            let port = PortId::from_idx(i);
            for ev in [Event::Wake { port }, Event::Arrive { port }] {
                let bits = ev.pack().expect("packs");
                assert!(bits < 1 << PACKED_BITS);
                assert_eq!(format!("{:?}", Event::unpack(bits)), format!("{ev:?}"));
            }
        }
        let big = PortId::from_idx(limit);
        assert!(Event::Wake { port: big }.pack().is_none());
        assert!(Event::Arrive { port: big }.pack().is_none());
        assert!(Event::NoiseRelease { port: PortId::from_idx(3) }.pack().is_none());
        assert!(Event::Timer { token: 1 }.pack().is_none());
    }
}
