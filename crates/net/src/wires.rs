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

use crate::ids::PktId;
use crate::packet::PacketPool;

/// Head and tail of the packets in flight on one port's wire. They live in the port's wiring
/// record (see [`crate::ports::PortTable`]), next to the link's latency and far end that the
/// same hops read, so that sending and arriving touch one 32-byte record, not two lines.
#[derive(Clone, Copy, Default)]
pub(crate) struct WireEnds {
    head: Option<PktId>,
    tail: Option<PktId>,
}

impl WireEnds {
    /// Puts `pkt` on the wire, arriving at `arrive`. Returns true if it is the head (the
    /// caller schedules its arrival event at `arrive`).
    #[inline]
    pub fn push(&mut self, pool: &mut PacketPool, pkt: PktId, arrive: u64) -> bool {
        pool.get_mut(pkt).next = None;
        match self.tail {
            None => {
                *self = WireEnds { head: Some(pkt), tail: Some(pkt) };
                true
            }
            Some(tail) => {
                self.tail = Some(pkt);
                let t = pool.get_mut(tail);
                t.next = Some(pkt);
                t.arrive_ps = arrive;
                false
            }
        }
    }

    /// The packet that arrives next.
    #[inline]
    pub fn head(&self) -> Option<PktId> {
        self.head
    }

    /// Takes the head packet off the wire (its arrival event fired). Returns it and, if
    /// another packet follows, that packet's arrival time (the caller schedules it).
    #[inline]
    pub fn pop(&mut self, pool: &PacketPool) -> (PktId, Option<u64>) {
        let pkt = self.head.expect("arrival on an empty wire");
        let p = pool.get(pkt);
        self.head = p.next;
        match p.next {
            None => {
                self.tail = None;
                (pkt, None)
            }
            Some(_) => (pkt, Some(p.arrive_ps)),
        }
    }
}
