//! The Canary switch program (§3.1–3.2, §3.5).
//!
//! Each switch keeps a static array of block descriptors, indexed by a hash of the block id
//! (or, with a static partition per tenant as in §5.2.4, by the tenant's range of slots).
//! - **Reduce** packet, slot free: allocate the descriptor (accumulator = the packet's data,
//!   counter, leader address, children bitmap = ingress port), start its timer, absorb the
//!   packet. Same id, timer still running: aggregate and absorb. Same id, already flushed: a
//!   straggler — record the port and forward it at once. Different id: a **collision** — mark
//!   the packet bypass with this switch's address and the ingress port and send it to the
//!   leader (switches on the way ignore it).
//! - **Timer** expiry (or the counter reaching the number of contributions expected, which
//!   makes waiting pointless): send the partial aggregate towards the leader by the network's
//!   congestion-aware routing, keeping the descriptor for the broadcast.
//! - **Broadcast** (or a failure notification travelling down the tree): multicast to the
//!   recorded children and free the descriptor; without a descriptor, drop it (the leader's
//!   restoration packet will cover the subtree).
//! - **Restore** (addressed to this switch): multicast its data on the ports of its bitmap.
//! - Soft state: a descriptor that has flushed and then sees no broadcast for `reclaim_ps`
//!   (the broadcast was lost, or the block was re-issued after a loss) is freed. The paper
//!   does not say how stale descriptors go away; a soft-state timeout is the usual answer and
//!   costs nothing on the fast path. Set it well above the hosts' retransmission timeout.

use std::any::Any;
use std::sync::Arc;

use crate::canary_host::CanaryHost;
use crate::fabric::Fabric;
use crate::host::Collective;
use crate::protocol::{
    integer, number, only_known, HostProtocol, InaProtocol, ParamError, Params, SwitchConfig, Tenant,
};
use crate::{port_bit, Addr, Header, Kind, Out, SwAction, SwitchProgram, SwitchStats, Values, MULTICAST_MARK, NIL};

/// The Canary protocol as configured for one collective: the host side's retransmission
/// timeout and failures before the host-based fallback (the switch side's settings are the
/// scenario's `[ina]` section).
#[derive(Clone, Debug, PartialEq)]
pub struct Canary {
    pub rto_ps: u64,
    pub max_failures: u8,
}

impl Canary {
    /// From a traffic entry's keys: `retransmit_timeout_us` (default 500), `max_failures`
    /// (default 3, at most 14: the attempt number has 4 bits).
    pub fn build(p: &Params) -> Result<Arc<dyn InaProtocol>, ParamError> {
        only_known(p, crate::protocol_info("canary"))?;
        let rto_us = number(p, "retransmit_timeout_us", 500.0, 0.0, 1e12)?;
        if rto_us <= 0.0 {
            return Err(ParamError::new(
                "retransmit_timeout_us",
                format!("must be a positive number of microseconds, got {rto_us}"),
            ));
        }
        let max_failures = integer(p, "max_failures", 3, 0, 255)?;
        if max_failures > 14 {
            return Err(ParamError::new(
                "max_failures",
                format!("must be at most 14 (4-bit attempt number), got {max_failures}"),
            ));
        }
        Ok(Arc::new(Canary { rto_ps: (rto_us * 1000.0 * 1000.0).round() as u64, max_failures: max_failures as u8 }))
    }
}

impl InaProtocol for Canary {
    fn info(&self) -> &'static crate::ProtocolInfo {
        crate::protocol_info("canary")
    }
    fn label(&self) -> String {
        "canary".into()
    }
    fn as_any(&self) -> &dyn Any {
        self
    }
    /// A Canary program on every switch; the trees are built by the traffic itself.
    fn switch_programs(
        &self,
        fabric: &Fabric,
        _tenants: &[Tenant<'_>],
        cfg: &SwitchConfig,
    ) -> Result<Vec<Option<Box<dyn SwitchProgram>>>, String> {
        let params = CanaryParams {
            table_size: cfg.table_size,
            timeout_ps: cfg.timeout_ps,
            reclaim_ps: cfg.reclaim_ps,
            slots_per_tenant: cfg.slots_per_tenant,
        };
        let mut programs: Vec<Option<Box<dyn SwitchProgram>>> = Vec::with_capacity(fabric.nodes.len());
        for (i, n) in fabric.nodes.iter().enumerate() {
            programs.push(if n.is_host { None } else { Some(Box::new(CanarySwitch::new(i as u32, params)?)) });
        }
        Ok(programs)
    }
    fn host_agent(&self, c: &Collective, rank: u32) -> Box<dyn HostProtocol> {
        Box::new(CanaryHost::new(c, rank, self.rto_ps, self.max_failures))
    }
    /// Its switch program does not depend on the collective: any size, the next tenant each call.
    fn session_calls(&self) -> Result<crate::SessionCalls, String> {
        Ok(crate::SessionCalls::NextTenant)
    }
    /// A host gives a block up after [`crate::canary_host::MAX_EXPIRIES`] timeouts with no
    /// answer from its leader (two more for slack).
    fn recovery_horizon_ps(&self) -> u64 {
        self.rto_ps.saturating_mul(crate::canary_host::MAX_EXPIRIES as u64 + 2)
    }
}

