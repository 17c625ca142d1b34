//! The data plane every switch node of the software switch shares, whatever its protocol
//! family: a non-blocking UDP socket per port, `recvmmsg`/`sendmmsg` with GSO/GRO through
//! [`crate::udp`], `ppoll` when idle with the next deadline as its timeout, and on egress the
//! faults of [`crate::faults`] (loss, duplication, delay, reordering) and, where asked, a
//! shaper that queues at a given rate and marks ECN.
//!
//! A node's protocol logic is a [`Node`]: it is handed each datagram that came from the peer
//! of the port it arrived on, with the switch clock, and sends frames with [`Ports::send`],
//! which encodes them straight into the port's egress queue. [`Ports::run`] is the one event
//! loop: timers due, then frames held by a fault or a shaper, then one `sendmmsg` per port,
//! then every readable socket.
//!
//! Units: the clock is integer picoseconds since the node was bound (a monotonic clock read
//! once per received batch); fault and shaper durations are those of [`PortFaults`].

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::net::{SocketAddr, SocketAddrV4, UdpSocket};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use reducelab_ina::fabric::Fabric;
use serde::Serialize;

use crate::faults::{Fate, FaultPort, PortFaults, Shaper, ShaperStats};
use crate::plan::Endpoints;
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

/// Counters of the switch's data plane (the program keeps its own).
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

/// A shaped egress port (`--fault rate_mbps=…`): its rate, ECN threshold and counters.
#[derive(Clone, Debug, Serialize)]
pub struct ShapedPortReport {
    pub port: u16,
    pub rate_bps: u64,
    pub ecn_bytes: Option<u64>,
    pub queue_bytes: u64,
    #[serde(flatten)]
    pub stats: ShaperStats,
}

/// What every switch node reports of its data plane when it stops.
#[derive(Clone, Debug, Serialize)]
pub struct PortsReport {
    pub node: u32,
    pub ports: usize,
    pub uptime_s: f64,
    /// CPU time of the thread that ran the event loop (the switch's one core).
    pub cpu_s: f64,
    pub data_plane: PortCounters,
    /// The shaped ports, with the marks they set.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub shaped_ports: Vec<ShapedPortReport>,
}

/// A node's protocol logic on top of [`Ports`].
pub trait Node {
    /// What the node reports when it stops.
    type Report: Serialize;
    /// The node's report, with its data plane's (`ports`).
    fn report(&self, ports: PortsReport) -> Self::Report;
    /// One datagram from port `port`, sent by that port's peer, read at `now_ps`.
    fn receive(&mut self, io: &mut Ports, port: u16, bytes: &[u8], now_ps: u64);
    /// Carries out whatever is due at `now_ps` (called at the top of every turn of the loop).
    fn fire(&mut self, _io: &mut Ports, _now_ps: u64) {}
    /// When the next thing [`Node::fire`] would carry out is due (ps since the epoch).
    fn next_due_ps(&self) -> Option<u64> {
        None
    }
}

/// A switch node bound to its ports, ready to run: its data plane and its logic.
pub struct Bound<N> {
    ports: Ports,
    logic: N,
}

impl<N: Node> Bound<N> {
    pub fn new(ports: Ports, logic: N) -> Bound<N> {
        Bound { ports, logic }
    }

    /// Runs until `stop` is set or the duration ends (or the crash injection fires: then the
    /// process exits at once with status 3, as a killed switch would vanish).
    pub fn run(&mut self, stop: &AtomicBool) -> N::Report {
        self.ports.run(&mut self.logic, stop);
        self.report()
    }

    pub fn report(&self) -> N::Report {
        self.logic.report(self.ports.report())
    }

    /// The data plane's counters so far.
    pub fn counters(&self) -> &PortCounters {
        &self.ports.counters
    }

    /// One datagram from port `port`, received now.
    pub fn receive(&mut self, port: u16, from: SocketAddr, bytes: &[u8]) {
        let now = self.ports.now_ps();
        self.ports.receive(&mut self.logic, port, from, bytes, now);
    }
}

/// A frame a fault holds back (delay, reordering) until `due`; `seq` keeps equal due times in
/// the order they were held.
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

/// Why a shaped port (`rate_mbps`) is refused on a node whose frames carry no ECN mark (the
/// registry protocols' switch: its hosts have no window to slow, so it refuses rather than
/// ignore the marks).
pub const SHAPING_NEEDS_ECN: &str = "--fault rate_mbps: egress shaping and ECN marking run in the pool switch (training scenarios) only; this scenario's switch programs have no use for ECN marks";

/// The bound ports of one switch node.
pub struct Ports {
    pub node: u32,
    socks: Vec<UdpSocket>,
    /// Frames waiting to be sent, per port.
    tx: Vec<udp::TxQueue>,
    peers: Vec<SocketAddrV4>,
    faults: Vec<FaultPort>,
    /// Per port: its egress shaper, if shaped.
    shapers: Vec<Option<Shaper>>,
    /// Sets the ECN mark in a frame of the node's wire format (shaped ports mark with it).
    mark_ecn: fn(&mut [u8]),
    held: BinaryHeap<Reverse<Held>>,
    seq: u64,
    epoch: Instant,
    pub counters: PortCounters,
    opts: SwitchOptions,
    /// `REDUCELAB_SWITCH_TRACE=1`: one stderr line per packet in and out ([`Ports::trace_packet`]).
    trace: bool,
    /// Thread CPU time when `run` started.
    cpu0: f64,
}

