//! Flow-level backend: collective schedules and message-driven executors (GOAL traces) with
//! messages as fluid flows.
//!
//! Each message of a schedule follows its route (the routes of the deficiency model: straight
//! along the transfer's port on tori, the topology's deterministic minimal path elsewhere) as a
//! **chain of per-link stages** (a pipelined fluid model):
//!
//! - stage `k` starts when the message's first packet reaches link `k`: per earlier hop, one
//!   first-packet serialisation, the link latency and the pipeline latency of the node it
//!   enters (store-and-forward of the first packet);
//! - every link shares its bandwidth equally among its active stages (processor sharing), each
//!   stage carrying the message's wire bytes (payload plus one header per packet);
//! - the message is delivered when its last packet has crossed every link: for each stage, its
//!   end plus what the last packet still needs after that link (per later hop: latency,
//!   pipeline latency and the last packet's serialisation), the latest of these, plus the last
//!   link's latency.
//!
//! A lone message therefore takes exactly the packet engine's store-and-forward time
//! (`Σ packets + (h−1)·first packet` serialisation plus latencies, on links of one speed). On
//! paths mixing link speeds (HammingMesh board links) the contention-free recurrence uses the
//! exact flow-shop makespan of the packets (`flow_shop_ps`) and stays exact; the event-driven
//! stages are fluid and stay within one MTU's serialisation on the slowest link
//! (`crates/sim/tests/traffic.rs`). Ranks follow the packet
//! engine's step semantics: a step's messages start together and the step completes when all
//! its sends and receives are done.
//!
//! Why per-link stages rather than end-to-end max-min flows: a max-min flow occupies its whole
//! path from its first instant, so on multi-hop steps it shares downstream links before its
//! bytes can be there; that made short multi-hop messages up to 34% slower than at packet
//! level (64 KiB Swing-latency on 16x16). Stages overlap downstream sharing with upstream
//! latency as packets do (docs/flow-vs-packet.md has the cross-validation). What stages do not
//! model: a stage may use a link's share before its upstream stage has delivered the bytes
//! (its end is still bounded by the upstream end), queueing and credit dynamics, and adaptive
//! routing (one fixed path per message).
//!
//! The backend runs timing [`Plan`]s (message sizes without block identities, identical
//! steps stored once), so ring-family and bucket allreduces on 16k-node tori fit in memory.
//! **Contention-free plans** — every directed link carries messages of one sender only, at
//! most one per step — never have two messages on a link at once (a rank starts a step only
//! after its previous sends were delivered), so the simulation reduces exactly to a max-plus
//! recurrence over the steps: a rank's step ends at the latest delivery among its sends and
//! receives, and a message is delivered at its sender's step start plus its lone-message time.
//! [`run_plan`] uses that recurrence for them (`O(ranks + messages)` per step, no events; the
//! ring, Hamiltonian-ring and bucket allreduces on tori qualify) and the event-driven
//! simulation otherwise; tests check that both give the same times.
//!
//! **Endpoint costs** ([`Endpoint`], the packet engine's `endpoint` module at flow level):
//! - a message's first stage starts after its sender's send overhead and then the send
//!   latency; a rank's sends of a step pay the overhead one after another (one send timeline
//!   per rank), the latency overlaps the next send;
//! - a delivered message completes after the receive latency and then the receiver's receive
//!   overhead, the overhead serialised per receiving rank in the order of arrival;
//! - a rendezvous message (more than the threshold) starts one header-packet round trip later:
//!   the RTS on the message's own path and the CTS on the receiver's default path back, each
//!   store-and-forward of one header packet (serialisation at each link's bandwidth plus the
//!   hop latencies) on an *idle* network: unlike packet level, control packets do not queue
//!   behind data;
//! - an injection ceiling is one more processor-sharing resource per sending host: every
//!   message's first stage also runs a stage of its wire bytes on its host's injection
//!   resource, so a host's concurrent messages share the ceiling, and a message is delivered
//!   no earlier than that stage's end plus its last packet's way through the network.
//!   (Single-message steps never share it: the contention-free recurrence then uses the
//!   ceiling as one more bottleneck of the path.)
//!
//! **One engine, two drivers.** The fluid engine (`PsEngine`: per-link stages, processor
//! sharing, endpoint timelines) knows nothing of steps: a driver starts messages and takes
//! their deliveries. The plan runner ([`run_plan`], [`run_plan_simulated`]) drives it step by
//! step; [`FlowNet`] lets an executor start a message between two hosts at any simulated time
//! and learn its delivery time (the GOAL executor in `reducelab-sim` does, for `goal` and
//! `chakra` traffic). A [`FlowNet`] message takes the topology's default path (a trace has no
//! schedule ports) and is otherwise timed exactly as a plan's message; driven with a plan's
//! step semantics it reproduces [`run_plan_simulated`] to the picosecond. Time inside the
//! engine is `f64` picoseconds (the fluid rates make it so); results are rounded to integer
//! picoseconds only where they are reported.
//!
//! A rank pays its send overheads in port order (plans forget the schedule's send order; see
//! `send_order`), which on tori matches the schedules' port-ordered sends. The recurrence
//! serialises a rank's receive overheads step by step: a message of a later step that arrives
//! before one of an earlier step is charged after it (the packet engine charges in arrival
//! order).

use reducelab_sched::model::Router;
use reducelab_sched::plan::{Plan, NO_PORT};
use reducelab_sched::Schedule;
use reducelab_topo::Topology;
use std::cmp::{Ordering, Reverse};
use std::collections::{BinaryHeap, HashMap};

/// Relative tolerance under which two stage completions on a link are treated as
/// simultaneous, so symmetric collectives do not produce one event per stage.
const SAME_TIME_REL: f64 = 1e-9;

/// Timing parameters shared with the packet engine.
#[derive(Clone, Debug)]
pub struct FlowConfig {
    /// Pipeline latency of each forwarding node a message enters (ps).
    pub switch_latency_ps: u64,
    /// Largest packet on the wire (headers included).
    pub mtu_bytes: u32,
    pub header_bytes: u32,
    /// Per-host endpoint costs (default: none).
    pub endpoint: Endpoint,
}

/// Per-host endpoint costs at flow level (see the crate docs); the same values as the packet
/// engine's `EndpointConfig`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Endpoint {
    pub send_overhead_ps: u64,
    /// After the send overhead, before the first stage (not serialised per rank).
    pub send_latency_ps: u64,
    pub recv_overhead_ps: u64,
    /// After the last packet, before the receive overhead (not serialised per rank).
    pub recv_latency_ps: u64,
    /// Messages larger than this start after an RTS/CTS round trip.
    pub rendezvous_threshold_bytes: Option<u64>,
    /// Injection ceiling of one host over all its ports (bits per second).
    pub injection_bps: Option<u64>,
}

