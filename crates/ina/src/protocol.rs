//! What makes an in-network protocol: one type ([`InaProtocol`]) that builds its switch
//! programs and its host agents, registered by name in [`crate::PROTOCOLS`] with the scenario
//! keys it takes. The simulator (and later the software switch) drives any protocol through
//! these traits only, so adding one touches its own module, the registry and its tests.

use std::any::Any;
use std::collections::BTreeMap;
use std::sync::Arc;

use crate::fabric::Fabric;
use crate::host::{Collective, HostStats};
use crate::{Header, HostAction, SwitchProgram, Values};

/// Switch-side settings shared by every protocol (the scenario's `[ina]` section).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct SwitchConfig {
    /// Descriptors (aggregator slots) per switch.
    pub table_size: u32,
    /// Static partition: slots per tenant (`None`: the protocol's default layout).
    pub slots_per_tenant: Option<u32>,
    /// How long a descriptor aggregates before flushing (Canary's t).
    pub timeout_ps: u64,
    /// Soft-state lifetime of a flushed descriptor without a broadcast.
    pub reclaim_ps: u64,
}

/// One collective of the scenario as a protocol's control plane sees it.
pub struct Tenant<'a> {
    pub coll: &'a Collective,
    pub protocol: &'a dyn InaProtocol,
    /// Root switches given for it (static trees; empty: the protocol's default).
    pub roots: &'a [u32],
}

