//! Ports and arbitration: the static wiring of every port, its dynamic state, when it
//! transmits and what.
//!
//! A global port ([`PortId`]) is one output direction of a full-duplex link, numbered node by
//! node; the same id names the ingress buffer of the reverse direction at that node.
//!
//! Guarantees:
//! - A port transmits one packet at a time at its link's bandwidth (`busy_until`), and at most
//!   one wake-up event per port is pending (`wake_pending`).
//! - **Arbitration is by age**: among the heads of its VC queues that have credits downstream
//!   and the host's next message or protocol packet, the packet that became ready earliest goes
//!   first (the host's next packet counts from when the port last injected, or its message
//!   started); ties go round-robin from the slot after the one served last. Deterministic: it
//!   depends only on times and the round-robin pointer.
//! - A port with work but no credits sleeps until the next credit return (or, if none is in
//!   flight, is woken by the next one), so a blocked port costs no event per packet.
//! - Queue occupancy statistics are time-weighted exactly (integer picosecond areas).

use crate::config::NoiseMode;
use crate::ids::{PktId, PortId};
use crate::network::{Event, Network};
use crate::wires::WireEnds;
use reducelab_des::{SimDuration, SimTime};
use reducelab_topo::{LinkId, NodeId, Topology};
use serde::Serialize;

/// Wiring of the global ports, indexed by [`PortId::idx`]: one 32-byte record per port (half
/// a cache line) with the ends of its wire, as a hop reads it together.
pub(crate) struct PortTable {
    /// Node `n`'s ports are `first[n] .. first[n + 1]`.
    first: Vec<u32>,
    wiring: Vec<PortWiring>,
    /// Each port's link bandwidth (read for serialisation only when `ps_per_byte` is 0).
    bps: Vec<u64>,
    /// Picoseconds per byte when every link has the same bandwidth and it divides 8·10^12
    /// (100 Gb/s: 80 ps) and is at least 2 kb/s (so a `u32` size times it fits `u64`); 0
    /// otherwise. Serialisation is then a multiplication, the same value as the division.
    ps_per_byte: u64,
}

/// What a hop reads of a port: the link, both of its ends and the packets on its wire (an
/// arrival takes its ingress port, node and link from the record of the port that sent the
/// packet, and pops that port's wire).
#[derive(Clone, Copy)]
#[repr(C, align(32))]
struct PortWiring {
    lat: u64,
    node: NodeId,
    peer: PortId,
    link: LinkId,
    peer_node: NodeId,
    wire: WireEnds,
}

impl PortTable {
    pub fn new(topo: &Topology) -> PortTable {
        let mut first = Vec::with_capacity(topo.nodes.len() + 1);
        let mut total = 0u32;
        for n in &topo.nodes {
            first.push(total);
            total += n.ports.len() as u32;
        }
        first.push(total);
        let mut wiring = Vec::with_capacity(total as usize);
        let mut bps = Vec::with_capacity(total as usize);
        for (ni, n) in topo.nodes.iter().enumerate() {
            for p in &n.ports {
                let l = &topo.links[p.link.idx()];
                bps.push(l.bandwidth_bps);
                wiring.push(PortWiring {
                    lat: l.latency_ps,
                    node: NodeId(ni as u32),
                    peer: PortId::new(first[p.peer.idx()] + p.peer_port as u32),
                    link: p.link,
                    peer_node: p.peer,
                    wire: WireEnds::default(),
                });
            }
        }
        let ps_per_byte = match bps.first().copied() {
            Some(b) if b > 0 && bps.iter().all(|&w| w == b) && 8_000_000_000_000 % b == 0 => {
                Some(8_000_000_000_000 / b).filter(|&p| p <= u32::MAX as u64).unwrap_or(0)
            }
            _ => 0,
        };
        PortTable { first, wiring, bps, ps_per_byte }
    }