impl Endpoint {
    pub const OFF: Endpoint = Endpoint {
        send_overhead_ps: 0,
        send_latency_ps: 0,
        recv_overhead_ps: 0,
        recv_latency_ps: 0,
        rendezvous_threshold_bytes: None,
        injection_bps: None,
    };
    fn has_overheads(&self) -> bool {
        self.send_overhead_ps > 0 || self.recv_overhead_ps > 0 || self.send_latency_ps > 0 || self.recv_latency_ps > 0
    }
}

#[derive(Clone, Debug, PartialEq)]
pub struct FlowResult {
    /// Time until the last rank finished its last step.
    pub runtime_ps: u64,
    pub messages: u64,
    /// Events processed (0 on the contention-free path).
    pub events: u64,
    /// Whether the contention-free recurrence was used.
    pub contention_free: bool,
}

#[derive(Clone, Copy, PartialEq)]
struct T(f64);
impl Eq for T {}
impl PartialOrd for T {
    fn partial_cmp(&self, o: &Self) -> Option<Ordering> {
        Some(self.cmp(o))
    }
}
impl Ord for T {
    fn cmp(&self, o: &Self) -> Ordering {
        self.0.total_cmp(&o.0)
    }
}

/// The links messages are timed on: every interned path (a range of the link arena), each
/// hop's fixed latency, the links' bandwidths and the hosts' endpoint costs. Shared by the plan
/// runner and [`FlowNet`].
struct Fabric {
    /// Link ids of every path, concatenated.
    arena: Vec<u32>,
    /// Per arena entry: latency of that link plus the pipeline latency of the node it enters
    /// if that node forwards (ps).
    gap: Vec<f64>,
    /// Bandwidth of every directed link, bytes/ps; with an injection ceiling, followed by one
    /// injection resource per rank.
    bandwidth_bytes_per_ps: Vec<f64>,
    /// Index of rank 0's injection resource in `bandwidth_bytes_per_ps` (`None`: no ceiling).
    injection: Option<usize>,
    endpoint: Endpoint,
}

/// A plan routed on a topology: per distinct step, every message's routed form and the
/// senders' and receivers' message lists.
struct Routed {
    fab: Fabric,
    steps: Vec<RoutedStep>,
}

struct RoutedStep {
    repeat: u32,
    msgs: Vec<RoutedMsg>,
    /// Messages by sender: `send_idx[send_off[r]..send_off[r+1]]` (built on demand).
    send_off: Vec<u32>,
    send_idx: Vec<u32>,
    /// Messages received by each rank in this step.
    recv_count: Vec<u32>,
}

struct RoutedMsg {
    from: u32,
    to: u32,
    /// Wire bytes of the first (largest) and last packet.
    first_pkt: f64,
    last_pkt: f64,
    /// Pipelined model: what the last packet needs after leaving the first link (per later
    /// hop: the previous link's latency and router latency, and its own serialisation).
    tail0: f64,
    /// Bytes on the wire (payload plus one header per packet).
    wire: f64,
    path: (u32, u32),
    /// Delivery delay after the last byte left the source (ps).
    delay_ps: f64,
    /// Smallest capacity on the path (bytes/ps); infinite for an empty path.
    bottleneck: f64,
    /// Rendezvous: the RTS/CTS round trip before the data may start (ps; 0 if eager).
    rdv_ps: f64,
    /// The schedule's port (`NO_PORT` if none): the order of a rank's sends with a send
    /// overhead.
    port: u16,
}

/// A path interned in the arena: (start, length, latency in ps, bottleneck in bytes/ps, first
/// link's bandwidth in bits/s).
type InternedPath = (u32, u32, f64, f64, u64);

/// Paths interned in a [`Fabric`]'s arena by (from, to, port): a message's path is routed once
/// per distinct triple.
#[derive(Default)]
struct Paths {
    interned: HashMap<(u32, u32, u16), InternedPath>,
    scratch: Vec<(reducelab_topo::NodeId, u16)>,
}

impl Paths {
    /// The path from rank (host) `from` to `to`, straight along `port` where the router honours
    /// it (`key_port` names it in the map), interned into `fab` on first use.
    fn lookup(
        &mut self,
        topo: &Topology,
        cfg: &FlowConfig,
        router: &mut Router,
        fab: &mut Fabric,
        (from, to, key_port): (u32, u32, u16),
        port: Option<u16>,
    ) -> Result<InternedPath, String> {
        let key = (from, to, key_port);
        Ok(match self.interned.get(&key) {
            Some(&v) => v,
            None => {
                router.path(from, to, port, &mut self.scratch)?;
                let v = intern(topo, cfg, router, &self.scratch, fab);
                self.interned.insert(key, v);
                v
            }
        })
    }
}

/// Interns `path` into the fabric's arena.
fn intern(
    topo: &Topology,
    cfg: &FlowConfig,
    router: &Router,
    path: &[(reducelab_topo::NodeId, u16)],
    fab: &mut Fabric,
) -> InternedPath {
    let start = fab.arena.len() as u32;
    let mut lat = 0.0;
    let mut bottleneck = f64::INFINITY;
    for &(node, port) in path {
        let g = router.global_port(node, port);
        fab.arena.push(g as u32);
        bottleneck = bottleneck.min(fab.bandwidth_bytes_per_ps[g]);
        let pp = topo.nodes[node.idx()].ports[port as usize];
        let mut hop = topo.links[pp.link.idx()].latency_ps as f64;
        if topo.nodes[pp.peer.idx()].forwards {
            hop += cfg.switch_latency_ps as f64;
        }
        fab.gap.push(hop);
        lat += hop;
    }
    let first_bw =
        path.first().map_or(0, |&(n, p)| topo.links[topo.nodes[n.idx()].ports[p as usize].link.idx()].bandwidth_bps);
    (start, path.len() as u32, lat, bottleneck, first_bw)
}

/// Makespan (ps) of `n` packets crossing links of the given speeds (bytes per ps) store-and-
/// forward, without latencies: `n − 1` packets of `p` bytes, then one of `q` bytes. For equal
/// jobs `j = 1..m` the completion on link `k` is `Σ_{i≤k} p/bᵢ + (m−1)·p / min_{i≤k} bᵢ`; the
/// last packet then follows the recurrence `D(k) = max(C(m, k), D(k−1)) + q/b_k`.
fn flow_shop_ps(speeds: impl Iterator<Item = f64>, n: u64, p: f64, q: f64) -> f64 {
    let m = (n - 1) as f64;
    let (mut sum, mut slowest, mut d) = (0.0f64, 0.0f64, 0.0f64);
    for b in speeds {
        let t = p / b;
        sum += t;
        slowest = slowest.max(t);
        let c = if n > 1 { sum + (m - 1.0) * slowest } else { 0.0 };
        d = c.max(d) + q / b;
    }
    d
}

