//! The serde schema of a scenario file: one struct or enum per table and key, with the
//! defaults the format gives; validation happens when a [`ScenarioFile`] is resolved.

use super::backend::Backend;
use serde::Deserialize;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ScenarioFile {
    pub name: String,
    #[serde(default)]
    pub description: String,
    #[serde(default = "default_seed")]
    pub seed: u64,
    /// A `[topology]` table, or a bare spec string (`topology = "torus:8x8"`); required unless
    /// the scenario is a `[pspin]` one.
    #[serde(default, deserialize_with = "some_topology")]
    pub topology: Option<TopologySpec>,
    /// One PsPIN switch of Flare with no network around it (docs/flare.md, "Scenario files"):
    /// such a scenario has no other table.
    pub pspin: Option<PspinSection>,
    #[serde(default)]
    pub network: NetworkSpec,
    #[serde(default)]
    pub noise: NoiseSpec,
    /// The `[[traffic]]` entries, each read by its kind ([`TrafficSpec::from_table`]) once the
    /// file has parsed ([`crate::parse`]).
    #[serde(skip)]
    pub traffic: Vec<TrafficSpec>,
    #[serde(default, rename = "traffic")]
    pub(crate) traffic_tables: Vec<toml::Table>,
    #[serde(default)]
    pub faults: Vec<FaultSpec>,
    #[serde(default)]
    pub run: RunSpec,
    /// Switch resources for in-network aggregation (`ina_allreduce` traffic).
    #[serde(default)]
    pub ina: InaSection,
    /// Per-host endpoint costs (default: none).
    #[serde(default)]
    pub endpoint: EndpointSpec,
    /// End-to-end transport of message traffic (default: none), read with the traffic
    /// ([`TransportSpec::from_table`]).
    #[serde(skip)]
    pub transport: TransportSpec,
    #[serde(default, rename = "transport")]
    pub(crate) transport_table: toml::Table,
    /// LogGP parameters of `run.backend = "loggp"` (LogGOPSim's defaults when absent).
    #[serde(default)]
    pub loggp: LogGpSection,
    /// Where a relative file path of the scenario (a GOAL trace) is read from: the scenario
    /// file's directory when it was read from a file, else the working directory.
    #[serde(skip)]
    pub base_dir: Option<std::path::PathBuf>,
}

impl LogGpSection {
    /// The parameters, LogGOPSim's defaults where not given.
    pub fn resolve(&self) -> reducelab_goal::LogGpParams {
        let d = reducelab_goal::LogGpParams::default();
        reducelab_goal::LogGpParams {
            latency_ns: self.latency_ns.unwrap_or(d.latency_ns),
            overhead_ns: self.overhead_ns.unwrap_or(d.overhead_ns),
            gap_ns: self.gap_ns.unwrap_or(d.gap_ns),
            gap_per_byte_ns: self.gap_per_byte_ns.unwrap_or(d.gap_per_byte_ns),
            overhead_per_byte_ns: self.overhead_per_byte_ns.unwrap_or(d.overhead_per_byte_ns),
            eager_limit_bytes: self.eager_limit_bytes.unwrap_or(d.eager_limit_bytes),
        }
    }
}

/// `[loggp]`: the LogGP(S) parameters of `run.backend = "loggp"`, in LogGOPSim's meaning
/// (`L`, `o`, `g`, `G`, `O`, `S`) and units (integer nanoseconds, bytes).
#[derive(Debug, Deserialize, Default, Clone)]
#[serde(deny_unknown_fields)]
pub struct LogGpSection {
    /// `L` (2500).
    pub latency_ns: Option<u64>,
    /// `o` (1500).
    pub overhead_ns: Option<u64>,
    /// `g` (1000).
    pub gap_ns: Option<u64>,
    /// `G` (6).
    pub gap_per_byte_ns: Option<u64>,
    /// `O` (0).
    pub overhead_per_byte_ns: Option<u64>,
    /// `S` (65535): larger messages use rendezvous.
    pub eager_limit_bytes: Option<u64>,
}

/// `[transport]`: the end-to-end transport of message traffic (docs/scenario-format.md), read
/// by [`TransportSpec::from_table`]: its keys are those of its kind.
#[derive(Debug, Default, Clone)]
pub struct TransportSpec {
    /// `kind` (default `none`).
    pub kind: TransportKindSpec,
    /// The parameters, of the kind they were read for: `kind`, or without it the transport a
    /// traffic entry names (its parameters stay in `[transport]`).
    pub params: TransportParams,
    /// The parameter keys written, for the check that they belong to the run's transport.
    pub written: Vec<&'static str>,
}

/// `[transport]`'s parameters, by kind.
#[derive(Debug, Clone)]
pub enum TransportParams {
    None(NoTransportKeys),
    Ndp(NdpKeys),
    Dctcp(DctcpKeys),
    Dcqcn(DcqcnKeys),
}

impl Default for TransportParams {
    fn default() -> Self {
        TransportParams::None(NoTransportKeys {})
    }
}

/// `kind = "none"` takes no parameters.
#[derive(Debug, Deserialize, Default, Clone)]
#[serde(deny_unknown_fields)]
pub struct NoTransportKeys {}

/// `kind = "ndp"`.
#[derive(Debug, Deserialize, Default, Clone)]
#[serde(deny_unknown_fields)]
pub struct NdpKeys {
    pub initial_window_packets: Option<u32>,
    pub data_queue_packets: Option<u32>,
    pub rto_us: Option<f64>,
}

