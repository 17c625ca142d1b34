//! Property test of SwitchML as an in-network allreduce serving a session, driven directly (the
//! registry's switch program and host agents, no packet engine) on a star of six hosts: each
//! case runs one to four calls back to back as a session makes them (each host starts the next
//! call when it has every result of this one, the PSNs numbered on from the last call's,
//! `Collective::sequence_base`), under loss (0–10 % per link), reordering (random delays per packet) and
//! duplication whose copies may arrive up to two retransmission timeouts late, so that late
//! packets of one call reach the switch and the hosts during the next. It asserts:
//! - every result a host accepts is exactly the sum of all hosts' contributions to that block
//!   of that call (fingerprints and element values: nothing of another call added in);
//! - without loss every host has every block of every call; with loss a case may stall (ranks
//!   give a block up after 64 re-sends without progress, as the packet engine's property test
//!   allows: a peer whose timeout grew far beyond theirs, its RTT samples including the wait
//!   for the slowest rank, can outlast them; with this seed 6 of 118 lossy cases; 34 of 771
//!   with another seed, and 32 of 764 when each case is one call of the calls' total size: the
//!   workers' transport, not the sessions), and at most one lossy case in ten does;
//! - in a case that completed, what the switch holds at the end is kept results only, and the
//!   release of the tenant frees them and every value slot.
//!
//! `REDUCELAB_SML_CASES=N` runs more cases (default 150), `REDUCELAB_SML_SEED=S` another seed.

use reducelab_ina::fabric::{Fabric, FabricNode};
use reducelab_ina::host::{Collective, MAX_BLOCKS};
use reducelab_ina::{
    protocol, Addr, Header, HostAction, HostProtocol, InaProtocol, Out, Params, SessionCalls, SwAction, SwitchConfig,
    Tenant, Values,
};

mod common;
use common::{env_u64, Rng};

/// The soak's queue of events.
type Queue = common::Queue<Ev>;

const HOSTS: u32 = 6;

/// Switch 0 (port `h` to host `h`), hosts 1..=6 (host `h` is node `1 + h`).
fn fabric() -> Fabric {
    let mut nodes =
        vec![FabricNode { is_host: false, forwards: true, ports: (0..HOSTS).map(|h| (1 + h, 0)).collect() }];
    for h in 0..HOSTS {
        nodes.push(FabricNode { is_host: true, forwards: false, ports: vec![(0, h as u16)] });
    }
    Fabric { nodes, host_nodes: (1..=HOSTS).collect() }
}

enum Ev {
    /// A packet arriving at the switch from host `from`, or at host `to`.
    AtSwitch {
        from: u32,
        hdr: Header,
    },
    AtHost {
        to: u32,
        hdr: Header,
    },
    /// A host agent's timer (host, call).
    HostTimer {
        host: u32,
        call: usize,
        token: u64,
    },
}

struct Case {
    window: u32,
    rto_ps: u64,
    loss: f64,
    dup: f64,
    calls: Vec<u64>,
    epp: u16,
}

impl Case {
    /// Loss, duplication, and how late a copy comes at most (two retransmission timeouts).
    fn faults(&self) -> (f64, f64, u64) {
        (self.loss, self.dup, 2 * self.rto_ps)
    }
}

/// How one case ended.
struct Outcome {
    /// Every host had every result of every call.
    completed: bool,
    /// Results of another call dropped at the hosts.
    stale: u64,
}

