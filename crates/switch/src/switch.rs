//! One switch node of a plan running a registry protocol: the node's [`SwitchProgram`] (the
//! simulator's, unchanged) fed with parsed packets and timer expiries on the switch clock, over
//! the data plane every node shares ([`crate::ports`]: a UDP socket per port, the one event
//! loop, egress faults).
//!
//! Delivery rule (the simulator's, `reducelab_net::protocol`): a packet addressed to this switch
//! (or to a host's first hop), or one the protocol intercepts ([`Header::intercepted`]), goes to
//! the program; anything else is forwarded by the routing table.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;

use reducelab_ina::{wire, Addr, Header, Out, SwAction, SwitchProgram, SwitchStats, Values, NIL};
use serde::Serialize;

use crate::plan::InaPlan;
pub use crate::ports::{thread_cpu_s, PortCounters, SwitchOptions};
use crate::ports::{Bound, Node, Ports, PortsReport};

/// The program's counters as the simulator reports them (`ina_switches.csv`).
#[derive(Clone, Debug, Default, Serialize, PartialEq)]
pub struct ProgramCounters {
    pub aggregated: u64,
    pub flushed: u64,
    pub stragglers: u64,
    pub collisions: u64,
    pub broadcasts: u64,
    pub broadcasts_without_descriptor: u64,
    pub restorations: u64,
    pub reclaimed: u64,
    pub peak_descriptors: u32,
    pub descriptors_left: u32,
    /// Of `descriptors_left`, those that only keep a finished block's result (a running switch
    /// is never told that a collective ended, `SwitchProgram::kept_results`).
    pub kept_results: u32,
}

impl ProgramCounters {
    pub fn of(s: &SwitchStats, in_use: u32, kept: u32) -> ProgramCounters {
        ProgramCounters {
            aggregated: s.aggregated,
            flushed: s.flushed,
            stragglers: s.stragglers,
            collisions: s.collisions,
            broadcasts: s.broadcasts,
            broadcasts_without_descriptor: s.broadcasts_without_descriptor,
            restorations: s.restorations,
            reclaimed: s.reclaimed,
            peak_descriptors: s.peak_descriptors,
            descriptors_left: in_use,
            kept_results: kept,
        }
    }
}

/// What a switch reports when it stops.
#[derive(Clone, Debug, Serialize)]
pub struct SwitchReport {
    #[serde(flatten)]
    pub ports: PortsReport,
    /// `None`: a plain forwarding switch (the protocol gives this node no program).
    pub program: Option<ProgramCounters>,
}

/// A bound switch of a registry protocol, ready to run.
pub type Switch<'p> = Bound<InaNode<'p>>;

/// The node's logic: the registry protocol's [`SwitchProgram`] with its timers.
pub struct InaNode<'p> {
    plan: &'p InaPlan,
    node: u32,
    program: Option<Box<dyn SwitchProgram>>,
    vals: Values,
    /// Program timers: (due ps, insertion sequence, token); the sequence makes equal due times
    /// fire in the order they were set, as in the simulator.
    timers: BinaryHeap<Reverse<(u64, u64, u64)>>,
    seq: u64,
    actions: Vec<SwAction>,
    /// A protocol's own payload of the frame being sent.
    payload: Vec<u8>,
}

impl<'p> Bound<InaNode<'p>> {
    /// Binds every port of switch `node`.
    pub fn bind(plan: &'p InaPlan, node: u32, opts: SwitchOptions) -> Result<Switch<'p>, String> {
        let program = plan.program(node)?;
        // The registry's frame has no ECN mark: no shaped ports.
        let ports = Ports::bind(&plan.fabric, &plan.endpoints, node, opts, None, None)?;
        let logic = InaNode {
            plan,
            node,
            program,
            vals: Values::new(plan.max_elems as usize),
            timers: BinaryHeap::new(),
            seq: 0,
            actions: Vec::new(),
            payload: Vec::new(),
        };
        Ok(Bound::new(ports, logic))
    }
}

impl Node for InaNode<'_> {
    type Report = SwitchReport;

    fn report(&self, ports: PortsReport) -> SwitchReport {
        let program =
            self.program.as_ref().map(|p| ProgramCounters::of(p.stats(), p.descriptors_in_use(), p.kept_results()));
        SwitchReport { ports, program }
    }

    fn fire(&mut self, io: &mut Ports, now: u64) {
        loop {
            match self.timers.peek() {
                Some(&Reverse((at, _, token))) if at <= now => {
                    self.timers.pop();
                    if let Some(p) = self.program.as_mut() {
                        p.on_timer(now, token, &mut self.vals, &mut self.actions);
                    }
                    self.carry_out(io);
                }
                _ => break,
            }
        }
    }

    fn next_due_ps(&self) -> Option<u64> {
        self.timers.peek().map(|&Reverse((at, _, _))| at)
    }