/// `kind = "dctcp"`.
#[derive(Debug, Deserialize, Default, Clone)]
#[serde(deny_unknown_fields)]
pub struct DctcpKeys {
    pub initial_window_packets: Option<u32>,
    /// α's gain.
    pub g: Option<f64>,
    /// The retransmission timeout's lower bound.
    pub min_rto_us: Option<f64>,
}

/// `kind = "dcqcn"` (g, K, T, B, F, R_AI, R_HAI, the minimum rate, N).
#[derive(Debug, Deserialize, Default, Clone)]
#[serde(deny_unknown_fields)]
pub struct DcqcnKeys {
    pub g: Option<f64>,
    pub alpha_interval_us: Option<f64>,
    pub increase_interval_us: Option<f64>,
    pub byte_counter_bytes: Option<u64>,
    pub fast_recovery_steps: Option<u32>,
    pub rai_gbps: Option<f64>,
    pub rhai_gbps: Option<f64>,
    pub min_rate_gbps: Option<f64>,
    pub cnp_interval_us: Option<f64>,
}

/// `transport.kind`.
#[derive(Debug, Deserialize, Clone, Copy, PartialEq, Eq, Default)]
#[serde(rename_all = "snake_case")]
pub enum TransportKindSpec {
    /// No transport: line-rate injection, nothing retransmitted (today's engine).
    #[default]
    None,
    Ndp,
    Dctcp,
    Dcqcn,
}

/// `[endpoint]`: per-message host overheads, rendezvous and the injection ceiling
/// (docs/scenario-format.md). Every key defaults to off.
#[derive(Debug, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct EndpointSpec {
    #[serde(default)]
    pub send_overhead_ns: f64,
    #[serde(default)]
    pub send_latency_ns: f64,
    #[serde(default)]
    pub recv_overhead_ns: f64,
    #[serde(default)]
    pub recv_latency_ns: f64,
    pub rendezvous_threshold_bytes: Option<u64>,
    pub injection_gbps: Option<f64>,
}

/// `[ina]`: programmable-switch resources and Canary switch timers (docs/scenario-format.md).
#[derive(Debug, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct InaSection {
    /// Aggregator slots (descriptors) per switch; or, instead, `switch_memory_bytes`.
    pub table_size: Option<u32>,
    /// The switch memory for aggregation in bytes, for every protocol: its slots are this over
    /// the protocol's slot size (`InaProtocol::slot_bytes`).
    pub switch_memory_bytes: Option<u64>,
    pub slots_per_tenant: Option<u32>,
    pub packets_per_second: Option<f64>,
    pub latency_ns: Option<f64>,
    pub timeout_ns: Option<f64>,
    pub reclaim_us: Option<f64>,
    pub sample_ns: Option<f64>,
    pub max_elements_per_packet: Option<u16>,
    /// Verification mode: every protocol header travels through its wire frame and back.
    pub wire_check: Option<bool>,
}

fn default_seed() -> u64 {
    1
}

/// `topology` is a table, or a bare string: the same as a table with only `shape` (and the
/// default link parameters).
fn topology_table_or_shape<'de, D: serde::Deserializer<'de>>(d: D) -> Result<TopologySpec, D::Error> {
    struct V;
    impl<'de> serde::de::Visitor<'de> for V {
        type Value = TopologySpec;
        fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
            f.write_str("a [topology] table or a topology spec string such as \"torus:8x8\"")
        }
        fn visit_str<E: serde::de::Error>(self, s: &str) -> Result<TopologySpec, E> {
            Ok(TopologySpec { shape: Some(s.to_string()), ..TopologySpec::default() })
        }
        fn visit_map<A: serde::de::MapAccess<'de>>(self, map: A) -> Result<TopologySpec, A::Error> {
            TopologySpec::deserialize(serde::de::value::MapAccessDeserializer::new(map))
        }
    }
    d.deserialize_any(V)
}

fn some_topology<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<TopologySpec>, D::Error> {
    topology_table_or_shape(d).map(Some)
}

/// `[pspin]`: one PsPIN switch (seed 004 §3–6); an absent key takes the value of
/// `reducelab_flare::pspin::SwitchConfig::default()` (docs/flare.md).
#[derive(Debug, Deserialize, Default, Clone)]
#[serde(deny_unknown_fields)]
pub struct PspinSection {
    pub clusters: Option<u64>,
    pub hpus_per_cluster: Option<u64>,
    pub clock_mhz: Option<u64>,
    pub l1_bytes_per_cluster: Option<u64>,
    pub l2_packet_bytes: Option<u64>,
    pub subset_cores: Option<u64>,
    pub cycles_per_vector_op: Option<u64>,
    pub dma_cycles_per_kib: Option<u64>,
    pub remote_l1_factor: Option<u64>,
    pub lock_cycles: Option<u64>,
    pub handler_overhead_cycles: Option<u64>,
    /// `"drop"` (default) or `"backpressure"`: what a full L2 packet memory does.
    pub l2_full: Option<String>,
    #[serde(default)]
    pub allreduce: PspinAllreduceSpec,
}

/// `[pspin.allreduce]`: the allreduce the switch aggregates and how its children send it.
#[derive(Debug, Deserialize, Default, Clone)]
#[serde(deny_unknown_fields)]
pub struct PspinAllreduceSpec {
    /// Children (ports) of the switch, one host each.
    pub hosts: Option<u64>,
    pub bytes: Option<u64>,
    pub allreduces: Option<u64>,
    pub dtype: Option<String>,
    pub op: Option<String>,
    pub packet_bytes: Option<u64>,
    /// Each port's line rate (the name `[topology]` gives a link's).
    pub bandwidth_gbps: Option<f64>,
    pub staggered: Option<bool>,
    pub window_blocks: Option<u64>,
    pub jitter_ns: Option<f64>,
    pub data: Option<bool>,
    pub data_seed: Option<u64>,
    pub reproducible: Option<bool>,
    pub design: Option<String>,
    pub simulate: Option<bool>,
    pub density: Option<f64>,
    pub storage: Option<String>,
    pub hash_slots: Option<u64>,
    pub spill_pairs: Option<u64>,
}

