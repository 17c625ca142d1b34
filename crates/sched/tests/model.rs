//! The deficiency model against Table 2 of the Swing paper (NSDI'24), measured from the
//! schedules routed on real topologies. Algorithms that are not registered are skipped with
//! a note.

use reducelab_sched::algos::{build, Layout};
use reducelab_sched::model::{self, model, table2, Router, TopologyShape, XiConvention};
use reducelab_sched::registry;
use reducelab_sched::{Collective, Deficiencies};
use reducelab_topo::NodeId;

const MIB: u64 = 1 << 20;
const N: u64 = 512 * MIB;

/// Model of `alg` on `spec`, or `None` (with a note) if `alg` is not registered.
fn run(alg: &str, spec: &str) -> Option<Deficiencies> {
    if !registry::variant_names().contains(&alg) {
        eprintln!("note: algorithm '{alg}' is not registered yet; skipped on {spec}");
        return None;
    }
    // Same as `model(alg, spec, N, None)`, timing the schedule generator and the model apart.
    let ts = TopologyShape::parse(spec).unwrap();
    let topo = ts.build().unwrap();
    let t0 = std::time::Instant::now();
    let s = build(alg, Collective::Allreduce, &ts.layout()).unwrap_or_else(|e| panic!("{alg} on {spec}: {e}"));
    let t1 = std::time::Instant::now();
    let d = model::deficiencies(&s, &topo, N, ts.default_d()).unwrap_or_else(|e| panic!("{alg} on {spec}: {e}"));
    let t2 = std::time::Instant::now();
    eprintln!(
        "{alg:28} {spec:19} steps {:4}  Λ {:8.4}  Ψ {:8.4}  Ξ {:7.4}  Ξ_sum {:8.3}  (build {:.2} s, model {:.2} s)",
        d.steps,
        d.lambda,
        d.psi,
        d.xi,
        d.xi_sum,
        (t1 - t0).as_secs_f64(),
        (t2 - t1).as_secs_f64()
    );
    Some(d)
}

fn close(what: &str, got: f64, want: f64, tol: f64) {
    assert!((got - want).abs() <= tol, "{what}: got {got}, want {want} ± {tol}");
}

fn rel_close(what: &str, got: f64, want: f64, rel: f64) {
    assert!((got - want).abs() <= rel * want.abs(), "{what}: got {got}, want {want} ± {}%", rel * 100.0);
}

#[test]
fn swing_bandwidth_congestion_matches_table2() {
    for (spec, want, tol) in
        [("torus:64x64", 1.19, 0.01), ("torus:16x16x16", 1.03, 0.01), ("torus:8x8x8x8", 1.008, 0.005)]
    {
        let Some(d) = run("swing-bandwidth", spec) else { return };
        close(&format!("swing-bandwidth Ξ on {spec}"), d.xi, want, tol);
        close(&format!("swing-bandwidth Λ on {spec}"), d.lambda, 2.0, 1e-9);
        close(&format!("swing-bandwidth Ψ on {spec}"), d.psi, 1.0, 0.001);
        // The paper's finite-p expression Σ δ(σ(s))/2^{s+1} (§4.1), up to the (1 − 1/p) of Ψ.
        let t = table2("swing-bandwidth", d.d, d.ranks).unwrap();
        rel_close(&format!("swing-bandwidth Ξ vs §4.1 formula on {spec}"), d.xi * d.psi, t.xi_formula.unwrap(), 1e-6);
    }
}

#[test]
fn recursive_doubling_bandwidth_congestion_matches_table2() {
    for (spec, dd) in [("torus:64x64", 2), ("torus:16x16x16", 3), ("torus:8x8x8x8", 4)] {
        let Some(d) = run("recursive-doubling-bandwidth", spec) else { return };
        let want = (2f64.powi(dd) - 1.0) / (2f64.powi(dd) - 2.0);
        rel_close(&format!("recursive-doubling-bandwidth Ξ on {spec}"), d.xi, want, 0.03);
        close(&format!("recursive-doubling-bandwidth Λ on {spec}"), d.lambda, 2.0, 1e-9);
        close(&format!("recursive-doubling-bandwidth Ψ on {spec}"), d.psi, 2.0 * dd as f64, 0.01);
    }
}