/// The links of `topo` with their bandwidths, and one injection resource per host of the
/// first `hosts` with an injection ceiling; no path interned yet.
fn fabric(topo: &Topology, router: &Router, cfg: &FlowConfig, hosts: usize) -> Fabric {
    let mut bandwidth_bytes_per_ps = vec![0.0; router.num_ports()];
    for (ni, n) in topo.nodes.iter().enumerate() {
        for (pi, pp) in n.ports.iter().enumerate() {
            let g = router.global_port(reducelab_topo::NodeId(ni as u32), pi as u16);
            bandwidth_bytes_per_ps[g] = topo.links[pp.link.idx()].bandwidth_bps as f64 / 8.0 / 1e12;
        }
    }
    let ep = cfg.endpoint;
    let injection = ep.injection_bps.map(|bps| {
        let at = bandwidth_bytes_per_ps.len();
        bandwidth_bytes_per_ps.extend(std::iter::repeat_n(bps as f64 / 8.0 / 1e12, hosts));
        at
    });
    Fabric { arena: Vec::new(), gap: Vec::new(), bandwidth_bytes_per_ps, injection, endpoint: ep }
}

impl Fabric {
    /// Whether a message of `bytes` starts with an RTS/CTS round trip.
    fn rendezvous(&self, bytes: u64) -> bool {
        self.endpoint.rendezvous_threshold_bytes.is_some_and(|t| bytes > t)
    }
}

/// A message of `b` payload bytes from `from` to `to` on the interned path `p` (`back`: the
/// receiver's default path back, for a rendezvous message's CTS), with its pipelined timing
/// constants.
fn routed_msg(
    fab: &Fabric,
    cfg: &FlowConfig,
    (from, to, port): (u32, u32, u16),
    b: u64,
    p: InternedPath,
    back: Option<InternedPath>,
) -> RoutedMsg {
    let (start, len, lat, mut bottleneck, first_bw) = p;
    let (arena, gap, bandwidth_bytes_per_ps) = (&fab.arena, &fab.gap, &fab.bandwidth_bytes_per_ps);
    let payload = (cfg.mtu_bytes - cfg.header_bytes) as u64;
    // Rendezvous: one header packet store-and-forward along the message's path (RTS) and the
    // default path back (CTS).
    let mut rdv_ps = 0.0;
    if let Some((back, back_len, ..)) = back {
        for a in (start..start + len).chain(back..back + back_len) {
            rdv_ps += cfg.header_bytes as f64 / bandwidth_bytes_per_ps[arena[a as usize] as usize] + gap[a as usize];
        }
    }
    if let (Some(at), true) = (fab.injection, len > 0) {
        bottleneck = bottleneck.min(bandwidth_bytes_per_ps[at + from as usize]);
    }
    let pkts = b.div_ceil(payload).max(1);
    let wire = b + pkts * cfg.header_bytes as u64;
    let mut delay = lat;
    let last = if b == 0 { 0 } else { b - (pkts - 1) * payload } + cfg.header_bytes as u64;
    // Store-and-forward is a flow shop (packets = jobs, links = machines). With equal link
    // speeds its makespan is the source's serialisation of every packet plus, per extra hop,
    // the largest packet's serialisation (Σ pᵢ + (h−1)·max pᵢ); with mixed speeds (HammingMesh
    // board links) the exact makespan of `pkts − 1` equal packets and a last one, less the
    // bottleneck term `wire / bottleneck` charged below.
    if len > 1 {
        let largest = b.min(payload) + cfg.header_bytes as u64;
        let links = &arena[start as usize..(start + len) as usize];
        let bw = |a: &u32| bandwidth_bytes_per_ps[*a as usize];
        if links.iter().all(|a| bw(a) == bw(&links[0])) {
            delay += (len - 1) as f64 * (largest as f64 * 8.0 / first_bw as f64 * 1e12);
        } else {
            let link_bottleneck = links.iter().map(bw).fold(f64::INFINITY, f64::min);
            delay +=
                flow_shop_ps(links.iter().map(bw), pkts, largest as f64, last as f64) - wire as f64 / link_bottleneck;
        }
    }
    let first = b.min(payload) + cfg.header_bytes as u64;
    // What the last packet still needs after leaving the first link.
    let tail0: f64 = (1..len as usize)
        .map(|k| gap[start as usize + k - 1] + last as f64 / bandwidth_bytes_per_ps[arena[start as usize + k] as usize])
        .sum();
    RoutedMsg {
        from,
        to,
        first_pkt: first as f64,
        last_pkt: last as f64,
        tail0,
        wire: wire as f64,
        path: (start, len),
        delay_ps: delay,
        bottleneck,
        rdv_ps,
        port,
    }
}

fn route(topo: &Topology, plan: &Plan, bytes: u64, elem_bytes: u64, cfg: &FlowConfig) -> Result<Routed, String> {
    if (plan.ranks as usize) > topo.hosts.len() {
        return Err(format!("schedule has {} ranks but the topology {} hosts", plan.ranks, topo.hosts.len()));
    }
    let mut router = Router::new(topo);
    let honour_ports = plan.torus.as_deref().is_some_and(|d| router.is_torus(d));
    let mut fab = fabric(topo, &router, cfg, plan.ranks as usize);
    // Paths are the same for equal (from, to, port): interned across steps.
    let mut paths = Paths::default();
    let mut steps = Vec::with_capacity(plan.steps.len());
    for st in &plan.steps {
        let mut msgs = Vec::with_capacity(st.msgs.len());
        for m in &st.msgs {
            if m.from >= plan.ranks || m.to >= plan.ranks {
                return Err(format!(
                    "message from rank {} to rank {}, but there are {} ranks",
                    m.from, m.to, plan.ranks
                ));
            }
            let port = if honour_ports && m.port != NO_PORT { Some(m.port) } else { None };
            let p = paths.lookup(topo, cfg, &mut router, &mut fab, (m.from, m.to, m.port), port)?;
            let b = plan.bytes(m.blocks, bytes, elem_bytes);
            let back = match fab.rendezvous(b) && p.1 > 0 {
                true => Some(paths.lookup(topo, cfg, &mut router, &mut fab, (m.to, m.from, NO_PORT), None)?),
                false => None,
            };
            msgs.push(routed_msg(&fab, cfg, (m.from, m.to, m.port), b, p, back));
        }
        steps.push(RoutedStep {
            repeat: st.repeat,
            msgs,
            send_off: Vec::new(),
            send_idx: Vec::new(),
            recv_count: Vec::new(),
        });
    }
    Ok(Routed { fab, steps })
}

/// Adds the per-rank message index the event-driven simulation needs.
fn index(mut r: Routed, ranks: u32) -> Routed {
    let p = ranks as usize;
    for st in &mut r.steps {
        let mut send_off = vec![0u32; p + 1];
        let mut recv_count = vec![0u32; p];
        for m in &st.msgs {
            send_off[m.from as usize + 1] += 1;
            recv_count[m.to as usize] += 1;
        }
        for i in 0..p {
            send_off[i + 1] += send_off[i];
        }
        let mut send_idx = vec![0u32; st.msgs.len()];
        let mut fill = send_off.clone();
        for (i, m) in st.msgs.iter().enumerate() {
            send_idx[fill[m.from as usize] as usize] = i as u32;
            fill[m.from as usize] += 1;
        }
        if r.fab.endpoint.send_overhead_ps > 0 {
            // A rank's sends pay their overhead one after another: in port order (see
            // `send_order`).
            for i in 0..p {
                send_idx[send_off[i] as usize..send_off[i + 1] as usize].sort_by_key(|&k| st.msgs[k as usize].port);
            }
        }
        (st.send_off, st.send_idx, st.recv_count) = (send_off, send_idx, recv_count);
    }
    r
}