    /// Time to serialise `bytes` on port `p` ([`SimDuration::serialization`] at its link's
    /// bandwidth, without the division when the links' bandwidth allows).
    #[inline]
    pub fn serialization_ps(&self, p: PortId, bytes: u32) -> u64 {
        if self.ps_per_byte != 0 {
            bytes as u64 * self.ps_per_byte
        } else {
            SimDuration::serialization(bytes as u64, self.bps(p)).0
        }
    }
    /// Number of global ports.
    pub fn len(&self) -> usize {
        self.wiring.len()
    }
    /// Global id of local port `lp` of `node` (unchecked against the node's port count).
    #[inline]
    pub fn of(&self, node: NodeId, lp: u16) -> PortId {
        PortId::new(self.first[node.idx()] + lp as u32)
    }
    /// Global id of local port `lp` of `node`, if the node has it.
    #[inline]
    pub fn checked(&self, node: NodeId, lp: u16) -> Option<PortId> {
        (lp < self.count(node)).then(|| self.of(node, lp))
    }
    /// The first global port of `node` (its local port 0).
    #[inline]
    pub fn first(&self, node: NodeId) -> u32 {
        self.first[node.idx()]
    }
    /// Number of ports of `node`.
    #[inline]
    pub fn count(&self, node: NodeId) -> u16 {
        (self.first[node.idx() + 1] - self.first[node.idx()]) as u16
    }
    /// The ports of `node`.
    #[inline]
    pub fn of_node(&self, node: NodeId) -> impl Iterator<Item = PortId> {
        (self.first[node.idx()]..self.first[node.idx() + 1]).map(PortId::new)
    }
    #[inline]
    pub fn node(&self, p: PortId) -> NodeId {
        self.wiring[p.idx()].node
    }
    /// Local port number of `p` at its node.
    #[inline]
    pub fn local(&self, p: PortId) -> u16 {
        (p.idx() as u32 - self.first[self.node(p).idx()]) as u16
    }
    /// Starts loading `p`'s wiring record and wire (see [`reducelab_des::prefetch`]).
    #[inline]
    pub fn prefetch_wiring(&self, p: PortId) {
        reducelab_des::prefetch(&self.wiring[p.idx()]);
    }
    /// The node at the far end of `p`'s link.
    #[inline]
    pub fn peer_node(&self, p: PortId) -> NodeId {
        self.wiring[p.idx()].peer_node
    }
    /// The far end of `p`'s link (the port of the reverse direction).
    #[inline]
    pub fn peer(&self, p: PortId) -> PortId {
        self.wiring[p.idx()].peer
    }
    #[inline]
    pub fn link(&self, p: PortId) -> LinkId {
        self.wiring[p.idx()].link
    }
    /// The link of the port with raw index `i` (`first(node) + local port`), for inner loops.
    #[inline]
    pub fn link_at(&self, i: usize) -> LinkId {
        self.wiring[i].link
    }
    #[inline]
    pub fn bps(&self, p: PortId) -> u64 {
        self.bps[p.idx()]
    }
    /// The packets on `p`'s wire (see [`crate::wires`]).
    #[inline]
    pub fn wire(&self, p: PortId) -> &WireEnds {
        &self.wiring[p.idx()].wire
    }
    #[inline]
    pub fn wire_mut(&mut self, p: PortId) -> &mut WireEnds {
        &mut self.wiring[p.idx()].wire
    }
    #[inline]
    pub fn latency_ps(&self, p: PortId) -> u64 {
        self.wiring[p.idx()].lat
    }
    /// All global ports in order.
    pub fn all(&self) -> impl Iterator<Item = PortId> {
        (0..self.len() as u32).map(PortId::new)
    }
}

/// Dynamic state and counters of one output port: two cache lines (128 bytes at a 128-byte
/// boundary, a pair the L2 cache's adjacent-line prefetcher loads together). The first holds
/// what choosing, queueing and routing read (the port is the unit of work of the event loop:
/// one line instead of a line in each of several per-port arrays), the second what every
/// packet through the port updates (the queue's time-weighted area, the transmit counters)
/// and the host's injection clock. Counters of rare events are in [`PortCounters`].
#[derive(Clone, Debug, Default)]
#[repr(C, align(128))]
pub(crate) struct PortState {
    pub busy_until: u64,
    pub q_bytes: u64,
    /// NDP's priority queue (see [`crate::trimming`]): its bytes (part of `q_bytes`), head,
    /// tail, packets (part of `q_packets`) and service counter (htsim `_crt`).
    pub prio_bytes: u64,
    pub prio_head: Option<PktId>,
    pub prio_tail: Option<PktId>,
    pub q_packets: u32,
    pub prio_packets: u32,
    pub prio_turn: u32,
    pub wake_pending: bool,
    /// Has work but no credits, and no credit return is pending: the next return wakes it.
    pub credit_blocked: bool,
    pub noise_paid: bool,
    /// A port of a host: the only ports with host injection queues (messages, protocol
    /// packets, control packets, transport senders); switch ports skip them.
    pub host: bool,
    /// Round-robin pointer of the arbitration (the slot after the one served last).
    pub rr: u8,
    /// Input-buffered router only: bytes of input heads routed here, waiting for the crossbar
    /// (adaptive routing counts them with `q_bytes`); always 0 when output-queued.
    pub xbar_wait_bytes: u64,
    pub q_area: u128,
    pub q_last_change: u64,
    pub max_q_bytes: u64,
    pub bytes_tx: u64,
    pub packets_tx: u64,
    pub busy_ps: u64,
    /// Since when the host's next packet on this port has been ready (for age arbitration).
    pub inject_since: u64,
}

