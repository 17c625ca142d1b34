//! Variant selection by vector size: the closed-form per-step loads against the model of the
//! real schedules, and the choices and crossovers they give.

use reducelab_sched::algos::{build, Layout};
use reducelab_sched::model::{self, TopologyShape};
use reducelab_sched::select::{closed_form, crossover_exact, families, resolve, try_crossover_bytes, variants};
use reducelab_sched::*;

const MIB: u64 = 1 << 20;
const KIB: u64 = 1 << 10;
const N: u64 = 64 * MIB;
const ALPHA: f64 = 1e-6;
/// 400 Gb/s.
const BETA: f64 = 8.0 / 400e9;
const HOP: f64 = 300e-9;

const VARIANTS: [&str; 4] =
    ["swing-latency", "swing-bandwidth", "recursive-doubling-latency", "recursive-doubling-bandwidth"];

fn layout(dims: &[u32]) -> Layout {
    Layout::new(dims.to_vec()).unwrap()
}

fn model_of(alg: &str, dims: &[u32], size: u64) -> Deficiencies {
    let spec = TopologyShape::Torus(dims.to_vec());
    let s = build(alg, Collective::Allreduce, &spec.layout()).unwrap();
    model::deficiencies(&s, &spec.build().unwrap(), size, spec.default_d()).unwrap()
}

fn rel(a: f64, b: f64) -> f64 {
    if a == b {
        0.0
    } else {
        (a - b).abs() / a.abs().max(b.abs())
    }
}

/// Compares every step and the total cost; returns the worst relative error.
fn compare(alg: &str, dims: &[u32]) -> f64 {
    let d = model_of(alg, dims, N);
    let c = closed_form(alg, &layout(dims), N).unwrap();
    assert!(c.exact);
    assert_eq!(c.steps.len(), d.steps, "{alg} on {dims:?}: steps");
    let mut worst: f64 = 0.0;
    for (s, (m, f)) in d.per_step.iter().zip(&c.steps).enumerate() {
        let e_port = rel(m.max_port_bytes as f64, f.port_bytes);
        let e_link = rel(m.max_link_bytes as f64, f.link_bytes);
        assert!(
            e_port <= 0.01 && e_link <= 0.01 && m.max_hops == f.hops,
            "{alg} on {dims:?} step {s}: model b={} L·b={} hops={}, closed form b={:.0} L·b={:.0} hops={}",
            m.max_port_bytes,
            m.max_link_bytes,
            m.max_hops,
            f.port_bytes,
            f.link_bytes,
            f.hops
        );
        worst = worst.max(e_port).max(e_link);
    }
    let e_cost = rel(d.cost_seconds(ALPHA, BETA, HOP), c.cost_seconds(ALPHA, BETA, HOP));
    assert!(e_cost <= 0.01, "{alg} on {dims:?}: cost {e_cost}");
    let e_bw = rel(d.bandwidth_bytes(), c.bandwidth_bytes());
    eprintln!(
        "{alg:30} {:10} steps {:3}  Σ L·b / n: model {:8.4} closed {:8.4}  Σ hops {:4}  worst step error {:.2e}, cost error {:.2e}",
        format!("{dims:?}"),
        d.steps,
        d.bandwidth_bytes() / N as f64,
        c.bandwidth_bytes() / N as f64,
        d.hops(),
        worst,
        e_cost.max(e_bw)
    );
    worst.max(e_cost)
}

#[test]
fn closed_forms_match_the_model_on_power_of_two_tori() {
    for dims in [&[4, 4][..], &[8, 8], &[16, 16], &[8, 8, 8]] {
        for alg in VARIANTS {
            compare(alg, dims);
        }
    }
}

