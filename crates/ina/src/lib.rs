//! In-network aggregation protocols as **sans-I/O** state machines: switch programs and host
//! agents that take packets and timer expiries in and push [`SwAction`]s / [`HostAction`]s out.
//! They know nothing of the simulator; `reducelab-sim` drives them on the packet engine, and
//! the same code can drive a real UDP software switch later.
//!
//! - [`canary`]: Canary (De Sensi et al., FGCS 2024, §3–4): dynamic reduction trees built by
//!   the network's congestion-aware routing, switch timeouts, descriptors in a hash-indexed
//!   static array, collisions (bypass) and tree restoration, leader hosts, loss recovery.
//! - [`tree`]: in-network allreduce on one or N static reduction trees (SHARP / SwitchML /
//!   ATP-like with one tree; PANAMA-like with N trees and blocks assigned round-robin).
//! - [`reliable_tree`]: a SHARP-style reliable aggregation tree (not in the seeds): hosts re-send
//!   until the result arrives, switches deduplicate by child port and keep results.
//! - [`pool_allreduce`]: SwitchML, ATP and DSA (their switch programs, worker windows and
//!   parameter servers, the shared-pool ones) as allreduces of this registry.
//! - [`canary_host`]: Canary's host agent (leaders, loss recovery, completion).
//! - [`host`]: what every protocol's host side shares (blocks, contributions, result checks).
//! - [`protocol`]: the [`InaProtocol`] type each protocol implements (its switch programs and
//!   host agents), registered by name in [`PROTOCOLS`].
//! - [`fabric`]: the network as plain data, for protocols' set-up (e.g. building trees).
//! - [`wire`]: the 19-byte Canary header of §4.1.
//! - [`pool_wire`]: the UDP frame of [`pool::AggPacket`] (the software switch's pool protocols).
//!
//! Shared switch memory (DSA, seed 001, and its baselines), with their own packet type
//! ([`pool::AggPacket`]) and actions ([`pool::PoolAction`], [`pool::PsAction`]), driven
//! by the engine as training jobs (`reducelab-sim`'s `training_run`) and, through
//! [`pool_allreduce`], as allreduces of [`PROTOCOLS`]:
//! - [`pool`]: the aggregator pool ⟨JobID_PSN, bitmap, priority, values⟩ sized from switch
//!   memory (§VII-B: 5 MB / 306 B = 16 339 aggregators), the packets, the `Hash(JobID, PSN)`
//!   index, occupancy over time.
//! - [`switchml`]: SwitchML (NSDI'21): a region per job, `PSN mod size + offset`, two slot sets
//!   (shadow copy), result multicast, retransmissions answered from the kept result.
//! - [`atp`]: ATP (NSDI'21): hashed, first come first served, collisions to the PS, the PS's
//!   ACK frees the aggregator, a resend clears it.
//! - [`dsa`]: DSA: hashed, preemption by priority (swap with the evicted partial), bitmap
//!   deduplication, priority downgrading, reminders from the PS, ACKs from switch or PS.
//! - [`pool_jobs`]: a training entry's jobs on the pool (layout on a fabric, switch programs,
//!   parameter servers, worker windows, two-level trees, gradient packets, result checks), what
//!   the simulator's driver and the software switch both run.
//! - [`ps`]: ATP's and DSA's parameter server (dictionary of partial aggregates by PSN,
//!   completion, re-ACKs, DSA's reminder timeout as an EWMA with a floor).
//! - [`policy`]: DSA's priority P_j(l) (Eq. 1), its header encoding and the §VII-C strawmen.
//! - [`training`]: §VII-B's training jobs as data (DNN A/B, partition order, ready times);
//!   the worker transport is `reducelab_transport::worker`.
//!
//! Units: times are integer picoseconds; data is `elems` 32-bit integer elements per packet
//! (switches aggregate fixed point, §6), carried as a 64-bit fingerprint (wrapping sum of
//! per-(host, block) values) and, in small runs, as real element values in a [`Values`] slab.

pub mod atp;
pub mod canary;
pub mod canary_host;
pub mod dsa;
pub mod dsa_tasks;
pub mod fabric;
pub mod flare;
#[doc(hidden)]
pub mod fuzz;
pub mod host;
pub mod policy;
pub mod pool;
pub mod pool_allreduce;
pub mod pool_jobs;
pub mod pool_node;
pub mod pool_wire;
pub mod protocol;
pub mod ps;
pub mod reliable_tree;
pub mod switchml;
pub mod training;
pub mod tree;
pub mod wire;

