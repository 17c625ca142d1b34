//! The baseline allreduce algorithms of the Swing paper (§2.3, §5.1, §5.2), all proved by
//! the symbolic checker over 1D sizes 2..=256 and many torus shapes, plus their step counts,
//! bytes per rank, port and link usage, and the Hamiltonian decomposition.

use reducelab_sched::algos::hamiltonian::{hamiltonian_cycles, helical_successors};
use reducelab_sched::algos::{build, Layout};
use reducelab_sched::*;
use std::collections::HashMap;

const AR: Collective = Collective::Allreduce;
const RS: Collective = Collective::ReduceScatter;
const AG: Collective = Collective::Allgather;

/// Algorithms under test and the collectives each supports.
const ALGOS: &[(&str, &[Collective])] = &[
    ("ring-bidirectional", &[AR, RS, AG]),
    ("hamiltonian-rings", &[AR, RS, AG]),
    ("recursive-doubling-latency", &[AR]),
    ("recursive-doubling-bandwidth", &[AR, RS, AG]),
    ("recursive-doubling-mirrored", &[AR, RS, AG]),
    ("bucket", &[AR, RS, AG]),
];

const SHAPES: &[&[u32]] = &[
    &[2, 2],
    &[4, 4],
    &[2, 4],
    &[4, 2],
    &[8, 8],
    &[16, 16],
    &[8, 4],
    &[4, 16],
    &[16, 2],
    &[6, 4],
    &[5, 3],
    &[3, 3],
    &[6, 6],
    &[7, 5],
    &[2, 6],
    &[9, 3],
    &[3, 6],
    &[12, 4],
    &[15, 5],
    &[1, 8],
    &[3, 3, 3],
    &[4, 4, 4],
    &[2, 8, 4],
    &[3, 5, 7],
    &[5, 5, 5],
    &[8, 1, 2],
    &[2, 2, 2, 2],
    &[4, 4, 2, 2],
    &[3, 2, 4, 2],
];

fn log2(x: u32) -> u32 {
    31 - x.leading_zeros()
}

fn is_pow2(x: u32) -> bool {
    x.is_power_of_two()
}

/// Steps the algorithm should take on `dims` (None: shape not supported).
fn expected_steps(algo: &str, c: Collective, dims: &[u32]) -> Option<usize> {
    let p: u32 = dims.iter().product();
    let phases = if c == AR { 2 } else { 1 };
    let active: Vec<u32> = dims.iter().copied().filter(|&d| d > 1).collect();
    // Recursive doubling: log2 of the folded torus, plus a fold and an unfold per
    // non-power-of-two dimension.
    let folded_bits: u32 = dims.iter().map(|&d| log2(d)).sum();
    let folds = dims.iter().filter(|&&d| !is_pow2(d)).count() as u32;
    let n = match algo {
        "ring-bidirectional" => phases * (p - 1),
        "hamiltonian-rings" => {
            if hamiltonian_cycles(&Layout::new(dims.to_vec()).unwrap()).is_err() {
                return None;
            }
            phases * (p - 1)
        }
        "recursive-doubling-latency" => folded_bits + 2 * folds,
        "recursive-doubling-bandwidth" | "recursive-doubling-mirrored" => phases * folded_bits + 2 * folds,
        // Synchronous dimension change: every phase lasts d_max − 1 steps.
        "bucket" => phases * active.len() as u32 * (active.iter().max().unwrap_or(&1) - 1),
        _ => unreachable!(),
    };
    Some(n as usize)
}

