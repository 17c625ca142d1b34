//! Input-buffered routers: per-VC input FIFOs, a crossbar allocator and per-VC output buffers,
//! as SST merlin's `hr_router` (`network.router = "input_buffered"`).
//!
//! With the default output-queued router none of this state exists (the vectors are empty)
//! and nothing here runs.
//!
//! The model (per forwarding node):
//! - **Inputs.** Every ingress port has one FIFO per VC of `input_buffer_bytes`; that is the
//!   buffer the upstream's credits count. A packet a switch program intercepts is processed
//!   on arrival; if the program forwards it ([`crate::Network::app_forward`]) it joins the
//!   FIFO of the input it came in on, whose buffer it still holds (as SST's Canary modifies a
//!   packet in its input port). Packets a program creates ([`crate::Network::app_emit`]) enter
//!   one more input of the node, the *program input* (one FIFO, VC 0), unbounded like the
//!   program's own memory. A crossing does not hold the program input: several of its heads
//!   may cross at once to different outputs, as a switch replicates multicast copies in its
//!   crossbar. (Held for a packet time like a port, it would carry one link's bandwidth for
//!   all the packets a program makes: a root sending every aggregate to 8 children would
//!   reach 1/8 of line rate; measured, 12 instead of 91 Gb/s for one static tree.) (A single program FIFO for forwarded packets too would let a
//!   down-going packet holding a link's credits wait behind an up-going one: a credit cycle,
//!   which the tests found as a deadlock.)
//! - **Routing at the head.** A packet's output port (and next VC) is chosen when it reaches
//!   the head of its input FIFO, as merlin's `PortControl` calls `route_packet` for the new
//!   `vc_heads` entry; a program packet sent out of a given port keeps that port.
//! - **Head-of-line blocking.** Only the head of an input VC can cross; the packets behind it
//!   wait even if their own output is idle.
//! - **Crossbar allocation.** A head crosses when its input is free, its output's crossbar port
//!   is free and its output VC buffer has room (`output_buffer_bytes`, merlin's
//!   `xbar_in_credits`). The crossing occupies the input and the output for `size / (bw ·
//!   crossbar_speedup)` (bw: the node's fastest link), and the packet is in the output buffer
//!   at once (as merlin moves the event to `output_buf` when the arbiter grants it), so an
//!   unloaded switch adds no latency. `arbitration = "input_round_robin"`: one pass over the
//!   inputs from the one after the input served last, each input offering its VC heads
//!   round-robin (merlin's `xbar_arb_rr`); `"fifo"`: repeatedly the eligible head that
//!   arrived at the node earliest (oldest first), ties from the round-robin pointer; `"lru"`:
//!   one walk down a per-node priority list of (input, VC), granted entries moved to its end
//!   (merlin's default `xbar_arb_lru`).
//! - **Credits.** The upstream's credits come back one link latency after the packet leaves
//!   the input buffer through the crossbar (merlin's `PortControl::recv`); the output buffer's
//!   room frees when the packet starts on the wire, where the port's own arbitration (age,
//!   credits downstream) runs as in the output-queued router.
//! - **Occupancy for adaptive routing** (`adaptive`, `canary`): the output buffer's bytes plus
//!   the bytes of the input heads already routed to that output and waiting for the crossbar
//!   (`PortState::xbar_wait_bytes`). Canary's threshold is a share of `output_buffer_bytes`.
//!
//! Events: at most one pending allocation per node (`Event::Xbar`); a later one superseded by
//! an earlier request is ignored when it fires. Nothing allocates per packet (intrusive FIFOs
//! through the packet pool; the per-packet output table grows with the pool only).

use crate::config::{Arbitration, RouterKind};
use crate::ids::{PktId, PortId};
use crate::network::{Event, Network};
use crate::ports::PortTable;
use reducelab_des::{SimDuration, SimTime};
use reducelab_topo::NodeId;