/// Parameters of a Canary switch.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct CanaryParams {
    /// Descriptors in the static array.
    pub table_size: u32,
    /// How long a descriptor aggregates before flushing (the paper's t).
    pub timeout_ps: u64,
    /// Soft-state lifetime of a flushed descriptor without a broadcast.
    pub reclaim_ps: u64,
    /// `Some(s)`: tenant `k` owns slots `[k·s, (k+1)·s)` (static partition, §5.2.4).
    pub slots_per_tenant: Option<u32>,
}

#[derive(Clone, Copy, Debug)]
struct Descriptor {
    /// `NIL`: free.
    id: u32,
    tenant: u16,
    leader: u32,
    counter: u16,
    hosts: u16,
    elems: u16,
    children: u64,
    fp: u64,
    data: u32,
    flushed: bool,
    /// Bumped at every allocation so stale timers are ignored.
    gen: u32,
}

const FREE: Descriptor = Descriptor {
    id: NIL,
    tenant: 0,
    leader: 0,
    counter: 0,
    hosts: 0,
    elems: 0,
    children: 0,
    fp: 0,
    data: NIL,
    flushed: false,
    gen: 0,
};

pub struct CanarySwitch {
    /// This switch's address (node id), written into collided packets.
    pub addr: u32,
    params: CanaryParams,
    table: Vec<Descriptor>,
    used: u32,
    stats: SwitchStats,
}