impl Ports {
    /// Binds every port of switch `node` of `fabric`. `mark_ecn` sets the ECN mark of the
    /// node's frames; a node whose frames carry none passes `None`, and a shaped port
    /// (`rate_mbps`) is then refused. `ecn_default` is a shaped port's ECN threshold when its
    /// fault does not give one.
    pub fn bind(
        fabric: &Fabric,
        endpoints: &Endpoints,
        node: u32,
        opts: SwitchOptions,
        mark_ecn: Option<fn(&mut [u8])>,
        ecn_default: Option<u64>,
    ) -> Result<Ports, String> {
        crate::plan::check_switch(fabric, node)?;
        let ports = &fabric.nodes[node as usize].ports;
        for &(port, r) in &opts.faults {
            if let Some(q) = port.filter(|&q| q as usize >= ports.len()) {
                return Err(format!("--fault port={q}: switch {node} has {} ports", ports.len()));
            }
            if r.rate_bps > 0 && mark_ecn.is_none() {
                return Err(SHAPING_NEEDS_ECN.to_string());
            }
        }
        let mut socks = Vec::new();
        let mut peers = Vec::new();
        let mut faults = Vec::new();
        let mut shapers = Vec::new();
        for (p, &(peer, peer_port)) in ports.iter().enumerate() {
            socks.push(udp::bind(endpoints.of(node, p as u16))?);
            peers.push(endpoints.of(peer, peer_port));
            let mut rates = PortFaults::default();
            for &(port, r) in &opts.faults {
                if port.is_none() || port == Some(p as u16) {
                    rates = r;
                }
            }
            faults.push(FaultPort::new(rates, opts.seed, node, p as u16));
            shapers.push(Shaper::of(&rates, ecn_default));
        }
        Ok(Ports {
            node,
            tx: socks.iter().map(|_| udp::TxQueue::default()).collect(),
            socks,
            peers,
            faults,
            shapers,
            mark_ecn: mark_ecn.unwrap_or(|_| {}),
            held: BinaryHeap::new(),
            seq: 0,
            epoch: Instant::now(),
            counters: PortCounters::default(),
            opts,
            trace: std::env::var_os("REDUCELAB_SWITCH_TRACE").is_some_and(|v| v == "1"),
            cpu0: 0.0,
        })
    }

    /// Number of ports.
    pub fn len(&self) -> usize {
        self.socks.len()
    }

    pub fn is_empty(&self) -> bool {
        self.socks.is_empty()
    }

    /// The switch clock: ps since the node was bound.
    pub fn now_ps(&self) -> u64 {
        self.epoch.elapsed().as_nanos() as u64 * 1000
    }

    pub fn uptime_s(&self) -> f64 {
        self.epoch.elapsed().as_secs_f64()
    }

    /// CPU seconds of the thread that ran [`Ports::run`], since it started.
    pub fn cpu_s(&self) -> f64 {
        thread_cpu_s() - self.cpu0
    }

    /// Runs `node` until `stop` is set or the duration ends (or the crash injection fires: then
    /// the process exits at once with status 3, as a killed switch would vanish).
    pub fn run(&mut self, node: &mut impl Node, stop: &AtomicBool) {
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
            node.fire(self, self.now_ps());
            self.flush_held();
            self.flush_shaped();
            self.flush_tx();
            if idle {
                // Nothing was waiting: sleep until a socket is readable or the next deadline,
                // then read only the sockets ppoll found readable.
                let mut wait = Duration::from_millis(20);
                let now_ns = self.now_ps() / 1000;
                if let Some(at) = node.next_due_ps() {
                    wait = wait.min(Duration::from_nanos((at / 1000).saturating_sub(now_ns)));
                }
                if let Some(Reverse(h)) = self.held.peek() {
                    wait = wait.min(h.due.saturating_duration_since(Instant::now()));
                }
                for t in self.shapers.iter().flatten().filter_map(|s| s.next_departure_ns()) {
                    wait = wait.min(Duration::from_nanos(t.saturating_sub(now_ns)));
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
                if n == 0 {
                    continue;
                }
                idle = false;
                // The switch clock as read once per received batch: every packet of a
                // `recvmmsg` gets the time the call returned, when all of them had arrived (one
                // clock read per batch instead of one per packet, 3-4% of the loop's time and
                // up to 20% in the pool switch before).
                let now = self.now_ps();
                for i in 0..n {
                    let (from, datagrams) = rx.get(i);
                    for bytes in datagrams {
                        self.receive(node, p as u16, SocketAddr::V4(from), bytes, now);
                    }
                }
            }
            // What this turn's batches caused leaves at the top of the next turn (after the
            // timers that came due), one `sendmmsg` per port for all of them.
        }
        self.flush_tx();
    }

