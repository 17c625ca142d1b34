//! Host agents: the host side of Canary (§3.1.4, §3.3) and of static-tree allreduce.
//!
//! A collective splits the vector into blocks of `elems_per_packet` elements; block `b` of
//! tenant `k` has id `k ⊕ (attempt, b)` (8-bit application id, 4-bit attempt, 20-bit block).
//! **Canary**: block `b`'s leader is rank `b mod n` (round-robin, so the root switch — the
//! leader's first hop — rotates too). Every other rank sends its contribution towards the
//! leader and arms a per-packet retransmission timer. The leader never sends its own data: it
//! reduces what the root switch (and bypassed or straggling packets) bring, adds its own, and
//! broadcasts through its first-hop switch, plus one restoration packet per switch that
//! reported collisions. On a timer a host asks the leader again: if the leader has the full
//! result it retransmits it; if it has only part, it broadcasts a failure (down the tree, to
//! free descriptors, and to every host) and the block is re-issued under a new id; after
//! `max_failures` failures the block falls back to a host-based reduction at the leader
//! (contributions sent straight to it, deduplicated by rank). When a host has every block it
//! notifies a coordinator (rank 0) and keeps the data it led until the coordinator's release
//! (the explicit completion notification of §3.3).
//! **Static trees**: every rank sends every block (tree `b mod trees`) to its first-hop
//! switch, at most `window` blocks ahead of its oldest unfinished one (the slots reserved for
//! it in the switches), and receives the result from the tree.
//!
//! Every result is checked on arrival: its fingerprint (and its element values in small runs)
//! must equal the sum of all ranks' contributions, so a lost or double-counted contribution
//! shows up as a bad block.

use crate::{contribution_fp, contribution_value, port_bit, Addr, Header, HostAction, Kind, Values, MULTICAST_MARK, NIL};

/// Which protocol a collective uses.
#[derive(Clone, Debug, PartialEq)]
pub enum Protocol {
    Canary {
        /// Per-packet retransmission timeout.
        rto_ps: u64,
        /// Failed attempts of a block before the host-based fallback.
        max_failures: u8,
    },
    StaticTrees {
        trees: u16,
        /// Blocks a host may have outstanding (slots reserved per tenant).
        window: u32,
    },
}

/// Everything the agents of one collective share.
#[derive(Clone, Debug)]
pub struct Collective {
    pub tenant: u16,
    /// Host index of each rank.
    pub ranks: Vec<u32>,
    pub blocks: u32,
    pub elems_per_packet: u16,
    /// Elements of the last block.
    pub last_elems: u16,
    pub salt: u64,
    pub protocol: Protocol,
    pub expected_fp: Vec<u64>,
    /// `blocks × elems_per_packet` expected element sums, empty when values are off.
    pub expected_values: Vec<i32>,
}

pub const MAX_BLOCKS: u32 = 1 << 20;

impl Collective {
    /// Builds the shared description; `values` turns on real element values.
    pub fn new(tenant: u16, ranks: Vec<u32>, bytes: u64, elems_per_packet: u16, salt: u64, protocol: Protocol, values: bool) -> Result<Collective, String> {
        if ranks.is_empty() {
            return Err("hosts: empty".into());
        }
        if ranks.len() > u16::MAX as usize {
            return Err(format!("hosts: {} ranks, the 2-byte hosts field holds at most {}", ranks.len(), u16::MAX));
        }
        if elems_per_packet == 0 {
            return Err("elements_per_packet: must be at least 1".into());
        }
        let elems = bytes.div_ceil(4).max(1);
        let blocks = elems.div_ceil(elems_per_packet as u64);
        if blocks > MAX_BLOCKS as u64 {
            return Err(format!("bytes: {blocks} blocks exceed the id space ({MAX_BLOCKS} per attempt)"));
        }
        let blocks = blocks as u32;
        let last_elems = (elems - (blocks as u64 - 1) * elems_per_packet as u64) as u16;
        let n = ranks.len() as u32;
        let expected_fp = (0..blocks).map(|b| (0..n).fold(0u64, |a, r| a.wrapping_add(contribution_fp(salt, tenant, r, b)))).collect();
        let mut expected_values = Vec::new();
        if values {
            expected_values = vec![0i32; blocks as usize * elems_per_packet as usize];
            for b in 0..blocks {
                for e in 0..elems_per_packet as u32 {
                    let mut s = 0i32;
                    for r in 0..n {
                        s = s.wrapping_add(contribution_value(salt, tenant, r, b, e));
                    }
                    expected_values[(b * elems_per_packet as u32 + e) as usize] = s;
                }
            }
        }
        Ok(Collective { tenant, ranks, blocks, elems_per_packet, last_elems, salt, protocol, expected_fp, expected_values })
    }