/// Builds, checks and verifies structural properties common to all algorithms.
fn build_checked(algo: &str, c: Collective, layout: &Layout) -> Schedule {
    let s = build(algo, c, layout).unwrap_or_else(|e| panic!("{algo} {c:?} {:?}: {e}", layout.dims));
    let rep = check(&s).unwrap_or_else(|e| panic!("{algo} {c:?} {:?}: {e}", layout.dims));
    let want = expected_steps(algo, c, &layout.dims).expect("supported shape");
    assert_eq!(rep.steps, want, "{algo} {c:?} {:?}: steps", layout.dims);
    if c != AR {
        // MPI reduce-scatter / allgather: rank q owns a contiguous, equally sized run of
        // blocks, in rank order.
        let p = layout.ranks();
        assert_eq!(s.blocks % p, 0);
        let per = s.blocks / p;
        assert!(
            s.block_owner.iter().enumerate().all(|(b, &o)| o == b as u32 / per),
            "{algo} {c:?}: owners {:?}",
            s.block_owner
        );
    }
    assert_eq!(s.noncommutative_safe, noncommutative_expected(algo, c, &layout.dims), "{algo} {c:?} {:?}", layout.dims);
    s
}

/// Which schedules are documented (and proved by the checker) to keep rank order.
fn noncommutative_expected(algo: &str, c: Collective, dims: &[u32]) -> bool {
    let linear = dims.iter().filter(|&&d| d > 1).count() <= 1;
    c == AG || (linear && matches!(algo, "recursive-doubling-latency" | "recursive-doubling-bandwidth"))
}

/// 1D sizes: every `p` in 2..=256, with every supported collective.
fn one_d_sizes(algo: &str) -> Vec<(u32, Vec<Collective>)> {
    let colls: Vec<Collective> = ALGOS.iter().find(|a| a.0 == algo).unwrap().1.to_vec();
    (2..=256).map(|p| (p, colls.clone())).collect()
}

fn check_1d(algo: &str) {
    for (p, colls) in one_d_sizes(algo) {
        for c in colls {
            build_checked(algo, c, &Layout::line(p));
        }
    }
}

#[test]
fn ring_bidirectional_on_1d_sizes() {
    check_1d("ring-bidirectional");
}

#[test]
fn recursive_doubling_latency_on_1d_sizes() {
    check_1d("recursive-doubling-latency");
}

#[test]
fn recursive_doubling_bandwidth_on_1d_sizes() {
    check_1d("recursive-doubling-bandwidth");
}

#[test]
fn recursive_doubling_mirrored_on_1d_sizes() {
    check_1d("recursive-doubling-mirrored");
}

#[test]
fn bucket_on_1d_sizes() {
    check_1d("bucket");
}

/// Every supported collective on every shape in [`SHAPES`].
fn check_shapes(algo: &str) {
    let colls = ALGOS.iter().find(|a| a.0 == algo).unwrap().1;
    for &dims in SHAPES {
        let layout = Layout::new(dims.to_vec()).unwrap();
        for &c in colls {
            if expected_steps(algo, c, dims).is_none() {
                let e = build(algo, c, &layout).unwrap_err();
                assert!(e.contains("hamiltonian-rings"), "{e}");
                continue;
            }
            build_checked(algo, c, &layout);
        }
    }
}

#[test]
fn ring_bidirectional_on_torus_shapes() {
    check_shapes("ring-bidirectional");
}

#[test]
fn hamiltonian_rings_on_torus_shapes() {
    check_shapes("hamiltonian-rings");
}

#[test]
fn recursive_doubling_on_torus_shapes() {
    check_shapes("recursive-doubling-latency");
    check_shapes("recursive-doubling-bandwidth");
    check_shapes("recursive-doubling-mirrored");
}

#[test]
fn bucket_on_torus_shapes() {
    check_shapes("bucket");
}

#[test]
fn unsupported_collectives_and_shapes_are_errors() {
    let l = Layout::new(vec![4, 4]).unwrap();
    for (algo, colls) in ALGOS {
        for c in [AR, RS, AG, Collective::Broadcast { root: 0 }, Collective::Reduce { root: 0 }] {
            assert_eq!(build(algo, c, &l).is_ok(), colls.contains(&c), "{algo} {c:?}");
        }
    }
    for dims in [vec![16], vec![4, 4, 4], vec![6, 4], vec![5, 3], vec![3, 6], vec![12, 4], vec![1, 8], vec![2, 1]] {
        let e = build("hamiltonian-rings", AR, &Layout::new(dims.clone()).unwrap()).unwrap_err();
        assert!(e.contains("hamiltonian-rings"), "{dims:?}: {e}");
    }
}

