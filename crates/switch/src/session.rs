//! A host that stays: one process's rank of a run whose switches are already running, with its
//! socket bound once and one in-network allreduce per call on application data. This is what
//! the C ABI (`crates/innet`, `RL_Innet_allreduce`) and the MPI runtime's switch algorithms
//! (`REDUCELAB_ALLREDUCE=<protocol>`) call. [`Session::open`] chooses by the scenario's traffic:
//! an in-network allreduce (below) or a training job of the pool protocols
//! ([`crate::pool_session`]: SwitchML, ATP, DSA); floats go through the same fixed point either way
//! ([`Session::allreduce_f32`]).
//!
//! An in-network allreduce protocol says how its running switches serve calls of any size
//! ([`reducelab_ina::InaProtocol::session_calls`]):
//! - Canary takes the next tenant id (0..=255, round robin) for each call: its switch program
//!   does not depend on the collective (descriptors keyed by packet id), so one running switch
//!   serves allreduces of any size with up to its elements per packet, and a late packet of an
//!   earlier call (a retransmission, a duplicate) carries another tenant and is dropped by the
//!   host as misdelivered instead of being added in.
//! - A protocol whose switches hold a tree per tenant (`reliable_tree`) runs every call as the
//!   scenario's first allreduce, its hosts and tenant, with the blocks numbered on from the last
//!   call's ([`Collective::sequence_base`]), so a late packet of an earlier call is told apart by
//!   its sequence.
//! - SwitchML, ATP and DSA as in-network allreduces do the same, but their switches take a
//!   slot over only for a higher block number (SwitchML) or key aggregators and the parameter
//!   server's dictionary by it (ATP, DSA), so the sequence does not wrap: a session carries at
//!   most [`MAX_BLOCKS`] blocks over all its calls (a call beyond is refused), and a switch that
//!   served a session is restarted before the next.
//!
//! A rank's socket and agents live in a thread of the session (`session_host`), so it answers
//! its peers between calls: ATP's and DSA's server in rank 0's agent, DSA's fetched
//! contributions, Canary's coordinator.
//!
//! Every rank must make the same sequence of calls (as MPI requires of collectives).

use std::net::{SocketAddrV4, UdpSocket};
use std::sync::Arc;

use reducelab_ina::host::{Collective, MAX_BLOCKS};
use reducelab_ina::SessionCalls;

use crate::host::HostOptions;
use crate::plan::{EndpointSpec, InaPlan};
use crate::pool_session::PoolSession;
use crate::session_host::SessionHost;
use crate::udp;

/// One rank of a run through running switches.
pub struct Session {
    inner: Inner,
}

enum Inner {
    Ina(Box<InaSession>),
    Pool(Box<PoolSession>),
}

/// A rank of an in-network allreduce protocol whose running switches serve calls of any size
/// ([`InaProtocol::session_calls`](reducelab_ina::InaProtocol::session_calls)).
struct InaSession {
    plan: Arc<InaPlan>,
    calls_map: SessionCalls,
    ranks: u32,
    /// Host of each rank: host `r` of the topology for a protocol that takes the next tenant,
    /// the scenario's first allreduce's hosts for one that continues its sequence.
    hosts: Vec<u32>,
    calls: u64,
    /// Where the next call's blocks start in the continued sequence.
    next_sequence: u32,
    /// The thread that owns this rank's socket and agents ([`crate::session_host`]).
    host: SessionHost,
}

/// Checks that a switch listens at port `sw_port` of switch node `sw` (rank `rank`'s first hop):
/// if this process can bind that address, it is on this machine and no switch holds it. (A
/// switch on another machine, with an endpoints file, cannot be checked this way: its address
/// does not bind here.)
fn check_first_hop(
    endpoints: &EndpointSpec,
    first_hop: SocketAddrV4,
    sw: u32,
    sw_port: u16,
    rank: u32,
) -> Result<(), String> {
    if UdpSocket::bind(first_hop).is_ok() {
        return Err(format!(
            "no switch: nothing listens at {first_hop} (port {sw_port} of switch node {sw}, host {rank}'s first hop); start the switch first: reducelab switch switch --scenario FILE --node {sw} {}",
            endpoints.args().join(" ")
        ));
    }
    Ok(())
}

