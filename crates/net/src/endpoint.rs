//! Endpoint costs: what a host's CPU and NIC charge for a message beyond the wire.
//!
//! - **Send overhead** (LogGP `o_s`): when a message starts, the sending host's CPU works on it
//!   for `send_overhead_ps` before its first packet (or its RTS) may leave. A host's sends are
//!   serialised on one send timeline: messages posted at once leave `o_s` apart.
//! - **Send latency**: after its send overhead a message waits `send_latency_ps` more before
//!   its first packet (or RTS) may leave, without holding the host: the host–NIC bus and the
//!   NIC's own processing, which overlap the host's next message (SST's firefly NIC works on
//!   one message while the host sets up the next).
//! - **Receive overhead** (LogGP `o_r`): after the last packet of a message has arrived, the
//!   receiving host's CPU works on it for `recv_overhead_ps` before the workload hears of the
//!   delivery ([`crate::Workload::on_delivered`] and [`crate::Message::end`]). Serialised per
//!   receiving host on its own receive timeline (independent of its send timeline).
//! - **Receive latency**: the receive overhead starts no earlier than `recv_latency_ps` after
//!   the last packet arrived (NIC matching, the NIC–host bus), a delay that does not hold the
//!   host: messages arriving close together overlap it and queue only for `o_r`.
//! - **Rendezvous** (optional): a message of more than `rendezvous_threshold_bytes` first sends
//!   a header-only RTS packet to the receiver through the network (it queues and waits for
//!   credits like any packet); on its arrival the receiver answers at once with a header-only
//!   CTS; the data starts when the CTS is back. Control packets are not messages: they are
//!   not in [`crate::Network::messages`], carry no payload or fingerprint, and do not count in
//!   [`crate::Foreground`].
//! - **Injection ceiling** (optional): all NIC ports of one host together inject at most
//!   `injection_bps` (a DMA engine shared by the ports). Each packet a host injects (message,
//!   control or protocol packet) holds the host's DMA engine for its size at that rate; a port
//!   whose host's engine is busy waits for it. A port alone at or below the ceiling is never
//!   held back. Transit traffic through a host (torus routers) does not use it.
//!
//! Local messages (source = destination) cross no network and pay none of these costs.
//! With the default [`EndpointConfig`] (all off) nothing here runs and results are the same as
//! without the module.

use crate::ids::PortId;
use crate::network::{Event, Network, Note};
use crate::packet::{fingerprint, Body, PackedDst, Packet};
use crate::protocol::AppDst;
use reducelab_des::{SimDuration, SimTime};
use serde::Serialize;
use std::collections::VecDeque;

/// Per-host endpoint costs (the scenario's `[endpoint]` table). Default: all off.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct EndpointConfig {
    /// CPU time per message before its first packet may leave (serialised per sending host).
    pub send_overhead_ps: u64,
    /// Delay after the send overhead before the first packet may leave (not serialised).
    pub send_latency_ps: u64,
    /// CPU time per message after its last packet arrived, before the receive completes
    /// (serialised per receiving host).
    pub recv_overhead_ps: u64,
    /// Delay after the last packet's arrival before the receive overhead may start (not
    /// serialised).
    pub recv_latency_ps: u64,
    /// Messages larger than this go by rendezvous (RTS, CTS, then data); `None`: all eager.
    pub rendezvous_threshold_bytes: Option<u64>,
    /// Injection ceiling of one host over all its NIC ports, in bits per second.
    pub injection_bps: Option<u64>,
}

impl EndpointConfig {
    pub fn is_off(&self) -> bool {
        *self == EndpointConfig::default()
    }
    /// Whether a message of `bytes` goes by rendezvous.
    pub fn rendezvous(&self, bytes: u64) -> bool {
        self.rendezvous_threshold_bytes.is_some_and(|t| bytes > t)
    }
}

/// A control packet waiting in a host port's control queue.
#[derive(Clone, Copy)]
pub(crate) struct CtrlQueued {
    pub msg: u32,
    /// `false`: RTS (sender → receiver); `true`: CTS (receiver → sender).
    pub cts: bool,
    pub since: u64,
}