    pub fn n(&self) -> u32 {
        self.ranks.len() as u32
    }
    pub fn elems(&self, b: u32) -> u16 {
        if b + 1 == self.blocks {
            self.last_elems
        } else {
            self.elems_per_packet
        }
    }
    pub fn id(&self, b: u32, attempt: u8) -> u32 {
        (self.tenant as u32 & 0xFF) << 24 | (attempt as u32 & 0xF) << 20 | b
    }
    pub fn block_of(id: u32) -> u32 {
        id & (MAX_BLOCKS - 1)
    }
    pub fn leader(&self, b: u32) -> u32 {
        b % self.n()
    }
    fn is_canary(&self) -> bool {
        matches!(self.protocol, Protocol::Canary { .. })
    }
}

#[derive(Clone, Copy, Debug, Default)]
struct BlockState {
    /// Timer expiries so far; past [`MAX_EXPIRIES`] the block is abandoned.
    expiries: u8,
    attempt: u8,
    done: bool,
    fallback: bool,
    timer_gen: u32,
}

#[derive(Clone, Debug, Default)]
struct Led {
    attempt: u8,
    counter: u32,
    fp: u64,
    data: u32,
    complete: bool,
    /// (switch, ports) that reported collisions.
    restore: Vec<(u32, u64)>,
    /// Host-based fallback: which ranks' contributions are in.
    fallback_from: Vec<bool>,
}

/// Retransmission-timer expiries after which a host gives a block (or its completion
/// notice) up: the peers it needs are unreachable (e.g. its own switch failed). The run then
/// ends as stalled, with the reason, instead of retrying for ever.
pub const MAX_EXPIRIES: u8 = 32;

const T_BLOCK: u64 = 0;
const T_DONE: u64 = 1;

/// Counters of one host agent.
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize)]
pub struct HostStats {
    pub sent_reduce: u64,
    pub retx_requests: u64,
    pub retransmits_sent: u64,
    pub failures_issued: u64,
    pub reissued: u64,
    pub fallbacks: u64,
    pub duplicates: u64,
    pub stale: u64,
    /// Results whose fingerprint or values were wrong.
    pub bad_blocks: u64,
    /// Blocks (or completion notices) given up after [`MAX_EXPIRIES`] timer expiries.
    pub abandoned: u64,
}

impl HostStats {
    /// Adds another agent's counters.
    pub fn accumulate(&mut self, o: &HostStats) {
        self.sent_reduce += o.sent_reduce;
        self.retx_requests += o.retx_requests;
        self.retransmits_sent += o.retransmits_sent;
        self.failures_issued += o.failures_issued;
        self.reissued += o.reissued;
        self.fallbacks += o.fallbacks;
        self.duplicates += o.duplicates;
        self.stale += o.stale;
        self.bad_blocks += o.bad_blocks;
        self.abandoned += o.abandoned;
    }
}

/// One rank of one collective.
pub struct HostAgent {
    pub rank: u32,
    next: u32,
    blocks: Vec<BlockState>,
    led: Vec<Led>,
    done_count: u32,
    /// When this rank had every block.
    pub finished_ps: Option<u64>,
    /// When the coordinator released it (explicit completion).
    pub released_ps: Option<u64>,
    done_from: Vec<bool>,
    done_seen: u32,
    done_expiries: u8,
    pub stats: HostStats,
}

impl HostAgent {
    pub fn new(c: &Collective, rank: u32) -> HostAgent {
        let n = c.n();
        let led_count = if c.is_canary() { (c.blocks + n - 1 - rank) / n } else { 0 };
        HostAgent {
            rank,
            next: 0,
            blocks: vec![BlockState::default(); c.blocks as usize],
            led: (0..led_count).map(|_| Led { data: NIL, ..Led::default() }).collect(),
            done_count: 0,
            finished_ps: None,
            released_ps: None,
            done_from: if rank == 0 { vec![false; n as usize] } else { Vec::new() },
            done_seen: 0,
            done_expiries: 0,
            stats: HostStats::default(),
        }
    }