#[test]
fn closed_forms_match_the_model_on_other_power_of_two_shapes() {
    // 1D, rectangular (several collectives share a dimension), 4D.
    for dims in [&[64][..], &[2], &[16, 4], &[4, 16], &[8, 4, 2], &[4, 4, 4, 4], &[32, 2]] {
        for alg in VARIANTS {
            compare(alg, dims);
        }
    }
    // Dimensions of size 1 are ignored (the model's topologies cannot have them).
    for alg in VARIANTS {
        assert_eq!(
            closed_form(alg, &layout(&[8, 1, 8]), N).unwrap().steps,
            closed_form(alg, &layout(&[8, 8]), N).unwrap().steps
        );
    }
}

#[test]
fn non_power_of_two_shapes_are_enumerated_exactly() {
    // Even, odd (Swing's extra node, recursive doubling's folding), mixed, 1D to 3D.
    for dims in [&[6, 6][..], &[12], &[7], &[10, 4], &[12, 12], &[6, 6, 6], &[3, 5], &[12, 6, 5], &[9, 8]] {
        for alg in VARIANTS {
            compare(alg, dims);
        }
    }
}

#[test]
fn huge_non_power_of_two_shapes_fall_back_to_approximate_closed_forms() {
    let l = layout(&[3000, 3000]);
    for alg in VARIANTS {
        let c = closed_form(alg, &l, N).unwrap();
        assert!(!c.exact && !c.steps.is_empty(), "{alg}");
    }
    for family in families() {
        assert!(crossover_bytes(family, &l, ALPHA, BETA, HOP) < u64::MAX);
    }
    // A mid-size non-power-of-two torus is enumerated exactly.
    let l = layout(&[250, 250]);
    for family in families() {
        assert!(crossover_bytes(family, &l, ALPHA, BETA, HOP) < u64::MAX);
    }
    assert!(closed_form("swing-bandwidth", &l, N).unwrap().exact);
}

#[test]
fn small_sizes_pick_latency_and_large_sizes_bandwidth() {
    for family in families() {
        let (lat, bw) = variants(family).unwrap();
        for dims in [&[64, 64][..], &[8, 8], &[16, 16], &[8, 8, 8], &[64], &[6, 6]] {
            let l = layout(dims);
            for hop in [0.0, HOP] {
                assert_eq!(choose_variant(family, &l, 32, ALPHA, BETA, hop).unwrap(), lat, "{family} {dims:?}");
                assert_eq!(choose_variant(family, &l, 1 << 30, ALPHA, BETA, hop).unwrap(), bw, "{family} {dims:?}");
            }
        }
    }
}

#[test]
fn crossovers() {
    for family in families() {
        for dims in [&[64, 64][..], &[8, 8], &[8, 8, 8], &[16, 16], &[4, 4]] {
            let l = layout(dims);
            for hop in [0.0, HOP] {
                let x = crossover_bytes(family, &l, ALPHA, BETA, hop);
                let exact = crossover_exact(family, &l, ALPHA, BETA, hop).unwrap().unwrap();
                eprintln!(
                    "{family:18} {:10} α = 1 µs, 400 Gb/s, {:3.0} ns/hop: crossover {:8.1} KiB (power of two: {} KiB)",
                    format!("{dims:?}"),
                    hop * 1e9,
                    exact / 1024.0,
                    x / KIB
                );
                assert!(x.is_power_of_two() && (32..=1 << 32).contains(&x));
                // The bisection finds the first power of two at or above the exact crossing.
                assert!((x as f64) >= exact && (x as f64) < 2.0 * exact.max(16.0), "{x} vs {exact}");
                let (lat, bw) = variants(family).unwrap();
                assert_eq!(choose_variant(family, &l, x, ALPHA, BETA, hop).unwrap(), bw);
                if x > 32 {
                    assert_eq!(choose_variant(family, &l, x / 2, ALPHA, BETA, hop).unwrap(), lat);
                }
                if *dims == [64, 64] && family == "swing" {
                    assert!((32 * KIB..=8 * MIB).contains(&x), "{family} on 64x64: crossover {x} B");
                }
            }
        }
    }
    // Bandwidth never winning, and errors.
    assert_eq!(crossover_bytes("swing", &layout(&[1]), ALPHA, BETA, 0.0), u64::MAX);
    assert!(try_crossover_bytes("ring", &layout(&[8]), ALPHA, BETA, 0.0).is_err());
    assert!(choose_variant("swing", &layout(&[8]), 1, -1.0, BETA, 0.0).is_err());
}