/// Bytes each rank sends over the whole schedule, for an `n`-byte vector of 1-byte elements.
fn bytes_sent(s: &Schedule, n: u64) -> Vec<u64> {
    s.programs
        .iter()
        .map(|p| p.steps.iter().flat_map(|st| &st.sends).map(|t| s.blocks_bytes(&t.blocks, n, 1)).sum())
        .collect()
}

#[test]
fn bytes_per_rank_match_the_models() {
    let mut layouts: Vec<Layout> = [2u32, 3, 4, 7, 8, 12, 16, 64, 100, 128].iter().map(|&p| Layout::line(p)).collect();
    layouts.extend(SHAPES.iter().map(|d| Layout::new(d.to_vec()).unwrap()));
    for layout in &layouts {
        let p = layout.ranks() as u64;
        let pow2 = layout.dims.iter().all(|&d| is_pow2(d));
        for &(algo, _) in ALGOS {
            let Ok(s) = build(algo, AR, layout) else { continue };
            // A vector that splits evenly into the schedule's blocks.
            let n = s.blocks as u64 * 64;
            let want = match algo {
                "recursive-doubling-latency" if pow2 => n * log2(p as u32) as u64,
                "recursive-doubling-bandwidth" | "recursive-doubling-mirrored" if pow2 => 2 * (p - 1) * n / p,
                "ring-bidirectional" | "hamiltonian-rings" | "bucket" => 2 * (p - 1) * n / p,
                _ => continue,
            };
            let sent = bytes_sent(&s, n);
            assert!(sent.iter().all(|&b| b == want), "{algo} {:?}: sent {sent:?}, want {want}", layout.dims);
        }
    }
}

/// Per step, how many messages cross each directed link `(rank, port)`, walking every message
/// along its dimension in the direction of its port (a message whose peer differs in more
/// than one coordinate is a test failure). Also checks that every receive port faces the
/// sender's port.
fn link_loads(s: &Schedule, layout: &Layout) -> Vec<HashMap<(u32, u16), u32>> {
    let steps = s.num_steps();
    let mut loads = vec![HashMap::new(); steps];
    for (r, prog) in s.programs.iter().enumerate() {
        let r = r as u32;
        for (si, st) in prog.steps.iter().enumerate() {
            for t in &st.sends {
                let port = t.port.unwrap_or_else(|| panic!("{}: send without a port", s.algorithm));
                let (dim, dir) = ((port / 2) as usize, if port % 2 == 0 { 1i64 } else { -1 });
                let (a, b) = (layout.coords(r), layout.coords(t.peer));
                assert!(
                    (0..layout.ndims()).all(|i| i == dim || a[i] == b[i]),
                    "{}: {r} -> {} is not along dim {dim}",
                    s.algorithm,
                    t.peer
                );
                let mut node = r;
                while node != t.peer {
                    *loads[si].entry((node, port)).or_insert(0) += 1;
                    node = layout.shift(node, dim, dir);
                }
                // The receiver posts a receive from r on the facing port in the same step.
                let facing = s.programs[t.peer as usize].steps[si]
                    .recvs
                    .iter()
                    .filter(|x| x.peer == r && x.port == Some(port ^ 1))
                    .count();
                let sending = st.sends.iter().filter(|x| x.peer == t.peer && x.port == Some(port)).count();
                assert_eq!(facing, sending, "{}: step {si}, {r} -> {} on port {port}", s.algorithm, t.peer);
            }
        }
    }
    loads
}

fn max_load(step: &HashMap<(u32, u16), u32>) -> u32 {
    step.values().copied().max().unwrap_or(0)
}