    pub fn is_finished(&self) -> bool {
        self.finished_ps.is_some()
    }
    /// Finished and, for Canary, released by the coordinator.
    pub fn is_complete(&self, c: &Collective) -> bool {
        self.finished_ps.is_some() && (!c.is_canary() || self.released_ps.is_some())
    }
    /// Blocks still expected.
    pub fn missing(&self) -> u32 {
        self.blocks.len() as u32 - self.done_count
    }

    /// Called once at the start: leads blocks with nothing to wait for (one rank).
    pub fn start(&mut self, c: &Collective, now: u64, vals: &mut Values, out: &mut Vec<HostAction>) {
        if c.is_canary() && c.n() == 1 {
            for b in 0..c.blocks {
                self.complete_led(c, now, b, vals, out);
            }
        }
    }

    /// Produces up to `room` more data packets (the NIC pulls them lazily).
    pub fn pull(&mut self, c: &Collective, now: u64, room: usize, vals: &mut Values, out: &mut Vec<HostAction>) {
        let mut made = 0;
        while made < room && self.next < c.blocks {
            let b = self.next;
            match c.protocol {
                Protocol::Canary { .. } if c.leader(b) == self.rank => {
                    self.next += 1;
                    continue;
                }
                Protocol::StaticTrees { window, .. } if b >= window && !self.blocks[(b - window) as usize].done => break,
                _ => {}
            }
            self.next += 1;
            // A failure notice may have moved this block to a later attempt (or to the
            // host-based fallback) before the NIC got to it: send under that attempt, once.
            let kind = if self.blocks[b as usize].fallback { Kind::Fallback } else { Kind::Reduce };
            self.send_contribution(c, now, b, kind, vals, out);
            made += 1;
        }
    }

    fn contribution(&self, c: &Collective, b: u32, kind: Kind, dst: Addr, vals: &mut Values) -> Header {
        let st = self.blocks[b as usize];
        let mut h = Header::new(kind, dst, c.id(b, st.attempt), c.tenant);
        h.counter = 1;
        h.hosts = c.n() as u16;
        h.elems = c.elems(b);
        h.src = self.rank;
        h.fp = contribution_fp(c.salt, c.tenant, self.rank, b);
        h.data = vals.alloc();
        if h.data != NIL {
            let d = vals.get_mut(h.data);
            for (e, x) in d.iter_mut().enumerate().take(h.elems as usize) {
                *x = contribution_value(c.salt, c.tenant, self.rank, b, e as u32);
            }
        }
        if let Protocol::StaticTrees { trees, .. } = c.protocol {
            h.tree = (b % trees as u32) as u16;
        }
        h
    }

    fn send_contribution(&mut self, c: &Collective, now: u64, b: u32, kind: Kind, vals: &mut Values, out: &mut Vec<HostAction>) {
        let dst = if c.is_canary() { Addr::Host(c.ranks[c.leader(b) as usize]) } else { Addr::FirstHop };
        let h = self.contribution(c, b, kind, dst, vals);
        self.stats.sent_reduce += 1;
        out.push(HostAction::Send(h));
        self.arm_block_timer(c, now, b, out);
    }

    fn arm_block_timer(&mut self, c: &Collective, now: u64, b: u32, out: &mut Vec<HostAction>) {
        if let Protocol::Canary { rto_ps, .. } = c.protocol {
            let st = &mut self.blocks[b as usize];
            st.timer_gen = st.timer_gen.wrapping_add(1) & 0xFF_FFFF;
            let at = now + rto_ps;
            out.push(HostAction::Timer { at, token: (b as u64) << 32 | (st.timer_gen as u64) << 8 | T_BLOCK });
        }
    }

    fn led_mut(&mut self, c: &Collective, b: u32) -> &mut Led {
        &mut self.led[(b / c.n()) as usize]
    }

    fn max_failures(c: &Collective) -> u8 {
        match c.protocol {
            Protocol::Canary { max_failures, .. } => max_failures,
            _ => 0,
        }
    }