/// One input VC FIFO.
#[derive(Clone, Copy, Default)]
struct InFifo {
    head: Option<PktId>,
    tail: Option<PktId>,
    /// The output chosen for `head` (routed, waiting for the crossbar).
    head_out: Option<PortId>,
}

pub(crate) struct InputBuffers {
    pub on: bool,
    nvc: usize,
    /// Global port count: input `i < np` is ingress port `i`; `np + n` is node `n`'s program input.
    np: usize,
    output_buffer_bytes: u64,
    fifo: Vec<InFifo>,
    /// Per packet id: the output a program packet must leave by (`None`: routed at the head).
    fixed_out: Vec<Option<PortId>>,
    /// Per input: its crossbar port is busy until then.
    in_busy: Vec<u64>,
    /// Per output port: its crossbar port is busy until then.
    out_busy: Vec<u64>,
    /// Per input: the VC offered first next time.
    rr_vc: Vec<u8>,
    /// Per node: inputs holding packets (bit = local port; the node's port count = program input).
    mask: Vec<u128>,
    /// Per node: the input looked at first next time (after the one served last).
    rr_in: Vec<u8>,
    /// Per node: time of its pending allocation (`u64::MAX`: none).
    at: Vec<u64>,
    /// `Arbitration::Lru` only: per node, its (local input, VC) entries (`li << 8 | vc`) in
    /// priority order, `lru[lru_off[n]..lru_off[n + 1]]`, and a scratch list for one pass.
    lru: Vec<u16>,
    lru_off: Vec<u32>,
    lru_scratch: Vec<u16>,
    /// Per node: crossbar bandwidth in bits per second.
    xbar_bps: Vec<u64>,
    /// Packets in input buffers (for stall reports).
    pub packets: u64,
}

impl InputBuffers {
    /// Empty (output-queued) or sized for `pt` with `nvc` VCs.
    pub fn new(kind: RouterKind, lru_on: bool, pt: &PortTable, nodes: usize, nvc: usize) -> InputBuffers {
        let RouterKind::InputBuffered(ib) = kind else {
            return InputBuffers {
                on: false,
                nvc,
                np: 0,
                output_buffer_bytes: 0,
                fifo: Vec::new(),
                fixed_out: Vec::new(),
                in_busy: Vec::new(),
                out_busy: Vec::new(),
                rr_vc: Vec::new(),
                mask: Vec::new(),
                rr_in: Vec::new(),
                at: Vec::new(),
                lru: Vec::new(),
                lru_off: Vec::new(),
                lru_scratch: Vec::new(),
                xbar_bps: Vec::new(),
                packets: 0,
            };
        };
        let (mut lru, mut lru_off) = (Vec::new(), Vec::new());
        if lru_on {
            // Initial priority: by input, then VC (merlin's `setPorts` order).
            lru_off.push(0u32);
            for n in 0..nodes {
                let slots = pt.count(NodeId(n as u32)) as usize + 1;
                for li in 0..slots {
                    for v in 0..nvc {
                        lru.push(((li as u16) << 8) | v as u16);
                    }
                }
                lru_off.push(lru.len() as u32);
            }
        }
        let longest = lru_off.windows(2).map(|w| (w[1] - w[0]) as usize).max().unwrap_or(0);
        let np = pt.len();
        let inputs = np + nodes;
        let xbar_bps = (0..nodes)
            .map(|n| {
                let max = pt.of_node(NodeId(n as u32)).map(|g| pt.bps(g)).max().unwrap_or(1);
                ((max as f64 * ib.crossbar_speedup).round() as u64).max(1)
            })
            .collect();
        InputBuffers {
            on: true,
            nvc,
            np,
            output_buffer_bytes: ib.output_buffer_bytes,
            fifo: vec![InFifo::default(); inputs * nvc],
            fixed_out: Vec::new(),
            in_busy: vec![0; inputs],
            out_busy: vec![0; np],
            rr_vc: vec![0; inputs],
            mask: vec![0; nodes],
            rr_in: vec![0; nodes],
            at: vec![u64::MAX; nodes],
            lru,
            lru_off,
            lru_scratch: vec![0; longest],
            xbar_bps,
            packets: 0,
        }
    }

