//! The in-network collectives of a scenario (`kind = "ina_allreduce"`) and the switch-side
//! settings they share (`[ina]`), resolved; and their set-up ([`setup`]): the checks every
//! driver makes, the collectives and the protocol's switch programs.

use std::sync::Arc;

use reducelab_des::SimTime;
use reducelab_ina::fabric::{Fabric, FabricNode};
use reducelab_ina::host::Collective;
use reducelab_ina::{InaProtocol, SwitchConfig, SwitchProgram, Tenant};
use reducelab_net::ProgramLimits;
use reducelab_topo::Topology;

/// Switch-side settings shared by every in-network collective of a scenario.
#[derive(Clone, Debug, PartialEq)]
pub struct InaSwitchSpec {
    /// Descriptors (aggregator slots) per switch, unless `switch_memory_bytes` is given.
    pub table_size: u32,
    /// The switch memory for aggregation in bytes: then a switch has as many slots as fit, by
    /// the protocol's slot size ([`InaProtocol::slot_bytes`]; [`InaSwitchSpec::config`]).
    pub switch_memory_bytes: Option<u64>,
    /// Static partition: slots per tenant (`None`: one shared hash-indexed table).
    pub slots_per_tenant: Option<u32>,
    /// Aggregation throughput of a switch pipeline and its extra latency.
    pub limits: ProgramLimits,
    /// Canary: soft-state lifetime of a flushed descriptor.
    pub reclaim_ps: u64,
    /// Canary: the switch timeout t.
    pub timeout_ps: u64,
    /// Sampling period of the descriptor-occupancy time series.
    pub sample_ps: u64,
    /// Elements a switch can aggregate per packet (its ALUs): 32 on the Tofino prototype,
    /// 256 in the paper's large simulations (§5.1). Collectives may not use more.
    pub max_elements_per_packet: u16,
    /// Every header a protocol hands over travels through its wire frame
    /// (`reducelab_ina::wire::emit`/`parse`) and the parsed copy goes on: a run that is
    /// byte-identical with and without it shows the frame carries all the protocol uses.
    pub wire_check: bool,
}

impl Default for InaSwitchSpec {
    fn default() -> Self {
        InaSwitchSpec {
            // §5.1: the Tofino prototype holds 32K descriptors.
            table_size: 32768,
            switch_memory_bytes: None,
            slots_per_tenant: None,
            // §4: a Tofino pipeline processes 1.2 billion packets per second; aggregation is
            // part of the forwarding pipeline, so it adds no latency of its own.
            limits: ProgramLimits { packets_per_second: 1.2e9, latency_ps: 0 },
            reclaim_ps: 2_000_000_000,
            timeout_ps: 1_000_000,
            sample_ps: 1_000_000,
            max_elements_per_packet: 256,
            wire_check: false,
        }
    }
}

impl InaSwitchSpec {
    /// The switch settings a protocol's programs are built with: `table_size` slots, or as
    /// many of the protocol's slots as `switch_memory_bytes` holds. Errors start with the key.
    pub fn config(&self, protocol: &dyn InaProtocol) -> Result<SwitchConfig, String> {
        let table_size = match self.switch_memory_bytes {
            None => self.table_size,
            Some(bytes) => {
                let slot = protocol.slot_bytes(self.max_elements_per_packet).max(1);
                let slots = bytes / slot;
                if slots == 0 || slots > 1 << 24 {
                    return Err(format!(
                        "switch_memory_bytes: {bytes} B hold {slots} {} slots of {slot} B; a switch has 1..=16777216",
                        protocol.label()
                    ));
                }
                slots as u32
            }
        };
        Ok(SwitchConfig {
            table_size,
            slots_per_tenant: self.slots_per_tenant,
            timeout_ps: self.timeout_ps,
            reclaim_ps: self.reclaim_ps,
        })
    }
}

/// One in-network allreduce of a scenario.
#[derive(Clone, Debug)]
pub struct InaSpec {
    pub hosts: Vec<u32>,
    pub bytes: u64,
    pub start: SimTime,
    /// The protocol, as built by its registry entry from the traffic entry's keys.
    pub protocol: Arc<dyn InaProtocol>,
    pub elems_per_packet: u16,
    /// Carry real element values (small runs).
    pub values: bool,
    /// Static trees: root switch (node id) of each tree.
    pub roots: Vec<u32>,
    /// When each rank joins, if not all at `start` (a training job's partition: each worker
    /// when its layer's gradients are ready); `start` is then the earliest.
    pub rank_start: Vec<SimTime>,
    /// Each rank joins when its trace reaches the collective (a `chakra` entry's collectives
    /// served in-network), not at a time known beforehand: `start` and `rank_start` are unused.
    pub trace_driven: bool,
}

