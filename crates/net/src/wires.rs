//! Wires: the packets in flight on each output port's link.
//!
//! Guarantee: arrival times on one wire never decrease (fixed latency, FIFO transmission,
//! and every packet a forwarding node receives pays the same pipeline latency), so each
//! port keeps its in-flight packets in an intrusive FIFO threaded through the packet pool
//! and only the head has an event in the queue: the heap holds O(ports) entries instead of
//! O(packets in flight). Pushing and popping allocate nothing.

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
    /// head (the caller schedules its arrival event).
    #[inline]
    pub fn push(&mut self, pool: &mut PacketPool, port: PortId, pkt: PktId, arrive: u64) -> bool {
        {
            let p = pool.get_mut(pkt);
            p.next = None;
            p.arrive_ps = arrive;
        }
        let w = &mut self.ends[port.idx()];
        match w.1 {
            None => {
                *w = (Some(pkt), Some(pkt));
                true
            }
            Some(tail) => {
                w.1 = Some(pkt);
                debug_assert!(pool.get(tail).arrive_ps <= arrive);
                pool.get_mut(tail).next = Some(pkt);
                false
            }
        }
    }

    /// Takes the head packet off the wire of `port` (its arrival event fired). Returns it
    /// and, if another packet follows, that packet's arrival time (the caller schedules it).
    #[inline]
    pub fn pop(&mut self, pool: &PacketPool, port: PortId) -> (PktId, Option<u64>) {
        let w = &mut self.ends[port.idx()];
        let pkt = w.0.expect("arrival on an empty wire");
        let next = pool.get(pkt).next;
        w.0 = next;
        match next {
            None => {
                w.1 = None;
                (pkt, None)
            }
            Some(n) => (pkt, Some(pool.get(n).arrive_ps)),
        }
    }
}
