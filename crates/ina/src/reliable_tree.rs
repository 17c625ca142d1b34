//! A SHARP-style reliable aggregation tree. It is not one of the seed systems: it is here to
//! be compared with them, and to show how a protocol is added (`docs/extending.md`).
//!
//! Like [`crate::tree`], each switch knows per tenant its child ports and its parent port on
//! one tree (the control plane's job, as SHARP's aggregation manager sets trees up), adds a
//! block until every child has sent it, sends the aggregate to its parent, and the root
//! multicasts the result down the tree. Unlike it, losses are recovered end to end without a
//! leader host:
//! - a host re-sends its contribution to a block when `retransmit_timeout_us` passes without
//!   the block's result, doubling the wait after each timeout up to 2^10 times the first (as
//!   TCP backs off: a short timeout must not flood a slow tree), and gives the block up after
//!   [`MAX_EXPIRIES`](crate::canary_host::MAX_EXPIRIES) timeouts (the run then stalls and
//!   says so);
//! - a switch remembers which child ports a block's contributions came from, so a copy is
//!   never added twice; while it waits for its parent's result, a re-sent contribution makes
//!   it send its aggregate up again (the parent ignores a child it already has); once it has
//!   the result it keeps it, and answers a re-sent contribution with the result, down that
//!   child's port only;
//! - a block's slot is `sequence mod S` in the tenant's range, `S` a power of two of at least
//!   twice the hosts' window (the smallest, or the largest within `[ina] slots_per_tenant`). A host sends block `g` only when it has every result
//!   up to `g − window`, so when any contribution of `g` reaches a switch, every host has had
//!   `g − window`'s result computed from its own contribution, and hence already had every
//!   result up to `g − 2·window`, including the slot's previous block `g − S`. Taking the slot
//!   over is then safe, and a contribution older than the slot's block (a late copy) is
//!   dropped. Sequences are the ids' 20 block bits, compared modulo 2^20, and continue across
//!   a session's calls ([`crate::host::Collective::sequence_base`]): the argument holds across
//!   calls too, so one running switch serves allreduces of any size.
//!
//! Kept results live until their slot is taken over, or until the control plane releases the
//! tenant when its collective has completed ([`SwitchProgram::release_tenant`], SHARP's group
//! teardown); the occupancy statistics count them, since they hold switch memory.

use std::any::Any;
use std::sync::Arc;

use crate::canary_host::MAX_EXPIRIES;
use crate::fabric::Fabric;
use crate::host::{contribution, Collective, HostStats, Results, MAX_BLOCKS};
use crate::protocol::{
    integer, number, only_known, HostProtocol, InaProtocol, ParamError, Params, Progress, SessionCalls, SwitchConfig,
    Tenant,
};
use crate::tree::{build_trees, TreeNode};
use crate::{
    multicast, port_bit, Addr, Header, HostAction, Kind, Out, SwAction, SwitchProgram, SwitchStats, Values, NIL,
};

/// A reliable aggregation tree as configured for one collective.
#[derive(Clone, Debug, PartialEq)]
pub struct ReliableTree {
    /// Blocks a host keeps outstanding.
    pub window: u32,
    /// A host's retransmission timeout.
    pub rto_ps: u64,
}

/// Largest window: twice it, rounded up to a power of two, must divide the 2^20 sequences.
pub const MAX_WINDOW: u32 = MAX_BLOCKS / 4;

impl ReliableTree {
    /// From a traffic entry's keys: `window` (default 256, at most 2^18),
    /// `retransmit_timeout_us` (default 500, as Canary's).
    pub fn build(p: &Params) -> Result<Arc<dyn InaProtocol>, ParamError> {
        only_known(p, crate::protocol_info("reliable_tree"))?;
        let window = integer(p, "window", 256, 1, MAX_WINDOW as u64)? as u32;
        let rto_us = number(p, "retransmit_timeout_us", 500.0, 0.0, 1e12)?;
        if rto_us <= 0.0 {
            return Err(ParamError::new(
                "retransmit_timeout_us",
                format!("must be a positive number of microseconds, got {rto_us}"),
            ));
        }
        Ok(Arc::new(ReliableTree { window, rto_ps: (rto_us * 1e6).round() as u64 }))
    }
}