/// Endpoint state: the configuration and the per-host timelines.
pub(crate) struct Endpoint {
    pub cfg: EndpointConfig,
    /// Rendezvous on: host ports have a control queue (one more arbitration slot).
    pub rdv: bool,
    /// Injection ceiling on.
    pub dma: bool,
    /// Per host: when its CPU is free for the next send / receive.
    send_free: Vec<u64>,
    recv_free: Vec<u64>,
    /// Per host: when its DMA engine is free for the next packet.
    pub dma_free: Vec<u64>,
    /// Per global port: control packets to inject (empty unless `rdv`).
    pub ctrl_q: Vec<VecDeque<CtrlQueued>>,
}

impl Endpoint {
    pub fn new(cfg: EndpointConfig, hosts: usize, ports: usize) -> Endpoint {
        let rdv = cfg.rendezvous_threshold_bytes.is_some();
        let dma = cfg.injection_bps.is_some();
        Endpoint {
            cfg,
            rdv,
            dma,
            send_free: vec![0; if cfg.send_overhead_ps > 0 { hosts } else { 0 }],
            recv_free: vec![0; if cfg.recv_overhead_ps > 0 { hosts } else { 0 }],
            dma_free: vec![0; if dma { hosts } else { 0 }],
            ctrl_q: (0..if rdv { ports } else { 0 }).map(|_| VecDeque::new()).collect(),
        }
    }
}

impl Network {
    /// Sets the endpoint costs (before the run starts). Errors name the field.
    pub fn set_endpoint(&mut self, cfg: EndpointConfig) -> Result<(), String> {
        if cfg.injection_bps == Some(0) {
            return Err("injection_gbps: must be > 0".into());
        }
        if self.tr.on && cfg.rendezvous_threshold_bytes.is_some() {
            return Err(match self.tr.cfg {
                crate::TransportConfig::Ndp(_) => "rendezvous_threshold_bytes: does not combine with transport ndp (NDP's receiver already grants the data by pulls)".into(),
                c => format!("rendezvous_threshold_bytes: does not combine with transport {} (the transport's sender already limits what is in flight)", c.kind()),
            });
        }
        self.ep = Endpoint::new(cfg, self.host_node.len(), self.pt.len());
        self.local_slots = 2 + (self.ep.rdv || self.tr.on) as usize;
        Ok(())
    }

    pub fn endpoint(&self) -> &EndpointConfig {
        &self.ep.cfg
    }

    /// Message `msg` (not local) has started: its send overhead on the host's CPU and its send
    /// latency, then [`Network::message_ready`].
    pub(crate) fn endpoint_start(&mut self, msg: u32) {
        let (os, ls) = (self.ep.cfg.send_overhead_ps, self.ep.cfg.send_latency_ps);
        if os == 0 && ls == 0 {
            return self.message_ready(msg);
        }
        let now = self.queue.now().0;
        let mut t = now;
        if os > 0 {
            let src = self.messages[msg as usize].src as usize;
            t = now.max(self.ep.send_free[src]) + os;
            self.ep.send_free[src] = t;
        }
        self.queue.push(SimTime(t + ls), Event::MsgReady { msg });
    }

    /// The last packet of `msg` has arrived: `true` if the delivery is complete now, `false`
    /// if it completes after the receive overhead (an [`Event::Deliver`] then).
    pub(crate) fn endpoint_received(&mut self, msg: u32) -> bool {
        let (or, lr) = (self.ep.cfg.recv_overhead_ps, self.ep.cfg.recv_latency_ps);
        if or == 0 && lr == 0 {
            return true;
        }
        let mut t = self.queue.now().0 + lr;
        if or > 0 {
            // Arrivals are taken in order (`now + lr` grows with `now`), one `o_r` each.
            let dst = self.messages[msg as usize].dst as usize;
            t = t.max(self.ep.recv_free[dst]) + or;
            self.ep.recv_free[dst] = t;
        }
        self.queue.push(SimTime(t), Event::Deliver { msg });
        false
    }