    /// A result (broadcast, restoration copy or retransmission) for one of this rank's blocks.
    fn accept_result(&mut self, c: &Collective, now: u64, hdr: &Header, vals: &mut Values, out: &mut Vec<HostAction>) {
        let b = Collective::block_of(hdr.id);
        if b >= c.blocks {
            self.stats.stale += 1;
            vals.release(hdr.data);
            return;
        }
        let st = self.blocks[b as usize];
        if st.done {
            self.stats.duplicates += 1;
            vals.release(hdr.data);
            return;
        }
        // Any attempt's complete result is the full reduction (a re-issue only changes the
        // id), so a result for an older or newer attempt is as good; `done` rules out doubles.
        self.check(c, b, hdr.fp, hdr.data, vals);
        vals.release(hdr.data);
        self.mark_done(c, now, b, out);
    }

    fn check(&mut self, c: &Collective, b: u32, fp: u64, data: u32, vals: &Values) {
        let mut ok = fp == c.expected_fp[b as usize];
        if ok && !c.expected_values.is_empty() && data != NIL {
            let k = c.elems(b) as usize;
            let base = b as usize * c.elems_per_packet as usize;
            ok = vals.get(data)[..k] == c.expected_values[base..base + k];
        }
        if !ok {
            self.stats.bad_blocks += 1;
        }
    }

    fn mark_done(&mut self, c: &Collective, now: u64, b: u32, out: &mut Vec<HostAction>) {
        self.blocks[b as usize].done = true;
        self.done_count += 1;
        if self.done_count == c.blocks {
            self.finished_ps = Some(now);
            if c.is_canary() {
                self.send_done(c, now, out);
            }
        }
    }

    fn send_done(&mut self, c: &Collective, now: u64, out: &mut Vec<HostAction>) {
        let mut h = Header::new(Kind::Done, Addr::Host(c.ranks[0]), c.id(0, 0), c.tenant);
        h.src = self.rank;
        out.push(HostAction::Send(h));
        if let Protocol::Canary { rto_ps, .. } = c.protocol {
            out.push(HostAction::Timer { at: now + rto_ps, token: T_DONE });
        }
    }

    /// The leader has every contribution of block `b`: add its own and send the result down.
    fn complete_led(&mut self, c: &Collective, now: u64, b: u32, vals: &mut Values, out: &mut Vec<HostAction>) {
        let rank = self.rank;
        let own = self.contribution(c, b, Kind::Broadcast, Addr::FirstHop, vals);
        let l = self.led_mut(c, b);
        l.complete = true;
        l.counter += 1;
        l.fp = l.fp.wrapping_add(own.fp);
        if l.data == NIL {
            l.data = own.data;
        } else {
            vals.absorb(l.data, own.data);
        }
        let (fp, data, fallback, attempt) = (l.fp, l.data, !l.fallback_from.is_empty(), l.attempt);
        let restore = std::mem::take(&mut l.restore);
        let id = c.id(b, attempt);
        let mut res = Header::new(Kind::Broadcast, Addr::FirstHop, id, c.tenant);
        res.hosts = c.n() as u16;
        res.counter = c.n() as u16;
        res.elems = c.elems(b);
        res.fp = fp;
        if fallback {
            for r in 0..c.n() {
                if r != rank {
                    let mut h = res;
                    h.kind = Kind::Retransmit;
                    h.dst = Addr::Host(c.ranks[r as usize]);
                    h.data = vals.duplicate(data);
                    out.push(HostAction::Send(h));
                }
            }
        } else if c.n() > 1 {
            let mut h = res;
            h.data = vals.duplicate(data);
            out.push(HostAction::Send(h));
            for (sw, ports) in restore {
                let mut r = res;
                r.kind = Kind::Restore;
                r.inner = Kind::Broadcast;
                r.dst = Addr::Switch(sw);
                r.switch_addr = sw;
                r.children = ports;
                r.data = vals.duplicate(data);
                out.push(HostAction::Send(r));
            }
        }
        // The leader's own copy of the result.
        self.check(c, b, fp, data, vals);
        self.blocks[b as usize].attempt = attempt;
        self.mark_done(c, now, b, out);
    }