#[derive(Debug, Deserialize, Clone, Copy, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum TopologyKind {
    Star,
    #[serde(rename = "fat_tree_2")]
    FatTree2,
    #[serde(rename = "fat_tree_3")]
    FatTree3,
    Torus,
    Hyperx,
    Hammingmesh,
    Dragonfly,
}

/// All topology parameters; which are required depends on `kind`. `shape` (a
/// [`reducelab_sched::TopologyShape`] string such as `torus:64x64`) replaces `kind` and its
/// size parameters.
#[derive(Debug, Deserialize, Default, Clone)]
#[serde(deny_unknown_fields)]
pub struct TopologySpec {
    pub shape: Option<String>,
    pub kind: Option<TopologyKind>,
    pub bandwidth_gbps: Option<f64>,
    pub latency_ns: Option<f64>,
    pub host_bandwidth_gbps: Option<f64>,
    pub host_latency_ns: Option<f64>,
    // star
    pub hosts: Option<u32>,
    // fat_tree_2
    pub leaves: Option<u32>,
    pub hosts_per_leaf: Option<u32>,
    pub spines: Option<u32>,
    pub links_per_spine: Option<u32>,
    pub radix: Option<u32>,
    // fat_tree_3
    pub k: Option<u32>,
    pub hosts_per_edge: Option<u32>,
    // torus / hyperx
    pub dims: Option<Vec<u32>>,
    // hammingmesh
    pub board: Option<Vec<u32>>,
    pub grid: Option<Vec<u32>>,
    pub board_latency_ns: Option<f64>,
    /// Bandwidth of the on-board (mesh) links (default: `bandwidth_gbps`).
    pub board_bandwidth_gbps: Option<f64>,
    // dragonfly
    pub groups: Option<u32>,
    pub routers_per_group: Option<u32>,
    pub hosts_per_router: Option<u32>,
    pub global_per_router: Option<u32>,
    pub global_latency_ns: Option<f64>,
}

#[derive(Debug, Deserialize, Clone, Copy, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum FlowControlSpec {
    Credit,
    DropTail,
    Pfc,
}

#[derive(Debug, Deserialize, Clone, Copy, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum RoutingSpec {
    Minimal,
    Ecmp,
    Adaptive,
    Canary,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NetworkSpec {
    #[serde(default = "d_mtu")]
    pub mtu_bytes: u32,
    #[serde(default = "d_header")]
    pub header_bytes: u32,
    #[serde(default = "d_switch_latency")]
    pub switch_latency_ns: f64,
    #[serde(default = "d_buffer")]
    pub buffer_bytes: BufferSpec,
    #[serde(default = "d_fc")]
    pub flow_control: FlowControlSpec,
    /// `flow_control = "pfc"` only: PAUSE above this many bytes per ingress port and VC
    /// (default: `buffer_bytes` minus the headroom).
    pub pfc_xoff_bytes: Option<u64>,
    /// `flow_control = "pfc"` only: RESUME at this many bytes or fewer (default: XOFF - 2 MTU).
    pub pfc_xon_bytes: Option<u64>,
    /// `flow_control = "pfc"` only: buffer above XOFF for what arrives while the PAUSE travels
    /// (default and minimum: from each link's bandwidth-delay product and the MTU).
    pub pfc_headroom_bytes: Option<u64>,
    pub ecn_threshold_bytes: Option<u64>,
    /// RED marking (DCQCN's switches): `ecn_threshold_bytes` is Kmin, this Kmax.
    pub ecn_kmax_bytes: Option<u64>,
    /// RED marking probability at Kmax (default 1).
    pub ecn_pmax: Option<f64>,
    #[serde(default = "d_routing")]
    pub routing: RoutingSpec,
    /// `routing = "canary"` only: leave the default port above this many queued bytes instead
    /// of Canary's 50% of `buffer_bytes`.
    pub adaptive_threshold_bytes: Option<u64>,
    /// How a message's packets break routing ties: `"flow"` (all alike, by the message's flow
    /// hash) or `"packet"` (a path number per packet, cycled by its sender; see
    /// `reducelab_net::routing`).
    #[serde(default)]
    pub spray: SpraySpec,
    #[serde(default)]
    pub loss_probability: f64,
    /// Probability that a protocol packet (in-network and training traffic) crossing a link
    /// is sent again by the link's sender.
    #[serde(default)]
    pub duplicate_probability: f64,
    /// Probability that a protocol packet arriving over a link is held back for
    /// `reorder_delay_ns` (packets behind it overtake it).
    #[serde(default)]
    pub reorder_probability: f64,
    pub reorder_delay_ns: Option<f64>,
    #[serde(default)]
    pub arbitration: ArbitrationSpec,
    /// Switch microarchitecture; the three keys after it apply to `"input_buffered"` only.
    #[serde(default)]
    pub router: RouterSpec,
    pub input_buffer_bytes: Option<u64>,
    pub output_buffer_bytes: Option<u64>,
    pub crossbar_speedup: Option<f64>,
}