/// Whether no two messages can ever share a link at the same time: every directed link
/// carries messages of a single sender, at most one per step.
fn contention_free(r: &Routed) -> bool {
    let mut owner = vec![u32::MAX; r.fab.bandwidth_bytes_per_ps.len()];
    let mut stamp = vec![u32::MAX; r.fab.bandwidth_bytes_per_ps.len()];
    for (j, st) in r.steps.iter().enumerate() {
        for m in &st.msgs {
            // With an injection ceiling the sender's injection resource is one more link.
            let inj = r.fab.injection.filter(|_| m.path.1 > 0).map(|at| (at + m.from as usize) as u32);
            for &l in r.fab.arena[m.path.0 as usize..(m.path.0 + m.path.1) as usize].iter().chain(inj.as_ref()) {
                let l = l as usize;
                if owner[l] == u32::MAX {
                    owner[l] = m.from;
                } else if owner[l] != m.from {
                    return false;
                }
                if stamp[l] == j as u32 {
                    return false;
                }
                stamp[l] = j as u32;
            }
        }
    }
    true
}

/// Whether `plan` on `topo` is contention-free (see the crate docs), i.e. whether
/// [`run_plan`] times it with the exact recurrence.
pub fn is_contention_free(topo: &Topology, plan: &Plan, cfg: &FlowConfig) -> Result<bool, String> {
    Ok(contention_free(&route(topo, plan, 0, 1, cfg)?))
}

/// Runs `sched` for a vector of `bytes` on `topo` (rank r on host r).
pub fn run_schedule(
    topo: &Topology,
    sched: &Schedule,
    bytes: u64,
    elem_bytes: u64,
    cfg: &FlowConfig,
) -> Result<FlowResult, String> {
    run_plan(topo, &Plan::from_schedule(sched)?, bytes, elem_bytes, cfg)
}

/// Runs `plan` for a vector of `bytes` on `topo` (rank r on host r): the contention-free
/// recurrence when it applies, the fluid simulation otherwise.
pub fn run_plan(
    topo: &Topology,
    plan: &Plan,
    bytes: u64,
    elem_bytes: u64,
    cfg: &FlowConfig,
) -> Result<FlowResult, String> {
    let routed = route(topo, plan, bytes, elem_bytes, cfg)?;
    if contention_free(&routed) {
        return Ok(recurrence(plan, &routed));
    }
    simulate(plan, &index(routed, plan.ranks))
}

/// Runs `plan` with the event-driven fluid simulation even if it is contention-free (for
/// tests and comparisons).
pub fn run_plan_simulated(
    topo: &Topology,
    plan: &Plan,
    bytes: u64,
    elem_bytes: u64,
    cfg: &FlowConfig,
) -> Result<FlowResult, String> {
    simulate(plan, &index(route(topo, plan, bytes, elem_bytes, cfg)?, plan.ranks))
}

/// The contention-free max-plus recurrence (see the crate docs).
fn recurrence(plan: &Plan, r: &Routed) -> FlowResult {
    let p = plan.ranks as usize;
    let mut start = vec![0.0f64; p];
    let mut next = vec![0.0f64; p];
    let mut messages = 0u64;
    let ep = r.fab.endpoint;
    if ep.has_overheads() {
        return recurrence_with_overheads(plan, r);
    }
    for st in &r.steps {
        let dur: Vec<f64> = st.msgs.iter().map(|m| m.wire / m.bottleneck + m.delay_ps + m.rdv_ps).collect();
        for _ in 0..st.repeat {
            next.copy_from_slice(&start);
            for (m, &d) in st.msgs.iter().zip(&dur) {
                let t = start[m.from as usize] + d;
                let (f, to) = (m.from as usize, m.to as usize);
                if next[f] < t {
                    next[f] = t;
                }
                if next[to] < t {
                    next[to] = t;
                }
            }
            std::mem::swap(&mut start, &mut next);
        }
        messages += st.repeat as u64 * st.msgs.len() as u64;
    }
    let end = start.iter().fold(0.0f64, |a, &b| a.max(b));
    FlowResult { runtime_ps: end.round() as u64, messages, events: 0, contention_free: true }
}

/// The order in which ranks pay their send overheads: by rank, then by port. A plan keeps a
/// step's messages sorted by receiver and forgets the schedule's send order; on tori a rank's
/// ports are used in the same order by every rank, so each receiver gets its messages at
/// distinct positions of their senders' sequences, as the schedules' port-ordered sends do
/// at packet level (sorting by receiver instead makes receive overheads queue).
fn send_order(msgs: &[RoutedMsg]) -> Vec<usize> {
    let mut order: Vec<usize> = (0..msgs.len()).collect();
    order.sort_by_key(|&i| (msgs[i].from, msgs[i].port));
    order
}

