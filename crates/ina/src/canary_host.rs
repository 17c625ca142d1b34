//! The host side of Canary (§3.1.4, §3.3).
//!
//! Block `b`'s leader is rank `b mod n` (round-robin, so the root switch — the leader's first
//! hop — rotates too). Every other rank sends its contribution towards the leader and arms a
//! per-packet retransmission timer. The leader never sends its own data: it reduces what the
//! root switch (and bypassed or straggling packets) bring, adds its own, and broadcasts through
//! its first-hop switch, plus one restoration packet per switch that reported collisions. On a
//! timer a host asks the leader again: if the leader has the full result it retransmits it; if
//! it has only part, it broadcasts a failure (down the tree, to free descriptors, and to every
//! host) and the block is re-issued under a new id; after `max_failures` failures the block
//! falls back to a host-based reduction at the leader (contributions sent straight to it,
//! deduplicated by rank). When a host has every block it notifies a coordinator (rank 0) and
//! keeps the data it led until the coordinator's release (the explicit completion
//! notification of §3.3).
//!
//! Invariant: a host sends its contribution to a block once per attempt (see the `Failure`
//! arm of `on_packet_`), so a leader's count of contributions never counts a host twice.

use crate::host::{contribution, Collective, HostStats, Results};
use crate::protocol::{HostProtocol, Progress};
use crate::{port_bit, Addr, Header, HostAction, Kind, Values, MULTICAST_MARK, NIL};

#[derive(Clone, Copy, Debug, Default)]
struct BlockState {
    /// Timer expiries so far; past [`MAX_EXPIRIES`] the block is abandoned.
    expiries: u8,
    attempt: u8,
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
    /// Fingerprints of the (partial) aggregates absorbed in this attempt. Within an attempt
    /// every rank contributes once, so a second aggregate with the same fingerprint carries the
    /// same contributions again: a duplicated packet (a network or a restarted switch that sends
    /// one twice), which must not count twice. Counting by `counter` alone would let a
    /// duplicate stand in for a missing contribution.
    absorbed: Vec<u64>,
}

/// Retransmission-timer expiries after which a host gives a block (or its completion
/// notice) up: the peers it needs are unreachable (e.g. its own switch failed). The run then
/// ends as stalled, with the reason, instead of retrying for ever.
pub const MAX_EXPIRIES: u8 = 32;

/// Retransmission timeouts the coordinator keeps answering completion notices after its
/// release (see [`CanaryHost::linger_ps`]).
pub const COORDINATOR_LINGER_RTOS: u64 = 8;

const T_BLOCK: u64 = 0;
const T_DONE: u64 = 1;

/// One rank of one Canary collective.
pub struct CanaryHost {
    rto_ps: u64,
    max_failures: u8,
    pub rank: u32,
    next: u32,
    blocks: Vec<BlockState>,
    led: Vec<Led>,
    results: Results,
    /// When the coordinator released it (explicit completion).
    pub released_ps: Option<u64>,
    done_from: Vec<bool>,
    done_seen: u32,
    done_expiries: u8,
    pub stats: HostStats,
}

impl CanaryHost {
    pub fn new(c: &Collective, rank: u32, rto_ps: u64, max_failures: u8) -> CanaryHost {
        let n = c.n();
        let led_count = (c.blocks + n - 1 - rank) / n;
        CanaryHost {
            rto_ps,
            max_failures,
            rank,
            next: 0,
            blocks: vec![BlockState::default(); c.blocks as usize],
            led: (0..led_count).map(|_| Led { data: NIL, ..Led::default() }).collect(),
            results: Results::new(c),
            released_ps: None,
            done_from: if rank == 0 { vec![false; n as usize] } else { Vec::new() },
            done_seen: 0,
            done_expiries: 0,
            stats: HostStats::default(),
        }
    }