#[test]
fn ring_family_and_bucket_use_each_link_direction_once_per_step() {
    let mut cases: Vec<(&str, Layout)> = Vec::new();
    for p in [2u32, 3, 5, 8, 13, 32] {
        cases.push(("ring-bidirectional", Layout::line(p)));
        cases.push(("bucket", Layout::line(p)));
    }
    for &dims in SHAPES {
        let layout = Layout::new(dims.to_vec()).unwrap();
        if hamiltonian_cycles(&layout).is_ok() {
            cases.push(("hamiltonian-rings", layout.clone()));
        }
        cases.push(("bucket", layout));
    }
    for (algo, layout) in cases {
        for c in [AR, RS, AG] {
            let s = build(algo, c, &layout).unwrap();
            let loads = link_loads(&s, &layout);
            for (si, step) in loads.iter().enumerate() {
                assert!(
                    max_load(step) <= 1,
                    "{algo} {c:?} {:?} step {si}: a link direction carries {}",
                    layout.dims,
                    max_load(step)
                );
                // Only neighbours talk: every message is one hop.
                let hops: u32 = step.values().sum();
                let msgs: usize = s.programs.iter().filter_map(|p| p.steps.get(si)).map(|st| st.sends.len()).sum();
                assert_eq!(hops as usize, msgs, "{algo} {:?} step {si}: multi-hop message", layout.dims);
            }
        }
    }
    // The multiport algorithms keep every port of every rank busy in every step of a square
    // torus (the bucket's phases are all full-length there).
    for (algo, dims) in [
        ("bucket", vec![4, 4]),
        ("bucket", vec![3, 3, 3]),
        ("hamiltonian-rings", vec![6, 6]),
        ("bucket", vec![2, 2, 2, 2]),
    ] {
        let layout = Layout::new(dims.clone()).unwrap();
        let s = build(algo, AR, &layout).unwrap();
        for (si, step) in link_loads(&s, &layout).iter().enumerate() {
            assert_eq!(step.len(), (layout.ranks() * 2 * dims.len() as u32) as usize, "{algo} {dims:?} step {si}");
        }
    }
}

#[test]
fn bucket_idles_short_dimensions_until_the_longest_ring_is_done() {
    // 2x4: phases of 3 steps; the rings on the size-2 dimension run one step and idle two.
    let layout = Layout::new(vec![2, 4]).unwrap();
    let s = build("bucket", AR, &layout).unwrap();
    let loads = link_loads(&s, &layout);
    assert_eq!(loads.len(), 2 * 2 * 3);
    for (si, step) in loads.iter().enumerate() {
        let on_dim0 = step.keys().filter(|&&(_, port)| port < 2).count();
        let on_dim1 = step.keys().filter(|&&(_, port)| port >= 2).count();
        // Two collectives on dimension 1 (length 4) always run; the two on dimension 0 only in
        // the first step of each phase.
        assert_eq!(on_dim1, 2 * 8, "step {si}");
        assert_eq!(on_dim0, if si % 3 == 0 { 2 * 8 } else { 0 }, "step {si}");
    }
}

#[test]
fn recursive_doubling_congestion_equals_the_distance() {
    // §2.3.2: on a ring the most loaded link at step s carries 2^s messages.
    for k in 1..=7 {
        let layout = Layout::line(1 << k);
        let s = build("recursive-doubling-latency", AR, &layout).unwrap();
        let loads = link_loads(&s, &layout);
        let maxes: Vec<u32> = loads.iter().map(max_load).collect();
        assert_eq!(maxes, (0..k).map(|s| 1 << s).collect::<Vec<u32>>(), "p = {}", 1 << k);
    }
    // On a 4x4 torus (Fig. 2) peers alternate dimensions: distances 1, 1, 2, 2.
    let layout = Layout::new(vec![4, 4]).unwrap();
    let s = build("recursive-doubling-latency", AR, &layout).unwrap();
    let peers: Vec<u32> = s.programs[0].steps.iter().map(|st| st.sends[0].peer).collect();
    assert_eq!(peers, vec![1, 4, 2, 8]);
    let maxes: Vec<u32> = link_loads(&s, &layout).iter().map(max_load).collect();
    assert_eq!(maxes, vec![1, 1, 2, 2]);
}

