//! The LogGP mode against hand-computed LogGP times, and its invariants on random traces.

mod common;

use common::{burst_trace, random_trace, GenTrace, Xs};
use reducelab_goal::{check, parse_str, simulate, LogGpParams, LogGpResult};

fn run(text: &str, p: &LogGpParams) -> LogGpResult {
    let t = parse_str(text).unwrap_or_else(|e| panic!("{e}\n{text}"));
    let c = check(&t).unwrap_or_else(|e| panic!("{e}\n{text}"));
    simulate(&c, p, true).unwrap_or_else(|e| panic!("{e}\n{text}"))
}

fn params(l: u64, o: u64, g: u64, big_g: u64, big_o: u64, s: u64) -> LogGpParams {
    LogGpParams {
        latency_ns: l,
        overhead_ns: o,
        gap_ns: g,
        gap_per_byte_ns: big_g,
        overhead_per_byte_ns: big_o,
        eager_limit_bytes: s,
    }
}

const PARAMS: [(u64, u64, u64, u64, u64, u64); 5] = [
    (2500, 1500, 1000, 6, 0, 65535),
    (100, 7, 3, 1, 2, 65535),
    (5000, 10, 2000, 0, 0, 16),
    (3, 1000, 1, 2, 1, 1 << 20),
    (0, 0, 0, 1, 0, 65535),
];

/// Ping-pong, eager or rendezvous: rank 0 sends s bytes, rank 1 answers once it has them.
/// With R = max((s−1)·O, (s−1)·G), X = (s−1)·O: rank 1's receive completes at 2o + L + R, its
/// answer leaves then and reaches rank 0 at 3o + 2L + R, which is done at 4o + 2L + 2R; rank 1 ends
/// at 3o + L + R + X (eager), or when its answer is matched, 3o + 2L + R (rendezvous, L ≥ X).
#[test]
fn ping_pong_is_the_loggp_formula() {
    for &(l, o, g, big_g, big_o, s_limit) in &PARAMS {
        for size in [1u64, 2, 100, 65535, 65536, 1 << 20] {
            let p = params(l, o, g, big_g, big_o, s_limit);
            let text = format!(
                "num_ranks 2\nrank 0 {{\nping: send {size}b to 1 tag 7\npong: recv {size}b from 1 tag 8\npong requires ping\n}}\n\
                 rank 1 {{\nping: recv {size}b from 0 tag 7\npong: send {size}b to 0 tag 8\npong requires ping\n}}\n"
            );
            let r = run(&text, &p);
            let (x, big_r) = ((size - 1) * big_o, ((size - 1) * big_o).max((size - 1) * big_g));
            let end0 = 4 * o + 2 * l + 2 * big_r;
            let end1 = if size <= s_limit || l < x { 3 * o + l + big_r + x } else { 3 * o + 2 * l + big_r };
            assert_eq!(r.rank_end_ns, vec![end0, end1], "size {size} {p:?}");
            // A chain: nothing waits for a busy CPU, the critical path is the whole run.
            assert_eq!(r.critical_path_ns, end0, "size {size} {p:?}");
        }
    }
}

/// k eager messages from rank 0 to rank 1, no dependencies at all: the sender issues one every
/// Δs = max(o + X, g + (s−1)·G), the receiver takes one in every Δr = max(o + R, g + (s−1)·G), so
/// rank 1 ends at o + L + (k−1)·max(Δs, Δr) + o + R and rank 0 at (k−1)·Δs + o + X.
#[test]
fn a_stream_without_dependencies_is_the_loggp_formula() {
    for &(l, o, g, big_g, big_o, s_limit) in &PARAMS {
        for (k, size) in [(1u64, 8u64), (5, 1), (17, 16), (40, 4096)] {
            let size = size.min(s_limit);
            let p = params(l, o, g, big_g, big_o, s_limit);
            let mut text = "num_ranks 2\nrank 0 {\n".to_string();
            for i in 0..k {
                text += &format!("s{i}: send {size}b to 1 tag 3\n");
            }
            text += "}\nrank 1 {\n";
            for i in 0..k {
                text += &format!("r{i}: recv {size}b from 0 tag 3\n");
            }
            text += "}\n";
            let r = run(&text, &p);
            let (x, big_r) = ((size - 1) * big_o, ((size - 1) * big_o).max((size - 1) * big_g));
            let ds = (o + x).max(g + (size - 1) * big_g);
            let dr = (o + big_r).max(g + (size - 1) * big_g);
            let end1 = o + l + (k - 1) * ds.max(dr) + o + big_r;
            assert_eq!(r.rank_end_ns, vec![(k - 1) * ds + o + x, end1], "k {k} size {size} {p:?}");
            // The critical path is one message: the rest is waiting for o and g.
            assert_eq!(r.critical_path_ns, 2 * o + l + big_r, "k {k} size {size} {p:?}");
        }
    }
}