/// `network.spray`.
#[derive(Debug, Deserialize, Clone, Copy, PartialEq, Eq, Default)]
#[serde(rename_all = "snake_case")]
pub enum SpraySpec {
    #[default]
    Flow,
    Packet,
}

/// `network.router`.
#[derive(Debug, Deserialize, Clone, Copy, PartialEq, Eq, Default)]
#[serde(rename_all = "snake_case")]
pub enum RouterSpec {
    #[default]
    OutputQueued,
    InputBuffered,
}

#[derive(Debug, Deserialize, Clone, Copy, PartialEq, Eq, Default)]
#[serde(rename_all = "snake_case")]
pub enum ArbitrationSpec {
    #[default]
    Fifo,
    InputRoundRobin,
    Lru,
}
fn d_mtu() -> u32 {
    4096
}
fn d_header() -> u32 {
    64
}
fn d_switch_latency() -> f64 {
    100.0
}
fn d_buffer() -> BufferSpec {
    BufferSpec::Bytes(64 * 1024)
}

/// `network.buffer_bytes`: a size, or `"line_rate"` ([`line_rate_buffer_bytes`](super::line_rate_buffer_bytes)).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BufferSpec {
    Bytes(u64),
    LineRate,
}

impl<'de> Deserialize<'de> for BufferSpec {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> serde::de::Visitor<'de> for V {
            type Value = BufferSpec;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a number of bytes or \"line_rate\"")
            }
            fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<BufferSpec, E> {
                Ok(BufferSpec::Bytes(v))
            }
            fn visit_i64<E: serde::de::Error>(self, v: i64) -> Result<BufferSpec, E> {
                u64::try_from(v)
                    .map(BufferSpec::Bytes)
                    .map_err(|_| E::custom(format!("must be a non-negative number of bytes or \"line_rate\", got {v}")))
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<BufferSpec, E> {
                match v {
                    "line_rate" => Ok(BufferSpec::LineRate),
                    _ => Err(E::custom(format!("must be a number of bytes or \"line_rate\", got \"{v}\""))),
                }
            }
        }
        d.deserialize_any(V)
    }
}

fn d_fc() -> FlowControlSpec {
    FlowControlSpec::Credit
}
fn d_routing() -> RoutingSpec {
    RoutingSpec::Adaptive
}
impl Default for NetworkSpec {
    fn default() -> Self {
        NetworkSpec {
            mtu_bytes: d_mtu(),
            header_bytes: d_header(),
            switch_latency_ns: d_switch_latency(),
            buffer_bytes: d_buffer(),
            flow_control: d_fc(),
            pfc_xoff_bytes: None,
            pfc_xon_bytes: None,
            pfc_headroom_bytes: None,
            ecn_threshold_bytes: None,
            ecn_kmax_bytes: None,
            ecn_pmax: None,
            routing: d_routing(),
            adaptive_threshold_bytes: None,
            spray: SpraySpec::Flow,
            loss_probability: 0.0,
            duplicate_probability: 0.0,
            reorder_probability: 0.0,
            reorder_delay_ns: None,
            arbitration: ArbitrationSpec::Fifo,
            router: RouterSpec::OutputQueued,
            input_buffer_bytes: None,
            output_buffer_bytes: None,
            crossbar_speedup: None,
        }
    }
}

#[derive(Debug, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct NoiseSpec {
    #[serde(default)]
    pub probability: f64,
    #[serde(default)]
    pub delay_ns: f64,
    /// How a drawn packet is delayed (default: the port stalls).
    #[serde(default)]
    pub mode: NoiseModeSpec,
    /// `"all"` (default), `"foreground"` (the hosts of non-background traffic) or host indices.
    pub hosts: Option<HostsSpec>,
}

/// `noise.mode`.
#[derive(Debug, Deserialize, Clone, Copy, PartialEq, Eq, Default)]
#[serde(rename_all = "snake_case")]
pub enum NoiseModeSpec {
    #[default]
    PortStall,
    Packet,
}

#[derive(Debug, Deserialize, Clone, Copy, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum TrafficKind {
    /// Explicit list of messages.
    Messages,
    /// Every host of the set sends `bytes` to a distinct host of the set (random
    /// permutation without fixed points).
    Permutation,
    /// `senders` all send `bytes` to `receiver`.
    Incast,
    /// Background: every host of the set keeps `inflight` messages of `bytes` going, each to
    /// a new uniformly random peer of the set, until the foreground is done.
    RandomUniform,
    /// Background: rounds (or epochs) of random permutations without fixed points of the set
    /// (Canary §5.2: "each host sends a message to a randomly selected host and receives a
    /// message from another"), `inflight` messages per host, optionally paced to `rate_gbps`.
    RandomPermutation,
    /// A host-based collective (allreduce, reduce-scatter, allgather) run from a schedule of
    /// `crates/sched`: rank `r` on `hosts[r]`.
    Collective,
    /// An in-network allreduce (Canary or static trees) run by switch programs.
    InaAllreduce,
    /// Training jobs on a shared switch memory (SwitchML, ATP, DSA): `crate::training_run`.
    Training,
    /// A GOAL trace (LogGOPSim's schedule language): each rank's sends, receives and
    /// computation with their dependencies, rank `r` on `hosts[r]`.
    Goal,
    /// A Chakra execution trace (MLCommons; one protobuf file per rank): compute nodes as
    /// delays, collectives as registry schedules, lowered into a GOAL trace and run as one.
    Chakra,
}