impl Session {
    /// Rank `rank` of `ranks` of the switches started from `scenario` (its text) at `endpoints`
    /// (their `--ip-base`, `--port-base`): host `rank` of the scenario's topology for Canary,
    /// worker `rank` of its training job for the pool protocols (`ranks` must be the job's
    /// workers; rank 0 also runs ATP's parameter server). Checks that a switch listens at this
    /// host's first hop; binds this host's socket. The caller makes sure every rank has opened
    /// before any rank's first allreduce (a barrier), so that no packet reaches an unbound
    /// socket. `opts.timeout` limits each call.
    pub fn open(
        scenario: &str,
        endpoints: impl Into<EndpointSpec>,
        ranks: u32,
        rank: u32,
        opts: HostOptions,
    ) -> Result<Session, String> {
        let endpoints = endpoints.into();
        if crate::pool_plan::is_training(scenario, None) {
            let ep = endpoints.clone();
            let pool = PoolSession::open(scenario, endpoints, ranks, rank, opts.timeout, |addr, sw, port, r| {
                check_first_hop(&ep, addr, sw, port, r)
            })?;
            return Ok(Session { inner: Inner::Pool(Box::new(pool)) });
        }
        let plan = Arc::new(InaPlan::from_scenario(scenario, None, endpoints.clone())?);
        let protocol = &plan.specs[0].protocol;
        let calls_map = protocol.session_calls()?;
        if protocol.carries_payload() {
            return Err(format!(
                "protocol: {} reduces its own sparse vectors (a payload of its own), not application vectors",
                protocol.label()
            ));
        }
        let hosts: Vec<u32> = match calls_map {
            SessionCalls::NextTenant => {
                let all = plan.fabric.num_hosts() as u32;
                if ranks == 0 || ranks > all {
                    return Err(format!("ranks: {ranks}, but the scenario's topology has {all} hosts"));
                }
                (0..ranks).collect()
            }
            SessionCalls::ContinuedSequence | SessionCalls::ContinuedSequenceNoWrap => {
                let c = &plan.colls[0];
                if ranks != c.n() {
                    return Err(format!(
                        "ranks: {ranks}, but the scenario's in-network allreduce has {} hosts ({} serves that allreduce's hosts in every call)",
                        c.n(),
                        protocol.label()
                    ));
                }
                c.ranks.clone()
            }
        };
        if rank >= ranks {
            return Err(format!("rank: {rank} is not below ranks ({ranks})"));
        }
        let host = hosts[rank as usize];
        let node = plan.fabric.host_nodes[host as usize];
        let (sw, sw_port) = plan.fabric.nodes[node as usize].ports[0];
        check_first_hop(&endpoints, plan.endpoints.of(sw, sw_port), sw, sw_port, host)?;
        let sock = udp::bind(plan.endpoints.of(node, 0))
            .map_err(|e| format!("{e} (another process already runs host {host}?)"))?;
        let thread = SessionHost::start(plan.clone(), host, rank, sock, calls_map, opts)?;
        Ok(Session {
            inner: Inner::Ina(Box::new(InaSession {
                plan,
                calls_map,
                ranks,
                hosts,
                calls: 0,
                next_sequence: 0,
                host: thread,
            })),
        })
    }