/// The contention-free recurrence with send and receive overheads: per step, a rank's sends
/// leave one send overhead apart (its send timeline carries over steps), and each receiver
/// takes its deliveries in arrival order, one receive overhead each.
fn recurrence_with_overheads(plan: &Plan, r: &Routed) -> FlowResult {
    let p = plan.ranks as usize;
    let (os, or) = (r.fab.endpoint.send_overhead_ps as f64, r.fab.endpoint.recv_overhead_ps as f64);
    let (ls, lr) = (r.fab.endpoint.send_latency_ps as f64, r.fab.endpoint.recv_latency_ps as f64);
    let mut start = vec![0.0f64; p];
    let mut next = vec![0.0f64; p];
    let mut send_free = vec![0.0f64; p];
    let mut recv_free = vec![0.0f64; p];
    // Arrival time per message of the current repetition (-inf: local, no endpoint costs).
    let mut arrival: Vec<f64> = Vec::new();
    let mut group: Vec<(f64, usize)> = Vec::new();
    let mut messages = 0u64;
    for st in &r.steps {
        let dur: Vec<f64> = st.msgs.iter().map(|m| m.wire / m.bottleneck + m.delay_ps + m.rdv_ps).collect();
        let order = send_order(&st.msgs);
        // The step's messages grouped by receiver (counting sort, message order kept): a
        // receiver's overheads depend only on its own arrivals, and `next` takes maxima, so
        // sorting each receiver's few arrivals gives exactly what one sort of the whole step
        // by (time, message) gave, in O(m) instead of O(m log m) per step.
        let mut recv_off = vec![0usize; p + 1];
        for m in &st.msgs {
            recv_off[m.to as usize + 1] += 1;
        }
        for i in 0..p {
            recv_off[i + 1] += recv_off[i];
        }
        let mut recv_idx = vec![0usize; st.msgs.len()];
        let mut fill = recv_off.clone();
        for (i, m) in st.msgs.iter().enumerate() {
            recv_idx[fill[m.to as usize]] = i;
            fill[m.to as usize] += 1;
        }
        arrival.resize(st.msgs.len(), 0.0);
        for _ in 0..st.repeat {
            next.copy_from_slice(&start);
            for &i in &order {
                let (m, d) = (&st.msgs[i], dur[i]);
                let f = m.from as usize;
                if m.path.1 == 0 {
                    // Local: no network, no endpoint costs.
                    arrival[i] = f64::NEG_INFINITY;
                    next[f] = next[f].max(start[f]);
                    continue;
                }
                let ready = start[f].max(send_free[f]) + os;
                send_free[f] = ready;
                arrival[i] = ready + ls + d;
            }
            for to in 0..p {
                let mine = &recv_idx[recv_off[to]..recv_off[to + 1]];
                group.clear();
                group.extend(mine.iter().map(|&i| (arrival[i], i)).filter(|a| a.0 != f64::NEG_INFINITY));
                if group.len() > 1 {
                    group.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
                }
                for &(t, i) in &group {
                    let f = st.msgs[i].from as usize;
                    // No receive timeline without a receive overhead (as at packet level).
                    let done = if or > 0.0 { (t + lr).max(recv_free[to]) + or } else { t + lr };
                    recv_free[to] = done;
                    next[f] = next[f].max(done);
                    next[to] = next[to].max(done);
                }
            }
            std::mem::swap(&mut start, &mut next);
        }
        messages += st.repeat as u64 * st.msgs.len() as u64;
    }
    let end = start.iter().fold(0.0f64, |a, &b| a.max(b));
    FlowResult { runtime_ps: end.round() as u64, messages, events: 0, contention_free: true }
}

/// Position of a rank in the plan: distinct step `j`, repetition `rep`, global step `g`.
#[derive(Clone, Copy)]
struct Cursor {
    j: usize,
    rep: u32,
    g: u64,
}

fn advance(c: Cursor, repeat: u32) -> Cursor {
    if c.rep + 1 < repeat {
        Cursor { j: c.j, rep: c.rep + 1, g: c.g + 1 }
    } else {
        Cursor { j: c.j + 1, rep: 0, g: c.g + 1 }
    }
}

// ---------------------------------------------------------------------------------------------
// Pipelined model: every message is a chain of per-link stages.

/// A stage activation: (time, instance, stage, tail of that stage).
type Activation = (T, u32, u32, T);

/// Pending stage activations. Each is pushed at `now + d` with `d` fixed per message (first
/// packet serialisation plus hop latency, or 0 for a message's first stage), and `now` never
/// decreases, so one FIFO per distinct `d` stays sorted: the earliest activation is the
/// earliest FIFO head. Few distinct delays occur in a run (one per packet size and link
/// type); beyond [`MAX_FIFOS`] activations go to a heap.
#[derive(Default)]
struct Activations {
    fifos: Vec<(f64, std::collections::VecDeque<Activation>)>,
    overflow: BinaryHeap<Reverse<Activation>>,
}

const MAX_FIFOS: usize = 32;

impl Activations {
    #[inline]
    fn push(&mut self, d: f64, a: Activation) {
        if let Some((_, q)) = self.fifos.iter_mut().find(|(x, _)| x.to_bits() == d.to_bits()) {
            q.push_back(a);
        } else if self.fifos.len() < MAX_FIFOS {
            self.fifos.push((d, std::collections::VecDeque::from([a])));
        } else {
            self.overflow.push(Reverse(a));
        }
    }

    /// An activation at an arbitrary time (not `now` plus a fixed delay).
    fn push_any(&mut self, a: Activation) {
        self.overflow.push(Reverse(a));
    }

    /// Where the earliest activation is: `Some(fifo index)` or `None` for the overflow heap.
    fn earliest(&self) -> Option<(Activation, Option<usize>)> {
        let mut best: Option<(Activation, Option<usize>)> = self.overflow.peek().map(|Reverse(a)| (*a, None));
        for (i, (_, q)) in self.fifos.iter().enumerate() {
            if let Some(&a) = q.front() {
                if best.is_none_or(|(b, _)| a < b) {
                    best = Some((a, Some(i)));
                }
            }
        }
        best
    }

    fn pop(&mut self, at: Option<usize>) -> Activation {
        match at {
            Some(i) => self.fifos[i].1.pop_front().expect("earliest is a head"),
            None => self.overflow.pop().expect("earliest is the heap top").0,
        }
    }
}

/// One link shared by processor sharing among its active stages.
#[derive(Clone, Default)]
struct PsLink {
    /// Bytes served to each active stage since the start (virtual time).
    v: f64,
    /// Real time `v` refers to.
    at: f64,
    active: u32,
    /// Active stages: (finish tag, instance, tail).
    heap: BinaryHeap<Reverse<(T, u32, T)>>,
    /// Whether the link has an entry in the completion queue.
    queued: bool,
}

/// A message in flight.
struct Inst {
    j: u32,
    mi: u32,
    g: u64,
    /// Stages not yet finished on their link.
    pending: u32,
    /// max over finished stages of (finish time + tail).
    acc: f64,
    /// Its receive overhead has been charged (a second pass through `deliveries`).
    received: bool,
}

/// Where an instance's routed message is stored: a plan's by (distinct step, index), a
/// [`FlowNet`]'s by index.
trait MsgTable {
    fn routed(&self, j: u32, mi: u32) -> &RoutedMsg;
}

impl MsgTable for [RoutedStep] {
    fn routed(&self, j: u32, mi: u32) -> &RoutedMsg {
        &self[j as usize].msgs[mi as usize]
    }
}

impl MsgTable for [RoutedMsg] {
    fn routed(&self, _: u32, mi: u32) -> &RoutedMsg {
        &self[mi as usize]
    }
}

/// The fluid engine both drivers share (the plan runner's [`simulate`] and [`FlowNet`]):
/// messages started at any time cross their paths as chains of per-link stages, links share
/// their bandwidth by processor sharing, and endpoint costs are paid on per-host send and
/// receive timelines. It knows nothing of steps or traces: a driver starts messages
/// ([`PsEngine::start`]) and takes the deliveries [`PsEngine::step`] returns.
struct PsEngine {
    links: Vec<PsLink>,
    /// At most one entry per busy link: a lower bound of its next stage completion (adding a
    /// stage only delays a link's completions, so the entry is kept and corrected when it is
    /// popped instead of being replaced on every activation).
    completions: BinaryHeap<Reverse<(T, u32)>>,
    activations: Activations,
    deliveries: BinaryHeap<Reverse<(T, u32)>>,
    insts: Vec<Inst>,
    /// Per host: when its send / receive timeline is free (endpoint overheads).
    send_free: Vec<f64>,
    recv_free: Vec<f64>,
    /// The time of the last event processed.
    now: f64,
}

