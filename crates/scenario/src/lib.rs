//! The scenario file format (TOML), from text to a validated [`Scenario`]: what every driver
//! of a scenario reads (the simulator, `reducelab-sim`; the software switch and the MPI
//! runtime's in-network path, `reducelab-switch`), so none of them needs another's code. See
//! `docs/scenario-format.md`.
//!
//! Parsing is strict: unknown keys, wrong types and impossible values are errors that name the
//! field by its dotted path (`network.routing`, `traffic[1].bytes`) and say why.
//!
//! [`parse`] reads the file into its serde schema (`schema.rs`); [`ScenarioFile::resolve`]
//! validates it into a [`Scenario`] with the help of `topology.rs`, `network.rs`,
//! `transport.rs`, `traffic.rs` (with `ina.rs` for `ina_allreduce` entries and `[ina]`,
//! `training.rs` for `training` entries) and `backend.rs`; `units.rs` converts and range-checks
//! values. `pspin.rs` reads the other kind of scenario file, one Flare PsPIN switch with no
//! network (`[pspin]`). `schedule_cache.rs` keeps the collective schedules and plans built for scenarios
//! (process-wide: a sweep over sizes builds each once); `message_lists.rs` reads long explicit
//! message lists lean.

mod backend;
pub mod ina;
mod message_lists;
mod network;
pub mod pspin;
pub mod schedule_cache;
mod schema;
mod topology;
mod traffic;
pub mod training;
mod transport;
mod units;

pub use backend::{flow_at_every_size, flow_config, Backend, AUTO_FLOW_MIN_BYTES, PACKET_MAX_FINGERPRINTS};
pub use network::line_rate_buffer_bytes;
pub use schema::{
    ArbitrationSpec, BufferSpec, EndpointSpec, FaultKind, FaultSpec, FlowControlSpec, HostsSpec, InaSection,
    NetworkSpec, NoiseModeSpec, NoiseSpec, RouterSpec, RoutingSpec, RunSpec, ScenarioFile, SpraySpec, TopologyKind,
    TopologySpec, TrafficKind, TrafficSpec, TransportKindSpec, TransportParams, TransportSpec,
};
pub use schema::{
    CollectiveEntry, DcqcnKeys, DctcpKeys, InaAllreduceEntry, IncastEntry, MessagesEntry, NdpKeys, NoTransportKeys,
    PermutationEntry, PspinAllreduceSpec, PspinSection, RandomPermutationEntry, RandomUniformEntry, TrainingEntry,
};
pub use traffic::{GoalSpec, RandomPermutation, Redraw, Traffic};
pub use units::ps_to_us;
pub(crate) use units::{ns_to_ps, pos_f64};

use backend::layout_name;
use network::{resolve_ecn_red, resolve_router};
use reducelab_des::{SimDuration, SimTime};
use reducelab_net::{Fault, FlowControl, NetConfig, RoutingAlgo};
use reducelab_topo::Topology;
use std::fmt;
use traffic::{check_finishes_in_time, ina_specs_empty, random_roots, resolve_traffic};

/// The watchdog's default: 10 ms of simulated time, or, if longer, the longest time an
/// in-network protocol's hosts recover by themselves (`InaProtocol::recovery_horizon_ps`; for
/// Canary `MAX_EXPIRIES + 2` retransmission timeouts): the watchdog must not cut a recovery
/// short, and a run whose hosts gave up then says so.
pub const DEFAULT_WATCHDOG_PS: u64 = 10_000_000_000;

/// A validated scenario, ready to assemble.
pub struct Scenario {
    pub name: String,
    pub seed: u64,
    pub topology: Topology,
    pub net: NetConfig,
    /// The simulator that runs it (`run.backend` resolved: never `Auto`).
    pub backend: Backend,
    /// Why (summary.json's `backend_reason`).
    pub backend_reason: String,
    pub traffic: Vec<Traffic>,
    pub faults: Vec<Fault>,
    /// Per-link loss probabilities overriding `network.loss_probability`.
    pub link_loss: Vec<(u32, f64)>,
    pub time_limit: Option<SimTime>,
    /// No-progress watchdog: a run whose finite work has not moved for this long ends as
    /// stalled (`None`: off).
    pub watchdog: Option<SimDuration>,
    /// Switch resources for in-network aggregation.
    pub ina: ina::InaSwitchSpec,
    /// Per-host endpoint costs (`[endpoint]`).
    pub endpoint: reducelab_net::EndpointConfig,
    /// End-to-end transport of message traffic (`[transport]`, or the one `[[traffic]]`
    /// entries name).
    pub transport: reducelab_net::TransportConfig,
    /// Traffic entries (message tags) whose messages go without it (`transport = "none"`).
    pub raw_traffic: Vec<u64>,
    /// The in-network collectives set up on the topology (switch programs built), when there
    /// are any: validating them builds them, so the run takes these instead of building again.
    pub ina_setup: Option<ina::InaSetup>,
    /// The training entry laid out on the topology, when there is one (the same reason).
    pub training_layout: Option<reducelab_ina::pool_jobs::TrainingLayout>,
    /// LogGP parameters of `run.backend = "loggp"` (`[loggp]`).
    pub loggp: reducelab_goal::LogGpParams,
}

