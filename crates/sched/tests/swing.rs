//! Swing schedules, all proven by the symbolic checker.

use reducelab_sched::algos::swing::{delta, pi, rho, SWING_BANDWIDTH, SWING_LATENCY};
use reducelab_sched::algos::{build, Layout};
use reducelab_sched::*;

const BW: &str = SWING_BANDWIDTH;
const LAT: &str = SWING_LATENCY;

fn layout(dims: &[u32]) -> Layout {
    Layout::new(dims.to_vec()).unwrap()
}

fn is_pow2(x: u32) -> bool {
    x.is_power_of_two()
}

fn log2(x: u32) -> usize {
    x.trailing_zeros() as usize
}

/// Dimensions of size > 1.
fn active(dims: &[u32]) -> usize {
    dims.iter().filter(|&&d| d > 1).count().max(1)
}

/// Builds and checks; returns the schedule and report.
fn built(alg: &str, c: Collective, dims: &[u32]) -> (Schedule, CheckReport) {
    let s = build(alg, c, &layout(dims)).unwrap_or_else(|e| panic!("{alg} {dims:?} {c:?}: {e}"));
    let rep = check(&s).unwrap_or_else(|e| panic!("{alg} {dims:?} {c:?}: {e}"));
    assert_eq!(s.torus.as_deref(), Some(dims));
    (s, rep)
}

fn collectives(alg: &str, p: u32) -> Vec<Collective> {
    let mut v = vec![Collective::Allreduce];
    if alg == BW {
        v.push(Collective::ReduceScatter);
        v.push(Collective::Allgather);
    }
    // Vary the roots with p (the checker's cost limits how many trees we can afford).
    v.push(Collective::Broadcast { root: p / 3 });
    v.push(Collective::Reduce { root: (p - 1) - p / 5 });
    v
}

/// Bytes each rank sends, as a fraction of the vector.
fn sent_fraction(s: &Schedule) -> Vec<f64> {
    let total = s.blocks as u64 * 8 * 16;
    s.programs
        .iter()
        .map(|p| {
            let b: u64 = p.steps.iter().flat_map(|st| &st.sends).map(|t| s.blocks_bytes(&t.blocks, total, 8)).sum();
            b as f64 / total as f64
        })
        .collect()
}

fn assert_optimal_bytes(s: &Schedule, dims: &[u32]) {
    let p = s.ranks as f64;
    for (r, f) in sent_fraction(s).into_iter().enumerate() {
        assert!((f - 2.0 * (p - 1.0) / p).abs() < 1e-9, "{dims:?}: rank {r} sends {f} of the vector");
    }
}

fn one_d(alg: &str, collective_filter: impl Fn(&Collective) -> bool) {
    for p in 2..=256u32 {
        for c in collectives(alg, p).into_iter().filter(&collective_filter) {
            let (s, rep) = built(alg, c, &[p]);
            if is_pow2(p) {
                let l = log2(p);
                let want = match (alg, c) {
                    (BW, Collective::Allreduce | Collective::Broadcast { .. } | Collective::Reduce { .. }) => 2 * l,
                    _ => l,
                };
                assert_eq!(rep.steps, want, "{alg} p={p} {c:?}");
            }
            if alg == BW && c == Collective::Allreduce {
                assert_optimal_bytes(&s, &[p]);
            }
        }
    }
}

#[test]
fn one_d_bandwidth_allreduce_all_sizes() {
    one_d(BW, |c| *c == Collective::Allreduce);
}

#[test]
fn one_d_bandwidth_reduce_scatter_allgather_all_sizes() {
    one_d(BW, |c| matches!(c, Collective::ReduceScatter | Collective::Allgather));
}

#[test]
fn one_d_bandwidth_broadcast_reduce_all_sizes() {
    one_d(BW, |c| matches!(c, Collective::Broadcast { .. } | Collective::Reduce { .. }));
}

#[test]
fn one_d_latency_all_sizes() {
    one_d(LAT, |_| true);
}