    #[inline]
    fn set_fixed(&mut self, pkt: PktId, out: Option<PortId>) {
        let i = pkt.idx();
        if i >= self.fixed_out.len() {
            self.fixed_out.resize((i + 1).next_power_of_two(), None);
        }
        self.fixed_out[i] = out;
    }
}

impl Network {
    /// Input index and mask bit of node `node`'s local input `li` (its port count = program input).
    #[inline]
    /// Input `li` of `node` if it has a packet waiting and is not crossing at `now`.
    fn ib_free_input(&self, node: NodeId, li: usize, now: u64) -> Option<usize> {
        if self.ib.mask[node.idx()] & (1u128 << li) == 0 {
            return None;
        }
        let i = self.ib_input(node, li);
        (self.ib.in_busy[i] <= now).then_some(i)
    }

    fn ib_input(&self, node: NodeId, li: usize) -> usize {
        let n = self.pt.count(node) as usize;
        if li == n {
            self.ib.np + node.idx()
        } else {
            self.pt.first(node) as usize + li
        }
    }

    /// A packet that arrived on ingress port `in_port` joins its input VC FIFO.
    pub(crate) fn ib_arrive(&mut self, node: NodeId, in_port: PortId, pkt: PktId) {
        let now = self.queue.now().0;
        let p = self.pool.get_mut(pkt);
        p.arrive_ps = now; // arrived at this node now (oldest-first arbitration)
        let (vc, li) = (p.in_vc as usize, self.pt.local(in_port) as usize);
        self.ib.set_fixed(pkt, None);
        self.ib_enter(node, in_port.idx(), li, vc, pkt);
    }

    /// A packet a switch program sends from `node`: one it forwards re-enters the input it came
    /// in on (it still holds that input buffer), one it created joins the program input. With
    /// `fixed` it leaves by that port (on the VC already set), otherwise it is routed at the head.
    pub(crate) fn ib_from_program(&mut self, node: NodeId, pkt: PktId, fixed: Option<PortId>) {
        let now = self.queue.now().0;
        let (vc, in_port) = {
            let p = self.pool.get_mut(pkt);
            p.arrive_ps = now; // entered the crossbar's queues now (oldest-first arbitration)
            (p.in_vc as usize, p.in_port)
        };
        self.ib.set_fixed(pkt, fixed);
        match in_port {
            Some(ip) => self.ib_enter(node, ip.idx(), self.pt.local(ip) as usize, vc, pkt),
            None => self.ib_enter(node, self.ib.np + node.idx(), self.pt.count(node) as usize, vc, pkt),
        }
    }

    fn ib_enter(&mut self, node: NodeId, input: usize, li: usize, vc: usize, pkt: PktId) {
        let f = input * self.ib.nvc + vc;
        self.pool.get_mut(pkt).next = None;
        self.ib.packets += 1;
        let fifo = &mut self.ib.fifo[f];
        match fifo.tail.replace(pkt) {
            Some(t) => self.pool.get_mut(t).next = Some(pkt),
            None => {
                fifo.head = Some(pkt);
                self.ib.mask[node.idx()] |= 1u128 << li;
                self.ib_route_head(node, input, vc);
                let now = self.queue.now().0;
                self.ib_kick(node, now);
            }
        }
    }

    /// Chooses the output of input `input`'s VC `vc` head (dropping heads with no route).
    fn ib_route_head(&mut self, node: NodeId, input: usize, vc: usize) {
        let f = input * self.ib.nvc + vc;
        while let Some(pkt) = self.ib.fifo[f].head {
            let p = *self.pool.get(pkt);
            let chosen = match self.ib.fixed_out[pkt.idx()] {
                Some(g) => self.faults.is_link_up(self.pt.link(g)).then_some((g, p.vc)),
                None => self.route(node, &p),
            };
            if let Some((out, out_vc)) = chosen {
                self.pool.get_mut(pkt).vc = out_vc;
                self.ib.fifo[f].head_out = Some(out);
                self.ports[out.idx()].xbar_wait_bytes += p.wire_bytes as u64;
                return;
            }
            self.ib_pop(node, input, vc);
            self.stats.drops_no_route += 1;
            self.lose(pkt);
        }
    }

