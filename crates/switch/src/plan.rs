//! What every process of a software-switch run derives, identically, from the scenario file:
//! the fabric, each switch's forwarding table, the UDP endpoint of every port, the collectives
//! (with the simulator's salt, so contributions are the same values) and the switch programs.
//! Nothing is exchanged between processes but protocol packets: each one recomputes the plan.

use std::net::{Ipv4Addr, SocketAddrV4};

use reducelab_ina::fabric::Fabric;
use reducelab_ina::host::Collective;
use reducelab_ina::{wire, Addr, SwitchProgram, Tenant, NIL};
use reducelab_scenario::ina::{collective_salt, fabric_of, InaSpec, InaSwitchSpec};
use reducelab_scenario::Traffic;
use serde::Serialize;

use crate::host::HostReport;

/// How a run's endpoints are given (every process of a run must be given the same).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum EndpointSpec {
    /// Node `n`'s port `p` is `ip_base + n : port_base + p`, all on loopback (`--ip-base`,
    /// `--port-base`): one machine, each node with its own 127/8 address.
    Loopback(Ipv4Addr, u16),
    /// An endpoints file (`--endpoints F`): each node's own address and port base, any unicast
    /// IPv4 address, so a fabric may span machines. `path` names it in errors.
    Map { path: String, text: String },
}

impl From<(Ipv4Addr, u16)> for EndpointSpec {
    fn from((ip, port): (Ipv4Addr, u16)) -> EndpointSpec {
        EndpointSpec::Loopback(ip, port)
    }
}

impl EndpointSpec {
    /// `IP_BASE:PORT_BASE` (loopback) or `file:PATH` (an endpoints file, read here): the
    /// C ABI's and `REDUCELAB_INNET_ADDR`'s form.
    pub fn parse(s: &str) -> Result<EndpointSpec, String> {
        if let Some(path) = s.strip_prefix("file:") {
            let text = std::fs::read_to_string(path).map_err(|e| format!("endpoints: {path}: {e}"))?;
            return Ok(EndpointSpec::Map { path: path.to_string(), text });
        }
        let (ip, port) =
            s.rsplit_once(':').ok_or_else(|| format!("endpoints: `{s}` is neither IP_BASE:PORT_BASE nor file:PATH"))?;
        let ip: Ipv4Addr = ip.parse().map_err(|_| format!("endpoints: `{ip}` is not an IPv4 address"))?;
        let port: u16 = port.parse().map_err(|_| format!("endpoints: `{port}` is not a port"))?;
        Ok(EndpointSpec::Loopback(ip, port))
    }

    /// Every node's endpoints in a topology whose node `n` has `ports[n]` ports.
    pub fn resolve(self, ports: &[usize]) -> Result<Endpoints, String> {
        match self {
            EndpointSpec::Loopback(ip, port) => {
                Endpoints::new(ip, port, ports.len(), ports.iter().copied().max().unwrap_or(0))
            }
            EndpointSpec::Map { path, text } => Endpoints::from_map(&path, &text, ports),
        }
    }

    /// The command-line options that give these endpoints to another process of the run.
    pub fn args(&self) -> Vec<String> {
        match self {
            EndpointSpec::Loopback(ip, port) => {
                vec!["--ip-base".into(), ip.to_string(), "--port-base".into(), port.to_string()]
            }
            EndpointSpec::Map { path, .. } => vec!["--endpoints".into(), path.clone()],
        }
    }
}

/// Where each port of each node listens: node `n`'s port `p` is its base address's port + `p`.
/// With `EndpointSpec::Loopback` every node has its own loopback address (all of 127.0.0.0/8
/// reaches the local machine on Linux), so a port number alone names a port of a node and
/// `ss -u` reads like the topology.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Endpoints {
    bases: Vec<SocketAddrV4>,
}