#[test]
fn rings_and_bucket_have_no_congestion() {
    for (alg, spec) in [
        ("ring", "torus:64"),
        ("ring", "torus:16x16"),
        ("ring-bidirectional", "torus:64"),
        ("hamiltonian-rings", "torus:16x16"),
        ("hamiltonian-rings", "torus:32x32"),
        ("bucket", "torus:64x64"),
        ("bucket", "torus:16x16x16"),
    ] {
        let Some(d) = run(alg, spec) else { continue };
        close(&format!("{alg} Ξ on {spec}"), d.xi, 1.0, 1e-9);
    }
    // The multiport versions (Table 2's ring and bucket) send the minimum, 2(p−1)/p·n over
    // 2D ports: Ψ = (p−1)/p ≈ 1.
    for (alg, spec) in
        [("ring-bidirectional", "torus:64"), ("hamiltonian-rings", "torus:16x16"), ("bucket", "torus:64x64")]
    {
        let Some(d) = run(alg, spec) else { continue };
        let p = d.ranks as f64;
        close(&format!("{alg} Ψ on {spec}"), d.psi, (p - 1.0) / p, 1e-6);
    }
    // Bucket: Λ = 2D(p^{1/D} − 1)/log2 p ≈ Table 2's 2D·p^{1/D}/log2 p.
    if let Some(d) = run("bucket", "torus:64x64") {
        close("bucket Λ on 64x64", d.lambda, 2.0 * 2.0 * 63.0 / 12.0, 1e-9);
    }
}

#[test]
fn latency_deficiencies() {
    if let Some(d) = run("swing-bandwidth", "torus:16x16") {
        close("swing-bandwidth Λ", d.lambda, 2.0, 1e-9);
    }
    if let Some(d) = run("recursive-doubling-latency", "torus:64x64") {
        close("recursive-doubling-latency Λ", d.lambda, 1.0, 1e-9);
    }
    if let Some(d) = run("swing-latency", "torus:64x64") {
        close("swing-latency Λ", d.lambda, 1.0, 1e-9);
    }
    // Ring: 2(p−1) steps (Table 2: 2p/log2 p).
    for spec in ["torus:16x16", "torus:64"] {
        if let Some(d) = run("ring", spec) {
            let p = d.ranks as f64;
            close(&format!("ring Λ on {spec}"), d.lambda, 2.0 * (p - 1.0) / p.log2(), 1e-9);
            let t = table2("ring", d.d, d.ranks).unwrap();
            rel_close("ring Λ vs Table 2", d.lambda, t.lambda, 1.0 / p + 1e-9);
        }
    }
}

#[test]
fn bandwidth_deficiencies() {
    if let Some(d) = run("swing-bandwidth", "torus:16x16") {
        close("swing-bandwidth Ψ", d.psi, 255.0 / 256.0, 1e-6);
    }
    // Latency-optimal recursive doubling uses one port and sends the whole vector each step:
    // Ψ = D·log2 p, as in Table 2.
    for (spec, dd) in [("torus:64x64", 2.0), ("torus:16x16x16", 3.0)] {
        if let Some(d) = run("recursive-doubling-latency", spec) {
            close(&format!("recursive-doubling-latency Ψ on {spec}"), d.psi, dd * 12.0, 1e-9);
        }
    }
    // Swing (L) is multiport: each of the 2D collectives sends its n/(2D) part on its own port
    // every step, so Ψ = log2(p)·(n/2D)/(n/D) = log2(p)/2. Table 2's D·log2 p is the one-port
    // value (n per step on one port), 2D times more.
    for (spec, dd) in [("torus:64x64", 2.0), ("torus:16x16x16", 3.0)] {
        if let Some(d) = run("swing-latency", spec) {
            close(&format!("swing-latency Ψ on {spec}"), d.psi, 12.0 / 2.0, 1e-6);
            let t = table2("swing-latency", d.d, d.ranks).unwrap();
            close("Table 2 swing-latency Ψ", t.psi, dd * 12.0, 1e-9);
            close("one-port equivalent", d.psi * 2.0 * dd, t.psi, 1e-5);
        }
    }
}