/// A `training` entry whose protocol is an in-network allreduce protocol (of
/// [`reducelab_ina::PROTOCOLS`]): every job's tensor partitions (§VII-B's models, send order,
/// start times and jitter, as the shared-pool protocols' jobs have them) as in-network
/// allreduces of the job's workers, each worker joining a partition's allreduce when that
/// partition is ready on it.
#[derive(Clone, Debug)]
pub struct InaTraining {
    pub protocol: Arc<dyn InaProtocol>,
    pub jobs: Vec<InaTrainingJob>,
    /// The allreduces: job by job, each job's partitions in send order.
    pub specs: Vec<InaSpec>,
    /// Bounds of the jobs' start times and of each partition's jitter (drawn from the seed).
    pub start_max_ps: u64,
    pub jitter_max_ps: u64,
}

/// One job of an [`InaTraining`].
#[derive(Clone, Debug)]
pub struct InaTrainingJob {
    pub model: reducelab_ina::training::DnnModel,
    pub workers: Vec<u32>,
    pub start_ps: u64,
    /// Its allreduces in [`InaTraining::specs`].
    pub specs: std::ops::Range<usize>,
}

/// The salt of a scenario's in-network collectives' contributions (so that the software switch's
/// hosts contribute the same values as the simulated ones).
/// The protocol of an `ina_allreduce` entry that names none.
pub const DEFAULT_PROTOCOL: &str = "canary";

pub fn collective_salt(seed: u64) -> u64 {
    seed ^ 0xC0FFEE
}

/// The topology as the protocols' control plane sees it (also the software switch's).
pub fn fabric_of(topo: &Topology) -> Fabric {
    Fabric {
        nodes: topo
            .nodes
            .iter()
            .map(|n| FabricNode {
                is_host: n.host.is_some(),
                forwards: n.forwards,
                ports: n.ports.iter().map(|p| (p.peer.0, p.peer_port)).collect(),
            })
            .collect(),
        host_nodes: (0..topo.num_hosts() as u32).map(|h| topo.host_node(h).0).collect(),
    }
}

/// What a scenario's in-network collectives are set up from: the fabric, the collectives (ids
/// in traffic order) and every switch's program (`None`: a host, or no program there).
pub struct InaSetup {
    pub fabric: Fabric,
    pub colls: Vec<Collective>,
    pub programs: Vec<Option<Box<dyn SwitchProgram>>>,
    /// The largest elements per packet of the collectives.
    pub elems_per_packet: u16,
}

/// Sets up `specs` on `topo` (the checks every driver makes, then the protocol's switch
/// programs). Errors start with the field they are about (`protocol`, `topology`, `traffic` or
/// an `[ina]` key).
pub fn setup(topo: &Topology, specs: &[InaSpec], switch: &InaSwitchSpec, seed: u64) -> Result<InaSetup, String> {
    if let Some(first) = specs.first() {
        if let Some(other) = specs.iter().find(|s| s.protocol.info().name != first.protocol.info().name) {
            return Err(format!(
                "protocol: every in-network collective of a scenario must use the same protocol ({} and {})",
                first.protocol.info().name,
                other.protocol.info().name
            ));
        }
    }
    if specs.len() > 256 {
        return Err(format!("{} in-network collectives; the 8-bit application id allows 256", specs.len()));
    }
    if let (true, Some(first)) = (switch.wire_check, specs.first()) {
        // The check carries every header through the frame the software switch sends.
        if let Err(why) = first.protocol.software_switch() {
            return Err(format!("wire_check: {}", why.trim_start_matches("protocol: ")));
        }
    }
    if topo.nodes.iter().any(|n| n.host.is_some() && n.forwards) {
        return Err(format!(
            "topology: in-network aggregation runs on indirect networks (star, fat trees, dragonfly); the hosts of {} forward traffic",
            topo.name
        ));
    }
    for n in &topo.nodes {
        if n.host.is_none() && n.ports.len() > 64 {
            return Err(format!("switch with {} ports: port bitmaps hold 64", n.ports.len()));
        }
    }
    let epp = specs.iter().map(|s| s.elems_per_packet).max().unwrap_or(1);
    if epp > switch.max_elements_per_packet {
        return Err(format!(
            "max_elements_per_packet: a collective uses {epp} elements per packet but the switches aggregate at most {}",
            switch.max_elements_per_packet
        ));
    }
    let fabric = fabric_of(topo);
    let mut colls = Vec::new();
    for (ci, s) in specs.iter().enumerate() {
        colls.push(
            Collective::new(ci as u16, s.hosts.clone(), s.bytes, s.elems_per_packet, collective_salt(seed), s.values)
                .map_err(|r| format!("traffic: {r}"))?,
        );
    }
    let programs = match specs.first() {
        None => (0..topo.nodes.len()).map(|_| None).collect(),
        Some(first) => {
            let tenants: Vec<Tenant<'_>> = specs
                .iter()
                .zip(&colls)
                .map(|(s, c)| Tenant { coll: c, protocol: &*s.protocol, roots: &s.roots })
                .collect();
            let cfg = switch.config(&*first.protocol)?;
            first.protocol.switch_programs(&fabric, &tenants, &cfg)?
        }
    };
    Ok(InaSetup { fabric, colls, programs, elems_per_packet: epp })
}