pub use protocol::{HostProtocol, InaProtocol, ParamError, Params, Progress, SessionCalls, SwitchConfig, Tenant};

pub use wire::Kind;

/// One in-network protocol as scenario files name it (`[[traffic]] protocol = NAME`).
///
/// This is the registry every front end reads: the scenario parser resolves names through
/// it, and the protocol property test (`crates/sim/tests/ina_properties.rs`) runs every entry
/// over random timeouts, loss, table sizes, tenants, stragglers and switch failures, so a
/// protocol added here is covered without editing that test.
#[derive(Clone, Copy, Debug)]
pub struct ProtocolInfo {
    pub name: &'static str,
    pub summary: &'static str,
    /// Whether the protocol recovers from lost packets (without it a loss must end the run
    /// as stalled, with the reason).
    pub loss_recovery: bool,
    /// Whether a duplicated packet is never counted twice (its switch programs, servers and
    /// hosts tell copies apart). Without it a contribution duplicated on its way may be added
    /// twice: every host's result check finds the wrong sum (the run ends unverified or
    /// stalled, never verified), and a late copy may hold switch state at the end (counted
    /// in `descriptors_left`).
    pub duplicate_safe: bool,
    /// Its own numeric keys of an `ina_allreduce` traffic entry.
    pub params: &'static [ParamSpec],
    /// Whether it takes `roots = [...]` (root switches chosen by the scenario).
    pub takes_roots: bool,
    /// Builds the protocol from its keys.
    pub build: protocol::Build,
}

/// A protocol-specific scenario key and the range worth exploring (property tests, sweeps).
#[derive(Clone, Copy, Debug)]
pub struct ParamSpec {
    pub key: &'static str,
    pub explore_min: f64,
    pub explore_max: f64,
    pub integer: bool,
    /// Explore on a logarithmic scale (timeouts spanning decades).
    pub log: bool,
}

