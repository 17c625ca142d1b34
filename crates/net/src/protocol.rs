//! Protocol packets: switch programs and host agents of in-network aggregation.
//!
//! A protocol packet is a handle into the workload's own arena (which holds the protocol
//! header and data), a size on the wire and a destination (a host or a switch node). The
//! engine moves it like any packet (same arbitration, credits, routing, faults) and hands it
//! to the workload at programmable switches and destination hosts.
//!
//! Guarantees:
//! - A switch program processes packets at `ProgramLimits::packets_per_second`, plus
//!   `latency_ps`; a packet waiting for the program keeps its ingress buffer (and so holds back
//!   its upstream by credits).
//! - While a packet is in the workload's custody ([`crate::Workload::on_app_at_switch`]), it is
//!   resolved by exactly one of [`Network::app_consume`] or [`Network::app_forward`]; a packet
//!   a program emits ([`Network::app_emit`]) occupies no ingress buffer.
//! - Every protocol packet that is lost (link loss, failure, drop-tail overflow, no route)
//!   is reported once through [`crate::Workload::on_app_lost`].
//! - A host port's injection queue asks for more packets once when it falls below
//!   [`APP_QUEUE_LOW`] (re-armed by the next [`Network::app_inject`]).

use crate::ids::{PktId, PortId};
use crate::network::{Arrival, Event, Network, Note};
use crate::packet::{Body, PackedDst, Packet};
use reducelab_des::SimTime;
use reducelab_topo::NodeId;
use std::collections::VecDeque;

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

/// A host port asks for more protocol packets when its queue falls below this length.
pub const APP_QUEUE_LOW: usize = 4;

/// A protocol packet waiting in a host's injection queue.
#[derive(Clone, Copy)]
pub(crate) struct AppQueued {
    pub pkt: AppPacket,
    pub since: u64,
}

/// Protocol state: host injection queues per port, which switches run a program, and the
/// programs' throughput.
pub(crate) struct Protocol {
    pub app_q: Vec<VecDeque<AppQueued>>,
    low_armed: Vec<bool>,
    programmable: Vec<bool>,
    ps_per_packet: u64,
    latency_ps: u64,
    /// Per node: when its program is free for the next packet.
    free_ps: Vec<u64>,
    /// The ECN mark of the protocol packet last delivered to a host.
    delivered_ecn: bool,
}

impl Protocol {
    pub fn new(ports: usize, nodes: usize) -> Protocol {
        Protocol {
            app_q: (0..ports).map(|_| VecDeque::new()).collect(),
            low_armed: vec![false; ports],
            programmable: vec![false; nodes],
            ps_per_packet: 0,
            latency_ps: 0,
            free_ps: vec![0; nodes],
            delivered_ecn: false,
        }
    }
}

impl Network {
    /// Makes switch `node` run the workload's program: protocol packets with `intercept`
    /// set are handed to [`crate::Workload::on_app_at_switch`] there.
    pub fn set_programmable(&mut self, node: u32, on: bool) {
        self.protocol.programmable[node as usize] = on;
    }

    pub fn set_program_limits(&mut self, limits: ProgramLimits) {
        assert!(limits.packets_per_second > 0.0);
        self.protocol.ps_per_packet = (1e12 / limits.packets_per_second).round() as u64;
        self.protocol.latency_ps = limits.latency_ps;
    }

    /// Host `host`'s NIC port `port`.
    fn host_port(&self, host: u32, port: u16) -> PortId {
        let node = self.host_node[host as usize];
        self.pt.checked(node, port).unwrap_or_else(|| panic!("host {host} has no port {port}"))
    }

    /// Queues a protocol packet for injection by host `host` on NIC port `port` (hosts with
    /// one port: 0). It leaves at line rate when the port's arbitration and credits allow,
    /// like message packets. When the queue falls below [`APP_QUEUE_LOW`] packets the
    /// workload gets [`crate::Workload::on_app_queue_low`] once (re-armed by the next call), so a
    /// host agent can produce packets lazily instead of queueing a whole vector.
    pub fn app_inject(&mut self, host: u32, port: u16, pkt: AppPacket) {
        let g = self.host_port(host, port);
        let now = self.queue.now().0;
        self.protocol.app_q[g.idx()].push_back(AppQueued { pkt, since: now });
        self.protocol.low_armed[g.idx()] = true;
        self.kick(g);
    }

    /// Protocol packets waiting in host `host`'s injection queue on `port`.
    pub fn app_queued(&self, host: u32, port: u16) -> usize {
        self.protocol.app_q[self.host_port(host, port).idx()].len()
    }

    /// The protocol packet `pkt` (in the workload's custody).
    pub fn app_packet(&self, pkt: PktId) -> AppPacket {
        let p = self.pool.get(pkt);
        AppPacket {
            app: p.app().expect("a protocol packet"),
            wire_bytes: p.wire_bytes,
            dst: p.dst.get(),
            intercept: p.intercept(),
        }
    }

    /// Whether `pkt` (in the workload's custody) was ECN-marked on its way.
    pub fn app_ecn(&self, pkt: PktId) -> bool {
        self.pool.get(pkt).ecn()
    }

    /// Whether the protocol packet being delivered now
    /// ([`crate::Workload::on_app_delivered`]) was ECN-marked on its way.
    pub fn app_delivered_ecn(&self) -> bool {
        self.protocol.delivered_ecn
    }

    /// Ends custody of `pkt`: the program absorbed it; its ingress buffer is free again.
    pub fn app_consume(&mut self, pkt: PktId) {
        self.drop_packet(pkt);
    }