    /// Called once at the start: leads blocks with nothing to wait for (one rank).
    fn start_(&mut self, c: &Collective, now: u64, vals: &mut Values, out: &mut Vec<HostAction>) {
        if c.n() == 1 {
            for b in 0..c.blocks {
                self.complete_led(c, now, b, vals, out);
            }
        }
    }

    fn pull_(&mut self, c: &Collective, now: u64, room: usize, vals: &mut Values, out: &mut Vec<HostAction>) {
        let mut made = 0;
        while made < room && self.next < c.blocks {
            let b = self.next;
            if c.leader(b) == self.rank {
                self.next += 1;
                continue;
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
        contribution(c, self.rank, b, self.blocks[b as usize].attempt, kind, dst, vals)
    }

    fn send_contribution(
        &mut self,
        c: &Collective,
        now: u64,
        b: u32,
        kind: Kind,
        vals: &mut Values,
        out: &mut Vec<HostAction>,
    ) {
        let dst = Addr::Host(c.ranks[c.leader(b) as usize]);
        let h = self.contribution(c, b, kind, dst, vals);
        self.stats.sent_reduce += 1;
        out.push(HostAction::Send(h));
        self.arm_block_timer(c, now, b, out);
    }

    fn arm_block_timer(&mut self, _c: &Collective, now: u64, b: u32, out: &mut Vec<HostAction>) {
        let st = &mut self.blocks[b as usize];
        st.timer_gen = st.timer_gen.wrapping_add(1) & 0xFF_FFFF;
        out.push(HostAction::Timer {
            at: now + self.rto_ps,
            token: (b as u64) << 32 | (st.timer_gen as u64) << 8 | T_BLOCK,
        });
    }

    fn led_mut(&mut self, c: &Collective, b: u32) -> &mut Led {
        &mut self.led[(b / c.n()) as usize]
    }

    /// A result (broadcast, restoration copy or retransmission) for one of this rank's blocks.
    /// Any attempt's complete result is the full reduction (a re-issue only changes the id), so
    /// a result for an older or newer attempt is as good; `done` rules out doubles.
    fn accept_result(&mut self, c: &Collective, now: u64, hdr: &Header, vals: &mut Values, out: &mut Vec<HostAction>) {
        if self.results.accept(c, now, hdr, vals, &mut self.stats) {
            self.send_done(c, now, out);
        }
    }

    fn mark_done(&mut self, c: &Collective, now: u64, b: u32, out: &mut Vec<HostAction>) {
        if self.results.mark_done(now, b) {
            self.send_done(c, now, out);
        }
    }

    fn send_done(&mut self, c: &Collective, now: u64, out: &mut Vec<HostAction>) {
        let mut h = Header::new(Kind::Done, Addr::Host(c.ranks[0]), c.id(0, 0), c.tenant);
        h.src = self.rank;
        out.push(HostAction::Send(h));
        out.push(HostAction::Timer { at: now + self.rto_ps, token: T_DONE });
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
        Results::check(c, b, fp, data, vals, &mut self.stats);
        self.blocks[b as usize].attempt = attempt;
        self.mark_done(c, now, b, out);
    }

    /// Block `b` (led here) was only partly reduced when a host asked for it: tell everyone
    /// and start a new attempt.
    fn issue_failure(&mut self, c: &Collective, b: u32, vals: &mut Values, out: &mut Vec<HostAction>) {
        self.stats.failures_issued += 1;
        let n = c.n();
        let maxf = self.max_failures;
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

    fn on_packet_(&mut self, c: &Collective, now: u64, hdr: Header, vals: &mut Values, out: &mut Vec<HostAction>) {
        let b = c.block_in(hdr.id);
        match hdr.kind {
            Kind::Broadcast | Kind::Retransmit => self.accept_result(c, now, &hdr, vals, out),
            Kind::Reduce | Kind::Fallback => {
                if b >= c.blocks || c.leader(b) != self.rank {
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
                if hdr.kind == Kind::Reduce && hdr.counter > 0 {
                    if l.absorbed.contains(&hdr.fp) {
                        vals.release(hdr.data);
                        self.stats.duplicates += 1;
                        return;
                    }
                    l.absorbed.push(hdr.fp);
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
                if b >= c.blocks || c.leader(b) != self.rank {
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
                if self.results.is_done(b) || hdr.id != c.id(b, st.attempt) || c.leader(b) == self.rank {
                    self.stats.stale += 1;
                    return;
                }
                let maxf = self.max_failures;
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

    fn on_timer_(&mut self, c: &Collective, now: u64, token: u64, vals: &mut Values, out: &mut Vec<HostAction>) {
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
                self.on_packet_(c, now, h, vals, out);
            }
            if self.released_ps.is_none() {
                self.send_done(c, now, out);
            }
            return;
        }
        let b = (token >> 32) as u32;
        let gen = ((token >> 8) & 0xFF_FFFF) as u32;
        let st = self.blocks[b as usize];
        if self.results.is_done(b) || st.timer_gen != gen {
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
        let mut h =
            Header::new(Kind::RetxRequest, Addr::Host(c.ranks[c.leader(b) as usize]), c.id(b, st.attempt), c.tenant);
        h.src = self.rank;
        out.push(HostAction::Send(h));
        self.arm_block_timer(c, now, b, out);
    }
}

impl HostProtocol for CanaryHost {
    fn start(&mut self, c: &Collective, now: u64, vals: &mut Values, out: &mut Vec<HostAction>) {
        self.start_(c, now, vals, out)
    }
    fn pull(&mut self, c: &Collective, now: u64, room: usize, vals: &mut Values, out: &mut Vec<HostAction>) {
        self.pull_(c, now, room, vals, out)
    }
    fn on_packet(&mut self, c: &Collective, now: u64, hdr: Header, vals: &mut Values, out: &mut Vec<HostAction>) {
        self.on_packet_(c, now, hdr, vals, out)
    }
    fn on_timer(&mut self, c: &Collective, now: u64, token: u64, vals: &mut Values, out: &mut Vec<HostAction>) {
        self.on_timer_(c, now, token, vals, out)
    }
    fn progress(&self) -> Progress {
        self.results.progress()
    }
    /// Released by the coordinator (explicit completion) after having every block.
    fn completed_ps(&self) -> Option<u64> {
        self.results.finished_ps.and(self.released_ps)
    }
    fn stats(&self) -> &HostStats {
        &self.stats
    }
    /// The coordinator: [`COORDINATOR_LINGER_RTOS`] retransmission timeouts; any other rank: 0.
    ///
    /// The release is not acknowledged. A rank whose release was lost repeats its completion
    /// notice every retransmission timeout, and the coordinator answers each one with the
    /// release; but only while it is there. A coordinator that left one timeout after its
    /// release (or sooner) stranded such a rank, which gave up after [`MAX_EXPIRIES`]
    /// timeouts (the software switch under loss; the simulator's hosts never leave). Staying
    /// `k` timeouts gives the rank `k` more notices, so it is stranded only if every one of
    /// `k` notice-and-release exchanges is lost. A rank other than the coordinator leaves at
    /// once: once released, every rank has every block, so none needs it.
    fn linger_ps(&self) -> u64 {
        if self.rank == 0 {
            self.rto_ps.saturating_mul(COORDINATOR_LINGER_RTOS)
        } else {
            0
        }
    }
    /// Any rank but the coordinator: [`COORDINATOR_LINGER_RTOS`] retransmission timeouts.
    ///
    /// The coordinator stays in the collective until it releases every rank (it needs every
    /// rank's notice first), and answers each notice after that. A rank with every block that
    /// repeated its notice every timeout for this long without an answer was therefore
    /// released (the coordinator moved on), unless every one of those exchanges was lost or
    /// the coordinator is unreachable; either way its own result is complete and verified.
    fn release_wait_ps(&self) -> Option<u64> {
        (self.rank != 0).then(|| self.rto_ps.saturating_mul(COORDINATOR_LINGER_RTOS))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::contribution_fp;

    fn sends(out: &[HostAction]) -> Vec<Header> {
        out.iter().filter_map(|a| if let HostAction::Send(h) = a { Some(*h) } else { None }).collect()
    }

    /// Three ranks, three blocks of four elements: block b is led by rank b.
    fn three() -> Collective {
        Collective::new(0, vec![0, 1, 2], 48, 4, 1, true).unwrap()
    }

    fn agent(c: &Collective, rank: u32, max_failures: u8) -> CanaryHost {
        CanaryHost::new(c, rank, 1000, max_failures)
    }

    #[test]
    fn a_failure_notice_before_the_nic_pulled_the_block_sends_it_once_under_the_new_attempt() {
        let c = three();
        let (mut a, mut v, mut out) = (agent(&c, 1, 3), Values::new(4), Vec::new());
        let mut f = Header::new(Kind::Failure, Addr::Host(1), c.id(0, 0), 0);
        f.counter = 1;
        a.on_packet(&c, 5, f, &mut v, &mut out);
        assert!(sends(&out).is_empty(), "nothing was sent yet, so nothing is re-sent: {out:?}");
        out.clear();
        a.pull(&c, 10, 8, &mut v, &mut out);
        let s = sends(&out);
        // Block 0 (attempt 1) and block 2; block 1 is this rank's own.
        assert_eq!(
            s.iter().map(|h| (h.id, h.kind)).collect::<Vec<_>>(),
            vec![(c.id(0, 1), Kind::Reduce), (c.id(2, 0), Kind::Reduce)]
        );
    }

    #[test]
    fn a_block_moved_to_the_fallback_before_it_was_pulled_goes_out_as_fallback() {
        let c = three();
        let (mut a, mut v, mut out) = (agent(&c, 1, 0), Values::new(4), Vec::new());
        let mut f = Header::new(Kind::Failure, Addr::Host(1), c.id(2, 0), 0);
        f.counter = 1;
        a.on_packet(&c, 5, f, &mut v, &mut out);
        a.pull(&c, 10, 8, &mut v, &mut out);
        let s = sends(&out);
        assert_eq!(
            s.iter().map(|h| (h.id, h.kind)).collect::<Vec<_>>(),
            vec![(c.id(0, 0), Kind::Reduce), (c.id(2, 1), Kind::Fallback)]
        );
    }

    #[test]
    fn a_leader_in_the_fallback_counts_only_deduplicated_direct_contributions() {
        let c = three();
        let (mut l, mut v, mut out) = (agent(&c, 0, 0), Values::new(0), Vec::new());
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
        assert!(l.finished_ps().is_none() && l.missing() == 3);
        l.on_packet(&c, 5, contribution(Kind::Fallback, 2), &mut v, &mut out);
        assert_eq!(l.stats.bad_blocks, 0);
        assert_eq!(l.missing(), 2, "block 0 complete and right");
    }

    #[test]
    fn a_leader_counts_a_duplicated_partial_aggregate_once() {
        // Four ranks; rank 0 leads block 0. A switch's partial aggregate of ranks 1 and 2 arrives
        // twice (a duplicated packet): by its counter alone 2 + 2 would reach n - 1 = 3 without
        // rank 3. The software switch's crash + duplication run found this.
        let c = Collective::new(0, vec![0, 1, 2, 3], 64, 4, 1, true).unwrap();
        let (mut l, mut v, mut out) = (agent(&c, 0, 3), Values::new(0), Vec::new());
        let mut partial = Header::new(Kind::Reduce, Addr::Host(0), c.id(0, 0), 0);
        partial.counter = 2;
        partial.fp = contribution_fp(c.salt, 0, 1, 0).wrapping_add(contribution_fp(c.salt, 0, 2, 0));
        l.on_packet(&c, 1, partial, &mut v, &mut out);
        l.on_packet(&c, 2, partial, &mut v, &mut out);
        assert_eq!(l.stats.duplicates, 1);
        assert_eq!(l.missing(), 4, "block 0 must wait for rank 3");
        let mut r3 = Header::new(Kind::Reduce, Addr::Host(0), c.id(0, 0), 0);
        r3.counter = 1;
        r3.fp = contribution_fp(c.salt, 0, 3, 0);
        l.on_packet(&c, 3, r3, &mut v, &mut out);
        assert_eq!(l.stats.bad_blocks, 0);
        assert_eq!(l.missing(), 3, "block 0 complete and right");
    }

    /// A sans-I/O star: the Canary switch program (node 4, port `r` to rank `r`) and four
    /// [`CanaryHost`] agents, driven by one event queue with a fault on every hop. A host
    /// leaves (ignores everything after) `linger_ps()` after it completed, as the software
    /// switch's hosts do; the simulator's never leave.
    mod star {
        use super::*;
        use crate::canary::{CanaryParams, CanarySwitch};
        use crate::protocol::HostProtocol;
        use crate::{Out, SwAction, SwitchProgram};
        use std::cmp::Reverse;
        use std::collections::BinaryHeap;

        pub const RTO: u64 = 1000;
        const HOP: u64 = 10;

        /// What a hop does to one packet: `None` drops it; otherwise the extra delays of its
        /// copies (two copies: duplicated; a delay: held back, so later packets overtake it).
        pub trait Faults {
            fn fate(&mut self, to_switch: bool, h: &Header) -> Option<Vec<u64>>;
            /// Whether the switch crashes (restarts with an empty table) before this packet.
            fn crash(&mut self) -> bool {
                false
            }
        }

        #[derive(Clone, Copy, Debug)]
        enum Ev {
            /// From rank (= the switch's ingress port).
            ToSwitch(u32, Header),
            ToHost(u32, Header),
            SwTimer(u64),
            HostTimer(u32, u64),
        }

        pub struct Outcome {
            pub hosts: Vec<CanaryHost>,
            pub now: u64,
        }

        /// Pending events in `(time, insertion sequence)` order.
        #[derive(Default)]
        struct Events {
            queue: BinaryHeap<Reverse<(u64, u64, usize)>>,
            events: Vec<Ev>,
            seq: u64,
        }

        impl Events {
            fn push(&mut self, at: u64, e: Ev) {
                self.seq += 1;
                self.events.push(e);
                self.queue.push(Reverse((at, self.seq, self.events.len() - 1)));
            }

            fn pop(&mut self) -> Option<(u64, Ev)> {
                self.queue.pop().map(|Reverse((at, _, i))| (at, self.events[i]))
            }
        }

        fn new_switch() -> CanarySwitch {
            CanarySwitch::new(
                4,
                CanaryParams { table_size: 8, timeout_ps: 100, reclaim_ps: 20 * RTO, slots_per_tenant: None },
            )
            .unwrap()
        }

        /// Runs one allreduce of 4 ranks × 16 blocks to the end (no event left).
        pub fn run(c: &Collective, f: &mut dyn Faults) -> Outcome {
            let n = c.n();
            let mut v = Values::new(4);
            let mut hosts: Vec<CanaryHost> = (0..n).map(|r| CanaryHost::new(c, r, RTO, 3)).collect();
            let mut sw = new_switch();
            let mut evs = Events::default();
            let gone = |h: &CanaryHost, now: u64| h.completed_ps().is_some_and(|t| now >= t + h.linger_ps());
            // A packet onto a hop, through its fault.
            // `from`: a rank's packet to the switch; `to`: the switch's packet to a rank.
            let send = |f: &mut dyn Faults,
                        evs: &mut Events,
                        v: &mut Values,
                        now: u64,
                        from: u32,
                        to: Option<u32>,
                        h: Header| {
                match f.fate(to.is_none(), &h) {
                    None => v.release(h.data),
                    Some(delays) => {
                        for (i, d) in delays.iter().enumerate() {
                            let mut c = h;
                            if i > 0 {
                                c.data = v.duplicate(h.data);
                            }
                            evs.push(
                                now + HOP + d,
                                match to {
                                    None => Ev::ToSwitch(from, c),
                                    Some(r) => Ev::ToHost(r, c),
                                },
                            );
                        }
                    }
                }
            };
            let mut out = Vec::new();
            let mut sout = Vec::new();
            let mut now = 0;
            for (r, host) in (0..n).zip(hosts.iter_mut()) {
                host.start(c, 0, &mut v, &mut out);
                host.pull(c, 0, usize::MAX, &mut v, &mut out);
                for a in out.drain(..) {
                    match a {
                        HostAction::Send(h) => send(f, &mut evs, &mut v, 0, r, None, h),
                        HostAction::Timer { at, token } => evs.push(at, Ev::HostTimer(r, token)),
                    }
                }
            }
            while let Some((at, ev)) = evs.pop() {
                now = at;
                let host_of = |h: &Header| match h.dst {
                    Addr::Host(x) => Some(x),
                    _ => None,
                };
                let mut from_host = None;
                match ev {
                    Ev::ToSwitch(port, h) => {
                        if f.crash() {
                            sw = new_switch();
                        }
                        if h.dst == Addr::FirstHop || h.dst == Addr::Switch(4) || h.intercepted() {
                            sw.on_packet(now, port as u16, h, &mut v, &mut sout);
                        } else {
                            sout.push(SwAction::Forward { out: Out::Route, hdr: h });
                        }
                    }
                    Ev::SwTimer(t) => sw.on_timer(now, t, &mut v, &mut sout),
                    Ev::ToHost(r, h) => {
                        if gone(&hosts[r as usize], now) {
                            v.release(h.data);
                        } else {
                            hosts[r as usize].on_packet(c, now, h, &mut v, &mut out);
                            from_host = Some(r);
                        }
                    }
                    Ev::HostTimer(r, t) => {
                        if !gone(&hosts[r as usize], now) {
                            hosts[r as usize].on_timer(c, now, t, &mut v, &mut out);
                            from_host = Some(r);
                        }
                    }
                }
                for a in sout.drain(..) {
                    match a {
                        SwAction::Consume => {}
                        SwAction::Timer { at, token } => evs.push(at, Ev::SwTimer(token)),
                        SwAction::Forward { out: o, hdr } | SwAction::Emit { out: o, hdr } => {
                            let to = match o {
                                Out::Port(p) => Some(p as u32),
                                Out::Route => host_of(&hdr),
                            };
                            match to {
                                Some(r) if r < n => send(f, &mut evs, &mut v, now, 4, Some(r), hdr),
                                _ => v.release(hdr.data),
                            }
                        }
                    }
                }
                if let Some(r) = from_host {
                    hosts[r as usize].pull(c, now, usize::MAX, &mut v, &mut out);
                    for a in out.drain(..) {
                        match a {
                            HostAction::Send(h) => send(f, &mut evs, &mut v, now, r, None, h),
                            HostAction::Timer { at, token } => evs.push(at, Ev::HostTimer(r, token)),
                        }
                    }
                }
            }
            Outcome { hosts, now }
        }
    }

    fn sixteen_blocks() -> Collective {
        Collective::new(0, vec![0, 1, 2, 3], 256, 4, 1, true).unwrap()
    }

    /// Drops the coordinator's first `k` releases to rank 3.
    struct LoseReleases(u32);
    impl star::Faults for LoseReleases {
        fn fate(&mut self, to_switch: bool, h: &Header) -> Option<Vec<u64>> {
            if !to_switch && h.kind == Kind::Done && h.counter == 1 && h.dst == Addr::Host(3) && self.0 > 0 {
                self.0 -= 1;
                return None;
            }
            Some(vec![0])
        }
    }

    #[test]
    fn a_rank_whose_release_is_lost_twice_is_still_released_before_the_coordinator_leaves() {
        // The software switch's loss+dup+reorder+crash run (docs/switch.md): every rank had every
        // block; the release to rank 3 was lost, and so was the answer to its next completion
        // notice; the coordinator left (one linger of 100 ms, under one 200 ms timeout) and
        // rank 3 repeated its notice to nobody until it gave up.
        let c = sixteen_blocks();
        let o = star::run(&c, &mut LoseReleases(2));
        for h in &o.hosts {
            assert_eq!((h.missing(), h.stats.bad_blocks, h.stats.abandoned), (0, 0, 0), "rank {}", h.rank);
            assert!(h.completed_ps().is_some(), "rank {} was never released (run ended at {} ps)", h.rank, o.now);
        }
        // The coordinator was still there for the third exchange.
        let (coord, r3) = (o.hosts[0].completed_ps().unwrap(), o.hosts[3].completed_ps().unwrap());
        assert!(
            r3 > coord + star::RTO && r3 <= coord + o.hosts[0].linger_ps(),
            "released at {r3}, coordinator at {coord}"
        );
    }

    /// Seeded loss and reordering on every hop, duplication on the switch's egress, one switch
    /// crash.
    struct Random {
        rng: u64,
        loss: u64,
        dup: u64,
        reorder: u64,
        crash_at: u64,
        seen: u64,
    }
    impl Random {
        fn next(&mut self) -> u64 {
            self.rng = self.rng.wrapping_add(0x9E37_79B9_7F4A_7C15);
            crate::mix(self.rng)
        }
        fn hit(&mut self, per_mille: u64) -> bool {
            self.next() % 1000 < per_mille
        }
    }
    impl star::Faults for Random {
        fn fate(&mut self, to_switch: bool, _h: &Header) -> Option<Vec<u64>> {
            if self.hit(self.loss) {
                return None;
            }
            // Duplication on the switch's egress only, as the software switch's fault: the
            // switch program cannot tell a duplicated contribution from a second one (and
            // Canary does not claim to).
            let copies = if !to_switch && self.hit(self.dup) { 2 } else { 1 };
            Some((0..copies).map(|_| if self.hit(self.reorder) { 1 + self.next() % 300 } else { 0 }).collect())
        }
        fn crash(&mut self) -> bool {
            self.seen += 1;
            self.seen == self.crash_at
        }
    }

    #[test]
    fn every_rank_completes_exactly_under_random_loss_dup_reorder_and_a_switch_crash() {
        let c = sixteen_blocks();
        let mut released_late = 0;
        for seed in 0..300u64 {
            let m = crate::mix(seed ^ 0x5EED);
            let mut f = Random {
                rng: m,
                loss: m % 120,
                dup: (m >> 8) % 100,
                reorder: (m >> 16) % 200,
                crash_at: (m >> 24) % 120,
                seen: 0,
            };
            let (loss, dup, reorder, crash_at) = (f.loss, f.dup, f.reorder, f.crash_at);
            let o = star::run(&c, &mut f);
            let coord = o.hosts[0].completed_ps();
            for h in &o.hosts {
                let why = format!("seed {seed} (loss {loss}‰, dup {dup}‰, reorder {reorder}‰, crash before switch packet {crash_at}): rank {}", h.rank);
                assert_eq!((h.missing(), h.stats.bad_blocks, h.stats.abandoned), (0, 0, 0), "{why}");
                assert!(h.completed_ps().is_some(), "{why} never released");
                released_late += (h.completed_ps() > coord.map(|t| t + star::RTO)) as u32;
            }
        }
        // The random cases do reach the path: ranks released after the coordinator's first timeout.
        assert!(released_late > 0, "no rank was released late: the cases never lost a release");
    }
}