    /// The RTS of `msg` goes out on the port the data will use.
    pub(crate) fn send_rts(&mut self, port: PortId, msg: u32) {
        let now = self.queue.now().0;
        self.ep.ctrl_q[port.idx()].push_back(CtrlQueued { msg, cts: false, since: now });
        self.kick(port);
    }

    /// A control packet of `msg` arrived: an RTS at the receiver (it answers with a CTS at
    /// once), or a CTS at the sender (the data may go).
    pub(crate) fn ctrl_arrived(&mut self, msg: u32, cts: bool) {
        let (src, dst, port) = {
            let m = &self.messages[msg as usize];
            (m.src, m.dst, m.port)
        };
        if cts {
            let g = self.pt.of(self.host_node[src as usize], port);
            self.inject[g.idx()].push_back(msg);
            self.kick(g);
            return;
        }
        let node = self.host_node[dst as usize];
        let nports = self.pt.count(node);
        let lp = if nports == 1 {
            0
        } else {
            match self.injection_port(node, src, msg) {
                Some(lp) => lp,
                None => {
                    self.stats.drops_no_route += 1;
                    return; // stays undelivered; reported at the end
                }
            }
        };
        let g = self.pt.of(node, lp);
        let now = self.queue.now().0;
        self.ep.ctrl_q[g.idx()].push_back(CtrlQueued { msg, cts: true, since: now });
        self.kick(g);
    }

    /// Whether host port `port`'s host DMA engine is busy at `now` (injection ceiling).
    #[inline]
    pub(crate) fn dma_busy(&self, port: PortId, now: u64) -> Option<u64> {
        let host = self.node_host[self.pt.node(port).idx()]?;
        let free = self.ep.dma_free[host as usize];
        (now < free).then_some(free)
    }

    /// Host port `port` injects `bytes` now: its host's DMA engine is busy for them.
    #[inline]
    pub(crate) fn dma_take(&mut self, port: PortId, bytes: u32, now: u64) {
        if let Some(host) = self.node_host[self.pt.node(port).idx()] {
            let bps = self.ep.cfg.injection_bps.expect("dma on");
            self.ep.dma_free[host as usize] = now + SimDuration::serialization(bytes as u64, bps).0;
        }
    }

    /// Sends the head of host port `port`'s control queue (the arbitration chose it).
    pub(crate) fn inject_ctrl(&mut self, port: PortId) {
        let g = port.idx();
        let now = self.queue.now().0;
        let c = self.ep.ctrl_q[g].pop_front().expect("candidate");
        let vc = self.injection_vc(port);
        let size = self.cfg.header_bytes;
        let m = &self.messages[c.msg as usize];
        let dst = if c.cts { m.src } else { m.dst };
        let born = now.max(self.ports[g].inject_since).max(c.since);
        self.stats.packets_created += 1;
        let id = self.pool.alloc(Packet {
            next: None,
            wire_bytes: size,
            payload_bytes: 0,
            dst: PackedDst::new(AppDst::Host(dst)),
            body: Body::Ctrl { msg: c.msg, cts: c.cts },
            seq: 0,
            in_port: None,
            in_vc: 0,
            vc,
            hops: 0,
            flags: Packet::new_flags(false),
            flow_hash: (fingerprint(self.salt, c.msg, u32::MAX) >> 32) as u32,
            fingerprint: 0,
            arrive_ps: 0,
            born_ps: born,
        });
        self.stats.peak_packets_in_flight = self.stats.peak_packets_in_flight.max(self.pool.live);
        self.ports[g].inject_since = now + self.pt.serialization_ps(port, size);
        self.transmit(port, id);
    }

    /// The receive overhead of `msg` is over: the delivery completes.
    pub(crate) fn endpoint_deliver(&mut self, msg: u32) {
        self.complete_delivery(msg);
        self.notes.push(Note::Delivered(msg));
    }
}