    /// Block `b` (led here) was only partly reduced when a host asked for it: tell everyone
    /// and start a new attempt.
    fn issue_failure(&mut self, c: &Collective, b: u32, vals: &mut Values, out: &mut Vec<HostAction>) {
        self.stats.failures_issued += 1;
        let n = c.n();
        let maxf = Self::max_failures(c);
        let l = self.led_mut(c, b);
        let old = c.id(b, l.attempt);
        vals.release(l.data);
        let restore = std::mem::take(&mut l.restore);
        *l = Led { attempt: l.attempt + 1, data: NIL, ..Led::default() };
        if l.attempt > maxf {
            l.fallback_from = vec![false; n as usize];
        }
        let next_attempt = l.attempt;
        let mut f = Header::new(Kind::Failure, Addr::FirstHop, old, c.tenant);
        f.hosts = n as u16;
        f.counter = next_attempt as u16;
        f.switch_addr = MULTICAST_MARK;
        out.push(HostAction::Send(f)); // down the tree: frees descriptors
        for (sw, ports) in restore {
            let mut r = Header::new(Kind::Restore, Addr::Switch(sw), old, c.tenant);
            r.inner = Kind::Failure;
            r.switch_addr = sw;
            r.children = ports;
            r.counter = next_attempt as u16;
            out.push(HostAction::Send(r));
        }
        for r in 0..n {
            if r != self.rank {
                let mut u = Header::new(Kind::Failure, Addr::Host(c.ranks[r as usize]), old, c.tenant);
                u.hosts = n as u16;
                u.counter = next_attempt as u16;
                out.push(HostAction::Send(u));
            }
        }
    }

    pub fn on_packet(&mut self, c: &Collective, now: u64, hdr: Header, vals: &mut Values, out: &mut Vec<HostAction>) {
        let b = Collective::block_of(hdr.id);
        match hdr.kind {
            Kind::Broadcast | Kind::Retransmit => self.accept_result(c, now, &hdr, vals, out),
            Kind::Reduce | Kind::Fallback => {
                if !c.is_canary() || b >= c.blocks || c.leader(b) != self.rank {
                    self.stats.stale += 1;
                    vals.release(hdr.data);
                    return;
                }
                let n = c.n();
                let rank_src = hdr.src;
                let l = self.led_mut(c, b);
                if hdr.id != c.id(b, l.attempt) || l.complete && hdr.kind == Kind::Reduce {
                    vals.release(hdr.data);
                    if l.complete && hdr.kind == Kind::Reduce {
                        self.stats.duplicates += 1;
                    } else {
                        self.stats.stale += 1;
                    }
                    return;
                }
                if hdr.kind == Kind::Reduce && !l.fallback_from.is_empty() {
                    // In the host-based fallback only deduplicated direct contributions count.
                    vals.release(hdr.data);
                    self.stats.stale += 1;
                    return;
                }
                if hdr.kind == Kind::Fallback {
                    if l.fallback_from.is_empty() {
                        vals.release(hdr.data);
                        self.stats.stale += 1;
                        return;
                    }
                    if l.complete {
                        vals.release(hdr.data);
                        self.retransmit(c, b, rank_src, vals, out);
                        return;
                    }
                    if rank_src >= n || l.fallback_from[rank_src as usize] {
                        vals.release(hdr.data);
                        self.stats.duplicates += 1;
                        return;
                    }
                    l.fallback_from[rank_src as usize] = true;
                }
                l.counter += hdr.counter as u32;
                l.fp = l.fp.wrapping_add(hdr.fp);
                if l.data == NIL {
                    l.data = hdr.data;
                } else {
                    vals.absorb(l.data, hdr.data);
                }
                if hdr.bypass && hdr.kind == Kind::Reduce {
                    let port = port_bit(hdr.children as u16);
                    match l.restore.iter_mut().find(|(s, _)| *s == hdr.switch_addr) {
                        Some((_, bits)) => *bits |= port,
                        None => l.restore.push((hdr.switch_addr, port)),
                    }
                }
                if l.counter >= n - 1 {
                    self.complete_led(c, now, b, vals, out);
                }
            }
            Kind::RetxRequest => {
                if !c.is_canary() || b >= c.blocks || c.leader(b) != self.rank {
                    self.stats.stale += 1;
                    return;
                }
                let l = &self.led[(b / c.n()) as usize];
                let attempt = l.attempt;
                if l.complete {
                    self.retransmit(c, b, hdr.src, vals, out);
                } else if hdr.id != c.id(b, attempt) {
                    // The requester missed a failure notice: tell it again, with the attempt
                    // to move to.
                    if hdr.src < c.n() {
                        let mut u = Header::new(Kind::Failure, Addr::Host(c.ranks[hdr.src as usize]), hdr.id, c.tenant);
                        u.counter = attempt as u16;
                        out.push(HostAction::Send(u));
                    }
                } else if l.fallback_from.is_empty() {
                    self.issue_failure(c, b, vals, out);
                }
            }
            Kind::Failure => {
                vals.release(hdr.data);
                if b >= c.blocks {
                    return;
                }
                let st = self.blocks[b as usize];
                // A leader never contributes to its own block through the network.
                if st.done || hdr.id != c.id(b, st.attempt) || c.leader(b) == self.rank {
                    self.stats.stale += 1;
                    return;
                }
                let maxf = Self::max_failures(c);
                let st = &mut self.blocks[b as usize];
                st.attempt = (st.attempt + 1).max(hdr.counter.min(15) as u8);
                st.fallback = st.attempt > maxf;
                // The leader answered, so it is reachable: the count towards giving the block up
                // starts again. Attempts are bounded (max_failures + 1), so a block whose peers
                // are gone is still given up after a bounded number of expiries.
                st.expiries = 0;
                let kind = if st.fallback { Kind::Fallback } else { Kind::Reduce };
                self.stats.reissued += 1;
                if st.fallback {
                    self.stats.fallbacks += 1;
                }
                // Re-send only what was sent: a block the NIC has not pulled yet goes out
                // once, from `pull`, under the new attempt. Sending it here too would put two
                // copies of this rank's contribution into the same attempt.
                if b < self.next {
                    self.send_contribution(c, now, b, kind, vals, out);
                }
            }
            Kind::Done => {
                if hdr.counter == 0 {
                    // At the coordinator: a rank finished.
                    if self.rank != 0 || hdr.src >= c.n() {
                        return;
                    }
                    if !self.done_from[hdr.src as usize] {
                        self.done_from[hdr.src as usize] = true;
                        self.done_seen += 1;
                    }
                    if self.done_seen == c.n() {
                        // First time: release everyone. Later (a rank whose release was
                        // lost asks again): release that rank only.
                        let targets: Vec<u32> = if self.released_ps.is_none() {
                            self.release(c, now, vals);
                            (1..c.n()).collect()
                        } else if hdr.src != 0 {
                            vec![hdr.src]
                        } else {
                            Vec::new()
                        };
                        for r in targets {
                            let mut h = Header::new(Kind::Done, Addr::Host(c.ranks[r as usize]), hdr.id, c.tenant);
                            h.counter = 1;
                            out.push(HostAction::Send(h));
                        }
                    }
                } else if self.released_ps.is_none() {
                    self.release(c, now, vals);
                }
            }
            Kind::Restore => vals.release(hdr.data),
        }
    }