impl PsEngine {
    fn new(fab: &Fabric, hosts: usize) -> PsEngine {
        PsEngine {
            links: vec![PsLink::default(); fab.bandwidth_bytes_per_ps.len()],
            completions: BinaryHeap::new(),
            activations: Activations::default(),
            deliveries: BinaryHeap::new(),
            insts: Vec::new(),
            send_free: vec![0.0; hosts],
            recv_free: vec![0.0; hosts],
            now: 0.0,
        }
    }

    fn msg<'m, M: MsgTable + ?Sized>(&self, t: &'m M, i: u32) -> &'m RoutedMsg {
        let inst = &self.insts[i as usize];
        t.routed(inst.j, inst.mi)
    }

    fn touch(&mut self, fab: &Fabric, l: usize, now: f64) {
        let bandwidth_bytes_per_ps = fab.bandwidth_bytes_per_ps[l];
        let ln = &mut self.links[l];
        if ln.active > 0 {
            ln.v += (now - ln.at) * bandwidth_bytes_per_ps / ln.active as f64;
        }
        ln.at = now;
    }

    /// The time of `l`'s next stage completion at the current rates, if it is busy.
    fn next_completion(&self, fab: &Fabric, l: usize) -> Option<f64> {
        let ln = &self.links[l];
        ln.heap.peek().map(|&Reverse((T(tag), _, _))| {
            ln.at + (tag - ln.v).max(0.0) * ln.active as f64 / fab.bandwidth_bytes_per_ps[l]
        })
    }

    /// Queues `l`'s next completion if it is busy and not queued.
    fn queue(&mut self, fab: &Fabric, l: usize) {
        if !self.links[l].queued {
            if let Some(t) = self.next_completion(fab, l) {
                self.links[l].queued = true;
                self.completions.push(Reverse((T(t), l as u32)));
            }
        }
    }

    /// Starts message `m` (entry `(j, mi)` of the driver's table, global step `g`) at `now`,
    /// which is no earlier than the last event: after its sender's send overhead (one at a
    /// time per host), the send latency and a rendezvous round trip its first stage starts; a
    /// message without a path is delivered at once. Returns the instance.
    fn start(&mut self, fab: &Fabric, m: &RoutedMsg, (j, mi, g): (u32, u32, u64), now: f64) -> u32 {
        let id = self.insts.len() as u32;
        let inj = fab.injection.is_some() as u32;
        self.insts.push(Inst { j, mi, g, pending: m.path.1 + inj, acc: now, received: false });
        if m.path.1 == 0 {
            self.insts[id as usize].pending = 0;
            self.insts[id as usize].received = true;
            self.deliveries.push(Reverse((T(now), id)));
            return id;
        }
        let os = fab.endpoint.send_overhead_ps as f64;
        let mut at = now;
        if os > 0.0 {
            let rank = m.from as usize;
            at = now.max(self.send_free[rank]) + os;
            self.send_free[rank] = at;
        }
        at += fab.endpoint.send_latency_ps as f64 + m.rdv_ps;
        // The zero-delay FIFO stays sorted only for activations at the current event's time.
        if at == now && now == self.now {
            self.activations.push(0.0, (T(now), id, 0, T(m.tail0)));
        } else {
            self.activations.push_any((T(at), id, 0, T(m.tail0)));
        }
        id
    }

    fn activate<M: MsgTable + ?Sized>(&mut self, fab: &Fabric, t: &M, now: f64, id: u32, k: u32, tail: f64) {
        let m = self.msg(t, id);
        let link_of = |k: u32| {
            let a = (m.path.0 + k) as usize;
            (fab.arena[a] as usize, a)
        };
        let (l, a) = link_of(k);
        let (wire, first, last) = (m.wire, m.first_pkt, m.last_pkt);
        let hops = m.path.1;
        let next = (k + 1 < hops).then(|| {
            let (l2, _) = link_of(k + 1);
            (
                first / fab.bandwidth_bytes_per_ps[l] + fab.gap[a],
                tail - fab.gap[a] - last / fab.bandwidth_bytes_per_ps[l2],
            )
        });
        self.touch(fab, l, now);
        let ln = &mut self.links[l];
        ln.active += 1;
        ln.heap.push(Reverse((T(ln.v + wire), id, T(tail))));
        self.queue(fab, l);
        if let (0, Some(at)) = (k, fab.injection) {
            // The sender's injection resource carries the wire bytes too; after it the last
            // packet still crosses the first link and the rest of the path.
            let inj = at + m.from as usize;
            let tail_inj = tail + last / fab.bandwidth_bytes_per_ps[l];
            self.touch(fab, inj, now);
            let ln = &mut self.links[inj];
            ln.active += 1;
            ln.heap.push(Reverse((T(ln.v + wire), id, T(tail_inj))));
            self.queue(fab, inj);
        }
        if let Some((d, tail2)) = next {
            self.activations.push(d, (T(now + d), id, k + 1, T(tail2)));
        }
    }

    /// `l`'s queued completion time `now` came up: finishes the stages that are done, or
    /// re-queues the link if its stages were delayed since it was queued.
    fn link_done<M: MsgTable + ?Sized>(&mut self, fab: &Fabric, t: &M, now: f64, l: usize) {
        self.links[l].queued = false;
        self.touch(fab, l, now);
        if let Some(c) = self.next_completion(fab, l) {
            if c > now + now.abs().max(1.0) * SAME_TIME_REL {
                self.queue(fab, l);
                return;
            }
        }
        loop {
            let ln = &mut self.links[l];
            let Some(&Reverse((T(tag), id, T(tail)))) = ln.heap.peek() else { break };
            if tag > ln.v + ln.v.abs().max(1.0) * SAME_TIME_REL {
                break;
            }
            ln.heap.pop();
            ln.active -= 1;
            let inst = &mut self.insts[id as usize];
            inst.acc = inst.acc.max(now + tail);
            inst.pending -= 1;
            if inst.pending == 0 {
                let m = self.msg(t, id);
                let last_gap = fab.gap[(m.path.0 + m.path.1 - 1) as usize];
                let d = self.insts[id as usize].acc + last_gap;
                self.deliveries.push(Reverse((T(d), id)));
            }
        }
        self.queue(fab, l);
    }

    /// The time of the next event, if any is pending.
    fn next_time(&self) -> Option<f64> {
        let tc = self.completions.peek().map(|Reverse((T(t), _))| *t);
        let ta = self.activations.earliest().map(|((T(t), ..), _)| t);
        let td = self.deliveries.peek().map(|Reverse((T(t), _))| *t);
        [tc, ta, td].into_iter().flatten().reduce(f64::min)
    }

    /// Processes the earliest event (deliveries first at equal times, then stage activations,
    /// then link completions): its time and, if a message is now delivered (its receive
    /// latency and overhead paid), its instance. `None`: nothing is pending.
    fn step<M: MsgTable + ?Sized>(&mut self, fab: &Fabric, t: &M) -> Option<(f64, Option<u32>)> {
        let tc = self.completions.peek().map(|Reverse((T(t), _))| *t);
        let first_activation = self.activations.earliest();
        let ta = first_activation.map(|((T(t), ..), _)| t);
        let td = self.deliveries.peek().map(|Reverse((T(t), _))| *t);
        let now = [tc, ta, td].into_iter().flatten().reduce(f64::min)?;
        self.now = now;
        if td == Some(now) {
            let Reverse((_, id)) = self.deliveries.pop().expect("peeked");
            let (or, lr) = (fab.endpoint.recv_overhead_ps as f64, fab.endpoint.recv_latency_ps as f64);
            if (or > 0.0 || lr > 0.0) && !self.insts[id as usize].received {
                // The last packet is in: after the receive latency the receiver's CPU takes
                // the message in turn.
                self.insts[id as usize].received = true;
                let to = self.msg(t, id).to as usize;
                let d = (now + lr).max(self.recv_free[to]) + or;
                self.recv_free[to] = d;
                self.deliveries.push(Reverse((T(d), id)));
                return Some((now, None));
            }
            return Some((now, Some(id)));
        } else if ta == Some(now) {
            let (_, id, k, T(tail)) = self.activations.pop(first_activation.expect("peeked").1);
            self.activate(fab, t, now, id, k, tail);
        } else {
            let Reverse((_, l)) = self.completions.pop().expect("peeked");
            self.link_done(fab, t, now, l as usize);
        }
        Some((now, None))
    }
}