/// Counters of one output port that only drops and ECN marks touch (kept apart from
/// [`PortState`]'s two lines).
#[derive(Clone, Debug, Default)]
pub(crate) struct PortCounters {
    pub drops: u64,
    pub ecn_marks: u64,
}

impl PortState {
    /// What adaptive routing compares: the bytes queued for this output (with input-buffered
    /// routers, also the input heads routed here and waiting for the crossbar).
    #[inline]
    pub fn occupancy(&self) -> u64 {
        self.q_bytes + self.xbar_wait_bytes
    }

    /// Accumulates the time-weighted queue area up to `now` (call before the queue changes).
    #[inline]
    pub fn note_queue_change(&mut self, now: u64) {
        self.q_area += self.q_bytes as u128 * (now - self.q_last_change) as u128;
        self.q_last_change = now;
    }
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

impl Network {
    /// Makes `port` look for work now, or when its current transmission ends.
    #[inline]
    pub(crate) fn kick(&mut self, port: PortId) {
        let now = self.queue.now().0;
        let ps = &mut self.ports[port.idx()];
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

    pub(crate) fn has_work(&self, port: PortId) -> bool {
        let g = port.idx();
        let ps = &self.ports[g];
        ps.q_packets > 0 || (ps.host && self.host_has_work(port))
    }

    /// Whether host port `port` has something to inject (its host's queues).
    fn host_has_work(&self, port: PortId) -> bool {
        let g = port.idx();
        !self.inject[g].is_empty()
            || !self.protocol.app_q[g].is_empty()
            || (self.ep.rdv && !self.ep.ctrl_q[g].is_empty())
            || (self.tr.on && !self.tr.round[g].is_empty())
            || self.noise.released(port, self.queue.now().0).is_some()
    }

    /// Starts transmitting the next eligible packet on `port`, if idle.
    pub(crate) fn try_start(&mut self, port: PortId) {
        // Per-packet noise may set the chosen packet aside; the port then chooses again.
        while self.try_start_once(port) {}
    }

    /// One choice of [`Network::try_start`]; true if the chosen packet was set aside by
    /// per-packet noise (the port is still idle).
    fn try_start_once(&mut self, port: PortId) -> bool {
        let g = port.idx();
        let now = self.queue.now().0;
        if now < self.ports[g].busy_until || !(self.faults.all_up() || self.faults.is_link_up(self.pt.link(port))) {
            // With PFC a control frame may hold the link past the data frame whose end woke
            // the port: wait for it.
            let ps = &mut self.ports[g];
            if self.pfc.on && now < ps.busy_until && !ps.wake_pending {
                ps.wake_pending = true;
                self.queue.push(SimTime(ps.busy_until), Event::Wake { port });
            }
            return false;
        }
        self.ports[g].credit_blocked = false;
        self.credits.absorb(port, now);
        // NDP: the priority queue (trimmed headers, ACKs, NACKs, PULLs) goes first, but for one
        // data packet in `HEADER_TURNS + 1` choices (see `crate::trimming`).
        if self.trim.on && self.ports[g].prio_packets > 0 && self.priority_turn(port) {
            self.send_priority(port);
            return false;
        }
        let nvc = self.nvc;
        // VC queues, local message injection, local protocol injection (and, with rendezvous,
        // local control packets; with NDP, the messages whose senders may send).
        let slots = nvc + self.local_slots;
        // The host's DMA engine (injection ceiling) may hold back every local injection.
        let dma_busy = if self.ep.dma { self.dma_busy(port, now) } else { None };
        let mut dma_wait = None;
        let rr = self.ports[g].rr as usize;
        // Age-based arbitration (as in Cray Aries/Slingshot routers): among the queue heads
        // that have credits, the packet waiting longest in the network goes first; the host's
        // next packet counts as waiting since the port last injected (or its message
        // started). Ties go round-robin. Oldest-first keeps multi-hop flows from being
        // starved at every merge point (the parking-lot problem of plain round-robin).
        let mut best: Option<(u64, usize)> = None;
        let host = self.ports[g].host;
        // Slots rr, rr + 1, ... cyclically (one division per choice, not one per slot).
        let mut next = rr % slots;
        for _ in 0..slots {
            let idx = next;
            next = if next + 1 == slots { 0 } else { next + 1 };
            if idx >= nvc && !host {
                continue; // a switch port injects nothing of its own
            }
            if idx >= nvc && dma_busy.is_some() {
                let waiting = match idx - nvc {
                    0 => !self.inject[g].is_empty(),
                    1 => !self.protocol.app_q[g].is_empty(),
                    _ if self.tr.on => !self.tr.round[g].is_empty(),
                    _ => !self.ep.ctrl_q[g].is_empty(),
                };
                if waiting {
                    dma_wait = dma_busy;
                }
                continue;
            }
            let age = if idx < nvc {
                let Some(head) = self.queues.head(port, idx) else { continue };
                let p = self.pool.get(head);
                if !self.credits.covers(port, idx, p.wire_bytes) {
                    continue;
                }
                p.born_ps
            } else if let (true, Some(&msg)) = (idx == nvc, self.inject[g].front()) {
                let vc = self.injection_vc(port);
                let size = self.next_packet_size(msg);
                if !self.credits.covers(port, vc as usize, size) {
                    continue;
                }
                self.ports[g].inject_since.max(self.messages[msg as usize].start.ps())
            } else if idx == nvc + 1 {
                let Some(a) = self.protocol.app_q[g].front() else { continue };
                let vc = self.injection_vc(port);
                if !self.credits.covers(port, vc as usize, a.pkt.wire_bytes) {
                    continue;
                }
                self.ports[g].inject_since.max(a.since)
            } else if idx == nvc + 2 && self.tr.on {
                let Some(&msg) = self.tr.round[g].front() else { continue };
                let vc = self.injection_vc(port);
                if !self.credits.covers(port, vc as usize, self.transport_next_size(msg)) {
                    continue;
                }
                self.ports[g].inject_since.max(self.messages[msg as usize].start.ps())
            } else if idx == nvc + 2 {
                let Some(c) = self.ep.ctrl_q[g].front() else { continue };
                let vc = self.injection_vc(port);
                if !self.credits.covers(port, vc as usize, self.cfg.header_bytes) {
                    continue;
                }
                self.ports[g].inject_since.max(c.since)
            } else {
                continue;
            };
            if best.is_none_or(|(a, _)| age < a) {
                best = Some((age, idx));
            }
        }
        // A packet set aside by per-packet noise, once its delay has passed, competes by its
        // age like the others (outside the round-robin: ties go to the others).
        // It is a local injection: with an injection ceiling it waits for and pays the DMA engine.
        if let Some(pkt) = self.noise.released(port, now) {
            let p = *self.pool.get(pkt);
            if dma_busy.is_some() {
                dma_wait = dma_busy;
            } else if self.credits.covers(port, p.vc as usize, p.wire_bytes) && best.is_none_or(|(a, _)| p.born_ps < a)
            {
                if self.ep.dma {
                    self.dma_take(port, p.wire_bytes, now);
                }
                let pkt = self.take_released(port);
                self.transmit(port, pkt);
                return false;
            }
        }
        if let Some((_, idx)) = best {
            if idx < nvc {
                self.ports[g].rr = ((idx + 1) % slots) as u8;
                let pkt = self.dequeue(port, idx);
                self.transmit(port, pkt);
                if self.ib.on {
                    self.ib_output_freed(port);
                }
                return false;
            }
            // Host injection (messages, NDP messages or protocol packets); OS noise may delay
            // it. The NIC's rendezvous control packets (slot nvc + 2 without NDP) are not the
            // host's and never pay it.
            if self.cfg.noise_probability > 0.0 && (idx <= nvc + 1 || self.tr.on) && self.noise.on(port) {
                match self.cfg.noise_mode {
                    NoiseMode::PortStall if !self.ports[g].noise_paid => {
                        self.ports[g].noise_paid = true;
                        if self.noise.rng.bernoulli(self.cfg.noise_probability) {
                            let t = now + self.cfg.noise_delay_ps;
                            self.ports[g].busy_until = t;
                            self.ports[g].wake_pending = true;
                            self.queue.push(SimTime(t), Event::Wake { port });
                            return false;
                        }
                    }
                    NoiseMode::PortStall => {}
                    NoiseMode::Packet => {
                        if self.noise.rng.bernoulli(self.cfg.noise_probability) {
                            // Cut the packet as if it were sent, but set it aside: the port is
                            // still idle, so the host's next packet is ready now.
                            self.ports[g].rr = ((idx + 1) % slots) as u8;
                            let since = self.ports[g].inject_since;
                            let pkt = if idx == nvc + 1 {
                                self.take_app_packet(port)
                            } else if idx == nvc + 2 {
                                let msg = *self.tr.round[g].front().expect("candidate");
                                let size = self.transport_next_size(msg);
                                let vc = self.injection_vc(port);
                                self.make_transport_packet(port, msg, vc, size)
                            } else {
                                let msg = *self.inject[g].front().expect("candidate");
                                let size = self.next_packet_size(msg);
                                let vc = self.injection_vc(port);
                                self.make_packet(port, msg, vc, size)
                            };
                            self.ports[g].inject_since = since;
                            self.set_aside(port, pkt);
                            return true;
                        }
                    }
                }
            }
            self.ports[g].noise_paid = false;
            self.ports[g].rr = ((idx + 1) % slots) as u8;
            if idx == nvc + 1 {
                if self.ep.dma {
                    let size = self.protocol.app_q[g].front().expect("candidate").pkt.wire_bytes;
                    self.dma_take(port, size, now);
                }
                let pkt = self.take_app_packet(port);
                self.transmit(port, pkt);
                return false;
            }
            if idx == nvc + 2 && self.tr.on {
                let msg = *self.tr.round[g].front().expect("candidate");
                let vc = self.injection_vc(port);
                let size = self.transport_next_size(msg);
                if self.ep.dma {
                    self.dma_take(port, size, now);
                }
                let pkt = self.make_transport_packet(port, msg, vc, size);
                self.ports[g].inject_since = now + self.pt.serialization_ps(port, size);
                self.transmit(port, pkt);
                return false;
            }
            if idx == nvc + 2 {
                if self.ep.dma {
                    self.dma_take(port, self.cfg.header_bytes, now);
                }
                self.inject_ctrl(port);
                return false;
            }
            let msg = *self.inject[g].front().expect("candidate");
            let vc = self.injection_vc(port);
            let size = self.next_packet_size(msg);
            if self.ep.dma {
                self.dma_take(port, size, now);
            }
            let pkt = self.make_packet(port, msg, vc, size);
            self.ports[g].inject_since = now + self.pt.serialization_ps(port, size);
            self.transmit(port, pkt);
            return false;
        }
        // The data side's turn found nothing it could send: the priority queue goes instead.
        if self.trim.on && self.ports[g].prio_packets > 0 {
            self.send_priority(port);
            return false;
        }
        // Work is waiting but no credits: sleep until the next credit return.
        // Or until the host's DMA engine is free, if a local injection waits for it.
        if self.has_work(port) {
            let credit = self.credits.next_return(port);
            match dma_wait.map_or(credit, |d| Some(credit.map_or(d, |c| c.min(d)))) {
                Some(t) => {
                    self.ports[g].wake_pending = true;
                    self.queue.push(SimTime(t), Event::Wake { port });
                }
                None => self.ports[g].credit_blocked = true,
            }
        }
        false
    }

    /// Sends `pkt` on `port` now: serialisation, credits, the upstream's credit return, the
    /// wire, and a wake-up for the port's next packet.
    pub(crate) fn transmit(&mut self, port: PortId, pkt: PktId) {
        let g = port.idx();
        let now = self.queue.now().0;
        let p = *self.pool.get(pkt);
        let size = p.wire_bytes;
        let ser = self.pt.serialization_ps(port, size);
        let end = now + ser;
        if self.pfc.on {
            self.pfc.frame_end[g] = end;
        }
        {
            let ps = &mut self.ports[g];
            ps.busy_until = end;
            ps.bytes_tx += size as u64;
            ps.packets_tx += 1;
            ps.busy_ps += ser;
        }
        self.credits.consume(port, p.vc as usize, size);
        self.stats.packet_hops += 1;
        // The packet leaves this node: give the ingress buffer back to the upstream sender.
        if let (Some(ip), true) = (p.in_port, self.ingress_accounted()) {
            let up = self.pt.peer(ip);
            let lat = self.pt.latency_ps(ip);
            self.return_credit(up, p.in_vc, size, now + lat);
        }
        // Every packet a forwarding node receives pays its pipeline latency (also those it
        // delivers to its own host), so arrival times on a wire are in FIFO order.
        let peer_node = self.pt.peer_node(port);
        let mut arrive = end + self.pt.latency_ps(port);
        if self.node_forwards[peer_node.idx()] {
            arrive += self.cfg.switch_latency_ps;
        }
        if self.pt.wire_mut(port).push(&mut self.pool, pkt, arrive) {
            self.queue.push(SimTime(arrive), Event::Arrive { port });
        }
        if self.has_work(port) {
            self.ports[g].wake_pending = true;
            self.queue.push(SimTime(end), Event::Wake { port });
        }
    }

    pub(crate) fn finish_stats(&mut self) {
        let now = self.queue.now().0;
        for ps in &mut self.ports {
            ps.note_queue_change(now);
        }
    }

    /// Per output port counters (one row per link direction), in global port order.
    pub fn port_stats(&self) -> Vec<PortStats> {
        let end = self.queue.now().0.max(1);
        self.pt
            .all()
            .map(|g| {
                let ps = &self.ports[g.idx()];
                let peer = self.pt.peer(g);
                PortStats {
                    node: self.pt.node(g).0,
                    port: self.pt.local(g),
                    peer_node: self.pt.node(peer).0,
                    peer_port: self.pt.local(peer),
                    link: self.pt.link(g).0,
                    bytes: ps.bytes_tx,
                    packets: ps.packets_tx,
                    busy_ps: ps.busy_ps,
                    max_queue_bytes: ps.max_q_bytes,
                    mean_queue_bytes: ps.q_area as f64 / end as f64,
                    drops: self.port_counters[g.idx()].drops,
                    ecn_marks: self.port_counters[g.idx()].ecn_marks,
                }
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use reducelab_topo::{fat_tree_3level, star, LinkParams};

    /// The multiplication (one exact bandwidth everywhere) and the division (anything else)
    /// give `SimDuration::serialization`'s value for every port and size.
    #[test]
    fn serialisation_by_multiplication_equals_the_division() {
        let l = |bps| LinkParams { bandwidth_bps: bps, latency_ps: 1_000 };
        let cases = [
            (star(3, l(100_000_000_000)).unwrap(), 80),
            (star(3, l(3_200_000_000_000)).unwrap(), 0), // 2.5 ps per byte: inexact
            (star(3, l(1_000)).unwrap(), 0),             // 8·10^9 ps per byte: too large
            (star(3, l(7)).unwrap(), 0),
            (fat_tree_3level(4, 2, l(100_000_000_000), l(400_000_000_000)).unwrap(), 0), // two bandwidths
        ];
        let mut rng = reducelab_des::Rng::new(5);
        for (i, (t, ps_per_byte)) in cases.iter().enumerate() {
            let pt = PortTable::new(t);
            assert_eq!(pt.ps_per_byte, *ps_per_byte, "case {i}");
            for g in pt.all() {
                for bytes in [0, 1, 64, 4064, u32::MAX, rng.next_u64() as u32, rng.next_u64() as u32 >> 16] {
                    assert_eq!(
                        pt.serialization_ps(g, bytes),
                        SimDuration::serialization(bytes as u64, pt.bps(g)).0,
                        "case {i} port {g:?} {bytes} B"
                    );
                }
            }
        }
    }
}