/// A scenario error: `field` is the dotted path of the offending field (e.g.
/// `topology.dims[1]`), `reason` says why it is wrong.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ScenarioError {
    pub field: String,
    pub reason: String,
}

impl fmt::Display for ScenarioError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.field.is_empty() {
            write!(f, "{}", self.reason)
        } else {
            write!(f, "{}: {}", self.field, self.reason)
        }
    }
}
impl std::error::Error for ScenarioError {}

/// A PsPIN switch's configuration error (`[pspin]` scenarios) names its field the same way.
impl From<reducelab_flare::pspin::ConfigError> for ScenarioError {
    fn from(e: reducelab_flare::pspin::ConfigError) -> Self {
        ScenarioError { field: e.field, reason: e.reason }
    }
}

/// Parses and validates a TOML scenario without running it.
pub fn load_scenario_str(text: &str, seed: Option<u64>) -> Result<Scenario, ScenarioError> {
    parse(text)?.resolve(seed)
}

/// [`load_scenario_str`] of the file at `path`, its relative file paths (GOAL traces) read from
/// the file's directory.
pub fn load_scenario_file(path: &std::path::Path, seed: Option<u64>) -> Result<Scenario, ScenarioError> {
    let text = std::fs::read_to_string(path)
        .map_err(|err| ScenarioError { field: String::new(), reason: format!("{}: {err}", path.display()) })?;
    let mut file = parse(&text)?;
    file.base_dir = path.parent().map(|d| d.to_path_buf());
    file.resolve(seed)
}

fn e<T>(field: impl Into<String>, reason: impl Into<String>) -> Result<T, ScenarioError> {
    Err(ScenarioError { field: field.into(), reason: reason.into() })
}

/// Parses TOML text into a [`ScenarioFile`], with the dotted path of any error.
///
/// Explicit message lists are read by a lean reader ([`crate::message_lists`]) so that memory
/// stays proportional to the messages; the result is the same as the full parser's.
pub fn parse(text: &str) -> Result<ScenarioFile, ScenarioError> {
    let Some((lean, lists)) = crate::message_lists::extract(text) else { return parse_toml(text) };
    // Line numbers are the same in `lean`, and its `list` values are empty, so an error here is
    // the error the full text would give.
    let mut file = parse_toml(&lean)?;
    for (t, list) in lists {
        match file.traffic.get_mut(t) {
            Some(TrafficSpec::Messages(spec)) if spec.list.as_ref().is_some_and(|l| l.is_empty()) => {
                spec.list = Some(list)
            }
            // The lean reader misread the structure: let the full parser read it all.
            _ => return parse_toml(text),
        }
    }
    Ok(file)
}

