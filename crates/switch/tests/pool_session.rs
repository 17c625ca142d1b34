//! Pool sessions (SwitchML, ATP, DSA: `Session` on a training scenario, the C ABI's and the MPI
//! runtime's host side) through a switch process on loopback: ranks as threads of the test,
//! seeded random sequences of calls of random sizes, every result checked exactly against the
//! sum (int32 wrapping; f32 bitwise against the fixed-point reference), with and without the
//! switch's faults. Only 127.0.0.0/8 (127.79.K.0/24 blocks), every call bounded by the
//! session's timeout, every switch stopped by the test that started it.

use std::net::Ipv4Addr;
use std::sync::Barrier;
use std::time::Duration;

use reducelab_switch::pool_host::PoolHostReport;
use reducelab_switch::pool_plan::PoolPlan;
use reducelab_switch::session::FixedPoint;
use reducelab_switch::{HostOptions, Session};
use serde_json::Value;

mod common;
use common::Setup;

impl Setup {
    fn new(name: &str, block: u8, text: String) -> Setup {
        Setup::at(name, Ipv4Addr::new(127, 79, block, 1), text)
    }
    fn plan(&self) -> PoolPlan {
        PoolPlan::from_scenario(&self.text, None, (self.ip, 47000)).unwrap()
    }
}

/// One job of `workers` workers (and ATP's PS host) on a star, `aggregators` aggregators (so
/// SwitchML has `aggregators / 2` slots), the workers' timeout floor `min_rto_us`.
fn scenario(protocol: &str, workers: u32, aggregators: u32, min_rto_us: u64) -> String {
    let hosts = if protocol == "switchml" { workers } else { workers + 1 };
    format!(
        "name = \"pool-session-test\"\nseed = 11\n[topology]\nkind = \"star\"\nhosts = {hosts}\nbandwidth_gbps = 100\nlatency_ns = 500\n\
         [ina]\nswitch_memory_bytes = {}\n\
         [[traffic]]\nkind = \"training\"\nprotocol = \"{protocol}\"\njobs = 1\nworkers = {workers}\nmodels = [\"A\"]\nmodel_scale = 0.01\n\
         values = true\nmin_rto_us = {min_rto_us}\n",
        aggregators * 306
    )
}

struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        let x = self.0;
        (x ^ (x >> 29)).wrapping_mul(0xBF58476D1CE4E5B9) ^ (x >> 32)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// One call of a sequence: every rank's int32 or f32 vector.
enum Call {
    Int(Vec<Vec<i32>>),
    Float(Vec<Vec<f32>>),
}

/// A seeded random sequence of `calls` calls for `ranks` ranks: sizes from 1 element to several
/// times the switch's slots' worth (`slots` packets of 62), around packet boundaries too.
fn sequence(seed: u64, calls: usize, ranks: usize, slots: u64) -> Vec<Call> {
    let mut g = Rng(seed);
    (0..calls)
        .map(|_| {
            let n = match g.below(4) {
                0 => 1 + g.below(70),
                1 => 62 * (1 + g.below(6)) + g.below(3) - 1,
                2 => 1 + g.below(62 * slots),
                _ => 62 * slots * (1 + g.below(3)) + g.below(200),
            } as usize;
            if g.below(3) == 0 {
                Call::Float(
                    (0..ranks)
                        .map(|_| {
                            (0..n)
                                .map(|_| ((g.next() >> 40) as f32 - 8388608.0) * 2f32.powi(g.below(20) as i32 - 30))
                                .collect()
                        })
                        .collect(),
                )
            } else {
                Call::Int((0..ranks).map(|_| (0..n).map(|_| g.next() as i32).collect()).collect())
            }
        })
        .collect()
}

/// One rank's results of a sequence of calls (as bit patterns; it stops at the first error) and
/// its counters.
type RankOutcome = (Vec<Result<Vec<u32>, String>>, Option<PoolHostReport>);

/// Runs `seq` on `ranks` sessions (threads) through the switch of `s`; checks every rank's every
/// result exactly. Returns every rank's counters.
fn run_sequence(s: &Setup, ranks: u32, seq: &[Call], timeout_s: f64) -> Vec<PoolHostReport> {
    run_sequence_with(s, ranks, seq, timeout_s, false)
}

