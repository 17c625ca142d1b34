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

use crate::{port_bit, ports_of, Addr, Header, Kind, Out, SwAction, SwitchProgram, SwitchStats, Values, MULTICAST_MARK, NIL};

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

const FREE: Descriptor = Descriptor { id: NIL, tenant: 0, leader: 0, counter: 0, hosts: 0, elems: 0, children: 0, fp: 0, data: NIL, flushed: false, gen: 0 };

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
        Ok(CanarySwitch { addr, params, table: vec![FREE; params.table_size as usize], used: 0, stats: SwitchStats::default() })
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

    /// Sends the accumulated data on towards the leader.
    fn flush(&mut self, s: usize, out: &mut Vec<SwAction>) {
        let d = &mut self.table[s];
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
    }

    fn timer_token(s: usize, gen: u32, reclaim: bool) -> u64 {
        (s as u64) << 32 | (gen as u64 & 0x7FFF_FFFF) << 1 | reclaim as u64
    }

    fn multicast(&mut self, children: u64, hdr: &Header, vals: &mut Values, out: &mut Vec<SwAction>) {
        let mut first = true;
        for p in ports_of(children) {
            let mut c = *hdr;
            // Each copy owns its data; the first takes the original's.
            c.data = if first { hdr.data } else { vals.duplicate(hdr.data) };
            first = false;
            out.push(SwAction::Emit { out: Out::Port(p), hdr: c });
        }
        if first {
            vals.release(hdr.data);
        }
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
                        self.flush(s, out);
                        out.push(SwAction::Timer { at: now + self.params.reclaim_ps, token: Self::timer_token(s, gen, true) });
                    } else {
                        out.push(SwAction::Timer { at: now + self.params.timeout_ps, token: Self::timer_token(s, gen, false) });
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
                    let gen = e.gen;
                    self.stats.aggregated += 1;
                    out.push(SwAction::Consume);
                    if complete {
                        self.flush(s, out);
                        out.push(SwAction::Timer { at: now + self.params.reclaim_ps, token: Self::timer_token(s, gen, true) });
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
                    self.multicast(d.children, &hdr, vals, out);
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
                c.children = 0;
                c.switch_addr = if hdr.inner == Kind::Failure { MULTICAST_MARK } else { NIL };
                c.dst = Addr::Switch(NIL);
                self.multicast(hdr.children, &c, vals, out);
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
                self.flush(s, out);
                out.push(SwAction::Timer { at: now + self.params.reclaim_ps, token: Self::timer_token(s, gen, true) });
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