impl Endpoints {
    /// Checks that every endpoint of `nodes` nodes with up to `ports` ports stays on loopback.
    pub fn new(ip_base: Ipv4Addr, port_base: u16, nodes: usize, ports: usize) -> Result<Endpoints, String> {
        let first = u32::from(ip_base);
        let last = first as u64 + nodes as u64;
        if ip_base.octets()[0] != 127 || last > u32::from(Ipv4Addr::new(127, 255, 255, 254)) as u64 {
            return Err(format!("ip_base: {ip_base} + {nodes} nodes leaves 127.0.0.0/8 (an --ip-base run stays on loopback; other addresses need an --endpoints file)"));
        }
        if ip_base.octets()[3] == 0 && ip_base.octets()[1] == 0 && ip_base.octets()[2] == 0 {
            return Err(format!("ip_base: {ip_base} is the network address"));
        }
        if port_base == 0 || port_base as usize + ports > 65535 {
            return Err(format!("port_base: {port_base} + {ports} ports does not fit 1..=65535"));
        }
        Ok(Endpoints {
            bases: (0..nodes as u32).map(|n| SocketAddrV4::new(Ipv4Addr::from(first + n), port_base)).collect(),
        })
    }

    /// From an endpoints file: one line per node, `NODE ADDRESS:PORT_BASE` (`#` starts a
    /// comment), every node of the topology exactly once; node `NODE`'s port `p` listens at
    /// `ADDRESS:PORT_BASE + p`. `ports[n]` is node `n`'s number of ports. Errors name the file,
    /// the line and the field.
    pub fn from_map(path: &str, text: &str, ports: &[usize]) -> Result<Endpoints, String> {
        let nodes = ports.len();
        let mut bases: Vec<Option<SocketAddrV4>> = vec![None; nodes];
        for (i, raw) in text.lines().enumerate() {
            let line = raw.split('#').next().unwrap_or("").trim();
            if line.is_empty() {
                continue;
            }
            let at = |what: String| format!("endpoints: {path} line {}: {what}", i + 1);
            let mut f = line.split_whitespace();
            let (node, addr) = match (f.next(), f.next(), f.next()) {
                (Some(n), Some(a), None) => (n, a),
                _ => return Err(at(format!("`{line}` is not `NODE ADDRESS:PORT_BASE`"))),
            };
            let node: usize = node.parse().map_err(|_| at(format!("node: `{node}` is not a node id")))?;
            if node >= nodes {
                return Err(at(format!("node: {node} is not a node of the topology ({nodes} nodes)")));
            }
            let base: SocketAddrV4 = addr.parse().map_err(|_| at(format!("address: `{addr}` is not IPV4:PORT")))?;
            let ip = *base.ip();
            if ip.is_unspecified() || ip.is_broadcast() || ip.is_multicast() {
                return Err(at(format!("address: {ip} is not a unicast address")));
            }
            if base.port() == 0 || base.port() as usize + ports[node] > 65535 {
                return Err(at(format!(
                    "address: port base {} + {} ports does not fit 1..=65535",
                    base.port(),
                    ports[node]
                )));
            }
            if bases[node].is_some() {
                return Err(at(format!("node: {node} is listed twice")));
            }
            bases[node] = Some(base);
        }
        if let Some(n) = bases.iter().position(|b| b.is_none()) {
            return Err(format!(
                "endpoints: {path}: node {n} is missing (every node of the topology needs a line, {nodes} nodes)"
            ));
        }
        let bases: Vec<SocketAddrV4> = bases.into_iter().map(|b| b.expect("checked")).collect();
        // Two nodes on one address must not share a port.
        let mut spans: Vec<(Ipv4Addr, u32, u32, usize)> = bases
            .iter()
            .enumerate()
            .map(|(n, b)| (*b.ip(), b.port() as u32, b.port() as u32 + ports[n] as u32, n))
            .collect();
        spans.sort_unstable();
        for w in spans.windows(2) {
            let ((ip0, _, end0, n0), (ip1, start1, _, n1)) = (w[0], w[1]);
            if ip0 == ip1 && start1 < end0 {
                return Err(format!("endpoints: {path}: nodes {n0} and {n1} both use ports of {ip0} from {start1} (node {n0} has {} ports)", ports[n0]));
            }
        }
        Ok(Endpoints { bases })
    }

    pub fn of(&self, node: u32, port: u16) -> SocketAddrV4 {
        let b = self.bases[node as usize];
        SocketAddrV4::new(*b.ip(), b.port() + port)
    }
}