pub const PROTOCOLS: &[ProtocolInfo] = &[
    ProtocolInfo {
        name: "canary",
        summary: "Canary (FGCS 2024): dynamic trees, switch timeouts, collisions and restoration, leader hosts, loss recovery",
        loss_recovery: true,
        duplicate_safe: false,
        params: &[
            ParamSpec { key: "retransmit_timeout_us", explore_min: 1.0, explore_max: 1000.0, integer: false, log: true },
            ParamSpec { key: "max_failures", explore_min: 0.0, explore_max: 14.0, integer: true, log: false },
        ],
        takes_roots: false,
        build: canary::Canary::build,
    },
    ProtocolInfo {
        name: "static_trees",
        summary: "one (SHARP/SwitchML/ATP-like) or N (PANAMA-like) static reduction trees, no loss recovery",
        loss_recovery: false,
        duplicate_safe: false,
        params: &[
            ParamSpec { key: "trees", explore_min: 1.0, explore_max: 8.0, integer: true, log: false },
            ParamSpec { key: "window", explore_min: 1.0, explore_max: 16.0, integer: true, log: true },
        ],
        takes_roots: true,
        build: tree::StaticTrees::build,
    },
    ProtocolInfo {
        name: "flare",
        summary: "Flare (seed 004) dense: one reduction tree on PsPIN switches (per-packet handler time from §3/§6), no loss recovery",
        loss_recovery: false,
        duplicate_safe: false,
        params: &[ParamSpec { key: "window", explore_min: 1.0, explore_max: 16.0, integer: true, log: true }],
        takes_roots: false,
        build: flare::FlareDense::build,
    },
    ProtocolInfo {
        name: "flare_sparse",
        summary: "Flare (seed 004 §7) sparse: hash table + spill at leaves, array at the root, shard counters, densified results; synthetic top-1-per-bucket data",
        loss_recovery: false,
        duplicate_safe: false,
        params: &[
            ParamSpec { key: "window", explore_min: 1.0, explore_max: 16.0, integer: true, log: true },
            ParamSpec { key: "bucket_elements", explore_min: 2.0, explore_max: 1024.0, integer: true, log: true },
            ParamSpec { key: "index_overlap", explore_min: 0.0, explore_max: 1.0, integer: false, log: false },
            ParamSpec { key: "hash_slots", explore_min: 1.0, explore_max: 1024.0, integer: true, log: true },
        ],
        takes_roots: false,
        build: flare::FlareSparse::build,
    },
    ProtocolInfo {
        name: "sparcml",
        summary: "SparCML (SC'19) host-based sparse recursive doubling over raw host-to-host packets (no switch programs), same data as flare_sparse",
        loss_recovery: false,
        duplicate_safe: false,
        params: &[
            ParamSpec { key: "bucket_elements", explore_min: 2.0, explore_max: 1024.0, integer: true, log: true },
            ParamSpec { key: "index_overlap", explore_min: 0.0, explore_max: 1.0, integer: false, log: false },
        ],
        takes_roots: false,
        build: flare::Sparcml::build,
    },
    ProtocolInfo {
        name: "sparcml_split",
        summary: "SparCML (SC'19) host-based split allgather (direct sparse reduce-scatter, ring allgather) over raw host-to-host packets, same data as flare_sparse",
        loss_recovery: false,
        duplicate_safe: false,
        params: &[
            ParamSpec { key: "bucket_elements", explore_min: 2.0, explore_max: 1024.0, integer: true, log: true },
            ParamSpec { key: "index_overlap", explore_min: 0.0, explore_max: 1.0, integer: false, log: false },
        ],
        takes_roots: false,
        build: flare::Sparcml::build_split,
    },
    ProtocolInfo {
        name: "reliable_tree",
        summary: "SHARP-style reliable aggregation tree (not in the seeds): one static tree, hosts re-send until the result arrives, switches deduplicate by child port and keep results to answer re-sends",
        loss_recovery: true,
        duplicate_safe: true,
        params: &[
            ParamSpec { key: "window", explore_min: 1.0, explore_max: 8.0, integer: true, log: true },
            ParamSpec { key: "retransmit_timeout_us", explore_min: 1.0, explore_max: 1000.0, integer: false, log: true },
        ],
        takes_roots: true,
        build: reliable_tree::ReliableTree::build,
    },
    ProtocolInfo {
        name: "switchml",
        summary: "SwitchML (NSDI'21) as an allreduce: the shared-pool switch program at one root switch per tenant (two sets of window aggregators, results kept for re-sends), ranks' slot windows with re-sends",
        loss_recovery: true,
        duplicate_safe: true,
        params: &[
            ParamSpec { key: "window", explore_min: 1.0, explore_max: 16.0, integer: true, log: true },
            ParamSpec { key: "retransmit_timeout_us", explore_min: 1.0, explore_max: 1000.0, integer: false, log: true },
        ],
        takes_roots: true,
        build: pool_allreduce::PoolAllreduce::build_switchml,
    },
    ProtocolInfo {
        name: "atp",
        summary: "ATP (NSDI'21) as an allreduce: hashed aggregators at one root switch, first come first served, collisions and results through the parameter server (on rank 0's host), AIMD windows with resends",
        loss_recovery: true,
        duplicate_safe: true,
        params: &[
            ParamSpec { key: "window", explore_min: 1.0, explore_max: 256.0, integer: true, log: true },
            ParamSpec { key: "retransmit_timeout_us", explore_min: 10.0, explore_max: 10000.0, integer: false, log: true },
        ],
        takes_roots: true,
        build: pool_allreduce::PoolAllreduce::build_atp,
    },
    ProtocolInfo {
        name: "dsa",
        summary: "DSA (seed 001) as an allreduce: hashed aggregators at one root switch with preemption by priority, bitmap deduplication, the parameter server's reminders (on rank 0's host), AIMD windows",
        loss_recovery: true,
        duplicate_safe: true,
        params: &[
            ParamSpec { key: "window", explore_min: 1.0, explore_max: 256.0, integer: true, log: true },
            ParamSpec { key: "retransmit_timeout_us", explore_min: 10.0, explore_max: 10000.0, integer: false, log: true },
        ],
        takes_roots: true,
        build: pool_allreduce::PoolAllreduce::build_dsa,
    },
];

