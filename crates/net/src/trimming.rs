//! NDP's switch side: payload trimming and a priority (header) queue at every port.
//!
//! Only with `transport = ndp` (see [`crate::transport`]); otherwise nothing here runs and
//! ports are plain drop-tail or credit queues. The model is csg-htsim's `CompositeQueue`
//! (`compositequeue.cpp`), the queue of NDP switches and host NICs there:
//!
//! - Every output port has a **data queue** of `data_queue_packets` MTUs (in bytes: whole data
//!   packets, protocol packets) and a **priority queue** for trimmed headers, ACKs, NACKs and
//!   PULLs of twice as many bytes (htsim: `_queuesize_high + size > 2 * _maxsize` drops).
//!   `network.buffer_bytes` does not apply to these ports.
//! - **Trimming.** An NDP data packet that does not fit the data queue is cut to its header
//!   (`header_bytes` on the wire, no payload) instead of dropped: with probability 1/2 the
//!   arriving packet, otherwise the packet at the tail of the data queue, whose room the
//!   arrival then takes (htsim draws `drand() < 0.5` only when the queue is full; the NDP paper
//!   trims the tail half the time to avoid phase effects). The tail is trimmed only if it is an
//!   NDP data packet and its room fits the arrival; otherwise the arrival is trimmed. The header
//!   joins the priority queue; if that is full too it is dropped (the sender's retransmission
//!   timeout recovers it). Other packets that do not fit the data queue are dropped, as with
//!   drop-tail.
//! - **Service.** A port whose priority queue has packets serves it first, except that while
//!   both queues have packets a counter lets one data packet through every
//!   [`HEADER_TURNS`]` + 1` choices (htsim's `_ratio_high = 100000`, `_ratio_low = 1`: headers
//!   are practically always first, but data never waits for ever). On a host port the data
//!   side is the host's injection (its messages and protocol packets) as well.
//! - **ECN** marks (if configured) look at the data queue's bytes; the port's queue statistics
//!   and adaptive routing see both queues (htsim's `queuesize()` is their sum).
//!
//! The priority queue is an intrusive FIFO through the packet pool, like the VC queues:
//! joining and leaving allocate nothing.

use crate::ids::{PktId, PortId};
use crate::network::Network;
use crate::packet::{Body, TransportPacket};
use reducelab_des::Rng;

/// While both queues of a port have packets, the priority queue is served this many times for
/// every data packet (htsim `CompositeQueue::_ratio_high`, with `_ratio_low = 1`).
pub const HEADER_TURNS: u32 = 100_000;

/// The trimming state of every port; each port's priority queue itself is in its
/// [`crate::ports::PortState`] (`prio_*`), in the cache line the port's every packet touches.
pub(crate) struct Trimming {
    pub on: bool,
    /// Data queue capacity per port (bytes).
    pub data_cap: u64,
    /// Priority queue capacity per port (bytes).
    pub prio_cap: u64,
    /// Data packets trimmed at each port.
    pub trims: Vec<u64>,
    /// Packets dropped because each port's priority queue was full.
    pub prio_drops: Vec<u64>,
    pub rng: Rng,
}

impl Trimming {
    pub fn off(rng: Rng) -> Trimming {
        Trimming { on: false, data_cap: 0, prio_cap: 0, trims: Vec::new(), prio_drops: Vec::new(), rng }
    }

    pub fn new(ports: usize, data_cap: u64, rng: Rng) -> Trimming {
        Trimming { on: true, data_cap, prio_cap: 2 * data_cap, trims: vec![0; ports], prio_drops: vec![0; ports], rng }
    }
}

impl Network {
    /// [`Network::enqueue`] with trimming on: `pkt` joins `port`'s data or priority queue, is
    /// trimmed, or is dropped; the port is kicked.
    #[cold]
    #[inline(never)]
    pub(crate) fn enqueue_trimming(&mut self, port: PortId, pkt: PktId) {
        let g = port.idx();
        let (size, body) = {
            let p = self.pool.get(pkt);
            (p.wire_bytes as u64, p.body)
        };
        let priority = match body {
            Body::Transport { kind, .. } => kind.is_priority(),
            Body::Ctrl { .. } => true,
            Body::Msg { .. } | Body::App(_) => false,
        };
        if priority {
            return self.push_priority(port, pkt);
        }
        let data_bytes = self.ports[g].q_bytes - self.ports[g].prio_bytes;
        if data_bytes + size > self.trim.data_cap {
            if !matches!(body, Body::Transport { kind: TransportPacket::Data, .. }) {
                self.port_counters[g].drops += 1;
                self.stats.drops_buffer += 1;
                self.lose(pkt);
                return;
            }
            let tail = self.queues.tail(port, 0).filter(|&t| {
                let tp = self.pool.get(t);
                matches!(tp.body, Body::Transport { kind: TransportPacket::Data, .. })
                    && data_bytes - tp.wire_bytes as u64 + size <= self.trim.data_cap
            });
            // The coin is tossed whenever the queue is full, as htsim does.
            let coin = self.trim.rng.bernoulli(0.5);
            match tail {
                Some(_) if coin => {
                    let now = self.queue.now().0;
                    let (t, tsize) = self.queues.pop_tail(&mut self.pool, port, 0);
                    let ps = &mut self.ports[g];
                    ps.note_queue_change(now);
                    ps.q_bytes -= tsize;
                    ps.q_packets -= 1;
                    self.trim_payload(port, t);
                    self.push_priority(port, t);
                }
                _ => {
                    self.trim_payload(port, pkt);
                    return self.push_priority(port, pkt);
                }
            }
        }
        let data_bytes = self.ports[g].q_bytes - self.ports[g].prio_bytes;
        self.admit(port, 0, pkt, size, data_bytes);
    }