/// A scenario's in-network allreduces, laid out for the software switch.
pub struct InaPlan {
    pub name: String,
    pub seed: u64,
    pub fabric: Fabric,
    pub specs: Vec<InaSpec>,
    pub colls: Vec<Collective>,
    /// The training jobs among them (their partitions' allreduces), in traffic order.
    pub training: Vec<TrainingJob>,
    pub switch: InaSwitchSpec,
    pub endpoints: Endpoints,
    /// `routes[node][dst]`: the ports of switch `node` on a shortest path to node `dst`
    /// (empty for hosts and unreachable nodes).
    routes: Vec<Vec<Vec<u16>>>,
    /// Largest elements per packet of any collective (the switches' value slab stride).
    pub max_elems: u16,
    /// Per collective: whether its protocol carries a payload of its own
    /// ([`reducelab_ina::InaProtocol::carries_payload`]) instead of dense values.
    payload: Vec<bool>,
}

/// A training job of a plan: its partitions are allreduces `specs` of the plan, in send order.
#[derive(Clone, Debug)]
pub struct TrainingJob {
    pub model: &'static str,
    pub workers: Vec<u32>,
    /// When the job starts (its partitions' ready times count from the run's start too).
    pub start_ps: u64,
    pub specs: std::ops::Range<usize>,
}

/// One training job as the software switch ran it (`run`'s `training_jobs`).
#[derive(Clone, Debug, Serialize)]
pub struct TrainingJobResult {
    pub job: usize,
    pub model: &'static str,
    pub workers: usize,
    pub partitions: usize,
    /// The job's start, seconds from the hosts' common start.
    pub start_s: f64,
    /// From its start until its last worker had the last block of its last partition (`None`
    /// unless every worker reported every partition verified).
    pub jct_s: Option<f64>,
    pub verified: bool,
}

/// Largest UDP payload of an IPv4 datagram.
pub const MAX_DATAGRAM: usize = 65507;

impl InaPlan {
    /// From a scenario's text (`seed` overrides the scenario's) and the run's endpoints (an
    /// `(ip_base, port_base)` pair is loopback). Errors name the field.
    pub fn from_scenario(text: &str, seed: Option<u64>, endpoints: impl Into<EndpointSpec>) -> Result<InaPlan, String> {
        let sc = reducelab_scenario::load_scenario_str(text, seed).map_err(|e| e.to_string())?;
        // The in-network allreduces in the simulator's order: traffic order, a training entry's
        // partitions job by job (their tenants are their indices here, as there).
        let mut specs: Vec<InaSpec> = Vec::new();
        let mut training = Vec::new();
        for t in &sc.traffic {
            match t {
                Traffic::Ina(s) => specs.push(s.clone()),
                Traffic::InaTraining(tr) => {
                    let base = specs.len();
                    training.extend(tr.jobs.iter().map(|j| TrainingJob {
                        model: j.model.name,
                        workers: j.workers.clone(),
                        start_ps: j.start_ps,
                        specs: base + j.specs.start..base + j.specs.end,
                    }));
                    specs.extend(tr.specs.iter().cloned());
                }
                t => {
                    return Err(format!(
                        "traffic: a {} entry; the software switch runs ina_allreduce traffic and training jobs",
                        t.kind()
                    ))
                }
            }
        }
        if specs.is_empty() {
            return Err("traffic: no ina_allreduce entry (this runs in-network allreduces; a training job of switchml, atp or dsa takes application data through a session: Session, RL_Innet_open, reducelab.innet.Session)".into());
        }
        for s in &specs {
            s.protocol.software_switch()?;
        }
        let topo = &sc.topology;
        if topo.nodes.iter().any(|n| n.host.is_some() && n.forwards) {
            return Err(format!(
                "topology: {} has forwarding hosts; in-network aggregation needs an indirect network",
                topo.name
            ));
        }
        if let Some(n) = topo.nodes.iter().find(|n| n.host.is_none() && n.ports.len() > 32) {
            return Err(format!(
                "topology: a switch with {} ports; the software switch handles at most 32 (one restoration shard)",
                n.ports.len()
            ));
        }
        let endpoints = endpoints.into().resolve(&topo.nodes.iter().map(|n| n.ports.len()).collect::<Vec<_>>())?;
        let fabric = fabric_of(topo);
        let mut colls = Vec::new();
        for (ci, s) in specs.iter().enumerate() {
            // Values are always carried: the software switch aggregates real element values.
            colls.push(
                Collective::new(
                    ci as u16,
                    s.hosts.clone(),
                    s.bytes,
                    s.elems_per_packet,
                    collective_salt(sc.seed),
                    true,
                )
                .map_err(|r| format!("traffic: {r}"))?,
            );
        }
        let max_elems = specs.iter().map(|s| s.elems_per_packet).max().unwrap_or(1);
        if max_elems > sc.ina.max_elements_per_packet {
            return Err(format!(
                "max_elements_per_packet: a collective uses {max_elems} elements per packet, the switches aggregate {}",
                sc.ina.max_elements_per_packet
            ));
        }
        // One UDP datagram per packet: the frame's header (and fingerprint) and the payload (4 B
        // per element, or the protocol's own).
        for (s, c) in specs.iter().zip(&colls) {
            let payload = s.protocol.max_payload_bytes(c);
            let overhead = s.protocol.frame().overhead_bytes();
            if payload + overhead > MAX_DATAGRAM || payload / 4 > u16::MAX as usize {
                let what = if s.protocol.carries_payload() {
                    format!("{} packets carry up to {payload} payload bytes", s.protocol.label())
                } else {
                    format!("{} elements", c.elems_per_packet)
                };
                return Err(format!("elements_per_packet: {} per packet: {what}, which do not fit one UDP datagram ({MAX_DATAGRAM} bytes with the {overhead}-byte header and fingerprint)", c.elems_per_packet));
            }
        }
        let payload = specs.iter().map(|s| s.protocol.carries_payload()).collect();
        let routes = routes_of(&fabric);
        Ok(InaPlan {
            name: sc.name.clone(),
            seed: sc.seed,
            fabric,
            specs,
            colls,
            training,
            switch: sc.ina.clone(),
            endpoints,
            routes,
            max_elems,
            payload,
        })
    }