    /// Takes the head off input `input`'s VC `vc` (its `head_out` already cleared).
    fn ib_pop(&mut self, node: NodeId, input: usize, vc: usize) -> PktId {
        let nvc = self.ib.nvc;
        let f = input * nvc + vc;
        let pkt = self.ib.fifo[f].head.expect("pop from an empty input");
        let next = self.pool.get(pkt).next;
        self.ib.fifo[f].head = next;
        self.ib.fifo[f].head_out = None;
        self.ib.packets -= 1;
        if next.is_none() {
            self.ib.fifo[f].tail = None;
            if self.ib.fifo[input * nvc..(input + 1) * nvc].iter().all(|q| q.head.is_none()) {
                let li = if input >= self.ib.np {
                    self.pt.count(node) as usize
                } else {
                    self.pt.local(PortId::from_idx(input)) as usize
                };
                self.ib.mask[node.idx()] &= !(1u128 << li);
            }
        }
        pkt
    }

    /// Asks for an allocation at `node` at `t` (unless one is due by then).
    #[inline]
    pub(crate) fn ib_kick(&mut self, node: NodeId, t: u64) {
        if t < self.ib.at[node.idx()] {
            self.ib.at[node.idx()] = t;
            self.queue.push(SimTime(t), Event::Xbar { node });
        }
    }

    /// Output `port` sent a packet: its output buffer has room again.
    #[inline]
    pub(crate) fn ib_output_freed(&mut self, port: PortId) {
        let node = self.pt.node(port);
        if self.ib.mask[node.idx()] != 0 {
            let now = self.queue.now().0;
            self.ib_kick(node, now);
        }
    }

    /// Can input `input`'s VC `vc` head cross now?
    #[inline]
    fn ib_eligible(&self, input: usize, vc: usize, now: u64) -> bool {
        let q = &self.ib.fifo[input * self.ib.nvc + vc];
        let (Some(pkt), Some(out)) = (q.head, q.head_out) else { return false };
        let p = self.pool.get(pkt);
        self.ib.out_busy[out.idx()] <= now
            && self.queues.bytes(out, p.vc as usize) + p.wire_bytes as u64 <= self.ib.output_buffer_bytes
            && self.faults.is_link_up(self.pt.link(out))
    }