/// The closed-form choice agrees with the choice the model of the real schedules makes, at
/// every power of two (except near-ties).
#[test]
fn selection_agrees_with_the_model_of_the_real_schedules() {
    for dims in [&[8, 8][..], &[8, 8, 8], &[16, 16]] {
        for family in families() {
            let (lat, bw) = variants(family).unwrap();
            let (dl, db) = (model_of(lat, dims, N), model_of(bw, dims, N));
            for e in 5..=32u32 {
                let n = 1u64 << e;
                // Deficiency costs scale linearly in the bandwidth term.
                let cost = |d: &Deficiencies| {
                    d.steps as f64 * ALPHA + BETA * d.bandwidth_bytes() * n as f64 / N as f64 + HOP * d.hops() as f64
                };
                let (tl, tb) = (cost(&dl), cost(&db));
                if rel(tl, tb) < 0.01 {
                    continue;
                }
                let want = if tb < tl { bw } else { lat };
                assert_eq!(
                    choose_variant(family, &layout(dims), n, ALPHA, BETA, HOP).unwrap(),
                    want,
                    "{family} {dims:?} at {n} B"
                );
            }
        }
    }
}

#[test]
fn selection_is_deterministic_and_build_for_size_resolves_families() {
    let l = layout(&[4, 4]);
    let a: Vec<&str> = (5..=32).map(|e| choose_variant("swing", &l, 1 << e, ALPHA, BETA, HOP).unwrap()).collect();
    let b: Vec<&str> = (5..=32).map(|e| choose_variant("swing", &l, 1 << e, ALPHA, BETA, HOP).unwrap()).collect();
    assert_eq!(a, b);
    assert_eq!(crossover_bytes("swing", &l, ALPHA, BETA, HOP), crossover_bytes("swing", &l, ALPHA, BETA, HOP));
    let small = build_for_size("swing", Collective::Allreduce, &l, 64, ALPHA, BETA, HOP).unwrap();
    assert_eq!(small.algorithm, "swing-latency");
    let big = build_for_size("swing", Collective::Allreduce, &l, 64 * MIB, ALPHA, BETA, HOP).unwrap();
    assert_eq!(big.algorithm, "swing-bandwidth");
    check(&big).unwrap();
    let rd = build_for_size("recursive-doubling", Collective::Allreduce, &l, 64, ALPHA, BETA, HOP).unwrap();
    assert_eq!(rd.algorithm, "recursive-doubling-latency");
    // The latency-optimal variants build no reduce-scatter: the bandwidth one is used.
    let rs = build_for_size("swing", Collective::ReduceScatter, &l, 64, ALPHA, BETA, HOP).unwrap();
    assert_eq!(rs.algorithm, "swing-bandwidth");
    assert_eq!(
        resolve("recursive-doubling", Collective::Allgather, &l, 64, ALPHA, BETA, HOP).unwrap(),
        "recursive-doubling-bandwidth"
    );
    // Other names go to `build` unchanged.
    assert_eq!(
        build_for_size("ring", Collective::Allreduce, &l, 64, ALPHA, BETA, HOP).unwrap(),
        build("ring", Collective::Allreduce, &l).unwrap()
    );
    assert!(build_for_size("nope", Collective::Allreduce, &l, 64, ALPHA, BETA, HOP).is_err());
    assert!(choose_variant("ring", &l, 64, ALPHA, BETA, HOP).is_err());
    // `build` itself names the family's variants.
    assert!(build("swing", Collective::Allreduce, &l).unwrap_err().contains("(swing-latency, swing-bandwidth)"));
}