    /// When rank `rank` of collective `ci` joins it, in ps from the run's start: the
    /// partition's ready time on that worker for a training job's allreduce (the simulator's
    /// draws from the seed), the entry's `start_ns` for an `ina_allreduce`.
    pub fn rank_start_ps(&self, ci: usize, rank: u32) -> u64 {
        let s = &self.specs[ci];
        s.rank_start.get(rank as usize).unwrap_or(&s.start).ps()
    }

    /// The training jobs' results from the hosts' reports: a job's completion time is from its
    /// start to the last block of its last partition on any of its workers (the simulator's
    /// `jct_ps`, here in wall-clock seconds from the hosts' common start).
    pub fn training_results(&self, reports: &[HostReport]) -> Vec<TrainingJobResult> {
        self.training
            .iter()
            .enumerate()
            .map(|(j, job)| {
                let mine =
                    || reports.iter().flat_map(|r| &r.collectives).filter(|c| job.specs.contains(&(c.tenant as usize)));
                // A verified collective has every block (`finished_s` is set).
                let verified = mine().count() == job.specs.len() * job.workers.len() && mine().all(|c| c.verified);
                let last = mine().filter_map(|c| c.finished_s).fold(0.0, f64::max);
                let start_s = job.start_ps as f64 * 1e-12;
                TrainingJobResult {
                    job: j,
                    model: job.model,
                    workers: job.workers.len(),
                    partitions: job.specs.len(),
                    start_s,
                    jct_s: verified.then_some(last - start_s),
                    verified,
                }
            })
            .collect()
    }

    /// Every node's switch program (`None` for hosts), as the simulator builds them.
    pub fn programs(&self) -> Result<Vec<Option<Box<dyn SwitchProgram>>>, String> {
        let tenants: Vec<Tenant<'_>> = self
            .specs
            .iter()
            .zip(&self.colls)
            .map(|(s, c)| Tenant { coll: c, protocol: &*s.protocol, roots: &s.roots })
            .collect();
        let cfg = self.switch.config(&*self.specs[0].protocol)?;
        self.specs[0].protocol.switch_programs(&self.fabric, &tenants, &cfg)
    }

    /// The frame the scenario's protocol travels in (every in-network collective of a scenario
    /// uses one protocol).
    pub fn frame(&self) -> wire::Frame {
        self.specs[0].protocol.frame()
    }