impl InaProtocol for ReliableTree {
    fn info(&self) -> &'static crate::ProtocolInfo {
        crate::protocol_info("reliable_tree")
    }
    fn label(&self) -> String {
        "reliable_tree".to_string()
    }
    fn as_any(&self) -> &dyn Any {
        self
    }
    /// One root switch.
    fn root_count(&self) -> Option<u16> {
        Some(1)
    }
    /// Every switch's role per tenant (shortest paths to the tenant's root, as static trees),
    /// `S` slots per tenant, a power of two of at least twice the largest window: the largest
    /// that `slots_per_tenant` holds if it is given, else the smallest.
    fn switch_programs(
        &self,
        fabric: &Fabric,
        tenants: &[Tenant<'_>],
        cfg: &SwitchConfig,
    ) -> Result<Vec<Option<Box<dyn SwitchProgram>>>, String> {
        let mut window = 1;
        for (ci, t) in tenants.iter().enumerate() {
            let Some(p) = t.protocol.as_any().downcast_ref::<ReliableTree>() else {
                return Err(format!("traffic: in-network allreduce {ci} uses protocol {}; reliable trees share the switches with no other protocol", t.protocol.label()));
            };
            window = window.max(p.window);
        }
        let least = 2 * window;
        let slots = match cfg.slots_per_tenant {
            None => least.next_power_of_two(),
            // The largest power of two the budget holds.
            Some(s) if s >= least => (1u32 << (31 - s.leading_zeros())).min(MAX_BLOCKS),
            Some(s) => {
                return Err(format!(
                    "slots_per_tenant: {s}; reliable_tree needs at least twice the window ({least}) per tenant"
                ))
            }
        };
        if slots as u64 * tenants.len() as u64 > cfg.table_size as u64 {
            return Err(format!(
                "table_size: {} tenants × {slots} slots exceed {} descriptors (reliable_tree takes twice the window, rounded up to a power of two, per tenant)",
                tenants.len(),
                cfg.table_size
            ));
        }
        let roles = build_trees(fabric, tenants, 1)?;
        Ok(roles
            .into_iter()
            .enumerate()
            .map(|(i, r)| {
                (!fabric.nodes[i].is_host)
                    .then(|| Box::new(ReliableTreeSwitch::new(r, slots)) as Box<dyn SwitchProgram>)
            })
            .collect())
    }
    fn host_agent(&self, c: &Collective, rank: u32) -> Box<dyn HostProtocol> {
        Box::new(ReliableTreeHost {
            rank,
            window: self.window,
            rto_ps: self.rto_ps,
            next: 0,
            oldest: 0,
            expiries: vec![0; c.blocks as usize],
            results: Results::new(c),
            stats: HostStats::default(),
        })
    }
    /// Every wait of a block given up, and two first timeouts for slack.
    fn recovery_horizon_ps(&self) -> u64 {
        (0..MAX_EXPIRIES).fold(2 * self.rto_ps, |t, k| t.saturating_add(backoff(self.rto_ps, k)))
    }
    fn session_calls(&self) -> Result<SessionCalls, String> {
        Ok(SessionCalls::ContinuedSequence)
    }
    fn stall_cause(&self, lost_packets: u64) -> String {
        format!("{lost_packets} packets were lost; hosts re-send a block until its result arrives, so a switch or link of the tree stayed unreachable")
    }
}

/// The wait after a block's `expiries`-th timeout: the timeout doubled that many times, at
/// most 2^10 times.
fn backoff(rto_ps: u64, expiries: u8) -> u64 {
    rto_ps.saturating_mul(1 << expiries.min(10))
}

/// A host: sends block `b` to its first-hop switch once it has every result up to
/// `b − window`, and re-sends it every timeout until its result arrives.
pub struct ReliableTreeHost {
    rank: u32,
    window: u32,
    rto_ps: u64,
    /// Next block to send for the first time.
    next: u32,
    /// Lowest block without its result.
    oldest: u32,
    /// Timeouts so far, per block.
    expiries: Vec<u8>,
    results: Results,
    stats: HostStats,
}

impl ReliableTreeHost {
    fn send(&mut self, c: &Collective, b: u32, now: u64, vals: &mut Values, out: &mut Vec<HostAction>) {
        out.push(HostAction::Send(contribution(c, self.rank, b, 0, Kind::Reduce, Addr::FirstHop, vals)));
        let wait = backoff(self.rto_ps, self.expiries[b as usize]);
        out.push(HostAction::Timer { at: now.saturating_add(wait), token: b as u64 });
    }
}

