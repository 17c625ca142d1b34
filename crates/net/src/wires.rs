//! Wires: the packets in flight on each output port's link.
//!
//! Guarantee: arrival times on one wire never decrease (fixed latency, FIFO transmission,
//! and every packet a forwarding node receives pays the same pipeline latency), so each
//! port keeps its in-flight packets in an intrusive FIFO threaded through the packet pool
//! and only the head has an event in the queue: the heap holds O(ports) entries instead of
//! O(packets in flight). Pushing and popping allocate nothing.
//!
//! A packet on a wire keeps in its `arrive_ps` the arrival time of the packet *behind* it
//! (written when that one is pushed, while the tail's line is touched anyway): popping the
//! head then reads only the head packet, which the arrival handles next, and not the packet
//! behind it (a cache miss that was ~13% of an NDP permutation's profile at 1,024 hosts; see
//! docs/engine.md, "Performance"). A packet's own arrival time is the event's time.

use crate::ids::{PktId, PortId};
use crate::packet::PacketPool;

/// Head and tail of the packets on each port's wire.
pub(crate) struct Wires {
    ends: Vec<(Option<PktId>, Option<PktId>)>,
}

impl Wires {
    pub fn new(ports: usize) -> Self {
        Wires { ends: vec![(None, None); ports] }
    }

    /// Puts `pkt` on the wire of `port`, arriving at `arrive`. Returns true if it is the
    /// head (the caller schedules its arrival event at `arrive`).
    #[inline]
    pub fn push(&mut self, pool: &mut PacketPool, port: PortId, pkt: PktId, arrive: u64) -> bool {
        pool.get_mut(pkt).next = None;
        let w = &mut self.ends[port.idx()];
        match w.1 {
            None => {
                *w = (Some(pkt), Some(pkt));
                true
            }
            Some(tail) => {
                w.1 = Some(pkt);
                let t = pool.get_mut(tail);
                t.next = Some(pkt);
                t.arrive_ps = arrive;
                false
            }
        }
    }

    /// The packet that arrives next on the wire of `port`.
    #[inline]
    pub fn head(&self, port: PortId) -> Option<PktId> {
        self.ends[port.idx()].0
    }

    /// Starts loading the ends of `port`'s wire (see [`reducelab_des::prefetch`]).
    #[inline]
    pub fn prefetch_ends(&self, port: PortId) {
        reducelab_des::prefetch(&self.ends[port.idx()]);
    }

    /// Takes the head packet off the wire of `port` (its arrival event fired). Returns it
    /// and, if another packet follows, that packet's arrival time (the caller schedules it).
    #[inline]
    pub fn pop(&mut self, pool: &PacketPool, port: PortId) -> (PktId, Option<u64>) {
        let w = &mut self.ends[port.idx()];
        let pkt = w.0.expect("arrival on an empty wire");
        let p = pool.get(pkt);
        w.0 = p.next;
        match p.next {
            None => {
                w.1 = None;
                (pkt, None)
            }
            Some(_) => (pkt, Some(p.arrive_ps)),
        }
    }
}