/// The registry entry called `name`.
pub fn protocol(name: &str) -> Option<&'static ProtocolInfo> {
    PROTOCOLS.iter().find(|p| p.name == name)
}

/// The registry entry of a protocol module's own name (a typo here is a bug: it panics).
pub(crate) fn protocol_info(name: &str) -> &'static ProtocolInfo {
    protocol(name).unwrap_or_else(|| panic!("protocol {name} is not registered"))
}

/// The registered names, for error messages.
pub fn protocol_names() -> String {
    PROTOCOLS.iter().map(|p| format!("\"{}\"", p.name)).collect::<Vec<_>>().join(", ")
}

/// "No value" for handles and ids.
pub const NIL: u32 = u32::MAX;

/// Where a packet is addressed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Addr {
    Host(u32),
    /// A switch, by node id.
    Switch(u32),
    /// The host's first-hop switch (whichever it is attached to).
    FirstHop,
}

/// A protocol packet's header as the state machines use it (the wire form is
/// [`wire::WireHeader`]; this one also carries the simulator's data fingerprint and values).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Header {
    pub kind: Kind,
    pub dst: Addr,
    /// Application (tenant) id ⊕ sequence, unique per block and attempt.
    pub id: u32,
    pub tenant: u16,
    /// Static trees: which tree the block uses.
    pub tree: u16,
    /// Contributions reduced into this packet.
    pub counter: u16,
    /// Hosts taking part.
    pub hosts: u16,
    /// Collided packet: its ingress port at `switch_addr`. Restoration: the port bitmap.
    pub children: u64,
    pub switch_addr: u32,
    pub bypass: bool,
    /// Restoration packets: the kind of the copies they make (broadcast or failure).
    pub inner: Kind,
    /// Sending host (requests, fallback, completion).
    pub src: u32,
    /// Data elements carried.
    pub elems: u16,
    /// Wrapping sum of the fingerprints of the contributions carried.
    pub fp: u64,
    /// Slot of the element values in the [`Values`] slab, or [`NIL`].
    pub data: u32,
    /// Congestion experienced: a queue on the way marked the packet (the runtime ORs the
    /// network's mark in as the packet reaches a switch program or a host), or its sender
    /// echoes one (a parameter server's ACK). An IP-level bit, not in the protocol's frame.
    pub ecn: bool,
}

impl Header {
    pub fn new(kind: Kind, dst: Addr, id: u32, tenant: u16) -> Header {
        Header {
            kind,
            dst,
            id,
            tenant,
            tree: 0,
            counter: 0,
            hosts: 0,
            children: 0,
            switch_addr: NIL,
            bypass: false,
            inner: Kind::Broadcast,
            src: NIL,
            elems: 0,
            fp: 0,
            data: NIL,
            ecn: false,
        }
    }

    /// Bytes on the wire: data, Canary header, Ethernet header and framing.
    pub fn wire_bytes(&self) -> u32 {
        self.elems as u32 * 4 + wire::OVERHEAD_BYTES
    }

    /// Whether switches running the program process this packet (rather than just forward it).
    pub fn intercepted(&self) -> bool {
        match self.kind {
            Kind::Reduce => !self.bypass,
            Kind::Broadcast => true,
            // The tree-multicast form of a failure frees descriptors on its way down; the
            // unicast form goes straight to a host.
            Kind::Failure => self.switch_addr == MULTICAST_MARK,
            _ => false,
        }
    }

    /// The §4.1 multicast flag.
    pub fn multicast(&self) -> bool {
        matches!(self.kind, Kind::Broadcast | Kind::Restore)
            || (self.kind == Kind::Failure && self.switch_addr == MULTICAST_MARK)
    }
}

/// `switch_addr` of a failure notification travelling down the tree (multicast form).
pub const MULTICAST_MARK: u32 = NIL - 1;

/// Output of a packet leaving a switch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Out {
    /// Towards `dst` by the network's (congestion-aware) routing.
    Route,
    Port(u16),
}

/// What a switch program asks its switch to do.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SwAction {
    /// The arriving packet is absorbed.
    Consume,
    /// The arriving packet goes on, rewritten to `hdr`.
    Forward { out: Out, hdr: Header },
    /// A new packet (timeout flush, multicast copy).
    Emit { out: Out, hdr: Header },
    /// Call `on_timer(token)` at `at` ps (at once if `at` has passed).
    Timer { at: u64, token: u64 },
}