/// `irequires` waits for the start, `requires` for the end; calc is ns on its CPU.
#[test]
fn irequires_and_calc() {
    let p = LogGpParams::default();
    let r = run("num_ranks 1\nrank 0 {\na: calc 100\nb: calc 50\nb irequires a\nc: calc 10\nc requires b\n}\n", &p);
    // a at 0..100; b freed when a starts but its CPU is busy: 100..150; c 150..160.
    assert_eq!(r.rank_end_ns, vec![160]);
    let tm = r.op_times.unwrap();
    assert_eq!((tm.start_ns, tm.end_ns), (vec![0, 100, 150], vec![100, 150, 160]));
    // On another CPU, b runs beside a.
    let r = run("num_ranks 1\nrank 0 {\na: calc 100\nb: calc 50 cpu 1\nb irequires a\n}\n", &p);
    assert_eq!(r.rank_end_ns, vec![100]);
    assert_eq!(r.op_times.unwrap().start_ns, vec![0, 0]);
}

/// MPI matching: a message goes to the first posted receive that matches its source and tag;
/// wildcards match anything.
#[test]
fn wildcard_receives_take_the_oldest_matching_message() {
    let p = params(1000, 10, 1, 0, 0, 65535);
    // Rank 2 posts "any source" first, then "from 1": rank 0's message arrives first and takes
    // the wildcard; rank 1's (later: it computes 500 ns first) takes "from 1".
    let text = "num_ranks 3\nrank 0 {\ns: send 8b to 2 tag 1\n}\nrank 1 {\nc: calc 500\ns: send 8b to 2 tag 1\ns requires c\n}\n\
                rank 2 {\nany: recv 8b from -1 tag -1\nfrom1: recv 8b from 1 tag 1\n}\n";
    let r = run(text, &p);
    let tm = r.op_times.unwrap();
    // any: done when rank 0's message is in, 10 + 1000 + 10; from1: 500 + 10 + 1000 + 10.
    assert_eq!(tm.end_ns[3..], [1020, 1520]);
}

fn shuffled(g: &GenTrace, rng: &mut Xs) -> GenTrace {
    let mut g = g.clone();
    for ops in &mut g.ranks {
        for i in (1..ops.len()).rev() {
            ops.swap(i, rng.below(i as u64 + 1) as usize);
        }
    }
    g
}

fn renamed(g: &GenTrace) -> GenTrace {
    let mut g = g.clone();
    let new = |l: &str| format!("X{}_{}", l.len(), l.chars().rev().collect::<String>());
    for ops in &mut g.ranks {
        for o in ops.iter_mut() {
            o.label = new(&o.label);
            for d in &mut o.deps {
                d.0 = new(&d.0);
            }
        }
    }
    g
}

/// Random traces: the run is deterministic, label names do not matter, the critical path is at
/// most the end time, no operation ends before it starts, and — when dependencies fix each rank's
/// order (a chain) — the order the operations are written in does not matter either.
#[test]
fn random_traces_keep_the_invariants() {
    let mut rng = Xs(0x5EED_601A);
    for case in 0..400 {
        let chain = case % 2 == 0;
        let g = random_trace(&mut rng, chain);
        let p = params(1 + rng.below(3000), rng.below(2000), rng.below(2000), rng.below(8), rng.below(3), 65535);
        let text = g.text();
        let r = run(&text, &p);
        assert_eq!(r, run(&text, &p), "not deterministic:\n{text}");
        let r2 = run(&renamed(&g).text(), &p);
        assert_eq!(
            (&r.rank_end_ns, r.critical_path_ns),
            (&r2.rank_end_ns, r2.critical_path_ns),
            "labels matter:\n{text}"
        );
        assert!(
            r.critical_path_ns <= r.max_end().1,
            "critical path {} > end {}:\n{text}",
            r.critical_path_ns,
            r.max_end().1
        );
        let tm = r.op_times.as_ref().unwrap();
        assert!(tm.start_ns.iter().zip(&tm.end_ns).all(|(s, e)| s <= e), "{text}");
        if chain {
            let s = shuffled(&g, &mut rng);
            let r3 = run(&s.text(), &p);
            assert_eq!(
                (&r.rank_end_ns, r.critical_path_ns),
                (&r3.rank_end_ns, r3.critical_path_ns),
                "order matters:\n{text}\n{}",
                s.text()
            );
        }
    }
}