const SQUARE: &[&[u32]] = &[&[2, 2], &[4, 4], &[8, 8], &[16, 16], &[2, 2, 2], &[4, 4, 4], &[2, 2, 2, 2], &[4, 4, 4, 4]];
const NON_SQUARE: &[&[u32]] =
    &[&[2, 4], &[4, 2], &[4, 16], &[16, 4], &[8, 2], &[2, 8, 4], &[4, 4, 2, 2], &[2, 32], &[64, 4]];
const EVEN: &[&[u32]] = &[&[6], &[10, 6], &[12, 4], &[6, 6], &[4, 6], &[6, 4, 2], &[10, 10], &[2, 14], &[6, 2, 2, 2]];
const ODD: &[&[u32]] =
    &[&[3], &[5, 5], &[7, 3], &[3, 3, 3], &[9, 7], &[5, 4], &[3, 6], &[15, 15], &[3, 2, 2, 2], &[5, 3, 3, 3]];
const DEGENERATE: &[&[u32]] = &[&[1], &[4, 1], &[1, 5], &[1, 1, 8], &[3, 1, 3]];

fn shapes() -> impl Iterator<Item = &'static [u32]> {
    [SQUARE, NON_SQUARE, EVEN, ODD, DEGENERATE].into_iter().flatten().copied()
}

#[test]
fn multidimensional_shapes_all_variants() {
    for dims in shapes() {
        let p: u32 = dims.iter().product();
        for alg in [BW, LAT] {
            for c in collectives(alg, p) {
                let (s, rep) = built(alg, c, dims);
                let k: usize = if p.is_power_of_two() { log2(p) } else { 0 };
                if is_pow2(p) {
                    match (alg, c) {
                        (BW, Collective::ReduceScatter | Collective::Allgather) | (LAT, _) => {
                            assert_eq!(rep.steps, k, "{alg} {dims:?} {c:?}")
                        }
                        _ => assert_eq!(rep.steps, 2 * k, "{alg} {dims:?} {c:?}"),
                    }
                }
                if alg == BW && c == Collective::Allreduce {
                    assert_optimal_bytes(&s, dims);
                }
            }
        }
    }
}

#[test]
fn latency_non_power_of_two_folds_to_the_largest_power_of_two() {
    for dims in [&[6u32][..], &[7], &[10, 6], &[3, 3, 3], &[12, 4]] {
        let (_, rep) = built(LAT, Collective::Allreduce, dims);
        let sub: u32 = dims.iter().map(|&d| 1u32 << (31 - d.leading_zeros())).product();
        assert_eq!(rep.steps, log2(sub) + 2, "{dims:?}");
    }
}

#[test]
fn bandwidth_messages_are_contiguous_on_power_of_two_tori() {
    let pow2_1d: Vec<Vec<u32>> = (1..=8).map(|k| vec![1u32 << k]).collect();
    for dims in SQUARE.iter().chain(NON_SQUARE).map(|d| d.to_vec()).chain(pow2_1d) {
        for c in [Collective::Allreduce, Collective::Broadcast { root: 1 }, Collective::Reduce { root: 0 }] {
            let s = build(BW, c, &layout(&dims)).unwrap();
            if c != Collective::Allreduce {
                continue; // scatter/gather subtrees need not be contiguous
            }
            for (r, p) in s.programs.iter().enumerate() {
                for (si, st) in p.steps.iter().enumerate() {
                    for t in st.sends.iter().chain(&st.recvs) {
                        assert_eq!(t.blocks.runs(), 1, "{dims:?} rank {r} step {si}: {:?}", t.blocks.0);
                    }
                }
            }
        }
    }
}

#[test]
fn reduce_scatter_keeps_mpi_block_ownership() {
    for dims in [&[8u32][..], &[4, 4], &[6, 5], &[7]] {
        let p: u32 = dims.iter().product();
        let n = 2 * active(dims) as u32;
        for c in [Collective::ReduceScatter, Collective::Allgather] {
            let (s, _) = built(BW, c, dims);
            assert_eq!(s.blocks, p * n);
            // Rank r owns the contiguous segment [r·2D, (r+1)·2D).
            for b in 0..s.blocks {
                assert_eq!(s.block_owner[b as usize], b / n);
            }
        }
    }
}