fn run_case(case: &Case, rng: &mut Rng) -> Result<Outcome, String> {
    let fab = fabric();
    let mut p = Params::new();
    p.insert("window".into(), case.window as f64);
    p.insert("retransmit_timeout_us".into(), case.rto_ps as f64 / 1e6);
    let proto = (protocol("switchml").unwrap().build)(&p).map_err(|e| format!("{}: {}", e.key, e.reason))?;
    let proto: &dyn InaProtocol = &*proto;
    assert_eq!(proto.session_calls(), Ok(SessionCalls::ContinuedSequenceNoWrap));
    // The calls as a session makes them: the first is the scenario's collective, the next ones
    // continue its sequence (which a session never lets wrap).
    let mut colls = Vec::new();
    let mut base = 0u32;
    for &bytes in &case.calls {
        let mut c = Collective::new(0, (0..HOSTS).collect(), bytes, case.epp, 0x5EED, true).unwrap();
        c.sequence_base = base;
        base += c.blocks;
        assert!(base <= MAX_BLOCKS);
        colls.push(c);
    }
    let cfg = SwitchConfig { table_size: 1 << 10, slots_per_tenant: None, timeout_ps: 0, reclaim_ps: 0 };
    let tenants = [Tenant { coll: &colls[0], protocol: proto, roots: &[0] }];
    let mut programs = proto.switch_programs(&fab, &tenants, &cfg)?;
    let switch = programs[0].as_mut().expect("the root's program");
    let mut vals = Values::new(case.epp as usize);
    let mut call_of = [0usize; HOSTS as usize];
    let mut agents: Vec<Box<dyn HostProtocol>> = (0..HOSTS).map(|r| proto.host_agent(&colls[0], r)).collect();
    let mut q = Queue::default();
    let (mut hout, mut sout) = (Vec::new(), Vec::new());
    let (mut stale, mut bad) = (0, 0);
    macro_rules! host_actions {
        ($h:expr, $now:expr) => {{
            let h: u32 = $h;
            for a in hout.drain(..) {
                match a {
                    HostAction::Send(hdr) => {
                        assert_eq!(hdr.dst, Addr::FirstHop);
                        q.send(rng, &mut vals, $now, hdr, case.faults(), |hdr| Ev::AtSwitch { from: h, hdr })
                    }
                    HostAction::Timer { at, token } => {
                        q.push(at, Ev::HostTimer { host: h, call: call_of[h as usize], token })
                    }
                }
            }
        }};
    }
    macro_rules! pull {
        ($h:expr, $now:expr) => {{
            let h: usize = $h;
            // A host moves to the next call once it has every result of this one.
            while agents[h].finished_ps().is_some() && call_of[h] + 1 < colls.len() {
                stale += agents[h].stats().stale;
                bad += agents[h].stats().bad_blocks;
                call_of[h] += 1;
                agents[h] = proto.host_agent(&colls[call_of[h]], h as u32);
                agents[h].start(&colls[call_of[h]], $now, &mut vals, &mut hout);
            }
            agents[h].pull(&colls[call_of[h]], $now, usize::MAX, &mut vals, &mut hout);
            host_actions!(h as u32, $now);
        }};
    }
    for h in 0..HOSTS as usize {
        agents[h].start(&colls[0], 0, &mut vals, &mut hout);
        pull!(h, 0);
    }
    let mut steps = 0u64;
    while let Some((now, ev)) = q.pop() {
        steps += 1;
        if steps > 5_000_000 {
            return Err("no end after 5 M events".into());
        }
        match ev {
            Ev::AtHost { to, hdr } => {
                let h = to as usize;
                agents[h].on_packet(&colls[call_of[h]], now, hdr, &mut vals, &mut hout);
                host_actions!(to, now);
                pull!(h, now);
            }
            Ev::AtSwitch { from, hdr } => {
                switch.on_packet(now, from as u16, hdr, &mut vals, &mut sout);
                for a in std::mem::take(&mut sout) {
                    match a {
                        SwAction::Consume => {}
                        SwAction::Emit { out: Out::Route, hdr } | SwAction::Forward { out: Out::Route, hdr } => {
                            let Addr::Host(to) = hdr.dst else {
                                return Err(format!("the switch sent {hdr:?} elsewhere than a host"));
                            };
                            q.send(rng, &mut vals, now, hdr, case.faults(), |hdr| Ev::AtHost { to, hdr });
                        }
                        other => return Err(format!("unexpected switch action {other:?}")),
                    }
                }
            }
            Ev::HostTimer { host, call, token } => {
                let h = host as usize;
                if call == call_of[h] {
                    agents[h].on_timer(&colls[call], now, token, &mut vals, &mut hout);
                    host_actions!(host, now);
                    pull!(h, now);
                }
            }
        }
    }
    bad += agents.iter().map(|a| a.stats().bad_blocks).sum::<u64>();
    if bad != 0 {
        return Err(format!("{bad} wrong results"));
    }
    stale += agents.iter().map(|a| a.stats().stale).sum::<u64>();
    for (h, a) in agents.iter().enumerate() {
        let c = call_of[h];
        if c + 1 != colls.len() || a.missing() != 0 {
            if case.loss > 0.0 {
                // Under loss a case may stall (as the packet engine's property test allows):
                // ranks give a block up after 64 re-sends without progress, which a peer whose
                // timeout grew far beyond theirs (its RTT samples wait for the slowest rank) can
                // outlast. Never with a wrong result.
                return Ok(Outcome { completed: false, stale });
            }
            return Err(format!(
                "host {h}: in call {c} of {}, {} blocks missing without loss; {:?}",
                colls.len(),
                a.missing(),
                a.stats()
            ));
        }
    }
    let (held, kept) = (switch.descriptors_in_use(), switch.kept_results());
    if held != kept {
        return Err(format!("{held} aggregators in use at the end, {kept} of them kept results"));
    }
    switch.release_tenant(0, 0, &mut vals);
    if switch.descriptors_in_use() != 0 || vals.live != 0 {
        return Err(format!(
            "after the release: {} aggregators and {} value slots left",
            switch.descriptors_in_use(),
            vals.live
        ));
    }
    Ok(Outcome { completed: true, stale })
}

#[test]
fn every_call_of_a_session_is_exact_under_loss_duplication_and_reordering() {
    let cases = env_u64("REDUCELAB_SML_CASES", 150);
    let mut rng = Rng(env_u64("REDUCELAB_SML_SEED", 0x5A1) | 1);
    let (mut lossy, mut stale, mut stalled) = (0u64, 0, 0u64);
    for i in 0..cases {
        let calls = (0..1 + rng.below(4)).map(|_| 4 + rng.below(3_000)).collect();
        let case = Case {
            window: 1 + rng.below(8) as u32,
            rto_ps: 2_000_000 + rng.below(40_000_000),
            loss: if rng.chance(0.2) { 0.0 } else { rng.below(100) as f64 / 1000.0 },
            dup: rng.below(300) as f64 / 1000.0,
            calls,
            epp: [1, 4, 16][rng.below(3) as usize],
        };
        let mut r = Rng(rng.next() | 1);
        match run_case(&case, &mut r) {
            Ok(o) => {
                stale += o.stale;
                stalled += !o.completed as u64;
            }
            Err(e) => panic!(
                "case {i}: window {}, rto {} ps, loss {}, duplication {}, calls {:?} bytes, {} elements per packet: {e}",
                case.window, case.rto_ps, case.loss, case.dup, case.calls, case.epp
            ),
        }
        lossy += (case.loss > 0.0) as u64;
    }
    // Losses were recovered (most lossy cases completed), and results of one call reached hosts
    // already in the next.
    assert!(
        lossy > 0 && stalled * 10 < lossy && stale > 0,
        "{lossy} lossy cases, {stalled} of them stalled, {stale} results of another call dropped"
    );
}