/// [`run_sequence`]; with `barrier`, every rank waits for all the others between calls (as an
/// application's other collectives make it), so a rank missing a result needs the others to
/// answer from outside their calls.
fn run_sequence_with(s: &Setup, ranks: u32, seq: &[Call], timeout_s: f64, between: bool) -> Vec<PoolHostReport> {
    let opts = HostOptions { timeout: Duration::from_secs_f64(timeout_s), ..HostOptions::default() };
    let barrier = Barrier::new(ranks as usize);
    let results: Vec<RankOutcome> = std::thread::scope(|sc| {
        let hs: Vec<_> = (0..ranks)
            .map(|r| {
                let (opts, barrier) = (opts.clone(), &barrier);
                sc.spawn(move || {
                    let sess = Session::open(&s.text, (s.ip, 47000), ranks, r, opts);
                    barrier.wait();
                    let mut sess = sess.unwrap_or_else(|e| panic!("rank {r}: {e}"));
                    assert_eq!(sess.ranks(), ranks);
                    let mut out = Vec::new();
                    for call in seq {
                        if between && !out.is_empty() {
                            barrier.wait();
                        }
                        if out.last().is_some_and(|r: &Result<Vec<u32>, String>| r.is_err()) {
                            continue; // a failed rank keeps meeting the barrier
                        }
                        let got = match call {
                            Call::Int(v) => sess
                                .allreduce_i32(v[r as usize].clone())
                                .map(|x| x.into_iter().map(|y| y as u32).collect()),
                            Call::Float(v) => {
                                sess.allreduce_f32(&v[r as usize]).map(|x| x.into_iter().map(f32::to_bits).collect())
                            }
                        };
                        let stop = got.is_err();
                        out.push(got);
                        if stop && !between {
                            break;
                        }
                    }
                    (out, sess.pool_report())
                })
            })
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    });
    for (k, call) in seq.iter().enumerate() {
        let want: Vec<u32> = match call {
            Call::Int(v) => (0..v[0].len()).map(|i| v.iter().fold(0i32, |a, x| a.wrapping_add(x[i])) as u32).collect(),
            Call::Float(v) => FixedPoint::reference(v).into_iter().map(f32::to_bits).collect(),
        };
        for (r, (res, _)) in results.iter().enumerate() {
            let got = res.get(k).unwrap_or_else(|| panic!("rank {r} stopped before call {k}: {:?}", res.last()));
            let got = got.as_ref().unwrap_or_else(|e| panic!("rank {r}, call {k}: {e}"));
            assert!(
                got == &want,
                "rank {r}, call {k} ({} elements): differs from the exact sum at element {:?}",
                want.len(),
                got.iter().zip(&want).position(|(a, b)| a != b)
            );
        }
    }
    results.into_iter().map(|(_, rep)| rep.expect("a pool session")).collect()
}

fn program_stats(report: &Value) -> &Value {
    &report["program"]["stats"]
}

/// SwitchML, ATP and DSA sessions: 4 ranks, a seeded random sequence of 14 calls (int32 and
/// f32, 1 to ~3,000 elements) through a pool of 16 aggregators (SwitchML: 8 slots, so calls
/// stream through the slots many times; ATP and DSA: hash collisions send many packets to rank
/// 0's PS).
#[test]
fn pool_sessions_sum_random_calls_exactly() {
    for (i, p) in ["switchml", "atp", "dsa"].iter().enumerate() {
        let s = Setup::new(&format!("session-{p}"), 10 + i as u8, scenario(p, 4, 16, 20_000));
        let sw = s.switch(s.plan().jobs[0].switch, &[]);
        let seq = sequence(100 + i as u64, 14, 4, 8);
        run_sequence(&s, 4, &seq, 20.0);
        let report = sw.stop();
        let st = program_stats(&report);
        assert!(st["completed"].as_u64().unwrap() > 0, "{p}: {report}");
        assert_eq!(report["data_plane"]["malformed"], 0, "{p}: {report}");
        if *p == "switchml" {
            assert!(st["stale"] == 0 && st["duplicates"] == 0, "{p}: no faults, nothing stale: {report}");
        } else if *p == "atp" {
            assert!(st["fallbacks"].as_u64().unwrap() > 0, "{p}: 16 aggregators and no collision? {report}");
        }
    }
}

