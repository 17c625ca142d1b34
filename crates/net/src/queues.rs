//! VC queues: the packets waiting for each output port, per virtual channel.
//!
//! Guarantees:
//! - `fifo` arbitration (the default): one FIFO per (output port, VC), an output-queued
//!   switch. `input_round_robin`: one FIFO per (output port, VC, input port) — packets a switch
//!   creates itself count as one more input — served round-robin from the input after the one
//!   served last, FIFO within an input.
//! - Queues are intrusive lists threaded through the packet pool: joining and leaving allocate
//!   nothing. Byte counts per (port, VC) are exact at every instant.
//! - Drop-tail admission and ECN marking look at the port's total queued bytes (all VCs) when
//!   the packet joins; a port's queue statistics are time-weighted (see [`crate::ports`]).

use crate::config::FlowControl;
use crate::ids::{PktId, PortId};
use crate::network::Network;
use crate::packet::{Packet, PacketPool};
use crate::ports::PortTable;

type Fifo = (Option<PktId>, Option<PktId>);

/// One (port, VC) queue: its FIFO (used with FIFO arbitration) and its bytes (both).
#[derive(Clone, Copy, Default)]
struct VcQueue {
    head: Option<PktId>,
    tail: Option<PktId>,
    bytes: u64,
}

pub(crate) struct VcQueues {
    nvc: usize,
    q: Vec<VcQueue>,
    /// Input round-robin (empty with FIFO): per (port, VC, input) FIFOs, the inputs with
    /// packets queued as a bitmask per (port, VC), and the input served last.
    in_stride: usize,
    inq: Vec<Fifo>,
    in_mask: Vec<u128>,
    in_last: Vec<u8>,
}

impl VcQueues {
    /// Queues for `ports` ports of `nvc` VCs; with `input_rr`, per input of nodes with up to
    /// `max_ports` ports (at most 127: the input mask is a `u128`).
    pub fn new(ports: usize, nvc: usize, input_rr: bool, max_ports: usize) -> VcQueues {
        let in_stride = max_ports + 1;
        let n = ports * nvc;
        VcQueues {
            nvc,
            q: vec![VcQueue::default(); n],
            in_stride,
            inq: if input_rr { vec![(None, None); n * in_stride] } else { Vec::new() },
            in_mask: if input_rr { vec![0; n] } else { Vec::new() },
            in_last: if input_rr { vec![0; n] } else { Vec::new() },
        }
    }

    #[inline]
    fn qi(&self, port: PortId, vc: usize) -> usize {
        port.idx() * self.nvc + vc
    }