/// The plan runner on the engine: ranks follow the plan's steps (a step's messages start
/// together, the step ends when all its sends and receives are done).
struct PlanRun<'a> {
    r: &'a Routed,
    eng: PsEngine,
    cur: Vec<Cursor>,
    outstanding: Vec<u32>,
    early: HashMap<(u32, u64), u32>,
    finished: usize,
    end_ps: f64,
}

impl PlanRun<'_> {
    fn enter(&mut self, rank: usize, now: f64) {
        loop {
            let c = self.cur[rank];
            let Some(st) = self.r.steps.get(c.j) else {
                self.finished += 1;
                self.end_ps = self.end_ps.max(now);
                return;
            };
            let (lo, hi) = (st.send_off[rank] as usize, st.send_off[rank + 1] as usize);
            for &mi in &st.send_idx[lo..hi] {
                self.eng.start(&self.r.fab, &st.msgs[mi as usize], (c.j as u32, mi, c.g), now);
            }
            let mut wait = (hi - lo) as u32 + st.recv_count[rank];
            if st.recv_count[rank] > 0 {
                if let Some(e) = self.early.remove(&(rank as u32, c.g)) {
                    wait -= e;
                }
            }
            self.outstanding[rank] = wait;
            if wait > 0 {
                return;
            }
            self.cur[rank] = advance(c, st.repeat);
        }
    }

    fn complete(&mut self, rank: usize, now: f64) {
        self.outstanding[rank] -= 1;
        if self.outstanding[rank] == 0 {
            let c = self.cur[rank];
            self.cur[rank] = advance(c, self.r.steps[c.j].repeat);
            self.enter(rank, now);
        }
    }
}

/// Event-driven pipelined simulation of `plan`: each message crosses its path as a chain of
/// per-link stages. Stage `k` starts when the message's first packet reaches link `k` (one
/// first-packet serialisation plus link and router latency per hop), links share their
/// bandwidth equally among active stages (processor sharing), and the message is delivered
/// when its last packet has crossed every link: `max_k(end_k + tail_k)` plus the last link's
/// latency, where `tail_k` is what the last packet needs after link `k`.
fn simulate(plan: &Plan, r: &Routed) -> Result<FlowResult, String> {
    let p = plan.ranks as usize;
    let mut sim = PlanRun {
        r,
        eng: PsEngine::new(&r.fab, p),
        cur: vec![Cursor { j: 0, rep: 0, g: 0 }; p],
        outstanding: vec![0; p],
        early: HashMap::new(),
        finished: 0,
        end_ps: 0.0,
    };
    for rank in 0..p {
        sim.enter(rank, 0.0);
    }
    let mut events = 0u64;
    while sim.finished < p {
        let Some((now, delivered)) = sim.eng.step(&r.fab, &r.steps[..]) else {
            return Err(format!("stalled: {} of {p} ranks finished and nothing is in flight", sim.finished));
        };
        events += 1;
        let Some(id) = delivered else { continue };
        let (g, m) = (sim.eng.insts[id as usize].g, sim.eng.msg(&r.steps[..], id));
        let (from, to) = (m.from as usize, m.to as usize);
        sim.complete(from, now);
        if sim.cur[to].g == g && sim.outstanding[to] > 0 {
            sim.complete(to, now);
        } else {
            *sim.early.entry((to as u32, g)).or_insert(0) += 1;
        }
    }
    Ok(FlowResult {
        runtime_ps: sim.end_ps.round() as u64,
        messages: sim.eng.insts.len() as u64,
        events,
        contention_free: false,
    })
}

/// A message started on a [`FlowNet`] (ids count from 0 in the order of [`FlowNet::send`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct FlowMsgId(pub u32);

/// The flow backend's engine driven message by message: start a message between two hosts at
/// any simulated time, and step the engine to learn when each is delivered. The physics and
/// endpoint costs are the plan runner's (the crate docs): the same per-link stages with
/// processor sharing per link, the same lone-message times, the same send and receive
/// timelines per host. Messages follow the topology's default paths (dimension order on tori:
/// a single message has no schedule port to honour).
///
/// Times are picoseconds as `f64` (the fluid model's own clock); an executor rounds them where
/// it records integer times, and starts messages at the exact time of the event that freed
/// them, so chains of messages carry no rounding.
pub struct FlowNet<'t> {
    topo: &'t Topology,
    cfg: FlowConfig,
    router: Router<'t>,
    fab: Fabric,
    paths: Paths,
    /// Every message started, by [`FlowMsgId`] (one engine instance each, same index).
    msgs: Vec<RoutedMsg>,
    eng: PsEngine,
    events: u64,
}