/// One `[[traffic]]` entry: its kind, with the keys that kind owns (read from the entry's table
/// by [`TrafficSpec::from_table`], so an entry of one kind cannot hold another kind's keys).
#[derive(Debug, Clone)]
pub enum TrafficSpec {
    Messages(MessagesEntry),
    Permutation(PermutationEntry),
    Incast(IncastEntry),
    RandomUniform(RandomUniformEntry),
    RandomPermutation(RandomPermutationEntry),
    Collective(CollectiveEntry),
    InaAllreduce(InaAllreduceEntry),
    Training(TrainingEntry),
    Goal(GoalEntry),
    Chakra(ChakraEntry),
}

/// `kind = "goal"`: a GOAL trace file and where its ranks run.
#[derive(Debug, Deserialize, Default, Clone)]
#[serde(deny_unknown_fields)]
pub struct GoalEntry {
    pub transport: Option<TransportKindSpec>,
    /// The trace (text GOAL), relative to the scenario file's directory.
    pub file: Option<String>,
    /// Rank `r` runs on `hosts[r]` (`"all"` or a list; default: the first `num_ranks` hosts).
    pub hosts: Option<HostsSpec>,
    /// `"linear"` (default: rank r on the r-th host of `hosts`) or `"random"` (a permutation
    /// of them drawn from the scenario seed).
    pub placement: Option<String>,
    pub start_ns: Option<f64>,
    /// Sends of at most this many bytes complete when handed to the network (MPI's eager
    /// protocol); larger ones when delivered. Default 0: every send completes when delivered,
    /// as a collective's step does.
    pub eager_bytes: Option<u64>,
    /// Write every operation's start and end (`goal_ops.csv`).
    pub ops: Option<bool>,
}

/// `kind = "chakra"`: a Chakra execution trace (one file per rank), the algorithm of each
/// collective type, and where its ranks run (as a `goal` entry's).
#[derive(Debug, Deserialize, Default, Clone)]
#[serde(deny_unknown_fields)]
pub struct ChakraEntry {
    pub transport: Option<TransportKindSpec>,
    /// The trace set's path prefix, relative to the scenario file's directory: rank `r`'s file
    /// is `<trace>.<r>.et`, as Chakra's tools name them and ASTRA-sim reads them.
    pub trace: Option<String>,
    /// How many rank files to read (default: `<trace>.0.et`, `<trace>.1.et`, … while they exist).
    pub ranks: Option<u32>,
    /// Rank `r` runs on `hosts[r]` (default: free hosts, as a `goal` entry's).
    pub hosts: Option<HostsSpec>,
    /// `"linear"` (default) or `"random"`, as for a `goal` entry.
    pub placement: Option<String>,
    pub start_ns: Option<f64>,
    /// As for a `goal` entry (default 0: a send completes when delivered).
    pub eager_bytes: Option<u64>,
    /// Write every lowered GOAL operation's start and end (`goal_ops_<i>.csv`).
    pub ops: Option<bool>,
    /// The registry algorithm of each collective type, keyed by the schema's name in lower case
    /// (`all_reduce`, `all_gather`, `reduce_scatter`, `reduce_scatter_block`); default `"ring"`.
    pub algorithms: Option<std::collections::BTreeMap<String, String>>,
    /// The job's process groups (a collective node's `pg_name` → its ranks): a JSON file as
    /// ASTRA-sim's `--comm-group-configuration` takes it, or the same map inline.
    pub comm_groups: Option<CommGroupsSpec>,
}

/// `comm_groups`: a file name (JSON: `{"1": [0, 2], "2": [1, 3]}`) or the map itself.
#[derive(Debug, Clone)]
pub enum CommGroupsSpec {
    File(String),
    Inline(std::collections::BTreeMap<String, Vec<u32>>),
}

// Hand-written like `HostsSpec`'s: an error inside the map keeps its path.
impl<'de> Deserialize<'de> for CommGroupsSpec {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> serde::de::Visitor<'de> for V {
            type Value = CommGroupsSpec;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a JSON file name or a table of group name = [ranks]")
            }
            fn visit_str<E: serde::de::Error>(self, s: &str) -> Result<CommGroupsSpec, E> {
                Ok(CommGroupsSpec::File(s.to_string()))
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<CommGroupsSpec, A::Error> {
                let mut m = std::collections::BTreeMap::new();
                while let Some((k, v)) = map.next_entry::<String, Vec<u32>>()? {
                    m.insert(k, v);
                }
                Ok(CommGroupsSpec::Inline(m))
            }
        }
        d.deserialize_any(V)
    }
}

/// `kind = "messages"`.
#[derive(Debug, Deserialize, Default, Clone)]
#[serde(deny_unknown_fields)]
pub struct MessagesEntry {
    /// These messages use this transport instead of `[transport].kind` (its parameters stay
    /// in `[transport]`).
    pub transport: Option<TransportKindSpec>,
    /// `[[src, dst, bytes, start_ns], ...]`.
    pub list: Option<Vec<[u64; 4]>>,
}

/// `kind = "permutation"`.
#[derive(Debug, Deserialize, Default, Clone)]
#[serde(deny_unknown_fields)]
pub struct PermutationEntry {
    pub transport: Option<TransportKindSpec>,
    pub hosts: Option<HostsSpec>,
    pub bytes: Option<u64>,
    pub start_ns: Option<f64>,
}

/// `kind = "incast"`.
#[derive(Debug, Deserialize, Default, Clone)]
#[serde(deny_unknown_fields)]
pub struct IncastEntry {
    pub transport: Option<TransportKindSpec>,
    /// Default: every host but the receiver.
    pub senders: Option<Vec<u32>>,
    pub receiver: Option<u32>,
    pub bytes: Option<u64>,
    pub start_ns: Option<f64>,
}