pub(crate) fn parse_toml(text: &str) -> Result<ScenarioFile, ScenarioError> {
    let de = toml::Deserializer::new(text);
    let mut file: ScenarioFile = serde_path_to_error::deserialize(de).map_err(|err| {
        let mut path = err.path().to_string();
        let inner = err.into_inner();
        let mut reason = inner.message().to_string();
        // serde names the table that lacks a required key; point at the key itself.
        if let Some(key) = reason.strip_prefix("missing field `").and_then(|r| r.split('`').next()) {
            path = if path == "." { key.to_string() } else { format!("{path}.{key}") };
        }
        // An unknown key of `[topology]`, `[transport]` or a `[[traffic]]` entry: list the keys of the
        // entry's kind only (serde's list mixes every kind's).
        if let Some(key) = reason.strip_prefix("unknown field `").and_then(|r| r.split('`').next()) {
            if let Some(keys) = kind_keys(text, &path) {
                reason = format!("unknown field `{key}`; {keys}");
            }
        }
        if let Some(span) = inner.span() {
            let line = text[..span.start.min(text.len())].matches('\n').count() + 1;
            reason = format!("{reason} (line {line})");
        }
        ScenarioError { field: if path == "." { String::new() } else { path }, reason }
    })?;
    if file.pspin.is_some() {
        // One PsPIN switch and nothing around it.
        let doc = toml_edit::ImDocument::parse(text)
            .map_err(|e| ScenarioError { field: String::new(), reason: e.to_string() })?;
        if let Some((key, _)) =
            doc.as_table().iter().find(|(k, _)| !["name", "description", "seed", "pspin"].contains(k))
        {
            return e(key, "a [pspin] scenario runs one PsPIN switch with no network: it takes `name`, `description`, `seed` and `[pspin]` only");
        }
        return Ok(file);
    }
    if file.topology.is_none() {
        return e("topology", "missing field `topology` (or a `[pspin]` table, for one PsPIN switch with no network)");
    }
    // Each `[[traffic]]` entry by its kind: the keys of its kind only.
    for (i, table) in std::mem::take(&mut file.traffic_tables).into_iter().enumerate() {
        let spec = TrafficSpec::from_table(table).map_err(|(path, reason)| {
            let field = if path.is_empty() { format!("traffic[{i}]") } else { format!("traffic[{i}].{path}") };
            let reason = match line_of(text, &field) {
                Some(line) => format!("{reason} (line {line})"),
                None => reason,
            };
            ScenarioError { field, reason }
        })?;
        file.traffic.push(spec);
    }
    // `[transport]`, its keys read for its kind (or the transport the traffic names).
    let named = file.traffic.iter().filter_map(|t| t.transport()).find(|&k| k != TransportKindSpec::None);
    file.transport =
        TransportSpec::from_table(std::mem::take(&mut file.transport_table), named).map_err(|(key, reason)| {
            let field = format!("transport.{key}");
            let reason = match line_of(text, &field) {
                Some(line) => format!("{reason} (line {line})"),
                None => reason,
            };
            ScenarioError { field, reason }
        })?;
    Ok(file)
}

