//! One switch node of a plan as a process-level event loop: a non-blocking UDP socket per port,
//! `ppoll` with the next timer as its timeout, every readable socket drained before polling
//! again, and the node's [`SwitchProgram`] (the simulator's, unchanged) fed with parsed packets
//! and timer expiries on a monotonic clock.
//!
//! Delivery rule (the simulator's, `reducelab_net::protocol`): a packet addressed to this switch
//! (or to a host's first hop), or one the protocol intercepts ([`Header::intercepted`]), goes to
//! the program; anything else is forwarded by the routing table.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::net::{SocketAddr, SocketAddrV4, UdpSocket};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use reducelab_ina::{wire, Addr, Header, Out, SwAction, SwitchProgram, SwitchStats, Values, NIL};
use serde::Serialize;

use crate::faults::{Fate, FaultPort, PortFaults};
use crate::plan::InaPlan;
use crate::udp;

/// How a switch is run.
#[derive(Clone, Debug, Default)]
pub struct SwitchOptions {
    /// `(port, rates)`: `None` applies to every port; a later entry for a port wins.
    pub faults: Vec<(Option<u16>, PortFaults)>,
    /// Seed of the fault generators.
    pub seed: u64,
    /// Crash injection: the process dies (without a report) after receiving this many packets.
    pub exit_after_rx: Option<u64>,
    /// Stop after this long (None: until `stop`).
    pub duration: Option<Duration>,
}

/// Counters of the switch's data plane (the program keeps its own, [`SwitchStats`]).
#[derive(Clone, Debug, Default, Serialize, PartialEq)]
pub struct PortCounters {
    pub rx_packets: u64,
    pub tx_packets: u64,
    pub rx_bytes: u64,
    pub tx_bytes: u64,
    /// Datagrams that are not a valid frame (dropped, counted).
    pub malformed: u64,
    /// Datagrams from an address that is not the peer of the port they arrived on.
    pub foreign: u64,
    /// Packets with no route to their destination.
    pub unroutable: u64,
    /// Headers the wire frame could not encode (a protocol bug; dropped, counted).
    pub unencodable: u64,
    pub fault_dropped: u64,
    pub fault_duplicated: u64,
    pub fault_held: u64,
    pub send_errors: u64,
}

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
    pub node: u32,
    pub ports: usize,
    pub uptime_s: f64,
    /// CPU time of the thread that ran the event loop (the switch's one core).
    pub cpu_s: f64,
    pub data_plane: PortCounters,
    /// `None`: a plain forwarding switch (the protocol gives this node no program).
    pub program: Option<ProgramCounters>,
}

struct Held {
    due: Instant,
    seq: u64,
    port: u16,
    bytes: Vec<u8>,
}
impl PartialEq for Held {
    fn eq(&self, o: &Self) -> bool {
        (self.due, self.seq) == (o.due, o.seq)
    }
}
impl Eq for Held {}
impl PartialOrd for Held {
    fn partial_cmp(&self, o: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(o))
    }
}
impl Ord for Held {
    fn cmp(&self, o: &Self) -> std::cmp::Ordering {
        (self.due, self.seq).cmp(&(o.due, o.seq))
    }
}

/// A bound switch, ready to run.
pub struct Switch<'p> {
    plan: &'p InaPlan,
    node: u32,
    socks: Vec<UdpSocket>,
    /// Frames waiting to be sent, per port.
    tx: Vec<udp::TxQueue>,
    peers: Vec<SocketAddrV4>,
    program: Option<Box<dyn SwitchProgram>>,
    vals: Values,
    /// Program timers: (due ps, insertion sequence, token); the sequence makes equal due times
    /// fire in the order they were set, as in the simulator.
    timers: BinaryHeap<Reverse<(u64, u64, u64)>>,
    held: BinaryHeap<Reverse<Held>>,
    seq: u64,
    faults: Vec<FaultPort>,
    epoch: Instant,
    /// The switch clock (ps since `epoch`) as read once per received batch: every packet of a
    /// `recvmmsg` gets the time the call returned, when all of them had arrived (one clock
    /// read per batch instead of one per packet, 3-4% of the loop's time before).
    now: u64,
    actions: Vec<SwAction>,
    /// A protocol's own payload of the frame being sent.
    payload: Vec<u8>,
    pub counters: PortCounters,
    opts: SwitchOptions,
    /// `REDUCELAB_SWITCH_TRACE=1`: one stderr line per packet in and out.
    trace: bool,
    /// Thread CPU time when `run` started.
    cpu0: f64,
}