/// Mutations of valid traces are caught before anything is timed: a back edge closing a cycle
/// names the rank and the cycle's labels; a receive moved to a tag nobody sends on is named (or
/// the send it no longer matches).
#[test]
fn mutations_are_caught_by_the_checker() {
    let mut rng = Xs(0x0C4E_C4ED);
    let (mut cycles, mut unmatched) = (0, 0);
    for _ in 0..400 {
        let g = random_trace(&mut rng, true);
        // A cycle: the first operation of a rank with two or more requires its last.
        if let Some(r) = g.ranks.iter().position(|ops| ops.len() >= 2) {
            let mut m = g.clone();
            let last = m.ranks[r].last().unwrap().label.clone();
            m.ranks[r][0].deps.push((last.clone(), rng.below(2) == 0));
            let t = parse_str(&m.text()).unwrap();
            let e = check(&t).unwrap_err();
            assert!(e.message.starts_with(&format!("rank {r}: dependency cycle: ")), "{e}");
            assert!(e.message.contains(&last) && e.message.contains(&m.ranks[r][0].label), "{e}");
            cycles += 1;
        }
        // A receive on a tag nobody sends on.
        let recv = g
            .ranks
            .iter()
            .enumerate()
            .flat_map(|(r, ops)| ops.iter().enumerate().map(move |(i, o)| (r, i, o)))
            .find(|(_, _, o)| o.body.starts_with("recv"));
        if let Some((r, i, o)) = recv {
            let mut m = g.clone();
            let body = o.body.split(" tag ").next().unwrap().to_string() + " tag 999";
            m.ranks[r][i].body = body;
            let t = parse_str(&m.text()).unwrap();
            let e = check(&t).unwrap_err();
            assert!(e.message.contains("no matching"), "{e}");
            let names_recv = e.message.starts_with(&format!("rank {r}: recv {} from", o.label));
            let names_send = e.message.contains(": send ") && e.message.contains(&format!(" to {r} tag "));
            assert!(names_recv || names_send, "{e}\n{}", m.text());
            unmatched += 1;
        }
    }
    assert!(cycles > 300 && unmatched > 300, "{cycles} {unmatched}");
}

/// Not a test: writes the random traces of the property tests as GOAL files into
/// `$GOAL_RANDOM_DIR` for `scripts/loggopsim-compare.sh --random N` to run through LogGOPSim
/// (`$GOAL_RANDOM_COUNT` of them, default 200).
#[test]
#[ignore]
fn write_random_traces() {
    let dir = std::env::var("GOAL_RANDOM_DIR").expect("GOAL_RANDOM_DIR");
    let n: usize = std::env::var("GOAL_RANDOM_COUNT").ok().and_then(|v| v.parse().ok()).unwrap_or(200);
    let mut rng = Xs(0xD1FF_1060);
    for i in 0..n {
        let text = if i % 3 == 2 { burst_trace(&mut rng) } else { random_trace(&mut rng, i % 3 == 0).text() };
        std::fs::write(format!("{dir}/random-{i:04}.goal"), text).unwrap();
    }
}

/// Events waiting for the same busy CPU or NIC move in groups; LogGOPSim re-inserts each one. The
/// two must give the same run, operation by operation, event count included.
#[test]
fn grouped_retries_give_loggopsims_run() {
    let mut rng = Xs(0x6A0B_5EED);
    for case in 0..300 {
        let text = if case % 3 == 0 { random_trace(&mut rng, false).text() } else { burst_trace(&mut rng) };
        let p = params(1 + rng.below(3000), rng.below(2000), rng.below(2000), rng.below(8), rng.below(3), 65535);
        let t = parse_str(&text).unwrap();
        let c = check(&t).unwrap_or_else(|e| panic!("{e}\n{text}"));
        let grouped = simulate(&c, &p, true).unwrap();
        let reference = reducelab_goal::loggp::simulate_ungrouped(&c, &p, true).unwrap();
        assert_eq!(grouped, reference, "{p:?}\n{text}");
    }
}