/// The same under 5% loss, 5% duplication and 10% reordering on every port of the switch
/// (results, gradients and the PS's traffic; a reordered packet is held up to 20 ms, longer
/// than a call): late and duplicated packets of earlier calls reach the switch and the ranks
/// during later calls (the ranks count them: tens per run), and every result is still exact.
#[test]
fn pool_sessions_sum_exactly_under_loss_duplication_and_reordering() {
    for (i, p) in ["switchml", "atp", "dsa"].iter().enumerate() {
        let s = Setup::new(&format!("session-faults-{p}"), 20 + i as u8, scenario(p, 4, 16, 5_000));
        let sw = s.switch(
            s.plan().jobs[0].switch,
            &["--fault", "loss=0.05,dup=0.05,reorder=0.1,reorder_us=20000", "--fault-seed", &(5 + i).to_string()],
        );
        let seq = sequence(200 + i as u64, 10, 4, 8);
        let ranks = run_sequence(&s, 4, &seq, 30.0);
        let report = sw.stop();
        // Late and duplicated packets of earlier calls reached the ranks during later calls and
        // were dropped (their PSNs are outside the call's range), not added in.
        let late: u64 = ranks.iter().map(|r| r.misdelivered).sum();
        eprintln!(
            "{p}: packets outside the current call's PSNs, dropped by the ranks: {:?}; switch: {}",
            ranks.iter().map(|r| r.misdelivered).collect::<Vec<_>>(),
            program_stats(&report)
        );
        assert!(late > 0, "{p}: no late packet of an earlier call reached a rank: {ranks:?}");
        assert!(ranks.iter().all(|r| r.malformed == 0 && r.bad_results == 0), "{p}: {ranks:?}");
        let d = &report["data_plane"];
        assert!(
            d["fault_dropped"].as_u64().unwrap() > 0
                && d["fault_duplicated"].as_u64().unwrap() > 0
                && d["fault_held"].as_u64().unwrap() > 0,
            "{p}: {report}"
        );
        if *p == "switchml" {
            let st = program_stats(&report);
            assert!(
                st["results_resent"].as_u64().unwrap() + st["duplicates"].as_u64().unwrap() > 0,
                "{p}: the faults reached the program: {report}"
            );
        }
        if *p == "dsa" {
            // The reminder path ran: rank 0's PS fetched original gradients from the workers.
            let fetched: u64 = ranks.iter().map(|r| r.worker.as_ref().map_or(0, |w| w.fetched)).sum();
            assert!(fetched > 0, "dsa: no gradient fetched under 5% loss: {ranks:?}");
        }
    }
}

/// DSA's reminder fetches a PSN's original gradients from every worker, also from ranks that
/// already have the result: here every rank waits for all the others between calls (an
/// application's barrier), under loss, duplication and reordering, so a rank missing a result
/// is answered by ranks outside their calls (each rank's worker stays, answering, until its next
/// call) or, for the previous call's PSNs, inside the next one. Without the staying worker a
/// lost result left its rank waiting for ranks that waited at the barrier (timed out).
#[test]
fn dsa_ranks_answer_fetches_between_calls() {
    let s = Setup::new("session-dsa-barrier", 23, scenario("dsa", 4, 16, 5_000));
    let sw = s.switch(
        s.plan().jobs[0].switch,
        &["--fault", "loss=0.05,dup=0.05,reorder=0.1,reorder_us=20000", "--fault-seed", "9"],
    );
    let seq = sequence(300, 10, 4, 8);
    let ranks = run_sequence_with(&s, 4, &seq, 30.0, true);
    let report = sw.stop();
    let fetched: u64 = ranks.iter().map(|r| r.worker.as_ref().map_or(0, |w| w.fetched)).sum();
    assert!(fetched > 0, "no gradient fetched under 5% loss: {ranks:?}; switch: {report}");
    assert!(ranks.iter().all(|r| r.malformed == 0 && r.bad_results == 0), "{ranks:?}");
}