#[test]
fn multiport_uses_all_ports_every_step_on_square_tori() {
    let pow2_1d: Vec<Vec<u32>> = (1..=8).map(|k| vec![1u32 << k]).collect();
    for dims in SQUARE.iter().map(|d| d.to_vec()).chain(pow2_1d) {
        let nd = dims.len();
        for alg in [BW, LAT] {
            let s = build(alg, Collective::Allreduce, &layout(&dims)).unwrap();
            for (r, p) in s.programs.iter().enumerate() {
                for (si, st) in p.steps.iter().enumerate() {
                    for dir in [&st.sends, &st.recvs] {
                        let mut ports: Vec<u16> = dir.iter().map(|t| t.port.expect("port set")).collect();
                        ports.sort();
                        ports.dedup();
                        assert_eq!(ports.len(), 2 * nd, "{alg} {dims:?} rank {r} step {si}: {ports:?}");
                    }
                }
            }
        }
    }
}

/// Ring distance and dimension of the (single) differing coordinate.
fn hop(l: &Layout, a: u32, b: u32) -> (usize, i64) {
    let (ca, cb) = (l.coords(a), l.coords(b));
    let diff: Vec<usize> = (0..ca.len()).filter(|&i| ca[i] != cb[i]).collect();
    assert_eq!(diff.len(), 1, "{a} and {b} differ in {diff:?}");
    let i = diff[0];
    let d = l.dims[i] as i64;
    let x = (cb[i] as i64 - ca[i] as i64).rem_euclid(d);
    (i, x.min(d - x))
}

#[test]
fn peers_are_at_swing_distance_along_the_step_dimension() {
    let pow2_1d: Vec<Vec<u32>> = (1..=8).map(|k| vec![1u32 << k]).collect();
    for dims in SQUARE.iter().map(|d| d.to_vec()).chain(pow2_1d) {
        let l = layout(&dims);
        let nd = dims.len();
        let k = log2(l.ranks());
        for alg in [BW, LAT] {
            let s = build(alg, Collective::Allreduce, &l).unwrap();
            for (r, p) in s.programs.iter().enumerate() {
                for (si, st) in p.steps.iter().enumerate() {
                    // Swing step of this schedule step (the allgather runs in reverse).
                    let sw = if si < k { si } else { 2 * k - 1 - si };
                    assert_eq!(st.sends.len(), 2 * nd);
                    for (j, t) in st.sends.iter().enumerate() {
                        // Transfers are listed in collective order; collective j (and its
                        // mirror j + D) works in dimension ω(s) = (s + j) mod D.
                        let omega = (sw + j % nd) % nd;
                        let sigma = (sw / nd) as u32;
                        let (dim, dist) = hop(&l, r as u32, t.peer);
                        assert_eq!(
                            (dim, dist),
                            (omega, delta(sigma)),
                            "{alg} {dims:?} rank {r} step {si} transfer {j}"
                        );
                        assert_eq!(t.port.unwrap() as usize / 2, omega);
                        // Plain collectives follow Eq. 2 on the dimension's ring.
                        let a = l.coords(r as u32)[omega];
                        let want = pi(a, sigma, dims[omega]);
                        let got = l.coords(t.peer)[omega];
                        if j < nd {
                            assert_eq!(got, want, "{alg} {dims:?} rank {r} step {si}");
                        } else {
                            // Mirrored: the opposite sign.
                            let d = dims[omega] as i64;
                            let mirror = (2 * a as i64 - want as i64).rem_euclid(d) as u32;
                            assert_eq!(got, mirror, "{alg} {dims:?} rank {r} step {si}");
                        }
                    }
                }
            }
        }
    }
}