/// What a host agent asks its host to do.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HostAction {
    /// Queue a packet on the NIC.
    Send(Header),
    /// Call `on_timer(token)` at `at` ps, or at once if `at` has passed (a window's timer is
    /// its oldest packet's send time plus its timeout, which may be behind the clock): the
    /// packet engine and the software switch's hosts both fire such a timer at their present.
    Timer { at: u64, token: u64 },
}

/// A per-switch program.
pub trait SwitchProgram {
    /// A packet `hdr` arrived on local port `in_port`. Must push exactly one `Consume` or
    /// `Forward` for it.
    fn on_packet(&mut self, now: u64, in_port: u16, hdr: Header, vals: &mut Values, out: &mut Vec<SwAction>);
    fn on_timer(&mut self, now: u64, token: u64, vals: &mut Values, out: &mut Vec<SwAction>);
    /// Descriptors in use now.
    fn descriptors_in_use(&self) -> u32;
    /// Of those, the ones that only keep a finished block's result to answer re-sends
    /// (reusable by a later block at once, freed by [`Self::release_tenant`]). Default: none.
    fn kept_results(&self) -> u32 {
        0
    }
    /// The control plane's release of `tenant` once every host of its collective has completed
    /// (SHARP's group teardown): a program that keeps a tenant's state past its last packet
    /// (results kept to answer retransmissions) frees it here and drops the tenant's late
    /// packets from then on. Called by a runtime that knows when a collective ends (the
    /// simulator); a running switch serving sessions is never told. Default: nothing is kept.
    fn release_tenant(&mut self, _now: u64, _tenant: u16, _vals: &mut Values) {}
    fn stats(&self) -> &SwitchStats;
}

/// Counters of one switch program.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct SwitchStats {
    /// Reduce packets aggregated into a descriptor (including the first).
    pub aggregated: u64,
    /// Partial aggregates sent on (timeout or complete).
    pub flushed: u64,
    /// Reduce packets forwarded at once because their descriptor had already flushed.
    pub stragglers: u64,
    /// Reduce packets that found their slot held by another id (sent on as bypass).
    pub collisions: u64,
    /// Broadcast packets multicast along recorded children.
    pub broadcasts: u64,
    /// Broadcast packets dropped because no descriptor was stored (collision; restored later).
    pub broadcasts_without_descriptor: u64,
    pub restorations: u64,
    /// Descriptors freed by the soft-state timeout instead of a broadcast (after losses).
    pub reclaimed: u64,
    pub peak_descriptors: u32,
    /// Time integral of descriptors in use (descriptor·ps), for the time-weighted mean.
    pub descriptor_ps: u128,
    pub last_change_ps: u64,
}

impl SwitchStats {
    pub(crate) fn note_use(&mut self, now: u64, before: u32, after: u32) {
        self.descriptor_ps += before as u128 * now.saturating_sub(self.last_change_ps) as u128;
        self.last_change_ps = now;
        self.peak_descriptors = self.peak_descriptors.max(after);
    }
}

/// Fixed-stride slab of element arrays (real values for small runs). With stride 0 it is
/// disabled and every handle is [`NIL`]. Slots are recycled, so steady state allocates nothing.
#[derive(Clone, Debug, Default)]
pub struct Values {
    stride: usize,
    data: Vec<i32>,
    free: Vec<u32>,
    pub live: u32,
    pub peak: u32,
    /// Application data (the software switch's hosts): per collective of this process, its
    /// own contributions (used by [`host::contribution`] instead of the seeded values) and the
    /// results as they are checked. Empty in the simulator.
    calls: Vec<AppCall>,
}

/// One rank's application vector of one collective (the call of a session, told apart from
/// the session's other calls by its tenant and `sequence_base`): element
/// `b * elems_per_packet + e` is its contribution to element `e` of block `b`, and the same
/// element of [`Self::result`] is that element's reduction once block `b` is checked
/// ([`host::Results::check`], the one place every protocol's host checks a result).
#[derive(Clone, Debug, PartialEq)]
pub struct AppCall {
    pub tenant: u16,
    pub sequence_base: u32,
    pub rank: u32,
    pub elems_per_packet: u16,
    pub inputs: Vec<i32>,
    pub result: Vec<i32>,
    /// Blocks whose result is in [`Self::result`].
    pub got: Vec<bool>,
}