/// Several seeded sequences on 2 and 8 ranks (property style: random rank counts' jobs, random
/// call sequences), SwitchML, ATP and DSA.
#[test]
fn random_sequences_on_2_and_8_ranks() {
    let mut block = 30;
    for p in ["switchml", "atp", "dsa"] {
        for (ranks, seed) in [(2u32, 7u64), (8, 8)] {
            let s = Setup::new(&format!("session-{p}-{ranks}"), block, scenario(p, ranks, 32, 20_000));
            block += 1;
            let sw = s.switch(s.plan().jobs[0].switch, &[]);
            let mut g = Rng(seed);
            let calls = 3 + g.below(6) as usize;
            run_sequence(&s, ranks, &sequence(seed * 31, calls, ranks as usize, 16), 20.0);
            sw.stop();
        }
    }
}

#[test]
fn pool_sessions_refuse_what_they_cannot_serve() {
    let s = Setup::new("session-refuse", 40, scenario("switchml", 4, 16, 20_000));
    let opts = HostOptions::default();
    let e = Session::open(&s.text, (s.ip, 47000), 4, 0, opts.clone()).err().unwrap();
    assert!(e.starts_with("no switch: nothing listens at 127.79.40.5:47000"), "{e}");
    let _sw = s.switch(4, &[]);
    let e = Session::open(&s.text, (s.ip, 47000), 3, 0, opts.clone()).err().unwrap();
    assert!(e.starts_with("ranks: 3, but the scenario's job has 4 workers"), "{e}");
    let e = Session::open(&s.text, (s.ip, 47000), 4, 4, opts.clone()).err().unwrap();
    assert!(e.starts_with("rank: 4 is not below ranks (4)"), "{e}");
    let two = scenario("switchml", 4, 16, 20_000).replace("jobs = 1", "jobs = 2").replace("hosts = 4", "hosts = 8");
    let e = Session::open(&two, (s.ip, 47000), 4, 0, opts).err().unwrap();
    assert!(e.starts_with("jobs: 2 training jobs"), "{e}");
}

/// The documented limit: a SwitchML switch keeps the slots' PSNs of a session, so a second
/// session through the same switch process gets nothing back, and its error says to restart it.
/// A call of the first session leaves every slot of both sets at a PSN above 0.
#[test]
fn a_second_switchml_session_without_a_switch_restart_fails_with_the_reason() {
    let s = Setup::new("session-again", 41, scenario("switchml", 2, 16, 20_000));
    let sw = s.switch(2, &[]);
    let data: Vec<Vec<i32>> = vec![(0..62 * 40).collect(), (0..62 * 40).map(|x| -2 * x).collect()];
    run_sequence(&s, 2, &[Call::Int(data)], 10.0);
    let opts = HostOptions { timeout: Duration::from_millis(800), ..HostOptions::default() };
    let errs: Vec<String> = std::thread::scope(|sc| {
        let hs: Vec<_> = (0..2u32)
            .map(|r| {
                let opts = opts.clone();
                let s = &s;
                sc.spawn(move || {
                    // CI once saw rank 0's bind fail with "Address already in use" here, after
                    // the first session's sockets were closed (cause not found): retry the bind
                    // for up to 5 s; any other error fails the test.
                    let mut tries = 0;
                    let mut sess = loop {
                        match Session::open(&s.text, (s.ip, 47000), 2, r, opts.clone()) {
                            Err(e) if e.contains("Address already in use") && tries < 50 => {
                                tries += 1;
                                std::thread::sleep(Duration::from_millis(100));
                            }
                            other => break other.unwrap(),
                        }
                    };
                    sess.allreduce_i32(vec![1; 100]).expect_err("a call that cannot finish")
                })
            })
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    });
    for e in errs {
        assert!(
            e.starts_with("call 0 (100 elements, PSNs 0..2): host ") && e.contains("restart it before a new session"),
            "{e}"
        );
    }
    let report = sw.stop();
    assert!(program_stats(&report)["stale"].as_u64().unwrap() > 0, "{report}");
}