/// The line of `text` where the value at `path` (`traffic[2].hosts[1]`) is written, or of the
/// nearest enclosing value found.
fn line_of(text: &str, path: &str) -> Option<usize> {
    use toml_edit::{Item, Table, Value};
    #[derive(Clone, Copy)]
    enum Node<'a> {
        Table(&'a Table),
        Item(&'a Item),
        Value(&'a Value),
    }
    enum Step<'p> {
        Key(&'p str),
        Index(usize),
    }
    let mut steps = Vec::new();
    for seg in path.split('.') {
        let mut parts = seg.split('[');
        steps.push(Step::Key(parts.next()?));
        for ix in parts {
            steps.push(Step::Index(ix.trim_end_matches(']').parse().ok()?));
        }
    }
    let doc = toml_edit::ImDocument::parse(text).ok()?;
    let mut node = Node::Table(doc.as_table());
    let mut span = None;
    for step in steps {
        let next = match (node, step) {
            (Node::Table(t), Step::Key(k)) | (Node::Item(Item::Table(t)), Step::Key(k)) => t.get(k).map(Node::Item),
            (Node::Item(Item::Value(v)), Step::Key(k)) | (Node::Value(v), Step::Key(k)) => {
                v.as_inline_table().and_then(|t| t.get(k)).map(Node::Value)
            }
            (Node::Item(Item::ArrayOfTables(a)), Step::Index(i)) => a.get(i).map(Node::Table),
            (Node::Item(Item::Value(v)), Step::Index(i)) | (Node::Value(v), Step::Index(i)) => {
                v.as_array().and_then(|a| a.get(i)).map(Node::Value)
            }
            _ => None,
        };
        let Some(n) = next else { break };
        node = n;
        span = match n {
            Node::Table(t) => t.span(),
            Node::Item(i) => i.span(),
            Node::Value(v) => v.span(),
        }
        .or(span);
    }
    let start = span?.start.min(text.len());
    Some(text[..start].matches('\n').count() + 1)
}

/// The keys valid where the unknown key at `path` (`topology.K`, `transport.K`, `traffic[i].K`)
/// stands, for
/// the kind of its table, as a sentence (`None`: another table, or no kind to go by).
fn kind_keys(text: &str, path: &str) -> Option<String> {
    use serde::de::{value, Deserialize, IntoDeserializer};
    let (table, _) = path.rsplit_once('.')?;
    let doc: toml::Table = text.parse().ok()?;
    let sentence = |kind: &str, keys: Vec<&str>| {
        let keys: Vec<String> = keys.iter().map(|k| format!("`{k}`")).collect();
        format!("kind = \"{kind}\" takes {}", keys.join(", "))
    };
    if table == "topology" {
        let kind = doc.get("topology")?.get("kind")?.as_str()?;
        let de: value::StrDeserializer<'_, value::Error> = kind.into_deserializer();
        let k = TopologyKind::deserialize(de).ok()?;
        let common = ["kind", "bandwidth_gbps", "latency_ns"];
        return Some(sentence(kind, common.iter().chain(k.keys()).copied().collect()));
    }
    None
}

fn req<T: Copy>(field: &str, v: Option<T>, kind: &str) -> Result<T, ScenarioError> {
    match v {
        Some(v) => Ok(v),
        None => e(field, format!("is required for kind = \"{kind}\"")),
    }
}

impl ScenarioFile {
    /// Validates every field and builds the topology.
    pub fn resolve(&self, seed_override: Option<u64>) -> Result<Scenario, ScenarioError> {
        if self.name.trim().is_empty() {
            return e("name", "must not be empty");
        }
        let Some(topology_spec) = &self.topology else {
            return e("topology", "missing field `topology` (a `[pspin]` scenario is run by reducelab_sim::pspin_run)");
        };
        let topology = topology_spec.build()?;
        let tspec = topology_spec.expanded()?;
        let tspec = tspec.as_ref().unwrap_or(topology_spec);
        let nw = &self.network;
        if nw.mtu_bytes < 64 || nw.mtu_bytes > 65536 {
            return e("network.mtu_bytes", format!("must be within 64..=65536, got {}", nw.mtu_bytes));
        }
        if nw.header_bytes >= nw.mtu_bytes {
            return e(
                "network.header_bytes",
                format!("must be smaller than mtu_bytes ({}), got {}", nw.mtu_bytes, nw.header_bytes),
            );
        }
        let switch_latency_ps = ns_to_ps("network.switch_latency_ns", nw.switch_latency_ns)?;
        let buffer_bytes = match nw.buffer_bytes {
            BufferSpec::Bytes(b) => b,
            BufferSpec::LineRate => {
                // The largest any class of link needs (one class on a direct network).
                tspec
                    .link_classes()
                    .iter()
                    .map(|&(bw, lat)| line_rate_buffer_bytes(bw, lat, nw.switch_latency_ns, nw.mtu_bytes))
                    .max()
                    .unwrap_or(256 << 10)
            }
        };
        if nw.flow_control == FlowControlSpec::Credit && buffer_bytes < nw.mtu_bytes as u64 {
            return e(
                "network.buffer_bytes",
                format!(
                    "must hold at least one MTU ({} bytes) with credit flow control, got {}",
                    nw.mtu_bytes, buffer_bytes
                ),
            );
        }
        if buffer_bytes == 0 {
            return e("network.buffer_bytes", "must be > 0");
        }
        if nw.flow_control != FlowControlSpec::Pfc {
            for (key, set) in [
                ("network.pfc_xoff_bytes", nw.pfc_xoff_bytes.is_some()),
                ("network.pfc_xon_bytes", nw.pfc_xon_bytes.is_some()),
                ("network.pfc_headroom_bytes", nw.pfc_headroom_bytes.is_some()),
            ] {
                if set {
                    return e(key, "applies only with network.flow_control = \"pfc\"");
                }
            }
        }
        if nw.adaptive_threshold_bytes.is_some() && nw.routing != RoutingSpec::Canary {
            return e(
                "network.adaptive_threshold_bytes",
                "applies only with routing = \"canary\" (threshold-adaptive routing)",
            );
        }
        if nw.spray == SpraySpec::Packet && !matches!(nw.routing, RoutingSpec::Ecmp | RoutingSpec::Adaptive) {
            return e("network.spray", "\"packet\" applies only with routing = \"ecmp\" or \"adaptive\" (the others break ties by destination, not by flow)");
        }
        for (key, p) in [
            ("network.loss_probability", nw.loss_probability),
            ("network.duplicate_probability", nw.duplicate_probability),
            ("network.reorder_probability", nw.reorder_probability),
        ] {
            if !(0.0..=1.0).contains(&p) {
                return e(key, format!("must be within [0, 1], got {p}"));
            }
        }
        let reorder_delay_ps = match (nw.reorder_probability > 0.0, nw.reorder_delay_ns) {
            (true, None) => {
                return e(
                    "network.reorder_delay_ns",
                    "needed with network.reorder_probability > 0: how long a held packet waits",
                )
            }
            (false, Some(_)) => {
                return e("network.reorder_delay_ns", "applies only with network.reorder_probability > 0")
            }
            (true, Some(ns)) if ns.is_nan() || ns <= 0.0 => {
                return e("network.reorder_delay_ns", format!("must be > 0, got {ns}"))
            }
            (true, Some(ns)) => ns_to_ps("network.reorder_delay_ns", ns)?,
            (false, None) => 0,
        };
        if (nw.duplicate_probability > 0.0 || nw.reorder_probability > 0.0) && nw.router == RouterSpec::InputBuffered {
            let key = if nw.duplicate_probability > 0.0 {
                "network.duplicate_probability"
            } else {
                "network.reorder_probability"
            };
            return e(key, "not modelled with network.router = \"input_buffered\" (its crossbar takes packets from input buffers only)");
        }
        if !(0.0..=1.0).contains(&self.noise.probability) {
            return e("noise.probability", format!("must be within [0, 1], got {}", self.noise.probability));
        }
        let router = resolve_router(nw, buffer_bytes)?;
        let net = NetConfig {
            mtu_bytes: nw.mtu_bytes,
            header_bytes: nw.header_bytes,
            switch_latency_ps,
            buffer_bytes,
            flow_control: match nw.flow_control {
                FlowControlSpec::Credit => FlowControl::Credit,
                FlowControlSpec::DropTail => FlowControl::DropTail,
                FlowControlSpec::Pfc => FlowControl::Pfc,
            },
            pfc: reducelab_net::PfcConfig {
                xoff_bytes: nw.pfc_xoff_bytes,
                xon_bytes: nw.pfc_xon_bytes,
                headroom_bytes: nw.pfc_headroom_bytes,
            },
            ecn_threshold_bytes: nw.ecn_threshold_bytes,
            ecn_red: resolve_ecn_red(nw)?,
            routing: match nw.routing {
                RoutingSpec::Minimal => RoutingAlgo::Minimal,
                RoutingSpec::Ecmp => RoutingAlgo::Ecmp,
                RoutingSpec::Adaptive => RoutingAlgo::Adaptive,
                RoutingSpec::Canary => match nw.adaptive_threshold_bytes {
                    None => RoutingAlgo::CANARY,
                    Some(b) => RoutingAlgo::ThresholdAdaptive(reducelab_net::AdaptiveThreshold::Bytes(b)),
                },
            },
            spray: nw.spray == SpraySpec::Packet,
            loss_probability: nw.loss_probability,
            duplicate_probability: nw.duplicate_probability,
            reorder_probability: nw.reorder_probability,
            reorder_delay_ps,
            arbitration: match nw.arbitration {
                ArbitrationSpec::Fifo => reducelab_net::Arbitration::Fifo,
                ArbitrationSpec::InputRoundRobin => reducelab_net::Arbitration::InputRoundRobin,
                ArbitrationSpec::Lru if nw.router != RouterSpec::InputBuffered => {
                    return e(
                        "network.arbitration",
                        "\"lru\" is a crossbar arbiter: it needs network.router = \"input_buffered\"",
                    );
                }
                ArbitrationSpec::Lru => reducelab_net::Arbitration::Lru,
            },
            router,
            noise_probability: self.noise.probability,
            noise_delay_ps: ns_to_ps("noise.delay_ns", self.noise.delay_ns)?,
            noise_mode: match self.noise.mode {
                NoiseModeSpec::PortStall => reducelab_net::NoiseMode::PortStall,
                NoiseModeSpec::Packet => reducelab_net::NoiseMode::Packet,
            },
            noise_hosts: None, // set below, once the traffic is known ("foreground")
        };
        match reducelab_net::VcPolicy::choose(&topology, net.routing, net.flow_control) {
            Err(reason) => return e("network.routing", reason),
            Ok(policy) if net.flow_control == FlowControl::Pfc => {
                if let Err(reason) = reducelab_net::pfc_supports(&policy) {
                    return e("network.routing", reason);
                }
                if let Err((field, reason)) = reducelab_net::pfc_thresholds(&topology, &net) {
                    // `NetConfig` fields to scenario keys: `pfc.xoff_bytes` is `network.pfc_xoff_bytes`.
                    return e(format!("network.{}", field.replace('.', "_")), reason);
                }
            }
            Ok(_) => {}
        }
        let endpoint = self.endpoint.resolve()?;
        let (transport, raw_traffic) = self.resolve_transports(nw)?;
        let mut traffic = Vec::new();
        let seed = seed_override.unwrap_or(self.seed);
        // The static trees' switch state is laid out per (tenant, tree) for one tree count.
        let mut first_trees: Option<(usize, u16)> = None;
        for (i, t) in self.traffic.iter().enumerate() {
            let wildcards = self.run.backend == Some(Backend::LogGp);
            let mut tr =
                resolve_traffic(&format!("traffic[{i}]"), t, &topology, self.base_dir.as_deref(), seed, wildcards)?;
            if let Traffic::Ina(spec) = &mut tr {
                // A protocol packet is one frame: it must fit the MTU, as raw packets do.
                let wire = spec.elems_per_packet as u32 * 4 + reducelab_ina::wire::OVERHEAD_BYTES;
                if wire > nw.mtu_bytes {
                    return e(
                        format!("traffic[{i}].elements_per_packet"),
                        format!(
                            "{} elements x 4 B + {} B of headers = {wire} B per packet exceed network.mtu_bytes ({}); at most {} elements fit",
                            spec.elems_per_packet,
                            reducelab_ina::wire::OVERHEAD_BYTES,
                            nw.mtu_bytes,
                            nw.mtu_bytes.saturating_sub(reducelab_ina::wire::OVERHEAD_BYTES) / 4
                        ),
                    );
                }
                if let Some(trees) = spec.protocol.root_count() {
                    match first_trees {
                        None => first_trees = Some((i, trees)),
                        Some((j, n)) if n != trees => {
                            return e(format!("traffic[{i}].trees"), format!("{trees} trees, but traffic[{j}] uses {n}: every static-tree allreduce of a scenario uses the same number of trees"));
                        }
                        _ => {}
                    }
                    if spec.roots.is_empty() {
                        spec.roots = random_roots(&topology, trees, seed ^ (i as u64) << 32);
                    }
                }
            }
            if let Traffic::InaTraining(t) = &mut tr {
                let wire = training::INA_ELEMS_PER_PACKET as u32 * 4 + reducelab_ina::wire::OVERHEAD_BYTES;
                if wire > nw.mtu_bytes {
                    return e(
                        "network.mtu_bytes",
                        format!(
                            "{} B: training jobs on protocol {} carry {} values per packet ({wire} B with headers, as the shared-pool protocols' packets)",
                            nw.mtu_bytes,
                            t.protocol.label(),
                            training::INA_ELEMS_PER_PACKET
                        ),
                    );
                }
                training::time_ina_training(t, seed);
                if let Some(trees) = t.protocol.root_count() {
                    match first_trees {
                        None => first_trees = Some((i, trees)),
                        Some((j, n)) if n != trees => {
                            return e(format!("traffic[{i}].trees"), format!("{trees} trees, but traffic[{j}] uses {n}: every static-tree allreduce of a scenario uses the same number of trees"));
                        }
                        _ => {}
                    }
                    // One draw for the entry: its allreduces share the roots.
                    let roots = random_roots(&topology, trees, seed ^ (i as u64) << 32);
                    for spec in t.specs.iter_mut().filter(|s| s.roots.is_empty()) {
                        spec.roots = roots.clone();
                    }
                }
            }
            if let Traffic::Goal(g) = &mut tr {
                if let Some(first) = g.ina.first() {
                    let epp = traffic::TRACE_INA_ELEMS_PER_PACKET;
                    let wire = epp as u32 * 4 + reducelab_ina::wire::OVERHEAD_BYTES;
                    if wire > nw.mtu_bytes {
                        return e(
                            "network.mtu_bytes",
                            format!(
                                "{} B: the in-network collectives of traffic[{i}] (protocol {}) carry {epp} \
                                 values per packet ({wire} B with headers)",
                                nw.mtu_bytes,
                                first.protocol.label()
                            ),
                        );
                    }
                    if let Some(trees) = first.protocol.root_count() {
                        match first_trees {
                            None => first_trees = Some((i, trees)),
                            Some((j, n)) if n != trees => {
                                return e(
                                    format!("traffic[{i}].algorithms.all_reduce"),
                                    format!(
                                        "{trees} trees, but traffic[{j}] uses {n}: every static-tree allreduce \
                                         of a scenario uses the same number of trees"
                                    ),
                                );
                            }
                            _ => {}
                        }
                        // One draw for the entry: its collectives share the roots.
                        let roots = random_roots(&topology, trees, seed ^ (i as u64) << 32);
                        for spec in &mut g.ina {
                            spec.roots = roots.clone();
                        }
                    }
                }
            }
            check_finishes_in_time(&format!("traffic[{i}]"), &tr, &topology)?;
            traffic.push(tr);
        }
        // In-network allreduces (entries, training jobs, traces' collectives) or pool jobs.
        let protocol_traffic = !ina_specs_empty(&traffic) || traffic.iter().any(|t| matches!(t, Traffic::Training(_)));
        for (key, on) in [
            ("network.duplicate_probability", nw.duplicate_probability > 0.0),
            ("network.reorder_probability", nw.reorder_probability > 0.0),
        ] {
            if on && !protocol_traffic {
                return e(key, "applies to protocol packets only (in-network allreduces: kind = \"ina_allreduce\", \"training\", or traces' in-network collectives), and this scenario has none");
            }
        }
        let mut net = net;
        // Jobs without hosts take free ones before anything asks which hosts the traffic uses.
        traffic::place_goal_jobs(&mut traffic, topology.num_hosts() as u32, seed)?;
        net.noise_hosts = self.noise.resolve_hosts(&traffic, topology.num_hosts() as u32)?;
        let ina = self.ina.resolve()?;
        for t in traffic.iter_mut() {
            if let Traffic::Training(spec) = t {
                training::set_pool_memory(spec, &self.ina)?;
            }
        }
        let ina_specs: Vec<_> = traffic.iter().flat_map(|t| t.ina_specs().iter().cloned()).collect();
        let mut ina_setup = None;
        if !ina_specs.is_empty() {
            // Builds the switch programs (validating trees, tables, protocol mix); the run
            // takes them.
            match ina::setup(&topology, &ina_specs, &ina, seed) {
                Ok(setup) => ina_setup = Some(setup),
                Err(reason) => {
                    // Errors start with the field they are about: an `[ina]` key, or a top-level
                    // section (`topology`, `traffic`).
                    let (field, reason) = match reason.split_once(": ") {
                        Some((fld, r)) if fld == "topology" || fld == "traffic" => (fld.to_string(), r.to_string()),
                        Some((fld, r)) if !fld.contains(' ') => (format!("ina.{fld}"), r.to_string()),
                        _ => ("traffic".to_string(), reason),
                    };
                    return e(field, reason);
                }
            }
        }
        let mut training_layout = None;
        let trainings: Vec<usize> =
            (0..traffic.len()).filter(|&i| matches!(traffic[i], Traffic::Training(_))).collect();
        if let Some(&i) = trainings.first() {
            if let Some(&k) = trainings.get(1) {
                return e(
                    format!("traffic[{k}].kind"),
                    format!("one \"training\" entry per scenario (traffic[{i}] is one); it holds every job"),
                );
            }
            if !ina_specs_empty(&traffic) {
                return e(format!("traffic[{i}].kind"), "\"training\" and \"ina_allreduce\" traffic do not run in one scenario (the switches run one program)");
            }
            let Traffic::Training(spec) = &traffic[i] else { unreachable!() };
            let laid_out = training::layout(&topology, spec, seed).map_err(|r| match r.split_once(": ") {
                Some((fld, why)) if fld == "topology" => ScenarioError { field: fld.into(), reason: why.into() },
                Some((fld, why)) if !fld.contains(' ') => {
                    ScenarioError { field: format!("traffic[{i}].{fld}"), reason: why.into() }
                }
                _ => ScenarioError { field: format!("traffic[{i}]"), reason: r },
            })?;
            training_layout = Some(laid_out);
        }
        if traffic.is_empty() {
            return e("traffic", "at least one [[traffic]] entry is needed");
        }
        let time_limit = match self.run.time_limit_us {
            Some(us) => Some(SimTime(ns_to_ps("run.time_limit_us", pos_f64("run.time_limit_us", us)? * 1000.0)?)),
            None => None,
        };
        if traffic.iter().all(|t| t.is_background()) && time_limit.is_none() {
            return e("run.time_limit_us", "is required when all traffic is background (random_uniform and random_permutation never end by themselves)");
        }
        // The watchdog must not cut short what a protocol's hosts recover by themselves.
        let recovery_ps = traffic
            .iter()
            .filter_map(|t| t.ina_specs().first().map(|s| s.protocol.recovery_horizon_ps()))
            .max()
            .unwrap_or(0)
            .max(match transport {
                // An NDP sender retries up to MAX_TIMEOUTS + 1 timeouts in a row before it gives up.
                reducelab_net::TransportConfig::Ndp(c) => {
                    (reducelab_transport::ndp::MAX_TIMEOUTS as u64 + 2) * c.rto_ps
                }
                // A DCTCP sender's timeouts in a row double up to 2^MAX_BACKOFF times the
                // minimum, then stay there (with a factor 2 for RTOs above the minimum).
                reducelab_net::TransportConfig::Dctcp(c) => {
                    use reducelab_transport::dctcp::{MAX_BACKOFF, MAX_TIMEOUTS};
                    let rounds = (2u64 << MAX_BACKOFF) + (MAX_TIMEOUTS - MAX_BACKOFF) as u64 * (1 << MAX_BACKOFF) + 2;
                    2 * rounds * c.min_rto_ps
                }
                reducelab_net::TransportConfig::Dcqcn(_) => 0,
                reducelab_net::TransportConfig::None => 0,
            });
        let watchdog = match self.run.watchdog_us {
            Some(0.0) => None,
            Some(us) => {
                Some(SimDuration::from_ps(ns_to_ps("run.watchdog_us", pos_f64("run.watchdog_us", us)? * 1000.0)?))
            }
            None => Some(SimDuration::from_ps(DEFAULT_WATCHDOG_PS.max(recovery_ps))),
        };
        let mut faults = Vec::new();
        let mut link_loss = Vec::new();
        for (i, f) in self.faults.iter().enumerate() {
            let kname = match f.kind {
                FaultKind::Link => "link",
                FaultKind::Node => "node",
                FaultKind::Loss => "loss",
            };
            let unused = |field: &str, present: bool| -> Result<(), ScenarioError> {
                if present {
                    return e(format!("faults[{i}].{field}"), format!("is not used by kind = \"{kname}\""));
                }
                Ok(())
            };
            let link_of = |f: &FaultSpec| -> Result<u32, ScenarioError> {
                let link = req(&format!("faults[{i}].link"), f.link, kname)?;
                if link as usize >= topology.links.len() {
                    return e(
                        format!("faults[{i}].link"),
                        format!("link {link} does not exist (the topology has {} links)", topology.links.len()),
                    );
                }
                Ok(link)
            };
            let at = |f: &FaultSpec| -> Result<SimTime, ScenarioError> {
                let ns = req(&format!("faults[{i}].at_ns"), f.at_ns, kname)?;
                Ok(SimTime(ns_to_ps(&format!("faults[{i}].at_ns"), ns)?))
            };
            match f.kind {
                FaultKind::Link => {
                    unused("node", f.node.is_some())?;
                    unused("probability", f.probability.is_some())?;
                    faults.push(Fault::Link { link: link_of(f)?, at: at(f)? });
                }
                FaultKind::Node => {
                    unused("link", f.link.is_some())?;
                    unused("probability", f.probability.is_some())?;
                    let node = req(&format!("faults[{i}].node"), f.node, kname)?;
                    if node as usize >= topology.nodes.len() {
                        return e(
                            format!("faults[{i}].node"),
                            format!("node {node} does not exist (the topology has {} nodes)", topology.nodes.len()),
                        );
                    }
                    faults.push(Fault::Node { node, at: at(f)? });
                }
                FaultKind::Loss => {
                    unused("node", f.node.is_some())?;
                    unused("at_ns", f.at_ns.is_some())?;
                    let p = req(&format!("faults[{i}].probability"), f.probability, kname)?;
                    if !(0.0..=1.0).contains(&p) {
                        return e(format!("faults[{i}].probability"), format!("must be within [0, 1], got {p}"));
                    }
                    if p > 0.0 && matches!(transport, reducelab_net::TransportConfig::Dcqcn(_)) {
                        return e(format!("faults[{i}].probability"), "a lossy link under transport \"dcqcn\", which sends every packet once (it is for lossless networks)");
                    }
                    link_loss.push((link_of(f)?, p));
                }
            }
        }
        let (backend, backend_reason) =
            self.choose_backend(&topology, &net, &traffic, &faults, &link_loss, time_limit)?;
        // Build what the chosen backend runs (from the process-wide caches: a sweep over sizes
        // builds a schedule or plan once).
        for (i, t) in traffic.iter_mut().enumerate() {
            if let Traffic::Collective { hosts, algorithm, collective, layout, schedule, plan, imported, .. } = t {
                let field = format!("traffic[{i}].algorithm");
                if let Some(s) = imported {
                    // Imported and checked at validation; the flow backend times its plan.
                    match backend {
                        Backend::Flow => {
                            *plan = Some(
                                crate::schedule_cache::collective_plan(algorithm, layout, Some(s))
                                    .map_err(|r| ScenarioError { field: format!("traffic[{i}].msccl"), reason: r })?,
                            )
                        }
                        _ => *schedule = Some(s.clone()),
                    }
                    continue;
                }
                let cannot = |r: String| ScenarioError {
                    field: format!("traffic[{i}].algorithm"),
                    reason: format!("{algorithm} on {}: {r}", layout_name(&topology, layout)),
                };
                if backend == Backend::Flow {
                    *plan = Some(crate::schedule_cache::cached_plan(algorithm, layout).map_err(cannot)?);
                } else {
                    let max = reducelab_sched::registry::variant_entry(algorithm)
                        .map_err(|r| ScenarioError { field: field.clone(), reason: r })?
                        .max_ranks;
                    if hosts.len() as u64 > max as u64 {
                        return e(
                            format!("traffic[{i}].hosts"),
                            format!(
                                "{} ranks is more than the {max} that '{algorithm}' schedules support at packet level",
                                hosts.len()
                            ),
                        );
                    }
                    *schedule =
                        Some(crate::schedule_cache::cached_schedule(algorithm, *collective, layout).map_err(cannot)?);
                }
            }
        }
        Ok(Scenario {
            name: self.name.clone(),
            seed: seed_override.unwrap_or(self.seed),
            topology,
            net,
            backend,
            backend_reason,
            traffic,
            faults,
            link_loss,
            time_limit,
            watchdog,
            ina,
            endpoint,
            transport,
            raw_traffic,
            ina_setup,
            training_layout,
            loggp: self.loggp.resolve(),
        })
    }
}