impl AppCall {
    /// Rank `rank`'s call of `c` contributing `inputs` (`c`'s elements, not checked here).
    pub fn new(c: &host::Collective, rank: u32, inputs: Vec<i32>) -> AppCall {
        let mut call = AppCall {
            tenant: c.tenant,
            sequence_base: c.sequence_base,
            rank,
            elems_per_packet: c.elems_per_packet,
            result: vec![0; inputs.len()],
            got: vec![false; c.blocks as usize],
            inputs,
        };
        if c.n() == 1 {
            // A lone rank's result is its own data; no packet carries it.
            call.result.copy_from_slice(&call.inputs);
            call.got.fill(true);
        }
        call
    }
    /// The first block whose result has not been checked yet.
    pub fn first_missing(&self) -> Option<u32> {
        self.got.iter().position(|g| !g).map(|b| b as u32)
    }
    fn is_of(&self, c: &host::Collective) -> bool {
        self.tenant == c.tenant && self.sequence_base == c.sequence_base
    }
}

impl Values {
    pub fn new(stride: usize) -> Values {
        Values { stride, ..Values::default() }
    }
    pub fn enabled(&self) -> bool {
        self.stride > 0
    }
    /// The contributions of `call.rank` to its collective come from `call.inputs` from now on,
    /// and its results are kept in `call.result` (replacing an open call of the same
    /// collective).
    pub fn open_call(&mut self, call: AppCall) {
        self.calls.retain(|k| (k.tenant, k.sequence_base) != (call.tenant, call.sequence_base));
        self.calls.push(call);
    }
    /// The open call of collective `c` (its data and results so far).
    pub fn call(&self, c: &host::Collective) -> Option<&AppCall> {
        self.calls.iter().find(|k| k.is_of(c))
    }
    /// Closes the call of collective `c`, giving its data and results back.
    pub fn close_call(&mut self, c: &host::Collective) -> Option<AppCall> {
        let i = self.calls.iter().position(|k| k.is_of(c))?;
        Some(self.calls.swap_remove(i))
    }
    /// Fills slot `slot` with `rank`'s contribution to block `b` of `c`: the application's
    /// values if `rank` has an open call of `c` here, else the seeded ones.
    pub(crate) fn fill_contribution(&mut self, slot: u32, c: &host::Collective, rank: u32, b: u32, elems: u16) {
        let app = self.calls.iter().find(|k| k.is_of(c) && k.rank == rank);
        let d = &mut self.data[slot as usize * self.stride..(slot as usize + 1) * self.stride];
        for (e, x) in d.iter_mut().enumerate().take(elems as usize) {
            *x = match app {
                Some(a) => a.inputs[b as usize * c.elems_per_packet as usize + e],
                None => contribution_value(c.salt, c.tenant, rank, b, e as u32),
            };
        }
    }
    /// Block `b` of `c`'s result is in slot `data` (checked by its host): kept in the open
    /// call of `c`, if any (the first copy; later ones are duplicates).
    pub(crate) fn note_result(&mut self, c: &host::Collective, b: u32, data: u32) {
        if self.calls.is_empty() || data == NIL {
            return;
        }
        let s = self.stride;
        let Some(k) = self.calls.iter_mut().find(|k| k.is_of(c)) else { return };
        let Some(got) = k.got.get_mut(b as usize).filter(|g| !**g) else { return };
        *got = true;
        let start = b as usize * k.elems_per_packet as usize;
        let n = (k.result.len() - start).min(k.elems_per_packet as usize);
        k.result[start..start + n].copy_from_slice(&self.data[data as usize * s..data as usize * s + n]);
    }
    pub fn alloc(&mut self) -> u32 {
        if !self.enabled() {
            return NIL;
        }
        self.live += 1;
        self.peak = self.peak.max(self.live);
        if let Some(s) = self.free.pop() {
            self.data[s as usize * self.stride..(s as usize + 1) * self.stride].fill(0);
            return s;
        }
        let s = (self.data.len() / self.stride) as u32;
        self.data.resize(self.data.len() + self.stride, 0);
        s
    }
    /// [`Self::alloc`] without zeroing a recycled slot (it holds a freed slot's old values): for
    /// a caller that overwrites every element at once, as `wire::parse_into` does (the
    /// software switch decodes each received frame into one; zeroing first was a second pass
    /// over the slot, 1 KiB per packet). A new slot is zeroed as ever.
    pub fn alloc_for_overwrite(&mut self) -> u32 {
        if !self.enabled() {
            return NIL;
        }
        self.live += 1;
        self.peak = self.peak.max(self.live);
        if let Some(s) = self.free.pop() {
            return s;
        }
        let s = (self.data.len() / self.stride) as u32;
        self.data.resize(self.data.len() + self.stride, 0);
        s
    }
    pub fn release(&mut self, slot: u32) {
        if slot != NIL {
            self.live -= 1;
            self.free.push(slot);
        }
    }
    pub fn get(&self, slot: u32) -> &[i32] {
        &self.data[slot as usize * self.stride..(slot as usize + 1) * self.stride]
    }
    pub fn get_mut(&mut self, slot: u32) -> &mut [i32] {
        &mut self.data[slot as usize * self.stride..(slot as usize + 1) * self.stride]
    }
    /// `dst += src` element-wise (wrapping, as switch ALUs do), then frees `src`.
    pub fn absorb(&mut self, dst: u32, src: u32) {
        if dst == NIL || src == NIL {
            self.release(src);
            return;
        }
        let s = self.stride;
        let (d, sr) = (dst as usize * s, src as usize * s);
        // Two disjoint slices, so the loop has no bounds checks and vectorises.
        let (to, from) = if d < sr {
            let (lo, hi) = self.data.split_at_mut(sr);
            (&mut lo[d..d + s], &hi[..s])
        } else {
            let (lo, hi) = self.data.split_at_mut(d);
            (&mut hi[..s], &lo[sr..sr + s])
        };
        for (x, y) in to.iter_mut().zip(from) {
            *x = x.wrapping_add(*y);
        }
        self.release(src);
    }
    /// A new slot holding a copy of `src` (or NIL).
    pub fn duplicate(&mut self, src: u32) -> u32 {
        if src == NIL {
            return NIL;
        }
        let d = self.alloc_for_overwrite(); // every element is copied over
        let s = self.stride;
        self.data.copy_within(src as usize * s..(src as usize + 1) * s, d as usize * s);
        d
    }
}