    /// The protocol the switch runs, by its registry name (`canary`, `switchml` or `atp`).
    pub fn protocol(&self) -> &'static str {
        match &self.inner {
            Inner::Ina(c) => c.plan.specs[0].protocol.info().name,
            Inner::Pool(p) => p.protocol(),
        }
    }

    /// Ranks of the session (the scenario's hosts taking part, or its job's workers).
    pub fn ranks(&self) -> u32 {
        match &self.inner {
            Inner::Ina(c) => c.ranks,
            Inner::Pool(p) => p.ranks(),
        }
    }

    /// A pool rank's counters so far (`None` for an in-network allreduce protocol): see
    /// [`PoolSession::report`].
    pub fn pool_report(&self) -> Option<crate::pool_host::PoolHostReport> {
        match &self.inner {
            Inner::Ina(_) => None,
            Inner::Pool(p) => Some(p.report()),
        }
    }

    pub fn elems_per_packet(&self) -> u16 {
        match &self.inner {
            Inner::Ina(c) => c.plan.specs[0].elems_per_packet,
            Inner::Pool(p) => p.elems_per_packet(),
        }
    }

    /// The element-wise wrapping sum of every rank's `data` (the same length on every rank).
    pub fn allreduce_i32(&mut self, data: Vec<i32>) -> Result<Vec<i32>, String> {
        match &mut self.inner {
            Inner::Ina(c) => c.allreduce_i32(data),
            Inner::Pool(p) => p.allreduce_i32(&data),
        }
    }

    /// The sum of every rank's `data` in IEEE single precision, through the switch as 32-bit
    /// fixed point (switch ALUs add integers; SwitchML does the same): see [`FixedPoint`].
    /// A first in-network allreduce of [`EXPONENT_SLOTS`] elements finds the largest binary
    /// exponent over all ranks (each rank sets a 1 at its own); then every rank quantises with
    /// the same scale and the switch adds exactly, so the result does not depend on the order
    /// in which contributions meet: it is bitwise [`FixedPoint::reference`] of the inputs.
    pub fn allreduce_f32(&mut self, data: &[f32]) -> Result<Vec<f32>, String> {
        if data.is_empty() {
            return Ok(Vec::new());
        }
        if let Some(i) = data.iter().position(|x| !x.is_finite()) {
            return Err(format!(
                "data: element {i} is {}; the switch adds fixed-point numbers, which have no NaN or infinity",
                data[i]
            ));
        }
        let mut onehot = vec![0i32; EXPONENT_SLOTS];
        if let Some(e) = FixedPoint::max_exponent(data) {
            onehot[(e - MIN_EXPONENT) as usize] = 1;
        }
        let seen = self.allreduce_i32(onehot)?;
        let Some(top) = seen.iter().rposition(|&c| c != 0) else {
            return Ok(vec![0.0; data.len()]);
        };
        let fx = FixedPoint::new(top as i32 + MIN_EXPONENT, self.ranks());
        let sum = self.allreduce_i32(data.iter().map(|&x| fx.quantise(x)).collect())?;
        Ok(sum.into_iter().map(|q| fx.value(q)).collect())
    }
}

impl InaSession {
    fn allreduce_i32(&mut self, data: Vec<i32>) -> Result<Vec<i32>, String> {
        if data.is_empty() {
            return Ok(data);
        }
        let first = &self.plan.colls[0];
        let tenant = match self.calls_map {
            SessionCalls::NextTenant => (self.calls % 256) as u16,
            _ => first.tenant,
        };
        let epp = self.plan.specs[0].elems_per_packet;
        let mut coll = Collective::new(tenant, self.hosts.clone(), data.len() as u64 * 4, epp, first.salt, false)
            .map_err(|e| format!("count: {e}"))?;
        let label = || self.plan.specs[0].protocol.label();
        if self.calls_map == SessionCalls::ContinuedSequenceNoWrap
            && self.next_sequence as u64 + coll.blocks as u64 > MAX_BLOCKS as u64
        {
            return Err(format!(
                "count: this call's {} blocks would pass block {MAX_BLOCKS} of the session's sequence (its earlier calls used {}); {}'s switch takes a slot over only for a higher block number, so the sequence cannot wrap: restart the switch and open a new session",
                coll.blocks,
                self.next_sequence,
                label()
            ));
        }
        if self.calls_map.continues_sequence() {
            coll.sequence_base = self.next_sequence;
            self.next_sequence = match self.calls_map {
                // Not wrapped: a session that used every block refuses its next call (above).
                SessionCalls::ContinuedSequenceNoWrap => self.next_sequence + coll.blocks,
                _ => self.next_sequence.wrapping_add(coll.blocks) & (MAX_BLOCKS - 1),
            };
        }
        let call = self.calls;
        self.calls += 1;
        let r = self.host.call(coll, data);
        if call == 0 && self.calls_map == SessionCalls::ContinuedSequenceNoWrap {
            return r.map_err(|e| {
                format!("{e} (if this {} switch served an earlier session, it keeps its slots' block numbers: restart it before a new session)", label())
            });
        }
        r
    }
}