    fn release(&mut self, _c: &Collective, now: u64, vals: &mut Values) {
        self.released_ps = Some(now);
        for l in &mut self.led {
            vals.release(l.data);
            l.data = NIL;
        }
    }

    fn retransmit(&mut self, c: &Collective, b: u32, to_rank: u32, vals: &mut Values, out: &mut Vec<HostAction>) {
        if to_rank >= c.n() {
            return;
        }
        self.stats.retransmits_sent += 1;
        let l = &self.led[(b / c.n()) as usize];
        let mut h = Header::new(Kind::Retransmit, Addr::Host(c.ranks[to_rank as usize]), c.id(b, l.attempt), c.tenant);
        h.hosts = c.n() as u16;
        h.counter = c.n() as u16;
        h.elems = c.elems(b);
        h.fp = l.fp;
        h.data = vals.duplicate(l.data);
        out.push(HostAction::Send(h));
    }

    pub fn on_timer(&mut self, c: &Collective, now: u64, token: u64, vals: &mut Values, out: &mut Vec<HostAction>) {
        if token & 0xFF == T_DONE {
            if self.released_ps.is_some() {
                return;
            }
            self.done_expiries = self.done_expiries.saturating_add(1);
            if self.done_expiries > MAX_EXPIRIES {
                self.stats.abandoned += 1;
                return;
            }
            if self.rank == 0 {
                // The coordinator re-checks by treating itself as done again.
                let mut h = Header::new(Kind::Done, Addr::Host(c.ranks[0]), c.id(0, 0), c.tenant);
                h.src = 0;
                self.on_packet(c, now, h, vals, out);
            }
            if self.released_ps.is_none() {
                self.send_done(c, now, out);
            }
            return;
        }
        let b = (token >> 32) as u32;
        let gen = ((token >> 8) & 0xFF_FFFF) as u32;
        let st = self.blocks[b as usize];
        if st.done || st.timer_gen != gen {
            return;
        }
        let st = &mut self.blocks[b as usize];
        st.expiries += 1;
        if st.expiries > MAX_EXPIRIES {
            self.stats.abandoned += 1;
            return;
        }
        let st = *st;
        if st.fallback {
            self.send_contribution(c, now, b, Kind::Fallback, vals, out);
            return;
        }
        self.stats.retx_requests += 1;
        let mut h = Header::new(Kind::RetxRequest, Addr::Host(c.ranks[c.leader(b) as usize]), c.id(b, st.attempt), c.tenant);
        h.src = self.rank;
        out.push(HostAction::Send(h));
        self.arm_block_timer(c, now, b, out);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sends(out: &[HostAction]) -> Vec<Header> {
        out.iter().filter_map(|a| if let HostAction::Send(h) = a { Some(*h) } else { None }).collect()
    }

    /// Three ranks, three blocks of four elements: block b is led by rank b.
    fn three(max_failures: u8) -> Collective {
        Collective::new(0, vec![0, 1, 2], 48, 4, 1, Protocol::Canary { rto_ps: 1000, max_failures }, true).unwrap()
    }

    #[test]
    fn a_failure_notice_before_the_nic_pulled_the_block_sends_it_once_under_the_new_attempt() {
        let c = three(3);
        let (mut a, mut v, mut out) = (HostAgent::new(&c, 1), Values::new(4), Vec::new());
        let mut f = Header::new(Kind::Failure, Addr::Host(1), c.id(0, 0), 0);
        f.counter = 1;
        a.on_packet(&c, 5, f, &mut v, &mut out);
        assert!(sends(&out).is_empty(), "nothing was sent yet, so nothing is re-sent: {out:?}");
        out.clear();
        a.pull(&c, 10, 8, &mut v, &mut out);
        let s = sends(&out);
        // Block 0 (attempt 1) and block 2; block 1 is this rank's own.
        assert_eq!(s.iter().map(|h| (h.id, h.kind)).collect::<Vec<_>>(), vec![(c.id(0, 1), Kind::Reduce), (c.id(2, 0), Kind::Reduce)]);
    }

    #[test]
    fn a_block_moved_to_the_fallback_before_it_was_pulled_goes_out_as_fallback() {
        let c = three(0);
        let (mut a, mut v, mut out) = (HostAgent::new(&c, 1), Values::new(4), Vec::new());
        let mut f = Header::new(Kind::Failure, Addr::Host(1), c.id(2, 0), 0);
        f.counter = 1;
        a.on_packet(&c, 5, f, &mut v, &mut out);
        a.pull(&c, 10, 8, &mut v, &mut out);
        let s = sends(&out);
        assert_eq!(s.iter().map(|h| (h.id, h.kind)).collect::<Vec<_>>(), vec![(c.id(0, 0), Kind::Reduce), (c.id(2, 1), Kind::Fallback)]);
    }

    #[test]
    fn a_leader_in_the_fallback_counts_only_deduplicated_direct_contributions() {
        let c = three(0);
        let (mut l, mut v, mut out) = (HostAgent::new(&c, 0), Values::new(0), Vec::new());
        // A host asks for block 0 while it is incomplete: failure, attempt 1 = fallback.
        let mut q = Header::new(Kind::RetxRequest, Addr::Host(0), c.id(0, 0), 0);
        q.src = 1;
        l.on_packet(&c, 1, q, &mut v, &mut out);
        assert_eq!(l.stats.failures_issued, 1);
        let contribution = |kind, src: u32| {
            let mut h = Header::new(kind, Addr::Host(0), c.id(0, 1), 0);
            h.counter = 1;
            h.src = src;
            h.fp = contribution_fp(c.salt, 0, src, 0);
            h
        };
        // A Reduce under the fallback attempt does not count, a repeated fallback does not either.
        l.on_packet(&c, 2, contribution(Kind::Reduce, 1), &mut v, &mut out);
        l.on_packet(&c, 3, contribution(Kind::Fallback, 1), &mut v, &mut out);
        l.on_packet(&c, 4, contribution(Kind::Fallback, 1), &mut v, &mut out);
        assert!(l.finished_ps.is_none() && l.missing() == 3);
        l.on_packet(&c, 5, contribution(Kind::Fallback, 2), &mut v, &mut out);
        assert_eq!(l.stats.bad_blocks, 0);
        assert_eq!(l.missing(), 2, "block 0 complete and right");
    }
}