/// An in-network allreduce protocol, configured for one collective.
pub trait InaProtocol: std::fmt::Debug + Send + Sync {
    fn info(&self) -> &'static crate::ProtocolInfo;
    /// Its name in results (`canary`, `static_trees:4` (the protocol name, then its tree count)).
    fn label(&self) -> String;
    fn as_any(&self) -> &dyn Any;
    /// How many root switches it takes (`roots = [...]`, for a protocol whose registry entry
    /// `takes_roots`), the same in every collective of a scenario: with none given, the
    /// scenario draws that many from its seed. `None`: it takes none.
    fn root_count(&self) -> Option<u16> {
        None
    }
    /// The program of every switch node (`None` for hosts) for all `tenants` of a scenario,
    /// which use this protocol (this is `tenants[0].protocol`). Errors start with the field
    /// they are about (`table_size: ...`, `traffic: ...`).
    fn switch_programs(
        &self,
        fabric: &Fabric,
        tenants: &[Tenant<'_>],
        cfg: &SwitchConfig,
    ) -> Result<Vec<Option<Box<dyn SwitchProgram>>>, String>;
    /// The agent of `rank` of collective `c`.
    fn host_agent(&self, c: &Collective, rank: u32) -> Box<dyn HostProtocol>;
    /// The protocol's own switch service model, if it has one: (packets per second a switch's
    /// program serves, one packet's processing latency in ps) for packets of
    /// `elements_per_packet` 4-byte words. `None`: the scenario's `[ina]` limits (Flare's PsPIN
    /// switch has its own, `reducelab_flare::sparse::cost`).
    fn switch_service(&self, _elements_per_packet: u16) -> Option<(f64, u64)> {
        None
    }
    /// Whether the software switch (`crates/switch`, separate processes over UDP) can run it:
    /// everything its packets carry must travel in the wire frame (the header, the dense values,
    /// or the protocol's own payload: [`Self::encode_payload`]). `Err` says why not, starting
    /// with the field (`protocol: ...`). Every protocol on main says yes.
    fn software_switch(&self) -> Result<(), String> {
        Ok(())
    }
    /// The frame its packets travel in on a wire (the software switch; the simulator's
    /// `[ina] wire_check`). Default: the Canary header of §4.1.
    fn frame(&self) -> crate::wire::Frame {
        crate::wire::Frame::Canary
    }
    /// Whether its packets carry a payload of the protocol's own in place of dense element
    /// values: then a runtime that puts packets on a wire (the software switch) encodes and
    /// decodes their payload with [`Self::encode_payload`] and [`Self::decode_payload`] instead
    /// of the `Values` slab. Default: no, the frame's elements are the packet's values.
    fn carries_payload(&self) -> bool {
        false
    }
    /// Largest payload in bytes of one packet of collective `c` (the frame's bytes between
    /// header and fingerprint), checked against the datagram size when a run is planned.
    /// Default: `elements_per_packet` 4-byte values.
    fn max_payload_bytes(&self, c: &Collective) -> usize {
        4 * c.elems_per_packet as usize
    }
    /// Appends the payload of `hdr`, a packet of collective `c` that this process's switch
    /// program or host agent emitted, to `out` (a multiple of 4 bytes, at most
    /// [`Self::max_payload_bytes`]). It takes what the packet holds beside its header out of
    /// this process's memory, so it is called exactly once per packet emitted, also for one
    /// that is then dropped (`out` discarded). Errors start with the field.
    fn encode_payload(&self, _c: &Collective, hdr: &Header, _out: &mut Vec<u8>) -> Result<(), String> {
        Err(format!("payload: protocol {} carries no payload of its own (packet {:#x})", self.label(), hdr.id))
    }
    /// Reads the payload `bytes` of a received packet of collective `c` (untrusted: never
    /// panics), checks it against the header and the collective, stores it in this process's
    /// memory and rewrites `hdr` to refer to it (as the packet the sender's program made).
    /// Errors start with the field (`count: ...`, `index: ...`, `length: ...`); on error
    /// nothing is stored.
    fn decode_payload(&self, _c: &Collective, hdr: &mut Header, _bytes: &[u8]) -> Result<(), String> {
        Err(format!("payload: protocol {} carries no payload of its own (packet {:#x})", self.label(), hdr.id))
    }
    /// Bytes of switch memory one of its aggregator slots takes, for switches that aggregate
    /// up to `max_elements_per_packet` elements per packet (the scenario's `[ina]`
    /// `switch_memory_bytes` is this many slots). Default: a descriptor of the Canary header's
    /// fields and the elements' 4-byte values.
    fn slot_bytes(&self, max_elements_per_packet: u16) -> u64 {
        crate::wire::HEADER_BYTES as u64 + 4 * max_elements_per_packet as u64
    }
    /// How long its hosts may go on recovering by themselves, with nothing delivered, before
    /// they give a block up (0: no host timers). A no-progress watchdog must wait at least this
    /// long so that it never cuts a recovery short.
    fn recovery_horizon_ps(&self) -> u64 {
        0
    }
    /// How a running switch of this protocol serves a session: allreduces of any size, one
    /// after another, through the switches started from the scenario (the C ABI, the MPI
    /// runtime). `Err` says why it cannot, starting with the field (`protocol: ...`). Default:
    /// it cannot, since its switch programs are built for the scenario's collectives.
    fn session_calls(&self) -> Result<SessionCalls, String> {
        Err(format!(
            "protocol: {}'s switch programs are built for the scenario's collectives, so a running switch cannot serve allreduces of other sizes",
            self.label()
        ))
    }
    /// Why a run with `lost_packets` losses did not finish, from the protocol's side.
    fn stall_cause(&self, lost_packets: u64) -> String {
        if lost_packets > 0 {
            format!("{lost_packets} packets were lost and recovery did not complete")
        } else {
            "no event is pending".to_string()
        }
    }
}

/// How the calls of a session map to collectives ([`InaProtocol::session_calls`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SessionCalls {
    /// Each call is a collective of the session's ranks under the next tenant id (0..=255,
    /// round robin): the switch programs do not depend on the collective (Canary's descriptors
    /// are keyed by packet id), and a late packet of an earlier call carries another tenant.
    NextTenant,
    /// Every call is the scenario's first collective (its tenant and ranks) with its blocks
    /// numbered on from the last call's ([`Collective::sequence_base`]): the switch programs
    /// know the tenant's tree, not its size, and tell a late packet of an earlier call by its
    /// sequence.
    ContinuedSequence,
    /// As [`Self::ContinuedSequence`], but the switch programs compare block numbers as plain
    /// integers (SwitchML takes a slot over only for a higher block number), so the sequence
    /// must not wrap: a session carries at most [`MAX_BLOCKS`](crate::host::MAX_BLOCKS) blocks
    /// over all its calls, a call that would pass them is refused, and a switch that served a
    /// session must be restarted before the next one (it keeps its slots' block numbers).
    ContinuedSequenceNoWrap,
}

impl SessionCalls {
    /// Whether every call is the scenario's first collective with its blocks numbered on.
    pub fn continues_sequence(self) -> bool {
        matches!(self, SessionCalls::ContinuedSequence | SessionCalls::ContinuedSequenceNoWrap)
    }
}

/// A rank's progress through its collective ([`HostProtocol::progress`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Progress {
    /// When it had every block (or its protocol's own unit: [`HostProtocol::expected`]).
    pub finished_ps: Option<u64>,
    /// Blocks (or units) still expected.
    pub missing: u32,
}