#[test]
fn latency_optimal_congestion_sum_matches_the_paper_sums() {
    // Ξ_sum = Σ_s L_s = Σ of the peer distances over the steps (§2.3.2, §4.1).
    for (alg, spec, exact) in [
        ("recursive-doubling-latency", "torus:64x64", 2.0 * 63.0),
        ("recursive-doubling-latency", "torus:16x16x16", 3.0 * 15.0),
        ("swing-latency", "torus:64x64", 2.0 * (1.0 + 1.0 + 3.0 + 5.0 + 11.0 + 21.0)),
        ("swing-latency", "torus:16x16x16", 3.0 * (1.0 + 1.0 + 3.0 + 5.0)),
    ] {
        let Some(d) = run(alg, spec) else { continue };
        close(&format!("{alg} Ξ_sum on {spec}"), d.xi_sum, exact, 1e-9);
        let t = table2(alg, d.d, d.ranks).unwrap();
        assert_eq!(t.xi_convention, XiConvention::Sum);
        close(&format!("{alg} Ξ_sum vs paper sum on {spec}"), d.xi_sum, t.xi_formula.unwrap(), 1e-9);
        assert!(d.xi_sum <= t.xi.unwrap(), "{alg}: Ξ_sum {} above Table 2's bound {}", d.xi_sum, t.xi.unwrap());
        // Every step moves the whole part, so the data-weighted Ξ is the mean of the L_s.
        close(&format!("{alg} Ξ = Ξ_sum/steps"), d.xi, d.xi_sum / d.steps as f64, 1e-9);
    }
}

#[test]
fn swing_on_hyperx_has_no_congestion() {
    let Some(d) = run("swing-bandwidth", "hyperx:64x64") else { return };
    close("swing-bandwidth Ξ on HyperX 64x64", d.xi, 1.0, 1e-9);
    close("swing-bandwidth Ψ on HyperX 64x64", d.psi, 1.0, 0.001);
    assert!(d.per_step.iter().all(|s| s.max_hops == 1));
}

#[test]
fn hammingmesh_runs() {
    let Some(d) = run("swing-bandwidth", "hammingmesh:2x2,8x8") else { return };
    assert_eq!(d.ranks, 256);
    assert_eq!(d.d, 2);
    assert!(d.xi >= 1.0 && d.xi < 2.0, "Ξ = {}", d.xi);
}

#[test]
fn cost_is_equation_1_with_the_measured_deficiencies() {
    let Some(d) = run("swing-bandwidth", "torus:16x16") else { return };
    let (alpha, beta) = (1e-6, 8.0 / 400e9);
    let eq1 = (d.ranks as f64).log2() * alpha * d.lambda + d.size_bytes as f64 / d.d as f64 * beta * d.psi * d.xi;
    rel_close("cost vs Eq. 1", d.cost_seconds(alpha, beta, 0.0), eq1, 1e-12);
    let hops: u64 = d.per_step.iter().map(|s| s.max_hops as u64).sum();
    rel_close(
        "per-hop term",
        d.cost_seconds(alpha, beta, 3e-7) - d.cost_seconds(alpha, beta, 0.0),
        hops as f64 * 3e-7,
        1e-9,
    );
    for s in &d.per_step {
        assert!(s.congestion >= 1.0, "L_s = {} < 1", s.congestion);
    }
}

#[test]
fn torus_paths_follow_the_port_then_dimension_order() {
    let topo = TopologyShape::parse("torus:8x4").unwrap().build().unwrap();
    let mut router = Router::new(&topo);
    let mut path = Vec::new();
    // 0 = (0,0) → 3 + 8·1 = (3,1). Minimal: +x three times, then +y.
    router.path(0, 11, None, &mut path).unwrap();
    assert_eq!(path, vec![(NodeId(0), 0), (NodeId(1), 0), (NodeId(2), 0), (NodeId(3), 2)]);
    // Forced −x: 0 → 7 → 6 → 5 → 4 → 3 along x, then +y.
    router.path(0, 11, Some(1), &mut path).unwrap();
    let nodes: Vec<u32> = path.iter().map(|(n, _)| n.0).collect();
    assert_eq!(nodes, vec![0, 7, 6, 5, 4, 3]);
    assert!(path[..5].iter().all(|&(_, p)| p == 1));
    assert_eq!(path[5].1, 2);
    // A port on a dimension the peer does not differ in: dimension order only.
    router.path(0, 3, Some(2), &mut path).unwrap();
    assert_eq!(path.len(), 3);
    // Self: empty path.
    router.path(5, 5, Some(0), &mut path).unwrap();
    assert!(path.is_empty());
}