    fn receive(&mut self, io: &mut Ports, port: u16, bytes: &[u8], now: u64) {
        // Elements are decoded straight into a slab slot (no allocation, no second copy; the
        // parser writes every element of the slot, so a recycled one is not zeroed first); a
        // frame with more elements than the plan's largest packet is refused by the parser.
        // A protocol with a payload of its own decodes it itself (into this process's memory,
        // the header rewritten to name it); its frames take no slot.
        let hdr = match self.plan.frame().parse_header(bytes) {
            Ok((mut hdr, payload)) => match self.plan.payload_protocol(hdr.tenant) {
                Some((proto, coll)) => match proto.decode_payload(coll, &mut hdr, payload) {
                    Ok(()) => hdr,
                    Err(e) => {
                        if io.counters.malformed == 0 {
                            eprintln!(
                                "switch {}: a malformed {} payload (dropped, counted): {e}",
                                self.node,
                                proto.label()
                            );
                        }
                        io.counters.malformed += 1;
                        return;
                    }
                },
                None => {
                    let slot = self.vals.alloc_for_overwrite();
                    if wire::values_into(payload, self.vals.get_mut(slot)).is_err() {
                        self.vals.release(slot);
                        io.counters.malformed += 1;
                        return;
                    }
                    hdr.data = slot;
                    hdr
                }
            },
            Err(_) => {
                io.counters.malformed += 1;
                return;
            }
        };
        io.trace_packet("rx", port, &Traced(&hdr), None);
        let for_me = hdr.dst == Addr::FirstHop || self.plan.dst_node(hdr.dst) == Some(self.node);
        if for_me || (hdr.intercepted() && self.program.is_some()) {
            match self.program.as_mut() {
                Some(p) => p.on_packet(now, port, hdr, &mut self.vals, &mut self.actions),
                None => {
                    self.vals.release(hdr.data);
                    self.actions.push(SwAction::Consume);
                }
            }
            self.carry_out(io);
        } else {
            self.send(io, Out::Route, hdr);
        }
    }
}

impl InaNode<'_> {
    fn carry_out(&mut self, io: &mut Ports) {
        let mut acts = std::mem::take(&mut self.actions);
        for a in acts.drain(..) {
            match a {
                SwAction::Consume => {}
                SwAction::Forward { out, hdr } | SwAction::Emit { out, hdr } => self.send(io, out, hdr),
                SwAction::Timer { at, token } => {
                    self.seq += 1;
                    self.timers.push(Reverse((at, self.seq, token)));
                }
            }
        }
        self.actions = acts;
    }

    fn send(&mut self, io: &mut Ports, out: Out, hdr: Header) {
        let port = match out {
            Out::Port(p) if (p as usize) < io.len() => Some(p),
            Out::Port(_) => None,
            Out::Route => self.plan.dst_node(hdr.dst).and_then(|d| self.plan.route(self.node, d, hdr.id)),
        };
        // A protocol's own payload leaves this process's memory whatever becomes of the frame.
        let payload = self.plan.payload_protocol(hdr.tenant).map(|(proto, coll)| {
            self.payload.clear();
            proto.encode_payload(coll, &hdr, &mut self.payload)
        });
        let Some(port) = port else {
            io.counters.unroutable += 1;
            self.vals.release(hdr.data);
            return;
        };
        // The frame is encoded straight into the port's egress queue (no intermediate buffer
        // to copy from) and queued, dropped or held by its fault fate.
        let (plan, vals, own) = (self.plan, &self.vals, &self.payload);
        let sent = io.send(port, |buf| match payload {
            None => {
                let values = (hdr.data != NIL).then(|| vals.get(hdr.data));
                plan.frame().emit(&hdr, values, buf)
            }
            Some(Ok(())) => wire::emit_payload(&hdr, own, buf),
            Some(Err(e)) => Err(wire::WireError { field: "payload", reason: e }),
        });
        self.vals.release(hdr.data);
        match sent {
            Err(e) => io.unencodable(&hdr, &e),
            Ok(fate) => io.trace_packet("tx", port, &Traced(&hdr), Some(fate)),
        }
    }
}

/// A registry header in a trace line.
struct Traced<'a>(&'a Header);

impl std::fmt::Display for Traced<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let h = self.0;
        write!(f, "{:?} {:?} id {:#x} counter {} src {}", h.kind, h.dst, h.id, h.counter, h.src)
    }
}

/// Runs switch `node` of `plan` until `stop` (convenience for threads and tests).
pub fn run_switch(
    plan: &InaPlan,
    node: u32,
    opts: SwitchOptions,
    stop: Arc<AtomicBool>,
) -> Result<SwitchReport, String> {
    let mut s = Switch::bind(plan, node, opts)?;
    Ok(s.run(&stop))
}
