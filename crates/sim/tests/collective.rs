use reducelab_des::{Rng, SimTime};
use reducelab_net::{NetConfig, Network, RunEnd};
use reducelab_sched::algos::{build, Layout};
use reducelab_sched::{Collective, RecvOp, Schedule};
use reducelab_sim::collective::CollectiveRun;
use reducelab_topo::{star, torus, LinkParams};

fn run(
    topo: &reducelab_topo::Topology,
    sched: Schedule,
    bytes: u64,
) -> (reducelab_sim::collective::CollectiveResult, RunEnd) {
    let cfg = NetConfig { switch_latency_ps: 300_000, ..NetConfig::default() };
    let mut net = Network::new(topo, cfg, vec![], &Rng::new(5)).unwrap();
    let hosts = (0..sched.ranks).collect();
    let mut w = CollectiveRun::new(topo, sched, hosts, bytes, 4, 0, SimTime::ZERO, 99);
    let end = net.run(&mut w, None, &mut |_| {});
    (w.result(), end)
}

const L: LinkParams = LinkParams { bandwidth_bps: 400_000_000_000, latency_ps: 100_000 };

#[test]
fn ring_allreduce_runs_and_verifies_on_star_and_torus() {
    for p in [2u32, 3, 8, 13] {
        let topo = star(p, L).unwrap();
        let s = build("ring", Collective::Allreduce, &Layout::line(p)).unwrap();
        let (r, end) = run(&topo, s, 1 << 20);
        assert_eq!(end, RunEnd::Stopped);
        assert!(r.verified, "{:?}", r.mismatch);
        assert_eq!(r.messages, 2 * (p as u64 - 1) * p as u64);
        // Bandwidth bound: every rank sends 2(p-1)/p of the vector through its one link.
        let lower = (2.0 * (p - 1) as f64 / p as f64) * (1 << 20) as f64 * 8.0 / 400e9;
        let t = r.runtime_ps().unwrap() as f64 * 1e-12;
        assert!(t > lower && t < 1.5 * lower + 2.0 * (p as f64) * 2e-6, "p={p}: {t} s vs bound {lower}");
    }
    let topo = torus(&[4, 4], L).unwrap();
    let s = build("ring", Collective::ReduceScatter, &Layout::line(16)).unwrap();
    let (r, _) = run(&topo, s, 1 << 16);
    assert!(r.verified, "{:?}", r.mismatch);
}

#[test]
fn a_wrong_schedule_is_caught_by_the_fingerprints() {
    let topo = star(4, L).unwrap();
    let mut s = build("ring", Collective::Allreduce, &Layout::line(4)).unwrap();
    // Turn one reduction into a copy: a contribution is lost.
    s.programs[1].steps[0].recvs[0].op = Some(RecvOp::Copy);
    let (r, _) = run(&topo, s, 4096);
    assert!(!r.verified);
    assert!(r.mismatch.unwrap().contains("expected"));
}

/// Every name of the algorithm registry in a scenario file (its first collective): parsed,
/// resolved to a variant, run at packet level with every rank's result verified, on a 4x2 torus
/// and (names that build on 1D) a 6-host star; an unknown name is an error naming the field and every known name.
#[test]
fn every_registry_name_runs_from_a_scenario() {
    use reducelab_sched::registry;
    // Each name runs its first collective: allreduce, or all-to-all for the all-to-all algorithms.
    let scenario = |topology: &str, name: &str| {
        let coll = registry::find(name).map_or("allreduce", |a| a.collectives()[0]);
        format!("name = \"r\"\n[topology]\n{topology}\nbandwidth_gbps = 100\nlatency_ns = 100\n[[traffic]]\nkind = \"collective\"\nalgorithm = \"{name}\"\ncollective = \"{coll}\"\nbytes = 6000\n")
    };
    let topologies = [("kind = \"torus\"\ndims = [4, 2]", 2u32), ("kind = \"star\"\nhosts = 6", 1)];
    let mut runs = 0;
    for a in registry::all() {
        for (topo, dims) in topologies {
            if a.resolves_to().iter().any(|v| registry::find(v).unwrap().min_dims > dims) {
                continue;
            }
            let out = reducelab_sim::run_scenario_str(&scenario(topo, a.name), &Default::default())
                .unwrap_or_else(|e| panic!("{} on {topo}: {e}", a.name));
            let s: serde_json::Value = serde_json::from_str(&out.summary_json).unwrap();
            let ran = s["traffic"][0]["algorithm"].as_str().unwrap();
            assert!(a.resolves_to().contains(&ran), "{} ran {ran}", a.name);
            let (count, verified) =
                (s["messages"]["count"].as_u64().unwrap(), s["messages"]["verified"].as_u64().unwrap());
            assert!(count > 0 && verified == count, "{} on {topo}: {verified} of {count} verified", a.name);
            runs += 1;
        }
    }
    assert!(runs >= 2 * registry::all().len() - 1, "{runs}");
    let e = reducelab_sim::run_scenario_str(&scenario(topologies[0].0, "warp-drive"), &Default::default()).unwrap_err();
    assert_eq!(e.field, "traffic[0].algorithm");
    assert!(registry::names().iter().all(|n| e.reason.contains(n)), "{}", e.reason);
}