#[test]
fn schedule_ports_are_honoured_only_for_their_torus() {
    // A 1D-layout bidirectional ring on a 1D torus carries ports; its − ring must use − links.
    if registry::find("ring-bidirectional").is_none() {
        eprintln!("note: ring-bidirectional not registered; skipped");
        return;
    }
    let topo = TopologyShape::parse("torus:16").unwrap().build().unwrap();
    let s = build("ring-bidirectional", Collective::Allreduce, &Layout::line(16)).unwrap();
    let d = model::deficiencies(&s, &topo, MIB, 1).unwrap();
    assert!(d.per_step.iter().all(|l| l.max_hops == 1 && (l.congestion - 1.0).abs() < 1e-12));
}

#[test]
fn spec_and_input_errors_name_the_problem() {
    for (spec, needle) in [
        ("torus", "KIND:SHAPE"),
        ("donut:4x4", "unknown kind 'donut'"),
        ("torus:64xq", "'q'"),
        ("torus:", "missing dimensions"),
        ("torus:1x4", "dims[0]"),
        ("hammingmesh:2x2", "board, grid"),
        ("hammingmesh:2x2x2,4x4", "board"),
    ] {
        let e = model("swing-bandwidth", spec, N, None).unwrap_err();
        assert!(e.contains(needle), "{spec}: {e}");
    }
    let e = model("nope", "torus:4x4", N, None).unwrap_err();
    assert!(e.contains("unknown algorithm 'nope'"), "{e}");
    // Ring-family schedules grow as p², their timing plans do not: 4096 ranks model fine.
    let h = model("hamiltonian-rings", "torus:64x64", N, None).unwrap().deficiencies;
    assert_eq!(h.steps, 2 * 4095);
    assert!((h.xi - 1.0).abs() < 1e-12 && h.per_step.iter().all(|l| l.max_hops == 1), "{}", h.xi);
    assert!(model("ring", "torus:4x4", 2, None).unwrap_err().contains("at least 4 bytes"));
    assert_eq!(TopologyShape::parse(" HammingMesh:2x2, 32x32").unwrap().spec(), "hammingmesh:2x2,32x32");
}

#[test]
fn table2_closed_forms() {
    let t = table2("swing-bandwidth", 2, 4096).unwrap();
    assert_eq!((t.lambda, t.psi, t.xi), (2.0, 1.0, Some(1.19)));
    let t = table2("recursive-doubling-bandwidth", 3, 4096).unwrap();
    close("RD-B Ξ D=3", t.xi.unwrap(), 7.0 / 6.0, 1e-12);
    assert_eq!(t.psi, 6.0);
    let t = table2("recursive-doubling-latency", 2, 4096).unwrap();
    assert_eq!((t.lambda, t.psi, t.xi), (1.0, 24.0, Some(256.0)));
    let t = table2("bucket", 2, 4096).unwrap();
    close("bucket Λ", t.lambda, 2.0 * 2.0 * 64.0 / 12.0, 1e-12);
    assert!(table2("recursive-doubling-mirrored", 2, 4096).is_none());
    // The §4.1 sum Σ_s δ(σ(s))/2^{s+1} converges to (2^D−1)/(3·2^D)·Σ_σ (2^{σ+1} + (−1)^σ)/2^{Dσ}
    // = 6/5, 28/27, 120/119 for D = 2, 3, 4; Table 2 prints 1.19, 1.03, 1.008 (rounded down).
    for (dd, limit, paper) in [(2, 6.0 / 5.0, 1.19), (3, 28.0 / 27.0, 1.03), (4, 120.0 / 119.0, 1.008)] {
        let t = table2("swing-bandwidth", dd, 1 << 30).unwrap();
        close(&format!("Swing (B) Ξ formula D={dd}, p=2^30"), t.xi_formula.unwrap(), limit, 1e-4);
        close(&format!("Table 2 Swing (B) D={dd}"), t.xi.unwrap(), paper, 1e-12);
        assert!(limit - paper < 0.011);
    }
}