/// `kind = "random_uniform"`.
#[derive(Debug, Deserialize, Default, Clone)]
#[serde(deny_unknown_fields)]
pub struct RandomUniformEntry {
    pub transport: Option<TransportKindSpec>,
    pub hosts: Option<HostsSpec>,
    pub bytes: Option<u64>,
    pub start_ns: Option<f64>,
    /// Messages each host keeps going.
    pub inflight: Option<u32>,
}

/// `kind = "random_permutation"`.
#[derive(Debug, Deserialize, Default, Clone)]
#[serde(deny_unknown_fields)]
pub struct RandomPermutationEntry {
    pub transport: Option<TransportKindSpec>,
    pub hosts: Option<HostsSpec>,
    pub bytes: Option<u64>,
    pub start_ns: Option<f64>,
    pub inflight: Option<u32>,
    /// `message` (default) or `epoch`.
    pub redraw: Option<String>,
    /// With `redraw = "epoch"`: the epoch's length.
    pub epoch_ns: Option<f64>,
    /// Offered rate per host (absent: window-limited).
    pub rate_gbps: Option<f64>,
}

/// `kind = "collective"`.
#[derive(Debug, Deserialize, Default, Clone)]
#[serde(deny_unknown_fields)]
pub struct CollectiveEntry {
    pub transport: Option<TransportKindSpec>,
    pub hosts: Option<HostsSpec>,
    pub bytes: Option<u64>,
    pub start_ns: Option<f64>,
    /// The algorithm (see `reducelab model --list`).
    pub algorithm: Option<String>,
    /// An MSCCL XML program to run instead of a registry algorithm (docs/workloads.md): a file
    /// name, relative to the scenario file's directory (or the working directory when the
    /// scenario is given as text).
    pub msccl: Option<String>,
    /// `allreduce` (default), `reduce_scatter`, `allgather`, `broadcast`, `reduce` or
    /// `alltoall` (`bytes` is then each rank's send buffer, as MPI counts it).
    pub collective: Option<String>,
    /// The root rank (an index into `hosts`) of `broadcast` and `reduce` (default 0).
    pub root: Option<u32>,
    /// The torus shape the ranks are laid out on (default: the topology's dimensions when
    /// every host takes part, else one dimension).
    pub dims: Option<Vec<u32>>,
}

/// `kind = "ina_allreduce"`: the keys every protocol takes; the protocol's own keys (its
/// registry entry's `params`) are in [`Self::params`].
#[derive(Debug, Deserialize, Default, Clone)]
#[serde(deny_unknown_fields)]
pub struct InaAllreduceEntry {
    pub hosts: Option<HostsSpec>,
    pub bytes: Option<u64>,
    pub start_ns: Option<f64>,
    /// A protocol of the registry (`canary` by default).
    pub protocol: Option<String>,
    /// Root switch node of each tree, for a protocol that takes roots (default: drawn from
    /// the seed among the top-level switches).
    pub roots: Option<Vec<u32>>,
    /// 32-bit elements per packet.
    pub elements_per_packet: Option<u16>,
    /// Carry and check real element values (default: when hosts × bytes ≤ 64 MiB).
    pub values: Option<bool>,
    /// The protocol's own keys as written, validated by its registry entry's `build`.
    #[serde(skip)]
    pub params: reducelab_ina::Params,
}

/// `kind = "training"`: jobs, workers per job, DNN of each job (cycled), start and jitter
/// bounds; the shared-pool protocols' keys (DSA's preemption rule, switch memory, window,
/// timeout floor, a parameter-server restart, root or tree aggregation); for an in-network
/// allreduce protocol, its `roots` and its own keys ([`Self::params`]).
#[derive(Debug, Deserialize, Default, Clone)]
#[serde(deny_unknown_fields)]
pub struct TrainingEntry {
    /// `dsa` (default), `switchml`, `atp`, or an in-network allreduce protocol of the registry.
    pub protocol: Option<String>,
    pub jobs: Option<u32>,
    pub workers: Option<u32>,
    pub models: Option<Vec<String>>,
    pub start_max_us: Option<f64>,
    pub jitter_max_us: Option<f64>,
    pub values: Option<bool>,
    pub model_scale: Option<f64>,
    pub preemption: Option<String>,
    pub window_bytes: Option<u64>,
    pub min_rto_us: Option<f64>,
    pub ps_restart_us: Option<f64>,
    /// `"root"` (one switch per job) or `"tree"` (every switch of the job's two-level tree).
    pub aggregation: Option<String>,
    pub roots: Option<Vec<u32>>,
    /// An in-network allreduce protocol's own keys as written.
    #[serde(skip)]
    pub params: reducelab_ina::Params,
}

impl TrafficSpec {
    pub fn kind(&self) -> TrafficKind {
        match self {
            TrafficSpec::Messages(_) => TrafficKind::Messages,
            TrafficSpec::Permutation(_) => TrafficKind::Permutation,
            TrafficSpec::Incast(_) => TrafficKind::Incast,
            TrafficSpec::RandomUniform(_) => TrafficKind::RandomUniform,
            TrafficSpec::RandomPermutation(_) => TrafficKind::RandomPermutation,
            TrafficSpec::Collective(_) => TrafficKind::Collective,
            TrafficSpec::InaAllreduce(_) => TrafficKind::InaAllreduce,
            TrafficSpec::Training(_) => TrafficKind::Training,
            TrafficSpec::Goal(_) => TrafficKind::Goal,
            TrafficSpec::Chakra(_) => TrafficKind::Chakra,
        }
    }