impl HostProtocol for ReliableTreeHost {
    fn start(&mut self, _c: &Collective, _now: u64, _vals: &mut Values, _out: &mut Vec<HostAction>) {}
    fn pull(&mut self, c: &Collective, now: u64, room: usize, vals: &mut Values, out: &mut Vec<HostAction>) {
        let mut made = 0;
        while made < room && self.next < c.blocks && (self.next as u64) < self.oldest as u64 + self.window as u64 {
            let b = self.next;
            self.next += 1;
            self.stats.sent_reduce += 1;
            self.send(c, b, now, vals, out);
            made += 1;
        }
    }
    fn on_packet(&mut self, c: &Collective, now: u64, hdr: Header, vals: &mut Values, _out: &mut Vec<HostAction>) {
        if hdr.kind != Kind::Broadcast {
            self.stats.stale += 1;
            vals.release(hdr.data);
            return;
        }
        self.results.accept(c, now, &hdr, vals, &mut self.stats);
        while self.oldest < c.blocks && self.results.is_done(self.oldest) {
            self.oldest += 1;
        }
    }
    fn on_timer(&mut self, c: &Collective, now: u64, token: u64, vals: &mut Values, out: &mut Vec<HostAction>) {
        let b = token as u32;
        if b >= c.blocks || self.results.is_done(b) {
            return;
        }
        self.expiries[b as usize] += 1;
        if self.expiries[b as usize] >= MAX_EXPIRIES {
            self.stats.abandoned += 1;
            return;
        }
        self.stats.retransmits_sent += 1;
        self.send(c, b, now, vals, out);
    }
    fn progress(&self) -> Progress {
        self.results.progress()
    }
    fn stats(&self) -> &HostStats {
        &self.stats
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum State {
    Free,
    /// Adding the children's contributions.
    Aggregating,
    /// The aggregate went to the parent; waiting for the result.
    Sent,
    /// Holding the result (to answer a child that re-sends).
    Done,
}

#[derive(Clone, Copy, Debug)]
struct Slot {
    seq: u32,
    state: State,
    /// Child ports whose contribution is in.
    arrived: u64,
    counter: u16,
    fp: u64,
    /// The aggregate (until the result) or the result.
    data: u32,
}

const FREE: Slot = Slot { seq: 0, state: State::Free, arrived: 0, counter: 0, fp: 0, data: NIL };

/// Whether sequence `a` comes after `b` (modulo 2^20, within half of it).
fn newer(a: u32, b: u32) -> bool {
    let d = a.wrapping_sub(b) & (MAX_BLOCKS - 1);
    d != 0 && d < MAX_BLOCKS / 2
}

/// A switch of reliable trees.
pub struct ReliableTreeSwitch {
    /// This switch's role per tenant, or `None` if the tenant's tree does not cross it.
    nodes: Vec<Option<TreeNode>>,
    slots: u32,
    table: Vec<Slot>,
    /// Tenants the control plane released: their late packets are dropped.
    released: Vec<bool>,
    used: u32,
    /// Slots in state `Done`.
    kept: u32,
    stats: SwitchStats,
}

impl ReliableTreeSwitch {
    /// `nodes[tenant]`: this switch's role; `slots` (a power of two) slots per tenant.
    pub fn new(nodes: Vec<Option<TreeNode>>, slots: u32) -> ReliableTreeSwitch {
        let tenants = nodes.len();
        ReliableTreeSwitch {
            nodes,
            slots,
            table: vec![FREE; tenants * slots as usize],
            released: vec![false; tenants],
            used: 0,
            kept: 0,
            stats: SwitchStats::default(),
        }
    }

    fn take(&mut self, now: u64, s: usize, seq: u32, vals: &mut Values) {
        let e = &mut self.table[s];
        if e.state == State::Free {
            self.stats.note_use(now, self.used, self.used + 1);
            self.used += 1;
        } else {
            self.kept -= (e.state == State::Done) as u32;
            vals.release(e.data);
        }
        *e = Slot { seq, state: State::Aggregating, ..FREE };
    }

    #[allow(clippy::too_many_arguments)]
    fn contribution(
        &mut self,
        now: u64,
        in_port: u16,
        node: TreeNode,
        s: usize,
        seq: u32,
        hdr: Header,
        vals: &mut Values,
        out: &mut Vec<SwAction>,
    ) {
        let bit = port_bit(in_port);
        if node.children & bit == 0 {
            vals.release(hdr.data); // not from a child of this tree: misrouted
            return;
        }
        let e = self.table[s];
        if e.state == State::Free || newer(seq, e.seq) {
            self.take(now, s, seq, vals);
        } else if e.seq != seq {
            vals.release(hdr.data); // a late copy of a block every host has the result of
            return;
        }
        let e = &mut self.table[s];
        let mut h = hdr;
        match e.state {
            State::Aggregating => {
                if e.arrived & bit != 0 {
                    vals.release(hdr.data); // a copy of a contribution already added
                    return;
                }
                if e.data == NIL {
                    e.data = hdr.data;
                } else {
                    vals.absorb(e.data, hdr.data);
                }
                e.arrived |= bit;
                e.counter = e.counter.saturating_add(hdr.counter);
                e.fp = e.fp.wrapping_add(hdr.fp);
                self.stats.aggregated += 1;
                if e.arrived != node.children {
                    return;
                }
                self.stats.flushed += 1;
                h.counter = e.counter;
                h.fp = e.fp;
                h.data = vals.duplicate(e.data);
                match node.parent {
                    Some(p) => {
                        e.state = State::Sent;
                        out.push(SwAction::Emit { out: Out::Port(p), hdr: h });
                    }
                    None => {
                        e.state = State::Done;
                        self.kept += 1;
                        h.kind = Kind::Broadcast;
                        self.stats.broadcasts += 1;
                        multicast(node.children, &h, vals, out);
                    }
                }
            }
            State::Sent => {
                // A child is still waiting: the aggregate or the parent's result was lost.
                vals.release(hdr.data);
                h.counter = e.counter;
                h.fp = e.fp;
                h.data = vals.duplicate(e.data);
                self.stats.flushed += 1;
                out.push(SwAction::Emit { out: Out::Port(node.parent.expect("a sent slot has a parent")), hdr: h });
            }
            State::Done => {
                // That child lacks the result: again, down its port only.
                vals.release(hdr.data);
                h.kind = Kind::Broadcast;
                h.counter = e.counter;
                h.fp = e.fp;
                h.data = vals.duplicate(e.data);
                self.stats.broadcasts += 1;
                out.push(SwAction::Emit { out: Out::Port(in_port), hdr: h });
            }
            State::Free => unreachable!("taken above"),
        }
    }

    fn result(&mut self, node: TreeNode, s: usize, seq: u32, hdr: Header, vals: &mut Values, out: &mut Vec<SwAction>) {
        let e = &mut self.table[s];
        if e.state != State::Sent || e.seq != seq {
            // A second copy (the parent answered a re-sent aggregate too), or a block this
            // slot no longer holds: the children have it or will ask again.
            vals.release(hdr.data);
            return;
        }
        vals.release(e.data);
        e.data = vals.duplicate(hdr.data);
        e.counter = hdr.counter;
        e.fp = hdr.fp;
        e.state = State::Done;
        self.kept += 1;
        self.stats.broadcasts += 1;
        multicast(node.children, &hdr, vals, out);
    }
}

impl SwitchProgram for ReliableTreeSwitch {
    fn on_packet(&mut self, now: u64, in_port: u16, hdr: Header, vals: &mut Values, out: &mut Vec<SwAction>) {
        out.push(SwAction::Consume);
        let t = hdr.tenant as usize;
        let Some(node) = self.nodes.get(t).copied().flatten() else {
            vals.release(hdr.data); // not on this switch's trees: a misconfiguration
            return;
        };
        if self.released[t] {
            vals.release(hdr.data); // late, after the tenant's collective completed
            return;
        }
        let seq = Collective::block_of(hdr.id);
        let s = t * self.slots as usize + (seq % self.slots) as usize;
        match hdr.kind {
            Kind::Reduce => self.contribution(now, in_port, node, s, seq, hdr, vals, out),
            Kind::Broadcast => self.result(node, s, seq, hdr, vals, out),
            _ => vals.release(hdr.data),
        }
    }

    fn on_timer(&mut self, _now: u64, _token: u64, _vals: &mut Values, _out: &mut Vec<SwAction>) {}

    fn descriptors_in_use(&self) -> u32 {
        self.used
    }

    fn kept_results(&self) -> u32 {
        self.kept
    }

    fn release_tenant(&mut self, now: u64, tenant: u16, vals: &mut Values) {
        let t = tenant as usize;
        if t >= self.released.len() {
            return;
        }
        self.released[t] = true;
        let range = t * self.slots as usize..(t + 1) * self.slots as usize;
        for e in &mut self.table[range] {
            if e.state != State::Free {
                self.kept -= (e.state == State::Done) as u32;
                vals.release(e.data);
                *e = FREE;
                self.stats.note_use(now, self.used, self.used - 1);
                self.used -= 1;
            }
        }
    }

    fn stats(&self) -> &SwitchStats {
        &self.stats
    }
}