/// Messages read from one socket (one `recvmmsg`) before the others get their turn; each is
/// a datagram or a GRO buffer of up to 64.
const RX_BATCH: usize = 32;

/// A port's egress queue is sent as soon as it holds this much (about one full GSO message of
/// 1 KiB frames), not only at the end of the turn: a busy turn would otherwise grow the queues
/// past what stays in cache, and page-fault fresh memory as they grow. Measured (2026-11-24,
/// load 13, `bench --bytes 4194304`, medians of 12 runs): 1.40 M (4 hosts) and 1.74 M (8)
/// packets/s with no bound, 1.53-1.68 M and 1.85-1.92 M with 32-128 KiB, 1.54 M and 1.69 M
/// with 16 KiB (more system calls).
const TX_FLUSH_BYTES: usize = 64 << 10;

impl<'p> Switch<'p> {
    /// Binds every port of switch `node`.
    pub fn bind(plan: &'p InaPlan, node: u32, opts: SwitchOptions) -> Result<Switch<'p>, String> {
        plan.check_switch(node)?;
        let program = plan.program(node)?;
        let ports = &plan.fabric.nodes[node as usize].ports;
        let mut socks = Vec::new();
        let mut peers = Vec::new();
        let mut faults = Vec::new();
        for (p, &(peer, peer_port)) in ports.iter().enumerate() {
            socks.push(udp::bind(plan.endpoints.of(node, p as u16))?);
            peers.push(plan.endpoints.of(peer, peer_port));
            let mut rates = PortFaults::default();
            for &(port, r) in &opts.faults {
                if port.is_none() || port == Some(p as u16) {
                    rates = r;
                }
            }
            faults.push(FaultPort::new(rates, opts.seed, node, p as u16));
        }
        for &(port, _) in &opts.faults {
            if let Some(q) = port.filter(|&q| q as usize >= ports.len()) {
                return Err(format!("--fault port={q}: switch {node} has {} ports", ports.len()));
            }
        }
        Ok(Switch {
            plan,
            node,
            tx: socks.iter().map(|_| udp::TxQueue::default()).collect(),
            socks,
            peers,
            program,
            vals: Values::new(plan.max_elems as usize),
            timers: BinaryHeap::new(),
            held: BinaryHeap::new(),
            seq: 0,
            faults,
            epoch: Instant::now(),
            now: 0,
            actions: Vec::new(),
            payload: Vec::new(),
            counters: PortCounters::default(),
            opts,
            cpu0: 0.0,
            trace: std::env::var_os("REDUCELAB_SWITCH_TRACE").is_some_and(|v| v == "1"),
        })
    }

    fn now_ps(&self) -> u64 {
        self.epoch.elapsed().as_nanos() as u64 * 1000
    }

    /// Runs until `stop` is set or the duration ends (or the crash injection fires: then the
    /// process exits at once with status 3, as a killed switch would vanish).
    pub fn run(&mut self, stop: &AtomicBool) -> SwitchReport {
        let mut rx = udp::RxBatch::new(RX_BATCH);
        let mut ready = vec![true; self.socks.len()];
        self.cpu0 = thread_cpu_s();
        let end = self.opts.duration.map(|d| self.epoch + d);
        let mut idle = false;
        let mut busy_turns = 0u32;
        loop {
            if stop.load(Ordering::Relaxed) || end.is_some_and(|e| Instant::now() >= e) {
                break;
            }
            self.fire_timers();
            self.flush_held();
            self.flush_tx();
            if idle {
                // Nothing was waiting: sleep until a socket is readable or the next deadline,
                // then read only the sockets ppoll found readable.
                let mut wait = Duration::from_millis(20);
                if let Some(Reverse((at, _, _))) = self.timers.peek() {
                    wait = wait.min(Duration::from_nanos(at.saturating_sub(self.now_ps()) / 1000));
                }
                if let Some(Reverse(h)) = self.held.peek() {
                    wait = wait.min(h.due.saturating_duration_since(Instant::now()));
                }
                udp::poll_readable(&self.socks, wait, &mut ready);
            } else {
                // Busy: the sockets that had datagrams are read again, and every
                // `udp::BUSY_POLL_TURNS` turns one ppoll that does not wait looks at the others too,
                // so a port that went quiet for one turn is not starved while the rest stay busy
                // (a retransmission storm on one port kept another's packets unread, and a job
                // stalled for good).
                busy_turns += 1;
                if busy_turns % udp::BUSY_POLL_TURNS == 0 && ready.iter().any(|r| !r) {
                    udp::poll_readable(&self.socks, Duration::ZERO, &mut ready);
                }
            }
            // While busy, the sockets that had datagrams last turn are read again (one system
            // call each); the others wait for the next ppoll, which is level-triggered.
            idle = true;
            for (p, is_ready) in ready.iter_mut().enumerate() {
                if !*is_ready {
                    continue;
                }
                let n = rx.recv(&self.socks[p]);
                *is_ready = n > 0;
                if n > 0 {
                    idle = false;
                    self.now = self.now_ps();
                }
                for i in 0..n {
                    let (from, datagrams) = rx.get(i);
                    for bytes in datagrams {
                        self.receive(p as u16, SocketAddr::V4(from), bytes);
                    }
                }
            }
            // What this turn's batches caused leaves at the top of the next turn (after the
            // timers that came due), one `sendmmsg` per port for all of them.
        }
        self.flush_tx();
        self.report()
    }

    pub fn report(&self) -> SwitchReport {
        SwitchReport {
            node: self.node,
            ports: self.socks.len(),
            uptime_s: self.epoch.elapsed().as_secs_f64(),
            cpu_s: thread_cpu_s() - self.cpu0,
            data_plane: self.counters.clone(),
            program: self
                .program
                .as_ref()
                .map(|p| ProgramCounters::of(p.stats(), p.descriptors_in_use(), p.kept_results())),
        }
    }

    fn fire_timers(&mut self) {
        let now = self.now_ps();
        self.now = now;
        loop {
            match self.timers.peek() {
                Some(&Reverse((at, _, token))) if at <= now => {
                    self.timers.pop();
                    if let Some(p) = self.program.as_mut() {
                        p.on_timer(now, token, &mut self.vals, &mut self.actions);
                    }
                    self.carry_out();
                }
                _ => break,
            }
        }
    }

    fn flush_held(&mut self) {
        let now = Instant::now();
        while self.held.peek().is_some_and(|Reverse(h)| h.due <= now) {
            let Reverse(h) = self.held.pop().expect("peeked");
            self.transmit(h.port, &h.bytes);
        }
    }

    /// One datagram from port `port`, received at the switch clock's `self.now`.
    pub fn receive(&mut self, port: u16, from: SocketAddr, bytes: &[u8]) {
        self.counters.rx_packets += 1;
        self.counters.rx_bytes += bytes.len() as u64;
        if self.opts.exit_after_rx.is_some_and(|n| self.counters.rx_packets >= n) {
            eprintln!("switch {}: crash injected after {} packets", self.node, self.counters.rx_packets);
            std::process::exit(3);
        }
        if from != SocketAddr::V4(self.peers[port as usize]) {
            self.counters.foreign += 1;
            return;
        }
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
                        if self.counters.malformed == 0 {
                            eprintln!(
                                "switch {}: a malformed {} payload (dropped, counted): {e}",
                                self.node,
                                proto.label()
                            );
                        }
                        self.counters.malformed += 1;
                        return;
                    }
                },
                None => {
                    let slot = self.vals.alloc_for_overwrite();
                    if wire::values_into(payload, self.vals.get_mut(slot)).is_err() {
                        self.vals.release(slot);
                        self.counters.malformed += 1;
                        return;
                    }
                    hdr.data = slot;
                    hdr
                }
            },
            Err(_) => {
                self.counters.malformed += 1;
                return;
            }
        };
        if self.trace {
            eprintln!(
                "{:>12} ns switch {} rx port {port}: {:?} {:?} id {:#x} counter {} src {}",
                self.now_ps() / 1000,
                self.node,
                hdr.kind,
                hdr.dst,
                hdr.id,
                hdr.counter,
                hdr.src
            );
        }
        let for_me = hdr.dst == Addr::FirstHop || self.plan.dst_node(hdr.dst) == Some(self.node);
        if for_me || (hdr.intercepted() && self.program.is_some()) {
            let now = self.now;
            match self.program.as_mut() {
                Some(p) => p.on_packet(now, port, hdr, &mut self.vals, &mut self.actions),
                None => {
                    self.vals.release(hdr.data);
                    self.actions.push(SwAction::Consume);
                }
            }
            self.carry_out();
        } else {
            self.send(Out::Route, hdr);
        }
    }

    fn carry_out(&mut self) {
        let mut acts = std::mem::take(&mut self.actions);
        for a in acts.drain(..) {
            match a {
                SwAction::Consume => {}
                SwAction::Forward { out, hdr } | SwAction::Emit { out, hdr } => self.send(out, hdr),
                SwAction::Timer { at, token } => {
                    self.seq += 1;
                    self.timers.push(Reverse((at, self.seq, token)));
                }
            }
        }
        self.actions = acts;
    }

    fn send(&mut self, out: Out, hdr: Header) {
        let port = match out {
            Out::Port(p) if (p as usize) < self.socks.len() => Some(p),
            Out::Port(_) => None,
            Out::Route => self.plan.dst_node(hdr.dst).and_then(|d| self.plan.route(self.node, d, hdr.id)),
        };
        // A protocol's own payload leaves this process's memory whatever becomes of the frame.
        let payload = self.plan.payload_protocol(hdr.tenant).map(|(proto, coll)| {
            self.payload.clear();
            proto.encode_payload(coll, &hdr, &mut self.payload)
        });
        let Some(port) = port else {
            self.counters.unroutable += 1;
            self.vals.release(hdr.data);
            return;
        };
        // The frame is encoded straight into the port's egress queue (no intermediate buffer
        // to copy from) and queued, dropped or moved to the held queue by its fault fate.
        let q = &mut self.tx[port as usize];
        let ok = match payload {
            None => {
                let values = (hdr.data != NIL).then(|| self.vals.get(hdr.data));
                self.plan.frame().emit(&hdr, values, q.open())
            }
            Some(Ok(())) => wire::emit_payload(&hdr, &self.payload, q.open()),
            Some(Err(e)) => Err(wire::WireError { field: "payload", reason: e }),
        };
        self.vals.release(hdr.data);
        if let Err(e) = ok {
            self.tx[port as usize].discard();
            if self.counters.unencodable == 0 {
                eprintln!("switch {}: cannot encode {hdr:?}: {e}", self.node);
            }
            self.counters.unencodable += 1;
            return;
        }
        let fate = self.faults[port as usize].fate();
        if self.trace {
            eprintln!(
                "{:>12} ns switch {} tx port {port}: {:?} {:?} id {:#x} counter {} src {} fate {fate:?}",
                self.now_ps() / 1000,
                self.node,
                hdr.kind,
                hdr.dst,
                hdr.id,
                hdr.counter,
                hdr.src
            );
        }
        let q = &mut self.tx[port as usize];
        match fate {
            Fate::Drop => {
                q.discard();
                self.counters.fault_dropped += 1;
            }
            Fate::Send { copies, hold } => {
                if copies > 1 {
                    self.counters.fault_duplicated += 1;
                }
                if hold.is_zero() {
                    q.commit(copies as usize);
                    self.flush_if_full(port as usize);
                } else {
                    let bytes = q.pending().to_vec();
                    q.discard();
                    for _ in 0..copies {
                        self.counters.fault_held += 1;
                        self.seq += 1;
                        self.held.push(Reverse(Held {
                            due: Instant::now() + hold,
                            seq: self.seq,
                            port,
                            bytes: bytes.clone(),
                        }));
                    }
                }
            }
        }
    }

    /// Queues a frame on `port` (sent by the next [`Self::flush_tx`], in queue order).
    fn transmit(&mut self, port: u16, bytes: &[u8]) {
        self.tx[port as usize].push(bytes);
        self.flush_if_full(port as usize);
    }

    /// Sends every queued frame, one `sendmmsg` per port.
    pub fn flush_tx(&mut self) {
        for p in 0..self.tx.len() {
            if !self.tx[p].is_empty() {
                self.flush_port(p);
            }
        }
    }

    fn flush_port(&mut self, p: usize) {
        let (sent, bytes, failed) = self.tx[p].flush(&self.socks[p], self.peers[p]);
        self.counters.tx_packets += sent;
        self.counters.tx_bytes += bytes;
        self.counters.send_errors += failed;
    }

    /// Sends a port's queue early once it holds [`TX_FLUSH_BYTES`].
    fn flush_if_full(&mut self, p: usize) {
        if self.tx[p].bytes() >= TX_FLUSH_BYTES {
            self.flush_port(p);
        }
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

/// CPU seconds used by the calling thread.
pub fn thread_cpu_s() -> f64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: a valid clock id and a pointer to a timespec.
    unsafe {
        libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts);
    }
    ts.tv_sec as f64 + ts.tv_nsec as f64 * 1e-9
}
