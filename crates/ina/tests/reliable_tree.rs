//! Property test of `reliable_tree` driven directly (its switch programs and host agents, no
//! packet engine), on a two-level tree (a spine over two leaves of three hosts each), with what
//! the packet engine's property test (`crates/sim/tests/ina_properties.rs`) does not make:
//! duplicated packets (a copy may arrive much later) and reordering (random delays per
//! packet), beside loss. Each case runs one to three calls back to back, as a session does
//! (each host starts the next call when it has the last one's result, the blocks numbered on
//! from the last call's), so late copies of one call arrive during the next. It asserts:
//! - every host has every block of every call, each result exactly the sum of all hosts'
//!   contributions (fingerprints and element values: nothing lost, nothing added twice);
//! - once no packet is left, the release of the tenant frees every slot and every value slot.
//!
//! `REDUCELAB_RT_CASES=N` runs more cases (default 150), `REDUCELAB_RT_SEED=S` another seed.

use reducelab_ina::fabric::{Fabric, FabricNode};
use reducelab_ina::host::Collective;
use reducelab_ina::reliable_tree::ReliableTree;
use reducelab_ina::{
    protocol, Addr, Header, HostAction, HostProtocol, InaProtocol, Out, Params, SwAction, SwitchConfig, Tenant, Values,
};

mod common;
use common::{env_u64, Rng, SessionCase as Case};

/// The soak's queue of events.
type Queue = common::Queue<Ev>;

/// Sends `hdr` from (`node`, out `port`) over its link: lost, delayed at random, maybe
/// duplicated (the copy up to ten retransmission timeouts late).
#[allow(clippy::too_many_arguments)]
fn send(
    q: &mut Queue,
    rng: &mut Rng,
    fab: &Fabric,
    case: &Case,
    vals: &mut Values,
    now: u64,
    node: u32,
    port: u16,
    hdr: Header,
) {
    let (peer, peer_port) = fab.nodes[node as usize].ports[port as usize];
    q.send(rng, vals, now, hdr, case.faults(10), |hdr| Ev::Packet { node: peer, port: peer_port, hdr });
}

/// Spine 0, leaves 1 and 2 (port 0 up, ports 1..=3 down), hosts 3..=8 (host h on leaf
/// 1 + h / 3, port 1 + h % 3).
fn fabric() -> Fabric {
    let mut nodes = vec![FabricNode { is_host: false, forwards: true, ports: vec![(1, 0), (2, 0)] }];
    for l in 0..2u32 {
        let mut ports = vec![(0, l as u16)];
        ports.extend((0..3).map(|i| (3 + 3 * l + i, 0)));
        nodes.push(FabricNode { is_host: false, forwards: true, ports });
    }
    for h in 0..6u32 {
        nodes.push(FabricNode { is_host: true, forwards: false, ports: vec![(1 + h / 3, 1 + (h % 3) as u16)] });
    }
    Fabric { nodes, host_nodes: (3..9).collect() }
}

#[derive(Debug)]
enum Ev {
    /// A packet arriving at `node` on `port`.
    Packet { node: u32, port: u16, hdr: Header },
    /// A host agent's timer (host, call).
    HostTimer { host: u32, call: usize, token: u64 },
}