impl<'t> FlowNet<'t> {
    pub fn new(topo: &'t Topology, cfg: &FlowConfig) -> FlowNet<'t> {
        let router = Router::new(topo);
        let fab = fabric(topo, &router, cfg, topo.hosts.len());
        let eng = PsEngine::new(&fab, topo.hosts.len());
        FlowNet { topo, cfg: cfg.clone(), router, fab, paths: Paths::default(), msgs: Vec::new(), eng, events: 0 }
    }

    /// Starts a message of `bytes` payload from host `from` to host `to` at `at_ps`, which must
    /// be no earlier than the last event stepped ([`FlowNet::now_ps`]). A message to its own
    /// host is delivered at once, without endpoint costs.
    pub fn send(&mut self, from: u32, to: u32, bytes: u64, at_ps: f64) -> Result<FlowMsgId, String> {
        if at_ps < self.eng.now || at_ps.is_nan() {
            return Err(format!("a message started at {at_ps} ps, before the last event at {} ps", self.eng.now));
        }
        let m = self.route(from, to, bytes)?;
        let id = self.msgs.len() as u32;
        self.eng.start(&self.fab, &m, (0, id, 0), at_ps);
        self.msgs.push(m);
        Ok(FlowMsgId(id))
    }

    /// A message from `from` to `to` on the topology's default path (and, for a rendezvous, the
    /// path back).
    fn route(&mut self, from: u32, to: u32, bytes: u64) -> Result<RoutedMsg, String> {
        let (topo, cfg) = (self.topo, &self.cfg);
        let p = self.paths.lookup(topo, cfg, &mut self.router, &mut self.fab, (from, to, NO_PORT), None)?;
        let back = match self.fab.rendezvous(bytes) && p.1 > 0 {
            true => Some(self.paths.lookup(topo, cfg, &mut self.router, &mut self.fab, (to, from, NO_PORT), None)?),
            false => None,
        };
        Ok(routed_msg(&self.fab, cfg, (from, to, NO_PORT), bytes, p, back))
    }

    /// The time of the next event, if a message is in flight.
    pub fn next_event_ps(&self) -> Option<f64> {
        self.eng.next_time()
    }

    /// Processes the next event: its time and the message delivered by it, if one was (its
    /// receiver's receive latency and overhead paid). `None`: nothing is in flight.
    pub fn step(&mut self) -> Option<(f64, Option<FlowMsgId>)> {
        let (now, d) = self.eng.step(&self.fab, &self.msgs[..])?;
        self.events += 1;
        Some((now, d.map(FlowMsgId)))
    }

    /// The time of the last event stepped (0 before the first).
    pub fn now_ps(&self) -> f64 {
        self.eng.now
    }

    /// Events processed so far.
    pub fn events(&self) -> u64 {
        self.events
    }

    /// Messages started so far.
    pub fn messages(&self) -> u64 {
        self.msgs.len() as u64
    }

    /// A lone message's time from its start to its delivery on an idle network (no endpoint
    /// overheads queued): what the contention-free recurrence charges it.
    pub fn lone_message_ps(&mut self, from: u32, to: u32, bytes: u64) -> Result<f64, String> {
        let m = self.route(from, to, bytes)?;
        if m.path.1 == 0 {
            return Ok(0.0);
        }
        let ep = self.fab.endpoint;
        Ok(ep.send_overhead_ps as f64
            + ep.send_latency_ps as f64
            + m.wire / m.bottleneck
            + m.delay_ps
            + m.rdv_ps
            + ep.recv_latency_ps as f64
            + ep.recv_overhead_ps as f64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use reducelab_sched::algos::Layout;
    use reducelab_topo::{torus, LinkParams};

    /// The recurrence with overheads as first written: one sort of the whole step's arrivals
    /// by (time, message). The per-receiver grouping must give the same bits.
    fn reference(plan: &Plan, r: &Routed) -> u64 {
        let p = plan.ranks as usize;
        let (os, or) = (r.fab.endpoint.send_overhead_ps as f64, r.fab.endpoint.recv_overhead_ps as f64);
        let (ls, lr) = (r.fab.endpoint.send_latency_ps as f64, r.fab.endpoint.recv_latency_ps as f64);
        let (mut start, mut next) = (vec![0.0f64; p], vec![0.0f64; p]);
        let (mut send_free, mut recv_free) = (vec![0.0f64; p], vec![0.0f64; p]);
        let mut arrivals: Vec<(f64, usize)> = Vec::new();
        for st in &r.steps {
            let dur: Vec<f64> = st.msgs.iter().map(|m| m.wire / m.bottleneck + m.delay_ps + m.rdv_ps).collect();
            for _ in 0..st.repeat {
                next.copy_from_slice(&start);
                arrivals.clear();
                for &i in &send_order(&st.msgs) {
                    let (m, f) = (&st.msgs[i], st.msgs[i].from as usize);
                    if m.path.1 == 0 {
                        next[f] = next[f].max(start[f]);
                        continue;
                    }
                    let ready = start[f].max(send_free[f]) + os;
                    send_free[f] = ready;
                    arrivals.push((ready + ls + dur[i], i));
                }
                arrivals.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
                for &(t, i) in &arrivals {
                    let (f, to) = (st.msgs[i].from as usize, st.msgs[i].to as usize);
                    let done = if or > 0.0 { (t + lr).max(recv_free[to]) + or } else { t + lr };
                    recv_free[to] = done;
                    next[f] = next[f].max(done);
                    next[to] = next[to].max(done);
                }
                std::mem::swap(&mut start, &mut next);
            }
        }
        start.iter().fold(0.0f64, |a, &b| a.max(b)).round() as u64
    }

    #[test]
    fn grouping_arrivals_by_receiver_gives_the_global_sorts_bits() {
        let l = LinkParams { bandwidth_bps: 400_000_000_000, latency_ps: 100_000 };
        // (o_s, l_s, o_r, l_r) in ps, zeros included: each branch of the recurrence.
        let costs = [
            (201_000, 170_000, 310_000, 250_000),
            (0, 0, 500_000, 0),
            (360_000, 0, 0, 0),
            (0, 1, 0, 7),
            (1_000, 0, 90_000_000, 0),
        ];
        let mut checked = 0;
        for dims in [vec![4u32, 4], vec![8, 4], vec![16], vec![4, 4, 4], vec![6, 3], vec![2, 2]] {
            let topo = torus(&dims, l).unwrap();
            let layout = Layout::new(dims.clone()).unwrap();
            for alg in [
                "ring",
                "ring-bidirectional",
                "hamiltonian-rings",
                "bucket",
                "recursive-doubling-latency",
                "swing-latency",
            ] {
                let Ok(pl) = reducelab_sched::plan::plan(alg, &layout) else { continue };
                for bytes in [32u64, 3000, 64 << 10, 8 << 20] {
                    for (k, &(s, sl, rc, rl)) in costs.iter().enumerate() {
                        let endpoint = Endpoint {
                            send_overhead_ps: s,
                            send_latency_ps: sl,
                            recv_overhead_ps: rc,
                            recv_latency_ps: rl,
                            rendezvous_threshold_bytes: (k % 2 == 0).then_some(12_000),
                            injection_bps: None,
                        };
                        let cfg =
                            FlowConfig { switch_latency_ps: 300_000, mtu_bytes: 4096, header_bytes: 64, endpoint };
                        let r = route(&topo, &pl, bytes, 4, &cfg).unwrap();
                        assert_eq!(
                            recurrence_with_overheads(&pl, &r).runtime_ps,
                            reference(&pl, &r),
                            "{alg} {dims:?} {bytes} {endpoint:?}"
                        );
                        checked += 1;
                    }
                }
            }
        }
        assert!(checked >= 400, "{checked}");
    }
}