/// Multiplicative hash of a block id onto `n` slots.
#[inline]
pub fn slot_of(id: u32, n: u32) -> u32 {
    ((id as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 32) as u32 % n
}

impl CanarySwitch {
    pub fn new(addr: u32, params: CanaryParams) -> Result<CanarySwitch, String> {
        if params.table_size == 0 {
            return Err("table_size: must be at least 1".into());
        }
        if let Some(s) = params.slots_per_tenant {
            if s == 0 || s > params.table_size {
                return Err(format!("slots_per_tenant: {s} must be within 1..={}", params.table_size));
            }
        }
        Ok(CanarySwitch {
            addr,
            params,
            table: vec![FREE; params.table_size as usize],
            used: 0,
            stats: SwitchStats::default(),
        })
    }

    fn slot(&self, id: u32, tenant: u16) -> usize {
        match self.params.slots_per_tenant {
            Some(s) => {
                let base = (tenant as u32 % (self.params.table_size / s)) * s;
                (base + slot_of(id, s)) as usize
            }
            None => slot_of(id, self.params.table_size) as usize,
        }
    }

    fn free(&mut self, now: u64, s: usize, vals: &mut Values) {
        vals.release(self.table[s].data);
        let gen = self.table[s].gen;
        self.table[s] = Descriptor { gen, ..FREE };
        self.stats.note_use(now, self.used, self.used - 1);
        self.used -= 1;
    }

    /// Sends the accumulated data on towards the leader and starts the soft-state timer that
    /// frees the descriptor if no broadcast comes.
    fn flush(&mut self, now: u64, s: usize, out: &mut Vec<SwAction>) {
        let d = &mut self.table[s];
        let gen = d.gen;
        d.flushed = true;
        let mut h = Header::new(Kind::Reduce, Addr::Host(d.leader), d.id, d.tenant);
        h.counter = d.counter;
        h.hosts = d.hosts;
        h.elems = d.elems;
        h.fp = d.fp;
        h.data = d.data;
        d.data = NIL;
        self.stats.flushed += 1;
        out.push(SwAction::Emit { out: Out::Route, hdr: h });
        out.push(SwAction::Timer { at: now + self.params.reclaim_ps, token: Self::timer_token(s, gen, true) });
    }

    fn timer_token(s: usize, gen: u32, reclaim: bool) -> u64 {
        (s as u64) << 32 | (gen as u64 & 0x7FFF_FFFF) << 1 | reclaim as u64
    }
}

impl SwitchProgram for CanarySwitch {
    fn on_packet(&mut self, now: u64, in_port: u16, hdr: Header, vals: &mut Values, out: &mut Vec<SwAction>) {
        match hdr.kind {
            Kind::Reduce => {
                let s = self.slot(hdr.id, hdr.tenant);
                let d = self.table[s];
                let expected = hdr.hosts.saturating_sub(1); // the leader's data never travels
                if d.id == NIL {
                    let gen = d.gen.wrapping_add(1) & 0x7FFF_FFFF;
                    let leader = match hdr.dst {
                        Addr::Host(h) => h,
                        _ => NIL,
                    };
                    self.table[s] = Descriptor {
                        id: hdr.id,
                        tenant: hdr.tenant,
                        leader,
                        counter: hdr.counter,
                        hosts: hdr.hosts,
                        elems: hdr.elems,
                        children: port_bit(in_port),
                        fp: hdr.fp,
                        data: hdr.data,
                        flushed: false,
                        gen,
                    };
                    self.stats.note_use(now, self.used, self.used + 1);
                    self.used += 1;
                    self.stats.aggregated += 1;
                    out.push(SwAction::Consume);
                    if hdr.counter >= expected {
                        self.flush(now, s, out);
                    } else {
                        out.push(SwAction::Timer {
                            at: now + self.params.timeout_ps,
                            token: Self::timer_token(s, gen, false),
                        });
                    }
                } else if d.id == hdr.id && d.tenant == hdr.tenant {
                    let e = &mut self.table[s];
                    e.children |= port_bit(in_port);
                    if e.flushed {
                        self.stats.stragglers += 1;
                        out.push(SwAction::Forward { out: Out::Route, hdr });
                        return;
                    }
                    e.counter = e.counter.saturating_add(hdr.counter);
                    e.fp = e.fp.wrapping_add(hdr.fp);
                    vals.absorb(e.data, hdr.data);
                    let complete = e.counter >= expected;
                    self.stats.aggregated += 1;
                    out.push(SwAction::Consume);
                    if complete {
                        self.flush(now, s, out);
                    }
                } else {
                    self.stats.collisions += 1;
                    let mut h = hdr;
                    h.bypass = true;
                    h.switch_addr = self.addr;
                    h.children = in_port as u64;
                    out.push(SwAction::Forward { out: Out::Route, hdr: h });
                }
            }
            Kind::Broadcast | Kind::Failure => {
                let s = self.slot(hdr.id, hdr.tenant);
                let d = self.table[s];
                out.push(SwAction::Consume);
                if d.id == hdr.id && d.tenant == hdr.tenant {
                    self.stats.broadcasts += 1;
                    self.free(now, s, vals);
                    crate::multicast(d.children, &hdr, vals, out);
                } else {
                    self.stats.broadcasts_without_descriptor += 1;
                    vals.release(hdr.data);
                }
            }
            Kind::Restore => {
                self.stats.restorations += 1;
                out.push(SwAction::Consume);
                let mut c = hdr;
                c.kind = hdr.inner;
                c.inner = Kind::Broadcast; // the copies are no restorations
                c.children = 0;
                c.switch_addr = if hdr.inner == Kind::Failure { MULTICAST_MARK } else { NIL };
                c.dst = Addr::Switch(NIL);
                crate::multicast(hdr.children, &c, vals, out);
            }
            _ => {
                // Host-to-host control packets are not intercepted; if one is, pass it on.
                out.push(SwAction::Forward { out: Out::Route, hdr });
            }
        }
    }

    fn on_timer(&mut self, now: u64, token: u64, vals: &mut Values, out: &mut Vec<SwAction>) {
        let s = (token >> 32) as usize;
        let gen = ((token >> 1) & 0x7FFF_FFFF) as u32;
        let reclaim = token & 1 == 1;
        let d = self.table[s];
        if d.id == NIL || d.gen != gen {
            return; // freed (and maybe reused) since
        }
        if !reclaim {
            if !d.flushed {
                self.flush(now, s, out);
            }
        } else if d.flushed {
            self.stats.reclaimed += 1;
            self.free(now, s, vals);
        }
    }

    fn descriptors_in_use(&self) -> u32 {
        self.used
    }
    fn stats(&self) -> &SwitchStats {
        &self.stats
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sw(table: u32) -> CanarySwitch {
        CanarySwitch::new(
            40,
            CanaryParams { table_size: table, timeout_ps: 1000, reclaim_ps: 1_000_000, slots_per_tenant: None },
        )
        .unwrap()
    }

    fn reduce(id: u32, counter: u16, fp: u64) -> Header {
        let mut h = Header::new(Kind::Reduce, Addr::Host(9), id, 0);
        h.counter = counter;
        h.hosts = 8;
        h.elems = 4;
        h.fp = fp;
        h
    }

    #[test]
    fn aggregates_until_the_timer_then_flushes_and_forwards_stragglers() {
        let (mut s, mut v, mut out) = (sw(16), Values::new(0), Vec::new());
        s.on_packet(0, 1, reduce(5, 1, 10), &mut v, &mut out);
        s.on_packet(10, 2, reduce(5, 2, 20), &mut v, &mut out);
        assert_eq!(out[0], SwAction::Consume);
        let SwAction::Timer { at, token } = out[1] else { panic!("{out:?}") };
        assert_eq!(at, 1000);
        assert_eq!(out[2], SwAction::Consume);
        out.clear();
        s.on_timer(at, token, &mut v, &mut out);
        let SwAction::Emit { out: Out::Route, hdr } = out[0] else { panic!("{out:?}") };
        assert_eq!((hdr.counter, hdr.fp, hdr.dst), (3, 30, Addr::Host(9)));
        out.clear();
        // A late packet is a straggler: forwarded unchanged, its port recorded as a child.
        s.on_packet(2000, 3, reduce(5, 1, 7), &mut v, &mut out);
        assert_eq!(out[0], SwAction::Forward { out: Out::Route, hdr: reduce(5, 1, 7) });
        assert_eq!(s.stats().stragglers, 1);
        out.clear();
        // The broadcast goes to ports 1, 2, 3 and frees the descriptor.
        let mut b = Header::new(Kind::Broadcast, Addr::Switch(NIL), 5, 0);
        b.fp = 99;
        s.on_packet(3000, 0, b, &mut v, &mut out);
        let ports: Vec<_> = out
            .iter()
            .filter_map(|a| {
                if let SwAction::Emit { out: Out::Port(p), hdr } = a {
                    assert_eq!(hdr.fp, 99);
                    Some(*p)
                } else {
                    None
                }
            })
            .collect();
        assert_eq!(ports, vec![1, 2, 3]);
        assert_eq!(s.descriptors_in_use(), 0);
    }

    #[test]
    fn a_complete_counter_flushes_at_once() {
        let (mut s, mut v, mut out) = (sw(16), Values::new(0), Vec::new());
        s.on_packet(0, 1, reduce(5, 4, 1), &mut v, &mut out);
        s.on_packet(0, 2, reduce(5, 3, 1), &mut v, &mut out); // 7 = hosts − 1
        assert!(matches!(out.last(), Some(SwAction::Timer { .. })));
        assert!(out.iter().any(|a| matches!(a, SwAction::Emit { hdr, .. } if hdr.counter == 7)));
    }

    #[test]
    fn a_collision_marks_bypass_with_switch_and_port_and_restore_multicasts() {
        let (mut s, mut v, mut out) = (sw(1), Values::new(0), Vec::new());
        s.on_packet(0, 1, reduce(5, 1, 1), &mut v, &mut out);
        out.clear();
        s.on_packet(0, 7, reduce(6, 1, 1), &mut v, &mut out);
        let SwAction::Forward { out: Out::Route, hdr } = out[0] else { panic!("{out:?}") };
        assert!(hdr.bypass && !hdr.intercepted());
        assert_eq!((hdr.switch_addr, hdr.children), (40, 7));
        out.clear();
        let mut r = Header::new(Kind::Restore, Addr::Switch(40), 6, 0);
        r.children = port_bit(7) | port_bit(9);
        s.on_packet(10, 0, r, &mut v, &mut out);
        let ports: Vec<_> = out
            .iter()
            .filter_map(|a| {
                if let SwAction::Emit { out: Out::Port(p), hdr } = a {
                    assert_eq!(hdr.kind, Kind::Broadcast);
                    Some(*p)
                } else {
                    None
                }
            })
            .collect();
        assert_eq!(ports, vec![7, 9]);
    }

    #[test]
    fn flushed_descriptors_without_a_broadcast_are_reclaimed() {
        let (mut s, mut v, mut out) = (sw(4), Values::new(0), Vec::new());
        s.on_packet(0, 1, reduce(5, 7, 1), &mut v, &mut out); // complete: flush + reclaim timer
        let SwAction::Timer { at, token } = *out.last().unwrap() else { panic!() };
        assert_eq!(at, 1_000_000);
        out.clear();
        s.on_timer(at, token, &mut v, &mut out);
        assert_eq!(s.descriptors_in_use(), 0);
        assert_eq!(s.stats().reclaimed, 1);
    }
}