#[test]
fn peer_function_matches_the_paper() {
    assert_eq!((0..6).map(rho).collect::<Vec<_>>(), vec![1, -1, 3, -5, 11, -21]);
    assert_eq!((0..6).map(delta).collect::<Vec<_>>(), vec![1, 1, 3, 5, 11, 21]);
    for s in 0..10 {
        assert!(delta(s) <= 1 << s);
        assert_eq!(delta(s) % 2, 1);
    }
    // Fig. 1 / A.1 on 16 nodes: 0 ↔ 1, then 0 ↔ 15 and 1 ↔ 2, then 0 ↔ 3.
    assert_eq!(pi(0, 0, 16), 1);
    assert_eq!(pi(0, 1, 16), 15);
    assert_eq!(pi(1, 1, 16), 2);
    assert_eq!(pi(0, 2, 16), 3);
    // π(·, s) is an involution on even rings.
    for p in [2u32, 6, 8, 10, 16] {
        for s in 0..4 {
            for r in 0..p {
                assert_eq!(pi(pi(r, s, p), s, p), r);
            }
        }
    }
}

#[test]
fn odd_extra_node_exchanges_directly_as_in_fig_4() {
    let (s, _) = built(BW, Collective::Allreduce, &[7]);
    let mut peers: Vec<Vec<u32>> = s.programs[6].steps[..3]
        .iter()
        .map(|st| {
            let mut v: Vec<u32> = st.sends.iter().map(|t| t.peer).collect();
            v.sort();
            v.dedup();
            v
        })
        .collect();
    peers.iter_mut().for_each(|v| v.sort());
    assert_eq!(peers, vec![vec![0, 1, 2], vec![3, 4], vec![5]]);
    // The extra node only ever sends one block per peer per collective: its own data for
    // that peer's block.
    for st in &s.programs[6].steps[..3] {
        for t in &st.sends {
            assert_eq!(t.blocks.len(), 1);
        }
    }
}

#[test]
fn never_sends_a_block_twice_on_even_non_power_of_two() {
    for dims in [&[6u32][..], &[10], &[12], &[10, 6], &[12, 4]] {
        let (s, _) = built(BW, Collective::ReduceScatter, dims);
        let n = s.blocks / s.ranks;
        for (r, p) in s.programs.iter().enumerate() {
            let mut seen = std::collections::HashSet::new();
            for st in &p.steps {
                for t in &st.sends {
                    for b in t.blocks.iter() {
                        assert!(seen.insert(b), "{dims:?}: rank {r} sends block {b} twice");
                    }
                }
            }
            assert_eq!(seen.len() as u32, (s.ranks - 1) * n);
        }
    }
}

#[test]
fn noncommutative_claims() {
    // Trivial sizes and copy-only collectives are in rank order (the checker proved it in
    // `built`); Swing's cyclic partial sums are not, beyond two ranks.
    for alg in [BW, LAT] {
        for p in [1u32, 2] {
            assert!(built(alg, Collective::Allreduce, &[p]).0.noncommutative_safe, "{alg} p={p}");
        }
        assert!(built(alg, Collective::Broadcast { root: 3 }, &[8]).0.noncommutative_safe);
        for dims in [&[4u32][..], &[8], &[4, 4], &[6], &[7]] {
            let (mut s, _) = built(alg, Collective::Allreduce, dims);
            assert!(!s.noncommutative_safe, "{alg} {dims:?}");
            s.noncommutative_safe = true;
            assert!(check(&s).unwrap_err().message.contains("rank order"));
        }
    }
    assert!(built(BW, Collective::Allgather, &[4, 4]).0.noncommutative_safe);
}

#[test]
fn errors_and_registration() {
    let names = reducelab_sched::registry::variant_names();
    assert!(names.contains(&BW) && names.contains(&LAT));
    for c in [Collective::ReduceScatter, Collective::Allgather] {
        let e = build(LAT, c, &layout(&[8])).unwrap_err();
        assert!(e.contains(BW), "{e}");
    }
    for alg in [BW, LAT] {
        assert!(build(alg, Collective::Broadcast { root: 8 }, &layout(&[8])).is_err());
        assert!(build(alg, Collective::Reduce { root: 99 }, &layout(&[4, 4])).is_err());
    }
}

#[test]
fn json_round_trip() {
    let (s, _) = built(BW, Collective::Allreduce, &[4, 4]);
    assert_eq!(Schedule::from_json(&s.to_json()).unwrap(), s);
}