    /// Bytes queued on `port`'s VC `vc`.
    #[inline]
    pub fn bytes(&self, port: PortId, vc: usize) -> u64 {
        self.q[self.qi(port, vc)].bytes
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

    /// The packet `port`'s VC `vc` sends next, if any.
    #[inline]
    pub fn head(&self, port: PortId, vc: usize) -> Option<PktId> {
        let qi = self.qi(port, vc);
        if self.inq.is_empty() {
            self.q[qi].head
        } else {
            self.inq[qi * self.in_stride + self.next_input(qi)?].0
        }
    }

    /// The head of `port`'s VC 0 with FIFO arbitration (`None` with input round-robin): a
    /// prefetch hint.
    #[inline]
    pub fn fifo_head(&self, port: PortId) -> Option<PktId> {
        if self.inq.is_empty() {
            self.q[self.qi(port, 0)].head
        } else {
            None
        }
    }

    /// Starts loading `port`'s VC 0 queue (see [`reducelab_des::prefetch`]).
    #[inline]
    pub fn prefetch_fifo(&self, port: PortId) {
        reducelab_des::prefetch(&self.q[self.qi(port, 0)]);
    }

    /// The packet that joined `port`'s VC `vc` last (FIFO arbitration only).
    #[inline]
    pub fn tail(&self, port: PortId, vc: usize) -> Option<PktId> {
        debug_assert!(self.inq.is_empty(), "tail of a FIFO queue");
        self.q[self.qi(port, vc)].tail
    }

    /// Takes the packet that joined `port`'s VC `vc` last off it (FIFO arbitration only; walks
    /// the queue, which trimming keeps short); returns it and its size.
    pub fn pop_tail(&mut self, pool: &mut PacketPool, port: PortId, vc: usize) -> (PktId, u64) {
        debug_assert!(self.inq.is_empty(), "tail of a FIFO queue");
        let qi = self.qi(port, vc);
        let q = &mut self.q[qi];
        let tail = q.tail.expect("pop_tail from an empty queue");
        let mut prev = None;
        let mut cur = q.head;
        while let Some(c) = cur {
            if c == tail {
                break;
            }
            prev = Some(c);
            cur = pool.get(c).next;
        }
        match prev {
            None => {
                q.head = None;
                q.tail = None;
            }
            Some(p) => {
                pool.get_mut(p).next = None;
                q.tail = Some(p);
            }
        }
        let size = pool.get(tail).wire_bytes as u64;
        q.bytes -= size;
        (tail, size)
    }

    /// Appends `pkt` (of `size` bytes, which came in on `in_port`, `None` if made here) to
    /// `port`'s VC `vc`.
    #[inline(always)]
    pub fn push(&mut self, pool: &mut PacketPool, pt: &PortTable, port: PortId, vc: usize, pkt: PktId, size: u64) {
        let qi = self.qi(port, vc);
        self.q[qi].bytes += size;
        let p = pool.get_mut(pkt);
        p.next = None;
        let (head, tail) = if self.inq.is_empty() {
            let q = &mut self.q[qi];
            (&mut q.head, &mut q.tail)
        } else {
            let input = match p.in_port {
                None => self.in_stride - 1,
                Some(ip) => pt.local(ip) as usize,
            };
            self.in_mask[qi] |= 1u128 << input;
            let q = &mut self.inq[qi * self.in_stride + input];
            (&mut q.0, &mut q.1)
        };
        match tail.replace(pkt) {
            None => *head = Some(pkt),
            Some(old_tail) => pool.get_mut(old_tail).next = Some(pkt),
        }
    }

    /// Takes the packet [`VcQueues::head`] names off `port`'s VC `vc`; returns it and its size.
    #[inline]
    pub fn pop(&mut self, pool: &PacketPool, port: PortId, vc: usize) -> (PktId, u64) {
        let qi = self.qi(port, vc);
        let pkt = self.head(port, vc).expect("dequeue from an empty queue");
        let p = pool.get(pkt);
        let (next, size) = (p.next, p.wire_bytes as u64);
        if self.inq.is_empty() {
            let q = &mut self.q[qi];
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
        self.q[qi].bytes -= size;
        (pkt, size)
    }
}

impl Network {
    /// `pkt` joins the queue of output `port` on its VC (drop-tail may drop it instead; ECN
    /// may mark it), and the port is kicked.
    pub(crate) fn enqueue(&mut self, port: PortId, pkt: PktId) {
        if self.trim.on {
            return self.enqueue_trimming(port, pkt);
        }
        let g = port.idx();
        let (size, vc) = {
            let p = self.pool.get(pkt);
            (p.wire_bytes as u64, p.vc as usize)
        };
        let cap = self.cfg.buffer_bytes;
        let ps = &mut self.ports[g];
        if self.cfg.flow_control == FlowControl::DropTail && ps.q_bytes + size > cap {
            self.port_counters[g].drops += 1;
            self.stats.drops_buffer += 1;
            self.lose(pkt);
            return;
        }
        let queued = ps.q_bytes;
        self.admit(port, vc, pkt, size, queued);
    }

    /// The last step of every enqueue: ECN marks `pkt` if `marked_bytes` (the queue the
    /// threshold applies to) exceeds it, accounts the packet on `port`, queues it on `vc` and
    /// kicks the port.
    pub(crate) fn admit(&mut self, port: PortId, vc: usize, pkt: PktId, size: u64, marked_bytes: u64) {
        let now = self.queue.now().0;
        if let Some(th) = self.cfg.ecn_threshold_bytes {
            // RED marking draws from its own stream; step marking draws nothing.
            if marked_bytes > th
                && self.cfg.ecn_red.is_none_or(|red| self.rng_ecn.bernoulli(red.probability(marked_bytes, th)))
            {
                self.port_counters[port.idx()].ecn_marks += 1;
                self.stats.ecn_marks += 1;
                self.pool.get_mut(pkt).flags |= Packet::ECN;
            }
        }
        let ps = &mut self.ports[port.idx()];
        ps.note_queue_change(now);
        ps.q_bytes += size;
        ps.q_packets += 1;
        ps.max_q_bytes = ps.max_q_bytes.max(ps.q_bytes);
        self.queues.push(&mut self.pool, &self.pt, port, vc, pkt, size);
        self.kick(port);
    }

    /// Takes the next packet of `port`'s VC `vc` off its queue.
    pub(crate) fn dequeue(&mut self, port: PortId, vc: usize) -> PktId {
        let now = self.queue.now().0;
        let (pkt, size) = self.queues.pop(&self.pool, port, vc);
        let ps = &mut self.ports[port.idx()];
        ps.note_queue_change(now);
        ps.q_bytes -= size;
        ps.q_packets -= 1;
        pkt
    }
}