    /// Ends custody of `pkt` by sending it on from `node`, rewritten to `as_pkt`. It keeps
    /// its ingress buffer until it leaves, like a forwarded packet.
    pub fn app_forward(&mut self, node: u32, pkt: PktId, out: AppOut, as_pkt: AppPacket) {
        let p = self.pool.get_mut(pkt);
        p.body = Body::App(as_pkt.app);
        p.wire_bytes = as_pkt.wire_bytes;
        p.flags = (p.flags & !Packet::INTERCEPT) | Packet::new_flags(as_pkt.intercept);
        p.dst = PackedDst::new(as_pkt.dst);
        self.app_send(NodeId(node), pkt, out);
    }

    /// A switch program creates a packet at `node`. It occupies no ingress buffer (it lives in
    /// the switch's own memory until sent).
    pub fn app_emit(&mut self, node: u32, out: AppOut, pkt: AppPacket) {
        let now = self.queue.now().0;
        let id = self.alloc_app_packet(0, now, pkt);
        self.app_send(NodeId(node), id, out);
    }

    /// A new protocol packet (from a host or made by a switch) on VC `vc`.
    fn alloc_app_packet(&mut self, vc: u8, born_ps: u64, a: AppPacket) -> PktId {
        self.stats.packets_created += 1;
        let id = self.pool.alloc(Packet {
            next: None,
            wire_bytes: a.wire_bytes,
            payload_bytes: 0,
            dst: PackedDst::new(a.dst),
            body: Body::App(a.app),
            seq: 0,
            in_port: None,
            in_vc: 0,
            vc,
            hops: 0,
            flags: Packet::new_flags(a.intercept),
            flow_hash: a.app,
            fingerprint: 0,
            arrive_ps: 0,
            born_ps,
        });
        self.stats.peak_packets_in_flight = self.stats.peak_packets_in_flight.max(self.pool.live);
        id
    }

    fn app_send(&mut self, node: NodeId, pkt: PktId, out: AppOut) {
        let p = *self.pool.get(pkt);
        if self.ib.on {
            // Input-buffered: the program is one more input of the crossbar.
            let fixed = match out {
                AppOut::Route => None,
                AppOut::Port(lp) => match self.pt.checked(node, lp) {
                    Some(g) if self.faults.is_link_up(self.pt.link(g)) => {
                        self.pool.get_mut(pkt).vc = self.deterministic_vc(node, lp, &p);
                        Some(g)
                    }
                    _ => {
                        self.stats.drops_no_route += 1;
                        self.lose(pkt);
                        return;
                    }
                },
            };
            self.ib_from_program(node, pkt, fixed);
            return;
        }
        let chosen = match out {
            AppOut::Route => self.route(node, &p),
            AppOut::Port(lp) => match self.pt.checked(node, lp) {
                Some(g) if self.faults.is_link_up(self.pt.link(g)) => Some((g, self.deterministic_vc(node, lp, &p))),
                _ => None,
            },
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

    /// Sends the head of host port `port`'s protocol queue (the arbitration chose it).
    /// Takes the next protocol packet of host port `port`'s injection queue, to be sent now
    /// (or set aside by OS noise).
    pub(crate) fn take_app_packet(&mut self, port: PortId) -> PktId {
        let g = port.idx();
        let now = self.queue.now().0;
        let a = self.protocol.app_q[g].pop_front().expect("candidate");
        let vc = self.injection_vc(port);
        let host = self.node_host[self.pt.node(port).idx()].expect("a host port");
        let born = now.max(self.ports[g].inject_since).max(a.since);
        let id = self.alloc_app_packet(vc, born, a.pkt);
        self.ports[g].inject_since = now + self.pt.serialization_ps(port, a.pkt.wire_bytes);
        if self.protocol.app_q[g].len() < crate::APP_QUEUE_LOW && self.protocol.low_armed[g] {
            self.protocol.low_armed[g] = false;
            self.notes.push(Note::QueueLow { host, port: self.pt.local(port) });
        }
        id
    }

    /// Protocol packet `pkt` (handle `app`) has arrived at `node` on `in_port`: for the host
    /// there, for the switch's program (now, or once the program is free), or `None`: forward
    /// it like any packet.
    pub(crate) fn arrive_app(&mut self, node: NodeId, in_port: PortId, pkt: PktId, app: u32) -> Option<Arrival> {
        let p = *self.pool.get(pkt);
        let forwards = self.node_forwards[node.idx()];
        // A protocol packet reaching a host is for that host when addressed to it, or when
        // the host does not forward (multicast copies carry no host address).
        if let Some(host) = self.node_host[node.idx()] {
            if p.dst.get() == AppDst::Host(host) || !forwards {
                self.protocol.delivered_ecn = p.ecn();
                self.drop_packet(pkt); // consumed by the host: credit goes back at once
                self.stats.delivered_packets += 1;
                return Some(Arrival::AppAtHost { host, app });
            }
        }
        if p.dst.get() == AppDst::Node(node.0) || (p.intercept() && self.protocol.programmable[node.idx()]) {
            // The program processes packets at its throughput; a packet that must wait
            // keeps its ingress buffer meanwhile.
            let now = self.queue.now().0;
            let start = now.max(self.protocol.free_ps[node.idx()]);
            self.protocol.free_ps[node.idx()] = start + self.protocol.ps_per_packet;
            let at = start + self.protocol.latency_ps;
            if at > now {
                self.queue.push(SimTime(at), Event::Program { pkt });
                return Some(Arrival::Nothing);
            }
            return Some(Arrival::AppAtSwitch { node: node.0, in_port: self.pt.local(in_port), pkt });
        }
        None
    }
}