/// Binary exponents of finite f32 values (`|x| < 2^e`, as `frexp`): -148 ..= 128.
pub const MIN_EXPONENT: i32 = -148;
pub const EXPONENT_SLOTS: usize = (128 - MIN_EXPONENT + 1) as usize;

/// How floats cross the switch: `q = round(x · 2^s)` as i32 with `s = 30 - ceil(log2 n) - e`,
/// where `|x| < 2^e` for every input of every rank and `n` is the number of ranks, so each
/// `|q| <= 2^(30 - ceil(log2 n))` and a sum of `n` of them stays below 2^30 (no wrap). The
/// result `Σq · 2^-s`, rounded once to f32, is within
/// `n · 2^(e + ceil(log2 n) - 31) + |exact| · 2^-24` of the exact sum (each quantisation is off
/// by at most half a step, `2^-s / 2`; the last term is the final rounding to f32).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct FixedPoint {
    /// The largest exponent `e`.
    pub exponent: i32,
    pub ranks: u32,
    /// `s`.
    pub shift: i32,
}

impl FixedPoint {
    pub fn new(exponent: i32, ranks: u32) -> FixedPoint {
        let k = 32 - (ranks.max(1) - 1).leading_zeros() as i32; // ceil(log2 n)
        FixedPoint { exponent, ranks, shift: 30 - k - exponent }
    }
    /// `e` with `|x| < 2^e` for every nonzero `x` (None: all zero).
    pub fn max_exponent(xs: &[f32]) -> Option<i32> {
        let m = xs.iter().fold(0f32, |m, x| m.max(x.abs()));
        if m == 0.0 {
            return None;
        }
        // frexp: m = f · 2^e with 0.5 <= f < 1.
        let mut e = (m as f64).log2().floor() as i32 + 1;
        while (m as f64) >= pow2(e) {
            e += 1;
        }
        while e > MIN_EXPONENT && (m as f64) < pow2(e - 1) {
            e -= 1;
        }
        Some(e)
    }
    pub fn quantise(&self, x: f32) -> i32 {
        (x as f64 * pow2(self.shift)).round() as i32
    }
    pub fn value(&self, q: i32) -> f32 {
        (q as f64 * pow2(-self.shift)) as f32
    }
    /// The bound on `|result - exact sum|` for an exact sum of magnitude `exact`.
    pub fn tolerance(&self, exact: f64) -> f64 {
        self.ranks as f64 * 0.5 * pow2(-self.shift) + exact.abs() * pow2(-24)
    }
    /// What the switch path returns for these inputs (one vector per rank): the quantised
    /// values summed as integers and converted back.
    pub fn reference(inputs: &[Vec<f32>]) -> Vec<f32> {
        let e = inputs.iter().filter_map(|v| FixedPoint::max_exponent(v)).max();
        let n = inputs[0].len();
        let Some(e) = e else { return vec![0.0; n] };
        let fx = FixedPoint::new(e, inputs.len() as u32);
        (0..n).map(|i| fx.value(inputs.iter().fold(0i32, |a, v| a.wrapping_add(fx.quantise(v[i]))))).collect()
    }
}

fn pow2(e: i32) -> f64 {
    2f64.powi(e)
}