    /// One datagram from port `port`, read at `now_ps`: counted, checked against the port's
    /// peer (a foreign sender is counted and dropped), and handed to `node`.
    pub fn receive(&mut self, node: &mut impl Node, port: u16, from: SocketAddr, bytes: &[u8], now_ps: u64) {
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
        node.receive(self, port, bytes, now_ps);
    }

    /// Encodes one frame straight into `port`'s egress queue with `encode`, then sends, drops
    /// or holds it (with its copies) by the port's fault fate; a shaped port queues it at its
    /// rate. Returns the fate, or `encode`'s error (nothing is sent).
    pub fn send<E>(&mut self, port: u16, encode: impl FnOnce(&mut Vec<u8>) -> Result<(), E>) -> Result<Fate, E> {
        let q = &mut self.tx[port as usize];
        if let Err(e) = encode(q.open()) {
            q.discard();
            return Err(e);
        }
        let fate = self.faults[port as usize].fate();
        match fate {
            Fate::Drop => {
                self.tx[port as usize].discard();
                self.counters.fault_dropped += 1;
            }
            Fate::Send { copies, hold } => {
                if copies > 1 {
                    self.counters.fault_duplicated += 1;
                }
                if hold.is_zero() && self.shapers[port as usize].is_none() {
                    self.tx[port as usize].commit(copies as usize);
                    self.flush_if_full(port as usize);
                } else {
                    let q = &mut self.tx[port as usize];
                    let bytes = q.pending().to_vec();
                    q.discard();
                    for _ in 0..copies {
                        if hold.is_zero() {
                            self.shape(port, bytes.clone());
                        } else {
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
        Ok(fate)
    }

    /// A frame leaves by `port` (a held one, or any frame of a shaped port): into its shaper's
    /// queue (which may mark or drop it; an allocation per packet, on this path only), or
    /// straight to the port's send queue.
    fn egress(&mut self, port: u16, bytes: Vec<u8>) {
        if self.shapers[port as usize].is_some() {
            self.shape(port, bytes);
        } else {
            self.tx[port as usize].push(&bytes);
            self.flush_if_full(port as usize);
        }
    }

    fn shape(&mut self, port: u16, bytes: Vec<u8>) {
        let now_ns = self.epoch.elapsed().as_nanos() as u64;
        let mark = self.mark_ecn;
        if let Some(s) = self.shapers[port as usize].as_mut() {
            s.enqueue(now_ns, bytes, mark);
        }
    }

    fn flush_held(&mut self) {
        let now = Instant::now();
        while self.held.peek().is_some_and(|Reverse(h)| h.due <= now) {
            let Reverse(h) = self.held.pop().expect("peeked");
            self.egress(h.port, h.bytes);
        }
    }

    /// Frames of shaped ports whose departure time has come, to their ports' send queues.
    fn flush_shaped(&mut self) {
        if self.shapers.iter().all(Option::is_none) {
            return;
        }
        let now_ns = self.now_ps() / 1000;
        for (p, s) in self.shapers.iter_mut().enumerate() {
            if let Some(s) = s {
                while let Some(f) = s.dequeue(now_ns) {
                    self.tx[p].push(&f);
                }
            }
        }
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

    /// `REDUCELAB_SWITCH_TRACE=1`: one stderr line for a packet in (`rx`) or out (`tx`, with
    /// its fault fate).
    #[inline]
    pub fn trace_packet(&self, dir: &str, port: u16, packet: &dyn std::fmt::Display, fate: Option<Fate>) {
        if !self.trace {
            return;
        }
        let (ns, node) = (self.now_ps() / 1000, self.node);
        match fate {
            Some(fate) => eprintln!("{ns:>12} ns switch {node} {dir} port {port}: {packet} fate {fate:?}"),
            None => eprintln!("{ns:>12} ns switch {node} {dir} port {port}: {packet}"),
        }
    }

    /// A packet the node's frame could not encode (a protocol bug): counted, dropped, the first
    /// one named on stderr.
    pub fn unencodable(&mut self, packet: &dyn std::fmt::Debug, e: &dyn std::fmt::Display) {
        if self.counters.unencodable == 0 {
            eprintln!("switch {}: cannot encode {packet:?}: {e}", self.node);
        }
        self.counters.unencodable += 1;
    }

    /// The data plane's report so far.
    pub fn report(&self) -> PortsReport {
        let shaped_ports = self
            .shapers
            .iter()
            .enumerate()
            .filter_map(|(p, s)| {
                s.as_ref().map(|s| ShapedPortReport {
                    port: p as u16,
                    rate_bps: s.rate_bps,
                    ecn_bytes: s.ecn_bytes,
                    queue_bytes: s.cap_bytes,
                    stats: s.stats,
                })
            })
            .collect();
        PortsReport {
            node: self.node,
            ports: self.len(),
            uptime_s: self.uptime_s(),
            cpu_s: self.cpu_s(),
            data_plane: self.counters.clone(),
            shaped_ports,
        }
    }
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