fn run_case(case: &Case, rng: &mut Rng) -> Result<(), String> {
    let fab = fabric();
    let mut p = Params::new();
    p.insert("window".into(), case.window as f64);
    p.insert("retransmit_timeout_us".into(), case.rto_ps as f64 / 1e6);
    let proto = (protocol("reliable_tree").unwrap().build)(&p).map_err(|e| format!("{}: {}", e.key, e.reason))?;
    let proto: &dyn InaProtocol = &*proto;
    assert!(proto.as_any().downcast_ref::<ReliableTree>().is_some());
    // The calls as a session makes them: the first is the scenario's collective, the next ones
    // continue its sequence.
    let mut colls = Vec::new();
    let mut base = 0u32;
    for &bytes in &case.calls {
        let mut c = Collective::new(0, (0..6).collect(), bytes, case.epp, 0x5EED, true).unwrap();
        c.sequence_base = base;
        base = (base + c.blocks) & (reducelab_ina::host::MAX_BLOCKS - 1);
        colls.push(c);
    }
    let cfg = SwitchConfig { table_size: 1 << 16, slots_per_tenant: None, timeout_ps: 0, reclaim_ps: 0 };
    let tenants = [Tenant { coll: &colls[0], protocol: proto, roots: &[0] }];
    let mut programs = proto.switch_programs(&fab, &tenants, &cfg)?;
    let mut vals = Values::new(case.epp as usize);
    // Each host's agent of its current call.
    let mut call_of = [0usize; 6];
    let mut agents: Vec<Box<dyn HostProtocol>> = (0..6).map(|r| proto.host_agent(&colls[0], r)).collect();
    let mut q = Queue::default();
    let mut hout = Vec::new();
    let mut sout = Vec::new();
    // Starts (or goes on with) host `h`'s current call: pulls everything the window allows.
    macro_rules! host_actions {
        ($h:expr, $now:expr) => {{
            let h: u32 = $h;
            for a in hout.drain(..) {
                match a {
                    HostAction::Send(hdr) => {
                        assert_eq!(hdr.dst, Addr::FirstHop);
                        send(&mut q, rng, &fab, case, &mut vals, $now, 3 + h, 0, hdr)
                    }
                    HostAction::Timer { at, token } => {
                        q.timer(at, Ev::HostTimer { host: h, call: call_of[h as usize], token })
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
                call_of[h] += 1;
                agents[h] = proto.host_agent(&colls[call_of[h]], h as u32);
                agents[h].start(&colls[call_of[h]], $now, &mut vals, &mut hout);
            }
            let c = &colls[call_of[h]];
            agents[h].pull(c, $now, usize::MAX, &mut vals, &mut hout);
            host_actions!(h as u32, $now);
        }};
    }
    for h in 0..6 {
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
            Ev::Packet { node, port, hdr } => {
                if fab.nodes[node as usize].is_host {
                    let h = node as usize - 3;
                    agents[h].on_packet(&colls[call_of[h]], now, hdr, &mut vals, &mut hout);
                    host_actions!(h as u32, now);
                    pull!(h, now);
                } else {
                    programs[node as usize].as_mut().unwrap().on_packet(now, port, hdr, &mut vals, &mut sout);
                    for a in std::mem::take(&mut sout) {
                        match a {
                            SwAction::Consume => {}
                            SwAction::Emit { out: Out::Port(p), hdr }
                            | SwAction::Forward { out: Out::Port(p), hdr } => {
                                send(&mut q, rng, &fab, case, &mut vals, now, node, p, hdr)
                            }
                            other => return Err(format!("switch {node}: unexpected action {other:?}")),
                        }
                    }
                }
            }
            Ev::HostTimer { host, call, token } => {
                let h = host as usize;
                if call == call_of[h] {
                    agents[h].on_timer(&colls[call], now, token, &mut vals, &mut hout);
                    host_actions!(host, now);
                }
            }
        }
    }
    for h in 0..6 {
        let (c, a) = (call_of[h], &agents[h]);
        let s = a.stats();
        if c + 1 != colls.len() || a.missing() != 0 || s.abandoned != 0 {
            return Err(format!(
                "host {h}: in call {c} of {}, {} blocks missing, {} given up",
                colls.len(),
                a.missing(),
                s.abandoned
            ));
        }
        if s.bad_blocks != 0 {
            return Err(format!("host {h}: {} wrong results", s.bad_blocks));
        }
    }
    // Every host has every result: what the switches hold is kept results only.
    let kept: u32 = programs.iter().flatten().map(|p| p.descriptors_in_use()).sum();
    let results: u32 = programs.iter().flatten().map(|p| p.kept_results()).sum();
    if kept != results {
        return Err(format!("{kept} slots in use at the end, {results} of them kept results"));
    }
    for p in programs.iter_mut().flatten() {
        p.release_tenant(0, 0, &mut vals);
    }
    let left: u32 = programs.iter().flatten().map(|p| p.descriptors_in_use()).sum();
    if left != 0 || vals.live != 0 {
        return Err(format!("after the release: {left} slots and {} value slots left ({kept} kept before)", vals.live));
    }
    Ok(())
}

#[test]
fn every_result_is_exact_under_loss_duplication_reordering_and_calls_in_sequence() {
    let cases = env_u64("REDUCELAB_RT_CASES", 150);
    let mut rng = Rng(env_u64("REDUCELAB_RT_SEED", 0x4E1A) | 1);
    let mut resent = 0;
    for i in 0..cases {
        let case = Case::draw(&mut rng, 3, 6_000, 300);
        let mut r = Rng(rng.next() | 1);
        if let Err(e) = run_case(&case, &mut r) {
            panic!("case {i}: {case}: {e}");
        }
        resent += (case.loss > 0.0) as u32;
    }
    assert!(resent > 0);
}

/// The smallest form of what the sequence numbers are for: a late copy of call 1's block 0
/// contribution reaches the switch after call 2 has taken the slot over; it must not be
/// added to call 2's block 0.
#[test]
fn a_late_copy_of_an_earlier_call_is_not_added_in() {
    let fab = fabric();
    let proto = (protocol("reliable_tree").unwrap().build)(&Params::new()).unwrap();
    let c1 = Collective::new(0, (0..6).collect(), 4, 1, 7, true).unwrap();
    let cfg = SwitchConfig { table_size: 1 << 16, slots_per_tenant: Some(3), timeout_ps: 0, reclaim_ps: 0 };
    let err = proto.switch_programs(&fab, &[Tenant { coll: &c1, protocol: &*proto, roots: &[0] }], &cfg).err();
    assert!(err.is_some_and(|e| e.starts_with("slots_per_tenant:")), "512 slots needed for the default window");
    // With window 1, a budget of 3 slots gives 2 (a power of two).
    let p = (protocol("reliable_tree").unwrap().build)(&Params::from([("window".to_string(), 1.0)])).unwrap();
    let mut programs = p.switch_programs(&fab, &[Tenant { coll: &c1, protocol: &*p, roots: &[0] }], &cfg).unwrap();
    let leaf = programs[1].as_mut().unwrap();
    let mut vals = Values::new(1);
    let mut out = Vec::new();
    // Host 0's contribution to call 1, block 0, and a copy of it kept back.
    let mut a = p.host_agent(&c1, 0);
    a.pull(&c1, 0, 1, &mut vals, &mut out);
    let HostAction::Send(first) = out[0] else { panic!("{out:?}") };
    let mut late = first;
    late.data = vals.duplicate(first.data);
    let mut sw = Vec::new();
    leaf.on_packet(0, 1, first, &mut vals, &mut sw);
    // A later call whose block 0 is sequence 2: the same slot (window 1, 2 slots), taken over.
    let mut c3 = c1.clone();
    c3.sequence_base = 2;
    let mut b = p.host_agent(&c3, 0);
    out.clear();
    b.pull(&c3, 0, 1, &mut vals, &mut out);
    let HostAction::Send(newer) = out[0] else { panic!("{out:?}") };
    leaf.on_packet(1, 1, newer, &mut vals, &mut sw);
    // The late copy of sequence 0 arrives: dropped, not aggregated (slot 0 holds sequence 2).
    sw.clear();
    leaf.on_packet(2, 1, late, &mut vals, &mut sw);
    assert_eq!(sw, vec![SwAction::Consume]);
    assert_eq!(leaf.stats().aggregated, 2);
    // A copy of sequence 2 from the same port is not added twice.
    let mut again = newer;
    again.data = vals.duplicate(newer.data);
    leaf.on_packet(3, 1, again, &mut vals, &mut sw);
    assert_eq!(leaf.stats().aggregated, 2);
}