    /// The transport this entry's messages use instead of `[transport].kind`, if it names one
    /// (message traffic only).
    pub fn transport(&self) -> Option<TransportKindSpec> {
        match self {
            TrafficSpec::Messages(t) => t.transport,
            TrafficSpec::Permutation(t) => t.transport,
            TrafficSpec::Incast(t) => t.transport,
            TrafficSpec::RandomUniform(t) => t.transport,
            TrafficSpec::RandomPermutation(t) => t.transport,
            TrafficSpec::Collective(t) => t.transport,
            TrafficSpec::Goal(t) => t.transport,
            TrafficSpec::Chakra(t) => t.transport,
            TrafficSpec::InaAllreduce(_) | TrafficSpec::Training(_) => None,
        }
    }

    /// Reads one `[[traffic]]` table: its `kind`, then the keys that kind owns (an in-network
    /// protocol's own keys go to the entry's `params`, for its registry entry to validate).
    /// Errors are (the key's path inside the entry, the reason); a key of another kind, or no
    /// kind's, is refused naming the keys this kind takes.
    pub fn from_table(mut t: toml::Table) -> Result<TrafficSpec, (String, String)> {
        let kind = match t.remove("kind") {
            None => {
                let names: Vec<&str> = TrafficKind::ALL.iter().map(|k| k.name()).collect();
                return Err(("kind".into(), format!("is required ({})", names.join(", "))));
            }
            Some(v) => TrafficKind::deserialize(v).map_err(|err| ("kind".to_string(), err.message().to_string()))?,
        };
        let mut params = reducelab_ina::Params::new();
        if matches!(kind, TrafficKind::InaAllreduce | TrafficKind::Training) {
            if t.contains_key("transport") {
                return Err((
                    "transport".into(),
                    "applies to message traffic (in-network protocol packets keep their own recovery)".into(),
                ));
            }
            // Every registered protocol's keys are read here, so that a key of another protocol
            // is refused by the named one's `build` ("is not used by protocol = ...").
            for key in reducelab_ina::PROTOCOLS.iter().flat_map(|p| p.params).map(|p| p.key) {
                match t.remove(key) {
                    None => {}
                    Some(toml::Value::Integer(i)) => _ = params.insert(key.to_string(), i as f64),
                    Some(toml::Value::Float(x)) => _ = params.insert(key.to_string(), x),
                    Some(v) => return Err((key.to_string(), format!("expected a number, got {v}"))),
                }
            }
        }
        let protocol = t.get("protocol").and_then(|p| p.as_str()).map(str::to_string);
        let p = protocol.as_deref();
        Ok(match kind {
            TrafficKind::Messages => TrafficSpec::Messages(entry_keys(kind, p, t)?),
            TrafficKind::Permutation => TrafficSpec::Permutation(entry_keys(kind, p, t)?),
            TrafficKind::Incast => TrafficSpec::Incast(entry_keys(kind, p, t)?),
            TrafficKind::RandomUniform => TrafficSpec::RandomUniform(entry_keys(kind, p, t)?),
            TrafficKind::RandomPermutation => TrafficSpec::RandomPermutation(entry_keys(kind, p, t)?),
            TrafficKind::Collective => TrafficSpec::Collective(entry_keys(kind, p, t)?),
            TrafficKind::InaAllreduce => {
                TrafficSpec::InaAllreduce(InaAllreduceEntry { params, ..entry_keys(kind, p, t)? })
            }
            TrafficKind::Training => TrafficSpec::Training(TrainingEntry { params, ..entry_keys(kind, p, t)? }),
            TrafficKind::Goal => TrafficSpec::Goal(entry_keys(kind, p, t)?),
            TrafficKind::Chakra => TrafficSpec::Chakra(entry_keys(kind, p, t)?),
        })
    }
}

impl TransportSpec {
    /// Reads `[transport]`: its `kind`, and its other keys as the parameters of that kind or,
    /// without one, of `traffic_kind` (the transport the first traffic entry naming one names).
    /// Errors are (the key, the reason): a key of another kind says which kinds take it.
    pub fn from_table(
        mut t: toml::Table,
        traffic_kind: Option<TransportKindSpec>,
    ) -> Result<TransportSpec, (String, String)> {
        let kind = match t.remove("kind") {
            None => None,
            Some(v) => {
                Some(TransportKindSpec::deserialize(v).map_err(|err| ("kind".to_string(), err.message().to_string()))?)
            }
        };
        let of = kind.or(traffic_kind).unwrap_or_default();
        let written: Vec<&'static str> =
            TransportKindSpec::ALL.iter().flat_map(|k| k.keys()).filter(|k| t.contains_key(**k)).copied().collect();
        let read = |t: toml::Table| -> Result<TransportParams, (String, String)> {
            let v = toml::Value::Table(t);
            let r = match of {
                TransportKindSpec::None => serde_path_to_error::deserialize(v).map(TransportParams::None),
                TransportKindSpec::Ndp => serde_path_to_error::deserialize(v).map(TransportParams::Ndp),
                TransportKindSpec::Dctcp => serde_path_to_error::deserialize(v).map(TransportParams::Dctcp),
                TransportKindSpec::Dcqcn => serde_path_to_error::deserialize(v).map(TransportParams::Dcqcn),
            };
            r.map_err(|err| {
                let path = err.path().to_string();
                let reason = err.into_inner().message().to_string();
                let Some(key) = reason.strip_prefix("unknown field `").and_then(|r| r.split('`').next()) else {
                    return (path, reason);
                };
                let takes: Vec<String> = TransportKindSpec::ALL
                    .iter()
                    .filter(|k| k.keys().contains(&key))
                    .map(|k| format!("\"{}\"", k.name()))
                    .collect();
                if !takes.is_empty() {
                    let why = format!("applies only with kind = {} (kind is \"{}\")", takes.join(" or "), of.name());
                    return (key.to_string(), why);
                }
                let listed: Vec<String> =
                    std::iter::once("kind").chain(of.keys().iter().copied()).map(|k| format!("`{k}`")).collect();
                (
                    key.to_string(),
                    format!("unknown field `{key}`; kind = \"{}\" takes {}", of.name(), listed.join(", ")),
                )
            })
        };
        Ok(TransportSpec { kind: kind.unwrap_or_default(), params: read(t)?, written })
    }
}