/// SplitMix64 finaliser: fingerprints and element values of contributions.
#[inline]
pub fn mix(x: u64) -> u64 {
    let mut z = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// Fingerprint of rank `rank`'s contribution to block `block` of tenant `tenant`.
#[inline]
pub fn contribution_fp(salt: u64, tenant: u16, rank: u32, block: u32) -> u64 {
    mix(salt ^ (tenant as u64) << 56 ^ (rank as u64) << 28 ^ block as u64)
}

/// Element `e` of rank `rank`'s contribution to `block` (small integers, so sums stay exact).
#[inline]
pub fn contribution_value(salt: u64, tenant: u16, rank: u32, block: u32, e: u32) -> i32 {
    (mix(salt.rotate_left(17) ^ (tenant as u64) << 56 ^ (rank as u64) << 36 ^ (block as u64) << 12 ^ e as u64) % 2001)
        as i32
        - 1000
}

/// Copies of `hdr` out of every port in `children` (each copy owns its data; the first takes
/// the original's). With no children the data is freed.
pub(crate) fn multicast(children: u64, hdr: &Header, vals: &mut Values, out: &mut Vec<SwAction>) {
    let mut first = true;
    for p in ports_of(children) {
        let mut c = *hdr;
        c.data = if first { hdr.data } else { vals.duplicate(hdr.data) };
        first = false;
        out.push(SwAction::Emit { out: Out::Port(p), hdr: c });
    }
    if first {
        vals.release(hdr.data);
    }
}

/// Bit `port` of a port bitmap.
#[inline]
pub fn port_bit(port: u16) -> u64 {
    1u64 << port
}

/// Ports set in a bitmap, ascending.
pub fn ports_of(mut bits: u64) -> impl Iterator<Item = u16> {
    std::iter::from_fn(move || {
        if bits == 0 {
            return None;
        }
        let p = bits.trailing_zeros() as u16;
        bits &= bits - 1;
        Some(p)
    })
}