// ---------------------------------------------------------------------------------------------
// MSCCL XML programs as collective traffic (docs/workloads.md, "MSCCL XML").

fn examples_dir() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scenarios/examples")
}

/// The shipped XML is the generator's output, so it cannot rot.
#[test]
fn the_shipped_msccl_example_is_the_generators_output() {
    let committed = std::fs::read_to_string(examples_dir().join("msccl_allpairs_8.xml")).unwrap();
    assert_eq!(committed, reducelab_sched::msccl::allpairs_allreduce_xml(8).unwrap());
}

/// The all-pairs example runs verified at packet level and at flow level, under its XML name,
/// in two steps (an analytical check: each rank sends 2·7/8 of the vector).
#[test]
fn the_msccl_allpairs_example_runs_on_both_backends() {
    let path = examples_dir().join("msccl_allpairs.toml");
    let mut runtimes = Vec::new();
    for backend in ["packet", "flow"] {
        let mut file = reducelab_sim::parse(&std::fs::read_to_string(&path).unwrap()).unwrap();
        file.base_dir = Some(examples_dir());
        file.run.backend = Some(if backend == "flow" {
            reducelab_sim::scenario::Backend::Flow
        } else {
            reducelab_sim::scenario::Backend::Packet
        });
        let sc = file.resolve(None).unwrap_or_else(|e| panic!("{backend}: {e}"));
        let out = reducelab_sim::run_scenario(sc, &Default::default()).unwrap();
        let summary: serde_json::Value = serde_json::from_str(&out.summary_json).unwrap();
        let t = &summary["traffic"][0];
        assert_eq!(t["algorithm"], "msccl:allpairs-8", "{backend}");
        assert_eq!(t["ranks"], 8);
        if backend == "packet" {
            assert_eq!(t["verified"], true, "{t}");
        }
        runtimes.push(t["runtime_ps"].as_u64().unwrap());
    }
    // 2 · 7/8 · 256 KiB at 100 Gb/s is 36.7 us of serialisation at every host.
    let floor_ps = 2 * 7 * 262_144 / 8 * 8 * 10;
    for r in &runtimes {
        assert!(*r >= floor_ps && *r < 2 * floor_ps, "runtime {r} ps, floor {floor_ps} ps");
    }
}

/// An MSCCL all-to-all (msccl-tools' all-pairs shape, out of place) runs verified at packet
/// level: every rank ends with every block sent to it. Each rank sends 7/8 of its buffer, so its
/// NIC's serialisation is a floor.
#[test]
fn an_msccl_all_to_all_runs_verified() {
    let dir = std::env::temp_dir().join(format!("reducelab-msccl-a2a-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("a2a.xml"), reducelab_sched::msccl::allpairs_alltoall_xml(8, 2)).unwrap();
    let text = "name = \"a2a\"\n[topology]\nkind = \"fat_tree_2\"\nleaves = 2\nhosts_per_leaf = 4\nspines = 2\nbandwidth_gbps = 100\nlatency_ns = 500\n[[traffic]]\nkind = \"collective\"\nmsccl = \"a2a.xml\"\ncollective = \"alltoall\"\nbytes = 262144\nhosts = \"all\"\n";
    let opts = reducelab_sim::RunOptions { base_dir: Some(dir.clone()), ..Default::default() };
    let out = reducelab_sim::run_scenario_str(text, &opts).unwrap();
    let t: serde_json::Value = serde_json::from_str(&out.summary_json).unwrap();
    let t = &t["traffic"][0];
    assert_eq!(
        (t["algorithm"].as_str(), t["verified"].as_bool()),
        (Some("msccl:alltoall-allpairs-8"), Some(true)),
        "{t}"
    );
    let floor_ps = 7 * 262_144 / 8 * 8 * 10;
    let r = t["runtime_ps"].as_u64().unwrap();
    assert!(r >= floor_ps && r < 3 * floor_ps, "runtime {r} ps, floor {floor_ps} ps");
    let e = reducelab_sim::run_scenario_str(&text.replace("\"alltoall\"", "\"allreduce\""), &opts).unwrap_err();
    assert_eq!(e.field, "traffic[0].collective");
    std::fs::remove_dir_all(&dir).unwrap();
}