    /// The protocol and collective of tenant `tenant` when that protocol carries a payload of
    /// its own (`None`: dense values in the frame, or no such tenant). Switches and hosts call
    /// its `encode_payload` / `decode_payload` for every such packet, whatever the protocol.
    pub fn payload_protocol(&self, tenant: u16) -> Option<(&dyn reducelab_ina::InaProtocol, &Collective)> {
        let t = tenant as usize;
        if *self.payload.get(t)? {
            Some((&*self.specs[t].protocol, &self.colls[t]))
        } else {
            None
        }
    }

    /// The program of switch `node` alone.
    pub fn program(&self, node: u32) -> Result<Option<Box<dyn SwitchProgram>>, String> {
        self.check_switch(node)?;
        Ok(self.programs()?.into_iter().nth(node as usize).flatten())
    }

    pub fn check_switch(&self, node: u32) -> Result<(), String> {
        check_switch(&self.fabric, node)
    }

    /// Switch node ids.
    pub fn switches(&self) -> Vec<u32> {
        switches_of(&self.fabric)
    }

    /// Hosts taking part in some collective, ascending.
    pub fn hosts(&self) -> Vec<u32> {
        let mut h: Vec<u32> = self.specs.iter().flat_map(|s| s.hosts.iter().copied()).collect();
        h.sort_unstable();
        h.dedup();
        h
    }

    /// The node a packet for `dst` goes to (`None`: `FirstHop`, which only a host may use).
    pub fn dst_node(&self, dst: Addr) -> Option<u32> {
        match dst {
            Addr::Host(h) => self.fabric.host_nodes.get(h as usize).copied(),
            Addr::Switch(s) if s != NIL && (s as usize) < self.fabric.nodes.len() => Some(s),
            _ => None,
        }
    }

    /// The egress port of switch `node` for a packet to node `dst`: among the shortest paths,
    /// the one the packet id hashes to (ECMP per block, so every contribution of a block meets
    /// at the same switches: Canary's trees form where routes join). `None`: unreachable.
    pub fn route(&self, node: u32, dst: u32, id: u32) -> Option<u16> {
        route_in(&self.routes, node, dst, id)
    }
}

/// Among switch `node`'s shortest-path ports to node `dst` in `routes` ([`routes_of`]), the one
/// `key` hashes to (`None`: unreachable). Shared by the Canary and the pool plans.
pub(crate) fn route_in(routes: &[Vec<Vec<u16>>], node: u32, dst: u32, key: u32) -> Option<u16> {
    let c = routes.get(node as usize)?.get(dst as usize)?;
    match c.len() {
        0 => None,
        1 => Some(c[0]),
        k => Some(c[(reducelab_ina::mix(key as u64) % k as u64) as usize]),
    }
}

/// `Ok` when `node` is a switch of `f`, else the error naming the node (the `--node` argument).
pub(crate) fn check_switch(f: &Fabric, node: u32) -> Result<(), String> {
    match f.nodes.get(node as usize) {
        None => Err(format!("node: {node} is not a node of the topology ({} nodes)", f.nodes.len())),
        Some(n) if n.is_host => Err(format!("node: {node} is a host, not a switch")),
        Some(_) => Ok(()),
    }
}

/// The switch node ids of `f`, ascending.
pub(crate) fn switches_of(f: &Fabric) -> Vec<u32> {
    (0..f.nodes.len() as u32).filter(|&n| !f.nodes[n as usize].is_host).collect()
}

pub(crate) fn routes_of(f: &Fabric) -> Vec<Vec<Vec<u16>>> {
    let n = f.nodes.len();
    let dist: Vec<Vec<u32>> = (0..n as u32).map(|d| f.bfs_from(d)).collect();
    (0..n)
        .map(|s| {
            if f.nodes[s].is_host {
                return Vec::new();
            }
            (0..n)
                .map(|d| {
                    let here = dist[d][s];
                    if d == s || here == u32::MAX {
                        return Vec::new();
                    }
                    f.nodes[s]
                        .ports
                        .iter()
                        .enumerate()
                        .filter(|(_, &(peer, _))| {
                            dist[d][peer as usize] != u32::MAX
                                && dist[d][peer as usize] + 1 == here
                                && (peer as usize == d || f.nodes[peer as usize].forwards)
                        })
                        .map(|(p, _)| p as u16)
                        .collect()
                })
                .collect()
        })
        .collect()
}