    /// The crossbar allocation of `node` (its `Event::Xbar`).
    pub(crate) fn ib_allocate(&mut self, node: NodeId) {
        let now = self.queue.now().0;
        if self.ib.at[node.idx()] != now {
            return; // superseded by an earlier allocation
        }
        // `at` stays `now` while this runs: requests for now are covered by this pass.
        let slots = self.pt.count(node) as usize + 1;
        let nvc = self.ib.nvc;
        let start = self.ib.rr_in[node.idx()] as usize;
        match self.cfg.arbitration {
            Arbitration::InputRoundRobin => {
                // One pass over the inputs; each offers its VC heads round-robin.
                for k in 0..slots {
                    let li = (start + k) % slots;
                    let Some(i) = self.ib_free_input(node, li, now) else { continue };
                    // The program input is not held by a crossing: it offers heads until one
                    // cannot cross.
                    let program = li == slots - 1;
                    'offer: loop {
                        let first = self.ib.rr_vc[i] as usize;
                        for kv in 0..nvc {
                            let v = (first + kv) % nvc;
                            if self.ib_eligible(i, v, now) {
                                self.ib.rr_vc[i] = ((v + 1) % nvc) as u8;
                                self.ib.rr_in[node.idx()] = ((li + 1) % slots) as u8;
                                self.ib_cross(node, i, v);
                                if program {
                                    continue 'offer;
                                }
                                break 'offer;
                            }
                        }
                        break;
                    }
                }
            }
            Arbitration::Lru => {
                // One walk down the priority list: a granted (input, VC) moves to the end, the
                // first granted last; the others keep their order at the front.
                let (lo, hi) = (self.ib.lru_off[node.idx()] as usize, self.ib.lru_off[node.idx() + 1] as usize);
                let mut scratch = std::mem::take(&mut self.ib.lru_scratch);
                let (mut front, mut back) = (0, hi - lo);
                for k in lo..hi {
                    let e = self.ib.lru[k];
                    let (li, v) = ((e >> 8) as usize, (e & 0xff) as usize);
                    let granted = match self.ib_free_input(node, li, now) {
                        Some(i) if self.ib_eligible(i, v, now) => {
                            self.ib_cross(node, i, v);
                            if li == slots - 1 {
                                // The program input is not held by a crossing.
                                while self.ib_eligible(i, v, now) {
                                    self.ib_cross(node, i, v);
                                }
                            }
                            true
                        }
                        _ => false,
                    };
                    if granted {
                        back -= 1;
                        scratch[back] = e;
                    } else {
                        scratch[front] = e;
                        front += 1;
                    }
                }
                self.ib.lru[lo..hi].copy_from_slice(&scratch[..hi - lo]);
                self.ib.lru_scratch = scratch;
            }
            Arbitration::Fifo => loop {
                // Oldest first: the eligible head that arrived at this node earliest.
                let mut best: Option<(u64, usize, usize, usize)> = None;
                for k in 0..slots {
                    let li = (start + k) % slots;
                    let Some(i) = self.ib_free_input(node, li, now) else { continue };
                    for v in 0..nvc {
                        if self.ib_eligible(i, v, now) {
                            let t = self.pool.get(self.ib.fifo[i * nvc + v].head.expect("eligible")).arrive_ps;
                            if best.is_none_or(|b| t < b.0) {
                                best = Some((t, li, i, v));
                            }
                        }
                    }
                }
                let Some((_, li, i, v)) = best else { break };
                self.ib.rr_in[node.idx()] = ((li + 1) % slots) as u8;
                self.ib_cross(node, i, v);
            },
        }
        // Heads that wait only for a busy crossbar port are looked at again when it frees;
        // those that wait for output buffer room, when their output sends (`ib_output_freed`).
        let mut next = u64::MAX;
        for li in 0..slots {
            if self.ib.mask[node.idx()] & (1u128 << li) == 0 {
                continue;
            }
            let i = self.ib_input(node, li);
            for v in 0..nvc {
                let q = self.ib.fifo[i * nvc + v];
                let (Some(pkt), Some(out)) = (q.head, q.head_out) else { continue };
                let p = self.pool.get(pkt);
                if self.queues.bytes(out, p.vc as usize) + p.wire_bytes as u64 <= self.ib.output_buffer_bytes {
                    let t = self.ib.in_busy[i].max(self.ib.out_busy[out.idx()]);
                    if t > now {
                        next = next.min(t);
                    }
                }
            }
        }
        self.ib.at[node.idx()] = u64::MAX;
        if next != u64::MAX {
            self.ib_kick(node, next);
        }
    }

    /// Input `input`'s VC `vc` head crosses to its output: both crossbar ports are busy for
    /// its crossbar time, its input buffer's credit goes back upstream, it joins the output
    /// buffer, and the next head is routed.
    fn ib_cross(&mut self, node: NodeId, input: usize, vc: usize) {
        let now = self.queue.now().0;
        let out = self.ib.fifo[input * self.ib.nvc + vc].head_out.expect("routed head");
        let pkt = self.ib_pop(node, input, vc);
        let p = *self.pool.get(pkt);
        let size = p.wire_bytes;
        self.ports[out.idx()].xbar_wait_bytes -= size as u64;
        let end = now + SimDuration::serialization(size as u64, self.ib.xbar_bps[node.idx()]).0;
        if input < self.ib.np {
            self.ib.in_busy[input] = end; // the program input is not one link wide (below)
        }
        self.ib.out_busy[out.idx()] = end;
        if let Some(ip) = p.in_port {
            // It left the input buffer: the credit goes back now, not when it leaves the node.
            self.pool.get_mut(pkt).in_port = None;
            let up = self.pt.peer(ip);
            let lat = self.pt.latency_ps(ip);
            self.return_credit(up, p.in_vc, size, now + lat);
        }
        self.enqueue(out, pkt);
        self.ib_route_head(node, input, vc);
    }

    /// After a failure: a failed node loses what its inputs hold; elsewhere heads routed to a
    /// dead link choose again.
    pub(crate) fn ib_after_fault(&mut self) {
        let nvc = self.ib.nvc;
        for n in 0..self.ib.mask.len() {
            let node = NodeId(n as u32);
            if self.ib.mask[n] == 0 {
                continue;
            }
            let up = self.faults.is_node_up(node);
            let slots = self.pt.count(node) as usize + 1;
            for li in 0..slots {
                if self.ib.mask[n] & (1u128 << li) == 0 {
                    continue;
                }
                let i = self.ib_input(node, li);
                for v in 0..nvc {
                    let f = i * nvc + v;
                    let Some(out) = self.ib.fifo[f].head_out else { continue };
                    if up && self.faults.is_link_up(self.pt.link(out)) {
                        continue;
                    }
                    let head = self.ib.fifo[f].head.expect("routed head");
                    self.ports[out.idx()].xbar_wait_bytes -= self.pool.get(head).wire_bytes as u64;
                    self.ib.fifo[f].head_out = None;
                    if up {
                        self.ib_route_head(node, i, v);
                    } else {
                        while self.ib.fifo[f].head.is_some() {
                            let pkt = self.ib_pop(node, i, v);
                            self.stats.drops_failure += 1;
                            self.lose(pkt);
                        }
                    }
                }
            }
            if up {
                let now = self.queue.now().0;
                self.ib_kick(node, now);
            }
        }
    }
}