#[test]
fn mirrored_recursive_doubling_uses_every_port_once_per_step_on_square_tori() {
    for dims in [vec![8], vec![4, 4], vec![8, 8], vec![16, 16], vec![4, 4, 4], vec![2, 2, 2, 2]] {
        let layout = Layout::new(dims.clone()).unwrap();
        let s = build("recursive-doubling-mirrored", AR, &layout).unwrap();
        for (r, prog) in s.programs.iter().enumerate() {
            for (si, st) in prog.steps.iter().enumerate() {
                let mut ports: Vec<u16> = st.sends.iter().map(|t| t.port.unwrap()).collect();
                ports.sort_unstable();
                assert_eq!(ports, (0..2 * dims.len() as u16).collect::<Vec<_>>(), "{dims:?} rank {r} step {si}");
            }
        }
        link_loads(&s, &layout); // every message along one dimension, receive ports facing
                                 // The plain one-port version sends one message per step.
        let s = build("recursive-doubling-bandwidth", AR, &layout).unwrap();
        assert!(s.programs.iter().all(|p| p.steps.iter().all(|st| st.sends.len() == 1)));
        link_loads(&s, &layout);
    }
}

#[test]
fn hamiltonian_cycles_are_edge_disjoint_and_hamiltonian() {
    let mut shapes = 0;
    for c in 2..=16u32 {
        for r in 2..=16u32 {
            let layout = Layout::new(vec![c, r]).unwrap();
            let Ok(cycles) = hamiltonian_cycles(&layout) else { continue };
            shapes += 1;
            let p = layout.ranks() as usize;
            let mut links = std::collections::HashSet::new();
            for cycle in &cycles {
                assert_eq!(cycle.len(), p);
                let mut seen = vec![false; p];
                for (i, &(q, port)) in cycle.iter().enumerate() {
                    assert!(!seen[q as usize], "{c}x{r}: rank {q} visited twice");
                    seen[q as usize] = true;
                    assert!(port == 0 || port == 2);
                    // The port leads to the next rank of the cycle.
                    assert_eq!(layout.shift(q, (port / 2) as usize, 1), cycle[(i + 1) % p].0, "{c}x{r}");
                    assert!(links.insert((q, port)), "{c}x{r}: link ({q}, {port}) in both cycles");
                }
            }
            // Together the cycles cover every link of the torus.
            assert_eq!(links.len(), 2 * p);
        }
    }
    assert!(shapes >= 30, "{shapes}");
}

#[test]
fn hamiltonian_condition_is_exactly_where_the_construction_works() {
    // The paper's condition r = c·k, gcd(r, c−1) = 1 is exactly when the helical
    // construction gives two single cycles.
    fn single_cycle(succ: &[u32]) -> bool {
        let (mut node, mut n) = (0, 0);
        loop {
            node = succ[node as usize];
            n += 1;
            if node == 0 {
                return n == succ.len();
            }
        }
    }
    fn gcd(a: u32, b: u32) -> u32 {
        if b == 0 {
            a
        } else {
            gcd(b, a % b)
        }
    }
    for c in 2..=12u32 {
        for k in 1..=6u32 {
            let r = c * k;
            let [h1, h2] = helical_successors(c, r);
            assert!(single_cycle(&h1), "{c}x{r}");
            assert_eq!(single_cycle(&h2), gcd(r, c - 1) == 1, "{c}x{r}");
            assert_eq!(hamiltonian_cycles(&Layout::new(vec![c, r]).unwrap()).is_ok(), gcd(r, c - 1) == 1);
        }
    }
}

#[test]
fn json_round_trip_of_every_algorithm() {
    let layout = Layout::new(vec![4, 4]).unwrap();
    for &(algo, colls) in ALGOS {
        for &c in colls {
            let s = build(algo, c, &layout).unwrap();
            assert_eq!(Schedule::from_json(&s.to_json()).unwrap(), s);
        }
    }
}