/// Keys a traffic entry no longer takes, with where they are now.
const MOVED_KEYS: &[(&str, &str)] = &[(
    "switch_memory_bytes",
    "is a switch resource, [ina] switch_memory_bytes (or [ina] table_size in aggregators), the same key for every protocol",
)];

/// Deserializes an entry's table into its kind's struct `T`, with the path of an error inside it.
fn entry_keys<T: serde::de::DeserializeOwned>(
    kind: TrafficKind,
    protocol: Option<&str>,
    t: toml::Table,
) -> Result<T, (String, String)> {
    serde_path_to_error::deserialize(toml::Value::Table(t)).map_err(|err| {
        let path = err.path().to_string();
        let reason = err.into_inner().message().to_string();
        if let Some(key) = reason.strip_prefix("unknown field `").and_then(|r| r.split('`').next()) {
            if let Some((_, why)) = MOVED_KEYS.iter().find(|(k, _)| *k == key) {
                return (key.to_string(), why.to_string());
            }
            let mut takes = vec!["kind"];
            takes.extend(kind.keys_with(protocol));
            let listed: Vec<String> = takes.iter().map(|k| format!("`{k}`")).collect();
            let listed = format!("kind = \"{}\" takes {}", kind.name(), listed.join(", "));
            let other = TrafficKind::ALL.iter().any(|k| k.keys().contains(&key));
            let reason = if other {
                format!("is not a parameter of kind = \"{}\" ({listed})", kind.name())
            } else {
                format!("unknown field `{key}`; {listed}")
            };
            return (key.to_string(), reason);
        }
        (if path == "." { String::new() } else { path }, reason)
    })
}

/// The keys a table type takes, as serde's derive lists them (declaration order).
pub(crate) fn fields_of<'de, T: Deserialize<'de>>() -> &'static [&'static str] {
    use serde::de::{Error, Visitor};
    struct Probe(&'static [&'static str]);
    impl<'de> serde::Deserializer<'de> for &mut Probe {
        type Error = serde::de::value::Error;
        fn deserialize_any<V: Visitor<'de>>(self, _: V) -> Result<V::Value, Self::Error> {
            Err(Self::Error::custom("not a table type"))
        }
        fn deserialize_struct<V: Visitor<'de>>(
            self,
            _: &'static str,
            fields: &'static [&'static str],
            _: V,
        ) -> Result<V::Value, Self::Error> {
            self.0 = fields;
            Err(Self::Error::custom("probed"))
        }
        serde::forward_to_deserialize_any! {
            bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string bytes byte_buf option unit
            unit_struct newtype_struct seq tuple tuple_struct map enum identifier ignored_any
        }
    }
    let mut p = Probe(&[]);
    let _ = T::deserialize(&mut p);
    p.0
}

/// `"all"` or an explicit list of host indices.
#[derive(Debug, Clone)]
pub enum HostsSpec {
    Keyword(String),
    List(Vec<u32>),
}

// Hand-written rather than `#[serde(untagged)]`: an untagged enum buffers the value and loses
// the error path, so `hosts = [0, -1]` said only "data did not match any variant" at
// `traffic[0].hosts` instead of naming `traffic[0].hosts[1]`.
impl<'de> Deserialize<'de> for HostsSpec {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> serde::de::Visitor<'de> for V {
            type Value = HostsSpec;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("\"all\" or a list of host indices")
            }
            fn visit_str<E: serde::de::Error>(self, s: &str) -> Result<HostsSpec, E> {
                Ok(HostsSpec::Keyword(s.to_string()))
            }
            fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<HostsSpec, A::Error> {
                let mut v = Vec::new();
                while let Some(h) = seq.next_element::<u32>()? {
                    v.push(h);
                }
                Ok(HostsSpec::List(v))
            }
        }
        d.deserialize_any(V)
    }
}

#[derive(Debug, Deserialize, Clone, Copy, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum FaultKind {
    Link,
    Node,
    /// A lossy link: each traversal loses the packet with `probability`.
    Loss,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FaultSpec {
    pub kind: FaultKind,
    pub link: Option<u32>,
    pub node: Option<u32>,
    pub at_ns: Option<f64>,
    pub probability: Option<f64>,
}

#[derive(Debug, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct RunSpec {
    pub time_limit_us: Option<f64>,
    /// No-progress watchdog (simulated µs); 0 turns it off.
    pub watchdog_us: Option<f64>,
    /// Which simulator runs the scenario (default `packet`).
    pub backend: Option<Backend>,
    /// `auto`'s switch-over size (default [`AUTO_FLOW_MIN_BYTES`](super::AUTO_FLOW_MIN_BYTES)).
    pub flow_min_bytes: Option<u64>,
}