impl Network {
    /// After a run in which every packet left the network: checks that no packet is held
    /// anywhere (pool, input and output buffers, crossbar reservations) and that every port's
    /// credits, counting returns still in flight, add up to the buffer they stand for (with
    /// PFC: that every ingress holds nothing and no VC is paused). `Err`
    /// names the first violation. (For tests of the flow control; O(ports · VCs).)
    pub fn check_quiescent(&self) -> Result<(), String> {
        self.pfc_check_quiescent()?;
        if self.pool.live != 0 {
            return Err(format!("{} packets still allocated", self.pool.live));
        }
        if self.ib.packets != 0 {
            return Err(format!("{} packets in input buffers", self.ib.packets));
        }
        let full = match self.cfg.router {
            RouterKind::InputBuffered(ib) => ib.input_buffer_bytes,
            RouterKind::OutputQueued => self.cfg.buffer_bytes,
        };
        for g in self.pt.all() {
            let ps = &self.ports[g.idx()];
            if ps.q_bytes != 0 || ps.q_packets != 0 || ps.xbar_wait_bytes != 0 {
                return Err(format!(
                    "port {g:?}: {} bytes queued, {} waiting for the crossbar",
                    ps.q_bytes, ps.xbar_wait_bytes
                ));
            }
            if self.cfg.flow_control != crate::FlowControl::Credit {
                continue;
            }
            for vc in 0..self.nvc {
                let total = self.credits.available(g, vc) + self.credits.in_flight(g, vc);
                if total != full as i64 {
                    return Err(format!("port {g:?} VC {vc}: credits {total} != buffer {full}"));
                }
            }
        }
        Ok(())
    }
}