    /// Cuts NDP data packet `pkt`, queued at or arriving at `port`, to its header.
    fn trim_payload(&mut self, port: PortId, pkt: PktId) {
        let hb = self.cfg.header_bytes;
        let p = self.pool.get_mut(pkt);
        let Body::Transport { msg, kind: TransportPacket::Data } = p.body else {
            unreachable!("only NDP data packets are trimmed")
        };
        p.body = Body::Transport { msg, kind: TransportPacket::Header };
        p.wire_bytes = hb;
        p.payload_bytes = 0;
        self.trim.trims[port.idx()] += 1;
        self.tr.stats.trims += 1;
        self.tr.flow_mut(msg).trims += 1;
    }

    /// `pkt` joins `port`'s priority queue, or is dropped if it is full.
    fn push_priority(&mut self, port: PortId, pkt: PktId) {
        let g = port.idx();
        let size = self.pool.get(pkt).wire_bytes as u64;
        if self.ports[g].prio_bytes + size > self.trim.prio_cap {
            self.port_counters[g].drops += 1;
            self.trim.prio_drops[g] += 1;
            self.stats.drops_buffer += 1;
            self.tr.stats.priority_drops += 1;
            self.lose(pkt);
            return;
        }
        let now = self.queue.now().0;
        let ps = &mut self.ports[g];
        ps.note_queue_change(now);
        ps.q_bytes += size;
        ps.q_packets += 1;
        ps.max_q_bytes = ps.max_q_bytes.max(ps.q_bytes);
        ps.prio_bytes += size;
        ps.prio_packets += 1;
        self.pool.get_mut(pkt).next = None;
        match ps.prio_tail.replace(pkt) {
            None => ps.prio_head = Some(pkt),
            Some(t) => self.pool.get_mut(t).next = Some(pkt),
        }
        self.kick(port);
    }

    /// Whether idle `port`, whose priority queue has packets, serves it now (see the module
    /// doc): always if nothing else waits, else as the service counter says.
    #[inline(never)]
    pub(crate) fn priority_turn(&mut self, port: PortId) -> bool {
        let g = port.idx();
        let ps = &self.ports[g];
        let data_waiting = ps.q_packets > ps.prio_packets
            || (ps.host
                && (!self.tr.round[g].is_empty() || !self.inject[g].is_empty() || !self.protocol.app_q[g].is_empty()));
        if !data_waiting {
            return true;
        }
        let t = &mut self.ports[g].prio_turn;
        *t += 1;
        if *t > HEADER_TURNS {
            *t = 0;
        }
        *t < HEADER_TURNS
    }

    /// Sends the head of `port`'s priority queue now.
    #[inline(never)]
    pub(crate) fn send_priority(&mut self, port: PortId) {
        let pkt = self.take_priority(port);
        self.transmit(port, pkt);
    }

    /// Takes the head of `port`'s priority queue off it.
    pub(crate) fn take_priority(&mut self, port: PortId) -> PktId {
        let g = port.idx();
        let now = self.queue.now().0;
        let ps = &mut self.ports[g];
        let pkt = ps.prio_head.expect("priority queue has packets");
        let (next, size) = {
            let p = self.pool.get(pkt);
            (p.next, p.wire_bytes as u64)
        };
        ps.prio_head = next;
        if next.is_none() {
            ps.prio_tail = None;
        }
        ps.prio_bytes -= size;
        ps.prio_packets -= 1;
        ps.note_queue_change(now);
        ps.q_bytes -= size;
        ps.q_packets -= 1;
        pkt
    }
}

#[cfg(test)]
mod tests {
    use crate::{FlowControl, NdpConfig, NetConfig, Network, TransportConfig};
    use reducelab_des::Rng;
    use reducelab_topo::{star, LinkParams};

    /// While both queues hold packets, the data queue gets exactly one turn in every
    /// `HEADER_TURNS + 1` choices, the `HEADER_TURNS`-th one (htsim: `_crt` counts 1, 2, …; the
    /// data queue goes when it reaches `_ratio_high`, then it wraps to 0); with nothing else
    /// waiting the priority queue always goes and the counter does not move.
    #[test]
    fn data_gets_one_turn_in_header_turns_plus_one() {
        let topo = star(2, LinkParams { bandwidth_bps: 100_000_000_000, latency_ps: 1 }).unwrap();
        let cfg = NetConfig { flow_control: FlowControl::DropTail, ..NetConfig::default() };
        let mut net = Network::new(&topo, cfg, vec![], &Rng::new(1)).unwrap();
        net.set_transport(TransportConfig::Ndp(NdpConfig::default())).unwrap();
        let port = crate::ids::PortId::new(0);
        // Bookkeeping as if one header and one data packet were queued.
        net.ports[0].prio_packets = 1;
        net.ports[0].q_packets = 2;
        let n = 2 * (super::HEADER_TURNS as usize + 1);
        let data_turns: Vec<usize> = (1..=n).filter(|_| !net.priority_turn(port)).collect();
        let t = super::HEADER_TURNS as usize;
        assert_eq!(data_turns, [t, 2 * t + 1]);
        // Only headers waiting: always the priority queue, counter untouched.
        net.ports[0].q_packets = 1;
        assert!((0..10).all(|_| net.priority_turn(port)));
        net.ports[0].q_packets = 2;
        assert!(net.priority_turn(port), "the count goes on from where it was");
    }
}