/// The host side of a protocol: a sans-I/O state machine driven by the NIC (pull), arriving
/// packets and its own timers.
pub trait HostProtocol {
    /// Called once when the collective starts.
    fn start(&mut self, c: &Collective, now: u64, vals: &mut Values, out: &mut Vec<HostAction>);
    /// Produces up to `room` more packets (the NIC pulls them lazily).
    fn pull(&mut self, c: &Collective, now: u64, room: usize, vals: &mut Values, out: &mut Vec<HostAction>);
    fn on_packet(&mut self, c: &Collective, now: u64, hdr: Header, vals: &mut Values, out: &mut Vec<HostAction>);
    fn on_timer(&mut self, c: &Collective, now: u64, token: u64, vals: &mut Values, out: &mut Vec<HostAction>);
    /// What this rank has received so far.
    fn progress(&self) -> Progress;
    /// When this rank had every block.
    fn finished_ps(&self) -> Option<u64> {
        self.progress().finished_ps
    }
    /// When this rank was done with the collective (for Canary: released by the coordinator's
    /// completion notification; otherwise when it had every block).
    fn completed_ps(&self) -> Option<u64> {
        self.finished_ps()
    }
    /// Blocks still expected.
    fn missing(&self) -> u32 {
        self.progress().missing
    }
    /// What [`Self::missing`] counts down from, and its unit, for progress and stall reports
    /// (default: the collective's blocks; the sparse protocols' own blocks or steps).
    fn expected(&self, c: &Collective) -> (u32, &'static str) {
        (c.blocks, "blocks")
    }
    fn stats(&self) -> &HostStats;
    /// How long after [`Self::completed_ps`] this rank must go on answering its peers before it
    /// may leave (a runtime whose hosts exit: the software switch's; the simulator's hosts never
    /// leave). Canary's coordinator answers the completion notices of ranks whose release was
    /// lost; if it left at once, such a rank would wait for ever.
    fn linger_ps(&self) -> u64 {
        0
    }
    /// The collective is over for every rank (the runtime's control plane says so, as it
    /// releases the tenant from the switches): the agent frees what it keeps to answer its peers
    /// (a co-located parameter server's results), and drops what arrives late. Default: it
    /// keeps nothing.
    fn release(&mut self, _now: u64, _vals: &mut Values) {}
    /// For a runtime whose completed hosts leave at once (the software switch's sessions): how
    /// long after [`Self::finished_ps`] a rank that is still not released may conclude that it
    /// was (its completion notices unanswered all that time); `None`: never.
    fn release_wait_ps(&self) -> Option<u64> {
        None
    }
}

/// A protocol's own numeric keys of one traffic entry (key → value as written).
pub type Params = BTreeMap<String, f64>;

/// A key the protocol refused, and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ParamError {
    pub key: String,
    pub reason: String,
}

impl ParamError {
    pub fn new(key: &str, reason: impl Into<String>) -> ParamError {
        ParamError { key: key.to_string(), reason: reason.into() }
    }
}

/// Reads a number key within `min..=max` (default when absent).
pub fn number(p: &Params, key: &str, default: f64, min: f64, max: f64) -> Result<f64, ParamError> {
    match p.get(key) {
        None => Ok(default),
        Some(&x) if x.is_finite() && x >= min && x <= max => Ok(x),
        Some(x) => Err(ParamError::new(key, format!("must be within {min}..={max}, got {x}"))),
    }
}

/// Reads a whole-number key within `min..=max`.
pub fn integer(p: &Params, key: &str, default: u64, min: u64, max: u64) -> Result<u64, ParamError> {
    let x = number(p, key, default as f64, min as f64, max as f64)?;
    if x.fract() != 0.0 {
        return Err(ParamError::new(key, format!("must be a whole number, got {x}")));
    }
    Ok(x as u64)
}

/// Refuses keys the protocol does not take.
pub fn only_known(p: &Params, info: &crate::ProtocolInfo) -> Result<(), ParamError> {
    for k in p.keys() {
        if !info.params.iter().any(|s| s.key == k) {
            return Err(ParamError::new(k, format!("is not used by protocol = \"{}\"", info.name)));
        }
    }
    Ok(())
}

/// Builds a registered protocol from its keys.
pub type Build = fn(&Params) -> Result<Arc<dyn InaProtocol>, ParamError>;
